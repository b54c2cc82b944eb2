#!/usr/bin/env bash
# Compute shares on a real GPU, one table in one run: for each loop kind, the
# rate native, under the library without limit, and at P%, interleaved over
# REPS rounds; the ratio to the no-limit run is the share obtained. Then two
# processes started together at 30 and 70.
#   VGPU=path/to/vgpu LIBDIR=dir bench/gpu/compute.sh
set -uo pipefail
cd "$(dirname "$0")" || exit 1
VGPU=${VGPU:-../../build/bin/vgpu}
LIBDIR=${LIBDIR:-../../build/lib}
REPS=${REPS:-3}
SECS=${SECS:-6}
R=$(mktemp)
ex() { local p=$1; shift; if [ "$p" = native ]; then "$@"; elif [ "$p" = 100 ]; then $VGPU exec --lib-dir $LIBDIR -- "$@"; else $VGPU exec --lib-dir $LIBDIR --compute-limit $p -- "$@"; fi; }
for _ in $(seq $REPS); do
  for p in native 100 25 50 75; do ex $p python3 loop.py matmul $SECS 2>&1 | sed "s/^/$p /" >> $R; done
  for p in native 100 25 50; do ex $p python3 loop.py small $SECS 2>&1 | sed "s/^/$p /" >> $R; done
  for p in 100 50; do ex $p python3 loop.py graph $SECS 2>&1 | sed "s/^/$p /" >> $R; done
done
echo "== two processes started together, 30 and 70 (matmul), $REPS rounds"
for _ in $(seq $REPS); do
  ex 30 python3 loop.py matmul $SECS 2>&1 | sed 's/^/pair30 /' >> $R &
  ex 70 python3 loop.py matmul $SECS 2>&1 | sed 's/^/pair70 /' >> $R &
  wait
done
python3 - "$R" <<'PY'
import sys, statistics, collections
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    try:
        p, k, v = f[0], f[1], float(f[2])
        assert len(f) == 3 and k.endswith("_per_s")
    except (ValueError, IndexError, AssertionError):
        print("  (output) " + line.rstrip())
        continue
    d[(k, p)].append(v)
print("%-16s %-7s %10s %24s %10s" % ("loop", "limit", "median", "min..max", "share %"))
for k in ("matmul_per_s", "small_per_s", "graph_per_s"):
    base = statistics.median(d[(k, "100")]) if d[(k, "100")] else None
    for p in ("native", "100", "25", "50", "75", "pair30", "pair70"):
        v = d.get((k, p))
        if not v:
            continue
        med = statistics.median(v)
        print("%-16s %-7s %10.2f %11.2f..%-11.2f %9.1f" % (k, p, med, min(v), max(v), 100 * med / base if base else float("nan")))
a, b = d.get(("matmul_per_s", "pair30")), d.get(("matmul_per_s", "pair70"))
if a and b:
    sa, sb = statistics.median(a), statistics.median(b)
    print("pair 30:70 -> %.1f : %.1f (of their sum)" % (100 * sa / (sa + sb), 100 * sb / (sa + sb)))
PY
