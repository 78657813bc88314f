// SPDX-License-Identifier: MIT
/*
 * netlink.c - RDMA netlink (the kernel's nldev client) through libmnl:
 * the device list, port statistics, the MR resource dump, and the per-MR
 * ODP statistics of drivers that provide them (mlx5).
 *
 * Replies as the kernel builds them (drivers/infiniband/core/nldev.c):
 *   CMD_GET (dump)       DEV_INDEX DEV_NAME PORT_INDEX(=number of ports) ...
 *   CMD_STAT_GET port    DEV_INDEX DEV_NAME PORT_INDEX
 *                        STAT_HWCOUNTERS { HWCOUNTER_ENTRY { _NAME _VALUE } ... }
 *   CMD_RES_MR_GET dump  DEV_INDEX DEV_NAME RES_MR { RES_MR_ENTRY { [RKEY LKEY]
 *                        MRLEN MRN [PDN] [PID] ... } ... }
 *   CMD_STAT_GET dump with STAT_RES = RES_MR: the same RES_MR table (message
 *                        type RES_MR_GET) with entries { MRN [STAT_HWCOUNTERS] }
 * The parser checks every length and the type of every attribute it uses;
 * attribute numbers it does not know (newer kernels) are skipped.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <linux/netlink.h>
#include <rdma/rdma_netlink.h>

#include "config.h"	/* ODPX_HAVE_MNL */
#include "counters.h"

#ifdef ODPX_HAVE_MNL
#include <libmnl/libmnl.h>
#ifndef MNL_SOCKET_DUMP_SIZE	/* libmnl 1.0.5 (bookworm) lacks it */
#define MNL_SOCKET_DUMP_SIZE 32768
#endif
#endif

#define NL_TB 256	/* attribute numbers we keep; later ones are skipped */

void nl_result_free(struct nl_result *res)
{
	free(res->mr);
	free(res->dev);
	*res = (struct nl_result){ .ctrs = res->ctrs, .pid = res->pid, .no_ports = res->no_ports };
}

#ifdef ODPX_HAVE_MNL

static int cmp_mrn(const void *a, const void *b)
{
	uint32_t x = ((const struct nl_mr *)a)->mrn, y = ((const struct nl_mr *)b)->mrn;

	return (x > y) - (x < y);
}

typedef const struct nlattr *nl_tb[NL_TB];

/* The type of every attribute the parser reads, in any nest (one enum numbers them all). */
static const uint8_t attr_type[NL_TB] = {
	[RDMA_NLDEV_ATTR_DEV_INDEX] = MNL_TYPE_U32,
	[RDMA_NLDEV_ATTR_DEV_NAME] = MNL_TYPE_NUL_STRING,
	[RDMA_NLDEV_ATTR_PORT_INDEX] = MNL_TYPE_U32,
	[RDMA_NLDEV_ATTR_RES_MR] = MNL_TYPE_NESTED,
	[RDMA_NLDEV_ATTR_RES_MRN] = MNL_TYPE_U32,
	[RDMA_NLDEV_ATTR_RES_RKEY] = MNL_TYPE_U32,
	[RDMA_NLDEV_ATTR_RES_LKEY] = MNL_TYPE_U32,
	[RDMA_NLDEV_ATTR_RES_PDN] = MNL_TYPE_U32,
	[RDMA_NLDEV_ATTR_RES_PID] = MNL_TYPE_U32,
	[RDMA_NLDEV_ATTR_RES_MRLEN] = MNL_TYPE_U64,
	[RDMA_NLDEV_ATTR_STAT_HWCOUNTERS] = MNL_TYPE_NESTED,
	[RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_NAME] = MNL_TYPE_NUL_STRING,
	[RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_VALUE] = MNL_TYPE_U64,
};

/*
 * Walk [p, p+len) as attributes: those of @entry (a table's entries), each
 * parsed into a table and given to @fn; or, with @entry 0, every one into
 * @tb.  -EBADMSG when an attribute is shorter than its header, runs past
 * the end, is not of the type attr_type says, or bytes other than the last
 * attribute's padding are left over.
 */
