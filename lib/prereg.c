// SPDX-License-Identifier: MIT
/*
 * prereg.c - pre-registered regions (odpx_prereg_add(), ODPX_ATTR_PREREG):
 * registrations the context itself holds until odpx_prereg_release() or
 * odpx_close().
 *
 * Pin mode: a region is a cache entry holding one reference of its own,
 * marked KIND_PREREG and kept off the LRU, so nothing evicts or idles it
 * out; it may be longer than max_entry_bytes.  A miss that would merge
 * with it is served direct beside it (cache.c:miss()).  Invalidation kills
 * it as any entry and raises ctx->prereg_stale; the engine's tick drops the
 * region's reference, and the next request inside the region that misses
 * makes it again (prereg_revive(), counted in prereg_repins).
 *
 * ODP modes: the reference is held on the chunk, range or implicit MR the
 * registration returned; those are never invalidated.
 *
 * struct prereg_set.lock - the records.  Held across a registration (a
 * pin); lock order: it first, then ctx->lock, then the invalidation lock.
 * The KIND_PREREG mark is written under ctx->lock and the invalidation
 * lock, so a reader under either sees it stable.
 */
#include <errno.h>
#include <stdio.h>

#include "cache.h"
#include "../uffd/monitor.h"

/* @e: a region's handle, as the backend's reg() gave it (an ODP context's may be a slot's) */
static bool is_alive(const struct entry *e)
{
	e = e ? mr_entry((const struct odpx_mr *)e) : NULL;
	return e && W_STATE(atomic_load_explicit(&e->word, ACQ)) == ST_ALIVE;
}

/* Mark or unmark @e (pin mode); an unmarked alive entry joins the LRU. */
static void mark(struct odpx_ctx *ctx, struct entry *e, bool on)
{
	uint32_t idx = entry_idx(ctx, e);

	pthread_mutex_lock(&ctx->lock);
	monitor_lock();
	if (on) {
		e->kind |= KIND_PREREG;
		cache_unlink_lru(ctx, idx);
	} else {
		e->kind &= (uint8_t)~KIND_PREREG;
	}
	bool link = !on && W_STATE(atomic_load_explicit(&e->word, ACQ)) == ST_ALIVE;
	monitor_unlock();
	if (link) {
		ST(e->last_use, LD(ctx->clock));
		lru_link(ctx, idx);
	}
	pthread_mutex_unlock(&ctx->lock);
}

static void drop(struct odpx_ctx *ctx, struct entry *e)
{
	if (ctx->be->dereg)
		ctx->be->dereg(ctx, e);
	else
		cache_dereg(ctx, e);
}

/* Register record @r and hold it (set lock held). */
static int make(struct odpx_ctx *ctx, struct prereg *r)
{
	struct entry *e;
	int rc;

	if (ctx->cache_enabled)
		rc = cache_reg_as(ctx, r->start, r->end - r->start, r->access, true, &e);
	else
		rc = ctx->be->reg(ctx, r->start, r->end - r->start, r->access, &e);
	if (rc < 0)
		return rc;
	if (ctx->cache_enabled) {
		if (KIND(e) == KIND_DIRECT) {
			drop(ctx, e);
			return odpx_fail(-EOPNOTSUPP, "%#lx-%#lx cannot be cached (a shared mapping, "
					 "a range the monitor cannot watch, or one invalidated at "
					 "each try): not pre-registered", (unsigned long)r->start,
					 (unsigned long)r->end);
		}
		mark(ctx, e, true);
		if (!is_alive(e))	/* killed before the mark, which kill_locked() reads */
			ST(ctx->prereg_stale, true);
	}
	r->e = e;
	return 0;
}

/*
 * A miss inside a region whose entry died (cache.c:cache_reg_as()): make
 * the region again.  True when it did, and the caller looks again.
 */
bool prereg_revive(struct odpx_ctx *ctx, uintptr_t s, uintptr_t end, uint32_t acc)
{
	struct prereg_set *p = &ctx->prereg;
	bool done = false, stale = false;

	pthread_mutex_lock(&p->lock);
	ST(ctx->prereg_stale, false);	/* raised again below */
	for (unsigned i = 0; i < p->n; i++) {
		struct prereg *r = &p->r[i];

		if (!is_alive(r->e) && !done && (r->access & ctx->acc_mask) == acc &&
		    s >= r->start && end <= r->end) {
			if (r->e) {
				drop(ctx, r->e);
				r->e = NULL;
			}
			if (make(ctx, r) == 0) {
				STAT_INC(ctx, prereg_repins);
				done = true;
			}
		}
		stale |= !is_alive(r->e);
	}
	if (stale)
		ST(ctx->prereg_stale, true);
	pthread_mutex_unlock(&p->lock);
	return done;
}

/* Engine tick: let the dead entries of regions go, so their pages are unpinned. */
void prereg_tick(struct odpx_ctx *ctx)
{
	struct prereg_set *p = &ctx->prereg;

	if (!LD(ctx->prereg_stale))
		return;
	/* not while a revival holds the records: its pin may wait for this engine */
	if (pthread_mutex_trylock(&p->lock))
		return;
	for (unsigned i = 0; i < p->n; i++) {
		if (p->r[i].e && !is_alive(p->r[i].e)) {
			drop(ctx, p->r[i].e);
			p->r[i].e = NULL;
		}
	}
	pthread_mutex_unlock(&p->lock);
}

