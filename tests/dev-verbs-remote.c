// SPDX-License-Identifier: MIT
/*
 * dev-verbs-remote: remote access covers exactly the pages asked for.  In explicit and pin
 * mode, an rkey from a remote-access registration of one page reaches that page, and an
 * RDMA WRITE to the next page (mapped, registered for local access in the same chunk)
 * completes with a remote access error.  Local registrations carry no rkey, and no default
 * path hands out a global rkey (stats); ODPX_OPEN_GLOBAL_RKEY widens it, visibly.
 */
#include "dev-verbs-util.h"

static void run(enum odpx_mode mode)
{
	struct dev d;
	struct odpx_ctx *ctx;
	struct odpx_mr *smr, *lmr, *rmr;
	unsigned char *src, *buf;
	struct ibv_sge sge;
	struct ibv_send_wr wr, *bad;
	struct ibv_wc wc;
	int rc;

	dev_open(&d);
	dev_connect_self(&d);
	ctx = dv_open(&d, mode, 0);
	src = dv_map(4096);
	buf = dv_map(3 * 4096);
	memset(buf, 0, 3 * 4096);
	smr = dv_reg(ctx, src, 4096, ACC_LW);
	lmr = dv_reg(ctx, buf, 3 * 4096, ACC_LW);
	if (odpx_mr_rkey(lmr))
		dev_fail("%s: a local registration has rkey %#x", odpx_mode_str(mode),
			 odpx_mr_rkey(lmr));
	rmr = dv_reg(ctx, buf + 4096, 4096, ACC_REMOTE);
	if (odpx_mr_addr(rmr) != buf + 4096 || odpx_mr_length(rmr) != 4096)
		dev_fail("%s: remote registration covers %p+%zu, want %p+4096", odpx_mode_str(mode),
			 odpx_mr_addr(rmr), odpx_mr_length(rmr), (void *)(buf + 4096));
	if (dv_stats(ctx).global_rkey)
		dev_fail("global rkey without ODPX_OPEN_GLOBAL_RKEY");
	dev_fill(src, 4096, 7);
	if (dv_rdma(&d, IBV_WR_RDMA_WRITE, smr, src, 4096, buf + 4096, odpx_mr_rkey(rmr)))
		dev_fail("%s: RDMA WRITE inside the range failed", odpx_mode_str(mode));
	if (!dev_same("inside", buf + 4096, src, 4096))
		dev_fail("%s: data mismatch inside the range", odpx_mode_str(mode));

	memset(&wr, 0, sizeof(wr));
	sge = (struct ibv_sge){ (uintptr_t)src, 4096, odpx_mr_lkey(smr) };
	wr.wr_id = 77;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = (uintptr_t)(buf + 2 * 4096);
	wr.wr.rdma.rkey = odpx_mr_rkey(rmr);
	if ((rc = ibv_post_send(d.qp, &wr, &bad)))
		dev_fail("post: %s", strerror(rc));
	if ((rc = dev_wait_wc(&d, &wc)))
		dev_fail("no completion for the write outside the range: %s", strerror(-rc));
	/*
	 * The QP is connected to itself: the responder's access violation moves the one QP to
	 * the error state, so the requester sees either the remote access NAK or its request
	 * flushed.  A success is the failure we look for.
	 */
	if (wc.status != IBV_WC_REM_ACCESS_ERR && wc.status != IBV_WC_WR_FLUSH_ERR)
		dev_fail("%s: RDMA WRITE outside the range completed with %s, want remote access "
			 "error", odpx_mode_str(mode), ibv_wc_status_str(wc.status));
	if (!dev_all(buf + 2 * 4096, 4096, 0) || !dev_all(buf, 4096, 0))
		dev_fail("%s: memory outside the range changed", odpx_mode_str(mode));
	printf("%s: rkey reaches its page; a write one page beyond: %s; untouched\n",
	       odpx_mode_str(mode), ibv_wc_status_str(wc.status));
	dv_dereg(ctx, rmr);
	dv_dereg(ctx, lmr);
	dv_dereg(ctx, smr);
	odpx_close(ctx);

	if (mode == ODPX_MODE_EXPLICIT) {
		ctx = dv_open(&d, mode, ODPX_OPEN_GLOBAL_RKEY);
		rmr = dv_reg(ctx, buf + 4096, 4096, ACC_REMOTE);
		struct odpx_stats st = dv_stats(ctx);
		if (!st.global_rkey || odpx_mr_length(rmr) <= 4096)
			dev_fail("GLOBAL_RKEY: global_rkey %llu, length %zu",
				 (unsigned long long)st.global_rkey, odpx_mr_length(rmr));
		printf("explicit + GLOBAL_RKEY: the remote registration is the chunk (%zu bytes), "
		       "stats global_rkey=1\n", odpx_mr_length(rmr));
		dv_dereg(ctx, rmr);
		odpx_close(ctx);
	}
	munmap(src, 4096);
	munmap(buf, 3 * 4096);
	dev_close(&d);
}

int main(void)
{
	run(ODPX_MODE_EXPLICIT);
	run(ODPX_MODE_PIN);
	return 0;
}
