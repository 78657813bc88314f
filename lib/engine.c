// SPDX-License-Identifier: MIT
/*
 * engine.c - the context's background worker, driven by its own io_uring.
 *
 * One thread per context, started lazily (first cached entry or first
 * prefetch), signals masked, stopped and joined by odpx_close().  It is never
 * the userfaultfd reader: its unpins may free memory and trim a watched heap.
 * Work: unpin dead entries (pushed by the monitor or by the last dereg),
 * serve prefetch hints, trim unused entries on each tick.
 *
 * Doorbell protocol (pairs a seq_cst fence on each side):
 *   engine:   sleeping = 1; fence; if (work) { sleeping = 0; loop } else wait
 *   producer: publish work; fence; if (xchg(sleeping, 0)) write(eventfd)
 * Either the engine sees the work before sleeping or the producer sees it
 * asleep; only the producer that flips sleeping rings, so a busy engine costs
 * producers no system call.  The eventfd is watched by a poll on the ring.
 *
 * Linger: after a pass that found work, the engine waits up to linger_us
 * on a timeout with sleeping left 0, so producers do not ring, then serves
 * what came; only a linger that finds nothing puts it back on the doorbell.
 * As io_uring's SQPOLL sets NEED_WAKEUP only after sq_thread_idle, but timed,
 * never spinning: a stream of work costs its producers no system call even
 * when the engine drains faster than they produce.  Work arriving during a
 * linger waits at most linger_us (0: never linger).
 *
 * Ring: a one-shot poll on the doorbell and a timeout for the tick, each
 * queued again when it ends.  The CQ is looked at on every pass, so ticks
 * fire for an engine that never sleeps; every sleep submits what is queued
 * (io_uring_submit_and_wait*), so none is left unsubmitted while the engine
 * sleeps with no deadline.  A submission the kernel refuses took nothing:
 * it is tried again on the next pass, a sleep meanwhile a nap of
 * SUBMIT_RETRY_NS.
 *
 * Prefetch queue: a bounded multi-producer ring (per-cell sequence numbers,
 * after D. Vyukov); a full queue drops the hint and counts it.
 */
#include <errno.h>
#include <liburing.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"

#define UD_DOORBELL 1	/* user_data, and a bit of engine.unarmed */
#define UD_TICK 2
#define SUBMIT_RETRY_NS (1000 * 1000)	/* after a refused submission */
#define BATCH 256
#define RECENT 64
#define RECENT_NS (50 * 1000000ULL)	/* a repeat within 50 ms is merged away */

struct engine {
	/* read by every producer; written only when the engine sleeps or wakes */
	_Atomic int sleeping ALIGNED_LINE;
	struct io_uring ring ALIGNED_LINE;
	struct odpx_ctx *ctx;
	int efd;
	pthread_t thr;
	_Atomic bool stop;
	unsigned unarmed;	/* UD_* of requests to queue again (engine only) */
	struct __kernel_timespec tick, linger;
	struct recent {
		struct pf_range r;
		uint64_t ns;
		uint32_t seq;	/* ctx->seq after the range was served */
	} recent[RECENT];
	unsigned recent_next;
	struct idle_clock idle;		/* idle.c */
};

static struct engine *eng_of(struct odpx_ctx *ctx)
{
	return atomic_load_explicit(&ctx->eng, ACQ);
}

bool engine_running(struct odpx_ctx *ctx)
{
	return eng_of(ctx) != NULL;
}

/* Asleep on the doorbell: the next producer rings (for benchmarks and tests). */
bool engine_asleep(struct odpx_ctx *ctx)
{
	struct engine *e = eng_of(ctx);

	return e && LD(e->sleeping);
}

static void ring_doorbell(struct engine *e)
{
	uint64_t one = 1;

	if (write(e->efd, &one, sizeof(one)) < 0) {
		/* EAGAIN: the counter is saturated, the engine is awake anyway */
	}
}

void engine_kick(struct odpx_ctx *ctx)
{
	struct engine *e = eng_of(ctx);

	if (!e)
		return;
	atomic_thread_fence(memory_order_seq_cst);
	if (LD(e->sleeping) && atomic_exchange_explicit(&e->sleeping, 0, memory_order_acq_rel))
		ring_doorbell(e);
}

/* ---- prefetch queue ---- */

