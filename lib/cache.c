// SPDX-License-Identifier: MIT
/*
 * cache.c - the pin-down registration cache: lookups, the entries' life
 * cycle, misses and invalidation.  The index is index.h's; room for a new
 * entry (free list, LRU, eviction, the pin) is reserve.c's.
 *
 * A lookup takes no lock: it loads ctx->seq, searches, takes a reference
 * with a CAS on the entry's word (which fails if the entry was recycled,
 * since that bumps its generation), and re-reads ctx->seq.  A changed or odd
 * seq means retry; after a few retries it searches under the invalidation
 * lock.  The inline hit (cache.h) holds its entry in a hazard slot of the
 * calling thread instead, and writes nothing shared: an entry is unpinned
 * and freed only when no reference and no slot holds it (kill_locked(),
 * cache_reap_dead()).  A miss follows the monitor's protocol
 * (uffd/reader.c): watch, read_begin, pin with no lock held, read_retry,
 * insert.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cache.h"
#include "log.h"

#define MISS_RETRIES 3
#define FAST_TRIES 4

/*
 * On a hit, *taken is the entry's size if it was unused, else 0 (stats.c).
 * @partial: the entry need only overlap [a, aend) (ODPX_REG_PARTIAL).
 */
static int try_get(struct odpx_ctx *ctx, uint32_t idx, uintptr_t a, uintptr_t aend,
		   uint32_t acc, bool partial, struct entry **out, uint64_t *taken)
{
	struct entry *e = &ctx->ent[idx];
	uint64_t w = atomic_load_explicit(&e->word, ACQ);

	if (W_STATE(w) != ST_ALIVE || W_ACC(w) != acc || W_REF(w) == UINT32_MAX)
		return LK_RETRY;
	uint64_t span = LD(e->span);
	atomic_thread_fence(ACQ);	/* span read before the CAS validates it */
	uintptr_t s = SPAN_START(span), end = s + SPAN_BYTES(span);
	if (partial ? end <= a || s >= aend : !covers(span, a, aend))
		return LK_RETRY;
	if (!atomic_compare_exchange_strong_explicit(&e->word, &w, w + 1,
						     memory_order_acq_rel, RLX))
		return LK_RETRY;
	*out = e;
	*taken = W_REF(w) ? 0 : SPAN_BYTES(span);
	return LK_HIT;
}

/*
 * The lock-free read side (at the top).  @partial: the entry holding the
 * lowest page of [a, aend) that any entry holds.  On LK_MISS, *seen is the
 * (even) seq under which nothing was found.
 */
int lookup_fast(struct odpx_ctx *ctx, uintptr_t a, uintptr_t aend, uint32_t acc, bool partial,
		struct entry **out, uint64_t *taken, uint32_t *seen)
{
	for (int t = 0; t < FAST_TRIES; t++) {
		uint32_t s = seq_read(ctx);
		if (s & 1)
			continue;
		uint32_t idx = partial ? index_first_overlap(ctx, acc, a, aend)
				       : index_find(ctx, a, aend, acc);
		if (idx == NIL) {
			atomic_thread_fence(ACQ);
			if (!seq_retry(ctx, s)) {
				*seen = s;
				return LK_MISS;
			}
			continue;
		}
		if (try_get(ctx, idx, a, aend, acc, partial, out, taken) != LK_HIT)
			continue;
		atomic_thread_fence(ACQ);
		if (!seq_retry(ctx, s))
			return LK_HIT;
		cache_unget(ctx, *out, *taken);	/* an invalidation may have begun: redo */
	}
	return LK_RETRY;
}

/* Under the invalidation lock: nothing moves. */
static int lookup_locked(struct odpx_ctx *ctx, uintptr_t a, uintptr_t aend, uint32_t acc,
			 struct entry **out, uint64_t *taken)
{
	uint32_t idx = index_find(ctx, a, aend, acc);

	if (idx == NIL)
		return LK_MISS;
	struct entry *e = &ctx->ent[idx];
	uint64_t w = atomic_fetch_add_explicit(&e->word, 1, memory_order_acq_rel);

	*out = e;	/* ALIVE: an entry leaves the index before it dies, under the lock */
	*taken = W_REF(w) ? 0 : SPAN_BYTES(LD(e->span));
	return LK_HIT;
}

