/* vgpu-mpsclient PROGRAM [ARGS...]: becomes a client of the MPS control
 * daemon of $CUDA_MPS_PIPE_DIRECTORY as the simulated libcuda would (the
 * "client" line of test/simgpu/README.md, "MPS"), prints the daemon's
 * answer on stderr, then execs PROGRAM with the connection left open: the
 * same pid stays a client for as long as it lives.
 * vgpu-mpsclient -c LINE: sends the command LINE (quit, ...) as
 * `echo LINE | nvidia-cuda-mps-control` would, prints the answer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    const char *dir = getenv("CUDA_MPS_PIPE_DIRECTORY");
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    char answer[128];
    ssize_t n;
    int fd;

    if (argc < 2 || !dir || (strcmp(argv[1], "-c") == 0 && argc != 3)) {
        fprintf(stderr, "usage: CUDA_MPS_PIPE_DIRECTORY=DIR vgpu-mpsclient PROGRAM [ARGS...] | -c LINE\n");
        return 2;
    }
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s/control", dir);
    fd = socket(AF_UNIX, SOCK_STREAM, 0); /* no CLOEXEC: kept across exec */
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        perror("vgpu-mpsclient: connect");
        return 1;
    }
    if (strcmp(argv[1], "-c") == 0) {
        if (dprintf(fd, "%s\n", argv[2]) < 0) {
            perror("vgpu-mpsclient: write");
            return 1;
        }
        while ((n = read(fd, answer, sizeof answer)) > 0)
            fwrite(answer, 1, (size_t)n, stdout);
        return 0;
    }
    if (write(fd, "client\n", 7) != 7) {
        perror("vgpu-mpsclient: write");
        return 1;
    }
    n = read(fd, answer, sizeof answer - 1);
    if (n <= 0) {
        fprintf(stderr, "vgpu-mpsclient: no answer\n");
        return 1;
    }
    answer[n] = 0;
    fprintf(stderr, "vgpu-mpsclient: %s", answer);
    execvp(argv[1], argv + 1);
    perror("vgpu-mpsclient: exec");
    return 127;
}
