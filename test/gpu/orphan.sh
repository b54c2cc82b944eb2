#!/usr/bin/env bash
# Memory held under an exited pid on a real NVIDIA GPU (docs/security.md,
# docs/node.md "Memory the processes do not explain"). Run as root from the
# repository root:
#   test/gpu/orphan.sh                         (part 1 only: the bare driver)
#   BIN=dir/with/vgpu+vgpu-runtime+vgpu-discover+vgpu-node+runc LIBDIR=build/lib test/gpu/orphan.sh
# 1. the driver: a process allocates 4 GiB with cuMemAlloc, forks a child
#    that keeps the driver's descriptors and sleeps, and exits. PASS when,
#    after the parent is gone, NVML (nvidia-smi --query-compute-apps and
#    nvmlDeviceGetComputeRunningProcesses through ctypes) lists the exited
#    parent's pid with at least 4096 MiB and the GPU's used memory grew by at
#    least 4096 MiB; and when, the child killed, the pid is no longer listed
#    and used memory is back within 256 MiB of where it started.
# 2. under vgpu node (when BIN holds runc and vgpu-node): a runc container
#    limited to 6 GiB runs the same program twice through the real driver
#    by its path (4 GiB each, 8 GiB and more in all under two exited pids).
#    PASS when vgpu node records a kill-container event for it naming the
#    exited pid, the container stops, and used memory is back within 256 MiB
#    of where it started.
# Everything is written to $OUT (default: a temporary directory); the whole
# run takes about a minute.
set -uo pipefail
REPO=$(pwd)
BIN=${BIN:-}
LIBDIR=${LIBDIR:-$REPO/build/lib}
W=$(mktemp -d /tmp/vgpu-gpu-orphan-XXXXXX)
OUT=${OUT:-$W}
[ -n "$BIN" ] && export PATH=$BIN:$PATH
T="timeout -k 5"
echo "== $(date -u +%FT%TZ) $(uname -r)"
$T 20 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
mkdir -p $REPO/build
cc -O2 -o $REPO/build/gpu-orphan test/gpu/orphan.c -ldl || { echo "FAIL: cannot build test/gpu/orphan.c"; exit 1; }
fail=0

used_mib() { $T 20 nvidia-smi -i 0 --query-gpu=memory.used --format=csv,noheader,nounits | tr -d ' '; }
# the driver's process list by NVML itself (pynvml may be missing: ctypes)
nvml_procs() {
  $T 20 python3 - <<'PY'
import ctypes
n = ctypes.CDLL("libnvidia-ml.so.1")
class P(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong), ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]
assert n.nvmlInit_v2() == 0
d = ctypes.c_void_p()
assert n.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(d)) == 0
cnt = ctypes.c_uint(64)
arr = (P * 64)()
rc = n.nvmlDeviceGetComputeRunningProcesses_v3(d, ctypes.byref(cnt), arr)
print("nvml rc=%d" % rc)
for i in range(cnt.value if rc == 0 else 0):
    print("nvml pid=%d used_mib=%d" % (arr[i].pid, arr[i].usedGpuMemory >> 20))
n.nvmlShutdown()
PY
}
show() { # LABEL
  echo "-- $1: used $(used_mib) MiB"
  $T 20 nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader
  nvml_procs
}

echo "== 1. the driver alone"
BASE=$(used_mib)
show "before"
$T 60 $REPO/build/gpu-orphan 4096 1 > $W/orphan1.out 2>&1
cat $W/orphan1.out
PARENT=$(sed -n 's/.*parent_pid=\([0-9]*\).*/\1/p' $W/orphan1.out)
CHILD=$(sed -n 's/.*child_pid=\([0-9]*\).*/\1/p' $W/orphan1.out)
if [ -z "$PARENT" ] || [ -z "$CHILD" ]; then echo "FAIL: the program did not allocate and fork"; exit 1; fi
for _ in $(seq 50); do kill -0 "$PARENT" 2>/dev/null || break; sleep 0.1; done
kill -0 "$PARENT" 2>/dev/null && echo "note: parent $PARENT still alive"
sleep 1
show "parent $PARENT exited, child $CHILD holds the descriptors" | tee $W/after-exit.txt
NOW=$(used_mib)
LISTED=$(sed -n "s/^nvml pid=$PARENT used_mib=\([0-9]*\)/\1/p" $W/after-exit.txt)
if [ -n "$LISTED" ] && [ "$LISTED" -ge 4096 ] && [ $((NOW - BASE)) -ge 4096 ]; then
  echo "PASS driver: NVML lists the exited parent $PARENT with $LISTED MiB; used grew by $((NOW - BASE)) MiB"
