#!/usr/bin/env bash
# rootfs.sh DIR: a small glibc root filesystem for trying vgpu on the simulated
# GPU (make demo, make try): busybox, the host's glibc (so that nvidia-smi and
# the CUDA clients run), and two CUDA clients built from lib/cudahook/testdata:
#   cuda-fill  reaches the driver as cudart 12/13 does (cuGetProcAddress_v2
#              only); `cuda-fill fill alloc 256` allocates 256 MiB at a time
#              until the driver refuses, frees, and does it again
#   compute    launches 2 ms kernels in a window read from stdin
#              ("START_NS END_NS", CLOCK_MONOTONIC) and prints the device's
#              busy time in it (busy0_ns, window_ns)
#   mono       prints such a window
#   busy-share runs compute for 2 s and prints the device's busy share
# Run from the repository root; BUILD names the build directory.
set -euo pipefail
dir=$1
BUILD=${BUILD:-$PWD/build}
mkdir -p "$dir"/{bin,dev,proc,sys,etc,tmp,run,usr/bin,usr/lib,lib64,lib/x86_64-linux-gnu}
cp "$(command -v busybox)" "$dir/bin/busybox"
for a in sh ls cat echo head awk sed grep sleep true mkfifo; do ln -sf busybox "$dir/bin/$a"; done
cp -L /lib64/ld-linux-x86-64.so.2 "$dir/lib64/"
for l in libc.so.6 libdl.so.2 libpthread.so.0 librt.so.1 libm.so.6; do
  cp -L "/lib/x86_64-linux-gnu/$l" "$dir/lib/x86_64-linux-gnu/"
done
gcc -O2 -DROUTE_PROCADDR -Ilib/cudahook/include -o "$dir/usr/bin/cuda-fill" lib/cudahook/testdata/client.c -ldl -lpthread
# Linked against the simulator's libcuda.so.1: in a container the preloaded
# stand-in (SONAME libcuda.so.1) answers for it.
gcc -O1 -Ilib/cudahook/include -o "$dir/usr/bin/compute" lib/cudahook/testdata/compute.c \
  -L"$BUILD/simgpu/lib" -l:libcuda.so.1 -lpthread
# mono DELAY_MS WINDOW_MS: "START_NS END_NS" of a window that starts DELAY_MS
# from now on CLOCK_MONOTONIC (compute's stdin; busybox cannot read that clock).
printf '%s\n' '#include <stdio.h>' '#include <stdlib.h>' '#include <time.h>' \
  'int main(int c, char **v) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);' \
  '  unsigned long long n = t.tv_sec * 1000000000ULL + t.tv_nsec, s = n + 1000000ULL * atoll(c > 1 ? v[1] : "0");' \
  '  printf("%llu %llu\n", s, s + 1000000ULL * atoll(c > 2 ? v[2] : "1000")); return 0; }' > "$dir/tmp/mono.c"
gcc -O2 -o "$dir/usr/bin/mono" "$dir/tmp/mono.c" && rm "$dir/tmp/mono.c"
# busy-share: 2 ms kernels for 2 s, then the device's busy share in that
# window (compute reads its window once its context is made), so that a
# compute limit shows in one command.
cat > "$dir/usr/bin/busy-share" <<'SH'
#!/bin/sh
rm -f /tmp/w; : > /tmp/out; mkfifo /tmp/w
compute kernel < /tmp/w >> /tmp/out &
exec 3> /tmp/w
until grep -q ready /tmp/out 2>/dev/null; do sleep 0.05; done
mono 100 2000 >&3
exec 3>&-
wait
awk -F= '/^window_ns=/ { w = $2 } /^busy0_ns=/ { b = $2 } /^error=/ { print }
  END { if (w) printf "device busy %.1f %% of the window\n", 100 * b / w }' /tmp/out
SH
chmod 0755 "$dir/usr/bin/busy-share"
echo 'root:x:0:0:root:/:/bin/sh' > "$dir/etc/passwd"
