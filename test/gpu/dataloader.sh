#!/usr/bin/env bash
# Two processes share one 8 GiB vGPU, one of them with 4 DataLoader workers;
# the host samples nvidia-smi's per-process memory while both are full.
set -uo pipefail
VGPU=${VGPU:-build/bin/vgpu}; LIBDIR=${LIBDIR:-build/lib}
B=$(mktemp -d)
$VGPU exec --lib-dir $LIBDIR --memory-limit 8Gi -- sh -c "python3 test/gpu/dataloader.py loader $B & python3 test/gpu/dataloader.py other $B & wait" &
max=0
for _ in $(seq 150); do
  s=$(nvidia-smi --query-compute-apps=used_memory --format=csv,noheader,nounits | awk '{t+=$1} END {print t+0}')
  [ "$s" -gt "$max" ] && max=$s
  sleep 0.2
  kill -0 $! 2>/dev/null || break
done
wait
echo "host nvidia-smi: most device memory held by the two processes together: $max MiB (limit 8192 MiB)"
