#!/usr/bin/env bash
# Borrowed memory taken back by suspending the borrower instead of killing
# it (docs/node.md, "Memory borrowing"), on a real GPU, ROUNDS (3) rounds.
#
# Needs (carried, built by `make build` of a tree with memory_reclaim):
#   BIN=dir    holding vgpu (`vgpu exec --memory-request`, `vgpu status`)
#              and vgpu-node (the daemon, and its own checkpoint helper: it
#              runs itself with VGPU_CHECKPOINT_HELPER=1, which `vgpu node`
#              does not answer)
#   LIBDIR=dir holding libvgpu-cuda.so and libvgpu-nvml.so
# and on the GPU machine PyTorch, CuPy, JAX (no runc: the tenants are
# `vgpu exec` commands, whose processes vgpu node counts by descent). Run as
# root from the repository root, one phase a call (each under 8 minutes,
# progress in $OUT/progress.log as it goes):
#   BIN=… LIBDIR=… PHASE=frameworks OUT=dir bash test/gpu/suspend.sh   # ~5 min
#   BIN=… LIBDIR=… PHASE=hold       OUT=dir bash test/gpu/suspend.sh   # ~6 min
#
# Setting: vgpu-node of this run's own (state in a temp dir, 100 ms rounds) with
# memory_borrow = "free" and memory_reclaim = "suspend". First a reference:
# the borrower's training loop, undisturbed, under the same vgpu exec, with
# the GPU to itself (REF_STEPS steps, no pause between them). Then a holder
# outside vgpu (test/gpu/borrow_tenant.py outside) leaves KEEP_GIB (48) GiB
# of the card free, whatever its size. Per round:
#   borrower  vgpu exec --memory-request 8Gi --memory-limit 40Gi:
#             test/gpu/suspend_trainer.py, a deterministic PyTorch training
#             loop holding BORROW_GIB (36) GiB, its loss logged per step
#   owners    vgpu exec --memory-request 16Gi --memory-limit 16Gi, one after
#             the other (test/gpu/suspend_owner.py), each growing to its
#             request in 1 GiB allocations (15 for PyTorch and CuPy, 14 for
#             JAX, beside the context and XLA's own), then holding:
#     PHASE=frameworks  PyTorch, then CuPy's pool, then JAX with
#                       XLA_PYTHON_CLIENT_PREALLOCATE=false (and XLA's own cap
#                       raised: MEM_FRACTION 0.95), OWNER_HOLD_S (3) each
#     PHASE=hold        PyTorch holding HOLD_S (60) s
#   after each owner exits, the borrower must take a step again (restored)
#   within RESTORE_WAIT_S (60).
# 48 GiB less the borrower's 36 leaves an owner about 11 GiB: each owner
# needs the borrower's memory back.
# PASS (the issue's H200 rows), per round and over rounds:
#   - every owner allocation succeeded, the slowest within 2 s + the copy
#     time (the borrower's GiB / the suspension's GiB/s, both measured here);
#   - no process killed: no 'kill' event, the borrower and every owner
#     exited 0, the borrower printed 'done … ballast_intact=True';
#   - the borrower was suspended (a suspend event, or its memory gone from
#     nvidia-smi while the owner held) and restored after the owner exited;
#   - its loss sequence equals the reference's, step by step (exact floats).
# Reported: each owner's allocation times, suspend and restore GiB/s (from
# the node's events when they carry durations, and from nvidia-smi's
# per-process figures every ~250 ms), the borrower's lost time (the steps'
# gaps beyond its normal step), every event. Files: $OUT/summary.txt
# (test/gpu/suspend_report.py), $OUT/tenants.txt (every tenant's lines,
# labelled), $OUT/apps.txt (nvidia-smi's compute processes over time),
# $OUT/events.jsonl, $OUT/node.log, $OUT/progress.log, $OUT/status.txt.
set -uo pipefail
REPO=$(pwd)
BIN=${BIN:?dir holding vgpu (see the header)}
LIBDIR=${LIBDIR:?dir holding libvgpu-cuda.so and libvgpu-nvml.so}
VGPU=${VGPU:-$BIN/vgpu}
NODEBIN=${NODEBIN:-$BIN/vgpu-node}
PHASE=${PHASE:-frameworks}
OUT=${OUT:-/tmp/vgpu-suspend}
mkdir -p "$OUT"
ROUNDS=${ROUNDS:-3}
BUDGET_S=${BUDGET_S:-420} # no round starts that would end (by the last one's length) after this
KEEP_GIB=${KEEP_GIB:-48}
BORROW_GIB=${BORROW_GIB:-36}
BORROW_REQ=${BORROW_REQ:-8Gi}
BORROW_LIMIT=${BORROW_LIMIT:-40Gi}
OWNER_REQ=${OWNER_REQ:-16Gi}
REF_STEPS=${REF_STEPS:-4000}
STEP_SLEEP=${STEP_SLEEP:-0.02}
OWNER_HOLD_S=${OWNER_HOLD_S:-3}
HOLD_S=${HOLD_S:-60}
RESTORE_WAIT_S=${RESTORE_WAIT_S:-60}
export PATH=$BIN:$PATH PYTHONUNBUFFERED=1
W=$(mktemp -d /tmp/vgpu-suspend-XXXXXX)
LOG=$OUT/progress.log
TEN=$OUT/tenants.txt
: > "$LOG"
: > "$TEN"
START=$(date +%s)
NODE=
HOLDER=
BORROWER=
APPS=
say() { echo "$(date -u +%T) +$(($(date +%s) - START))s $*" | tee -a "$LOG"; }
fail() { say "FAIL: $*"; exit 1; }
# shellcheck disable=SC2317 # the EXIT trap calls it
cleanup() {
  local p _
  # SIGTERM first: timeout passes it on to the tenant (vgpu exec to its
  # command); SIGKILL of timeout itself would leave the tenant running
  for p in $BORROWER $HOLDER; do kill -TERM "$p" 2> /dev/null; done
  for _ in $(seq 50); do
    local up=0
    for p in $BORROWER $HOLDER; do kill -0 "$p" 2> /dev/null && up=1; done
    [ "$up" = 1 ] || break
    sleep 0.1
  done
  for p in $BORROWER $HOLDER; do kill -9 "$p" 2> /dev/null; wait "$p" 2> /dev/null; done
  [ -n "$APPS" ] && { kill "$APPS" 2> /dev/null; wait "$APPS" 2> /dev/null; }
  if [ -n "$NODE" ]; then
    VGPU_CONFIG=$CFG timeout -k 2 10 "$VGPU" status > "$OUT/status.txt" 2>&1
    kill -TERM "$NODE" 2> /dev/null
    wait "$NODE" 2> /dev/null
  fi
  cp "$W/state/.node/events.jsonl" "$OUT/events.jsonl" 2> /dev/null
  rm -rf "$W"
}
trap cleanup EXIT
wait_line() { # FILE PATTERN SECONDS
  local _
  for _ in $(seq $(($3 * 10))); do grep -q "$2" "$1" 2> /dev/null && return 0; sleep 0.1; done
  return 1
}

