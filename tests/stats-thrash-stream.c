// SPDX-License-Identifier: MIT
/*
 * stats-thrash-stream: a pin-mode stream of distinct ranges through a
 * cache far smaller than the stream (every miss evicts, no evicted range is
 * missed again soon) is not thrashing.  The library's detector says so, and
 * odpstat -p's own detector, over its intervals, must agree: never THRASH,
 * and in its last interval the library's state.
 * odpstat did not read evict_remiss and fell back to min(evictions, misses)
 * as the misses caused by evictions: THRASH from the second interval on.
 *
 * Windows of 100 ms for the library (ODPX_THRASH=window_ms=100), intervals
 * of 0.1 s for odpstat; the waits are on states, with deadlines.
 */
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>

#include "test.h"

#define PG 4096UL
#define LIMIT_PAGES 16
#define RANGES 8192		/* one page every other page: entries never merge */

static _Atomic int stop;
static struct odpx_ctx *the_ctx;

static void *stream(void *arg)
{
	unsigned char *buf = arg;

	for (unsigned long i = 0; !atomic_load(&stop); i++) {
		struct odpx_mr *mr;
		CHECK_RC(odpx_reg(the_ctx, buf + (i % RANGES) * 2 * PG, PG, ODPX_ACCESS_LOCAL_WRITE,
				  &mr), 0);
		CHECK_RC(odpx_dereg(the_ctx, mr), 0);
		if (i % 200 == 0)
			usleep(1000);	/* a stream, not a spin */
	}
	return NULL;
}

/* The string after the first @key in @line, into @out[16]. */
static bool str_of(const char *line, const char *key, char *out)
{
	const char *v = strstr(line, key);

	if (!v)
		return false;
	v += strlen(key);
	snprintf(out, 16, "%.*s", (int)strcspn(v, "\""), v);
	return true;
}

int main(void)
{
	struct odpx_attr a = {
		.comp_mask = ODPX_ATTR_LIMITS | ODPX_ATTR_TICK,
		.limits = { .max_pinned_bytes = LIMIT_PAGES * PG },
		.tick_ms = 20,
	};
	unsigned char *buf = map_anon(NULL, RANGES * 2 * PG);
	char cmd[4400], last[128] = "", *line = NULL;
	struct odpx_stats st;
	size_t cap = 0;
	int rows = 0, thrash_rows = 0;
	bool agree = false;
	pthread_t thr;
	ssize_t n;
	FILE *p;

	setenv("ODPX_THRASH", "window_ms=100", 1);
	CHECK_RC(odpx_open_uring(&a, &the_ctx), 0);
	memset(buf, 1, RANGES * 2 * PG);
	CHECK(pthread_create(&thr, NULL, stream, buf) == 0, "thread");
	/* the library's verdict first: after 5 windows (25 ticks) of evictions, not THRASH */
	CHECK(WAIT_FOR((st = stats_of(the_ctx)).evictions > 1000 && st.engine_ticks >= 25, 20),
	      "the stream: %lu evictions, %lu ticks", (unsigned long)st.evictions,
	      (unsigned long)st.engine_ticks);
	CHECK(st.thrash_state != ODPX_THRASH_THRASH, "the library calls a stream THRASH"
	      " (evict_remiss %lu of %lu misses)", (unsigned long)st.evict_remiss,
	      (unsigned long)st.misses);

	/* 8 intervals: THRASH needs enter_n (2) of them */
	snprintf(cmd, sizeof(cmd), "%s -p %d --json --no-netlink 0.1 8", odpstat_path(),
		 (int)getpid());
	CHECK((p = popen(cmd, "r")), "popen");
	while ((n = getline(&line, &cap, p)) > 0) {
		char mine[16], lib[16];
		rows++;
		CHECK(str_of(line, "\"state\":\"", mine) && str_of(line, "\"thrash_state\":\"", lib),
		      "no state, or no context, in odpstat's line: %.300s", line);
		if (!strcmp(mine, "THRASH")) {
			thrash_rows++;
			fprintf(stderr, "odpstat: %.300s\n", line);
		}
		snprintf(last, sizeof(last), "odpstat %s, the library %s", mine, lib);
		agree = !strcmp(mine, lib);
	}
	CHECK(pclose(p) == 0, "%s failed", cmd);
	CHECK(rows == 8, "odpstat printed %d rows of 8", rows);
	st = stats_of(the_ctx);
	CHECK(st.thrash_state != ODPX_THRASH_THRASH, "the library's state now THRASH");
	CHECK(!thrash_rows, "odpstat: THRASH in %d of %d intervals of a stream the library calls %s"
	      " (misses %lu, evictions %lu, evict_remiss %lu)", thrash_rows, rows,
	      st.thrash_state == ODPX_THRASH_OK ? "OK" : "WARMING", (unsigned long)st.misses,
	      (unsigned long)st.evictions, (unsigned long)st.evict_remiss);
	CHECK(agree, "the last interval: %s", last);
	printf("a stream of %d distinct ranges: %s"
	       " (%lu misses, %lu evictions, %lu misses on evicted ranges)\n", RANGES, last,
	       (unsigned long)st.misses, (unsigned long)st.evictions,
	       (unsigned long)st.evict_remiss);
	free(line);
	atomic_store(&stop, 1);
	pthread_join(thr, NULL);
	CHECK_RC(odpx_close(the_ctx), 0);
	return 0;
}
