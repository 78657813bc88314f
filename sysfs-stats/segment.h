/* SPDX-License-Identifier: MIT */
/*
 * segment.h - layout of the stats segment a context publishes.
 *
 *   /dev/shm/odpx.<pid>.<n>   mode 0600, owner only; <n> counts the contexts
 *                             the process opened.  Unlinked at odpx_close().
 *   (memfd "odpx.<pid>.<n>" when /dev/shm cannot be used, full or
 *    read-only; odpstat finds it through /proc/<pid>/fd; else a private
 *    mapping no one else sees)
 *
 *   offset 0        struct seg_hdr (one page)
 *   shards_off      struct stat_shard[nshards]   hot-path counters, per thread
 *   cold_off        struct cold_stats            other counters
 * The publisher's own state (the detector, the callback, locks) is in its
 * heap, not here: any process of the same uid can open the file.  A reader
 * takes a copy (pread), checks it, and trusts a file for one PID only when
 * the file's owner is that process's user.
 *
 * Liveness: the writer holds an OFD read lock on the whole /dev/shm file,
 * taken before the file is named and dropped with the open file description
 * (the descriptor, close-on-exec, and the mapping) at close, exit or
 * exec(); a fork child lets go of its share at once (publish.c).  A named segment of this
 * version whose lock no one holds is dead, whatever its PID (which another
 * process may have by now): readers test it with F_OFD_GETLK, and a remover
 * unlinks a name only while holding the write lock of the file it names
 * (odpx_seg_unlink_dead), so a live segment named meanwhile is never the
 * one removed.  The PID and start time remain a second test (a raw clone()
 * child may hold its parent's lock) and the only one for memfds, which
 * hold no lock: a memfd is found in its writer's own descriptor table.
 *
 * Writers never lock for a reader: shards and cold counters are the live
 * counters themselves (relaxed stores and atomic adds, see lib/stats.c);
 * gauges and the detector's state are relaxed atomic stores of whole
 * 64-bit words, so a reader sees each value whole, possibly a tick old, and
 * the values of different fields possibly from different moments.  The
 * fields above @reason_seq are written once, before @magic, which is
 * stored last (release; readers load it acquire and skip a segment whose
 * magic is not there yet).
 * @reason is written later, again each time the context's reason changes,
 * under a sequence count: @reason_seq is odd while the text is written,
 * and 0 until the first text.  A reader copies the text between two loads
 * of an equal, even, non-zero count (acquire, then a fence) or retries.
 */
#ifndef ODPX_SYSFS_STATS_SEGMENT_H
#define ODPX_SYSFS_STATS_SEGMENT_H

#include <stdatomic.h>
#include <stdint.h>

#include "internal.h"

#define SEG_HDR_BYTES 4096
/* a writer's layout: the header, the shards, the cold counters, in pages */
#define SEG_COLD_OFF ((uint32_t)(SEG_HDR_BYTES + sizeof(struct stat_shard) * (STAT_SHARDS + 1)))
#define SEG_BYTES ((SEG_COLD_OFF + sizeof(struct cold_stats) + 4095) & ~(size_t)4095)

struct seg_hdr {
	_Atomic uint64_t magic;		/* ODPX_SHM_MAGIC, stored last */
	uint32_t version;		/* ODPX_SHM_VERSION */
	uint32_t hdr_bytes;		/* SEG_HDR_BYTES */
	uint64_t total_bytes;		/* of the segment */
	uint32_t shards_off, shard_bytes, nshards;
	uint32_t cold_off, cold_bytes;
	uint32_t stats_bytes;		/* sizeof(struct odpx_stats) of the writer */
	int32_t pid;
	uint32_t n;
	uint64_t start_time;		/* /proc/<pid>/stat field 22: detects PID reuse */
	uint64_t pidns;			/* inode of the writer's PID namespace: @pid is its */
	uint32_t mode, backend;		/* enum odpx_mode, enum odpx_backend */
	uint32_t flags;			/* enum odpx_open_flags */
	uint32_t tick_ms;
	_Atomic uint32_t reason_seq;	/* 0 none; odd: being written */
	char reason[192];
	/* gauges */
	_Atomic uint64_t entries, pinned_bytes, watch_vmas, watch_regs;
	_Atomic uint64_t gauges_ns;	/* CLOCK_MONOTONIC of the last publication */
	/* detector */
	_Atomic uint64_t thrash_state, thrash_metric, thrash_value_milli, thrash_changes;
	_Atomic uint64_t thrash_windows;
	/*
	 * CLOCK_MONOTONIC when the writer laid the segment out, written once
	 * before @magic (zero in older writers): with @pid and @n, which a
	 * process that exec()s gives its first context again, the context's
	 * identity to a reader that follows its counters from sample to sample.
	 */
	uint64_t born_ns;
	/*
	 * The limits in force and where max_pinned_bytes came from (enum
	 * odpx_limit_source), the idle time: written once before @magic, as
	 * odpx_query() gives them (zero in older writers).
	 */
	uint64_t max_pinned_bytes, max_entries, max_unused_bytes, max_entry_bytes;
	uint32_t lim_source, idle_ms;
};

_Static_assert(sizeof(struct seg_hdr) <= SEG_HDR_BYTES, "seg_hdr fits its page");

/*
 * A writer's header for segment @n of @pid, @bytes long, of @ctx (NULL: a
 * test's forgery), magic stored last (publish.c).
 */
void seg_header_init(struct seg_hdr *h, size_t bytes, pid_t pid, unsigned n,
		     const struct odpx_ctx *ctx);

static inline struct seg_hdr *seg_hdr_of(struct odpx_ctx *ctx)
{
	return ctx->stats_region;
}

#endif