/*
 * mprotect() raises no userfaultfd event, so each hit asks the kernel (one
 * PROCMAP_QUERY per VMA) whether the request's pages still allow it:
 * readable, and writable for a write request or on io_uring, whose pins are
 * always writable.  1 allowed, 0 not, or -errno.  Asked for with
 * ODPX_OPEN_PROT_CHECK or ODPX_CHECK_PROT=1; a kernel without PROCMAP_QUERY (before 6.11), where a
 * parse of /proc/self/maps would cost more than a pin.
 */
int cache_prot_allows(struct odpx_ctx *ctx, uintptr_t s, uintptr_t end, uint32_t acc)
{
	bool write = (acc & ACC_WRITE_BITS) || ctx->be->id == ODPX_BACKEND_URING;
	struct vma_info v;
	int r;

	for (s &= ~(PAGE_SIZE - 1); s < end; s = v.end) {
		if ((r = vma_query_ioctl(s, &v)) < 0)
			return r == -ENOENT ? 0 : r == -ENOTTY ? 1 : r;
		if (v.start > s || !v.readable || (write && !v.writable))
			return 0;
	}
	return 1;
}

/* ---- entry life cycle ---- */

static void stack_push(struct odpx_ctx *ctx, _Atomic uint32_t *top, uint32_t idx)
{
	uint32_t head = atomic_load_explicit(top, RLX);

	do {
		ST(ctx->ent[idx].dnext, head);
	} while (!atomic_compare_exchange_weak_explicit(top, &head, idx, REL, RLX));
}

static void dead_push(struct odpx_ctx *ctx, uint32_t idx)
{
	atomic_fetch_add_explicit(&ctx->releasing, 1, RLX);
	stack_push(ctx, &ctx->dead_head, idx);
}

/*
 * Mark an indexed entry DEAD and take it out of the index, under the
 * invalidation lock inside a seq write section.  True: no reference was
 * left, and the caller owns it (pushes or frees it).  One that only hazard
 * slots hold goes on the dead stack here, for the reaper to wait on.
 */
bool kill_locked(struct odpx_ctx *ctx, uint32_t idx)
{
	struct entry *e = &ctx->ent[idx];
	uint64_t w = atomic_load_explicit(&e->word, RLX);

	index_remove(ctx, idx, W_ACC(w));
	if (!(ctx->flags & ODPX_OPEN_UNSAFE_NO_MONITOR))	/* never counted (below) */
		monitor_watch_ref(e_start(e), e_end(e), -1);
	if (e->kind & KIND_PREREG)	/* the next request inside makes it again (prereg.c) */
		atomic_store_explicit(&ctx->prereg_stale, true, RLX);
	/*
	 * ALIVE -> DEAD keeping the reference count: state is 1 -> 2.  Then the
	 * hazard slots, read after this store (both sequentially consistent):
	 * a hit that filled its slot too late for hz_holds() reads DEAD after.
	 */
	w = atomic_fetch_add_explicit(&e->word, 1ULL << W_STATE_SHIFT, memory_order_seq_cst);
	bool held = hz_holds(ctx, e);
	/*
	 * The unused bytes: the entry leaves them unless its counted references
	 * took it (their releases of a dead entry count nothing, ordered with
	 * this on the word).  A slot's hit that took it gives it back at its
	 * release whatever the state: a release reads the state unfenced, so
	 * the count may not depend on which state it saw.  Until that release
	 * the count is short by the entry.
	 */
	if (!W_REF(w))
		stats_unused(ctx, 0, SPAN_BYTES(LD(e->span)));
	if (W_REF(w))
		return false;
	if (held) {
		dead_push(ctx, idx);	/* the reaper waits for the slot to empty */
		return false;
	}
	return true;
}

/*
 * How many hazard slots of @ctx hold @e.  Sequentially consistent loads:
 * after the store that killed @e, they see every slot filled by a hit that
 * did not see it dead (cache.h:hit_slot()).
 */
unsigned hz_scan(struct odpx_ctx *ctx, const struct entry *e)
{
	unsigned n = 0;

	for (uint64_t m = atomic_load(&ctx->hz_used); m; m &= m - 1) {
		struct hz_line *l = &ctx->hz[__builtin_ctzll(m)];
		for (int k = 0; k < HZ_SLOTS; k++) {
			uintptr_t v = atomic_load(&l->e[k]);
			n += hz_entry(v) == e;
		}
	}
	return n;
}

/* A hazard slot that held a dead entry was emptied: the engine looks again. */
void hz_dead_emptied(struct odpx_ctx *ctx)
{
	atomic_store_explicit(&ctx->held_recheck, true, REL);
	engine_kick(ctx);
}

