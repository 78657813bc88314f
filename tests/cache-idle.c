// SPDX-License-Identifier: MIT
/*
 * cache-idle: idle release (ODPX_ATTR_IDLE, ODPX_IDLE_MS) on the uring
 * backend, pin mode.
 *
 * - with a short idle time, the engine releases the unused entries and
 *   keeps the held ones: idle_released and unpins count the released,
 *   entries and VmPin drop to the held ones, evictions stay 0;
 * - a held registration still moves the right bytes afterwards, and a
 *   later request for a released range registers it again (a miss and a
 *   pin);
 * - an entry used again before its idle time runs out is not released
 *   with the others that were not (it is stamped at its release);
 * - idle_ms 0 releases nothing, however many ticks pass;
 * - ODPX_IDLE_MS sets the default; out of bounds it fails the open.
 */
#include "test.h"

#define PG 4096UL
#define N 6

static unsigned char *buf;

static struct odpx_ctx *open_idle(uint32_t idle_ms)
{
	struct odpx_attr at = { .comp_mask = ODPX_ATTR_IDLE | ODPX_ATTR_TICK,
				.idle_ms = idle_ms, .tick_ms = 10 };
	struct odpx_ctx *ctx;

	CHECK_RC(odpx_open_uring(&at, &ctx), 0);
	return ctx;
}

int main(void)
{
	long pin0 = vm_pinned_kb();
	struct odpx_mr *mr[N];
	struct odpx_stats s0, st;
	struct odpx_ctx *ctx;

	CHECK(pin0 >= 0, "no VmPin in /proc/self/status");
	buf = map_anon(NULL, N * 4 * PG);
	memset(buf, 1, N * 4 * PG);

	ctx = open_idle(300);
	for (int i = 0; i < N; i++)
		CHECK_RC(odpx_reg(ctx, buf + i * 4 * PG, 4 * PG, 0, &mr[i]), 0);
	for (int i = 0; i < N / 2; i++)	/* the first half unused, the rest held */
		CHECK_RC(odpx_dereg(ctx, mr[i]), 0);
	s0 = stats_of(ctx);
	CHECK(WAIT_FOR(stats_of(ctx).idle_released >= N / 2, 20),
	      "idle_released %lu after 20 s, want %d", (unsigned long)stats_of(ctx).idle_released,
	      N / 2);
	CHECK(WAIT_FOR(stats_of(ctx).unpins == s0.unpins + N / 2, 10), "unpins");
	st = stats_of(ctx);
	CHECK(st.idle_released == N / 2 && st.entries == N - N / 2 && st.evictions == 0 &&
	      st.pinned_bytes == (N - N / 2) * 4 * PG,
	      "idle_released %lu entries %lu evictions %lu pinned %lu",
	      (unsigned long)st.idle_released, (unsigned long)st.entries,
	      (unsigned long)st.evictions, (unsigned long)st.pinned_bytes);
	CHECK(vm_pinned_kb() - pin0 == (long)((N - N / 2) * 4 * PG / 1024), "VmPin %ld kB",
	      vm_pinned_kb() - pin0);
	for (int i = N / 2; i < N; i++)
		CHECK(data_check(ctx, mr[i], buf + i * 4 * PG, 4 * PG, (unsigned)i),
		      "a held registration moved the wrong bytes");
	/* a released range registers again */
	s0 = stats_of(ctx);
	CHECK_RC(odpx_reg(ctx, buf, 4 * PG, 0, &mr[0]), 0);
	st = stats_of(ctx);
	CHECK(st.misses == s0.misses + 1 && st.pins == s0.pins + 1, "no re-registration");
	CHECK(data_check(ctx, mr[0], buf, 4 * PG, 7), "the new registration moved the wrong bytes");
	for (int i = 0; i < N; i++)
		if (i == 0 || i >= N / 2)
			CHECK_RC(odpx_dereg(ctx, mr[i]), 0);
	printf("short idle time: unused entries go, held ones stay, a later use re-registers: ok\n");

	/*
	 * Released all; keep one in use by taking and releasing it while the
	 * others age: when they are gone, it is still there (its release is
	 * newer than theirs by far more than the idle time's step).
	 */
	s0 = stats_of(ctx);
	uint64_t aging = s0.entries;	/* 0, 3, 4, 5; 1 is taken again below */
	CHECK(aging == 4, "entries %lu before aging, want 4", (unsigned long)aging);
	double until = now_s() + 60;
	struct odpx_stats cur;
	while ((cur = stats_of(ctx)).idle_released < s0.idle_released + aging && now_s() < until) {
		struct odpx_mr *m;
		CHECK_RC(odpx_reg(ctx, buf + 4 * PG, 4 * PG, 0, &m), 0);
		CHECK_RC(odpx_dereg(ctx, m), 0);
		struct timespec t = { 0, 5000000 };
		nanosleep(&t, NULL);
	}
	CHECK(cur.idle_released == s0.idle_released + aging,
	      "idle_released +%lu, want %lu (all but the one in use)",
	      (unsigned long)(cur.idle_released - s0.idle_released), (unsigned long)aging);
	CHECK(cur.entries == 1, "entries %lu, want the one in use", (unsigned long)cur.entries);
	s0 = stats_of(ctx);
	CHECK_RC(odpx_reg(ctx, buf + 4 * PG, 4 * PG, 0, &mr[1]), 0);
	CHECK(stats_of(ctx).pins == s0.pins, "the entry in use was released");
	CHECK_RC(odpx_dereg(ctx, mr[1]), 0);
	CHECK_RC(odpx_close(ctx), 0);
	printf("an entry in use outlives the idle ones: ok\n");

	/* off */
	ctx = open_idle(0);
	CHECK_RC(odpx_reg(ctx, buf, 4 * PG, 0, &mr[0]), 0);
	CHECK_RC(odpx_dereg(ctx, mr[0]), 0);
	s0 = stats_of(ctx);
	CHECK(WAIT_FOR(stats_of(ctx).engine_ticks >= s0.engine_ticks + 50, 30), "no ticks");
	st = stats_of(ctx);
	CHECK(st.idle_released == 0 && st.entries == 1, "idle_ms 0 released %lu",
	      (unsigned long)st.idle_released);
	CHECK_RC(odpx_close(ctx), 0);

	/* the environment */
	struct odpx_caps c = { .comp_mask = ODPX_QUERY_LIMITS };
	setenv("ODPX_IDLE_MS", "1234", 1);
	CHECK_RC(odpx_open_uring(NULL, &ctx), 0);
	CHECK_RC(odpx_query(ctx, &c), 0);
	CHECK(c.idle_ms == 1234, "ODPX_IDLE_MS=1234: idle_ms %u", c.idle_ms);
	CHECK_RC(odpx_close(ctx), 0);
	unsetenv("ODPX_IDLE_MS");
	CHECK_RC(odpx_open_uring(NULL, &ctx), 0);
	c.comp_mask = ODPX_QUERY_LIMITS;
	CHECK_RC(odpx_query(ctx, &c), 0);
	CHECK(c.idle_ms == 300000, "default idle_ms %u", c.idle_ms);
	CHECK_RC(odpx_close(ctx), 0);
	setenv("ODPX_IDLE_MS", "x", 1);
	CHECK_RC(odpx_open_uring(NULL, &ctx), -EINVAL);
	unsetenv("ODPX_IDLE_MS");
	CHECK(vm_pinned_kb() == pin0, "VmPin %ld kB at the end, %ld before", vm_pinned_kb(), pin0);
	printf("idle_ms 0 releases nothing; ODPX_IDLE_MS: ok\n");
	return 0;
}
