// SPDX-License-Identifier: MIT
/*
 * stats-seglife: a segment lives exactly as long as its writer holds it.
 *   - a process that opened a context is stopped (SIGSTOP): its context is
 *     still listed.  Continued, it exec()s /bin/sleep: its segment is gone
 *     from its descriptor table at once, to odpx_seg_scan and to odpstat -p.
 *   - a fork child that never calls odpx holds nothing of its parent's
 *     segment, neither the descriptor nor a shared mapping of it: the
 *     parent's context stays listed beside the child, and once the parent
 *     has died without closing it, nothing anywhere lists it while the
 *     child still runs.
 */
#include "stats-forge.h"

/* What `odpstat -p @pid --json --once` prints, into @out. */
static void odpstat_p(pid_t pid, char *out, size_t cap)
{
	char cmd[4400];
	size_t m;
	FILE *p;

	snprintf(cmd, sizeof(cmd), "%s -p %d --json --no-netlink --once 0.05", odpstat_path(),
		 (int)pid);
	CHECK((p = popen(cmd, "r")), "popen");
	m = fread(out, 1, cap - 1, p);
	out[m] = 0;
	CHECK(pclose(p) == 0, "odpstat failed: %s", out);
}

static void stop_then_exec(void)
{
	struct odpx_seg_info si[4];
	char c, out[1 << 16];
	int up[2], go[2], k, st;
	pid_t g;

	/* up: written once opened, closed by the exec (close-on-exec) */
	CHECK(pipe2(up, O_CLOEXEC) == 0 && pipe(go) == 0, "pipe");
	fflush(stdout);
	if (!(g = fork())) {
		struct odpx_ctx *ctx;

		close(up[0]);
		close(go[1]);
		CHECK_RC(odpx_open_uring(NULL, &ctx), 0);
		CHECK(write(up[1], "o", 1) == 1, "up");
		CHECK(read(go[0], &c, 1) == 1, "go");
		execl("/bin/sleep", "sleep", "60", (char *)NULL);
		_exit(127);
	}
	close(up[1]);
	close(go[0]);
	CHECK(read(up[0], &c, 1) == 1, "the child's context is open");
	CHECK(kill(g, SIGSTOP) == 0 && waitpid(g, &st, WUNTRACED) == g && WIFSTOPPED(st),
	      "stop the child: %#x", st);
	k = odpx_seg_scan(g, si, 4);
	CHECK(k == 1, "a stopped process: %d contexts, want 1", k);
	CHECK(kill(g, SIGCONT) == 0, "SIGCONT");
	CHECK(write(go[1], "x", 1) == 1, "go");
	CHECK(read(up[0], &c, 1) == 0, "no end of file: no exec");
	CHECK(waitpid(g, &st, WNOHANG) == 0, "the child ended: %#x (no /bin/sleep?)", st);

	k = odpx_seg_scan(g, si, 4);
	CHECK(k == 0 && !seg_fds(g, NULL, 0), "after the exec: %d contexts of process %d, want 0",
	      k, (int)g);
	odpstat_p(g, out, sizeof(out));
	CHECK(strstr(out, "\"contexts\":[]"), "odpstat -p after the exec: %.300s",
	      strstr(out, "\"contexts\"") ? strstr(out, "\"contexts\"") : out);
	kill(g, SIGKILL);
	CHECK(waitpid(g, &st, 0) == g, "waitpid");
	close(up[0]);
	close(go[1]);
	printf("a stopped process's context: listed; after exec(): gone, to the scan and to"
	       " odpstat -p\n");
}

/* Whether @pid maps a memfd segment (its /proc/<pid>/maps names "memfd:odpx.") */
static bool maps_segment(pid_t pid)
{
	char path[64], line[512];
	bool found = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	CHECK((f = fopen(path, "r")), "%s: %s", path, strerror(errno));
	while (fgets(line, sizeof(line), f))
		found |= strstr(line, "/memfd:" ODPX_SHM_PREFIX) != NULL;
	fclose(f);
	return found;
}

static void fork_child_holds_nothing(void)
{
	struct odpx_seg_info si[64];
	char c;
	int up[2], hold[2], st, k;
	pid_t p, g;

	CHECK(pipe(up) == 0 && pipe(hold) == 0, "pipe");
	fflush(stdout);
	if (!(p = fork())) {
		struct odpx_ctx *ctx;
		int ready[2];

		close(up[0]);
		CHECK(pipe(ready) == 0, "pipe");
		CHECK_RC(odpx_open_uring(NULL, &ctx), 0);
		if (!(g = fork())) {	/* never calls odpx: waits for the end of hold */
			close(hold[1]);
			/* the fork handlers have run: say so */
			if (write(ready[1], "r", 1) != 1)
				_exit(1);
			_exit(read(hold[0], &c, 1) < 0);
		}
		CHECK(read(ready[0], &c, 1) == 1, "the fork child is running");
		CHECK(odpx_seg_scan(getpid(), si, 4) == 1, "the parent's context beside its child");
		CHECK(!seg_fds(g, NULL, 0) && !maps_segment(g),
		      "the fork child holds its parent's segment: %u descriptors, %s", seg_fds(g, NULL, 0),
		      maps_segment(g) ? "mapped" : "not mapped");
		CHECK(maps_segment(getpid()), "the parent does not map its segment");
		CHECK(write(up[1], &g, sizeof(g)) == (ssize_t)sizeof(g), "up");
		_exit(0);	/* dies with its context open */
	}
	close(up[1]);
	close(hold[0]);
	CHECK(read(up[0], &g, sizeof(g)) == (ssize_t)sizeof(g), "the parent's context is open");
	CHECK(waitpid(p, &st, 0) == p && WIFEXITED(st) && WEXITSTATUS(st) == 0, "parent %#x", st);
	CHECK(kill(g, 0) == 0, "the fork child is gone");
	k = odpx_seg_scan(0, si, 64);
	for (int i = 0; i < k; i++)
		CHECK(si[i].pid != p && si[i].pid != g, "a context of process %d listed after its"
		      " writer died", (int)si[i].pid);
	CHECK(!seg_fds(g, NULL, 0), "the fork child holds a segment");
	close(hold[1]);	/* the child ends */
	close(up[0]);
	printf("a fork child holds none of its parent's segment\n");
}

int main(void)
{
	stop_then_exec();
	fork_child_holds_nothing();
	return 0;
}
