// SPDX-License-Identifier: MIT
/*
 * dev-verbs-try: odpx_reg_ex()'s TRY and PARTIAL in explicit ODP mode, and
 * odpx_query() against ibv_query_device_ex().
 *
 * With 2 MiB chunks:
 *   - TRY in a chunk that has no MR yet: -EAGAIN, no MR registered (odp_mrs,
 *     misses unchanged);
 *   - after odpx_reg() made the chunk's MR: TRY anywhere in that chunk
 *     returns it (same lkey), and an RDMA WRITE through it is verified;
 *   - TRY across two chunks with no range MR: -EAGAIN; PARTIAL over a range
 *     whose first chunk has no MR and whose second has: the second chunk's
 *     MR, its bounds through odpx_mr_addr()/odpx_mr_length();
 *   - remote access: TRY finds the exact range MR a registration made, and
 *     -EAGAIN for any other range;
 *   - odpx_query(DEVICE) equals ibv_query_device_ex()'s max_mr, max_mr_size,
 *     max_pd and ODP caps; no URING part; LIMITS as set;
 *   - idle release (idle_ms 300): a chunk MR no registration holds is
 *     released by the engine (idle_released), and TRY there is -EAGAIN
 *     again; a held chunk's MR stays, and so does a pre-registered one
 *     (odpx_prereg_add holds its chunk MR), until odpx_prereg_release.
 */
#include "dev-verbs-util.h"

#define CHUNK (2UL << 20)

