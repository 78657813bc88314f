// SPDX-License-Identifier: MIT
/*
 * engine-submit: the engine's submissions refused by the kernel.
 *
 * io_uring_enter() refuses a submission when it cannot allocate a request
 * (-EAGAIN, or -ENOMEM): it takes nothing and does not wait, and liburing
 * has already published the SQ tail.  This program's io_uring_submit*()
 * (libodpx.a's calls bind to them; the real ones are liburing's) do that to
 * the engine thread's first submissions while `refusals` says so.
 *   - At start: the doorbell poll and the tick timeout are refused.  The
 *     engine slept with neither in the kernel: the hints after the first
 *     were never served, no tick came, and odpx_close() waited forever in
 *     pthread_join().  Now hints are served, ticks come, the close returns.
 *   - Later: a tick's timeout, queued again, is refused.  Ticks stopped for
 *     good; now they go on.
 *   - The doorbell's poll is one shot, queued again after each wake-up:
 *     with a tick too long to serve anything, each hint still wakes an
 *     engine asleep, and an idle engine does not wake at all (a poll that
 *     came back at once, queued again, would spin: one system call a pass).
 * Each case runs in a child whose alarm() is the deadline of a hang.
 */
#include <dlfcn.h>
#include <liburing.h>

#include "test.h"
#include "odpx-private.h"	/* engine_asleep */

#define PG 4096UL
#define U(x) ((unsigned long)(x))

static atomic_int refusals;	/* engine submissions still to refuse */
static int refusal;		/* with this -errno */

/* The engine's submission of what @ring holds is refused, as the kernel refuses it. */
static bool refused(struct io_uring *ring)
{
	char name[16] = "";

	if (atomic_load(&refusals) <= 0 || !io_uring_sq_ready(ring))
		return false;	/* nothing to submit: no io_uring_enter() to refuse */
	pthread_getname_np(pthread_self(), name, sizeof(name));
	if (strcmp(name, "odpx-engine") || atomic_fetch_sub(&refusals, 1) <= 0)
		return false;
	ring->sq.sqe_head = ring->sq.sqe_tail;	/* liburing's flush of the SQ */
	IO_URING_WRITE_ONCE(*ring->sq.ktail, ring->sq.sqe_tail);
	return true;
}

static int (*real_submit)(struct io_uring *);
static int (*real_submit_and_wait)(struct io_uring *, unsigned);
static int (*real_submit_and_wait_timeout)(struct io_uring *, struct io_uring_cqe **, unsigned,
					   struct __kernel_timespec *, sigset_t *);

/* before main(): every thread finds them set */
__attribute__((constructor)) static void find_real(void)
{
	real_submit = (int (*)(struct io_uring *))dlsym(RTLD_NEXT, "io_uring_submit");
	real_submit_and_wait = (int (*)(struct io_uring *, unsigned))
		dlsym(RTLD_NEXT, "io_uring_submit_and_wait");
	real_submit_and_wait_timeout = (int (*)(struct io_uring *, struct io_uring_cqe **, unsigned,
						struct __kernel_timespec *, sigset_t *))
		dlsym(RTLD_NEXT, "io_uring_submit_and_wait_timeout");
}

int io_uring_submit(struct io_uring *ring)
{
	return refused(ring) ? refusal : real_submit(ring);
}

int io_uring_submit_and_wait(struct io_uring *ring, unsigned wait_nr)
{
	return refused(ring) ? refusal : real_submit_and_wait(ring, wait_nr);
}

int io_uring_submit_and_wait_timeout(struct io_uring *ring, struct io_uring_cqe **cqe_ptr,
				     unsigned wait_nr, struct __kernel_timespec *ts, sigset_t *sigmask)
{
	if (refused(ring)) {
		*cqe_ptr = NULL;
		return refusal;
	}
	return real_submit_and_wait_timeout(ring, cqe_ptr, wait_nr, ts, sigmask);
}

static struct odpx_ctx *open_ticking(void)
{
	struct odpx_attr a = { .comp_mask = ODPX_ATTR_TICK, .tick_ms = 20 };
	struct odpx_ctx *ctx;

	CHECK_RC(odpx_open_uring(&a, &ctx), 0);
	return ctx;
}

/* @n hints of a page each, every other page of @p, served: issued reaches @issued. */
static void hints_served(struct odpx_ctx *ctx, unsigned char *p, unsigned n, uint64_t issued,
			 const char *what)
{
	struct odpx_stats st;

	for (unsigned i = 0; i < n; i++)
		CHECK_RC(odpx_prefetch(ctx, p + 2 * i * PG, PG, 0), 0);
	CHECK(WAIT_FOR((st = stats_of(ctx)).prefetch_issued == issued, 5),
	      "%s: issued %lu of %lu hints 5 s later (queued %lu, failed %lu, ticks %lu):"
	      " the engine sleeps with its doorbell unsubmitted", what, U(st.prefetch_issued),
	      U(issued), U(st.prefetch_queued), U(st.prefetch_failed), U(st.engine_ticks));
}

