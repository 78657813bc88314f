// SPDX-License-Identifier: MIT
/*
 * cache-hit.c - the hit path of the pin cache.
 *
 *   W1  odpx_reg + odpx_dereg of the same 64 KiB range, over and over.
 *   W2  the same among many cached buffers taken in uniformly random order:
 *       10,000 of 64 KiB and 100,000 of 4 KiB.  Reported as W2/W1.
 *   W5  two threads doing W1 on their own buffers, (a) sharing one context,
 *       (b) each with its own; throughput relative to one thread's W1.
 *
 * Each runs on the null backend (pins nothing: the cache alone) and on the
 * uring backend (real pins).  The uring backend has 16384 slots and the run
 * pins at most --pin-budget bytes (default RLIMIT_MEMLOCK), so its W2 sets
 * are cut to what fits; the label's n says how many buffers there were.
 *
 * WT  beside W1, on the same warm buffer: odpx_reg_ex(ODPX_REG_TRY) +
 *     odpx_dereg (a TRY hit), and odpx_reg_ex(ODPX_REG_TRY) of a buffer
 *     never registered (a TRY miss: -EAGAIN, nothing to release).
 *
 * W1P  W1 with the check of protection a context opened ODPX_OPEN_PROT_CHECK
 *      asks of each pin-mode hit (odpx_reg(3): one PROCMAP_QUERY ioctl), as
 *      the drop-in's contexts do; every other workload opens its contexts
 *      with the defaults, as a user would.
 *
 * W1 and W2 share one loop: the buffer of each iteration comes from an index
 * array (all zeros for W1), so the ratio compares lookups, not loop shapes.
 *
 * W2G (null backend, informative): W2's 100,000 buffers of 4 KiB, one every
 * 12 KiB of one mapping: a pool with gaps.  entries= says how many were
 * cached (the rest would be served direct, a miss each time).
 *
 * W2F (full runs, null backend, informative): W2 over n buffers of 4 KiB for
 * n from 2,500 to 100,000.  A hit touches about one random entry line (64 B),
 * so the entries' footprint is n * 64 bytes; the line gives it beside the
 * size of this CPU's L2 cache, where the curve steps.
 *
 * W2M (informative, no odpx): the least a reference-counted hit can do.
 * n records of 64 bytes in a table of P slots, P the first prime >= n; a
 * record's slot is its start page mod P, taken by multiplication as
 * odpx's index does (so a pool's buffers never collide); get = find the
 * slot, check the key, CAS the reference count up; release = atomic
 * decrement; both out of line, in W2's loop and order.  Its ratio at
 * 100,000 x 4 KiB over one buffer is what this machine's memory leaves to a
 * hash-indexed cache with per-entry reference counts: a faster hit hides
 * less of the same miss, so the ratio grows as the one-buffer time shrinks.
 * Its "plain-get" twin takes the count with a plain store instead of the
 * CAS (not thread-safe: a reference only): the two sets of figures say what
 * the get's locked instruction, on a line still on its way from L3, costs.
 */
#include <pthread.h>
#include <sched.h>

#include "bench.h"

#define HIT_FLAGS 0	/* the defaults; W1P adds the check */

#define ORDER (1U << 20)	/* length of the random index sequence */
#define W1_BYTES (64 * KiB)

struct hitset {
	struct odpx_ctx *ctx;
	char *base;		/* n buffers of @bytes, one every @stride bytes */
	size_t n, bytes, stride;
	const uint32_t *order;
	uint64_t pos;
};

static struct bench_opts o;
static uint32_t *zeros, *random_order;

/* K get+release pairs; returns ns per pair. */
static double batch(struct hitset *h, uint64_t k)
{
	char *base = h->base;
	size_t bytes = h->bytes, stride = h->stride;
	uint64_t p = h->pos, t0 = now_ns();

	for (uint64_t i = 0; i < k; i++)
		reg_dereg(h->ctx, base + (size_t)h->order[p++ & (ORDER - 1)] * stride, bytes);
	h->pos = p;
	return (double)(now_ns() - t0) / (double)k;
}

