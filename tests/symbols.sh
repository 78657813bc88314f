#!/bin/sh
# SPDX-License-Identifier: MIT
# symbols: libodpx defines no global symbol outside the odpx_ namespace.
#
# A static link of libodpx.a into an application or another library must not
# collide with its names: the archive is one relocatable object whose hidden
# symbols are local (configure.py), so nm lists the public API only.  The
# shared library exports what lib/odpx.map names, checked with nm -D; its
# version nodes (ODPX_0.1, absolute symbols) are the map's own names.
# TEST_BUILDDIR: the build directory (default build, beside tests/).
here=$(cd "$(dirname "$0")" && pwd)
b=${TEST_BUILDDIR:-$here/../build}
fail=0

for f in "$b/libodpx.a" "$b/libodpx.so"; do
	if [ ! -f "$f" ]; then
		echo "FAIL: $f is not built"
		exit 1
	fi
done
if ! command -v nm >/dev/null 2>&1; then
	echo "FAIL: nm (binutils) not found, yet the library was built with it"
	exit 1
fi

# $1: what; stdin: nm lines "[value] type name"; prints and counts the strays
check() {
	awk -v what="$1" '
		NF >= 2 { name = $NF; type = $(NF - 1) }
		type == "A" && name ~ /^ODPX_[0-9.]+$/ { next }	# a version node
		name ~ /^odpx_/ { n++; next }
		{ printf "FAIL: %s defines global %s (%s)\n", what, name, type; bad++ }
		END { printf "%s: %d odpx_ globals, %d others\n", what, n, bad; exit bad > 0 }'
}

nm -g --defined-only "$b/libodpx.a" | grep -v -e '^$' -e ':$' | check "nm libodpx.a" || fail=1
nm -g --defined-only "$b/libodpx.so" | check "nm libodpx.so" || fail=1
nm -D --defined-only "$b/libodpx.so" | check "nm -D libodpx.so" || fail=1
# the public API is there at all: a check that lists nothing proves nothing
nm -g --defined-only "$b/libodpx.a" | grep -q ' T odpx_reg$' || { echo "FAIL: libodpx.a lacks odpx_reg"; fail=1; }
nm -D --defined-only "$b/libodpx.so" | grep -q ' T odpx_reg@@ODPX_0.1$' || { echo "FAIL: libodpx.so lacks odpx_reg@@ODPX_0.1"; fail=1; }
exit $fail
