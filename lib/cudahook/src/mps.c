/* The spatial mode's entry points: cuInit, and the SM share of the contexts
 * made on a spatial device (context.c asks vgpu_spatial_cap).
 *
 * On a spatial device the driver itself, as a client of the GPU's MPS
 * server, holds the process to its share; launches there are not paced
 * (measure.c). What the library adds: the client settings the driver reads
 * (CUDA_MPS_PIPE_DIRECTORY, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE) are the
 * quota's, and CUDA_MPS_CLIENT_PRIORITY the share file's priority word (the
 * host's: the quota file stays as it was, and a library of an earlier
 * release never reads the word), put into the process environment before
 * the driver is loaded, and again before cuInit and context creation
 * (a tenant's higher share, other pipe directory or own priority is
 * replaced, a lower share kept); and after cuInit every spatial device must say
 * CU_DEVICE_ATTRIBUTE_MPS_ENABLED. A process the driver did not make an MPS
 * client (no control daemon answers in the pipe directory: it is down, or
 * the directory is not mounted) would run on the whole GPU: it fails closed
 * instead, with one line saying why. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "account.h"
#include "cuda_hooks.h"
#include "share.h"
#include "spatial.h"

typedef CUresult (*cuInit_t)(unsigned int);
typedef CUresult (*cuDeviceGetCount_t)(int *);

static struct vgpu_spatial plan;
static char plan_err[600];                                 /* set when the quota's spatial devices cannot be served */
static pthread_mutex_t env_mu = PTHREAD_MUTEX_INITIALIZER; /* our own setenv calls; never across a driver call */
static int verdict;                                        /* 0 unknown, 1 connected, -1 refused */

static void setup(void)
{
    uint64_t words[VGPU_MAX_DEVICES];

    if (vgpu_spatial_plan(&vgpu_q, &plan, plan_err, sizeof plan_err) != 0)
        return;
    if (plan.any) {
        /* no share file mapped reads normal: the host writes one for every
         * container, in a directory the tenant cannot change */
        vgpu_share_open();
        for (int i = 0; i < VGPU_MAX_DEVICES; i++) {
            struct vgpu_share_order o;

            vgpu_share_order(i, &o);
            words[i] = o.priority;
        }
        plan.prio = vgpu_spatial_priority(&vgpu_q, words);
        vgpu_spatial_env_apply();
        vgpu_log(VGPU_LOG_INFO, "spatial: MPS pipe directory %s, active thread percentage %s, client priority %d",
                 plan.pipe, getenv(VGPU_MPS_PCT_ENV), plan.prio);
    }
}

__attribute__((constructor)) static void register_setup(void) { vgpu_before_load(setup); }

void vgpu_spatial_env_apply(void)
{
    const char *cur;
    char want[8];

    if (!plan.any)
        return;
    pthread_mutex_lock(&env_mu);
    cur = getenv(VGPU_MPS_PIPE_ENV);
    if (!cur || strcmp(cur, plan.pipe) != 0)
        setenv(VGPU_MPS_PIPE_ENV, plan.pipe, 1);
    snprintf(want, sizeof want, "%d", vgpu_spatial_pct(&plan, getenv(VGPU_MPS_PCT_ENV)));
    cur = getenv(VGPU_MPS_PCT_ENV);
    if (!cur || strcmp(cur, want) != 0)
        setenv(VGPU_MPS_PCT_ENV, want, 1);
    snprintf(want, sizeof want, "%d", plan.prio);
    cur = getenv(VGPU_MPS_PRIO_ENV);
    if (!cur || strcmp(cur, want) != 0)
        setenv(VGPU_MPS_PRIO_ENV, want, 1);
    pthread_mutex_unlock(&env_mu);
}

/* one line, then no GPU for this process */
static CUresult refuse(const char *why)
{
    __atomic_store_n(&verdict, -1, __ATOMIC_RELEASE);
    vgpu_log(VGPU_LOG_ERROR, "%s; refusing GPU access", why);
    vgpu_close();
    return CUDA_ERROR_MPS_CONNECTION_FAILED;
}

/* after the driver's cuInit: every visible spatial device must be served by MPS */
static CUresult check_connected(void)
{
    char why[1200];
    int n = 0, on;
    CUresult r;

    if ((r = REALT(cuDeviceGetCount_t, cuDeviceGetCount)(&n)) != CUDA_SUCCESS)
        return r;
    for (CUdevice d = 0; d < n; d++) {
        int qi = vgpu_quota_index(d);
        if (qi < 0 || !vgpu_q.dev[qi].spatial)
            continue;
        on = 0;
        r = REALT(cuDeviceGetAttribute_t, cuDeviceGetAttribute)(&on, CU_DEVICE_ATTRIBUTE_MPS_ENABLED, d);
        if (r != CUDA_SUCCESS) {
            snprintf(why, sizeof why,
                     "GPU %s is shared spatially (MPS) but the driver cannot say whether this process is an MPS client "
                     "(CU_DEVICE_ATTRIBUTE_MPS_ENABLED: error %d; it needs a CUDA 12.4 driver)",
                     vgpu_q.dev[qi].uuid, (int)r);
            return refuse(why);
        }
        if (!on) {
            snprintf(why, sizeof why,
                     "GPU %s is shared spatially (MPS) but this process is not a client of its MPS server: no MPS "
                     "control daemon answers in %s (the host's vgpu node runs it; is it up?)",
                     vgpu_q.dev[qi].uuid, plan.pipe);
            return refuse(why);
        }
    }
    __atomic_store_n(&verdict, 1, __ATOMIC_RELEASE);
    return CUDA_SUCCESS;
}

CUresult cuInit(unsigned int flags)
{
    char err[1200];
    CUresult r;

    READY();
    if (plan_err[0])
        return refuse(plan_err);
    if (!plan.any)
        return REAL(cuInit)(flags);
    switch (__atomic_load_n(&verdict, __ATOMIC_ACQUIRE)) {
    case 1:
        return REAL(cuInit)(flags);
    case -1:
        return CUDA_ERROR_MPS_CONNECTION_FAILED;
    }
    vgpu_spatial_env_apply();
    if (vgpu_spatial_env_ok(&plan, getenv(VGPU_MPS_PIPE_ENV), getenv(VGPU_MPS_PCT_ENV), err, sizeof err) != 0 ||
        vgpu_spatial_prio_ok(&plan, getenv(VGPU_MPS_PRIO_ENV), err, sizeof err) != 0)
        return refuse(err); /* changed again behind our back, between the lines above */
    r = REAL(cuInit)(flags);
    if (r != CUDA_SUCCESS) {
        vgpu_log(VGPU_LOG_ERROR, "spatial: the driver's cuInit failed with error %d (MPS pipe directory %s)", (int)r,
                 plan.pipe);
        return r;
    }
    return check_connected();
}

int vgpu_spatial_cap(CUdevice dev, unsigned *cap)
{
    int qi, sms = 0;

    if (!plan.any || (qi = vgpu_quota_index(dev)) < 0 || !vgpu_q.dev[qi].spatial)
        return 0;
    if (REALT(cuDeviceGetAttribute_t, cuDeviceGetAttribute)(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) !=
            CUDA_SUCCESS ||
        sms <= 0)
        sms = 1; /* unknown: the least, never the whole GPU */
    *cap = (unsigned)sms;
    return 1;
}
