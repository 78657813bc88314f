/* SPDX-License-Identifier: MIT */
/*
 * scaling.h - the thread pool and timing of the SCALE workload, shared by
 * scaling.c (odpx and the model) and ucx-scaling.c (UCX's rcache, a child
 * process because libucs hooks mmap).  Header-only, as bench.h.
 *
 * Shapes, one operation being one get + release of a registration:
 *   own   each thread on its own 64 KiB buffer, the same one every time
 *   pool  every thread on one pool of 4,096 buffers of 4 KiB, taken at random
 *
 * The pool's threads are created once and kept for the whole run: odpx gives
 * each of the first 32 threads of a process a counter shard of its own, so a
 * benchmark that made fresh threads per configuration would, after a few,
 * measure the shared overflow shard instead of the cache.
 *
 * One round: the main thread publishes the job, all pool threads meet at
 * the start barrier, the first @nthreads run the job's loop until the main
 * thread, after sleeping the round's length, sets the stop word; all meet at
 * the end barrier.  The main thread writes the job only outside the two
 * barriers, the workers read it only between them, so the barriers order
 * every access to it.  A round's sample is the wall time from the first
 * worker's start to the last one's stop over the operations of all, as ns
 * per operation per thread (= nthreads / throughput); the first round is a
 * warm-up.  Time-bounded rounds keep the runtime fixed whatever the thread
 * count or the implementation's speed.
 *
 * Worker i runs on the i-th CPU of the process's affinity mask, modulo its
 * size; a thread count above that size is run all the same and labelled
 * oversubscribed=1.
 */
#ifndef ODPX_SCALING_H
#define ODPX_SCALING_H

#include "bench.h"

#define SCALE_MAX_THREADS 64
#define SCALE_OWN_BYTES (64 * KiB)
#define SCALE_POOL_N 4096
#define SCALE_POOL_BYTES (4 * KiB)
#define SCALE_CHECK_EVERY 64	/* operations between two looks at the stop word */

enum scale_shape { SCALE_OWN, SCALE_POOL };

static const char *const scale_case_base[] = { "own-64KiB", "pool-4096x4KiB" };

struct scale_worker;
typedef uint64_t (*scale_loop_fn)(struct scale_worker *w, void *arg);

struct scale_job {
	scale_loop_fn loop;	/* NULL with quit set: the pool ends */
	void *arg;		/* the implementation's shared state */
	unsigned nthreads;
	bool quit;
};

/* One per pool thread, each on its own lines. */
struct scale_worker {
	unsigned idx;
	int cpu;
	char *own;		/* this thread's buffer (own shape) */
	uint64_t seed;		/* this thread's random sequence (pool shape) */
	uint64_t ops, t0, t1, cpu_ns;	/* the last round's */
	pthread_t tid;
} __attribute__((aligned(64)));

static struct {
	struct scale_job job;
	pthread_barrier_t start, end;
	struct scale_worker *w;
	unsigned nworkers;
	int cpus[SCALE_MAX_THREADS];
	unsigned ncpus;		/* CPUs of the affinity mask, at most SCALE_MAX_THREADS */
} scale;

/* Written by the main thread once a round's time is up; read by every worker every few ops. */
static _Atomic bool scale_stop __attribute__((aligned(64)));
static char scale_stop_pad[64] __attribute__((unused));

static inline bool scale_stopped(void)
{
	return atomic_load_explicit(&scale_stop, memory_order_relaxed);
}

static void *scale_worker_main(void *arg)
{
	struct scale_worker *w = arg;

	pin_cpu(w->cpu);
	for (;;) {
		pthread_barrier_wait(&scale.start);
		struct scale_job job = scale.job;	/* ordered by the barrier */
		if (job.quit)
			return NULL;
		if (w->idx < job.nthreads) {
			uint64_t c0 = thread_cpu_ns();
			w->t0 = now_ns();
			w->ops = job.loop(w, job.arg);
			w->t1 = now_ns();
			w->cpu_ns = thread_cpu_ns() - c0;
		}
		pthread_barrier_wait(&scale.end);
	}
}

