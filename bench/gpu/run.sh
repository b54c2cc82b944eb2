#!/usr/bin/env bash
# Overhead of the library on a real GPU, side by side in one run: native,
# under the library with no limit, and with a memory limit. Interleaved,
# REPS (default 5) rounds; prints medians, spread (min..max) and ratios.
#   VGPU=path/to/vgpu LIBDIR=dir/of/libvgpu-*.so bench/gpu/run.sh
set -euo pipefail
cd "$(dirname "$0")"
VGPU=${VGPU:-../../build/bin/vgpu}
LIBDIR=${LIBDIR:-../../build/lib}
REPS=${REPS:-5}
WORK=${WORK:-$(mktemp -d)}
nvcc -O2 -o "$WORK/launch" launch.cu
declare -A modes=(
  [native]=""
  [nolimit]="$VGPU exec --lib-dir $LIBDIR --"
  [mem8g]="$VGPU exec --lib-dir $LIBDIR --memory-limit 8Gi --"
)
order=(native nolimit mem8g)
: > "$WORK/results.txt"
for _ in $(seq "$REPS"); do
  for m in "${order[@]}"; do
    ${modes[$m]} "$WORK/launch" launch | sed "s/^/$m /" >> "$WORK/results.txt"
    ${modes[$m]} "$WORK/launch" malloc | sed "s/^/$m /" >> "$WORK/results.txt"
    ${modes[$m]} python3 torch_small.py 50000 | sed "s/^/$m /" >> "$WORK/results.txt"
  done
done
python3 - "$WORK/results.txt" <<'PY'
import sys, statistics, collections
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    m, k, v = line.split()
    d[(k, m)].append(float(v))
metrics = sorted({k for k, _ in d})
print("%-20s %-8s %14s %22s %8s" % ("metric", "mode", "median", "min..max", "ratio"))
for k in metrics:
    base = statistics.median(d[(k, "native")])
    for m in ("native", "nolimit", "mem8g"):
        v = d[(k, m)]
        med = statistics.median(v)
        print("%-20s %-8s %14.0f %10.0f..%-10.0f %7.3f" % (k, m, med, min(v), max(v), med / base))
PY
