// SPDX-License-Identifier: MIT
/*
 * verbs_selftest.c - does the device's ODP move the right bytes?  A device
 * can advertise ODP and still misplace data: Soft-RoCE's ODP copy ignores
 * the offset within a page, so every transfer that does not start on a page
 * boundary lands at the page's start.  Before mode auto picks an ODP mode,
 * one RDMA WRITE through an RC QP connected to itself puts 64 bytes at an
 * offset inside a page of an ODP MR, and the bytes are checked.  Once per
 * device and process; the result is kept by device name.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "backend_verbs.h"

#define CHECK_OFFSET	2148	/* inside the first page, not a multiple of any packet size */
#define CHECK_BYTES	64
#define CHECK_WAIT_NS	(3 * 1000000000LL)
#define SEEN_MAX	16

static struct {
	char name[IBV_SYSFS_NAME_MAX];
	bool bad;
	char text[sizeof(((struct mode_caps *)0)->odp_check)];
} seen[SEEN_MAX];
static unsigned nseen;
static pthread_mutex_t seen_lock = PTHREAD_MUTEX_INITIALIZER;

struct rig {
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *src_mr, *dst_mr;
	unsigned char *mem;	/* two pages of source, two of destination */
};

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* An active port, and the address that reaches it from itself (a GID on RoCE). */
static int pick_port(struct ibv_context *vc, struct ibv_ah_attr *ah, enum ibv_mtu *mtu)
{
	struct ibv_device_attr da;
	struct ibv_port_attr pa;

	if (ibv_query_device(vc, &da))
		return -EIO;
	for (uint8_t p = 1; p <= da.phys_port_cnt; p++) {
		if (ibv_query_port(vc, p, &pa) || pa.state != IBV_PORT_ACTIVE)
			continue;
		memset(ah, 0, sizeof(*ah));
		ah->port_num = p;
		*mtu = pa.active_mtu;
		if (pa.link_layer != IBV_LINK_LAYER_ETHERNET) {
			ah->dlid = pa.lid;
			return 0;
		}
		int found = -1;
		for (int i = 0; i < pa.gid_tbl_len && i < 256; i++) {
			union ibv_gid g;
			static const uint8_t v4[12] = { [10] = 0xff, [11] = 0xff };

			if (ibv_query_gid(vc, p, i, &g) || !(g.global.subnet_prefix | g.global.interface_id))
				continue;
			if (found < 0 || !memcmp(g.raw, v4, sizeof(v4))) {
				found = i;
				ah->grh.dgid = g;
			}
			if (!memcmp(g.raw, v4, sizeof(v4)))
				break;	/* an IPv4-mapped GID: RoCE v2, routable to itself */
		}
		if (found < 0)
			continue;
		ah->is_global = 1;
		ah->grh.sgid_index = (uint8_t)found;
		ah->grh.hop_limit = 64;
		return 0;
	}
	return -ENODEV;
}

