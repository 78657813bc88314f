// SPDX-License-Identifier: MIT
/*
 * main-helper.c - odpx-uffd, the process that reads the monitor's uffd.
 *
 * It dequeues events and does nothing else (helper.h has the protocol and
 * the reason it is a process).  It is built freestanding, with no libc, and
 * embedded in libodpx (helper-image.S); monitor.c starts it from a memfd
 * with its descriptors at fixed numbers (helper.h), as a grandchild whose
 * parent has left: it belongs to init (or the nearest subreaper), so that
 * an application's wait() for its own children never waits for it and
 * waitpid(-1) never reaps it.  It hands the application a pidfd of itself
 * first (detach()).  It leaves when told to
 * (the stop eventfd), or when the application's end of the lifeline pipe is
 * closed: the application exited or exec()ed.
 *
 * After a section it polls without sleeping for spin_ns: munmaps come in
 * bursts, and a reader that is awake saves each munmap a wake-up.  Being
 * another process, its polling costs the application no TLB shootdown.
 *
 * The application applies what is published whenever one of its threads
 * takes mon.lock.  The doorbell wakes its monitor thread to do it otherwise,
 * so that dead entries are unpinned in time: kick_max_ns after a section,
 * if its events are still not applied then, and at once when the ring is
 * half full.  Never at each burst's end: each wake-up of that thread costs
 * the next munmaps an IPI, and on a shared CPU it takes turns from the
 * caller (one ring per two events there, measured, and 5 x the munmap).
 */
#include <asm/unistd.h>
#include <linux/fcntl.h>
#include <linux/mman.h>
#include <linux/poll.h>
#include <linux/prctl.h>
#include <linux/time.h>

#include "helper.h"

#ifndef __NR_close_range
#define __NR_close_range 436
#endif

static inline long sc(long n, long a, long b, long c, long d, long e, long f)
{
#if defined(__x86_64__)
	register long r10 __asm__("r10") = d, r8 __asm__("r8") = e, r9 __asm__("r9") = f;
	long ret;
	__asm__ volatile("syscall" : "=a"(ret)
			 : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return ret;
#elif defined(__aarch64__)
	register long x8 __asm__("x8") = n, x0 __asm__("x0") = a, x1 __asm__("x1") = b,
		      x2 __asm__("x2") = c, x3 __asm__("x3") = d, x4 __asm__("x4") = e,
		      x5 __asm__("x5") = f;
	__asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5)
			 : "memory");
	return x0;
#else
#error "odpx-uffd: no system call stub for this architecture"
#endif
}

#if defined(__x86_64__)
__asm__(".text\n.globl _start\n_start:\n\txor %rbp, %rbp\n\tand $-16, %rsp\n"
	"\tcall helper_main\n\thlt\n");
#elif defined(__aarch64__)
__asm__(".text\n.globl _start\n_start:\n\tmov x29, #0\n\tbl helper_main\n\tbrk #0\n");
#endif

struct ts { long sec, nsec; };
struct pfd { int fd; short events, revents; };

static __attribute__((noreturn)) void leave(int code)
{
	for (;;)
		sc(__NR_exit_group, code, 0, 0, 0, 0, 0);
}

static uint64_t now_ns(void)
{
	struct ts t;

	sc(__NR_clock_gettime, CLOCK_MONOTONIC, (long)&t, 0, 0, 0, 0);
	return (uint64_t)t.sec * 1000000000ULL + (uint64_t)t.nsec;
}

/* wait up to @ns (-1: for ever) for one of @n descriptors; revents filled */
static long wait_fds(struct pfd *p, int n, int64_t ns)
{
	struct ts t = { ns / 1000000000LL, ns % 1000000000LL };

	return sc(__NR_ppoll, (long)p, n, ns < 0 ? 0 : (long)&t, 0, 8, 0);
}

/* The kernel's struct msghdr and cmsghdr (LP64), which no uapi header exports. */
struct iov { const void *base; unsigned long len; };
struct mhdr {
	void *name;
	int namelen;
	struct iov *iov;
	unsigned long iovlen;
	void *control;
	unsigned long controllen;
	unsigned flags;
};
struct cmsg_fd { unsigned long len; int level, type, fd, pad; };
#define SOL_SOCKET_ 1
#define SCM_RIGHTS_ 1

