// SPDX-License-Identifier: MIT
/*
 * dev-verbs-hybrid-thrash: a range hybrid serves from ODP moves to pinned when the detector
 * says THRASH and the pin fits, and only then.
 *
 * A child in a cgroup v2 with memory.high 40 MiB (reclaim above it, no OOM limit) and swap
 * opens a hybrid context with a budget of 8 MiB.  A 6 MiB filler registration holds most of
 * the budget, so a 4 MiB piece P of a 64 MiB region is served from ODP.  The filler goes
 * (released and unmapped: the monitor invalidates it and its pin goes), so P now fits; once
 * the detector has left any THRASH the region's writes caused, P registered again stays on
 * ODP (no move: the control).  Then
 * the whole region, an ODP registration of its own, is swept with RDMA until the detector
 * says THRASH (the cgroup's refaults as the device pages the region in and out), and P
 * registered again moves: hybrid_to_pin counts it and the handle is a pinned one.  Every
 * transfer's bytes are checked (dev-paging-ws.h), through P's pinned registration too,
 * and the CPU reads the region back.
 *
 * Skips: no RDMA device with explicit RC ODP, no swap, no writable cgroup v2 root (each a
 * failure in the guest, where TEST_REQUIRE_DEVICE is set).
 */
#include "dev-cgroup.h"

#define HIGH_BYTES	(40UL << 20)
#define BIG_BYTES	(64UL << 20)
#define BUDGET_BYTES	(8UL << 20)
#define FILLER_BYTES	(6UL << 20)
#define PIECE_BYTES	(4UL << 20)
#define DEADLINE_MS	60000

static struct odpx_stats stats(struct odpx_ctx *ctx)
{
	struct odpx_stats st;

	if (odpx_stats_read(ctx, &st, sizeof(st)) != (int)sizeof(st))
		dev_fail("odpx_stats_read");
	return st;
}

static struct odpx_mr *reg(struct odpx_ctx *ctx, void *p, size_t len)
{
	struct odpx_mr *mr;
	int r = odpx_reg(ctx, p, len, ODPX_ACCESS_LOCAL_WRITE, &mr);

	if (r)
		dev_fail("odpx_reg(%p, %zu): %s (%s)", p, len, strerror(-r), odpx_last_reason());
	return mr;
}

static bool thrashing(void *arg)
{
	return stats(arg).thrash_state == ODPX_THRASH_THRASH;
}

/* Steps over P's chunks through @mr: every byte checked by ws_step(). */
static void through(struct ws *w, struct odpx_mr *mr, const char *what)
{
	struct odpx_mr *keep = w->mr;
	int r;

	w->mr = mr;
	for (size_t i = 0; i < PIECE_BYTES / WS_CHUNK; i++)
		if ((r = ws_step(w, i)))
			dev_fail("%s: chunk %zu: %s", what, i, strerror(-r));
	w->mr = keep;
}