static int walk(const void *p, size_t len, nl_tb tb, uint16_t entry,
		int (*fn)(nl_tb tb, void *arg), void *arg)
{
	const struct nlattr *a = p;
	int left = (int)len, r;
	nl_tb etb;

	if (tb)
		memset(tb, 0, sizeof(nl_tb));
	while (left > 0) {
		if (!mnl_attr_ok(a, left))
			return -EBADMSG;
		uint16_t t = mnl_attr_get_type(a);
		if (t < NL_TB && attr_type[t] && mnl_attr_validate(a, attr_type[t]) < 0)
			return -EBADMSG;
		if (tb && t < NL_TB)
			tb[t] = a;
		if (entry && t == entry) {
			if (walk(mnl_attr_get_payload(a), mnl_attr_get_payload_len(a), etb, 0, NULL,
				 NULL) < 0)
				return -EBADMSG;
			if ((r = fn(etb, arg)) < 0)
				return r;
		}
		left -= (int)MNL_ALIGN(a->nla_len);
		a = mnl_attr_next(a);
	}
	return left > -4 ? 0 : -EBADMSG;
}

/* The entries of the table @nest: @fn on each */
static int walk_table(const struct nlattr *nest, uint16_t entry, int (*fn)(nl_tb tb, void *arg),
		      void *arg)
{
	return walk(mnl_attr_get_payload(nest), mnl_attr_get_payload_len(nest), NULL, entry, fn, arg);
}

static uint32_t u32_or(const nl_tb tb, int t, uint32_t dflt)
{
	return tb[t] ? mnl_attr_get_u32(tb[t]) : dflt;
}

/* Where a table's entries go: the counters of @src at @where, the MRs of @dev */
struct table {
	struct nl_result *res;
	enum ctr_source src;
	const char *where, *dev;
};

/* HWCOUNTER_ENTRY { NAME VALUE } of a STAT_HWCOUNTERS table */
static int hwcounter(nl_tb tb, void *arg)
{
	const struct table *t = arg;

	if (!tb[RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_NAME] ||
	    !tb[RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_VALUE])
		return -EBADMSG;
	if (t->res->ctrs && ctr_add(t->res->ctrs, t->src, t->where,
				    mnl_attr_get_str(tb[RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_NAME]),
				    mnl_attr_get_u64(tb[RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_VALUE]),
				    false) < 0)
		return -ENOMEM;
	return 0;
}

/* RES_MR_ENTRY { ... } of a RES_MR table: an MR of the dump, and its statistics */
static int mr_entry(nl_tb tb, void *arg)
{
	const struct table *t = arg;
	struct nl_mr m = { 0 };
	char where[64];
	int r;

	if (!tb[RDMA_NLDEV_ATTR_RES_MRN])
		return -EBADMSG;
	snprintf(m.dev, sizeof(m.dev), "%s", t->dev);
	m.mrn = mnl_attr_get_u32(tb[RDMA_NLDEV_ATTR_RES_MRN]);
	m.rkey = u32_or(tb, RDMA_NLDEV_ATTR_RES_RKEY, 0);
	m.lkey = u32_or(tb, RDMA_NLDEV_ATTR_RES_LKEY, 0);
	m.has_keys = tb[RDMA_NLDEV_ATTR_RES_LKEY] != NULL;
	m.pdn = u32_or(tb, RDMA_NLDEV_ATTR_RES_PDN, 0);
	m.pid = u32_or(tb, RDMA_NLDEV_ATTR_RES_PID, 0);
	m.has_pid = tb[RDMA_NLDEV_ATTR_RES_PID] != NULL;
	if (tb[RDMA_NLDEV_ATTR_RES_MRLEN]) {
		m.mrlen = mnl_attr_get_u64(tb[RDMA_NLDEV_ATTR_RES_MRLEN]);
		if ((r = ctr_grow(&t->res->mr, &t->res->mrcap, t->res->nmr + 1, sizeof(m))) < 0)
			return r;
		t->res->mr[t->res->nmr++] = m;
	}
	if (!tb[RDMA_NLDEV_ATTR_STAT_HWCOUNTERS])
		return 0;
	/* with a PID, the statistics of its MRs only (a statistics entry names no process) */
	if (t->res->pid) {
		size_t n = t->res->nmr - t->res->mr_dev;
		const struct nl_mr *o = n ? bsearch(&m, t->res->mr + t->res->mr_dev, n, sizeof(m),
						    cmp_mrn) : NULL;
		if (!o || !o->has_pid || o->pid != (uint32_t)t->res->pid)
			return 0;
	}
	size_t n = t->res->ctrs ? t->res->ctrs->n : 0;
	snprintf(where, sizeof(where), "%.40s/mr%u", t->dev, m.mrn);
	r = walk_table(tb[RDMA_NLDEV_ATTR_STAT_HWCOUNTERS], RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY,
		       hwcounter, &(struct table){ .res = t->res, .src = SRC_NL_MR, .where = where });
	if (r == 0 && (!t->res->ctrs || t->res->ctrs->n > n))
		t->res->nmr_stats++;	/* an entry without counters (rxe's) is no statistics */
	return r;
}