/*
 * Send the application a pidfd of ourselves and our pid on
 * HELPER_FD_HANDOFF, then close it.  We are no child of the application:
 * our parent, its spawn's first process, left once we had exec'd.
 */
static void detach(void)
{
	long pid = sc(__NR_getpid, 0, 0, 0, 0, 0, 0);
	long pidfd = sc(__NR_pidfd_open, pid, 0, 0, 0, 0, 0);

	if (pidfd < 0)
		leave(3);
	struct helper_handoff h = { .pid = (int32_t)pid };
	struct iov v = { &h, sizeof(h) };
	struct cmsg_fd c = { .len = 20, .level = SOL_SOCKET_, .type = SCM_RIGHTS_,
			     .fd = (int)pidfd };
	struct mhdr m = { .iov = &v, .iovlen = 1, .control = &c, .controllen = 24 };
	long r = sc(__NR_sendmsg, HELPER_FD_HANDOFF, (long)&m, 0, 0, 0, 0);

	sc(__NR_close, pidfd, 0, 0, 0, 0, 0);
	sc(__NR_close, HELPER_FD_HANDOFF, 0, 0, 0, 0, 0);
	if (r != (long)sizeof(h))
		leave(4);
}

/*
 * close_range() refused (a kernel before 5.9, a seccomp profile): close the
 * application's descriptors one by one, as /proc/self/fd lists them.  One
 * pass: nothing else runs in this process to open more.
 */
struct dirent64_ { uint64_t ino; int64_t off; unsigned short reclen; unsigned char type; char name[]; };

static long close_listed(void)
{
	char buf[2048] __attribute__((aligned(8)));
	long dir = sc(__NR_openat, AT_FDCWD, (long)"/proc/self/fd",
		      O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0, 0, 0), n;

	if (dir < 0)
		return dir;
	while ((n = sc(__NR_getdents64, dir, (long)buf, sizeof(buf), 0, 0, 0)) > 0)
		for (long at = 0; at < n;) {
			struct dirent64_ *d = (struct dirent64_ *)(buf + at);
			long fd = 0;
			const char *c = d->name;

			at += d->reclen;
			for (; *c >= '0' && *c <= '9'; c++)
				fd = fd * 10 + (*c - '0');
			if (c == d->name || *c || fd == dir ||
			    (fd >= HELPER_FD_UFFD && fd < HELPER_FD_FIRST_FREE))
				continue;	/* ".", "..", the listing, ours */
			sc(__NR_close, fd, 0, 0, 0, 0, 0);
		}
	sc(__NR_close, dir, 0, 0, 0, 0, 0);
	return n;
}

/* Tell the application why we cannot serve (@err: -errno of close_range), and leave. */
static __attribute__((noreturn)) void refuse(long err)
{
	struct helper_handoff h = { .pid = (int32_t)err };
	struct iov v = { &h, sizeof(h) };
	struct mhdr m = { .iov = &v, .iovlen = 1 };

	sc(__NR_sendmsg, HELPER_FD_HANDOFF, (long)&m, 0, 0, 0, 0);
	leave(5);
}

static void ring_doorbell(struct helper_shared *sh)
{
	uint64_t one = 1;

	sc(__NR_write, HELPER_FD_DOORBELL, (long)&one, sizeof(one), 0, 0, 0);
	atomic_fetch_add_explicit(&sh->wakeups, 1, memory_order_relaxed);
}

/* One section: gate up, dequeue into the ring, publish.  Messages read. */
static uint32_t section(struct helper_shared *sh)
{
	uint32_t p = atomic_load_explicit(&sh->produced, memory_order_relaxed);
	uint32_t space = HELPER_RING - (p - atomic_load_explicit(&sh->consumed, memory_order_acquire));
	uint32_t n = 0;

	if (!space)
		return 0;
	/* before the read() that releases a munmap: pairs with lib/cache.h:seq_retry() */
	atomic_fetch_add_explicit(&sh->gate, 1, memory_order_seq_cst);
	while (n < space) {
		uint32_t at = (p + n) % HELPER_RING, room = HELPER_RING - at;
		if (room > space - n)
			room = space - n;
		long r = sc(__NR_read, HELPER_FD_UFFD, (long)&sh->ring[at],
			    room * sizeof(struct uffd_msg), 0, 0, 0);
		if (r <= 0)
			break;	/* -EAGAIN: drained */
		n += (uint32_t)(r / sizeof(struct uffd_msg));
		if ((uint32_t)(r / sizeof(struct uffd_msg)) < room)
			break;
	}
	if (!n) {	/* nothing dequeued, no munmap released: nothing to apply */
		atomic_fetch_sub_explicit(&sh->gate, 1, memory_order_seq_cst);
		return 0;
	}
	atomic_store_explicit(&sh->produced, p + n, memory_order_release);
	atomic_fetch_add_explicit(&sh->sections, 1, memory_order_release);
	return n;
}

