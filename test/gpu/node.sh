#!/usr/bin/env bash
# vgpu node on a real NVIDIA GPU (docs/node.md). Run as root from
# the repository root with the built binaries:
#   BIN=dir/with/vgpu+vgpu-node+vgpu-runtime+vgpu-discover+runc LIBDIR=build/lib test/gpu/node.sh
# 1. attack 2 in a runc container started through vgpu-runtime: the real
#    driver dlopened by its full path, 16 GiB under VGPU_MEMORY_LIMIT=2Gi;
#    PASS when vgpu node kills it within 1 s of crossing the limit.
# 2. an honest PyTorch job (test/gpu/torch_mem.py: fills its 8 GiB limit to
#    the library's OOM, frees, fills again) runs to the end untouched.
# 3. (COMPUTE=0 skips it) a compute bypass, spin kernels launched through the
#    real driver under VGPU_COMPUTE_LIMIT=25: frozen in a duty cycle that
#    holds the GPU's utilization to <= 35 % (seconds 30-60), or killed by
#    the escalation within 12 s of the first freeze; the daemon's measured
#    share and duty are printed beside the GPU's utilization, every second.
set -uo pipefail
REPO=$(pwd)
BIN=${BIN:-$REPO/build/bin}
LIBDIR=${LIBDIR:-$REPO/build/lib}
W=$(mktemp -d /tmp/vgpu-gpu-node-XXXXXX)
export PATH=$BIN:$PATH
# vgpu-runtime (no cgo) lists the GPUs with vgpu-discover from its own directory.
[ -x "$BIN/vgpu-discover" ] || { echo "$0: no vgpu-discover in $BIN (make build puts it beside vgpu-runtime)" >&2; exit 1; }
echo "== $(date -u +%FT%TZ) $(uname -r); runc: $(runc --version | head -1)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
. test/gpu/hostroot.sh
hostroot_setup
# the tenant program, where the container (this machine's / as its root,
# with a /tmp of its own) sees it: under the repository
mkdir -p $REPO/build && gcc -O2 -o $REPO/build/vgpu-attack test/e2e/attack/attack.c -ldl || exit 1
fail=0

vgpu-node --state-dir $W/state --listen 127.0.0.1:9411 > $W/node.log 2>&1 &
NODE=$!
trap 'kill $NODE 2>/dev/null; wait $NODE 2>/dev/null; cat $W/node.log; hostroot_cleanup' EXIT
for _ in $(seq 100); do [ -e $W/state/.node/node.json ] && break; sleep 0.1; done
vgpu status --state-dir $W/state | head -1

echo "== attack 2: the real driver by its path, 16 GiB under 2 GiB"
bundle attack2 VGPU_VISIBLE_DEVICES=0 VGPU_MEMORY_LIMIT=2Gi -- sh -c "$REPO/build/vgpu-attack driver 16384 2048 < /dev/zero > /tmp/out 2>&1; echo attacker exit \$?; cat /tmp/out"
# stdin /dev/zero never ends: the attacker holds until it is killed
timeout 120 vgpu-runtime --root $W/runc run -b $W/attack2 attack2 2>&1 | tee $W/attack2.out
crossed=$(sed -n 's/^crossed_ns=//p' $W/attack2.out)
python3 - "$W/state/.node/events.jsonl" "${crossed:-0}" <<'PY' || fail=1
import json, sys, datetime
crossed = int(sys.argv[2])
kills = [json.loads(l) for l in open(sys.argv[1]) if '"attack2"' in l]
kills = [e for e in kills if e["kind"] == "kill"]
if not kills or not crossed:
    print("FAIL: no kill of attack2 recorded (or no crossing reported)", kills, crossed); sys.exit(1)
e = kills[0]
t = e["time"]  # RFC 3339 with nanoseconds
sec, frac = t.rstrip("Z").split(".") if "." in t else (t.rstrip("Z"), "0")
ns = int(datetime.datetime.fromisoformat(sec).replace(tzinfo=datetime.timezone.utc).timestamp()) * 10**9 + int(frac.ljust(9, "0")[:9])
d = (ns - crossed) / 1e9
print(f"killed pid {e['pid']}: {e['used']/2**30:.2f} GiB > limit {e['limit']/2**30:.2f} GiB, {d:.3f} s after crossing the limit")
print("PASS" if d <= 1.0 else "FAIL", "(killed within 1 s)")
sys.exit(0 if d <= 1.0 else 1)
PY
grep -q "attacker exit 137" $W/attack2.out && echo "PASS (attacker died of SIGKILL)" || { echo "FAIL: attacker did not die of SIGKILL"; fail=1; }

echo "== an honest PyTorch job filling its 8 GiB limit"
bundle honest VGPU_VISIBLE_DEVICES=0 VGPU_MEMORY_LIMIT=8Gi -- python3 test/gpu/torch_mem.py
timeout 300 vgpu-runtime --root $W/runc run -b $W/honest honest 2>&1 | tee $W/honest.out
rc=${PIPESTATUS[0]}
if [ "$rc" = 0 ] && ! grep -q '"honest"' $W/state/.node/events.jsonl 2>/dev/null; then
  echo "PASS (exit 0, no enforcement event)"
