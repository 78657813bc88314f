/* SPDX-License-Identifier: MIT */
/*
 * dev-util.h - helpers shared by the device tests (tests/dev-*.c).  Header-only, static.
 *
 * A device test opens the RDMA device that carries the IPv4 loopback GID ::ffff:127.0.0.1
 * (Soft-RoCE rxe0 on lo in the test guest), allocates a PD, a CQ with a completion channel and
 * an RC QP connected to itself through that GID with path MTU 4096, and posts one work request
 * at a time, waiting for its completion with a deadline.
 *
 * Skips: a test exits 77 only on a specific, checked absence (no RDMA device, no device with
 * the loopback GID, a capability the test needs), after printing "SKIP: <reason>".  When
 * TEST_REQUIRE_DEVICE is set (non-empty, not "0"), as it is in the test guest, the same absence
 * is a failure: exit 1.  Every other error fails.  ODPX_DEV=<name> picks the device.
 */
#ifndef ODPX_DEV_UTIL_H
#define ODPX_DEV_UTIL_H

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>

/* ODP capability bits newer than bookworm's rdma-core 44 headers (values from later verbs.h) */
#define DEV_ODP_SUPPORT_FLUSH		(1u << 6)
#define DEV_ODP_SUPPORT_ATOMIC_WRITE	(1u << 7)

/* rdma_rxe reports this vendor id (RXE_VENDOR_ID) */
#define DEV_RXE_VENDOR_ID		0xffffff

#define DEV_WC_TIMEOUT_MS	20000	/* one work request, slow emulated guest included */
#define DEV_GID_TIMEOUT_MS	5000	/* for the loopback GID and an ACTIVE port to show up */
#define DEV_BUF_BYTES		(64 * 1024)

#define DEV_MR_ACCESS	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

struct dev {
	struct ibv_device **list;
	struct ibv_context *ctx;
	struct ibv_device_attr attr;
	struct ibv_port_attr port_attr;
	struct ibv_comp_channel *chan;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	union ibv_gid gid;
	const char *name;
	int gid_index;
	uint8_t port;
	size_t page_bytes;
	uint64_t next_wr_id;
};

static inline int dev_required(void)
{
	const char *v = getenv("TEST_REQUIRE_DEVICE");

	return v && *v && strcmp(v, "0");
}

__attribute__((noreturn, format(printf, 1, 2)))
static inline void dev_fail(const char *fmt, ...)
{
	va_list ap;

	fputs("FAIL: ", stdout);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	exit(1);
}

/* A checked absence: skip, or fail where the device is required. */
__attribute__((noreturn, format(printf, 1, 2)))
static inline void dev_skip(const char *fmt, ...)
{
	int required = dev_required();
	va_list ap;

	fputs(required ? "FAIL: " : "SKIP: ", stdout);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	if (required)
		fputs(" (TEST_REQUIRE_DEVICE is set: a missing device or capability fails)", stdout);
	putchar('\n');
	exit(required ? 1 : 77);
}

static inline int64_t dev_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline void dev_pause_ms(long ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

static inline int dev_is_loopback_gid(const union ibv_gid *gid)
{
	static const uint8_t want[16] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1 };

	return !memcmp(gid->raw, want, sizeof(want));
}

/* Scan the port's GID table for ::ffff:127.0.0.1; returns its index or -ENOENT. */
static inline int dev_find_loopback_gid(struct ibv_context *ctx, uint8_t port, int table_len,
				 union ibv_gid *gid)
{
	for (int i = 0; i < table_len; i++) {
		if (ibv_query_gid(ctx, port, i, gid))
			continue;	/* unused entries may fail to read */
		if (dev_is_loopback_gid(gid))
			return i;
	}
	return -ENOENT;
}

/*
 * Look at every device (or only $ODPX_DEV) and port for an ACTIVE port with the loopback GID,
 * retrying until DEV_GID_TIMEOUT_MS: rxe fills its GID table shortly after `rdma link add`.
 * Returns 1 and fills d->ctx, port, gid on success; 0 when none qualifies.
 */
