// SPDX-License-Identifier: MIT
/*
 * prefetch.c - PF: the cost of one odpx_prefetch() with the engine running,
 * and whether an enqueue makes a system call.
 *
 * odpx_prefetch() pushes on a lock-free ring and rings the engine's eventfd
 * only when the engine sleeps (engine.c, "Doorbell protocol").  Each ring
 * shows up as one engine wake-up that is not a tick, so
 *   doorbells = delta(engine_wakeups) - delta(engine_ticks)
 * counts the system calls made by enqueuers (an upper bound: a wake-up can
 * also come from a dead entry pushed by a dereg or the monitor, and none
 * happen here).
 *
 *   steady  the steady state the target names: the engine awake and
 *           draining while hints arrive.  Hints go in timed chunks of 64
 *           over 16 cached 64 KiB ranges; before a chunk, if fewer than 64
 *           cells are free, wait (untimed) until half the queue is free.
 *           So no hint is refused.  A hint rings the engine only if it has
 *           emptied the queue and then gone a whole linger (engine.c) without
 *           new work: the doorbells column counts those rings, and their
 *           write() is timed.  Target <= 50 ns and no system call (at most
 *           one write() per 20,000 hints: the one that wakes the engine for
 *           the first chunk).  Three placements: as the scheduler likes,
 *           the engine and monitor on the other CPU (each cell then
 *           crosses between the two CPUs' caches), and everything on one
 *           CPU (the engine runs only while the caller waits).
 *   batch   256 hints (a quarter of the queue), timed; then wait, untimed,
 *           until the engine has drained the queue, ended its linger and
 *           gone back to sleep on the doorbell.  So the first hint of every
 *           batch rings a sleeping engine, and its write() and the wake-up
 *           are timed: one cross-thread wake-up shared by 256 hints, which
 *           is not the steady state.  The same three placements.
 *   burst   back-to-back hints, K per sample: faster than the engine drains,
 *           so the queue fills and hints are dropped (-EAGAIN, counted); the
 *           time per call mixes accepted and refused hints.
 *   paced   one hint every ~5 us, so the engine drains the queue between
 *           hints, and lingers: no hint rings.  And one every ~500 us, longer
 *           than the default linger, so every hint rings a sleeping engine
 *           and pays the doorbell write().  Timed call by call, minus the
 *           clock's own cost.
 */
#include "bench.h"

#define RANGES 16
#define RANGE_BYTES (64 * KiB)

static struct bench_opts o;

struct pf_count {
	uint64_t queued, dropped;
};

static inline void hint(struct odpx_ctx *ctx, char *base, uint64_t i, struct pf_count *c)
{
	int r = odpx_prefetch(ctx, base + (i % RANGES) * 2 * RANGE_BYTES, RANGE_BYTES, 0);

	if (__builtin_expect(r == 0, 1))
		c->queued++;
	else if (r == -EAGAIN)
		c->dropped++;
	else
		DIE("odpx_prefetch: %s (%s)", strerror(-r), odpx_last_reason());
}

static double burst(struct odpx_ctx *ctx, char *base, uint64_t k, struct pf_count *c)
{
	uint64_t t0 = now_ns();

	for (uint64_t i = 0; i < k; i++)
		hint(ctx, base, i, c);
	return (double)(now_ns() - t0) / (double)k;
}

/*
 * Wait until the engine has taken every queued hint (bounded: 1 s).  Sleep,
 * do not spin: on a shared CPU a spinning waiter would starve the engine and
 * skew the scheduler's view of both threads for the next timed batch.
 */
static uint64_t queued(struct odpx_ctx *ctx)
{
	struct odpx_priv_state st;

	odpx_priv_state(ctx, &st);
	return st.prefetch_queued;
}

static void drain(struct odpx_ctx *ctx)
{
	uint64_t t0 = now_ns();

	while (queued(ctx)) {
		if (now_ns() - t0 > 1000000000ULL)
			DIE("the engine took no hint for 1 s");
		usleep(20);
	}
}

