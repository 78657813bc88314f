// SPDX-License-Identifier: MIT
/*
 * invalidate.c - W4: what munmap() costs once odpx is in the process.
 *
 *   without  munmap with no context open: before the first odpx_open, and in
 *            every later round after odpx_close() has stopped the monitor
 *            and closed the userfaultfd.
 *   plain    a context open, its monitor running, munmap of a mapping odpx
 *            never saw (not watched): the kernel has nothing to report, so
 *            this should cost what "without" costs.  The target's ratio is
 *            taken process against process instead (process_sets()): within
 *            one process, opening and closing contexts moves it by over 2%.
 *   cached   munmap of a range registered, cached and released: the kernel
 *            holds the caller until the monitor thread has read() the UNMAP
 *            event, so this costs a round trip to that thread.  Its target
 *            is the same munmap on a bare userfaultfd with a sleeping reader
 *            (below): the mechanism odpx rests on, at most 1.10 times it.
 *   wakeup   this machine's cross-thread wake-up latency: eventfd ping-pong
 *            between two blocked threads, half the round trip (information).
 * and diagnostics that split the differences:
 *   watched  a context open, munmap of a VMA the monitor watches but that
 *            holds no entry (monitor_watch() called directly): the
 *            userfaultfd round trip alone, no entry to kill, no unpin.
 *   held     "cached" but still held at munmap (released after, untimed):
 *            the entry dies with a reference, so the engine is not woken
 *            to unpin during the timed loop.
 * and references with no odpx in the process at all:
 *   spinner  "without" while another thread of the process spins in user
 *            space: a thread that is awake in the process's mm makes every
 *            munmap wait for a TLB-shootdown IPI to its CPU.  A reader that
 *            spins to save the caller a wake-up pays this instead.
 *   bare-busy, bare-sleep  munmap of a range registered (UNMAP events) on
 *            a bare userfaultfd whose reader, a thread that does nothing
 *            else, calls read() in a busy loop (pays the shootdown, saves a
 *            wake-up) or sleeps in poll() (pays both wake-ups): what the two
 *            simplest readers cost, with no lock and no cache behind them.
 *            The range is registered in missing mode.
 *   bare-sleep-wp  bare-sleep with the range registered as odpx's monitor
 *            registers it where the kernel has UFFD_FEATURE_WP_ASYNC (write-
 *            protect mode, asynchronous): tells the kernel's cost of that
 *            registration from the reader's.
 *
 * All are interleaved round by round (each round opens and closes its
 * contexts), so drift and noise fall on all of them alike.  Each mapping has
 * a PROT_NONE guard after it so it never merges with a neighbour, and is
 * written before the munmap, so there are pages to free.  Only the munmap
 * loop is timed: K munmaps per sample.  Thread placement is explicit (see
 * settle()): a wake-up across CPUs costs several times one on the same CPU,
 * and the ratio means something only if both sides cross alike.  --quick
 * runs 64 KiB across CPUs; a full run runs 64 KiB and 4 KiB in each
 * placement: across CPUs, on one CPU, and the scheduler's own.
 */
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/wait.h>

#include "bench.h"

#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif

static struct bench_opts o;

#define MAX_K 64

/*
 * K mappings, each followed by a PROT_NONE guard of its size so that it
 * never merges with a neighbour: [rw][none][rw][none]...  Each is placed by
 * the kernel (no MAP_FIXED: other threads map memory meanwhile), except in
 * the fixed-address variant of the process comparison below.
 */
struct slots {
	char *p[MAX_K];
	size_t bytes;
	unsigned k;
	uintptr_t at;		/* 0: the kernel places them; else slot i at at + 2 i bytes */
};

static void map_slots(struct slots *s)
{
	for (unsigned i = 0; i < s->k; i++) {
		void *at = s->at ? (void *)(s->at + 2 * s->bytes * i) : NULL;
		char *p = mmap(at, 2 * s->bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE |
			       MAP_ANONYMOUS | (at ? MAP_FIXED_NOREPLACE : 0), -1, 0);
		if (p == MAP_FAILED || mprotect(p + s->bytes, s->bytes, PROT_NONE))
			DIE("mmap/mprotect: %s", strerror(errno));
		memset(p, 0x33, s->bytes);
		s->p[i] = p;
	}
}

