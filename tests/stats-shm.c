// SPDX-License-Identifier: MIT
/*
 * stats-shm: a context's segment is a memfd of its own process, found in
 * its descriptor table by odpx_seg_scan() (odpstat's reader), and counted
 * as a process's only when that process is its writer.
 *   - 100 contexts open, register and close: each finds its segment, one
 *     descriptor in our table while it is open, none left after its close,
 *     and nothing named in /dev/shm.
 *   - a context opening and closing in a loop while another thread scans
 *     every process (odpstat without -p) for 2 s: each context finds its
 *     own segment right after its open.
 *   - a segment in our descriptor table whose header names another PID (a
 *     descriptor passed or inherited): not listed as ours.
 *   - a raw clone() child (no fork handler runs: it keeps the descriptor of
 *     its parent's context): the context is listed for the parent and not
 *     for the child.
 *   - PID 1 of a PID namespace of its own: its segment is neither listed as
 *     our PID 1's nor under its PID here, and it still finds it itself.
 * The namespace case needs CAP_SYS_ADMIN (root: the suite runs as root
 * here); without it it skips, saying so.
 */
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "stats-forge.h"

/* Our segments named in /dev/shm */
static unsigned shm_files(void)
{
	char want[32];
	struct dirent *e;
	DIR *d = opendir("/dev/shm");
	unsigned n = 0;

	if (!d)
		return 0;
	snprintf(want, sizeof(want), ODPX_SHM_PREFIX "%d.", (int)getpid());
	while ((e = readdir(d)))
		n += !strncmp(e->d_name, want, strlen(want));
	closedir(d);
	return n;
}

static void cycles(unsigned n)
{
	char *p = map_anon(NULL, 4096);
	unsigned fds = 0;

	/* counted after the first: what odpx keeps once open (/proc/self/maps) stays */
	for (unsigned i = 0; i <= n; i++) {
		struct odpx_seg_info si[4];
		struct odpx_ctx *ctx;
		struct odpx_mr *mr;
		int k;

		CHECK_RC(odpx_open_uring(NULL, &ctx), 0);
		CHECK_RC(odpx_reg(ctx, p, 4096, 0, &mr), 0);
		CHECK_RC(odpx_dereg(ctx, mr), 0);
		k = odpx_seg_scan(getpid(), si, 4);
		CHECK(k == 1 && si[0].st.misses == 1 && seg_fds(getpid(), NULL, 0) == 1,
		      "context %u: %d segments found, %u memfds", i, k, seg_fds(getpid(), NULL, 0));
		CHECK(!shm_files(), "a segment named in /dev/shm");
		CHECK_RC(odpx_close(ctx), 0);
		if (i == 0)
			fds = count_fds();
	}
	CHECK(count_fds() == fds && !seg_fds(getpid(), NULL, 0),
	      "%u descriptors open after %u contexts, %u before", count_fds(), n, fds);
	printf("%u contexts opened and closed: each in a memfd of its own, no descriptor left\n", n);
}

static _Atomic int stop;

static void *scanner(void *arg)
{
	struct odpx_seg_info si[64];

	(void)arg;
	while (!atomic_load(&stop))
		odpx_seg_scan(0, si, 64);
	return NULL;
}

static void scan_while_opening(void)
{
	unsigned opens = 0, missing = 0;
	pthread_t t;

	CHECK(pthread_create(&t, NULL, scanner, NULL) == 0, "thread");
	for (double end = now_s() + 2; now_s() < end; opens++) {
		struct odpx_seg_info si[4];
		struct odpx_ctx *ctx;

		CHECK_RC(odpx_open_uring(NULL, &ctx), 0);
		missing += odpx_seg_scan(getpid(), si, 4) != 1;
		CHECK_RC(odpx_close(ctx), 0);
	}
	atomic_store(&stop, 1);
	pthread_join(t, NULL);
	CHECK(!missing, "%u of %u contexts did not find their segment", missing, opens);
	printf("scans beside %u opens: every context found its segment\n", opens);
}

/* A segment in our table that names our parent: not ours */
static void foreign_header(void)
{
	struct odpx_seg_info si[8];
	int mine = forge(getpid(), 776, 1), other = forge(getppid(), 777, 1), k;

	k = odpx_seg_scan(getpid(), si, 8);
	CHECK(k == 1 && si[0].n == 776, "a segment naming PID %d listed as ours (%d found)",
	      (int)getppid(), k);
	close(mine);
	close(other);
	printf("a segment naming another PID in our descriptor table: not listed\n");
}

static int child_waits(void *arg)
{
	int *hold = arg;
	char c;

	close(hold[1]);
	_exit(read(hold[0], &c, 1) < 0);
}

