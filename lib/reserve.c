// SPDX-License-Identifier: MIT
/*
 * reserve.c - room for a new entry of the pin cache: the free list, the LRU
 * of unused entries, eviction within the limits, and the pin into a
 * reserved entry.  Everything here runs under ctx->lock, and under the
 * invalidation lock too where it kills an indexed entry; victims are
 * unpinned after both are dropped.
 *
 * LRU: lazy and exact at the resolution of misses.  A release stores
 * ctx->clock (bumped at each miss) in @last_use without a lock.  The linked
 * entries sit in a radix heap (Ahuja, Mehlhorn, Orlin and Tarjan, 1990)
 * keyed by @link_stamp, a lower bound of their last release.  The evictor
 * takes the least key; an entry released since it was linked goes back in
 * under its new stamp, an entry in use under the current clock.  The first
 * minimum with last_use == link_stamp and no reference is the least recently
 * released entry.  Keys never fall below the last minimum taken, as a radix
 * heap needs: linking is O(1), taking the minimum O(log of the stamp range)
 * amortized.
 */
#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>

#include "log.h"
#include "cache.h"
#include "memcg.h"

#define LRU_AGE_MAX (1U << 30)

/*
 * The free list is doubly linked through the LRU links, unused while free;
 * ctx->lock in pin and direct modes, the verbs backend's lock in the ODP modes.
 */
void free_push_locked(struct odpx_ctx *ctx, uint32_t idx)
{
	struct entry *e = &ctx->ent[idx];

	e->lru_prev = NIL;
	e->lru_next = ctx->free_head;
	if (ctx->free_head != NIL)
		ctx->ent[ctx->free_head].lru_prev = idx;
	ctx->free_head = idx;
}

/* Take a free entry, preferably @home, its start's hash bucket (index.h). */
uint32_t take_free_locked(struct odpx_ctx *ctx, uint32_t home)
{
	uint32_t idx = ctx->free_head;

	if (home < ctx->max_entries &&
	    W_STATE(LD(ctx->ent[home].word)) == ST_FREE &&
	    (ctx->free_head == home || ctx->ent[home].lru_prev != NIL))
		idx = home;
	struct entry *e = &ctx->ent[idx];
	if (e->lru_prev != NIL)
		ctx->ent[e->lru_prev].lru_next = e->lru_next;
	else
		ctx->free_head = e->lru_next;
	if (e->lru_next != NIL)
		ctx->ent[e->lru_next].lru_prev = e->lru_prev;
	e->lru_prev = e->lru_next = NIL;
	return idx;
}

/* The key of a stamp: stamps are 32-bit, keys count on from the minimum. */
static uint64_t lru_key(const struct odpx_ctx *ctx, uint32_t stamp)
{
	return ctx->lru_min_key + (uint32_t)(stamp - (uint32_t)ctx->lru_min_key);
}

/*
 * Bucket 0 holds the keys equal to the minimum; a key whose highest base-16
 * digit differing from the minimum's is digit j, of value d, is in bucket
 * 1 + 16j + d (a carry makes j any of 0..15).  A lower bucket holds only
 * lower keys, and an entry moves at most 16 times between two links.
 */
static unsigned lru_bucket(const struct odpx_ctx *ctx, uint64_t key)
{
	uint64_t x = key ^ ctx->lru_min_key;

	if (!x)
		return 0;
	unsigned j = (63 - (unsigned)__builtin_clzll(x)) / 4;
	return 1 + 16 * j + (unsigned)((key >> (4 * j)) & 15);
}

static void lru_mask_set(struct odpx_ctx *ctx, unsigned b, bool on)
{
	if (on)
		ctx->lru_mask[b / 64] |= 1ULL << (b % 64);
	else
		ctx->lru_mask[b / 64] &= ~(1ULL << (b % 64));
}

/* The least non-empty bucket, LRU_BUCKETS if none. */
static unsigned lru_least(const struct odpx_ctx *ctx)
{
	for (unsigned i = 0; i < (LRU_BUCKETS + 63) / 64; i++)
		if (ctx->lru_mask[i])
			return 64 * i + (unsigned)__builtin_ctzll(ctx->lru_mask[i]);
	return LRU_BUCKETS;
}

static bool lru_is_mark(uint32_t i) { return i != NIL && i >= LRU_MARK(LRU_BUCKETS - 1); }

