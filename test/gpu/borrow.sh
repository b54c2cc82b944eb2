#!/usr/bin/env bash
# Memory borrowing on a real NVIDIA GPU (docs/node.md, "Memory borrowing").
# Run as root from the repository root:
#   BIN=dir/with/vgpu+vgpu-runtime+vgpu-discover+vgpu-node+runc LIBDIR=build/lib test/gpu/borrow.sh
# A PyTorch process outside vgpu holds all of the GPU but 40 GiB; runc
# containers through vgpu-runtime (the host's / as their root), each with
# VGPU_MEMORY_REQUEST=16Gi VGPU_MEMORY_LIMIT=32Gi, vgpu node running:
# 1. default rule: beside an idle second container, the first takes only
#    what no request needs: PASS when it holds at most 24 GiB (its context
#    included) and more than its 16.
# 2. memory_borrow = "free": the first takes up to its 32 GiB; the second,
#    an honest PyTorch job, then grows to its request (15 tensors of 1 GiB
#    beside its context): PASS when every allocation succeeds, the slowest
#    within 2 s, the borrower's process is killed with a borrow event
#    naming the owner, and no event touches the owner.
set -uo pipefail
REPO=$(pwd)
BIN=${BIN:-$REPO/build/bin}
LIBDIR=${LIBDIR:-$REPO/build/lib}
W=$(mktemp -d /tmp/vgpu-gpu-borrow-XXXXXX)
OUT=${OUT:-$W}
export PATH=$BIN:$PATH
[ -x "$BIN/vgpu-node" ] || { echo "$0: no vgpu-node in $BIN" >&2; exit 1; }
echo "== $(date -u +%FT%TZ) $(uname -r); runc: $(runc --version | head -1)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
. test/gpu/hostroot.sh
hostroot_setup
mkdir -p $REPO/build && cp test/gpu/borrow_tenant.py $REPO/build/borrow_tenant.py
fail=0
EV=$W/state/.node/events.jsonl
NODE=
OUTS=
stop_node() { [ -n "$NODE" ] && { kill $NODE 2>/dev/null; wait $NODE 2>/dev/null; }; NODE=; }
start_node() { # CONFIG LOG
  VGPU_CONFIG=$1 vgpu-node --state-dir $W/state --interval 100ms > $2 2>&1 &
  NODE=$!
  for _ in $(seq 100); do [ -e $W/state/.node/node.json ] && break; sleep 0.1; done
}
trap 'stop_node; kill $OUTS 2>/dev/null; wait $OUTS 2>/dev/null; cp $W/*.log $W/*.out $OUT/ 2>/dev/null; cp $EV $OUT/ 2>/dev/null; hostroot_cleanup' EXIT
events() { grep "\"container\":\"$1\"" $EV 2>/dev/null; }
wait_line() { # FILE PATTERN SECONDS
  for _ in $(seq $(($3 * 10))); do grep -q "$2" $1 2>/dev/null && return 0; sleep 0.1; done; return 1
}
ENVS="VGPU_VISIBLE_DEVICES=0 VGPU_MEMORY_REQUEST=16Gi VGPU_MEMORY_LIMIT=32Gi"

python3 build/borrow_tenant.py outside 40 > $W/outside.out 2>&1 &
OUTS=$!
wait_line $W/outside.out outside_free_mib 60 || { echo "FAIL: the outside process"; cat $W/outside.out; exit 1; }
cat $W/outside.out

echo "== 1. default rule"
start_node $VGPU_CONFIG $W/node-default.log
bundle idle $ENVS -- sleep 600
vgpu-runtime --root $W/runc run -d -b $W/idle idle
bundle a1 $ENVS -- python3 $REPO/build/borrow_tenant.py fill 16
vgpu-runtime --root $W/runc run -b $W/a1 a1 > $W/a1.out 2>&1 &
A1PID=$!
wait_line $W/a1.out fill_gib= 90; cat $W/a1.out
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader
vgpu status --state-dir $W/state | grep -i "memory:"
runc --root $W/runc kill a1 KILL 2>/dev/null; runc --root $W/runc kill idle KILL 2>/dev/null
wait $A1PID; sleep 1
runc --root $W/runc delete -f a1 2>/dev/null; runc --root $W/runc delete -f idle 2>/dev/null
A1=$(sed -n 's/.*fill_gib=\([0-9]*\).*/\1/p' $W/a1.out)
if [ -n "$A1" ] && [ "$A1" -gt 16 ] && [ "$A1" -le 24 ]; then echo "PASS default: the first took $A1 GiB (+ its context) of 24"; else echo "FAIL default: took '${A1}' GiB"; fail=1; fi
stop_node

echo "== 2. memory_borrow = free"
{ echo 'memory_borrow = "free"'; cat $VGPU_CONFIG; } > $W/config-free.toml
start_node $W/config-free.toml $W/node-free.log
bundle borrower $ENVS -- python3 $REPO/build/borrow_tenant.py fill 16
bundle owner $ENVS -- python3 $REPO/build/borrow_tenant.py owner 15
VGPU_CONFIG=$W/config-free.toml vgpu-runtime --root $W/runc run -b $W/borrower borrower > $W/borrower.out 2>&1 &
wait_line $W/borrower.out fill_gib= 90; cat $W/borrower.out
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader
VGPU_CONFIG=$W/config-free.toml vgpu-runtime --root $W/runc run -b $W/owner owner > $W/owner.out 2>&1
rc=$?
cat $W/owner.out
wait_line $EV '"reason":"borrow"' 5
echo "events:"; cat $EV 2>/dev/null
runc --root $W/runc kill borrower KILL 2>/dev/null
B=$(sed -n 's/.*fill_gib=\([0-9]*\).*/\1/p' $W/borrower.out)
WORST=$(sed -n 's/.*owner_worst_s=\([0-9.]*\).*/\1/p' $W/owner.out)
KILL=$(grep '"reason":"borrow"' $EV 2>/dev/null | head -1)
if [ -n "$B" ] && [ "$B" -gt 24 ]; then echo "PASS free: the borrower took $B GiB (+ its context) of 32"; else echo "FAIL free: the borrower took '${B}' GiB"; fail=1; fi
if [ $rc = 0 ] && [ -n "$WORST" ] && python3 -c "import sys; sys.exit(0 if float('$WORST') <= 2.0 else 1)"; then
  echo "PASS owner: grew to its request, slowest allocation ${WORST} s"
else echo "FAIL owner: exit $rc, slowest '${WORST}'"; fail=1; fi
case "$KILL" in
*'"container":"borrower"'*'owner needs'*) echo "PASS borrow kill: $KILL" ;;
*) echo "FAIL: no borrow kill of the borrower naming the owner"; fail=1 ;;
esac
if [ -z "$(events owner)" ]; then echo "PASS the honest owner untouched"; else echo "FAIL owner events: $(events owner)"; fail=1; fi
echo "== result: $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
