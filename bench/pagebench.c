// SPDX-License-Identifier: MIT
/*
 * pagebench - odpx's standard workloads on the active backend and mode, one
 * report.
 *
 *   build/pagebench [--quick] [--only W1,W2,W3,W4,W5,WT,LRU,MEM,PF,UCX,SCALE]
 *                   [--pin-budget BYTES[KMG]] [--seed N]
 *
 * The workloads live in sibling programs, each runnable alone with the same
 * options: cache-hit (W1 W2 W5 WT), cache-miss (W3 LRU MEM), invalidate (W4),
 * prefetch (PF), scaling (SCALE: 1 to 16 threads on one context, own
 * buffers and a shared pool, beside the model and UCX; full runs only) and,
 * where UCX is installed, ucx-rcache (UCX's registration cache under W1 W2
 * W3 W5; a separate process because libucs hooks mmap and munmap).  pagebench runs them one after the other, echoes their key=value
 * lines verbatim, then prints a readable report: every measurement, every
 * target next to its value (informative, never asserted) and, in a full run,
 * the odpx/UCX ratios.  A ratio is always of two numbers from the same run;
 * the UCX ones pair odpx's null backend (no pinning) with UCX's rcache under
 * trivial callbacks, both being "the cache alone".
 *
 * --quick is the README's main job: it must finish in well under 30 s on a
 * 2-CPU machine.  The machine's load average is printed before and after,
 * and every figure whose measuring threads had the CPU for less than 90% of
 * the wall time (cpu_share) is listed as contended: on a busy machine the
 * 2-thread and wake-up figures say more about the neighbours than about odpx.
 */
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <spawn.h>
#include <sys/wait.h>

#include "bench.h"

extern char **environ;

#define MAX_LINES 512
#define MAX_KV 64

/* One key=value line of a program, split in place (a private copy). */
struct line {
	char *key[MAX_KV], *val[MAX_KV];
	int n;
};

static struct line lines[MAX_LINES];
static int nlines;
static struct bench_opts o;
static char dir[PATH_MAX];

static const char *get(const struct line *l, const char *key)
{
	for (int i = 0; i < l->n; i++)
		if (!strcmp(l->key[i], key))
			return l->val[i];
	return NULL;
}

static double num(const struct line *l, const char *key)
{
	const char *v = get(l, key);

	return v ? strtod(v, NULL) : -1;
}

static void store(const char *text)
{
	struct line *l;
	char *p, *save;

	if (text[0] == '#' || !strchr(text, '=') || nlines == MAX_LINES)
		return;
	l = &lines[nlines++];
	p = strdup(text);
	for (char *tok = strtok_r(p, " \n", &save); tok && l->n < MAX_KV;
	     tok = strtok_r(NULL, " \n", &save)) {
		char *eq = strchr(tok, '=');
		if (!eq)
			continue;
		*eq = 0;
		l->key[l->n] = tok;
		l->val[l->n++] = eq + 1;
	}
}

static const struct line *find(const char *workload, const char *cas, const char *backend)
{
	for (int i = 0; i < nlines; i++) {
		const struct line *l = &lines[i];
		const char *w = get(l, "workload"), *c = get(l, "case"), *b = get(l, "backend");
		if (w && c && b && !strcmp(w, workload) && !strcmp(c, cas) && !strcmp(b, backend))
			return l;
	}
	return NULL;
}

/* The --only list a program gets: the selected names it knows, or NULL for all. */
static bool pass_only(const char *const *names, int n, char *out, size_t len)
{
	bool any = false;

	out[0] = 0;
	if (!o.only)
		return true;
	for (int i = 0; i < n; i++) {
		if (!selected(&o, names[i]))
			continue;
		snprintf(out + strlen(out), len - strlen(out), "%s%s", any ? "," : "", names[i]);
		any = true;
	}
	return any;
}

