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
 *             local access class, registered on first use and never
 *             invalidated: ODP follows the page tables.  A hit is a table
 *             load and an atomic add.
 *   pin       the core's pin cache and userfaultfd monitor over
 *             ibv_reg_mr/ibv_dereg_mr (pin/unpin below).
 *   direct    the same ops with the cache off: one MR per request.
 *
 * In both ODP modes a request the chunk table cannot serve - remote access,
 * or a range that straddles chunks - gets an explicit ODP MR over exactly its
 * page-rounded range, cached by (range, access) in a small hash.  Remote
 * access is never granted beyond the request unless the context was opened
 * ODPX_OPEN_GLOBAL_RKEY: then the implicit MR (implicit mode) or a chunk MR
 * (explicit mode) with every remote access the device's ODP offers serves it.
 *
 * Handles are entries of ctx->ent, as the core's odpx_dereg() requires.  In
 * the ODP modes this backend manages the slab with fields the pin cache
 * would use: the free list (ctx->free_head through @lru_next) and the
 * exact-start hash (index.h:bucket_of(), @bucket and @hnext) for ranges.
 *
 * struct vbe.lock - the free list, the range hash and the chunk table's
 *   writers.  Never held across anything that can wait on userfaultfd (ODP
 *   registration does not fault pages in).  Operations:
 *     chunk hit   no lock: acquire-load ctab[cls][chunk] (paired with the
 *                 release store of the miss that published the entry), then
 *                 CAS word -> word + 1 while ALIVE, then check the entry is
 *                 still this chunk's (span and access): an unused chunk
 *                 entry may have been evicted and reused since the load.
 *                 If not, drop the reference and look again (chunk_get).
 *     miss        register with no lock; then lock, re-check, fill a free
 *                 entry, release-store its index + 1 into ctab (a chunk) or
 *                 hash it (a range, word += 1), unlock.
 *     range       lock, look up by (start, pages, access), word += 1, unlock.
 *     dereg       no lock: CAS word -> word - 1 while ALIVE with a reference.
 *     evict       lock: CAS an unused range or chunk entry ALIVE/0 -> FREE
 *                 (gen + 1), and unlink it (range hash, or ctab: 0).  A
 *                 range hit holds the lock; a chunk hit's CAS and the
 *                 eviction's meet on word, one wins; a dereg never moves a
 *                 count of 0.  Its MR is deregistered after unlocking.
 *                 Implicit entries (span 0) are never evicted.
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
#include <sys/mman.h>

#include "log.h"
#include "backend_verbs.h"
#include "index.h"

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
	if (b->ctab[0])
		munmap(b->ctab[0], NCLS * b->ctab_bytes);
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
}

/* The chunk table's slot that holds entry @i, NULL if @i is no chunk's (b->lock). */
static _Atomic uint32_t *chunk_slot(struct odpx_ctx *ctx, uint32_t i)
{
	struct vbe *b = vbe_of(ctx);
	uint64_t c = e_start(&ctx->ent[i]) >> b->chunk_shift;

	for (unsigned cls = 0; cls < NCLS && c < b->nchunks; cls++)
		if (b->cls_access[cls] == ctx->ent[i].access && LD(b->ctab[cls][c]) == i + 1)
			return &b->ctab[cls][c];
	return NULL;
}

/* The head of the range hash chain of (@s, @acc). */
static _Atomic uint32_t *rbucket(struct odpx_ctx *ctx, uintptr_t s, uint32_t acc)
{
	return &ctx->ent[bucket_of(ctx, s, acc)].bucket;
}

/*
 * An entry just made FREE (b->lock held): out of the chunk table or the
 * range hash and onto the free list, its MR returned for deregistration
 * after unlocking.
 */
static struct ibv_mr *ent_unlink(struct odpx_ctx *ctx, uint32_t i, _Atomic uint32_t *slot)
{
	struct vbe *b = vbe_of(ctx);
	struct entry *e = &ctx->ent[i];
	struct ibv_mr *mr = b->mr[i];

	if (slot) {
		atomic_store_explicit(slot, 0, REL);
	} else {
		_Atomic uint32_t *pp = rbucket(ctx, e_start(e), e->access);

		while (LD(*pp) != NIL && LD(*pp) != i)
			pp = &ctx->ent[LD(*pp)].hnext;
		if (LD(*pp) == i)
			ST(*pp, LD(e->hnext));
	}
	b->mr[i] = NULL;
	e->lru_next = ctx->free_head;
	ctx->free_head = i;
	return mr;
}

