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
#define VA_BITS 47

enum { CLS_READ = 0, CLS_WRITE, CLS_GLOBAL, NCLS };	/* chunk classes */

struct vbe {
	struct ibv_pd *pd;
	bool global_rkey;		/* ODPX_OPEN_GLOBAL_RKEY */
	struct ibv_mr **mr;		/* by entry index */
	struct ibv_mr *anchor;

	/* ODP modes */
	pthread_mutex_t lock;
	unsigned chunk_shift;
	uint64_t nchunks, max_reg_bytes;
	_Atomic uint32_t *ctab[NCLS];	/* entry index + 1 per chunk, 0: none */
	size_t ctab_bytes;
	uint32_t cls_access[NCLS];	/* the MR access of each chunk class */
	uint32_t implicit_idx, implicit_global_idx;
	uint32_t hand;			/* where the next eviction looks first */
	struct mode_caps caps;		/* the device, for odpx_query() */
};

static inline struct vbe *vbe_of(struct odpx_ctx *ctx) { return ctx->be_priv; }

/*
 * backend_verbs.c: chunk_get() - a reference on chunk @c's entry of class
 * @cls, registered on first use unless @try: its index, or NIL and *err;
 * *slow set when it was not a plain hit.  Released with ent_put().
 */
#define CHUNK_GET_TRIES 8
uint32_t chunk_get(struct odpx_ctx *ctx, unsigned cls, uint64_t c, bool try, int *err, int *slow);
void ent_put(struct odpx_ctx *ctx, uint32_t idx);

/* advise_verbs.c */
int odp_advise(struct odpx_ctx *ctx, const struct pf_range *r, size_t n, bool flush);

#endif
