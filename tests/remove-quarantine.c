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
 * three times, then served direct.
 *
 * late_insert: the quarantine is the age of the pin, not of the insert.  A
 * madvise() thread is kept off its CPU after our read of its REMOVE (a
 * SCHED_FIFO spinner there); a miss pins the old pages right after the read
 * (its backend's pin waits, pinned, until we hold mon.lock: a pin may take
 * less than our wake-up) and is held at its insert while the madvise zaps,
 * until the quarantine has passed since the read.  Aged at the insert, that
 * miss cached the zapped pages and the next registration of the range moved
 * data through them; aged from the pin's start, it is served direct.  It
 * runs with each reader: the odpx-uffd process (held off its read by
 * SIGSTOP), then the monitor's thread (ODPX_UFFD_HELPER=0, held off by
 * mon.lock).
 */
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>

#include "test.h"
#include "internal.h"		/* late_insert holds mon.lock and reads counters under it */
#include "../uffd/monitor.h"

#define LEN (64 * 1024)
#define QUARANTINE_S 0.2	/* ODPX_REMOVE_QUARANTINE_MS, set by main() */
#define RB_LEN (32UL << 20)

/* A REMOVE followed, within the quarantine, by 300 other events. */
static void flood(void)
{
	struct odpx_ctx *ctx = open_pin(0);
	struct odpx_mr *mr;
	struct odpx_stats a, b;
	char *p = map_anon(NULL, LEN), *q = map_anon(NULL, LEN);

	memset(p, 1, LEN);
	memset(q, 1, LEN);
	CHECK_RC(odpx_reg(ctx, q, LEN, 0, &mr), 0);	/* watched: its DONTNEEDs are events */
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	CHECK_RC(odpx_reg(ctx, p, LEN, 0, &mr), 0);
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	a = stats_of(ctx);
	CHECK(madvise(p, LEN, MADV_DONTNEED) == 0, "madvise");
	for (int i = 0; i < 300; i++)
		CHECK(madvise(q, 4096, MADV_DONTNEED) == 0, "madvise");
	/* madvise returns once the event is read; the count follows its apply */
	CHECK(WAIT_FOR((b = stats_of(ctx)).inval_remove >= a.inval_remove + 301, 2),
	      "%lu REMOVE events, want 301", (unsigned long)(b.inval_remove - a.inval_remove));
	CHECK_RC(odpx_reg(ctx, p, LEN, 0, &mr), 0);
	b = stats_of(ctx);
	CHECK(b.direct_racing == a.direct_racing + 1,
	      "a miss 300 events after the range's DONTNEED, within the quarantine, was cached");
	CHECK(data_check(ctx, mr, p, LEN, 4), "data through the quarantined registration");
	CHECK_RC(odpx_dereg(ctx, mr), 0);

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

static struct odpx_ctx *lctx;
static char *big;
static atomic_int spin_go, spin_stop, mad_done, pin_done, pin_hold, pin_held;
static struct backend_ops held_ops;	/* uring's, but a pin waits while pin_hold */

static int held_pin(struct odpx_ctx *ctx, uint32_t idx, uintptr_t start, size_t len,
		    uint32_t access, uint32_t *lkey, uint32_t *rkey)
{
	int r = uring_ops.pin(ctx, idx, start, len, access, lkey, rkey);

	atomic_store(&pin_held, 1);
	while (atomic_load(&pin_hold))
		usleep(100);
	return r;
}

static uint64_t removes_read(void)
{
	pthread_mutex_lock(&mon.lock);
	uint64_t n = mon.nrm;
	pthread_mutex_unlock(&mon.lock);
	return n;
}

static void on_cpu(pthread_t t, int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	CHECK(pthread_setaffinity_np(t, sizeof(set), &set) == 0, "affinity to CPU %d", cpu);
}

/* SCHED_FIFO on CPU 1 from spin_go to spin_stop (2 s at most): nothing else runs there */
static void *spinner(void *arg)
{
	(void)arg;
	while (!atomic_load(&spin_go))
		usleep(100);
	for (double end = now_s() + 2; !atomic_load(&spin_stop) && now_s() < end;)
		;
	return NULL;
}

static void *madviser(void *arg)
{
	(void)arg;
	CHECK(madvise(big, BIG, MADV_DONTNEED) == 0, "madvise");
	atomic_store(&mad_done, 1);
	return NULL;
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

/* Keep the reader from reading the uffd (@hold), or let it go on. */
static void hold_reader(bool hold)
{
	if (!atomic_load(&mon.helper_on)) {
		if (hold)
			pthread_mutex_lock(&mon.lock);
		else
			pthread_mutex_unlock(&mon.lock);
		return;
	}
	CHECK(kill(mon.helper_pid, hold ? SIGSTOP : SIGCONT) == 0, "signal odpx-uffd");
	if (!hold)
		return;
	char path[64], st[256], state = 0;
	snprintf(path, sizeof(path), "/proc/%d/stat", mon.helper_pid);
	for (double end = now_s() + 2; state != 'T' && now_s() < end; usleep(1000)) {
		FILE *f = fopen(path, "r");
		CHECK(f && fgets(st, sizeof(st), f), "read %s", path);
		fclose(f);
		state = strrchr(st, ')')[2];
	}
	CHECK(state == 'T', "odpx-uffd did not stop (state %c)", state);
}

static void late_insert(void)
{
	pthread_attr_t fifo;
	struct sched_param prio = { .sched_priority = 1 };
	pthread_t spin, mad, pin;
	struct odpx_stats a, b;
	struct odpx_mr *mr;
	uint64_t nrm;
	double read_at;

	if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
		SKIP("late_insert keeps the madvise thread off a second CPU; there is one");
	atomic_store(&spin_go, 0);
	atomic_store(&spin_stop, 0);
	atomic_store(&mad_done, 0);
	atomic_store(&pin_done, 0);
	atomic_store(&pin_hold, 0);
	held_ops = uring_ops;
	held_ops.pin = held_pin;
	CHECK_RC(odpx_open_backend(&held_ops, NULL, &lctx), 0);
	big = map_anon(NULL, BIG);
	memset(big, 1, BIG);
	CHECK_RC(odpx_reg(lctx, big, BIG, 0, &mr), 0);	/* watched and cached */
	CHECK_RC(odpx_dereg(lctx, mr), 0);
	on_cpu(pthread_self(), 0);
	on_cpu(mon.reader, 0);
	if (atomic_load(&mon.helper_on)) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(0, &set);
		CHECK(sched_setaffinity(mon.helper_pid, sizeof(set), &set) == 0, "odpx-uffd to CPU 0");
	}
	printf("late_insert: the reader is %s\n",
	       atomic_load(&mon.helper_on) ? "the odpx-uffd process" : "the monitor's thread");
	pthread_attr_init(&fifo);
	pthread_attr_setinheritsched(&fifo, PTHREAD_EXPLICIT_SCHED);
	pthread_attr_setschedpolicy(&fifo, SCHED_FIFO);
	pthread_attr_setschedparam(&fifo, &prio);
	CHECK(pthread_create(&spin, &fifo, spinner, NULL) == 0, "a SCHED_FIFO thread (root)");
	on_cpu(spin, 1);
	a = stats_of(lctx);

	/*
	 * Under mon.lock: the monitor's thread writes it there (log_inval), also
	 * while odpx-uffd is stopped (it applies what was published).  Before the
	 * hold: the thread's hold is mon.lock itself.  No REMOVE is pending here.
	 */
	nrm = removes_read();
	/* the REMOVE is queued and its thread waits; the reader cannot read it yet */
	hold_reader(true);
	pthread_create(&mad, NULL, madviser, NULL);
	on_cpu(mad, 1);
	usleep(50 * 1000);
	atomic_store(&spin_go, 1);	/* once woken, the madvise thread stays off CPU 1 */
	usleep(10 * 1000);
	hold_reader(false);
	CHECK(WAIT_FOR(removes_read() > nrm, 2), "REMOVE not read");
	read_at = now_s();

	/* a miss right after the read pins the old pages; held at its insert */
	atomic_store(&pin_held, 0);
	atomic_store(&pin_hold, 1);
	pthread_create(&pin, NULL, late_pinner, NULL);
	CHECK(WAIT_FOR(atomic_load(&pin_held), 2), "the miss did not pin");
	pthread_mutex_lock(&mon.lock);
	atomic_store(&pin_hold, 0);	/* on to its insert, which waits for mon.lock */
	CHECK(!atomic_load(&mad_done), "the madvise returned while its thread was kept off");
	atomic_store(&spin_stop, 1);	/* it zaps and returns, within the quarantine */
	pthread_join(mad, NULL);
	pthread_join(spin, NULL);
	double held = now_s() - read_at;
	CHECK(held < QUARANTINE_S, "the madvise took %.0f ms after the read, over the quarantine",
	      held * 1e3);
	while (now_s() < read_at + QUARANTINE_S + 0.05)	/* the insert comes after the quarantine */
		usleep(10 * 1000);
	CHECK(!atomic_load(&pin_done), "the miss was not held at its insert");
	pthread_mutex_unlock(&mon.lock);
	pthread_join(pin, NULL);

	b = stats_of(lctx);
	CHECK(b.direct_racing == a.direct_racing + 1,
	      "a pin taken between the read of a REMOVE and its zap was cached "
	      "(direct_racing +%lu): aged at the insert, not at the pin",
	      (unsigned long)(b.direct_racing - a.direct_racing));
	CHECK_RC(odpx_reg(lctx, big, LEN, 0, &mr), 0);
	CHECK(data_check(lctx, mr, big, LEN, 5), "STALE: data through the zapped pages");
	CHECK_RC(odpx_dereg(lctx, mr), 0);
	CHECK_RC(odpx_close(lctx), 0);
	munmap(big, BIG);
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
static struct backend_ops overtaken_ops;
static unsigned overtaken;
static bool overtake_unmap;
static char *rb;

static int overtaken_pin(struct odpx_ctx *ctx, uint32_t idx, uintptr_t start, size_t len,
			 uint32_t access, uint32_t *lkey, uint32_t *rkey)
{
	int r = uring_ops.pin(ctx, idx, start, len, access, lkey, rkey);

	/* ten at most: a miss that never stops retrying fails the test, not hangs it */
	if (start != (uintptr_t)rb || len != RB_LEN || overtaken++ >= 10)
		return r;
	if (!overtake_unmap) {
		madvise(rb + RB_LEN - 4096, 4096, MADV_DONTNEED);	/* returns once read */
	} else {
		CHECK(munmap(rb + RB_LEN - 4096, 4096) == 0, "munmap");
		map_anon(rb + RB_LEN - 4096, 4096);
	}
	return r;
}

static int retries_bounded(void *arg)
{
	struct odpx_stats a, b;
	struct odpx_ctx *ctx;
	struct odpx_mr *mr;

	overtake_unmap = arg != NULL;
	/* no quarantine: the retries alone stand between the miss and its pin */
	setenv("ODPX_REMOVE_QUARANTINE_MS", "0", 1);
	overtaken_ops = uring_ops;
	overtaken_ops.pin = overtaken_pin;
	CHECK_RC(odpx_open_backend(&overtaken_ops, NULL, &ctx), 0);
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

	setenv("ODPX_REMOVE_QUARANTINE_MS", "200", 1);	/* QUARANTINE_S */
	ctx = open_pin(0);
	memset(p, 1, LEN);
	CHECK_RC(odpx_reg(ctx, p, LEN, 0, &mr), 0);
	CHECK_RC(odpx_dereg(ctx, mr), 0);

	CHECK(madvise(p, LEN, MADV_DONTNEED) == 0, "madvise");
	CHECK(WAIT_FOR(stats_of(ctx).entries == 0, 5), "the engine did not unpin the dead entry");
	a = stats_of(ctx);
	CHECK_RC(odpx_reg(ctx, p, LEN, 0, &mr), 0);
	b = stats_of(ctx);
	CHECK(b.direct_racing == a.direct_racing + 1, "a miss right after DONTNEED was cached");
	CHECK(data_check(ctx, mr, p, LEN, 2), "data through the quarantined registration");
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	CHECK(stats_of(ctx).entries == a.entries, "the direct registration was not released");

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
	setenv("ODPX_UFFD_HELPER", "0", 1);	/* every context is closed: the monitor restarts */
	late_insert();
	return 0;
}
