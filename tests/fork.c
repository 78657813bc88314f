// SPDX-License-Identifier: MIT
/*
 * fork: a child gets no registrations, and neither side hurts the other.
 *
 * The parent caches several ranges (one of them held across the fork) and
 * forks.  The child, under a deadline the parent enforces (kill and fail):
 *   - finds the parent's reader stack unmapped, and maps and writes that
 *     range as plain memory (under ASan: none of the reader's frames left);
 *   - munmaps, MADV_DONTNEEDs and mremaps memory the parent has cached: none
 *     of these may block (the child has no monitor reading its events);
 *   - gets -ESTALE from every call on the inherited context, and 0 from
 *     odpx_close of it, which must not touch the parent's pins, and leaves
 *     none of the parent's io_uring rings mapped;
 *   - opens a fresh context that caches, moves the right bytes and is kept
 *     coherent by its own monitor (a stale scenario in the child).
 * The parent afterwards: VmPin and the gauges as before the fork, every cached
 * registration still a hit moving the right bytes, and its munmaps still
 * invalidate (a stale scenario after the fork).  Run once per userfaultfd
 * mode, each in its own process.  Then a fork inside an engine's start
 * (start_race) and the descriptors a child inherits (fds_case).
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <liburing.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"
#include "odpx-private.h"	/* the monitor's reader stack */

#define LEN (64 * 1024)
#define NR 4
#define DEADLINE_S 5.0

static int soft_failed;

/* the process's io_uring ring mappings (rings and SQE arrays) */
static int uring_maps(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int n = 0;

	CHECK(f, "/proc/self/maps");
	while (fgets(line, sizeof(line), f))
		n += strstr(line, "anon_inode:[io_uring]") != NULL;
	fclose(f);
	return n;
}
#define SOFT(c, ...) do { if (!(c)) { fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
	fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); soft_failed = 1; } } while (0)

static unsigned char *a[NR];	/* cached, released */
static unsigned char *h;	/* cached, held across the fork */
static struct monitor_usage mu;	/* the parent's monitor at the fork */

/* Cache [p, p+LEN) and release it; the next odpx_reg must be a hit. */
static struct odpx_mr *cache(struct odpx_ctx *ctx, void *p, unsigned seed, int keep)
{
	struct odpx_mr *mr;
	struct odpx_stats st;

