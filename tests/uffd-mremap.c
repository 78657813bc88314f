// SPDX-License-Identifier: MIT
/*
 * uffd-mremap: odpx leaves mremap() of the application's buffers as it
 * was.  A 1 MiB buffer of one mmap, a part of it cached (registered and
 * released), then:
 *   - mremap of the whole buffer to 2 MiB, MREMAP_MAYMOVE;
 *   - mremap of the whole buffer to a new address, MREMAP_MAYMOVE |
 *     MREMAP_FIXED, same size;
 * each succeeds, the bytes moved with it, and a registration of the moved
 * buffer moves the right bytes: the watch takes the buffer's whole VMA
 * (uffd/watch.c, whole()), which mremap() moves as one.  In each uffd mode
 * (auto, wp, missing).  Where the watch stays exact (missing mode, and
 * sanitizer builds) it splits the VMA, and the kernel's mremap() of a
 * range over more than one VMA fails with EFAULT: checked as documented
 * (a grow leaves the buffer whole; a move may have moved its first VMAs).
 */
#include "test.h"

#define PG 4096UL
#define MB (1UL << 20)

/* Watches of the pages alone (uffd/watch.c, whole()): missing mode, sanitizer builds */
static int exact(void)
{
	return SANITIZER_MALLOC || !strcmp(getenv("ODPX_UFFD_MODE"), "missing");
}

static void case_of(struct odpx_ctx *ctx, int fixed)
{
	const char *what = fixed ? "move (MREMAP_FIXED)" : "grow (MREMAP_MAYMOVE)";
	char *p = map_anon(NULL, MB), *q, *dst = NULL;
	struct odpx_mr *mr;

	for (size_t i = 0; i < MB; i++)
		p[i] = (char)(i * 7);
	CHECK_RC(odpx_reg(ctx, p + 64 * PG, 16 * PG, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	if (fixed) {
		dst = mmap(NULL, MB, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		CHECK(dst != MAP_FAILED, "mmap");
		q = mremap(p, MB, MB, MREMAP_MAYMOVE | MREMAP_FIXED, dst);
	} else {
		q = mremap(p, MB, 2 * MB, MREMAP_MAYMOVE);
	}
	if (exact()) {
		CHECK(q == MAP_FAILED && errno == EFAULT, "%s: %s with exact watches: %s, want EFAULT",
		      getenv("ODPX_UFFD_MODE"), what, q == MAP_FAILED ? strerror(errno) : "done");
		/*
		 * A resize fails whole.  A move of several VMAs (Linux 6.17+)
		 * stops at the first armed by a userfaultfd, the VMAs before it
		 * already moved: those bytes are at dst now, not checked.
		 */
		for (size_t i = 0; !fixed && i < MB; i++)
			CHECK(p[i] == (char)(i * 7), "%s: byte %zu changed", what, i);
		if (dst)
			munmap(dst, MB);
		munmap(p, MB);
		return;
	}
	CHECK(q != MAP_FAILED, "%s: %s of a partly cached buffer: %s", getenv("ODPX_UFFD_MODE"),
	      what, strerror(errno));
	for (size_t i = 0; i < MB; i++)
		CHECK(q[i] == (char)(i * 7), "%s: byte %zu not moved", what, i);
	CHECK_RC(odpx_reg(ctx, q + 64 * PG, 16 * PG, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
	CHECK(data_check(ctx, mr, q + 64 * PG, 16 * PG, 5), "%s: bytes through the moved buffer",
	      what);
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	munmap(q, fixed ? MB : 2 * MB);
}

static int one_mode(void *arg)
{
	struct odpx_ctx *ctx = open_pin(0);

	(void)arg;
	case_of(ctx, 0);
	case_of(ctx, 1);
	CHECK_RC(odpx_close(ctx), 0);
	printf("%s: mremap of partly cached buffers: %s\n", getenv("ODPX_UFFD_MODE"),
	       exact() ? "EFAULT (exact watches, documented)" : "grown and moved");
	return 0;
}

int main(void)
{
	return run_each_uffd_mode(one_mode, NULL);
}
