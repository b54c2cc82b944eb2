// The probe's controller: one call of the driver's checkpoint API on another
// process, timed. ctl PID lock|checkpoint|restore|unlock|state|suspend|resume
// [TIMEOUT_MS]; suspend = lock + checkpoint, resume = restore + unlock; tid =
// cuCheckpointProcessGetRestoreThreadId.
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static const char *state_name(int pid)
{
    CUprocessState s;
    CUresult r = cuCheckpointProcessGetState(pid, &s);
    if (r != CUDA_SUCCESS) {
        const char *n = "?";
        cuGetErrorName(r, &n);
        return n;
    }
    switch (s) {
    case CU_PROCESS_STATE_RUNNING:
        return "running";
    case CU_PROCESS_STATE_LOCKED:
        return "locked";
    case CU_PROCESS_STATE_CHECKPOINTED:
        return "checkpointed";
    case CU_PROCESS_STATE_FAILED:
        return "failed";
    default:
        return "other";
    }
}

static int step(int pid, const char *op, unsigned timeout_ms)
{
    CUresult r;
    double t0 = now_ms();
    if (!strcmp(op, "lock")) {
        CUcheckpointLockArgs a;
        memset(&a, 0, sizeof a);
        a.timeoutMs = timeout_ms;
        r = cuCheckpointProcessLock(pid, &a);
    } else if (!strcmp(op, "checkpoint")) {
        CUcheckpointCheckpointArgs a;
        memset(&a, 0, sizeof a);
        r = cuCheckpointProcessCheckpoint(pid, &a);
    } else if (!strcmp(op, "restore")) {
        CUcheckpointRestoreArgs a;
        memset(&a, 0, sizeof a);
        r = cuCheckpointProcessRestore(pid, &a);
    } else if (!strcmp(op, "unlock")) {
        CUcheckpointUnlockArgs a;
        memset(&a, 0, sizeof a);
        r = cuCheckpointProcessUnlock(pid, &a);
    } else {
        fprintf(stderr, "ctl: unknown operation %s\n", op);
        return 2;
    }
    const char *n = "?";
    cuGetErrorName(r, &n);
    printf("ctl pid=%d op=%s rc=%d %s ms=%.1f state=%s\n", pid, op, (int)r, n, now_ms() - t0, state_name(pid));
    fflush(stdout);
    return r == CUDA_SUCCESS ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: ctl PID lock|checkpoint|restore|unlock|state|tid|suspend|resume [TIMEOUT_MS]\n");
        return 2;
    }
    int pid = atoi(argv[1]);
    const char *op = argv[2];
    unsigned timeout = argc > 3 ? (unsigned)atoi(argv[3]) : 10000;
    CUresult r = cuInit(0);
    if (r != CUDA_SUCCESS) {
        printf("ctl: cuInit: %d\n", (int)r);
        return 3;
    }
    int drv = 0;
    cuDriverGetVersion(&drv);
    if (!strcmp(op, "state")) {
        printf("ctl pid=%d driver_api=%d state=%s\n", pid, drv, state_name(pid));
        return 0;
    }
    if (!strcmp(op, "tid")) {
        int tid = 0;
        CUresult r = cuCheckpointProcessGetRestoreThreadId(pid, &tid);
        const char *n = "?";
        cuGetErrorName(r, &n);
        printf("ctl pid=%d op=tid rc=%d %s tid=%d state=%s\n", pid, (int)r, n, tid, state_name(pid));
        return r == CUDA_SUCCESS ? 0 : 1;
    }
    double t0 = now_ms();
    int rc;
    if (!strcmp(op, "suspend")) {
        rc = step(pid, "lock", timeout);
        if (rc == 0)
            rc = step(pid, "checkpoint", 0);
    } else if (!strcmp(op, "resume")) {
        rc = step(pid, "restore", 0);
        if (rc == 0)
            rc = step(pid, "unlock", 0);
    } else {
        rc = step(pid, op, timeout);
    }
    printf("ctl pid=%d %s total_ms=%.1f rc=%d\n", pid, op, now_ms() - t0, rc);
    return rc;
}
