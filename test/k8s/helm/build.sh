#!/bin/sh
# build.sh: build (once, then cached) the Helm CLI v4.3.2 the chart's tests
# and the Kubernetes end-to-end test run, from the module beside this script
# (a module of its own: Helm brings the k8s.io modules at v0.36.2, the vgpu
# module and test/k8s/tools use v0.37.2).
# The cache directory is keyed by go.mod, go.sum, this script and the Go
# version. Prints the directory holding `helm` as its last line.
# Environment: VGPU_HELM_CACHE (default $HOME/.cache/vgpu-helm).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cache=${VGPU_HELM_CACHE:-${HOME:-/root}/.cache/vgpu-helm}
key=$( (cat "$here/go.mod" "$here/go.sum" "$0"; go version) | sha256sum | cut -c1-16)
out=$cache/$key
if [ -x "$out/helm" ]; then
	echo "helm: cached in $out" >&2
	echo "$out"
	exit 0
fi
mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "helm: building helm v4.3.2 into $out (a cold build compiles about 670 packages)" >&2
start=$(date +%s)
cd "$here"
CGO_ENABLED=0 GOFLAGS=-mod=mod go build -v -trimpath -ldflags='-s -w' -o "$tmp/helm" helm.sh/helm/v4/cmd/helm 2>&1 |
	awk '/^(go: |#|[^ ]*\.go:|ERROR|error)/ {print; fflush(); next}
		{n++; if (n % 100 == 0) {printf "helm: %d packages compiled, now %s\n", n, $0; fflush()}}
		END {printf "helm: %d packages compiled\n", n}' >&2
[ -x "$tmp/helm" ] || { echo "helm: build failed" >&2; exit 1; }
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
echo "helm: built in $(( $(date +%s) - start )) s" >&2
echo "$out"
