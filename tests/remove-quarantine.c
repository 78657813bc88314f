// SPDX-License-Identifier: MIT
/*
 * remove-quarantine: userfaultfd queues REMOVE (MADV_DONTNEED) before the
 * pages are zapped and says nothing when the zap ends, so a registration
 * taken right after the event may pin pages that are about to be dropped.
 * Such a miss is served direct (counted in direct_racing), never cached;
 * once the quarantine has passed, the range is cached again.  The data is
 * right either way.  (tests/concurrency.c shows the race itself: with
 * ODPX_REMOVE_QUARANTINE_MS=0 and racing DONTNEEDs it finds stale entries.)
 * The quarantine holds however many other events follow the REMOVE within
 * it: 300 DONTNEEDs of another range in between do not let the first
 * range be cached.  A miss overtaken by a DONTNEED at every pin is retried
 * three times, then served direct.  The first two cases measure their
 * window, from before the DONTNEED to after the registration that must be
 * served direct: one longer than the quarantine (a slow machine, an engine
 * reap or 300 round trips to the reader) proves nothing either way, and the
 * round is run again, five rounds at most; none conclusive fails the test.
 *
 * late_insert: the quarantine is the age of the pin, not of the insert.  A
 * madvise() thread is kept off its CPU after our read of its REMOVE (a
 * SCHED_FIFO spinner there); a miss pins the old pages right after the read
 * (its backend's pin waits, pinned, until we hold the lock: a pin may take
 * less than our wake-up) and is held at its insert while the madvise zaps,
 * until the quarantine has passed since the read.  Aged at the insert, that
 * miss cached the zapped pages and the next registration of the range moved
 * data through them; aged from the pin's start, it is served direct.  The
 * monitor's thread is held off its read by the invalidation lock.
 *
 * Its setup is observed, not slept for: the madvise thread seen asleep in
 * the kernel's wait for the read of its event, the spinner seen spinning,
 * the REMOVE's read time taken from the monitor's ring.  What the scheduler
 * did is checked afterwards.  A round is inconclusive when the pin came
 * later than the quarantine after the read, when the madvise thread may
 * have run before the pin (it left a CPU since it was seen asleep, or the
 * spinner was off CPU 1 when it was looked at), or when the madvise
 * returned later than the quarantine after the read (its zap beyond what
 * the quarantine covers).  Such a round is run again, five rounds at most;
 * none conclusive fails the test.
 */
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/syscall.h>

#include "test.h"
#include "odpx-private.h"	/* late_insert holds the invalidation lock and reads the monitor */

#define LEN (64 * 1024)
#define QUARANTINE_S 0.2	/* ODPX_REMOVE_QUARANTINE_MS, set by main() */
#define RB_LEN (32UL << 20)

#define WINDOW_ROUNDS 5

/*
 * A round's window, from before its DONTNEED to after the registration
 * @mr that must be served direct: longer than the quarantine (a slow
 * machine), the round is inconclusive: said, @mr released, counted in
 * *@inconclusive (WINDOW_ROUNDS of them fail), and true returned.
 */
static bool window_over(double from, const char *what, struct odpx_ctx *ctx,
			struct odpx_mr *mr, int *inconclusive)
{
	double ms = (now_s() - from) * 1e3;

	if (ms < QUARANTINE_S * 1e3)
		return false;
	printf("%s: inconclusive round: the registration came %.0f ms after the DONTNEED, over"
	       " the %.0f ms quarantine\n", what, ms, QUARANTINE_S * 1e3);
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	CHECK(++*inconclusive < WINDOW_ROUNDS, "%s: no conclusive round in %d", what, WINDOW_ROUNDS);
	return true;
}

