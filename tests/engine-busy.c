// SPDX-License-Identifier: MIT
/*
 * engine-busy: an engine that always has work.
 *
 * This program's io_uring_register_buffers_update_tag() (libodpx.a's pins
 * bind to it; the real one is liburing's) acts on the engine thread's pins
 * while `mode` says so:
 *   - FEED: each pin queues the next hint, a page not pinned lately, so the
 *     engine finds work after every pass and never sleeps.  Its ticks must
 *     go on: the engine looked at its ring only after a sleep, so no tick
 *     came (no trim, no counter sample) for as long as the work lasted.
 *   - SLOW: each pin takes 20 ms, as a pin of never-touched memory does.
 *     engine_stop() (odpx_close()'s first step) with a batch of 200 hints
 *     taken must return after the pin under way, the rest dropped and
 *     counted: it waited for the whole batch (4 s here; 1 to 22 s measured
 *     with real pins of 8 MiB each).
 * Each case runs in a child whose alarm() is the deadline of a hang.
 */
#include <dlfcn.h>
#include <liburing.h>

#include "test.h"
#include "odpx-private.h"	/* engine_stop, engine_asleep */

#define PG 4096UL
#define U(x) ((unsigned long)(x))
#define FEED_PAGES 4096	/* hinted in turn, every other page of feed_buf */
#define SLOW_MS 20

enum { OFF, FEED, SLOW };
static _Atomic int mode;
static atomic_uint engine_pins;	/* seen in mode FEED or SLOW */
static struct odpx_ctx *fed;
static unsigned char *feed_buf;

static bool on_engine(void)
{
	char name[16] = "";

	pthread_getname_np(pthread_self(), name, sizeof(name));
	return !strcmp(name, "odpx-engine");
}

static int (*real_update)(struct io_uring *, unsigned, const struct iovec *, const __u64 *, unsigned);

/* before main(): every thread finds it set */
__attribute__((constructor)) static void find_real(void)
{
	real_update = (int (*)(struct io_uring *, unsigned, const struct iovec *, const __u64 *,
			       unsigned))dlsym(RTLD_NEXT, "io_uring_register_buffers_update_tag");
}

int io_uring_register_buffers_update_tag(struct io_uring *ring, unsigned off,
					 const struct iovec *iov, const __u64 *tags, unsigned nr)
{
	int m = atomic_load(&mode);

	if (m != OFF && on_engine()) {
		unsigned n = atomic_fetch_add(&engine_pins, 1);

		if (m == FEED) {
			odpx_prefetch(fed, feed_buf + 2 * ((n + 1) % FEED_PAGES) * PG, PG, 0);
		} else {
			struct timespec t = { 0, SLOW_MS * 1000000L };
			nanosleep(&t, NULL);
		}
	}
	return real_update(ring, off, iov, tags, nr);
}

static struct odpx_ctx *open_limited(uint32_t tick_ms)
{
	struct odpx_attr a = { .comp_mask = ODPX_ATTR_LIMITS | ODPX_ATTR_TICK, .tick_ms = tick_ms };
	struct odpx_ctx *ctx;

	a.limits.max_pinned_bytes = 256 * PG;
	a.limits.max_unused_bytes = 16 * PG;
	CHECK_RC(odpx_open_uring(&a, &ctx), 0);
	return ctx;
}

/* The engine fed a hint by each of its pins: 1 s of work with no sleep, 10 ms ticks. */
static int busy_ticks(void *arg)
{
	struct odpx_stats s0, s1;
	double t0, secs;

	(void)arg;
	alarm(60);
	feed_buf = map_anon(NULL, 2 * FEED_PAGES * PG);
	memset(feed_buf, 1, 2 * FEED_PAGES * PG);
	fed = open_limited(10);
	CHECK_RC(odpx_prefetch(fed, feed_buf + (2 * FEED_PAGES - 1) * PG, PG, 0), 0);
	CHECK(WAIT_FOR(stats_of(fed).prefetch_issued == 1 && engine_asleep(fed), 5),
	      "the first hint was not served");
	atomic_store(&mode, FEED);
	CHECK_RC(odpx_prefetch(fed, feed_buf, PG, 0), 0);
	CHECK(WAIT_FOR(atomic_load(&engine_pins) >= 100, 5), "the engine is not fed");
	s0 = stats_of(fed);
	t0 = now_s();
	CHECK(WAIT_FOR(now_s() - t0 >= 1.0, 2), "clock");
	s1 = stats_of(fed);
	secs = now_s() - t0;
	atomic_store(&mode, OFF);
	printf("1 s of a fed engine: %lu hints issued, %lu ticks, %lu wakeups, %lu lingers\n",
	       U(s1.prefetch_issued - s0.prefetch_issued), U(s1.engine_ticks - s0.engine_ticks),
	       U(s1.engine_wakeups - s0.engine_wakeups), U(s1.engine_lingers - s0.engine_lingers));
	CHECK(s1.prefetch_issued - s0.prefetch_issued >= 100, "the engine was not busy: %lu hints in %.2f s",
	      U(s1.prefetch_issued - s0.prefetch_issued), secs);
	/* the work never ran out: a tick would have come with any sleep */
	CHECK(s1.engine_wakeups == s0.engine_wakeups && s1.engine_lingers == s0.engine_lingers,
	      "the fed engine slept: wakeups +%lu, lingers +%lu", U(s1.engine_wakeups - s0.engine_wakeups),
	      U(s1.engine_lingers - s0.engine_lingers));
	CHECK(s1.engine_ticks - s0.engine_ticks >= 10,
	      "%lu ticks in %.2f s of a 10 ms tick while the engine always had work",
	      U(s1.engine_ticks - s0.engine_ticks), secs);
	CHECK(WAIT_FOR(engine_asleep(fed), 5), "the engine did not sleep once fed no more");
	CHECK_RC(odpx_close(fed), 0);
	munmap(feed_buf, 2 * FEED_PAGES * PG);
	return 0;
}

