// SPDX-License-Identifier: MIT
/*
 * fabric-monitor: odpx's monitor imported into the host's real libfabric
 * (fi_open "mr_cache", fi_import_fid()), driven through the export ops as
 * libfabric's cache drives them (no provider on the host opens a domain
 * with a cache), with libfabric's own notify op behind a recorder:
 *   - the import is taken; a second monitor is refused by libfabric (-EBUSY);
 *   - valid() is false as soon as munmap(), MAP_FIXED over, MADV_DONTNEED or
 *     mremap() of a subscribed range has returned, and notify() follows
 *     covering the range; a range never subscribed is not valid;
 *   - shared and file-backed ranges are refused, so libfabric does not cache them;
 *   - the control (ODPX_FABRIC_UNSAFE_NO_NOTIFY=1) stays valid over the old
 *     pages and is never notified: the checks above fail under it;
 *   - a fork child sees nothing valid, cannot subscribe, exits; the parent's
 *     subscriptions are unharmed;
 *   - threads subscribing, checking and remapping race without a stale answer;
 *   - stop() leaves no odpx thread and no userfaultfd; close hands it back;
 *   - odpstat shows libfabric's live subscriptions and their bytes beside
 *     the process's context (odpstat -p PID --json --once, build/odpstat).
 * Each case runs in a child of its own: libfabric takes one import a process.
 */
#include <limits.h>
#include <rdma/fabric.h>
#include <rdma/fi_ext.h>
#include <sys/stat.h>

#include "test.h"

static struct fid *real_cache;
static struct fid_mem_monitor *mon;
static struct fi_ops_mem_notify *lf_notify, rec_ops;
static struct fi_ops wrap_ops;
static struct fid wrap_fid;

#define REC_MAX 4096
static _Atomic uintptr_t rec_s[REC_MAX], rec_e[REC_MAX];
static _Atomic unsigned nrec;

/* libfabric's notify, behind a recorder of what odpx told it */
static void rec_notify(struct fid_mem_monitor *m, const void *addr, size_t len)
{
	unsigned i = atomic_fetch_add(&nrec, 1);

	if (i < REC_MAX) {
		rec_s[i] = (uintptr_t)addr;
		rec_e[i] = (uintptr_t)addr + len;
	}
	lf_notify->notify(m, addr, len);
}

/* the mr_cache fid's bind, seen on its way to libfabric: the monitor odpx offers */
static int wrap_bind(struct fid *f, struct fid *exp, uint64_t flags)
{
	mon = (struct fid_mem_monitor *)exp;
	return real_cache->ops->bind(real_cache, exp, flags);
}

static void import(void)
{
	struct fi_info *hints = fi_allocinfo(), *info = NULL;
	int r;

	/* as a middleware does first: it initialises libfabric, its monitors included */
	hints->fabric_attr->prov_name = strdup("tcp");
	r = fi_getinfo(FI_VERSION(1, 13), NULL, NULL, 0, hints, &info);
	CHECK(r == 0 || r == -FI_ENODATA, "fi_getinfo: %s", fi_strerror(-r));
	fi_freeinfo(info);
	fi_freeinfo(hints);
	r = fi_open(FI_VERSION(1, 13), "mr_cache", NULL, 0, 0, &real_cache, NULL);

	CHECK(r == 0, "fi_open(mr_cache): %s", fi_strerror(-r));
	wrap_ops = *real_cache->ops;
	wrap_ops.bind = wrap_bind;
	wrap_fid = *real_cache;
	wrap_fid.ops = &wrap_ops;
	CHECK_RC(odpx_fabric_monitor_import(NULL, 0), -EINVAL);
	CHECK_RC(odpx_fabric_monitor_import(&wrap_fid, 1), -EINVAL);
	CHECK_RC(odpx_fabric_monitor_import(&wrap_fid, 0), 0);
	CHECK(mon && mon->fid.fclass == FI_CLASS_MEM_MONITOR && mon->import_ops, "no monitor bound");
	CHECK_RC(odpx_fabric_monitor_import(&wrap_fid, 0), -EALREADY);
	fi_close(real_cache);
	lf_notify = mon->import_ops;
	rec_ops = *lf_notify;
	rec_ops.notify = rec_notify;
	mon->import_ops = &rec_ops;
	CHECK_RC(mon->export_ops->start(mon), 0);
}

