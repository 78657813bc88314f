// SPDX-License-Identifier: MIT
/*
 * dev-preload-fidelity: what an unmodified program sees of its MRs under
 * libodpx-preload.so is what it sees natively.  Each case runs in a child
 * (this program again) over rxe0 on lo, natively, then under the drop-in in
 * pin and in explicit mode; every line the child prints of its results must
 * be the native run's, and the native run must show what the case is about
 * (otherwise the comparison proves nothing).
 *
 * - odp: a program that asks for ODP (IBV_ACCESS_ON_DEMAND, through
 *   ibv_reg_mr and ibv_reg_mr_ex) and madvise(MADV_DONTNEED)s its buffers
 *   between iterations, as ODP programs may: RDMA WRITE, RDMA READ and
 *   SEND/RECV between an ODP and a pinned MR and between two ODP MRs, every
 *   byte checked; ibv_advise_mr() on its ODP MR.  Pinned behind the
 *   program's back, the MR stays on the old pages and the bytes are wrong.
 * - keys: MRs over disjoint parts of one buffer and over the same part twice
 *   (ibv_reg_mr, and ibv_reg_buf_mr where libibverbs has it) have lkeys of
 *   their own, and each moves its own bytes.
 * - bufmr: ibv_reg_buf_mr past the buffer's end, at an offset whose length
 *   runs past it, and on another PD than the buffer's: refused as natively.
 * - hugetlb: IBV_ACCESS_HUGETLB with and without ON_DEMAND: the device's
 *   answer, whatever it is.
 */
#include <dlfcn.h>

#include "dev-preload.h"

#define LW		IBV_ACCESS_LOCAL_WRITE
#define LW_REMOTE	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)
#define ODP		(1 << 6)	/* IBV_ACCESS_ON_DEMAND */
#define HUGETLB		(1 << 7)	/* IBV_ACCESS_HUGETLB */
#define PAGES		4
#define ITERS		3

/* rdma-core 59+ and 64+ calls, absent from older headers: found at run time */
struct mr_init_attr {
	size_t length;
	int access;
	uint64_t comp_mask;
	uint64_t iova;
	void *addr;
	int fd;
	uint64_t fd_offset;
	void *dmah;
	void *buf;
};
typedef struct ibv_mr *(*reg_mr_ex_fn)(struct ibv_pd *, struct mr_init_attr *);
typedef void *(*alloc_buf_fn)(struct ibv_pd *, size_t, void **);
typedef void (*free_buf_fn)(void *);
typedef struct ibv_mr *(*reg_buf_mr_fn)(struct ibv_pd *, void *, void *, size_t, int);

#define expect(ok, ...) do { if (!(ok)) dev_fail(__VA_ARGS__); } while (0)

static struct dev d;

/* "NAME: ok" or "NAME: errno N (TEXT)" for a registration; the MR or NULL. */
static struct ibv_mr *said(const char *name, struct ibv_mr *mr)
{
	if (mr)
		printf("%s: ok\n", name);
	else
		printf("%s: errno %d (%s)\n", name, errno, strerror(errno));
	return mr;
}

