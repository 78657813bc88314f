// SPDX-License-Identifier: MIT
/*
 * remove-quarantine: userfaultfd queues REMOVE (MADV_DONTNEED) before the
 * pages are zapped and says nothing when the zap ends, so a registration
 * taken right after the event may pin pages that are about to be dropped.
 * Such a miss is served direct (counted in direct_racing), never cached;
 * once the quarantine has passed, the range is cached again.  The data is
 * right either way.  (tests/concurrency.c shows the race itself: with
 * ODPX_REMOVE_QUARANTINE_MS=0 and racing DONTNEEDs it finds stale entries.)
 * The quarantine holds however many other events follow the REMOVE within
 * it: 300 DONTNEEDs of another range in between do not let the first
 * range be cached.
 */
#include "test.h"

#define LEN (64 * 1024)

/* A REMOVE followed, within the quarantine, by 300 other events. */
static void flood(void)
{
	struct odpx_ctx *ctx = open_pin(0);
	struct odpx_mr *mr;
	struct odpx_stats a, b;
	char *p = map_anon(NULL, LEN), *q = map_anon(NULL, LEN);

	memset(p, 1, LEN);
	memset(q, 1, LEN);
	CHECK_RC(odpx_reg(ctx, q, LEN, 0, &mr), 0);	/* watched: its DONTNEEDs are events */
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	CHECK_RC(odpx_reg(ctx, p, LEN, 0, &mr), 0);
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	a = stats_of(ctx);
	CHECK(madvise(p, LEN, MADV_DONTNEED) == 0, "madvise");
	for (int i = 0; i < 300; i++)
		CHECK(madvise(q, 4096, MADV_DONTNEED) == 0, "madvise");
	/* madvise returns once the event is read; the count follows its apply */
	CHECK(WAIT_FOR((b = stats_of(ctx)).inval_remove >= a.inval_remove + 301, 2),
	      "%lu REMOVE events, want 301", (unsigned long)(b.inval_remove - a.inval_remove));
	CHECK_RC(odpx_reg(ctx, p, LEN, 0, &mr), 0);
	b = stats_of(ctx);
	CHECK(b.direct_racing == a.direct_racing + 1,
	      "a miss 300 events after the range's DONTNEED, within the quarantine, was cached");
	CHECK(data_check(ctx, mr, p, LEN, 4), "data through the quarantined registration");
	CHECK_RC(odpx_dereg(ctx, mr), 0);

	/* once the ring has aged out, the range is cached again */
	double until = now_s() + 0.25;
	CHECK(WAIT_FOR(now_s() > until, 1), "clock");
	a = stats_of(ctx);
	CHECK_RC(odpx_reg(ctx, p, LEN, 0, &mr), 0);
	b = stats_of(ctx);
	CHECK(b.direct_racing == a.direct_racing && b.entries == a.entries + 1,
	      "not cached after the flood aged out (direct_racing +%lu, entries +%lu)",
	      (unsigned long)(b.direct_racing - a.direct_racing), (unsigned long)(b.entries - a.entries));
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	CHECK_RC(odpx_close(ctx), 0);
}

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
	flood();
	return 0;
}