/* Link at the tail of its key's bucket: equal keys leave in link order. */
static void lru_push(struct odpx_ctx *ctx, uint32_t idx, uint32_t stamp)
{
	struct entry *e = &ctx->ent[idx];

	/* below the minimum: a release raced another one, which stored later */
	if ((int32_t)(stamp - (uint32_t)ctx->lru_min_key) < 0)
		stamp = (uint32_t)ctx->lru_min_key;
	unsigned b = lru_bucket(ctx, lru_key(ctx, stamp));
	uint32_t t = ctx->lru_last_of[b];

	e->link_stamp = stamp;
	e->lru_next = LRU_MARK(b);
	e->lru_prev = t == NIL ? LRU_MARK(b) : t;
	if (t == NIL)
		ctx->lru_first[b] = idx;
	else
		ctx->ent[t].lru_next = idx;
	ctx->lru_last_of[b] = idx;
	lru_mask_set(ctx, b, true);
}

void lru_link(struct odpx_ctx *ctx, uint32_t idx)
{
	lru_push(ctx, idx, LD(ctx->ent[idx].last_use));
}

void cache_unlink_lru(struct odpx_ctx *ctx, uint32_t idx)
{
	struct entry *e = &ctx->ent[idx];
	uint32_t p = e->lru_prev, n = e->lru_next;

	if (p == NIL)
		return;	/* not linked */
	if (lru_is_mark(p))
		ctx->lru_first[LRU_MARK(0) - p] = lru_is_mark(n) ? NIL : n;
	else
		ctx->ent[p].lru_next = n;
	if (lru_is_mark(n))
		ctx->lru_last_of[LRU_MARK(0) - n] = lru_is_mark(p) ? NIL : p;
	else
		ctx->ent[n].lru_prev = p;
	if (lru_is_mark(p) && lru_is_mark(n))
		lru_mask_set(ctx, LRU_MARK(0) - p, false);
	e->lru_prev = e->lru_next = NIL;
}

static void lru_relink(struct odpx_ctx *ctx, uint32_t idx, uint32_t stamp)
{
	cache_unlink_lru(ctx, idx);
	lru_push(ctx, idx, stamp);
}

/*
 * The linked entry of least key, first linked among equals; NIL if none.
 * When bucket 0 is empty, the least key of the least bucket becomes the
 * minimum and that bucket's entries move down.
 */
static uint32_t lru_min(struct odpx_ctx *ctx)
{
	unsigned b = lru_least(ctx);

	if (b == LRU_BUCKETS)
		return NIL;
	if (b) {
		uint64_t min = UINT64_MAX;
		uint32_t i;

		for (i = ctx->lru_first[b]; !lru_is_mark(i); i = ctx->ent[i].lru_next) {
			uint64_t k = lru_key(ctx, ctx->ent[i].link_stamp);
			min = k < min ? k : min;
		}
		i = ctx->lru_first[b];
		ctx->lru_first[b] = ctx->lru_last_of[b] = NIL;
		lru_mask_set(ctx, b, false);
		ctx->lru_min_key = min;
		while (!lru_is_mark(i)) {
			uint32_t next = ctx->ent[i].lru_next;
			lru_push(ctx, i, ctx->ent[i].link_stamp);
			i = next;
		}
	}
	return ctx->lru_first[0];
}

/*
 * Keep every key within LRU_AGE_MAX stamps of the clock, so that 32-bit
 * stamps compare right however long the process runs: the entries released
 * more than half of it ago are keyed as if released just then (they tie as
 * the oldest).
 */
static void lru_age(struct odpx_ctx *ctx)
{
	uint32_t now = LD(ctx->clock), floor = now - LRU_AGE_MAX / 2, idx;

	if (now - (uint32_t)ctx->lru_min_key < LRU_AGE_MAX)
		return;
	while ((idx = lru_min(ctx)) != NIL && (int32_t)(ctx->ent[idx].link_stamp - floor) < 0)
		lru_relink(ctx, idx, floor);
	if (idx == NIL)		/* empty: the minimum moves up alone */
		ctx->lru_min_key = lru_key(ctx, floor);
}

