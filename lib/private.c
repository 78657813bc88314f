// SPDX-License-Identifier: MIT
/* private.c - the white-box doors of odpx-private.h. */
#include <pthread.h>

#include "cache.h"

_Static_assert((int)ODPX_PRIV_FREE == ST_FREE && (int)ODPX_PRIV_ALIVE == ST_ALIVE &&
	       (int)ODPX_PRIV_DEAD == ST_DEAD, "odpx-private.h's entry states are internal.h's");
_Static_assert(ODPX_PRIV_HZ_TAG == HZ_TAG && ODPX_PRIV_HZ_SLOTS == HZ_SLOTS,
	       "odpx-private.h's hazard slots are internal.h's");

void odpx_priv_state(struct odpx_ctx *ctx, struct odpx_priv_state *st)
{
	st->slab = ctx->ent;
	st->entry_bytes = sizeof(struct entry);
	st->slots = ctx->max_entries;
	st->hmod = ctx->hmod;
	st->releasing = LD(ctx->releasing);
	st->prefetch_queued = LD(ctx->pq_head) - LD(ctx->pq_tail);
}

const void *odpx_priv_entry_of(const struct odpx_mr *mr)
{
	return mr_entry(mr);
}

uint32_t odpx_priv_home(struct odpx_ctx *ctx, uintptr_t addr, uint32_t access)
{
	return bucket_of(ctx, addr & ~(PAGE_SIZE - 1), access & ctx->acc_mask);
}

int odpx_priv_entry(struct odpx_ctx *ctx, uint32_t slot, struct odpx_priv_entry *e)
{
	if (slot >= ctx->max_entries)
		return -EINVAL;
	uint64_t w = atomic_load(&ctx->ent[slot].word), span = atomic_load(&ctx->ent[slot].span);

	e->state = (uint32_t)W_STATE(w);
	e->refs = W_REF(w) + hz_scan(ctx, &ctx->ent[slot]);
	e->start = SPAN_START(span);
	e->bytes = SPAN_BYTES(span);
	return 0;
}

uint32_t odpx_priv_unref(struct odpx_ctx *ctx, uint32_t slot)
{
	return W_REF(atomic_fetch_sub(&ctx->ent[slot].word, 1));
}

void odpx_priv_put_dead(struct odpx_ctx *ctx, uint32_t slot)
{
	put_dead(ctx, &ctx->ent[slot]);
}

int odpx_priv_shard(unsigned *nshards, unsigned *lent)
{
	uint32_t s = odpx_my_shard;

	*nshards = STAT_SHARDS;
	*lent = shards_lent();
	return !s ? -2 : s > STAT_SHARDS ? -1 : (int)s - 1;
}

uint32_t odpx_priv_clock_add(struct odpx_ctx *ctx, uint32_t add, uint64_t keys)
{
	uint32_t was = atomic_fetch_add(&ctx->clock, add);

	if (keys)
		ctx->lru_min_key = keys;
	return was;
}

void odpx_priv_seq_write(struct odpx_ctx *ctx, bool odd)
{
	if (odd)
		seq_begin(ctx);
	else
		seq_end(ctx);
}

int odpx_priv_lock_owner(struct odpx_ctx *ctx)
{
	if (pthread_mutex_trylock(&ctx->lock) == 0) {
		pthread_mutex_unlock(&ctx->lock);
		return 0;
	}
#ifdef __GLIBC__
	int tid = ctx->lock.__data.__owner;	/* racy: the holder may have let go since */

	return tid > 0 ? tid : -1;
#else
	return -1;
#endif
}

static const struct backend_ops *hook_base;
static struct odpx_priv_hooks hooks;
static struct backend_ops hooked;

static int hooked_pin(struct odpx_ctx *ctx, uint32_t idx, uintptr_t start, size_t len,
		      uint32_t access, uint32_t *lkey, uint32_t *rkey)
{
	int r = hook_base->pin(ctx, idx, start, len, access, lkey, rkey);

	if (hooks.pin)
		hooks.pin(idx, start, len);
	return r;
}

static void hooked_unpin(struct odpx_ctx *ctx, uint32_t idx)
{
	hook_base->unpin(ctx, idx);
	if (hooks.unpin)
		hooks.unpin(idx);
}

const struct backend_ops *odpx_priv_hooked(const struct backend_ops *base,
					   const struct odpx_priv_hooks *h)
{
	hook_base = base;
	hooks = *h;
	hooked = *base;
	hooked.pin = hooked_pin;
	hooked.unpin = hooked_unpin;
	return &hooked;
}
