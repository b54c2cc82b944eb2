#!/usr/bin/env bash
# The whole product on a real NVIDIA machine (issue: a runc container started
# through vgpu-runtime, PyTorch inside held to its limits). Run as root from
# the repository root with the built binaries:
#   BIN=dir/with/vgpu-runtime+vgpu-discover+runc LIBDIR=dir/with/libvgpu-*.so test/gpu/e2e.sh [all|memory|compute]
# The container's root filesystem is this machine's own / (bind-mounted,
# read-only), so python3 and PyTorch are there; vgpu-runtime injects the
# device nodes, the driver libraries and the library. Driver root "/" (the
# driver's files may live in /usr/local/nvidia/lib64: lib_dirs covers it).
set -uo pipefail
REPO=$(pwd)
BIN=${BIN:-$REPO/build/bin}
LIBDIR=${LIBDIR:-$REPO/build/lib}
WHAT=${1:-all}
# DRIVER_ROOT / IPC_PATHS: another driver root (test/gpu/hostroot.sh);
# PERIOD: library.compute_period of the config (default: the library's).
SECS=${SECS:-12}
W=$(mktemp -d /tmp/vgpu-gpu-e2e-XXXXXX)
export PATH=$BIN:$PATH
# vgpu-runtime (no cgo) lists the GPUs with vgpu-discover from its own directory.
[ -x "$BIN/vgpu-discover" ] || { echo "$0: no vgpu-discover in $BIN (make build puts it beside vgpu-runtime)" >&2; exit 1; }
echo "== $(date -u +%FT%TZ) $(uname -r); runc: $(runc --version | head -1)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

. test/gpu/hostroot.sh
hostroot_setup

# ctr NAME ENV... -- ARGS...: run it in the foreground through vgpu-runtime.
# Its output also goes to $W/log, for the summary.
ctr() { local name=$1; bundle "$@"; { echo "\$ vgpu-runtime run $name  [$(grep -o '"VGPU_[A-Z_]*=[^"]*"' $W/$name/config.json | tr '\n' ' ')]"; vgpu-runtime --root $W/runc run -b $W/$name $name 2>&1; echo "[exit $?]"; } | tee -a $W/log; }

if [ "$WHAT" = all ] || [ "$WHAT" = memory ]; then
  echo "== no request: the container is unchanged and sees no GPU"
  ctr plain -- sh -c 'ls /dev/nvidia* 2>&1; python3 -c "import torch; print(\"cuda available:\", torch.cuda.is_available())" 2>&1 | tail -1; cat /run/vgpu/quota 2>&1'
  echo "== VGPU_MEMORY_LIMIT=8Gi"
  ctr mem VGPU_VISIBLE_DEVICES=0 VGPU_MEMORY_LIMIT=8Gi -- sh -c 'cat /run/vgpu/quota; ls /dev/nvidia*; nvidia-smi --query-gpu=memory.total,memory.used --format=csv; python3 test/gpu/torch_mem.py'
fi
if [ "$WHAT" = all ] || [ "$WHAT" = compute ]; then
  echo "== bf16 matmul: unlimited vGPU, then VGPU_COMPUTE_LIMIT=50 (interleaved, 3 rounds)"
  for r in $(seq ${ROUNDS:-3}); do
    ctr full$r VGPU_VISIBLE_DEVICES=0 -- python3 bench/gpu/matmul.py $SECS
    ctr half$r VGPU_VISIBLE_DEVICES=0 VGPU_MEMORY_LIMIT=8Gi VGPU_COMPUTE_LIMIT=50 -- python3 bench/gpu/matmul.py $SECS
  done
  echo "== two containers at once: 30 and 70"
  bundle c30 VGPU_VISIBLE_DEVICES=0 VGPU_MEMORY_LIMIT=4Gi VGPU_COMPUTE_LIMIT=30 -- sh -c "grep ^device /run/vgpu/quota; python3 bench/gpu/matmul.py $SECS; python3 -c 'import torch; print(\"c30 mem_get_info total GiB\", torch.cuda.mem_get_info()[1]/2**30)'"
  bundle c70 VGPU_VISIBLE_DEVICES=0 VGPU_MEMORY_LIMIT=12Gi VGPU_COMPUTE_LIMIT=70 -- sh -c "grep ^device /run/vgpu/quota; python3 bench/gpu/matmul.py $SECS; python3 -c 'import torch; print(\"c70 mem_get_info total GiB\", torch.cuda.mem_get_info()[1]/2**30)'"
  vgpu-runtime --root $W/runc run -b $W/c30 c30 > $W/c30.out 2>&1 &
  vgpu-runtime --root $W/runc run -b $W/c70 c70 > $W/c70.out 2>&1 &
  wait
  { sed 's/^/c30: /' $W/c30.out; sed 's/^/c70: /' $W/c70.out; } | tee -a $W/log
  echo "== summary"
  awk '/^\$ vgpu-runtime run full/ {k="full"} /^\$ vgpu-runtime run half/ {k="half"} /^matmul_per_s/ && k {v[k]=v[k] " " $2} /^c30: matmul_per_s/ {a=$3} /^c70: matmul_per_s/ {b=$3}
    END {print "unlimited:" v["full"]; print "limit 50: " v["half"]; if (a && b) printf "30:70 pair: %.1f : %.1f\n", 100*a/(a+b), 100*b/(a+b)}' $W/log
fi