/* The arguments' check; [*s, *end): the region's pages */
static int check(struct odpx_ctx *ctx, void *addr, size_t len, uint32_t access, uintptr_t *s,
		 uintptr_t *end)
{
	uintptr_t a = (uintptr_t)addr;
	int r = ctx_check(ctx);

	if (r < 0)
		return r;
	if (!a)
		return odpx_fail(-EFAULT, "NULL address");
	if (!len || __builtin_add_overflow(a, len, end) || *end > UINTPTR_MAX - PAGE_SIZE)
		return odpx_fail(-EINVAL, "bad range");
	if (access & ~(uint32_t)(ODPX_ACCESS_RESERVED - 1))
		return odpx_fail(-EINVAL, "unknown access bits %#x", access);
	if (ctx->mode == ODPX_MODE_DIRECT)
		return odpx_fail(-EOPNOTSUPP, "direct mode keeps no registration");
	*s = a & ~(PAGE_SIZE - 1);
	*end = (*end + PAGE_SIZE - 1) & ~(PAGE_SIZE - 1);
	return 0;
}

static int find(struct prereg_set *p, uintptr_t s, uintptr_t end, uint32_t access)
{
	for (unsigned i = 0; i < p->n; i++)
		if (p->r[i].start == s && p->r[i].end == end && p->r[i].access == access)
			return (int)i;
	return -1;
}

ODPX_EXPORT int odpx_prereg_add(struct odpx_ctx *ctx, void *addr, size_t len, uint32_t access)
{
	struct prereg_set *p;
	uintptr_t s, end;
	int r;

	if ((r = check(ctx, addr, len, access, &s, &end)) < 0)
		return r;
	if (ctx->pin_part)	/* hybrid: pre-registered regions are pinned, in its pinned part */
		ctx = ctx->pin_part;
	p = &ctx->prereg;
	pthread_mutex_lock(&p->lock);
	if (find(p, s, end, access) >= 0) {
		r = odpx_fail(-EEXIST, "%#lx-%#lx is pre-registered already", (unsigned long)s,
			      (unsigned long)end);
	} else if (p->n == PREREG_MAX) {
		r = odpx_fail(-ENOSPC, "%d regions are pre-registered already", PREREG_MAX);
	} else {
		p->r[p->n] = (struct prereg){ .start = s, .end = end, .access = access };
		if ((r = make(ctx, &p->r[p->n])) == 0)
			p->n++;
	}
	pthread_mutex_unlock(&p->lock);
	return r;
}

ODPX_EXPORT int odpx_prereg_release(struct odpx_ctx *ctx, void *addr, size_t len,
				    uint32_t access)
{
	struct prereg_set *p;
	uintptr_t s, end;
	int r, i;

	if ((r = check(ctx, addr, len, access, &s, &end)) < 0)
		return r;
	if (ctx->pin_part)
		ctx = ctx->pin_part;
	p = &ctx->prereg;
	pthread_mutex_lock(&p->lock);
	if ((i = find(p, s, end, access)) < 0) {
		pthread_mutex_unlock(&p->lock);
		return odpx_fail(-ENOENT, "%#lx-%#lx is not a pre-registered region",
				 (unsigned long)s, (unsigned long)end);
	}
	struct entry *e = p->r[i].e;
	p->r[i] = p->r[--p->n];
	if (e) {
		bool shared = false;	/* another region holds the same entry */
		for (unsigned k = 0; k < p->n; k++)
			shared |= p->r[k].e == e;
		if (ctx->cache_enabled && !shared)
			mark(ctx, e, false);
		drop(ctx, e);
	}
	pthread_mutex_unlock(&p->lock);
	return 0;
}

int prereg_open(struct odpx_ctx *ctx, const struct odpx_attr *attr)
{
	int r;

	if (!attr || !(attr->comp_mask & ODPX_ATTR_PREREG))
		return 0;
	for (uint32_t i = 0; i < attr->nprereg; i++) {
		const struct odpx_range *g = &attr->prereg[i];
		if ((r = odpx_prereg_add(ctx, g->addr, g->len, g->access)) < 0) {
			char why[160];
			snprintf(why, sizeof(why), "%s", odpx_last_reason());
			return odpx_fail(r, "pre-registered region %u (%p, %zu bytes): %s", i,
					 g->addr, g->len, why);
		}
	}
	return 0;
}

void prereg_usage(struct odpx_ctx *ctx, uint64_t *regions, uint64_t *bytes)
{
	struct prereg_set *p = &ctx->prereg;

	*bytes = 0;
	pthread_mutex_lock(&p->lock);
	*regions = p->n;
	for (unsigned i = 0; i < p->n; i++)
		*bytes += p->r[i].end - p->r[i].start;
	pthread_mutex_unlock(&p->lock);
}