/*
 * Free entry @i if it is a range (or, unless @range_only, a chunk) with no
 * reference, released before *@before unless NULL: ALIVE/0 -> FREE (gen + 1),
 * a CAS that meets a chunk hit's on the word, one wins.  The implicit
 * entries (span 0) never go.  b->lock held; returns its MR for
 * deregistration after unlocking.
 */
static struct ibv_mr *ent_evict(struct odpx_ctx *ctx, uint32_t i, bool range_only,
				const uint32_t *before)
{
	struct entry *e = &ctx->ent[i];
	uint64_t w = atomic_load_explicit(&e->word, ACQ);
	_Atomic uint32_t *slot;

	if (W_STATE(w) != ST_ALIVE || W_REF(w) || !LD(e->span) ||
	    ((slot = chunk_slot(ctx, i)) && range_only) ||
	    (before && (int32_t)(LD(e->last_use) - *before) >= 0) ||
	    !atomic_compare_exchange_strong(&e->word, &w, W_MAKE(W_GEN(w) + 1, 0, ST_FREE, 0)))
		return NULL;
	return ent_unlink(ctx, i, slot);
}

/*
 * A free entry (b->lock held).  With none free, the hand goes round and
 * evicts the first unused range or chunk it meets (FIFO), whose MR goes to
 * *victim.
 */
static uint32_t ent_alloc(struct odpx_ctx *ctx, struct ibv_mr **victim)
{
	struct vbe *b = vbe_of(ctx);
	uint32_t idx;

	*victim = NULL;
	for (uint32_t k = 0; ctx->free_head == NIL && k < ctx->max_entries; k++) {
		uint32_t i = b->hand;

		b->hand = i + 1 == ctx->max_entries ? 0 : i + 1;
		if ((*victim = ent_evict(ctx, i, false, NULL)))
			STAT_INC(ctx, evictions);
	}
	if ((idx = ctx->free_head) != NIL)
		ctx->free_head = ctx->ent[idx].lru_next;
	return idx;
}

static inline void take(struct odpx_ctx *ctx, uint32_t idx, struct entry **out, int slow)
{
	atomic_fetch_add_explicit(&ctx->ent[idx].word, 1, ACQ);
	stats_hit(ctx, slow, 0);
	*out = &ctx->ent[idx];
}

static struct ibv_mr *reg_odp(struct odpx_ctx *ctx, uintptr_t start, uint64_t bytes,
			      uint32_t access, int *err)
{
	struct ibv_mr *mr = ibv_reg_mr(vbe_of(ctx)->pd, (void *)start, bytes,
				       (int)access | IBV_ACCESS_ON_DEMAND);

	if (!mr) {
		*err = verr_ptr();
		return NULL;
	}
	STAT_INC(ctx, odp_mrs);
	STAT_INC(ctx, misses);
	return mr;
}

static uint32_t rfind(struct odpx_ctx *ctx, uintptr_t s, uint64_t bytes, uint32_t acc)
{
	for (uint32_t i = LD(*rbucket(ctx, s, acc)); i != NIL; i = LD(ctx->ent[i].hnext)) {
		uint64_t span = LD(ctx->ent[i].span);
		if (SPAN_START(span) == s && SPAN_BYTES(span) == bytes && ctx->ent[i].access == acc)
			return i;
	}
	return NIL;
}

/*
 * A fresh MR @mr, registered with no lock held, as the entry of chunk
 * s >> chunk_shift of class @cls, or with @cls NCLS of the range (@s,
 * @bytes, @acc) with a reference taken.  Two threads that race for one both
 * register, and the later one drops its MR for the entry of the first
 * (taking a range's reference under b->lock).  NIL + *err when every entry
 * is in use.  Idle release needs the engine, which the ODP modes otherwise
 * start only for prefetch hints: it starts with the first new entry, and a
 * failed start is retried with the next (engine.c spaces the retries).
 */