/* Run a sibling program, echo and keep its lines; its exit status. */
static int run(const char *prog, const char *only)
{
	char path[PATH_MAX + 64], budget[32], seed[32];
	char *argv[12];
	int argc = 0, fds[2], st;
	posix_spawn_file_actions_t fa;
	pid_t pid;
	FILE *f;
	char *buf = NULL;
	size_t cap = 0;

	snprintf(path, sizeof(path), "%s/%s", dir, prog);
	snprintf(budget, sizeof(budget), "%lu", (unsigned long)o.pin_budget);
	snprintf(seed, sizeof(seed), "%lu", (unsigned long)o.seed);
	argv[argc++] = path;
	if (o.quick)
		argv[argc++] = "--quick";
	if (only && *only) {
		argv[argc++] = "--only";
		argv[argc++] = (char *)only;
	}
	argv[argc++] = "--pin-budget";
	argv[argc++] = budget;
	argv[argc++] = "--seed";
	argv[argc++] = seed;
	argv[argc] = NULL;

	if (pipe2(fds, O_CLOEXEC))
		DIE("pipe: %s", strerror(errno));
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
	st = posix_spawn(&pid, path, &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(fds[1]);
	if (st) {
		close(fds[0]);
		printf("# %s: cannot run: %s (build it: ./configure.py && ninja bench)\n", path,
		       strerror(st));
		return -1;
	}
	f = fdopen(fds[0], "r");
	while (getline(&buf, &cap, f) > 0) {
		fputs(buf, stdout);
		store(buf);
	}
	fclose(f);
	free(buf);
	if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) {
		printf("# %s failed (%s %d)\n", prog, WIFSIGNALED(st) ? "signal" : "exit",
		       WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
		return -1;
	}
	return 0;
}

static void loadavg(const char *when)
{
	char buf[128] = "?";
	FILE *f = fopen("/proc/loadavg", "re");

	if (f) {
		if (!fgets(buf, sizeof(buf), f))
			strcpy(buf, "?");
		fclose(f);
	}
	buf[strcspn(buf, "\n")] = 0;
	printf("# load average %s: %s\n", when, buf);
}

static void read_line(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "re");

	snprintf(buf, len, "?");
	if (f) {
		if (!fgets(buf, (int)len, f))
			snprintf(buf, len, "?");
		fclose(f);
	}
	buf[strcspn(buf, "\n")] = 0;
}

/* The backend and mode a default context gets here, and the uffd mode. */
static int header(void)
{
	struct odpx_ctx *ctx;
	struct odpx_mr *mr;
	enum odpx_mode m;
	const char *reason;
	char thp[96], maxmap[32];
	char *buf = map_anon(64 * KiB, true);
	int r = odpx_open_uring(NULL, &ctx);
	struct rlimit rl;

	read_line("/sys/kernel/mm/transparent_hugepage/enabled", thp, sizeof(thp));
	read_line("/proc/sys/vm/max_map_count", maxmap, sizeof(maxmap));
	getrlimit(RLIMIT_MEMLOCK, &rl);
	printf("# odpx pagebench (%s run)\n", o.quick ? "quick" : "full");
	printf("# kernel %s, %d CPUs, page %ld bytes, THP %s, max_map_count %s\n",
	       bench_env.kernel, bench_env.ncpu, bench_env.page, thp, maxmap);
	printf("# RLIMIT_MEMLOCK %lu, euid %u; uring cases pin at most %lu bytes (--pin-budget)\n",
	       (unsigned long)rl.rlim_cur, (unsigned)geteuid(), (unsigned long)o.pin_budget);
	if (r < 0) {
		printf("# backend uring: cannot open: %s (%s)\n", strerror(-r), odpx_last_reason());
		return r;
	}
	CHECK_ODPX(odpx_mode_get(ctx, &m, &reason));
	r = odpx_reg(ctx, buf, 64 * KiB, ODPX_ACCESS_LOCAL_WRITE, &mr);	/* attaches the monitor */
	if (r == 0)
		odpx_dereg(ctx, mr);
	struct monitor_usage u;
	monitor_usage(&u);
	printf("# active: backend uring, mode %s (%s); userfaultfd mode %s\n",
	       odpx_mode_str(m), reason, u.mode);
	printf("workload=ENV case=active backend=uring mode=%s kernel=%s page_bytes=%ld"
	       " uffd_mode=%s cpus=%d pin_budget=%lu quick=%d\n", odpx_mode_str(m),
	       bench_env.kernel, bench_env.page, u.mode, bench_env.ncpu,
	       (unsigned long)o.pin_budget, o.quick);
	odpx_close(ctx);
	munmap(buf, 64 * KiB);
	return 0;
}

