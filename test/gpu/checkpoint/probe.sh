#!/usr/bin/env bash
# The driver's checkpoint API (cuCheckpointProcessLock/Checkpoint/Restore/
# Unlock, CUDA 12.8+) on a real GPU: what suspending a process to host memory
# does, how long it takes, where the host copy is charged, and the cases it
# cannot handle. A go/no-go probe for suspending borrowers instead of killing
# them (docs/node.md, "Suspension probe"). Run as root from the repository
# root on the GPU machine (nvcc, PyTorch):
#   OUT=dir test/gpu/checkpoint/probe.sh            # all cases
#   CASES="plain big" test/gpu/checkpoint/probe.sh  # some
# With BIN=dir holding vgpu (and LIBDIR the library), the case `vgpu` runs the
# target under vgpu exec. Every step is under a timeout; nothing is left
# running. Each case prints its figures and a verdict line "case NAME: ...".
set -uo pipefail
REPO=$(pwd)
W=$(mktemp -d /tmp/vgpu-ckpt-XXXXXX)
OUT=${OUT:-$W}
D=$REPO/test/gpu/checkpoint
CASES=${CASES:-plain big graph managed spin noroom killsusp killrest torch vgpu states cglimit ctx2 ipc nccl mps}
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null
  [ -n "${MPSDIR:-}" ] && echo quit | CUDA_MPS_PIPE_DIRECTORY=$MPSDIR timeout -k 2 10 nvidia-cuda-mps-control 2>/dev/null
  for c in target ctl small; do rmdir "$CG/vgpuprobe-$c" 2>/dev/null; done
}
trap cleanup EXIT
echo "== $(date -u +%FT%TZ) $(uname -r)"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader
nvcc -O2 -arch=sm_90 -o "$W/target" "$D/target.cu" || exit 1
nvcc -O2 -o "$W/ctl" "$D/ctl.c" -lcuda || exit 1
nvcc -O2 -arch=sm_90 -o "$W/extra" "$D/extra.cu" -lcuda || exit 1

# Memory cgroups for the target and the controller, to see whose host memory
# holds a checkpoint.
CG=/sys/fs/cgroup
if grep -qw memory $CG/cgroup.controllers 2>/dev/null; then
  echo +memory > $CG/cgroup.subtree_control 2>/dev/null
  mkdir -p $CG/vgpuprobe-target $CG/vgpuprobe-ctl
  HAVE_CG=1
else
  echo "no cgroup v2 memory controller: host memory by /proc alone"
  HAVE_CG=0
fi
in_cg() { # NAME CMD...: CMD in cgroup NAME (when there is one)
  local c=$1; shift
  if [ $HAVE_CG = 1 ]; then sh -c 'echo $$ > "$0/cgroup.procs"; exec "$@"' "$CG/vgpuprobe-$c" "$@"; else "$@"; fi
}
gpu_used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1; }
cg_mib() { [ $HAVE_CG = 1 ] && echo $(($(cat "$CG/vgpuprobe-$1/memory.current") >> 20)) || echo -; }
rss_mib() { awk '/VmRSS/ {print int($2/1024)}' "/proc/$1/status" 2>/dev/null || echo gone; }
avail_mib() { awk '/MemAvailable/ {print int($2/1024)}' /proc/meminfo; }
figures() { # LABEL PID
  echo "  $1: gpu_used=$(gpu_used)MiB target_rss=$(rss_mib "$2")MiB cg_target=$(cg_mib target)MiB cg_ctl=$(cg_mib ctl)MiB host_avail=$(avail_mib)MiB"
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | sed 's/^/    nvml: /'
}
ctl() { timeout -k 5 "${CTL_TIMEOUT:-120}" "$W/ctl" "$@"; }
ctl_cg() { in_cg ctl timeout -k 5 "${CTL_TIMEOUT:-120}" "$W/ctl" "$@"; }
start_target() { # NAME ARGS...: starts the target in the target cgroup, sets TP
  local name=$1; shift
  in_cg target timeout -k 5 120 "$@" > "$W/$name.out" 2>&1 &
  TP=$!
  PIDS+=("$TP")
  for _ in $(seq 600); do grep -q '^ready' "$W/$name.out" 2>/dev/null && break; sleep 0.1; done
  grep '^ready' "$W/$name.out" || { echo "  target not ready"; cat "$W/$name.out"; return 1; }
  TPID=$(sed -n 's/^ready pid=\([0-9]*\).*/\1/p' "$W/$name.out")
}
finish() { # NAME: waits for the target, prints its last lines
  wait "$TP" 2>/dev/null; local rc=$?
  tail -3 "$W/$1.out" | sed 's/^/  target: /'
  echo "  target rc=$rc"
  return $rc
}
# suspend_resume NAME GIB HOLD_S: the common cycle, with figures and GiB/s
suspend_resume() {
  local name=$1 gib=$2 hold=$3
  sleep 2
  figures "before" "$TPID"
  if ! ctl_cg "$TPID" suspend 10000 | tee "$W/$name.susp"; then
    # A refused checkpoint leaves the process locked: let it run on.
    ctl "$TPID" unlock
    return 1
  fi
  figures "suspended" "$TPID"
  sleep "$hold"
  ctl "$TPID" state
  ctl_cg "$TPID" resume | tee "$W/$name.res"
  figures "restored" "$TPID"
  local sm rm
  sm=$(sed -n 's/.*op=checkpoint rc=0 .* ms=\([0-9.]*\).*/\1/p' "$W/$name.susp")
  rm=$(sed -n 's/.*op=restore rc=0 .* ms=\([0-9.]*\).*/\1/p' "$W/$name.res")
  [ -n "$sm" ] && [ -n "$rm" ] && awk -v g="$gib" -v s="$sm" -v r="$rm" \
    'BEGIN {printf "  rate: checkpoint %.1f GiB/s (%.0f ms), restore %.1f GiB/s (%.0f ms) for %s GiB\n", g/(s/1e3), s, g/(r/1e3), r, g}'
}
want() { case " $CASES " in *" $1 "*) return 0 ;; esac; return 1; }
base=$(gpu_used)
echo "baseline gpu_used=${base}MiB host_avail=$(avail_mib)MiB"