static inline int dev_pick(struct dev *d, int ndev, char *seen, size_t seen_len)
{
	const char *want = getenv("ODPX_DEV");
	int64_t deadline = dev_now_ms() + DEV_GID_TIMEOUT_MS;

	for (;;) {
		seen[0] = '\0';
		for (int i = 0; i < ndev; i++) {
			const char *name = ibv_get_device_name(d->list[i]);
			struct ibv_context *ctx;
			struct ibv_device_attr attr;

			if (want && *want && strcmp(want, name))
				continue;
			snprintf(seen + strlen(seen), seen_len - strlen(seen), "%s%s",
				 seen[0] ? ", " : "", name);
			ctx = ibv_open_device(d->list[i]);
			if (!ctx)
				dev_fail("ibv_open_device(%s): %s", name, strerror(errno));
			if (ibv_query_device(ctx, &attr))
				dev_fail("ibv_query_device(%s) failed", name);
			for (uint8_t port = 1; port <= attr.phys_port_cnt; port++) {
				struct ibv_port_attr pa;
				int idx;

				if (ibv_query_port(ctx, port, &pa) || pa.state != IBV_PORT_ACTIVE)
					continue;
				idx = dev_find_loopback_gid(ctx, port, pa.gid_tbl_len, &d->gid);
				if (idx < 0)
					continue;
				d->ctx = ctx;
				d->attr = attr;
				d->port_attr = pa;
				d->port = port;
				d->gid_index = idx;
				d->name = name;
				return 1;
			}
			ibv_close_device(ctx);
		}
		if (dev_now_ms() >= deadline)
			return 0;
		dev_pause_ms(50);	/* poll the GID tables again: nothing to wait on */
	}
}

/* Open the device with the loopback GID and allocate a PD; skips when there is none. */
static inline void dev_open(struct dev *d)
{
	char seen[512];
	int ndev = 0;

	memset(d, 0, sizeof(*d));
	setvbuf(stdout, NULL, _IOLBF, 0);
	d->page_bytes = (size_t)sysconf(_SC_PAGESIZE);
	errno = 0;
	d->list = ibv_get_device_list(&ndev);
	if (!d->list) {
		if (errno == ENOSYS || errno == ENODEV || errno == ENOENT)
			dev_skip("no RDMA device: the kernel has no verbs support (%s)", strerror(errno));
		dev_fail("ibv_get_device_list: %s", strerror(errno));
	}
	if (ndev == 0)
		dev_skip("no RDMA device (ibv_get_device_list found none)");
	if (!dev_pick(d, ndev, seen, sizeof(seen)))
		dev_skip("no RDMA device with an ACTIVE port carrying the IPv4 loopback GID "
			 "::ffff:127.0.0.1 (devices: %s)", seen[0] ? seen : "none matching ODPX_DEV");
	d->pd = ibv_alloc_pd(d->ctx);
	if (!d->pd)
		dev_fail("ibv_alloc_pd: %s", strerror(errno));
	printf("device %s port %u: gid index %d (::ffff:127.0.0.1), active MTU %d, vendor 0x%x\n",
	       d->name, d->port, d->gid_index, 128 << d->port_attr.active_mtu, d->attr.vendor_id);
}

static inline int dev_is_rxe(const struct dev *d)
{
	return d->attr.vendor_id == DEV_RXE_VENDOR_ID;
}

static inline struct ibv_device_attr_ex dev_query_ex(const struct dev *d)
{
	struct ibv_device_attr_ex ax;
	int rc;

	memset(&ax, 0, sizeof(ax));
	rc = ibv_query_device_ex(d->ctx, NULL, &ax);
	if (rc)
		dev_fail("ibv_query_device_ex: %s", strerror(rc));
	return ax;
}

