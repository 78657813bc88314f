// SPDX-License-Identifier: MIT
/*
 * dev-preload-permsg: verbs-permsg, a plain verbs program that registers
 * around every RDMA WRITE and READ, with and without libodpx-preload.so.
 *
 * - per message: 40 WRITE+READ round trips of 64 KiB, each between an
 *   ibv_reg_mr and an ibv_dereg_mr of the same buffer, every byte checked:
 *   natively, and under the drop-in in explicit and pin modes, where all but
 *   the first registration are hits.
 * - stale data, no hooks: deregister, replace the memory at the same address
 *   (munmap+mmap, MAP_FIXED, MADV_DONTNEED, mremap away + mmap, free() +
 *   malloc()), register again and move data both ways: correct natively and
 *   under the drop-in in explicit and pin modes.  The control, the drop-in in
 *   pin mode with ODPX_PRELOAD_UNSAFE_NO_MONITOR=1 (a cache nobody
 *   invalidates), must move stale bytes in every case: the check can fail.
 * - remote policy: after ibv_dereg_mr, a WRITE through the old rkey fails
 *   with a remote access error and leaves the memory alone, natively and
 *   under ODPX_PRELOAD_REMOTE=strict (explicit and pin); under =cache in pin
 *   mode it is accepted.
 * - odpstat -p of a process under the drop-in shows its context's mode, hits
 *   and preload_passthrough.
 */
#include "dev-preload.h"

static char out[1 << 16];

/* verbs-permsg ARGS under @c: its exit status, its output in out */
static int permsg(const struct pre_cfg *c, const char *a1, const char *a2, const char *a3)
{
	char log[64], *argv[] = { (char *)pre_path("verbs-permsg"), (char *)a1, (char *)a2,
				  (char *)a3, NULL };
	int rc;

	snprintf(log, sizeof(log), "/tmp/pre-permsg.%d", (int)getpid());
	rc = pre_wait(pre_spawn(c, argv, log), dev_now_ms() + PRE_RUN_TIMEOUT_MS);
	pre_slurp(log, out, sizeof(out));
	unlink(log);
	return rc;
}

static const struct pre_cfg native = { "native", NULL, NULL, 0 },
	explicit = { "explicit", "explicit", NULL, 0 }, pin = { "pin", "pin", NULL, 0 },
	control = { "pin, no monitor", "pin", NULL, 1 },
	pin_cache = { "pin, remote=cache", "pin", "cache", 0 };

static void xfer(const struct pre_cfg *c)
{
	struct pre_counts k;
	int rc = permsg(c, "xfer", "40", "65536");

	if (rc != 0 || !strstr(out, "every byte back")) {
		pre_show("verbs-permsg xfer", out);
		dev_fail("per-message transfers (%s): exit %d", c->name, rc);
	}
	pre_check_served(c, "verbs-permsg xfer", out, 0);
	if (c->mode && pre_counts(out, &k) && k.hits < 39)
		dev_fail("per-message transfers (%s): %" PRIu64 " hits of 41 registrations, "
			 "want at least 39 (the buffer is used again)", c->name, k.hits);
	printf("xfer %-18s ok%s", c->name, c->mode ? "" : "\n");
	if (c->mode)
		printf(": hits %" PRIu64 ", misses %" PRIu64 "\n", k.hits, k.misses);
}

static void stale(const struct pre_cfg *c, const char *kind, int want)
{
	int rc = permsg(c, "stale", kind, NULL);

	if (rc != want) {
		pre_show("verbs-permsg stale", out);
		dev_fail("stale %s (%s): exit %d, want %d (%s)", kind, c->name, rc, want,
			 want ? "the control moves stale bytes" : "correct data");
	}
	if (!want)
		pre_check_served(c, "verbs-permsg stale", out, 0);
	printf("stale %-9s %-18s %s\n", kind, c->name, want ? "stale, as the control must" : "ok");
}

static void remote(const struct pre_cfg *c, int want)
{
	int rc = permsg(c, "remote", NULL, NULL);

	if (rc != want) {
		pre_show("verbs-permsg remote", out);
		dev_fail("remote policy (%s): exit %d, want %d (%s)", c->name, rc, want,
			 want ? "accepted after dereg" : "rejected after dereg, memory untouched");
	}
	pre_check_served(c, "verbs-permsg remote", out, 0);
	printf("remote %-18s %s\n", c->name, want ? "accepted after dereg (cache)" :
	       "rejected after dereg, memory untouched");
}

/* "name":N in the first context of @pid in odpstat's JSON, or -1 */
static long long json_num(const char *json, pid_t pid, const char *name)
{
	char key[96];
	const char *ctx, *p;

	snprintf(key, sizeof(key), "{\"pid\":%d,\"ctx\":", (int)pid);
	if (!(ctx = strstr(json, key)))
		return -1;
	snprintf(key, sizeof(key), "\"%s\":", name);
	if (!(p = strstr(ctx, key)))
		return -1;
	return strtoll(p + strlen(key), NULL, 10);
}

/*
 * odpstat -p shows a process under the drop-in like any odpx user: its
 * context in pin mode, the hits of its per-message registrations, and
 * preload_passthrough.
 */
static void odpstat_view(void)
{
	char log[64], cmd[PATH_MAX + 96], *argv[] = { (char *)pre_path("verbs-permsg"), "xfer",
						       "100000", "4096", NULL };
	static char json[1 << 17];
	int64_t deadline = dev_now_ms() + PRE_RUN_TIMEOUT_MS;
	long long hits = -1, pass = -1;

	snprintf(log, sizeof(log), "/tmp/pre-odpstat.%d", (int)getpid());
	pid_t pid = pre_spawn(&pin, argv, log);
	snprintf(cmd, sizeof(cmd), "%s -p %d --json --once --no-netlink 2>&1", pre_path("odpstat"),
		 (int)pid);
	while (dev_now_ms() < deadline && pre_alive(pid)) {
		FILE *p = popen(cmd, "r");
		size_t n = p ? fread(json, 1, sizeof(json) - 1, p) : 0;
		json[n] = 0;
		if (p)
			pclose(p);
		hits = json_num(json, pid, "hits");
		pass = json_num(json, pid, "preload_passthrough");
		if (hits > 0 && strstr(json, "\"mode\":\"pin\""))
			break;
		dev_pause_ms(200);
	}
	kill(pid, SIGKILL);
	pre_wait(pid, deadline);
	unlink(log);
	if (hits <= 0 || pass != 0 || !strstr(json, "\"mode\":\"pin\"")) {
		pre_show("odpstat", json);
		dev_fail("odpstat -p of verbs-permsg under the drop-in: hits %lld, "
			 "preload_passthrough %lld, want hits > 0, 0 and mode pin", hits, pass);
	}
	printf("odpstat -p: mode pin, hits %lld, preload_passthrough %lld\n", hits, pass);
}

int main(void)
{
	static const char *const kinds[] = { "munmap", "fixed", "dontneed", "mremap", "free" };
	struct dev d;

	dev_open(&d);	/* a device with the loopback GID, or skip (fail in the guest) */
	xfer(&native);
	xfer(&explicit);
	xfer(&pin);
	for (int i = 0; i < 5; i++) {
		stale(&native, kinds[i], 0);
		stale(&explicit, kinds[i], 0);
		stale(&pin, kinds[i], 0);
		stale(&control, kinds[i], 3);
	}
	remote(&native, 0);
	remote(&explicit, 0);
	remote(&pin, 0);
	remote(&pin_cache, 4);
	odpstat_view();
	printf("ok\n");
	return 0;
}
