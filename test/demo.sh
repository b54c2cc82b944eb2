#!/usr/bin/env bash
# make demo: run one busybox container under vgpu-runtime (with the real runc)
# on the simulated GPU (build/simgpu/root), or on the host's GPU when
# /dev/nvidiactl exists and VGPU_DEMO_SIM is not set. Shows what the container
# sees: the quota file, its device nodes, nvidia-smi. Root required.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-$PWD/build}
[ "$(id -u)" = 0 ] || { echo "demo: run as root (it starts runc)" >&2; exit 1; }
for p in runc busybox; do command -v $p >/dev/null || { echo "demo: $p missing (apt-get install runc busybox-static)" >&2; exit 1; }; done

work=$(mktemp -d /tmp/vgpu-demo-XXXXXX)
cleanup() { runc --root "$work/runc" delete --force demo >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT

if [ -e /dev/nvidiactl ] && [ -z "${VGPU_DEMO_SIM:-}" ]; then
  driver_root=/; dev_root=/; ipc=""
  echo "== real GPU (/dev/nvidiactl present; VGPU_DEMO_SIM=1 for the simulator)"
else
  driver_root="$BUILD/simgpu/root"; dev_root="$driver_root"; ipc='"run/simgpu"'
  [ -d "$driver_root" ] || { echo "demo: $driver_root missing (make build builds the simulated GPU)" >&2; exit 1; }
  echo "== simulated GPU in $driver_root"
fi

cat > "$work/config.toml" <<TOML
state_dir = "$work/state"
runtimes = ["runc"]
[driver]
root = "$driver_root"
dev_root = "$dev_root"
ipc_paths = [$ipc]
[library]
dir = "$BUILD/lib"
TOML
export VGPU_CONFIG="$work/config.toml"

rootfs="$work/bundle/rootfs"
mkdir -p "$rootfs"/{bin,dev,proc,sys,etc,tmp,run,usr/bin,usr/lib,lib64,lib/x86_64-linux-gnu}
cp "$(command -v busybox)" "$rootfs/bin/busybox"
for a in sh ls cat echo head; do ln -s busybox "$rootfs/bin/$a"; done
# glibc, so that dynamically linked programs (nvidia-smi, the CUDA client) run.
cp -L /lib64/ld-linux-x86-64.so.2 "$rootfs/lib64/"
for l in libc.so.6 libdl.so.2 libpthread.so.0 librt.so.1 libm.so.6; do
  cp -L "/lib/x86_64-linux-gnu/$l" "$rootfs/lib/x86_64-linux-gnu/"
done
# A CUDA client that reaches the driver as cudart 12/13 does (cuGetProcAddress_v2
# only) and fills the GPU with 256 MiB allocations.
gcc -O2 -DROUTE_PROCADDR -Ilib/cudahook/include -o "$rootfs/usr/bin/cuda-fill" lib/cudahook/testdata/client.c -ldl -lpthread
runc spec --bundle "$work/bundle"
# Not a terminal; our command; a GPU request: GPU 0, 2 GiB.
sed -i -e 's/"terminal": true/"terminal": false/' \
  -e 's|"sh"$|"sh", "-c", "echo --- /run/vgpu/quota; cat /run/vgpu/quota; echo --- /dev/nvidia*; ls -l /dev/nvidia*; echo --- nvidia-smi; nvidia-smi; echo --- cuda-fill: cuMemAlloc_v2 256 MiB at a time until it fails, free, again  err 2 = CUDA_ERROR_OUT_OF_MEMORY; cuda-fill fill alloc 256"|' \
  -e 's|"TERM=xterm"|"TERM=xterm", "VGPU_VISIBLE_DEVICES=0", "VGPU_MEMORY_LIMIT=2Gi"|' \
  "$work/bundle/config.json"

echo "== vgpu-runtime --root $work/runc run -b $work/bundle demo   (VGPU_VISIBLE_DEVICES=0 VGPU_MEMORY_LIMIT=2Gi)"
"$BUILD/bin/vgpu-runtime" --root "$work/runc" run -b "$work/bundle" demo
