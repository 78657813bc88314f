// SPDX-License-Identifier: MIT
/*
 * dev-verbs-chunks: explicit mode's chunk MRs are cached within max_entries
 * like its ranges, and a fork child gets out of the parent's contexts.
 *
 * With 2 MiB chunks and a small max_entries (N slots):
 *   - 4 KiB registered and released in 8 N distinct chunks: every one
 *     succeeds, unused chunk entries are evicted (at least 7 N), oldest
 *     first (the last N-1 chunks are hits again), and an RDMA WRITE through
 *     the last chunk's lkey is verified.  Chunk entries were
 *     kept until close: the N+1st chunk was -ENOMEM with nothing held;
 *   - N chunk handles held: one more chunk is -ENOMEM (every entry in use),
 *     and a held one still moves data; released, the next succeeds; the
 *     same with every handle a hit, held in a hazard slot of its thread;
 *   - one thread registers and releases 4 KiB in 4 N chunks in a loop (each
 *     miss evicts), while this one takes a handle in a chunk of its own,
 *     writes through its lkey with RDMA, checks the bytes, and releases it,
 *     for 2 s.  A chunk hit reads the table without a lock: a reference
 *     taken on an entry evicted and reused under it would carry another
 *     chunk's lkey (a protection error or the wrong bytes).
 * A forked child: every call on the inherited context is -ESTALE, closing
 * it works, the child opens its own device and context and ends with
 * exit() with that context open: exit() is clean.
 */
#include <stdatomic.h>
#include <sys/wait.h>

#include "dev-verbs-util.h"

#define CHUNK (2UL << 20)
#define SLOTS 8		/* asked; max_entries() reads the limit in force */
#define RUN_MS 2000

static struct dev base;
static struct odpx_ctx *ctx;
static unsigned char *area;	/* chunk-aligned */
static unsigned nchunks;
static _Atomic int stop;

static struct odpx_ctx *open_small(struct dev *d)
{
	struct odpx_attr a = { .comp_mask = ODPX_ATTR_MODE | ODPX_ATTR_CHUNK | ODPX_ATTR_LIMITS,
			       .mode = ODPX_MODE_EXPLICIT, .chunk_bytes = CHUNK,
			       .limits = { .max_entries = SLOTS } };
	struct odpx_ctx *c = NULL;
	int rc = odpx_open_verbs(d->pd, &a, &c);

	if (rc)
		dev_fail("explicit, %u entries: %s: %s", SLOTS, strerror(-rc), odpx_last_reason());
	return c;
}

static unsigned char *chunk_at(unsigned c) { return area + (size_t)c * CHUNK; }

/* The entries the context allows (explicit mode: as many slots, one handle each) */
static unsigned max_entries(void)
{
	struct odpx_caps caps = { .comp_mask = ODPX_QUERY_LIMITS };
	int rc = odpx_query(ctx, &caps);

	if (rc || !(caps.comp_mask & ODPX_QUERY_LIMITS))
		dev_fail("odpx_query(LIMITS): %d, comp_mask %#llx", rc,
			 (unsigned long long)caps.comp_mask);
	return (unsigned)caps.limits.max_entries;
}

/* RDMA WRITE from @src (through @s's lkey) into @dst (@t's rkey), bytes checked */
static void write_checked(struct dev *d, struct odpx_mr *s, unsigned char *src,
			  struct odpx_mr *t, unsigned char *dst, uint32_t seed, const char *what)
{
	dev_fill(src, 4096, seed);
	memset(dst, 0, 4096);
	if (dv_rdma(d, IBV_WR_RDMA_WRITE, s, src, 4096, dst, odpx_mr_rkey(t)) ||
	    !dev_same(what, dst, src, 4096))
		dev_fail("%s: RDMA WRITE through lkey %#x", what, odpx_mr_lkey(s));
}

