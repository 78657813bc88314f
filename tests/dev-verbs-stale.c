// SPDX-License-Identifier: MIT
/*
 * dev-verbs-stale: stale registrations over RDMA.
 * Pin mode: register the target through odpx, change the mapping under it (munmap + mmap at
 * the same address; madvise(DONTNEED); mremap moving it away and a new mapping at the old
 * address; guard pages installed and removed, which raises no event, then odpx_invalidate()),
 * register again and RDMA WRITE with the new rkey: the bytes must land in the new
 * pages.  With ODPX_OPEN_UNSAFE_NO_MONITOR the same check must fail (the cache hands back the
 * old pinned MR), which shows the check can fail.
 * Explicit mode: after each change the data follows the new mapping with no invalidation by
 * odpx (the same chunk MR, no new registration).
 * Also printed, not checked: whether the guest kernel reports a guard install by itself (pin
 * mode, no odpx_invalidate()); tests/guard-regions checks that on the host kernel.
 */
#include "dev-verbs-util.h"

#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102
#define MADV_GUARD_REMOVE 103
#endif

#define LEN (16 * 4096)

/* GUARD before DONTNEED: a range DONTNEED'd (or invalidated) in the last 100 ms is served
 * direct, never cached, and the next rounds' buffers often reuse its addresses */
enum change { MUNMAP_MMAP, GUARD, DONTNEED, MREMAP_MOVE, NCHANGE, GUARD_UNSEEN = NCHANGE };
static const char *const change_name[] = {
	"munmap+mmap", "guard install+odpx_invalidate", "madvise(DONTNEED)", "mremap move",
	"guard install alone",
};

static void change_mapping(struct odpx_ctx *ctx, unsigned char *dst, enum change c)
{
	switch (c) {
	case GUARD:
	case GUARD_UNSEEN:
		if (madvise(dst, LEN, MADV_GUARD_INSTALL) || madvise(dst, LEN, MADV_GUARD_REMOVE))
			dev_fail("madvise(MADV_GUARD_*): %s", strerror(errno));
		if (c == GUARD) {
			/* a monitored cache must kill dst's entry: the quarantine alone would
			 * serve the next registration direct and pass the check */
			enum odpx_mode m = ODPX_MODE_AUTO;
			int r = odpx_invalidate(ctx, dst, LEN);
			odpx_mode_get(ctx, &m, NULL);
			if (r != (m == ODPX_MODE_PIN && !dv_stats(ctx).unsafe_no_monitor))
				dev_fail("odpx_invalidate = %d in %s mode: %s", r, odpx_mode_str(m),
					 odpx_last_reason());
		}
		break;
	case MUNMAP_MMAP:
		dv_change_mapping(dst, LEN, DV_MUNMAP_MMAP);
		break;
	case DONTNEED:
		dv_change_mapping(dst, LEN, DV_DONTNEED);
		break;
	case MREMAP_MOVE:
		dv_change_mapping(dst, LEN, DV_MREMAP_MOVE);
		break;
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

	change_mapping(ctx, dst, c);
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

static void pin_mode(struct dev *d)
{
	struct odpx_ctx *ctx;
	struct odpx_stats st;

	ctx = dv_open(d, ODPX_MODE_PIN, 0);
	/* first: the other changes would put the range in the REMOVE quarantine (served direct) */
	st = dv_stats(ctx);
	int fresh = one(d, ctx, GUARD_UNSEEN, 39);
	printf("pin, guard install alone (not checked): %s (hits %llu, direct %llu)\n",
	       fresh ? "the data landed in the new pages: this kernel reports guard installs" :
	       "stale, as documented: no event, odpx_invalidate needed",
	       (unsigned long long)(dv_stats(ctx).hits - st.hits),
	       (unsigned long long)(dv_stats(ctx).direct_regs - st.direct_regs));
	for (int c = 0; c < NCHANGE; c++) {
		if (!one(d, ctx, c, 40 + c))
			dev_fail("pin mode, %s: the write through odpx missed the new pages",
				 change_name[c]);
		printf("pin, %s: the data landed in the new pages\n", change_name[c]);
	}
	st = dv_stats(ctx);
	printf("pin: inval unmap %llu remove %llu remap %llu api %llu, entries %llu, direct_racing %llu\n",
	       (unsigned long long)st.inval_unmap, (unsigned long long)st.inval_remove,
	       (unsigned long long)st.inval_remap, (unsigned long long)st.inval_api,
	       (unsigned long long)st.inval_entries, (unsigned long long)st.direct_racing);
	odpx_close(ctx);
}

int main(void)
{
	struct odpx_ctx *ctx;
	struct odpx_stats st;
	struct dev d;

	dev_open(&d);
	dev_require_odp(&d, IBV_ODP_SUPPORT_WRITE);
	dev_connect_self(&d);

	pin_mode(&d);

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
