// SPDX-License-Identifier: MIT
/*
 * backend_verbs.c - registrations on an ibverbs protection domain.
 *
 * odpx_open_verbs() reads the device's ODP capabilities, lets mode.c decide,
 * and runs the context in one of four modes:
 *
 *   implicit  one MR ibv_reg_mr(pd, NULL, SIZE_MAX, ON_DEMAND | LOCAL_WRITE);
 *             a LOCAL_WRITE request takes a reference on it: one atomic add.
 *   explicit  ODP MRs over aligned chunks (chunk_bytes), one per chunk and
 *             local access, registered on first use and never invalidated:
 *             ODP follows the page tables.
 *   pin       the core's pin cache and userfaultfd monitor over
 *             ibv_reg_mr/ibv_dereg_mr (pin/unpin below).
 *   direct    the same ops with the cache off: one MR per request.
 *
 * In both ODP modes a request no chunk serves - remote access, or a range
 * that straddles chunks - gets an explicit ODP MR over exactly its
 * page-rounded range, cached as chunks are.  Remote access is never granted
 * beyond the request unless the context was opened ODPX_OPEN_GLOBAL_RKEY:
 * then the implicit MR (implicit mode) or a chunk MR (explicit mode) with
 * every remote access the device's ODP offers serves it.
 *
 * Handles are entries of ctx->ent, as the core's odpx_dereg() requires.  In
 * the ODP modes chunks and ranges are entries keyed by (start, pages,
 * access), kept in fields the pin cache would use: the exact-start hash
 * (index.h:bucket_of(), @bucket and @hnext) and the free list
 * (ctx->free_head through @lru_next).
 *
 * struct vbe.lock - the hash chains and the free list.  Never held across a
 *   registration.  Operations:
 *     hit         no lock: walk the chain (acquire-load of its head, paired
 *                 with the release store of the insert), CAS word -> word + 1
 *                 while ALIVE, then check the entry is still (span, access):
 *                 an unused entry may have been evicted and reused since.
 *                 If not, drop the reference; a walk that misses looks again
 *                 under the lock (ent_get).
 *     miss        register with no lock; then lock, re-check, fill a free
 *                 entry with a reference, push it on its chain, unlock.
 *     dereg       no lock: CAS word -> word - 1 while ALIVE with a reference.
 *     evict       lock: CAS an unused entry ALIVE/0 -> FREE (gen + 1), and
 *                 unlink it.  A hit's CAS and the eviction's meet on word,
 *                 one wins; a dereg never moves a count of 0.  Its MR is
 *                 deregistered after unlocking.  Implicit entries (span 0)
 *                 are never evicted.
 *
 * Lifecycle: a one-page anchor MR is held from open to close so that
 * ibv_dealloc_pd() fails with EBUSY while a context is open.  Nothing closes
 * contexts at exit(): the kernel releases their MRs with the process, and a
 * handler of ours would run before an application's own cleanup registered
 * earlier, which then closed a context twice.
 * Every libibverbs error goes through mode_verbs_err().  Prefetch
 * (ibv_advise_mr) is advise_verbs.c's; the two share backend_verbs.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "backend_verbs.h"
#include "cache.h"
#include "memcg.h"

#ifdef ODPX_HAVE_VERBS

static int verr_ptr(void) { return mode_verbs_err(-1, errno); }

/* ---- ops shared by every mode ---- */

static void verbs_unpin(struct odpx_ctx *ctx, uint32_t idx)
{
	struct vbe *b = vbe_of(ctx);
	struct ibv_mr *mr = b ? b->mr[idx] : NULL;

	if (!mr)
		return;
	b->mr[idx] = NULL;
	(void)mode_verbs_err(ibv_dereg_mr(mr), errno);	/* nothing to do on failure */
}

static void verbs_close(struct odpx_ctx *ctx)
{
	struct vbe *b = vbe_of(ctx);
	bool child = ctx->fork_gen != atomic_load(&odpx_fork_gen);

	if (!b)
		return;
	/* a child's MRs are the parent's: never deregistered from here */
	for (uint32_t i = 0; !child && b->mr && i < ctx->max_entries; i++)
		verbs_unpin(ctx, i);
	if (!child && b->anchor)
		ibv_dereg_mr(b->anchor);
	free(b->mr);
	pthread_mutex_destroy(&b->lock);
	free(b);
	ctx->be_priv = NULL;
}

static int check_access(uint32_t access)
{
	if ((access & (ODPX_ACCESS_REMOTE_WRITE | ODPX_ACCESS_REMOTE_ATOMIC)) &&
	    !(access & ODPX_ACCESS_LOCAL_WRITE))
		return odpx_fail(-EINVAL, "access %#x: verbs needs LOCAL_WRITE with remote write "
				 "or atomic access (odpx never adds it)", access);
	return 0;
}

/* ---- pin and direct modes ---- */

static int verbs_pin(struct odpx_ctx *ctx, uint32_t idx, uintptr_t start, size_t len,
		     uint32_t access, uint32_t *lkey, uint32_t *rkey)
{
	struct vbe *b = vbe_of(ctx);
	struct ibv_mr *mr = ibv_reg_mr(b->pd, (void *)start, len, (int)access);

	if (!mr)
		return verr_ptr();
	b->mr[idx] = mr;
	*lkey = mr->lkey;
	*rkey = access & ACC_REMOTE_BITS ? mr->rkey : 0;
	return 0;
}

static int pin_reg(struct odpx_ctx *ctx, uintptr_t addr, size_t len, uint32_t access,
		   struct entry **out)
{
	int r = check_access(access);

