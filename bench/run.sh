#!/usr/bin/env bash
# Benchmarks (make bench): start latency, vgpu-runtime vs runc (root required);
# then the library's cost per kernel launch on the simulated GPU (bench/pacecost);
# then the device shares the compute limits give on the simulated GPU
# (lib/cudahook/compute_bench_test.go; figures on an idle machine).
# then vgpu node's time to kill and CPU per container (bench/nodecost).
# BENCH_N (default 20) runs each; BENCH_ENV: the container's GPU request
# (comma-separated), empty = the pass-through path; VGPU_CONFIG: the config.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-$PWD/build}
GO=${GO:-go}
command -v "$GO" >/dev/null || GO=/usr/local/go/bin/go
"$GO" build -o "$BUILD/bin/startlatency" ./bench/startlatency
args=(-runtime "$BUILD/bin/vgpu-runtime" -n "${BENCH_N:-20}")
[ -n "${VGPU_CONFIG:-}" ] && args+=(-config "$VGPU_CONFIG")
echo "== pass-through (no GPU request)"
"$BUILD/bin/startlatency" "${args[@]}"
if [ -n "${BENCH_ENV:-}" ]; then
  echo "== with request $BENCH_ENV"
  "$BUILD/bin/startlatency" "${args[@]}" -env "$BENCH_ENV"
fi
echo "== cost per launch on the simulated GPU"
"$GO" build -o "$BUILD/bin/pacecost" ./bench/pacecost
"$BUILD/bin/pacecost" -build "$BUILD" -n "${BENCH_ROUNDS:-5}"
echo "== device shares on the simulated GPU (an idle machine: the launch loops need the CPU)"
VGPU_BUILD="$BUILD" "$GO" test -tags vgpubench -count=1 -v -timeout 30m -run "${BENCH_SHARES:-^TestShare}" ./lib/cudahook/ |
  grep -E '^(\s+compute_bench_test\.go:[0-9]+: |--- |ok|FAIL|PASS)' | sed -E 's/^\s+compute_bench_test\.go:[0-9]+: /  /'
echo "== vgpu node: crossing a memory limit to the kill, and the daemon's CPU per container"
"$GO" build -o "$BUILD/bin/nodecost" ./bench/nodecost
"$BUILD/bin/nodecost" -build "$BUILD" -n "${BENCH_N:-20}"