/* Entry back to the free list (ctx->lock held). */
void entry_free_locked(struct odpx_ctx *ctx, uint32_t idx)
{
	struct entry *e = &ctx->ent[idx];
	uint64_t w = LD(e->word);

	atomic_store_explicit(&e->word, W_MAKE(W_GEN(w) + 1, 0, ST_FREE, 0), REL);
	ctx->nentries--;
	ctx->pinned_bytes -= SPAN_BYTES(LD(e->span));
	stats_gauges_publish(ctx);
	free_push_locked(ctx, idx);
}

void unpin_one(struct odpx_ctx *ctx, uint32_t idx)
{
	ctx->be->unpin(ctx, idx);
	STAT_INC(ctx, unpins);
}

/* @dead: counted before the entry is freed, so whoever sees it gone sees it counted */
static void release_owned(struct odpx_ctx *ctx, uint32_t idx, bool dead)
{
	unpin_one(ctx, idx);
	if (dead)
		STAT_INC(ctx, dead_unpinned);
	pthread_mutex_lock(&ctx->lock);
	cache_unlink_lru(ctx, idx);
	entry_free_locked(ctx, idx);
	pthread_mutex_unlock(&ctx->lock);
}

/* Pop all of a stack of entries (NIL: empty). */
static uint32_t stack_take(_Atomic uint32_t *top)
{
	if (atomic_load_explicit(top, RLX) == NIL)
		return NIL;
	return atomic_exchange_explicit(top, NIL, ACQ);
}

/*
 * Unpin every dead entry with no holder, never on the uffd reader; returns
 * how many.  One that a hazard slot still holds waits on ctx->held_head,
 * looked at again at each call: the slot's holder empties it with a plain
 * store and rings the engine if it sees the entry dead (hz_dead_emptied()),
 * and the engine's tick calls too.
 */
unsigned cache_reap_dead(struct odpx_ctx *ctx)
{
	uint32_t i = stack_take(&ctx->dead_head), h;
	unsigned n = 0;

	/* a full fence before the slots are read: a later emptier's ring is not lost */
	if (atomic_load_explicit(&ctx->held_recheck, RLX))
		atomic_exchange(&ctx->held_recheck, false);
	h = stack_take(&ctx->held_head);
	/* the dead stack's entries count in ctx->releasing, the held ones' no longer */
	for (int pass = 0; pass < 2; pass++, i = h) {
		while (i != NIL) {
			uint32_t next = LD(ctx->ent[i].dnext);
			bool held = hz_holds(ctx, &ctx->ent[i]);
			if (held)
				stack_push(ctx, &ctx->held_head, i);
			else
				release_owned(ctx, i, true);
			if (!pass)
				atomic_fetch_sub_explicit(&ctx->releasing, 1, RLX);
			n += !held;
			i = next;
		}
	}
	return n;
}

/* The last reference of a DEAD entry is gone: it is ours to unpin. */
void put_dead(struct odpx_ctx *ctx, struct entry *e)
{
	if (KIND(e) == KIND_DIRECT) {
		release_owned(ctx, entry_idx(ctx, e), false);
		return;
	}
	dead_push(ctx, entry_idx(ctx, e));
	engine_kick(ctx);
}

/* Give back a reference a lookup took and could not keep. */
void cache_unget(struct odpx_ctx *ctx, struct entry *e, uint64_t taken)
{
	stats_unused(ctx, put_ref(ctx, e), taken);
}

/*
 * A reservation found no room while others' entries were on their way back
 * to the free list (dead ones the engine reaps, another miss's victims).
 * Reap, wait until some are back (releasing falls below rv->coming, or
 * rv->dead is freed), at most ROOM_WAIT_NS, and say whether to try again.
 */
#define ROOM_WAIT_NS 40000000ULL	/* docs/design.md, "The cache": about 40 ms, twice */

static bool room_coming(struct odpx_ctx *ctx, const struct reservation *rv)
{
	if (!rv->coming && rv->dead == NIL)
		return false;
	for (uint64_t end = odpx_now_ns() + ROOM_WAIT_NS;;) {
		cache_reap_dead(ctx);
		if (atomic_load_explicit(&ctx->releasing, ACQ) < rv->coming ||
		    (rv->dead != NIL && W_STATE(LD(ctx->ent[rv->dead].word)) != ST_DEAD) ||
		    odpx_now_ns() >= end)
			return true;
		struct timespec t = { 0, 20000 };
		nanosleep(&t, NULL);
	}
}

