#!/usr/bin/env bash
# make try: vgpu on this host without a GPU, with docker and podman, on the
# simulated GPU (docs/try.md). Writes TRY_DIR (default build/try):
#   config.toml    the vgpu configuration: the simulated GPU as driver root and
#                  dev root (one 16 GiB device), its run/simgpu as ipc path,
#                  the stand-ins of this build, a state directory of its own
#   vgpu-runtime   vgpu-runtime with VGPU_CONFIG set to that file (engines
#                  give a runtime no environment of its own)
#   image.tar      a glibc root filesystem with nvidia-smi's libraries and two
#                  CUDA clients (test/rootfs.sh), imported into docker and
#                  podman as vgpu-try when they answer (TRY_IMPORT=0: not)
# then prints the commands to run. It changes no engine configuration.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-$PWD/build}
TRY=${TRY_DIR:-$BUILD/try}
IMAGE=${TRY_IMAGE:-vgpu-try}
[ "$(id -u)" = 0 ] || { echo "try: run as root (engines run containers as root here)" >&2; exit 1; }
command -v busybox >/dev/null || { echo "try: busybox missing (apt-get install busybox-static)" >&2; exit 1; }
sim="$BUILD/simgpu/root"
[ -e "$sim/.stamp" ] || { echo "try: $sim missing (make build builds the simulated GPU)" >&2; exit 1; }

mkdir -p "$TRY"
TRY=$(cd "$TRY" && pwd)
cat > "$TRY/config.toml.tmp" <<TOML
# vgpu on the simulated GPU (make try); see docs/try.md.
state_dir = "$TRY/state"
runtimes = ["runc"]
[driver]
root = "$sim"
dev_root = "$sim"
ipc_paths = ["run/simgpu"]
[library]
dir = "$BUILD/lib"
TOML
mv "$TRY/config.toml.tmp" "$TRY/config.toml"
printf '#!/bin/sh\n# vgpu-runtime on the simulated GPU (make try)\nVGPU_CONFIG=%s exec %s "$@"\n' "$TRY/config.toml" "$BUILD/bin/vgpu-runtime" > "$TRY/vgpu-runtime.tmp"
chmod 0755 "$TRY/vgpu-runtime.tmp" && mv "$TRY/vgpu-runtime.tmp" "$TRY/vgpu-runtime"

rootfs=$(mktemp -d /tmp/vgpu-try-rootfs-XXXXXX)
trap 'rm -rf "$rootfs"' EXIT
BUILD=$BUILD test/rootfs.sh "$rootfs"
tar -C "$rootfs" -cf "$TRY/image.tar.tmp" . && mv "$TRY/image.tar.tmp" "$TRY/image.tar"

docker_note=""
if [ "${TRY_IMPORT:-1}" != 0 ]; then
  if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
    docker import "$TRY/image.tar" "$IMAGE" >/dev/null && echo "imported $IMAGE into docker"
  else
    # Said, not skipped in silence: the docker commands below need both.
    docker_note="  dockerd is not answering, so $IMAGE is not in docker yet: start it
  (systemctl start docker), then run make try again.
"
    echo "try: dockerd is not answering; $IMAGE was not imported into docker (start it: systemctl start docker; then make try again)" >&2
  fi
  if command -v podman >/dev/null; then
    podman import "$TRY/image.tar" "$IMAGE" >/dev/null && echo "imported $IMAGE into podman"
  fi
fi

req="-e VGPU_VISIBLE_DEVICES=0 -e VGPU_MEMORY_LIMIT=2Gi"
cat <<EOF2
wrote $TRY/config.toml, $TRY/vgpu-runtime and $TRY/image.tar

docker (adds the runtime "vgpu" to /etc/docker/daemon.json; --remove takes it out):
${docker_note}  $BUILD/bin/vgpu setup docker --runtime-path $TRY/vgpu-runtime && kill -HUP \$(pidof dockerd)
  docker run --rm --runtime=vgpu $req $IMAGE nvidia-smi
  docker run --rm --runtime=vgpu $req $IMAGE cuda-fill fill alloc 256

podman (the runtime by path, no configuration change):
  podman --runtime $TRY/vgpu-runtime run --rm $req $IMAGE nvidia-smi
  podman --runtime $TRY/vgpu-runtime run --rm $req -e VGPU_COMPUTE_LIMIT=25 $IMAGE cuda-fill fill alloc 256

on the host:
  VGPU_CONFIG=$TRY/config.toml $BUILD/bin/vgpu status
EOF2
