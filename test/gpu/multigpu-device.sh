#!/bin/bash
# test/gpu/multigpu.sh part by part on a machine of two GPUs, each part with
# its own time limit, logs under $OUT. The build comes as one archive beside
# this script's copy of the repository:
#   B=<dir>; mkdir -p $B/bin $B/lib
#   cp build/bin/* <static runc> $B/bin; cp build/lib/*.so $B/lib   (stripped: -ldflags '-s -w')
#   tar -C $B -cJf <carry>/b.tar.xz bin lib; cp -r <this repo> <carry>/repo; cp this script <carry>/go.sh
# then, on the GPU machine: timeout -k 10 470 bash <carry>/go.sh
# PARTS (name:seconds:multigpu.sh parts, space-separated), ROUNDS, SECS and
# DDP_STEPS override the defaults.
C=$(cd "$(dirname "$0")" && pwd)
mkdir -p /tmp/i35 && tar -C /tmp/i35 -xJf "$C/b.tar.xz" || exit 1
export PATH=/tmp/i35/bin:$PATH BIN=/tmp/i35/bin LIBDIR=/tmp/i35/lib ROUNDS=${ROUNDS:-3} SECS=${SECS:-6} DDP_STEPS=${DDP_STEPS:-300}
cd "$C/repo" || exit 1
{ date -u; nvidia-smi; nvidia-smi topo -m; runc --version; } > "$OUT/env.txt" 2>&1
part() {
	local name=$1 lim=$2
	shift 2
	echo "=== $name $(date -u +%T)"
	timeout -k 10 "$lim" bash test/gpu/multigpu.sh "$@" > "$OUT/$name.log" 2>&1
	echo "[rc $?]" >> "$OUT/$name.log"
	grep -E "^(PASS|FAIL|==|device time|all-reduce|DDP|NCCL MiB)" "$OUT/$name.log"
}
for p in ${PARTS:-mem:120:exec,runc compute:70:compute dist:160:dist peer:45:peer node:70:node}; do
	IFS=: read -r n l w <<< "$p"
	# shellcheck disable=SC2086 # the parts are words
	part "$n" "$l" ${w//,/ }
done
echo "=== end $(date -u +%T)"
