#!/usr/bin/env bash
# The spatial mode's library side on a real GPU, under NVIDIA MPS started as
# `vgpu node` starts it (one control daemon for GPU 0, CUDA_VISIBLE_DEVICES=<uuid>,
# its own pipe and log directories). Answers, per line, what the docs record:
#   - what a plain MPS client at 50 % gets (SM count, throughput), and whether
#     the driver reads CUDA_MPS_ACTIVE_THREAD_PERCENTAGE at cuInit or later;
#   - the library with a spatial quota: the share applied from the quota
#     whatever the tenant's environment says; fail closed without a daemon;
#   - a tenant that lifts its own share (env 100, or a context without or with
#     a larger affinity), with the server open and held at 50 by the host;
#   - a client that faults with an illegal address: does its neighbour survive?
# Run from a directory holding lib/libvgpu-{cuda,nvml}.so, spatial_probe.cu:
#   LIBDIR=lib OUT=/tmp/out bash spatial.sh   ($OUT gets the MPS logs)
# The MPS daemon is always stopped at the end.
set -uo pipefail
LIBDIR=$(readlink -f "${LIBDIR:-build/lib}")
OUT=${OUT:-/tmp/spatial}; mkdir -p "$OUT"
HERE=$(cd "$(dirname "$0")" && pwd)
export PATH=/usr/local/nvidia/bin:$PATH
D=${DRIVER_DIR:-$(dirname "$(ldconfig -p | awk '/libcuda.so.1 .*x86-64/ {print $NF; exit}')")}
CUDA=$(readlink -f "$D/libcuda.so.1"); NVML=$(readlink -f "$D/libnvidia-ml.so.1")
UUID=$(timeout -k 5 20 nvidia-smi --query-gpu=uuid --format=csv,noheader -i 0)
W=$(mktemp -d); PIPE=$W/pipe; LOGD=$W/log; mkdir -p "$PIPE" "$LOGD" "$W/nopipe" "$W/shared"
T="timeout -k 5"
ctl() { echo "$*" | CUDA_MPS_PIPE_DIRECTORY="$PIPE" $T 20 nvidia-cuda-mps-control; }
stop() { # quit the daemon; a server it listed that outlives the quit is killed by its pid
    local servers dpid
    servers=$(ctl get_server_list 2>/dev/null); dpid=$(cat "$PIPE/nvidia-cuda-mps-control.pid" 2>/dev/null)
    ctl quit >/dev/null 2>&1
    sleep 2
    for p in $servers $dpid; do
        if kill -0 "$p" 2>/dev/null; then echo "pid $p still up after quit: kill $p"; kill "$p"; fi
    done
    cp "$LOGD"/*.log "$OUT/" 2>/dev/null
    }
trap stop EXIT
echo "driver $CUDA, GPU $UUID, $(date -u +%FT%TZ)"
$T 120 nvcc -O2 -arch=sm_90 -o "$W/probe" "$HERE/spatial_probe.cu" -lcuda -ldl || exit 1
P=$W/probe
quota() { # PCT PIPE: a spatial quota file
    printf 'vgpu-quota 3\ndriver-cuda %s\ndriver-nvml %s\nshared-dir %s\nlog-level info\ndevice 0 %s memory=%d compute=%d mode=spatial mps_pipe=%s\n' \
        "$CUDA" "$NVML" "$W/shared" "$UUID" $((8 << 30)) "$1" "$2" > "$W/quota"
}
LIB=(env "VGPU_QUOTA_FILE=$W/quota" "LD_PRELOAD=$LIBDIR/libvgpu-cuda.so:$LIBDIR/libvgpu-nvml.so")
run() { # NAME CMD...: one probe, its output indented here
    local n=$1; shift
    echo "== $n: $*"
    $T 60 "$@" > "$W/$n.txt" 2>&1; echo "rc=$?" >> "$W/$n.txt"
    sed 's/^/  /' "$W/$n.txt"
}
run 01-no-mps env -u CUDA_MPS_PIPE_DIRECTORY "$P" info
CUDA_VISIBLE_DEVICES=$UUID CUDA_MPS_PIPE_DIRECTORY="$PIPE" CUDA_MPS_LOG_DIRECTORY=$LOGD $T 20 nvidia-cuda-mps-control -d
sleep 1
echo "daemon: $(cat "$PIPE/nvidia-cuda-mps-control.pid" 2>/dev/null)"; ls -la "$PIPE"
run 02-plain-50 env CUDA_MPS_PIPE_DIRECTORY="$PIPE" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 "$P" info
run 03-plain-50-late env CUDA_MPS_PIPE_DIRECTORY="$PIPE" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 "$P" info late
run 04b-plain-50-ctx env CUDA_MPS_PIPE_DIRECTORY="$PIPE" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 "$P" ctx 132 66 32 2
run 04-plain-100 env CUDA_MPS_PIPE_DIRECTORY="$PIPE" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100 "$P" info
quota 50 "$PIPE"
run 05-lib-env-dropped "${LIB[@]}" env -u CUDA_MPS_PIPE_DIRECTORY -u CUDA_MPS_ACTIVE_THREAD_PERCENTAGE "$P" info
run 06-lib-tenant-100 "${LIB[@]}" CUDA_MPS_PIPE_DIRECTORY="$PIPE" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100 "$P" info
run 07-lib-tenant-100-late "${LIB[@]}" CUDA_MPS_PIPE_DIRECTORY="$PIPE" "$P" info late
run 08-lib-tenant-20 "${LIB[@]}" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=20 "$P" info
quota 50 "$W/nopipe"
run 09-lib-no-daemon "${LIB[@]}" "$P" info
quota 50 "$PIPE"
# the host holds the server at 50 (vgpu node's cap): can a client lift itself?
S=$(ctl get_server_list | head -1); echo "server: $S"
[ -n "$S" ] && ctl set_active_thread_percentage "$S" 50
ctl set_default_active_thread_percentage 50
run 10-capped-plain-100 env CUDA_MPS_PIPE_DIRECTORY="$PIPE" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100 "$P" info
run 11-capped-plain-unset env -u CUDA_MPS_ACTIVE_THREAD_PERCENTAGE CUDA_MPS_PIPE_DIRECTORY="$PIPE" "$P" info
# contexts with an SM count of their own (execution affinity), in a client
# capped at 50: plain, and through the library
run 14-capped-plain-ctx env CUDA_MPS_PIPE_DIRECTORY="$PIPE" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 "$P" ctx 132 66 32 2
run 15-capped-lib-ctx "${LIB[@]}" "$P" ctx 132 66 32 2
# a client that faults beside a neighbour of the same server
echo "== 12-fault: neighbour loops 8 s, a client faults after 2 s"
$T 60 "${LIB[@]}" "$P" loop 8 > "$W/12-neighbour.txt" 2>&1 &
NB=$!
sleep 2
run 12-fault "${LIB[@]}" "$P" fault
wait $NB; echo "neighbour rc=$?" >> "$W/12-neighbour.txt"; sed 's/^/  /' "$W/12-neighbour.txt"
echo "servers after the fault: $(ctl get_server_list | tr '\n' ' ')"
run 13-after-fault "${LIB[@]}" "$P" info