/* K TRY lookups of @a (+ release when @hit); returns ns per lookup. */
static double try_batch(struct odpx_ctx *ctx, char *a, size_t len, bool hit, uint64_t k)
{
	uint64_t t0 = now_ns();
	struct odpx_mr *mr;

	for (uint64_t i = 0; i < k; i++) {
		int r = odpx_reg_ex(ctx, a, len, ODPX_ACCESS_LOCAL_WRITE, ODPX_REG_TRY, &mr);
		if (__builtin_expect(r != (hit ? 0 : -EAGAIN), 0))
			DIE("TRY %s: %s", hit ? "hit" : "miss", strerror(-r));
		if (hit && __builtin_expect(odpx_dereg(ctx, mr) != 0, 0))
			DIE("odpx_dereg: %s", odpx_last_reason());
	}
	return (double)(now_ns() - t0) / (double)k;
}

/* WT: a TRY hit on W1's warm buffer and a TRY miss, beside W1's @w1 median. */
static void try_costs(struct hitset *h, uint64_t k, unsigned reps, double w1,
		      const char *backend, const char *mode)
{
	char *cold = map_anon(W1_BYTES, true);	/* never registered */
	double *v = calloc(reps, sizeof(*v));
	struct summary s;

	for (int hit = 1; hit >= 0; hit--) {
		char *a = hit ? h->base : cold;
		try_batch(h->ctx, a, W1_BYTES, hit, k);	/* warm-up */
		for (unsigned r = 0; r < reps; r++)
			v[r] = try_batch(h->ctx, a, W1_BYTES, hit, k);
		s = summarize(v, reps, k);
		kv_time("WT", hit ? "try-hit-64KiB" : "try-miss-64KiB", backend, mode, 1, W1_BYTES,
			&s, "w1_median_ns=%.1f", w1);
		kv_ratio("WT/W1", hit ? "try-hit-64KiB" : "try-miss-64KiB", backend, mode,
			 "WT_median/W1_median", s.median, w1, 0, 0, "n=1");
	}
	free(v);
	munmap(cold, W1_BYTES);
}

/* Fill the cache with every buffer (misses), then one untimed pass. */
static void warm(struct hitset *h, uint64_t k)
{
	for (size_t i = 0; i < h->n; i++)
		reg_dereg(h->ctx, h->base + i * h->stride, h->bytes);
	batch(h, k);
}

/* R batches; *misses during them, *share = thread CPU time / wall time */
static struct summary measure(struct hitset *h, uint64_t k, unsigned reps, uint64_t *misses,
			      double *share)
{
	double *v = calloc(reps, sizeof(*v));
	uint64_t m0 = stats_of(h->ctx).misses, c0 = thread_cpu_ns(), t0 = now_ns();
	struct summary s;

	for (unsigned r = 0; r < reps; r++)
		v[r] = batch(h, k);
	*share = (double)(thread_cpu_ns() - c0) / (double)(now_ns() - t0);
	*misses = stats_of(h->ctx).misses - m0;
	s = summarize(v, reps, k);
	free(v);
	return s;
}

/* How many buffers of @bytes a context of @slots fixed-buffer slots (0: not uring) may keep pinned. */
static size_t fit(size_t slots, size_t n, size_t bytes)
{
	size_t cap;

	if (!slots)
		return n;
	cap = o.pin_budget / 2 / bytes;	/* half: room for what is dying */
	if (cap > slots - 64)
		cap = slots - 64;
	return n < cap ? n : cap;
}

/* max_pinned_bytes: the budget for real pins; the null backend pins nothing */
static uint64_t ctx_budget(const char *backend)
{
	return strcmp(backend, "uring") ? (uint64_t)1 << 40 : o.pin_budget;
}

/* A fresh uniform sequence of buffer indices below @n. */
static void shuffle_order(size_t n)
{
	for (uint32_t i = 0; i < ORDER; i++)
		random_order[i] = (uint32_t)(((unsigned __int128)rnd(&o.seed) * n) >> 64);
}

