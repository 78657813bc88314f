// SPDX-License-Identifier: MIT
/*
 * stats-live: another process reads a live odpx context's counters.
 *
 * A child opens an io_uring context (pin mode), makes misses, hits and an
 * eviction, reads its own odpx_stats_read() and hands it over; then
 * `odpstat -p CHILD --json --once` must show that context (mode pin,
 * backend uring, its reason) with every counter equal to the child's own
 * (the engine's tick counters may only have grown).  `odpstat --json`
 * without -p lists it among the caller's own.  The segment is a memfd
 * "odpx.<pid>.0" in the child's descriptor table, mode 0600: `setpriv
 * --reuid=nobody odpstat -p CHILD` fails with one line and exit status 1.
 * odpx_close() closes it while the process lives on; a process killed with
 * SIGKILL leaves nothing behind, in /dev/shm or in odpstat's list.  A
 * missing PID is one line, exit 1.
 * A context closed between odpstat's two samples adds no rate.
 */
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "test.h"

static char *odpstat;	/* build/odpstat */

static const char *const fields[] = {
	"hits", "misses", "hits_slow", "deregs", "entries", "pinned_bytes", "unused_bytes", "pins",
	"unpins", "pin_failures", "evictions", "enomem_retries", "merges", "superseded",
	"miss_retries", "repins", "inval_unmap", "inval_remove", "inval_remap", "inval_api", "inval_entries",
	"inval_bytes", "dead_unpinned", "watch_vmas", "watch_regs", "direct_regs", "direct_shared",
	"direct_unwatchable", "direct_budget", "direct_no_monitor", "direct_racing",
	"prefetch_queued", "prefetch_merged", "prefetch_dropped", "prefetch_issued",
	"prefetch_failed", "unsafe_no_monitor", "thrash_state", "thrash_changes",
	"odp_mrs", "odp_fallbacks", "prefetch_sges", "prefetch_errno", "global_rkey",
	"direct_no_engine", "try_again", "idle_released", "prereg_repins", "evict_remiss",
	"repin_fresh", "preload_passthrough", "memcg_refusals", "memcg_released", "memcg_pressure",
};

static uint64_t field_of(const struct odpx_stats *st, const char *name)
{
#define X(f) if (!strcmp(name, #f)) return st->f;
	X(hits) X(misses) X(hits_slow) X(deregs) X(entries) X(pinned_bytes) X(unused_bytes)
	X(pins) X(unpins) X(pin_failures) X(evictions) X(enomem_retries) X(merges) X(superseded)
	X(miss_retries) X(repins) X(inval_unmap) X(inval_remove) X(inval_remap) X(inval_api) X(inval_entries)
	X(inval_bytes) X(dead_unpinned) X(watch_vmas) X(watch_regs) X(direct_regs)
	X(direct_shared) X(direct_unwatchable) X(direct_budget) X(direct_no_monitor)
	X(direct_racing) X(prefetch_queued) X(prefetch_merged) X(prefetch_dropped)
	X(prefetch_issued) X(prefetch_failed) X(unsafe_no_monitor) X(thrash_state)
	X(thrash_changes) X(engine_ticks) X(engine_wakeups) X(engine_lingers) X(odp_mrs) X(odp_fallbacks)
	X(prefetch_sges) X(prefetch_errno) X(global_rkey)
	X(direct_no_engine) X(try_again) X(idle_released) X(prereg_repins) X(evict_remiss)
	X(repin_fresh) X(preload_passthrough) X(memcg_refusals) X(memcg_released) X(memcg_pressure)
#undef X
	FAIL("no field %s", name);
}

