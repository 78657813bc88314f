// SPDX-License-Identifier: MIT
/*
 * stats-thrash-memcg: the ODP-mode detector's memory side.
 *
 * 1. src_memcg_read() over the fixture tree tests/fixtures/memcg: a process's
 *    cgroup v2 path from <proc>/<pid>/cgroup, its memory.stat under
 *    <sys>/fs/cgroup (or fs/cgroup/unified, the hybrid layout), the refault,
 *    major fault and scan counters with their values; nothing from a process
 *    in cgroup v1 only; a garbage value is an error, never a counter.
 * 2. The trace traces/odp-memcg.trace (make-traces.py): windows of an ODP
 *    context's per-MR netlink statistics (page_faults, page_invalidations)
 *    and its cgroup's memory.stat, each window written as a memory.stat file
 *    and read back through src_memcg_read().  The detector must report
 *    OK, WARMING, OK, THRASH, OK, changing state exactly four times (a
 *    single window of refaults in the steady phase and a quiet window in the
 *    thrash change nothing): from both sources, from the cgroup alone, and
 *    from the per-MR statistics alone.
 */
#include <sys/stat.h>

#include "test.h"
#include "../sysfs-stats/counters.h"

static char fx[PATH_MAX];

static uint64_t value_of(const struct ctr_set *s, const char *name)
{
	bool found = false;
	uint64_t v = ctr_sum(s, SRC_MEMCG, name, &found);

	CHECK(found, "no memcg counter %s", name);
	return v;
}

static void test_sources(void)
{
	char sys[PATH_MAX + 16], proc[PATH_MAX + 16];
	struct stats_roots r;
	struct ctr_set s;

	snprintf(sys, sizeof(sys), "%s/memcg/sys", fx);
	snprintf(proc, sizeof(proc), "%s/memcg/proc", fx);
	stats_roots_init(&r, sys, NULL, proc);
	ctr_set_init(&s);

	CHECK_RC(src_memcg_read(&r, 4242, &s), 6);
	CHECK(value_of(&s, "workingset_refault_anon") == 81234 &&
	      value_of(&s, "workingset_refault_file") == 1200 && value_of(&s, "pgmajfault") == 90123 &&
	      value_of(&s, "pgscan") == 512345 && value_of(&s, "pgfault") == 2345678,
	      "memory.stat values");
	CHECK(!strcmp(ctr_find(&s, SRC_MEMCG, "/odpx.slice/run-1.scope", "pgsteal") ?
		      "found" : "", "found"), "where: the cgroup's path");
	CHECK(s.nerr == 0, "errors: %s", s.err[0].msg);

	ctr_set_clear(&s);
	CHECK_RC(src_memcg_read(&r, 4343, &s), 3);	/* hybrid: fs/cgroup/unified */
	CHECK(value_of(&s, "workingset_refault") == 777, "hybrid layout");

	ctr_set_clear(&s);
	CHECK_RC(src_memcg_read(&r, 4444, &s), 0);	/* cgroup v1 only */
	CHECK(s.n == 0 && s.nerr == 0, "v1 only: %zu counters, %zu errors", s.n, s.nerr);
	CHECK_RC(src_memcg_read(&r, 999999, &s), 0);	/* no such process */

	ctr_set_clear(&s);
	CHECK_RC(src_memcg_read(&r, 4545, &s), 1);	/* pgscan only */
	CHECK(s.nerr == 3, "garbage: %zu errors, want 3", s.nerr);
	CHECK(!ctr_find(&s, SRC_MEMCG, "/bad.scope", "workingset_refault_anon"), "a garbage counter");
	ctr_set_free(&s);
	printf("memcg sources: v2, hybrid, v1-only and garbage trees read as expected\n");
}

static enum odpx_thrash_state state_of(const char *s)
{
	for (int i = 0; i < ODPX_THRASH_RESERVED; i++)
		if (!strcmp(s, thrash_state_str(i)))
			return i;
	FAIL("bad state '%s' in a trace", s);
}

/* Write one window's memory.stat into the temporary tree @root. */
static void write_stat(const char *root, const uint64_t *v)
{
	char path[PATH_MAX + 64];
	FILE *f;

	snprintf(path, sizeof(path), "%s/sys/fs/cgroup/job/memory.stat", root);
	CHECK((f = fopen(path, "w")), "%s: %s", path, strerror(errno));
	fprintf(f, "anon 104857600\nfile 0\nworkingset_refault_anon %lu\n"
		"workingset_refault_file %lu\nworkingset_activate_anon 0\npgscan %lu\n"
		"pgsteal %lu\npgfault %lu\npgmajfault %lu\n", (unsigned long)v[2],
		(unsigned long)v[3], (unsigned long)v[5], (unsigned long)v[5] / 2,
		(unsigned long)(v[0] + v[4]), (unsigned long)v[4]);
	CHECK(fclose(f) == 0, "write %s", path);
}

