#!/bin/sh
# update-syms.sh DRIVER_LIB_DIR: rewrites symbols/libcuda.syms and
# symbols/libnvidia-ml.syms from a real driver's exported functions, so that
# the stand-ins export every name the driver does (a name missing from the
# stand-in is a name dlsym on a libcuda handle cannot find: PyTorch asserts).
#
# update-syms.sh --header NVML_H: rewrites symbols/libnvidia-ml.header.syms
# with the functions NVML_H declares (the newest nvml.h the project reaches:
# go-nvml's, in the Go module cache), so that the stand-in also exports the
# names of drivers newer than the one its list was taken from, as far as
# that header knows them. A name the running driver lacks answers
# NVML_ERROR_FUNCTION_NOT_FOUND.
set -eu
here=$(dirname "$0")
if [ "${1:-}" = --header ]; then
	h=$2
	{
		echo "# functions nvml.h declares (DECLDIR), beyond a driver's export list: $h, by lib/cudahook/update-syms.sh --header"
		grep -oE 'DECLDIR +nvml[A-Za-z0-9_]+' "$h" | awk '{print $2}' | LC_ALL=C sort -u
	} >"$here/symbols/libnvidia-ml.header.syms"
	echo "$here/symbols/libnvidia-ml.header.syms: $(($(wc -l <"$here/symbols/libnvidia-ml.header.syms") - 1)) functions from $h"
	exit 0
fi
dir=$1
for lib in libcuda libnvidia-ml; do
	so=$(ls "$dir"/$lib.so.[0-9]*.* 2>/dev/null | head -1)
	[ -n "$so" ] || { echo "update-syms.sh: no $lib.so.<version> in $dir" >&2; exit 1; }
	{
		echo "# exported functions of $(basename "$so") (nm -D --defined-only, T/W/i), by lib/cudahook/update-syms.sh"
		nm -D --defined-only "$so" | awk '$2 ~ /^[TWi]$/ {print $3}' | sed 's/@.*//' | LC_ALL=C sort -u
	} >"$here/symbols/$lib.syms"
	echo "$here/symbols/$lib.syms: $(($(wc -l <"$here/symbols/$lib.syms") - 1)) functions from $so"
done
