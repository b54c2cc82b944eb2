#!/usr/bin/env bash
# Memory borrowing with the shapes users have, on a real NVIDIA GPU (an H200,
# 141 GiB; docs/node.md "Memory borrowing"). Run as root from the repository
# root:
#   BIN=dir/with/vgpu+vgpu-node LIBDIR=dir/with/libvgpu-*.so test/gpu/borrow-shapes.sh
# (ROUNDS=3 by default; everything goes to $OUT). vgpu exec tenants, no runc;
# vgpu node --interval 100ms under memory_borrow = "free". Each round:
# 1. a two-process PyTorch borrower (request 20 GiB, limit 128) fills the
#    GPU in 1 GiB tensors: PASS when together they hold at least 120 GiB
#    (the limit less contexts); then a PyTorch owner (request = limit =
#    38 GiB) takes 17 tensors of 2 GiB: PASS when every one succeeds, the
#    slowest within 2 s, with a borrow kill event;
# 2. the owner ended, a new borrower fills again: PASS when it reaches
#    120 GiB (the ended owner's room is free to it); then a CuPy owner
#    (its memory pool) takes the same 17 x 2 GiB: PASS as in 1;
# 3. again, with a JAX owner (XLA's BFC allocator, no preallocation,
#    XLA_PYTHON_CLIENT_MEM_FRACTION=.95: XLA sizes itself to 75% of the
#    total cuMemGetInfo shows, the limit, unless told): PASS as in 1;
# 4. a four-process borrower (same request and limit) alone, each process
#    taking 29 GiB in 1 GiB tensors at once: PASS when all four do.
set -uo pipefail
REPO=$(pwd)
BIN=${BIN:-$REPO/build/bin}
LIBDIR=$(cd "${LIBDIR:-$REPO/build/lib}" && pwd)
ROUNDS=${ROUNDS:-3}
W=$(mktemp -d /tmp/vgpu-gpu-shapes-XXXXXX)
OUT=${OUT:-$W/out}
mkdir -p "$OUT"
export PATH=$BIN:$PATH
if [ ! -x "$BIN/vgpu-node" ] || [ ! -x "$BIN/vgpu" ]; then echo "$0: no vgpu and vgpu-node in $BIN" >&2; exit 1; fi
T=$REPO/test/gpu/borrow_shapes_tenant.py
EV=$W/state/.node/events.jsonl
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
{
  echo "== $(date -u +%FT%TZ) $(uname -r)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
} | tee -a "$SUMMARY"
cat > "$W/config.toml" <<TOML
memory_borrow = "free"
state_dir = "$W/state"
[driver]
root = "/"
dev_root = "/"
[library]
dir = "$LIBDIR"
TOML
export VGPU_CONFIG=$W/config.toml
NODE=
BORROWER=
GOT=0
stop_borrower() {
  [ -n "$BORROWER" ] || return 0
  kill -TERM -- "-$BORROWER" 2>/dev/null
  timeout -k 5 20 tail --pid="$BORROWER" -f /dev/null 2>/dev/null
  kill -KILL -- "-$BORROWER" 2>/dev/null
  wait "$BORROWER" 2>/dev/null
  BORROWER=
}
# shellcheck disable=SC2317 # run by the trap
cleanup() {
  stop_borrower
  [ -n "$NODE" ] && { kill "$NODE" 2>/dev/null; wait "$NODE" 2>/dev/null; }
  cp "$W"/*.out "$W"/*.log "$OUT"/ 2>/dev/null
  cp "$EV" "$OUT"/ 2>/dev/null
  rm -rf "$W/state"
}
trap cleanup EXIT
timeout -k 5 560 vgpu-node --state-dir "$W/state" --interval 100ms > "$W/node.log" 2>&1 &
NODE=$!
for _ in $(seq 100); do [ -e "$W/state/.node/node.json" ] && break; sleep 0.1; done
fail=0
wait_lines() { # FILE PATTERN COUNT SECONDS
  for _ in $(seq $(($4 * 10))); do [ "$(grep -c "$2" "$1" 2>/dev/null)" -ge "$3" ] && return 0; sleep 0.1; done; return 1
}
# kills: borrow kills so far (0 before the node has written an event)
kills() { if [ -e "$EV" ]; then grep -c '"reason":"borrow"' "$EV"; else echo 0; fi; }
# borrower NAME PROCS MAX_GIB: a vgpu exec (request 20 GiB, limit 128) of
# PROCS PyTorch processes filling at once, in a session of its own, each
# writing to NAME.pI.out; waits for each to report its fill or end, and
# sets GOT to their sum (not in a subshell:
# BORROWER must stay set for stop_borrower)
borrower() {
  local cmd="" i n
  for i in $(seq "$2"); do cmd+="python3 $T fill 24 $3 > $W/$1.p$i.out 2>&1 & "; done
  setsid timeout -k 5 300 vgpu exec --devices 0 --memory-request 20Gi --memory-limit 128Gi -- sh -c "${cmd}wait" > "$W/$1.out" 2>&1 &
  BORROWER=$!
  # Each process reports its fill, or ends: a process whose siblings
  # reached the limit first gets out-of-memory for its context.
  for _ in $(seq 1200); do
    n=0
    for i in $(seq "$2"); do grep -q 'fill_gib=\|Error' "$W/$1.p$i.out" 2>/dev/null && n=$((n + 1)); done
    [ "$n" -ge "$2" ] && break
    sleep 0.1
  done
  GOT=$(grep -ho 'fill_gib=[0-9]*' "$W/$1".p*.out | cut -d= -f2 | awk '{s += $1} END {print s + 0}')
}
# owner NAME FW [ENV...]: a vgpu exec owner (request = limit = 38 GiB)
# taking 17 tensors of 2 GiB
owner() {
  local name=$1 fw=$2 before rc worst got
  shift 2
  before=$(kills)
  env "$@" timeout -k 5 120 vgpu exec --devices 0 --memory-request 38Gi --memory-limit 38Gi -- python3 "$T" owner "$fw" 17 2 > "$W/$name.out" 2>&1
  rc=$?
  vgpu status --state-dir "$W/state" > "$W/$name-status.log" 2>&1
  worst=$(sed -n 's/.*owner_worst_s=\([0-9.]*\).*/\1/p' "$W/$name.out")
  got=$(sed -n 's/.*owner_done_gib=\([0-9]*\).*/\1/p' "$W/$name.out")
  if [ $rc = 0 ] && [ "$got" = 34 ] && python3 -c "import sys; sys.exit(0 if float('${worst:-99}') <= 2.0 else 1)" && [ "$(kills)" -gt "$before" ]; then
    say "PASS $name: $fw owner took 34 GiB in 2 GiB steps beside the full GPU, slowest ${worst} s, borrow kills $(kills)"
  else
    say "FAIL $name: $fw owner exit $rc, took '${got}' GiB, slowest '${worst}' s, borrow kills $before -> $(kills): $(grep -m1 owner_oom_at "$W/$name.out")"
    fail=1
  fi
}

for r in $(seq "$ROUNDS"); do
  say "== round $r"
  for step in torch cupy jax; do
    borrower "b$r-$step" 2 0
    if [ "$GOT" -ge 120 ]; then say "PASS b$r-$step: a two-process borrower holds $GOT GiB (limit 128)"
    else say "FAIL b$r-$step: a two-process borrower holds $GOT GiB, want at least 120"; fail=1; fi
    vgpu status --state-dir "$W/state" > "$W/b$r-$step-status.log" 2>&1
    grep -m1 "memory: device 0 holds" "$W/b$r-$step-status.log" | tee -a "$SUMMARY"
    case $step in
    jax) owner "o$r-$step" jax XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_PYTHON_CLIENT_MEM_FRACTION=.95 ;;
    *) owner "o$r-$step" "$step" ;;
    esac
    stop_borrower
  done
  borrower "four$r" 4 29
  n=$(grep -ho 'fill_gib=29 ' "$W/four$r".p*.out | wc -l)
  if [ "$n" = 4 ]; then say "PASS four$r: four processes took 29 GiB each ($GOT GiB, limit 128)"
  else say "FAIL four$r: $n of four processes reached 29 GiB ($GOT GiB in all)"; fail=1; fi
  stop_borrower
done
say "== result: $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