static uint32_t ent_insert(struct odpx_ctx *ctx, struct ibv_mr *mr, unsigned cls, uintptr_t s,
			   uint64_t bytes, uint32_t acc, int *err)
{
	struct vbe *b = vbe_of(ctx);
	struct ibv_mr *victim = NULL;
	bool chunk = cls < NCLS;
	uint32_t idx;

	pthread_mutex_lock(&b->lock);
	idx = chunk ? LD(b->ctab[cls][s >> b->chunk_shift]) - 1 : rfind(ctx, s, bytes, acc);
	if (idx != NIL) {	/* another thread registered it meanwhile */
		if (!chunk) {
			atomic_fetch_add_explicit(&ctx->ent[idx].word, 1, ACQ);
			stats_hit(ctx, 1, 0);
		}
		victim = mr;
	} else if ((idx = ent_alloc(ctx, &victim)) == NIL) {
		victim = mr;
		*err = odpx_fail(-ENOMEM, "all %u entries are in use", ctx->max_entries);
	} else {
		ent_fill(ctx, idx, mr, acc, s, bytes, !chunk);
		if (chunk) {
			atomic_store_explicit(&b->ctab[cls][s >> b->chunk_shift], idx + 1, REL);
		} else {
			ST(ctx->ent[idx].hnext, LD(*rbucket(ctx, s, acc)));
			ST(*rbucket(ctx, s, acc), idx);
		}
	}
	pthread_mutex_unlock(&b->lock);
	if (victim)
		ibv_dereg_mr(victim);
	if (victim != mr && ctx->idle_ms && !engine_running(ctx))
		engine_start(ctx);
	return idx;
}

/* A range's entry, with a reference; @try: no registration, no wait for b->lock. */
static int range_get(struct odpx_ctx *ctx, uintptr_t s, uintptr_t end, uint32_t acc, bool try,
		     struct entry **out)
{
	struct vbe *b = vbe_of(ctx);
	struct ibv_mr *mr;
	uint32_t idx;
	int err = 0;

	if (try && pthread_mutex_trylock(&b->lock))
		return -EAGAIN;
	if (!try)
		pthread_mutex_lock(&b->lock);
	if ((idx = rfind(ctx, s, end - s, acc)) != NIL)
		take(ctx, idx, out, !try);
	pthread_mutex_unlock(&b->lock);
	if (idx != NIL || try)
		return idx != NIL ? 0 : -EAGAIN;
	mr = reg_odp(ctx, s, end - s, acc, &err);
	if (!mr) {
		STAT_INC(ctx, pin_failures);
		return odpx_fail(err, "ODP registration of %#lx-%#lx (access %#x): %s",
				 (unsigned long)s, (unsigned long)end, acc, strerror(-err));
	}
	if ((idx = ent_insert(ctx, mr, NCLS, s, end - s, acc, &err)) == NIL)
		return err;
	*out = &ctx->ent[idx];
	return 0;
}

/* ---- ODP modes: chunks ---- */

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
	/* held: no eviction now, but it may have been reused since ctab was read */
	if (LD(e->span) == span && e->access == acc)
		return true;
	w = atomic_fetch_sub_explicit(&e->word, 1, REL);
	if (W_REF(w) == 1 && (e->access & ACC_REMOTE_BITS))
		ent_drop(ctx, idx, NULL);	/* ours was the last: a range released meanwhile */
	return false;
}

uint32_t chunk_get(struct odpx_ctx *ctx, unsigned cls, uint64_t c, bool try, int *err, int *slow)
{
	struct vbe *b = vbe_of(ctx);
	uintptr_t s = (uintptr_t)c << b->chunk_shift;
	uint64_t bytes = 1ULL << b->chunk_shift;
	struct ibv_mr *mr;

	for (int tries = 0; tries < CHUNK_GET_TRIES; tries++) {
		uint32_t idx = atomic_load_explicit(&b->ctab[cls][c], ACQ) - 1;

		if (idx == NIL && try) {
			*err = -EAGAIN;
			return NIL;
		}
		if (idx == NIL) {
			*slow = 1;
			if (!(mr = reg_odp(ctx, s, bytes, b->cls_access[cls], err)) ||
			    (idx = ent_insert(ctx, mr, cls, s, bytes, b->cls_access[cls], err)) == NIL)
				return NIL;
		}
		if (take_if(ctx, idx, SPAN_MAKE(s, bytes >> PAGE_SHIFT), b->cls_access[cls]))
			return idx;
		*slow = 1;
	}
	*err = odpx_fail(-EBUSY, "chunk %#llx evicted at each of %d tries",
			 (unsigned long long)c, CHUNK_GET_TRIES);
	return NIL;
}

void ent_put(struct odpx_ctx *ctx, uint32_t idx)
{
	ST(ctx->ent[idx].last_use, LD(ctx->clock));	/* as odp_dereg() */
	atomic_fetch_sub_explicit(&ctx->ent[idx].word, 1, REL);
}

/*
 * Which MR serves @access: 1, an implicit one, taken into *out; 0, a chunk
 * of class *cls; 2, a range MR of exactly the request (remote access beyond
 * the global class); -errno for bad access bits.
 */
