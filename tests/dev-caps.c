// SPDX-License-Identifier: MIT
/*
 * dev-caps: the RDMA device is there and reports the ODP capabilities odpx is built around:
 * explicit ODP (IBV_ODP_SUPPORT) with RC SEND, RECV, WRITE and READ, and, on Soft-RoCE (rxe),
 * no implicit ODP (IBV_ODP_SUPPORT_IMPLICIT absent), so odpx must register explicit ranges.
 */
#include "dev-util.h"

static void print_transport_caps(const char *name, uint32_t v)
{
	static const struct {
		uint32_t bit;
		const char *name;
	} bits[] = {
		{ IBV_ODP_SUPPORT_SEND, "SEND" },
		{ IBV_ODP_SUPPORT_RECV, "RECV" },
		{ IBV_ODP_SUPPORT_WRITE, "WRITE" },
		{ IBV_ODP_SUPPORT_READ, "READ" },
		{ IBV_ODP_SUPPORT_ATOMIC, "ATOMIC" },
		{ IBV_ODP_SUPPORT_SRQ_RECV, "SRQ_RECV" },
		{ DEV_ODP_SUPPORT_FLUSH, "FLUSH" },
		{ DEV_ODP_SUPPORT_ATOMIC_WRITE, "ATOMIC_WRITE" },
	};

	printf("  %-12s 0x%02x", name, v);
	for (size_t i = 0; i < sizeof(bits) / sizeof(bits[0]); i++)
		if (v & bits[i].bit)
			printf(" %s", bits[i].name);
	putchar('\n');
}

int main(void)
{
	const uint32_t need = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV |
			      IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ;
	struct ibv_device_attr_ex ax;
	struct dev d;
	uint64_t general;
	uint32_t rc_caps;
	int ok = 1;

	dev_open(&d);
	ax = dev_query_ex(&d);
	general = ax.odp_caps.general_caps;
	rc_caps = ax.odp_caps.per_transport_caps.rc_odp_caps;
	printf("%s (%s): general_odp_caps 0x%" PRIx64 "%s%s\n", d.name,
	       dev_is_rxe(&d) ? "rxe" : "not rxe", general,
	       general & IBV_ODP_SUPPORT ? " ODP_SUPPORT" : "",
	       general & IBV_ODP_SUPPORT_IMPLICIT ? " ODP_SUPPORT_IMPLICIT" : "");
	print_transport_caps("rc_odp_caps", rc_caps);
	print_transport_caps("uc_odp_caps", ax.odp_caps.per_transport_caps.uc_odp_caps);
	print_transport_caps("ud_odp_caps", ax.odp_caps.per_transport_caps.ud_odp_caps);
	print_transport_caps("xrc_odp_caps", ax.xrc_odp_caps);

	if (!(general & IBV_ODP_SUPPORT)) {
		printf("explicit ODP (IBV_ODP_SUPPORT) missing\n");
		ok = 0;
	}
	if ((rc_caps & need) != need) {
		printf("RC ODP lacks some of SEND RECV WRITE READ: missing 0x%x\n", need & ~rc_caps);
		ok = 0;
	}
	if (general & IBV_ODP_SUPPORT_IMPLICIT) {
		if (dev_is_rxe(&d)) {
			printf("rxe reports implicit ODP: odpx's assumption about rxe no longer holds\n");
			ok = 0;
		} else {
			printf("note: %s has implicit ODP (not rxe)\n", d.name);
		}
	}
	dev_close(&d);
	if (!ok)
		dev_fail("unexpected ODP capabilities");
	printf("explicit ODP with RC SEND RECV WRITE READ; no implicit ODP\n");
	return 0;
}
