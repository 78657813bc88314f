// SPDX-License-Identifier: MIT
/*
 * prefetch: hints are queued without blocking, coalesced, and in pin mode
 * pre-pinned into the cache by the engine.
 *
 * - prefetch_coalesce(), the pure function behind the engine's batches: a
 *   table of inputs and merged outputs (overlap, adjacency, containment,
 *   order, flags: only hints of the same flags merge);
 *   and, with a cap (max_entry_bytes in pin mode), no union beyond it, and
 *   the index of each output range's first input;
 * - pin mode: after prefetch_issued, odpx_reg of the hinted range is a hit
 *   with no new miss; a hint over unmapped memory counts prefetch_failed and
 *   the engine goes on; a direct-mode context counts and drops hints;
 * - pin mode, hints served in one batch: adjacent hints whose union exceeds
 *   max_entry_bytes are each pre-pinned, and a union that fails (it reaches
 *   read-only memory) is served hint by hint: only the read-only one fails;
 * - the engine is held inside a pin (the application's own userfaultfd sits
 *   on the page it pins, and answers only when told): odpx_prefetch still
 *   returns at once, the queue takes PREFETCH_QLEN hints, then -EAGAIN,
 *   each counted in prefetch_dropped;
 * - thousands of small overlapping and adjacent hints over one range collapse:
 *   prefetch_merged large, prefetch_issued small, and queued == merged +
 *   issued + failed once the engine is done.
 * - odpx_close() with hints still queued leaves the monitor with no context;
 * Without the privilege for a userfaultfd that handles kernel faults, the
 * queue is flooded from several threads instead, and either outcome is
 * accepted as long as queued + dropped == attempts.
 */
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>

#include "test.h"
#include "odpx-private.h"	/* prefetch_coalesce, PREFETCH_QLEN, engine_asleep, monitor_usage */

#define PG 4096UL
#define U(x) ((unsigned long)(x))

/* ---- prefetch_coalesce ---- */

#define W ODPX_PREFETCH_WRITE
#define NF ODPX_PREFETCH_NO_FAULT
#define MAXR 8

struct coalesce_case {
	const char *name;
	size_t n;
	struct pf_range in[MAXR];
	size_t m;
	struct pf_range out[MAXR];
};

static const struct coalesce_case cases[] = {
	{ "empty", 0, {}, 0, {} },
	{ "one", 1, { { 0x1000, 0x3000, W } }, 1, { { 0x1000, 0x3000, W } } },
	{ "overlap", 2, { { 0x0000, 0xa000, 0 }, { 0x5000, 0xf000, 0 } }, 1, { { 0x0000, 0xf000, 0 } } },
	{ "overlap, reversed", 2, { { 0x5000, 0xf000, 0 }, { 0x0000, 0xa000, 0 } }, 1,
	  { { 0x0000, 0xf000, 0 } } },
	{ "adjacent", 2, { { 0x0000, 0xa000, 0 }, { 0xa000, 0x14000, 0 } }, 1, { { 0x0000, 0x14000, 0 } } },
	{ "one page apart", 2, { { 0x0000, 0x2000, 0 }, { 0x3000, 0x4000, 0 } }, 2,
	  { { 0x0000, 0x2000, 0 }, { 0x3000, 0x4000, 0 } } },
	{ "containment", 2, { { 0x0000, 0x64000, 0 }, { 0xa000, 0x14000, 0 } }, 1, { { 0x0000, 0x64000, 0 } } },
	{ "containment, inner first", 2, { { 0xa000, 0x14000, 0 }, { 0x0000, 0x64000, 0 } }, 1,
	  { { 0x0000, 0x64000, 0 } } },
	{ "same start, shorter second", 2, { { 0x0000, 0x8000, 0 }, { 0x0000, 0x2000, 0 } }, 1,
	  { { 0x0000, 0x8000, 0 } } },
	{ "duplicates", 4, { { 0x4000, 0x5000, NF }, { 0x4000, 0x5000, NF }, { 0x4000, 0x5000, NF },
			     { 0x4000, 0x5000, NF } }, 1, { { 0x4000, 0x5000, NF } } },
	{ "disjoint, unsorted", 3, { { 0x50000, 0x60000, W }, { 0x0000, 0x10000, NF }, { 0x20000, 0x30000, 0 } }, 3,
	  { { 0x0000, 0x10000, NF }, { 0x20000, 0x30000, 0 }, { 0x50000, 0x60000, W } } },
	{ "two chains", 5, { { 0x18000, 0x1e000, 0 }, { 0x0000, 0x5000, 0 }, { 0x9000, 0xc000, 0 },
			     { 0x4000, 0x9000, 0 }, { 0x14000, 0x19000, 0 } }, 2,
	  { { 0x0000, 0xc000, 0 }, { 0x14000, 0x1e000, 0 } } },
	/* flags never mix: a read hint over read-only memory must not become a write */
	{ "write and read overlapping", 2, { { 0x0000, 0x2000, 0 }, { 0x1000, 0x3000, W } }, 2,
	  { { 0x0000, 0x2000, 0 }, { 0x1000, 0x3000, W } } },
	{ "write and read adjacent", 2, { { 0x0000, 0x2000, W }, { 0x2000, 0x3000, 0 } }, 2,
	  { { 0x0000, 0x2000, W }, { 0x2000, 0x3000, 0 } } },
	{ "no-fault and fault adjacent", 2, { { 0x0000, 0x2000, NF }, { 0x2000, 0x3000, 0 } }, 2,
	  { { 0x0000, 0x2000, NF }, { 0x2000, 0x3000, 0 } } },
	{ "no-fault in a chain", 3, { { 0x0000, 0x2000, NF }, { 0x2000, 0x4000, NF }, { 0x4000, 0x6000, NF } }, 1,
	  { { 0x0000, 0x6000, NF } } },
	{ "write and no-fault", 2, { { 0x0000, 0x2000, W | NF }, { 0x1000, 0x3000, W | NF } }, 1,
	  { { 0x0000, 0x3000, W | NF } } },
	{ "contained hint of other flags", 2, { { 0x0000, 0x8000, NF }, { 0x2000, 0x3000, W } }, 2,
	  { { 0x0000, 0x8000, NF }, { 0x2000, 0x3000, W } } },
	{ "no-fault if both", 2, { { 0x0000, 0x2000, NF }, { 0x1000, 0x3000, NF } }, 1, { { 0x0000, 0x3000, NF } } },
	{ "flags stay apart", 2, { { 0x0000, 0x2000, W }, { 0x3000, 0x4000, NF } }, 2,
	  { { 0x0000, 0x2000, W }, { 0x3000, 0x4000, NF } } },
};

