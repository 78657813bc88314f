// SPDX-License-Identifier: MIT
/*
 * dev-stats-odpstat: odpstat on a real RDMA device (rxe0 in the guest).
 *
 * After some RDMA WRITEs on a self-connected RC QP, a child process that
 * uses odpx (odpx_open_verbs, pin mode) registers 3 and 5 pages through
 * odpx_reg and waits.  `odpstat -d DEV -p CHILD --json --once`
 * (odpstat_main, the tool's code, run in a forked process so no separate
 * binary is needed in the guest) must show:
 *   - the device's ODP capabilities from ibv_query_device_ex (rxe: ODP,
 *     no implicit);
 *   - the port's hw_counters with their source, sent_pkts grown by the
 *     writes, and the retry/RNR error counters;
 *   - the MR resource dump over RDMA netlink listing the child's two odpx
 *     MRs with their lengths, lkeys and PID (and nothing else of the child
 *     but odpx's one-page anchor MR);
 *   - the child's odpx context (mode pin, backend verbs) from its segment.
 * The text mode names the device's ODP caps in its banner.  Then the child
 * opens an explicit-ODP context, registers a page (one chunk MR) and
 * prefetches synchronously (ibv_advise_mr): odpstat must show that
 * context's verbs counters, odp_mrs and prefetch_sges, from its segment.
 */
#include <sys/wait.h>

#include "dev-util.h"
#include "odpx.h"
#include "../sysfs-stats/counters.h"

/*
 * The context's reason as odpstat shows it is the one odpx_mode_get() gives
 * (the verbs backend's choice, set after the open's generic text).
 */
static void check_reason(const char *cx, const char *why, const char *what)
{
	char key[256];
	const char *end = strchr(cx, '}');

	snprintf(key, sizeof(key), "\"reason\":\"%s\"", why);
	if (!why[0] || !strstr(cx, key) || strstr(cx, key) > end)
		dev_fail("%s context: odpstat's reason is not \"%s\": %.*s", what, why,
			 (int)(end - cx + 1), cx);
	printf("%s context's reason: %s\n", what, why);
}

/* Run odpstat_main(argv) in a child; its stdout into @out; returns the exit status. */
static int odpstat(char **argv, char *out, size_t cap)
{
	int p[2], st, argc = 0;
	size_t n = 0;
	ssize_t r;
	pid_t pid;

	while (argv[argc])
		argc++;
	if (pipe(p))
		dev_fail("pipe: %s", strerror(errno));
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		dup2(p[1], 1);
		close(p[0]);
		close(p[1]);
		_exit(odpstat_main(argc, argv));
	}
	close(p[1]);
	while (n + 1 < cap && (r = read(p[0], out + n, cap - 1 - n)) > 0)
		n += (size_t)r;
	out[n] = 0;
	close(p[0]);
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
		dev_fail("odpstat did not exit");
	return WEXITSTATUS(st);
}

static uint64_t counter(const char *json, const char *src, const char *where, const char *name)
{
	char key[256];
	const char *p;

	snprintf(key, sizeof(key), "{\"source\":\"%s\",\"where\":\"%s\",\"name\":\"%s\",\"value\":",
		 src, where, name);
	if (!(p = strstr(json, key)))
		dev_fail("odpstat shows no %s counter %s %s", src, where, name);
	return strtoull(p + strlen(key), NULL, 10);
}

