// SPDX-License-Identifier: MIT
/*
 * fabric_monitor.c - odpx's userfaultfd monitor offered to libfabric's
 * registration cache through its memory monitor import extension
 * (rdma/fi_ext.h: struct fid_mem_monitor, fi_import_fid()).
 *
 * libfabric calls the export ops, each under its own global cache lock
 * (mm_lock); its notify() takes that lock.  odpx calls libfabric only
 * through the handles it is given: the mr_cache fid's bind op, and the
 * notify op libfabric fills in at the import.  libodpx does not link it.
 *
 * Objects and who writes them:
 *   tab            the subscriptions: an open-addressed table keyed by
 *                  (addr, len), written under the invalidation lock
 *                  (monitor_lock()).
 *   seq            the subscriber's seqcount: odd while the reader applies
 *                  a batch (reader.c) and while a rebuild copies the live
 *                  slots into the other table; valid() reads it around its
 *                  lock-free probe.
 *   slot.dead      set by the reader's invalidate() (invalidation lock),
 *                  before the read() that releases the munmap has
 *                  returned to its caller: from then on valid() says false,
 *                  and libfabric's next search re-registers.  That is the
 *                  ordering guarantee (uffd/reader.c's protocol): once
 *                  munmap() has returned, libfabric cannot hit the old
 *                  pages.  The slot stays until libfabric unsubscribes.
 *   pending        ranges to notify() (invalidation lock), handed to the
 *                  notifier thread by the subscriber's kick().
 *
 * The notifier thread calls notify() with no odpx lock held: notify takes
 * mm_lock, and libfabric calls subscribe() (which takes the invalidation
 * lock) under mm_lock.  The reader never calls into libfabric: a thread
 * holding mm_lock that waited on a uffd event the reader had to read would
 * deadlock it.  A notification only tidies libfabric's tree; valid() alone
 * keeps it correct.
 *
 * Operations (libfabric's name: what happens here):
 *   start       attach to the monitor (the reader starts with its first
 *               subscriber), start the notifier.
 *   subscribe   monitor_watch() (no lock), then under the invalidation lock
 *               monitor_read_retry() (covered, no REMOVE of it in the
 *               quarantine), insert, count a watch reference.  A range odpx
 *               cannot watch (shared, file-backed, another uffd's, the
 *               budget spent) is refused: libfabric then uses the
 *               registration uncached.
 *   unsubscribe drop the slot (and the watch reference if still counted).
 *   valid       the slot exists and is not dead: no system call, no lock.
 *   stop        stop the notifier, drop what is left, detach.
 *
 * fork: the child has neither the reader nor the notifier; it refuses to
 * subscribe and calls every inherited subscription invalid.
 */
#include "internal.h"	/* config.h: ODPX_HAVE_FABRIC */

#ifdef ODPX_HAVE_FABRIC
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_ext.h>

#include "log.h"

#define SLOTS 4096			/* per table; a power of two */
#define SUBS_MAX (SLOTS / 2)		/* live + dead slots: beyond, refused */
#define TOMB ((uintptr_t)1)		/* a removed slot's addr; 0 with len 0: empty */
#define PENDING 256

struct slot {
	_Atomic uintptr_t addr;
	_Atomic size_t len;
	_Atomic uint32_t subs;		/* libfabric's subscriptions of (addr, len) */
	_Atomic uint32_t dead;		/* invalidated: valid() says false */
	uint32_t cut;			/* its watch references are dropped */
};

static struct {
	struct fid_mem_monitor fid;
	struct monitor_sub sub;
	_Atomic uint32_t seq;		/* the subscriber's seqcount (reader.c), and rebuild()'s */
	struct slot tabs[2][SLOTS];
	struct slot *_Atomic tab;
	unsigned used, tombs, nlive;	/* invalidation lock */
	uintptr_t lo, hi;		/* bounds of the live slots (invalidation lock) */
	struct { uintptr_t s, e; } pending[PENDING];
	unsigned npending;
	bool overflow;			/* pending spilled: notify everything */
	bool no_notify;			/* the control (ODPX_FABRIC_UNSAFE_NO_NOTIFY) */
	int evfd;			/* the notifier's doorbell (invalidation lock) */
	/* life: written under life */
	_Atomic bool imported, running;
	_Atomic bool child;		/* a fork child's copy */
	pthread_t notifier;
	_Atomic bool stopping, in_call;
	/* counters (relaxed atomics; odpx_fabric_monitor_stats()) */
	_Atomic uint64_t live_subs, live_bytes, subscribes, unsubscribes, refused, invalidated,
		notifies, invalid_answers;
} F = { .tab = F.tabs[0], .evfd = -1 };

