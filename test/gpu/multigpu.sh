#!/usr/bin/env bash
# Several GPUs on a real machine with two or more NVIDIA GPUs: per-device
# limits, device selection, memory on the right physical GPU, NCCL across two
# limited GPUs. Run as root from the repository root after `make build`:
#   BIN=build/bin LIBDIR=build/lib test/gpu/multigpu.sh [all|exec|runc]
# exec: `vgpu exec --devices 1 --memory-limit 8Gi` (no container);
# runc: containers through vgpu-runtime + runc over this machine's own /
# (read-only), as test/gpu/e2e.sh does, so python3 and PyTorch are there.
# Prints PASS/FAIL lines and a summary; exits 1 if a check failed.
set -uo pipefail
REPO=$(pwd)
BIN=${BIN:-$REPO/build/bin}
LIBDIR=${LIBDIR:-$REPO/build/lib}
WHAT=${1:-all}
W=$(mktemp -d /tmp/vgpu-gpu-multi-XXXXXX)
export PATH=$BIN:$PATH PYTHONUNBUFFERED=1
# vgpu-runtime (no cgo) lists the GPUs with vgpu-discover from its own directory.
[ -x "$BIN/vgpu-discover" ] || { echo "$0: no vgpu-discover in $BIN (make build puts it beside vgpu-runtime)" >&2; exit 1; }
T=test/gpu/torch_multigpu.py
# NVLink multicast (NVLS, symmetric memory) stays off on the test machines:
# NCCL, PyTorch and NVSHMEM must not try it.
NCCL_ENV="NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1"

pass=0 fail=0
# check WHAT TEST...: TEST is evaluated (a [ ] expression)
check() { local what=$1; shift; if eval "$*"; then echo "PASS $what"; pass=$((pass + 1)); else echo "FAIL $what   [$*]"; fail=$((fail + 1)); fi; }
# val KEY FILE: the value of the first KEY=… line
val() { grep -m1 "^$1=" "$2" | cut -d= -f2-; }
# between X LO HI
between() { [ -n "$1" ] && [ "$1" -ge "$2" ] && [ "$1" -le "$3" ]; }
used() { nvidia-smi -i "$1" --query-gpu=memory.used --format=csv,noheader,nounits | tr -d ' '; }
lc() { tr 'A-Z' 'a-z'; }

echo "== $(date -u +%FT%TZ) $(uname -r)"
nvidia-smi --query-gpu=index,name,uuid,memory.total,memory.used --format=csv
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version())"
if [ "$(nvidia-smi -L | grep -c '^GPU ')" -lt 2 ]; then echo "need two GPUs"; exit 2; fi
U0=$(nvidia-smi -i 0 --query-gpu=uuid --format=csv,noheader)
U1=$(nvidia-smi -i 1 --query-gpu=uuid --format=csv,noheader)
u0=$(echo "$U0" | lc) u1=$(echo "$U1" | lc)

# held NAME RELEASE -- CMD...: runs CMD (which holds 4 GiB on its one GPU, prints
# held=1 and waits for the file RELEASE) in the background; while it holds,
# nvidia-smi on the host must show the memory on GPU 1 and not on GPU 0.
held() {
  local name=$1 rel=$2 out=$W/$1.out b0 b1 h0 h1 pid; shift 3
  b0=$(used 0) b1=$(used 1)
  "$@" >"$out" 2>&1 &
  pid=$!
  for _ in $(seq 900); do grep -q '^held=1' "$out" && break; kill -0 $pid 2>/dev/null || break; sleep 0.2; done
  h0=$(used 0) h1=$(used 1)
  nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv >"$W/$name.apps"
  touch "$rel"
  wait $pid
  cat "$out" "$W/$name.apps"
  echo "host memory.used MiB while held: GPU 0 $b0 -> $h0, GPU 1 $b1 -> $h1"
  check "$name: holds 4 GiB of an 8 GiB device" '[ "$(val held_mib $out)" = 4096 ] && [ "$(val held_total_mib $out)" = 8192 ]'
  check "$name: the memory is on host GPU 1 (+$((h1 - b1)) MiB)" "[ $((h1 - b1)) -ge 4096 ]"
  check "$name: host GPU 0 untouched (+$((h0 - b0)) MiB)" "[ $((h0 - b0)) -lt 256 ]"
}

