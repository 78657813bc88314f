// SPDX-License-Identifier: MIT
/*
 * shm.c - the reader side of the stats segments (segment.h: the layout and
 * what makes a segment live): find a process's segments, read a copy of
 * each, sum their counters.  The library links it too: its writer follows
 * the same removal protocol (odpx_seg_unlink_dead) and sums its own
 * counters the same way.  A segment of another PID namespace (one that
 * shares /dev/shm) is not read, its PID not being ours, and is removed only
 * when no one holds its lock; anything else under the odpx.<pid>.<n> names
 * that is not live is skipped, and unlinked when it is the caller's.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "counters.h"
#include "segment.h"

uint64_t proc_start_time(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long long v = 0;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	if (!(p = strrchr(buf, ')')))
		return 0;
	/* after ") " come fields 3.. : state is 3, starttime 22 */
	p += 2;
	for (int f = 3; f < 22 && p; f++) {
		p = strchr(p, ' ');
		if (p)
			p++;
	}
	if (p)
		v = strtoull(p, NULL, 10);
	return v;
}

uint64_t odpx_pidns(void)
{
	struct stat sb;

	return stat("/proc/self/ns/pid", &sb) == 0 ? (uint64_t)sb.st_ino : 0;
}

/*
 * The file at @path is a segment of another PID namespace (its header says
 * so): its PID is not one of ours, to look up or to call dead.  Only a
 * regular file of our own uid can be one: anyone may plant a FIFO at our
 * name, and opening one without O_NONBLOCK waits for a writer forever.
 */
bool odpx_seg_foreign(const char *path)
{
	struct seg_hdr h;
	struct stat sb;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	bool foreign = false;

	if (fd < 0)
		return false;
	if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_uid == geteuid() &&
	    pread(fd, &h, sizeof(h), 0) == (ssize_t)sizeof(h) &&
	    atomic_load_explicit(&h.magic, memory_order_relaxed) == ODPX_SHM_MAGIC &&
	    h.version == ODPX_SHM_VERSION)
		foreign = h.pidns != odpx_pidns();
	close(fd);
	return foreign;
}

/* A regular file of ODPX_SHM_DIR named as a segment: its path, status and PID. */
static bool seg_file(const struct dirent *d, char path[300], struct stat *sb, pid_t *pid)
{
	const char *name = d->d_name + sizeof(ODPX_SHM_PREFIX) - 1;
	int p, used = 0;
	unsigned x;

	if (strncmp(d->d_name, ODPX_SHM_PREFIX, sizeof(ODPX_SHM_PREFIX) - 1) ||
	    sscanf(name, "%d.%u%n", &p, &x, &used) != 2 || name[used] || p <= 0)
		return false;
	*pid = p;
	snprintf(path, 300, ODPX_SHM_DIR "/%s", d->d_name);
	return lstat(path, sb) == 0 && S_ISREG(sb->st_mode);
}

/* The uid owning /proc/<pid>, (uid_t)-1 if none. */
static uid_t proc_uid(pid_t pid)
{
	char path[32];
	struct stat sb;

	snprintf(path, sizeof(path), "/proc/%d", (int)pid);
	return stat(path, &sb) == 0 ? sb.st_uid : (uid_t)-1;
}

static bool pid_alive(pid_t pid)
{
	return kill(pid, 0) == 0 || errno == EPERM;
}

/* 1: a process holds a lock on @fd's file (its writer), 0: none, -errno: unknown */
static int lock_held(int fd)
{
	struct flock lk = { .l_type = F_WRLCK, .l_whence = SEEK_SET };

	if (fcntl(fd, F_OFD_GETLK, &lk) < 0)
		return -errno;
	return lk.l_type != F_UNLCK;
}

/*
 * Every remover's protocol: the name is unlinked only while the remover
 * holds the write lock of the file it names, and still names it.  No one
 * then names another file there before the unlink (that takes this file's
 * removal first), so the segment removed is the one judged dead, never a
 * live one named meanwhile by a process that got the PID.  The lock also
 * tells a dead writer from a live one: a writer's read lock refuses ours.
 */
int odpx_seg_unlink_dead(const char *path)
{
	struct flock lk = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
	struct seg_hdr h;
	struct stat sb, now;
	int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK), r;

	if (fd < 0)
		return -errno;
	if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode) || sb.st_uid != geteuid())
		r = -EPERM;
	else if (fcntl(fd, F_OFD_SETLK, &lk) < 0)
		r = errno == EAGAIN || errno == EACCES ? 0 : -errno;
	else if (pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) ||
		 h.version != ODPX_SHM_VERSION || h.hdr_bytes != SEG_HDR_BYTES)
		r = -EPROTO;	/* another version's writer holds no lock */
	else if (lstat(path, &now) < 0 || now.st_ino != sb.st_ino || now.st_dev != sb.st_dev)
		r = -ENOENT;	/* removed or replaced since the open */
	else
		r = unlink(path) < 0 ? -errno : 1;
	close(fd);
	return r;
}

