#!/usr/bin/env bash
# VMM memory mapped and then released on the real driver (test/gpu/vmmmap.c):
# natively the driver keeps all of it while mapped; under
# `vgpu exec --memory-limit 4Gi` the library refuses the allocation that
# would pass the limit, and the host's NVML shows no more than the limit.
#   VGPU=build/bin/vgpu LIBDIR=build/lib test/gpu/vmmmap.sh
set -uo pipefail
VGPU=${VGPU:-build/bin/vgpu} LIBDIR=${LIBDIR:-build/lib}
W=$(mktemp -d /tmp/vgpu-vmm-XXXXXX); trap 'rm -rf $W' EXIT
nvcc -o $W/vmmmap test/gpu/vmmmap.c -lcuda || exit 1
u() { nvidia-smi -i 0 --query-gpu=memory.used --format=csv,noheader,nounits; }
fail=0
for mode in native limited; do
  rm -f $W/go; b=$(u)
  if [ $mode = native ]; then timeout 60 $W/vmmmap 1024 8 $W/go > $W/$mode 2>&1 &
  else timeout 60 $VGPU exec --lib-dir $LIBDIR --memory-limit 4Gi -- $W/vmmmap 1024 8 $W/go > $W/$mode 2>&1 & fi
  for _ in $(seq 150); do grep -q mapped= $W/$mode && break; sleep 0.2; done
  h=$(u); touch $W/go; wait
  echo "== $mode: host memory.used $b -> $h MiB while mapped"; cat $W/$mode
  k=$(sed -n 's/^mapped=//p' $W/$mode)
  if [ $mode = native ]; then [ "$k" = 8 ] && [ $((h - b)) -ge 8192 ] || { echo "FAIL native: the driver did not keep 8 GiB mapped"; fail=1; }
  else [ "$k" = 3 ] && [ $((h - b)) -le $((4096 + 64)) ] || { echo "FAIL limited: $k GiB mapped, host +$((h - b)) MiB (want 3, within 4 GiB + 64 MiB)"; fail=1; }; fi
done
echo "== result: $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