/* The CPUs of the process's affinity mask, in scale.cpus; their count. */
static inline unsigned scale_cpus(void)
{
	cpu_set_t set;

	if (scale.ncpus)
		return scale.ncpus;
	if (sched_getaffinity(0, sizeof(set), &set))
		CPU_ZERO(&set);
	for (int c = 0; c < CPU_SETSIZE && scale.ncpus < SCALE_MAX_THREADS; c++)
		if (CPU_ISSET(c, &set))
			scale.cpus[scale.ncpus++] = c;
	if (!scale.ncpus)
		scale.cpus[scale.ncpus++] = -1;	/* unknown: do not pin */
	return scale.ncpus;
}

/* The thread counts of a run: 1, 2, 4, ... 16, and on up to the CPUs present. */
static inline unsigned scale_counts(unsigned *out, unsigned max_out)
{
	unsigned n = 0;

	scale_cpus();
	for (unsigned t = 1; t <= SCALE_MAX_THREADS && n < max_out; t *= 2)
		if (t <= 16 || t <= scale.ncpus)
			out[n++] = t;
	return n;
}

/* Start @n pool threads, each with its own buffer of @own_stride bytes at @own_base + i * stride. */
static inline void scale_pool_start(unsigned n, uint64_t seed, char *own_base, size_t own_stride)
{
	scale_cpus();
	scale.nworkers = n;
	scale.w = aligned_alloc(64, n * sizeof(*scale.w));
	if (!scale.w)
		DIE("out of memory");
	pthread_barrier_init(&scale.start, NULL, n + 1);
	pthread_barrier_init(&scale.end, NULL, n + 1);
	for (unsigned i = 0; i < n; i++) {
		struct scale_worker *w = &scale.w[i];
		*w = (struct scale_worker){ .idx = i, .cpu = scale.cpus[i % scale.ncpus],
					    .own = own_base + i * own_stride };
		for (unsigned j = 0; j <= i; j++)
			w->seed = rnd(&seed) | 1;
		if (pthread_create(&w->tid, NULL, scale_worker_main, w))
			DIE("pthread_create");
	}
}

static inline void scale_pool_stop(void)
{
	scale.job = (struct scale_job){ .quit = true };
	pthread_barrier_wait(&scale.start);
	for (unsigned i = 0; i < scale.nworkers; i++)
		pthread_join(scale.w[i].tid, NULL);
	pthread_barrier_destroy(&scale.start);
	pthread_barrier_destroy(&scale.end);
	free(scale.w);
}

struct scale_result {
	struct summary ns;	/* ns per operation per thread, over the timed rounds */
	double mops;		/* all threads together, from the median */
	double cpu_share;	/* median: the workers' CPU time / (CPUs they could use * wall) */
	uint64_t ops;		/* all timed rounds */
	unsigned nthreads;
	bool oversubscribed;
};

/* One round of @loop on the first @nthreads pool threads, for @round_ns. */
static inline double scale_round(scale_loop_fn loop, void *arg, unsigned nthreads,
				 uint64_t round_ns, double *share, uint64_t *ops)
{
	struct timespec ts = { (time_t)(round_ns / 1000000000ULL), (long)(round_ns % 1000000000ULL) };
	uint64_t t0 = UINT64_MAX, t1 = 0, cpu = 0, n = 0;
	unsigned busy = nthreads < scale.ncpus ? nthreads : scale.ncpus;

	scale.job = (struct scale_job){ .loop = loop, .arg = arg, .nthreads = nthreads };
	atomic_store_explicit(&scale_stop, false, memory_order_relaxed);
	pthread_barrier_wait(&scale.start);
	nanosleep(&ts, NULL);
	atomic_store_explicit(&scale_stop, true, memory_order_relaxed);
	pthread_barrier_wait(&scale.end);
	for (unsigned i = 0; i < nthreads; i++) {
		struct scale_worker *w = &scale.w[i];
		t0 = w->t0 < t0 ? w->t0 : t0;
		t1 = w->t1 > t1 ? w->t1 : t1;
		cpu += w->cpu_ns;
		n += w->ops;
	}
	*share = (double)cpu / ((double)busy * (double)(t1 - t0));
	*ops = n;
	return n ? (double)(t1 - t0) * nthreads / (double)n : 0;
}

