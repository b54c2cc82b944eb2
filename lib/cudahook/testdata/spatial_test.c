/* The spatial mode's decisions (src/spatial.c) from quota files as the host
 * writes them: exact expectations, no driver. Built by cudahook.mk with
 * spatial.c and quota.c alone; run by TestSpatialDecisions. Exit status 0 =
 * every check held. */
#include <stdio.h>
#include <string.h>
#include "spatial.h"

static int failed, checks;

#define EQ(got, want)                                                                                                  \
    do {                                                                                                               \
        long long g_ = (long long)(got), w_ = (long long)(want);                                                       \
        checks++;                                                                                                      \
        if (g_ != w_) {                                                                                                \
            failed++;                                                                                                  \
            printf("FAIL %s:%d: %s = %lld, want %lld\n", __func__, __LINE__, #got, g_, w_);                            \
        }                                                                                                              \
    } while (0)
#define HAS(s, sub)                                                                                                    \
    do {                                                                                                               \
        checks++;                                                                                                      \
        if (!strstr((s), (sub))) {                                                                                     \
            failed++;                                                                                                  \
            printf("FAIL %s:%d: \"%s\" lacks \"%s\"\n", __func__, __LINE__, (s), (sub));                               \
        }                                                                                                              \
    } while (0)

#define HEAD "vgpu-quota 3\ndriver-cuda /a\ndriver-nvml /b\nshared-dir /c\n"
#define U0   "GPU-5e3b6a2e-0000-4000-8000-000000000000"
#define U1   "GPU-5e3b6a2e-0000-4000-8000-000000000001"

static struct vgpu_quota q;

static int plan(const char *text, struct vgpu_spatial *s, char *err, size_t n)
{
    if (vgpu_quota_parse(text, strlen(text), &q, err, n) != 0) {
        failed++;
        printf("FAIL quota: %s\n", err);
        return -2;
    }
    return vgpu_spatial_plan(&q, s, err, n);
}

static void test_plan(void)
{
    struct vgpu_spatial s;
    char err[600] = "";

    /* time-sliced only: nothing to do */
    EQ(plan("vgpu-quota 2\ndriver-cuda /a\ndriver-nvml /b\nshared-dir /c\ndevice 0 " U0 " compute=30\n", &s, err,
            sizeof err),
       0);
    EQ(s.any, 0);
    EQ(vgpu_spatial_env_ok(&s, NULL, NULL, err, sizeof err), 0); /* no spatial device: any environment */
    /* one spatial device at 50 beside a time-sliced one */
    EQ(plan(HEAD "device 0 " U0 " memory=2147483648 compute=50 mode=spatial mps_pipe=/run/vgpu/mps\n"
                 "device 1 " U1 " compute=30\n",
            &s, err, sizeof err),
       0);
    EQ(s.any, 1);
    EQ(s.pct, 50);
    EQ(strcmp(s.pipe, "/run/vgpu/mps"), 0);
    /* no compute key: the whole GPU's threads */
    EQ(plan(HEAD "device 0 " U0 " mode=spatial mps_pipe=/run/vgpu/mps\n", &s, err, sizeof err), 0);
    EQ(s.pct, 100);
    /* two spatial devices: one percentage per process, the lower */
    EQ(plan(HEAD "device 0 " U0 " compute=70 mode=spatial mps_pipe=/run/vgpu/mps\n"
                 "device 1 " U1 " compute=40 mode=spatial mps_pipe=/run/vgpu/mps\n",
            &s, err, sizeof err),
       0);
    EQ(s.pct, 40);
    /* two pipe directories cannot be served by one process */
    EQ(plan(HEAD "device 0 " U0 " compute=70 mode=spatial mps_pipe=/run/vgpu/mps\n"
                 "device 1 " U1 " compute=40 mode=spatial mps_pipe=/run/vgpu/mps1\n",
            &s, err, sizeof err),
       -1);
    HAS(err, "/run/vgpu/mps and /run/vgpu/mps1");
}

static void test_pct(void)
{
    struct vgpu_spatial s = {1, "/run/vgpu/mps", 50, 0};

    EQ(vgpu_spatial_pct(&s, NULL), 50);   /* unset: the share */
    EQ(vgpu_spatial_pct(&s, "100"), 50);  /* a tenant that lifts its share: put back */
    EQ(vgpu_spatial_pct(&s, "51"), 50);   /* above by one */
    EQ(vgpu_spatial_pct(&s, "50"), 50);   /* the share */
    EQ(vgpu_spatial_pct(&s, "20"), 20);   /* lower: MPS lets a client lower its share */
    EQ(vgpu_spatial_pct(&s, "1"), 1);     /* the least */
    EQ(vgpu_spatial_pct(&s, "0"), 50);    /* not a share */
    EQ(vgpu_spatial_pct(&s, ""), 50);     /* empty */
    EQ(vgpu_spatial_pct(&s, "020"), 50);  /* zero padded: the driver might read it otherwise */
    EQ(vgpu_spatial_pct(&s, "20.5"), 50); /* fractions */
    EQ(vgpu_spatial_pct(&s, " 20"), 50);  /* spaces */
    EQ(vgpu_spatial_pct(&s, "-20"), 50);  /* signs */
    EQ(vgpu_spatial_pct(&s, "1000"), 50); /* too long */
    EQ(vgpu_spatial_pct(&s, "20x"), 50);  /* trailing text */
}

static void test_env_ok(void)
{
    struct vgpu_spatial s = {1, "/run/vgpu/mps", 50, 0};
    char err[600] = "";

    EQ(vgpu_spatial_env_ok(&s, "/run/vgpu/mps", "50", err, sizeof err), 0);
    EQ(vgpu_spatial_env_ok(&s, "/run/vgpu/mps", "10", err, sizeof err), 0);
    /* a dropped pipe directory (the driver would look in /tmp/nvidia-mps) */
    EQ(vgpu_spatial_env_ok(&s, NULL, "50", err, sizeof err), -1);
    HAS(err, "CUDA_MPS_PIPE_DIRECTORY is unset, the container's MPS pipe directory is /run/vgpu/mps");
    /* another daemon's directory */
    EQ(vgpu_spatial_env_ok(&s, "/tmp/mine", "50", err, sizeof err), -1);
    HAS(err, "CUDA_MPS_PIPE_DIRECTORY is \"/tmp/mine\"");
    EQ(vgpu_spatial_env_ok(&s, "/run/vgpu/mps/", "50", err, sizeof err), -1); /* exactly the quota's */
    /* a dropped or higher share */
    EQ(vgpu_spatial_env_ok(&s, "/run/vgpu/mps", NULL, err, sizeof err), -1);
    HAS(err, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE is unset, the container's share is 50");
    EQ(vgpu_spatial_env_ok(&s, "/run/vgpu/mps", "100", err, sizeof err), -1);
    HAS(err, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE is \"100\"");
    EQ(vgpu_spatial_env_ok(&s, "/run/vgpu/mps", "50.0", err, sizeof err), -1);
    /* what vgpu_spatial_pct puts in is always accepted */
    for (int i = 0; i <= 120; i++) {
        char v[8];
        snprintf(v, sizeof v, "%d", i);
        snprintf(v, sizeof v, "%d", vgpu_spatial_pct(&s, v));
        EQ(vgpu_spatial_env_ok(&s, "/run/vgpu/mps", v, err, sizeof err), 0);
    }
}

/* the share file's priority words become MPS's two levels: low (or a word
 * this library does not know) below normal, high and normal at normal; the
 * lowest spatial device holds, a time-sliced one counts for nothing */
static void test_priority(void)
{
    struct vgpu_spatial s;
    char err[600] = "";
    uint64_t w[VGPU_MAX_DEVICES] = {0};

    EQ(plan(HEAD "device 0 " U0 " compute=50 mode=spatial mps_pipe=/run/vgpu/mps\n"
                 "device 1 " U1 " compute=30\n",
            &s, err, sizeof err),
       0);
    EQ(vgpu_spatial_priority(&q, w), 0);
    w[0] = VGPU_PRIORITY_HIGH;
    EQ(vgpu_spatial_priority(&q, w), 0);
    w[0] = VGPU_PRIORITY_LOW;
    EQ(vgpu_spatial_priority(&q, w), 1);
    w[0] = 7;
    EQ(vgpu_spatial_priority(&q, w), 1);
    w[0] = VGPU_PRIORITY_HIGH;
    w[1] = VGPU_PRIORITY_LOW; /* time sliced: not MPS's */
    EQ(vgpu_spatial_priority(&q, w), 0);
    EQ(plan(HEAD "device 0 " U0 " compute=50 mode=spatial mps_pipe=/run/vgpu/mps\n"
                 "device 1 " U1 " compute=30 mode=spatial mps_pipe=/run/vgpu/mps\n",
            &s, err, sizeof err),
       0);
    EQ(vgpu_spatial_priority(&q, w), 1);

    /* exactly the plan's value, set or not by the tenant */
    s.prio = 1;
    EQ(vgpu_spatial_prio_ok(&s, "1", err, sizeof err), 0);
    EQ(vgpu_spatial_prio_ok(&s, "0", err, sizeof err), -1);
    HAS(err, "CUDA_MPS_CLIENT_PRIORITY is \"0\", the container's MPS client priority is 1");
    EQ(vgpu_spatial_prio_ok(&s, NULL, err, sizeof err), -1);
    HAS(err, "is unset");
    EQ(vgpu_spatial_prio_ok(&s, "1 ", err, sizeof err), -1);
    EQ(vgpu_spatial_prio_ok(&s, "", err, sizeof err), -1);
    s.prio = 0;
    EQ(vgpu_spatial_prio_ok(&s, "0", err, sizeof err), 0);
    EQ(vgpu_spatial_prio_ok(&s, "1", err, sizeof err), -1);
    s.any = 0; /* no spatial device: any environment */
    EQ(vgpu_spatial_prio_ok(&s, "5", err, sizeof err), 0);
}

static void test_affinity(void)
{
    CUexecAffinityParam in[2], out[3];
    int n;

    /* none given: the share */
    n = vgpu_spatial_affinity(NULL, 0, 66, out);
    EQ(n, 1);
    EQ(out[0].type, CU_EXEC_AFFINITY_TYPE_SM_COUNT);
    EQ(out[0].param.smCount.val, 66);
    /* the whole GPU asked: the share */
    memset(in, 0, sizeof in);
    in[0].type = CU_EXEC_AFFINITY_TYPE_SM_COUNT;
    in[0].param.smCount.val = 132;
    n = vgpu_spatial_affinity(in, 1, 66, out);
    EQ(n, 1);
    EQ(out[0].param.smCount.val, 66);
    /* less asked: kept */
    in[0].param.smCount.val = 8;
    n = vgpu_spatial_affinity(in, 1, 66, out);
    EQ(n, 1);
    EQ(out[0].param.smCount.val, 8);
    /* a type the driver will judge, then ours added */
    in[0].type = (CUexecAffinityType)7;
    in[0].param.smCount.val = 500;
    n = vgpu_spatial_affinity(in, 1, 66, out);
    EQ(n, 2);
    EQ(out[0].type, 7);
    EQ(out[0].param.smCount.val, 500);
    EQ(out[1].type, CU_EXEC_AFFINITY_TYPE_SM_COUNT);
    EQ(out[1].param.smCount.val, 66);
    /* two SM counts: both held */
    in[0].type = in[1].type = CU_EXEC_AFFINITY_TYPE_SM_COUNT;
    in[0].param.smCount.val = 100;
    in[1].param.smCount.val = 200;
    n = vgpu_spatial_affinity(in, 2, 66, out);
    EQ(n, 2);
    EQ(out[0].param.smCount.val, 66);
    EQ(out[1].param.smCount.val, 66);
}

int main(void)
{
    test_plan();
    test_pct();
    test_env_ok();
    test_priority();
    test_affinity();
    printf("%d checks, %d failed\n", checks, failed);
    return failed ? 1 : 0;
}
