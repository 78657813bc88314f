/* SPDX-License-Identifier: MIT */
/*
 * segment.h - layout of the stats segment a context publishes, shared by
 * the writer (lib/publish.c) and odpstat's reader (sysfs-stats/shm.c).
 * Plain types only; any change below is a new ODPX_SHM_VERSION.
 *
 *   memfd "odpx.<pid>.<n>", 0600, close-on-exec (<n>: the process's n-th
 *   context), gone at odpx_close(), exit or exec():
 *   offset 0              struct seg_hdr (one page)
 *   SEG_HDR_BYTES         struct stat_shard[STAT_SHARDS + 1]   hot-path counters
 *   SEG_COLD_OFF          struct cold_stats                    other counters
 *   SEG_BYTES in all.
 * A reader finds the segments in /proc/<pid>/fd, copies one (pread) and
 * counts it as that process's only when the header's @pid is its own: a
 * fork or clone() child that holds its parent's descriptor is no writer.
 *
 * Writers never lock for a reader: counters and gauges are relaxed atomic
 * words, each seen whole, possibly a tick old.  The plain fields but
 * @reason are written once, before @magic (stored last, release; readers
 * load it acquire).  @reason is rewritten at each change under @reason_seq,
 * odd while the text is written, 0 until the first: a reader copies it
 * between two loads of an equal, even, non-zero count or retries.
 */
#ifndef ODPX_SEGMENT_H
#define ODPX_SEGMENT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "odpx.h"

#define ODPX_SHM_MAGIC 0x54415453585044f0ULL	/* bytes "\xf0DPXSTAT" */
#define ODPX_SHM_VERSION 10
#define ODPX_SHM_PREFIX "odpx."

/* Counters bumped on the hit path: one line per thread (lib/stats.c). */
#define STAT_SHARDS 32
struct stat_shard {
	uint64_t hits, hits_slow, deregs, prefetch_queued;
	/*
	 * Bytes of entries this thread left unused (a last release) and took
	 * back (a hit, an eviction or invalidation of an unused one): summed
	 * over the shards, the difference is the unused bytes.
	 */
	uint64_t released, taken;
} __attribute__((aligned(64)));

/* Other counters, relaxed atomics: the fields of struct odpx_stats of the same names. */
#define COLD_STATS(X) \
	X(misses) X(pins) X(unpins) X(pin_failures) X(evictions) X(enomem_retries) \
	X(merges) X(superseded) X(miss_retries) X(repins) X(inval_unmap) X(inval_remove) \
	X(inval_remap) X(inval_api) X(inval_entries) X(inval_bytes) X(dead_unpinned) \
	X(direct_regs) X(direct_shared) X(direct_unwatchable) X(direct_budget) \
	X(direct_no_monitor) X(direct_racing) X(prefetch_merged) X(prefetch_dropped) \
	X(prefetch_issued) X(prefetch_failed) X(engine_wakeups) X(engine_ticks) \
	X(evict_remiss) X(odp_mrs) X(odp_fallbacks) X(prefetch_sges) X(engine_lingers) \
	X(direct_no_engine) X(try_again) X(idle_released) X(prereg_repins) X(repin_fresh) \
	X(preload_passthrough) X(prefetch_errno) X(global_rkey) \
	X(memcg_refusals) X(memcg_released) X(memcg_pressure) \
	X(hybrid_pinned) X(hybrid_odp) X(hybrid_to_pin) X(hybrid_released) X(odp_bytes)

struct cold_stats {
#define X(f) _Atomic uint64_t f;
	COLD_STATS(X)
#undef X
};

#define SEG_HDR_BYTES 4096
/* the layout: the header, the shards, the cold counters, in pages */
#define SEG_COLD_OFF ((uint32_t)(SEG_HDR_BYTES + sizeof(struct stat_shard) * (STAT_SHARDS + 1)))
#define SEG_BYTES ((SEG_COLD_OFF + sizeof(struct cold_stats) + 4095) & ~(size_t)4095)

struct seg_hdr {
	_Atomic uint64_t magic;		/* ODPX_SHM_MAGIC, stored last */
	uint32_t version;		/* ODPX_SHM_VERSION */
	int32_t pid;			/* the writer's: the process whose segment it is */
	uint32_t n;
	uint32_t mode, backend;		/* enum odpx_mode, enum odpx_backend */
	uint32_t flags;			/* enum odpx_open_flags */
	_Atomic uint32_t reason_seq;	/* 0 none; odd: being written */
	char reason[192];
	/* gauges */
	_Atomic uint64_t entries, pinned_bytes, watch_vmas, watch_regs;
	/* detector */
	_Atomic uint64_t thrash_state, thrash_metric, thrash_value_milli, thrash_changes;
	/* CLOCK_MONOTONIC at the layout: with @pid and @n (reused after exec), the identity */
	uint64_t born_ns;
	/* as odpx_query() gives them; lim_source: enum odpx_limit_source */
	uint64_t max_pinned_bytes, max_entries, max_unused_bytes, max_entry_bytes;
	uint32_t lim_source, idle_ms;
};

_Static_assert(sizeof(struct seg_hdr) <= SEG_HDR_BYTES, "seg_hdr fits its page");

/* A header's version and identity, then its publication (@magic); tests forge with them. */
void seg_header_init(struct seg_hdr *h, pid_t pid, unsigned n);
static inline void seg_header_publish(struct seg_hdr *h)
{
	atomic_store_explicit(&h->magic, ODPX_SHM_MAGIC, memory_order_release);
}

/* sysfs-stats/shm.c: sum a region's counters (no gauges; hits include hits_slow) */
void stats_region_sum(const struct stat_shard *shards, const struct cold_stats *cs,
		      struct odpx_stats *st);
/* a region's unused bytes (released minus taken), clamped to [0, @pinned] */
uint64_t stats_region_unused(const struct stat_shard *shards, uint64_t pinned);

#endif