static pthread_mutex_t life = PTHREAD_MUTEX_INITIALIZER;

#define FMON(m) ((void)(m))	/* one monitor per process: F */

static uint32_t hash(uintptr_t a, size_t l)
{
	uint64_t h = ((uint64_t)a >> PAGE_SHIFT) * 0x9e3779b97f4a7c15ULL ^ (uint64_t)l * 0xc2b2ae3d27d4eb4fULL;

	return (uint32_t)(h >> 40) & (SLOTS - 1);
}

/* The slot of (a, l) with subscriptions in @t, or NULL; no lock (relaxed loads, see valid()). */
static struct slot *find(struct slot *t, uintptr_t a, size_t l)
{
	for (uint32_t i = hash(a, l), n = 0; n < SLOTS; i = (i + 1) & (SLOTS - 1), n++) {
		uintptr_t sa = atomic_load_explicit(&t[i].addr, ACQ);
		size_t sl = LD(t[i].len);

		if (!sa && !sl)
			return NULL;	/* empty: the end of the chain */
		if (sa == a && sl == l && LD(t[i].subs))
			return &t[i];
	}
	return NULL;
}

static bool overlaps(const struct slot *s, uintptr_t b, uintptr_t e)
{
	uintptr_t a = LD(s->addr);

	return a != TOMB && LD(s->subs) && a < e && a + LD(s->len) > b;
}

/* Invalidation lock: copy the slots in use into the other table and switch. */
static void rebuild(void)
{
	struct slot *cur = LD(F.tab), *nt = cur == F.tabs[0] ? F.tabs[1] : F.tabs[0];

	atomic_store_explicit(&F.seq, LD(F.seq) + 1, RLX);
	atomic_thread_fence(memory_order_release);	/* odd before anything moves; pairs with valid() */
	memset(nt, 0, sizeof(F.tabs[0]));
	for (uint32_t i = 0; i < SLOTS; i++) {
		if (LD(cur[i].addr) == TOMB || !LD(cur[i].subs))
			continue;
		uint32_t j = hash(LD(cur[i].addr), LD(cur[i].len));
		while (LD(nt[j].addr) || LD(nt[j].len))
			j = (j + 1) & (SLOTS - 1);
		ST(nt[j].len, LD(cur[i].len));
		ST(nt[j].subs, LD(cur[i].subs));
		ST(nt[j].dead, LD(cur[i].dead));
		nt[j].cut = cur[i].cut;
		ST(nt[j].addr, LD(cur[i].addr));
	}
	atomic_store_explicit(&F.tab, nt, REL);
	F.tombs = 0;
	atomic_store_explicit(&F.seq, LD(F.seq) + 1, REL);
}

/* Invalidation lock: a new slot for (a, l), or NULL when the table is full. */
static struct slot *insert(uintptr_t a, size_t l)
{
	if (F.used >= SUBS_MAX)
		return NULL;
	if (F.used + F.tombs >= SLOTS * 3 / 4)
		rebuild();

	struct slot *t = LD(F.tab), *tomb = NULL;
	uint32_t i = hash(a, l);

	for (;; i = (i + 1) & (SLOTS - 1)) {
		uintptr_t sa = LD(t[i].addr);
		if (!sa && !LD(t[i].len))
			break;
		if (sa == TOMB && !tomb)
			tomb = &t[i];
	}
	struct slot *s = tomb ? tomb : &t[i];
	if (tomb)
		F.tombs--;
	ST(s->len, l);
	ST(s->dead, 0);
	s->cut = 0;
	ST(s->subs, 0);
	atomic_store_explicit(&s->addr, a, REL);
	F.used++;
	return s;
}

static void page_range(uintptr_t a, size_t l, uintptr_t *s, uintptr_t *e)
{
	*s = a & ~(PAGE_SIZE - 1);
	*e = (a + l + PAGE_SIZE - 1) & ~(PAGE_SIZE - 1);
}

