// SPDX-License-Identifier: MIT
/*
 * stats.c - counters.  A thread that counts borrows a shard, bumped with a
 * relaxed load and store; while STAT_SHARDS threads hold one, the others
 * share the last with atomic adds.  Readers sum the shards, the unused
 * bytes included.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>

#include "internal.h"

__thread uint32_t odpx_my_shard __attribute__((tls_model("initial-exec")));

/*
 * A shard is lent to a thread until it exits: the key's destructor hands it
 * back, counts and all, to the next thread that needs one (the release of
 * the map orders the last owner's stores before the next owner's loads).
 * So a process whose threads come and go keeps its hits free of shared
 * writes as long as no more than STAT_SHARDS of them count at once.
 */
_Static_assert(STAT_SHARDS <= 64, "one bit of shard_lent a shard");
#define SHARDS_ALL (STAT_SHARDS == 64 ? ~0ULL : (1ULL << STAT_SHARDS) - 1)
static _Atomic uint64_t shard_lent;
static pthread_key_t shard_key;
static pthread_once_t shard_once = PTHREAD_ONCE_INIT;
static bool shard_keyed;	/* without the key a shard is never given back */

static void shard_return(void *v)
{
	uint32_t s = (uint32_t)(uintptr_t)v;

	odpx_my_shard = STAT_SHARDS + 1;	/* a later destructor's counts: the overflow */
	atomic_fetch_and_explicit(&shard_lent, ~(1ULL << (s - 1)), memory_order_release);
}

static void shard_key_make(void)
{
	shard_keyed = pthread_key_create(&shard_key, shard_return) == 0;
}

/* Unloaded with threads alive (dlclose): they must not call shard_return() at exit. */
static __attribute__((destructor)) void shard_key_drop(void)
{
	if (shard_keyed)
		pthread_key_delete(shard_key);
}

uint32_t shard_claim(void)
{
	uint64_t lent = atomic_load_explicit(&shard_lent, memory_order_relaxed);
	uint32_t s = STAT_SHARDS + 1;

	pthread_once(&shard_once, shard_key_make);
	while (~lent & SHARDS_ALL) {
		uint32_t i = (uint32_t)__builtin_ctzll(~lent);

		if (!atomic_compare_exchange_weak_explicit(&shard_lent, &lent, lent | 1ULL << i,
							   memory_order_acquire,
							   memory_order_relaxed))
			continue;
		if (shard_keyed && pthread_setspecific(shard_key, (void *)(uintptr_t)(i + 1)))
			shard_return((void *)(uintptr_t)(i + 1));	/* no room: overflow */
		else
			s = i + 1;
		break;
	}
	odpx_my_shard = s;
	return s;
}

unsigned shards_lent(void)
{
	return (unsigned)__builtin_popcountll(atomic_load_explicit(&shard_lent, memory_order_relaxed));
}

/* In a fork child only the forking thread lives: every other shard is free. */
void shard_atfork_child(void)
{
	uint32_t s = odpx_my_shard;

	atomic_store_explicit(&shard_lent, s && s <= STAT_SHARDS ? 1ULL << (s - 1) : 0,
			      memory_order_relaxed);
}

void ctx_usage(struct odpx_ctx *ctx, uint64_t *entries, uint64_t *pinned, uint64_t *unused)
{
	struct odpx_ctx *pc = ctx->pin_part ? ctx->pin_part : ctx;

	pthread_mutex_lock(&ctx->lock);
	*entries = ctx->nentries;
	pthread_mutex_unlock(&ctx->lock);
	pthread_mutex_lock(&pc->lock);
	*entries += pc != ctx ? pc->nentries : 0;
	*pinned = pc->pinned_bytes;
	pthread_mutex_unlock(&pc->lock);
	*unused = stats_region_unused(pc->shards, *pinned);
}

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
	fabric_monitor_gauges(&st.fabric_subscriptions, &st.fabric_bytes, &st.fabric_notifies);
	stats_region_sum(ctx->shards, ctx->cs, &st);
	st.unsafe_no_monitor = !!(ctx->flags & ODPX_OPEN_UNSAFE_NO_MONITOR);

	ctx_usage(ctx, &st.entries, &st.pinned_bytes, &st.unused_bytes);
	if (ctx->pin_part) {	/* hybrid: its pinned part's releases (counters: its own segment) */
		struct odpx_ctx *pc = ctx->pin_part;

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
