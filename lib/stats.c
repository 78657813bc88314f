// SPDX-License-Identifier: MIT
/*
 * stats.c - counters.  Each of the first STAT_SHARDS threads owns a shard,
 * bumped with a relaxed load and store; later threads share the last one
 * with atomic adds.  Readers sum the shards, the unused bytes included.
 */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#include "internal.h"

_Atomic uint32_t odpx_next_shard;
__thread uint32_t odpx_my_shard __attribute__((tls_model("initial-exec")));

void stats_unused(struct odpx_ctx *ctx, uint64_t released, uint64_t taken)
{
	bool own;
	struct stat_shard *sh;

	if (released == taken)
		return;
	sh = shard(ctx, &own);
	shard_add(&sh->released, own, released);
	shard_add(&sh->taken, own, taken);
}

void stats_prefetch(struct odpx_ctx *ctx)
{
	bool own;
	struct stat_shard *sh = shard(ctx, &own);

	shard_add(&sh->prefetch_queued, own, 1);
}

void odpx_stats_passthrough(struct odpx_ctx *ctx)
{
	STAT_INC(ctx, preload_passthrough);
}

ODPX_EXPORT int odpx_stats_read(struct odpx_ctx *ctx, struct odpx_stats *out, size_t size)
{
	struct odpx_stats st = { 0 };
	int r;

	/* a fork's copy fails: another thread of the parent may have held ctx->lock */
	if ((r = ctx_check(ctx)) < 0)
		return r;
	if (!out || size == 0)
		return odpx_fail(-EINVAL, "odpx_stats_read: NULL argument or zero size");
	/* taking the invalidation lock shows every invalidation of a returned munmap */
	struct monitor_usage u;

	monitor_usage(&u);	/* takes and drops it */
	st.watch_vmas = u.watched;
	st.watch_regs = u.registers;
	stats_region_sum(ctx->shards, ctx->cs, &st);
	st.unsafe_no_monitor = !!(ctx->flags & ODPX_OPEN_UNSAFE_NO_MONITOR);

	pthread_mutex_lock(&ctx->lock);
	st.entries = ctx->nentries;
	st.pinned_bytes = ctx->pinned_bytes;
	pthread_mutex_unlock(&ctx->lock);
	st.unused_bytes = stats_region_unused(ctx->shards, st.pinned_bytes);
	if (ctx->pin_part) {	/* hybrid: what its pinned part holds (counters: its own segment) */
		struct odpx_ctx *pc = ctx->pin_part;

		pthread_mutex_lock(&pc->lock);
		st.entries += pc->nentries;
		st.pinned_bytes = pc->pinned_bytes;
		pthread_mutex_unlock(&pc->lock);
		st.unused_bytes = stats_region_unused(pc->shards, st.pinned_bytes);
		/* mirrored into this context's counters, which odpstat reads */
		st.hybrid_released = atomic_load_explicit(&pc->cs->memcg_released, RLX);
		atomic_store_explicit(&ctx->cs->hybrid_released, st.hybrid_released, RLX);
	}
	stats_seg_read_extra(ctx, &st);	/* thrash fields; publishes these gauges */

	if (size > sizeof(st))
		size = sizeof(st);
	memcpy(out, &st, size);
	return (int)size;
}
