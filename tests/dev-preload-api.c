// SPDX-License-Identifier: MIT
/*
 * dev-preload-api: what libodpx-preload.so answers for the verbs calls around
 * a registration besides ibv_reg_mr/ibv_dereg_mr.  Each case runs in a child
 * (this program again, with the case's name) over rxe0 on lo, under the drop-in
 * in explicit and pin modes, and natively where the drop-in must give
 * libibverbs' own answer.  The parent checks the child's exit status, what it
 * printed, and the drop-in's exit line (ODPX_PRELOAD_VERBOSE): contexts,
 * registrations served and released, pass-throughs.
 *
 * - rereg: ibv_rereg_mr of a shadow MR (a new translation, access, PD, an
 *   unknown flag) answers what the device answers natively (rxe refuses
 *   rereg: EOPNOTSUPP), and the MR works after each: a refused rereg leaves
 *   it as it was; a taken translation moves its keys to the new buffer and
 *   the old rkey no longer reaches the old one.
 * - import: ibv_import_mr of a shadow's handle fails with EINVAL (whatever
 *   the provider answers for a real handle), ibv_unimport_mr of a shadow is
 *   ignored with a message (the shadow still deregisters); the handle of a
 *   real MR (passed through) imports as natively.
 * - dealloc: ibv_dealloc_pd with a shadow MR live on it is EBUSY, as natively
 *   with a real MR; once the application's MRs are gone it succeeds, the PD's
 *   context (which holds MRs of its own on the PD) closed first; a new PD then
 *   gets a new context.
 * - pass-through, one child for all: IBV_ACCESS_MW_BIND, IBV_ACCESS_ZERO_BASED,
 *   ibv_reg_mr_iova and ibv_reg_mr_iova2 with an iova other than the address,
 *   dma-buf (ibv_reg_dmabuf_mr), IBV_ACCESS_FLUSH_GLOBAL and an access bit no
 *   verbs.h defines: each gets exactly libibverbs' native answer (an MR, or
 *   the same errno); an MR is a real one (a kernel handle), counted once in
 *   the context's preload_passthrough (odpstat -p, after each) and in the exit
 *   line's passthrough, and nothing is served.  MW_BIND and the two iovas
 *   must work natively for the test to mean anything.
 */
#include <linux/udmabuf.h>
#include <sys/ioctl.h>

#include "dev-preload.h"

/* access bits newer than bookworm's rdma-core 44 headers (values from later verbs.h) */
#define ACC_FLUSH_GLOBAL	(1 << 8)
#define ACC_UNDEFINED		(1 << 15)	/* below the optional range, defined by no verbs.h */
#define REREG_UNKNOWN_FLAG	(1 << 10)
#define BUF_BYTES		(64 * 1024)
#define LW			IBV_ACCESS_LOCAL_WRITE
#define LW_REMOTE		(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

/* ---- the children: one case each, in this process, over rxe0 ---- */

static struct dev d;

/* fail with the message unless @ok */
#define expect(ok, ...) do { if (!(ok)) dev_fail(__VA_ARGS__); } while (0)

/* RDMA WRITE @seed's bytes from @src into @dst through @rkey, and check they landed. */
static void write_lands(struct ibv_mr *src_mr, unsigned char *src, unsigned char *dst, size_t len,
			uint32_t rkey, uint32_t seed, const char *what)
{
	static unsigned char want[2 * BUF_BYTES];

	dev_fill(src, len, seed);
	memcpy(want, src, len);
	memset(dst, 0, len);
	expect(dev_rdma(&d, IBV_WR_RDMA_WRITE, src_mr, src, (uint32_t)len, dst, rkey) == 0,
	       "%s: RDMA WRITE failed", what);
	expect(dev_same(what, dst, want, len), "%s: the bytes did not land", what);
}

/* "rereg NAME: ok" or "rereg NAME: rc N errno E" */
static int rereg_said(const char *name, int rc)
{
	if (rc)
		printf("rereg %s: rc %d errno %d (%s)\n", name, rc, errno, strerror(errno));
	else
		printf("rereg %s: ok\n", name);
	return rc;
}