	return r < 0 ? r : cache_reg(ctx, addr, len, access, out);
}

static void verbs_query(struct odpx_ctx *ctx, struct odpx_caps *c);

static const struct backend_ops verbs_pin_ops = {
	.name = "verbs",
	.id = ODPX_BACKEND_VERBS,
	.pin = verbs_pin,
	.unpin = verbs_unpin,
	.close = verbs_close,
	.reg = pin_reg,
	.reg_is_cache = true,	/* a hit's access was checked at its miss */
	.query = verbs_query,
};

/* ---- ODP modes: entries ---- */

static void ent_fill(struct odpx_ctx *ctx, uint32_t idx, struct ibv_mr *mr, uint32_t acc,
		     uintptr_t start, uint64_t bytes, uint32_t ref)
{
	struct entry *e = &ctx->ent[idx];
	uint64_t w = LD(e->word);

	vbe_of(ctx)->mr[idx] = mr;
	e->lkey = mr->lkey;
	e->rkey = acc & ACC_REMOTE_BITS ? mr->rkey : 0;
	e->access = (uint8_t)acc;
	e->kind = KIND_CACHED;
	ST(e->last_use, LD(ctx->clock));
	ST(e->span, bytes ? SPAN_MAKE(start, bytes >> PAGE_SHIFT) : 0);
	atomic_store_explicit(&e->word, W_MAKE(W_GEN(w), acc, ST_ALIVE, ref), REL);
	STAT_ADD(ctx, odp_bytes, bytes);
}

/* The head of the hash chain of (@s, @acc). */
static _Atomic uint32_t *bucket(struct odpx_ctx *ctx, uintptr_t s, uint32_t acc)
{
	return &ctx->ent[bucket_of(ctx, s, acc)].bucket;
}

/* An MR with remote access goes with its last reference, but GLOBAL_RKEY's (ent_drop()). */
static bool drop_at_zero(const struct vbe *b, uint32_t acc)
{
	return (acc & ACC_REMOTE_BITS) && acc != b->global_access;
}

/*
 * Free entry @i if it has no reference and, unless @before is NULL, was
 * released before *@before: ALIVE/0 -> FREE (gen + 1), a CAS that meets a
 * lock-free hit's on the word, one wins; then out of its hash chain and onto
 * the free list.  The implicit entries (span 0) never go.  b->lock held;
 * returns its MR for deregistration after unlocking.
 */
static struct ibv_mr *ent_evict(struct odpx_ctx *ctx, uint32_t i, const uint32_t *before)
{
	struct vbe *b = vbe_of(ctx);
	struct entry *e = &ctx->ent[i];
	uint64_t w = atomic_load_explicit(&e->word, ACQ);
	struct ibv_mr *mr = b->mr[i];
	_Atomic uint32_t *pp;

	if (W_STATE(w) != ST_ALIVE || W_REF(w) || !LD(e->span) ||
	    (before && (int32_t)(LD(e->last_use) - *before) >= 0) || hz_holds(ctx, e) ||
	    !atomic_compare_exchange_strong(&e->word, &w, W_MAKE(W_GEN(w) + 1, 0, ST_FREE, 0)))
		return NULL;
	/*
	 * The slots after the CAS, as kill_locked() reads them after DEAD: a
	 * hit in a slot (odp_slot_hit()) that did not see FREE is seen here, and
	 * the entry is put back, in a new generation.
	 */
	if (hz_holds(ctx, e)) {
		atomic_store_explicit(&e->word, W_MAKE(W_GEN(w) + 1, W_ACC(w), ST_ALIVE, 0), REL);
		return NULL;
	}
	for (pp = bucket(ctx, e_start(e), e->access); LD(*pp) != i; pp = &ctx->ent[LD(*pp)].hnext)
		;
	ST(*pp, LD(e->hnext));
	STAT_ADD(ctx, odp_bytes, -SPAN_BYTES(LD(e->span)));
	b->mr[i] = NULL;
	free_push_locked(ctx, i);
	return mr;
}

/*
 * A free entry (b->lock held), @home if free: a hit then finds the chain's
 * head and the entry in one line.  With none free, the hand goes round and
 * evicts the first unused chunk or range it meets (FIFO), whose MR goes to
 * *victim.
 */
static uint32_t ent_alloc(struct odpx_ctx *ctx, uint32_t home, struct ibv_mr **victim)
{
	struct vbe *b = vbe_of(ctx);

	*victim = NULL;
	for (uint32_t k = 0; ctx->free_head == NIL && k < ctx->max_entries; k++) {
		uint32_t i = b->hand;

		b->hand = i + 1 == ctx->max_entries ? 0 : i + 1;
		if ((*victim = ent_evict(ctx, i, NULL)))
			STAT_INC(ctx, evictions);
	}
	return ctx->free_head == NIL ? NIL : take_free_locked(ctx, home);
}

/* The entry of (@s, @bytes, @acc) in its hash chain (b->lock held), no reference taken. */
static uint32_t rfind(struct odpx_ctx *ctx, uintptr_t s, uint64_t bytes, uint32_t acc)
{
	uint64_t span = SPAN_MAKE(s, bytes >> PAGE_SHIFT);

	for (uint32_t i = LD(*bucket(ctx, s, acc)); i != NIL; i = LD(ctx->ent[i].hnext))
		if (LD(ctx->ent[i].span) == span && ctx->ent[i].access == acc)
			return i;
	return NIL;
}

