// SPDX-License-Identifier: MIT
/*
 * ucx-scaling.c - SCALE on UCX's registration cache (ucs_rcache), the UCX
 * side of scaling.c, which runs it as a child for each shape and thread
 * count (libucs hooks mmap and munmap in the process that creates an
 * rcache with UCM events, which odpx exists to avoid).
 *
 *   build/ucx-scaling [--quick] [--only own,pool] [--threads 1,2,...] [--seed N]
 *
 * One rcache shared by all threads, with trivial mem_reg/mem_dereg
 * callbacks (the counterpart of odpx's null backend, as in ucx-rcache.c);
 * the shapes, rounds, thread placement and random sequences are
 * scaling.h's, so the lines pair with scaling.c's.  Built only where
 * pkg-config finds ucx (Debian: libucx-dev).
 */
#include <limits.h>
#include <ucp/api/ucp_version.h>

#include "scaling.h"
#include "ucx-rcache.h"

#define MAX_COUNTS 8
#define OWN_STRIDE (2 * SCALE_OWN_BYTES)

static struct bench_opts o;

static ucs_status_t mem_reg(void *ctx, ucs_rcache_t *rc, void *arg, ucs_rcache_region_t *r,
			    uint16_t flags)
{
	return UCS_OK;
}

static void mem_dereg(void *ctx, ucs_rcache_t *rc, ucs_rcache_region_t *r)
{
}

static void dump_region(void *ctx, ucs_rcache_t *rc, ucs_rcache_region_t *r, char *buf,
			size_t max)
{
	snprintf(buf, max, "-");
}

static const ucs_rcache_ops_t ops = { mem_reg, mem_dereg, dump_region };

static ucs_rcache_t *rcache_new(void)
{
	return ucx_rcache_new(&ops, sizeof(ucs_rcache_region_t), ULONG_MAX, "odpx-scaling");
}

struct pool_arg {
	ucs_rcache_t *rc;
	char *base;
};

static uint64_t ucx_own(struct scale_worker *w, void *arg)
{
	ucs_rcache_t *rc = arg;
	uint64_t n = 0;

	while (!scale_stopped()) {
		for (int i = 0; i < SCALE_CHECK_EVERY; i++)
			get_put(rc, w->own, SCALE_OWN_BYTES);
		n += SCALE_CHECK_EVERY;
	}
	return n;
}

static uint64_t ucx_pool(struct scale_worker *w, void *arg)
{
	struct pool_arg *p = arg;
	uint64_t s = w->seed, n = 0;

	while (!scale_stopped()) {
		for (int i = 0; i < SCALE_CHECK_EVERY; i++)	/* as scaling.c: 0 .. 4095 */
			get_put(p->rc, p->base + (rnd(&s) >> 52) * SCALE_POOL_BYTES,
				SCALE_POOL_BYTES);
		n += SCALE_CHECK_EVERY;
	}
	w->seed = s;
	return n;
}

static void run_shape(enum scale_shape s, const unsigned *counts, unsigned ncounts,
		      const char *mode, char *own, char *pool)
{
	size_t nbufs = s == SCALE_OWN ? scale.nworkers : SCALE_POOL_N;
	size_t bytes = s == SCALE_OWN ? SCALE_OWN_BYTES : SCALE_POOL_BYTES;
	struct pool_arg pa = { rcache_new(), pool };
	double mops1 = 0;
	uint64_t round_ns;
	unsigned reps;

	scale_timing(&o, &round_ns, &reps);
	for (size_t i = 0; i < nbufs; i++)
		get_put(pa.rc, s == SCALE_OWN ? own + i * OWN_STRIDE : pool + i * bytes, bytes);
	for (unsigned c = 0; c < ncounts; c++) {
		struct scale_result r = scale_measure(s == SCALE_OWN ? ucx_own : ucx_pool,
						      s == SCALE_OWN ? (void *)pa.rc : &pa,
						      counts[c], round_ns, reps);
		if (c == 0)
			mops1 = r.mops;
		scale_line(s, "ucx-rcache", mode, &r, mops1, "");
	}
	ucs_rcache_destroy(pa.rc);
}

int main(int argc, char **argv)
{
	unsigned counts[MAX_COUNTS], ncounts, max = 0;
	char mode[32];

	ncounts = scale_take_threads(&argc, argv, counts, MAX_COUNTS);
	bench_init(argc, argv, &o, "own, pool (comma-separated); also --threads 1,2,...");
	snprintf(mode, sizeof(mode), "rcache-ucx%d.%d", UCP_API_MAJOR, UCP_API_MINOR);
	if (!ncounts)
		ncounts = scale_counts(counts, MAX_COUNTS);
	for (unsigned i = 0; i < ncounts; i++)
		max = counts[i] > max ? counts[i] : max;

	char *own = map_anon(max * OWN_STRIDE, true);
	char *pool = map_anon(SCALE_POOL_N * SCALE_POOL_BYTES, true);
	scale_pool_start(max, o.seed, own, OWN_STRIDE);
	if (selected(&o, "own"))
		run_shape(SCALE_OWN, counts, ncounts, mode, own, pool);
	if (selected(&o, "pool"))
		run_shape(SCALE_POOL, counts, ncounts, mode, own, pool);
	scale_pool_stop();
	munmap(own, max * OWN_STRIDE);
	munmap(pool, SCALE_POOL_N * SCALE_POOL_BYTES);
	return 0;
}
