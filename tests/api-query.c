// SPDX-License-Identifier: MIT
/*
 * api-query: odpx_query() on the uring backend.
 *
 * - limits set in the attributes come back as set, source ATTR;
 * - the defaults: with CAP_IPC_LOCK, 1/8 of RAM (source RAM); without it,
 *   in a child that drops it and sets RLIMIT_MEMLOCK, the limit (source
 *   MEMLOCK), and rlimit_memlock says the same;
 * - entries, pinned and unused bytes follow registrations, and match the
 *   stats;
 * - the watched-range budget appears once a miss attached the monitor, with
 *   its use at least the ranges registered and the budget below
 *   vm.max_map_count;
 * - the uring slots; no DEVICE part on this backend; the parts asked for
 *   only; unknown bits -EINVAL.
 */
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>

#include "test.h"

#define PG 4096UL

static void limits_attr(void)
{
	struct odpx_attr at = { .comp_mask = ODPX_ATTR_LIMITS,
				.limits = { .max_pinned_bytes = 1 << 20, .max_entries = 100,
					    .max_unused_bytes = 1 << 18,
					    .max_entry_bytes = 1 << 19 } };
	struct odpx_caps c = { .comp_mask = ODPX_QUERY_LIMITS };
	struct odpx_ctx *ctx;

	CHECK_RC(odpx_open_uring(&at, &ctx), 0);
	CHECK_RC(odpx_query(ctx, &c), 0);
	CHECK(c.comp_mask == ODPX_QUERY_LIMITS, "comp_mask %#lx", (unsigned long)c.comp_mask);
	CHECK(c.limits.max_pinned_bytes == 1 << 20 && c.limits.max_entries == 100 &&
	      c.limits.max_unused_bytes == 1 << 18 && c.limits.max_entry_bytes == 1 << 19 &&
	      c.max_pinned_source == ODPX_LIMIT_ATTR,
	      "limits %lu %lu %lu %lu source %u", (unsigned long)c.limits.max_pinned_bytes,
	      (unsigned long)c.limits.max_entries, (unsigned long)c.limits.max_unused_bytes,
	      (unsigned long)c.limits.max_entry_bytes, c.max_pinned_source);
	CHECK_RC(odpx_close(ctx), 0);
}

static bool has_ipc_lock(void)
{
	struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct d[2];

	CHECK(syscall(SYS_capget, &h, d) == 0, "capget");
	return d[CAP_IPC_LOCK / 32].effective & (1U << (CAP_IPC_LOCK % 32));
}

static void defaults(const char *who)
{
	struct odpx_caps c = { .comp_mask = ODPX_QUERY_LIMITS };
	struct odpx_ctx *ctx;
	struct rlimit rl;

	CHECK(getrlimit(RLIMIT_MEMLOCK, &rl) == 0, "getrlimit");
	CHECK_RC(odpx_open_uring(NULL, &ctx), 0);
	CHECK_RC(odpx_query(ctx, &c), 0);
	uint64_t rlim = rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : rl.rlim_cur;
	CHECK(c.rlimit_memlock == rlim, "%s: rlimit_memlock %lu, getrlimit %lu", who,
	      (unsigned long)c.rlimit_memlock, (unsigned long)rlim);
	if (!has_ipc_lock() && rl.rlim_cur != RLIM_INFINITY) {
		CHECK(c.max_pinned_source == ODPX_LIMIT_MEMLOCK && c.limits.max_pinned_bytes == rlim,
		      "%s: source %u max_pinned %lu, want MEMLOCK %lu", who, c.max_pinned_source,
		      (unsigned long)c.limits.max_pinned_bytes, (unsigned long)rlim);
	} else {
		uint64_t ram = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
		CHECK(c.max_pinned_source == ODPX_LIMIT_RAM && c.limits.max_pinned_bytes == ram / 8,
		      "%s: source %u max_pinned %lu, want RAM/8 %lu", who, c.max_pinned_source,
		      (unsigned long)c.limits.max_pinned_bytes, (unsigned long)(ram / 8));
	}
	CHECK(c.limits.max_unused_bytes == c.limits.max_pinned_bytes / 2 &&
	      c.limits.max_entries == 4096 && c.limits.max_entry_bytes == 1UL << 30,
	      "%s: default limits", who);
	CHECK_RC(odpx_close(ctx), 0);
	printf("%s: source %s: ok\n", who, c.max_pinned_source == ODPX_LIMIT_RAM ? "RAM" : "MEMLOCK");
}