static int parse_msg(const struct nlmsghdr *nlh, struct nl_result *res)
{
	unsigned op = nlh->nlmsg_type & ((1U << 10) - 1);
	struct table t = { .res = res, .dev = "" };
	char where[64];
	nl_tb tb;
	int r;

	if ((nlh->nlmsg_type >> 10) != RDMA_NL_NLDEV)
		return -EPROTO;
	if (walk(mnl_nlmsg_get_payload(nlh), mnl_nlmsg_get_payload_len(nlh), tb, 0, NULL, NULL) < 0)
		return -EBADMSG;
	if (tb[RDMA_NLDEV_ATTR_DEV_NAME])
		t.dev = mnl_attr_get_str(tb[RDMA_NLDEV_ATTR_DEV_NAME]);
	if ((tb[RDMA_NLDEV_ATTR_RES_MR] || tb[RDMA_NLDEV_ATTR_STAT_HWCOUNTERS] ||
	     op == RDMA_NLDEV_CMD_GET) && (!t.dev[0] || !tb[RDMA_NLDEV_ATTR_DEV_INDEX]))
		return -EBADMSG;	/* every such reply names its device */
	if (op == RDMA_NLDEV_CMD_GET) {
		if ((r = ctr_grow(&res->dev, &res->devcap, res->ndev + 1, sizeof(*res->dev))) < 0)
			return r;
		struct nl_dev *d = &res->dev[res->ndev++];
		snprintf(d->name, sizeof(d->name), "%s", t.dev);
		d->index = u32_or(tb, RDMA_NLDEV_ATTR_DEV_INDEX, 0);
		d->ports = u32_or(tb, RDMA_NLDEV_ATTR_PORT_INDEX, 0);
	}
	if (tb[RDMA_NLDEV_ATTR_STAT_HWCOUNTERS]) {
		if (!tb[RDMA_NLDEV_ATTR_PORT_INDEX])
			return -EBADMSG;
		snprintf(where, sizeof(where), "%.40s/%u", t.dev,
			 mnl_attr_get_u32(tb[RDMA_NLDEV_ATTR_PORT_INDEX]));
		r = walk_table(tb[RDMA_NLDEV_ATTR_STAT_HWCOUNTERS],
			       RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY, hwcounter,
			       &(struct table){ .res = res, .src = SRC_NL_PORT, .where = where });
		if (r < 0)
			return r;
	}
	if (tb[RDMA_NLDEV_ATTR_RES_MR] &&
	    (r = walk_table(tb[RDMA_NLDEV_ATTR_RES_MR], RDMA_NLDEV_ATTR_RES_MR_ENTRY, mr_entry, &t)) < 0)
		return r;
	return 0;
}

int nl_parse(const void *buf, size_t len, struct nl_result *res)
{
	const struct nlmsghdr *nlh = buf;
	int left = (int)len, n = 0, r;

	if (len > INT32_MAX)
		return -EBADMSG;
	while (left > 0) {
		if (!mnl_nlmsg_ok(nlh, left))
			return -EBADMSG;	/* truncated header or message */
		switch (nlh->nlmsg_type) {
		case NLMSG_NOOP:
			break;
		case NLMSG_DONE:
			return n;
		case NLMSG_ERROR: {
			const struct nlmsgerr *e = mnl_nlmsg_get_payload(nlh);
			if (mnl_nlmsg_get_payload_len(nlh) < sizeof(*e))
				return -EBADMSG;
			if (e->error)
				return e->error < 0 ? e->error : -EPROTO;
			break;	/* an acknowledgement */
		}
		default:
			if ((r = parse_msg(nlh, res)) < 0)
				return r;
			n++;
		}
		nlh = mnl_nlmsg_next(nlh, &left);
	}
	return left == 0 ? n : -EBADMSG;
}

