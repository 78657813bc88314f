// SPDX-License-Identifier: MIT
/*
 * api-basic: the public API does what odpx.h says, on the uring backend.
 *
 * - odpx_mode_get: "pin" with a reason on auto; "direct" when ODPX_MODE says
 *   so or the attributes force it (attributes win over the environment);
 *   odpx_mode_str names every mode;
 * - accessors: addr/length cover the request, page-rounded; buf_index in
 *   [0, 16384) and lkey == rkey == buf_index on uring;
 * - odpx_stats_read with a smaller size copies a prefix and touches nothing
 *   after it; a larger size copies the whole struct;
 * - a request inside a cached registration, starting in its middle, is a hit
 *   on that registration;
 * - overlapping requests merge (stats.merges, superseded) into one entry
 *   covering both, which moves the right bytes; a holder of a superseded
 *   entry keeps a valid registration;
 * - direct mode never caches: every odpx_reg pins (stats.pins), every
 *   odpx_dereg unpins;
 * - odpx_close releases what is still held (VmPin back to its baseline);
 * - home slots: pin mode's slab is a prime number of slots, and a pool of
 *   as many buffers as max_entries, at a stride of 1, 3 or 16 pages, has
 *   every entry in its home slot (the one slot the inline hit reads); an
 *   entry that could not get its home slot (another start of the same
 *   bucket holds it) is still found by its hits, with the right bytes.
 */
#include <stddef.h>

#include "test.h"
#include "odpx-private.h"	/* the slab and the hash, for home slots */

#define PG 4096UL
#define U(x) ((unsigned long)(x))

static struct odpx_ctx *open_mode(int use_attr, enum odpx_mode mode)
{
	struct odpx_attr a = { .comp_mask = use_attr ? ODPX_ATTR_MODE : 0, .mode = mode };
	struct odpx_ctx *ctx;

	CHECK_RC(odpx_open_uring(&a, &ctx), 0);
	return ctx;
}

static void expect_mode(struct odpx_ctx *ctx, enum odpx_mode want, const char *word, const char *what)
{
	enum odpx_mode m = ODPX_MODE_RESERVED;
	const char *why = NULL;

	CHECK_RC(odpx_mode_get(ctx, &m, &why), 0);
	CHECK(m == want, "%s: mode %s, want %s", what, odpx_mode_str(m), odpx_mode_str(want));
	CHECK(why && *why, "%s: no reason given for mode %s", what, odpx_mode_str(m));
	if (word)
		CHECK(strstr(why, word), "%s: reason \"%s\" does not mention %s", what, why, word);
	printf("%-28s %-6s %s\n", what, odpx_mode_str(m), why);
	CHECK_RC(odpx_mode_get(ctx, NULL, NULL), 0);
}

