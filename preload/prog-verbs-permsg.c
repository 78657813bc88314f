// SPDX-License-Identifier: MIT
/*
 * verbs-permsg - a plain verbs program that registers per message, as an MPI
 * library does with its registration cache off.  It knows nothing of odpx:
 * the drop-in (libodpx-preload.so) is tested and measured with it.
 *
 *   verbs-permsg [-d DEV] [-g GIDIDX] [-s | -c HOST] CMD [ARGS]
 *
 * Two RC QPs connected to each other over the GID ::ffff:127.0.0.1 (rxe0 on lo),
 * or with -s / -c HOST to the QP of another verbs-permsg over TCP port 18515
 * (-g then names the GID to use: rxe on eth0 between two guests).  The
 * server (-s) registers the target buffer and waits for the client to end.
 *
 * CMD (the client's, or the lone process's):
 *   xfer ITER SIZE   per iteration: fill a reused buffer, ibv_reg_mr it, RDMA
 *                    WRITE it into the target, clear it, RDMA READ the target
 *                    back into it, check every byte, ibv_dereg_mr
 *   bench SIZE N     ns per ibv_reg_mr + ibv_dereg_mr pair of a reused buffer:
 *                    one line "pair size=S n=N median_ns=M p99_ns=P"
 *   stale KIND       register, move data, deregister; replace the memory at
 *                    the same address by KIND (munmap, fixed, dontneed,
 *                    mremap, free: posix_memalign and free); register again and
 *                    move data both ways.
 *                    Prints "stale KIND: ok", or "stale KIND: STALE ..." and
 *                    exits 3 when the device used the old pages
 *   remote           register with REMOTE_WRITE, check a WRITE through its
 *                    rkey lands, deregister, WRITE through the old rkey again:
 *                    prints "remote: rejected, memory untouched" (exit 0),
 *                    "remote: accepted, memory written" (exit 4), anything
 *                    else fails (exit 1)
 * Exit 1 on any error, with one line saying what.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#define PORT 18515
#define WC_TIMEOUT_MS 30000
#define TARGET_BYTES (1u << 20)
#define ACC_TARGET (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_qp *qp, *qp_resp;	/* requester; responder when alone */
static union ibv_gid gid;
static int gid_index = -1;
static uint8_t port = 1;
static enum ibv_mtu mtu;
static uint64_t wr_id;
/* where the WRITEs and READs go: the peer's target, or our own */
static uint64_t peer_addr;
static uint32_t peer_rkey;

__attribute__((noreturn, format(printf, 1, 2))) static void die(const char *fmt, ...)
{
	va_list ap;

	fputs("verbs-permsg: ", stdout);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	exit(1);
}

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static const uint8_t loopback[16] = { [10] = 0xff, [11] = 0xff, 127, 0, 0, 1 };

static void open_dev(const char *name)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);

	if (!list || !n)
		die("no RDMA device");
	for (int i = 0; i < n && !ctx; i++) {
		if (name && strcmp(ibv_get_device_name(list[i]), name))
			continue;
		struct ibv_context *c = ibv_open_device(list[i]);
		struct ibv_port_attr pa;
		if (!c)
			continue;
		if (ibv_query_port(c, port, &pa) || pa.state != IBV_PORT_ACTIVE) {
			ibv_close_device(c);
			continue;
		}
		mtu = pa.active_mtu;
		if (gid_index >= 0) {
			if (!ibv_query_gid(c, port, gid_index, &gid))
				ctx = c;
		} else {
			for (int g = 0; g < pa.gid_tbl_len && !ctx; g++)
				if (!ibv_query_gid(c, port, g, &gid) && !memcmp(gid.raw, loopback, 16)) {
					gid_index = g;
					ctx = c;
				}
		}
		if (!ctx)
			ibv_close_device(c);
	}
	ibv_free_device_list(list);
	if (!ctx)
		die("no ACTIVE device port with %s", gid_index >= 0 ? "that GID index" :
		    "the GID ::ffff:127.0.0.1");
	if (!(pd = ibv_alloc_pd(ctx)) || !(cq = ibv_create_cq(ctx, 16, NULL, NULL, 0)))
		die("ibv_alloc_pd/ibv_create_cq: %s", strerror(errno));
	struct ibv_qp_init_attr qa = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	if (!(qp = ibv_create_qp(pd, &qa)) || !(qp_resp = ibv_create_qp(pd, &qa)))
		die("ibv_create_qp: %s", strerror(errno));
}

