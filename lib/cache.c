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
 * LRU: lazy and exact at the resolution of misses.  Entries sit in a list
 * ordered by @link_stamp; a release stores ctx->clock (bumped at each miss)
 * in @last_use without a lock.  The evictor takes the tail; an entry used
 * since it was linked is re-linked at the place of its new stamp (the list
 * stays sorted).  The first tail entry with last_use == link_stamp and no
 * reference is the least recently released one.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "index.h"
#include "../uffd/monitor.h"

#define MISS_RETRIES 3
#define FAST_TRIES 4

/* ---- seqcount (writers hold mon.lock) ---- */

static void seq_begin(struct odpx_ctx *ctx)
{
	atomic_store_explicit(&ctx->seq, LD(ctx->seq) + 1, RLX);
	atomic_thread_fence(REL);
}

static void seq_end(struct odpx_ctx *ctx)
{
	atomic_store_explicit(&ctx->seq, LD(ctx->seq) + 1, REL);
}

static int try_get(struct odpx_ctx *ctx, uint32_t idx, uintptr_t a, uintptr_t aend,
		   uint32_t acc, struct entry **out)
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
	return LK_HIT;
}

static void put_ref(struct odpx_ctx *ctx, struct entry *e);

static int lookup_fast(struct odpx_ctx *ctx, uintptr_t a, uintptr_t aend, uint32_t acc,
		       struct entry **out)
{
	for (int t = 0; t < FAST_TRIES; t++) {
		uint32_t s = atomic_load_explicit(&ctx->seq, ACQ);
		if (s & 1)
			continue;
		uint32_t idx = index_find(ctx, a, aend, acc);
		if (idx == NIL) {
			atomic_thread_fence(ACQ);
			if (atomic_load_explicit(&ctx->seq, RLX) == s)
				return LK_MISS;
			continue;
		}
		if (try_get(ctx, idx, a, aend, acc, out) != LK_HIT)
			continue;
		atomic_thread_fence(ACQ);
		if (atomic_load_explicit(&ctx->seq, RLX) == s)
			return LK_HIT;
		put_ref(ctx, *out);	/* an invalidation may have begun: redo */
	}
	return LK_RETRY;
}

/* Under mon.lock: nothing moves. */
static int lookup_locked(struct odpx_ctx *ctx, uintptr_t a, uintptr_t aend, uint32_t acc,
			 struct entry **out)
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
	return LK_HIT;
}

/* ---- entry life cycle ---- */

static void dead_push(struct odpx_ctx *ctx, uint32_t idx)
{
	uint32_t head = atomic_load_explicit(&ctx->dead_head, RLX);

	do {
		ST(ctx->ent[idx].dnext, head);
	} while (!atomic_compare_exchange_weak_explicit(&ctx->dead_head, &head, idx, REL, RLX));
}

/*
 * Mark an indexed entry DEAD and take it out of the index.  mon.lock held,
 * inside a seq write section.  Returns true when the caller became the owner
 * (no reference left): the entry must then be pushed or freed by it.
 */
static bool kill_locked(struct odpx_ctx *ctx, uint32_t idx, int reason)
{
	struct entry *e = &ctx->ent[idx];
	uint64_t w = atomic_load_explicit(&e->word, RLX);

	index_remove(ctx, idx, W_ACC(w));
	monitor_watch_ref(e_start(e), e_end(e), -1);
	e->reason = (uint8_t)reason;
	/* ALIVE -> DEAD keeping the reference count: state is 1 -> 2 */
	w = atomic_fetch_add_explicit(&e->word, 1ULL << W_STATE_SHIFT, memory_order_acq_rel);
	return W_REF(w) == 0;
}

/* Entry back to the free list (ctx->lock held). */
static void entry_free_locked(struct odpx_ctx *ctx, uint32_t idx)
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

/*
 * Take a free entry, preferably @home: the entry whose index is the hash
 * bucket of its own start, so that a hit finds the bucket head and the entry
 * in one cache line (ctx->lock).
 */
