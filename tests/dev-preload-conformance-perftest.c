// SPDX-License-Identifier: MIT
/*
 * dev-preload-conformance-perftest: perftest's programs, server and client
 * in the guest over rxe0, natively and under libodpx-preload.so in pin and
 * in explicit mode (pre_conformance() in dev-preload.h has the rules).
 * perftest checks no data: its exit statuses and the client's result row
 * of -n iterations are what a run must show.  Small -n and sizes: the guest
 * is emulated.
 */
#include "dev-preload.h"

#define PT(prog, ...)								\
	{ prog, "-d", "%D", "-x", "%G", "-n", "50", "-F", "-p", "%P", __VA_ARGS__ }
#define PERF(name, prog, ...)							\
	{ name, PT(prog, __VA_ARGS__ NULL), PT(prog, __VA_ARGS__ "127.0.0.1"), "#bytes",	\
	  PRE_TCP, PRE_CHECK_PERFTEST, 0, 0, NULL }

static const struct pre_conf_prog progs[] = {
	PERF("ib_send_bw", "ib_send_bw", "-s", "16384",),
	PERF("ib_write_bw", "ib_write_bw", "-s", "16384",),
	PERF("ib_read_bw", "ib_read_bw", "-s", "16384",),
	PERF("ib_atomic_bw", "ib_atomic_bw",),
	PERF("ib_send_lat", "ib_send_lat",),
	PERF("ib_write_lat", "ib_write_lat",),
	PERF("ib_read_lat", "ib_read_lat",),
	PERF("ib_atomic_lat", "ib_atomic_lat",),
	/* asks for ODP itself (--odp): in pin mode the drop-in passes it through */
	{ "ib_write_bw --odp", PT("ib_write_bw", "--odp", "-s", "16384", NULL),
	  PT("ib_write_bw", "--odp", "-s", "16384", "127.0.0.1"), "#bytes", PRE_TCP,
	  PRE_CHECK_PERFTEST, 1, 0, NULL },
};

int main(void)
{
	pre_conformance(progs, sizeof(progs) / sizeof(progs[0]));
	printf("ok\n");
	return 0;
}
