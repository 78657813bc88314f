// SPDX-License-Identifier: MIT
/*
 * stats-shm: the statistics segment never costs an open that could work,
 * and odpstat's reading of segments neither removes nor believes what it
 * must not.
 *   - /dev/shm full (a 64 KiB tmpfs, filled): 100 contexts open, register
 *     and close; each segment falls back to a memfd that odpstat still
 *     finds.  The segment's pages were not allocated at its creation, and
 *     the first store into them was a SIGBUS inside odpx_open.
 *   - /dev/shm read-only: the same, and the descriptors open before are
 *     all that is open after: the memfd of each was never closed (one
 *     leaked per context, and odpx_open failed at the descriptor limit).
 *   - a context opening and closing in a loop while another thread scans
 *     the segments (odpstat's path) for 2 s: each context finds its own
 *     segment right after the open.  A scan took a file being created
 *     (named, not yet sized) for a stale one and unlinked it.
 *   - a segment file for this process's PID owned by another user (a copy
 *     of a real one, chowned to nobody): odpx_seg_scan(pid) does not list
 *     it.  It was listed, forged counters and all.
 *   - PID 1 of a PID namespace of its own, sharing /dev/shm: its segment is
 *     neither listed as our PID 1's nor removed by our scans (it was removed
 *     as stale), and it still finds it itself.
 * The namespace cases need CAP_SYS_ADMIN (root: the suite runs as root
 * here); without it they skip, saying so.
 */
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "test.h"
#include "../sysfs-stats/counters.h"

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

static void cycles(const char *what, unsigned n)
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
		if (i == 0) {
			k = odpx_seg_scan(getpid(), si, 4);
			CHECK(k == 1 && si[0].st.misses == 1, "%s: odpstat finds %d segments"
			      " (want 1, through its memfd)", what, k);
		}
		CHECK_RC(odpx_close(ctx), 0);
		if (i == 0)
			fds = count_fds();
	}
	CHECK(count_fds() == fds, "%s: %u descriptors open after %u contexts, %u before", what,
	      count_fds(), n, fds);
	CHECK(shm_files() == 0, "%s: a segment named in /dev/shm", what);
	printf("%s: %u contexts opened and closed, segments in memfds, no descriptor left\n",
	       what, n);
}

/* /dev/shm replaced by a tmpfs of ours: @ro read-only, else full */
static int shm_case(void *arg)
{
	bool ro = arg != NULL;
	char buf[4096] = { 1 };
	int fd;

	private_shm(ro ? MS_RDONLY : 0, "size=64k");
	if (!ro) {
		fd = open("/dev/shm/fill", O_WRONLY | O_CREAT | O_TRUNC, 0600);
		CHECK(fd >= 0, "fill: %s", strerror(errno));
		while (write(fd, buf, sizeof(buf)) == (ssize_t)sizeof(buf))
			;
		CHECK(errno == ENOSPC, "filling /dev/shm: %s", strerror(errno));
		close(fd);
	}
	cycles(ro ? "/dev/shm read-only" : "/dev/shm full", 100);
	fflush(stdout);
	return 0;
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
		struct odpx_ctx *ctx;

		CHECK_RC(odpx_open_uring(NULL, &ctx), 0);
		missing += shm_files() != 1;
		CHECK_RC(odpx_close(ctx), 0);
	}
	atomic_store(&stop, 1);
	pthread_join(t, NULL);
	CHECK(!missing, "%u of %u contexts lost their segment to a scan", missing, opens);
	printf("scans beside %u opens: every segment stayed\n", opens);
}

