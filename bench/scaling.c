// SPDX-License-Identifier: MIT
/*
 * scaling.c - SCALE: one context shared by 1, 2, 4, 8 and 16 threads (and on
 * up to the CPUs present), against the model of a reference-counted hit and
 * UCX's rcache, in the same run.
 *
 *   build/scaling [--quick] [--only own,pool] [--threads 1,2,...] [--seed N]
 *                 [--pin-budget BYTES[KMG]]
 *
 * Shapes (scaling.h): own, each thread odpx_reg + odpx_dereg of its own
 * 64 KiB buffer; pool, every thread on one pool of 4,096 buffers of 4 KiB,
 * taken at random.  One operation is one get + release.  Each count runs
 *
 *   null    odpx on the null backend (the cache alone), a context opened
 *           with the default flags, as a user gets it: a hit makes no
 *           system call.  The targets are this backend's.
 *   uring   the same on the io_uring backend (real pins); the pool needs
 *           twice its 16 MiB of --pin-budget, else it is left out.
 *   model   no odpx: the least a reference-counted hit can do.  64-byte
 *           records at their own slots of a prime-sized table, found by
 *           multiplication as odpx's index does; get = find the slot, check
 *           the key, CAS the count up (retried while other threads move
 *           it); release = atomic decrement; both out of line.  The pool's
 *           model: the same 4,096 records shared by every thread in the
 *           same random order, the limit of the mechanism for the shared
 *           pool.  The own shape's: a record private to each thread, the
 *           limit for private buffers.
 *   model-serial  the model with a load fence after each operation, so
 *           that no operation overlaps the next one's line transfers
 *           (informative: the model's operations are independent, and an
 *           out-of-order core hides part of a shared record's transfer
 *           behind the next one; a hit with more work around its atomics,
 *           or an application working between registrations, hides less).
 *   ucx-rcache  UCX's ucs_rcache with trivial callbacks, same shapes, same
 *           counts and seed, in a child (ucx-scaling) run between odpx's
 *           and the model's rounds; absent where UCX is not installed.
 *
 * Each configuration's line gives ns per operation per thread (median and
 * p99 over the rounds), Mops of all threads together, the ratio to the
 * first count's Mops (scaling=), and for odpx the ratios to the model
 * (time) and to UCX (throughput) at the same count.  Targets (informative):
 * 2 threads >= 1.8 x one thread; 16 threads >= 15 x (own) and >= 12 x
 * (pool) where 16 CPUs exist, met=n/a where they do not; the pool within
 * 1.25 x the model; odpx above UCX at every count.
 */
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <spawn.h>
#include <sys/wait.h>

#include "scaling.h"

extern char **environ;

#define MAX_COUNTS 8
#define OWN_STRIDE (2 * SCALE_OWN_BYTES)	/* own buffers apart: distinct entries */

static struct bench_opts o;
static char dir[PATH_MAX];

/* ---- odpx ---- */

static uint64_t odpx_own(struct scale_worker *w, void *arg)
{
	struct odpx_ctx *ctx = arg;
	char *a = w->own;
	uint64_t n = 0;

	while (!scale_stopped()) {
		for (int i = 0; i < SCALE_CHECK_EVERY; i++)
			reg_dereg(ctx, a, SCALE_OWN_BYTES);
		n += SCALE_CHECK_EVERY;
	}
	return n;
}

struct pool_arg {
	struct odpx_ctx *ctx;
	char *base;
};

static uint64_t odpx_pool(struct scale_worker *w, void *arg)
{
	struct pool_arg *p = arg;
	uint64_t s = w->seed, n = 0;

	while (!scale_stopped()) {
		for (int i = 0; i < SCALE_CHECK_EVERY; i++)	/* rnd >> 52: 0 .. 4095 */
			reg_dereg(p->ctx, p->base + (rnd(&s) >> 52) * SCALE_POOL_BYTES,
				  SCALE_POOL_BYTES);
		n += SCALE_CHECK_EVERY;
	}
	w->seed = s;
	return n;
}

/* ---- the model ---- */

struct model_rec {
	_Atomic uint64_t ref;
	uintptr_t key;
	char pad[48];
};

struct model {
	struct model_rec *rec;
	char *base;		/* the pool's buffers (the pool's model) */
	uint32_t p;		/* slots: the first prime >= SCALE_POOL_N */
	uint64_t pmul;		/* 2^64 / p, rounded up */
};

static uint32_t model_slot(const struct model *m, const char *a)
{
	uint32_t k = (uint32_t)((uintptr_t)a >> 12);

	return (uint32_t)(((unsigned __int128)(m->pmul * k) * m->p) >> 64);
}

