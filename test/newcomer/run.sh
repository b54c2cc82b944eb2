#!/usr/bin/env bash
# make newcomer: README.md's and docs/try.md's command blocks, verbatim, as a
# new user runs them as root on a fresh Debian 12 machine (CI is one; with no
# GPU the simulated GPU of make demo and make try stands in), so that a page
# that drifts from what works fails. Every fenced block of those pages has a
# marker on the line before it:
#   <!-- newcomer: run -->                           run it
#   <!-- newcomer: run; expect "TEXT"; expect ... -->  run it; its output
#                                                    holds each TEXT
#   <!-- newcomer: skip: REASON -->                  not run, for REASON
# A block without one fails, so that a new block is classified, not guessed.
# Blocks run in page order (README.md, then docs/try.md) from the repository
# root, each by bash -e -o pipefail under a timeout; each block and its output
# go to NEWCOMER_OUT (default build/newcomer). The daemons make try started
# (containerd, dockerd) are stopped at the end; images stay.
#   run.sh --list   checks the markers and lists the blocks, runs nothing
#   NEWCOMER_PAGES  the pages (default "README.md docs/try.md")
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${NEWCOMER_OUT:-$PWD/build/newcomer}
read -r -a pages <<< "${NEWCOMER_PAGES:-README.md docs/try.md}"
block_timeout=${NEWCOMER_BLOCK_TIMEOUT:-300}
list_only=0
[ "${1:-}" = --list ] && list_only=1

rm -rf "$OUT" && mkdir -p "$OUT"
# Each page's blocks as OUT/NN.sh (the lines between the fences), NN.expect
# (one expected text a line), NN.where (PAGE:LINE) and, when skipped,
# NN.skip (the reason).
n=0
for page in "${pages[@]}"; do
  n=$(awk -v page="$page" -v out="$OUT" -v n="$n" '
    function fail(msg) { print page ":" NR ": " msg > "/dev/stderr"; bad = 1; exit 1 }
    /^[ \t]*```/ {
      if (!inblock) {
        if (prev !~ /^<!-- newcomer: .*-->$/)
          fail("a command block with no marker on the line before it: <!-- newcomer: run --> or <!-- newcomer: skip: REASON --> (test/newcomer/run.sh)")
        n++; base = sprintf("%s/%02d", out, n); inblock = 1
        printf "" > (base ".sh")
        print page ":" NR > (base ".where")
        m = prev
        if (m ~ /^<!-- newcomer: skip/) {
          sub(/^<!-- newcomer: skip:? */, "", m); sub(/ *-->$/, "", m)
          if (m == "") fail("<!-- newcomer: skip --> needs a reason: <!-- newcomer: skip: REASON -->")
          print m > (base ".skip")
        } else {
          printf "" > (base ".expect")
          rest = m
          if (!sub(/^<!-- newcomer: run/, "", rest)) fail("newcomer marker not understood: " m)
          sub(/ *-->$/, "", rest)
          while (match(rest, /^; expect "[^"]+"/)) {
            e = substr(rest, RSTART, RLENGTH); rest = substr(rest, RLENGTH + 1)
            sub(/^; expect "/, "", e); sub(/"$/, "", e)
            print e > (base ".expect")
          }
          if (rest != "") fail("newcomer marker not understood at: " rest)
        }
        prev = $0; next
      }
      inblock = 0; prev = $0; next
    }
    inblock { print > (base ".sh") }
    { prev = $0 }
    END { if (bad) exit 1; if (inblock) fail("a command block that is not closed"); print n }
  ' "$page")
done

for f in "$OUT"/*.where; do
  b=${f%.where}
  if [ -e "$b.skip" ]; then
    echo "skip $(cat "$f"): $(cat "$b.skip")"
  else
    echo "run  $(cat "$f")$( [ -s "$b.expect" ] && printf ', expecting %s' "$(paste -sd '|' "$b.expect")")"
  fi
done
[ "$list_only" = 0 ] || exit 0

[ "$(id -u)" = 0 ] || { echo "newcomer: run as root, as the pages say" >&2; exit 1; }
# As a new user's shell after the README's set-up (whose export of PATH is
# in a block not run here), with nothing of an outer make or test run.
export PATH=/usr/local/go/bin:$PATH
unset BUILD TRY_DIR TRY_IMPORT TRY_START TRY_IMAGE VGPU_CONFIG VGPU_BUILD MAKEFLAGS MFLAGS MAKELEVEL

# The daemons started without arguments (make try's way without systemd)
# that were not running before: stopped at the end, dockerd first.
plain_daemons() { ps -eo pid=,args= | awk '$2 == "dockerd" && NF == 2 { print $1 } $2 == "containerd" && NF == 2 { print $1 }'; }
before=$(plain_daemons | tr '\n' ' ')
stop_started() {
  local pid
  for name in dockerd containerd; do
    for pid in $(ps -eo pid=,args= | awk -v n="$name" '$2 == n && NF == 2 { print $1 }'); do
      case " $before " in *" $pid "*) continue ;; esac
      kill "$pid" 2>/dev/null || continue
      for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    done
  done
}
trap stop_started EXIT

# Where root cannot raise its open-files limit (no CAP_SYS_RESOURCE: some
# sandboxes and containers, CI's machine among them), podman's default
# ulimits fail every container, vgpu or not (docs/try.md says so and what to
# set); podman gets a containers.conf of its own with none, as test/e2e's.
hard=$(ulimit -Hn)
if [ "$hard" != unlimited ] && [ "$hard" -lt 1048576 ] && ! (ulimit -Hn $((hard + 1))) 2>/dev/null; then
  printf '[containers]\ndefault_ulimits = []\n' > "$OUT/containers.conf"
  export CONTAINERS_CONF=$OUT/containers.conf
  echo "newcomer: root cannot raise RLIMIT_NOFILE here; podman runs with $CONTAINERS_CONF (default_ulimits = [])"
fi

failed=0
for f in "$OUT"/*.where; do
  b=${f%.where}
  [ -e "$b.skip" ] && continue
  where=$(cat "$f")
  echo "== $where"
  start=$SECONDS
  rc=0
  timeout -k 10 "$block_timeout" bash -e -o pipefail "$b.sh" > "$b.log" 2>&1 || rc=$?
  if [ "$rc" != 0 ]; then
    echo "newcomer: $where failed (exit status $rc$( [ "$rc" = 124 ] && echo ": timed out"), in $((SECONDS - start)) s); the block:" >&2
    sed 's/^/  /' "$b.sh" >&2
    echo "its output ($b.log), last lines:" >&2
    tail -n 30 "$b.log" | sed 's/^/  /' >&2
    failed=1
    break
  fi
  while IFS= read -r want; do
    if ! grep -qF -- "$want" "$b.log"; then
      echo "newcomer: $where ran, but its output lacks \"$want\", which the page's marker says it shows ($b.log):" >&2
      tail -n 30 "$b.log" | sed 's/^/  /' >&2
      failed=1
    fi
  done < "$b.expect"
  [ "$failed" = 0 ] || break
  echo "   ok ($((SECONDS - start)) s)"
done
[ "$failed" = 0 ] && echo "newcomer: every run block of ${pages[*]} passed"
exit "$failed"
