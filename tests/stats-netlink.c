// SPDX-License-Identifier: MIT
/*
 * stats-netlink: RDMA netlink replies parse to the right counters.
 *
 * - recorded in the Soft-RoCE guest (tests/fixtures/netlink-rxe, written by
 *   `odpstat --record` with two ibv_rc_pingpong servers holding one MR
 *   each; rdma-resource-show-mr.json is `rdma -j resource show mr` of the
 *   same moment): the device list, port 1's 17 hw counters, the MR dump
 *   (MR numbers, lengths, keys, PDs and PIDs as `rdma` shows them) and the
 *   per-MR statistics dump (rxe has no per-MR counters: entries, no values);
 * - built here with libmnl: a dump carrying the mlx5 per-MR ODP counters
 *   (page_faults, page_faults_handled, page_invalidations,
 *   page_invalidations_handled, page_prefetch) for two MRs, and a device
 *   list of 40 devices, every one kept;
 * - rejected: every truncation of the recorded and built buffers that does
 *   not end on a message boundary, attributes running past their nest,
 *   wrong attribute sizes, an entry without its value, another netlink
 *   client's message, an NLMSG_ERROR (its errno comes back); and a
 *   thousand random corruptions never crash the parser;
 * - odpstat over replayed per-MR statistics (--replay, a FIFO feeding one
 *   reply per sample): the device's faults and invalidations are the
 *   increases of each MR against its own earlier value.  An MR
 *   deregistered between two samples adds nothing, and one registered
 *   between them adds all it counted; after a sample without the device's
 *   statistics, no MR adds anything (the increase of a sum over the MRs
 *   would read MR 8's deregistration as a reset);
 * - odpstat -p over replayed statistics of the MRs of two processes and a
 *   kernel MR: that process's faults and invalidations only, by the MR
 *   dump's PIDs (test_replay_pid);
 * - the same with netlink replies held back every other sample: rates of
 *   the odpx counters and of the MRs' are right (test_replay_timing).
 */
#include <fcntl.h>
#include <math.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <libmnl/libmnl.h>
#include <rdma/rdma_netlink.h>

#include "stats-forge.h"

static char fx[PATH_MAX];


static size_t load(const char *name, char *buf, size_t cap)
{
	char path[PATH_MAX + 64];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "%s/netlink-rxe/%s", fx, name);
	fd = open(path, O_RDONLY);
	CHECK(fd >= 0, "%s: %s", path, strerror(errno));
	n = read(fd, buf, cap);
	CHECK(n > 0, "read %s", path);
	close(fd);
	return (size_t)n;
}

static int parse(const void *buf, size_t len, struct ctr_set *s, struct nl_result *r)
{
	ctr_set_clear(s);
	nl_result_free(r);
	r->ctrs = s;
	return nl_parse(buf, len, r);
}

/* every prefix: no crash; one that cuts a message must be rejected */
static void truncations(const char *what, const char *buf, size_t len)
{
	struct ctr_set s;
	struct nl_result r = { 0 };
	size_t bound[64], nb = 0;
	const struct nlmsghdr *h = (const void *)buf;
	int left = (int)len;

	ctr_set_init(&s);
	while (mnl_nlmsg_ok(h, left) && nb < 64) {
		h = mnl_nlmsg_next(h, &left);
		bound[nb++] = len - (size_t)left;
	}
	for (size_t cut = 1; cut < len; cut++) {
		char *copy = malloc(cut);	/* exact size: ASan-style overreads would show */
		bool at_bound = false;
		memcpy(copy, buf, cut);
		int rc = parse(copy, cut, &s, &r);
		for (size_t i = 0; i < nb; i++)
			at_bound |= bound[i] == cut;
		if (!at_bound)
			CHECK(rc == -EBADMSG, "%s cut at %zu/%zu: %d, want -EBADMSG", what, cut, len, rc);
		free(copy);
	}
	ctr_set_free(&s);
	nl_result_free(&r);
}

