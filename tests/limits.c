// SPDX-License-Identifier: MIT
/*
 * limits: the pin cache stays within ODPX_ATTR_LIMITS and evicts in LRU order.
 *
 * - entries, pinned_bytes (the gauges) and VmPin never exceed max_entries and
 *   max_pinned_bytes: checked after every operation;
 * - unused entries are evicted least recently released first, exactly at the
 *   resolution of misses (the comment at the top of lib/reserve.c): a simple
 *   order, then one where entries used since they were linked are re-linked
 *   by the evictor in between, one released while the evictor waits for
 *   the invalidation lock, then a model of exact LRU that predicts every hit and miss of
 *   long random runs with held references, one of them across the wrap of
 *   the cache's 32-bit clock and one across a jump of 2^31 misses;
 * - with every entry in use, odpx_reg returns -ENOMEM and loses nothing: every
 *   held registration still hits and moves the right bytes, and one release
 *   makes room again; a request that fits the limits on its own is not
 *   refused because merging it with a held entry would not, nor does it
 *   evict more than it needs for the merge;
 * - a request longer than max_entry_bytes is -E2BIG;
 * - direct registrations (shared memory in a pin-mode context, every one in
 *   direct mode) count against the same limits and evict unused entries;
 * - max_unused_bytes is enforced by the engine tick (odpx_open_uring(3)); a miss does not
 *   walk the LRU to enforce it (that would make every miss O(entries));
 * - an eviction and the miss that caused it share one slot update (the
 *   io_uring backend's pin replaces what the slot holds) when both ranges
 *   fit max_pinned_bytes, else the victim is unpinned first (VmPin never
 *   holds both over the limit): VmPin stays exact and the new range moves
 *   the right bytes; a pin that fails leaves the evicted range unpinned
 *   too; and when pinning both at once is over RLIMIT_MEMLOCK (no
 *   CAP_IPC_LOCK), the miss unpins first and succeeds;
 * - unused_bytes is exact once references settle, after threads hit and
 *   release the same entries and after entries die, held or not (it is
 *   counted per thread on the hit path, lib/stats.c, not by a walk);
 * - an entry that died held is waited for from its last release, before its
 *   holder has pushed it for the engine to unpin, also by a miss after an
 *   earlier scan of the LRU met it dead (held, or by another miss);
 * - a miss's victims count against max_pinned_bytes until they are unpinned:
 *   another thread's miss does not pin over the limit meanwhile; and no
 *   longer: one that fits once they are unpinned is not refused during the
 *   evicting miss's own (slow) pin; they count against max_entries too, so
 *   that no miss meanwhile takes one of the slab's spare slots.
 */
#include <dlfcn.h>
#include <linux/capability.h>
#include <liburing.h>
#include <pthread.h>
#include <semaphore.h>
#include <sys/resource.h>
#include <sys/syscall.h>

#include "test.h"
#include "odpx-private.h"	/* the slab, for lru-model; put_dead(), for dead_coming */

#define PG 4096UL

static long pin0;	/* VmPin baseline, kB */
static unsigned char *arena;	/* ranges are cut from here */
#define SLOTS 128		/* of 4 pages */

static struct odpx_ctx *open_limits(uint64_t entries, uint64_t pinned, uint64_t entry,
				    uint64_t unused, uint32_t tick_ms)
{
	struct odpx_attr a = {
		.comp_mask = ODPX_ATTR_LIMITS | (tick_ms ? ODPX_ATTR_TICK : 0),
		.limits = { .max_entries = entries, .max_pinned_bytes = pinned,
			    .max_entry_bytes = entry, .max_unused_bytes = unused },
		.tick_ms = tick_ms,
	};
	struct odpx_ctx *ctx;

	CHECK_RC(odpx_open_uring(&a, &ctx), 0);
	return ctx;
}

struct lim { uint64_t entries, pinned; };

static void check_limits(struct odpx_ctx *ctx, struct lim l, const char *when)
{
	struct odpx_stats st = stats_of(ctx);
	long pin = vm_pinned_kb() - pin0;

	CHECK(st.entries <= l.entries, "%s: %lu entries > max_entries %lu", when,
	      (unsigned long)st.entries, (unsigned long)l.entries);
	CHECK(st.pinned_bytes <= l.pinned, "%s: pinned_bytes %lu > max_pinned_bytes %lu", when,
	      (unsigned long)st.pinned_bytes, (unsigned long)l.pinned);
	CHECK(pin >= 0 && (uint64_t)pin * 1024 <= l.pinned, "%s: VmPin grew by %ld kB > max_pinned_bytes %lu",
	      when, pin, (unsigned long)l.pinned);
	CHECK(st.unused_bytes <= st.pinned_bytes, "%s: unused_bytes %lu > pinned_bytes %lu", when,
	      (unsigned long)st.unused_bytes, (unsigned long)st.pinned_bytes);
}

static void *R(unsigned i) { return arena + (size_t)i * 4 * PG; }	/* 3 free pages after each */

/* White box (odpx-private.h): the slot of a handle, and the state of its entry */
static uint32_t slot_of(struct odpx_ctx *ctx, struct odpx_mr *mr)
{
	struct odpx_priv_state st;

	odpx_priv_state(ctx, &st);
	return odpx_priv_slot_of(&st, mr);
}

static uint32_t state_of(struct odpx_ctx *ctx, uint32_t slot)
{
	struct odpx_priv_entry e;

	CHECK_RC(odpx_priv_entry(ctx, slot, &e), 0);
	return e.state;
}

/* The context's entries on their way to the free list */
static uint32_t releasing(struct odpx_ctx *ctx)
{
	struct odpx_priv_state st;

	odpx_priv_state(ctx, &st);
	return st.releasing;
}

/* odpx_reg that must be a hit (want_hit) or a miss; returns the handle. */
static struct odpx_mr *reg(struct odpx_ctx *ctx, struct lim l, void *p, size_t len, int want_hit,
			   const char *what)
{
	struct odpx_stats a = stats_of(ctx), b;
	struct odpx_mr *mr;
	int r = odpx_reg(ctx, p, len, ODPX_ACCESS_LOCAL_WRITE, &mr);

	b = stats_of(ctx);
	CHECK(r == 0, "%s: odpx_reg = %d (%s); reason: %s; entries %lu, unused_bytes %lu",
	      what, r, strerror(-r), odpx_last_reason(), (unsigned long)b.entries,
	      (unsigned long)b.unused_bytes);
	if (want_hit == 1)
		CHECK(b.misses == a.misses && b.hits == a.hits + 1, "%s: not a hit (hits %lu->%lu, misses %lu->%lu)",
		      what, (unsigned long)a.hits, (unsigned long)b.hits, (unsigned long)a.misses,
		      (unsigned long)b.misses);
	else if (want_hit == 0)
		CHECK(b.misses == a.misses + 1 && b.pins == a.pins + 1, "%s: not a miss (hits %lu->%lu, misses %lu->%lu)",
		      what, (unsigned long)a.hits, (unsigned long)b.hits, (unsigned long)a.misses,
		      (unsigned long)b.misses);
	check_limits(ctx, l, what);
	return mr;
}

static void dereg(struct odpx_ctx *ctx, struct lim l, struct odpx_mr *mr, const char *what)
{
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	check_limits(ctx, l, what);
}

static void touch(struct odpx_ctx *ctx, struct lim l, unsigned i, int want_hit, const char *what)
{
	char buf[96];

	snprintf(buf, sizeof(buf), "%s R%u", what, i);
	dereg(ctx, l, reg(ctx, l, R(i), PG, want_hit, buf), buf);
}

/* Simple order: R0..R7 released in turn, R1 and R3 used again, 4 new misses. */
static void lru_simple(void)
{
	struct lim l = { 8, 64 * PG };
	struct odpx_ctx *ctx = open_limits(8, 64 * PG, 16 * PG, 64 * PG, 0);
	static const unsigned kept[] = { 1, 3, 6, 7, 8, 9, 10, 11 }, gone[] = { 0, 2, 4, 5 };

	for (unsigned i = 0; i < 8; i++)
		touch(ctx, l, i, 0, "fill");
	touch(ctx, l, 1, 1, "use again");
	touch(ctx, l, 3, 1, "use again");
	for (unsigned i = 8; i < 12; i++)
		touch(ctx, l, i, 0, "evicting miss");
	CHECK(stats_of(ctx).evictions == 4, "evictions %lu, want 4",
	      (unsigned long)stats_of(ctx).evictions);
	for (unsigned i = 0; i < 8; i++)
		touch(ctx, l, kept[i], 1, "lru-simple: kept");
	for (unsigned i = 0; i < 4; i++)
		touch(ctx, l, gone[i], 0, "lru-simple: evicted");
	CHECK_RC(odpx_close(ctx), 0);
}

