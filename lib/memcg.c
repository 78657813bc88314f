/* SPDX-License-Identifier: MIT */
/* memcg.c - the memory cgroup's headroom for pins, and its pressure (memcg.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "memcg.h"

#define NO_LIMIT UINT64_MAX
/* v1 writes PAGE_COUNTER_MAX pages as its "no limit"; anything this large is none */
#define V1_NO_LIMIT (1ULL << 62)

/* The file's first line, whole; -ENOENT where it is absent. */
static int read_text(const char *path, char *buf, size_t n)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t got;

	if (fd < 0)
		return -errno;
	got = read(fd, buf, n - 1);
	close(fd);
	if (got < 0)
		return -errno;
	buf[got] = 0;
	return 0;
}

/* One number, or "max" (NO_LIMIT); -EINVAL for anything else. */
static int parse_u64(const char *s, uint64_t *v)
{
	char *end;

	while (*s == ' ' || *s == '\t')
		s++;
	if (!strncmp(s, "max", 3) && (s[3] == '\n' || !s[3])) {
		*v = NO_LIMIT;
		return 0;
	}
	if (*s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	*v = strtoull(s, &end, 10);
	if (errno || (*end && *end != '\n' && *end != ' '))
		return -EINVAL;
	return 0;
}

static int read_u64(const char *dir, const char *name, uint64_t *v)
{
	char path[PATH_MAX + 64], buf[64];
	int r;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if ((r = read_text(path, buf, sizeof(buf))) < 0)
		return r;
	return parse_u64(buf, v);
}

/* "key value" lines: the values of @keys into @vals (left as they are if absent). */
static int read_kv(const char *path, const char *const *keys, uint64_t *vals, size_t n)
{
	char line[256];
	FILE *f = fopen(path, "re");
	int r = 0;

	if (!f)
		return -errno;
	while (!r && fgets(line, sizeof(line), f)) {
		char *sp = strchr(line, ' ');

		if (!sp)
			continue;
		*sp = 0;
		for (size_t i = 0; i < n; i++)
			if (!strcmp(line, keys[i]))
				r = parse_u64(sp + 1, &vals[i]);
	}
	fclose(f);
	return r;
}

/* The found cgroup: its directory and where its hierarchy's root ends. */
struct found {
	int version;		/* 0: none */
	char dir[PATH_MAX];
	size_t root_len;	/* dir[0, root_len) is the mount */
};

static int find(const struct memcg_roots *r, struct found *fd)
{
	static const char *const v2_mounts[] = { "fs/cgroup", "fs/cgroup/unified" };
	char path[PATH_MAX + 64], line[PATH_MAX], v2[PATH_MAX] = "", v1[PATH_MAX] = "";
	FILE *f;

	fd->version = 0;
	fd->dir[0] = 0;
	fd->root_len = 0;
	if (r->pid)
		snprintf(path, sizeof(path), "%s/%d/cgroup", r->proc, (int)r->pid);
	else
		snprintf(path, sizeof(path), "%s/self/cgroup", r->proc);
	if (!(f = fopen(path, "re")))
		return errno == ENOENT ? 0 : -errno;
	while (fgets(line, sizeof(line), f)) {
		char *ctrl = strchr(line, ':'), *cg = ctrl ? strchr(ctrl + 1, ':') : NULL;

		if (!cg || cg[1] != '/')
			continue;
		*ctrl = 0;
		*cg++ = 0;
		cg[strcspn(cg, "\n")] = 0;
		if (!strcmp(line, "0") && !ctrl[1]) {
			snprintf(v2, sizeof(v2), "%s", cg);
			continue;
		}
		/* v1: the controllers, comma-separated; "memory" among them */
		for (char *c = strtok(ctrl + 1, ","); c; c = strtok(NULL, ","))
			if (!strcmp(c, "memory"))
				snprintf(v1, sizeof(v1), "%s", cg);
	}
	fclose(f);
	if (strstr(v2, "/..") || strstr(v1, "/.."))
		return -EINVAL;
	/* v2 where its memory controller is on for our cgroup, else v1's */
	for (size_t i = 0; v2[0] && i < sizeof(v2_mounts) / sizeof(v2_mounts[0]); i++) {
		int n = snprintf(fd->dir, sizeof(fd->dir), "%s/%s", r->sys, v2_mounts[i]);

		if (n < 0 || (size_t)n >= sizeof(fd->dir))
			return -ENAMETOOLONG;
		fd->root_len = (size_t)n;
		snprintf(fd->dir + n, sizeof(fd->dir) - n, "%s", strcmp(v2, "/") ? v2 : "");
		snprintf(path, sizeof(path), "%s/memory.current", fd->dir);
		if (access(path, R_OK) == 0) {
			fd->version = 2;
			return 0;
		}
		/* the root cgroup has no memory.current, but its children may limit nothing */
		snprintf(path, sizeof(path), "%s/cgroup.controllers", fd->dir);
		if (!strcmp(v2, "/") && access(path, R_OK) == 0 && !v1[0]) {
			fd->version = 2;
			return 0;
		}
	}
	if (v1[0]) {
		int n = snprintf(fd->dir, sizeof(fd->dir), "%s/fs/cgroup/memory", r->sys);

		if (n < 0 || (size_t)n >= sizeof(fd->dir))
			return -ENAMETOOLONG;
		fd->root_len = (size_t)n;
		snprintf(fd->dir + n, sizeof(fd->dir) - n, "%s", strcmp(v1, "/") ? v1 : "");
		snprintf(path, sizeof(path), "%s/memory.usage_in_bytes", fd->dir);
		if (access(path, R_OK) == 0)
			fd->version = 1;
	}
	if (!fd->version) {
		fd->dir[0] = 0;
		fd->root_len = 0;
	}
	return 0;
}

static bool swap_free(const struct memcg_roots *r)
{
	char path[PATH_MAX + 16], line[128];
	uint64_t kib = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/meminfo", r->proc);
	if (!(f = fopen(path, "re")))
		return false;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "SwapFree:", 9))
			kib = strtoull(line + 9, NULL, 10);
	fclose(f);
	return kib > 0;
}