static void test_recorded(void)
{
	char buf[8192];
	size_t n;
	struct ctr_set s;
	struct nl_result r = { 0 };

	ctr_set_init(&s);
	n = load("dev-get.bin", buf, sizeof(buf));
	CHECK_RC(parse(buf, n, &s, &r), 1);
	CHECK(r.ndev == 1 && !strcmp(r.dev[0].name, "rxe0") && r.dev[0].ports == 1, "dev list");
	truncations("dev-get", buf, n);

	n = load("stat-port-rxe0-1.bin", buf, sizeof(buf));
	CHECK_RC(parse(buf, n, &s, &r), 1);
	CHECK(s.n == 17, "port counters: %zu", s.n);
	for (size_t i = 0; i < s.n; i++)
		CHECK(s.v[i].src == SRC_NL_PORT && !strcmp(s.v[i].where, "rxe0/1"), "port ctr %s",
		      s.v[i].name);
	CHECK(ctr_find(&s, SRC_NL_PORT, "rxe0/1", "retry_exceeded_err"), "retry_exceeded_err");
	CHECK(ctr_find(&s, SRC_NL_PORT, "rxe0/1", "rcvd_rnr_err"), "rcvd_rnr_err");
	truncations("stat-port", buf, n);

	/* rdma -j resource show mr at the same moment: mrn 0 65536 pd 2 pid 145, mrn 1 131072 pd 1 pid 146 */
	n = load("res-mr-rxe0.bin", buf, sizeof(buf));
	CHECK_RC(parse(buf, n, &s, &r), 1);
	CHECK(r.nmr == 2, "MRs: %zu", r.nmr);
	CHECK(r.mr[0].mrn == 0 && r.mr[0].mrlen == 65536 && r.mr[0].pdn == 2 && r.mr[0].pid == 145 &&
	      r.mr[0].lkey == 0x2c4 && r.mr[0].rkey == 0x2c4 && !strcmp(r.mr[0].dev, "rxe0"),
	      "MR 0: mrn %u len %llu pdn %u pid %u lkey %#x", r.mr[0].mrn,
	      (unsigned long long)r.mr[0].mrlen, r.mr[0].pdn, r.mr[0].pid, r.mr[0].lkey);
	CHECK(r.mr[1].mrn == 1 && r.mr[1].mrlen == 131072 && r.mr[1].pdn == 1 && r.mr[1].pid == 146 &&
	      r.mr[1].lkey == 0x33d, "MR 1");
	truncations("res-mr", buf, n);

	n = load("stat-mr-rxe0.bin", buf, sizeof(buf));
	CHECK_RC(parse(buf, n, &s, &r), 1);
	CHECK(s.n == 0 && r.nmr == 0, "rxe per-MR stats: no counters");
	truncations("stat-mr", buf, n);
	ctr_set_free(&s);
	nl_result_free(&r);
}

static const char *const odp[] = { "page_faults", "page_faults_handled", "page_invalidations",
				   "page_invalidations_handled", "page_prefetch" };

/*
 * One RES_MR_ENTRY { MRN, STAT_HWCOUNTERS { the five ODP counters @v, and
 * an attribute from a newer kernel } }; @variant: see build_mlx5().
 */
static void put_mr_stats(struct nlmsghdr *h, uint32_t mr, const uint64_t v[5], int variant)
{
	struct nlattr *ent, *hw, *e;

	ent = mnl_attr_nest_start(h, RDMA_NLDEV_ATTR_RES_MR_ENTRY);
	if (variant == 2)
		mnl_attr_put_u16(h, RDMA_NLDEV_ATTR_RES_MRN, (uint16_t)mr);	/* wrong size */
	else
		mnl_attr_put_u32(h, RDMA_NLDEV_ATTR_RES_MRN, mr);
	hw = mnl_attr_nest_start(h, RDMA_NLDEV_ATTR_STAT_HWCOUNTERS);
	for (unsigned i = 0; i < 5; i++) {
		e = mnl_attr_nest_start(h, RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY);
		mnl_attr_put_strz(h, RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_NAME, odp[i]);
		if (!(variant == 3 && i == 4))	/* entry without its value */
			mnl_attr_put_u64(h, RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_VALUE, v[i]);
		mnl_attr_nest_end(h, e);
	}
	mnl_attr_put_u32(h, 250, 1);	/* skipped */
	mnl_attr_nest_end(h, hw);
	mnl_attr_nest_end(h, ent);
}

