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
 *   latency    (device) the time of single one-page transfers into a pinned
 *              page, an ODP page resident, touched first or reclaimed, with
 *              no, asynchronous and synchronous prefetch, each row against a
 *              pinned-hit pass of the same run.
 *   workingset (device, as root) a working set from M/4 to 4M swept in a cgroup
 *              v2 of memory.max M with swap, in explicit ODP, pinned (pin
 *              mode) and hybrid: throughput, the cgroup's refaults and major
 *              faults, the thrash callback's states, what the registration
 *              returned, and whether the cgroup OOMs (dev-paging-ws.h has the
 *              sweep and the cgroup); the three modes interleaved at each point,
 *              --rounds times, each mode's median reported.
 *   phase      (device, as root) per mode, a working set of M/4, 2M, M/4 in
 *              a cgroup of memory.max M, a registration per chunk: a timeline
 *              of throughput, the detector's state and the pinned bytes.
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
	unsigned lat_samples;	/* --samples: transfers per latency row */
	bool lat_spin;		/* --latency-wait poll: spin on the CQ, never sleep */
	double phase_s;		/* --phase-secs: each phase of the phase experiment */
	unsigned ws_rounds;	/* --rounds: of each workingset point (0: 3, --quick 1) */
	char args[512];		/* the options, for index.md */
	uint64_t seed;
	char skipped[1024];	/* "name: why; ..." */
	unsigned nskipped;	/* experiments skipped */
	unsigned failed;	/* points of workingset and phase that failed (not an OOM kill) */
	bool require_device;	/* --require-device: a skip or a failed point is an error */
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
	R.nskipped++;
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

/*
 * ---- fault latency: one work request at a time ----
 *
 * Each transfer is one RDMA READ of a 4 KiB page from a pinned source buffer into a page of
 * the region under test (the device writes the local page, so an ODP page that is absent is
 * faulted in writable), posted and its completion polled for without sleeping: the time from
 * ibv_post_send to the completion is the sample.  One transfer per page of a fresh region of
 * `samples` pages, each page at offset 0 of its page (rxe corrupts ODP transfers that start
 * elsewhere: dev-rxe-odp-offset).  After each pass the CPU compares every page with the source
 * page it was read from.  The region's state before the timed pass:
 *
 *   pinned hit         written by the CPU, registered in pin mode (pinned), one untimed pass
 *   ODP resident       registered in explicit ODP mode, one untimed pass: the device has it mapped
 *   ODP first touch    registered in explicit ODP mode, never touched by the CPU or the device
 *   ODP after reclaim  as resident, then madvise(MADV_PAGEOUT) over the region: the kernel
 *                      writes the pages to swap and the device's mapping is invalidated
 *
 * and each ODP state with no prefetch, odpx_prefetch (the engine advises the MR; the timed
 * pass starts at once) or ODPX_PREFETCH_SYNC (done before the pass starts; the call's own time
 * is recorded beside the row).  Every row has its own reference, a pinned-hit region timed in
 * the same pass, a transfer into it before each transfer of the row: the noise of a shared,
 * emulated host falls on both alike, and the row's ratios against it are what the run says.
 */
#define LAT_PAGE	4096
#define LAT_SRC_PAGES	64
#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT	21
#endif

enum lat_kind { LAT_PINNED, LAT_RESIDENT, LAT_FIRST, LAT_RECLAIM };
static const char *const lat_kind_names[] = { "pinned hit", "ODP resident", "ODP first touch",
					      "ODP after reclaim" };
static const char *const lat_kind_keys[] = { "pinned_hit", "odp_resident", "odp_first_touch",
					     "odp_after_reclaim" };
static const char *const lat_pf_names[] = { "none", "async", "sync" };

struct lat_env {
	struct dev *d;
	struct odpx_ctx *pin, *odp;
	unsigned char *src;		/* LAT_SRC_PAGES distinct pages, pinned */
	uint32_t src_rkey;
	unsigned n;			/* pages per pass: the samples of a row */
	double *ref, *lat;		/* n each */
	FILE *cdf;
};

struct lat_pass_info {
	double prefetch_us;		/* the odpx_prefetch call, 0 without */
	unsigned absent;		/* pages absent (mincore) before prefetch and pass */
};

/* One RDMA READ of a page into @laddr, its completion polled for: ns, or -errno (printed). */
static int64_t lat_read(struct dev *d, uint32_t lkey, void *laddr, void *raddr, uint32_t rkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)laddr, .length = LAT_PAGE, .lkey = lkey };
	struct ibv_send_wr wr = { 0 }, *bad;
	struct ibv_wc wc;
	uint64_t t0, t1, deadline;
	int n;

	wr.wr_id = ++d->next_wr_id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_RDMA_READ;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = (uintptr_t)raddr;
	wr.wr.rdma.rkey = rkey;
	t0 = now_ns();
	deadline = t0 + DEV_WC_TIMEOUT_MS * 1000000ULL;
	if ((n = ibv_post_send(d->qp, &wr, &bad))) {
		printf("latency: ibv_post_send: %s\n", strerror(n));
		return -n;
	}
	/*
	 * By default the CQ is polled and, while empty, the completion channel slept on
	 * (dev_wait_wc): rxe moves the bytes in kernel workers, and under TCG a vCPU that spins
	 * keeps them from running (every transfer then takes about a scheduler tick in the guest).
	 * --latency-wait poll spins on ibv_poll_cq, yielding between polls.
	 */
	if (!R.lat_spin) {
		n = dev_wait_wc(d, &wc) ? -1 : 1;
	} else {
		while (!(n = ibv_poll_cq(d->cq, 1, &wc)) && (sched_yield(), 1))
			if (now_ns() > deadline) {
				printf("latency: no completion in %d ms\n", DEV_WC_TIMEOUT_MS);
				return -ETIMEDOUT;
			}
	}
	t1 = now_ns();
	if (n < 0 || wc.wr_id != wr.wr_id || wc.status != IBV_WC_SUCCESS) {
		printf("latency: RDMA READ completion: %s\n", n < 0 ? "poll failed" :
		       ibv_wc_status_str(wc.status));
		return -EIO;
	}
	return (int64_t)(t1 - t0);
}

/* Page @i of the region after a pass of generation @gen holds this source page. */
static unsigned char *lat_src_page(struct lat_env *e, unsigned i, unsigned gen)
{
	return e->src + (size_t)((i + 7 * gen) % LAT_SRC_PAGES) * LAT_PAGE;
}

/* A region under test: its context, its registration, and its samples (us) or NULL. */
struct lat_target {
	enum lat_kind kind;
	struct odpx_ctx *ctx;
	unsigned char *region;
	struct odpx_mr *mr;
	double *lat;
};

/*
 * One pass over @nt regions at once: page i of each in turn, then page i + 1, so that the
 * row and its reference meet the same moments of a noisy host; then every byte checked.
 */
static int lat_pass(struct lat_env *e, struct lat_target *t, int nt, unsigned gen)
{
	char what[96];

	for (unsigned i = 0; i < e->n; i++)
		for (int k = 0; k < nt; k++) {
			int64_t ns = lat_read(e->d, odpx_mr_lkey(t[k].mr),
					      t[k].region + (size_t)i * LAT_PAGE,
					      lat_src_page(e, i, gen), e->src_rkey);
			if (ns < 0)
				return (int)ns;
			if (t[k].lat)
				t[k].lat[i] = (double)ns / 1e3;
		}
	for (int k = 0; k < nt; k++)
		for (unsigned i = 0; i < e->n; i++) {
			unsigned char *p = t[k].region + (size_t)i * LAT_PAGE;
			snprintf(what, sizeof(what), "latency: %s, page %u after pass %u",
				 lat_kind_names[t[k].kind], i, gen);
			if (memcmp(p, lat_src_page(e, i, gen), LAT_PAGE) &&
			    !dev_same(what, p, lat_src_page(e, i, gen), LAT_PAGE))
				return -EIO;
		}
	return 0;
}

