// SPDX-License-Identifier: MIT
/*
 * advise_verbs.c - prefetch in the ODP modes: hints cut at chunk boundaries
 * (explicit mode: each piece needs its chunk's lkey), batched into
 * ibv_advise_mr calls of at most ADV_MAX_SGE pieces of one advice.  The
 * engine and ODPX_PREFETCH_SYNC (mode.c) call odp_advise().
 */
#include <errno.h>

#include "backend_verbs.h"

#ifdef ODPX_HAVE_VERBS

static const enum ibv_advise_mr_advice advice_of[ADV_NR] = {
	[ADV_PREFETCH] = IBV_ADVISE_MR_ADVICE_PREFETCH,
	[ADV_PREFETCH_WRITE] = IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
	[ADV_PREFETCH_NO_FAULT] = IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT,
};

/* One ibv_advise_mr call for a batch of pieces of one advice.  Return: 0 or -errno. */
static int advise_batch(struct odpx_ctx *ctx, const struct adv_piece *p, uint32_t n,
			uint32_t flags)
{
	struct vbe *b = vbe_of(ctx);
	struct ibv_sge sge[ADV_MAX_SGE];
	uint32_t held[ADV_MAX_SGE], nheld = 0, k = 0;
	int r = 0, err = -EFAULT, how;

	for (uint32_t i = 0; i < n && k < ADV_MAX_SGE; i++) {
		uint32_t idx = b->implicit_idx;

		if (idx == NIL) {	/* held while advised: an unused chunk may be evicted */
			if (!b->chunks || (idx = chunk_get(ctx, p[i].addr, ODPX_ACCESS_LOCAL_WRITE,
							   false, &err, &how)) == NIL) {
				STAT_INC(ctx, prefetch_failed);	/* no MR can cover it */
				r = err;
				continue;
			}
			held[nheld++] = idx;
		}
		sge[k++] = (struct ibv_sge){ .addr = p[i].addr, .length = p[i].len,
					     .lkey = ctx->ent[idx].lkey };
	}
	if (!k)
		return r;
	err = mode_verbs_err(ibv_advise_mr(b->pd, advice_of[p[0].advice], flags, sge, k), errno);
	while (nheld)
		ent_put(ctx, held[--nheld]);
	if (err < 0) {
		STAT_INC(ctx, prefetch_failed);
		ST(ctx->cs->prefetch_errno, (uint64_t)-err);
		return err;
	}
	STAT_INC(ctx, prefetch_issued);
	STAT_ADD(ctx, prefetch_sges, k);
	return r;
}

/*
 * Hints of the engine (coalesced, de-duplicated, never flushed) or of
 * ODPX_PREFETCH_SYNC (@flush: on the caller's thread, with
 * IBV_ADVISE_MR_FLAG_FLUSH).  0 or the first -errno.
 */
int odp_advise(struct odpx_ctx *ctx, const struct pf_range *r, size_t n, bool flush)
{
	struct vbe *b = vbe_of(ctx);
	unsigned shift = b->implicit_idx != NIL ? 0 : b->chunk_shift;
	struct adv_cursor cur = { 0 };
	struct adv_piece p[ADV_MAX_SGE];
	size_t k;
	int ret = 0, e;

	while ((k = adv_next(r, n, shift, &cur, p, ADV_MAX_SGE)))
		if ((e = advise_batch(ctx, p, (uint32_t)k, flush ? IBV_ADVISE_MR_FLAG_FLUSH : 0)) < 0 &&
		    !ret)
			ret = e;
	return ret;
}

#endif /* ODPX_HAVE_VERBS */
