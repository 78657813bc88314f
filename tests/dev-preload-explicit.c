// SPDX-License-Identifier: MIT
/*
 * dev-preload-explicit: unmodified verbs programs (ibv_rc_pingpong, also -o,
 * ibv_ud_pingpong, ib_write_bw, ib_read_bw, ib_send_lat, ib_write_lat,
 * rping -v), server and client over rxe0 on lo, under libodpx-preload.so in
 * explicit mode: each works, and each process's exit line (ODPX_PRELOAD_VERBOSE)
 * shows registrations served by odpx in that mode and none passed through.
 * rping on rxe is a labelled known defect here (XFAIL, dev-preload.h).
 */
#include "dev-preload.h"

int main(void)
{
	const struct pre_cfg c = { .name = "explicit", .mode = "explicit" };

	pre_run_programs(&c);
	printf("ok\n");
	return 0;
}