/* One SEND of @len bytes from @src (@smr) into a receive posted on @dst (@dmr). */
static int send_recv(struct ibv_mr *smr, void *src, struct ibv_mr *dmr, void *dst, uint32_t len)
{
	struct ibv_sge rs = { .addr = (uintptr_t)dst, .length = len, .lkey = dmr->lkey };
	struct ibv_sge ss = { .addr = (uintptr_t)src, .length = len, .lkey = smr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 7, .sg_list = &rs, .num_sge = 1 }, *rbad;
	struct ibv_send_wr swr = { .wr_id = 8, .sg_list = &ss, .num_sge = 1,
				   .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *sbad;
	struct ibv_wc wc;

	if (ibv_post_recv(d.qp, &rwr, &rbad) || ibv_post_send(d.qp, &swr, &sbad))
		return -1;
	for (int i = 0; i < 2; i++)
		if (dev_wait_wc(&d, &wc) || wc.status != IBV_WC_SUCCESS)
			return -1;
	return 0;
}

/* Every transfer between @a and @b (@len bytes each, page-aligned) moves the right bytes. */
static void transfers(const char *what, struct ibv_mr *amr, unsigned char *a, struct ibv_mr *bmr,
		      unsigned char *b, size_t len, uint32_t seed)
{
	static unsigned char want[PAGES * 16384];

	dev_fill(a, len, seed);
	memcpy(want, a, len);
	memset(b, 0, len);
	expect(dev_rdma(&d, IBV_WR_RDMA_WRITE, amr, a, (uint32_t)len, b, bmr->rkey) == 0,
	       "%s: RDMA WRITE did not complete", what);
	expect(dev_same(what, b, want, len), "%s: RDMA WRITE moved wrong bytes", what);
	dev_fill(b, len, seed + 1);
	memcpy(want, b, len);
	memset(a, 0, len);
	expect(dev_rdma(&d, IBV_WR_RDMA_READ, amr, a, (uint32_t)len, b, bmr->rkey) == 0,
	       "%s: RDMA READ did not complete", what);
	expect(dev_same(what, a, want, len), "%s: RDMA READ moved wrong bytes", what);
	dev_fill(a, len, seed + 2);
	memcpy(want, a, len);
	memset(b, 0, len);
	expect(send_recv(amr, a, bmr, b, (uint32_t)len) == 0, "%s: SEND/RECV did not complete",
	       what);
	expect(dev_same(what, b, want, len), "%s: SEND/RECV moved wrong bytes", what);
}

static void case_odp(void)
{
	size_t len = PAGES * d.page_bytes;
	unsigned char *p = dev_map(len, NULL), *o1 = dev_map(len, NULL), *o2 = dev_map(len, NULL);
	reg_mr_ex_fn reg_ex = (reg_mr_ex_fn)dlsym(RTLD_DEFAULT, "ibv_reg_mr_ex");
	struct ibv_mr *pmr, *omr1, *omr2;

	dev_connect_self(&d);
	pmr = dev_reg(&d, p, len, LW_REMOTE);
	omr1 = said("odp reg_mr", ibv_reg_mr(d.pd, o1, len, LW_REMOTE | ODP));
	if (reg_ex) {
		struct mr_init_attr in = { .length = len, .access = LW_REMOTE | ODP,
					   .comp_mask = 1 << 1 /* ADDR */, .addr = o2 };
		omr2 = said("odp reg_mr_ex", reg_ex(d.pd, &in));
	} else {
		omr2 = said("odp reg_mr (no ibv_reg_mr_ex)", ibv_reg_mr(d.pd, o2, len, LW_REMOTE | ODP));
	}
	if (!omr1 || !omr2)
		return;
	for (int i = 0; i < ITERS; i++) {
		transfers("pinned -> ODP", pmr, p, omr1, o1, len, 10u * i + 1);
		transfers("ODP -> pinned", omr1, o1, pmr, p, len, 10u * i + 4);
		transfers("ODP -> ODP", omr1, o1, omr2, o2, len, 10u * i + 7);
		/* the pages go; ODP follows the page tables to the new ones */
		expect(madvise(o1, len, MADV_DONTNEED) == 0 && madvise(o2, len, MADV_DONTNEED) == 0,
		       "madvise: %s", strerror(errno));
	}
	printf("odp bytes: right in %d iterations with MADV_DONTNEED between them\n", ITERS);
	struct ibv_sge sge = { .addr = (uintptr_t)o1, .length = (uint32_t)len, .lkey = omr1->lkey };
	int rc = ibv_advise_mr(d.pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH,
			       &sge, 1);
	printf("odp advise_mr: %d\n", rc);
	expect(ibv_dereg_mr(omr1) == 0 && ibv_dereg_mr(omr2) == 0 && ibv_dereg_mr(pmr) == 0,
	       "ibv_dereg_mr failed");
}

/* @n MRs: their lkeys differ, and each carries bytes through its own key. */
static void distinct(const char *what, struct ibv_mr **mr, unsigned char **at, int n, size_t len,
		     struct ibv_mr *pmr, unsigned char *p)
{
	static unsigned char want[2 * 16384];
	int same = 0;

	for (int i = 0; i < n; i++)
		for (int j = i + 1; j < n; j++)
			same += mr[i]->lkey == mr[j]->lkey;
	printf("keys %s: %s\n", what, same ? "shared" : "distinct");
	for (int i = 0; i < n; i++) {
		dev_fill(at[i], len, 40u + (uint32_t)i);
		memcpy(want, at[i], len);
		memset(p, 0, len);
		expect(dev_rdma(&d, IBV_WR_RDMA_WRITE, mr[i], at[i], (uint32_t)len, p, pmr->rkey) == 0,
		       "keys %s: RDMA WRITE through MR %d failed", what, i);
		expect(dev_same(what, p, want, len), "keys %s: MR %d moved wrong bytes", what, i);
	}
}

static void case_keys(void)
{
	size_t half = 2 * d.page_bytes, len = 2 * half;
	unsigned char *b = dev_map(len, NULL), *p = dev_map(len, NULL);
	alloc_buf_fn alloc_buf = (alloc_buf_fn)dlsym(RTLD_DEFAULT, "ibv_alloc_buf");
	free_buf_fn free_buf = (free_buf_fn)dlsym(RTLD_DEFAULT, "ibv_free_buf");
	reg_buf_mr_fn reg_buf = (reg_buf_mr_fn)dlsym(RTLD_DEFAULT, "ibv_reg_buf_mr");
	struct ibv_mr *mr[3];
	unsigned char *at[3] = { b, b + half, b };

	dev_connect_self(&d);
	struct ibv_mr *pmr = dev_reg(&d, p, len, LW_REMOTE);
	for (int i = 0; i < 3; i++)
		mr[i] = dev_reg(&d, at[i], half, LW);
	distinct("reg_mr", mr, at, 3, half, pmr, p);
	for (int i = 0; i < 3; i++)
		expect(ibv_dereg_mr(mr[i]) == 0, "ibv_dereg_mr failed");
	/* a local-only MR's rkey, as the device reports it */
	mr[0] = dev_reg(&d, b, half, LW);
	printf("keys local rkey: %s\n", mr[0]->rkey == mr[0]->lkey ? "the lkey" :
	       mr[0]->rkey ? "its own" : "zero");
	expect(ibv_dereg_mr(mr[0]) == 0, "ibv_dereg_mr failed");

	if (!alloc_buf || !reg_buf || !free_buf) {
		printf("keys reg_buf_mr: not in this libibverbs\n");
	} else {
		void *h;
		unsigned char *q = alloc_buf(d.pd, len, &h);
		expect(q != NULL, "ibv_alloc_buf: %s", strerror(errno));
		unsigned char *qat[3] = { q, q + half, q };
		for (int i = 0; i < 3; i++) {
			mr[i] = reg_buf(d.pd, h, qat[i], half, LW);
			expect(mr[i] != NULL, "ibv_reg_buf_mr %d: %s", i, strerror(errno));
		}
		distinct("reg_buf_mr", mr, qat, 3, half, pmr, p);
		for (int i = 0; i < 3; i++)
			expect(ibv_dereg_mr(mr[i]) == 0, "ibv_dereg_mr failed");
		free_buf(h);
	}
	expect(ibv_dereg_mr(pmr) == 0, "ibv_dereg_mr failed");
}

static void case_bufmr(void)
{
	alloc_buf_fn alloc_buf = (alloc_buf_fn)dlsym(RTLD_DEFAULT, "ibv_alloc_buf");
	free_buf_fn free_buf = (free_buf_fn)dlsym(RTLD_DEFAULT, "ibv_free_buf");
	reg_buf_mr_fn reg_buf = (reg_buf_mr_fn)dlsym(RTLD_DEFAULT, "ibv_reg_buf_mr");
	size_t len = 4 * d.page_bytes;
	struct ibv_mr *mr;
	void *h;

	if (!alloc_buf || !reg_buf || !free_buf) {
		printf("bufmr: not in this libibverbs\n");
		return;
	}
	unsigned char *q = alloc_buf(d.pd, len, &h);
	expect(q != NULL, "ibv_alloc_buf: %s", strerror(errno));
	struct ibv_pd *pd2 = ibv_alloc_pd(d.ctx);
	expect(pd2 != NULL, "ibv_alloc_pd: %s", strerror(errno));
	struct {
		const char *name;
		struct ibv_pd *pd;
		size_t off, len;
	} t[] = {
		{ "bufmr whole", d.pd, 0, len },
		{ "bufmr past the end", d.pd, 0, len + d.page_bytes },
		{ "bufmr offset past the end", d.pd, d.page_bytes, len },
		{ "bufmr another PD", pd2, 0, len },
	};
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		errno = 0;
		if ((mr = said(t[i].name, reg_buf(t[i].pd, h, q + t[i].off, t[i].len, LW))))
			expect(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr failed");
	}
	free_buf(h);
	expect(ibv_dealloc_pd(pd2) == 0, "ibv_dealloc_pd failed");
}

static void case_hugetlb(void)
{
	size_t len = 4 * d.page_bytes;
	unsigned char *b = dev_map(len, NULL);
	struct ibv_mr *mr;

	errno = 0;
	if ((mr = said("hugetlb odp", ibv_reg_mr(d.pd, b, len, LW | ODP | HUGETLB))))
		expect(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr failed");
	errno = 0;
	if ((mr = said("hugetlb pinned", ibv_reg_mr(d.pd, b, len, LW | HUGETLB))))
		expect(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr failed");
}

static const struct {
	const char *name;
	void (*run)(void);
	const char *native_must;	/* a line the native run must print, or NULL */
} cases[] = {
	{ "odp", case_odp, "odp bytes: right" },
	{ "keys", case_keys, "keys reg_mr: distinct" },
	{ "bufmr", case_bufmr, NULL },
	{ "hugetlb", case_hugetlb, NULL },
};
#define NCASES (sizeof(cases) / sizeof(cases[0]))

static int child(const char *name)
{
	dev_open(&d);
	for (size_t i = 0; i < NCASES; i++) {
		if (!strcmp(cases[i].name, name)) {
			cases[i].run();
			printf("case %s done\n", name);
			return 0;
		}
	}
	dev_fail("no case %s", name);
}

/* ---- the parent ---- */

static const struct pre_cfg native = { "native", NULL, NULL, 0 },
	explicit = { "explicit", "explicit", NULL, 0 }, pin = { "pin", "pin", NULL, 0 };

/* Case @i under @c: 0, or 1 after saying why it differs from the native run in @want. */
static int run_case(size_t i, const struct pre_cfg *c, char *want, size_t cap)
{
	static char out[1 << 16], got[8192];
	char log[64], prefix[32], *cargv[] = { (char *)pre_path("dev-preload-fidelity"), "--case",
					       (char *)cases[i].name, NULL };
	struct pre_counts k;

	snprintf(log, sizeof(log), "/tmp/pre-fid.%d", (int)getpid());
	int rc = pre_wait(pre_spawn(c, cargv, log), dev_now_ms() + PRE_RUN_TIMEOUT_MS);
	pre_slurp(log, out, sizeof(out));
	unlink(log);
	snprintf(prefix, sizeof(prefix), "%s ", cases[i].name);
	pre_lines(out, prefix, c->mode ? got : want, c->mode ? sizeof(got) : cap);
	if (rc != 0 || !strstr(out, "done")) {
		pre_show(cases[i].name, out);
		printf("FAIL: case %s (%s): exit %d\n", cases[i].name, c->name, rc);
		return 1;
	}
	if (!c->mode) {
		if (cases[i].native_must && !strstr(want, cases[i].native_must))
			dev_fail("case %s natively lacks \"%s\": the test means nothing here",
				 cases[i].name, cases[i].native_must);
		printf("%-8s native:\n%s", cases[i].name, want);
		return 0;
	}
	if (strcmp(got, want)) {
		pre_show(cases[i].name, out);
		printf("FAIL: case %s (%s) saw\n%snatively\n%s", cases[i].name, c->name, got, want);
		return 1;
	}
	if (!pre_counts(out, &k) || strcmp(k.mode, c->mode)) {
		pre_show(cases[i].name, out);
		printf("FAIL: case %s (%s): no exit line in mode %s\n", cases[i].name, c->name,
		       c->mode);
		return 1;
	}
	printf("%-8s %-8s as natively (served %" PRIu64 ", passthrough %" PRIu64 ")\n",
	       cases[i].name, c->name, k.served, k.passthrough);
	return 0;
}

int main(int argc, char **argv)
{
	static char want[8192], failed[512];
	struct dev probe;

	if (argc == 3 && !strcmp(argv[1], "--case"))
		return child(argv[2]);
	dev_open(&probe);	/* a device with the loopback GID, or skip (fail in the guest) */
	dev_close(&probe);
	for (size_t i = 0; i < NCASES; i++) {
		if (run_case(i, &native, want, sizeof(want)))
			dev_fail("case %s fails natively", cases[i].name);
		for (int m = 0; m < 2; m++) {
			const struct pre_cfg *c = m ? &explicit : &pin;
			if (run_case(i, c, want, sizeof(want)))
				snprintf(failed + strlen(failed), sizeof(failed) - strlen(failed),
					 " %s (%s)", cases[i].name, c->name);
		}
	}
	if (failed[0])
		dev_fail("the drop-in differs from the native run (above) in:%s", failed);
	printf("ok\n");
	return 0;
}
