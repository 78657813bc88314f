// SPDX-License-Identifier: MIT
/*
 * dev-odp-follow: an explicit ODP MR (IBV_ACCESS_ON_DEMAND) follows the mapping.  Register it
 * over an mmap'd, page-aligned buffer, munmap, mmap fresh memory at the same address
 * (MAP_FIXED), and RDMA WRITE through the same MR: the data must land in the NEW mapping.
 * Page-aligned buffers and path MTU 4096 keep clear of the rxe ODP sub-page placement defect
 * (see dev-rxe-odp-offset).
 */
#include "dev-util.h"

int main(void)
{
	const size_t len = DEV_BUF_BYTES;
	struct dev_pair p;
	struct dev d;

	dev_open(&d);
	dev_require_odp(&d, IBV_ODP_SUPPORT_WRITE);
	dev_connect_self(&d);
	dev_pair_setup(&d, &p, len, DEV_MR_ACCESS | IBV_ACCESS_ON_DEMAND);
	dev_pair_write_verified(&d, &p, 5, "first RDMA WRITE into the ODP MR");

	if (munmap(p.dst, len))
		dev_fail("munmap: %s", strerror(errno));
	dev_map(len, p.dst);	/* new zero-filled pages at the same address, not yet touched */
	dev_fill(p.src, len, 6);
	memcpy(p.want, p.src, len);
	if (dev_rdma(&d, IBV_WR_RDMA_WRITE, p.src_mr, p.src, len, p.dst, p.dst_mr->rkey))
		dev_fail("RDMA WRITE through the ODP MR after the remap did not complete");
	if (!dev_same("new mapping", p.dst, p.want, len)) {
		if (dev_all(p.dst, len, 0))
			dev_fail("the new mapping did not see the write: the ODP MR did not follow");
		dev_fail("the new mapping holds wrong data after the write through the ODP MR");
	}
	printf("after munmap + mmap(MAP_FIXED) the RDMA WRITE through the same ODP MR landed in "
	       "the new mapping: %zu bytes verified\n", len);

	ibv_dereg_mr(p.dst_mr);
	ibv_dereg_mr(p.src_mr);
	munmap(p.dst, len);
	dev_close(&d);
	return 0;
}