/* ns per munmap over the K mappings; then the guards go, untimed */
static double unmap_slots(struct slots *s)
{
	uint64_t t0 = now_ns(), t1;

	for (unsigned i = 0; i < s->k; i++)
		if (munmap(s->p[i], s->bytes))
			DIE("munmap: %s", strerror(errno));
	t1 = now_ns();
	for (unsigned i = 0; i < s->k; i++)
		munmap(s->p[i] + s->bytes, s->bytes);
	return (double)(t1 - t0) / s->k;
}

static void settle(void);

/* ---- wake-up latency ---- */

struct pingpong {
	int ping, pong;
	unsigned n;
};

static void *pong_main(void *arg)
{
	struct pingpong *pp = arg;
	uint64_t v;

	for (unsigned i = 0; i < pp->n; i++) {
		if (read(pp->ping, &v, sizeof(v)) != sizeof(v))
			DIE("read eventfd");
		v = 1;
		if (write(pp->pong, &v, sizeof(v)) != sizeof(v))
			DIE("write eventfd");
	}
	return NULL;
}

/* ns per one-way wake-up: half of n blocking round trips */
static double wakeup(unsigned n)
{
	struct pingpong pp = { eventfd(0, EFD_CLOEXEC), eventfd(0, EFD_CLOEXEC), n + 8 };
	pthread_t thr;
	uint64_t v = 1, t0 = 0;

	if (pp.ping < 0 || pp.pong < 0 || pthread_create(&thr, NULL, pong_main, &pp))
		DIE("eventfd/pthread_create: %s", strerror(errno));
	settle();
	for (unsigned i = 0; i < n + 8; i++) {
		if (i == 8)	/* warm: both threads have run once */
			t0 = now_ns();
		v = 1;
		if (write(pp.ping, &v, sizeof(v)) != sizeof(v) ||
		    read(pp.pong, &v, sizeof(v)) != sizeof(v))
			DIE("ping-pong: %s", strerror(errno));
	}
	double ns = (double)(now_ns() - t0) / n / 2;
	pthread_join(thr, NULL);
	close(pp.ping);
	close(pp.pong);
	return ns;
}

/* ---- idle threads ---- */

struct idlers {
	int efd;
	pthread_t thr[2];
};

static void *idle_main(void *arg)
{
	uint64_t v;

	return read(*(int *)arg, &v, sizeof(v)) < 0 ? NULL : NULL;
}

static void idlers_start(struct idlers *d)
{
	d->efd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
	for (int i = 0; i < 2; i++)
		if (d->efd < 0 || pthread_create(&d->thr[i], NULL, idle_main, &d->efd))
			DIE("idle threads: %s", strerror(errno));
	settle();
	usleep(1000);	/* let them reach their read() */
}

static void idlers_stop(struct idlers *d)
{
	uint64_t v = 2;

	if (write(d->efd, &v, sizeof(v)) != sizeof(v))
		DIE("eventfd write");
	for (int i = 0; i < 2; i++)
		pthread_join(d->thr[i], NULL);
	close(d->efd);
}

/* ---- references: a spinning thread, and a bare userfaultfd ---- */

#ifndef UFFD_FEATURE_WP_ASYNC
#define UFFD_FEATURE_WP_ASYNC (1 << 15)
#endif

struct bare {
	int uffd, stopfd;
	bool busy;		/* reader: busy read() loop, or poll() then read() */
	bool wp;		/* registered in write-protect mode, WP_ASYNC */
	atomic_bool stop;
	pthread_t thr;
};

static void *spin_main(void *arg)
{
	struct bare *b = arg;

	while (!atomic_load_explicit(&b->stop, memory_order_relaxed))
		;
	return NULL;
}

static void *bare_reader(void *arg)
{
	struct bare *b = arg;
	struct uffd_msg m[32];

	while (!atomic_load_explicit(&b->stop, memory_order_relaxed)) {
		struct pollfd p[2] = { { b->uffd, POLLIN, 0 }, { b->stopfd, POLLIN, 0 } };
		if (!b->busy && poll(p, 2, -1) < 0)
			DIE("poll: %s", strerror(errno));
		while (read(b->uffd, m, sizeof(m)) > 0)
			;
	}
	return NULL;
}