/* Returns false when it could not run: another user's file needs root's chown */
static bool foreign_owner(void)
{
	struct odpx_seg_info si[8];
	struct odpx_ctx *ctx;
	char src[96], dst[96], buf[65536];
	ssize_t n;
	int in, out, k;

	CHECK_RC(odpx_open_uring(NULL, &ctx), 0);
	CHECK(odpx_seg_scan(getpid(), si, 8) == 1, "our own segment");
	snprintf(src, sizeof(src), "/dev/shm/" ODPX_SHM_PREFIX "%d.%u", (int)getpid(), si[0].n);
	snprintf(dst, sizeof(dst), "/dev/shm/" ODPX_SHM_PREFIX "%d.%u", (int)getpid(), 777u);
	in = open(src, O_RDONLY);
	out = open(dst, O_WRONLY | O_CREAT | O_EXCL, 0644);
	CHECK(in >= 0 && out >= 0, "copy %s: %s", src, strerror(errno));
	while ((n = read(in, buf, sizeof(buf))) > 0)
		CHECK(write(out, buf, (size_t)n) == n, "write");
	close(in);
	close(out);
	if (geteuid() != 0) {
		unlink(dst);
		CHECK_RC(odpx_close(ctx), 0);
		return false;
	}
	CHECK(chown(dst, 65534, 65534) == 0, "chown: %s", strerror(errno));
	k = odpx_seg_scan(getpid(), si, 8);
	unlink(dst);
	CHECK(k == 1 && si[0].n != 777, "a segment of another user listed for our PID (%d found)",
	      k);
	CHECK_RC(odpx_close(ctx), 0);
	printf("a segment of another user under our PID: not listed\n");
	return true;
}

/*
 * A process that is PID 1 of a PID namespace of its own (its own /proc, the
 * same /dev/shm, as in a container run with the host's IPC) opens a
 * context.  Scans from here, where PID 1 is another process: its segment is
 * neither listed as PID 1's nor removed, and it still finds it itself.  It
 * was removed as stale (PID 1 here has another start time).
 */
static int pidns_case(void *arg)
{
	int up[2], down[2], st;
	char c, path[300];
	unsigned n;
	pid_t g;

	(void)arg;
	if (unshare(CLONE_NEWPID | CLONE_NEWNS) < 0) {
		CHECK(errno == EPERM && geteuid() != 0, "unshare(CLONE_NEWPID): %s", strerror(errno));
		SKIP("unshare(CLONE_NEWPID): %s as uid %d: no PID namespace of our own",
		     strerror(errno), (int)geteuid());
	}
	CHECK(pipe(up) == 0 && pipe(down) == 0, "pipe");
	fflush(stdout);
	if (!(g = fork())) {
		struct odpx_seg_info si[4];
		struct odpx_ctx *ctx;
		struct odpx_mr *mr;
		char *p = map_anon(NULL, 4096);
		int k;

		close(up[0]);
		close(down[1]);	/* a parent that fails is an end of file here */
		CHECK(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0 &&
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
			odpx_close(ctx);	/* the parent failed: no segment left behind */
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
	snprintf(path, sizeof(path), "/dev/shm/" ODPX_SHM_PREFIX "1.%u", n);
	CHECK(access(path, F_OK) == 0, "%s: no segment of the namespace's PID 1", path);
	struct odpx_seg_info si[64];
	int all = odpx_seg_scan(0, si, 64), one = odpx_seg_scan(1, si, 64);
	for (int i = 0; i < all; i++)
		CHECK(si[i].pid != 1, "another namespace's segment listed as our PID 1's");
	CHECK(one <= 0, "odpx_seg_scan(1) listed %d segments of another namespace", one);
	CHECK(access(path, F_OK) == 0, "%s, of another PID namespace, removed by a scan", path);
	CHECK(write(down[1], "x", 1) == 1, "handshake");
	CHECK(waitpid(g, &st, 0) == g && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	      "the namespace's PID 1: status %#x", st);
	printf("a segment of PID 1 of another PID namespace: not listed, not removed\n");
	fflush(stdout);
	return 0;
}

int main(void)
{
	int full, ro, ns;
	bool foreign;

	full = run_forked(NULL, shm_case, NULL);
	CHECK(full == 0 || full == 77, "/dev/shm full: %s %d", full > 128 ? "signal" : "exit",
	      full > 128 ? full - 128 : full);
	ro = run_forked(NULL, shm_case, (void *)1);
	CHECK(ro == 0 || ro == 77, "/dev/shm read-only: %s %d", ro > 128 ? "signal" : "exit",
	      ro > 128 ? ro - 128 : ro);
	scan_while_opening();
	foreign = foreign_owner();
	ns = run_forked(NULL, pidns_case, NULL);
	CHECK(ns == 0 || ns == 77, "PID namespace: %s %d", ns > 128 ? "signal" : "exit",
	      ns > 128 ? ns - 128 : ns);
	if (full == 77 || ro == 77 || ns == 77 || !foreign)	/* the rest passed */
		SKIP("the namespace cases and another user's file need root here");
	return 0;
}