int prefetch_enqueue(struct odpx_ctx *ctx, uintptr_t addr, size_t len, uint32_t flags)
{
	uint64_t pos = LD(ctx->pq_head);
	struct prefetch_cell *c;

	if (ctx->mode == ODPX_MODE_DIRECT) {
		stats_prefetch(ctx);	/* counted, nothing to prefetch into */
		return 0;
	}
	if (unlikely(!engine_running(ctx))) {
		int r;
		/* a hint with no engine to serve it is dropped, as on a full queue */
		if ((r = engine_start(ctx)) < 0) {
			STAT_INC(ctx, prefetch_dropped);
			return odpx_fail(-EAGAIN, "prefetch dropped: no engine (%s)", strerror(-r));
		}
	}
	for (;;) {
		c = &ctx->pq[pos & (PREFETCH_QLEN - 1)];
		uint64_t seq = atomic_load_explicit(&c->seq, ACQ);
		int64_t dif = (int64_t)(seq - pos);
		if (dif == 0) {
			if (atomic_compare_exchange_weak_explicit(&ctx->pq_head, &pos, pos + 1, RLX,
								  RLX))
				break;
		} else if (dif < 0) {
			STAT_INC(ctx, prefetch_dropped);
			return odpx_fail(-EAGAIN, "prefetch queue full");
		} else {
			pos = LD(ctx->pq_head);
		}
	}
	c->addr = addr;
	c->len = len;
	c->flags = flags;
	atomic_store_explicit(&c->seq, pos + 1, REL);
	stats_prefetch(ctx);
	engine_kick(ctx);
	return 0;
}

static bool pq_pop(struct odpx_ctx *ctx, struct pf_range *r)
{
	uint64_t pos = LD(ctx->pq_tail);
	struct prefetch_cell *c = &ctx->pq[pos & (PREFETCH_QLEN - 1)];

	if (atomic_load_explicit(&c->seq, ACQ) != pos + 1)
		return false;
	r->start = c->addr & ~(PAGE_SIZE - 1);
	r->end = (c->addr + c->len + PAGE_SIZE - 1) & ~(PAGE_SIZE - 1);
	r->flags = c->flags;
	atomic_store_explicit(&c->seq, pos + PREFETCH_QLEN, REL);
	ST(ctx->pq_tail, pos + 1);
	return true;
}

static bool pq_empty(struct odpx_ctx *ctx)
{
	uint64_t pos = LD(ctx->pq_tail);

	return atomic_load_explicit(&ctx->pq[pos & (PREFETCH_QLEN - 1)].seq, ACQ) != pos + 1;
}

/* Flags that serve both: write if either writes; no-fault only if both are. */
static uint32_t merge_flags(uint32_t a, uint32_t b)
{
	return ((a | b) & ODPX_PREFETCH_WRITE) | (a & b & ODPX_PREFETCH_NO_FAULT);
}

/* By start; stable, so that a sorted copy and a sort in place agree. */
static void sort_ranges(struct pf_range *r, size_t n)
{
	for (size_t i = 1; i < n; i++) {	/* insertion sort: n is small */
		struct pf_range x = r[i];
		size_t j = i;
		while (j > 0 && r[j - 1].start > x.start) {
			r[j] = r[j - 1];
			j--;
		}
		r[j] = x;
	}
}

size_t prefetch_coalesce(struct pf_range *r, size_t n, uint64_t max_bytes, uint32_t *first)
{
	size_t out = 0;

	sort_ranges(r, n);
	for (size_t i = 0; i < n; i++) {
		/*
		 * Overlapping or adjacent, with the same flags, and the union
		 * within max_bytes.  Flags never mix: a read hint over
		 * read-only memory made part of a write hint fails the whole
		 * advice from that page on, the write hint's pages too.
		 */
		if (out && r[i].start <= r[out - 1].end && r[i].flags == r[out - 1].flags &&
		    (r[i].end <= r[out - 1].end || r[i].end - r[out - 1].start <= max_bytes)) {
			if (r[i].end > r[out - 1].end)
				r[out - 1].end = r[i].end;
		} else {
			if (first)
				first[out] = (uint32_t)i;
			r[out++] = r[i];
		}
	}
	return out;
}

/* A repeat of a range served within RECENT_NS, while the index's seq has not moved since. */
static bool recently_done(struct odpx_ctx *ctx, struct engine *e, const struct pf_range *r,
			  uint64_t now)
{
	uint32_t seq = atomic_load_explicit(&ctx->seq, ACQ);

	for (unsigned i = 0; i < RECENT; i++) {
		const struct pf_range *p = &e->recent[i].r;
		if (e->recent[i].seq == seq && !(seq & 1) && now - e->recent[i].ns < RECENT_NS &&
		    p->start <= r->start && r->end <= p->end &&
		    merge_flags(p->flags, r->flags) == p->flags)
			return true;
	}
	return false;
}