/* A thread that spins (!uffd) or reads a bare userfaultfd (busy or not). */
static void bare_start(struct bare *b, bool uffd, bool busy, bool wp)
{
	struct uffdio_api api = {
		.api = UFFD_API, .features = UFFD_FEATURE_EVENT_UNMAP |
			(wp ? UFFD_FEATURE_WP_ASYNC | UFFD_FEATURE_PAGEFAULT_FLAG_WP : 0),
	};

	*b = (struct bare){ .uffd = -1, .stopfd = eventfd(0, EFD_CLOEXEC), .busy = busy,
			    .wp = wp };
	if (uffd) {
		b->uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
		if (b->uffd < 0 || ioctl(b->uffd, UFFDIO_API, &api))
			DIE("bare userfaultfd%s: %s", wp ? " (WP_ASYNC)" : "", strerror(errno));
	}
	if (b->stopfd < 0 || pthread_create(&b->thr, NULL, uffd ? bare_reader : spin_main, b))
		DIE("bare thread: %s", strerror(errno));
	settle();
	usleep(1000);
}

static void bare_watch(struct bare *b, struct slots *s)
{
	for (unsigned i = 0; i < s->k; i++) {
		struct uffdio_register reg = {
			.range = { (uintptr_t)s->p[i], s->bytes },
			/* populated: never faults; WP without UFFDIO_WRITEPROTECT: neither */
			.mode = b->wp ? UFFDIO_REGISTER_MODE_WP : UFFDIO_REGISTER_MODE_MISSING,
		};
		if (ioctl(b->uffd, UFFDIO_REGISTER, &reg))
			DIE("UFFDIO_REGISTER: %s", strerror(errno));
	}
}

static void bare_stop(struct bare *b)
{
	uint64_t v = 1;

	atomic_store(&b->stop, true);
	if (write(b->stopfd, &v, sizeof(v)) != sizeof(v))
		DIE("eventfd write");
	pthread_join(b->thr, NULL);
	close(b->stopfd);
	if (b->uffd >= 0)
		close(b->uffd);
}

/* ---- the rounds ---- */

enum { WITHOUT, PLAIN, CACHED, WAKEUP, WATCHED, HELD, SPINNER, BARE_BUSY, BARE_SLEEP,
       BARE_SLEEP_WP, NPHASE };

static const char *const phase_name[NPHASE] = {
	"without", "plain", "cached", "wakeup", "watched-no-entry",
	"cached-held", "without+spinner", "bare-uffd-busy-reader",
	"bare-uffd-sleeping-reader", "bare-uffd-sleeping-reader-wp",
};

/*
 * Where threads run: PL_SCHED leaves it to the scheduler; otherwise this
 * thread is on CPU 0 and every other one (monitor, engine, ping-pong
 * partner, idle threads) on CPU 1 (PL_CROSS) or CPU 0 too (PL_SAME), so the
 * munmap round trip and the wake-up it is compared with cross the same way.
 */
enum { PL_SCHED = -1, PL_SAME = 0, PL_CROSS = 1 };
static int placement;

/* odpx's threads on the CPU the placement names */
static void settle(void)
{
	if (placement != PL_SCHED)
		place(placement);
}

struct round_stats {
	uint64_t events[NPHASE], engine_wakeups[NPHASE];
};

static double timed(struct odpx_ctx *ctx, struct slots *s, int p, struct round_stats *rs)
{
	struct odpx_stats a = stats_of(ctx), b;
	double ns = unmap_slots(s);

	b = stats_of(ctx);
	rs->events[p] += b.inval_unmap - a.inval_unmap;
	rs->engine_wakeups[p] += b.engine_wakeups - a.engine_wakeups;
	return ns;
}

/*
 * A context whose monitor and engine are running, its threads placed and
 * asleep: settle() places them.
 */
static struct odpx_ctx *open_running(char *anchor)
{
	struct odpx_ctx *ctx;
	struct odpx_mr *mr;

	place(placement == PL_SAME ? 0 : -1);
	ctx = open_ctx("uring", 256, o.pin_budget);
	/* the first miss attaches the monitor and starts the engine */
	CHECK_ODPX(odpx_reg(ctx, anchor, 64 * KiB, ODPX_ACCESS_LOCAL_WRITE, &mr));
	odpx_dereg(ctx, mr);
	settle();
	usleep(1000);	/* as for the idle threads: let the new threads go to sleep */
	return ctx;
}