/* A cap of 16 pages: [inputs], then per output range its bounds and first input. */
static void coalesce_capped(void)
{
	static const struct {
		const char *name;
		size_t n;
		struct pf_range in[4];
		size_t m;
		struct { uint64_t start, end; uint32_t first; } out[4];
	} cc[] = {
		{ "adjacent, each 12 pages", 3, { { 0x18000, 0x24000, 0 }, { 0x0000, 0xc000, 0 },
						  { 0xc000, 0x18000, 0 } }, 3,
		  { { 0x0000, 0xc000, 0 }, { 0xc000, 0x18000, 1 }, { 0x18000, 0x24000, 2 } } },
		{ "two merge up to the cap, the third not", 3, { { 0x8000, 0x14000, 0 },
			{ 0x0000, 0x4000, 0 }, { 0x4000, 0x8000, 0 } }, 2,
		  { { 0x0000, 0x8000, 0 }, { 0x8000, 0x14000, 2 } } },
		{ "exactly the cap", 2, { { 0x0000, 0x8000, 0 }, { 0x8000, 0x10000, 0 } }, 1,
		  { { 0x0000, 0x10000, 0 } } },
		{ "contained: no growth, merged", 2, { { 0x0000, 0x10000, 0 }, { 0x4000, 0x8000, 0 } }, 1,
		  { { 0x0000, 0x10000, 0 } } },
		{ "overlapping beyond the cap: apart", 2, { { 0x8000, 0x14000, 0 }, { 0x0000, 0xc000, 0 } }, 2,
		  { { 0x0000, 0xc000, 0 }, { 0x8000, 0x14000, 1 } } },
	};
	struct pf_range r[4];
	uint32_t first[4];

	for (size_t c = 0; c < sizeof(cc) / sizeof(cc[0]); c++) {
		size_t m;

		memcpy(r, cc[c].in, sizeof(r));
		m = prefetch_coalesce(r, cc[c].n, 16 * PG, first);
		CHECK(m == cc[c].m, "capped \"%s\": %zu ranges, want %zu", cc[c].name, m, cc[c].m);
		for (size_t i = 0; i < m; i++)
			CHECK(r[i].start == cc[c].out[i].start && r[i].end == cc[c].out[i].end &&
			      first[i] == cc[c].out[i].first,
			      "capped \"%s\": [%zu] = %#lx-%#lx first %u, want %#lx-%#lx first %u",
			      cc[c].name, i, U(r[i].start), U(r[i].end), first[i], U(cc[c].out[i].start),
			      U(cc[c].out[i].end), cc[c].out[i].first);
	}
}

static void coalesce_table(void)
{
	struct pf_range r[300];
	size_t m;

	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		const struct coalesce_case *t = &cases[c];

		memcpy(r, t->in, sizeof(t->in));
		m = prefetch_coalesce(r, t->n, UINT64_MAX, NULL);
		CHECK(m == t->m, "coalesce \"%s\": %zu ranges, want %zu", t->name, m, t->m);
		for (size_t i = 0; i < m; i++)
			CHECK(r[i].start == t->out[i].start && r[i].end == t->out[i].end &&
			      r[i].flags == t->out[i].flags,
			      "coalesce \"%s\": [%zu] = %#lx-%#lx flags %#x, want %#lx-%#lx flags %#x", t->name, i,
			      U(r[i].start), U(r[i].end), r[i].flags, U(t->out[i].start), U(t->out[i].end),
			      t->out[i].flags);
	}
	/* a whole batch: 256 adjacent pages in reverse order, page 155 without no-fault */
	for (size_t i = 0; i < 256; i++)
		r[i] = (struct pf_range){ (255 - i) * PG, (256 - i) * PG, i == 100 ? 0 : NF };
	m = prefetch_coalesce(r, 256, UINT64_MAX, NULL);
	CHECK(m == 3 && r[0].start == 0 && r[0].end == 155 * PG && r[0].flags == NF &&
	      r[1].start == 155 * PG && r[1].end == 156 * PG && r[1].flags == 0 &&
	      r[2].start == 156 * PG && r[2].end == 256 * PG && r[2].flags == NF,
	      "coalesce of 256 adjacent pages: %zu ranges, first %#lx-%#lx flags %#x", m, U(r[0].start),
	      U(r[0].end), r[0].flags);
	/* every other page: nothing merges, the output is sorted */
	for (size_t i = 0; i < 256; i++)
		r[i] = (struct pf_range){ (2 * (255 - i)) * PG, (2 * (255 - i) + 1) * PG, W };
	m = prefetch_coalesce(r, 256, UINT64_MAX, NULL);
	CHECK(m == 256, "coalesce of 256 separate pages: %zu ranges", m);
	for (size_t i = 0; i < 256; i++)
		CHECK(r[i].start == 2 * i * PG && r[i].end == (2 * i + 1) * PG && r[i].flags == W,
		      "coalesce of separate pages: [%zu] = %#lx-%#lx", i, U(r[i].start), U(r[i].end));
	coalesce_capped();
}

