/* SPDX-License-Identifier: MIT */
/*
 * monitor.h - the userfaultfd monitor, as its subscribers see it.
 *
 * One monitor per process: one userfaultfd, one reader thread and the table
 * of watched ranges.  The pin caches of the process subscribe to it as the
 * kernel's mmu interval notifiers do: a struct monitor_sub with an ops
 * table, whose invalidate() the reader calls under the invalidation lock.
 * The protocol - who writes what, under which lock, and a munmap racing a
 * miss - is written once, at the top of uffd/reader.c.
 */
#ifndef ODPX_MONITOR_H
#define ODPX_MONITOR_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum monitor_event { MONITOR_UNMAP, MONITOR_REMOVE, MONITOR_REMAP, MONITOR_API };

struct monitor_sub;

struct monitor_sub_ops {
	/*
	 * Kill the registrations overlapping [start, end); return how many.
	 * Called under the invalidation lock with *sub->seq odd.  Must not
	 * block, allocate, free, unpin, or take a lock whose holder may wait
	 * for a userfaultfd event.
	 */
	unsigned (*invalidate)(struct monitor_sub *sub, uintptr_t start, uintptr_t end,
			       enum monitor_event ev);
	/* Live registrations overlapping [start, end) (invalidation lock). */
	uint64_t (*count)(struct monitor_sub *sub, uintptr_t start, uintptr_t end);
	/* After invalidations: wake whoever unpins what died (invalidation lock). */
	void (*kick)(struct monitor_sub *sub);
};

/*
 * struct monitor_sub - embedded in its owner.
 * @ops, @seq: set by the owner before monitor_attach().  @seq is the
 *   owner's seqcount: the monitor makes it odd before it reads a batch of
 *   events and even after the batch's last invalidate().
 * @next, @attached: the monitor's, written under the invalidation lock.
 */
struct monitor_sub {
	const struct monitor_sub_ops *ops;
	_Atomic uint32_t *seq;
	struct monitor_sub *next;
	_Atomic bool attached;
};

/* The knobs, taken by the attach that starts the monitor. */
struct monitor_config {
	const char *uffd_mode;		/* NULL (the best), "wp-async", "wp" or "missing" */
	unsigned watch_max;		/* the budget of watched ranges; 0: from max_map_count */
	uint64_t quarantine_ns;		/* REMOVE quarantine (reader.c) */
	uint64_t spin_ns;		/* polling after an event (reader.c); 0: none */
	uint64_t widen_bytes;		/* gaps bridged (watch.c); 0: none */
};
#define MONITOR_WIDEN_DEFAULT (64UL << 10)	/* below glibc's smallest mmap()ed chunk */

/* Attach, starting the monitor on first use: 0 or -errno, and @why says why not. */
int monitor_attach(struct monitor_sub *sub, const struct monitor_config *cfg, char *why,
		   size_t why_len);
/* Detach; the last one stops the reader and closes the userfaultfd. */
void monitor_detach(struct monitor_sub *sub);

/* The invalidation lock. */
void monitor_lock(void);
void monitor_unlock(void);

/*
 * Make sure [start, end) is watched; no lock held.  0; -EXDEV shared or
 * file-backed (no event for truncation); -EBUSY another userfaultfd owns
 * it; -EINVAL it cannot be watched; -ENOSPC the budget of watched ranges,
 * or vm.max_map_count, is spent; -EFAULT unmapped or PROT_NONE; -EAGAIN it
 * kept changing; -errno of the VMA query.
 */
int monitor_watch(uintptr_t start, uintptr_t end);
/* Invalidation lock held: [start, end) is watched now. */
bool monitor_covers(uintptr_t start, uintptr_t end);
/* Invalidation lock held: a registration over [start, end) came (+1) or went (-1). */
void monitor_watch_ref(uintptr_t start, uintptr_t end, int delta);

/*
 * A miss, as mmu_interval_read_begin/read_retry: begin before the pin,
 * retry after it, both under the invalidation lock.  retry: 0, insert;
 * -EAGAIN, invalidated or unwatched since begin (unpin, try again);
 * -EBUSY, a REMOVE over it may not have zapped yet (do not cache).
 */
struct monitor_read {
	uint64_t count, t0_ns;
};
void monitor_read_begin(struct monitor_read *rd);
int monitor_read_retry(const struct monitor_read *rd, uintptr_t start, uintptr_t end);
/* Invalidation lock held: [start, end) was invalidated among the latest events. */
bool monitor_recently_invalidated(uintptr_t start, uintptr_t end);

/* odpx_invalidate(): a REMOVE of [start, end) no event reports; entries killed. */
unsigned monitor_invalidate(uintptr_t start, uintptr_t end);
/* Before a pin, no lock held: MISSING mode maps what it watches of [start, end). */
int monitor_prefault(uintptr_t start, uintptr_t end);

struct monitor_usage {
	unsigned watched, budget, users;
	uint64_t registers, events, removes;
	bool running;
	const char *mode;	/* wp-async, wp, missing, none */
	const void *reader_stack;	/* the reader's own mapping, and its length */
	size_t reader_stack_len;
	size_t record_bytes;		/* one watched range in the table (budget + 1 of them) */
};
void monitor_usage(struct monitor_usage *u);

/*
 * For tests, under the invalidation lock: when REMOVE number @i (from 0)
 * was read, CLOCK_MONOTONIC ns, 0 if it is out of the ring; and whether
 * every watched range counts at least (@exact: exactly) the live
 * registrations over it, 0 or -1 with the first that does not in @msg.
 */
uint64_t monitor_remove_read_ns(uint64_t i);
int monitor_check_refs(bool exact, char *msg, size_t len);

/* fork(): the child forgets the parent's monitor (its uffd and its reader). */
void monitor_atfork_prepare(void);
void monitor_atfork_parent(void);
void monitor_atfork_child(void);

/* vma.c */
struct vma_info {
	uintptr_t start, end;
	bool readable, writable, shared, file;
};
/* The VMA containing @addr: 0, -ENOENT (none), -EMFILE/-ENFILE (no descriptor), -errno. */
int vma_query(uintptr_t addr, struct vma_info *v);
/* the same by PROCMAP_QUERY alone: -ENOTTY where the kernel lacks it (before 6.11) */
int vma_query_ioctl(uintptr_t addr, struct vma_info *v);
/* The last subscriber detached: close the query's descriptor, if still its own. */
void vma_close(void);
void vma_atfork_child(void);
extern int vma_force_maps;	/* tests: parse /proc/self/maps, not PROCMAP_QUERY */

#endif
