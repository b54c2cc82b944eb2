#!/usr/bin/env bash
# vgpu node against tenants that try to outrun it, on a real NVIDIA GPU
# (docs/node.md, docs/security.md). Run as root from the repository root:
#   BIN=dir/with/vgpu+vgpu-runtime+vgpu-discover+runc LIBDIR=build/lib test/gpu/node-tenants.sh
# Runc containers through vgpu-runtime, the host's / as their root:
# 1. bursts: 16 GiB for 300 ms every 600 ms under 2 GiB (8x, each burst
#    shorter than the grace): PASS when killed within 2 s of the first burst.
# 2. six processes of 1 GiB each (with their contexts, each under the limit,
#    together about 4x over) under 2 GiB: PASS when one round brings the
#    container under its limit (every kill at one time, <= 1 s after the
#    first crossing seen).
# 3. respawning workers (6 GiB each, respawned after every kill) under
#    2 GiB: PASS when the container is killed whole within 5 s of the first
#    worker's kill.
# 4. respawned 1 s kernels under a 25 % limit beside a 50 % neighbour (an
#    honest PyTorch matmul loop): the neighbour's matmul rate over the 60 s
#    after the tenant starts, against its rate alone: PASS when it keeps
#    >= 90 % of it (>= 45 % of the GPU).
# 5. an honest PyTorch job filling its 8 GiB limit runs to the end untouched.
set -uo pipefail
REPO=$(pwd)
BIN=${BIN:-$REPO/build/bin}
LIBDIR=${LIBDIR:-$REPO/build/lib}
W=$(mktemp -d /tmp/vgpu-gpu-tenants-XXXXXX)
OUT=${OUT:-$W}
export PATH=$BIN:$PATH
[ -x "$BIN/vgpu-discover" ] || { echo "$0: no vgpu-discover in $BIN" >&2; exit 1; }
echo "== $(date -u +%FT%TZ) $(uname -r); runc: $(runc --version | head -1); cgroup: $(stat -fc %T /sys/fs/cgroup)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
. test/gpu/hostroot.sh
hostroot_setup
mkdir -p $REPO/build && gcc -O2 -o $REPO/build/vgpu-attack test/e2e/attack/attack.c -ldl || exit 1
nvcc -cubin -arch=${ARCH:-sm_90} -o $REPO/build/spin.cubin test/gpu/spin.cu || exit 1
fail=0
EV=$W/state/.node/events.jsonl

vgpu-node --state-dir $W/state --listen 127.0.0.1:9412 > $W/node.log 2>&1 &
NODE=$!
trap 'kill $NODE 2>/dev/null; wait $NODE 2>/dev/null; cp $W/node.log $OUT/ 2>/dev/null; cp $EV $OUT/ 2>/dev/null; hostroot_cleanup' EXIT
for _ in $(seq 100); do [ -e $W/state/.node/node.json ] && break; sleep 0.1; done

# events ID: the container's events, one JSON per line
events() { grep "\"container\":\"$1\"" $EV 2>/dev/null; }

echo "== 1. bursts: 16 GiB for 300 ms every 600 ms under 2 GiB"
bundle burst VGPU_VISIBLE_DEVICES=0 VGPU_MEMORY_LIMIT=2Gi -- sh -c "$REPO/build/vgpu-attack burst 16384 300 300 > /tmp/out 2>&1; echo attacker exit \$?; cat /tmp/out"
timeout 60 vgpu-runtime --root $W/runc run -b $W/burst burst 2>&1 | tee $W/burst.out
python3 - "$(events burst)" "$(sed -n 's/^burst_ns=//p' $W/burst.out)" <<'PY' || fail=1
import json, sys, datetime
def ns(t):
    sec, _, frac = t.rstrip("Z").partition(".")
    return int(datetime.datetime.fromisoformat(sec).replace(tzinfo=datetime.timezone.utc).timestamp()) * 10**9 + int((frac or "0").ljust(9, "0")[:9])
ev = [json.loads(l) for l in sys.argv[1].splitlines() if l.strip()]
kills = [e for e in ev if e["kind"] == "kill"]
first = int(sys.argv[2] or 0)
if not kills or not first:
    print("FAIL: no kill of the bursting process", ev); sys.exit(1)
d = (ns(kills[0]["time"]) - first) / 1e9
print(f"bursts: killed {d:.3f} s after the first burst ({kills[0]['used']/2**30:.2f} GiB > {kills[0]['limit']/2**30:.0f} GiB; {kills[0]['detail']})")
print("PASS" if d <= 2 else "FAIL", "(within 2 s of the first burst)")
sys.exit(0 if d <= 2 else 1)
PY

echo "== 2. six processes of 1 GiB under 2 GiB"
bundle six VGPU_VISIBLE_DEVICES=0 VGPU_MEMORY_LIMIT=2Gi -- sh -c "for i in 1 2 3 4 5 6; do $REPO/build/vgpu-attack driver 1024 < /dev/zero > /dev/null 2>&1 & done; wait"
vgpu-runtime --root $W/runc run -b $W/six six > $W/six.out 2>&1 &
SIX=$!
for _ in $(seq 150); do [ "$(events six | grep -c '"kill"')" -ge 5 ] && break; sleep 0.1; done
sleep 1
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader
runc --root $W/runc kill six KILL 2>/dev/null; wait $SIX
python3 - "$(events six)" <<'PY' || fail=1
import json, sys
ev = [json.loads(l) for l in sys.argv[1].splitlines() if l.strip()]
kills = [e for e in ev if e["kind"] == "kill"]
if not kills:
    print("FAIL: no kill"); sys.exit(1)
