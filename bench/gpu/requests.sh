#!/usr/bin/env bash
# Compute requests beside limits (docs/design.md "Requests and the
# arbitration") on a real GPU, by device time counted on the device
# (bench/gpu/spin.cu: 'active %' and a per-100 ms timeline), ROUNDS rounds
# interleaved with native, with `vgpu node` arbitrating:
#   nat          spin alone, no library
#   R1           request 30, limit 100, alone          (>= 95 % of nat)
#   R2a R2b      requests 30 and 50, limits 100, both busy (37.5 : 62.5 +- 3, sum >= 97 % of nat)
#   R3a R3b      request = limit, 30 and 70            (30 : 70 +- 3)
#   R4           request 30, limit 60, alone           (60 +- 3)
#   C30 C70      a busy request-30 tenant beside a request-70 one busy 5 s,
#                idle 5 s, for CSECS (limits 100): the 30 alone >= 95 % of
#                nat, both 30 +- 3, each phase's first period excluded; how
#                many 100 ms bins each switch took
# WORK=1 adds nat/R1/R2 by work (bench/gpu/tenant.py busy: bf16 matmuls) in
# the first round. PARTS (default all) picks rows: a comma list of nat, R1,
# R2, R3, R4, C (e.g. PARTS=nat,C CSECS=60 for the full-length item 5 alone).
#   VGPU=… LIBDIR=… bench/gpu/requests.sh     # SECS=6 CSECS=20 ROUNDS=3: ~4 min
set -uo pipefail
VGPU=${VGPU:?path to vgpu}
LIBDIR=${LIBDIR:?directory of libvgpu-cuda.so and libvgpu-nvml.so}
SPIN=${SPIN:-/tmp/vgpu-spin}
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-6}
CSECS=${CSECS:-20}
OUT=${OUT:-/tmp}; mkdir -p "$OUT"
R=$OUT/requests.txt; : > $R
here=$(dirname "$0")
[ -x "$SPIN" ] || nvcc -O2 -arch=native -o "$SPIN" "$here/spin.cu" || exit 1
$VGPU node --listen "" > $OUT/node.log 2>&1 &
NODE=$!
sleep 2
kill -0 $NODE || { echo "vgpu node did not start"; cat $OUT/node.log; exit 1; }
export WARM_BUSY=1
run() { # label round cmd...
  local label=$1 r=$2; shift 2
  "$@" 2>&1 | sed "s/^/$label $r /" >> $R
  grep -q "^$label $r busy_per_s" $R || { echo "$label $r: no result"; grep "^$label $r" $R | tail -5; }
}
ex() { timeout -k 5 120 $VGPU exec --lib-dir $LIBDIR "$@"; }
at() { export LOOP_AT=$(( $(date +%s) + ${1:-4} )); }
PARTS=,${PARTS:-nat,R1,R2,R3,R4,C},
part() { case $PARTS in *,$1,*) return 0;; esac; return 1; }
for r in $(seq $ROUNDS); do
  part nat && { at 2; run nat $r env -u LD_PRELOAD $SPIN busy $SECS; }
  part R1 && { at 4; run R1 $r ex --compute-request 30 -- $SPIN busy $SECS; }
  part R2 && { at 5; run R2a $r ex --compute-request 30 -- $SPIN busy $SECS & A=$!
    run R2b $r ex --compute-request 50 -- $SPIN busy $SECS & B=$!; wait $A $B; }
  part R3 && { at 5; run R3a $r ex --compute-limit 30 -- $SPIN busy $SECS & A=$!
    run R3b $r ex --compute-limit 70 -- $SPIN busy $SECS & B=$!; wait $A $B; }
  part R4 && { at 4; run R4 $r ex --compute-request 30 --compute-limit 60 -- $SPIN busy $SECS; }
  part C && { at 5; run C30 $r ex --compute-request 30 -- $SPIN busy $CSECS & A=$!
    CYCLE=5000,5000 run C70 $r ex --compute-request 70 -- $SPIN busy $CSECS & B=$!; wait $A $B; }
  if [ "${WORK:-0}" = 1 ] && [ $r = 1 ]; then
    unset LOOP_AT
    T="python3 bench/gpu/tenant.py busy $SECS"
    run Wnat $r env -u LD_PRELOAD $T
    run WR1 $r ex --compute-request 30 -- $T
    export LOOP_AT=$(( $(date +%s) + 25 ))
    run WR2a $r ex --compute-request 30 -- $T & A=$!
    run WR2b $r ex --compute-request 50 -- $T & B=$!; wait $A $B
  fi
  unset LOOP_AT
done
$VGPU status > $OUT/status.txt 2>&1
kill $NODE; wait $NODE 2>/dev/null
python3 - "$R" <<'PY'
import sys, statistics as st
runs = {}
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) < 4: continue
    d = runs.setdefault((f[0], f[1]), {})
    if f[2] == "active_pct": d["act"] = float(f[3])
    if f[2] == "busy_per_s": d["rate"] = float(f[3])
    if f[2] == "timeline": d["tl"] = (int(f[3]), [float(x) for x in f[4:]])
rounds = sorted({r for _, r in runs})
def get(l, r, k="act"): return runs.get((l, r), {}).get(k)
def med(l, k="act"):
    v = [get(l, r, k) for r in rounds if get(l, r, k) is not None]
    return st.median(v) if v else float("nan")