if want plain; then
  echo "== plain: 8 GiB, 2 streams verifying continuously, suspended 3 s"
  start_target plain "$W/target" 8 2 14 && suspend_resume plain 8 3
  finish plain && echo "case plain: contents intact after restore" || echo "case plain: FAILED"
fi
if want big; then
  echo "== big: 48 GiB, 4 streams"
  start_target big "$W/target" 48 4 30 && suspend_resume big 48 2
  finish big && echo "case big: contents intact" || echo "case big: FAILED"
fi
if want graph; then
  echo "== graph: 8 GiB verified by a CUDA graph in flight"
  start_target graph "$W/target" 8 1 12 graph && suspend_resume graph 8 2
  finish graph && echo "case graph: ok" || echo "case graph: FAILED"
fi
if want managed; then
  echo "== managed: 4 GiB + 256 MiB of managed memory"
  start_target managed "$W/target" 4 1 12 managed=256 && suspend_resume managed 4 2
  finish managed && echo "case managed: ok" || echo "case managed: FAILED (see above)"
fi
if want spin; then
  echo "== spin: a 6 s kernel in flight; lock with a 1 s timeout, then 10 s"
  start_target spin "$W/target" 1 1 10 spin_ms=6000 && {
    sleep 0.5
    ctl "$TPID" lock 1000
    ctl "$TPID" state
    ctl "$TPID" lock 10000 && ctl "$TPID" unlock
  }
  finish spin; echo "case spin: see the lock lines"
fi
if want noroom; then
  echo "== noroom: restore while another process holds the freed memory, then with room"
  start_target noroom "$W/target" 8 1 40 && {
    sleep 2
    ctl_cg "$TPID" suspend 10000
    free=$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits | head -1)
    hold=$(( (free - 4096) ))
    timeout -k 5 120 python3 -c "
import torch, time, os, sys
x = torch.empty($hold * (1 << 20), dtype=torch.uint8, device='cuda')
print('holder', os.getpid(), 'MiB', $hold, flush=True)
while os.path.exists('$W/hold'): time.sleep(0.1)
" > "$W/holder.out" 2>&1 &
    HP=$!; PIDS+=("$HP"); touch "$W/hold"
    for _ in $(seq 300); do grep -q holder "$W/holder.out" && break; sleep 0.1; done
    cat "$W/holder.out"
    figures "holder in place" "$TPID"
    ctl "$TPID" restore
    ctl "$TPID" state
    rm -f "$W/hold"; wait "$HP" 2>/dev/null
    figures "holder gone" "$TPID"
    ctl "$TPID" restore && ctl "$TPID" unlock
    # A process that could not be restored waits for good: end it now.
    ctl "$TPID" state | grep -q 'state=running' || kill -9 "$TPID"
  }
  finish noroom && echo "case noroom: restored after the first refusal" || echo "case noroom: NOT restorable after a refused restore"
  kill -9 "$TPID" 2>/dev/null; sleep 1
  echo "  after kill: gpu_used=$(gpu_used)MiB (baseline ${base})"
