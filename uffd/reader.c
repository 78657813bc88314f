// SPDX-License-Identifier: MIT
/*
 * reader.c - the monitor's reader thread and the invalidation protocol.
 *
 * THE PROTOCOL.  One userfaultfd per process watches the VMAs that hold
 * cached registrations (watch.c).  It is registered write-protect only
 * (WP_ASYNC where the kernel has it) and never write-protects a page, so no
 * fault reaches user space: it exists for its events.  UNMAP (munmap,
 * MAP_FIXED over, brk and mremap shrink), REMOVE (MADV_DONTNEED, FREE,
 * REMOVE) and REMAP (mremap move).  The kernel keeps a munmap() caller
 * blocked until its event has been read() from the uffd: dequeued, not
 * handled.  Everything below rests on that.
 *
 * Objects and who writes them:
 *   mon.lock          the invalidation lock.  Held by the reader from before
 *                     its first read() of a batch until the batch is applied,
 *                     and by every writer of a subscriber's index.
 *   sub->seq          each subscriber's seqcount.  Odd while the reader
 *                     holds mon.lock for a batch, or while an index writer
 *                     changes the index (under mon.lock).  Lock-free lookups
 *                     read it before and after taking a reference, and keep
 *                     the reference only if it was even and did not move.
 *   mon.inval_count,  a counter and ring of the ranges invalidated (mon.lock),
 *   mon.log           for the miss's retry check.
 *   mon.rm            the REMOVEs with the time each was read (mon.lock).
 *
 * Operations:
 *   reader     poll (no lock) -> lock -> every seq odd -> read() until empty
 *              -> invalidate() each event's range in every subscriber, log
 *              it, cut the watch -> every seq even -> unlock; kick() once the
 *              burst has been quiet 1 ms (reader_main()).
 *   hit        seq even? -> find -> CAS a reference -> seq unchanged? keep.
 *   miss       watch (no lock) -> lock: covered? read_begin -> unlock ->
 *              pin (no lock) -> lock: read_retry: an overlapping
 *              invalidation since begin -> unpin, retry (bounded, then
 *              direct); a REMOVE younger than the quarantine -> direct;
 *              else insert (seq odd/even) -> unlock.
 *   invalidate odpx_invalidate(): a REMOVE applied by the caller's thread,
 *              exactly as the reader applies one.
 *
 * A munmap racing a miss, with the two orders of the miss's re-check:
 *
 *   app: munmap(B)             reader                  miss over B
 *                                                      lock; begin: c0; unlock
 *                                                      pin(B) (old pages)
 *   kernel queues UNMAP(B),
 *   caller blocks
 *                              poll: readable
 *                              lock; seq odd
 *                              read(): UNMAP(B)
 *   caller runs again          log(B); kill B's entries
 *                              seq even; unlock
 *                                                      lock; retry: B logged
 *                                                      since c0 -> unpin, again
 *
 *   If the miss takes the lock first, it inserts, and the reader's
 *   invalidate() kills the new entry before unlock: the munmap has not
 *   returned before its event is read, and the event is read under the
 *   lock.  Either way, once munmap() has returned no lookup returns a
 *   registration of the old pages.  Reading first and locking after would
 *   let a lookup run between the two.
 *
 * REMOVE is queued before the pages are zapped, and nothing tells when the
 * zap ends: a pin taken between our read and the zap holds pages about to
 * be discarded.  A miss whose pin began less than mon.quarantine_ns after
 * the read of an overlapping REMOVE is served direct, never cached.  When
 * the whole REMOVE ring is younger than that, an older one may have been
 * overwritten: every miss is then served direct until it ages out.
 *
 * Rules: nobody allocates, frees, munmaps, madvises, pins or unpins while
 * holding mon.lock: any of those can block on an event that only the
 * reader, which needs the lock, can dequeue.  The reader thread does nothing
 * but read and apply: a free() on it could trim a watched heap and wait for
 * itself.  Dead entries are unpinned by the subscriber's own thread, which
 * kick() wakes.  io_uring may poll the uffd; it must never read it, which
 * would release a munmap before the lock is taken.
 */
#include <errno.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "monitor_priv.h"

/* the kick of what a burst killed: once events stop this long, at the latest KICK_MAX_NS in */
#define KICK_QUIET_NS 1000000ULL
#define KICK_MAX_NS 20000000ULL
/* while spinning (opt-in), yield the CPU every YIELD_EVERY empty polls */
#define YIELD_EVERY 16
/* "recently": among the last REPIN_WINDOW invalidations (a counter only) */
#define REPIN_WINDOW 16

