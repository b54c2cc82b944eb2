#!/usr/bin/env bash
# What the hardware alone gives a latency-sensitive tenant beside a batch one
# (no vgpu binaries): the GPU's own time slicing between two contexts, and
# plain MPS with and without the client priority. The baseline that
# bench/gpu/priority.sh's vgpu priority is judged against, and the figure
# that bounds it (what a low tenant's kernel already on the GPU costs a
# high one).
#
# Run as root from the repository root on the GPU machine (nvcc, nvidia-smi,
# nvidia-cuda-mps-control; no Go, no network, no vgpu build):
#   OUT=dir bash bench/gpu/priority-probe.sh              # ~4.5 min, < 6
# Results: $OUT/summary.txt (the table), $OUT/probe.txt (one line a run),
# $OUT/raw.txt (every request: label round start_ms done_ms dev_ms),
# $OUT/clocks.txt (nvidia-smi every 500 ms), $OUT/progress.log,
# $OUT/mps-control.log. The card's settings are not touched (no nvidia-smi
# -c/-pm/-lgc); the MPS control daemon is this script's own (pipe and log
# directories under a temporary directory), started and stopped each round.
#
# Tenants (bench/gpu/prioprobe.cu, built here with nvcc):
#   light  REQS (400) requests, one every INTERVAL_US (8000), each a kernel
#          of LIGHT_US (500) of device time on every SM; per request the time
#          from the launch call to the kernel's first block running (start)
#          and to the wait's return (done)
#   flood  kernels of F ms (FLOODS, default "1 5 20") of device time back to
#          back, 4 queued, every block holding its SM for the whole kernel
#          (FLOOD_WAVES=1; more waves = shorter blocks, as a GEMM's tiles)
# Per round (ROUNDS, 3), the native and MPS blocks alternating in order:
#   nat-alone, nat-fF      native contexts: the GPU time-slices between them
#   mps-alone              the light tenant as an MPS client, alone
#   mps-eq-fF              both MPS clients at CUDA_MPS_CLIENT_PRIORITY=0
#   mps-pri-fF             light at 0 (NORMAL), flood at 1 (BELOW_NORMAL)
# CUDA_MPS_CLIENT_PRIORITY (NVIDIA's MPS guide, "Environment Variables") is
# read once at the client's start: 0 = normal (default), 1 = below normal;
# the server prefers a normal client's work when it dispatches, it does not
# preempt what is running. nvidia-smi's SM clock, its maximum and the power
# draw are sampled throughout; the summary gives them per setting (the H200
# flat out sits at its power cap near 1455 MHz against 1980 paced).
# Reading it: start p99 beside a flood is what a high tenant waits at worst
# for the GPU; under vgpu's priority the host keeps a low tenant from
# launching more while a high one is active, so what remains is this figure
# for the low tenant's work already queued (here 4 kernels) or running.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-/tmp/vgpu-prioprobe}
mkdir -p "$OUT"
ROUNDS=${ROUNDS:-3}
REQS=${REQS:-400}
INTERVAL_US=${INTERVAL_US:-8000}
LIGHT_US=${LIGHT_US:-500}
FLOODS=${FLOODS:-1 5 20}
BUDGET_S=${BUDGET_S:-340} # no round starts that would end (by the last one's length) after this
MAX_S=${MAX_S:-10}        # a light run issues no request after this
MPS_CONTROL=${MPS_CONTROL:-$(command -v nvidia-cuda-mps-control || echo /usr/local/nvidia/bin/nvidia-cuda-mps-control)}
W=$(mktemp -d /tmp/vgpu-prioprobe-XXXXXX)
R=$OUT/probe.txt
LOG=$OUT/progress.log
: > "$R"
: > "$LOG"
: > "$OUT/raw.txt"
MPSD=$W/mps
mkdir -p "$MPSD/pipe" "$MPSD/log" "$W/nomps"
START=$(date +%s)
SMI=
LP=
FP=
say() { echo "$(date -u +%T) +$(($(date +%s) - START))s $*" | tee -a "$LOG"; }
mps_ctl() { echo "$*" | CUDA_MPS_PIPE_DIRECTORY=$MPSD/pipe timeout -k 2 10 "$MPS_CONTROL"; }
mps_stop() {
  [ -e "$MPSD/pipe/control" ] || return 0
  local pid
  pid=$(cat "$MPSD/pipe/nvidia-cuda-mps-control.pid" 2>/dev/null)
  mps_ctl quit > /dev/null 2>&1
  for _ in $(seq 100); do
    if [ -z "$pid" ] || ! kill -0 "$pid" 2> /dev/null; then break; fi
    sleep 0.1
  done
  [ -n "$pid" ] && kill -0 "$pid" 2> /dev/null && { say "MPS control daemon $pid did not quit: SIGKILL"; kill -9 "$pid"; }
  rm -f "$MPSD/pipe/control"
  cat "$MPSD/log/control.log" >> "$OUT/mps-control.log" 2> /dev/null
  : > "$MPSD/log/control.log" 2> /dev/null
}
mps_start() {
  CUDA_MPS_PIPE_DIRECTORY=$MPSD/pipe CUDA_MPS_LOG_DIRECTORY=$MPSD/log timeout -k 2 20 "$MPS_CONTROL" -d || return 1
  for _ in $(seq 50); do [ -e "$MPSD/pipe/control" ] && return 0; sleep 0.1; done
  return 1
}
cleanup() {
  for p in $LP $FP; do kill -9 "$p" 2> /dev/null; wait "$p" 2> /dev/null; done
  mps_stop
  [ -n "$SMI" ] && { kill "$SMI" 2> /dev/null; wait "$SMI" 2> /dev/null; }
  rm -rf "$W"
}
trap cleanup EXIT
wait_file() { # FILE SECONDS
  for _ in $(seq $(($2 * 20))); do [ -e "$1" ] && return 0; sleep 0.05; done
  return 1
}

