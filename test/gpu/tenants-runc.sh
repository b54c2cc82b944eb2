#!/usr/bin/env bash
# A tenant sees only its own processes, in containers on a real GPU: two runc containers started
# through vgpu-runtime on GPU 0 (VGPU_MEMORY_LIMIT=4Gi each), with vgpu node
# running; b holds 1 GiB with PyTorch, a holds 512 MiB and runs nvidia-smi.
# PASS when a's nvidia-smi shows its own process with its real usage and
# neither b's host pid nor b's usage. Run as root from the repository root:
#   BIN=dir/with/vgpu+vgpu-runtime+runc LIBDIR=build/lib test/gpu/tenants-runc.sh
set -uo pipefail
REPO=$(pwd)
BIN=${BIN:-$REPO/build/bin}
LIBDIR=${LIBDIR:-$REPO/build/lib}
W=$(mktemp -d /tmp/vgpu-tenants-XXXXXX)
export PATH=$BIN:$PATH
fails=0
check() { if eval "$2"; then echo "PASS $1"; else echo "FAIL $1"; fails=$((fails+1)); fi; }
. test/gpu/hostroot.sh
hostroot_setup
vgpu-node --state-dir $W/state --listen 127.0.0.1:9412 > $W/node.log 2>&1 &
NODE=$!
trap 'kill $NODE 2>/dev/null; wait $NODE 2>/dev/null; hostroot_cleanup' EXIT

# the tenants' programs, where a container over this machine's / sees them
T=$REPO/build/gpu-tenants; mkdir -p $T
cat > $T/hold.py <<'PY'
import sys, time, torch
x = torch.empty(int(sys.argv[1]) << 20, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
print("held", flush=True)
time.sleep(int(sys.argv[2]))
PY
cat > $T/a.sh <<'SH'
python3 $(dirname $0)/hold.py 512 120 > /tmp/hold.out 2>&1 &
for i in $(seq 90); do grep -q held /tmp/hold.out && break; sleep 1; done
sleep 2
echo "a: own pid $! (in the container)"
nvidia-smi
echo "== query"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader
kill $!
SH

bundle b VGPU_VISIBLE_DEVICES=0 VGPU_MEMORY_LIMIT=4Gi -- python3 $T/hold.py 1024 120
vgpu-runtime --root $W/runc run -b $W/b b > $W/b.out 2>&1 &
B=$!
for _ in $(seq 90); do grep -q held $W/b.out && break; sleep 1; done
BPID=$(runc --root $W/runc state b | python3 -c 'import json,sys; print(json.load(sys.stdin)["pid"])')
echo "b: host pid $BPID; host's view:"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader
bundle a VGPU_VISIBLE_DEVICES=0 VGPU_MEMORY_LIMIT=4Gi -- sh $T/a.sh
timeout 150 vgpu-runtime --root $W/runc run -b $W/a a 2>&1 | tee $W/a.out
BMIB=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits | awk -F', *' -v p=$BPID '$1 == p {print $2}')
echo "b's usage on the host: ${BMIB:-?} MiB"
check "a sees a GPU of 4096 MiB" "grep -q '/  *4096MiB' $W/a.out"
check "a does not see b's host pid $BPID" "! grep -qw $BPID $W/a.out"
check "a does not see b's usage (${BMIB:-?} MiB)" "[ -n '$BMIB' ] && ! grep -qE '(^|[ ,])$BMIB ?MiB' $W/a.out"
check "a sees its own process with its usage (>= 512 MiB)" \
  "sed -n '/== query/,\$p' $W/a.out | awk -F', *' 'NR > 1 && \$2+0 >= 512 {f=1} END {exit !f}'"
runc --root $W/runc kill b KILL 2>/dev/null; wait $B
echo "== result: $([ $fails = 0 ] && echo PASS || echo "FAIL ($fails)")"
exit $fails
