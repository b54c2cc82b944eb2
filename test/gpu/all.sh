#!/usr/bin/env bash
# One device session, everything in order of importance, each part's output
# under $OUT (docs/gpu-validation.md): refresh the export lists from this
# driver, build the library here, memory checks, compute shares, the runc
# end-to-end run, overhead. BIN: vgpu, vgpu-node, vgpu-runtime, vgpu-discover, runc built elsewhere.
set -uo pipefail
OUT=${OUT:-/tmp/vgpu-out}; mkdir -p $OUT
BIN=${BIN:?dir with vgpu, vgpu-node, vgpu-runtime, vgpu-discover, runc}
D=${DRIVER_DIR:-/usr/local/nvidia/lib64}
lib/cudahook/update-syms.sh $D && cp lib/cudahook/symbols/*.syms $OUT/
make c-build BUILD=/tmp/vgpu-build > $OUT/cbuild.log 2>&1 || { tail -30 $OUT/cbuild.log; exit 1; }
L=/tmp/vgpu-build/lib
export VGPU=$BIN/vgpu LIBDIR=$L
echo "#### memory";  test/gpu/memory.sh 2>&1 | tee $OUT/memory.txt
echo "#### e2e";     BIN=$BIN LIBDIR=$L SECS=${SECS:-8} ROUNDS=${ROUNDS:-2} test/gpu/e2e.sh ${E2E:-all} 2>&1 | tee $OUT/e2e.txt
echo "#### compute"; REPS=${CREPS:-2} SECS=${CSECS:-5} bench/gpu/compute.sh 2>&1 | tee $OUT/compute.txt
echo "#### dataloader"; test/gpu/dataloader.sh 2>&1 | tee $OUT/dataloader.txt
echo "#### overhead"; REPS=${OREPS:-3} bench/gpu/run.sh 2>&1 | tee $OUT/bench.txt
