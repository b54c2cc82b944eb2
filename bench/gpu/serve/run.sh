#!/usr/bin/env bash
# shellcheck disable=SC2046,SC2206,SC2207 # $(prefix), $(servers) and the pid lists are word lists, split on purpose
# Two inference servers on one GPU, side by side with the field (README.md
# beside this file). Configurations, run interleaved in every round, the
# dedicated one first (every figure is relative to it, same round; its
# closed-loop rate halved is every open loop's arrival rate in that round),
# the others in an order rotated from round to round:
#   dedicated     server A alone, no limit
#   unlimited     A and B at once, no limit (the hardware's time slicing)
#   ts50          A and B under vgpu exec --compute-limit 50 (time slicing)
#   req50         A and B under vgpu exec --compute-request 50 --compute-limit 100,
#                 vgpu node arbitrating (a node of its own, state in a temp dir)
#   spatial50     A and B under vgpu exec --compute-limit 50 on a spatial GPU
#                 (config [spatial] gpus = [GPU]; vgpu node runs NVIDIA's MPS there)
#   mps50         A and B as clients of plain MPS, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50
#   spatial100    as spatial50 with --compute-limit 100: both at once on MPS, no SM cap
#   mps100        as mps50 with CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100
#   hami50        A and B under HAMi-core, CUDA_DEVICE_SM_LIMIT=50, one container each
#                 (built here from HAMI_SRC by hami-build.sh)
#   mpsalone50    A alone as an MPS client at 50 %          (a bound)
#   pacedalone50  A alone under vgpu exec --compute-limit 50 (a bound)
# Priorities (named in CONFIGS only; not in the default set): server A in
# open loop (its closed loop cut to MIXED_A_CLOSED_S, 1.5 s, not used)
# beside server B in closed loop for MIXED_B_S (40 s; its first
# MIXED_B_WARM, 2 s, A's closed stretch, not counted; one open-loop request
# after it), A's load on until B's window ends: A's TTFT/ITL and B's
# throughput against dedicated (the other two figures of each mean nothing).
#   mixed         both native (the hardware's time slicing)
#   mpsprio       both plain MPS clients, A at CUDA_MPS_CLIENT_PRIORITY=0, B at 1
#   prio50        vgpu exec --compute-request 50 --compute-limit 100, A
#                 --priority high, B --priority low, vgpu node arbitrating
#   prio0         as prio50, but B with no compute setting, so request 0 beside
#                 a priority: the batch work takes only what A leaves
#   priospatial100  the spatial mode (as spatial100), A high, B low
#
#   VGPU=build/bin/vgpu HAMI_SRC=/path/to/HAMi-core bench/gpu/serve/run.sh
#   CONFIGS="dedicated mps50" ROUNDS=1 FIRST_ROUND=2 OUT=$OUT/serve bench/gpu/serve/run.sh
# Other knobs: COMPUTE_PERIOD (ms, passed as --compute-period to every vgpu
# exec; default the library's, 500: a busy server past its request waits up
# to the other's slot, half of it at 50/50), LIBDIR (libvgpu-*.so; default beside VGPU: ../lib), GPU (index,
# default 0), PY, MPS_CONTROL, CONFIG_TIMEOUT (s per configuration, 120),
# HAMI_BUILT (a directory to build HAMi-core's library in and keep, and to
# take it from when it is there: a second call on the same machine),
# BUDGET_S (stop starting configurations once the next one, as long as it
# last took (else the longest so far), would end past this many seconds; the
# rest is marked not-run; default 0: no budget), SELFCHECK=0 (skip the
# model's check against transformers), PRESTART=0 (no overlap: see below),
# PLAN=1 (check the prerequisites, print the order, run nothing),
# SERVER_ARGS (passed to every server.py; "--fake ..." runs the whole driver
# on a CPU).
# Overlap: the servers of the next configuration start (python and its
# imports, no CUDA call) while the current one measures, and wait for their
# go file: its vgpu containers (in a state directory of that configuration
# and round) exist early but touch nothing of the measuring one's; the MPS
# daemon or vgpu node of a configuration starts after the previous one ends.
# Not spatial50 (its MPS client settings come from its node's daemon).
# Output in OUT: r<round>/<config>/{A,B}.json and .log, under vgpu node its
# status.jsonl (`vgpu status --json` once a second), status.tsv, and from
# report.py: results.csv, summary.csv, results.json, report.md, serve.png.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
VGPU=${VGPU:-$REPO/build/bin/vgpu}
LIBDIR=${LIBDIR:-$(dirname "$VGPU")/../lib}
ALL="dedicated unlimited ts50 req50 spatial50 mps50 spatial100 mps100 hami50 mpsalone50 pacedalone50"
MIXED="mixed mpsprio prio50 prio0 priospatial100"
MIXED_A_CLOSED_S=${MIXED_A_CLOSED_S:-1.5}
MIXED_A_WARM=${MIXED_A_WARM:-0.5}
MIXED_B_S=${MIXED_B_S:-40}
MIXED_B_WARM=${MIXED_B_WARM:-2}
CONFIGS=${CONFIGS:-$ALL}
ROUNDS=${ROUNDS:-3}
FIRST_ROUND=${FIRST_ROUND:-1}
OUT=${OUT:-/tmp/vgpu-serve}
GPU=${GPU:-0}
PY=${PY:-python3}
HAMI_SRC=${HAMI_SRC:-}
MPS_CONTROL=${MPS_CONTROL:-$(command -v nvidia-cuda-mps-control || echo /usr/local/nvidia/bin/nvidia-cuda-mps-control)}
CONFIG_TIMEOUT=${CONFIG_TIMEOUT:-120}
SELFCHECK=${SELFCHECK:-1}
PRESTART=${PRESTART:-1}
PLAN=${PLAN:-0}
BUDGET_S=${BUDGET_S:-0}
SERVER_ARGS=${SERVER_ARGS:-}
COMPUTE_PERIOD=${COMPUTE_PERIOD:-}

