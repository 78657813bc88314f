// SPDX-License-Identifier: MIT
/*
 * stats-thrash-pin: a pin-mode working set larger than max_pinned_bytes,
 * cycled, drives the library's detector to THRASH (decided by evictions
 * followed by misses), reported in odpx_stats_read(), by odpstat -p, and to
 * the callback of the open attributes on the engine thread; shrinking the
 * working set below the limit brings it back to OK.
 *
 * Windows of 100 ms (ODPX_THRASH=window_ms=100) on a 20 ms tick; every wait
 * is on the state with a deadline.
 */
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/wait.h>

#include "test.h"

#define PG 4096UL
#define LIMIT_PAGES 16

static _Atomic int phase;	/* 0 big working set, 1 small, 2 stop */
static _Atomic int cb_calls, cb_thrash, cb_ok;
static _Atomic int cb_metric;
static pthread_t engine_thread_seen;
static struct odpx_ctx *the_ctx;

static void on_thrash(struct odpx_ctx *ctx, const struct odpx_thrash_event *ev, void *arg)
{
	CHECK(ctx == the_ctx && arg == &cb_calls, "callback arguments");
	CHECK(ev->state != ev->prev, "an event without a change");
	engine_thread_seen = pthread_self();
	atomic_fetch_add(&cb_calls, 1);
	if (ev->state == ODPX_THRASH_THRASH) {
		atomic_fetch_add(&cb_thrash, 1);
		atomic_store(&cb_metric, ev->metric);
	}
	if (ev->state == ODPX_THRASH_OK)
		atomic_fetch_add(&cb_ok, 1);
}

static void *worker(void *arg)
{
	unsigned char *buf = arg;
	unsigned i = 0;

	while (atomic_load(&phase) != 2) {
		/* one page every other page: entries never merge */
		unsigned n = atomic_load(&phase) == 0 ? 2 * LIMIT_PAGES : LIMIT_PAGES / 2;
		struct odpx_mr *mr;
		CHECK_RC(odpx_reg(the_ctx, buf + (size_t)(i % n) * 2 * PG, PG, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
		CHECK_RC(odpx_dereg(the_ctx, mr), 0);
		i++;
	}
	return NULL;
}

static int odpstat_state(const char *want)
{
	char cmd[4400], out[1 << 16], key[64];
	FILE *p;
	size_t m;

	snprintf(cmd, sizeof(cmd), "%s -p %d --json --once 0.05", odpstat_path(), (int)getpid());
	CHECK((p = popen(cmd, "r")), "popen");
	m = fread(out, 1, sizeof(out) - 1, p);
	out[m] = 0;
	CHECK(pclose(p) == 0, "odpstat failed: %s", out);
	snprintf(key, sizeof(key), "\"thrash_state\":\"%s\"", want);
	return strstr(out, key) != NULL;
}

int main(void)
{
	struct odpx_attr a = {
		.comp_mask = ODPX_ATTR_LIMITS | ODPX_ATTR_TICK | ODPX_ATTR_THRASH_CB,
		.limits = { .max_pinned_bytes = LIMIT_PAGES * PG },
		.tick_ms = 20,
		.thrash_cb = on_thrash,
		.thrash_arg = &cb_calls,
	};
	unsigned char *buf = map_anon(NULL, 4 * LIMIT_PAGES * PG);
	struct odpx_stats st;
	pthread_t thr;

	setenv("ODPX_THRASH", "window_ms=100", 1);
	CHECK_RC(odpx_open_uring(&a, &the_ctx), 0);	/* the callback comes with the attributes */
	memset(buf, 1, 4 * LIMIT_PAGES * PG);
	CHECK(pthread_create(&thr, NULL, worker, buf) == 0, "thread");

	CHECK(WAIT_FOR((st = stats_of(the_ctx)).thrash_state == ODPX_THRASH_THRASH, 20),
	      "no THRASH: state %lu, misses %lu, evictions %lu, ticks %lu", (unsigned long)st.thrash_state,
	      (unsigned long)st.misses, (unsigned long)st.evictions, (unsigned long)st.engine_ticks);
	CHECK(st.thrash_metric == ODPX_METRIC_EVICT_MISS_RATIO, "decided by metric %lu",
	      (unsigned long)st.thrash_metric);
	CHECK(st.evict_remiss > 0, "THRASH without a miss on an evicted range (evict_remiss 0)");
	printf("THRASH after %lu misses, %lu evictions, %lu misses on evicted ranges (ratio %.2f)\n",
	       (unsigned long)st.misses, (unsigned long)st.evictions, (unsigned long)st.evict_remiss,
	       st.thrash_value_milli / 1000.0);
	CHECK(WAIT_FOR(odpstat_state("THRASH"), 20), "odpstat -p does not show THRASH");
	CHECK(WAIT_FOR(atomic_load(&cb_thrash) >= 1, 10), "no THRASH callback");
	CHECK(!pthread_equal(engine_thread_seen, pthread_self()) &&
	      !pthread_equal(engine_thread_seen, thr), "callback not on the engine thread");

	atomic_store(&phase, 1);	/* the working set now fits */
	CHECK(WAIT_FOR((st = stats_of(the_ctx)).thrash_state == ODPX_THRASH_OK, 20),
	      "no recovery: state %lu metric %lu", (unsigned long)st.thrash_state,
	      (unsigned long)st.thrash_metric);
	CHECK(WAIT_FOR(atomic_load(&cb_ok) >= 1, 10), "no OK callback");
	printf("OK again after the working set shrank; %lu state changes, %d callbacks\n",
	       (unsigned long)st.thrash_changes, atomic_load(&cb_calls));
	CHECK(WAIT_FOR(odpstat_state("OK"), 20), "odpstat -p does not show OK");

	atomic_store(&phase, 2);
	pthread_join(thr, NULL);
	CHECK_RC(odpx_close(the_ctx), 0);
	return 0;
}