/* NLMSG_DONE after the @len bytes at @buf: the length with it. */
static size_t put_done(char *buf, size_t len)
{
	struct nlmsghdr *h = mnl_nlmsg_put_header(buf + len);

	h->nlmsg_type = NLMSG_DONE;
	h->nlmsg_len = NLMSG_LENGTH(4);
	memset(mnl_nlmsg_get_payload(h), 0, 4);
	return len + h->nlmsg_len;
}

/*
 * The per-MR statistics of mlx5_0 (device 3), as the kernel answers
 * STAT_GET with STAT_RES = RES_MR there (a RES_MR_GET-typed dump): MR
 * @mrn[i] with counters @v[i], for @n MRs.
 */
static size_t build_stat_mr(char *buf, unsigned n, const uint32_t *mrn, const uint64_t (*v)[5],
			    int variant)
{
	struct nlmsghdr *h = mnl_nlmsg_put_header(buf);
	struct nlattr *tab;

	h->nlmsg_type = RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_RES_MR_GET);
	h->nlmsg_flags = NLM_F_MULTI;
	mnl_attr_put_u32(h, RDMA_NLDEV_ATTR_DEV_INDEX, 3);
	mnl_attr_put_strz(h, RDMA_NLDEV_ATTR_DEV_NAME, "mlx5_0");
	tab = mnl_attr_nest_start(h, RDMA_NLDEV_ATTR_RES_MR);
	for (unsigned i = 0; i < n; i++)
		put_mr_stats(h, mrn[i], v[i], variant);
	mnl_attr_nest_end(h, tab);
	if (variant == 1)	/* the table claims more than the message holds */
		tab->nla_len += 8;
	return put_done(buf, h->nlmsg_len);
}

/* MRs 7 and 8, counters 7000.. and 8000.., MR 8's page_faults near the top of the range */
static size_t build_mlx5(char *buf, int variant)
{
	static const uint32_t mrn[2] = { 7, 8 };
	static const uint64_t v[2][5] = { { 7000, 7001, 7002, 7003, 7004 },
					  { UINT64_MAX - 1, 8001, 8002, 8003, 8004 } };

	return build_stat_mr(buf, 2, mrn, v, variant);
}

/* A device list longer than any fixed table: every device is kept. */
static void test_many_devices(void)
{
	static char buf[16384];
	struct ctr_set s;
	struct nl_result r = { 0 };
	size_t len = 0;

	ctr_set_init(&s);
	for (unsigned i = 0; i < 40; i++) {
		struct nlmsghdr *h = mnl_nlmsg_put_header(buf + len);
		char name[16];

		snprintf(name, sizeof(name), "mlx5_%u", i);
		h->nlmsg_type = RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_GET);
		h->nlmsg_flags = NLM_F_MULTI;
		mnl_attr_put_u32(h, RDMA_NLDEV_ATTR_DEV_INDEX, 100 + i);
		mnl_attr_put_strz(h, RDMA_NLDEV_ATTR_DEV_NAME, name);
		mnl_attr_put_u32(h, RDMA_NLDEV_ATTR_PORT_INDEX, 1 + i % 2);
		len += h->nlmsg_len;
	}
	len = put_done(buf, len);
	CHECK(parse(buf, len, &s, &r) >= 0, "a list of 40 devices");
	CHECK(r.ndev == 40, "devices kept: %zu of 40", r.ndev);
	CHECK(!strcmp(r.dev[39].name, "mlx5_39") && r.dev[39].index == 139 && r.dev[39].ports == 2,
	      "the 40th device: %s, index %u, %u ports", r.dev[39].name, r.dev[39].index,
	      r.dev[39].ports);
	ctr_set_free(&s);
	nl_result_free(&r);
}