static int odp_class(struct odpx_ctx *ctx, struct vbe *b, uint32_t access, unsigned *cls,
		     struct entry **out)
{
	int r;

	if (!(access & ACC_REMOTE_BITS)) {
		if (access == ODPX_ACCESS_LOCAL_WRITE && b->implicit_idx != NIL) {
			take(ctx, b->implicit_idx, out, 0);
			return 1;
		}
		*cls = access ? CLS_WRITE : CLS_READ;
		return 0;
	}
	if (unlikely((r = check_access(access)) < 0))
		return r;
	if (!b->global_rkey || (access & ~b->cls_access[CLS_GLOBAL]))
		return 2;
	if (b->implicit_global_idx != NIL) {
		take(ctx, b->implicit_global_idx, out, 0);
		return 1;
	}
	*cls = CLS_GLOBAL;
	return 0;
}

/*
 * odp_reg() and, with @flags, odpx_reg_ex()'s TRY and PARTIAL: the same
 * lookups with no registration and no wait.  The implicit MRs always exist;
 * a request inside one chunk takes that chunk, else (or when the chunk
 * cannot be registered) the range of exactly its pages.  PARTIAL then looks
 * at the chunks of the range in address order: the first that exists holds
 * the lowest page that a chunk MR holds.
 */
static int odp_lookup(struct odpx_ctx *ctx, uintptr_t addr, size_t len, uint32_t access,
		      uint32_t flags, struct entry **out)
{
	struct vbe *b = vbe_of(ctx);
	uintptr_t s = addr & ~(PAGE_SIZE - 1);
	uintptr_t end = (addr + len + PAGE_SIZE - 1) & ~(PAGE_SIZE - 1);
	uint64_t c0 = addr >> b->chunk_shift, c1 = (addr + len - 1) >> b->chunk_shift;
	unsigned cls = CLS_READ;
	int err, slow = 0, r = odp_class(ctx, b, access, &cls, out);
	uint32_t idx;

	if (r < 0 || r == 1)
		return r < 0 ? r : 0;
	if (r == 0 && likely(c0 == c1 && c0 < b->nchunks)) {
		if (likely((idx = chunk_get(ctx, cls, c0, flags, &err, &slow)) != NIL)) {
			stats_hit(ctx, slow, 0);
			*out = &ctx->ent[idx];
			return 0;
		}
		if (flags)
			return -EAGAIN;
		/* e.g. a chunk beyond what the device can map: the range alone */
		STAT_INC(ctx, odp_fallbacks);
	}
	if (!flags && end - s > b->max_reg_bytes)
		return odpx_fail(-E2BIG, "%zu bytes exceed the largest registration, %llu",
				 len, (unsigned long long)b->max_reg_bytes);
	err = range_get(ctx, s, end, access, flags, out);
	if (err != -EAGAIN || !(flags & ODPX_REG_PARTIAL) || r == 2)
		return err;
	for (uint64_t c = c0; c <= c1 && c < b->nchunks; c++) {
		if ((idx = chunk_get(ctx, cls, c, true, &err, &slow)) != NIL) {
			stats_hit(ctx, 0, 0);
			*out = &ctx->ent[idx];
			return 0;
		}
	}
	return -EAGAIN;
}

static int odp_reg(struct odpx_ctx *ctx, uintptr_t addr, size_t len, uint32_t access,
		   struct entry **out)
{
	return odp_lookup(ctx, addr, len, access, 0, out);
}

/*
 * A remote-access range whose count went to 0 is deregistered at once.
 * Nothing invalidates the ODP modes' MRs (they follow the page tables), so
 * a kept one would give a peer that still has its rkey whatever the
 * application maps there later.  Whoever takes the count to 0 calls this,
 * a chunk hit's passing reference too (take_if()); it frees the entry only
 * if no reference came meanwhile (a range hit takes one under b->lock).
 * With @before, it is idle release (engine tick) instead: a chunk or range
 * with no reference whose last release (or registration) is stamped before
 * *@before goes as an eviction does.  True when the entry went.
 */
static bool ent_drop(struct odpx_ctx *ctx, uint32_t i, const uint32_t *before)
{
	struct vbe *b = vbe_of(ctx);
	struct ibv_mr *mr = NULL;

	pthread_mutex_lock(&b->lock);
	if (before || (ctx->ent[i].access & ACC_REMOTE_BITS))
		mr = ent_evict(ctx, i, !before, before);
	pthread_mutex_unlock(&b->lock);
	if (mr)
		ibv_dereg_mr(mr);
	return mr != NULL;
}