/* Is the least linked key below *@before (idle release)? */
static bool idle_due(struct odpx_ctx *ctx, const uint32_t *before)
{
	uint32_t idx;

	if (!before || (idx = lru_min(ctx)) == NIL)
		return false;
	return (int32_t)(ctx->ent[idx].link_stamp - *before) < 0;
}

/*
 * The evicted ranges' records: sets of EVICTED_WAYS, chosen by Fibonacci
 * hashing of the start page (any stride spreads).  A record lives
 * evict_age_ms (the detector's window times enter_n); a set full of live
 * records loses its oldest, so a working set that overflows the cache by
 * more than about EVICTED_SETS * EVICTED_WAYS ranges is seen in part only.
 */
static uint32_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint32_t)((uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000);
}

static struct evicted_rec *evicted_set(struct odpx_ctx *ctx, uintptr_t start)
{
	uint64_t h = (uint64_t)(start >> PAGE_SHIFT) * 0x9e3779b97f4a7c15ULL;

	_Static_assert((EVICTED_SETS & (EVICTED_SETS - 1)) == 0, "a power of two");
	return &ctx->evicted[(h >> (64 - __builtin_ctz(EVICTED_SETS))) * EVICTED_WAYS];
}

static bool evicted_live(const struct odpx_ctx *ctx, const struct evicted_rec *r, uint32_t now)
{
	return r->start && now - r->ms <= ctx->evict_age_ms;
}

/* @start was evicted, @rd begun then (ctx->lock). */
static void evicted_note(struct odpx_ctx *ctx, uintptr_t start, uint64_t bytes,
			 const struct monitor_read *rd)
{
	struct evicted_rec *set = evicted_set(ctx, start), *r = NULL;
	uint32_t now = now_ms();

	for (unsigned w = 0; w < EVICTED_WAYS; w++) {
		struct evicted_rec *x = &set[w];

		if (x->start == start || !evicted_live(ctx, x, now)) {
			r = x;	/* the same start again, or room */
			break;
		}
		if (!r || now - x->ms > now - r->ms)
			r = x;	/* the oldest so far */
	}
	r->start = start;
	r->rd = *rd;
	r->pages = (uint32_t)(bytes >> PAGE_SHIFT);
	r->ms = now;
	ctx->nevicted++;
}

/*
 * A miss at @s (both locks) at the start of a range evicted lately is the
 * working set coming back (evict_remiss), unless the read section begun at
 * the eviction fails for the range: then it is new memory (repin_fresh).
 * Without a monitor every re-miss counts.  Each record counts once.
 */
static void count_remiss(struct odpx_ctx *ctx, uintptr_t s)
{
	struct evicted_rec *set = evicted_set(ctx, s);

	for (unsigned w = 0; w < EVICTED_WAYS; w++) {
		struct evicted_rec *r = &set[w];

		if (r->start != s)
			continue;
		if (evicted_live(ctx, r, now_ms())) {
			uintptr_t e = s + ((uintptr_t)r->pages << PAGE_SHIFT);

			if (!(ctx->flags & ODPX_OPEN_UNSAFE_NO_MONITOR) &&
			    monitor_read_retry(&r->rd, s, e) != 0)
				STAT_INC(ctx, repin_fresh);
			else
				STAT_INC(ctx, evict_remiss);
		}
		r->start = 0;
		return;
	}
}

/*
 * Evict unused entries until one more entry of @bytes fits, under ctx->lock,
 * and with @idle_before every unused entry released before that stamp
 * (counted in idle_released).  Victims go on rv->victims for the caller to
 * unpin after unlocking.  Returns false when everything left is in use.
 */
