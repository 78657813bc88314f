// SPDX-License-Identifier: MIT
/*
 * verbs-errors: libibverbs' error conventions (positive errno, -1 or NULL with errno, a
 * negative errno) become one -errno (mode_verbs_err), and odpx_open_verbs() refuses bad
 * input without touching a device.  Needs no device.
 */
#include "test.h"
#include "odpx-private.h"	/* mode.h: mode_verbs_err */

int main(void)
{
	struct odpx_ctx *ctx = (void *)1;
	struct odpx_attr a = { 0 };

	CHECK(mode_verbs_err(0, EINVAL) == 0, "success");
	CHECK(mode_verbs_err(EINVAL, 0) == -EINVAL, "positive errno");
	CHECK(mode_verbs_err(EBUSY, ENOMEM) == -EBUSY, "positive errno wins over errno");
	CHECK(mode_verbs_err(-1, ENOMEM) == -ENOMEM, "-1 + errno");
	CHECK(mode_verbs_err(-1, 0) == -EIO, "-1 without errno");
	CHECK(mode_verbs_err(-EOPNOTSUPP, 0) == -EOPNOTSUPP, "negative errno");
	CHECK(mode_verbs_err(-ENOMEM, EINVAL) == -ENOMEM, "negative errno wins over errno");

	CHECK_RC(odpx_open_verbs(NULL, NULL, NULL), -EINVAL);
	CHECK_RC(odpx_open_verbs(NULL, NULL, &ctx), -EINVAL);
	CHECK(ctx == NULL, "out pointer cleared on failure");
	CHECK(strstr(odpx_last_reason(), "protection domain"), "reason: %s", odpx_last_reason());
	/* validation happens before the PD is used: a bogus PD pointer is never touched */
	a.comp_mask = ODPX_ATTR_RESERVED;
	CHECK_RC(odpx_open_verbs((struct ibv_pd *)8, &a, &ctx), -EINVAL);
	setenv("ODPX_MODE", "bogus", 1);
	a.comp_mask = 0;
	CHECK_RC(odpx_open_verbs((struct ibv_pd *)8, &a, &ctx), -EINVAL);
	CHECK(strstr(odpx_last_reason(), "ODPX_MODE=bogus"), "reason: %s", odpx_last_reason());
	unsetenv("ODPX_MODE");
	printf("error conversion and input checks: ok\n");
	return 0;
}