/*
 * Exact at the resolution of misses, also after the evictor re-linked
 * entries used since they were linked.  4 entries; clock = misses so far.
 *   P Q R S miss and are released (clock 1..4); R is used again (4);
 *   Z misses (5), evicting P; Q is used again (5);
 *   W misses (6): the evictor re-links Q and R, evicts S (released at 4);
 *   V misses (7): the least recently released is R (4), before Z and Q (5).
 */
static void lru_relinked(void)
{
	struct lim l = { 4, 64 * PG };
	struct odpx_ctx *ctx = open_limits(4, 64 * PG, 16 * PG, 64 * PG, 0);
	enum { P = 20, Q, Rr, S, Z, W, V };

	touch(ctx, l, P, 0, "lru-relinked: P");
	touch(ctx, l, Q, 0, "lru-relinked: Q");
	touch(ctx, l, Rr, 0, "lru-relinked: R");
	touch(ctx, l, S, 0, "lru-relinked: S");
	touch(ctx, l, Rr, 1, "lru-relinked: R again");
	touch(ctx, l, Z, 0, "lru-relinked: Z");
	touch(ctx, l, Q, 1, "lru-relinked: Q again");
	touch(ctx, l, W, 0, "lru-relinked: W");
	touch(ctx, l, V, 0, "lru-relinked: V");
	/* now cached: Z, Q (released at 5), W (6), V (7); R (4) was the LRU */
	touch(ctx, l, Z, 1, "lru-relinked: Z (released after R, must be kept)");
	touch(ctx, l, Q, 1, "lru-relinked: Q");
	touch(ctx, l, W, 1, "lru-relinked: W");
	touch(ctx, l, V, 1, "lru-relinked: V");
	touch(ctx, l, Rr, 0, "lru-relinked: R (least recently released, must be evicted)");
	CHECK_RC(odpx_close(ctx), 0);
}

/*
 * Exact LRU against a model, over a long random run: misses of buffers not
 * cached, hits on cached ones, each held for a while or released at once,
 * releases in random order, and misses when every entry is in use.  The
 * model keeps each buffer's release stamp (the misses so far, as the
 * cache's clock); at each evicting miss it finds the unreferenced buffers
 * released longest ago, and the one the cache evicted (read from its slab)
 * must be one of them: several when released between the same two misses.
 * It predicts every hit, miss and -ENOMEM.
 */
struct lru_model {
	unsigned stamp[SLOTS];	/* 0: not cached, else 1 + clock at the last release */
	unsigned refs[SLOTS];
	struct odpx_mr *held[SLOTS * 4];
	unsigned held_buf[SLOTS * 4], nheld, ncached, clock;
};

static uint64_t lru_rnd(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/* White box: is there an alive entry that starts at @p? */
static bool slab_has(struct odpx_ctx *ctx, const void *p)
{
	struct odpx_priv_state st;
	struct odpx_priv_entry e;

	odpx_priv_state(ctx, &st);
	for (uint32_t i = 0; i < st.slots; i++) {
		CHECK_RC(odpx_priv_entry(ctx, i, &e), 0);
		if (e.state == ODPX_PRIV_ALIVE && e.start == (uintptr_t)p)
			return true;
	}
	return false;
}

static void lru_release(struct odpx_ctx *ctx, struct lim l, struct lru_model *m, unsigned h,
			const char *what)
{
	unsigned b = m->held_buf[h];

	dereg(ctx, l, m->held[h], what);
	if (!--m->refs[b])
		m->stamp[b] = 1 + m->clock;
	m->held[h] = m->held[--m->nheld];
	m->held_buf[h] = m->held_buf[m->nheld];
}

/*
 * @release_8ths: the share of steps that release a held reference.
 * White box: the cache's clock starts at @clock0 (a clock about to wrap), and
 * at step @jump_at (if not 0) it jumps by 2^31 + 4096 misses at once: what
 * a long-running process meets.  The entries released before the jump are
 * then all older than the cache tells apart (lib/reserve.c, lru_age): the
 * model ties them as the oldest.  The LRU's 64-bit keys start at 15 * 2^32
 * + @clock0: a wrap of the clock carries into bit 36, where keys that are
 * close differ in a high digit of the radix heap.
 */
static void lru_model_run(unsigned cap, unsigned bufs, unsigned release_8ths, unsigned steps,
			  uint64_t seed, uint32_t clock0, unsigned jump_at)
{
	struct lim l = { cap, SLOTS * PG };
	struct odpx_ctx *ctx = open_limits(cap, SLOTS * PG, 16 * PG, SLOTS * PG, 0);
	struct lru_model *m = calloc(1, sizeof(*m));
	uint64_t x = seed, nomem = 0, hits = 0, evictions = 0;
	char what[128];

	/* a new context: no miss yet, nothing linked */
	CHECK(odpx_priv_clock_add(ctx, clock0, (15ULL << 32) + clock0) == 0,
	      "lru-model: the clock of a new context is not 0");
	for (unsigned step = 0; step < steps; step++) {
		if (step && step == jump_at) {
			odpx_priv_clock_add(ctx, (1U << 31) + 4096, 0);
			m->clock += (1U << 31) + 4096;
			for (unsigned i = 0; i < bufs; i++)
				if (m->stamp[i])
					m->stamp[i] = 1;
		}
		unsigned op = (unsigned)(lru_rnd(&x) % 8), b = 0, n = 0, oldest = UINT32_MAX;

		snprintf(what, sizeof(what), "lru-model: cap %u seed %#llx step %u", cap,
			 (unsigned long long)seed, step);
		if ((op < release_8ths || m->nheld == SLOTS * 4) && m->nheld) {	/* release one */
			lru_release(ctx, l, m, (unsigned)(lru_rnd(&x) % m->nheld), what);
			continue;
		}
		bool hit = op < release_8ths + 2 && m->ncached;
		if (hit) {	/* a cached buffer */
			unsigned k = (unsigned)(lru_rnd(&x) % m->ncached);
			for (b = 0; b < bufs; b++)
				if (m->stamp[b] && n++ == k)
					break;
			hits++;
		} else {	/* a buffer not cached */
			do
				b = (unsigned)(lru_rnd(&x) % bufs);
			while (m->stamp[b]);
			m->clock++;
			if (m->ncached == cap) {
				for (unsigned i = 0; i < bufs; i++)
					if (m->stamp[i] && !m->refs[i] && m->stamp[i] < oldest)
						oldest = m->stamp[i];
				if (oldest == UINT32_MAX) {	/* every entry in use */
					struct odpx_mr *mr;
					CHECK(odpx_reg(ctx, R(b), PG, ODPX_ACCESS_LOCAL_WRITE, &mr) == -ENOMEM,
					      "%s: want -ENOMEM, every entry is in use", what);
					nomem++;
					continue;
				}
			}
		}
		m->held[m->nheld] = reg(ctx, l, R(b), PG, hit, what);
		m->held_buf[m->nheld++] = b;
		if (!m->stamp[b]) {
			m->stamp[b] = 1 + m->clock;
			m->ncached++;
		}
		m->refs[b]++;
		if (oldest != UINT32_MAX) {	/* that miss evicted: which one? */
			unsigned gone = SLOTS;
			for (unsigned i = 0; i < bufs; i++)
				if (m->stamp[i] && i != b && !slab_has(ctx, R(i))) {
					CHECK(gone == SLOTS, "%s: R%u and R%u both evicted", what, gone, i);
					gone = i;
				}
			CHECK(gone < SLOTS, "%s: nothing evicted at max_entries", what);
			CHECK(!m->refs[gone] && m->stamp[gone] == oldest,
			      "%s: evicted R%u (refs %u, released at %u), the oldest release is at %u",
			      what, gone, m->refs[gone], m->stamp[gone] - 1, oldest - 1);
			m->stamp[gone] = 0;
			m->ncached--;
			evictions++;
		}
		if (lru_rnd(&x) % 2)	/* or release it at once */
			lru_release(ctx, l, m, m->nheld - 1, what);
	}
	while (m->nheld)
		lru_release(ctx, l, m, m->nheld - 1, "lru-model: the end");
	CHECK(hits > steps / 8 && evictions > steps / 8 && nomem > 0,
	      "lru-model: cap %u: %lu hits, %lu evictions, %lu -ENOMEM in %u steps: the run"
	      " does not cover them all", cap, (unsigned long)hits, (unsigned long)evictions,
	      (unsigned long)nomem, steps);
	free(m);
	CHECK_RC(odpx_close(ctx), 0);
}

static void lru_model(void)
{
	lru_model_run(4, 12, 3, 4000, 0x9e3779b97f4a7c15ULL, 0, 0);
	lru_model_run(8, 40, 3, 8000, 0x2545f4914f6cdd1dULL, 0, 0);
	lru_model_run(32, SLOTS, 2, 8000, 0x5851f42d4c957f2dULL, 0, 0);
	lru_model_run(8, 40, 3, 4000, 0xd1b54a32d192ed03ULL, UINT32_MAX - 700, 0);
	lru_model_run(8, 40, 3, 4000, 0x8cb92ba72f3d8dd7ULL, 0, 2000);
}

/* Pinned bytes: entries of 1..4 pages under an 8-page cap. */
static void pinned_cap(void)
{
	struct lim l = { 64, 8 * PG };
	struct odpx_ctx *ctx = open_limits(64, 8 * PG, 4 * PG, 8 * PG, 0);
	struct odpx_mr *mr;
	unsigned sizes[] = { 1, 4, 2, 3, 4, 4, 1, 2, 3, 4, 1, 1, 4, 2 };

	for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		mr = reg(ctx, l, R(40 + i), sizes[i] * PG, 0, "pinned cap");
		CHECK(data_check(ctx, mr, R(40 + i), sizes[i] * PG, i), "pinned cap: data %u", i);
		dereg(ctx, l, mr, "pinned cap");
	}
	CHECK(stats_of(ctx).evictions > 0, "nothing was evicted");
	/* -E2BIG: longer than max_entry_bytes, even by one byte */
	CHECK_RC(odpx_reg(ctx, R(60), 4 * PG + 1, 0, &mr), -E2BIG);
	CHECK_RC(odpx_reg(ctx, (char *)R(60) + 100, 4 * PG, 0, &mr), -E2BIG);	/* 5 pages */
	CHECK_RC(odpx_reg(ctx, R(60), 64 * PG, 0, &mr), -E2BIG);
	check_limits(ctx, l, "after -E2BIG");
	CHECK_RC(odpx_close(ctx), 0);
}

