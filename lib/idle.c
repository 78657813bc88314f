// SPDX-License-Identifier: MIT
/*
 * idle.c - idle release: registrations unused for longer than ctx->idle_ms
 * (ODPX_ATTR_IDLE, ODPX_IDLE_MS) are released by the engine, so that a
 * burst does not keep its pins, slots and MRs for ever.
 *
 * The hit path is not touched.  A release stamps the entry with ctx->clock,
 * which counts misses; the engine gives it a time base: every IDLE_STEPS-th
 * of idle_ms it records the clock with the time and bumps it.  An entry
 * stamped at or below the record of a time idle_ms ago, with no reference
 * now, has been unused at least idle_ms.  It goes at most one step later,
 * plus a tick.
 */
#include <errno.h>

#include "cache.h"

/* Each engine tick.  The pin cache releases through its LRU, the ODP modes their backend. */
void idle_tick(struct odpx_ctx *ctx, struct idle_clock *ic, uint64_t now_ns)
{
	uint64_t idle_ns = (uint64_t)ctx->idle_ms * 1000000ULL, step = idle_ns / IDLE_STEPS;
	unsigned n = 0;

	if (!idle_ns)
		return;
	if (now_ns >= ic->next_ns) {
		unsigned k = ic->n++ % IDLE_RECORDS;

		ic->ns[k] = now_ns;
		ic->stamp[k] = atomic_fetch_add_explicit(&ctx->clock, 1, RLX);
		ic->next_ns = now_ns + step;
	}
	/* the newest record at least idle_ms old (records are of times above 0) */
	uint32_t stamp = 0;
	uint64_t best = 0;
	for (unsigned i = 0; i < IDLE_RECORDS && i < ic->n; i++) {
		if (ic->ns[i] + idle_ns <= now_ns && ic->ns[i] > best) {
			best = ic->ns[i];
			stamp = ic->stamp[i];
		}
	}
	if (!best)
		return;
	stamp++;	/* released before the record: stamped at or below its clock */
	if (ctx->cache_enabled)
		n = cache_reap_idle(ctx, stamp);
	else if (ctx->be->reap_idle)
		n = ctx->be->reap_idle(ctx, stamp);
	if (n && !ctx->cache_enabled)
		STAT_ADD(ctx, idle_released, n);	/* the pin cache counts its own */
}
