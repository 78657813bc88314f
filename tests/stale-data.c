// SPDX-License-Identifier: MIT
/*
 * stale-data: after every way a process can change what an address maps,
 * a cached registration must never move bytes through the old pages.
 *
 * Each scenario runs in its own child: cache a range (a second odpx_reg is
 * a hit), change the mapping, odpx_reg the same address and move bytes in
 * and out through the pinned pages (READ_FIXED/WRITE_FIXED).  It runs with
 * the monitor in each userfaultfd mode (wp-async, wp, missing), and once as a
 * control with ODPX_OPEN_UNSAFE_NO_MONITOR, which must fail the same check
 * (proving the check can fail) - except MADV_FREE, which leaves pinned pages
 * in place, so no control failure is expected there.
 */
#include <malloc.h>

#include "test.h"

#define LEN (256 * 1024)

enum { OK = 0, STALE = 2, HOLE_TAKEN = 3 };

static void *p;
static size_t len = LEN;

static void *heap_top_aligned(void)
{
	uintptr_t cur = (uintptr_t)sbrk(0);
	uintptr_t al = (cur + 4095) & ~4095UL;
	if (sbrk(al - cur) == (void *)-1)
		FAIL("sbrk: %s", strerror(errno));
	return (void *)al;
}

static void setup(int s)
{
	switch (s) {
	case 4:		/* sbrk */
		p = heap_top_aligned();
		CHECK(sbrk(len) == p, "sbrk grow");
		break;
	case 5:		/* free() of an mmap'd malloc chunk */
		mallopt(M_MMAP_THRESHOLD, 128 * 1024);
		p = malloc(len);
		break;
	case 6:		/* heap top trim */
		mallopt(M_MMAP_THRESHOLD, 64 << 20);
		mallopt(M_TRIM_THRESHOLD, 64 * 1024);
		mallopt(M_TOP_PAD, 0);
		p = malloc(len);
		break;
	default:
		p = map_anon(NULL, len);
	}
	CHECK(p, "setup");
	memset(p, 0x5a, len);
}

/*
 * A new mapping in the hole p left.  Another thread's mmap may land there
 * first: the engine unpins the dead entry at once, and a sanitizer's free()
 * maps memory (seen under ASan, after munmap and after mremap).  Then the
 * scenario runs again, in a new child.
 */
static void map_again(void)
{
	void *q = mmap(p, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);

	if (q == MAP_FAILED && errno == EEXIST)
		_exit(HOLE_TAKEN);
	CHECK(q == p, "new mapping at the old address: %s", strerror(errno));
}

/* Make p map new pages; returns the (same) address now valid. */
static void change(int s)
{
	void *q;
	uintptr_t old = (uintptr_t)p;

	switch (s) {
	case 0:		/* munmap, then mmap at the same address */
		CHECK(munmap(p, len) == 0, "munmap");
		map_again();
		break;
	case 1:		/* MAP_FIXED over */
		map_anon(p, len);
		break;
	case 2:
		CHECK(madvise(p, len, MADV_DONTNEED) == 0, "MADV_DONTNEED");
		break;
	case 3: {	/* mremap move away, new mapping at the old address */
		void *far = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		q = mremap(p, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, far);
		CHECK(q == far, "mremap: %s", strerror(errno));
		map_again();
		break;
	}
	case 4:		/* sbrk shrink then grow */
		CHECK(sbrk(-(intptr_t)len) != (void *)-1, "sbrk shrink");
		CHECK(sbrk(len) == p, "sbrk grow at the same address");
		break;
	case 5:
	case 6:
		free(p);
		p = malloc(len);
		CHECK((uintptr_t)p == old, "malloc returned %p, not the freed %#lx", p, (unsigned long)old);
		break;
	case 7:
		CHECK(madvise(p, len, MADV_FREE) == 0, "MADV_FREE");
		break;
	}
}