/* A warm-up round, then @reps timed ones of @round_ns each. */
static inline struct scale_result scale_measure(scale_loop_fn loop, void *arg, unsigned nthreads,
						uint64_t round_ns, unsigned reps)
{
	double v[reps], share[reps];
	struct scale_result r = { .nthreads = nthreads, .oversubscribed = nthreads > scale.ncpus };
	uint64_t ops;

	if (nthreads > scale.nworkers)
		DIE("%u threads asked of a pool of %u", nthreads, scale.nworkers);
	scale_round(loop, arg, nthreads, round_ns, &share[0], &ops);
	for (unsigned i = 0; i < reps; i++) {
		v[i] = scale_round(loop, arg, nthreads, round_ns, &share[i], &ops);
		r.ops += ops;
	}
	r.ns = summarize(v, reps, 1);
	r.ns.iters = r.ops;
	r.cpu_share = summarize(share, reps, 1).median;
	r.mops = r.ns.median > 0 ? 1e3 * nthreads / r.ns.median : 0;
	return r;
}

/* Round length and count: --quick a few seconds in all, full well under a minute on 2 CPUs. */
static inline void scale_timing(const struct bench_opts *o, uint64_t *round_ns, unsigned *reps)
{
	*round_ns = o->quick ? 15000000ULL : 100000000ULL;
	*reps = o->quick ? 5 : 7;
}

/* The case label of a line: the shape and the thread count. */
static inline const char *scale_case(enum scale_shape s, unsigned nthreads, char *buf, size_t len)
{
	snprintf(buf, len, "%s-t%u", scale_case_base[s], nthreads);
	return buf;
}

/* One configuration's line (kv_time's fields and the scaling ones); @fmt adds more. */
static inline void scale_line(enum scale_shape s, const char *backend, const char *mode,
			      const struct scale_result *r, double mops1, const char *fmt, ...)
{
	char cas[48];
	va_list ap;

	kv_head("SCALE", scale_case(s, r->nthreads, cas, sizeof(cas)), backend, mode);
	printf(" n=%u bytes=%lu iters=%lu reps=%u median_ns=%.2f p99_ns=%.2f threads=%u cpus=%u"
	       " oversubscribed=%d mops=%.2f scaling=%.3f cpu_share=%.2f", r->nthreads,
	       s == SCALE_OWN ? SCALE_OWN_BYTES : SCALE_POOL_BYTES, (unsigned long)r->ops,
	       r->ns.reps, r->ns.median, r->ns.p99, r->nthreads, scale.ncpus, r->oversubscribed,
	       r->mops, mops1 > 0 ? r->mops / mops1 : 1.0, r->cpu_share);
	va_start(ap, fmt);
	kv_tail(fmt, ap);
	va_end(ap);
}

/*
 * --threads LIST (comma-separated counts) is the SCALE programs' own option:
 * taken out of argv before bench_init() sees it.  0 entries: the default counts.
 */
static inline unsigned scale_take_threads(int *argc, char **argv, unsigned *out, unsigned max_out)
{
	unsigned n = 0;

	for (int i = 1; i < *argc; i++) {
		if (strcmp(argv[i], "--threads") || i + 1 >= *argc)
			continue;
		for (char *p = argv[i + 1]; *p && n < max_out; p += *p == ',') {
			char *end;
			unsigned long t = strtoul(p, &end, 10);
			if (end == p || !t || t > SCALE_MAX_THREADS)
				DIE("--threads: counts 1 to %d, comma-separated", SCALE_MAX_THREADS);
			out[n++] = (unsigned)t;
			p = end;
		}
		memmove(&argv[i], &argv[i + 2], (size_t)(*argc - i - 2 + 1) * sizeof(*argv));
		*argc -= 2;
		i--;
	}
	return n;
}

#endif