/*
 * @k hints in timed chunks of CHUNK_HINTS with the engine kept busy: before
 * a chunk, a queue with fewer than CHUNK_HINTS free cells is drained, untimed,
 * to half full (never to empty: the engine must not run out of work).
 */
#define CHUNK_HINTS 64
static double steady(struct odpx_ctx *ctx, char *base, uint64_t k, bool one_cpu,
		     struct pf_count *c)
{
	uint64_t ns = 0, t0 = now_ns();

	for (uint64_t done = 0; done < k; done += CHUNK_HINTS) {
		if (queued(ctx) > PREFETCH_QLEN - CHUNK_HINTS) {
			while (queued(ctx) > PREFETCH_QLEN / 2) {
				if (now_ns() - t0 > 10000000000ULL)
					DIE("the engine took no hint for 10 s");
				if (one_cpu)
					usleep(20);	/* the engine runs only meanwhile */
				else
					sched_yield();	/* no sleep: the engine never empties the queue */
			}
		}
		uint64_t t1 = now_ns();
		for (uint64_t i = 0; i < CHUNK_HINTS; i++)
			hint(ctx, base, done + i, c);
		ns += now_ns() - t1;
	}
	return (double)ns / (double)(k / CHUNK_HINTS * CHUNK_HINTS);
}

/* After drain(): wait until the engine is back asleep on its doorbell (bounded: 1 s). */
static void unlinger(struct odpx_ctx *ctx)
{
	uint64_t t0 = now_ns();

	while (!engine_asleep(ctx)) {
		if (now_ns() - t0 > 1000000000ULL)
			DIE("the engine did not go back to sleep in 1 s");
		usleep(20);
	}
}

/* @k hints in batches of BATCH_HINTS, each timed, then drained untimed. */
#define BATCH_HINTS 256
static double batched(struct odpx_ctx *ctx, char *base, uint64_t k, struct pf_count *c)
{
	uint64_t ns = 0;

	for (uint64_t done = 0; done < k; done += BATCH_HINTS) {
		uint64_t t0 = now_ns();
		for (uint64_t i = 0; i < BATCH_HINTS; i++)
			hint(ctx, base, done + i, c);
		ns += now_ns() - t0;
		drain(ctx);
		unlinger(ctx);
	}
	return (double)ns / (double)(k / BATCH_HINTS * BATCH_HINTS);
}

/* The cost of the now_ns() pair that brackets a paced call. */
static double clock_cost(void)
{
	double v[64];

	for (int i = 0; i < 64; i++) {
		uint64_t t0 = now_ns(), t1 = now_ns();
		v[i] = (double)(t1 - t0);
	}
	return summarize(v, 64, 1).median;
}

static double paced(struct odpx_ctx *ctx, char *base, uint64_t k, double gap_ns,
		    double clk, struct pf_count *c)
{
	uint64_t sum = 0;

	for (uint64_t i = 0; i < k; i++) {
		uint64_t t = now_ns(), t0, t1;
		while ((double)(now_ns() - t) < gap_ns)
			;
		t0 = now_ns();
		hint(ctx, base, i, c);
		t1 = now_ns();
		sum += t1 - t0;
	}
	return (double)sum / (double)k - clk;
}

static void report(const char *cas, const char *mode, struct summary *s,
		   const struct odpx_stats *a, const struct odpx_stats *b,
		   const struct pf_count *c, bool target)
{
	uint64_t wake = b->engine_wakeups - a->engine_wakeups;
	uint64_t ticks = b->engine_ticks - a->engine_ticks;	/* lingers are not counted as wake-ups */
	uint64_t bells = wake > ticks ? wake - ticks : 0;
	uint64_t calls = c->queued + c->dropped;
	double per1k = calls ? 1000.0 * bells / calls : 0;
	/* the target: <= 50 ns and no system call (one write() per 20,000 hints at most) */
	bool ok = s->median <= 50 && per1k <= 0.05;

	kv_time("PF", cas, "uring", mode, RANGES, RANGE_BYTES, s,
		"queued=%lu dropped=%lu engine_wakeups=%lu engine_ticks=%lu engine_lingers=%lu"
		" doorbells=%lu syscalls_per_1k_enqueues=%.2f merged=%lu issued=%lu%s%s",
		(unsigned long)c->queued, (unsigned long)c->dropped, (unsigned long)wake,
		(unsigned long)ticks, (unsigned long)(b->engine_lingers - a->engine_lingers),
		(unsigned long)bells, per1k,
		(unsigned long)(b->prefetch_merged - a->prefetch_merged),
		(unsigned long)(b->prefetch_issued - a->prefetch_issued),
		target ? " what=median_ns_and_no_write() target=<=50 met=" : "",
		target ? (ok ? "yes" : "no") : "");
}