/* One level's headroom, from its limit, usage and memory.stat figures. */
static uint64_t level_headroom(uint64_t limit, uint64_t usage, uint64_t anon, uint64_t file,
			       uint64_t shmem, bool swap, uint64_t pinned, struct memcg_view *v)
{
	uint64_t margin = limit >> MEMCG_MARGIN_SHIFT, reclaimable, unrecl;

	if (margin < MEMCG_MARGIN_MIN_BYTES)
		margin = MEMCG_MARGIN_MIN_BYTES;
	/* page cache is reclaimable; shmem (counted in file) and anon only to swap */
	reclaimable = file > shmem ? file - shmem : 0;
	if (swap)
		reclaimable += anon + shmem > pinned ? anon + shmem - pinned : 0;
	unrecl = usage > reclaimable ? usage - reclaimable : 0;
	uint64_t room = limit > margin + unrecl ? limit - margin - unrecl : 0;
	if (room < v->headroom_bytes) {
		v->headroom_bytes = room;
		v->limit_bytes = limit;
		v->usage_bytes = usage;
		v->unreclaimable_bytes = unrecl;
		v->margin_bytes = margin;
		v->swap = swap;
	}
	return room;
}

/* The level's headroom were nothing reclaimable: a lower bound, no memory.stat read. */
static bool level_enough(uint64_t limit, uint64_t usage, uint64_t enough)
{
	uint64_t margin = limit >> MEMCG_MARGIN_SHIFT;

	if (margin < MEMCG_MARGIN_MIN_BYTES)
		margin = MEMCG_MARGIN_MIN_BYTES;
	return enough != UINT64_MAX && limit > margin + usage && limit - margin - usage >= enough;
}

