#!/usr/bin/env bash
# A tenant's priority on a real GPU (docs/design.md, priorities): vgpu's
# priority against the hardware's own time slicing and plain MPS with its
# client priority, in the same run, ROUNDS (3) interleaved rounds, medians
# and spread, nvidia-smi's SM clock sampled throughout (the H200 flat out
# sits at its power cap near 1455 MHz against 1980 paced, which alone moves
# device time by up to 1.34x: every table gives each setting's clock).
#
# Needs (carried, built by `make build` of a tree with the priority):
#   BIN=dir    holding vgpu (with `vgpu exec --priority` and `vgpu node`)
#   LIBDIR=dir holding libvgpu-cuda.so and libvgpu-nvml.so
# and on the GPU machine nvcc, PyTorch, transformers,
# nvidia-cuda-mps-control. Run as root from the repository root, one phase
# a call (each under 8 minutes, progress in $OUT/progress.log as it goes):
#   BIN=… LIBDIR=… PHASE=colo  OUT=dir bash bench/gpu/priority.sh   # item 1, ~6.5 min
#   BIN=… LIBDIR=… PHASE=probe OUT=dir bash bench/gpu/priority.sh   # items 4 and 5 (direct), ~5.5 min
#   BIN=… LIBDIR=… PHASE=req   OUT=dir bash bench/gpu/priority.sh   # item 3, ~3.5 min
# Items 2 and 5 (serving) are bench/gpu/serve/run.sh's configurations
# (its README: "Priorities"), 3 rounds each under 8 minutes as the lead
# splits them (ROUNDS=1 FIRST_ROUND=N, one call a round, report.py joins):
#   item 2, time slicing: CONFIGS="dedicated mixed mpsprio prio50"
#   item 2, spatial:      CONFIGS="dedicated mpsprio priospatial100"
#   item 5:               CONFIGS="dedicated unlimited req50"
#   VGPU=$BIN/vgpu LIBDIR=… CONFIGS=… ROUNDS=1 FIRST_ROUND=1 OUT=$OUT/serve bench/gpu/serve/run.sh
# Item 2 PASS: A's ITL p99 <= 1.2x and TTFT p99 <= 1.5x of dedicated, B's
# throughput >= 0.9 x (1 - A's busy share) of dedicated; item 5: req50's
# TTFT p99 <= unlimited's, ITL p99 <= 1.5x, each server's throughput not
# below the results table's req50 row.
# Every vgpu tenant is a `vgpu exec --priority P` (the library reads its
# priority from the host's share file, which the admission writes: an
# environment variable in the tenant would be the tenant's own word), with
# a `vgpu node` of this run's own (state in a temp directory) arbitrating.
# Results: $OUT/summary-$PHASE.txt (the table, bench/gpu/priority_report.py),
# $OUT/$PHASE.txt (the raw lines), $OUT/clocks.txt, $OUT/node.log,
# $OUT/progress.log, $OUT/mps-control.log, for probe $OUT/raw.txt, and
# $OUT/status/SETTING-ROUND.json (vgpu status --json of each vgpu setting
# while its tenants run: their orderWaitMs; for colo also
# SETTING-ROUND-live.json, the last taken while the light tenant ran).
#
# PHASE=colo (item 1): bench/gpu/tenant.py's light tenant (LIGHT_MATMULS=3
#   bf16 4096^3 matmuls every INTERVAL_MS=8 ms, COLO_REQS=300 requests)
#   beside its GPT-2 training loop; per round the light one alone natively,
#   then in an order rotated by round:
#     nat    both native (the hardware's time slicing)
#     mps    both MPS clients, light at CUDA_MPS_CLIENT_PRIORITY=0, training at 1
#     vgpu   light --priority high --compute-request LREQ (10), training
#            --priority low --compute-request TREQ (90; TREQ=0: no request)
#     vgeq   the same requests, no priority (today's row)
#   (COLO_SETTINGS: a subset of these, in this order before the rotation;
#   TRAIN_VOCAB=50304: a padded vocabulary, which spares the training the
#   4-7 ms LM-head GEMMs GPT-2's 50257 gets; tenant.py kernels shows them)
#   PASS (item 1): vgpu light p99 <= 1.5 x alone (stretch 1.3), training
#   >= 90 % of native alone x (1 - the light tenant's busy share).
# PHASE=probe (items 4 and 5's direct figure): bench/gpu/prioprobe.cu's
#   light tenant (REQS=250 requests, a LIGHT_US=500 us kernel on every SM
#   every 8 ms, at most MAX_S=4 s of them; time from its launch call to its
#   first block running: 'start') beside a flood of FLOODS="1 20" ms
#   kernels (4 queued, blocks holding their SMs the whole kernel); native,
#   plain MPS and their 5 ms are in run 30 of docs/archive/gpu-runs.md
#   (bench/gpu/priority-probe.sh); blocks rotated by round:
#     nat-alone nat-fF                native
#     mps-alone mps-pri-fF            MPS, flood at client priority 1
#     vg-alone vg-pri-fF              light --priority high, flood --priority low
#                                     (requests PLREQ / PFREQ, default none)
#     vg-eq-fF                        both normal, --compute-request 50 each,
#                                     limits 100 (the serving harness's req50)
#   Item 4: vg-pri-f20's start p99, set against nat-f20 and mps-pri-f20 and
#   against 20 ms (one low kernel already running) and 4 x 20 (its queue):
#   what bounds it. Item 5 (direct): vg-eq-f1's start p99 <= 1 ms.
# PHASE=req (item 3): bench/gpu/spin.cu busy tenants (device time counted
#   on the device), SECS=6, requests 30 and 50 with limits 100: eq (both
#   normal: today's 37.5 : 62.5 +- 3), hl (30 high, 50 low), lh (30 low, 50
#   high), hh (both high), and R1low (request 30, low, alone: >= 95 % of
#   native). PASS: every tenant at least its request (of native device
#   time, -3 points), the pair >= 97 % of native, and the equal-priority
#   pairs (eq, hh) at 37.5 : 62.5 +- 3; the table gives the split of hl and
#   lh (priority orders time inside the period; the requests still hold).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
BIN=${BIN:?dir holding vgpu (see the header)}
LIBDIR=${LIBDIR:?dir holding libvgpu-cuda.so and libvgpu-nvml.so}
VGPU=${VGPU:-$BIN/vgpu}
PHASE=${PHASE:-colo}
OUT=${OUT:-/tmp/vgpu-priority}
mkdir -p "$OUT"
ROUNDS=${ROUNDS:-3}
BUDGET_S=${BUDGET_S:-420} # no round starts that would end (by the last one's length) after this
MPS_CONTROL=${MPS_CONTROL:-$(command -v nvidia-cuda-mps-control || echo /usr/local/nvidia/bin/nvidia-cuda-mps-control)}
# probe
REQS=${REQS:-250}
INTERVAL_US=${INTERVAL_US:-8000}
LIGHT_US=${LIGHT_US:-500}
FLOODS=${FLOODS:-1 20}
MAX_S=${MAX_S:-4}
PLREQ=${PLREQ:-}
PFREQ=${PFREQ:-}
# colo
COLO_REQS=${COLO_REQS:-300}
ALONE_S=${ALONE_S:-2}
LREQ=${LREQ:-10}
TREQ=${TREQ:-90}
COLO_SETTINGS=${COLO_SETTINGS:-nat mps vgpu vgeq} # a subset for a shorter run
export INTERVAL_MS=${INTERVAL_MS:-8} LIGHT_MATMULS=${LIGHT_MATMULS:-3} TRAIN_WARM=${TRAIN_WARM:-2}
# req
SECS=${SECS:-6}

