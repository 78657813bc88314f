// SPDX-License-Identifier: MIT
/*
 * cache-readonly: what odpx.h (odpx_reg) guarantees for memory whose
 * protection mprotect() reduced after it was cached, in each uffd mode
 * (auto, wp, missing):
 *   - a request over read-only pages never cached: -EFAULT;
 *   - cached with LOCAL_WRITE, made PROT_READ, odpx_invalidate()d, asked
 *     for again with LOCAL_WRITE: -EFAULT, the entry gone;
 *   - a write request beside it that would merge with a cached entry over
 *     pages made read-only: served (the request alone), the right bytes;
 *   - made writable again: the same request returns 0, the right bytes.
 * A hit with no odpx_invalidate() in between is not checked (odpx.h).
 */
#include "test.h"

#define PG 4096UL
#define L (16 * PG)

static int one_mode(void *arg)
{
	const char *mode = getenv("ODPX_UFFD_MODE");
	struct odpx_ctx *ctx = open_pin(0);
	char *p = map_anon(NULL, 3 * L);
	struct odpx_mr *mr;
	int r;

	(void)arg;
	memset(p, 1, 3 * L);
	CHECK(mprotect(p + 2 * L, L, PROT_READ) == 0, "mprotect");
	r = odpx_reg(ctx, p + 2 * L, L, ODPX_ACCESS_LOCAL_WRITE, &mr);
	CHECK(r == -EFAULT, "%s: read-only, never cached: %d, want -EFAULT", mode, r);

	CHECK_RC(odpx_reg(ctx, p, L + L / 2, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	CHECK(mprotect(p, L, PROT_READ) == 0, "mprotect");
	CHECK_RC(odpx_invalidate(ctx, p, L), 1);
	r = odpx_reg(ctx, p, L, ODPX_ACCESS_LOCAL_WRITE, &mr);
	CHECK(r == -EFAULT, "%s: read-only after odpx_invalidate: %d, want -EFAULT", mode, r);

	CHECK_RC(odpx_reg(ctx, p, L + L / 2, ODPX_ACCESS_LOCAL_WRITE, &mr), -EFAULT);
	CHECK(mprotect(p, L, PROT_READ | PROT_WRITE) == 0, "mprotect");
	CHECK_RC(odpx_reg(ctx, p, L + L / 2, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	CHECK(mprotect(p, L, PROT_READ) == 0, "mprotect");
	CHECK_RC(odpx_reg(ctx, p + L, L, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
	CHECK(data_check(ctx, mr, p + L, L, 4), "%s: bytes beside the read-only pages", mode);
	CHECK_RC(odpx_dereg(ctx, mr), 0);

	CHECK(mprotect(p, 3 * L, PROT_READ | PROT_WRITE) == 0, "mprotect");
	CHECK_RC(odpx_reg(ctx, p, L, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
	CHECK(data_check(ctx, mr, p, L, 3), "%s: bytes", mode);
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	CHECK_RC(odpx_close(ctx), 0);
	munmap(p, 3 * L);
	printf("%s: read-only memory: -EFAULT on a miss and after odpx_invalidate; merges stay"
	       " beside it\n", mode);
	return 0;
}

int main(void)
{
	return run_each_uffd_mode(one_mode, NULL);
}