say() { echo "serve: $*"; }
die() { echo "serve: FAIL: $*" >&2; exit 2; }
loud() { echo "serve: ################ $* ################" >&2; }

# ---- which configurations, and can they run here ------------------------
selected=()
for c in $CONFIGS; do
  case $c in
    dedicated|unlimited|ts50|req50|spatial50|mps50|spatial100|mps100|hami50|mpsalone50|pacedalone50) ;;
    mixed|mpsprio|prio50|prio0|priospatial100) ;;
    *) die "CONFIGS: unknown configuration '$c'; known: $ALL $MIXED" ;;
  esac
  [[ " ${selected[*]-} " == *" $c "* ]] || selected+=("$c")
done
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive whole number, got '$ROUNDS'"
[[ "$BUDGET_S" =~ ^[0-9]+$ ]] || die "BUDGET_S must be a whole number of seconds, got '$BUDGET_S'"
[[ "$FIRST_ROUND" =~ ^[1-9][0-9]*$ ]] || die "FIRST_ROUND must be a positive whole number, got '$FIRST_ROUND'"
[[ -z "$COMPUTE_PERIOD" || "$COMPUTE_PERIOD" =~ ^[0-9]+$ ]] || die "COMPUTE_PERIOD must be a whole number of ms, got '$COMPUTE_PERIOD'"
[[ "$CONFIG_TIMEOUT" =~ ^[1-9][0-9]*$ ]] || die "CONFIG_TIMEOUT must be a positive whole number of seconds, got '$CONFIG_TIMEOUT'"
has() { [[ " ${selected[*]-} " == *" $1 "* ]]; }
spatial() { [[ $1 == spatial50 || $1 == spatial100 || $1 == priospatial100 ]]; } # a configuration on vgpu's spatial mode
mixed() { [[ " $MIXED " == *" $1 "* ]]; }              # A in open loop beside B in closed loop
share() { echo "${1//[!0-9]/}"; }                     # its percentage: spatial100 -> 100
if ! has dedicated; then
  say "adding 'dedicated': every figure is relative to it in the same round"
  selected=(dedicated "${selected[@]}")