/* A REMOVE followed, within the quarantine, by 300 other events. */
static void flood(void)
{
	struct odpx_ctx *ctx = open_pin(0);
	struct odpx_mr *mr;
	struct odpx_stats a, b;
	char *p = map_anon(NULL, LEN), *q = map_anon(NULL, LEN);
	int inconclusive = 0;
	double t0;

	memset(p, 1, LEN);
	memset(q, 1, LEN);
	CHECK_RC(odpx_reg(ctx, q, LEN, 0, &mr), 0);	/* watched: its DONTNEEDs are events */
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	do {
		CHECK_RC(odpx_reg(ctx, p, LEN, 0, &mr), 0);	/* watched, maybe cached */
		CHECK_RC(odpx_dereg(ctx, mr), 0);
		a = stats_of(ctx);
		t0 = now_s();
		CHECK(madvise(p, LEN, MADV_DONTNEED) == 0, "madvise");
		for (int i = 0; i < 300; i++)
			CHECK(madvise(q, 4096, MADV_DONTNEED) == 0, "madvise");
		/* madvise returns once the event is read; the count follows its apply */
		CHECK(WAIT_FOR((b = stats_of(ctx)).inval_remove >= a.inval_remove + 301, 5),
		      "%lu REMOVE events, want 301", (unsigned long)(b.inval_remove - a.inval_remove));
		CHECK_RC(odpx_reg(ctx, p, LEN, 0, &mr), 0);
	} while (window_over(t0, "flood", ctx, mr, &inconclusive));
	b = stats_of(ctx);
	CHECK(b.direct_racing == a.direct_racing + 1,
	      "a miss 300 events after the range's DONTNEED, within the quarantine, was cached");
	CHECK(data_check(ctx, mr, p, LEN, 4), "data through the quarantined registration");
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	printf("flood: ok, %d inconclusive round%s before\n", inconclusive, inconclusive == 1 ? "" : "s");

	/* once the ring has aged out, the range is cached again */
	double until = now_s() + 0.25;
	CHECK(WAIT_FOR(now_s() > until, 1), "clock");
	a = stats_of(ctx);
	CHECK_RC(odpx_reg(ctx, p, LEN, 0, &mr), 0);
	b = stats_of(ctx);
	CHECK(b.direct_racing == a.direct_racing && b.entries == a.entries + 1,
	      "not cached after the flood aged out (direct_racing +%lu, entries +%lu)",
	      (unsigned long)(b.direct_racing - a.direct_racing), (unsigned long)(b.entries - a.entries));
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	CHECK_RC(odpx_close(ctx), 0);
}

#define BIG (256UL << 20)	/* pinning it takes milliseconds */
#define LATE_ROUNDS 5
/* a longer pause between two clock reads of the spinner: something may have run on CPU 1 */
#define SPIN_GAP_S 20e-6
#define SPIN_GAPS 256

static struct odpx_ctx *lctx;
static char *big;
static atomic_int spin_go, spin_stop, mad_done, pin_done, pin_hold, pin_held, mad_tid;
/* the spinner's: when it began to spin and stopped (0: not yet); its gaps (main reads after the join) */
static _Atomic double spin_from, spin_until;
static struct { double from, to; } spin_gap[SPIN_GAPS];
static unsigned spin_ngap;
static const struct backend_ops *held_ops;	/* uring's, but a pin waits while pin_hold */

static void held_pin(uint32_t slot, uintptr_t start, size_t len)
{
	(void)slot, (void)start, (void)len;
	atomic_store(&pin_held, 1);
	while (atomic_load(&pin_hold))
		usleep(100);
}

static uint64_t removes_read(void)
{
	struct monitor_usage u;

	monitor_usage(&u);
	return u.removes;
}

/* When the monitor read REMOVE number @i (0 from the first), as now_s() counts. */
static double remove_read_at(uint64_t i)
{
	monitor_lock();
	uint64_t ns = monitor_remove_read_ns(i);	/* CLOCK_MONOTONIC, as now_s() */
	monitor_unlock();
	CHECK(ns, "REMOVE %lu not in the ring (%lu read)", (unsigned long)i,
	      (unsigned long)removes_read());
	return ns / 1e9;
}

/*
 * Every thread of the process to CPU 0: none is preempted by
 * the spinner inside a lock the pin needs (a sanitizer's background thread,
 * the engine, the reader), which would stall the pin until the throttle.
 */
static void all_on_cpu0(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *de;
	cpu_set_t set;

	CHECK(d, "opendir /proc/self/task");
	CPU_ZERO(&set);
	CPU_SET(0, &set);
	while ((de = readdir(d))) {
		int tid = atoi(de->d_name);
		if (tid > 0 && sched_setaffinity(tid, sizeof(set), &set) && errno != ESRCH)
			FAIL("thread %d to CPU 0: %s", tid, strerror(errno));
	}
	closedir(d);
}

