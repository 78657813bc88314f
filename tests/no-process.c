// SPDX-License-Identifier: MIT
/*
 * no-process: odpx starts no process.  A library that MPI ranks, UCX or
 * libfabric embed must leave its host's process tree alone: at every step
 * of a run that caches, munmaps cached memory, prefetches, forks and
 * closes, the process has no child but the one it forks itself.  A process
 * that leaves the session and is reparented to init (setsid, a double
 * fork) stays in its cgroup: where a cgroup v2 hierarchy is mounted and
 * writable (root), the test runs in a cgroup of its own and checks that no
 * other process joins it.  Threads are counted as well: after the close,
 * none of odpx's is left.
 */
#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "test.h"

#define LEN (64 * 1024)
#define MAXP 4096

static char cg[300], cg_home[544];	/* our own cgroup v2, and the one we came from */

/* At exit, a failure's too: back home, and the cgroup removed once it is empty. */
static void cgroup_leave(void)
{
	FILE *f;

	if (!cg[0] || getpid() != atoi(strrchr(cg, '-') + 1))
		return;	/* none, or a forked child's exit */
	if ((f = fopen(cg_home, "w"))) {
		fprintf(f, "0\n");
		fclose(f);
	}
	for (int i = 0; i < 100 && rmdir(cg) < 0 && errno == EBUSY; i++)
		usleep(10000);	/* a member on its way out */
}

/* A cgroup v2 of our own, at the root of the hierarchy; false where there is none. */
static bool cgroup_enter(void)
{
	char line[512], mnt[256] = "", fs[64], path[256] = "";
	FILE *f = fopen("/proc/self/mounts", "r");

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "%*s %255s %63s", mnt, fs) == 2 && !strcmp(fs, "cgroup2"))
			break;
		else
			mnt[0] = 0;
	if (f)
		fclose(f);
	if (!mnt[0] || !(f = fopen("/proc/self/cgroup", "r")))
		return false;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "0::", 3))
			sscanf(line + 3, "%255s", path);
	fclose(f);
	snprintf(cg_home, sizeof(cg_home), "%s%s/cgroup.procs", mnt, path);
	snprintf(cg, sizeof(cg), "%s/odpx-no-process-%d", mnt, getpid());
	if (mkdir(cg, 0755) < 0) {
		printf("no cgroup of our own (%s: %s): children only\n", cg,
		       strerror(errno));
		cg[0] = 0;
		return false;
	}
	snprintf(line, sizeof(line), "%s/cgroup.procs", cg);
	f = fopen(line, "w");
	atexit(cgroup_leave);
	CHECK(f && fprintf(f, "0\n") > 0 && fclose(f) == 0, "join %s", cg);
	return true;
}


/* Our children, and the processes of our cgroup other than us. */
static unsigned snapshot(pid_t *out, unsigned cap)
{
	pid_t self = getpid();
	unsigned n = 0;
	struct dirent *d;
	DIR *dir = opendir("/proc");

	CHECK(dir, "opendir /proc: %s", strerror(errno));
	while ((d = readdir(dir))) {
		char path[64], buf[512], *p;
		int ppid;
		pid_t pid = (pid_t)atoi(d->d_name);
		FILE *f;

		if (pid <= 0 || pid == self)
			continue;
		snprintf(path, sizeof(path), "/proc/%d/stat", pid);
		if (!(f = fopen(path, "r")))
			continue;	/* gone meanwhile */
		p = fgets(buf, sizeof(buf), f);
		fclose(f);
		if (!p || !(p = strrchr(buf, ')')))
			continue;
		if (sscanf(p + 2, "%*c %d", &ppid) != 1)
			continue;
		if (ppid == self && n < cap)
			out[n++] = pid;
	}
	closedir(dir);
	if (cg[0]) {
		char path[320];
		int pid;
		snprintf(path, sizeof(path), "%s/cgroup.procs", cg);
		FILE *f = fopen(path, "r");
		CHECK(f, "open %s", path);
		while (fscanf(f, "%d", &pid) == 1)
			if (pid != self && n < cap)
				out[n++] = pid;
		fclose(f);
	}
	return n;
}

