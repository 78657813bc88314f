// SPDX-License-Identifier: MIT
/*
 * odpx-paging.c - paging experiments: one NDJSON line per sample and PNG
 * plots (gnuplot, bench/odpx-paging.gp) in a report directory, with an
 * index.md naming the host, kernel, device, mode and commit
 * (docs/man/odpx-paging.1).
 *
 *   pincache   (host, uring backend) miss ratio, time per registration and
 *              the detector's state against max_entries for a fixed working
 *              set, and against the working set for a fixed cache; buffers
 *              chosen uniformly at random.
 *   timeline   (host, uring backend) warm-up, steady state, thrash and
 *              recovery in one run of the pin cache: the rates over time and
 *              the detector's state under them.
 *   warmup     (device, explicit ODP) RDMA WRITE and READ sweeps over a fresh
 *              region: throughput, latency and page faults per interval.
 *   prefetch   the same with odpx_prefetch and ODPX_PREFETCH_SYNC ahead of it.
 *   workingset (device, as root) a working set from M/4 to 4M swept in a cgroup
 *              v2 of memory.max M with swap, in explicit ODP and pinned (pin
 *              mode): throughput, the cgroup's refaults and major faults, the
 *              thrash callback's states, and whether pinning fails or the
 *              cgroup OOMs (dev-paging-ws.h has the sweep and the cgroup).
 *
 * Timings are printed, never asserted; the exit status reflects errors of
 * setup only.  --quick runs a small version of each, in under a minute.
 */
#include <getopt.h>
#include <limits.h>
#include <sys/stat.h>
#include <signal.h>
#include <sys/wait.h>
#include <sys/utsname.h>

#include "bench.h"
#include "config.h"	/* ODPX_HAVE_VERBS */

struct report {
	char dir[PATH_MAX];
	FILE *nd;		/* samples.ndjson */
	bool quick;
	const char *cgroup;	/* --cgroup: the parent of the workingset cgroups */
	uint64_t memory_max;	/* --memory-max: M of the workingset experiment */
	uint64_t region;	/* --region: the warmup and prefetch region */
	char args[512];		/* the options, for index.md */
	uint64_t seed;
	char skipped[1024];	/* "name: why; ..." */
	char ran[256];
};

static struct report R;

#define WS_CG_ROOT_NAME "/sys/fs/cgroup"	/* dev-paging-ws.h's default parent */

static FILE *open_in(const char *name)
{
	char path[PATH_MAX + 64];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", R.dir, name);
	if (!(f = fopen(path, "w")))
		DIE("%s: %s", path, strerror(errno));
	return f;
}

static void skip(const char *exp, const char *why)
{
	size_t n = strlen(R.skipped);

	snprintf(R.skipped + n, sizeof(R.skipped) - n, "%s%s: %s", n ? "; " : "", exp, why);
	printf("# %s skipped: %s\n", exp, why);
	fprintf(R.nd, "{\"exp\":\"%s\",\"skipped\":\"%s\"}\n", exp, why);
}

static void ran(const char *exp)
{
	size_t n = strlen(R.ran);

	snprintf(R.ran + n, sizeof(R.ran) - n, "%s%s", n ? ", " : "", exp);
}

static const char *state_name(uint64_t s)
{
	return s == ODPX_THRASH_THRASH ? "THRASH" : s == ODPX_THRASH_WARMING ? "WARMING" : "OK";
}

/* ---- pin-cache fit ---- */

#define PC_BUF (16 * KiB)
#define PC_STRIDE (PC_BUF + 4 * KiB)	/* never adjacent: one entry per buffer */

static struct odpx_ctx *open_pin(uint64_t max_entries, unsigned tick_ms)
{
	struct odpx_attr a = { .comp_mask = ODPX_ATTR_LIMITS | ODPX_ATTR_TICK, .tick_ms = tick_ms };
	struct odpx_ctx *ctx;

	a.limits.max_entries = max_entries;
	CHECK_ODPX(odpx_open_uring(&a, &ctx));
	return ctx;
}