/*
 * SCHED_FIFO on CPU 1 from spin_go to spin_stop (10 s at most, a hang
 * guard): no other thread runs there meanwhile, unless the real-time
 * throttle or the fair server lets one in, which the clock shows as a gap.
 */
static void *spinner(void *arg)
{
	(void)arg;
	while (!atomic_load(&spin_go))
		usleep(100);
	double t0 = now_s(), prev = t0, t = t0;
	atomic_store(&spin_from, t0);
	for (; !atomic_load(&spin_stop) && t < t0 + 10; prev = t) {
		t = now_s();
		if (t - prev > SPIN_GAP_S && spin_ngap < SPIN_GAPS) {
			spin_gap[spin_ngap].from = prev;
			spin_gap[spin_ngap++].to = t;
		}
	}
	atomic_store(&spin_until, now_s());
	return NULL;
}

static void *madviser(void *arg)
{
	(void)arg;
	atomic_store(&mad_tid, gettid());
	CHECK(madvise(big, BIG, MADV_DONTNEED) == 0, "madvise");
	atomic_store(&mad_done, 1);
	return NULL;
}

/* One file of /proc/self/task/@tid in @buf (no allocation: mon.lock may be held). */
static void task_file(int tid, const char *file, char *buf, size_t cap)
{
	char path[64];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/self/task/%d/%s", tid, file);
	buf[0] = 0;
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return;
	n = read(fd, buf, cap - 1);
	close(fd);
	buf[n > 0 ? n : 0] = 0;
}

/*
 * The madvise thread sleeps in the kernel's wait for the read of its
 * REMOVE: its wait channel says so (userfaultfd_event_wait_completion), or,
 * where the kernel shows none, it sleeps inside madvise(), and the only
 * sleep there with no lock held is that wait.
 */
static bool madvise_queued(int tid)
{
	char wchan[128], sc[128], st[512], *paren;

	task_file(tid, "wchan", wchan, sizeof(wchan));
	if (wchan[0] && strcmp(wchan, "0"))
		return strstr(wchan, "userfaultfd") != NULL;
	task_file(tid, "syscall", sc, sizeof(sc));
	task_file(tid, "stat", st, sizeof(st));
	paren = strrchr(st, ')');
	return atoi(sc) == SYS_madvise && paren && paren[2] == 'S';
}

/*
 * How often thread @tid has left a CPU (voluntary and not), or -1 when it
 * is gone.  Unchanged since it was seen asleep: it has not run since, or
 * runs right now (then the spinner is off CPU 1 at that moment).
 */
static long switches(int tid)
{
	char st[4096], *v, *n;

	task_file(tid, "status", st, sizeof(st));
	v = strstr(st, "\nvoluntary_ctxt_switches:");
	n = strstr(st, "\nnonvoluntary_ctxt_switches:");
	if (!v || !n)
		return -1;
	return atol(v + strlen("\nvoluntary_ctxt_switches:")) +
	       atol(n + strlen("\nnonvoluntary_ctxt_switches:"));
}

/* The spinner was off CPU 1, or not spinning, at some time in [from, to]. */
static bool spinner_away(double from, double to)
{
	if (atomic_load(&spin_until) < to || spin_ngap == SPIN_GAPS)
		return true;	/* stopped early, or too many gaps to tell */
	for (unsigned i = 0; i < spin_ngap; i++)
		if (spin_gap[i].from < to && spin_gap[i].to > from)
			return true;
	return false;
}

static void *late_pinner(void *arg)
{
	struct odpx_mr *mr;

	(void)arg;
	CHECK_RC(odpx_reg(lctx, big, BIG, 0, &mr), 0);
	atomic_store(&pin_done, 1);
	CHECK_RC(odpx_dereg(lctx, mr), 0);
	return NULL;
}

/* Keep the reader from reading the uffd (@hold): it reads under the invalidation lock. */
static void hold_reader(bool hold)
{
	if (hold)
		monitor_lock();
	else
		monitor_unlock();
}