static uint32_t take_free_locked(struct odpx_ctx *ctx, uint32_t home)
{
	uint32_t idx = ctx->free_head;

	if (home < ctx->max_entries &&
	    W_STATE(LD(ctx->ent[home].word)) == ST_FREE &&
	    (ctx->free_head == home || ctx->ent[home].lru_prev != NIL))
		idx = home;
	struct entry *e = &ctx->ent[idx];
	if (e->lru_prev != NIL)
		ctx->ent[e->lru_prev].lru_next = e->lru_next;
	else
		ctx->free_head = e->lru_next;
	if (e->lru_next != NIL)
		ctx->ent[e->lru_next].lru_prev = e->lru_prev;
	e->lru_prev = e->lru_next = NIL;
	return idx;
}

static void lru_link_head(struct odpx_ctx *ctx, uint32_t idx)
{
	struct entry *e = &ctx->ent[idx];

	e->link_stamp = LD(e->last_use);
	e->lru_prev = NIL;
	e->lru_next = ctx->lru_head;
	if (ctx->lru_head != NIL)
		ctx->ent[ctx->lru_head].lru_prev = idx;
	else
		ctx->lru_tail = idx;
	ctx->lru_head = idx;
}

/*
 * Re-link an entry used since it was linked at its place by its new stamp:
 * the list stays sorted by link_stamp (head: newest), so the first tail
 * entry with last_use == link_stamp really is the least recently released.
 */
static void lru_link_sorted(struct odpx_ctx *ctx, uint32_t idx)
{
	struct entry *e = &ctx->ent[idx];
	uint32_t stamp = LD(e->last_use), prev = NIL, next = ctx->lru_head;

	while (next != NIL && (int32_t)(ctx->ent[next].link_stamp - stamp) > 0) {
		prev = next;
		next = ctx->ent[next].lru_next;
	}
	e->link_stamp = stamp;
	e->lru_prev = prev;
	e->lru_next = next;
	if (prev != NIL)
		ctx->ent[prev].lru_next = idx;
	else
		ctx->lru_head = idx;
	if (next != NIL)
		ctx->ent[next].lru_prev = idx;
	else
		ctx->lru_tail = idx;
}

