// SPDX-License-Identifier: MIT
/*
 * odpx-info - the configuration odpx would run with in this process; see
 * odpx-info(1).  What the public API reports comes from contexts opened
 * with defaults; what it does not (the kernel's userfaultfd features and
 * the monitor's mode) is read from the kernel with uffd/open.c's rule.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "config.h"
#include "counters.h"	/* json_str, ctr_read_file, devcaps_query */
#ifdef ODPX_HAVE_VERBS
#include <infiniband/verbs.h>
#endif

/* the kernel's values, for headers older than the kernel (Linux 6.4, 6.7) */
#ifndef UFFD_FEATURE_WP_UNPOPULATED
#define UFFD_FEATURE_WP_UNPOPULATED (1 << 13)
#endif
#ifndef UFFD_FEATURE_WP_ASYNC
#define UFFD_FEATURE_WP_ASYNC (1 << 15)
#endif

/* The variables of odpx(7) (which says what each does), with their defaults as it states them */
static const struct var {
	const char *name, *dflt;
} vars[] = {
	{ "ODPX_MODE", "auto" },
	{ "ODPX_UFFD_MODE", "auto" },
	{ "ODPX_WATCH_MAX", "vm.max_map_count/8, at most 16384" },
	{ "ODPX_WATCH_WIDEN_KB", "64" },
	{ "ODPX_REMOVE_QUARANTINE_MS", "100" },
	{ "ODPX_MONITOR_SPIN_US", "0" },
	{ "ODPX_ENGINE_LINGER_US", "100" },
	{ "ODPX_IDLE_MS", "300000" },
	{ "ODPX_CHECK_PROT", "0 (the drop-in: 1)" },
	{ "ODPX_THRASH", "built in (odpstat(1))" },
	{ "ODPX_SYSFS_ROOT", "/sys" },
	{ "ODPX_DEBUGFS_ROOT", "/sys/kernel/debug" },
	{ "ODPX_PROCFS_ROOT", "/proc" },
	{ "ODPX_NO_NETLINK", "unset" },
	{ "ODPX_LOG", "warn" },
	{ "ODPX_FABRIC_UNSAFE_NO_NOTIFY", "unset (tests only)" },
};

static bool json;
static bool first_item;

/* ---- output: one pair per line in text, one object in JSON ---- */

static void sep(void)
{
	if (!first_item)
		putchar(',');
	first_item = false;
}

static void section(const char *name)
{
	if (json) {
		sep();
		json_str(stdout, name);
		printf(":{");
		first_item = true;
	} else {
		printf("\n%s:\n", name);
	}
}

static void section_end(void)
{
	if (json) {
		putchar('}');
		first_item = false;
	}
}

/* One pair: its value a JSON string, or with @num a JSON number */
__attribute__((format(printf, 3, 4)))
static void pair(bool num, const char *k, const char *fmt, ...)
{
	char v[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(v, sizeof(v), fmt, ap);
	va_end(ap);
	if (!json) {
		printf("  %-26s %s\n", k, v);
		return;
	}
	sep();
	json_str(stdout, k);
	putchar(':');
	if (num)
		fputs(v, stdout);
	else
		json_str(stdout, v);
}
#define kv(k, ...) pair(false, k, __VA_ARGS__)
#define knum(k, v) pair(true, k, "%llu", (unsigned long long)(v))

/* ---- what the process and the kernel offer ---- */

/* a sysctl's value, 0 when unreadable */
static unsigned long long sysctl(const char *path)
{
	uint64_t v = 0;

	ctr_read_file(path, &v);
	return v;
}

static bool has_ipc_lock(void)
{
	struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct d[2];

	if (syscall(SYS_capget, &h, d) < 0)
		return false;
	return d[CAP_IPC_LOCK / 32].effective & (1U << (CAP_IPC_LOCK % 32));
}

static void knobs(void)
{
	section("environment");
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
		const char *v = getenv(vars[i].name);
		const char *from = v && *v ? "environment" : "default";

		if (!v || !*v)
			v = vars[i].dflt;
		if (!json) {
			printf("  %-26s %s (%s)\n", vars[i].name, v, from);
			continue;
		}
		section(vars[i].name);
		kv("value", "%s", v);
		kv("source", "%s", from);
		kv("default", "%s", vars[i].dflt);
		section_end();
	}
	section_end();
}