/* One W2 set: n cached buffers of @bytes, @stride apart, hit in a fresh random order. */
static struct summary w2_set(const char *backend, size_t n, size_t bytes, size_t stride,
			     uint64_t k, unsigned reps, uint64_t *entries, uint64_t *misses,
			     double *share)
{
	struct odpx_ctx *ctx = open_ctx_flags(backend, n + 64, ctx_budget(backend), HIT_FLAGS);
	struct hitset h = { ctx, map_anon(n * stride, !strcmp(backend, "uring")), n, bytes, stride,
			    random_order, 0 };
	struct summary s;

	shuffle_order(n);
	warm(&h, k);
	*entries = stats_of(ctx).entries;
	s = measure(&h, k, reps, misses, share);
	odpx_close(ctx);
	munmap(h.base, n * stride);
	return s;
}

/* ---- W2M: the model ---- */

struct model_rec {
	_Atomic uint64_t ref;
	uintptr_t key;
	char pad[48];
};

struct model {
	struct model_rec *rec;
	char *base;
	size_t n, bytes;
	uint32_t p;		/* slots: the first prime >= n */
	uint64_t pmul;		/* 2^64 / p, rounded up */
	bool plain_get;		/* the get stores the count: not thread-safe, a reference */
};

static uint32_t model_slot(const struct model *m, const char *a)
{
	uint32_t k = (uint32_t)((uintptr_t)a >> 12);

	return (uint32_t)(((unsigned __int128)(m->pmul * k) * m->p) >> 64);
}

static __attribute__((noinline)) struct model_rec *model_get(struct model *m, char *a)
{
	struct model_rec *r = &m->rec[model_slot(m, a)];
	uint64_t v = atomic_load_explicit(&r->ref, memory_order_acquire);

	if (__builtin_expect(r->key != (uintptr_t)a, 0))
		DIE("model: lost %p", (void *)a);
	if (m->plain_get)
		atomic_store_explicit(&r->ref, v + 1, memory_order_relaxed);
	else if (!atomic_compare_exchange_strong_explicit(&r->ref, &v, v + 1, memory_order_acq_rel,
							  memory_order_relaxed))
		DIE("model: lost %p", (void *)a);
	return r;
}

static __attribute__((noinline)) void model_put(struct model_rec *r)
{
	atomic_fetch_sub_explicit(&r->ref, 1, memory_order_release);
}

static double model_batch(struct model *m, const uint32_t *order, uint64_t *pos, uint64_t k)
{
	uint64_t p = *pos, t0 = now_ns();

	for (uint64_t i = 0; i < k; i++)
		model_put(model_get(m, m->base + (size_t)order[p++ & (ORDER - 1)] * m->bytes));
	*pos = p;
	return (double)(now_ns() - t0) / (double)k;
}

/* n buffers of 4 KiB, each record at its own slot */
static struct summary model_set(size_t n, const uint32_t *order, uint64_t k, unsigned reps,
				bool plain_get)
{
	struct model m = { NULL, NULL, n, 4 * KiB, (uint32_t)n, 0, plain_get };
	double *v = calloc(reps, sizeof(*v));
	uint64_t pos = 0;
	struct summary s;

	while (!odpx_is_prime(m.p))
		m.p++;
	m.pmul = UINT64_MAX / m.p + 1;
	m.rec = map_anon(m.p * sizeof(*m.rec), false);
	m.base = (char *)((uintptr_t)16 << 40);	/* addresses only: never touched */
	for (size_t i = 0; i < n; i++) {
		struct model_rec *r = &m.rec[model_slot(&m, m.base + i * m.bytes)];
		if (r->key)
			DIE("model: slot collision at %zu", i);
		r->key = (uintptr_t)(m.base + i * m.bytes);
	}
	model_batch(&m, order, &pos, k);
	for (unsigned r = 0; r < reps; r++)
		v[r] = model_batch(&m, order, &pos, k);
	s = summarize(v, reps, k);
	munmap(m.rec, m.p * sizeof(*m.rec));
	free(v);
	return s;
}

