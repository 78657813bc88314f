// SPDX-License-Identifier: MIT
/*
 * dev-verbs-hybrid: hybrid mode over RC loopback on rxe.
 * - With a pinned budget of BUDGET_BUFS buffers, NBUFS buffers registered and held at once:
 *   the first BUDGET_BUFS are served pinned and the rest from ODP MRs (the counters say
 *   which), and an RDMA WRITE into each, through its rkey, lands byte for byte.
 * - The invalidation guarantee of the pinned part: a pinned buffer released to the cache,
 *   its mapping changed (munmap + mmap, madvise(DONTNEED), mremap away and a new mapping),
 *   registered again and written: the bytes land in the new pages.  The same rounds on a
 *   context opened ODPX_OPEN_UNSAFE_NO_MONITOR must leave them stale, which shows the check
 *   can fail.
 * - What odpx_query() and odpx_prereg_add() see of it: the pinned part's budget, pins and
 *   pre-registered regions; a pre-registered buffer is served pinned past the budget's
 *   other users and written through its rkey.
 */
#include "dev-verbs-util.h"

#define LEN (16 * 4096)
#define NBUFS 8
#define BUDGET_BUFS 3	/* the source buffer takes one more pinned slot */

static struct odpx_ctx *open_hybrid(struct dev *d, uint32_t flags, uint64_t budget)
{
	struct odpx_attr a = {
		.comp_mask = ODPX_ATTR_MODE | ODPX_ATTR_FLAGS | ODPX_ATTR_LIMITS,
		.mode = ODPX_MODE_HYBRID, .flags = flags,
		.limits = { .max_pinned_bytes = budget },
	};
	struct odpx_ctx *ctx;
	const char *why;
	enum odpx_mode m;
	int r = odpx_open_verbs(d->pd, &a, &ctx);

	if (r)
		dev_fail("odpx_open_verbs(hybrid): %s: %s", strerror(-r), odpx_last_reason());
	odpx_mode_get(ctx, &m, &why);
	if (m != ODPX_MODE_HYBRID)
		dev_fail("asked for hybrid, got %s", odpx_mode_str(m));
	printf("context: mode %s (%s)\n", odpx_mode_str(m), why);
	return ctx;
}

/* RDMA WRITE a fresh pattern from @src into @dst through @dmr; true if every byte landed. */
static bool write_check(struct dev *d, struct odpx_mr *smr, unsigned char *src,
			struct odpx_mr *dmr, unsigned char *dst, unsigned seed, const char *what)
{
	static unsigned char want[LEN];

	dev_fill(src, LEN, seed);
	memcpy(want, src, LEN);
	if (dv_rdma(d, IBV_WR_RDMA_WRITE, smr, src, LEN, dst, odpx_mr_rkey(dmr)))
		dev_fail("%s: RDMA WRITE failed", what);
	return dev_same(what, dst, want, LEN);
}

static void budget(struct dev *d)
{
	struct odpx_ctx *ctx = open_hybrid(d, 0, (BUDGET_BUFS + 1) * LEN);
	unsigned char *src = dv_map(LEN), *dst[NBUFS];
	struct odpx_mr *smr = dv_reg(ctx, src, LEN, ACC_LW), *dmr[NBUFS];
	struct odpx_stats st;

	for (int i = 0; i < NBUFS; i++) {
		dst[i] = dv_map(LEN);
		memset(dst[i], 0, LEN);
		dmr[i] = dv_reg(ctx, dst[i], LEN, ACC_REMOTE);
		st = dv_stats(ctx);
		printf("buffer %d: pinned %llu, ODP %llu, odp_bytes %llu\n", i,
		       (unsigned long long)st.hybrid_pinned, (unsigned long long)st.hybrid_odp,
		       (unsigned long long)st.odp_bytes);
		if (st.hybrid_pinned != (uint64_t)(i < BUDGET_BUFS ? i + 2 : BUDGET_BUFS + 1) ||
		    st.hybrid_odp != (uint64_t)(i < BUDGET_BUFS ? 0 : i - BUDGET_BUFS + 1))
			dev_fail("buffer %d: pinned %llu, ODP %llu: want pinned while the budget "
				 "of %d buffers holds, ODP after", i,
				 (unsigned long long)st.hybrid_pinned,
				 (unsigned long long)st.hybrid_odp, BUDGET_BUFS + 1);
	}
	if (st.odp_bytes != (uint64_t)(NBUFS - BUDGET_BUFS) * LEN)
		dev_fail("odp_bytes %llu, want %d", (unsigned long long)st.odp_bytes,
			 (NBUFS - BUDGET_BUFS) * LEN);
	for (int i = 0; i < NBUFS; i++) {
		char what[64];

		snprintf(what, sizeof(what), "buffer %d (%s)", i, i < BUDGET_BUFS ? "pinned" : "ODP");
		if (!write_check(d, smr, src, dmr[i], dst[i], 70 + i, what))
			dev_fail("%s: data mismatch", what);
	}
	printf("hybrid: %d pinned and %d ODP buffers written and verified\n", BUDGET_BUFS,
	       NBUFS - BUDGET_BUFS);
	/* the handles of both parts go back through odpx_dereg(); a second release fails */
	for (int i = 0; i < NBUFS; i++)
		dv_dereg(ctx, dmr[i]);
	if (odpx_dereg(ctx, dmr[0]) != -EINVAL || odpx_dereg(ctx, dmr[NBUFS - 1]) != -EINVAL)
		dev_fail("a handle released twice was accepted");
	dv_dereg(ctx, smr);
	for (int i = 0; i < NBUFS; i++)
		munmap(dst[i], LEN);
	munmap(src, LEN);
	odpx_close(ctx);
}