void cache_unlink_lru(struct odpx_ctx *ctx, uint32_t idx)
{
	struct entry *e = &ctx->ent[idx];

	if (e->lru_prev != NIL)
		ctx->ent[e->lru_prev].lru_next = e->lru_next;
	else if (ctx->lru_head == idx)
		ctx->lru_head = e->lru_next;
	else
		return;	/* not linked */
	if (e->lru_next != NIL)
		ctx->ent[e->lru_next].lru_prev = e->lru_prev;
	else
		ctx->lru_tail = e->lru_prev;
	e->lru_prev = e->lru_next = NIL;
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

/* Unpin every dead entry with no holder.  Never on the uffd reader. */
void cache_reap_dead(struct odpx_ctx *ctx)
{
	uint32_t i = atomic_exchange_explicit(&ctx->dead_head, NIL, ACQ);

	while (i != NIL) {
		uint32_t next = LD(ctx->ent[i].dnext);
		release_owned(ctx, i);
		STAT_INC(ctx, dead_unpinned);
		i = next;
	}
}

static void put_ref(struct odpx_ctx *ctx, struct entry *e)
{
	uint64_t w = atomic_fetch_sub_explicit(&e->word, 1, memory_order_acq_rel) - 1;

	if (W_REF(w))
		return;
	if (W_STATE(w) == ST_DEAD) {
		if (KIND(e) == KIND_DIRECT) {
			release_owned(ctx, entry_idx(ctx, e));
			return;
		}
		dead_push(ctx, entry_idx(ctx, e));
		engine_kick(ctx);
	} else {
		ST(e->last_use, LD(ctx->clock));
	}
}

/*
 * Evict unused entries until one more entry of @bytes fits, under ctx->lock.
 * Victims are chained on *victims (through dnext) for the caller to unpin
 * after unlocking.  Returns false when everything left is in use.
 */
static bool make_room(struct odpx_ctx *ctx, uint64_t max_entries, uint64_t max_bytes,
		      uint64_t bytes, uint32_t *victims, bool mon_held)
{
	uint64_t scanned = 0, limit = ctx->nentries * 2 + 2;
	uint32_t idx = ctx->lru_tail;

	while (ctx->nentries + 1 > max_entries || ctx->pinned_bytes + bytes > max_bytes) {
		if (idx == NIL || scanned++ > limit)
			return false;
		struct entry *e = &ctx->ent[idx];
		uint32_t prev = e->lru_prev;
		uint64_t w = atomic_load_explicit(&e->word, ACQ);
		uint32_t used = LD(e->last_use);

		if (W_STATE(w) != ST_ALIVE) {
			idx = prev;	/* dead: the engine reaps it */
			continue;
		}
		if (W_REF(w)) {		/* in use: its release will stamp it */
			idx = prev;
			continue;
		}
		if (used != e->link_stamp) {	/* used since linked: to its place */
			cache_unlink_lru(ctx, idx);
			lru_link_sorted(ctx, idx);
			if (e->lru_prev != prev)	/* moved toward the head: met again */
				idx = prev;
			continue;		/* else it is the oldest: look again */
		}
		if (!mon_held)
			pthread_mutex_lock(&mon.lock);
		w = atomic_load_explicit(&e->word, ACQ);
		bool owned = false;
		if (W_STATE(w) == ST_ALIVE && W_REF(w) == 0) {
			seq_begin(ctx);
			owned = kill_locked(ctx, idx, 0);	/* else a hit won: it pushes */
			seq_end(ctx);
		}
		if (!mon_held)
			pthread_mutex_unlock(&mon.lock);
		if (owned) {
			cache_unlink_lru(ctx, idx);
			/* account now so the loop sees the room; freed after unpin */
			ctx->nentries--;
			ctx->pinned_bytes -= SPAN_BYTES(LD(e->span));
			ST(e->dnext, *victims);
			*victims = idx;
			STAT_INC(ctx, evictions);
			ctx->evicted[(e_start(e) >> PAGE_SHIFT) % 64] = e_start(e);
			ctx->nevicted++;
			stats_gauges_publish(ctx);
		}
		idx = prev;
	}
	return true;
}

/* Victims already unpinned back to the free list (ctx->lock). */
static void victims_free_locked(struct odpx_ctx *ctx, uint32_t v)
{
	while (v != NIL) {
		uint32_t next = LD(ctx->ent[v].dnext);
		ctx->nentries++;	/* entry_free_locked takes it off again */
		ctx->pinned_bytes += SPAN_BYTES(LD(ctx->ent[v].span));
		entry_free_locked(ctx, v);
		v = next;
	}
}

static void unpin_victims(struct odpx_ctx *ctx, uint32_t v)
{
	for (; v != NIL; v = LD(ctx->ent[v].dnext)) {
		ctx->be->unpin(ctx, v);
		STAT_INC(ctx, unpins);
	}
}

static void free_victims(struct odpx_ctx *ctx, uint32_t v)
{
	if (v == NIL)
		return;
	unpin_victims(ctx, v);
	pthread_mutex_lock(&ctx->lock);
	victims_free_locked(ctx, v);
	pthread_mutex_unlock(&ctx->lock);
}

/* A miss at the start of a range evicted lately: the working set does not fit. */
static void count_remiss(struct odpx_ctx *ctx, uintptr_t s)
{
	uintptr_t *slot = &ctx->evicted[(s >> PAGE_SHIFT) % 64];

	if (*slot == s) {
		STAT_INC(ctx, evict_remiss);
		*slot = 0;	/* once */
	}
}

/*
 * Reserve an entry and @bytes within the limits, under ctx->lock (and
 * mon.lock when @mon_held), evicting onto *victims for the caller to unpin
 * after unlocking.  When the slab has no free slot, the first victim's slot
 * is taken: it is FREE on return but still pinned (*reused), and *victims no
 * longer holds it.  Returns the entry or -ENOMEM (everything in use); the
 * reason is set by pin_reserved(), outside the locks.
 */
static int64_t reserve_locked(struct odpx_ctx *ctx, uint64_t bytes, uint32_t home,
			      uintptr_t start, uint32_t *victims, bool *reused, bool mon_held)
{
	uint32_t idx;

	if (bytes > ctx->lim.max_pinned_bytes)
		return -ENOMEM;
	if (start && ctx->nevicted)
		count_remiss(ctx, start);
	if (!make_room(ctx, ctx->lim.max_entries, ctx->lim.max_pinned_bytes, bytes, victims,
		       mon_held) ||
	    (ctx->free_head == NIL && *victims == NIL))
		return -ENOMEM;
	if (ctx->free_head != NIL) {
		idx = take_free_locked(ctx, home);
	} else {
		struct entry *e = &ctx->ent[idx = *victims];
		*victims = LD(e->dnext);
		*reused = true;
		atomic_store_explicit(&e->word, W_MAKE(W_GEN(LD(e->word)) + 1, 0, ST_FREE, 0), REL);
	}
	ctx->nentries++;
	ctx->pinned_bytes += bytes;
	stats_gauges_publish(ctx);
	ST(ctx->ent[idx].span, SPAN_MAKE(0UL, bytes >> PAGE_SHIFT));
	return idx;
}

static void unreserve(struct odpx_ctx *ctx, uint32_t idx)
{
	pthread_mutex_lock(&ctx->lock);
	entry_free_locked(ctx, idx);
	pthread_mutex_unlock(&ctx->lock);
}

/* Evict every unused entry (the backend said ENOMEM). */
static void evict_all_unused(struct odpx_ctx *ctx)
{
	uint32_t victims = NIL;

	pthread_mutex_lock(&ctx->lock);
	make_room(ctx, 0, ctx->lim.max_pinned_bytes, 0, &victims, false);
	pthread_mutex_unlock(&ctx->lock);
	free_victims(ctx, victims);
}

/* Pin into a reserved entry, with one retry after evicting on ENOMEM. */
static int pin_entry(struct odpx_ctx *ctx, uint32_t idx, uintptr_t s, size_t len,
		     uint32_t acc)
{
	struct entry *e = &ctx->ent[idx];
	int r;

	if (atomic_load_explicit(&ctx->attached, RLX) && mon.mode == UFFD_MODE_MISSING)
		monitor_prefault(s, s + len);
	r = ctx->be->pin(ctx, idx, s, len, acc, &e->lkey, &e->rkey);

	if (r == -ENOMEM) {
		STAT_INC(ctx, enomem_retries);
		evict_all_unused(ctx);
		r = ctx->be->pin(ctx, idx, s, len, acc, &e->lkey, &e->rkey);
	}
	if (r < 0) {
		STAT_INC(ctx, pin_failures);
		return odpx_fail(r, "pinning %#lx-%#lx failed: %s%s", (unsigned long)s,
				 (unsigned long)(s + len), strerror(-r),
				 r == -EFAULT ? " (read-only or PROT_NONE memory, or a shared file "
						"mapping: io_uring pins writable anonymous or shmem memory only)"
					      : "");
	}
	STAT_INC(ctx, pins);
	return r;
}

/*
 * After reserve_locked(), with no lock held: unpin the victims (the reused
 * one too), pin [s, s+len) into @idx and give the other victims back to the
 * free list.  Returns 0 with ctx->lock held, or -errno with nothing held and
 * @idx freed.
 */
static int pin_reserved(struct odpx_ctx *ctx, int64_t idx, uint32_t victims, bool reused,
			uintptr_t s, size_t len, uint32_t acc)
{
	int r;

	unpin_victims(ctx, victims);
	if (reused) {
		ctx->be->unpin(ctx, (uint32_t)idx);
		STAT_INC(ctx, unpins);
	}
	if (idx < 0)
		r = len > ctx->lim.max_pinned_bytes
			? odpx_fail(-ENOMEM, "%zu bytes exceed max_pinned_bytes", len)
			: odpx_fail(-ENOMEM, "limits reached (%" PRIu64 " entries, %" PRIu64
				    " pinned bytes) and every entry is in use",
				    ctx->lim.max_entries, ctx->lim.max_pinned_bytes);
	else
		r = pin_entry(ctx, (uint32_t)idx, s, len, acc);
	pthread_mutex_lock(&ctx->lock);
	victims_free_locked(ctx, victims);
	if (r < 0) {
		if (idx >= 0)
			entry_free_locked(ctx, (uint32_t)idx);
		pthread_mutex_unlock(&ctx->lock);
	}
	return r;
}

static int direct_reg(struct odpx_ctx *ctx, uintptr_t s, uintptr_t end, uint32_t acc,
		      struct entry **out)
{
	uint32_t victims = NIL;
	bool reused = false;
	int64_t idx;
	int r;

	if (atomic_load_explicit(&ctx->dead_head, RLX) != NIL)
		cache_reap_dead(ctx);
	pthread_mutex_lock(&ctx->lock);
	idx = reserve_locked(ctx, end - s, NIL, 0, &victims, &reused, false);
	pthread_mutex_unlock(&ctx->lock);
	if ((r = pin_reserved(ctx, idx, victims, reused, s, end - s, acc)) < 0)
		return r;
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

static int attach_monitor(struct odpx_ctx *ctx)
{
	int r;

	if (atomic_load_explicit(&ctx->attached, ACQ))
		return 0;
	if (atomic_load_explicit(&ctx->monitor_failed, RLX))
		return -ENOTSUP;
	r = monitor_attach(ctx);
	if (r < 0) {
		atomic_store(&ctx->monitor_failed, true);
		snprintf(ctx->reason, sizeof(ctx->reason),
			 "pin mode without invalidation is unsafe: %s; serving direct", mon.why);
		return r;
	}
	return engine_start(ctx);
}

static int miss(struct odpx_ctx *ctx, uintptr_t s, uintptr_t end, uint32_t acc,
		struct entry **out)
{
	bool unsafe = ctx->flags & ODPX_OPEN_UNSAFE_NO_MONITOR;
	int r;

	STAT_INC(ctx, misses);
	if (!unsafe && attach_monitor(ctx) < 0) {
		STAT_INC(ctx, direct_no_monitor);
		return direct_reg(ctx, s, end, acc, out);
	}
	if (unsafe && !engine_running(ctx) && (r = engine_start(ctx)) < 0)
		return r;
	bool watched = false;

	for (int attempt = 0; attempt < MISS_RETRIES;) {
		uintptr_t us = s, ue = end;
		uint32_t victims = NIL;
		bool reused = false;
		uint64_t c0;

		if (atomic_load_explicit(&ctx->dead_head, RLX) != NIL)
			cache_reap_dead(ctx);
		/*
		 * One section under both locks: lookup, watch check, merge and
		 * reservation with its evictions.  The miss takes each lock twice
		 * in all, here and at the insert.
		 */
		pthread_mutex_lock(&ctx->lock);
		pthread_mutex_lock(&mon.lock);
		if (lookup_locked(ctx, s, end, acc, out) == LK_HIT) {
			pthread_mutex_unlock(&mon.lock);
			pthread_mutex_unlock(&ctx->lock);
			stats_hit(ctx, 1);
			return 0;
		}
		/*
		 * Watched, checked atomically with taking c0: a VMA replaced
		 * after monitor_watch() had its record cut (and its UNMAP logged
		 * before c0); pinning the new, unwatched VMA must not be cached.
		 */
		if (!unsafe && !monitor_covers(s, end)) {
			pthread_mutex_unlock(&mon.lock);
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
			if (r == -EBUSY || r == -EINVAL || r == -EAGAIN) {
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
		atomic_fetch_add_explicit(&ctx->clock, 1, RLX);
		int64_t idx = reserve_locked(ctx, ue - us, bucket_of(ctx, us, acc), us, &victims, &reused,
					     true);
		if (idx == -ENOMEM && (us != s || ue != end)) {
			/* the merged range outgrew the limits: the request alone may fit */
			us = s;
			ue = end;
			idx = reserve_locked(ctx, ue - us, bucket_of(ctx, us, acc), 0, &victims, &reused,
					     true);
		}
		pthread_mutex_unlock(&mon.lock);
		pthread_mutex_unlock(&ctx->lock);
		if (idx >= 0 && (us != s || ue != end))
			STAT_INC(ctx, merges);
		/* victims first: a victim's slot may be the one we pin into */
		if ((r = pin_reserved(ctx, idx, victims, reused, us, ue - us, acc)) < 0)
			return r;

		struct entry *e = &ctx->ent[idx];
		pthread_mutex_lock(&mon.lock);
		if (!unsafe && monitor_inval_since(c0, us, ue)) {
			pthread_mutex_unlock(&mon.lock);
			pthread_mutex_unlock(&ctx->lock);
			ctx->be->unpin(ctx, (uint32_t)idx);
			unreserve(ctx, (uint32_t)idx);
			STAT_INC(ctx, miss_retries);
			continue;
		}
		if (!unsafe && monitor_remove_recent(us, ue)) {
			/* a DONTNEED of this range may not have zapped yet: don't cache */
			pthread_mutex_unlock(&mon.lock);
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
		monitor_watch_ref(us, ue, +1);
		seq_end(ctx);
		pthread_mutex_unlock(&mon.lock);
		lru_link_head(ctx, (uint32_t)idx);
		pthread_mutex_unlock(&ctx->lock);
		if (kick)
			engine_kick(ctx);
		*out = e;
		return 0;
	}
	STAT_INC(ctx, direct_unwatchable);
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

	int r = lookup_fast(ctx, addr, addr + len, acc, out);
	if (likely(r == LK_HIT)) {
		stats_hit(ctx, 0);
		return 0;
	}
	if (r == LK_RETRY) {
		pthread_mutex_lock(&mon.lock);
		r = lookup_locked(ctx, addr, addr + len, acc, out);
		pthread_mutex_unlock(&mon.lock);
		if (r == LK_HIT) {
			stats_hit(ctx, 1);
			return 0;
		}
	}
	return miss(ctx, s, end, acc, out);
}

int cache_dereg(struct odpx_ctx *ctx, struct entry *e)
{
	uint64_t w = atomic_load_explicit(&e->word, RLX);

	/* a handle with no reference: released twice, or never handed out */
	if (W_STATE(w) == ST_FREE || W_REF(w) == 0)
		return odpx_fail(-EINVAL, "handle %p is not held (already released?)", (void *)e);
	put_ref(ctx, e);
	stats_dereg(ctx);
	return 0;
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

/* Keep the unused (released) bytes under max_unused_bytes.  Engine tick. */
void cache_trim(struct odpx_ctx *ctx)
{
	uint64_t unused = 0, over;
	uint32_t victims = NIL;

	pthread_mutex_lock(&ctx->lock);
	if (ctx->pinned_bytes <= ctx->lim.max_unused_bytes) {
		pthread_mutex_unlock(&ctx->lock);
		return;
	}
	for (uint32_t i = ctx->lru_head; i != NIL; i = ctx->ent[i].lru_next) {
		uint64_t w = atomic_load_explicit(&ctx->ent[i].word, RLX);
		if (W_STATE(w) == ST_ALIVE && W_REF(w) == 0)
			unused += SPAN_BYTES(LD(ctx->ent[i].span));
	}
	if (unused > ctx->lim.max_unused_bytes) {
		over = unused - ctx->lim.max_unused_bytes;
		make_room(ctx, UINT64_MAX, ctx->pinned_bytes - over, 0, &victims, false);
	}
	pthread_mutex_unlock(&ctx->lock);
	free_victims(ctx, victims);
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
	ctx->lru_head = ctx->lru_tail = NIL;
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