/*
 * A fresh MR @mr, registered with no lock held, as the entry of (@s, @bytes,
 * @acc), with a reference.  Two threads that race for one both register,
 * and the later one drops its MR for the entry of the first.  NIL + *err
 * when every entry is in use.  The first new entry starts the engine for
 * idle release (engine.c spaces the retries of a failed start).
 */
static uint32_t ent_insert(struct odpx_ctx *ctx, struct ibv_mr *mr, uintptr_t s, uint64_t bytes,
			   uint32_t acc, int *err)
{
	struct vbe *b = vbe_of(ctx);
	struct ibv_mr *victim = NULL;
	uint32_t idx;

	pthread_mutex_lock(&b->lock);
	if ((idx = rfind(ctx, s, bytes, acc)) != NIL) {	/* registered meanwhile */
		atomic_fetch_add_explicit(&ctx->ent[idx].word, 1, ACQ);
		victim = mr;
	} else if ((idx = ent_alloc(ctx, bucket_of(ctx, s, acc), &victim)) == NIL) {
		victim = mr;
		*err = odpx_fail(-ENOMEM, "all %u entries are in use", ctx->max_entries);
	} else {
		ent_fill(ctx, idx, mr, acc, s, bytes, 1);
		ST(ctx->ent[idx].hnext, LD(*bucket(ctx, s, acc)));
		atomic_store_explicit(bucket(ctx, s, acc), idx, REL);	/* for ent_get() */
	}
	pthread_mutex_unlock(&b->lock);
	if (victim)
		ibv_dereg_mr(victim);
	if (victim != mr && ctx->idle_ms && !engine_running(ctx))
		engine_start(ctx);
	return idx;
}

static bool ent_drop(struct odpx_ctx *ctx, uint32_t i, const uint32_t *before);

/* A reference on @idx if it is ALIVE and still (span, access): false otherwise. */
static bool take_if(struct odpx_ctx *ctx, uint32_t idx, uint64_t span, uint32_t acc)
{
	struct entry *e = &ctx->ent[idx];
	uint64_t w = LD(e->word);

	do {
		if (W_STATE(w) != ST_ALIVE)
			return false;
	} while (!atomic_compare_exchange_weak_explicit(&e->word, &w, w + 1, ACQ, RLX));
	/* held: no eviction now, but it may have been reused since the chain was read */
	if (LD(e->span) == span && e->access == acc)
		return true;
	w = atomic_fetch_sub_explicit(&e->word, 1, REL);
	if (W_REF(w) == 1 && drop_at_zero(vbe_of(ctx), W_ACC(w)))
		ent_drop(ctx, idx, NULL);	/* ours was the last: released meanwhile */
	return false;
}

/*
 * A reference on the entry of (@s, @bytes, @acc): a chunk or a range.  First
 * a walk of its hash chain with no lock, bounded, whose find take_if()
 * checks (a walk that a concurrent eviction sends astray misses); then
 * under b->lock; then, unless @try, a registration.  The entry, or NIL and
 * *err; *how is 0 for a hit without the lock, 1 with it, 2 for a
 * registration (a miss).
 */
static uint32_t ent_get(struct odpx_ctx *ctx, uintptr_t s, uint64_t bytes, uint32_t acc, bool try,
			int *err, int *how)
{
	struct vbe *b = vbe_of(ctx);
	uint64_t span = SPAN_MAKE(s, bytes >> PAGE_SHIFT);
	uint32_t i = atomic_load_explicit(bucket(ctx, s, acc), ACQ);
	struct ibv_mr *mr;

	*how = 0;
	for (int steps = 0; i < ctx->max_entries && steps < MAX_STEPS; steps++) {
		if (LD(ctx->ent[i].span) == span && W_ACC(LD(ctx->ent[i].word)) == acc &&
		    take_if(ctx, i, span, acc))
			return i;
		i = LD(ctx->ent[i].hnext);
	}
	*how = 1;
	*err = -EAGAIN;
	if (try && pthread_mutex_trylock(&b->lock))
		return NIL;
	if (!try)
		pthread_mutex_lock(&b->lock);
	if ((i = rfind(ctx, s, bytes, acc)) != NIL)
		atomic_fetch_add_explicit(&ctx->ent[i].word, 1, ACQ);
	pthread_mutex_unlock(&b->lock);
	if (i != NIL || try)
		return i;
	*how = 2;
	mr = ibv_reg_mr(b->pd, (void *)s, bytes, (int)acc | IBV_ACCESS_ON_DEMAND);
	if (!mr) {
		int r = verr_ptr();

		STAT_INC(ctx, pin_failures);
		*err = odpx_fail(r, "ODP registration of %#lx-%#lx (access %#x): %s",
				 (unsigned long)s, (unsigned long)(s + bytes), acc, strerror(-r));
		return NIL;
	}
	STAT_INC(ctx, odp_mrs);
	STAT_INC(ctx, misses);
	return ent_insert(ctx, mr, s, bytes, acc, err);
}

uint32_t chunk_get(struct odpx_ctx *ctx, uintptr_t a, uint32_t acc, bool try, int *err, int *how)
{
	uint64_t bytes = 1ULL << vbe_of(ctx)->chunk_shift;

	return ent_get(ctx, a & ~(bytes - 1), bytes, acc, try, err, how);
}

void ent_put(struct odpx_ctx *ctx, uint32_t idx)
{
	ST(ctx->ent[idx].last_use, LD(ctx->clock));	/* as odp_dereg() */
	atomic_fetch_sub_explicit(&ctx->ent[idx].word, 1, REL);
}