say "== $(uname -r); $(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv,noheader)"
timeout -k 5 180 nvcc -O2 -arch=sm_90 -o "$W/prioprobe" bench/gpu/prioprobe.cu || { say "FAIL: nvcc"; exit 1; }
[ -x "$MPS_CONTROL" ] || { say "FAIL: no nvidia-cuda-mps-control at '$MPS_CONTROL' (set MPS_CONTROL)"; exit 1; }
[ -e /tmp/nvidia-mps/control ] && say "note: an MPS control daemon runs at /tmp/nvidia-mps; this script's native tenants avoid it by their own pipe directory"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.max.sm,power.draw --format=csv,noheader,nounits -lms 500 > "$OUT/clocks.txt" 2>&1 &
SMI=$!

# env for each kind of tenant: native ones point at an empty pipe directory
# so that no MPS daemon (ours or the machine's) can take them
NAT=(env -u LD_PRELOAD "CUDA_MPS_PIPE_DIRECTORY=$W/nomps" "CUDA_MPS_LOG_DIRECTORY=$W/nomps")
mps_env() { MPS=(env -u LD_PRELOAD "CUDA_MPS_PIPE_DIRECTORY=$MPSD/pipe" "CUDA_MPS_LOG_DIRECTORY=$MPSD/log" "CUDA_MPS_CLIENT_PRIORITY=$1"); }

# one LABEL ROUND FLOOD_MS|0 LIGHT_ENV... -- FLOOD_ENV...
one() {
  local label=$1 r=$2 fms=$3
  shift 3
  local lenv=() fenv=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do lenv+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  fenv=("$@")
  rm -f "$W/cal" "$W/go" "$W/ready" "$W/raw"
  RAW=$W/raw MAX_S=$MAX_S timeout -k 5 90 "${lenv[@]}" "$W/prioprobe" light "$REQS" "$INTERVAL_US" "$LIGHT_US" "$W/cal" "$W/go" > "$W/light.out" 2>&1 &
  LP=$!
  if ! wait_file "$W/cal" 60; then
    say "$label $r: light tenant not calibrated: $(tail -2 "$W/light.out")"
    kill -TERM "$LP" 2> /dev/null; wait "$LP"; LP=
    return 1
  fi
  if [ "$fms" != 0 ]; then
    timeout -k 5 120 "${fenv[@]}" "$W/prioprobe" flood $((fms * 1000)) 100 "$W/ready" > "$W/flood.out" 2>&1 &
    FP=$!
    wait_file "$W/ready" 60 || say "$label $r: flood not ready: $(tail -2 "$W/flood.out")"
    sleep 0.3 # its queue full and running
  fi
  local t0 t1
  t0=$(date +%s.%N)
  touch "$W/go"
  wait "$LP"
  LP=
  t1=$(date +%s.%N)
  if [ -n "$FP" ]; then
    kill -TERM "$FP" 2> /dev/null
    wait "$FP"
    FP=
    sed "s/^/$label $r /" "$W/flood.out" | grep " flood " >> "$R" || say "$label $r: no flood result: $(tail -2 "$W/flood.out")"
  fi
  if grep -q '^light ' "$W/light.out"; then
    grep '^light ' "$W/light.out" | sed "s/^/$label $r $t0 $t1 /" >> "$R"
    sed "s/^/$label $r /" "$W/raw" >> "$OUT/raw.txt" 2> /dev/null
    say "$label $r: $(grep '^light ' "$W/light.out" | cut -c1-140)"
  else
    say "$label $r: no light result: $(tail -2 "$W/light.out")"
  fi
}

