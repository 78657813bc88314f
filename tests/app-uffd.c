// SPDX-License-Identifier: MIT
/*
 * app-uffd: memory the application watches with its own userfaultfd.
 *
 * One uffd per VMA: odpx's monitor cannot register such a range (EBUSY), so
 * odpx_reg over it is served in direct mode, counted in direct_unwatchable,
 * never cached (every odpx_reg pins again), moves the right bytes, and its
 * odpx_dereg unpins at once (entries and VmPin back).  A range that only
 * runs into such a VMA is direct too.  Kernel faults are not delivered to a
 * user-mode-only uffd, so unpopulated pages there fail with -EFAULT and
 * lose nothing.  The application's uffd keeps its range (it can still
 * unregister it), and once it has, the range is cached like any other.
 * Ordinary memory is cached all along.
 */
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>

#include "test.h"

#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif

#define LEN (64 * 1024)

static long pin0;

static void check_back(struct odpx_ctx *ctx, const struct odpx_stats *st0, const char *when)
{
	struct odpx_stats st = stats_of(ctx);

	CHECK(st.entries == st0->entries && st.pinned_bytes == st0->pinned_bytes,
	      "%s: entries %lu (was %lu), pinned_bytes %lu (was %lu)", when,
	      (unsigned long)st.entries, (unsigned long)st0->entries,
	      (unsigned long)st.pinned_bytes, (unsigned long)st0->pinned_bytes);
}