/*
 * The lock-free hit of a chunk or range held in a hazard slot of the calling
 * thread (cache.h), for an MR that stays after its last release: the entry
 * of (@s, @bytes, @acc) in its hash chain, exchanged into @slot, then its
 * word read again, the pair of ent_evict()'s CAS to FREE and read of the
 * slots.  The handle, or NULL (not there, or changed): the counted path.
 */
static struct entry *odp_slot_hit(struct odpx_ctx *ctx, uintptr_t s, uint64_t bytes,
				  uint32_t acc, hz_slot *slot)
{
	uint64_t span = SPAN_MAKE(s, bytes >> PAGE_SHIFT);
	uint32_t i = atomic_load_explicit(bucket(ctx, s, acc), ACQ);

	for (int steps = 0; i < ctx->max_entries && steps < MAX_STEPS; steps++) {
		struct entry *e = &ctx->ent[i];
		uint64_t w = atomic_load_explicit(&e->word, ACQ);

		if (LD(e->span) == span && W_ACC(w) == acc && W_STATE(w) == ST_ALIVE) {
			atomic_exchange(slot, (uintptr_t)e);
			uint64_t now = atomic_load(&e->word);
			if (!((now ^ w) >> W_STATE_SHIFT) && LD(e->span) == span)
				return (struct entry *)((uintptr_t)slot | HZ_TAG);
			atomic_store_explicit(slot, 0, REL);
			return NULL;
		}
		i = LD(e->hnext);
	}
	return NULL;
}

/*
 * odp_reg() and, with @flags, odpx_reg_ex()'s TRY and PARTIAL: the same
 * lookups with no registration and no wait.  An implicit MR serves what its
 * access allows; else a request inside one chunk takes that chunk of its
 * access (remote access: only GLOBAL_RKEY's), else (or when the chunk cannot
 * be registered) the range of exactly its pages.  PARTIAL then looks at the
 * chunks of the range in address order: the first that exists holds the
 * lowest page that a chunk MR holds.
 */
static int odp_lookup(struct odpx_ctx *ctx, uintptr_t addr, size_t len, uint32_t access,
		      uint32_t flags, struct entry **out)
{
	struct vbe *b = vbe_of(ctx);
	uintptr_t s = addr & ~(PAGE_SIZE - 1);
	uintptr_t end = (addr + len + PAGE_SIZE - 1) & ~(PAGE_SIZE - 1);
	uint32_t cacc = access, idx = access == ODPX_ACCESS_LOCAL_WRITE ? b->implicit_idx : NIL;
	bool chunk = b->chunks;
	int err = 0, how = 0;
	struct entry *h = NULL;	/* a hit held in a hazard slot */
	hz_slot *slot;

	if (access & ACC_REMOTE_BITS) {
		bool global = b->global_access && !(access & ~b->global_access);

		if (unlikely((err = check_access(access)) < 0))
			return err;
		cacc = b->global_access;
		idx = global ? b->implicit_global_idx : NIL;
		chunk = chunk && global;
	}
	if (idx != NIL) {
		/* an implicit MR lives as long as the context: its slot needs no fence */
		if (likely(slot = hz_free_slot(ctx))) {
			atomic_store_explicit(slot, (uintptr_t)&ctx->ent[idx], RLX);
			h = (struct entry *)((uintptr_t)slot | HZ_TAG);
		} else {
			atomic_fetch_add_explicit(&ctx->ent[idx].word, 1, ACQ);
		}
		goto out;
	}
	if (chunk && likely(s >> b->chunk_shift == (end - 1) >> b->chunk_shift)) {
		uint64_t cbytes = 1ULL << b->chunk_shift;
		if (!drop_at_zero(b, cacc) && (slot = hz_free_slot(ctx)) &&
		    (h = odp_slot_hit(ctx, s & ~(cbytes - 1), cbytes, cacc, slot)))
			goto out;	/* the common chunk hit: no shared write */
		if (likely((idx = chunk_get(ctx, s, cacc, flags, &err, &how)) != NIL) || flags)
			goto out;
		/* e.g. a chunk beyond what the device can map: the range alone */
		STAT_INC(ctx, odp_fallbacks);
	}
	if (!flags && end - s > b->max_reg_bytes)
		return odpx_fail(-E2BIG, "%zu bytes exceed the largest registration, %llu",
				 len, (unsigned long long)b->max_reg_bytes);
	idx = ent_get(ctx, s, end - s, access, flags, &err, &how);
	for (uintptr_t c = s; idx == NIL && chunk && (flags & ODPX_REG_PARTIAL) && c < end;
	     c = ((c >> b->chunk_shift) + 1) << b->chunk_shift)
		idx = chunk_get(ctx, c, cacc, true, &err, &how);
out:
	if (!h && idx == NIL)
		return flags ? -EAGAIN : err;
	if (how < 2)
		stats_hit(ctx, how, 0);
	*out = h ? h : &ctx->ent[idx];	/* a handle (internal.h, struct backend_ops) */
	return 0;
}

static int odp_reg(struct odpx_ctx *ctx, uintptr_t addr, size_t len, uint32_t access,
		   struct entry **out)
{
	return odp_lookup(ctx, addr, len, access, 0, out);
}

/*
 * Free entry @i unless a reference came meanwhile.  Called by whoever takes
 * the count of a drop_at_zero() entry to 0: nothing invalidates the ODP
 * modes' MRs (they follow the page tables), so a kept one would give a peer
 * that still has its rkey whatever the application maps there later.  With
 * @before, by idle release (engine tick): the entry goes if its last release
 * (or registration) is stamped before *@before.  True when it went.
 */
