/* SPDX-License-Identifier: MIT */
/*
 * bench.h - what odpx's benchmarks share (header-only: configure.py makes a
 * program of every bench/ *.c, so shared code cannot live in a .c file).
 *
 * Timing discipline (STYLE.md, Benchmarks): warm up, then time R batches of
 * K iterations with CLOCK_MONOTONIC; one sample is a batch's time / K; report
 * the median and the p99 of the R samples.  Comparisons are ratios of two
 * numbers measured in the same process and run.  Timings are never asserted:
 * a target is printed next to the value with met=yes|no, and the exit status
 * only reflects errors of setup.
 *
 * Output: one key=value line per configuration on stdout, each carrying the
 * kernel, backend, mode, page size and N; pagebench parses these lines.
 * Commentary goes to stdout prefixed with '#'.
 */
#ifndef ODPX_BENCH_H
#define ODPX_BENCH_H

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "odpx.h"
#include "odpx-private.h"	/* odpx_open_backend(), null_ops, the monitor's usage */

#define KiB (1UL << 10)
#define MiB (1UL << 20)
#define GiB (1UL << 30)

#define DIE(...) do { fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);		\
	fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); exit(2); } while (0)
#define CHECK_ODPX(expr) do { int _r = (expr); if (_r < 0)				\
	DIE("%s: %s (%s)", #expr, strerror(-_r), odpx_last_reason()); } while (0)

struct bench_opts {
	bool quick;
	const char *only;	/* NULL: every workload of the program */
	uint64_t pin_budget;	/* bytes a uring case may keep pinned at once */
	uint64_t seed;
};

struct summary {
	double median, p99, min;
	unsigned reps;
	uint64_t iters;		/* reps * K: measured iterations */
};

static struct {
	char kernel[65];
	long page;
	int ncpu;
} bench_env;

static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* CPU time of the calling thread: cpu/wall near 1 means nobody took the CPU */
static inline uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* xorshift64*: the random order of W2, reproducible from --seed */
static inline uint64_t rnd(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545F4914F6CDD1DULL;
}

static inline int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Median and p99 (nearest rank) of @n samples; sorts @v. */
static inline struct summary summarize(double *v, unsigned n, uint64_t k)
{
	struct summary s = { 0 };
	unsigned r99;

	if (!n)
		return s;
	qsort(v, n, sizeof(*v), cmp_double);
	s.median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
	r99 = (unsigned)((99ULL * n + 99) / 100);	/* ceil(0.99 n) */
	s.p99 = v[(r99 ? r99 : 1) - 1];
	s.min = v[0];
	s.reps = n;
	s.iters = (uint64_t)n * k;
	return s;
}

static inline uint64_t parse_size(const char *s)
{
	char *end;
	double v = strtod(s, &end);

	switch (*end) {
	case 'k': case 'K': v *= KiB; break;
	case 'm': case 'M': v *= MiB; break;
	case 'g': case 'G': v *= GiB; break;
	}
	return (uint64_t)v;
}

/*
 * The default pin budget is RLIMIT_MEMLOCK even where the kernel would not
 * enforce it (CAP_IPC_LOCK): a benchmark should not pin what an unprivileged
 * run of the same program could not.  --pin-budget raises it.
 */
static inline uint64_t default_pin_budget(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
		return rl.rlim_cur;
	return 64 * MiB;
}

static inline void bench_usage(const char *prog, const char *workloads)
{
	printf("usage: %s [--quick] [--only NAME] [--pin-budget BYTES[KMG]] [--seed N]\n"
	       "  NAME: one of %s\n", prog, workloads);
}

static inline void bench_init(int argc, char **argv, struct bench_opts *o,
			      const char *workloads)
{
	struct utsname u;

	*o = (struct bench_opts){ .pin_budget = default_pin_budget(), .seed = 0x6f647078 };
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick")) {
			o->quick = true;
		} else if (!strcmp(argv[i], "--only") && i + 1 < argc) {
			o->only = argv[++i];
		} else if (!strcmp(argv[i], "--pin-budget") && i + 1 < argc) {
			o->pin_budget = parse_size(argv[++i]);
		} else if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
			o->seed = strtoull(argv[++i], NULL, 0) | 1;
		} else {
			bench_usage(argv[0], workloads);
			exit(strcmp(argv[i], "--help") ? 2 : 0);
		}
	}
	if (uname(&u) == 0)
		snprintf(bench_env.kernel, sizeof(bench_env.kernel), "%s", u.release);
	bench_env.page = sysconf(_SC_PAGESIZE);
	bench_env.ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
	setvbuf(stdout, NULL, _IOLBF, 0);
}

/* Is @name selected by --only (a comma-separated list, case-insensitive)? */
static inline bool selected(const struct bench_opts *o, const char *name)
{
	const char *p = o->only;
	size_t n = strlen(name);

	if (!p)
		return true;
	while (*p) {
		size_t l = strcspn(p, ",");
		if (l == n && !strncasecmp(p, name, n))
			return true;
		p += l + (p[l] == ',');
	}
	return false;
}