/*
 * One round of late_insert: NULL when it was conclusive (and passed: a
 * failure exits), else why it was not; @why holds the text.
 */
static const char *late_round(char *why, size_t cap, const char **reader)
{
	pthread_attr_t fifo, cpu1;
	struct sched_param prio = { .sched_priority = 1 };
	pthread_t spin, mad, pin;
	struct odpx_stats a, b;
	struct odpx_mr *mr;
	cpu_set_t set;
	uint64_t nrm;
	double read_at, pinned_at, seen_at, mad_at;
	long asleep_sw, pinned_sw;
	int tid;

	atomic_store(&spin_go, 0);
	atomic_store(&spin_stop, 0);
	atomic_store(&spin_from, 0);
	spin_ngap = 0;
	atomic_store(&spin_until, 0);
	atomic_store(&mad_done, 0);
	atomic_store(&mad_tid, 0);
	atomic_store(&pin_done, 0);
	atomic_store(&pin_hold, 0);
	CHECK_RC(odpx_open_backend(held_ops, NULL, &lctx), 0);	/* the monitor starts anew */
	big = map_anon(NULL, BIG);
	memset(big, 1, BIG);
	CHECK_RC(odpx_reg(lctx, big, BIG, 0, &mr), 0);	/* watched and cached */
	CHECK_RC(odpx_dereg(lctx, mr), 0);
	*reader = "the monitor's thread";
	CPU_ZERO(&set);
	CPU_SET(1, &set);
	pthread_attr_init(&cpu1);
	pthread_attr_setaffinity_np(&cpu1, sizeof(set), &set);
	pthread_attr_init(&fifo);
	pthread_attr_setaffinity_np(&fifo, sizeof(set), &set);
	pthread_attr_setinheritsched(&fifo, PTHREAD_EXPLICIT_SCHED);
	pthread_attr_setschedpolicy(&fifo, SCHED_FIFO);
	pthread_attr_setschedparam(&fifo, &prio);
	all_on_cpu0();	/* threads made from here on inherit CPU 0 */
	CHECK(pthread_create(&spin, &fifo, spinner, NULL) == 0, "a SCHED_FIFO thread (root)");
	a = stats_of(lctx);

	/*
	 * Before the hold: the reader writes the count under the lock, and the
	 * hold is the lock itself.  No REMOVE is pending here.
	 */
	nrm = removes_read();
	/* the REMOVE is queued and its thread waits; the reader cannot read it yet */
	hold_reader(true);
	CHECK(pthread_create(&mad, &cpu1, madviser, NULL) == 0, "the madvise thread");
	if (!WAIT_FOR((tid = atomic_load(&mad_tid)) && madvise_queued(tid), 10)) {
		dump_threads();
		FAIL("the madvise thread was not seen waiting for the read of its REMOVE in 10 s"
		     " (done: %d)", atomic_load(&mad_done));
	}
	atomic_store(&spin_go, 1);	/* once woken, the madvise thread stays off CPU 1 */
	CHECK(WAIT_FOR(atomic_load(&spin_from) > 0, 10), "the spinner did not start");
	asleep_sw = switches(tid);	/* it is off CPU 1 for good: the spinner runs there */
	CHECK(asleep_sw >= 0, "no context switch counts for the madvise thread");
	hold_reader(false);
	CHECK(WAIT_FOR(removes_read() > nrm, 10), "REMOVE not read in 10 s");
	read_at = remove_read_at(nrm);

	/* a miss right after the read pins the old pages; held at its insert */
	atomic_store(&pin_held, 0);
	atomic_store(&pin_hold, 1);
	pthread_create(&pin, NULL, late_pinner, NULL);
	if (!WAIT_FOR(atomic_load(&pin_held), 10)) {
		dump_threads();
		FAIL("the miss did not pin in 10 s");
	}
	pinned_at = now_s();
	pinned_sw = switches(tid);
	seen_at = now_s();
	monitor_lock();
	atomic_store(&pin_hold, 0);	/* on to its insert, which waits for the lock */
	atomic_store(&spin_stop, 1);	/* the madvise thread zaps and returns */
	pthread_join(mad, NULL);
	mad_at = now_s();
	pthread_join(spin, NULL);
	while (now_s() < read_at + QUARANTINE_S + 0.05)	/* the insert comes after the quarantine */
		usleep(10 * 1000);
	CHECK(!atomic_load(&pin_done), "the miss was not held at its insert");
	monitor_unlock();
	pthread_join(pin, NULL);
	b = stats_of(lctx);

	why[0] = 0;
	if (pinned_at - read_at >= QUARANTINE_S)
		snprintf(why, cap, "the pin came %.0f ms after the read, over the quarantine",
			 (pinned_at - read_at) * 1e3);
	else if (pinned_sw != asleep_sw || spinner_away(pinned_at, seen_at))
		snprintf(why, cap, "the madvise thread may have run before the pin (%ld switches;"
			 " the spinner %s)", pinned_sw - asleep_sw,
			 atomic_load(&spin_until) < seen_at ? "had stopped" :
			 spin_ngap == SPIN_GAPS ? "had too many gaps to tell" :
			 spinner_away(pinned_at, seen_at) ? "was off CPU 1 then" : "on CPU 1 throughout");
	else if (mad_at - read_at >= QUARANTINE_S)
		snprintf(why, cap, "the madvise returned %.0f ms after the read, over the quarantine",
			 (mad_at - read_at) * 1e3);
	if (!why[0]) {
		CHECK(b.direct_racing == a.direct_racing + 1,
		      "a pin taken between the read of a REMOVE and its zap was cached "
		      "(direct_racing +%lu): aged at the insert, not at the pin",
		      (unsigned long)(b.direct_racing - a.direct_racing));
		CHECK_RC(odpx_reg(lctx, big, LEN, 0, &mr), 0);
		CHECK(data_check(lctx, mr, big, LEN, 5), "STALE: data through the zapped pages");
		CHECK_RC(odpx_dereg(lctx, mr), 0);
	}
	CHECK_RC(odpx_close(lctx), 0);	/* whatever an inconclusive round cached goes with it */
	munmap(big, BIG);
	pthread_attr_destroy(&fifo);
	pthread_attr_destroy(&cpu1);
	return why[0] ? why : NULL;
}