static int odp_dereg(struct odpx_ctx *ctx, struct entry *e)
{
	uint64_t w = LD(e->word);

	/* for odp_reap_idle(): stamped before the reference goes, as put_ref() does */
	ST(e->last_use, LD(ctx->clock));
	do {
		if (W_STATE(w) != ST_ALIVE || W_REF(w) == 0)
			return odpx_fail(-EINVAL, "handle %p is not held (already released?)",
					 (void *)e);
	} while (!atomic_compare_exchange_weak_explicit(&e->word, &w, w - 1, REL, RLX));
	if (W_REF(w) == 1 && (e->access & ACC_REMOTE_BITS))
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

static unsigned log2_u64(uint64_t v)
{
	return 63 - (unsigned)__builtin_clzll(v);
}

static int odp_setup(struct odpx_ctx *ctx, struct vbe *b, uint64_t chunk_bytes,
		     uint64_t max_mr_size, uint32_t global_access)
{
	b->chunk_shift = log2_u64(chunk_bytes);
	/* a chunk the device cannot register: every request is a range of its own */
	b->nchunks = chunk_bytes <= max_mr_size ? 1ULL << (VA_BITS - b->chunk_shift) : 0;
	b->ctab_bytes = (1ULL << (VA_BITS - b->chunk_shift)) * sizeof(uint32_t);
	b->max_reg_bytes = SPAN_MAX_BYTES < max_mr_size ? SPAN_MAX_BYTES : max_mr_size;
	b->cls_access[CLS_READ] = 0;
	b->cls_access[CLS_WRITE] = ODPX_ACCESS_LOCAL_WRITE;
	b->cls_access[CLS_GLOBAL] = global_access;
	char *p = mmap(NULL, NCLS * b->ctab_bytes, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return -ENOMEM;
	for (int c = 0; c < NCLS; c++)	/* one mapping: unmapped by ctab[0] */
		b->ctab[c] = (_Atomic uint32_t *)(p + c * b->ctab_bytes);
	return 0;
}

static uint32_t implicit_entry(struct odpx_ctx *ctx, struct ibv_mr *mr, uint32_t acc)
{
	struct ibv_mr *none;
	uint32_t idx = ent_alloc(ctx, &none);	/* the open checked max_entries */

	ent_fill(ctx, idx, mr, acc, 0, 0, 0);
	return idx;
}

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
	int r;

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
	if ((r = odp_setup(ctx, b, chunk, max_mr_size, global_access)) < 0)
		return r;
	b->global_rkey = !!(flags & ODPX_OPEN_GLOBAL_RKEY);
	atomic_store(&ctx->cs->global_rkey, b->global_rkey);
	/* the implicit entries and at least one more (a range's) */
	unsigned nimpl = (*impl != NULL) + (*impl_global != NULL);
	if (ctx->max_entries < nimpl + 1u)
		return odpx_fail(-EINVAL, "max_entries %u: the implicit MRs take %u, and a range"
				 " needs one more", ctx->max_entries, nimpl);
	if (*impl)
		b->implicit_idx = implicit_entry(ctx, *impl, ODPX_ACCESS_LOCAL_WRITE);
	if (*impl_global)
		b->implicit_global_idx = implicit_entry(ctx, *impl_global, global_access);
	*impl = *impl_global = NULL;	/* the entries own them now */
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
	if (ch.mode == ODPX_MODE_IMPLICIT &&
	    (r = verbs_implicit(pd, &a, global_access, &caps, &rq, &ch, &impl, &impl_global)) < 0)
		return r;

	a2 = a;
	a2.comp_mask |= ODPX_ATTR_MODE;
	a2.mode = ch.mode;
	a2.comp_mask &= ~(uint64_t)(ODPX_ATTR_TRANSPORTS | ODPX_ATTR_CHUNK);
	odp = ch.mode == ODPX_MODE_IMPLICIT || ch.mode == ODPX_MODE_EXPLICIT;
	if (!odp && (r = verbs_pin_limits(&a2, max_mr_size)) < 0)
		goto out_impl;
	if ((r = odpx_open_backend(odp ? &verbs_odp_ops : &verbs_pin_ops, &a2, &ctx)) < 0)
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
	ctx_reason_set(ctx, "%.130s%s", ch.reason, odp && (a.flags & ODPX_OPEN_GLOBAL_RKEY) ?
		       "; GLOBAL_RKEY: remote access may exceed the request" : "");
	vbe_of(ctx)->caps = caps;
	if ((r = prereg_open(ctx, &a)) < 0) {
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