static bool ent_drop(struct odpx_ctx *ctx, uint32_t i, const uint32_t *before)
{
	struct vbe *b = vbe_of(ctx);
	struct ibv_mr *mr;

	pthread_mutex_lock(&b->lock);
	mr = ent_evict(ctx, i, before);
	pthread_mutex_unlock(&b->lock);
	if (mr)
		ibv_dereg_mr(mr);
	return mr != NULL;
}

static int odp_dereg(struct odpx_ctx *ctx, struct entry *e)
{
	if ((uintptr_t)e & HZ_TAG)	/* a slot of ctx's lines: odpx_dereg() checked */
		return hz_dereg(ctx, (hz_slot *)((uintptr_t)e & ~HZ_TAG));
	uint64_t w = LD(e->word);
	uint32_t now = LD(ctx->clock);

	/* for odp_reap_idle(): stamped before the reference goes, as put_ref() does */
	if (LD(e->last_use) != now)
		ST(e->last_use, now);
	do {
		if (W_STATE(w) != ST_ALIVE || W_REF(w) == 0)
			return odpx_fail(-EINVAL, "handle %p is not held (already released?)",
					 (void *)e);
	} while (!atomic_compare_exchange_weak_explicit(&e->word, &w, w - 1, REL, RLX));
	if (W_REF(w) == 1 && drop_at_zero(vbe_of(ctx), W_ACC(w)))
		ent_drop(ctx, (uint32_t)(e - ctx->ent), NULL);
	stats_dereg(ctx, 0);
	return 0;
}

/* Idle release (engine tick): ent_drop() of each chunk and range; the implicit MRs stay. */
static unsigned odp_reap_idle(struct odpx_ctx *ctx, uint32_t stamp)
{
	unsigned n = 0;

	for (uint32_t i = 0; i < ctx->max_entries; i++) {	/* an unlocked peek first */
		uint64_t w = LD(ctx->ent[i].word);

		if (W_STATE(w) == ST_ALIVE && !W_REF(w) && LD(ctx->ent[i].span))
			n += ent_drop(ctx, i, &stamp);
	}
	return n;
}

static void verbs_query(struct odpx_ctx *ctx, struct odpx_caps *c)
{
	const struct mode_caps *d = &vbe_of(ctx)->caps;

	c->max_mr = d->max_mr;
	c->max_mr_size = d->max_mr_size;
	c->max_pd = d->max_pd;
	c->odp_general_caps = d->general;
	c->odp_rc_caps = d->rc;
	c->odp_uc_caps = d->uc;
	c->odp_ud_caps = d->ud;
	c->odp_xrc_caps = d->xrc;
	c->comp_mask |= ODPX_QUERY_DEVICE;
}

static const struct backend_ops verbs_odp_ops = {
	.name = "verbs",
	.id = ODPX_BACKEND_VERBS,
	.unpin = verbs_unpin,
	.close = verbs_close,
	.reg = odp_reg,
	.dereg = odp_dereg,
	.advise = odp_advise,
	.try_reg = odp_lookup,
	.query = verbs_query,
	.reap_idle = odp_reap_idle,
};

/* ---- open ---- */

static __attribute__((aligned(4096))) char anchor_page[4096];

static void query_caps(struct ibv_pd *pd, struct mode_caps *c)
{
	struct ibv_device_attr_ex ax;
	int r;

	memset(&ax, 0, sizeof(ax));
	memset(c, 0, sizeof(*c));
	r = mode_verbs_err(ibv_query_device_ex(pd->context, NULL, &ax), errno);
	if (r < 0) {
		c->query_err = -r;
		return;
	}
	c->queried = true;
	c->general = ax.odp_caps.general_caps;
	c->rc = ax.odp_caps.per_transport_caps.rc_odp_caps;
	c->uc = ax.odp_caps.per_transport_caps.uc_odp_caps;
	c->ud = ax.odp_caps.per_transport_caps.ud_odp_caps;
	c->xrc = ax.xrc_odp_caps;
	c->max_mr_size = ax.orig_attr.max_mr_size;
	c->max_mr = (uint64_t)ax.orig_attr.max_mr;
	c->max_pd = (uint64_t)ax.orig_attr.max_pd;
}

/* The open's attributes and ODPX_MODE: what is asked of mode_decide(). */
static int verbs_request(const struct odpx_attr *attr, struct odpx_attr *a,
			 struct mode_request *rq)
{
	int r = attr_copy(attr, a);

	if (r < 0)
		return r;
	rq->transports = a->comp_mask & ODPX_ATTR_TRANSPORTS ? a->transports : ODPX_TRANSPORT_RC;
	if ((a->comp_mask & ODPX_ATTR_MODE) && a->mode != ODPX_MODE_AUTO) {
		rq->forced = a->mode;
		rq->forced_by = "attributes";
		return 0;
	}
	rq->forced_by = "ODPX_MODE";
	return mode_env(&rq->forced);
}

/* The chunk size asked for, checked, and halved to fit max_mr_size. */
static int verbs_chunk(const struct odpx_attr *a, uint64_t max_mr_size, uint64_t *chunk)
{
	*chunk = CHUNK_DEFAULT_BYTES;
	if (a->comp_mask & ODPX_ATTR_CHUNK) {
		*chunk = a->chunk_bytes;
		if (*chunk < CHUNK_MIN_BYTES || *chunk > CHUNK_MAX_BYTES || (*chunk & (*chunk - 1)) ||
		    *chunk > max_mr_size)
			return odpx_fail(-EINVAL, "chunk_bytes %llu: a power of 2 from 2 MiB to "
					 "2 GiB and at most max_mr_size %llu",
					 (unsigned long long)*chunk, (unsigned long long)max_mr_size);
	}
	while (*chunk > max_mr_size && *chunk > CHUNK_MIN_BYTES)
		*chunk /= 2;
	return 0;
}