void helper_main(void)
{
	struct helper_shared *sh;
	uint64_t spin_until = 0, ring_at = 0;	/* 0: nothing to ring for */
	unsigned idle_polls = 0;

	/*
	 * The application's: its stdio and anything it did not mark
	 * close-on-exec.  If neither close_range() nor the listing can close
	 * them, we would keep its pipes open: say so and leave, before the
	 * handoff, and the thread reads.
	 */
	long r = sc(__NR_close_range, 0, HELPER_FD_UFFD - 1, 0, 0, 0, 0);
	if (r < 0 || (r = sc(__NR_close_range, HELPER_FD_FIRST_FREE, ~0U, 0, 0, 0, 0)) < 0)
		if (close_listed() < 0)
			refuse(r);
	sc(__NR_prctl, PR_SET_NAME, (long)"odpx-uffd", 0, 0, 0, 0);
	detach();
	long m = sc(__NR_mmap, 0, HELPER_SHARED_BYTES, PROT_READ | PROT_WRITE,
		    MAP_SHARED | MAP_POPULATE, HELPER_FD_SHARED, 0);
	if (m < 0 && m > -4096)
		leave(2);
	sc(__NR_close, HELPER_FD_SHARED, 0, 0, 0, 0, 0);
	sh = (struct helper_shared *)m;
	atomic_store_explicit(&sh->pid, (uint32_t)sc(__NR_getpid, 0, 0, 0, 0, 0, 0),
			      memory_order_release);

	for (;;) {
		struct pfd p[3] = { { HELPER_FD_UFFD, POLLIN, 0 }, { HELPER_FD_LIFELINE, POLLIN, 0 },
				    { HELPER_FD_STOP, POLLIN, 0 } };
		uint64_t now = now_ns();
		int64_t wait;

		if (ring_at && now >= ring_at) {
			if (atomic_load_explicit(&sh->produced, memory_order_relaxed) !=
			    atomic_load_explicit(&sh->consumed, memory_order_acquire))
				ring_doorbell(sh);
			ring_at = 0;
		}
		wait = now < spin_until ? 0 : ring_at ? (int64_t)(ring_at - now) : -1;
		if (wait_fds(p, 3, wait) < 0)
			continue;
		if (p[1].revents || p[2].revents)
			leave(0);	/* lifeline closed (exit, exec) or stop */
		if (!p[0].revents) {
			if (!(++idle_polls % 16))
				sc(__NR_sched_yield, 0, 0, 0, 0, 0, 0);
			continue;
		}
		if (p[0].revents & (POLLERR | POLLHUP | POLLNVAL))
			leave(3);
		if (!section(sh)) {
			/* a full ring: the application applies it; look again shortly */
			if (HELPER_RING == atomic_load_explicit(&sh->produced, memory_order_relaxed) -
					   atomic_load_explicit(&sh->consumed, memory_order_acquire)) {
				ring_doorbell(sh);
				ring_at = 0;
				struct pfd none = { -1, 0, 0 };
				wait_fds(&none, 1, 20000);
			}
			continue;
		}
		now = now_ns();
		if (!ring_at)
			ring_at = now + sh->kick_max_ns;
		if (atomic_load_explicit(&sh->produced, memory_order_relaxed) -
		    atomic_load_explicit(&sh->consumed, memory_order_relaxed) > HELPER_RING / 2) {
			ring_doorbell(sh);
			ring_at = 0;
		}
		sc(__NR_sched_yield, 0, 0, 0, 0, 0, 0);	/* a caller we released on our CPU goes first */
		spin_until = now + sh->spin_ns;
	}
}
