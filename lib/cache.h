/* SPDX-License-Identifier: MIT */
/* cache.h - what the two halves of the pin cache, cache.c and reserve.c, share. */
#ifndef ODPX_CACHE_H
#define ODPX_CACHE_H

#include "index.h"

/* seqcount of the index: writers hold the invalidation lock (readers: cache.c) */
static inline void seq_begin(struct odpx_ctx *ctx)
{
	atomic_store_explicit(&ctx->seq, LD(ctx->seq) + 1, RLX);
	atomic_thread_fence(REL);
}

static inline void seq_end(struct odpx_ctx *ctx)
{
	atomic_store_explicit(&ctx->seq, LD(ctx->seq) + 1, REL);
}

/* The read side (uffd/reader.c, "hit"): read before and after the reference is taken. */
static inline uint32_t seq_read(struct odpx_ctx *ctx)
{
	return atomic_load_explicit(&ctx->seq, ACQ);
}

/* After the reference is taken and an acquire fence: did @s stop holding? */
static inline bool seq_retry(struct odpx_ctx *ctx, uint32_t s)
{
	return atomic_load_explicit(&ctx->seq, RLX) != s;
}

/* cache.c */
void put_dead(struct odpx_ctx *ctx, struct entry *e);	/* last reference of a DEAD entry */
void cache_unget(struct odpx_ctx *ctx, struct entry *e, uint64_t taken);
void unpin_one(struct odpx_ctx *ctx, uint32_t idx);	/* and count it */
bool kill_locked(struct odpx_ctx *ctx, uint32_t idx);	/* invalidation lock, seq */
void entry_free_locked(struct odpx_ctx *ctx, uint32_t idx);		/* ctx->lock */
int lookup_fast(struct odpx_ctx *ctx, uintptr_t a, uintptr_t aend, uint32_t acc, bool partial,
		struct entry **out, uint64_t *taken, uint32_t *seen);
unsigned hz_scan(struct odpx_ctx *ctx, const struct entry *e);
static inline bool hz_holds(struct odpx_ctx *ctx, const struct entry *e)
{
	return atomic_load(&ctx->hz_used) && hz_scan(ctx, e) > 0;	/* none: no call */
}
void hz_dead_emptied(struct odpx_ctx *ctx);

/* A reservation (reserve.c), for pin_reserved() and room_coming(): zero but victims, dead NIL. */
struct reservation {
	/* in: the request merged with what it overlaps (0: none), its home slot */
	uint64_t wide_bytes;
	uint32_t wide_home;
	bool wide;		/* out: the merged range fit, and was reserved */
	uint32_t victims;	/* evicted, chained through dnext: unpinned before the pin */
	uint32_t nvictims;	/* and their count and bytes */
	uint64_t victim_bytes;
	uint64_t reused;	/* bytes a victim's old range still pins in the reserved slot */
	bool replace;		/* the pin replaces them in place (else: unpinned first) */
	/* -ENOMEM: ctx->releasing but our victims, which are back before we wait */
	uint32_t coming;
	/* -ENOMEM: a DEAD entry with no reference left (maybe not yet pushed), or NIL */
	uint32_t dead;
};

/* reserve.c */
void lru_link(struct odpx_ctx *ctx, uint32_t idx);			/* ctx->lock */
void free_push_locked(struct odpx_ctx *ctx, uint32_t idx);
uint32_t take_free_locked(struct odpx_ctx *ctx, uint32_t home);	/* free_head not NIL */
int64_t reserve_locked(struct odpx_ctx *ctx, uint64_t bytes, uint32_t home,
		       uintptr_t start, struct reservation *rv, bool mon_held);
int pin_reserved(struct odpx_ctx *ctx, int64_t idx, const struct reservation *rv,
		 uintptr_t s, size_t len, uint32_t acc);

/* Empty a hazard slot that held @e; a dead @e may now be the reaper's. */
static inline void hz_empty(struct odpx_ctx *ctx, hz_slot *slot, struct entry *e)
{
	atomic_store_explicit(slot, 0, REL);
	/*
	 * Read after the store, but not fenced: a kill that reads the slot
	 * before the store lands and is itself read too early here leaves the
	 * entry to the engine's next tick (cache.c:cache_reap_dead()).
	 */
	if (unlikely(W_STATE(LD(e->word)) == ST_DEAD))
		hz_dead_emptied(ctx);
}