static void print_measurements(void)
{
	printf("\n== measurements (median and p99 over repetitions of batches) ==\n");
	printf("  %-5s %-32s %-13s %8s %12s %12s\n", "work", "case", "backend", "n",
	       "median", "p99");
	for (int i = 0; i < nlines; i++) {
		const struct line *l = &lines[i];
		if (!get(l, "median_ns") || !strcmp(get(l, "workload") ?: "", "W2F"))
			continue;	/* W2F: a table of its own */
		printf("  %-5s %-32s %-13s %8s %9.1f ns %9.1f ns\n", get(l, "workload"),
		       get(l, "case"), get(l, "backend"), get(l, "n"), num(l, "median_ns"),
		       num(l, "p99_ns"));
	}
}

static void print_targets(void)
{
	int met = 0, missed = 0, na = 0;

	printf("\n== targets (informative, never asserted) ==\n");
	printf("  %-11s %-28s %-8s %-44s %12s %9s  %s\n", "work", "case", "backend", "value",
	       "measured", "target", "met");
	for (int i = 0; i < nlines; i++) {
		const struct line *l = &lines[i];
		const char *t = get(l, "target"), *m = get(l, "met");
		const char *what = get(l, "what"), *key = "ratio";
		if (!t || !m)
			continue;
		if (!get(l, "ratio"))
			key = get(l, "bytes_per_entry") ? "bytes_per_entry" : "median_ns";
		if (!what)
			what = !strcmp(key, "median_ns") ? "median ns" : "bytes per entry";
		printf("  %-11s %-28s %-8s %-44s %12.3f %9s  %s\n", get(l, "workload"),
		       get(l, "case"), get(l, "backend"), what, num(l, key), t, m);
		*(!strcmp(m, "yes") ? &met : !strcmp(m, "n/a") ? &na : &missed) += 1;
	}
	printf("  %d met, %d not met, %d not applicable here (a 16-CPU target on fewer CPUs)\n",
	       met, missed, na);
}

/* A table of the lines that carry @key: one row per case, one column per key. */
struct col { const char *head, *key; int prec; };

static int col_width(const struct col *c)
{
	return strlen(c->head) > 12 ? (int)strlen(c->head) : 12;
}

static void print_table(const char *title, const char *key, const struct col *c, size_t nc)
{
	int n = 0;

	for (int i = 0; i < nlines; i++) {
		const struct line *l = &lines[i];
		if (num(l, key) < 0)
			continue;
		if (!n++) {
			printf("\n== %s ==\n  %-24s", title, "case");
			for (size_t k = 0; k < nc; k++)
				printf(" %*s", col_width(&c[k]), c[k].head);
			putchar('\n');
		}
		printf("  %-24s", get(l, "case") ?: "?");
		for (size_t k = 0; k < nc; k++)
			printf(" %*.*f", col_width(&c[k]), c[k].prec, num(l, c[k].key));
		putchar('\n');
	}
}

/*
 * W4's cached munmap beside the references measured in the same rounds
 * (invalidate.c): the better of two bare userfaultfd readers with no odpx,
 * and the TLB shootdown that any thread awake in the process costs munmap.
 * W3's overhead beside its budget (10% of the raw pin and unpin), over the
 * raw replace (one update, as odpx does), and the cache's miss alone on the
 * null backend, warm and right after the raw replace's system call
 * (cache-miss.c).  W2's floor: the least a reference-counted hit can do
 * with a hash that never collides (cache-hit.c, W2M).
 */