W=$(mktemp -d /tmp/vgpu-prio-XXXXXX)
R=$OUT/$PHASE.txt
LOG=$OUT/progress.log
: > "$R"
: > "$LOG"
START=$(date +%s)
PROBE=$W/prioprobe
# shellcheck source=bench/gpu/prioprobe-lib.sh
. bench/gpu/prioprobe-lib.sh
NODE=
TP=
# snapshot LABEL ROUND: vgpu status --json of a vgpu setting while its
# tenants still run, into $OUT/status/LABEL-ROUND.json: each tenant's
# orderWaitMs (how long its launches waited for a higher one) and grants.
snapshot() {
  case $1 in vg*) ;; *) return 0 ;; esac
  mkdir -p "$OUT/status"
  VGPU_CONFIG=$CFG timeout -k 2 10 "$VGPU" status --json > "$OUT/status/$1-$2.json" 2>&1 || true
}
one_snapshot() { snapshot "$@"; }
cleanup() {
  [ -n "$TP" ] && { kill -TERM "$TP" 2> /dev/null; wait "$TP" 2> /dev/null; }
  probe_cleanup
  if [ -n "$NODE" ]; then
    VGPU_CONFIG=$CFG timeout -k 2 10 "$VGPU" status > "$OUT/status.txt" 2>&1
    kill -TERM "$NODE" 2> /dev/null
    wait "$NODE" 2> /dev/null
  fi
  rm -rf "$W"
}
trap cleanup EXIT
fail() { say "FAIL: $*"; exit 1; }

