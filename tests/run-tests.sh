#!/bin/sh
# SPDX-License-Identifier: MIT
# run-tests.sh - run test programs, one line each, then "N passed, N failed, N skipped".
#
#   run-tests.sh [-t SECONDS] PROGRAM...
#
# Exit status of a test: 0 pass, 77 skip (the test printed why), anything else fail.
# A test that passes while printing a line starting "XFAIL:" is a known, labelled defect
# of the platform (counted as passed, shown as XFAIL).  A test killed by the timeout fails,
# with where each thread of each of its processes was (name, wait channel, system call,
# kernel stack).
# The timeout counts naps of 0.1 s, not the clock: a paused machine is one nap.
# POSIX sh only: the same runner is used on the host and inside the Soft-RoCE guest.
timeout_s=${TEST_TIMEOUT:-120}
if [ "${1:-}" = "-t" ]; then timeout_s=$2; shift 2; fi
pass=0 fail=0 skip=0 failed=""
log=$(mktemp "${TMPDIR:-/tmp}/odpx-test.XXXXXX")

# Where the threads of process $1 are, for the log of a test that timed out.
threads_of() {
	for d in /proc/"$1"/task/*; do
		echo "thread ${d##*/} $(cat "$d/comm" 2>/dev/null) wchan=$(cat "$d/wchan" 2>/dev/null)" \
			"syscall=$(cat "$d/syscall" 2>/dev/null | cut -d' ' -f1-4)"
		sed 's/^/        /' "$d/stack" 2>/dev/null
	done
}

# The processes of session $1: the test and every child it forked (a test's forked
# cases hang there, not in the parent that waits for them).
procs_of() {
	for s in /proc/[0-9]*/stat; do
		p=${s#/proc/}
		p=${p%/stat}
		[ "$(sed 's/.*) //' "$s" 2>/dev/null | cut -d' ' -f4)" = "$1" ] && echo "$p"
	done
}

# Run $1 in a session of its own (setsid: a background job is no group leader,
# so it does not fork), output to $log; after $timeout_s s of naps, dump the threads
# of each of its processes, then TERM the group and KILL it 5 s later.  Sets rc;
# $log.timeout marks a timeout.
run_one() {
	rm -f "$log.timeout"
	setsid "$1" > "$log" 2>&1 &
	pid=$!
	(
		n=0
		while [ $n -lt $((timeout_s * 10)) ]; do sleep 0.1; n=$((n + 1)); done
		: > "$log.timeout"
		for p in $(procs_of $pid); do
			echo "--- timed out: process $p ($(cat /proc/"$p"/comm 2>/dev/null)), its threads:"
			threads_of "$p"
		done >> "$log" 2>&1
		kill -TERM -$pid 2>/dev/null
		sleep 5
		kill -KILL -$pid 2>/dev/null
	) &
	guard=$!
	{ wait $pid; } 2>/dev/null	# no "Terminated" from the shell
	rc=$?
	kill $guard 2>/dev/null
	{ wait $guard; } 2>/dev/null
}

for t in "$@"; do
	name=$(basename "$t")
	start=$(date +%s.%N)
	run_one "$t"
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
		if [ -e "$log.timeout" ]; then
			echo "FAIL  $name (${el}s, timeout after ${timeout_s}s of naps)"
			sed 's/^/    | /' "$log"
		else
			echo "FAIL  $name (${el}s, exit $rc)"
			tail -n 25 "$log" | sed 's/^/    | /'
		fi
	fi
done
rm -f "$log" "$log.timeout"
[ -n "$failed" ] && echo "failed:$failed"
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
