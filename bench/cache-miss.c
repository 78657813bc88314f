// SPDX-License-Identifier: MIT
/*
 * cache-miss.c - what a miss costs over the pin itself, and what an entry
 * costs in memory.
 *
 *   W3   odpx_reg + odpx_dereg that miss every time, in a VMA the monitor
 *        already watches: a context of max_entries = 1 cycling over disjoint
 *        ranges, so each odpx_reg evicts (unpins) the previous entry and pins
 *        the new one.  Against it, in the same run and interleaved batch by
 *        batch, the raw pin + unpin of the same size straight through
 *        io_uring (one slot of a sparse table as large as odpx's, updated with
 *        io_uring_register_buffers_update_tag like lib/backend_uring.c).
 *        The null backend gives the cache's own miss cost without any pin,
 *        and a variant misses in a VMA never seen before (watch included).
 *        odpx pins into the evicted entry's slot, and an io_uring slot
 *        update replaces the buffer it holds: one system call does the
 *        eviction's unpin and the miss's pin.  So two more raw runs: the
 *        raw "replace", one such update per iteration (the best raw
 *        sequence; odpx over it is the cache's own overhead), and the
 *        null-backend miss with the raw replace of the same range in the
 *        same iteration, so the cache's code runs between the same system
 *        calls (cold caches) but pins through no slot of its own.
 *   LRU  what eviction adds to a miss as the cache grows: a null-backend
 *        context of n entries (4096, the default, and 16384, the most on
 *        uring) kept full by misses of new 4 KiB buffers.  "once": each
 *        buffer is used once, so the least recently released entry is the
 *        first one the evictor looks at.  "twice": each buffer is used
 *        again n/4 misses after its miss, so every eviction first re-links
 *        an entry released since it was linked.  The ratio twice/once is
 *        what the re-links cost; it would grow with n if re-linking walked
 *        the LRU (lib/reserve.c).
 *   MEM  bytes of odpx bookkeeping per cached entry: from the layout
 *        (struct entry, whose memory also holds the hash heads and tree
 *        links; the watch table per VMA) and from RSS growth while 100,000
 *        entries are inserted into a null-backend context.
 */
#include <liburing.h>
#include <sys/uio.h>

#include "bench.h"

/* The fixed-buffer slots of a uring context's table: the raw runs use as many */
static unsigned uring_slots(struct odpx_ctx *ctx)
{
	struct odpx_caps caps = { .comp_mask = ODPX_QUERY_URING };

	CHECK_ODPX(odpx_query(ctx, &caps));
	if (!(caps.comp_mask & ODPX_QUERY_URING))
		DIE("odpx_query: not a uring context");
	return caps.uring_slots;
}

static uint64_t monitor_regs(void)
{
	struct monitor_usage u;

	monitor_usage(&u);
	return u.registers;
}

#define RANGES 8		/* disjoint ranges cycled through */

static struct bench_opts o;

struct miss_run {
	struct odpx_ctx *ctx;	/* NULL: raw io_uring */
	struct io_uring *ring;	/* with a (null) ctx: both in one iteration */
	bool replace;		/* raw: one update replacing the last range */
	char *base;
	size_t bytes;
	unsigned next;
};

static void *range_at(struct miss_run *m)
{
	/* stride 2 * bytes: never adjacent, so never merged */
	return m->base + (size_t)(m->next++ % RANGES) * 2 * m->bytes;
}

static void raw_update(struct io_uring *ring, void *base, size_t len)
{
	struct iovec iov = { base, len };
	__u64 tag = 0;
	int r = io_uring_register_buffers_update_tag(ring, 0, &iov, &tag, 1);

	if (r < 0)
		DIE("io_uring_register_buffers_update_tag: %s", strerror(-r));
}

/* The raw pin of @a into slot 0, and its unpin unless the next pin replaces it. */
static void raw_pin(struct miss_run *m, void *a)
{
	raw_update(m->ring, a, m->bytes);
	if (!m->replace)
		raw_update(m->ring, NULL, 0);
}

/* K misses (odpx) or K raw pins; ns per iteration. */
static double batch(struct miss_run *m, uint64_t k)
{
	uint64_t t0 = now_ns();

	for (uint64_t i = 0; i < k; i++) {
		void *a = range_at(m);
		if (m->ctx) {
			struct odpx_mr *mr;
			int r = odpx_reg(m->ctx, a, m->bytes, ODPX_ACCESS_LOCAL_WRITE, &mr);
			if (r)
				DIE("odpx_reg: %s (%s)", strerror(-r), odpx_last_reason());
			if (m->ring)
				raw_pin(m, a);
			odpx_dereg(m->ctx, mr);
		} else {
			raw_pin(m, a);
		}
	}
	return (double)(now_ns() - t0) / (double)k;
}

