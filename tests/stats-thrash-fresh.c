// SPDX-License-Identifier: MIT
/*
 * stats-thrash-fresh: registering new memory at old addresses is not
 * thrashing.  64 buffers of 64 KiB (68 KiB apart), each munmap()ed and
 * mmap()ed again at its address before each registration (uring backend):
 *   - with room for all of them (no eviction): every miss is on memory the
 *     monitor saw unmapped (repins), the detector says WARMING (new memory)
 *     and never THRASH;
 *   - with max_entries 32 (each miss evicts): every miss is at an evicted
 *     range whose memory was replaced since, counted in repin_fresh and
 *     never in evict_remiss; again WARMING, never THRASH.
 * Each phase waits for WARMING with a deadline, then for ten more windows
 * of the detector (engine ticks counted) with no THRASH reported.
 */
#include "test.h"

#define PG 4096UL
#define NBUF 64
#define STRIDE (68 * 1024UL)
#define LEN (64 * 1024UL)
#define TICK_MS 20
#define WINDOW_MS 100

static struct odpx_ctx *the_ctx;
static _Atomic int stop;
static _Atomic int cb_thrash, cb_warming;
static unsigned char *base;

static void on_thrash(struct odpx_ctx *ctx, const struct odpx_thrash_event *ev, void *arg)
{
	(void)ctx;
	(void)arg;
	if (ev->state == ODPX_THRASH_THRASH)
		atomic_fetch_add(&cb_thrash, 1);
	if (ev->state == ODPX_THRASH_WARMING)
		atomic_fetch_add(&cb_warming, 1);
}

static void *worker(void *arg)
{
	(void)arg;
	for (unsigned long i = 0; !atomic_load(&stop); i++) {
		unsigned char *p = base + (i % NBUF) * STRIDE;
		struct odpx_mr *mr;

		/* new memory at the same address: the old pages go */
		CHECK(munmap(p, LEN) == 0, "munmap: %s", strerror(errno));
		CHECK(map_anon(p, LEN) == p, "mmap at %p", (void *)p);
		memset(p, (int)i, LEN);
		CHECK_RC(odpx_reg(the_ctx, p, LEN, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
		CHECK_RC(odpx_dereg(the_ctx, mr), 0);
	}
	return NULL;
}

static struct odpx_stats phase(const char *name, uint64_t max_entries)
{
	struct odpx_attr a = {
		.comp_mask = ODPX_ATTR_LIMITS | ODPX_ATTR_TICK | ODPX_ATTR_THRASH_CB,
		.limits = { .max_entries = max_entries },
		.tick_ms = TICK_MS,
		.thrash_cb = on_thrash,
	};
	struct odpx_stats st;
	pthread_t thr;

	atomic_store(&stop, 0);
	atomic_store(&cb_thrash, 0);
	atomic_store(&cb_warming, 0);
	CHECK_RC(odpx_open_uring(&a, &the_ctx), 0);
	CHECK(pthread_create(&thr, NULL, worker, NULL) == 0, "thread");
	CHECK(WAIT_FOR(atomic_load(&cb_warming) >= 1 || atomic_load(&cb_thrash), 15),
	      "%s: no WARMING: state %lu", name, (unsigned long)stats_of(the_ctx).thrash_state);
	CHECK(!atomic_load(&cb_thrash), "%s: THRASH reported for fresh memory", name);
	/* ten more windows of the detector, churning all along */
	uint64_t t0 = stats_of(the_ctx).engine_ticks;
	CHECK(WAIT_FOR((st = stats_of(the_ctx)).engine_ticks >= t0 + 10 * WINDOW_MS / TICK_MS ||
		       st.thrash_state == ODPX_THRASH_THRASH || atomic_load(&cb_thrash), 30),
	      "%s: the engine did not tick", name);
	atomic_store(&stop, 1);
	pthread_join(thr, NULL);
	st = stats_of(the_ctx);
	printf("%s: state %lu (metric %lu), THRASH callbacks %d, WARMING callbacks %d; misses %lu, "
	       "evictions %lu, repins %lu, evict_remiss %lu, repin_fresh %lu, inval_unmap %lu\n",
	       name, (unsigned long)st.thrash_state, (unsigned long)st.thrash_metric,
	       atomic_load(&cb_thrash), atomic_load(&cb_warming), (unsigned long)st.misses,
	       (unsigned long)st.evictions, (unsigned long)st.repins, (unsigned long)st.evict_remiss,
	       (unsigned long)st.repin_fresh, (unsigned long)st.inval_unmap);
	CHECK(!atomic_load(&cb_thrash) && st.thrash_state != ODPX_THRASH_THRASH,
	      "%s: THRASH reported for fresh memory (metric %lu)", name, (unsigned long)st.thrash_metric);
	CHECK(st.thrash_state == ODPX_THRASH_WARMING, "%s: state %lu, want WARMING", name,
	      (unsigned long)st.thrash_state);
	CHECK(st.evict_remiss == 0, "%s: evict_remiss %lu: replaced memory counted as a re-miss",
	      name, (unsigned long)st.evict_remiss);
	CHECK(st.repins > 0, "%s: no repin counted", name);
	CHECK_RC(odpx_close(the_ctx), 0);
	return st;
}

int main(void)
{
	struct odpx_stats st;

	setenv("ODPX_THRASH", "window_ms=100", 1);
	base = map_anon(NULL, NBUF * STRIDE);
	st = phase("no eviction", 0);
	CHECK(st.evictions == 0, "no eviction: %lu evictions", (unsigned long)st.evictions);
	st = phase("evicting", 32);
	CHECK(st.evictions > NBUF, "evicting: %lu evictions", (unsigned long)st.evictions);
	/* each miss past the first round is at a range evicted 32 misses before */
	CHECK(st.repin_fresh * 10 >= (st.misses - NBUF) * 9, "evicting: repin_fresh %lu of %lu misses",
	      (unsigned long)st.repin_fresh, (unsigned long)st.misses);
	return 0;
}