static void ticks_go_on(struct odpx_ctx *ctx, const char *what)
{
	uint64_t t0 = stats_of(ctx).engine_ticks;

	CHECK(WAIT_FOR(stats_of(ctx).engine_ticks >= t0 + 5, 5),
	      "%s: %lu ticks in 5 s of a 20 ms tick: its timeout was left unsubmitted", what,
	      U(stats_of(ctx).engine_ticks - t0));
}

/* The engine's first submissions refused: its doorbell and tick must get in. */
static int refused_at_start(void *arg)
{
	unsigned char *p = map_anon(NULL, 128 * PG);
	struct odpx_ctx *ctx;

	refusal = (int)(intptr_t)arg;
	alarm(30);	/* the deadline of a hang (odpx_close in pthread_join) */
	memset(p, 1, 128 * PG);
	ctx = open_ticking();
	atomic_store(&refusals, 10);
	hints_served(ctx, p, 1, 1, "refused at start, first hint");	/* starts the engine */
	CHECK(WAIT_FOR(atomic_load(&refusals) < 10, 5), "the engine made no submission to refuse");
	hints_served(ctx, p + PG * 2, 63, 64, "refused at start");
	ticks_go_on(ctx, "refused at start");
	CHECK_RC(odpx_close(ctx), 0);
	munmap(p, 128 * PG);
	return 0;
}

/* A tick's timeout queued again, refused: the next ticks must come. */
static int refused_later(void *arg)
{
	unsigned char *p = map_anon(NULL, 8 * PG);
	struct odpx_ctx *ctx;

	refusal = (int)(intptr_t)arg;
	alarm(30);
	memset(p, 1, 8 * PG);
	ctx = open_ticking();
	hints_served(ctx, p, 1, 1, "refused later, first hint");
	ticks_go_on(ctx, "before any refusal");
	atomic_store(&refusals, 10);
	CHECK(WAIT_FOR(atomic_load(&refusals) < 10, 5), "the engine made no submission to refuse");
	ticks_go_on(ctx, "refused later");
	hints_served(ctx, p + 2 * PG, 2, 3, "refused later");
	CHECK_RC(odpx_close(ctx), 0);
	munmap(p, 8 * PG);
	return 0;
}

/* The doorbell alone wakes the engine, each time, and an idle engine never spins. */
static int doorbell_oneshot(void *arg)
{
	struct odpx_attr a = { .comp_mask = ODPX_ATTR_TICK, .tick_ms = 60000 };
	unsigned char *p = map_anon(NULL, 64 * PG);
	struct odpx_ctx *ctx;
	uint64_t w0, w;

	(void)arg;
	alarm(30);
	memset(p, 1, 64 * PG);
	CHECK_RC(odpx_open_uring(&a, &ctx), 0);
	hints_served(ctx, p, 1, 1, "doorbell, first hint");	/* starts the engine */
	for (unsigned i = 1; i < 20; i++) {	/* each hint rings an engine asleep */
		CHECK(WAIT_FOR(engine_asleep(ctx), 5), "the engine never went to sleep (it spins)");
		hints_served(ctx, p + 2 * i * PG, 1, i + 1, "doorbell");
	}
	CHECK(WAIT_FOR(engine_asleep(ctx), 5), "the engine never went to sleep (it spins)");
	w0 = stats_of(ctx).engine_wakeups;
	usleep(300 * 1000);
	w = stats_of(ctx).engine_wakeups - w0;
	CHECK(w <= 1, "idle for 300 ms of a 60 s tick: %lu wake-ups (the engine spins on its"
	      " doorbell poll)", U(w));
	CHECK_RC(odpx_close(ctx), 0);
	munmap(p, 64 * PG);
	return 0;
}

int main(void)
{
	static const struct {
		const char *what;
		int (*fn)(void *);
		int err;
	} cases[] = {
		{ "refused at start (-EAGAIN)", refused_at_start, -EAGAIN },
		{ "refused at start (-ENOMEM)", refused_at_start, -ENOMEM },
		{ "a tick refused later (-EAGAIN)", refused_later, -EAGAIN },
		{ "one-shot doorbell polls", doorbell_oneshot, 0 },
	};

	for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int st = run_forked(NULL, cases[i].fn, (void *)(intptr_t)cases[i].err);

		CHECK(st != 128 + SIGALRM, "%s: not done in 30 s (hung)", cases[i].what);
		CHECK(st == 0, "%s: failed", cases[i].what);
		printf("%s: hints served, ticks go on, odpx_close returns: ok\n", cases[i].what);
	}
	return 0;
}