/* A raw clone() child keeps the context's descriptor: the context is not its */
static void clone_child(void)
{
	static char stack[64 << 10] __attribute__((aligned(16)));
	struct odpx_seg_info si[4];
	struct odpx_ctx *ctx;
	int hold[2], k, st;
	pid_t g;

	CHECK(pipe(hold) == 0, "pipe");
	CHECK_RC(odpx_open_uring(NULL, &ctx), 0);
	fflush(stdout);
	/* no CLONE_VM: the child runs on its copy of the stack; glibc's fork handlers do not run */
	g = clone(child_waits, stack + sizeof(stack), SIGCHLD, hold);
	CHECK(g > 0, "clone: %s", strerror(errno));
	CHECK(seg_fds(g, NULL, 0) == 1, "the clone() child holds %u segments, want its parent's",
	      seg_fds(g, NULL, 0));
	k = odpx_seg_scan(g, si, 4);
	CHECK(k == 0, "the clone() child: %d contexts listed, want 0", k);
	CHECK(odpx_seg_scan(getpid(), si, 4) == 1, "the parent's context beside its clone() child");
	close(hold[1]);
	CHECK(waitpid(g, &st, 0) == g && WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %#x", st);
	close(hold[0]);
	CHECK_RC(odpx_close(ctx), 0);
	printf("a raw clone() child holding its parent's segment: not listed as its\n");
}

/*
 * A process that is PID 1 of a PID namespace of its own (its own /proc, as
 * in a container) opens a context.  Scans from here, where PID 1 is another
 * process: its segment is neither listed as PID 1's nor under the PID it
 * has here (its header names 1), and it still finds it itself.
 */
static int pidns_case(void *arg)
{
	struct odpx_seg_info si[64];
	int up[2], down[2], st, all, one, here;
	unsigned n;
	char c;
	pid_t g;

	(void)arg;
	if (unshare(CLONE_NEWPID) < 0) {
		CHECK(errno == EPERM && geteuid() != 0, "unshare(CLONE_NEWPID): %s", strerror(errno));
		SKIP("unshare(CLONE_NEWPID): %s as uid %d: no PID namespace of our own",
		     strerror(errno), (int)geteuid());
	}
	CHECK(pipe(up) == 0 && pipe(down) == 0, "pipe");
	fflush(stdout);
	if (!(g = fork())) {
		struct odpx_ctx *ctx;
		struct odpx_mr *mr;
		char *p = map_anon(NULL, 4096);
		int k;

		close(up[0]);
		close(down[1]);	/* a parent that fails is an end of file here */
		/* its /proc in its own mounts: the parent's stays the one where it is g */
		CHECK(unshare(CLONE_NEWNS) == 0 &&
		      mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0 &&
		      mount("proc", "/proc", "proc", 0, NULL) == 0, "our own /proc: %s",
		      strerror(errno));
		CHECK(getpid() == 1, "not PID 1 in the new namespace");
		CHECK_RC(odpx_open_uring(NULL, &ctx), 0);
		CHECK_RC(odpx_reg(ctx, p, 4096, 0, &mr), 0);
		CHECK_RC(odpx_dereg(ctx, mr), 0);
		k = odpx_seg_scan(1, si, 4);
		CHECK(k == 1, "PID 1 of its namespace: %d segments of its own", k);
		CHECK(write(up[1], &si[0].n, sizeof(si[0].n)) == (ssize_t)sizeof(si[0].n), "n");
		if (read(down[0], &c, 1) != 1) {
			odpx_close(ctx);
			_exit(1);
		}
		k = odpx_seg_scan(1, si, 4);
		CHECK(k == 1 && si[0].st.misses == 1, "PID 1 of its namespace: its own segment"
		      " found %d times after the scans outside", k);
		CHECK_RC(odpx_close(ctx), 0);
		_exit(0);
	}
	close(up[1]);
	close(down[0]);
	CHECK(read(up[0], &n, sizeof(n)) == (ssize_t)sizeof(n), "the namespace's context is open");
	CHECK(seg_fds(g, NULL, 0) == 1, "the namespace's PID 1 (%d here) holds no segment", (int)g);
	all = odpx_seg_scan(0, si, 64);
	for (int i = 0; i < all; i++)
		CHECK(si[i].pid != 1 && si[i].pid != g, "another namespace's segment listed as %d's",
		      (int)si[i].pid);
	one = odpx_seg_scan(1, si, 64);
	here = odpx_seg_scan(g, si, 64);
	CHECK(one <= 0 && here == 0, "another namespace's segment listed: %d as PID 1's, %d as"
	      " PID %d's", one, here, (int)g);
	CHECK(write(down[1], "x", 1) == 1, "handshake");
	CHECK(waitpid(g, &st, 0) == g && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	      "the namespace's PID 1: status %#x", st);
	printf("a segment of PID 1 of another PID namespace: not listed here\n");
	fflush(stdout);
	return 0;
}

int main(void)
{
	int ns;

	cycles(100);
	scan_while_opening();
	foreign_header();
	clone_child();
	ns = run_forked(NULL, pidns_case, NULL);
	CHECK(ns == 0 || ns == 77, "PID namespace: %s %d", ns > 128 ? "signal" : "exit",
	      ns > 128 ? ns - 128 : ns);
	return ns;	/* 77: the rest passed */
}