fi
if want killsusp; then
  echo "== killsusp: SIGKILL a checkpointed process"
  start_target killsusp "$W/target" 8 1 30 && {
    sleep 1
    ctl_cg "$TPID" suspend 10000
    figures "suspended" "$TPID"
    kill -9 "$TPID"; sleep 2
    figures "killed" "$TPID"
  }
  finish killsusp
  echo "case killsusp: gpu_used=$(gpu_used)MiB after (baseline ${base})"
fi
if want killrest; then
  echo "== killrest: SIGKILL a restored process"
  start_target killrest "$W/target" 8 1 30 && {
    sleep 1
    ctl_cg "$TPID" suspend 10000 && ctl_cg "$TPID" resume
    sleep 1
    kill -9 "$TPID"; sleep 2
  }
  finish killrest
  echo "case killrest: gpu_used=$(gpu_used)MiB after (baseline ${base})"
  timeout -k 5 60 python3 -c "import torch; x=torch.ones(1<<28, device='cuda'); print('next process allocates and computes:', x.sum().item())"
fi
if want torch; then
  echo "== torch: a deterministic PyTorch trainer (8 GiB ballast), undisturbed, then suspended mid-run for 3 s"
  timeout -k 5 120 python3 "$D/trainer.py" 400 8 > "$W/torch-a.out" 2>&1
  tail -1 "$W/torch-a.out"
  in_cg target timeout -k 5 120 python3 "$D/trainer.py" 400 8 > "$W/torch-b.out" 2>&1 &
  TP=$!; PIDS+=("$TP")
  for _ in $(seq 600); do grep -q '^step 100 ' "$W/torch-b.out" 2>/dev/null && break; sleep 0.1; done
  TPID=$(sed -n 's/^ready pid=\([0-9]*\).*/\1/p' "$W/torch-b.out")
  echo "  suspending at: $(grep -c '^step' "$W/torch-b.out") steps"
  ctl_cg "$TPID" suspend 10000 | tee "$W/torch.susp"
  figures "suspended" "$TPID"
  sleep 3
  ctl_cg "$TPID" resume | tee "$W/torch.res"
  wait "$TP"; echo "  trainer rc=$?"
  tail -1 "$W/torch-b.out"
  if diff <(grep '^step' "$W/torch-a.out") <(grep '^step' "$W/torch-b.out") > "$W/torch.diff"; then
    echo "case torch: loss sequence identical to the undisturbed run ($(grep -c '^step' "$W/torch-b.out") steps)"
  else
    echo "case torch: loss sequence DIFFERS: $(head -4 "$W/torch.diff")"
  fi
fi
if want vgpu && [ -x "${BIN:-/nonexistent}/vgpu" ]; then
  echo "== vgpu: the target under vgpu exec --memory-limit 12Gi"
  start_target vgpu "$BIN/vgpu" exec --lib-dir "${LIBDIR:-$REPO/build/lib}" --memory-limit 12Gi -- "$W/target" 8 2 14 && suspend_resume vgpu 8 2
  finish vgpu && echo "case vgpu: ok under the library" || echo "case vgpu: FAILED"
fi
if want states; then
  echo "== states: each call in each state, a process without CUDA, a pid that does not exist"
  start_target states "$W/target" 1 1 40 && {
    sleep 1
    for op in checkpoint restore unlock tid; do ctl "$TPID" $op; done
    ctl "$TPID" lock 0
    ctl "$TPID" lock 1000
    ctl "$TPID" restore
    ctl "$TPID" tid
    ctl "$TPID" checkpoint
    ctl "$TPID" checkpoint
    ctl "$TPID" lock 1000
    ctl "$TPID" unlock
    ctl "$TPID" tid
    ctl "$TPID" restore
    ctl "$TPID" unlock
  }
  sleep 60 & SP=$!; PIDS+=("$SP")
  ctl "$SP" state; ctl "$SP" lock 1000; ctl "$SP" tid
  ctl 4000000 state; ctl 4000000 lock 1000
  kill "$SP" 2>/dev/null
  finish states && echo "case states: contents intact" || echo "case states: FAILED"
