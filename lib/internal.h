/* SPDX-License-Identifier: MIT */
/* internal.h - odpx's private types: context, cache entry, backend ops. */
#ifndef ODPX_INTERNAL_H
#define ODPX_INTERNAL_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

#ifdef ODPX_STATS_TOOL
#error "sysfs-stats/ sees the library through odpx.h and segment.h only"
#endif

#include "odpx.h"
#include "odpx-private.h"	/* what tests and benchmarks may use */
#include "segment.h"
#include "../uffd/monitor.h"

#define ODPX_EXPORT __attribute__((visibility("default")))
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define ALIGNED_LINE __attribute__((aligned(64)))
#define RLX memory_order_relaxed
#define ACQ memory_order_acquire
#define REL memory_order_release
#define LD(p) atomic_load_explicit(&(p), RLX)
#define ST(p, v) atomic_store_explicit(&(p), (v), RLX)

#define PAGE_SHIFT 12
#define PAGE_SIZE (1UL << PAGE_SHIFT)
#define NIL UINT32_MAX		/* the null entry index */
/* access bits: a remote class is served by exactly its pages; writes need writable pages */
#define ACC_REMOTE_BITS (ODPX_ACCESS_REMOTE_WRITE | ODPX_ACCESS_REMOTE_READ | ODPX_ACCESS_REMOTE_ATOMIC)
#define ACC_WRITE_BITS (ODPX_ACCESS_LOCAL_WRITE | ODPX_ACCESS_REMOTE_WRITE | ODPX_ACCESS_REMOTE_ATOMIC)
#define LRU_BUCKETS 257		/* radix-16 heap over 64-bit keys (reserve.c) */
#define LRU_MARK(b) (NIL - 1 - (b))	/* ends of LRU bucket b's list */
#define ENTRIES_MAX LRU_MARK(LRU_BUCKETS)	/* max_entries must stay below */
#define ACC_CLASSES 16		/* one index per access combination */
#define URING_SLOTS 16384
#define URING_SLOT_MAX_BYTES (1UL << 30)

/*
 * struct entry - one registration, 64 bytes, in a per-context slab that is
 * never unmapped while the context lives (so optimistic readers can always
 * dereference an index they loaded, whatever it has become).
 *
 * @word: gen:24 | access:4 | state:4 | ref:32.  States: FREE, ALIVE (in the index,
 *   hits may take references), DEAD (out of the index: invalidated,
 *   evicted or superseded; unpinned when ref reaches 0).
 *   Writers: lookups CAS ALIVE ref -> ref+1 (no lock); dereg CAS ref -> ref-1
 *   (no lock); ALIVE -> DEAD only under the invalidation lock together with removal from
 *   the index; DEAD/0 -> FREE (gen+1) by the owner of the dead entry (the
 *   engine, an evictor, or dereg of a direct entry); FREE -> ALIVE by the
 *   miss path after @span is written.  Exactly one party sees the
 *   transition to "DEAD with ref 0" (both fields live in this one word) and
 *   pushes the entry on the dead stack, or owns it if no hazard slot holds
 *   it (struct hz_line): the inline hits' references, which @ref does not
 *   count, and which the reaper waits for.  A reader's CAS from the word it
 *   loaded fails if the entry was recycled since, because gen changed: that
 *   is what makes reading @span before the CAS safe.
 * @span: start page << 20 | pages; written only while the entry is FREE.
 * Index fields (@hnext, @bucket: index.h; @left, @right, @height) are written
 * under the invalidation lock inside a ctx->seq write section and read
 * optimistically.  LRU fields (@lru_prev, @lru_next, @link_stamp,
 * @last_use): reserve.c; while FREE, @lru_prev and @lru_next link the free list.
 * @last_use is stored before the reference is dropped (relaxed; the drop releases it).
 */
struct entry {
	_Atomic uint64_t word;
	_Atomic uint64_t span;
	uint32_t lkey, rkey;
	_Atomic uint32_t hnext, bucket;
	_Atomic uint32_t left, right;
	uint32_t lru_prev, lru_next;
	_Atomic uint32_t last_use;
	uint32_t link_stamp;
	_Atomic uint32_t dnext;
	_Atomic uint8_t height;
	uint8_t access;
	uint8_t kind;		/* enum entry_kind */
} ALIGNED_LINE;

