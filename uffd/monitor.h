/* SPDX-License-Identifier: MIT */
/*
 * monitor.h - the userfaultfd monitor, as its subscribers see it: one per
 * process (one uffd, one reader thread, the watched ranges), subscribed to
 * as the kernel's mmu interval notifiers are.  The protocol is written once,
 * at the top of uffd/reader.c.
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
	/* Kill the registrations in [start, end), return how many; reader.c's rules. */
	unsigned (*invalidate)(struct monitor_sub *sub, uintptr_t start, uintptr_t end,
			       enum monitor_event ev);
	/* Live registrations overlapping [start, end) (invalidation lock). */
	uint64_t (*count)(struct monitor_sub *sub, uintptr_t start, uintptr_t end);
	/* After invalidations: wake whoever unpins what died (invalidation lock). */
	void (*kick)(struct monitor_sub *sub);
};

/*
 * struct monitor_sub - embedded in its owner, which sets @ops and @seq (its
 * seqcount, reader.c) before monitor_attach(); @next and @attached are the
 * monitor's, written under the invalidation lock.
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
 * Watch [start, end), no lock held: 0, -EXDEV shared or file-backed, -EBUSY
 * another uffd's, -EINVAL unwatchable, -ENOSPC the budget or max_map_count
 * spent, -EFAULT unmapped or PROT_NONE, -EAGAIN kept changing, or vma_query()'s.
 */
int monitor_watch(uintptr_t start, uintptr_t end);
/* Invalidation lock held: [start, end) is watched now. */
bool monitor_covers(uintptr_t start, uintptr_t end);
/* Invalidation lock held: a registration over [start, end) came (+1) or went (-1). */
void monitor_watch_ref(uintptr_t start, uintptr_t end, int delta);

/*
 * A miss, as mmu_interval_read_begin/read_retry, both under the lock.  retry:
 * 0 insert; -EAGAIN invalidated or unwatched since begin; -EBUSY a REMOVE over
 * it may not have zapped yet (do not cache).
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
/* Before a pin, no lock: MISSING mode maps what it watches of [start, end); -EFAULT gone. */
int monitor_prefault(uintptr_t start, uintptr_t end);

struct monitor_usage {
	unsigned watched, budget, users;
	uint64_t registers, events, removes;
	bool running;
	const char *mode;	/* wp-async, wp, missing, none */
	const void *reader_stack;	/* the reader's own mapping */
	size_t reader_stack_len;
	size_t record_bytes;	/* one watched range (the table holds budget + 1) */
};
void monitor_usage(struct monitor_usage *u);

/*
 * Tests, under the lock: when REMOVE @i (from 0) was read (CLOCK_MONOTONIC
 * ns, 0 out of the ring); 0 if each watched range counts at least (@exact:
 * exactly) its live registrations, else -1 and the first that does not in @msg.
 */
uint64_t monitor_remove_read_ns(uint64_t i);
int monitor_check_refs(bool exact, char *msg, size_t len);

/* fork(): the child forgets the parent's monitor (its uffd and its reader). */
void monitor_atfork_prepare(void);
void monitor_atfork_parent(void);
void monitor_atfork_child(void);

struct vma_info {
	uintptr_t start, end;
	bool readable, writable, shared, file;
};
/* The VMA containing @addr: 0, -ENOENT (none), -EMFILE/-ENFILE (no descriptor), -errno. */
int vma_query(uintptr_t addr, struct vma_info *v);
/* the same by PROCMAP_QUERY alone: -ENOTTY where the kernel lacks it (before 6.11) */
int vma_query_ioctl(uintptr_t addr, struct vma_info *v);
extern int vma_force_maps;	/* tests: parse /proc/self/maps, not PROCMAP_QUERY */

#endif
