// SPDX-License-Identifier: MIT
/*
 * remove-quarantine: userfaultfd queues REMOVE (MADV_DONTNEED) before the
 * pages are zapped and says nothing when the zap ends, so a registration
 * taken right after the event may pin pages that are about to be dropped.
 * Such a miss is served direct (counted in direct_racing), never cached;
 * once the quarantine has passed, the range is cached again.  The data is
 * right either way.  (tests/concurrency.c shows the race itself: with
 * ODPX_REMOVE_QUARANTINE_MS=0 and racing DONTNEEDs it finds stale entries.)
 */
#include "test.h"

#define LEN (64 * 1024)

int main(void)
{
	struct odpx_ctx *ctx;
	struct odpx_mr *mr;
	struct odpx_stats a, b;
	char *p = map_anon(NULL, LEN);

	setenv("ODPX_REMOVE_QUARANTINE_MS", "200", 1);
	ctx = open_pin(0);
	memset(p, 1, LEN);
	CHECK_RC(odpx_reg(ctx, p, LEN, 0, &mr), 0);
	CHECK_RC(odpx_dereg(ctx, mr), 0);

	CHECK(madvise(p, LEN, MADV_DONTNEED) == 0, "madvise");
	CHECK(WAIT_FOR(stats_of(ctx).entries == 0, 5), "the engine did not unpin the dead entry");
	a = stats_of(ctx);
	CHECK_RC(odpx_reg(ctx, p, LEN, 0, &mr), 0);
	b = stats_of(ctx);
	CHECK(b.direct_racing == a.direct_racing + 1, "a miss right after DONTNEED was cached");
	CHECK(data_check(ctx, mr, p, LEN, 2), "data through the quarantined registration");
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	CHECK(stats_of(ctx).entries == a.entries, "the direct registration was not released");

	/* after the quarantine the range is cached again */
	double until = now_s() + 0.25;
	CHECK(WAIT_FOR(now_s() > until, 1), "clock");
	CHECK_RC(odpx_reg(ctx, p, LEN, 0, &mr), 0);
	CHECK(data_check(ctx, mr, p, LEN, 3), "data after the quarantine");
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	b = stats_of(ctx);
	CHECK(b.direct_racing == a.direct_racing + 1 && b.entries == a.entries + 1,
	      "not cached after the quarantine (direct_racing %lu, entries %lu)",
	      (unsigned long)b.direct_racing, (unsigned long)b.entries);
	CHECK_RC(odpx_close(ctx), 0);
	return 0;
}
