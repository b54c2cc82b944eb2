#!/usr/bin/env bash
# The no-regression figures of this tree against an earlier commit (the
# previous release by default), the two builds interleaved for ROUNDS rounds
# (default 3), the order alternating, medians and min..max over the rounds:
#   - the start latency vgpu-runtime adds to runc, run+delete of /bin/true,
#     for a container that asks for nothing and for one that asks for a GPU
#     of the simulator (bench/startlatency, median of BENCH_N pairs a round);
#   - the paced launch path's host CPU per launch over native, 60 us kernels
#     on the simulated GPU, limit 99 in a slot (bench/pacecost, one of its
#     rounds a round);
#   - the start time of `vgpu --help` (hyperfine, RUNS runs a round).
# PARTS (default "start pace help") picks some; PACE_N: pacecost's own
# interleaved rounds in each of ours (default 1).
# Each tool is this tree's, so that only the builds differ. Root (runc, a
# tmpfs), runc, busybox, hyperfine, gcc and Go.
#
# BUILD: this tree's `make build` (./build). PREV: the commit to compare
# with (ac59709: the previous release, the last commit whose library read
# the share file at fixed offsets, as lib/cudahook/previous_release_test.go
# builds it); PREV_BUILD: its `make build`, else built here from `git
# archive` of PREV. OUT: where the raw outputs and summary.txt go.
#
#   ROUNDS=3 bench/against.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-$PWD/build}
PREV=${PREV:-ac59709}
ROUNDS=${ROUNDS:-3}
N=${BENCH_N:-20}
RUNS=${RUNS:-40}
PARTS=" ${PARTS:-start pace help} "
PACE_N=${PACE_N:-1}
GPU_ENV=${BENCH_ENV:-VGPU_VISIBLE_DEVICES=0,VGPU_MEMORY_LIMIT=1Gi}
GO=${GO:-go}
command -v "$GO" >/dev/null || GO=/usr/local/go/bin/go
for t in runc busybox hyperfine gcc python3; do
  command -v "$t" >/dev/null || { echo "$0: needs $t" >&2; exit 2; }
done
[ "$(id -u)" = 0 ] || { echo "$0: needs root (runc, a tmpfs)" >&2; exit 2; }
[ -x "$BUILD/bin/vgpu-runtime" ] || { echo "$0: no $BUILD/bin/vgpu-runtime (make build)" >&2; exit 2; }
OUT=${OUT:-$(mktemp -d /tmp/vgpu-against-out-XXXXXX)}
mkdir -p "$OUT"
work=$(mktemp -d /tmp/vgpu-against-XXXXXX)
cleanup() {
  if mountpoint -q "$work/run"; then umount "$work/run"; fi
  rm -rf "$work"
}
trap cleanup EXIT

if [ -z "${PREV_BUILD:-}" ]; then
  PREV_BUILD=$work/prev-build
  mkdir -p "$work/prev-src"
  git archive "$PREV" | tar -x -C "$work/prev-src"
  echo "building $PREV into $PREV_BUILD"
  make -C "$work/prev-src" build BUILD="$PREV_BUILD" GIT_COMMIT="$PREV" >"$OUT/prev-build.log" 2>&1 ||
    { tail -20 "$OUT/prev-build.log" >&2; exit 1; }
fi

"$GO" build -o "$work/startlatency" ./bench/startlatency
"$GO" build -o "$work/pacecost" ./bench/pacecost
CGO_ENABLED=0 "$GO" build -o "$work/execfloor" ./bench/execfloor

# Bundles, state and the simulated GPU's files on a tmpfs, as bench/run.sh
# has them: a disk's fsync latency is not the runtime's.
mkdir -p "$work/run"
mount -t tmpfs -o size=512m vgpu-against "$work/run"
export TMPDIR=$work/run
declare -A build=([new]=$BUILD [prev]=$PREV_BUILD)
for w in new prev; do
  cat >"$work/$w.toml" <<TOML
state_dir = "$work/run/state-$w"
runtimes = ["runc"]
[driver]
root = "${build[$w]}/simgpu/root"
dev_root = "${build[$w]}/simgpu/root"
ipc_paths = ["run/simgpu"]
[library]
dir = "${build[$w]}/lib"
TOML
done

