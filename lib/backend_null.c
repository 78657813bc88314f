// SPDX-License-Identifier: MIT
/*
 * backend_null.c - pins nothing: benchmarks measure the cache alone with it
 * (as UCX's rcache is measured), beyond the uring backend's slots.
 */
#include "internal.h"

static int null_pin(struct odpx_ctx *ctx, uint32_t idx, uintptr_t start, size_t len,
		    uint32_t access, uint32_t *lkey, uint32_t *rkey)
{
	(void)ctx, (void)start, (void)len, (void)access;
	*lkey = *rkey = idx;
	return 0;
}

static void null_unpin(struct odpx_ctx *ctx, uint32_t idx) { (void)ctx, (void)idx; }
static void null_close(struct odpx_ctx *ctx) { (void)ctx; }

const struct backend_ops null_ops = {
	.name = "null",
	.id = ODPX_BACKEND_RESERVED,
	.pin = null_pin,
	.unpin = null_unpin,
	.close = null_close,
};
