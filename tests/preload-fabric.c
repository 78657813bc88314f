// SPDX-License-Identifier: MIT
/*
 * preload-fabric: libodpx-preload.so under a program of the host's real
 * libfabric (fi_getinfo, fi_fabric, fi_domain) imports odpx's monitor at the
 * first fabric, before any domain: once it has, libfabric refuses another
 * monitor (-FI_EBUSY) and the exit line says "libfabric monitor imported".
 * ODPX_PRELOAD_FABRIC=0 turns it off and FI_MR_CACHE_MONITOR set keeps it
 * out (each: another monitor is then taken, and the line says why).
 */
#include <limits.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_ext.h>

#include "test.h"

static int noop_start(struct fid_mem_monitor *m) { return 0; }

/* In the preloaded child: open a fabric and a domain, then try a monitor of our own. */
static int child(void)
{
	struct fi_info *hints = fi_allocinfo(), *info = NULL;
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid *c;
	struct fi_ops_mem_monitor ops = { .size = sizeof(ops), .start = noop_start };
	struct fid_mem_monitor other = { .fid = { .fclass = FI_CLASS_MEM_MONITOR }, .export_ops = &ops };
	int r;

	hints->fabric_attr->prov_name = strdup("tcp");
	r = fi_getinfo(FI_VERSION(1, 13), NULL, NULL, 0, hints, &info);
	if (r == -FI_ENODATA) {
		printf("SKIP: libfabric's tcp provider finds no interface here\n");
		return 77;
	}
	CHECK(r == 0, "fi_getinfo: %s", fi_strerror(-r));
	CHECK((r = fi_fabric(info->fabric_attr, &fab, NULL)) == 0, "fi_fabric: %s", fi_strerror(-r));
	CHECK((r = fi_domain(fab, info, &dom, NULL)) == 0, "fi_domain: %s", fi_strerror(-r));
	CHECK(fi_open(FI_VERSION(1, 13), "mr_cache", NULL, 0, 0, &c, NULL) == 0, "fi_open");
	r = fi_import_fid(c, &other.fid, 0);
	printf("second monitor: %d\n", r);
	fi_close(c);
	fi_close(&dom->fid);
	fi_close(&fab->fid);
	fi_freeinfo(info);
	fi_freeinfo(hints);
	return 0;
}

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

int main(void)
{
	static const struct { const char *env, *line; int second; } runs[] = {
		{ "", "libfabric monitor imported", -FI_EBUSY },
		{ "ODPX_PRELOAD_FABRIC=0", "libfabric monitor off (ODPX_PRELOAD_FABRIC=0)", 0 },
		{ "FI_MR_CACHE_MONITOR=disabled",
		  "libfabric monitor not imported (FI_MR_CACHE_MONITOR=disabled)", 0 },
	};
	char dir[PATH_MAX], so[PATH_MAX + 32], cmd[PATH_MAX * 2], out[1 << 14], want[32], *slash;

	if (getenv("TEST_PRELOAD_CHILD"))
		return child();
	CHECK(readlink("/proc/self/exe", dir, sizeof(dir) - 1) > 0, "readlink /proc/self/exe");
	CHECK((slash = strrchr(dir, '/')), "no directory in %s", dir);
	*slash = 0;
	snprintf(so, sizeof(so), "%s/../libodpx-preload.so", dir);
	CHECK(access(so, R_OK) == 0, "%s is not built", so);
	for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
		snprintf(cmd, sizeof(cmd), "env -u FI_MR_CACHE_MONITOR %s TEST_PRELOAD_CHILD=1 "
			 "ODPX_PRELOAD_VERBOSE=1 LD_PRELOAD='%s' /proc/%d/exe", runs[i].env, so,
			 (int)getpid());
		int rc = sh(cmd, out, sizeof(out));
		printf("%s", out);
		if (rc == 77)
			return 77;
		snprintf(want, sizeof(want), "second monitor: %d\n", runs[i].second);
		CHECK(rc == 0 && strstr(out, runs[i].line) && strstr(out, want),
		      "%s: exit %d, want \"%s\" and \"%s\"", runs[i].env, rc, runs[i].line, want);
	}
	printf("ok\n");
	return 0;
}
