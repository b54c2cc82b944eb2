#!/usr/bin/env bash
# Run on the GPU machine: facts the simulator and the library rely on.
set -x
cd "$(dirname "$0")" || exit 1
OUT=${OUT:-/tmp/probe}; mkdir -p $OUT
D=/usr/local/nvidia/lib64
ls -la $D | head -80 > $OUT/driver-dir.txt
nm -D --defined-only $D/libcuda.so.5* | awk '$2 ~ /^[TW]$/ {print $3}' | sort -u > $OUT/libcuda.syms
nm -D --defined-only $D/libnvidia-ml.so.5* | awk '$2 ~ /^[TW]$/ {print $3}' | sort -u > $OUT/libnvidia-ml.syms
wc -l $OUT/*.syms
readelf -d $D/libcuda.so.5* | head -30
readelf -V $D/libcuda.so.5* | head -20
nvidia-smi; nvidia-smi -q | head -40
ls -la /dev/nvidia*; cat /proc/devices | grep -i nv
I=/usr/local/cuda/include
gcc -DREAL -I$I abi_check.c -o /tmp/abi_real && /tmp/abi_real > /tmp/abi_real.txt
gcc -I../../lib/cudahook/include abi_check.c -o /tmp/abi_ours && /tmp/abi_ours > /tmp/abi_ours.txt
diff /tmp/abi_real.txt /tmp/abi_ours.txt > $OUT/abi-diff.txt && echo ABI-MATCH
cat $OUT/abi-diff.txt
gcc -I$I probe.c -o /tmp/probe -ldl && /tmp/probe > $OUT/probe.txt 2>&1; tail -8 $OUT/probe.txt
which ldd ldconfig unshare runc; uname -a; cat /etc/os-release | head -2; ldd --version | head -1
unshare -m -p -f --mount-proc true && echo UNSHARE-OK
ls /sys/fs/cgroup; mount | grep cgroup | head
python3 -c "import torch; print(torch.__version__, torch.version.cuda)"