static void late_insert(void)
{
	const char *reader;
	char why[160];
	int inconclusive = 0;

	if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
		SKIP("late_insert keeps the madvise thread off a second CPU; there is one");
	held_ops = odpx_priv_hooked(&uring_ops, &(struct odpx_priv_hooks){ .pin = held_pin });
	while (late_round(why, sizeof(why), &reader)) {
		printf("late_insert (%s): inconclusive round: %s\n", reader, why);
		CHECK(++inconclusive < LATE_ROUNDS, "late_insert (%s): no conclusive round in %d",
		      reader, LATE_ROUNDS);
	}
	printf("late_insert: the reader is %s: ok, %d inconclusive round%s before\n", reader,
	       inconclusive, inconclusive == 1 ? "" : "s");
}

/*
 * A miss whose range is invalidated while it pins is pinned three times,
 * then served direct (a fourth pin).  The backend here invalidates the
 * range right after each pin of it (ten at most), so every pin is
 * overtaken: by a DONTNEED of its last page, or by a munmap and mmap of it
 * (which also cuts its watch: that must not cost a second attempt).
 * (Retries that did not count ran one registration for as long as the
 * invalidations went on: seen with a thread DONTNEEDing in a loop,
 * hundreds of retries.)
 */
static unsigned overtaken;
static bool overtake_unmap;
static char *rb;

static void overtaken_pin(uint32_t slot, uintptr_t start, size_t len)
{
	(void)slot;
	/* ten at most: a miss that never stops retrying fails the test, not hangs it */
	if (start != (uintptr_t)rb || len != RB_LEN || overtaken++ >= 10)
		return;
	if (!overtake_unmap) {
		madvise(rb + RB_LEN - 4096, 4096, MADV_DONTNEED);	/* returns once read */
	} else {
		CHECK(munmap(rb + RB_LEN - 4096, 4096) == 0, "munmap");
		map_anon(rb + RB_LEN - 4096, 4096);
	}
}