	CHECK_RC(odpx_reg(ctx, p, LEN, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
	CHECK(data_check(ctx, mr, p, LEN, seed), "data check of %p (seed %u)", p, seed);
	if (keep)
		return mr;
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	st = stats_of(ctx);
	CHECK_RC(odpx_reg(ctx, p, LEN, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
	CHECK(stats_of(ctx).hits == st.hits + 1, "%p: not cached", p);
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	return NULL;
}

/*
 * New pages at the same address, then a registration must move them.  The
 * old ones are unmapped by MAP_FIXED (an UNMAP event as for munmap()), with
 * no moment in which another thread's mmap() (an engine, the sanitizer's
 * allocator) could take the address.
 */
static void stale_scenario(struct odpx_ctx *ctx, unsigned char *p, unsigned seed, const char *who)
{
	struct odpx_stats st0 = stats_of(ctx), st1;
	struct odpx_mr *mr;

	CHECK(mmap(p, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == p,
	      "%s: mmap over the old pages: %s", who, strerror(errno));
	CHECK_RC(odpx_reg(ctx, p, LEN, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
	st1 = stats_of(ctx);
	CHECK(st1.misses == st0.misses + 1, "%s: the old registration was returned", who);
	CHECK(data_check(ctx, mr, p, LEN, seed), "%s: stale data after the old pages were replaced", who);
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	CHECK(st1.inval_unmap > st0.inval_unmap && st1.inval_entries > st0.inval_entries,
	      "%s: munmap not seen (inval_unmap %lu->%lu, inval_entries %lu->%lu)", who,
	      (unsigned long)st0.inval_unmap, (unsigned long)st1.inval_unmap,
	      (unsigned long)st0.inval_entries, (unsigned long)st1.inval_entries);
}

static int child(struct odpx_ctx *inh, struct odpx_mr *held)
{
	struct odpx_ctx *ctx;
	struct odpx_mr *mr = (struct odpx_mr *)1;
	struct odpx_stats st;
	enum odpx_mode m;
	unsigned char *fresh;
	void *q;

	/*
	 * The parent's reader stack is gone, and a mapping there is plain
	 * memory: no sanitizer keeps the frames of a thread the child lacks.
	 */
	void *rs = mmap((void *)mu.reader_stack, mu.reader_stack_len, PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	CHECK(rs == mu.reader_stack, "child: the parent's reader stack %p (%zu bytes) is still mapped",
	      mu.reader_stack, mu.reader_stack_len);
	memset(rs, 0x5a, mu.reader_stack_len);
	CHECK(munmap(rs, mu.reader_stack_len) == 0, "child: munmap: %s", strerror(errno));

	/* memory the parent has cached: none of these may hang */
	CHECK(munmap(a[0], LEN) == 0, "child: munmap: %s", strerror(errno));
	CHECK(madvise(a[1], LEN, MADV_DONTNEED) == 0, "child: MADV_DONTNEED: %s", strerror(errno));
	q = mremap(a[2], LEN, LEN, MREMAP_MAYMOVE | MREMAP_FIXED,
		   mmap(NULL, LEN, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
	CHECK(q != MAP_FAILED, "child: mremap: %s", strerror(errno));
	CHECK(munmap(q, LEN) == 0, "child: munmap after mremap");
	CHECK(munmap(h, LEN / 2) == 0, "child: munmap of half the held range");

	/* the inherited context is stale */
	CHECK_RC(odpx_reg(inh, a[3], LEN, 0, &mr), -ESTALE);
	CHECK(mr == (struct odpx_mr *)1, "child: a refused odpx_reg wrote a handle");
	CHECK_RC(odpx_dereg(inh, held), -ESTALE);
	CHECK_RC(odpx_prefetch(inh, a[3], LEN, 0), -ESTALE);
	CHECK_RC(odpx_transfer(inh, held, 0, 0, h + LEN / 2, 4096, ODPX_XFER_TO_FD), -ESTALE);
	CHECK_RC(odpx_mode_get(inh, &m, NULL), -ESTALE);
	{
		int r = odpx_stats_read(inh, &st, sizeof(st));
		SOFT(r == -ESTALE, "child: odpx_stats_read(inherited) = %d, want -ESTALE (%d)", r, -ESTALE);
	}
	CHECK_RC(odpx_close(inh), 0);
	CHECK(uring_maps() == 0, "child: %d io_uring mappings of the parent's left after the close",
	      uring_maps());

#ifdef __SANITIZE_THREAD__
	/*
	 * TSan's thread registry does not survive a fork of a threaded
	 * process ("dup thread with used id" at the child's first thread);
	 * the fresh-context part runs in the plain and ASan builds.
	 */
	printf("child: fresh context n/a under TSan (threads after a threaded fork)\n");
	(void)fresh;
	return soft_failed;
#endif
	/* a fresh context works, and its own monitor keeps it coherent */
	ctx = open_pin(0);
	fresh = map_anon(NULL, LEN);
	cache(ctx, fresh, 20, 0);
	cache(ctx, a[3], 21, 0);	/* inherited memory, now the child's own pages */
	stale_scenario(ctx, fresh, 22, "child");
	stale_scenario(ctx, a[3], 23, "child, inherited memory");
	st = stats_of(ctx);
	CHECK(st.unsafe_no_monitor == 0 && st.direct_no_monitor == 0 && st.direct_regs == 0,
	      "child: the fresh context is not caching under a monitor (direct_no_monitor %lu, direct_regs %lu)",
	      (unsigned long)st.direct_no_monitor, (unsigned long)st.direct_regs);
	CHECK_RC(odpx_close(ctx), 0);
	return soft_failed;
}

static int scenario(void)
{
	struct odpx_ctx *ctx = open_pin(0);
	struct odpx_mr *held, *mr;
	struct odpx_stats st0, st1;
	long pin0 = vm_pinned_kb(), pin1;
	int status;
	pid_t pid;

	for (int i = 0; i < NR; i++) {
		a[i] = map_anon(NULL, LEN);
		cache(ctx, a[i], i, 0);
	}
	h = map_anon(NULL, LEN);
	held = cache(ctx, h, 9, 1);
	st0 = stats_of(ctx);
	pin1 = vm_pinned_kb();
	CHECK(pin1 >= pin0 + (NR + 1) * LEN / 1024, "VmPin %ld kB, want at least %ld", pin1,
	      pin0 + (NR + 1) * LEN / 1024);

	monitor_usage(&mu);
	CHECK(mu.reader_stack, "no reader runs for the cached ranges");
	fflush(stdout);
	fflush(stderr);
	pid = fork();
	CHECK(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0)
		_exit(child(ctx, held));

	double deadline = now_s() + DEADLINE_S;
	pid_t w;
	while ((w = waitpid(pid, &status, WNOHANG)) == 0 && now_s() < deadline) {
		struct timespec t = { 0, 2000000 };
		nanosleep(&t, NULL);
	}
	if (w == 0) {
		char cmd[64];
		snprintf(cmd, sizeof(cmd), "cat /proc/%d/stack /proc/%d/wchan 2>/dev/null", pid, pid);
		fprintf(stderr, "child %d still running after %.0f s; kernel stack:\n", pid, DEADLINE_S);
		if (system(cmd)) {
		}
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
		FAIL("the child hung (munmap of memory the parent cached?)");
	}
	CHECK(w == pid, "waitpid: %s", strerror(errno));
	CHECK(WIFEXITED(status), "child killed by signal %d", WTERMSIG(status));
	CHECK(WEXITSTATUS(status) == 0, "child failed (exit %d)", WEXITSTATUS(status));

	/* the parent: nothing changed */
	st1 = stats_of(ctx);
	CHECK(vm_pinned_kb() == pin1, "parent VmPin %ld kB after the child, was %ld", vm_pinned_kb(), pin1);
	CHECK(st1.entries == st0.entries && st1.pinned_bytes == st0.pinned_bytes &&
	      st1.inval_entries == st0.inval_entries,
	      "parent gauges changed by the child: entries %lu->%lu, pinned %lu->%lu, inval_entries %lu->%lu",
	      (unsigned long)st0.entries, (unsigned long)st1.entries, (unsigned long)st0.pinned_bytes,
	      (unsigned long)st1.pinned_bytes, (unsigned long)st0.inval_entries,
	      (unsigned long)st1.inval_entries);
	CHECK(data_check(ctx, held, h, LEN, 30), "parent: the held registration after fork");
	for (int i = 0; i < NR; i++) {
		CHECK_RC(odpx_reg(ctx, a[i], LEN, 0, &mr), 0);
		CHECK(data_check(ctx, mr, a[i], LEN, 31 + i), "parent: cached range %d after fork", i);
		CHECK_RC(odpx_dereg(ctx, mr), 0);
	}
	st1 = stats_of(ctx);
	CHECK(st1.misses == st0.misses, "parent: %lu misses after fork, cached ranges lost",
	      (unsigned long)(st1.misses - st0.misses));
	CHECK_RC(odpx_dereg(ctx, held), 0);

	/* and its monitor still invalidates */
	for (int i = 0; i < NR; i++)
		stale_scenario(ctx, a[i], 40 + i, "parent after fork");
	stale_scenario(ctx, h, 50, "parent after fork, the held range");

	CHECK_RC(odpx_close(ctx), 0);
	CHECK(vm_pinned_kb() == pin0, "VmPin %ld kB after close, baseline %ld", vm_pinned_kb(), pin0);
	for (int i = 0; i < NR; i++)
		munmap(a[i], LEN);
	munmap(h, LEN);
	return 0;
}

static int scenario_of(void *arg)
{
	(void)arg;
	return scenario();
}

/*
 * fork() while a context's engine starts: the first miss makes the
 * engine's eventfd and ring, starts its thread and publishes it.  A child
 * forked inside that window must not keep them: its close of the
 * inherited context finds no published engine to forget.
 *
 * The window is opened on purpose: this program's io_uring_queue_init()
 * (the library's calls bind to it; the real one is liburing's) holds the
 * engine's start, once armed, until the main thread has forked or 200 ms
 * have passed.  The fork lands inside the window unless fork() waits for
 * the window to close; then the child inherits a published engine.
 */
static _Atomic int arm, forked;	/* arm: 1 armed, 2 the start waits for a fork */

int io_uring_queue_init(unsigned entries, struct io_uring *ring, unsigned flags)
{
	static int (*real)(unsigned, struct io_uring *, unsigned);
	int r, one = 1;

	if (!real)
		real = (int (*)(unsigned, struct io_uring *, unsigned))dlsym(RTLD_NEXT,
									     "io_uring_queue_init");
	r = real(entries, ring, flags);
	if (atomic_compare_exchange_strong(&arm, &one, 2)) {
		double end = now_s() + 0.2;
		while (!atomic_load(&forked) && now_s() < end)
			;
	}
	return r;
}

static void *first_miss(void *arg)
{
	struct odpx_ctx *ctx = arg;
	unsigned char *p = map_anon(NULL, LEN);
	struct odpx_mr *mr;

	CHECK_RC(odpx_reg(ctx, p, LEN, 0, &mr), 0);	/* the engine starts here */
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	munmap(p, LEN);
	return NULL;
}

/* our descriptors that are an eventfd or an io_uring */
static int engine_like_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	char path[300], to[64];
	int n = 0;

	CHECK(d, "opendir /proc/self/fd");
	while ((e = readdir(d))) {
		ssize_t k;
		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		if (e->d_name[0] == '.' || (k = readlink(path, to, sizeof(to) - 1)) < 0)
			continue;
		to[k] = 0;
		n += !strcmp(to, "anon_inode:[eventfd]") || !strcmp(to, "anon_inode:[io_uring]");
	}
	closedir(d);
	return n;
}

static int start_race(void *arg)
{
	struct odpx_ctx *ctx = open_pin(0);	/* its backend's ring made: arm after */
	int status = 0, left;
	pthread_t t;
	pid_t pid;

	(void)arg;
	atomic_store(&arm, 1);
	CHECK(pthread_create(&t, NULL, first_miss, ctx) == 0, "pthread_create");
	CHECK(WAIT_FOR(atomic_load(&arm) == 2, 10), "the engine's start never came");
	fflush(stdout);
	if (!(pid = fork())) {
		if (odpx_close(ctx))
			_exit(2);
		_exit(engine_like_fds() || uring_maps() ? 1 : 0);
	}
	CHECK(pid > 0, "fork: %s", strerror(errno));
	atomic_store(&forked, 1);
	pthread_join(t, NULL);
	CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status), "the child died: %#x", status);
	left = WEXITSTATUS(status);
	CHECK(left == 0, "forked inside the engine's start, the child kept %s", left == 1 ?
	      "the engine's eventfd or ring after its close" : "a failing close");
	CHECK_RC(odpx_close(ctx), 0);
	printf("fork inside the engine's start: the child keeps none of it: ok\n");
	return 0;
}

/*
 * A child's copies of a context's descriptors (the backend's ring, the
 * engine's ring and eventfd) are gone when fork() returns in it.  A child
 * that closes every descriptor above stderr, as a daemon does, and opens
 * files of its own may get their old numbers; odpx_close() of the
 * inherited context then closed those files (a close by number).
 */
static int fds_case(void *arg)
{
	struct odpx_ctx *ctx = open_pin(0);
	unsigned char *p = map_anon(NULL, LEN);
	int status;
	pid_t pid;

	(void)arg;
	cache(ctx, p, 60, 0);	/* the engine runs: its ring and eventfd exist */
	CHECK(engine_like_fds() >= 3, "the parent has %d io_uring/eventfd descriptors, want 3",
	      engine_like_fds());
	fflush(stdout);
	if (!(pid = fork())) {
		int left = engine_like_fds(), fd[16];
		/*
		 * Nor their mappings: a ring lives while it is mapped, and the
		 * backend's ring holds the parent's pins (the parent's exit
		 * without odpx_close() would leave them pinned for our life).
		 */
		if (uring_maps())
			_exit(5);
		if (syscall(SYS_close_range, 3U, ~0U, 0U))
			_exit(4);
		for (int i = 0; i < 16; i++)
			fd[i] = open("/dev/null", O_RDONLY);
		if (odpx_close(ctx))
			_exit(2);
		for (int i = 0; i < 16; i++)
			if (fd[i] < 0 || fcntl(fd[i], F_GETFD) < 0)
				_exit(3);
		_exit(left ? 1 : 0);
	}
	CHECK(pid > 0, "fork: %s", strerror(errno));
	CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status), "the child died: %#x", status);
	CHECK(WEXITSTATUS(status) != 3, "odpx_close of the inherited context closed the child's files");
	CHECK(WEXITSTATUS(status) != 1, "the child kept the parent's io_uring rings or eventfd");
	CHECK(WEXITSTATUS(status) != 5, "the child kept the parent's io_uring rings mapped");
	CHECK(WEXITSTATUS(status) == 0, "the child failed: exit %d", WEXITSTATUS(status));
	CHECK_RC(odpx_close(ctx), 0);
	munmap(p, LEN);
	printf("the child's copies of the descriptors and ring mappings go at fork: ok\n");
	return 0;
}

int main(void)
{
	const char *modes[] = { "wp-async", "wp", "missing" };
	int failed = 0;

	for (unsigned m = 0; m < 3; m++) {
		int st = run_forked(modes[m], scenario_of, NULL);
		printf("%-8s %s\n", modes[m], st == 0 ? "ok" : "FAILED");
		failed |= st != 0;
	}
	failed |= run_forked(NULL, start_race, NULL) != 0;
	failed |= run_forked(NULL, fds_case, NULL) != 0;
	return failed;
}