/*
 * Hazard slots (cache.h): a thread that borrowed counter shard i (stats.c)
 * holds its inline hits in line i of its context's slots, one entry a slot:
 * the hit writes its own line only, never the entry's.  Only the borrower
 * fills an empty slot; only the registration's holder empties it, from any
 * thread.  The handle of such a hit is the slot's address | HZ_TAG, which
 * entries (64-byte aligned) never have.
 */
#define HZ_SLOTS 8
#define HZ_TAG 1UL
#define HZ_TOOK 1UL	/* in a slot: its hit took the entry unused (cache.h:hit_slot()) */
typedef _Atomic uintptr_t hz_slot;	/* an entry's address | HZ_TOOK, 0: empty */
struct hz_line {
	hz_slot e[HZ_SLOTS];
} ALIGNED_LINE;

static inline struct entry *hz_entry(uintptr_t v)
{
	return (struct entry *)(v & ~HZ_TOOK);
}

/* KIND_PREREG: held by a pre-registered region, kept off the LRU (prereg.c) */
enum entry_kind { KIND_CACHED = 0, KIND_DIRECT = 1, KIND_PREREG = 0x40, KIND_URING = 0x80 };
#define KIND(e) ((e)->kind & 0x3f)

#define W_REF_MASK 0xffffffffULL
#define W_STATE_SHIFT 32
#define W_ACC_SHIFT 36
#define W_GEN_SHIFT 40
#define W_STATE(w) (((w) >> W_STATE_SHIFT) & 0xf)
#define W_ACC(w) ((uint32_t)(((w) >> W_ACC_SHIFT) & 0xf))
#define W_REF(w) ((uint32_t)((w) & W_REF_MASK))
#define W_GEN(w) ((w) >> W_GEN_SHIFT)
enum { ST_FREE = 0, ST_ALIVE = 1, ST_DEAD = 2 };
#define W_MAKE(gen, acc, st, ref) \
	(((uint64_t)(gen) << W_GEN_SHIFT) | ((uint64_t)(acc) << W_ACC_SHIFT) | \
	 ((uint64_t)(st) << W_STATE_SHIFT) | (ref))

#define SPAN_PAGES_BITS 20
#define SPAN_MAKE(start, pages) (((start) >> PAGE_SHIFT) << SPAN_PAGES_BITS | (pages))
#define SPAN_START(s) (((s) >> SPAN_PAGES_BITS) << PAGE_SHIFT)
#define SPAN_BYTES(s) (((s) & ((1UL << SPAN_PAGES_BITS) - 1)) << PAGE_SHIFT)
#define SPAN_MAX_BYTES (((1UL << SPAN_PAGES_BITS) - 1) << PAGE_SHIFT)

/* Backend operations: pin and unpin one entry; neither is called under a lock. */
struct backend_ops {
	const char *name;
	enum odpx_backend id;
	/* pin [start, start+len) into entry @idx, fill lkey/rkey; -errno (pin cache only) */
	int (*pin)(struct odpx_ctx *ctx, uint32_t idx, uintptr_t start,
		   size_t len, uint32_t access, uint32_t *lkey, uint32_t *rkey);
	void (*unpin)(struct odpx_ctx *ctx, uint32_t idx);
	/* a pin() replaces the evicted registration its slot holds, a failed one keeps it */
	bool pin_replaces;
	void (*close)(struct odpx_ctx *ctx);
	/* optional: in a fork child, close its copies of the descriptors, mark them -1 */
	void (*child_fds)(struct odpx_ctx *ctx);
	uint32_t max_entries;	/* hard limit of the backend, 0: none */
	uint64_t max_entry_bytes;
	/*
	 * Optional, the ODP modes: their own lookup and release, into entries of
	 * ctx->ent.  *out of reg() and try_reg() is the caller's handle, as is:
	 * hybrid's pinned hits are its pin cache's hazard slots (mr_entry()).
	 */
	int (*reg)(struct odpx_ctx *ctx, uintptr_t addr, size_t len, uint32_t access,
		   struct entry **out);
	int (*dereg)(struct odpx_ctx *ctx, struct entry *e);
	/* reg() checks arguments, then is cache_reg(): its hits may be served inline */
	bool reg_is_cache;
	/* Optional: prefetch hints (ibv_advise_mr), @flush for ODPX_PREFETCH_SYNC; 0 or -errno */
	int (*advise)(struct odpx_ctx *ctx, const struct pf_range *r, size_t n, bool flush);
	/* Optional, with reg(): ODPX_REG_TRY/PARTIAL from existing MRs; -EAGAIN if none serves */
	int (*try_reg)(struct odpx_ctx *ctx, uintptr_t addr, size_t len, uint32_t access,
		       uint32_t flags, struct entry **out);
	/* Optional: the device's part of odpx_query() (query.c) */
	void (*query)(struct odpx_ctx *ctx, struct odpx_caps *caps);
	/* Optional: release ODP MRs that no registration held since @stamp (engine tick) */
	unsigned (*reap_idle)(struct odpx_ctx *ctx, uint32_t stamp);
};