/* One point: @ws buffers, a cache of @entries, @secs of registrations at random. */
static void pincache_point(FILE *tsv, const char *series, unsigned ws, unsigned entries,
			   unsigned char *base, double secs)
{
	struct odpx_ctx *ctx = open_pin(entries, 20);
	uint64_t rs = R.seed, regs = 0, t0, t1, worst = 0;
	struct odpx_stats s0, s1;

	/* the first round loads the cache; the measure starts after it */
	for (unsigned i = 0; i < ws; i++)
		reg_dereg(ctx, base + (size_t)i * PC_STRIDE, PC_BUF);
	s0 = stats_of(ctx);
	t0 = now_ns();
	do {
		for (unsigned k = 0; k < 256; k++)
			reg_dereg(ctx, base + (size_t)(rnd(&rs) % ws) * PC_STRIDE, PC_BUF);
		regs += 256;
		t1 = now_ns();
		uint64_t st = stats_of(ctx).thrash_state;
		worst = st > worst ? st : worst;
	} while ((double)(t1 - t0) < secs * 1e9);
	s1 = stats_of(ctx);
	double miss = (double)(s1.misses - s0.misses) / (double)regs;
	double ns = (double)(t1 - t0) / (double)regs;
	fprintf(R.nd, "{\"exp\":\"pincache\",\"series\":\"%s\",\"backend\":\"uring\",\"mode\":\"pin\","
		"\"pattern\":\"uniform\",\"buf_bytes\":%lu,\"working_set\":%u,\"max_entries\":%u,"
		"\"regs\":%lu,\"miss_ratio\":%.4f,\"ns_per_reg\":%.1f,\"evictions\":%lu,"
		"\"evict_remiss\":%lu,\"state\":\"%s\",\"worst_state\":\"%s\"}\n", series,
		(unsigned long)PC_BUF, ws, entries, (unsigned long)regs, miss, ns,
		(unsigned long)(s1.evictions - s0.evictions),
		(unsigned long)(s1.evict_remiss - s0.evict_remiss), state_name(s1.thrash_state),
		state_name(worst));
	fprintf(tsv, "%u %u %.4f %.1f %lu\n", ws, entries, miss, ns, (unsigned long)s1.thrash_state);
	printf("# pincache %-10s working set %5u, max_entries %5u: miss ratio %.3f, %7.1f ns/reg, %s\n",
	       series, ws, entries, miss, ns, state_name(s1.thrash_state));
	CHECK_ODPX(odpx_close(ctx));
}

static void exp_pincache(void)
{
	unsigned ws = R.quick ? 256 : 1024, cache = R.quick ? 64 : 256;
	double secs = R.quick ? 0.4 : 2.0;	/* at least 3 windows of 100 ms */
	unsigned max_ws = 8 * cache > ws ? 8 * cache : ws;
	unsigned char *base = map_anon((size_t)max_ws * PC_STRIDE, true);
	static const double f_entries[] = { 1.0 / 16, 1.0 / 8, 1.0 / 4, 1.0 / 2, 3.0 / 4, 1, 2 };
	static const double f_ws[] = { 1.0 / 4, 1.0 / 2, 3.0 / 4, 1, 5.0 / 4, 3.0 / 2, 2, 4, 8 };
	FILE *tsv;

	tsv = open_in("pincache-entries.tsv");
	fprintf(tsv, "working_set max_entries miss_ratio ns_per_reg state\n");
	for (size_t i = 0; i < sizeof(f_entries) / sizeof(f_entries[0]); i++)
		pincache_point(tsv, "vs_entries", ws, (unsigned)(ws * f_entries[i]), base, secs);
	fclose(tsv);
	tsv = open_in("pincache-ws.tsv");
	fprintf(tsv, "working_set max_entries miss_ratio ns_per_reg state\n");
	for (size_t i = 0; i < sizeof(f_ws) / sizeof(f_ws[0]); i++)
		pincache_point(tsv, "vs_ws", (unsigned)(cache * f_ws[i]), cache, base, secs);
	fclose(tsv);
	munmap(base, (size_t)max_ws * PC_STRIDE);
	ran("pincache");
}

/* ---- detector timeline (pin cache) ---- */

static _Atomic int tl_phase;	/* 0 warm-up, 1 steady, 2 thrash, 3 recovery, 4 stop */
static const char *const tl_names[] = { "warm-up", "steady", "thrash", "recovery" };

struct tl_job {
	struct odpx_ctx *ctx;
	unsigned char *base;
	unsigned small, big, warm_every_us;
};

static void *tl_worker(void *arg)
{
	struct tl_job *j = arg;
	unsigned next_new = 0;
	uint64_t i = 0;
	int ph;

	while ((ph = atomic_load(&tl_phase)) < 4) {
		if (ph == 0) {	/* warm-up: a new buffer now and then, every one kept */
			struct timespec ts = { 0, (long)j->warm_every_us * 1000 };
			if (next_new < j->small)
				reg_dereg(j->ctx, j->base + (size_t)next_new++ * PC_STRIDE, PC_BUF);
			for (unsigned k = 0; k < next_new; k++)
				reg_dereg(j->ctx, j->base + (size_t)k * PC_STRIDE, PC_BUF);
			nanosleep(&ts, NULL);
			continue;
		}
		unsigned n = ph == 2 ? j->big : j->small;
		reg_dereg(j->ctx, j->base + (size_t)(i++ % n) * PC_STRIDE, PC_BUF);
	}
	return NULL;
}

