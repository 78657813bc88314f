// SPDX-License-Identifier: MIT
/*
 * dev-verbs-mremap: odpx in pin mode leaves mremap() of an RDMA-registered buffer as it is
 * without odpx.  A 1 MiB buffer of one mmap; 64 KiB of it registered through odpx with remote
 * access and written by RDMA; then, with that registration still held:
 *   - mremap of the whole buffer to 2 MiB, MREMAP_MAYMOVE;
 *   - mremap of the whole buffer to a new address, MREMAP_MAYMOVE | MREMAP_FIXED;
 * each must succeed with the bytes moved along (the watch takes the buffer's whole VMA,
 * uffd/watch.c, which mremap() moves as one), and the monitor must have seen the move (a
 * REMAP event counted): a buffer left unwatched would pass the rest without odpx in it.  The old registration is released, the moved
 * range registered again, and RDMA WRITE and READ through the new keys must reach the pages
 * at the new address.  In the uffd modes auto and wp, each in a process of its own.  Missing
 * mode watches exact ranges, which split the VMA, and the kernel's mremap() of a range over
 * several VMAs fails with EFAULT: checked as documented (docs/invalidation.md).
 */
#include <sys/wait.h>

#include "dev-verbs-util.h"

#define MB (1UL << 20)
#define PART (64 * 1024UL)
#define AT (256 * 1024UL)	/* offset of the registered part */

static void case_of(struct dev *d, struct odpx_ctx *ctx, const char *mode, int fixed)
{
	const char *what = fixed ? "move (MREMAP_FIXED)" : "grow (MREMAP_MAYMOVE)";
	unsigned char *p = dv_map(MB), *src = dv_map(PART), *want = dv_map(MB), *q, *dst = NULL;
	struct odpx_mr *smr = dv_reg(ctx, src, PART, ACC_LW), *mr;

	dev_fill(p, MB, 7 + fixed);
	dev_fill(src, PART, 70 + fixed);
	mr = dv_reg(ctx, p + AT, PART, ACC_REMOTE);
	if (dv_rdma(d, IBV_WR_RDMA_WRITE, smr, src, PART, p + AT, odpx_mr_rkey(mr)))
		dev_fail("%s: RDMA WRITE before the mremap failed", mode);
	memcpy(want, p, MB);
	if (memcmp(want + AT, src, PART))
		dev_fail("%s: RDMA WRITE before the mremap: wrong bytes", mode);

	uint64_t remaps = dv_stats(ctx).inval_remap;
	if (fixed) {
		dst = mmap(NULL, MB, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (dst == MAP_FAILED)
			dev_fail("mmap: %s", strerror(errno));
		q = mremap(p, MB, MB, MREMAP_MAYMOVE | MREMAP_FIXED, dst);
	} else {
		q = mremap(p, MB, 2 * MB, MREMAP_MAYMOVE);
	}
	if (!strcmp(mode, "missing")) {
		if (q != MAP_FAILED || errno != EFAULT)
			dev_fail("%s: %s with exact watches: %s, want EFAULT (documented)", mode,
				 what, q == MAP_FAILED ? strerror(errno) : "done");
		printf("%s, %s: EFAULT, as documented for exact watches\n", mode, what);
		dv_dereg(ctx, mr);
		dv_dereg(ctx, smr);
		if (dst)
			munmap(dst, MB);
		munmap(p, MB);
		munmap(src, PART);
		munmap(want, MB);
		return;
	}
	if (q == MAP_FAILED)
		dev_fail("%s: %s of a buffer registered for RDMA: %s", mode, what, strerror(errno));
	if (!dev_same(what, q, want, MB))
		dev_fail("%s: %s: the bytes did not move with the buffer", mode, what);
	/* the caller runs again once the event is read; it is counted as it is applied */
	for (int i = 0; i < 200 && dv_stats(ctx).inval_remap == remaps; i++)
		dev_pause_ms(10);
	if (dv_stats(ctx).inval_remap == remaps)
		dev_fail("%s: %s: no REMAP event reached the monitor: the buffer was not watched",
			 mode, what);
	dv_dereg(ctx, mr);

	/* the moved range, registered again: both directions through the new keys */
	mr = dv_reg(ctx, q + AT, PART, ACC_REMOTE);
	dev_fill(src, PART, 90 + fixed);
	memcpy(want + AT, src, PART);
	if (dv_rdma(d, IBV_WR_RDMA_WRITE, smr, src, PART, q + AT, odpx_mr_rkey(mr)))
		dev_fail("%s: %s: RDMA WRITE after the mremap failed", mode, what);
	if (!dev_same("RDMA WRITE after the mremap", q + AT, src, PART))
		dev_fail("%s: %s: RDMA WRITE missed the pages at the new address", mode, what);
	memset(src, 0, PART);
	if (dv_rdma(d, IBV_WR_RDMA_READ, smr, src, PART, q + AT, odpx_mr_rkey(mr)))
		dev_fail("%s: %s: RDMA READ after the mremap failed", mode, what);
	if (!dev_same("RDMA READ after the mremap", src, want + AT, PART))
		dev_fail("%s: %s: RDMA READ did not read the pages at the new address", mode, what);
	if (!dev_same(what, q, want, MB))
		dev_fail("%s: %s: bytes beside the registered part changed", mode, what);
	printf("%s, %s: succeeded with a registration held; RDMA WRITE and READ reach the moved"
	       " pages\n", mode, what);
	dv_dereg(ctx, mr);
	dv_dereg(ctx, smr);
	munmap(q, fixed ? MB : 2 * MB);
	munmap(src, PART);
	munmap(want, MB);
}

static void one_mode(const char *mode)
{
	struct odpx_ctx *ctx;
	struct dev d;

	setenv("ODPX_UFFD_MODE", mode, 1);
	dev_open(&d);
	dev_connect_self(&d);
	ctx = dv_open(&d, ODPX_MODE_PIN, 0);
	case_of(&d, ctx, mode, 0);
	case_of(&d, ctx, mode, 1);
	odpx_close(ctx);
	dev_close(&d);
}

int main(void)
{
	static const char *const modes[] = { "auto", "wp", "missing" };
	int bad = 0;

	for (unsigned i = 0; i < 3; i++) {
		fflush(stdout);
		pid_t pid = fork();
		int st;

		if (pid < 0)
			dev_fail("fork: %s", strerror(errno));
		if (!pid) {
			one_mode(modes[i]);
			exit(0);
		}
		if (waitpid(pid, &st, 0) != pid)
			dev_fail("waitpid: %s", strerror(errno));
		if (WIFEXITED(st) && WEXITSTATUS(st) == 77)
			exit(77);	/* dev_skip(): the same absence in every mode */
		if (!WIFEXITED(st) || WEXITSTATUS(st)) {
			printf("FAIL: uffd mode %s\n", modes[i]);
			bad = 1;
		}
	}
	return bad;
}