/* The evicted-range records of a context (reserve.c): 32 KiB. */
#define EVICTED_SETS 256
#define EVICTED_WAYS 4

#define STAT_INC(ctx, f) atomic_fetch_add_explicit(&(ctx)->cs->f, 1, memory_order_relaxed)
#define STAT_ADD(ctx, f, n) atomic_fetch_add_explicit(&(ctx)->cs->f, (n), memory_order_relaxed)

struct prefetch_cell {
	_Atomic uint64_t seq;
	uint64_t addr, len;
	uint32_t flags;
};

struct engine;
/* prereg.c: the pre-registered regions of a context (struct prereg_set.lock: prereg.c) */
#define PREREG_MAX 64
struct prereg_set {
	pthread_mutex_t lock;
	unsigned n;
	struct prereg {
		uintptr_t start, end;	/* page-rounded */
		uint32_t access;	/* as asked */
		struct entry *e;	/* held; NULL: to be made by the next request inside */
	} r[PREREG_MAX];
};

/*
 * struct odpx_ctx
 *
 * @seq: seqcount over this context's index, the subscriber's sequence of
 *   the invalidation protocol (uffd/reader.c); cache.h: seq_begin/seq_read.
 * @lock: protects the LRU, the free list and the pinned-byte accounting;
 *   never held across a pin, an unpin or any call that can block on a
 *   userfaultfd event.  Lock order: ctx->lock before the invalidation lock.
 * @dead: stack of DEAD entries whose last reference is gone (monitor and
 *   dereg push, engine pops all).
 */
struct odpx_ctx {
	_Atomic uint32_t seq ALIGNED_LINE;
	uint32_t fork_gen;
	uint32_t magic;			/* CTX_MAGIC from open to close (ctx.c) */
#define CTX_MAGIC 0x6f647078u		/* "odpx" */
	_Atomic uint32_t clock;		/* LRU epoch: bumped at each miss */
	struct entry *ent;		/* slab of max_entries */
	uint32_t max_entries;		/* slots: pin mode rounds the limit to a prime */
	uint32_t hmod;			/* hash modulus (index.h:bucket_of) */
	uint64_t hmul;			/* 2^64 / hmod, rounded up */
	enum odpx_mode mode;
	const struct backend_ops *be;
	uint32_t flags;
	bool cache_enabled;		/* pin mode */
	bool hits_inline;		/* odpx_reg() tries cache.h:hit_home() first */
	bool check_prot;		/* hits ask the pages' protection (cache.c) */
	uint32_t acc_mask;		/* access bits that split the index */
	/* read by every hit, written at open and a line's first use: off the miss path's lines */
	struct hz_line *hz;		/* STAT_SHARDS lines, after the slab */
	_Atomic uint64_t hz_used;	/* the lines that ever held a slot of this context */
	struct stat_shard *shards;	/* STAT_SHARDS + 1 (overflow, atomic) */

	_Atomic uint32_t root[ACC_CLASSES] ALIGNED_LINE; /* AVL roots, the invalidation lock */

	pthread_mutex_t lock ALIGNED_LINE;
	uint32_t free_head;		/* free list through lru_prev/lru_next */
	/* the LRU's radix heap: buckets (FIFO), non-empty mask, last minimum */
	uint32_t lru_first[LRU_BUCKETS], lru_last_of[LRU_BUCKETS];
	uint64_t lru_mask[(LRU_BUCKETS + 63) / 64], lru_min_key;
	uint64_t nentries, pinned_bytes;	/* cached + direct, incl. reserved */
	/* evicted, not yet unpinned: charged to every miss but the evicting one (reserve.c) */
	uint64_t releasing_bytes, releasing_entries;
	uint64_t memcg_release_ns;	/* the last release of unused pins for the cgroup */
	/* ranges evicted lately, for the thrash detector (reserve.c; ctx->lock) */
	struct evicted_rec {
		uintptr_t start;	/* 0: empty */
		struct monitor_read rd;	/* begun at the eviction */
		uint32_t pages, ms;	/* the range's length; when evicted */
	} evicted[EVICTED_SETS * EVICTED_WAYS];
	uint32_t nevicted, evict_age_ms;
	struct odpx_limits lim;
	uint32_t lim_source;		/* enum odpx_limit_source of max_pinned_bytes */
	uint32_t tick_ms;
	uint32_t idle_ms;		/* idle.c: release what is unused this long, 0: never */
	struct prereg_set prereg;
	_Atomic bool prereg_stale;	/* a pre-registered entry died (kill_locked) */
	uint32_t linger_us;		/* engine.c: 0, never linger */