/*
 * An empty hazard slot of the calling thread's line, its line marked used
 * (before the slot is filled: seq_cst), or NULL: the thread has none (all
 * taken, or it shares the counters' overflow shard).
 */
static inline __attribute__((always_inline)) hz_slot *hz_free_slot(struct odpx_ctx *ctx)
{
	uint32_t line = odpx_my_shard - 1;	/* the overflow: STAT_SHARDS */

	if (unlikely(line == UINT32_MAX))
		line = shard_claim() - 1;	/* the thread's first count */
	if (unlikely(line >= STAT_SHARDS))
		return NULL;
	struct hz_line *l = &ctx->hz[line];
	for (int k = 0; k < HZ_SLOTS; k++)
		if (!LD(l->e[k])) {
			if (unlikely(!(LD(ctx->hz_used) & 1ULL << line)))
				atomic_fetch_or(&ctx->hz_used, 1ULL << line);
			return &l->e[k];
		}
	return NULL;
}

/*
 * A hit held in hazard slot @slot (empty, of this thread's line):
 * @e was seen as @w, serving the request under @seq.  Filled, then @e's
 * word read again: the exchange is a full fence, the Dekker pair of
 * kill_locked()'s store of DEAD and read of the slots.  So either that
 * read sees this slot or this one sees DEAD (or a new generation) and
 * lets go.  The hit writes this thread's line and nothing shared.
 */
static inline __attribute__((always_inline)) struct odpx_mr *
hit_slot(struct odpx_ctx *ctx, struct entry *e, uint64_t w, uint64_t span, uint32_t seq,
	 hz_slot *slot)
{
	/*
	 * HZ_TOOK: no reference counted, so this hit counts the entry as taken
	 * from the unused bytes (stats.c), and its release gives it back, dead
	 * or alive (kill_locked()).  Slots do not see each other: two such hits
	 * take it twice until both release.
	 */
	uintptr_t took = W_REF(w) ? 0 : HZ_TOOK;

	atomic_exchange(slot, (uintptr_t)e | took);
	uint64_t now = atomic_load(&e->word);

	if (unlikely((now ^ w) >> W_STATE_SHIFT || seq_retry(ctx, seq))) {
		hz_empty(ctx, slot, e);	/* killed, recycled, or an invalidation began */
		return NULL;
	}
	stats_hit(ctx, 0, took ? SPAN_BYTES(span) : 0);
	return (struct odpx_mr *)((uintptr_t)slot | HZ_TAG);
}

/*
 * One candidate of the hit path, alive in class @acc, starting at @page and
 * serving up to @aend under the even @seq, validated as lookup_fast() does.
 * The handle, held in one of the thread's hazard slots where one is empty,
 * else by a reference on the entry; NULL: not this one.
 */
static inline __attribute__((always_inline)) struct odpx_mr *
hit_take(struct odpx_ctx *ctx, struct entry *e, uintptr_t page, uintptr_t aend, uint32_t acc,
	 uint32_t seq)
{
	uint64_t w = atomic_load_explicit(&e->word, ACQ);
	uint64_t span = LD(e->span);

	atomic_thread_fence(ACQ);	/* span read before the word validates it */
	if ((seq & 1) || SPAN_START(span) != page || W_REF(w) == UINT32_MAX ||
	    ((w >> W_STATE_SHIFT) & 0xff) != (acc << 4 | ST_ALIVE))
		return NULL;	/* an odd seq: an index writer or the uffd reader is at work */
	if (!serves(span, page, aend, acc))
		return NULL;
	hz_slot *slot = hz_free_slot(ctx);

	if (likely(slot))
		return hit_slot(ctx, e, w, span, seq, slot);
	if (!atomic_compare_exchange_strong_explicit(&e->word, &w, w + 1,
						     memory_order_acq_rel, RLX))
		return NULL;
	uint64_t taken = W_REF(w) ? 0 : SPAN_BYTES(span);
	atomic_thread_fence(ACQ);
	if (unlikely(seq_retry(ctx, seq))) {
		cache_unget(ctx, e, taken);	/* an invalidation may have begun */
		return NULL;
	}
	stats_hit(ctx, 0, taken);
	return (struct odpx_mr *)e;
}

/*
 * The hit path, inline in odpx_reg(): the entry in the home slot of
 * [a, aend)'s first page (index.h), one cache line.  NULL: ask hit_next(),
 * then cache_reg(), which finds every other hit.
 */