case $PHASE in colo | probe | req) ;; *) fail "PHASE: colo, probe or req, not '$PHASE'" ;; esac
[ -x "$VGPU" ] || fail "no vgpu at '$VGPU' (BIN=dir holding vgpu, or VGPU=path)"
[ -e "$LIBDIR/libvgpu-cuda.so" ] || fail "no libvgpu-cuda.so in LIBDIR='$LIBDIR'"
# read whole: grep -q would end the pipe early
[[ "$("$VGPU" exec --help 2>&1)" == *--priority* ]] || fail "'$VGPU exec' has no --priority: build a vgpu that has it"
[ -x "$MPS_CONTROL" ] || fail "no nvidia-cuda-mps-control at '$MPS_CONTROL' (set MPS_CONTROL)"
say "== PHASE=$PHASE $(uname -r); $(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv,noheader); vgpu: $("$VGPU" --version 2>&1 | head -1)"
case $PHASE in
  probe) timeout -k 5 180 nvcc -O2 -arch=sm_90 -o "$PROBE" bench/gpu/prioprobe.cu || fail "nvcc prioprobe.cu" ;;
  req) timeout -k 5 180 nvcc -O2 -arch=sm_90 -o "$W/spin" bench/gpu/spin.cu || fail "nvcc spin.cu" ;;
esac

CFG=$W/config.toml
echo "state_dir = \"$W/state\"" > "$CFG"
VGPU_CONFIG=$CFG "$VGPU" node --listen "" > "$OUT/node.log" 2>&1 &
NODE=$!
up=0
for _ in $(seq 100); do
  VGPU_CONFIG=$CFG timeout -k 2 10 "$VGPU" status 2> /dev/null | grep -q "host enforcement: on" && { up=1; break; }
  kill -0 "$NODE" 2> /dev/null || break
  sleep 0.1
done
[ $up = 1 ] || fail "vgpu node did not come up: $(tail -3 "$OUT/node.log")"
clocks_start