/*
 * One round: every phase once, in a fixed order.  The order matters at the
 * 4 KiB scale: what ran in the millisecond before a timed loop (a ping-pong
 * on the other CPU, a pause) moves "without" by up to 8% on this guest, so
 * the order is kept fixed from run to run.
 */
static void round_once(struct slots *s, char *anchor, unsigned wake_n, double *v[NPHASE],
		       unsigned r, struct round_stats *rs, const char **mode)
{
	size_t bytes = s->bytes;
	struct odpx_mr *mr, *held[MAX_K];
	struct odpx_ctx *ctx;

	settle();
	map_slots(s);
	v[WITHOUT][r] = unmap_slots(s);
	v[WAKEUP][r] = wakeup(wake_n);

	struct bare b;
	bare_start(&b, false, true, false);
	map_slots(s);
	v[SPINNER][r] = unmap_slots(s);
	bare_stop(&b);
	for (int p = BARE_BUSY; p <= BARE_SLEEP_WP; p++) {
		bare_start(&b, true, p == BARE_BUSY, p == BARE_SLEEP_WP);
		map_slots(s);
		bare_watch(&b, s);
		v[p][r] = unmap_slots(s);
		bare_stop(&b);
	}

	ctx = open_running(anchor);
	*mode = mode_of(ctx);
	map_slots(s);
	v[PLAIN][r] = timed(ctx, s, PLAIN, rs);

	map_slots(s);
	for (unsigned i = 0; i < s->k; i++) {
		CHECK_ODPX(odpx_reg(ctx, s->p[i], bytes, ODPX_ACCESS_LOCAL_WRITE, &mr));
		odpx_dereg(ctx, mr);
	}
	v[CACHED][r] = timed(ctx, s, CACHED, rs);

	map_slots(s);
	for (unsigned i = 0; i < s->k; i++)
		if (monitor_watch((uintptr_t)s->p[i], (uintptr_t)s->p[i] + bytes))
			DIE("monitor_watch failed");
	v[WATCHED][r] = timed(ctx, s, WATCHED, rs);

	map_slots(s);
	for (unsigned i = 0; i < s->k; i++)
		CHECK_ODPX(odpx_reg(ctx, s->p[i], bytes, ODPX_ACCESS_LOCAL_WRITE, &held[i]));
	v[HELD][r] = timed(ctx, s, HELD, rs);
	for (unsigned i = 0; i < s->k; i++)
		odpx_dereg(ctx, held[i]);
	odpx_close(ctx);
}

/*
 * The never-registered munmap, process against process, as the target puts
 * it.  In one process, "plain" and "without" differ by what ran just before
 * each timed loop (opening or closing a context) by more than the 2% the
 * target allows, and two processes with the same code differed by up to 8%,
 * one pair measured at a time.  So: P sets of fresh processes, forked here,
 * each set the four kinds below; each process serves S samples, the kinds
 * taking turns in an order rotated from sample to sample, each sample preceded
 * by the same untimed map and 1 ms pause.  The pooled medians compare.
 *   without   no odpx;  without2  the same again: the harness's own bias;
 *   idle2     no odpx, two threads asleep where odpx's threads are placed;
 *   migrated  no odpx and no thread: the process itself ran 2 ms on CPU 1,
 *             then came back to CPU 0 for good (visit_cpu1());
 *   odpx      a context open and running, its threads asleep.
 */
enum { PK_WITHOUT, PK_WITHOUT2, PK_IDLE2, PK_MIGRATED, PK_ODPX, NPK };

static const char *const pk_name[NPK] = { "without", "without2", "idle2", "migrated", "odpx" };

/*
 * Run 2 ms on CPU 1, then come back.  On x86 since Linux 6.13 a CPU leaves
 * an mm's mm_cpumask only when a flush reaches it while it runs another mm
 * (at most one such trim a second).  An idle CPU keeps the last mm loaded
 * lazily, and a lazy CPU is sent no flush unless page tables are freed, so
 * from then on every munmap here takes the multi-CPU flush path: what a
 * thread of odpx that ever ran there costs, with no odpx and no thread.
 * (The fixed-address slots sit alone in their page tables, freed when a
 * sample unmaps its last guard: that flush reaches the lazy CPU, and is why
 * the threads cost nothing there.)
 */
