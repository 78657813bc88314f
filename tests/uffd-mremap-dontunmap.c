// SPDX-License-Identifier: MIT
/*
 * uffd-mremap-dontunmap: what odpx's watch leaves the application, in each
 * uffd mode.
 *   - mremap(MREMAP_DONTUNMAP) of a cached registration's memory moves it,
 *     its bytes with it, as it does memory odpx never saw (the REMAP event
 *     kills the entry: the old address registers again over the empty pages
 *     the call leaves, the new one over the moved bytes).  glibc's mremap()
 *     reads a fifth argument (the new address) when MREMAP_DONTUNMAP is set:
 *     called with four it fails with EINVAL, with or without odpx.
 *   - the application's own userfaultfd cannot register a range odpx
 *     watches (EBUSY, one userfaultfd per VMA); after odpx_invalidate() of
 *     the range it can: the invalidation gives the pages back unwatched.
 *   - mremap(MREMAP_DONTUNMAP) of a range given back so moves its bytes with
 *     no event at all; the entry odpx_invalidate() killed is not served
 *     again: both addresses register over the pages mapped there now.
 */
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>

#include "test.h"

#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4
#endif
#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif

#define L (16 * 4096UL)

/* A registration of [p, p + L) through odpx, cached, with @v's bytes. */
static void cache_it(struct odpx_ctx *ctx, char *p, int v)
{
	struct odpx_mr *mr;

	memset(p, v, L);
	CHECK_RC(odpx_reg(ctx, p, L, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
	CHECK_RC(odpx_dereg(ctx, mr), 0);
}

/* odpx's registration of [p, p + L) reaches the pages mapped there now. */
static bool reaches(struct odpx_ctx *ctx, char *p, unsigned seed)
{
	struct odpx_mr *mr;

	CHECK_RC(odpx_reg(ctx, p, L, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
	bool ok = data_check(ctx, mr, p, L, seed);
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	return ok;
}

static int one_mode(void *arg)
{
	const char *mode = getenv("ODPX_UFFD_MODE");
	struct odpx_ctx *ctx = open_pin(0);
	char *p = map_anon(NULL, L), *q = map_anon(NULL, L), *r;

	(void)arg;
	memset(q, 9, L);
	r = mremap(q, L, L, MREMAP_MAYMOVE | MREMAP_DONTUNMAP, NULL);
	CHECK(r != MAP_FAILED && r[0] == 9, "%s: mremap(DONTUNMAP) of memory odpx never saw: %s",
	      mode, strerror(errno));
	munmap(r, L);
	munmap(q, L);

	cache_it(ctx, p, 7);
	r = mremap(p, L, L, MREMAP_MAYMOVE | MREMAP_DONTUNMAP, NULL);
	CHECK(r != MAP_FAILED, "%s: mremap(DONTUNMAP) of a cached registration's memory: %s",
	      mode, strerror(errno));
	CHECK(r[0] == 7 && r[L - 1] == 7 && p[0] == 0, "%s: the bytes did not move", mode);
	CHECK(reaches(ctx, p, 1), "%s: the old address's registration misses its pages", mode);
	CHECK(reaches(ctx, r, 2), "%s: the new address's registration misses its pages", mode);
	munmap(r, L);

	int ufd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
	struct uffdio_api api = { .api = UFFD_API };
	CHECK(ufd >= 0 && ioctl(ufd, UFFDIO_API, &api) == 0, "%s: the application's userfaultfd: %s",
	      mode, strerror(errno));
	cache_it(ctx, p, 5);
	struct uffdio_register reg = { .range = { (uintptr_t)p, L },
				       .mode = UFFDIO_REGISTER_MODE_MISSING };
	errno = 0;
	CHECK(ioctl(ufd, UFFDIO_REGISTER, &reg) < 0 && errno == EBUSY,
	      "%s: the application's registration of memory odpx watches: errno %d, want EBUSY",
	      mode, errno);
	CHECK_RC(odpx_invalidate(ctx, p, L), 1);
	CHECK(ioctl(ufd, UFFDIO_REGISTER, &reg) == 0,
	      "%s: the application's registration after odpx_invalidate(): %s", mode,
	      strerror(errno));
	struct uffdio_range un = { (uintptr_t)p, L };
	CHECK(ioctl(ufd, UFFDIO_UNREGISTER, &un) == 0, "UFFDIO_UNREGISTER: %s", strerror(errno));
	close(ufd);
	CHECK(reaches(ctx, p, 3), "%s: odpx after the application's watch came and went", mode);


	/* fresh memory: within ODPX_REMOVE_QUARANTINE_MS of an invalidation a range is served direct */
	q = map_anon(NULL, L);
	cache_it(ctx, q, 6);
	CHECK_RC(odpx_invalidate(ctx, q, L), 1);
	r = mremap(q, L, L, MREMAP_MAYMOVE | MREMAP_DONTUNMAP, NULL);
	CHECK(r != MAP_FAILED, "%s: mremap(DONTUNMAP) after odpx_invalidate(): %s", mode,
	      strerror(errno));
	CHECK(r[0] == 6 && r[L - 1] == 6 && q[0] == 0,
	      "%s: the bytes did not move after odpx_invalidate()", mode);
	CHECK(reaches(ctx, q, 4), "%s: the old address's registration after a move with "
	      "no event misses its pages", mode);
	CHECK(reaches(ctx, r, 5), "%s: the new address's registration after a move with "
	      "no event misses its pages", mode);
	munmap(r, L);
	munmap(q, L);
	CHECK_RC(odpx_close(ctx), 0);
	munmap(p, L);
	printf("%s: mremap(DONTUNMAP) moves cached memory coherently; odpx_invalidate() gives "
	       "the range back to the application's userfaultfd and mremap()\n", mode);
	return 0;
}

int main(void)
{
	return run_each_uffd_mode(one_mode, NULL);
}
