/*
 * dev-verbs-concurrency: in explicit and pin mode, worker threads register, prefetch and post
 * RDMA WRITEs (each on its own QP, data verified) while they also register slices of a
 * region that another thread keeps remapping (mmap MAP_FIXED over it, madvise DONTNEED).  Everything
 * must finish before a deadline, with every transfer verified.
 */
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

int main(void)
{
	dev_open(&base);
	dev_require_odp(&base, IBV_ODP_SUPPORT_WRITE);
	shared = dv_map(SHARED);
	run(ODPX_MODE_EXPLICIT);
	run(ODPX_MODE_PIN);
	munmap(shared, SHARED);
	dev_close(&base);
	return 0;
}
