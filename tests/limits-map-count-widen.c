// SPDX-License-Identifier: MIT
/*
 * limits-map-count-widen: near vm.max_map_count odpx watches only the pages
 * asked for.  A watch over a whole VMA splits nothing, but keeps memory the
 * application later makes readable beside it from merging with it: one VMA
 * more than without odpx, which at the limit fails the application's call.
 * In each uffd mode:
 *   - the process is filled to the limit (one-page shared mappings, a VMA
 *     each), two are given back;
 *   - part of a read-write VMA X is registered (its reservation goes on,
 *     PROT_NONE, beyond X);
 *   - the process is filled to the limit again;
 *   - the VMA grows into the next pages of the reservation, as an allocator
 *     grows its heap, one of two ways:
 *       mprotect: they are made read-write at the limit; that must succeed
 *         (natively they merge into X; watched whole, X cannot take them and
 *         the call fails with ENOMEM);
 *       mmap: one mapping is given back and a read-write MAP_FIXED mapping
 *         is placed over them; natively it merges into X, so the process's
 *         next mapping still fits; beside a whole-VMA watch it stays a VMA of
 *         its own and that next mapping fails with ENOMEM.
 * The registration's bytes are right, whether it was cached or served direct.
 */
#include "test.h"

#define PG 4096UL

#define FILLS_MAX (1UL << 20)	/* above any vm.max_map_count the test meets */

static void **fills;	/* allocated before the limit is near: nothing maps there */
static size_t nfills;

/* One-page shared mappings until the kernel refuses one: the process is at the limit. */
static void fill(void)
{
	for (;;) {
		void *p = mmap(NULL, PG, PROT_READ, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED) {
			CHECK(errno == ENOMEM, "mmap: %s", strerror(errno));
			return;
		}
		CHECK(nfills < FILLS_MAX, "more than %lu mappings", FILLS_MAX);
		fills[nfills++] = p;
	}
}

static void unfill(size_t keep)
{
	while (nfills > keep)
		munmap(fills[--nfills], PG);
}

/* "mprotect" or "mmap": how the registered VMA grows at the limit (above). */
static int one_mode(void *arg)
{
	const char *how = arg, *mode = getenv("ODPX_UFFD_MODE");
	struct odpx_ctx *ctx = open_pin(0);
	char *warm = map_anon(NULL, 4 * PG);
	struct odpx_mr *mr;

	fills = mmap(NULL, FILLS_MAX * sizeof(*fills), PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	CHECK(fills != MAP_FAILED, "mmap");
	/* the engine and the monitor started, their memory mapped */
	CHECK_RC(odpx_reg(ctx, warm, 4 * PG, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	char *res = mmap(NULL, 64 * PG, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(res != MAP_FAILED, "mmap");
	char *x = res + 8 * PG;
	CHECK(mprotect(x, 16 * PG, PROT_READ | PROT_WRITE) == 0, "mprotect");
	memset(x, 1, 16 * PG);

	fill();
	size_t at_limit = nfills;
	unfill(nfills - 2);
	int r = odpx_reg(ctx, x + 4 * PG, 4 * PG, ODPX_ACCESS_LOCAL_WRITE, &mr);
	fill();
	int grow, err, next = 0;
	if (!strcmp(how, "mprotect")) {
		grow = mprotect(x + 16 * PG, 8 * PG, PROT_READ | PROT_WRITE);
		err = errno;
	} else {
		unfill(nfills - 1);
		void *g = mmap(x + 16 * PG, 8 * PG, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
		grow = g == MAP_FAILED ? -1 : 0;
		err = errno;
		void *n = mmap(NULL, PG, PROT_READ, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		if (n == MAP_FAILED)
			next = errno;
		else
			fills[nfills++] = n;
	}
	unfill(0);	/* back under the limit before any check can fail */
	CHECK(at_limit > 1000, "%s: %zu mappings to reach vm.max_map_count", mode, at_limit);
	CHECK(r == 0, "%s: odpx_reg near the limit: %d (%s)", mode, r, odpx_last_reason());
	CHECK(grow == 0, "%s: growing the registered VMA at the limit by %s: %s (a watch over "
	      "the whole VMA keeps the new pages from merging)", mode, how, strerror(err));
	CHECK(next == 0, "%s: the mapping after growing the registered VMA by MAP_FIXED: %s "
	      "(the new pages did not merge into it: one VMA more than natively)", mode,
	      strerror(next));
	CHECK(data_check(ctx, mr, x + 4 * PG, 4 * PG, 5), "%s: bytes", mode);
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	CHECK_RC(odpx_close(ctx), 0);
	munmap(res, 64 * PG);
	munmap(warm, 4 * PG);
	munmap(fills, FILLS_MAX * sizeof(*fills));
	printf("%s: at vm.max_map_count (%zu mappings): a registration near it watches its "
	       "pages only; the VMA grows by %s as natively\n", mode, at_limit, how);
	return 0;
}

int main(void)
{
#ifdef __SANITIZE_THREAD__
	SKIP("TSan's runtime maps memory of its own, and dies at vm.max_map_count");
#endif
	int bad = run_each_uffd_mode(one_mode, "mprotect");

	return run_each_uffd_mode(one_mode, "mmap") || bad;
}