/* ---- live queries ---- */

struct nl_conn {
	struct mnl_socket *sk;	/* NULL when replaying */
	unsigned seq;
	const char *record, *replay;	/* directories, or NULL */
	char *buf;		/* one reply, all datagrams */
	size_t len, cap;
};

/* Send one request and gather the reply: until NLMSG_DONE or an error for a dump. */
static int query(struct nl_conn *c, uint16_t cmd, bool dump, uint32_t dev, uint32_t port,
		 uint32_t stat_res)
{
	char req[MNL_SOCKET_BUFFER_SIZE];
	struct nlmsghdr *nlh = mnl_nlmsg_put_header(req);
	bool end = false;
	int r;

	nlh->nlmsg_type = RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, cmd);
	nlh->nlmsg_flags = NLM_F_REQUEST | (dump ? NLM_F_DUMP : 0);
	nlh->nlmsg_seq = ++c->seq;
	if (dev != UINT32_MAX)
		mnl_attr_put_u32(nlh, RDMA_NLDEV_ATTR_DEV_INDEX, dev);
	if (port)
		mnl_attr_put_u32(nlh, RDMA_NLDEV_ATTR_PORT_INDEX, port);
	if (stat_res)
		mnl_attr_put_u32(nlh, RDMA_NLDEV_ATTR_STAT_RES, stat_res);
	c->len = 0;
	if (mnl_socket_sendto(c->sk, nlh, nlh->nlmsg_len) < 0)
		return -errno;
	while (!end) {
		if ((r = ctr_grow(&c->buf, &c->cap, c->len + MNL_SOCKET_DUMP_SIZE, 1)) < 0)
			return r;
		ssize_t n = mnl_socket_recvfrom(c->sk, c->buf + c->len, MNL_SOCKET_DUMP_SIZE);
		const struct nlmsghdr *m = (const struct nlmsghdr *)(c->buf + c->len);
		int left = (int)n;

		if (n < 0)
			return errno == EAGAIN ? -ETIMEDOUT : -errno;
		c->len += (size_t)n;
		for (end = !dump; mnl_nlmsg_ok(m, left); m = mnl_nlmsg_next(m, &left))
			end |= m->nlmsg_type == NLMSG_DONE || m->nlmsg_type == NLMSG_ERROR;
	}
	return 0;
}

/*
 * One reply into c->buf, named @what: from the kernel (and recorded), or
 * replayed from <replay>/<what>.bin (absent: the query failed).
 */
static int fetch(struct nl_conn *c, const char *what, uint16_t cmd, bool dump, uint32_t dev,
		 uint32_t port, uint32_t stat_res)
{
	char path[PATH_MAX];
	FILE *f;
	int r = 0;

	if (c->replay) {
		snprintf(path, sizeof(path), "%s/%s.bin", c->replay, what);
		if (!(f = fopen(path, "re")))
			return -errno;
		c->len = 0;
		while (!feof(f) && !ferror(f) &&
		       (r = ctr_grow(&c->buf, &c->cap, c->len + 65536, 1)) == 0)
			c->len += fread(c->buf + c->len, 1, 65536, f);
		if (r == 0 && ferror(f))
			r = -EIO;
		fclose(f);
		return r;
	}
	if ((r = query(c, cmd, dump, dev, port, stat_res)) == 0 && c->record) {
		/* a failed write leaves a useless fixture, but the query succeeded */
		snprintf(path, sizeof(path), "%s/%s.bin", c->record, what);
		if ((f = fopen(path, "we"))) {
			fwrite(c->buf, 1, c->len, f);
			fclose(f);
		}
	}
	return r;
}

