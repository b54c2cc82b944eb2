#!/bin/sh
# update-syms.sh DRIVER_LIB_DIR: rewrites symbols/libcuda.syms and
# symbols/libnvidia-ml.syms from a real driver's exported functions, so that
# the stand-ins export every name the driver does (a name missing from the
# stand-in is a name dlsym on a libcuda handle cannot find: PyTorch asserts).
set -eu
dir=$1
here=$(dirname "$0")
for lib in libcuda libnvidia-ml; do
	so=$(ls "$dir"/$lib.so.[0-9]*.* 2>/dev/null | head -1)
	[ -n "$so" ] || { echo "update-syms.sh: no $lib.so.<version> in $dir" >&2; exit 1; }
	{
		echo "# exported functions of $(basename "$so") (nm -D --defined-only, T/W/i), by lib/cudahook/update-syms.sh"
		nm -D --defined-only "$so" | awk '$2 ~ /^[TWi]$/ {print $3}' | sed 's/@.*//' | LC_ALL=C sort -u
	} >"$here/symbols/$lib.syms"
	echo "$here/symbols/$lib.syms: $(($(wc -l <"$here/symbols/$lib.syms") - 1)) functions from $so"
done
