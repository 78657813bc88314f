// SPDX-License-Identifier: MIT
/*
 * stats-cli: odpstat's command line.  Options come before the operands
 * (odpstat(1)): "odpstat 1 -1" is a count of -1, refused, not --once after
 * an interval (getopt permuted it and ran one report).  An interval below
 * 0.01 s is refused with a message saying the shortest (it ran, sampling
 * everything 1000 times a second).  Each case: exit status 1 and the
 * message on standard error.
 *
 * odpstat -p of a PID given to another process during the run (faked: a
 * procfs root of our own, --procfs, whose <pid>/stat gets another start
 * time after the first line): the process it watched has exited, and
 * odpstat says so and stops, as for a PID that is gone.  It went on,
 * reporting the faults of the other process as the first one's.
 */
#include <limits.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "test.h"

static char *odpstat;	/* build/odpstat */

/* odpstat @args (NULL-terminated, no argv[0]): its exit status, its stderr in @err. */
static int run(char *const args[], char *err, size_t cap)
{
	char *argv[16] = { odpstat };
	int e[2], st;
	size_t m = 0;
	ssize_t n;
	pid_t p;

	for (int i = 0; args[i]; i++)
		argv[i + 1] = args[i];
	CHECK(pipe(e) == 0, "pipe");
	fflush(stdout);
	if (!(p = fork())) {
		dup2(e[1], 2);
		if (!freopen("/dev/null", "w", stdout))
			_exit(126);
		execv(odpstat, argv);
		_exit(127);
	}
	close(e[1]);
	while (m < cap - 1 && (n = read(e[0], err + m, cap - 1 - m)) > 0)
		m += (size_t)n;
	err[m] = 0;
	close(e[0]);
	CHECK(waitpid(p, &st, 0) == p, "waitpid");
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void refused(char *const args[], const char *what, const char *want)
{
	char err[4096];
	int r = run(args, err, sizeof(err));

	CHECK(r == 1 && strstr(err, want), "odpstat %s: status %d, stderr \"%.200s\"; want 1 and"
	      " \"%s\"", what, r, err, want);
	printf("odpstat %s: refused: %.*s\n", what, (int)strcspn(err, "\n"), err);
}

/* @dir/4242/stat with start time @start (field 22) */
static void fake_stat(const char *dir, unsigned long start)
{
	char path[PATH_MAX], tmp[PATH_MAX + 8];
	FILE *f;

	snprintf(path, sizeof(path), "%s/4242/stat", dir);
	snprintf(tmp, sizeof(tmp), "%s.new", path);
	CHECK((f = fopen(tmp, "w")), "%s: %s", tmp, strerror(errno));
	fprintf(f, "4242 (target) S 1 4242 4242 0 -1 4194304 5555 0 7 0 10 5 0 0 20 0 3 0 %lu"
		" 1000 100\n", start);
	CHECK(fclose(f) == 0 && rename(tmp, path) == 0, "%s: %s", path, strerror(errno));
}

static void pid_reused(void)
{
	char dir[] = "/tmp/odpx-cli.XXXXXX", path[PATH_MAX], *line = NULL;
	char *argv[] = { odpstat, "--procfs", dir, "-p", "4242", "--json", "--no-netlink", "0.1",
			 "100", NULL };
	int out[2], rows = 0, st;
	bool exited = false;
	size_t cap = 0;
	FILE *f;
	pid_t p;

	CHECK(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
	snprintf(path, sizeof(path), "%s/4242", dir);
	CHECK(mkdir(path, 0700) == 0, "mkdir %s: %s", path, strerror(errno));
	fake_stat(dir, 12345);
	CHECK(pipe(out) == 0, "pipe");
	fflush(stdout);
	if (!(p = fork())) {
		dup2(out[1], 1);
		dup2(out[1], 2);
		execv(odpstat, argv);
		_exit(127);
	}
	close(out[1]);
	CHECK((f = fdopen(out[0], "r")), "fdopen");
	/* to its end: 100 lines of 0.1 s at most, a deadline */
	while (getline(&line, &cap, f) > 0) {
		if (!strncmp(line, "{\"time\":", 8) && ++rows == 1)
			fake_stat(dir, 99999);	/* PID 4242 is another process's now */
		if (strstr(line, "4242: exited"))
			exited = true;
	}
	fclose(f);
	free(line);
	CHECK(waitpid(p, &st, 0) == p, "waitpid");
	unlink(strcat(path, "/stat"));
	*strrchr(path, '/') = 0;
	rmdir(path);
	rmdir(dir);
	CHECK(exited && rows < 100 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	      "odpstat -p of a PID reused: %d lines, %s, status %#x", rows,
	      exited ? "said exited" : "never said exited", st);
	printf("odpstat -p of a PID given to another process: \"exited\" after %d lines\n", rows);
}

/* Run odpstat with @args; its stdout in @out (a deadline: 2 samples of 0.05 s). */
static void capture(const char *args, char *out, size_t cap)
{
	char cmd[PATH_MAX + 256];
	size_t n;
	FILE *p;

	snprintf(cmd, sizeof(cmd), "%s --no-netlink %s", odpstat, args);
	CHECK((p = popen(cmd, "r")), "popen");
	n = fread(out, 1, cap - 1, p);
	out[n] = 0;
	CHECK(pclose(p) == 0, "odpstat %s failed: %s", args, out);
}

/*
 * -t puts the time (HH:MM:SS) before each row under a "time" header; the
 * rows show the metric's value and the hit ratio; the JSON names its schema
 * and carries the hit ratio and the memory rates.
 */
static void columns(void)
{
	char out[1 << 16], *row;
	int hh, mm, ss;

	capture("-t 0.05 2", out, sizeof(out));
	CHECK(strstr(out, "\ntime     state    metric               value  hit%"), "-t header: %s", out);
	CHECK((row = strstr(out, "hit%")) && (row = strchr(row, '\n')) &&
	      sscanf(row + 1, "%d:%d:%d ", &hh, &mm, &ss) == 3 && hh < 24 && mm < 60 && ss < 61,
	      "-t row: %s", out);
	capture("--json 0.05 1", out, sizeof(out));
	CHECK(!strncmp(out, "{\"time\":", 8) && strstr(out, "\"schema\":\"odpstat/2\"") &&
	      strstr(out, "\"hit_ratio\":") && strstr(out, "\"memory\":{\"source\":"),
	      "--json: %.400s", out);
	printf("odpstat -t: a time column; --json: schema odpstat/2, hit_ratio, memory\n");
}

int main(void)
{
	odpstat = odpstat_path();

	refused((char *[]){ "--no-netlink", "1", "-1", NULL }, "1 -1", "count '-1'");
	refused((char *[]){ "--no-netlink", "0.001", "1", NULL }, "0.001 1", "0.01");
	refused((char *[]){ "0.1", "1", "--no-netlink", NULL }, "0.1 1 --no-netlink",
		"options come before");
	pid_reused();
	columns();
	return 0;
}