static void exp_timeline(void)
{
	double phase_s = R.quick ? 1.5 : 6.0, step_s = R.quick ? 0.05 : 0.1;
	unsigned entries = 64;
	struct tl_job j = { .small = 48, .big = 4 * entries };
	struct odpx_stats prev, cur;
	pthread_t thr;
	FILE *tsv = open_in("timeline.tsv");
	uint64_t t0, tp;

	/* warm-up: the 48 buffers come one by one, 40 a second (over min_rate) */
	j.warm_every_us = 25000;
	j.base = map_anon((size_t)j.big * PC_STRIDE, true);
	j.ctx = open_pin(entries, 20);
	atomic_store(&tl_phase, 0);
	fprintf(tsv, "t hits/s misses/s evictions/s re-misses/s state phase\n");
	prev = stats_of(j.ctx);
	t0 = tp = now_ns();
	if (pthread_create(&thr, NULL, tl_worker, &j))
		DIE("pthread_create");
	for (int ph = 0; ph < 4; ph++) {
		atomic_store(&tl_phase, ph);
		double secs = ph ? phase_s : j.small * j.warm_every_us / 1e6 + 0.2;
		uint64_t end = now_ns() + (uint64_t)(secs * 1e9);
		while (now_ns() < end) {
			struct timespec ts = { 0, (long)(step_s * 1e9) };
			nanosleep(&ts, NULL);
			uint64_t t = now_ns();
			double dt = (double)(t - tp) / 1e9;
			cur = stats_of(j.ctx);
			double h = (double)(cur.hits - prev.hits) / dt, m = (double)(cur.misses - prev.misses) / dt;
			double e = (double)(cur.evictions - prev.evictions) / dt;
			double r = (double)(cur.evict_remiss - prev.evict_remiss) / dt;
			double ts_ = (double)(t - t0) / 1e9;
			fprintf(R.nd, "{\"exp\":\"timeline\",\"backend\":\"uring\",\"mode\":\"pin\",\"t\":%.3f,"
				"\"phase\":\"%s\",\"hits_s\":%.1f,\"misses_s\":%.1f,\"evictions_s\":%.1f,"
				"\"remiss_s\":%.1f,\"state\":\"%s\",\"metric\":%lu,\"value\":%.3f}\n", ts_,
				tl_names[ph], h, m, e, r, state_name(cur.thrash_state),
				(unsigned long)cur.thrash_metric, cur.thrash_value_milli / 1000.0);
			fprintf(tsv, "%.3f %.1f %.1f %.1f %.1f %lu %d\n", ts_, h, m, e, r,
				(unsigned long)cur.thrash_state, ph);
			prev = cur;
			tp = t;
		}
		printf("# timeline %-8s ends in %s after %.1f s\n", tl_names[ph],
		       state_name(stats_of(j.ctx).thrash_state), (double)(now_ns() - t0) / 1e9);
	}
	atomic_store(&tl_phase, 4);
	pthread_join(thr, NULL);
	fclose(tsv);
	CHECK_ODPX(odpx_close(j.ctx));
	munmap(j.base, (size_t)j.big * PC_STRIDE);
	ran("timeline");
}

/* ---- the device experiments ---- */

/* An RDMA device the experiments can use: any entry under /sys/class/infiniband. */
static bool have_rdma_device(char *name, size_t len)
{
	DIR *d = opendir("/sys/class/infiniband");
	struct dirent *e;
	bool found = false;

	while (d && (e = readdir(d)))
		if (e->d_name[0] != '.') {
			snprintf(name, len, "%s", e->d_name);
			found = true;
			break;
		}
	if (d)
		closedir(d);
	return found;
}

#ifdef ODPX_HAVE_VERBS
#include "../tests/dev-util.h"

#define SWEEP_CHUNK (64 * KiB)

/*
 * The system's page faults, /proc/vmstat pgfault or pgmajfault: a device's
 * ODP faults are taken by the driver's kernel context (rxe: its own task),
 * which counts them as its own, not in the process's minflt; the system's
 * count has them.
 */
static uint64_t sys_faults(bool major)
{
	const char *key = major ? "pgmajfault " : "pgfault ";
	unsigned long long v = 0;
	char line[128];
	FILE *f = fopen("/proc/vmstat", "re");

	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, key, strlen(key))) {
			v = strtoull(line + strlen(key), NULL, 10);
			break;
		}
	if (f)
		fclose(f);
	return v;
}

/*
 * Sweeps over a fresh @mib MiB region registered LOCAL_WRITE in explicit ODP
 * mode: RDMA READs of 64 KiB from a small remote buffer into each chunk (the
 * device writes the region) then RDMA WRITEs of each chunk back (it reads
 * it), @passes times.  One sample per @step_ms: bytes/s, the mean latency of
 * a work request, the system's page faults (the guest is otherwise idle).  @prefetch: 0 none, else the
 * odpx_prefetch flags issued over the region before the first sweep.
 */
