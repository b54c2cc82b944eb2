#!/usr/bin/env bash
# Several GPUs in one container on a real machine with two or more NVIDIA GPUs:
# per-device limits, device selection, memory on the right physical GPU, NCCL
# and DDP across two limited GPUs, peer copies, vgpu node on two GPUs. Run as
# root from the repository root after `make build` (BIN also holds runc):
#   BIN=build/bin LIBDIR=build/lib test/gpu/multigpu.sh [all|exec|runc|compute|dist|peer|node]...
# exec: `vgpu exec --devices 1 --memory-limit 8Gi` (no container); the rest:
# containers through vgpu-runtime + runc over this machine's own / (read-only),
# as test/gpu/e2e.sh does, so python3 and PyTorch are there.
# compute: VGPU_COMPUTE_LIMIT=0=30,1=70, spin kernels (bench/gpu/spin.cu, nvcc)
#   busy on both GPUs at once, each counting its own device time; ROUNDS, SECS.
# dist: NCCL all-reduce bus bandwidth at 256 MiB and DDP steps a second, one
#   process a GPU, native and in a limited container, interleaved ROUNDS times.
# peer: cudaDeviceEnablePeerAccess, cudaMemcpyPeer, PyTorch copies, native and limited.
# node: vgpu node; a bypass on GPU 1 is killed, the same container's GPU 0
#   work and a neighbour on GPU 0 are left alone.
# Prints PASS/FAIL lines and a summary; exits 1 if a check failed.
set -uo pipefail
REPO=$(pwd)
BIN=${BIN:-$REPO/build/bin}
LIBDIR=${LIBDIR:-$REPO/build/lib}
WHAT=" ${*:-all} "
ROUNDS=${ROUNDS:-3} SECS=${SECS:-8} DDP_STEPS=${DDP_STEPS:-300}
W=$(mktemp -d /tmp/vgpu-gpu-multi-XXXXXX)
export PATH=$BIN:$PATH PYTHONUNBUFFERED=1
# vgpu-runtime (no cgo) lists the GPUs with vgpu-discover from its own directory.
[ -x "$BIN/vgpu-discover" ] || { echo "$0: no vgpu-discover in $BIN (make build puts it beside vgpu-runtime)" >&2; exit 1; }
T=test/gpu/torch_multigpu.py
# NVLink multicast (NVLS, symmetric memory) stays off on the test machines:
# NCCL, PyTorch and NVSHMEM must not try it.
NCCL_ENV="NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1"

pass=0 fail=0
# check WHAT TEST...: TEST is evaluated (a [ ] expression)
check() { local what=$1; shift; if ( eval "$*" ); then echo "PASS $what"; pass=$((pass + 1)); else echo "FAIL $what   [$*]"; fail=$((fail + 1)); fi; }
# val KEY FILE: the value of the first KEY=… line
val() { grep -m1 "^$1=" "$2" | cut -d= -f2-; }
# between X LO HI
between() { [ -n "$1" ] && [ "$1" -ge "$2" ] && [ "$1" -le "$3" ]; }
used() { nvidia-smi -i "$1" --query-gpu=memory.used --format=csv,noheader,nounits | tr -d ' '; }
lc() { tr 'A-Z' 'a-z'; }

echo "== $(date -u +%FT%TZ) $(uname -r)"
nvidia-smi --query-gpu=index,name,uuid,memory.total,memory.used --format=csv
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version())"
if [ "$(nvidia-smi -L | grep -c '^GPU ')" -lt 2 ]; then echo "need two GPUs"; exit 2; fi
U0=$(nvidia-smi -i 0 --query-gpu=uuid --format=csv,noheader)
U1=$(nvidia-smi -i 1 --query-gpu=uuid --format=csv,noheader)
# shellcheck disable=SC2034 # used inside the check strings, which are eval'd
u0=$(echo "$U0" | lc) u1=$(echo "$U1" | lc)

