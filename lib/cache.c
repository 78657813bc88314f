// SPDX-License-Identifier: MIT
/*
 * cache.c - the pin-down registration cache.
 *
 * Index (index.h, index.c): per access class, the alive entries never
 * overlap.  Two structures share the entries' own memory: a hash by exact
 * start page (the common hit: the same buffer again) and an AVL tree by start
 * (interior hits, overlap and invalidation scans).  Both are written under
 * mon.lock inside a ctx->seq write section and read without any lock: a
 * reader loads ctx->seq, searches, takes a reference with a CAS on the
 * entry's word (which fails if the entry was recycled, since that bumps its
 * generation), and re-reads ctx->seq.  A changed or odd seq means retry;
 * after a few retries it searches under mon.lock.  So a hit writes only to
 * the entry it hits.
 *
 * Miss (the mmu_interval_read_begin/retry protocol of DESIGN.md):
 *   watch the range (uffd) -> record mon.inval_count -> pin, no lock held ->
 *   lock -> any invalidation of the range since the record?  unpin, retry
 *   (bounded, then direct) : insert.
 * An event that the monitor has not read yet when we insert is fine: the
 * munmap() behind it cannot return before the monitor has read it, and the
 * monitor marks the new entry dead in the same critical section.
 *
 * Room for a new entry (the free list, the LRU of unused entries, eviction
 * and the pin itself) is reserve.c's; the two share cache.h.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cache.h"
#include "../uffd/monitor.h"

#define MISS_RETRIES 3
#define FAST_TRIES 4

/* On a hit, *taken is the entry's size if it was unused, else 0 (stats.c). */
static int try_get(struct odpx_ctx *ctx, uint32_t idx, uintptr_t a, uintptr_t aend,
		   uint32_t acc, struct entry **out, uint64_t *taken)
{
	struct entry *e = &ctx->ent[idx];
	uint64_t w = atomic_load_explicit(&e->word, ACQ);

	if (W_STATE(w) != ST_ALIVE || W_ACC(w) != acc || W_REF(w) == UINT32_MAX)
		return LK_RETRY;
	uint64_t span = LD(e->span);
	atomic_thread_fence(ACQ);	/* span read before the CAS validates it */
	if (!covers(span, a, aend))
		return LK_RETRY;
	if (!atomic_compare_exchange_strong_explicit(&e->word, &w, w + 1,
						     memory_order_acq_rel, RLX))
		return LK_RETRY;
	*out = e;
	*taken = W_REF(w) ? 0 : SPAN_BYTES(span);
	return LK_HIT;
}

/* On LK_MISS, *seen is the (even) seq under which nothing was found. */
static int lookup_fast(struct odpx_ctx *ctx, uintptr_t a, uintptr_t aend, uint32_t acc,
		       struct entry **out, uint64_t *taken, uint32_t *seen)
{
	for (int t = 0; t < FAST_TRIES; t++) {
		uint32_t s = seq_read(ctx);
		if (s & 1)
			continue;
		uint32_t idx = index_find(ctx, a, aend, acc);
		if (idx == NIL) {
			atomic_thread_fence(ACQ);
			if (!seq_retry(ctx, s)) {
				*seen = s;
				return LK_MISS;
			}
			continue;
		}
		if (try_get(ctx, idx, a, aend, acc, out, taken) != LK_HIT)
			continue;
		atomic_thread_fence(ACQ);
		if (!seq_retry(ctx, s))
			return LK_HIT;
		cache_unget(ctx, *out, *taken);	/* an invalidation may have begun: redo */
	}
	return LK_RETRY;
}

/* Under mon.lock: nothing moves. */
static int lookup_locked(struct odpx_ctx *ctx, uintptr_t a, uintptr_t aend, uint32_t acc,
			 struct entry **out, uint64_t *taken)
{
	uint32_t idx = index_find(ctx, a, aend, acc);

	if (idx == NIL)
		return LK_MISS;
	struct entry *e = &ctx->ent[idx];
	uint64_t w = atomic_fetch_add_explicit(&e->word, 1, memory_order_acq_rel);
	if (W_STATE(w) != ST_ALIVE) {	/* cannot happen: DEAD leaves the index */
		atomic_fetch_sub_explicit(&e->word, 1, RLX);
		return LK_MISS;
	}
	*out = e;
	*taken = W_REF(w) ? 0 : SPAN_BYTES(LD(e->span));
	return LK_HIT;
}