static void visit_cpu1(void)
{
	cpu_set_t one;
	uint64_t end;

	if (bench_env.ncpu < 2)
		return;
	CPU_ZERO(&one);
	CPU_SET(1, &one);
	if (sched_setaffinity(0, sizeof(one), &one))
		DIE("sched_setaffinity: %s", strerror(errno));
	for (end = now_ns() + 2000000; now_ns() < end;)
		;
	if (placement == PL_SCHED)
		place(-1);
	settle();
}

struct child {
	pid_t pid;
	int go, done;		/* one byte asks for a sample; a double answers */
};

static void child_main(int kind, struct slots *s, char *anchor, int go, int done)
{
	struct odpx_ctx *ctx = NULL;
	struct idlers idle;
	double ns;
	char c;

	if (kind == PK_ODPX)
		ctx = open_running(anchor);
	else if (kind == PK_IDLE2)
		idlers_start(&idle);
	else if (kind == PK_MIGRATED)
		visit_cpu1();
	while (read(go, &c, 1) == 1) {
		settle();
		map_slots(s);
		usleep(1000);
		ns = unmap_slots(s);
		if (write(done, &ns, sizeof(ns)) != sizeof(ns))
			DIE("write: %s", strerror(errno));
	}
	if (ctx)
		odpx_close(ctx);
	else if (kind == PK_IDLE2)
		idlers_stop(&idle);
	_exit(0);
}

static struct child child_start(int kind, struct slots *s, char *anchor)
{
	int go[2], done[2];
	struct child c;

	if (pipe2(go, O_CLOEXEC) || pipe2(done, O_CLOEXEC))
		DIE("pipe: %s", strerror(errno));
	fflush(stdout);
	if ((c.pid = fork()) < 0)
		DIE("fork: %s", strerror(errno));
	if (!c.pid) {
		close(go[1]);
		close(done[0]);
		child_main(kind, s, anchor, go[0], done[1]);
	}
	close(go[0]);
	close(done[1]);
	c.go = go[1];
	c.done = done[0];
	return c;
}

static double child_sample(struct child *c)
{
	double ns;
	char one = 1;

	if (write(c->go, &one, 1) != 1 || read(c->done, &ns, sizeof(ns)) != sizeof(ns))
		DIE("a W4 child died (pid %d)", (int)c->pid);
	return ns;
}

/* after every child's go is closed: a child holds its elder siblings' */
static void child_wait(struct child *c)
{
	int st = 0;

	close(c->done);
	if (waitpid(c->pid, &st, 0) != c->pid || !WIFEXITED(st) || WEXITSTATUS(st))
		DIE("a W4 child failed (pid %d, status %#x)", (int)c->pid, st);
}

/* v[kind] gets sets * per samples each */
static void process_sets(struct slots *s, char *anchor, unsigned sets, unsigned per,
			 double *v[NPK])
{
	for (unsigned q = 0; q < sets; q++) {
		struct child c[NPK];

		for (int k = 0; k < NPK; k++)
			c[k] = child_start(k, s, anchor);
		settle();
		for (unsigned r = 0; r < per; r++)
			for (int i = 0; i < NPK; i++) {
				int k = (int)((i + r + q) % NPK);
				v[k][q * per + r] = child_sample(&c[k]);
			}
		for (int k = 0; k < NPK; k++)
			close(c[k].go);
		for (int k = 0; k < NPK; k++)
			child_wait(&c[k]);
	}
}

/* the process rows of one comparison, printed; their summaries in @pk */
static void process_rows(double *pv[NPK], unsigned sets, unsigned per, unsigned k, size_t bytes,
			 const char *sz, const char *sfx, const char *where, const char *mode,
			 struct summary pk[NPK])
{
	char cas[96];

	for (int p = 0; p < NPK; p++) {
		pk[p] = summarize(pv[p], sets * per, k);
		snprintf(cas, sizeof(cas), "process-%s-%s%s", pk_name[p], sz, sfx);
		kv_time("W4", cas, p == PK_ODPX ? "uring" : "none", p == PK_ODPX ? mode : "none",
			k, bytes, &pk[p], "what=munmap placement=%s processes=%u", where, sets);
	}
}

static const char *w4_mode = "?";	/* the mode the first w4() saw */

