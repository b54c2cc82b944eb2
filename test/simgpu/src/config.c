/* Finding the simulator directory, parsing run/simgpu/config, and deciding which
 * devices this process can see (the device-node rule of docs/design.md). */
#define _GNU_SOURCE
#include "sim.h"

#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* $SIMGPU_DIR, else <dir of this library>/../../../run/simgpu, else /run/simgpu.
 * The library path is not resolved through symlinks on purpose: a root made of
 * symlinks to the build still finds its own run/simgpu. */
void sim_find_dir(void *addr_in_lib, char *out, size_t n)
{
    const char *e = getenv("SIMGPU_DIR");
    if (e && *e) {
        snprintf(out, n, "%s", e);
        return;
    }
    Dl_info info;
    if (dladdr(addr_in_lib, &info) && info.dli_fname && strchr(info.dli_fname, '/')) {
        char buf[PATH_MAX];
        snprintf(buf, sizeof buf, "%s", info.dli_fname);
        char *slash = strrchr(buf, '/');
        *slash = 0;
        char cand[PATH_MAX + 32];
        snprintf(cand, sizeof cand, "%s/../../../run/simgpu", buf[0] ? buf : "");
        if (is_dir(cand) && strlen(cand) < n) {
            snprintf(out, n, "%s", cand);
            return;
        }
    }
    snprintf(out, n, "/run/simgpu");
}