static void w3(size_t bytes)
{
	uint64_t k = o.quick ? 200 : 1000;
	unsigned reps = o.quick ? 20 : 50;
	size_t span = (size_t)RANGES * 2 * bytes;
	char *base = map_anon(span, true);
	struct io_uring ring;
	/*
	 * One entry, and bytes for two ranges: the eviction is forced through
	 * max_entries, and the victim's slot is replaced in place (one system
	 * call), which odpx does only when the limit holds both ranges for the
	 * length of the update (reserve.c).  With room for one range's bytes
	 * the miss unpins, then pins: two calls, as the raw pin + unpin.
	 */
	enum { ODPX, NUL, RAW, REPLACE, NUL_REPLACE, RUNS };
	struct miss_run m[RUNS] = {
		[ODPX] = { .ctx = open_ctx("uring", 1, 2 * bytes), .base = base, .bytes = bytes },
		[NUL] = { .ctx = open_ctx("null", 1, 2 * bytes), .base = base, .bytes = bytes },
		[RAW] = { .ring = &ring, .base = base, .bytes = bytes },
		[REPLACE] = { .ring = &ring, .replace = true, .base = base, .bytes = bytes },
		[NUL_REPLACE] = { .ctx = open_ctx("null", 1, 2 * bytes), .ring = &ring,
				  .replace = true, .base = base, .bytes = bytes },
	};
	static const char *const be[2] = { "uring", "null" };
	double *v[RUNS];
	struct odpx_stats st0[2], st1[2];
	struct summary s[RUNS];
	char sz[32], cas[64], what[64];
	unsigned slots = uring_slots(m[ODPX].ctx);
	int r;

	if ((r = io_uring_queue_init(8, &ring, 0)) < 0 ||
	    (r = io_uring_register_buffers_sparse(&ring, slots)) < 0)
		DIE("io_uring setup: %s", strerror(-r));
	for (int i = 0; i < RUNS; i++) {
		v[i] = calloc(reps, sizeof(double));
		batch(&m[i], 2 * RANGES);	/* warm: the VMA gets watched, pages are in */
	}
	for (int i = 0; i < 2; i++)
		st0[i] = stats_of(m[i].ctx);
	for (unsigned rep = 0; rep < reps; rep++)	/* interleaved: same conditions */
		for (int i = 0; i < RUNS; i++)
			v[i][rep] = batch(&m[i], k);
	for (int i = 0; i < 2; i++)
		st1[i] = stats_of(m[i].ctx);
	for (int i = 0; i < RUNS; i++)
		s[i] = summarize(v[i], reps, k);

	size_str(bytes, sz, sizeof(sz));
	snprintf(cas, sizeof(cas), "miss-%s", sz);
	for (int i = 0; i < 2; i++)
		kv_time("W3", cas, be[i], mode_of(m[i].ctx), 1, bytes, &s[i],
			"misses=%lu pins=%lu unpins=%lu evictions=%lu watch_regs_in_vma=already",
			(unsigned long)(st1[i].misses - st0[i].misses),
			(unsigned long)(st1[i].pins - st0[i].pins),
			(unsigned long)(st1[i].unpins - st0[i].unpins),
			(unsigned long)(st1[i].evictions - st0[i].evictions));
	snprintf(cas, sizeof(cas), "pin+unpin-%s", sz);
	kv_time("W3", cas, "io_uring-raw", "none", 1, bytes, &s[RAW], "slots=%u", slots);
	snprintf(cas, sizeof(cas), "replace-%s", sz);
	kv_time("W3", cas, "io_uring-raw", "none", 1, bytes, &s[REPLACE],
		"slots=%u syscalls_per_iteration=1", slots);
	snprintf(cas, sizeof(cas), "overhead-%s", sz);
	snprintf(what, sizeof(what), "odpx_miss/raw_pin+unpin");
	kv_ratio("W3", cas, "uring", mode_of(m[ODPX].ctx), what, s[ODPX].median, s[RAW].median,
		 '<', 1.10, "odpx_minus_raw_ns=%.1f odpx_over_raw_replace=%.3f"
		 " odpx_minus_raw_replace_ns=%.1f null_miss_ns=%.1f"
		 " null_miss_between_syscalls_ns=%.1f budget_ns=%.1f",
		 s[ODPX].median - s[RAW].median, s[ODPX].median / s[REPLACE].median,
		 s[ODPX].median - s[REPLACE].median, s[NUL].median,
		 s[NUL_REPLACE].median - s[REPLACE].median, 0.10 * s[RAW].median);

	for (int i = 0; i < RUNS; i++)
		if (m[i].ctx)
			odpx_close(m[i].ctx);
	io_uring_queue_exit(&ring);
	munmap(base, span);
	for (int i = 0; i < RUNS; i++)
		free(v[i]);
}