/* odpx_reg over app-watched memory: direct, counted, correct, unpinned by dereg. */
static void direct_once(struct odpx_ctx *ctx, void *p, size_t len, unsigned seed, const char *what)
{
	struct odpx_stats st0 = stats_of(ctx), st1;
	long kb0 = vm_pinned_kb();
	struct odpx_mr *mr;

	CHECK_RC(odpx_reg(ctx, p, len, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
	st1 = stats_of(ctx);
	CHECK(st1.direct_unwatchable == st0.direct_unwatchable + 1,
	      "%s: direct_unwatchable %lu -> %lu, want +1 (direct_shared %lu -> %lu)", what,
	      (unsigned long)st0.direct_unwatchable, (unsigned long)st1.direct_unwatchable,
	      (unsigned long)st0.direct_shared, (unsigned long)st1.direct_shared);
	CHECK(st1.direct_regs == st0.direct_regs + 1 && st1.pins == st0.pins + 1,
	      "%s: not a direct pin (direct_regs %lu -> %lu, pins %lu -> %lu)", what,
	      (unsigned long)st0.direct_regs, (unsigned long)st1.direct_regs,
	      (unsigned long)st0.pins, (unsigned long)st1.pins);
	CHECK(st1.hits == st0.hits, "%s: served from the cache", what);
	CHECK(st1.entries == st0.entries + 1, "%s: entries %lu -> %lu", what,
	      (unsigned long)st0.entries, (unsigned long)st1.entries);
	CHECK(vm_pinned_kb() >= kb0 + (long)(len / 1024), "%s: VmPin %ld kB, want >= %ld", what,
	      vm_pinned_kb(), kb0 + (long)(len / 1024));
	CHECK((uintptr_t)odpx_mr_addr(mr) <= (uintptr_t)p &&
	      (uintptr_t)odpx_mr_addr(mr) + odpx_mr_length(mr) >= (uintptr_t)p + len,
	      "%s: the registration does not cover the request", what);
	CHECK(data_check(ctx, mr, p, len, seed), "%s: wrong bytes", what);
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	check_back(ctx, &st0, what);
	CHECK(vm_pinned_kb() == kb0, "%s: VmPin %ld kB after dereg, was %ld", what, vm_pinned_kb(), kb0);
}

static void cached_range(struct odpx_ctx *ctx, void *p, size_t len, unsigned seed, const char *what)
{
	struct odpx_stats st0 = stats_of(ctx), st1;
	struct odpx_mr *mr;

	CHECK_RC(odpx_reg(ctx, p, len, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
	CHECK(data_check(ctx, mr, p, len, seed), "%s: wrong bytes", what);
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	CHECK_RC(odpx_reg(ctx, p, len, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
	st1 = stats_of(ctx);
	CHECK(st1.hits == st0.hits + 1 && st1.misses == st0.misses + 1,
	      "%s: not cached (hits %lu -> %lu, misses %lu -> %lu)", what,
	      (unsigned long)st0.hits, (unsigned long)st1.hits,
	      (unsigned long)st0.misses, (unsigned long)st1.misses);
	CHECK(st1.direct_regs == st0.direct_regs, "%s: served direct", what);
	CHECK_RC(odpx_dereg(ctx, mr), 0);
}

int main(void)
{
	struct uffdio_api api = { .api = UFFD_API };
	struct uffdio_register reg;
	struct uffdio_range rng;
	struct odpx_ctx *ctx;
	struct odpx_mr *mr;
	unsigned char *x, *pair, *lazy, *plain;
	int ufd;

	pin0 = vm_pinned_kb();
	CHECK(pin0 >= 0, "no VmPin in /proc/self/status");
	ufd = syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
	if (ufd < 0 && errno == ENOSYS)
		SKIP("userfaultfd: %s", strerror(errno));
	CHECK(ufd >= 0, "userfaultfd(UFFD_USER_MODE_ONLY): %s", strerror(errno));
	CHECK(ioctl(ufd, UFFDIO_API, &api) == 0, "UFFDIO_API: %s", strerror(errno));

	/* x: populated, then watched by the application (MISSING, like postcopy) */
	x = map_anon(NULL, LEN);
	memset(x, 0x11, LEN);
	reg = (struct uffdio_register){ .range = { (uintptr_t)x, LEN }, .mode = UFFDIO_REGISTER_MODE_MISSING };
	CHECK(ioctl(ufd, UFFDIO_REGISTER, &reg) == 0, "UFFDIO_REGISTER: %s", strerror(errno));
	/* pair: an ordinary half, then an application-watched half (two VMAs) */
	pair = map_anon(NULL, 2 * LEN);
	memset(pair, 0x22, 2 * LEN);
	reg = (struct uffdio_register){ .range = { (uintptr_t)pair + LEN, LEN },
					.mode = UFFDIO_REGISTER_MODE_MISSING };
	CHECK(ioctl(ufd, UFFDIO_REGISTER, &reg) == 0, "UFFDIO_REGISTER: %s", strerror(errno));
	/* lazy: watched by the application and never touched */
	lazy = map_anon(NULL, LEN);
	reg = (struct uffdio_register){ .range = { (uintptr_t)lazy, LEN }, .mode = UFFDIO_REGISTER_MODE_MISSING };
	CHECK(ioctl(ufd, UFFDIO_REGISTER, &reg) == 0, "UFFDIO_REGISTER: %s", strerror(errno));
	plain = map_anon(NULL, LEN);

	/* first use of the library: the range belongs to the application */
	ctx = open_pin(0);
	direct_once(ctx, x, LEN, 1, "app-watched range (first use)");
	direct_once(ctx, x, LEN, 2, "app-watched range again (never cached)");
	direct_once(ctx, x + 4096 + 10, 3 * 4096, 3, "app-watched sub-range");
	cached_range(ctx, plain, LEN, 4, "ordinary memory");
	direct_once(ctx, x, LEN, 5, "app-watched range with the monitor running");
	cached_range(ctx, pair, LEN, 6, "ordinary half of the pair");
	direct_once(ctx, pair + LEN - 4096, 2 * 4096, 7, "range running into the app-watched half");
	direct_once(ctx, pair + LEN, LEN, 8, "app-watched half");

	/* two held at once, both direct: distinct registrations */
	{
		struct odpx_mr *m1, *m2;
		long kb = vm_pinned_kb();
		CHECK_RC(odpx_reg(ctx, x, LEN, 0, &m1), 0);
		CHECK_RC(odpx_reg(ctx, x, LEN, 0, &m2), 0);
		CHECK(m1 != m2, "two direct registrations share a handle");
		CHECK(data_check(ctx, m2, x, LEN, 9) && data_check(ctx, m1, x, LEN, 10), "two held: data");
		CHECK_RC(odpx_dereg(ctx, m1), 0);
		CHECK(data_check(ctx, m2, x, LEN, 11), "second after the first's dereg: data");
		CHECK_RC(odpx_dereg(ctx, m2), 0);
		CHECK(vm_pinned_kb() == kb, "two held: VmPin %ld kB after dereg, was %ld", vm_pinned_kb(), kb);
	}

	/* unpopulated: the pin's kernel faults are not delivered: -EFAULT, nothing lost */
	{
		struct odpx_stats s = stats_of(ctx);
		long kb = vm_pinned_kb();
		CHECK_RC(odpx_reg(ctx, lazy, LEN, 0, &mr), -EFAULT);
		check_back(ctx, &s, "after -EFAULT");
		CHECK(vm_pinned_kb() == kb, "after -EFAULT: VmPin %ld kB, was %ld", vm_pinned_kb(), kb);
		CHECK(stats_of(ctx).pin_failures == s.pin_failures + 1, "pin failure not counted");
	}

	/* the application still owns its ranges; released, x is cached */
	rng = (struct uffdio_range){ (uintptr_t)x, LEN };
	CHECK(ioctl(ufd, UFFDIO_UNREGISTER, &rng) == 0, "the application lost its range: UFFDIO_UNREGISTER: %s",
	      strerror(errno));
	cached_range(ctx, x, LEN, 12, "after the application unregistered it");

	CHECK_RC(odpx_close(ctx), 0);
	CHECK(vm_pinned_kb() == pin0, "VmPin %ld kB after close, baseline %ld", vm_pinned_kb(), pin0);
	close(ufd);
	printf("ok\n");
	return 0;
}