static bool make_room(struct odpx_ctx *ctx, uint64_t max_entries, uint64_t max_bytes,
		      uint64_t bytes, struct reservation *rv, bool mon_held,
		      const uint32_t *idle_before)
{
	uint64_t scanned = 0, limit = ctx->nentries * 2 + 2;

	lru_age(ctx);	/* every miss comes here, linking or not */
	/* our own victims are unpinned before our pin; other misses' may not be */
	while (ctx->nentries + (ctx->releasing_entries - rv->nvictims) + 1 > max_entries ||
	       ctx->pinned_bytes + (ctx->releasing_bytes - rv->victim_bytes) + bytes > max_bytes ||
	       idle_due(ctx, idle_before)) {
		uint32_t idx = lru_min(ctx);

		if (idx == NIL || scanned++ > limit)
			return false;
		struct entry *e = &ctx->ent[idx];
		uint64_t w = atomic_load_explicit(&e->word, ACQ);
		uint32_t used = LD(e->last_use);

		if (W_STATE(w) != ST_ALIVE || W_REF(w) || hz_holds(ctx, e)) {
			/*
			 * In use: its release stamps it later.  Dead: it stays linked
			 * until freed, so that every scan meets it (struct
			 * reservation, @dead).  A hazard slot's hold seen here is a
			 * hint; kill_locked() reads the slots again after the kill.
			 */
			lru_relink(ctx, idx, LD(ctx->clock));
			if (W_STATE(w) != ST_ALIVE && !W_REF(w) && !hz_holds(ctx, e))
				rv->dead = idx;
			continue;
		}
		if ((int32_t)(used - e->link_stamp) > 0) {	/* released since linked */
			lru_relink(ctx, idx, used);
			continue;
		}
		if (!mon_held)
			monitor_lock();
		/* again under the lock: a hit and release meanwhile put it back */
		w = atomic_load_explicit(&e->word, ACQ);
		bool owned = false, again = LD(e->last_use) != used;
		struct monitor_read rd = { 0 };
		if (W_STATE(w) == ST_ALIVE && W_REF(w) == 0 && !again) {
			seq_begin(ctx);
			owned = kill_locked(ctx, idx);	/* else a hit won: it pushes */
			seq_end(ctx);
			monitor_read_begin(&rd);	/* for count_remiss() */
		}
		if (!mon_held)
			monitor_unlock();
		if (again) {
			lru_relink(ctx, idx, LD(e->last_use));
			continue;
		}
		if (owned) {
			cache_unlink_lru(ctx, idx);
			/* account now so the loop sees the room; freed after unpin */
			atomic_fetch_add_explicit(&ctx->releasing, 1, RLX);
			ctx->nentries--;
			ctx->pinned_bytes -= SPAN_BYTES(LD(e->span));
			ctx->releasing_bytes += SPAN_BYTES(LD(e->span));
			ctx->releasing_entries++;
			rv->victim_bytes += SPAN_BYTES(LD(e->span));
			rv->nvictims++;
			ST(e->dnext, rv->victims);
			rv->victims = idx;
			if (idle_before) {
				STAT_INC(ctx, idle_released);
			} else {
				STAT_INC(ctx, evictions);
				evicted_note(ctx, e_start(e), SPAN_BYTES(LD(e->span)), &rd);
			}
			stats_gauges_publish(ctx);
		}
		/* else a hit took it meanwhile: met again, in use or dead */
	}
	return true;
}

/* The reused slot's old range is unpinned or replaced: its charge goes (ctx->lock). */
static void reused_free_locked(struct odpx_ctx *ctx, uint64_t reused)
{
	ctx->releasing_bytes -= reused;
	atomic_fetch_sub_explicit(&ctx->releasing, 1, RLX);
}

/* Unpin the victims and free them, and drop an unpinned reused range's charge. */
static void free_victims(struct odpx_ctx *ctx, uint32_t v, uint64_t reused)
{
	if (v == NIL && !reused)
		return;
	for (uint32_t x = v; x != NIL; x = LD(ctx->ent[x].dnext))
		unpin_one(ctx, x);
	pthread_mutex_lock(&ctx->lock);
	while (v != NIL) {
		uint32_t next = LD(ctx->ent[v].dnext);
		ctx->nentries++;	/* entry_free_locked takes it off again */
		ctx->pinned_bytes += SPAN_BYTES(LD(ctx->ent[v].span));
		ctx->releasing_bytes -= SPAN_BYTES(LD(ctx->ent[v].span));
		ctx->releasing_entries--;
		entry_free_locked(ctx, v);
		atomic_fetch_sub_explicit(&ctx->releasing, 1, RLX);
		v = next;
	}
	if (reused)
		reused_free_locked(ctx, reused);
	pthread_mutex_unlock(&ctx->lock);
}