static void remember(struct odpx_ctx *ctx, struct engine *e, const struct pf_range *r, uint64_t now)
{
	e->recent[e->recent_next] = (struct recent){ *r, now, atomic_load_explicit(&ctx->seq, ACQ) };
	e->recent_next = (e->recent_next + 1) % RECENT;
}

int prepin(struct odpx_ctx *ctx, const struct pf_range *r)
{
	struct entry *en;
	int rc = cache_reg(ctx, r->start, r->end - r->start, ODPX_ACCESS_LOCAL_WRITE & ctx->acc_mask,
			   &en);

	if (rc == 0) {
		rc = KIND(en) == KIND_DIRECT;
		cache_dereg(ctx, en);
	}
	return rc;
}

/*
 * odpx_close() waits for the engine: a stopping engine pins nothing more.
 * The batch's hints from @from on (of @n) are dropped and counted.
 */
static bool stopping(struct odpx_ctx *ctx, struct engine *e, size_t from, size_t n)
{
	if (!LD(e->stop))	/* nothing rides on it */
		return false;
	STAT_ADD(ctx, prefetch_dropped, n - from);
	return true;
}

/*
 * Count prepin()'s result @pr for @r.  Pinned or served direct, a repeat
 * soon after would be too (the same mappings); an error is no repeat: it
 * may not hold a moment later.
 */
static void prepinned(struct odpx_ctx *ctx, struct engine *e, const struct pf_range *r,
		      uint64_t now, int pr)
{
	if (pr == 0)
		STAT_INC(ctx, prefetch_issued);
	else
		STAT_INC(ctx, prefetch_failed);
	if (pr >= 0)
		remember(ctx, e, r, now);
}

/* Returns the hints taken off the queue. */
static size_t serve_prefetch(struct odpx_ctx *ctx, struct engine *e)
{
	struct pf_range orig[BATCH], r[BATCH];
	uint32_t first[BATCH];
	size_t n = 0, m;
	uint64_t now;

	while (n < BATCH && pq_pop(ctx, &r[n]))
		n++;
	if (!n)
		return 0;
	now = odpx_now_ns();
	if (ctx->mode != ODPX_MODE_PIN) {	/* ODP modes: direct mode queues nothing */
		size_t k = 0;

		m = prefetch_coalesce(r, n, UINT64_MAX, NULL);
		STAT_ADD(ctx, prefetch_merged, n - m);
		for (size_t i = 0; i < m; i++) {	/* drop repeats, then one batch */
			if (recently_done(ctx, e, &r[i], now)) {
				STAT_INC(ctx, prefetch_merged);
				continue;
			}
			r[k++] = r[i];
		}
		/* a batch that failed is no repeat: sent again, it may be served */
		if (k && ctx->be->advise(ctx, r, k, false) == 0)
			for (size_t i = 0; i < k; i++)
				remember(ctx, e, &r[i], now);
		return n;
	}
	/*
	 * Pin mode: a merged range is one cache entry, so no union beyond
	 * max_entry_bytes; and a union that fails with an error (it reaches
	 * read-only or unmapped memory, or the pinned limit, where its hints
	 * do not) is served hint by hint: orig keeps them, sorted as coalescing sorts
	 * them, and range i holds orig[first[i]] up to the next range's first.
	 */
	for (size_t i = 0; i < n; i++)
		r[i].flags = 0;	/* a pin is for local write, whatever the hint */
	sort_ranges(r, n);
	memcpy(orig, r, n * sizeof(r[0]));
	m = prefetch_coalesce(r, n, ctx->lim.max_entry_bytes, first);
	for (size_t i = 0; i < m; i++) {
		size_t k = (i + 1 < m ? first[i + 1] : n) - first[i];

		if (recently_done(ctx, e, &r[i], now)) {
			STAT_ADD(ctx, prefetch_merged, k);
			continue;
		}
		if (stopping(ctx, e, first[i], n))
			return n;
		int pr = prepin(ctx, &r[i]);

		if (pr >= 0 || k == 1) {	/* its hints would fare the same */
			STAT_ADD(ctx, prefetch_merged, k - 1);
			prepinned(ctx, e, &r[i], now, pr);
			continue;
		}
		for (size_t j = first[i]; j < first[i] + k; j++) {
			if (stopping(ctx, e, j, n))
				return n;
			prepinned(ctx, e, &orig[j], now, prepin(ctx, &orig[j]));
		}
	}
	return n;
}