static void sweep(struct dev *d, const char *exp, const char *variant, size_t mib, int passes,
		  int prefetch, unsigned step_ms, FILE *tsv)
{
	struct odpx_ctx *ctx;
	struct odpx_attr a = { .comp_mask = ODPX_ATTR_MODE, .mode = ODPX_MODE_EXPLICIT };
	size_t len = mib * MiB;
	unsigned char *reg = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	unsigned char *rbuf = dev_map(SWEEP_CHUNK, NULL);
	struct odpx_mr *mr, *rmr;
	uint64_t t0, ts, first_ns = 0, ops = 0, bytes = 0, lat = 0, f0, mf0;
	int r;

	if (reg == MAP_FAILED)
		DIE("mmap %zu MiB: %s", mib, strerror(errno));
	if ((r = odpx_open_verbs(d->pd, &a, &ctx)))
		DIE("odpx_open_verbs(explicit): %s (%s)", strerror(-r), odpx_last_reason());
	dev_fill(rbuf, SWEEP_CHUNK, 7);
	CHECK_ODPX(odpx_reg(ctx, rbuf, SWEEP_CHUNK, ODPX_ACCESS_LOCAL_WRITE | ODPX_ACCESS_REMOTE_READ |
			    ODPX_ACCESS_REMOTE_WRITE, &rmr));
	f0 = sys_faults(false);
	mf0 = sys_faults(true);
	t0 = ts = now_ns();
	if (prefetch)
		CHECK_ODPX(odpx_prefetch(ctx, reg, len, (uint32_t)prefetch));
	CHECK_ODPX(odpx_reg(ctx, reg, len, ODPX_ACCESS_LOCAL_WRITE, &mr));
	for (int p = 0; p < 2 * passes; p++) {
		bool wr = p & 1;	/* READ into the region, then WRITE it back */
		for (size_t off = 0; off < len; off += SWEEP_CHUNK) {
			uint64_t o0 = now_ns();
			struct ibv_mr m = { .lkey = odpx_mr_lkey(mr) };

			r = dev_rdma(d, wr ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ, &m, reg + off,
				     SWEEP_CHUNK, rbuf, odpx_mr_rkey(rmr));
			if (r)
				DIE("%s: RDMA %s at offset %zu: %s", exp, wr ? "WRITE" : "READ", off,
				    strerror(-r));
			uint64_t o1 = now_ns();
			if (!first_ns)
				first_ns = o1 - t0;
			ops++;
			bytes += SWEEP_CHUNK;
			lat += o1 - o0;
			if (o1 - ts >= (uint64_t)step_ms * 1000000 || (p == 2 * passes - 1 && off + SWEEP_CHUNK >= len)) {
				double dt = (double)(o1 - ts) / 1e9, t = (double)(o1 - t0) / 1e9;
				uint64_t f = sys_faults(false), mf = sys_faults(true);
				fprintf(R.nd, "{\"exp\":\"%s\",\"variant\":\"%s\",\"device\":\"%s\","
					"\"mode\":\"explicit\",\"region_mib\":%zu,\"pass\":%d,\"op\":\"%s\","
					"\"t\":%.4f,\"mb_s\":%.2f,\"lat_us\":%.2f,\"pgfault\":%lu,\"pgmajfault\":%lu}\n",
					exp, variant, d->name, mib, p / 2, wr ? "write" : "read", t,
					(double)bytes / dt / 1e6, (double)lat / (double)ops / 1e3,
					(unsigned long)(f - f0), (unsigned long)(mf - mf0));
				fprintf(tsv, "%s %.4f %.2f %.2f %lu\n", variant, t, (double)bytes / dt / 1e6,
					(double)lat / (double)ops / 1e3, (unsigned long)(f - f0));
				ops = bytes = lat = 0;
				ts = o1;
				f0 = f;
				mf0 = mf;
			}
		}
	}
	fprintf(R.nd, "{\"exp\":\"%s\",\"variant\":\"%s\",\"summary\":true,"
		"\"first_completion_us\":%.1f,\"total_s\":%.3f}\n", exp, variant, first_ns / 1e3,
		(double)(now_ns() - t0) / 1e9);
	printf("# %s %-13s %zu MiB: first completion after %.1f us, %d passes in %.2f s\n", exp,
	       variant, mib, first_ns / 1e3, passes, (double)(now_ns() - t0) / 1e9);
	fprintf(tsv, "\n\n");	/* a gnuplot data block per variant */
	CHECK_ODPX(odpx_dereg(ctx, mr));
	CHECK_ODPX(odpx_dereg(ctx, rmr));
	CHECK_ODPX(odpx_close(ctx));
	munmap(reg, len);
	munmap(rbuf, SWEEP_CHUNK);
}

/* The device experiments, in a child: dev-util.h exits on a missing device or an error. */
static int run_device(const struct bench_opts *sel)
{
	struct dev d;
	bool w = selected(sel, "warmup"), p = selected(sel, "prefetch");
	size_t mib = R.region / MiB;
	int passes = R.quick ? 3 : 5;
	FILE *tsv;

	dev_open(&d);
	dev_require_odp(&d, IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_WRITE);
	dev_connect_self(&d);
	if (w) {
		tsv = open_in("warmup.tsv");
		fprintf(tsv, "# variant t mb_s lat_us pgfault\n");
		sweep(&d, "warmup", "none", mib, passes, 0, R.quick ? 20 : 50, tsv);
		fclose(tsv);
	}
	if (p) {
		tsv = open_in("prefetch.tsv");
		fprintf(tsv, "# variant t mb_s lat_us pgfault\n");
		sweep(&d, "prefetch", "none", mib, passes, 0, R.quick ? 20 : 50, tsv);
		sweep(&d, "prefetch", "async", mib, passes, ODPX_PREFETCH_WRITE, R.quick ? 20 : 50, tsv);
		sweep(&d, "prefetch", "sync", mib, passes, ODPX_PREFETCH_WRITE | ODPX_PREFETCH_SYNC,
		      R.quick ? 20 : 50, tsv);
		fclose(tsv);
	}
	dev_close(&d);
	return 0;
}

/* ---- working set against a memory limit ---- */

#include "../tests/dev-paging-ws.h"

/* What a point's child was doing, in a shared page: the parent reads it after the child ends. */
enum ws_stage { WS_ENTERING, WS_OPENING, WS_WRITING, WS_REGISTERING, WS_SWEEPING, WS_CHECKING,
		WS_DONE };
