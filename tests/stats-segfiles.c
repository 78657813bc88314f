// SPDX-License-Identifier: MIT
/*
 * stats-segfiles: what others can leave under the segment names in
 * /dev/shm neither stops a context nor is read as a segment.
 *   - a FIFO (another user's, when we are root) at the very name a process
 *     will give its first segment: odpx_open() in that process returns, and
 *     its counters are still found.  The open of the old file, to read its
 *     header, waited for a writer forever.
 *   - a segment whose shard or cold-counter offset is not aligned for its
 *     struct (shards_off 4097): rejected, -EPROTO, where the same segment
 *     with aligned offsets is read.  It was read, through misaligned loads.
 *   - odpstat -p of a process with 65 contexts reads all of them (it read
 *     64), and a 66th first seen during the run adds no rate that interval.
 *   - a context that takes the name of one gone before it (pid.0 again,
 *     after an exec()) is a new context to odpstat: it adds no rate in the
 *     interval where it is first seen.  Its counts were taken as the old
 *     one's grown.
 * Everything runs in a mount namespace of its own with a tmpfs on /dev/shm;
 * without the privilege for one it skips, saying so.
 */
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "stats-forge.h"

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

/*
 * A process of ours that lives until @hold[1] closes.  Close-on-exec: an
 * odpstat started meanwhile must not hold it, or a failed case would leave
 * the two waiting for each other for ever (odpstat -p ends with the holder).
 */
static pid_t holder(int hold[2])
{
	pid_t g;
	char c;

	CHECK(pipe2(hold, O_CLOEXEC) == 0, "pipe");
	fflush(stdout);
	if (!(g = fork())) {
		close(hold[1]);
		_exit(read(hold[0], &c, 1) < 0);
	}
	close(hold[0]);
	return g;
}

static void holder_end(pid_t g, int hold[2])
{
	int st;

	close(hold[1]);
	CHECK(waitpid(g, &st, 0) == g && WIFEXITED(st) && WEXITSTATUS(st) == 0, "holder %#x", st);
}

static int count_of(const char *s, const char *what)
{
	int n = 0;

	for (; (s = strstr(s, what)); s++)
		n++;
	return n;
}

static void misaligned(void)
{
	struct odpx_seg_info si[4];
	char path[64];
	int hold[2], k, fd;
	pid_t g = holder(hold);	/* a live process of ours for the segments to name */

	forge_path(path, sizeof(path), g, 0);
	fd = forge(g, 0, 1);
	k = odpx_seg_scan(g, si, 4);
	CHECK(k == 1, "a well-formed forged segment: %d found (the forgery is wrong)", k);
	close(fd);
	fd = forge_at(g, 0, SEG_HDR_BYTES + 1, SEG_COLD_OFF + 8, 1);
	k = odpx_seg_scan(g, si, 4);
	CHECK(k == -EPROTO, "shards_off %u: odpx_seg_scan %d, want -EPROTO", SEG_HDR_BYTES + 1, k);
	close(fd);
	fd = forge_at(g, 0, SEG_HDR_BYTES, SEG_COLD_OFF + 4, 1);
	k = odpx_seg_scan(g, si, 4);
	CHECK(k == -EPROTO, "cold_off %u: odpx_seg_scan %d, want -EPROTO", SEG_COLD_OFF + 4, k);
	close(fd);
	unlink(path);
	holder_end(g, hold);
	printf("segments with misaligned offsets: rejected (-EPROTO)\n");
}

/* odpstat -p @g, JSON lines every 0.1 s, at most 100; its output in *@f */
static pid_t odpstat_follow(pid_t g, FILE **f)
{
	char *odpstat = odpstat_path(), spid[16];
	int out[2];
	pid_t sp;

	snprintf(spid, sizeof(spid), "%d", (int)g);
	CHECK(pipe(out) == 0, "pipe");
	fflush(stdout);
	if (!(sp = fork())) {
		dup2(out[1], 1);
		execl(odpstat, odpstat, "-p", spid, "--json", "--no-netlink", "0.1", "100", NULL);
		_exit(127);
	}
	close(out[1]);
	CHECK((*f = fdopen(out[0], "r")), "fdopen");
	return sp;
}