/* Invalidation lock: the watch references of @s go (it was invalidated, or leaves). */
static void cut(struct slot *s)
{
	uintptr_t ps, pe;

	if (s->cut)
		return;
	page_range(LD(s->addr), LD(s->len), &ps, &pe);
	for (uint32_t k = LD(s->subs); k; k--)
		monitor_watch_ref(ps, pe, -1);
	s->cut = 1;
	F.nlive--;
	atomic_fetch_sub_explicit(&F.live_subs, LD(s->subs), RLX);
	atomic_fetch_sub_explicit(&F.live_bytes, (uint64_t)LD(s->len) * LD(s->subs), RLX);
}

static int fm_subscribe(struct fid_mem_monitor *m, const void *addr, size_t len)
{
	uintptr_t a = (uintptr_t)addr, ps, pe;
	struct monitor_read rd;
	struct slot *s;
	int r = 0;

	FMON(m);
	if (!len || a + len < a || a < PAGE_SIZE)
		return -EINVAL;
	if (atomic_load_explicit(&F.child, RLX) || !LD(F.sub.attached))
		return -EOPNOTSUPP;
	page_range(a, len, &ps, &pe);
	for (int attempt = 0; attempt < 2; attempt++) {
		if ((r = monitor_watch(ps, pe)) < 0)
			break;
		monitor_lock();
		monitor_read_begin(&rd);
		/* -EAGAIN: unwatched since (replaced); -EBUSY: a REMOVE may not have zapped yet */
		r = monitor_read_retry(&rd, ps, pe);
		if (r == 0) {
			s = find(LD(F.tab), a, len);
			if (s && LD(s->dead))
				r = -EAGAIN;	/* another cache's copy was invalidated: wait for its unsubscribe */
			else if (!s && !(s = insert(a, len)))
				r = -ENOSPC;
		}
		if (r == 0) {
			if (!LD(s->subs) || s->cut) {
				s->cut = 0;
				F.nlive++;
			}
			atomic_store_explicit(&s->subs, LD(s->subs) + 1, REL);
			monitor_watch_ref(ps, pe, +1);
			atomic_fetch_add_explicit(&F.live_subs, 1, RLX);
			atomic_fetch_add_explicit(&F.live_bytes, len, RLX);
			if (F.nlive == 1 || ps < F.lo)
				F.lo = ps;
			if (F.nlive == 1 || pe > F.hi)
				F.hi = pe;
		}
		monitor_unlock();
		if (r != -EAGAIN)
			break;
	}
	atomic_fetch_add_explicit(r ? &F.refused : &F.subscribes, 1, RLX);
	return r;
}

static void fm_unsubscribe(struct fid_mem_monitor *m, const void *addr, size_t len)
{
	uintptr_t a = (uintptr_t)addr, ps, pe;
	struct slot *s;

	FMON(m);
	if (atomic_load_explicit(&F.child, RLX))
		return;
	monitor_lock();
	if ((s = find(LD(F.tab), a, len))) {
		uint32_t k = LD(s->subs);

		if (!s->cut) {
			page_range(a, len, &ps, &pe);
			monitor_watch_ref(ps, pe, -1);
			atomic_fetch_sub_explicit(&F.live_subs, 1, RLX);
			atomic_fetch_sub_explicit(&F.live_bytes, len, RLX);
			if (k == 1)
				F.nlive--;
		}
		ST(s->subs, k - 1);
		if (k == 1) {
			atomic_store_explicit(&s->addr, TOMB, REL);
			F.used--;
			F.tombs++;
		}
		atomic_fetch_add_explicit(&F.unsubscribes, 1, RLX);
	}
	monitor_unlock();
}

/*
 * No lock, no system call: a probe between two reads of the seqcount, as
 * the pin cache's hit.  Odd: the reader is applying a batch whose read()
 * may already have released a munmap() (or a rebuild is under way): the
 * probe waits for it under the invalidation lock.
 */
static bool fm_valid(struct fid_mem_monitor *m, const void *addr, size_t len)
{
	struct slot *s;
	bool ok;

	FMON(m);
	if (atomic_load_explicit(&F.child, RLX))
		return false;
	uint32_t q = atomic_load_explicit(&F.seq, ACQ);
	if (likely(!(q & 1))) {
		s = find(atomic_load_explicit(&F.tab, ACQ), (uintptr_t)addr, len);
		ok = s && !atomic_load_explicit(&s->dead, ACQ);
		atomic_thread_fence(memory_order_acquire);	/* pairs with rebuild()'s release */
		if (likely(atomic_load_explicit(&F.seq, RLX) == q))
			goto out;
	}
	monitor_lock();
	s = find(LD(F.tab), (uintptr_t)addr, len);
	ok = s && !LD(s->dead);
	monitor_unlock();
out:
	if (!ok)
		atomic_fetch_add_explicit(&F.invalid_answers, 1, RLX);
	return ok;
}

