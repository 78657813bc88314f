// SPDX-License-Identifier: MIT
/*
 * cache-readonly: what odpx_reg(3) guarantees for memory whose
 * protection mprotect() reduced after it was cached, in each uffd mode
 * (auto, wp, missing):
 *   - a request over read-only pages never cached: -EFAULT;
 *   - cached with LOCAL_WRITE, made PROT_READ, odpx_invalidate()d, asked
 *     for again with LOCAL_WRITE: -EFAULT, the entry gone;
 *   - a write request beside it that would merge with a cached entry over
 *     pages made read-only: served (the request alone), the right bytes;
 *   - made writable again: the same request returns 0, the right bytes;
 *   - opened ODPX_OPEN_PROT_CHECK (or with ODPX_CHECK_PROT=1): a hit, cached
 *     with LOCAL_WRITE, made PROT_READ, asked for again with no
 *     odpx_invalidate(): -EFAULT from odpx_reg() (the hit asks the kernel),
 *     -EAGAIN from ODPX_REG_TRY; writable again: 0, the right bytes; a hit
 *     made PROT_NONE, asked to read: -EFAULT;
 *   - opened with the defaults (and ODPX_OPEN_PROT_CHECK with
 *     ODPX_CHECK_PROT=0): that hit returns 0 (odpx_reg(3) says so), and
 *     -EFAULT once odpx_invalidate()d.
 */
#include "test.h"

#define PG 4096UL
#define L (16 * PG)

/* register [p, p + L) twice: the second time a hit (the hit count grows) */
static bool cached(struct odpx_ctx *ctx, char *p, uint32_t acc)
{
	struct odpx_stats a, b;
	struct odpx_mr *mr;

	for (int i = 0; i < 2; i++) {
		if (i && odpx_stats_read(ctx, &a, sizeof(a)) < 0)
			return false;
		if (odpx_reg(ctx, p, L, acc, &mr) || odpx_dereg(ctx, mr))
			return false;
	}
	return odpx_stats_read(ctx, &b, sizeof(b)) >= 0 && b.hits + b.hits_slow > a.hits + a.hits_slow;
}

static int one_mode(void *arg)
{
	const char *mode = getenv("ODPX_UFFD_MODE");
	struct odpx_ctx *ctx = open_pin(0);
	char *p = map_anon(NULL, 3 * L);
	char *q = map_anon(NULL, 6 * L);	/* mapped now: no invalidation below reaches it */
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

	/*
	 * Hits with no odpx_invalidate() after the mprotect(), on memory of its
	 * own (q): a range invalidated just now is pinned direct, not cached, for
	 * a while (the REMOVE quarantine, uffd/reader.c).  Each range is made a
	 * hit first (the hit count says so), then its protection is reduced.
	 */
	memset(q, 2, 2 * L);
	ctx = open_pin(ODPX_OPEN_PROT_CHECK);
	CHECK(cached(ctx, q, ODPX_ACCESS_LOCAL_WRITE), "%s: [q, q + L) not a hit", mode);
	CHECK(mprotect(q, L, PROT_READ) == 0, "mprotect");
	r = odpx_reg_ex(ctx, q, L, ODPX_ACCESS_LOCAL_WRITE, ODPX_REG_TRY, &mr);
	CHECK(r == -EAGAIN, "%s: TRY of a cached range made read-only: %d, want -EAGAIN", mode, r);
	r = odpx_reg(ctx, q, L, ODPX_ACCESS_LOCAL_WRITE, &mr);
	CHECK(r == -EFAULT, "%s: cached, made read-only, asked to write: %d, want -EFAULT", mode, r);
	CHECK(mprotect(q, L, PROT_READ | PROT_WRITE) == 0, "mprotect");
	CHECK_RC(odpx_reg(ctx, q, L, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
	CHECK(data_check(ctx, mr, q, L, 5), "%s: bytes after the protection came back", mode);
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	CHECK(cached(ctx, q + L, 0), "%s: [q + L, q + 2L) not a hit", mode);
	CHECK(mprotect(q + L, L, PROT_NONE) == 0, "mprotect");
	r = odpx_reg(ctx, q + L, L, 0, &mr);
	CHECK(r == -EFAULT, "%s: cached, made PROT_NONE, asked to read: %d, want -EFAULT", mode, r);
	CHECK_RC(odpx_close(ctx), 0);

	/* the environment asks for the check as the flag does */
	q += 2 * L;
	memset(q, 3, 2 * L);	/* [q + L, q + 2L) below */
	CHECK(setenv("ODPX_CHECK_PROT", "1", 1) == 0, "setenv");
	ctx = open_pin(0);
	CHECK(unsetenv("ODPX_CHECK_PROT") == 0, "unsetenv");
	CHECK(cached(ctx, q + L, ODPX_ACCESS_LOCAL_WRITE), "%s: [q + L, q + 2L) not a hit", mode);
	CHECK(mprotect(q + L, L, PROT_READ) == 0, "mprotect");
	r = odpx_reg(ctx, q + L, L, ODPX_ACCESS_LOCAL_WRITE, &mr);
	CHECK(r == -EFAULT, "%s: ODPX_CHECK_PROT=1, cached, made read-only: %d, want -EFAULT",
	      mode, r);
	CHECK_RC(odpx_close(ctx), 0);

	/* the library's default, and the flag turned off by the environment: the
	 * documented contract, served until odpx_invalidate() */
	for (int i = 0; i < 2; i++) {
		char *m = q + (2 + i) * L;	/* never invalidated: not quarantined */

		memset(m, 4, L);
		if (i)
			CHECK(setenv("ODPX_CHECK_PROT", "0", 1) == 0, "setenv");
		ctx = open_pin(i ? ODPX_OPEN_PROT_CHECK : 0);
		CHECK(unsetenv("ODPX_CHECK_PROT") == 0, "unsetenv");
		CHECK(cached(ctx, m, ODPX_ACCESS_LOCAL_WRITE), "%s: [m, m + L) not a hit", mode);
		CHECK(mprotect(m, L, PROT_READ) == 0, "mprotect");
		CHECK_RC(odpx_reg(ctx, m, L, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
		CHECK_RC(odpx_dereg(ctx, mr), 0);
		CHECK_RC(odpx_invalidate(ctx, m, L), 1);
		CHECK_RC(odpx_reg(ctx, m, L, ODPX_ACCESS_LOCAL_WRITE, &mr), -EFAULT);
		CHECK_RC(odpx_close(ctx), 0);
	}
	munmap(q - 2 * L, 6 * L);
	printf("%s: read-only memory: -EFAULT on a miss, on a hit and after odpx_invalidate;"
	       " merges stay beside it\n", mode);
	return 0;
}

int main(void)
{
	return run_each_uffd_mode(one_mode, NULL);
}
