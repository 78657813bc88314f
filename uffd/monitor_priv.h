/* SPDX-License-Identifier: MIT */
/* monitor_priv.h - the monitor's own state, shared by the files of uffd/ only. */
#ifndef ODPX_MONITOR_PRIV_H
#define ODPX_MONITOR_PRIV_H

#include <pthread.h>

#include "monitor.h"

#define PAGE_SZ 4096UL

enum uffd_mode { UFFD_MODE_NONE = 0, UFFD_MODE_WP_ASYNC, UFFD_MODE_WP, UFFD_MODE_MISSING };

/*
 * A watched range: one piece of a VMA registered with the uffd.  @refs is
 * never short of the live registrations over it (an idle record, refs 0,
 * may be unregistered for the budget); it may be over after a split or a
 * merge (@approx) until watch_reclaim_idle() counts that record again.
 */
struct watch {
	uintptr_t start, end;
	uint32_t refs;
	bool approx;
};

#define INVAL_LOG 256		/* recent invalidations, for monitor_read_retry() */
#define REMOVE_LOG 64		/* recent REMOVEs, for the quarantine */

/*
 * struct monitor - one per process; reader.c's block comment is the
 * protocol.  Every field but the life-cycle ones (open.c, life_lock) is
 * written under @lock, the invalidation lock.
 */
struct monitor {
	pthread_mutex_t lock;
	int uffd, stopfd, kickfd;	/* kickfd: reader.c, the kick of a burst */
	enum uffd_mode mode;
	pthread_t reader;	/* running while uffd >= 0 (life_lock) */
	int init_err;		/* the kernel's refusal, for good */
	char why[96];
	struct monitor_sub *subs;
	unsigned users;
	/* reader.c: the log of invalidations and of REMOVEs */
	uint64_t inval_count;
	struct { uintptr_t start, end; } log[INVAL_LOG];
	struct { uintptr_t start, end; uint64_t ns; } rm[REMOVE_LOG];
	uint64_t nrm, quarantine_ns;
	uint64_t spin_ns;	/* opt-in: poll without sleeping this long after an event */
	uint64_t events;
	/* watch.c */
	uintptr_t widen_max;
	struct watch *w;
	unsigned nw, budget;
	uint64_t regs;
	char *reader_stack;	/* its own mapping (open.c) */
	size_t reader_stack_len;
};

extern struct monitor mon;

/*
 * A sanitizer's build: watch.c never bridges a gap (widen()), and under
 * ASan a fork child clears the shadow of the reader stack it unmaps (open.c).
 */
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
#if defined(__SANITIZE_ADDRESS__)
#define ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ASAN 1
#endif
#endif

/* reader.c */
void *reader_main(void *arg);

/* vma.c: the query's descriptor closed with the monitor; its lock reset in a child */
void vma_close(void);
void vma_atfork_child(void);

/* watch.c, under mon.lock */
void watch_cut(uintptr_t start, uintptr_t end);
void watch_release(uintptr_t start, uintptr_t end);
void watch_release_all(void);	/* mon.lock: nothing watched any more */
unsigned monitor_budget_default(void);

#endif
