// SPDX-License-Identifier: MIT
/*
 * api-closed: a closed context is refused, not used (odpx.h: odpx_close).
 *
 * After odpx_close(ctx), odpx_close(ctx) again and every call that takes
 * the context (odpx_reg, odpx_reg_ex, odpx_dereg, odpx_prefetch,
 * odpx_invalidate, odpx_mode_get, odpx_stats_read, odpx_transfer,
 * odpx_prereg_add, odpx_prereg_release, odpx_query) return -EINVAL with a
 * reason naming the closed context, and leave no registration behind
 * (VmPin back to its baseline).  A context opened afterwards works.  In
 * the ASan build any read of freed memory fails the test.  In each uffd
 * mode (auto, wp, missing), since the close detaches the monitor.
 */
#include "test.h"

#define PG 4096UL

static int one_mode(void *arg)
{
	struct odpx_ctx *ctx, *ctx2;
	struct odpx_mr *mr;
	struct odpx_stats st;
	enum odpx_mode m;
	size_t len = 16 * PG;
	char *p = map_anon(NULL, len);
	long pin0 = vm_pinned_kb();

	(void)arg;
	ctx = open_pin(0);
	memset(p, 1, len);
	CHECK_RC(odpx_reg(ctx, p, len, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
	CHECK_RC(odpx_close(ctx), 0);
	CHECK(vm_pinned_kb() == pin0, "VmPin %ld kB after close, %ld before", vm_pinned_kb(), pin0);

	CHECK_RC(odpx_close(ctx), -EINVAL);
	CHECK(strstr(odpx_last_reason(), "closed"), "reason \"%s\"", odpx_last_reason());
	CHECK_RC(odpx_reg(ctx, p, len, ODPX_ACCESS_LOCAL_WRITE, &mr), -EINVAL);
	CHECK(strstr(odpx_last_reason(), "closed"), "reason \"%s\"", odpx_last_reason());
	CHECK_RC(odpx_dereg(ctx, mr), -EINVAL);
	CHECK_RC(odpx_prefetch(ctx, p, len, 0), -EINVAL);
	CHECK_RC(odpx_prefetch(ctx, p, len, ODPX_PREFETCH_SYNC), -EINVAL);
	CHECK_RC(odpx_invalidate(ctx, p, len), -EINVAL);
	CHECK_RC(odpx_mode_get(ctx, &m, NULL), -EINVAL);
	CHECK_RC(odpx_stats_read(ctx, &st, sizeof(st)), -EINVAL);
	CHECK_RC(odpx_transfer(ctx, mr, 0, 0, p, PG, ODPX_XFER_TO_FD), -EINVAL);
	CHECK_RC(odpx_reg_ex(ctx, p, len, ODPX_ACCESS_LOCAL_WRITE, ODPX_REG_TRY, &mr), -EINVAL);
	CHECK_RC(odpx_prereg_add(ctx, p, len, ODPX_ACCESS_LOCAL_WRITE), -EINVAL);
	CHECK_RC(odpx_prereg_release(ctx, p, len, ODPX_ACCESS_LOCAL_WRITE), -EINVAL);
	struct odpx_caps caps = { 0 };
	CHECK_RC(odpx_query(ctx, &caps), -EINVAL);
	CHECK(vm_pinned_kb() == pin0, "VmPin %ld kB after calls on a closed context, %ld before",
	      vm_pinned_kb(), pin0);

	/* a new context works, whether or not it reuses the closed one's memory */
	ctx2 = open_pin(0);
	CHECK_RC(odpx_reg(ctx2, p, len, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
	CHECK_RC(odpx_dereg(ctx2, mr), 0);
	CHECK_RC(odpx_close(ctx2), 0);
	CHECK_RC(odpx_close(ctx2), -EINVAL);
	munmap(p, len);
	printf("%s: closed contexts refused with -EINVAL\n", getenv("ODPX_UFFD_MODE"));
	return 0;
}

int main(void)
{
	return run_each_uffd_mode(one_mode, NULL);
}