static void test_built(void)
{
	static char buf[16384];
	struct ctr_set s;
	struct nl_result r = { 0 };
	size_t n;

	ctr_set_init(&s);
	n = build_mlx5(buf, 0);
	CHECK_RC(parse(buf, n, &s, &r), 1);
	CHECK(s.n == 10, "per-MR counters: %zu", s.n);
	for (unsigned i = 0; i < 5; i++) {
		const struct ctr *c = ctr_find(&s, SRC_NL_MR, "mlx5_0/mr7", odp[i]);
		CHECK(c && c->value == 7000 + i, "mr7 %s", odp[i]);
	}
	CHECK(ctr_find(&s, SRC_NL_MR, "mlx5_0/mr8", "page_faults")->value == UINT64_MAX - 1, "mr8");
	CHECK(ctr_sum(&s, SRC_NL_MR, "page_invalidations", NULL) == 7002 + 8002, "sum");
	CHECK(r.nmr == 0, "a stats entry has no length: not an MR dump entry");
	truncations("mlx5 per-MR", buf, n);

	n = build_mlx5(buf, 1);
	CHECK_RC(parse(buf, n, &s, &r), -EBADMSG);
	n = build_mlx5(buf, 2);
	CHECK_RC(parse(buf, n, &s, &r), -EBADMSG);
	n = build_mlx5(buf, 3);
	CHECK_RC(parse(buf, n, &s, &r), -EBADMSG);

	/* another netlink client's message */
	n = build_mlx5(buf, 0);
	((struct nlmsghdr *)buf)->nlmsg_type = RDMA_NL_GET_TYPE(RDMA_NL_LS, 1);
	CHECK_RC(parse(buf, n, &s, &r), -EPROTO);

	/* an error reply: its errno */
	struct nlmsghdr *h = mnl_nlmsg_put_header(buf);
	struct nlmsgerr *err = mnl_nlmsg_put_extra_header(h, sizeof(*err));
	h->nlmsg_type = NLMSG_ERROR;
	err->error = -EPERM;
	CHECK_RC(parse(buf, h->nlmsg_len, &s, &r), -EPERM);
	h->nlmsg_len = NLMSG_LENGTH(2);	/* too short for struct nlmsgerr */
	CHECK_RC(parse(buf, h->nlmsg_len, &s, &r), -EBADMSG);

	/* a message length below the header, and one beyond the buffer */
	n = build_mlx5(buf, 0);
	((struct nlmsghdr *)buf)->nlmsg_len = 8;
	CHECK_RC(parse(buf, n, &s, &r), -EBADMSG);
	((struct nlmsghdr *)buf)->nlmsg_len = (uint32_t)n + 100;
	CHECK_RC(parse(buf, n, &s, &r), -EBADMSG);

	/* random corruption: any result, no crash, no out-of-range read (exact-size copies) */
	srand(7);
	for (int i = 0; i < 1000; i++) {
		size_t m = build_mlx5(buf, 0);
		char *copy = malloc(m);
		memcpy(copy, buf, m);
		for (int k = 0; k < 1 + i % 4; k++)
			copy[(size_t)rand() % m] = (char)rand();
		parse(copy, m, &s, &r);
		free(copy);
	}
	ctr_set_free(&s);
	nl_result_free(&r);
}

/* The device list: mlx5_0, device 3, no port (so no port statistics). */
static size_t build_dev_get(char *buf)
{
	struct nlmsghdr *h = mnl_nlmsg_put_header(buf);

	h->nlmsg_type = RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_GET);
	h->nlmsg_flags = NLM_F_MULTI;
	mnl_attr_put_u32(h, RDMA_NLDEV_ATTR_DEV_INDEX, 3);
	mnl_attr_put_strz(h, RDMA_NLDEV_ATTR_DEV_NAME, "mlx5_0");
	mnl_attr_put_u32(h, RDMA_NLDEV_ATTR_PORT_INDEX, 0);
	return put_done(buf, h->nlmsg_len);
}

static void put_file(const char *path, const void *buf, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	CHECK(fd >= 0 && write(fd, buf, len) == (ssize_t)len, "%s: %s", path, strerror(errno));
	close(fd);
}

/*
 * The MR dump of mlx5_0: MR @mrn[i] of process @pid[i] (0: none named, a
 * kernel MR), 64 MiB each.
 */