static void model(void)
{
	uint64_t k = o.quick ? 100000 : 1000000;
	unsigned reps = o.quick ? 20 : 30;
	const size_t n = 100000;
	struct summary one = model_set(1, zeros, k, reps, false);

	shuffle_order(n);
	struct summary many = model_set(n, random_order, k, reps, false);
	kv_time("W2M", "model-1x4KiB", "none", "-", 1, 4 * KiB, &one, "what=least_refcounted_hit");
	kv_time("W2M", "model-100000x4KiB", "none", "-", n, 4 * KiB, &many,
		"what=least_refcounted_hit model_ratio=%.3f", many.median / one.median);
	one = model_set(1, zeros, k, reps, true);
	many = model_set(n, random_order, k, reps, true);
	kv_time("W2M", "plain-get-1x4KiB", "none", "-", 1, 4 * KiB, &one,
		"what=model_with_a_plain_store_get_not_thread_safe");
	kv_time("W2M", "plain-get-100000x4KiB", "none", "-", n, 4 * KiB, &many,
		"what=model_with_a_plain_store_get_not_thread_safe model_ratio=%.3f",
		many.median / one.median);
}

/* Bytes of the L2 cache of CPU 0 from sysfs, 0 if unknown. */
static uint64_t l2_bytes(void)
{
	char path[96], buf[32];
	uint64_t v = 0;

	for (int i = 0; i < 8 && !v; i++) {
		snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
		FILE *f = fopen(path, "re");
		if (!f)
			break;
		bool l2 = fgets(buf, sizeof(buf), f) && atoi(buf) == 2;
		fclose(f);
		snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
		if (l2 && (f = fopen(path, "re"))) {
			if (fgets(buf, sizeof(buf), f))
				v = strtoull(buf, NULL, 10) << (strchr(buf, 'M') ? 20 : 10);
			fclose(f);
		}
	}
	return v;
}

static void footprint(const char *mode, double w1)
{
	static const size_t ns[] = { 2500, 5000, 10000, 15000, 25000, 50000, 100000 };
	struct odpx_ctx *ctx = open_ctx("null", 64, ctx_budget("null"));
	struct odpx_priv_state ps;

	odpx_priv_state(ctx, &ps);	/* the size of an entry's slot */
	odpx_close(ctx);
	uint64_t l2 = l2_bytes(), entries, misses;
	double share;
	char cas[64];

	for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
		struct summary s = w2_set("null", ns[i], 4 * KiB, 4 * KiB, 1000000, 15, &entries,
					  &misses, &share);
		snprintf(cas, sizeof(cas), "footprint-%zux4KiB", ns[i]);
		kv_time("W2F", cas, "null", mode, ns[i], 4 * KiB, &s,
			"entries=%lu misses=%lu cpu_share=%.2f entry_footprint_bytes=%zu"
			" l2_bytes=%lu over_w1=%.3f", (unsigned long)entries,
			(unsigned long)misses, share, ns[i] * ps.entry_bytes,
			(unsigned long)l2, s.median / w1);
	}
}

static void evicted(const char *mode);

