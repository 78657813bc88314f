#!/bin/sh
# SPDX-License-Identifier: MIT
# odpx-paging-guest.sh - one odpx-paging run in the Soft-RoCE guest (rxe0, cgroup2, swap on
# zram, as tests/vm/guest-run.sh sets them up), its report copied to OUT and its plots drawn
# here (the guest has no gnuplot).  From the top of the tree, after ninja:
#
#   bench/odpx-paging-guest.sh OUT [ODPX-PAGING ARGUMENTS...]
#
# docs/plots/paging-guest is the full run of docs/paging.md:
#   bench/odpx-paging-guest.sh docs/plots/paging-guest --region 32M --rounds 5 \
#       --thrash window_ms=100,mem_refault_rate=100 --require-device
# The run's length follows the arguments: --samples (latency), --phase-secs (phase), --rounds
# (workingset), --region (warmup, prefetch), --quick; --only picks experiments.  The guest run's deadline is
# ODPX_VM_TIMEOUT (default here 2400 s: a full run under TCG).
set -eu
[ $# -ge 1 ] || { echo "usage: $0 OUT [ODPX-PAGING ARGUMENTS...]" >&2; exit 2; }
out=$1
shift
top=$(cd "$(dirname "$0")/.." && pwd)
bin=${ODPX_BUILDDIR:-$top/build}/odpx-paging
[ -x "$bin" ] || { echo "$bin is not built" >&2; exit 1; }
share=$(mktemp -d /tmp/odpx-paging-guest.XXXXXX)
trap 'rm -rf "$share"' EXIT
chmod 755 "$share"
mkdir "$share/bin" "$share/paging"
cp "$top/tests/vm/guest-run.sh" "$share/run.sh"
cp "$top/tests/run-tests.sh" "$share/run-tests.sh"
: > "$share/tests.list"	# no tests: the driver's setup, then odpx-paging
echo "TEST_TIMEOUT=120" > "$share/config"
cp "$bin" "$share/paging/odpx-paging"
git -C "$top" describe --always --dirty > "$share/paging/commit" 2>/dev/null || echo unknown > "$share/paging/commit"
echo "$*" > "$share/paging/args"
ODPX_VM_TIMEOUT=${ODPX_VM_TIMEOUT:-2400} "$top/tests/vm/odpx-vm" run "$share" || {
	echo "$0: the guest run failed; its log:" >&2
	tail -n 30 "$share/guest.log" >&2 2>/dev/null
	exit 1
}
[ -f "$share/paging-report/index.md" ] || { echo "$0: the guest wrote no report" >&2; exit 1; }
rm -rf "$out"
mkdir -p "$out"
cp -r "$share/paging-report/." "$out/"
gnuplot -e "dir='$out'; title='guest'" "$top/bench/odpx-paging.gp"
echo "$0: report in $out"
