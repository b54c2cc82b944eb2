#!/bin/sh
# build.sh: build (once, then cached) the real Kubernetes and containerd
# binaries the end-to-end tests run, from the tools module in ./tools:
#   kube                    multicall: kubelet, kube-apiserver, kube-scheduler,
#                           kube-controller-manager v1.37.2 and etcd v3.7.3 (embedded)
#   kubelet, kube-apiserver, kube-scheduler, kube-controller-manager, etcd
#                           symlinks to kube
#   containerd, containerd-shim-runc-v2, ctr   containerd v2.4.2
# The cache directory is keyed by the tools module's go.mod, go.sum, sources,
# this script and the Go version, so a changed pin rebuilds and nothing stale
# is reused. Prints the directory holding the binaries as its last line.
# Environment: VGPU_K8S_CACHE (default $HOME/.cache/vgpu-k8s).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
tools=$here/tools
cache=${VGPU_K8S_CACHE:-${HOME:-/root}/.cache/vgpu-k8s}
key=$( (cat "$tools/go.mod" "$tools/go.sum" "$tools"/kube/*.go "$0"; go version) | sha256sum | cut -c1-16)
out=$cache/$key
if [ -x "$out/kube" ] && [ -L "$out/etcd" ] && [ -x "$out/containerd" ] && [ -x "$out/containerd-shim-runc-v2" ] && [ -x "$out/ctr" ]; then
	echo "k8s tools: cached in $out" >&2
	echo "$out"
	exit 0
fi
mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "k8s tools: building kubelet, kube-apiserver, kube-scheduler, kube-controller-manager v1.37.2 and etcd v3.7.3 (multicall kube) and containerd v2.4.2 (containerd, containerd-shim-runc-v2, ctr) into $out; a cold build compiles about 2500 packages (tens of minutes on 2 cores)" >&2
start=$(date +%s)
# CGO off: static binaries as upstream releases them; no_btrfs/no_devmapper/no_zfs
# leave out containerd snapshotters that need C headers or kernel modules.
cd "$tools"
CGO_ENABLED=0 GOFLAGS=-mod=mod go build -v -trimpath -ldflags='-s -w' \
	-tags 'no_btrfs no_devmapper no_zfs urfave_cli_no_docs' -o "$tmp/" \
	./kube \
	github.com/containerd/containerd/v2/cmd/containerd \
	github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
	github.com/containerd/containerd/v2/cmd/ctr 2>&1 |
	awk -v start="$start" '/^(go: |#|[^ ]*\.go:|ERROR|error)/ {print; fflush(); next}
		{n++; if (n % 100 == 0) {printf "k8s tools: %d packages compiled, now %s\n", n, $0; fflush()}}
		END {printf "k8s tools: %d packages compiled\n", n}' >&2
for b in kube containerd containerd-shim-runc-v2 ctr; do
	[ -x "$tmp/$b" ] || { echo "k8s tools: build failed ($b missing)" >&2; exit 1; }
done
for c in kubelet kube-apiserver kube-scheduler kube-controller-manager etcd; do
	ln -s kube "$tmp/$c"
done
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
echo "k8s tools: built in $(( $(date +%s) - start )) s: $(ls "$out" | tr '\n' ' ')" >&2
echo "$out"
