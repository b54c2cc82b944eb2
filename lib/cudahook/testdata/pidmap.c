/* Differential harness for src/pidmap.c (pidmap_test.go): parses stdin as
 * the NVML stand-in parses the host's map; prints "n=N" then "HOST NS" lines,
 * or "n=-1". */
#include <stdio.h>
#include <stdlib.h>
#include "pidmap.h"

int main(void)
{
    static char buf[1 << 20];
    static struct vgpu_pidmap_entry e[VGPU_PIDMAP_MAX];
    size_t len = fread(buf, 1, sizeof buf, stdin);
    int n = vgpu_pidmap_parse(buf, len, e, VGPU_PIDMAP_MAX);

    printf("n=%d\n", n);
    for (int i = 0; i < n; i++)
        printf("%u %u\n", e[i].host, e[i].ns);
    return 0;
}