static size_t build_res_mr(char *buf, unsigned n, const uint32_t *mrn, const pid_t *pid)
{
	struct nlmsghdr *h = mnl_nlmsg_put_header(buf);
	struct nlattr *tab, *ent;

	h->nlmsg_type = RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_RES_MR_GET);
	h->nlmsg_flags = NLM_F_MULTI;
	mnl_attr_put_u32(h, RDMA_NLDEV_ATTR_DEV_INDEX, 3);
	mnl_attr_put_strz(h, RDMA_NLDEV_ATTR_DEV_NAME, "mlx5_0");
	tab = mnl_attr_nest_start(h, RDMA_NLDEV_ATTR_RES_MR);
	for (unsigned i = 0; i < n; i++) {
		ent = mnl_attr_nest_start(h, RDMA_NLDEV_ATTR_RES_MR_ENTRY);
		mnl_attr_put_u32(h, RDMA_NLDEV_ATTR_RES_MRN, mrn[i]);
		mnl_attr_put_u64(h, RDMA_NLDEV_ATTR_RES_MRLEN, 64 << 20);
		if (pid[i])
			mnl_attr_put_u32(h, RDMA_NLDEV_ATTR_RES_PID, (uint32_t)pid[i]);
		mnl_attr_nest_end(h, ent);
	}
	mnl_attr_nest_end(h, tab);
	return put_done(buf, h->nlmsg_len);
}

/*
 * odpstat --replay over a directory of replies: the device list, the MR
 * dump when the test gives one, and a FIFO for the per-MR statistics,
 * which the test writes at every sample.
 */
struct replay {
	char dir[32], dev_get[PATH_MAX], res_mr[PATH_MAX], fifo[PATH_MAX], sys[PATH_MAX];
	pid_t pid;
	FILE *out;
	char *line;
	size_t cap;
};

/*
 * odpstat [-p @pid] [--procfs @procfs] --sysfs (empty) --replay DIR --json
 * @interval @count, with the MR dump @mr_dump of @len bytes (none: NULL)
 */
static void replay_start(struct replay *r, pid_t pid, const char *procfs, const void *mr_dump,
			 size_t len, const char *interval, unsigned count)
{
	static char buf[4096];
	char *odpstat = odpstat_path(), n[16], p[16];
	const char *argv[16];
	int out[2], a = 0;

	memset(r, 0, sizeof(*r));
	snprintf(r->dir, sizeof(r->dir), "/tmp/odpx-replay.XXXXXX");
	CHECK(mkdtemp(r->dir), "mkdtemp: %s", strerror(errno));
	snprintf(r->dev_get, sizeof(r->dev_get), "%s/dev-get.bin", r->dir);
	put_file(r->dev_get, buf, build_dev_get(buf));
	snprintf(r->res_mr, sizeof(r->res_mr), "%s/res-mr-mlx5_0.bin", r->dir);
	if (mr_dump)
		put_file(r->res_mr, mr_dump, len);
	snprintf(r->fifo, sizeof(r->fifo), "%s/stat-mr-mlx5_0.bin", r->dir);
	CHECK(mkfifo(r->fifo, 0600) == 0, "mkfifo: %s", strerror(errno));
	snprintf(r->sys, sizeof(r->sys), "%s/sys", r->dir);	/* no sysfs counters */
	CHECK(mkdir(r->sys, 0700) == 0, "mkdir");
	snprintf(n, sizeof(n), "%u", count);
	snprintf(p, sizeof(p), "%d", (int)pid);
	argv[a++] = odpstat;
	if (pid) {
		argv[a++] = "-p";
		argv[a++] = p;
	}
	if (procfs) {
		argv[a++] = "--procfs";
		argv[a++] = procfs;
	}
	for (const char *const *x = (const char *const[]){ "--sysfs", r->sys, "--replay", r->dir,
				   "--json", interval, n, NULL }; *x; x++)
		argv[a++] = *x;
	argv[a] = NULL;
	CHECK(pipe(out) == 0, "pipe");
	fflush(stdout);
	if (!(r->pid = fork())) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);	/* a failed test leaves no reader of the FIFO */
		dup2(out[1], 1);
		execv(odpstat, (char *const *)argv);
		_exit(127);
	}
	close(out[1]);
	CHECK((r->out = fdopen(out[0], "r")), "fdopen");
}

