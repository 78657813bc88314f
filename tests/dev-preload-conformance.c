// SPDX-License-Identifier: MIT
/*
 * dev-preload-conformance: rdma-core's example programs (ibverbs-utils),
 * server and client in the guest over rxe0, natively and under
 * libodpx-preload.so in pin and in explicit mode; each drop-in run must end
 * as the native one (pre_conformance() in dev-preload.h has the rules and
 * the one labelled device defect).  -c turns on each pingpong's own check
 * of what it received, a light one (the first byte of each page), the most
 * these programs offer; dev-preload-fidelity checks every byte.
 * dev-preload-conformance-perftest and -cm run perftest's and librdmacm's
 * programs the same way.
 */
#include "dev-preload.h"

#define PP(prog, ...)								\
	{ prog, "-d", "%D", "-g", "%G", "-n", "20", "-c", "-p", "%P", __VA_ARGS__ }

static const struct pre_conf_prog progs[] = {
	{ "ibv_rc_pingpong -c", PP("ibv_rc_pingpong", NULL), PP("ibv_rc_pingpong", "127.0.0.1"),
	  "iters in", PRE_TCP, PRE_CHECK_OK, 0, 0, NULL },
	/* asks for an ODP MR itself: in pin mode the drop-in passes it through */
	{ "ibv_rc_pingpong -o -c", PP("ibv_rc_pingpong", "-o"),
	  PP("ibv_rc_pingpong", "-o", "127.0.0.1"), "iters in", PRE_TCP, PRE_CHECK_OK, 1, 0, NULL },
	{ "ibv_uc_pingpong -c", PP("ibv_uc_pingpong", NULL), PP("ibv_uc_pingpong", "127.0.0.1"),
	  "iters in", PRE_TCP, PRE_CHECK_OK, 0, 0, NULL },
	/* UD: each receive holds a 40-byte GRH, then the payload it checks */
	{ "ibv_ud_pingpong -c", PP("ibv_ud_pingpong", "-s", "1024"),
	  PP("ibv_ud_pingpong", "-s", "1024", "127.0.0.1"), "iters in", PRE_TCP, PRE_CHECK_OK, 0, 1,
	  NULL },
	/* 4 QPs on one SRQ, 20 exchanges each */
	{ "ibv_srq_pingpong -c", PP("ibv_srq_pingpong", "-q", "4"),
	  PP("ibv_srq_pingpong", "-q", "4", "127.0.0.1"), "iters in", PRE_TCP, PRE_CHECK_OK, 0, 0,
	  NULL },
	{ "ibv_srq_pingpong -o -c", PP("ibv_srq_pingpong", "-o", "-q", "4"),
	  PP("ibv_srq_pingpong", "-o", "-q", "4", "127.0.0.1"), "iters in", PRE_TCP, PRE_CHECK_OK,
	  1, 0, NULL },
	/*
	 * XRC: rxe has none (ibv_open_xrcd: EOPNOTSUPP), so it fails natively
	 * before any registration, and must fail the same way under the drop-in.
	 */
	{ "ibv_xsrq_pingpong",
	  { "ibv_xsrq_pingpong", "-d", "%D", "-g", "%G", "-n", "5", "-p", "%P" },
	  { "ibv_xsrq_pingpong", "-d", "%D", "-g", "%G", "-n", "5", "-p", "%P", "127.0.0.1" },
	  "iters in", PRE_TCP, PRE_CHECK_OK, 0, 0, "Couldn't Open the XRC Domain" },
};

int main(void)
{
	pre_conformance(progs, sizeof(progs) / sizeof(progs[0]));
	printf("ok\n");
	return 0;
}
