// SPDX-License-Identifier: MIT
/*
 * stats-cli: odpstat's command line.  Options come before the operands
 * (odpstat(1)): "odpstat 1 -1" is a count of -1, refused, not --once after
 * an interval (getopt permuted it and ran one report).  An interval below
 * 0.01 s is refused with a message saying the shortest (it ran, sampling
 * everything 1000 times a second).  Each case: exit status 1 and the
 * message on standard error.
 */
#include <limits.h>
#include <sys/wait.h>

#include "test.h"

static char odpstat[PATH_MAX];

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

int main(void)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	CHECK(n > 0, "readlink");
	exe[n] = 0;
	*strrchr(exe, '/') = 0;
	snprintf(odpstat, sizeof(odpstat), "%.4000s/../odpstat", exe);
	CHECK(access(odpstat, X_OK) == 0, "%s: not built", odpstat);

	refused((char *[]){ "--no-netlink", "1", "-1", NULL }, "1 -1", "count '-1'");
	refused((char *[]){ "--no-netlink", "0.001", "1", NULL }, "0.001 1", "0.01");
	refused((char *[]){ "0.1", "1", "--no-netlink", NULL }, "0.1 1 --no-netlink",
		"options come before");
	return 0;
}