static void case_rereg(void)
{
	unsigned char *src = dev_map(2 * BUF_BYTES, NULL), *a = dev_map(BUF_BYTES, NULL);
	unsigned char *b = dev_map(2 * BUF_BYTES, NULL);
	struct ibv_pd *pd2;

	dev_connect_self(&d);
	struct ibv_mr *src_mr = dev_reg(&d, src, 2 * BUF_BYTES, LW_REMOTE);
	struct ibv_mr *mr = dev_reg(&d, a, BUF_BYTES, LW_REMOTE);
	uint32_t lkey = mr->lkey, rkey = mr->rkey;
	write_lands(src_mr, src, a, BUF_BYTES, mr->rkey, 1, "before rereg");

	/* a new translation: the new buffer through the MR's keys, or the MR as it was */
	errno = 0;
	if (!rereg_said("translation", ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, b,
						     2 * BUF_BYTES, 0))) {
		expect(mr->addr == b && mr->length == 2 * BUF_BYTES && mr->pd == d.pd,
		       "rereg CHANGE_TRANSLATION: addr %p length %zu", mr->addr, mr->length);
		write_lands(src_mr, src, b, 2 * BUF_BYTES, mr->rkey, 2, "after rereg to a new buffer");
		write_lands(mr, b, src, 2 * BUF_BYTES, src_mr->rkey, 3, "new lkey of the rereg'd MR");
	} else {
		expect(mr->addr == a && mr->lkey == lkey && mr->rkey == rkey,
		       "a refused rereg changed the MR");
		write_lands(src_mr, src, a, BUF_BYTES, mr->rkey, 2, "after a refused rereg");
	}
	void *at = mr->addr;
	size_t len = mr->length;

	/* access: local only, then remote again, RDMA READ through it */
	errno = 0;
	rereg_said("access local", ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, LW));
	errno = 0;
	rereg_said("access remote", ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
						 LW_REMOTE));
	expect(mr->addr == at && mr->length == len, "rereg CHANGE_ACCESS moved the MR");
	dev_fill(at, len, 4);
	memset(src, 0, len);
	expect(dev_rdma(&d, IBV_WR_RDMA_READ, src_mr, src, (uint32_t)len, at, mr->rkey) == 0,
	       "RDMA READ through the MR's rkey after the access reregs failed");
	expect(dev_same("RDMA READ after the access reregs", src, at, len),
	       "RDMA READ after the access reregs: wrong bytes");

	errno = 0;
	rereg_said("unknown flag", ibv_rereg_mr(mr, REREG_UNKNOWN_FLAG, NULL, NULL, 0, 0));

	/* another PD: the MR moves there and holds that PD busy, or stays */
	pd2 = ibv_alloc_pd(d.ctx);
	expect(pd2 != NULL, "ibv_alloc_pd: %s", strerror(errno));
	errno = 0;
	if (!rereg_said("pd", ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0))) {
		expect(mr->pd == pd2, "rereg CHANGE_PD: pd %p want %p", (void *)mr->pd, (void *)pd2);
		int rc = ibv_dealloc_pd(pd2);
		expect(rc == EBUSY, "ibv_dealloc_pd of the PD the MR moved to: %d, want EBUSY", rc);
	}
	expect(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr of the rereg'd MR failed");
	int rc = ibv_dealloc_pd(pd2);
	expect(rc == 0, "ibv_dealloc_pd once the MR is gone: %d (%s)", rc, strerror(rc));

	/* a translation that was taken: the old rkey no longer reaches the old buffer */
	if (at != a) {
		memset(a, 0, BUF_BYTES);
		rc = dev_rdma(&d, IBV_WR_RDMA_WRITE, src_mr, src, BUF_BYTES, a, rkey);
		expect(rc != 0 || dev_all(a, BUF_BYTES, 0),
		       "the old rkey still writes into the buffer the MR left");
		printf("rereg old rkey: refused\n");
	}
	printf("rereg done\n");
}

