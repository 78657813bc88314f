/* SPDX-License-Identifier: MIT */
/*
 * cache.h - what the two halves of the pin cache share: cache.c (lookups,
 * the entries' life cycle, misses, invalidation) and reserve.c (free list,
 * LRU, eviction, pinning into a reserved entry).
 */
#ifndef ODPX_CACHE_H
#define ODPX_CACHE_H

#include "index.h"

/* seqcount of the index: writers hold mon.lock (readers: cache.c) */
static inline void seq_begin(struct odpx_ctx *ctx)
{
	atomic_store_explicit(&ctx->seq, LD(ctx->seq) + 1, RLX);
	atomic_thread_fence(REL);
}

static inline void seq_end(struct odpx_ctx *ctx)
{
	atomic_store_explicit(&ctx->seq, LD(ctx->seq) + 1, REL);
}

/* cache.c */
bool kill_locked(struct odpx_ctx *ctx, uint32_t idx, int reason);	/* mon.lock, seq */
void entry_free_locked(struct odpx_ctx *ctx, uint32_t idx);		/* ctx->lock */

/* reserve.c */
void lru_link(struct odpx_ctx *ctx, uint32_t idx);			/* ctx->lock */
int64_t reserve_locked(struct odpx_ctx *ctx, uint64_t bytes, uint32_t home,
		       uintptr_t start, uint32_t *victims, bool *reused, bool mon_held);
void unreserve(struct odpx_ctx *ctx, uint32_t idx);
int pin_reserved(struct odpx_ctx *ctx, int64_t idx, uint32_t victims, bool reused,
		 uintptr_t s, size_t len, uint32_t acc);

#endif