/* Skip unless the device has explicit ODP with all of rc_bits for RC. */
static inline void dev_require_odp(const struct dev *d, uint32_t rc_bits)
{
	struct ibv_device_attr_ex ax = dev_query_ex(d);

	if (!(ax.odp_caps.general_caps & IBV_ODP_SUPPORT))
		dev_skip("device %s has no ODP (general_caps 0x%" PRIx64 ")", d->name,
			 (uint64_t)ax.odp_caps.general_caps);
	if ((ax.odp_caps.per_transport_caps.rc_odp_caps & rc_bits) != rc_bits)
		dev_skip("device %s lacks RC ODP caps 0x%x (has 0x%x)", d->name, rc_bits,
			 ax.odp_caps.per_transport_caps.rc_odp_caps);
}

static inline void dev_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask,
				 const char *what)
{
	int rc = ibv_modify_qp(qp, a, mask);

	if (rc)
		dev_fail("ibv_modify_qp to %s: %s", what, strerror(rc));
}

/* CQ, completion channel and an RC QP connected to itself, path MTU 4096. */
static inline void dev_connect_self(struct dev *d)
{
	struct ibv_qp_init_attr ia;
	struct ibv_qp_attr a;

	if (d->port_attr.active_mtu < IBV_MTU_4096)
		dev_fail("port %u of %s has active MTU %d, the tests need 4096", d->port, d->name,
			 128 << d->port_attr.active_mtu);
	d->chan = ibv_create_comp_channel(d->ctx);
	if (!d->chan)
		dev_fail("ibv_create_comp_channel: %s", strerror(errno));
	d->cq = ibv_create_cq(d->ctx, 64, NULL, d->chan, 0);
	if (!d->cq)
		dev_fail("ibv_create_cq: %s", strerror(errno));

	memset(&ia, 0, sizeof(ia));
	ia.send_cq = d->cq;
	ia.recv_cq = d->cq;
	ia.qp_type = IBV_QPT_RC;
	ia.sq_sig_all = 1;
	ia.cap.max_send_wr = 16;
	ia.cap.max_recv_wr = 16;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	d->qp = ibv_create_qp(d->pd, &ia);
	if (!d->qp)
		dev_fail("ibv_create_qp(RC): %s", strerror(errno));

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = d->port;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	dev_modify_qp(d->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
		      "INIT");

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_4096;
	a.dest_qp_num = d->qp->qp_num;
	a.rq_psn = 0;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = d->gid;
	a.ah_attr.grh.sgid_index = (uint8_t)d->gid_index;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = d->port;
	dev_modify_qp(d->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
		      IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER, "RTR");

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 0;
	a.max_rd_atomic = 1;
	dev_modify_qp(d->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
		      IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC, "RTS");
	printf("RC QP 0x%x connected to itself, path MTU 4096\n", d->qp->qp_num);
}

/*
 * Wait for the next completion on d->cq until DEV_WC_TIMEOUT_MS, sleeping on the completion
 * channel in between.  Returns 0 with *wc filled, -ETIMEDOUT, or -errno.
 */
static inline int dev_wait_wc(struct dev *d, struct ibv_wc *wc)
{
	int64_t deadline = dev_now_ms() + DEV_WC_TIMEOUT_MS;

	for (;;) {
		struct pollfd pfd = { .fd = d->chan->fd, .events = POLLIN };
		struct ibv_cq *ev_cq;
		void *ev_ctx;
		int64_t left;
		int n;

		n = ibv_poll_cq(d->cq, 1, wc);
		if (n)
			return n < 0 ? -EIO : 0;
		n = ibv_req_notify_cq(d->cq, 0);
		if (n)
			return -n;
		/* a completion that arrived before the CQ was armed raises no event */
		n = ibv_poll_cq(d->cq, 1, wc);
		if (n)
			return n < 0 ? -EIO : 0;
		left = deadline - dev_now_ms();
		if (left <= 0)
			return -ETIMEDOUT;
		n = poll(&pfd, 1, (int)left);
		if (n < 0 && errno != EINTR)
			return -errno;
		if (n > 0) {
			if (ibv_get_cq_event(d->chan, &ev_cq, &ev_ctx))
				return -EIO;
			ibv_ack_cq_events(ev_cq, 1);
		}
	}
}

