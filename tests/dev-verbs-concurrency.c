// SPDX-License-Identifier: MIT
/*
 * dev-verbs-concurrency: in explicit and pin mode, worker threads register, prefetch and post
 * RDMA WRITEs (each on its own QP, data verified) while they also register slices of a
 * region that another thread keeps remapping (mmap MAP_FIXED over it, madvise DONTNEED).  Everything
 * must finish before a deadline, with every transfer verified.
 *
 * Then the explicit-mode chunk race: threads register 4 KiB at the start of
 * each fresh 2 MiB chunk in the same order from one barrier, so they miss on
 * the same chunks at once.  Each chunk is registered with no lock held; the
 * threads that lose a race must get the winner's entry (one lkey per chunk)
 * and drop their own MR: after odpx_close, ibv_dealloc_pd of the context's
 * own PD fails with EBUSY if any MR was left behind.  An RDMA WRITE through
 * each chunk's lkey is verified.  chunk_bytes outside 2 MiB..2 GiB or not a
 * power of 2 is -EINVAL.
 */
#include <stdatomic.h>

#include "dev-verbs-util.h"

#define WORKERS 3
#define LEN (8 * 4096)
#define SHARED (64 * 4096)
#define RUN_MS 3000
#define DEADLINE_MS 60000

static struct dev base;
static struct odpx_ctx *ctx;
static unsigned char *shared;
static _Atomic int stop;
static _Atomic long transfers;

static void *worker(void *arg)
{
	long id = (long)arg;
	struct dev d = base;
	unsigned char *src = dv_map(LEN), *dst = dv_map(LEN);

	d.chan = NULL, d.cq = NULL, d.qp = NULL;
	dev_connect_self(&d);
	for (unsigned it = 0; !atomic_load(&stop); it++) {
		struct odpx_mr *s, *t, *x;
		size_t off = ((it * 7 + id) % (SHARED / 4096 - 4)) * 4096;

		if (odpx_prefetch(ctx, dst, LEN, ODPX_PREFETCH_WRITE) < -EAGAIN)
			dev_fail("prefetch");
		s = dv_reg(ctx, src, LEN, ACC_LW);
		t = dv_reg(ctx, dst, LEN, ACC_REMOTE);
		dev_fill(src, LEN, (uint32_t)(id * 1000 + it));
		memset(dst, 0, LEN);
		if (dv_rdma(&d, IBV_WR_RDMA_WRITE, s, src, LEN, dst, odpx_mr_rkey(t)))
			dev_fail("worker %ld: RDMA WRITE", id);
		if (!dev_same("worker", dst, src, LEN))
			dev_fail("worker %ld: data mismatch at iteration %u", id, it);
		/* the remapped region: registration only (its pages change under us) */
		if (odpx_reg(ctx, shared + off, 4 * 4096, (it & 1) ? ACC_REMOTE : ACC_LW, &x) == 0)
			dv_dereg(ctx, x);
		odpx_prefetch(ctx, shared + off, 4096, 0);
		dv_dereg(ctx, s);
		dv_dereg(ctx, t);
		atomic_fetch_add(&transfers, 1);
	}
	ibv_destroy_qp(d.qp);
	ibv_destroy_cq(d.cq);
	ibv_destroy_comp_channel(d.chan);
	munmap(src, LEN);
	munmap(dst, LEN);
	return NULL;
}

static void *remapper(void *arg)
{
	long n = 0;

	(void)arg;
	while (!atomic_load(&stop)) {
		if (n++ & 1) {
			/* a new mapping over the old one, in one call: a munmap first would
			 * open a hole other threads' mmaps (QP buffers) could land in */
			dev_map(SHARED, shared);
		} else if (madvise(shared, SHARED, MADV_DONTNEED)) {
			dev_fail("madvise");
		}
		memset(shared, (int)n, SHARED);
	}
	return (void *)n;
}

static void run(enum odpx_mode mode)
{
	pthread_t w[WORKERS], r;
	void *remaps;
	int64_t t0 = dev_now_ms();

	ctx = dv_open(&base, mode, 0);
	atomic_store(&stop, 0);
	atomic_store(&transfers, 0);
	for (long i = 0; i < WORKERS; i++)
		pthread_create(&w[i], NULL, worker, (void *)i);
	pthread_create(&r, NULL, remapper, NULL);
	while (dev_now_ms() - t0 < RUN_MS)
		dev_pause_ms(50);
	atomic_store(&stop, 1);
	for (int i = 0; i < WORKERS; i++)
		pthread_join(w[i], NULL);
	pthread_join(r, &remaps);
	if (dev_now_ms() - t0 > DEADLINE_MS)
		dev_fail("%s: missed the deadline", odpx_mode_str(mode));
	struct odpx_stats st = dv_stats(ctx);
	printf("%s: %ld verified transfers by %d threads, %ld remaps, in %lld ms (hits %llu, "
	       "misses %llu, invalidated %llu, advise calls %llu)\n", odpx_mode_str(mode),
	       atomic_load(&transfers), WORKERS, (long)remaps, (long long)(dev_now_ms() - t0),
	       (unsigned long long)st.hits, (unsigned long long)st.misses,
	       (unsigned long long)st.inval_entries, (unsigned long long)st.prefetch_issued);
	if (atomic_load(&transfers) < WORKERS)
		dev_fail("too few transfers");
	odpx_close(ctx);
}