/* ---- entry life cycle ---- */

static void dead_push(struct odpx_ctx *ctx, uint32_t idx)
{
	uint32_t head = atomic_load_explicit(&ctx->dead_head, RLX);

	atomic_fetch_add_explicit(&ctx->releasing, 1, RLX);
	do {
		ST(ctx->ent[idx].dnext, head);
	} while (!atomic_compare_exchange_weak_explicit(&ctx->dead_head, &head, idx, REL, RLX));
}

/*
 * Mark an indexed entry DEAD and take it out of the index.  mon.lock held,
 * inside a seq write section.  Returns true when the caller became the owner
 * (no reference left): the entry must then be pushed or freed by it.
 */
bool kill_locked(struct odpx_ctx *ctx, uint32_t idx, int reason)
{
	struct entry *e = &ctx->ent[idx];
	uint64_t w = atomic_load_explicit(&e->word, RLX);

	index_remove(ctx, idx, W_ACC(w));
	if (!(ctx->flags & ODPX_OPEN_UNSAFE_NO_MONITOR))	/* never counted (below) */
		monitor_watch_ref(e_start(e), e_end(e), -1);
	e->reason = (uint8_t)reason;
	/* ALIVE -> DEAD keeping the reference count: state is 1 -> 2 */
	w = atomic_fetch_add_explicit(&e->word, 1ULL << W_STATE_SHIFT, memory_order_acq_rel);
	if (W_REF(w))
		return false;
	stats_unused(ctx, 0, SPAN_BYTES(LD(e->span)));	/* it was unused */
	return true;
}

/* Entry back to the free list (ctx->lock held). */
void entry_free_locked(struct odpx_ctx *ctx, uint32_t idx)
{
	struct entry *e = &ctx->ent[idx];
	uint64_t w = LD(e->word);

	atomic_store_explicit(&e->word, W_MAKE(W_GEN(w) + 1, 0, ST_FREE, 0), REL);
	ctx->nentries--;
	ctx->pinned_bytes -= SPAN_BYTES(LD(e->span));
	stats_gauges_publish(ctx);
	/* the free list is doubly linked through the LRU links, unused while free */
	e->lru_prev = NIL;
	e->lru_next = ctx->free_head;
	if (ctx->free_head != NIL)
		ctx->ent[ctx->free_head].lru_prev = idx;
	ctx->free_head = idx;
}

static void release_owned(struct odpx_ctx *ctx, uint32_t idx)
{
	ctx->be->unpin(ctx, idx);
	STAT_INC(ctx, unpins);
	pthread_mutex_lock(&ctx->lock);
	cache_unlink_lru(ctx, idx);
	entry_free_locked(ctx, idx);
	pthread_mutex_unlock(&ctx->lock);
}

/*
 * Events the reader process dequeued and nobody applied yet (its gate is
 * up) kill entries the munmaps behind them have already returned from:
 * apply them, so that reaping before a reservation frees those slots too.
 */
static void apply_pending(struct odpx_ctx *ctx)
{
	if (atomic_load_explicit(atomic_load_explicit(&ctx->gate, ACQ), ACQ)) {
		mon_lock();
		monitor_unlock_kick(ctx);	/* our caller reaps our dead entries */
	}
}

/* Unpin every dead entry with no holder.  Never on the uffd reader. */
/* Returns the entries released. */
unsigned cache_reap_dead(struct odpx_ctx *ctx)
{
	uint32_t i = atomic_exchange_explicit(&ctx->dead_head, NIL, ACQ);
	unsigned n = 0;

	while (i != NIL) {
		uint32_t next = LD(ctx->ent[i].dnext);
		release_owned(ctx, i);
		atomic_fetch_sub_explicit(&ctx->releasing, 1, RLX);
		STAT_INC(ctx, dead_unpinned);
		i = next;
		n++;
	}
	return n;
}

/* The last reference of a DEAD entry is gone: it is ours to unpin. */
void put_dead(struct odpx_ctx *ctx, struct entry *e)
{
	if (KIND(e) == KIND_DIRECT) {
		release_owned(ctx, entry_idx(ctx, e));
		return;
	}
	dead_push(ctx, entry_idx(ctx, e));
	engine_kick(ctx);
}