#define SEG_MAX_BYTES (1u << 20)	/* ours are a few pages: more is not a segment of ours */

/*
 * The reason, under the writer's sequence count (segment.h): the header read
 * again until the count is even, non-zero and the same after the text.  A
 * text never settled reads "".
 */
static void read_reason(int fd, char *out, size_t n)
{
	struct seg_hdr h;
	uint32_t s2;

	out[0] = 0;
	for (int tries = 0; tries < 100; tries++) {
		if (pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h))
			return;
		uint32_t s1 = atomic_load_explicit(&h.reason_seq, memory_order_relaxed);
		if (!s1)
			return;
		if (s1 & 1) {
			sched_yield();
			continue;
		}
		if (pread(fd, &s2, sizeof(s2), offsetof(struct seg_hdr, reason_seq)) !=
		    (ssize_t)sizeof(s2))
			return;
		if (s2 == s1) {
			/* printable ASCII only: shown raw on a terminal, and in JSON */
			h.reason[sizeof(h.reason) - 1] = 0;
			for (char *c = h.reason; *c; c++)
				if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e)
					*c = '?';
			snprintf(out, n, "%s", h.reason);
			return;
		}
	}
}

/*
 * One segment, read into a copy: every field is fetched once and checked
 * there, and a file that shrinks under us is a short read, not a SIGBUS.
 * -EAGAIN: not a whole segment (being closed); -ESTALE: its writer is gone
 * (@locked: a /dev/shm file, whose writer holds its lock); -EPROTO: not a
 * layout of this version (or offsets not aligned for the structs read
 * there).
 */
static int seg_read_fd(int fd, pid_t pid, bool locked, struct odpx_seg_info *out)
{
	struct stat sb;
	const struct seg_hdr *h;
	ssize_t got;
	char *p;
	int r = 0;

	if (fstat(fd, &sb) < 0)
		return -errno;
	if (!S_ISREG(sb.st_mode))
		return -EPROTO;	/* a memfd is regular too */
	if ((size_t)sb.st_size < SEG_HDR_BYTES)
		return -EAGAIN;	/* not whole: no writer names such a file */
	if ((uint64_t)sb.st_size > SEG_MAX_BYTES)
		return -EPROTO;
	/* the copy aligned as the shards are: their offset is checked against that */
	if (!(p = aligned_alloc(_Alignof(struct stat_shard), ((size_t)sb.st_size + 63) & ~(size_t)63)))
		return -ENOMEM;
	got = pread(fd, p, (size_t)sb.st_size, 0);
	if (got < (ssize_t)SEG_HDR_BYTES) {
		r = got < 0 ? -errno : -EAGAIN;
		goto out;
	}
	h = (const struct seg_hdr *)p;
	if (atomic_load_explicit(&((struct seg_hdr *)h)->magic, memory_order_relaxed) != ODPX_SHM_MAGIC) {
		r = -EAGAIN;	/* being created, or closed */
		goto out;
	}
	if (h->version != ODPX_SHM_VERSION || h->hdr_bytes != SEG_HDR_BYTES ||
	    h->shard_bytes != sizeof(struct stat_shard) || h->nshards != STAT_SHARDS + 1 ||
	    h->cold_bytes != sizeof(struct cold_stats) || h->total_bytes > (uint64_t)got ||
	    (uint64_t)h->cold_off + h->cold_bytes > h->total_bytes ||
	    h->shards_off < SEG_HDR_BYTES ||
	    h->shards_off % _Alignof(struct stat_shard) || h->cold_off % _Alignof(struct cold_stats) ||
	    (uint64_t)h->shards_off + (uint64_t)h->shard_bytes * h->nshards > h->cold_off) {
		r = -EPROTO;	/* another odpx version's layout */
		goto out;
	}
	if (h->pidns != odpx_pidns()) {
		r = -EXDEV;	/* another PID namespace's: not ours to read or remove */
		goto out;
	}
	/* no lock: the writer exited or exec()ed; no OFD locks here (-EINVAL): the PID says */
	if ((locked && lock_held(fd) == 0) || h->pid != pid || !pid_alive(pid) ||
	    proc_start_time(pid) != h->start_time) {
		r = -ESTALE;
		goto out;
	}
	memset(out, 0, sizeof(*out));
	out->pid = pid;
	out->n = h->n;
	out->born_ns = h->born_ns;
	out->mode = (enum odpx_mode)h->mode;
	out->backend = (enum odpx_backend)h->backend;
	out->tick_ms = h->tick_ms;
	out->lim = (struct odpx_limits){ h->max_pinned_bytes, h->max_entries, h->max_unused_bytes,
					 h->max_entry_bytes };
	out->lim_source = h->lim_source;
	out->idle_ms = h->idle_ms;
	read_reason(fd, out->reason, sizeof(out->reason));
	const struct stat_shard *shards = (const void *)(p + h->shards_off);

	stats_region_sum(shards, (const struct cold_stats *)(p + h->cold_off), &out->st);
#define G(f) atomic_load_explicit(&((struct seg_hdr *)h)->f, memory_order_relaxed)
	out->st.entries = G(entries);
	out->st.pinned_bytes = G(pinned_bytes);	/* published at each change */
	out->st.unused_bytes = stats_region_unused(shards, out->st.pinned_bytes);	/* live */
	out->st.watch_vmas = G(watch_vmas);
	out->st.watch_regs = G(watch_regs);
	out->st.thrash_state = G(thrash_state);
	out->st.thrash_metric = G(thrash_metric);
	out->st.thrash_value_milli = G(thrash_value_milli);
	out->st.thrash_changes = G(thrash_changes);
#undef G
	out->st.unsafe_no_monitor = !!(h->flags & ODPX_OPEN_UNSAFE_NO_MONITOR);
out:
	free(p);
	return r;
}

