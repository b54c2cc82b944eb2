# shellcheck shell=bash
# Sourced by test/gpu/e2e.sh and test/gpu/multigpu.sh: runc containers through
# vgpu-runtime whose root filesystem is this machine's own / (read-only), so
# python3 and PyTorch are there. Needs W (work dir), REPO, LIBDIR; runc and
# vgpu-runtime on PATH. DRIVER_ROOT / IPC_PATHS: another driver root (the
# simulated GPU: build/simgpu/root, '"run/simgpu"').

# hostroot_setup: the rootfs, its clean-up on exit, the config (VGPU_CONFIG).
hostroot_setup() {
  # / with its submounts (/usr/local/nvidia, /opt …), minus the ones runc makes itself.
  mkdir -p $W/rootfs && mount --rbind / $W/rootfs && mount --make-rprivate $W/rootfs || { echo "cannot bind / : $?"; exit 1; }
  for m in proc sys dev tmp run; do umount -R -l $W/rootfs/$m 2>/dev/null; done
  # runc creates the mount targets (/etc/ld.so.preload, /run/vgpu/…, /usr/lib/vgpu/…, driver tools) in
  # the rootfs, which is this machine's own /: take back those that were not there.
  created=()
  for t in etc/ld.so.preload run/vgpu usr/lib/vgpu usr/bin/nvidia-smi usr/bin/nvidia-debugdump; do [ -e "$W/rootfs/$t" ] || created+=("$W/rootfs/$t"); done
  trap hostroot_cleanup EXIT
  cat > $W/config.toml <<TOML
state_dir = "$W/state"
[driver]
root = "${DRIVER_ROOT:-/}"
dev_root = "${DRIVER_ROOT:-/}"
${IPC_PATHS:+ipc_paths = [$IPC_PATHS]}
[library]
dir = "$LIBDIR"
${PERIOD:+compute_period = \"$PERIOD\"}
TOML
  export VGPU_CONFIG=$W/config.toml
  PY=$(command -v python3)
}

# hostroot_tidy: take back the mount targets runc made in this machine's own
# / (an empty /run/vgpu/quota there makes a later vgpu exec refuse to run).
hostroot_tidy() {
  for t in "${created[@]}"; do rm -rf "$t"; done
}

hostroot_cleanup() {
  for c in $(runc --root $W/runc list -q 2>/dev/null); do runc --root $W/runc delete -f $c; done
  for t in "${created[@]}"; do rm -rf "$t"; done
  umount -R -l $W/rootfs 2>/dev/null; rm -rf $W
}

# bundle NAME ENV... -- ARGS...: a bundle over the host's / (read-only).
bundle() {
  local name=$1; shift; local envs=() ; while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  mkdir -p $W/$name && (cd $W/$name && runc spec)
  python3 - "$W/$name/config.json" "$W/rootfs" "$REPO" "$(dirname $PY):/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" "${envs[*]}" "$@" <<'PY'
import json, sys
p, rootfs, repo, path, envs, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6:]
s = json.load(open(p))
s["root"] = {"path": rootfs, "readonly": True}
s["process"]["terminal"] = False
s["process"]["args"] = args
s["process"]["cwd"] = repo
s["process"]["env"] = ["PATH=" + path, "HOME=/tmp", "PYTHONUNBUFFERED=1"] + [e for e in envs.split() if e]
s["mounts"].append({"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=1777"]})
s["mounts"] = [m for m in s["mounts"] if m["destination"] != "/dev/shm"] + [{"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["nosuid", "nodev", "size=8g"]}]
json.dump(s, open(p, "w"), indent=1)
PY
}
