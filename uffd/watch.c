// SPDX-License-Identifier: MIT
/*
 * watch.c - the ranges the userfaultfd watches: a table sorted by start,
 * a budget far below vm.max_map_count, and the bridging of small gaps.
 *
 * A registration of part of a VMA splits it, so each record counts the live
 * registrations over it, and an idle record is given back when the budget is
 * spent.  Written under mon.lock; allocated at the monitor's start (open.c),
 * so nothing here allocates.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <stdatomic.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "monitor_priv.h"

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

	for (struct monitor_sub *sub = mon.subs; sub; sub = sub->next)
		n += sub->ops->count(sub, s, e);
	return (uint32_t)n;
}

static void recount(struct watch *w)
{
	w->refs = live_in(w->start, w->end);
	w->approx = false;
}

/*
 * Remove [s, e) from the table (the VMA is gone or moved).  Its entries died
 * first (apply()), so what is left of a record keeps its count; a split gives
 * both parts the whole count, never short, marked approx.  No counting here:
 * a munmap of one buffer must not walk all the entries of a bridged record.
 */
void watch_cut(uintptr_t s, uintptr_t e)
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
				 * No slot: keep the left part.  The right one stays
				 * registered; a miss there records it again.
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
	memmove(&mon.w[i], &mon.w[i + 1], (mon.nw - i - 1) * sizeof(mon.w[0]));
	mon.nw--;
}

void watch_release_all(void)
{
	while (mon.nw)
		watch_unregister(mon.nw - 1);
}

/*
 * odpx_invalidate() of [s, e): its entries are dead, so the pages need no
 * watch.  Unregistered, they are the application's alone again: what a
 * userfaultfd registration refuses (mremap(MREMAP_DONTUNMAP): EINVAL) works
 * on them.  A miss racing it finds its range unwatched at its re-check and
 * retries (mon.lock).
 */
