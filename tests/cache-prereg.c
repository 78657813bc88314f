// SPDX-License-Identifier: MIT
/*
 * cache-prereg: pre-registered regions (odpx_prereg_add(), ODPX_ATTR_PREREG)
 * on the uring backend, pin mode.
 *
 * - a region given at open, longer than max_entry_bytes, is registered
 *   once: requests inside it hit, with no pin;
 * - a flood of other registrations that evicts every other entry, and the
 *   engine's trim to a max_unused_bytes smaller than the region, leave it
 *   registered (requests inside still hit, no pin);
 * - its memory unmapped and mapped again: the next request inside makes
 *   the region again (prereg_repins), and the data moved through the
 *   registration is the new mapping's (odpx_transfer);
 * - a request that straddles a region's end is served by a registration of
 *   its own (direct_regs), and the region stays registered;
 * - odpx_prereg_add() later, -EEXIST for the same region, -ENOENT for a
 *   release of one that is not; a released region is an ordinary entry
 *   again (evicted by the next flood);
 * - direct mode refuses it (-EOPNOTSUPP);
 * - odpx_close() releases everything: VmPin back to its baseline.
 */
#include "test.h"

#define PG 4096UL
#define REGION (32 * PG)	/* beyond max_entry_bytes (16 pages) */
#define FLOOD 64		/* ranges of 4 pages */

static unsigned char *region, *region2, *flood;

static void flood_all(struct odpx_ctx *ctx)
{
	struct odpx_mr *mr;

	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < FLOOD; i++) {
			CHECK_RC(odpx_reg(ctx, flood + i * 4 * PG, 4 * PG, 0, &mr), 0);
			CHECK_RC(odpx_dereg(ctx, mr), 0);
		}
	}
}

/* A request inside @p hits without a pin. */
static void hits_inside(struct odpx_ctx *ctx, void *p, size_t len, const char *when)
{
	struct odpx_stats s0 = stats_of(ctx), s1;
	struct odpx_mr *mr;

	CHECK_RC(odpx_reg(ctx, (char *)p + 5 * PG, 3 * PG, 0, &mr), 0);
	s1 = stats_of(ctx);
	CHECK(s1.pins == s0.pins && s1.misses == s0.misses && s1.hits == s0.hits + 1,
	      "%s: a request inside the region pinned (pins %lu->%lu, misses %lu->%lu)", when,
	      (unsigned long)s0.pins, (unsigned long)s1.pins, (unsigned long)s0.misses,
	      (unsigned long)s1.misses);
	CHECK(odpx_mr_addr(mr) == p && odpx_mr_length(mr) == len,
	      "%s: served by %p+%zu, not the region", when, odpx_mr_addr(mr), odpx_mr_length(mr));
	CHECK_RC(odpx_dereg(ctx, mr), 0);
}