#define ROOM_WAITS 2	/* per registration */

/*
 * A pinned entry handed out with one reference: KIND_CACHED is ALIVE, for
 * the caller to index; KIND_DIRECT is not indexed, DEAD from birth, freed by
 * its only dereg.
 */
static struct entry *entry_set(struct odpx_ctx *ctx, int64_t idx, int kind, uintptr_t s,
			       uintptr_t end, uint32_t acc)
{
	struct entry *e = &ctx->ent[idx];
	int state = kind == KIND_DIRECT ? ST_DEAD : ST_ALIVE;

	e->kind = kind | (ctx->be->id == ODPX_BACKEND_URING ? KIND_URING : 0);
	e->access = (uint8_t)acc;
	ST(e->span, SPAN_MAKE(s, (end - s) >> PAGE_SHIFT));
	ST(e->last_use, LD(ctx->clock));
	if (kind == KIND_DIRECT)
		STAT_INC(ctx, direct_regs);
	atomic_store_explicit(&e->word, W_MAKE(W_GEN(LD(e->word)), acc, state, 1), REL);
	return e;
}

static int direct_reg(struct odpx_ctx *ctx, uintptr_t s, uintptr_t end, uint32_t acc,
		      struct entry **out)
{
	int64_t idx;
	int r;

	for (int waits = 0;; waits++) {
		struct reservation rv = { .victims = NIL, .dead = NIL };

		cache_reap_dead(ctx);
		pthread_mutex_lock(&ctx->lock);
		idx = reserve_locked(ctx, end - s, NIL, 0, &rv, false);
		pthread_mutex_unlock(&ctx->lock);
		if ((r = pin_reserved(ctx, idx, &rv, s, end - s, acc)) == 0)
			break;
		if (idx != -ENOMEM || waits == ROOM_WAITS || !room_coming(ctx, &rv))
			return r;
	}
	pthread_mutex_unlock(&ctx->lock);
	*out = entry_set(ctx, idx, KIND_DIRECT, s, end, acc);
	return 0;
}

static struct odpx_ctx *ctx_of_sub(struct monitor_sub *sub)
{
	return (struct odpx_ctx *)((char *)sub - offsetof(struct odpx_ctx, sub));
}

/*
 * After a failed attach misses are served direct, and the attach is tried
 * again at most once per MONITOR_RETRY_NS: a limit may be lifted.
 */
#define MONITOR_RETRY_NS 1000000000ULL

/* Once a process each: a refusal by the kernel, a limit that stopped the start. */
static void no_monitor_log(int err, char *why, size_t n)
{
	static atomic_bool refused_told, limit_told;
	char remedy[320];
	size_t len = strlen(why);

	if (err == -EMFILE || err == -ENFILE || err == -ENOMEM || err == -EAGAIN) {
		odpx_log_once(&limit_told, LOG_WARN, "the userfaultfd monitor could not start (%s: "
			      "a descriptor, memory or thread limit): registrations are served direct, "
			      "pinned per request, until a start a second later succeeds", why);
		return;
	}
	if ((err == -EPERM || err == -EACCES) && len < n)
		snprintf(why + len, n - len, " (a seccomp filter or vm.unprivileged_userfaultfd?)");
	odpx_why_uffd(err, remedy, sizeof(remedy));
	odpx_log_once(&refused_told, LOG_WARN, "pin mode cannot be kept coherent: %s. Every "
		      "registration is served direct, pinned per request (stats: direct_no_monitor)",
		      remedy);
}

/* The monitor's knobs from the environment, for every subscriber that may start it. */
void cache_monitor_config(struct monitor_config *cfg)
{
	*cfg = (struct monitor_config){
		.uffd_mode = getenv("ODPX_UFFD_MODE"),
		.watch_max = (unsigned)odpx_env("ODPX_WATCH_MAX", 0),
		.quarantine_ns = odpx_env("ODPX_REMOVE_QUARANTINE_MS", 100) * 1000000ULL,
		.spin_ns = odpx_env("ODPX_MONITOR_SPIN_US", 0) * 1000ULL,
		.widen_bytes = odpx_env("ODPX_WATCH_WIDEN_KB", MONITOR_WIDEN_DEFAULT >> 10) << 10,
	};
	if (cfg->uffd_mode && !strcmp(cfg->uffd_mode, "auto"))
		cfg->uffd_mode = NULL;
}

