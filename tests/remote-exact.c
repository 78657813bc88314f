// SPDX-License-Identifier: MIT
/*
 * remote-exact: a registration with remote access covers exactly the pages
 * asked for, in pin mode too.  A cached entry that merely covers the request
 * (or a merge with a neighbour) would hand out an rkey over memory the caller
 * never registered.  Local-only requests keep their interior hits and merges.
 * Runs on the internal backend that pins nothing but keeps the index split by
 * access, as the verbs backend does (the uring backend ignores access).
 * Exact ranges stay cached however long their hash chain (long_chain()).
 * ODPX_OPEN_REMOTE_UNCACHED pins each remote request for itself, unpinned by
 * its release (remote_uncached()).
 */
#include "test.h"
#include "odpx-private.h"	/* null_ops, the hash's modulus and home slots */

#define PG 4096
#define R (ODPX_ACCESS_LOCAL_WRITE | ODPX_ACCESS_REMOTE_WRITE | ODPX_ACCESS_REMOTE_READ)

static struct odpx_ctx *ctx;

static struct odpx_mr *reg(void *p, size_t len, uint32_t acc)
{
	struct odpx_mr *mr;

	CHECK_RC(odpx_reg(ctx, p, len, acc, &mr), 0);
	return mr;
}

static void span_is(struct odpx_mr *mr, void *p, size_t len, const char *what)
{
	CHECK(odpx_mr_addr(mr) == p && odpx_mr_length(mr) == len,
	      "%s: registration %p+%zu, want exactly %p+%zu", what, odpx_mr_addr(mr),
	      odpx_mr_length(mr), p, len);
}

/*
 * 120 exact ranges whose starts share one hash bucket (a stride of the hash's
 * prime in pages), released, then registered again: every one is a hit.
 * Keys are start pages modulo 1 TiB (index.h): past a multiple of 1 TiB the
 * stride lands in another bucket, so the pages are the longest run of one
 * bucket in twice the span needed, which at most one such boundary cuts.  The
 * lookup gave up after MAX_STEPS (96) links without trying the tree, and each
 * miss superseded its cached twin (119 of 120 missed).
 */
static void long_chain(void)
{
	enum { N_REG = 120 };
	struct odpx_priv_state ps;
	odpx_priv_state(ctx, &ps);
	size_t stride = (size_t)ps.hmod * PG, span = stride * 2 * N_REG, first = 0, best = 0;
	char *base = mmap(NULL, span, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0), *pg[N_REG];
	unsigned n = 0;

	CHECK(base != MAP_FAILED, "mmap %zu: %s", span, strerror(errno));
	for (size_t off = 0, run = 0; off < span; off += stride) {
		if (off && odpx_priv_home(ctx, (uintptr_t)base + off, R) !=
			   odpx_priv_home(ctx, (uintptr_t)base + off - stride, R))
			run = off;
		if ((off - run) / stride + 1 > best) {
			best = (off - run) / stride + 1;
			first = run;
		}
	}
	for (size_t off = first; n < N_REG && n < best; off += stride)
		pg[n++] = base + off;
	CHECK(n == N_REG, "only %u pages in one bucket", n);
	for (unsigned i = 0; i < N_REG; i++)
		CHECK_RC(odpx_dereg(ctx, reg(pg[i], PG, R)), 0);
	struct odpx_stats st0 = stats_of(ctx), st;
	for (unsigned i = 0; i < N_REG; i++) {
		struct odpx_mr *mr = reg(pg[i], PG, R);
		span_is(mr, pg[i], PG, "long chain");
		CHECK_RC(odpx_dereg(ctx, mr), 0);
	}
	st = stats_of(ctx);
	CHECK(st.misses == st0.misses && st.hits == st0.hits + N_REG,
	      "%u exact ranges in one hash chain again: %lu hits, %lu misses", N_REG,
	      (unsigned long)(st.hits - st0.hits), (unsigned long)(st.misses - st0.misses));
	munmap(base, span);
}

/*
 * ODPX_OPEN_REMOTE_UNCACHED: each remote request is pinned for itself and
 * unpinned by its release (nothing left pinned), while local-only requests
 * stay cached.
 */
