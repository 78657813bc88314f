/*
 * dev-stale-pinned: the stale-registration hazard of a pinned MR.  Register a pinned MR over
 * an mmap'd buffer, munmap it, mmap fresh memory at the same address (MAP_FIXED), and RDMA
 * WRITE through the OLD MR: the bytes go to the old pinned pages, and the new mapping must
 * not see them.  Passing means the hazard was reproduced (the device is real and such a
 * check can fail); the test fails if the new mapping saw the data.
 */
#include "dev-util.h"

int main(void)
{
	const size_t len = DEV_BUF_BYTES;
	unsigned char *src, *dst, *want;
	struct ibv_mr *src_mr, *dst_mr;
	struct dev d;

	dev_open(&d);
	dev_connect_self(&d);
	src = dev_map(len, NULL);
	want = dev_map(len, NULL);
	dst = dev_map(len, NULL);
	memset(dst, 0, len);
	src_mr = dev_reg(&d, src, len, DEV_MR_ACCESS);
	dst_mr = dev_reg(&d, dst, len, DEV_MR_ACCESS);

	/* the registration works before the mapping changes */
	dev_fill(src, len, 3);
	memcpy(want, src, len);
	if (dev_rdma(&d, IBV_WR_RDMA_WRITE, src_mr, src, len, dst, dst_mr->rkey))
		dev_fail("first RDMA WRITE did not complete");
	if (!dev_same("first RDMA WRITE target", dst, want, len))
		dev_fail("first RDMA WRITE data mismatch");
	printf("first RDMA WRITE into the registered mapping: verified\n");

	if (munmap(dst, len))
		dev_fail("munmap: %s", strerror(errno));
	dev_map(len, dst);	/* new zero-filled pages at the same address */
	dev_fill(src, len, 4);
	if (dev_rdma(&d, IBV_WR_RDMA_WRITE, src_mr, src, len, dst, dst_mr->rkey))
		dev_fail("RDMA WRITE through the old pinned MR did not complete");
	if (!dev_all(dst, len, 0)) {
		memcpy(want, src, len);
		if (dev_same("new mapping", dst, want, len))
			dev_fail("the new mapping saw the bytes written through the old pinned MR: "
				 "the pinned MR followed the remap, hazard not reproduced");
		dev_fail("the new mapping changed after the write through the old MR");
	}
	printf("hazard reproduced: after munmap + mmap(MAP_FIXED) the RDMA WRITE through the old "
	       "pinned MR completed, and the new mapping still reads zero (the bytes went to the "
	       "old pinned pages)\n");

	ibv_dereg_mr(dst_mr);
	ibv_dereg_mr(src_mr);
	munmap(dst, len);
	dev_close(&d);
	return 0;
}
