// SPDX-License-Identifier: MIT
/*
 * dev-verbs-odp-check: mode auto never picks ODP on a device whose ODP moves
 * wrong bytes.  The test finds out itself (an RDMA WRITE to page+2148 of an
 * ODP MR, as dev-rxe-odp-offset does), then opens contexts:
 *   - auto: pin, its reason naming the self-test's finding, where the bytes
 *     landed at page+0; explicit where they landed right;
 *   - a second context on another PD gets the same answer (kept per device);
 *   - ODPX_MODE=explicit and the mode attribute still give explicit ODP;
 *   - auto with UD declared as well: the same decision;
 *   - a reason saying the self-test did not run fails: rxe can run it.
 * The self-test's cost is printed (the first open against a forced one).
 */
#include "dev-verbs-util.h"

static struct odpx_ctx *open_timed(struct dev *d, enum odpx_mode mode, uint32_t tr, int64_t *ms)
{
	struct odpx_attr a = { .comp_mask = ODPX_ATTR_MODE | (tr ? ODPX_ATTR_TRANSPORTS : 0),
			       .mode = mode, .transports = tr };
	struct odpx_ctx *ctx;
	int64_t t0 = dev_now_ms();
	int r = odpx_open_verbs(d->pd, &a, &ctx);

	*ms = dev_now_ms() - t0;
	if (r)
		dev_fail("odpx_open_verbs(%s): %s: %s", odpx_mode_str(mode), strerror(-r),
			 odpx_last_reason());
	return ctx;
}

static void want(struct odpx_ctx *ctx, enum odpx_mode m_want, const char *phrase, const char *what)
{
	enum odpx_mode m;
	const char *why;

	odpx_mode_get(ctx, &m, &why);
	printf("%s: %s (%s)\n", what, odpx_mode_str(m), why);
	if (m != m_want || !strstr(why, phrase) || strstr(why, "not run"))
		dev_fail("%s: %s (%s), want %s and \"%s\"", what, odpx_mode_str(m), why,
			 odpx_mode_str(m_want), phrase);
}

int main(void)
{
	struct odpx_ctx *ctx;
	int64_t first_ms, cached_ms, forced_ms, env_ms;
	struct dev d;

	dev_open(&d);
	dev_require_odp(&d, IBV_ODP_SUPPORT_WRITE);
	unsetenv("ODPX_MODE");
	dev_connect_self(&d);
	int right = dev_odp_offset_right(&d);
	enum odpx_mode m = right ? ODPX_MODE_EXPLICIT : ODPX_MODE_PIN;
	const char *phrase = right ? "ODP caps present" :
		"pin: the ODP self-test moved wrong bytes (a 64-byte write at page offset 2148 "
		"landed at offset 0)";

	ctx = open_timed(&d, ODPX_MODE_AUTO, 0, &first_ms);
	want(ctx, m, phrase, "auto");
	odpx_close(ctx);

	struct ibv_pd *pd1 = d.pd, *pd2 = ibv_alloc_pd(d.ctx);
	if (!pd2)
		dev_fail("ibv_alloc_pd: %s", strerror(errno));
	d.pd = pd2;
	ctx = open_timed(&d, ODPX_MODE_AUTO, ODPX_TRANSPORT_RC | ODPX_TRANSPORT_UD, &cached_ms);
	want(ctx, m, right ? "RC+UD ODP caps present" : phrase, "auto, another PD, RC+UD");
	odpx_close(ctx);
	d.pd = pd1;
	ibv_dealloc_pd(pd2);

	ctx = open_timed(&d, ODPX_MODE_EXPLICIT, 0, &forced_ms);
	want(ctx, ODPX_MODE_EXPLICIT, "explicit forced (attributes)", "explicit forced");
	odpx_close(ctx);
	setenv("ODPX_MODE", "explicit", 1);
	ctx = open_timed(&d, ODPX_MODE_AUTO, 0, &env_ms);
	want(ctx, ODPX_MODE_EXPLICIT, "explicit forced (ODPX_MODE)", "ODPX_MODE=explicit");
	odpx_close(ctx);
	unsetenv("ODPX_MODE");
	printf("open: %" PRId64 " ms with the self-test, %" PRId64 " ms auto again (kept), %" PRId64
	       " ms forced explicit, %" PRId64 " ms ODPX_MODE=explicit\n", first_ms, cached_ms,
	       forced_ms, env_ms);
	dev_close(&d);
	printf("ok\n");
	return 0;
}