	_Atomic uint32_t dead_head ALIGNED_LINE;
	/* on their way to the free list: owned dead entries, victims being unpinned */
	_Atomic uint32_t releasing;
	/* dead entries with no counted reference that a hazard slot still held (cache.c) */
	_Atomic uint32_t held_head;
	_Atomic bool held_recheck;	/* a slot holding a dead entry was emptied */

	struct cold_stats *cs;
	void *stats_region;		/* holds shards and cs (stats.c) */
	void *stats_priv;		/* the publisher's own state, never in the shared file */

	struct odpx_ctx *list_next;	/* every open context (ctx.c, ctx_list_lock) */
	struct monitor_sub sub;		/* pin mode: the monitor's subscriber (cache.c) */
	_Atomic uint64_t monitor_retry_ns;	/* cache.c attach_monitor(); 0: none failed */

	/* engine */
	_Atomic(struct engine *) eng;	/* set under eng_lock once its thread runs; read by kickers */
	pthread_mutex_t eng_lock;	/* start/stop of the engine */
	uint64_t eng_retry_ns;		/* eng_lock: no start before, after a failed one */
	int eng_err;			/* eng_lock: that failure's -errno */
	struct prefetch_cell *pq;
	_Atomic uint64_t pq_head ALIGNED_LINE;	/* producers */
	_Atomic uint64_t pq_tail ALIGNED_LINE;	/* engine */

	void *be_priv;			/* the backend's */
	/* hybrid mode: the pin cache that serves its pinned part (backend_verbs.c) */
	struct odpx_ctx *pin_part;
	/* the mode's reason: a failed attach changes it after the open */
	pthread_mutex_t reason_lock;
	char reason[192];
	char reason_open[192];		/* the open's, while a failed attach has its own (reason_lock) */
};

/* ctx.c: the thread's reason text; returns @err */
int odpx_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* ctx.c: *@attr (NULL: none) into @a, its comp_mask checked, flags 0 unless given */
int attr_copy(const struct odpx_attr *attr, struct odpx_attr *a);