/*
 * Implicit mode: the MR over the address space (and, with GLOBAL_RKEY, the
 * one with remote access).  Refused, the mode is decided again without it.
 */
static int verbs_implicit(struct ibv_pd *pd, const struct odpx_attr *a, uint32_t global_access,
			  const struct mode_caps *caps, struct mode_request *rq,
			  struct mode_choice *ch, struct ibv_mr **impl, struct ibv_mr **impl_global)
{
	int r;

	*impl = ibv_reg_mr(pd, NULL, SIZE_MAX, IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE);
	r = *impl ? 0 : verr_ptr();
	if (*impl && (a->flags & ODPX_OPEN_GLOBAL_RKEY)) {
		*impl_global = ibv_reg_mr(pd, NULL, SIZE_MAX, IBV_ACCESS_ON_DEMAND | (int)global_access);
		r = *impl_global ? 0 : verr_ptr();
	}
	if (r == 0)
		return 0;
	if (*impl)
		ibv_dereg_mr(*impl);
	*impl = NULL;
	rq->implicit_err = -r;
	if ((r = mode_decide(caps, rq, ch)) < 0)
		return odpx_fail(r, "%s", ch->reason);
	return 0;
}

/* Pin and direct modes: one entry is one MR, never beyond the device's max_mr_size. */
static int verbs_pin_limits(struct odpx_attr *a2, uint64_t max_mr_size)
{
	uint64_t cap = max_mr_size & ~(uint64_t)(PAGE_SIZE - 1);

	if (!(a2->comp_mask & ODPX_ATTR_LIMITS))
		memset(&a2->limits, 0, sizeof(a2->limits));
	a2->comp_mask |= ODPX_ATTR_LIMITS;
	if (a2->limits.max_entry_bytes > cap)
		return odpx_fail(-EINVAL, "max_entry_bytes %llu above the device's max_mr_size %llu",
				 (unsigned long long)a2->limits.max_entry_bytes,
				 (unsigned long long)max_mr_size);
	if (!a2->limits.max_entry_bytes && cap < (1ULL << 30))
		a2->limits.max_entry_bytes = cap ? cap : PAGE_SIZE;
	return 0;
}

/* The backend's state on an open context; ODP modes take the implicit MRs over. */
static int verbs_setup(struct odpx_ctx *ctx, struct ibv_pd *pd, bool odp, uint64_t chunk,
		       uint64_t max_mr_size, uint32_t global_access, uint32_t flags,
		       struct ibv_mr **impl, struct ibv_mr **impl_global)
{
	struct vbe *b = calloc(1, sizeof(*b));
	struct ibv_mr *none;

	if (!b)
		return -ENOMEM;
	pthread_mutex_init(&b->lock, NULL);
	b->pd = pd;
	b->implicit_idx = b->implicit_global_idx = NIL;
	ctx->be_priv = b;
	if (!(b->mr = calloc(ctx->max_entries, sizeof(*b->mr))))
		return -ENOMEM;
	if (!(b->anchor = ibv_reg_mr(pd, anchor_page, sizeof(anchor_page), 0)))
		return verr_ptr();
	if (!odp)
		return 0;
	b->chunk_shift = (unsigned)__builtin_ctzll(chunk);	/* a power of 2 */
	b->chunks = chunk <= max_mr_size;	/* else every request is a range of its own */
	b->max_reg_bytes = SPAN_MAX_BYTES < max_mr_size ? SPAN_MAX_BYTES : max_mr_size;
	b->global_access = flags & ODPX_OPEN_GLOBAL_RKEY ? global_access : 0;
	atomic_store(&ctx->cs->global_rkey, !!b->global_access);
	/* the implicit entries and at least one more (a range's) */
	unsigned nimpl = (*impl != NULL) + (*impl_global != NULL);
	if (ctx->max_entries < nimpl + 1u)
		return odpx_fail(-EINVAL, "max_entries %u: the implicit MRs take %u, and a range"
				 " needs one more", ctx->max_entries, nimpl);
	if (*impl) {	/* ent_alloc() finds the entries checked above free */
		b->implicit_idx = ent_alloc(ctx, NIL, &none);
		ent_fill(ctx, b->implicit_idx, *impl, ODPX_ACCESS_LOCAL_WRITE, 0, 0, 0);
	}
	if (*impl_global) {
		b->implicit_global_idx = ent_alloc(ctx, NIL, &none);
		ent_fill(ctx, b->implicit_global_idx, *impl_global, global_access, 0, 0, 0);
	}
	*impl = *impl_global = NULL;	/* the entries own them now */
	return 0;
}

/* ---- hybrid mode ---- */

/*
 * A hybrid context is an explicit-ODP context (chunks and ranges in its own
 * entries, as above) whose pinned part is a pin-mode context on the same PD:
 * ctx->pin_part, with the pin cache, its LRU and budget, and the userfaultfd
 * monitor exactly as in pin mode, so the invalidation guarantee of the
 * pinned registrations is pin mode's own.  A request is served from the
 * pinned part when it holds the range (its lock-free hit), else from an ODP
 * MR that holds it, else where hybrid_place() says.  Handles of the pinned
 * part are entries of its slab; odpx_dereg() tells them apart by address.
 */

static enum odpx_thrash_state odp_thrash(struct odpx_ctx *ctx)
{
	struct seg_hdr *h = ctx->stats_region;

	return (enum odpx_thrash_state)LD(h->thrash_state);
}