{
  echo "this tree: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- || echo -dirty) ($BUILD)"
  echo "previous: $PREV ($PREV_BUILD)"
  echo "parts:$PARTS; rounds $ROUNDS; start latency median of $N pairs a round; pacecost $PACE_N of its rounds a round; vgpu --help $RUNS runs a round"
  echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$OUT/summary.txt"

for r in $(seq 1 "$ROUNDS"); do
  if ((r % 2)); then order=(new prev); else order=(prev new); fi
  echo "round $r of $ROUNDS (${order[*]})"
  for w in "${order[@]}"; do
    b=${build[$w]}
    if [[ $PARTS == *" start "* ]]; then
      "$work/startlatency" -runtime "$b/bin/vgpu-runtime" -n "$N" \
        -config "$work/$w.toml" -floor "$work/execfloor" >"$OUT/start-pass-$w-$r.txt"
      "$work/startlatency" -runtime "$b/bin/vgpu-runtime" -n "$N" \
        -config "$work/$w.toml" -floor "$work/execfloor" -env "$GPU_ENV" >"$OUT/start-gpu-$w-$r.txt"
    fi
    if [[ $PARTS == *" pace "* ]]; then
      VGPU_BUILD=$BUILD "$work/pacecost" -build "$b" -n "$PACE_N" -secs 1 -us 60 >"$OUT/pace-$w-$r.txt"
    fi
  done
  [[ $PARTS == *" help "* ]] || continue
  # -N: no shell between hyperfine and the program; execfloor finds no runc and exits 1.
  PATH=/nonexistent "$(command -v hyperfine)" -N -i -w 5 -r "$RUNS" --export-json "$OUT/help-$r.json" \
    "$work/execfloor" "${build[${order[0]}]}/bin/vgpu --help" "${build[${order[1]}]}/bin/vgpu --help" >/dev/null 2>&1
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/summary.txt"

python3 - "$OUT" "$ROUNDS" "$BUILD" "$PREV_BUILD" "$PARTS" >>"$OUT/summary.txt" <<'PY'
import json, re, statistics, sys
out, rounds, new_build, prev_build, parts = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5].split()

def start(path):
    t = open(path).read()
    wall = float(re.search(r"ratio\s+[\d.]+\s+\(([+-][\d.]+) ms\)", t).group(1))
    cpu = float(re.search(r"vgpu-runtime [\d.]+ ms \(([+-][\d.]+) ms\)", t).group(1))
    floor = float(re.search(r"Go exec floor\s+[\d.]+ ms\s+\(([+-][\d.]+) ms", t).group(1))
    return wall, cpu, floor

def pace(path):
    rows = {}
    for line in open(path):
        if not line.startswith(" ") and rows:
            break  # the second table (allocations)
        m = re.match(r"^\s+(.+?)\s+(\d+)\s+\d+\.\.\d+\s+([\d.]+)\s+cpu\s+(\d+)$", line)
        if m:
            rows[m.group(1)] = (float(m.group(2)), float(m.group(4)))
    return (rows["limit 99, slot"][1] - rows["native"][1]) / 1000, (rows["library, no limit"][1] - rows["native"][1]) / 1000

def helpms(r, key):
    # key: "median" wall time, or "cpu" (hyperfine's mean user + system)
    res = json.load(open(f"{out}/help-{r}.json"))["results"]
    val = lambda x: (x["user"] + x["system"] if key == "cpu" else x[key]) * 1000
    get = lambda b: next(val(x) for x in res if x["command"] == f"{b}/bin/vgpu --help")
    floor = next(val(x) for x in res if x["command"].endswith("execfloor"))
    return get(new_build), get(prev_build), floor

def fmt(v, unit, sign="+"):
    return f"{statistics.median(v):{sign}.2f} {unit} ({min(v):{sign}.2f}..{max(v):{sign}.2f})"

R = range(1, rounds + 1)
print("medians over the rounds (min..max); new = this tree, prev = the previous commit")
for kind, label in (("pass", "start latency over runc, pass-through"), ("gpu", "start latency over runc, a GPU request")) if "start" in parts else ():
    for i, what in ((0, "wall"), (1, "CPU")):
        n = [start(f"{out}/start-{kind}-new-{r}.txt")[i] for r in R]
        p = [start(f"{out}/start-{kind}-prev-{r}.txt")[i] for r in R]
        print(f"{label}, {what}: new {fmt(n, 'ms')}; prev {fmt(p, 'ms')}")
    f = [start(f"{out}/start-{kind}-{w}-{r}.txt")[2] for r in R for w in ("new", "prev")]
    print(f"  Go exec floor over runc: {fmt(f, 'ms')}")
for i, what in ((0, "limit 99 in a slot"), (1, "library, no limit")) if "pace" in parts else ():
    n = [pace(f"{out}/pace-new-{r}.txt")[i] for r in R]
    p = [pace(f"{out}/pace-prev-{r}.txt")[i] for r in R]
    print(f"launch CPU over native, {what}: new {fmt(n, 'us')}; prev {fmt(p, 'us')}")
for key, what in (("median", "wall, median"), ("cpu", "CPU, mean")) if "help" in parts else ():
    h = [helpms(r, key) for r in R]
    print(f"vgpu --help, {what}: new {fmt([x[0] for x in h], 'ms', '')}; prev {fmt([x[1] for x in h], 'ms', '')}; execfloor {fmt([x[2] for x in h], 'ms', '')}")
PY
cat "$OUT/summary.txt"
echo "raw outputs: $OUT"
