#!/usr/bin/env bash
# The whole product on a real NVIDIA machine (issue: a runc container started
# through vgpu-runtime, PyTorch inside held to its limits). Run as root from
# the repository root with the built binaries:
#   BIN=dir/with/vgpu-runtime+vgpu-discover+runc LIBDIR=dir/with/libvgpu-*.so test/gpu/e2e.sh [all|memory|compute|mixed]
# mixed (not part of all): a runc container at 70 and a
# `vgpu exec` at 30 (vgpu in BIN) busy on GPU 0 at once, ROUNDS times, each
# counting its own device time (bench/gpu/spin.cu, built with nvcc).
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
if [ "$WHAT" = mixed ]; then
  echo "== a container at 70 and a vgpu exec at 30 on GPU 0, busy at once (spin kernels)"
  # In $REPO, which the container sees (its /tmp is a tmpfs of its own).
  SPIN=$REPO/.vgpu-spin
  nvcc -O2 -arch=native -o $SPIN bench/gpu/spin.cu || exit 1
  for r in $(seq ${ROUNDS:-3}); do
    at=$(( $(date +%s) + 15 )) # both time the same window, after their warm-ups
    # The exec first, and the container once the exec's library has read its
    # quota: runc makes the container's mount point /run/vgpu/quota in this
    # machine's own / (the rootfs), where the library and vgpu exec look first.
    LOOP_AT=$at vgpu exec --lib-dir $LIBDIR --devices 0 --compute-limit 30 -- sh -c "grep ^device \$VGPU_QUOTA_FILE; $SPIN busy $SECS $W/ready-$r" > $W/e30-$r.out 2>&1 &
    for _ in $(seq 100); do [ -e $W/ready-$r ] && break; sleep 0.1; done
    bundle m70-$r VGPU_VISIBLE_DEVICES=0 VGPU_COMPUTE_LIMIT=70 LOOP_AT=$at -- sh -c "grep ^device /run/vgpu/quota; $SPIN busy $SECS"
    vgpu-runtime --root $W/runc run -b $W/m70-$r m70-$r > $W/m70-$r.out 2>&1 &
    wait
    hostroot_tidy
    { sed "s/^/container70 $r: /" $W/m70-$r.out; sed "s/^/exec30 $r: /" $W/e30-$r.out; } | tee -a $W/log
  done
  rm -f $SPIN
  echo "== summary (active %: device time counted on the device; target: 70 : 30 within 3 points)"
  awk '{sub(":", "", $2)} /^container70 [0-9]+ active_pct/ {c[$2]=$4} /^exec30 [0-9]+ active_pct/ {e[$2]=$4}
    END {for (r in c) printf "round %s: container %.1f, exec %.1f, sum %.1f\n", r, c[r], e[r], c[r] + e[r]}' $W/log | sort
fi

