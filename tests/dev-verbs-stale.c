/*
 * dev-verbs-stale: stale registrations over RDMA.
 * Pin mode: register the target through odpx, change the mapping under it (munmap + mmap at
 * the same address; madvise(DONTNEED); mremap moving it away and a new mapping at the old
 * address), register again and RDMA WRITE with the new rkey: the bytes must land in the new
 * pages.  With ODPX_OPEN_UNSAFE_NO_MONITOR the same check must fail (the cache hands back the
 * old pinned MR), which shows the check can fail.
 * Explicit mode: after munmap + mmap the data follows the new mapping with no invalidation by
 * odpx (the same chunk MR, no new registration).
 */
#include "dev-verbs-util.h"

#define LEN (16 * 4096)

enum change { MUNMAP_MMAP, DONTNEED, MREMAP_MOVE, NCHANGE };
static const char *const change_name[] = { "munmap+mmap", "madvise(DONTNEED)", "mremap move" };

static void change_mapping(unsigned char *dst, enum change c)
{
	switch (c) {
	case MUNMAP_MMAP:
		if (munmap(dst, LEN))
			dev_fail("munmap");
		dev_map(LEN, dst);
		break;
	case DONTNEED:
		if (madvise(dst, LEN, MADV_DONTNEED))
			dev_fail("madvise");
		break;
	case MREMAP_MOVE: {
		void *away = mmap(NULL, LEN, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (away == MAP_FAILED ||
		    mremap(dst, LEN, LEN, MREMAP_MAYMOVE | MREMAP_FIXED, away) != away)
			dev_fail("mremap: %s", strerror(errno));
		dev_map(LEN, dst);
		munmap(away, LEN);
		break;
	}
	default:
		break;
	}
}

/* Returns 1 when the second write landed in the current pages at dst. */
static int one(struct dev *d, struct odpx_ctx *ctx, enum change c, unsigned seed)
{
	unsigned char *src = dv_map(LEN), *dst = dv_map(LEN), *want = dv_map(LEN);
	struct odpx_mr *smr = dv_reg(ctx, src, LEN, ACC_LW), *dmr;
	int ok;

	memset(dst, 0, LEN);
	dmr = dv_reg(ctx, dst, LEN, ACC_REMOTE);
	dev_fill(src, LEN, seed);
	memcpy(want, src, LEN);
	if (dv_rdma(d, IBV_WR_RDMA_WRITE, smr, src, LEN, dst, odpx_mr_rkey(dmr)))
		dev_fail("first RDMA WRITE failed");
	if (!dev_same("first RDMA WRITE", dst, want, LEN))
		dev_fail("first RDMA WRITE: data mismatch");
	dv_dereg(ctx, dmr);

	change_mapping(dst, c);
	dmr = dv_reg(ctx, dst, LEN, ACC_REMOTE);
	dev_fill(src, LEN, seed + 1);
	memcpy(want, src, LEN);
	if (dv_rdma(d, IBV_WR_RDMA_WRITE, smr, src, LEN, dst, odpx_mr_rkey(dmr)))
		dev_fail("second RDMA WRITE failed");
	ok = dev_same(change_name[c], dst, want, LEN);
	dv_dereg(ctx, dmr);
	dv_dereg(ctx, smr);
	munmap(src, LEN);
	munmap(dst, LEN);
	munmap(want, LEN);
	return ok;
}

int main(void)
{
	struct odpx_ctx *ctx;
	struct odpx_stats st;
	struct dev d;

	dev_open(&d);
	dev_require_odp(&d, IBV_ODP_SUPPORT_WRITE);
	dev_connect_self(&d);

	ctx = dv_open(&d, ODPX_MODE_PIN, 0);
	for (int c = 0; c < NCHANGE; c++) {
		if (!one(&d, ctx, c, 40 + c))
			dev_fail("pin mode, %s: the write through odpx missed the new pages",
				 change_name[c]);
		printf("pin, %s: the data landed in the new pages\n", change_name[c]);
	}
	st = dv_stats(ctx);
	printf("pin: inval unmap %llu remove %llu remap %llu, entries %llu, direct_racing %llu\n",
	       (unsigned long long)st.inval_unmap, (unsigned long long)st.inval_remove,
	       (unsigned long long)st.inval_remap, (unsigned long long)st.inval_entries,
	       (unsigned long long)st.direct_racing);
	odpx_close(ctx);

	/* a fresh context per change: without a monitor, the cache would also serve the next
	 * round's buffers (often at the same addresses) from stale entries */
	for (int c = 0; c < NCHANGE; c++) {
		ctx = dv_open(&d, ODPX_MODE_PIN, ODPX_OPEN_UNSAFE_NO_MONITOR);
		if (one(&d, ctx, c, 50 + c))
			dev_fail("no monitor, %s: the data reached the new pages: the check "
				 "cannot tell a stale registration", change_name[c]);
		printf("no monitor, %s: stale registration reproduced (the new pages missed "
		       "the data)\n", change_name[c]);
		odpx_close(ctx);
	}

	ctx = dv_open(&d, ODPX_MODE_EXPLICIT, 0);
	for (int c = 0; c < NCHANGE; c++) {
		uint64_t mrs = dv_stats(ctx).odp_mrs;
		if (!one(&d, ctx, c, 60 + c))
			dev_fail("explicit, %s: the ODP MR did not follow the mapping",
				 change_name[c]);
		st = dv_stats(ctx);
		printf("explicit, %s: data followed the new mapping (ODP MRs %llu -> %llu, "
		       "invalidations %llu)\n", change_name[c], (unsigned long long)mrs,
		       (unsigned long long)st.odp_mrs, (unsigned long long)st.inval_entries);
		if (st.inval_entries)
			dev_fail("explicit mode invalidated entries");
	}
	odpx_close(ctx);
	dev_close(&d);
	return 0;
}