static int attach_monitor(struct odpx_ctx *ctx)
{
	struct monitor_config cfg;
	uint64_t retry, now = 0;
	char why[96];
	int r;

	if (atomic_load_explicit(&ctx->sub.attached, ACQ))
		return 0;
	retry = atomic_load_explicit(&ctx->monitor_retry_ns, RLX);
	if (retry && (now = odpx_now_ns()) < retry)
		return -ENOTSUP;
	/* one thread of the context retries; the others go direct meanwhile */
	if (retry && !atomic_compare_exchange_strong(&ctx->monitor_retry_ns, &retry,
						     now + MONITOR_RETRY_NS))
		return -ENOTSUP;
	cache_monitor_config(&cfg);
	r = monitor_attach(&ctx->sub, &cfg, why, sizeof(why));
	if (r < 0) {
		atomic_store(&ctx->monitor_retry_ns, odpx_now_ns() + MONITOR_RETRY_NS);
		no_monitor_log(r, why, sizeof(why));
	}
	ctx_reason_monitor(ctx, r < 0 ? why : NULL);
	return r;
}

/* A range the monitor would not watch (monitor_watch()'s -errno): direct, counted. */
static int watch_failed(struct odpx_ctx *ctx, uintptr_t s, uintptr_t end, uint32_t acc,
			struct entry **out, int r)
{
	switch (r) {
	case -EXDEV: STAT_INC(ctx, direct_shared); break;
	case -EAGAIN: STAT_INC(ctx, direct_racing); break;	/* it kept changing */
	case -EBUSY:
	case -EINVAL:
	case -EMFILE:	/* no descriptor free to look the VMA up */
	case -ENFILE: STAT_INC(ctx, direct_unwatchable); break;
	case -ENOSPC: STAT_INC(ctx, direct_budget); break;
	default:
		return odpx_fail(r, "%#lx-%#lx is not mapped or not accessible",
				 (unsigned long)s, (unsigned long)end);
	}
	return direct_reg(ctx, s, end, acc, out);
}

/* One miss in progress: the request, the range it pins and its reservation. */
struct miss {
	uintptr_t s, end;	/* the request's pages */
	uintptr_t us, ue;	/* what is pinned: the request, or merged with what it overlaps */
	uint32_t acc;
	bool unsafe;		/* ODPX_OPEN_UNSAFE_NO_MONITOR */
	bool alone;		/* the merged range's pin failed: the request alone */
	struct monitor_read rd;
	struct reservation rv;
	int64_t idx;
};

/* MISS_BESIDE: it overlaps a pre-registered entry, which a merge would supersede */
enum { MISS_HIT, MISS_UNWATCHED, MISS_RESERVED, MISS_BESIDE };

/*
 * Under ctx->lock and the invalidation lock: the lookup again (if the index
 * changed since @seen), the watch check, the merge, read_begin and the
 * reservation.
 */
static int miss_reserve(struct odpx_ctx *ctx, struct miss *m, uint32_t seen,
			struct entry **out)
{
	uint64_t taken;

	if (LD(ctx->seq) != seen && lookup_locked(ctx, m->s, m->end, m->acc, out, &taken) == LK_HIT) {
		stats_hit(ctx, 1, taken);
		return MISS_HIT;
	}
	/* checked with read_begin: a VMA replaced since monitor_watch() lost its record */
	if (!m->unsafe && !monitor_covers(m->s, m->end))
		return MISS_UNWATCHED;
	m->us = m->s;
	m->ue = m->end;
	/* merge with what it overlaps, unless that outgrows the cap */
	uint32_t x = m->alone ? NIL : index_first_overlap(ctx, m->acc, m->s, m->end);
	for (; x != NIL; x = index_next(ctx, LD(ctx->root[m->acc]), e_start(&ctx->ent[x]))) {
		uintptr_t xs = e_start(&ctx->ent[x]), xe = e_end(&ctx->ent[x]);
		if (xs >= m->end)
			break;
		if (ctx->ent[x].kind & KIND_PREREG)
			return MISS_BESIDE;
		uintptr_t ns = xs < m->us ? xs : m->us, ne = xe > m->ue ? xe : m->ue;
		if (ne - ns <= ctx->lim.max_entry_bytes && !exact_only(m->acc) &&
		    (m->unsafe || monitor_covers(ns, ne))) {
			m->us = ns;
			m->ue = ne;
		}
	}
	if (!m->unsafe && monitor_recently_invalidated(m->us, m->ue))
		STAT_INC(ctx, repins);
	monitor_read_begin(&m->rd);
	atomic_fetch_add_explicit(&ctx->clock, 1, RLX);
	/* room for the request; the merged range if it fits with no more eviction */
	m->rv = (struct reservation){ .victims = NIL, .dead = NIL };
	if (m->us != m->s || m->ue != m->end) {
		m->rv.wide_bytes = m->ue - m->us;
		m->rv.wide_home = bucket_of(ctx, m->us, m->acc);
	}
	m->idx = reserve_locked(ctx, m->end - m->s, bucket_of(ctx, m->s, m->acc), m->us, &m->rv,
				true);
	if (!m->rv.wide) {
		m->us = m->s;
		m->ue = m->end;
	}
	return MISS_RESERVED;
}

