// SPDX-License-Identifier: MIT
/*
 * verbs_selftest.c - does the device's ODP move the right bytes?  A device
 * can advertise ODP and still misplace data: Soft-RoCE's ODP copy ignores
 * the offset within a page, so a transfer that does not start on a page
 * boundary lands at the page's start.  Before mode auto picks an ODP mode,
 * one RDMA WRITE through an RC QP connected to itself puts 64 bytes at an
 * offset inside a page of an ODP MR, and the bytes are checked.
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
#define CHECK_WAIT_S	3
#define SEEN_MAX	16

/*
 * The findings, one per device and process, keyed by the struct ibv_device
 * that libibverbs keeps for the process's lifetime.  seen_lock guards the
 * table; it is held only to look up and to add, never while a test runs, so
 * a fork during a test leaves it free for the child, which keeps the table.
 * Two first opens of one device at once both run the test; the first to
 * finish adds its finding.
 */
static struct {
	const struct ibv_device *dev;
	bool bad;
	char text[sizeof(((struct mode_caps *)0)->odp_check)];
} seen[SEEN_MAX];
static unsigned nseen;
static pthread_mutex_t seen_lock = PTHREAD_MUTEX_INITIALIZER;

/* What one test allocates; run() frees all of it on every path. */
struct rig {
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *src_mr, *dst_mr;
	unsigned char *mem;	/* two pages of source, two of destination */
	char why[72];		/* why it did not run */
};

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* A valid GID of @port's table: an IPv4-mapped RoCE v2 one if any. */
static int pick_gid(struct ibv_context *vc, uint8_t port, int len, union ibv_gid *gid)
{
	static const uint8_t v4[12] = { [10] = 0xff, [11] = 0xff };
	int best = -1, best_score = -1;

	for (int i = 0; i < len && i < 256 && best_score < 3; i++) {
		struct ibv_gid_entry e = { .gid_type = IBV_GID_TYPE_ROCE_V1 };
		int score;

		/* the type where the kernel tells it; empty entries fail or read as zero */
		if (ibv_query_gid_ex(vc, port, (uint32_t)i, &e, 0) &&
		    ibv_query_gid(vc, port, i, &e.gid))
			continue;
		if (!(e.gid.global.subnet_prefix | e.gid.global.interface_id))
			continue;
		score = 2 * !memcmp(e.gid.raw, v4, sizeof(v4)) + (e.gid_type == IBV_GID_TYPE_ROCE_V2);
		if (score > best_score) {
			best = i;
			best_score = score;
			*gid = e.gid;
		}
	}
	return best;
}

/* The first active port, and the address that reaches it from itself. */
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
		int idx = pick_gid(vc, p, pa.gid_tbl_len, &ah->grh.dgid);
		if (idx < 0)
			return -ENOENT;
		ah->is_global = 1;
		ah->grh.sgid_index = (uint8_t)idx;
		ah->grh.hop_limit = 64;
		return 0;
	}
	return -ENODEV;
}

static int connect_self(struct ibv_qp *qp, const struct ibv_ah_attr *ah, enum ibv_mtu mtu)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = ah->port_num,
				 .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE };
	int r;

	if ((r = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			       IBV_QP_ACCESS_FLAGS)))
		return r;
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTR, .path_mtu = mtu,
				  .dest_qp_num = qp->qp_num, .max_dest_rd_atomic = 1,
				  .min_rnr_timer = 12, .ah_attr = *ah };
	if ((r = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			       IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			       IBV_QP_MIN_RNR_TIMER)))
		return r;
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7,
				  .rnr_retry = 7, .max_rd_atomic = 1 };
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			     IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

/* @g->why from a verbs failure: "@what: <strerror>". */
static int not_run(struct rig *g, const char *what, int rc)
{
	snprintf(g->why, sizeof(g->why), "%s: %s", what, strerror(-mode_verbs_err(rc, errno)));
	return -1;
}