/* W1 then W2 on one backend; returns W1's median for W5. */
static double hits(const char *backend)
{
	static const struct { size_t n, bytes, stride; } w2[] = {
		{ 10000, 64 * KiB, 64 * KiB }, { 100000, 4 * KiB, 4 * KiB },
		{ 100000, 4 * KiB, 12 * KiB },	/* a pool with gaps: W2G */
	};
	uint64_t k1 = o.quick ? 50000 : 100000, k2 = o.quick ? 100000 : 1000000;
	unsigned r1 = o.quick ? 30 : 100, r2 = o.quick ? 20 : 30;
	struct odpx_ctx *ctx = open_ctx_flags(backend, 64, ctx_budget(backend), HIT_FLAGS);
	struct hitset h = { ctx, map_anon(W1_BYTES, true), 1, W1_BYTES, W1_BYTES, zeros, 0 };
	const char *mode = mode_of(ctx);
	struct odpx_caps caps = { .comp_mask = ODPX_QUERY_URING };
	size_t slots;
	uint64_t misses;
	double share;
	char sz[32], cas[96];

	warm(&h, k1);
	struct summary s1 = measure(&h, k1, r1, &misses, &share);
	kv_time("W1", "hit-64KiB", backend, mode, 1, W1_BYTES, &s1,
		"misses=%lu cpu_share=%.2f target=<=20 met=%s", (unsigned long)misses, share,
		met(s1.median, '<', 20));
	if (selected(&o, "WT"))
		try_costs(&h, k1, r1, s1.median, backend, mode);
	CHECK_ODPX(odpx_query(ctx, &caps));
	slots = caps.comp_mask & ODPX_QUERY_URING ? caps.uring_slots : 0;
	odpx_close(ctx);
	if (selected(&o, "W1P")) {
		h.ctx = open_ctx_flags(backend, 64, ctx_budget(backend), ODPX_OPEN_PROT_CHECK);
		warm(&h, k1);
		struct summary sp = measure(&h, k1, r1, &misses, &share);
		kv_time("W1P", "hit-64KiB-protcheck", backend, mode, 1, W1_BYTES, &sp,
			"misses=%lu cpu_share=%.2f ratio_to_W1=%.1f", (unsigned long)misses, share,
			sp.median / s1.median);
		odpx_close(h.ctx);
	}
	munmap(h.base, W1_BYTES);
	if (!selected(&o, "W2"))
		return s1.median;

	for (size_t i = 0; i < sizeof(w2) / sizeof(w2[0]); i++) {
		size_t n = fit(slots, w2[i].n, w2[i].bytes), bytes = w2[i].bytes;
		bool gaps = w2[i].stride != bytes;
		uint64_t entries;
		char st[32];

		if (gaps && strcmp(backend, "null"))
			continue;	/* the pin budget would cut it far below the VMA budget */
		snprintf(cas, sizeof(cas), "%zux%s%s%s", n, size_str(bytes, sz, sizeof(sz)),
			 gaps ? "-every-" : "", gaps ? size_str(w2[i].stride, st, sizeof(st)) : "");
		struct summary s2 = w2_set(backend, n, bytes, w2[i].stride, k2, r2, &entries, &misses,
					   &share);
		kv_time(gaps ? "W2G" : "W2", cas, backend, mode, n, bytes, &s2,
			"entries=%lu misses=%lu cpu_share=%.2f%s",
			(unsigned long)entries, (unsigned long)misses, share,
			n < w2[i].n ? " cut_by=pin-budget" : "");
		kv_ratio(gaps ? "W2G/W1" : "W2/W1", cas, backend, mode, "W2_median/W1_median",
			 s2.median, s1.median, gaps ? 0 : '<', 1.5, "n=%zu", n);
	}
	if (!strcmp(backend, "null"))
		model();
	if (!o.quick && !strcmp(backend, "null"))
		footprint(mode, s1.median);
	if (!strcmp(backend, "uring"))
		evicted(mode);
	return s1.median;
}

/*
 * W2E (uring, informative): hits on 64 buffers of 4 KiB that each took an
 * evicted entry's slot in a full cache of 64 (a pin into a victim's slot
 * replaces its buffer in one system call), against hits on the 64 they
 * replaced.  Such an entry sits away from its home slot.
 */
