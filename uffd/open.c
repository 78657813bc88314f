// SPDX-License-Identifier: MIT
/*
 * open.c - the monitor's life: the userfaultfd opened in the best mode the
 * kernel offers, the reader thread started with the first subscriber and
 * stopped with the last, and fork.
 *
 * Start and stop take life_lock, never mon.lock around the work: they
 * allocate (the watch table, the reader's stack) and close the uffd, and
 * nobody may do that while holding the invalidation lock.  mon.lock is
 * taken inside only for the subscriber list and the fields the reader reads.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "monitor_priv.h"

#ifdef ASAN
#include <sanitizer/asan_interface.h>
#endif

#ifndef UFFD_FEATURE_WP_ASYNC
#define UFFD_FEATURE_WP_ASYNC (1 << 15)	/* Linux 6.7; Debian 12's headers are 6.1 */
#endif

static pthread_mutex_t life_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *const mode_name[] = { "none", "wp-async", "wp", "missing" };

/* A new userfaultfd: the syscall in user-mode-only form (Linux 5.11), else /dev/userfaultfd. */
static int uffd_new(void)
{
	int fd = syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);

	if (fd >= 0)
		return fd;
	int err = errno;
	int dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
	if (dev >= 0) {
		fd = ioctl(dev, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
		err = errno;
		close(dev);
		if (fd >= 0)
			return fd;
	}
	return -err;
}

static enum uffd_mode pick_mode(const char *force, uint64_t have)
{
	for (enum uffd_mode m = UFFD_MODE_WP_ASYNC; force && m <= UFFD_MODE_MISSING; m++) {
		if (!strcmp(force, mode_name[m]))
			return m;
	}
	if (!(have & UFFD_FEATURE_PAGEFAULT_FLAG_WP))
		return UFFD_MODE_MISSING;
	return (have & UFFD_FEATURE_WP_ASYNC) ? UFFD_MODE_WP_ASYNC : UFFD_MODE_WP;
}

/* A new uffd, UFFDIO_API done with @api (the mode named in mon.why if it fails) */
static int uffd_api(struct uffdio_api *api, const char *mode)
{
	int fd = uffd_new(), err;

	if (fd < 0) {
		snprintf(mon.why, sizeof(mon.why), "userfaultfd: %s", strerror(-fd));
		return fd;
	}
	if (ioctl(fd, UFFDIO_API, api) == 0)
		return fd;
	err = -errno;
	close(fd);
	snprintf(mon.why, sizeof(mon.why), "UFFDIO_API%s%s%s: %s", mode ? "(" : "", mode ? mode : "",
		 mode ? ")" : "", strerror(-err));
	return err;
}

/* The uffd in the best mode the kernel offers, or the one @force names, in *@mode. */
static int uffd_open(const char *force, enum uffd_mode *mode)
{
	const uint64_t ev = UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMOVE |
			    UFFD_FEATURE_EVENT_REMAP;
	struct uffdio_api api = { .api = UFFD_API };
	enum uffd_mode want;
	int fd = uffd_api(&api, NULL);	/* probe: the features offered */

	if (fd < 0)
		return fd;
	close(fd);
	if ((api.features & ev) != ev) {
		snprintf(mon.why, sizeof(mon.why), "userfaultfd lacks UNMAP/REMOVE/REMAP events");
		return -EOPNOTSUPP;
	}
	want = pick_mode(force, api.features);
	api = (struct uffdio_api){ .api = UFFD_API, .features = ev };
	if (want == UFFD_MODE_WP_ASYNC)
		api.features |= UFFD_FEATURE_WP_ASYNC | UFFD_FEATURE_PAGEFAULT_FLAG_WP;
	else if (want == UFFD_MODE_WP)
		api.features |= UFFD_FEATURE_PAGEFAULT_FLAG_WP;
	if ((fd = uffd_api(&api, mode_name[want])) >= 0)
		*mode = want;
	return fd;
}

/*
 * The reader runs on a stack of its own mapping, between two PROT_NONE
 * pages: no other VMA merges with it, so no watch - widened or not - ever
 * covers it (the reader would wait for its own event), and glibc does not
 * madvise away at exit a stack it did not allocate.  It inherits the
 * starting thread's policy, but never SCHED_BATCH or SCHED_IDLE (an
 * engine's, when a prefetch is the first miss): a woken reader must
 * preempt, or munmaps wait for whatever runs on its CPU.  The policy is
 * lowered for the spawn alone.  (An unprivileged SCHED_IDLE thread cannot
 * leave SCHED_IDLE with RLIMIT_NICE at 0: its reader inherits it.)
 */