/*
 * The pinned part's bytes and the room the memory cgroup leaves, for
 * hybrid_place().  Unused cached entries count: they are pinned pages all
 * the same, and hybrid never evicts to pin (past the budget it pages), so
 * only the cgroup's pressure (the pinned part's engine, memcg.h) and idle
 * release let them go.  An unreadable cgroup leaves no bound but the budget.
 */
static void hybrid_inputs(struct odpx_ctx *ctx, struct hybrid_in *in)
{
	struct odpx_ctx *pc = ctx->pin_part;

	pthread_mutex_lock(&pc->lock);
	in->pinned = pc->pinned_bytes + pc->releasing_bytes;
	in->churn = pc->memcg_release_ns &&
		    odpx_now_ns() - pc->memcg_release_ns < HYBRID_CHURN_MS * 1000000ULL;
	pthread_mutex_unlock(&pc->lock);
	in->budget = pc->lim.max_pinned_bytes;
	/*
	 * The cgroup's bound is the process's: every context's pins count.  Only
	 * whether in->bytes fits matters, which a cheap reading often tells.
	 */
	if (memcg_unlimited() ||
	    memcg_headroom_atleast(ctx_pinned_total(), in->bytes, &in->headroom, NULL) < 0)
		in->headroom = UINT64_MAX;
	in->thrash = odp_thrash(ctx) == ODPX_THRASH_THRASH;
}

static int hybrid_reg(struct odpx_ctx *ctx, uintptr_t addr, size_t len, uint32_t access,
		      struct entry **out)
{
	struct odpx_ctx *pc = ctx->pin_part;
	uintptr_t s = addr & ~(PAGE_SIZE - 1);
	uintptr_t end = (addr + len + PAGE_SIZE - 1) & ~(PAGE_SIZE - 1);
	struct hybrid_in in = { .bytes = end - s };
	struct entry *e, *o = NULL;
	int r;

	if ((r = check_access(access)) < 0)
		return r;
	if (cache_try(pc, addr, len, access, ODPX_REG_TRY, out) == 0)
		return 0;	/* a pinned hit, lock-free */
	in.odp_serves = odp_lookup(ctx, addr, len, access, ODPX_REG_TRY, &o) == 0;
	if (in.odp_serves && odp_thrash(ctx) != ODPX_THRASH_THRASH) {
		*out = o;	/* the common ODP hit: no lock */
		return 0;
	}
	hybrid_inputs(ctx, &in);
	switch (hybrid_place(&in)) {
	case HYB_ODP:
		if (o) {
			*out = o;
			return 0;
		}
		if ((r = odp_reg(ctx, addr, len, access, out)) == 0)
			STAT_INC(ctx, hybrid_odp);
		return r;
	case HYB_TO_PIN:
	case HYB_PIN:
		break;
	}
	r = cache_reg(pc, addr, len, access, &e);
	if (r == 0 && KIND(e) == KIND_DIRECT) {
		/* pinned past the budget after all (racing misses): ODP serves it instead */
		cache_dereg(pc, e);
		r = -ENOSPC;
	}
	if (r < 0) {	/* the pin failed: ODP serves it, as it would past the budget */
		if (o) {
			*out = o;
			return 0;
		}
		if ((r = odp_reg(ctx, addr, len, access, out)) == 0)
			STAT_INC(ctx, hybrid_odp);
		return r;
	}
	if (o) {	/* moved: the ODP MR goes when idle release finds it unused */
		odp_dereg(ctx, o);
		STAT_INC(ctx, hybrid_to_pin);
	}
	STAT_INC(ctx, hybrid_pinned);
	*out = e;
	return 0;
}

/* TRY and PARTIAL: the pinned part's lock-free hits, then the ODP MRs'. */
static int hybrid_try(struct odpx_ctx *ctx, uintptr_t addr, size_t len, uint32_t access,
		      uint32_t flags, struct entry **out)
{
	if (cache_try(ctx->pin_part, addr, len, access, flags, out) == 0)
		return 0;
	return odp_lookup(ctx, addr, len, access, flags, out);
}

static void hybrid_close(struct odpx_ctx *ctx)
{
	if (ctx->pin_part)
		odpx_close(ctx->pin_part);
	ctx->pin_part = NULL;
	verbs_close(ctx);
}

static const struct backend_ops verbs_hybrid_ops = {
	.name = "verbs",
	.id = ODPX_BACKEND_VERBS,
	.unpin = verbs_unpin,
	.close = hybrid_close,
	.reg = hybrid_reg,
	.dereg = odp_dereg,
	.advise = odp_advise,
	.try_reg = hybrid_try,
	.query = verbs_query,
	.reap_idle = odp_reap_idle,
};

