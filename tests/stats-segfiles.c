// SPDX-License-Identifier: MIT
/*
 * stats-segfiles: what a descriptor table may hold beside segments is not
 * read as one, and odpstat follows a process's segments as they come and go.
 *   - a FIFO opened at "/memfd:odpx.<pid>.0" and removed, whose link in
 *     /proc/<pid>/fd reads as a segment's: odpx_seg_scan() returns, and the
 *     segment beside it is found.  Opening it without O_NONBLOCK waits for
 *     a writer forever.  (Root only: it needs a FIFO in /.)
 *   - a segment of another layout (another version, a page more or less):
 *     rejected, -EPROTO, where the same segment of this layout is read.
 *   - odpstat -p of a process with 65 contexts reads all of them (it read
 *     64), and a 66th first seen during the run adds no rate that interval.
 *   - a context that takes the name of one gone before it (pid.0 again,
 *     after an exec()) is a new context to odpstat: it adds no rate in the
 *     interval where it is first seen.  Its counts were taken as the old
 *     one's grown.
 * The segments are forged in this process's own descriptor table.
 */
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "stats-forge.h"

/* false: not run, for want of root */
static bool fifo_at_a_segment_link(void)
{
	struct odpx_seg_info si[4];
	char path[64];
	int fifo, seg, k;

	snprintf(path, sizeof(path), "/memfd:" ODPX_SHM_PREFIX "%d.0", (int)getpid());
	if (mkfifo(path, 0600) < 0) {
		CHECK(errno == EACCES && geteuid() != 0, "mkfifo %s: %s", path, strerror(errno));
		printf("mkfifo %s: %s as uid %d: the FIFO case not run\n", path, strerror(errno),
		       (int)geteuid());
		return false;
	}
	fifo = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
	unlink(path);
	CHECK(fifo >= 0, "open %s: %s", path, strerror(errno));
	seg = forge(getpid(), 1, 1);
	alarm(10);	/* a deadline: SIGALRM ends a scan stuck in the open */
	k = odpx_seg_scan(getpid(), si, 4);
	alarm(0);
	CHECK(k == 1 && si[0].n == 1, "beside a FIFO that reads as a segment: %d segments", k);
	close(seg);
	close(fifo);
	printf("a FIFO whose link reads as a segment's: the scan returned, the segment found\n");
	return true;
}

static int count_of(const char *s, const char *what)
{
	int n = 0;

	for (; (s = strstr(s, what)); s++)
		n++;
	return n;
}

static void other_layouts(void)
{
	static const struct { uint32_t version; size_t bytes; } bad[] = {
		{ ODPX_SHM_VERSION - 1, SEG_BYTES }, { ODPX_SHM_VERSION + 1, SEG_BYTES },
		{ ODPX_SHM_VERSION, SEG_BYTES + 4096 }, { ODPX_SHM_VERSION, SEG_BYTES - 4096 },
	};
	struct odpx_seg_info si[4];
	pid_t g = getpid();
	int k, fd;

	fd = forge(g, 0, 1);
	k = odpx_seg_scan(g, si, 4);
	CHECK(k == 1, "a well-formed forged segment: %d found (the forgery is wrong)", k);
	close(fd);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		fd = forge_at(g, 0, bad[i].version, bad[i].bytes, 1);
		k = odpx_seg_scan(g, si, 4);
		CHECK(k == -EPROTO, "version %u, %zu bytes: odpx_seg_scan %d, want -EPROTO",
		      bad[i].version, bad[i].bytes, k);
		close(fd);
	}
	printf("segments of other layouts: rejected (-EPROTO)\n");
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
	int rows = 0, seen_new = 0, fds[66];
	pid_t g = getpid(), sp;
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
	for (unsigned i = 0; i < 66; i++)
		close(fds[i]);
	printf("odpstat -p of a process with 65 contexts: all read; a 66th first seen adds"
	       " no rate\n");
}

/*
 * odpstat -p of a process whose context pid.0 (10^9 hits) is replaced by
 * another of the same name (2 * 10^9 hits), as a process that exec()s and
 * opens a context again: the old memfd closes, the new one opens at once
 * (a sample between the two may find none).  No line may show a rate:
 * neither context counts while odpstat runs.
 */
static void name_reused(void)
{
	char *line = NULL;
	int rows = 0, after = 0, old_fd, new_fd = -1;
	pid_t g = getpid(), sp;
	size_t cap = 0;
	FILE *f;

	old_fd = forge(g, 0, 1000000000);
	sp = odpstat_follow(g, &f);
	while (after < 3 && getline(&line, &cap, f) > 0) {
		const char *hits = hits_of(line);

		int ctxs = count_of(line, "\"ctx\":");

		CHECK(ctxs == 1 || (ctxs == 0 && rows == 1), "line %d: %d contexts, want 1",
		      rows + 1, ctxs);
		CHECK(!strncmp(hits, "0.000,", 6), "line %d (%s the name was taken again): %.30s"
		      " hits/s from contexts neither of which counts", rows + 1,
		      new_fd < 0 ? "before" : "after", hits);
		after += new_fd >= 0;
		if (++rows == 1) {
			close(old_fd);				/* its writer exec()ed */
			new_fd = forge(g, 0, 2000000000);	/* and opened pid.0 again */
		}
	}
	kill(sp, SIGTERM);
	waitpid(sp, NULL, 0);
	fclose(f);
	free(line);
	CHECK(after == 3, "only %d of odpstat's lines after the name was taken again", after);
	close(new_fd);
	printf("a context that takes a gone one's name is new to odpstat: no rate\n");
}

int main(void)
{
	bool fifo = fifo_at_a_segment_link();

	other_layouts();
	many_contexts();
	name_reused();
	if (!fifo)	/* the rest passed */
		SKIP("the FIFO case needs root here");
	return 0;
}