rounds = sorted({e["time"] for e in kills})
print(f"six: {len(kills)} kills in {len(rounds)} round(s); the container held {kills[0]['used']/2**30:.2f} GiB > {kills[0]['limit']/2**30:.0f} GiB ({kills[0]['detail']})")
ok = len(rounds) == 1 and len(kills) >= 4
print("PASS" if ok else "FAIL", "(one round)")
sys.exit(0 if ok else 1)
PY

echo "== 3. respawning workers of 6 GiB under 2 GiB"
bundle respawn VGPU_VISIBLE_DEVICES=0 VGPU_MEMORY_LIMIT=2Gi -- sh -c "while true; do $REPO/build/vgpu-attack driver 6144 < /dev/zero > /dev/null 2>&1; done"
timeout 60 vgpu-runtime --root $W/runc run -b $W/respawn respawn; echo "[container exit $?]"
python3 - "$(events respawn)" <<'PY' || fail=1
import json, sys, datetime
def ts(t):
    sec, _, frac = t.rstrip("Z").partition(".")
    return datetime.datetime.fromisoformat(sec).replace(tzinfo=datetime.timezone.utc).timestamp() + float("0." + (frac or "0"))
ev = [json.loads(l) for l in sys.argv[1].splitlines() if l.strip()]
kills = [e for e in ev if e["kind"] == "kill"]
whole = [e for e in ev if e["kind"] == "kill-container"]
if not kills or not whole:
    print("FAIL: kills", kills, "container kill", whole); sys.exit(1)
d = ts(whole[0]["time"]) - ts(kills[0]["time"])
print(f"respawn: {len(kills)} worker kill(s), then the container killed whole {d:.2f} s after the first ({whole[0]['detail']})")
print("PASS" if d <= 5 else "FAIL", "(within 5 s)")
sys.exit(0 if d <= 5 else 1)
PY

echo "== 4. respawned 1 s kernels under 25 % beside a 50 % neighbour"
cat > $W/nb.py <<'PY'
import time, torch
x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
t0 = time.time(); n = 0; last = t0
while time.time() - t0 < 72:
    y = x @ x; torch.cuda.synchronize(); n += 1
    now = time.time()
    if now - last >= 1:
        print(f"{now:.2f} {n / (now - last):.1f}", flush=True); n = 0; last = now
PY
cp $W/nb.py $REPO/build/nb.py
bundle nb VGPU_VISIBLE_DEVICES=0 VGPU_COMPUTE_LIMIT=50 -- python3 $REPO/build/nb.py
bundle tenant VGPU_VISIBLE_DEVICES=0 VGPU_COMPUTE_LIMIT=25 -- sh -c "while true; do $REPO/build/vgpu-attack gpuspin $REPO/build/spin.cubin 1000000000 > /dev/null 2>&1; done"
vgpu-runtime --root $W/runc run -b $W/nb nb > $W/nb.out 2>&1 &
NB=$!
sleep 10
TSTART=$(date +%s.%N)
vgpu-runtime --root $W/runc run -b $W/tenant tenant > $W/tenant.out 2>&1 &
TEN=$!
wait $NB
runc --root $W/runc kill tenant KILL 2>/dev/null; wait $TEN
tail -3 $W/nb.out
python3 - $W/nb.out "$TSTART" "$(events tenant)" <<'PY' || fail=1
import json, sys, datetime
def ts(t):
    sec, _, frac = t.rstrip("Z").partition(".")
    return datetime.datetime.fromisoformat(sec).replace(tzinfo=datetime.timezone.utc).timestamp() + float("0." + (frac or "0"))
rows = [l.split() for l in open(sys.argv[1]) if l[:1].isdigit()]
rows = [(float(a), float(b)) for a, b in rows if len(rows)]
t0 = float(sys.argv[2])
alone = [r for t, r in rows if t0 - 7 <= t < t0]
beside = [r for t, r in rows if t0 <= t < t0 + 60]
ev = [json.loads(l) for l in sys.argv[3].splitlines() if l.strip()]
a = sum(alone) / max(1, len(alone)); b = sum(beside) / max(1, len(beside))
kinds = {}
for e in ev:
    kinds[e["kind"]] = kinds.get(e["kind"], 0) + 1
whole = [e for e in ev if e["kind"] == "kill-container"]
when = f", container killed whole {ts(whole[0]['time']) - t0:.1f} s after it started" if whole else ""
frac = b / a if a else 0
print(f"neighbour at 50 %: {a:.1f} matmuls/s alone, {b:.1f} over the 60 s beside the tenant ({frac*100:.0f} %: {50*frac:.1f} % of the GPU); tenant events {kinds}{when}")
ok = frac >= 0.9
print("PASS" if ok else "FAIL", "(neighbour keeps >= 45 % of the GPU)")
sys.exit(0 if ok else 1)
PY

echo "== 5. an honest PyTorch job filling its 8 GiB limit"
bundle honest VGPU_VISIBLE_DEVICES=0 VGPU_MEMORY_LIMIT=8Gi -- python3 test/gpu/torch_mem.py
timeout 300 vgpu-runtime --root $W/runc run -b $W/honest honest 2>&1 | tee $W/honest.out
rc=${PIPESTATUS[0]}
if [ "$rc" = 0 ] && [ -z "$(events honest)" ]; then
  echo "PASS (exit 0, no enforcement event)"
else
  echo "FAIL: exit $rc; events: $(events honest)"; fail=1
fi
echo "== result: $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
