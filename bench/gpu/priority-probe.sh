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
#   OUT=dir bash bench/gpu/priority-probe.sh              # ~5.5 min, < 6
# Results: $OUT/summary.txt (the table, bench/gpu/priority_report.py), $OUT/probe.txt
# (per run its window, light and flood lines),
# $OUT/raw.txt (every request: label round start_ms done_ms dev_ms),
# $OUT/clocks.txt (nvidia-smi every 500 ms), $OUT/progress.log,
# $OUT/mps-control.log. The card's settings are not touched (no nvidia-smi
# -c/-pm/-lgc); the MPS control daemon is this script's own (pipe and log
# directories under a temporary directory), started and stopped each round.
#
# Tenants (bench/gpu/prioprobe.cu, built here with nvcc):
#   light  REQS (300) requests, one every INTERVAL_US (8000), each a kernel
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
REQS=${REQS:-300}
INTERVAL_US=${INTERVAL_US:-8000}
LIGHT_US=${LIGHT_US:-500}
FLOODS=${FLOODS:-1 5 20}
BUDGET_S=${BUDGET_S:-350} # no round starts that would end (by the last one's length) after this
MAX_S=${MAX_S:-5}         # a light run issues no request after this
MPS_CONTROL=${MPS_CONTROL:-$(command -v nvidia-cuda-mps-control || echo /usr/local/nvidia/bin/nvidia-cuda-mps-control)}
W=$(mktemp -d /tmp/vgpu-prioprobe-XXXXXX)
R=$OUT/probe.txt
LOG=$OUT/progress.log
: > "$R"
: > "$LOG"
: > "$OUT/raw.txt"
START=$(date +%s)
PROBE=$W/prioprobe
# shellcheck source=bench/gpu/prioprobe-lib.sh
. bench/gpu/prioprobe-lib.sh
cleanup() {
  probe_cleanup
  rm -rf "$W"
}
trap cleanup EXIT

say "== $(uname -r); $(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv,noheader)"
timeout -k 5 180 nvcc -O2 -arch=sm_90 -o "$PROBE" bench/gpu/prioprobe.cu || { say "FAIL: nvcc"; exit 1; }
[ -x "$MPS_CONTROL" ] || { say "FAIL: no nvidia-cuda-mps-control at '$MPS_CONTROL' (set MPS_CONTROL)"; exit 1; }
[ -e /tmp/nvidia-mps/control ] && say "note: an MPS control daemon runs at /tmp/nvidia-mps; this script's native tenants avoid it by their own pipe directory"
clocks_start

native_block() {
  one nat-alone "$1" 0 "${NAT[@]}"
  for f in $FLOODS; do one "nat-f$f" "$1" "$f" "${NAT[@]}" --flood "${NAT[@]}"; done
}
mps_block() {
  local r=$1 lp fp0 fp1 MPS
  if ! mps_start; then
    say "mps $r: the MPS control daemon did not start"
    return 1
  fi
  mps_env 0; lp=("${MPS[@]}"); fp0=("${MPS[@]}")
  mps_env 1; fp1=("${MPS[@]}")
  one mps-alone "$r" 0 "${lp[@]}"
  mps_check "mps $r"
  for f in $FLOODS; do
    one "mps-eq-f$f" "$r" "$f" "${lp[@]}" --flood "${fp0[@]}"
    one "mps-pri-f$f" "$r" "$f" "${lp[@]}" --flood "${fp1[@]}"
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
clocks_stop
timeout -k 5 60 python3 bench/gpu/priority_report.py probe "$R" "$OUT/clocks.txt" > "$OUT/summary.txt"
tee -a "$LOG" < "$OUT/summary.txt"
say "done"