/* Give back a reference a lookup took and could not keep. */
void cache_unget(struct odpx_ctx *ctx, struct entry *e, uint64_t taken)
{
	stats_unused(ctx, put_ref(ctx, e), taken);
}

/*
 * A reservation found no room while entries were on their way back to the
 * free list (dead ones the engine reaps, victims of another miss being
 * unpinned; not the reservation's own, freed before it waits): what is in
 * use does not fill the limits.  Reap, wait until some are back (the count
 * falls below rv->coming, or rv->dead is freed), at most ROOM_WAIT_NS, and
 * say whether to try again.
 */
#define ROOM_WAIT_NS 40000000ULL	/* README, "Limits and knobs": about 40 ms, twice */

static bool room_coming(struct odpx_ctx *ctx, const struct reservation *rv)
{
	if (!rv->coming && rv->dead == NIL)
		return false;
	for (uint64_t end = monitor_ns() + ROOM_WAIT_NS;;) {
		if (atomic_load_explicit(&ctx->dead_head, RLX) != NIL)
			cache_reap_dead(ctx);
		if (atomic_load_explicit(&ctx->releasing, ACQ) < rv->coming ||
		    (rv->dead != NIL && W_STATE(LD(ctx->ent[rv->dead].word)) != ST_DEAD) ||
		    monitor_ns() >= end)
			return true;
		struct timespec t = { 0, 20000 };
		nanosleep(&t, NULL);
	}
}

#define ROOM_WAITS 2	/* per registration */

static int direct_reg(struct odpx_ctx *ctx, uintptr_t s, uintptr_t end, uint32_t acc,
		      struct entry **out)
{
	int64_t idx;
	int r;

	for (int waits = 0;; waits++) {
		struct reservation rv = { .victims = NIL, .dead = NIL };

		apply_pending(ctx);
		if (atomic_load_explicit(&ctx->dead_head, RLX) != NIL)
			cache_reap_dead(ctx);
		pthread_mutex_lock(&ctx->lock);
		idx = reserve_locked(ctx, end - s, NIL, 0, &rv, false);
		pthread_mutex_unlock(&ctx->lock);
		if ((r = pin_reserved(ctx, idx, &rv, s, end - s, acc)) == 0)
			break;
		if (idx != -ENOMEM || waits == ROOM_WAITS || !room_coming(ctx, &rv))
			return r;
	}
	pthread_mutex_unlock(&ctx->lock);
	struct entry *e = &ctx->ent[idx];
	e->kind = KIND_DIRECT | (ctx->be->id == ODPX_BACKEND_URING ? KIND_URING : 0);
	e->access = (uint8_t)acc;
	ST(e->span, SPAN_MAKE(s, (end - s) >> PAGE_SHIFT));
	/* not indexed: DEAD from birth, freed by its only dereg */
	atomic_store_explicit(&e->word, W_MAKE(W_GEN(LD(e->word)), acc, ST_DEAD, 1), REL);
	STAT_INC(ctx, direct_regs);
	*out = e;
	return 0;
}

/*
 * After a failed attach (the reason is in ctx->reason) misses are served
 * direct, and the attach is tried again at most once per
 * MONITOR_RETRY_NS: a thread or process limit that stopped the reader may
 * be lifted, and a context should not stay uncached for its whole life
 * because of one refusal.  A userfaultfd the kernel refuses stays refused
 * (monitor.c), and costs each retry only a lock.
 */
#define MONITOR_RETRY_NS 1000000000ULL

static int attach_monitor(struct odpx_ctx *ctx)
{
	uint64_t retry, now;
	int r;

	if (atomic_load_explicit(&ctx->attached, ACQ))
		return 0;
	retry = atomic_load_explicit(&ctx->monitor_retry_ns, RLX);
	if (retry && (now = monitor_ns()) < retry)
		return -ENOTSUP;
	/* one thread of the context retries; the others go direct meanwhile */
	if (retry && !atomic_compare_exchange_strong(&ctx->monitor_retry_ns, &retry,
						     now + MONITOR_RETRY_NS))
		return -ENOTSUP;
	r = monitor_attach(ctx);
	if (r < 0)
		atomic_store(&ctx->monitor_retry_ns, monitor_ns() + MONITOR_RETRY_NS);
	return r;
}

