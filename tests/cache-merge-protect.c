// SPDX-License-Identifier: MIT
/*
 * cache-merge-protect: a request for valid memory is never refused because
 * of a cached entry it overlaps.  Cache [0, 1.5L), mprotect [0, L) to
 * PROT_READ (then, on a new buffer, PROT_NONE), then odpx_reg([L, 2L),
 * LOCAL_WRITE): the merge with the cached entry would pin the union, which
 * fails over [0, L); the request alone is valid and must return 0, move
 * the right bytes, and do so again when asked once more.  In each uffd
 * mode (auto, wp, missing).  The union's -EFAULT was returned, every time.
 */
#include "test.h"

#define PG 4096UL
#define L (16 * PG)

static void one(struct odpx_ctx *ctx, int prot, const char *what)
{
	char *p = map_anon(NULL, 2 * L);
	struct odpx_mr *mr;
	int r;

	memset(p, 1, 2 * L);
	CHECK_RC(odpx_reg(ctx, p, L + L / 2, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	CHECK(mprotect(p, L, prot) == 0, "mprotect");
	for (int i = 0; i < 2; i++) {
		r = odpx_reg(ctx, p + L, L, ODPX_ACCESS_LOCAL_WRITE, &mr);
		CHECK(r == 0, "%s %s, try %d: odpx_reg of the writable half: %d (%s)",
		      getenv("ODPX_UFFD_MODE"), what, i, r, odpx_last_reason());
		CHECK(data_check(ctx, mr, p + L, L, 7 + i), "%s: bytes", what);
		CHECK_RC(odpx_dereg(ctx, mr), 0);
	}
	munmap(p, 2 * L);
}

static int one_mode(void *arg)
{
	struct odpx_ctx *ctx = open_pin(0);

	(void)arg;
	one(ctx, PROT_READ, "PROT_READ");
	one(ctx, PROT_NONE, "PROT_NONE");
	CHECK_RC(odpx_close(ctx), 0);
	printf("%s: a request beside pages made read-only or inaccessible is served\n",
	       getenv("ODPX_UFFD_MODE"));
	return 0;
}

int main(void)
{
	return run_each_uffd_mode(one_mode, NULL);
}
