// SPDX-License-Identifier: MIT
/*
 * dev-verbs-mrsize: in pin and direct mode one entry is one MR, so no entry may be longer
 * than the device's max_mr_size.  Soft-RoCE has no limit (2^64 - 1), so this test lowers
 * the max_mr_size that ibv_query_device_ex() reports to 8 MiB (through the context's
 * query_device_ex, which the verbs.h inline calls) and opens pin and direct contexts:
 *
 *   - a request of 10 MiB is -E2BIG with a reason, as one over max_entry_bytes is;
 *   - two adjacent 6 MiB registrations stay two MRs of 6 MiB: merged into one 12 MiB MR,
 *     which a device with that limit refuses, they would fail a request that fits on
 *     its own;
 *   - an explicit max_entry_bytes above max_mr_size fails the open with -EINVAL;
 *   - data moves through both registrations (an RDMA READ into each, through its lkey).
 */
#include "dev-verbs-util.h"

#define MIB (1024UL * 1024)
#define FAKE_MAX_MR (8 * MIB)

static int (*real_query)(struct ibv_context *, const struct ibv_query_device_ex_input *,
			 struct ibv_device_attr_ex *, size_t);

static int small_query(struct ibv_context *c, const struct ibv_query_device_ex_input *in,
		       struct ibv_device_attr_ex *attr, size_t size)
{
	int r = real_query(c, in, attr, size);

	if (!r)
		attr->orig_attr.max_mr_size = FAKE_MAX_MR;
	return r;
}

static void run(struct dev *d, enum odpx_mode mode)
{
	struct odpx_attr a = { .comp_mask = ODPX_ATTR_MODE | ODPX_ATTR_LIMITS, .mode = mode,
			       .limits = { .max_entry_bytes = 16 * MIB } };
	const char *m = odpx_mode_str(mode);
	struct odpx_ctx *ctx;
	struct odpx_mr *src, *m1, *m2;
	unsigned char *buf, *s;
	int r;

	r = odpx_open_verbs(d->pd, &a, &ctx);
	if (r != -EINVAL || !strstr(odpx_last_reason(), "max_mr_size"))
		dev_fail("%s: max_entry_bytes 16 MiB over max_mr_size 8 MiB: open = %d (%s)", m, r,
			 odpx_last_reason());
	ctx = dv_open(d, mode, 0);
	buf = dv_map(12 * MIB);
	s = dv_map(4096);
	memset(buf, 0, 12 * MIB);
	r = odpx_reg(ctx, buf, 10 * MIB, ACC_LW, &m1);
	if (r != -E2BIG)
		dev_fail("%s: 10 MiB over max_mr_size 8 MiB: odpx_reg = %d, want -E2BIG", m, r);
	m1 = dv_reg(ctx, buf, 6 * MIB, ACC_LW);
	dv_dereg(ctx, m1);	/* cached in pin mode: the next one would merge with it */
	m1 = dv_reg(ctx, buf, 6 * MIB, ACC_LW);
	m2 = dv_reg(ctx, buf + 6 * MIB, 6 * MIB, ACC_LW);
	if (odpx_mr_length(m1) > FAKE_MAX_MR || odpx_mr_length(m2) > FAKE_MAX_MR)
		dev_fail("%s: adjacent 6 MiB registrations: MRs of %zu and %zu bytes, max_mr_size %lu",
			 m, odpx_mr_length(m1), odpx_mr_length(m2), FAKE_MAX_MR);
	src = dv_reg(ctx, s, 4096, ACC_REMOTE);
	struct odpx_mr *mrs[2] = { m1, m2 };
	for (int i = 0; i < 2; i++) {	/* an RDMA READ into each, through its own lkey */
		unsigned char *dst = buf + (size_t)(i * 6 + 5) * MIB;
		dev_fill(s, 4096, (unsigned)(20 + i));
		memset(dst, 0, 4096);
		if (dv_rdma(d, IBV_WR_RDMA_READ, mrs[i], dst, 4096, s, odpx_mr_rkey(src)))
			dev_fail("%s: RDMA READ into registration %d failed", m, i + 1);
		if (!dev_same("mrsize", dst, s, 4096))
			dev_fail("%s: data mismatch in registration %d", m, i + 1);
		dv_dereg(ctx, mrs[i]);
	}
	dv_dereg(ctx, src);
	printf("%s: max_mr_size 8 MiB: 10 MiB is -E2BIG, 6 + 6 MiB stay two MRs, data moved\n", m);
	odpx_close(ctx);
	munmap(buf, 12 * MIB);
	munmap(s, 4096);
}

int main(void)
{
	struct verbs_context *v;
	struct dev d;

	dev_open(&d);
	dev_connect_self(&d);
	v = verbs_get_ctx_op(d.ctx, query_device_ex);
	if (!v)
		dev_fail("device %s: no query_device_ex to lower max_mr_size through", d.name);
	real_query = v->query_device_ex;
	v->query_device_ex = small_query;
	run(&d, ODPX_MODE_PIN);
	run(&d, ODPX_MODE_DIRECT);
	dev_close(&d);
	return 0;
}