/*
 * Pinned, with ctx->lock held: read_retry under the invalidation lock,
 * then insert.  -EAGAIN: invalidated meanwhile, unpinned, try again.
 */
static int miss_insert(struct odpx_ctx *ctx, struct miss *m, struct entry **out)
{
	bool kick = false;
	int r;

	monitor_lock();
	r = m->unsafe ? 0 : monitor_read_retry(&m->rd, m->us, m->ue);
	if (r == -EAGAIN) {
		monitor_unlock();
		pthread_mutex_unlock(&ctx->lock);
		release_owned(ctx, (uint32_t)m->idx, false);
		STAT_INC(ctx, miss_retries);
		return -EAGAIN;
	}
	if (r == -EBUSY) {	/* a DONTNEED of this range may not have zapped yet: don't cache */
		monitor_unlock();
		pthread_mutex_unlock(&ctx->lock);
		STAT_INC(ctx, direct_racing);
		*out = entry_set(ctx, m->idx, KIND_DIRECT, m->us, m->ue, m->acc);
		return 0;
	}
	seq_begin(ctx);
	for (uint32_t x; (x = index_first_overlap(ctx, m->acc, m->us, m->ue)) != NIL;) {
		if (kill_locked(ctx, x)) {
			dead_push(ctx, x);
			kick = true;
		}
		STAT_INC(ctx, superseded);
	}
	*out = entry_set(ctx, m->idx, KIND_CACHED, m->us, m->ue, m->acc);
	index_insert(ctx, (uint32_t)m->idx, m->acc);
	/* counted for attached contexts only, as the watch records' recount does */
	if (!m->unsafe)
		monitor_watch_ref(m->us, m->ue, +1);
	seq_end(ctx);
	monitor_unlock();
	lru_link(ctx, (uint32_t)m->idx);
	pthread_mutex_unlock(&ctx->lock);
	if (kick)
		engine_kick(ctx);
	return 0;
}

/* @seen: the seq of a lookup that found nothing, or odd (none) */
static int miss(struct odpx_ctx *ctx, uintptr_t s, uintptr_t end, uint32_t acc,
		struct entry **out, uint32_t seen)
{
	struct miss m = { .s = s, .end = end, .acc = acc,
			  .unsafe = ctx->flags & ODPX_OPEN_UNSAFE_NO_MONITOR };
	bool watched = false;
	int waits = 0, r;

