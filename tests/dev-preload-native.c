// SPDX-License-Identifier: MIT
/*
 * dev-preload-native: unmodified verbs programs (ibv_rc_pingpong, also -o,
 * ibv_ud_pingpong, ib_write_bw, ib_read_bw, ib_send_lat, ib_write_lat,
 * rping -v), server and client over rxe0 on lo, without the drop-in: the
 * reference the drop-in's runs (dev-preload-explicit, dev-preload-pin) are
 * compared with.
 */
#include "dev-preload.h"

int main(void)
{
	const struct pre_cfg c = { .name = "native", .mode = NULL };

	pre_run_programs(&c);
	printf("ok\n");
	return 0;
}