/*
 * Post one RDMA WRITE or READ of len bytes between laddr (in lmr) and raddr (rkey), and wait
 * for its completion.  Returns 0, or -errno after printing what went wrong (-EIO for a
 * completion with an error status).
 */
static inline int dev_rdma(struct dev *d, enum ibv_wr_opcode op, struct ibv_mr *lmr, void *laddr,
		    uint32_t len, void *raddr, uint32_t rkey)
{
	const char *what = op == IBV_WR_RDMA_WRITE ? "RDMA WRITE" : "RDMA READ";
	struct ibv_sge sge = { .addr = (uintptr_t)laddr, .length = len, .lkey = lmr->lkey };
	struct ibv_send_wr wr, *bad;
	struct ibv_wc wc;
	int rc;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = ++d->next_wr_id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = op;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = (uintptr_t)raddr;
	wr.wr.rdma.rkey = rkey;
	rc = ibv_post_send(d->qp, &wr, &bad);
	if (rc) {
		printf("%s: ibv_post_send: %s\n", what, strerror(rc));
		return -rc;
	}
	rc = dev_wait_wc(d, &wc);
	if (rc) {
		printf("%s of %u bytes: no completion: %s\n", what, len, strerror(-rc));
		return rc;
	}
	if (wc.wr_id != wr.wr_id) {
		printf("%s: completion for wr_id %" PRIu64 ", expected %" PRIu64 "\n", what,
		       wc.wr_id, wr.wr_id);
		return -EIO;
	}
	if (wc.status != IBV_WC_SUCCESS) {
		printf("%s of %u bytes: completion status %s (vendor_err 0x%x)\n", what, len,
		       ibv_wc_status_str(wc.status), wc.vendor_err);
		return -EIO;
	}
	return 0;
}

static inline struct ibv_mr *dev_reg(struct dev *d, void *addr, size_t len, int access)
{
	struct ibv_mr *mr = ibv_reg_mr(d->pd, addr, len, access);

	if (!mr)
		dev_fail("ibv_reg_mr(%p, %zu, 0x%x%s): %s", addr, len, access,
			 access & IBV_ACCESS_ON_DEMAND ? " ON_DEMAND" : "", strerror(errno));
	return mr;
}

/* Anonymous private mapping; at != NULL maps there with MAP_FIXED. */
static inline unsigned char *dev_map(size_t len, void *at)
{
	void *p = mmap(at, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | (at ? MAP_FIXED : 0), -1, 0);

	if (p == MAP_FAILED)
		dev_fail("mmap(%p, %zu): %s", at, len, strerror(errno));
	if (at && p != at)
		dev_fail("mmap(MAP_FIXED) returned %p, not %p", p, at);
	return p;
}

/* A byte stream that differs per seed, per page and per offset (xorshift32). */
static inline void dev_fill(unsigned char *p, size_t len, uint32_t seed)
{
	uint32_t x = seed * 2654435761u + 1;

	for (size_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		p[i] = (unsigned char)(x >> 11);
	}
}

/* Compare got with want; on a mismatch print where and how much, and return 0. */
static inline int dev_same(const char *what, const unsigned char *got, const unsigned char *want,
		    size_t len)
{
	size_t first = len, bad = 0;

	for (size_t i = 0; i < len; i++) {
		if (got[i] != want[i]) {
			if (first == len)
				first = i;
			bad++;
		}
	}
	if (!bad)
		return 1;
	printf("%s: %zu of %zu bytes differ, first at offset %zu (got 0x%02x, want 0x%02x)\n",
	       what, bad, len, first, got[first], want[first]);
	return 0;
}

static inline int dev_all(const unsigned char *p, size_t len, unsigned char v)
{
	for (size_t i = 0; i < len; i++)
		if (p[i] != v)
			return 0;
	return 1;
}