void watch_release(uintptr_t s, uintptr_t e)
{
	unsigned i = watch_lower(s);

	while (i < mon.nw && mon.w[i].start < e) {
		uintptr_t a = mon.w[i].start > s ? mon.w[i].start : s;
		uintptr_t b = mon.w[i].end < e ? mon.w[i].end : e;
		struct uffdio_range r = { a, b - a };

		if (live_in(a, b)) {	/* held by an entry another context keeps */
			i++;
			continue;
		}
		ioctl(mon.uffd, UFFDIO_UNREGISTER, &r);	/* gone already is fine */
		watch_cut(a, b);
		i = watch_lower(b);
	}
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
 * A newly registered gap merges with a watched neighbour it touches, as the
 * kernel merges the two VMAs.  The merged count adds the gap's live entries,
 * which no record may have counted (a split with no free slot): a count short
 * by one would let watch_reclaim_idle() unregister a range under a live
 * entry.  An entry over a seam is counted on both sides: approx.
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
 * Bridge the gap to a watched neighbour when the gap's VMA reaches it and the
 * gap is at most mon.widen_max: the two become one VMA and one record, so a
 * pool of buffers with gaps in one mapping costs one record, not two VMAs a
 * buffer.  The price: a munmap or madvise of a bridge raises an event, and the
 * application's own UFFDIO_REGISTER there fails with EBUSY.  The default
 * (MONITOR_WIDEN_DEFAULT) bridges no glibc mmap()ed chunk.  Not in a
 * sanitizer's build: ASan's and TSan's runtimes munmap memory of their own on
 * the reader thread, which may share a VMA with the application's.
 */
static void widen(const struct vma_info *v, uintptr_t *gs, uintptr_t *ge, bool tight)
{
	unsigned i = watch_lower(*gs);	/* the first record after the gap [*gs, *ge) */

	if (mon.mode == UFFD_MODE_MISSING || !mon.widen_max || tight)
		return;	/* missing: every first touch of a bridge would fault to the reader */
	if (SANITIZED)
		return;
	if (i > 0 && mon.w[i - 1].end == v->start && *gs - v->start <= mon.widen_max)
		*gs = v->start;
	if (i < mon.nw && mon.w[i].start == v->end && v->end - *ge <= mon.widen_max)
		*ge = v->end;
}

/*
 * Watch the whole VMA, up to WATCH_WHOLE_MAX, where it holds no record: a
 * partly registered VMA splits, and mremap() refuses a range over several
 * VMAs (EFAULT), so a buffer watched in part could not be grown or moved
 * whole.  Watched whole, mremap() moves it with its registration (a REMAP
 * event).  The price is widen()'s over the rest of the VMA, and new mappings
 * beside it no longer merge into it.  Not in missing mode (every first touch
 * would fault to the reader), in a sanitizer's build (widen()), or with
 * widening off: there mremap() of a partly cached buffer whole fails.
 */
#define WATCH_WHOLE_MAX (1UL << 30)

static void whole(const struct vma_info *v, uintptr_t *gs, uintptr_t *ge, bool tight)
{
	uintptr_t s2, e2;

	if (mon.mode == UFFD_MODE_MISSING || SANITIZED || !mon.widen_max || tight ||
	    v->end - v->start > WATCH_WHOLE_MAX)
		return;
	if (first_gap(v->start, v->end, &s2, &e2) && s2 == v->start && e2 == v->end) {
		*gs = v->start;
		*ge = v->end;
	}
}

/* vm.max_map_count (65530, the kernel's default, where it cannot be read) */
static unsigned map_count_max(void)
{
	unsigned long max_map = 65530;
	FILE *f = fopen("/proc/sys/vm/max_map_count", "re");

	if (f) {
		if (fscanf(f, "%lu", &max_map) != 1 || !max_map || max_map > UINT32_MAX)
			max_map = 65530;
		fclose(f);
	}
	return (unsigned)max_map;
}

/* The lines of /proc/self/maps: the process's VMAs, or 0 where it cannot be read. */
static unsigned count_vmas(void)
{
	char buf[8192];
	unsigned n = 0;
	ssize_t r;
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return 0;
	while ((r = read(fd, buf, sizeof(buf))) > 0)
		for (ssize_t i = 0; i < r; i++)
			n += buf[i] == '\n';
	close(fd);
	return n;
}

/*
 * The process's VMAs within 1% of vm.max_map_count.  A widened or whole-VMA
 * watch splits nothing, but keeps what the application later maps or grows
 * beside the watched VMA from merging with it: one VMA more than without
 * odpx, which at the limit fails the application's mmap() or mprotect()
 * with ENOMEM.  There a watch covers the pages asked for only: its splits
 * fail odpx's own registration (served direct, direct_budget), never the
 * application's calls.  Counted at most every 10 ms per thousand VMAs, so
 * that the count costs a miss little even in a process of many VMAs.
 */
static bool map_count_tight(void)
{
	static _Atomic unsigned max_map, vmas;
	static _Atomic uint64_t next_ns;
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	uint64_t now = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
	if (!atomic_load_explicit(&max_map, memory_order_relaxed))
		atomic_store_explicit(&max_map, map_count_max(), memory_order_relaxed);
	if (now >= atomic_load_explicit(&next_ns, memory_order_relaxed)) {
		unsigned n = count_vmas();

		atomic_store_explicit(&vmas, n, memory_order_relaxed);
		atomic_store_explicit(&next_ns, now + 10000000ULL * (n / 1000 + 1),
				      memory_order_relaxed);
	}
	return (uint64_t)atomic_load_explicit(&vmas, memory_order_relaxed) * 100 >=
	       (uint64_t)atomic_load_explicit(&max_map, memory_order_relaxed) * 99;
}

/* Watch the pages asked for, and the gaps widen() bridges, or the whole VMA (whole()). */
int monitor_watch(uintptr_t start, uintptr_t end)
{
	int einval = 0, enomem = 0;

	for (int spins = 0;; spins++) {
		struct vma_info v, v2;
		uintptr_t gs, ge;
		bool gap;
		int r;

		pthread_mutex_lock(&mon.lock);
		gap = first_gap(start, end, &gs, &ge);
		pthread_mutex_unlock(&mon.lock);
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
		bool tight = mon.mode != UFFD_MODE_MISSING && !SANITIZED && mon.widen_max &&
			     map_count_tight();

		pthread_mutex_lock(&mon.lock);
		/* another miss may have watched part of it: the undo below must hit no record */
		uintptr_t gs2, ge2;
		if (!first_gap(start, end, &gs2, &ge2) || gs2 != gs || ge2 < ge) {
			pthread_mutex_unlock(&mon.lock);
			continue;
		}
		widen(&v, &gs, &ge, tight);
		whole(&v, &gs, &ge, tight);
		if (mon.nw >= mon.budget && !watch_touches(gs, ge) && !watch_reclaim_idle()) {
			pthread_mutex_unlock(&mon.lock);
			return -ENOSPC;
		}
		struct uffdio_register reg = {
			.range = { gs, ge - gs },
			.mode = mon.mode == UFFD_MODE_MISSING ? UFFDIO_REGISTER_MODE_MISSING
							      : UFFDIO_REGISTER_MODE_WP,
		};
		if (ioctl(mon.uffd, UFFDIO_REGISTER, &reg) < 0) {
			r = -errno;
			pthread_mutex_unlock(&mon.lock);
			/*
			 * ENOMEM or EINVAL: the VMA may have changed since the
			 * query.  If it persists, EINVAL is a VMA the uffd cannot
			 * watch, ENOMEM vm.max_map_count refusing the split.
			 */
			if ((r == -ENOMEM && ++enomem < 4) || (r == -EINVAL && ++einval < 4))
				continue;
			if (r == -ENOMEM)
				return -ENOSPC;
			return r == -EBUSY ? -EBUSY : -EINVAL;
		}
		mon.regs++;
		/*
		 * Re-query: a VMA replaced before the registration raised no
		 * event; from here on every change does.
		 */
		r = vma_query(gs, &v2);
		if (r || v2.start > gs || v2.end < ge || v2.shared || v2.file) {
			struct uffdio_range undo = { gs, ge - gs };
			ioctl(mon.uffd, UFFDIO_UNREGISTER, &undo);
			pthread_mutex_unlock(&mon.lock);
			if (r == 0 && (v2.shared || v2.file))
				return -EXDEV;
			continue;
		}
		watch_insert(gs, ge);
		pthread_mutex_unlock(&mon.lock);
	}
}

/*
 * Map the zero page over the pages of [s, e) that have none, as the reader
 * does on a fault: 0, or -EFAULT where [s, e) is gone (never a load, which
 * would kill the process).  mincore() skips the mapped pages, where the ioctl
 * would stop with EEXIST.  One ioctl stays in one VMA: where a run fails
 * otherwise, the chunk's runs go a page at a time.
 */
#define PREFAULT_CHUNK 256	/* pages per mincore() */
#define PREFAULT_BUSY 1000	/* EAGAIN with no progress: a VMA change being reported */

static int zero_missing(uintptr_t s, uintptr_t e)
{
	unsigned char vec[PREFAULT_CHUNK];
	bool one = false;	/* a page per ioctl */
	int busy = 0;

	while (s < e) {
		size_t n = (e - s) / PAGE_SZ < PREFAULT_CHUNK ? (e - s) / PAGE_SZ : PREFAULT_CHUNK;
		if (mincore((void *)s, n * PAGE_SZ, vec) < 0)
			return -EFAULT;
		for (size_t i = 0; i < n;) {
			if (vec[i] & 1) {
				i++;
				continue;
			}
			size_t j = i + 1;
			while (j < n && !(vec[j] & 1) && !one)
				j++;
			struct uffdio_zeropage z = {
				.range = { s + i * PAGE_SZ, (j - i) * PAGE_SZ },
			};
			if (ioctl(mon.uffd, UFFDIO_ZEROPAGE, &z) == 0) {
				i = j;
			} else if (errno == EEXIST) {
				i++;	/* mapped since the mincore(): the reader's, or a touch */
			} else if (errno == EAGAIN && z.zeropage > 0) {
				i += (size_t)z.zeropage / PAGE_SZ;
			} else if (errno == EAGAIN && ++busy < PREFAULT_BUSY) {
				sched_yield();
			} else if (j > i + 1) {
				one = true;	/* a record over two VMAs: one ioctl stays in one */
			} else {
				return -EFAULT;	/* unmapped, or no longer ours */
			}
		}
		s += n * PAGE_SZ;
		one = false;
	}
	return 0;
}

/*
 * MISSING mode only: a user-mode-only uffd is not told of a pin's own
 * (kernel) faults, which then fail with EFAULT.  Map the missing pages of
 * our watched ranges in [s, e) first; pages outside them are never touched.
 */
int monitor_prefault(uintptr_t s, uintptr_t e)
{
	struct { uintptr_t s, e; } part[16];
	unsigned n = 0;
	int r = 0;

	pthread_mutex_lock(&mon.lock);
	for (unsigned i = mon.mode == UFFD_MODE_MISSING ? watch_lower(s) : mon.nw;
	     i < mon.nw && mon.w[i].start < e && n < 16; i++) {
		part[n].s = mon.w[i].start > s ? mon.w[i].start : s;
		part[n].e = mon.w[i].end < e ? mon.w[i].end : e;
		n++;
	}
	pthread_mutex_unlock(&mon.lock);
	for (unsigned i = 0; i < n && r == 0; i++)
		r = zero_missing(part[i].s, part[i].e);
	return r;
}

/* A watched range splits at most two VMAs off its own: stay far below max_map_count. */
unsigned monitor_budget_default(void)
{
	unsigned max_map = map_count_max();

	return max_map / 8 < 16384 ? max_map / 8 : 16384;
}

int monitor_check_refs(bool exact, char *msg, size_t len)
{
	for (unsigned i = 0; i < mon.nw; i++) {
		uint32_t n = live_in(mon.w[i].start, mon.w[i].end);
		if (n > mon.w[i].refs || (exact && n != mon.w[i].refs)) {
			snprintf(msg, len, "watched %#lx-%#lx counts %u, %u live", (unsigned long)mon.w[i].start,
				 (unsigned long)mon.w[i].end, mon.w[i].refs, n);
			return -1;
		}
	}
	return 0;
}
