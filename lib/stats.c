// SPDX-License-Identifier: MIT
/*
 * stats.c - counters.
 *
 * The hit path bumps a per-thread line: each of the first STAT_SHARDS
 * threads that touch odpx owns one shard and updates it with a relaxed load
 * and store (no RMW, no shared line); later threads share the last shard with
 * atomic adds.  Readers sum the shards; a sum may lag a concurrent update.
 */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#include "internal.h"
#include "../uffd/monitor.h"

static _Atomic uint32_t next_shard;
static __thread uint32_t my_shard __attribute__((tls_model("initial-exec")));	/* index+1 */

static inline struct stat_shard *shard(struct odpx_ctx *ctx, bool *owned)
{
	uint32_t s = my_shard;

	if (unlikely(!s)) {
		s = atomic_fetch_add_explicit(&next_shard, 1, memory_order_relaxed) + 1;
		my_shard = s;
	}
	*owned = s <= STAT_SHARDS;
	return &ctx->shards[*owned ? s - 1 : STAT_SHARDS];
}

#define BUMP(ctx, field) do {							\
	bool own;								\
	struct stat_shard *sh = shard(ctx, &own);				\
	if (own)								\
		__atomic_store_n(&sh->field, __atomic_load_n(&sh->field,	\
				 __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);	\
	else									\
		__atomic_fetch_add(&sh->field, 1, __ATOMIC_RELAXED);		\
} while (0)

void stats_hit(struct odpx_ctx *ctx, int slow)
{
	if (slow)
		BUMP(ctx, hits_slow);
	else
		BUMP(ctx, hits);
}

void stats_dereg(struct odpx_ctx *ctx) { BUMP(ctx, deregs); }
void stats_prefetch(struct odpx_ctx *ctx) { BUMP(ctx, prefetch_queued); }

#define C(f) atomic_load_explicit(&ctx->cs->f, memory_order_relaxed)

/*
 * The counters of a context live in one region: the per-thread shards, then
 * the cold counters.  Kept apart from struct odpx_ctx so that it can be a
 * shared-memory segment another process (odpstat) reads live.
 */
int stats_region_open(struct odpx_ctx *ctx)
{
	size_t shards = sizeof(struct stat_shard) * (STAT_SHARDS + 1);
	size_t bytes = shards + ((sizeof(struct cold_stats) + 63) & ~(size_t)63);
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return -errno;
	ctx->stats_region = p;
	ctx->stats_region_bytes = bytes;
	ctx->shards = p;
	ctx->cs = (struct cold_stats *)((char *)p + shards);
	return 0;
}

void stats_region_close(struct odpx_ctx *ctx)
{
	if (ctx->stats_region)
		munmap(ctx->stats_region, ctx->stats_region_bytes);
	ctx->stats_region = NULL;
}

/* Counter sampling on the engine's tick (the thrash detector's input). */
void stats_tick(struct odpx_ctx *ctx)
{
	(void)ctx;
}

/* Gauges for readers of the region; nothing to publish to yet. */
void stats_gauges_publish(struct odpx_ctx *ctx)
{
	(void)ctx;
}

ODPX_EXPORT int odpx_stats_read(struct odpx_ctx *ctx, struct odpx_stats *out, size_t size)
{
	struct odpx_stats st = { 0 };

	if (!ctx || !out || size == 0)
		return odpx_fail(-EINVAL, "odpx_stats_read: NULL argument or zero size");
	/* a child's copy: another thread of the parent may have held ctx->lock */
	if (ctx->fork_gen != atomic_load_explicit(&odpx_fork_gen, memory_order_relaxed))
		return odpx_fail(-ESTALE, "context inherited across fork(): open a new one");
	for (int i = 0; i <= STAT_SHARDS; i++) {
		st.hits += __atomic_load_n(&ctx->shards[i].hits, __ATOMIC_RELAXED);
		st.hits_slow += __atomic_load_n(&ctx->shards[i].hits_slow, __ATOMIC_RELAXED);
		st.deregs += __atomic_load_n(&ctx->shards[i].deregs, __ATOMIC_RELAXED);
		st.prefetch_queued += __atomic_load_n(&ctx->shards[i].prefetch_queued, __ATOMIC_RELAXED);
	}
	st.hits += st.hits_slow;
	st.misses = C(misses);
	st.pins = C(pins);
	st.unpins = C(unpins);
	st.pin_failures = C(pin_failures);
	st.evictions = C(evictions);
	st.enomem_retries = C(enomem_retries);
	st.merges = C(merges);
	st.superseded = C(superseded);
	st.miss_retries = C(miss_retries);
	st.repins = C(repins);
	st.inval_unmap = C(inval_unmap);
	st.inval_remove = C(inval_remove);
	st.inval_remap = C(inval_remap);
	st.inval_entries = C(inval_entries);
	st.inval_bytes = C(inval_bytes);
	st.dead_unpinned = C(dead_unpinned);
	st.direct_regs = C(direct_regs);
	st.direct_shared = C(direct_shared);
	st.direct_unwatchable = C(direct_unwatchable);
	st.direct_budget = C(direct_budget);
	st.direct_no_monitor = C(direct_no_monitor);
	st.direct_racing = C(direct_racing);
	st.prefetch_merged = C(prefetch_merged);
	st.prefetch_dropped = C(prefetch_dropped);
	st.prefetch_issued = C(prefetch_issued);
	st.prefetch_failed = C(prefetch_failed);
	st.engine_wakeups = C(engine_wakeups);
	st.engine_ticks = C(engine_ticks);
	st.unsafe_no_monitor = !!(ctx->flags & ODPX_OPEN_UNSAFE_NO_MONITOR);

	pthread_mutex_lock(&ctx->lock);
	st.entries = ctx->nentries;
	st.pinned_bytes = ctx->pinned_bytes;
	for (uint32_t i = ctx->lru_head; i != NIL; i = ctx->ent[i].lru_next) {
		uint64_t w = atomic_load_explicit(&ctx->ent[i].word, memory_order_relaxed);
		if (W_STATE(w) == ST_ALIVE && W_REF(w) == 0)
			st.unused_bytes += SPAN_BYTES(atomic_load_explicit(&ctx->ent[i].span,
									   memory_order_relaxed));
	}
	pthread_mutex_unlock(&ctx->lock);
	pthread_mutex_lock(&mon.lock);
	st.watch_vmas = mon.nw;
	st.watch_regs = mon.regs;
	pthread_mutex_unlock(&mon.lock);

	if (size > sizeof(st))
		size = sizeof(st);
	memcpy(out, &st, size);
	return (int)size;
}