static const char *const names[] = {
	"munmap+mmap", "MAP_FIXED", "MADV_DONTNEED", "mremap-move", "sbrk", "free+malloc",
	"heap-trim", "MADV_FREE",
};
#define NSCEN 8

static int scenario(int s, int control)
{
	struct odpx_ctx *ctx = open_pin(control ? ODPX_OPEN_UNSAFE_NO_MONITOR : 0);
	struct odpx_mr *mr, *warm;
	void *w = map_anon(NULL, 4096);
	struct odpx_stats st0, st1;

	/* first-use allocations (monitor, engine) happen before the heap games */
	CHECK_RC(odpx_reg(ctx, w, 4096, 0, &warm), 0);
	CHECK_RC(odpx_dereg(ctx, warm), 0);
	if (!control) {	/* the monitor of this run's mode, not a silent fallback to direct */
		struct odpx_stats st = stats_of(ctx);
		CHECK(st.direct_no_monitor == 0 && st.entries == 1, "%s: no monitor (direct_no_monitor"
		      " %lu, entries %lu)", getenv("ODPX_UFFD_MODE"),
		      (unsigned long)st.direct_no_monitor, (unsigned long)st.entries);
	}
	setup(s);
	CHECK_RC(odpx_reg(ctx, p, len, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
	CHECK(data_check(ctx, mr, p, len, 1), "%s: check before the change failed", names[s]);
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	st0 = stats_of(ctx);
	CHECK_RC(odpx_reg(ctx, p, len, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
	st1 = stats_of(ctx);
	CHECK(st1.hits == st0.hits + 1, "%s: second odpx_reg is not a hit", names[s]);
	CHECK_RC(odpx_dereg(ctx, mr), 0);

	change(s);

	CHECK_RC(odpx_reg(ctx, p, len, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
	int ok = data_check(ctx, mr, p, len, 3);
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	if (!control) {
		st1 = stats_of(ctx);
		CHECK(st1.inval_entries >= 1, "%s: no entry invalidated", names[s]);
	}
	CHECK_RC(odpx_close(ctx), 0);
	return ok ? OK : STALE;
}

struct run { int s, control; };

static int scenario_of(void *arg)
{
	const struct run *r = arg;

	return scenario(r->s, r->control);
}

static int run_child(int s, int control, const char *mode)
{
	struct run r = { s, control };
	int st, tries = 0;

	while ((st = run_forked(mode, scenario_of, &r)) == HOLE_TAKEN && ++tries < 5)
		printf("%-8s %-14s another mapping took the old address: again\n",
		       mode ? mode : "control", names[s]);
	if (st > 128)
		FAIL("%s: child killed by signal %d", names[s], st - 128);
	return st;
}

int main(void)
{
	const char *modes[] = { "wp-async", "wp", "missing" };
	int failed = 0;

	for (unsigned m = 0; m < 3; m++) {
		for (int s = 0; s < NSCEN; s++) {
			if (SANITIZER_MALLOC && (s == 5 || s == 6)) {
				printf("%-8s %-14s n/a: the sanitizer's malloc replaces glibc's heap "
				       "(run in the plain build)\n", modes[m], names[s]);
				continue;
			}
			int r = run_child(s, 0, modes[m]);
			printf("%-8s %-14s %s\n", modes[m], names[s],
			       r == OK ? "ok" : r == STALE ? "STALE DATA" : "error");
			failed |= r != OK;
		}
	}
	for (int s = 0; s < NSCEN; s++) {
		if (SANITIZER_MALLOC && (s == 5 || s == 6))
			continue;
		int r = run_child(s, 1, NULL);
		int want = s == 7 ? OK : STALE;
		printf("control  %-14s %s (want %s)\n", names[s],
		       r == OK ? "ok" : r == STALE ? "stale" : "error", want == OK ? "ok" : "stale");
		failed |= r != want;
	}
	return failed ? 1 : 0;
}
