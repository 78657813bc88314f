// SPDX-License-Identifier: MIT
/*
 * dev-verbs-mode: on Soft-RoCE, auto mode is explicit ODP because there is no implicit ODP
 * (or pin, where its ODP misplaces bytes: dev-verbs-odp-check);
 * forcing implicit (attributes or ODPX_MODE) fails with -EOPNOTSUPP, never silently; pin and
 * direct can be forced.  A context holds its PD: ibv_dealloc_pd() fails with EBUSY until
 * odpx_close().  Several contexts on several PDs share the process-wide monitor.
 */
#include "dev-verbs-util.h"

int main(void)
{
	struct odpx_attr a = { .comp_mask = ODPX_ATTR_MODE, .mode = ODPX_MODE_IMPLICIT };
	struct odpx_ctx *ctx, *c2;
	const char *why;
	enum odpx_mode m;
	struct dev d;
	int r;

	dev_open(&d);
	dev_require_odp(&d, IBV_ODP_SUPPORT_WRITE);
	if (!dev_is_rxe(&d))
		dev_skip("device %s is not Soft-RoCE: the expected mode differs", d.name);
	unsetenv("ODPX_MODE");

	dev_connect_self(&d);
	int odp_right = dev_odp_offset_right(&d);
	ctx = dv_open(&d, ODPX_MODE_AUTO, 0);
	odpx_mode_get(ctx, &m, &why);
	if (odp_right && (m != ODPX_MODE_EXPLICIT || !strstr(why, "no implicit ODP")))
		dev_fail("auto chose %s (%s), want explicit because of no implicit ODP",
			 odpx_mode_str(m), why);
	if (!odp_right && (m != ODPX_MODE_PIN || !strstr(why, "ODP self-test moved wrong bytes")))
		dev_fail("auto chose %s (%s), want pin because the ODP self-test fails",
			 odpx_mode_str(m), why);
	printf("auto: %s: %s\n", odpx_mode_str(m), why);

	/* the PD is held while the context lives */
	r = ibv_dealloc_pd(d.pd);
	if (r != EBUSY)
		dev_fail("ibv_dealloc_pd with an open context returned %d (%s), want EBUSY", r,
			 strerror(r));
	printf("ibv_dealloc_pd before odpx_close: EBUSY (documented)\n");
	odpx_close(ctx);

	c2 = (void *)1;
	r = odpx_open_verbs(d.pd, &a, &c2);
	if (r != -EOPNOTSUPP || c2)
		dev_fail("forced implicit: %d (%s), want -EOPNOTSUPP", r, strerror(-r));
	printf("implicit forced by attributes: -EOPNOTSUPP: %s\n", odpx_last_reason());
	setenv("ODPX_MODE", "implicit", 1);
	r = odpx_open_verbs(d.pd, NULL, &c2);
	if (r != -EOPNOTSUPP)
		dev_fail("ODPX_MODE=implicit: %d, want -EOPNOTSUPP", r);
	printf("ODPX_MODE=implicit: -EOPNOTSUPP: %s\n", odpx_last_reason());
	setenv("ODPX_MODE", "direct", 1);
	c2 = dv_open(&d, ODPX_MODE_AUTO, 0);
	odpx_mode_get(c2, &m, &why);
	if (m != ODPX_MODE_DIRECT || !strstr(why, "ODPX_MODE"))
		dev_fail("ODPX_MODE=direct gave %s (%s)", odpx_mode_str(m), why);
	odpx_close(c2);
	unsetenv("ODPX_MODE");

	/* XRC declared: rxe has no XRC ODP, so auto falls to pin and says why */
	a.comp_mask = ODPX_ATTR_TRANSPORTS;
	a.transports = ODPX_TRANSPORT_RC | ODPX_TRANSPORT_XRC;
	if ((r = odpx_open_verbs(d.pd, &a, &c2)))
		dev_fail("RC+XRC: %s", strerror(-r));
	odpx_mode_get(c2, &m, &why);
	if (m != ODPX_MODE_PIN || !strstr(why, "XRC"))
		dev_fail("RC+XRC gave %s (%s)", odpx_mode_str(m), why);
	printf("RC+XRC declared: %s: %s\n", odpx_mode_str(m), why);
	odpx_close(c2);

	/* several contexts on several PDs: pin mode, one monitor */
	struct ibv_pd *pd2 = ibv_alloc_pd(d.ctx);
	if (!pd2)
		dev_fail("ibv_alloc_pd");
	ctx = dv_open(&d, ODPX_MODE_PIN, 0);
	struct ibv_pd *pd1 = d.pd;
	d.pd = pd2;
	c2 = dv_open(&d, ODPX_MODE_PIN, 0);
	d.pd = pd1;
	unsigned char *buf = dv_map(16 * 4096);
	memset(buf, 1, 16 * 4096);
	struct odpx_mr *m1 = dv_reg(ctx, buf, 16 * 4096, ACC_LW);
	struct odpx_mr *m2 = dv_reg(c2, buf, 16 * 4096, ACC_LW);
	dv_dereg(ctx, m1);
	dv_dereg(c2, m2);
	if (munmap(buf, 16 * 4096))
		dev_fail("munmap");
	/* the monitor marks the contexts one after the other: wait with a deadline */
	struct odpx_stats s1, s2;
	int64_t deadline = dev_now_ms() + 5000;
	do {
		s1 = dv_stats(ctx);
		s2 = dv_stats(c2);
		if (s1.inval_entries && s2.inval_entries)
			break;
		dev_pause_ms(1);
	} while (dev_now_ms() < deadline);
	if (!s1.inval_entries || !s2.inval_entries)
		dev_fail("munmap invalidated %llu and %llu entries, want both > 0",
			 (unsigned long long)s1.inval_entries, (unsigned long long)s2.inval_entries);
	printf("two pin contexts on two PDs, one monitor: munmap invalidated both (%llu, %llu)\n",
	       (unsigned long long)s1.inval_entries, (unsigned long long)s2.inval_entries);
	if (ibv_dealloc_pd(pd2) != EBUSY)
		dev_fail("pd2 freed under an open context");
	odpx_close(c2);
	odpx_close(ctx);
	if (ibv_dealloc_pd(pd2))
		dev_fail("ibv_dealloc_pd(pd2) after odpx_close failed");
	dev_close(&d);
	return 0;
}
