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

/*
 * Sums of counters saturate: a segment odpstat reads may come from another
 * user, and every number in it is taken as hostile.
 */
static uint64_t sat_add(uint64_t a, uint64_t b)
{
	uint64_t s;

	return __builtin_add_overflow(a, b, &s) ? UINT64_MAX : s;
}

/*
 * The unused bytes: exact when no reference changes meanwhile, and within
 * [0, pinned bytes] always (a sum may see one thread's take before another's
 * release, so a shard's own difference may be negative: the releases and
 * the takes are summed apart).  @pinned: the pinned bytes, read under
 * ctx->lock or, in another process, from the segment's gauge.
 */
uint64_t stats_region_unused(const struct stat_shard *shards, uint64_t pinned)
{
	uint64_t released = 0, taken = 0;

	for (int i = 0; i <= STAT_SHARDS; i++) {
		released = sat_add(released, __atomic_load_n(&shards[i].released, __ATOMIC_RELAXED));
		taken = sat_add(taken, __atomic_load_n(&shards[i].taken, __ATOMIC_RELAXED));
	}
	if (released <= taken)
		return 0;
	return released - taken > pinned ? pinned : released - taken;
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
 * (sysfs-stats/publish.c: layout, naming, stale segments).
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

void stats_region_sum(const struct stat_shard *shards, const struct cold_stats *cs,
		      struct odpx_stats *st)
{
#define CS(f) atomic_load_explicit(&cs->f, memory_order_relaxed)
	for (int i = 0; i <= STAT_SHARDS; i++) {
		st->hits = sat_add(st->hits, __atomic_load_n(&shards[i].hits, __ATOMIC_RELAXED));
		st->hits_slow = sat_add(st->hits_slow,
					__atomic_load_n(&shards[i].hits_slow, __ATOMIC_RELAXED));
		st->deregs = sat_add(st->deregs, __atomic_load_n(&shards[i].deregs, __ATOMIC_RELAXED));
		st->prefetch_queued = sat_add(st->prefetch_queued,
					      __atomic_load_n(&shards[i].prefetch_queued,
							      __ATOMIC_RELAXED));
	}
	st->hits = sat_add(st->hits, st->hits_slow);
	st->misses = CS(misses);
	st->pins = CS(pins);
	st->unpins = CS(unpins);
	st->pin_failures = CS(pin_failures);
	st->evictions = CS(evictions);
	st->enomem_retries = CS(enomem_retries);
	st->merges = CS(merges);
	st->superseded = CS(superseded);
	st->miss_retries = CS(miss_retries);
	st->repins = CS(repins);
	st->inval_unmap = CS(inval_unmap);
	st->inval_remove = CS(inval_remove);
	st->inval_remap = CS(inval_remap);
	st->inval_api = CS(inval_api);
	st->inval_entries = CS(inval_entries);
	st->inval_bytes = CS(inval_bytes);
	st->dead_unpinned = CS(dead_unpinned);
	st->direct_regs = CS(direct_regs);
	st->direct_shared = CS(direct_shared);
	st->direct_unwatchable = CS(direct_unwatchable);
	st->direct_budget = CS(direct_budget);
	st->direct_no_monitor = CS(direct_no_monitor);
	st->direct_racing = CS(direct_racing);
	st->prefetch_merged = CS(prefetch_merged);
	st->prefetch_dropped = CS(prefetch_dropped);
	st->prefetch_issued = CS(prefetch_issued);
	st->prefetch_failed = CS(prefetch_failed);
	st->engine_wakeups = CS(engine_wakeups);
	st->engine_ticks = CS(engine_ticks);
	st->engine_lingers = CS(engine_lingers);
	st->direct_no_engine = CS(direct_no_engine);
	st->try_again = CS(try_again);
	st->idle_released = CS(idle_released);
	st->prereg_repins = CS(prereg_repins);
	st->preload_passthrough = CS(preload_passthrough);
	st->evict_remiss = CS(evict_remiss);
	st->repin_fresh = CS(repin_fresh);
	st->odp_mrs = CS(odp_mrs);
	st->odp_fallbacks = CS(odp_fallbacks);
	st->prefetch_sges = CS(prefetch_sges);
	st->prefetch_errno = CS(prefetch_errno);
	st->global_rkey = CS(global_rkey);
#undef CS
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