static inline struct odpx_mr *hit_home(struct odpx_ctx *ctx, uintptr_t a, uintptr_t aend,
				      uint32_t acc)
{
	uint32_t s = seq_read(ctx);
	uintptr_t page = a & ~(PAGE_SIZE - 1);

	/* read only, unless the thread's slots are full: its line stays shared */
	return hit_take(ctx, &ctx->ent[bucket_of(ctx, page, acc)], page, aend, acc, s);
}

/*
 * The second candidate: an entry away from its home slot (a victim's slot
 * reused, a collision) is most often the first of the bucket other than
 * the slot's own (index.c:hash_insert()), both links in the slot's line.
 * Called out of line (ctx.c:reg_lookup()) to keep the home hit short.
 */
static inline struct odpx_mr *hit_next(struct odpx_ctx *ctx, uintptr_t a, uintptr_t aend,
				      uint32_t acc)
{
	uint32_t s = seq_read(ctx);
	uintptr_t page = a & ~(PAGE_SIZE - 1);
	uint32_t home = bucket_of(ctx, page, acc), x = LD(ctx->ent[home].bucket);

	if (x == home)
		x = LD(ctx->ent[home].hnext);
	if (x >= ctx->max_entries)
		return NULL;	/* NIL is above every index */
	return hit_take(ctx, &ctx->ent[x], page, aend, acc, s);
}

/* Drop a reference; the entry's size if that left it unused, else 0. */
static inline uint64_t put_ref(struct odpx_ctx *ctx, struct entry *e)
{
	uint64_t bytes = SPAN_BYTES(LD(e->span));	/* before: our reference keeps it */

	/*
	 * Stamped before the reference goes: an evictor that sees no reference
	 * sees the stamp too, and never takes the entry released just now for
	 * one unused since it was linked (reserve.c:make_room()).  Written
	 * only when it changes: a locked instruction waits for the stores
	 * before it, and between misses the clock stands still.
	 */
	uint32_t now = LD(ctx->clock);
	if (LD(e->last_use) != now)
		ST(e->last_use, now);
	uint64_t w = atomic_fetch_sub_explicit(&e->word, 1, memory_order_acq_rel) - 1;

	if (W_REF(w))
		return 0;
	if (unlikely(W_STATE(w) == ST_DEAD)) {
		put_dead(ctx, e);
		return 0;
	}
	return bytes;
}

/* odpx_dereg() in pin and direct modes, inline: -EINVAL for a handle not held */
static inline int cache_dereg(struct odpx_ctx *ctx, struct entry *e)
{
	uint64_t w = atomic_load_explicit(&e->word, RLX);

	/* a handle with no reference: released twice, or never handed out */
	if (unlikely(W_STATE(w) == ST_FREE || W_REF(w) == 0))
		return odpx_fail(-EINVAL, "handle %p is not held (already released?)", (void *)e);
	stats_dereg(ctx, put_ref(ctx, e));
	return 0;
}

/*
 * odpx_dereg() of a hazard slot's handle: the slot is @slot, of @ctx's
 * lines.  The stamp goes before the slot empties, as in put_ref().
 */
static inline int hz_dereg(struct odpx_ctx *ctx, hz_slot *slot)
{
	uintptr_t v = LD(*slot);

	if (unlikely(!v))
		return odpx_fail(-EINVAL, "handle %p is not held (already released?)",
				 (void *)((uintptr_t)slot | HZ_TAG));
	struct entry *e = hz_entry(v);
	uint64_t bytes = SPAN_BYTES(LD(e->span));
	uint32_t now = LD(ctx->clock);

	if (LD(e->last_use) != now)
		ST(e->last_use, now);
	hz_empty(ctx, slot, e);
	/* what the hit took, given back even to a dead entry: kill_locked() counted on it */
	stats_dereg(ctx, v & HZ_TOOK ? bytes : 0);
	return 0;
}

/* @mr's hazard slot if it is one of @ctx's lines' (tagged, in range), else NULL */
static inline hz_slot *hz_slot_of(struct odpx_ctx *ctx, const struct odpx_mr *mr)
{
	uintptr_t off = ((uintptr_t)mr & ~HZ_TAG) - (uintptr_t)ctx->hz;

	if (!((uintptr_t)mr & HZ_TAG) || off >= STAT_SHARDS * sizeof(struct hz_line) ||
	    off % sizeof(hz_slot))
		return NULL;
	return (hz_slot *)((uintptr_t)mr & ~HZ_TAG);
}

#endif