else
  echo "FAIL: exit $rc; events: $(grep '"honest"' $W/state/.node/events.jsonl 2>/dev/null)"; fail=1
fi
if [ "${COMPUTE:-1}" = 1 ]; then
echo "== compute bypass: spin kernels through the real driver under VGPU_COMPUTE_LIMIT=25, 60 s"
# PASS: frozen first, then either held (the GPU's utilization averaged over
# seconds 30-60 <= 35 %, no kill) or killed by the escalation (docs/node.md:
# EscalateAfter 10 s from the first freeze, the share since still > 35 %)
# within 12 s of the first freeze. Printed per second: the GPU's
# utilization (nvidia-smi) next to the daemon's own measure of the
# container's share and its throttle's duty (the metrics endpoint).
nvcc -cubin -arch=${ARCH:-sm_90} -o $REPO/build/spin.cubin test/gpu/spin.cu || exit 1
bundle bypass VGPU_VISIBLE_DEVICES=0 VGPU_COMPUTE_LIMIT=25 -- $REPO/build/vgpu-attack gpuspin $REPO/build/spin.cubin
python3 - $W/metrics.txt <<'PY' &
import sys, time, urllib.request
# one line a second: unix time, the daemon's share of bypass, its duty
with open(sys.argv[1], "w") as out:
    for _ in range(70):
        share = duty = ""
        try:
            for l in urllib.request.urlopen("http://127.0.0.1:9411/metrics", timeout=1).read().decode().splitlines():
                if 'container="bypass"' not in l:
                    continue
                if l.startswith("vgpu_container_compute_share_percent{"):
                    share = l.split()[-1]
                elif l.startswith("vgpu_container_throttle_duty{"):
                    duty = l.split()[-1]
        except Exception as e:
            share = "err:" + type(e).__name__
        out.write(f"{time.time():.1f} {share or '-'} {duty or '-'}\n"); out.flush()
        time.sleep(1)
PY
SCRAPE=$!
vgpu-runtime --root $W/runc run -b $W/bypass bypass > $W/bypass.out 2>&1 &
BYPASS=$!
timeout 60 nvidia-smi -i 0 --query-gpu=timestamp,utilization.gpu --format=csv,noheader,nounits -lms 1000 > $W/util.txt
runc --root $W/runc kill bypass KILL 2>/dev/null; wait $BYPASS
kill $SCRAPE 2>/dev/null; wait $SCRAPE 2>/dev/null
cat $W/bypass.out
grep '"bypass"' $W/state/.node/events.jsonl
python3 - $W/util.txt $W/state/.node/events.jsonl $W/metrics.txt <<'PY' || fail=1
import sys, json, datetime
def ts(t):  # an event's time: RFC 3339 in UTC, up to nanoseconds
    sec, _, frac = t.rstrip("Z").partition(".")
    d = datetime.datetime.fromisoformat(sec).replace(tzinfo=datetime.timezone.utc)
    return d.timestamp() + float("0." + (frac or "0"))
util = []
for l in open(sys.argv[1]):
    f = [x.strip() for x in l.split(",")]
    if len(f) == 2 and f[1].isdigit():
        util.append(int(f[1]))
ev = [json.loads(l) for l in open(sys.argv[2]) if '"bypass"' in l]
m = [l.split() for l in open(sys.argv[3]) if l.strip()]
print("second  GPU util %  daemon's share %  duty")
for i in range(max(len(util), len(m))):
    u = util[i] if i < len(util) else "-"
    s, d = (m[i][1], m[i][2]) if i < len(m) else ("-", "-")
    print(f"{i:6d}  {u!s:>10}  {s:>16}  {d:>4}")
late = util[30:60]
avg = sum(late) / max(1, len(late))
freezes = [e for e in ev if e["kind"] == "freeze"]
kills = [e for e in ev if e["kind"] == "kill" and e.get("reason") == "compute"]
esc = [e for e in ev if e["kind"] == "escalate"]
froze = bool(freezes)
killed = bool(kills)
after = None
if froze and killed:
    after = ts(kills[0]["time"]) - ts(freezes[0]["time"])
print(f"seconds 30-60: {avg:.1f} % (limit 25 + 10); frozen: {froze}; killed: {killed}"
      + (f" {after:.1f} s after the first freeze ({esc[0]['detail'] if esc else ''})" if after is not None else ""))
if killed:
    ok = froze and after is not None and after <= 12
    print("PASS (killed by the escalation)" if ok else "FAIL: killed without a freeze first, or later than 12 s after it")
else:
    ok = froze and avg <= 35
    print("PASS (held by the freezer)" if ok else "FAIL: neither held to <= 35 % nor killed")
sys.exit(0 if ok else 1)
PY
fi
vgpu status --state-dir $W/state
curl -s http://127.0.0.1:9411/metrics 2>/dev/null | grep -E '^vgpu_(enforcement|node_round_duration_seconds_(sum|count)|container_(compute_share_percent|throttle_duty))' 
echo "== result: $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