/*
 * A merged range that does not fit evicts no more than the request alone
 * needs.  16 pages: H (8) held, V1 V2 V3 (2 each) released in turn.  A
 * 4-page request overlapping H by 2 pages fits alone once V1 is evicted;
 * merged with H (10 pages) it never fits.  A miss that reserved the
 * merged range first would evict V1, V2 and V3 for it before reserving the
 * request alone.
 */
static void merge_evicts_for_request(void)
{
	struct lim l = { 64, 16 * PG };
	struct odpx_ctx *ctx = open_limits(64, 16 * PG, 16 * PG, 16 * PG, 0);
	unsigned char *h = R(70);
	struct odpx_mr *held, *mr;
	struct odpx_stats a, b;

	held = reg(ctx, l, h, 8 * PG, 0, "merge evicts: H");
	for (unsigned i = 0; i < 3; i++)	/* 2 pages each */
		dereg(ctx, l, reg(ctx, l, R(77 + i), 2 * PG, 0, "merge evicts: V"), "merge evicts: V");
	a = stats_of(ctx);
	mr = reg(ctx, l, h + 6 * PG, 4 * PG, 0, "merge evicts: 4 pages beside H");
	b = stats_of(ctx);
	CHECK(b.evictions == a.evictions + 1 && b.merges == a.merges,
	      "merge evicts: %lu evictions (1 needed), %lu merges", (unsigned long)(b.evictions - a.evictions),
	      (unsigned long)(b.merges - a.merges));
	CHECK(data_check(ctx, mr, h + 6 * PG, 4 * PG, 9), "merge evicts: data");
	dereg(ctx, l, mr, "merge evicts");
	touch(ctx, l, 78, 1, "merge evicts: V2 kept");
	touch(ctx, l, 79, 1, "merge evicts: V3 kept");
	dereg(ctx, l, held, "merge evicts");
	CHECK_RC(odpx_close(ctx), 0);
}

/*
 * Merging must not turn a request that fits into -ENOMEM: 4 of 8 pages held,
 * a 4-page request overlapping it by 2 fits on its own (4 + 4), merged (6)
 * it would not (4 + 6).
 */
static void merge_cap(void)
{
	struct lim l = { 64, 8 * PG };
	struct odpx_ctx *ctx = open_limits(64, 8 * PG, 8 * PG, 8 * PG, 0);
	unsigned char *p = R(70);
	struct odpx_mr *a, *b;
	int r;

	a = reg(ctx, l, p, 4 * PG, 0, "merge cap: held");
	r = odpx_reg(ctx, p + 2 * PG, 4 * PG, 0, &b);
	CHECK(r == 0, "merge cap: a 4-page request with 4 of 8 pages free: %d (%s); reason: %s",
	      r, strerror(-r), odpx_last_reason());
	check_limits(ctx, l, "merge cap");
	CHECK(data_check(ctx, b, p + 2 * PG, 4 * PG, 7), "merge cap: data");
	CHECK(data_check(ctx, a, p, 4 * PG, 8), "merge cap: data of the held entry");
	dereg(ctx, l, a, "merge cap");
	dereg(ctx, l, b, "merge cap");
	CHECK_RC(odpx_close(ctx), 0);
	merge_evicts_for_request();
}

/* Everything in use: -ENOMEM, nothing lost, room again after a release. */
static void all_in_use(void)
{
	struct lim l = { 8, 16 * PG };
	struct odpx_ctx *ctx = open_limits(8, 16 * PG, 8 * PG, 16 * PG, 0);
	struct odpx_mr *held[8], *mr;
	struct odpx_stats st;

	for (unsigned i = 0; i < 8; i++) {
		held[i] = reg(ctx, l, R(80 + i), PG, 0, "hold");
		CHECK(data_check(ctx, held[i], R(80 + i), PG, i), "hold: data %u", i);
	}
	st = stats_of(ctx);
	CHECK(st.entries == 8, "entries %lu, want 8", (unsigned long)st.entries);
	CHECK_RC(odpx_reg(ctx, R(90), PG, 0, &mr), -ENOMEM);
	CHECK(strcmp(odpx_last_reason(), "no error") != 0, "-ENOMEM without a reason");
	CHECK_RC(odpx_reg(ctx, R(91), 2 * PG, 0, &mr), -ENOMEM);
	check_limits(ctx, l, "after -ENOMEM");
	st = stats_of(ctx);
	CHECK(st.entries == 8 && st.pinned_bytes == 8 * PG, "-ENOMEM lost something: %lu entries, %lu bytes",
	      (unsigned long)st.entries, (unsigned long)st.pinned_bytes);
	for (unsigned i = 0; i < 8; i++) {
		CHECK(data_check(ctx, held[i], R(80 + i), PG, 10 + i), "after -ENOMEM: data %u", i);
		touch(ctx, l, 80 + i, 1, "after -ENOMEM: held entry");	/* a hit needs no room */
	}
	dereg(ctx, l, held[5], "release one");
	mr = reg(ctx, l, R(90), PG, 0, "room again");
	CHECK(data_check(ctx, mr, R(90), PG, 30), "room again: data");
	/* R85 was the victim: all 8 in use again, and it is no hit */
	CHECK_RC(odpx_reg(ctx, R(85), PG, 0, &held[5]), -ENOMEM);
	dereg(ctx, l, mr, "release");
	touch(ctx, l, 85, 0, "room again");
	for (unsigned i = 0; i < 8; i++)
		if (i != 5)
			CHECK(data_check(ctx, held[i], R(80 + i), PG, 40 + i), "still held: data %u", i);

	/* the byte cap, entries to spare: 7 held pages + 2 asked of 8 */
	for (unsigned i = 0; i < 8; i++)
		if (i != 5)
			dereg(ctx, l, held[i], "release all");
	CHECK_RC(odpx_close(ctx), 0);

	l = (struct lim){ 64, 8 * PG };
	ctx = open_limits(64, 8 * PG, 4 * PG, 8 * PG, 0);
	held[0] = reg(ctx, l, R(100), 4 * PG, 0, "bytes: hold 4");
	held[1] = reg(ctx, l, R(101), 3 * PG, 0, "bytes: hold 3");
	CHECK_RC(odpx_reg(ctx, R(102), 2 * PG, 0, &mr), -ENOMEM);
	check_limits(ctx, l, "bytes: after -ENOMEM");
	mr = reg(ctx, l, R(102), PG, 0, "bytes: 1 page still fits");
	CHECK(data_check(ctx, held[0], R(100), 4 * PG, 50) && data_check(ctx, held[1], R(101), 3 * PG, 51) &&
	      data_check(ctx, mr, R(102), PG, 52), "bytes: data");
	dereg(ctx, l, mr, "bytes");
	dereg(ctx, l, held[0], "bytes");
	dereg(ctx, l, held[1], "bytes");
	CHECK_RC(odpx_close(ctx), 0);
}

/*
 * One entry (max_entries 1, the bytes to spare): each miss of a 4-page
 * range evicts the last one and replaces it in its slot.
 */
static void replace_cycle(struct odpx_ctx *ctx, unsigned first, unsigned n, const char *what)
{
	struct lim l = { 64, 4 * PG };
	char buf[96];

	for (unsigned i = 0; i < n; i++) {
		struct odpx_stats a = stats_of(ctx), b;
		struct odpx_mr *mr;

		snprintf(buf, sizeof(buf), "%s: R%u", what, first + i);
		mr = reg(ctx, l, R(first + i), 4 * PG, 0, buf);
		b = stats_of(ctx);
		CHECK(vm_pinned_kb() - pin0 == (long)(4 * PG / 1024),
		      "%s: VmPin +%ld kB, want +%lu (one entry)", buf, vm_pinned_kb() - pin0, 4 * PG / 1024);
		CHECK(b.pins - b.unpins == 1 && b.evictions == a.evictions + (a.entries == 1),
		      "%s: pins %lu unpins %lu evictions %lu -> %lu", buf, (unsigned long)b.pins,
		      (unsigned long)b.unpins, (unsigned long)a.evictions, (unsigned long)b.evictions);
		CHECK(data_check(ctx, mr, R(first + i), 4 * PG, first + i), "%s: data", buf);
		dereg(ctx, l, mr, buf);
	}
}