/*
 * The FIFO of the sample odpstat is taking, once it opens it: write the
 * reply there and close it.  The next sample's is a new FIFO at the same
 * name, in place before this one is written: the reader of this one
 * cannot get the next reply too.
 */
static int replay_fifo(struct replay *r)
{
	int fd;

	CHECK(WAIT_FOR((fd = open(r->fifo, O_WRONLY | O_NONBLOCK | O_CLOEXEC)) >= 0, 10),
	      "odpstat does not read %s: %s", r->fifo, strerror(errno));
	CHECK(unlink(r->fifo) == 0 && mkfifo(r->fifo, 0600) == 0, "a new %s: %s", r->fifo,
	      strerror(errno));
	CHECK(fcntl(fd, F_SETFL, 0) == 0, "blocking writes");
	return fd;
}

static void replay_feed(struct replay *r, const void *buf, size_t len)
{
	int fd = replay_fifo(r);

	CHECK(write(fd, buf, len) == (ssize_t)len, "write %s", r->fifo);
	close(fd);
}

static const char *replay_line(struct replay *r, unsigned k)
{
	CHECK(getline(&r->line, &r->cap, r->out) > 0, "odpstat ended after %u samples", k);
	return r->line;
}

static void replay_end(struct replay *r)
{
	CHECK(waitpid(r->pid, NULL, 0) == r->pid, "waitpid");
	fclose(r->out);
	free(r->line);
	unlink(r->fifo);
	unlink(r->dev_get);
	unlink(r->res_mr);	/* absent without an MR dump */
	rmdir(r->sys);
	rmdir(r->dir);
}

/* The number after "@key": in an odpstat JSON line. */
static double json_num(const char *line, const char *key)
{
	char k[64];
	const char *p;

	snprintf(k, sizeof(k), "\"%s\":", key);
	CHECK((p = strstr(line, k)), "no %s in odpstat's line: %.300s", key, line);
	return strtod(p + strlen(k), NULL);
}

/* The rate of counter @name of @where in an odpstat JSON line; NAN if null */
static double json_ctr_rate(const char *line, const char *where, const char *name)
{
	char k[160];
	const char *p;

	snprintf(k, sizeof(k), "\"where\":\"%s\",\"name\":\"%s\",", where, name);
	CHECK((p = strstr(line, k)) && (p = strstr(p, "\"rate\":")), "no %s %s in: %.300s", where,
	      name, line);
	p += strlen("\"rate\":");
	return strncmp(p, "null", 4) ? strtod(p, NULL) : NAN;
}

static void test_replay_per_mr(void)
{
	/*
	 * samples: the MRs listed, their page_faults and page_invalidations.
	 * MR 7 gains 100 faults from each listing to the next: its rate gives
	 * the seconds odpstat divided by, so counts come back exact.
	 */
	static const struct {
		unsigned n;
		uint32_t mrn[3];
		uint64_t faults[3], inval[3];
		double want_faults, want_inval;	/* in the interval that ends there */
		const char *what;
	} s[] = {
		{ 2, { 7, 8 }, { 1000, 5000 }, { 10, 4000 }, 0, 0, "" },
		{ 2, { 7, 9 }, { 1100, 50 }, { 10, 0 }, 150, 0, "MR 8 gone, MR 9 new" },
		{ 3, { 7, 9, 10 }, { 1200, 50, 1 }, { 10, 0, 0 }, 101, 0, "MR 10 new" },
		{ 0, { 0 }, { 0 }, { 0 }, 0, 0, "no statistics" },	/* an error reply */
		{ 3, { 7, 9, 10 }, { 1300, 60, 7 }, { 20, 0, 0 }, 0, 0, "after no statistics" },
		{ 2, { 7, 10 }, { 1400, 9 }, { 20, 5 }, 102, 5, "MR 9 gone" },
	};
	const unsigned ns = sizeof(s) / sizeof(s[0]);
	static char buf[16384];
	struct replay r;

	replay_start(&r, 0, NULL, NULL, 0, "0.3", ns - 1);
	for (unsigned k = 0; k < ns; k++) {
		uint64_t v[3][5];
		size_t len;

		for (unsigned i = 0; i < s[k].n; i++) {
			uint64_t row[5] = { s[k].faults[i], s[k].faults[i], s[k].inval[i],
					    s[k].inval[i], 0 };
			memcpy(v[i], row, sizeof(row));
		}
		if (s[k].n) {
			len = build_stat_mr(buf, s[k].n, s[k].mrn, (const uint64_t (*)[5])v, 0);
		} else {
			struct nlmsghdr *h = mnl_nlmsg_put_header(buf);
			struct nlmsgerr *err = mnl_nlmsg_put_extra_header(h, sizeof(*err));
			h->nlmsg_type = NLMSG_ERROR;
			err->error = -EOPNOTSUPP;
			len = h->nlmsg_len;
		}
		replay_feed(&r, buf, len);
		if (!k)
			continue;
		const char *line = replay_line(&r, k);
		double faults = json_num(line, "dev_fault_pages");
		double inval = json_num(line, "dev_inval_pages");
		if (s[k].want_faults) {
			double dt = 100 / json_ctr_rate(line, "mlx5_0/mr7", "page_faults");
			faults *= dt;
			inval *= dt;
		}
		CHECK(fabs(faults - s[k].want_faults) <= 0.5 && fabs(inval - s[k].want_inval) <= 0.5,
		      "sample %u (%s): %.1f faulted and %.1f invalidated pages in the interval,"
		      " want %.0f and %.0f", k, s[k].what, faults, inval, s[k].want_faults,
		      s[k].want_inval);
	}
	replay_end(&r);
	printf("odpstat over replayed per-MR statistics: MRs gone add nothing, new ones all\n");
}

