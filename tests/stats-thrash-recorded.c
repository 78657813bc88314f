// SPDX-License-Identifier: MIT
/*
 * stats-thrash-recorded: the ODP-mode detector replays a memory cgroup's counters recorded
 * in the Soft-RoCE guest while an explicit ODP working set paged under memory.max
 * (tests/fixtures/traces/odp-memcg-rxe.trace, written by odpx-paging's memtrace experiment;
 * its header says where and how): the region written by the CPU past the limit, a warm-up
 * pass that faults the swapped-out part of a quarter of the limit back in, that quarter swept
 * steadily, twice the limit swept (over), then the quarter again (recovery).
 *
 * Each recorded sample (about 250 ms) is written as the cgroup's memory.stat and as
 * /proc/vmstat in a temporary tree, read back through src_memcg_read() and src_vmstat_read(),
 * and turned into the detector's inputs by thrash_mem_inputs(), as the library's engine does;
 * thrash_step() decides.  WINDOW_SAMPLES samples make one window of about a second, and the
 * thresholds are the defaults (window_ms 1000, mem_refault_rate 1000 pages/s), as in the
 * recording run: twice a 32 MiB limit refaults 600 to 2000 pages a second there, over the
 * default rate even under the emulator, and the steady and recovery phases none but short
 * bursts.
 *
 * Asserted, from the cgroup's memory.stat and from /proc/vmstat alone (the fallback, the
 * whole guest's pages): OK, THRASH, OK, changing state exactly twice; THRASH entered while
 * the working set is over memory.max (not in the warm-up, whose refaults last less than two
 * windows), left during the recovery, OK at the end.  And the replay agrees with the
 * library's own thrash callback in the recording run (the trace's last comment line): each
 * change within LIVE_SLACK_S seconds of the callback's report of that state.
 */
#include <math.h>
#include <sys/stat.h>

#include "test.h"
#include "../sysfs-stats/counters.h"

#define MAX_COLS	32
#define MAX_SAMPLES	1024
#define WINDOW_SAMPLES	4
#define LIVE_SLACK_S	2.0	/* two windows: the callback's windows start elsewhere */

/* The callback's reports in the recording run: state and seconds from the first sample. */
static struct { enum odpx_thrash_state state; double t; } live[32];
static unsigned nlive;

struct sample {
	double secs;
	char phase[16];
	uint64_t v[MAX_COLS];
};

static char names[MAX_COLS][64];
static unsigned ncols;
static struct sample samples[MAX_SAMPLES];
static unsigned nsamples;

static void load(const char *path)
{
	char line[2048];
	FILE *f;
	unsigned lineno = 0;

	CHECK((f = fopen(path, "r")), "%s: %s", path, strerror(errno));
	while (fgets(line, sizeof(line), f)) {
		char *tok, *save = NULL;

		lineno++;
		if (!strncmp(line, "# columns: secs phase ", 22)) {
			for (tok = strtok_r(line + 22, " \n", &save); tok; tok = strtok_r(NULL, " \n", &save)) {
				CHECK(ncols < MAX_COLS && strlen(tok) < sizeof(names[0]), "columns");
				snprintf(names[ncols++], sizeof(names[0]), "%s", tok);
			}
			continue;
		}
		if (!strncmp(line, "# the library's thrash callback in this run:", 44)) {
			char st[16];
			int n = 0;
			for (char *p = line + 44; nlive < 32 && sscanf(p, " %15s at %lf s%n", st, &live[nlive].t,
								   &n) == 2; p += n) {
				live[nlive].state = ODPX_THRASH_RESERVED;
				for (int k = 0; k < ODPX_THRASH_RESERVED; k++)
					if (!strcmp(st, thrash_state_str(k)))
						live[nlive].state = k;
				CHECK(live[nlive++].state != ODPX_THRASH_RESERVED, "%s:%u: state %s", path,
				      lineno, st);
			}
			continue;
		}
		if (line[0] == '#')
			continue;
		CHECK(ncols && nsamples < MAX_SAMPLES, "%s:%u: a sample before the columns", path, lineno);
		struct sample *s = &samples[nsamples++];
		CHECK((tok = strtok_r(line, " \n", &save)) && sscanf(tok, "%lf", &s->secs) == 1 &&
		      (tok = strtok_r(NULL, " \n", &save)) && strlen(tok) < sizeof(s->phase),
		      "%s:%u: bad line", path, lineno);
		snprintf(s->phase, sizeof(s->phase), "%s", tok);
		for (unsigned i = 0; i < ncols; i++) {
			char *end;
			CHECK((tok = strtok_r(NULL, " \n", &save)), "%s:%u: %u values, want %u", path,
			      lineno, i, ncols);
			s->v[i] = strtoull(tok, &end, 10);
			CHECK(!*end, "%s:%u: '%s'", path, lineno, tok);
		}
		CHECK(!strtok_r(NULL, " \n", &save), "%s:%u: more values than columns", path, lineno);
	}
	fclose(f);
	CHECK(nsamples > 0, "%s: no samples", path);
}

