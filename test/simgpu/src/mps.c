/* The MPS client side of the simulated libcuda, as the real driver behaves:
 * at cuInit the process becomes an MPS client when a control daemon answers
 * in $CUDA_MPS_PIPE_DIRECTORY (default /tmp/nvidia-mps), and runs without
 * MPS, silently, when none does. The endpoint is the simulated control
 * program's (test/simgpu/mpsd): a Unix stream socket <pipe>/control; the
 * line "client <priority>" gets "server <pid> <active thread percentage>"
 * and the connection stays open for the life of the process. The priority
 * is CUDA_MPS_CLIENT_PRIORITY as read at cuInit, once, as the real driver
 * does: "1" is below normal, anything else the default, normal (0); the
 * daemon records it per client. A client's share is
 * the lower of the server's percentage and its own
 * CUDA_MPS_ACTIVE_THREAD_PERCENTAGE; it sees that share of the SMs, in whole
 * TPCs (2 SMs), as the H200 did (30 % of 132 SMs: 38). Execution affinity
 * (an SM count per context) works only in an MPS client, and as measured on
 * the H200 (test/gpu/spatial.sh, driver 580): more than the client's share
 * is UNSUPPORTED_EXEC_AFFINITY, fewer than 8 SMs get 8, and a context asking
 * exactly its share reports the device's whole count. */
#define _GNU_SOURCE
#include "cuda_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* the client's own percentage: what the driver accepts, else none (-1) */
static int env_pct(void)
{
    const char *v = getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
    char *end;
    double f;

    if (!v || !*v) return -1;
    errno = 0;
    f = strtod(v, &end);
    if (errno || *end || f <= 0 || f > 100) return -1;
    return (int)(f + 0.5) < 1 ? 1 : (int)(f + 0.5);
}

/* the client priority the driver reads: 1 below normal, else 0 (normal) */
static int env_priority(void)
{
    const char *v = getenv("CUDA_MPS_CLIENT_PRIORITY");

    return v && strcmp(v, "1") == 0;
}

CUresult sim_mps_connect(void)
{
    const char *dir = getenv("CUDA_MPS_PIPE_DIRECTORY");
    struct sockaddr_un a;
    char line[128];
    size_t n = 0;
    int fd, spid, spct, own, k;

    g.mps = 0;
    if (!dir || !*dir) dir = "/tmp/nvidia-mps";
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    if ((size_t)snprintf(a.sun_path, sizeof a.sun_path, "%s/control", dir) >= sizeof a.sun_path)
        return CUDA_SUCCESS; /* no daemon can listen there */
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return CUDA_SUCCESS;
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd); /* no control daemon: the process runs without MPS */
        return CUDA_SUCCESS;
    }
    k = snprintf(line, sizeof line, "client %d\n", env_priority());
    if (write(fd, line, (size_t)k) != k) goto failed;
    while (n < sizeof line - 1) { /* the daemon may make us wait (another user's server) */
        ssize_t k = read(fd, line + n, 1);
        if (k <= 0) goto failed;
        if (line[n] == '\n') break;
        n++;
    }
    line[n] = 0;
    if (sscanf(line, "server %d %d", &spid, &spct) != 2 || spct < 0 || spct > 100) goto failed;
    own = env_pct();
    g.mps = 1;
    g.mps_fd = fd;
    g.mps_pct = own > 0 && own < spct ? own : spct;
    return CUDA_SUCCESS;
failed:
    close(fd); /* the daemon answers but cannot give us a server */
    return CUDA_ERROR_MPS_CONNECTION_FAILED;
}

int sim_mps_sms(int sms)
{
    int tpc;

    if (!g.mps || g.mps_pct >= 100 || sms < 2) return sms;
    tpc = sms / 2 * g.mps_pct / 100;
    return (tpc < 1 ? 1 : tpc) * 2;
}

int sim_mps_affinity(unsigned want, int sms, unsigned *got)
{
    unsigned have = (unsigned)sim_mps_sms(sms);

    if (want < 8) want = 8; /* the H200's least: 2 asked, 8 given */
    want += want & 1;       /* whole TPCs, rounded up as the driver documents */
    if (want > have) return -1;
    /* the H200 reported a context asking its whole share as holding the
     * whole device (its throughput was the share's) */
    *got = want == have ? (unsigned)sms : want;
    return 0;
}
