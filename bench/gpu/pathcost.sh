#!/usr/bin/env bash
# What the paced launch path costs on a real GPU, per library build: the
# empty-kernel launch rate (launch.cu) and the PyTorch small-kernel loop
# (loop.py small), with no library ("nat"), under the first build without a
# limit ("unl"), and under each build at P=99 in a slot from phase 0 (every
# launch takes the paced path; the slot is open 99% of the time). SMALL adds
# small-kernel runs at other limits (build:P). REPS rounds, interleaved; the
# report gives medians, spread and the ratio to "nat".
#   VGPU=path/to/vgpu LIBS="cur=/tmp/vp/lib" bench/gpu/pathcost.sh
# LIBS: label=dir of libvgpu-cuda.so (default: this tree's, built to /tmp/vp).
# PIN: CPUs (taskset -c) for every run, so that runs do not differ by the core
# they land on (the small-kernel loop is host-bound).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
VGPU=${VGPU:?path to vgpu}
REPS=${REPS:-3}
SECS=${SECS:-4}
R=${OUT:-/tmp}/pathcost.txt; : > $R
if [ -z "${LIBS:-}" ]; then
  make c-build BUILD=/tmp/vp > /tmp/vp.log 2>&1 || { tail /tmp/vp.log; exit 1; }
  LIBS="cur=/tmp/vp/lib"
fi
nvcc -O2 -arch=sm_90 -o /tmp/launch bench/gpu/launch.cu || exit 1
echo "clocksource $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)" | tee -a $R
gcc -O2 -x c -o /tmp/clockcost - <<'C' && /tmp/clockcost | tee -a $R
#include <stdio.h>
#include <time.h>
int main(void) {
    struct timespec a, b, t;
    int n = 2000000;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < n; i++) clock_gettime(CLOCK_MONOTONIC, &t);
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("clock_gettime_ns %.1f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n);
    return 0;
}
C
first=${LIBS%% *}; first=${first#*=}
pin() { if [ -n "${PIN:-}" ]; then taskset -c "$PIN" "$@"; else "$@"; fi; }
both() { # label lib-args...
  local label=$1; shift
  echo "$label launch $(pin "$@" /tmp/launch launch 2>&1 | awk '/launch_per_s/{print $2}')" | tee -a $R
  echo "$label small $(pin "$@" python3 bench/gpu/loop.py small $SECS 2>&1 | awk '/small_per_s/{print $2}')" | tee -a $R
}
for _ in $(seq $REPS); do
  both nat env -u LD_PRELOAD
  both unl $VGPU exec --lib-dir $first --
  for l in $LIBS; do
    both ${l%%=*}-P99 $VGPU exec --lib-dir ${l#*=} --compute-limit 99 --compute-phase 0 --
  done
  for s in ${SMALL:-}; do
    b=${s%%:*}; p=${s#*:}; d=$(for l in $LIBS; do [ "${l%%=*}" = "$b" ] && echo ${l#*=}; done)
    echo "$b-P$p small $(pin $VGPU exec --lib-dir $d --compute-limit $p --compute-phase 0 -- python3 bench/gpu/loop.py small $SECS 2>&1 | awk '/small_per_s/{print $2}')" | tee -a $R
  done
done
python3 - $R <<'PY'
import statistics as st, sys, collections
rates = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) == 3 and f[1] in ("launch", "small"):
        try: rates[(f[0], f[1])].append(float(f[2]))
        except ValueError: pass
print("%-16s %-7s %12s %25s %9s %12s" % ("run", "kind", "median/s", "spread", "vs nat", "+ns/launch"))
for (label, kind), v in rates.items():
    m = st.median(v); nat = rates.get(("nat", kind))
    ratio = m / st.median(nat) if nat else float("nan")
    extra = (1 / m - 1 / st.median(nat)) * 1e9 if nat and not label.endswith(("P50", "P25")) else float("nan")
    print("%-16s %-7s %12.0f %12.0f..%-12.0f %8.1f%% %12.0f" % (label, kind, m, min(v), max(v), 100 * ratio, extra))
PY
