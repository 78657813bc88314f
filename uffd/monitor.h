/* SPDX-License-Identifier: MIT */
/* monitor.h - the process-wide userfaultfd monitor (see monitor.c). */
#ifndef ODPX_MONITOR_H
#define ODPX_MONITOR_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "helper.h"

struct odpx_ctx;

enum uffd_mode { UFFD_MODE_NONE = 0, UFFD_MODE_WP_ASYNC, UFFD_MODE_WP, UFFD_MODE_MISSING };

/* A watched range: one VMA as it was when registered with the uffd. */
/*
 * A watched range.  @refs is never short of the live cached entries over it
 * (an idle record, refs 0, may be unregistered for the budget); it may be
 * over, after a split or a merge (@approx), until watch_reclaim_idle()
 * counts that record again.
 */
struct watch {
	uintptr_t start, end;
	uint32_t refs;
	bool approx;
};

#define INVAL_LOG 256		/* recent invalidations, for the miss re-check */
#define REMOVE_LOG 64		/* recent REMOVEs, for the quarantine */

/*
 * struct monitor - one per process.
 *
 * @lock: "the invalidation lock".  Held by the reader from before its first
 *   read() of a batch until every event of the batch is applied (entries
 *   marked DEAD and removed from their index), and by every writer of a
 *   context index.  Nobody allocates, frees, munmaps, madvises, pins or
 *   unpins while holding it: any of those can block on an event that only
 *   the reader, which needs this lock, can dequeue.
 * @inval_count, @log: a counter and ring of the ranges invalidated, written
 *   under @lock; a miss records the counter before pinning and re-checks the
 *   ring under @lock before inserting (mmu_interval_read_begin/retry).
 * @rm, @nrm, @quarantine_ns: REMOVE (MADV_DONTNEED/FREE/REMOVE) is
 *   queued before the pages are zapped, and nothing tells when the zap ends:
 *   a pin taken between our read and the zap holds the discarded pages.  A
 *   miss whose pin started less than @quarantine_ns after the read of an
 *   overlapping REMOVE is therefore served direct, never cached (counted as
 *   direct_racing).  @rm is a ring of the last REMOVE_LOG of them; when all
 *   of it is younger than the quarantine, an older one may have been lost,
 *   and every miss is served direct until the oldest ages out.
 * @w, @nw: watched ranges sorted by start (@lock); @budget bounds @nw.
 * @users: contexts attached; the reader runs while it is non-zero.
 * @sh, @helper_*: the reader process (helper.h).  @sh is mapped at the first
 *   start and kept for the life of the process: contexts point their gate
 *   there.  @helper_on (mon.lock): the helper dequeues the events, and the
 *   reader thread only applies what it publishes; else the thread reads.
 */
struct monitor {
	pthread_mutex_t lock;
	int uffd, stopfd;
	enum uffd_mode mode;
	uint64_t features;
	pthread_t reader;
	bool running;
	int init_err;		/* why there is no uffd, once tried */
	char why[96];
	struct odpx_ctx *ctxs;
	unsigned users;
	uint64_t inval_count;
	struct { uintptr_t start, end; } log[INVAL_LOG];
	struct { uintptr_t start, end; uint64_t ns; } rm[REMOVE_LOG];
	uint64_t nrm, quarantine_ns;
	uint64_t spin_ns;	/* the reader polls without sleeping this long after an event */
	uintptr_t widen_max;	/* WIDEN_MAX, or ODPX_WATCH_WIDEN_KB */
	struct watch *w;
	unsigned nw, budget;
	char *reader_stack;	/* its own mapping (reader_start()) */
	size_t reader_stack_len;
	uint64_t regs, unregs;
	uint64_t events, faults_resolved;
	struct helper_shared *sh;
	int shfd, helper_pidfd, lifeline, doorbell;
	int helper_pid;
	_Atomic bool helper_on;
	bool unkicked;		/* an apply left dead entries no engine was woken for (mon.lock) */
	uint64_t helper_fallbacks;	/* could not start, or lost: the thread reads */
	char helper_why[96];
};

extern struct monitor mon;

/* Apply what the reader process published (mon.lock held). */
void monitor_sync_locked(void);
/* Unlock, waking the engines an apply left work for, but @reaper's (NULL: all). */
void monitor_unlock_kick(struct odpx_ctx *reaper);

/*
 * Take the invalidation lock.  Every event the reader process has dequeued
 * is applied before the holder looks at anything: the munmaps behind them
 * may have returned.
 */
static inline void mon_lock(void)
{
	pthread_mutex_lock(&mon.lock);
	if (mon.sh && atomic_load_explicit(&mon.sh->gate, memory_order_acquire))
		monitor_sync_locked();
}

static inline void mon_unlock(void)
{
	if (__builtin_expect(mon.unkicked, 0))
		monitor_unlock_kick(NULL);
	else
		pthread_mutex_unlock(&mon.lock);
}

/* Attach a pin-mode context (starts the reader on first use): 0 or -errno. */
int monitor_attach(struct odpx_ctx *ctx);
void monitor_detach(struct odpx_ctx *ctx);
/*
 * Make sure [start, end) is watched.  Not under any lock.  0 watched;
 * -EXDEV shared or file-backed (no events for truncation); -EBUSY another
 * userfaultfd owns it; -EINVAL the uffd cannot watch it; -ENOSPC the VMA
 * budget is spent; -EFAULT unmapped or PROT_NONE; -EAGAIN the mapping kept
 * changing under the registration.  The watch may bridge a gap of up to
 * WIDEN_MAX beside [start, end) to a watched neighbour.
 */
int monitor_watch(uintptr_t start, uintptr_t end);
/*
 * monitor_watch() bridges a gap this wide, or narrower, to a watched
 * neighbour in the same mapping (default; ODPX_WATCH_WIDEN_KB sets it); in a
 * sanitizer's build it never does (monitor.c, widen()).
 */
#define WIDEN_MAX (64UL << 10)
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif
/* odpx_invalidate(): a REMOVE of [start, end) that no event reports; entries killed. */
unsigned monitor_invalidate(uintptr_t start, uintptr_t end);
/* Under mon.lock. */
bool monitor_inval_since(uint64_t c0, uintptr_t start, uintptr_t end);
bool monitor_covers(uintptr_t start, uintptr_t end);
void monitor_prefault(uintptr_t start, uintptr_t end);	/* not under mon.lock */
bool monitor_remove_recent(uintptr_t start, uintptr_t end, uint64_t t0);
uint64_t monitor_ns(void);	/* CLOCK_MONOTONIC, vDSO */
bool monitor_recently_invalidated(uintptr_t start, uintptr_t end);
void monitor_watch_ref(uintptr_t start, uintptr_t end, int delta);
/* Child side of fork: forget everything, close the inherited uffd. */
/*
 * fork(): the prepare handler holds life_lock across it, so that the child
 * never inherits a monitor half started or half stopped (descriptors closed
 * and the stack unmapped, not yet forgotten: the child would close numbers
 * and unmap ranges another thread may have taken since).
 */
void monitor_atfork_prepare(void);
void monitor_atfork_parent(void);
void monitor_atfork_child(void);
const char *uffd_mode_str(enum uffd_mode m);

/* vma.c */
struct vma_info {
	uintptr_t start, end;
	bool readable, writable, shared, file;
};
/* The VMA containing @addr: 0, -ENOENT (none), -errno. */
int vma_query(uintptr_t addr, struct vma_info *v);
void vma_atfork_child(void);
extern int vma_force_maps;	/* tests: parse /proc/self/maps */

#endif