/* @seen: the seq of a lookup that found nothing, or odd (none) */
static int miss(struct odpx_ctx *ctx, uintptr_t s, uintptr_t end, uint32_t acc,
		struct entry **out, uint32_t seen)
{
	bool unsafe = ctx->flags & ODPX_OPEN_UNSAFE_NO_MONITOR;
	int r;

	STAT_INC(ctx, misses);
	if (!unsafe && attach_monitor(ctx) < 0) {
		STAT_INC(ctx, direct_no_monitor);
		return direct_reg(ctx, s, end, acc, out);
	}
	/*
	 * Cache only with an engine: it unpins the entries that die with no
	 * miss to follow, and trims.  engine_start() tries again at most once
	 * a second after a failure (engine.c).
	 */
	if (!engine_running(ctx) && engine_start(ctx) < 0) {
		STAT_INC(ctx, direct_no_engine);
		return direct_reg(ctx, s, end, acc, out);
	}
	bool watched = false;
	uint64_t taken;
	int waits = 0;

	for (int attempt = 0; attempt < MISS_RETRIES;) {
		uintptr_t us = s, ue = end;
		struct reservation rv = { .victims = NIL, .dead = NIL };
		uint64_t c0, t0;

		apply_pending(ctx);
		if (atomic_load_explicit(&ctx->dead_head, RLX) != NIL)
			cache_reap_dead(ctx);
		/*
		 * One section under both locks: lookup, watch check, merge and
		 * reservation with its evictions.  The miss takes each lock twice
		 * in all, here and at the insert.
		 */
		pthread_mutex_lock(&ctx->lock);
		mon_lock();
		/* the index has not changed since a lookup found nothing: skip it */
		if (LD(ctx->seq) != seen && lookup_locked(ctx, s, end, acc, out, &taken) == LK_HIT) {
			mon_unlock();
			pthread_mutex_unlock(&ctx->lock);
			stats_hit(ctx, 1, taken);
			return 0;
		}
		/*
		 * Watched, checked atomically with taking c0: a VMA replaced
		 * after monitor_watch() had its record cut (and its UNMAP logged
		 * before c0); pinning the new, unwatched VMA must not be cached.
		 */
		if (!unsafe && !monitor_covers(s, end)) {
			mon_unlock();
			pthread_mutex_unlock(&ctx->lock);
			if (watched) {	/* watched, and replaced since */
				STAT_INC(ctx, miss_retries);
				attempt++;
				watched = false;
				continue;
			}
			r = monitor_watch(s, end);
			if (r == -EXDEV) {
				STAT_INC(ctx, direct_shared);
				return direct_reg(ctx, s, end, acc, out);
			}
			if (r == -EAGAIN) {	/* the mapping kept changing under the watch */
				STAT_INC(ctx, direct_racing);
				return direct_reg(ctx, s, end, acc, out);
			}
			if (r == -EBUSY || r == -EINVAL) {
				STAT_INC(ctx, direct_unwatchable);
				return direct_reg(ctx, s, end, acc, out);
			}
			if (r == -ENOSPC) {
				STAT_INC(ctx, direct_budget);
				return direct_reg(ctx, s, end, acc, out);
			}
			if (r < 0)
				return odpx_fail(r, "%#lx-%#lx is not mapped or not accessible",
						 (unsigned long)s, (unsigned long)end);
			watched = true;
			continue;
		}
		/* merge with what it overlaps, unless that outgrows the cap */
		for (uint32_t x = index_first_overlap(ctx, acc, s, end); x != NIL;
		     x = index_next(ctx, LD(ctx->root[acc]), e_start(&ctx->ent[x]))) {
			if (e_start(&ctx->ent[x]) >= end)
				break;
			uintptr_t xs = e_start(&ctx->ent[x]), xe = e_end(&ctx->ent[x]);
			uintptr_t ns = xs < us ? xs : us, ne = xe > ue ? xe : ue;
			if (ne - ns <= ctx->lim.max_entry_bytes && !exact_only(acc) &&
			    (unsafe || monitor_covers(ns, ne))) {
				us = ns;
				ue = ne;
			}
		}
		if (!unsafe && monitor_recently_invalidated(us, ue))
			STAT_INC(ctx, repins);
		c0 = mon.inval_count;
		t0 = mon.nrm ? monitor_ns() : 0;	/* the pin's age, for the REMOVE quarantine */
		atomic_fetch_add_explicit(&ctx->clock, 1, RLX);
		/* room for the request; the merged range if it fits with no more eviction */
		if (us != s || ue != end) {
			rv.wide_bytes = ue - us;
			rv.wide_home = bucket_of(ctx, us, acc);
		}
		int64_t idx = reserve_locked(ctx, end - s, bucket_of(ctx, s, acc), us, &rv, true);
		if (!rv.wide) {
			us = s;
			ue = end;
		}
		mon_unlock();
		pthread_mutex_unlock(&ctx->lock);
		if (idx >= 0 && (us != s || ue != end))
			STAT_INC(ctx, merges);
		/* victims first: a victim's slot may be the one we pin into */
		if ((r = pin_reserved(ctx, idx, &rv, us, ue - us, acc)) < 0) {
			if (idx == -ENOMEM && waits++ < ROOM_WAITS && room_coming(ctx, &rv))
				continue;
			return r;
		}

		struct entry *e = &ctx->ent[idx];
		mon_lock();
		/* invalidated meanwhile, or unwatched (an idle record reclaimed for the budget) */
		if (!unsafe && (monitor_inval_since(c0, us, ue) || !monitor_covers(us, ue))) {
			mon_unlock();
			pthread_mutex_unlock(&ctx->lock);
			ctx->be->unpin(ctx, (uint32_t)idx);
			STAT_INC(ctx, unpins);
			unreserve(ctx, (uint32_t)idx);
			STAT_INC(ctx, miss_retries);
			attempt++;	/* bounded: then it is served direct */
			watched = false;	/* one attempt for one invalidation, cut watch or not */
			continue;
		}
		if (!unsafe && monitor_remove_recent(us, ue, t0)) {
			/* a DONTNEED of this range may not have zapped yet: don't cache */
			mon_unlock();
			pthread_mutex_unlock(&ctx->lock);
			STAT_INC(ctx, direct_racing);
			STAT_INC(ctx, direct_regs);
			e->kind = KIND_DIRECT | (ctx->be->id == ODPX_BACKEND_URING ? KIND_URING : 0);
			e->access = (uint8_t)acc;
			ST(e->span, SPAN_MAKE(us, (ue - us) >> PAGE_SHIFT));
			atomic_store_explicit(&e->word, W_MAKE(W_GEN(LD(e->word)), acc, ST_DEAD, 1), REL);
			*out = e;
			return 0;
		}
		bool kick = false;
		seq_begin(ctx);
		for (uint32_t x; (x = index_first_overlap(ctx, acc, us, ue)) != NIL;) {
			if (kill_locked(ctx, x, 1)) {
				dead_push(ctx, x);
				kick = true;
			}
			STAT_INC(ctx, superseded);
		}
		e->kind = KIND_CACHED | (ctx->be->id == ODPX_BACKEND_URING ? KIND_URING : 0);
		e->access = (uint8_t)acc;
		ST(e->span, SPAN_MAKE(us, (ue - us) >> PAGE_SHIFT));
		ST(e->last_use, LD(ctx->clock));
		atomic_store_explicit(&e->word, W_MAKE(W_GEN(LD(e->word)), acc, ST_ALIVE, 1), REL);
		index_insert(ctx, (uint32_t)idx, acc);
		/*
		 * The records count the entries of attached contexts only, as
		 * recount() does: an unmonitored context's would be counted here
		 * and not there, and its -1 could then leave a record short.
		 */
		if (!unsafe)
			monitor_watch_ref(us, ue, +1);
		seq_end(ctx);
		mon_unlock();
		lru_link(ctx, (uint32_t)idx);
		pthread_mutex_unlock(&ctx->lock);
		if (kick)
			engine_kick(ctx);
		*out = e;
		return 0;
	}
	STAT_INC(ctx, direct_racing);	/* invalidated at every attempt */
	return direct_reg(ctx, s, end, acc, out);
}

