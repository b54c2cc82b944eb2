#!/usr/bin/env bash
# shellcheck disable=SC2046 # $(ph N) is empty or two words, split on purpose
# Pacing period vs throughput share on a real GPU, for each compute period in
# PERIODS (vgpu exec --compute-period; 0 = launch by launch, else the gate: on
# P% of each period at a stretch); matmul at 25/50/75 and graph at 50, interleaved
# with unlimited runs (the library without a limit: "unl"; and the small-kernel
# loop without the library: "nat"), REPS rounds; SM clock and power logged alongside.
# POOLED: the periods of the small-kernel, pooled and pair runs.
# PHASED=1 (default): every run gets a phase as the host gives containers
# (alone: 0; the pair 30/70: 0 and 30), so that the pair takes turns; 0: none.
# PIN: CPUs (taskset -c) for every run: the small-kernel loop is host-bound,
# and unpinned its rate moves by ±20 % with the cores it lands on.
#   VGPU=path/to/vgpu bench/gpu/period.sh
# The table alone, again: python3 bench/gpu/period_report.py period.txt clocks.csv
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
VGPU=${VGPU:?path to vgpu}
PERIODS=${PERIODS:-500}
REPS=${REPS:-2}
SECS=${SECS:-5}
R=${OUT:-/tmp}/period.txt; : > $R
make c-build BUILD=/tmp/vp > /tmp/vp.log 2>&1 || { tail /tmp/vp.log; exit 1; }
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,utilization.gpu --format=csv,noheader -lms 100 > ${OUT:-/tmp}/clocks.csv &
SMI=$!
ph() { [ "${PHASED:-1}" = 1 ] && echo "--compute-phase $1"; }
pin() { if [ -n "${PIN:-}" ]; then taskset -c "$PIN" "$@"; else "$@"; fi; } # PIN: CPUs for every run
run() { # label kind args...
  local label=$1 kind=$2; shift 2
  echo "start $label $kind $(date +%s.%N)" >> $R
  pin "$@" python3 bench/gpu/loop.py $kind $SECS 2>&1 | sed "s/^/$label /" >> $R
  echo "stop $label $kind $(date +%s.%N)" >> $R
}
for _ in $(seq $REPS); do
  run unl matmul $VGPU exec --lib-dir /tmp/vp/lib --
  run unl graph $VGPU exec --lib-dir /tmp/vp/lib --
  run unl small $VGPU exec --lib-dir /tmp/vp/lib --
  run nat small env -u LD_PRELOAD # no library at all: the no-limit overhead
  for p in $PERIODS; do
    for c in ${LIMITS:-25 50 75}; do run T$p-P$c matmul $VGPU exec --lib-dir /tmp/vp/lib --compute-period ${p}ms --compute-limit $c $(ph 0) --; done
    run T$p-P50 graph $VGPU exec --lib-dir /tmp/vp/lib --compute-period ${p}ms --compute-limit 50 $(ph 0) --
  done
  for p in ${POOLED:-$PERIODS}; do
    for c in ${SMALL:-25 50}; do run T$p-P$c small $VGPU exec --lib-dir /tmp/vp/lib --compute-period ${p}ms --compute-limit $c $(ph 0) --; done
    # two processes of one container at 50 (their sum is the container's share),
    # timing the same window (LOOP_AT): one alone would have the whole share
    [ "${POOL:-1}" = 1 ] && {
    echo "start T$p-pool50 matmul $(date +%s.%N)" >> $R
    LOOP_AT=$(( $(date +%s) + 15 )) pin $VGPU exec --lib-dir /tmp/vp/lib --compute-period ${p}ms --compute-limit 50 $(ph 0) -- bash -c "python3 bench/gpu/loop.py matmul $SECS & python3 bench/gpu/loop.py matmul $SECS & wait" 2>&1 | sed "s/^/T$p-pool50 /" >> $R
    echo "stop T$p-pool50 matmul $(date +%s.%N)" >> $R
    }
    # two containers at 30 and 70
    echo "start T$p-pair matmul $(date +%s.%N)" >> $R
    pin $VGPU exec --lib-dir /tmp/vp/lib --compute-period ${p}ms --compute-limit 30 $(ph 0) -- python3 bench/gpu/loop.py matmul $SECS 2>&1 | sed "s/^/T$p-pair30 /" >> $R &
    A=$!
    pin $VGPU exec --lib-dir /tmp/vp/lib --compute-period ${p}ms --compute-limit 70 $(ph 30) -- python3 bench/gpu/loop.py matmul $SECS 2>&1 | sed "s/^/T$p-pair70 /" >> $R &
    B=$!
    wait $A $B # not the clock logger
    echo "stop T$p-pair matmul $(date +%s.%N)" >> $R
  done
done
kill $SMI
python3 bench/gpu/period_report.py $R ${OUT:-/tmp}/clocks.csv