static void remote_uncached(char *b)
{
	struct odpx_attr attr = { .comp_mask = ODPX_ATTR_FLAGS, .flags = ODPX_OPEN_REMOTE_UNCACHED };
	struct odpx_mr *r1, *r2, *l;
	struct odpx_stats st;

	CHECK_RC(odpx_open_backend(&null_ops, &attr, &ctx), 0);
	r1 = reg(b, 2 * PG, R);
	r2 = reg(b, 2 * PG, R);
	span_is(r1, b, 2 * PG, "uncached remote");
	CHECK(r1 != r2, "two uncached remote requests share one registration");
	l = reg(b, 2 * PG, ODPX_ACCESS_LOCAL_WRITE);
	CHECK_RC(odpx_dereg(ctx, r1), 0);
	CHECK_RC(odpx_dereg(ctx, r2), 0);
	CHECK_RC(odpx_dereg(ctx, l), 0);
	st = stats_of(ctx);
	CHECK(st.direct_regs == 2 && st.unpins == 2 && st.entries == 1 && st.pinned_bytes == 2 * PG,
	      "uncached remote: direct_regs %lu unpins %lu entries %lu pinned %lu, want 2 2 1 %d",
	      (unsigned long)st.direct_regs, (unsigned long)st.unpins, (unsigned long)st.entries,
	      (unsigned long)st.pinned_bytes, 2 * PG);
	CHECK_RC(odpx_close(ctx), 0);
}

int main(void)
{
	char *b = map_anon(NULL, 16 * PG);
	struct odpx_mr *big, *mid, *a, *c, *l1, *l2;
	struct odpx_stats st0;

	CHECK_RC(odpx_open_backend(&null_ops, NULL, &ctx), 0);
	memset(b, 1, 16 * PG);

	/* a covering remote entry is not handed out for a sub-range */
	big = reg(b, 8 * PG, R);
	span_is(big, b, 8 * PG, "remote 8 pages");
	mid = reg(b + PG, 2 * PG, R);
	span_is(mid, b + PG, 2 * PG, "remote sub-range of a cached remote entry");
	span_is(big, b, 8 * PG, "the holder of the superseded entry");
	CHECK_RC(odpx_dereg(ctx, mid), 0);
	CHECK_RC(odpx_dereg(ctx, big), 0);

	/* the same exact range again is a hit */
	mid = reg(b + PG, 2 * PG, R);
	st0 = stats_of(ctx);
	CHECK_RC(odpx_dereg(ctx, mid), 0);
	mid = reg(b + PG + 100, 2 * PG - 200, R);	/* same pages, unaligned bytes */
	CHECK(stats_of(ctx).hits == st0.hits + 1, "the same pages again missed");
	span_is(mid, b + PG, 2 * PG, "remote, same pages");
	CHECK_RC(odpx_dereg(ctx, mid), 0);

	/* overlapping remote requests are never merged */
	st0 = stats_of(ctx);
	a = reg(b + 10 * PG, 2 * PG, R);
	c = reg(b + 11 * PG, 2 * PG, R);
	span_is(c, b + 11 * PG, 2 * PG, "overlapping remote request");
	CHECK(stats_of(ctx).merges == st0.merges, "remote entries were merged");
	CHECK_RC(odpx_dereg(ctx, a), 0);
	CHECK_RC(odpx_dereg(ctx, c), 0);

	/* local-only: interior hits and merges as before */
	l1 = reg(b, 8 * PG, ODPX_ACCESS_LOCAL_WRITE);
	st0 = stats_of(ctx);
	l2 = reg(b + PG, 2 * PG, ODPX_ACCESS_LOCAL_WRITE);
	CHECK(stats_of(ctx).hits == st0.hits + 1, "local interior request missed");
	span_is(l2, b, 8 * PG, "local interior hit");
	CHECK_RC(odpx_dereg(ctx, l2), 0);
	CHECK_RC(odpx_dereg(ctx, l1), 0);

	long_chain();
	CHECK_RC(odpx_close(ctx), 0);
	remote_uncached(b);
	return 0;
}