else echo "FAIL driver: exited parent listed with '${LISTED}' MiB; used grew by $((NOW - BASE)) MiB"; fail=1; fi
kill -KILL "$CHILD" 2>/dev/null
sleep 2
show "child killed" | tee $W/after-kill.txt
NOW=$(used_mib)
if ! grep -q "^nvml pid=$PARENT " $W/after-kill.txt && [ $((NOW - BASE)) -le 256 ]; then
  echo "PASS driver: with the child gone the memory is freed (used $NOW MiB, $BASE before)"
else echo "FAIL driver: with the child gone used is $NOW MiB ($BASE before)"; fail=1; fi

if [ -n "$BIN" ] && [ -x "$BIN/vgpu-node" ] && command -v runc > /dev/null; then
  echo "== 2. under vgpu node"
  . test/gpu/hostroot.sh
  hostroot_setup
  EV=$W/state/.node/events.jsonl
  vgpu-node --state-dir $W/state --interval 100ms > $W/node.log 2>&1 &
  NODE=$!
  trap 'kill $NODE 2>/dev/null; wait $NODE 2>/dev/null; cp $W/*.log $W/*.out $W/*.txt $OUT/ 2>/dev/null; cp $EV $OUT/ 2>/dev/null; hostroot_cleanup' EXIT
  for _ in $(seq 100); do [ -e $W/state/.node/node.json ] && break; sleep 0.1; done
  bundle orph VGPU_VISIBLE_DEVICES=0 VGPU_MEMORY_LIMIT=6Gi -- /bin/sh -c "$REPO/build/gpu-orphan 4096 1 driver; $REPO/build/gpu-orphan 4096 1 driver; exec sleep 600"
  $T 30 vgpu-runtime --root $W/runc run -d -b $W/orph orph > $W/orph.out 2>&1 || { echo "FAIL: run: $(cat $W/orph.out)"; fail=1; }
  for _ in $(seq 300); do grep -q '"kind":"kill-container"' $EV 2>/dev/null && break; sleep 0.1; done
  show "30 s after the container's start" | tee $W/under-node.txt
  echo "events:"; cat $EV 2>/dev/null
  grep -i "orphan\|exited\|explain" $W/node.log
  KILL=$(grep '"kind":"kill-container"' $EV 2>/dev/null | grep '"container":"orph"' | head -1)
  case "$KILL" in
  *exited*) echo "PASS node: the container was killed whole: $KILL" ;;
  *) echo "FAIL node: no kill-container event naming an exited pid"; fail=1 ;;
  esac
  for _ in $(seq 100); do $T 10 runc --root $W/runc state orph 2>/dev/null | grep -q '"stopped"' && break; sleep 0.1; done
  STATE=$($T 10 runc --root $W/runc state orph 2>/dev/null | sed -n 's/.*"status": "\([a-z]*\)".*/\1/p')
  sleep 2
  NOW=$(used_mib)
  if [ "$STATE" = stopped ] && [ $((NOW - BASE)) -le 256 ]; then
    echo "PASS node: the container stopped and its memory is freed (used $NOW MiB, $BASE before)"
  else echo "FAIL node: container '$STATE', used $NOW MiB ($BASE before)"; fail=1; fi
  $T 10 vgpu status --state-dir $W/state > $W/status.txt 2>&1
fi
cp $W/*.out $W/*.txt $OUT/ 2>/dev/null
echo "== result: $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
