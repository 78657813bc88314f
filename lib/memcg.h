/* SPDX-License-Identifier: MIT */
/*
 * memcg.h - the process's memory cgroup, as the pinning paths see it.
 *
 * A pinned page is charged to the memory cgroup and cannot be reclaimed
 * while pinned: a pin past the cgroup's limit ends in the kernel's memcg
 * OOM killer, inside the registration.  Before a pin the caches ask how many
 * bytes may still be pinned (memcg_headroom), and the engine asks whether
 * the cgroup is under pressure (memcg_pressure).  Internal: nothing here is
 * exported.
 *
 * The cgroup is found once per process (and again in a fork child, and at
 * each odpx_open(), since a process may be moved between cgroups): cgroup v2
 * from the "0::/path" line of /proc/self/cgroup under the cgroup2 mount
 * (/sys/fs/cgroup or /sys/fs/cgroup/unified), else the v1 memory
 * controller's "N:memory:/path" line under /sys/fs/cgroup/memory.
 *
 * Headroom, in bytes: over every level from the process's cgroup up to the
 * root that has a limit (v2: memory.max, or memory.high where lower; v1:
 * hierarchical_memory_limit of memory.stat, which already is the tightest),
 * the least of
 *   limit - margin - unreclaimable,  margin = max(limit / 8, 16 MiB),
 *   unreclaimable = usage - file + shmem (page cache can go; shmem only to swap)
 *                   - anon + @pinned, where swap is available,
 * and UINT64_MAX where no level has a limit.  @pinned is what odpx holds
 * pinned in this process: pinned anonymous pages cannot go to swap.  A new
 * pin of N bytes is taken as N more unreclaimable bytes, whether its pages
 * were resident or not, so that the estimate errs on the side of refusing.
 * The margin is room for what the process allocates after the pin (its
 * stacks, page tables, the kernel's own charges) and for the error of the
 * estimate.
 */
#ifndef ODPX_MEMCG_H
#define ODPX_MEMCG_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define MEMCG_MARGIN_MIN_BYTES (16ULL << 20)
#define MEMCG_MARGIN_SHIFT 3		/* margin: limit >> 3, at least the above */
#define MEMCG_PRESSURE_MS 100		/* memcg_pressure() reads at most this often */
#define MEMCG_LIMITS_MS 100		/* the limits are read again after this */
#define MEMCG_REUSE_MS 10		/* a full reading's headroom serves pins this long */
#define MEMCG_LEVELS 16			/* levels looked at, the process's first */

/* What one reading found, for the reason text and the tests. */
struct memcg_view {
	int version;			/* 0: no memory cgroup found; 1 or 2 */
	char path[256];			/* the cgroup's path in its hierarchy */
	uint64_t limit_bytes;		/* of the tightest level; UINT64_MAX: none */
	uint64_t usage_bytes, unreclaimable_bytes, margin_bytes;
	uint64_t headroom_bytes;	/* UINT64_MAX: no limit */
	bool swap;			/* anonymous memory may go to swap */
};

/* Where the files are: "/proc" and "/sys" on a live system, a fixture tree in tests. */
struct memcg_roots {
	const char *proc, *sys;
	pid_t pid;			/* 0: self */
	bool swap_free;			/* fixtures: the system has free swap */
};

/*
 * memcg_read - find @r's memory cgroup and read its headroom into @v, with
 * @pinned bytes held pinned by odpx.  Uncached: every call opens the files.
 * Return: 0 (v->version 0 where there is no memory cgroup: no limit), or
 * -errno of a file that exists and does not parse (-EINVAL) or read.
 */
int memcg_read(const struct memcg_roots *r, uint64_t pinned, struct memcg_view *v);

/*
 * memcg_headroom - the bytes this process may still pin (see above); the
 * live system's cgroup, found once, its limits cached MEMCG_LIMITS_MS.
 * @pinned: bytes odpx holds pinned in this process.  @v: NULL, or the reading.
 * Return: 0 with *@bytes (UINT64_MAX: no limit), or -errno (then no limit
 * is known: the caller pins as it would without a cgroup).
 */
int memcg_headroom(uint64_t pinned, uint64_t *bytes, struct memcg_view *v);

/* Lock-free: the last reading, less than MEMCG_LIMITS_MS ago, found no limit. */
bool memcg_unlimited(void);

/* ctx.c's fork handlers: the memcg lock across fork() */
void memcg_atfork_prepare(void);
void memcg_atfork_done(void);	/* parent and child */

/*
 * memcg_headroom_atleast - memcg_headroom(), but where each level's limit
 * less its margin and its whole usage leaves @enough bytes, the page
 * cache and swap are not looked at (v2: no memory.stat read; v1: no
 * memory.stat, which the kernel sums over the hierarchy, only each
 * level's memory.limit_in_bytes and memory.usage_in_bytes): then *@bytes
 * is a lower bound, at least @enough, and @v's swap false.  For the pin
 * paths, whose common case is a pin far under the limit.
 */
int memcg_headroom_atleast(uint64_t pinned, uint64_t enough, uint64_t *bytes,
			   struct memcg_view *v);

/*
 * memcg_pressure - true when the cgroup is reclaiming at its limit: its
 * memory.events high, max or oom counts (v2; v1: memory.failcnt) rose since
 * the last look, or no headroom is left with @pinned; and only where swap
 * is available, since without it a page unpinned stays charged and a
 * release relieves nothing.  Reads at most every MEMCG_PRESSURE_MS, else
 * answers false without a syscall; for the engine's tick.  One state for
 * the process: of two contexts' ticks, the first after a rise sees it.
 */
bool memcg_pressure(uint64_t pinned);

/* memcg_forget - find the cgroup again at the next call (odpx_open, fork child). */
void memcg_forget(void);

#endif