fi
if has ts50 || has req50 || has spatial50 || has spatial100 || has pacedalone50 || has prio50 || has prio0 || has priospatial100; then
  [ -x "$VGPU" ] || die "VGPU: no vgpu binary at '$VGPU'; build it (make build) and set VGPU=path/to/vgpu"
  [ -e "$LIBDIR/libvgpu-cuda.so" ] || die "LIBDIR: no libvgpu-cuda.so in '$LIBDIR'; set LIBDIR to the directory of the vgpu libraries"
fi
# (read whole: grep -q would end the pipe early, and pipefail count vgpu's SIGPIPE as a failure)
if has req50 && [[ "$("$VGPU" exec --help 2>&1)" != *--compute-request* ]]; then
  die "req50: '$VGPU exec' has no --compute-request flag; build a vgpu that has it, or leave req50 out of CONFIGS"
fi
if { has prio50 || has prio0 || has priospatial100; } && [[ "$("$VGPU" exec --help 2>&1)" != *--priority* ]]; then
  die "prio50, prio0, priospatial100: '$VGPU exec' has no --priority flag; build a vgpu that has it, or leave them out of CONFIGS"
fi
if has mps50 || has mps100 || has mpsalone50 || has spatial50 || has spatial100 || has mpsprio || has priospatial100; then
  [ -x "$MPS_CONTROL" ] || die "MPS_CONTROL: no nvidia-cuda-mps-control at '$MPS_CONTROL'; set MPS_CONTROL, or leave the MPS and spatial configurations out of CONFIGS"
fi
drop() { local keep=() c; for c in "${selected[@]}"; do [ "$c" = "$1" ] || keep+=("$c"); done; selected=("${keep[@]}"); }
if has hami50 && { [ -z "$HAMI_SRC" ] || [ ! -f "$HAMI_SRC/src/libvgpu.c" ]; }; then
  loud "SKIPPING hami50: HAMI_SRC='${HAMI_SRC}' is not a HAMi-core source tree (set HAMI_SRC to one)"
  drop hami50
  hami_skipped=1
fi
others=(); for c in "${selected[@]}"; do [ "$c" = dedicated ] || others+=("$c"); done

