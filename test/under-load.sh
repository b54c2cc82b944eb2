#!/usr/bin/env bash
# Runs a test command N times beside two CPU-bound loops, as on a busy 2-core
# machine, and reports how many runs passed. Exit status 0 only if all did.
#   test/under-load.sh N COMMAND [ARGS...]
#   e.g. VGPU_BUILD=$PWD/build test/under-load.sh 5 go test -tags integration -race -count=1 ./lib/cudahook/
set -uo pipefail
if [ $# -lt 2 ] || ! [[ $1 =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: $0 N COMMAND [ARGS...]  (N: runs, at least 1)" >&2
  exit 2
fi
n=$1
shift
hogs=()
stop_hogs() {
  for p in "${hogs[@]}"; do kill "$p" 2>/dev/null; done
  wait "${hogs[@]}" 2>/dev/null
}
trap stop_hogs EXIT
trap 'exit 130' INT TERM
for _ in 1 2; do
  sh -c 'while :; do :; done' &
  hogs+=($!)
done
echo "under load: two CPU hogs (pids ${hogs[*]}) beside: $*"
pass=0 fail=0
for i in $(seq 1 "$n"); do
  start=$SECONDS
  log=$(mktemp)
  if "$@" >"$log" 2>&1; then
    pass=$((pass + 1))
    echo "run $i/$n: pass ($((SECONDS - start)) s)"
  else
    fail=$((fail + 1))
    echo "run $i/$n: FAIL ($((SECONDS - start)) s); its output's end:"
    tail -40 "$log" | sed 's/^/    /'
  fi
  rm -f "$log"
done
echo "under load: $pass of $n passed, $fail failed"
[ "$fail" -eq 0 ]