	STAT_INC(ctx, misses);
	if (!m.unsafe && attach_monitor(ctx) < 0) {
		STAT_INC(ctx, direct_no_monitor);
		return direct_reg(ctx, s, end, acc, out);
	}
	/* cache only with an engine: it unpins dead entries, and trims */
	if (!engine_running(ctx) && (r = engine_start(ctx)) < 0) {
		static atomic_bool told;

		odpx_log_once(&told, LOG_WARN, "the engine thread could not start (%s: a descriptor, "
			      "memory or thread limit): registrations are served direct until a start "
			      "a second later succeeds (stats: direct_no_engine)", strerror(-r));
		STAT_INC(ctx, direct_no_engine);
		return direct_reg(ctx, s, end, acc, out);
	}
	for (int attempt = 0; attempt < MISS_RETRIES;) {
		cache_reap_dead(ctx);
		pthread_mutex_lock(&ctx->lock);
		monitor_lock();
		r = miss_reserve(ctx, &m, seen, out);
		monitor_unlock();
		pthread_mutex_unlock(&ctx->lock);
		if (r == MISS_HIT)
			return 0;
		if (r == MISS_BESIDE)	/* served beside the region, direct */
			return direct_reg(ctx, s, end, acc, out);
		if (r == MISS_UNWATCHED) {
			if (watched) {	/* watched, and replaced since */
				STAT_INC(ctx, miss_retries);
				attempt++;
				watched = false;
				continue;
			}
			if ((r = monitor_watch(s, end)) < 0)
				return watch_failed(ctx, s, end, acc, out, r);
			watched = true;
			continue;
		}
		if (m.idx >= 0 && (m.us != s || m.ue != end))
			STAT_INC(ctx, merges);
		/* victims first: a victim's slot may be the one we pin into */
		if ((r = pin_reserved(ctx, m.idx, &m.rv, m.us, m.ue - m.us, acc)) < 0) {
			if (m.idx == -ENOMEM && waits++ < ROOM_WAITS && room_coming(ctx, &m.rv))
				continue;
			/* what it overlaps may be mprotect()ed: the request alone supersedes it */
			if (m.idx >= 0 && (m.us != s || m.ue != end) && !m.alone) {
				m.alone = true;
				continue;
			}
			return r;
		}
		if ((r = miss_insert(ctx, &m, out)) != -EAGAIN)
			return r;
		attempt++;	/* bounded: then it is served direct */
		watched = false;	/* one attempt for one invalidation, cut watch or not */
	}
	STAT_INC(ctx, direct_racing);	/* invalidated at every attempt */
	return direct_reg(ctx, s, end, acc, out);
}

/*
 * @prereg: for a pre-registered region (prereg.c): up to the backend's
 * largest entry rather than max_entry_bytes, and no revival of regions.
 */
int cache_reg_as(struct odpx_ctx *ctx, uintptr_t addr, size_t len, uint32_t acc,
		 bool prereg, struct entry **out)
{
	uintptr_t s = addr & ~(PAGE_SIZE - 1);
	uintptr_t end = (addr + len + PAGE_SIZE - 1) & ~(PAGE_SIZE - 1);
	uint64_t max = ctx->lim.max_entry_bytes;
	bool revived = false;

	if (prereg)
		max = ctx->be->max_entry_bytes ? ctx->be->max_entry_bytes : SPAN_MAX_BYTES;
	acc &= ctx->acc_mask;
	if (end - s > max)
		return odpx_fail(-E2BIG, "%zu bytes exceed max_entry_bytes %" PRIu64 ": register it "
				 "in parts, or raise odpx_limits.max_entry_bytes (1 GiB at most on "
				 "io_uring, the device's max_mr_size on verbs)", len, max);
	/* ODPX_OPEN_REMOTE_UNCACHED: remote access is pinned per request */
	if (!ctx->cache_enabled || ((ctx->flags & ODPX_OPEN_REMOTE_UNCACHED) && exact_only(acc)))
		return direct_reg(ctx, s, end, acc, out);

	uint64_t taken;
	uint32_t seen;
	int r, slow = 0;
again:
	seen = 1;
	r = lookup_fast(ctx, addr, addr + len, acc, false, out, &taken, &seen);
	if (r == LK_RETRY) {
		slow = 1;
		monitor_lock();
		r = lookup_locked(ctx, addr, addr + len, acc, out, &taken);
		monitor_unlock();
	}
	if (likely(r == LK_HIT)) {
		if (likely(!ctx->check_prot) ||
		    (r = cache_prot_allows(ctx, addr, addr + len, acc)) == 1) {
			stats_hit(ctx, slow, taken);
			return 0;
		}
		cache_unget(ctx, *out, taken);
		if (r < 0)	/* the kernel could not be asked: a pin of its own asks it */
			return direct_reg(ctx, s, end, acc, out);
		/* the cached pins over pages that no longer allow it go; the miss decides */
		monitor_invalidate(s, end);
		seen = 1;
	}
	/* inside a pre-registered region that was invalidated: make it again */
	if (!prereg && !revived && atomic_load_explicit(&ctx->prereg_stale, RLX)) {
		revived = true;
		if (prereg_revive(ctx, s, end, acc))
			goto again;
	}
	return miss(ctx, s, end, acc, out, seen);
}

int cache_reg(struct odpx_ctx *ctx, uintptr_t addr, size_t len, uint32_t acc,
	      struct entry **out)
{
	return cache_reg_as(ctx, addr, len, acc, false, out);
}