/* Pages of [@p, @p + @len) mincore() reports absent. */
static unsigned lat_absent(unsigned char *p, size_t len)
{
	size_t n = len / LAT_PAGE;
	unsigned char *v = malloc(n);
	unsigned absent = 0;

	if (!v || mincore(p, len, v) < 0)
		DIE("mincore: %s", strerror(errno));
	for (size_t i = 0; i < n; i++)
		absent += !(v[i] & 1);
	free(v);
	return absent;
}

/* A fresh region in state @k (see the top of this section), its count of absent pages. */
static void lat_prepare(struct lat_env *e, enum lat_kind k, double *lat, struct lat_target *t,
			unsigned *absent)
{
	size_t len = (size_t)e->n * LAT_PAGE;
	int r;

	t->kind = k;
	t->ctx = k == LAT_PINNED ? e->pin : e->odp;
	t->lat = NULL;
	t->region = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (t->region == MAP_FAILED)
		DIE("mmap %zu bytes: %s", len, strerror(errno));
	if (k == LAT_PINNED || k == LAT_RECLAIM)
		memset(t->region, 0x5a, len);
	if ((r = odpx_reg(t->ctx, t->region, len, ODPX_ACCESS_LOCAL_WRITE, &t->mr)) < 0)
		DIE("latency: odpx_reg of %zu bytes (%s): %s (%s)", len, lat_kind_names[k],
		    strerror(-r), odpx_last_reason());
	if (k != LAT_FIRST && (r = lat_pass(e, t, 1, 0)))
		DIE("latency: the untimed pass (%s) failed: %s", lat_kind_names[k], strerror(-r));
	if (k == LAT_RECLAIM && madvise(t->region, len, MADV_PAGEOUT) < 0)
		DIE("latency: madvise(MADV_PAGEOUT): %s", strerror(errno));
	*absent = lat_absent(t->region, len);
	t->lat = lat;
}

static void lat_release(struct lat_env *e, struct lat_target *t)
{
	CHECK_ODPX(odpx_dereg(t->ctx, t->mr));
	munmap(t->region, (size_t)e->n * LAT_PAGE);
}

/*
 * A pinned-hit region and one in state @k, @pf's prefetch over the latter, then one timed
 * pass over both, interleaved: the reference's samples into e->ref, the row's into e->lat.
 */
static void lat_measure(struct lat_env *e, enum lat_kind k, int pf, struct lat_pass_info *info)
{
	struct lat_target t[2];
	unsigned ref_absent;
	int r;

	memset(info, 0, sizeof(*info));
	lat_prepare(e, LAT_PINNED, e->ref, &t[0], &ref_absent);
	lat_prepare(e, k, e->lat, &t[1], &info->absent);
	if (pf) {
		uint32_t fl = ODPX_PREFETCH_WRITE | (pf == 2 ? ODPX_PREFETCH_SYNC : 0);
		uint64_t t0 = now_ns();
		if ((r = odpx_prefetch(t[1].ctx, t[1].region, (size_t)e->n * LAT_PAGE, fl)) < 0)
			DIE("latency: odpx_prefetch(%s): %s (%s)", lat_pf_names[pf], strerror(-r),
			    odpx_last_reason());
		info->prefetch_us = (double)(now_ns() - t0) / 1e3;
	}
	if ((r = lat_pass(e, t, 2, 1)))
		DIE("latency: the timed pass (%s, prefetch %s) failed: %s", lat_kind_names[k],
		    lat_pf_names[pf], strerror(-r));
	lat_release(e, &t[1]);
	lat_release(e, &t[0]);
}

struct lat_q {
	double p50, p90, p99, p999, max, mean;
};

/* Nearest-rank percentiles of @v (sorted here). */
static struct lat_q lat_quantiles(double *v, unsigned n)
{
	struct lat_q q = { 0 };
	double sum = 0;

	qsort(v, n, sizeof(*v), cmp_double);
#define LAT_RANK(f) v[(size_t)((f) * n + 0.999999) > 0 ? (size_t)((f) * n + 0.999999) - 1 : 0]
	q.p50 = LAT_RANK(0.50);
	q.p90 = LAT_RANK(0.90);
	q.p99 = LAT_RANK(0.99);
	q.p999 = LAT_RANK(0.999);
#undef LAT_RANK
	q.max = v[n - 1];
	for (unsigned i = 0; i < n; i++)
		sum += v[i];
	q.mean = sum / n;
	return q;
}

/*
 * The CDF of sorted @v as a gnuplot block: every 1% up to p99, every 0.01% up to p99.9, then
 * every sample (the tail is what the plot is for).
 */
static void lat_cdf(FILE *f, const char *label, const double *v, unsigned n)
{
	fprintf(f, "# %s\n", label);
	for (unsigned i = 0; i < n; i++) {
		double fr = (double)(i + 1) / n;
		double next = (double)(i + 2) / n;
		bool keep = i == n - 1 || fr > 0.999 ||
			    (fr > 0.99 ? (unsigned)(fr * 10000) != (unsigned)(next * 10000) :
			     (unsigned)(fr * 100) != (unsigned)(next * 100));
		if (keep || i == 0)
			fprintf(f, "%.3f %.5f\n", v[i], fr);
	}
	fprintf(f, "\n\n");
}

static void lat_row(struct lat_env *e, FILE *tsv, enum lat_kind k, int pf)
{
	struct lat_pass_info info;
	struct lat_q ref, q;
	char label[80];

	lat_measure(e, k, pf, &info);
	/*
	 * Where in the pass the slow transfers are: those over the reference's p99 in the first
	 * tenth of the pass and in the rest (an asynchronous prefetch still running meets the
	 * first ones).  Before the samples are sorted.
	 */
	unsigned slow_first = 0, slow_rest = 0;
	ref = lat_quantiles(e->ref, e->n);
	for (unsigned i = 0; i < e->n; i++)
		if (e->lat[i] > ref.p99)
			*(i < e->n / 10 ? &slow_first : &slow_rest) += 1;
	q = lat_quantiles(e->lat, e->n);
	snprintf(label, sizeof(label), "%s, prefetch %s", lat_kind_names[k], lat_pf_names[pf]);
	lat_cdf(e->cdf, label, e->lat, e->n);
	fprintf(R.nd, "{\"exp\":\"latency\",\"device\":\"%s\",\"row\":\"%s\",\"prefetch\":\"%s\","
		"\"op\":\"RDMA READ into the region\",\"transfer_bytes\":%d,\"samples\":%u,"
		"\"bytes_checked\":%zu,\"absent_before\":%u,\"prefetch_call_us\":%.1f,"
		"\"p50_us\":%.2f,\"p90_us\":%.2f,\"p99_us\":%.2f,\"p999_us\":%.2f,\"max_us\":%.2f,"
		"\"mean_us\":%.2f,\"ref\":{\"row\":\"pinned_hit\",\"p50_us\":%.2f,\"p90_us\":%.2f,"
		"\"p99_us\":%.2f,\"p999_us\":%.2f,\"max_us\":%.2f,\"mean_us\":%.2f},"
		"\"ratio\":{\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f,\"p999\":%.3f,\"max\":%.3f,"
		"\"mean\":%.3f},\"over_ref_p99_first_tenth\":%u,\"over_ref_p99_rest\":%u}\n",
		e->d->name, lat_kind_keys[k], lat_pf_names[pf], LAT_PAGE, e->n,
		(size_t)2 * e->n * LAT_PAGE, info.absent, info.prefetch_us, q.p50, q.p90, q.p99,
		q.p999, q.max, q.mean, ref.p50, ref.p90, ref.p99, ref.p999, ref.max, ref.mean,
		q.p50 / ref.p50, q.p90 / ref.p90, q.p99 / ref.p99, q.p999 / ref.p999,
		q.max / ref.max, q.mean / ref.mean, slow_first, slow_rest);
	fprintf(tsv, "\"%s\" %s %.2f %.2f %.2f %.2f %.2f %.2f %.2f %.2f %.2f %.2f %.1f %u\n",
		lat_kind_names[k], lat_pf_names[pf], q.p50, q.p90, q.p99, q.p999, q.max, ref.p50,
		q.p50 / ref.p50, q.p99 / ref.p99, q.p999 / ref.p999, q.max / ref.max,
		info.prefetch_us, info.absent);
	printf("# latency %-17s prefetch %-5s p50 %8.1f us (x%5.2f) p99 %8.1f (x%5.2f) "
	       "p99.9 %8.1f (x%5.2f) max %8.1f; ref p50 %.1f us; %u absent before\n",
	       lat_kind_names[k], lat_pf_names[pf], q.p50, q.p50 / ref.p50, q.p99, q.p99 / ref.p99,
	       q.p999, q.p999 / ref.p999, q.max, ref.p50, info.absent);
}