/* memfd segments of @pid: links in /proc/<pid>/fd to "/memfd:odpx.<pid>.<n> (deleted)" */
static int scan_memfds(pid_t pid, struct odpx_seg_info *out, int max, int found)
{
	char dir[64], link[300], path[400], want[64];
	struct dirent *d;
	DIR *dp;

	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
	snprintf(want, sizeof(want), "/memfd:" ODPX_SHM_PREFIX "%d.", (int)pid);
	if (!(dp = opendir(dir)))
		return found;
	while ((d = readdir(dp)) && found < max) {
		ssize_t n;
		int fd;
		snprintf(path, sizeof(path), "%s/%s", dir, d->d_name);
		n = readlink(path, link, sizeof(link) - 1);
		if (n <= 0)
			continue;
		link[n] = 0;
		if (strncmp(link, want, strlen(want)))
			continue;
		if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)) < 0)
			continue;
		if (seg_read_fd(fd, pid, false, &out[found]) == 0)
			found++;
		close(fd);
	}
	closedir(dp);
	return found;
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
	struct dirent *d;
	DIR *dp = opendir(ODPX_SHM_DIR);
	uid_t me = geteuid();
	int found = 0, first_err = 0;

	if (dp) {
		while ((d = readdir(dp)) && found < max) {
			char path[300];
			struct stat sb, fsb;
			pid_t p;
			int fd, r;

			if (!seg_file(d, path, &sb, &p) || (pid && p != pid))
				continue;
			if (!pid && sb.st_uid != me)
				continue;	/* all: the caller's own processes */
			if (pid && sb.st_uid != proc_uid(p))
				continue;	/* one process: only a file of its own user is its */
			/* a dead PID is stale only in our PID namespace (the header's) */
			fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
			if (fd < 0) {
				if (!first_err)
					first_err = -errno;
				continue;
			}
			/* the name may have been replaced since the lstat (by a FIFO, say) */
			if (fstat(fd, &fsb) < 0 || fsb.st_ino != sb.st_ino || fsb.st_dev != sb.st_dev ||
			    fsb.st_uid != sb.st_uid) {
				close(fd);
				continue;
			}
			r = seg_read_fd(fd, p, true, &out[found]);
			close(fd);
			if (r == 0)
				found++;
			else if (r == -ESTALE && sb.st_uid == me)
				odpx_seg_unlink_dead(path);
			else if (r != -ESTALE && r != -EAGAIN && r != -EXDEV && !first_err)
				first_err = r;
		}
		closedir(dp);
	}
	if (pid && found < max)
		found = scan_memfds(pid, out, max, found);
	if (found > 1)	/* out may be NULL when max is 0 */
		qsort(out, (size_t)found, sizeof(*out), cmp_seg);
	if (!found && first_err)
		return first_err;
	return found;
}

int odpx_seg_clean_stale(void)
{
	struct dirent *d;
	DIR *dp = opendir(ODPX_SHM_DIR);
	uid_t me = geteuid();
	int cleaned = 0;

	if (!dp)
		return 0;
	while ((d = readdir(dp))) {
		char path[300];
		struct stat sb;
		pid_t p;
		int r;

		if (!seg_file(d, path, &sb, &p) || sb.st_uid != me)
			continue;
		r = odpx_seg_unlink_dead(path);
		/* another version's segment (no lock): its PID, as that version judged it */
		if (r == -EPROTO && !pid_alive(p) && !odpx_seg_foreign(path) && unlink(path) == 0)
			r = 1;
		cleaned += r == 1;
	}
	closedir(dp);
	return cleaned;
}

/*
 * The unused bytes: exact when no reference changes meanwhile, and within
 * [0, pinned bytes] always (a sum may see one thread's take before another's
 * release, so a shard's own difference may be negative: the releases and
 * the takes are summed apart).  @pinned: the pinned bytes, read under
 * ctx->lock or, in another process, from the segment's gauge.
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
