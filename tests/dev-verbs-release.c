// SPDX-License-Identifier: MIT
/*
 * dev-verbs-release: what a release, a hint and exit() leave behind.  Each case runs in
 * a child of its own (a failed RDMA READ leaves the QP in error).
 *
 *   hint flags: a read hint over PROT_READ memory next to a write hint over fresh
 *     memory.  Merged into one PREFETCH_WRITE, the device stopped at the first
 *     read-only page and the write hint's pages were never faulted in (0 of 64
 *     resident), with nothing counted as failed.  Hints of other flags stay apart.
 *   released rkey (explicit, and pin for contrast): register a page with remote
 *     access, release it, munmap it, map new memory at the same address and fill it.
 *     An RDMA READ with the old rkey must not return the new bytes.  An explicit-mode
 *     range MR was kept after its release and followed the page tables: the peer read
 *     the new mapping.  A registration of the same page again works, with its own rkey.
 *   exit(): the application's atexit cleanup, registered before the first open,
 *     closes its context.  odpx's own handler ran first and freed it: a double close
 *     (heap corruption, SIGABRT).
 */
#include <sched.h>
#include <sys/wait.h>

#include "dev-verbs-util.h"

#define N 64
#define PG 4096UL

static unsigned resident(void *p, size_t pages)
{
	unsigned char v[N];
	unsigned n = 0;

	if (mincore(p, pages * PG, v))
		dev_fail("mincore: %s", strerror(errno));
	for (size_t i = 0; i < pages; i++)
		n += v[i] & 1;
	return n;
}

static void hint_flags(void)
{
	cpu_set_t one;
	struct dev d;
	struct odpx_ctx *ctx;
	unsigned char *m, *b, *warm;
	struct odpx_stats s0, s1;
	unsigned got = 0;

	/* one CPU, the engine's too: both hints are queued before it runs, one batch */
	CPU_ZERO(&one);
	CPU_SET(0, &one);
	if (sched_setaffinity(0, sizeof(one), &one))
		dev_fail("sched_setaffinity: %s", strerror(errno));
	dev_open(&d);
	dev_require_odp(&d, IBV_ODP_SUPPORT_WRITE);
	ctx = dv_open(&d, ODPX_MODE_EXPLICIT, 0);
	warm = dv_map(PG);
	if (odpx_prefetch(ctx, warm, PG, 0))	/* the engine starts */
		dev_fail("prefetch: %s", odpx_last_reason());
	m = dv_map(2 * N * PG);	/* [read-only A][fresh B], in one chunk or two */
	b = m + N * PG;
	if (mprotect(m, N * PG, PROT_READ))
		dev_fail("mprotect: %s", strerror(errno));
	for (int i = 0; i < 400 && !engine_asleep(ctx); i++)
		dev_pause_ms(10);
	if (!engine_asleep(ctx))	/* both hints must reach it in one batch */
		dev_fail("the engine is not asleep 4 s after its first hint");
	s0 = dv_stats(ctx);
	if (odpx_prefetch(ctx, m, N * PG, 0) || odpx_prefetch(ctx, b, N * PG, ODPX_PREFETCH_WRITE))
		dev_fail("prefetch: %s", odpx_last_reason());
	for (int i = 0; i < 300 && (got = resident(b, N)) < N; i++)
		dev_pause_ms(10);
	s1 = dv_stats(ctx);
	printf("hint flags: a read hint over read-only memory next to a write hint: %u of %d"
	       " pages of the write hint resident; issued +%llu, failed +%llu\n", got, N,
	       (unsigned long long)(s1.prefetch_issued - s0.prefetch_issued),
	       (unsigned long long)(s1.prefetch_failed - s0.prefetch_failed));
	if (got != N || s1.prefetch_failed != s0.prefetch_failed)
		dev_fail("hint flags: the write hint was lost beside the read hint");
	odpx_close(ctx);
	dev_close(&d);
}