/* The reader's, invalidation lock held: the subscriptions over [b, e) die. */
static unsigned sub_invalidate(struct monitor_sub *sub, uintptr_t b, uintptr_t e,
			       enum monitor_event ev)
{
	struct slot *t = LD(F.tab);
	unsigned n = 0;

	(void)sub;
	(void)ev;
	if (!F.nlive || e <= F.lo || b >= F.hi)
		return 0;
	for (uint32_t i = 0; i < SLOTS; i++) {
		struct slot *s = &t[i];
		if (s->cut || !overlaps(s, b, e))
			continue;
		n += LD(s->subs);
		cut(s);	/* the watch may be cut right after (reader.c, apply()) */
		if (!F.no_notify)
			atomic_store_explicit(&s->dead, 1, REL);
	}
	if (!n || F.no_notify)
		return 0;
	atomic_fetch_add_explicit(&F.invalidated, n, RLX);
	/* one notification per event; adjacent ones merged */
	if (F.npending && F.pending[F.npending - 1].e >= b && F.pending[F.npending - 1].s <= e) {
		if (b < F.pending[F.npending - 1].s)
			F.pending[F.npending - 1].s = b;
		if (e > F.pending[F.npending - 1].e)
			F.pending[F.npending - 1].e = e;
	} else if (F.npending < PENDING) {
		F.pending[F.npending].s = b;
		F.pending[F.npending++].e = e;
	} else {
		F.overflow = true;
	}
	return n;
}

static uint64_t sub_count(struct monitor_sub *sub, uintptr_t b, uintptr_t e)
{
	struct slot *t = LD(F.tab);
	uint64_t n = 0;

	(void)sub;
	for (uint32_t i = 0; i < SLOTS; i++) {
		uintptr_t ps, pe;
		if (t[i].cut || LD(t[i].addr) == TOMB || !LD(t[i].subs))
			continue;
		page_range(LD(t[i].addr), LD(t[i].len), &ps, &pe);
		if (ps < e && pe > b)
			n += LD(t[i].subs);
	}
	return n;
}

/* Invalidation lock: a subscription over [b, e) is dead and not yet unsubscribed. */
static bool dead_within(uintptr_t b, uintptr_t e)
{
	struct slot *t = LD(F.tab);

	for (uint32_t i = 0; i < SLOTS; i++)
		if (LD(t[i].dead) && overlaps(&t[i], b, e))
			return true;
	return false;
}

static void sub_kick(struct monitor_sub *sub)
{
	uint64_t one = 1;

	(void)sub;
	if ((F.npending || F.overflow) && F.evfd >= 0 && write(F.evfd, &one, sizeof(one)) < 0)
		return;	/* the counter is full: it is readable anyway */
}

static const struct monitor_sub_ops sub_ops = {
	.invalidate = sub_invalidate,
	.count = sub_count,
	.kick = sub_kick,
};

/*
 * The notifier: takes the pending ranges under the invalidation lock and
 * notifies them with no lock held.  in_call and stopping are a Dekker pair
 * (seq_cst): stop() joins it, unless it is inside libfabric, where it may
 * wait on a lock the thread that calls stop() holds; then stop() detaches
 * it and it leaves as soon as libfabric returns.
 */