int main(void)
{
	long pin0 = vm_pinned_kb();
	struct odpx_range pr = { .addr = NULL, .len = REGION, .access = 0 };
	struct odpx_attr at = {
		.comp_mask = ODPX_ATTR_LIMITS | ODPX_ATTR_PREREG | ODPX_ATTR_TICK,
		.limits = { .max_pinned_bytes = 160 * PG, .max_entries = 24,
			    .max_unused_bytes = 8 * PG, .max_entry_bytes = 16 * PG },
		.tick_ms = 10,
		.prereg = &pr, .nprereg = 1,
	};
	struct odpx_ctx *ctx;
	struct odpx_mr *mr;
	struct odpx_stats st;

	CHECK(pin0 >= 0, "no VmPin in /proc/self/status");
	region = map_anon(NULL, REGION + 4 * PG);	/* 4 pages after it, for a request across */
	region2 = map_anon(NULL, 8 * PG);
	flood = map_anon(NULL, FLOOD * 4 * PG);
	memset(region, 1, REGION);
	memset(region2, 2, 8 * PG);
	memset(flood, 3, FLOOD * 4 * PG);
	pr.addr = region;

	CHECK_RC(odpx_open_uring(&at, &ctx), 0);
	st = stats_of(ctx);
	CHECK(st.entries == 1 && st.pinned_bytes == REGION && st.pins == 1,
	      "after open: entries %lu pinned %lu pins %lu", (unsigned long)st.entries,
	      (unsigned long)st.pinned_bytes, (unsigned long)st.pins);
	CHECK(vm_pinned_kb() - pin0 == (long)(REGION / 1024), "VmPin %ld kB over the baseline",
	      vm_pinned_kb() - pin0);
	hits_inside(ctx, region, REGION, "after open");

	/* a flood evicts everything else; the trim leaves it too */
	flood_all(ctx);
	st = stats_of(ctx);
	CHECK(st.evictions > 0, "the flood evicted nothing");
	hits_inside(ctx, region, REGION, "after a flood");
	uint64_t ticks = st.engine_ticks;
	CHECK(WAIT_FOR(stats_of(ctx).engine_ticks >= ticks + 5 &&
		       stats_of(ctx).unused_bytes <= 8 * PG, 20), "the trim never came");
	hits_inside(ctx, region, REGION, "after trims");
	printf("pre-registered region at open: survives a flood and the trim: ok\n");

	/* across its end: served beside it, never merged with it */
	memset(region + REGION, 4, 4 * PG);
	st = stats_of(ctx);
	CHECK_RC(odpx_reg(ctx, region + REGION - 2 * PG, 4 * PG, 0, &mr), 0);
	CHECK(stats_of(ctx).direct_regs == st.direct_regs + 1 && odpx_mr_addr(mr) ==
	      region + REGION - 2 * PG && odpx_mr_length(mr) == 4 * PG,
	      "a request across the region's end: %p+%zu, direct_regs %lu -> %lu",
	      odpx_mr_addr(mr), odpx_mr_length(mr), (unsigned long)st.direct_regs,
	      (unsigned long)stats_of(ctx).direct_regs);
	CHECK(data_check(ctx, mr, region + REGION - 2 * PG, 4 * PG, 5), "across: wrong bytes");
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	hits_inside(ctx, region, REGION, "after a request across its end");
	printf("a request across its end: served beside it: ok\n");

	/* unmapped and mapped again: made again at the next use, with the new pages */
	CHECK(munmap(region, REGION) == 0, "munmap");
	CHECK(map_anon(region, REGION) == region, "mmap at the same address");
	st = stats_of(ctx);
	CHECK_RC(odpx_reg(ctx, region + 4 * PG, 8 * PG, 0, &mr), 0);
	struct odpx_stats s1 = stats_of(ctx);
	CHECK(s1.prereg_repins == st.prereg_repins + 1, "prereg_repins %lu -> %lu, want +1",
	      (unsigned long)st.prereg_repins, (unsigned long)s1.prereg_repins);
	CHECK(odpx_mr_addr(mr) == region && odpx_mr_length(mr) == REGION,
	      "served by %p+%zu, not the region made again", odpx_mr_addr(mr), odpx_mr_length(mr));
	CHECK(data_check(ctx, mr, region + 4 * PG, 8 * PG, 11), "the registration has old pages");
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	flood_all(ctx);
	hits_inside(ctx, region, REGION, "made again, after a flood");
	/* the old pages are unpinned: VmPin is what the cache counts */
	CHECK(WAIT_FOR(vm_pinned_kb() - pin0 == (long)(stats_of(ctx).pinned_bytes / 1024), 20),
	      "VmPin %ld kB over the baseline, the cache counts %lu kB", vm_pinned_kb() - pin0,
	      (unsigned long)(stats_of(ctx).pinned_bytes / 1024));
	printf("unmapped and mapped again: made again with the new pages: ok\n");

	/* later, and released */
	CHECK_RC(odpx_prereg_add(ctx, region2, 8 * PG, 0), 0);
	CHECK_RC(odpx_prereg_add(ctx, region2, 8 * PG, 0), -EEXIST);
	flood_all(ctx);
	hits_inside(ctx, region2, 8 * PG, "added later, after a flood");
	CHECK_RC(odpx_prereg_release(ctx, region2, 8 * PG, 0), 0);
	CHECK_RC(odpx_prereg_release(ctx, region2, 8 * PG, 0), -ENOENT);
	flood_all(ctx);
	st = stats_of(ctx);
	CHECK_RC(odpx_reg(ctx, region2, 8 * PG, 0, &mr), 0);
	CHECK(stats_of(ctx).pins == st.pins + 1, "a released region was not evicted by a flood");
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	hits_inside(ctx, region, REGION, "the other released");
	printf("added later, released: an ordinary entry again: ok\n");

	CHECK_RC(odpx_close(ctx), 0);
	CHECK(vm_pinned_kb() == pin0, "VmPin %ld kB after close, %ld before", vm_pinned_kb(), pin0);

	/* direct mode keeps nothing */
	struct odpx_attr d = { .comp_mask = ODPX_ATTR_MODE | ODPX_ATTR_PREREG, .mode = ODPX_MODE_DIRECT,
			       .prereg = &pr, .nprereg = 1 };
	CHECK_RC(odpx_open_uring(&d, &ctx), -EOPNOTSUPP);
	d.comp_mask &= ~(uint64_t)ODPX_ATTR_PREREG;
	CHECK_RC(odpx_open_uring(&d, &ctx), 0);
	CHECK_RC(odpx_prereg_add(ctx, region, PG, 0), -EOPNOTSUPP);
	CHECK_RC(odpx_close(ctx), 0);
	d.comp_mask = ODPX_ATTR_PREREG;
	d.nprereg = 65;
	CHECK_RC(odpx_open_uring(&d, &ctx), -EINVAL);
	CHECK(vm_pinned_kb() == pin0, "VmPin %ld kB at the end, %ld before", vm_pinned_kb(), pin0);
	printf("direct mode refuses, close releases all: ok\n");
	return 0;
}
