// SPDX-License-Identifier: MIT
/*
 * errors-memlock: with a tiny RLIMIT_MEMLOCK and no CAP_IPC_LOCK, the open
 * and the registration that the limit refuses say so in odpx_last_reason():
 * the limit, its value, and ulimit -l.
 *
 * Each case runs in a child that drops CAP_IPC_LOCK (a root process is not
 * charged for locked memory) and lowers the limit with setrlimit().
 */
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>

#include "test.h"

static void drop_ipc_lock(void)
{
	struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct d[2];

	if (syscall(SYS_capget, &h, d) < 0)
		FAIL("capget: %s", strerror(errno));
	for (int i = 0; i < 2; i++) {
		d[i].effective &= ~(i == CAP_IPC_LOCK / 32 ? 1U << (CAP_IPC_LOCK % 32) : 0);
		d[i].permitted &= ~(i == CAP_IPC_LOCK / 32 ? 1U << (CAP_IPC_LOCK % 32) : 0);
	}
	if (syscall(SYS_capset, &h, d) < 0)
		FAIL("capset: %s", strerror(errno));
}

static void set_memlock(rlim_t bytes)
{
	struct rlimit rl = { bytes, bytes };

	if (setrlimit(RLIMIT_MEMLOCK, &rl) < 0)
		FAIL("setrlimit(RLIMIT_MEMLOCK, %llu): %s", (unsigned long long)bytes,
		     strerror(errno));
}

static void check_names(const char *what, const char *reason, const char *value)
{
	printf("%s: %s\n", what, reason);
	CHECK(strstr(reason, "RLIMIT_MEMLOCK"), "%s: reason names no RLIMIT_MEMLOCK", what);
	CHECK(strstr(reason, value), "%s: reason does not give the limit's value %s", what, value);
	CHECK(strstr(reason, "ulimit -l"), "%s: reason names no ulimit -l", what);
}

/* A limit of 0: the open fails, as io_uring charges its rings to the limit. */
static int open_at_zero(void *arg)
{
	struct odpx_ctx *ctx;
	int r;

	drop_ipc_lock();
	set_memlock(0);
	r = odpx_open_uring(NULL, &ctx);
	if (r == 0) {
		/* a kernel that does not charge the rings: the first pin fails instead */
		printf("open succeeded at RLIMIT_MEMLOCK 0: the kernel does not charge rings\n");
		odpx_close(ctx);
		return 0;
	}
	CHECK(r == -ENOMEM, "open at RLIMIT_MEMLOCK 0: %d (%s)", r, odpx_last_reason());
	check_names("open", odpx_last_reason(), "is 0 bytes");
	return 0;
}

/* 16 KiB: a 64 KiB registration exceeds max_pinned_bytes, which defaults to it. */
static int reg_over_limit(void *arg)
{
	size_t len = 64 << 10;
	void *p = map_anon(NULL, len);
	struct odpx_ctx *ctx;
	struct odpx_mr *mr;
	int r;

	drop_ipc_lock();
	set_memlock(16 << 10);
	r = odpx_open_uring(NULL, &ctx);
	CHECK(r == 0, "open at RLIMIT_MEMLOCK 16 KiB: %d (%s)", r, odpx_last_reason());
	r = odpx_reg(ctx, p, len, ODPX_ACCESS_LOCAL_WRITE, &mr);
	CHECK(r == -ENOMEM, "64 KiB reg at RLIMIT_MEMLOCK 16 KiB: %d (%s)", r, odpx_last_reason());
	check_names("reg", odpx_last_reason(), "16384");
	CHECK(strstr(odpx_last_reason(), "max_pinned_bytes"), "reason names no max_pinned_bytes");
	CHECK_RC(odpx_close(ctx), 0);
	return 0;
}

int main(void)
{
	CHECK(run_forked(NULL, open_at_zero, NULL) == 0, "RLIMIT_MEMLOCK 0 case failed");
	CHECK(run_forked(NULL, reg_over_limit, NULL) == 0, "RLIMIT_MEMLOCK 16 KiB case failed");
	printf("PASS\n");
	return 0;
}
