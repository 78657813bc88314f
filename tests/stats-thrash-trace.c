// SPDX-License-Identifier: MIT
/*
 * stats-thrash-trace: the detector over counter traces (tests/fixtures/
 * traces, made by make-traces.py there) gives the expected state after
 * every window: warm-up -> WARMING, steady -> OK, thrash -> THRASH,
 * recovery -> OK, for the device's ODP counters (faults, invalidations,
 * refaults) and the pin cache's (misses, evictions, re-pins).  Windows that
 * cross a threshold one at a time, and a dip inside a thrash phase, change
 * nothing: the number of state changes is exactly the number of phases that
 * change the state.  Also: the threshold string parser, and the hysteresis
 * over windows that alternate between two classes on the same side of the
 * state: THRASH is left after exit_n windows of OK and WARMING in turn
 * (it was never left: each class reset the other's run), OK enters WARMING
 * after enter_n windows of WARMING and THRASH in turn, and a new state is
 * one every window of its run was at least as far from the old one as.
 */
#include "test.h"
#include "../sysfs-stats/counters.h"

static char fx[PATH_MAX];


static enum odpx_thrash_state state_of(const char *s)
{
	for (int i = 0; i < ODPX_THRASH_RESERVED; i++)
		if (!strcmp(s, thrash_state_str(i)))
			return i;
	FAIL("bad state '%s' in a trace", s);
}

static unsigned run_trace(const char *name, unsigned want_changes)
{
	char path[PATH_MAX + 64], line[512], expect[16];
	uint64_t prev[7] = { 0 }, cur[7];
	struct thrash_cfg cfg;
	struct thrash t;
	bool dev = false, pin = false;
	unsigned lineno = 0, windows = 0, flips = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/traces/%s", fx, name);
	CHECK((f = fopen(path, "r")), "%s: %s", path, strerror(errno));
	thrash_cfg_default(&cfg);
	thrash_init(&t, &cfg);
	while (fgets(line, sizeof(line), f)) {
		double secs;
		int d, p;
		lineno++;
		if (line[0] == '#') {
			CHECK(sscanf(line, "# %*s see make-traces.py; dev=%d pin=%d", &d, &p) == 2,
			      "%s: header", name);
			dev = d;
			pin = p;
			continue;
		}
		CHECK(sscanf(line, "%lf %lu %lu %lu %lu %lu %lu %lu %15s", &secs, &cur[0], &cur[1],
			     &cur[2], &cur[3], &cur[4], &cur[5], &cur[6], expect) == 9,
		      "%s:%u: bad line", name, lineno);
		struct thrash_in in = {
			.secs = secs, .have_dev = dev, .have_pin = pin,
			.dev_faults = ctr_delta(prev[0], cur[0]), .dev_inval = ctr_delta(prev[1], cur[1]),
			.dev_refaults = ctr_delta(prev[2], cur[2]), .misses = ctr_delta(prev[3], cur[3]),
			.evictions = ctr_delta(prev[4], cur[4]), .repins = ctr_delta(prev[5], cur[5]),
			.invals = ctr_delta(prev[6], cur[6]),
		};
		if (thrash_step(&t, &in))
			flips++;
		windows++;
		CHECK(t.state == state_of(expect), "%s:%u: state %s (metric %s %.3f), want %s", name,
		      lineno, thrash_state_str(t.state), thrash_metric_str(t.metric), t.value, expect);
		memcpy(prev, cur, sizeof(prev));
	}
	fclose(f);
	CHECK(flips == want_changes && t.changes == flips, "%s: %u state changes, want %u", name,
	      flips, want_changes);
	printf("%s: %u windows, %u state changes, as expected\n", name, windows, flips);
	return flips;
}

