// SPDX-License-Identifier: MIT
/*
 * reserve.c - room for a new entry of the pin cache: the free list, the LRU
 * of unused entries kept as victims, eviction within the limits, and the pin
 * into a reserved entry (cache.c calls in on a miss and a direct
 * registration; the engine's tick trims).  Everything here runs under
 * ctx->lock, and under mon.lock too where it kills an indexed entry; victims
 * are unpinned after both are dropped.
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
#include <string.h>

#include "cache.h"
#include "../uffd/monitor.h"

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

void lru_link_head(struct odpx_ctx *ctx, uint32_t idx)
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

static void unpin_one(struct odpx_ctx *ctx, uint32_t idx)
{
	ctx->be->unpin(ctx, idx);
	STAT_INC(ctx, unpins);
}

static void unpin_victims(struct odpx_ctx *ctx, uint32_t v)
{
	for (; v != NIL; v = LD(ctx->ent[v].dnext))
		unpin_one(ctx, v);
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
 * after unlocking.  The first victim's slot is taken when the slab has no
 * free slot, or when the backend's pin replaces what a slot holds (one
 * system call instead of an unpin and a pin): it is FREE on return but
 * still pinned (*reused), and *victims no longer holds it.  Returns the
 * entry or -ENOMEM (everything in use); the reason is set by pin_reserved(),
 * outside the locks.
 */
int64_t reserve_locked(struct odpx_ctx *ctx, uint64_t bytes, uint32_t home,
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
	if (ctx->free_head != NIL && (*victims == NIL || !ctx->be->pin_replaces)) {
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

void unreserve(struct odpx_ctx *ctx, uint32_t idx)
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

/*
 * Pin into a reserved entry, with one retry after evicting on ENOMEM.
 * @held: the entry's slot still holds an evicted registration, which a
 * successful pin replaces (the backend's pin_replaces) and a failed one
 * leaves in place.
 */
static int pin_entry(struct odpx_ctx *ctx, uint32_t idx, uintptr_t s, size_t len,
		     uint32_t acc, bool held)
{
	struct entry *e = &ctx->ent[idx];
	int r;

	if (atomic_load_explicit(&ctx->attached, RLX) && mon.mode == UFFD_MODE_MISSING)
		monitor_prefault(s, s + len);
	r = ctx->be->pin(ctx, idx, s, len, acc, &e->lkey, &e->rkey);
	if (held && r == 0)
		STAT_INC(ctx, unpins);	/* the replaced registration */
	if (held && r < 0) {
		unpin_one(ctx, idx);	/* both at once may be over RLIMIT_MEMLOCK */
		if (r == -ENOMEM)
			r = ctx->be->pin(ctx, idx, s, len, acc, &e->lkey, &e->rkey);
	}
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
 * one too, unless the pin replaces it), pin [s, s+len) into @idx and give
 * the other victims back to the free list.  Returns 0 with ctx->lock held,
 * or -errno with nothing held and @idx freed.
 */
int pin_reserved(struct odpx_ctx *ctx, int64_t idx, uint32_t victims, bool reused,
			uintptr_t s, size_t len, uint32_t acc)
{
	int r;

	unpin_victims(ctx, victims);
	if (reused && !ctx->be->pin_replaces) {
		unpin_one(ctx, (uint32_t)idx);
		reused = false;
	}
	if (idx < 0)
		r = len > ctx->lim.max_pinned_bytes
			? odpx_fail(-ENOMEM, "%zu bytes exceed max_pinned_bytes", len)
			: odpx_fail(-ENOMEM, "limits reached (%" PRIu64 " entries, %" PRIu64
				    " pinned bytes) and every entry is in use",
				    ctx->lim.max_entries, ctx->lim.max_pinned_bytes);
	else
		r = pin_entry(ctx, (uint32_t)idx, s, len, acc, reused);
	pthread_mutex_lock(&ctx->lock);
	victims_free_locked(ctx, victims);
	if (r < 0) {
		if (idx >= 0)
			entry_free_locked(ctx, (uint32_t)idx);
		pthread_mutex_unlock(&ctx->lock);
	}
	return r;
}

/* Keep the unused (released) bytes under max_unused_bytes.  Engine tick. */
void cache_trim(struct odpx_ctx *ctx)
{
	uint64_t unused, over;
	uint32_t victims = NIL;

	pthread_mutex_lock(&ctx->lock);
	if (ctx->pinned_bytes <= ctx->lim.max_unused_bytes) {
		pthread_mutex_unlock(&ctx->lock);
		return;
	}
	unused = stats_unused_bytes(ctx, ctx->pinned_bytes);
	if (unused > ctx->lim.max_unused_bytes) {
		over = unused - ctx->lim.max_unused_bytes;
		make_room(ctx, UINT64_MAX, ctx->pinned_bytes - over, 0, &victims, false);
	}
	pthread_mutex_unlock(&ctx->lock);
	free_victims(ctx, victims);
}
