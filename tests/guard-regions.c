// SPDX-License-Identifier: MIT
/*
 * guard-regions: madvise(MADV_GUARD_INSTALL) (Linux 6.13+) drops the pages of
 * its range and raises no userfaultfd event, so the monitor cannot see it;
 * odpx_invalidate() is how the application says so.
 *
 *   unseen    cache a range, install then remove guards over it: the next
 *             odpx_reg is a hit on the old pages, and the data check through
 *             them fails.  This is the limit the README states, and the
 *             proof that the check can fail; should a kernel ever report
 *             guard installs, it fails and the README must change.
 *   after     the same, with odpx_invalidate() after the install: a miss,
 *             the right pages, the entry counted as invalidated.
 *   before    odpx_invalidate() before the install: the same, the next
 *             registration served direct (the REMOVE quarantine).
 *   held      a registration held across the install and the call stays
 *             valid; once released its pages are unpinned (VmPin).
 *   contexts  one call reaches every pin-mode context of the process.
 *   bad input -EINVAL, and nothing invalidated.
 */
#include "test.h"

#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102
#define MADV_GUARD_REMOVE 103
#endif

#define LEN (256 * 1024)
#define QUARANTINE_S 0.1	/* ODPX_REMOVE_QUARANTINE_MS, set by main() */
#define BEFORE_ROUNDS 5

static double reg_at;	/* when reg_check's odpx_reg returned */

static void guard(void *p, size_t len)
{
	CHECK(madvise(p, len, MADV_GUARD_INSTALL) == 0, "MADV_GUARD_INSTALL: %s", strerror(errno));
	CHECK(madvise(p, len, MADV_GUARD_REMOVE) == 0, "MADV_GUARD_REMOVE: %s", strerror(errno));
}

