// SPDX-License-Identifier: MIT
/*
 * stats-seglock: a segment's writer is alive while it holds the segment's
 * OFD lock, whatever its PID says.
 *   - a process that opened a context, then exec()ed /bin/sleep: its
 *     segment is no context any more, to odpx_seg_scan and to odpstat -p,
 *     and the scan removes it.  It was listed, as a context of the new
 *     program (same PID, same start time), until the process ended.
 *   - a segment naming a live PID (ours, with our start time) whose lock no
 *     one holds, as when its writer died and the PID went to another
 *     process: not listed; removed by a scan, and by odpx_seg_clean_stale.
 *     The scan listed it, and odpx_seg_clean_stale kept it.  With its lock
 *     held, the same segment is listed and kept.
 *   - a fork child that never calls odpx keeps no segment of its parent
 *     alive (it inherits the descriptor that holds the lock): the parent's
 *     context stays listed beside the child, and once the parent has died
 *     without closing it, odpx_seg_clean_stale removes it while the child
 *     still runs.
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

static void exec_drops_context(void)
{
	struct odpx_seg_info si[4];
	char path[64], c, out[1 << 16];
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
	k = odpx_seg_scan(g, si, 4);
	CHECK(k == 1, "before the exec: %d contexts, want 1", k);
	forge_path(path, sizeof(path), g, si[0].n);
	CHECK(write(go[1], "x", 1) == 1, "go");
	CHECK(read(up[0], &c, 1) == 0, "no end of file: no exec");
	CHECK(waitpid(g, &st, WNOHANG) == 0, "the child ended: %#x (no /bin/sleep?)", st);

	/* the lock goes with the old image's last file reference: soon, not at once */
	CHECK(WAIT_FOR((k = odpx_seg_scan(g, si, 4)) == 0, 10),
	      "after the exec: %d contexts of process %d, want 0", k, (int)g);
	CHECK(access(path, F_OK) != 0, "%s: left after the exec and a scan", path);
	odpstat_p(g, out, sizeof(out));
	CHECK(strstr(out, "\"contexts\":[]"), "odpstat -p after the exec: %.300s",
	      strstr(out, "\"contexts\"") ? strstr(out, "\"contexts\"") : out);
	kill(g, SIGKILL);
	CHECK(waitpid(g, &st, 0) == g, "waitpid");
	close(up[0]);
	close(go[1]);
	printf("a context before exec(): gone after it, to the scan and to odpstat -p\n");
}

/* Whether a scan of our PID lists segment @n. */
static bool listed(unsigned n)
{
	struct odpx_seg_info si[16];
	int k = odpx_seg_scan(getpid(), si, 16);

	CHECK(k >= 0, "odpx_seg_scan: %d", k);
	for (int i = 0; i < k; i++)
		if (si[i].n == n)
			return true;
	return false;
}

static void pid_reused(void)
{
	const unsigned n = 900;	/* this process opens no context of its own */
	char path[64];
	int fd;

	forge_path(path, sizeof(path), getpid(), n);
	fd = forge(getpid(), n, 5);
	CHECK(listed(n), "a segment naming us, locked: not listed");
	odpx_seg_clean_stale();
	CHECK(access(path, F_OK) == 0, "a segment whose lock is held: removed as stale");
	close(fd);	/* its writer is gone; its PID, ours, lives on */
	CHECK(!listed(n), "a segment no one holds, naming a live PID: listed");
	CHECK(access(path, F_OK) != 0, "a segment no one holds: kept by the scan");

	close(forge(getpid(), n, 5));
	odpx_seg_clean_stale();
	CHECK(access(path, F_OK) != 0, "a segment no one holds: kept by odpx_seg_clean_stale");
	printf("a segment whose writer is gone, its PID alive: not listed, removed\n");
}

static void fork_child_holds_nothing(void)
{
	char path[64], c;
	int up[2], hold[2], st;
	pid_t p, g;
	unsigned n;

	CHECK(pipe(up) == 0 && pipe(hold) == 0, "pipe");
	fflush(stdout);
	if (!(p = fork())) {
		struct odpx_ctx *ctx;
		struct odpx_seg_info si[4];

		close(up[0]);
		CHECK_RC(odpx_open_uring(NULL, &ctx), 0);
		if (!(g = fork())) {	/* never calls odpx: waits for the end of hold */
			close(hold[1]);
			_exit(read(hold[0], &c, 1) < 0);
		}
		CHECK(odpx_seg_scan(getpid(), si, 4) == 1, "the parent's context beside its child");
		CHECK(write(up[1], &g, sizeof(g)) == (ssize_t)sizeof(g) &&
		      write(up[1], &si[0].n, sizeof(n)) == (ssize_t)sizeof(n), "up");
		_exit(0);	/* dies with its context open */
	}
	close(up[1]);
	close(hold[0]);
	CHECK(read(up[0], &g, sizeof(g)) == (ssize_t)sizeof(g) &&
	      read(up[0], &n, sizeof(n)) == (ssize_t)sizeof(n), "the parent's context is open");
	CHECK(waitpid(p, &st, 0) == p && WIFEXITED(st) && WEXITSTATUS(st) == 0, "parent %#x", st);
	forge_path(path, sizeof(path), p, n);
	CHECK(access(path, F_OK) == 0, "%s: no segment left by the dead parent", path);
	CHECK(kill(g, 0) == 0, "the fork child is gone");
	CHECK(WAIT_FOR((odpx_seg_clean_stale(), access(path, F_OK) != 0), 10),
	      "%s: kept alive by a fork child that never used odpx", path);
	close(hold[1]);	/* the child ends */
	close(up[0]);
	printf("a fork child holds none of its parent's segments\n");
}

static int cases(void)
{
	exec_drops_context();
	pid_reused();
	fork_child_holds_nothing();
	return 0;
}

/* alone in /dev/shm: another odpx process's cleaner would remove what a reader must judge */
int main(void)
{
	return run_in_private_shm(cases);
}
