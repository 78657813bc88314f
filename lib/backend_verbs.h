/* SPDX-License-Identifier: MIT */
/*
 * backend_verbs.h - the verbs backend's state, shared by backend_verbs.c
 * (open, modes, registrations; its header comment has the locking) and
 * advise_verbs.c (prefetch through ibv_advise_mr).
 */
#ifndef ODPX_BACKEND_VERBS_H
#define ODPX_BACKEND_VERBS_H

#include <infiniband/verbs.h>

#include "internal.h"
#include "mode.h"

#define CHUNK_DEFAULT_BYTES (64UL << 20)
#define CHUNK_MIN_BYTES (2UL << 20)
#define CHUNK_MAX_BYTES (2UL << 30)	/* an entry's span holds < 4 GiB */

struct vbe {
	struct ibv_pd *pd;
	struct ibv_mr **mr;		/* by entry index */
	struct ibv_mr *anchor;

	/* ODP modes */
	pthread_mutex_t lock;
	unsigned chunk_shift;
	bool chunks;			/* false: the device cannot register one */
	uint64_t max_reg_bytes;
	uint32_t global_access;		/* of ODPX_OPEN_GLOBAL_RKEY's MRs, else 0 */
	uint32_t implicit_idx, implicit_global_idx;
	uint32_t hand;			/* where the next eviction looks first */
	struct mode_caps caps;		/* the device, for odpx_query() */
};

static inline struct vbe *vbe_of(struct odpx_ctx *ctx) { return ctx->be_priv; }

/*
 * backend_verbs.c: chunk_get() - a reference on the entry of @a's chunk for
 * @acc, registered on first use unless @try: its index, or NIL and *err;
 * *how is 0 for a plain hit.  Released with ent_put().
 */
uint32_t chunk_get(struct odpx_ctx *ctx, uintptr_t a, uint32_t acc, bool try, int *err, int *how);
void ent_put(struct odpx_ctx *ctx, uint32_t idx);

/*
 * verbs_selftest.c: whether @pd's device moves the right bytes through an ODP
 * MR at an offset inside a page, into @c->odp_bad and @c->odp_check; once per
 * device and process.
 */
void verbs_odp_selftest(struct ibv_pd *pd, struct mode_caps *c);

/* advise_verbs.c */
int odp_advise(struct odpx_ctx *ctx, const struct pf_range *r, size_t n, bool flush);

#endif