/* The limits a default context resolved, as odpx_query() reports them; @ctx may be NULL. */
static void limits(struct odpx_ctx *ctx)
{
	static const char *const src[] = { "?", "attributes", "RLIMIT_MEMLOCK",
					   "RAM/8 (CAP_IPC_LOCK or RLIMIT_MEMLOCK unlimited)" };
	struct odpx_caps c = { .comp_mask = ODPX_QUERY_LIMITS | ODPX_QUERY_WATCH | ODPX_QUERY_URING };
	struct rlimit rl;

	section("limits");
	getrlimit(RLIMIT_MEMLOCK, &rl);
	if (rl.rlim_cur != RLIM_INFINITY)
		knum("rlimit_memlock_bytes", rl.rlim_cur);
	else
		kv("rlimit_memlock_bytes", "unlimited");
	kv("cap_ipc_lock", "%s", has_ipc_lock() ? "yes" : "no");
	if (!ctx || odpx_query(ctx, &c) < 0 || !(c.comp_mask & ODPX_QUERY_LIMITS)) {
		kv("resolved", "no: no context opened (io_uring above)");
		section_end();
		return;
	}
	knum("max_pinned_bytes", c.limits.max_pinned_bytes);
	kv("max_pinned_bytes_from", "%s",
	   c.max_pinned_source < ODPX_LIMIT_RESERVED ? src[c.max_pinned_source] : "?");
	knum("max_entries", c.limits.max_entries);
	knum("max_unused_bytes", c.limits.max_unused_bytes);
	knum("max_entry_bytes", c.limits.max_entry_bytes);
	knum("idle_ms", c.idle_ms);
	if (c.comp_mask & ODPX_QUERY_WATCH)
		knum("watch_max", c.watch_max);
	if (c.comp_mask & ODPX_QUERY_URING) {
		knum("uring_slots", c.uring_slots);
		knum("uring_slot_max_bytes", c.uring_slot_max_bytes);
	}
	section_end();
}

static const struct {
	uint64_t bit;
	const char *name;
} uffd_features[] = {
	{ UFFD_FEATURE_EVENT_UNMAP, "EVENT_UNMAP" },
	{ UFFD_FEATURE_EVENT_REMOVE, "EVENT_REMOVE" },
	{ UFFD_FEATURE_EVENT_REMAP, "EVENT_REMAP" },
	{ UFFD_FEATURE_EVENT_FORK, "EVENT_FORK" },
	{ UFFD_FEATURE_PAGEFAULT_FLAG_WP, "PAGEFAULT_FLAG_WP" },
	{ UFFD_FEATURE_MISSING_SHMEM, "MISSING_SHMEM" },
	{ UFFD_FEATURE_MISSING_HUGETLBFS, "MISSING_HUGETLBFS" },
	{ UFFD_FEATURE_WP_UNPOPULATED, "WP_UNPOPULATED" },
	{ UFFD_FEATURE_WP_ASYNC, "WP_ASYNC" },
};

/*
 * The features offered, as uffd/open.c probes them: the system call, else
 * /dev/userfaultfd (vm.unprivileged_userfaultfd 0); -errno when refused.
 */
static int uffd_probe(uint64_t *features)
{
	struct uffdio_api api = { .api = UFFD_API };
	int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
	int err = errno, dev;

	if (fd < 0 && (dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC)) >= 0) {
		fd = ioctl(dev, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
		close(dev);
	}
	if (fd < 0)
		return -err;
	err = ioctl(fd, UFFDIO_API, &api) < 0 ? -errno : 0;
	close(fd);
	*features = api.features;
	return err;
}

static void userfaultfd(void)
{
	const uint64_t ev = UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMOVE |
			    UFFD_FEATURE_EVENT_REMAP;
	const char *force = getenv("ODPX_UFFD_MODE");
	uint64_t have = 0;
	int r = uffd_probe(&have);
	char names[512] = "";
	const char *mode;

	section("userfaultfd");
	knum("vm_unprivileged_userfaultfd", sysctl("/proc/sys/vm/unprivileged_userfaultfd"));
	if (r < 0) {
		kv("available", "no: %s", strerror(-r));
		kv("monitor_mode", "none: every registration is served direct");
		section_end();
		return;
	}
	kv("available", "yes");
	knum("features", have);
	for (size_t i = 0; i < sizeof(uffd_features) / sizeof(uffd_features[0]); i++)
		if (have & uffd_features[i].bit)
			snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s",
				 names[0] ? " " : "", uffd_features[i].name);
	kv("feature_names", "%s", names);
	/* the rule of uffd/open.c */
	if ((have & ev) != ev)
		mode = "none: UNMAP/REMOVE/REMAP events missing";
	else if (force && *force && strcmp(force, "auto"))
		mode = force;
	else if ((have & UFFD_FEATURE_WP_ASYNC) && (have & UFFD_FEATURE_PAGEFAULT_FLAG_WP))
		mode = "wp-async";
	else if (have & UFFD_FEATURE_PAGEFAULT_FLAG_WP)
		mode = "wp";
	else
		mode = "missing";
	kv("monitor_mode", "%s", mode);
	section_end();
}

