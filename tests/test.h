/* SPDX-License-Identifier: MIT */
/* test.h - helpers shared by odpx's host tests (header-only). */
#ifndef ODPX_TEST_H
#define ODPX_TEST_H

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "odpx.h"

#define FAIL(...) do { fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
	fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); exit(1); } while (0)
#define CHECK(c, ...) do { if (!(c)) FAIL(__VA_ARGS__); } while (0)
#define CHECK_RC(expr, want) do { long _r = (long)(expr); if (_r != (long)(want)) \
	FAIL("%s = %ld (%s), want %ld; reason: %s", #expr, _r, _r < 0 ? strerror((int)-_r) : "", \
	     (long)(want), odpx_last_reason()); } while (0)
/* ASan and TSan replace glibc's malloc: no brk heap, no mmap threshold */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZER_MALLOC 1
#else
#define SANITIZER_MALLOC 0
#endif

#define SKIP(...) do { printf("SKIP: "); printf(__VA_ARGS__); printf("\n"); exit(77); } while (0)

static inline double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/*
 * Run @fn(@arg) in a forked child, with ODPX_UFFD_MODE=@mode unless NULL (the
 * monitor reads it once per process).  Returns the child's exit status, or
 * 128 + N when signal N killed it.
 */
static inline int run_forked(const char *mode, int (*fn)(void *), void *arg)
{
	int st;
	pid_t pid;

	fflush(stdout);
	pid = fork();
	if (pid < 0)
		FAIL("fork: %s", strerror(errno));
	if (pid == 0) {
		if (mode)
			setenv("ODPX_UFFD_MODE", mode, 1);
		int rc = fn(arg);
		fflush(stdout);	/* _exit() flushes nothing */
		_exit(rc);
	}
	if (waitpid(pid, &st, 0) != pid)
		FAIL("waitpid: %s", strerror(errno));
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* @fn(@arg) in a forked child in each userfaultfd mode: 0 if every run passed. */
static inline int run_each_uffd_mode(int (*fn)(void *), void *arg)
{
	static const char *const modes[] = { "auto", "wp", "missing" };
	int bad = 0;

	for (unsigned i = 0; i < 3; i++) {
		int r = run_forked(modes[i], fn, arg);
		if (r) {
			printf("FAIL %s: %s %d\n", modes[i], r > 128 ? "signal" : "exit",
			       r > 128 ? r - 128 : r);
			bad = 1;
		}
	}
	return bad;
}

/*
 * The stats segments in @pid's descriptor table: its links that read
 * "/memfd:odpx.*" (segment.h).  The path of the last one found into
 * @path[@len] unless NULL.
 */
static inline unsigned seg_fds(pid_t pid, char *path, size_t len)
{
	char dir[32], link[300], fd[64];
	struct dirent *d;
	unsigned n = 0;
	DIR *dp;

	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
	CHECK((dp = opendir(dir)), "opendir %s: %s", dir, strerror(errno));
	while ((d = readdir(dp))) {
		ssize_t k;

		snprintf(fd, sizeof(fd), "%s/%.20s", dir, d->d_name);	/* a number */
		if ((k = readlink(fd, link, sizeof(link) - 1)) <= 0)
			continue;
		link[k] = 0;
		if (strncmp(link, "/memfd:odpx.", 12))
			continue;
		n++;
		if (path)
			snprintf(path, len, "%s", fd);
	}
	closedir(dp);
	return n;
}

/* The directory of this program (build/tests), into @dir[4096]. */
static inline void test_dir(char *dir)
{
	ssize_t n = readlink("/proc/self/exe", dir, 4095);

	if (n <= 0)
		FAIL("readlink /proc/self/exe: %s", strerror(errno));
	dir[n] = 0;
	*strrchr(dir, '/') = 0;
}

/* build/odpx's odpstat, beside this program's directory, checked built. */
static inline char *odpstat_path(void)
{
	static char path[4200];
	char dir[4096];

	test_dir(dir);
	snprintf(path, sizeof(path), "%s/../odpstat", dir);
	if (access(path, X_OK))
		FAIL("%s: not built", path);
	return path;
}

/*
 * The fixture tree tests/fixtures: $TEST_FIXTURES, else the one under the
 * current directory (when it holds @probe), else the one beside the build
 * directory of this program (build/tests/<name> -> tests/fixtures).
 */
static inline void find_fixtures(char *fx, size_t cap, const char *probe)
{
	char exe[4096], path[4200];
	const char *e = getenv("TEST_FIXTURES");

	snprintf(path, sizeof(path), "tests/fixtures/%s", probe);
	if (e) {
		snprintf(fx, cap, "%s", e);
	} else if (access(path, R_OK) == 0) {
		snprintf(fx, cap, "tests/fixtures");
	} else {
		test_dir(exe);
		if ((size_t)snprintf(fx, cap, "%s/../../tests/fixtures", exe) >= cap)
			FAIL("fixture path too long");
	}
}

/* Descriptors open in this process (the listing's own not counted). */
static inline unsigned count_fds(void)
{
	DIR *dir = opendir("/proc/self/fd");
	struct dirent *d;
	unsigned n = 0;

	CHECK(dir, "opendir /proc/self/fd");
	while ((d = readdir(dir)))
		n += d->d_name[0] != '.';
	closedir(dir);
	return n - 1;
}

/* The process's odpx threads (they name themselves "odpx-..." once they run). */
static inline int odpx_threads(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;

	while (d && (e = readdir(d))) {
		char p[300], comm[32] = "";
		FILE *f;

		snprintf(p, sizeof(p), "/proc/self/task/%s/comm", e->d_name);
		if (e->d_name[0] == '.' || !(f = fopen(p, "r")))
			continue;
		if (fgets(comm, sizeof(comm), f) && !strncmp(comm, "odpx-", 5))
			n++;
		fclose(f);
	}
	if (d)
		closedir(d);
	return n;
}

/* Wait for @n odpx threads, @secs at most. */
static inline bool threads_are(int n, double secs)
{
	double end = now_s() + secs;

	while (odpx_threads() != n) {
		if (now_s() > end)
			return false;
		usleep(1000);
	}
	return true;
}

/* The process's userfaultfd descriptors. */
static inline int uffds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	while (d && (e = readdir(d))) {
		char p[300], t[64] = "";

		snprintf(p, sizeof(p), "/proc/self/fd/%s", e->d_name);
		if (readlink(p, t, sizeof(t) - 1) > 0 && strstr(t, "userfaultfd"))
			n++;
	}
	if (d)
		closedir(d);
	return n;
}