static void *churn(void *arg)
{
	(void)arg;
	for (unsigned it = 0; !atomic_load(&stop); it++) {
		struct odpx_mr *mr = dv_reg(ctx, chunk_at(1 + it % (nchunks - 1)), 4096, ACC_LW);
		dv_dereg(ctx, mr);
	}
	return NULL;
}

static void evicted(void)
{
	unsigned char *dst = dv_map(4096);
	struct odpx_mr *held[64], *t, *s;
	struct odpx_stats st0, st;
	unsigned slots = max_entries(), n;
	struct odpx_mr *extra;
	long transfers = 0;
	pthread_t thr;
	int rc;

	if (slots > 64 || nchunks < 8 * slots)
		dev_fail("%u slots, %u chunks mapped", slots, nchunks);
	/* the destination's range MR takes a slot for good: held throughout */
	t = dv_reg(ctx, dst, 4096, ACC_REMOTE);

	st0 = dv_stats(ctx);
	for (unsigned c = 0; c < 8 * slots; c++)
		dv_dereg(ctx, dv_reg(ctx, chunk_at(c), 4096, ACC_LW));
	st = dv_stats(ctx);
	if (st.evictions - st0.evictions < 7 * slots)
		dev_fail("%u chunks in %u slots: %llu evictions", 8 * slots, slots,
			 (unsigned long long)(st.evictions - st0.evictions));
	/* oldest first: the newest chunks are still there, the newest was never the victim */
	for (unsigned c = 8 * slots - (slots - 1); c < 8 * slots; c++)
		dv_dereg(ctx, dv_reg(ctx, chunk_at(c), 4096, ACC_LW));
	if (dv_stats(ctx).evictions != st.evictions)
		dev_fail("the last %u chunks again: %llu evictions, want none", slots - 1,
			 (unsigned long long)(dv_stats(ctx).evictions - st.evictions));
	s = dv_reg(ctx, chunk_at(8 * slots - 1), 4096, ACC_LW);
	write_checked(&base, s, chunk_at(8 * slots - 1), t, dst, 1, "the last chunk");
	dv_dereg(ctx, s);
	printf("%u chunks through %u entries: %llu evictions, data ok\n", 8 * slots, slots,
	       (unsigned long long)(st.evictions - st0.evictions));

	/* every slot held: -ENOMEM, nothing lost */
	for (n = 0; n + 1 < slots; n++)	/* the range MR holds one */
		held[n] = dv_reg(ctx, chunk_at(n), 4096, ACC_LW);
	rc = odpx_reg(ctx, chunk_at(n), 4096, ACC_LW, &extra);
	if (rc != -ENOMEM)
		dev_fail("a chunk with every entry held: %d, want -ENOMEM", rc);
	write_checked(&base, held[0], chunk_at(0), t, dst, 2, "a held chunk");
	dv_dereg(ctx, held[--n]);
	extra = dv_reg(ctx, chunk_at(n + 1), 4096, ACC_LW);
	dv_dereg(ctx, extra);
	while (n)
		dv_dereg(ctx, held[--n]);
	printf("all %u entries held: -ENOMEM; one released: the next chunk registers\n", slots);

	/*
	 * The same with every entry held by a hit alone: one held in a hazard
	 * slot of this thread (up to ODPX_PRIV_HZ_SLOTS of them) writes nothing
	 * on its entry, and eviction must still pass over it.
	 */
	unsigned in_slots = 0;
	for (n = 0; n + 1 < slots; n++)	/* all cached at once (the hand evicts FIFO) */
		held[n] = dv_reg(ctx, chunk_at(n), 4096, ACC_LW);
	for (n = 0; n + 1 < slots; n++)
		dv_dereg(ctx, held[n]);
	for (n = 0; n + 1 < slots; n++) {
		uint64_t hits = dv_stats(ctx).hits;
		held[n] = dv_reg(ctx, chunk_at(n), 4096, ACC_LW);
		if (dv_stats(ctx).hits != hits + 1)
			dev_fail("chunk %u again: not a hit", n);
		in_slots += ((uintptr_t)held[n] & ODPX_PRIV_HZ_TAG) != 0;
	}
	if (in_slots < (slots - 1 < ODPX_PRIV_HZ_SLOTS ? slots - 1 : ODPX_PRIV_HZ_SLOTS))
		dev_fail("%u of %u hits held in hazard slots", in_slots, slots - 1);
	rc = odpx_reg(ctx, chunk_at(n), 4096, ACC_LW, &extra);
	if (rc != -ENOMEM)
		dev_fail("a chunk with every entry held by a hit: %d, want -ENOMEM", rc);
	write_checked(&base, held[0], chunk_at(0), t, dst, 3, "a chunk held by a hit");
	while (n)
		dv_dereg(ctx, held[--n]);
	extra = dv_reg(ctx, chunk_at(slots), 4096, ACC_LW);
	dv_dereg(ctx, extra);
	printf("all %u entries held by hits (%u in hazard slots): -ENOMEM, data ok\n", slots,
	       in_slots);

	/* hits against evictions */
	st0 = dv_stats(ctx);
	atomic_store(&stop, 0);
	if (pthread_create(&thr, NULL, churn, NULL))
		dev_fail("pthread_create");
	for (int64_t end = dev_now_ms() + RUN_MS; dev_now_ms() < end; transfers++) {
		s = dv_reg(ctx, chunk_at(0), 4096, ACC_LW);
		write_checked(&base, s, chunk_at(0), t, dst, (uint32_t)(100 + transfers), "churned");
		dv_dereg(ctx, s);
	}
	atomic_store(&stop, 1);
	pthread_join(thr, NULL);
	st = dv_stats(ctx);
	if (st.evictions - st0.evictions < 100)	/* else the hits never met an eviction */
		dev_fail("the churn evicted %llu entries in %d ms",
			 (unsigned long long)(st.evictions - st0.evictions), RUN_MS);
	printf("%ld transfers through a chunk while another thread evicted: all right"
	       " (%llu evictions meanwhile)\n", transfers,
	       (unsigned long long)(st.evictions - st0.evictions));
	dv_dereg(ctx, t);
	munmap(dst, 4096);
}