/* /proc/meminfo is slow to read: only where the page cache and swap are looked at */
static int read_v2(const struct memcg_roots *rt, const struct found *fd, uint64_t pinned,
		   uint64_t enough, struct memcg_view *v)
{
	static const char *const keys[] = { "anon", "file", "shmem" };
	char dir[PATH_MAX], path[PATH_MAX + 16];
	uint64_t swap_room = UINT64_MAX;
	struct { uint64_t limit, usage, st[3]; bool lower; } lv[MEMCG_LEVELS];
	unsigned n = 0;
	int r;

	snprintf(dir, sizeof(dir), "%s", fd->dir);
	/* the levels with a limit, the process's first; the root has no memory.max */
	while (strlen(dir) > fd->root_len && n < MEMCG_LEVELS) {
		uint64_t max = NO_LIMIT, high = NO_LIMIT, smax = NO_LIMIT, scur = 0;

		if ((r = read_u64(dir, "memory.max", &max)) < 0 && r != -ENOENT)
			return r;
		if ((r = read_u64(dir, "memory.high", &high)) < 0 && r != -ENOENT)
			return r;
		/* swap: the room of every level, where swap is accounted */
		if (read_u64(dir, "memory.swap.max", &smax) == 0 &&
		    read_u64(dir, "memory.swap.current", &scur) == 0)
			swap_room = smax > scur && smax - scur < swap_room ? smax - scur
				    : smax <= scur ? 0 : swap_room;
		if (high < max)
			max = high;
		if (max != NO_LIMIT) {
			lv[n].limit = max;
			if ((r = read_u64(dir, "memory.current", &lv[n].usage)) < 0)
				return r;
			memset(lv[n].st, 0, sizeof(lv[n].st));
			lv[n].lower = level_enough(max, lv[n].usage, enough);
			snprintf(path, sizeof(path), "%s/memory.stat", dir);
			if (!lv[n].lower && (r = read_kv(path, keys, lv[n].st, 3)) < 0)
				return r;
			n++;
		}
		*strrchr(dir, '/') = 0;
	}
	bool swap_sys = false;

	for (unsigned i = 0; i < n; i++)
		if (!lv[i].lower) {
			swap_sys = swap_free(rt);
			break;
		}
	for (unsigned i = 0; i < n; i++)
		level_headroom(lv[i].limit, lv[i].usage, lv[i].st[0], lv[i].st[1], lv[i].st[2],
			       !lv[i].lower && swap_sys && swap_room > 0, pinned, v);
	return 0;
}

static int read_v1(const struct memcg_roots *rt, const struct found *fd, uint64_t pinned,
		   uint64_t enough, struct memcg_view *v)
{
	static const char *const keys[] = { "hierarchical_memory_limit", "hierarchical_memsw_limit",
					    "total_rss", "total_cache", "total_shmem" };
	uint64_t st[5] = { NO_LIMIT, NO_LIMIT, 0, 0, 0 }, usage;
	char path[PATH_MAX + 16];
	int r;

	/*
	 * memory.stat is slow to read in v1 (the kernel sums the hierarchy): first each
	 * level's own limit and usage, enough where every level has room enough anyway
	 */
	if (enough != UINT64_MAX) {
		char dir[PATH_MAX];
		uint64_t lim, use;
		bool all = true;

		/* the root has no limit, and its usage is summed over the whole machine */
		snprintf(dir, sizeof(dir), "%s", fd->dir);
		for (unsigned n = 0; all && strlen(dir) > fd->root_len && n < MEMCG_LEVELS; n++) {
			if (read_u64(dir, "memory.limit_in_bytes", &lim) < 0)
				all = false;
			else if (lim >= V1_NO_LIMIT)
				;	/* no limit at this level */
			else if (read_u64(dir, "memory.usage_in_bytes", &use) < 0 ||
				 !level_enough(lim, use, enough))
				all = false;
			else	/* the least of the levels' lower bounds */
				level_headroom(lim, use, 0, 0, 0, false, pinned, v);
			*strrchr(dir, '/') = 0;
		}
		if (all)
			return 0;
		v->limit_bytes = v->headroom_bytes = NO_LIMIT;	/* the whole reading decides */
	}
	snprintf(path, sizeof(path), "%s/memory.stat", fd->dir);
	if ((r = read_kv(path, keys, st, 5)) < 0)
		return r;
	if (st[0] >= V1_NO_LIMIT)
		return 0;
	if ((r = read_u64(fd->dir, "memory.usage_in_bytes", &usage)) < 0)
		return r;
	/* memory+swap limited to the memory limit: no swap for this cgroup */
	level_headroom(st[0], usage, st[2], st[3], st[4], st[1] > st[0] && swap_free(rt), pinned, v);
	return 0;
}

