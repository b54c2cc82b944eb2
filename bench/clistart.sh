#!/usr/bin/env bash
# Start time of the vgpu CLI against the Go floor: the median of RUNS (40)
# runs of `vgpu --help` and of bench/execfloor with no runc on PATH (a Go
# program that starts, looks, and exits). Needs hyperfine (apt-get install
# hyperfine). BUILD: the output of make build (./build).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-$PWD/build}
GO=${GO:-go}
RUNS=${RUNS:-40}
command -v hyperfine >/dev/null || { echo "$0: needs hyperfine (apt-get install hyperfine)" >&2; exit 2; }
[ -x "$BUILD/bin/vgpu" ] || { echo "$0: no $BUILD/bin/vgpu (make build)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
CGO_ENABLED=0 "$GO" build -o "$work/execfloor" ./bench/execfloor
# -N: no shell between hyperfine and the program; execfloor finds no runc and exits 1.
PATH=/nonexistent "$(command -v hyperfine)" -N -i -w 5 -r "$RUNS" --export-json "$work/r.json" \
  "$work/execfloor" "$BUILD/bin/vgpu --help" >/dev/null 2>&1
python3 - "$work/r.json" <<'PY'
import json, sys
r = {x["command"].split("/")[-1]: x["median"] * 1000 for x in json.load(open(sys.argv[1]))["results"]}
floor, cli = r["execfloor"], r["vgpu --help"]
print(f"execfloor median {floor:.2f} ms; vgpu --help median {cli:.2f} ms; vgpu over the floor {cli - floor:+.2f} ms")
PY
