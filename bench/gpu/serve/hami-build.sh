#!/usr/bin/env bash
# Build HAMi-core's libvgpu.so from its source tree: hami-build.sh SRC DEST
# (writes DEST/libvgpu.so and DEST/build.log). Configured as HAMi-core's own
# build.sh does (a Debug build: its dlsym route reopens the library and needs
# its wrappers exported, which the Release flags hide), the library alone
# (its tests need FindCUDA, gone from new CMake). With CMake when there is
# one; else, or when CMake fails, the same sources and flags by hand.
# HAMI_BUILD=gcc forces the second way.
set -uo pipefail
SRC=${1:?usage: hami-build.sh SRC DEST}
DST=${2:?usage: hami-build.sh SRC DEST}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
[ -f "$SRC/src/libvgpu.c" ] || { echo "hami-build: '$SRC' is not a HAMi-core source tree (no src/libvgpu.c)" >&2; exit 2; }
mkdir -p "$DST" || exit 2
DST=$(cd "$DST" && pwd)
LOG=$DST/build.log
: > "$LOG"
# -lcuda links against the toolkit's stub where the driver's unversioned
# libcuda.so is not on the linker's path; the library loads the real one.
export LIBRARY_PATH=$CUDA_HOME/lib64/stubs:$CUDA_HOME/lib64:/usr/local/nvidia/lib64${LIBRARY_PATH:+:$LIBRARY_PATH}
OPTS=(-DDLSYM_HOOK_ENABLE=1 -DMULTIPROCESS_LIMIT_ENABLE=1 -DHOOK_MEMINFO_ENABLE=1 -DHOOK_NVML_ENABLE=1)

with_cmake() {
  command -v cmake > /dev/null || { echo "hami-build: no cmake here" >> "$LOG"; return 1; }
  local b=$DST/cmake
  rm -rf "$b"; mkdir -p "$b"
  echo "hami-build: $(cmake --version | head -1)" >> "$LOG"
  # CMake 4 refuses its cmake_minimum_required(2.8.11) without the policy floor
  (cd "$b" && cmake "$SRC" "${OPTS[@]}" -DCMAKE_BUILD_TYPE=Debug -DTEST_DEVICE_ID=0 -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
     && make -j"$(nproc)" vgpu) >> "$LOG" 2>&1 || return 1
  cp "$b/libvgpu.so" "$DST/libvgpu.so"
}

with_gcc() {
  local c=$DST/gcc
  rm -rf "$c"; mkdir -p "$c/config"
  { for o in "${OPTS[@]}"; do o=${o#-D}; echo "#define ${o%=1}"; done
    echo "extern size_t GIT_HASH_unknown;"; echo "extern size_t GIT_BRANCH_unknown;"; } > "$c/config/static_config.h"
  local s=$SRC/src
  echo "hami-build: gcc $(gcc -dumpversion)" >> "$LOG"
  gcc -shared -fPIC -g -D_GNU_SOURCE -Wall -I"$CUDA_HOME/include" -I"$s" -I"$c/config" -o "$c/libvgpu.so" \
    "$s/libvgpu.c" "$s/utils.c" "$s/log_utils.c" "$s/nvml/nvml_entry.c" "$s/nvml/hook.c" \
    "$s"/cuda/{context,device,hook,event,memory,stream,graph}.c "$s/allocator/allocator.c" \
    "$s/multiprocess/multiprocess_memory_limit.c" "$s/multiprocess/multiprocess_utilization_watcher.c" \
    -lcuda -lnvidia-ml -lpthread -lrt >> "$LOG" 2>&1 || return 1
  cp "$c/libvgpu.so" "$DST/libvgpu.so"
}

rm -f "$DST/libvgpu.so"
if [ "${HAMI_BUILD:-}" != gcc ] && with_cmake; then
  how=cmake
elif with_gcc; then
  how=gcc
else
  tail -20 "$LOG" >&2
  echo "hami-build: FAILED (log: $LOG)" >&2
  exit 1
fi
# its wrappers must be exported, or the dlsym route limits nothing
if ! command -v nm > /dev/null; then
  echo "hami-build: no nm here: not checked that its wrappers are exported" >&2
elif [[ " $(nm -D --defined-only "$DST/libvgpu.so" | awk '{print $NF}' | tr '\n' ' ') " != *" cuMemAlloc_v2 "* ]]; then
  echo "hami-build: $DST/libvgpu.so does not export cuMemAlloc_v2: its dlsym route would limit nothing" >&2
  exit 1
fi
echo "hami-build: $DST/libvgpu.so built with $how"