static void replace_evict(void)
{
	struct odpx_ctx *ctx = open_limits(1, 64 * PG, 4 * PG, 64 * PG, 0);
	unsigned char *ro = mmap(NULL, 4 * PG, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct odpx_mr *mr;
	struct odpx_stats st;

	CHECK(ro != MAP_FAILED, "mmap");
	replace_cycle(ctx, 30, 6, "replace");
	/* the pin into the victim's slot fails: the victim is unpinned all the same */
	CHECK_RC(odpx_reg(ctx, ro, 4 * PG, 0, &mr), -EFAULT);
	st = stats_of(ctx);
	CHECK(vm_pinned_kb() == pin0 && st.entries == 0 && st.pins == st.unpins,
	      "failed replace: VmPin +%ld kB, %lu entries, pins %lu unpins %lu", vm_pinned_kb() - pin0,
	      (unsigned long)st.entries, (unsigned long)st.pins, (unsigned long)st.unpins);
	replace_cycle(ctx, 35, 2, "after a failed replace");	/* R35 was the victim: a miss */
	CHECK_RC(odpx_close(ctx), 0);
	munmap(ro, 4 * PG);
}

static void set_memlock(uint64_t bytes)
{
	struct rlimit rl;

	CHECK(getrlimit(RLIMIT_MEMLOCK, &rl) == 0, "getrlimit: %s", strerror(errno));
	rl.rlim_cur = bytes;
	CHECK(setrlimit(RLIMIT_MEMLOCK, &rl) == 0, "setrlimit %lu (max %lu): %s", (unsigned long)bytes,
	      (unsigned long)rl.rlim_max, strerror(errno));
}

/*
 * Without CAP_IPC_LOCK, io_uring charges its pins and rings to the user's
 * locked memory under RLIMIT_MEMLOCK.  With one 4-page entry cached, the
 * limit is set 3 pages above the charge (probed with a 1-page pin through a
 * ring of the test's own): the slot update that pins the next range while
 * the victim is still in the slot is over it, the unpin-then-pin is not.
 */
static int replace_memlock_child(void *arg)
{
	struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct d[2];
	struct io_uring probe;
	struct iovec iov = { R(49), PG }, none = { NULL, 0 };
	struct odpx_ctx *ctx;
	struct odpx_stats st;
	struct rlimit rl;
	__u64 tag = 0;
	uint64_t pages;

	(void)arg;
	CHECK(syscall(SYS_capget, &h, d) == 0, "capget: %s", strerror(errno));
	d[CAP_TO_INDEX(CAP_IPC_LOCK)].effective &= ~CAP_TO_MASK(CAP_IPC_LOCK);
	CHECK(syscall(SYS_capset, &h, d) == 0, "capset: %s", strerror(errno));
	CHECK(getrlimit(RLIMIT_MEMLOCK, &rl) == 0, "getrlimit: %s", strerror(errno));
	set_memlock(rl.rlim_max);	/* room to start: 8 MiB on Debian */
	CHECK_RC(io_uring_queue_init(2, &probe, 0), 0);
	CHECK_RC(io_uring_register_buffers_sparse(&probe, 1), 0);
	pin0 = vm_pinned_kb();
	ctx = open_limits(1, 64 * PG, 4 * PG, 64 * PG, 0);
	replace_cycle(ctx, 40, 1, "memlock: first");	/* monitor, engine and one entry */
	for (pages = 1; pages < 2048; pages++) {
		set_memlock(pages * PG);
		if (io_uring_register_buffers_update_tag(&probe, 0, &iov, &tag, 1) == 1)
			break;
	}
	CHECK(pages < 2048, "no RLIMIT_MEMLOCK up to 8 MiB lets one page be pinned");
	CHECK_RC(io_uring_register_buffers_update_tag(&probe, 0, &none, &tag, 1), 1);
	set_memlock((pages - 1 + 3) * PG);	/* charged now, plus 3 pages */
	replace_cycle(ctx, 41, 3, "replace over RLIMIT_MEMLOCK");
	st = stats_of(ctx);
	CHECK(st.evictions == 3 && st.pin_failures == 0, "memlock: evictions %lu, pin failures %lu",
	      (unsigned long)st.evictions, (unsigned long)st.pin_failures);
	CHECK_RC(odpx_close(ctx), 0);
	io_uring_queue_exit(&probe);
	return 0;
}

/* max_unused_bytes: the engine tick trims released entries, LRU first. */
static void unused_cap(void)
{
	struct lim l = { 64, 64 * PG };
	struct odpx_ctx *ctx = open_limits(64, 64 * PG, 8 * PG, 4 * PG, 10);
	struct odpx_stats st;

	for (unsigned i = 0; i < 10; i++)
		dereg(ctx, l, reg(ctx, l, R(110 + i), 2 * PG, 0, "unused"), "unused");
	CHECK(WAIT_FOR((st = stats_of(ctx)).unused_bytes <= 4 * PG, 3),
	      "unused_bytes %lu > max_unused_bytes %lu after 3 s (%lu engine ticks)",
	      (unsigned long)st.unused_bytes, 4 * PG, (unsigned long)st.engine_ticks);
	CHECK(st.engine_ticks > 0, "no engine tick counted");
	CHECK(st.unused_bytes == 4 * PG && st.entries == 2, "trimmed too far: %lu unused bytes, %lu entries",
	      (unsigned long)st.unused_bytes, (unsigned long)st.entries);
	touch(ctx, l, 118, 1, "unused: most recent kept");
	touch(ctx, l, 119, 1, "unused: most recent kept");
	touch(ctx, l, 110, 0, "unused: least recent trimmed");
	CHECK_RC(odpx_close(ctx), 0);

}

#define EXACT_N 16
#define EXACT_LEN(i) ((1 + (i) % 3) * PG)	/* 3 pages at most: a gap before the next slot */

static struct odpx_ctx *exact_ctx;

static void *exact_hammer(void *arg)
{
	for (unsigned k = 0; k < 20000; k++) {
		unsigned i = (k * 7 + (unsigned)(uintptr_t)arg) % EXACT_N;
		struct odpx_mr *mr;

		CHECK_RC(odpx_reg(exact_ctx, R(12 + i), EXACT_LEN(i), ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
		CHECK_RC(odpx_dereg(exact_ctx, mr), 0);
	}
	return NULL;
}

static void check_unused(struct odpx_ctx *ctx, uint64_t want, const char *when)
{
	struct odpx_stats st = stats_of(ctx);

	CHECK(st.unused_bytes == want, "%s: unused_bytes %lu, want %lu", when,
	      (unsigned long)st.unused_bytes, (unsigned long)want);
}

/* unused_bytes, exact: hits by several threads, invalidation of used and unused entries. */
static void unused_exact(void)
{
	struct lim l = { 64, 128 * PG };
	struct odpx_ctx *ctx = open_limits(64, 128 * PG, 8 * PG, 128 * PG, 0);
	struct odpx_mr *held[4];
	uint64_t total = 0, in_use = 0;
	pthread_t t[3];

	exact_ctx = ctx;
	for (unsigned i = 0; i < EXACT_N; i++) {
		dereg(ctx, l, reg(ctx, l, R(12 + i), EXACT_LEN(i), 0, "unused exact: fill"), "fill");
		total += EXACT_LEN(i);
	}
	check_unused(ctx, total, "all released");
	for (unsigned i = 0; i < 4; i++) {
		held[i] = reg(ctx, l, R(12 + i), EXACT_LEN(i), 1, "unused exact: hold");
		in_use += EXACT_LEN(i);
	}
	check_unused(ctx, total - in_use, "four held");
	for (uintptr_t i = 0; i < 3; i++)
		CHECK(pthread_create(&t[i], NULL, exact_hammer, (void *)i) == 0, "pthread_create");
	for (int i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	CHECK(stats_of(ctx).misses == EXACT_N, "the threads missed: %lu misses",
	      (unsigned long)stats_of(ctx).misses);
	check_unused(ctx, total - in_use, "after three threads hit and released 60,000 times");

	/*
	 * An unused entry dies: its bytes leave.  A held one dies: a counted
	 * reference's bytes were taken already, nothing changes; a slot's hit
	 * (these) gives back at its release what it took, so the death takes
	 * the bytes now too, and the count is exact again once it is released.
	 */
	void *p5 = R(12 + 5), *p0 = R(12);
	CHECK(munmap(p5, 4 * PG) == 0 && mmap(p5, 4 * PG, PROT_READ | PROT_WRITE,
	      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == p5, "remap R17");
	check_unused(ctx, total - in_use - EXACT_LEN(5), "an unused entry unmapped");
	CHECK(munmap(p0, 4 * PG) == 0 && mmap(p0, 4 * PG, PROT_READ | PROT_WRITE,
	      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == p0, "remap R12");
	check_unused(ctx, total - in_use - EXACT_LEN(5) - EXACT_LEN(0), "a held entry unmapped");
	for (unsigned i = 0; i < 4; i++)
		dereg(ctx, l, held[i], "unused exact: release");
	check_unused(ctx, total - EXACT_LEN(5) - EXACT_LEN(0), "all released again");
	CHECK(WAIT_FOR(stats_of(ctx).entries == EXACT_N - 2, 3), "entries %lu, want %u (the engine unpins the dead)",
	      (unsigned long)stats_of(ctx).entries, EXACT_N - 2);
	CHECK_RC(odpx_close(ctx), 0);
}

/* Direct registrations share the limits with the cache. */
static void direct_counts(void)
{
	struct lim l = { 4, 64 * PG };
	struct odpx_ctx *ctx = open_limits(4, 64 * PG, 16 * PG, 64 * PG, 0);
	struct odpx_attr da = { .comp_mask = ODPX_ATTR_MODE | ODPX_ATTR_LIMITS, .mode = ODPX_MODE_DIRECT,
				.limits = { .max_entries = 4, .max_pinned_bytes = 6 * PG } };
	unsigned char *shm = mmap(NULL, 4 * PG, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	struct odpx_mr *held[4], *mr;
	struct odpx_stats st;

	CHECK(shm != MAP_FAILED, "mmap");
	for (unsigned i = 0; i < 4; i++)
		touch(ctx, l, 30 + i, 0, "direct counts: cache");
	for (unsigned i = 0; i < 4; i++) {	/* each one evicts an unused cached entry */
		CHECK_RC(odpx_reg(ctx, shm + i * PG, PG, 0, &held[i]), 0);
		check_limits(ctx, l, "direct counts: shared");
	}
	st = stats_of(ctx);
	CHECK(st.direct_shared == 4 && st.evictions == 4 && st.entries == 4,
	      "direct counts: direct_shared %lu, evictions %lu, entries %lu", (unsigned long)st.direct_shared,
	      (unsigned long)st.evictions, (unsigned long)st.entries);
	CHECK_RC(odpx_reg(ctx, R(34), PG, 0, &mr), -ENOMEM);
	CHECK_RC(odpx_reg(ctx, shm, PG, 0, &mr), -ENOMEM);
	for (unsigned i = 0; i < 4; i++) {
		CHECK(data_check(ctx, held[i], shm + i * PG, PG, 60 + i), "direct counts: data %u", i);
		dereg(ctx, l, held[i], "direct counts");
	}
	CHECK(stats_of(ctx).entries == 0, "direct counts: direct entries left after their dereg");
	CHECK_RC(odpx_close(ctx), 0);

	l = (struct lim){ 4, 6 * PG };
	CHECK_RC(odpx_open_uring(&da, &ctx), 0);
	held[0] = reg(ctx, l, R(36), 4 * PG, -1, "direct mode: 4 pages");
	CHECK_RC(odpx_reg(ctx, R(37), 4 * PG, 0, &mr), -ENOMEM);
	held[1] = reg(ctx, l, R(37), 2 * PG, -1, "direct mode: 2 more");
	CHECK_RC(odpx_reg(ctx, R(38), PG, 0, &mr), -ENOMEM);
	dereg(ctx, l, held[0], "direct mode");
	held[0] = reg(ctx, l, R(38), PG, -1, "direct mode: room again");
	held[2] = reg(ctx, l, R(38), PG, -1, "direct mode: same range again");
	held[3] = reg(ctx, l, R(39), PG, -1, "direct mode: fourth");
	CHECK_RC(odpx_reg(ctx, R(39), PG, 0, &mr), -ENOMEM);	/* max_entries */
	for (unsigned i = 0; i < 4; i++)
		dereg(ctx, l, held[i], "direct mode");
	CHECK_RC(odpx_close(ctx), 0);
	munmap(shm, 4 * PG);
}

/*
 * -ENOMEM only when what is in use fills the limits.  One entry at most: a
 * range is cached, released and munmapped (its entry dies, and the engine
 * reaps it), then another range is registered.  The dead entry was still
 * counted while the engine unpinned it, and the miss found nothing to evict:
 * "every entry is in use" with nothing held, a few times in 50,000 rounds,
 * unless the miss waits for what is on its way back, as it must.
 */
static void no_false_enomem(void)
{
	struct odpx_ctx *ctx = open_limits(1, 64 * PG, 16 * PG, 64 * PG, 0);
	unsigned char *b = map_anon(NULL, PG);
	struct odpx_mr *mr;
	unsigned rounds = 50000;

	memset(b, 2, PG);
	for (unsigned i = 0; i < rounds; i++) {
		unsigned char *p = map_anon(NULL, PG);
		memset(p, 1, PG);
		CHECK_RC(odpx_reg(ctx, p, PG, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
		CHECK_RC(odpx_dereg(ctx, mr), 0);
		CHECK(munmap(p, PG) == 0, "munmap");	/* the only entry dies: nothing held */
		int r = odpx_reg(ctx, b, PG, ODPX_ACCESS_LOCAL_WRITE, &mr);
		CHECK(r == 0, "round %u: odpx_reg with nothing held: %d (%s)", i, r, odpx_last_reason());
		CHECK_RC(odpx_dereg(ctx, mr), 0);
	}
	CHECK_RC(odpx_close(ctx), 0);
	munmap(b, PG);
	printf("no false -ENOMEM: %u rounds of an entry dying while the next one misses\n", rounds);
}

/*
 * A miss's victims stay charged until they are unpinned.  A miss evicts
 * 16 pages for one page and is stopped in its first slot update (the
 * wrapper below), the unpin of a victim (one of 16 pages, or the first of
 * two of 8).  Until that update has run, the victims are still pinned, so
 * another thread's 15 pages do not fit a 16-page limit: a cache that took
 * them out of the count at eviction would pin 31 pages (VmPin over the
 * limit).  That miss must wait, and be refused if the update does not
 * come; once it has come, it fits.  The replace case: a cache of two
 * entries evicts by entries, and the miss replaces an 8-page victim's slot
 * in place (both fit); the victim stays charged until the replace returns,
 * so another miss's 8 pages are refused meanwhile (1 + 8 + 8 > 16).
 */
static __thread bool stall_me;
static sem_t stalled, go_on;
static const void *stalled_base;	/* the iov_base of the update stopped in */
/*
 * While @track_slots: the slot updates, and the most VmPin held during
 * one, in kB over pin0 (a replace pins the new range before it unpins the
 * old one); the slots of one context's table that hold a range, and their
 * most at once.  @stall_unpin: the next unpin of any thread waits as
 * @stall_me's update does.
 */
#define TRACKED_SLOTS 64
static bool track_slots;
static long update_peak_kb;
static unsigned tracked_updates;
static bool slot_used[TRACKED_SLOTS];
static _Atomic int slots_used, slots_used_max, stall_unpin;

static int (*real_update)(struct io_uring *, unsigned, const struct iovec *, const __u64 *,
			  unsigned);

/* before main(): the engine's thread calls the wrapper too */
__attribute__((constructor)) static void find_real_update(void)
{
	real_update = (int (*)(struct io_uring *, unsigned, const struct iovec *, const __u64 *,
			       unsigned))dlsym(RTLD_NEXT, "io_uring_register_buffers_update_tag");
}

int io_uring_register_buffers_update_tag(struct io_uring *ring, unsigned off,
					 const struct iovec *iov, const __u64 *tags, unsigned nr)
{
	int one = 1;
	if (stall_me || (!iov->iov_base && atomic_compare_exchange_strong(&stall_unpin, &one, 0))) {
		stall_me = false;
		stalled_base = iov->iov_base;
		sem_post(&stalled);
		struct timespec t;
		clock_gettime(CLOCK_REALTIME, &t);
		t.tv_sec += 10;
		CHECK(sem_timedwait(&go_on, &t) == 0, "a stopped slot update was never let go");
	}
	if (track_slots) {
		long peak = vm_pinned_kb() - pin0 + (long)(iov->iov_len / 1024);
		update_peak_kb = peak > update_peak_kb ? peak : update_peak_kb;
		tracked_updates++;
	}
	int r = real_update(ring, off, iov, tags, nr);
	if (track_slots && r == 1 && off < TRACKED_SLOTS && slot_used[off] != !!iov->iov_base) {
		slot_used[off] = iov->iov_base != NULL;
		int n = atomic_fetch_add(&slots_used, iov->iov_base ? 1 : -1) + (iov->iov_base ? 1 : -1);
		for (int m = atomic_load(&slots_used_max);
		     n > m && !atomic_compare_exchange_weak(&slots_used_max, &m, n);)
			;
	}
	return r;
}

/* @in_pin: stopped in the slow backend's pin (below), not in a slot update */
struct stall_arg { struct odpx_ctx *ctx; void *p; int r; size_t len; bool in_pin; };
static __thread bool hold_pin;

static void *stalled_miss(void *arg)
{
	struct stall_arg *a = arg;
	struct odpx_mr *mr;

	if (a->in_pin)
		hold_pin = true;
	else
		stall_me = true;
	a->r = odpx_reg(a->ctx, a->p, a->len, ODPX_ACCESS_LOCAL_WRITE, &mr);
	if (a->r == 0)
		a->r = odpx_dereg(a->ctx, mr);
	return NULL;
}

static void victims_charged_run(unsigned nvictims, bool replace)
{
	struct lim l = { replace ? 2 : 64, 16 * PG };
	struct odpx_ctx *ctx = open_limits(l.entries, l.pinned, 16 * PG, l.pinned, 0);
	unsigned char *b = map_anon(NULL, 64 * PG);
	struct stall_arg a = { ctx, b + 40 * PG, -1, PG, false };
	size_t more = replace ? 8 * PG : 15 * PG;
	struct odpx_mr *mr;
	pthread_t t;
	char what[64];
	int r;

	memset(b, 3, 64 * PG);
	/* cached, unused: 16 pages in 1 or 2; or 8 then 4 pages, the 8 least recent */
	for (unsigned i = 0; i < nvictims; i++)
		dereg(ctx, l, reg(ctx, l, b + i * 17 * PG, replace ? 8 * PG >> i : 16 * PG / nvictims,
				  0, "victim"), "victim");
	CHECK(sem_init(&stalled, 0, 0) == 0 && sem_init(&go_on, 0, 0) == 0, "sem_init");
	CHECK(pthread_create(&t, NULL, stalled_miss, &a) == 0, "pthread_create");
	CHECK(sem_wait(&stalled) == 0, "sem_wait");
	snprintf(what, sizeof(what), "%u victim(s) not yet %s", nvictims,
		 replace ? "replaced" : "unpinned");
	CHECK(replace ? stalled_base == a.p : !stalled_base,
	      "%s: stopped in the wrong update (iov_base %p, the miss's range %p)", what,
	      stalled_base, a.p);
	check_limits(ctx, l, what);
	r = odpx_reg(ctx, b + 44 * PG, more, ODPX_ACCESS_LOCAL_WRITE, &mr);
	check_limits(ctx, l, what);	/* the victims counted at eviction: VmPin 31 pages */
	CHECK(r == -ENOMEM, "%s: %zu pages more = %d (%s), want -ENOMEM", what, more / PG, r,
	      strerror(-r));
	sem_post(&go_on);
	pthread_join(t, NULL);
	CHECK(a.r == 0, "%s: the stalled miss = %d (%s)", what, a.r, strerror(-a.r));
	dereg(ctx, l, reg(ctx, l, b + 44 * PG, more, 0, "victims unpinned"), what);
	check_limits(ctx, l, what);
	CHECK_RC(odpx_close(ctx), 0);
	munmap(b, 64 * PG);
	sem_destroy(&stalled);
	sem_destroy(&go_on);
}

static void victims_charged(void)
{
	victims_charged_run(1, false);	/* stalled in the unpin of the victim */
	victims_charged_run(2, false);	/* in the unpin of one of two */
	victims_charged_run(2, true);	/* in the replace of the reused slot */
	printf("victims charged until unpinned: another miss waits for them\n");
}

/*
 * A miss's victims stop counting once they are unpinned, not once its own
 * pin returns.  Backend "slow" (null_ops with hooks: no pin_replaces, like
 * verbs, whose pin of a large range takes that long) holds one thread's pin.  16-page limit; V
 * (8 pages) cached, unused.  A registers 12 pages: it evicts V, unpins it
 * and is held in its pin.  B's 4 pages fit (12 + 4): a cache that still
 * charged V's 8 until A's pin returned would refuse B with -ENOMEM after
 * waiting twice, with nothing held but A's reservation.
 */
static sem_t pin_held, pin_go;
static uint64_t slow_slot[64];
static _Atomic uint64_t slow_pinned, slow_peak;

static void slow_pin(uint32_t idx, uintptr_t start, size_t len)
{
	(void)start;
	if (hold_pin) {
		hold_pin = false;
		sem_post(&pin_held);
		sem_wait(&pin_go);
	}
	slow_slot[idx] = len;
	uint64_t now = atomic_fetch_add(&slow_pinned, len) + len, peak = atomic_load(&slow_peak);
	while (now > peak && !atomic_compare_exchange_weak(&slow_peak, &peak, now))
		;
}

static void slow_unpin(uint32_t idx)
{
	atomic_fetch_sub(&slow_pinned, slow_slot[idx]);
	slow_slot[idx] = 0;
}

static const struct odpx_priv_hooks slow_hooks = { .pin = slow_pin, .unpin = slow_unpin };

static void victims_freed_before_pin(void)
{
	struct odpx_attr at = { .comp_mask = ODPX_ATTR_LIMITS,
				.limits = { .max_entries = 32, .max_pinned_bytes = 16 * PG,
					    .max_entry_bytes = 16 * PG, .max_unused_bytes = 16 * PG } };
	unsigned char *b = map_anon(NULL, 64 * PG);
	struct odpx_ctx *ctx;
	struct odpx_mr *mr;
	struct stall_arg a;
	pthread_t t;
	double t0;
	int r;

	memset(b, 4, 64 * PG);
	CHECK(sem_init(&pin_held, 0, 0) == 0 && sem_init(&pin_go, 0, 0) == 0, "sem_init");
	CHECK_RC(odpx_open_backend(odpx_priv_hooked(&null_ops, &slow_hooks), &at, &ctx), 0);
	a = (struct stall_arg){ ctx, b + 20 * PG, -1, 12 * PG, true };
	CHECK_RC(odpx_reg(ctx, b, 8 * PG, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);	/* V */
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	CHECK(pthread_create(&t, NULL, stalled_miss, &a) == 0, "pthread_create");
	CHECK(sem_wait(&pin_held) == 0, "sem_wait");
	CHECK(atomic_load(&slow_pinned) == 0, "V not unpinned before A's pin");
	t0 = now_s();
	r = odpx_reg(ctx, b + 40 * PG, 4 * PG, ODPX_ACCESS_LOCAL_WRITE, &mr);
	CHECK(r == 0, "4 pages while A pins 12 of 16, V unpinned: %d (%s) after %.0f ms; reason: %s",
	      r, strerror(-r), (now_s() - t0) * 1e3, odpx_last_reason());
	sem_post(&pin_go);
	pthread_join(t, NULL);
	CHECK(a.r == 0, "A's 12 pages: %d (%s)", a.r, strerror(-a.r));
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	CHECK(atomic_load(&slow_peak) <= 16 * PG, "the backend held %lu pages at once, limit 16",
	      (unsigned long)(atomic_load(&slow_peak) / PG));
	CHECK_RC(odpx_close(ctx), 0);
	munmap(b, 64 * PG);
	sem_destroy(&pin_held);
	sem_destroy(&pin_go);
	printf("victims uncharged once unpinned: another miss fits during a slow pin\n");
}

/*
 * A replace pins the new range before it unpins the old one: it is taken
 * only when both fit max_pinned_bytes (the wrapper reads VmPin before each
 * update and adds the range it pins).  Four misses in a row; those that
 * evict:
 * - 4 pages, entries of 4 pages (room for one): the victim is unpinned
 *   first (two updates), never replaced in place, which would show VmPin
 *   8 pages in the update;
 * - 2 entries (a slab of 2, no free slot), 4 pages, entries of 2: the
 *   victim's slot is reused all the same, unpinned first (else VmPin 6);
 * - 2 entries, 16 pages, entries of 1 page: the replace fits, and is taken
 *   (one update).
 */
static void replace_fits_run(uint64_t entries, uint64_t pinned, unsigned pages, bool replaces)
{
	struct lim l = { entries, pinned };
	struct odpx_ctx *ctx = open_limits(entries, pinned, 4 * PG, pinned, 0);
	uint64_t evictions = 0;
	char what[96];

	update_peak_kb = 0;
	track_slots = true;
	for (unsigned i = 0; i < 4; i++) {
		struct odpx_stats a = stats_of(ctx), b;
		unsigned u = tracked_updates;

		snprintf(what, sizeof(what), "replace fits: %lu entries, %lu pages, R%u of %u pages",
			 (unsigned long)entries, (unsigned long)(pinned / PG), 20 + i, pages);
		dereg(ctx, l, reg(ctx, l, R(20 + i), pages * PG, 0, what), what);
		b = stats_of(ctx);
		CHECK(update_peak_kb * 1024 <= (long)pinned, "%s: VmPin %ld kB during a slot update, limit %lu kB",
		      what, update_peak_kb, (unsigned long)(pinned / 1024));
		if (b.evictions == a.evictions)
			continue;
		evictions++;
		CHECK(tracked_updates - u == (replaces ? 1U : 2U), "%s: %u slot updates, want %u", what,
		      tracked_updates - u, replaces ? 1 : 2);
	}
	track_slots = false;
	CHECK(evictions >= 2, "replace fits: %lu evictions in 4 misses", (unsigned long)evictions);
	CHECK_RC(odpx_close(ctx), 0);
}

static void replace_fits(void)
{
	replace_fits_run(64, 4 * PG, 4, false);
	replace_fits_run(2, 4 * PG, 2, false);
	replace_fits_run(2, 16 * PG, 1, true);
	printf("a replace only when both ranges fit max_pinned_bytes\n");
}

/*
 * The evictor picks the least recently released entry, then takes the invalidation lock
 * to kill it; a hit and release in between takes no lock, and makes that
 * entry the most recently released one.  The engine's trim (no the invalidation lock
 * held on entry) is stopped there by holding the invalidation lock, as the monitor
 * holds it while it reads.  E, F, G miss (clock 1, 2, 3), E and F are
 * released, G is released with the invalidation lock held: the unused bytes exceed
 * max_unused_bytes by one entry, and the trim picks E (released at 1).
 * E is hit and released (now at 3) before the lock is dropped: the trim
 * must evict F (2); a trim that checked E's references again but not its
 * stamp would evict E.
 */
static void *hit_release(void *arg)
{
	struct odpx_mr *mr;

	CHECK_RC(odpx_reg(exact_ctx, arg, PG, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
	CHECK_RC(odpx_dereg(exact_ctx, mr), 0);
	return NULL;
}

static void lru_recheck(void)
{
	struct lim l = { 64, 64 * PG };
	struct odpx_ctx *ctx = open_limits(64, 64 * PG, 4 * PG, 2 * PG, 5);
	void *E = R(20), *F = R(21), *G = R(22);
	struct odpx_mr *g;
	struct timespec until;
	pthread_t t;
	int locked = 0;

	touch(ctx, l, 20, 0, "lru recheck: E");
	touch(ctx, l, 21, 0, "lru recheck: F");
	g = reg(ctx, l, G, PG, 0, "lru recheck: G");
	struct odpx_stats s0 = stats_of(ctx), s1;
	monitor_lock();
	CHECK_RC(odpx_dereg(ctx, g), 0);	/* 3 unused pages of 2: the next tick trims */
	/* the trim holds ctx->lock while it waits for the invalidation lock */
	for (double end = now_s() + 5; locked < 50 && now_s() < end;) {
		if (odpx_priv_lock_owner(ctx) == 0) {
			locked = 0;
		} else {
			locked++;
		}
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	}
	CHECK(locked == 50, "lru recheck: the engine's trim did not start in 5 s");
	exact_ctx = ctx;
	CHECK(pthread_create(&t, NULL, hit_release, E) == 0, "pthread_create");
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 5;
	CHECK(pthread_timedjoin_np(t, NULL, &until) == 0, "lru recheck: the hit on E waited for the invalidation lock");
	monitor_unlock();
	CHECK(WAIT_FOR((s1 = stats_of(ctx)).evictions > s0.evictions, 5), "lru recheck: nothing trimmed");
	CHECK(s1.misses == s0.misses && s1.evictions == s0.evictions + 1,
	      "lru recheck: misses %lu -> %lu, evictions %lu -> %lu", (unsigned long)s0.misses,
	      (unsigned long)s1.misses, (unsigned long)s0.evictions, (unsigned long)s1.evictions);
	CHECK(slab_has(ctx, E) && !slab_has(ctx, F) && slab_has(ctx, G),
	      "lru recheck: cached E %d F %d G %d; want E (released last) and G kept, F (least"
	      " recently released) trimmed", slab_has(ctx, E), slab_has(ctx, F), slab_has(ctx, G));
	CHECK_RC(odpx_close(ctx), 0);
	printf("lru recheck: an entry released while the evictor waits for the invalidation lock is kept\n");
}

/*
 * Victims in flight still hold their slots: other misses count them against
 * max_entries as they count their bytes against max_pinned_bytes.  The
 * slab has spare slots (max_entries 4: 5 slots), and the engine's trim
 * evicts 3 of 4 unused entries and is stopped in its first unpin.  A miss
 * meanwhile must evict the fourth and reuse its slot, not take a spare one:
 * taking one would leave 5 ranges registered at once (the wrapper counts
 * the slots that hold one).
 */
static void entries_in_flight(void)
{
	struct lim l = { 4, 64 * PG };
	struct odpx_ctx *ctx;
	struct odpx_mr *held[4], *mr;
	struct timespec until;
	int r;

	CHECK(sem_init(&stalled, 0, 0) == 0 && sem_init(&go_on, 0, 0) == 0, "sem_init");
	memset(slot_used, 0, sizeof(slot_used));
	atomic_store(&slots_used, 0);
	atomic_store(&slots_used_max, 0);
	track_slots = true;
	ctx = open_limits(4, 64 * PG, 4 * PG, PG, 5);
	for (unsigned i = 0; i < 4; i++)	/* held: nothing to trim yet */
		held[i] = reg(ctx, l, R(20 + i), PG, 0, "entries in flight: fill");
	atomic_store(&stall_unpin, 1);
	for (unsigned i = 0; i < 4; i++)
		CHECK_RC(odpx_dereg(ctx, held[i]), 0);
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 5;
	CHECK(sem_timedwait(&stalled, &until) == 0, "entries in flight: no trim in 5 s");
	r = odpx_reg(ctx, R(30), PG, ODPX_ACCESS_LOCAL_WRITE, &mr);
	int most = atomic_load(&slots_used_max);
	sem_post(&go_on);
	CHECK(r == 0, "entries in flight: a miss during the trim: %d (%s)", r, strerror(-r));
	CHECK(most <= 4, "entries in flight: %d ranges registered at once, max_entries 4", most);
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	CHECK(WAIT_FOR(releasing(ctx) == 0, 5), "entries in flight: the trim did not end");
	check_limits(ctx, l, "entries in flight");
	track_slots = false;
	CHECK_RC(odpx_close(ctx), 0);
	sem_destroy(&stalled);
	sem_destroy(&go_on);
	printf("entries in flight count against max_entries\n");
}

/*
 * A miss refused while entries are on their way back waits for them about
 * 40 ms, twice (docs/design.md), not counting its own victims, which are back
 * before it waits.  16 pages: H (4) held, V (8) then W (2) released.  A
 * misses 4 pages, evicts V and is stopped in V's unpin.  B misses 6: it
 * evicts W and still does not fit while V is pinned, so it waits twice for
 * V, which does not come, and is refused after the two bounded waits: W
 * (evicted by B itself) is not counted among what is coming, which would end
 * its first wait at once.  The upper bound only says that the refusal comes
 * (no wait for V itself); it is loose, for a loaded machine.
 */
static void room_wait_run(void)
{
	struct lim l = { 64, 16 * PG };
	struct odpx_ctx *ctx = open_limits(l.entries, l.pinned, 16 * PG, l.pinned, 0);
	unsigned char *b = map_anon(NULL, 64 * PG);
	struct stall_arg a = { ctx, b + 16 * PG, -1, 4 * PG, false };
	struct odpx_mr *h, *mr;
	pthread_t t;
	double t0, ms;
	int r;

	memset(b, 5, 64 * PG);
	CHECK(sem_init(&stalled, 0, 0) == 0 && sem_init(&go_on, 0, 0) == 0, "sem_init");
	h = reg(ctx, l, b, 4 * PG, 0, "room wait: H");
	dereg(ctx, l, reg(ctx, l, b + 24 * PG, 8 * PG, 0, "room wait: V"), "room wait: V");
	dereg(ctx, l, reg(ctx, l, b + 36 * PG, 2 * PG, 0, "room wait: W"), "room wait: W");
	CHECK(pthread_create(&t, NULL, stalled_miss, &a) == 0, "pthread_create");
	CHECK(sem_wait(&stalled) == 0, "sem_wait");
	t0 = now_s();
	r = odpx_reg(ctx, b + 40 * PG, 6 * PG, ODPX_ACCESS_LOCAL_WRITE, &mr);
	ms = (now_s() - t0) * 1e3;
	sem_post(&go_on);
	pthread_join(t, NULL);
	CHECK(r == -ENOMEM, "room wait: 6 pages while V is pinned: %d (%s), want -ENOMEM", r, strerror(-r));
	CHECK(ms >= 78 && ms < 2000, "room wait: refused after %.1f ms, want 2 waits of 40 ms", ms);
	CHECK(a.r == 0, "room wait: A = %d (%s)", a.r, strerror(-a.r));
	dereg(ctx, l, reg(ctx, l, b + 40 * PG, 6 * PG, 0, "room wait: V unpinned"), "room wait");
	dereg(ctx, l, h, "room wait");
	CHECK_RC(odpx_close(ctx), 0);
	munmap(b, 64 * PG);
	sem_destroy(&stalled);
	sem_destroy(&go_on);
	printf("room wait: refused after %.1f ms (2 waits of 40 ms)\n", ms);
}

/*
 * An entry that died held is on its way back from the moment its last
 * reference goes, before its holder pushes it on the dead stack (which
 * counts it in ctx->releasing).  max_entries 1: P is held and unmapped (it
 * dies held); the holder's release is played here up to that window (the
 * reference dropped, put_dead() not yet called: a preemption there), and
 * another page misses.  Nothing is held: the miss must wait for P, which
 * a thread pushes 2 ms later, not fail at once with -ENOMEM "every entry is
 * in use" because ctx->releasing is 0.
 */
static uint32_t dead_slot;

static void *late_put_dead(void *arg)
{
	(void)arg;
	nanosleep(&(struct timespec){ 0, 2000000 }, NULL);
	odpx_priv_put_dead(exact_ctx, dead_slot);
	return NULL;
}

static void dead_coming(void)
{
	struct odpx_ctx *ctx = open_limits(1, 64 * PG, 16 * PG, 64 * PG, 0);
	unsigned char *p = map_anon(NULL, PG), *q = map_anon(NULL, PG);
	struct odpx_mr *held, *mr;
	uint32_t e;
	pthread_t t;
	double t0;
	int r;

	memset(p, 1, PG);
	memset(q, 2, PG);
	CHECK_RC(odpx_reg(ctx, p, PG, ODPX_ACCESS_LOCAL_WRITE, &held), 0);
	e = slot_of(ctx, held);
	CHECK(munmap(p, PG) == 0, "munmap");
	CHECK(WAIT_FOR(state_of(ctx, e) == ODPX_PRIV_DEAD, 5), "dead coming: P did not die");
	/* put_ref() up to put_dead(): the last reference is gone */
	CHECK(odpx_priv_unref(ctx, e) == 1, "dead coming: P held twice");
	exact_ctx = ctx;
	dead_slot = e;
	CHECK(pthread_create(&t, NULL, late_put_dead, NULL) == 0, "pthread_create");
	t0 = now_s();
	r = odpx_reg(ctx, q, PG, ODPX_ACCESS_LOCAL_WRITE, &mr);
	CHECK(r == 0, "dead coming: a miss with nothing held, P on its way back: %d (%s) after %.1f ms;"
	      " reason: %s", r, strerror(-r), (now_s() - t0) * 1e3, odpx_last_reason());
	pthread_join(t, NULL);
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	CHECK_RC(odpx_close(ctx), 0);
	munmap(q, PG);
	printf("dead coming: a miss waits for an entry whose last holder has not pushed it yet\n");
}

/*
 * The same window, once another scan of the LRU has met the dead entry.
 * - Held: max_entries 1, P held and unmapped; a miss then is refused (P is
 *   in use), and its scan met P dead.  P's holder releases it up to
 *   put_dead(), pushed 2 ms later: the next miss must wait for P.  The old
 *   code took P out of the LRU at the first scan, so the second found
 *   nothing there and nothing counted: -ENOMEM at once, nothing held.
 * - Two misses: max_entries 2, P1 and P2 die held and are released up to
 *   put_dead(), pushed 20 ms later.  A misses from a thread, B 5 ms after:
 *   both fit once P1 and P2 are back, even though the first miss's scan
 *   takes both out of the LRU: the second must not be refused at once.
 */
struct late_arg { struct odpx_ctx *ctx; uint32_t e[2]; unsigned n; long delay_ns; };
struct hold_arg { struct odpx_ctx *ctx; void *p; int r; struct odpx_mr *mr; };

static void *reg_hold(void *arg)
{
	struct hold_arg *a = arg;

	a->r = odpx_reg(a->ctx, a->p, PG, ODPX_ACCESS_LOCAL_WRITE, &a->mr);
	return NULL;
}

static void *late_put_deads(void *arg)
{
	struct late_arg *a = arg;

	nanosleep(&(struct timespec){ 0, a->delay_ns }, NULL);
	for (unsigned i = 0; i < a->n; i++)
		odpx_priv_put_dead(a->ctx, a->e[i]);
	return NULL;
}

/* a held entry of @p dies, and its holder's release stops short of put_dead() */
static uint32_t die_unpushed(struct odpx_ctx *ctx, unsigned char *p, bool release,
			     const char *what)
{
	struct odpx_mr *held;
	uint32_t e;

	CHECK_RC(odpx_reg(ctx, p, PG, ODPX_ACCESS_LOCAL_WRITE, &held), 0);
	e = slot_of(ctx, held);
	CHECK(munmap(p, PG) == 0, "munmap");
	CHECK(WAIT_FOR(state_of(ctx, e) == ODPX_PRIV_DEAD, 5), "%s: did not die", what);
	if (release)
		CHECK(odpx_priv_unref(ctx, e) == 1, "%s: held twice", what);
	return e;
}

static void dead_met_before(void)
{
	struct odpx_ctx *ctx = open_limits(1, 64 * PG, 16 * PG, 64 * PG, 0);
	unsigned char *q = map_anon(NULL, 2 * PG);
	struct late_arg la = { ctx, { 0, 0 }, 1, 2000000 };
	struct hold_arg a;
	struct odpx_mr *mr, *mr2;
	pthread_t t, ta;
	double t0;
	int r;

	memset(q, 2, 2 * PG);
	la.e[0] = die_unpushed(ctx, map_anon(NULL, PG), false, "dead met: P");
	CHECK_RC(odpx_reg(ctx, q, PG, ODPX_ACCESS_LOCAL_WRITE, &mr), -ENOMEM);	/* P is held */
	CHECK(odpx_priv_unref(ctx, la.e[0]) == 1, "dead met: P held twice");
	CHECK(pthread_create(&t, NULL, late_put_deads, &la) == 0, "pthread_create");
	t0 = now_s();
	r = odpx_reg(ctx, q, PG, ODPX_ACCESS_LOCAL_WRITE, &mr);
	CHECK(r == 0, "dead met: a miss with nothing held, P (met dead before) on its way back:"
	      " %d (%s) after %.1f ms; reason: %s", r, strerror(-r), (now_s() - t0) * 1e3,
	      odpx_last_reason());
	pthread_join(t, NULL);
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	CHECK_RC(odpx_close(ctx), 0);

	/* two misses, two entries on their way back */
	ctx = open_limits(2, 64 * PG, 16 * PG, 64 * PG, 0);
	la = (struct late_arg){ ctx, { 0, 0 }, 2, 20000000 };
	for (unsigned i = 0; i < 2; i++)
		la.e[i] = die_unpushed(ctx, map_anon(NULL, PG), true, "dead met: P1, P2");
	a = (struct hold_arg){ ctx, q, -1, NULL };
	CHECK(pthread_create(&t, NULL, late_put_deads, &la) == 0, "pthread_create");
	CHECK(pthread_create(&ta, NULL, reg_hold, &a) == 0, "pthread_create");
	nanosleep(&(struct timespec){ 0, 5000000 }, NULL);
	t0 = now_s();
	r = odpx_reg(ctx, q + PG, PG, ODPX_ACCESS_LOCAL_WRITE, &mr2);
	CHECK(r == 0, "dead met: B, two entries on their way back and A's miss: %d (%s) after %.1f ms;"
	      " reason: %s", r, strerror(-r), (now_s() - t0) * 1e3, odpx_last_reason());
	pthread_join(ta, NULL);
	pthread_join(t, NULL);
	CHECK(a.r == 0, "dead met: A = %d (%s)", a.r, strerror(-a.r));
	CHECK_RC(odpx_dereg(ctx, mr2), 0);
	CHECK_RC(odpx_dereg(ctx, a.mr), 0);
	CHECK_RC(odpx_close(ctx), 0);
	munmap(q, 2 * PG);
	printf("dead met before: a later scan of the LRU still waits for a dead entry\n");
}

int main(void)
{
	pin0 = vm_pinned_kb();
	CHECK(pin0 >= 0, "no VmPin in /proc/self/status");
	arena = map_anon(NULL, SLOTS * 4 * PG);
	memset(arena, 1, SLOTS * 4 * PG);

	lru_simple();
	pinned_cap();
	all_in_use();
	unused_cap();
	unused_exact();
	lru_relinked();
	lru_recheck();
	lru_model();
	merge_cap();
	direct_counts();
	replace_evict();
	replace_fits();
	no_false_enomem();
	dead_coming();
	dead_met_before();
	victims_charged();
	victims_freed_before_pin();
	entries_in_flight();
	room_wait_run();
	CHECK(run_forked(NULL, replace_memlock_child, NULL) == 0, "replace over RLIMIT_MEMLOCK failed");
	CHECK(vm_pinned_kb() == pin0, "VmPin %ld kB after close, baseline %ld", vm_pinned_kb(), pin0);
	printf("ok\n");
	return 0;
}
