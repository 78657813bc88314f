// SPDX-License-Identifier: MIT
/*
 * dev-verbs-hybrid-memcg: hybrid mode in a memory cgroup too small for what it registers.
 *
 * A cgroup v2 of 32 MiB with swap; a child enters it, opens a hybrid context whose own
 * budget (1 GiB) would allow pinning everything, and writes a 64 MiB region 1 MiB at a time,
 * registering each piece as it is written and holding them all, so that the first pieces
 * are pinned while the cgroup has room and the rest come under pressure; then it sweeps the region twice with RDMA WRITEs and READs
 * through each piece's own registration (dev-paging-ws.h: every transfer's bytes checked),
 * and the CPU reads the whole region back.  Checked: the child is not killed, every
 * registration returned 0, some pieces were served pinned and the rest from ODP, and the
 * pinned part stayed within memory.max less memcg.h's margin.
 *
 * The control: a child in the same kind of cgroup registers the same region with
 * ibv_reg_mr() alone (pinned, as pin mode without a memory bound would) and must be
 * OOM-killed, which shows the setup kills a process that pins past the limit.
 *
 * Skips: no RDMA device with explicit RC ODP, no swap, no writable cgroup v2 root (each a
 * failure in the guest, where TEST_REQUIRE_DEVICE is set).
 */
#include "dev-cgroup.h"

#define LIMIT_BYTES	(32UL << 20)
#define BIG_BYTES	(64UL << 20)
#define MARGIN_BYTES	(16UL << 20)
#define FIRST_BYTES	(8UL << 20)
#define PIECE_BYTES	(1UL << 20)
#define NPIECES		(BIG_BYTES / PIECE_BYTES)
#define PER_PIECE	(PIECE_BYTES / WS_CHUNK)

static int hybrid_child(const struct ws_cg *cg, void *arg)
{
	struct odpx_attr a = { .comp_mask = ODPX_ATTR_MODE | ODPX_ATTR_LIMITS,
			       .mode = ODPX_MODE_HYBRID,
			       .limits = { .max_pinned_bytes = 1UL << 30 } };
	struct odpx_mr *piece[NPIECES];
	struct odpx_stats st;
	struct odpx_ctx *ctx;
	struct dev d;
	struct ws w;
	int r;

	dev_open(&d);
	dev_connect_self(&d);
	if ((r = odpx_open_verbs(d.pd, &a, &ctx)))
		dev_fail("odpx_open_verbs(hybrid): %s (%s)", strerror(-r), odpx_last_reason());
	/* the first 8 MiB written, then each piece registered as the next is written */
	if ((r = ws_setup(&w, &d, ctx, FIRST_BYTES)))
		dev_fail("setting up the first %lu MiB failed (%s)", FIRST_BYTES >> 20, strerror(-r));
	if (!(w.region = mremap(w.region, FIRST_BYTES, BIG_BYTES, MREMAP_MAYMOVE)) ||
	    w.region == MAP_FAILED || !(w.gen = realloc(w.gen, NPIECES * PER_PIECE * sizeof(*w.gen))))
		dev_fail("growing the region to %lu MiB: %s", BIG_BYTES >> 20, strerror(errno));
	memset(w.gen, 0, NPIECES * PER_PIECE * sizeof(*w.gen));
	w.nchunks = NPIECES * PER_PIECE;
	for (size_t p = 0; p < NPIECES; p++) {
		for (size_t i = p * PER_PIECE; i < (p + 1) * PER_PIECE; i++)
			ws_pattern(w.region + i * WS_CHUNK, i, 0);
		if ((r = odpx_reg(ctx, w.region + p * PIECE_BYTES, PIECE_BYTES,
				  ODPX_ACCESS_LOCAL_WRITE, &piece[p])))
			dev_fail("odpx_reg of piece %zu: %s (%s)", p, strerror(-r),
				 odpx_last_reason());
	}
	if (odpx_stats_read(ctx, &st, sizeof(st)) != (int)sizeof(st))
		dev_fail("odpx_stats_read");
	printf("%lu pieces of %lu KiB registered under memory.max %lu MiB: %llu pinned "
	       "(%llu KiB), %llu ODP (%llu MiB of ODP MRs)\n", NPIECES, PIECE_BYTES >> 10,
	       LIMIT_BYTES >> 20, (unsigned long long)st.hybrid_pinned,
	       (unsigned long long)(st.pinned_bytes >> 10), (unsigned long long)st.hybrid_odp,
	       (unsigned long long)(st.odp_bytes >> 20));
	/* the sink and source buffers are two pinned registrations of their own */
	if (st.hybrid_pinned < 3 || !st.odp_bytes)
		dev_fail("want the first pieces pinned and the rest ODP");
	/* memcg.h keeps a margin of max(limit / 8, 16 MiB) out of every pin */
	if (st.pinned_bytes > LIMIT_BYTES - MARGIN_BYTES)
		dev_fail("%llu bytes pinned: past memory.max less the margin, %lu",
			 (unsigned long long)st.pinned_bytes, LIMIT_BYTES - MARGIN_BYTES);
	for (int pass = 0; pass < 2; pass++) {
		for (size_t i = 0; i < w.nchunks; i++) {
			w.mr = piece[i / PER_PIECE];
			if ((r = ws_step(&w, i)))
				dev_fail("pass %d, chunk %zu: %s", pass, i, strerror(-r));
		}
	}
	w.mr = NULL;
	if (ws_check_region(&w))
		dev_fail("the region differs from what the transfers wrote");
	printf("%" PRIu64 " transfers of %d bytes checked, the region read back\n", w.transfers,
	       WS_CHUNK);
	for (size_t p = 0; p < NPIECES; p++)
		if ((r = odpx_dereg(ctx, piece[p])))
			dev_fail("odpx_dereg of piece %zu: %s", p, strerror(-r));
	ws_teardown(&w);
	if ((r = odpx_close(ctx)))
		dev_fail("odpx_close: %s", strerror(-r));
	dev_close(&d);
	return 0;
}