# held NAME RELEASE -- CMD...: runs CMD (which holds 4 GiB on its one GPU, prints
# held=1 and waits for the file RELEASE) in the background; while it holds,
# nvidia-smi on the host must show the memory on GPU 1 and not on GPU 0.
held() {
  local name=$1 rel=$2 out=$W/$1.out b0 b1 h0 h1 pid; shift 3
  b0=$(used 0) b1=$(used 1)
  "$@" >"$out" 2>&1 &
  pid=$!
  for _ in $(seq 900); do grep -q '^held=1' "$out" && break; kill -0 $pid 2>/dev/null || break; sleep 0.2; done
  h0=$(used 0) h1=$(used 1)
  nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv >"$W/$name.apps"
  touch "$rel"
  wait $pid
  cat "$out" "$W/$name.apps"
  echo "host memory.used MiB while held: GPU 0 $b0 -> $h0, GPU 1 $b1 -> $h1"
  check "$name: holds 4 GiB of an 8 GiB device" '[ "$(val held_mib $out)" = 4096 ] && [ "$(val held_total_mib $out)" = 8192 ]'
  check "$name: the memory is on host GPU 1 (+$((h1 - b1)) MiB)" "[ $((h1 - b1)) -ge 4096 ]"
  check "$name: host GPU 0 untouched (+$((h0 - b0)) MiB)" "[ $((h0 - b0)) -lt 256 ]"
}

# one NAME FILE: the output of `info; fill` in a process limited to host GPU 1, 8 GiB
one() {
  local n=$1 f=$2
  check "$n: PyTorch sees one device" '[ "$(val count $f)" = 1 ]'
  check "$n: of 8 GiB (mem_get_info, properties)" '[ "$(val meminfo_total_mib0 $f)" = 8192 ] && [ "$(val props_total_mib0 $f)" = 8192 ]'
  check "$n: it is host GPU 1" '[ "$(val uuid0 $f)" = "$u1" ] || [ "$(val uuid0 $f)" = unknown ]'
  check "$n: fills to the limit, minus the context" 'between "$(val fill_mib0 $f)" 7168 8192 && [ "$(val fill_error0 $f)" = OutOfMemoryError ]'
}