static int retries_bounded(void *arg)
{
	struct odpx_stats a, b;
	struct odpx_ctx *ctx;
	struct odpx_mr *mr;

	overtake_unmap = arg != NULL;
	/* no quarantine: the retries alone stand between the miss and its pin */
	setenv("ODPX_REMOVE_QUARANTINE_MS", "0", 1);
	CHECK_RC(odpx_open_backend(odpx_priv_hooked(&uring_ops, &(struct odpx_priv_hooks){
		.pin = overtaken_pin }), NULL, &ctx), 0);
	rb = map_anon(NULL, RB_LEN);
	memset(rb, 1, RB_LEN);
	a = stats_of(ctx);
	CHECK_RC(odpx_reg(ctx, rb, RB_LEN, 0, &mr), 0);
	b = stats_of(ctx);
	CHECK(b.miss_retries - a.miss_retries == 3 && b.direct_racing == a.direct_racing + 1 &&
	      overtaken == 4, "a miss overtaken at every pin (%s): %lu retries (want 3),"
	      " direct_racing +%lu (want 1), %u pins (want 3 and the direct one)",
	      overtake_unmap ? "munmap" : "DONTNEED", (unsigned long)(b.miss_retries - a.miss_retries),
	      (unsigned long)(b.direct_racing - a.direct_racing), overtaken);
	/* no data check: the direct registration's pin was overtaken too, by design */
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	b = stats_of(ctx);
	CHECK(b.entries == a.entries && b.pinned_bytes == a.pinned_bytes,
	      "something of the overtaken miss stayed: entries %lu -> %lu, pinned %lu -> %lu",
	      (unsigned long)a.entries, (unsigned long)b.entries, (unsigned long)a.pinned_bytes,
	      (unsigned long)b.pinned_bytes);
	munmap(rb, RB_LEN);
	CHECK_RC(odpx_close(ctx), 0);
	return 0;
}

int main(void)
{
	struct odpx_ctx *ctx;
	struct odpx_mr *mr;
	struct odpx_stats a, b;
	char *p = map_anon(NULL, LEN);
	int inconclusive = 0;
	double t0;

	setenv("ODPX_REMOVE_QUARANTINE_MS", "200", 1);	/* QUARANTINE_S */
	ctx = open_pin(0);
	memset(p, 1, LEN);
	do {
		CHECK_RC(odpx_reg(ctx, p, LEN, 0, &mr), 0);	/* watched, maybe cached */
		CHECK_RC(odpx_dereg(ctx, mr), 0);
		t0 = now_s();
		CHECK(madvise(p, LEN, MADV_DONTNEED) == 0, "madvise");
		CHECK(WAIT_FOR(stats_of(ctx).entries == 0, 5), "the engine did not unpin the dead entry");
		a = stats_of(ctx);
		CHECK_RC(odpx_reg(ctx, p, LEN, 0, &mr), 0);
	} while (window_over(t0, "after DONTNEED", ctx, mr, &inconclusive));
	b = stats_of(ctx);
	CHECK(b.direct_racing == a.direct_racing + 1, "a miss right after DONTNEED was cached");
	CHECK(data_check(ctx, mr, p, LEN, 2), "data through the quarantined registration");
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	CHECK(stats_of(ctx).entries == a.entries, "the direct registration was not released");
	printf("after DONTNEED: ok, %d inconclusive round%s before\n", inconclusive,
	       inconclusive == 1 ? "" : "s");

	/* after the quarantine the range is cached again */
	double until = now_s() + 0.25;
	CHECK(WAIT_FOR(now_s() > until, 1), "clock");
	CHECK_RC(odpx_reg(ctx, p, LEN, 0, &mr), 0);
	CHECK(data_check(ctx, mr, p, LEN, 3), "data after the quarantine");
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	b = stats_of(ctx);
	CHECK(b.direct_racing == a.direct_racing + 1 && b.entries == a.entries + 1,
	      "not cached after the quarantine (direct_racing %lu, entries %lu)",
	      (unsigned long)b.direct_racing, (unsigned long)b.entries);
	CHECK_RC(odpx_close(ctx), 0);
	flood();
	CHECK(run_forked(NULL, retries_bounded, NULL) == 0, "retries bounded (DONTNEED)");
	CHECK(run_forked(NULL, retries_bounded, (void *)1) == 0, "retries bounded (munmap)");
	late_insert();
	return 0;
}
