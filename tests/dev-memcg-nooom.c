// SPDX-License-Identifier: MIT
/*
 * dev-memcg-nooom: a process in a memory cgroup with a small memory.max and swap registers
 * more than fits in pin mode, and is not killed: the registration that would pin past the
 * cgroup's headroom returns -ENOMEM with a reason naming the memory cgroup (counted in
 * memcg_refusals), and unused cached registrations are released to make room for new ones
 * (memcg_released), rather than the kernel's memcg OOM killer ending the process inside
 * ibv_reg_mr.  Every transfer's bytes are checked (dev-paging-ws.h), and every call's
 * return is printed.
 *
 * A cgroup v2 of 32 MiB is made under /sys/fs/cgroup (swap on zram: tests/vm/guest-run.sh);
 * a child enters it, opens a pin-mode context on the device, writes a 64 MiB region with the
 * CPU (the pages over the limit go to swap), then:
 *  1. registers the whole region in one call: pinning it would take the cgroup past its
 *     limit (docs/paging.md, "Working set against memory": pinned M and beyond is
 *     OOM-killed there without this check); it must return -ENOMEM;
 *  2. twice over the region, registers it in parts of 4 MiB, moves the first chunks of each
 *     part with RDMA WRITE and READ, and releases the part (cached, unused): each call
 *     returns 0 or -ENOMEM for the memory cgroup, the parts beyond the headroom come
 *     in as unused ones go (memcg_released > 0), and at least half the parts are served;
 *  3. reads the whole region back with the CPU.
 * The parent fails the test if the child was killed (memory.events oom_kill printed).
 *
 * Modes: pin here, with the engine's pressure release and without it; a mode that serves
 * what does not fit otherwise (ODP) joins modes[] with its own expectation of step 1.
 *
 * Skips: no RDMA device, no swap, no writable cgroup v2 root (each a failure in the guest,
 * where TEST_REQUIRE_DEVICE is set).
 */
#include "dev-cgroup.h"

#define LIMIT_BYTES	(32UL << 20)
#define BIG_BYTES	(64UL << 20)
#define PART_BYTES	(4UL << 20)
#define PARTS		(BIG_BYTES / PART_BYTES)
#define STEPS_PER_PART	4		/* chunks moved per part, each both ways */

struct mode_case {
	enum odpx_mode mode;
	uint32_t tick_ms;		/* the engine's tick: 0 default */
	int whole_rc;			/* step 1's return */
};

/*
 * Pin mode twice: with the default tick the engine releases unused registrations under
 * the cgroup's pressure (memcg_pressure > 0); with a tick longer than the run it never
 * looks, and the misses release what they lack themselves (memcg_pressure 0).
 */
static const struct mode_case modes[] = {
	{ ODPX_MODE_PIN, 0, -ENOMEM },
	{ ODPX_MODE_PIN, 600000, -ENOMEM },
};

static struct odpx_stats stats_of(struct odpx_ctx *ctx)
{
	struct odpx_stats st;
	int r = odpx_stats_read(ctx, &st, sizeof(st));

	if (r != (int)sizeof(st))
		dev_fail("odpx_stats_read: %d", r);
	return st;
}

