// SPDX-License-Identifier: MIT
/*
 * uffd-maps-fd: the descriptor of /proc/self/maps that the VMA query keeps
 * (uffd/vma.c) lives no longer than the contexts, and a number the
 * application took over is left to it.  In each uffd mode (auto, wp,
 * missing):
 *   - after the last odpx_close, as many descriptors are open as before
 *     the first odpx_open (the query's was kept for the life of the
 *     process);
 *   - the application closes the query's number and opens /dev/null there:
 *     the next miss over a new VMA is still cached (watched) and moves the
 *     right bytes, and after the last odpx_close the application's
 *     /dev/null is still open at that number.
 */
#include "test.h"

#define PG 4096UL

/* The number of our /proc/PID/maps descriptor, or -1 */
static int maps_fd(void)
{
	char want[64], path[64], link[128];
	int found = -1;

	snprintf(want, sizeof(want), "/proc/%d/maps", (int)getpid());
	for (int fd = 0; fd < 1024; fd++) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		ssize_t n = readlink(path, link, sizeof(link) - 1);
		if (n <= 0)
			continue;
		link[n] = 0;
		if (!strcmp(link, want)) {
			CHECK(found < 0, "two descriptors of %s: %d and %d", want, found, fd);
			found = fd;
		}
	}
	return found;
}

static struct odpx_mr *reg_new(struct odpx_ctx *ctx, char **p, unsigned seed)
{
	struct odpx_stats st0 = stats_of(ctx), st1;
	struct odpx_mr *mr;

	*p = map_anon(NULL, 8 * PG);
	memset(*p, 1, 8 * PG);
	CHECK_RC(odpx_reg(ctx, *p + PG, 4 * PG, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
	st1 = stats_of(ctx);
	CHECK(st1.misses == st0.misses + 1 && st1.direct_regs == st0.direct_regs,
	      "not a cached miss: misses %lu -> %lu, direct_regs %lu -> %lu",
	      (unsigned long)st0.misses, (unsigned long)st1.misses,
	      (unsigned long)st0.direct_regs, (unsigned long)st1.direct_regs);
	CHECK(data_check(ctx, mr, *p + PG, 4 * PG, seed), "bytes");
	return mr;
}

static int one_mode(void *arg)
{
	const char *mode = getenv("ODPX_UFFD_MODE");
	unsigned fds0 = count_fds();
	struct odpx_ctx *ctx;
	struct odpx_mr *mr;
	char *p, *q;
	int n, null;

	(void)arg;
	CHECK(maps_fd() < 0, "%s: /proc/self/maps open before odpx", mode);
	ctx = open_pin(0);
	mr = reg_new(ctx, &p, 3);
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	n = maps_fd();
	CHECK_RC(odpx_close(ctx), 0);
	CHECK(maps_fd() < 0 && count_fds() == fds0,
	      "%s: after the last close: /proc/self/maps at %d (was %d), %u descriptors, %u before",
	      mode, maps_fd(), n, count_fds(), fds0);

	ctx = open_pin(0);
	mr = reg_new(ctx, &p, 4);
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	if ((n = maps_fd()) >= 0) {	/* kernels without PROCMAP_QUERY keep none */
		null = open("/dev/null", O_RDONLY);
		CHECK(null >= 0 && dup2(null, n) == n, "dup2 over %d", n);
		close(null);
		mr = reg_new(ctx, &q, 5);	/* a new VMA: a watch, a query */
		CHECK_RC(odpx_dereg(ctx, mr), 0);
	}
	CHECK_RC(odpx_close(ctx), 0);
	if (n >= 0) {
		CHECK(fcntl(n, F_GETFD) >= 0, "%s: our /dev/null at %d was closed by odpx", mode, n);
		close(n);
		munmap(q, 8 * PG);
	}
	CHECK(maps_fd() < 0 && count_fds() == fds0, "%s: %u descriptors after, %u before", mode,
	      count_fds(), fds0);
	munmap(p, 8 * PG);
	printf("%s: the maps descriptor closed at the last close; a replaced one left alone (%d)\n",
	       mode, n);
	return 0;
}

int main(void)
{
	return run_each_uffd_mode(one_mode, NULL);
}