fi
if want cglimit; then
  echo "== cglimit: 4 GiB on the GPU, its memory cgroup limited to 2 GiB, suspended"
  if [ $HAVE_CG = 1 ]; then
    mkdir -p $CG/vgpuprobe-small && echo $((2 << 30)) > $CG/vgpuprobe-small/memory.max
    sh -c 'echo $$ > "$0/cgroup.procs"; exec "$@"' "$CG/vgpuprobe-small" timeout -k 5 120 "$W/target" 4 1 30 > "$W/cglimit.out" 2>&1 &
    TP=$!; PIDS+=("$TP")
    for _ in $(seq 600); do grep -q '^ready' "$W/cglimit.out" 2>/dev/null && break; sleep 0.1; done
    TPID=$(sed -n 's/^ready pid=\([0-9]*\).*/\1/p' "$W/cglimit.out")
    sleep 1
    CTL_TIMEOUT=60 ctl "$TPID" suspend 10000; echo "  suspend rc=$?"
    sleep 1
    echo "  target alive: $(kill -0 "$TPID" 2>/dev/null && echo yes || echo no); memory.events: $(tr '\n' ' ' < $CG/vgpuprobe-small/memory.events)"
    echo "  cg_small=$(($(cat $CG/vgpuprobe-small/memory.current) >> 20))MiB gpu_used=$(gpu_used)MiB"
    ctl "$TPID" state
    ctl "$TPID" state | grep -q 'state=checkpointed' && { ctl "$TPID" resume; }
    ctl "$TPID" state | grep -q 'state=locked' && ctl "$TPID" unlock
    finish cglimit; echo "case cglimit: see above"
    kill -9 "$TPID" 2>/dev/null; sleep 1
  else
    echo "case cglimit: skipped (no memory controller)"
  fi
fi
if want ctx2; then
  echo "== ctx2: three driver-API contexts in one process, 1 GiB each"
  start_target ctx2 "$W/extra" ctx 3 1 16 && suspend_resume ctx2 3 2
  finish ctx2 && echo "case ctx2: contents intact" || echo "case ctx2: FAILED"
fi
if want ipc; then
  echo "== ipc: 2 GiB exported over CUDA IPC; suspend the exporter, then the importer"
  start_target ipc "$W/extra" ipc-export "$W/ipc.handle" 2 30 && {
    EXP=$TPID; ETP=$TP
    in_cg target timeout -k 5 120 "$W/extra" ipc-import "$W/ipc.handle" 26 > "$W/ipcimp.out" 2>&1 &
    ITP=$!; PIDS+=("$ITP")
    for _ in $(seq 300); do grep -q '^ready' "$W/ipcimp.out" 2>/dev/null && break; sleep 0.1; done
    IMP=$(sed -n 's/^ready pid=\([0-9]*\).*/\1/p' "$W/ipcimp.out")
    grep '^ready\|extra:' "$W/ipcimp.out" | sed 's/^/  importer: /'
    sleep 1
    echo "  -- the exporter"
    CTL_TIMEOUT=60 ctl "$EXP" suspend 10000 || ctl "$EXP" unlock
    sleep 2
    CTL_TIMEOUT=60 ctl "$EXP" resume
    echo "  -- the importer"
    [ -n "$IMP" ] && { CTL_TIMEOUT=60 ctl "$IMP" suspend 10000 || ctl "$IMP" unlock; sleep 2; CTL_TIMEOUT=60 ctl "$IMP" resume; }
    wait "$ITP" 2>/dev/null; echo "  importer rc=$?"; tail -2 "$W/ipcimp.out" | sed 's/^/  importer: /'
    TP=$ETP
  }
  finish ipc && echo "case ipc: exporter ok (see the lines above for each side)" || echo "case ipc: FAILED"
fi
if want nccl; then
  echo "== nccl: a one-rank NCCL all_reduce loop on 2 GiB"
  rm -f "$W/nccl.store"
  start_target nccl python3 "$D/nccl.py" 2 20 "$W/nccl.store" && CTL_TIMEOUT=60 suspend_resume nccl 2 2
  finish nccl && echo "case nccl: ok" || echo "case nccl: FAILED"
fi
if want mps; then
  echo "== mps: the target as a client of an MPS control daemon of its own"
  MPSDIR=$W/mps; mkdir -p "$MPSDIR" "$W/mpslog"
  CUDA_MPS_PIPE_DIRECTORY=$MPSDIR CUDA_MPS_LOG_DIRECTORY=$W/mpslog timeout -k 2 10 nvidia-cuda-mps-control -d && {
    start_target mps env CUDA_MPS_PIPE_DIRECTORY="$MPSDIR" CUDA_MPS_LOG_DIRECTORY="$W/mpslog" "$W/target" 2 1 16 &&
      CTL_TIMEOUT=60 suspend_resume mps 2 2
    finish mps && echo "case mps: ok" || echo "case mps: FAILED"
    echo quit | CUDA_MPS_PIPE_DIRECTORY=$MPSDIR timeout -k 2 10 nvidia-cuda-mps-control
    MPSDIR=
    tail -5 "$W/mpslog/control.log" 2>/dev/null | sed 's/^/  mps log: /'
  } || echo "case mps: no MPS control daemon"
fi
echo "end gpu_used=$(gpu_used)MiB (baseline ${base})"
cp "$W"/*.out "$OUT/" 2>/dev/null
true
