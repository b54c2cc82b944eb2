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
#   image-archive.tar  the same as an image archive for ctr image import
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
# The same as an image archive (docker save's format, one layer), which
# ctr image import takes; image.tar itself is a root filesystem only.
arch=$(mktemp -d /tmp/vgpu-try-archive-XXXXXX)
trap 'rm -rf "$rootfs" "$arch"' EXIT
cp "$TRY/image.tar" "$arch/layer.tar"
diff_id=$(sha256sum "$arch/layer.tar" | cut -d' ' -f1)
printf '{"architecture":"amd64","os":"linux","config":{"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}\n' "$diff_id" > "$arch/config.json"
printf '[{"Config":"config.json","RepoTags":["%s:latest"],"Layers":["layer.tar"]}]\n' "$IMAGE" > "$arch/manifest.json"
tar -C "$arch" -cf "$TRY/image-archive.tar.tmp" manifest.json config.json layer.tar && mv "$TRY/image-archive.tar.tmp" "$TRY/image-archive.tar"

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
wrote $TRY/config.toml, $TRY/vgpu-runtime, $TRY/image.tar and $TRY/image-archive.tar

docker (adds the runtime "vgpu" to /etc/docker/daemon.json; --remove takes it out):
${docker_note}  $BUILD/bin/vgpu setup docker --runtime-path $TRY/vgpu-runtime && kill -HUP \$(pidof dockerd)
  docker run --rm --runtime=vgpu $req $IMAGE nvidia-smi
  docker run --rm --runtime=vgpu $req $IMAGE cuda-fill fill alloc 256

podman (the runtime by path, no configuration change):
  podman --runtime $TRY/vgpu-runtime run --rm $req $IMAGE nvidia-smi
  podman --runtime $TRY/vgpu-runtime run --rm $req $IMAGE cuda-fill fill alloc 256
  podman --runtime $TRY/vgpu-runtime run --rm $req -e VGPU_COMPUTE_LIMIT=25 $IMAGE busy-share

containerd (ctr, the runtime by path, no configuration change):
  ctr image import $TRY/image-archive.tar
  ctr run --rm --runc-binary $TRY/vgpu-runtime --env VGPU_VISIBLE_DEVICES=0 --env VGPU_MEMORY_LIMIT=2Gi docker.io/library/$IMAGE:latest try1 nvidia-smi

on the host:
  VGPU_CONFIG=$TRY/config.toml $BUILD/bin/vgpu status
EOF2
