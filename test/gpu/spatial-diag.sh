#!/usr/bin/env bash
# What a real MPS control daemon says about a real client, beside vgpu node:
# vgpu node with GPU 0 spatial, one PyTorch client through `vgpu exec
# --compute-limit 50` in the GPU's MPS shm directory; mpsdiag prints every
# 100 ms NVML's compute and MPS compute processes and the daemon's
# get_server_list / get_client_list. Then: can root, through a read-only bind
# mount of the pipe directory (a container's view), send control commands?
#   VGPU=bin/vgpu MPSDIAG=bin/mpsdiag INSHM=bench/gpu/serve/inshm.sh OUT=/tmp/d bash spatial-diag.sh
set -uo pipefail
OUT=${OUT:-/tmp/spatial-diag}; mkdir -p "$OUT"
CTL=${MPS_CONTROL:-/usr/local/nvidia/bin/nvidia-cuda-mps-control}
T="timeout -k 5"
GPU=$($T 20 nvidia-smi --query-gpu=uuid --format=csv,noheader -i 0)
W=$(mktemp -d /tmp/dg.XXXXXX)
printf 'state_dir = "%s/st"\n[spatial]\ngpus = ["%s"]\nmps_control = "%s"\n' "$W" "$GPU" "$CTL" > "$W/config.toml"
export VGPU_CONFIG=$W/config.toml
"$VGPU" node --listen "" > "$OUT/node.log" 2>&1 &
NODE=$!
stop() { kill -TERM "$NODE" 2>/dev/null; for _ in $(seq 60); do kill -0 "$NODE" 2>/dev/null || break; sleep 0.1; done; kill -KILL "$NODE" 2>/dev/null; }
trap stop EXIT
P=""; for _ in $(seq 100); do P=$(ls -d "$W"/st/.mps/*/pipe 2>/dev/null | head -1); [ -n "$P" ] && [ -e "$P/nvidia-cuda-mps-control.pid" ] && break; sleep 0.1; done
SHM=$(dirname "$P")/shm
echo "GPU $GPU pipe $P $(date -u +%FT%TZ)"; ls -la "$P"
ctl() { local p=$1; shift; echo "$*" | CUDA_MPS_PIPE_DIRECTORY=$p $T 5 "$CTL" 2>&1; }
"$MPSDIAG" -control "$CTL" -pipe "$P" -for "${DIAG_S:-24}s" > "$OUT/mpsdiag.txt" 2>&1 &
DIAG=$!
sleep 0.5
$T 30 "$INSHM" "$SHM" "$VGPU" exec --lib-dir "$(dirname "$VGPU")/../lib" --devices 0 --compute-limit 50 -- python3 -c '
import os, time, torch
t=time.time(); x=torch.randn(4096,4096,device="cuda"); torch.cuda.synchronize()
print("pid", os.getpid(), "context in %.2fs" % (time.time()-t), flush=True)
e=time.time()+6
while time.time()<e:
    y=x@x
torch.cuda.synchronize(); print("done", flush=True)' > "$OUT/client.txt" 2>&1
echo "client rc=$?"; cat "$OUT/client.txt"
wait "$DIAG"
cat "$OUT/mpsdiag.txt" | awk 'NR%3==1 || /clients\([0-9]+\)="[0-9]/' | head -120
echo "== node.log"; cat "$OUT/node.log"
[ "${SKIP_RO:-0}" = 1 ] && exit 0
# a container's view: the pipe directory bind-mounted read-only; root there
echo "== read-only pipe directory, as root"
$T 20 unshare -m sh -c '
mkdir -p /tmp/ro-pipe && mount --bind "$0" /tmp/ro-pipe && mount -o remount,bind,ro /tmp/ro-pipe || { echo "ro mount failed"; exit 1; }
touch /tmp/ro-pipe/x 2>&1 | head -1
for c in get_server_list get_default_active_thread_percentage "set_default_active_thread_percentage 100" get_default_active_thread_percentage; do
  printf "%s -> " "$c"; echo "$c" | CUDA_MPS_PIPE_DIRECTORY=/tmp/ro-pipe timeout -k 5 5 "$1" 2>&1 | tr "\n" " "; echo "rc=$?"
done' "$P" "$CTL"
echo "default now, through the host path: $(ctl "$P" get_default_active_thread_percentage | tr '\n' ' ')"
D1=$(cat "$P/nvidia-cuda-mps-control.pid" 2>/dev/null)
$T 20 unshare -m sh -c 'mkdir -p /tmp/ro-pipe && mount --bind "$0" /tmp/ro-pipe && mount -o remount,bind,ro /tmp/ro-pipe && { printf "quit -> "; echo quit | CUDA_MPS_PIPE_DIRECTORY=/tmp/ro-pipe timeout -k 5 5 "$1" 2>&1; echo "rc=$?"; }' "$P" "$CTL"
sleep 1.5
echo "daemon pid before quit: $D1; alive after: $(kill -0 "$D1" 2>/dev/null && echo yes || echo no); pid file now: $(cat "$P/nvidia-cuda-mps-control.pid" 2>/dev/null)"
tail -3 "$OUT/node.log"
cp -r "$(dirname "$P")/log" "$OUT/mpslog" 2>/dev/null
