// SPDX-License-Identifier: MIT
/*
 * dev-verbs-bench: the verbs backend's figures, one key=value line each (TCG-emulated
 * guest: absolute times are slow, compare ratios from the same run).  Always passes unless
 * something fails outright.
 *   hit_ns        odpx_reg + odpx_dereg of a cached 4 KiB buffer, median and p99 per mode
 *   first_write   RDMA WRITE of 16 pages into never-touched memory, with and without a
 *                 synchronous prefetch first (explicit mode)
 *   advise        ibv_advise_mr calls per 10,000 one-page hints
 */
#include <sys/utsname.h>
#include "dev-verbs-util.h"

#define N 20000

static uint64_t ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static uint64_t samples[N];

static void hit(struct dev *d, enum odpx_mode mode, const char *kernel)
{
	struct odpx_ctx *ctx = dv_open(d, mode, 0);
	unsigned char *p = dv_map(4096 * 4);
	struct odpx_mr *mr;

	memset(p, 1, 4096 * 4);
	for (int i = 0; i < 1000; i++) {	/* warm up */
		mr = dv_reg(ctx, p, 4096, ACC_LW);
		dv_dereg(ctx, mr);
	}
	for (int i = 0; i < N; i++) {
		uint64_t t = ns();
		for (int j = 0; j < 10; j++) {
			odpx_reg(ctx, p, 4096, ACC_LW, &mr);
			odpx_dereg(ctx, mr);
		}
		samples[i] = (ns() - t) / 10;
	}
	qsort(samples, N, sizeof(samples[0]), cmp);
	printf("bench=hit kernel=%s backend=verbs mode=%s page=4096 n=%d median_ns=%llu p99_ns=%llu\n",
	       kernel, odpx_mode_str(mode), N * 10, (unsigned long long)samples[N / 2],
	       (unsigned long long)samples[N * 99 / 100]);
	odpx_close(ctx);
	munmap(p, 4096 * 4);
}

int main(void)
{
	struct utsname u;
	struct dev d;

	uname(&u);
	dev_open(&d);
	dev_require_odp(&d, IBV_ODP_SUPPORT_WRITE);
	dev_connect_self(&d);
	hit(&d, ODPX_MODE_EXPLICIT, u.release);
	hit(&d, ODPX_MODE_PIN, u.release);
	printf("bench=hit kernel=%s backend=verbs mode=implicit result=n/a "
	       "(rxe has no implicit ODP: odpx_open_verbs returns -EOPNOTSUPP)\n", u.release);

	/* first touch: 16 pages, 8 rounds each way, median */
	struct odpx_ctx *ctx = dv_open(&d, ODPX_MODE_EXPLICIT, 0);
	unsigned char *src = dv_map(16 * 4096);
	struct odpx_mr *smr = dv_reg(ctx, src, 16 * 4096, ACC_LW);
	uint64_t with[8], without[8];
	dev_fill(src, 16 * 4096, 1);
	for (int pf = 0; pf < 2; pf++) {
		for (int i = 0; i < 8; i++) {
			unsigned char *dst = dv_map(16 * 4096);
			struct odpx_mr *dmr = dv_reg(ctx, dst, 16 * 4096, ACC_REMOTE);
			if (pf && odpx_prefetch(ctx, dst, 16 * 4096,
						ODPX_PREFETCH_WRITE | ODPX_PREFETCH_SYNC))
				dev_fail("prefetch");
			uint64_t t = ns();
			if (dv_rdma(&d, IBV_WR_RDMA_WRITE, smr, src, 16 * 4096, dst, odpx_mr_rkey(dmr)))
				dev_fail("write");
			(pf ? with : without)[i] = ns() - t;
			if (!dev_same("first write", dst, src, 16 * 4096))
				dev_fail("data");
			dv_dereg(ctx, dmr);
			munmap(dst, 16 * 4096);
		}
	}
	qsort(with, 8, sizeof(with[0]), cmp);
	qsort(without, 8, sizeof(without[0]), cmp);
	printf("bench=first_write kernel=%s mode=explicit pages=16 n=8 no_prefetch_median_us=%llu "
	       "sync_prefetch_median_us=%llu ratio=%.2f\n", u.release,
	       (unsigned long long)(without[4] / 1000), (unsigned long long)(with[4] / 1000),
	       (double)without[4] / (double)with[4]);

	/* advise calls per 10,000 hints */
	unsigned char *big = dv_map(5000 * 4096UL);
	struct odpx_stats s0 = dv_stats(ctx), s;
	for (int i = 0; i < 10000; i++)
		while (odpx_prefetch(ctx, big + (size_t)(i / 2) * 4096, 4096, ODPX_PREFETCH_WRITE) ==
		       -EAGAIN)
			sched_yield();
	uint64_t last = UINT64_MAX;
	for (int still = 0; still < 5;) {
		s = dv_stats(ctx);
		uint64_t now = s.prefetch_issued + s.prefetch_merged + s.prefetch_failed;
		still = now == last ? still + 1 : 0;
		last = now;
		dev_pause_ms(20);
	}
	printf("bench=advise kernel=%s mode=explicit hints=10000 advise_calls=%llu sges=%llu "
	       "merged=%llu dropped=%llu failed=%llu\n", u.release,
	       (unsigned long long)(s.prefetch_issued - s0.prefetch_issued),
	       (unsigned long long)(s.prefetch_sges - s0.prefetch_sges),
	       (unsigned long long)(s.prefetch_merged - s0.prefetch_merged),
	       (unsigned long long)(s.prefetch_dropped - s0.prefetch_dropped),
	       (unsigned long long)(s.prefetch_failed - s0.prefetch_failed));
	dv_dereg(ctx, smr);
	odpx_close(ctx);
	dev_close(&d);
	return 0;
}