/*
 * The same miss in a VMA the monitor has never seen: it also queries the
 * VMA (PROCMAP_QUERY) and registers it with the userfaultfd.  K fresh
 * guarded mappings per sample; the raw pin + unpin runs over the same K
 * mappings right after, so both see populated pages.  Informative only.
 */
static void w3_new_vma(size_t bytes)
{
	unsigned k = 32, reps = o.quick ? 10 : 30;
	struct odpx_ctx *ctx = open_ctx("uring", 1, 2 * bytes);
	struct io_uring ring;
	double *v[2] = { calloc(reps, sizeof(double)), calloc(reps, sizeof(double)) };
	uint64_t regs0 = 0;
	char *p[32], sz[32], cas[64];
	struct summary s[2];
	int r;

	if ((r = io_uring_queue_init(8, &ring, 0)) < 0 ||
	    (r = io_uring_register_buffers_sparse(&ring, uring_slots(ctx))) < 0)
		DIE("io_uring setup: %s", strerror(-r));
	for (unsigned rep = 0; rep <= reps; rep++) {	/* rep 0 warms up */
		uint64_t t0, t1, t2;
		for (unsigned i = 0; i < k; i++) {
			p[i] = map_anon(2 * bytes, true);
			mprotect(p[i] + bytes, bytes, PROT_NONE);	/* no merging */
		}
		if (rep == 1)
			regs0 = monitor_regs();
		t0 = now_ns();
		for (unsigned i = 0; i < k; i++) {
			struct odpx_mr *mr;
			CHECK_ODPX(odpx_reg(ctx, p[i], bytes, ODPX_ACCESS_LOCAL_WRITE, &mr));
			odpx_dereg(ctx, mr);
		}
		t1 = now_ns();
		for (unsigned i = 0; i < k; i++) {
			raw_update(&ring, p[i], bytes);
			raw_update(&ring, NULL, 0);
		}
		t2 = now_ns();
		for (unsigned i = 0; i < k; i++)
			munmap(p[i], 2 * bytes);
		if (rep) {
			v[0][rep - 1] = (double)(t1 - t0) / k;
			v[1][rep - 1] = (double)(t2 - t1) / k;
		}
	}
	for (int i = 0; i < 2; i++)
		s[i] = summarize(v[i], reps, k);
	snprintf(cas, sizeof(cas), "miss-new-vma-%s", size_str(bytes, sz, sizeof(sz)));
	kv_time("W3", cas, "uring", mode_of(ctx), 1, bytes, &s[0],
		"uffd_registers=%lu raw_pin+unpin_ns=%.1f", (unsigned long)(monitor_regs() - regs0),
		s[1].median);
	kv_ratio("W3", cas, "uring", mode_of(ctx), "odpx_miss_new_vma/raw_pin+unpin",
		 s[0].median, s[1].median, 0, 0, "");
	odpx_close(ctx);
	io_uring_queue_exit(&ring);
	free(v[0]);
	free(v[1]);
}

/* ns per miss over batches of n/4, after 2n misses that fill the cache */
static struct summary lru_pattern(size_t n, bool twice, unsigned reps, double *hit_share)
{
	size_t k = n / 4, total = 2 * n + reps * k;
	char *base = map_anon(total * 4 * KiB, false);	/* null pins nothing: untouched */
	struct odpx_ctx *ctx = open_ctx("null", n, (uint64_t)1 << 40);
	double *v = calloc(reps, sizeof(*v));
	struct summary s;
	size_t i = 0;

