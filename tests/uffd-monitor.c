// SPDX-License-Identifier: MIT
/*
 * uffd-monitor: the userfaultfd monitor itself, in each uffd mode.
 *
 * After caching a range:
 *   - munmap, MADV_DONTNEED and mremap each count their event (inval_unmap,
 *     inval_remove, inval_remap) and the entry they kill (inval_entries,
 *     inval_bytes); an event over watched memory that holds no entry kills
 *     nothing;
 *   - the dead entry is unpinned by the engine (dead_unpinned, entries and
 *     VmPin back), at once when it was released, at its dereg when held,
 *     with an engine tick of an hour: the wake-up must come from the
 *     monitor's reader (or the dereg), not from a tick;
 *   - the next odpx_reg of the range misses, counts a repin and moves the
 *     bytes of the new pages;
 *   - watched ranges are counted (watch_vmas, watch_regs): one registration
 *     per range not yet watched, none for a range inside a watched one, fewer
 *     once unmapped.  A watch bridges a gap of up to 64 KiB to a watched
 *     neighbour in the same mapping (write-protect modes; missing mode,
 *     sanitizer builds and ODPX_WATCH_WIDEN_KB=0 watch exact ranges), and
 *     nothing else: memory beside an entry, not between two, raises no
 *     event.
 * A munmap in the middle of a cached range kills it and splits its VMA: both
 * parts stay watched (no new registration for them), one more watched VMA.
 * A range in a file-backed MAP_PRIVATE mapping (memfd, and a file on disk)
 * or in a MAP_SHARED anonymous mapping is served direct and counted in
 * direct_shared, never cached.
 * With a VMA budget of 2 (ODPX_WATCH_MAX), a registration spanning two VMAs
 * keeps both watched: reclaiming an idle VMA for a third one must not stop
 * the events of the second, or the entry would go stale.  And with that
 * budget, a pool of 1,024 buffers with gaps in one mapping is all cached, as
 * one watched VMA (see pool_main()).
 * A miss pinning in a VMA whose idle record the budget takes meanwhile does
 * not cache its pin (see reclaim_main()).
 * The reader's stack is a VMA of its own between PROT_NONE pages.
 * Each mode (wp-async, wp, missing) runs in its own process, and once more
 * with VMAs found by parsing /proc/self/maps (vma_force_maps) instead of the
 * PROCMAP_QUERY ioctl.  Sizes stay far
 * below an unprivileged RLIMIT_MEMLOCK: tests/unpriv-monitor.sh runs this
 * program again as nobody.
 */
#include <pthread.h>
#include <semaphore.h>
#include <sys/wait.h>

#include "test.h"
#include "odpx-private.h"	/* the monitor; a backend that holds a pin, for reclaim_main() */

/* a sanitizer's build never bridges a gap (uffd/watch.c, widen()) */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#else
#define SANITIZED 0
#endif

#define LEN (64 * 1024)
#define WAIT_S 5

static struct odpx_ctx *ctx;

#define U(x) ((unsigned long)(x))

static struct odpx_mr *reg(void *p, size_t len)
{
	struct odpx_mr *mr;

