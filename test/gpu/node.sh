#!/usr/bin/env bash
# vgpu node on a real NVIDIA GPU (issue 18, docs/node.md). Run as root from
# the repository root with the built binaries:
#   BIN=dir/with/vgpu+vgpu-runtime+vgpu-discover+runc LIBDIR=build/lib test/gpu/node.sh
# 1. attack 2 in a runc container started through vgpu-runtime: the real
#    driver dlopened by its full path, 16 GiB under VGPU_MEMORY_LIMIT=2Gi;
#    PASS when vgpu node kills it within 1 s of crossing the limit.
# 2. an honest PyTorch job (test/gpu/torch_mem.py: fills its 8 GiB limit to
#    the library's OOM, frees, fills again) runs to the end untouched.
# 3. (COMPUTE=0 skips it) a compute bypass, spin kernels launched through the
#    real driver under VGPU_COMPUTE_LIMIT=25: frozen in a duty cycle that
#    holds the GPU's utilization to <= 35 % (seconds 30-60), or killed.
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

vgpu node --state-dir $W/state --listen 127.0.0.1:9411 > $W/node.log 2>&1 &
NODE=$!
trap 'kill $NODE 2>/dev/null; wait $NODE 2>/dev/null; cat $W/node.log; hostroot_cleanup' EXIT
for i in $(seq 100); do [ -e $W/state/.node/node.json ] && break; sleep 0.1; done
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
# PASS: the GPU's utilization averaged over seconds 30-60 is <= 35 % (held by
# the freezer's duty cycle), or the bypass was killed (escalation)
nvcc -cubin -arch=${ARCH:-sm_90} -o $REPO/build/spin.cubin test/gpu/spin.cu || exit 1
bundle bypass VGPU_VISIBLE_DEVICES=0 VGPU_COMPUTE_LIMIT=25 -- $REPO/build/vgpu-attack gpuspin $REPO/build/spin.cubin
vgpu-runtime --root $W/runc run -b $W/bypass bypass > $W/bypass.out 2>&1 &
BYPASS=$!
timeout 60 nvidia-smi -i 0 --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 1000 > $W/util.txt
runc --root $W/runc kill bypass KILL 2>/dev/null; wait $BYPASS
cat $W/bypass.out
grep '"bypass"' $W/state/.node/events.jsonl
python3 - $W/util.txt $W/state/.node/events.jsonl <<'PY' || fail=1
import sys, json
u = [int(l) for l in open(sys.argv[1]) if l.strip().isdigit()]
ev = [json.loads(l) for l in open(sys.argv[2]) if '"bypass"' in l]
print("utilization per second:", u)
late = u[30:60]
avg = sum(late) / max(1, len(late))
killed = any(e["kind"] == "kill" for e in ev)
froze = any(e["kind"] == "freeze" for e in ev)
print(f"seconds 30-60: {avg:.1f} % (limit 25 + 10); frozen: {froze}; killed: {killed}")
ok = froze and (avg <= 35 or killed)
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
fi
vgpu status --state-dir $W/state
curl -s http://127.0.0.1:9411/metrics 2>/dev/null | grep -E '^vgpu_(enforcement|node_round_duration_seconds_(sum|count))' 
echo "== result: $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