/* The write and its completion: 0, or -1 with @g->why saying why it did not run. */
static int write_once(struct ibv_pd *pd, struct rig *g, size_t page)
{
	struct ibv_qp_init_attr qa = { .qp_type = IBV_QPT_RC, .sq_sig_all = 1,
				       .cap = { .max_send_wr = 1, .max_recv_wr = 1,
						.max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_ah_attr ah;
	enum ibv_mtu mtu;
	struct ibv_wc wc;
	int n = 0, r;

	if ((r = pick_port(pd->context, &ah, &mtu)) < 0)
		return snprintf(g->why, sizeof(g->why), "%s", r == -ENOENT ?
				"the active port has no valid GID" : r == -ENODEV ?
				"no active port" : "ibv_query_device failed"), -1;
	if (!(g->cq = ibv_create_cq(pd->context, 2, NULL, NULL, 0)))
		return not_run(g, "ibv_create_cq", -1);
	qa.send_cq = qa.recv_cq = g->cq;
	if (!(g->qp = ibv_create_qp(pd, &qa)))
		return not_run(g, "ibv_create_qp(RC)", -1);
	if ((r = connect_self(g->qp, &ah, mtu)))
		return not_run(g, "connecting the QP to itself", r);
	g->mem = mmap(NULL, 4 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (g->mem == MAP_FAILED) {
		g->mem = NULL;
		return not_run(g, "mmap", -1);
	}
	for (int i = 0; i < CHECK_BYTES; i++)
		g->mem[i] = (unsigned char)(0xa0 + i);	/* no zero byte */
	if (!(g->src_mr = ibv_reg_mr(pd, g->mem, 2 * page, IBV_ACCESS_LOCAL_WRITE)))
		return not_run(g, "ibv_reg_mr(source)", -1);
	/* the destination is never touched before the write: the device faults it in */
	if (!(g->dst_mr = ibv_reg_mr(pd, g->mem + 2 * page, 2 * page, IBV_ACCESS_ON_DEMAND |
				     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)))
		return not_run(g, "ibv_reg_mr(ODP)", -1);

	struct ibv_sge sge = { .addr = (uintptr_t)g->mem, .length = CHECK_BYTES,
			       .lkey = g->src_mr->lkey };
	struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				  .wr.rdma = { (uintptr_t)(g->mem + 2 * page + CHECK_OFFSET),
					       g->dst_mr->rkey } }, *bad;
	if ((r = ibv_post_send(g->qp, &wr, &bad)))
		return not_run(g, "ibv_post_send", r);
	for (int64_t end = now_ns() + CHECK_WAIT_S * 1000000000LL; !n && now_ns() < end;) {
		struct timespec nap = { 0, 50000 };

		if ((n = ibv_poll_cq(g->cq, 1, &wc)) == 0)
			nanosleep(&nap, NULL);
	}
	if (n < 0)
		return not_run(g, "ibv_poll_cq", n);
	if (n == 0)
		return snprintf(g->why, sizeof(g->why), "no completion in %d s", CHECK_WAIT_S), -1;
	if (wc.status != IBV_WC_SUCCESS)
		return snprintf(g->why, sizeof(g->why), "the write completed with %s",
				ibv_wc_status_str(wc.status)), -1;
	return 0;
}

/* Compare: "" where the bytes are right, else where they landed, into @out. */
static void judge(const unsigned char *src, const unsigned char *dst, size_t len, char *out,
		  size_t outlen)
{
	const unsigned char *at = memmem(dst, len, src, CHECK_BYTES);
	bool right = at == dst + CHECK_OFFSET;

	for (size_t i = 0; right && i < len; i++)
		right = dst[i] == 0 || (i >= CHECK_OFFSET && i < CHECK_OFFSET + CHECK_BYTES);
	if (right)
		out[0] = '\0';
	else if (at)
		snprintf(out, outlen, "a %d-byte write at page offset %d landed at offset %zu",
			 CHECK_BYTES, CHECK_OFFSET, (size_t)(at - dst));
	else
		snprintf(out, outlen, "a %d-byte write at page offset %d left other bytes there",
			 CHECK_BYTES, CHECK_OFFSET);
}

/* Run it on @pd: the finding into @bad and @text (see struct mode_caps). */
static void run(struct ibv_pd *pd, bool *bad, char *text, size_t len)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	struct rig g = { 0 };

	*bad = false;
	if (write_once(pd, &g, page) < 0) {
		snprintf(text, len, "ODP self-test not run: %s", g.why);
	} else {
		judge(g.mem, g.mem + 2 * page, 2 * page, text, len);
		*bad = text[0] != '\0';
	}
	/* the QP first: nothing may still be moving into the MRs or the pages */
	if (g.qp)
		ibv_destroy_qp(g.qp);
	if (g.cq)
		ibv_destroy_cq(g.cq);
	if (g.dst_mr)
		ibv_dereg_mr(g.dst_mr);
	if (g.src_mr)
		ibv_dereg_mr(g.src_mr);
	if (g.mem)
		munmap(g.mem, 4 * page);
}

/* The finding for @dev, if kept: true and @c filled.  Under seen_lock. */
static bool lookup(const struct ibv_device *dev, struct mode_caps *c)
{
	for (unsigned i = 0; i < nseen; i++) {
		if (seen[i].dev == dev) {
			c->odp_bad = seen[i].bad;
			memcpy(c->odp_check, seen[i].text, sizeof(c->odp_check));
			return true;
		}
	}
	return false;
}

void verbs_odp_selftest(struct ibv_pd *pd, struct mode_caps *c)
{
	const struct ibv_device *dev = pd->context->device;
	bool bad, kept;
	char text[sizeof(c->odp_check)];

	pthread_mutex_lock(&seen_lock);
	kept = lookup(dev, c);
	pthread_mutex_unlock(&seen_lock);
	if (kept)
		return;
	run(pd, &bad, text, sizeof(text));
	pthread_mutex_lock(&seen_lock);
	if (!lookup(dev, c)) {	/* else another open's finding came first: one answer */
		c->odp_bad = bad;
		memcpy(c->odp_check, text, sizeof(c->odp_check));
		if (nseen < SEEN_MAX) {
			seen[nseen].dev = dev;
			seen[nseen].bad = bad;
			memcpy(seen[nseen].text, text, sizeof(text));
			nseen++;
		}
	}
	pthread_mutex_unlock(&seen_lock);
}