static const char *const ws_stage_names[] = {
	"entering the cgroup", "opening the device", "writing the region", "registering the region",
	"sweeping", "checking the region", "done",
};

struct ws_point {
	enum ws_stage stage;
	int reg_err;		/* -errno of the region's registration, 0 */
	double secs, mb_s, refault_s, majflt_s;
	uint64_t transfers, refaults, majflts;
	int worst, last, events;
	char reason[192];	/* odpx_last_reason() after a failed registration */
};

static struct ws_point *ws_shared;

static void ws_on_thrash(struct odpx_ctx *ctx, const struct odpx_thrash_event *ev, void *arg)
{
	struct ws_point *pt = arg;

	pt->last = ev->state;
	pt->worst = (int)ev->state > pt->worst ? (int)ev->state : pt->worst;
	pt->events++;
}

static int64_t cg_stat(const struct ws_cg *cg, const char *key)
{
	int64_t v = ws_cg_value(cg, "memory.stat", key);

	return v < 0 ? 0 : v;
}

/* One point, in the child: exits 0 with the results in ws_shared, 77 without a device. */
static int ws_child(const struct ws_cg *cg, bool pinned, size_t bytes, double secs)
{
	struct ws_point *pt = ws_shared;
	struct odpx_attr a = {
		.comp_mask = ODPX_ATTR_MODE | ODPX_ATTR_THRASH_CB | ODPX_ATTR_LIMITS,
		.mode = pinned ? ODPX_MODE_PIN : ODPX_MODE_EXPLICIT,
		.thrash_cb = ws_on_thrash, .thrash_arg = pt,
	};
	struct odpx_ctx *ctx;
	struct dev d;
	struct ws w;
	size_t pos = 0;
	int r;

	if ((r = ws_cg_enter(cg)))
		DIE("cannot enter %s: %s", cg->dir, strerror(-r));
	pt->stage = WS_OPENING;
	dev_open(&d);
	dev_require_odp(&d, IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_WRITE);
	dev_connect_self(&d);
	/* pinning is bounded by the cgroup here, not by odpx's own budget */
	a.limits.max_pinned_bytes = 4 * bytes + 16 * MiB;
	if ((r = odpx_open_verbs(d.pd, &a, &ctx)))
		DIE("odpx_open_verbs(%s): %s (%s)", pinned ? "pin" : "explicit", strerror(-r),
		    odpx_last_reason());
	pt->stage = WS_WRITING;
	if (ws_setup(&w, &d, ctx, bytes))
		DIE("workingset: setting up %zu MiB failed", bytes >> 20);
	pt->stage = WS_REGISTERING;
	if ((r = ws_register(&w)) < 0) {
		pt->reg_err = r;
		snprintf(pt->reason, sizeof(pt->reason), "%s", odpx_last_reason());
		return 0;
	}
	pt->stage = WS_SWEEPING;
	int64_t rf0 = cg_stat(cg, "workingset_refault_anon"), mj0 = cg_stat(cg, "pgmajfault");
	uint64_t t0 = now_ns();
	if ((r = ws_sweep(&w, w.nchunks, &pos, t0 + (uint64_t)(secs * 1e9), NULL, NULL)))
		DIE("workingset: the sweep of %zu MiB failed (%s)", bytes >> 20, strerror(-r));
	pt->secs = (double)(now_ns() - t0) / 1e9;
	pt->refaults = (uint64_t)(cg_stat(cg, "workingset_refault_anon") - rf0);
	pt->majflts = (uint64_t)(cg_stat(cg, "pgmajfault") - mj0);
	pt->transfers = w.transfers;
	pt->mb_s = (double)w.bytes / pt->secs / 1e6;
	pt->refault_s = (double)pt->refaults / pt->secs;
	pt->majflt_s = (double)pt->majflts / pt->secs;
	pt->stage = WS_CHECKING;
	if (ws_check_region(&w))
		DIE("workingset: the region differs from what the transfers wrote");
	pt->last = (int)stats_of(ctx).thrash_state;
	pt->stage = WS_DONE;
	ws_teardown(&w);
	CHECK_ODPX(odpx_close(ctx));
	dev_close(&d);
	return 0;
}

