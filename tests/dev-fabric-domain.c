// SPDX-License-Identifier: MIT
/*
 * dev-fabric-domain: libfabric's verbs provider on the guest's rxe, its
 * registration cache on (FI_MR_CACHE_MONITOR unset) with odpx's monitor
 * imported through odpx_fabric_monitor_import():
 *   - the domain's cache subscribes at the first fi_mr_reg() of a buffer and
 *     hits at the second (no new subscription);
 *   - after the buffer is replaced at the same address (munmap, mmap
 *     MAP_FIXED), the next fi_mr_reg() registers again (a new subscription,
 *     valid() said false or notify() uncached it);
 *   - a fork child that unmaps its copy and exits neither hangs nor touches
 *     the parent's cache (the parent's next fi_mr_reg() still hits);
 *   - closing the domain and the fabric leaves no odpx thread, no userfaultfd.
 * The control (ODPX_FABRIC_UNSAFE_NO_NOTIFY=1) is run as well and must fail
 * the remap check: libfabric then hands out the old registration.
 * Skips (exit 77) only where libfabric lists no verbs domain, and not in the
 * test guest (TEST_REQUIRE_DEVICE).
 */
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_ext.h>

#include "test.h"

#define LEN (1 << 20)

static struct odpx_fabric_stats stats(void)
{
	struct odpx_fabric_stats st = { 0 };

	CHECK_RC(odpx_fabric_monitor_stats(&st), 0);
	return st;
}

/* fi_mr_reg and fi_close of @p: the registration's subscription count after it */
static uint64_t reg(struct fid_domain *dom, void *p)
{
	struct fid_mr *mr;
	int r = fi_mr_reg(dom, p, LEN, FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0,
			  &mr, NULL);

	CHECK(r == 0, "fi_mr_reg: %s", fi_strerror(-r));
	CHECK(fi_close(&mr->fid) == 0, "fi_close(mr)");
	return stats().subscribes;
}

/* 0 pass, 2: the remap was not seen (a stale registration handed out), 1 other failure */
static int scenario(void *arg)
{
	struct fi_info *hints = fi_allocinfo(), *info = NULL;
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid *c;
	int r, st;

	unsetenv("FI_MR_CACHE_MONITOR");
	hints->fabric_attr->prov_name = strdup("verbs");
	hints->ep_attr->type = FI_EP_MSG;
	hints->caps = FI_MSG | FI_RMA;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	r = fi_getinfo(FI_VERSION(1, 13), NULL, NULL, 0, hints, &info);
	if (r == -FI_ENODATA) {
		const char *req = getenv("TEST_REQUIRE_DEVICE");
		printf("SKIP: libfabric lists no verbs domain here\n");
		return req && *req && strcmp(req, "0") ? 1 : 77;
	}
	CHECK(r == 0, "fi_getinfo(verbs): %s", fi_strerror(-r));
	CHECK(fi_open(FI_VERSION(1, 13), "mr_cache", NULL, 0, 0, &c, NULL) == 0, "fi_open(mr_cache)");
	CHECK_RC(odpx_fabric_monitor_import(c, 0), 0);
	fi_close(c);
	CHECK((r = fi_fabric(info->fabric_attr, &fab, NULL)) == 0, "fi_fabric: %s", fi_strerror(-r));
	CHECK((r = fi_domain(fab, info, &dom, NULL)) == 0, "fi_domain(%s): %s",
	      info->domain_attr->name, fi_strerror(-r));
	CHECK(stats().running && threads_are(2, 20) && uffds() == 1,
	      "the domain's cache did not start odpx's monitor: running %u, %d threads, %d uffds",
	      stats().running, odpx_threads(), uffds());

	char *p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(p != MAP_FAILED, "mmap");
	memset(p, 1, LEN);
	uint64_t s1 = reg(dom, p), s2 = reg(dom, p);
	CHECK(s1 == 1 && s2 == 1, "the first registration subscribes once, the second hits: %llu %llu",
	      (unsigned long long)s1, (unsigned long long)s2);
	uint64_t n0 = stats().notifies;
	CHECK(mmap(p, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == p,
	      "mmap MAP_FIXED");
	memset(p, 2, LEN);
	/* libfabric told (the control never is): no notification left to come after the next reg */
	if (!getenv("ODPX_FABRIC_UNSAFE_NO_NOTIFY")) {
		double end = now_s() + 20;
		while (stats().notifies == n0 && now_s() < end)
			usleep(1000);
		CHECK(stats().notifies > n0, "libfabric was not notified of the remap in 20 s");
	}
	uint64_t s3 = reg(dom, p);
	printf("subscribes %llu, %llu, after the remap %llu; invalidated %llu, notifies %llu, "
	       "valid false %llu\n", (unsigned long long)s1, (unsigned long long)s2,
	       (unsigned long long)s3, (unsigned long long)stats().invalidated,
	       (unsigned long long)stats().notifies, (unsigned long long)stats().invalid_answers);
	if (s3 != 2)
		return 2;

	fflush(stdout);
	pid_t pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0) {
		alarm(30);
		munmap(p, LEN);
		_exit(0);
	}
	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	      "fork child: status %#x", st);
	CHECK(reg(dom, p) == 2, "the child's munmap reached the parent's cache: %llu subscribes",
	      (unsigned long long)stats().subscribes);
	CHECK(mmap(p, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == p,
	      "mmap MAP_FIXED");
	CHECK(reg(dom, p) == 3, "after fork the parent's cache missed a remap");

	CHECK(fi_close(&dom->fid) == 0 && fi_close(&fab->fid) == 0, "fi_close");
	CHECK(threads_are(0, 20) && uffds() == 0 && !stats().running && stats().subscriptions == 0,
	      "after the domain and fabric closed: %d odpx threads, %d uffds, running %u, %llu "
	      "subscriptions", odpx_threads(), uffds(), stats().running,
	      (unsigned long long)stats().subscriptions);
	CHECK_RC(odpx_fabric_monitor_close(), 0);
	munmap(p, LEN);
	fi_freeinfo(info);
	fi_freeinfo(hints);
	return 0;
}

static int control(void *arg)
{
	setenv("ODPX_FABRIC_UNSAFE_NO_NOTIFY", "1", 1);
	setenv("ODPX_LOG", "none", 1);
	return scenario(arg);
}

int main(void)
{
	int r = run_forked(NULL, scenario, NULL);

	if (r == 77)
		return 77;
	CHECK(r == 0, "with odpx's monitor: exit %d", r);
	r = run_forked(NULL, control, NULL);
	CHECK(r == 2, "the control (never notified) did not hand out the old registration: exit %d", r);
	printf("control: the remapped buffer got the old registration back\nok\n");
	return 0;
}