/*
 * odpstat -p counts the per-MR statistics of that process's MRs only.  The
 * MR dump names process A (4242, whose /proc is tests/fixtures/procfs) for
 * MRs 7 and 9, process B for MR 8 and no process for MR 10 (a kernel MR);
 * all four fault in every interval, B's MR with as many invalidations,
 * which alone would be THRASH.  odpstat -p 4242 must count A's 150 faults
 * and 10 invalidations an interval, stay OK, and show no counter of MR 8
 * or MR 10 in its JSON.
 */
static void test_replay_pid(void)
{
	static const uint32_t mrn[4] = { 7, 8, 9, 10 };
	static const pid_t pid[4] = { 4242, 4343, 4242, 0 };
	static const uint64_t faults[4] = { 100, 5000, 50, 700 }, inval[4] = { 10, 4000, 0, 0 };
	static char buf[4096], dump[4096];
	char procfs[PATH_MAX + 16];
	const unsigned ns = 5;
	struct replay r;

	snprintf(procfs, sizeof(procfs), "%s/procfs", fx);
	replay_start(&r, 4242, procfs, dump, build_res_mr(dump, 4, mrn, pid), "0.3", ns - 1);
	for (unsigned k = 0; k < ns; k++) {
		uint64_t v[4][5];

		for (unsigned i = 0; i < 4; i++) {
			uint64_t f = 1000 * (i + 1) + faults[i] * k, n = 100 * (i + 1) + inval[i] * k;
			uint64_t row[5] = { f, f, n, n, 0 };
			memcpy(v[i], row, sizeof(row));
		}
		replay_feed(&r, buf, build_stat_mr(buf, 4, mrn, (const uint64_t (*)[5])v, 0));
		if (!k)
			continue;
		const char *line = replay_line(&r, k);
		double dt = 100 / json_ctr_rate(line, "mlx5_0/mr7", "page_faults");
		double f = json_num(line, "dev_fault_pages") * dt;
		double n = json_num(line, "dev_inval_pages") * dt;
		CHECK(fabs(f - 150) <= 0.5 && fabs(n - 10) <= 0.5,
		      "interval %u: %.1f faulted and %.1f invalidated pages, want process 4242's 150"
		      " and 10", k, f, n);
		CHECK(strstr(line, "\"state\":\"OK\""), "interval %u: another process's faults"
		      " make the state: %.120s", k, line);
		CHECK(!strstr(line, "\"mlx5_0/mr8\"") && !strstr(line, "\"mlx5_0/mr10\""),
		      "interval %u: counters of MRs not of process 4242 in: %.300s", k, line);
		CHECK(strstr(line, "\"per_mr_stats\":[{\"dev\":\"mlx5_0\",\"mrs\":2,\"with_stats\":2,"),
		      "interval %u: per_mr_stats not of process 4242's 2 MRs: %.300s", k,
		      strstr(line, "\"per_mr_stats\""));
	}
	replay_end(&r);
	printf("odpstat -p over replayed per-MR statistics of two processes: that process's only\n");
}

