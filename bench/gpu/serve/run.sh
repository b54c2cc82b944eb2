#!/usr/bin/env bash
# shellcheck disable=SC2046,SC2207 # $(mps_env) and $(servers) are word lists, split on purpose
# Two inference servers on one GPU, side by side with the field (README.md
# beside this file). Configurations, run interleaved in every round, the
# dedicated one first (every figure is relative to it, same round; its
# closed-loop rate halved is every open loop's arrival rate in that round),
# the others in an order rotated from round to round:
#   dedicated     server A alone, no limit
#   unlimited     A and B at once, no limit (the hardware's time slicing)
#   ts50          A and B under vgpu exec --compute-limit 50 (time slicing)
#   req50         A and B under vgpu exec --compute-request 50 --compute-limit 100
#   mps50         A and B as clients of plain MPS, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50
#   hami50        A and B under HAMi-core, CUDA_DEVICE_SM_LIMIT=50 (built from HAMI_SRC)
#   mpsalone50    A alone as an MPS client at 50 %          (a bound)
#   pacedalone50  A alone under vgpu exec --compute-limit 50 (a bound)
#   spatial       vgpu's spatial mode: not built yet; asking for it fails
#
#   VGPU=build/bin/vgpu HAMI_SRC=/path/to/HAMi-core bench/gpu/serve/run.sh
#   CONFIGS="dedicated mps50" ROUNDS=1 FIRST_ROUND=2 OUT=$OUT/serve bench/gpu/serve/run.sh
# Other knobs: LIBDIR (libvgpu-*.so; default beside VGPU: ../lib), GPU (index,
# default 0), PY, MPS_CONTROL, CONFIG_TIMEOUT (s per configuration, 240),
# BUDGET_S (stop starting configurations once one more, as long as the
# longest so far, would end past this many seconds; the rest is marked
# not-run; default 0: no budget), SELFCHECK=0 (skip the model's check against
# transformers), PLAN=1 (check
# the prerequisites, print the order, run nothing), SERVER_ARGS (passed to
# every server.py; "--fake ..." runs the whole driver on a CPU).
# Output in OUT: r<round>/<config>/{A,B}.json and .log, status.tsv, and from
# report.py: results.csv, summary.csv, results.json, report.md, serve.png.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
VGPU=${VGPU:-$REPO/build/bin/vgpu}
LIBDIR=${LIBDIR:-$(dirname "$VGPU")/../lib}
ALL="dedicated unlimited ts50 req50 mps50 hami50 mpsalone50 pacedalone50"
CONFIGS=${CONFIGS:-$ALL}
ROUNDS=${ROUNDS:-3}
FIRST_ROUND=${FIRST_ROUND:-1}
OUT=${OUT:-/tmp/vgpu-serve}
GPU=${GPU:-0}
PY=${PY:-python3}
HAMI_SRC=${HAMI_SRC:-}
HAMI_LIB=${HAMI_LIB:-/usr/local/vgpu/libvgpu.so} # where its dlsym route reopens itself
MPS_CONTROL=${MPS_CONTROL:-$(command -v nvidia-cuda-mps-control || echo /usr/local/nvidia/bin/nvidia-cuda-mps-control)}
CONFIG_TIMEOUT=${CONFIG_TIMEOUT:-240}
SELFCHECK=${SELFCHECK:-1}
PLAN=${PLAN:-0}
BUDGET_S=${BUDGET_S:-0}
SERVER_ARGS=${SERVER_ARGS:-}

say() { echo "serve: $*"; }
die() { echo "serve: FAIL: $*" >&2; exit 2; }
loud() { echo "serve: ################ $* ################" >&2; }

# ---- which configurations, and can they run here ------------------------
selected=()
for c in $CONFIGS; do
  case $c in
    dedicated|unlimited|ts50|req50|mps50|hami50|mpsalone50|pacedalone50) ;;
    spatial) die "spatial: vgpu's spatial mode (MPS under vgpu) is not built yet; leave 'spatial' out of CONFIGS" ;;
    *) die "CONFIGS: unknown configuration '$c'; known: $ALL spatial" ;;
  esac
  [[ " ${selected[*]-} " == *" $c "* ]] || selected+=("$c")
done
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive whole number, got '$ROUNDS'"
[[ "$BUDGET_S" =~ ^[0-9]+$ ]] || die "BUDGET_S must be a whole number of seconds, got '$BUDGET_S'"
[[ "$FIRST_ROUND" =~ ^[1-9][0-9]*$ ]] || die "FIRST_ROUND must be a positive whole number, got '$FIRST_ROUND'"
has() { [[ " ${selected[*]-} " == *" $1 "* ]]; }
if ! has dedicated; then
  say "adding 'dedicated': every figure is relative to it in the same round"
  selected=(dedicated "${selected[@]}")
fi
if has ts50 || has req50 || has pacedalone50; then
  [ -x "$VGPU" ] || die "VGPU: no vgpu binary at '$VGPU'; build it (make build) and set VGPU=path/to/vgpu"
  [ -e "$LIBDIR/libvgpu-cuda.so" ] || die "LIBDIR: no libvgpu-cuda.so in '$LIBDIR'; set LIBDIR to the directory of the vgpu libraries"