/* DONTNEED last: a range DONTNEED'd in the last 100 ms is not cached, and the next round's
 * buffers often reuse its addresses */
enum change { MUNMAP_MMAP, MREMAP_MOVE, DONTNEED, NCHANGE };
static const char *const change_name[] = { "munmap+mmap", "mremap move", "madvise(DONTNEED)" };
static const enum dv_change change_of[] = { DV_MUNMAP_MMAP, DV_MREMAP_MOVE, DV_DONTNEED };

/* One round on a pinned buffer: true when the write after the change reached the new pages. */
static bool round_pinned(struct dev *d, struct odpx_ctx *ctx, enum change c, unsigned seed)
{
	unsigned char *src = dv_map(LEN), *dst = dv_map(LEN);
	struct odpx_mr *smr = dv_reg(ctx, src, LEN, ACC_LW), *dmr;
	uint64_t pinned = dv_stats(ctx).hybrid_pinned;
	struct odpx_stats st;
	bool ok;

	memset(dst, 0, LEN);
	dmr = dv_reg(ctx, dst, LEN, ACC_REMOTE);
	if (dv_stats(ctx).hybrid_pinned == pinned)
		dev_fail("%s: the buffer was not served pinned", change_name[c]);
	if (!write_check(d, smr, src, dmr, dst, seed, "before the change"))
		dev_fail("%s: the first write missed", change_name[c]);
	dv_dereg(ctx, dmr);	/* unused, still cached */
	dv_change_mapping(dst, LEN, change_of[c]);
	st = dv_stats(ctx);
	dmr = dv_reg(ctx, dst, LEN, ACC_REMOTE);
	ok = write_check(d, smr, src, dmr, dst, seed + 1, change_name[c]);
	printf("%s: registered again: pinned +%llu, ODP +%llu, hits +%llu\n", change_name[c],
	       (unsigned long long)(dv_stats(ctx).hybrid_pinned - st.hybrid_pinned),
	       (unsigned long long)(dv_stats(ctx).hybrid_odp - st.hybrid_odp),
	       (unsigned long long)(dv_stats(ctx).hits - st.hits));
	dv_dereg(ctx, dmr);
	dv_dereg(ctx, smr);
	munmap(src, LEN);
	munmap(dst, LEN);
	return ok;
}

static void invalidation(struct dev *d)
{
	/* room for every round's buffers: released ones stay pinned, unused, until pressure */
	struct odpx_ctx *ctx = open_hybrid(d, 0, 4 * NCHANGE * LEN);
	struct odpx_stats st;

	for (int c = 0; c < NCHANGE; c++) {
		if (!round_pinned(d, ctx, c, 80 + 2 * c))
			dev_fail("hybrid, %s: the write through odpx missed the new pages",
				 change_name[c]);
		printf("hybrid, %s: the data landed in the new pages\n", change_name[c]);
	}
	st = dv_stats(ctx);
	printf("hybrid: pinned %llu, ODP %llu\n", (unsigned long long)st.hybrid_pinned,
	       (unsigned long long)st.hybrid_odp);
	odpx_close(ctx);
	/* the control: no monitor on the pinned part, the cache hands back the old MR */
	for (int c = 0; c < NCHANGE; c++) {
		ctx = open_hybrid(d, ODPX_OPEN_UNSAFE_NO_MONITOR, 4 * LEN);
		if (round_pinned(d, ctx, c, 90 + 2 * c))
			dev_fail("no monitor, %s: the data reached the new pages: the check cannot "
				 "tell a stale registration", change_name[c]);
		printf("no monitor, %s: stale registration reproduced\n", change_name[c]);
		odpx_close(ctx);
	}
}