ok = lambda b: "ok" if b else "MISSED"
for l in ["nat", "R1", "R2a", "R2b", "R3a", "R3b", "R4"]:
    if not any(get(l, r) is not None for r in rounds): continue
    print("%-4s active %% by round: %s  median %.1f" % (l, " ".join("%.1f" % (get(l, r) or float("nan")) for r in rounds), med(l)))
nat = med("nat")
if med("R1") == med("R1"): print("1. request 30 / limit 100 alone: %.1f %% of native (>= 95) %s" % (100 * med("R1") / nat, ok(med("R1") >= 0.95 * nat)))
a, b = med("R2a"), med("R2b")
if a == a and b == b: print("2. requests 30 + 50 busy: %.1f : %.1f of their sum (37.5 : 62.5 +- 3) %s; together %.1f %% of native (>= 97) %s" % (
    100 * a / (a + b), 100 * b / (a + b), ok(abs(100 * a / (a + b) - 37.5) <= 3), 100 * (a + b) / nat, ok(a + b >= 0.97 * nat)))
a, b = med("R3a"), med("R3b")
if a == a and b == b: print("3. request = limit 30 and 70: %.1f : %.1f (+- 3) %s" % (a, b, ok(abs(a - 30) <= 3 and abs(b - 70) <= 3)))
if med("R4") == med("R4"): print("4. request 30 / limit 60 alone: %.1f (60 +- 3) %s" % (med("R4"), ok(abs(med("R4") - 60) <= 3)))
c5 = []
for r in rounds:
    x, y = runs.get(("C30", r), {}).get("tl"), runs.get(("C70", r), {}).get("tl")
    if not x or not y:
        print("5. round %s: no timelines" % r); continue
    b0 = max(x[0], y[0]); b1 = min(x[0] + len(x[1]), y[0] + len(y[1]))
    s30 = [x[1][b - x[0]] for b in range(b0, b1)]; s70 = [y[1][b - y[0]] for b in range(b0, b1)]
    # the 70's idle stretches: 10 or more bins at 5 % or less (its slot
    # pattern has single low bins while it runs)
    both, i = [True] * len(s70), 0
    while i < len(s70):
        j = i
        while j < len(s70) and s70[j] <= 5: j += 1
        if j - i >= 10: both[i:j] = [False] * (j - i)
        i = max(j, i + 1)
    alone, share, since, last, sw, settle = [], [], 0, None, [], []
    for i, (v, bb) in enumerate(zip(s30, both)):
        if bb != last: since, last = 0, bb
        else: since += 1
        if since >= 5: (share if bb else alone).append(v)
    # switch latency: bins from a switch of the 70 until the 30 is in its new regime
    for i in range(1, len(both)):
        if both[i] != both[i - 1]:
            k = next((j for j in range(i, min(i + 20, len(s30))) if (s30[j] <= 40 if both[i] else s30[j] >= 85)), None)
            sw.append(None if k is None else k - i)
            # settled: from the switch, bins until a period's mean (5 bins) of
            # the 30 is in its new regime for good (30 +- 6 both, >= 90 alone)
            inr = lambda j: (abs(st.mean(s30[j:j + 5]) - 30) <= 6) if both[i] else st.mean(s30[j:j + 5]) >= 90
            end = next((j for j in range(i + 1, len(both)) if both[j] != both[i]), len(both))
            k = next((j for j in range(i, end - 4) if all(inr(m) for m in range(j, end - 4))), None)
            settle.append(None if k is None else k - i)
    am, sm = st.mean(alone) if alone else float("nan"), st.mean(share) if share else float("nan")
    print("5. round %s: the 30 alone %.1f %% of the device (%.1f %% of native, >= 95) %s; both busy %.1f (30 +- 3) %s; switches took %s bins of 100 ms; settled (a period's mean in the new regime for good) after %s bins" % (
        r, am, 100 * am / nat, ok(am >= 0.95 * nat), sm, ok(abs(sm - 30) <= 3), sw, settle))
    c5.append((100 * am / nat, sm, max([v for v in sw if v is not None] or [float("nan")])))
    print("   timeline 30: " + " ".join("%.0f" % v for v in s30))
    print("   timeline 70: " + " ".join("%.0f" % v for v in s70))
if len(c5) > 1:
    a, b, c = zip(*c5)
    print("5. medians over %d rounds: the 30 alone %.1f %% of native (%.1f..%.1f, >= 95) %s; both busy %.1f (%.1f..%.1f, 30 +- 3) %s; slowest switch per round %s bins" % (
        len(c5), st.median(a), min(a), max(a), ok(st.median(a) >= 95), st.median(b), min(b), max(b), ok(abs(st.median(b) - 30) <= 3),
        " ".join("%.0f" % v for v in c)))
w = lambda l: med(l, "rate")
if w("Wnat") == w("Wnat"):
    print("by work (matmul/s): nat %.2f, R1 %.2f (%.1f %%), R2 %.2f : %.2f (%.1f : %.1f of their sum, together %.1f %% of nat)" % (
        w("Wnat"), w("WR1"), 100 * w("WR1") / w("Wnat"), w("WR2a"), w("WR2b"), 100 * w("WR2a") / (w("WR2a") + w("WR2b")),
        100 * w("WR2b") / (w("WR2a") + w("WR2b")), 100 * (w("WR2a") + w("WR2b")) / w("Wnat")))
PY
