/* SPDX-License-Identifier: MIT */
/*
 * helper.h - the page the monitor shares with its reader process.
 *
 * Why a process: a thread that reads the uffd while another thread of the
 * process munmaps makes that munmap wait for a TLB-shootdown IPI to the
 * reader's CPU (the CPU has our mm loaded), which on a VM costs about as
 * much as a wake-up.  A reader in a process of its own has another mm: it
 * can poll the uffd without sleeping, and a munmap of watched memory then
 * costs its own work plus one dequeue (bench/invalidate.c, W4).
 *
 * The reader (main-helper.c) does no more than the dequeue: it raises
 * @gate, read()s the uffd into @ring, publishes, and leaves the gate up.
 * Every lookup that runs without mon.lock checks @gate (0: nothing read and
 * not yet applied) along with its context's seq; every holder of mon.lock
 * first applies what was published (monitor.c:monitor_sync_locked()), so a
 * munmap that returned is always seen, as in the lock-before-read protocol
 * of DESIGN.md.  The gate is lowered only by the one who applied.
 *
 *   helper: gate += 1; read uffd -> ring[produced..]; produced += n;
 *           sections += 1 (n > 0) | gate -= 1 (n == 0, nothing dequeued)
 *   app (mon.lock): seq odd; apply ring[consumed..produced); seq even;
 *           consumed = produced; gate -= sections - lowered
 */
#ifndef ODPX_HELPER_H
#define ODPX_HELPER_H

#include <linux/userfaultfd.h>
#include <stdatomic.h>
#include <stdint.h>

#define HELPER_RING 256		/* messages; a power of two (the counters wrap) */

/*
 * The helper's file descriptors, set up by the spawn.  HANDOFF: a seqpacket
 * socket on which odpx-uffd sends the application one message, struct
 * helper_handoff with a pidfd of itself (SCM_RIGHTS), and closes.  Its
 * parent is the spawn's first process, which left once it had exec'd:
 * odpx-uffd is no child of the application.
 */
enum { HELPER_FD_UFFD = 3, HELPER_FD_SHARED, HELPER_FD_LIFELINE, HELPER_FD_DOORBELL,
       HELPER_FD_STOP, HELPER_FD_HANDOFF, HELPER_FD_FIRST_FREE };
#define HELPER_FDS (HELPER_FD_FIRST_FREE - HELPER_FD_UFFD)

struct helper_handoff {
	int32_t pid;		/* odpx-uffd's; with no pidfd: close_range's -errno, no listing either */
};

struct helper_shared {
	/* sections raised and not yet applied; read by every lock-free lookup */
	_Atomic uint32_t gate __attribute__((aligned(64)));

	/* the helper's side */
	_Atomic uint32_t produced __attribute__((aligned(64)));	/* messages published */
	_Atomic uint32_t sections;	/* sections published with n > 0 */
	_Atomic uint32_t pid;		/* the helper, once it runs (its getpid()) */
	_Atomic uint64_t wakeups;	/* doorbell writes */

	/* the application's side (mon.lock) */
	_Atomic uint32_t consumed __attribute__((aligned(64)));
	uint32_t lowered;		/* sections applied and taken off the gate */
	uint64_t spin_ns;		/* set before the spawn: poll without sleeping after an event */
	uint64_t kick_max_ns;		/* ring at most this often, for events still unapplied */

	struct uffd_msg ring[HELPER_RING] __attribute__((aligned(64)));
};

#define HELPER_SHARED_BYTES 12288
_Static_assert(sizeof(struct helper_shared) <= HELPER_SHARED_BYTES, "shared page set");

#endif
