// SPDX-License-Identifier: MIT
/*
 * monitor.c - the userfaultfd monitor: mmu notifiers in user space.
 *
 * One userfaultfd per process watches the VMAs that hold cached
 * registrations.  It is registered write-protect only (with WP_ASYNC where
 * the kernel has it) and never write-protects anything, so no page fault
 * ever reaches user space; it exists for its events: UNMAP (munmap, MAP_FIXED
 * over, brk shrink, mremap shrink), REMOVE (MADV_DONTNEED/FREE/REMOVE) and
 * REMAP (mremap move).  No EVENT_FORK: a child's VMAs are not registered, so
 * a child never blocks on a monitor it does not have.
 *
 * The kernel keeps a munmap() caller blocked until its event has been
 * read() from the uffd - dequeued, not handled.  So the reader polls outside
 * the lock, then takes mon.lock, makes every context's seqcount odd, reads
 * until the queue is empty, marks the affected entries DEAD, makes the
 * seqcounts even and unlocks.  When munmap() returns, no lookup can return a
 * registration of the old pages.
 *
 * The reader thread does nothing else: it never allocates, frees, munmaps,
 * madvises or unpins (free() or an unpin may trim a watched heap and would
 * wait for the reader itself).  Dead entries go on their context's dead
 * stack; its engine unpins them.
 *
 * Where it can, the monitor has the reads done by a process of its own,
 * odpx-uffd (helper.h, main-helper.c), which stands for "lock" with a gate
 * word that every lock-free lookup checks and every mon_lock() drains; the
 * reader thread then applies what the helper publishes.  Should the helper
 * fail to start or die, the thread reads again (counted in
 * helper_fallbacks); events the helper may have dequeued and not published
 * are then assumed to cover everything.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <signal.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../lib/internal.h"
#include "monitor.h"

#ifndef UFFD_FEATURE_WP_ASYNC
#define UFFD_FEATURE_WP_ASYNC (1 << 15)
#endif
#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif
#ifndef USERFAULTFD_IOC_NEW
#define USERFAULTFD_IOC_NEW _IO(0xAA, 0x00)
#endif

/* the longest a burst of events delays the unpinning of what it killed */
#define KICK_MAX_NS 1000000ULL
/*
 * While spinning, yield the CPU at every YIELD_EVERY-th empty poll, and once
 * after each read: a thread that shares our CPU (the munmap caller we just
 * woke, above all) runs soon, and a reader alone on its CPU does not pay a
 * sched_yield() per poll (about 2 us per cross-CPU munmap, measured).
 */
#define YIELD_EVERY 16

struct monitor mon = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.uffd = -1,
	.stopfd = -1,
	.shfd = -1,
	.helper_pidfd = -1,
	.lifeline = -1,
	.doorbell = -1,
};

extern const unsigned char odpx_helper_image[], odpx_helper_image_end[];	/* helper-image.S */

const char *uffd_mode_str(enum uffd_mode m)
{
	switch (m) {
	case UFFD_MODE_WP_ASYNC: return "wp-async";
	case UFFD_MODE_WP: return "wp";
	case UFFD_MODE_MISSING: return "missing";
	default: return "none";
	}
}

/* A new userfaultfd: the syscall in user-mode-only form, else /dev/userfaultfd. */
static int uffd_new(void)
{
	int fd = syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);

	if (fd < 0 && errno == EINVAL)	/* kernel before 5.11 */
		fd = syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
	if (fd >= 0)
		return fd;
	int err = errno;
	int dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
	if (dev >= 0) {
		fd = ioctl(dev, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
		err = errno;
		close(dev);
		if (fd >= 0)
			return fd;
	}
	return -err;
}

/*
 * Open the uffd in the best mode the kernel offers, or the one ODPX_UFFD_MODE
 * forces (wp-async, wp, missing): each fallback is tested on this kernel.
 */
static int uffd_open(void)
{
	const uint64_t ev = UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMOVE |
			    UFFD_FEATURE_EVENT_REMAP;
	struct uffdio_api api = { .api = UFFD_API };
	const char *force = getenv("ODPX_UFFD_MODE");
	enum uffd_mode want = UFFD_MODE_NONE;
	int fd = uffd_new();

	if (fd < 0) {
		snprintf(mon.why, sizeof(mon.why), "userfaultfd: %s", strerror(-fd));
		return fd;
	}
	if (ioctl(fd, UFFDIO_API, &api) < 0) {	/* probe: features offered */
		int err = -errno;
		close(fd);
		snprintf(mon.why, sizeof(mon.why), "UFFDIO_API: %s", strerror(-err));
		return err;
	}
	close(fd);
	uint64_t have = api.features;
	if ((have & ev) != ev) {
		snprintf(mon.why, sizeof(mon.why), "userfaultfd lacks UNMAP/REMOVE/REMAP events");
		return -EOPNOTSUPP;
	}
	if (force && !strcmp(force, "wp-async"))
		want = UFFD_MODE_WP_ASYNC;
	else if (force && !strcmp(force, "wp"))
		want = UFFD_MODE_WP;
	else if (force && !strcmp(force, "missing"))
		want = UFFD_MODE_MISSING;
	else if ((have & UFFD_FEATURE_WP_ASYNC) && (have & UFFD_FEATURE_PAGEFAULT_FLAG_WP))
		want = UFFD_MODE_WP_ASYNC;
	else if (have & UFFD_FEATURE_PAGEFAULT_FLAG_WP)
		want = UFFD_MODE_WP;
	else
		want = UFFD_MODE_MISSING;

	api.api = UFFD_API;
	api.features = ev;
	if (want == UFFD_MODE_WP_ASYNC)
		api.features |= UFFD_FEATURE_WP_ASYNC | UFFD_FEATURE_PAGEFAULT_FLAG_WP;
	else if (want == UFFD_MODE_WP)
		api.features |= UFFD_FEATURE_PAGEFAULT_FLAG_WP;
	api.ioctls = 0;
	fd = uffd_new();
	if (fd < 0)
		return fd;
	if (ioctl(fd, UFFDIO_API, &api) < 0) {
		int err = -errno;
		close(fd);
		snprintf(mon.why, sizeof(mon.why), "UFFDIO_API(%s): %s",
			 uffd_mode_str(want), strerror(-err));
		return err;
	}
	mon.mode = want;
	mon.features = api.features;
	return fd;
}

static void seq_all(void)
{
	/* release: the marks before an even seq, as cache.h:seq_end() */
	for (struct odpx_ctx *c = mon.ctxs; c; c = c->mon_next) {
		uint32_t s = atomic_load_explicit(&c->seq, memory_order_relaxed);
		atomic_store_explicit(&c->seq, s + 1, memory_order_release);
	}
	/* odd before the read() that releases munmap (and before the marks) */
	atomic_thread_fence(memory_order_seq_cst);
}

uint64_t monitor_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);	/* vDSO: no system call */
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void log_inval(uintptr_t s, uintptr_t e, bool remove)
{
	mon.log[mon.inval_count % INVAL_LOG].start = s;
	mon.log[mon.inval_count % INVAL_LOG].end = e;
	mon.inval_count++;
	if (remove) {
		typeof(mon.rm[0]) *r = &mon.rm[mon.nrm++ % REMOVE_LOG];
		r->start = s;
		r->end = e;
		r->ns = monitor_ns();
	}
}

/*
 * A REMOVE overlapping [s, e), read before @t0 (the monitor_ns() of a miss's
 * pin start, 0 if no REMOVE had been read by then), may have zapped after
 * @t0: it was read less than the quarantine before (mon.lock).  Measured
 * from the pin's start, not from now: a pin taken early and inserted late
 * is as old as its pages.  REMOVEs read after @t0 are the invalidation
 * log's (the miss retries).
 */
