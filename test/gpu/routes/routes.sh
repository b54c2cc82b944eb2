#!/usr/bin/env bash
# Memory routes beside allocation calls on a real GPU (issue 17,
# docs/memory-routes.md). Each route of routes.cu runs natively and under
# `vgpu exec --memory-limit` (4Gi; 1Gi for the module/global cases, 3Gi for
# global2) while a
# sampler on the host reads the driver's per-process figures
# (nvidia-smi --query-compute-apps) every 100 ms; the table gives each run's
# peak and whether it stayed within limit + 64 MiB. Run from the repository
# root on an otherwise idle GPU 0, with vgpu and the library built:
#   VGPU=build/bin/vgpu LIBDIR=build/lib test/gpu/routes/routes.sh
set -uo pipefail
VGPU=${VGPU:-build/bin/vgpu}
LIBDIR=${LIBDIR:-build/lib}
W=$(mktemp -d)
D=$(dirname "$0")
ARCH=${ARCH:-sm_90}
nvcc -O2 -arch=$ARCH -o $W/routes $D/routes.cu -lcuda -ldl || exit 1
nvcc -cubin -arch=$ARCH -o $W/big.cubin $D/big.cu || exit 1
echo "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"

# peak of the summed per-process figures (MiB) of every compute process on
# GPU 0 while "$@" runs
sample() {
  local out=$1; shift
  : > $W/samples
  ( while :; do
      nvidia-smi -i 0 --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null |
        awk -F', *' '{s += $2} END {print s + 0}' >> $W/samples
      sleep 0.1
    done ) &
  local sp=$!
  "$@" > $out 2>&1
  local rc=$?
  kill $sp 2>/dev/null; wait $sp 2>/dev/null
  sort -n $W/samples | tail -1
  return $rc
}

printf '%-9s %-7s %-6s %9s %9s  %s\n' route mode limit peak_MiB bound_MiB "result (program's rc lines)"
row() { # route mode limit(Gi or -) args...
  local route=$1 mode=$2 lim=$3; shift 3
  local peak bound=- ok=""
  if [ "$mode" = native ]; then
    peak=$(sample $W/$route.$mode.out "$@")
  else
    peak=$(sample $W/$route.$mode.out $VGPU exec --lib-dir $LIBDIR --memory-limit ${lim}Gi -- "$@")
    bound=$((lim * 1024 + 64))
    if [ "${peak:-0}" -le $bound ]; then ok=WITHIN; else ok=OVER; fi
  fi
  printf '%-9s %-7s %-6s %9s %9s  %s %s\n' $route $mode $lim "${peak:-?}" $bound "$ok" \
    "$(grep -E '^(rc_|contexts=|free_)' $W/$route.$mode.out | tr '\n' ' ')"
}

for r in heap stack fifo pending local contexts ctxv1; do
  row $r native - $W/routes $r
  row $r limited 4 $W/routes $r
done
row global native - $W/routes global
row global limited 1 $W/routes global
row global2 native - $W/routes global2
row global2 limited 3 $W/routes global2
row module native - $W/routes module $W/big.cubin
row module limited 1 $W/routes module $W/big.cubin
echo "outputs: $W (each run's output in <route>.<mode>.out)"