int main(void)
{
	static char out[1 << 20];
	const size_t pg = 4096;
	unsigned char *src, *dst, *a, *b;
	struct ibv_mr *smr, *dmr;
	int up[2], down[2], st;
	char pidarg[16], key[256], where[80], why[192], c;
	uint32_t lkeys[2];
	struct dev d;
	pid_t child;

	dev_open(&d);
	dev_require_odp(&d, IBV_ODP_SUPPORT_SEND);
	dev_connect_self(&d);
	src = dev_map(DEV_BUF_BYTES, NULL);
	dst = dev_map(DEV_BUF_BYTES, NULL);
	smr = dev_reg(&d, src, DEV_BUF_BYTES, DEV_MR_ACCESS);
	dmr = dev_reg(&d, dst, DEV_BUF_BYTES, DEV_MR_ACCESS);
	snprintf(where, sizeof(where), "%s/%u", d.name, d.port);

	char *base_args[] = { "odpstat", "-d", (char *)d.name, "--json", "--once", "0.1", NULL };
	if (odpstat(base_args, out, sizeof(out)) != 0)
		dev_fail("odpstat failed: %s", out);
	uint64_t sent0 = counter(out, "hw_counters", where, "sent_pkts");
	for (int i = 0; i < 4; i++) {
		dev_fill(src, DEV_BUF_BYTES, (uint32_t)i);
		if (dev_rdma(&d, IBV_WR_RDMA_WRITE, smr, src, DEV_BUF_BYTES, dst, dmr->rkey))
			dev_fail("RDMA WRITE %d", i);
	}

	if (pipe(up) || pipe(down))
		dev_fail("pipe");
	child = fork();
	if (child == 0) {	/* an odpx process: two registrations, then wait */
		struct odpx_attr at = { .comp_mask = ODPX_ATTR_MODE, .mode = ODPX_MODE_PIN };
		struct odpx_ctx *octx;
		struct odpx_mr *ra, *rb;
		const char *w;
		struct dev cd;
		close(up[0]);
		close(down[1]);
		dev_open(&cd);
		if (odpx_open_verbs(cd.pd, &at, &octx))
			_exit(2);
		a = dev_map(3 * pg, NULL);
		b = dev_map(5 * pg, NULL);
		if (odpx_reg(octx, a, 3 * pg, ODPX_ACCESS_LOCAL_WRITE, &ra) ||
		    odpx_reg(octx, b, 5 * pg, ODPX_ACCESS_LOCAL_WRITE | ODPX_ACCESS_REMOTE_WRITE, &rb))
			_exit(3);
		lkeys[0] = odpx_mr_lkey(ra);
		lkeys[1] = odpx_mr_lkey(rb);
		if (odpx_mode_get(octx, NULL, &w))
			_exit(5);
		snprintf(why, sizeof(why), "%s", w);
		if (write(up[1], lkeys, sizeof(lkeys)) != sizeof(lkeys) ||
		    write(up[1], why, sizeof(why)) != sizeof(why) || read(down[0], &c, 1) != 1)
			_exit(1);
		odpx_dereg(octx, ra);
		odpx_dereg(octx, rb);
		odpx_close(octx);
		struct odpx_attr ae = { .comp_mask = ODPX_ATTR_MODE, .mode = ODPX_MODE_EXPLICIT };
		if (odpx_open_verbs(cd.pd, &ae, &octx) ||
		    odpx_reg(octx, a, pg, ODPX_ACCESS_LOCAL_WRITE, &ra) ||
		    odpx_prefetch(octx, b, 5 * pg, ODPX_PREFETCH_WRITE | ODPX_PREFETCH_SYNC))
			_exit(4);
		odpx_dereg(octx, ra);
		if (odpx_mode_get(octx, NULL, &w))
			_exit(5);
		snprintf(why, sizeof(why), "%s", w);
		if (write(up[1], why, sizeof(why)) != sizeof(why) || read(down[0], &c, 1) != 1)
			_exit(1);
		odpx_close(octx);
		dev_close(&cd);
		_exit(0);
	}
	close(up[1]);
	close(down[0]);
	if (read(up[0], lkeys, sizeof(lkeys)) != sizeof(lkeys) ||
	    read(up[0], why, sizeof(why)) != sizeof(why))
		dev_fail("the child registered no MRs");

	snprintf(pidarg, sizeof(pidarg), "%d", (int)child);
	char *args[] = { "odpstat", "-d", (char *)d.name, "-p", pidarg, "--json", "--once", "0.1", NULL };
	if ((st = odpstat(args, out, sizeof(out))) != 0)
		dev_fail("odpstat -p exited %d: %s", st, out);

	/* ODP caps */
	snprintf(key, sizeof(key), "\"devices\":[{\"name\":\"%s\",\"odp\":true,\"implicit\":%s",
		 d.name, dev_is_rxe(&d) ? "false" : "");
	if (!strstr(out, key))
		dev_fail("ODP caps of %s not shown: %.600s", d.name, out);
	/* the device's limits, as odpx_query(3) gives a context */
	struct ibv_device_attr_ex ax = dev_query_ex(&d);
	snprintf(key, sizeof(key), "\"max_mr\":%" PRIu64 ",\"max_mr_size\":%" PRIu64
		 ",\"max_pd\":%" PRIu64, (uint64_t)ax.orig_attr.max_mr,
		 (uint64_t)ax.orig_attr.max_mr_size, (uint64_t)ax.orig_attr.max_pd);
	if (!strstr(out, key))
		dev_fail("device limits %s not shown: %.600s", key, out);
	printf("caps: %.*s\n", (int)(strstr(strstr(out, "\"summary\":"), "}") - strstr(out, "\"summary\":")),
	       strstr(out, "\"summary\":"));

	/* hw_counters */
	uint64_t sent1 = counter(out, "hw_counters", where, "sent_pkts");
	if (sent1 < sent0 + 4)
		dev_fail("sent_pkts %llu -> %llu after 4 RDMA WRITEs", (unsigned long long)sent0,
			 (unsigned long long)sent1);
	if (dev_is_rxe(&d)) {
		(void)counter(out, "hw_counters", where, "retry_exceeded_err");
		(void)counter(out, "hw_counters", where, "rcvd_rnr_err");
		(void)counter(out, "hw_counters", where, "completer_retry_err");
	}
	printf("hw_counters of %s: sent_pkts %llu -> %llu\n", where, (unsigned long long)sent0,
	       (unsigned long long)sent1);

	/* MR dump: exactly the child's two MRs */
	const char *mrs = strstr(out, "\"mrs\":["), *end = mrs ? strstr(mrs, "]") : NULL;
	int n = 0;
	if (!mrs || !end)
		dev_fail("no MR dump in: %.400s", out);
	for (const char *p = strstr(mrs, "{\"dev\":"); p && p < end; p = strstr(p + 1, "{\"dev\":"))
		n++;
	if (n != 3)	/* the two registrations and odpx's one-page anchor */
		dev_fail("%d MRs of pid %d listed, want 3: %.*s", n, (int)child, (int)(end - mrs + 1), mrs);
	for (int i = 0; i < 2; i++) {
		snprintf(key, sizeof(key), "\"mrlen\":%zu,", (i ? 5 : 3) * pg);
		const char *p = strstr(mrs, key);
		if (!p || p > end)
			dev_fail("no MR of %zu bytes: %.*s", (i ? 5 : 3) * pg, (int)(end - mrs + 1), mrs);
		snprintf(key, sizeof(key), "\"pid\":%d,\"lkey\":%u,", (int)child, lkeys[i]);
		if (!strstr(p, key) || strstr(p, key) > strchr(p, '}'))
			dev_fail("MR of %zu bytes: pid/lkey %s not in %.*s", (i ? 5 : 3) * pg, key,
				 (int)(strchr(p, '}') - p + 1), p);
	}
	printf("MR dump: %.*s\n", (int)(end - mrs + 1), mrs);

	/* the child's odpx context, from the segment it publishes */
	snprintf(key, sizeof(key), "{\"pid\":%d,\"ctx\":", (int)child);
	const char *cx = strstr(out, key);
	if (!cx || !strstr(cx, "\"mode\":\"pin\",\"backend\":\"verbs\""))
		dev_fail("odpx context of pid %d (pin, verbs) not shown: %.600s", (int)child,
			 strstr(out, "\"contexts\"") ? strstr(out, "\"contexts\"") : out);
	printf("context: %.*s\n", (int)(strchr(cx, '}') - cx + 1), cx);
	check_reason(cx, why, "pin");

	/* text mode: the banner */
	char *targs[] = { "odpstat", "-d", (char *)d.name, "0.1", "1", NULL };
	if (odpstat(targs, out, sizeof(out)) != 0)
		dev_fail("odpstat text mode");
	snprintf(key, sizeof(key), "# %s: ODP", d.name);
	if (!strstr(out, key) || !strstr(out, "hit/s"))
		dev_fail("text mode: %s", out);
	fputs(out, stdout);

	/* the explicit context's verbs counters, from its segment */
	if (write(down[1], "x", 1) != 1 || read(up[0], why, sizeof(why)) != sizeof(why))
		dev_fail("the child opened no explicit context");
	if ((st = odpstat(args, out, sizeof(out))) != 0)
		dev_fail("odpstat -p exited %d: %s", st, out);
	snprintf(key, sizeof(key), "{\"pid\":%d,\"ctx\":", (int)child);
	cx = strstr(out, key);
	if (!cx || !strstr(cx, "\"mode\":\"explicit\",\"backend\":\"verbs\""))
		dev_fail("explicit context of pid %d not shown: %.600s", (int)child, out);
	check_reason(cx, why, "explicit");
	const char *om = strstr(cx, "\"odp_mrs\":"), *ps = strstr(cx, "\"prefetch_sges\":");
	const char *ce = strchr(strstr(cx, "\"odp_mrs\":") ? strstr(cx, "\"odp_mrs\":") : cx, '}');
	if (!om || !ps || om > ce || ps > ce || strtoull(om + 10, NULL, 10) < 1 ||
	    strtoull(ps + 16, NULL, 10) < 1)
		dev_fail("explicit context: odp_mrs and prefetch_sges not shown or 0: %.*s",
			 (int)(ce ? ce - cx + 1 : 400), cx);
	printf("explicit context: odp_mrs %llu, prefetch_sges %llu\n",
	       strtoull(om + 10, NULL, 10), strtoull(ps + 16, NULL, 10));
	if (write(down[1], "y", 1) != 1 || waitpid(child, &st, 0) != child || !WIFEXITED(st) ||
	    WEXITSTATUS(st))
		dev_fail("child");
	ibv_dereg_mr(smr);
	ibv_dereg_mr(dmr);
	dev_close(&d);
	return 0;
}