static void evicted(const char *mode)
{
	enum { N = 64, STRIDE = 64 * KiB };
	uint64_t k = o.quick ? 100000 : 1000000, misses;
	unsigned reps = o.quick ? 20 : 30;
	struct odpx_ctx *ctx = open_ctx_flags("uring", N, o.pin_budget, HIT_FLAGS);
	struct hitset old = { ctx, map_anon(N * STRIDE, true), N, 4 * KiB, STRIDE, random_order, 0 };
	struct hitset fresh = { ctx, map_anon(N * STRIDE, true), N, 4 * KiB, STRIDE, random_order, 0 };
	double share;

	shuffle_order(N);
	warm(&old, k);
	struct summary s0 = measure(&old, k, reps, &misses, &share);
	uint64_t ev0 = stats_of(ctx).evictions;
	warm(&fresh, k);
	uint64_t evictions = stats_of(ctx).evictions - ev0;
	struct summary s1 = measure(&fresh, k, reps, &misses, &share);
	kv_time("W2E", "64x4KiB-home", "uring", mode, N, 4 * KiB, &s0, "what=hits_before_eviction");
	kv_time("W2E", "64x4KiB-evicted-slots", "uring", mode, N, 4 * KiB, &s1,
		"what=hits_on_entries_in_victims_slots evictions=%lu misses=%lu",
		(unsigned long)evictions, (unsigned long)misses);
	kv_ratio("W2E", "64x4KiB", "uring", mode, "evicted_slots/home", s1.median, s0.median, 0, 0,
		 "");
	odpx_close(ctx);
	munmap(old.base, N * STRIDE);
	munmap(fresh.base, N * STRIDE);
}

/* ---- W5: two threads ---- */

static double batch_any(void *set, uint64_t k)
{
	return batch(set, k);
}


static void two_threads(const char *backend, bool shared, double w1_ns)
{
	uint64_t k = o.quick ? 200000 : 1000000;
	unsigned reps = o.quick ? 20 : 30;
	struct hitset h[2];
	struct odpx_ctx *ctx[2];
	double *v = calloc(reps, sizeof(*v)), *share = calloc(reps, sizeof(*share));
	char *buf = map_anon(4 * W1_BYTES, true);
	const char *cas = shared ? "shared-ctx" : "own-ctx";

	ctx[0] = open_ctx_flags(backend, 64, ctx_budget(backend), HIT_FLAGS);
	ctx[1] = shared ? ctx[0] : open_ctx_flags(backend, 64, ctx_budget(backend), HIT_FLAGS);
	for (int i = 0; i < 2; i++) {
		/* buffers 128 KiB apart: distinct entries, no merging */
		h[i] = (struct hitset){ ctx[i], buf + 2 * i * W1_BYTES, 1, W1_BYTES, W1_BYTES, zeros, 0 };
		warm(&h[i], k / 10);
	}
	bool pinned = two_threads_run(batch_any, (void *[2]){ &h[0], &h[1] }, k, reps, v, share);
	struct summary s = summarize(v, reps, 2 * k);
	const char *mode = mode_of(ctx[0]);
	kv_time("W5", cas, backend, mode, 2, W1_BYTES, &s,
		"threads=2 pinned_cpus=%s cpu_share=%.2f", pinned ? "0,1" : "no",
		summarize(share, reps, 1).median);
	kv_ratio("W5/W1", cas, backend, mode, "throughput_2threads/throughput_W1", w1_ns, s.median,
		 shared ? '>' : 0, 1.8, "");
	odpx_close(ctx[0]);
	if (!shared)
		odpx_close(ctx[1]);
	munmap(buf, 4 * W1_BYTES);
	free(v);
	free(share);
}

int main(int argc, char **argv)
{
	static const char *const backends[] = { "null", "uring" };

	bench_init(argc, argv, &o, "W1, W1P, W2, W5, WT (W1 always runs: the others are its ratios)");
	zeros = calloc(ORDER, sizeof(*zeros));
	random_order = malloc(ORDER * sizeof(*random_order));
	if (!zeros || !random_order)
		DIE("out of memory");
	printf("# cache-hit: W1/W2/W5, %s; pin budget %lu bytes\n", o.quick ? "quick" : "full",
	       (unsigned long)o.pin_budget);
	for (size_t b = 0; b < 2; b++) {
		double w1 = hits(backends[b]);

		if (selected(&o, "W5")) {
			two_threads(backends[b], true, w1);
			two_threads(backends[b], false, w1);
		}
	}
	return 0;
}