static struct odpx_caps query(struct odpx_ctx *ctx)
{
	struct odpx_caps c = { .comp_mask = ODPX_QUERY_LIMITS | ODPX_QUERY_USAGE | ODPX_QUERY_WATCH };
	int r = odpx_query(ctx, &c);

	if (r)
		dev_fail("odpx_query: %s", strerror(-r));
	if (!(c.comp_mask & ODPX_QUERY_WATCH))
		dev_fail("odpx_query: no WATCH: the pinned part's monitor is attached after a pin");
	return c;
}

static void query_prereg(struct dev *d)
{
	struct odpx_ctx *ctx = open_hybrid(d, 0, 2 * LEN);
	unsigned char *src = dv_map(LEN), *pre = dv_map(LEN), *other = dv_map(LEN);
	struct odpx_mr *smr = dv_reg(ctx, src, LEN, ACC_LW), *pmr, *omr;
	struct odpx_caps c = query(ctx);
	uint64_t pinned0;

	printf("query: max_pinned_bytes %llu, pinned %llu, entries %llu\n",
	       (unsigned long long)c.limits.max_pinned_bytes, (unsigned long long)c.pinned_bytes,
	       (unsigned long long)c.entries);
	if (c.limits.max_pinned_bytes != 2 * LEN || c.pinned_bytes != LEN)
		dev_fail("odpx_query: max_pinned_bytes %llu and pinned_bytes %llu, want %d and %d "
			 "(the source buffer, pinned)", (unsigned long long)c.limits.max_pinned_bytes,
			 (unsigned long long)c.pinned_bytes, 2 * LEN, LEN);
	memset(pre, 0, LEN);
	if (odpx_prereg_add(ctx, pre, LEN, ACC_REMOTE))
		dev_fail("odpx_prereg_add: %s", odpx_last_reason());
	c = query(ctx);
	if (c.prereg_regions != 1 || c.prereg_bytes != LEN || c.pinned_bytes != 2 * LEN)
		dev_fail("after odpx_prereg_add: %llu regions of %llu bytes, %llu pinned; want 1, %d, %d",
			 (unsigned long long)c.prereg_regions, (unsigned long long)c.prereg_bytes,
			 (unsigned long long)c.pinned_bytes, LEN, 2 * LEN);
	pinned0 = dv_stats(ctx).hybrid_pinned;
	pmr = dv_reg(ctx, pre, LEN, ACC_REMOTE);	/* the region's entry: a pinned hit */
	if (dv_stats(ctx).hybrid_pinned != pinned0 || dv_stats(ctx).odp_bytes)
		dev_fail("the pre-registered buffer was not served by its pinned entry");
	if (!write_check(d, smr, src, pmr, pre, 90, "pre-registered buffer"))
		dev_fail("pre-registered buffer: data mismatch");
	/* the budget is full: another buffer is served from ODP */
	omr = dv_reg(ctx, other, LEN, ACC_REMOTE);
	if (dv_stats(ctx).hybrid_odp != 1)
		dev_fail("past the budget, hybrid_odp %llu, want 1",
			 (unsigned long long)dv_stats(ctx).hybrid_odp);
	if (!write_check(d, smr, src, omr, other, 91, "ODP buffer beside a pre-registered one"))
		dev_fail("ODP buffer: data mismatch");
	dv_dereg(ctx, pmr);
	dv_dereg(ctx, omr);
	if (odpx_prereg_release(ctx, pre, LEN, ACC_REMOTE))
		dev_fail("odpx_prereg_release: %s", odpx_last_reason());
	if (odpx_prereg_release(ctx, pre, LEN, ACC_REMOTE) != -ENOENT)
		dev_fail("a second odpx_prereg_release did not return -ENOENT");
	c = query(ctx);
	if (c.prereg_regions != 0)
		dev_fail("after odpx_prereg_release: %llu regions", (unsigned long long)c.prereg_regions);
	printf("hybrid: odpx_query shows the pinned part; a pre-registered buffer served pinned\n");
	dv_dereg(ctx, smr);
	munmap(src, LEN);
	munmap(pre, LEN);
	munmap(other, LEN);
	odpx_close(ctx);
}

int main(void)
{
	struct dev d;

	dev_open(&d);
	dev_require_odp(&d, IBV_ODP_SUPPORT_WRITE);
	dev_connect_self(&d);
	budget(&d);
	query_prereg(&d);	/* before the DONTNEED rounds: their ranges are not cached for 100 ms */
	invalidation(&d);
	dev_close(&d);
	return 0;
}