static void *notifier_main(void *arg)
{
	int fd = (int)(intptr_t)arg;
	struct { uintptr_t s, e; } batch[32];
	uint64_t x;

	pthread_setname_np(pthread_self(), "odpx-fabric");
	for (;;) {
		struct pollfd p = { fd, POLLIN, 0 };

		if (atomic_load(&F.stopping))
			break;
		if (poll(&p, 1, -1) < 0)
			continue;
		if (read(fd, &x, sizeof(x)) < 0 && errno != EAGAIN)
			continue;
		for (;;) {
			unsigned n = 0;
			bool all;

			unsigned taken = 0;

			monitor_lock();
			all = F.overflow;
			F.overflow = false;
			while (n < 32 && F.npending) {
				uintptr_t b = F.pending[F.npending - 1].s, e = F.pending[--F.npending].e;
				taken++;
				/*
				 * Only where a dead subscription is left: libfabric has
				 * dropped the others after valid() said false, and may have
				 * registered the new pages there since.
				 */
				if (!dead_within(b, e))
					continue;
				batch[n].s = b;
				batch[n++].e = e;
			}
			monitor_unlock();
			if (!n && !all) {
				if (taken)
					continue;
				break;
			}
			atomic_store(&F.in_call, true);
			if (atomic_load(&F.stopping)) {
				atomic_store(&F.in_call, false);
				break;
			}
			struct fi_ops_mem_notify *ops = F.fid.import_ops;
			if (all && ops)
				ops->notify(&F.fid, NULL, SIZE_MAX);
			for (unsigned i = 0; i < n && ops; i++)
				ops->notify(&F.fid, (void *)batch[i].s, batch[i].e - batch[i].s);
			atomic_store(&F.in_call, false);
			atomic_fetch_add_explicit(&F.notifies, n + all, RLX);
		}
	}
	close(fd);	/* its own: stop() took it from the kick before waking it */
	return NULL;
}

static int fm_start(struct fid_mem_monitor *m)
{
	struct monitor_config cfg;
	sigset_t all, old;
	char why[96];
	int r = 0;

	FMON(m);
	if (atomic_load(&F.child))
		return -EOPNOTSUPP;
	pthread_mutex_lock(&life);
	if (F.running)
		goto out;
	cache_monitor_config(&cfg);
	if ((r = monitor_attach(&F.sub, &cfg, why, sizeof(why))) < 0) {
		odpx_log(LOG_WARN, "libfabric's cache gets no monitor from odpx: %s", why);
		goto out;
	}
	if ((F.evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
		r = -errno;
		goto out_detach;
	}
	atomic_store(&F.stopping, false);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	r = -pthread_create(&F.notifier, NULL, notifier_main, (void *)(intptr_t)F.evfd);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r < 0)
		goto out_close;
	F.running = true;
	goto out;
out_close:
	close(F.evfd);
	F.evfd = -1;
out_detach:
	monitor_detach(&F.sub);
out:
	pthread_mutex_unlock(&life);
	return r;
}

/* life held: the notifier stopped, what libfabric left subscribed dropped, detached. */
static void stop_locked(void)
{
	uint64_t one = 1;
	int fd;

	if (!F.running)
		return;
	F.running = false;
	monitor_lock();	/* sub_kick() writes it under the invalidation lock */
	fd = F.evfd;
	F.evfd = -1;
	monitor_unlock();
	atomic_store(&F.stopping, true);
	if (write(fd, &one, sizeof(one)) < 0)
		odpx_log(LOG_DEBUG, "fabric monitor: waking the notifier: %s", strerror(errno));
	if (atomic_load(&F.in_call))
		pthread_detach(F.notifier);	/* it leaves when libfabric returns */
	else
		pthread_join(F.notifier, NULL);
	monitor_lock();
	for (struct slot *t = LD(F.tab), *s = t; s < t + SLOTS; s++)
		if (!s->cut && LD(s->addr) != TOMB && LD(s->subs))
			cut(s);
	memset(F.tabs, 0, sizeof(F.tabs));
	atomic_store(&F.tab, F.tabs[0]);
	F.used = F.tombs = F.nlive = F.npending = 0;
	F.overflow = false;
	atomic_store(&F.live_bytes, 0);
	atomic_store(&F.live_subs, 0);
	monitor_unlock();
	monitor_detach(&F.sub);
}

static void fm_stop(struct fid_mem_monitor *m)
{
	FMON(m);
	if (atomic_load(&F.child))
		return;
	pthread_mutex_lock(&life);
	stop_locked();
	pthread_mutex_unlock(&life);
}

static struct fi_ops_mem_monitor export_ops = {
	.size = sizeof(struct fi_ops_mem_monitor),
	.start = fm_start,
	.stop = fm_stop,
	.subscribe = fm_subscribe,
	.unsubscribe = fm_unsubscribe,
	.valid = fm_valid,
};

static int fid_close_unimported(struct fid *fid)
{
	(void)fid;
	return 0;
}

static struct fi_ops unimported_ops = {
	.size = sizeof(struct fi_ops),
	.close = fid_close_unimported,
};

static void atfork_prepare(void)
{
	pthread_mutex_lock(&life);
}

static void atfork_parent(void)
{
	pthread_mutex_unlock(&life);
}