/*
 * Reserve an entry and @bytes within the limits, under ctx->lock (and the
 * invalidation lock when @mon_held), evicting onto rv->victims; the merged
 * range rv->wide_bytes instead if it fits once the request has its room.
 * The last victim's slot is taken when the backend's pin replaces what a
 * slot holds and both ranges fit max_pinned_bytes together (the kernel pins
 * the new range first), or when no slot is free (then unpinned first).  That
 * slot still pins rv->reused bytes, in releasing_bytes until pin_reserved()
 * unpins or replaces them.  Returns the entry or -ENOMEM (rv->coming, rv->dead set).
 */
int64_t reserve_locked(struct odpx_ctx *ctx, uint64_t bytes, uint32_t home,
		       uintptr_t start, struct reservation *rv, bool mon_held)
{
	uint64_t max = ctx->lim.max_pinned_bytes;
	uint32_t idx;

	if (bytes > max)
		return -ENOMEM;
	if (start && ctx->nevicted && mon_held)
		count_remiss(ctx, start);
	if (!make_room(ctx, ctx->lim.max_entries, max, bytes, rv, mon_held, NULL) ||
	    (ctx->free_head == NIL && rv->victims == NIL)) {
		rv->coming = LD(ctx->releasing) - rv->nvictims;
		return -ENOMEM;
	}
	/* others' victims are still pinned, ours will not be by our pin */
	uint64_t others = ctx->releasing_bytes - rv->victim_bytes;

	rv->wide = rv->wide_bytes > bytes && ctx->pinned_bytes + others + rv->wide_bytes <= max;
	if (rv->wide) {
		bytes = rv->wide_bytes;
		home = rv->wide_home;
	}
	if (rv->victims != NIL && ctx->be->pin_replaces) {
		uint64_t old = SPAN_BYTES(LD(ctx->ent[rv->victims].span));

		rv->replace = ctx->pinned_bytes + others + old + bytes <= max;
	}
	if (ctx->free_head != NIL && !rv->replace) {
		idx = take_free_locked(ctx, home);
	} else {
		struct entry *e = &ctx->ent[idx = rv->victims];
		rv->victims = LD(e->dnext);
		rv->reused = SPAN_BYTES(LD(e->span));	/* still releasing, ours now */
		ctx->releasing_entries--;	/* the slot counts in nentries again */
		atomic_store_explicit(&e->word, W_MAKE(W_GEN(LD(e->word)) + 1, 0, ST_FREE, 0), REL);
	}
	ctx->nentries++;
	ctx->pinned_bytes += bytes;
	stats_gauges_publish(ctx);
	ST(ctx->ent[idx].span, SPAN_MAKE(0UL, bytes >> PAGE_SHIFT));
	return idx;
}

/* make_room() for no new entry, under ctx->lock taken here; returns how many went. */
static unsigned evict(struct odpx_ctx *ctx, uint64_t max_entries, uint64_t max_bytes,
		      const uint32_t *idle_before)
{
	struct reservation rv = { .victims = NIL, .dead = NIL };

	pthread_mutex_lock(&ctx->lock);
	make_room(ctx, max_entries, max_bytes, 0, &rv, false, idle_before);
	pthread_mutex_unlock(&ctx->lock);
	free_victims(ctx, rv.victims, 0);
	return rv.nvictims;
}

/*
 * Pin into a reserved entry, with one retry after evicting on ENOMEM.
 * @held: the slot still holds an evicted registration, which a successful
 * pin replaces (pin_replaces) and a failed one leaves in place.
 */
static int pin_entry(struct odpx_ctx *ctx, uint32_t idx, uintptr_t s, size_t len,
		     uint32_t acc, bool held)
{
	struct entry *e = &ctx->ent[idx];
	int r = 0;

	/* fails (-EFAULT) as the pin would where the pages are gone */
	if (LD(ctx->sub.attached))
		r = monitor_prefault(s, s + len);
	if (r == 0)
		r = ctx->be->pin(ctx, idx, s, len, acc, &e->lkey, &e->rkey);
	if (held && r == 0)
		STAT_INC(ctx, unpins);	/* the replaced registration */
	if (held && r < 0) {
		unpin_one(ctx, idx);	/* both at once may be over RLIMIT_MEMLOCK */
		if (r == -ENOMEM)
			r = ctx->be->pin(ctx, idx, s, len, acc, &e->lkey, &e->rkey);
	}
	if (r == -ENOMEM) {
		STAT_INC(ctx, enomem_retries);
		evict(ctx, 0, ctx->lim.max_pinned_bytes, NULL);	/* every unused entry */
		r = ctx->be->pin(ctx, idx, s, len, acc, &e->lkey, &e->rkey);
	}
	if (r < 0) {
		char why[200] = "";

		STAT_INC(ctx, pin_failures);
		if (r == -ENOMEM) {
			why[0] = ' ';
			odpx_why_memlock(why + 1, sizeof(why) - 1);
		}
		return odpx_fail(r, "pinning %#lx-%#lx failed: %s%s", (unsigned long)s,
				 (unsigned long)(s + len), strerror(-r),
				 r == -EFAULT ? " (read-only or PROT_NONE memory, or a shared file "
						"mapping: io_uring pins writable anonymous or shmem memory only)"
					      : why);
	}
	STAT_INC(ctx, pins);
	return r;
}

