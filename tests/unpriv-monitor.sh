#!/bin/sh
# SPDX-License-Identifier: MIT
# unpriv-monitor: build/tests/uffd-monitor and stale-data again, as user nobody.
#
# Unprivileged, the library must open its userfaultfd with UFFD_USER_MODE_ONLY
# (vm.unprivileged_userfaultfd is 0 on the hosts we run on), has no
# CAP_IPC_LOCK and pins against RLIMIT_MEMLOCK (io_uring accounts its pins
# there); uffd-monitor keeps its sizes far below the usual 8 MiB.
# Both run, each to its end.  Exit status: the first failure's; else 77 if
# either skipped (it says why); else 0.
here=$(cd "$(dirname "$0")" && pwd)
tests="uffd-monitor stale-data"

for t in $tests; do
	if [ ! -x "$here/../build/tests/$t" ]; then
		echo "FAIL: $here/../build/tests/$t is not built"
		exit 1
	fi
done
if [ "$(id -u)" != 0 ]; then
	# already unprivileged: nothing to drop
	echo "running $tests as uid $(id -u)"
	for t in $tests; do "$here/../build/tests/$t" || exit $?; done
	exit 0
fi
if ! command -v setpriv >/dev/null 2>&1; then
	echo "SKIP: setpriv (util-linux) not found: cannot drop to nobody"
	exit 77
fi
if ! getent passwd nobody >/dev/null; then
	echo "SKIP: no user nobody"
	exit 77
fi
group=nogroup
getent group nogroup >/dev/null || group=nobody
if ! getent group "$group" >/dev/null; then
	echo "SKIP: neither group nogroup nor nobody exists"
	exit 77
fi
as_nobody() {
	setpriv --reuid=nobody --regid="$group" --clear-groups "$@"
}
if ! as_nobody true; then
	echo "FAIL: setpriv --reuid=nobody failed"
	exit 1
fi

# nobody must be able to read and execute the binaries; if a parent directory
# keeps them out (a 0700 home, say), run copies from a directory of mode 755
tmp=
cleanup() { [ -n "$tmp" ] && rm -rf "$tmp"; }
trap cleanup EXIT
trap 'cleanup; exit 1' INT TERM HUP
dir_of="$here/../build/tests"
if ! as_nobody test -r "$dir_of/uffd-monitor" -a -x "$dir_of/uffd-monitor"; then
	for d in "${TMPDIR:-/tmp}" /tmp; do
		tmp=$(mktemp -d "$d/odpx-unpriv.XXXXXX") || continue
		chmod 755 "$tmp"
		for t in $tests; do cp "$dir_of/$t" "$tmp/$t" && chmod 755 "$tmp/$t"; done
		if as_nobody test -r "$tmp/uffd-monitor" -a -x "$tmp/uffd-monitor"; then
			dir_of=$tmp
			break
		fi
		rm -rf "$tmp"
		tmp=
	done
	if [ -z "$tmp" ]; then
		echo "FAIL: nobody cannot execute $dir_of/uffd-monitor, nor a copy in ${TMPDIR:-/tmp} or /tmp"
		exit 1
	fi
	echo "nobody cannot reach the build directory: running copies in $dir_of"
fi

echo "as nobody: $(as_nobody id), RLIMIT_MEMLOCK $(ulimit -l) kB," \
	"vm.unprivileged_userfaultfd=$(cat /proc/sys/vm/unprivileged_userfaultfd 2>/dev/null || echo '?')"
rc=0
for t in $tests; do
	echo "--- $t as nobody"
	(cd / && as_nobody "$dir_of/$t")
	r=$?
	if [ $r = 77 ]; then
		echo "SKIP: $t as nobody skipped"
		[ $rc = 0 ] && rc=77
	elif [ $r != 0 ]; then
		echo "FAIL: $t as nobody (exit $r)"
		[ $rc = 0 ] || [ $rc = 77 ] && rc=$r
	fi
done
cleanup
tmp=
exit $rc