/* The child has no reader and no notifier: nothing it inherited is valid. */
static void atfork_child(void)
{
	atomic_store(&F.child, true);
	F.running = false;
	F.evfd = -1;
	pthread_mutex_unlock(&life);
}

ODPX_EXPORT int odpx_fabric_monitor_import(struct fid *mr_cache, uint64_t flags)
{
	static bool atfork_done;
	int r;

	if (!mr_cache || flags || !mr_cache->ops || !mr_cache->ops->bind)
		return -EINVAL;
	if (atomic_load(&F.child))
		return -EOPNOTSUPP;
	pthread_mutex_lock(&life);
	if (F.imported) {
		r = -EALREADY;
		goto out;
	}
	if (!atfork_done && (r = -pthread_atfork(atfork_prepare, atfork_parent, atfork_child)) < 0)
		goto out;
	atfork_done = true;
	F.no_notify = getenv("ODPX_FABRIC_UNSAFE_NO_NOTIFY") &&
		      strcmp(getenv("ODPX_FABRIC_UNSAFE_NO_NOTIFY"), "0");
	F.sub.ops = &sub_ops;
	F.sub.seq = &F.seq;
	F.fid = (struct fid_mem_monitor){
		.fid = { .fclass = FI_CLASS_MEM_MONITOR, .ops = &unimported_ops },
		.export_ops = &export_ops,
	};
	/* fi_import_fid(): libfabric refuses it (-FI_EBUSY) once a cache uses another monitor */
	r = mr_cache->ops->bind(mr_cache, &F.fid.fid, 0);
	if (r > 0)
		r = -r;
	if (r == 0 && !F.fid.import_ops)
		r = -EPROTO;	/* a libfabric that took it without its notify op */
	if (r == 0)
		F.imported = true;
	if (r == 0 && F.no_notify)
		odpx_log(LOG_WARN, "libfabric's cache is never notified (ODPX_FABRIC_UNSAFE_NO_NOTIFY): "
			 "a test's control, stale registrations will be used");
out:
	pthread_mutex_unlock(&life);
	return r;
}

ODPX_EXPORT int odpx_fabric_monitor_close(void)
{
	int r = 0;

	if (atomic_load(&F.child))
		return -EOPNOTSUPP;
	pthread_mutex_lock(&life);
	if (!F.imported) {
		r = -ENOENT;
		goto out;
	}
	/* libfabric's close: no callback of its is in flight once it returns */
	if (F.fid.fid.ops && F.fid.fid.ops->close)
		r = F.fid.fid.ops->close(&F.fid.fid);
	if (r > 0)
		r = -r;
	stop_locked();
	F.imported = false;
out:
	pthread_mutex_unlock(&life);
	return r;
}

ODPX_EXPORT int odpx_fabric_monitor_stats(struct odpx_fabric_stats *st)
{
	if (!st || st->comp_mask)
		return -EINVAL;
	pthread_mutex_lock(&life);
	st->imported = F.imported;
	st->running = F.running && !atomic_load(&F.child);
	pthread_mutex_unlock(&life);
	st->subscriptions = LD(F.live_subs);
	st->bytes = LD(F.live_bytes);
	st->subscribes = LD(F.subscribes);
	st->unsubscribes = LD(F.unsubscribes);
	st->refused = LD(F.refused);
	st->invalidated = LD(F.invalidated);
	st->notifies = LD(F.notifies);
	st->invalid_answers = LD(F.invalid_answers);
	return 0;
}

void fabric_monitor_gauges(uint64_t *subs, uint64_t *bytes, uint64_t *notifies)
{
	*subs = LD(F.live_subs);
	*bytes = LD(F.live_bytes);
	*notifies = LD(F.notifies);
}

#else	/* no rdma/fi_ext.h with the extension: the entry points say so */

void fabric_monitor_gauges(uint64_t *subs, uint64_t *bytes, uint64_t *notifies)
{
	*subs = *bytes = *notifies = 0;
}

ODPX_EXPORT int odpx_fabric_monitor_import(struct fid *mr_cache, uint64_t flags)
{
	return mr_cache && !flags ? -EOPNOTSUPP : -EINVAL;
}

ODPX_EXPORT int odpx_fabric_monitor_close(void)
{
	return -EOPNOTSUPP;
}

ODPX_EXPORT int odpx_fabric_monitor_stats(struct odpx_fabric_stats *st)
{
	return st && !st->comp_mask ? -EOPNOTSUPP : -EINVAL;
}
#endif