/* "import NAME: ok" (the import's lkey matched, unimported) or "import NAME: errno N" */
static void try_import(struct ibv_mr *mr, const char *name)
{
	errno = 0;
	struct ibv_mr *im = ibv_import_mr(d.pd, mr->handle);
	if (!im) {
		printf("import %s: errno %d (%s)\n", name, errno, strerror(errno));
		return;
	}
	expect(im->lkey == mr->lkey && im->length == mr->length,
	       "import %s: lkey 0x%x length %zu, want 0x%x %zu", name, im->lkey, im->length,
	       mr->lkey, mr->length);
	ibv_unimport_mr(im);
	printf("import %s: ok\n", name);
}

static void case_import(void)
{
	unsigned char *a = dev_map(BUF_BYTES, NULL), *b = dev_map(BUF_BYTES, NULL);

	struct ibv_mr *mr = dev_reg(&d, a, BUF_BYTES, LW);
	try_import(mr, "reg");
	/* unimport of what ibv_reg_mr returned: under the drop-in a shadow, left alone */
	if (getenv("LD_PRELOAD")) {
		ibv_unimport_mr(mr);
		expect(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr after ibv_unimport_mr of a shadow failed");
	} else {
		expect(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr failed");
	}
	struct ibv_mr *real = dev_reg(&d, b, BUF_BYTES, LW | IBV_ACCESS_MW_BIND);
	try_import(real, "mw_bind");
	expect(ibv_dereg_mr(real) == 0, "ibv_dereg_mr of the MW_BIND MR failed");
}

/*
 * Two buffers of BUF_BYTES side by side in one explicit-mode chunk (64 MiB,
 * aligned: the default): of a mapping of four, the half that crosses no
 * chunk boundary.
 */
static unsigned char *map_in_one_chunk(void)
{
	const uintptr_t chunk = 64UL << 20;
	unsigned char *m = dev_map(4 * BUF_BYTES, NULL);
	uintptr_t edge = ((uintptr_t)m + chunk) & ~(chunk - 1);

	return edge < (uintptr_t)m + 2 * BUF_BYTES ? (unsigned char *)edge : m;
}

static void case_dealloc(void)
{
	unsigned char *a = map_in_one_chunk(), *b = a + BUF_BYTES;
	struct ibv_mr *mr = dev_reg(&d, a, BUF_BYTES, LW);
	int rc = ibv_dealloc_pd(d.pd);

	expect(rc == EBUSY, "ibv_dealloc_pd with an MR live on it: %d (%s), want EBUSY", rc,
	       strerror(rc));
	/* the PD (and its context) still work */
	struct ibv_mr *mr2 = dev_reg(&d, b, BUF_BYTES, LW);
	expect(ibv_dereg_mr(mr2) == 0 && ibv_dereg_mr(mr) == 0, "ibv_dereg_mr failed");
	rc = ibv_dealloc_pd(d.pd);
	expect(rc == 0, "ibv_dealloc_pd once its MRs are gone: %d (%s)", rc, strerror(rc));
	/* a PD allocated now may get the same address: it is a new PD, with a new context */
	d.pd = ibv_alloc_pd(d.ctx);
	expect(d.pd != NULL, "ibv_alloc_pd: %s", strerror(errno));
	mr = dev_reg(&d, a, BUF_BYTES, LW);
	expect(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr on the new PD failed");
	rc = ibv_dealloc_pd(d.pd);
	expect(rc == 0, "ibv_dealloc_pd of the new PD: %d (%s)", rc, strerror(rc));
	printf("dealloc: EBUSY with an MR, then 0\n");
}

/* A dma-buf of @len bytes: udmabuf over a memfd where /dev/udmabuf exists, else the memfd. */
static int dmabuf_fd(size_t len, const char **kind)
{
	int mfd = memfd_create("dev-preload-api", MFD_ALLOW_SEALING);
	int dev = open("/dev/udmabuf", O_RDWR);

	expect(mfd >= 0, "memfd_create: %s", strerror(errno));
	expect(ftruncate(mfd, (off_t)len) == 0, "ftruncate: %s", strerror(errno));
	*kind = "memfd, not a dma-buf (no /dev/udmabuf)";
	if (dev < 0)
		return mfd;
	expect(fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK) == 0, "F_SEAL_SHRINK: %s", strerror(errno));
	struct udmabuf_create c = { .memfd = (uint32_t)mfd, .offset = 0, .size = len };
	int fd = ioctl(dev, UDMABUF_CREATE, &c);
	expect(fd >= 0, "UDMABUF_CREATE: %s", strerror(errno));
	*kind = "udmabuf";
	return fd;
}

/* The forced pass-throughs: name, and whether the device must take it (else: as natively). */
static const struct {
	const char *name;
	int must_work;
} pt_cases[] = {
	{ "mw_bind", 1 }, { "iova", 1 }, { "iova2", 1 }, { "zero_based", 0 }, { "dmabuf", 0 },
	{ "flush", 0 }, { "undefined", 0 },
};
#define NPT (sizeof(pt_cases) / sizeof(pt_cases[0]))

static struct ibv_mr *reg_passthrough(const char *name, unsigned char *a)
{
	uint64_t iova = 0x10000;	/* not a's address: a mapping is never at 64 KiB */

	errno = 0;
	if (!strcmp(name, "mw_bind"))
		return ibv_reg_mr(d.pd, a, BUF_BYTES, LW | IBV_ACCESS_MW_BIND);
	if (!strcmp(name, "zero_based"))
		return ibv_reg_mr(d.pd, a, BUF_BYTES, LW | IBV_ACCESS_ZERO_BASED);
	if (!strcmp(name, "iova"))
		return ibv_reg_mr_iova(d.pd, a, BUF_BYTES, iova, LW);
	if (!strcmp(name, "iova2"))
		return ibv_reg_mr_iova2(d.pd, a, BUF_BYTES, iova, LW);
	if (!strcmp(name, "flush"))
		return ibv_reg_mr(d.pd, a, BUF_BYTES, LW | ACC_FLUSH_GLOBAL);
	if (!strcmp(name, "undefined"))
		return ibv_reg_mr(d.pd, a, BUF_BYTES, LW | ACC_UNDEFINED);
	const char *kind;
	int fd = dmabuf_fd(BUF_BYTES, &kind);
	printf("dmabuf fd: %s\n", kind);
	errno = 0;
	return ibv_reg_dmabuf_mr(d.pd, 0, BUF_BYTES, 0, fd, LW);
}

/* preload_passthrough of this process's context, as odpstat -p shows it */
static long long odpstat_passthrough(void)
{
	char cmd[PATH_MAX + 96];
	static char json[1 << 15];

	snprintf(cmd, sizeof(cmd), "%s -p %d --json --once --no-netlink 2>&1", pre_path("odpstat"),
		 (int)getpid());
	FILE *p = popen(cmd, "r");
	size_t n = p ? fread(json, 1, sizeof(json) - 1, p) : 0;
	json[n] = 0;
	if (p)
		pclose(p);
	const char *v = strstr(json, "\"preload_passthrough\":");
	expect(v != NULL, "odpstat -p %d shows no preload_passthrough:\n%s", (int)getpid(), json);
	return strtoll(v + strlen("\"preload_passthrough\":"), NULL, 10);
}

/*
 * Each forced pass-through in turn: "passthrough NAME: ok" or "...: errno N (...)"; under
 * the drop-in, after each MR, "odpstat NAME preload_passthrough N".
 */
static void case_passthrough(void)
{
	unsigned char *a = dev_map(BUF_BYTES, NULL);

	for (size_t i = 0; i < NPT; i++) {
		const char *name = pt_cases[i].name;
		struct ibv_mr *mr = reg_passthrough(name, a);
		if (!mr) {
			printf("passthrough %s: errno %d (%s)\n", name, errno, strerror(errno));
			continue;
		}
		expect(mr->handle != UINT32_MAX, "passthrough %s: a shadow (handle %u), not a "
		       "real MR", name, mr->handle);
		printf("passthrough %s: ok\n", name);
		if (getenv("LD_PRELOAD"))
			printf("odpstat %s preload_passthrough %lld\n", name, odpstat_passthrough());
		expect(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr of the %s MR failed", name);
	}
}

static int child(const char *name)
{
	dev_open(&d);
	if (!strcmp(name, "rereg"))
		case_rereg();
	else if (!strcmp(name, "import"))
		case_import();
	else if (!strcmp(name, "dealloc"))
		case_dealloc();
	else if (!strcmp(name, "passthrough"))
		case_passthrough();
	else
		dev_fail("no case %s", name);
	printf("case %s done\n", name);
	return 0;
}

/* ---- the parent ---- */

static const struct pre_cfg native = { "native", NULL, NULL, 0 },
	explicit = { "explicit", "explicit", NULL, 0 }, pin = { "pin", "pin", NULL, 0 };
static const struct pre_cfg *const modes[] = { &explicit, &pin };

static char out[1 << 16];

/* This program under @c with the case @name: fails unless it exits 0; its output in out. */
static void run(const struct pre_cfg *c, const char *name)
{
	char log[64], *argv[] = { (char *)pre_path("dev-preload-api"), "--case", (char *)name,
				  NULL };
	int rc;

	snprintf(log, sizeof(log), "/tmp/pre-api.%d", (int)getpid());
	rc = pre_wait(pre_spawn(c, argv, log), dev_now_ms() + PRE_RUN_TIMEOUT_MS);
	pre_slurp(log, out, sizeof(out));
	unlink(log);
	if (rc != 0 || !strstr(out, "done")) {
		pre_show(name, out);
		dev_fail("case %s (%s): exit %d", name, c->name, rc);
	}
}

/* The exit line's counts, which must be there under the drop-in. */
static void counts(const struct pre_cfg *c, const char *name, struct pre_counts *k, unsigned *ctxs)
{
	const char *l = strstr(out, "libodpx-preload: pid ");

	if (!pre_counts(out, k) || strcmp(k->mode, c->mode) ||
	    !(l = strstr(l, "contexts ")) || sscanf(l, "contexts %u", ctxs) != 1) {
		pre_show(name, out);
		dev_fail("case %s (%s): no exit line in mode %s", name, c->name, c->mode);
	}
}

static void want_counts(const struct pre_cfg *c, const char *name, unsigned ctxs,
			uint64_t served, uint64_t released, uint64_t passed)
{
	struct pre_counts k;
	unsigned n;

	counts(c, name, &k, &n);
	if (n != ctxs || k.served != served || k.released != released || k.passthrough != passed) {
		pre_show(name, out);
		dev_fail("case %s (%s): contexts %u, served %" PRIu64 ", released %" PRIu64
			 ", passthrough %" PRIu64 "; want %u, %" PRIu64 ", %" PRIu64 ", %" PRIu64,
			 name, c->name, n, k.served, k.released, k.passthrough, ctxs, served,
			 released, passed);
	}
}

/* The line of @out that starts with @prefix, without the newline, in @line. */
static const char *line_of(const char *prefix, char *line, size_t cap)
{
	const char *p = strstr(out, prefix);
	size_t n;

	if (!p)
		return NULL;
	n = strcspn(p, "\n");
	snprintf(line, cap, "%.*s", (int)(n < cap ? n : cap - 1), p);
	return line;
}

/* Every rereg answer is the device's own; the MR works after each (the child checks). */
static void rereg(void)
{
	char want[2048], got[2048];

	run(&native, "rereg");
	pre_lines(out, "rereg ", want, sizeof(want));
	printf("rereg native:\n%s", want);
	for (int m = 0; m < 2; m++) {
		struct pre_counts k;

		run(modes[m], "rereg");
		pre_lines(out, "rereg ", got, sizeof(got));
		if (strcmp(got, want) || !pre_counts(out, &k) || k.passthrough) {
			pre_show("rereg", out);
			dev_fail("rereg (%s): saw\n%snatively\n%s(and passthrough must be 0)",
				 modes[m]->name, got, want);
		}
		printf("rereg %-8s ok: every answer as natively, the MR working after each\n",
		       modes[m]->name);
	}
}

static void import(void)
{
	char nat_mw[128], nat_reg[128], got[128];

	run(&native, "import");
	if (!line_of("import mw_bind: ", nat_mw, sizeof(nat_mw)) ||
	    !line_of("import reg: ", nat_reg, sizeof(nat_reg)))
		dev_fail("import (native): no result line");
	printf("import native: %s; %s\n", nat_reg, nat_mw);
	for (int m = 0; m < 2; m++) {
		run(modes[m], "import");
		if (!line_of("import reg: ", got, sizeof(got)) || !strstr(got, ": errno 22 ") ||
		    !strstr(out, "ibv_unimport_mr() of MR")) {
			pre_show("import", out);
			dev_fail("import (%s): importing a shadow's handle must fail with EINVAL "
				 "and unimporting a shadow be ignored with a message", modes[m]->name);
		}
		if (!line_of("import mw_bind: ", got, sizeof(got)) || strcmp(got, nat_mw)) {
			pre_show("import", out);
			dev_fail("import (%s): the real MR's import gave \"%s\", natively \"%s\"",
				 modes[m]->name, got, nat_mw);
		}
		want_counts(modes[m], "import", 1, 1, 1, 1);
		printf("import %-8s ok: shadow refused, unimport ignored; real MR as natively\n",
		       modes[m]->name);
	}
}

static void dealloc(void)
{
	run(&native, "dealloc");
	for (int m = 0; m < 2; m++) {
		run(modes[m], "dealloc");
		/* explicit: the second MR is in the first one's ODP chunk, live: a real MR of
		 * its own, so that the two lkeys differ */
		uint64_t n = modes[m] == &explicit ? 2 : 3;
		want_counts(modes[m], "dealloc", 2, n, n, 0);
		printf("dealloc %-8s ok: EBUSY with a shadow MR live, 0 after (context closed), "
		       "a new context for the new PD\n", modes[m]->name);
	}
}

static void passthrough(void)
{
	char want[NPT][128], got[128], prefix[64], key[64];

	run(&native, "passthrough");
	for (size_t i = 0; i < NPT; i++) {
		snprintf(prefix, sizeof(prefix), "passthrough %s: ", pt_cases[i].name);
		if (!line_of(prefix, want[i], sizeof(want[i])))
			dev_fail("passthrough %s (native): no result line", pt_cases[i].name);
		if (pt_cases[i].must_work && strstr(want[i], "errno"))
			dev_fail("%s natively: \"%s\"; the device must take it for this test to "
				 "mean anything", pt_cases[i].name, want[i]);
	}
	for (int m = 0; m < 2; m++) {
		long long nok = 0;
		run(modes[m], "passthrough");
		for (size_t i = 0; i < NPT; i++) {
			const char *name = pt_cases[i].name;
			snprintf(prefix, sizeof(prefix), "passthrough %s: ", name);
			if (!line_of(prefix, got, sizeof(got)) || strcmp(got, want[i])) {
				pre_show("passthrough", out);
				dev_fail("%s (%s): \"%s\", natively \"%s\"", name, modes[m]->name, got,
					 want[i]);
			}
			if (strstr(want[i], "errno"))
				continue;
			/* each real MR is counted once, in the context's counter too */
			nok++;
			snprintf(key, sizeof(key), "odpstat %s preload_passthrough ", name);
			const char *v = strstr(out, key);
			if (!v || strtoll(v + strlen(key), NULL, 10) != nok) {
				pre_show("passthrough", out);
				dev_fail("%s (%s): odpstat -p shows preload_passthrough %s, want %lld",
					 name, modes[m]->name, v ? v + strlen(key) : "none", nok);
			}
		}
		want_counts(modes[m], "passthrough", 1, 0, 0, (uint64_t)nok);
	}
	for (size_t i = 0; i < NPT; i++)
		printf("passthrough %-10s ok in explicit and pin: %s%s\n", pt_cases[i].name,
		       want[i] + strlen("passthrough : ") + strlen(pt_cases[i].name),
		       strstr(want[i], "errno") ? ", as natively, nothing served" :
		       ", a real MR, counted once (exit line, odpstat)");
}

int main(int argc, char **argv)
{
	struct dev probe;

	if (argc == 3 && !strcmp(argv[1], "--case"))
		return child(argv[2]);
	dev_open(&probe);	/* a device with the loopback GID, or skip (fail in the guest) */
	dev_close(&probe);
	rereg();
	import();
	dealloc();
	passthrough();
	printf("ok\n");
	return 0;
}
