#!/usr/bin/env bash
# A light tenant's latency under a compute limit, against the
# same situation natively. One request = two bf16 4096^3 matmuls every 20 ms
# (bench/gpu/tenant.py light); p50/p99 per run. Per round, interleaved:
#   lim-alone  vgpu exec --compute-limit $LIGHT, alone on the GPU
#   nat-alone  the same without the library
#   lim-pair   the same beside a busy tenant (vgpu exec --compute-limit $BUSY,
#              bf16 8192^3 matmuls back to back); both register in the state
#              directory (vgpu exec's slot arbitration) and get slots next to
#              each other, as containers would
#   nat-pair   both without the library
# ROUNDS rounds (default 5) of REQS requests (default 400); the report gives,
# per setting, the median and the range over rounds of p50 and p99, and the
# limited/native ratio of the p99 medians (the target: <= 1.5, a light
# service may wait for its slot but not more than half again as long).
# Results append to $OUT/latency.txt; the report covers every round in it and
# in the files PRIOR names (latency.txt of earlier calls), so the full figure
# (REQS=2000, >= 5 rounds) can be split over calls of at most 10 minutes:
#   VGPU=path/to/vgpu bench/gpu/latency.sh                              # ~5 min
#   VGPU=path/to/vgpu ROUNDS=2 REQS=2000 bench/gpu/latency.sh          # ~6.5 min; 3 calls,
#   ... PRIOR="a/latency.txt b/latency.txt" for the last one
# PERIOD (ms, default: the library's, 500) is passed as --compute-period.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
VGPU=${VGPU:?path to vgpu}
ROUNDS=${ROUNDS:-5}
REQS=${REQS:-400}
LIGHT=${LIGHT:-30}
BUSY=${BUSY:-70}
OUT=${OUT:-/tmp}; mkdir -p "$OUT"
R=$OUT/latency.txt; touch $R
make c-build BUILD=/tmp/vp > /tmp/vp.log 2>&1 || { tail /tmp/vp.log; exit 1; }
per=(); [ -n "${PERIOD:-}" ] && per=(--compute-period "${PERIOD}ms")
# cmd lim|nat PCT: the command prefix in CMD (an array, so that a background
# run's $! is vgpu exec itself, which forwards SIGTERM to the tenant)
cmd() {
  # shellcheck disable=SC2206 # $VGPU may be a command with arguments
  if [ $1 = lim ]; then CMD=($VGPU exec --lib-dir /tmp/vp/lib "${per[@]}" --compute-limit $2 --)
  else CMD=(env -u LD_PRELOAD); fi
}
T=bench/gpu/tenant.py
one() { # label lim|nat
  local label=$1 ready="$OUT/ready.$$" b=""
  rm -f "$ready"
  case $label in *pair)
    cmd $2 $BUSY
    "${CMD[@]}" python3 $T busy 3600 "$ready" > "$OUT/busy.log" 2>&1 &
    b=$!
  esac
  cmd $2 $LIGHT
  "${CMD[@]}" python3 $T light $REQS ${b:+"$ready"} > "$OUT/light.log" 2>&1
  grep '^light' "$OUT/light.log" | sed "s/^/$label $r /" >> $R || { echo "$label: no result"; tail -5 "$OUT/light.log"; }
  if [ -n "$b" ]; then kill -TERM $b; wait $b; grep busy_per_s "$OUT/busy.log" | sed "s/^/$label $r busy /" >> $R; fi
  rm -f "$ready"
  tail -1 $R
}
for r in $(seq $ROUNDS); do
  one lim-alone lim
  one nat-alone nat
  one lim-pair lim
  one nat-pair nat
done
python3 - "$R" ${PRIOR:-} <<'PY'
import sys, statistics as st
rows = {}
for line in (l for path in sys.argv[1:] for l in open(path)):
    f = line.split()
    if len(f) > 2 and f[2] == "light":
        d = dict(zip(f[4::2], f[5::2]))
        rows.setdefault(f[0], []).append((float(d["p50_ms"]), float(d["p99_ms"]), f[3]))
print("%-10s %6s  %-22s %-22s" % ("setting", "rounds", "p50 ms median [range]", "p99 ms median [range]"))
med = {}
for k in ["lim-alone", "nat-alone", "lim-pair", "nat-pair"]:
    if k not in rows:
        continue
    p50 = [x[0] for x in rows[k]]; p99 = [x[1] for x in rows[k]]
    med[k] = st.median(p99)
    print("%-10s %6d  %6.2f [%.2f-%.2f]     %6.2f [%.2f-%.2f]   (%s requests)" % (k, len(p50), st.median(p50), min(p50), max(p50), st.median(p99), min(p99), max(p99), rows[k][0][2]))
for s in ["alone", "pair"]:
    if "lim-" + s in med and "nat-" + s in med:
        r = med["lim-" + s] / med["nat-" + s]
        print("p99 limited/native, %s: %.2f (issue 20 (a): <= 1.5) %s" % (s, r, "ok" if r <= 1.5 else "MISSED"))
PY
