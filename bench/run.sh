#!/usr/bin/env bash
# Benchmarks (make bench): start latency, vgpu-runtime vs runc (root required),
# for a container that asks for nothing (pass-through) and for one that asks
# for a GPU (on the simulated GPU unless VGPU_CONFIG names another config);
# then the library's cost per kernel launch on the simulated GPU (bench/pacecost);
# then the device shares the compute limits give on the simulated GPU
# (lib/cudahook/compute_bench_test.go; figures on an idle machine);
# then a light high tenant's wait beside a flooding low one, with and
# without priorities (lib/cudahook/priority_bench_test.go).
# then vgpu-node's time to kill and CPU per container (bench/nodecost).
# BENCH_N (default 20) runs each; BENCH_ENV: the GPU request (comma-separated);
# BENCH_ONLY=start: the two start-latency figures alone.
# Targets: pass-through within +5 ms of runc, a GPU request within
# +15 ms, medians of interleaved run+delete pairs on an idle machine. Each
# figure comes with the Go exec floor (bench/execfloor): starting a Go program
# at all, twice per pair, which no change to vgpu-runtime can remove.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-$PWD/build}
GO=${GO:-go}
command -v "$GO" >/dev/null || GO=/usr/local/go/bin/go
if command -v "$GO" >/dev/null; then
  "$GO" build -o "$BUILD/bin/startlatency" ./bench/startlatency
  CGO_ENABLED=0 "$GO" build -o "$BUILD/bin/execfloor" ./bench/execfloor
elif [ "${BENCH_ONLY:-}" = start ] && [ -x "$BUILD/bin/startlatency" ] && [ -x "$BUILD/bin/execfloor" ]; then
  # A machine without Go (the GPU machine): binaries built elsewhere.
  echo "no Go toolchain: the start-latency figures with the binaries in $BUILD/bin"
else
  echo "bench/run.sh: no Go toolchain ($GO); install Go (README), or set BENCH_ONLY=start with startlatency and execfloor built into $BUILD/bin" >&2
  exit 1
fi
work=$(mktemp -d /tmp/vgpu-bench-XXXXXX)
# Bundles and vgpu's state on a tmpfs, as on a real host (containerd's bundles
# and /run/vgpu are under /run): a disk's fsync latency is not the runtime's.
mount -t tmpfs -o size=256m vgpu-bench "$work"
trap 'umount "$work"; rm -rf "$work"' EXIT
export TMPDIR=$work
if [ -z "${VGPU_CONFIG:-}" ]; then
  VGPU_CONFIG=$work/config.toml
  cat > "$VGPU_CONFIG" <<TOML
state_dir = "$work/state"
runtimes = ["runc"]
[driver]
root = "$BUILD/simgpu/root"
dev_root = "$BUILD/simgpu/root"
ipc_paths = ["run/simgpu"]
[library]
dir = "$BUILD/lib"
TOML
fi
# The floor: a Go program that only execs runc, what any Go wrapper costs here.
args=(-runtime "$BUILD/bin/vgpu-runtime" -n "${BENCH_N:-20}" -config "$VGPU_CONFIG" -floor "$BUILD/bin/execfloor")
echo "== pass-through (no GPU request)"
"$BUILD/bin/startlatency" "${args[@]}"
echo "== with a GPU request"
"$BUILD/bin/startlatency" "${args[@]}" -env "${BENCH_ENV:-VGPU_VISIBLE_DEVICES=0,VGPU_MEMORY_LIMIT=1Gi}"
[ "${BENCH_ONLY:-}" = start ] && exit 0
echo "== cost per launch on the simulated GPU"
"$GO" build -o "$BUILD/bin/pacecost" ./bench/pacecost
"$BUILD/bin/pacecost" -build "$BUILD" -n "${BENCH_ROUNDS:-5}"
echo "== device shares on the simulated GPU (an idle machine: the launch loops need the CPU)"
VGPU_BUILD="$BUILD" "$GO" test -tags 'vgpubench integration' -count=1 -v -timeout 30m -run "${BENCH_SHARES:-^TestShare}" ./lib/cudahook/ |
  grep -E '^(\s+compute_bench_test\.go:[0-9]+: |--- |ok|FAIL|PASS)' | sed -E 's/^\s+compute_bench_test\.go:[0-9]+: /  /'
echo "== the order: a light high tenant's requests beside a flooding low one, with and without priorities"
VGPU_BUILD="$BUILD" "$GO" test -tags 'vgpubench integration' -count=1 -v -timeout 10m -run '^TestBenchPriorityWait$' ./lib/cudahook/ |
  grep -E '^(\s+priority_bench_test\.go:[0-9]+: |--- |ok|FAIL|PASS)' | sed -E 's/^\s+priority_bench_test\.go:[0-9]+: /  /'
echo "== vgpu-node: crossing a memory limit to the kill, and the daemon's CPU per container"
"$GO" build -o "$BUILD/bin/nodecost" ./bench/nodecost
"$BUILD/bin/nodecost" -build "$BUILD" -n "${BENCH_N:-20}"