static bool notified(uintptr_t s, uintptr_t e)
{
	unsigned n = atomic_load(&nrec);

	for (unsigned i = 0; i < n && i < REC_MAX; i++)
		if (rec_s[i] <= s && rec_e[i] >= e)
			return true;
	return false;
}

/* notify() of [s, e) within 10 s (it comes from odpx's own thread) */
static bool wait_notified(uintptr_t s, uintptr_t e)
{
	double end = now_s() + 10;

	while (!notified(s, e)) {
		if (now_s() > end)
			return false;
		usleep(1000);
	}
	return true;
}

static bool valid(void *p, size_t len)
{
	return mon->export_ops->valid(mon, p, len);
}

static int sub(void *p, size_t len)
{
	return mon->export_ops->subscribe(mon, p, len);
}

static void unsub(void *p, size_t len)
{
	mon->export_ops->unsubscribe(mon, p, len);
}

#define LEN (64 << 10)

static void *map(void *at, int flags)
{
	void *p = mmap(at, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);

	CHECK(p != MAP_FAILED, "mmap: %s", strerror(errno));
	memset(p, 1, LEN);
	return p;
}

/* The events, each: valid before, not valid once the call returned, notified. */
static int events(void *arg)
{
	bool control = arg != NULL;
	char *kept[4];
	int stale = 0;

	import();
	for (int ev = 0; ev < 4; ev++) {
		static const char *const what[] = { "munmap", "MAP_FIXED", "MADV_DONTNEED", "mremap" };
		char *p = map(NULL, 0);

		CHECK_RC(sub(p, LEN), 0);
		CHECK(valid(p, LEN), "%s: valid() false before any event", what[ev]);
		CHECK(!valid(p, LEN / 2), "a range never subscribed is valid");
		switch (ev) {
		case 0: munmap(p, LEN); break;
		case 1: map(p, MAP_FIXED); break;
		case 2: madvise(p, LEN, MADV_DONTNEED); break;
		case 3: {
			char *q = map(NULL, 0);
			CHECK(mremap(p, LEN, LEN, MREMAP_MAYMOVE | MREMAP_FIXED, q) == q, "mremap: %s",
			      strerror(errno));
			break;
		}
		}
		/* no wait: the answer must already be right when the call has returned */
		if (valid(p, LEN)) {
			printf("%s: valid() true after it returned (stale)\n", what[ev]);
			stale++;
		} else if (!wait_notified((uintptr_t)p, (uintptr_t)p + LEN)) {
			printf("%s: never notified\n", what[ev]);
			stale++;
		}
		unsub(p, LEN);
		/* kept mapped: a new mapping there would meet the REMOVE quarantine */
		kept[ev] = ev == 1 || ev == 2 ? p : NULL;
	}
	for (int ev = 0; ev < 4; ev++)
		if (kept[ev])
			munmap(kept[ev], LEN);
	if (control) {
		printf("control: %d of 4 events left valid or unnotified\n", stale);
		return stale == 4 ? 0 : 1;
	}
	return stale ? 1 : 0;
}

/* Ranges odpx cannot keep coherent are refused: libfabric then does not cache them. */
static int refused(void *arg)
{
	char path[] = "/tmp/odpx-fabric.XXXXXX";
	int fd = mkstemp(path);
	struct odpx_fabric_stats st = { 0 };

	import();
	CHECK(fd >= 0 && ftruncate(fd, LEN) == 0, "temp file: %s", strerror(errno));
	unlink(path);
	void *f = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	void *s = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK(f != MAP_FAILED && s != MAP_FAILED, "mmap: %s", strerror(errno));
	CHECK(sub(f, LEN) < 0, "a shared file mapping was subscribed");
	CHECK(sub(s, LEN) < 0, "a shared anonymous mapping was subscribed");
	CHECK(!valid(f, LEN) && !valid(s, LEN), "a refused range is valid");
	CHECK_RC(sub(NULL, LEN), -EINVAL);
	CHECK(sub((void *)0x1000, 0) == -EINVAL, "len 0 subscribed");
	CHECK_RC(odpx_fabric_monitor_stats(NULL), -EINVAL);
	CHECK_RC(odpx_fabric_monitor_stats(&st), 0);
	CHECK(st.refused >= 2 && st.subscriptions == 0 && st.imported && st.running,
	      "stats: refused %llu subscriptions %llu imported %u running %u",
	      (unsigned long long)st.refused, (unsigned long long)st.subscriptions, st.imported,
	      st.running);
	st.comp_mask = 1;
	CHECK_RC(odpx_fabric_monitor_stats(&st), -EINVAL);
	return 0;
}

