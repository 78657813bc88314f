/* SPDX-License-Identifier: MIT */
/* memcg-test.h - a memory cgroup of the tests' own, with a limit (header-only). */
#ifndef ODPX_MEMCG_TEST_H
#define ODPX_MEMCG_TEST_H

#include <limits.h>
#include <sys/stat.h>

#include "test.h"
#include "../lib/memcg.h"

static inline int memcg_write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = write(fd, text, strlen(text));
	n = n < 0 ? -errno : 0;
	close(fd);
	return (int)n;
}

/*
 * Make a memory cgroup limited to @limit bytes into @cg: v1 under this
 * process's, v2 under the root of the hierarchy (the only place a test can
 * be sure to have the memory controller to give).  Returns the version, or
 * 0 with the reason printed where none can be made.
 */
static inline int memcg_test_make(char *cg, size_t cap, uint64_t limit)
{
	struct memcg_roots r = { .proc = "/proc", .sys = "/sys" };
	char path[PATH_MAX + 64], num[32];
	const char *limit_file;
	struct memcg_view v;

	if (memcg_read(&r, 0, &v) < 0 || !v.version) {
		printf("no memory cgroup in /proc/self/cgroup\n");
		return 0;
	}
	if (v.version == 1) {
		snprintf(cg, cap, "/sys/fs/cgroup/memory%s/odpx-test.%d",
			 strcmp(v.path, "/") ? v.path : "", (int)getpid());
		limit_file = "memory.limit_in_bytes";
	} else {
		const char *mnt = access("/sys/fs/cgroup/unified/cgroup.controllers", R_OK) == 0
				  ? "/sys/fs/cgroup/unified" : "/sys/fs/cgroup";

		snprintf(path, sizeof(path), "%s/cgroup.subtree_control", mnt);
		if (memcg_write_file(path, "+memory") < 0) {
			printf("no memory controller to give at %s: %s\n", mnt, strerror(errno));
			return 0;
		}
		snprintf(cg, cap, "%s/odpx-test.%d", mnt, (int)getpid());
		limit_file = "memory.max";
	}
	if (mkdir(cg, 0755) < 0) {
		printf("cannot make %s: %s\n", cg, strerror(errno));
		return 0;
	}
	snprintf(path, sizeof(path), "%s/%s", cg, limit_file);
	snprintf(num, sizeof(num), "%llu", (unsigned long long)limit);
	if (memcg_write_file(path, num) < 0) {
		printf("cannot limit %s: %s\n", path, strerror(errno));
		rmdir(cg);
		return 0;
	}
	return v.version;
}

/* The calling process into @cg; the library finds it at its next open. */
static inline void memcg_test_enter(const char *cg)
{
	char path[PATH_MAX + 32], pid[32];
	int r;

	snprintf(path, sizeof(path), "%s/cgroup.procs", cg);
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	if ((r = memcg_write_file(path, pid)) < 0)
		FAIL("entering %s: %s", cg, strerror(-r));
	memcg_forget();
}

#endif
