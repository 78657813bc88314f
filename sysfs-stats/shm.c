// SPDX-License-Identifier: MIT
/*
 * shm.c - the reader of the stats segments (segment.h: the layout, whose a
 * segment is, the protocol).  The library links the sums too: its writer
 * reads its own counters the same way.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "counters.h"
#include "segment.h"

/*
 * The reason of the copy @h under its sequence count (segment.h): the count
 * read again after the text, the header again until they agree; "" if never.
 */
static void read_reason(int fd, struct seg_hdr *h, char *out, size_t n)
{
	uint32_t s1, s2;

	out[0] = 0;
	for (int tries = 0; tries < 100; tries++) {
		s1 = atomic_load_explicit(&h->reason_seq, memory_order_relaxed);
		if (!s1)
			return;
		if (!(s1 & 1) && pread(fd, &s2, sizeof(s2), offsetof(struct seg_hdr, reason_seq)) ==
		    (ssize_t)sizeof(s2) && s2 == s1) {
			/* printable ASCII only: shown raw on a terminal, and in JSON */
			h->reason[sizeof(h->reason) - 1] = 0;
			for (char *c = h->reason; *c; c++)
				if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e)
					*c = '?';
			snprintf(out, n, "%s", h->reason);
			return;
		}
		sched_yield();
		if (pread(fd, h, sizeof(*h), 0) != (ssize_t)sizeof(*h))
			return;
	}
}

/*
 * One segment, read into a copy (a file that shrinks meanwhile is a short
 * read, not a SIGBUS).  -EAGAIN: being made or closed; -ESTALE: not @pid's
 * (inherited from its writer); -EPROTO: another layout.
 */
static int seg_read_fd(int fd, pid_t pid, struct odpx_seg_info *out)
{
	struct stat sb;
	struct seg_hdr *h;
	char *p;
	int r = 0;

	if (fstat(fd, &sb) < 0)
		return -errno;
	if (S_ISREG(sb.st_mode) && !sb.st_size)
		return -EAGAIN;	/* not sized yet */
	if (!S_ISREG(sb.st_mode) || sb.st_size != SEG_BYTES)
		return -EPROTO;
	/* aligned as the writer's mapping: the shards are read in place */
	if (!(p = aligned_alloc(4096, SEG_BYTES)))
		return -ENOMEM;
	h = (struct seg_hdr *)p;
	if (pread(fd, p, SEG_BYTES, 0) != (ssize_t)SEG_BYTES ||
	    atomic_load_explicit(&h->magic, memory_order_relaxed) != ODPX_SHM_MAGIC)
		r = -EAGAIN;	/* being made, or closed */
	else if (h->version != ODPX_SHM_VERSION)
		r = -EPROTO;
	else if (h->pid != pid)
		r = -ESTALE;
	if (r)
		goto out;
	memset(out, 0, sizeof(*out));
	out->pid = pid;
	out->n = h->n;
	out->born_ns = h->born_ns;
	out->mode = (enum odpx_mode)h->mode;
	out->backend = (enum odpx_backend)h->backend;
	out->lim = (struct odpx_limits){ h->max_pinned_bytes, h->max_entries, h->max_unused_bytes,
					 h->max_entry_bytes };
	out->lim_source = h->lim_source;
	out->idle_ms = h->idle_ms;
	const struct stat_shard *shards = (const void *)(p + SEG_HDR_BYTES);

	stats_region_sum(shards, (const struct cold_stats *)(p + SEG_COLD_OFF), &out->st);
#define G(f) atomic_load_explicit(&h->f, memory_order_relaxed)
	out->st.entries = G(entries);
	out->st.pinned_bytes = G(pinned_bytes);	/* published at each change */
	out->st.unused_bytes = stats_region_unused(shards, out->st.pinned_bytes);	/* live */
	out->st.watch_vmas = G(watch_vmas);
	out->st.watch_regs = G(watch_regs);
	out->st.fabric_subscriptions = G(fabric_subscriptions);
	out->st.fabric_bytes = G(fabric_bytes);
	out->st.fabric_notifies = G(fabric_notifies);
	out->st.thrash_state = G(thrash_state);
	out->st.thrash_metric = G(thrash_metric);
	out->st.thrash_value_milli = G(thrash_value_milli);
	out->st.thrash_changes = G(thrash_changes);
#undef G
	out->st.unsafe_no_monitor = !!(h->flags & ODPX_OPEN_UNSAFE_NO_MONITOR);
	read_reason(fd, h, out->reason, sizeof(out->reason));	/* last: it may read @h again */
out:
	free(p);
	return r;
}

#define LINK_PREFIX "/memfd:" ODPX_SHM_PREFIX

/* @s already in @out[0..@found): one segment at two descriptors (dup, or a reader's open) */
static bool seen(const struct odpx_seg_info *out, int found, const struct odpx_seg_info *s)
{
	for (int i = found - 1; i >= 0 && out[i].pid == s->pid; i--)
		if (out[i].n == s->n && out[i].born_ns == s->born_ns)
			return true;
	return false;
}