/* A CAS that fails saw another thread's get or release: the count moved, try again. */
static __attribute__((noinline)) struct model_rec *model_get(struct model *m, char *a)
{
	struct model_rec *r = &m->rec[model_slot(m, a)];
	uint64_t v = atomic_load_explicit(&r->ref, memory_order_acquire);

	if (__builtin_expect(r->key != (uintptr_t)a, 0))
		DIE("model: lost %p", (void *)a);
	for (unsigned t = 0; t < 1U << 24; t++)
		if (atomic_compare_exchange_weak_explicit(&r->ref, &v, v + 1, memory_order_acq_rel,
							  memory_order_acquire))
			return r;
	DIE("model: no get of %p in 2^24 tries", (void *)a);
}

static __attribute__((noinline)) void model_put(struct model_rec *r)
{
	atomic_fetch_sub_explicit(&r->ref, 1, memory_order_release);
}

static void model_init(struct model *m, char *const *keys, size_t n)
{
	m->p = SCALE_POOL_N;
	while (!odpx_is_prime(m->p))
		m->p++;
	m->pmul = UINT64_MAX / m->p + 1;
	m->rec = map_anon(m->p * sizeof(*m->rec), true);
	memset(m->rec, 0, m->p * sizeof(*m->rec));
	for (size_t i = 0; i < n; i++) {
		struct model_rec *r = &m->rec[model_slot(m, keys[i])];
		if (r->key)
			DIE("model: slot collision at %zu", i);
		r->key = (uintptr_t)keys[i];
	}
}

/*
 * Between two operations of model-serial: no load of the next one starts
 * before this one is done, as when an application works between two
 * registrations.  The plain model's operations are independent, so an
 * out-of-order core overlaps the next record's line transfer with this one.
 */
static inline void serialize(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_lfence();
#else
	atomic_thread_fence(memory_order_seq_cst);
#endif
}

static uint64_t model_own(struct scale_worker *w, void *arg)
{
	struct model *m = arg;
	char *a = w->own;
	uint64_t n = 0;

	while (!scale_stopped()) {
		for (int i = 0; i < SCALE_CHECK_EVERY; i++)
			model_put(model_get(m, a));
		n += SCALE_CHECK_EVERY;
	}
	return n;
}

static uint64_t model_pool(struct scale_worker *w, void *arg)
{
	struct model *m = arg;
	uint64_t s = w->seed, n = 0;

	while (!scale_stopped()) {
		for (int i = 0; i < SCALE_CHECK_EVERY; i++)
			model_put(model_get(m, m->base + (rnd(&s) >> 52) * SCALE_POOL_BYTES));
		n += SCALE_CHECK_EVERY;
	}
	w->seed = s;
	return n;
}

static uint64_t model_serial_own(struct scale_worker *w, void *arg)
{
	struct model *m = arg;
	char *a = w->own;
	uint64_t n = 0;

	while (!scale_stopped()) {
		for (int i = 0; i < SCALE_CHECK_EVERY; i++) {
			model_put(model_get(m, a));
			serialize();
		}
		n += SCALE_CHECK_EVERY;
	}
	return n;
}

static uint64_t model_serial_pool(struct scale_worker *w, void *arg)
{
	struct model *m = arg;
	uint64_t s = w->seed, n = 0;

	while (!scale_stopped()) {
		for (int i = 0; i < SCALE_CHECK_EVERY; i++) {
			model_put(model_get(m, m->base + (rnd(&s) >> 52) * SCALE_POOL_BYTES));
			serialize();
		}
		n += SCALE_CHECK_EVERY;
	}
	w->seed = s;
	return n;
}

/* ---- UCX, in a child ---- */

struct ucx_figure {
	bool have;
	double ns, mops;
};

/*
 * ucx-scaling for one shape and count: echo its lines, keep its figure.
 * The child runs one count, so its scaling= is relative to that count; the
 * echo puts the ratio to UCX's figure at the first count (@mops1, 0: this
 * is the first) in its place.
 */
static struct ucx_figure ucx_run(enum scale_shape s, unsigned nthreads, double mops1)
{
	static bool absent;
	struct ucx_figure f = { 0 };
	char path[PATH_MAX + 16], threads[16], seed[32];
	char *argv[12], *buf = NULL;
	int argc = 0, fds[2], st;
	posix_spawn_file_actions_t fa;
	size_t cap = 0;
	pid_t pid;
	FILE *in;

