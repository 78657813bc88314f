// SPDX-License-Identifier: MIT
/*
 * stats-thrash-netlink: the detector's per-MR ODP statistics over RDMA netlink, the way the
 * library reads them (nl_pid_mr_stats: the MRs of its own process on its device).
 *
 * 1. Real bytes from the Soft-RoCE guest (tests/fixtures/netlink-rxe, replayed): rxe lists
 *    the MRs of PID 145 and 146 and their statistics entries carry no counters, so the
 *    source is absent for them (0 with statistics, 1 listed, no counter); a PID with no MR
 *    lists none; a device not there is -ENODEV.
 * 2. A synthesized trace of mlx5 replies (the device list, the MR dump with PIDs, the
 *    per-MR statistics dump with page_faults, page_invalidations ...), one replay directory
 *    per window of one second: idle, faults without invalidations (warm-up), faults with
 *    invalidations (thrash; one MR deregistered and another registered in it, and one quiet
 *    window), idle again.  The detector must go OK, WARMING, THRASH, OK, changing state
 *    exactly three times.  Another process's MR faults and is invalidated heavily all along:
 *    counted, it would make THRASH in the warm-up.
 */
#include <fcntl.h>
#include <sys/stat.h>
#include <libmnl/libmnl.h>
#include <rdma/rdma_netlink.h>

#include "test.h"
#include "../sysfs-stats/counters.h"

#define OWN_PID 4242
#define OTHER_PID 777

static char fx[PATH_MAX];

static void test_rxe_recorded(void)
{
	char dir[PATH_MAX + 32];
	struct ctr_set s;
	unsigned listed;

	snprintf(dir, sizeof(dir), "%s/netlink-rxe", fx);
	ctr_set_init(&s);
	for (pid_t pid = 145; pid <= 146; pid++) {
		ctr_set_clear(&s);
		CHECK_RC(nl_pid_mr_stats("rxe0", pid, &s, dir, &listed), 0);
		CHECK(listed == 1, "rxe0, PID %d: %u MRs listed, want 1", (int)pid, listed);
		CHECK(s.n == 0, "rxe0, PID %d: %zu counters (%s), want none", (int)pid, s.n,
		      s.n ? s.v[0].name : "");
	}
	ctr_set_clear(&s);
	CHECK_RC(nl_pid_mr_stats("rxe0", 999, &s, dir, &listed), 0);
	CHECK(listed == 0, "rxe0, PID 999: %u MRs listed", listed);
	CHECK_RC(nl_pid_mr_stats("mlx5_0", 145, &s, dir, &listed), -ENODEV);
	ctr_set_free(&s);
}

/* ---- the synthesized mlx5 trace ---- */

struct mr {
	uint32_t mrn, pid;
	uint64_t faults, inval;
};

static void put_file(const char *dir, const char *name, const void *buf, size_t len)
{
	char path[PATH_MAX + 64];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	CHECK(fd >= 0 && write(fd, buf, len) == (ssize_t)len, "%s: %s", path, strerror(errno));
	close(fd);
}

static struct nlmsghdr *start(char *buf, uint16_t cmd)
{
	struct nlmsghdr *h = mnl_nlmsg_put_header(buf);

	h->nlmsg_type = RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, cmd);
	h->nlmsg_flags = NLM_F_MULTI;
	mnl_attr_put_u32(h, RDMA_NLDEV_ATTR_DEV_INDEX, 3);
	mnl_attr_put_strz(h, RDMA_NLDEV_ATTR_DEV_NAME, "mlx5_0");
	return h;
}

static size_t done(char *buf, struct nlmsghdr *h)
{
	struct nlmsghdr *d = mnl_nlmsg_put_header(buf + h->nlmsg_len);

	d->nlmsg_type = NLMSG_DONE;
	d->nlmsg_len = NLMSG_LENGTH(4);
	memset(mnl_nlmsg_get_payload(d), 0, 4);
	return h->nlmsg_len + d->nlmsg_len;
}