int cache_reg(struct odpx_ctx *ctx, uintptr_t addr, size_t len, uint32_t acc,
	      struct entry **out)
{
	uintptr_t s = addr & ~(PAGE_SIZE - 1);
	uintptr_t end = (addr + len + PAGE_SIZE - 1) & ~(PAGE_SIZE - 1);

	acc &= ctx->acc_mask;
	if (end - s > ctx->lim.max_entry_bytes)
		return odpx_fail(-E2BIG, "%zu bytes exceed max_entry_bytes %" PRIu64,
				 len, ctx->lim.max_entry_bytes);
	if (!ctx->cache_enabled)
		return direct_reg(ctx, s, end, acc, out);

	uint64_t taken;
	uint32_t seen = 1;
	int r = lookup_fast(ctx, addr, addr + len, acc, out, &taken, &seen);
	if (likely(r == LK_HIT)) {
		stats_hit(ctx, 0, taken);
		return 0;
	}
	if (r == LK_RETRY) {
		mon_lock();
		r = lookup_locked(ctx, addr, addr + len, acc, out, &taken);
		mon_unlock();
		if (r == LK_HIT) {
			stats_hit(ctx, 1, taken);
			return 0;
		}
	}
	return miss(ctx, s, end, acc, out, seen);
}

/*
 * The monitor's part, under mon.lock inside its seq write section: mark the
 * entries overlapping [s, e) DEAD and take them out of the index.  No
 * allocation, no unpin: an owned dead entry goes on the dead stack.
 */
