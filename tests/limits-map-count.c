// SPDX-License-Identifier: MIT
/*
 * limits-map-count: at vm.max_map_count a registration is served direct
 * and counted under its cause.  The process's VMAs are raised to the limit
 * (pages of a PROT_NONE reservation made readable one in two), then a
 * sub-range in the middle of a buffer of 2 GiB (too large to be watched
 * whole) is registered: watching it would split the buffer's VMA in three,
 * which the kernel refuses (ENOMEM).  The
 * request returns 0, moves the right bytes, and direct_regs == the sum of
 * the direct_* causes, the new one under direct_budget (the VMAs the
 * watch may split are a budget, and the system's is spent).  In each uffd
 * mode (auto, wp, missing).  It was served direct under no cause.
 */
#include "test.h"

#define PG 4096UL
#define U(x) ((unsigned long long)(x))
#define BUF ((2UL << 30) + 16 * PG)

static uint64_t causes(const struct odpx_stats *st)
{
	return st->direct_shared + st->direct_unwatchable + st->direct_budget +
	       st->direct_no_monitor + st->direct_racing + st->direct_no_engine;
}

static int one_mode(void *arg)
{
	const char *mode = getenv("ODPX_UFFD_MODE");
	struct odpx_ctx *ctx = open_pin(0);
	struct odpx_stats st0, st;
	struct odpx_mr *mr;
	char *warm = map_anon(NULL, 4 * PG), *guard, *buf, *res;
	size_t res_pages = 80000, made = 0;
	int r;

	(void)arg;
	/* the engine and the monitor started, their memory mapped */
	CHECK_RC(odpx_reg(ctx, warm, 4 * PG, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	/* a VMA of its own, too large to be watched whole (uffd/watch.c): a watch splits it */
	guard = mmap(NULL, BUF + 2 * PG, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		     -1, 0);
	CHECK(guard != MAP_FAILED, "mmap");
	buf = guard + PG;
	CHECK(mprotect(buf, BUF, PROT_READ | PROT_WRITE) == 0, "mprotect");
	memset(buf, 1, 16 * PG);
	res = mmap(NULL, res_pages * PG, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		   -1, 0);
	CHECK(res != MAP_FAILED, "mmap reservation");
	for (size_t i = 1; i < res_pages; i += 2, made++)
		if (mprotect(res + i * PG, PG, PROT_READ) < 0)
			break;
	CHECK(errno == ENOMEM && made < res_pages / 2, "no map count limit reached (%zu splits)",
	      made);
	st0 = stats_of(ctx);
	r = odpx_reg(ctx, buf + 4 * PG, 4 * PG, ODPX_ACCESS_LOCAL_WRITE, &mr);
	st = stats_of(ctx);
	munmap(res, res_pages * PG);	/* back under the limit before any check can fail */
	CHECK(r == 0, "%s: odpx_reg at max_map_count: %d (%s)", mode, r, odpx_last_reason());
	CHECK(st.direct_regs == causes(&st),
	      "%s: direct_regs %llu, counted under causes %llu (shared %llu unwatchable %llu"
	      " budget %llu no_monitor %llu racing %llu no_engine %llu)", mode, U(st.direct_regs),
	      U(causes(&st)), U(st.direct_shared), U(st.direct_unwatchable), U(st.direct_budget),
	      U(st.direct_no_monitor), U(st.direct_racing), U(st.direct_no_engine));
	CHECK(st.direct_regs == st0.direct_regs + 1 && st.direct_budget == st0.direct_budget + 1,
	      "%s: direct_regs %llu -> %llu, direct_budget %llu -> %llu, want +1 each", mode,
	      U(st0.direct_regs), U(st.direct_regs), U(st0.direct_budget), U(st.direct_budget));
	CHECK(data_check(ctx, mr, buf + 4 * PG, 4 * PG, 9), "%s: bytes", mode);
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	CHECK_RC(odpx_close(ctx), 0);
	munmap(guard, BUF + 2 * PG);
	printf("%s: at max_map_count (%zu splits): served direct, counted under direct_budget\n",
	       mode, made);
	return 0;
}

int main(void)
{
#ifdef __SANITIZE_THREAD__
	SKIP("TSan's runtime maps memory of its own, and dies at vm.max_map_count");
#endif
	return run_each_uffd_mode(one_mode, NULL);
}