# Round r: dedicated first, then the others rotated by r-1.
order() {
  local r=$1 n=${#others[@]} i out=(dedicated)
  for ((i = 0; i < n; i++)); do out+=("${others[$(( (i + r - 1) % n ))]}"); done
  echo "${out[@]}"
}
LAST_ROUND=$((FIRST_ROUND + ROUNDS - 1))
for r in $(seq "$FIRST_ROUND" "$LAST_ROUND"); do say "round $r: $(order "$r")"; done
[ "$PLAN" = 1 ] && exit 0

mkdir -p "$OUT" || die "OUT: cannot create '$OUT'"
OUT=$(cd "$OUT" && pwd)
# Short paths (MPS pipes are unix sockets) for HAMi-core's cache files, the
# MPS directories and the vgpu state of req50 and spatial50: nothing of the
# node's own (/run/vgpu, /tmp/cudevshr.cache) is touched.
TMPD=$(mktemp -d /tmp/vs.XXXXXX) || die "cannot make a temp directory in /tmp"
any_failed=0
STATUS=$OUT/status.tsv
[ -e "$STATUS" ] || printf 'round\tconfig\tstatus\tseconds\tnote\n' > "$STATUS"
[ -n "${hami_skipped:-}" ] && printf '%s\thami50\tskipped\t0\tHAMI_SRC not set to a HAMi-core source tree\n' "$FIRST_ROUND-$LAST_ROUND" >> "$STATUS"
status() { printf '%s\t%s\t%s\t%s\t%s\n' "$@" >> "$STATUS"; }

# Every vgpu configuration of every round has a host configuration
# (VGPU_CONFIG) and so a state directory of its own: the containers of one
# started early (below) are not seen by the slots, requests or node of the
# one measuring, nor left to the next.
host_config() { # CONFIG ROUND -> the file, written
  local f=$TMPD/$1-$2.toml
  if [ ! -e "$f" ]; then
    echo "state_dir = \"$(state_dir "$1" "$2")\"" > "$f"
    spatial "$1" && printf '[spatial]\ngpus = ["%s"]\nmps_control = "%s"\n' "$GPU" "$MPS_CONTROL" >> "$f"
  fi
  echo "$f"
}
state_dir() { echo "$TMPD/${1:0:2}$(share "$1")r$2"; } # short: the MPS sockets below a spatial one's have ~100 bytes

# ---- around a configuration: MPS daemons, vgpu node ------------------------
mps_dir() { echo "$TMPD/mps-r$1-$2"; } # ROUND CONFIG
mps_env() { echo "CUDA_MPS_PIPE_DIRECTORY=$1/pipe CUDA_MPS_LOG_DIRECTORY=$1/log"; }
MPS_UP=""
mps_start() { # DIR
  rm -rf "$1"; mkdir -p "$1/pipe" "$1/log"; chmod 700 "$1/pipe" "$1/log"
  env CUDA_VISIBLE_DEVICES="$GPU" $(mps_env "$1") "$MPS_CONTROL" -d || return 1
  MPS_UP=$1
}
mps_stop() {
  [ -n "$MPS_UP" ] || return 0
  echo quit | env $(mps_env "$MPS_UP") "$MPS_CONTROL" >/dev/null 2>&1
  # gone when a control client no longer reaches it
  local i
  for i in $(seq 50); do
    echo get_server_list | timeout 2 env $(mps_env "$MPS_UP") "$MPS_CONTROL" >/dev/null 2>&1 || break
    sleep 0.2
  done
  [ "$i" = 50 ] && loud "MPS control daemon still answers after quit (log: $MPS_UP/log)"
  MPS_UP=""
}
NODE_PID=""
node_start() { # VGPU_CONFIG LOG: up when vgpu status sees its heartbeat
  VGPU_CONFIG=$1 "$VGPU" node --listen "" > "$2" 2>&1 &
  NODE_PID=$!
  local i
  for i in $(seq 100); do
    VGPU_CONFIG=$1 "$VGPU" status 2>/dev/null | grep -q "host enforcement: on" && return 0
    kill -0 "$NODE_PID" 2>/dev/null || break
    sleep 0.1
  done
  node_stop
  return 1
}
node_stop() {
  [ -n "$NODE_PID" ] || return 0
  kill -TERM "$NODE_PID" 2>/dev/null
  local i
  for i in $(seq 100); do kill -0 "$NODE_PID" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$NODE_PID" 2>/dev/null
  wait "$NODE_PID" 2>/dev/null
  NODE_PID=""
}
spatial_ready() { # STATE_DIR: the node's MPS control daemon of the GPU answers in its pipe directory
  local i p
  for i in $(seq 100); do
    for p in "$1"/.mps/*/pipe; do
      { [ -e "$p/control" ] || [ -e "$p/nvidia-cuda-mps-control.pid" ]; } && echo get_server_list | timeout 2 env CUDA_MPS_PIPE_DIRECTORY="$p" "$MPS_CONTROL" >/dev/null 2>&1 && return 0
    done
    sleep 0.1
  done
  return 1
}

spatial_shm() { # STATE_DIR: the prefix that runs a server beside the GPU's MPS server (inshm.sh), if any
  local d
  for d in "$1"/.mps/*/shm; do [ -d "$d" ] && echo "$HERE/inshm.sh $d" && return; done
}

declare -A PIDS=() SRVS=()
cleanup() {
  local k p
  for k in "${!PIDS[@]}"; do for p in ${PIDS[$k]}; do kill "$p" 2>/dev/null; done; done
  [ -n "${hami_pid:-}" ] && kill "$hami_pid" 2>/dev/null
  mps_stop
  node_stop
  rm -rf "$TMPD"
  [ -n "${made_lockdir:-}" ] && rm -rf /tmp/vgpulock
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- one configuration ---------------------------------------------------
# prefix CONFIG ROUND SERVER: the command line that a server runs under
prefix() {
  local x="env -u CUDA_VISIBLE_DEVICES $VGPU exec --lib-dir $LIBDIR --devices $GPU${COMPUTE_PERIOD:+ --compute-period ${COMPUTE_PERIOD}ms}"
  local prio=low cprio=1
  [ "$3" = A ] && prio=high cprio=0
  case $1 in
    dedicated|unlimited|mixed) echo "env CUDA_VISIBLE_DEVICES=$GPU" ;;
    prio50) echo "env VGPU_CONFIG=$(host_config "$1" "$2") $x --priority $prio --compute-request 50 --compute-limit 100 --" ;;
    # B with no compute setting: beside a priority that is request 0 (a flag cannot say 0)
    prio0) echo "env VGPU_CONFIG=$(host_config "$1" "$2") $x --priority $prio $([ "$3" = A ] && echo --compute-request 50 --compute-limit 100) --" ;;
    priospatial100) echo "env VGPU_CONFIG=$(host_config "$1" "$2") $(spatial_shm "$(state_dir "$1" "$2")") $x --priority $prio --compute-limit 100 --" ;;
    mpsprio) echo "env CUDA_VISIBLE_DEVICES=$GPU $(mps_env "$(mps_dir "$2" "$1")") CUDA_MPS_CLIENT_PRIORITY=$cprio" ;;
    ts50|pacedalone50) echo "env VGPU_CONFIG=$(host_config "$1" "$2") $x --compute-limit 50 --" ;;
    # as in a container there: /dev/shm is the GPU's MPS shm directory, when the node made one
    spatial50|spatial100) echo "env VGPU_CONFIG=$(host_config "$1" "$2") $(spatial_shm "$(state_dir "$1" "$2")") $x --compute-limit $(share "$1") --" ;;
    req50) echo "env VGPU_CONFIG=$(host_config "$1" "$2") $x --compute-request 50 --compute-limit 100 --" ;;
    mps50|mps100|mpsalone50) echo "env CUDA_VISIBLE_DEVICES=$GPU $(mps_env "$(mps_dir "$2" "$1")") CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$(share "$1")" ;;
    # one HAMi container per server: its own cache file; the library loaded
    # from the temp dir (CUDA_REDIRECT: its dlsym route reopens itself there)
    hami50) echo "env CUDA_VISIBLE_DEVICES=$GPU LD_PRELOAD=$HAMI_LIB CUDA_REDIRECT=$HAMI_LIB CUDA_DEVICE_SM_LIMIT=50 CUDA_DEVICE_MEMORY_LIMIT=64g CUDA_DEVICE_MEMORY_SHARED_CACHE=$TMPD/hami-r$2-$3.cache" ;;
  esac
}
servers() { case $1 in dedicated|mpsalone50|pacedalone50) echo A ;; *) echo A B ;; esac; }
# role_args CONFIG SERVER: a mixed configuration's phases (after SERVER_ARGS, so they hold)
role_args() {
  mixed "$1" || return 0
  if [ "$2" = A ]; then echo "--closed-s $MIXED_A_CLOSED_S --warmup-s $MIXED_A_WARM"
  else echo "--closed-s $MIXED_B_S --warmup-s $MIXED_B_WARM --requests 1"; fi
}
# a spatial one is not: its container's MPS client settings come from its node's daemon.
prestartable() { ! spatial "$1" && [ "$PRESTART" = 1 ]; }