	snprintf(path, sizeof(path), "%s/ucx-scaling", dir);
	if (absent)
		return f;
	if (access(path, X_OK)) {
		printf("ucx=not-installed: %s absent (Debian: ./configure.py --install-deps=bench"
		       " && ninja bench)\n", path);
		absent = true;
		return f;
	}
	snprintf(threads, sizeof(threads), "%u", nthreads);
	snprintf(seed, sizeof(seed), "%lu", (unsigned long)o.seed);
	argv[argc++] = path;
	if (o.quick)
		argv[argc++] = "--quick";
	argv[argc++] = "--only";
	argv[argc++] = s == SCALE_OWN ? "own" : "pool";
	argv[argc++] = "--threads";
	argv[argc++] = threads;
	argv[argc++] = "--seed";
	argv[argc++] = seed;
	argv[argc] = NULL;
	if (pipe2(fds, O_CLOEXEC))
		DIE("pipe: %s", strerror(errno));
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
	st = posix_spawn(&pid, path, &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(fds[1]);
	if (st)
		DIE("%s: %s", path, strerror(st));
	in = fdopen(fds[0], "r");
	while (getline(&buf, &cap, in) > 0) {
		const char *ns = strstr(buf, " median_ns="), *mops = strstr(buf, " mops=");
		char *sc = strstr(buf, " scaling=");
		if (strncmp(buf, "workload=SCALE ", 15) || !ns || !mops || !sc) {
			fputs(buf, stdout);
			continue;
		}
		f.ns = strtod(ns + 11, NULL);
		f.mops = strtod(mops + 6, NULL);
		f.have = true;
		*sc = 0;
		printf("%s scaling=%.3f%s", buf, mops1 > 0 ? f.mops / mops1 : 1.0,
		       sc + 1 + strcspn(sc + 1, " \n"));
	}
	fclose(in);
	free(buf);
	if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
		DIE("%s failed", path);
	return f;
}

/* ---- one shape ---- */

enum { NUL, URING, MODEL, SERIAL, UCX, IMPLS };

struct shape_run {
	enum scale_shape s;
	struct odpx_ctx *ctx[2];	/* null, uring (NULL: left out) */
	struct pool_arg pool[2];
	struct model model;
	const char *mode;
	double mops1[IMPLS];	/* at the first count */
};

static void warm(struct odpx_ctx *ctx, char *const *bufs, size_t n, size_t bytes)
{
	for (size_t i = 0; i < n; i++)
		reg_dereg(ctx, bufs[i], bytes);
}

static void targets(const struct shape_run *sr, const struct scale_result *r, double model_ns,
		    const struct ucx_figure *u)
{
	unsigned n = r->nthreads;
	char cas[48];

	scale_case(sr->s, n, cas, sizeof(cas));
	if (n == 2)
		kv_ratio("SCALE/1", cas, "null", sr->mode, "mops_2threads/mops_1thread", r->mops,
			 sr->mops1[NUL], '>', 1.8, "threads=2 oversubscribed=%d", r->oversubscribed);
	if (n == 16) {
		double t = sr->s == SCALE_OWN ? 15 : 12;
		if (scale.ncpus >= 16)
			kv_ratio("SCALE/1", cas, "null", sr->mode, "mops_16threads/mops_1thread",
				 r->mops, sr->mops1[NUL], '>', t, "threads=16 oversubscribed=0");
		else	/* a target for a 16-CPU machine: not applicable here */
			kv_ratio("SCALE/1", cas, "null", sr->mode, "mops_16threads/mops_1thread",
				 r->mops, sr->mops1[NUL], 0, 0,
				 "target=>=%.2f met=n/a why=needs_16_cpus threads=16 oversubscribed=1",
				 t);
	}
	kv_ratio("SCALE/model", cas, "null", sr->mode, "odpx_ns/model_ns", r->ns.median, model_ns,
		 sr->s == SCALE_POOL ? '<' : 0, 1.25, "threads=%u oversubscribed=%d model=%s", n,
		 r->oversubscribed, sr->s == SCALE_POOL ? "shared-records" : "private-record");
	if (u->have)
		kv_ratio("SCALE/UCX", cas, "null", sr->mode, "odpx_mops/ucx_mops", r->mops, u->mops,
			 '>', 1.0, "threads=%u oversubscribed=%d", n, r->oversubscribed);
}

static void run_shape(enum scale_shape s, const unsigned *counts, unsigned ncounts,
		      char *own_base, char *pool_base)
{
	static const char *const backends[] = { "null", "uring" };
	size_t nbufs = s == SCALE_OWN ? scale.nworkers : SCALE_POOL_N;
	size_t bytes = s == SCALE_OWN ? SCALE_OWN_BYTES : SCALE_POOL_BYTES;
	char **bufs = calloc(nbufs, sizeof(*bufs));
	struct shape_run sr = { .s = s };
	uint64_t round_ns;
	unsigned reps;

	scale_timing(&o, &round_ns, &reps);
	for (size_t i = 0; i < nbufs; i++)
		bufs[i] = s == SCALE_OWN ? own_base + i * OWN_STRIDE : pool_base + i * bytes;
	for (int b = 0; b < 2; b++) {
		uint64_t budget = b ? o.pin_budget : (uint64_t)1 << 40;
		if (b && budget / 2 < nbufs * bytes) {
			printf("# SCALE %s: uring left out: it would pin %zu bytes, over half the"
			       " --pin-budget of %lu\n", scale_case_base[s], nbufs * bytes,
			       (unsigned long)budget);
			continue;
		}
		sr.ctx[b] = open_ctx(backends[b], nbufs + 64, budget);
		warm(sr.ctx[b], bufs, nbufs, bytes);
		sr.pool[b] = (struct pool_arg){ sr.ctx[b], pool_base };
	}
	sr.mode = mode_of(sr.ctx[NUL]);
	model_init(&sr.model, bufs, nbufs);
	sr.model.base = pool_base;

	for (unsigned c = 0; c < ncounts; c++) {
		unsigned n = counts[c];
		struct scale_result r[4] = { 0 };
		char mode[24];

		for (int b = 0; b < 2; b++)
			if (sr.ctx[b])
				r[b] = scale_measure(s == SCALE_OWN ? odpx_own : odpx_pool,
						     s == SCALE_OWN ? (void *)sr.ctx[b] : &sr.pool[b],
						     n, round_ns, reps);
		r[MODEL] = scale_measure(s == SCALE_OWN ? model_own : model_pool, &sr.model, n,
					 round_ns, reps);
		r[SERIAL] = scale_measure(s == SCALE_OWN ? model_serial_own : model_serial_pool,
					  &sr.model, n, round_ns, reps);
		struct ucx_figure u = ucx_run(s, n, c ? sr.mops1[UCX] : 0);
		if (c == 0) {
			for (int i = 0; i < 4; i++)
				sr.mops1[i] = r[i].mops;
			sr.mops1[UCX] = u.mops;
		}
		scale_line(s, "model", "-", &r[MODEL], sr.mops1[MODEL], "model=%s",
			   s == SCALE_POOL ? "shared-records" : "private-record");
		scale_line(s, "model-serial", "-", &r[SERIAL], sr.mops1[SERIAL], "model=%s",
			   s == SCALE_POOL ? "shared-records-serialized" : "private-record-serialized");
		for (int b = 0; b < 2; b++) {
			if (!sr.ctx[b])
				continue;
			snprintf(mode, sizeof(mode), "%s", b ? mode_of(sr.ctx[b]) : sr.mode);
			char ucx[48] = "";
			if (u.have)
				snprintf(ucx, sizeof(ucx), " over_ucx_mops=%.3f", r[b].mops / u.mops);
			scale_line(s, backends[b], mode, &r[b], sr.mops1[b],
				   "over_model_ns=%.3f over_serial_model_ns=%.3f%s flags=default",
				   r[b].ns.median / r[MODEL].ns.median,
				   r[b].ns.median / r[SERIAL].ns.median, ucx);
		}
		targets(&sr, &r[NUL], r[MODEL].ns.median, &u);
	}
	for (int b = 0; b < 2; b++)
		if (sr.ctx[b])
			odpx_close(sr.ctx[b]);
	munmap(sr.model.rec, sr.model.p * sizeof(*sr.model.rec));
	free(bufs);
}

int main(int argc, char **argv)
{
	unsigned counts[MAX_COUNTS], ncounts, max = 0;
	char self[PATH_MAX];
	ssize_t len;
	uint64_t t0 = now_ns();

	ncounts = scale_take_threads(&argc, argv, counts, MAX_COUNTS);
	bench_init(argc, argv, &o, "own, pool (comma-separated); also --threads 1,2,...");
	len = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (len <= 0)
		DIE("readlink /proc/self/exe: %s", strerror(errno));
	self[len] = 0;
	snprintf(dir, sizeof(dir), "%s", dirname(self));

	if (!ncounts)
		ncounts = scale_counts(counts, MAX_COUNTS);
	for (unsigned i = 0; i < ncounts; i++)
		max = counts[i] > max ? counts[i] : max;

	char *own = map_anon(max * OWN_STRIDE, true);
	char *pool = map_anon(SCALE_POOL_N * SCALE_POOL_BYTES, true);
	scale_pool_start(max, o.seed, own, OWN_STRIDE);
	printf("# scaling: SCALE, %s; %u CPUs; threads", o.quick ? "quick" : "full", scale.ncpus);
	for (unsigned i = 0; i < ncounts; i++)
		printf(" %u%s", counts[i], counts[i] > scale.ncpus ? "(oversubscribed)" : "");
	printf("; default open flags\n");
	if (selected(&o, "own"))
		run_shape(SCALE_OWN, counts, ncounts, own, pool);
	if (selected(&o, "pool"))
		run_shape(SCALE_POOL, counts, ncounts, own, pool);
	scale_pool_stop();
	munmap(own, max * OWN_STRIDE);
	munmap(pool, SCALE_POOL_N * SCALE_POOL_BYTES);
	printf("# scaling: %.1f s\n", (now_ns() - t0) / 1e9);
	return 0;
}