/*
 * Release unused entries (the LRU's least recently released first) until
 * @bytes of them went, UINT64_MAX: all of them.  No lock held.  Returns
 * the bytes released, counted in memcg_released.
 */
uint64_t cache_release_unused(struct odpx_ctx *ctx, uint64_t bytes)
{
	struct reservation rv = { .victims = NIL, .dead = NIL };
	uint64_t held;

	pthread_mutex_lock(&ctx->lock);
	/* make_room() stops once pinned + others' releasing bytes are within the bound */
	held = ctx->pinned_bytes + ctx->releasing_bytes;
	make_room(ctx, UINT64_MAX, bytes >= held ? 0 : held - bytes, 0, &rv, false, NULL);
	if (rv.victim_bytes)
		ctx->memcg_release_ns = odpx_now_ns();	/* hybrid pins nothing new for a while */
	pthread_mutex_unlock(&ctx->lock);
	free_victims(ctx, rv.victims, 0);
	if (rv.victim_bytes)
		STAT_ADD(ctx, memcg_released, rv.victim_bytes);
	return rv.victim_bytes;
}

/*
 * The process's pinned bytes but @bytes (a reservation not pinned yet): what the cgroup
 * cannot swap.  Every pinning context is on the context list before its first pin.
 */
static uint64_t pinned_but(struct odpx_ctx *ctx, uint64_t bytes)
{
	uint64_t p = ctx_pinned_total();

	(void)ctx;
	return p > bytes ? p - bytes : 0;
}

/*
 * The bytes of [s, s+len) a pin would newly charge where nothing can go to
 * swap: its pages not resident yet (mincore); all of them if it fails.
 */
static uint64_t nonresident_bytes(uintptr_t s, uint64_t len)
{
	unsigned char vec[1024];
	uint64_t out = 0;

	while (len) {
		uint64_t n = len < sizeof(vec) * PAGE_SIZE ? len : sizeof(vec) * PAGE_SIZE;
		size_t pages = (n + PAGE_SIZE - 1) / PAGE_SIZE;

		if (mincore((void *)s, n, vec) < 0)
			return out + len;
		for (size_t i = 0; i < pages; i++)
			out += (vec[i] & 1) ? 0 : PAGE_SIZE;
		s += n;
		len -= n;
	}
	return out;
}

/*
 * Room in the memory cgroup for a pin of [s, s+len) (memcg.h), already
 * reserved in ctx->pinned_bytes: 0 when it fits, after releasing as many
 * unused entries as it lacks; -ENOMEM when it does not, with the reading
 * in @v.  With swap every pinned byte becomes unreclaimable; without, only
 * the pages the pin brings in are new, the resident ones are charged and
 * unreclaimable already.  One memcg reading per call, two when it
 * releases.  Counts nothing but the release: the caller refuses (pin
 * paths) or serves otherwise.
 */
int cache_memcg_room(struct odpx_ctx *ctx, uintptr_t s, uint64_t len, struct memcg_view *v)
{
	uint64_t room, need;

	if (memcg_unlimited())
		return 0;	/* no limit anywhere, read less than MEMCG_LIMITS_MS ago */
	if (memcg_headroom_atleast(pinned_but(ctx, len), len, &room, v) < 0 || len <= room)
		return 0;	/* unreadable: pinned as without a cgroup */
	need = v->swap ? len : nonresident_bytes(s, len);
	if (need <= room)
		return 0;
	/* without swap an unpinned page stays charged: releasing gains nothing */
	if (v->swap && cache_release_unused(ctx, need - room) &&
	    (memcg_headroom(pinned_but(ctx, len), &room, v) < 0 || need <= room))
		return 0;
	return -ENOMEM;
}

