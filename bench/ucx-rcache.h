/* SPDX-License-Identifier: MIT */
/*
 * ucx-rcache.h - the UCX side of the benchmarks (ucx-rcache.c, ucx-scaling.c):
 * an rcache as UCX's own IB transport makes one (page alignment, UCM unmap
 * events), and the get + put that stands for a registration and its release.
 * Include after bench.h.
 */
#ifndef ODPX_BENCH_UCX_RCACHE_H
#define ODPX_BENCH_UCX_RCACHE_H

#include <ucm/api/ucm.h>
#include <ucs/memory/rcache.h>
#include <ucs/type/status.h>

static inline ucs_rcache_t *ucx_rcache_new(const ucs_rcache_ops_t *ops, size_t region_bytes,
					   unsigned long max_regions, const char *name)
{
	ucs_rcache_params_t p = {
		.region_struct_size = region_bytes,
		.alignment = (size_t)bench_env.page,
		.max_alignment = (size_t)bench_env.page,
		.ucm_events = UCM_EVENT_VM_UNMAPPED,
		.ucm_event_priority = 1000,
		.ops = ops,
		.max_regions = max_regions,
		.max_size = SIZE_MAX,
		.max_unreleased = SIZE_MAX,
	};
	ucs_rcache_t *rc;
	ucs_status_t st = ucs_rcache_create(&p, name, NULL, &rc);

	if (st != UCS_OK)
		DIE("ucs_rcache_create: %s", ucs_status_string(st));
	return rc;
}

static inline void get_put(ucs_rcache_t *rc, void *a, size_t len)
{
	ucs_rcache_region_t *r;
	ucs_status_t st = ucs_rcache_get(rc, a, len, PROT_READ | PROT_WRITE, NULL, &r);

	if (__builtin_expect(st != UCS_OK, 0))
		DIE("ucs_rcache_get %p+%zu: %s", a, len, ucs_status_string(st));
	ucs_rcache_region_put(rc, r);
}

#endif