# one NAME FILE: the output of `info; fill` in a process limited to host GPU 1, 8 GiB
one() {
  local n=$1 f=$2
  check "$n: PyTorch sees one device" '[ "$(val count $f)" = 1 ]'
  check "$n: of 8 GiB (mem_get_info, properties)" '[ "$(val meminfo_total_mib0 $f)" = 8192 ] && [ "$(val props_total_mib0 $f)" = 8192 ]'
  check "$n: it is host GPU 1" '[ "$(val uuid0 $f)" = "$u1" ] || [ "$(val uuid0 $f)" = unknown ]'
  check "$n: fills to the limit, minus the context" 'between "$(val fill_mib0 $f)" 7168 8192 && [ "$(val fill_error0 $f)" = OutOfMemoryError ]'
}

if [ "$WHAT" = all ] || [ "$WHAT" = exec ]; then
  X="vgpu exec --lib-dir $LIBDIR"
  echo "== vgpu exec --devices 1 --memory-limit 8Gi"
  $X --devices 1 --memory-limit 8Gi -- sh -c "python3 $T info; python3 $T fill" >$W/exec-one.out 2>&1
  cat $W/exec-one.out
  one exec-one $W/exec-one.out
  $X --devices 1 --memory-limit 8Gi -- nvidia-smi --query-gpu=uuid,memory.total --format=csv,noheader >$W/exec-smi.out 2>&1
  cat $W/exec-smi.out
  check "exec: nvidia-smi shows host GPU 1 only, 8192 MiB" '[ "$(grep ^GPU- $W/exec-smi.out)" = "$U1, 8192 MiB" ]'
  held exec-hold $W/exec-release -- $X --devices 1 --memory-limit 8Gi -- python3 $T hold 4 $W/exec-release
  echo "== vgpu exec --devices 0,1 --memory-limit 6Gi: NCCL all-reduce"
  env $NCCL_ENV $X --devices 0,1 --memory-limit 6Gi -- python3 $T allreduce >$W/exec-nccl.out 2>&1
  cat $W/exec-nccl.out
  f=$W/exec-nccl.out
  check "exec: all-reduce on both 6 GiB devices" '[ "$(val allreduce_done $f)" = 1 ] && [ "$(val allreduce_ok0 $f)" = 1 ] && [ "$(val allreduce_ok1 $f)" = 1 ]'
  check "exec: each rank sees 6 GiB" '[ "$(val allreduce_total_mib0 $f)" = 6144 ] && [ "$(val allreduce_total_mib1 $f)" = 6144 ]'
fi

