// SPDX-License-Identifier: MIT
/*
 * ucx-rcache.c - W1, W2, W3 and W5 on UCX's registration cache (ucs_rcache),
 * for side-by-side figures with odpx's null backend.
 *
 * A separate program on purpose: libucs/libucm install memory hooks (mmap,
 * munmap, ...) in the process that creates an rcache with UCM events, which
 * odpx exists to avoid; pagebench runs this as a child and divides.  The
 * rcache gets trivial mem_reg/mem_dereg callbacks (they count, nothing
 * else), the counterpart of odpx's null backend, and the same workloads:
 *
 *   W1  get + put of the same 64 KiB range
 *   W2  the same among 10,000 x 64 KiB and 100,000 x 4 KiB, random order
 *   W3  a miss every time: max_regions = 1 while cycling over 8 disjoint
 *       ranges, so each get evicts the last region and registers a new one
 *   W5  two threads doing W1 on their own buffers, one shared rcache
 *       (and, for symmetry with odpx, one rcache each)
 *
 * Lines carry backend=ucx-rcache and the same workload and case names as
 * odpx's, so pagebench can pair them.  Built only where pkg-config finds
 * ucx (Debian: libucx-dev); linked with its libs plus -lucs.
 */
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <ucp/api/ucp_version.h>

#include "bench.h"
#include "ucx-rcache.h"

#define ORDER (1U << 20)
#define W1_BYTES (64 * KiB)
#define RANGES 8

struct region {
	ucs_rcache_region_t super;
	uint32_t key;
};

static struct bench_opts o;
static uint32_t *zeros, *order;
static _Atomic uint64_t regs, deregs;
static char mode[32];

static ucs_status_t mem_reg(void *ctx, ucs_rcache_t *rc, void *arg, ucs_rcache_region_t *r,
			    uint16_t flags)
{
	((struct region *)r)->key = (uint32_t)atomic_fetch_add(&regs, 1);
	return UCS_OK;
}

static void mem_dereg(void *ctx, ucs_rcache_t *rc, ucs_rcache_region_t *r)
{
	atomic_fetch_add(&deregs, 1);
}

static void dump_region(void *ctx, ucs_rcache_t *rc, ucs_rcache_region_t *r, char *buf,
			size_t max)
{
	snprintf(buf, max, "key %u", ((struct region *)r)->key);
}

static const ucs_rcache_ops_t ops = { mem_reg, mem_dereg, dump_region };

static ucs_rcache_t *rcache_new(unsigned long max_regions)
{
	return ucx_rcache_new(&ops, sizeof(struct region), max_regions, "odpx-bench");
}

struct set {
	ucs_rcache_t *rc;
	char *base;
	size_t n, bytes, stride;
	const uint32_t *order;
	uint64_t pos;
};

static double batch(struct set *s, uint64_t k)
{
	uint64_t p = s->pos, t0 = now_ns();

	for (uint64_t i = 0; i < k; i++)
		get_put(s->rc, s->base + (size_t)s->order[p++ & (ORDER - 1)] * s->stride, s->bytes);
	s->pos = p;
	return (double)(now_ns() - t0) / (double)k;
}

static struct summary measure(struct set *s, uint64_t k, unsigned reps, uint64_t *misses)
{
	double *v = calloc(reps, sizeof(*v));
	uint64_t r0 = atomic_load(&regs);
	struct summary sm;

	for (unsigned r = 0; r < reps; r++)
		v[r] = batch(s, k);
	*misses = atomic_load(&regs) - r0;
	sm = summarize(v, reps, k);
	free(v);
	return sm;
}

static void warm(struct set *s, uint64_t k)
{
	for (size_t i = 0; i < s->n; i++)
		get_put(s->rc, s->base + i * s->stride, s->bytes);
	batch(s, k);
}

static double w1_w2(void)
{
	static const struct { size_t n, bytes; } w2[] = {
		{ 10000, 64 * KiB }, { 100000, 4 * KiB },
	};
	uint64_t k1 = o.quick ? 50000 : 100000, k2 = o.quick ? 100000 : 1000000, misses;
	unsigned r1 = o.quick ? 30 : 100, r2 = o.quick ? 20 : 30;
	struct set s = { rcache_new(ULONG_MAX), map_anon(W1_BYTES, true), 1, W1_BYTES, W1_BYTES,
			 zeros, 0 };
	char sz[32], cas[64];

	warm(&s, k1);
	struct summary s1 = measure(&s, k1, r1, &misses);
	kv_time("W1", "hit-64KiB", "ucx-rcache", mode, 1, W1_BYTES, &s1, "misses=%lu",
		(unsigned long)misses);
	ucs_rcache_destroy(s.rc);
	munmap(s.base, W1_BYTES);

	for (size_t i = 0; i < 2 && selected(&o, "W2"); i++) {
		size_t n = w2[i].n, bytes = w2[i].bytes;
		for (uint32_t j = 0; j < ORDER; j++)
			order[j] = (uint32_t)(((unsigned __int128)rnd(&o.seed) * n) >> 64);
		s = (struct set){ rcache_new(ULONG_MAX), map_anon(n * bytes, false), n, bytes,
				  bytes, order, 0 };
		warm(&s, k2);
		struct summary s2 = measure(&s, k2, r2, &misses);
		snprintf(cas, sizeof(cas), "%zux%s", n, size_str(bytes, sz, sizeof(sz)));
		kv_time("W2", cas, "ucx-rcache", mode, n, bytes, &s2, "misses=%lu",
			(unsigned long)misses);
		kv_ratio("W2/W1", cas, "ucx-rcache", mode, "W2_median/W1_median", s2.median,
			 s1.median, 0, 0, "n=%zu", n);
		ucs_rcache_destroy(s.rc);
		munmap(s.base, n * bytes);
	}
	return s1.median;
}