/* The replies of one sample into @dir: the device list, the MR dump, the statistics dump. */
static void write_sample(const char *dir, const struct mr *m, unsigned n)
{
	static char buf[16384];
	struct nlmsghdr *h;
	struct nlattr *tab, *ent, *hw, *e;

	h = start(buf, RDMA_NLDEV_CMD_GET);
	mnl_attr_put_u32(h, RDMA_NLDEV_ATTR_PORT_INDEX, 0);	/* no port: no port queries */
	put_file(dir, "dev-get.bin", buf, done(buf, h));

	h = start(buf, RDMA_NLDEV_CMD_RES_MR_GET);
	tab = mnl_attr_nest_start(h, RDMA_NLDEV_ATTR_RES_MR);
	for (unsigned i = 0; i < n; i++) {
		ent = mnl_attr_nest_start(h, RDMA_NLDEV_ATTR_RES_MR_ENTRY);
		mnl_attr_put_u32(h, RDMA_NLDEV_ATTR_RES_MRN, m[i].mrn);
		mnl_attr_put_u64(h, RDMA_NLDEV_ATTR_RES_MRLEN, 64 << 20);
		mnl_attr_put_u32(h, RDMA_NLDEV_ATTR_RES_PID, m[i].pid);
		mnl_attr_nest_end(h, ent);
	}
	mnl_attr_nest_end(h, tab);
	put_file(dir, "res-mr-mlx5_0.bin", buf, done(buf, h));

	h = start(buf, RDMA_NLDEV_CMD_RES_MR_GET);	/* STAT_GET of RES_MR answers so */
	tab = mnl_attr_nest_start(h, RDMA_NLDEV_ATTR_RES_MR);
	for (unsigned i = 0; i < n; i++) {
		const char *names[] = { "page_faults", "page_faults_handled", "page_invalidations",
					"page_invalidations_handled", "page_prefetch" };
		uint64_t v[] = { m[i].faults, m[i].faults, m[i].inval, m[i].inval, 0 };

		ent = mnl_attr_nest_start(h, RDMA_NLDEV_ATTR_RES_MR_ENTRY);
		mnl_attr_put_u32(h, RDMA_NLDEV_ATTR_RES_MRN, m[i].mrn);
		hw = mnl_attr_nest_start(h, RDMA_NLDEV_ATTR_STAT_HWCOUNTERS);
		for (unsigned k = 0; k < 5; k++) {
			e = mnl_attr_nest_start(h, RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY);
			mnl_attr_put_strz(h, RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_NAME, names[k]);
			mnl_attr_put_u64(h, RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_VALUE, v[k]);
			mnl_attr_nest_end(h, e);
		}
		mnl_attr_nest_end(h, hw);
		mnl_attr_nest_end(h, ent);
	}
	mnl_attr_nest_end(h, tab);
	put_file(dir, "stat-mr-mlx5_0.bin", buf, done(buf, h));
}

