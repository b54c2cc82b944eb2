#!/usr/bin/env bash
# make demo: busybox containers under vgpu-runtime (with the real runc) on the
# simulated GPU (build/simgpu/root), or on the host's GPU when /dev/nvidiactl
# exists and VGPU_DEMO_SIM is not set. Shows what a limited container sees
# (quota file, device nodes, nvidia-smi), memory filled to the limit in MiB
# with the context's cost, a compute limit at work (simulated GPU: the
# device's busy share in a 2 s window, without a limit and at 25 %), and a
# refused request with its message. Root required.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-$PWD/build}
[ "$(id -u)" = 0 ] || { echo "demo: run as root (it starts runc)" >&2; exit 1; }
for p in runc busybox gcc; do command -v $p >/dev/null || { echo "demo: $p missing (apt-get install runc busybox-static gcc)" >&2; exit 1; }; done

work=$(mktemp -d /tmp/vgpu-demo-XXXXXX)
cleanup() {
  for id in demo demo-free demo-25 demo-bad; do runc --root "$work/runc" delete --force $id >/dev/null 2>&1 || true; done
  rm -rf "$work"
}
trap cleanup EXIT

sim=1
if [ -e /dev/nvidiactl ] && [ -z "${VGPU_DEMO_SIM:-}" ]; then
  driver_root=/; dev_root=/; ipc=""; sim=
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

rootfs="$work/rootfs"
BUILD=$BUILD test/rootfs.sh "$rootfs"

# container ID ENV SCRIPT: a bundle over the shared rootfs running SCRIPT (a
# file in the rootfs, so that no quoting reaches config.json) with the extra
# environment ENV (comma-separated), under vgpu-runtime.
container() {
  local id=$1 env=$2 b="$work/bundle-$1"
  mkdir -p "$b" "$rootfs/demo"
  printf '%s\n' "$3" > "$rootfs/demo/$id.sh"
  runc spec --bundle "$b"
  local envjson
  envjson=$(printf '"%s", ' ${env//,/ })
  sed -i -e 's/"terminal": true/"terminal": false/' -e 's/"readonly": true/"readonly": false/' \
    -e "s|\"path\": \"rootfs\"|\"path\": \"$rootfs\"|" \
    -e 's|"TERM=xterm"|'"${envjson}"'"TERM=xterm"|' -e 's|"sh"$|"sh", "/demo/'"$id"'.sh"|' "$b/config.json"
  "$BUILD/bin/vgpu-runtime" --root "$work/runc" run -b "$b" "$id"
}

echo "== vgpu-runtime run demo   (VGPU_VISIBLE_DEVICES=0 VGPU_MEMORY_LIMIT=2Gi)"
# cuda-fill prints bytes; awk says it in MiB.
container demo VGPU_VISIBLE_DEVICES=0,VGPU_MEMORY_LIMIT=2Gi "$(cat <<'SH'
echo --- /run/vgpu/quota; cat /run/vgpu/quota
echo --- /dev/nvidia*; ls -l /dev/nvidia*
echo --- nvidia-smi; nvidia-smi
echo --- cuda-fill: cuMemAlloc_v2 of 256 MiB until the driver refuses, free, again
cuda-fill fill alloc 256 > /tmp/fill
awk -F= '
  $1 ~ /^(before_(free|total)|first_bytes|freed_free|second_bytes)$/ { printf "%-16s %6d MiB\n", $1, $2 / 1048576 }
  $1 ~ /^(first|second)_err$/ { printf "%-16s %6s%s\n", $1, $2, ($2 == 2 ? "   (CUDA_ERROR_OUT_OF_MEMORY)" : "") }
  $1 == "before_free" { f = $2 } $1 == "before_total" { t = $2 }
  END { printf "the context took %d MiB of the %d MiB before any allocation: the limit counts it\n", (t - f) / 1048576, t / 1048576 }' /tmp/fill
SH
)"

if [ -n "$sim" ]; then
  echo "== a compute limit at work: 2 ms kernels for 2 s, the device's busy share"
  # compute reads its window once it is ready (its context made).
  share=$(cat <<'SH'
rm -f /tmp/w
: > /tmp/out
mkfifo /tmp/w
compute kernel < /tmp/w >> /tmp/out &
exec 3> /tmp/w
until grep -q ready /tmp/out 2>/dev/null; do sleep 0.05; done
mono 100 2000 >&3
exec 3>&-
wait
awk -F= '/^window_ns=/ { w = $2 } /^busy0_ns=/ { b = $2 } /^error=/ { print }
  END { if (w) printf "device busy %.1f %% of the window\n", 100 * b / w }' /tmp/out
SH
)
  printf '%-24s ' "no compute limit:"; container demo-free VGPU_VISIBLE_DEVICES=0 "$share"
  printf '%-24s ' "VGPU_COMPUTE_LIMIT=25:"; container demo-25 VGPU_VISIBLE_DEVICES=0,VGPU_COMPUTE_LIMIT=25 "$share"
else
  echo "== compute limit: shown on the simulated GPU (VGPU_DEMO_SIM=1); see docs/gpu-validation.md for the H200"
fi

echo "== a refused request: VGPU_MEMORY_LIMIT=lots"
if container demo-bad VGPU_VISIBLE_DEVICES=0,VGPU_MEMORY_LIMIT=lots true; then
  echo "demo: the bad request was not refused" >&2; exit 1
else
  echo "(vgpu-runtime exit status $?: the container was not created)"
fi