static int reader_start(void)
{
	struct sched_param sp = { 0 };
	int pol = sched_getscheduler(0);
	bool lowered = (pol == SCHED_BATCH || pol == SCHED_IDLE) &&
		       !pthread_setschedparam(pthread_self(), SCHED_OTHER, &sp);
	sigset_t all, old;
	pthread_attr_t a;
	size_t size, len;
	char *stack;
	int r;

	if ((r = pthread_attr_init(&a)))
		goto out;
	/* glibc's default size (RLIMIT_STACK): the sanitizers' runtimes need much of it */
	if ((r = pthread_attr_getstacksize(&a, &size)))
		goto out_attr;
	len = size + 2 * PAGE_SZ;
	stack = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (stack == MAP_FAILED) {
		r = errno;
		goto out_attr;
	}
	if (mprotect(stack + PAGE_SZ, size, PROT_READ | PROT_WRITE)) {
		r = errno;
		goto out_stack;
	}
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	r = pthread_attr_setstack(&a, stack + PAGE_SZ, size);
	if (!r)
		r = pthread_create(&mon.reader, &a, reader_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r)
		goto out_stack;
	pthread_mutex_lock(&mon.lock);
	mon.reader_stack = stack;
	mon.reader_stack_len = len;
	pthread_mutex_unlock(&mon.lock);
	goto out_attr;
out_stack:
	munmap(stack, len);
out_attr:
	pthread_attr_destroy(&a);
out:
	if (lowered)
		pthread_setschedparam(pthread_self(), pol, &sp);
	return -r;
}

/*
 * No reader and no subscriber: close the uffd (unregistering every range)
 * and the reader's descriptors, unmap its stack and free the table, so that
 * a process whose monitor failed or stopped holds nothing of it; the next
 * attach opens them anew.  life_lock held.
 */
static void release(void)
{
	struct watch *w = mon.w;
	int fd = mon.uffd;

	if (mon.stopfd >= 0)
		close(mon.stopfd);
	if (mon.kickfd >= 0)
		close(mon.kickfd);
	if (mon.reader_stack)	/* watched by nobody: between two PROT_NONE pages */
		munmap(mon.reader_stack, mon.reader_stack_len);
	vma_close();
	pthread_mutex_lock(&mon.lock);
	mon.uffd = mon.stopfd = mon.kickfd = -1;
	mon.w = NULL;
	mon.nw = 0;
	mon.reader_stack = NULL;
	pthread_mutex_unlock(&mon.lock);
	if (fd >= 0)
		close(fd);	/* never under the invalidation lock */
	free(w);
}

/* The uffd, the watch table and the reader, once (life_lock): 0 or -errno. */
static int start(const struct monitor_config *cfg)
{
	unsigned budget = cfg->watch_max ? cfg->watch_max : monitor_budget_default();
	enum uffd_mode mode = UFFD_MODE_NONE;
	const char *what;
	struct watch *w;
	int fd, r;

	if (mon.uffd >= 0)
		return 0;	/* release() closes it unless everything started */
	if (mon.init_err)
		return mon.init_err;
	if (!(w = calloc(budget + 1, sizeof(*w)))) {
		snprintf(mon.why, sizeof(mon.why), "the watch table: %s", strerror(ENOMEM));
		return -ENOMEM;
	}
	if ((fd = uffd_open(cfg->uffd_mode, &mode)) < 0) {
		free(w);
		/* a limit (descriptors, memory) may be lifted; the kernel's refusal is for good */
		if (fd != -EMFILE && fd != -ENFILE && fd != -ENOMEM && fd != -EAGAIN)
			mon.init_err = fd;
		return fd;
	}
	pthread_mutex_lock(&mon.lock);
	mon.uffd = fd;
	mon.mode = mode;
	mon.w = w;
	mon.budget = budget;
	mon.quarantine_ns = cfg->quarantine_ns;
	mon.spin_ns = cfg->spin_ns;
	mon.widen_max = cfg->widen_bytes;
	pthread_mutex_unlock(&mon.lock);
	what = "the reader's eventfd";
	if ((mon.stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0)
		goto out_errno;
	what = "the reader's timerfd";
	if ((mon.kickfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK)) < 0)
		goto out_errno;
	what = "the reader thread";
	if ((r = reader_start()) == 0)
		return 0;
	goto out;
out_errno:
	r = -errno;
out:
	snprintf(mon.why, sizeof(mon.why), "%s: %s", what, strerror(-r));
	release();
	return r;
}

