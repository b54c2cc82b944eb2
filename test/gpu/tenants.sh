#!/usr/bin/env bash
# A tenant sees only its own processes, on a real GPU: two tenants on one GPU, each tenant's
# nvidia-smi lists only its own process, with its real usage, under the PID
# the host's map gives it. Run from the repository root after `make c-build`:
#   LIBDIR=build/lib test/gpu/tenants.sh
# Prints PASS/FAIL lines; exit status = number of FAILs.
set -uo pipefail
LIBDIR=${LIBDIR:-build/lib}
D=${DRIVER_DIR:-$(dirname "$(ldconfig -p | awk '/libcuda.so.1 .*x86-64/ {print $NF; exit}')")}
CUDA=$(readlink -f "$D/libcuda.so.1"); NVML=$(readlink -f "$D/libnvidia-ml.so.1")
UUID=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i 0)
W=$(mktemp -d); fails=0
check() { if eval "$2"; then echo "PASS $1"; else echo "FAIL $1"; fails=$((fails+1)); fi; }
tenant() { # NAME: <W>/NAME/{quota,shared,host}
    mkdir -p $W/$1/shared $W/$1/host
    printf 'vgpu-quota 1\ndriver-cuda %s\ndriver-nvml %s\nshared-dir %s\ndevice 0 %s memory=%d\n' \
        "$CUDA" "$NVML" "$W/$1/shared" "$UUID" $((4 << 30)) > $W/$1/quota
}
under() { local t=$1; shift; env VGPU_QUOTA_FILE=$W/$t/quota LD_PRELOAD=$LIBDIR/libvgpu-cuda.so:$LIBDIR/libvgpu-nvml.so "$@"; }
hold() { # TENANT MIB: a process holding MIB MiB until killed; prints its pid
    # exec: $! is then the python process itself, not a subshell around it
    (exec env VGPU_QUOTA_FILE=$W/$1/quota LD_PRELOAD=$LIBDIR/libvgpu-cuda.so:$LIBDIR/libvgpu-nvml.so \
        python3 -c "import torch,time; x=torch.empty($2<<20, dtype=torch.uint8, device='cuda'); print('held', flush=True); time.sleep(600)") > $W/$1.out 2>&1 &
    echo $!
}
tenant a; tenant b
A=$(hold a 512); B=$(hold b 1024)
for _ in $(seq 60); do grep -q held $W/a.out && grep -q held $W/b.out && break; sleep 1; done
echo "tenant a: pid $A (512 MiB), tenant b: pid $B (1024 MiB)"
echo "== a, host PID namespace, no map"; under a nvidia-smi | tee $W/1.txt
check "a sees its own pid $A" "grep -q ' $A ' $W/1.txt"
check "a does not see b's pid $B" "! grep -q ' $B ' $W/1.txt"
echo "== a, in a PID namespace, no map"; under a unshare --pid --fork nvidia-smi | tee $W/2.txt
check "a in a PID namespace without a map sees nobody" "! grep -qE ' ($A|$B) ' $W/2.txt && grep -q 'No running processes' $W/2.txt"
printf '%d 7\n' $A > $W/a/host/.p && mv $W/a/host/.p $W/a/host/pids
printf '%d 7\n' $B > $W/b/host/.p && mv $W/b/host/.p $W/b/host/pids
echo "== a, in a PID namespace, map $A -> 7"; under a unshare --pid --fork nvidia-smi | tee $W/3.txt
check "a sees pid 7, not $A nor $B" "grep -qE '^\|.* 7 .*MiB' $W/3.txt && ! grep -qE ' ($A|$B) ' $W/3.txt"
echo "== b, in a PID namespace, map $B -> 7"; under b unshare --pid --fork nvidia-smi | tee $W/4.txt
check "b sees pid 7 with about 1 GiB" "grep -qE '^\|.* 7 .* (1[0-9]{3})MiB' $W/4.txt"
check "a's pid 7 row is not b's 1 GiB" "! grep -qE '^\|.* 7 .* (1[0-9]{3})MiB' $W/3.txt"
kill $A $B 2>/dev/null; wait 2>/dev/null; rm -rf $W
exit $fails
