/* The spatial mode's decisions (spatial.h). Compiled alone into its test
 * (testdata/spatial_test.c). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "spatial.h"

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

int vgpu_spatial_plan(const struct vgpu_quota *q, struct vgpu_spatial *s, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->pct = 100;
    for (int i = 0; i < q->ndev; i++) {
        const struct vgpu_quota_dev *d = &q->dev[i];
        if (!d->spatial)
            continue;
        if (s->any && strcmp(s->pipe, d->mps_pipe) != 0)
            return fail(err, errlen,
                        "spatial devices name two MPS pipe directories, %s and %s (a process is the client of one MPS "
                        "control daemon)",
                        s->pipe, d->mps_pipe);
        s->any = 1;
        s->pipe = d->mps_pipe;
        if (d->compute < s->pct)
            s->pct = d->compute;
    }
    return 0;
}

/* 1..100 written plainly (no sign, space, zero padding or fraction), else -1:
 * what the driver might read differently is not the tenant's to keep */
static int plain_pct(const char *v)
{
    int n = 0;

    if (!v || !*v || *v == '0' || strlen(v) > 3)
        return -1;
    for (; *v; v++) {
        if (*v < '0' || *v > '9')
            return -1;
        n = n * 10 + (*v - '0');
    }
    return n >= 1 && n <= 100 ? n : -1;
}

int vgpu_spatial_pct(const struct vgpu_spatial *s, const char *cur)
{
    int v = plain_pct(cur);

    return v > 0 && v <= s->pct ? v : s->pct;
}

int vgpu_spatial_env_ok(const struct vgpu_spatial *s, const char *pipe, const char *pct, char *err, size_t errlen)
{
    int v;

    if (!s->any)
        return 0;
    if (!pipe || strcmp(pipe, s->pipe) != 0)
        return fail(err, errlen, "%s is %s%s%s, the container's MPS pipe directory is %s", VGPU_MPS_PIPE_ENV,
                    pipe ? "\"" : "", pipe ? pipe : "unset", pipe ? "\"" : "", s->pipe);
    v = plain_pct(pct);
    if (v < 0 || v > s->pct)
        return fail(err, errlen, "%s is %s%s%s, the container's share is %d (a whole number from 1 to %d)",
                    VGPU_MPS_PCT_ENV, pct ? "\"" : "", pct ? pct : "unset", pct ? "\"" : "", s->pct, s->pct);
    return 0;
}

int vgpu_spatial_priority(const struct vgpu_quota *q, const uint64_t *words)
{
    for (int i = 0; i < q->ndev; i++) {
        if (q->dev[i].spatial && words[i] != VGPU_PRIORITY_NORMAL && words[i] != VGPU_PRIORITY_HIGH)
            return 1;
    }
    return 0;
}

int vgpu_spatial_prio_ok(const struct vgpu_spatial *s, const char *prio, char *err, size_t errlen)
{
    if (!s->any || (prio && prio[0] == '0' + s->prio && prio[1] == 0))
        return 0;
    return fail(err, errlen, "%s is %s%s%s, the container's MPS client priority is %d", VGPU_MPS_PRIO_ENV,
                prio ? "\"" : "", prio ? prio : "unset", prio ? "\"" : "", s->prio);
}

int vgpu_spatial_affinity(const CUexecAffinityParam *in, int n, unsigned cap, CUexecAffinityParam *out)
{
    int k = 0, have = 0;

    for (int i = 0; in && i < n; i++) {
        out[k] = in[i];
        if (in[i].type == CU_EXEC_AFFINITY_TYPE_SM_COUNT) {
            have = 1;
            if (out[k].param.smCount.val > cap)
                out[k].param.smCount.val = cap;
        }
        k++;
    }
    if (!have) {
        memset(&out[k], 0, sizeof out[k]);
        out[k].type = CU_EXEC_AFFINITY_TYPE_SM_COUNT;
        out[k].param.smCount.val = cap;
        k++;
    }
    return k;
}
