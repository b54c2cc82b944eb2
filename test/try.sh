#!/usr/bin/env bash
# make try: vgpu on this host without a GPU, with docker and podman, on the
# simulated GPU (docs/try.md). Writes TRY_DIR (default build/try):
#   config.toml    the vgpu configuration: the simulated GPU as driver root and
#                  dev root (one 16 GiB device), its run/simgpu as ipc path,
#                  the stand-ins of this build, a state directory of its own
#   vgpu-runtime   vgpu-runtime with VGPU_CONFIG set to that file (engines
#                  give a runtime no environment of its own)
#   image.tar      a glibc root filesystem with nvidia-smi's libraries and the
#                  CUDA clients (test/rootfs.sh), imported into docker and
#                  podman as vgpu-try
#   image-archive.tar  the same as an image archive (internal/ociimage) for
#                  ctr image import
# starts containerd and dockerd when they are installed and not running
# (TRY_START=0: prints the command that starts them instead), then prints
# the commands to run, only those that can work on this host. It changes no
# engine configuration. TRY_IMPORT=0 touches no engine and prints every
# engine's commands (test/e2e runs them against engines of its own).
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
# The same as an image archive (docker save's format, one layer, made by
# go-containerregistry: internal/ociimage), which ctr images import takes;
# image.tar itself is a root filesystem only.
"${GO:-go}" run ./test/try/imagearchive "$TRY/image.tar" "$IMAGE:latest" "$TRY/image-archive.tar"

# The engines. TRY_IMPORT=0: none is touched and every engine's commands
# are printed (for a caller that runs its own engines, as test/e2e does).
# Otherwise an installed daemon that is not running is started (TRY_START=0:
# not; the command that starts it is printed instead), the image is imported
# into docker and podman, and only commands that can work now are printed.
# containerd before dockerd: dockerd uses the system's containerd when its
# socket is there.
if [ -d /run/systemd/system ]; then
  start_containerd="systemctl start containerd"
  start_dockerd="systemctl start docker"
else
  # No systemd (a container, a chroot, a CI root machine): in the
  # background, logging to /var/log.
  start_containerd="setsid containerd >/var/log/containerd.log 2>&1 </dev/null &"
  start_dockerd="setsid dockerd >/var/log/dockerd.log 2>&1 </dev/null &"
fi
containerd_up() { [ -S /run/containerd/containerd.sock ] && timeout 10 ctr version >/dev/null 2>&1; }
dockerd_up() { timeout 10 docker info >/dev/null 2>&1; }
# ready NAME CLIENT START: whether the daemon NAME answers its client,
# started with START when it does not.
ready() {
  command -v "$1" >/dev/null && command -v "$2" >/dev/null || return 1
  "$1_up" && return 0
  [ "${TRY_START:-1}" != 0 ] || return 1
  echo "try: $1 is not running; starting it: $3"
  eval "$3"
  for _ in $(seq 150); do "$1_up" && return 0; sleep 0.2; done
  echo "try: $1 did not answer within 30 s (systemctl status $1, or /var/log/$1.log)" >&2
  return 1
}
# absent NAME PACKAGE START: the line printed instead of an engine's commands.
absent() {
  if ! command -v "$1" >/dev/null; then
    echo "  $1 is not installed: apt-get install $2, then make try again"
  else
    echo "  $1 is not running: start it with"
    echo "    $3"
    echo "  then make try again"
  fi
}
all=${TRY_IMPORT:-1}
have_containerd=1 have_docker=1 have_podman=1 podman_note=""
if [ "$all" != 0 ]; then
  ready containerd ctr "$start_containerd" || have_containerd=0
  if ready dockerd docker "$start_dockerd"; then
    docker import "$TRY/image.tar" "$IMAGE" >/dev/null && echo "imported $IMAGE into docker"
  else
    have_docker=0
  fi
  if command -v podman >/dev/null; then
    podman import --quiet "$TRY/image.tar" "$IMAGE" >/dev/null && echo "imported $IMAGE into podman"
    # Where root cannot raise its open-files limit (no CAP_SYS_RESOURCE:
    # some sandboxes), podman's default ulimits fail every container.
    if ! probe=$(timeout 60 podman run --rm "$IMAGE" true 2>&1); then
      if grep -qi 'rlimit' <<< "$probe"; then
        podman_note="  podman cannot start any container on this host with its default ulimits
  (root cannot raise its open-files limit here): add default_ulimits = []
  under [containers] in /etc/containers/containers.conf first.
"
      else
        podman_note="  podman run fails on this host, vgpu aside: $(tail -n 1 <<< "$probe")
"
      fi
    fi
  else
    have_podman=0
  fi
fi

req="-e VGPU_VISIBLE_DEVICES=0 -e VGPU_MEMORY_LIMIT=2Gi"
echo "wrote $TRY/config.toml, $TRY/vgpu-runtime, $TRY/image.tar and $TRY/image-archive.tar"
echo
echo 'docker (adds the runtime "vgpu" to /etc/docker/daemon.json; --remove takes it out):'
if [ "$have_docker" = 1 ]; then
  cat <<EOF2
  $BUILD/bin/vgpu setup docker --runtime-path $TRY/vgpu-runtime && kill -HUP \$(pidof dockerd)
  docker run --rm --runtime=vgpu $req $IMAGE nvidia-smi
  docker run --rm --runtime=vgpu $req $IMAGE cuda-fill fill alloc 256
  docker run --rm --runtime=vgpu $req -e VGPU_COMPUTE_LIMIT=25 $IMAGE busy-share
EOF2
else
  absent dockerd docker.io "$start_dockerd"
fi
echo
echo 'podman (the runtime by path, no configuration change):'
if [ "$have_podman" = 1 ]; then
  printf '%s' "$podman_note"
  cat <<EOF2
  podman --runtime $TRY/vgpu-runtime run --rm $req $IMAGE nvidia-smi
  podman --runtime $TRY/vgpu-runtime run --rm $req $IMAGE cuda-fill fill alloc 256
  podman --runtime $TRY/vgpu-runtime run --rm $req -e VGPU_COMPUTE_LIMIT=25 $IMAGE busy-share
EOF2
else
  absent podman podman ""
fi
echo
echo 'containerd (ctr, the runtime by path, no configuration change):'
if [ "$have_containerd" = 1 ]; then
  cat <<EOF2
  ctr image import $TRY/image-archive.tar
  ctr run --rm --runc-binary $TRY/vgpu-runtime --env VGPU_VISIBLE_DEVICES=0 --env VGPU_MEMORY_LIMIT=2Gi docker.io/library/$IMAGE:latest try1 nvidia-smi
  ctr run --rm --runc-binary $TRY/vgpu-runtime --env VGPU_VISIBLE_DEVICES=0 --env VGPU_MEMORY_LIMIT=2Gi --env VGPU_COMPUTE_LIMIT=25 docker.io/library/$IMAGE:latest try2 busy-share
EOF2
else
  absent containerd containerd "$start_containerd"
fi
cat <<EOF2

on the host:
  VGPU_CONFIG=$TRY/config.toml $BUILD/bin/vgpu status
EOF2