native_block() {
  one nat-alone "$1" 0 "${NAT[@]}"
  for f in $FLOODS; do one "nat-f$f" "$1" "$f" "${NAT[@]}" -- "${NAT[@]}"; done
}
mps_block() {
  local r=$1 lp fp0 fp1
  if ! mps_start; then
    say "mps $r: the MPS control daemon did not start"
    return 1
  fi
  mps_env 0; lp=("${MPS[@]}"); fp0=("${MPS[@]}")
  mps_env 1; fp1=("${MPS[@]}")
  one mps-alone "$r" 0 "${lp[@]}"
  local servers
  servers=$(mps_ctl get_server_list 2> /dev/null)
  if [ -n "$servers" ]; then say "mps $r: server $servers"; else say "mps $r: NO MPS server after a client ran: the mps rows are not MPS"; fi
  for f in $FLOODS; do
    one "mps-eq-f$f" "$r" "$f" "${lp[@]}" -- "${fp0[@]}"
    one "mps-pri-f$f" "$r" "$f" "${lp[@]}" -- "${fp1[@]}"
  done
  mps_stop
}

LAST=0
for r in $(seq "$ROUNDS"); do
  t=$(date +%s)
  if [ $((t - START + LAST)) -gt "$BUDGET_S" ]; then
    say "round $r skipped: it would end past BUDGET_S=$BUDGET_S s (the last round took $LAST s)"
    break
  fi
  say "== round $r"
  if [ $((r % 2)) = 1 ]; then native_block "$r"; mps_block "$r"; else mps_block "$r"; native_block "$r"; fi
  LAST=$(($(date +%s) - t))
done
kill "$SMI" 2> /dev/null
wait "$SMI" 2> /dev/null
SMI=

timeout -k 5 60 python3 - "$R" "$OUT/clocks.txt" "$FLOODS" > "$OUT/summary.txt" << 'PY'
import sys, statistics as st, datetime
res, clocks = sys.argv[1], sys.argv[2]
floods = sys.argv[3].split()
light, flood, win = {}, {}, {}
def num(d):
    out = {}
    for k, v in d.items():
        try:
            out[k] = float(v)
        except ValueError:
            pass
    return out
for line in open(res):
    f = line.split()
    if len(f) > 5 and f[4] == "light":
        d = dict(zip(f[6::2], f[7::2]))
        light.setdefault(f[0], []).append(num(d))
        win.setdefault(f[0], []).append((float(f[2]), float(f[3])))
    elif len(f) > 3 and f[2] == "flood":
        d = dict(zip(f[4::2], f[5::2]))
        if "active_pct" in num(d):
            flood.setdefault(f[0], []).append(num(d)["active_pct"])
samples = []  # (unix, sm MHz, max MHz, W)
for line in open(clocks):
    p = [x.strip() for x in line.split(",")]
    try:
        t = datetime.datetime.strptime(p[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        samples.append((t, float(p[1]), float(p[2]), float(p[3])))
    except (ValueError, IndexError):
        pass
def ms(xs):
    if not xs:
        return "-"
    return "%.2f [%.2f-%.2f]" % (st.median(xs), min(xs), max(xs))
def clk(label):
    s = [c for (t, c, m, w) in samples for (a, b) in win.get(label, []) if a <= t <= b]
    p = [w for (t, c, m, w) in samples for (a, b) in win.get(label, []) if a <= t <= b]
    return ("%.0f [%.0f-%.0f]" % (st.median(s), min(s), max(s)) if s else "-",
            "%.0f" % st.median(p) if p else "-")
order = ["nat-alone"] + ["nat-f" + f for f in floods] + ["mps-alone"]
order += [k + f for f in floods for k in ("mps-eq-f", "mps-pri-f")]
print("light tenant: a kernel of its device time on every SM per request; ms as median [min-max] over rounds")
print("start = launch call -> first block running; done = launch call -> wait returns")
print("%-12s %3s  %-22s %-22s %-22s %-22s %-7s %-18s %-5s %s" % (
    "setting", "n", "start p50", "start p99", "done p50", "done p99", "done99x", "SM MHz", "W", "flood busy %"))
for k in order:
    rows = light.get(k, [])
    if not rows:
        continue
    base = "nat-alone" if k.startswith("nat") else "mps-alone"
    d99 = [x["done_p99_ms"] for x in rows]
    b99 = [x["done_p99_ms"] for x in light.get(base, [])]
    ratio = "%.2f" % (st.median(d99) / st.median(b99)) if b99 else "-"
    c, w = clk(k)
    print("%-12s %3d  %-22s %-22s %-22s %-22s %-7s %-18s %-5s %s" % (
        k, len(rows), ms([x["start_p50_ms"] for x in rows]), ms([x["start_p99_ms"] for x in rows]),
        ms([x["done_p50_ms"] for x in rows]), ms(d99), ratio, c, w, ms(flood.get(k, []))))
cal = [x["calib_rtt_us"] for v in light.values() for x in v]
neg = sum(int(x["neg_start"]) for v in light.values() for x in v)
if cal:
    print("clock calibration round trip: median %.1f us, max %.1f us (start error within half of it); starts before their launch: %d" % (
        st.median(cal), max(cal), neg))
maxc = sorted({m for (_, _, m, _) in samples})
print("SM clock max reported: %s MHz; %d samples" % (" ".join("%.0f" % m for m in maxc) or "-", len(samples)))
PY
tee -a "$LOG" < "$OUT/summary.txt"
say "done"