/*
 * The segments of @pid in the descriptor table @dir into @out[*@found...],
 * at most @max in all; *@err: the first error of one that could not be
 * read.  Returns the descriptors seen, or -errno of the table.
 */
static int scan_fds(const char *dir, pid_t pid, struct odpx_seg_info *out, int max, int *found,
		    int *err)
{
	char link[300];
	struct dirent *d;
	int fds = 0;
	DIR *dp;

	if (!(dp = opendir(dir)))
		return -errno;
	while (*found < max && (d = readdir(dp))) {
		ssize_t n;
		int fd, r;

		n = readlinkat(dirfd(dp), d->d_name, link, sizeof(link) - 1);
		if (n <= 0)
			continue;
		link[n] = 0;
		fds++;
		if (strncmp(link, LINK_PREFIX, sizeof(LINK_PREFIX) - 1))
			continue;
		/* a FIFO opened at "/memfd:odpx..." and removed reads the same: never wait */
		if ((fd = openat(dirfd(dp), d->d_name, O_RDONLY | O_CLOEXEC | O_NONBLOCK)) < 0) {
			r = errno == ENOENT ? -EAGAIN : -errno;	/* closed since the readlink */
		} else {
			r = seg_read_fd(fd, pid, &out[*found]);
			close(fd);
		}
		if (r == 0 && !seen(out, *found, &out[*found]))
			++*found;
		else if (r && r != -ESTALE && r != -EAGAIN && !*err)
			*err = r;
	}
	closedir(dp);
	return fds;
}

/* As scan_fds(): the main thread's table, empty once it exited, else another thread's */
static int scan_pid(pid_t pid, struct odpx_seg_info *out, int max, int *found, int *err)
{
	char dir[64];
	struct dirent *d;
	DIR *dp;
	int r;

	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
	if ((r = scan_fds(dir, pid, out, max, found, err)) != 0 || *found >= max)
		return r;
	snprintf(dir, sizeof(dir), "/proc/%d/task", (int)pid);
	if (!(dp = opendir(dir)))
		return 0;
	while (r <= 0 && (d = readdir(dp))) {
		char tdir[96];

		snprintf(tdir, sizeof(tdir), "%s/%.20s/fd", dir, d->d_name);
		if (d->d_name[0] != '.' && atoi(d->d_name) != pid)
			r = scan_fds(tdir, pid, out, max, found, err);
	}
	closedir(dp);
	return 0;
}

static int cmp_seg(const void *a, const void *b)
{
	const struct odpx_seg_info *x = a, *y = b;

	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	return x->n < y->n ? -1 : x->n > y->n;
}

int odpx_seg_scan(pid_t pid, struct odpx_seg_info *out, int max)
{
	int found = 0, err = 0, r;
	struct dirent *d;
	DIR *dp;

	/* a process gone has no segments: whether it is gone is odpstat's to say */
	if (pid && (r = scan_pid(pid, out, max, &found, &err)) < 0 && r != -ENOENT)
		return r;
	if (!pid) {
		uid_t me = geteuid();

		if (!(dp = opendir("/proc")))
			return -errno;
		/* the caller's own processes; one that ends meanwhile is skipped */
		while (found < max && (d = readdir(dp))) {
			char *end;
			long p = strtol(d->d_name, &end, 10);
			struct stat sb;

			if (p > 0 && !*end && !fstatat(dirfd(dp), d->d_name, &sb, 0) &&
			    sb.st_uid == me)
				scan_pid((pid_t)p, out, max, &found, &err);
		}
		closedir(dp);
	}
	if (found > 1)	/* out may be NULL when max is 0 */
		qsort(out, (size_t)found, sizeof(*out), cmp_seg);
	return !found && err ? err : found;
}

/*
 * Exact when no reference changes meanwhile; a sum may see one thread's take
 * before another's release, hence the clamp.  @pinned: read under ctx->lock,
 * or from another process's gauge.
 */
uint64_t stats_region_unused(const struct stat_shard *shards, uint64_t pinned)
{
	uint64_t released = 0, taken = 0;

	for (int i = 0; i <= STAT_SHARDS; i++) {
		released = ctr_sat_add(released, __atomic_load_n(&shards[i].released, __ATOMIC_RELAXED));
		taken = ctr_sat_add(taken, __atomic_load_n(&shards[i].taken, __ATOMIC_RELAXED));
	}
	if (released <= taken)
		return 0;
	return released - taken > pinned ? pinned : released - taken;
}

void stats_region_sum(const struct stat_shard *shards, const struct cold_stats *cs,
		      struct odpx_stats *st)
{
#define SH(f) st->f = ctr_sat_add(st->f, __atomic_load_n(&shards[i].f, __ATOMIC_RELAXED))
	for (int i = 0; i <= STAT_SHARDS; i++) {
		SH(hits);
		SH(hits_slow);
		SH(deregs);
		SH(prefetch_queued);
	}
#undef SH
	st->hits = ctr_sat_add(st->hits, st->hits_slow);
#define X(f) st->f = atomic_load_explicit(&cs->f, memory_order_relaxed);
	COLD_STATS(X)
#undef X
}