fi
if has req50 && ! "$VGPU" exec --help 2>&1 | grep -q -- '--compute-request'; then
  die "req50: '$VGPU exec' has no --compute-request flag; build a vgpu that has it, or leave req50 out of CONFIGS"
fi
if has mps50 || has mpsalone50; then
  [ -x "$MPS_CONTROL" ] || die "MPS_CONTROL: no nvidia-cuda-mps-control at '$MPS_CONTROL'; set MPS_CONTROL, or leave mps50 and mpsalone50 out of CONFIGS"
fi
if has hami50 && { [ -z "$HAMI_SRC" ] || [ ! -f "$HAMI_SRC/CMakeLists.txt" ]; }; then
  loud "SKIPPING hami50: HAMI_SRC='${HAMI_SRC}' is not a HAMi-core source tree (set HAMI_SRC to one)"
  keep=(); for c in "${selected[@]}"; do [ "$c" = hami50 ] || keep+=("$c"); done; selected=("${keep[@]}")
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
STATUS=$OUT/status.tsv
[ -e "$STATUS" ] || printf 'round\tconfig\tstatus\tseconds\tnote\n' > "$STATUS"
[ -n "${hami_skipped:-}" ] && printf '%s\thami50\tskipped\t0\tHAMI_SRC not set to a HAMi-core source tree\n' "$FIRST_ROUND-$LAST_ROUND" >> "$STATUS"
status() { printf '%s\t%s\t%s\t%s\t%s\n' "$@" >> "$STATUS"; }

# ---- what runs before the rounds -----------------------------------------
if [ "$SELFCHECK" = 1 ] && [[ " $SERVER_ARGS " != *" --fake "* ]]; then
  say "selfcheck: the serving path against transformers (tiny model)"
  CUDA_VISIBLE_DEVICES=$GPU timeout -k 10 300 "$PY" "$HERE/server.py" --selfcheck > "$OUT/selfcheck.log" 2>&1 \
    || { tail -20 "$OUT/selfcheck.log" >&2; die "selfcheck failed (log: $OUT/selfcheck.log); no figure of this model can be trusted"; }
  grep "^selfcheck ok" "$OUT/selfcheck.log"
fi
if has hami50; then
  say "building HAMi-core from $HAMI_SRC"
  if (cd "$HAMI_SRC" && timeout -k 10 600 bash build.sh) > "$OUT/hami-build.log" 2>&1 \
     && mkdir -p "$(dirname "$HAMI_LIB")" && cp "$HAMI_SRC/build/libvgpu.so" "$HAMI_LIB"; then
    say "HAMi-core at $HAMI_LIB ($(cd "$HAMI_SRC" && git rev-parse --short HEAD 2>/dev/null || echo 'commit unknown'))"
  else
    tail -20 "$OUT/hami-build.log" >&2
    loud "SKIPPING hami50: HAMi-core did not build (log: $OUT/hami-build.log)"
    status "$FIRST_ROUND-$LAST_ROUND" hami50 failed 0 "HAMi-core build failed"
    keep=(); for c in "${others[@]}"; do [ "$c" = hami50 ] || keep+=("$c"); done; others=("${keep[@]}")
  fi
fi

# ---- MPS: a private control daemon per configuration --------------------
MPSDIR=$OUT/mps
mps_env() { echo "CUDA_MPS_PIPE_DIRECTORY=$MPSDIR/pipe CUDA_MPS_LOG_DIRECTORY=$MPSDIR/log"; }
mps_up=0
mps_start() {
  rm -rf "$MPSDIR"; mkdir -p "$MPSDIR/pipe" "$MPSDIR/log"; chmod 700 "$MPSDIR/pipe" "$MPSDIR/log"
  env CUDA_VISIBLE_DEVICES="$GPU" $(mps_env) "$MPS_CONTROL" -d || return 1
  mps_up=1
}
mps_stop() {
  [ "$mps_up" = 1 ] || return 0
  echo quit | env $(mps_env) "$MPS_CONTROL" >/dev/null 2>&1
  # gone when a control client no longer reaches it
  local i
  for i in $(seq 50); do
    echo get_server_list | timeout 2 env $(mps_env) "$MPS_CONTROL" >/dev/null 2>&1 || break
    sleep 0.2
  done
  [ "$i" = 50 ] && loud "MPS control daemon still answers after quit (log: $MPSDIR/log)"
  mps_up=0
}
PIDS=()
cleanup() {
  for p in "${PIDS[@]-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null; done
  mps_stop
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- one configuration ---------------------------------------------------
# prefix CONFIG DIR: the command line that a server runs under
prefix() {
  case $1 in
    dedicated|unlimited) echo "env CUDA_VISIBLE_DEVICES=$GPU" ;;
    ts50|pacedalone50) echo "env -u CUDA_VISIBLE_DEVICES $VGPU exec --lib-dir $LIBDIR --devices $GPU --compute-limit 50 --" ;;
    req50) echo "env -u CUDA_VISIBLE_DEVICES $VGPU exec --lib-dir $LIBDIR --devices $GPU --compute-request 50 --compute-limit 100 --" ;;
    mps50|mpsalone50) echo "env CUDA_VISIBLE_DEVICES=$GPU $(mps_env) CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50" ;;
    hami50) echo "env CUDA_VISIBLE_DEVICES=$GPU LD_PRELOAD=$HAMI_LIB CUDA_DEVICE_SM_LIMIT=50 CUDA_DEVICE_MEMORY_LIMIT=64g CUDA_DEVICE_MEMORY_SHARED_CACHE=$2/hami.cache" ;;
  esac
}
servers() { case $1 in dedicated|mpsalone50|pacedalone50) echo A ;; *) echo A B ;; esac; }

