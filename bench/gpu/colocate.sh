#!/usr/bin/env bash
# A light tenant beside a busy GPT-2 training loop, with and without vgpu
# (bench/gpu/tenant.py light / train). Light: LIGHT_MATMULS (3) bf16 4096^3
# matmuls (0.65 ms of device time on an H200) every INTERVAL_MS (8) ms, request LREQ (10), limit
# 100; training: request TREQ (90), limit 100. `vgpu node` arbitrates. Per
# round, interleaved:
#   alone  the light tenant alone, natively: its p99, and its native share
#          (device time per request by CUDA events / interval)
#   nat    training natively: ALONE_S seconds alone (steps/s alone), then the
#          light tenant beside it (light p99 of the pair without vgpu)
#   vgpu   the same pair, each a `vgpu exec` with its request
# Targets: the light p99 under vgpu <= 1.2 x the native pair's; training
# steps/s beside it under vgpu >= 0.9 x native alone x (1 - light share).
# The report also gives training alone under vgpu exec (the stretch before the
# light tenant starts): the library's own cost on the loop.
#   VGPU=… LIBDIR=… bench/gpu/colocate.sh     # ROUNDS=3 REQS=500: ~4 min (80 s a round)
# TRAIN_WARM (tenant.py, default 5) shortens the training's warm-up.
set -uo pipefail
VGPU=${VGPU:?path to vgpu}
LIBDIR=${LIBDIR:?directory of libvgpu-cuda.so and libvgpu-nvml.so}
ROUNDS=${ROUNDS:-3}
REQS=${REQS:-750}
ALONE_S=${ALONE_S:-5}
LREQ=${LREQ:-10}
TREQ=${TREQ:-90}
export INTERVAL_MS=${INTERVAL_MS:-8} LIGHT_MATMULS=${LIGHT_MATMULS:-3}
OUT=${OUT:-/tmp}; mkdir -p "$OUT"
R=$OUT/colocate.txt; : > $R
T="$(dirname "$0")/tenant.py"
NODE=""
if [ -z "${NO_NODE:-}" ]; then
  $VGPU node --listen "" > $OUT/colocate-node.log 2>&1 &
  NODE=$!
  sleep 2
  kill -0 $NODE || { echo "vgpu node did not start"; cat $OUT/colocate-node.log; exit 1; }
fi
# cmd nat|ex REQUEST: the command prefix in CMD (an array, so that a
# background run's $! is timeout itself, which forwards SIGTERM to vgpu exec,
# which forwards it to the tenant)
cmd() {
  if [ $1 = ex ]; then CMD=(timeout -k 5 180 "$VGPU" exec --lib-dir "$LIBDIR" --compute-request "$2" --)
  else CMD=(timeout -k 5 180 env -u LD_PRELOAD); fi
}
pair() { # label nat|ex
  local label=$1 how=$2 ready="$OUT/ready.$$" t
  rm -f "$ready"
  cmd $how $TREQ
  "${CMD[@]}" python3 $T train "$ready" > "$OUT/train.log" 2>&1 &
  t=$!
  local w=0
  while [ ! -e "$ready" ] && [ $w -lt 600 ]; do sleep 0.1; w=$((w + 1)); done
  [ -e "$ready" ] || { echo "$label $r: training never ready"; tail -5 "$OUT/train.log"; kill -TERM $t; wait $t; return; }
  sleep $ALONE_S
  echo "$label $r launch $(date +%s.%N)" >> $R
  cmd $how $LREQ
  "${CMD[@]}" python3 $T light $REQS > "$OUT/light.log" 2>&1
  kill -TERM $t; wait $t
  grep '^light' "$OUT/light.log" | sed "s/^/$label $r /" >> $R || { echo "$label $r: no light result"; tail -5 "$OUT/light.log"; }
  grep '^steps\|^warm' "$OUT/train.log" | sed "s/^/$label $r /" >> $R
  grep -q "^$label $r steps" $R || { echo "$label $r: no steps"; tail -5 "$OUT/train.log"; }
  rm -f "$ready"
}
for r in $(seq $ROUNDS); do
  cmd nat 0
  "${CMD[@]}" python3 $T light $REQS 2>&1 | grep '^light' | sed "s/^/alone $r /" >> $R
  pair nat nat
  pair vgpu ex
  grep "^[a-z]* $r light " $R | tail -3