/* fork: the child trusts nothing it inherited and hangs on nothing; then stop and close. */
static int fork_stop(void *arg)
{
	struct odpx_fabric_stats st = { 0 };
	char *p;
	int stp;
	pid_t pid;

	import();
	p = map(NULL, 0);
	CHECK_RC(sub(p, LEN), 0);
	CHECK(threads_are(2, 10) && uffds() == 1, "running: %d odpx threads, %d uffds",
	      odpx_threads(), uffds());
	fflush(stdout);
	pid = fork();
	CHECK(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		if (valid(p, LEN))
			_exit(2);
		if (sub(p, LEN) != -EOPNOTSUPP)
			_exit(3);
		unsub(p, LEN);
		munmap(p, LEN);	/* the child's own: no event anybody waits for */
		mon->export_ops->stop(mon);
		_exit(0);
	}
	CHECK(waitpid(pid, &stp, 0) == pid && WIFEXITED(stp) && WEXITSTATUS(stp) == 0,
	      "fork child: status %#x", stp);
	CHECK(valid(p, LEN), "the parent's subscription died with the child's munmap");
	munmap(p, LEN);
	CHECK(!valid(p, LEN) && wait_notified((uintptr_t)p, (uintptr_t)p + LEN),
	      "the parent's monitor after fork");
	unsub(p, LEN);
	p = map(NULL, 0);
	CHECK_RC(sub(p, LEN), 0);	/* left subscribed: stop drops it */
	mon->export_ops->stop(mon);
	CHECK(odpx_threads() == 0 && uffds() == 0, "after stop: %d odpx threads, %d uffds",
	      odpx_threads(), uffds());
	CHECK_RC(odpx_fabric_monitor_stats(&st), 0);
	CHECK(!st.running && st.subscriptions == 0 && st.bytes == 0, "stats after stop");
	CHECK_RC(mon->export_ops->start(mon), 0);	/* a new domain: started again */
	CHECK_RC(sub(p, LEN), 0);
	mon->export_ops->stop(mon);
	CHECK_RC(odpx_fabric_monitor_close(), 0);
	CHECK_RC(odpx_fabric_monitor_close(), -ENOENT);
	CHECK_RC(odpx_fabric_monitor_stats(&st), 0);
	CHECK(!st.imported && !st.running, "stats after close");
	munmap(p, LEN);
	return 0;
}

/* libfabric refuses a second monitor (its rule, not odpx's) */
static int busy_mon_start(struct fid_mem_monitor *m) { return 0; }

static int second(void *arg)
{
	struct fi_ops_mem_monitor ops = { .size = sizeof(ops), .start = busy_mon_start };
	struct fid_mem_monitor other = { .fid = { .fclass = FI_CLASS_MEM_MONITOR }, .export_ops = &ops };
	struct fid *c;

	import();
	CHECK(fi_open(FI_VERSION(1, 13), "mr_cache", NULL, 0, 0, &c, NULL) == 0, "fi_open");
	CHECK(fi_import_fid(c, &other.fid, 0) == -FI_EBUSY, "libfabric took a second monitor");
	fi_close(c);
	return 0;
}

/*
 * Threads: subscribe, check, remap in place.  A remap that began after the
 * subscription and had returned before valid() was called must make it false.
 */
#define SLOTS 8
#define ROUNDS 3000
static char *area;
static _Atomic int starts[SLOTS], dones[SLOTS], stale_seen;
static _Atomic bool done;

static void *remapper(void *arg)
{
	unsigned seed = 1;

	for (int i = 0; i < ROUNDS; i++) {
		int k = rand_r(&seed) % SLOTS;
		char *p = area + (size_t)k * LEN;
		atomic_fetch_add(&starts[k], 1);
		CHECK(mmap(p, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
			   0) == p, "mmap: %s", strerror(errno));
		atomic_fetch_add(&dones[k], 1);
	}
	atomic_store(&done, true);
	return NULL;
}

