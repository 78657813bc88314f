/* SPDX-License-Identifier: MIT */
/*
 * segment.h - layout of the stats segment a context publishes: the one
 * description both sides share, the library's writer (lib/publish.c) and
 * odpstat's reader (sysfs-stats/shm.c).  Plain types only, no library
 * internals: the file is shared memory of another process, and a change
 * of anything below is a new ODPX_SHM_VERSION.
 *
 *   memfd "odpx.<pid>.<n>"   mode 0600, close-on-exec; <n> counts the
 *                            contexts the process opened.  Nothing names it:
 *                            it lives as long as its writer holds it, and
 *                            goes at odpx_close(), exit or exec().
 *   (private memory no one else sees where a memfd cannot be made)
 *
 *   offset 0              struct seg_hdr (one page)
 *   SEG_HDR_BYTES         struct stat_shard[STAT_SHARDS + 1]   hot-path counters
 *   SEG_COLD_OFF          struct cold_stats                    other counters
 *   SEG_BYTES in all: a reader takes another size or version for another layout.
 * The publisher's own state (the detector, the callback, locks) is in its
 * heap, not here.  A reader finds a process's segments in its descriptor
 * table (/proc/<pid>/fd), takes a copy (pread), checks it, and counts a
 * segment as that process's only when the header's @pid is that process's:
 * a fork or raw clone() child that holds its parent's descriptor is not the
 * segment's writer (a fork child closes its copy at once, lib/publish.c).
 *
 * Writers never lock for a reader: shards and cold counters are the live
 * counters themselves (relaxed stores and atomic adds, see lib/stats.c);
 * gauges and the detector's state are relaxed atomic stores of whole
 * 64-bit words, so a reader sees each value whole, possibly a tick old, and
 * the values of different fields possibly from different moments.  The
 * plain fields but @reason are written once, before @magic, which is
 * stored last (release; readers load it acquire and skip a segment whose
 * magic is not there yet).
 * @reason is written later, again each time the context's reason changes,
 * under a sequence count: @reason_seq is odd while the text is written,
 * and 0 until the first text.  A reader copies the text between two loads
 * of an equal, even, non-zero count (acquire, then a fence) or retries.
 */
#ifndef ODPX_SEGMENT_H
#define ODPX_SEGMENT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "odpx.h"

#define ODPX_SHM_MAGIC 0x54415453585044f0ULL	/* bytes "\xf0DPXSTAT" */
#define ODPX_SHM_VERSION 9
#define ODPX_SHM_PREFIX "odpx."

/*
 * Counters bumped on the hit path: one line per thread (lib/stats.c), the
 * first STAT_SHARDS threads each their own, later ones the last (atomic
 * adds).  Plain words, read with relaxed atomic loads.
 */
#define STAT_SHARDS 32
struct stat_shard {
	uint64_t hits, hits_slow, deregs, prefetch_queued;
	/*
	 * Bytes of cached entries this thread left unused (its release of the
	 * last reference), and those it took back (a hit on an unused entry,
	 * or its eviction or invalidation): summed over the shards, the
	 * difference is the unused bytes, with no walk and no shared line.
	 * Both only grow, so a thread's shard never holds a negative count.
	 */
	uint64_t released, taken;
} __attribute__((aligned(64)));

/*
 * Counters bumped elsewhere: relaxed atomics, rarely written, in this
 * order; each is the field of struct odpx_stats of the same name.  The last
 * two are gauges of the verbs backend.
 */
#define COLD_STATS(X) \
	X(misses) X(pins) X(unpins) X(pin_failures) X(evictions) X(enomem_retries) \
	X(merges) X(superseded) X(miss_retries) X(repins) X(inval_unmap) X(inval_remove) \
	X(inval_remap) X(inval_api) X(inval_entries) X(inval_bytes) X(dead_unpinned) \
	X(direct_regs) X(direct_shared) X(direct_unwatchable) X(direct_budget) \
	X(direct_no_monitor) X(direct_racing) X(prefetch_merged) X(prefetch_dropped) \
	X(prefetch_issued) X(prefetch_failed) X(engine_wakeups) X(engine_ticks) \
	X(evict_remiss) X(odp_mrs) X(odp_fallbacks) X(prefetch_sges) X(engine_lingers) \
	X(direct_no_engine) X(try_again) X(idle_released) X(prereg_repins) X(repin_fresh) \
	X(preload_passthrough) X(prefetch_errno) X(global_rkey)

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
	/*
	 * CLOCK_MONOTONIC when the writer laid the segment out: with @pid and
	 * @n, which a process that exec()s gives its first context again, the
	 * context's identity to a reader that follows it from sample to sample.
	 */
	uint64_t born_ns;
	/*
	 * The limits in force and where max_pinned_bytes came from (enum
	 * odpx_limit_source), the idle time, as odpx_query() gives them.
	 */
	uint64_t max_pinned_bytes, max_entries, max_unused_bytes, max_entry_bytes;
	uint32_t lim_source, idle_ms;
};

_Static_assert(sizeof(struct seg_hdr) <= SEG_HDR_BYTES, "seg_hdr fits its page");

/*
 * A writer's header for segment @n of @pid: the version and the identity
 * (lib/publish.c).  The writer fills in what its context says, then
 * publishes the header whole: @magic, stored last.  Tests forge segments
 * with the two.
 */
void seg_header_init(struct seg_hdr *h, pid_t pid, unsigned n);
static inline void seg_header_publish(struct seg_hdr *h)
{
	atomic_store_explicit(&h->magic, ODPX_SHM_MAGIC, memory_order_release);
}

/* ---- the reading of a segment, the writer's own included (sysfs-stats/shm.c) ---- */

/* sum a region's shards and cold counters (no gauges); hits include hits_slow */
void stats_region_sum(const struct stat_shard *shards, const struct cold_stats *cs,
		      struct odpx_stats *st);
/* a region's unused bytes (released minus taken), clamped to [0, @pinned] */
uint64_t stats_region_unused(const struct stat_shard *shards, uint64_t pinned);

#endif
