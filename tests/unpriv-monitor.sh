#!/bin/sh
# unpriv-monitor: build/tests/uffd-monitor again, as user nobody.
#
# Unprivileged, the library must open its userfaultfd with UFFD_USER_MODE_ONLY
# (vm.unprivileged_userfaultfd is 0 on the hosts we run on), has no
# CAP_IPC_LOCK and pins against RLIMIT_MEMLOCK (io_uring accounts its pins
# there); uffd-monitor keeps its sizes far below the usual 8 MiB.
# Exit status: that of uffd-monitor (0 pass, 77 skip, else fail).
here=$(cd "$(dirname "$0")" && pwd)
bin="$here/../build/tests/uffd-monitor"

if [ ! -x "$bin" ]; then
	echo "FAIL: $bin is not built"
	exit 1
fi
if [ "$(id -u)" != 0 ]; then
	# already unprivileged: nothing to drop
	echo "running $bin as uid $(id -u)"
	exec "$bin"
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

# nobody must be able to read and execute the binary; if a parent directory
# keeps it out (a 0700 home, say), run a copy from a directory of mode 755
tmp=
cleanup() { [ -n "$tmp" ] && rm -rf "$tmp"; }
trap cleanup EXIT
trap 'cleanup; exit 1' INT TERM HUP
run="$bin"
if ! as_nobody test -r "$bin" -a -x "$bin"; then
	for dir in "${TMPDIR:-/tmp}" /tmp; do
		tmp=$(mktemp -d "$dir/odpx-unpriv.XXXXXX") || continue
		chmod 755 "$tmp" && cp "$bin" "$tmp/uffd-monitor" && chmod 755 "$tmp/uffd-monitor"
		if as_nobody test -r "$tmp/uffd-monitor" -a -x "$tmp/uffd-monitor"; then
			run="$tmp/uffd-monitor"
			break
		fi
		rm -rf "$tmp"
		tmp=
	done
	if [ "$run" = "$bin" ]; then
		echo "FAIL: nobody cannot execute $bin, nor a copy of it in ${TMPDIR:-/tmp} or /tmp"
		exit 1
	fi
	echo "nobody cannot reach $bin: running a copy, $run"
fi

echo "as nobody: $(as_nobody id), RLIMIT_MEMLOCK $(ulimit -l) kB," \
	"vm.unprivileged_userfaultfd=$(cat /proc/sys/vm/unprivileged_userfaultfd 2>/dev/null || echo '?')"
(cd / && as_nobody "$run")
rc=$?
cleanup
tmp=
exit $rc