case $PHASE in
  frameworks) OWNERS="torch:15:$OWNER_HOLD_S cupy:15:$OWNER_HOLD_S jax:14:$OWNER_HOLD_S" ;;
  hold) OWNERS="torch:15:$HOLD_S" ;;
  *) fail "PHASE: frameworks or hold, not '$PHASE'" ;;
esac
[ -x "$VGPU" ] || fail "no vgpu at '$VGPU' (BIN=dir holding vgpu, or VGPU=path)"
[ -x "$NODEBIN" ] || fail "no vgpu-node at '$NODEBIN' (BIN=dir holding it, or NODEBIN=path)"
[ -e "$LIBDIR/libvgpu-cuda.so" ] || fail "no libvgpu-cuda.so in LIBDIR='$LIBDIR'"
[[ "$("$VGPU" exec --help 2>&1)" == *--memory-request* ]] || fail "'$VGPU exec' has no --memory-request"
say "== PHASE=$PHASE $(uname -r); $(nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader); vgpu: $("$VGPU" --version 2>&1 | head -1); host MemAvailable $(awk '/MemAvailable/ {print int($2/1048576)}' /proc/meminfo) GiB"

CFG=$W/config.toml
cat > "$CFG" << TOML
state_dir = "$W/state"
memory_borrow = "free"
memory_reclaim = "suspend"
TOML
VGPU_CONFIG=$CFG "$NODEBIN" --state-dir "$W/state" --interval 100ms > "$OUT/node.log" 2>&1 &
NODE=$!
up=0
for _ in $(seq 100); do
  VGPU_CONFIG=$CFG timeout -k 2 10 "$VGPU" status 2> /dev/null | grep -q "host enforcement: on" && { up=1; break; }
  kill -0 "$NODE" 2> /dev/null || break
  sleep 0.1
done
[ $up = 1 ] || fail "vgpu node did not come up with memory_reclaim = \"suspend\": $(tail -3 "$OUT/node.log")"
# nvidia-smi's compute processes with the time, every ~250 ms
(while :; do
  t=$(date +%s.%N)
  timeout -k 1 5 nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2> /dev/null | sed "s/^/$t /"
  echo "$t end"
  sleep 0.25
done) > "$OUT/apps.txt" &
APPS=$!

# borrower_cmd: the borrower's vgpu exec prefix in BCMD
BCMD=(env VGPU_CONFIG="$CFG" "$VGPU" exec --lib-dir "$LIBDIR" --memory-request "$BORROW_REQ" --memory-limit "$BORROW_LIMIT" --)
OCMD=(env VGPU_CONFIG="$CFG" "$VGPU" exec --lib-dir "$LIBDIR" --memory-request "$OWNER_REQ" --memory-limit "$OWNER_REQ" --)

