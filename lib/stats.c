// SPDX-License-Identifier: MIT
/*
 * stats.c - counters.
 *
 * The hit path bumps a per-thread line: each of the first STAT_SHARDS
 * threads that touch odpx owns one shard and updates it with a relaxed load
 * and store (no RMW, no shared line); later threads share the last shard with
 * atomic adds.  Readers sum the shards; a sum may lag a concurrent update.
 * The unused bytes are such a sum too (released minus taken back), so that
 * neither odpx_stats_read() nor the engine's trim walks the entries: with
 * 100,000 entries that walk held ctx->lock for 1.6 ms.
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

uint64_t stats_unused_bytes(struct odpx_ctx *ctx, uint64_t pinned)
{
	return stats_region_unused(ctx->shards, pinned);
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

/*
 * The counters of a context live in one region: the per-thread shards, then
 * the cold counters.  The region is a shared-memory segment, mode 0600,
 * /dev/shm/odpx.<pid>.<n>, which odpstat reads (a copy each time) to see them live
 * (publish.c: naming, stale segments; segment.h: the layout).
 */
int stats_region_open(struct odpx_ctx *ctx)
{
	return stats_seg_open(ctx);
}

void stats_region_close(struct odpx_ctx *ctx)
{
	if (ctx->stats_region)
		stats_seg_close(ctx);
	ctx->stats_region = NULL;
}

/* Counter sampling on the engine's tick: gauges and the thrash detector. */
void stats_tick(struct odpx_ctx *ctx)
{
	stats_seg_tick(ctx);
}

/* Gauges for readers of the segment (relaxed stores; ctx->lock held). */
void stats_gauges_publish(struct odpx_ctx *ctx)
{
	stats_seg_gauges(ctx);
}

ODPX_EXPORT int odpx_stats_read(struct odpx_ctx *ctx, struct odpx_stats *out, size_t size)
{
	struct odpx_stats st = { 0 };

	if (!ctx || !out || size == 0)
		return odpx_fail(-EINVAL, "odpx_stats_read: NULL argument or zero size");
	if (ctx->magic != CTX_MAGIC)
		return odpx_fail(-EINVAL, "context %p is closed", (void *)ctx);
	/* a child's copy: another thread of the parent may have held ctx->lock */
	if (ctx->fork_gen != atomic_load_explicit(&odpx_fork_gen, memory_order_relaxed))
		return odpx_fail(-ESTALE, "context inherited across fork(): open a new one");
	/*
	 * The invalidation lock first: a munmap returns once the monitor has read its event,
	 * but the monitor applies it (entries dead, their bytes no longer
	 * unused, the invalidation counters) before it drops the lock.  Taking
	 * it here makes every invalidation a returned munmap caused visible in
	 * the sums below.
	 */
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
	st.unused_bytes = stats_unused_bytes(ctx, st.pinned_bytes);
	stats_seg_read_extra(ctx, &st);	/* thrash fields; publishes these gauges */

	if (size > sizeof(st))
		size = sizeof(st);
	memcpy(out, &st, size);
	return (int)size;
}
