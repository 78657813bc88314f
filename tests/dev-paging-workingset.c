// SPDX-License-Identifier: MIT
/*
 * dev-paging-workingset: an explicit ODP working set larger than its memory cgroup's
 * memory.max makes the library's thrash callback report THRASH, and OK again once the
 * working set shrinks under the limit; every RDMA transfer's bytes are checked
 * (dev-paging-ws.h), so the device pages the region in and out and never corrupts it.
 *
 * A cgroup v2 of 32 MiB is made under /sys/fs/cgroup (the guest driver mounts cgroup2 there
 * and puts swap on zram); a child enters it, opens an explicit ODP context with a thrash
 * callback, and sweeps a 64 MiB region with RDMA WRITEs and READs of 64 KiB until the
 * callback has said THRASH (the cgroup's workingset refaults, counted by the kernel as the
 * device faults back the pages reclaim took), then sweeps the first 8 MiB only until the
 * callback has said OK.  Each phase has a deadline.  Then the CPU reads the whole region
 * back.  The parent fails the test if the child was OOM-killed.
 *
 * Thresholds (ODPX_THRASH): windows of 250 ms, and mem_refault_rate=100 pages/s: under the
 * guest's emulated CPU the sweep moves a few MB/s, so a working set twice the limit refaults
 * a few hundred pages a second, under the default of 1000.  The limit leaves the region
 * room beside the process's own memory: with less, rxe's fault handler can give up on a
 * 64 KiB range that reclaim keeps invalidating (hmm_range_fault's retries time out), and the
 * transfer fails with the QP flushed.
 *
 * Also the per-MR ODP statistics over RDMA netlink as the library's detector reads them
 * (nl_pid_mr_stats, live): rxe lists this process's MRs and gives none of them statistics,
 * so that source is absent and the detector works from the memory cgroup.
 *
 * Skips: no RDMA device with explicit RC ODP, no swap, no writable cgroup v2 root (each a
 * failure in the guest, where TEST_REQUIRE_DEVICE is set).
 */
#include <stdatomic.h>

#include "dev-cgroup.h"
#include "../sysfs-stats/counters.h"	/* nl_pid_mr_stats */

#define LIMIT_BYTES	(32UL << 20)
#define BIG_BYTES	(64UL << 20)
#define SMALL_BYTES	(8UL << 20)
#define PHASE_MS	60000

static _Atomic int state = ODPX_THRASH_OK;
static _Atomic int nevents;
static struct odpx_thrash_event events[64];
static int64_t event_ms[64];
static int64_t t0_ms;

static void on_thrash(struct odpx_ctx *ctx, const struct odpx_thrash_event *ev, void *arg)
{
	int n = atomic_load(&nevents);

	if (n < 64) {
		events[n] = *ev;
		event_ms[n] = dev_now_ms() - t0_ms;
		atomic_store(&nevents, n + 1);
	}
	atomic_store(&state, ev->state);
}

static bool reached(void *want)
{
	return atomic_load(&state) == *(int *)want;
}

static const char *name_of(int s)
{
	return s == ODPX_THRASH_THRASH ? "THRASH" : s == ODPX_THRASH_WARMING ? "WARMING" : "OK";
}

static int64_t stat_of(const struct ws_cg *cg, const char *key)
{
	int64_t v = ws_cg_value(cg, "memory.stat", key);

	if (v < 0)
		dev_fail("%s/memory.stat has no %s: %s", cg->dir, key, strerror((int)-v));
	return v;
}

/* One phase: sweep @bytes until the callback says @want, within PHASE_MS. */
static void phase(struct ws *w, const struct ws_cg *cg, const char *name, size_t bytes, int want)
{
	int64_t start = dev_now_ms(), rf0 = stat_of(cg, "workingset_refault_anon");
	int64_t mj0 = stat_of(cg, "pgmajfault");
	uint64_t b0 = w->bytes;
	size_t pos = 0;
	int r;

	r = ws_sweep(w, bytes / WS_CHUNK, &pos,
		     (uint64_t)(start + PHASE_MS) * 1000000ULL, reached, &want);
	if (r)
		dev_fail("%s: the sweep failed (%s)", name, strerror(-r));
	double secs = (double)(dev_now_ms() - start) / 1000.0;
	printf("%s: %zu MiB swept for %.1f s, %.1f MB/s, %" PRId64 " refaults, %" PRId64
	       " major faults, state %s\n", name, bytes >> 20, secs,
	       (double)(w->bytes - b0) / secs / 1e6, stat_of(cg, "workingset_refault_anon") - rf0,
	       stat_of(cg, "pgmajfault") - mj0, name_of(atomic_load(&state)));
	if (atomic_load(&state) != want)
		dev_fail("%s: the thrash callback did not report %s within %d s", name, name_of(want),
			 PHASE_MS / 1000);
}