/* The columns with prefix @pfx ("memcg.", "vmstat.") of @s as a "name value" file. */
static void write_kv(const char *path, const struct sample *s, const char *pfx)
{
	FILE *f;

	CHECK((f = fopen(path, "w")), "%s: %s", path, strerror(errno));
	for (unsigned i = 0; i < ncols; i++)
		if (!strncmp(names[i], pfx, strlen(pfx)))
			fprintf(f, "%s %lu\n", names[i] + strlen(pfx), (unsigned long)s->v[i]);
	CHECK(fclose(f) == 0, "write %s", path);
}

struct window {
	char phase[16];
	enum odpx_thrash_state state;
	double end_s;		/* from the first sample */
	bool changed;
};

/* Replays the trace; returns the number of windows, their states in @w, changes in @flips. */
static unsigned replay(const char *root, const struct thrash_cfg *cfg, unsigned per_window,
		       bool memcg, struct window *w, unsigned *flips)
{
	char sys[PATH_MAX], proc[PATH_MAX], path[PATH_MAX + 64];
	struct ctr_set sets[2], *prev = &sets[0], *cur = &sets[1];
	struct stats_roots r;
	struct thrash th;
	unsigned nw = 0;
	double secs = 0, t = 0;

	snprintf(sys, sizeof(sys), "%s/sys", root);
	snprintf(proc, sizeof(proc), "%s/proc", root);
	stats_roots_init(&r, sys, NULL, proc);
	ctr_set_init(prev);
	ctr_set_init(cur);
	thrash_init(&th, cfg);
	*flips = 0;
	snprintf(path, sizeof(path), "%s/sys/fs/cgroup/job/memory.stat", root);
	if (!memcg)
		unlink(path);
	for (unsigned i = 0; i < nsamples; i++) {
		secs += samples[i].secs;
		if (i)
			t += samples[i].secs;
		if (i && i % per_window && i + 1 < nsamples)
			continue;
		ctr_set_clear(cur);
		if (memcg) {
			write_kv(path, &samples[i], "memcg.");
			CHECK(src_memcg_read(&r, 4242, cur) > 0, "sample %u: no memcg counter", i);
		}
		snprintf(path + strlen(root), sizeof(path) - strlen(root), "/proc/vmstat");
		write_kv(path, &samples[i], "vmstat.");
		snprintf(path, sizeof(path), "%s/sys/fs/cgroup/job/memory.stat", root);
		CHECK(src_vmstat_read(&r, cur) > 0, "sample %u: no vmstat counter", i);
		if (i) {	/* the first sample only sets the base */
			struct thrash_in in = { .secs = secs };
			enum ctr_source src = thrash_mem_inputs(prev, cur, &in);

			CHECK(src == (memcg ? SRC_MEMCG : SRC_VMSTAT), "sample %u: source %d", i, src);
			w[nw].changed = thrash_step(&th, &in);
			*flips += w[nw].changed;
			snprintf(w[nw].phase, sizeof(w[nw].phase), "%s", samples[i].phase);
			w[nw].state = th.state;
			w[nw++].end_s = t;
		}
		secs = 0;
		struct ctr_set *x = prev;
		prev = cur;
		cur = x;
	}
	ctr_set_free(prev);
	ctr_set_free(cur);
	return nw;
}

/* "OK(start 2, write 7) THRASH(fit 2) ...": the states in turn, with their windows per phase. */
static void describe(const struct window *w, unsigned nw, char *out, size_t len)
{
	size_t n = 0;

	out[0] = 0;
	for (unsigned i = 0; i < nw; i++) {
		bool new_state = !i || w[i].state != w[i - 1].state;
		unsigned k = 1;

		while (i + k < nw && w[i + k].state == w[i].state && !strcmp(w[i + k].phase, w[i].phase))
			k++;
		n += (size_t)snprintf(out + n, len - n, "%s%s%s%s %u", new_state && i ? ") " : "",
				      new_state ? thrash_state_str(w[i].state) : ", ",
				      new_state ? "(" : "", w[i].phase, k);
		i += k - 1;
		if (n >= len)
			break;
	}
	if (n < len)
		snprintf(out + n, len - n, ")");
}