launch() { # CONFIG ROUND: start its servers, held until their go file
  local cfg=$1 r=$2 dir=$OUT/r$2/$1 s i=0 n pids=""
  mkdir -p "$dir/sync"
  local srv=($(servers "$cfg")); n=${#srv[@]}
  for s in "${srv[@]}"; do
    i=$((i + 1))
    timeout -k 10 "$CONFIG_TIMEOUT" $(prefix "$cfg" "$r" "$s") "$PY" "$HERE/server.py" --config "$cfg" --server "$s" \
      --round "$r" --out "$dir/$s.json" --sync-dir "$dir/sync" --peers "$n" --seed $((r * 100 + i)) \
      --hold "$dir/go" $SERVER_ARGS $(role_args "$cfg" "$s") > "$dir/$s.log" 2>&1 &
    pids="$pids $!"
  done
  PIDS[$r/$cfg]=$pids
  SRVS[$r/$cfg]="${srv[*]}"
}
unlaunch() { # CONFIG ROUND: a prestarted configuration that will not run
  local k=$2/$1 p
  [ -n "${PIDS[$k]:-}" ] || return 0
  touch "$OUT/r$2/$1/sync/abort"
  for p in ${PIDS[$k]}; do wait "$p" 2>/dev/null; done
  unset "PIDS[$k]"
}

SETUP_ERR=""
setup() { # CONFIG ROUND: what must run before its servers touch the GPU (not in a subshell: it sets MPS_UP, NODE_PID)
  local log=$OUT/r$2/$1/node.log
  SETUP_ERR=""
  case $1 in
    mps50|mps100|mpsalone50|mpsprio) mps_start "$(mps_dir "$2" "$1")" || SETUP_ERR="MPS control daemon did not start" ;;
    req50|prio50|prio0) node_start "$(host_config "$1" "$2")" "$log" || SETUP_ERR="vgpu node did not start (node.log: $(tail -2 "$log" | tr '\n' ' '))" ;;
    spatial50|spatial100|priospatial100)
      if ! node_start "$(host_config "$1" "$2")" "$log"; then
        SETUP_ERR="vgpu node with GPU $GPU spatial did not start (node.log: $(tail -2 "$log" | tr '\n' ' '))"
      elif ! spatial_ready "$(state_dir "$1" "$2")"; then
        SETUP_ERR="vgpu node runs but no MPS control daemon answers under its state dir's .mps (node.log: $(tail -2 "$log" | tr '\n' ' '))"
      fi ;;
  esac
  [ -z "$SETUP_ERR" ]
}
teardown() { # CONFIG ROUND; the MPS logs are kept beside its records (the temp dir goes)
  local dir=$OUT/r$2/$1 d
  case $1 in
    mps50|mps100|mpsalone50|mpsprio) [ -n "$MPS_UP" ] && cp -r "$MPS_UP/log" "$dir/mps-log" 2>/dev/null; mps_stop ;;
    req50|prio50|prio0|spatial50|spatial100|priospatial100)
      node_stop
      for d in "$(state_dir "$1" "$2")"/.mps/*/log; do [ -d "$d" ] && cp -r "$d" "$dir/mps-log"; done ;;
  esac
}

run_config() { # CONFIG ROUND RATE: set up, let its servers go, wait for them, tear down
  local cfg=$1 r=$2 rate=$3 dir=$OUT/r$2/$1 t0=$SECONDS rc=0 why i
  # a prestarted configuration's servers are held before CUDA; the others start after the setup (a vgpu exec
  # makes its container when it starts: the node must see it come)
  if [ -z "${PIDS[$r/$cfg]:-}" ]; then rm -rf "$dir"; mkdir -p "$dir/sync"; fi
  if ! setup "$cfg" "$r"; then
    why=$SETUP_ERR
    unlaunch "$cfg" "$r"
    teardown "$cfg" "$r"
    loud "$cfg round $r: $why"
    status "$r" "$cfg" failed $((SECONDS - t0)) "$why"
    return 1
  fi
  [ -n "${PIDS[$r/$cfg]:-}" ] || launch "$cfg" "$r"
  local pids=(${PIDS[$r/$cfg]}) srv=(${SRVS[$r/$cfg]})
  printf '{"open_rate": %s}\n' "${rate:-0}" > "$dir/go.tmp" && mv "$dir/go.tmp" "$dir/go"
  # A server that fails tells its peers (sync/abort), so that they stop waiting for it.
  # Under vgpu node, its view once a second (grants, slots, each tenant's wait for the order):
  # status.jsonl, one `vgpu status --json` a line.
  local left=${#pids[@]} failed="" seen=$SECONDS
  while [ "$left" -gt 0 ]; do
    if [ -n "$NODE_PID" ] && [ "$SECONDS" -gt "$seen" ]; then
      seen=$SECONDS
      { VGPU_CONFIG=$(host_config "$cfg" "$r") timeout -k 1 3 "$VGPU" status --json 2>/dev/null | tr -d '\n'; echo; } >> "$dir/status.jsonl"
    fi
    left=0
    for i in "${!pids[@]}"; do
      [ -n "${pids[$i]}" ] || continue
      if kill -0 "${pids[$i]}" 2>/dev/null; then left=$((left + 1)); continue; fi
      wait "${pids[$i]}"; rc=$?
      if [ "$rc" != 0 ]; then failed="$failed ${srv[$i]}(exit $rc)"; touch "$dir/sync/abort"; fi
      pids[$i]=""
    done
    [ "$left" -gt 0 ] && sleep 0.2
  done
  unset "PIDS[$r/$cfg]"
  teardown "$cfg" "$r"
  for s in "${srv[@]}"; do tail -1 "$dir/$s.log"; done
  if [ -n "$failed" ]; then
    loud "$cfg round $r FAILED:$failed (logs: $dir)"
    for s in "${srv[@]}"; do tail -5 "$dir/$s.log" | sed "s/^/  $s: /" >&2; done
    status "$r" "$cfg" failed $((SECONDS - t0)) "servers:$failed"
    return 1
  fi
  status "$r" "$cfg" ok $((SECONDS - t0)) ""
}

# ---- what runs before the rounds -----------------------------------------
HAMI_DIR=${HAMI_BUILT:-$TMPD/hami}
HAMI_LIB=$HAMI_DIR/libvgpu.so
hami_pid=""
if has hami50 && [ -n "${HAMI_BUILT:-}" ] && [ -s "$HAMI_LIB" ]; then
  say "HAMi-core: the library built before, $HAMI_LIB"
elif has hami50; then
  # on the CPU, beside the selfcheck
  say "building HAMi-core from $HAMI_SRC ($(cd "$HAMI_SRC" && git rev-parse --short HEAD 2>/dev/null || cat "$HAMI_SRC/.commit" 2>/dev/null || echo 'commit unknown'))"
  bash "$HERE/hami-build.sh" "$HAMI_SRC" "$HAMI_DIR" > "$OUT/hami-build.out" 2>&1 &
  hami_pid=$!
  # HAMi-core's lock file is at a fixed path, /tmp/vgpulock/lock
  [ -d /tmp/vgpulock ] || { mkdir -p /tmp/vgpulock && made_lockdir=1; }
fi
if [ "$SELFCHECK" = 1 ] && [[ " $SERVER_ARGS " != *" --fake "* ]]; then
  say "selfcheck: the serving path against transformers (tiny model)"
  CUDA_VISIBLE_DEVICES=$GPU timeout -k 10 300 "$PY" "$HERE/server.py" --selfcheck > "$OUT/selfcheck.log" 2>&1 \
    || { tail -20 "$OUT/selfcheck.log" >&2; die "selfcheck failed (log: $OUT/selfcheck.log); no figure of this model can be trusted"; }
  grep "^selfcheck ok" "$OUT/selfcheck.log"
fi
if [ -n "$hami_pid" ]; then
  first=$(order "$FIRST_ROUND"); first=${first%% *}
  prestartable "$first" && { rm -rf "$OUT/r$FIRST_ROUND/$first"; launch "$first" "$FIRST_ROUND"; } # imports beside the build
  if wait "$hami_pid"; then
    cat "$OUT/hami-build.out"
    cp "$HAMI_DIR/build.log" "$OUT/hami-build.log" 2>/dev/null
  else
    cat "$OUT/hami-build.out" >&2
    cp "$HAMI_DIR/build.log" "$OUT/hami-build.log" 2>/dev/null
    loud "SKIPPING hami50: HAMi-core did not build (log: $OUT/hami-build.log)"
    status "$FIRST_ROUND-$LAST_ROUND" hami50 failed 0 "HAMi-core build failed"
    any_failed=1
    keep=(); for c in "${others[@]}"; do [ "$c" = hami50 ] || keep+=("$c"); done; others=("${keep[@]}")
  fi
fi

# ---- the rounds ----------------------------------------------------------
seq_all=()
for r in $(seq "$FIRST_ROUND" "$LAST_ROUND"); do for c in $(order "$r"); do seq_all+=("$r/$c"); done; done
declare -A took=() # configuration -> seconds it took last
longest=0
estimate() { # CONFIG: seconds it is expected to take
  echo "${took[$1]:-$longest}"
}
fits() { # CONFIG: whether it may start under BUDGET_S
  [ "$BUDGET_S" -eq 0 ] || [ $((SECONDS + $(estimate "$1"))) -le "$BUDGET_S" ]
}
skip_round=""
round_t0=$SECONDS
rate=""
for k in "${!seq_all[@]}"; do
  r=${seq_all[$k]%%/*} cfg=${seq_all[$k]#*/}
  if [ "$cfg" = dedicated ]; then
    if [ "$r" != "$FIRST_ROUND" ]; then
      say "round $((r - 1)) took $((SECONDS - round_t0)) s: $(for c in $(order $((r - 1))); do printf '%s %s s, ' "$c" "${took[$c]:-?}"; done)"
    fi
    round_t0=$SECONDS
    rate=""
    skip_round=""
    if [ "$r" != "$FIRST_ROUND" ]; then
      est=0; for c in $(order "$r"); do est=$((est + $(estimate "$c"))); done
      left=""; [ "$BUDGET_S" -gt 0 ] && left=", $((BUDGET_S - SECONDS)) s of BUDGET_S left"
      say "round $r: estimated $est s (each configuration as long as it last took)$left"
    fi
  fi
  if [ -n "$skip_round" ] || ! fits "$cfg"; then
    [ -n "$skip_round" ] || loud "BUDGET_S=$BUDGET_S: not starting round $r $cfg (${SECONDS}s gone, it is expected to take $(estimate "$cfg")s)"
    unlaunch "$cfg" "$r"
    status "$r" "$cfg" not-run 0 "${skip_round:-BUDGET_S=$BUDGET_S reached}"
    any_failed=1
    continue
  fi
  say "round $r: $cfg"
  c0=$SECONDS
  # the next configuration's servers import while this one runs
  if [ $((k + 1)) -lt ${#seq_all[@]} ]; then
    nr=${seq_all[$((k + 1))]%%/*} ncfg=${seq_all[$((k + 1))]#*/}
    if prestartable "$ncfg" && { [ "$BUDGET_S" -eq 0 ] || [ $((SECONDS + $(estimate "$cfg") + $(estimate "$ncfg"))) -le "$BUDGET_S" ]; }; then
      rm -rf "$OUT/r$nr/$ncfg"
      launch "$ncfg" "$nr"
    fi
  fi
  if [ "$cfg" = dedicated ]; then
    if ! run_config dedicated "$r" ""; then
      any_failed=1; skip_round="no dedicated run in round $r"
      loud "round $r: no dedicated run, so nothing to set against; skipping the round"
    elif ! rate=$("$PY" -c 'import json,sys; print("%.4f" % (0.5 * json.load(open(sys.argv[1]))["closed"]["req_per_s"]))' "$OUT/r$r/dedicated/A.json"); then
      any_failed=1; skip_round="no rate in round $r's dedicated record"
      loud "round $r: no rate in the dedicated record; skipping the round"
    else
      say "round $r: open-loop rate $rate requests/s (half the dedicated server's saturated rate)"
    fi
  else
    run_config "$cfg" "$r" "$rate" || any_failed=1
  fi
  took[$cfg]=$((SECONDS - c0))
  [ "${took[$cfg]}" -gt "$longest" ] && longest=${took[$cfg]}
done
say "round $LAST_ROUND took $((SECONDS - round_t0)) s; all rounds $SECONDS s"

"$PY" "$HERE/report.py" "$OUT" || any_failed=1
if "$PY" -c 'import matplotlib' 2>/dev/null; then
  "$PY" "$HERE/plot.py" "$OUT/summary.csv" "$OUT/serve.png" || any_failed=1
else
  loud "no matplotlib here: no plot (run plot.py where it is: plot.py $OUT/summary.csv serve.png)"
fi
[ -n "${hami_skipped:-}" ] && loud "hami50 was SKIPPED: HAMI_SRC not set"
exit $any_failed