done
[ -n "$NODE" ] && { $VGPU status > $OUT/colocate-status.txt 2>&1; kill $NODE; wait $NODE 2>/dev/null; }
python3 - "$R" <<'PY'
import sys, statistics as st
L, S, W, La = {}, {}, {}, {}
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) < 4: continue
    k = (f[0], f[1])
    if f[2] == "light" and f[3].startswith("n="):
        d = dict(zip(f[4::2], f[5::2])); L.setdefault(k, {}).update(p50=float(d["p50_ms"]), p99=float(d["p99_ms"]))
    if f[2] == "light_gpu_ms_mean":
        L.setdefault(k, {}).update(gpu=float(f[3])); W[k] = (float(f[5]), float(f[6]))
    if f[2] == "launch": La[k] = float(f[3])
    if f[2] == "steps" and len(f) == 5:
        S.setdefault(k, []).append((float(f[3]), int(f[4])))
def rate(pts, a, b):  # steps/s between Unix times a and b
    inside = [p for p in pts if a <= p[0] <= b]
    if len(inside) < 2: return float("nan")
    return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])
rounds = sorted({k[1] for k in L})
iv = float(__import__("os").environ.get("INTERVAL_MS", "8"))
ok = lambda b: "ok" if b else "MISSED"
rows = []
for r in rounds:
    al, na, vg = L.get(("alone", r), {}), L.get(("nat", r), {}), L.get(("vgpu", r), {})
    share = al.get("gpu", float("nan")) / iv
    sn, sv = S.get(("nat", r), []), S.get(("vgpu", r), [])
    wn, wv = W.get(("nat", r)), W.get(("vgpu", r))
    # alone: from the first step counted until the light tenant is started
    alone = rate(sn, sn[0][0], La[("nat", r)]) if sn and ("nat", r) in La else float("nan")
    # the same stretch of the vgpu pair: training alone under vgpu exec (the library's own cost)
    valone = rate(sv, sv[0][0], La[("vgpu", r)]) if sv and ("vgpu", r) in La else float("nan")
    pn = rate(sn, wn[0], wn[1]) if wn else float("nan")
    pv = rate(sv, wv[0], wv[1]) if wv else float("nan")
    rows.append((al.get("p99", float("nan")), na.get("p99", float("nan")), vg.get("p99", float("nan")), share, alone, pn, pv, valone))
    print("round %s: light p99 ms alone %.3f, native pair %.3f, vgpu pair %.3f (ratio %.2f, <= 1.2 %s); light p50 alone %.3f nat %.3f vgpu %.3f; "
          "light device time %.3f ms/request = native share %.1f %%; training steps/s native alone %.2f, native pair %.2f, vgpu pair %.2f "
          "(%.1f %% of alone x (1 - share), >= 90 %s); under vgpu alone %.2f (%.1f %% of native alone)" % (
        r, rows[-1][0], rows[-1][1], rows[-1][2], rows[-1][2] / rows[-1][1], ok(rows[-1][2] <= 1.2 * rows[-1][1]),
        al.get("p50", float("nan")), na.get("p50", float("nan")), vg.get("p50", float("nan")),
        al.get("gpu", float("nan")), 100 * share, alone, pn, pv, 100 * pv / (alone * (1 - share)), ok(pv >= 0.9 * alone * (1 - share)),
        valone, 100 * valone / alone))
m = [st.median(c) for c in zip(*rows)] if rows else []
if m:
    print("6. medians over %d rounds: light p99 alone %.3f ms, native pair %.3f, vgpu pair %.3f: %.2f x native pair (<= 1.2) %s; "
          "light native share %.1f %%; training steps/s native alone %.2f, vgpu pair %.2f = %.1f %% of alone x (1 - share) (>= 90) %s; "
          "training under vgpu alone %.2f (%.1f %% of native alone)" % (
        len(rows), m[0], m[1], m[2], m[2] / m[1], ok(m[2] <= 1.2 * m[1]), 100 * m[3], m[4], m[6],
        100 * m[6] / (m[4] * (1 - m[3])), ok(m[6] >= 0.9 * m[4] * (1 - m[3])), m[7], 100 * m[7] / m[4]))
    r6 = [100 * x[6] / (x[4] * (1 - x[3])) for x in rows]
    r99 = [x[2] / x[1] for x in rows]
    print("   by round: training %% of alone x (1 - share) %s; light p99 / native pair %s" % (
        " ".join("%.1f" % v for v in r6), " ".join("%.2f" % v for v in r99)))
PY
