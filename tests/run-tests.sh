#!/bin/sh
# run-tests.sh - run test programs, one line each, then "N passed, N failed, N skipped".
#
#   run-tests.sh [-t SECONDS] PROGRAM...
#
# Exit status of a test: 0 pass, 77 skip (the test printed why), anything else fail.
# A test that passes while printing a line starting "XFAIL:" is a known, labelled defect
# of the platform (counted as passed, shown as XFAIL).  A test killed by the timeout fails.
# POSIX sh only: the same runner is used on the host and inside the Soft-RoCE guest.
timeout_s=${TEST_TIMEOUT:-120}
if [ "${1:-}" = "-t" ]; then timeout_s=$2; shift 2; fi
pass=0 fail=0 skip=0 failed=""
log=$(mktemp "${TMPDIR:-/tmp}/odpx-test.XXXXXX")
for t in "$@"; do
	name=$(basename "$t")
	start=$(date +%s.%N)
	timeout -k 5 "$timeout_s" "$t" > "$log" 2>&1
	rc=$?
	el=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
	if [ $rc -eq 0 ]; then
		pass=$((pass + 1))
		x=$(grep -m1 '^XFAIL:' "$log")
		if [ -n "$x" ]; then echo "XFAIL $name (${el}s) ${x#XFAIL: }"
		else echo "PASS  $name (${el}s)"; fi
	elif [ $rc -eq 77 ]; then
		skip=$((skip + 1))
		echo "SKIP  $name: $(grep -m1 -i 'skip' "$log" || tail -n1 "$log")"
	else
		fail=$((fail + 1)); failed="$failed $name"
		[ $rc -eq 124 ] || [ $rc -eq 137 ] && why="timeout after ${timeout_s}s" || why="exit $rc"
		echo "FAIL  $name (${el}s, $why)"
		tail -n 25 "$log" | sed 's/^/    | /'
	fi
done
rm -f "$log"
[ -n "$failed" ] && echo "failed:$failed"
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