static inline void dev_close(struct dev *d)
{
	if (d->qp && ibv_destroy_qp(d->qp))
		dev_fail("ibv_destroy_qp failed");
	if (d->cq && ibv_destroy_cq(d->cq))
		dev_fail("ibv_destroy_cq failed");
	if (d->chan && ibv_destroy_comp_channel(d->chan))
		dev_fail("ibv_destroy_comp_channel failed");
	if (d->pd && ibv_dealloc_pd(d->pd))
		dev_fail("ibv_dealloc_pd failed");
	if (d->ctx)
		ibv_close_device(d->ctx);
	ibv_free_device_list(d->list);
	memset(d, 0, sizeof(*d));
}

/*
 * The buffers of a one-sided test: a pinned source, a destination (ODP when
 * @dst_access has IBV_ACCESS_ON_DEMAND), both page-aligned and registered,
 * the destination zeroed, and a scratch buffer for the expected bytes.
 */
struct dev_pair {
	unsigned char *src, *dst, *want;
	struct ibv_mr *src_mr, *dst_mr;
	size_t len;
};

static inline void dev_pair_setup(struct dev *d, struct dev_pair *p, size_t len, int dst_access)
{
	p->len = len;
	p->src = dev_map(len, NULL);
	p->want = dev_map(len, NULL);
	p->dst = dev_map(len, NULL);
	memset(p->dst, 0, len);
	p->src_mr = dev_reg(d, p->src, len, DEV_MR_ACCESS);
	p->dst_mr = dev_reg(d, p->dst, len, dst_access);
}

/* RDMA WRITE @seed's pattern over the whole destination and verify it arrived. */
static inline void dev_pair_write_verified(struct dev *d, struct dev_pair *p, uint32_t seed,
					   const char *what)
{
	dev_fill(p->src, p->len, seed);
	memcpy(p->want, p->src, p->len);
	if (dev_rdma(d, IBV_WR_RDMA_WRITE, p->src_mr, p->src, p->len, p->dst, p->dst_mr->rkey))
		dev_fail("%s: RDMA WRITE did not complete", what);
	if (!dev_same(what, p->dst, p->want, p->len))
		dev_fail("%s: data mismatch", what);
	printf("%s: verified\n", what);
}

/*
 * Does the device's ODP put an RDMA WRITE at an offset inside a page where it
 * belongs?  64 bytes to page+2148 of an ODP MR, over @d's QP connected to
 * itself (dev_connect_self() first): 1 they landed there, 0 at page+0 (rxe's
 * defect, tests/dev-rxe-odp-offset.c); anything else fails.
 */
static inline int dev_odp_offset_right(struct dev *d)
{
	struct dev_pair p;

	dev_pair_setup(d, &p, 2 * d->page_bytes, DEV_MR_ACCESS | IBV_ACCESS_ON_DEMAND);
	for (int i = 0; i < 64; i++)
		p.src[i] = (unsigned char)(0xa0 + i);
	if (dev_rdma(d, IBV_WR_RDMA_WRITE, p.src_mr, p.src, 64, p.dst + 2148, p.dst_mr->rkey))
		dev_fail("RDMA WRITE to page+2148 of an ODP MR did not complete");
	memset(p.want, 0, p.len);
	memcpy(p.want + 2148, p.src, 64);
	int right = !memcmp(p.dst, p.want, p.len);
	memset(p.want, 0, p.len);
	memcpy(p.want, p.src, 64);
	if (!right && memcmp(p.dst, p.want, p.len))
		dev_fail("64 bytes written to page+2148 of an ODP MR landed neither there nor at "
			 "page+0");
	ibv_dereg_mr(p.dst_mr);
	ibv_dereg_mr(p.src_mr);
	printf("the device's ODP puts a write at page+2148 %s\n", right ? "there" : "at page+0");
	return right;
}

#endif /* ODPX_DEV_UTIL_H */
