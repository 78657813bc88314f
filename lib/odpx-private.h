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

#endif