static inline void *map_anon(void *at, size_t len)
{
	void *p = mmap(at, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | (at ? MAP_FIXED : 0), -1, 0);
	if (p == MAP_FAILED)
		FAIL("mmap: %s", strerror(errno));
	return p;
}

/* A memfd of @len bytes filled with a pattern derived from @seed. */
static inline int pattern_fd(size_t len, unsigned seed)
{
	/* mmap, not malloc: tests that move the heap by hand call this */
	int fd = memfd_create("odpx-test", MFD_CLOEXEC);
	unsigned char *buf = mmap(NULL, len, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (fd < 0 || buf == MAP_FAILED)
		FAIL("memfd_create: %s", strerror(errno));
	for (size_t i = 0; i < len; i++)
		buf[i] = (unsigned char)(i * 131 + seed * 7 + (i >> 12));
	if (pwrite(fd, buf, len, 0) != (ssize_t)len)
		FAIL("pwrite: %s", strerror(errno));
	munmap(buf, len);
	return fd;
}

static inline int pattern_ok(const unsigned char *p, size_t len, unsigned seed)
{
	for (size_t i = 0; i < len; i++)
		if (p[i] != (unsigned char)(i * 131 + seed * 7 + (i >> 12)))
			return 0;
	return 1;
}

static inline long vm_pinned_kb(void)
{
	char line[256];
	long kb = -1;
	FILE *f = fopen("/proc/self/status", "re");
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmPin: %ld kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb;
}

static inline struct odpx_stats stats_of(struct odpx_ctx *ctx)
{
	struct odpx_stats st;
	CHECK(odpx_stats_read(ctx, &st, sizeof(st)) == (int)sizeof(st), "stats_read");
	return st;
}

/* Wait until @cond holds or @secs pass; a deadline, never a fixed sleep. */
#define WAIT_FOR(cond, secs) ({ double _d = now_s() + (secs); int _ok;		\
	while (!(_ok = !!(cond)) && now_s() < _d) { struct timespec _t = { 0, 1000000 }; \
		nanosleep(&_t, NULL); } _ok; })

/*
 * The data check through the pinned pages of a registration of [p, p+len):
 * 1. "device writes": READ_FIXED a pattern from a file into the registration;
 *    the CPU must see it in the current mapping;
 * 2. "device reads": the CPU writes another pattern; WRITE_FIXED it to a
 *    file; the file must hold it.
 * Returns 1 when both hold (the registration covers the current pages).
 */