want() { case "$WHAT" in *" all "*|*" $1 "*) return 0 ;; esac; return 1; }
# median of the numbers given
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {if (NR) print (NR % 2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
# ge A B: A >= B (decimals)
ge() { awk -v a="$1" -v b="$2" 'BEGIN {exit !(a != "" && a+0 >= b+0)}'; }

if want exec; then
  X="vgpu exec --lib-dir $LIBDIR"
  echo "== vgpu exec --devices 1 --memory-limit 8Gi"
  timeout -k 5 120 $X --devices 1 --memory-limit 8Gi -- python3 $T info fill >$W/exec-one.out 2>&1
  cat $W/exec-one.out
  one exec-one $W/exec-one.out
  timeout -k 5 60 $X --devices 1 --memory-limit 8Gi -- nvidia-smi --query-gpu=uuid,memory.total --format=csv,noheader >$W/exec-smi.out 2>&1
  cat $W/exec-smi.out
  check "exec: nvidia-smi shows host GPU 1 only, 8192 MiB" '[ "$(grep ^GPU- $W/exec-smi.out)" = "$U1, 8192 MiB" ]'
  held exec-hold $W/exec-release -- timeout -k 5 150 $X --devices 1 --memory-limit 8Gi -- python3 $T hold 4 $W/exec-release
fi

if want runc || want compute || want dist || want peer || want node; then
  [ "$(id -u)" = 0 ] || { echo "runc part: run as root"; exit 2; }
  . test/gpu/hostroot.sh
  hostroot_setup
  echo "runc: $(runc --version | head -1)"
  # ctr NAME ENV... -- ARGS...: run it in the foreground (CTR_TIMEOUT s at most); output in $W/NAME.out
  ctr() { local name=$1; bundle "$@"; timeout -k 5 ${CTR_TIMEOUT:-180} vgpu-runtime --root $W/runc run -b $W/$name $name >$W/$name.out 2>&1; echo "[exit $?]" >>$W/$name.out; echo "\$ $name"; cat $W/$name.out; hostroot_tidy; }
else
  trap 'rm -rf $W' EXIT
fi

if want runc; then
  echo "== runc: VGPU_VISIBLE_DEVICES=1 VGPU_MEMORY_LIMIT=8Gi"
  ctr one VGPU_VISIBLE_DEVICES=1 VGPU_MEMORY_LIMIT=8Gi -- sh -c \
    "echo devs=\$(ls /dev/nvidia[0-9]*); nvidia-smi --query-gpu=uuid,memory.total --format=csv,noheader | sed 's/^/smi=/'; python3 $T info fill"
  f=$W/one.out
  one runc-one $f
  check "runc-one: only /dev/nvidia1" '[ "$(val devs $f)" = /dev/nvidia1 ]'
  check "runc-one: nvidia-smi shows host GPU 1 only, 8192 MiB" '[ "$(grep -c ^smi= $f)" = 1 ] && [ "$(val smi $f)" = "$U1, 8192 MiB" ]'
  bundle hold VGPU_VISIBLE_DEVICES=1 VGPU_MEMORY_LIMIT=8Gi -- python3 $T hold 4 /run/vgpu/shared/release
  # /run/vgpu/shared inside is <state_dir>/<id>/shared on the host
  held runc-hold $W/state/hold/shared/release -- timeout -k 5 150 vgpu-runtime --root $W/runc run -b $W/hold hold
  hostroot_tidy

  echo "== runc: VGPU_VISIBLE_DEVICES=0,1 VGPU_MEMORY_LIMIT=0=4Gi,1=12Gi"
  ctr two VGPU_VISIBLE_DEVICES=0,1 VGPU_MEMORY_LIMIT=0=4Gi,1=12Gi -- sh -c \
    "cat /run/vgpu/quota; nvidia-smi --query-gpu=uuid,memory.total --format=csv,noheader | sed 's/^/smi=/'; python3 $T info fill;
     CUDA_VISIBLE_DEVICES=1,0 python3 $T info fill | sed 's/^/cvd10_/'; CUDA_VISIBLE_DEVICES=1 python3 $T info | sed 's/^/cvd1_/';
     CUDA_VISIBLE_DEVICES=$U1,$U0 python3 $T info | sed 's/^/cvdu10_/'; CUDA_VISIBLE_DEVICES=$U0 python3 $T info | sed 's/^/cvdu0_/'"
  f=$W/two.out
  check "runc-two: nvidia-smi shows GPU 0 with 4096 MiB, then GPU 1 with 12288 MiB" \
    '[ "$(grep ^smi= $f | tr "\n" "|")" = "smi=$U0, 4096 MiB|smi=$U1, 12288 MiB|" ]'
  check "runc-two: PyTorch sees two devices" '[ "$(val count $f)" = 2 ]'
  check "runc-two: 4 GiB and 12 GiB" '[ "$(val meminfo_total_mib0 $f)" = 4096 ] && [ "$(val meminfo_total_mib1 $f)" = 12288 ]'
  check "runc-two: device 0 is host GPU 0, device 1 host GPU 1" '{ [ "$(val uuid0 $f)" = "$u0" ] && [ "$(val uuid1 $f)" = "$u1" ]; } || [ "$(val uuid0 $f)" = unknown ]'
  check "runc-two: each fills to its own limit" 'between "$(val fill_mib0 $f)" 3072 4096 && between "$(val fill_mib1 $f)" 11264 12288'
  check "runc-two: CUDA_VISIBLE_DEVICES=1,0 inside: 12 GiB first, then 4 GiB" '[ "$(val cvd10_meminfo_total_mib0 $f)" = 12288 ] && [ "$(val cvd10_meminfo_total_mib1 $f)" = 4096 ]'
  check "runc-two: CUDA_VISIBLE_DEVICES=1,0 inside: each fills to its own limit" 'between "$(val cvd10_fill_mib0 $f)" 11264 12288 && between "$(val cvd10_fill_mib1 $f)" 3072 4096'
  check "runc-two: CUDA_VISIBLE_DEVICES=1 inside: one device of 12 GiB" '[ "$(val cvd1_count $f)" = 1 ] && [ "$(val cvd1_meminfo_total_mib0 $f)" = 12288 ]'
  check "runc-two: CUDA_VISIBLE_DEVICES=UUID1,UUID0 inside: 12 GiB, then 4 GiB" '[ "$(val cvdu10_count $f)" = 2 ] && [ "$(val cvdu10_meminfo_total_mib0 $f)" = 12288 ] && [ "$(val cvdu10_meminfo_total_mib1 $f)" = 4096 ]'
  check "runc-two: CUDA_VISIBLE_DEVICES=UUID0 inside: one device of 4 GiB" '[ "$(val cvdu0_count $f)" = 1 ] && [ "$(val cvdu0_meminfo_total_mib0 $f)" = 4096 ]'
fi

if want compute; then
  echo "== runc: VGPU_COMPUTE_LIMIT=0=30,1=70, spin kernels on both GPUs at once ($ROUNDS rounds x $SECS s)"
  # under the repository, which the container sees (its /tmp is its own)
  SPIN=$REPO/build/vgpu-spin
  mkdir -p $REPO/build && nvcc -O2 -arch=native -o $SPIN bench/gpu/spin.cu || { echo "FAIL compute: nvcc"; fail=$((fail + 1)); }
  a0=() a1=()
  for r in $(seq $ROUNDS); do
    at=$(( $(date +%s) + 8 )) # both time the same window, after their warm-ups
    ctr cmp$r VGPU_VISIBLE_DEVICES=0,1 VGPU_COMPUTE_LIMIT=0=30,1=70 LOOP_AT=$at -- sh -c \
      "grep ^device /run/vgpu/quota; SPIN_DEVICE=0 $SPIN busy $SECS > /tmp/s0 2>&1 & SPIN_DEVICE=1 $SPIN busy $SECS > /tmp/s1 2>&1; wait; sed 's/^/d0_/' /tmp/s0; sed 's/^/d1_/' /tmp/s1" | sed "s/^/cmp$r: /"
    a0+=("$(sed -n 's/^d0_active_pct //p' $W/cmp$r.out)") a1+=("$(sed -n 's/^d1_active_pct //p' $W/cmp$r.out)")
  done
  m0=$(median "${a0[@]}") m1=$(median "${a1[@]}")
  echo "device time % of GPU 0 (limit 30): ${a0[*]} (median $m0); GPU 1 (limit 70): ${a1[*]} (median $m1)"
  check "compute: GPU 0 held at 30 (median $m0, within 3 points)" 'ge "$m0" 27 && ! ge "$m0" 33.0001'
  check "compute: GPU 1 held at 70 (median $m1, within 3 points)" 'ge "$m1" 67 && ! ge "$m1" 73.0001'
  check "compute: every round within 5 points of its limit" '[ "$(echo ${a0[@]} ${a1[@]} | wc -w)" = $((2 * ROUNDS)) ] && for v in ${a0[@]}; do ge $v 25 && ! ge $v 35 || exit 1; done; for v in ${a1[@]}; do ge $v 65 && ! ge $v 75 || exit 1; done'
  rm -f $SPIN
fi

if want dist; then
  LIM="0=6Gi,1=12Gi"
  echo "== NCCL all-reduce (256 MiB) and DDP ($DDP_STEPS steps), native and VGPU_MEMORY_LIMIT=$LIM, interleaved ($ROUNDS rounds)"
  bw_n=() bw_l=() st_n=() st_l=()
  for r in $(seq $ROUNDS); do
    timeout -k 5 180 env $NCCL_ENV DDP_STEPS=$DDP_STEPS python3 $T dist > $W/dn$r.out 2>&1; echo "[exit $?]" >> $W/dn$r.out
    sed "s/^/native $r: /" $W/dn$r.out | grep -v "^native $r: env_"
    ctr dl$r VGPU_VISIBLE_DEVICES=0,1 VGPU_MEMORY_LIMIT=$LIM $NCCL_ENV NCCL_SOCKET_IFNAME=lo DDP_STEPS=$DDP_STEPS -- python3 $T dist > /dev/null
    sed "s/^/limited $r: /" $W/dl$r.out
    bw_n+=("$(val busbw_gbs0 $W/dn$r.out)") bw_l+=("$(val busbw_gbs0 $W/dl$r.out)")
    st_n+=("$(val ddp_steps_per_s0 $W/dn$r.out)") st_l+=("$(val ddp_steps_per_s0 $W/dl$r.out)")
  done
  mbn=$(median "${bw_n[@]}") mbl=$(median "${bw_l[@]}") msn=$(median "${st_n[@]}") msl=$(median "${st_l[@]}")
  rb=$(awk -v a="$mbl" -v b="$mbn" 'BEGIN {if (b > 0) printf "%.3f", a / b}') rs=$(awk -v a="$msl" -v b="$msn" 'BEGIN {if (b > 0) printf "%.3f", a / b}')
  echo "all-reduce bus GB/s native: ${bw_n[*]} (median $mbn); limited: ${bw_l[*]} (median $mbl); ratio $rb"
  echo "DDP steps/s native: ${st_n[*]} (median $msn); limited: ${st_l[*]} (median $msl); ratio $rs"
  f=$W/dl1.out
  echo "NCCL MiB (used beyond PyTorch's pool) native: GPU 0 $(val nccl_mib0 $W/dn1.out), GPU 1 $(val nccl_mib1 $W/dn1.out); limited (the library's count): $(val nccl_mib0 $f), $(val nccl_mib1 $f)"
  check "dist: every run finished, sums right" 'for g in $W/dn*.out $W/dl*.out; do [ "$(val dist_done $g)" = 1 ] && [ "$(val allreduce_ok0 $g)" = 1 ] && [ "$(val allreduce_ok1 $g)" = 1 ] || exit 1; done'
  check "dist: NCCL_NVLS_ENABLE=0 inside" '[ "$(val env_NCCL_NVLS_ENABLE $f)" = 0 ]'
  check "dist: ranks see 6 and 12 GiB" '[ "$(val ddp_total_mib0 $f)" = 6144 ] && [ "$(val ddp_total_mib1 $f)" = 12288 ]'
  check "dist: all-reduce bus bandwidth >= 95 % of native (ratio $rb)" 'ge "$rb" 0.95'
  check "dist: DDP throughput >= 90 % of native (ratio $rs)" 'ge "$rs" 0.90'
  check "dist: NCCL's buffers counted on each device (>= 90 % of what they take natively)" \
    'for d in 0 1; do n=$(val nccl_mib$d $W/dn1.out); l=$(val nccl_mib$d $f); ge "$n" 1 && ge "$l" $(awk -v n=$n "BEGIN {print 0.9 * n}") || exit 1; done'
fi

if want peer; then
  echo "== peer access and copies, native and VGPU_MEMORY_LIMIT=0=4Gi,1=12Gi"
  timeout -k 5 120 python3 $T peer > $W/pn.out 2>&1; echo "[exit $?]" >> $W/pn.out; sed 's/^/native: /' $W/pn.out
  ctr pl VGPU_VISIBLE_DEVICES=0,1 VGPU_MEMORY_LIMIT=0=4Gi,1=12Gi -- python3 $T peer > /dev/null; sed 's/^/limited: /' $W/pl.out
  f=$W/pl.out
  check "peer: the devices can reach each other, as natively" '[ "$(val peer_can01 $f)" = "$(val peer_can01 $W/pn.out)" ] && [ "$(val peer_can10 $f)" = "$(val peer_can10 $W/pn.out)" ]'
  check "peer: cudaDeviceEnablePeerAccess as natively ($(val peer_enable_rc $f))" '[ "$(val peer_enable_rc $f)" = "$(val peer_enable_rc $W/pn.out)" ]'
  check "peer: cudaMemcpyPeer succeeds, the bytes arrive" '[ "$(val peer_memcpy_rc $f)" = 0 ] && [ "$(val peer_memcpy_ok $f)" = 1 ]'
  check "peer: PyTorch copies both ways" '[ "$(val peer_copy_ok $f)" = 1 ]'
  check "peer: copies change neither device's count (+$(val peer_used_delta_mib0 $f), +$(val peer_used_delta_mib1 $f) MiB)" \
    'for d in 0 1; do v=$(val peer_used_delta_mib$d $f); ge "$v" -64 && ! ge "$v" 64.0001 || exit 1; done'
  check "peer: copy bandwidth >= 90 % of native ($(val peer_gbs01 $f) vs $(val peer_gbs01 $W/pn.out) GB/s)" \
    'ge "$(val peer_gbs01 $f)" $(awk -v n=$(val peer_gbs01 $W/pn.out) "BEGIN {print 0.9 * n}")'
fi

if want node; then
  echo "== vgpu node on two GPUs: a bypass on GPU 1; the same container on GPU 0 and a neighbour on GPU 0 untouched"
  mkdir -p $REPO/build && gcc -O2 -o $REPO/build/vgpu-attack test/e2e/attack/attack.c -ldl || { echo "FAIL node: gcc"; fail=$((fail + 1)); }
  vgpu-node --state-dir $W/state --listen 127.0.0.1:9412 > $W/node.log 2>&1 &
  NODE=$!
  for _ in $(seq 100); do [ -e $W/state/.node/node.json ] && break; sleep 0.1; done
  # the neighbour holds 2 GiB of its 4 on GPU 0 until the tenant is done
  bundle nb VGPU_VISIBLE_DEVICES=0 VGPU_MEMORY_LIMIT=4Gi -- python3 $T hold 2 /run/vgpu/shared/release
  timeout -k 5 200 vgpu-runtime --root $W/runc run -b $W/nb nb > $W/nb.out 2>&1 &
  NB=$!
  for _ in $(seq 600); do grep -q '^held=1' $W/nb.out && break; sleep 0.2; done
  # the tenant: 2 GiB held on GPU 0 (honest) while a bypass on GPU 1 (the real
  # driver by path) takes 16 GiB past its 2 GiB there
  bundle tn VGPU_VISIBLE_DEVICES=0,1 VGPU_MEMORY_LIMIT=0=4Gi,1=2Gi -- sh -c \
    "python3 $T hold 2 /tmp/release > /tmp/h 2>&1 & H=\$!; while ! grep -q held= /tmp/h; do sleep 0.2; done
     CUDA_VISIBLE_DEVICES=1 $REPO/build/vgpu-attack driver 16384 2048 < /dev/zero > /tmp/a 2>&1; echo attacker exit \$?; cat /tmp/a
     touch /tmp/release; wait \$H; echo holder exit \$?; cat /tmp/h"
  timeout -k 5 90 vgpu-runtime --root $W/runc run -b $W/tn tn > $W/tn.out 2>&1; echo "[exit $?]" >> $W/tn.out; sed 's/^/tenant: /' $W/tn.out
  touch $W/state/nb/shared/release; wait $NB; echo "[exit $?]" >> $W/nb.out; sed 's/^/neighbour: /' $W/nb.out
  hostroot_tidy
  sleep 1; kill $NODE; wait $NODE 2>/dev/null
  ev=$W/state/.node/events.jsonl
  echo "events:"; cat $ev 2>/dev/null
  check "node: the bypass on GPU 1 killed (exit 137)" 'grep -q "attacker exit 137" $W/tn.out'
  check "node: the kill names GPU 1 and the tenant" 'grep "\"kind\":\"kill\"" $ev | grep "\"tn\"" | grep -qi "$U1"'
  check "node: the tenant's GPU 0 work ran on (holder exit 0, held)" 'grep -q "holder exit 0" $W/tn.out && grep -q "^held=1" $W/tn.out'
  check "node: one kill, no event on GPU 0" '[ "$(grep -c "\"kind\":\"kill\"" $ev)" = 1 ] && ! grep -qi "$U0" $ev'
  check "node: the neighbour on GPU 0 untouched (exit 0, no event)" 'grep -q "^\[exit 0\]" $W/nb.out && grep -q "^held=1" $W/nb.out && ! grep -q "\"nb\"" $ev'
fi

echo "== multigpu: $pass passed, $fail failed"
[ $fail = 0 ]