/*
 * A default uring context: does io_uring work, and does pin mode cache?
 * Returns it, open, for limits(); NULL when it does not open.
 */
static struct odpx_ctx *uring(void)
{
	size_t len = 64 << 10;
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct odpx_ctx *ctx;
	struct odpx_mr *mr;
	struct odpx_stats st;
	enum odpx_mode m;
	const char *why;
	int r;

	section("io_uring");
	knum("kernel_io_uring_disabled", sysctl("/proc/sys/kernel/io_uring_disabled"));
	r = odpx_open_uring(NULL, &ctx);
	if (r < 0) {
		kv("usable", "no");
		kv("reason", "%s", odpx_last_reason());
		section_end();
		return NULL;
	}
	kv("usable", "yes");
	if (p != MAP_FAILED && odpx_reg(ctx, p, len, ODPX_ACCESS_LOCAL_WRITE, &mr) == 0) {
		odpx_dereg(ctx, mr);
		if (odpx_stats_read(ctx, &st, sizeof(st)) > 0)
			kv("registration", "%s", st.direct_no_monitor ? "served direct: no monitor" :
			   st.direct_regs ? "served direct" : "cached (the monitor watches it)");
	} else {
		kv("registration", "failed: %s", odpx_last_reason());
	}
	if (odpx_mode_get(ctx, &m, &why) == 0) {
		kv("mode", "%s", odpx_mode_str(m));
		kv("reason", "%s", why);
	}
	if (p != MAP_FAILED)
		munmap(p, len);
	section_end();
	return ctx;
}

#ifdef ODPX_HAVE_VERBS
/* A device's section: its caps, and the mode odpx_open_verbs() picks with defaults */
static void device(struct ibv_context *c, const struct devcaps *d)
{
	struct ibv_pd *pd = c ? ibv_alloc_pd(c) : NULL;
	struct odpx_ctx *ctx;
	enum odpx_mode m;
	const char *why;

	section(d->name);
	if (d->queried) {
		kv("odp", "%s", d->general & IBV_ODP_SUPPORT ? "yes" : "no");
		kv("odp_implicit", "%s", d->general & IBV_ODP_SUPPORT_IMPLICIT ? "yes" : "no");
		kv("rc_odp_caps", "%#x", d->rc);
		kv("uc_odp_caps", "%#x", d->uc);
		kv("ud_odp_caps", "%#x", d->ud);
		knum("max_mr_size", d->max_mr_size);
	}
	if (!c) {
		kv("usable", "no: %s", d->err);
	} else if (!pd) {
		kv("usable", "no: ibv_alloc_pd: %s", strerror(errno));
	} else if (odpx_open_verbs(pd, NULL, &ctx) < 0) {
		kv("usable", "no");
		kv("reason", "%s", odpx_last_reason());
	} else {
		kv("usable", "yes");
		if (odpx_mode_get(ctx, &m, &why) == 0) {
			kv("auto_mode", "%s", odpx_mode_str(m));
			kv("reason", "%s", why);
		}
		odpx_close(ctx);
	}
	if (pd)
		ibv_dealloc_pd(pd);
	section_end();
}
#endif

static void devices(void)
{
	section("rdma_devices");
#ifdef ODPX_HAVE_VERBS
	if (!devcaps_query(NULL, NULL, device) && !json)
		printf("  none\n");
#else
	if (!json)
		printf("  odpx built without libibverbs\n");
#endif
	section_end();
}

int main(int argc, char **argv)
{
	struct odpx_ctx *ctx;
	struct utsname u;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json")) {
			json = true;
		} else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			printf("usage: odpx-info [--json]\n");
			return 0;
		} else {
			fprintf(stderr, "odpx-info: unknown argument %s (usage: odpx-info [--json])\n",
				argv[i]);
			return 2;
		}
	}
	uname(&u);
	if (json) {
		printf("{");
		first_item = true;
		kv("version", "%s", odpx_version());
		kv("kernel", "%s", u.release);
	} else {
		printf("odpx %s, kernel %s\n", odpx_version(), u.release);
	}
	knobs();
	userfaultfd();
	ctx = uring();
	limits(ctx);
	if (ctx)
		odpx_close(ctx);
	devices();
	if (json)
		printf("}\n");
	return 0;
}
