# shellcheck shell=bash
# Sourced by bench/gpu/priority-probe.sh and bench/gpu/priority.sh: the
# light/flood pair of bench/gpu/prioprobe.cu, a private MPS control daemon,
# the SM clock sampler. The caller sets OUT, W (its temp dir), R (the
# results file), LOG, START (date +%s), MPS_CONTROL, PROBE (the built
# prioprobe), REQS, INTERVAL_US, LIGHT_US, MAX_S, and calls probe_cleanup
# from its EXIT trap.
# Result lines in R: 'LABEL ROUND window T0 T1' (Unix times the light tenant
# measured in), 'LABEL ROUND light n=…' and 'LABEL ROUND flood n=…'.
MPSD=$W/mps
mkdir -p "$MPSD/pipe" "$MPSD/log" "$W/nomps"
SMI=
LP=
FP=
say() { echo "$(date -u +%T) +$(($(date +%s) - START))s $*" | tee -a "$LOG"; }
wait_file() { # FILE SECONDS
  local _
  for _ in $(seq $(($2 * 20))); do [ -e "$1" ] && return 0; sleep 0.05; done
  return 1
}

# A native tenant points at an empty pipe directory, so that no MPS daemon
# (ours or the machine's) can take it; an MPS one at ours, with a client
# priority (NVIDIA's MPS guide: CUDA_MPS_CLIENT_PRIORITY, read once at the
# client's start, 0 normal, 1 below normal).
# shellcheck disable=SC2034 # NAT and MPS are the callers'
NAT=(env -u LD_PRELOAD "CUDA_MPS_PIPE_DIRECTORY=$W/nomps" "CUDA_MPS_LOG_DIRECTORY=$W/nomps")
# shellcheck disable=SC2034
mps_env() { MPS=(env -u LD_PRELOAD "CUDA_MPS_PIPE_DIRECTORY=$MPSD/pipe" "CUDA_MPS_LOG_DIRECTORY=$MPSD/log" "CUDA_MPS_CLIENT_PRIORITY=$1"); }
mps_ctl() { echo "$*" | CUDA_MPS_PIPE_DIRECTORY=$MPSD/pipe timeout -k 2 10 "$MPS_CONTROL"; }
mps_start() {
  CUDA_MPS_PIPE_DIRECTORY=$MPSD/pipe CUDA_MPS_LOG_DIRECTORY=$MPSD/log timeout -k 2 20 "$MPS_CONTROL" -d || return 1
  local _
  for _ in $(seq 50); do [ -e "$MPSD/pipe/control" ] && return 0; sleep 0.1; done
  return 1
}
mps_stop() {
  [ -e "$MPSD/pipe/control" ] || return 0
  local pid _
  pid=$(cat "$MPSD/pipe/nvidia-cuda-mps-control.pid" 2> /dev/null)
  mps_ctl quit > /dev/null 2>&1
  for _ in $(seq 100); do
    if [ -z "$pid" ] || ! kill -0 "$pid" 2> /dev/null; then break; fi
    sleep 0.1
  done
  [ -n "$pid" ] && kill -0 "$pid" 2> /dev/null && { say "MPS control daemon $pid did not quit: SIGKILL"; kill -9 "$pid"; }
  rm -f "$MPSD/pipe/control"
  cat "$MPSD/log/control.log" >> "$OUT/mps-control.log" 2> /dev/null
  : > "$MPSD/log/control.log" 2> /dev/null
}
# mps_check LABEL: whether a client that just ran got an MPS server
mps_check() {
  local servers
  servers=$(mps_ctl get_server_list 2> /dev/null)
  if [ -n "$servers" ]; then say "$1: MPS server $servers"; else say "$1: NO MPS server after a client ran: its mps rows are not MPS"; fi
}

# The SM clock, its maximum and the power draw every 500 ms, for the
# whole run (the report takes each setting's windows from it).
clocks_start() {
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.max.sm,power.draw --format=csv,noheader,nounits -lms 500 > "$OUT/clocks.txt" 2>&1 &
  SMI=$!
}
clocks_stop() {
  [ -n "$SMI" ] || return 0
  kill "$SMI" 2> /dev/null
  wait "$SMI" 2> /dev/null
  SMI=
}
# stop PID...: SIGTERM (timeout passes it on to the tenant, and vgpu exec
# to its command), SIGKILL after 5 s
alive() { # PID...: whether any still runs
  local p
  for p in "$@"; do kill -0 "$p" 2> /dev/null && return 0; done
  return 1
}
stop() {
  local p _
  for p in "$@"; do kill -TERM "$p" 2> /dev/null; done
  for _ in $(seq 50); do
    alive "$@" || break
    sleep 0.1
  done
  for p in "$@"; do kill -9 "$p" 2> /dev/null; wait "$p" 2> /dev/null; done
}
probe_cleanup() {
  # shellcheck disable=SC2086 # none, one or two pids
  [ -n "$LP$FP" ] && stop $LP $FP
  mps_stop
  clocks_stop
}

# one LABEL ROUND FLOOD_MS|0 LIGHT_PREFIX... [--flood FLOOD_PREFIX...]
# (a prefix may end in vgpu exec's own --)
# The light tenant calibrates its clock alone, then the flood (FLOOD_MS > 0)
# starts and fills its queue, then the light one measures.
one() {
  local label=$1 r=$2 fms=$3
  shift 3
  local lenv=() fenv=()
  while [ $# -gt 0 ] && [ "$1" != --flood ]; do lenv+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  fenv=("$@")
  rm -f "$W/cal" "$W/go" "$W/ready" "$W/raw"
  RAW=$W/raw MAX_S=$MAX_S timeout -k 5 90 "${lenv[@]}" "$PROBE" light "$REQS" "$INTERVAL_US" "$LIGHT_US" "$W/cal" "$W/go" > "$W/light.out" 2>&1 &
  LP=$!
  if ! wait_file "$W/cal" 60; then
    say "$label $r: light tenant not calibrated: $(tail -2 "$W/light.out")"
    kill -TERM "$LP" 2> /dev/null
    wait "$LP"
    LP=
    return 1
  fi
  if [ "$fms" != 0 ]; then
    timeout -k 5 120 "${fenv[@]}" "$PROBE" flood $((fms * 1000)) 100 "$W/ready" > "$W/flood.out" 2>&1 &
    FP=$!
    wait_file "$W/ready" 60 || say "$label $r: flood not ready: $(tail -2 "$W/flood.out")"
    sleep 0.3 # its queue full and running
  fi
  local t0 t1
  t0=$(date +%s.%N)
  touch "$W/go"
  wait "$LP"
  LP=
  t1=$(date +%s.%N)
  # the caller's look at the tenants while the flood still runs, if it has one
  if declare -F one_snapshot > /dev/null; then one_snapshot "$label" "$r"; fi
  if [ -n "$FP" ]; then
    kill -TERM "$FP" 2> /dev/null
    wait "$FP"
    FP=
    sed "s/^/$label $r /" "$W/flood.out" | grep " flood " >> "$R" || say "$label $r: no flood result: $(tail -2 "$W/flood.out")"
  fi
  if grep -q '^light ' "$W/light.out"; then
    echo "$label $r window $t0 $t1" >> "$R"
    grep '^light ' "$W/light.out" | sed "s/^/$label $r /" >> "$R"
    sed "s/^/$label $r /" "$W/raw" >> "$OUT/raw.txt" 2> /dev/null
    say "$label $r: $(grep '^light ' "$W/light.out" | cut -c1-120)"
  else
    say "$label $r: no light result: $(tail -2 "$W/light.out")"
  fi
}
