// SPDX-License-Identifier: MIT
/*
 * dev-rc-pinned: RDMA WRITE and RDMA READ over an RC QP connected to itself, between pinned
 * MRs (plain ibv_reg_mr), 64 KiB of a page-varying pattern, verified byte for byte; then a
 * short WRITE at an offset inside a page (pinned MRs place it exactly, unlike rxe ODP MRs).
 */
#include "dev-util.h"

int main(void)
{
	const size_t len = DEV_BUF_BYTES;
	unsigned char *src, *dst, *back, *want;
	struct ibv_mr *src_mr, *dst_mr, *back_mr;
	size_t off, short_len = 1000;
	struct dev d;

	dev_open(&d);
	dev_connect_self(&d);
	src = dev_map(len, NULL);
	dst = dev_map(len, NULL);
	back = dev_map(len, NULL);
	want = dev_map(len, NULL);
	dev_fill(src, len, 1);
	memcpy(want, src, len);
	memset(dst, 0, len);
	memset(back, 0, len);
	src_mr = dev_reg(&d, src, len, DEV_MR_ACCESS);
	dst_mr = dev_reg(&d, dst, len, DEV_MR_ACCESS);
	back_mr = dev_reg(&d, back, len, DEV_MR_ACCESS);

	if (dev_rdma(&d, IBV_WR_RDMA_WRITE, src_mr, src, len, dst, dst_mr->rkey))
		dev_fail("RDMA WRITE of %zu bytes did not complete", len);
	if (!dev_same("RDMA WRITE target", dst, want, len))
		dev_fail("RDMA WRITE data mismatch");
	printf("RDMA WRITE %zu bytes (%zu pages): verified\n", len, len / d.page_bytes);

	if (dev_rdma(&d, IBV_WR_RDMA_READ, back_mr, back, len, dst, dst_mr->rkey))
		dev_fail("RDMA READ of %zu bytes did not complete", len);
	if (!dev_same("RDMA READ target", back, want, len))
		dev_fail("RDMA READ data mismatch");
	printf("RDMA READ %zu bytes: verified\n", len);

	/* a write that starts inside one page and ends inside the next */
	off = d.page_bytes - short_len / 2;
	dev_fill(src, short_len, 2);
	memset(dst, 0, len);
	memset(want, 0, len);
	memcpy(want + off, src, short_len);
	if (dev_rdma(&d, IBV_WR_RDMA_WRITE, src_mr, src, short_len, dst + off, dst_mr->rkey))
		dev_fail("RDMA WRITE of %zu bytes at offset %zu did not complete", short_len, off);
	if (!dev_same("unaligned RDMA WRITE target", dst, want, len))
		dev_fail("unaligned RDMA WRITE data mismatch");
	printf("RDMA WRITE %zu bytes at offset %zu (across a page boundary): verified\n",
	       short_len, off);

	ibv_dereg_mr(back_mr);
	ibv_dereg_mr(dst_mr);
	ibv_dereg_mr(src_mr);
	dev_close(&d);
	return 0;
}
