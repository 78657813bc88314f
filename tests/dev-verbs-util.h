/* SPDX-License-Identifier: MIT */
/*
 * dev-verbs-util.h - helpers of the verbs backend's device tests (tests/dev-verbs-*.c), on
 * top of dev-util.h: open a context in a given mode, move data through odpx registrations.
 */
#ifndef ODPX_DEV_VERBS_UTIL_H
#define ODPX_DEV_VERBS_UTIL_H

#include <pthread.h>
#include "dev-util.h"
#include "odpx.h"
#include "odpx-private.h"	/* mode_prefetch_sync: see below */

#define ACC_LW ODPX_ACCESS_LOCAL_WRITE
#define ACC_REMOTE (ODPX_ACCESS_LOCAL_WRITE | ODPX_ACCESS_REMOTE_WRITE | ODPX_ACCESS_REMOTE_READ)

static inline struct odpx_ctx *dv_open(struct dev *d, enum odpx_mode mode, uint32_t flags)
{
	struct odpx_attr a = { .comp_mask = ODPX_ATTR_MODE | ODPX_ATTR_FLAGS, .mode = mode,
			       .flags = flags };
	struct odpx_ctx *ctx;
	const char *why;
	enum odpx_mode m;
	int r = odpx_open_verbs(d->pd, &a, &ctx);

	if (r)
		dev_fail("odpx_open_verbs(%s): %s: %s", odpx_mode_str(mode), strerror(-r),
			 odpx_last_reason());
	odpx_mode_get(ctx, &m, &why);
	if (mode != ODPX_MODE_AUTO && m != mode)
		dev_fail("asked for %s, got %s", odpx_mode_str(mode), odpx_mode_str(m));
	printf("context: mode %s (%s)\n", odpx_mode_str(m), why);
	return ctx;
}

/* The counters, the verbs backend's included. */
static inline struct odpx_stats dv_stats(struct odpx_ctx *ctx)
{
	struct odpx_stats st;

	if (odpx_stats_read(ctx, &st, sizeof(st)) != (int)sizeof(st))
		dev_fail("odpx_stats_read");
	return st;
}

static inline struct odpx_mr *dv_reg(struct odpx_ctx *ctx, void *p, size_t len, uint32_t acc)
{
	struct odpx_mr *mr;
	int r = odpx_reg(ctx, p, len, acc, &mr);

	if (r)
		dev_fail("odpx_reg(%p, %zu, %#x): %s: %s", p, len, acc, strerror(-r),
			 odpx_last_reason());
	return mr;
}

static inline void dv_dereg(struct odpx_ctx *ctx, struct odpx_mr *mr)
{
	int r = odpx_dereg(ctx, mr);

	if (r)
		dev_fail("odpx_dereg: %s", strerror(-r));
}

/* RDMA WRITE/READ with the local side's lkey from odpx; 0 or -errno (dev_rdma). */
static inline int dv_rdma(struct dev *d, enum ibv_wr_opcode op, struct odpx_mr *l, void *laddr,
			  uint32_t len, void *raddr, uint32_t rkey)
{
	struct ibv_mr m = { .lkey = odpx_mr_lkey(l) };

	return dev_rdma(d, op, &m, laddr, len, raddr, rkey);
}

/* SEND from @s into a receive buffer @r posted first; both through odpx lkeys. */
static inline int dv_send(struct dev *d, struct odpx_mr *smr, void *s, struct odpx_mr *rmr,
			  void *r, uint32_t len)
{
	struct ibv_sge rs = { (uintptr_t)r, len, odpx_mr_lkey(rmr) };
	struct ibv_sge ss = { (uintptr_t)s, len, odpx_mr_lkey(smr) };
	struct ibv_recv_wr rw = { .wr_id = 1000 + ++d->next_wr_id, .sg_list = &rs, .num_sge = 1 };
	struct ibv_send_wr sw = { .wr_id = ++d->next_wr_id, .sg_list = &ss, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
	struct ibv_recv_wr *rb;
	struct ibv_send_wr *sb;
	struct ibv_wc wc;
	int rc;

	if ((rc = ibv_post_recv(d->qp, &rw, &rb)) || (rc = ibv_post_send(d->qp, &sw, &sb))) {
		printf("SEND: post: %s\n", strerror(rc));
		return -rc;
	}
	for (int i = 0; i < 2; i++) {
		if ((rc = dev_wait_wc(d, &wc)))
			return rc;
		if (wc.status != IBV_WC_SUCCESS) {
			printf("SEND: completion %s\n", ibv_wc_status_str(wc.status));
			return -EIO;
		}
	}
	return 0;
}

static inline void *dv_map(size_t len)
{
	return dev_map(len, NULL);
}

/*
 * Change the mapping under [@p, @p + @len) the ways a registration cache must notice: unmap
 * and map anew, zap (madvise DONTNEED), or move the pages away and map anew in their place.
 */
enum dv_change { DV_MUNMAP_MMAP, DV_MREMAP_MOVE, DV_DONTNEED };

static inline void dv_change_mapping(unsigned char *p, size_t len, enum dv_change c)
{
	void *away;

	switch (c) {
	case DV_MUNMAP_MMAP:
		if (munmap(p, len))
			dev_fail("munmap");
		dev_map(len, p);
		break;
	case DV_DONTNEED:
		if (madvise(p, len, MADV_DONTNEED))
			dev_fail("madvise");
		break;
	case DV_MREMAP_MOVE:
		away = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (away == MAP_FAILED || mremap(p, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, away) != away)
			dev_fail("mremap: %s", strerror(errno));
		dev_map(len, p);
		munmap(away, len);
		break;
	}
}

#endif