/*
 * Each source timed where it is read.  Two counters grow at known rates: the
 * hits of a forged segment of ours (a thread keeps them at HITS_RATE x the
 * time), and an MR's page_faults (FAULT_RATE x the time the reply is
 * written), while every other sample's netlink reply is held back 0.4 s of
 * the 0.8 s interval (the kernel's can take up to 2 s).  odpstat -p must
 * see both rates, to 20% (a reply is read a wakeup after it is written:
 * up to 60 ms on a loaded machine of two CPUs under TSan).  It timed every source at the start of the sample,
 * before netlink: the odpx counters, read after a held reply, and the
 * faults, written at its end, came out 1.5 times their rate in one interval
 * and half of it in the next.
 */
#define HITS_RATE 1e6
#define FAULT_RATE 1e5
static double t0;
static _Atomic bool hits_stop;

static void *hits_writer(void *arg)
{
	uint64_t *hits = arg;

	while (!atomic_load(&hits_stop)) {
		struct timespec t = { 0, 1000000 };
		__atomic_store_n(hits, (uint64_t)(HITS_RATE * (now_s() - t0)), __ATOMIC_RELAXED);
		nanosleep(&t, NULL);
	}
	return NULL;
}

static void test_replay_timing(void)
{
	static char buf[4096];
	static const uint32_t mrn[1] = { 7 };
	static char dump[4096];
	const pid_t me = getpid();
	int seg = forge(me, 950, 0), fd;
	char *map = mmap(NULL, SEG_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED,
			 seg, 0);
	struct replay r;
	pthread_t thr;

	CHECK(map != MAP_FAILED, "mmap: %s", strerror(errno));
	t0 = now_s();
	CHECK(pthread_create(&thr, NULL, hits_writer,
			     map + SEG_HDR_BYTES + offsetof(struct stat_shard, hits)) == 0,
	      "thread");
	replay_start(&r, me, NULL, dump, build_res_mr(dump, 1, mrn, &me), "0.8", 6);
	for (unsigned k = 0; k <= 6; k++) {
		struct timespec held = { 0, 400000000 };
		uint64_t v[1][5] = { { 0 } };
		size_t len;

		fd = replay_fifo(&r);
		if (k % 2)
			nanosleep(&held, NULL);
		v[0][0] = v[0][1] = (uint64_t)(FAULT_RATE * (now_s() - t0));
		len = build_stat_mr(buf, 1, mrn, (const uint64_t (*)[5])v, 0);
		CHECK(write(fd, buf, len) == (ssize_t)len, "write %s", r.fifo);
		close(fd);
		if (!k)
			continue;
		const char *line = replay_line(&r, k);
		double hits = json_num(line, "rates\":{\"hits"), faults = json_num(line, "dev_fault_pages");
		CHECK(fabs(hits / HITS_RATE - 1) < 0.2 && fabs(faults / FAULT_RATE - 1) < 0.2,
		      "interval %u (netlink %s): %.0f hits/s (want %.0f), %.0f faulted pages/s"
		      " (want %.0f)", k, k % 2 ? "held 0.4 s" : "at once", hits, HITS_RATE, faults,
		      FAULT_RATE);
	}
	replay_end(&r);
	atomic_store(&hits_stop, true);
	pthread_join(thr, NULL);
	munmap(map, SEG_BYTES);
	close(seg);
	printf("odpstat with netlink held back every other sample: odpx and MR rates right\n");
}

int main(void)
{
	find_fixtures(fx, sizeof(fx), "netlink-rxe");
	test_recorded();
	test_built();
	test_many_devices();
	test_replay_per_mr();
	test_replay_pid();
	test_replay_timing();
	printf("recorded rxe replies and built mlx5 per-MR replies parse; malformed ones are rejected\n");
	return 0;
}