static void w4(size_t bytes, int pl)
{
	static const char *const pl_name[] = { "same-cpu", "cross-cpu" };
	unsigned k = o.quick ? 16 : 32, rounds = o.quick ? 20 : 60, wake_n = o.quick ? 200 : 1000;
	unsigned sets = o.quick ? 12 : 32, per = o.quick ? 8 : 12;
	struct slots s = { .bytes = bytes, .k = k };
	char *anchor = map_anon(64 * KiB, true);
	struct round_stats rs = { 0 };
	struct summary sm[NPHASE], pk[NPK];
	const char *mode = "?", *where = pl == PL_SCHED ? "scheduler" : pl_name[pl];
	double *v[NPHASE], *pv[NPK], *fv[NPK] = { 0 };
	char sz[32], cas[96], sfx[16];

	placement = pl;
	for (int p = 0; p < NPHASE; p++)
		v[p] = calloc(rounds, sizeof(double));
	for (int p = 0; p < NPK; p++)
		pv[p] = calloc(sets * per, sizeof(double));
	for (unsigned r = 0; r < rounds; r++)
		round_once(&s, anchor, wake_n, v, r, &rs, &mode);
	process_sets(&s, anchor, sets, per, pv);
	if (!o.quick && bytes == 4 * KiB && pl == PL_CROSS) {
		struct slots f = { .bytes = bytes, .k = k, .at = (uintptr_t)1 << 45 };
		for (int p = 0; p < NPK; p++)
			fv[p] = calloc(sets * per, sizeof(double));
		process_sets(&f, anchor, sets, per, fv);
	}
	place(-1);

	size_str(bytes, sz, sizeof(sz));
	snprintf(sfx, sizeof(sfx), "%s%s", pl == PL_CROSS ? "" : "-",
		 pl == PL_CROSS ? "" : pl == PL_SAME ? "same-cpu" : "sched");
	for (int p = 0; p < NPHASE; p++) {
		bool odpx = p < SPINNER && p != WITHOUT && p != WAKEUP;
		sm[p] = summarize(v[p], rounds, p == WAKEUP ? wake_n : k);
		snprintf(cas, sizeof(cas), "%s-%s%s", phase_name[p], p == WAKEUP ? "eventfd" : sz,
			 sfx);
		kv_time("W4", cas, odpx ? "uring" : "none", odpx ? mode : "none",
			p == WAKEUP ? 2 : k, p == WAKEUP ? 0 : bytes, &sm[p],
			"what=%s placement=%s uffd_unmap_events=%lu engine_wakeups=%lu",
			p == WAKEUP ? "half_round_trip" : "munmap", where,
			(unsigned long)rs.events[p], (unsigned long)rs.engine_wakeups[p]);
	}
	process_rows(pv, sets, per, k, bytes, sz, sfx, where, mode, pk);
	w4_mode = mode;
	if (fv[0]) {	/* the same, every process's slots at one address */
		struct summary fw = summarize(fv[PK_WITHOUT], sets * per, k),
			       fo = summarize(fv[PK_ODPX], sets * per, k),
			       fi = summarize(fv[PK_IDLE2], sets * per, k),
			       fm = summarize(fv[PK_MIGRATED], sets * per, k);
		snprintf(cas, sizeof(cas), "unregistered-fixed-address-%s%s", sz, sfx);
		kv_ratio("W4", cas, "uring", mode, "munmap_process_with_odpx/munmap_process_without",
			 fo.median, fw.median, 0, 0, "idle2_over_without=%.3f"
			 " migrated_over_without=%.3f null_ratio=%.3f slots_at=%#lx placement=%s",
			 fi.median / fw.median, fm.median / fw.median,
			 summarize(fv[PK_WITHOUT2], sets * per, k).median / fw.median,
			 (unsigned long)((uintptr_t)1 << 45), where);
		for (int p = 0; p < NPK; p++)
			free(fv[p]);
	}
	snprintf(cas, sizeof(cas), "unregistered-%s%s", sz, sfx);
	kv_ratio("W4", cas, "uring", mode, "munmap_process_with_odpx/munmap_process_without",
		 pk[PK_ODPX].median, pk[PK_WITHOUT].median, '<', 1.02,
		 "null_ratio=%.3f idle2_over_without=%.3f odpx_over_idle2=%.3f"
		 " migrated_over_without=%.3f odpx_over_migrated=%.3f"
		 " in_process_plain_over_without=%.3f placement=%s",
		 pk[PK_WITHOUT2].median / pk[PK_WITHOUT].median,
		 pk[PK_IDLE2].median / pk[PK_WITHOUT].median,
		 pk[PK_ODPX].median / pk[PK_IDLE2].median,
		 pk[PK_MIGRATED].median / pk[PK_WITHOUT].median,
		 pk[PK_ODPX].median / pk[PK_MIGRATED].median, sm[PLAIN].median / sm[WITHOUT].median,
		 where);
	snprintf(cas, sizeof(cas), "cached-%s%s", sz, sfx);
	kv_ratio("W4", cas, "uring", mode, "munmap_cached/bare_uffd_sleeping_reader",
		 sm[CACHED].median, sm[BARE_SLEEP].median, '<', 1.10,
		 "watched_over_bare=%.2f held_over_bare=%.2f busy_bare_over_bare=%.2f"
		 " cached_over_bare_wp=%.2f bare_wp_over_bare=%.2f"
		 " cached_over_wakeup=%.2f shootdown_ns=%.0f placement=%s",
		 sm[WATCHED].median / sm[BARE_SLEEP].median, sm[HELD].median / sm[BARE_SLEEP].median,
		 sm[BARE_BUSY].median / sm[BARE_SLEEP].median,
		 sm[CACHED].median / sm[BARE_SLEEP_WP].median,
		 sm[BARE_SLEEP_WP].median / sm[BARE_SLEEP].median, sm[CACHED].median / sm[WAKEUP].median,
		 sm[SPINNER].median - sm[WITHOUT].median, where);
	munmap(anchor, 64 * KiB);
	for (int p = 0; p < NPHASE; p++)
		free(v[p]);
	for (int p = 0; p < NPK; p++)
		free(pv[p]);
}

