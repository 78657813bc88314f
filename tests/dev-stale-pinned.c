// SPDX-License-Identifier: MIT
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
	struct dev_pair p;
	struct dev d;

	dev_open(&d);
	dev_connect_self(&d);
	dev_pair_setup(&d, &p, len, DEV_MR_ACCESS);
	/* the registration works before the mapping changes */
	dev_pair_write_verified(&d, &p, 3, "first RDMA WRITE into the registered mapping");

	if (munmap(p.dst, len))
		dev_fail("munmap: %s", strerror(errno));
	dev_map(len, p.dst);	/* new zero-filled pages at the same address */
	dev_fill(p.src, len, 4);
	if (dev_rdma(&d, IBV_WR_RDMA_WRITE, p.src_mr, p.src, len, p.dst, p.dst_mr->rkey))
		dev_fail("RDMA WRITE through the old pinned MR did not complete");
	if (!dev_all(p.dst, len, 0)) {
		memcpy(p.want, p.src, len);
		if (dev_same("new mapping", p.dst, p.want, len))
			dev_fail("the new mapping saw the bytes written through the old pinned MR: "
				 "the pinned MR followed the remap, hazard not reproduced");
		dev_fail("the new mapping changed after the write through the old MR");
	}
	printf("hazard reproduced: after munmap + mmap(MAP_FIXED) the RDMA WRITE through the old "
	       "pinned MR completed, and the new mapping still reads zero (the bytes went to the "
	       "old pinned pages)\n");

	ibv_dereg_mr(p.dst_mr);
	ibv_dereg_mr(p.src_mr);
	munmap(p.dst, len);
	dev_close(&d);
	return 0;
}