# ex PRIORITY REQUEST: the prefix of a vgpu tenant in EX (an empty
# priority: none given; an empty or 0 request: none)
ex() {
  EX=(env VGPU_CONFIG="$CFG" "$VGPU" exec --lib-dir "$LIBDIR")
  [ -n "$1" ] && EX+=(--priority "$1")
  [ -n "$2" ] && [ "$2" != 0 ] && EX+=(--compute-request "$2")
  EX+=(--)
}
rotate() { # ROUND WORDS...: the words rotated by ROUND-1
  local r=$1 n i
  shift
  n=$#
  local a=("$@") out=()
  for ((i = 0; i < n; i++)); do out+=("${a[$(((i + r - 1) % n))]}"); done
  echo "${out[@]}"
}
rounds() { # BODY: runs BODY ROUND for each round, within BUDGET_S
  local r t last=0
  for r in $(seq "$ROUNDS"); do
    t=$(date +%s)
    if [ $((t - START + last)) -gt "$BUDGET_S" ]; then
      say "round $r skipped: it would end past BUDGET_S=$BUDGET_S s (the last round took $last s)"
      break
    fi
    say "== round $r"
    "$1" "$r"
    last=$(($(date +%s) - t))
  done
}

# ---- PHASE=colo ---------------------------------------------------------
T=${TENANT:-bench/gpu/tenant.py}
# colo_pair LABEL ROUND LIGHT_PREFIX... --train TRAIN_PREFIX...
colo_pair() {
  local label=$1 r=$2 ready=$W/ready.train lp=() tp=()
  shift 2
  while [ "$1" != --train ]; do lp+=("$1"); shift; done
  shift
  tp=("$@")
  rm -f "$ready"
  timeout -k 5 180 "${tp[@]}" python3 "$T" train "$ready" > "$W/train.out" 2>&1 &
  TP=$!
  if ! wait_file "$ready" 90; then
    say "$label $r: training never ready: $(tail -2 "$W/train.out")"
    kill -TERM "$TP"; wait "$TP"; TP=
    return 1
  fi
  sleep "$ALONE_S"
  echo "$label $r launch $(date +%s.%N)" >> "$R"
  timeout -k 5 120 "${lp[@]}" python3 "$T" light "$COLO_REQS" > "$W/light.out" 2>&1 &
  local LP=$!
  # the status while both run (the last one taken before the light one
  # ends: its own wait for the order, its grant and its slot), then after
  while kill -0 "$LP" 2> /dev/null; do
    snapshot "$label" "$r-live.part" && [ -s "$OUT/status/$label-$r-live.part.json" ] &&
      mv "$OUT/status/$label-$r-live.part.json" "$OUT/status/$label-$r-live.json"
    sleep 0.5
  done
  wait "$LP"
  snapshot "$label" "$r"
  kill -TERM "$TP"
  wait "$TP"
  TP=
  grep '^light' "$W/light.out" | sed "s/^/$label $r /" >> "$R" || say "$label $r: no light result: $(tail -2 "$W/light.out")"
  grep '^steps\|^warm' "$W/train.out" | sed "s/^/$label $r /" >> "$R"
  say "$label $r: $(grep '^light n=' "$W/light.out"); $(grep -c '^steps' "$W/train.out") step lines"
}
colo_round() {
  local r=$1 c lp tp MPS EX
  timeout -k 5 120 "${NAT[@]}" python3 "$T" light "$COLO_REQS" > "$W/light.out" 2>&1
  grep '^light' "$W/light.out" | sed "s/^/alone $r /" >> "$R" || say "alone $r: no light result: $(tail -2 "$W/light.out")"
  say "alone $r: $(grep '^light n=' "$W/light.out")"
  # shellcheck disable=SC2086 # a list of words
  for c in $(rotate "$r" $COLO_SETTINGS); do
    case $c in
      nat) colo_pair nat "$r" "${NAT[@]}" --train "${NAT[@]}" ;;
      mps)
        mps_start || { say "mps $r: the MPS control daemon did not start"; continue; }
        mps_env 0; lp=("${MPS[@]}")
        mps_env 1; tp=("${MPS[@]}")
        colo_pair mps "$r" "${lp[@]}" --train "${tp[@]}"
        mps_check "mps $r"
        mps_stop ;;
      vgpu)
        ex high "$LREQ"; lp=("${EX[@]}")
        ex low "$TREQ"; tp=("${EX[@]}")
        colo_pair vgpu "$r" "${lp[@]}" --train "${tp[@]}" ;;
      vgeq)
        ex "" "$LREQ"; lp=("${EX[@]}")
        ex "" "$TREQ"; tp=("${EX[@]}")
        colo_pair vgeq "$r" "${lp[@]}" --train "${tp[@]}" ;;
    esac
  done
}

