// SPDX-License-Identifier: MIT
/*
 * preload-symbols: libodpx-preload.so exports exactly libibverbs' registration
 * symbols, each with libibverbs' version, and libfabric's fi_fabric and
 * fi_fabric2 with libfabric's, and nothing of odpx; preloaded into
 * this program (linked against the host's libibverbs, which binds
 * ibv_reg_mr@IBVERBS_1.1 and ibv_dereg_mr@IBVERBS_1.1) it takes those calls;
 * the symbols this libibverbs lacks answer EOPNOTSUPP; a run with no PD
 * registered through it passes through cleanly and says so at exit
 * (ODPX_PRELOAD_VERBOSE); odpx-run sets it up and prints the mode.
 * Where an RDMA device is present the child also registers through it and
 * checks it got a shadow MR (the guest's tests do the rest).
 */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#include "test.h"

static const char *const want[] = {
	"ibv_reg_mr@@IBVERBS_1.1", "ibv_rereg_mr@@IBVERBS_1.1", "ibv_dereg_mr@@IBVERBS_1.1",
	"ibv_dealloc_pd@@IBVERBS_1.1", "ibv_reg_mr_iova@@IBVERBS_1.7",
	"ibv_reg_mr_iova2@@IBVERBS_1.8", "ibv_import_mr@@IBVERBS_1.10",
	"ibv_unimport_mr@@IBVERBS_1.10", "ibv_reg_dmabuf_mr@@IBVERBS_1.12",
	"ibv_reg_mr_ex@@IBVERBS_1.15", "ibv_reg_buf_mr@@IBVERBS_1.17",
	/* libfabric's fabric constructors: the first imports odpx's monitor */
	"fi_fabric@@FABRIC_1.1", "fi_fabric2@@FABRIC_1.8",
};
#define NWANT (sizeof(want) / sizeof(want[0]))

static char dir[PATH_MAX], so[PATH_MAX + 32], run[PATH_MAX + 32];

/* Run @cmd; its stdout and stderr in @out; returns the exit status. */
static int sh(const char *cmd, char *out, size_t cap)
{
	char full[PATH_MAX * 4];
	FILE *p;
	size_t n;

	snprintf(full, sizeof(full), "%s 2>&1", cmd);
	CHECK((p = popen(full, "r")), "popen %s", cmd);
	n = fread(out, 1, cap - 1, p);
	out[n] = 0;
	int st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void exports(void)
{
	static char out[1 << 16];
	char cmd[PATH_MAX + 64];
	unsigned seen = 0, extra = 0;

	snprintf(cmd, sizeof(cmd), "readelf --dyn-syms -W '%s'", so);
	CHECK(sh(cmd, out, sizeof(out)) == 0, "%s failed:\n%s", cmd, out);
	for (char *l = strtok(out, "\n"); l; l = strtok(NULL, "\n")) {
		char type[16], bind[16], vis[16], ndx[16], name[256];
		if (sscanf(l, "%*s %*s %*s %15s %15s %15s %15s %255s", type, bind, vis, ndx, name) != 5)
			continue;
		/* defined global symbols; the version nodes are ABS objects */
		if (strcmp(bind, "GLOBAL") && strcmp(bind, "WEAK"))
			continue;
		if (!strcmp(ndx, "UND") || !strcmp(ndx, "ABS"))
			continue;
		unsigned i;
		for (i = 0; i < NWANT && strcmp(name, want[i]); i++)
			;
		if (i < NWANT) {
			seen |= 1u << i;
		} else {
			printf("unexpected export: %s (%s)\n", name, type);
			extra++;
		}
	}
	for (unsigned i = 0; i < NWANT; i++)
		CHECK(seen & (1u << i), "%s is not exported as %s", so, want[i]);
	CHECK(!extra, "%u symbols exported beyond libibverbs' registration calls", extra);
	printf("exports: the %zu registration symbols with their versions, nothing else\n", NWANT);
}

/* This program's own imports: the versions the drop-in must match. */
static void imports(void)
{
	static char out[1 << 16];
	char cmd[PATH_MAX + 64];

	snprintf(cmd, sizeof(cmd), "readelf --dyn-syms -W /proc/%d/exe", (int)getpid());
	CHECK(sh(cmd, out, sizeof(out)) == 0, "%s failed:\n%s", cmd, out);
	CHECK(strstr(out, " ibv_reg_mr@IBVERBS_1.1") && strstr(out, " ibv_dereg_mr@IBVERBS_1.1"),
	      "this test does not import ibv_reg_mr@IBVERBS_1.1 and ibv_dereg_mr@IBVERBS_1.1:\n%s", out);
}

static int child(void)
{
	Dl_info di;
	int n;

	CHECK(dladdr((void *)ibv_reg_mr, &di) && strstr(di.dli_fname, "libodpx-preload.so"),
	      "ibv_reg_mr resolves to %s, not the drop-in", di.dli_fname);
	CHECK(dladdr((void *)ibv_dereg_mr, &di) && strstr(di.dli_fname, "libodpx-preload.so"),
	      "ibv_dereg_mr resolves to %s, not the drop-in", di.dli_fname);
	/* the rdma-core 59+/64+ symbols: present in the drop-in whatever libibverbs is under it */
	void *ex = dlvsym(RTLD_DEFAULT, "ibv_reg_mr_ex", "IBVERBS_1.15");
	void *buf = dlvsym(RTLD_DEFAULT, "ibv_reg_buf_mr", "IBVERBS_1.17");
	CHECK(ex && buf, "ibv_reg_mr_ex@IBVERBS_1.15 %p, ibv_reg_buf_mr@IBVERBS_1.17 %p", ex, buf);
	void *lib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);
	CHECK(lib, "libibverbs.so.1 is not loaded");
	if (!dlvsym(lib, "ibv_reg_buf_mr", "IBVERBS_1.17")) {
		struct ibv_mr *(*f)(struct ibv_pd *, void *, void *, size_t, int) = buf;
		errno = 0;
		CHECK(!f(NULL, NULL, NULL, 4096, 0) && errno == EOPNOTSUPP,
		      "ibv_reg_buf_mr over a libibverbs without it: errno %d, want EOPNOTSUPP", errno);
		printf("child: ibv_reg_buf_mr, absent below, answers EOPNOTSUPP\n");
	}
	struct ibv_device **list = ibv_get_device_list(&n);
	/* ENOSYS: no RDMA stack at all (no uverbs class in sysfs), as on a plain host */
	CHECK(list || errno == ENOSYS, "ibv_get_device_list: %s", strerror(errno));
	if (!list) {
		printf("child: no RDMA stack (ibv_get_device_list: ENOSYS)\n");
		return 0;
	}
	printf("child: %d RDMA device(s)\n", n);
	if (n > 0) {
		struct ibv_context *c = ibv_open_device(list[0]);
		struct ibv_pd *pd = c ? ibv_alloc_pd(c) : NULL;
		static char page[4096] __attribute__((aligned(4096)));
		CHECK(pd, "ibv_open_device/ibv_alloc_pd: %s", strerror(errno));
		struct ibv_mr *mr = ibv_reg_mr(pd, page, sizeof(page), IBV_ACCESS_LOCAL_WRITE);
		CHECK(mr && mr->addr == page && mr->length == sizeof(page) && mr->pd == pd,
		      "ibv_reg_mr through the drop-in: %p (%s)", (void *)mr, strerror(errno));
		CHECK_RC(ibv_dereg_mr(mr), 0);
		CHECK_RC(ibv_dealloc_pd(pd), 0);
		ibv_close_device(c);
	}
	ibv_free_device_list(list);
	return 0;
}