/* ---- the engine ---- */

static struct odpx_ctx *ctx;

/* Every queued hint handled: merged, issued or failed. */
static int drained(struct odpx_stats *st)
{
	*st = stats_of(ctx);
	return st->prefetch_merged + st->prefetch_issued + st->prefetch_failed == st->prefetch_queued;
}

static void prepin(void)
{
	unsigned char *p = map_anon(NULL, 16 * PG), *hole = map_anon(NULL, 3 * PG);
	struct odpx_stats st0 = stats_of(ctx), st1, st2;
	struct odpx_mr *mr;

	memset(p, 3, 16 * PG);
	CHECK_RC(odpx_prefetch(ctx, p + 100, 15 * PG, ODPX_PREFETCH_WRITE), 0);
	CHECK(WAIT_FOR((st1 = stats_of(ctx)).prefetch_issued == st0.prefetch_issued + 1, 5),
	      "prefetch not issued (queued %lu, issued %lu, failed %lu)", U(st1.prefetch_queued),
	      U(st1.prefetch_issued), U(st1.prefetch_failed));
	CHECK(st1.prefetch_queued == st0.prefetch_queued + 1, "prefetch_queued %lu -> %lu",
	      U(st0.prefetch_queued), U(st1.prefetch_queued));
	CHECK(st1.entries == st0.entries + 1 && st1.unused_bytes >= 16 * PG,
	      "pre-pinned entry not left in the cache unused (entries %lu, unused_bytes %lu)", U(st1.entries),
	      U(st1.unused_bytes));
	CHECK_RC(odpx_reg(ctx, p + 200, 10 * PG, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
	st2 = stats_of(ctx);
	CHECK(st2.misses == st1.misses && st2.hits == st1.hits + 1 && st2.pins == st1.pins,
	      "odpx_reg after the prefetch is not a hit (misses %lu -> %lu, pins %lu -> %lu)", U(st1.misses),
	      U(st2.misses), U(st1.pins), U(st2.pins));
	CHECK(data_check(ctx, mr, p + 200, 10 * PG, 1), "pre-pinned registration: wrong bytes");
	CHECK_RC(odpx_dereg(ctx, mr), 0);

	/* a hint over unmapped memory fails in the engine, which goes on */
	CHECK(munmap(hole + PG, PG) == 0, "munmap");
	st0 = stats_of(ctx);
	CHECK_RC(odpx_prefetch(ctx, hole + PG, PG, 0), 0);
	CHECK(WAIT_FOR(stats_of(ctx).prefetch_failed == st0.prefetch_failed + 1, 5),
	      "prefetch of unmapped memory: prefetch_failed %lu -> %lu", U(st0.prefetch_failed),
	      U(stats_of(ctx).prefetch_failed));
	CHECK(stats_of(ctx).entries == st0.entries, "a failed prefetch left an entry");
	CHECK_RC(odpx_prefetch(ctx, hole, PG, 0), 0);
	CHECK(WAIT_FOR(stats_of(ctx).prefetch_issued == st0.prefetch_issued + 1, 5),
	      "the engine stopped after a failed prefetch");
	munmap(hole, PG);
	munmap(hole + 2 * PG, PG);

	munmap(p, 16 * PG);
}

/*
 * The same hint again right after the range was unmapped and mapped anew
 * (free + malloc of the same size does that): its entry died, so the engine
 * must pin it again, whatever hints it served just before.
 */
static unsigned char *remap_buf;	/* mapped first: no address reused from earlier hints */

static void prepin_after_remap(void)
{
	unsigned char *p = remap_buf;
	struct odpx_stats st0, st1, st2;
	struct odpx_mr *mr;

	memset(p, 3, 16 * PG);
	st0 = stats_of(ctx);
	CHECK_RC(odpx_prefetch(ctx, p + 100, 15 * PG, ODPX_PREFETCH_WRITE), 0);
	CHECK(WAIT_FOR(stats_of(ctx).prefetch_issued == st0.prefetch_issued + 1, 5), "prefetch not issued");
	CHECK(WAIT_FOR(drained(&st0), 5), "the engine did not drain the queue");
	CHECK(munmap(p, 16 * PG) == 0, "munmap");
	CHECK(mmap(p, 16 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0) == p,
	      "mmap at the old address");
	memset(p, 4, 16 * PG);
	CHECK(WAIT_FOR(stats_of(ctx).inval_entries > st0.inval_entries, 5), "the munmap was not seen");
	st0 = stats_of(ctx);
	CHECK_RC(odpx_prefetch(ctx, p + 100, 15 * PG, ODPX_PREFETCH_WRITE), 0);
	CHECK(WAIT_FOR(drained(&st1), 5), "the engine did not drain the queue");
	CHECK_RC(odpx_reg(ctx, p, 16 * PG, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
	st2 = stats_of(ctx);
	CHECK(st2.misses == st1.misses,
	      "a hint for memory mapped anew was not pre-pinned (issued %lu -> %lu, merged %lu -> %lu,"
	      " failed %lu -> %lu; miss_retries %lu, direct_regs %lu, direct_racing %lu ->"
	      " %lu, %lu, %lu): the engine took it for a repeat of the hint served before the"
	      " munmap, or served it direct",
	      U(st0.prefetch_issued), U(st1.prefetch_issued), U(st0.prefetch_merged), U(st1.prefetch_merged),
	      U(st0.prefetch_failed), U(st1.prefetch_failed), U(st0.miss_retries), U(st0.direct_regs),
	      U(st0.direct_racing), U(st2.miss_retries), U(st2.direct_regs), U(st2.direct_racing));
	CHECK(data_check(ctx, mr, p, 16 * PG, 3), "pre-pinned after remap: wrong bytes");
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	munmap(p, 16 * PG);
}

/*
 * The engine's linger (engine.c): after serving work it waits on a timeout,
 * not on its doorbell, so a hint meanwhile makes no system call and is
 * served when the linger ends; a linger that finds nothing puts the engine
 * back on the doorbell, and the next hint rings it.  A 1 s linger and a 60 s
 * tick keep the three phases apart by far more than a scheduling delay.
 * A linger of 0: never, every hint after a drain rings.  The attribute
 * (ODPX_ATTR_LINGER) wins over the environment (ODPX_ENGINE_LINGER_US), so
 * each is set to the opposite of what the other asks.
 */
static struct odpx_ctx *open_linger(const char *env, long attr_us)
{
	struct odpx_attr a = { .comp_mask = ODPX_ATTR_TICK, .tick_ms = 60000 };
	struct odpx_ctx *c;

	if (attr_us >= 0) {
		a.comp_mask |= ODPX_ATTR_LINGER;
		a.linger_us = (uint32_t)attr_us;
	}
	setenv("ODPX_ENGINE_LINGER_US", env, 1);	/* read by odpx_open */
	CHECK_RC(odpx_open_uring(&a, &c), 0);
	unsetenv("ODPX_ENGINE_LINGER_US");
	return c;
}

static int issued_to(struct odpx_ctx *c, uint64_t n)
{
	return stats_of(c).prefetch_issued == n;
}

#define LINGER_S 1.0
#define LINGER_ROUNDS 5

/*
 * A 1 s linger: a hint during it rings nothing; an empty one ends it.
 * False when the round was inconclusive: the second hint came later than
 * the linger after the first (a slow machine), so it may have found the
 * engine on its doorbell with no fault of the linger's.
 */
static bool lingers(struct odpx_ctx *c, unsigned char *p, const char *how)
{
	struct odpx_stats s0, s1, s2;
	double t0 = now_s(), ms;	/* the linger starts after the first hint is served */
	bool asleep;

	CHECK_RC(odpx_prefetch(c, p, PG, 0), 0);	/* starts the engine and rings it */
	CHECK(WAIT_FOR(issued_to(c, 1), 5), "%s: first hint not served", how);
	s0 = stats_of(c);
	asleep = engine_asleep(c);
	CHECK_RC(odpx_prefetch(c, p + 2 * PG, PG, 0), 0);
	if ((ms = (now_s() - t0) * 1e3) >= LINGER_S * 1e3) {
		printf("%s: inconclusive round: the second hint came %.0f ms after the first, over"
		       " the %.0f ms linger\n", how, ms, LINGER_S * 1e3);
		CHECK_RC(odpx_close(c), 0);
		return false;
	}
	CHECK(!asleep, "%s: the engine went back to its doorbell right after serving a hint", how);
	CHECK(WAIT_FOR(issued_to(c, 2), 5), "%s: a hint queued during a linger was not served", how);
	s1 = stats_of(c);
	CHECK(s1.engine_wakeups == s0.engine_wakeups && s1.engine_lingers == s0.engine_lingers + 1,
	      "%s: a hint during a linger: engine_wakeups %lu -> %lu (a doorbell),"
	      " engine_lingers %lu -> %lu", how, U(s0.engine_wakeups), U(s1.engine_wakeups),
	      U(s0.engine_lingers), U(s1.engine_lingers));
	/* a linger with nothing to serve: back on the doorbell */
	CHECK(WAIT_FOR(engine_asleep(c), 5), "%s: the engine never went back to its doorbell", how);
	s1 = stats_of(c);
	CHECK(s1.engine_lingers == s0.engine_lingers + 2, "%s: engine_lingers %lu, expected %lu",
	      how, U(s1.engine_lingers), U(s0.engine_lingers + 2));
	CHECK_RC(odpx_prefetch(c, p + 4 * PG, PG, 0), 0);
	CHECK(WAIT_FOR(issued_to(c, 3), 5), "%s: a hint to a sleeping engine was not served", how);
	s2 = stats_of(c);
	CHECK(s2.engine_wakeups == s1.engine_wakeups + 1 && s2.engine_lingers == s1.engine_lingers,
	      "%s: a hint to a sleeping engine: engine_wakeups %lu -> %lu, engine_lingers %lu -> %lu",
	      how, U(s1.engine_wakeups), U(s2.engine_wakeups), U(s1.engine_lingers),
	      U(s2.engine_lingers));
	CHECK_RC(odpx_close(c), 0);	/* stops an engine in its linger */
	return true;
}

static void never_lingers(struct odpx_ctx *c, unsigned char *p, const char *how)
{
	struct odpx_stats s0 = { 0 }, s1;

	for (unsigned i = 0; i < 3; i++) {
		CHECK_RC(odpx_prefetch(c, p + 2 * i * PG, PG, 0), 0);
		CHECK(WAIT_FOR(issued_to(c, i + 1), 5), "%s: hint %u not served", how, i);
		CHECK(WAIT_FOR(engine_asleep(c), 5), "%s: the engine did not sleep after hint %u",
		      how, i);
		if (i == 0)	/* the first may be served before the engine first sleeps */
			s0 = stats_of(c);
	}
	s1 = stats_of(c);
	CHECK(s1.engine_lingers == 0 && s1.engine_wakeups == s0.engine_wakeups + 2,
	      "%s: engine_lingers %lu (expected 0), engine_wakeups %lu -> %lu (expected +2)",
	      how, U(s1.engine_lingers), U(s0.engine_wakeups), U(s1.engine_wakeups));
	CHECK_RC(odpx_close(c), 0);
}

static void linger(void)
{
	unsigned char *p = map_anon(NULL, 8 * PG);
	struct odpx_attr a = { .comp_mask = ODPX_ATTR_LINGER, .linger_us = 1000001 };
	struct odpx_ctx *c;

	memset(p, 5, 8 * PG);
	for (int inconclusive = 0; !lingers(open_linger("0", 1000000), p, "ODPX_ATTR_LINGER 1 s");)
		CHECK(++inconclusive < LINGER_ROUNDS, "ODPX_ATTR_LINGER 1 s: no conclusive round in %d",
		      LINGER_ROUNDS);
	never_lingers(open_linger("1000000", 0), p, "ODPX_ATTR_LINGER 0");
	never_lingers(open_linger("0", -1), p, "ODPX_ENGINE_LINGER_US=0");
	/* out of range, either way: refused, nothing opened */
	c = (struct odpx_ctx *)p;
	CHECK_RC(odpx_open_uring(&a, &c), -EINVAL);
	CHECK(c == NULL, "a refused open left *ctx set");
	for (unsigned i = 0; i < 3; i++) {
		static const char *const bad[] = { "1000001", "-1", "100us" };
		setenv("ODPX_ENGINE_LINGER_US", bad[i], 1);
		CHECK_RC(odpx_open_uring(NULL, &c), -EINVAL);
		CHECK(strstr(odpx_last_reason(), "ODPX_ENGINE_LINGER_US") != NULL,
		      "ODPX_ENGINE_LINGER_US=%s refused with reason \"%s\"", bad[i], odpx_last_reason());
	}
	unsetenv("ODPX_ENGINE_LINGER_US");
	munmap(p, 8 * PG);
}

/* Direct mode: nothing to prefetch into; counted, never pinned. */
/*
 * Pin mode, one batch: four adjacent hints of 768 KiB under a 1 MiB
 * max_entry_bytes (merged: one 3 MiB range, E2BIG), then a hint on
 * writable memory beside one on read-only memory (merged: EFAULT, where the
 * first alone pins).  A first hint puts the engine in a 1 s linger, during
 * which the others are queued: it takes them in one batch.  (Were they
 * served apart, the outcome would be the same: each alone.)
 */
#define HINT (768 * 1024UL)
#define SMALL (64 * 1024UL)

static int drained_ctx(struct odpx_ctx *c, struct odpx_stats *st)
{
	*st = stats_of(c);
	return st->prefetch_merged + st->prefetch_issued + st->prefetch_failed == st->prefetch_queued;
}

static void prepin_capped(void)
{
	struct odpx_attr a = { .comp_mask = ODPX_ATTR_LIMITS | ODPX_ATTR_LINGER | ODPX_ATTR_TICK,
			       .linger_us = 1000000, .tick_ms = 60000 };
	unsigned char *prime = map_anon(NULL, PG);
	unsigned char *h = map_anon(NULL, 4 * HINT + PG + 2 * SMALL);
	unsigned char *w = h + 4 * HINT + PG, *ro = w + SMALL;
	struct odpx_stats st0, st1, st2;
	struct odpx_mr *mr;
	struct odpx_ctx *c;

	a.limits.max_entry_bytes = 1 << 20;
	memset(h, 6, 4 * HINT + PG + 2 * SMALL);
	CHECK(munmap(h + 4 * HINT, PG) == 0, "munmap");	/* keeps the two groups apart */
	CHECK(mprotect(ro, SMALL, PROT_READ) == 0, "mprotect");
	CHECK_RC(odpx_open_uring(&a, &c), 0);
	CHECK_RC(odpx_prefetch(c, prime, PG, 0), 0);
	CHECK(WAIT_FOR(issued_to(c, 1), 5), "capped: first hint not served");
	st0 = stats_of(c);
	for (unsigned i = 0; i < 4; i++)
		CHECK_RC(odpx_prefetch(c, h + i * HINT, HINT, 0), 0);
	CHECK_RC(odpx_prefetch(c, w, SMALL, 0), 0);
	CHECK_RC(odpx_prefetch(c, ro, SMALL, 0), 0);
	CHECK(WAIT_FOR(drained_ctx(c, &st1), 10), "capped: the engine did not drain the queue");
	CHECK(st1.prefetch_issued == st0.prefetch_issued + 5 && st1.prefetch_failed == st0.prefetch_failed + 1 &&
	      st1.prefetch_merged == st0.prefetch_merged,
	      "capped: issued +%lu (want 5), failed +%lu (want 1: the read-only hint), merged +%lu (want 0)",
	      U(st1.prefetch_issued - st0.prefetch_issued), U(st1.prefetch_failed - st0.prefetch_failed),
	      U(st1.prefetch_merged - st0.prefetch_merged));
	for (unsigned i = 0; i < 5; i++) {
		unsigned char *p = i < 4 ? h + i * HINT : w;
		size_t len = i < 4 ? HINT : SMALL;

		CHECK_RC(odpx_reg(c, p, len, 0, &mr), 0);
		st2 = stats_of(c);
		CHECK(st2.misses == st1.misses, "capped: hint %u was not pre-pinned (a miss)", i);
		CHECK_RC(odpx_dereg(c, mr), 0);
	}
	CHECK_RC(odpx_close(c), 0);
	munmap(h, 4 * HINT);
	munmap(w, 2 * SMALL);
	munmap(prime, PG);
}

/*
 * Hints into shared memory, whose registrations are served direct: a union
 * served direct is one failure for its hints, and a repeat soon after is
 * skipped, rather than each hint pinned and unpinned again each round.
 */
static void prepin_shared(void)
{
	struct odpx_attr a = { .comp_mask = ODPX_ATTR_LINGER | ODPX_ATTR_TICK,
			       .linger_us = 1000000, .tick_ms = 60000 };
	unsigned char *sh = mmap(NULL, 64 * PG, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
				 -1, 0), *prime = map_anon(NULL, PG);
	struct odpx_stats st0, st1;
	struct odpx_ctx *c;

	CHECK(sh != MAP_FAILED, "mmap shared");
	memset(sh, 7, 64 * PG);
	CHECK_RC(odpx_open_uring(&a, &c), 0);
	CHECK_RC(odpx_prefetch(c, prime, PG, 0), 0);
	CHECK(WAIT_FOR(issued_to(c, 1), 5), "shared: first hint not served");
	st0 = stats_of(c);
	for (unsigned round = 0; round < 10; round++) {
		for (unsigned i = 0; i < 64; i++)
			CHECK_RC(odpx_prefetch(c, sh + i * PG, PG, 0), 0);
		CHECK(WAIT_FOR(drained_ctx(c, &st1), 10), "shared: the engine did not drain the queue");
	}
	CHECK(st1.direct_regs - st0.direct_regs <= 40 && st1.prefetch_issued == st0.prefetch_issued &&
	      st1.prefetch_failed > st0.prefetch_failed,
	      "shared: 640 hints in 10 rounds: %lu direct registrations (want a few a round, at most 40), issued +%lu"
	      " (want 0), failed +%lu", U(st1.direct_regs - st0.direct_regs),
	      U(st1.prefetch_issued - st0.prefetch_issued), U(st1.prefetch_failed - st0.prefetch_failed));
	printf("shared memory: 640 hints in 10 rounds, %lu direct registrations, %lu failed\n",
	       U(st1.direct_regs - st0.direct_regs), U(st1.prefetch_failed - st0.prefetch_failed));
	/* a synchronous one is served direct too: failed, not issued (it was issued) */
	st0 = stats_of(c);
	CHECK_RC(odpx_prefetch(c, sh, PG, ODPX_PREFETCH_SYNC), 0);
	st1 = stats_of(c);
	CHECK(st1.prefetch_issued == st0.prefetch_issued && st1.prefetch_failed == st0.prefetch_failed + 1,
	      "shared: a SYNC hint served direct: issued +%lu, failed +%lu (want 0 and 1)",
	      U(st1.prefetch_issued - st0.prefetch_issued), U(st1.prefetch_failed - st0.prefetch_failed));
	CHECK_RC(odpx_close(c), 0);
	munmap(sh, 64 * PG);
	munmap(prime, PG);
}

static void direct_mode(void)
{
	struct odpx_attr a = { .comp_mask = ODPX_ATTR_MODE, .mode = ODPX_MODE_DIRECT };
	struct odpx_ctx *d;
	unsigned char *p = map_anon(NULL, 4 * PG);
	struct odpx_stats st;

	CHECK_RC(odpx_open_uring(&a, &d), 0);
	for (int i = 0; i < 10; i++)
		CHECK_RC(odpx_prefetch(d, p, 4 * PG, 0), 0);
	st = stats_of(d);
	CHECK(st.prefetch_queued == 10 && st.pins == 0 && st.entries == 0,
	      "direct mode: queued %lu, pins %lu, entries %lu", U(st.prefetch_queued), U(st.pins), U(st.entries));
	CHECK_RC(odpx_close(d), 0);
	munmap(p, 4 * PG);
}

/*
 * The stall: an application userfaultfd (kernel faults allowed) on pages the
 * engine is asked to prefetch.  odpx cannot watch them (EBUSY), so the engine
 * pins them directly, and the pin's fault waits for this resolver, which
 * answers when told to - or after a deadline, recording that it had to.
 */
static int ufd = -1;
static _Atomic int stalled, release, forced, stop;

static void *resolver(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop)) {
		struct pollfd p = { ufd, POLLIN, 0 };
		struct uffd_msg m;

		if (poll(&p, 1, 20) <= 0)
			continue;
		if (read(ufd, &m, sizeof(m)) != sizeof(m) || m.event != UFFD_EVENT_PAGEFAULT)
			continue;
		atomic_store(&stalled, 1);
		double deadline = now_s() + 3;
		while (!atomic_load(&release) && now_s() < deadline) {
			struct timespec t = { 0, 1000000 };
			nanosleep(&t, NULL);
		}
		if (!atomic_load(&release))
			atomic_store(&forced, 1);
		struct uffdio_zeropage z = { .range = { m.arg.pagefault.address & ~(PG - 1), PG } };
		if (ioctl(ufd, UFFDIO_ZEROPAGE, &z) < 0 && errno == EEXIST) {
			struct uffdio_range r = z.range;
			ioctl(ufd, UFFDIO_WAKE, &r);
		}
		atomic_store(&release, 0);
		atomic_store(&stalled, 0);
	}
	return NULL;
}

#define ROUNDS 4
#define EXTRA 10	/* attempts after the first -EAGAIN */

/* Small overlapping and adjacent hints over q[0, 16 pages). */
static int hint(unsigned char *q, unsigned i)
{
	unsigned page = (i * 7) % 16, pages = 1 + i % 3;
	static const uint32_t fl[] = { 0, ODPX_PREFETCH_WRITE, ODPX_PREFETCH_NO_FAULT, 0, ODPX_PREFETCH_WRITE };

	if (page + pages > 16)
		pages = 16 - page;
	return odpx_prefetch(ctx, q + page * PG + (i % 5) * 8, pages * PG - (i % 5) * 8, fl[i % 5]);
}

static unsigned char *stall_pages, *qbuf;	/* mapped first: no address reused from prepin() */

static void queue_full_stalled(void)
{
	unsigned char *s = stall_pages, *q = qbuf;
	struct uffdio_register reg = { .range = { (uintptr_t)s, ROUNDS * PG },
				       .mode = UFFDIO_REGISTER_MODE_MISSING };
	struct odpx_stats st0, st;
	uint64_t attempts = 0, dropped = 0, accepted = 0;
	pthread_t thr;

	memset(q, 5, 16 * PG);
	CHECK(ioctl(ufd, UFFDIO_REGISTER, &reg) == 0, "UFFDIO_REGISTER: %s", strerror(errno));
	CHECK(pthread_create(&thr, NULL, resolver, NULL) == 0, "pthread_create");
	st0 = stats_of(ctx);
	for (unsigned round = 0; round < ROUNDS; round++) {
		unsigned n = 0, extra = 0;
		int r;

		CHECK(WAIT_FOR(drained(&st), 5), "round %u: the engine did not drain the queue", round);
		CHECK_RC(odpx_prefetch(ctx, s + round * PG, PG, 0), 0);	/* the engine pins it: stalls */
		attempts++;
		accepted++;
		CHECK(WAIT_FOR(atomic_load(&stalled), 5), "round %u: the engine never faulted on the stall page", round);
		for (;;) {
			r = hint(q, round * 2000 + n);
			attempts++;
			if (r == -EAGAIN) {
				dropped++;
				if (++extra == EXTRA)
					break;
				continue;
			}
			CHECK_RC(r, 0);
			CHECK(extra == 0, "round %u: a hint accepted after -EAGAIN with the engine stalled", round);
			accepted++;
			n++;
			CHECK(n <= PREFETCH_QLEN, "round %u: more than PREFETCH_QLEN (%d) hints queued", round,
			      PREFETCH_QLEN);
		}
		CHECK(!atomic_load(&forced), "round %u: odpx_prefetch blocked while the engine was busy", round);
		CHECK(n == PREFETCH_QLEN, "round %u: the queue took %u hints, want %d", round, n, PREFETCH_QLEN);
		st = stats_of(ctx);
		CHECK(st.prefetch_dropped == st0.prefetch_dropped + dropped,
		      "round %u: prefetch_dropped %lu -> %lu, want +%lu", round, U(st0.prefetch_dropped),
		      U(st.prefetch_dropped), U(dropped));
		CHECK(st.prefetch_queued == st0.prefetch_queued + accepted,
		      "round %u: prefetch_queued %lu -> %lu, want +%lu", round, U(st0.prefetch_queued),
		      U(st.prefetch_queued), U(accepted));
		atomic_store(&release, 1);
		CHECK(WAIT_FOR(!atomic_load(&stalled), 5), "round %u: the resolver did not run", round);
	}
	CHECK(WAIT_FOR(drained(&st), 5),
	      "the engine did not drain the queue: queued %lu, merged %lu, issued %lu, failed %lu",
	      U(st.prefetch_queued), U(st.prefetch_merged), U(st.prefetch_issued), U(st.prefetch_failed));
	atomic_store(&stop, 1);
	pthread_join(thr, NULL);

	uint64_t queued = st.prefetch_queued - st0.prefetch_queued, merged = st.prefetch_merged - st0.prefetch_merged,
		 issued = st.prefetch_issued - st0.prefetch_issued, failed = st.prefetch_failed - st0.prefetch_failed;
	printf("stalled engine: %lu attempts, %lu queued, %lu dropped, %lu merged, %lu issued, %lu failed\n",
	       U(attempts), U(queued), U(dropped), U(merged), U(issued), U(failed));
	CHECK(queued + dropped == attempts, "queued %lu + dropped %lu != attempts %lu", U(queued), U(dropped),
	      U(attempts));
	/* the stall pages are the test's own userfaultfd's: served direct, nothing cached */
	CHECK(failed == ROUNDS, "%lu prefetches failed, want %d (the stall pages)", U(failed), ROUNDS);
	/* per round: the stall page, then 4 batches of one range each at most */
	CHECK(issued <= ROUNDS * 5, "%lu hints issued for %lu queued: they did not collapse", U(issued), U(queued));
	CHECK(merged >= queued - ROUNDS * 5, "prefetch_merged %lu of %lu queued", U(merged), U(queued));

	/* and the hinted range is in the cache */
	struct odpx_mr *mr;
	st0 = stats_of(ctx);
	CHECK_RC(odpx_reg(ctx, q, 16 * PG, 0, &mr), 0);
	st = stats_of(ctx);
	CHECK(st.misses == st0.misses && st.hits == st0.hits + 1, "the collapsed hints were not pre-pinned");
	CHECK(data_check(ctx, mr, q, 16 * PG, 2), "collapsed hints: wrong bytes");
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	struct uffdio_range ur = { (uintptr_t)s, ROUNDS * PG };
	ioctl(ufd, UFFDIO_UNREGISTER, &ur);
	/* s and q stay mapped: a new mapping at q's address would look recently served */
}

/* No privileged userfaultfd: flood from several threads, accept either outcome. */
#define FLOODERS 4
#define FLOOD 20000
static unsigned char *flood_q;
static _Atomic uint64_t flood_ok, flood_again, flood_other;

static void *flooder(void *arg)
{
	unsigned base = (unsigned)(uintptr_t)arg * FLOOD;

	for (unsigned i = 0; i < FLOOD; i++) {
		int r = hint(flood_q, base + i);
		if (r == 0)
			atomic_fetch_add(&flood_ok, 1);
		else if (r == -EAGAIN)
			atomic_fetch_add(&flood_again, 1);
		else
			atomic_fetch_add(&flood_other, 1);
	}
	return NULL;
}

static void queue_flooded(void)
{
	pthread_t t[FLOODERS];
	struct odpx_stats st0 = stats_of(ctx), st;

	flood_q = map_anon(NULL, 16 * PG);
	for (uintptr_t i = 0; i < FLOODERS; i++)
		CHECK(pthread_create(&t[i], NULL, flooder, (void *)i) == 0, "pthread_create");
	for (int i = 0; i < FLOODERS; i++)
		pthread_join(t[i], NULL);
	CHECK(atomic_load(&flood_other) == 0, "odpx_prefetch returned neither 0 nor -EAGAIN");
	CHECK(WAIT_FOR(drained(&st), 5), "the engine did not drain the queue");
	uint64_t queued = st.prefetch_queued - st0.prefetch_queued, dropped = st.prefetch_dropped - st0.prefetch_dropped;
	printf("flooded: %d attempts, %lu queued, %lu dropped, %lu merged, %lu issued\n", FLOODERS * FLOOD,
	       U(queued), U(dropped), U(st.prefetch_merged - st0.prefetch_merged),
	       U(st.prefetch_issued - st0.prefetch_issued));
	CHECK(queued == atomic_load(&flood_ok) && dropped == atomic_load(&flood_again),
	      "queued %lu (accepted %lu), dropped %lu (-EAGAIN %lu)", U(queued), U(atomic_load(&flood_ok)),
	      U(dropped), U(atomic_load(&flood_again)));
	CHECK(queued + dropped == FLOODERS * FLOOD, "queued + dropped != attempts");
	CHECK(st.prefetch_issued - st0.prefetch_issued < queued / 4, "%lu issued of %lu queued: no collapse",
	      U(st.prefetch_issued - st0.prefetch_issued), U(queued));
}

/*
 * odpx_close() while the engine still has a thousand pin-mode hints queued:
 * a miss the engine serves during the close must not attach the closing
 * context again.  It did: the context stayed on the monitor's list after
 * its free (restarting the monitor if it was the last), and the next event
 * walked freed memory.  Ten rounds; the race took five of six before.
 */
static void close_while_queued(void)
{
	unsigned char *buf = map_anon(NULL, 2048 * PG);

	memset(buf, 1, 2048 * PG);
	for (int round = 0; round < 10; round++) {
		struct odpx_ctx *c = open_pin(0);
		struct odpx_mr *mr;
		unsigned queued = 0;

		CHECK_RC(odpx_reg(c, buf + 2047 * PG, PG, 0, &mr), 0);	/* monitor, engine */
		CHECK_RC(odpx_dereg(c, mr), 0);
		for (unsigned i = 0; i + 2 < 2048; i += 2)
			queued += odpx_prefetch(c, buf + i * PG, PG, 0) == 0;
		CHECK(queued > 0, "no hint queued");
		CHECK_RC(odpx_close(c), 0);
		struct monitor_usage u;
		monitor_usage(&u);
		CHECK(!u.users && !u.running, "round %d, after the close of the only context:"
		      " the monitor has %u users, running %d", round, u.users, u.running);
	}
	munmap(buf, 2048 * PG);
	printf("close with hints queued: the context leaves the monitor for good\n");
}

int main(void)
{
	struct uffdio_api api = { .api = UFFD_API };
	long kb0 = vm_pinned_kb();

	coalesce_table();
	stall_pages = map_anon(NULL, ROUNDS * PG);
	qbuf = map_anon(NULL, 16 * PG);
	remap_buf = map_anon(NULL, 16 * PG);

	ctx = open_pin(0);
	prepin();
	direct_mode();

	ufd = syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
	if (ufd >= 0) {
		CHECK(ioctl(ufd, UFFDIO_API, &api) == 0, "UFFDIO_API: %s", strerror(errno));
		queue_full_stalled();
		close(ufd);
	} else {
		CHECK(errno == EPERM, "userfaultfd: %s", strerror(errno));
		printf("no userfaultfd for kernel faults (EPERM): flooding the queue instead\n");
		queue_flooded();
	}
	prepin_after_remap();
	CHECK_RC(odpx_close(ctx), 0);
	close_while_queued();
	linger();
	prepin_capped();
	prepin_shared();
	CHECK(vm_pinned_kb() == kb0, "VmPin %ld kB after close, baseline %ld", vm_pinned_kb(), kb0);
	munmap(stall_pages, ROUNDS * PG);
	munmap(qbuf, 16 * PG);
	if (flood_q)
		munmap(flood_q, 16 * PG);
	printf("ok\n");
	return 0;
}