static void test_mlx5_trace(void)
{
	/* per window: own faults, own invalidations (pages), own MRs change, the state after */
	static const struct {
		uint64_t faults, inval;
		int swap_mr;		/* 1: MR 5 goes, MR 9 comes */
		enum odpx_thrash_state want;
	} w[] = {
		{ 0, 0, 0, ODPX_THRASH_OK }, { 0, 0, 0, ODPX_THRASH_OK },
		{ 20000, 0, 0, ODPX_THRASH_OK }, { 20000, 0, 0, ODPX_THRASH_WARMING },
		{ 20000, 100, 0, ODPX_THRASH_WARMING }, { 20000, 0, 0, ODPX_THRASH_WARMING },
		{ 20000, 15000, 0, ODPX_THRASH_WARMING }, { 20000, 15000, 1, ODPX_THRASH_THRASH },
		{ 20000, 2000, 0, ODPX_THRASH_THRASH },	/* one quiet window: no change */
		{ 20000, 14000, 0, ODPX_THRASH_THRASH }, { 20000, 16000, 0, ODPX_THRASH_THRASH },
		{ 0, 0, 0, ODPX_THRASH_THRASH }, { 0, 0, 0, ODPX_THRASH_THRASH },
		{ 0, 0, 0, ODPX_THRASH_OK }, { 0, 0, 0, ODPX_THRASH_OK },
	};
	struct mr m[3] = { { 5, OWN_PID, 123456, 7890 }, { 3, OTHER_PID, 1000, 1000 },
			   { 6, OWN_PID, 0, 0 } };	/* MR 6: ours, never faulting */
	char dir[] = "/tmp/odpx-nl-trace.XXXXXX";
	struct ctr_set a, b, *prev = &a, *cur = &b;
	struct thrash_cfg cfg;
	struct thrash t;
	unsigned listed, changes = 0;

	CHECK(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
	ctr_set_init(&a);
	ctr_set_init(&b);
	thrash_cfg_default(&cfg);
	thrash_init(&t, &cfg);
	for (size_t i = 0; i <= sizeof(w) / sizeof(w[0]); i++) {
		if (i) {
			const __typeof__(w[0]) *x = &w[i - 1];
			if (x->swap_mr) {	/* MR 5 deregistered, MR 9 registered, counting from 0 */
				m[0].mrn = 9;
				m[0].faults = x->faults;
				m[0].inval = x->inval;
			} else {
				m[0].faults += x->faults;
				m[0].inval += x->inval;
			}
			m[1].faults += 50000;
			m[1].inval += 50000;
		}
		write_sample(dir, m, 3);
		ctr_set_clear(cur);
		CHECK_RC(nl_pid_mr_stats("mlx5_0", OWN_PID, cur, dir, &listed), 2);
		CHECK(listed == 2, "window %zu: %u MRs of ours listed", i, listed);
		CHECK(!ctr_find(cur, SRC_NL_MR, "mlx5_0/mr3", "page_faults"),
		      "window %zu: another process's MR is counted", i);
		if (i) {
			struct thrash_in in = { .secs = 1.0 };
			enum odpx_thrash_state was = t.state;

			CHECK(thrash_dev_inputs(prev, cur, &in) == SRC_NL_MR, "window %zu: source", i);
			CHECK(in.dev_faults == w[i - 1].faults && in.dev_inval == w[i - 1].inval,
			      "window %zu: faults %lu inval %lu, want %lu %lu", i,
			      (unsigned long)in.dev_faults, (unsigned long)in.dev_inval,
			      (unsigned long)w[i - 1].faults, (unsigned long)w[i - 1].inval);
			thrash_step(&t, &in);
			changes += t.state != was;
			printf("window %2zu: faults %6lu inval %6lu -> %s\n", i,
			       (unsigned long)in.dev_faults, (unsigned long)in.dev_inval,
			       thrash_state_str(t.state));
			CHECK(t.state == w[i - 1].want, "window %zu: %s, want %s", i,
			      thrash_state_str(t.state), thrash_state_str(w[i - 1].want));
		}
		struct ctr_set *x = prev;
		prev = cur;
		cur = x;
	}
	CHECK(changes == 3, "%u state changes, want 3 (OK, WARMING, THRASH, OK)", changes);
	ctr_set_free(&a);
	ctr_set_free(&b);
	for (const char *const *f = (const char *const[]){ "dev-get.bin", "res-mr-mlx5_0.bin",
							   "stat-mr-mlx5_0.bin", NULL }; *f; f++) {
		char path[sizeof(dir) + 32];
		snprintf(path, sizeof(path), "%s/%s", dir, *f);
		unlink(path);
	}
	rmdir(dir);
}

int main(void)
{
	find_fixtures(fx, sizeof(fx), "netlink-rxe");
	test_rxe_recorded();
	test_mlx5_trace();
	printf("PASS\n");
	return 0;
}
