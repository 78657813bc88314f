// SPDX-License-Identifier: MIT
/*
 * reg_ex.c - odpx_reg_ex(): odpx_reg() with flags, and the lookups that
 * never block (ODPX_REG_TRY, ODPX_REG_PARTIAL).
 *
 * In pin mode a non-blocking lookup is the cache's lock-free read side
 * (cache.c:lookup_fast()) and nothing else: where odpx_reg() would take the
 * invalidation lock or pin, it returns -EAGAIN.  The ODP modes answer from
 * their chunk, range and implicit MRs (backend_verbs.c's try_reg).
 */
#include <errno.h>

#include "cache.h"

int cache_try(struct odpx_ctx *ctx, uintptr_t a, size_t len, uint32_t acc, uint32_t flags,
	      struct entry **out)
{
	uintptr_t aend = a + len;
	/* a remote class is served by exactly its pages: PARTIAL is TRY there */
	bool partial = (flags & ODPX_REG_PARTIAL) && !exact_only(acc & ctx->acc_mask);
	struct odpx_mr *h;
	struct entry *e;
	uint64_t taken;
	uint32_t seen;

	if (!ctx->cache_enabled)
		return -EAGAIN;	/* direct mode keeps nothing */
	acc &= ctx->acc_mask;
	if (ctx->hits_inline &&
	    ((h = hit_home(ctx, a, aend, acc)) || (h = hit_next(ctx, a, aend, acc)))) {
		*out = (struct entry *)h;	/* a handle (internal.h, struct backend_ops) */
		return 0;
	}
	if (lookup_fast(ctx, a, aend, acc, partial, &e, &taken, &seen) != LK_HIT)
		return -EAGAIN;	/* nothing there, or where odpx_reg() would take the lock */
	if (ctx->check_prot && cache_prot_allows(ctx, a > e_start(e) ? a : e_start(e),
						 aend < e_end(e) ? aend : e_end(e), acc) != 1) {
		cache_unget(ctx, e, taken);
		return -EAGAIN;	/* odpx_reg() drops the entry and asks the kernel */
	}
	stats_hit(ctx, 0, taken);
	*out = e;
	return 0;
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
