// SPDX-License-Identifier: MIT
/*
 * dev-preload-conformance-cm: librdmacm's programs (rdmacm-utils), server
 * and client in the guest, natively and under libodpx-preload.so in pin and
 * in explicit mode (pre_conformance() in dev-preload.h has the rules).
 * rdma_cm finds no device for an address on lo: they run over rxe1, the rxe
 * on a dummy netdev holding 10.8.8.1 (tests/vm/guest-run.sh).  rping -v -V
 * checks each ping's payload itself and prints it, which must be the native
 * run's; the others check no data and must end as natively.
 */
#include "dev-preload.h"

static const struct pre_conf_prog progs[] = {
	{ "rdma_server/rdma_client", { "rdma_server", "-s", "10.8.8.1", "-p", "%P" },
	  { "rdma_client", "-s", "10.8.8.1", "-p", "%P" }, "rdma_client: end 0", PRE_CM,
	  PRE_CHECK_OK, 0, 0, NULL },
	/* UDP QPs: each receive holds a 40-byte GRH before the message */
	{ "udaddy", { "udaddy", "-b", "10.8.8.1", "-C", "10" },
	  { "udaddy", "-s", "10.8.8.1", "-C", "10" }, "test complete", PRE_CM, PRE_CHECK_OK, 0, 1,
	  NULL },
	/* the receiver exits once it has its 10 messages: the sender is run until then */
	{ "mckey", { "mckey", "-m", "239.1.1.1", "-b", "10.8.8.1", "-C", "10" },
	  { "mckey", "-m", "239.1.1.1", "-b", "10.8.8.1", "-s", "-C", "10" }, "test complete",
	  PRE_MCAST, PRE_CHECK_OK, 0, 1, NULL },
	/* its buffer descriptions travel in small unaligned malloc()ed structs */
	{ "rping -v -V", { "rping", "-s", "-a", "10.8.8.1", "-C", "10", "-v", "-V", "-p", "%P" },
	  { "rping", "-c", "-a", "10.8.8.1", "-C", "10", "-v", "-V", "-p", "%P" },
	  "ping data: rdma-ping-", PRE_CM, PRE_CHECK_PING, 0, 1, NULL },
};

int main(void)
{
	pre_conformance(progs, sizeof(progs) / sizeof(progs[0]));
	printf("ok\n");
	return 0;
}
