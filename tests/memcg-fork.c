/* SPDX-License-Identifier: MIT */
/*
 * memcg-fork: fork() while another thread reads the memory cgroup.
 *
 * The process sits in a memory cgroup of its own with a limit (memcg-test.h),
 * where every reading of the headroom holds the library's memcg lock while it
 * reads memory.current and memory.stat.  A thread reads the headroom in a
 * loop; the main thread forks FORKS children, each of which reads the
 * headroom and exits (no thread: TSan cannot follow threads started in the
 * child of a threaded process).  A child
 * forked while the reader held the lock would wait for it forever unless the
 * lock is held across fork() (ctx.c's handlers): each child has DEADLINE_S
 * to exit, and one that does not is killed and fails the test.
 *
 * Skips where no memory cgroup of our own can be made (not root, no memory
 * controller to give), with the reason.
 */
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>

#include "memcg-test.h"

#define FORKS 100
#define DEADLINE_S 10
#define LIMIT (2ULL << 30)	/* any limit: ASan's quarantine alone takes 256 MiB */

static _Atomic int stop;
static _Atomic unsigned long readings;

static void *reader(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop)) {
		uint64_t room;

		CHECK(memcg_headroom(0, &room, NULL) == 0, "memcg_headroom in the parent");
		atomic_fetch_add(&readings, 1);
	}
	return NULL;
}

/* What a fork child of a process with contexts does first: read the cgroup. */
static int child(void)
{
	uint64_t room;

	return memcg_headroom(0, &room, NULL) < 0 ? 2 : 0;
}

/* The child's status, or -1 after killing one still running at the deadline. */
static int wait_child(pid_t pid)
{
	for (int ms = 0; ms < DEADLINE_S * 1000; ms += 5) {
		int st;
		pid_t r = waitpid(pid, &st, WNOHANG);

		CHECK(r >= 0, "waitpid: %s", strerror(errno));
		if (r == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		usleep(5000);
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	return -1;
}

static char cg[PATH_MAX];

static int body(void *arg)
{
	struct odpx_ctx *ctx;
	struct memcg_view v;
	pthread_t t;
	uint64_t room;

	(void)arg;
	memcg_test_enter(cg);
	/* the library's fork handlers are installed at the first open */
	CHECK_RC(odpx_open_uring(NULL, &ctx), 0);
	CHECK_RC(memcg_headroom(0, &room, &v), 0);
	CHECK(v.limit_bytes == LIMIT, "the cgroup's limit read as %" PRIu64, v.limit_bytes);
	CHECK(pthread_create(&t, NULL, reader, NULL) == 0, "pthread_create");
	for (int i = 0; i < FORKS; i++) {
		fflush(NULL);
		pid_t pid = fork();

		CHECK(pid >= 0, "fork: %s", strerror(errno));
		if (pid == 0)
			_exit(child());
		int rc = wait_child(pid);
		CHECK(rc != -1, "fork %d: the child did not exit within %d s (a lock held "
		      "across fork() by the reading thread?)", i, DEADLINE_S);
		CHECK(rc == 0, "fork %d: the child exited with %d", i, rc);
	}
	atomic_store(&stop, 1);
	pthread_join(t, NULL);
	printf("%d children forked during %lu readings of the cgroup, each exited\n", FORKS,
	       atomic_load(&readings));
	CHECK_RC(odpx_close(ctx), 0);
	return 0;
}

int main(void)
{
	unsetenv("ODPX_MODE");
	if (!memcg_test_make(cg, sizeof(cg), LIMIT))
		SKIP("no memory cgroup of our own to limit");
	int rc = run_forked(NULL, body, NULL);
	rmdir(cg);
	if (rc) {
		printf("FAIL: the test's process %s %d\n", rc > 128 ? "was killed by signal" :
		       "exited with", rc > 128 ? rc - 128 : rc);
		return 1;
	}
	printf("PASS\n");
	return 0;
}