static void released_rkey(enum odpx_mode mode)
{
	struct dev d;
	struct odpx_ctx *ctx;
	struct odpx_mr *mr, *dmr;
	unsigned char *buf, *dst;
	uint32_t rkey;
	int rc;

	dev_open(&d);
	if (mode == ODPX_MODE_EXPLICIT)
		dev_require_odp(&d, IBV_ODP_SUPPORT_READ);
	dev_connect_self(&d);
	ctx = dv_open(&d, mode, 0);
	dst = dv_map(PG);
	dmr = dv_reg(ctx, dst, PG, ACC_LW);
	buf = dv_map(PG);
	memset(buf, 0x11, PG);
	mr = dv_reg(ctx, buf, PG, ACC_REMOTE);
	rkey = odpx_mr_rkey(mr);
	if (dv_rdma(&d, IBV_WR_RDMA_READ, dmr, dst, PG, buf, rkey) || !dev_all(dst, PG, 0x11))
		dev_fail("%s: RDMA READ through a held remote registration", odpx_mode_str(mode));
	dv_dereg(ctx, mr);
	/* registered again, released again: a new MR each time, and it works */
	mr = dv_reg(ctx, buf, PG, ACC_REMOTE);
	memset(dst, 0, PG);
	if (dv_rdma(&d, IBV_WR_RDMA_READ, dmr, dst, PG, buf, odpx_mr_rkey(mr)) ||
	    !dev_all(dst, PG, 0x11))
		dev_fail("%s: RDMA READ through the page registered again", odpx_mode_str(mode));
	rkey = odpx_mr_rkey(mr);
	dv_dereg(ctx, mr);
	if (munmap(buf, PG) || dev_map(PG, buf) != buf)
		dev_fail("munmap, then mmap at %p", (void *)buf);
	memset(buf, 0x5e, PG);	/* the application's new memory */
	dev_pause_ms(300);	/* pin mode: the engine unpins what the munmap killed */
	memset(dst, 0, PG);
	rc = dv_rdma(&d, IBV_WR_RDMA_READ, dmr, dst, PG, buf, rkey);
	printf("released rkey, %s: an RDMA READ with it after munmap and mmap %s\n",
	       odpx_mode_str(mode), rc ? "fails" : dev_all(dst, PG, 0x5e) ?
	       "returns the new mapping's bytes" : "completes (old pages)");
	if (rc == 0 && dev_all(dst, PG, 0x5e))
		dev_fail("%s: a released rkey reaches memory mapped after the release",
			 odpx_mode_str(mode));
	fflush(stdout);
	_exit(0);	/* no teardown: the QP may be in error */
}

static struct odpx_ctx *app_ctx;

static void app_cleanup(void)
{
	int r = odpx_close(app_ctx);

	printf("exit: the application's atexit cleanup closed its context: %d\n", r);
	fflush(stdout);
	if (r)
		_exit(3);
}

static void exit_cleanup(void)
{
	struct dev d;

	atexit(app_cleanup);	/* before the first open */
	dev_open(&d);
	app_ctx = dv_open(&d, ODPX_MODE_AUTO, 0);
	dv_dereg(app_ctx, dv_reg(app_ctx, &d, sizeof(d), ACC_LW));
	fflush(stdout);
	exit(0);
}

static void in_child(void (*fn)(void), const char *what)
{
	pid_t pid;
	int st;

	fflush(stdout);
	if (!(pid = fork())) {
		fn();
		fflush(stdout);
		_exit(0);
	}
	if (waitpid(pid, &st, 0) != pid)
		dev_fail("waitpid: %s", strerror(errno));
	/* dev_skip() in the child: its SKIP line is printed; the parent skips too */
	if (WIFEXITED(st) && WEXITSTATUS(st) == 77)
		exit(77);
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		dev_fail("%s: %s %d", what, WIFEXITED(st) ? "exit" : "signal",
			 WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
}

static void rkey_explicit(void) { released_rkey(ODPX_MODE_EXPLICIT); }
static void rkey_pin(void) { released_rkey(ODPX_MODE_PIN); }

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	in_child(hint_flags, "hint flags");
	in_child(rkey_explicit, "released rkey, explicit");
	in_child(rkey_pin, "released rkey, pin");
	in_child(exit_cleanup, "exit() with the application's own cleanup");
	printf("ok\n");
	return 0;
}
