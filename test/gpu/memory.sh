#!/usr/bin/env bash
# Memory limits on a real GPU (docs/gpu-validation.md). Run from the
# repository root on an NVIDIA machine, with the built vgpu and library:
#   VGPU=build/bin/vgpu LIBDIR=build/lib test/gpu/memory.sh
set -uo pipefail
VGPU=${VGPU:-build/bin/vgpu}
LIBDIR=${LIBDIR:-build/lib}
WORK=$(mktemp -d)
run() { echo "\$ $*"; "$@" 2>&1; echo "[exit $?]"; }
export PYTHONUNBUFFERED=1
echo "== $(date -u +%FT%TZ) $(uname -r)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
nvcc --version | tail -2
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
echo "== ABI: our headers against CUDA's"
gcc -DREAL -I/usr/local/cuda/include test/gpu/abi_check.c -o $WORK/abi_real && $WORK/abi_real > $WORK/abi_real.txt
gcc -Ilib/cudahook/include test/gpu/abi_check.c -o $WORK/abi_ours && $WORK/abi_ours > $WORK/abi_ours.txt
diff $WORK/abi_real.txt $WORK/abi_ours.txt && echo ABI-MATCH
echo "== nvidia-smi, native and under an 8 GiB limit"
run nvidia-smi --query-gpu=memory.total,memory.used,memory.free --format=csv
run $VGPU exec --lib-dir $LIBDIR --memory-limit 8Gi -- nvidia-smi --query-gpu=memory.total,memory.used,memory.free --format=csv
run $VGPU exec --lib-dir $LIBDIR --memory-limit 8Gi -- nvidia-smi
echo "== PyTorch under 8 GiB"
run $VGPU exec --lib-dir $LIBDIR --memory-limit 8Gi -- python3 test/gpu/torch_mem.py
echo "== PyTorch under 8 GiB, expandable segments"
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True run $VGPU exec --lib-dir $LIBDIR --memory-limit 8Gi -- python3 test/gpu/torch_mem.py
echo "== CUDA C, nvcc default (static cudart), under 8 GiB"
nvcc -O2 -o $WORK/memlimit test/gpu/memlimit.cu
run $VGPU exec --lib-dir $LIBDIR --memory-limit 8Gi -- $WORK/memlimit
echo "== fail closed: a corrupt quota file"
printf 'vgpu-quota 1\ndevice zero\n' > $WORK/bad-quota
run env VGPU_QUOTA_FILE=$WORK/bad-quota LD_PRELOAD=$LIBDIR/libvgpu-cuda.so:$LIBDIR/libvgpu-nvml.so python3 -c "import torch; print(torch.cuda.is_available()); torch.zeros(1, device='cuda')"
run env VGPU_QUOTA_FILE=$WORK/bad-quota LD_PRELOAD=$LIBDIR/libvgpu-cuda.so:$LIBDIR/libvgpu-nvml.so nvidia-smi
echo "== no quota at all"
run env -u VGPU_QUOTA_FILE LD_PRELOAD=$LIBDIR/libvgpu-cuda.so:$LIBDIR/libvgpu-nvml.so $WORK/memlimit