static inline int data_check(struct odpx_ctx *ctx, struct odpx_mr *mr, void *p, size_t len,
			     unsigned seed)
{
	int in = pattern_fd(len, seed), out = memfd_create("odpx-out", MFD_CLOEXEC);
	unsigned char *back = mmap(NULL, len, PROT_READ | PROT_WRITE,
				   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	int ok = 1;

	CHECK(out >= 0 && back != MAP_FAILED, "memfd/mmap");
	memset(p, 0, len);
	CHECK_RC(odpx_transfer(ctx, mr, in, 0, p, len, ODPX_XFER_FROM_FD), len);
	if (!pattern_ok(p, len, seed))
		ok = 0;
	for (size_t i = 0; i < len; i++)
		((unsigned char *)p)[i] = (unsigned char)(i * 131 + (seed + 1) * 7 + (i >> 12));
	CHECK(ftruncate(out, len) == 0, "ftruncate");
	CHECK_RC(odpx_transfer(ctx, mr, out, 0, p, len, ODPX_XFER_TO_FD), len);
	CHECK(pread(out, back, len, 0) == (ssize_t)len, "pread");
	if (!pattern_ok(back, len, seed + 1))
		ok = 0;
	close(in);
	close(out);
	munmap(back, len);
	return ok;
}

/* Print one file of /proc/self/task/@tid to stderr, prefixed; quiet if unreadable. */
static inline void dump_task_file(const char *tid, const char *file)
{
	char path[128], buf[4096];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/self/task/%s/%s", tid, file);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return;
	buf[n] = 0;
	fprintf(stderr, "    %s: %s%s", file, buf, buf[n - 1] == '\n' ? "" : "\n");
}

/*
 * Where every thread of this process is, as the kernel sees it: name,
 * wait channel, system call and kernel stack (root only).  For a test that
 * is about to fail on a hang, before it exits.
 */
static inline void dump_threads(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *de;

	if (!d)
		return;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		fprintf(stderr, "  thread %s\n", de->d_name);
		dump_task_file(de->d_name, "comm");
		dump_task_file(de->d_name, "wchan");
		dump_task_file(de->d_name, "syscall");
		dump_task_file(de->d_name, "stack");
	}
	closedir(d);
}

static inline struct odpx_ctx *open_pin(uint32_t flags)
{
	struct odpx_attr a = { .comp_mask = ODPX_ATTR_FLAGS, .flags = flags };
	struct odpx_ctx *ctx;
	int r = odpx_open_uring(&a, &ctx);
	if (r == -EPERM || r == -ENOSYS)
		FAIL("io_uring unavailable here (%s): the suite needs it", strerror(-r));
	CHECK_RC(r, 0);
	return ctx;
}

/*
 * A storm of SIGUSR1 at the calling thread, from a thread of its own, a
 * signal every @gap_ns (0: back to back) from storm_begin() to storm_end(),
 * so that some land inside its system calls (EINTR).  The handler counts
 * (storm_count()) and has no SA_RESTART; it stays installed after the
 * storm, since a signal still pending then would kill the test.
 */
struct storm {
	pthread_t target, thr;
	long gap_ns;
	atomic_bool over;
};

static inline atomic_ulong *storm_count(void)
{
	static atomic_ulong n;
	return &n;
}

static inline void storm_on_usr1(int sig)
{
	(void)sig;
	atomic_fetch_add(storm_count(), 1);
}

static inline void *storm_main(void *arg)
{
	struct storm *s = arg;

	while (!atomic_load(&s->over)) {
		pthread_kill(s->target, SIGUSR1);
		if (s->gap_ns) {
			struct timespec t = { 0, s->gap_ns };
			nanosleep(&t, NULL);
		}
	}
	return NULL;
}

static inline void storm_begin(struct storm *s, long gap_ns)
{
	struct sigaction sa = { .sa_handler = storm_on_usr1 };

	s->target = pthread_self();
	s->gap_ns = gap_ns;
	atomic_store(&s->over, false);
	CHECK(sigaction(SIGUSR1, &sa, NULL) == 0, "sigaction");
	CHECK(pthread_create(&s->thr, NULL, storm_main, s) == 0, "pthread_create");
}

static inline void storm_end(struct storm *s)
{
	atomic_store(&s->over, true);
	pthread_join(s->thr, NULL);
}

#endif