static void *user(void *arg)
{
	unsigned seed = (unsigned)(uintptr_t)arg;

	while (!atomic_load(&done)) {
		int k = rand_r(&seed) % SLOTS;
		char *p = area + (size_t)k * LEN;
		if (sub(p, LEN) != 0)
			continue;
		int s0 = atomic_load(&starts[k]);
		sched_yield();
		int d = atomic_load(&dones[k]);
		if (valid(p, LEN) && d > s0)
			atomic_fetch_add(&stale_seen, 1);
		unsub(p, LEN);
	}
	return NULL;
}

static int storm(void *arg)
{
	pthread_t t[3];

	import();
	area = mmap(NULL, SLOTS * LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(area != MAP_FAILED, "mmap");
	pthread_create(&t[0], NULL, remapper, NULL);
	pthread_create(&t[1], NULL, user, (void *)1);
	pthread_create(&t[2], NULL, user, (void *)2);
	for (int i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	CHECK(atomic_load(&stale_seen) == 0, "%d stale valid() answers", atomic_load(&stale_seen));
	mon->export_ops->stop(mon);
	CHECK(odpx_threads() == 0, "threads left after stop");
	return 0;
}

/* odpstat, the tool, reads the subscriptions from the context's stats segment */
static int odpstat_shows(void *arg)
{
	char exe[PATH_MAX], cmd[PATH_MAX * 2], out[1 << 16], *slash;
	struct odpx_ctx *ctx;
	struct odpx_stats st;
	FILE *f;
	size_t n;

	import();
	CHECK_RC(odpx_open_uring(NULL, &ctx), 0);
	char *p = map(NULL, 0), *q = map(NULL, 0);
	CHECK_RC(sub(p, LEN), 0);
	CHECK_RC(sub(q, LEN / 2), 0);
	CHECK(odpx_stats_read(ctx, &st, sizeof(st)) > 0, "odpx_stats_read");	/* publishes */
	CHECK(st.fabric_subscriptions == 2 && st.fabric_bytes == LEN + LEN / 2,
	      "odpx_stats: %llu subscriptions, %llu bytes", (unsigned long long)st.fabric_subscriptions,
	      (unsigned long long)st.fabric_bytes);
	CHECK(readlink("/proc/self/exe", exe, sizeof(exe) - 1) > 0, "readlink");
	exe[sizeof(exe) - 1] = 0;
	CHECK((slash = strrchr(exe, '/')), "no directory in %s", exe);
	*slash = 0;
	snprintf(cmd, sizeof(cmd), "%s/../odpstat -p %d --json --once --no-netlink 2>&1", exe,
		 (int)getpid());
	CHECK((f = popen(cmd, "r")), "popen %s", cmd);
	n = fread(out, 1, sizeof(out) - 1, f);
	out[n] = 0;
	CHECK(pclose(f) == 0, "%s:\n%s", cmd, out);
	snprintf(cmd, sizeof(cmd), "\"fabric_bytes\":%d", LEN + LEN / 2);
	CHECK(strstr(out, "\"fabric_subscriptions\":2") && strstr(out, cmd),
	      "odpstat does not show 2 subscriptions of %d bytes:\n%.2000s", LEN + LEN / 2, out);
	unsub(p, LEN);
	unsub(q, LEN / 2);
	odpx_close(ctx);
	return 0;
}

static int control(void *arg)
{
	setenv("ODPX_FABRIC_UNSAFE_NO_NOTIFY", "1", 1);
	setenv("ODPX_LOG", "none", 1);
	return events((void *)1);
}

int main(void)
{
	static const struct { const char *name; int (*fn)(void *); } cases[] = {
		{ "events", events }, { "control", control }, { "refused", refused },
		{ "second monitor", second }, { "fork and stop", fork_stop }, { "storm", storm },
		{ "odpstat", odpstat_shows },
	};
	int bad = 0;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		if (getenv("FABRIC_CASE") && strcmp(getenv("FABRIC_CASE"), cases[i].name))
			continue;
		int rc = run_forked(NULL, cases[i].fn, NULL);
		printf("%s: %s (%d)\n", cases[i].name, rc ? "FAIL" : "ok", rc);
		bad |= rc != 0;
	}
	return bad;
}