int main(void)
{
	struct dev d;
	struct odpx_attr a = { .comp_mask = ODPX_ATTR_MODE | ODPX_ATTR_CHUNK | ODPX_ATTR_LIMITS,
			       .mode = ODPX_MODE_EXPLICIT, .chunk_bytes = CHUNK,
			       .limits = { .max_entries = 64 } };
	struct odpx_ctx *ctx;
	struct odpx_mr *m, *reg, *rr;
	struct odpx_stats s0, s1;
	int r;

	dev_open(&d);
	dev_require_odp(&d, IBV_ODP_SUPPORT_WRITE);
	if ((r = odpx_open_verbs(d.pd, &a, &ctx)))
		dev_fail("explicit: %s: %s", strerror(-r), odpx_last_reason());
	dev_connect_self(&d);
	/* four chunks, aligned */
	unsigned char *raw = dv_map(5 * CHUNK);
	unsigned char *area = (unsigned char *)(((uintptr_t)raw + CHUNK - 1) & ~(CHUNK - 1));
	unsigned char *dst = dv_map(4096);
	memset(area, 1, 4 * CHUNK);

	s0 = dv_stats(ctx);
	r = odpx_reg_ex(ctx, area + 4096, 4096, ACC_LW, ODPX_REG_TRY, &m);
	s1 = dv_stats(ctx);
	if (r != -EAGAIN || s1.odp_mrs != s0.odp_mrs || s1.misses != s0.misses ||
	    s1.try_again != s0.try_again + 1)
		dev_fail("TRY in a chunk with no MR: %d, odp_mrs %lu->%lu, misses %lu->%lu",
			 r, (unsigned long)s0.odp_mrs, (unsigned long)s1.odp_mrs,
			 (unsigned long)s0.misses, (unsigned long)s1.misses);
	reg = dv_reg(ctx, area + 4096, 4096, ACC_LW);
	s0 = dv_stats(ctx);
	if ((r = odpx_reg_ex(ctx, area + CHUNK - 8192, 8192, ACC_LW, ODPX_REG_TRY, &m)))
		dev_fail("TRY in the chunk whose MR exists: %d: %s", r, odpx_last_reason());
	s1 = dv_stats(ctx);
	if (odpx_mr_lkey(m) != odpx_mr_lkey(reg) || s1.odp_mrs != s0.odp_mrs)
		dev_fail("TRY: lkey %#x, the chunk's %#x; odp_mrs %lu->%lu", odpx_mr_lkey(m),
			 odpx_mr_lkey(reg), (unsigned long)s0.odp_mrs, (unsigned long)s1.odp_mrs);
	struct odpx_mr *t = dv_reg(ctx, dst, 4096, ACC_REMOTE);
	dev_fill(area + CHUNK - 8192, 4096, 7);
	memset(dst, 0, 4096);
	if (dv_rdma(&d, IBV_WR_RDMA_WRITE, m, area + CHUNK - 8192, 4096, dst, odpx_mr_rkey(t)) ||
	    !dev_same("TRY's lkey", dst, area + CHUNK - 8192, 4096))
		dev_fail("RDMA WRITE through TRY's lkey %#x", odpx_mr_lkey(m));
	dv_dereg(ctx, m);
	printf("TRY: -EAGAIN with no chunk MR, the chunk's MR once it exists: ok\n");

	/* across chunks 0 and 1: no range MR */
	r = odpx_reg_ex(ctx, area + CHUNK - 4096, 8192, ACC_LW, ODPX_REG_TRY, &m);
	if (r != -EAGAIN)
		dev_fail("TRY across two chunks with no range MR: %d", r);
	/* PARTIAL over chunks 2 and 3, only 3 has an MR */
	struct odpx_mr *c3 = dv_reg(ctx, area + 3 * CHUNK, 4096, ACC_LW);
	if ((r = odpx_reg_ex(ctx, area + 2 * CHUNK + 4096, CHUNK, ACC_LW, ODPX_REG_PARTIAL, &m)))
		dev_fail("PARTIAL over chunks 2-3: %d: %s", r, odpx_last_reason());
	if (odpx_mr_lkey(m) != odpx_mr_lkey(c3) || odpx_mr_addr(m) != area + 3 * CHUNK ||
	    odpx_mr_length(m) != CHUNK)
		dev_fail("PARTIAL: %p+%zu lkey %#x, want chunk 3 %p", odpx_mr_addr(m),
			 odpx_mr_length(m), odpx_mr_lkey(m), (void *)(area + 3 * CHUNK));
	dv_dereg(ctx, m);
	r = odpx_reg_ex(ctx, area + 2 * CHUNK, 4096, ACC_LW, ODPX_REG_PARTIAL, &m);
	if (r != -EAGAIN)
		dev_fail("PARTIAL inside chunk 2 alone: %d", r);
	printf("PARTIAL: the first chunk of the range with an MR: ok\n");

	/* remote access: the exact range MR only */
	rr = dv_reg(ctx, area + 8192, 8192, ACC_REMOTE);
	if ((r = odpx_reg_ex(ctx, area + 8192, 8192, ACC_REMOTE, ODPX_REG_TRY, &m)) ||
	    odpx_mr_rkey(m) != odpx_mr_rkey(rr))
		dev_fail("TRY of the remote range that exists: %d", r);
	dv_dereg(ctx, m);
	r = odpx_reg_ex(ctx, area + 8192, 4096, ACC_REMOTE, ODPX_REG_PARTIAL, &m);
	if (r != -EAGAIN)
		dev_fail("PARTIAL of part of a remote range: %d, want -EAGAIN", r);
	dv_dereg(ctx, rr);
	printf("remote: exact ranges only: ok\n");

	/* odpx_query against the device */
	struct ibv_device_attr_ex ax = dev_query_ex(&d);
	struct odpx_caps c = { .comp_mask = ODPX_QUERY_DEVICE | ODPX_QUERY_URING | ODPX_QUERY_LIMITS };
	if ((r = odpx_query(ctx, &c)))
		dev_fail("odpx_query: %d", r);
	if (c.comp_mask != (ODPX_QUERY_DEVICE | ODPX_QUERY_LIMITS))
		dev_fail("odpx_query comp_mask %#lx", (unsigned long)c.comp_mask);
	if (c.max_mr != (uint64_t)ax.orig_attr.max_mr || c.max_mr_size != ax.orig_attr.max_mr_size ||
	    c.max_pd != (uint64_t)ax.orig_attr.max_pd ||
	    c.odp_general_caps != ax.odp_caps.general_caps ||
	    c.odp_rc_caps != ax.odp_caps.per_transport_caps.rc_odp_caps ||
	    c.odp_uc_caps != ax.odp_caps.per_transport_caps.uc_odp_caps ||
	    c.odp_ud_caps != ax.odp_caps.per_transport_caps.ud_odp_caps ||
	    c.odp_xrc_caps != ax.xrc_odp_caps || c.limits.max_entries != 64)
		dev_fail("odpx_query: max_mr %lu/%lu max_mr_size %lu/%lu max_pd %lu/%lu "
			 "general %#lx/%#lx rc %#x/%#x", (unsigned long)c.max_mr,
			 (unsigned long)ax.orig_attr.max_mr, (unsigned long)c.max_mr_size,
			 (unsigned long)ax.orig_attr.max_mr_size, (unsigned long)c.max_pd,
			 (unsigned long)ax.orig_attr.max_pd, (unsigned long)c.odp_general_caps,
			 (unsigned long)ax.odp_caps.general_caps, c.odp_rc_caps,
			 ax.odp_caps.per_transport_caps.rc_odp_caps);
	printf("odpx_query: max_mr %lu max_mr_size %lu max_pd %lu, ODP caps: as the device: ok\n",
	       (unsigned long)c.max_mr, (unsigned long)c.max_mr_size, (unsigned long)c.max_pd);

	dv_dereg(ctx, c3);
	dv_dereg(ctx, t);
	dv_dereg(ctx, reg);
	if ((r = odpx_close(ctx)))
		dev_fail("odpx_close: %d", r);

	/* idle release of chunk MRs */
	a.comp_mask |= ODPX_ATTR_IDLE | ODPX_ATTR_TICK;
	a.idle_ms = 300;
	a.tick_ms = 10;
	if ((r = odpx_open_verbs(d.pd, &a, &ctx)))
		dev_fail("explicit, idle 300 ms: %s: %s", strerror(-r), odpx_last_reason());
	dv_dereg(ctx, dv_reg(ctx, area, 4096, ACC_LW));	/* chunk 0, unused */
	struct odpx_mr *held = dv_reg(ctx, area + CHUNK, 4096, ACC_LW);	/* chunk 1 */
	if ((r = odpx_prereg_add(ctx, area + 2 * CHUNK, 8192, ACC_LW)))	/* chunk 2 */
		dev_fail("odpx_prereg_add: %d: %s", r, odpx_last_reason());
	int64_t until = dev_now_ms() + 60000;
	while (dv_stats(ctx).idle_released < 1 && dev_now_ms() < until)
		dev_pause_ms(10);
	s1 = dv_stats(ctx);
	if (s1.idle_released != 1)
		dev_fail("idle_released %lu after up to 60 s, want 1", (unsigned long)s1.idle_released);
	r = odpx_reg_ex(ctx, area, 4096, ACC_LW, ODPX_REG_TRY, &m);
	if (r != -EAGAIN)
		dev_fail("TRY in the idle chunk released: %d, want -EAGAIN", r);
	if ((r = odpx_reg_ex(ctx, area + CHUNK + 8192, 4096, ACC_LW, ODPX_REG_TRY, &m)) ||
	    odpx_mr_lkey(m) != odpx_mr_lkey(held))
		dev_fail("TRY in the held chunk: %d", r);
	dv_dereg(ctx, m);
	if ((r = odpx_reg_ex(ctx, area + 2 * CHUNK, 4096, ACC_LW, ODPX_REG_TRY, &m)))
		dev_fail("TRY in the pre-registered chunk after the idle time: %d", r);
	dv_dereg(ctx, m);
	if ((r = odpx_prereg_release(ctx, area + 2 * CHUNK, 8192, ACC_LW)))
		dev_fail("odpx_prereg_release: %d", r);
	until = dev_now_ms() + 60000;
	while (dv_stats(ctx).idle_released < 2 && dev_now_ms() < until)
		dev_pause_ms(10);
	if (dv_stats(ctx).idle_released != 2 ||
	    odpx_reg_ex(ctx, area + 2 * CHUNK, 4096, ACC_LW, ODPX_REG_TRY, &m) != -EAGAIN)
		dev_fail("a released pre-registered chunk was not released as idle");
	dv_dereg(ctx, held);
	printf("idle release: the unheld chunk MR went, the held and pre-registered ones "
	       "stayed: ok\n");
	if ((r = odpx_close(ctx)))
		dev_fail("odpx_close: %d", r);
	dev_close(&d);
	return 0;
}