#define RACE_CHUNKS 16
#define CHUNK (2UL << 20)

static unsigned char *race_area;
static uint32_t race_lkey[WORKERS][RACE_CHUNKS];
static pthread_barrier_t race_bar;

static void *chunk_racer(void *arg)
{
	long id = (long)arg;

	pthread_barrier_wait(&race_bar);
	for (unsigned c = 0; c < RACE_CHUNKS; c++) {
		struct odpx_mr *mr = dv_reg(ctx, race_area + c * CHUNK + id * 4096, 4096, ACC_LW);
		race_lkey[id][c] = odpx_mr_lkey(mr);
		dv_dereg(ctx, mr);
	}
	return NULL;
}

static struct odpx_ctx *open_chunked(struct dev *d, uint64_t chunk, int *rc)
{
	struct odpx_attr a = { .comp_mask = ODPX_ATTR_MODE | ODPX_ATTR_CHUNK,
			       .mode = ODPX_MODE_EXPLICIT, .chunk_bytes = chunk };
	struct odpx_ctx *c = NULL;

	*rc = odpx_open_verbs(d->pd, &a, &c);
	return c;
}

static void chunk_race(void)
{
	struct dev d = base;
	pthread_t t[WORKERS];
	unsigned char *dst = dv_map(4096);
	struct odpx_mr *t_mr;
	struct odpx_stats st;
	int rc;

	d.chan = NULL, d.cq = NULL, d.qp = NULL;
	if (!(d.pd = ibv_alloc_pd(base.ctx)))
		dev_fail("ibv_alloc_pd");
	static const uint64_t bad[] = { 1UL << 20, 3UL << 20, 4UL << 30 };
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (open_chunked(&d, bad[i], &rc), rc != -EINVAL)
			dev_fail("chunk_bytes %llu: %d, want -EINVAL", (unsigned long long)bad[i], rc);
	ctx = open_chunked(&d, CHUNK, &rc);
	if (rc)
		dev_fail("explicit, 2 MiB chunks: %s: %s", strerror(-rc), odpx_last_reason());
	/* aligned to a chunk, so that each 4 KiB lands in the chunk it names */
	unsigned char *m = dv_map((RACE_CHUNKS + 1) * CHUNK);
	race_area = (unsigned char *)(((uintptr_t)m + CHUNK - 1) & ~(CHUNK - 1));
	pthread_barrier_init(&race_bar, NULL, WORKERS);
	for (long i = 0; i < WORKERS; i++)
		pthread_create(&t[i], NULL, chunk_racer, (void *)i);
	for (int i = 0; i < WORKERS; i++)
		pthread_join(t[i], NULL);
	pthread_barrier_destroy(&race_bar);
	for (unsigned c = 0; c < RACE_CHUNKS; c++)
		for (int i = 1; i < WORKERS; i++)
			if (race_lkey[i][c] != race_lkey[0][c])
				dev_fail("chunk %u: lkey %#x for thread 0, %#x for thread %d", c,
					 race_lkey[0][c], race_lkey[i][c], i);
	st = dv_stats(ctx);
	if (st.odp_mrs < RACE_CHUNKS)
		dev_fail("%llu ODP MRs for %u chunks", (unsigned long long)st.odp_mrs, RACE_CHUNKS);
	dev_connect_self(&d);
	t_mr = dv_reg(ctx, dst, 4096, ACC_REMOTE);
	for (unsigned c = 0; c < RACE_CHUNKS; c++) {
		struct odpx_mr *s = dv_reg(ctx, race_area + c * CHUNK, 4096, ACC_LW);
		dev_fill(race_area + c * CHUNK, 4096, 7000 + c);
		memset(dst, 0, 4096);
		if (dv_rdma(&d, IBV_WR_RDMA_WRITE, s, race_area + c * CHUNK, 4096, dst,
			    odpx_mr_rkey(t_mr)) || !dev_same("chunk", dst, race_area + c * CHUNK, 4096))
			dev_fail("chunk %u: RDMA WRITE through its lkey", c);
		dv_dereg(ctx, s);
	}
	dv_dereg(ctx, t_mr);
	printf("chunk race: %d threads, %u chunks, one lkey each; %llu ODP MRs registered "
	       "(%llu lost a race and were dropped)\n", WORKERS, RACE_CHUNKS,
	       (unsigned long long)st.odp_mrs, (unsigned long long)(st.odp_mrs - RACE_CHUNKS));
	odpx_close(ctx);
	munmap(m, (RACE_CHUNKS + 1) * CHUNK);
	munmap(dst, 4096);
	if (ibv_destroy_qp(d.qp) || ibv_destroy_cq(d.cq) || ibv_destroy_comp_channel(d.chan))
		dev_fail("chunk race: QP teardown");
	if ((rc = ibv_dealloc_pd(d.pd)))
		dev_fail("chunk race: ibv_dealloc_pd after odpx_close: %s (an MR left behind?)",
			 strerror(rc));
}

int main(void)
{
	dev_open(&base);
	dev_require_odp(&base, IBV_ODP_SUPPORT_WRITE);
	shared = dv_map(SHARED);
	run(ODPX_MODE_EXPLICIT);
	run(ODPX_MODE_PIN);
	chunk_race();
	munmap(shared, SHARED);
	dev_close(&base);
	return 0;
}
