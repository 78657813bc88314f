/* SPDX-License-Identifier: MIT */
/*
 * dev-cgroup.h - a device test's child in a memory cgroup of its own (cgroup v2 made by
 * dev-paging-ws.h; swap on zram in the guest, tests/vm/guest-run.sh).  Header-only.
 */
#ifndef ODPX_DEV_CGROUP_H
#define ODPX_DEV_CGROUP_H

#include <signal.h>
#include <sys/wait.h>

#include "dev-util.h"
#include "dev-paging-ws.h"

/*
 * Run @fn(@cg, @arg) in a child that entered a fresh cgroup odpx-test-<tag>.<pid> under the cgroup2
 * root: memory.max @max_bytes, or with @high_bytes, memory.high @high_bytes and no
 * memory.max (reclaim above it, no OOM killer).  Skips where no cgroup v2 can be made;
 * returns the child's wait status, memory.events' oom_kill in *@oom.
 */
static inline int dev_in_cgroup(const char *tag, uint64_t max_bytes, uint64_t high_bytes,
				int (*fn)(const struct ws_cg *, void *), void *arg, int64_t *oom)
{
	char why[PATH_MAX + 128], name[96], num[32];
	struct ws_cg cg;
	int st, r;
	pid_t pid;

	snprintf(name, sizeof(name), "odpx-test-%s.%d", tag, (int)getpid());
	if ((r = ws_cg_create(&cg, NULL, name, high_bytes ? high_bytes : max_bytes, why,
			      sizeof(why)))) {
		if (r == -ENOENT || r == -EACCES || r == -EPERM || r == -EROFS)
			dev_skip("no cgroup v2 to limit memory in: %s", why);
		dev_fail("%s", why);
	}
	snprintf(num, sizeof(num), "%" PRIu64, high_bytes);
	if (high_bytes && ((r = ws_write_file(cg.dir, "memory.max", "max")) ||
			   (r = ws_write_file(cg.dir, "memory.high", num))))
		dev_fail("%s: memory.max and memory.high: %s", cg.dir, strerror(-r));
	fflush(NULL);
	if ((pid = fork()) == 0) {
		if ((r = ws_cg_enter(&cg)))
			dev_fail("cannot enter %s: %s", cg.dir, strerror(-r));
		_exit(fn(&cg, arg));
	}
	if (pid < 0 || waitpid(pid, &st, 0) != pid)
		dev_fail("fork/waitpid: %s", strerror(errno));
	*oom = ws_cg_value(&cg, "memory.events", "oom_kill");
	ws_cg_remove(&cg);
	return st;
}

/* A child that must not be killed: fails on a signal, else its exit status (0: passed). */
static inline int dev_child_status(const char *what, int st, int64_t oom)
{
	if (WIFSIGNALED(st))
		dev_fail("%s: the child was killed by signal %d (%s); memory.events oom_kill %" PRId64,
			 what, WTERMSIG(st), strsignal(WTERMSIG(st)), oom);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

#endif