/* Queue the requests e->unarmed names; one that finds no room stays for the next try. */
static void arm(struct engine *e)
{
	while (e->unarmed) {
		uint64_t ud = e->unarmed & UD_DOORBELL ? UD_DOORBELL : UD_TICK;
		struct io_uring_sqe *sqe = io_uring_get_sqe(&e->ring);

		if (!sqe) {
			io_uring_submit(&e->ring);
			if (!(sqe = io_uring_get_sqe(&e->ring)))
				return;
		}
		if (ud == UD_DOORBELL)
			io_uring_prep_poll_add(sqe, e->efd, POLLIN);
		else
			io_uring_prep_timeout(sqe, &e->tick, 0, 0);
		io_uring_sqe_set_data64(sqe, ud);
		e->unarmed &= ~(unsigned)ud;
	}
}

/*
 * Submit what is queued and sleep until a completion or @ts (NULL: none).
 * 1: a completion is ready; 0: @ts ran out; -EINTR; -EAGAIN: a request
 * could not be submitted, and the engine napped SUBMIT_RETRY_NS instead.
 */
static int ring_wait(struct engine *e, struct __kernel_timespec *ts)
{
	struct io_uring_cqe *cqe;
	int r;

	arm(e);
	if (ts)	/* returns the count submitted, or -ETIME, when @ts ran out */
		r = io_uring_submit_and_wait_timeout(&e->ring, &cqe, 1, ts, NULL);
	else
		r = io_uring_submit_and_wait(&e->ring, 1);
	if (e->unarmed || io_uring_sq_ready(&e->ring)) {
		struct timespec t = { 0, SUBMIT_RETRY_NS };

		nanosleep(&t, NULL);
		return -EAGAIN;
	}
	if (io_uring_cq_ready(&e->ring))
		return 1;
	return r == -EINTR ? r : 0;
}

/* Take the completions: re-arm what ended.  True when the tick fired. */
static bool reap_cq(struct engine *e)
{
	struct io_uring_cqe *cqe;
	unsigned head, seen = 0;
	bool tick = false;

	io_uring_for_each_cqe(&e->ring, head, cqe) {
		uint64_t ud = io_uring_cqe_get_data64(cqe);
		seen++;
		if (ud == UD_DOORBELL) {
			uint64_t v;
			if (read(e->efd, &v, sizeof(v)) < 0) {
				/* EAGAIN: another completion already drained it */
			}
			e->unarmed |= UD_DOORBELL;
		} else if (ud == UD_TICK) {
			tick = true;
			e->unarmed |= UD_TICK;
		}
	}
	io_uring_cq_advance(&e->ring, seen);
	return tick;
}

static bool work_pending(struct odpx_ctx *ctx)
{
	return LD(ctx->dead_head) != NIL || LD(ctx->held_recheck) || !pq_empty(ctx);
}

static void *engine_main(void *arg)
{
	struct engine *e = arg;	/* ctx->eng may not be published yet */
	struct odpx_ctx *ctx = e->ctx;
	size_t served = 0;	/* work done since the engine last waited */
	bool lingers = e->linger.tv_sec || e->linger.tv_nsec;

	pthread_setname_np(pthread_self(), "odpx-engine");
	/*
	 * SCHED_BATCH (allowed unprivileged): a woken engine does not preempt
	 * the thread that rang it, which goes on queueing; the engine takes the
	 * batch when the CPU is free, not one hint per wake-up.
	 */
	pthread_setschedparam(pthread_self(), SCHED_BATCH, &(struct sched_param){ 0 });
	e->unarmed = UD_DOORBELL | UD_TICK;
	while (!atomic_load_explicit(&e->stop, ACQ)) {
		int r;

		if (reap_cq(e)) {
			STAT_INC(ctx, engine_ticks);
			cache_trim(ctx);
			if (ctx->cache_enabled)
				cache_memcg_tick(ctx);
			idle_tick(ctx, &e->idle, odpx_now_ns());
			prereg_tick(ctx);
			stats_seg_tick(ctx);
		}
		if ((e->unarmed & UD_TICK) || io_uring_sq_ready(&e->ring)) {
			arm(e);
			io_uring_submit(&e->ring);
		}
		served += cache_reap_dead(ctx) + serve_prefetch(ctx, e);
		if (served && lingers) {
			if (work_pending(ctx))
				continue;	/* more than one batch queued */
			/* sleeping stays 0: producers do not ring meanwhile */
			served = 0;
			if ((r = ring_wait(e, &e->linger)) == 0)
				STAT_INC(ctx, engine_lingers);
		} else {
			served = 0;
			ST(e->sleeping, 1);
			atomic_thread_fence(memory_order_seq_cst);
			if (work_pending(ctx) || atomic_load(&e->stop)) {
				ST(e->sleeping, 0);
				continue;
			}
			r = ring_wait(e, NULL);
			ST(e->sleeping, 0);
		}
		if (r > 0)
			STAT_INC(ctx, engine_wakeups);
	}
	return NULL;
}