static int child(const struct ws_cg *cg, void *arg)
{
	struct odpx_attr a = { .comp_mask = ODPX_ATTR_MODE | ODPX_ATTR_LIMITS,
			       .mode = ODPX_MODE_HYBRID,
			       .limits = { .max_pinned_bytes = BUDGET_BYTES } };
	struct odpx_mr *filler_mr, *p1, *p2, *p3;
	struct odpx_stats s0, s1;
	unsigned char *filler;
	struct odpx_ctx *ctx;
	struct dev d;
	struct ws w;
	size_t pos = 0;
	int r;

	setenv("ODPX_THRASH", "window_ms=250,mem_refault_rate=100", 1);
	dev_open(&d);
	dev_connect_self(&d);
	if ((r = odpx_open_verbs(d.pd, &a, &ctx)))
		dev_fail("odpx_open_verbs(hybrid): %s (%s)", strerror(-r), odpx_last_reason());
	filler = dev_map(FILLER_BYTES, NULL);
	memset(filler, 1, FILLER_BYTES);
	filler_mr = reg(ctx, filler, FILLER_BYTES);
	if ((r = ws_setup(&w, &d, ctx, BIG_BYTES)))
		dev_fail("setting up the %lu MiB region failed (%s)", BIG_BYTES >> 20, strerror(-r));
	s0 = stats(ctx);
	p1 = reg(ctx, w.region, PIECE_BYTES);
	s1 = stats(ctx);
	printf("filler %lu MiB pinned, then P: pinned %llu, ODP %llu\n", FILLER_BYTES >> 20,
	       (unsigned long long)(s1.hybrid_pinned - s0.hybrid_pinned),
	       (unsigned long long)(s1.hybrid_odp - s0.hybrid_odp));
	if (s1.hybrid_odp != s0.hybrid_odp + 1)
		dev_fail("P was not served from ODP past the budget");
	through(&w, p1, "P on ODP");

	/* the filler goes: its pin with it, once the monitor's invalidation is reaped */
	if (odpx_dereg(ctx, filler_mr) || munmap(filler, FILLER_BYTES))
		dev_fail("releasing the filler");
	int64_t until = dev_now_ms() + DEADLINE_MS;
	while (stats(ctx).pinned_bytes > BUDGET_BYTES - PIECE_BYTES && dev_now_ms() < until)
		usleep(10000);
	if (stats(ctx).pinned_bytes > BUDGET_BYTES - PIECE_BYTES)
		dev_fail("the filler's pin did not go: %llu bytes pinned",
			 (unsigned long long)stats(ctx).pinned_bytes);

	/* writing the region above memory.high may have thrashed: quiet until it passes */
	until = dev_now_ms() + DEADLINE_MS;
	while (thrashing(ctx) && dev_now_ms() < until)
		usleep(10000);
	/* the control: room now, but no THRASH, so P stays on ODP */
	s0 = stats(ctx);
	if (s0.thrash_state == ODPX_THRASH_THRASH)
		dev_fail("still THRASH %d s after the writes: the control cannot tell",
			 DEADLINE_MS / 1000);
	p2 = reg(ctx, w.region, PIECE_BYTES);
	s1 = stats(ctx);
	if (s1.hybrid_to_pin != s0.hybrid_to_pin || s1.hybrid_pinned != s0.hybrid_pinned)
		dev_fail("P moved to pinned with the detector at %llu, not THRASH",
			 (unsigned long long)s0.thrash_state);
	printf("room for P and the detector not at THRASH: P stays on ODP\n");
	odpx_dereg(ctx, p2);

	/* the region swept on ODP until THRASH */
	if ((r = ws_register(&w)))
		dev_fail("registering the region: %s", strerror(-r));
	until = dev_now_ms() + DEADLINE_MS;
	r = ws_sweep(&w, w.nchunks, &pos, (uint64_t)until * 1000000ULL, thrashing, ctx);
	if (r)
		dev_fail("the sweep failed: %s", strerror(-r));
	if (!thrashing(ctx))
		dev_fail("no THRASH within %d s of sweeping %lu MiB above memory.high %lu MiB",
			 DEADLINE_MS / 1000, BIG_BYTES >> 20, HIGH_BYTES >> 20);
	s0 = stats(ctx);
	p3 = reg(ctx, w.region, PIECE_BYTES);
	s1 = stats(ctx);
	printf("THRASH (%llu state changes), P registered: moved %llu, pinned %llu, "
	       "%llu bytes pinned\n", (unsigned long long)s1.thrash_changes,
	       (unsigned long long)(s1.hybrid_to_pin - s0.hybrid_to_pin),
	       (unsigned long long)(s1.hybrid_pinned - s0.hybrid_pinned),
	       (unsigned long long)s1.pinned_bytes);
	if (s1.hybrid_to_pin != s0.hybrid_to_pin + 1 || s1.pinned_bytes < PIECE_BYTES)
		dev_fail("P did not move to pinned under THRASH");
	through(&w, p3, "P pinned");
	if (ws_check_region(&w))
		dev_fail("the region differs from what the transfers wrote");
	printf("%" PRIu64 " transfers of %d bytes checked, the region read back\n", w.transfers,
	       WS_CHUNK);
	odpx_dereg(ctx, p3);
	odpx_dereg(ctx, p1);
	ws_teardown(&w);
	if ((r = odpx_close(ctx)))
		dev_fail("odpx_close: %s", strerror(-r));
	dev_close(&d);
	return 0;
}

int main(void)
{
	struct dev d;
	int64_t oom;
	int r;

	dev_open(&d);
	dev_require_odp(&d, IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_WRITE);
	dev_close(&d);
	if (ws_swap_bytes() < 2 * BIG_BYTES)
		dev_skip("less than %lu MiB of swap free (/proc/meminfo SwapFree): pages over "
			 "memory.high have nowhere to go", 2 * BIG_BYTES >> 20);
	/* memory.high, not memory.max: reclaim with no OOM killer; the pins' headroom
	 * (memcg.h: memory.high less a 16 MiB margin) stays above the 8 MiB budget */
	r = dev_in_cgroup("hyb-thrash", 0, HIGH_BYTES, child, NULL, &oom);
	if ((r = dev_child_status("hybrid", r, oom)))
		return r;
	printf("PASS: ODP under THRASH moved to pinned, not before; every byte right\n");
	return 0;
}