static void exp_latency(struct dev *d)
{
	struct odpx_attr pa = { .comp_mask = ODPX_ATTR_MODE, .mode = ODPX_MODE_PIN };
	struct odpx_attr oa = { .comp_mask = ODPX_ATTR_MODE, .mode = ODPX_MODE_EXPLICIT };
	struct lat_env e = { .d = d, .n = R.lat_samples };
	struct odpx_mr *smr;
	FILE *tsv;
	int r;

	if ((r = odpx_open_verbs(d->pd, &pa, &e.pin)) || (r = odpx_open_verbs(d->pd, &oa, &e.odp)))
		DIE("latency: odpx_open_verbs: %s (%s)", strerror(-r), odpx_last_reason());
	e.src = dev_map((size_t)LAT_SRC_PAGES * LAT_PAGE, NULL);
	for (unsigned i = 0; i < LAT_SRC_PAGES; i++)
		dev_fill(e.src + (size_t)i * LAT_PAGE, LAT_PAGE, 1000 + i);
	CHECK_ODPX(odpx_reg(e.pin, e.src, (size_t)LAT_SRC_PAGES * LAT_PAGE,
			    ODPX_ACCESS_LOCAL_WRITE | ODPX_ACCESS_REMOTE_READ, &smr));
	e.src_rkey = odpx_mr_rkey(smr);
	e.ref = calloc(e.n, sizeof(double));
	e.lat = calloc(e.n, sizeof(double));
	if (!e.ref || !e.lat)
		DIE("calloc");
	e.cdf = open_in("latency-cdf.tsv");
	fprintf(e.cdf, "# latency us, cumulative fraction; one block per row of latency.tsv\n");
	tsv = open_in("latency.tsv");
	fprintf(tsv, "row prefetch p50_us p90_us p99_us p999_us max_us ref_p50_us ratio_p50 "
		"ratio_p99 ratio_p999 ratio_max prefetch_call_us absent_before\n");
	/* the pinned hit against itself first: the spread of two passes of the same thing */
	lat_row(&e, tsv, LAT_PINNED, 0);
	for (int pf = 0; pf < 3; pf++)
		for (int k = LAT_RESIDENT; k <= LAT_RECLAIM; k++)
			lat_row(&e, tsv, (enum lat_kind)k, pf);
	fclose(tsv);
	fclose(e.cdf);
	free(e.ref);
	free(e.lat);
	CHECK_ODPX(odpx_dereg(e.pin, smr));
	CHECK_ODPX(odpx_close(e.odp));
	CHECK_ODPX(odpx_close(e.pin));
	munmap(e.src, (size_t)LAT_SRC_PAGES * LAT_PAGE);
}