int main(int argc, char **argv)
{
	uint64_t k;
	unsigned reps;
	struct odpx_ctx *ctx;
	struct odpx_stats a, b;
	struct pf_count c = { 0 };
	char *base;
	double *v, clk;
	struct summary s;
	const char *mode;

	bench_init(argc, argv, &o, "PF");
	printf("# prefetch: PF, %s\n", o.quick ? "quick" : "full");
	if (!selected(&o, "PF"))
		return 0;
	k = o.quick ? 10000 : 100000;
	reps = o.quick ? 20 : 50;
	v = calloc(reps, sizeof(*v));
	base = map_anon(RANGES * 2 * RANGE_BYTES, true);
	ctx = open_ctx("uring", 256, o.pin_budget);
	mode = mode_of(ctx);

	/* cache the ranges (starts the monitor and the engine), then warm */
	for (int i = 0; i < RANGES; i++) {
		struct odpx_mr *mr;
		CHECK_ODPX(odpx_reg(ctx, base + (size_t)i * 2 * RANGE_BYTES, RANGE_BYTES,
				    ODPX_ACCESS_LOCAL_WRITE, &mr));
		odpx_dereg(ctx, mr);
	}
	burst(ctx, base, k, &c);

	drain(ctx);	/* the warm-up's leftovers */
	static const struct { const char *name; int others; } pl[] = {
		{ "", -1 }, { "-cross-cpu", 1 }, { "-same-cpu", 0 },
	};
	for (int st = 1; st >= 0; st--) {
		for (int p = 0; p < 3; p++) {
			char name[64];
			if (pl[p].others >= 0 && !place(pl[p].others))
				continue;
			drain(ctx);
			c = (struct pf_count){ 0 };
			a = stats_of(ctx);
			for (unsigned r = 0; r < reps; r++)
				v[r] = st ? steady(ctx, base, k, pl[p].others == 0, &c)
					 : batched(ctx, base, k, &c);
			b = stats_of(ctx);
			s = summarize(v, reps, st ? k / CHUNK_HINTS * CHUNK_HINTS
						  : k / BATCH_HINTS * BATCH_HINTS);
			snprintf(name, sizeof(name), "%s%s", st ? "steady" : "batch-256", pl[p].name);
			report(name, mode, &s, &a, &b, &c, st);
			place(-1);
		}
	}

	c = (struct pf_count){ 0 };
	a = stats_of(ctx);
	for (unsigned r = 0; r < reps; r++)
		v[r] = burst(ctx, base, k, &c);
	b = stats_of(ctx);
	s = summarize(v, reps, k);
	report("burst", mode, &s, &a, &b, &c, false);

	clk = clock_cost();
	static const struct { const char *name; double gap_ns; unsigned k, kq; } gap[] = {
		{ "paced-5us", 5000, 1000, 200 }, { "paced-500us", 500000, 100, 20 },
	};
	for (int g = 0; g < 2; g++) {
		k = o.quick ? gap[g].kq : gap[g].k;
		drain(ctx);	/* the burst's leftovers are not this row's */
		c = (struct pf_count){ 0 };
		a = stats_of(ctx);
		for (unsigned r = 0; r < reps; r++)
			v[r] = paced(ctx, base, k, gap[g].gap_ns, clk, &c);
		b = stats_of(ctx);
		s = summarize(v, reps, k);
		report(gap[g].name, mode, &s, &a, &b, &c, false);
	}

	odpx_close(ctx);
	munmap(base, RANGES * 2 * RANGE_BYTES);
	free(v);
	return 0;
}