/* One point: a fresh cgroup, a child in it, what became of it.  false: no device (77). */
static bool ws_point(FILE *tsv, bool pinned, double ratio, double secs)
{
	const char *variant = pinned ? "pinned" : "odp";
	size_t bytes = (size_t)((double)R.memory_max * ratio) / WS_CHUNK * WS_CHUNK;
	char name[64], why[PATH_MAX + 128], outcome[320];
	struct ws_cg cg;
	int st, code;
	pid_t pid;

	snprintf(name, sizeof(name), "odpx-paging.%d", (int)getpid());
	if (ws_cg_create(&cg, R.cgroup, name, R.memory_max, why, sizeof(why)))
		DIE("workingset: %s", why);
	memset(ws_shared, 0, sizeof(*ws_shared));
	fflush(NULL);
	if ((pid = fork()) == 0)
		_exit(ws_child(&cg, pinned, bytes, secs));
	if (pid < 0 || waitpid(pid, &st, 0) != pid)
		DIE("fork/waitpid: %s", strerror(errno));
	int64_t oom = ws_cg_value(&cg, "memory.events", "oom_kill");
	int64_t max_hit = ws_cg_value(&cg, "memory.events", "max");
	ws_cg_remove(&cg);
	if (WIFEXITED(st) && WEXITSTATUS(st) == 77)
		return false;
	struct ws_point *pt = ws_shared;
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0 && pt->stage == WS_DONE) {
		snprintf(outcome, sizeof(outcome), "ok");
		code = 0;
	} else if (WIFEXITED(st) && WEXITSTATUS(st) == 0 && pt->reg_err) {
		snprintf(outcome, sizeof(outcome), "registration failed: %s (%s)",
			 strerror(-pt->reg_err), pt->reason);
		code = 1;
	} else if (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL && oom > 0) {
		snprintf(outcome, sizeof(outcome), "OOM-killed while %s (memory.events oom_kill %" PRId64 ")",
			 ws_stage_names[pt->stage], oom);
		code = 2;
	} else {
		snprintf(outcome, sizeof(outcome), "failed while %s: %s %d (see the output above)",
			 ws_stage_names[pt->stage], WIFSIGNALED(st) ? "signal" : "exit status",
			 WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
		code = 3;
	}
	fprintf(R.nd, "{\"exp\":\"workingset\",\"variant\":\"%s\",\"mode\":\"%s\",\"memory_max_mib\":%.1f,"
		"\"ws_mib\":%.1f,\"ws_ratio\":%.3f,\"secs\":%.3f,\"mb_s\":%.2f,\"transfers\":%lu,"
		"\"refaults\":%lu,\"pgmajfault\":%lu,\"refault_s\":%.1f,\"majflt_s\":%.1f,"
		"\"state\":\"%s\",\"worst_state\":\"%s\",\"state_changes\":%d,\"memory_events_max\":%" PRId64
		",\"oom_kill\":%" PRId64 ",\"outcome\":\"%s\"}\n", variant, pinned ? "pin" : "explicit",
		(double)R.memory_max / MiB, (double)bytes / MiB, ratio, pt->secs, pt->mb_s,
		(unsigned long)pt->transfers, (unsigned long)pt->refaults, (unsigned long)pt->majflts,
		pt->refault_s, pt->majflt_s, state_name((uint64_t)pt->last), state_name((uint64_t)pt->worst),
		pt->events, max_hit, oom, outcome);
	fprintf(tsv, "%d %.3f %.1f %.2f %.1f %.1f %d %d\n", pinned, ratio, (double)bytes / MiB,
		pt->mb_s, pt->refault_s, pt->majflt_s, code ? -1 : pt->last, code);
	printf("# workingset %-6s %6.1f MiB (%.2f M): %s", variant, (double)bytes / MiB, ratio, outcome);
	if (!code)
		printf(", %.1f MB/s, %.0f refaults/s, %.0f major faults/s, %s (worst %s)", pt->mb_s,
		       pt->refault_s, pt->majflt_s, state_name((uint64_t)pt->last),
		       state_name((uint64_t)pt->worst));
	printf("\n");
	return true;
}

/* NULL when the experiment can run here, else why not. */
static const char *ws_unavailable(char *why, size_t len)
{
	struct ws_cg cg;
	char name[64];

	if (ws_swap_bytes() < 4 * R.memory_max + 16 * MiB) {
		snprintf(why, len, "less than 4 x memory.max of swap free (/proc/meminfo SwapFree; "
			 "the guest driver puts swap on zram)");
		return why;
	}
	snprintf(name, sizeof(name), "odpx-paging.%d", (int)getpid());
	if (ws_cg_create(&cg, R.cgroup, name, R.memory_max, why, len))
		return why;
	ws_cg_remove(&cg);
	return NULL;
}

