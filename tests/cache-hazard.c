// SPDX-License-Identifier: MIT
/*
 * cache-hazard: an inline hit is held in a hazard slot of the calling
 * thread (lib/cache.h) and writes nothing shared; the entry must still live,
 * pinned, until that registration is released, whatever else frees entries.
 *  1. munmap of a range a slot holds: the entry dies (the range misses
 *     again) and stays pinned until the release; then the engine unpins it.
 *  2. eviction: misses that need room never take an entry a slot holds;
 *     the data check through it passes after them.
 *  3. the release from another thread, after the hitting thread exited; a
 *     second release is -EINVAL.
 *  4. more hits held than a thread has slots: the rest are counted
 *     references, and everything releases.
 *  5. a storm for TEST_STRESS_SECS / 3 (default 3 s): hitters hold hits
 *     across data checks while an evictor misses through a small cache and
 *     a remapper maps their buffers again; every check passes, the unused
 *     bytes are exactly the live entries' once nothing is held, and the
 *     pins are gone after the close.
 *  6. releases racing the munmap of what they release (a hit taken, then
 *     killed, then released, in every order the two threads make), with
 *     another registration held so that pinned bytes exceed unused ones
 *     (the count is clamped to the pinned bytes): the unused bytes are
 *     exact after it.
 * On the io_uring backend: real pins, and transfers through them.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "test.h"
#include "odpx-private.h"

#define PG 4096UL
#define LEN (64 * 1024UL)

static uint32_t slot_of(struct odpx_ctx *ctx, struct odpx_mr *mr)
{
	struct odpx_priv_state st;

	odpx_priv_state(ctx, &st);
	return odpx_priv_slot_of(&st, mr);
}

static struct odpx_priv_entry entry_of(struct odpx_ctx *ctx, uint32_t slot)
{
	struct odpx_priv_entry e;

	CHECK_RC(odpx_priv_entry(ctx, slot, &e), 0);
	return e;
}

/* A registration of [p, p+len) that hits, held in a hazard slot (HZ_TAG). */
static struct odpx_mr *slot_hit(struct odpx_ctx *ctx, void *p, size_t len, const char *what)
{
	struct odpx_stats st = stats_of(ctx);
	struct odpx_mr *mr;

