// SPDX-License-Identifier: MIT
/*
 * verbs-mode: the mode decision (lib/mode.c) as a table: each row gives ODP caps, the
 * declared transports and a forced mode, and expects a mode, a return value and a phrase of
 * the reason.  Needs no device.
 */
#include "test.h"
#include "odpx-private.h"	/* mode.h: the decision */

#define RC_ALL (MODE_ODP_SEND | MODE_ODP_RECV | MODE_ODP_WRITE | MODE_ODP_READ | MODE_ODP_ATOMIC)
#define RXE_RC (RC_ALL | MODE_ODP_SRQ_RECV)
#define RXE_UD (MODE_ODP_SEND | MODE_ODP_RECV | MODE_ODP_SRQ_RECV)
#define ODP MODE_ODP_SUPPORT
#define IMPL (MODE_ODP_SUPPORT | MODE_ODP_SUPPORT_IMPLICIT)
#define RC ODPX_TRANSPORT_RC
#define UD ODPX_TRANSPORT_UD
#define UC ODPX_TRANSPORT_UC
#define XRC ODPX_TRANSPORT_XRC

/*
 * Hybrid's placement (hybrid_place()): budget 64 MiB, each row a request of
 * @bytes with @pinned held, the cgroup's headroom, whether an
 * ODP MR holds the range, whether ODP thrashes and whether the cgroup took
 * unused pins back lately.
 */
#define MB (1ULL << 20)
static const struct hyb_row {
	uint64_t bytes, pinned, headroom;
	bool odp_serves, thrash, churn;
	enum hybrid_place want;
	const char *what;
} hyb_rows[] = {
	{ 4 * MB, 0, UINT64_MAX, false, false, false, HYB_PIN, "fits an empty budget" },
	{ 4 * MB, 60 * MB, UINT64_MAX, false, false, false, HYB_PIN, "fills the budget exactly" },
	{ 4 * MB, 61 * MB, UINT64_MAX, false, false, false, HYB_ODP, "one page past the budget" },
	{ 65 * MB, 0, UINT64_MAX, false, false, false, HYB_ODP, "larger than the budget" },
	{ 4 * MB, UINT64_MAX - MB, UINT64_MAX, false, false, false, HYB_ODP, "pinned near 2^64: no wrap" },
	{ 4 * MB, 0, 4 * MB, false, false, false, HYB_PIN, "fills the headroom exactly" },
	{ 4 * MB, 0, 4 * MB - 4096, false, false, false, HYB_ODP, "a page past the headroom" },
	{ 4 * MB, 0, 0, false, false, false, HYB_ODP, "no headroom" },
	{ 4 * MB, 0, UINT64_MAX, true, false, false, HYB_ODP, "ODP serves it, no thrash: stays" },
	{ 4 * MB, 0, UINT64_MAX, true, true, false, HYB_TO_PIN, "ODP thrashes and it fits: moves" },
	{ 4 * MB, 62 * MB, UINT64_MAX, true, true, false, HYB_ODP, "ODP thrashes, no room: stays" },
	{ 4 * MB, 0, 2 * MB, true, true, false, HYB_ODP, "ODP thrashes, no headroom: stays" },
	{ 4 * MB, 0, UINT64_MAX, false, false, true, HYB_ODP, "fits, but the cgroup takes pins back" },
	{ 4 * MB, 0, UINT64_MAX, true, true, true, HYB_ODP, "ODP thrashes, the cgroup takes pins back: stays" },
};

static void hybrid_rows(void)
{
	for (size_t i = 0; i < sizeof(hyb_rows) / sizeof(hyb_rows[0]); i++) {
		const struct hyb_row *w = &hyb_rows[i];
		struct hybrid_in in = { .bytes = w->bytes, .pinned = w->pinned, .budget = 64 * MB,
					.headroom = w->headroom, .odp_serves = w->odp_serves, .thrash = w->thrash,
					.churn = w->churn };
		enum hybrid_place got = hybrid_place(&in);

		CHECK(got == w->want, "hybrid row %zu (%s): %d, want %d", i, w->what, got, w->want);
	}
}