static int read_found(const struct memcg_roots *r, const struct found *fd, uint64_t pinned,
		      uint64_t enough, struct memcg_view *v)
{
	memset(v, 0, sizeof(*v));
	v->version = fd->version;
	v->limit_bytes = v->headroom_bytes = NO_LIMIT;
	snprintf(v->path, sizeof(v->path), "%s", fd->dir[fd->root_len] ? fd->dir + fd->root_len : "/");
	if (fd->version == 2)
		return read_v2(r, fd, pinned, enough, v);
	if (fd->version == 1)
		return read_v1(r, fd, pinned, enough, v);
	return 0;
}

int memcg_read(const struct memcg_roots *r, uint64_t pinned, struct memcg_view *v)
{
	struct found fd;
	int err = find(r, &fd);

	if (err < 0)
		return err;
	return read_found(r, &fd, pinned, UINT64_MAX, v);
}

/*
 * The live cgroup, under @lock: found at the first call of a process
 * (fork_gen tells a fork child) or after memcg_forget(); @no_limit_until:
 * the last reading found no limit, which holds until then (MEMCG_LIMITS_MS);
 * @events, @next_ns: memcg_pressure()'s last count and when it reads next.
 */
static struct {
	pthread_mutex_t lock;
	bool known;
	uint32_t fork_gen;
	struct found fd;
	uint64_t no_limit_until, events, next_ns;
	/* the last full reading under a limit, for memcg_headroom_atleast() */
	struct memcg_view last;
	uint64_t last_until, last_pinned;
} live = { .lock = PTHREAD_MUTEX_INITIALIZER };

/*
 * live.no_limit_until as the pin paths read it without the lock, and the
 * fork generation it holds for: a miss where no cgroup limits the process
 * pays one clock read for the whole check.
 */
static _Atomic uint64_t unlimited_until;
static _Atomic uint32_t unlimited_gen;

bool memcg_unlimited(void)
{
	uint64_t until = atomic_load_explicit(&unlimited_until, memory_order_acquire);
	struct timespec ts;

	if (!until || atomic_load_explicit(&unlimited_gen, memory_order_relaxed) !=
		      atomic_load_explicit(&odpx_fork_gen, memory_order_relaxed))
		return false;
	/* the coarse clock (a tick behind at most) costs a miss less than the precise one */
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec < until;
}

static const struct memcg_roots live_roots = { .proc = "/proc", .sys = "/sys" };

static int live_find_locked(void)
{
	uint32_t gen = atomic_load_explicit(&odpx_fork_gen, memory_order_relaxed);
	int r;

	if (live.known && live.fork_gen == gen)
		return 0;
	live.fork_gen = gen;
	live.no_limit_until = 0;
	live.last_until = 0;
	live.events = UINT64_MAX;	/* no look yet */
	live.next_ns = 0;
	if ((r = find(&live_roots, &live.fd)) < 0)
		live.fd.version = 0;
	live.known = true;
	return r;
}

int memcg_headroom_atleast(uint64_t pinned, uint64_t enough, uint64_t *bytes,
			   struct memcg_view *v)
{
	struct memcg_view mine;
	uint64_t now = odpx_now_ns();
	int r;

