// SPDX-License-Identifier: MIT
/*
 * dev-verbs-prefetch: prefetch hints reach ibv_advise_mr.  A synchronous prefetch
 * (odpx_prefetch with ODPX_PREFETCH_SYNC: IBV_ADVISE_MR_FLAG_FLUSH) makes
 * never-touched pages resident (mincore); 10,000 small hints collapse into few calls; an
 * RDMA WRITE into the prefetched pages is verified.
 */
#include "dev-verbs-util.h"

#define PAGES 64
#define HINTS 10000

static unsigned resident(void *p, size_t pages)
{
	static unsigned char v[5000];
	unsigned n = 0;

	if (mincore(p, pages * 4096, v))
		dev_fail("mincore: %s", strerror(errno));
	for (size_t i = 0; i < pages; i++)
		n += v[i] & 1;
	return n;
}

int main(void)
{
	struct odpx_stats st, st0;
	struct odpx_ctx *ctx;
	struct dev d;
	int r;

	dev_open(&d);
	dev_require_odp(&d, IBV_ODP_SUPPORT_WRITE);
	dev_connect_self(&d);
	ctx = dv_open(&d, ODPX_MODE_EXPLICIT, 0);

	unsigned char *p = dv_map(PAGES * 4096);
	if (resident(p, PAGES))
		dev_fail("fresh mapping already resident");
	r = odpx_prefetch(ctx, p, PAGES * 4096, ODPX_PREFETCH_WRITE | ODPX_PREFETCH_SYNC);
	if (r)
		dev_fail("synchronous prefetch: %s: %s", strerror(-r), odpx_last_reason());
	unsigned n = resident(p, PAGES);
	st = dv_stats(ctx);
	printf("sync prefetch: %u of %d pages resident; advise calls %llu, SGEs %llu, failed %llu\n",
	       n, PAGES, (unsigned long long)st.prefetch_issued,
	       (unsigned long long)st.prefetch_sges, (unsigned long long)st.prefetch_failed);
	if (n != PAGES || !st.prefetch_issued || !st.prefetch_sges || st.prefetch_failed)
		dev_fail("synchronous prefetch did not make the pages resident");

	/* data into the prefetched pages */
	unsigned char *src = dv_map(PAGES * 4096);
	dev_fill(src, PAGES * 4096, 3);
	struct odpx_mr *smr = dv_reg(ctx, src, PAGES * 4096, ACC_LW);
	struct odpx_mr *dmr = dv_reg(ctx, p, PAGES * 4096, ACC_REMOTE);
	if (dv_rdma(&d, IBV_WR_RDMA_WRITE, smr, src, PAGES * 4096, p, odpx_mr_rkey(dmr)) ||
	    !dev_same("prefetched", p, src, PAGES * 4096))
		dev_fail("RDMA WRITE into prefetched pages");
	dv_dereg(ctx, smr);
	dv_dereg(ctx, dmr);

	/* 10,000 one-page hints over 5,000 never-touched pages, each twice */
	unsigned char *big = dv_map(5000 * 4096UL);
	st0 = dv_stats(ctx);
	for (int i = 0; i < HINTS; i++) {
		/* a full queue drops the hint (counted as dropped): let the engine run, retry */
		while ((r = odpx_prefetch(ctx, big + (size_t)(i / 2) * 4096, 4096,
					  ODPX_PREFETCH_WRITE)) == -EAGAIN)
			sched_yield();
		if (r)
			dev_fail("odpx_prefetch: %s", strerror(-r));
	}
	/* wait until the engine has drained the queue and its counters stop moving */
	int64_t deadline = dev_now_ms() + 20000;
	uint64_t last = UINT64_MAX;
	int still = 0;
	for (;;) {
		st = dv_stats(ctx);
		uint64_t now = st.prefetch_issued + st.prefetch_failed + st.prefetch_merged;
		still = now == last ? still + 1 : 0;
		last = now;
		if (still >= 5 && st.prefetch_queued - st0.prefetch_queued > 0)
			break;
		if (dev_now_ms() > deadline)
			dev_fail("prefetch counters still moving after 20 s");
		dev_pause_ms(20);
	}
	uint64_t calls = st.prefetch_issued - st0.prefetch_issued;
	printf("%d hints: queued %llu, merged %llu, dropped %llu, ibv_advise_mr calls %llu, "
	       "SGEs %llu, failed %llu (errno %llu); %u of 5000 pages resident\n", HINTS,
	       (unsigned long long)(st.prefetch_queued - st0.prefetch_queued),
	       (unsigned long long)(st.prefetch_merged - st0.prefetch_merged),
	       (unsigned long long)(st.prefetch_dropped - st0.prefetch_dropped),
	       (unsigned long long)calls,
	       (unsigned long long)(st.prefetch_sges - st0.prefetch_sges),
	       (unsigned long long)(st.prefetch_failed - st0.prefetch_failed),
	       (unsigned long long)st.prefetch_errno, resident(big, 5000));
	if (!calls || calls > HINTS / 20)
		dev_fail("%llu ibv_advise_mr calls for %d hints", (unsigned long long)calls, HINTS);
	if (st.prefetch_failed)
		dev_fail("prefetch failures");
	odpx_close(ctx);
	munmap(p, PAGES * 4096);
	munmap(src, PAGES * 4096);
	munmap(big, 5000 * 4096UL);
	dev_close(&d);
	return 0;
}