static void modify(struct ibv_qp *q, struct ibv_qp_attr *a, int mask, const char *what)
{
	int r = ibv_modify_qp(q, a, mask);

	if (r)
		die("ibv_modify_qp to %s: %s", what, strerror(r));
}

static void connect_qp(struct ibv_qp *q, uint32_t dqpn, const union ibv_gid *dgid)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = port,
				 .qp_access_flags = ACC_TARGET };

	modify(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, "INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	/*
	 * the port's: rxe on lo has 4096, and an ODP MR on rxe takes each
	 * packet at the start of its page (dev-rxe-odp-offset)
	 */
	a.path_mtu = mtu;
	a.dest_qp_num = dqpn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *dgid;
	a.ah_attr.grh.sgid_index = (uint8_t)gid_index;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = port;
	modify(q, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
	       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER, "RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	modify(q, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
	       IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC, "RTS");
}

/* One RDMA WRITE or READ between [buf, +len) under @lkey and @raddr (@len 0: no SGE). */
static enum ibv_wc_status rdma(enum ibv_wr_opcode op, void *buf, size_t len, uint32_t lkey,
			       uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = (uint32_t)len, .lkey = lkey };
	struct ibv_send_wr wr = { .wr_id = ++wr_id, .sg_list = &sge, .num_sge = len > 0,
				  .opcode = op, .send_flags = IBV_SEND_SIGNALED }, *bad;
	struct ibv_wc wc;
	int64_t end = now_ns() + WC_TIMEOUT_MS * 1000000LL;
	int r;

	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	if ((r = ibv_post_send(qp, &wr, &bad)))
		die("ibv_post_send: %s", strerror(r));
	while ((r = ibv_poll_cq(cq, 1, &wc)) == 0)
		if (now_ns() > end)
			die("no completion after %d ms", WC_TIMEOUT_MS);
	if (r < 0)
		die("ibv_poll_cq failed");
	return wc.status;
}

static void must(enum ibv_wc_status st, const char *what)
{
	if (st != IBV_WC_SUCCESS)
		die("%s: completion %s", what, ibv_wc_status_str(st));
}

static struct ibv_mr *reg(void *p, size_t len, int access)
{
	struct ibv_mr *mr = ibv_reg_mr(pd, p, len, access);

	if (!mr)
		die("ibv_reg_mr(%p, %zu, %#x): %s", p, len, access, strerror(errno));
	return mr;
}

static void dereg(struct ibv_mr *mr)
{
	int r = ibv_dereg_mr(mr);

	if (r)
		die("ibv_dereg_mr: %s", strerror(r));
}

static void *map_at(void *want, size_t len)
{
	int fixed = want ? MAP_FIXED_NOREPLACE : 0;
	void *p = mmap(want, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | fixed, -1, 0);

	if (p == MAP_FAILED || (want && p != want))
		die("mmap at %p: %s", want, p == MAP_FAILED ? strerror(errno) : "elsewhere");
	return p;
}

/* the first byte of [p, +len) that is not @v, or -1 */
static long differs(const void *p, size_t len, uint8_t v)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < len; i++)
		if (b[i] != v)
			return (long)i;
	return -1;
}

/* ---- commands ---- */

