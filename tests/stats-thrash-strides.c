// SPDX-License-Identifier: MIT
/*
 * stats-thrash-strides: a pin-mode working set of 64 buffers cycled through a
 * cache of max_entries 32 (uring backend) thrashes whatever the buffers'
 * addresses: strides of 4 KiB to 1 MiB, powers of two and not.  Each miss
 * after the first round evicts the least recently released buffer, which is
 * the one missed 32 registrations later: evict_remiss must count those
 * re-misses, and the detector must go from OK to THRASH (through WARMING or
 * not, never back) within a deadline, decided by evict_miss_ratio.
 *
 * Windows of 100 ms (ODPX_THRASH=window_ms=100) on a 20 ms tick; every wait
 * is on the state with a deadline.  Every stride is run and reported, then
 * the test fails if any failed.
 */
#include "test.h"

#define PG 4096UL
#define NBUF 64
#define MAX_ENTRIES 32

static struct odpx_ctx *the_ctx;
static _Atomic int stop;
static _Atomic unsigned long cycles;
static char seq[64];		/* the states the callback reported, by initial */
static _Atomic unsigned nseq;

static void on_thrash(struct odpx_ctx *ctx, const struct odpx_thrash_event *ev, void *arg)
{
	unsigned n = atomic_load(&nseq);

	(void)ctx;
	(void)arg;
	if (n + 1 < sizeof(seq)) {
		seq[n] = "OWT"[ev->state < 3 ? ev->state : 0];
		atomic_store(&nseq, n + 1);
	}
}

struct job {
	unsigned char *base;
	size_t stride, len;
};

static void *worker(void *arg)
{
	struct job *j = arg;

	for (unsigned long i = 0; !atomic_load(&stop); i++) {
		struct odpx_mr *mr;

		CHECK_RC(odpx_reg(the_ctx, j->base + (i % NBUF) * j->stride, j->len,
				  ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
		CHECK_RC(odpx_dereg(the_ctx, mr), 0);
		if (i % NBUF == NBUF - 1)
			atomic_fetch_add(&cycles, 1);
	}
	return NULL;
}

/* One stride; returns 0 when the detector got it right, 1 (with a message) if not. */
static int run_stride(size_t stride)
{
	struct odpx_attr a = {
		.comp_mask = ODPX_ATTR_LIMITS | ODPX_ATTR_TICK | ODPX_ATTR_THRASH_CB,
		.limits = { .max_entries = MAX_ENTRIES },
		.tick_ms = 20,
		.thrash_cb = on_thrash,
	};
	struct job j = { .stride = stride, .len = stride < 64 * 1024 ? stride : 64 * 1024 };
	struct odpx_stats st;
	unsigned long rounds;
	int bad = 0;

	/* a buffer every stride, never touching the next: entries never merge */
	if (j.len == stride && stride > PG)
		j.len -= PG;
	j.base = map_anon(NULL, NBUF * stride);
	for (unsigned i = 0; i < NBUF; i++)
		memset(j.base + i * stride, 1, j.len);
	atomic_store(&stop, 0);
	atomic_store(&nseq, 0);
	atomic_store(&cycles, 0);
	CHECK_RC(odpx_open_uring(&a, &the_ctx), 0);

	pthread_t thr;
	CHECK(pthread_create(&thr, NULL, worker, &j) == 0, "thread");
	bool thrash = WAIT_FOR(stats_of(the_ctx).thrash_state == ODPX_THRASH_THRASH, 15);
	/* one more full cycle, so that the counts below are of whole rounds */
	rounds = atomic_load(&cycles);
	CHECK(WAIT_FOR(atomic_load(&cycles) > rounds + 1, 15), "the worker stalled");
	atomic_store(&stop, 1);
	pthread_join(thr, NULL);
	st = stats_of(the_ctx);
	seq[atomic_load(&nseq)] = 0;

	/*
	 * Every miss but the first round's NBUF is at a range evicted
	 * MAX_ENTRIES registrations before; a record outlives that unless the
	 * thread stalled for two windows in between, which a loaded machine
	 * may do now and then: 9 in 10 must be counted.
	 */
	uint64_t remisses = st.misses > NBUF ? st.misses - NBUF : 0;

	printf("stride %7zu len %6zu: %s, callbacks %-6s misses %8lu hits %lu merges %lu evictions %8lu "
	       "evict_remiss %8lu repin_fresh %lu\n", stride, j.len,
	       thrash ? "THRASH" : "no THRASH", seq, (unsigned long)st.misses, (unsigned long)st.hits,
	       (unsigned long)st.merges, (unsigned long)st.evictions, (unsigned long)st.evict_remiss,
	       (unsigned long)st.repin_fresh);
	if (!thrash) {
		printf("  FAIL: no THRASH in 15 s (state %lu, metric %lu)\n",
		       (unsigned long)st.thrash_state, (unsigned long)st.thrash_metric);
		bad = 1;
	} else if (st.thrash_metric != ODPX_METRIC_EVICT_MISS_RATIO) {
		printf("  FAIL: THRASH decided by metric %lu, not evict_miss_ratio\n",
		       (unsigned long)st.thrash_metric);
		bad = 1;
	}
	/* the state climbed once: OK, maybe WARMING, then THRASH, and stayed */
	if (thrash && strcmp(seq, "T") && strcmp(seq, "WT")) {
		printf("  FAIL: state sequence %s, want T or WT\n", seq);
		bad = 1;
	}
	if (st.hits || st.merges) {
		printf("  FAIL: %lu hits, %lu merges: the layout is not one range per buffer, all missed\n",
		       (unsigned long)st.hits, (unsigned long)st.merges);
		bad = 1;
	}
	if (st.evict_remiss > remisses || st.evict_remiss * 10 < remisses * 9) {
		printf("  FAIL: evict_remiss %lu of %lu re-misses\n", (unsigned long)st.evict_remiss,
		       (unsigned long)remisses);
		bad = 1;
	}
	if (st.repin_fresh) {
		printf("  FAIL: repin_fresh %lu with no memory unmapped\n", (unsigned long)st.repin_fresh);
		bad = 1;
	}
	CHECK_RC(odpx_close(the_ctx), 0);
	munmap(j.base, NBUF * stride);
	return bad;
}

int main(void)
{
	static const size_t strides[] = {
		4 << 10, 8 << 10, 12 << 10, 64 << 10, 68 << 10, 128 << 10, 192 << 10,
		256 << 10, 260 << 10, 512 << 10, 1 << 20,
	};
	int bad = 0;

	setenv("ODPX_THRASH", "window_ms=100", 1);
	for (size_t i = 0; i < sizeof(strides) / sizeof(strides[0]); i++)
		bad += run_stride(strides[i]);
	CHECK(!bad, "%d of %zu strides wrong", bad, sizeof(strides) / sizeof(strides[0]));
	return 0;
}