	if (!v)
		v = &mine;
	pthread_mutex_lock(&live.lock);
	r = live_find_locked();
	if (r == 0 && (!live.fd.version || now < live.no_limit_until)) {
		memset(v, 0, sizeof(*v));
		v->version = live.fd.version;
		v->limit_bytes = v->headroom_bytes = NO_LIMIT;
		if (!live.fd.version)
			live.no_limit_until = now + MEMCG_LIMITS_MS * 1000000ULL;
	} else if (r == 0 && enough != UINT64_MAX && now < live.last_until &&
		   live.last.headroom_bytes >= enough +
			(pinned > live.last_pinned ? pinned - live.last_pinned : 0)) {
		/*
		 * The last reading, less its own pins since, still leaves enough: no
		 * file is read.  What the application charged meanwhile (at most
		 * MEMCG_REUSE_MS of it) is what the margin is for.
		 */
		*v = live.last;
		v->headroom_bytes -= pinned > live.last_pinned ? pinned - live.last_pinned : 0;
	} else if (r == 0 && (r = read_found(&live_roots, &live.fd, pinned, enough, v)) == 0) {
		if (v->limit_bytes == NO_LIMIT)
			live.no_limit_until = now + MEMCG_LIMITS_MS * 1000000ULL;
		/* a cheap reading's headroom is a lower bound (usage for unreclaimable): kept too */
		live.last_until = v->limit_bytes != NO_LIMIT ? now + MEMCG_REUSE_MS * 1000000ULL : 0;
		live.last = *v;
		live.last_pinned = pinned;
	}
	atomic_store_explicit(&unlimited_gen, live.fork_gen, memory_order_relaxed);
	atomic_store_explicit(&unlimited_until, r == 0 && v->limit_bytes == NO_LIMIT ?
			      live.no_limit_until : 0, memory_order_release);
	pthread_mutex_unlock(&live.lock);
	if (r < 0)
		return r;
	*bytes = v->headroom_bytes;
	return 0;
}

int memcg_headroom(uint64_t pinned, uint64_t *bytes, struct memcg_view *v)
{
	return memcg_headroom_atleast(pinned, UINT64_MAX, bytes, v);
}

/* The cgroup's reclaim events: v2 high + max + oom of every level, v1 failcnt. */
static uint64_t events_locked(void)
{
	static const char *const keys[] = { "high", "max", "oom" };
	char dir[PATH_MAX], path[PATH_MAX + 16];
	uint64_t sum = 0;

	if (live.fd.version == 1) {
		uint64_t c = 0;

		read_u64(live.fd.dir, "memory.failcnt", &c);
		return c;
	}
	snprintf(dir, sizeof(dir), "%s", live.fd.dir);
	for (unsigned n = 0; strlen(dir) > live.fd.root_len && n < MEMCG_LEVELS; n++) {
		uint64_t ev[3] = { 0, 0, 0 };

		snprintf(path, sizeof(path), "%s/memory.events", dir);
		if (read_kv(path, keys, ev, 3) == 0)
			sum += ev[0] + ev[1] + ev[2];
		*strrchr(dir, '/') = 0;
	}
	return sum;
}

bool memcg_pressure(uint64_t pinned)
{
	uint64_t now = odpx_now_ns(), ev, room;
	struct memcg_view v;
	bool rose;

	pthread_mutex_lock(&live.lock);
	if (live_find_locked() < 0 || !live.fd.version || now < live.next_ns ||
	    now < live.no_limit_until) {
		pthread_mutex_unlock(&live.lock);
		return false;
	}
	live.next_ns = now + MEMCG_PRESSURE_MS * 1000000ULL;
	ev = events_locked();
	rose = live.events != UINT64_MAX && ev > live.events;	/* the first look sets the base */
	live.events = ev;
	pthread_mutex_unlock(&live.lock);
	/* without swap an unpinned page stays charged: no pressure that a release relieves */
	if (memcg_headroom(pinned, &room, &v) < 0 || !v.swap)
		return false;
	return rose || room == 0;
}

/*
 * fork: a thread in the middle of a reading holds live.lock, which the
 * child's first open (memcg_forget()) would wait for forever.  The lock is
 * taken last in ctx.c's prepare (no holder of it takes another lock) and
 * given back on both sides.
 */
void memcg_atfork_prepare(void)
{
	pthread_mutex_lock(&live.lock);
}

void memcg_atfork_done(void)
{
	pthread_mutex_unlock(&live.lock);
}

void memcg_forget(void)
{
	pthread_mutex_lock(&live.lock);
	live.known = false;
	pthread_mutex_unlock(&live.lock);
}