/* ctx.c: bytes pinned by the process's pin and direct contexts (the memory cgroup's) */
uint64_t ctx_pinned_total(void);
/* ctx.c: the context's reason, under its reason_lock (see struct odpx_ctx) */
void ctx_reason_set(struct odpx_ctx *ctx, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void ctx_reason_monitor(struct odpx_ctx *ctx, const char *why);

/* ctx.c: a knob of odpx(7), or @dflt if unset, empty or out of bounds (the open refuses it) */
uint64_t odpx_env(const char *name, uint64_t dflt);
/* ODPX_THRASH over the defaults into @c unless NULL; -EINVAL naming the bad key, @c untouched */
struct thrash_cfg;
int thrash_env(struct thrash_cfg *c);
extern _Atomic uint32_t odpx_fork_gen;

/* Every call on a context: 0, or -EINVAL (NULL, closed), -ESTALE (a fork's copy). */
static inline int ctx_check(struct odpx_ctx *ctx)
{
	if (unlikely(!ctx))
		return odpx_fail(-EINVAL, "NULL context");
	if (unlikely(ctx->magic != CTX_MAGIC))
		return odpx_fail(-EINVAL, "context %p is closed", (void *)ctx);
	if (unlikely(ctx->fork_gen != atomic_load_explicit(&odpx_fork_gen, memory_order_relaxed)))
		return odpx_fail(-ESTALE, "context inherited across fork(): open a new one");
	return 0;
}
uint64_t odpx_now_ns(void);	/* CLOCK_MONOTONIC (ctx.c) */

/* odpx_reg()'s arguments, one test for all (*end: a + len); reg_bad_args() tells which */
static inline bool reg_args_bad(uintptr_t a, size_t len, uint32_t access, struct odpx_mr **mr,
				uintptr_t *end)
{
	return !mr | !a | !len | __builtin_add_overflow(a, len, end) |
	       (*end > UINTPTR_MAX - PAGE_SIZE) | !!(access & ~(uint32_t)(ODPX_ACCESS_RESERVED - 1));
}
int reg_bad_args(const void *addr, size_t len, uint32_t access, struct odpx_mr **mr);

/* cache.c */
int cache_init(struct odpx_ctx *ctx);
void cache_fini(struct odpx_ctx *ctx);
int cache_reg(struct odpx_ctx *ctx, uintptr_t addr, size_t len, uint32_t access,
	      struct entry **out);
/* reg_ex.c: the pin cache's lookups that never block (TRY, PARTIAL); -EAGAIN if none serves */
int cache_try(struct odpx_ctx *ctx, uintptr_t a, size_t len, uint32_t acc, uint32_t flags,
	      struct entry **out);
/* 1: the pages of [s, end) allow @acc now; 0: they do not; -errno (cache.c) */
int cache_prot_allows(struct odpx_ctx *ctx, uintptr_t s, uintptr_t end, uint32_t acc);
int cache_reg_as(struct odpx_ctx *ctx, uintptr_t addr, size_t len, uint32_t access,
		 bool prereg, struct entry **out);
/* prereg.c */
bool prereg_revive(struct odpx_ctx *ctx, uintptr_t s, uintptr_t end, uint32_t acc);
void prereg_tick(struct odpx_ctx *ctx);		/* engine: drop what died */
int prereg_open(struct odpx_ctx *ctx, const struct odpx_attr *attr);
void prereg_usage(struct odpx_ctx *ctx, uint64_t *regions, uint64_t *bytes);
unsigned cache_reap_dead(struct odpx_ctx *ctx);
void cache_trim(struct odpx_ctx *ctx);
void cache_unlink_lru(struct odpx_ctx *ctx, uint32_t idx);
void cache_detach(struct odpx_ctx *ctx);	/* from the monitor, at close */
void cache_monitor_config(struct monitor_config *cfg);	/* the ODPX_ knobs of the monitor */
/* fabric_monitor.c: libfabric's live subscriptions, their bytes, notify() calls (0 without) */
void fabric_monitor_gauges(uint64_t *subs, uint64_t *bytes, uint64_t *notifies);
static inline uint32_t entry_idx(const struct odpx_ctx *ctx, const struct entry *e)
{
	return (uint32_t)(e - ctx->ent);
}

/* The context whose slab holds handle @e: a hybrid context's pinned part, or @ctx. */
static inline struct odpx_ctx *ctx_of_entry(struct odpx_ctx *ctx, const struct entry *e)
{
	struct odpx_ctx *pc = ctx->pin_part;

	return pc && e >= pc->ent && e < pc->ent + pc->max_entries ? pc : ctx;
}

/* The entry behind a handle: a hazard slot's (HZ_TAG), or the handle itself. */
static inline struct entry *mr_entry(const struct odpx_mr *mr)
{
	uintptr_t h = (uintptr_t)mr;

	if (h & HZ_TAG)
		return hz_entry(atomic_load_explicit((hz_slot *)(h & ~HZ_TAG), RLX));
	return (struct entry *)h;
}

/* The slab's mapping: the entries, then the hazard slots' lines (cache.c:cache_init()). */
static inline size_t slab_bytes(const struct odpx_ctx *ctx)
{
	return (size_t)ctx->max_entries * sizeof(struct entry) +
	       STAT_SHARDS * sizeof(struct hz_line);
}

/* The hit path's counters, inline (stats.c): the calling thread's shard. */
extern __thread uint32_t odpx_my_shard __attribute__((tls_model("initial-exec")));	/* index+1 */
uint32_t shard_claim(void);	/* stats.c: this thread's index+1, STAT_SHARDS+1 for the overflow */
void shard_atfork_child(void);
unsigned shards_lent(void);	/* how many threads hold a shard now */

static inline struct stat_shard *shard(struct odpx_ctx *ctx, bool *owned)
{
	uint32_t s = odpx_my_shard;

	if (unlikely(!s))
		s = shard_claim();
	*owned = s <= STAT_SHARDS;
	return &ctx->shards[*owned ? s - 1 : STAT_SHARDS];
}

/* an owned shard takes a plain load and store; the shared overflow, atomics */
static inline void shard_add(uint64_t *field, bool own, uint64_t v)
{
	if (own)
		__atomic_store_n(field, __atomic_load_n(field, __ATOMIC_RELAXED) + v,
				 __ATOMIC_RELAXED);
	else
		__atomic_fetch_add(field, v, __ATOMIC_RELAXED);
}

/* @taken: the bytes of the entry when the hit took it unused, else 0 */
static inline void stats_hit(struct odpx_ctx *ctx, int slow, uint64_t taken)
{
	bool own;
	struct stat_shard *sh = shard(ctx, &own);

	shard_add(slow ? &sh->hits_slow : &sh->hits, own, 1);
	if (taken)
		shard_add(&sh->taken, own, taken);
}

/* @released: the bytes of the entry when this release left it unused, else 0 */
static inline void stats_dereg(struct odpx_ctx *ctx, uint64_t released)
{
	bool own;
	struct stat_shard *sh = shard(ctx, &own);

	shard_add(&sh->deregs, own, 1);
	if (released)
		shard_add(&sh->released, own, released);
}
void stats_unused(struct odpx_ctx *ctx, uint64_t released, uint64_t taken);
/* Entries, pinned and unused bytes; a hybrid context's pins are its pinned part's (stats.c) */
void ctx_usage(struct odpx_ctx *ctx, uint64_t *entries, uint64_t *pinned, uint64_t *unused);
void stats_prefetch(struct odpx_ctx *ctx);
/* the drop-in (preload/) left one registration on @ctx's PD to libibverbs */
void odpx_stats_passthrough(struct odpx_ctx *ctx);

/* idle.c: the engine's records of (time, ctx->clock) every idle_ms / IDLE_STEPS */
#define IDLE_STEPS 4
#define IDLE_RECORDS 8		/* cover idle_ms and a step more */
struct idle_clock {
	uint64_t ns[IDLE_RECORDS], next_ns;
	uint32_t stamp[IDLE_RECORDS];
	unsigned n;
};
void idle_tick(struct odpx_ctx *ctx, struct idle_clock *ic, uint64_t now_ns);
/* reserve.c: evict the unused entries released before @stamp; how many */
unsigned cache_reap_idle(struct odpx_ctx *ctx, uint32_t stamp);
/* reserve.c, the memory cgroup (memcg.h): release @bytes of unused entries (UINT64_MAX: all) */
uint64_t cache_release_unused(struct odpx_ctx *ctx, uint64_t bytes);
/* room for a pin of [s, s+len), reserved already, after releasing unused entries: 0, -ENOMEM */
struct memcg_view;
int cache_memcg_room(struct odpx_ctx *ctx, uintptr_t s, uint64_t len, struct memcg_view *v);
void cache_memcg_tick(struct odpx_ctx *ctx);	/* engine: release unused under pressure */

/* engine.c */
int engine_start(struct odpx_ctx *ctx);	/* idempotent */
void engine_kick(struct odpx_ctx *ctx);	/* rings only if the engine sleeps */
void engine_atfork_prepare(void);
void engine_atfork_done(void);
void engine_child_fds(struct odpx_ctx *ctx);	/* in a fork child: the engine is gone */
int prefetch_enqueue(struct odpx_ctx *ctx, uintptr_t addr, size_t len, uint32_t flags);
/* Pin mode: pre-pin @r into the cache, left unused: 0; 1 if served direct (undone); -errno */
int prepin(struct odpx_ctx *ctx, const struct pf_range *r);

/* backend_uring.c */
int uring_backend_open(struct odpx_ctx *ctx);
ssize_t uring_transfer(struct odpx_ctx *ctx, uint32_t idx, int fd, off_t off,
		       void *addr, size_t len, int dir);

/* publish.c: the stats region is a published segment (layout in segment.h) */
int stats_seg_open(struct odpx_ctx *ctx, const struct odpx_attr *attr);	/* its thrash_cb */
void stats_seg_close(struct odpx_ctx *ctx);
void stats_gauges_publish(struct odpx_ctx *ctx);	/* ctx->lock held */
void stats_seg_reason(struct odpx_ctx *ctx);	/* after a change of ctx->reason */
void stats_seg_tick(struct odpx_ctx *ctx);	/* engine thread */
void stats_seg_read_extra(struct odpx_ctx *ctx, struct odpx_stats *st);
void stats_atfork_prepare(void);
void stats_atfork_parent(void);
void stats_atfork_child(void);	/* closes the child's copies of the segments' descriptors */

#include "config.h"		/* ODPX_HAVE_VERBS */

#endif
