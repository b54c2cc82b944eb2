#!/usr/bin/env bash
# Memory routes beside allocation calls on a real GPU
# (docs/memory-routes.md). Each route of routes.cu runs natively and under
# `vgpu exec --memory-limit` (4Gi; 1Gi for the module/global cases, 3Gi for
# global2) while a
# sampler on the host reads the driver's per-process figures
# (nvidia-smi --query-compute-apps) every 100 ms; the table gives each run's
# peak and whether it stayed within limit + 64 MiB. Run from the repository
# root on an otherwise idle GPU 0, with vgpu and the library built:
#   VGPU=build/bin/vgpu LIBDIR=build/lib test/gpu/routes/routes.sh
# CONTAINER=1 adds a third run of each route: in a runc container started
# through vgpu-runtime with VGPU_MEMORY_LIMIT (test/gpu/hostroot.sh; runc and
# vgpu-runtime on PATH, root). Outputs stay in $OUTDIR when it is set.
set -uo pipefail
REPO=$(pwd)
VGPU=${VGPU:-build/bin/vgpu}
LIBDIR=$(realpath ${LIBDIR:-build/lib})
W=$(mktemp -d /tmp/vgpu-routes-XXXXXX)
O=${OUTDIR:-$W}; mkdir -p $O
D=$(dirname "$0")
ARCH=${ARCH:-sm_90}
# the programs where a container over this machine's / sees them
P=$REPO/build/gpu-routes; mkdir -p $P
nvcc -O2 -arch=$ARCH -o $P/routes $D/routes.cu -lcuda -ldl || exit 1
nvcc -cubin -arch=$ARCH -o $P/big.cubin $D/big.cu || exit 1
if [ "${CONTAINER:-0}" = 1 ]; then
  . $D/../hostroot.sh
  hostroot_setup
fi
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
    peak=$(sample $O/$route.$mode.out "$@")
  else
    if [ "$mode" = runc ]; then
      bundle $route-runc VGPU_VISIBLE_DEVICES=0 VGPU_MEMORY_LIMIT=${lim}Gi -- "$@"
      peak=$(sample $O/$route.$mode.out vgpu-runtime --root $W/runc run -b $W/$route-runc $route-runc)
      hostroot_tidy
    else
      peak=$(sample $O/$route.$mode.out $VGPU exec --lib-dir $LIBDIR --memory-limit ${lim}Gi -- "$@")
    fi
    bound=$((lim * 1024 + 64))
    if [ "${peak:-0}" -le $bound ]; then ok=WITHIN; else ok=OVER; fi
  fi
  printf '%-9s %-7s %-6s %9s %9s  %s %s\n' $route $mode $lim "${peak:-?}" $bound "$ok" \
    "$(grep -E '^(rc_|contexts=|free_)' $O/$route.$mode.out | tr '\n' ' ')"
}

modes="limited"; [ "${CONTAINER:-0}" = 1 ] && modes="limited runc"
routes() { # route limit(Gi) args...
  local r=$1 lim=$2; shift 2
  row $r native - "$@"
  for m in $modes; do row $r $m $lim "$@"; done
}
for r in heap stack fifo pending local contexts ctxv1; do routes $r 4 $P/routes $r; done
routes global 1 $P/routes global
routes global2 3 $P/routes global2
routes module 1 $P/routes module $P/big.cubin
echo "outputs: $O (each run's output in <route>.<mode>.out)"