/* Register p, check the data, release: the range is then cached. */
static void cache_range(struct odpx_ctx *ctx, void *p, unsigned seed)
{
	struct odpx_mr *mr;
	struct odpx_stats st0, st1;

	CHECK_RC(odpx_reg(ctx, p, LEN, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
	CHECK(data_check(ctx, mr, p, LEN, seed), "data check before the guards failed");
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	st0 = stats_of(ctx);
	CHECK_RC(odpx_reg(ctx, p, LEN, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
	st1 = stats_of(ctx);
	CHECK(st1.hits == st0.hits + 1, "the second odpx_reg is not a hit");
	CHECK_RC(odpx_dereg(ctx, mr), 0);
}

/*
 * odpx_reg p again; 1 when the data moves through its current pages.  *st:
 * the counters after it, with hits, misses and direct_racing as differences.
 */
static int reg_check(struct odpx_ctx *ctx, void *p, unsigned seed, struct odpx_stats *st)
{
	struct odpx_mr *mr;
	struct odpx_stats st0 = stats_of(ctx);
	int ok;

	CHECK_RC(odpx_reg(ctx, p, LEN, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
	reg_at = now_s();
	ok = data_check(ctx, mr, p, LEN, seed);
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	*st = stats_of(ctx);
	st->hits -= st0.hits;
	st->misses -= st0.misses;
	st->direct_racing -= st0.direct_racing;
	return ok;
}

/* Wait for the REMOVE quarantine of p to end: a registration is cached again. */
static void quarantine_over(struct odpx_ctx *ctx, void *p, unsigned seed)
{
	struct odpx_stats st;

	CHECK(WAIT_FOR(reg_check(ctx, p, seed, &st) && st.direct_racing == 0, 2.0),
	      "the range is still served direct 2 s after the invalidation");
}

int main(void)
{
	struct odpx_ctx *ctx, *ctx2;
	char *p = map_anon(NULL, LEN), *q = map_anon(NULL, LEN);
	struct odpx_stats st, st0;
	struct odpx_mr *mr, *mr2;
	int inconclusive = 0;
	double t0;
	long pin0;

	setenv("ODPX_REMOVE_QUARANTINE_MS", "100", 1);	/* QUARANTINE_S, whatever the caller set */
	ctx = open_pin(0);

	if (madvise(q, 4096, MADV_GUARD_INSTALL) && errno == EINVAL)
		SKIP("this kernel has no MADV_GUARD_INSTALL (Linux 6.13+): nothing to invalidate");
	CHECK(madvise(q, 4096, MADV_GUARD_REMOVE) == 0, "MADV_GUARD_REMOVE: %s", strerror(errno));
	memset(p, 0x5a, LEN);
	pin0 = vm_pinned_kb();

	/* unseen: the kernel tells nobody, the old pages stay cached */
	cache_range(ctx, p, 1);
	guard(p, LEN);
	CHECK(!reg_check(ctx, p, 3, &st), "unseen: the data check passed after a guard install "
	      "odpx was not told of (hits %lu): does the kernel report it now?", (unsigned long)st.hits);
	CHECK(st.hits == 1, "unseen: not served from the cache (%lu hits)", (unsigned long)st.hits);
	printf("unseen    stale, as documented: the kernel raises no event\n");

	/* after: the stale entry above is still cached; the call kills it */
	guard(p, LEN);
	st0 = stats_of(ctx);
	CHECK_RC(odpx_invalidate(ctx, p, LEN), 1);
	CHECK(reg_check(ctx, p, 5, &st), "after: stale data after odpx_invalidate");
	CHECK(st.hits == 0 && st.misses == 1, "after: %lu hits, %lu misses, want a miss",
	      (unsigned long)st.hits, (unsigned long)st.misses);
	CHECK(st.inval_api == st0.inval_api + 1 && st.inval_entries == st0.inval_entries + 1,
	      "after: inval_api +%lu, inval_entries +%lu, want +1 each",
	      (unsigned long)(st.inval_api - st0.inval_api),
	      (unsigned long)(st.inval_entries - st0.inval_entries));
	printf("after     ok (a miss, %lu served direct)\n", (unsigned long)st.direct_racing);

	/*
	 * before: the quarantine keeps the next registration out of the cache.
	 * A registration later than the quarantine after the call (a slow
	 * machine) is rightly cached: the round proves nothing, and runs again.
	 */
	for (;;) {
		quarantine_over(ctx, p, 7);
		cache_range(ctx, p, 9);
		t0 = now_s();
		CHECK_RC(odpx_invalidate(ctx, p + 4096, 4096), 1);	/* any overlap kills the entry */
		guard(p, LEN);
		CHECK(reg_check(ctx, p, 11, &st), "before: stale data");
		if (reg_at - t0 < QUARANTINE_S)
			break;
		printf("before    inconclusive round: the registration came %.0f ms after the call,"
		       " over the %.0f ms quarantine\n", (reg_at - t0) * 1e3, QUARANTINE_S * 1e3);
		CHECK(++inconclusive < BEFORE_ROUNDS, "before: no conclusive round in %d", BEFORE_ROUNDS);
	}
	CHECK(st.hits == 0 && st.direct_racing == 1, "before: %lu hits, %lu direct, want 0 and 1",
	      (unsigned long)st.hits, (unsigned long)st.direct_racing);
	printf("before    ok (served direct; %d inconclusive round%s before)\n", inconclusive,
	       inconclusive == 1 ? "" : "s");

	/* held: the handle outlives the invalidation, the pages go with it */
	quarantine_over(ctx, p, 13);
	CHECK_RC(odpx_reg(ctx, p, LEN, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
	CHECK(madvise(p, LEN, MADV_GUARD_INSTALL) == 0, "MADV_GUARD_INSTALL: %s", strerror(errno));
	CHECK_RC(odpx_invalidate(ctx, p, LEN), 1);
	CHECK(odpx_mr_addr(mr) == p && odpx_mr_length(mr) >= LEN, "held: the handle changed");
	CHECK(vm_pinned_kb() >= pin0 + LEN / 1024, "held: pages unpinned while held");
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	CHECK(WAIT_FOR(vm_pinned_kb() == pin0, 3.0), "held: VmPin %ld kB, want %ld after the release",
	      vm_pinned_kb(), pin0);
	CHECK_RC(odpx_dereg(ctx, mr), -EINVAL);	/* released: detected */
	CHECK(madvise(p, LEN, MADV_GUARD_REMOVE) == 0, "MADV_GUARD_REMOVE: %s", strerror(errno));
	printf("held      ok\n");

	/* contexts: two caches of the same range, one call */
	ctx2 = open_pin(0);
	quarantine_over(ctx, p, 15);
	cache_range(ctx, p, 17);
	cache_range(ctx2, p, 19);
	guard(p, LEN);
	st0 = stats_of(ctx);
	CHECK_RC(odpx_invalidate(ctx2, p, LEN), 2);
	CHECK(stats_of(ctx).inval_api == st0.inval_api + 1 && stats_of(ctx2).inval_api == 1,
	      "contexts: the call did not reach both");
	CHECK(reg_check(ctx, p, 21, &st) && st.hits == 0, "contexts: the first context kept its entry");
	CHECK(reg_check(ctx2, p, 23, &st) && st.hits == 0, "contexts: the second context kept its entry");
	CHECK_RC(odpx_close(ctx2), 0);
	printf("contexts  ok\n");

	/* bad input: -EINVAL, nothing lost */
	quarantine_over(ctx, p, 25);
	cache_range(ctx, p, 27);
	st0 = stats_of(ctx);
	CHECK_RC(odpx_invalidate(NULL, p, LEN), -EINVAL);
	CHECK_RC(odpx_invalidate(ctx, NULL, LEN), -EINVAL);
	CHECK_RC(odpx_invalidate(ctx, p, 0), -EINVAL);
	CHECK_RC(odpx_invalidate(ctx, p, SIZE_MAX), -EINVAL);
	CHECK_RC(odpx_invalidate(ctx, (void *)(UINTPTR_MAX - 4095), 1), -EINVAL);
	CHECK_RC(odpx_invalidate(ctx, q, LEN), 0);	/* nothing cached there */
	CHECK_RC(odpx_reg(ctx, p, LEN, ODPX_ACCESS_LOCAL_WRITE, &mr2), 0);
	CHECK(stats_of(ctx).hits == st0.hits + 1, "bad input: the cached entry was lost");
	CHECK_RC(odpx_dereg(ctx, mr2), 0);
	printf("bad input ok\n");

	CHECK_RC(odpx_close(ctx), 0);
	CHECK(WAIT_FOR(vm_pinned_kb() == pin0, 3.0), "VmPin %ld kB after close, want %ld",
	      vm_pinned_kb(), pin0);
	return 0;
}