static int cmd_xfer(long iter, size_t size)
{
	uint8_t *buf = map_at(NULL, size);

	for (long i = 0; i < iter; i++) {
		uint8_t v = (uint8_t)(i * 7 + 1);
		memset(buf, v, size);
		struct ibv_mr *mr = reg(buf, size, IBV_ACCESS_LOCAL_WRITE);
		must(rdma(IBV_WR_RDMA_WRITE, buf, size, mr->lkey, peer_addr, peer_rkey), "WRITE");
		memset(buf, 0, size);
		must(rdma(IBV_WR_RDMA_READ, buf, size, mr->lkey, peer_addr, peer_rkey), "READ");
		long at = differs(buf, size, v);
		if (at >= 0)
			die("iteration %ld: byte %ld is %#x, want %#x", i, at, buf[at], v);
		dereg(mr);
	}
	printf("xfer iterations=%ld size=%zu: every byte back\n", iter, size);
	return 0;
}

static int cmp64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

static int cmd_bench(size_t size, long n)
{
	uint8_t *buf = map_at(NULL, size);
	int64_t *t = calloc((size_t)n, sizeof(*t));

	if (!t)
		die("out of memory");
	memset(buf, 1, size);
	for (long i = -3; i < n; i++) {	/* 3 warm-up pairs */
		int64_t t0 = now_ns();
		struct ibv_mr *mr = reg(buf, size, IBV_ACCESS_LOCAL_WRITE);
		dereg(mr);
		if (i >= 0)
			t[i] = now_ns() - t0;
	}
	qsort(t, (size_t)n, sizeof(*t), cmp64);
	printf("pair size=%zu n=%ld median_ns=%" PRId64 " p99_ns=%" PRId64 "\n", size, n,
	       t[n / 2], t[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1]);
	return 0;
}

#define STALE_BYTES (256u << 10)	/* above malloc's mmap threshold: free() unmaps it */

