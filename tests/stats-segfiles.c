// SPDX-License-Identifier: MIT
/*
 * stats-segfiles: what others can leave under the segment names in
 * /dev/shm neither stops a context nor is read as a segment.
 *   - a FIFO (another user's, when we are root) at the very name a process
 *     will give its first segment: odpx_open() in that process returns, and
 *     its counters are still found.  The open of the old file, to read its
 *     header, waited for a writer forever.
 * Everything runs in a mount namespace of its own with a tmpfs on /dev/shm;
 * without the privilege for one it skips, saying so.
 */
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "test.h"
#include "internal.h"
#include "../sysfs-stats/counters.h"

static void fifo_at_our_name(void)
{
	char path[64], c;
	int go[2], st;
	pid_t g;

	CHECK(pipe(go) == 0, "pipe");
	fflush(stdout);
	if (!(g = fork())) {
		struct odpx_seg_info si[4];
		struct odpx_ctx *ctx;
		struct odpx_mr *mr;
		char *p = map_anon(NULL, 4096);
		int k;

		close(go[1]);
		CHECK(read(go[0], &c, 1) == 1, "the FIFO is planted");
		alarm(10);	/* a deadline: SIGALRM ends a process stuck in the open */
		CHECK_RC(odpx_open_uring(NULL, &ctx), 0);
		alarm(0);
		CHECK_RC(odpx_reg(ctx, p, 4096, 0, &mr), 0);
		CHECK_RC(odpx_dereg(ctx, mr), 0);
		k = odpx_seg_scan(getpid(), si, 4);
		CHECK(k == 1 && si[0].st.misses == 1, "after a FIFO at its name: %d segments", k);
		CHECK_RC(odpx_close(ctx), 0);
		_exit(0);
	}
	close(go[0]);
	/* no context opened in this process before the fork: the child's first is <n> 0 */
	snprintf(path, sizeof(path), "/dev/shm/" ODPX_SHM_PREFIX "%d.0", (int)g);
	CHECK(mkfifo(path, 0666) == 0, "mkfifo %s: %s", path, strerror(errno));
	if (geteuid() == 0)
		CHECK(chown(path, 65534, 65534) == 0, "chown: %s", strerror(errno));
	CHECK(write(go[1], "x", 1) == 1, "go");
	CHECK(waitpid(g, &st, 0) == g, "waitpid");
	CHECK(!(WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM),
	      "odpx_open still blocked after 10 s on a FIFO at %s", path);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child: status %#x", st);
	close(go[1]);
	unlink(path);
	printf("a FIFO at a context's segment name: the open returned, counters found\n");
}

static int private_shm(void *arg)
{
	(void)arg;
	if (unshare(CLONE_NEWNS) < 0) {	/* only the lack of privilege is a reason to skip */
		CHECK(errno == EPERM && geteuid() != 0, "unshare(CLONE_NEWNS): %s", strerror(errno));
		SKIP("unshare(CLONE_NEWNS): %s as uid %d: no private mount of /dev/shm",
		     strerror(errno), (int)geteuid());
	}
	CHECK(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0, "private mounts: %s",
	      strerror(errno));
	CHECK(mount("odpx-test", "/dev/shm", "tmpfs", 0, "mode=1777") == 0,
	      "mount tmpfs on /dev/shm: %s", strerror(errno));
	fifo_at_our_name();
	fflush(stdout);
	return 0;
}

int main(void)
{
	int r = run_forked(NULL, private_shm, NULL);

	CHECK(r == 0 || r == 77, "%s %d", r > 128 ? "signal" : "exit", r > 128 ? r - 128 : r);
	return r;
}
