#!/usr/bin/env bash
# How much of the time a tenant's own pacer holds it on a card (vgpu status's
# paceHeld): one flood at a time under vgpu exec (bf16 8192^3 matmuls, and
# the 1024-element adds of a launch-bound loop), at each limit, interleaved
# over REPS rounds. Two readings of vgpu status --json, WINDOW s apart,
# inside its timed loop give the share of that window its pacer held it
# (paceHeld) and the busy share the library counted (computeShare); beside
# them, the loop's rate against the no-limit run's. A flood with none of
# its work queued while held: held + busy should come to about 100 %.
#   VGPU=path/to/vgpu LIBDIR=dir bench/gpu/held.sh
set -uo pipefail
cd "$(dirname "$0")" || exit 1
VGPU=${VGPU:-../../build/bin/vgpu}
LIBDIR=${LIBDIR:-../../build/lib}
REPS=${REPS:-3}
SECS=${SECS:-10}
WINDOW=${WINDOW:-3}
LIMITS=${LIMITS:-100 30 60 90}
KINDS=${KINDS:-matmul small}
R=$(mktemp)
ex() { # LIMIT KIND
  local p=$1 kind=$2 at
  at=$(($(date +%s) + 6)) # the warm-up (torch import, first kernels) ends before
  if [ "$p" = 100 ]; then
    LOOP_AT=$at timeout -k 5 $((SECS + 40)) "$VGPU" exec --lib-dir "$LIBDIR" -- python3 loop.py "$kind" "$SECS" > "$R.loop" 2>&1 &
  else
    LOOP_AT=$at timeout -k 5 $((SECS + 40)) "$VGPU" exec --lib-dir "$LIBDIR" --compute-limit "$p" -- python3 loop.py "$kind" "$SECS" > "$R.loop" 2>&1 &
  fi
  local pid=$!
  sleep $((at - $(date +%s) + 2))
  timeout -k 5 $((WINDOW + 20)) "$VGPU" status --json --interval "${WINDOW}s" > "$R.status" 2>/dev/null
  wait $pid
  python3 - "$p" "$kind" "$R.loop" "$R.status" >> "$R" <<'PY'
import json, sys
p, kind, loop, st = sys.argv[1:]
rate = None
for line in open(loop):
    f = line.split()
    if len(f) == 2 and f[0] == kind + "_per_s":
        rate = float(f[1])
    else:
        print("# (output) " + line.rstrip())
try:
    cs = [c for c in json.load(open(st))["containers"] if c["id"].startswith("exec-")]
except (ValueError, KeyError):
    cs = []
if len(cs) != 1 or rate is None:
    print("# %s %s: %d vgpu exec entries in the status, rate %s" % (kind, p, len(cs), rate))
    sys.exit()
c = cs[0]
busy = c["devices"][0].get("computeShare")
print(kind, p, rate, c.get("paceHeld", 0.0), -1 if busy is None else busy)
PY
}
for _ in $(seq "$REPS"); do
  for kind in $KINDS; do
    for p in $LIMITS; do ex "$p" "$kind"; done
  done
done
grep '^#' "$R"
python3 - "$R" <<'PY'
import sys, statistics, collections
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    if line.startswith("#"):
        continue
    kind, p, rate, held, busy = line.split()
    d[(kind, p)].append((float(rate), 100 * float(held), 100 * float(busy)))
def med(v):
    return "%5.1f [%5.1f..%5.1f]" % (statistics.median(v), min(v), max(v))
print("%-7s %-6s %-22s %-22s %-22s %s" % ("loop", "limit", "held % (paceHeld)", "busy % (library)", "held + busy %", "rate % of no limit"))
for kind in dict.fromkeys(k for k, _ in d):
    base = [r for r, _, _ in d.get((kind, "100"), [])]
    b = statistics.median(base) if base else None
    for p in dict.fromkeys(q for k, q in d if k == kind):
        v = d[(kind, p)]
        rate = "%.1f" % (100 * statistics.median([r for r, _, _ in v]) / b) if b else "-"
        print("%-7s %-6s %-22s %-22s %-22s %s" % (kind, p, med([h for _, h, _ in v]), med([u for _, _, u in v]),
                                                 med([h + u for _, h, u in v]), rate))
PY
rm -f "$R" "$R.loop" "$R.status"