static inline const char *size_str(uint64_t bytes, char *buf, size_t len)
{
	if (bytes >= MiB && !(bytes % MiB))
		snprintf(buf, len, "%luMiB", (unsigned long)(bytes / MiB));
	else if (bytes >= KiB && !(bytes % KiB))
		snprintf(buf, len, "%luKiB", (unsigned long)(bytes / KiB));
	else
		snprintf(buf, len, "%luB", (unsigned long)bytes);
	return buf;
}

/* The labels every line carries. */
static inline void kv_head(const char *workload, const char *cas, const char *backend,
			   const char *mode)
{
	printf("workload=%s case=%s backend=%s mode=%s kernel=%s page_bytes=%ld",
	       workload, cas, backend, mode, bench_env.kernel, bench_env.page);
}

static inline void kv_tail(const char *fmt, va_list ap)
{
	if (fmt && *fmt) {
		putchar(' ');
		vprintf(fmt, ap);
	}
	putchar('\n');
}

/* One measured configuration: N objects of @bytes each, median and p99. */
static inline void kv_time(const char *workload, const char *cas, const char *backend,
			   const char *mode, uint64_t n, uint64_t bytes,
			   const struct summary *s, const char *fmt, ...)
{
	va_list ap;

	kv_head(workload, cas, backend, mode);
	printf(" n=%lu bytes=%lu iters=%lu reps=%u median_ns=%.1f p99_ns=%.1f",
	       (unsigned long)n, (unsigned long)bytes, (unsigned long)s->iters, s->reps,
	       s->median, s->p99);
	va_start(ap, fmt);
	kv_tail(fmt, ap);
	va_end(ap);
}

/*
 * A target next to a value (informative, never asserted).  @op is '<' for
 * "at most" and '>' for "at least".
 */
static inline const char *met(double v, char op, double target)
{
	return (op == '<' ? v <= target : v >= target) ? "yes" : "no";
}

/* A ratio of two numbers measured in this process, with its target. */
static inline void kv_ratio(const char *workload, const char *cas, const char *backend,
			    const char *mode, const char *what, double num, double den,
			    char op, double target, const char *fmt, ...)
{
	va_list ap;
	double r = den > 0 ? num / den : 0;

	kv_head(workload, cas, backend, mode);
	printf(" ratio=%.3f what=%s", r, what);
	if (op)
		printf(" target=%s%.2f met=%s", op == '<' ? "<=" : ">=", target,
		       met(r, op, target));
	va_start(ap, fmt);
	kv_tail(fmt, ap);
	va_end(ap);
}

/* Anonymous private memory, optionally populated (faulted in, writable). */
static inline void *map_anon(size_t len, bool populate)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	if (p == MAP_FAILED)
		DIE("mmap %zu: %s", len, strerror(errno));
	if (populate)
		memset(p, 0x5a, len);
	return p;
}

/* Resident set size in bytes (/proc/self/statm). */
static inline uint64_t rss_bytes(void)
{
	unsigned long size, res;
	FILE *f = fopen("/proc/self/statm", "re");

	if (!f || fscanf(f, "%lu %lu", &size, &res) != 2)
		DIE("/proc/self/statm unreadable");
	fclose(f);
	return (uint64_t)res * (uint64_t)bench_env.page;
}

static inline struct odpx_stats stats_of(struct odpx_ctx *ctx)
{
	struct odpx_stats st;

	CHECK_ODPX(odpx_stats_read(ctx, &st, sizeof(st)));
	return st;
}

/* The mode a context runs in, for the labels. */
static inline const char *mode_of(struct odpx_ctx *ctx)
{
	enum odpx_mode m = ODPX_MODE_AUTO;

	CHECK_ODPX(odpx_mode_get(ctx, &m, NULL));
	return odpx_mode_str(m);
}

/*
 * Put this thread on CPU 0 and every other thread of the process (odpx's
 * engine and monitor, a benchmark's helpers) on CPU @others; -1: let them
 * all run anywhere again.  Threads created later inherit their creator's
 * mask, so call it again after creating one.  False on a 1-CPU machine.
 */
static inline bool place(int others)
{
	pid_t self = (pid_t)syscall(SYS_gettid);
	cpu_set_t all, one, mine;
	struct dirent *d;
	DIR *dir;

	if (bench_env.ncpu < 2)
		return false;
	CPU_ZERO(&all);
	for (int c = 0; c < bench_env.ncpu && c < CPU_SETSIZE; c++)
		CPU_SET(c, &all);
	CPU_ZERO(&one);
	CPU_SET(others < 0 ? 0 : others, &one);
	CPU_ZERO(&mine);
	CPU_SET(0, &mine);
	sched_setaffinity(self, sizeof(cpu_set_t), others < 0 ? &all : &mine);
	if (!(dir = opendir("/proc/self/task")))
		return false;
	while ((d = readdir(dir))) {
		pid_t tid = (pid_t)atoi(d->d_name);
		if (tid > 0 && tid != self)	/* io_uring's own workers refuse: fine */
			sched_setaffinity(tid, sizeof(cpu_set_t), others < 0 ? &all : &one);
	}
	closedir(dir);
	return true;
}