static void w3(size_t bytes)
{
	uint64_t k = o.quick ? 200 : 1000, misses;
	unsigned reps = o.quick ? 20 : 50;
	uint32_t *seq = malloc(ORDER * sizeof(*seq));
	struct set s = { rcache_new(1), map_anon(RANGES * 2 * bytes, true), RANGES, bytes,
			 2 * bytes, seq, 0 };
	char sz[32], cas[64];

	for (uint32_t j = 0; j < ORDER; j++)
		seq[j] = j % RANGES;
	warm(&s, 2 * RANGES);
	uint64_t d0 = atomic_load(&deregs);
	struct summary sm = measure(&s, k, reps, &misses);
	snprintf(cas, sizeof(cas), "miss-%s", size_str(bytes, sz, sizeof(sz)));
	kv_time("W3", cas, "ucx-rcache", mode, 1, bytes, &sm, "misses=%lu deregs=%lu",
		(unsigned long)misses, (unsigned long)(atomic_load(&deregs) - d0));
	ucs_rcache_destroy(s.rc);
	munmap(s.base, RANGES * 2 * bytes);
	free(seq);
}

static double batch_any(void *set, uint64_t k)
{
	return batch(set, k);
}


static void w5(bool shared, double w1_ns)
{
	uint64_t k = o.quick ? 200000 : 1000000;
	unsigned reps = o.quick ? 20 : 30;
	double *v = calloc(reps, sizeof(*v)), *share = calloc(reps, sizeof(*share));
	char *buf = map_anon(4 * W1_BYTES, true);
	ucs_rcache_t *rc[2];
	struct set st[2];

	rc[0] = rcache_new(ULONG_MAX);
	rc[1] = shared ? rc[0] : rcache_new(ULONG_MAX);
	for (int i = 0; i < 2; i++) {
		st[i] = (struct set){ rc[i], buf + 2 * i * W1_BYTES, 1, W1_BYTES, W1_BYTES, zeros, 0 };
		warm(&st[i], k / 10);
	}
	bool pinned = two_threads_run(batch_any, (void *[2]){ &st[0], &st[1] }, k, reps, v, share);
	struct summary s = summarize(v, reps, 2 * k);
	const char *cas = shared ? "shared-ctx" : "own-ctx";
	kv_time("W5", cas, "ucx-rcache", mode, 2, W1_BYTES, &s,
		"threads=2 pinned_cpus=%s cpu_share=%.2f", pinned ? "0,1" : "no",
		summarize(share, reps, 1).median);
	kv_ratio("W5/W1", cas, "ucx-rcache", mode, "throughput_2threads/throughput_W1", w1_ns,
		 s.median, 0, 0, "");
	ucs_rcache_destroy(rc[0]);
	if (!shared)
		ucs_rcache_destroy(rc[1]);
	munmap(buf, 4 * W1_BYTES);
	free(v);
	free(share);
}

int main(int argc, char **argv)
{
	double w1;

	bench_init(argc, argv, &o, "W1, W2, W3, W5 (W1 always runs)");
	snprintf(mode, sizeof(mode), "rcache-ucx%d.%d", UCP_API_MAJOR, UCP_API_MINOR);
	zeros = calloc(ORDER, sizeof(*zeros));
	order = malloc(ORDER * sizeof(*order));
	if (!zeros || !order)
		DIE("out of memory");
	printf("# ucx-rcache: UCX %d.%d ucs_rcache, trivial mem_reg/mem_dereg, %s\n",
	       UCP_API_MAJOR, UCP_API_MINOR, o.quick ? "quick" : "full");
	w1 = w1_w2();
	if (selected(&o, "W3")) {
		w3(4 * KiB);
		w3(64 * KiB);
		if (!o.quick)
			w3(1 * MiB);
	}
	if (selected(&o, "W5")) {
		w5(true, w1);
		w5(false, w1);
	}
	return 0;
}