static void print_parts(void)
{
	static const struct col w4[] = {
		{ "cached/wake", "ratio", 2 }, { "bare/wake", "bare_over_wakeup", 2 },
		{ "cached/bare", "cached_over_bare", 2 }, { "shootdown ns", "shootdown_ns", 0 },
	}, w3[] = {
		{ "budget", "budget_ns", 1 }, { "odpx - raw", "odpx_minus_raw_ns", 1 },
		{ "odpx - replace", "odpx_minus_raw_replace_ns", 1 },
		{ "null (warm)", "null_miss_ns", 1 },
		{ "null after syscall", "null_miss_between_syscalls_ns", 1 },
	}, w2m[] = {
		{ "median ns", "median_ns", 1 }, { "x model-1", "model_ratio", 3 },
	};

	print_table("W4 cached munmap beside a bare userfaultfd reader (no odpx)",
		    "bare_over_wakeup", w4, sizeof(w4) / sizeof(w4[0]));
	print_table("W3 overhead, in ns: over the raw pin+unpin (the target) and over the raw"
		    " replace (one update that unpins and pins, as odpx does)",
		    "null_miss_between_syscalls_ns", w3, sizeof(w3) / sizeof(w3[0]));
	print_table("W2 floor, no odpx: get (CAS) + release of 64-byte records, each at its"
		    " own hash slot, in W2's random order", "model_ratio", w2m,
		    sizeof(w2m) / sizeof(w2m[0]));
}

/* W2 over growing sets (cache-hit.c): the step where the entries outgrow L2. */
static void print_footprint(void)
{
	int n = 0;

	for (int i = 0; i < nlines; i++) {
		const struct line *l = &lines[i];
		if (strcmp(get(l, "workload") ?: "", "W2F"))
			continue;
		if (!n++)
			printf("\n== W2 by footprint (null backend; a hit touches ~one random 64-byte"
			       " entry line; L2 %.0f KiB) ==\n  %8s %14s %10s %8s\n",
			       num(l, "l2_bytes") / 1024, "buffers", "entries KiB", "median",
			       "x W1");
		printf("  %8s %14.0f %7.1f ns %8.2f\n", get(l, "n"),
		       num(l, "entry_footprint_bytes") / 1024, num(l, "median_ns"),
		       num(l, "over_w1"));
	}
}

/*
 * A measuring thread that had the CPU for less than 90% of the wall time
 * shared it with something else: its figure says more about the machine.
 */
static void print_contention(void)
{
	int n = 0;

	for (int i = 0; i < nlines; i++) {
		const struct line *l = &lines[i];
		double share = num(l, "cpu_share");
		if (share < 0 || share >= 0.9)
			continue;
		if (!n++)
			printf("\n== contended (the measuring threads had the CPU < 90%% of"
			       " the time; rerun on a quiet machine) ==\n");
		printf("  %-5s %-22s %-13s cpu_share %.2f\n", get(l, "workload"), get(l, "case"),
		       get(l, "backend"), share);
	}
}

/*
 * SCALE (scaling.c): per shape and thread count, odpx's throughput and its
 * ratio to one thread, beside the model (plain and serialized) and UCX at
 * the same count in the same run.
 */
static void print_scaling(void)
{
	int n = 0;

	for (int i = 0; i < nlines; i++) {
		const struct line *l = &lines[i], *m, *ms, *u, *ur;
		const char *cas = get(l, "case");
		if (strcmp(get(l, "workload") ?: "", "SCALE") || strcmp(get(l, "backend") ?: "", "null"))
			continue;
		m = find("SCALE", cas, "model");
		ms = find("SCALE", cas, "model-serial");
		u = find("SCALE", cas, "ucx-rcache");
		ur = find("SCALE", cas, "uring");
		if (!n++)
			printf("\n== SCALE: one context, default flags, N threads (Mops of all; ns per"
			       " op per thread; x1: over 1 thread) ==\n  %-22s %4s %8s %8s %6s %8s"
			       " %8s %9s %10s %8s %9s %8s\n", "case", "over", "null", "ns", "x1",
			       "uring", "model", "null/mod", "null/serial", "ucx", "null/ucx", "share");
		printf("  %-22s %4s %8.2f %8.1f %6.2f %8.2f %8.2f %9.3f %10.3f %8.2f %9.2f %8.2f\n",
		       cas, num(l, "oversubscribed") > 0 ? "yes" : "no", num(l, "mops"),
		       num(l, "median_ns"), num(l, "scaling"), ur ? num(ur, "mops") : 0,
		       m ? num(m, "mops") : 0, num(l, "over_model_ns"),
		       ms ? num(l, "over_serial_model_ns") : 0, u ? num(u, "mops") : 0,
		       u ? num(l, "mops") / num(u, "mops") : 0, num(l, "cpu_share"));
	}
	if (n)
		printf("  (null/mod, null/serial: time ratios; null/ucx: throughput ratio; a 0 is a"
		       " figure not measured)\n");
}