/* Run a command; its stdout in @out; returns the exit status. */
static int run(const char *cmd, char *out, size_t cap)
{
	FILE *p = popen(cmd, "r");
	size_t n;
	int st;

	CHECK(p, "popen %s", cmd);
	n = fread(out, 1, cap - 1, p);
	out[n] = 0;
	st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* "name":value inside the context object of @pid in odpstat's JSON */
static uint64_t json_field(const char *json, pid_t pid, const char *name)
{
	char key[96];
	const char *ctx, *end, *p;

	snprintf(key, sizeof(key), "{\"pid\":%d,\"ctx\":", (int)pid);
	CHECK((ctx = strstr(json, key)), "no context of pid %d in: %.400s", (int)pid, json);
	CHECK((end = strstr(ctx, "}}")), "unterminated context");
	snprintf(key, sizeof(key), "\"%s\":", name);
	for (p = strstr(ctx, "\"stats\":{"); p && p < end; p++) {
		if (!strncmp(p, key, strlen(key)))
			return strtoull(p + strlen(key), NULL, 10);
	}
	FAIL("no %s in the context of pid %d", name, (int)pid);
}

struct handoff {
	struct odpx_stats st;
	const char *reason;
	char reason_text[192];
};

/* The child: a context with some activity; hands its stats over, waits. */
static void child(int wr, int rd, bool hold_forever)
{
	struct odpx_attr a = {
		.comp_mask = ODPX_ATTR_LIMITS,
		.limits = { .max_pinned_bytes = 8 * 4096, .max_unused_bytes = 8 * 4096 },
	};
	struct handoff h = { 0 };
	struct odpx_ctx *ctx;
	struct odpx_mr *mr;
	unsigned char *buf = map_anon(NULL, 16 * 4096);
	char c;

	CHECK_RC(odpx_open_uring(&a, &ctx), 0);
	for (int round = 0; round < 3; round++)
		for (int i = 0; i < 3; i++) {	/* 3 x 4 pages in 8: evicts */
			CHECK_RC(odpx_reg(ctx, buf + i * 4 * 4096, 4 * 4096, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
			CHECK_RC(odpx_dereg(ctx, mr), 0);
		}
	CHECK_RC(odpx_reg(ctx, buf + 8 * 4096, 4096, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);	/* a hit, held */
	CHECK_RC(odpx_mode_get(ctx, NULL, &h.reason), 0);
	snprintf(h.reason_text, sizeof(h.reason_text), "%s", h.reason);
	h.st = stats_of(ctx);
	CHECK(write(wr, &h, sizeof(h)) == (ssize_t)sizeof(h), "handoff");
	if (hold_forever)
		for (;;)
			pause();
	/* release the held hit, say so, and read no stats meanwhile */
	CHECK(read(rd, &c, 1) == 1, "go");
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	CHECK(write(wr, "r", 1) == 1, "released");
	CHECK(read(rd, &c, 1) == 1, "go");
	CHECK_RC(odpx_close(ctx), 0);
	CHECK(write(wr, "c", 1) == 1, "closed");
	_exit(read(rd, &c, 1) < 0);
}

/*
 * Rates across a context's close: a process with a busy-then-idle context
 * (20,000 hits) and a small one closes the small one between odpstat's two
 * samples, and does nothing else: the hit rate must be about 0, not the
 * big context's whole count (a delta of the sums took the drop for a
 * counter reset).  Between the samples is seen, not slept for: odpstat's
 * only sleep is the one between them, so the close comes once odpstat is
 * seen in it, and the round counts only if odpstat is still in it after
 * the close; else it is inconclusive and runs again, five rounds at most.
 */
#define CLOSE_ROUNDS 5

/* Process @pid sleeps in nanosleep() (or clock_nanosleep(), glibc's way). */
static bool in_nanosleep(pid_t pid)
{
	char path[64], buf[128];
	ssize_t n;
	int fd;
	long nr;

	snprintf(path, sizeof(path), "/proc/%d/syscall", (int)pid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return false;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = 0;
	if (!strncmp(buf, "running", 7))
		return false;
	nr = atol(buf);
#ifdef SYS_nanosleep
	if (nr == SYS_nanosleep)
		return true;
#endif
	return nr == SYS_clock_nanosleep;
}

/* odpstat @args, its stdout to *@out_fd; its PID. */
static pid_t odpstat_start(char *const args[], int *out_fd)
{
	int fds[2];
	pid_t pid;

	CHECK(pipe2(fds, O_CLOEXEC) == 0, "pipe");
	fflush(stdout);
	CHECK((pid = fork()) >= 0, "fork");
	if (!pid) {
		dup2(fds[1], STDOUT_FILENO);
		execv(odpstat, args);
		_exit(127);
	}
	close(fds[1]);
	*out_fd = fds[0];
	return pid;
}

/* One round; false when the close did not land between the two samples. */
static bool rate_across_close_round(void)
{
	int up[2], down[2], out_fd, st;
	char spid[16], out[1 << 16], c;
	char *args[] = { odpstat, "-p", spid, "--json", "--once", "2", NULL };
	const char *r;
	size_t n = 0;
	ssize_t k;
	bool between;
	pid_t pid, sp;

	/* O_CLOEXEC: odpstat keeps none of them */
	CHECK(pipe2(up, O_CLOEXEC) == 0 && pipe2(down, O_CLOEXEC) == 0, "pipe");
	fflush(stdout);
	if (!(pid = fork())) {
		char *buf = map_anon(NULL, 2 * 4096);
		struct odpx_ctx *big = open_pin(0), *small = open_pin(0);
		struct odpx_mr *mr;

		for (int i = 0; i < 20000; i++) {
			CHECK_RC(odpx_reg(big, buf, 4096, 0, &mr), 0);
			CHECK_RC(odpx_dereg(big, mr), 0);
		}
		for (int i = 0; i < 3; i++) {
			CHECK_RC(odpx_reg(small, buf + 4096, 4096, 0, &mr), 0);
			CHECK_RC(odpx_dereg(small, mr), 0);
		}
		CHECK(write(up[1], "r", 1) == 1 && read(down[0], &c, 1) == 1, "handshake");
		CHECK_RC(odpx_close(small), 0);
		CHECK(write(up[1], "c", 1) == 1 && read(down[0], &c, 1) == 1, "handshake");
		_exit(0);
	}
	CHECK(read(up[0], &c, 1) == 1, "child ready");
	snprintf(spid, sizeof(spid), "%d", (int)pid);
	sp = odpstat_start(args, &out_fd);
	/* its first sample is taken: it sleeps until the second (a hang guard, no timing) */
	if (!WAIT_FOR(in_nanosleep(sp), 10)) {
		kill(sp, SIGKILL);
		FAIL("odpstat -p %d --json --once 2 did not reach its sleep in 10 s", (int)pid);
	}
	CHECK(write(down[1], "x", 1) == 1 && read(up[0], &c, 1) == 1, "close the small context");
	between = in_nanosleep(sp);	/* still before the second sample */
	while (n < sizeof(out) - 1 && (k = read(out_fd, out + n, sizeof(out) - 1 - n)) > 0)
		n += (size_t)k;
	out[n] = 0;
	close(out_fd);
	CHECK(waitpid(sp, &st, 0) == sp && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	      "odpstat: status %#x: %s", st, out);
	CHECK(write(down[1], "q", 1) == 1, "quit");
	waitpid(pid, NULL, 0);
	close(up[0]);
	close(up[1]);
	close(down[0]);
	close(down[1]);
	if (!between) {
		printf("a context closed between samples: inconclusive round: odpstat had left its"
		       " sleep when the close returned\n");
		return false;
	}
	r = strstr(out, "\"rates\":{\"hits\":");
	CHECK(r, "no rates: %.300s", out);
	double hits = strtod(r + strlen("\"rates\":{\"hits\":"), NULL);
	CHECK(hits < 100, "a context closed between two samples: %.0f hits/s from an idle"
	      " process", hits);
	printf("a context closed between samples: %.0f hits/s (the process was idle)\n", hits);
	return true;
}

static void rate_across_close(void)
{
	for (int inconclusive = 0; !rate_across_close_round();)
		CHECK(++inconclusive < CLOSE_ROUNDS, "a context closed between samples: no conclusive"
		      " round in %d", CLOSE_ROUNDS);
}

static pid_t spawn(int *to_child, int *from_child, struct handoff *h, bool hold_forever)
{
	int up[2], down[2];
	pid_t pid;

	CHECK(pipe(up) == 0 && pipe(down) == 0, "pipe");
	pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0) {
		close(up[0]);
		close(down[1]);
		child(up[1], down[0], hold_forever);
	}
	close(up[1]);
	close(down[0]);
	CHECK(read(up[0], h, sizeof(*h)) == (ssize_t)sizeof(*h), "child's stats");
	*from_child = up[0];
	*to_child = down[1];
	return pid;
}

/* The state letter in /proc/<pid>/stat at @path, '?' if none. */
static char proc_state_of(const char *path)
{
	char buf[512], *p;
	FILE *f = fopen(path, "r");
	size_t n;

	if (!f)
		return '?';
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	return (p = strrchr(buf, ')')) && p[1] == ' ' ? p[2] : '?';
}

/*
 * A child with a context that cached 4 KiB: it ends when a byte comes on
 * *@end (or its parent ends).  @leader_leaves: its main thread leaves at
 * once (pthread_exit()), another thread waits for that byte.
 */
static int end_fd;

static void *wait_end(void *arg)
{
	char c;

	(void)arg;
	_exit(read(end_fd, &c, 1) < 0);
}

static pid_t target(int *end, bool leader_leaves)
{
	int up[2], down[2];
	char c;
	pid_t pid;

	CHECK(pipe(up) == 0 && pipe(down) == 0, "pipe");
	fflush(stdout);
	if (!(pid = fork())) {
		char *buf = map_anon(NULL, 4096);
		struct odpx_ctx *ctx = open_pin(0);
		struct odpx_mr *mr;
		pthread_t t;

		close(down[1]);	/* our parent's end: its exit, even a failed one, ends us */
		close(up[0]);
		CHECK_RC(odpx_reg(ctx, buf, 4096, 0, &mr), 0);
		end_fd = down[0];
		if (leader_leaves)
			CHECK(pthread_create(&t, NULL, wait_end, NULL) == 0, "thread");
		CHECK(write(up[1], "r", 1) == 1, "handshake");
		if (leader_leaves)
			pthread_exit(NULL);
		wait_end(NULL);	/* unreaped until odpstat ends: a zombie ends the run too */
	}
	close(down[0]);
	close(up[1]);
	CHECK(read(up[0], &c, 1) == 1, "child ready");
	close(up[0]);
	*end = down[1];
	return pid;
}

/* Read @p, the popen() of @cmd, to its end: the output in @out, its rows (not "#") returned. */
static int odpstat_rows(const char *cmd, FILE *p, char *out, size_t cap)
{
	size_t n = fread(out, 1, cap - 1, p);
	int rows = 0;

	out[n] = 0;
	CHECK(pclose(p) == 0, "%s: %s", cmd, out);
	for (char *l = out; (l = strchr(l, '\n')); l++)
		rows += l[1] && l[1] != '#';
	return rows;
}

/* odpstat -p of a process that ends during the run: says so, status 0, and stops */
static void target_ends(void)
{
	char cmd[PATH_MAX + 64], out[1 << 16];
	int end, rows;
	pid_t pid = target(&end, false);
	FILE *p;

	/* 100 rows of 0.1 s unless the end is seen */
	snprintf(cmd, sizeof(cmd), "%s -p %d 0.1 100 2>&1", odpstat, (int)pid);
	CHECK((p = popen(cmd, "r")), "popen");
	usleep(300 * 1000);
	CHECK(write(end, "x", 1) == 1, "end the child");
	rows = odpstat_rows(cmd, p, out, sizeof(out));
	waitpid(pid, NULL, 0);
	close(end);
	CHECK(strstr(out, "exited") && rows < 90, "odpstat of a process that ended: %d rows, %.300s",
	      rows, out);
	printf("odpstat -p of a process that ended: stopped after %d lines\n", rows);
}

/*
 * odpstat -p of a process whose main thread left (pthread_exit()) while
 * another runs: its /proc/<pid>/stat reads Z, yet it has not ended, and
 * odpstat goes on, showing its context (found through the other thread's
 * descriptor table: /proc/<pid>/fd lists nothing).  (Taking Z alone for
 * the end stopped it after a sample.)
 */
static void leader_exits(void)
{
	char cmd[PATH_MAX + 64], out[1 << 16], st[64];
	int end, rows;
	pid_t pid = target(&end, true);
	FILE *p;

	snprintf(st, sizeof(st), "/proc/%d/stat", (int)pid);
	CHECK(WAIT_FOR(proc_state_of(st) == 'Z', 5), "the main thread did not leave");
	snprintf(cmd, sizeof(cmd), "%s -p %d 0.1 5 2>&1", odpstat, (int)pid);
	CHECK((p = popen(cmd, "r")), "popen");
	rows = odpstat_rows(cmd, p, out, sizeof(out));
	CHECK(!strstr(out, "exited") && rows >= 5, "a process whose main thread left: %d rows, %.300s",
	      rows, out);
	snprintf(st, sizeof(st), "# pid %d ctx 0: mode", (int)pid);
	CHECK(strstr(out, st), "a process whose main thread left: its context not shown: %.300s",
	      out);
	CHECK(write(end, "x", 1) == 1, "end the child");
	waitpid(pid, NULL, 0);
	close(end);
	printf("odpstat -p of a process whose main thread left: went on, %d lines, its context"
	       " shown\n", rows);
}

int main(void)
{
	static char out[1 << 20];
	char cmd[PATH_MAX + 256], path[96];
	struct handoff h;
	struct stat sb;
	int go, back, st;
	char c;
	pid_t pid;

	odpstat = odpstat_path();

	pid = spawn(&go, &back, &h, false);
	CHECK(h.st.misses >= 3 && h.st.evictions >= 1 && h.st.hits >= 1,
	      "child activity: misses %lu evictions %lu hits %lu", (unsigned long)h.st.misses,
	      (unsigned long)h.st.evictions, (unsigned long)h.st.hits);

	/* the segment: owner only */
	CHECK(seg_fds(pid, path, sizeof(path)) == 1, "process %d: %u segments, want 1", (int)pid,
	      seg_fds(pid, NULL, 0));
	CHECK(stat(path, &sb) == 0, "%s: %s", path, strerror(errno));
	CHECK((sb.st_mode & 07777) == 0600 && sb.st_uid == geteuid(), "%s: mode %o", path,
	      sb.st_mode & 07777);

	snprintf(cmd, sizeof(cmd), "%s -p %d --json --once 0.1", odpstat, (int)pid);
	CHECK(run(cmd, out, sizeof(out)) == 0, "%s failed: %s", cmd, out);
	CHECK(strchr(out, '\n') == out + strlen(out) - 1, "one JSON line");
	CHECK(strstr(out, "\"mode\":\"pin\",\"backend\":\"uring\",\"reason\":\""), "mode/backend: %.300s", out);
	CHECK(strstr(out, h.reason_text), "reason '%s' missing", h.reason_text);
	CHECK(strstr(out, "\"no RDMA device\"") || strstr(out, "\"devices\":[{"), "device caps");
	CHECK(strstr(out, "{\"source\":\"proc_pid\""), "the process's fault counters");
	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
		uint64_t want = field_of(&h.st, fields[i]), got = json_field(out, pid, fields[i]);
		CHECK(got == want, "%s: odpstat %lu, odpx_stats_read %lu", fields[i],
		      (unsigned long)got, (unsigned long)want);
	}
	CHECK(json_field(out, pid, "engine_ticks") >= h.st.engine_ticks, "ticks");
	CHECK(json_field(out, pid, "engine_lingers") >= h.st.engine_lingers, "lingers");
	printf("odpstat -p %d: %zu counters equal to the process's own odpx_stats_read\n", (int)pid,
	       sizeof(fields) / sizeof(fields[0]));

	snprintf(cmd, sizeof(cmd), "%s --json --once 0.05", odpstat);
	CHECK(run(cmd, out, sizeof(out)) == 0, "odpstat (all)");
	(void)json_field(out, pid, "misses");

	/* text mode names the context */
	snprintf(cmd, sizeof(cmd), "%s -p %d 0.05 2", odpstat, (int)pid);
	CHECK(run(cmd, out, sizeof(out)) == 0, "text mode");
	snprintf(path, sizeof(path), "# pid %d ctx 0: mode pin, backend uring", (int)pid);
	CHECK(strstr(out, path) && strstr(out, "state") && strstr(out, "hit/s"), "text: %s", out);
	/* and its limits, as odpx_query() gives them: set in the attributes, the rest defaults */
	char want[192];
	snprintf(want, sizeof(want), "# pid %d ctx 0: limits: pinned 32 KiB (attributes), "
		 "entries 4096, unused 32 KiB, entry 1 GiB; idle release after 300000 ms", (int)pid);
	CHECK(strstr(out, want), "text, limits: want \"%s\" in %s", want, out);
	snprintf(cmd, sizeof(cmd), "%s -p %d --json --once 0.05", odpstat, (int)pid);
	CHECK(run(cmd, out, sizeof(out)) == 0, "%s failed: %s", cmd, out);
	CHECK(strstr(out, "\"limits\":{\"max_pinned_bytes\":32768,\"max_pinned_source\":\"attributes\","
			  "\"max_entries\":4096,\"max_unused_bytes\":32768,\"max_entry_bytes\":1073741824,"
			  "\"idle_ms\":300000}"), "json, limits: %s", out);
	printf("odpstat: the limits in force and their source, as odpx_query()\n");

	/* another user cannot read it */
	snprintf(cmd, sizeof(cmd),
		 "setpriv --reuid=nobody --regid=nogroup --clear-groups %s -p %d --json --once 0.05 2>&1",
		 odpstat, (int)pid);
	st = run(cmd, out, sizeof(out));
	CHECK(st == 1 && strstr(out, "Permission denied") && !strstr(out, "\"contexts\""),
	      "as nobody: status %d: %s", st, out);
	CHECK(strchr(out, '\n') == out + strlen(out) - 1, "one line: %s", out);
	printf("as nobody: %s", out);

	/*
	 * Unused bytes are live, not the value of the owner's last stats read:
	 * the child releases its one held hit (inside a cached 4-page entry)
	 * and reads nothing, yet the sum over its shards moves at once.  Its
	 * max_unused_bytes keeps the engine from trimming that entry meanwhile.
	 */
	CHECK(write(go, "x", 1) == 1 && read(back, &c, 1) == 1, "release");
	snprintf(cmd, sizeof(cmd), "%s -p %d --json --once 0.05", odpstat, (int)pid);
	CHECK(run(cmd, out, sizeof(out)) == 0, "%s failed: %s", cmd, out);
	CHECK(json_field(out, pid, "unused_bytes") == h.st.unused_bytes + 4 * 4096 &&
	      json_field(out, pid, "pinned_bytes") == h.st.pinned_bytes &&
	      json_field(out, pid, "deregs") == h.st.deregs + 1,
	      "after a release: unused_bytes %lu, want %lu (pinned %lu, deregs %lu -> %lu)",
	      (unsigned long)json_field(out, pid, "unused_bytes"),
	      (unsigned long)h.st.unused_bytes + 4 * 4096,
	      (unsigned long)json_field(out, pid, "pinned_bytes"), (unsigned long)h.st.deregs,
	      (unsigned long)json_field(out, pid, "deregs"));
	printf("odpstat sees a release at once: unused_bytes %lu -> %lu\n",
	       (unsigned long)h.st.unused_bytes, (unsigned long)json_field(out, pid, "unused_bytes"));

	/* the close closes it; the process lives on */
	CHECK(write(go, "x", 1) == 1 && read(back, &c, 1) == 1, "close");
	CHECK(!seg_fds(pid, NULL, 0), "a segment left in process %d after odpx_close", (int)pid);
	close(go);
	close(back);
	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0, "child");

	/* SIGKILL leaves nothing */
	pid = spawn(&go, &back, &h, true);
	close(back);
	CHECK(seg_fds(pid, NULL, 0) == 1, "no segment before the kill");
	CHECK(kill(pid, SIGKILL) == 0 && waitpid(pid, &st, 0) == pid, "kill");
	snprintf(cmd, sizeof(cmd), "%s --json --once 0.05", odpstat);
	CHECK(run(cmd, out, sizeof(out)) == 0, "odpstat after kill");
	snprintf(cmd, sizeof(cmd), "{\"pid\":%d,", (int)pid);
	CHECK(!strstr(out, cmd), "a dead process's context listed");
	snprintf(path, sizeof(path), "/dev/shm/odpx.%d.0", (int)pid);
	CHECK(access(path, F_OK) < 0, "%s left by a killed process", path);

	/* errors like procps: one line, status 1 */
	snprintf(cmd, sizeof(cmd), "%s -p %d --once 2>&1", odpstat, (int)pid);
	st = run(cmd, out, sizeof(out));
	CHECK(st == 1 && strstr(out, "no such process") && strchr(out, '\n') == out + strlen(out) - 1,
	      "dead PID: %d %s", st, out);
	snprintf(cmd, sizeof(cmd), "%s -d nosuchdev0 --once 2>&1", odpstat);
	st = run(cmd, out, sizeof(out));
	CHECK(st == 1 && strstr(out, "nosuchdev0: no such RDMA device"), "bad device: %d %s", st, out);
	snprintf(cmd, sizeof(cmd), "%s -x 2>&1 >/dev/null", odpstat);
	CHECK(run(cmd, out, sizeof(out)) == 1, "bad option");
	snprintf(cmd, sizeof(cmd), "%s 0 2>&1", odpstat);
	CHECK(run(cmd, out, sizeof(out)) == 1 && strstr(out, "interval"), "bad interval: %s", out);
	snprintf(cmd, sizeof(cmd), "%s 0.1 1e30 2>&1", odpstat);
	CHECK(run(cmd, out, sizeof(out)) == 1 && strstr(out, "count"), "huge count: %s", out);
	rate_across_close();
	target_ends();
	leader_exits();
	return 0;
}
