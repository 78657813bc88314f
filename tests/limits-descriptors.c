// SPDX-License-Identifier: MIT
/*
 * limits-descriptors: near the descriptor limit a registration is served,
 * never refused.  With N descriptors free at odpx_open (N = 0..8: the monitor,
 * the engine and the VMA query each need some), in each uffd mode (auto,
 * wp, missing): odpx_open returns 0 or -EMFILE, and after 0, odpx_reg of three fresh buffers returns 0; every
 * registration served direct is counted under one cause (direct_regs ==
 * direct_shared + direct_unwatchable + direct_budget + direct_no_monitor +
 * direct_racing + direct_no_engine), and each handle moves the right bytes.
 * The query of /proc/self/maps failing with EMFILE was returned to the
 * caller as "not mapped or not accessible".
 */
#include <sys/resource.h>

#include "test.h"

#define PG 4096UL
#define U(x) ((unsigned long long)(x))

static int fillers[4096], nfillers;

static void leave_free(unsigned n)
{
	struct rlimit lim;
	int fd, hi = 0;

	CHECK(getrlimit(RLIMIT_NOFILE, &lim) == 0, "getrlimit");
	for (fd = 0; fd < 1024; fd++)
		if (fcntl(fd, F_GETFD) >= 0)
			hi = fd;
	lim.rlim_cur = (rlim_t)hi + 64;
	CHECK(setrlimit(RLIMIT_NOFILE, &lim) == 0, "setrlimit: %s", strerror(errno));
	while ((fd = dup(0)) >= 0) {
		CHECK(nfillers < 4096, "too many free descriptors");
		fillers[nfillers++] = fd;
	}
	CHECK(errno == EMFILE, "dup: %s", strerror(errno));
	for (unsigned i = 0; i < n; i++)
		close(fillers[--nfillers]);
}

static uint64_t causes(const struct odpx_stats *st)
{
	return st->direct_shared + st->direct_unwatchable + st->direct_budget +
	       st->direct_no_monitor + st->direct_racing + st->direct_no_engine;
}

static int with_free(void *arg)
{
	unsigned n = (unsigned)(uintptr_t)arg;
	struct odpx_ctx *ctx;
	struct odpx_mr *mr[3];
	struct odpx_stats st;
	char *p[3];
	int r;

	for (int i = 0; i < 3; i++) {
		p[i] = map_anon(NULL, 8 * PG);
		memset(p[i], 'a' + i, 8 * PG);
	}
	leave_free(n);
	r = odpx_open_uring(NULL, &ctx);
	if (r == -EMFILE) {	/* refused at the open, clearly: nothing to register */
		printf("%s, %u free: odpx_open -EMFILE (%s)\n", getenv("ODPX_UFFD_MODE"), n,
		       odpx_last_reason());
		return 0;
	}
	CHECK(r == 0, "%u free: odpx_open %d (%s)", n, r, odpx_last_reason());
	for (int i = 0; i < 3; i++) {
		r = odpx_reg(ctx, p[i] + PG, 4 * PG, ODPX_ACCESS_LOCAL_WRITE, &mr[i]);
		CHECK(r == 0, "%u free: odpx_reg %d: %s", n, i, odpx_last_reason());
	}
	st = stats_of(ctx);
	CHECK(st.direct_regs == causes(&st),
	      "%u free: direct_regs %llu, counted under causes %llu (shared %llu unwatchable %llu"
	      " budget %llu no_monitor %llu racing %llu no_engine %llu)", n, U(st.direct_regs),
	      U(causes(&st)), U(st.direct_shared), U(st.direct_unwatchable), U(st.direct_budget),
	      U(st.direct_no_monitor), U(st.direct_racing), U(st.direct_no_engine));
	while (nfillers)
		close(fillers[--nfillers]);
	for (int i = 0; i < 3; i++) {
		CHECK(data_check(ctx, mr[i], p[i] + PG, 4 * PG, 'a' + i), "%u free: bytes of %d",
		      n, i);
		CHECK_RC(odpx_dereg(ctx, mr[i]), 0);
	}
	CHECK_RC(odpx_close(ctx), 0);
	printf("%s, %u free: direct %llu (no_monitor %llu, no_engine %llu, unwatchable %llu),"
	       " entries %llu\n", getenv("ODPX_UFFD_MODE"), n, U(st.direct_regs),
	       U(st.direct_no_monitor), U(st.direct_no_engine), U(st.direct_unwatchable),
	       U(st.entries));
	return 0;
}

int main(void)
{
	static const char *const modes[] = { "auto", "wp", "missing" };

	for (unsigned m = 0; m < 3; m++)
		for (unsigned n = 0; n <= 8; n++) {
			int r = run_forked(modes[m], with_free, (void *)(uintptr_t)n);
			CHECK(r == 0, "%s, %u free: %s %d", modes[m], n,
			      r > 128 ? "signal" : "exit", r > 128 ? r - 128 : r);
		}
	return 0;
}