/* Engine tick: under memory cgroup pressure, the unused entries go. */
void cache_memcg_tick(struct odpx_ctx *ctx)
{
	if (!memcg_pressure(pinned_but(ctx, 0)))
		return;
	STAT_INC(ctx, memcg_pressure);
	cache_release_unused(ctx, UINT64_MAX);
}

/*
 * After reserve_locked(), with no lock held: unpin the victims (the reused
 * one too, unless the pin replaces it) and free them before the pin, which
 * may be slow, so that no other miss finds them charged; then pin
 * [s, s+len) into @idx.  Returns 0 with ctx->lock held, or -errno with
 * nothing held and @idx freed.
 */
int pin_reserved(struct odpx_ctx *ctx, int64_t idx, const struct reservation *rv,
		 uintptr_t s, size_t len, uint32_t acc)
{
	bool held = rv->reused && rv->replace;
	int r;

	if (rv->reused && !held)
		unpin_one(ctx, (uint32_t)idx);
	free_victims(ctx, rv->victims, held ? 0 : rv->reused);
	if (idx < 0 && len <= ctx->lim.max_pinned_bytes)
		return odpx_fail(-ENOMEM, "limits reached (%" PRIu64 " entries, %" PRIu64
				 " pinned bytes) and every entry is in use",
				 ctx->lim.max_entries, ctx->lim.max_pinned_bytes);
	if (idx < 0) {
		char why[200];

		odpx_why_memlock(why, sizeof(why));
		return odpx_fail(-ENOMEM, "%zu bytes exceed max_pinned_bytes, %" PRIu64 " (the "
				 "default is RLIMIT_MEMLOCK without CAP_IPC_LOCK): %s", len,
				 ctx->lim.max_pinned_bytes, why);
	}
	/* no pin past the memory cgroup's headroom: the OOM killer would end the process in it */
	struct memcg_view v;
	if ((r = cache_memcg_room(ctx, s, len, &v)) < 0) {
		STAT_INC(ctx, memcg_refusals);
		r = odpx_fail(-ENOMEM, "pinning %zu bytes would take memory cgroup %s (v%d) past its "
			      "headroom: limit %" PRIu64 ", %" PRIu64 " unreclaimable, margin %" PRIu64
			      ", %" PRIu64 " bytes may still be pinned (odpx(7), MEMORY CGROUP)", len, v.path, v.version,
			      v.limit_bytes, v.unreclaimable_bytes, v.margin_bytes, v.headroom_bytes);
		if (held)
			unpin_one(ctx, (uint32_t)idx);	/* the evicted registration it holds */
	} else {
		r = pin_entry(ctx, (uint32_t)idx, s, len, acc, held);
	}
	pthread_mutex_lock(&ctx->lock);
	if (held)	/* replaced or unpinned by now */
		reused_free_locked(ctx, rv->reused);
	if (r < 0) {
		entry_free_locked(ctx, (uint32_t)idx);
		pthread_mutex_unlock(&ctx->lock);
	}
	return r;
}

/* Keep the unused (released) bytes under max_unused_bytes.  Engine tick. */
void cache_trim(struct odpx_ctx *ctx)
{
	struct reservation rv = { .victims = NIL, .dead = NIL };
	uint64_t max, unused;

	pthread_mutex_lock(&ctx->lock);
	max = ctx->lim.max_unused_bytes;
	/* unused bytes are pinned bytes: the count is read only when it may be over */
	if (ctx->pinned_bytes > max &&
	    (unused = stats_region_unused(ctx->shards, ctx->pinned_bytes)) > max)
		/* others' victims stay charged: evict the excess of our own */
		make_room(ctx, UINT64_MAX, ctx->pinned_bytes + ctx->releasing_bytes - (unused - max),
			  0, &rv, false, NULL);
	pthread_mutex_unlock(&ctx->lock);
	free_victims(ctx, rv.victims, 0);
}

/* Idle release (idle.c): evict the unused entries released before @stamp. */
unsigned cache_reap_idle(struct odpx_ctx *ctx, uint32_t stamp)
{
	return evict(ctx, UINT64_MAX, UINT64_MAX, &stamp);
}
