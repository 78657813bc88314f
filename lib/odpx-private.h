/* SPDX-License-Identifier: MIT */
/*
 * odpx-private.h - the one door of odpx's tests and benchmarks into the
 * library, beside the public odpx.h.  Never installed: what it declares is
 * hidden, local to libodpx.a and absent from libodpx.so (tests/symbols.sh),
 * and links only from build/libodpx-internal.a, the raw objects.  The
 * library's own internal.h includes it, so each declaration is written once.
 */
#ifndef ODPX_PRIVATE_H
#define ODPX_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "odpx.h"
#include "../uffd/monitor.h"	/* the monitor, as the caches see it */

/*
 * A context over one of the library's backends: uring_ops is
 * odpx_open_uring's; null_ops pins nothing (the cache alone, for
 * benchmarks).  Same contract as odpx_open_uring.
 */
struct backend_ops;
extern const struct backend_ops uring_ops;
extern const struct backend_ops null_ops;
int odpx_open_backend(const struct backend_ops *ops, const struct odpx_attr *attr,
		      struct odpx_ctx **ctx);

/* The context's engine thread (engine.c). */
void engine_stop(struct odpx_ctx *ctx);
bool engine_running(struct odpx_ctx *ctx);
bool engine_asleep(struct odpx_ctx *ctx);

/*
 * prefetch coalescing, pure (engine.c): sort and merge overlapping and
 * adjacent ranges, no union beyond @max_bytes; return the count.  @first,
 * if not NULL: per output range, the index of its first input once sorted.
 */
struct pf_range { uint64_t start, end; uint32_t flags; };
#define PREFETCH_QLEN 1024	/* the hints a context queues for its engine (a power of 2) */
size_t prefetch_coalesce(struct pf_range *r, size_t n, uint64_t max_bytes, uint32_t *first);

/* mode.c: a synchronous prefetch of the ODP modes */
int mode_prefetch_sync(struct odpx_ctx *ctx, uintptr_t addr, size_t len, uint32_t flags);

/* The mode decision and the verbs backend's pure helpers, mode_verbs_err among them */
#include "mode.h"

/* ctx.c: trial division, for the slab's prime size */
bool odpx_is_prime(uint32_t n);

/*
 * White-box doors (private.c): what a test checks of a context that the
 * public API cannot show, as values, never as the library's structs.
 *
 * odpx_priv_state: the slab of entries (a handle is a pointer to its slot:
 * @slab + slot * @entry_bytes: odpx_priv_slot_of()), the hash's modulus (a
 * prime, ctx.c), the entries on their way to the free list (evicted or
 * dead, not yet unpinned) and the prefetch hints queued for the engine and
 * not yet taken.
 */
struct odpx_priv_state {
	const void *slab;
	size_t entry_bytes;
	uint32_t slots, hmod, releasing;
	uint64_t prefetch_queued;
};
void odpx_priv_state(struct odpx_ctx *ctx, struct odpx_priv_state *st);
static inline uint32_t odpx_priv_slot_of(const struct odpx_priv_state *st, const struct odpx_mr *mr)
{
	return (uint32_t)(((const char *)mr - (const char *)st->slab) / st->entry_bytes);
}
/* The home slot of a registration that starts at @addr's page with @access (index.h) */
uint32_t odpx_priv_home(struct odpx_ctx *ctx, uintptr_t addr, uint32_t access);

/* One slot (internal.h, struct entry): -EINVAL past the slab */
enum { ODPX_PRIV_FREE, ODPX_PRIV_ALIVE, ODPX_PRIV_DEAD };
struct odpx_priv_entry {
	uint32_t state, refs;
	uintptr_t start;
	size_t bytes;
};
int odpx_priv_entry(struct odpx_ctx *ctx, uint32_t slot, struct odpx_priv_entry *e);
/*
 * The release of a DEAD entry in two halves, so that a test can stop
 * between them: unref drops one reference as put_ref() does and returns the
 * count it had (1: the last), without the push that must follow the last;
 * put_dead is that push (cache.c).  @slot must be in the slab.
 */
uint32_t odpx_priv_unref(struct odpx_ctx *ctx, uint32_t slot);
void odpx_priv_put_dead(struct odpx_ctx *ctx, uint32_t slot);

/*
 * The LRU's clock moves by @add misses; @keys, if not 0, is where the keys of
 * an LRU with nothing linked start (reserve.c): a long-running process.
 * Returns the clock before.
 */
uint32_t odpx_priv_clock_add(struct odpx_ctx *ctx, uint32_t add, uint64_t keys);
/* The invalidation lock held: open (@odd) or close a write section of the index's seq */
void odpx_priv_seq_write(struct odpx_ctx *ctx, bool odd);
/* ctx->lock: 0 free (a trylock took it and gave it back); held: its holder's tid, or -1 */
int odpx_priv_lock_owner(struct odpx_ctx *ctx);
/*
 * A backend that is @base (uring_ops, null_ops) but calls @h->pin after each
 * of its pins, whatever it returned, and @h->unpin after each unpin (either
 * may be NULL), in the thread that pins or unpins: a test holds a miss in
 * its pin, invalidates what it pinned, or counts what is pinned.  One per
 * process: a second call replaces the first, under any context open on it.
 */
struct odpx_priv_hooks {
	void (*pin)(uint32_t slot, uintptr_t start, size_t len);
	void (*unpin)(uint32_t slot);
};
const struct backend_ops *odpx_priv_hooked(const struct backend_ops *base,
					   const struct odpx_priv_hooks *h);

#endif