run_config() { # CONFIG ROUND RATE
  local cfg=$1 r=$2 rate=$3 dir=$OUT/r$2/$1 t0=$SECONDS s i=0 rc=0 n
  rm -rf "$dir"; mkdir -p "$dir/sync"
  local srv=($(servers "$cfg")); n=${#srv[@]}
  case $cfg in mps50|mpsalone50) mps_start || { status "$r" "$cfg" failed 0 "MPS control daemon did not start"; loud "$cfg round $r: MPS control daemon did not start"; return 1; } ;; esac
  local pids=()
  for s in "${srv[@]}"; do
    i=$((i + 1))
    # shellcheck disable=SC2046
    timeout -k 10 "$CONFIG_TIMEOUT" $(prefix "$cfg" "$dir") "$PY" "$HERE/server.py" --config "$cfg" --server "$s" \
      --round "$r" --out "$dir/$s.json" --sync-dir "$dir/sync" --peers "$n" --seed $((r * 100 + i)) \
      ${rate:+--open-rate "$rate"} $SERVER_ARGS > "$dir/$s.log" 2>&1 &
    pids+=($!); PIDS+=($!)
  done
  # A server that fails tells its peers (sync/abort), so that they stop waiting for it.
  local left=$n failed=""
  while [ "$left" -gt 0 ]; do
    left=0
    for i in "${!pids[@]}"; do
      [ -n "${pids[$i]}" ] || continue
      if kill -0 "${pids[$i]}" 2>/dev/null; then left=$((left + 1)); continue; fi
      wait "${pids[$i]}"; rc=$?
      if [ "$rc" != 0 ]; then failed="$failed ${srv[$i]}(exit $rc)"; touch "$dir/sync/abort"; fi
      pids[$i]=""
    done
    [ "$left" -gt 0 ] && sleep 0.5
  done
  PIDS=()
  case $cfg in mps50|mpsalone50) mps_stop ;; esac
  for s in "${srv[@]}"; do tail -1 "$dir/$s.log"; done
  if [ -n "$failed" ]; then
    loud "$cfg round $r FAILED:$failed (logs: $dir)"
    for s in "${srv[@]}"; do tail -5 "$dir/$s.log" | sed "s/^/  $s: /" >&2; done
    status "$r" "$cfg" failed $((SECONDS - t0)) "servers:$failed"
    return 1
  fi
  status "$r" "$cfg" ok $((SECONDS - t0)) ""
}

any_failed=0
longest=0
for r in $(seq "$FIRST_ROUND" "$LAST_ROUND"); do
  for cfg in $(order "$r"); do
    if [ "$BUDGET_S" -gt 0 ] && [ $((SECONDS + longest)) -gt "$BUDGET_S" ]; then
      loud "BUDGET_S=$BUDGET_S: not starting round $r $cfg (${SECONDS}s gone, the longest configuration took ${longest}s)"
      status "$r" "$cfg" not-run 0 "BUDGET_S=$BUDGET_S reached"
      any_failed=1
      continue
    fi
    say "round $r: $cfg"
    c0=$SECONDS
    if [ "$cfg" = dedicated ]; then
      run_config dedicated "$r" "" || { any_failed=1; loud "round $r: no dedicated run, so nothing to set against; skipping the round"; break; }
      rate=$("$PY" -c 'import json,sys; print("%.4f" % (0.5 * json.load(open(sys.argv[1]))["closed"]["req_per_s"]))' "$OUT/r$r/dedicated/A.json") \
        || { any_failed=1; loud "round $r: no rate in the dedicated record; skipping the round"; break; }
      say "round $r: open-loop rate $rate requests/s (half the dedicated server's saturated rate)"
    else
      run_config "$cfg" "$r" "$rate" || any_failed=1
    fi
    [ $((SECONDS - c0)) -gt "$longest" ] && longest=$((SECONDS - c0))
  done
done

"$PY" "$HERE/report.py" "$OUT" || any_failed=1
if "$PY" -c 'import matplotlib' 2>/dev/null; then
  "$PY" "$HERE/plot.py" "$OUT/summary.csv" "$OUT/serve.png" || any_failed=1
else
  loud "no matplotlib here: no plot (run plot.py where it is: plot.py $OUT/summary.csv serve.png)"
fi
[ -n "${hami_skipped:-}" ] && loud "hami50 was SKIPPED: HAMI_SRC not set"
exit $any_failed