int main(int argc, char **argv)
{
	static char out[1 << 16];
	char cmd[PATH_MAX * 3], *slash;

	if (getenv("TEST_PRELOAD_CHILD"))
		return child();
	CHECK(readlink("/proc/self/exe", dir, sizeof(dir) - 1) > 0, "readlink /proc/self/exe");
	CHECK((slash = strrchr(dir, '/')), "no directory in %s", dir);
	*slash = 0;
	/* build/tests/<this>: the drop-in is build/libodpx-preload.so */
	snprintf(so, sizeof(so), "%s/../libodpx-preload.so", dir);
	snprintf(run, sizeof(run), "%s/../odpx-run", dir);
	CHECK(access(so, R_OK) == 0 && access(run, X_OK) == 0, "%s or %s is not built", so, run);
	exports();
	imports();

	snprintf(cmd, sizeof(cmd), "TEST_PRELOAD_CHILD=1 ODPX_PRELOAD_VERBOSE=1 LD_PRELOAD='%s' "
		 "/proc/%d/exe", so, (int)getpid());
	int rc = sh(cmd, out, sizeof(out));
	printf("%s", out);
	CHECK(rc == 0, "the preloaded child exited %d", rc);
	CHECK(strstr(out, "libodpx-preload: pid ") && strstr(out, "passthrough 0 (0 without a context)"),
	      "no exit line, or pass-throughs, from ODPX_PRELOAD_VERBOSE=1");

	snprintf(cmd, sizeof(cmd), "TEST_PRELOAD_CHILD=1 '%s' -m pin --stats -- /proc/%d/exe",
		 run, (int)getpid());
	rc = sh(cmd, out, sizeof(out));
	printf("%s", out);
	CHECK(rc == 0 && strstr(out, "odpx-run: mode pin") && strstr(out, "libodpx-preload: pid "),
	      "odpx-run -m pin --stats: exit %d", rc);
	snprintf(cmd, sizeof(cmd), "'%s' -m bogus -- true", run);
	CHECK(sh(cmd, out, sizeof(out)) == 2 && strstr(out, "unknown mode"),
	      "odpx-run -m bogus: %s", out);
	/* a program without libibverbs: the drop-in loads and stays out of the way */
	snprintf(cmd, sizeof(cmd), "LD_PRELOAD='%s' sh -c 'echo ran'", so);
	CHECK(sh(cmd, out, sizeof(out)) == 0 && !strcmp(out, "ran\n"), "sh under the drop-in: %s", out);
	printf("ok\n");
	return 0;
}
