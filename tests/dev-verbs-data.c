// SPDX-License-Identifier: MIT
/*
 * dev-verbs-data: for each of explicit, pin and direct, an RC loopback QP moves data through
 * odpx registrations - RDMA WRITE, RDMA READ and a SEND into a receive buffer registered
 * through odpx - page-aligned with path MTU 4096 (rxe's ODP copy ignores the offset within a
 * page), verified byte for byte.
 */
#include "dev-verbs-util.h"

#define LEN (16 * 4096)

static void run(struct dev *d, enum odpx_mode mode)
{
	struct odpx_ctx *ctx = dv_open(d, mode, 0);
	unsigned char *src = dv_map(LEN), *dst = dv_map(LEN), *want = dv_map(LEN);
	struct odpx_mr *smr, *dmr;
	struct odpx_stats st;

	memset(dst, 0, LEN);
	dev_fill(src, LEN, 11 + mode);
	memcpy(want, src, LEN);
	smr = dv_reg(ctx, src, LEN, ACC_LW);
	dmr = dv_reg(ctx, dst, LEN, ACC_REMOTE);
	if (!odpx_mr_rkey(dmr))
		dev_fail("%s: remote registration without an rkey", odpx_mode_str(mode));
	if (dv_rdma(d, IBV_WR_RDMA_WRITE, smr, src, LEN, dst, odpx_mr_rkey(dmr)))
		dev_fail("%s: RDMA WRITE failed", odpx_mode_str(mode));
	if (!dev_same("RDMA WRITE", dst, want, LEN))
		dev_fail("%s: RDMA WRITE data mismatch", odpx_mode_str(mode));

	/* READ back into a fresh local buffer, registered for local write */
	unsigned char *back = dv_map(LEN);
	struct odpx_mr *bmr = dv_reg(ctx, back, LEN, ACC_LW);
	dev_fill(dst, LEN, 21 + mode);
	memcpy(want, dst, LEN);
	if (dv_rdma(d, IBV_WR_RDMA_READ, bmr, back, LEN, dst, odpx_mr_rkey(dmr)))
		dev_fail("%s: RDMA READ failed", odpx_mode_str(mode));
	if (!dev_same("RDMA READ", back, want, LEN))
		dev_fail("%s: RDMA READ data mismatch", odpx_mode_str(mode));

	/* SEND into a receive buffer: the same registrations again (hits where cached) */
	struct odpx_mr *s2 = dv_reg(ctx, src, LEN, ACC_LW), *r2 = dv_reg(ctx, back, LEN, ACC_LW);
	memset(back, 0, LEN);
	dev_fill(src, LEN, 31 + mode);
	memcpy(want, src, LEN);
	if (dv_send(d, s2, src, r2, back, LEN))
		dev_fail("%s: SEND failed", odpx_mode_str(mode));
	if (!dev_same("SEND", back, want, LEN))
		dev_fail("%s: SEND data mismatch", odpx_mode_str(mode));
	dv_dereg(ctx, s2);
	dv_dereg(ctx, r2);
	dv_dereg(ctx, bmr);
	dv_dereg(ctx, smr);
	dv_dereg(ctx, dmr);
	st = dv_stats(ctx);
	printf("%s: WRITE, READ, SEND of %d bytes verified (hits %llu, misses %llu, direct %llu, "
	       "odp_mrs %llu)\n", odpx_mode_str(mode), LEN, (unsigned long long)st.hits,
	       (unsigned long long)st.misses, (unsigned long long)st.direct_regs,
	       (unsigned long long)st.odp_mrs);
	if (mode == ODPX_MODE_EXPLICIT && (st.pins || !st.odp_mrs || !st.hits))
		dev_fail("explicit: pins %llu odp_mrs %llu hits %llu", (unsigned long long)st.pins,
			 (unsigned long long)st.odp_mrs, (unsigned long long)st.hits);
	if (mode == ODPX_MODE_PIN && !st.hits)
		dev_fail("pin: the second registrations did not hit");
	if (mode == ODPX_MODE_DIRECT && st.direct_regs != 5)
		dev_fail("direct: %llu direct registrations, want 5",
			 (unsigned long long)st.direct_regs);
	odpx_close(ctx);
	munmap(src, LEN);
	munmap(dst, LEN);
	munmap(want, LEN);
	munmap(back, LEN);
}

int main(void)
{
	struct dev d;

	dev_open(&d);
	dev_require_odp(&d, IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_SEND |
			    IBV_ODP_SUPPORT_RECV);
	dev_connect_self(&d);
	run(&d, ODPX_MODE_EXPLICIT);
	run(&d, ODPX_MODE_PIN);
	run(&d, ODPX_MODE_DIRECT);
	dev_close(&d);
	return 0;
}