	for (unsigned r = 0; r <= reps; r++) {	/* r 0: the 2n misses of warming */
		size_t end = r ? i + k : 2 * n;
		uint64_t t0 = now_ns();
		for (; i < end; i++) {
			reg_dereg(ctx, base + i * 4 * KiB, 4 * KiB);
			if (twice && i >= k)
				reg_dereg(ctx, base + (i - k) * 4 * KiB, 4 * KiB);
		}
		if (r)
			v[r - 1] = (double)(now_ns() - t0) / (double)k;
	}
	struct odpx_stats st = stats_of(ctx);
	*hit_share = (double)st.hits / (double)(st.hits + st.misses);
	s = summarize(v, reps, k);
	odpx_close(ctx);
	munmap(base, total * 4 * KiB);
	free(v);
	return s;
}

static void lru(size_t n)
{
	unsigned reps = o.quick ? 6 : 20;
	double share[2];
	struct summary once = lru_pattern(n, false, reps, &share[0]);
	struct summary twice = lru_pattern(n, true, reps, &share[1]);
	char cas[64];

	snprintf(cas, sizeof(cas), "%zu-entries-once", n);
	kv_time("LRU", cas, "null", "pin", n, 4 * KiB, &once, "hit_share=%.3f", share[0]);
	snprintf(cas, sizeof(cas), "%zu-entries-twice", n);
	kv_time("LRU", cas, "null", "pin", n, 4 * KiB, &twice, "hit_share=%.3f", share[1]);
	snprintf(cas, sizeof(cas), "%zu-entries", n);
	kv_ratio("LRU", cas, "null", "pin", "twice/once", twice.median, once.median, 0, 0, "");
}

static void mem(void)
{
	const size_t n = o.quick ? 100000 : 100000, bytes = 4 * KiB;
	char *base = map_anon(n * bytes, false);	/* never touched: null pins nothing */
	uint64_t rss0, rss1, rss2;
	struct odpx_ctx *ctx;

	rss0 = rss_bytes();
	ctx = open_ctx("null", n, (uint64_t)1 << 40);
	rss1 = rss_bytes();
	for (size_t i = 0; i < n; i++)
		reg_dereg(ctx, base + i * bytes, bytes);
	rss2 = rss_bytes();

	/*
	 * The marginal cost of an entry is its slot of the slab: hash heads
	 * (bucket i lives in entry i), tree and LRU links are inside it.  A
	 * watched VMA costs one struct watch in a table sized once at attach,
	 * here amortized over the entries of the one VMA.  The slab is sized
	 * by max_entries and written whole at open, hence rss_open_delta.
	 */
	struct odpx_stats st = stats_of(ctx);
	struct odpx_priv_state ps;
	struct monitor_usage u;
	monitor_usage(&u);
	odpx_priv_state(ctx, &ps);
	size_t watch_table = ((size_t)u.budget + 1) * u.record_bytes, eb = ps.entry_bytes;
	double layout = (double)eb + (double)u.record_bytes * u.watched / n;
	double measured = (double)(rss2 - rss0) / (double)st.entries;

	kv_head("MEM", "100000x4KiB", "null", mode_of(ctx));
	printf(" n=%lu bytes=%zu entries=%lu entry_struct_bytes=%zu index_bytes_per_entry=0"
	       " slab_bytes=%zu watch_bytes_per_vma=%zu watched_vmas=%u watch_table_bytes=%zu"
	       " bytes_per_entry=%zu amortized_bytes_per_entry=%.4f rss_open_delta=%lu"
	       " rss_insert_delta=%lu rss_bytes_per_entry=%.2f target=<=64 met=%s\n",
	       (unsigned long)n, bytes, (unsigned long)st.entries, eb,
	       (size_t)n * eb, u.record_bytes, u.watched, watch_table,
	       eb, layout, (unsigned long)(rss1 - rss0),
	       (unsigned long)(rss2 - rss1), measured, met((double)eb, '<', 64));
	odpx_close(ctx);
	munmap(base, n * bytes);
}

int main(int argc, char **argv)
{
	bench_init(argc, argv, &o, "W3, LRU, MEM");
	printf("# cache-miss: W3, LRU and MEM, %s\n", o.quick ? "quick" : "full");
	if (selected(&o, "W3")) {
		w3(4 * KiB);
		w3(64 * KiB);
		w3_new_vma(64 * KiB);
		if (!o.quick)
			w3(1 * MiB);
	}
	if (selected(&o, "LRU")) {
		lru(4096);
		lru(16384);
	}
	if (selected(&o, "MEM"))
		mem();
	return 0;
}
