// SPDX-License-Identifier: MIT
/*
 * engine-start: a pin context whose engine thread cannot start.
 * The monitor runs already (another context), so the miss attaches; then
 *   - no descriptor left (RLIMIT_NOFILE, every number below it taken): the
 *     engine's eventfd fails with EMFILE;
 *   - no thread allowed (nobody, RLIMIT_NPROC 0): its pthread_create fails
 *     with EAGAIN, after its eventfd and ring were made (and are freed);
 * in both the miss is served direct and counted in direct_no_engine, not
 * direct_no_monitor; nothing is cached without an engine; a hint is dropped
 * (-EAGAIN, counted in prefetch_dropped) as on a full queue; once the limit is
 * lifted a later miss starts it (a second after the failure), the context
 * caches, and an entry munmapped with no miss after it is unpinned by the
 * engine.  Each case runs in a child of its own.
 */
#include <dirent.h>
#include <grp.h>
#include <sys/resource.h>

#include "test.h"
#include "odpx-private.h"	/* engine_running */

#define LEN (64 * 1024)
#define U(x) ((unsigned long)(x))

static int max_fd(void)
{
	DIR *dir = opendir("/proc/self/fd");
	struct dirent *d;
	int m = -1;

	CHECK(dir, "opendir /proc/self/fd");
	while ((d = readdir(dir)))
		if (d->d_name[0] != '.' && atoi(d->d_name) > m)
			m = atoi(d->d_name);
	closedir(dir);
	return m;
}

/* Descriptors that fill every free number below the soft limit. */
static int fillers[4096], nfillers;
static struct rlimit nofile;

static void no_descriptor_left(void)
{
	struct rlimit low;
	int fd;

	CHECK(getrlimit(RLIMIT_NOFILE, &nofile) == 0, "getrlimit");
	low = (struct rlimit){ (rlim_t)max_fd() + 16, nofile.rlim_max };
	CHECK(setrlimit(RLIMIT_NOFILE, &low) == 0, "setrlimit(RLIMIT_NOFILE): %s", strerror(errno));
	while ((fd = dup(0)) >= 0) {
		CHECK(nfillers < 4096, "more than 4096 free descriptors under the lowered limit");
		fillers[nfillers++] = fd;
	}
	CHECK(errno == EMFILE, "dup: %s", strerror(errno));
}

static void descriptors_back(void)
{
	while (nfillers)
		close(fillers[--nfillers]);
	CHECK(setrlimit(RLIMIT_NOFILE, &nofile) == 0, "setrlimit back: %s", strerror(errno));
}

static struct rlimit nproc;

static void no_thread_allowed(void)
{
	struct rlimit none;

	CHECK(getrlimit(RLIMIT_NPROC, &nproc) == 0, "getrlimit");
	none = (struct rlimit){ 0, nproc.rlim_max };
	CHECK(setrlimit(RLIMIT_NPROC, &none) == 0, "setrlimit(RLIMIT_NPROC, 0): %s", strerror(errno));
}

static void threads_back(void)
{
	CHECK(setrlimit(RLIMIT_NPROC, &nproc) == 0, "setrlimit back: %s", strerror(errno));
}

struct limit {
	const char *what;
	void (*impose)(void);
	void (*lift)(void);
};

static int engine_refused(void *arg)
{
	const struct limit *l = arg;
	struct odpx_ctx *first, *ctx;
	struct odpx_stats st;
	struct odpx_mr *mr;
	char *other, *p, *q;
	double deadline;

	/* root ignores RLIMIT_NPROC: drop to nobody (no CAP_IPC_LOCK: small ranges) */
	if (l->impose == no_thread_allowed && geteuid() == 0)
		CHECK(setgroups(0, NULL) == 0 && setgid(65534) == 0 && setuid(65534) == 0,
		      "drop to nobody: %s", strerror(errno));
	other = map_anon(NULL, LEN);
	p = map_anon(NULL, LEN);
	q = map_anon(NULL, LEN);
	/* the monitor and its descriptors, before the limit: the miss below attaches */
	first = open_pin(0);
	CHECK_RC(odpx_reg(first, other, LEN, 0, &mr), 0);
	CHECK_RC(odpx_dereg(first, mr), 0);
	ctx = open_pin(0);

	l->impose();
	CHECK_RC(odpx_reg(ctx, p, LEN, 0, &mr), 0);
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	CHECK_RC(odpx_reg(ctx, p, LEN, 0, &mr), 0);	/* within the second: no new start */
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	/* a hint with no engine is dropped, as on a full queue: -EAGAIN, counted */
	CHECK_RC(odpx_prefetch(ctx, p, LEN, 0), -EAGAIN);
	st = stats_of(ctx);
	CHECK(st.prefetch_dropped == 1 && st.prefetch_queued == 0, "%s: a hint with no engine:"
	      " prefetch_dropped %lu (want 1), prefetch_queued %lu", l->what, U(st.prefetch_dropped),
	      U(st.prefetch_queued));
	CHECK(!engine_running(ctx), "%s: the engine runs", l->what);
	CHECK(st.direct_no_monitor == 0 && st.direct_no_engine == 2 && st.direct_regs == 2 &&
	      st.entries == 0, "%s: direct_no_monitor %lu (want 0), direct_no_engine %lu (want 2),"
	      " direct_regs %lu (want 2), entries %lu (want 0)", l->what, U(st.direct_no_monitor),
	      U(st.direct_no_engine), U(st.direct_regs), U(st.entries));
	l->lift();

	/* a miss a second after the failure starts the engine */
	deadline = now_s() + 20;
	while (!engine_running(ctx) && now_s() < deadline) {
		struct timespec t = { 0, 10 * 1000000 };
		CHECK_RC(odpx_reg(ctx, p, LEN, 0, &mr), 0);
		CHECK_RC(odpx_dereg(ctx, mr), 0);
		nanosleep(&t, NULL);
	}
	st = stats_of(ctx);
	CHECK(engine_running(ctx), "%s lifted: no engine 20 s later (direct_no_engine %lu,"
	      " direct_no_monitor %lu)", l->what, U(st.direct_no_engine), U(st.direct_no_monitor));
	CHECK(st.direct_no_monitor == 0, "%s: direct_no_monitor %lu", l->what, U(st.direct_no_monitor));

	/* it caches, and unpins what dies with no miss after it */
	CHECK_RC(odpx_reg(ctx, q, LEN, 0, &mr), 0);
	CHECK(data_check(ctx, mr, q, LEN, 7), "%s: data through the wrong pages", l->what);
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	st = stats_of(ctx);
	CHECK(st.entries >= 1, "%s: nothing cached with the engine running", l->what);
	uint64_t dead0 = st.dead_unpinned;
	CHECK(munmap(q, LEN) == 0, "munmap");
	CHECK(WAIT_FOR(stats_of(ctx).dead_unpinned > dead0, 10),
	      "%s: the munmapped entry is still pinned 10 s later", l->what);
	CHECK_RC(odpx_close(ctx), 0);
	CHECK_RC(odpx_close(first), 0);
	return 0;
}

int main(void)
{
	static const struct limit limits[] = {
		{ "no descriptor left", no_descriptor_left, descriptors_back },
		{ "no thread allowed", no_thread_allowed, threads_back },
	};

	for (unsigned i = 0; i < sizeof(limits) / sizeof(limits[0]); i++) {
		CHECK(run_forked(NULL, engine_refused, (void *)&limits[i]) == 0, "%s", limits[i].what);
		printf("%s: served direct (direct_no_engine), cached once lifted: ok\n",
		       limits[i].what);
	}
	return 0;
}