/* The hits/s of odpstat's JSON @line, as printed */
static const char *hits_of(const char *line)
{
	const char *hits = strstr(line, "\"rates\":{\"hits\":");

	CHECK(hits, "no rates in odpstat's line: %.200s", line);
	return hits + strlen("\"rates\":{\"hits\":");
}

/*
 * odpstat -p of a process with 65 contexts (forged, 10^9 hits each, none
 * counting): all 65 in every line, and a 66th that appears during the run
 * adds no rate in the interval where it is first seen.  odpstat read 64,
 * and a context it had not seen before counted its 10^9 hits as new.
 */
static void many_contexts(void)
{
	char *line = NULL;
	int hold[2], rows = 0, seen_new = 0, fds[66];
	pid_t g = holder(hold), sp;
	size_t cap = 0;
	FILE *f;

	for (unsigned i = 0; i < 65; i++)
		fds[i] = forge(g, i, 1000000000);
	sp = odpstat_follow(g, &f);
	/* until the 66th has been seen in two lines: a deadline of 100 lines */
	while (seen_new < 2 && getline(&line, &cap, f) > 0) {
		int ctxs = count_of(line, "\"ctx\":");
		const char *hits = hits_of(line);

		CHECK(ctxs == 66 || (ctxs == 65 && !seen_new), "line %d: %d contexts, want %s",
		      rows + 1, ctxs, seen_new ? "66" : "65 or 66");
		CHECK(!strncmp(hits, "0.000,", 6), "line %d, %d contexts: %.30s hits/s from"
		      " contexts none of which counts", rows + 1, ctxs, hits);
		seen_new += ctxs == 66;
		if (++rows == 1)
			fds[65] = forge(g, 65, 1000000000);
	}
	kill(sp, SIGTERM);
	waitpid(sp, NULL, 0);
	fclose(f);
	free(line);
	CHECK(seen_new == 2, "the 66th context not in 2 of odpstat's %d lines", rows);
	for (unsigned i = 0; i < 66; i++) {
		char path[64];
		forge_path(path, sizeof(path), g, i);
		unlink(path);
		close(fds[i]);
	}
	holder_end(g, hold);
	printf("odpstat -p of a process with 65 contexts: all read; a 66th first seen adds"
	       " no rate\n");
}

/*
 * odpstat -p of a process whose context pid.0 (10^9 hits) is replaced by
 * another of the same name (2 * 10^9 hits), as a process that exec()s and
 * opens a context again: the name is renamed over the old file (odpstat
 * never finds it missing), then the old writer lets go of its lock.  No
 * line may show a rate: neither context counts while odpstat runs.
 */
static void name_reused(void)
{
	char path[64], *line = NULL;
	int hold[2], rows = 0, after = 0, old_fd, new_fd = -1;
	pid_t g = holder(hold), sp;
	size_t cap = 0;
	FILE *f;

	old_fd = forge(g, 0, 1000000000);
	sp = odpstat_follow(g, &f);
	while (after < 3 && getline(&line, &cap, f) > 0) {
		const char *hits = hits_of(line);

		CHECK(count_of(line, "\"ctx\":") == 1, "line %d: %d contexts, want 1", rows + 1,
		      count_of(line, "\"ctx\":"));
		CHECK(!strncmp(hits, "0.000,", 6), "line %d (%s the name was taken again): %.30s"
		      " hits/s from contexts neither of which counts", rows + 1,
		      new_fd < 0 ? "before" : "after", hits);
		after += new_fd >= 0;
		if (++rows == 1) {
			new_fd = forge(g, 0, 2000000000);	/* renamed over pid.0 */
			close(old_fd);				/* its writer exec()ed */
		}
	}
	kill(sp, SIGTERM);
	waitpid(sp, NULL, 0);
	fclose(f);
	free(line);
	CHECK(after == 3, "only %d of odpstat's lines after the name was taken again", after);
	forge_path(path, sizeof(path), g, 0);
	unlink(path);
	close(new_fd);
	holder_end(g, hold);
	printf("a context that takes a gone one's name is new to odpstat: no rate\n");
}

static int cases(void)
{
	fifo_at_our_name();
	misaligned();
	many_contexts();
	name_reused();
	return 0;
}

int main(void)
{
	return run_in_private_shm(cases);
}