/* odpx's threads (odpx-uffd, odpx-engine): a sanitizer's runtime has threads of its own */
static unsigned threads(void)
{
	unsigned n = 0;
	struct dirent *d;
	DIR *dir = opendir("/proc/self/task");

	CHECK(dir, "opendir /proc/self/task: %s", strerror(errno));
	while ((d = readdir(dir))) {
		char path[300], comm[32] = "";
		if (d->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", d->d_name);
		FILE *f = fopen(path, "r");
		if (f && fgets(comm, sizeof(comm), f))
			n += !strncmp(comm, "odpx-", 5);
		if (f)
			fclose(f);
	}
	closedir(dir);
	return n;
}

static pid_t before[MAXP];
static unsigned nbefore;

/* Every child and every member of our cgroup now was there at the start, or is @mine. */
static void check(const char *when, pid_t mine)
{
	pid_t now[MAXP];
	unsigned n = snapshot(now, MAXP);

	for (unsigned i = 0; i < n; i++) {
		bool known = now[i] == mine;
		for (unsigned j = 0; j < nbefore && !known; j++)
			known = now[i] == before[j];
		if (known)
			continue;
		char path[64], comm[64] = "?";
		int ppid = 0;
		snprintf(path, sizeof(path), "/proc/%d/stat", now[i]);
		FILE *f = fopen(path, "r");
		if (f) {
			if (fscanf(f, "%*d (%63[^)]) %*c %d", comm, &ppid) != 2)
				ppid = 0;
			fclose(f);
		}
		FAIL("%s: process %d (%s, parent %d) appeared among our children or in our cgroup", when, now[i],
		     comm, ppid);
	}
}

static int child_checks(void *arg)
{
	struct odpx_ctx *ctx;
	struct odpx_mr *mr;
	char *b = map_anon(NULL, LEN);

	(void)arg;
#ifdef __SANITIZE_THREAD__
	/*
	 * TSan's thread registry does not survive a fork of a threaded process
	 * ("dup thread with used id" at the child's first thread): the child's
	 * own context runs in the plain and ASan builds.
	 */
	printf("child: own context n/a under TSan (threads after a threaded fork)\n");
	return 0;
#endif
	nbefore = snapshot(before, MAXP);
	memset(b, 2, LEN);
	CHECK_RC(odpx_open_uring(NULL, &ctx), 0);
	CHECK_RC(odpx_reg(ctx, b, LEN, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	check("child, cached", 0);
	munmap(b, LEN);
	check("child, cached memory unmapped", 0);
	CHECK_RC(odpx_close(ctx), 0);
	return 0;
}

int main(void)
{
	unsigned t0 = threads();
	struct odpx_ctx *ctx;
	struct odpx_stats st;
	struct odpx_mr *mr;
	char *a = map_anon(NULL, LEN), *b = map_anon(NULL, LEN);
	bool own_cg = cgroup_enter();

	nbefore = snapshot(before, MAXP);
	memset(a, 1, LEN);
	memset(b, 1, LEN);
	CHECK_RC(odpx_open_uring(NULL, &ctx), 0);
	check("open", 0);
	CHECK_RC(odpx_reg(ctx, a, LEN, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	CHECK_RC(odpx_reg(ctx, b, LEN, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	st = stats_of(ctx);
	CHECK(st.entries == 2 && st.direct_regs == 0, "not cached (entries %lu, direct %lu)",
	      (unsigned long)st.entries, (unsigned long)st.direct_regs);
	check("cached, monitor and engine running", 0);
	/* each names itself once it runs */
	CHECK(WAIT_FOR(threads() >= t0 + 2, 5), "odpx's reader and engine do not run");
	munmap(a, LEN);
	CHECK(stats_of(ctx).inval_unmap >= 1, "the munmap of cached memory raised no event");
	check("cached memory unmapped", 0);
	CHECK(odpx_prefetch(ctx, b, LEN, 0) >= 0, "prefetch");
	check("prefetch", 0);

	fflush(stdout);
	pid_t pid = fork();
	CHECK(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0)
		_exit(child_checks(NULL));
	check("forked", pid);
	int status;
	CHECK(waitpid(pid, &status, 0) == pid, "waitpid: %s", strerror(errno));
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child failed (status %#x)", status);
	check("child reaped", 0);

	CHECK_RC(odpx_close(ctx), 0);
	check("closed", 0);
	CHECK(WAIT_FOR(threads() == t0, 5), "%u threads of odpx's after the close, %u before",
	      threads(), t0);
	munmap(b, LEN);
	printf("no process started at open, cache, munmap, prefetch, fork or close (%s); "
	       "no thread left after the close\n", own_cg ? "children and cgroup" : "children");
	return 0;
}