if [ "$WHAT" = all ] || [ "$WHAT" = runc ]; then
  [ "$(id -u)" = 0 ] || { echo "runc part: run as root"; exit 2; }
  . test/gpu/hostroot.sh
  hostroot_setup
  # ctr NAME ENV... -- ARGS...: run it in the foreground; output in $W/NAME.out
  ctr() { local name=$1; bundle "$@"; vgpu-runtime --root $W/runc run -b $W/$name $name >$W/$name.out 2>&1; echo "[exit $?]" >>$W/$name.out; echo "\$ $name"; cat $W/$name.out; }

  echo "== runc: VGPU_VISIBLE_DEVICES=1 VGPU_MEMORY_LIMIT=8Gi"
  ctr one VGPU_VISIBLE_DEVICES=1 VGPU_MEMORY_LIMIT=8Gi -- sh -c \
    "echo devs=\$(ls /dev/nvidia[0-9]*); nvidia-smi --query-gpu=uuid,memory.total --format=csv,noheader | sed 's/^/smi=/'; python3 $T info; python3 $T fill"
  f=$W/one.out
  one runc-one $f
  check "runc-one: only /dev/nvidia1" '[ "$(val devs $f)" = /dev/nvidia1 ]'
  check "runc-one: nvidia-smi shows host GPU 1 only, 8192 MiB" '[ "$(grep -c ^smi= $f)" = 1 ] && [ "$(val smi $f)" = "$U1, 8192 MiB" ]'
  bundle hold VGPU_VISIBLE_DEVICES=1 VGPU_MEMORY_LIMIT=8Gi -- python3 $T hold 4 /run/vgpu/shared/release
  # /run/vgpu/shared inside is <state_dir>/<id>/shared on the host
  held runc-hold $W/state/hold/shared/release -- vgpu-runtime --root $W/runc run -b $W/hold hold

  echo "== runc: VGPU_VISIBLE_DEVICES=0,1 VGPU_MEMORY_LIMIT=0=4Gi,1=12Gi"
  ctr two VGPU_VISIBLE_DEVICES=0,1 VGPU_MEMORY_LIMIT=0=4Gi,1=12Gi $NCCL_ENV NCCL_SOCKET_IFNAME=lo -- sh -c \
    "cat /run/vgpu/quota; nvidia-smi --query-gpu=uuid,memory.total --format=csv,noheader | sed 's/^/smi=/'; python3 $T info; python3 $T fill;
     CUDA_VISIBLE_DEVICES=1,0 python3 $T info | sed 's/^/cvd10_/'; CUDA_VISIBLE_DEVICES=1 python3 $T info | sed 's/^/cvd1_/'; python3 $T allreduce"
  f=$W/two.out
  check "runc-two: nvidia-smi shows GPU 0 with 4096 MiB, then GPU 1 with 12288 MiB" \
    '[ "$(grep ^smi= $f | tr "\n" "|")" = "smi=$U0, 4096 MiB|smi=$U1, 12288 MiB|" ]'
  check "runc-two: PyTorch sees two devices" '[ "$(val count $f)" = 2 ]'
  check "runc-two: 4 GiB and 12 GiB" '[ "$(val meminfo_total_mib0 $f)" = 4096 ] && [ "$(val meminfo_total_mib1 $f)" = 12288 ]'
  check "runc-two: device 0 is host GPU 0, device 1 host GPU 1" '{ [ "$(val uuid0 $f)" = "$u0" ] && [ "$(val uuid1 $f)" = "$u1" ]; } || [ "$(val uuid0 $f)" = unknown ]'
  check "runc-two: each fills to its own limit" 'between "$(val fill_mib0 $f)" 3072 4096 && between "$(val fill_mib1 $f)" 11264 12288'
  check "runc-two: CUDA_VISIBLE_DEVICES=1,0 inside: 12 GiB first, then 4 GiB" '[ "$(val cvd10_meminfo_total_mib0 $f)" = 12288 ] && [ "$(val cvd10_meminfo_total_mib1 $f)" = 4096 ]'
  check "runc-two: CUDA_VISIBLE_DEVICES=1 inside: one device of 12 GiB" '[ "$(val cvd1_count $f)" = 1 ] && [ "$(val cvd1_meminfo_total_mib0 $f)" = 12288 ]'
  check "runc-two: NCCL all-reduce across the two limited devices" '[ "$(val allreduce_done $f)" = 1 ] && [ "$(val allreduce_ok0 $f)" = 1 ] && [ "$(val allreduce_ok1 $f)" = 1 ]'
  check "runc-two: ranks see 4 GiB and 12 GiB" '[ "$(val allreduce_total_mib0 $f)" = 4096 ] && [ "$(val allreduce_total_mib1 $f)" = 12288 ]'
else
  trap 'rm -rf $W' EXIT
fi

echo "== multigpu: $pass passed, $fail failed"
[ $fail = 0 ]