static int connect_self(struct rig *g, const struct ibv_ah_attr *ah, enum ibv_mtu mtu)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = ah->port_num,
				 .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE };

	if (ibv_modify_qp(g->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			  IBV_QP_ACCESS_FLAGS))
		return -EIO;
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTR, .path_mtu = mtu,
				  .dest_qp_num = g->qp->qp_num, .max_dest_rd_atomic = 1,
				  .min_rnr_timer = 12, .ah_attr = *ah };
	if (ibv_modify_qp(g->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		return -EIO;
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7,
				  .rnr_retry = 7, .max_rd_atomic = 1 };
	if (ibv_modify_qp(g->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		return -EIO;
	return 0;
}

/* The write, and its completion: 0, or a phrase saying why the test did not run. */
static const char *write_once(struct ibv_pd *pd, struct rig *g, size_t page)
{
	struct ibv_qp_init_attr qa = { .qp_type = IBV_QPT_RC, .sq_sig_all = 1,
				       .cap = { .max_send_wr = 1, .max_recv_wr = 1,
						.max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_ah_attr ah;
	enum ibv_mtu mtu;
	struct ibv_wc wc;
	int n = 0;

	if (pick_port(pd->context, &ah, &mtu))
		return "no active port with an address";
	if (!(g->cq = ibv_create_cq(pd->context, 2, NULL, NULL, 0)))
		return "ibv_create_cq failed";
	qa.send_cq = qa.recv_cq = g->cq;
	if (!(g->qp = ibv_create_qp(pd, &qa)))
		return "ibv_create_qp(RC) failed";
	if (connect_self(g, &ah, mtu))
		return "the QP did not connect to itself";
	g->mem = mmap(NULL, 4 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (g->mem == MAP_FAILED) {
		g->mem = NULL;
		return "no memory";
	}
	for (int i = 0; i < CHECK_BYTES; i++)
		g->mem[i] = (unsigned char)(0xa0 + i);
	g->src_mr = ibv_reg_mr(pd, g->mem, 2 * page, IBV_ACCESS_LOCAL_WRITE);
	g->dst_mr = ibv_reg_mr(pd, g->mem + 2 * page, 2 * page, IBV_ACCESS_ON_DEMAND |
			       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!g->src_mr || !g->dst_mr)
		return "an MR was refused";

	struct ibv_sge sge = { .addr = (uintptr_t)g->mem, .length = CHECK_BYTES,
			       .lkey = g->src_mr->lkey };
	struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				  .wr.rdma = { (uintptr_t)(g->mem + 2 * page + CHECK_OFFSET),
					       g->dst_mr->rkey } }, *bad;
	if (ibv_post_send(g->qp, &wr, &bad))
		return "ibv_post_send failed";
	for (int64_t end = now_ns() + CHECK_WAIT_NS; !n && now_ns() < end;) {
		struct timespec nap = { 0, 100000 };

		if ((n = ibv_poll_cq(g->cq, 1, &wc)) == 0)
			nanosleep(&nap, NULL);
	}
	if (n <= 0)
		return "no completion in 3 s";
	return wc.status == IBV_WC_SUCCESS ? NULL : "the write completed in error";
}

/* Run it on @pd: the finding into @c (odp_bad, odp_check). */
static void run(struct ibv_pd *pd, struct mode_caps *c)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	struct rig g = { 0 };
	const char *why = write_once(pd, &g, page);

	if (why) {
		snprintf(c->odp_check, sizeof(c->odp_check), "ODP self-test not run: %s", why);
	} else {
		const unsigned char *dst = g.mem + 2 * page;
		bool right = !memcmp(dst + CHECK_OFFSET, g.mem, CHECK_BYTES);

		for (size_t i = 0; right && i < 2 * page; i++)
			right = dst[i] == 0 || (i >= CHECK_OFFSET && i < CHECK_OFFSET + CHECK_BYTES);
		c->odp_bad = !right;
		if (!right)
			snprintf(c->odp_check, sizeof(c->odp_check),
				 "a %d-byte write at page offset %d %s", CHECK_BYTES, CHECK_OFFSET,
				 !memcmp(dst, g.mem, CHECK_BYTES) ? "landed at offset 0" :
				 "moved wrong bytes");
	}
	if (g.dst_mr)
		ibv_dereg_mr(g.dst_mr);
	if (g.src_mr)
		ibv_dereg_mr(g.src_mr);
	if (g.qp)
		ibv_destroy_qp(g.qp);
	if (g.cq)
		ibv_destroy_cq(g.cq);
	if (g.mem)
		munmap(g.mem, 4 * page);
}

void verbs_odp_selftest(struct ibv_pd *pd, struct mode_caps *c)
{
	const char *name = ibv_get_device_name(pd->context->device);
	unsigned i;

	pthread_mutex_lock(&seen_lock);
	for (i = 0; i < nseen && strcmp(seen[i].name, name ? name : ""); i++)
		;
	if (i == nseen) {
		run(pd, c);
		if (nseen < SEEN_MAX && !strstr(c->odp_check, "not run")) {
			snprintf(seen[nseen].name, sizeof(seen[nseen].name), "%s", name ? name : "");
			seen[nseen].bad = c->odp_bad;
			memcpy(seen[nseen].text, c->odp_check, sizeof(seen[nseen].text));
			nseen++;
		}
	} else {
		c->odp_bad = seen[i].bad;
		memcpy(c->odp_check, seen[i].text, sizeof(c->odp_check));
	}
	pthread_mutex_unlock(&seen_lock);
}
