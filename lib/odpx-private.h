/* SPDX-License-Identifier: MIT */
/*
 * odpx-private.h - the one door of tests and benchmarks into the library.
 * Never installed; what it declares is hidden (tests/symbols.sh) and links
 * from build/libodpx-internal.a only.  internal.h includes it.
 */
#ifndef ODPX_PRIVATE_H
#define ODPX_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "odpx.h"
#include "../uffd/monitor.h"	/* the monitor, as the caches see it */

/* odpx_open_uring() over a backend: uring_ops, or null_ops, which pins nothing */
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
 * Sort and merge overlapping and adjacent ranges, no union beyond
 * @max_bytes; the count.  @first: per output range, its first input's index.
 */
struct pf_range { uint64_t start, end; uint32_t flags; };
#define PREFETCH_QLEN 1024	/* the hints a context queues for its engine (a power of 2) */
size_t prefetch_coalesce(struct pf_range *r, size_t n, uint64_t max_bytes, uint32_t *first);

/* mode.c: a synchronous prefetch of the ODP modes */
int mode_prefetch_sync(struct odpx_ctx *ctx, uintptr_t addr, size_t len, uint32_t flags);

#include "mode.h"		/* the mode decision, the verbs backend's pure helpers */

/* ctx.c: trial division, for the slab's prime size */
bool odpx_is_prime(uint32_t n);

/*
 * White-box doors (private.c): a context's internals as values.
 * odpx_priv_state: the slab (a handle points at its slot), the hash's
 * modulus, the entries evicted or dead and not yet unpinned, the hints
 * queued for the engine.
 */
struct odpx_priv_state {
	const void *slab;
	size_t entry_bytes;
	uint32_t slots, hmod, releasing;
	uint64_t prefetch_queued;
};
void odpx_priv_state(struct odpx_ctx *ctx, struct odpx_priv_state *st);
/* The entry behind a held handle: itself, or the one its hazard slot holds (mr_entry()) */
const void *odpx_priv_entry_of(const struct odpx_mr *mr);
static inline uint32_t odpx_priv_slot_of(const struct odpx_priv_state *st, const struct odpx_mr *mr)
{
	return (uint32_t)(((const char *)odpx_priv_entry_of(mr) - (const char *)st->slab) /
			  st->entry_bytes);
}
/* A hit held in a hazard slot: its handle's tag, and how many slots a thread has (internal.h) */
#define ODPX_PRIV_HZ_TAG 1UL
#define ODPX_PRIV_HZ_SLOTS 8
/* Do two held handles stand for the same entry? */
static inline bool odpx_priv_same(struct odpx_ctx *ctx, const struct odpx_mr *a,
				  const struct odpx_mr *b)
{
	struct odpx_priv_state st;

	odpx_priv_state(ctx, &st);
	return odpx_priv_slot_of(&st, a) == odpx_priv_slot_of(&st, b);
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
 * The release of a DEAD entry in two halves a test can stop between: unref
 * drops a reference and returns the count it had; put_dead is the push
 * that must follow the last (cache.c).
 */
uint32_t odpx_priv_unref(struct odpx_ctx *ctx, uint32_t slot);
void odpx_priv_put_dead(struct odpx_ctx *ctx, uint32_t slot);

/* The LRU's clock moves by @add misses; @keys, if not 0: the empty LRU's first key */
uint32_t odpx_priv_clock_add(struct odpx_ctx *ctx, uint32_t add, uint64_t keys);
/* The invalidation lock held: open (@odd) or close a write section of the index's seq */
void odpx_priv_seq_write(struct odpx_ctx *ctx, bool odd);
/* The calling thread's counter shard: its index, -1 the shared overflow, -2 none yet; how many, and lent */
int odpx_priv_shard(unsigned *nshards, unsigned *lent);
/* ctx->lock: 0 free (a trylock took it and gave it back); held: its holder's tid, or -1 */
int odpx_priv_lock_owner(struct odpx_ctx *ctx);
/*
 * @base, calling @h->pin after each pin and @h->unpin after each unpin
 * (either may be NULL) in the thread that does it.  One per process: a
 * second call replaces the first.
 */
struct odpx_priv_hooks {
	void (*pin)(uint32_t slot, uintptr_t start, size_t len);
	void (*unpin)(uint32_t slot);
};
const struct backend_ops *odpx_priv_hooked(const struct backend_ops *base,
					   const struct odpx_priv_hooks *h);

#endif