/* Returns the number of state changes; @dev, @mem: which sources the detector gets. */
static unsigned run_trace(const char *root, bool dev, bool mem)
{
	char path[PATH_MAX + 64], line[512], expect[16];
	struct ctr_set sets[2], *prev = &sets[0], *cur = &sets[1];
	struct stats_roots r;
	struct thrash_cfg cfg;
	struct thrash t;
	unsigned lineno = 0, flips = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/traces/odp-memcg.trace", fx);
	CHECK((f = fopen(path, "r")), "%s: %s", path, strerror(errno));
	snprintf(path, sizeof(path), "%s/sys", root);
	snprintf(line, sizeof(line), "%s/proc", root);
	stats_roots_init(&r, path, NULL, line);
	ctr_set_init(prev);
	ctr_set_init(cur);
	thrash_cfg_default(&cfg);
	thrash_init(&t, &cfg);
	while (fgets(line, sizeof(line), f)) {
		uint64_t v[6];
		double secs;

		lineno++;
		if (line[0] == '#')
			continue;
		CHECK(sscanf(line, "%lf %lu %lu %lu %lu %lu %lu %15s", &secs, &v[0], &v[1], &v[2],
			     &v[3], &v[4], &v[5], expect) == 8, "odp-memcg.trace:%u: bad line", lineno);
		ctr_set_clear(cur);
		if (mem) {
			write_stat(root, v);
			CHECK(src_memcg_read(&r, 4242, cur) > 0, "window %u: no memcg counter", lineno);
		}
		if (dev) {
			ctr_add(cur, SRC_NL_MR, "rxe0/mr7", "page_faults", v[0], false);
			ctr_add(cur, SRC_NL_MR, "rxe0/mr7", "page_invalidations", v[1], false);
		}
		struct thrash_in in = { .secs = secs };
		if (lineno > 2) {	/* the first sample only sets the base */
			thrash_dev_inputs(prev, cur, &in);
			thrash_mem_inputs(prev, cur, &in);
			CHECK(in.have_dev == dev && in.have_mem == mem, "sources seen");
		} else {
			snprintf(expect, sizeof(expect), "OK");
		}
		if (thrash_step(&t, &in))
			flips++;
		CHECK(t.state == state_of(expect), "%s%s: odp-memcg.trace:%u: state %s (metric %s %.3f), "
		      "want %s", dev ? "netlink" : "", mem ? "+memcg" : "", lineno,
		      thrash_state_str(t.state), thrash_metric_str(t.metric), t.value, expect);
		struct ctr_set *x = prev;
		prev = cur;
		cur = x;
	}
	fclose(f);
	ctr_set_free(prev);
	ctr_set_free(cur);
	printf("odp-memcg.trace from %s%s: %u windows, %u state changes\n", dev ? "per-MR netlink " : "",
	       mem ? "memory cgroup" : "", lineno - 1, flips);
	return flips;
}

int main(void)
{
	char root[] = "/tmp/odpx-memcg-XXXXXX", path[PATH_MAX];

	find_fixtures(fx, sizeof(fx), "memcg");
	test_sources();

	CHECK(mkdtemp(root), "mkdtemp");
	snprintf(path, sizeof(path), "%s/proc", root);
	CHECK(mkdir(path, 0755) == 0, "mkdir");
	snprintf(path, sizeof(path), "%s/proc/4242", root);
	CHECK(mkdir(path, 0755) == 0, "mkdir");
	snprintf(path, sizeof(path), "%s/proc/4242/cgroup", root);
	FILE *f = fopen(path, "w");
	CHECK(f && fputs("0::/job\n", f) >= 0 && fclose(f) == 0, "write %s", path);
	const char *dirs[] = { "/sys", "/sys/fs", "/sys/fs/cgroup", "/sys/fs/cgroup/job" };
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		snprintf(path, sizeof(path), "%s%s", root, dirs[i]);
		CHECK(mkdir(path, 0755) == 0, "mkdir %s", path);
	}

	CHECK(run_trace(root, true, true) == 4, "both sources: not 4 state changes");
	CHECK(run_trace(root, false, true) == 4, "memory cgroup alone: not 4 state changes");
	CHECK(run_trace(root, true, false) == 4, "per-MR statistics alone: not 4 state changes");

	char cmd[PATH_MAX + 16];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
	CHECK(system(cmd) == 0, "rm");
	return 0;
}