static void modes(void)
{
	struct odpx_ctx *ctx;

	CHECK(!strcmp(odpx_mode_str(ODPX_MODE_AUTO), "auto") && !strcmp(odpx_mode_str(ODPX_MODE_PIN), "pin") &&
	      !strcmp(odpx_mode_str(ODPX_MODE_DIRECT), "direct") &&
	      !strcmp(odpx_mode_str(ODPX_MODE_IMPLICIT), "implicit") &&
	      !strcmp(odpx_mode_str(ODPX_MODE_EXPLICIT), "explicit"), "odpx_mode_str");
	CHECK(odpx_mode_str(ODPX_MODE_RESERVED) && odpx_mode_str((enum odpx_mode)-1), "odpx_mode_str(invalid) is NULL");

	unsetenv("ODPX_MODE");
	ctx = open_mode(0, ODPX_MODE_AUTO);
	expect_mode(ctx, ODPX_MODE_PIN, NULL, "auto");
	CHECK_RC(odpx_close(ctx), 0);
	ctx = open_mode(1, ODPX_MODE_AUTO);
	expect_mode(ctx, ODPX_MODE_PIN, NULL, "attr auto");
	CHECK_RC(odpx_close(ctx), 0);
	CHECK_RC(odpx_open_uring(NULL, &ctx), 0);
	expect_mode(ctx, ODPX_MODE_PIN, NULL, "NULL attributes");
	CHECK_RC(odpx_close(ctx), 0);
	ctx = open_mode(1, ODPX_MODE_DIRECT);
	expect_mode(ctx, ODPX_MODE_DIRECT, "attributes", "attr direct");
	CHECK_RC(odpx_close(ctx), 0);
	ctx = open_mode(1, ODPX_MODE_PIN);
	expect_mode(ctx, ODPX_MODE_PIN, NULL, "attr pin");
	CHECK_RC(odpx_close(ctx), 0);

	CHECK(setenv("ODPX_MODE", "direct", 1) == 0, "setenv");
	ctx = open_mode(0, ODPX_MODE_AUTO);
	expect_mode(ctx, ODPX_MODE_DIRECT, "ODPX_MODE", "ODPX_MODE=direct");
	CHECK_RC(odpx_close(ctx), 0);
	ctx = open_mode(1, ODPX_MODE_PIN);	/* the environment overrides AUTO only */
	expect_mode(ctx, ODPX_MODE_PIN, NULL, "ODPX_MODE=direct, attr pin");
	CHECK_RC(odpx_close(ctx), 0);
	CHECK(setenv("ODPX_MODE", "pin", 1) == 0, "setenv");
	ctx = open_mode(0, ODPX_MODE_AUTO);
	expect_mode(ctx, ODPX_MODE_PIN, NULL, "ODPX_MODE=pin");
	CHECK_RC(odpx_close(ctx), 0);
	ctx = open_mode(1, ODPX_MODE_DIRECT);
	expect_mode(ctx, ODPX_MODE_DIRECT, "attributes", "ODPX_MODE=pin, attr direct");
	CHECK_RC(odpx_close(ctx), 0);
	CHECK(setenv("ODPX_MODE", "auto", 1) == 0, "setenv");
	ctx = open_mode(0, ODPX_MODE_AUTO);
	expect_mode(ctx, ODPX_MODE_PIN, NULL, "ODPX_MODE=auto");
	CHECK_RC(odpx_close(ctx), 0);
	unsetenv("ODPX_MODE");
}

/* Attributes asking for AUTO leave the choice to ODPX_MODE: the reason says so. */
static void mode_reason_source(void)
{
	struct odpx_ctx *ctx;

	CHECK(setenv("ODPX_MODE", "direct", 1) == 0, "setenv");
	ctx = open_mode(1, ODPX_MODE_AUTO);
	expect_mode(ctx, ODPX_MODE_DIRECT, "ODPX_MODE", "ODPX_MODE=direct, attr auto");
	CHECK_RC(odpx_close(ctx), 0);
	unsetenv("ODPX_MODE");
}

/* addr/length cover [p, p+len), page-rounded; the uring keys are the slot. */
static void check_accessors(struct odpx_mr *mr, const void *p, size_t len, const char *what)
{
	uintptr_t a = (uintptr_t)odpx_mr_addr(mr), l = odpx_mr_length(mr);
	int idx = odpx_mr_buf_index(mr);

	CHECK(a % PG == 0 && l % PG == 0 && l > 0, "%s: addr %#lx length %#lx not page-rounded", what, U(a), U(l));
	CHECK(a <= (uintptr_t)p && a + l >= (uintptr_t)p + len, "%s: %#lx+%#lx does not cover %p+%#zx", what,
	      U(a), U(l), p, len);
	CHECK(idx >= 0 && idx < 16384, "%s: buf_index %d", what, idx);
	CHECK(odpx_mr_lkey(mr) == (uint32_t)idx && odpx_mr_rkey(mr) == (uint32_t)idx,
	      "%s: lkey %u rkey %u, buf_index %d", what, odpx_mr_lkey(mr), odpx_mr_rkey(mr), idx);
}

