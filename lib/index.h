/* SPDX-License-Identifier: MIT */
/*
 * index.h - the cache's index: per access class, alive entries that never
 * overlap, in an exact-start hash (the hit path) and an AVL tree by start
 * (interior hits, overlap and invalidation scans), both in the entries' own
 * memory.  Writers hold the invalidation lock inside a ctx->seq write
 * section; readers take no lock and validate with ctx->seq (cache.c).
 */
#ifndef ODPX_INDEX_H
#define ODPX_INDEX_H

#include "internal.h"

#define MAX_STEPS 96		/* bound on any optimistic walk */

static inline uintptr_t e_start(const struct entry *e) { return SPAN_START(LD(e->span)); }
static inline uintptr_t e_end(const struct entry *e)
{
	uint64_t s = LD(e->span);
	return SPAN_START(s) + SPAN_BYTES(s);
}

/*
 * Every entry's slot heads one bucket: bucket = key mod P, P the largest
 * prime not above the slab's size (ctx.c sizes a pin-mode slab to a prime
 * at or above max_entries, so P is the slab).  Modulo a prime, any
 * arithmetic progression of up to P keys lands in P distinct buckets: the
 * buffers of a pool (a base and a stride, whatever the stride) each find a
 * free home slot, and a hit reads the bucket head and its entry in one line.
 * Keys are truncated to 32 bits first (start pages modulo 1 TiB), and the
 * remainder is taken by multiplication (ctx->hmul = 2^64 / P, rounded up).
 */
static inline uint32_t bucket_of(const struct odpx_ctx *ctx, uintptr_t start, uint32_t acc)
{
	uint32_t k = (uint32_t)(((start >> PAGE_SHIFT) << 4) | acc);

	return (uint32_t)(((unsigned __int128)(ctx->hmul * k) * ctx->hmod) >> 64);
}

uint32_t index_floor(struct odpx_ctx *ctx, uint32_t root, uintptr_t a);
uint32_t index_next(struct odpx_ctx *ctx, uint32_t root, uintptr_t a);
uint32_t index_first_overlap(struct odpx_ctx *ctx, uint32_t acc, uintptr_t s, uintptr_t e);
void index_insert(struct odpx_ctx *ctx, uint32_t idx, uint32_t acc);
void index_remove(struct odpx_ctx *ctx, uint32_t idx, uint32_t acc);

static inline bool covers(uint64_t span, uintptr_t a, uintptr_t aend)
{
	uintptr_t s = SPAN_START(span);
	return s <= a && aend <= s + SPAN_BYTES(span);
}

/*
 * Remote access is granted over exactly the pages asked for (no interior
 * hit, no merge): an rkey never reaches memory the caller did not register.
 */
static inline bool exact_only(uint32_t acc) { return acc & ACC_REMOTE_BITS; }

/* @sp starts at @page: does it serve [a, aend) in class @acc? */
static inline bool serves(uint64_t sp, uintptr_t a, uintptr_t aend, uint32_t acc)
{
	if (exact_only(acc))
		return SPAN_START(sp) + SPAN_BYTES(sp) == ((aend + PAGE_SIZE - 1) & ~(PAGE_SIZE - 1));
	return covers(sp, a, aend);
}

/* Candidate entry for [a, aend) in class @acc: exact start first, then floor. */
static inline uint32_t index_find(struct odpx_ctx *ctx, uintptr_t a, uintptr_t aend, uint32_t acc)
{
	uintptr_t page = a & ~(PAGE_SIZE - 1);
	uint32_t i = LD(ctx->ent[bucket_of(ctx, page, acc)].bucket);

	for (int steps = 0; i != NIL && i < ctx->max_entries && steps < MAX_STEPS; steps++) {
		struct entry *e = &ctx->ent[i];
		if (SPAN_START(LD(e->span)) == page && W_ACC(LD(e->word)) == acc)
			return serves(LD(e->span), a, aend, acc) ? i : NIL;
		i = LD(e->hnext);
	}
	if (exact_only(acc) && (i == NIL || i >= ctx->max_entries))
		return NIL;	/* the chain's end: no such entry */
	/* an interior hit, or an exact one beyond MAX_STEPS of a long chain */
	i = index_floor(ctx, LD(ctx->root[acc]), a);
	if (i == NIL)
		return NIL;
	uint64_t sp = LD(ctx->ent[i].span);
	if (exact_only(acc) && SPAN_START(sp) != page)
		return NIL;
	return serves(sp, a, aend, acc) ? i : NIL;
}

enum { LK_HIT, LK_MISS, LK_RETRY };

#endif
