// SPDX-License-Identifier: MIT
/*
 * log-env: a misspelt ODPX_ variable is reported once a process on stderr
 * (ODPX_LOG=warn, the default), the variables odpx reads are not, ODPX_LOG=none
 * silences it, ODPX_LOG=info adds a line per open, and a bad ODPX_LOG value
 * is itself reported.
 */
#include "test.h"

static int open_twice(void *arg)
{
	struct odpx_ctx *ctx;

	for (int i = 0; i < 2; i++) {
		CHECK_RC(odpx_open_uring(NULL, &ctx), 0);
		CHECK_RC(odpx_close(ctx), 0);
	}
	return 0;
}

/* The stderr of open_twice() in a child whose environment has @env set (NULL-ended pairs). */
static void run_with(const char *const *env, char *err, size_t n)
{
	FILE *f = tmpfile();
	int saved = dup(2), st;
	size_t got;
	pid_t pid;

	CHECK(f && saved >= 0, "tmpfile: %s", strerror(errno));
	fflush(stdout);
	fflush(stderr);
	pid = fork();
	CHECK(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		dup2(fileno(f), 2);
		unsetenv("ODPX_LOG");
		for (; env[0]; env += 2)
			setenv(env[0], env[1], 1);
		_exit(open_twice(NULL));
	}
	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	      "child failed");
	close(saved);
	rewind(f);
	got = fread(err, 1, n - 1, f);
	err[got] = 0;
	fclose(f);
	printf("--- stderr:\n%s", err);
}

static int lines(const char *s, const char *needle)
{
	int n = 0;

	for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

int main(void)
{
	static char err[4096];

	run_with((const char *const[]){ "ODPX_MODEE", "pin", "ODPX_WATCH_MAX", "100", NULL }, err,
		 sizeof(err));
	CHECK(lines(err, "warning: ODPX_MODEE is not a variable odpx reads") == 1,
	      "misspelt ODPX_MODEE not reported exactly once");
	CHECK(lines(err, "\n") == 1, "lines besides the one warning");
	run_with((const char *const[]){ "ODPX_MODEE", "pin", "ODPX_LOG", "none", NULL }, err,
		 sizeof(err));
	CHECK(!err[0], "ODPX_LOG=none wrote to stderr");
	run_with((const char *const[]){ "ODPX_LOG", "info", NULL }, err, sizeof(err));
	CHECK(lines(err, "info: uring context opened, mode pin") == 2, "no info line per open");
	run_with((const char *const[]){ "ODPX_LOG", "loud", NULL }, err, sizeof(err));
	CHECK(lines(err, "ODPX_LOG=loud: not one of") == 1, "bad ODPX_LOG not reported once");
	printf("PASS\n");
	return 0;
}