/*
 * A context on "null" (pins nothing: the cache alone) or "uring" (real pins),
 * in the mode odpx picks (pin here; ODPX_MODE can force another, and the
 * labels then say so).  Unused entries are never trimmed behind our back:
 * max_unused_bytes = max_pinned_bytes.
 */
static inline struct odpx_ctx *open_ctx_flags(const char *backend, uint64_t max_entries,
					      uint64_t max_pinned_bytes, uint32_t flags)
{
	struct odpx_attr a = { .comp_mask = ODPX_ATTR_LIMITS | ODPX_ATTR_FLAGS, .flags = flags };
	struct odpx_ctx *ctx;

	a.limits.max_entries = max_entries;
	a.limits.max_pinned_bytes = max_pinned_bytes;
	a.limits.max_unused_bytes = max_pinned_bytes;
	if (!strcmp(backend, "null"))
		CHECK_ODPX(odpx_open_backend(&null_ops, &a, &ctx));
	else
		CHECK_ODPX(odpx_open_uring(&a, &ctx));
	return ctx;
}

static inline struct odpx_ctx *open_ctx(const char *backend, uint64_t max_entries,
					uint64_t max_pinned_bytes)
{
	return open_ctx_flags(backend, max_entries, max_pinned_bytes, 0);
}

/* One get and release of [a, a+len); dies on any error (W1, W2, LRU, MEM). */
static inline void reg_dereg(struct odpx_ctx *ctx, void *a, size_t len)
{
	struct odpx_mr *mr;
	int r = odpx_reg(ctx, a, len, ODPX_ACCESS_LOCAL_WRITE, &mr);

	if (__builtin_expect(r != 0, 0))
		DIE("odpx_reg %p+%zu: %s (%s)", a, len, strerror(-r), odpx_last_reason());
	if (__builtin_expect(odpx_dereg(ctx, mr) != 0, 0))
		DIE("odpx_dereg: %s", odpx_last_reason());
}

/* ---- W5: the same batch on two threads at once ---- */

struct timed_worker {
	double (*batch)(void *set, uint64_t k);
	void *set;
	uint64_t k, t0, t1, cpu_ns;	/* cpu_ns: thread CPU time of the batch */
	unsigned reps;
	int cpu;
	pthread_barrier_t *bar;
};

static inline void pin_cpu(int cpu)
{
	cpu_set_t set;

	if (cpu < 0)
		return;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

/* One round: start together, time the batch, finish together. */
static inline void timed_batch(struct timed_worker *w)
{
	pthread_barrier_wait(w->bar);
	uint64_t c0 = thread_cpu_ns();
	w->t0 = now_ns();
	w->batch(w->set, w->k);
	w->t1 = now_ns();
	w->cpu_ns = thread_cpu_ns() - c0;
	pthread_barrier_wait(w->bar);
}

static inline void *timed_worker_main(void *arg)
{
	struct timed_worker *w = arg;

	pin_cpu(w->cpu);
	for (unsigned r = 0; r < w->reps; r++)
		timed_batch(w);
	return NULL;
}

/*
 * Run @batch over @set[0] on this thread and over @set[1] on a second one,
 * each on its own CPU when there are two, @reps rounds of @k iterations.
 * @v gets ns per iteration of both threads together, @share the fraction of
 * the elapsed time the two threads had a CPU.  Returns whether they were
 * pinned.
 */
static inline bool two_threads_run(double (*batch)(void *, uint64_t), void *set[2], uint64_t k,
				   unsigned reps, double *v, double *share)
{
	struct timed_worker w[2];
	pthread_barrier_t bar;
	cpu_set_t saved;
	pthread_t thr;

	pthread_barrier_init(&bar, NULL, 2);
	for (int i = 0; i < 2; i++)
		w[i] = (struct timed_worker){ .batch = batch, .set = set[i], .k = k, .reps = reps,
					      .cpu = bench_env.ncpu >= 2 ? i : -1, .bar = &bar };
	pthread_getaffinity_np(pthread_self(), sizeof(saved), &saved);
	if (pthread_create(&thr, NULL, timed_worker_main, &w[1]))
		DIE("pthread_create");
	pin_cpu(w[0].cpu);
	for (unsigned r = 0; r < reps; r++) {
		timed_batch(&w[0]);
		uint64_t t0 = w[0].t0 < w[1].t0 ? w[0].t0 : w[1].t0;
		uint64_t t1 = w[0].t1 > w[1].t1 ? w[0].t1 : w[1].t1;
		v[r] = (double)(t1 - t0) / (double)(2 * k);
		share[r] = (double)(w[0].cpu_ns + w[1].cpu_ns) / (double)(2 * (t1 - t0));
	}
	pthread_join(thr, NULL);
	pthread_setaffinity_np(pthread_self(), sizeof(saved), &saved);
	pthread_barrier_destroy(&bar);
	return w[0].cpu >= 0;
}

#endif