static int cmd_stale(const char *kind)
{
	size_t len = STALE_BYTES;
	uint8_t *a;

	if (!strcmp(kind, "free")) {
		/* page-aligned (rxe's ODP, above), and mapped by malloc: free() unmaps it */
		mallopt(M_MMAP_THRESHOLD, 128 << 10);
		if (posix_memalign((void **)&a, 4096, len))
			a = NULL;
	} else {
		a = map_at(NULL, len);
	}
	if (!a)
		die("malloc: out of memory");
	/* old contents reach the target through a registration, which is then dropped */
	memset(a, 0xaa, len);
	struct ibv_mr *mr = reg(a, len, IBV_ACCESS_LOCAL_WRITE);
	must(rdma(IBV_WR_RDMA_WRITE, a, len, mr->lkey, peer_addr, peer_rkey), "first WRITE");
	/*
	 * rxe may still be resending that WRITE's packets after its completion:
	 * a retransmit timer that fired while the ACK was on its way (a loaded
	 * TCG host) restarts the send queue at the WRITE.  Over an ODP MR such a
	 * resend reads the buffer again, and faults with EFAULT if it comes while
	 * the range below is unmapped; the QP then goes to the error state and
	 * the second WRITE is flushed.  A zero-length WRITE behind it completes
	 * only after the requester has passed every packet of the first one.
	 */
	must(rdma(IBV_WR_RDMA_WRITE, NULL, 0, 0, peer_addr, peer_rkey), "drain WRITE");
	dereg(mr);

	if (!strcmp(kind, "munmap")) {
		munmap(a, len);
		map_at(a, len);
	} else if (!strcmp(kind, "fixed")) {
		if (mmap(a, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
			 -1, 0) != a)
			die("mmap MAP_FIXED: %s", strerror(errno));
	} else if (!strcmp(kind, "dontneed")) {
		if (madvise(a, len, MADV_DONTNEED))
			die("madvise: %s", strerror(errno));
	} else if (!strcmp(kind, "mremap")) {
		void *away = map_at(NULL, len);
		if (mremap(a, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, away) != away)
			die("mremap: %s", strerror(errno));
		map_at(a, len);
	} else if (!strcmp(kind, "free")) {
		uintptr_t was = (uintptr_t)a;
		free(a);
		uint8_t *b = NULL;
		if (posix_memalign((void **)&b, 4096, len) || (uintptr_t)b != was)
			die("malloc after free gave %p, not %#lx again", (void *)b, (unsigned long)was);
		a = b;
	} else {
		die("unknown stale kind '%s' (munmap, fixed, dontneed, mremap, free)", kind);
	}
	memset(a, 0x55, len);
	mr = reg(a, len, IBV_ACCESS_LOCAL_WRITE);
	/* the device reads the new memory ... */
	must(rdma(IBV_WR_RDMA_WRITE, a, len, mr->lkey, peer_addr, peer_rkey), "second WRITE");
	/* ... and writes it: read the target back over a fresh pattern of ours */
	uint8_t *check = map_at(NULL, len);	/* page-aligned, as rxe's ODP needs */
	struct ibv_mr *cmr = reg(check, len, IBV_ACCESS_LOCAL_WRITE);
	must(rdma(IBV_WR_RDMA_READ, check, len, cmr->lkey, peer_addr, peer_rkey), "check READ");
	long out = differs(check, len, 0x55);
	memset(check, 0x77, len);
	must(rdma(IBV_WR_RDMA_WRITE, check, len, cmr->lkey, peer_addr, peer_rkey), "check WRITE");
	must(rdma(IBV_WR_RDMA_READ, a, len, mr->lkey, peer_addr, peer_rkey), "READ into it");
	long in = differs(a, len, 0x77);
	dereg(cmr);
	dereg(mr);
	if (out >= 0 || in >= 0) {
		printf("stale %s: STALE: the device read %s and wrote %s\n", kind,
		       out >= 0 ? "the old pages" : "the new pages",
		       in >= 0 ? "the old pages (the new ones never saw it)" : "the new pages");
		return 3;
	}
	printf("stale %s: ok: the device read and wrote the new pages\n", kind);
	return 0;
}

static int cmd_remote(void)
{
	size_t len = 64 << 10;
	uint8_t *v = map_at(NULL, len), *s = map_at(NULL, len);
	struct ibv_mr *smr = reg(s, len, IBV_ACCESS_LOCAL_WRITE);

	memset(v, 0x11, len);
	memset(s, 0x22, len);
	struct ibv_mr *mr = reg(v, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	uint32_t rkey = mr->rkey;
	must(rdma(IBV_WR_RDMA_WRITE, s, len, smr->lkey, (uintptr_t)v, rkey), "WRITE before dereg");
	if (differs(v, len, 0x22) >= 0)
		die("the WRITE through the live rkey did not land");
	memset(v, 0x11, len);
	dereg(mr);
	memset(s, 0x33, len);
	enum ibv_wc_status st = rdma(IBV_WR_RDMA_WRITE, s, len, smr->lkey, (uintptr_t)v, rkey);
	bool untouched = differs(v, len, 0x11) < 0, written = differs(v, len, 0x33) < 0;
	if (st == IBV_WC_REM_ACCESS_ERR && untouched) {
		printf("remote: rejected, memory untouched (%s)\n", ibv_wc_status_str(st));
		return 0;
	}
	if (st == IBV_WC_SUCCESS && written) {
		printf("remote: accepted, memory written\n");
		return 4;
	}
	printf("remote: completion %s, memory %s\n", ibv_wc_status_str(st),
	       untouched ? "untouched" : written ? "written" : "partly written");
	return 1;
}

/* ---- connection ---- */

struct hello {
	uint32_t qpn, rkey;
	uint64_t addr;
	uint8_t gid[16];
};

static int tcp(const char *host)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(PORT) };
	int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0)
		die("socket: %s", strerror(errno));
	if (!host) {
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, 1))
			die("bind/listen port %d: %s", PORT, strerror(errno));
		int c = accept(fd, NULL, NULL);
		close(fd);
		if (c < 0)
			die("accept: %s", strerror(errno));
		return c;
	}
	if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
		die("%s: not an IPv4 address", host);
	for (int i = 0; connect(fd, (struct sockaddr *)&sa, sizeof(sa)); i++) {
		if (i == 300)
			die("connect %s:%d: %s", host, PORT, strerror(errno));
		close(fd);
		usleep(100000);	/* the server is starting: try again, 30 s in all */
		fd = socket(AF_INET, SOCK_STREAM, 0);
	}
	return fd;
}