static const struct row {
	bool odp_bad;
	bool queried;
	uint64_t general;
	uint32_t rc, uc, ud, xrc;
	uint32_t transports;
	enum odpx_mode forced;
	int implicit_err;
	int want_rc;
	enum odpx_mode want;
	const char *phrase;
} rows[] = {
	/* auto */
	{ false, true, IMPL, RC_ALL, 0, 0, 0, RC, ODPX_MODE_AUTO, 0, 0, ODPX_MODE_IMPLICIT, "IBV_ODP_SUPPORT_IMPLICIT and RC ODP caps present" },
	{ false, true, ODP, RXE_RC, 0, RXE_UD, 0, RC, ODPX_MODE_AUTO, 0, 0, ODPX_MODE_EXPLICIT, "no implicit ODP" },
	{ false, true, ODP, RXE_RC, 0, RXE_UD, 0, RC | UD, ODPX_MODE_AUTO, 0, 0, ODPX_MODE_EXPLICIT, "RC+UD ODP caps present" },
	{ false, true, ODP, RXE_RC, 0, RXE_UD, 0, RC | XRC, ODPX_MODE_AUTO, 0, 0, ODPX_MODE_PIN, "XRC SEND not in xrc_odp_caps" },
	{ false, true, ODP, RXE_RC, 0, RXE_UD, 0, UC, ODPX_MODE_AUTO, 0, 0, ODPX_MODE_PIN, "UC SEND not in uc_odp_caps" },
	{ false, true, IMPL, MODE_ODP_SEND | MODE_ODP_RECV | MODE_ODP_READ, 0, 0, 0, RC, ODPX_MODE_AUTO, 0, 0, ODPX_MODE_PIN, "RC WRITE not in rc_odp_caps" },
	{ false, true, IMPL, RC_ALL, 0, MODE_ODP_SEND, 0, RC | UD, ODPX_MODE_AUTO, 0, 0, ODPX_MODE_PIN, "UD RECV not in ud_odp_caps" },
	{ false, true, IMPL, RC_ALL, 0, 0, RXE_RC, XRC, ODPX_MODE_AUTO, 0, 0, ODPX_MODE_IMPLICIT, "XRC ODP caps present" },
	{ false, true, 0, RC_ALL, 0, 0, 0, RC, ODPX_MODE_AUTO, 0, 0, ODPX_MODE_PIN, "no ODP (IBV_ODP_SUPPORT not in general_caps)" },
	{ false, true, MODE_ODP_SUPPORT_IMPLICIT, RC_ALL, 0, 0, 0, RC, ODPX_MODE_AUTO, 0, 0, ODPX_MODE_PIN, "IBV_ODP_SUPPORT not in general_caps" },
	{ false, false, 0, 0, 0, 0, 0, RC, ODPX_MODE_AUTO, 0, 0, ODPX_MODE_PIN, "ibv_query_device_ex failed" },
	{ false, true, IMPL, RC_ALL, 0, 0, 0, RC, ODPX_MODE_AUTO, EINVAL, 0, ODPX_MODE_EXPLICIT, "the implicit ODP MR failed: Invalid argument" },
	/* forced */
	{ false, true, ODP, RXE_RC, 0, RXE_UD, 0, RC, ODPX_MODE_IMPLICIT, 0, -EOPNOTSUPP, ODPX_MODE_PIN, "implicit forced (attributes) but no implicit ODP" },
	{ false, true, IMPL, RC_ALL, 0, 0, 0, RC, ODPX_MODE_IMPLICIT, 0, 0, ODPX_MODE_IMPLICIT, "implicit forced" },
	{ false, true, IMPL, RC_ALL, 0, 0, 0, RC, ODPX_MODE_IMPLICIT, ENOMEM, -EOPNOTSUPP, ODPX_MODE_PIN, "the implicit ODP MR failed" },
	{ false, true, IMPL, RC_ALL, 0, 0, 0, RC, ODPX_MODE_EXPLICIT, 0, 0, ODPX_MODE_EXPLICIT, "explicit forced" },
	{ false, true, 0, 0, 0, 0, 0, RC, ODPX_MODE_EXPLICIT, 0, -EOPNOTSUPP, ODPX_MODE_PIN, "explicit forced (attributes) but no ODP" },
	{ false, true, ODP, RXE_RC, 0, 0, 0, RC | UD, ODPX_MODE_EXPLICIT, 0, -EOPNOTSUPP, ODPX_MODE_PIN, "UD SEND not in ud_odp_caps" },
	{ false, true, IMPL, RC_ALL, 0, 0, 0, RC, ODPX_MODE_PIN, 0, 0, ODPX_MODE_PIN, "pin forced" },
	{ false, false, 0, 0, 0, 0, 0, RC, ODPX_MODE_PIN, 0, 0, ODPX_MODE_PIN, "pin forced" },
	{ false, true, IMPL, RC_ALL, 0, 0, 0, RC, ODPX_MODE_DIRECT, 0, 0, ODPX_MODE_DIRECT, "direct forced" },
	{ false, true, ODP, RXE_RC, 0, RXE_UD, 0, RC, ODPX_MODE_HYBRID, 0, 0, ODPX_MODE_HYBRID, "hybrid forced (attributes): pinned within the budget" },
	{ false, true, 0, 0, 0, 0, 0, RC, ODPX_MODE_HYBRID, 0, -EOPNOTSUPP, ODPX_MODE_PIN, "hybrid forced (attributes) but no ODP" },
	{ false, true, ODP, RXE_RC, 0, 0, 0, RC | UD, ODPX_MODE_HYBRID, 0, -EOPNOTSUPP, ODPX_MODE_PIN, "UD SEND not in ud_odp_caps" },
	/* bad requests */
	{ false, true, IMPL, RC_ALL, 0, 0, 0, 0, ODPX_MODE_AUTO, 0, -EINVAL, ODPX_MODE_PIN, "transports" },
	{ false, true, IMPL, RC_ALL, 0, 0, 0, ODPX_TRANSPORT_RESERVED, ODPX_MODE_AUTO, 0, -EINVAL, ODPX_MODE_PIN, "unknown bits" },
	{ false, true, IMPL, RC_ALL, 0, 0, 0, RC, ODPX_MODE_RESERVED, 0, -EINVAL, ODPX_MODE_PIN, "out of range" },
	/* the ODP self-test found wrong bytes: auto pins, a forced mode is still taken */
	{ true, true, ODP, RXE_RC, 0, RXE_UD, 0, RC, ODPX_MODE_AUTO, 0, 0, ODPX_MODE_PIN, "pin: the ODP self-test moved wrong bytes (landed at offset 0); explicit ODP caps present, not used" },
	{ true, true, ODP, RXE_RC, 0, RXE_UD, 0, RC | UD, ODPX_MODE_AUTO, 0, 0, ODPX_MODE_PIN, "pin: the ODP self-test moved wrong bytes" },
	{ true, true, IMPL, RC_ALL, 0, 0, 0, RC, ODPX_MODE_AUTO, 0, 0, ODPX_MODE_PIN, "(landed at offset 0); implicit ODP caps present, not used" },
	{ true, true, IMPL, RC_ALL, 0, 0, 0, RC, ODPX_MODE_AUTO, EINVAL, 0, ODPX_MODE_PIN, "(landed at offset 0); explicit ODP caps present, not used" },
	{ true, true, ODP, RXE_RC, 0, RXE_UD, 0, RC | XRC, ODPX_MODE_AUTO, 0, 0, ODPX_MODE_PIN, "pin: XRC SEND not in xrc_odp_caps" },
	{ true, true, ODP, RXE_RC, 0, RXE_UD, 0, RC, ODPX_MODE_EXPLICIT, 0, 0, ODPX_MODE_EXPLICIT, "explicit forced" },
	{ true, true, 0, RC_ALL, 0, 0, 0, RC, ODPX_MODE_AUTO, 0, 0, ODPX_MODE_PIN, "no ODP (IBV_ODP_SUPPORT" },
	/* it could not run: the caps' choice stands, and the reason says so */
	{ false, true, ODP, RXE_RC, 0, RXE_UD, 0, RC, ODPX_MODE_AUTO, 0, 0, ODPX_MODE_EXPLICIT, "; ODP self-test not run: x" },
	{ false, true, ODP, RXE_RC, 0, RXE_UD, 0, RC | UD, ODPX_MODE_AUTO, 0, 0, ODPX_MODE_EXPLICIT, "RC+UD ODP caps present; ODP self-test not run: no completion in 3 s" },
	{ false, true, IMPL, RC_ALL, 0, 0, 0, RC, ODPX_MODE_AUTO, 0, 0, ODPX_MODE_IMPLICIT, "RC ODP caps present; ODP self-test not run: no active port" },
};