/* The device experiments, in a child: dev-util.h exits on a missing device or an error. */
static int run_device(const struct bench_opts *sel)
{
	struct dev d;
	bool w = selected(sel, "warmup"), p = selected(sel, "prefetch"), l = selected(sel, "latency");
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
	if (l)
		exp_latency(&d);
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

enum ws_variant { WS_ODP, WS_PINNED, WS_HYBRID, WS_NVARIANTS };
static const char *const ws_variant_names[] = { "odp", "pinned", "hybrid" };
static const char *const ws_variant_modes[] = { "explicit", "pin", "hybrid" };
/* hybrid: where the device cannot serve it, odpx_open_verbs() refuses it: "not available" */
static const enum odpx_mode ws_variant_mode[] = { ODPX_MODE_EXPLICIT, ODPX_MODE_PIN,
						  ODPX_MODE_HYBRID };

/* The outcome of a point, column 8 of workingset.tsv (bench/odpx-paging.gp draws it). */
enum ws_outcome { WS_OK, WS_REG_FAILED, WS_OOM_KILLED, WS_FAILED, WS_UNAVAILABLE, WS_FALLBACK,
		  WS_STALLED };

struct ws_point {
	enum ws_stage stage;
	int open_err;		/* -errno of odpx_open_verbs(), 0 */
	int reg_err;		/* -errno of the region's registration, 0 */
	uint64_t direct_regs, pin_failures, odp_mrs, pinned_bytes;	/* after the registration */
	uint64_t hybrid_pinned, hybrid_odp, odp_bytes, memcg_refusals;	/* the same */
	double secs, mb_s, refault_s, majflt_s;
	uint64_t transfers, refaults, majflts;
	int worst, last, events;
	char reason[320];	/* odpx_last_reason() after a failed registration */
};

static struct ws_point *ws_shared;

/*
 * max_pinned_bytes of the pinned and hybrid runs (every mode's context gets
 * it): raised so that the cgroup bounds pinning, not odpx's own budget.
 */
static uint64_t ws_budget(size_t bytes)
{
	return 4 * (uint64_t)bytes + 16 * MiB;
}

static uint64_t ph_budget(void)
{
	return 8 * (uint64_t)R.memory_max + 16 * MiB;
}

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
static int ws_child(const struct ws_cg *cg, enum ws_variant v, size_t bytes, double secs)
{
	struct ws_point *pt = ws_shared;
	struct odpx_attr a = {
		.comp_mask = ODPX_ATTR_MODE | ODPX_ATTR_THRASH_CB | ODPX_ATTR_LIMITS,
		.mode = ws_variant_mode[v],
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
	a.limits.max_pinned_bytes = ws_budget(bytes);
	if ((r = odpx_open_verbs(d.pd, &a, &ctx))) {
		if (v != WS_HYBRID)
			DIE("odpx_open_verbs(%s): %s (%s)", ws_variant_modes[v], strerror(-r),
			    odpx_last_reason());
		pt->open_err = r;
		snprintf(pt->reason, sizeof(pt->reason), "%s", odpx_last_reason());
		return 0;
	}
	pt->stage = WS_WRITING;
	if ((r = ws_setup(&w, &d, ctx, bytes))) {
		/* the sink's and source's registrations are pins too: the cgroup may refuse them */
		if (r != -ENOMEM || !odpx_last_reason()[0])
			DIE("workingset: setting up %zu MiB failed", bytes >> 20);
		pt->reg_err = r;
		snprintf(pt->reason, sizeof(pt->reason), "the sink or source buffer: %s",
			 odpx_last_reason());
		return 0;
	}
	pt->stage = WS_REGISTERING;
	struct odpx_stats s0 = stats_of(ctx), s1;
	r = ws_register(&w);
	s1 = stats_of(ctx);
	pt->direct_regs = s1.direct_regs - s0.direct_regs;
	pt->pin_failures = s1.pin_failures - s0.pin_failures;
	pt->odp_mrs = s1.odp_mrs - s0.odp_mrs;
	pt->pinned_bytes = s1.pinned_bytes;
	pt->hybrid_pinned = s1.hybrid_pinned - s0.hybrid_pinned;
	pt->hybrid_odp = s1.hybrid_odp - s0.hybrid_odp;
	pt->odp_bytes = s1.odp_bytes;
	pt->memcg_refusals = s1.memcg_refusals - s0.memcg_refusals;
	if (r < 0) {
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

/*
 * A child that does not end @secs after it started is killed and reported as stalled: with
 * most of the cgroup's memory pinned, reclaim swaps the rest of the process (its code, the
 * part of the region not pinned) in and out, and a transfer can take seconds.  true if so.
 */
#define WS_STALL_MARGIN_S	120	/* writing and checking a region of 4M under TCG */
static bool wait_or_kill(pid_t pid, int *st, double secs)
{
	uint64_t end = now_ns() + (uint64_t)(secs * 1e9);

	for (;;) {
		struct timespec ts = { 0, 50 * 1000000L };
		pid_t r = waitpid(pid, st, WNOHANG);

		if (r == pid)
			return false;
		if (r < 0)
			DIE("waitpid: %s", strerror(errno));
		if (now_ns() > end) {
			kill(pid, SIGKILL);
			if (waitpid(pid, st, 0) != pid)
				DIE("waitpid: %s", strerror(errno));
			return true;
		}
		nanosleep(&ts, NULL);
	}
}

/* What one point gave: workingset.tsv's columns; mb_s < 0 where it did not run to its end. */
struct ws_res {
	double mb_s, refault_s, majflt_s;
	int state, code;
};

/* One point: a fresh cgroup, a child in it, what became of it.  false: no device (77). */
static bool ws_point(enum ws_variant v, double ratio, double secs, unsigned round,
		     struct ws_res *res)
{
	const char *variant = ws_variant_names[v];
	size_t bytes = (size_t)((double)R.memory_max * ratio) / WS_CHUNK * WS_CHUNK;
	char name[64], why[PATH_MAX + 128], outcome[512];
	struct ws_cg cg;
	int st, code;
	pid_t pid;

	snprintf(name, sizeof(name), "odpx-paging.%d", (int)getpid());
	if (ws_cg_create(&cg, R.cgroup, name, R.memory_max, why, sizeof(why)))
		DIE("workingset: %s", why);
	memset(ws_shared, 0, sizeof(*ws_shared));
	fflush(NULL);
	if ((pid = fork()) == 0)
		_exit(ws_child(&cg, v, bytes, secs));
	if (pid < 0)
		DIE("fork: %s", strerror(errno));
	bool stalled = wait_or_kill(pid, &st, secs + WS_STALL_MARGIN_S);
	int64_t oom = ws_cg_value(&cg, "memory.events", "oom_kill");
	int64_t max_hit = ws_cg_value(&cg, "memory.events", "max");
	ws_cg_remove(&cg);
	if (!stalled && WIFEXITED(st) && WEXITSTATUS(st) == 77)
		return false;
	struct ws_point *pt = ws_shared;
	/* what the registration returned: its -errno, or served by direct pinning (counted) */
	char reg[64];
	if (pt->reg_err)
		snprintf(reg, sizeof(reg), "-%s", strerrorname_np(-pt->reg_err) ?
			 strerrorname_np(-pt->reg_err) : "?");
	else if (pt->stage < WS_REGISTERING || pt->open_err)
		snprintf(reg, sizeof(reg), "not reached");
	else if (pt->reg_err)
		snprintf(reg, sizeof(reg), "-%s", strerrorname_np(-pt->reg_err) ?
			 strerrorname_np(-pt->reg_err) : "?");
	else if (pt->stage == WS_REGISTERING)
		snprintf(reg, sizeof(reg), "did not return");
	else if (pt->direct_regs)
		snprintf(reg, sizeof(reg), "fallback: direct");
	else if (pt->hybrid_odp)
		snprintf(reg, sizeof(reg), "ok: served ODP");
	else if (pt->hybrid_pinned)
		snprintf(reg, sizeof(reg), "ok: served pinned");
	else
		snprintf(reg, sizeof(reg), "ok");
	if (stalled) {
		snprintf(outcome, sizeof(outcome), "stalled: killed after %.0f s while %s "
			 "(memory.events oom_kill %" PRId64 ")", secs + WS_STALL_MARGIN_S,
			 ws_stage_names[pt->stage], oom);
		code = WS_STALLED;
	} else if (WIFEXITED(st) && WEXITSTATUS(st) == 0 && pt->open_err) {
		snprintf(outcome, sizeof(outcome), "not available: %s (%s)", strerror(-pt->open_err),
			 pt->reason);
		code = WS_UNAVAILABLE;
	} else if (WIFEXITED(st) && WEXITSTATUS(st) == 0 && pt->stage == WS_DONE) {
		snprintf(outcome, sizeof(outcome), pt->direct_regs ? "ok, served direct" : "ok");
		code = pt->direct_regs ? WS_FALLBACK : WS_OK;
	} else if (WIFEXITED(st) && WEXITSTATUS(st) == 0 && pt->reg_err) {
		snprintf(outcome, sizeof(outcome), "registration failed: %s (%s)",
			 strerror(-pt->reg_err), pt->reason);
		code = WS_REG_FAILED;
	} else if (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL && oom > 0) {
		snprintf(outcome, sizeof(outcome), "OOM-killed while %s (memory.events oom_kill %" PRId64 ")",
			 ws_stage_names[pt->stage], oom);
		code = WS_OOM_KILLED;
	} else {
		snprintf(outcome, sizeof(outcome), "failed while %s: %s %d (see the output above)",
			 ws_stage_names[pt->stage], WIFSIGNALED(st) ? "signal" : "exit status",
			 WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
		code = WS_FAILED;
		R.failed++;
	}
	bool done = code == WS_OK || code == WS_FALLBACK;
	*res = (struct ws_res){ done ? pt->mb_s : -1, pt->refault_s, pt->majflt_s,
				done ? pt->last : -1, code };
	fprintf(R.nd, "{\"exp\":\"workingset\",\"variant\":\"%s\",\"mode\":\"%s\",\"round\":%u,"
		"\"memory_max_mib\":%.1f,\"ws_mib\":%.1f,\"ws_ratio\":%.3f,\"secs\":%.3f,\"mb_s\":%.2f,\"transfers\":%lu,"
		"\"refaults\":%lu,\"pgmajfault\":%lu,\"refault_s\":%.1f,\"majflt_s\":%.1f,"
		"\"state\":\"%s\",\"worst_state\":\"%s\",\"state_changes\":%d,\"memory_events_max\":%" PRId64
		",\"oom_kill\":%" PRId64 ",\"registration\":\"%s\",\"direct_regs\":%" PRIu64
		",\"pin_failures\":%" PRIu64 ",\"odp_mrs\":%" PRIu64 ",\"pinned_bytes\":%" PRIu64
		",\"odp_bytes\":%" PRIu64 ",\"hybrid_pinned\":%" PRIu64 ",\"hybrid_odp\":%" PRIu64
		",\"memcg_refusals\":%" PRIu64 ",\"max_pinned_bytes\":%" PRIu64
		",\"bytes_checked\":%s,\"outcome\":\"%s\"}\n", variant, ws_variant_modes[v],
		round, (double)R.memory_max / MiB, (double)bytes / MiB, ratio, pt->secs, pt->mb_s,
		(unsigned long)pt->transfers, (unsigned long)pt->refaults, (unsigned long)pt->majflts,
		pt->refault_s, pt->majflt_s, state_name((uint64_t)pt->last), state_name((uint64_t)pt->worst),
		pt->events, max_hit, oom, reg, pt->direct_regs, pt->pin_failures, pt->odp_mrs,
		pt->pinned_bytes, pt->odp_bytes, pt->hybrid_pinned, pt->hybrid_odp,
		pt->memcg_refusals, ws_budget(bytes), done ? "true" : "false", outcome);
	printf("# workingset %-6s %6.1f MiB (%.2f M, round %u): %s", variant, (double)bytes / MiB,
	       ratio, round + 1, outcome);
	if (done)
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

/* The round of @r[0, n) whose MB/s is the median (the lower of the middle two). */
static const struct ws_res *ws_median(const struct ws_res *r, unsigned n)
{
	const struct ws_res *m = &r[0];

	for (unsigned i = 0; i < n; i++) {
		unsigned below = 0, same = 0;

		for (unsigned j = 0; j < n; j++) {
			below += r[j].mb_s < r[i].mb_s;
			same += r[j].mb_s == r[i].mb_s && j < i;
		}
		if (below + same == (n - 1) / 2)
			m = &r[i];
	}
	return m;
}

/*
 * Each point runs the three modes one after the other, each in its own child and cgroup,
 * in an order that rotates with the point and the round, and again for each round: a
 * mode's figure is the median of its rounds, so that a host's slow minute lands on every
 * mode alike.  A point counts as run only where every round of it ran to its end.
 */
static void exp_workingset(void)
{
	static const double ratios[] = { 0.25, 0.5, 1, 2, 4 };
	enum { NR = sizeof(ratios) / sizeof(ratios[0]), MAX_ROUNDS = 9 };
	unsigned rounds = R.ws_rounds ? R.ws_rounds : R.quick ? 1 : 3;
	double secs = R.quick ? 1.0 : 4.0, mb[WS_NVARIANTS][NR];
	static struct ws_res res[WS_NVARIANTS][NR][MAX_ROUNDS];
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
	for (unsigned i = 0; i < NR; i++)
		for (unsigned k = 0; k < rounds * WS_NVARIANTS; k++) {
			unsigned round = k / WS_NVARIANTS, v = (k + round + i) % WS_NVARIANTS;

			if (!ws_point((enum ws_variant)v, ratios[i], secs, round, &res[v][i][round])) {
				skip("workingset", "no usable RDMA device (loopback GID or ODP missing: see above)");
				munmap(ws_shared, sizeof(*ws_shared));
				return;
			}
		}
	tsv = open_in("workingset.tsv");
	fprintf(tsv, "# variant ws_ratio ws_mib mb_s refault_s majflt_s state outcome mb_min mb_max"
		" (variant: 0 explicit ODP, 1 pinned, 2 hybrid; outcome: 0 ok, 1 registration failed,"
		" 2 OOM-killed, 3 failed, 4 mode not available, 5 ok, served direct, 6 stalled;"
		" the median of %u rounds, the least and most MB/s of them; memory.max %.0f MiB)\n",
		rounds, (double)R.memory_max / MiB);
	for (int v = 0; v < WS_NVARIANTS; v++) {
		for (unsigned i = 0; i < NR; i++) {
			const struct ws_res *r = res[v][i], *m = ws_median(r, rounds);
			double lo = r[0].mb_s, hi = r[0].mb_s;

			for (unsigned k = 0; k < rounds; k++) {
				lo = r[k].mb_s < lo ? r[k].mb_s : lo;
				hi = r[k].mb_s > hi ? r[k].mb_s : hi;
				if (r[k].mb_s < 0)	/* one round that did not run: the point did not */
					m = &r[k];
			}
			mb[v][i] = m->mb_s;
			fprintf(tsv, "%d %.3f %.1f %.2f %.1f %.1f %d %d %.2f %.2f\n", v, ratios[i],
				(double)((size_t)((double)R.memory_max * ratios[i]) / WS_CHUNK * WS_CHUNK) / MiB,
				m->mb_s, m->refault_s, m->majflt_s, m->state, m->code, lo, hi);
		}
		fprintf(tsv, "\n\n");	/* a gnuplot data block per variant */
	}
	fclose(tsv);
	/* hybrid against the better of the other two at each point (-1: did not run; null) */
	for (unsigned i = 0; i < NR; i++) {
		double best = mb[WS_ODP][i] > mb[WS_PINNED][i] ? mb[WS_ODP][i] : mb[WS_PINNED][i];
		char vs[32] = "null", each[MAX_ROUNDS * 8 + 2] = "";

		if (best > 0 && mb[WS_HYBRID][i] >= 0)
			snprintf(vs, sizeof(vs), "%.3f", mb[WS_HYBRID][i] / best);
		/* and round by round, each against the others of its own round */
		for (unsigned k = 0; k < rounds; k++) {
			double b = res[WS_ODP][i][k].mb_s > res[WS_PINNED][i][k].mb_s ?
				   res[WS_ODP][i][k].mb_s : res[WS_PINNED][i][k].mb_s;
			double h = res[WS_HYBRID][i][k].mb_s;

			snprintf(each + strlen(each), sizeof(each) - strlen(each), "%s%s", k ? "," : "",
				 b > 0 && h >= 0 ? "" : "null");
			if (b > 0 && h >= 0)
				snprintf(each + strlen(each), sizeof(each) - strlen(each), "%.3f", h / b);
		}
		fprintf(R.nd, "{\"exp\":\"workingset\",\"summary\":true,\"ws_ratio\":%.3f,"
			"\"rounds\":%u,\"odp_mb_s\":%.2f,\"pinned_mb_s\":%.2f,\"hybrid_mb_s\":%.2f,"
			"\"hybrid_vs_best\":%s,\"hybrid_vs_best_each_round\":[%s]}\n", ratios[i], rounds,
			mb[WS_ODP][i], mb[WS_PINNED][i], mb[WS_HYBRID][i], vs, each);
		printf("# workingset %.2f M: hybrid against the better of pinned and ODP (medians of %u "
		       "rounds): %s; round by round: %s\n", ratios[i], rounds,
		       strcmp(vs, "null") ? vs : "hybrid or both others did not run", each);
	}
	munmap(ws_shared, sizeof(*ws_shared));
	ran("workingset");
}
/*
 * ---- phase: a working set that grows past memory.max and shrinks back ----
 *
 * Per mode (explicit ODP, pinned, hybrid), in a fresh cgroup of memory.max M with swap, a
 * child writes a region of 2M with the CPU, then sweeps its first M/4 (small), all of it
 * (large) and its first M/4 again (small again), PH_PHASE_S each.  Each 64 KiB chunk is
 * registered for its two transfers and released after them (odpx_reg, odpx_dereg): the
 * cache keeps what the mode lets it keep, and hybrid chooses per registration whether a
 * range is served pinned or ODP.  A registration that fails is counted and its chunk left
 * for the next pass; every transfer's bytes are checked, and the whole region at the end.
 * Every PH_STEP_MS the child writes a sample: MB/s, the thrash detector's state, the
 * context's pinned bytes, ODP MRs made, registrations served direct and failed.  The
 * parent records how the child ended (an OOM kill included).
 */
#define PH_STEP_MS	250
enum ph_phase { PH_SMALL, PH_LARGE, PH_SMALL_AGAIN, PH_NPHASES };
static const char *const ph_names[] = { "small", "large", "small again" };

struct ph_shared {
	enum ws_stage stage;
	int open_err;
	char reason[320];
	uint64_t transfers, reg_failed;
	int last_err;
	int events;		/* the thrash callback's reports */
};

/* The ODP modes read the cgroup's refaults only while a thrash callback is set. */
static void ph_on_thrash(struct odpx_ctx *ctx, const struct odpx_thrash_event *ev, void *arg)
{
	struct ph_shared *sh = arg;

	sh->events++;
}

static int ph_child(const struct ws_cg *cg, enum ws_variant v, double phase_s, struct ph_shared *sh)
{
	struct odpx_attr a = { .comp_mask = ODPX_ATTR_MODE | ODPX_ATTR_LIMITS | ODPX_ATTR_THRASH_CB,
			       .mode = ws_variant_mode[v], .thrash_cb = ph_on_thrash, .thrash_arg = sh };
	size_t n[PH_NPHASES] = { R.memory_max / 4 / WS_CHUNK, 2 * R.memory_max / WS_CHUNK,
				 R.memory_max / 4 / WS_CHUNK };
	char name[64];
	struct odpx_ctx *ctx;
	struct dev d;
	struct ws w;
	FILE *tsv;
	int r;

	if ((r = ws_cg_enter(cg)))
		DIE("cannot enter %s: %s", cg->dir, strerror(-r));
	sh->stage = WS_OPENING;
	dev_open(&d);
	dev_require_odp(&d, IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_WRITE);
	dev_connect_self(&d);
	a.limits.max_pinned_bytes = ph_budget();
	if ((r = odpx_open_verbs(d.pd, &a, &ctx))) {
		if (v != WS_HYBRID)
			DIE("odpx_open_verbs(%s): %s (%s)", ws_variant_modes[v], strerror(-r),
			    odpx_last_reason());
		sh->open_err = r;
		snprintf(sh->reason, sizeof(sh->reason), "%s", odpx_last_reason());
		return 0;
	}
	snprintf(name, sizeof(name), "phase-%s.tsv", ws_variant_names[v]);
	tsv = open_in(name);
	setvbuf(tsv, NULL, _IOLBF, 0);
	fprintf(tsv, "t mb_s state pinned_mib odp_mrs direct_regs reg_failed phase odp_mib "
		"hybrid_pinned hybrid_odp hybrid_to_pin hybrid_released\n");
	sh->stage = WS_WRITING;
	if ((r = ws_setup(&w, &d, ctx, 2 * R.memory_max))) {
		/* as in workingset: a refused pin of the sink or source is an outcome */
		if (r != -ENOMEM || !odpx_last_reason()[0])
			DIE("phase: setting up the region failed");
		sh->reg_failed++;
		sh->last_err = r;
		snprintf(sh->reason, sizeof(sh->reason), "the sink or source buffer: %s",
			 odpx_last_reason());
		return 0;
	}
	sh->stage = WS_SWEEPING;
	uint64_t t0 = now_ns(), ts = t0, bytes = 0;
	struct odpx_stats s0 = stats_of(ctx);
	for (int ph = 0; ph < PH_NPHASES; ph++) {
		uint64_t end = now_ns() + (uint64_t)(phase_s * 1e9);
		size_t i = 0;
		while (now_ns() < end) {
			struct odpx_mr *mr;
			if (i >= n[ph])
				i = 0;
			r = odpx_reg(ctx, w.region + i * WS_CHUNK, WS_CHUNK, ODPX_ACCESS_LOCAL_WRITE, &mr);
			if (r < 0) {
				sh->reg_failed++;
				sh->last_err = r;
			} else {
				uint64_t b0 = w.bytes;
				w.mr = mr;
				if ((r = ws_step(&w, i)))
					DIE("phase: %s, chunk %zu: %s", ph_names[ph], i, strerror(-r));
				w.mr = NULL;
				CHECK_ODPX(odpx_dereg(ctx, mr));
				bytes += w.bytes - b0;
				sh->transfers = w.transfers;
			}
			i++;
			uint64_t t = now_ns();
			if (t - ts >= PH_STEP_MS * 1000000ULL) {
				struct odpx_stats s = stats_of(ctx);
				double mb = (double)bytes / ((double)(t - ts) / 1e9) / 1e6;
				fprintf(R.nd, "{\"exp\":\"phase\",\"variant\":\"%s\",\"mode\":\"%s\",\"t\":%.3f,"
					"\"phase\":\"%s\",\"mb_s\":%.2f,\"state\":\"%s\",\"pinned_bytes\":%" PRIu64
					",\"odp_mrs\":%" PRIu64 ",\"direct_regs\":%" PRIu64 ",\"evictions\":%" PRIu64
					",\"odp_bytes\":%" PRIu64 ",\"hybrid_pinned\":%" PRIu64
					",\"hybrid_odp\":%" PRIu64 ",\"hybrid_to_pin\":%" PRIu64
					",\"hybrid_released\":%" PRIu64 ",\"memcg_refusals\":%" PRIu64
					",\"memcg_released\":%" PRIu64 ",\"reg_failed\":%" PRIu64
					",\"transfers\":%" PRIu64 "}\n",
					ws_variant_names[v], ws_variant_modes[v], (double)(t - t0) / 1e9,
					ph_names[ph], mb, state_name(s.thrash_state), s.pinned_bytes,
					s.odp_mrs - s0.odp_mrs, s.direct_regs - s0.direct_regs,
					s.evictions - s0.evictions, s.odp_bytes,
					s.hybrid_pinned - s0.hybrid_pinned, s.hybrid_odp - s0.hybrid_odp,
					s.hybrid_to_pin - s0.hybrid_to_pin,
					s.hybrid_released - s0.hybrid_released,
					s.memcg_refusals - s0.memcg_refusals,
					s.memcg_released - s0.memcg_released, sh->reg_failed,
					w.transfers);
				fprintf(tsv, "%.3f %.2f %lu %.2f %lu %lu %lu %d %.2f %lu %lu %lu %lu\n",
					(double)(t - t0) / 1e9, mb, (unsigned long)s.thrash_state,
					(double)s.pinned_bytes / MiB,
					(unsigned long)(s.odp_mrs - s0.odp_mrs),
					(unsigned long)(s.direct_regs - s0.direct_regs),
					(unsigned long)sh->reg_failed, ph, (double)s.odp_bytes / MiB,
					(unsigned long)(s.hybrid_pinned - s0.hybrid_pinned),
					(unsigned long)(s.hybrid_odp - s0.hybrid_odp),
					(unsigned long)(s.hybrid_to_pin - s0.hybrid_to_pin),
					(unsigned long)(s.hybrid_released - s0.hybrid_released));
				bytes = 0;
				ts = t;
			}
		}
	}
	sh->stage = WS_CHECKING;
	if (ws_check_region(&w))
		DIE("phase: the region differs from what the transfers wrote");
	sh->stage = WS_DONE;
	fclose(tsv);
	ws_teardown(&w);
	CHECK_ODPX(odpx_close(ctx));
	dev_close(&d);
	return 0;
}

static void exp_phase(void)
{
	double phase_s = R.quick ? 2 : R.phase_s;
	char why[PATH_MAX + 160], name[64], outcome[512];
	struct ph_shared *sh;
	struct ws_cg cg;
	bool any = false;

	if (ws_unavailable(why, sizeof(why))) {
		skip("phase", why);
		return;
	}
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		DIE("mmap: %s", strerror(errno));
	for (int v = 0; v < WS_NVARIANTS; v++) {
		int st = 0;
		pid_t pid;

		snprintf(name, sizeof(name), "odpx-phase.%d", (int)getpid());
		if (ws_cg_create(&cg, R.cgroup, name, R.memory_max, why, sizeof(why)))
			DIE("phase: %s", why);
		memset(sh, 0, sizeof(*sh));
		fflush(NULL);
		if ((pid = fork()) == 0)
			_exit(ph_child(&cg, (enum ws_variant)v, phase_s, sh));
		if (pid < 0)
			DIE("fork: %s", strerror(errno));
		bool stalled = wait_or_kill(pid, &st, 3 * phase_s + WS_STALL_MARGIN_S);
		int64_t oom = ws_cg_value(&cg, "memory.events", "oom_kill");
		ws_cg_remove(&cg);
		if (!stalled && WIFEXITED(st) && WEXITSTATUS(st) == 77) {
			skip("phase", "no usable RDMA device (loopback GID or ODP missing: see above)");
			munmap(sh, sizeof(*sh));
			return;
		}
		if (stalled)
			snprintf(outcome, sizeof(outcome), "stalled: killed after %.0f s while %s "
				 "(memory.events oom_kill %" PRId64 ")", 3 * phase_s + WS_STALL_MARGIN_S,
				 ws_stage_names[sh->stage], oom);
		else if (WIFEXITED(st) && !WEXITSTATUS(st) && sh->open_err)
			snprintf(outcome, sizeof(outcome), "not available: %s (%s)",
				 strerror(-sh->open_err), sh->reason);
		else if (WIFEXITED(st) && !WEXITSTATUS(st) && sh->stage == WS_DONE)
			snprintf(outcome, sizeof(outcome), "ok");
		else if (WIFEXITED(st) && !WEXITSTATUS(st) && sh->last_err)
			snprintf(outcome, sizeof(outcome), "registration failed: %s (%s)",
				 strerror(-sh->last_err), sh->reason);
		else if (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL && oom > 0)
			snprintf(outcome, sizeof(outcome), "OOM-killed while %s (memory.events oom_kill %"
				 PRId64 ")", ws_stage_names[sh->stage], oom);
		else {
			snprintf(outcome, sizeof(outcome), "failed while %s: %s %d (see the output above)",
				 ws_stage_names[sh->stage], WIFSIGNALED(st) ? "signal" : "exit status",
				 WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
			R.failed++;
		}
		any |= !sh->open_err;
		fprintf(R.nd, "{\"exp\":\"phase\",\"summary\":true,\"variant\":\"%s\",\"mode\":\"%s\","
			"\"memory_max_mib\":%.1f,\"max_pinned_bytes\":%" PRIu64 ",\"phase_s\":%.1f,"
			"\"transfers\":%" PRIu64 ",\"reg_failed\":%" PRIu64 ",\"last_reg_err\":\"%s\","
			"\"state_changes\":%d,\"oom_kill\":%" PRId64 ",\"outcome\":\"%s\"}\n",
			ws_variant_names[v], ws_variant_modes[v], (double)R.memory_max / MiB,
			ph_budget(), phase_s, sh->transfers, sh->reg_failed,
			sh->last_err ? strerror(-sh->last_err) : "", sh->events, oom, outcome);
		printf("# phase %-6s: %s; %" PRIu64 " transfers checked, %" PRIu64
		       " registrations failed%s%s\n", ws_variant_names[v], outcome, sh->transfers,
		       sh->reg_failed, sh->last_err ? ", the last with " : "",
		       sh->last_err ? strerror(-sh->last_err) : "");
	}
	munmap(sh, sizeof(*sh));
	if (any)
		ran("phase");
}

/*
 * ---- memtrace: a memory cgroup's counters recorded while an ODP working set pages ----
 *
 * Only when named in --only.  A child in a fresh cgroup of memory.max M writes a region of
 * 2M with the CPU (pages over M go to swap) and registers it (explicit ODP, with the thrash
 * callback), then sweeps the first M/4 once (warmup: the device faults in what is in swap),
 * M/4 again (steady), the whole 2M (over) and M/4 again (recovery), the last three for a
 * fixed time each, checking every transfer (dev-paging-ws.h).  The parent, outside the cgroup, reads the cgroup's
 * memory.stat and /proc/vmstat every MT_WINDOW_MS and writes memcg.trace: per window its
 * length in seconds, the child's phase at its end and the cumulative counters named in the file's
 * "# columns:" line, the ones the thrash detector reads from these two files
 * (tests/stats-thrash-recorded.c replays it).  Sampling stops when the recovery ends.
 */
#define MT_WINDOW_MS	250
enum mt_phase { MT_START, MT_WRITE, MT_WARMUP, MT_STEADY, MT_OVER, MT_RECOVERY, MT_END };
static const char *const mt_names[] = { "start", "write", "warmup", "steady", "over", "recovery",
					"end" };
static const char *const mt_memcg[] = { "workingset_refault_anon", "workingset_refault_file",
					"pgfault", "pgmajfault", "pgscan", "pgsteal" };
static const char *const mt_vmstat[] = { "workingset_refault_anon", "workingset_refault_file",
					 "pgfault", "pgmajfault", "pgscan_kswapd", "pgscan_direct" };

struct mt_shared {
	_Atomic int phase;
	int nev;
	struct { int state; double t; } ev[32];	/* the thrash callback's reports */
};

static uint64_t mt_t0;

static void mt_on_thrash(struct odpx_ctx *ctx, const struct odpx_thrash_event *ev, void *arg)
{
	struct mt_shared *m = arg;

	if (m->nev < 32) {
		m->ev[m->nev].state = (int)ev->state;
		m->ev[m->nev++].t = (double)(now_ns() - mt_t0) / 1e9;
	}
}

static int mt_child(const struct ws_cg *cg, struct mt_shared *m, double phase_s)
{
	struct odpx_attr a = { .comp_mask = ODPX_ATTR_MODE | ODPX_ATTR_THRASH_CB,
			       .mode = ODPX_MODE_EXPLICIT, .thrash_cb = mt_on_thrash, .thrash_arg = m };
	size_t sizes[] = { R.memory_max / 4, 2 * R.memory_max, R.memory_max / 4 }, pos = 0;
	size_t fit = R.memory_max / 4 / WS_CHUNK;
	struct odpx_ctx *ctx;
	struct dev d;
	struct ws w;
	int r;

	if ((r = ws_cg_enter(cg)))
		DIE("cannot enter %s: %s", cg->dir, strerror(-r));
	dev_open(&d);
	dev_require_odp(&d, IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_WRITE);
	dev_connect_self(&d);
	CHECK_ODPX(odpx_open_verbs(d.pd, &a, &ctx));
	atomic_store(&m->phase, MT_WRITE);
	if (ws_setup(&w, &d, ctx, 2 * R.memory_max) || (r = ws_register(&w)) < 0)
		DIE("memtrace: setting up the region failed");
	atomic_store(&m->phase, MT_WARMUP);
	for (size_t i = 0; i < fit; i++)
		if ((r = ws_step(&w, i)))
			DIE("memtrace: the warmup sweep failed (%s)", strerror(-r));
	for (int ph = MT_STEADY; ph <= MT_RECOVERY; ph++) {
		atomic_store(&m->phase, ph);
		pos = 0;
		if ((r = ws_sweep(&w, sizes[ph - MT_STEADY] / WS_CHUNK, &pos,
				  now_ns() + (uint64_t)(phase_s * 1e9), NULL, NULL)))
			DIE("memtrace: the %s sweep failed (%s)", mt_names[ph], strerror(-r));
	}
	atomic_store(&m->phase, MT_END);
	if (ws_check_region(&w))
		DIE("memtrace: the region differs from what the transfers wrote");
	printf("# memtrace: %" PRIu64 " transfers checked\n", w.transfers);
	ws_teardown(&w);
	CHECK_ODPX(odpx_close(ctx));
	dev_close(&d);
	return 0;
}

/* The values of @keys in the "name value" file @path, all of them or DIE. */
static void mt_read(const char *path, const char *const *keys, size_t n, uint64_t *v)
{
	char line[256];
	size_t got = 0;
	FILE *f = fopen(path, "re");

	if (!f)
		DIE("%s: %s", path, strerror(errno));
	while (fgets(line, sizeof(line), f)) {
		char *sp = strchr(line, ' ');
		if (!sp)
			continue;
		*sp = 0;
		for (size_t i = 0; i < n; i++)
			if (!strcmp(line, keys[i])) {
				v[i] = strtoull(sp + 1, NULL, 10);
				got++;
			}
	}
	fclose(f);
	if (got != n)
		DIE("%s: %zu of the %zu counters memtrace records", path, got, n);
}

static void exp_memtrace(void)
{
	const size_t nm = sizeof(mt_memcg) / sizeof(mt_memcg[0]);
	const size_t nv = sizeof(mt_vmstat) / sizeof(mt_vmstat[0]);
	double phase_s = R.quick ? 5 : 20;
	char why[PATH_MAX + 160], name[64], path[PATH_MAX + 32];
	uint64_t v[16], tp;
	struct mt_shared *m;
	struct utsname u;
	struct ws_cg cg;
	unsigned lines = 0;
	int st = 0;
	pid_t pid;

	if (ws_unavailable(why, sizeof(why))) {
		skip("memtrace", why);
		return;
	}
	snprintf(name, sizeof(name), "odpx-memtrace.%d", (int)getpid());
	if (ws_cg_create(&cg, R.cgroup, name, R.memory_max, why, sizeof(why)))
		DIE("memtrace: %s", why);
	m = mmap(NULL, sizeof(*m), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		DIE("mmap: %s", strerror(errno));
	FILE *f = open_in("memcg.trace");
	uname(&u);
	fprintf(f, "# memcg.trace: odpx-paging%s on %s, kernel %s, memory.max %.0f MiB, "
		"a region of %.0f MiB; working sets: warmup one pass over %.0f MiB, steady %.0f MiB, "
		"over %.0f MiB, recovery %.0f MiB, %.0f s each; ODPX_THRASH %s\n", R.args + strlen(": odpx-paging"), u.nodename, u.release, (double)R.memory_max / MiB,
		2.0 * R.memory_max / MiB, R.memory_max / 4.0 / MiB, R.memory_max / 4.0 / MiB,
		2.0 * R.memory_max / MiB,
		R.memory_max / 4.0 / MiB, phase_s, getenv("ODPX_THRASH") ? getenv("ODPX_THRASH") : "");
	fprintf(f, "# columns: secs phase");
	for (size_t i = 0; i < nm; i++)
		fprintf(f, " memcg.%s", mt_memcg[i]);
	for (size_t i = 0; i < nv; i++)
		fprintf(f, " vmstat.%s", mt_vmstat[i]);
	fprintf(f, "\n");
	fflush(NULL);
	mt_t0 = tp = now_ns();
	if ((pid = fork()) == 0)
		_exit(mt_child(&cg, m, phase_s));
	if (pid < 0)
		DIE("fork: %s", strerror(errno));
	snprintf(path, sizeof(path), "%s/memory.stat", cg.dir);
	while (atomic_load(&m->phase) < MT_END && waitpid(pid, &st, WNOHANG) == 0) {
		struct timespec ts = { 0, MT_WINDOW_MS * 1000000L };
		nanosleep(&ts, NULL);
		int ph = atomic_load(&m->phase);
		uint64_t t = now_ns();
		if (ph == MT_END)	/* the CPU's check of the region is no phase of the trace */
			break;
		mt_read(path, mt_memcg, nm, v);
		mt_read("/proc/vmstat", mt_vmstat, nv, v + nm);
		fprintf(f, "%.3f %s", (double)(t - tp) / 1e9, mt_names[ph]);
		for (size_t i = 0; i < nm + nv; i++)
			fprintf(f, " %" PRIu64, v[i]);
		fprintf(f, "\n");
		fprintf(R.nd, "{\"exp\":\"memtrace\",\"t\":%.3f,\"phase\":\"%s\",\"refault_anon\":%" PRIu64
			",\"pgmajfault\":%" PRIu64 ",\"pgscan\":%" PRIu64 "}\n", (double)(t - mt_t0) / 1e9,
			mt_names[ph], v[0], v[3], v[4]);
		tp = t;
		lines++;
	}
	if (waitpid(pid, &st, 0) != pid && errno != ECHILD)
		DIE("waitpid: %s", strerror(errno));
	ws_cg_remove(&cg);
	fprintf(f, "# the library's thrash callback in this run:");
	for (int i = 0; i < m->nev; i++)
		fprintf(f, " %s at %.2f s", state_name((uint64_t)m->ev[i].state), m->ev[i].t);
	fprintf(f, "\n");
	fclose(f);
	if (!WIFEXITED(st) || WEXITSTATUS(st)) {
		skip("memtrace", WIFEXITED(st) && WEXITSTATUS(st) == 77 ?
		     "no usable RDMA device (loopback GID or ODP missing: see above)" :
		     "the child failed (see the output above)");
		munmap(m, sizeof(*m));
		return;
	}
	printf("# memtrace: %u windows of %d ms in memcg.trace\n", lines, MT_WINDOW_MS);
	munmap(m, sizeof(*m));
	ran("memtrace");
}
#endif

/* warmup, prefetch and latency: in a child, the report's files shared; a failure is recorded */
static void run_device_experiments(const struct bench_opts *sel, bool rdma)
{
	static const char *const exps[] = { "warmup", "prefetch", "latency" };
	const size_t nexps = sizeof(exps) / sizeof(exps[0]);
	const char *why = NULL;
	char buf[96];
	int st = 0;

	if (!selected(sel, "warmup") && !selected(sel, "prefetch") && !selected(sel, "latency"))
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
			for (size_t i = 0; i < nexps; i++)
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
	for (size_t i = 0; i < nexps; i++)
		if (selected(sel, exps[i]))
			skip(exps[i], why);
}

/* workingset, phase or memtrace: a device and a memory cgroup */
static void run_workingset(bool rdma, const char *name)
{
#ifdef ODPX_HAVE_VERBS
	if (!rdma)
		skip(name, "no RDMA device (/sys/class/infiniband is empty)");
	else if (!strcmp(name, "memtrace"))
		exp_memtrace();
	else if (!strcmp(name, "phase"))
		exp_phase();
	else
		exp_workingset();
#else
	(void)rdma;
	skip(name, "built without libibverbs");
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
		{ "latency.png", "fault latency: CDF of one-page transfers, per page state and prefetch" },
		{ "workingset.png", "working set against memory.max: explicit ODP, pinned and hybrid" },
		{ "phase.png", "phase change: the working set grows past memory.max and shrinks back" },
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
		"| device | %s |\n| mode | pin (uring backend): pincache, timeline%s%s%s |\n"
		"| commit | %s |\n| run | %s%s, %.1f s |\n\n", date, u.nodename, u.release, u.machine,
		dev[0] ? dev : "none", strstr(R.ran, "warmup") || strstr(R.ran, "prefetch") ?
		"; explicit ODP (verbs backend): warmup, prefetch" : "",
		strstr(R.ran, "latency") ? "; pin and explicit ODP (verbs backend): latency" : "",
		strstr(R.ran, "workingset") || strstr(R.ran, "phase") ?
		"; explicit ODP, pin and hybrid (verbs backend): workingset, phase" : "", commit,
		R.quick ? "--quick" : "full", R.args, secs);
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
		"       [--cgroup DIR] [--memory-max SIZE] [--region SIZE] [--thrash SPEC] [--samples N]\n"
		"       [--latency-wait sleep|poll] [--phase-secs S] [--rounds N] [--require-device]\n"
		"  EXP: pincache, timeline, warmup, prefetch, latency, workingset, phase;\n"
		"       memtrace (only by name)\n", prog);
}

/* @s as a decimal count from @lo to @hi into *@out; false (nothing stored) if it is not one */
static bool uint_arg(const char *s, unsigned lo, unsigned hi, unsigned *out)
{
	char *end;
	unsigned long v = strtoul(s, &end, 10);

	if (!*s || *end || v < lo || v > hi)
		return false;
	*out = (unsigned)v;
	return true;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "quick", no_argument, NULL, 'q' }, { "out", required_argument, NULL, 'o' },
		{ "only", required_argument, NULL, 'O' }, { "seed", required_argument, NULL, 's' },
		{ "no-plots", no_argument, NULL, 'n' }, { "help", no_argument, NULL, 'h' },
		{ "cgroup", required_argument, NULL, 'c' }, { "memory-max", required_argument, NULL, 'm' },
		{ "region", required_argument, NULL, 'r' }, { "thrash", required_argument, NULL, 't' },
		{ "samples", required_argument, NULL, 'S' }, { "latency-wait", required_argument, NULL, 'W' },
		{ "phase-secs", required_argument, NULL, 'P' }, { "rounds", required_argument, NULL, 'R' },
		{ "require-device", no_argument, NULL, 'D' },
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
		case 'S':
			if (!uint_arg(optarg, 16, 1000000, &R.lat_samples))
				return fprintf(stderr, "--samples %s: 16 to 1000000\n", optarg), 2;
			break;
		case 'W':
			if (strcmp(optarg, "poll") && strcmp(optarg, "sleep"))
				return fprintf(stderr, "--latency-wait %s: poll or sleep\n", optarg), 2;
			R.lat_spin = !strcmp(optarg, "poll");
			break;
		case 'R':
			if (!uint_arg(optarg, 1, 9, &R.ws_rounds))
				return fprintf(stderr, "--rounds %s: 1 to 9\n", optarg), 2;
			break;
		case 'P':
			if ((R.phase_s = strtod(optarg, NULL)) < 1 || R.phase_s > 3600)
				return fprintf(stderr, "--phase-secs %s: 1 to 3600\n", optarg), 2;
			break;
		case 'D': R.require_device = true; break;
		case 'h': usage(stdout, argv[0]); return 0;
		default: usage(stderr, argv[0]); return 2;
		}
	}
	if (optind < argc)
		return usage(stderr, argv[0]), 2;
	/*
	 * A pin leaves at least 16 MiB of memory.max to reclaim (odpx(7),
	 * MEMORY CGROUP): under 32 MiB the pinned variant could pin nothing.
	 */
	if (!R.memory_max)
		R.memory_max = R.quick ? 32 * MiB : 64 * MiB;
	if (!R.region)
		R.region = R.quick ? 8 * MiB : 128 * MiB;
	if (!R.phase_s)
		R.phase_s = 15;
	if (!R.lat_samples)
		R.lat_samples = R.quick ? 64 : 5000;
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
		run_workingset(rdma, "workingset");
	if (selected(&sel, "phase"))
		run_workingset(rdma, "phase");
	if (sel.only && selected(&sel, "memtrace"))	/* a recording, never in the default set */
		run_workingset(rdma, "memtrace");
	fclose(R.nd);
	if (plots)
		plot(src);
	write_index(src, dev, (double)(now_ns() - t0) / 1e9);
	printf("# report in %s: index.md, samples.ndjson%s\n", R.dir, plots ? ", *.png" : "");
	/* where the device must be there (the test guest), nothing may be skipped or fail */
	if (R.require_device && (R.nskipped || R.failed)) {
		printf("# --require-device: %u experiment(s) skipped, %u point(s) failed\n", R.nskipped,
		       R.failed);
		return 1;
	}
	return 0;
}