/*
 * The subscriber's invalidate(), under the invalidation lock inside the
 * seq write section: kill the entries overlapping [s, e).  No allocation,
 * no unpin: an owned dead entry goes on the dead stack, for the engine.
 */
static unsigned sub_invalidate(struct monitor_sub *sub, uintptr_t s, uintptr_t e,
			       enum monitor_event ev)
{
	struct odpx_ctx *ctx = ctx_of_sub(sub);
	unsigned n = 0;

	switch (ev) {
	case MONITOR_UNMAP: STAT_INC(ctx, inval_unmap); break;
	case MONITOR_REMOVE: STAT_INC(ctx, inval_remove); break;
	case MONITOR_REMAP: STAT_INC(ctx, inval_remap); break;
	case MONITOR_API: STAT_INC(ctx, inval_api); break;
	}

	for (uint32_t acc = 0; acc < ACC_CLASSES; acc++) {
		uint32_t x;
		while (LD(ctx->root[acc]) != NIL && (x = index_first_overlap(ctx, acc, s, e)) != NIL) {
			STAT_ADD(ctx, inval_bytes, SPAN_BYTES(LD(ctx->ent[x].span)));
			if (kill_locked(ctx, x))
				dead_push(ctx, x);
			n++;
		}
	}
	if (n)
		STAT_ADD(ctx, inval_entries, n);
	return n;
}

/* Live entries overlapping [s, e), not only those starting there. */
static uint64_t sub_count(struct monitor_sub *sub, uintptr_t s, uintptr_t e)
{
	struct odpx_ctx *ctx = ctx_of_sub(sub);
	uint64_t n = 0;

	for (uint32_t acc = 0; acc < ACC_CLASSES; acc++) {
		uint32_t root = LD(ctx->root[acc]);
		for (uint32_t x = index_first_overlap(ctx, acc, s, e); x != NIL && e_start(&ctx->ent[x]) < e;
		     x = index_next(ctx, root, e_start(&ctx->ent[x])))
			n++;
	}
	return n;
}

/* Wake the engine if there is something to unpin. */
static void sub_kick(struct monitor_sub *sub)
{
	struct odpx_ctx *ctx = ctx_of_sub(sub);

	if (atomic_load_explicit(&ctx->dead_head, memory_order_acquire) != NIL)
		engine_kick(ctx);
}

static const struct monitor_sub_ops sub_ops = {
	.invalidate = sub_invalidate,
	.count = sub_count,
	.kick = sub_kick,
};

void cache_detach(struct odpx_ctx *ctx)
{
	monitor_detach(&ctx->sub);
}

int cache_init(struct odpx_ctx *ctx)
{
	ctx->ent = mmap(NULL, slab_bytes(ctx), PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (ctx->ent == MAP_FAILED) {
		ctx->ent = NULL;
		return -ENOMEM;
	}
	ctx->hz = (struct hz_line *)(ctx->ent + ctx->max_entries);	/* zero: all empty */
	for (uint32_t i = 0; i < ctx->max_entries; i++) {
		struct entry *e = &ctx->ent[i];
		ST(e->bucket, NIL);
		ST(e->hnext, NIL);
		ST(e->left, NIL);
		ST(e->right, NIL);
		e->lru_prev = i ? i - 1 : NIL;	/* the free list, in index order */
		e->lru_next = i + 1 < ctx->max_entries ? i + 1 : NIL;
		ST(e->dnext, NIL);
	}
	for (int a = 0; a < ACC_CLASSES; a++)
		ST(ctx->root[a], NIL);
	ctx->sub.ops = &sub_ops;
	ctx->sub.seq = &ctx->seq;
	ctx->free_head = 0;
	for (int b = 0; b < LRU_BUCKETS; b++)
		ctx->lru_first[b] = ctx->lru_last_of[b] = NIL;
	atomic_store(&ctx->dead_head, NIL);
	atomic_store(&ctx->held_head, NIL);
	return 0;
}

/* Close: every entry is unpinned, held or not.  The monitor is detached. */
void cache_fini(struct odpx_ctx *ctx)
{
	if (!ctx->ent)
		return;
	for (uint32_t i = 0; i < ctx->max_entries; i++) {
		uint64_t w = LD(ctx->ent[i].word);
		if (W_STATE(w) != ST_FREE)
			unpin_one(ctx, i);
	}
	munmap(ctx->ent, slab_bytes(ctx));
	ctx->ent = NULL;
}