	CHECK_RC(odpx_reg(ctx, p, len, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
	CHECK(stats_of(ctx).hits == st.hits + 1, "%s: not a hit", what);
	CHECK((uintptr_t)mr & ODPX_PRIV_HZ_TAG, "%s: the hit is not held in a hazard slot", what);
	return mr;
}

/* Cached and released once: the next registration of [p, p+len) hits. */
static void cache_it(struct odpx_ctx *ctx, void *p, size_t len)
{
	struct odpx_mr *mr;

	CHECK_RC(odpx_reg(ctx, p, len, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
	CHECK_RC(odpx_dereg(ctx, mr), 0);
}

static void held_across_munmap(void)
{
	struct odpx_ctx *ctx = open_pin(0);
	unsigned char *p = map_anon(NULL, LEN);

	cache_it(ctx, p, LEN);
	struct odpx_mr *h = slot_hit(ctx, p, LEN, "munmap");
	uint32_t idx = slot_of(ctx, h);
	struct odpx_stats st = stats_of(ctx);
	long pinned = vm_pinned_kb();

	CHECK(entry_of(ctx, idx).refs == 1, "munmap: %u references, want the slot's",
	      entry_of(ctx, idx).refs);
	CHECK(munmap(p, LEN) == 0, "munmap");
	/*
	 * munmap returns once the monitor has read its event, and the monitor
	 * marks the entry dead right after, under its lock (lookups meanwhile
	 * see the odd sequence count and wait): so within a moment.
	 */
	CHECK(WAIT_FOR(entry_of(ctx, idx).state == ODPX_PRIV_DEAD, 5),
	      "munmap: the held entry did not die (state %u)", entry_of(ctx, idx).state);
	/* the engine ticks and reaps meanwhile: the slot keeps it */
	struct timespec t = { 0, 300000000 };
	nanosleep(&t, NULL);
	CHECK(stats_of(ctx).unpins == st.unpins && vm_pinned_kb() == pinned,
	      "munmap: unpinned while a slot held it (unpins %lu -> %lu, VmPin %ld -> %ld kB)",
	      (unsigned long)st.unpins, (unsigned long)stats_of(ctx).unpins, pinned,
	      vm_pinned_kb());
	CHECK(entry_of(ctx, idx).state == ODPX_PRIV_DEAD && entry_of(ctx, idx).refs == 1,
	      "munmap: the held entry was freed");

	/* the same address mapped again misses: the dead entry is never handed out */
	CHECK(mmap(p, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
		   -1, 0) == p, "mmap");
	struct odpx_mr *fresh;
	CHECK_RC(odpx_reg(ctx, p, LEN, ODPX_ACCESS_LOCAL_WRITE, &fresh), 0);
	CHECK(stats_of(ctx).misses == st.misses + 1 && slot_of(ctx, fresh) != idx,
	      "munmap: the range mapped again was served by the dead entry");
	CHECK(data_check(ctx, fresh, p, LEN, 3), "munmap: wrong bytes through the new entry");
	CHECK_RC(odpx_dereg(ctx, fresh), 0);

	CHECK_RC(odpx_dereg(ctx, h), 0);
	CHECK(WAIT_FOR(stats_of(ctx).unpins == st.unpins + 1, 5),
	      "munmap: the released dead entry was not unpinned (unpins %lu, want %lu)",
	      (unsigned long)stats_of(ctx).unpins, (unsigned long)st.unpins + 1);
	CHECK(WAIT_FOR(entry_of(ctx, idx).state == ODPX_PRIV_FREE, 5), "munmap: entry not freed");
	CHECK_RC(odpx_dereg(ctx, h), -EINVAL);
	CHECK_RC(odpx_close(ctx), 0);
	munmap(p, LEN);
}

/* A context whose misses evict: @entries at most. */
static struct odpx_ctx *open_small(uint64_t entries)
{
	struct odpx_attr a = { .comp_mask = ODPX_ATTR_LIMITS };
	struct odpx_ctx *ctx;

	a.limits.max_entries = entries;
	CHECK_RC(odpx_open_uring(&a, &ctx), 0);
	return ctx;
}

static void held_across_evictions(void)
{
	enum { OTHERS = 96 };
	struct odpx_ctx *ctx = open_small(8);
	unsigned char *p = map_anon(NULL, LEN), *o = map_anon(NULL, OTHERS * PG);

	cache_it(ctx, p, LEN);
	struct odpx_mr *h = slot_hit(ctx, p, LEN, "evict");
	uint32_t idx = slot_of(ctx, h);
	struct odpx_stats st = stats_of(ctx);

	for (int i = 0; i < OTHERS; i++)	/* the held entry is the LRU's oldest */
		cache_it(ctx, o + i * PG, PG);
	CHECK(stats_of(ctx).evictions >= OTHERS - 8, "evict: %lu evictions, want %d or more",
	      (unsigned long)(stats_of(ctx).evictions - st.evictions), OTHERS - 8);
	CHECK(entry_of(ctx, idx).state == ODPX_PRIV_ALIVE, "evict: a slot-held entry was evicted");
	CHECK(data_check(ctx, h, p, LEN, 5), "evict: wrong bytes through the held registration");
	struct odpx_mr *again = slot_hit(ctx, p, LEN, "evict: again");
	CHECK(slot_of(ctx, again) == idx, "evict: the held entry is no longer the cached one");
	CHECK_RC(odpx_dereg(ctx, again), 0);
	CHECK_RC(odpx_dereg(ctx, h), 0);
	CHECK_RC(odpx_close(ctx), 0);
	munmap(p, LEN);
	munmap(o, OTHERS * PG);
}

struct handoff {
	struct odpx_ctx *ctx;
	void *p;
	struct odpx_mr *mr;
};

static void *hit_and_exit(void *arg)
{
	struct handoff *h = arg;

	h->mr = slot_hit(h->ctx, h->p, LEN, "handoff");
	return NULL;
}

static void released_elsewhere(void)
{
	struct odpx_ctx *ctx = open_pin(0);
	unsigned char *p = map_anon(NULL, LEN);
	struct handoff h = { ctx, p, NULL };
	pthread_t t;

	cache_it(ctx, p, LEN);
	for (int round = 0; round < 3; round++) {	/* the next thread borrows the same line */
		CHECK(pthread_create(&t, NULL, hit_and_exit, &h) == 0, "pthread_create");
		CHECK(pthread_join(t, NULL) == 0, "pthread_join");
		uint32_t idx = slot_of(ctx, h.mr);
		CHECK(entry_of(ctx, idx).refs == 1, "handoff: not held after the exit");
		CHECK(data_check(ctx, h.mr, p, LEN, 7 + round), "handoff: wrong bytes");
		CHECK_RC(odpx_dereg(ctx, h.mr), 0);
		CHECK(entry_of(ctx, idx).refs == 0, "handoff: still held");
		CHECK_RC(odpx_dereg(ctx, h.mr), -EINVAL);
	}
	CHECK_RC(odpx_close(ctx), 0);
	munmap(p, LEN);
}

static void more_than_slots(void)
{
	enum { N = ODPX_PRIV_HZ_SLOTS + 4 };
	struct odpx_ctx *ctx = open_pin(0);
	unsigned char *p = map_anon(NULL, LEN);
	struct odpx_mr *mr[N];
	unsigned tagged = 0;

	cache_it(ctx, p, LEN);
	for (int i = 0; i < N; i++) {
		CHECK_RC(odpx_reg(ctx, p, LEN, ODPX_ACCESS_LOCAL_WRITE, &mr[i]), 0);
		tagged += (uintptr_t)mr[i] & ODPX_PRIV_HZ_TAG;
	}
	uint32_t idx = slot_of(ctx, mr[0]);
	CHECK(tagged == ODPX_PRIV_HZ_SLOTS && entry_of(ctx, idx).refs == N,
	      "slots: %u of %d hits in slots, %u references", tagged, N, entry_of(ctx, idx).refs);
	CHECK(data_check(ctx, mr[N - 1], p, LEN, 11), "slots: wrong bytes, counted");
	CHECK(data_check(ctx, mr[0], p, LEN, 12), "slots: wrong bytes, slot");
	for (int i = 0; i < N; i++)	/* interleaved: slots and counted ones */
		CHECK_RC(odpx_dereg(ctx, mr[(i * 5) % N]), 0);
	CHECK(entry_of(ctx, idx).refs == 0, "slots: %u references left", entry_of(ctx, idx).refs);
	CHECK_RC(odpx_close(ctx), 0);
	munmap(p, LEN);
}

/* ---- 5. the storm ---- */

#define BUFS 6
static struct odpx_ctx *sctx;
static unsigned char *area;		/* BUFS * LEN, remapped piecewise */
static pthread_mutex_t buf_lock[BUFS];	/* a check has its buffer to itself */
static atomic_bool stop;
static atomic_ulong checks, evicting, remaps;

/*
 * The unused bytes: every live entry's that nothing holds, once the dead
 * are reaped.  A kill the monitor's reader is still marking (its munmap has
 * returned) changes both sides: read the count before and after the scan,
 * and judge only a reading that stood still, failing on one that stays wrong.
 */
static void unused_exact(const char *what)
{
	double until = now_s() + 5;
	uint64_t live, before, after;

	do {
		struct odpx_priv_state ps;
		odpx_priv_state(sctx, &ps);
		before = stats_of(sctx).unused_bytes;
		live = 0;
		for (uint32_t i = 0; i < ps.slots; i++) {
			struct odpx_priv_entry e = entry_of(sctx, i);
			live += e.state == ODPX_PRIV_ALIVE && !e.refs ? e.bytes : 0;
		}
		after = stats_of(sctx).unused_bytes;
		if (!ps.releasing && before == after && after == live)
			return;
	} while (now_s() < until && !usleep(1000));
	FAIL("%s: %lu unused bytes counted, the live entries hold %lu", what,
	     (unsigned long)after, (unsigned long)live);
}

static unsigned rnd(unsigned *s)
{
	*s = *s * 1103515245u + 12345u;
	return *s >> 8;
}

static void *hitter(void *arg)
{
	unsigned seed = (unsigned)(uintptr_t)arg;

	while (!atomic_load(&stop)) {
		unsigned b = rnd(&seed) % BUFS;
		unsigned char *p = area + b * LEN;
		struct odpx_mr *mr[3];
		pthread_mutex_lock(&buf_lock[b]);
		for (int i = 0; i < 3; i++)
			CHECK_RC(odpx_reg(sctx, p, LEN, ODPX_ACCESS_LOCAL_WRITE, &mr[i]), 0);
		CHECK(data_check(sctx, mr[rnd(&seed) % 3], p, LEN, seed & 0xff),
		      "storm: wrong bytes through a held registration of buffer %u", b);
		for (int i = 0; i < 3; i++)
			CHECK_RC(odpx_dereg(sctx, mr[i]), 0);
		pthread_mutex_unlock(&buf_lock[b]);
		atomic_fetch_add(&checks, 1);
	}
	return NULL;
}

static void *evictor(void *arg)
{
	enum { N = 256 };
	unsigned char *o = map_anon(NULL, N * PG);
	unsigned seed = 1;

	(void)arg;
	while (!atomic_load(&stop)) {
		struct odpx_mr *mr;
		void *p = o + rnd(&seed) % N * PG;
		CHECK_RC(odpx_reg(sctx, p, PG, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
		CHECK_RC(odpx_dereg(sctx, mr), 0);
		atomic_fetch_add(&evicting, 1);
	}
	munmap(o, N * PG);
	return NULL;
}

static void *remapper(void *arg)
{
	unsigned seed = 2;

	(void)arg;
	while (!atomic_load(&stop)) {
		unsigned b = rnd(&seed) % BUFS;
		unsigned char *p = area + b * LEN;
		pthread_mutex_lock(&buf_lock[b]);
		CHECK(mmap(p, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
			   -1, 0) == p, "storm: mmap");
		pthread_mutex_unlock(&buf_lock[b]);
		atomic_fetch_add(&remaps, 1);
		struct timespec t = { 0, 2000000 };
		nanosleep(&t, NULL);
	}
	return NULL;
}

static void storm(void)
{
	const char *env = getenv("TEST_STRESS_SECS");
	double secs = (env ? atof(env) : 10) / 3;
	long pin0 = vm_pinned_kb();
	pthread_t t[4];

	sctx = open_small(16);
	area = map_anon(NULL, BUFS * LEN);
	for (int b = 0; b < BUFS; b++)
		pthread_mutex_init(&buf_lock[b], NULL);
	CHECK(pthread_create(&t[0], NULL, hitter, (void *)(uintptr_t)11) == 0, "thread");
	CHECK(pthread_create(&t[1], NULL, hitter, (void *)(uintptr_t)12) == 0, "thread");
	CHECK(pthread_create(&t[2], NULL, evictor, NULL) == 0, "thread");
	CHECK(pthread_create(&t[3], NULL, remapper, NULL) == 0, "thread");
	struct timespec d = { (time_t)secs, (long)((secs - (time_t)secs) * 1e9) };
	nanosleep(&d, NULL);
	atomic_store(&stop, true);
	for (int i = 0; i < 4; i++)
		CHECK(pthread_join(t[i], NULL) == 0, "join");
	struct odpx_stats st = stats_of(sctx);
	printf("storm: %lu checks, %lu evicting misses (%lu evictions), %lu remaps, %lu hits\n",
	       atomic_load(&checks), atomic_load(&evicting), (unsigned long)st.evictions,
	       atomic_load(&remaps), (unsigned long)st.hits);
	CHECK(atomic_load(&checks) > 50 && st.evictions > 100 && atomic_load(&remaps) > 50,
	      "storm: too little work done");
	unused_exact("storm");
	CHECK_RC(odpx_close(sctx), 0);
	CHECK(vm_pinned_kb() == pin0, "storm: VmPin %ld kB after the close, %ld before",
	      vm_pinned_kb(), pin0);
	munmap(area, BUFS * LEN);
}

/* ---- 6. releases racing the munmap of what they release ---- */

static atomic_ulong rounds;

static void *releaser(void *arg)
{
	unsigned char *p = arg;

	while (!atomic_load(&stop)) {
		struct odpx_mr *mr;
		CHECK_RC(odpx_reg(sctx, p, LEN, 0, &mr), 0);
		CHECK_RC(odpx_dereg(sctx, mr), 0);
		atomic_fetch_add(&rounds, 1);
	}
	return NULL;
}

static void release_vs_munmap(void)
{
	const char *env = getenv("TEST_STRESS_SECS");
	double until = now_s() + (env ? atof(env) : 10) / 5;
	unsigned long maps = 0;
	pthread_t t;

	sctx = open_small(16);
	area = map_anon(NULL, LEN);
	/* held throughout: pinned bytes above the unused ones, so that an excess shows */
	unsigned char *other = map_anon(NULL, LEN);
	struct odpx_mr *held;
	CHECK_RC(odpx_reg(sctx, other, LEN, 0, &held), 0);
	atomic_store(&stop, false);
	CHECK(pthread_create(&t, NULL, releaser, area) == 0, "thread");
	while (now_s() < until) {
		CHECK(mmap(area, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
			   -1, 0) == area, "race: mmap");
		maps++;
	}
	atomic_store(&stop, true);
	CHECK(pthread_join(t, NULL) == 0, "join");
	unused_exact("race");
	CHECK_RC(odpx_dereg(sctx, held), 0);
	unused_exact("race, all released");
	printf("race: %lu remaps, %lu registrations released meanwhile\n", maps, atomic_load(&rounds));
	CHECK_RC(odpx_close(sctx), 0);
	munmap(area, LEN);
	munmap(other, LEN);
}

int main(void)
{
	held_across_munmap();
	held_across_evictions();
	released_elsewhere();
	more_than_slots();
	storm();
	release_vs_munmap();
	printf("ok\n");
	return 0;
}