static void forked(void)
{
	struct odpx_mr *mr;
	int st;
	pid_t pid;

	mr = dv_reg(ctx, chunk_at(0), 4096, ACC_LW);
	dv_dereg(ctx, mr);
	fflush(stdout);
	if (!(pid = fork())) {
		struct odpx_ctx *own;
		struct dev cd;

		if (odpx_reg(ctx, chunk_at(0), 4096, ACC_LW, &mr) != -ESTALE ||
		    odpx_mode_get(ctx, NULL, NULL) != -ESTALE)
			_exit(2);
		if (odpx_close(ctx))
			_exit(3);
		dev_open(&cd);
		own = dv_open(&cd, ODPX_MODE_EXPLICIT, 0);
		mr = dv_reg(own, chunk_at(1), 4096, ACC_LW);
		dv_dereg(own, mr);
		exit(0);	/* `own` still open: the kernel releases its MRs */
	}
	if (waitpid(pid, &st, 0) != pid)
		dev_fail("waitpid");
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		dev_fail("the child after fork: %s %d", WIFEXITED(st) ? "exit" : "signal",
			 WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
	printf("fork: the child's inherited context is -ESTALE and closes; its own context"
	       " works; exit() is clean\n");
}

int main(void)
{
	unsigned char *m;

	dev_open(&base);
	dev_require_odp(&base, IBV_ODP_SUPPORT_WRITE);
	dev_connect_self(&base);
	ctx = open_small(&base);
	nchunks = 8 * max_entries();
	m = dv_map((size_t)(nchunks + 1) * CHUNK);
	area = (unsigned char *)(((uintptr_t)m + CHUNK - 1) & ~(CHUNK - 1));
	evicted();
	forked();
	odpx_close(ctx);
	munmap(m, (size_t)(nchunks + 1) * CHUNK);
	dev_close(&base);
	return 0;
}