int main(void)
{
	enum odpx_mode m;

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		const struct row *w = &rows[i];
		struct mode_caps c = { .queried = w->queried, .query_err = w->queried ? 0 : EOPNOTSUPP,
				       .general = w->general, .rc = w->rc, .uc = w->uc,
				       .ud = w->ud, .xrc = w->xrc, .odp_bad = w->odp_bad };
		struct mode_request rq = { .forced = w->forced, .forced_by = "attributes",
					   .transports = w->transports,
					   .implicit_err = w->implicit_err };
		struct mode_choice ch;

		if (w->odp_bad)
			snprintf(c.odp_check, sizeof(c.odp_check), "landed at offset 0");
		else if (strstr(w->phrase, "ODP self-test not run"))
			snprintf(c.odp_check, sizeof(c.odp_check), "%s",
				 strstr(w->phrase, "ODP self-test not run"));
		int r = mode_decide(&c, &rq, &ch);

		printf("row %2zu: %-8s rc %3d  %s\n", i, odpx_mode_str(ch.mode), r, ch.reason);
		CHECK(r == w->want_rc, "row %zu: rc %d, want %d", i, r, w->want_rc);
		if (r == 0)
			CHECK(ch.mode == w->want, "row %zu: mode %s, want %s", i,
			      odpx_mode_str(ch.mode), odpx_mode_str(w->want));
		CHECK(strstr(ch.reason, w->phrase), "row %zu: reason \"%s\" lacks \"%s\"", i,
		      ch.reason, w->phrase);
	}
	/* ODPX_MODE strings */
	CHECK(mode_parse(NULL, &m) == 0 && m == ODPX_MODE_AUTO, "NULL");
	CHECK(mode_parse("auto", &m) == 0 && m == ODPX_MODE_AUTO, "auto");
	CHECK(mode_parse("implicit", &m) == 0 && m == ODPX_MODE_IMPLICIT, "implicit");
	CHECK(mode_parse("explicit", &m) == 0 && m == ODPX_MODE_EXPLICIT, "explicit");
	CHECK(mode_parse("pin", &m) == 0 && m == ODPX_MODE_PIN, "pin");
	CHECK(mode_parse("direct", &m) == 0 && m == ODPX_MODE_DIRECT, "direct");
	CHECK(mode_parse("hybrid", &m) == 0 && m == ODPX_MODE_HYBRID, "hybrid");
	CHECK(!strcmp(odpx_mode_str(ODPX_MODE_HYBRID), "hybrid"), "hybrid's name");
	CHECK(mode_parse("Pin", &m) == -EINVAL, "case");
	CHECK(mode_parse("odp", &m) == -EINVAL, "junk");
	hybrid_rows();
	printf("%zu rows\n", sizeof(rows) / sizeof(rows[0]));
	return 0;
}