static void test_cfg(void)
{
	struct thrash_cfg c;
	char err[128];

	thrash_cfg_default(&c);
	CHECK_RC(thrash_cfg_parse(&c, "inval_ratio=0.7,enter_n=3, window_ms=250", err, sizeof(err)), 0);
	CHECK(c.inval_ratio == 0.7 && c.enter_n == 3 && c.window_ms == 250, "parsed");
	CHECK_RC(thrash_cfg_parse(&c, "nope=1", err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "unknown threshold 'nope'"), "%s", err);
	CHECK_RC(thrash_cfg_parse(&c, "enter_n=0", err, sizeof(err)), -EINVAL);
	CHECK_RC(thrash_cfg_parse(&c, "inval_ratio=-1", err, sizeof(err)), -EINVAL);
	CHECK_RC(thrash_cfg_parse(&c, "inval_ratio", err, sizeof(err)), -EINVAL);
	CHECK_RC(thrash_cfg_parse(&c, "exit_factor=2", err, sizeof(err)), -EINVAL);
	CHECK(c.inval_ratio == 0.7 && c.enter_n == 3, "a failed parse changes nothing");

	/*
	 * min_rate=0 is accepted: windows with no fault (or no miss) are idle,
	 * not a ratio over 0 (it read THRASH, inval_ratio inf, and the
	 * published value_milli was an out-of-range cast of inf).
	 */
	struct thrash t;
	CHECK_RC(thrash_cfg_parse(&c, "min_rate=0,enter_n=1", err, sizeof(err)), 0);
	thrash_init(&t, &c);
	for (int w = 0; w < 4; w++) {
		struct thrash_in in = { .secs = 1, .have_dev = true, .dev_inval = 500,
					.have_pin = true, .invals = 500, .evictions = 3 };
		thrash_step(&t, &in);
		CHECK(t.state == ODPX_THRASH_OK && t.value == t.value && t.value < 1e12,
		      "min_rate=0, no fault, no miss: %s (metric %s %g), want OK",
		      thrash_state_str(t.state), thrash_metric_str(t.metric), t.value);
	}
}

/* A state from its initial, as the sequences below write them: O, W, T. */
static enum odpx_thrash_state state_ch(char c)
{
	return c == 'T' ? ODPX_THRASH_THRASH : c == 'W' ? ODPX_THRASH_WARMING : ODPX_THRASH_OK;
}

/* One window of the pin side classified @s (default thresholds, in and out of THRASH). */
static struct thrash_in pin_window(enum odpx_thrash_state s)
{
	struct thrash_in in = { .secs = 1, .have_pin = true, .have_evict_remiss = true,
				.misses = 1000 };

	if (s == ODPX_THRASH_THRASH)
		in.evictions = in.evict_remiss = 600;	/* evict-miss ratio 0.6 */
	else if (s == ODPX_THRASH_OK)
		in.evictions = 10;	/* evicted, never missed again: OK */
	return in;			/* misses with no eviction: WARMING */
}

/* Windows of the classes in @seq (repeated), one per letter of @want: the state after each. */
static void run_seq(struct thrash *t, const char *seq, const char *want)
{
	for (size_t w = 0; want[w]; w++) {
		struct thrash_in in = pin_window(state_ch(seq[w % strlen(seq)]));
		thrash_step(t, &in);
		CHECK(t->state == state_ch(want[w]), "windows %s: after window %zu: %s, want %c",
		      seq, w + 1, thrash_state_str(t->state), want[w]);
	}
}

static void test_alternating(void)
{
	struct thrash_cfg cfg;
	struct thrash t;

	thrash_cfg_default(&cfg);	/* enter_n 2, exit_n 3 */
	thrash_init(&t, &cfg);
	run_seq(&t, "T", "OT");
	CHECK(t.metric == ODPX_METRIC_EVICT_MISS_RATIO, "THRASH by %s", thrash_metric_str(t.metric));
	/* out of THRASH after exit_n windows none of which is THRASH: the worst of them */
	run_seq(&t, "OW", "TTW");
	CHECK(t.metric == ODPX_METRIC_MISS_RATE, "left THRASH for WARMING by metric %s",
	      thrash_metric_str(t.metric));
	run_seq(&t, "O", "WO");		/* WARMING to OK: enter_n windows of OK */
	run_seq(&t, "WT", "OWWWW");	/* up: every window at least WARMING, not all THRASH */
	run_seq(&t, "T", "WT");
	run_seq(&t, "WO", "TTW");
	run_seq(&t, "T", "WT");
	run_seq(&t, "OT", "TTTTTT");	/* a THRASH window starts the way out again */
	CHECK(t.changes == 7, "%llu state changes, want 7", (unsigned long long)t.changes);
	printf("windows alternating on one side of the state: THRASH left, WARMING entered\n");
}

int main(void)
{
	find_fixtures(fx, sizeof(fx), "traces");
	test_cfg();
	test_alternating();
	/* OK -> WARMING -> OK -> THRASH -> OK */
	run_trace("odp-phases.trace", 4);
	run_trace("odp-refault.trace", 2);
	/* OK -> WARMING -> OK -> THRASH -> OK -> THRASH -> OK */
	run_trace("pin-phases.trace", 6);
	return 0;
}