	CHECK_RC(odpx_reg(ctx, p, len, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
	return mr;
}

/* Cache [p, p+len) (released); a second odpx_reg must hit. */
static void cache(void *p, size_t len, unsigned seed)
{
	struct odpx_mr *mr = reg(p, len);
	struct odpx_stats st, st1;

	CHECK(data_check(ctx, mr, p, len, seed), "data check of %p", p);
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	st = stats_of(ctx);
	mr = reg(p, len);
	st1 = stats_of(ctx);
	CHECK(st1.hits == st.hits + 1, "%p not cached (direct_budget %lu, direct_racing %lu)", p,
	      U(st1.direct_budget), U(st1.direct_racing));
	CHECK_RC(odpx_dereg(ctx, mr), 0);
}

/*
 * Anonymous private memory between two PROT_NONE guards: a VMA of its own,
 * which no neighbour merges into.
 */
static unsigned char *map_isolated(size_t len)
{
	unsigned char *p = mmap(NULL, len + 2 * 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	CHECK(p != MAP_FAILED, "mmap: %s", strerror(errno));
	CHECK(mprotect(p + 4096, len, PROT_READ | PROT_WRITE) == 0, "mprotect: %s", strerror(errno));
	return p + 4096;
}

/* Dead entries gone for good: unpinned by the engine, gauges and VmPin back. */
static void wait_unpinned(const struct odpx_stats *want, long kb_want, uint64_t dead_want,
			  const char *what)
{
	struct odpx_stats st;

	CHECK(WAIT_FOR((st = stats_of(ctx)).dead_unpinned >= dead_want && st.entries == want->entries,
		       WAIT_S),
	      "%s: dead entries not unpinned by the engine (dead_unpinned %lu, want %lu; entries %lu, want %lu)",
	      what, U(st.dead_unpinned), U(dead_want), U(st.entries), U(want->entries));
	CHECK(st.pinned_bytes == want->pinned_bytes, "%s: pinned_bytes %lu, want %lu", what,
	      U(st.pinned_bytes), U(want->pinned_bytes));
	CHECK(WAIT_FOR(vm_pinned_kb() == kb_want, WAIT_S), "%s: VmPin %ld kB, want %ld", what,
	      vm_pinned_kb(), kb_want);
}

/* The next odpx_reg of p misses, counts a repin, and moves the new pages' bytes. */
static void reg_again(void *p, size_t len, unsigned seed, const char *what)
{
	struct odpx_stats st0 = stats_of(ctx), st1;
	struct odpx_mr *mr = reg(p, len);

	st1 = stats_of(ctx);
	CHECK(st1.misses == st0.misses + 1, "%s: the dead registration was returned", what);
	CHECK(st1.repins == st0.repins + 1, "%s: repins %lu -> %lu, want +1", what, U(st0.repins),
	      U(st1.repins));
	CHECK(data_check(ctx, mr, p, len, seed), "%s: wrong bytes", what);
	CHECK_RC(odpx_dereg(ctx, mr), 0);
}

/* Wait for the entries killed by a test's own cleanup to be reaped. */
static void settle(uint64_t entries, const char *what)
{
	CHECK(WAIT_FOR(stats_of(ctx).entries == entries, WAIT_S), "%s: entries %lu, want %lu", what,
	      U(stats_of(ctx).entries), U(entries));
}

enum ev { EV_UNMAP, EV_REMOVE, EV_REMAP };

/*
 * Missing mode watches exact ranges, and so does every mode in a sanitizer's
 * build or with ODPX_WATCH_WIDEN_KB=0; the write-protect modes widen them.
 */
static int exact_watches(void)
{
	const char *m = getenv("ODPX_UFFD_MODE"), *w = getenv("ODPX_WATCH_WIDEN_KB");

	return SANITIZED || (m && !strcmp(m, "missing")) || (w && !strcmp(w, "0"));
}

static void expect_event(const struct odpx_stats *st0, enum ev ev, uint64_t entries, uint64_t bytes,
			 const char *what)
{
	struct odpx_stats st;
	uint64_t want_unmap = st0->inval_unmap + (ev == EV_UNMAP), want_remove = st0->inval_remove + (ev == EV_REMOVE),
		 want_remap = st0->inval_remap + (ev == EV_REMAP);

	/* the munmap caller is released once the event is read; the marks follow at once */
	CHECK(WAIT_FOR((st = stats_of(ctx)).inval_unmap >= want_unmap && st.inval_remove >= want_remove &&
		       st.inval_remap >= want_remap && st.inval_entries >= st0->inval_entries + entries, WAIT_S),
	      "%s: event not counted (unmap %lu->%lu, remove %lu->%lu, remap %lu->%lu, inval_entries %lu->%lu)",
	      what, U(st0->inval_unmap), U(st.inval_unmap), U(st0->inval_remove), U(st.inval_remove),
	      U(st0->inval_remap), U(st.inval_remap), U(st0->inval_entries), U(st.inval_entries));
	CHECK(st.inval_remove == want_remove && st.inval_remap == want_remap,
	      "%s: wrong events (remove %lu->%lu, remap %lu->%lu)", what, U(st0->inval_remove),
	      U(st.inval_remove), U(st0->inval_remap), U(st.inval_remap));
	if (ev != EV_REMAP)	/* a move also unmaps the old range */
		CHECK(st.inval_unmap == want_unmap, "%s: inval_unmap %lu -> %lu", what, U(st0->inval_unmap),
		      U(st.inval_unmap));
	CHECK(st.inval_entries == st0->inval_entries + entries, "%s: inval_entries %lu -> %lu, want +%lu",
	      what, U(st0->inval_entries), U(st.inval_entries), U(entries));
	CHECK(st.inval_bytes == st0->inval_bytes + bytes, "%s: inval_bytes %lu -> %lu, want +%lu", what,
	      U(st0->inval_bytes), U(st.inval_bytes), U(bytes));
}

static void events(void)
{
	const int exact = exact_watches();
	struct odpx_stats st0, st;
	long kb0;
	unsigned char *a, *b, *c, *d;
	void *far, *q;

	/* munmap: two entries in one VMA */
	a = map_isolated(2 * LEN);
	st0 = stats_of(ctx);
	kb0 = vm_pinned_kb();
	cache(a, LEN, 1);
	st = stats_of(ctx);
	CHECK(st.watch_vmas == st0.watch_vmas + 1 && st.watch_regs == st0.watch_regs + 1,
	      "watch: vmas %lu -> %lu, regs %lu -> %lu, want +1 each", U(st0.watch_vmas), U(st.watch_vmas),
	      U(st0.watch_regs), U(st.watch_regs));
	/*
	 * Same VMA, 4 KiB past the first range: already watched (the first
	 * watch took the whole VMA), unless watches are exact
	 * (exact_watches()): then a registration and a record of its own.
	 */
	cache(a + LEN + 4096, 4096, 2);
	CHECK(stats_of(ctx).watch_regs == st.watch_regs + exact && stats_of(ctx).watch_vmas == st.watch_vmas + exact &&
	      stats_of(ctx).entries == st0.entries + 2,
	      "a second range in the VMA: watch_regs %lu -> %lu (want +%d), watch_vmas %lu -> %lu (want +%d), "
	      "entries %lu -> %lu", U(st.watch_regs), U(stats_of(ctx).watch_regs), exact, U(st.watch_vmas),
	      U(stats_of(ctx).watch_vmas), exact, U(st0.entries), U(stats_of(ctx).entries));
	st = stats_of(ctx);
	cache(a + LEN, 4096, 2);	/* the bridge itself: watched, unless exact */
	CHECK(stats_of(ctx).watch_regs == st.watch_regs + exact, "the bridged gap: watch_regs %lu -> %lu (want +%d)",
	      U(st.watch_regs), U(stats_of(ctx).watch_regs), exact);
	st = stats_of(ctx);
	cache(a + 4096, 4096, 2);	/* inside a watched range: no registration */
	CHECK(stats_of(ctx).watch_regs == st.watch_regs, "a range inside a watched one was registered");
	st = stats_of(ctx);
	CHECK(munmap(a, 2 * LEN) == 0, "munmap");
	expect_event(&st, EV_UNMAP, 3, LEN + 2 * 4096, "munmap");
	wait_unpinned(&st0, kb0, st.dead_unpinned + 3, "munmap");
	CHECK(WAIT_FOR(stats_of(ctx).watch_vmas == st0.watch_vmas, WAIT_S), "watch_vmas %lu after munmap, want %lu",
	      U(stats_of(ctx).watch_vmas), U(st0.watch_vmas));
	if (mmap(a, 2 * LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
		 -1, 0) == a) {
		reg_again(a, LEN, 3, "after munmap");
		CHECK(munmap(a, 2 * LEN) == 0, "munmap");
	} else {
		/* only a sanitizer's runtime maps behind our back between the two */
		CHECK(SANITIZER_MALLOC, "mmap at the old address: %s", strerror(errno));
		printf("re-register after munmap: n/a, the sanitizer runtime took the hole\n");
	}
	settle(st0.entries, "munmap");

	/* MADV_DONTNEED of one page kills the whole entry; the VMA stays watched */
	b = map_isolated(2 * LEN);
	st = stats_of(ctx);
	kb0 = vm_pinned_kb();
	cache(b, LEN, 4);
	st0 = stats_of(ctx);
	CHECK(madvise(b + LEN - 4096, 4096, MADV_DONTNEED) == 0, "MADV_DONTNEED");
	expect_event(&st0, EV_REMOVE, 1, LEN, "MADV_DONTNEED");
	wait_unpinned(&st, kb0, st0.dead_unpinned + 1, "MADV_DONTNEED");
	CHECK(stats_of(ctx).watch_vmas == st0.watch_vmas, "MADV_DONTNEED unwatched the VMA");
	reg_again(b, LEN, 5, "after MADV_DONTNEED");
	/*
	 * Beside the entry: exact watches do not watch it, no event at all;
	 * else the whole VMA is watched, an event that kills nothing.
	 */
	st0 = stats_of(ctx);
	CHECK(madvise(b + LEN, LEN, MADV_DONTNEED) == 0, "MADV_DONTNEED");
	WAIT_FOR(stats_of(ctx).inval_remove == st0.inval_remove + !exact, WAIT_S);
	st = stats_of(ctx);
	CHECK(st.inval_remove == st0.inval_remove + !exact && st.inval_entries == st0.inval_entries,
	      "MADV_DONTNEED beside the entry: remove %lu -> %lu (want +%d), inval_entries %lu -> %lu",
	      U(st0.inval_remove), U(st.inval_remove), !exact, U(st0.inval_entries), U(st.inval_entries));
	st = stats_of(ctx);
	struct odpx_mr *mr = reg(b, LEN);
	CHECK(stats_of(ctx).hits == st.hits + 1, "the entry beside the MADV_DONTNEED was lost");
	CHECK_RC(odpx_dereg(ctx, mr), 0);

	/* mremap: the moved range's entry dies; the new address is a new VMA */
	c = map_isolated(LEN);
	st = stats_of(ctx);
	kb0 = vm_pinned_kb();
	cache(c, LEN, 6);
	st0 = stats_of(ctx);
	far = mmap(NULL, LEN, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(far != MAP_FAILED, "mmap");
	q = mremap(c, LEN, LEN, MREMAP_MAYMOVE | MREMAP_FIXED, far);
	CHECK(q == far, "mremap: %s", strerror(errno));
	expect_event(&st0, EV_REMAP, 1, LEN, "mremap");
	wait_unpinned(&st, kb0, st0.dead_unpinned + 1, "mremap");
	st = stats_of(ctx);
	mr = reg(q, LEN);
	CHECK(stats_of(ctx).misses == st.misses + 1, "the moved range hit the old entry");
	CHECK(data_check(ctx, mr, q, LEN, 7), "after mremap: wrong bytes");
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	CHECK(munmap(q, LEN) == 0, "munmap");
	settle(st.entries, "mremap");

	/* held while invalidated: pinned until its dereg, then unpinned by the engine */
	d = map_isolated(LEN);
	kb0 = vm_pinned_kb();
	st0 = stats_of(ctx);
	mr = reg(d, LEN);
	CHECK(data_check(ctx, mr, d, LEN, 8), "held: data");
	st = stats_of(ctx);
	CHECK(munmap(d, LEN) == 0, "munmap");
	expect_event(&st, EV_UNMAP, 1, LEN, "munmap of a held range");
	st = stats_of(ctx);
	CHECK(st.entries == st0.entries + 1 && vm_pinned_kb() == kb0 + LEN / 1024,
	      "a held entry was unpinned under its holder (entries %lu, VmPin %ld kB)", U(st.entries),
	      vm_pinned_kb());
	CHECK(st.dead_unpinned == st0.dead_unpinned, "a held entry counted as unpinned");
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	wait_unpinned(&st0, kb0, st0.dead_unpinned + 1, "held, then released");
	CHECK(mmap(d, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0) == d,
	      "mmap at the old address");
	reg_again(d, LEN, 9, "after munmap of a held range");
	CHECK(munmap(d, LEN) == 0, "munmap");
	munmap(b, 2 * LEN);
	munmap(c - 4096, 4096);
	munmap(c + LEN, 4096);
	settle(0, "events: cleanup");

	/* munmap of a page in the middle: the entry dies, the VMA splits in two */
	unsigned char *e = map_isolated(16 * 4096);
	kb0 = vm_pinned_kb();
	st = stats_of(ctx);
	cache(e, 16 * 4096, 10);
	st0 = stats_of(ctx);
	CHECK(munmap(e + 4 * 4096, 4096) == 0, "munmap");
	expect_event(&st0, EV_UNMAP, 1, 16 * 4096, "munmap in the middle");
	wait_unpinned(&st, kb0, st0.dead_unpinned + 1, "munmap in the middle");
	CHECK(stats_of(ctx).watch_vmas == st0.watch_vmas + 1, "split VMA: watch_vmas %lu -> %lu, want +1",
	      U(st0.watch_vmas), U(stats_of(ctx).watch_vmas));
	reg_again(e, 4 * 4096, 11, "left of the hole");
	reg_again(e + 5 * 4096, 11 * 4096, 12, "right of the hole");
	CHECK(stats_of(ctx).watch_regs == st0.watch_regs, "the parts of a split VMA were registered again");
	munmap(e - 4096, 5 * 4096);
	munmap(e + 5 * 4096, 12 * 4096);
	settle(0, "munmap in the middle: cleanup");
}

/*
 * The reader's stack is a VMA of its own between two PROT_NONE pages: no
 * neighbour merges into it, so no watch (widened or not) can cover it.
 */
static void reader_stack_isolated(void)
{
	struct monitor_usage u;
	monitor_usage(&u);
	uintptr_t lo = (uintptr_t)u.reader_stack, hi = lo + u.reader_stack_len;
	struct vma_info v, below, above;

	CHECK(u.reader_stack && u.reader_stack_len > 2 * 4096, "no reader stack of our own");
	CHECK(vma_query(lo + 4096, &v) == 0 && vma_query(lo, &below) == 0 &&
	      vma_query(hi - 4096, &above) == 0, "vma_query of the reader's stack");
	CHECK(v.start == lo + 4096 && v.end == hi - 4096 && v.readable && v.writable,
	      "reader stack VMA %#lx-%#lx, want %#lx-%#lx", U(v.start), U(v.end), U(lo + 4096),
	      U(hi - 4096));
	CHECK(below.end == lo + 4096 && !below.readable && above.start == hi - 4096 && !above.readable,
	      "the reader's stack is not between PROT_NONE pages");
}

/* Shared or file-backed: direct every time, counted in direct_shared. */
static void direct_shared(void *p, const char *what)
{
	for (int i = 0; i < 2; i++) {
		struct odpx_stats st0 = stats_of(ctx), st1;
		long kb0 = vm_pinned_kb();
		struct odpx_mr *mr = reg(p, LEN);

		st1 = stats_of(ctx);
		CHECK(st1.direct_shared == st0.direct_shared + 1 && st1.direct_regs == st0.direct_regs + 1,
		      "%s: direct_shared %lu -> %lu, direct_regs %lu -> %lu, want +1 each", what,
		      U(st0.direct_shared), U(st1.direct_shared), U(st0.direct_regs), U(st1.direct_regs));
		CHECK(st1.hits == st0.hits && st1.watch_regs == st0.watch_regs,
		      "%s: cached or watched (hits %lu -> %lu, watch_regs %lu -> %lu)", what, U(st0.hits),
		      U(st1.hits), U(st0.watch_regs), U(st1.watch_regs));
		CHECK(data_check(ctx, mr, p, LEN, 20 + i), "%s: wrong bytes", what);
		CHECK_RC(odpx_dereg(ctx, mr), 0);
		st1 = stats_of(ctx);
		CHECK(st1.entries == st0.entries && st1.pinned_bytes == st0.pinned_bytes && vm_pinned_kb() == kb0,
		      "%s: not unpinned by its dereg (entries %lu -> %lu, pinned_bytes %lu -> %lu, VmPin %ld -> %ld kB)",
		      what, U(st0.entries), U(st1.entries), U(st0.pinned_bytes), U(st1.pinned_bytes), kb0,
		      vm_pinned_kb());
	}
}

static void shared(void)
{
	int mfd = memfd_create("odpx-priv", MFD_CLOEXEC);
	int tfd = open("/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	void *shm, *mpriv, *fpriv;

	CHECK(mfd >= 0 && ftruncate(mfd, LEN) == 0, "memfd: %s", strerror(errno));
	CHECK(tfd >= 0, "O_TMPFILE in /tmp: %s", strerror(errno));
	CHECK(ftruncate(tfd, LEN) == 0, "ftruncate");
	shm = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	mpriv = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE, mfd, 0);
	fpriv = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE, tfd, 0);
	CHECK(shm != MAP_FAILED && mpriv != MAP_FAILED && fpriv != MAP_FAILED, "mmap: %s", strerror(errno));
	direct_shared(shm, "MAP_SHARED anonymous");
	direct_shared(mpriv, "MAP_PRIVATE memfd");
	direct_shared(fpriv, "MAP_PRIVATE file in /tmp");
	munmap(shm, LEN);
	munmap(mpriv, LEN);
	munmap(fpriv, LEN);
	close(mfd);
	close(tfd);
}

static int mode_main(void)
{
	long kb0 = vm_pinned_kb();

	CHECK(kb0 >= 0, "no VmPin in /proc/self/status");
	/*
	 * An engine tick far beyond WAIT_S: a dead entry is unpinned in time
	 * only if the monitor (or the last dereg) woke the engine for it.
	 */
	struct odpx_attr a = { .comp_mask = ODPX_ATTR_TICK, .tick_ms = 3600 * 1000 };
	CHECK_RC(odpx_open_uring(&a, &ctx), 0);
	events();
	reader_stack_isolated();
	shared();
	struct odpx_stats st = stats_of(ctx);
	CHECK(st.direct_no_monitor == 0 && st.direct_unwatchable == 0 && st.direct_budget == 0,
	      "fallbacks: no_monitor %lu, unwatchable %lu, budget %lu", U(st.direct_no_monitor),
	      U(st.direct_unwatchable), U(st.direct_budget));
	CHECK_RC(odpx_close(ctx), 0);
	CHECK(vm_pinned_kb() == kb0, "VmPin %ld kB after close, baseline %ld", vm_pinned_kb(), kb0);
	return 0;
}

/*
 * ODPX_WATCH_MAX=2.  An entry spans VMAs v1|v2 (both watched, the entry
 * starts in v1).  A third VMA may take an idle watch, never v2: v2 is then
 * replaced by new pages and the entry must not be returned over them.
 */
static int budget_main(void)
{
	unsigned char *v = map_isolated(2 * LEN), *v3 = map_isolated(LEN), *r = v + LEN - 8192;
	struct odpx_stats st0, st;
	struct odpx_mr *mr;

	/* two VMAs side by side: the second differs in a flag only */
	CHECK(madvise(v + LEN, LEN, MADV_NOHUGEPAGE) == 0, "MADV_NOHUGEPAGE: %s", strerror(errno));
	ctx = open_pin(0);
	cache(r, 4 * 4096, 30);
	st = stats_of(ctx);
	/* two registrations, one record: touching watched ranges share it */
	CHECK(st.watch_vmas == 1 && st.watch_regs == 2, "an entry over two VMAs: watch_vmas %lu "
	      "(want 1), watch_regs %lu (want 2)", U(st.watch_vmas), U(st.watch_regs));
	mr = reg(v3, LEN);	/* both watched VMAs hold the entry: v3 must go direct */
	CHECK(data_check(ctx, mr, v3, LEN, 31), "v3: data");
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	st0 = stats_of(ctx);
	CHECK(munmap(v + LEN, LEN) == 0, "munmap");
	if (mmap(v + LEN, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
		 -1, 0) != v + LEN) {
		/* only a sanitizer's runtime maps behind our back between the two */
		CHECK(SANITIZER_MALLOC, "mmap at the old address: %s", strerror(errno));
		printf("budget, v2 mapped again: n/a, the sanitizer runtime took the hole\n");
		CHECK_RC(odpx_close(ctx), 0);
		return 0;
	}
	st0 = stats_of(ctx);
	mr = reg(r, 4 * 4096);
	st = stats_of(ctx);
	CHECK(st.misses == st0.misses + 1,
	      "the entry over a VMA whose watch was reclaimed survived its munmap (direct_budget %lu, watch_regs %lu)",
	      U(st.direct_budget), U(st.watch_regs));
	CHECK(data_check(ctx, mr, r, 4 * 4096, 32), "stale data: the second VMA was unwatched under the entry");
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	CHECK_RC(odpx_close(ctx), 0);
	return 0;
}

/*
 * ODPX_WATCH_MAX=2.  A pool of POOL_N 4 KiB buffers, one every three pages
 * of one mapping: the first watch takes the whole mapping, one VMA (with
 * widening only, each watch would bridge the 8 KiB gap to its neighbour's),
 * and every buffer is cached within a budget of two.  (Exact watches, in missing mode
 * and sanitizer builds: two buffers cached, the rest direct for the budget.)  A munmap of
 * a gap raises an event that kills nothing; one of a buffer kills it alone,
 * and its next odpx_reg moves the new pages' bytes.
 */
#define POOL_N 1024
#define POOL_STRIDE (3 * 4096)

static int pool_main(void)
{
	const size_t len = POOL_N * POOL_STRIDE;
	unsigned char *p = map_isolated(len);
	const int exact = exact_watches();
	struct odpx_stats st0, st;
	struct vma_info v;

	ctx = open_pin(0);
	st0 = stats_of(ctx);
	for (unsigned i = 0; i < POOL_N; i++)
		CHECK_RC(odpx_dereg(ctx, reg(p + i * POOL_STRIDE, 4096)), 0);
	st = stats_of(ctx);
	CHECK(st.direct_budget - st0.direct_budget == (exact ? POOL_N - 2 : 0) &&
	      st.entries - st0.entries == (exact ? 2 : POOL_N),
	      "pool: direct_budget +%lu, entries +%lu (watch_vmas %lu)", U(st.direct_budget - st0.direct_budget),
	      U(st.entries - st0.entries), U(st.watch_vmas));
	CHECK(vma_query((uintptr_t)p, &v) == 0, "vma_query");
	if (exact)
		goto out;
	/* one VMA, the mapping's own, watched whole */
	CHECK(st.watch_vmas == 1 && v.start == (uintptr_t)p && v.end == (uintptr_t)p + len,
	      "pool: watch_vmas %lu (want 1), its VMA %#lx-%#lx (want %p+%#zx)", U(st.watch_vmas),
	      U(v.start), U(v.end), (void *)p, len);
	cache(p + 7 * POOL_STRIDE, 4096, 40);	/* a hit, and the bytes move */

	st0 = stats_of(ctx);
	CHECK(munmap(p + 5 * POOL_STRIDE + 4096, 4096) == 0, "munmap of a gap");
	expect_event(&st0, EV_UNMAP, 0, 0, "munmap of a gap in the pool");
	st0 = stats_of(ctx);
	CHECK(munmap(p + 9 * POOL_STRIDE, 4096) == 0, "munmap of a buffer");
	expect_event(&st0, EV_UNMAP, 1, 4096, "munmap of a buffer in the pool");
	CHECK(mmap(p + 9 * POOL_STRIDE, 4096, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0) == p + 9 * POOL_STRIDE,
	      "mmap at the old address");
	reg_again(p + 9 * POOL_STRIDE, 4096, 41, "a pool buffer after its munmap");
	st0 = stats_of(ctx);
	for (unsigned i = 0; i < POOL_N; i++)
		if (i != 9)
			CHECK_RC(odpx_dereg(ctx, reg(p + i * POOL_STRIDE, 4096)), 0);
	st = stats_of(ctx);
	CHECK(st.hits - st0.hits == POOL_N - 1, "pool after the munmaps: %lu hits of %u",
	      U(st.hits - st0.hits), POOL_N - 1);
out:
	CHECK_RC(odpx_close(ctx), 0);
	munmap(p - 4096, len + 2 * 4096);
	return 0;
}

/*
 * ODPX_WATCH_MAX=2.  A miss in v1 is held inside its pin (a backend of the
 * test's own) while a watch of v3 takes v1's idle record for the budget:
 * v1 is no longer watched, and its munmap and a new mapping there raise no
 * event.  The miss must not cache that pin: it finds v1 unwatched at its
 * insert and starts over, so the entry it caches dies at v1's next munmap.
 */
static sem_t pin_entered, pin_go;
static atomic_int pins_to_hold;

/* after null_ops' pin, which pins nothing */
static void hold_pin(uint32_t slot, uintptr_t start, size_t len)
{
	(void)slot, (void)start, (void)len;
	if (atomic_fetch_sub(&pins_to_hold, 1) > 0) {
		sem_post(&pin_entered);
		sem_wait(&pin_go);
	}
}

static void *miss_main(void *p)
{
	CHECK_RC(odpx_dereg(ctx, reg(p, LEN)), 0);
	return NULL;
}

static int reclaim_main(void)
{
	unsigned char *v1 = map_isolated(LEN), *v2 = map_isolated(LEN), *v3 = map_isolated(LEN);
	struct odpx_stats st0, st;
	struct odpx_mr *mr;
	pthread_t t;

	CHECK(sem_init(&pin_entered, 0, 0) == 0 && sem_init(&pin_go, 0, 0) == 0, "sem_init");
	CHECK_RC(odpx_open_backend(odpx_priv_hooked(&null_ops, &(struct odpx_priv_hooks){
		.pin = hold_pin }), NULL, &ctx), 0);
	CHECK_RC(odpx_dereg(ctx, reg(v2, LEN)), 0);	/* v2's record holds an entry: never idle */
	CHECK(monitor_watch((uintptr_t)v1, (uintptr_t)v1 + LEN) == 0, "watch v1");
	struct monitor_usage u;
	monitor_usage(&u);
	CHECK(u.watched == 2, "%u watched ranges, want 2", u.watched);

	atomic_store(&pins_to_hold, 1);
	st0 = stats_of(ctx);
	CHECK(pthread_create(&t, NULL, miss_main, v1) == 0, "pthread_create");
	sem_wait(&pin_entered);	/* the miss found v1 watched and is pinning */
	CHECK(monitor_watch((uintptr_t)v3, (uintptr_t)v3 + LEN) == 0, "watch v3");
	monitor_lock();
	bool v1_watched = monitor_covers((uintptr_t)v1, (uintptr_t)v1 + LEN);
	monitor_unlock();
	CHECK(!v1_watched, "v3's watch did not take v1's idle record");
	CHECK(munmap(v1, LEN) == 0 && mmap(v1, LEN, PROT_READ | PROT_WRITE,
					   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0) == v1,
	      "munmap and mmap of v1");
	sem_post(&pin_go);
	pthread_join(t, NULL);
	st = stats_of(ctx);
	CHECK(st.miss_retries == st0.miss_retries + 1, "the miss kept its pin over unwatched v1 "
	      "(miss_retries %lu -> %lu)", U(st0.miss_retries), U(st.miss_retries));

	st0 = stats_of(ctx);
	CHECK(munmap(v1, LEN) == 0, "munmap of v1");
	expect_event(&st0, EV_UNMAP, 1, LEN, "munmap of v1 after the miss");
	if (mmap(v1, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
		 -1, 0) != v1) {
		/* only a sanitizer's runtime maps behind our back between the two */
		CHECK(SANITIZER_MALLOC, "mmap at v1: %s", strerror(errno));
		printf("reclaim, v1 mapped again: n/a, the sanitizer runtime took the hole\n");
		CHECK_RC(odpx_close(ctx), 0);
		return 0;
	}
	st0 = stats_of(ctx);
	mr = reg(v1, LEN);
	CHECK(stats_of(ctx).misses == st0.misses + 1, "v1's new pages hit the old entry");
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	CHECK_RC(odpx_close(ctx), 0);
	return 0;
}

/*
 * No watch record counts fewer than the live entries over it, or one that
 * looks idle under a live entry is unregistered for the budget and that
 * entry gets no more events.
 * A count may be over after a split or a merge (approx), until the budget
 * counts that record again; @exact: no record is over now.
 */
static void refs_check(const char *when, bool exact)
{
	char msg[160];

	monitor_lock();
	int r = monitor_check_refs(exact, msg, sizeof(msg));
	monitor_unlock();
	if (r)
		FAIL("%s: %s", when, msg);
}

/*
 * ODPX_WATCH_MAX=2.  The records' counts are never short through a split
 * that finds no free slot (the right part is dropped from the table with an
 * entry alive in it), watches merging that part back, a reclaim for the
 * budget (which counts them exactly), the close of one of two contexts, and
 * the entries of a context opened ODPX_OPEN_UNSAFE_NO_MONITOR (never
 * counted: its eviction once took one from a record that had not counted
 * it).  A count short by one let the reclaim unregister the range under a
 * live entry (p0's), whose munmap then raised no event: its old pages came
 * back.  Here nothing is idle, so the third range goes direct, and p0's data
 * moves through its new pages at the end.  (No widening needed: the first
 * registration watches p0..p3 whole.)
 */
/* Every record holds a live entry: a third range goes direct, and the reclaim counted them all. */
static void budget_refused(void *m3, const char *when)
{
	struct odpx_stats st0 = stats_of(ctx), st;
	struct odpx_mr *mr = reg(m3, 4096);

	CHECK_RC(odpx_dereg(ctx, mr), 0);
	st = stats_of(ctx);
	CHECK(st.direct_budget == st0.direct_budget + 1 && st.watch_vmas == 2,
	      "%s: a third range with both records in use: direct_budget +%lu (want 1), watch_vmas"
	      " %lu (want 2: a record under a live entry was reclaimed)", when,
	      U(st.direct_budget - st0.direct_budget), U(st.watch_vmas));
	refs_check(when, true);
}

static int refs_main(void)
{
	unsigned char *base = map_isolated(64 * 4096);
	unsigned char *p0 = base + 8 * 4096, *p1 = p0 + 4096, *p2 = p1 + 4096;
	unsigned char *m2 = base + 40 * 4096, *m3 = base + 56 * 4096;
	unsigned char *x = map_anon(NULL, 2 * 4096);
	struct odpx_attr unmon = { .comp_mask = ODPX_ATTR_FLAGS | ODPX_ATTR_LIMITS,
				   .flags = ODPX_OPEN_UNSAFE_NO_MONITOR,
				   .limits = { .max_entries = 2 } };
	struct odpx_ctx *other, *um;
	struct odpx_mr *mr;

	CHECK(mprotect(base, 64 * 4096, PROT_NONE) == 0, "mprotect");
	map_anon(p0, 3 * 4096);
	map_anon(m2, 4096);
	map_anon(m3, 4096);
	ctx = open_pin(0);
	cache(p0, 3 * 4096, 40);	/* one record, p0..p3 */
	CHECK(madvise(p0, 3 * 4096, MADV_DONTNEED) == 0, "madvise");
	cache(p0, 4096, 41);
	cache(p2, 4096, 42);
	cache(m2, 4096, 43);	/* a second record: the budget is spent */
	refs_check("three entries, two records", true);
	/* an unmonitored context caches over the first record: never counted */
	CHECK_RC(odpx_open_uring(&unmon, &um), 0);
	CHECK_RC(odpx_reg(um, p0, 4096, 0, &mr), 0);
	CHECK_RC(odpx_dereg(um, mr), 0);
	refs_check("an unmonitored context's entry", true);
	CHECK(munmap(p1, 4096) == 0, "munmap");	/* a split with no free slot */
	refs_check("the split without a slot", false);
	budget_refused(m3, "after the split");
	/* the unmonitored context evicts its entry over the first record */
	CHECK_RC(odpx_reg(um, x, 4096, 0, &mr), 0);
	CHECK_RC(odpx_dereg(um, mr), 0);
	CHECK_RC(odpx_reg(um, x + 4096, 4096, 0, &mr), 0);
	CHECK_RC(odpx_dereg(um, mr), 0);
	CHECK(stats_of(um).evictions >= 1, "the unmonitored context evicted nothing");
	refs_check("an unmonitored context's eviction", true);
	CHECK_RC(odpx_close(um), 0);
	/* p2's entry is in no record now: the merge must count it */
	map_anon(p1, 4096);
	cache(p1, 2 * 4096, 44);	/* watched again (merged), p2's entry superseded */
	refs_check("p1..p3 watched again", false);
	CHECK(madvise(p1, 2 * 4096, MADV_DONTNEED) == 0, "madvise");
	refs_check("the DONTNEED", false);
	budget_refused(m3, "after the merge");

	/* a second context's entries stop counting when it closes */
	CHECK_RC(odpx_open_uring(NULL, &other), 0);
	CHECK_RC(odpx_reg(other, m2, 4096, 0, &mr), 0);
	CHECK_RC(odpx_dereg(other, mr), 0);
	refs_check("a second context's entry", true);
	CHECK_RC(odpx_close(other), 0);
	refs_check("the second context closed", false);

	CHECK(munmap(p0, 4096) == 0, "munmap p0");
	map_anon(p0, 4096);
	mr = reg(p0, 4096);
	CHECK(data_check(ctx, mr, p0, 4096, 45), "stale data: p0's entry outlived its munmap");
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	refs_check("the end", false);
	CHECK_RC(odpx_close(ctx), 0);
	munmap(x, 2 * 4096);
	return 0;
}

static int maps_main(void)
{
	vma_force_maps = 1;
	return mode_main();
}

static int call(void *arg)
{
	int (*fn)(void) = (int (*)(void))arg;

	if (fn == budget_main || fn == pool_main || fn == reclaim_main || fn == refs_main)
		setenv("ODPX_WATCH_MAX", "2", 1);
	return fn();
}

static int run(const char *mode, int (*fn)(void), const char *what)
{
	int st = run_forked(mode, call, (void *)fn);

	printf("%-8s %-8s %s\n", mode, what, st == 0 ? "ok" : st > 128 ? "killed" : "FAILED");
	return st != 0;
}

int main(void)
{
	const char *modes[] = { "wp-async", "wp", "missing" };
	int failed = 0;

	/*
	 * Single-threaded event accounting: no madvise races a registration
	 * here, so the DONTNEED quarantine (tests/remove-quarantine.c) is off
	 * and a registration right after a REMOVE is cached as usual.
	 */
	setenv("ODPX_REMOVE_QUARANTINE_MS", "0", 1);
	printf("uid %d\n", (int)getuid());
	for (unsigned m = 0; m < 3; m++)
		failed |= run(modes[m], mode_main, "events");
	failed |= run("wp-async", maps_main, "maps");
	for (unsigned m = 0; m < 3; m++)
		failed |= run(modes[m], budget_main, "budget");
	for (unsigned m = 0; m < 3; m++)
		failed |= run(modes[m], pool_main, "pool");
	failed |= run("wp-async", reclaim_main, "reclaim");
	for (unsigned m = 0; m < 3; m++)
		failed |= run(modes[m], refs_main, "refs");
	setenv("ODPX_WATCH_WIDEN_KB", "0", 1);	/* widening turned off: exact ranges */
	failed |= run("wp-async", mode_main, "ev-exact");
	failed |= run("wp-async", pool_main, "pool-exact");
	unsetenv("ODPX_WATCH_WIDEN_KB");
	return failed;
}
