/* Logging: stderr, prefixed "vgpu:", quiet by default (errors and warnings). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "vgpu.h"

int vgpu_log_level = VGPU_LOG_WARN;

void vgpu_log(int level, const char *fmt, ...)
{
    char buf[1024];
    size_t n;
    va_list ap;

    if (level > vgpu_log_level)
        return;
    memcpy(buf, "vgpu: ", 6);
    va_start(ap, fmt);
    vsnprintf(buf + 6, sizeof buf - 7, fmt, ap);
    va_end(ap);
    n = strlen(buf);
    buf[n++] = '\n';
    /* one write(2) so that lines of concurrent processes do not interleave */
    if (write(2, buf, n) < 0) {
        /* nothing sensible to do */
    }
}

uint64_t vgpu_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
