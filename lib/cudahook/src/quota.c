/* Strict parser for quota file versions 1 to 3. Also compiled into a cgo package
 * (lib/cudahook/quotaparse) so that Go fuzzes exactly this code. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "quota.h"

/* same values as VGPU_LOG_* in vgpu.h; quota.c stays free of the library internals */
static const char *const levels[] = {"error", "warn", "info", "debug"};

static int fail(char *err, size_t errlen, int line, const char *fmt, ...)
{
    va_list ap;
    int n = line > 0 ? snprintf(err, errlen, "line %d: ", line) : 0;

    if (n < 0 || (size_t)n >= errlen)
        n = 0;
    va_start(ap, fmt);
    vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

/* decimal, no sign, no leading zeros (except "0"), no overflow */
static int parse_u64(const char *s, uint64_t *out)
{
    uint64_t v = 0;

    if (*s == 0 || (s[0] == '0' && s[1] != 0))
        return -1;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        if (v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
            return -1;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *out = v;
    return 0;
}

static int set_path(char *dst, const char *val, int line, const char *what, char *err, size_t errlen)
{
    if (dst[0])
        return fail(err, errlen, line, "%s given twice", what);
    if (val[0] != '/')
        return fail(err, errlen, line, "%s must be an absolute path", what);
    if (strlen(val) >= VGPU_PATH_MAX)
        return fail(err, errlen, line, "%s too long", what);
    strcpy(dst, val);
    return 0;
}

static int parse_device(struct vgpu_quota *q, char **f, int nf, int line, char *err, size_t errlen)
{
    struct vgpu_quota_dev *d;
    uint64_t idx, v;
    int i, seen_mem = 0, seen_comp = 0, seen_phase = 0, seen_creq = 0, seen_mreq = 0, seen_mode = 0, seen_pipe = 0;

    if (nf < 3 || nf > 10 || (q->version < 3 && nf > 8) || (q->version < 2 && nf > 6))
        return fail(err, errlen, line,
                    "device wants: device IDX UUID [memory=BYTES] [memory-request=BYTES] [compute=PCT] "
                    "[compute-request=PCT] [phase=PCT] [mode=spatial mps_pipe=PATH]");
    if (parse_u64(f[1], &idx) != 0)
        return fail(err, errlen, line, "bad device index \"%s\"", f[1]);
    if (idx != (uint64_t)q->ndev)
        return fail(err, errlen, line, "device index %s out of order (expected %d)", f[1], q->ndev);
    if (q->ndev >= VGPU_MAX_DEVICES)
        return fail(err, errlen, line, "more than %d devices", VGPU_MAX_DEVICES);
    if (strlen(f[2]) >= VGPU_UUID_MAX || (strncmp(f[2], "GPU-", 4) != 0 && strncmp(f[2], "MIG-", 4) != 0) ||
        f[2][4] == 0)
        return fail(err, errlen, line, "bad device UUID \"%s\"", f[2]);
    for (i = 0; i < q->ndev; i++)
        if (strcmp(q->dev[i].uuid, f[2]) == 0)
            return fail(err, errlen, line, "device %s listed twice", f[2]);
    d = &q->dev[q->ndev];
    memset(d, 0, sizeof *d);
    strcpy(d->uuid, f[2]);
    d->compute = 100;
    d->compute_request = -1;
    d->phase = -1;
    for (i = 3; i < nf; i++) {
        if (q->version >= 3 && strncmp(f[i], "mode=", 5) == 0 && !seen_mode) {
            if (strcmp(f[i] + 5, "spatial") != 0)
                return fail(err, errlen, line, "bad mode \"%s\" (spatial; time is written as no mode)", f[i] + 5);
            d->spatial = 1;
            seen_mode = 1;
        } else if (q->version >= 3 && strncmp(f[i], "mps_pipe=", 9) == 0 && !seen_pipe) {
            if (f[i][9] != '/' || strlen(f[i] + 9) >= VGPU_PATH_MAX)
                return fail(err, errlen, line, "bad mps_pipe \"%s\" (an absolute path shorter than %d bytes)", f[i] + 9,
                            VGPU_PATH_MAX);
            strcpy(d->mps_pipe, f[i] + 9);
            seen_pipe = 1;
        } else if (q->version >= 2 && strncmp(f[i], "memory-request=", 15) == 0 && !seen_mreq) {
            if (parse_u64(f[i] + 15, &v) != 0 || v == 0 || v > (uint64_t)INT64_MAX)
                return fail(err, errlen, line, "bad memory-request \"%s\" (bytes, > 0)", f[i] + 15);
            d->memory_request = v;
            seen_mreq = 1;
        } else if (q->version >= 2 && strncmp(f[i], "compute-request=", 16) == 0 && !seen_creq) {
            if (parse_u64(f[i] + 16, &v) != 0 || v > 100)
                return fail(err, errlen, line, "bad compute-request \"%s\" (percent, 0..100)", f[i] + 16);
            d->compute_request = (int)v;
            seen_creq = 1;
        } else if (strncmp(f[i], "memory=", 7) == 0 && !seen_mem) {
            if (parse_u64(f[i] + 7, &v) != 0 || v == 0)
                return fail(err, errlen, line, "bad memory \"%s\" (bytes, > 0)", f[i] + 7);
            d->has_memory = 1;
            d->memory = v;
            seen_mem = 1;
        } else if (strncmp(f[i], "compute=", 8) == 0 && !seen_comp) {
            if (parse_u64(f[i] + 8, &v) != 0 || v < 1 || v > 100)
                return fail(err, errlen, line, "bad compute \"%s\" (percent, 1..100)", f[i] + 8);
            d->compute = (int)v;
            seen_comp = 1;
        } else if (strncmp(f[i], "phase=", 6) == 0 && !seen_phase) {
            if (parse_u64(f[i] + 6, &v) != 0 || v > 99)
                return fail(err, errlen, line, "bad phase \"%s\" (percent of the period, 0..99)", f[i] + 6);
            d->phase = (int)v;
            seen_phase = 1;
        } else {
            return fail(err, errlen, line, "unknown or repeated device option \"%s\"", f[i]);
        }
    }
    if (d->compute_request > d->compute)
        return fail(err, errlen, line, "compute-request %d above compute %d", d->compute_request, d->compute);
    if (d->has_memory && d->memory_request > d->memory)
        return fail(err, errlen, line, "memory-request %llu above memory %llu", (unsigned long long)d->memory_request,
                    (unsigned long long)d->memory);
    if (seen_mode != seen_pipe)
        return fail(err, errlen, line, "mode=spatial and mps_pipe= go together");
    if (d->spatial && (seen_creq || seen_phase))
        return fail(err, errlen, line, "a spatial device takes no compute-request or phase");
    if (d->compute_request < 0)
        d->compute_request = d->compute; /* version 1, or none given: the request is the limit */
    q->ndev++;
    return 0;
}

int vgpu_quota_parse(const char *buf, size_t len, struct vgpu_quota *q, char *err, size_t errlen)
{
    char linebuf[VGPU_QUOTA_LINE_MAX];
    char *f[10];
    size_t pos = 0;
    int line = 0, have_version = 0, have_level = 0;
    uint64_t v;

    memset(q, 0, sizeof *q);
    q->log_level = 1; /* warn */
    q->compute_period_ms = -1;
    if (len > VGPU_QUOTA_MAX_BYTES)
        return fail(err, errlen, 0, "file larger than %d bytes", VGPU_QUOTA_MAX_BYTES);
    while (pos < len) {
        size_t end = pos, n;
        int nf = 0;
        char *p;

        while (end < len && buf[end] != '\n')
            end++;
        line++;
        n = end - pos;
        if (n >= sizeof linebuf)
            return fail(err, errlen, line, "line too long");
        memcpy(linebuf, buf + pos, n);
        linebuf[n] = 0;
        pos = end < len ? end + 1 : end;
        for (p = linebuf; p < linebuf + n; p++)
            if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
                return fail(err, errlen, line, "invalid character 0x%02x", (unsigned char)*p);
        if (n == 0 || linebuf[0] == '#')
            continue;
        /* fields separated by single spaces: no leading, trailing or double space */
        p = linebuf;
        for (;;) {
            char *sp = strchr(p, ' ');
            if (*p == 0 || p == sp)
                return fail(err, errlen, line, "fields must be separated by single spaces");
            if (nf == (int)(sizeof f / sizeof f[0]))
                return fail(err, errlen, line, "too many fields");
            f[nf++] = p;
            if (!sp)
                break;
            *sp = 0;
            p = sp + 1;
        }
        if (!have_version) {
            if (strcmp(f[0], "vgpu-quota") != 0 || nf != 2)
                return fail(err, errlen, line, "first directive must be \"vgpu-quota %d\"", VGPU_QUOTA_VERSION);
            if (f[1][0] < '1' || f[1][0] > '0' + VGPU_QUOTA_VERSION || f[1][1])
                return fail(err, errlen, line, "unsupported quota file version \"%s\" (this library knows 1 to %d)",
                            f[1], VGPU_QUOTA_VERSION);
            q->version = f[1][0] - '0';
            have_version = 1;
            continue;
        }
        if (strcmp(f[0], "device") == 0) {
            if (parse_device(q, f, nf, line, err, errlen) != 0)
                return -1;
            continue;
        }
        if (nf != 2)
            return fail(err, errlen, line, "\"%s\" wants exactly one value", f[0]);
        if (strcmp(f[0], "driver-cuda") == 0) {
            if (set_path(q->driver_cuda, f[1], line, "driver-cuda", err, errlen) != 0)
                return -1;
        } else if (strcmp(f[0], "driver-nvml") == 0) {
            if (set_path(q->driver_nvml, f[1], line, "driver-nvml", err, errlen) != 0)
                return -1;
        } else if (strcmp(f[0], "shared-dir") == 0) {
            if (set_path(q->shared_dir, f[1], line, "shared-dir", err, errlen) != 0)
                return -1;
        } else if (strcmp(f[0], "log-level") == 0) {
            int i, found = -1;
            if (have_level)
                return fail(err, errlen, line, "log-level given twice");
            for (i = 0; i < 4; i++)
                if (strcmp(f[1], levels[i]) == 0)
                    found = i;
            if (found < 0)
                return fail(err, errlen, line, "bad log-level \"%s\" (error, warn, info, debug)", f[1]);
            q->log_level = found;
            have_level = 1;
        } else if (strcmp(f[0], "compute-period") == 0) {
            if (q->compute_period_ms >= 0)
                return fail(err, errlen, line, "compute-period given twice");
            if (parse_u64(f[1], &v) != 0 || v > VGPU_PERIOD_MAX_MS)
                return fail(err, errlen, line, "bad compute-period \"%s\" (milliseconds, 0..%d)", f[1],
                            VGPU_PERIOD_MAX_MS);
            q->compute_period_ms = (int)v;
        } else {
            return fail(err, errlen, line, "unknown directive \"%s\"", f[0]);
        }
    }
    if (!have_version)
        return fail(err, errlen, 0, "empty (no \"vgpu-quota %d\" line)", VGPU_QUOTA_VERSION);
    if (!q->driver_cuda[0])
        return fail(err, errlen, 0, "missing driver-cuda");
    if (!q->driver_nvml[0])
        return fail(err, errlen, 0, "missing driver-nvml");
    if (!q->shared_dir[0])
        return fail(err, errlen, 0, "missing shared-dir");
    return 0;
}

int vgpu_quota_load(struct vgpu_quota *q, char *path, size_t pathlen, char *err, size_t errlen)
{
    static char buf[VGPU_QUOTA_MAX_BYTES + 1];
    const char *env;
    ssize_t n;
    size_t len = 0;
    int fd;

    snprintf(path, pathlen, "%s", VGPU_QUOTA_PATH);
    fd = open(VGPU_QUOTA_PATH, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
        /* only when the container path is absent (vgpu exec outside containers):
         * a process in a vgpu container cannot redirect us to another file */
        env = getenv("VGPU_QUOTA_FILE");
        if (!env || !*env)
            return fail(err, errlen, 0, "file does not exist and VGPU_QUOTA_FILE is not set");
        snprintf(path, pathlen, "%s", env);
        fd = open(env, O_RDONLY | O_CLOEXEC);
    }
    if (fd < 0)
        return fail(err, errlen, 0, "%s", strerror(errno));
    /* the static buffer is only used from inside pthread_once of one library */
    while (len < sizeof buf && (n = read(fd, buf + len, sizeof buf - len)) != 0) {
        if (n < 0) {
            if (errno == EINTR)
                continue;
            close(fd);
            return fail(err, errlen, 0, "%s", strerror(errno));
        }
        len += (size_t)n;
    }
    close(fd);
    return vgpu_quota_parse(buf, len, q, err, errlen);
}