/* The control: the region pinned by ibv_reg_mr() alone. */
static int pin_child(const struct ws_cg *cg, void *arg)
{
	unsigned char *region;
	struct ibv_mr *mr;
	struct dev d;

	dev_open(&d);
	region = mmap(NULL, BIG_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (region == MAP_FAILED)
		dev_fail("mmap");
	for (size_t i = 0; i < BIG_BYTES / WS_CHUNK; i++)
		ws_pattern(region + i * WS_CHUNK, i, 0);
	fflush(NULL);
	mr = ibv_reg_mr(d.pd, region, BIG_BYTES, IBV_ACCESS_LOCAL_WRITE);
	printf("control: ibv_reg_mr of %lu MiB returned %s\n", BIG_BYTES >> 20,
	       mr ? "an MR" : strerror(errno));
	return 0;
}

int main(void)
{
	struct dev d;
	int64_t oom;
	int st;

	dev_open(&d);
	dev_require_odp(&d, IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_WRITE);
	dev_close(&d);
	if (ws_swap_bytes() < 2 * BIG_BYTES)
		dev_skip("less than %lu MiB of swap free (/proc/meminfo SwapFree): pages over "
			 "memory.max have nowhere to go", 2 * BIG_BYTES >> 20);

	st = dev_in_cgroup("hyb-pin", LIMIT_BYTES, 0, pin_child, NULL, &oom);
	if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL || oom < 1)
		dev_fail("control: a process pinning %lu MiB under memory.max %lu MiB was not "
			 "OOM-killed (status %#x, oom_kill %" PRId64 "): the test cannot tell",
			 BIG_BYTES >> 20, LIMIT_BYTES >> 20, st, oom);
	printf("control: pinning %lu MiB with ibv_reg_mr under memory.max %lu MiB: OOM-killed "
	       "(oom_kill %" PRId64 ")\n", BIG_BYTES >> 20, LIMIT_BYTES >> 20, oom);

	st = dev_in_cgroup("hyb-hybrid", LIMIT_BYTES, 0, hybrid_child, NULL, &oom);
	if ((st = dev_child_status("hybrid", st, oom)))
		return st;
	if (oom)
		dev_fail("hybrid: memory.events oom_kill %" PRId64 " in its cgroup", oom);
	printf("PASS: hybrid under memory.max: not killed, pinned within its headroom, every byte "
	       "right\n");
	return 0;
}
