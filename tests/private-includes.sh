#!/bin/sh
# SPDX-License-Identifier: MIT
# private-includes: tests and benchmarks see the library through lib/odpx.h
# and, for white-box checks, lib/odpx-private.h: never through the headers
# of its modules (lib/internal.h, index.h, cache.h, uffd/monitor.h,
# monitor_priv.h), whose structs and inline code change with the library.
# What a test needs of them is a door function in odpx-private.h.
#
# odpx-private.h includes uffd/monitor.h, the monitor's interface to the
# caches (the invalidation lock, the watched ranges, the monitor's usage,
# which tests observe), and no other of those headers: checked too.
# No file of tests/ or bench/ is exempt.
here=$(cd "$(dirname "$0")" && pwd)
top=$here/..
fail=0
# an #include of one of the module headers, by any path
re='^[[:space:]]*#[[:space:]]*include[[:space:]]*["<]([^">]*/)?(internal|index|cache|monitor|monitor_priv)\.h[">]'

files=$(ls "$top"/tests/*.c "$top"/tests/*.h "$top"/bench/*.c "$top"/bench/*.h 2>/dev/null)
n=$(echo "$files" | grep -c .)
if [ "$n" -lt 10 ]; then
	echo "FAIL: found $n source files under tests/ and bench/"
	exit 1
fi
# the pattern finds what it must: lib/cache.c includes cache.h
if ! grep -Eq "$re" "$top/lib/cache.c"; then
	echo "FAIL: the pattern misses lib/cache.c's own #include \"cache.h\""
	exit 1
fi

for f in $files; do
	grep -En "$re" "$f" | while IFS= read -r line; do
		echo "FAIL: ${f#"$top"/}:$line"
	done
	grep -Eq "$re" "$f" && fail=1
done
if grep -E "$re" "$top/lib/odpx-private.h" | grep -Ev '"\.\./uffd/monitor\.h"' | grep -q .; then
	echo "FAIL: lib/odpx-private.h includes a module header beyond uffd/monitor.h:"
	grep -En "$re" "$top/lib/odpx-private.h"
	fail=1
fi
[ $fail = 0 ] && echo "$n files of tests/ and bench/: none includes a module header of the library"
exit $fail