int nl_collect(const char *dev, struct nl_result *res, const char *rec, const char *rep)
{
	struct nl_conn c = { .record = rec, .replay = rep };
	struct timeval tv = { .tv_sec = 2 };
	double t_port = 0, t_mr = 0;
	int n_port = 0, n_mr = 0;
	char what[128];
	int r, found = 0;

	if (!rep) {
		c.sk = mnl_socket_open(NETLINK_RDMA);
		if (!c.sk)
			return errno == EPROTONOSUPPORT || errno == EAFNOSUPPORT ?
			       -EPROTONOSUPPORT : -errno;
		if (mnl_socket_bind(c.sk, 0, MNL_SOCKET_AUTOPID) < 0) {
			r = -errno;
			goto out;
		}
		setsockopt(mnl_socket_get_fd(c.sk), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		c.seq = (unsigned)time(NULL);
	}
	if ((r = fetch(&c, "dev-get", RDMA_NLDEV_CMD_GET, true, UINT32_MAX, 0, 0)) < 0)
		goto out;
	res->ndev = 0;
	if ((r = nl_parse(c.buf, c.len, res)) < 0)
		goto out;
	r = 0;
	for (size_t i = 0; i < res->ndev; i++) {
		const char *name = res->dev[i].name;
		uint32_t di = res->dev[i].index;

		if (dev && strcmp(dev, name))
			continue;
		found++;
		for (uint32_t p = 1; !res->no_ports && p <= res->dev[i].ports && p < 256; p++) {
			snprintf(what, sizeof(what), "stat-port-%s-%u", name, p);
			if (fetch(&c, what, RDMA_NLDEV_CMD_STAT_GET, false, di, p, 0) < 0)
				continue;
			t_port += ctr_now_s();
			n_port++;
			nl_parse(c.buf, c.len, res);	/* no hw counters: -EINVAL, skipped */
		}
		snprintf(what, sizeof(what), "res-mr-%s", name);
		bool listed = false;
		res->mr_dev = res->nmr;
		if (fetch(&c, what, RDMA_NLDEV_CMD_RES_MR_GET, true, di, 0, 0) == 0) {
			if ((r = nl_parse(c.buf, c.len, res)) < 0 && r != -EPERM && r != -EOPNOTSUPP)
				goto out;
			listed = r >= 0;
		}
		r = 0;
		/* with a PID, statistics only where the MR dump says which MRs are its */
		if (res->pid && !listed)
			continue;
		if (res->pid && res->nmr > res->mr_dev)
			qsort(res->mr + res->mr_dev, res->nmr - res->mr_dev, sizeof(*res->mr),
			      cmp_mrn);
		/* read whole (older kernels: -EINVAL), it lists every MR: "mrs" (ctr_inc_each) */
		snprintf(what, sizeof(what), "stat-mr-%s", name);
		size_t nmr = res->nmr_stats;
		if (fetch(&c, what, RDMA_NLDEV_CMD_STAT_GET, true, di, 0, RDMA_NLDEV_ATTR_RES_MR) == 0) {
			t_mr += ctr_now_s();
			n_mr++;
			if (nl_parse(c.buf, c.len, res) >= 0 && res->ctrs)
				ctr_add(res->ctrs, SRC_NL_MR, name, "mrs", res->nmr_stats - nmr, true);
		}
	}
	if (dev && !found)
		r = -ENODEV;
out:
	res->t_port = n_port ? t_port / n_port : 0;
	res->t_mr = n_mr ? t_mr / n_mr : 0;
	free(c.buf);
	if (c.sk)
		mnl_socket_close(c.sk);
	return r;
}

#else /* !ODPX_HAVE_MNL */

int nl_parse(const void *buf, size_t len, struct nl_result *res)
{
	return -EPROTONOSUPPORT;
}

int nl_collect(const char *dev, struct nl_result *res, const char *rec, const char *rep)
{
	return -EPROTONOSUPPORT;
}

#endif

int nl_pid_mr_stats(const char *dev, pid_t pid, struct ctr_set *out, const char *replay,
		    unsigned *listed)
{
	struct nl_result res = { .ctrs = out, .pid = pid, .no_ports = true };
	size_t n = out->n;
	struct ctr *g;
	int r;

	*listed = 0;
	if ((r = nl_collect(dev, &res, NULL, replay)) == 0) {
		for (size_t i = 0; i < res.nmr; i++)	/* the one device's */
			*listed += res.mr[i].has_pid && res.mr[i].pid == (uint32_t)pid;
		/* the gauge "mrs", added last, unless our MRs carry none: the source is absent */
		g = out->n > n && !strcmp(out->v[out->n - 1].name, "mrs") ?
		    &out->v[out->n - 1] : NULL;
		r = g ? (int)g->value : 0;
		if (g && !g->value && *listed)
			out->n--;
	}
	nl_result_free(&res);
	return r;
}