/*
 * W4 in a pool: 100,000 buffers of 4 KiB, one every 12 KiB, cached on the
 * null backend, are one watched record (the watches bridge the gaps).  A
 * munmap of one of them splits that record.  Timed apart: the munmap, and
 * then the wait for the invalidation lock, which the reader holds until the
 * event is applied.  The split once counted the record's live entries
 * on both sides, 4.7 ms here; informative, no target.
 */
static void w4_pool(void)
{
	const unsigned n = 100000, samples = 41;
	const size_t stride = 12 * KiB;
	struct odpx_ctx *ctx = open_ctx("null", 2 * n, (uint64_t)n * 4 * KiB);
	char *pool = mmap(NULL, (size_t)n * stride, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	double um[41], ap[41];
	struct odpx_stats st;

	if (pool == MAP_FAILED)
		DIE("mmap: %s", strerror(errno));
	for (unsigned i = 0; i < n; i++) {
		pool[(size_t)i * stride] = 1;
		reg_dereg(ctx, pool + (size_t)i * stride, 4 * KiB);
	}
	CHECK_ODPX(odpx_stats_read(ctx, &st, sizeof(st)));
	for (unsigned k = 0; k < samples; k++) {
		char *b = pool + (size_t)(n / 4 + k * 997) * stride;
		uint64_t t0 = now_ns(), t1, t2;

		if (munmap(b, 4 * KiB))
			DIE("munmap: %s", strerror(errno));
		t1 = now_ns();
		monitor_lock();
		monitor_unlock();
		t2 = now_ns();
		um[k] = (double)(t1 - t0);
		ap[k] = (double)(t2 - t1);
	}
	struct summary su = summarize(um, samples, 1), sa = summarize(ap, samples, 1);
	kv_time("W4P", "pool-100000x4KiB-munmap", "null", mode_of(ctx), n, 4 * KiB, &su,
		"watch_vmas=%lu entries=%lu", (unsigned long)st.watch_vmas,
		(unsigned long)st.entries);
	kv_time("W4P", "pool-100000x4KiB-apply", "null", mode_of(ctx), n, 4 * KiB, &sa, "");
	odpx_close(ctx);
	munmap(pool, (size_t)n * stride);
}

int main(int argc, char **argv)
{
	bench_init(argc, argv, &o, "W4");
	printf("# invalidate: W4, %s\n", o.quick ? "quick" : "full");
	if (!selected(&o, "W4"))
		return 0;
	w4(64 * KiB, PL_CROSS);
	if (o.quick)
		return 0;
	w4(4 * KiB, PL_CROSS);
	w4(64 * KiB, PL_SAME);
	w4(4 * KiB, PL_SAME);
	w4(64 * KiB, PL_SCHED);
	w4(4 * KiB, PL_SCHED);
	w4_pool();
	return 0;
}