struct monitor mon = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.uffd = -1,
	.stopfd = -1,
	.kickfd = -1,
};

void monitor_lock(void)
{
	pthread_mutex_lock(&mon.lock);
}

void monitor_unlock(void)
{
	pthread_mutex_unlock(&mon.lock);
}

static uint64_t monitor_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);	/* vDSO: no system call */
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* Every subscriber's seq one step on (mon.lock): odd before a batch, even after. */
static void seq_all(void)
{
	for (struct monitor_sub *s = mon.subs; s; s = s->next) {
		uint32_t v = atomic_load_explicit(s->seq, memory_order_relaxed);
		/* release: the index changes made while odd are seen with the even value */
		atomic_store_explicit(s->seq, v + 1, memory_order_release);
	}
	/* odd before the read() that releases a munmap, and before the index changes */
	atomic_thread_fence(memory_order_seq_cst);
}

static void kick_all(void)
{
	for (struct monitor_sub *s = mon.subs; s; s = s->next)
		s->ops->kick(s);
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

static bool inval_since(uint64_t c0, uintptr_t s, uintptr_t e)
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
 * A REMOVE overlapping [s, e), read before @t0 (the pin's start; 0 if no
 * REMOVE had been read by then), may zap after it: it was read less than
 * the quarantine before @t0.  From the pin's start, not from now: a pin
 * taken early and inserted late is as old as its pages.  REMOVEs read after
 * @t0 are in the invalidation log (the miss retries).
 */
static bool remove_recent(uintptr_t s, uintptr_t e, uint64_t t0)
{
	uint64_t c, n;

	if (!t0)
		return false;
	/* newest first; the ring is in reading order: stop at the first aged one */
	for (c = mon.nrm, n = 0; c > 0 && n < REMOVE_LOG; c--, n++) {
		const typeof(mon.rm[0]) *r = &mon.rm[(c - 1) % REMOVE_LOG];
		if ((int64_t)(t0 - r->ns) > (int64_t)mon.quarantine_ns)
			return false;
		if (r->start < e && r->end > s)
			return true;
	}
	return c > 0;	/* all of the ring is recent and older ones are gone */
}

uint64_t monitor_remove_read_ns(uint64_t i)
{
	return i < mon.nrm && mon.nrm - i <= REMOVE_LOG ? mon.rm[i % REMOVE_LOG].ns : 0;
}

void monitor_read_begin(struct monitor_read *rd)
{
	rd->count = mon.inval_count;
	rd->t0_ns = mon.nrm ? monitor_ns() : 0;
}

int monitor_read_retry(const struct monitor_read *rd, uintptr_t s, uintptr_t e)
{
	/* unwatched since: an idle record reclaimed for the budget, a VMA replaced */
	if (inval_since(rd->count, s, e) || !monitor_covers(s, e))
		return -EAGAIN;
	return remove_recent(s, e, rd->t0_ns) ? -EBUSY : 0;
}

bool monitor_recently_invalidated(uintptr_t s, uintptr_t e)
{
	uint64_t lo = mon.inval_count > REPIN_WINDOW ? mon.inval_count - REPIN_WINDOW : 0;

	return mon.inval_count > lo && inval_since(lo, s, e);
}

static unsigned apply(uintptr_t s, uintptr_t e, enum monitor_event ev)
{
	unsigned n = 0;

	log_inval(s, e, ev == MONITOR_REMOVE || ev == MONITOR_API);
	for (struct monitor_sub *sub = mon.subs; sub; sub = sub->next)
		n += sub->ops->invalidate(sub, s, e, ev);
	if (ev == MONITOR_UNMAP || ev == MONITOR_REMAP)
		watch_cut(s, e);	/* the VMA is gone, or moved away */
	return n;
}

static void handle(const struct uffd_msg *m)
{
	mon.events++;
	switch (m->event) {
	case UFFD_EVENT_UNMAP:
	case UFFD_EVENT_REMOVE:
		apply(m->arg.remove.start, m->arg.remove.end,
		      m->event == UFFD_EVENT_UNMAP ? MONITOR_UNMAP : MONITOR_REMOVE);
		break;
	case UFFD_EVENT_REMAP:
		apply(m->arg.remap.from, m->arg.remap.from + m->arg.remap.len, MONITOR_REMAP);
		break;
	case UFFD_EVENT_PAGEFAULT: {
		/* MISSING mode only (watch.c, monitor_prefault()): the zero page, and wake */
		struct uffdio_zeropage z = {
			.range = { m->arg.pagefault.address & ~(PAGE_SZ - 1), PAGE_SZ },
		};
		if (ioctl(mon.uffd, UFFDIO_ZEROPAGE, &z) < 0 && errno == EEXIST) {
			struct uffdio_range w = z.range;
			ioctl(mon.uffd, UFFDIO_WAKE, &w);
		}
		break;
	}
	}
}

/* Applied as the reader applies a REMOVE, on the caller's thread. */
unsigned monitor_invalidate(uintptr_t s, uintptr_t e)
{
	unsigned n;

	pthread_mutex_lock(&mon.lock);
	seq_all();
	n = apply(s, e, MONITOR_API);
	watch_release(s, e);
	seq_all();
	kick_all();
	pthread_mutex_unlock(&mon.lock);
	return n;
}

/*
 * One batch, read and applied under the lock.  A short read has drained
 * the queue: an event queued after it keeps its caller blocked, and the
 * uffd readable, until the next batch reads it.
 */
static void read_batch(void)
{
	struct uffd_msg msgs[32];	/* on the stack: the reader never allocates */
	ssize_t n;

	pthread_mutex_lock(&mon.lock);
	seq_all();
	do {
		n = read(mon.uffd, msgs, sizeof(msgs));
		for (ssize_t i = 0; i < n / (ssize_t)sizeof(msgs[0]); i++)
			handle(&msgs[i]);
	} while (n == (ssize_t)sizeof(msgs));
	seq_all();
	pthread_mutex_unlock(&mon.lock);
}

/*
 * The reader: wait for the uffd, the stop eventfd or the kick timerfd, and
 * read a batch.  Unpinners are kicked once a burst has been quiet for
 * KICK_QUIET_NS (at the latest KICK_MAX_NS after its first event), not at
 * each event: one awake during the burst costs every later munmap a TLB
 * shootdown to its CPU, and one woken on the caller's CPU runs first.  The
 * timerfd is re-armed at most once each KICK_QUIET_NS, never a timeout of
 * each wait: arming a timer traps to the hypervisor in a virtual machine.
 * A miss short of room reaps dead entries itself.  mon.spin_ns
 * (ODPX_MONITOR_SPIN_US) keeps it polling that long after an event.
 */
static bool kick_at(uint64_t in_ns)
{
	const struct itimerspec t = { .it_value = { (time_t)(in_ns / 1000000000ULL),
						    (long)(in_ns % 1000000000ULL) } };

	return !timerfd_settime(mon.kickfd, 0, &t, NULL);
}

static void kick_now(void)
{
	pthread_mutex_lock(&mon.lock);
	kick_all();
	pthread_mutex_unlock(&mon.lock);
}

void *reader_main(void *arg)
{
	const struct timespec zero = { 0, 0 };
	uint64_t spin_until = 0, burst_ns = 0, last_ns = 0, x;
	unsigned idle_polls = 0;

	(void)arg;
	pthread_setname_np(pthread_self(), "odpx-uffd");	/* in top and a hang's dump */
	for (;;) {
		struct pollfd p[3] = { { mon.uffd, POLLIN, 0 }, { mon.stopfd, POLLIN, 0 },
				       { mon.kickfd, POLLIN, 0 } };
		uint64_t now = spin_until ? monitor_ns() : 0;	/* read only while spinning */

		if (ppoll(p, 3, now < spin_until ? &zero : NULL, NULL) < 0)
			continue;	/* no EINTR: signals are masked */
		if (p[1].revents)
			break;
		if (p[2].revents && read(mon.kickfd, &x, sizeof(x)) == sizeof(x)) {
			now = monitor_ns();
			/* burst_ns: the first event of a burst not yet kicked (0: none) */
			if (!(last_ns + KICK_QUIET_NS > now && now - burst_ns < KICK_MAX_NS &&
			      kick_at(last_ns + KICK_QUIET_NS - now))) {
				kick_now();
				burst_ns = 0;
			}
		}
		if (!(p[0].revents & (POLLIN | POLLERR | POLLHUP))) {
			if (now < spin_until && !(++idle_polls % YIELD_EVERY))
				sched_yield();
			continue;
		}
		read_batch();
		last_ns = monitor_ns();
		if (!burst_ns) {
			burst_ns = last_ns;
			if (!kick_at(KICK_QUIET_NS)) {	/* a kick that cannot be timed is given at once */
				kick_now();
				burst_ns = 0;
			}
		}
		if (mon.spin_ns) {
			sched_yield();	/* a caller we just woke on our CPU goes first */
			spin_until = monitor_ns() + mon.spin_ns;
		}
	}
	return NULL;
}