/* The replay's changes against the callback's reports within the trace's span. */
static void against_live(const struct window *w, unsigned nw, const char *src)
{
	unsigned in_span = 0, matched = 0;

	for (unsigned k = 0; k < nlive; k++)
		in_span += live[k].t <= w[nw - 1].end_s;
	for (unsigned i = 0; i < nw; i++) {
		if (!w[i].changed)
			continue;
		bool found = false;
		for (unsigned k = 0; k < nlive; k++)
			if (live[k].state == w[i].state && fabs(live[k].t - w[i].end_s) <= LIVE_SLACK_S)
				found = true;
		CHECK(found, "%s: %s at %.2f s, and the callback said no such thing within %.1f s", src,
		      thrash_state_str(w[i].state), w[i].end_s, LIVE_SLACK_S);
		printf("%s %s at %.2f s", matched++ ? "," : "    replay:", thrash_state_str(w[i].state),
		       w[i].end_s);
	}
	CHECK(matched == in_span, "%s: %u changes in the replay, the callback reported %u in the "
	      "trace's %.1f s", src, matched, in_span, w[nw - 1].end_s);
	printf("; the library's callback in the recording run:");
	for (unsigned k = 0; k < in_span; k++)
		printf("%s %s at %.2f s", k ? "," : "", thrash_state_str(live[k].state), live[k].t);
	printf("\n");
}

/* Where the states change: OK, THRASH entered while over memory.max, OK within the recovery. */
static void check_phases(const struct window *w, unsigned nw, unsigned flips, const char *src)
{
	static const char *const before[] = { "start", "write", "warmup", "steady" };
	int entered = -1, left = -1;

	CHECK(flips == 2, "%s: %u state changes, want 2 (OK, THRASH, OK)", src, flips);
	for (unsigned i = 0; i < nw; i++) {
		CHECK(w[i].state != ODPX_THRASH_WARMING, "%s: WARMING in window %u (%s)", src, i,
		      w[i].phase);
		if (w[i].changed && w[i].state == ODPX_THRASH_THRASH)
			entered = (int)i;
		if (w[i].changed && w[i].state == ODPX_THRASH_OK)
			left = (int)i;
		for (size_t k = 0; k < sizeof(before) / sizeof(before[0]); k++)
			CHECK(strcmp(w[i].phase, before[k]) || w[i].state == ODPX_THRASH_OK,
			      "%s: %s in window %u, the %s phase", src, thrash_state_str(w[i].state), i,
			      w[i].phase);
	}
	CHECK(entered >= 0 && !strcmp(w[entered].phase, "over"), "%s: THRASH not entered while over "
	      "memory.max", src);
	CHECK(left > entered && !strcmp(w[left].phase, "recovery"), "%s: THRASH not left in the "
	      "recovery", src);
	CHECK(w[nw - 1].state == ODPX_THRASH_OK && !strcmp(w[nw - 1].phase, "recovery"),
	      "%s: the trace does not end OK in the recovery", src);
}

int main(void)
{
	char root[] = "/tmp/odpx-recorded-XXXXXX", path[PATH_MAX + 64], fx[PATH_MAX], desc[4096];
	static struct window w[MAX_SAMPLES];
	struct thrash_cfg cfg;
	unsigned nw, flips;
	FILE *f;

	find_fixtures(fx, sizeof(fx), "traces");
	snprintf(path, sizeof(path), "%s/traces/odp-memcg-rxe.trace", fx);
	load(path);
	CHECK(nlive > 0, "%s: no line of the library's callback reports", path);

	CHECK(mkdtemp(root), "mkdtemp");
	const char *dirs[] = { "/proc", "/proc/4242", "/sys", "/sys/fs", "/sys/fs/cgroup",
			       "/sys/fs/cgroup/job" };
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		snprintf(path, sizeof(path), "%s%s", root, dirs[i]);
		CHECK(mkdir(path, 0755) == 0, "mkdir %s", path);
	}
	snprintf(path, sizeof(path), "%s/proc/4242/cgroup", root);
	f = fopen(path, "w");
	CHECK(f && fputs("0::/job\n", f) >= 0 && fclose(f) == 0, "write %s", path);

	thrash_cfg_default(&cfg);
	for (int memcg = 1; memcg >= 0; memcg--) {
		const char *src = memcg ? "memory.stat" : "/proc/vmstat";

		nw = replay(root, &cfg, WINDOW_SAMPLES, memcg, w, &flips);
		describe(w, nw, desc, sizeof(desc));
		printf("%s: %u samples, %u windows, %u state changes: %s\n", src, nsamples, nw, flips,
		       desc);
		check_phases(w, nw, flips, src);
		against_live(w, nw, src);
	}

	snprintf(path, sizeof(path), "rm -rf %s", root);
	CHECK(system(path) == 0, "rm");
	return 0;
}