void sim_warn_once(const char *msg)
{
    /* once per process and library: noisy drivers hide the first useful line */
    static int said;
    if (__atomic_exchange_n(&said, 1, __ATOMIC_SEQ_CST))
        return;
    fprintf(stderr, "simgpu: %s\n", msg);
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    c = tolower(c);
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx -> 16 bytes */
int sim_parse_uuid(const char *s, unsigned char out[16])
{
    if (strncmp(s, "GPU-", 4) != 0) return -1;
    s += 4;
    static const int dash[] = {8, 13, 18, 23};
    int nb = 0, di = 0;
    for (int i = 0; i < 36; i++) {
        if (di < 4 && i == dash[di]) {
            if (s[i] != '-') return -1;
            di++;
            continue;
        }
        int h = hexval((unsigned char)s[i]), l;
        if (h < 0) return -1;
        i++;
        if (di < 4 && i == dash[di]) return -1;
        l = hexval((unsigned char)s[i]);
        if (l < 0) return -1;
        out[nb++] = (unsigned char)(h << 4 | l);
    }
    return (nb == 16 && s[36] == 0) ? 0 : -1;
}

/* [domain:]bus:device[.function], hex, any domain width (cuda uses 4, nvml 8) */
int sim_parse_pci(const char *s, unsigned *dom, unsigned *bus, unsigned *dev)
{
    unsigned a, b, c, f;
    char tail;
    if (sscanf(s, "%x:%x:%x.%x%c", &a, &b, &c, &f, &tail) == 4 ||
        sscanf(s, "%x:%x:%x%c", &a, &b, &c, &tail) == 3) {
        if (b > 0xff || c > 0x1f) return -1;
        *dom = a;
        *bus = b;
        *dev = c;
        return 0;
    }
    if (sscanf(s, "%x:%x.%x%c", &b, &c, &f, &tail) == 3 || sscanf(s, "%x:%x%c", &b, &c, &tail) == 2) {
        if (b > 0xff || c > 0x1f) return -1;
        *dom = 0;
        *bus = b;
        *dev = c;
        return 0;
    }
    return -1;
}

static int parse_u64(const char *s, uint64_t *v)
{
    if (!*s || !isdigit((unsigned char)*s)) return -1;
    errno = 0;
    char *end;
    unsigned long long x = strtoull(s, &end, 10);
    if (errno || *end) return -1;
    *v = x;
    return 0;
}

#define FAIL(...)                         \
    do {                                  \
        snprintf(why, whyn, __VA_ARGS__); \
        fclose(f);                        \
        return -1;                        \
    } while (0)

int sim_parse_config(const char *path, struct sim_config *cfg, char *why, size_t whyn)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->ctx_mem = 256ULL << 20;
    snprintf(cfg->cgroup_root, sizeof cfg->cgroup_root, "/sys/fs/cgroup");
    FILE *f = fopen(path, "re");
    if (!f) {
        snprintf(why, whyn, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    char line[1024];
    int lineno = 0, seen_header = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        size_t len = strlen(line);
        if (len == sizeof line - 1 && line[len - 1] != '\n') FAIL("%s:%d: line too long", path, lineno);
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r' || line[len - 1] == ' ')) line[--len] = 0;
        char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (!*p || *p == '#') continue;
        char *save, *tok = strtok_r(p, " \t", &save);
        if (!seen_header) {
            char *v = strtok_r(NULL, " \t", &save);
            if (strcmp(tok, "simgpu") != 0 || !v || strcmp(v, "1") != 0 || strtok_r(NULL, " \t", &save))
                FAIL("%s:%d: first directive must be \"simgpu 1\"", path, lineno);
            seen_header = 1;
            continue;
        }
        if (strcmp(tok, "context-memory") == 0) {
            char *v = strtok_r(NULL, " \t", &save);
            if (!v || parse_u64(v, &cfg->ctx_mem) || strtok_r(NULL, " \t", &save))
                FAIL("%s:%d: context-memory needs one number of bytes", path, lineno);
        } else if (strcmp(tok, "cgroup-root") == 0) {
            char *v = strtok_r(NULL, " \t", &save);
            if (!v || v[0] != '/' || strlen(v) >= sizeof cfg->cgroup_root || strtok_r(NULL, " \t", &save))
                FAIL("%s:%d: cgroup-root needs one absolute path", path, lineno);
            snprintf(cfg->cgroup_root, sizeof cfg->cgroup_root, "%s", v);
        } else if (strcmp(tok, "cgroup-v2-only") == 0) {
            if (strtok_r(NULL, " \t", &save)) FAIL("%s:%d: cgroup-v2-only takes no value", path, lineno);
            cfg->cgroup_v2_only = 1;
        } else if (strcmp(tok, "device") == 0) {
            if (cfg->ndev >= SIM_MAX_DEV) FAIL("%s:%d: more than %d devices", path, lineno, SIM_MAX_DEV);
            int idx = cfg->ndev;
            struct sim_devcfg *d = &cfg->dev[idx];
            snprintf(d->name, sizeof d->name, "NVIDIA H100 (simulated)");
            snprintf(d->uuid, sizeof d->uuid, "GPU-5e3b6a2e-0000-4000-8000-%012x", idx);
            d->sms = 132;
            d->pci_bus = 0x19 + (unsigned)idx;
            d->minor = idx;
            int have_mem = 0;
            char *kv;
            while ((kv = strtok_r(NULL, " \t", &save))) {
                char *eq = strchr(kv, '=');
                if (!eq) FAIL("%s:%d: expected key=value, got \"%s\"", path, lineno, kv);
                *eq = 0;
                const char *k = kv, *v = eq + 1;
                uint64_t n;
                if (strcmp(k, "name") == 0) {
                    if (!*v || strlen(v) >= sizeof d->name) FAIL("%s:%d: bad name", path, lineno);
                    snprintf(d->name, sizeof d->name, "%s", v);
                    for (char *c = d->name; *c; c++)
                        if (*c == '_') *c = ' '; /* fields cannot hold spaces */
                } else if (strcmp(k, "uuid") == 0) {
                    unsigned char b[16];
                    if (sim_parse_uuid(v, b)) FAIL("%s:%d: bad uuid \"%s\"", path, lineno, v);
                    snprintf(d->uuid, sizeof d->uuid, "%s", v);
                } else if (strcmp(k, "memory") == 0) {
                    if (parse_u64(v, &d->memory) || d->memory == 0) FAIL("%s:%d: bad memory \"%s\"", path, lineno, v);
                    have_mem = 1;
                } else if (strcmp(k, "reserved") == 0) {
                    if (parse_u64(v, &d->reserved)) FAIL("%s:%d: bad reserved \"%s\"", path, lineno, v);
                } else if (strcmp(k, "sms") == 0) {
                    if (parse_u64(v, &n) || n == 0 || n > 4096) FAIL("%s:%d: bad sms \"%s\"", path, lineno, v);
                    d->sms = (int)n;
                } else if (strcmp(k, "pci") == 0) {
                    if (sim_parse_pci(v, &d->pci_domain, &d->pci_bus, &d->pci_dev))
                        FAIL("%s:%d: bad pci \"%s\"", path, lineno, v);
                } else if (strcmp(k, "minor") == 0) {
                    if (parse_u64(v, &n) || n > 254) FAIL("%s:%d: bad minor \"%s\"", path, lineno, v);
                    d->minor = (int)n;
                } else {
                    FAIL("%s:%d: unknown device key \"%s\"", path, lineno, k);
                }
            }
            if (!have_mem) FAIL("%s:%d: device needs memory=BYTES", path, lineno);
            if (d->reserved >= d->memory) FAIL("%s:%d: reserved must be less than memory", path, lineno);
            for (int j = 0; j < idx; j++) {
                if (strcasecmp(cfg->dev[j].uuid, d->uuid) == 0) FAIL("%s:%d: duplicate uuid", path, lineno);
                if (cfg->dev[j].minor == d->minor) FAIL("%s:%d: duplicate minor", path, lineno);
            }
            sim_parse_uuid(d->uuid, d->uuid_bytes);
            cfg->ndev++;
        } else {
            FAIL("%s:%d: unknown directive \"%s\"", path, lineno, tok);
        }
    }
    if (!seen_header) FAIL("%s: empty, expected \"simgpu 1\"", path);
    fclose(f);
    return 0;
}

/* A node is reachable when open() succeeds (regular file stand-in) or gives ENXIO
 * (a char node of major 60/61 with no driver behind it). EPERM means the device
 * cgroup denies it, ENOENT that it is not in this mount namespace. */
static int node_reachable(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd >= 0) {
        close(fd);
        return 1;
    }
    return errno == ENXIO;
}

/* Returns 0 on success, -1 with a reason (config missing or bad, nvidiactl not
 * reachable). Zero visible devices is success with nvis == 0. */
int sim_load_env(void *addr_in_lib, struct sim_env *env, char *why, size_t whyn)
{
    memset(env, 0, sizeof *env);
    sim_find_dir(addr_in_lib, env->simdir, sizeof env->simdir);
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/config", env->simdir);
    if (sim_parse_config(path, &env->cfg, why, whyn)) return -1;
    snprintf(env->devdir, sizeof env->devdir, "%s/../../dev", env->simdir);
    snprintf(path, sizeof path, "%s/nvidiactl", env->devdir);
    if (!node_reachable(path)) {
        snprintf(why, whyn, "%s is not reachable: no driver", path);
        return -1;
    }
    for (int i = 0; i < env->cfg.ndev; i++) {
        snprintf(path, sizeof path, "%s/nvidia%d", env->devdir, env->cfg.dev[i].minor);
        if (node_reachable(path)) env->vis[env->nvis++] = i;
    }
    return 0;
}