# ---- PHASE=probe --------------------------------------------------------
probe_round() {
  local r=$1 b f lp fp MPS EX
  for b in $(rotate "$r" nat mps vg); do
    case $b in
      nat)
        one nat-alone "$r" 0 "${NAT[@]}"
        for f in $FLOODS; do one "nat-f$f" "$r" "$f" "${NAT[@]}" --flood "${NAT[@]}"; done ;;
      mps)
        mps_start || { say "mps $r: the MPS control daemon did not start"; continue; }
        mps_env 0; lp=("${MPS[@]}")
        mps_env 1; fp=("${MPS[@]}")
        one mps-alone "$r" 0 "${lp[@]}"
        mps_check "mps $r"
        for f in $FLOODS; do one "mps-pri-f$f" "$r" "$f" "${lp[@]}" --flood "${fp[@]}"; done
        mps_stop ;;
      vg)
        ex high "$PLREQ"; lp=("${EX[@]}")
        ex low "$PFREQ"; fp=("${EX[@]}")
        one vg-alone "$r" 0 "${lp[@]}"
        for f in $FLOODS; do one "vg-pri-f$f" "$r" "$f" "${lp[@]}" --flood "${fp[@]}"; done
        ex "" 50; lp=("${EX[@]}"); fp=("${EX[@]}")
        for f in $FLOODS; do one "vg-eq-f$f" "$r" "$f" "${lp[@]}" --flood "${fp[@]}"; done ;;
    esac
  done
}

# ---- PHASE=req ----------------------------------------------------------
# spin_run LABEL ROUND PREFIX...: one spin tenant, its lines into R
spin_run() {
  local label=$1 r=$2
  shift 2
  timeout -k 5 $((SECS + 60)) "$@" "$W/spin" busy "$SECS" 2>&1 | sed "s/^/$label $r /" >> "$R"
  grep -q "^$label $r active_pct" "$R" || say "$label $r: no result: $(grep "^$label $r" "$R" | tail -2)"
}
req_round() {
  local r=$1 p a b EX pa pb
  export WARM_BUSY=1
  LOOP_AT=$(($(date +%s) + 2)) spin_run nat "$r" "${NAT[@]}"
  ex low 30
  LOOP_AT=$(($(date +%s) + 4)) spin_run R1low "$r" "${EX[@]}"
  for p in $(rotate "$r" eq hl lh hh); do
    case $p in
      eq) pa="" pb="" ;;
      hl) pa=high pb=low ;;
      lh) pa=low pb=high ;;
      hh) pa=high pb=high ;;
    esac
    export LOOP_AT=$(($(date +%s) + 5)) # both time the same window, after their warm-ups
    ex "$pa" 30
    spin_run "${p}a" "$r" "${EX[@]}" &
    a=$!
    ex "$pb" 50
    spin_run "${p}b" "$r" "${EX[@]}" &
    b=$!
    wait "$a" "$b"
    unset LOOP_AT
    say "$p $r: $(grep "^${p}[ab] $r active_pct" "$R" | tr '\n' ' ')"
  done
  unset WARM_BUSY
}

case $PHASE in
  colo) rounds colo_round ;;
  probe) rounds probe_round ;;
  req) rounds req_round ;;
esac
clocks_stop
timeout -k 5 60 python3 bench/gpu/priority_report.py "$PHASE" "$R" "$OUT/clocks.txt" > "$OUT/summary-$PHASE.txt"
tee -a "$LOG" < "$OUT/summary-$PHASE.txt"
say "done"
