// SPDX-License-Identifier: MIT
/*
 * dev-rxe-odp-offset: detects a known kernel defect of rdma_rxe.  Its copy into an ODP MR
 * (__rxe_odp_mr_copy) ignores the offset within the page, so bytes meant for page+X land at
 * page+0.  An RDMA WRITE of 64 bytes to page+2148 of an ODP MR tells:
 *   landed at page+0:     the defect is present; print XFAIL, exit 0 (a labelled known defect)
 *   landed at page+2148:  the defect is fixed; print XPASS, exit 1 so the workaround (page-
 *                         aligned buffers, path MTU 4096) gets revisited
 *   anything else:        fail
 */
#include <sys/utsname.h>

#include "dev-util.h"

#define WRITE_BYTES	64
#define WRITE_OFFSET	2148

/* print the runs of non-zero bytes, to show where a write went */
static void print_runs(const unsigned char *p, size_t len)
{
	printf("non-zero byte runs:");
	for (size_t i = 0; i < len;) {
		size_t j = i;

		if (!p[i]) {
			i++;
			continue;
		}
		while (j < len && p[j])
			j++;
		printf(" [%zu,%zu)", i, j);
		i = j;
	}
	printf("\n");
}

int main(void)
{
	struct dev_pair p;
	size_t len;
	struct dev d;

	dev_open(&d);
	if (!dev_is_rxe(&d))
		dev_skip("%s is not Soft-RoCE (rxe): the defect checked here is rxe's", d.name);
	dev_require_odp(&d, IBV_ODP_SUPPORT_WRITE);
	dev_connect_self(&d);
	len = 2 * d.page_bytes;
	dev_pair_setup(&d, &p, len, DEV_MR_ACCESS | IBV_ACCESS_ON_DEMAND);

	dev_fill(p.src, WRITE_BYTES, 7);
	for (size_t i = 0; i < WRITE_BYTES; i++)
		p.src[i] |= 1;	/* no zero bytes, so the runs below show the whole write */
	if (dev_rdma(&d, IBV_WR_RDMA_WRITE, p.src_mr, p.src, WRITE_BYTES, p.dst + WRITE_OFFSET,
		     p.dst_mr->rkey))
		dev_fail("RDMA WRITE of %d bytes to page+%d of the ODP MR did not complete",
			 WRITE_BYTES, WRITE_OFFSET);
	print_runs(p.dst, len);

	memset(p.want, 0, len);
	memcpy(p.want + WRITE_OFFSET, p.src, WRITE_BYTES);
	if (!memcmp(p.dst, p.want, len)) {
		struct utsname u;

		uname(&u);
		printf("XPASS: the %d bytes landed at page+%d: the rxe ODP offset defect is fixed "
		       "in kernel %s; remove the workaround and this test\n", WRITE_BYTES,
		       WRITE_OFFSET, u.release);
		return 1;
	}
	memset(p.want, 0, len);
	memcpy(p.want, p.src, WRITE_BYTES);
	if (!memcmp(p.dst, p.want, len)) {
		printf("the %d bytes meant for page+%d landed at page+0\n", WRITE_BYTES,
		       WRITE_OFFSET);
		printf("XFAIL: known rxe kernel bug: ODP copy ignores offset within page "
		       "(upstream __rxe_odp_mr_copy)\n");
		ibv_dereg_mr(p.dst_mr);
		ibv_dereg_mr(p.src_mr);
		dev_close(&d);
		return 0;
	}
	dev_fail("the %d bytes written to page+%d of the ODP MR landed neither there nor at "
		 "page+0", WRITE_BYTES, WRITE_OFFSET);
}