static void accessors(struct odpx_ctx *ctx, const char *tag)
{
	unsigned char *p = map_anon(NULL, 16 * PG);
	struct odpx_mr *mr;
	char what[64];
	static const struct { size_t off, len; } req[] = {
		{ 0, 1 }, { 100, 5000 }, { PG - 1, 2 }, { 3 * PG, PG }, { 5 * PG + 17, 3 * PG }, { 0, 16 * PG },
	};

	for (size_t i = 0; i < sizeof(req) / sizeof(req[0]); i++) {
		snprintf(what, sizeof(what), "%s: request %zu", tag, i);
		CHECK_RC(odpx_reg(ctx, p + req[i].off, req[i].len, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
		check_accessors(mr, p + req[i].off, req[i].len, what);
		CHECK(data_check(ctx, mr, p + req[i].off, req[i].len, (unsigned)i), "%s: wrong bytes", what);
		CHECK_RC(odpx_dereg(ctx, mr), 0);
	}
	/* direct mode: exactly the page-rounded request */
	if (!strcmp(tag, "direct")) {
		CHECK_RC(odpx_reg(ctx, p + 100, 5000, 0, &mr), 0);
		CHECK(odpx_mr_addr(mr) == p && odpx_mr_length(mr) == 2 * PG, "direct: %p+%#zx for %p+100,5000",
		      odpx_mr_addr(mr), odpx_mr_length(mr), (void *)p);
		CHECK_RC(odpx_dereg(ctx, mr), 0);
	}
	munmap(p, 16 * PG);
}

static void stats_prefix(struct odpx_ctx *ctx)
{
	struct odpx_stats full, part;
	unsigned char big[sizeof(struct odpx_stats) + 64];
	const size_t cut = offsetof(struct odpx_stats, entries);

	memset(&part, 0xa5, sizeof(part));
	CHECK_RC(odpx_stats_read(ctx, &part, cut), cut);
	full = stats_of(ctx);
	CHECK(!memcmp(&part, &full, cut), "the prefix differs from the full read");
	for (size_t i = cut; i < sizeof(part); i++)
		CHECK(((unsigned char *)&part)[i] == 0xa5, "byte %zu past the %zu asked for was written", i, cut);
	memset(&part, 0xa5, sizeof(part));
	CHECK_RC(odpx_stats_read(ctx, &part, 1), 1);
	CHECK(((unsigned char *)&part)[1] == 0xa5, "byte 1 past a 1-byte read was written");
	memset(big, 0xa5, sizeof(big));
	CHECK_RC(odpx_stats_read(ctx, (struct odpx_stats *)big, sizeof(big)), sizeof(struct odpx_stats));
	for (size_t i = sizeof(struct odpx_stats); i < sizeof(big); i++)
		CHECK(big[i] == 0xa5, "byte %zu past struct odpx_stats was written", i);
}

static struct odpx_mr *reg_expect(struct odpx_ctx *ctx, void *p, size_t len, int want_hit, const char *what)
{
	struct odpx_stats a = stats_of(ctx), b;
	struct odpx_mr *mr;

	CHECK_RC(odpx_reg(ctx, p, len, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
	b = stats_of(ctx);
	if (want_hit)
		CHECK(b.hits == a.hits + 1 && b.misses == a.misses && b.pins == a.pins,
		      "%s: not a hit (hits %lu -> %lu, misses %lu -> %lu)", what, U(a.hits), U(b.hits),
		      U(a.misses), U(b.misses));
	else
		CHECK(b.misses == a.misses + 1 && b.pins == a.pins + 1, "%s: not a miss (hits %lu -> %lu, misses %lu -> %lu)",
		      what, U(a.hits), U(b.hits), U(a.misses), U(b.misses));
	check_accessors(mr, p, len, what);
	return mr;
}

static void interior_hits(struct odpx_ctx *ctx)
{
	unsigned char *p = map_anon(NULL, 32 * PG);
	struct odpx_mr *whole, *mr;

	whole = reg_expect(ctx, p, 16 * PG, 0, "interior: whole");
	CHECK_RC(odpx_dereg(ctx, whole), 0);
	static const struct { size_t off, len; } in[] = {
		{ 5 * PG + 1234, 3000 }, { 8 * PG, PG }, { 15 * PG, PG }, { 15 * PG + PG - 1, 1 }, { 1, 16 * PG - 1 },
		{ 7 * PG - 10, 20 },
	};
	for (size_t i = 0; i < sizeof(in) / sizeof(in[0]); i++) {
		char what[64];
		snprintf(what, sizeof(what), "interior hit %zu (+%#zx, %#zx)", i, in[i].off, in[i].len);
		mr = reg_expect(ctx, p + in[i].off, in[i].len, 1, what);
		CHECK(odpx_priv_same(ctx, mr, whole) && odpx_mr_addr(mr) == p &&
		      odpx_mr_length(mr) == 16 * PG,
		      "%s: not the cached registration", what);
		CHECK(data_check(ctx, mr, p + in[i].off, in[i].len, 10 + (unsigned)i), "%s: wrong bytes", what);
		CHECK_RC(odpx_dereg(ctx, mr), 0);
	}
	/* one byte past the end is not covered */
	mr = reg_expect(ctx, p + 15 * PG, PG + 1, 0, "interior: one byte past the end");
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	munmap(p, 32 * PG);
}

static void merges(struct odpx_ctx *ctx)
{
	unsigned char *q = map_anon(NULL, 64 * PG);
	struct odpx_mr *a, *b, *c, *mr;
	struct odpx_stats s0, s1;

	/* released entry, overlapping request */
	a = reg_expect(ctx, q, 4 * PG, 0, "merge: first");
	CHECK_RC(odpx_dereg(ctx, a), 0);
	s0 = stats_of(ctx);
	b = reg_expect(ctx, q + 2 * PG, 4 * PG, 0, "merge: overlapping");
	s1 = stats_of(ctx);
	CHECK(s1.merges == s0.merges + 1 && s1.superseded == s0.superseded + 1,
	      "merges %lu -> %lu, superseded %lu -> %lu", U(s0.merges), U(s1.merges), U(s0.superseded),
	      U(s1.superseded));
	CHECK(odpx_mr_addr(b) == q && odpx_mr_length(b) == 6 * PG, "merged entry %p+%#zx, want %p+%#lx",
	      odpx_mr_addr(b), odpx_mr_length(b), (void *)q, 6 * PG);
	CHECK(data_check(ctx, b, q, 6 * PG, 20), "merged entry: wrong bytes");
	CHECK_RC(odpx_dereg(ctx, b), 0);
	CHECK(WAIT_FOR(stats_of(ctx).entries == s0.entries, 5), "the superseded entry was not reaped: entries %lu, want %lu",
	      U(stats_of(ctx).entries), U(s0.entries));
	mr = reg_expect(ctx, q, PG, 1, "merge: first part again");
	CHECK(odpx_priv_same(ctx, mr, b), "not the merged entry");
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	mr = reg_expect(ctx, q + 5 * PG, PG, 1, "merge: last part again");
	CHECK_RC(odpx_dereg(ctx, mr), 0);

	/* a bridge over two entries, one of them held */
	unsigned char *r = q + 16 * PG;
	a = reg_expect(ctx, r, 2 * PG, 0, "bridge: left");
	c = reg_expect(ctx, r + 4 * PG, 2 * PG, 0, "bridge: right");
	CHECK_RC(odpx_dereg(ctx, c), 0);
	s0 = stats_of(ctx);
	b = reg_expect(ctx, r + PG, 4 * PG, 0, "bridge");
	s1 = stats_of(ctx);
	CHECK(s1.merges == s0.merges + 1 && s1.superseded == s0.superseded + 2,
	      "bridge: merges %lu -> %lu, superseded %lu -> %lu", U(s0.merges), U(s1.merges),
	      U(s0.superseded), U(s1.superseded));
	CHECK(odpx_mr_addr(b) == r && odpx_mr_length(b) == 6 * PG, "bridge: %p+%#zx, want %p+%#lx",
	      odpx_mr_addr(b), odpx_mr_length(b), (void *)r, 6 * PG);
	CHECK(data_check(ctx, b, r, 6 * PG, 21), "bridge: wrong bytes");
	/* the superseded, held entry still moves the right bytes */
	CHECK(odpx_mr_addr(a) == r && odpx_mr_length(a) == 2 * PG, "the held, superseded handle changed");
	CHECK(data_check(ctx, a, r, 2 * PG, 22), "held superseded entry: wrong bytes");
	CHECK_RC(odpx_dereg(ctx, a), 0);
	CHECK_RC(odpx_dereg(ctx, b), 0);
	mr = reg_expect(ctx, r + 5 * PG, PG, 1, "bridge: right part again");
	CHECK(odpx_priv_same(ctx, mr, b), "not the bridge entry");
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	munmap(q, 64 * PG);
}

static void direct_never_cached(void)
{
	struct odpx_ctx *ctx = open_mode(1, ODPX_MODE_DIRECT);
	unsigned char *p = map_anon(NULL, 8 * PG);
	struct odpx_mr *m1, *m2;
	struct odpx_stats s0, s1;
	long kb0 = vm_pinned_kb();

	for (int i = 0; i < 3; i++) {
		s0 = stats_of(ctx);
		CHECK_RC(odpx_reg(ctx, p, 8 * PG, 0, &m1), 0);
		s1 = stats_of(ctx);
		CHECK(s1.pins == s0.pins + 1 && s1.direct_regs == s0.direct_regs + 1 && s1.hits == s0.hits &&
		      s1.entries == s0.entries + 1,
		      "direct reg %d: pins %lu -> %lu, direct_regs %lu -> %lu, hits %lu -> %lu", i, U(s0.pins),
		      U(s1.pins), U(s0.direct_regs), U(s1.direct_regs), U(s0.hits), U(s1.hits));
		CHECK(vm_pinned_kb() == kb0 + (long)(8 * PG / 1024), "direct: VmPin %ld kB, want %ld", vm_pinned_kb(),
		      kb0 + (long)(8 * PG / 1024));
		CHECK(data_check(ctx, m1, p, 8 * PG, 30 + i), "direct: wrong bytes");
		CHECK_RC(odpx_dereg(ctx, m1), 0);
		s1 = stats_of(ctx);
		CHECK(s1.entries == s0.entries && s1.unpins == s0.unpins + 1 && vm_pinned_kb() == kb0,
		      "direct dereg %d: entries %lu, unpins %lu -> %lu, VmPin %ld kB", i, U(s1.entries),
		      U(s0.unpins), U(s1.unpins), vm_pinned_kb());
	}
	/* two held at once over the same range: two registrations */
	CHECK_RC(odpx_reg(ctx, p, 8 * PG, 0, &m1), 0);
	CHECK_RC(odpx_reg(ctx, p + PG, PG, 0, &m2), 0);
	CHECK(m1 != m2 && odpx_mr_buf_index(m1) != odpx_mr_buf_index(m2), "direct: a registration was shared");
	CHECK(odpx_mr_addr(m2) == p + PG && odpx_mr_length(m2) == PG, "direct: the second covers %p+%#zx",
	      odpx_mr_addr(m2), odpx_mr_length(m2));
	CHECK(stats_of(ctx).hits == 0 && stats_of(ctx).misses == 0, "direct mode counted cache lookups");
	CHECK_RC(odpx_dereg(ctx, m1), 0);
	CHECK_RC(odpx_dereg(ctx, m2), 0);
	accessors(ctx, "direct");
	CHECK_RC(odpx_close(ctx), 0);
	CHECK(vm_pinned_kb() == kb0, "direct: VmPin %ld kB after close, want %ld", vm_pinned_kb(), kb0);
	munmap(p, 8 * PG);
}

/* odpx_close releases registrations still held: cached, dead and direct. */
static void close_while_held(void)
{
	long kb0 = vm_pinned_kb();
	struct odpx_ctx *pin = open_pin(0), *direct = open_mode(1, ODPX_MODE_DIRECT);
	unsigned char *p = map_anon(NULL, 16 * PG), *gone = map_anon(NULL, 4 * PG);
	int shm_fd = memfd_create("odpx-shm", MFD_CLOEXEC);
	unsigned char *shm;
	struct odpx_mr *mr;

	CHECK(shm_fd >= 0 && ftruncate(shm_fd, 4 * PG) == 0, "memfd");
	shm = mmap(NULL, 4 * PG, PROT_READ | PROT_WRITE, MAP_SHARED, shm_fd, 0);
	CHECK(shm != MAP_FAILED, "mmap");
	CHECK_RC(odpx_reg(pin, p, 8 * PG, 0, &mr), 0);		/* held */
	CHECK_RC(odpx_reg(pin, p, 8 * PG, 0, &mr), 0);		/* held twice */
	CHECK_RC(odpx_reg(pin, p + 12 * PG, 2 * PG, 0, &mr), 0);
	CHECK_RC(odpx_dereg(pin, mr), 0);			/* cached, unused */
	CHECK_RC(odpx_reg(pin, gone, 4 * PG, 0, &mr), 0);	/* held, then invalidated */
	CHECK(munmap(gone, 4 * PG) == 0, "munmap");
	CHECK_RC(odpx_reg(pin, shm, 4 * PG, 0, &mr), 0);	/* held direct fallback */
	CHECK_RC(odpx_reg(direct, p, 16 * PG, 0, &mr), 0);	/* held direct */
	CHECK(vm_pinned_kb() >= kb0 + (long)(34 * PG / 1024), "VmPin %ld kB, want >= %ld", vm_pinned_kb(),
	      kb0 + (long)(34 * PG / 1024));
	CHECK_RC(odpx_close(pin), 0);
	CHECK_RC(odpx_close(direct), 0);
	CHECK(vm_pinned_kb() == kb0, "close with registrations held: VmPin %ld kB, baseline %ld", vm_pinned_kb(), kb0);
	munmap(p, 16 * PG);
	munmap(shm, 4 * PG);
	close(shm_fd);
}

static uint32_t slot_of(struct odpx_ctx *ctx, struct odpx_mr *mr)
{
	struct odpx_priv_state st;

	odpx_priv_state(ctx, &st);
	return odpx_priv_slot_of(&st, mr);
}

/*
 * @bytes of anonymous memory in a mapping of twice that (*map, *maplen for
 * munmap) that crosses no multiple of 1 TiB: hash keys are start pages
 * modulo 1 TiB (index.h), so a pool across one would wrap its keys, and
 * its homes with them.  One side of the boundary holds @bytes.
 */
static unsigned char *map_within_tib(size_t bytes, unsigned char **map, size_t *maplen)
{
	const uintptr_t tib = (uintptr_t)1 << 40;
	unsigned char *m = map_anon(NULL, 2 * bytes);
	uintptr_t a = (uintptr_t)m, edge = (a + tib) & ~(tib - 1);

	*map = m;
	*maplen = 2 * bytes;
	if (edge < a + bytes)	/* [a, a + bytes) crosses it: [edge, edge + bytes) does not */
		return (unsigned char *)edge;
	return m;
}

/* On the null backend (it pins nothing), so a pool can fill the slab. */
static void home_slots(void)
{
	struct odpx_attr a = { .comp_mask = ODPX_ATTR_LIMITS };
	struct odpx_ctx *ctx;
	struct odpx_priv_state st;
	struct odpx_caps caps = { .comp_mask = ODPX_QUERY_LIMITS };
	static const size_t strides[] = { 1, 3, 16 };
	enum { N = 4000 };
	static struct odpx_mr *mr[N];

	a.limits.max_entries = N;
	a.limits.max_pinned_bytes = 1UL << 40;
	CHECK_RC(odpx_open_backend(&null_ops, &a, &ctx), 0);
	odpx_priv_state(ctx, &st);
	CHECK_RC(odpx_query(ctx, &caps), 0);
	uint32_t p = st.hmod;
	const uint32_t acc = ODPX_ACCESS_LOCAL_WRITE;

	CHECK(odpx_is_prime(p) && p == st.slots && p >= caps.limits.max_entries,
	      "slab of %u slots, modulus %u, max_entries %lu: not one prime at or above the limit",
	      st.slots, p, U(caps.limits.max_entries));
	for (size_t k = 0; k < sizeof(strides) / sizeof(strides[0]); k++) {
		size_t bytes = N * strides[k] * PG, maplen;
		unsigned char *m, *b = map_within_tib(bytes, &m, &maplen);
		for (size_t i = 0; i < N; i++) {
			CHECK_RC(odpx_reg(ctx, b + i * strides[k] * PG, PG, ODPX_ACCESS_LOCAL_WRITE, &mr[i]), 0);
			CHECK(slot_of(ctx, mr[i]) == odpx_priv_home(ctx, (uintptr_t)b + i * strides[k] * PG, acc),
			      "stride %zu pages, buffer %zu: slot %u, home %u", strides[k], i,
			      slot_of(ctx, mr[i]), odpx_priv_home(ctx, (uintptr_t)b + i * strides[k] * PG, acc));
		}
		for (size_t i = 0; i < N; i++)
			CHECK_RC(odpx_dereg(ctx, mr[i]), 0);
		munmap(m, maplen);
		/* the pool empty again: an engine still unpinning holds home slots */
		CHECK(WAIT_FOR(stats_of(ctx).entries == 0, 10), "%lu entries outlived their munmap",
		      U(stats_of(ctx).entries));
	}
	CHECK_RC(odpx_close(ctx), 0);

	/*
	 * On uring, with bytes: pages 0, p and 2p share a bucket; the second
	 * and third are away from their slot.  The last inserted follows the
	 * slot's own entry in the bucket (cache.h:hit_next() tries it), the
	 * other is found by the full lookup: both must hit their own entry.
	 */
	ctx = open_pin(0);
	odpx_priv_state(ctx, &st);
	p = st.hmod;
	size_t maplen;
	unsigned char *m, *b = map_within_tib((2 * (size_t)p + 1) * PG, &m, &maplen);
	struct odpx_mr *first = reg_expect(ctx, b, PG, 0, "home: first of a bucket");
	struct odpx_mr *away[2];
	for (int i = 0; i < 2; i++) {
		CHECK(odpx_priv_home(ctx, (uintptr_t)b + (i + 1) * (size_t)p * PG, acc) ==
		      odpx_priv_home(ctx, (uintptr_t)b, acc), "home: page %dp not in page 0's bucket",
		      i + 1);
		away[i] = reg_expect(ctx, b + (i + 1) * (size_t)p * PG, PG, 0, "home: away");
		CHECK(slot_of(ctx, first) == odpx_priv_home(ctx, (uintptr_t)b, acc) &&
		      slot_of(ctx, away[i]) != slot_of(ctx, first), "home: slots %u and %u for bucket %u",
		      slot_of(ctx, first), slot_of(ctx, away[i]), odpx_priv_home(ctx, (uintptr_t)b, acc));
		CHECK_RC(odpx_dereg(ctx, away[i]), 0);
	}
	for (int i = 0; i < 2; i++) {
		unsigned char *q = b + (i + 1) * (size_t)p * PG;
		struct odpx_mr *again = reg_expect(ctx, q, PG, 1, "home: away from its slot");
		CHECK(odpx_priv_same(ctx, again, away[i]),
		      "home: entry %d away from its slot was not the one hit", i);
		CHECK(data_check(ctx, again, q, PG, 77 + i), "home: wrong bytes away from the slot");
		CHECK_RC(odpx_dereg(ctx, again), 0);
	}
	CHECK_RC(odpx_dereg(ctx, first), 0);
	munmap(m, maplen);
	CHECK_RC(odpx_close(ctx), 0);
}

int main(void)
{
	long kb0 = vm_pinned_kb();
	struct odpx_ctx *ctx;

	CHECK(kb0 >= 0, "no VmPin in /proc/self/status");
	CHECK(odpx_last_reason() != NULL, "odpx_last_reason() is NULL");
	modes();
	ctx = open_pin(0);
	accessors(ctx, "pin");
	stats_prefix(ctx);
	interior_hits(ctx);
	CHECK_RC(odpx_close(ctx), 0);
	/*
	 * Its own context: merges() counts entries, and the dead ones of
	 * interior_hits()'s munmap are unpinned a little later (the monitor
	 * wakes the engine after a burst of events), inside its counts.
	 */
	ctx = open_pin(0);
	merges(ctx);
	CHECK_RC(odpx_close(ctx), 0);
	direct_never_cached();
	close_while_held();
	mode_reason_source();
	home_slots();
	CHECK(vm_pinned_kb() == kb0, "VmPin %ld kB after close, baseline %ld", vm_pinned_kb(), kb0);
	printf("ok\n");
	return 0;
}