static void exp_workingset(void)
{
	static const double ratios[] = { 0.25, 0.5, 1, 2, 4 };
	double secs = R.quick ? 1.0 : 4.0;
	char why[PATH_MAX + 160];
	FILE *tsv;

	if (ws_unavailable(why, sizeof(why))) {
		skip("workingset", why);
		return;
	}
	ws_shared = mmap(NULL, sizeof(*ws_shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
			 -1, 0);
	if (ws_shared == MAP_FAILED)
		DIE("mmap: %s", strerror(errno));
	tsv = open_in("workingset.tsv");
	fprintf(tsv, "# pinned ws_ratio ws_mib mb_s refault_s majflt_s state outcome"
		" (memory.max %.0f MiB)\n", (double)R.memory_max / MiB);
	for (int pinned = 0; pinned < 2; pinned++) {
		for (size_t i = 0; i < sizeof(ratios) / sizeof(ratios[0]); i++)
			if (!ws_point(tsv, pinned, ratios[i], secs)) {
				fclose(tsv);
				skip("workingset", "no usable RDMA device (loopback GID or ODP missing: see above)");
				return;
			}
		fprintf(tsv, "\n\n");	/* a gnuplot data block per variant */
	}
	fclose(tsv);
	munmap(ws_shared, sizeof(*ws_shared));
	ran("workingset");
}
#endif

/* warmup and prefetch: in a child, the report's files shared; a failure is recorded */
static void run_device_experiments(const struct bench_opts *sel, bool rdma)
{
	static const char *const exps[] = { "warmup", "prefetch" };
	const char *why = NULL;
	char buf[96];
	int st = 0;

	if (!selected(sel, "warmup") && !selected(sel, "prefetch"))
		return;
#ifdef ODPX_HAVE_VERBS
	if (rdma) {
		pid_t pid;

		fflush(NULL);
		if ((pid = fork()) == 0)
			_exit(run_device(sel));
		if (pid < 0 || waitpid(pid, &st, 0) != pid)
			DIE("fork/waitpid: %s", strerror(errno));
		if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
			for (size_t i = 0; i < 2; i++)
				if (selected(sel, exps[i]))
					ran(exps[i]);
			return;
		}
		if (WIFEXITED(st) && WEXITSTATUS(st) == 77)
			why = "no usable RDMA device (loopback GID or ODP missing: see above)";
		else {
			snprintf(buf, sizeof(buf), "failed (status %#x: see the output above)", st);
			why = buf;
		}
	} else {
		why = "no RDMA device (/sys/class/infiniband is empty)";
	}
#else
	(void)rdma;
	(void)st;
	(void)buf;
	why = "built without libibverbs";
#endif
	for (size_t i = 0; i < 2; i++)
		if (selected(sel, exps[i]))
			skip(exps[i], why);
}

static void run_workingset(bool rdma)
{
#ifdef ODPX_HAVE_VERBS
	if (rdma)
		exp_workingset();
	else
		skip("workingset", "no RDMA device (/sys/class/infiniband is empty)");
#else
	(void)rdma;
	skip("workingset", "built without libibverbs");
#endif
}

/* ---- report ---- */

static void run_cmd(const char *cmd, char *out, size_t len)
{
	FILE *p = popen(cmd, "r");
	size_t n = 0;

	out[0] = 0;
	if (p) {
		n = fread(out, 1, len - 1, p);
		pclose(p);
	}
	out[n] = 0;
	out[strcspn(out, "\n")] = 0;
	if (!out[0])
		snprintf(out, len, "unknown");
}

/* The repository of this program: build/odpx-paging -> .. */
static void src_dir(char *out, size_t len)
{
	char exe[PATH_MAX - 8];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	if (n <= 0)
		DIE("readlink /proc/self/exe");
	exe[n] = 0;
	*strrchr(exe, '/') = 0;
	snprintf(out, len, "%s/..", exe);
}

static int plot(const char *src)
{
	char cmd[3 * PATH_MAX];
	int r;

	snprintf(cmd, sizeof(cmd), "command -v gnuplot >/dev/null 2>&1");
	if (system(cmd) != 0) {
		printf("# no plots: gnuplot not found (Debian: gnuplot-nox)\n");
		return 1;
	}
	snprintf(cmd, sizeof(cmd), "gnuplot -e \"dir='%s'\" '%s/bench/odpx-paging.gp'", R.dir, src);
	r = system(cmd);
	if (r != 0)
		printf("# gnuplot failed: status %#x\n", r);
	return r != 0;
}

static void write_index(const char *src, const char *dev, double secs)
{
	struct utsname u;
	char commit[128], cmd[PATH_MAX + 64], date[64];
	time_t now = time(NULL);
	FILE *f = open_in("index.md");
	static const char *const pngs[][2] = {
		{ "pincache-entries.png", "pin-cache fit: miss ratio and time per registration against max_entries" },
		{ "pincache-ws.png", "pin-cache fit: against the working set" },
		{ "timeline.png", "detector timeline: warm-up, steady, thrash, recovery" },
		{ "warmup.png", "warm-up: RDMA throughput, latency and page faults of a fresh ODP region" },
		{ "prefetch.png", "prefetch impact: none, odpx_prefetch, ODPX_PREFETCH_SYNC" },
		{ "workingset.png", "working set against memory.max: explicit ODP and pinned" },
	};

	uname(&u);
	/* a copy run elsewhere (the test guest) is told its commit */
	snprintf(cmd, sizeof(cmd), "git -C '%s' describe --always --dirty 2>/dev/null", src);
	if (getenv("ODPX_PAGING_COMMIT") && *getenv("ODPX_PAGING_COMMIT"))
		snprintf(commit, sizeof(commit), "%s", getenv("ODPX_PAGING_COMMIT"));
	else
		run_cmd(cmd, commit, sizeof(commit));
	strftime(date, sizeof(date), "%Y-%m-%d %H:%M:%S UTC", gmtime(&now));
	fprintf(f, "# odpx-paging report\n\n");
	fprintf(f, "| | |\n|---|---|\n| date | %s |\n| host | %s |\n| kernel | %s %s |\n"
		"| device | %s |\n| mode | pin (uring backend): pincache, timeline%s%s |\n"
		"| commit | %s |\n| run | %s%s, %.1f s |\n\n", date, u.nodename, u.release, u.machine,
		dev[0] ? dev : "none", strstr(R.ran, "warmup") || strstr(R.ran, "prefetch") ?
		"; explicit ODP (verbs backend): warmup, prefetch" : "",
		strstr(R.ran, "workingset") ? "; explicit ODP and pin (verbs backend): workingset" : "", commit, R.quick ? "--quick" : "full", R.args, secs);
	fprintf(f, "Experiments run: %s.\n\n", R.ran[0] ? R.ran : "none");
	if (strstr(R.ran, "workingset"))
		fprintf(f, "Working set: memory.max %.0f MiB, cgroups under %s.\n\n",
			(double)R.memory_max / MiB, R.cgroup ? R.cgroup : WS_CG_ROOT_NAME);
	if (R.skipped[0])
		fprintf(f, "Skipped: %s.\n\n", R.skipped);
	fprintf(f, "Samples: `samples.ndjson` (one JSON object per line; `exp` names the experiment).\n\n");
	for (size_t i = 0; i < sizeof(pngs) / sizeof(pngs[0]); i++) {
		snprintf(cmd, sizeof(cmd), "%s/%s", R.dir, pngs[i][0]);
		if (access(cmd, R_OK) == 0)
			fprintf(f, "## %s\n\n![%s](%s)\n\n", pngs[i][1], pngs[i][0], pngs[i][0]);
	}
	fclose(f);
}