bool monitor_remove_recent(uintptr_t s, uintptr_t e, uint64_t t0)
{
	uint64_t c, n;

	if (!t0)
		return false;
	/* newest first; the ring is in the order of reading, so stop at the first aged one */
	for (c = mon.nrm, n = 0; c > 0 && n < REMOVE_LOG; c--, n++) {
		const typeof(mon.rm[0]) *r = &mon.rm[(c - 1) % REMOVE_LOG];
		if ((int64_t)(t0 - r->ns) > (int64_t)mon.quarantine_ns)
			return false;
		if (r->start < e && r->end > s)
			return true;
	}
	return c > 0;	/* the whole ring is recent and older ones are gone: assume the worst */
}

/* ---- watched ranges (mon.lock; a fixed array: no allocation) ---- */

static unsigned watch_lower(uintptr_t addr)	/* first with end > addr */
{
	unsigned lo = 0, hi = mon.nw;

	while (lo < hi) {
		unsigned mid = (lo + hi) / 2;
		if (mon.w[mid].end <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* [s, e) watched right now (mon.lock) */
bool monitor_covers(uintptr_t s, uintptr_t e)
{
	for (unsigned i = watch_lower(s); i < mon.nw && s < e; i++) {
		if (mon.w[i].start > s)
			return false;
		s = mon.w[i].end;
	}
	return s >= e;
}

/* Live entries over [s, e), in every context (mon.lock) */
static uint32_t live_in(uintptr_t s, uintptr_t e)
{
	uint64_t n = 0;

	for (struct odpx_ctx *c = mon.ctxs; c; c = c->mon_next)
		cache_count_live(c, s, e, &n);
	return (uint32_t)n;
}

static void recount(struct watch *w)
{
	w->refs = live_in(w->start, w->end);
	w->approx = false;
}

/*
 * Remove [s, e) from the table (the VMA is gone or moved).  Its entries
 * died first (handle() applies the event, then cuts), each taking its one
 * from every record under it, so what is left of a record keeps its count:
 * exact if it was, and a split gives both parts the whole count, never
 * short, marked approx.  No counting here: a record bridged over a pool of
 * buffers may hold 100,000 entries, and a munmap of one of them must not
 * walk them all under mon.lock (4.7 ms when it did).
 */
static void watch_cut(uintptr_t s, uintptr_t e)
{
	unsigned i = watch_lower(s);

	while (i < mon.nw && mon.w[i].start < e) {
		struct watch *w = &mon.w[i];
		if (w->start < s && w->end > e) {	/* split */
			if (mon.nw < mon.budget) {
				memmove(w + 1, w, (mon.nw - i) * sizeof(*w));
				mon.nw++;
				w[0].end = s;
				w[1].start = e;
				w[0].approx = w[1].approx = w[0].refs > 0;
			} else {
				/*
				 * No slot: keep the left part only.  The right
				 * one stays registered in the kernel, its entries
				 * still die by its events, and a miss there
				 * watches it again (watch_insert() counts it).
				 */
				w->end = s;
				w->approx = w->refs > 0;
			}
			return;
		}
		if (w->start < s) {
			w->end = s;
			i++;
		} else if (w->end > e) {
			w->start = e;
			return;
		} else {
			memmove(w, w + 1, (mon.nw - i - 1) * sizeof(*w));
			mon.nw--;
		}
	}
}

/* Every watched VMA under an entry counts it: none may be reclaimed under it. */
void monitor_watch_ref(uintptr_t start, uintptr_t end, int delta)
{
	for (unsigned i = watch_lower(start); i < mon.nw && mon.w[i].start < end; i++)
		mon.w[i].refs += delta;
}

/* Unregister record @i and drop it from the table (mon.lock). */
static void watch_unregister(unsigned i)
{
	struct uffdio_range r = { mon.w[i].start, mon.w[i].end - mon.w[i].start };

	ioctl(mon.uffd, UFFDIO_UNREGISTER, &r);	/* gone already is fine */
	mon.unregs++;
	memmove(&mon.w[i], &mon.w[i + 1], (mon.nw - i - 1) * sizeof(mon.w[0]));
	mon.nw--;
}

/*
 * Budget spent: give back one idle watched range (mon.lock).  The exact
 * counts are tried first; then each record whose count may be over (approx)
 * is counted, once, until one is idle.
 */
static bool watch_reclaim_idle(void)
{
	for (int pass = 0; pass < 2; pass++)
		for (unsigned i = 0; i < mon.nw; i++) {
			if (pass && mon.w[i].approx)
				recount(&mon.w[i]);
			if (!mon.w[i].refs) {
				watch_unregister(i);
				return true;
			}
		}
	return false;
}

/*
 * A newly registered gap.  It merges with a watched neighbour it touches, as
 * the kernel merges the two VMAs: the budget counts what splits VMAs.  A
 * merged record's refs are the sum of what it merged plus the live entries
 * of the gap: the gap may hold some no record counted (a split with no free
 * slot keeps only its left part), and a count short by one would let
 * watch_reclaim_idle() unregister a range under a live entry.  An entry
 * over both seams of a bridged gap counts three times: approx, counted
 * again when the budget needs a record.  Counting the gap, not the record:
 * a record bridged over a pool of buffers may hold 100,000 entries.
 */
static void watch_insert(uintptr_t s, uintptr_t e)
{
	unsigned i;

	watch_cut(s, e);	/* a stale record of an old VMA there */
	i = watch_lower(s);
	if (i > 0 && mon.w[i - 1].end == s) {
		mon.w[i - 1].end = e;
		mon.w[i - 1].refs += live_in(s, e);
		if (i < mon.nw && mon.w[i].start == e) {
			mon.w[i - 1].end = mon.w[i].end;
			mon.w[i - 1].refs += mon.w[i].refs;
			/* an entry over a seam counted on both sides */
			mon.w[i - 1].approx = mon.w[i - 1].refs > 0;
			memmove(&mon.w[i], &mon.w[i + 1], (mon.nw - i - 1) * sizeof(mon.w[0]));
			mon.nw--;
		}
		return;
	}
	if (i < mon.nw && mon.w[i].start == e) {
		mon.w[i].start = s;
		mon.w[i].refs += live_in(s, e);
		return;
	}
	memmove(&mon.w[i + 1], &mon.w[i], (mon.nw - i) * sizeof(mon.w[0]));
	mon.w[i] = (struct watch){ s, e, live_in(s, e), false };
	mon.nw++;
}

/* [s, e) touches a record: watch_insert() merges it there, no new record. */
static bool watch_touches(uintptr_t s, uintptr_t e)
{
	unsigned i = watch_lower(s);

	return (i > 0 && mon.w[i - 1].end == s) || (i < mon.nw && mon.w[i].start == e);
}

/* The first part of [s, e) no record covers, in *gs..*ge; false if none (mon.lock). */
static bool first_gap(uintptr_t s, uintptr_t e, uintptr_t *gs, uintptr_t *ge)
{
	uintptr_t cur = s;

	for (unsigned i = watch_lower(s); i < mon.nw && mon.w[i].start < e; i++) {
		if (mon.w[i].start > cur) {
			*gs = cur;
			*ge = mon.w[i].start;
			return true;
		}
		if (mon.w[i].end > cur)
			cur = mon.w[i].end;
	}
	*gs = cur;
	*ge = e;
	return cur < e;
}

/*
 * A watch bridges the gap to a watched neighbour when the gap's VMA reaches
 * that neighbour and the gap is at most mon.widen_max (WIDEN_MAX, or
 * ODPX_WATCH_WIDEN_KB): the two merge into one VMA and one record.  Our own
 * registrations split a mapping, so a pool of buffers laid out with gaps in
 * one mapping - a stride, headers between them - becomes one watched VMA,
 * where watching each exact range costs two VMAs a buffer and spends the
 * budget after a few thousand.  The price: a munmap or madvise of a bridge,
 * where no entry is, raises an event, and an application's own
 * UFFDIO_REGISTER of it fails with EBUSY.  WIDEN_MAX is below glibc's
 * smallest mmap()ed chunk (128 KiB), so no such chunk between two buffers
 * is ever bridged, and nothing outside the outermost buffers is watched.
 *
 * Not in a sanitizer's build: the runtimes of ASan and TSan munmap memory of
 * their own on the reader thread (TSan's internal vectors, seen here), and
 * such memory may share a VMA with the application's; the reader would wait
 * for its own event.  An exact range is the application's own memory.
 */
static void widen(const struct vma_info *v, uintptr_t *gs, uintptr_t *ge)
{
	unsigned i = watch_lower(*gs);	/* the first record after the gap [*gs, *ge) */

	if (mon.mode == UFFD_MODE_MISSING || !mon.widen_max)
		return;	/* missing: every first touch of a bridge would fault to the reader */
	if (SANITIZED)
		return;	/* see above */
	if (i > 0 && mon.w[i - 1].end == v->start && *gs - v->start <= mon.widen_max)
		*gs = v->start;
	if (i < mon.nw && mon.w[i].start == v->end && v->end - *ge <= mon.widen_max)
		*ge = v->end;
}

/*
 * Watch the page range asked for, and the gaps widen() bridges, never the
 * whole VMA: a VMA can hold memory of other owners (anonymous mappings
 * merge), whose munmaps would all wait for the reader.  Registering a part
 * of a VMA splits it; the budget of watched ranges keeps that far below
 * vm.max_map_count.
 */
int monitor_watch(uintptr_t start, uintptr_t end)
{
	int einval = 0;

	for (int spins = 0;; spins++) {
		struct vma_info v, v2;
		uintptr_t gs, ge;
		bool gap;
		int r;

		mon_lock();
		gap = first_gap(start, end, &gs, &ge);
		mon_unlock();
		if (!gap)
			return 0;
		if (spins > 64)
			return -EAGAIN;	/* the mapping keeps changing under us */
		r = vma_query(gs, &v);
		if (r == -ENOENT || (r == 0 && v.start > gs))
			return -EFAULT;
		if (r)
			return r;
		if (!v.readable)
			return -EFAULT;
		if (v.shared || v.file)
			return -EXDEV;
		if (ge > v.end)
			ge = v.end;

		mon_lock();
		/*
		 * Another miss may have watched part of the gap meanwhile: what is
		 * registered and undone below must hold no record, or the undo
		 * would unregister a range the table says is watched.
		 */
		uintptr_t gs2, ge2;
		if (!first_gap(start, end, &gs2, &ge2) || gs2 != gs || ge2 < ge) {
			mon_unlock();
			continue;
		}
		widen(&v, &gs, &ge);
		if (mon.nw >= mon.budget && !watch_touches(gs, ge) && !watch_reclaim_idle()) {
			mon_unlock();
			return -ENOSPC;
		}
		struct uffdio_register reg = {
			.range = { gs, ge - gs },
			.mode = mon.mode == UFFD_MODE_MISSING ? UFFDIO_REGISTER_MODE_MISSING
							      : UFFDIO_REGISTER_MODE_WP,
		};
		if (ioctl(mon.uffd, UFFDIO_REGISTER, &reg) < 0) {
			r = -errno;
			mon_unlock();
			/*
			 * The VMA changed since the query: ENOMEM, or EINVAL when
			 * the range was a hole at that moment (a munmap and mmap
			 * of the same geometry in between look the same to a
			 * re-query).  An EINVAL that persists is a VMA the
			 * userfaultfd cannot watch.
			 */
			if (r == -ENOMEM || (r == -EINVAL && ++einval < 4))
				continue;
			return r == -EBUSY ? -EBUSY : -EINVAL;
		}
		mon.regs++;
		/*
		 * Re-query now that it is watched: a VMA replaced between the
		 * query and the registration raised no event; from here on
		 * every change does.  (The piece may have merged with a watched
		 * neighbour: it only has to lie inside the VMA.)
		 */
		r = vma_query(gs, &v2);
		if (r || v2.start > gs || v2.end < ge || v2.shared || v2.file) {
			struct uffdio_range undo = { gs, ge - gs };
			ioctl(mon.uffd, UFFDIO_UNREGISTER, &undo);
			mon_unlock();
			if (r == 0 && (v2.shared || v2.file))
				return -EXDEV;
			continue;
		}
		watch_insert(gs, ge);
		mon_unlock();
	}
}

/*
 * MISSING mode only: a user-mode-only uffd is not told of a pin's own
 * (kernel) faults, which then fail with EFAULT.  Fault our watched pages of
 * [s, e) in from user space first, where the reader maps the zero page for
 * the missing ones; pages outside our ranges fault in the kernel as usual
 * (and may belong to an application's own userfaultfd: never touched).
 */
void monitor_prefault(uintptr_t s, uintptr_t e)
{
	struct { uintptr_t s, e; } part[16];
	unsigned n = 0;

	mon_lock();
	for (unsigned i = watch_lower(s); i < mon.nw && mon.w[i].start < e && n < 16; i++) {
		part[n].s = mon.w[i].start > s ? mon.w[i].start : s;
		part[n].e = mon.w[i].end < e ? mon.w[i].end : e;
		n++;
	}
	mon_unlock();
	for (unsigned i = 0; i < n; i++)
		for (uintptr_t a = part[i].s; a < part[i].e; a += PAGE_SIZE)
			(void)*(volatile const char *)a;
}

bool monitor_inval_since(uint64_t c0, uintptr_t s, uintptr_t e)
{
	if (mon.inval_count - c0 > INVAL_LOG)
		return true;	/* the ring wrapped: assume the worst */
	for (uint64_t c = c0; c < mon.inval_count; c++) {
		const typeof(mon.log[0]) *l = &mon.log[c % INVAL_LOG];
		if (l->start < e && l->end > s)
			return true;
	}
	return false;
}

/*
 * "Recently": among the last REPIN_WINDOW events.  A miss that repins what
 * was just unmapped finds it there; a wider window costs every miss a longer
 * scan for a counter.
 */
#define REPIN_WINDOW 16

bool monitor_recently_invalidated(uintptr_t s, uintptr_t e)
{
	uint64_t lo = mon.inval_count > REPIN_WINDOW ? mon.inval_count - REPIN_WINDOW : 0;

	return mon.inval_count > lo && monitor_inval_since(lo, s, e);
}

static void apply(struct odpx_ctx *c, uintptr_t s, uintptr_t e, int ev)
{
	unsigned n = cache_invalidate_locked(c, s, e, ev);

	switch (ev) {
	case UFFD_EVENT_UNMAP: STAT_INC(c, inval_unmap); break;
	case UFFD_EVENT_REMOVE: STAT_INC(c, inval_remove); break;
	case UFFD_EVENT_REMAP: STAT_INC(c, inval_remap); break;
	}
	(void)n;
}

static void handle(const struct uffd_msg *m)
{
	uintptr_t s, e;

	mon.events++;
	switch (m->event) {
	case UFFD_EVENT_UNMAP:
	case UFFD_EVENT_REMOVE:
		s = m->arg.remove.start;
		e = m->arg.remove.end;
		break;
	case UFFD_EVENT_REMAP:
		s = m->arg.remap.from;
		e = s + m->arg.remap.len;
		break;
	case UFFD_EVENT_PAGEFAULT: {
		/* MISSING mode only: map the zero page, the fault retries */
		struct uffdio_zeropage z = {
			.range = { m->arg.pagefault.address & ~(PAGE_SIZE - 1), PAGE_SIZE },
		};
		if (ioctl(mon.uffd, UFFDIO_ZEROPAGE, &z) < 0 && errno == EEXIST) {
			struct uffdio_range w = z.range;
			ioctl(mon.uffd, UFFDIO_WAKE, &w);
		}
		mon.faults_resolved++;
		return;
	}
	default:
		return;
	}
	log_inval(s, e, m->event == UFFD_EVENT_REMOVE);
	for (struct odpx_ctx *c = mon.ctxs; c; c = c->mon_next)
		apply(c, s, e, m->event);
	if (m->event != UFFD_EVENT_REMOVE)
		watch_cut(s, e);	/* the VMA is gone (or moved away) */
}

/* Wake the engines that have dead entries to unpin, but @reaper's (mon.lock). */
static void kick_engines(struct odpx_ctx *reaper)
{
	mon.unkicked = false;
	for (struct odpx_ctx *c = mon.ctxs; c; c = c->mon_next)
		if (c != reaper && atomic_load_explicit(&c->dead_head, memory_order_acquire) != NIL)
			engine_kick(c);
}

/* ---- the reader process (helper.h) ---- */

/*
 * Drop mon.lock after an apply left dead entries: wake the engines that
 * have some to unpin, but @reaper's, whose caller reaps them itself right
 * after (a woken engine would take them from under its miss).
 */
void monitor_unlock_kick(struct odpx_ctx *reaper)
{
	if (mon.unkicked)
		kick_engines(reaper);
	pthread_mutex_unlock(&mon.lock);
}

/* Apply the events the helper published, and lower its gate for them (mon.lock). */
static void apply_published(struct helper_shared *sh)
{
	uint32_t d = atomic_load_explicit(&sh->sections, memory_order_acquire);
	uint32_t p = atomic_load_explicit(&sh->produced, memory_order_acquire);
	uint32_t c = atomic_load_explicit(&sh->consumed, memory_order_relaxed);

	if (p != c) {
		seq_all();
		for (; c != p; c++)
			handle(&sh->ring[c % HELPER_RING]);
		seq_all();
		atomic_store_explicit(&sh->consumed, p, memory_order_release);
		mon.unkicked = true;	/* mon_unlock() wakes the engines: the helper will not */
	}
	if (d != sh->lowered) {	/* after the apply: a lookup sees the gate or the seq move */
		atomic_fetch_sub_explicit(&sh->gate, d - sh->lowered, memory_order_seq_cst);
		sh->lowered = d;
	}
}

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

/*
 * Reap the helper that exited, through its pidfd: never another child of
 * the same pid.  It is this process's child only if this process is a
 * subreaper; otherwise ECHILD (init reaps it).
 */
static void reap(void)
{
	siginfo_t si;

	waitid(P_PIDFD, mon.helper_pidfd, &si, WEXITED | WNOHANG);
}

/*
 * A pidfd is readable once the process is gone.  A signal in poll() is no
 * death: taken for one, a live helper went on reading events that nobody
 * waited for (review: a profiler's SIGPROF during a section's wait).
 */
static bool helper_alive(void)
{
	struct pollfd p = { mon.helper_pidfd, POLLIN, 0 };
	int r;

	while ((r = poll(&p, 1, 0)) < 0 && errno == EINTR)
		;
	return r <= 0;	/* POLLIN, or POLLNVAL: a pidfd the application closed */
}

/* Make sure the helper taken for dead is (mon.lock): a live one reads on unapplied. */
static void helper_make_dead(void)
{
	struct pollfd p = { mon.helper_pidfd, POLLIN, 0 };

	if (syscall(SYS_pidfd_send_signal, mon.helper_pidfd, SIGKILL, NULL, 0) < 0)
		return;	/* exited and reaped, or the pidfd is not ours any more */
	while (poll(&p, 1, -1) < 0 && errno == EINTR)
		;
}

/*
 * The helper is gone (mon.lock).  What it published is applied.  A gate
 * still up means it died inside a section: events it dequeued may be lost,
 * so every entry dies, and every watch goes, since a lost UNMAP leaves a
 * record of a VMA that is no more.  Misses watch again.  The thread reads
 * from here on.
 */
static void helper_lost_locked(void)
{
	struct helper_shared *sh = mon.sh;

	helper_make_dead();	/* before the gate is read: nothing moves it after */
	atomic_store_explicit(&mon.helper_on, false, memory_order_relaxed);
	mon.helper_fallbacks++;
	apply_published(sh);
	if (atomic_load_explicit(&sh->gate, memory_order_acquire)) {
		seq_all();
		/* as a REMOVE too: a lost one's zap may still be to come (quarantine) */
		log_inval(0, UINTPTR_MAX, true);
		for (struct odpx_ctx *c = mon.ctxs; c; c = c->mon_next)
			apply(c, 0, UINTPTR_MAX, UFFD_EVENT_UNMAP);
		for (unsigned i = 0; i < mon.nw; i++) {
			struct uffdio_range r = { mon.w[i].start, mon.w[i].end - mon.w[i].start };
			ioctl(mon.uffd, UFFDIO_UNREGISTER, &r);
			mon.unregs++;
		}
		mon.nw = 0;
		atomic_store_explicit(&sh->gate, 0, memory_order_seq_cst);
		seq_all();
	}
	reap();
}

/*
 * mon_lock()'s slow path.  A section under way in the helper is waited for:
 * it never blocks inside one (non-blocking reads into a populated page), so
 * the wait is short unless the helper is descheduled or dead.  Spinning,
 * then yielding, then sleeping 20 us at a time: a SCHED_FIFO caller that
 * preempted the helper on its CPU yields to nobody, and waited for the
 * real-time throttle, a second a call (review).
 */
void monitor_sync_locked(void)
{
	for (unsigned spins = 0;; spins++) {
		apply_published(mon.sh);
		if (!atomic_load_explicit(&mon.sh->gate, memory_order_acquire) ||
		    !atomic_load_explicit(&mon.helper_on, memory_order_relaxed))
			return;
		if (spins < 64)
			continue;
		if (!(spins % 64) && !helper_alive()) {
			helper_lost_locked();
			return;
		}
		if (spins < 1024)
			sched_yield();
		else	/* a real-time caller: its yield() never lets the helper in */
			nanosleep(&(struct timespec){ .tv_nsec = 20000 }, NULL);
	}
}

/*
 * Applied exactly as the reader applies a REMOVE, on the caller's thread:
 * the same lock, seq write section and log (so a miss pinning meanwhile
 * retries, and one soon after is served direct).
 */
unsigned monitor_invalidate(uintptr_t s, uintptr_t e)
{
	unsigned n = 0;

	mon_lock();
	seq_all();
	log_inval(s, e, true);
	for (struct odpx_ctx *c = mon.ctxs; c; c = c->mon_next) {
		n += cache_invalidate_locked(c, s, e, UFFD_EVENT_REMOVE);
		STAT_INC(c, inval_api);
	}
	seq_all();
	kick_engines(NULL);
	pthread_mutex_unlock(&mon.lock);
	return n;
}

static void *reader_main(void *arg)
{
	struct uffd_msg msgs[32];	/* on the stack: the reader never allocates */
	uint64_t spin_until = 0, kick_by = 0;
	unsigned idle_polls = 0;

	(void)arg;
	pthread_setname_np(pthread_self(), "odpx-uffd");	/* in top and a hang's dump */
	for (;;) {
		if (atomic_load_explicit(&mon.helper_on, memory_order_relaxed)) {
			/* the helper reads: apply when it rings, or take over if it died */
			struct pollfd h[3] = { { mon.doorbell, POLLIN, 0 }, { mon.stopfd, POLLIN, 0 },
					       { mon.helper_pidfd, POLLIN, 0 } };
			uint64_t v;

			if (poll(h, 3, -1) < 0)
				continue;
			if (h[1].revents)
				break;
			if (h[0].revents && read(mon.doorbell, &v, sizeof(v)) < 0)
				continue;	/* EAGAIN: another wake drained it; nothing lost */
			pthread_mutex_lock(&mon.lock);
			if (h[2].revents && atomic_load_explicit(&mon.helper_on, memory_order_relaxed))
				helper_lost_locked();
			else if (atomic_load_explicit(&mon.helper_on, memory_order_relaxed))
				monitor_sync_locked();
			kick_engines(NULL);
			pthread_mutex_unlock(&mon.lock);
			continue;
		}
		struct pollfd p[2] = { { mon.uffd, POLLIN, 0 }, { mon.stopfd, POLLIN, 0 } };
		uint64_t now = monitor_ns();
		/*
		 * After an event, poll without sleeping for a little while:
		 * munmaps come in bursts, and a reader that is awake saves the
		 * munmap caller one of its two wake-ups.  The engines are woken
		 * to unpin when the burst is over (or after KICK_MAX_NS of it),
		 * not at each event: an engine at work on the reader's CPU would
		 * delay the reading of the next event, which the next munmap
		 * waits for.
		 */
		int timeout = now < spin_until ? 0 : -1;

		if (kick_by && (timeout < 0 || now >= kick_by)) {
			pthread_mutex_lock(&mon.lock);
			kick_engines(NULL);
			pthread_mutex_unlock(&mon.lock);
			kick_by = 0;
		}
		if (poll(p, 2, timeout) < 0)
			continue;	/* EINTR cannot happen (signals masked) */
		if (timeout == 0 && !p[0].revents && !p[1].revents) {
			if (!(++idle_polls % YIELD_EVERY))
				sched_yield();
			continue;
		}
		if (p[1].revents)
			break;
		if (!(p[0].revents & (POLLIN | POLLERR | POLLHUP)))
			continue;

		pthread_mutex_lock(&mon.lock);
		seq_all();
		for (;;) {
			ssize_t n = read(mon.uffd, msgs, sizeof(msgs));
			if (n <= 0)
				break;	/* EAGAIN: drained */
			for (ssize_t i = 0; i < n / (ssize_t)sizeof(msgs[0]); i++)
				handle(&msgs[i]);
		}
		seq_all();
		pthread_mutex_unlock(&mon.lock);
		sched_yield();	/* a caller we just woke on our CPU goes first */
		now = monitor_ns();
		if (!kick_by)
			kick_by = now + KICK_MAX_NS;
		spin_until = now + mon.spin_ns;
	}
	return NULL;
}

/*
 * The reader runs on a stack of its own mapping, between two PROT_NONE
 * pages: no other VMA can merge with it, so no watch - widened or not - ever
 * covers it (the reader would wait for its own event), and glibc does not
 * madvise away at exit a stack it did not allocate.
 */
static int reader_start(void)
{
	sigset_t all, old;
	pthread_attr_t a;
	size_t size, len;
	char *stack;
	int r;

	if ((r = pthread_attr_init(&a)))
		return -r;
	/* glibc's default size (RLIMIT_STACK): the sanitizers' runtimes need much of it */
	if ((r = pthread_attr_getstacksize(&a, &size)))
		goto out_attr;
	len = size + 2 * PAGE_SIZE;
	stack = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (stack == MAP_FAILED) {
		r = errno;
		goto out_attr;
	}
	if (mprotect(stack + PAGE_SIZE, size, PROT_READ | PROT_WRITE)) {
		r = errno;
		goto out_stack;
	}
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	r = pthread_attr_setstack(&a, stack + PAGE_SIZE, size);
	if (!r)
		r = pthread_create(&mon.reader, &a, reader_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r)
		goto out_stack;
	pthread_attr_destroy(&a);
	mon.reader_stack = stack;
	mon.reader_stack_len = len;
	mon.running = true;
	return 0;
out_stack:
	munmap(stack, len);
out_attr:
	pthread_attr_destroy(&a);
	return -r;
}

#ifndef MFD_EXEC
#define MFD_EXEC 0x0010U
#endif

static int helper_fail(int err, const char *what)
{
	snprintf(mon.helper_why, sizeof(mon.helper_why), "%s: %s", what, strerror(-err));
	pthread_mutex_lock(&mon.lock);	/* odpx_stats_read() reads it */
	mon.helper_fallbacks++;
	pthread_mutex_unlock(&mon.lock);
	return err;
}

/*
 * The shared page set (helper.h), at the same address for the life of the
 * process: contexts point their gate there.  A new start maps a new memfd
 * over the old one (both gates read 0 then: no helper runs), so that no
 * descriptor stays open while no context is.
 */
static int helper_map(void)
{
	int fd = memfd_create("odpx-uffd-shared", MFD_CLOEXEC);
	void *p;

	if (fd < 0)
		return -errno;
	if (ftruncate(fd, HELPER_SHARED_BYTES) < 0 ||
	    (p = mmap(NULL, HELPER_SHARED_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
		      fd, 0)) == MAP_FAILED) {
		int err = -errno;
		close(fd);
		return err;
	}
	/* over the old one in one step: it stays whole if this fails */
	if (mon.sh && mremap(p, HELPER_SHARED_BYTES, HELPER_SHARED_BYTES,
			     MREMAP_MAYMOVE | MREMAP_FIXED, mon.sh) == MAP_FAILED) {
		int err = -errno;
		munmap(p, HELPER_SHARED_BYTES);
		close(fd);
		return err;
	}
	if (mon.sh)
		p = mon.sh;
	pthread_mutex_lock(&mon.lock);	/* mon_lock() reads mon.sh */
	mon.sh = p;
	pthread_mutex_unlock(&mon.lock);
	mon.shfd = fd;
	return 0;
}

/* No helper runs: the page as new (mon.lock; lock-free lookups read the gate). */
static void helper_reset_locked(void)
{
	struct helper_shared *sh = mon.sh;

	atomic_store_explicit(&sh->gate, 0, memory_order_relaxed);
	atomic_store_explicit(&sh->produced, 0, memory_order_relaxed);
	atomic_store_explicit(&sh->sections, 0, memory_order_relaxed);
	atomic_store_explicit(&sh->consumed, 0, memory_order_relaxed);
	atomic_store_explicit(&sh->pid, 0, memory_order_relaxed);
	sh->lowered = 0;
	sh->spin_ns = mon.spin_ns;
	sh->kick_max_ns = KICK_MAX_NS;
}

/* The embedded odpx-uffd as a read-only descriptor of a memfd (exec refuses a writable one). */
static int helper_image_fd(void)
{
	const unsigned char *b = odpx_helper_image;
	char path[40];
	int fd = memfd_create("odpx-uffd", MFD_CLOEXEC | MFD_EXEC), ro;

	if (fd < 0 && errno == EINVAL)	/* before Linux 6.3 */
		fd = memfd_create("odpx-uffd", MFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	while (b < odpx_helper_image_end) {
		ssize_t n = write(fd, b, (size_t)(odpx_helper_image_end - b));
		if (n <= 0) {
			int err = n < 0 ? -errno : -EIO;
			close(fd);
			return err;
		}
		b += n;
	}
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	ro = open(path, O_RDONLY | O_CLOEXEC);
	ro = ro < 0 ? -errno : ro;
	close(fd);
	if (ro < 0)
		return ro;
	/* above the numbers the spawn dup2()s onto, or the child would exec one of those */
	fd = fcntl(ro, F_DUPFD_CLOEXEC, HELPER_FD_FIRST_FREE);
	fd = fd < 0 ? -errno : fd;
	close(ro);
	return fd;
}

/*
 * odpx-uffd's handoff (helper.h): its first message on @sock, a pidfd of
 * itself and its pid.  0 or -errno (-EPROTO: it left without a word).
 */
static int helper_handoff(int sock, int *pidfd, pid_t *pid, const char **what)
{
	union {
		struct cmsghdr c;
		char b[CMSG_SPACE(sizeof(int))];
	} ctl;
	struct helper_handoff h;
	struct iovec v = { &h, sizeof(h) };
	struct msghdr m = { .msg_iov = &v, .msg_iovlen = 1, .msg_control = ctl.b,
			    .msg_controllen = sizeof(ctl.b) };
	struct pollfd p = { sock, POLLIN, 0 };
	struct cmsghdr *c;
	ssize_t n;
	int k;

	*what = "odpx-uffd handoff";
	while ((k = poll(&p, 1, 5000)) < 0 && errno == EINTR)
		;
	if (k != 1)
		return k < 0 ? -errno : -ETIMEDOUT;
	n = recvmsg(sock, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	if (n < 0)
		return -errno;
	c = CMSG_FIRSTHDR(&m);
	if (!c && n == (ssize_t)sizeof(h) && h.pid < 0 && h.pid > -4096) {
		*what = "odpx-uffd's close_range";	/* and no listing: it would keep our fds */
		return h.pid;
	}
	if (!c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
	    c->cmsg_len != CMSG_LEN(sizeof(int)))
		return -EPROTO;	/* also the end of file of a helper that died */
	memcpy(pidfd, CMSG_DATA(c), sizeof(int));
	if (n != (ssize_t)sizeof(h) || h.pid <= 0) {
		close(*pidfd);
		return -EPROTO;
	}
	*pid = h.pid;
	return 0;
}

/*
 * glibc's clone under its other name: the sanitizers intercept "clone" and
 * treat it as a fork, resetting their state in a child that shares it.
 */
extern int __clone(int (*fn)(void *), void *stack, int flags, void *arg, ...);

/* What the spawn needs; its two processes run in our memory until the exec. */
struct spawn_args {
	const int *dup;		/* HELPER_FDS descriptors, onto HELPER_FD_UFFD + i */
	int xfd;		/* the image */
	char *const *argv, *const *envp;
	char *stack2;		/* the top of the second process's stack */
	volatile int err;	/* set by a second process whose exec failed */
};

/*
 * The second process: a session of its own, the helper's descriptors, and
 * the exec.  Runs in our memory while the first waits: system calls only,
 * and nothing instrumented (the sanitizers' state is the waiting thread's).
 */
__attribute__((no_sanitize("address", "thread", "undefined")))
static int spawn_exec(void *arg)
{
	struct spawn_args *a = arg;

	if (syscall(SYS_setsid) < 0)
		goto fail;
	for (int i = 0; i < HELPER_FDS; i++)	/* dup3 with no flag: kept across exec */
		if (syscall(SYS_dup3, a->dup[i], HELPER_FD_UFFD + i, 0) < 0)
			goto fail;
	syscall(SYS_execveat, a->xfd, "", a->argv, a->envp, AT_EMPTY_PATH);
fail:
	a->err = errno ? errno : EIO;
	syscall(SYS_exit, 127);
	return 127;
}

/* The first process: start the second, wait for its exec, reap it if it failed, leave. */
__attribute__((no_sanitize("address", "thread", "undefined")))
static int spawn_first(void *arg)
{
	struct spawn_args *a = arg;
	long pid = __clone(spawn_exec, a->stack2, CLONE_VM | CLONE_VFORK | SIGCHLD, a);

	if (pid < 0)
		a->err = errno ? errno : EIO;
	else if (a->err)
		syscall(SYS_wait4, pid, NULL, __WALL, NULL);
	syscall(SYS_exit, 0);
	return 0;
}

/*
 * Run the image as a grandchild whose parent leaves at once, so that it is
 * init's (or the nearest subreaper's) from the start.  Both clones share
 * our memory and wait for the exec (CLONE_VM | CLONE_VFORK, as posix_spawn
 * does: a large process costs no page-table copy).  The first has no exit
 * signal and never execs (an exec would restore SIGCHLD): its exit raises
 * no SIGCHLD here, and the application's wait() and waitpid(-1) never see
 * it (only __WALL does; we reap it).  Every signal stays blocked in both,
 * and through the exec, so no handler of ours runs there.  0 or -errno.
 */
static int helper_spawn(struct spawn_args *a)
{
	const size_t half = 32 << 10;
	char *stack = mmap(NULL, 2 * half, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	sigset_t all, old;
	siginfo_t si;
	int r = 0, pidfd = -1;

	if (stack == MAP_FAILED)
		return -errno;
	a->stack2 = stack + half;
	a->err = 0;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	if (__clone(spawn_first, stack + 2 * half, CLONE_VM | CLONE_VFORK | CLONE_PIDFD, a,
		    &pidfd) < 0)
		r = -errno;
	/*
	 * Reaped through its pidfd, never by pid: an application that waits
	 * with __WALL may have reaped it (ECHILD, harmless: it has left), and
	 * its pid may then name another child of the application.  Signals
	 * stay blocked until then: the vfork wakes us before it is a zombie,
	 * and a waitid() cut by a handler without SA_RESTART left one that
	 * only a __WALL wait finds (exit signal 0).
	 */
	if (pidfd >= 0) {
		while (waitid(P_PIDFD, pidfd, &si, WEXITED | __WALL) < 0 && errno == EINTR)
			;
		close(pidfd);
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (!r && a->err)
		r = -a->err;
	munmap(stack, 2 * half);	/* both have exec'd or left */
	return r;
}

/*
 * PID 1 of its namespace (a container's entry point) or a subreaper: the
 * orphaned odpx-uffd would be its child, and its wait() would wait for it.
 */
static bool reaps_orphans(void)
{
	int sub = 0;

	return getpid() == 1 || (prctl(PR_GET_CHILD_SUBREAPER, &sub) == 0 && sub);
}

/*
 * Start odpx-uffd on mon.uffd (life_lock, before the reader thread starts),
 * in a session of its own (a terminal's ^C is not for it) with every
 * signal blocked; it leaves when its lifeline closes.  helper_spawn()
 * starts it as init's child (or the nearest subreaper's), never the
 * application's, and it sends us a pidfd of itself (helper_handoff()).
 * 0, or -errno with mon.helper_why set: the thread reads instead.
 */
static int helper_start(void)
{
	char *argv[] = { "odpx-uffd", NULL }, *envp[] = { NULL };
	int dup[HELPER_FDS], life[2] = { -1, -1 }, hs[2] = { -1, -1 }, bell = -1, xfd, hfd = -1, r;
	struct spawn_args sa = { .dup = dup, .argv = argv, .envp = envp };
	const char *what;
	pid_t pid = 0;

	for (int i = 0; i < HELPER_FDS; i++)
		dup[i] = -1;
	if (mon.shfd < 0 && (r = helper_map()) < 0)
		return helper_fail(r, "shared memfd");
	pthread_mutex_lock(&mon.lock);
	helper_reset_locked();
	pthread_mutex_unlock(&mon.lock);
	if ((xfd = helper_image_fd()) < 0) {
		close(mon.shfd);
		mon.shfd = -1;
		return helper_fail(xfd, "memfd of odpx-uffd");
	}
	if (pipe2(life, O_CLOEXEC) < 0 || (bell = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0 ||
	    socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, hs) < 0) {
		r = helper_fail(-errno, "pipe, eventfd or socketpair");
		goto out;
	}
	/* above the helper's numbers first, so that no dup2 below overwrites a source */
	for (int i = 0; i < HELPER_FDS; i++) {
		const int src[HELPER_FDS] = { mon.uffd, mon.shfd, life[0], bell, mon.stopfd, hs[1] };
		int fd = src[i];
		if ((dup[i] = fcntl(fd, F_DUPFD_CLOEXEC, HELPER_FD_FIRST_FREE)) < 0) {
			r = helper_fail(-errno, "dup");
			goto out;
		}
	}
	sa.xfd = xfd;
	if ((r = helper_spawn(&sa)) < 0) {
		helper_fail(r, "spawn odpx-uffd");
		goto out;
	}
	/* odpx-uffd's alone now: the handoff socket ends if it dies */
	for (int i = 0; i < HELPER_FDS; i++) {
		close(dup[i]);
		dup[i] = -1;
	}
	close(hs[1]);
	hs[1] = -1;
	if ((r = helper_handoff(hs[0], &hfd, &pid, &what)) < 0) {
		helper_fail(r, what);
		goto out;	/* closing the lifeline lets odpx-uffd go */
	}
	mon.helper_pidfd = hfd;
	mon.helper_pid = pid;
	mon.lifeline = life[1];
	mon.doorbell = bell;
	life[1] = bell = -1;
	mon.helper_why[0] = 0;
	atomic_store_explicit(&mon.helper_on, true, memory_order_relaxed);
	r = 0;
out:
	for (int i = 0; i < HELPER_FDS; i++)
		if (dup[i] >= 0)
			close(dup[i]);
	for (int i = 0; i < 2; i++) {
		if (life[i] >= 0)
			close(life[i]);
		if (hs[i] >= 0)
			close(hs[i]);
	}
	if (bell >= 0)
		close(bell);
	close(xfd);
	if (r < 0) {
		close(mon.shfd);	/* the mapping stays, its gate at 0 */
		mon.shfd = -1;
	}
	return r;
}

/* After the stop eventfd was written: wait for the helper to leave, reap it, forget it. */
static void helper_stop(void)
{
	struct pollfd p = { mon.helper_pidfd, POLLIN, 0 };

	if (poll(&p, 1, 5000) == 0) {	/* it leaves at once when told; never wait for ever */
		syscall(SYS_pidfd_send_signal, mon.helper_pidfd, SIGKILL, NULL, 0);
		poll(&p, 1, -1);
	}
	reap();
	close(mon.helper_pidfd);
	close(mon.lifeline);
	close(mon.doorbell);
	close(mon.shfd);	/* the mapping stays (helper_map()) */
	mon.helper_pidfd = mon.lifeline = mon.doorbell = mon.shfd = -1;
	mon.helper_pid = 0;
	pthread_mutex_lock(&mon.lock);	/* what it published is for no context now */
	atomic_store_explicit(&mon.helper_on, false, memory_order_relaxed);
	helper_reset_locked();
	pthread_mutex_unlock(&mon.lock);
}

/*
 * The CPUs any thread of the process may run on: the union of their masks,
 * not the caller's alone (an application that binds each thread to a core
 * of its own is the one a polling reader helps most).
 */
static int process_cpus(void)
{
	cpu_set_t all, one;
	struct dirent *d;
	DIR *dir = opendir("/proc/self/task");

	CPU_ZERO(&all);
	if (!dir)
		return sched_getaffinity(0, sizeof(all), &all) ? 0 : CPU_COUNT(&all);
	while ((d = readdir(dir)))
		if (d->d_name[0] != '.' && !sched_getaffinity(atoi(d->d_name), sizeof(one), &one))
			CPU_OR(&all, &all, &one);
	closedir(dir);
	return CPU_COUNT(&all);
}

static unsigned default_budget(void)
{
	unsigned long max_map = 65530;
	uint64_t env = odpx_env("ODPX_WATCH_MAX", 0);
	FILE *f = fopen("/proc/sys/vm/max_map_count", "re");

	if (f) {
		if (fscanf(f, "%lu", &max_map) != 1)
			max_map = 65530;
		fclose(f);
	}
	if (env)
		return (unsigned)env;
	/* a watched range splits at most two VMAs off its own: stay far away */
	return max_map / 8 < 16384 ? (unsigned)(max_map / 8) : 16384;
}

/*
 * Start and stop of the monitor take life_lock, never mon.lock: they
 * allocate (the watch table, the reader's stack) and close the uffd, and
 * nobody may do that while holding the invalidation lock.  mon.lock is taken
 * inside only for the list of contexts and the fields the reader reads.
 */
static pthread_mutex_t life_lock = PTHREAD_MUTEX_INITIALIZER;

/*
 * No reader could start and no context is attached: close the uffd (nothing
 * is registered on it yet) and free the watch table, so that a process whose
 * monitor failed holds nothing of it; the next attempt opens them anew.
 * life_lock held.
 */
static void release_uffd(void)
{
	struct watch *w;
	int fd;

	pthread_mutex_lock(&mon.lock);
	fd = mon.uffd;
	mon.uffd = -1;
	w = mon.w;
	mon.w = NULL;
	mon.nw = 0;
	pthread_mutex_unlock(&mon.lock);
	close(fd);	/* as monitor_detach(): never under the invalidation lock */
	free(w);
}

int monitor_attach(struct odpx_ctx *ctx)
{
	int r = 0;

	pthread_mutex_lock(&life_lock);
	if (atomic_load_explicit(&ctx->attached, memory_order_relaxed))
		goto out;	/* another thread of this context got here first */
	if (mon.uffd < 0 && !mon.init_err) {
		unsigned budget = default_budget();
		struct watch *w = calloc(budget + 1, sizeof(*w));
		int fd = w ? uffd_open() : -ENOMEM;

		if (fd < 0) {
			free(w);
			/*
			 * The kernel's refusal is for good; a limit (descriptors,
			 * memory) may be lifted: the context's retry tries again.
			 */
			if (fd == -EMFILE || fd == -ENFILE || fd == -ENOMEM || fd == -EAGAIN) {
				if (!w)
					snprintf(mon.why, sizeof(mon.why), "watch table: %s",
						 strerror(-fd));
				r = fd;
				goto out;
			}
			mon.init_err = fd;
			goto out_err;
		}
		pthread_mutex_lock(&mon.lock);
		mon.uffd = fd;
		mon.w = w;
		mon.budget = budget;
		mon.quarantine_ns = odpx_env("ODPX_REMOVE_QUARANTINE_MS", 100) * 1000000ULL;
		mon.spin_ns = odpx_env("ODPX_MONITOR_SPIN_US", 50) * 1000ULL;
		mon.widen_max = (uintptr_t)odpx_env("ODPX_WATCH_WIDEN_KB", WIDEN_MAX >> 10) << 10;
		pthread_mutex_unlock(&mon.lock);
	}
out_err:
	if (mon.uffd < 0) {
		r = mon.init_err;
		goto out;
	}
	if (!mon.running) {
		const char *h = getenv("ODPX_UFFD_HELPER");
		struct sched_param sp = { 0 };
		int pol;
		bool lowered;

		if (mon.stopfd < 0 && (mon.stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
			r = -errno;
			snprintf(mon.why, sizeof(mon.why), "the reader's eventfd: %s", strerror(-r));
			release_uffd();
			goto out;
		}
		/*
		 * The readers inherit the starting thread's policy: a real-time
		 * caller's, but never SCHED_BATCH or SCHED_IDLE (the engine's, when
		 * a prefetch is the first miss): a woken reader must preempt, or
		 * munmaps wait for whatever runs on its CPU.  Lowered for the
		 * spawns alone, and set back on every path out of them: the
		 * engine stays SCHED_BATCH when the start fails.  (An
		 * unprivileged SCHED_IDLE thread cannot leave SCHED_IDLE with
		 * RLIMIT_NICE at 0: its readers inherit it.)
		 */
		pol = sched_getscheduler(0);
		lowered = (pol == SCHED_BATCH || pol == SCHED_IDLE) &&
			  !pthread_setschedparam(pthread_self(), SCHED_OTHER, &sp);
		if (h && !strcmp(h, "0"))
			snprintf(mon.helper_why, sizeof(mon.helper_why), "ODPX_UFFD_HELPER=0");
		else if (process_cpus() == 1 && !(h && !strcmp(h, "1")))
			/* no other CPU for a shootdown to reach; a thread is cheaper to switch to */
			snprintf(mon.helper_why, sizeof(mon.helper_why), "the process runs on one CPU");
		else if (mon.mode == UFFD_MODE_MISSING)	/* its page faults want the zero page at once */
			snprintf(mon.helper_why, sizeof(mon.helper_why), "missing mode");
		else if (reaps_orphans())	/* odpx-uffd would be its child, seen by its wait() */
			snprintf(mon.helper_why, sizeof(mon.helper_why),
				 "the process reaps orphans (PID 1 or a subreaper)");
		else
			helper_start();
		r = reader_start();
		if (lowered)
			pthread_setschedparam(pthread_self(), pol, &sp);
		if (r < 0) {
			uint64_t one = 1;
			if (mon.helper_pidfd >= 0 && write(mon.stopfd, &one, sizeof(one)) == sizeof(one))
				helper_stop();
			close(mon.stopfd);	/* written: a new one for the next attempt */
			mon.stopfd = -1;
			snprintf(mon.why, sizeof(mon.why), "the reader thread: %s", strerror(-r));
			release_uffd();
			goto out;
		}
	}
	/* before it is listed: its lookups check the gate from its first entry on */
	atomic_store_explicit(&ctx->gate, mon.sh ? &mon.sh->gate : &odpx_gate_down,
			      memory_order_release);	/* after the page's mapping */
	pthread_mutex_lock(&mon.lock);
	ctx->mon_next = mon.ctxs;
	mon.ctxs = ctx;
	atomic_store_explicit(&ctx->attached, true, memory_order_release);
	mon.users++;
	pthread_mutex_unlock(&mon.lock);
out:
	/*
	 * mon.why and reason_open are life_lock's, and every change of the
	 * reason after the open is made here: reading it needs no reason_lock.
	 * The reason the open gave comes back once attached.
	 */
	if (r < 0 && !ctx->reason_open[0])
		memcpy(ctx->reason_open, ctx->reason, sizeof(ctx->reason));
	if (r < 0)
		ctx_reason_set(ctx, "pin mode without invalidation is unsafe: %s; serving direct",
			       mon.why);
	else if (ctx->reason_open[0] && strcmp(ctx->reason, ctx->reason_open))
		ctx_reason_set(ctx, "%s", ctx->reason_open);
	pthread_mutex_unlock(&life_lock);
	return r;
}

/*
 * The last context gone: stop the reader and close the uffd (which
 * unregisters every range).  Called with the context's entries all unpinned.
 */
void monitor_detach(struct odpx_ctx *ctx)
{
	struct watch *w = NULL;
	uint64_t one = 1;
	bool stop;

	pthread_mutex_lock(&life_lock);
	if (!atomic_load_explicit(&ctx->attached, memory_order_relaxed))
		goto out;
	pthread_mutex_lock(&mon.lock);
	for (struct odpx_ctx **p = &mon.ctxs; *p; p = &(*p)->mon_next) {
		if (*p == ctx) {
			*p = ctx->mon_next;
			break;
		}
	}
	atomic_store_explicit(&ctx->attached, false, memory_order_relaxed);
	stop = --mon.users == 0 && mon.running;
	/*
	 * Its live entries, unpinned next by cache_fini() with no decrement,
	 * still count: over, never short.  Counted again when the budget
	 * needs a record (watch_reclaim_idle()).
	 */
	for (unsigned i = 0; !stop && i < mon.nw; i++)
		mon.w[i].approx = mon.w[i].refs > 0;
	pthread_mutex_unlock(&mon.lock);
	if (!stop)
		goto out;
	if (write(mon.stopfd, &one, sizeof(one)) == sizeof(one)) {
		pthread_join(mon.reader, NULL);
		if (mon.helper_pidfd >= 0)
			helper_stop();	/* it holds the uffd open too */
	}
	/* no reader, no context: close (unregistering every range), then forget */
	close(mon.stopfd);
	close(mon.uffd);
	munmap(mon.reader_stack, mon.reader_stack_len);	/* watched by nobody now */
	mon.reader_stack = NULL;
	pthread_mutex_lock(&mon.lock);
	mon.stopfd = mon.uffd = -1;
	mon.running = false;
	w = mon.w;
	mon.w = NULL;
	mon.nw = 0;
	pthread_mutex_unlock(&mon.lock);
	free(w);
out:
	pthread_mutex_unlock(&life_lock);
}

void monitor_atfork_prepare(void)
{
	pthread_mutex_lock(&life_lock);
}

void monitor_atfork_parent(void)
{
	pthread_mutex_unlock(&life_lock);
}

void monitor_atfork_child(void)
{
	/* the parent's threads do not exist here; its uffd is the parent's */
	if (mon.uffd >= 0)
		close(mon.uffd);
	if (mon.stopfd >= 0)
		close(mon.stopfd);
	if (mon.reader_stack)	/* a copy of the parent's reader's: nobody runs on it */
		munmap(mon.reader_stack, mon.reader_stack_len);
	/*
	 * The parent's shared page set: private zeros from here on, so that
	 * inherited contexts' gates read 0 and nothing reaches the parent's
	 * helper.  Not unmapped: those contexts still point there.
	 */
	if (mon.sh)
		mmap(mon.sh, HELPER_SHARED_BYTES, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	/* the parent's: the helper is not ours, and our lifeline copy would keep it alive */
	const int fds[] = { mon.shfd, mon.helper_pidfd, mon.lifeline, mon.doorbell };
	for (unsigned i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
		if (fds[i] >= 0)
			close(fds[i]);
	free(mon.w);
	memset(&mon, 0, sizeof(mon));
	pthread_mutex_init(&mon.lock, NULL);
	pthread_mutex_unlock(&life_lock);	/* taken by this thread in prepare */
	mon.uffd = mon.stopfd = mon.shfd = mon.helper_pidfd = mon.lifeline = mon.doorbell = -1;
	vma_atfork_child();
}