/* The open of a hybrid context's pinned part: pin mode, the budget of @a's limits. */
static int hybrid_pin_open(struct odpx_ctx *ctx, struct ibv_pd *pd, const struct odpx_attr *a,
			   uint64_t max_mr_size)
{
	struct odpx_attr pa = *a;
	struct odpx_ctx *pc;
	int r;

	pa.comp_mask = (a->comp_mask & (ODPX_ATTR_LIMITS | ODPX_ATTR_FLAGS | ODPX_ATTR_TICK |
					ODPX_ATTR_LINGER | ODPX_ATTR_IDLE)) | ODPX_ATTR_MODE;
	pa.mode = ODPX_MODE_PIN;
	pa.flags &= ~(uint32_t)ODPX_OPEN_GLOBAL_RKEY;
	if ((r = verbs_pin_limits(&pa, max_mr_size)) < 0)
		return r;
	if ((r = odpx_open_backend(&verbs_pin_ops, &pa, &pc)) < 0)
		return r;
	if ((r = verbs_setup(pc, pd, false, 0, max_mr_size, 0, 0, NULL, NULL)) < 0) {
		odpx_close(pc);
		return r;
	}
	ctx_reason_set(pc, "the pinned part of a hybrid context: pin-down cache invalidated by "
		       "userfaultfd");
	vbe_of(pc)->caps = vbe_of(ctx)->caps;
	ctx->pin_part = pc;
	/*
	 * The engines from the start: the pinned part's releases its unused
	 * entries under the cgroup's pressure (reserve.c), this one's runs the
	 * detector whose THRASH moves ranges.  A failed start is retried by the
	 * first miss of each.
	 */
	if ((r = engine_start(pc)) < 0 || (r = engine_start(ctx)) < 0)
		odpx_log(LOG_WARN, "hybrid: an engine did not start (%s): retried at a miss",
			 strerror(-r));
	return 0;
}

ODPX_EXPORT int odpx_open_verbs(struct ibv_pd *pd, const struct odpx_attr *attr,
				struct odpx_ctx **out)
{
	struct odpx_attr a = { 0 }, a2;
	struct mode_request rq = { 0 };
	struct mode_choice ch;
	struct mode_caps caps;
	struct ibv_mr *impl = NULL, *impl_global = NULL;
	struct odpx_ctx *ctx;
	uint64_t max_mr_size, chunk;
	uint32_t global_access;
	bool odp;
	int r;

	if (!out)
		return odpx_fail(-EINVAL, "NULL ctx pointer");
	*out = NULL;
	if (!pd)
		return odpx_fail(-EINVAL, "NULL protection domain");
	if ((r = verbs_request(attr, &a, &rq)) < 0)
		return r;
	query_caps(pd, &caps);
	max_mr_size = caps.max_mr_size ? caps.max_mr_size : UINT64_MAX;
	if ((r = verbs_chunk(&a, max_mr_size, &chunk)) < 0)
		return r;
	global_access = ODPX_ACCESS_LOCAL_WRITE | ODPX_ACCESS_REMOTE_READ | ODPX_ACCESS_REMOTE_WRITE |
			((caps.rc & MODE_ODP_ATOMIC) ? ODPX_ACCESS_REMOTE_ATOMIC : 0);
	if ((r = mode_decide(&caps, &rq, &ch)) < 0)
		return odpx_fail(r, "%s", ch.reason);
	/* auto picks ODP only where the device's ODP moves the right bytes */
	if (rq.forced == ODPX_MODE_AUTO && ch.mode != ODPX_MODE_PIN) {
		verbs_odp_selftest(pd, &caps);
		if ((r = mode_decide(&caps, &rq, &ch)) < 0)
			return odpx_fail(r, "%s", ch.reason);
	}
	if (ch.mode == ODPX_MODE_IMPLICIT &&
	    (r = verbs_implicit(pd, &a, global_access, &caps, &rq, &ch, &impl, &impl_global)) < 0)
		return r;

	a2 = a;
	a2.comp_mask |= ODPX_ATTR_MODE;
	a2.mode = ch.mode;
	a2.comp_mask &= ~(uint64_t)(ODPX_ATTR_TRANSPORTS | ODPX_ATTR_CHUNK);
	odp = ch.mode != ODPX_MODE_PIN && ch.mode != ODPX_MODE_DIRECT;
	if (!odp && (r = verbs_pin_limits(&a2, max_mr_size)) < 0)
		goto out_impl;
	if ((r = odpx_open_backend(ch.mode == ODPX_MODE_HYBRID ? &verbs_hybrid_ops :
				   odp ? &verbs_odp_ops : &verbs_pin_ops, &a2, &ctx)) < 0)
		goto out_impl;	/* its reason stands */
	r = verbs_setup(ctx, pd, odp, chunk, max_mr_size, global_access, a.flags, &impl,
			&impl_global);
	if (r < 0) {
		char why[200] = "";

		odpx_close(ctx);
		if (r == -ENOMEM) {	/* an MR's pages are charged to RLIMIT_MEMLOCK */
			why[0] = ' ';
			odpx_why_memlock(why + 1, sizeof(why) - 1);
		}
		r = odpx_fail(r, "odpx_open_verbs: %s%s", strerror(-r), why);
		goto out_impl;
	}
	const char *note = odp && (a.flags & ODPX_OPEN_GLOBAL_RKEY) ?
			   "; GLOBAL_RKEY: remote access may exceed the request" : "";
	ctx_reason_set(ctx, "%.*s%s", (int)(sizeof(ctx->reason) - 1 - strlen(note)), ch.reason,
		       note);
	vbe_of(ctx)->caps = caps;
	if (ch.mode == ODPX_MODE_HYBRID && (r = hybrid_pin_open(ctx, pd, &a, max_mr_size)) < 0) {
		odpx_close(ctx);
		goto out_impl;
	}
	/* a hybrid context's pre-registered regions are pinned, in its pinned part */
	if ((r = prereg_open(ctx->pin_part ? ctx->pin_part : ctx, &a)) < 0) {
		odpx_close(ctx);
		goto out_impl;
	}
	odpx_log(LOG_INFO, "verbs context opened, mode %s: %s", odpx_mode_str(ctx->mode), ctx->reason);
	*out = ctx;
	return 0;

out_impl:
	if (impl)
		ibv_dereg_mr(impl);
	if (impl_global)
		ibv_dereg_mr(impl_global);
	return r;
}

#endif /* ODPX_HAVE_VERBS */