unsigned cache_invalidate_locked(struct odpx_ctx *ctx, uintptr_t s, uintptr_t e, int why)
{
	unsigned n = 0;

	for (uint32_t acc = 0; acc < ACC_CLASSES; acc++) {
		uint32_t x;
		while (LD(ctx->root[acc]) != NIL && (x = index_first_overlap(ctx, acc, s, e)) != NIL) {
			STAT_ADD(ctx, inval_bytes, SPAN_BYTES(LD(ctx->ent[x].span)));
			if (kill_locked(ctx, x, 2 + why))
				dead_push(ctx, x);
			n++;
		}
	}
	if (n)
		STAT_ADD(ctx, inval_entries, n);
	return n;
}

/* Live entries overlapping [s, e), not only those starting there (monitor). */
void cache_count_live(struct odpx_ctx *ctx, uintptr_t s, uintptr_t e, uint64_t *n)
{
	for (uint32_t acc = 0; acc < ACC_CLASSES; acc++) {
		uint32_t root = LD(ctx->root[acc]);
		for (uint32_t x = index_first_overlap(ctx, acc, s, e); x != NIL && e_start(&ctx->ent[x]) < e;
		     x = index_next(ctx, root, e_start(&ctx->ent[x])))
			(*n)++;
	}
}

int cache_init(struct odpx_ctx *ctx)
{
	size_t bytes = (size_t)ctx->max_entries * sizeof(struct entry);

	ctx->ent = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (ctx->ent == MAP_FAILED) {
		ctx->ent = NULL;
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < ctx->max_entries; i++) {
		struct entry *e = &ctx->ent[i];
		ST(e->bucket, NIL);
		ST(e->hnext, NIL);
		ST(e->left, NIL);
		ST(e->right, NIL);
		e->lru_prev = i ? i - 1 : NIL;	/* the free list, in index order */
		e->lru_next = i + 1 < ctx->max_entries ? i + 1 : NIL;
		ST(e->dnext, NIL);
	}
	for (int a = 0; a < ACC_CLASSES; a++)
		ST(ctx->root[a], NIL);
	ctx->free_head = 0;
	for (int b = 0; b < LRU_BUCKETS; b++)
		ctx->lru_first[b] = ctx->lru_last_of[b] = NIL;
	atomic_store(&ctx->dead_head, NIL);
	return 0;
}

/* Close: every entry is unpinned, held or not.  The monitor is detached. */
void cache_fini(struct odpx_ctx *ctx)
{
	if (!ctx->ent)
		return;
	for (uint32_t i = 0; i < ctx->max_entries; i++) {
		uint64_t w = LD(ctx->ent[i].word);
		if (W_STATE(w) != ST_FREE) {
			ctx->be->unpin(ctx, i);
			STAT_INC(ctx, unpins);
		}
	}
	munmap(ctx->ent, (size_t)ctx->max_entries * sizeof(struct entry));
	ctx->ent = NULL;
}
