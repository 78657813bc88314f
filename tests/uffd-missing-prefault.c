// SPDX-License-Identifier: MIT
/*
 * uffd-missing-prefault: odpx never faults on the application's memory from
 * code that cannot fail.  In missing mode a pin first maps the missing
 * pages of its watched range (uffd/watch.c, monitor_prefault()); in every
 * mode (auto, wp, missing):
 *   - a range registered and released, its entry invalidated (its watch
 *     stays), then made PROT_NONE, then asked for again: -EFAULT, and the
 *     process lives;
 *   - odpx_prefetch of 16 MiB that the application munmaps as soon as its
 *     first page is in (the engine is pinning it), 20 times: the engine
 *     serves or fails each hint and the process lives.
 * Missing mode touched the pages from the library's own code, and the
 * caller (or the engine thread) died of SIGSEGV.
 */
#include "test.h"

#define PG 4096UL
#define BIG (16UL << 20)

/* Every hint queued so far served, failed, dropped or merged */
static int served(struct odpx_ctx *ctx, struct odpx_stats *st)
{
	*st = stats_of(ctx);
	return st->prefetch_issued + st->prefetch_failed + st->prefetch_dropped +
	       st->prefetch_merged >= st->prefetch_queued;
}

static int one_mode(void *arg)
{
	const char *mode = getenv("ODPX_UFFD_MODE");
	struct odpx_ctx *ctx = open_pin(0);
	struct odpx_stats st;
	struct odpx_mr *mr;
	char *p = map_anon(NULL, 16 * PG);
	int r;

	(void)arg;
	memset(p, 1, 16 * PG);
	CHECK_RC(odpx_reg(ctx, p + 4 * PG, 4 * PG, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	CHECK_RC(odpx_invalidate(ctx, p + 4 * PG, 4 * PG), 1);
	CHECK(mprotect(p, 16 * PG, PROT_NONE) == 0, "mprotect");
	r = odpx_reg(ctx, p + 4 * PG, 4 * PG, ODPX_ACCESS_LOCAL_WRITE, &mr);
	CHECK(r == -EFAULT, "%s: odpx_reg of PROT_NONE memory: %d (%s), want -EFAULT", mode, r,
	      odpx_last_reason());
	munmap(p, 16 * PG);

	for (int i = 0; i < 20; i++) {
		char *b = mmap(NULL, BIG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		CHECK(b != MAP_FAILED, "mmap");
		unsigned char in = 0;
		r = odpx_prefetch(ctx, b, BIG, 0);
		CHECK(r == 0, "%s: odpx_prefetch %d", mode, r);
		/* the engine's pin (or prefault) has begun: a page is in */
		WAIT_FOR(mincore(b, PG, &in) == 0 && (in & 1), 5);
		CHECK(munmap(b, BIG) == 0, "munmap");
	}
	CHECK(WAIT_FOR(served(ctx, &st), 30),
	      "%s: hints not served in 30 s: queued %lu issued %lu failed %lu dropped %lu", mode,
	      (unsigned long)st.prefetch_queued, (unsigned long)st.prefetch_issued,
	      (unsigned long)st.prefetch_failed, (unsigned long)st.prefetch_dropped);
	CHECK_RC(odpx_close(ctx), 0);
	printf("%s: PROT_NONE -EFAULT; 20 prefetches munmapped while pinned: issued %lu, failed %lu,"
	       " dropped %lu\n", mode, (unsigned long)st.prefetch_issued,
	       (unsigned long)st.prefetch_failed, (unsigned long)st.prefetch_dropped);
	return 0;
}

int main(void)
{
	return run_each_uffd_mode(one_mode, NULL);
}