static void usage(FILE *f, const char *prog)
{
	fprintf(f, "usage: %s [--quick] [--out DIR] [--only EXP[,EXP]] [--seed N] [--no-plots]\n"
		"       [--cgroup DIR] [--memory-max SIZE] [--region SIZE] [--thrash SPEC]\n"
		"  EXP: pincache, timeline, warmup, prefetch, workingset\n", prog);
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "quick", no_argument, NULL, 'q' }, { "out", required_argument, NULL, 'o' },
		{ "only", required_argument, NULL, 'O' }, { "seed", required_argument, NULL, 's' },
		{ "no-plots", no_argument, NULL, 'n' }, { "help", no_argument, NULL, 'h' },
		{ "cgroup", required_argument, NULL, 'c' }, { "memory-max", required_argument, NULL, 'm' },
		{ "region", required_argument, NULL, 'r' }, { "thrash", required_argument, NULL, 't' },
		{ 0 },
	};
	struct bench_opts sel = { 0 };
	char src[PATH_MAX], dev[256] = "", path[PATH_MAX + 32];
	bool plots = true;
	int c;

	snprintf(R.dir, sizeof(R.dir), "odpx-paging-report");
	R.seed = 0x6f647078;
	while ((c = getopt_long(argc, argv, "qo:h", lo, NULL)) != -1) {
		switch (c) {
		case 'q': R.quick = true; break;
		case 'o': snprintf(R.dir, sizeof(R.dir), "%s", optarg); break;
		case 'O': sel.only = optarg; break;
		case 's': R.seed = strtoull(optarg, NULL, 0) | 1; break;
		case 'n': plots = false; break;
		case 'c': R.cgroup = optarg; break;
		case 'm':
			if ((R.memory_max = parse_size(optarg)) < 4 * MiB)
				return fprintf(stderr, "--memory-max %s: at least 4M\n", optarg), 2;
			break;
		case 't': setenv("ODPX_THRASH", optarg, 1); break;
		case 'r':
			if ((R.region = parse_size(optarg)) < MiB || R.region % MiB)
				return fprintf(stderr, "--region %s: whole MiB, at least 1M\n", optarg), 2;
			break;
		case 'h': usage(stdout, argv[0]); return 0;
		default: usage(stderr, argv[0]); return 2;
		}
	}
	if (optind < argc)
		return usage(stderr, argv[0]), 2;
	if (!R.memory_max)
		R.memory_max = R.quick ? 16 * MiB : 64 * MiB;
	if (!R.region)
		R.region = R.quick ? 8 * MiB : 128 * MiB;
	for (int i = 1; i < argc; i++) {
		size_t n = strlen(R.args);
		snprintf(R.args + n, sizeof(R.args) - n, "%s%s", n ? " " : ": odpx-paging ", argv[i]);
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (mkdir(R.dir, 0755) < 0 && errno != EEXIST)
		DIE("mkdir %s: %s", R.dir, strerror(errno));
	src_dir(src, sizeof(src));
	snprintf(path, sizeof(path), "%s/samples.ndjson", R.dir);
	if (!(R.nd = fopen(path, "w")))
		DIE("%s: %s", path, strerror(errno));
	setvbuf(R.nd, NULL, _IOLBF, 0);
	/* windows of 100 ms: a run of seconds shows the detector's changes */
	setenv("ODPX_THRASH", "window_ms=100", 0);

	uint64_t t0 = now_ns();
	bool rdma = have_rdma_device(dev, sizeof(dev));
	if (selected(&sel, "pincache"))
		exp_pincache();
	if (selected(&sel, "timeline"))
		exp_timeline();
	run_device_experiments(&sel, rdma);
	if (selected(&sel, "workingset"))
		run_workingset(rdma);
	fclose(R.nd);
	if (plots)
		plot(src);
	write_index(src, dev, (double)(now_ns() - t0) / 1e9);
	printf("# report in %s: index.md, samples.ndjson%s\n", R.dir, plots ? ", *.png" : "");
	return 0;
}