static void xchg(int fd, const struct hello *mine, struct hello *theirs)
{
	if (write(fd, mine, sizeof(*mine)) != sizeof(*mine) ||
	    recv(fd, theirs, sizeof(*theirs), MSG_WAITALL) != sizeof(*theirs))
		die("exchange with the peer failed");
}

int main(int argc, char **argv)
{
	const char *dev = NULL, *host = NULL;
	int server = 0, opt;

	while ((opt = getopt(argc, argv, "d:g:sc:")) != -1) {
		switch (opt) {
		case 'd': dev = optarg; break;
		case 'g': gid_index = atoi(optarg); break;
		case 's': server = 1; break;
		case 'c': host = optarg; break;
		default: die("usage: verbs-permsg [-d DEV] [-g GIDIDX] [-s | -c HOST] CMD [ARGS]");
		}
	}
	if (!server && optind >= argc)
		die("usage: verbs-permsg [-d DEV] [-g GIDIDX] [-s | -c HOST] CMD [ARGS]");
	open_dev(dev);
	/* the target: registered once, for the whole run */
	uint8_t *target = map_at(NULL, TARGET_BYTES);
	struct ibv_mr *tmr = reg(target, TARGET_BYTES, ACC_TARGET);
	struct hello mine = { .qpn = qp->qp_num, .rkey = tmr->rkey, .addr = (uintptr_t)target }, peer;
	memcpy(mine.gid, gid.raw, 16);
	int fd = -1;
	if (server || host) {
		fd = tcp(server ? NULL : host);
		xchg(fd, &mine, &peer);
	} else {
		peer = mine;
	}
	union ibv_gid dgid;
	memcpy(dgid.raw, peer.gid, 16);
	if (fd < 0) {
		/*
		 * alone: two QPs, so that a remote access error ends in the
		 * requester's completion, not in a flush of a QP that is both
		 */
		peer.qpn = qp_resp->qp_num;
		connect_qp(qp_resp, qp->qp_num, &gid);
	}
	connect_qp(qp, peer.qpn, &dgid);
	peer_addr = peer.addr;
	peer_rkey = peer.rkey;
	if (server) {
		char done;
		/* the client writes one byte when it is finished with our target */
		if (recv(fd, &done, 1, MSG_WAITALL) != 1)
			die("the client went away");
		printf("server: client done\n");
		return 0;
	}
	const char *cmd = argv[optind];
	int rc;
	if (!strcmp(cmd, "xfer") && optind + 2 < argc)
		rc = cmd_xfer(atol(argv[optind + 1]), (size_t)atol(argv[optind + 2]));
	else if (!strcmp(cmd, "bench") && optind + 2 < argc)
		rc = cmd_bench((size_t)atol(argv[optind + 1]), atol(argv[optind + 2]));
	else if (!strcmp(cmd, "stale") && optind + 1 < argc)
		rc = cmd_stale(argv[optind + 1]);
	else if (!strcmp(cmd, "remote") && !host)
		rc = cmd_remote();
	else
		die("unknown command or missing arguments: %s", cmd);
	if (fd >= 0 && write(fd, "x", 1) != 1)
		die("telling the server: %s", strerror(errno));
	fflush(stdout);
	return rc;
}