int monitor_attach(struct monitor_sub *sub, const struct monitor_config *cfg, char *why,
		   size_t why_len)
{
	int r = 0;

	pthread_mutex_lock(&life_lock);
	if (atomic_load_explicit(&sub->attached, memory_order_relaxed))
		goto out;	/* another thread of this subscriber got here first */
	if ((r = start(cfg)) < 0)
		goto out;
	pthread_mutex_lock(&mon.lock);
	sub->next = mon.subs;
	mon.subs = sub;
	atomic_store_explicit(&sub->attached, true, memory_order_release);
	mon.users++;
	pthread_mutex_unlock(&mon.lock);
out:
	if (r < 0 && why)
		snprintf(why, why_len, "%s", mon.why);
	pthread_mutex_unlock(&life_lock);
	return r;
}

/*
 * The last subscriber gone: stop the reader and release the rest.  Called
 * with the subscriber's registrations dead or about to be unpinned.
 */
void monitor_detach(struct monitor_sub *sub)
{
	uint64_t one = 1;
	bool stop;

	pthread_mutex_lock(&life_lock);
	if (!atomic_load_explicit(&sub->attached, memory_order_relaxed))
		goto out;
	pthread_mutex_lock(&mon.lock);
	for (struct monitor_sub **p = &mon.subs; *p; p = &(*p)->next) {
		if (*p == sub) {
			*p = sub->next;
			break;
		}
	}
	atomic_store_explicit(&sub->attached, false, memory_order_relaxed);
	stop = --mon.users == 0;
	/*
	 * Its live registrations, unpinned next with no decrement, still
	 * count: over, never short, and counted again when the budget needs
	 * a record (watch.c, watch_reclaim_idle()).
	 */
	for (unsigned i = 0; !stop && i < mon.nw; i++)
		mon.w[i].approx = mon.w[i].refs > 0;
	/*
	 * The last one: nothing is watched before the reader is told to go.
	 * What its exit unmaps (a sanitizer's per-thread memory, which a VMA
	 * merge can put inside a watched range) raises no event then, which
	 * the exiting reader would wait on forever.
	 */
	if (stop)
		watch_release_all();
	pthread_mutex_unlock(&mon.lock);
	if (!stop)
		goto out;
	if (write(mon.stopfd, &one, sizeof(one)) == sizeof(one))
		pthread_join(mon.reader, NULL);
	release();
out:
	pthread_mutex_unlock(&life_lock);
}

void monitor_usage(struct monitor_usage *u)
{
	/* life_lock too: a start or a stop under way is seen whole */
	pthread_mutex_lock(&life_lock);
	pthread_mutex_lock(&mon.lock);
	*u = (struct monitor_usage){
		.watched = mon.nw, .budget = mon.budget, .users = mon.users,
		.registers = mon.regs, .events = mon.events, .removes = mon.nrm,
		.running = mon.uffd >= 0, .mode = mode_name[mon.mode],
		.reader_stack = mon.reader_stack, .reader_stack_len = mon.reader_stack_len,
		.record_bytes = sizeof(struct watch),
	};
	pthread_mutex_unlock(&mon.lock);
	pthread_mutex_unlock(&life_lock);
}

/*
 * fork(): life_lock is held across it, so that the child never inherits a
 * monitor half started or half stopped (descriptors closed and the stack
 * unmapped, not yet forgotten: the child would close numbers and unmap
 * ranges another thread may have taken since).
 */
void monitor_atfork_prepare(void)
{
	pthread_mutex_lock(&life_lock);
}

void monitor_atfork_parent(void)
{
	pthread_mutex_unlock(&life_lock);
}

void monitor_atfork_child(void)
{
	/* the parent's reader does not exist here: its stack is a copy nobody runs on */
	pthread_mutex_init(&mon.lock, NULL);
#ifdef ASAN
	/*
	 * ASan clears a thread's poisoned frames when the thread exits, never
	 * at munmap: the copy's would outlive it, and a later mapping at that
	 * address would fault on its first store.
	 */
	if (mon.reader_stack)
		__asan_unpoison_memory_region(mon.reader_stack, mon.reader_stack_len);
#endif
	vma_atfork_child();
	release();
	memset(&mon, 0, sizeof(mon));
	pthread_mutex_init(&mon.lock, NULL);
	mon.uffd = mon.stopfd = mon.kickfd = -1;
	pthread_mutex_unlock(&life_lock);	/* taken by this thread in prepare */
}
