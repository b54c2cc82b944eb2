#!/usr/bin/env bash
# The whole product on a real NVIDIA machine (issue: a runc container started
# through vgpu-runtime, PyTorch inside held to its limits). Run as root from
# the repository root with the built binaries:
#   BIN=dir/with/vgpu-runtime+runc LIBDIR=dir/with/libvgpu-*.so test/gpu/e2e.sh [all|memory|compute]
# The container's root filesystem is this machine's own / (bind-mounted,
# read-only), so python3 and PyTorch are there; vgpu-runtime injects the
# device nodes, the driver libraries and the library. Driver root "/" (the
# driver's files may live in /usr/local/nvidia/lib64: lib_dirs covers it).
set -uo pipefail
REPO=$(pwd)
BIN=${BIN:-$REPO/build/bin}
LIBDIR=${LIBDIR:-$REPO/build/lib}
WHAT=${1:-all}
# DRIVER_ROOT / IPC_PATHS: another driver root (the simulated GPU: build/simgpu/root, '"run/simgpu"').
SECS=${SECS:-12}
W=$(mktemp -d /tmp/vgpu-gpu-e2e-XXXXXX)
export PATH=$BIN:$PATH
echo "== $(date -u +%FT%TZ) $(uname -r); runc: $(runc --version | head -1)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

# / with its submounts (/usr/local/nvidia, /opt …), minus the ones runc makes itself.
mkdir -p $W/rootfs && mount --rbind / $W/rootfs && mount --make-rprivate $W/rootfs || { echo "cannot bind / : $?"; exit 1; }
for m in proc sys dev tmp run; do umount -R -l $W/rootfs/$m 2>/dev/null; done
# runc creates the mount targets (/etc/ld.so.preload, /run/vgpu/…, /usr/lib/vgpu/…) in
# the rootfs, which is this machine's own /: take back those that were not there.
created=()
for t in etc/ld.so.preload run/vgpu usr/lib/vgpu; do [ -e "$W/rootfs/$t" ] || created+=("$W/rootfs/$t"); done
cleanup() {
  for c in $(runc --root $W/runc list -q 2>/dev/null); do runc --root $W/runc delete -f $c; done
  for t in "${created[@]}"; do rm -rf "$t"; done
  umount -R -l $W/rootfs 2>/dev/null; rm -rf $W
}
trap cleanup EXIT
cat > $W/config.toml <<TOML
state_dir = "$W/state"
runtimes = ["$BIN/runc"]
[driver]
root = "${DRIVER_ROOT:-/}"
dev_root = "${DRIVER_ROOT:-/}"
ipc_paths = [${IPC_PATHS:-}]
[library]
dir = "$LIBDIR"
TOML
export VGPU_CONFIG=$W/config.toml
PY=$(command -v python3)

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
# ctr NAME ENV... -- ARGS...: run it in the foreground through vgpu-runtime.
ctr() { local name=$1; bundle "$@"; echo "\$ vgpu-runtime run $name  [$(grep -o '"VGPU_[A-Z_]*=[^"]*"' $W/$name/config.json | tr '\n' ' ')]"; vgpu-runtime --root $W/runc run -b $W/$name $name 2>&1; echo "[exit $?]"; }

if [ "$WHAT" = all ] || [ "$WHAT" = memory ]; then
  echo "== no request: the container is unchanged and sees no GPU"
  ctr plain -- sh -c 'ls /dev/nvidia* 2>&1; python3 -c "import torch; print(\"cuda available:\", torch.cuda.is_available())" 2>&1 | tail -1; cat /run/vgpu/quota 2>&1'
  echo "== VGPU_MEMORY_LIMIT=8Gi"
  ctr mem VGPU_VISIBLE_DEVICES=0 VGPU_MEMORY_LIMIT=8Gi -- sh -c 'cat /run/vgpu/quota; ls /dev/nvidia*; nvidia-smi --query-gpu=memory.total,memory.used --format=csv; python3 test/gpu/torch_mem.py'
fi
if [ "$WHAT" = all ] || [ "$WHAT" = compute ]; then
  echo "== bf16 matmul: unlimited vGPU, then VGPU_COMPUTE_LIMIT=50 (interleaved, 3 rounds)"
  for r in $(seq ${ROUNDS:-3}); do
    ctr full$r VGPU_VISIBLE_DEVICES=0 -- python3 bench/gpu/matmul.py $SECS
    ctr half$r VGPU_VISIBLE_DEVICES=0 VGPU_MEMORY_LIMIT=8Gi VGPU_COMPUTE_LIMIT=50 -- python3 bench/gpu/matmul.py $SECS
  done
  echo "== two containers at once: 30 and 70"
  bundle c30 VGPU_VISIBLE_DEVICES=0 VGPU_MEMORY_LIMIT=4Gi VGPU_COMPUTE_LIMIT=30 -- sh -c "python3 bench/gpu/matmul.py $SECS; python3 -c 'import torch; print(\"c30 mem_get_info total GiB\", torch.cuda.mem_get_info()[1]/2**30)'"
  bundle c70 VGPU_VISIBLE_DEVICES=0 VGPU_MEMORY_LIMIT=12Gi VGPU_COMPUTE_LIMIT=70 -- sh -c "python3 bench/gpu/matmul.py $SECS; python3 -c 'import torch; print(\"c70 mem_get_info total GiB\", torch.cuda.mem_get_info()[1]/2**30)'"
  vgpu-runtime --root $W/runc run -b $W/c30 c30 > $W/c30.out 2>&1 &
  vgpu-runtime --root $W/runc run -b $W/c70 c70 > $W/c70.out 2>&1 &
  wait
  sed 's/^/c30: /' $W/c30.out; sed 's/^/c70: /' $W/c70.out
fi