#define BATCH_HINTS 200

/* engine_stop() while the engine pre-pins a batch of 200 hints, 20 ms each. */
static int stop_in_batch(void *arg)
{
	unsigned char *p = map_anon(NULL, 2 * (BATCH_HINTS + 1) * PG);
	struct odpx_ctx *ctx;
	struct odpx_stats s0, s1;
	double t0, took;

	(void)arg;
	alarm(60);
	memset(p, 1, 2 * (BATCH_HINTS + 1) * PG);
	ctx = open_limited(100);
	CHECK_RC(odpx_prefetch(ctx, p + 2 * BATCH_HINTS * PG, PG, 0), 0);
	CHECK(WAIT_FOR(stats_of(ctx).prefetch_issued == 1 && engine_asleep(ctx), 5),
	      "the first hint was not served");
	s0 = stats_of(ctx);
	atomic_store(&mode, SLOW);
	/* a batch of one, then the other 199 queued while its pin takes 20 ms */
	CHECK_RC(odpx_prefetch(ctx, p, PG, 0), 0);
	CHECK(WAIT_FOR(atomic_load(&engine_pins) >= 1, 5), "the engine did not pin the hint");
	for (unsigned i = 1; i < BATCH_HINTS; i++)
		CHECK_RC(odpx_prefetch(ctx, p + 2 * i * PG, PG, 0), 0);
	CHECK(WAIT_FOR(atomic_load(&engine_pins) >= 3, 5), "the engine did not take the batch");
	t0 = now_s();
	engine_stop(ctx);	/* odpx_close()'s first step */
	took = now_s() - t0;
	s1 = stats_of(ctx);
	atomic_store(&mode, OFF);
	printf("engine_stop during a batch of %d pins of %d ms: %.0f ms, %lu issued, %lu dropped\n",
	       BATCH_HINTS - 1, SLOW_MS, took * 1e3, U(s1.prefetch_issued - s0.prefetch_issued),
	       U(s1.prefetch_dropped - s0.prefetch_dropped));
	CHECK(took < 1.0, "engine_stop took %.2f s: it waited for the batch (%lu hints issued)", took,
	      U(s1.prefetch_issued - s0.prefetch_issued));
	/* every hint of the batch accounted for: issued or dropped, none left */
	CHECK(s1.prefetch_queued - s0.prefetch_queued == BATCH_HINTS &&
	      s1.prefetch_issued - s0.prefetch_issued + s1.prefetch_dropped - s0.prefetch_dropped +
	      s1.prefetch_failed - s0.prefetch_failed + s1.prefetch_merged - s0.prefetch_merged == BATCH_HINTS,
	      "queued +%lu, issued +%lu, dropped +%lu, failed +%lu, merged +%lu: want %d in all",
	      U(s1.prefetch_queued - s0.prefetch_queued), U(s1.prefetch_issued - s0.prefetch_issued),
	      U(s1.prefetch_dropped - s0.prefetch_dropped), U(s1.prefetch_failed - s0.prefetch_failed),
	      U(s1.prefetch_merged - s0.prefetch_merged), BATCH_HINTS);
	CHECK(s1.prefetch_dropped - s0.prefetch_dropped >= BATCH_HINTS - 10, "only %lu hints dropped",
	      U(s1.prefetch_dropped - s0.prefetch_dropped));
	CHECK_RC(odpx_close(ctx), 0);
	munmap(p, 2 * (BATCH_HINTS + 1) * PG);
	return 0;
}

int main(void)
{
	static const struct {
		const char *what;
		int (*fn)(void *);
	} cases[] = {
		{ "ticks of an engine that always has work", busy_ticks },
		{ "engine_stop in a batch of pre-pins", stop_in_batch },
	};

	for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int st = run_forked(NULL, cases[i].fn, NULL);

		CHECK(st != 128 + SIGALRM, "%s: not done in 60 s (hung)", cases[i].what);
		CHECK(st == 0, "%s: failed", cases[i].what);
		printf("%s: ok\n", cases[i].what);
	}
	return 0;
}