/* The region's MR and the two buffers' at least are listed; on rxe none has statistics. */
static void per_mr_stats(struct dev *d)
{
	struct ctr_set cs;
	unsigned listed;
	int r;

	ctr_set_init(&cs);
	r = nl_pid_mr_stats(d->name, getpid(), &cs, NULL, &listed);
	if (r < 0)
		dev_fail("nl_pid_mr_stats(%s): %s", d->name, strerror(-r));
	printf("%s: %u MRs of this process over RDMA netlink, %d with per-MR ODP statistics\n",
	       d->name, listed, r);
	if (listed < 3)
		dev_fail("%s: the MR dump lists %u MRs of this process, want 3 at least", d->name,
			 listed);
	if (dev_is_rxe(d) && r != 0)
		dev_fail("%s: rxe gives %d MRs per-MR statistics: the source is no longer absent "
			 "there (the detector and odpstat(1) say it is)", d->name, r);
	ctr_set_free(&cs);
}

static int child(const struct ws_cg *cg, void *arg)
{
	(void)arg;
	struct odpx_attr a = { .comp_mask = ODPX_ATTR_MODE | ODPX_ATTR_THRASH_CB,
			       .mode = ODPX_MODE_EXPLICIT, .thrash_cb = on_thrash };
	struct odpx_ctx *ctx;
	struct dev d;
	struct ws w;
	int r;

	setenv("ODPX_THRASH", "window_ms=250,mem_refault_rate=100", 1);
	dev_open(&d);
	dev_connect_self(&d);
	if ((r = odpx_open_verbs(d.pd, &a, &ctx)))
		dev_fail("odpx_open_verbs(explicit): %s (%s)", strerror(-r), odpx_last_reason());
	t0_ms = dev_now_ms();
	if (ws_setup(&w, &d, ctx, BIG_BYTES) || (r = ws_register(&w)))
		dev_fail("setting up the %lu MiB region failed (%s)", BIG_BYTES >> 20, strerror(-r));
	printf("region of %lu MiB written in %.1f s under memory.max %lu MiB\n", BIG_BYTES >> 20,
	       (double)(dev_now_ms() - t0_ms) / 1000.0, LIMIT_BYTES >> 20);
	per_mr_stats(&d);
	phase(&w, cg, "working set 64 MiB", BIG_BYTES, ODPX_THRASH_THRASH);
	phase(&w, cg, "working set 8 MiB", SMALL_BYTES, ODPX_THRASH_OK);
	if (ws_check_region(&w))
		dev_fail("the region differs from what the transfers wrote");
	printf("%" PRIu64 " transfers of %d bytes checked; the thrash callback said:", w.transfers,
	       WS_CHUNK);
	for (int i = 0; i < atomic_load(&nevents); i++)
		printf(" %s (%s=%.1f) at %.2f s%s", name_of(events[i].state),
		       events[i].metric == ODPX_METRIC_MEM_REFAULT_RATE ? "mem_refault_rate" :
		       events[i].metric == ODPX_METRIC_MAJFAULT_RATE ? "majfault_rate" : "metric",
		       events[i].value, (double)event_ms[i] / 1000.0,
		       i + 1 < atomic_load(&nevents) ? "," : "\n");
	ws_teardown(&w);
	if ((r = odpx_close(ctx)))
		dev_fail("odpx_close: %s", strerror(-r));
	dev_close(&d);
	return 0;
}

int main(void)
{
	struct dev d;
	int64_t oom;
	int r;

	dev_open(&d);
	dev_require_odp(&d, IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_WRITE);
	dev_close(&d);
	if (ws_swap_bytes() < 2 * BIG_BYTES)
		dev_skip("less than %lu MiB of swap free (/proc/meminfo SwapFree): pages over "
			 "memory.max have nowhere to go", 2 * BIG_BYTES >> 20);
	r = dev_in_cgroup("ws", LIMIT_BYTES, 0, child, NULL, &oom);
	if ((r = dev_child_status("workingset", r, oom)))
		return r;
	printf("PASS: THRASH over memory.max, OK under it, every byte right\n");
	return 0;
}
