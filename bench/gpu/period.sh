#!/usr/bin/env bash
# Pacing period vs throughput share on a real GPU, for each compute period in
# PERIODS (vgpu exec --compute-period; 0 = launch by launch, else the gate: on
# P% of each period at a stretch); matmul at 25/50/75 and graph at 50, interleaved
# with unlimited runs, REPS rounds; SM clock and power logged alongside.
#   VGPU=path/to/vgpu bench/gpu/period.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
VGPU=${VGPU:?path to vgpu}
PERIODS=${PERIODS:-250 500 1000}
REPS=${REPS:-2}
SECS=${SECS:-5}
R=${OUT:-/tmp}/period.txt; : > $R
make c-build BUILD=/tmp/vp > /tmp/vp.log 2>&1 || { tail /tmp/vp.log; exit 1; }
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,utilization.gpu --format=csv,noheader -lms 100 > ${OUT:-/tmp}/clocks.csv &
SMI=$!
run() { # label kind args...
  local label=$1 kind=$2; shift 2
  echo "start $label $kind $(date +%s.%N)" >> $R
  "$@" python3 bench/gpu/loop.py $kind $SECS 2>&1 | sed "s/^/$label /" >> $R
  echo "stop $label $kind $(date +%s.%N)" >> $R
}
for r in $(seq $REPS); do
  run unl matmul $VGPU exec --lib-dir /tmp/vp/lib --
  run unl graph $VGPU exec --lib-dir /tmp/vp/lib --
  run unl small $VGPU exec --lib-dir /tmp/vp/lib --
  for p in $PERIODS; do
    for c in ${LIMITS:-25 50 75}; do run T$p-P$c matmul $VGPU exec --lib-dir /tmp/vp/lib --compute-period ${p}ms --compute-limit $c --; done
    run T$p-P50 graph $VGPU exec --lib-dir /tmp/vp/lib --compute-period ${p}ms --compute-limit 50 --
  done
  p=${POOLED:-500}
  for c in ${SMALL:-25 50}; do run T$p-P$c small $VGPU exec --lib-dir /tmp/vp/lib --compute-period ${p}ms --compute-limit $c --; done
  # two processes of one container at 50 (their sum is the container's share)
  [ "${POOL:-1}" = 1 ] && {
  echo "start T$p-pool50 matmul $(date +%s.%N)" >> $R
  $VGPU exec --lib-dir /tmp/vp/lib --compute-period ${p}ms --compute-limit 50 -- bash -c "python3 bench/gpu/loop.py matmul $SECS & python3 bench/gpu/loop.py matmul $SECS & wait" 2>&1 | sed "s/^/T$p-pool50 /" >> $R
  echo "stop T$p-pool50 matmul $(date +%s.%N)" >> $R
  }
  # two containers at 30 and 70
  echo "start T$p-pair matmul $(date +%s.%N)" >> $R
  $VGPU exec --lib-dir /tmp/vp/lib --compute-period ${p}ms --compute-limit 30 -- python3 bench/gpu/loop.py matmul $SECS 2>&1 | sed "s/^/T$p-pair30 /" >> $R &
  $VGPU exec --lib-dir /tmp/vp/lib --compute-period ${p}ms --compute-limit 70 -- python3 bench/gpu/loop.py matmul $SECS 2>&1 | sed "s/^/T$p-pair70 /" >> $R &
  wait
  echo "stop T$p-pair matmul $(date +%s.%N)" >> $R
done
kill $SMI
python3 - $R ${OUT:-/tmp}/clocks.csv <<'PY'
import sys, statistics, collections, datetime
rates = collections.defaultdict(list); spans = []
cur = {}
for line in open(sys.argv[1]):
    f = line.split()
    if f[0] in ("start", "stop"):
        if f[0] == "start": cur[(f[1], f[2])] = float(f[3])
        else: spans.append((f[1], f[2], cur[(f[1], f[2])], float(f[3])))
        continue
    if len(f) == 3 and f[1].endswith("_per_s"):
        rates[(f[0], f[1][:-6])].append(float(f[2]))
    else:
        print("  (output)", line.rstrip())
samples = []
for line in open(sys.argv[2]):
    p = [x.strip() for x in line.split(",")]
    try:
        t = datetime.datetime.strptime(p[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        samples.append((t, float(p[1].split()[0]), float(p[2].split()[0]), float(p[4].split()[0])))
    except Exception:
        pass
clk = collections.defaultdict(list)
for label, kind, a, b in spans:
    s = [x for x in samples if a + 3.5 < x[0] < b - 0.3 and x[3] > 0]  # skip torch start-up
    if s:
        clk[(label, kind)].append((statistics.mean(x[1] for x in s), statistics.mean(x[2] for x in s), statistics.mean(x[3] for x in s)))
print("%-12s %-7s %9s %8s %18s %8s %8s %6s" % ("run", "kind", "rate", "share%", "min..max", "MHz", "W", "util"))
for (label, kind), v in sorted(rates.items()):
    if ("unl", kind) not in rates: continue
    base = statistics.median(rates[("unl", kind)])
    m = statistics.median(v)
    c = clk.get((label, kind)) or [(0, 0, 0)]
    print("%-12s %-7s %9.2f %8.1f %8.2f..%-8.2f %8.0f %8.0f %6.0f" % (label, kind, m, 100 * m / base, min(v), max(v),
          statistics.mean(x[0] for x in c), statistics.mean(x[1] for x in c), statistics.mean(x[2] for x in c)))
for k in sorted({l[:-2] for l, _ in rates if l.endswith("pair30")}):
    a, b = statistics.median(rates[(k + "30", "matmul")]), statistics.median(rates[(k + "70", "matmul")])
    print("%s 30:70 -> %.1f : %.1f" % (k, 100 * a / (a + b), 100 * b / (a + b)))
for l, kind in sorted(rates):
    if "pool" in l:
        v = rates[(l, kind)]
        print("%s: %d rates, sum per round ~ %.1f%% of unlimited" % (l, len(v), 100 * sum(v) / len(v) * 2 / statistics.median(rates[("unl", kind)])))
PY
