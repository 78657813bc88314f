// SPDX-License-Identifier: MIT
/*
 * query.c - odpx_query(): what a resource manager needs to size a process,
 * as the OFI domain attributes expose it: the limits in force and where
 * they came from, their use, the device's own limits, the monitor's
 * watched-range budget and the io_uring slots.
 */
#include <errno.h>
#include <sys/resource.h>

#include "cache.h"
#include "../uffd/monitor.h"

ODPX_EXPORT int odpx_query(struct odpx_ctx *ctx, struct odpx_caps *caps)
{
	uint64_t want;
	int r = ctx_check(ctx);

	if (r < 0)
		return r;
	if (!caps)
		return odpx_fail(-EINVAL, "NULL caps");
	want = caps->comp_mask;
	if (want & ~(uint64_t)(ODPX_QUERY_RESERVED - 1))
		return odpx_fail(-EINVAL, "unknown query bits %#llx",
				 (unsigned long long)(want & ~(uint64_t)(ODPX_QUERY_RESERVED - 1)));
	caps->comp_mask = 0;
	/* hybrid: the pins, their budget, the pre-registered regions and the monitor are its pinned part's */
	struct odpx_ctx *pc = ctx->pin_part ? ctx->pin_part : ctx;
	if (want & ODPX_QUERY_LIMITS) {
		struct rlimit rl;

		caps->limits = ctx->lim;
		caps->limits.max_pinned_bytes = pc->lim.max_pinned_bytes;
		caps->max_pinned_source = pc->lim_source;
		caps->idle_ms = ctx->idle_ms;
		caps->rlimit_memlock = UINT64_MAX;
		if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
			caps->rlimit_memlock = rl.rlim_cur;
		caps->comp_mask |= ODPX_QUERY_LIMITS;
	}
	if (want & ODPX_QUERY_USAGE) {
		ctx_usage(ctx, &caps->entries, &caps->pinned_bytes, &caps->unused_bytes);
		prereg_usage(pc, &caps->prereg_regions, &caps->prereg_bytes);
		caps->comp_mask |= ODPX_QUERY_USAGE;
	}
	if ((want & ODPX_QUERY_DEVICE) && ctx->be->query)
		ctx->be->query(ctx, caps);	/* sets ODPX_QUERY_DEVICE */
	if ((want & ODPX_QUERY_WATCH) && pc->cache_enabled &&
	    atomic_load_explicit(&pc->sub.attached, ACQ)) {
		struct monitor_usage u;

		monitor_usage(&u);
		caps->watch_ranges = u.watched;
		caps->watch_max = u.budget;
		caps->comp_mask |= ODPX_QUERY_WATCH;
	}
	if ((want & ODPX_QUERY_URING) && ctx->be->id == ODPX_BACKEND_URING) {
		caps->uring_slots = URING_SLOTS;	/* the sparse table; entry i owns slot i */
		caps->uring_slot_max_bytes = URING_SLOT_MAX_BYTES;
		caps->comp_mask |= ODPX_QUERY_URING;
	}
	return 0;
}