say "reference: $REF_STEPS undisturbed steps holding $BORROW_GIB GiB, the GPU to itself"
STEP_SLEEP=0 timeout -k 5 240 "${BCMD[@]}" python3 test/gpu/suspend_trainer.py "$REF_STEPS" "$BORROW_GIB" > "$W/ref.out" 2>&1
rc=$?
sed 's/^/ref 0 /' "$W/ref.out" >> "$TEN"
grep -q '^done .*ballast_intact=True' "$W/ref.out" || fail "reference run (exit $rc): $(tail -3 "$W/ref.out")"
say "reference: $(grep '^ready' "$W/ref.out"); $(tail -1 "$W/ref.out")"

timeout -k 5 3600 env -u LD_PRELOAD python3 test/gpu/borrow_tenant.py outside "$KEEP_GIB" > "$W/holder.out" 2>&1 &
HOLDER=$!
wait_line "$W/holder.out" outside_free_mib 90 || fail "the holder outside vgpu: $(tail -3 "$W/holder.out")"
say "holder outside vgpu: $(tr '\n' ' ' < "$W/holder.out")"

round() {
  local r=$1 o fw n hold rc t_exit last
  rm -f "$W/stop"
  say "== round $r"
  echo "round $r start $(date +%s.%N)" >> "$TEN"
  STEP_SLEEP=$STEP_SLEEP timeout -k 5 900 "${BCMD[@]}" python3 test/gpu/suspend_trainer.py "$REF_STEPS" "$BORROW_GIB" "$W/stop" > "$W/b.out" 2>&1 &
  BORROWER=$!
  if ! wait_line "$W/b.out" '^ready' 150; then
    say "round $r: the borrower never ready: $(tail -3 "$W/b.out")"
    kill -TERM "$BORROWER"; wait "$BORROWER"; BORROWER=
    sed "s/^/borrower $r /" "$W/b.out" >> "$TEN"
    return 1
  fi
  say "round $r borrower: $(grep '^ready' "$W/b.out"); $(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | tr '\n' ' ')"
  sleep 2
  for o in $OWNERS; do
    IFS=: read -r fw n hold <<< "$o"
    say "round $r owner $fw: $n GiB, holding $hold s"
    timeout -k 5 $((hold + 180)) "${OCMD[@]}" python3 test/gpu/suspend_owner.py "$fw" "$n" "$hold" > "$W/o.out" 2>&1
    rc=$?
    t_exit=$(date +%s.%N)
    sed "s/^/owner-$fw $r /" "$W/o.out" >> "$TEN"
    echo "owner-$fw $r rc $rc $t_exit" >> "$TEN"
    say "round $r owner $fw exit $rc: $(grep '^owner_done\|^owner_oom' "$W/o.out" || tail -2 "$W/o.out")"
    # restored: the borrower takes a step after the owner is gone
    local w=0
    while [ $w -lt $((RESTORE_WAIT_S * 10)) ]; do
      last=$(grep '^step ' "$W/b.out" | tail -1 | cut -d' ' -f3)
      [ -n "$last" ] && awk -v a="$last" -v b="$t_exit" 'BEGIN {exit !(a > b)}' && break
      kill -0 "$BORROWER" 2> /dev/null || break
      sleep 0.1
      w=$((w + 1))
    done
    echo "owner-$fw $r restored_step_after_s $(awk -v a="${last:-0}" -v b="$t_exit" 'BEGIN {printf "%.3f", a - b}')" >> "$TEN"
    say "round $r borrower after $fw: last step at +$(awk -v a="${last:-0}" -v b="$t_exit" 'BEGIN {printf "%.2f", a - b}') s of the owner's exit; alive: $(kill -0 "$BORROWER" 2> /dev/null && echo yes || echo NO)"
    sleep 1
  done
  touch "$W/stop"
  # a borrower left suspended would wait for good: 60 s, then stop it
  local _
  for _ in $(seq 600); do
    kill -0 "$BORROWER" 2> /dev/null || break
    sleep 0.1
  done
  kill -0 "$BORROWER" 2> /dev/null && { say "round $r: the borrower did not end within 60 s of its stop file: SIGTERM"; kill -TERM "$BORROWER"; }
  wait "$BORROWER"
  rc=$?
  BORROWER=
  sed "s/^/borrower $r /" "$W/b.out" >> "$TEN"
  echo "borrower $r rc $rc" >> "$TEN"
  say "round $r borrower exit $rc: $(tail -1 "$W/b.out")"
}

last=0
for r in $(seq "$ROUNDS"); do
  t=$(date +%s)
  if [ $((t - START + last)) -gt "$BUDGET_S" ]; then
    say "round $r skipped: it would end past BUDGET_S=$BUDGET_S s (the last round took $last s)"
    break
  fi
  round "$r"
  last=$(($(date +%s) - t))
done
kill "$APPS" 2> /dev/null
wait "$APPS" 2> /dev/null
APPS=
cp "$W/state/.node/events.jsonl" "$OUT/events.jsonl" 2> /dev/null || : > "$OUT/events.jsonl"
timeout -k 5 60 python3 "$REPO/test/gpu/suspend_report.py" "$TEN" "$OUT/events.jsonl" "$OUT/apps.txt" "$BORROW_GIB" > "$OUT/summary.txt"
rc=$?
tee -a "$LOG" < "$OUT/summary.txt"
say "done"
exit $rc
