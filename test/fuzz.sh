#!/usr/bin/env bash
# make fuzz: every fuzz target of the module (go test -fuzz), FUZZTIME each
# (default 10s); `make test` runs only their seeds. FUZZ narrows by a regexp
# on "package FuzzName". A failure leaves the input under the package's
# testdata/fuzz/, where the next `make test` runs it as a seed.
# Go before 1.27 can fail a duration-bounded run with "context deadline
# exceeded" as the time runs out, with no failing input (golang/go#75804):
# such a run is reported and not counted as a failure.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
GO=${GO:-go}
export VGPU_BUILD=${VGPU_BUILD:-$PWD/build}
# The integration tier's fuzz targets too (they need the build, as make fuzz has).
TAGS=${FUZZ_TAGS:-integration}
failed=()
for pkg in $("$GO" list -tags "$TAGS" ./...); do
  dir=$("$GO" list -f '{{.Dir}}' "$pkg")
  for fz in $("$GO" test -tags "$TAGS" -list '^Fuzz' "$pkg" | grep '^Fuzz'); do
    [[ "$pkg $fz" =~ ${FUZZ:-.} ]] || continue
    echo "== $pkg $fz"
    before=$(ls "$dir/testdata/fuzz/$fz" 2>/dev/null | wc -l)
    out=$("$GO" test -tags "$TAGS" -run '^$' -fuzz "^$fz\$" -fuzztime "${FUZZTIME:-10s}" "$pkg" 2>&1)
    rc=$?
    echo "$out" | tail -3
    after=$(ls "$dir/testdata/fuzz/$fz" 2>/dev/null | wc -l)
    if [ $rc -ne 0 ] && [ "$after" = "$before" ] && grep -q 'context deadline exceeded' <<<"$out"; then
      echo "   (no failing input: the fuzz coordinator's end-of-time race, golang/go#75804)"
    elif [ $rc -ne 0 ]; then
      echo "$out"
      failed+=("$pkg $fz")
    fi
  done
done
if [ ${#failed[@]} -gt 0 ]; then
  printf 'make fuzz: failed: %s\n' "${failed[@]}" >&2
  exit 1
fi