static int child(const struct ws_cg *cg, void *arg)
{
	const struct mode_case *mc = arg;
	struct odpx_attr a = { .comp_mask = ODPX_ATTR_MODE | ODPX_ATTR_LIMITS | ODPX_ATTR_TICK,
			       .mode = mc->mode, .tick_ms = mc->tick_ms,
			       .limits = { .max_pinned_bytes = 1UL << 30,
					   .max_unused_bytes = 1UL << 30 } };
	char mname[48];
	unsigned served = 0, refused = 0;
	struct odpx_stats st;
	struct odpx_ctx *ctx;
	struct dev d;
	struct ws w;
	int r;

	snprintf(mname, sizeof(mname), "%s, tick %s", odpx_mode_str(mc->mode),
		 mc->tick_ms ? "600 s" : "default");
	dev_open(&d);
	dev_connect_self(&d);
	if ((r = odpx_open_verbs(d.pd, &a, &ctx)))
		dev_fail("odpx_open_verbs(%s): %s (%s)", mname, strerror(-r), odpx_last_reason());
	if (ws_setup(&w, &d, ctx, BIG_BYTES))
		dev_fail("setting up the %lu MiB region failed", BIG_BYTES >> 20);

	/* 1: the whole region at once */
	r = ws_register(&w);
	printf("%s: odpx_reg of the whole %lu MiB region under memory.max %lu MiB = %d%s%s\n",
	       mname, BIG_BYTES >> 20, LIMIT_BYTES >> 20, r, r ? ": " : "",
	       r ? odpx_last_reason() : "");
	if (r != mc->whole_rc)
		dev_fail("%s: the whole region's registration returned %d, want %d", mname, r,
			 mc->whole_rc);
	if (r == -ENOMEM && !strstr(odpx_last_reason(), "memory cgroup"))
		dev_fail("%s: -ENOMEM names no memory cgroup: %s", mname, odpx_last_reason());
	if (r == 0) {
		odpx_dereg(ctx, w.mr);
		w.mr = NULL;
	}

	/* 2: in parts, twice over, each released after its transfers */
	for (unsigned pass = 0; pass < 2; pass++)
		for (unsigned p = 0; p < PARTS; p++) {
			unsigned char *part = w.region + p * PART_BYTES;

			r = odpx_reg(ctx, part, PART_BYTES, ODPX_ACCESS_LOCAL_WRITE, &w.mr);
			st = stats_of(ctx);
			printf("%s: pass %u odpx_reg part %2u = %d (memcg_refusals %" PRIu64
			       ", memcg_released %" PRIu64 " bytes)%s%s\n", mname, pass, p, r,
			       st.memcg_refusals, st.memcg_released, r ? ": " : "",
			       r ? odpx_last_reason() : "");
			if (r == -ENOMEM && strstr(odpx_last_reason(), "memory cgroup")) {
				refused++;
				continue;
			}
			if (r)
				dev_fail("%s: part %u: %d, neither served nor refused for the memory "
					 "cgroup (%s)", mname, p, r, odpx_last_reason());
			for (size_t c = 0; c < STEPS_PER_PART; c++)
				if ((r = ws_step(&w, p * (PART_BYTES / WS_CHUNK) + c)))
					dev_fail("%s: part %u chunk %zu: transfer failed (%s)", mname, p,
						 c, strerror(-r));
			if ((r = odpx_dereg(ctx, w.mr)))
				dev_fail("odpx_dereg: %s", strerror(-r));
			w.mr = NULL;
			served++;
		}
	st = stats_of(ctx);
	printf("%s: %u parts served, %u refused; memcg_refusals %" PRIu64 ", memcg_released %"
	       PRIu64 " bytes, memcg_pressure %" PRIu64 ", pinned_bytes %" PRIu64 "\n", mname,
	       served, refused, st.memcg_refusals, st.memcg_released, st.memcg_pressure,
	       st.pinned_bytes);
	if (served < PARTS)
		dev_fail("%s: only %u of %lu parts served", mname, served, 2 * PARTS);
	if (!st.memcg_released)
		dev_fail("%s: %lu MiB registered in a cgroup of %lu MiB and no unused registration "
			 "released for it", mname, 2 * BIG_BYTES >> 20, LIMIT_BYTES >> 20);
	if (!mc->tick_ms && !st.memcg_pressure)
		dev_fail("%s: the engine never saw the cgroup under pressure", mname);
	if (mc->tick_ms && st.memcg_pressure)
		dev_fail("%s: pressure seen with a tick of %u ms", mname, mc->tick_ms);

	/* 3: every byte the device wrote, read back by the CPU */
	if (ws_check_region(&w))
		dev_fail("%s: the region differs from what the transfers wrote", mname);
	printf("%s: %" PRIu64 " transfers of %d bytes checked, and the whole region\n", mname,
	       w.transfers, WS_CHUNK);
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
	dev_close(&d);
	if (ws_swap_bytes() < 2 * BIG_BYTES)
		dev_skip("less than %lu MiB of swap free (/proc/meminfo SwapFree): pages over "
			 "memory.max have nowhere to go", 2 * BIG_BYTES >> 20);
	for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
		char tag[32];

		snprintf(tag, sizeof(tag), "nooom.%zu", m);
		r = dev_in_cgroup(tag, LIMIT_BYTES, 0, child, (void *)&modes[m], &oom);
		if ((r = dev_child_status(odpx_mode_str(modes[m].mode), r, oom)))
			return r;
	}
	printf("PASS: never killed, refused or released past the memory cgroup's headroom, every "
	       "byte right\n");
	return 0;
}