/* A failed start is tried again at most once per ENGINE_RETRY_NS; callers get its errno. */
#define ENGINE_RETRY_NS 1000000000ULL

/*
 * Held from the engine's first descriptor to its publication, and by
 * fork()'s prepare handler: a child inherits no engine or a published one
 * (engine_child_fds()), never descriptors that nothing points to.
 */
static pthread_mutex_t start_lock = PTHREAD_MUTEX_INITIALIZER;

void engine_atfork_prepare(void)
{
	pthread_mutex_lock(&start_lock);
}

/* parent and child: the child's one thread is the one that took it */
void engine_atfork_done(void)
{
	pthread_mutex_unlock(&start_lock);
}

int engine_start(struct odpx_ctx *ctx)
{
	struct engine *e;
	sigset_t all, old;
	int r = 0;

	if (engine_running(ctx))
		return 0;
	pthread_mutex_lock(&ctx->eng_lock);
	if (LD(ctx->eng))
		goto out;
	if (ctx->eng_retry_ns && odpx_now_ns() < ctx->eng_retry_ns) {
		r = ctx->eng_err;
		goto out;
	}
	/* aligned: its ALIGNED_LINE fields must be alone on their lines */
	if (!(e = aligned_alloc(64, sizeof(*e)))) {
		r = -ENOMEM;
		goto out_free;	/* free(NULL): the failure is recorded there */
	}
	memset(e, 0, sizeof(*e));
	e->tick.tv_sec = ctx->tick_ms / 1000;
	e->tick.tv_nsec = (long long)(ctx->tick_ms % 1000) * 1000000LL;
	e->linger.tv_sec = ctx->linger_us / 1000000;
	e->linger.tv_nsec = (long long)(ctx->linger_us % 1000000) * 1000LL;
	pthread_mutex_lock(&start_lock);
	e->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (e->efd < 0) {
		r = -errno;
		goto out_unlock;
	}
	if ((r = io_uring_queue_init(16, &e->ring, 0)) < 0)
		goto out_efd;
	e->ctx = ctx;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	r = -pthread_create(&e->thr, NULL, engine_main, e);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r == 0) {
		/* published once the thread exists: one a kicker saw lives until engine_stop() */
		atomic_store_explicit(&ctx->eng, e, REL);
		pthread_mutex_unlock(&start_lock);
		goto out;
	}
	io_uring_queue_exit(&e->ring);
out_efd:
	close(e->efd);
out_unlock:
	pthread_mutex_unlock(&start_lock);
out_free:
	free(e);
	ctx->eng_err = r;
	ctx->eng_retry_ns = odpx_now_ns() + ENGINE_RETRY_NS;
out:
	pthread_mutex_unlock(&ctx->eng_lock);
	return r < 0 ? odpx_fail(r, "engine start: %s", strerror(-r)) : 0;
}

void engine_stop(struct odpx_ctx *ctx)
{
	struct engine *e;

	pthread_mutex_lock(&ctx->eng_lock);
	e = LD(ctx->eng);
	if (e) {
		atomic_store_explicit(&e->stop, true, REL);
		ring_doorbell(e);
		pthread_join(e->thr, NULL);
		atomic_store_explicit(&ctx->eng, NULL, REL);
		/* the monitor kicks under its lock: one that loaded e is done after this */
		monitor_lock();
		monitor_unlock();
		io_uring_queue_exit(&e->ring);
		close(e->efd);
		free(e);
	}
	pthread_mutex_unlock(&ctx->eng_lock);
}

/*
 * Child after fork, in the atfork handler: the thread is gone; its copies
 * of the descriptors and of the ring's mappings (a ring lives while it is
 * mapped anywhere) go with the rest.
 */
void engine_child_fds(struct odpx_ctx *ctx)
{
	struct engine *e = LD(ctx->eng);

	if (!e)
		return;
	io_uring_queue_exit(&e->ring);
	close(e->efd);
	free(e);
	ST(ctx->eng, NULL);
}