/* odpx (null backend: the cache alone) against UCX's rcache, same cases. */
static void print_ucx(void)
{
	static const struct { const char *w, *c; } pairs[] = {
		{ "W1", "hit-64KiB" }, { "W2", "10000x64KiB" }, { "W2", "100000x4KiB" },
		{ "W3", "miss-4KiB" }, { "W3", "miss-64KiB" }, { "W3", "miss-1MiB" },
		{ "W5", "shared-ctx" }, { "W5", "own-ctx" },
	};

	printf("\n== odpx vs UCX ucs_rcache (time ratio: below 1 means odpx is faster) ==\n");
	for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
		const struct line *a = find(pairs[i].w, pairs[i].c, "null");
		const struct line *u = find(pairs[i].w, pairs[i].c, "ucx-rcache");
		if (!a || !u)
			continue;
		kv_ratio(pairs[i].w, pairs[i].c, "null-vs-ucx-rcache", get(a, "mode"),
			 "odpx_null_median_ns/ucx_median_ns", num(a, "median_ns"),
			 num(u, "median_ns"), 0, 0, "odpx_ns=%.1f ucx_ns=%.1f",
			 num(a, "median_ns"), num(u, "median_ns"));
	}
}

int main(int argc, char **argv)
{
	static const char *const hit[] = { "W1", "W2", "W5", "WT" },
			  *const miss[] = { "W3", "LRU", "MEM" },
			  *const inval[] = { "W4" }, *const pf[] = { "PF" },
			  *const ucx[] = { "W1", "W2", "W3", "W5" };
	char self[PATH_MAX], only[64];
	ssize_t n;
	uint64_t t0 = now_ns();
	int fails = 0;
	bool ucx_wanted;

	bench_init(argc, argv, &o,
		   "W1, W2, W3, W4, W5, WT, LRU, MEM, PF, UCX, SCALE (comma-separated)");
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		DIE("readlink /proc/self/exe: %s", strerror(errno));
	self[n] = 0;
	snprintf(dir, sizeof(dir), "%s", dirname(self));

	header();
	loadavg("before");
	if (pass_only(hit, 4, only, sizeof(only)))
		fails += run("cache-hit", only) < 0;
	if (pass_only(miss, 3, only, sizeof(only)))
		fails += run("cache-miss", only) < 0;
	if (pass_only(inval, 1, only, sizeof(only)))
		fails += run("invalidate", only) < 0;
	if (pass_only(pf, 1, only, sizeof(only)))
		fails += run("prefetch", only) < 0;
	if (!o.quick && selected(&o, "SCALE"))
		fails += run("scaling", NULL) < 0;

	ucx_wanted = !o.quick && (!o.only || selected(&o, "UCX"));
	if (ucx_wanted) {
		char path[PATH_MAX + 16];
		snprintf(path, sizeof(path), "%s/ucx-rcache", dir);
		if (access(path, X_OK)) {
			printf("ucx=not-installed: %s absent (Debian: ./configure.py"
			       " --install-deps=bench && ninja bench)\n", path);
		} else {
			struct bench_opts keep = o;
			if (o.only && !pass_only(ucx, 4, only, sizeof(only)))
				o.only = NULL;	/* --only UCX alone: all of its workloads */
			fails += run("ucx-rcache", o.only ? only : NULL) < 0;
			o = keep;
		}
	}
	loadavg("after");

	print_measurements();
	print_targets();
	print_parts();
	print_footprint();
	print_scaling();
	print_contention();
	if (ucx_wanted)
		print_ucx();
	printf("\n# pagebench: %.1f s, %d program(s) failed\n", (now_ns() - t0) / 1e9, fails);
	return fails ? 1 : 0;
}
