// SPDX-License-Identifier: MIT
/*
 * reg_ex.c - odpx_reg_ex(): odpx_reg() with flags, and the lookups that
 * never block (ODPX_REG_TRY, ODPX_REG_PARTIAL).
 *
 * A non-blocking lookup is the pin cache's lock-free read side and nothing
 * else: read ctx->seq, search the index, take a reference with a CAS on the
 * entry's word, re-check the seq (the protocol is cache.c's, at its top).
 * Where odpx_reg() would fall back to the invalidation lock (the seq odd or moving at
 * each of a few tries: the monitor is applying events, or a miss is
 * inserting), it returns -EAGAIN instead; it never pins, and it never
 * touches ctx->lock, the invalidation lock or the monitor.  The ODP modes answer from
 * their chunk, range and implicit MRs (backend_verbs.c's try_reg).
 */
#include <errno.h>

#include "cache.h"

#define TRY_TRIES 4

/* Smallest start > @a under @n, bounded like index_floor() (optimistic). */
static uint32_t next_bounded(struct odpx_ctx *ctx, uint32_t n, uintptr_t a)
{
	uint32_t best = NIL;

	for (int steps = 0; n != NIL && n < ctx->max_entries && steps < MAX_STEPS; steps++) {
		if (e_start(&ctx->ent[n]) > a) {
			best = n;
			n = LD(ctx->ent[n].left);
		} else {
			n = LD(ctx->ent[n].right);
		}
	}
	return best < ctx->max_entries ? best : NIL;
}

/*
 * The entry of class @acc holding the lowest-addressed page of [a, aend)
 * that any entry holds: alive entries of a class never overlap, so it is
 * the one whose end passes @a with the least start, found with the tree's
 * floor and successor, each bounded.  Unvalidated: the caller takes it
 * with a CAS and re-checks the seq.
 */
static uint32_t first_overlap(struct odpx_ctx *ctx, uint32_t acc, uintptr_t a, uintptr_t aend)
{
	uint32_t root = LD(ctx->root[acc]);
	uint32_t x = index_floor(ctx, root, a);

	if (x == NIL || e_end(&ctx->ent[x]) <= a)
		x = next_bounded(ctx, root, a);
	return x != NIL && e_start(&ctx->ent[x]) < aend ? x : NIL;
}

/* A reference on @idx if it is alive in class @acc and serves the request. */
static struct entry *take(struct odpx_ctx *ctx, uint32_t idx, uintptr_t a, uintptr_t aend,
			  uint32_t acc, bool partial, uint64_t *taken)
{
	struct entry *e = &ctx->ent[idx];
	uint64_t w = atomic_load_explicit(&e->word, ACQ);

	if (W_STATE(w) != ST_ALIVE || W_ACC(w) != acc || W_REF(w) == UINT32_MAX)
		return NULL;
	uint64_t span = LD(e->span);
	atomic_thread_fence(ACQ);	/* span read before the CAS validates it */
	uintptr_t s = SPAN_START(span), end = s + SPAN_BYTES(span);
	if (partial ? end <= a || s >= aend : !covers(span, a, aend))
		return NULL;
	if (!atomic_compare_exchange_strong_explicit(&e->word, &w, w + 1,
						     memory_order_acq_rel, RLX))
		return NULL;
	*taken = W_REF(w) ? 0 : SPAN_BYTES(span);
	return e;
}

int cache_try(struct odpx_ctx *ctx, uintptr_t a, size_t len, uint32_t acc, uint32_t flags,
	      struct entry **out)
{
	uintptr_t aend = a + len;
	/* a remote class is served by exactly its pages: PARTIAL is TRY there */
	bool partial = (flags & ODPX_REG_PARTIAL) && !exact_only(acc & ctx->acc_mask);
	struct entry *e;
	uint64_t taken;

	if (!ctx->cache_enabled)
		return -EAGAIN;	/* direct mode keeps nothing */
	uint32_t req = acc;	/* before acc_mask: what the pages must allow */
	acc &= ctx->acc_mask;
	if (ctx->hits_inline &&
	    ((e = hit_home(ctx, a, aend, acc)) || (e = hit_next(ctx, a, aend, acc)))) {
		*out = e;
		return 0;
	}
	for (int t = 0; t < TRY_TRIES; t++) {
		uint32_t s = seq_read(ctx);
		if (s & 1)
			continue;
		uint32_t idx = partial ? first_overlap(ctx, acc, a, aend)
				       : index_find(ctx, a, aend, acc);
		if (idx == NIL) {
			atomic_thread_fence(ACQ);
			if (!seq_retry(ctx, s))
				return -EAGAIN;	/* nothing there under a stable seq */
			continue;
		}
		if (!(e = take(ctx, idx, a, aend, acc, partial, &taken)))
			continue;
		atomic_thread_fence(ACQ);
		if (seq_retry(ctx, s)) {
			cache_unget(ctx, e, taken);	/* an invalidation may have begun */
			continue;
		}
		if (ctx->check_prot && cache_prot_allows(ctx, a > e_start(e) ? a : e_start(e),
							 aend < e_end(e) ? aend : e_end(e), req) != 1) {
			cache_unget(ctx, e, taken);
			return -EAGAIN;	/* odpx_reg() drops the entry and asks the kernel */
		}
		stats_hit(ctx, 0, taken);
		*out = e;
		return 0;
	}
	return -EAGAIN;	/* where odpx_reg() would take the invalidation lock */
}

ODPX_EXPORT int odpx_reg_ex(struct odpx_ctx *ctx, void *addr, size_t len, uint32_t access,
			    uint32_t flags, struct odpx_mr **mr)
{
	uintptr_t a = (uintptr_t)addr, end;
	struct entry *e = NULL;
	int r;

	if (flags & ~(uint32_t)(ODPX_REG_RESERVED - 1))
		return odpx_fail(-EINVAL, "unknown odpx_reg_ex flags %#x", flags);
	if (!flags)
		return odpx_reg(ctx, addr, len, access, mr);
	if ((r = ctx_check(ctx)) < 0)
		return r;
	if (reg_args_bad(a, len, access, mr, &end))
		return reg_bad_args(addr, len, access, mr);
	if (ctx->be->try_reg)
		r = ctx->be->try_reg(ctx, a, len, access, flags, &e);
	else if (!ctx->be->reg || ctx->be->reg_is_cache)
		r = cache_try(ctx, a, len, access, flags, &e);
	else
		r = -EAGAIN;
	if (r == -EAGAIN) {	/* a reason without numbers: formatting them costs more than the lookup */
		STAT_INC(ctx, try_again);
		return odpx_fail(-EAGAIN, "no registration serves the range now (TRY/PARTIAL)");
	}
	if (r == 0)
		*mr = (struct odpx_mr *)e;
	return r;
}