/* In a child: without CAP_IPC_LOCK, under an RLIMIT_MEMLOCK of 8 MiB. */
static int memlock_child(void *arg)
{
	struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct d[2];
	struct rlimit rl = { 8 << 20, 8 << 20 };

	(void)arg;
	CHECK(syscall(SYS_capget, &h, d) == 0, "capget");
	d[CAP_IPC_LOCK / 32].effective &= ~(1U << (CAP_IPC_LOCK % 32));
	CHECK(syscall(SYS_capset, &h, d) == 0, "capset: %s", strerror(errno));
	CHECK(!has_ipc_lock(), "CAP_IPC_LOCK still effective");
	CHECK(setrlimit(RLIMIT_MEMLOCK, &rl) == 0, "setrlimit: %s", strerror(errno));
	defaults("no CAP_IPC_LOCK, RLIMIT_MEMLOCK 8 MiB");
	return 0;
}

static void usage(void)
{
	struct odpx_caps c;
	struct odpx_ctx *ctx;
	struct odpx_mr *mr[3];
	unsigned char *buf = map_anon(NULL, 16 * PG);

	memset(buf, 1, 16 * PG);
	CHECK_RC(odpx_open_uring(NULL, &ctx), 0);
	c = (struct odpx_caps){ .comp_mask = ODPX_QUERY_USAGE | ODPX_QUERY_WATCH | ODPX_QUERY_URING |
					     ODPX_QUERY_DEVICE };
	CHECK_RC(odpx_query(ctx, &c), 0);
	CHECK(c.comp_mask == (ODPX_QUERY_USAGE | ODPX_QUERY_URING),
	      "before any miss: comp_mask %#lx (no WATCH yet, no DEVICE here)",
	      (unsigned long)c.comp_mask);
	CHECK(c.entries == 0 && c.pinned_bytes == 0 && c.uring_slots == 16384 &&
	      c.uring_slot_max_bytes == 1UL << 30, "empty context: entries %lu slots %u",
	      (unsigned long)c.entries, c.uring_slots);
	for (int i = 0; i < 3; i++)
		CHECK_RC(odpx_reg(ctx, buf + i * 5 * PG, (size_t)(i + 1) * PG, 0, &mr[i]), 0);
	CHECK_RC(odpx_dereg(ctx, mr[0]), 0);
	c.comp_mask = ODPX_QUERY_USAGE | ODPX_QUERY_WATCH;
	CHECK_RC(odpx_query(ctx, &c), 0);
	struct odpx_stats st = stats_of(ctx);
	CHECK(c.comp_mask == (ODPX_QUERY_USAGE | ODPX_QUERY_WATCH), "comp_mask %#lx",
	      (unsigned long)c.comp_mask);
	CHECK(c.entries == 3 && c.pinned_bytes == 6 * PG && c.unused_bytes == PG &&
	      c.entries == st.entries && c.pinned_bytes == st.pinned_bytes &&
	      c.unused_bytes == st.unused_bytes && c.prereg_regions == 0,
	      "entries %lu pinned %lu unused %lu (stats %lu %lu %lu)", (unsigned long)c.entries,
	      (unsigned long)c.pinned_bytes, (unsigned long)c.unused_bytes,
	      (unsigned long)st.entries, (unsigned long)st.pinned_bytes,
	      (unsigned long)st.unused_bytes);
	long max_map = 0;
	FILE *f = fopen("/proc/sys/vm/max_map_count", "re");
	CHECK(f && fscanf(f, "%ld", &max_map) == 1, "vm.max_map_count");
	fclose(f);
	CHECK(c.watch_ranges >= 1 && c.watch_max > 0 && c.watch_ranges <= c.watch_max &&
	      (long)c.watch_max < max_map, "watch %u of %u (max_map_count %ld)", c.watch_ranges,
	      c.watch_max, max_map);
	CHECK_RC(odpx_prereg_add(ctx, buf + 12 * PG, 4 * PG, 0), 0);
	c.comp_mask = ODPX_QUERY_USAGE;
	CHECK_RC(odpx_query(ctx, &c), 0);
	CHECK(c.prereg_regions == 1 && c.prereg_bytes == 4 * PG && c.entries == 4,
	      "prereg %lu regions %lu bytes", (unsigned long)c.prereg_regions,
	      (unsigned long)c.prereg_bytes);
	for (int i = 1; i < 3; i++)
		CHECK_RC(odpx_dereg(ctx, mr[i]), 0);

	c.comp_mask = ODPX_QUERY_RESERVED;
	CHECK_RC(odpx_query(ctx, &c), -EINVAL);
	CHECK_RC(odpx_query(ctx, NULL), -EINVAL);
	CHECK_RC(odpx_query(NULL, &c), -EINVAL);
	c.comp_mask = 0;
	CHECK_RC(odpx_query(ctx, &c), 0);
	CHECK(c.comp_mask == 0, "nothing asked, %#lx filled", (unsigned long)c.comp_mask);
	CHECK_RC(odpx_close(ctx), 0);
	munmap(buf, 16 * PG);
	printf("usage, watch budget, uring slots: ok\n");
}

int main(void)
{
	limits_attr();
	printf("limits from the attributes: ok\n");
	defaults("this process");
	CHECK(run_forked(NULL, memlock_child, NULL) == 0, "the child without CAP_IPC_LOCK failed");
	usage();
	return 0;
}
