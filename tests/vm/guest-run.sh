#!/bin/sh
# SPDX-License-Identifier: MIT
# guest-run.sh - the test driver inside the Soft-RoCE guest.  `odpx-vm test` copies it into the
# share as run.sh, beside run-tests.sh, bin/ (the test programs), tests.list (their order) and
# config (TEST_TIMEOUT).  It creates rxe0 on lo, waits for the port to be ACTIVE with the IPv4
# loopback GID, and runs the tests with run-tests.sh; its exit status is the suite's.
# Nothing may skip in here: TEST_REQUIRE_DEVICE=1 turns the device tests' skips into
# failures, and any skip that still shows up in the summary fails the run.
set -u
cd /mnt/host || exit 1
TEST_TIMEOUT=120
. ./config
export TEST_REQUIRE_DEVICE=1 TEST_TIMEOUT

modprobe rdma_rxe || { echo "guest: modprobe rdma_rxe failed"; exit 1; }
rdma link add rxe0 type rxe netdev lo ||
	{ echo "guest: 'rdma link add rxe0 type rxe netdev lo' failed"; exit 1; }

# rxe brings the port up and adds the GIDs of lo's addresses asynchronously: poll, 10 s at most
port=/sys/class/infiniband/rxe0/ports/1
gid=
i=0
while [ $i -lt 200 ]; do
	if grep -q ACTIVE "$port/state" 2>/dev/null; then
		gid=$(grep -lx '0000:0000:0000:0000:0000:ffff:7f00:0001' "$port"/gids/* 2>/dev/null |
			head -n1)
		[ -n "$gid" ] && break
	fi
	sleep 0.05
	i=$((i + 1))
done
if [ -z "$gid" ]; then
	echo "guest: rxe0 port 1 is not ACTIVE with GID ::ffff:127.0.0.1 after 10 s:" \
		"$(cat "$port/state" 2>/dev/null)"
	exit 1
fi
# rdma_cm (rping, librdmacm) resolves no device for an address on lo ("rdma_resolve_route:
# No such device"): a second rxe, on a dummy netdev holding 10.8.8.1, serves those programs
if ! { modprobe dummy && ip link add d0 type dummy && ip link set d0 up &&
	ip addr add 10.8.8.1/24 dev d0 && rdma link add rxe1 type rxe netdev d0; }; then
	echo "guest: rxe1 on a dummy netdev with 10.8.8.1 could not be made"
	exit 1
fi
i=0
until grep -qx '0000:0000:0000:0000:0000:ffff:0a08:0801' /sys/class/infiniband/rxe1/ports/1/gids/* \
	2>/dev/null; do
	i=$((i + 1))
	if [ $i -ge 200 ]; then
		echo "guest: rxe1 has no GID ::ffff:10.8.8.1 after 10 s"
		exit 1
	fi
	sleep 0.05
done
# memory-limit experiments (dev-paging-workingset, odpx-paging's workingset): cgroup v2 at
# /sys/fs/cgroup, where they make their own cgroups, and 1 GiB of swap on zram for the pages
# over a cgroup's memory.max
if ! { mountpoint -q /sys/fs/cgroup || mount -t cgroup2 cgroup2 /sys/fs/cgroup; }; then
	echo "guest: cgroup2 could not be mounted at /sys/fs/cgroup"
	exit 1
fi
if ! { modprobe zram num_devices=1 && echo 1G > /sys/block/zram0/disksize &&
	mkswap /dev/zram0 > /dev/null && swapon /dev/zram0; }; then
	echo "guest: swap on zram could not be set up"
	exit 1
fi
echo "guest: kernel $(uname -r), rdma-core $(dpkg-query -W -f '${Version}' rdma-core)," \
	"rxe0 on lo ACTIVE, ::ffff:127.0.0.1 at GID index ${gid##*/}, rxe1 on d0 (10.8.8.1)," \
	"$(nproc) vCPUs, $(awk '/MemTotal/ { printf "%d MiB", $2 / 1024 }' /proc/meminfo)"

set --
while read -r name; do
	set -- "$@" "bin/$name"
done < tests.list
{ sh ./run-tests.sh "$@"; echo $? > /tmp/run-tests.rc; } | tee /tmp/run-tests.out
rc=$(cat /tmp/run-tests.rc)
skipped=$(tail -n1 /tmp/run-tests.out |
	sed -n 's/^[0-9]* passed, [0-9]* failed, \([0-9]*\) skipped$/\1/p')
if [ -z "$skipped" ]; then
	echo "guest: run-tests.sh ended without its summary line"
	exit 1
fi
if [ "$skipped" != 0 ]; then
	echo "guest: $skipped test(s) skipped inside the guest, where the device is present: failure"
	exit 1
fi
# odpx-paging --quick on rxe0 when odpx-vm put it in the share (ODPX_VM_PAGING), or with the
# arguments in paging/args if the share has that file (a full run for docs/paging.md); its
# report stays in the share for odpx-vm to keep
if [ -x paging/odpx-paging ]; then
	args="--quick --require-device"	# rxe0 is here: a device experiment skipped is a failure
	[ -f paging/args ] && args=$(cat paging/args)
	mkdir -p paging-report
	# shellcheck disable=SC2086  # $args is a word list
	if ! ODPX_DEV=rxe0 ODPX_PAGING_COMMIT=$(cat paging/commit) \
		./paging/odpx-paging $args --out paging-report > paging-report/log 2>&1; then
		tail -n 20 paging-report/log
		echo "guest: odpx-paging $args failed"
		exit 1
	fi
	grep -E '^# .*(skipped|first completion|timeline|workingset)' paging-report/log
	# the quick run's memory.max leaves the pinned mode room for its smallest working set
	if [ ! -f paging/args ] && ! { grep -q '^# workingset pinned .*: ok' paging-report/log &&
		grep -q '^# phase pinned: ok' paging-report/log; }; then
		grep -E '^# (workingset|phase) pinned' paging-report/log
		echo "guest: odpx-paging $args: the pinned mode ran no working set to its end"
		exit 1
	fi
	echo "guest: odpx-paging $args: report written"
fi
exit "$rc"
