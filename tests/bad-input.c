// SPDX-License-Identifier: MIT
/*
 * bad-input: every malformed call fails with its specific -errno, crashes
 * nothing and loses nothing.
 *
 * Open: unknown comp_mask bits, unknown open flags, out-of-range modes,
 * max_entries above the uring slots, ODPX_MODE forcing an ODP mode on uring
 * (-EOPNOTSUPP) or holding garbage (-EINVAL), and each of the other knobs of
 * the environment out of bounds or malformed (-EINVAL, naming it).  Calls: a NULL context on every
 * function; NULL, unmapped, PROT_NONE and read-only addresses; zero length,
 * wrapping ranges, unknown access and prefetch bits; dereg of foreign, random,
 * never handed out and already released handles.  The reg checks run on a
 * pin-mode and on a direct-mode context.
 *
 * Loses nothing: after the bad calls the gauges (entries, pinned_bytes) are
 * what they were, a registration held throughout still moves the right bytes
 * and is still a hit; after odpx_close, VmPin is back to its baseline and no
 * file descriptor is left open but the library's /proc/self/maps handle.
 */
#include <dirent.h>
#include <stdint.h>

#include "test.h"
#include "odpx-private.h"	/* the slab: handles inside it */

#define LEN (64 * 1024)

static const char *mode_env_saved;

/* File descriptors open now, as a bitmap of the first 1024. */
static void fd_set_now(unsigned char *set)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;

	CHECK(d, "opendir /proc/self/fd: %s", strerror(errno));
	memset(set, 0, 1024);
	while ((de = readdir(d))) {
		int fd = atoi(de->d_name);
		if (de->d_name[0] != '.' && fd != dirfd(d) && fd < 1024)
			set[fd] = 1;
	}
	closedir(d);
}

static int fd_is_maps(int fd)
{
	char path[64], target[256];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, target, sizeof(target) - 1);
	if (n < 0)
		return 0;
	target[n] = 0;
	return strlen(target) > 5 && !strcmp(target + strlen(target) - 5, "/maps");
}

static void check_fds(const unsigned char *before, int allow_maps, const char *when)
{
	unsigned char now[1024];

	fd_set_now(now);
	for (int fd = 0; fd < 1024; fd++) {
		if (now[fd] && !before[fd] && !(allow_maps && fd_is_maps(fd))) {
			char path[64], target[256] = "?";
			snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
			ssize_t n = readlink(path, target, sizeof(target) - 1);
			if (n >= 0)
				target[n] = 0;
			FAIL("%s: fd %d (%s) leaked", when, fd, target);
		}
	}
}

static int try_open(const struct odpx_attr *a)
{
	struct odpx_ctx *ctx = NULL;
	int r = odpx_open_uring(a, &ctx);

	if (r == 0)
		CHECK_RC(odpx_close(ctx), 0);
	return r;
}

static int try_open_env(const char *mode)
{
	int r;

	CHECK(setenv("ODPX_MODE", mode, 1) == 0, "setenv");
	r = try_open(NULL);
	if (mode_env_saved)
		setenv("ODPX_MODE", mode_env_saved, 1);
	else
		unsetenv("ODPX_MODE");
	return r;
}

/*
 * The environment's knobs: a value out of bounds, signed, with a suffix or
 * not a number refuses the open with -EINVAL and a reason that names the
 * variable; one in bounds opens, and so does an empty one (the default).  Each variable is put back as it was.
 */
static void bad_env(void)
{
	static const struct {
		const char *name, *good, *bad[5];
	} k[] = {
		{ "ODPX_ENGINE_LINGER_US", "0", { "1000001", "-1", "100us", "x", " 5" } },
		{ "ODPX_MONITOR_SPIN_US", "", { "1000001", "-1", "50us", "+5", NULL } },
		{ "ODPX_REMOVE_QUARANTINE_MS", "100", { "60001", "-1", "1e3", "0x10", NULL } },
		{ "ODPX_WATCH_MAX", "2", { "0", "1048577", "-2", "many", NULL } },
		{ "ODPX_WATCH_WIDEN_KB", "64", { "1048577", "-64", "64k", "99999999999999999999", NULL } },
		{ "ODPX_UFFD_MODE", "wp", { "bogus", "WP", "wp-sync", NULL } },
		{ "ODPX_THRASH", "window_ms=200, enter_n=3",
		  { "garbage=,,==", "window_ms=-5", "window_ms", "exit_factor=2", "enter_n=1.5" } },
	};

	for (size_t i = 0; i < sizeof(k) / sizeof(k[0]); i++) {
		const char *was = getenv(k[i].name);
		char *saved = was ? strdup(was) : NULL;

		for (int b = 0; b < 5 && k[i].bad[b]; b++) {
			CHECK(setenv(k[i].name, k[i].bad[b], 1) == 0, "setenv");
			CHECK_RC(try_open(NULL), -EINVAL);
			CHECK(strstr(odpx_last_reason(), k[i].name) != NULL,
			      "%s=%s refused with reason \"%s\"", k[i].name, k[i].bad[b],
			      odpx_last_reason());
		}
		CHECK(setenv(k[i].name, k[i].good, 1) == 0, "setenv");
		CHECK_RC(try_open(NULL), 0);
		if (saved)
			setenv(k[i].name, saved, 1);
		else
			unsetenv(k[i].name);
		free(saved);
	}
}

static void bad_open(void)
{
	struct odpx_attr a;
	struct odpx_ctx *ctx;

	CHECK_RC(odpx_open_uring(NULL, NULL), -EINVAL);

	a = (struct odpx_attr){ .comp_mask = ODPX_ATTR_RESERVED };
	CHECK_RC(try_open(&a), -EINVAL);
	a = (struct odpx_attr){ .comp_mask = 1ULL << 63 };
	CHECK_RC(try_open(&a), -EINVAL);
	a = (struct odpx_attr){ .comp_mask = ODPX_ATTR_FLAGS, .flags = ODPX_OPEN_RESERVED };
	CHECK_RC(try_open(&a), -EINVAL);
	a = (struct odpx_attr){ .comp_mask = ODPX_ATTR_FLAGS, .flags = 1U << 31 };
	CHECK_RC(try_open(&a), -EINVAL);
	a = (struct odpx_attr){ .comp_mask = ODPX_ATTR_MODE, .mode = ODPX_MODE_RESERVED };
	CHECK_RC(try_open(&a), -EINVAL);
	a = (struct odpx_attr){ .comp_mask = ODPX_ATTR_MODE, .mode = (enum odpx_mode)-1 };
	CHECK_RC(try_open(&a), -EINVAL);
	/* fields whose comp_mask bit is clear are ignored (extensible struct) */
	a = (struct odpx_attr){ .comp_mask = 0, .mode = (enum odpx_mode)99, .flags = ~0U };
	CHECK_RC(try_open(&a), 0);

	a = (struct odpx_attr){ .comp_mask = ODPX_ATTR_LIMITS,
				.limits = { .max_entries = 16385 } };
	CHECK_RC(try_open(&a), -EINVAL);
	a.limits.max_entries = 1ULL << 40;
	CHECK_RC(try_open(&a), -EINVAL);
	a.limits.max_entries = 16384;	/* exactly the slots: fine */
	CHECK_RC(try_open(&a), 0);
	a = (struct odpx_attr){ .comp_mask = ODPX_ATTR_LIMITS,
				.limits = { .max_entry_bytes = (1ULL << 30) + 4096 } };
	CHECK_RC(try_open(&a), -EINVAL);

	/* ODP modes are impossible on io_uring, however they are asked for */
	a = (struct odpx_attr){ .comp_mask = ODPX_ATTR_MODE, .mode = ODPX_MODE_EXPLICIT };
	CHECK_RC(try_open(&a), -EOPNOTSUPP);
	a.mode = ODPX_MODE_IMPLICIT;
	CHECK_RC(try_open(&a), -EOPNOTSUPP);
	CHECK_RC(try_open_env("explicit"), -EOPNOTSUPP);
	CHECK_RC(try_open_env("implicit"), -EOPNOTSUPP);
	CHECK_RC(try_open_env("garbage"), -EINVAL);
	CHECK_RC(try_open_env("PIN "), -EINVAL);
	CHECK_RC(try_open_env("pin"), 0);
	CHECK_RC(try_open_env("direct"), 0);

	/* a failed open hands out no context */
	ctx = (struct odpx_ctx *)&a;
	a = (struct odpx_attr){ .comp_mask = ODPX_ATTR_RESERVED };
	CHECK_RC(odpx_open_uring(&a, &ctx), -EINVAL);
	CHECK(ctx == NULL, "failed odpx_open_uring left *ctx = %p", (void *)ctx);
}

static void null_ctx(struct odpx_mr *held, void *buf)
{
	struct odpx_mr *mr = NULL;
	struct odpx_stats st;
	enum odpx_mode m;
	const char *why;

	CHECK_RC(odpx_reg(NULL, buf, 4096, 0, &mr), -EINVAL);
	CHECK_RC(odpx_dereg(NULL, held), -EINVAL);
	CHECK_RC(odpx_dereg(NULL, NULL), -EINVAL);
	CHECK_RC(odpx_transfer(NULL, held, 0, 0, buf, 4096, ODPX_XFER_TO_FD), -EINVAL);
	CHECK_RC(odpx_prefetch(NULL, buf, 4096, 0), -EINVAL);
	CHECK_RC(odpx_stats_read(NULL, &st, sizeof(st)), -EINVAL);
	CHECK_RC(odpx_mode_get(NULL, &m, &why), -EINVAL);
	CHECK_RC(odpx_close(NULL), -EINVAL);
	CHECK(mr == NULL, "a failed odpx_reg wrote a handle");
}

/* Set the thread's reason to a known text, so that a new one can be seen. */
static void mark_reason(struct odpx_ctx *ctx, void *buf)
{
	struct odpx_mr *mr;

	CHECK_RC(odpx_reg(ctx, buf, 0, 0, &mr), -EINVAL);
	CHECK(strstr(odpx_last_reason(), "zero length"), "reason after a zero length: \"%s\"",
	      odpx_last_reason());
}

static void expect_reg(struct odpx_ctx *ctx, const char *name, void *addr, size_t len,
		       uint32_t acc, int want, int need_reason)
{
	struct odpx_mr *mr = NULL;
	int r;

	if (need_reason)
		mark_reason(ctx, (void *)(uintptr_t)4096);
	r = odpx_reg(ctx, addr, len, acc, &mr);
	if (r != want) {
		if (r == 0)
			odpx_dereg(ctx, mr);
		FAIL("%s: odpx_reg(%p, %zu, %#x) = %d (%s), want %d (%s); reason: %s", name, addr,
		     len, acc, r, r ? strerror(-r) : "ok", want, strerror(-want), odpx_last_reason());
	}
	if (need_reason) {
		const char *why = odpx_last_reason();
		CHECK(*why && !strstr(why, "zero length") && strcmp(why, "no error"),
		      "%s: %d (%s) without a reason of its own (odpx_last_reason() = \"%s\")", name,
		      want, strerror(-want), why);
	}
}

/* Gauges unchanged, the held registration intact. */
static void check_nothing_lost(struct odpx_ctx *ctx, const struct odpx_stats *st0,
			       struct odpx_mr *held, void *buf, unsigned seed, const char *when)
{
	struct odpx_stats st = stats_of(ctx);

	CHECK(st.entries == st0->entries, "%s: entries %lu, was %lu", when,
	      (unsigned long)st.entries, (unsigned long)st0->entries);
	CHECK(st.pinned_bytes == st0->pinned_bytes, "%s: pinned_bytes %lu, was %lu", when,
	      (unsigned long)st.pinned_bytes, (unsigned long)st0->pinned_bytes);
	CHECK(data_check(ctx, held, buf, LEN, seed), "%s: held registration moves wrong bytes", when);
}

static void bad_regs(struct odpx_ctx *ctx, const char *tag)
{
	char name[128];
	unsigned char *buf = map_anon(NULL, LEN);
	unsigned char *hole = map_anon(NULL, 3 * 4096);
	void *none = mmap(NULL, LEN, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	void *ro = mmap(NULL, LEN, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	void *ro_touched = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	int fd = memfd_create("odpx-ro", MFD_CLOEXEC);
	void *ro_file;
	struct odpx_mr *held, *mr = NULL;
	struct odpx_stats st0, st;
	enum odpx_mode mode;

	CHECK(none != MAP_FAILED && ro != MAP_FAILED && ro_touched != MAP_FAILED && fd >= 0, "mmap");
	CHECK(ftruncate(fd, LEN) == 0, "ftruncate");
	ro_file = mmap(NULL, LEN, PROT_READ, MAP_PRIVATE, fd, 0);
	CHECK(ro_file != MAP_FAILED, "mmap memfd");
	memset(ro_touched, 1, LEN);
	CHECK(mprotect(ro_touched, LEN, PROT_READ) == 0, "mprotect");
	(void)*(volatile char *)ro;	/* a zero page mapped read-only */
	CHECK_RC(odpx_mode_get(ctx, &mode, NULL), 0);

	CHECK_RC(odpx_reg(ctx, buf, LEN, ODPX_ACCESS_LOCAL_WRITE, &held), 0);
	CHECK(data_check(ctx, held, buf, LEN, 1), "%s: first data check", tag);
	st0 = stats_of(ctx);
	/* now that the context's threads and rings exist, nothing maps the hole */
	CHECK(munmap(hole + 4096, 4096) == 0, "munmap");

#define NAME(s) (snprintf(name, sizeof(name), "%s: %s", tag, s), name)
	CHECK_RC(odpx_reg(ctx, buf, 4096, 0, NULL), -EINVAL);
	expect_reg(ctx, NAME("NULL address"), NULL, 4096, 0, -EFAULT, 1);
	expect_reg(ctx, NAME("NULL address, length 1"), NULL, 1, 0, -EFAULT, 0);
	expect_reg(ctx, NAME("zero length"), buf, 0, 0, -EINVAL, 0);
	expect_reg(ctx, NAME("wrap"), buf, SIZE_MAX - 10, 0, -EINVAL, 1);
	expect_reg(ctx, NAME("wrap to 0"), (void *)(UINTPTR_MAX - 4095), 4096, 0, -EINVAL, 0);
	expect_reg(ctx, NAME("last page"), (void *)(UINTPTR_MAX - 100), 50, 0, -EINVAL, 0);
	expect_reg(ctx, NAME("access bit 4"), buf, 4096, ODPX_ACCESS_RESERVED, -EINVAL, 1);
	expect_reg(ctx, NAME("access bit 31"), buf, 4096, 1U << 31, -EINVAL, 0);
	expect_reg(ctx, NAME("below mmap_min_addr"), (void *)4096, 4096, 0, -EFAULT, 1);
	CHECK(msync(hole + 4096, 4096, MS_ASYNC) < 0 && errno == ENOMEM, "the hole got mapped");
	expect_reg(ctx, NAME("unmapped page"), hole + 4096, 4096, 0, -EFAULT, 1);
	expect_reg(ctx, NAME("range running into a hole"), hole, 2 * 4096, 0, -EFAULT, 1);
	expect_reg(ctx, NAME("range starting in a hole"), hole + 4096, 2 * 4096, 0, -EFAULT, 1);
	expect_reg(ctx, NAME("kernel address"), (void *)0xffff888000000000UL, 4096, 0, -EFAULT, 1);
	expect_reg(ctx, NAME("PROT_NONE"), none, LEN, 0, -EFAULT, 1);
	expect_reg(ctx, NAME("read-only"), ro, LEN, 0, -EFAULT, 1);
	expect_reg(ctx, NAME("read-only, populated"), ro_touched, LEN, 0, -EFAULT, 1);
	expect_reg(ctx, NAME("read-only file mapping"), ro_file, LEN, 0, -EFAULT, 1);
	/* again: a failure must not have been cached */
	expect_reg(ctx, NAME("read-only again"), ro, 4096, 0, -EFAULT, 1);
	expect_reg(ctx, NAME("PROT_NONE again"), none, 4096, 0, -EFAULT, 1);
	check_nothing_lost(ctx, &st0, held, buf, 2, NAME("after the bad regs"));

	/* prefetch: checked arguments; nothing queued */
	st = stats_of(ctx);
	CHECK_RC(odpx_prefetch(ctx, NULL, 4096, 0), -EINVAL);
	CHECK_RC(odpx_prefetch(ctx, buf, 0, 0), -EINVAL);
	CHECK_RC(odpx_prefetch(ctx, buf, SIZE_MAX - 10, 0), -EINVAL);
	CHECK_RC(odpx_prefetch(ctx, buf, 4096, ODPX_PREFETCH_RESERVED), -EINVAL);
	CHECK_RC(odpx_prefetch(ctx, buf, 4096, 1U << 31), -EINVAL);
	CHECK(stats_of(ctx).prefetch_queued == st.prefetch_queued, "%s: a bad hint was queued", tag);

	/* transfer: checked handle, direction and range */
	int tfd = memfd_create("odpx-x", MFD_CLOEXEC);
	CHECK(tfd >= 0 && ftruncate(tfd, LEN) == 0, "memfd");
	CHECK_RC(odpx_transfer(ctx, NULL, tfd, 0, buf, 4096, ODPX_XFER_TO_FD), -EINVAL);
	CHECK_RC(odpx_transfer(ctx, held, tfd, 0, buf, 4096, (enum odpx_xfer_dir)7), -EINVAL);
	CHECK_RC(odpx_transfer(ctx, held, tfd, 0, buf, 0, ODPX_XFER_TO_FD), -EINVAL);
	CHECK_RC(odpx_transfer(ctx, held, tfd, 0, buf + LEN - 10, 20, ODPX_XFER_TO_FD), -EINVAL);
	CHECK_RC(odpx_transfer(ctx, held, tfd, 0, buf - 4096, 4096, ODPX_XFER_TO_FD), -EINVAL);
	close(tfd);

	/* stats_read: checked pointer and size */
	CHECK_RC(odpx_stats_read(ctx, NULL, sizeof(st)), -EINVAL);
	CHECK_RC(odpx_stats_read(ctx, &st, 0), -EINVAL);

	/* dereg of handles that are not held registrations of this context */
	int local;
	void *heap = malloc(256);
	struct odpx_priv_state ps;
	odpx_priv_state(ctx, &ps);
	const size_t eb = ps.entry_bytes;
	CHECK(odpx_mr_buf_index(held) >= 0, "buf_index");
	char *slab = (char *)held - (size_t)odpx_mr_buf_index(held) * eb;
	CHECK_RC(odpx_dereg(ctx, NULL), -EINVAL);
	CHECK_RC(odpx_dereg(ctx, (struct odpx_mr *)&local), -EINVAL);
	CHECK_RC(odpx_dereg(ctx, (struct odpx_mr *)heap), -EINVAL);
	CHECK_RC(odpx_dereg(ctx, (struct odpx_mr *)buf), -EINVAL);
	CHECK_RC(odpx_dereg(ctx, (struct odpx_mr *)((char *)held + 1)), -EINVAL);
	CHECK_RC(odpx_dereg(ctx, (struct odpx_mr *)((char *)held + eb / 2)), -EINVAL);
	/* a slot never handed out: any but held's (the slab has a prime count of slots) */
	uint32_t unused = (uint32_t)odpx_mr_buf_index(held) == 4095 ? 4094 : 4095;
	CHECK(ps.slots > 4095, "a slab of %u slots", ps.slots);
	CHECK_RC(odpx_dereg(ctx, (struct odpx_mr *)(slab + unused * eb)), -EINVAL);
	CHECK_RC(odpx_dereg(ctx, (struct odpx_mr *)(slab + ps.slots * eb)), -EINVAL);	/* past it */
	CHECK_RC(odpx_dereg(ctx, (struct odpx_mr *)(slab - eb)), -EINVAL);	/* before it */
	free(heap);

	/*
	 * Released twice: refused while nobody else holds the entry (a cached
	 * entry stays cached with no reference; a direct one is freed at once);
	 * still refused once the entry was invalidated and reaped.
	 */
	unsigned char *gone = map_anon(NULL, LEN);
	CHECK_RC(odpx_reg(ctx, gone, LEN, 0, &mr), 0);
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	st = stats_of(ctx);
	CHECK_RC(odpx_dereg(ctx, mr), -EINVAL);
	CHECK_RC(odpx_dereg(ctx, mr), -EINVAL);
	CHECK(stats_of(ctx).deregs == st.deregs, "%s: a refused dereg was counted", tag);
	if (mode == ODPX_MODE_PIN) {	/* the refused deregs did not break its count */
		struct odpx_mr *again;
		CHECK_RC(odpx_reg(ctx, gone, LEN, 0, &again), 0);
		CHECK(odpx_priv_same(ctx, again, mr) && stats_of(ctx).hits == st.hits + 1,
		      "%s: not a hit", tag);
		CHECK_RC(odpx_dereg(ctx, again), 0);
		CHECK_RC(odpx_dereg(ctx, again), -EINVAL);
	}
	CHECK(munmap(gone, LEN) == 0, "munmap");
	CHECK(WAIT_FOR(stats_of(ctx).entries == st0.entries, 5),
	      "%s: the unmapped entry was not reaped (entries %lu, want %lu)", tag,
	      (unsigned long)stats_of(ctx).entries, (unsigned long)st0.entries);
	CHECK_RC(odpx_dereg(ctx, mr), -EINVAL);
	/* the reference count of the held entry survived the bad deregs */
	check_nothing_lost(ctx, &st0, held, buf, 3, NAME("after the bad deregs"));

	/* the held registration is still the one the cache hands out */
	if (mode == ODPX_MODE_PIN) {
		st = stats_of(ctx);
		CHECK_RC(odpx_reg(ctx, buf, LEN, 0, &mr), 0);
		CHECK(odpx_priv_same(ctx, mr, held), "%s: the cached entry was lost", tag);
		CHECK(stats_of(ctx).hits == st.hits + 1, "%s: not a hit", tag);
		CHECK_RC(odpx_dereg(ctx, mr), 0);
	}
	check_nothing_lost(ctx, &st0, held, buf, 4, NAME("at the end"));
	CHECK_RC(odpx_dereg(ctx, held), 0);

	/* and it still works as a whole: a new registration of fresh memory */
	unsigned char *fresh = map_anon(NULL, LEN);
	CHECK_RC(odpx_reg(ctx, fresh, LEN, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
	CHECK(data_check(ctx, mr, fresh, LEN, 5), "%s: fresh registration", tag);
	CHECK_RC(odpx_dereg(ctx, mr), 0);

	/* a hint over the range odpx_reg calls wrapping (its page-rounded end wraps) */
	CHECK_RC(odpx_prefetch(ctx, (void *)(UINTPTR_MAX - 100), 50, 0), -EINVAL);
#undef NAME
	munmap(buf, LEN);
	munmap(fresh, LEN);
	munmap(hole, 3 * 4096);
	munmap(none, LEN);
	munmap(ro, LEN);
	munmap(ro_touched, LEN);
	munmap(ro_file, LEN);
	close(fd);
}

int main(void)
{
	unsigned char fds0[1024];
	long pin0 = vm_pinned_kb();
	struct odpx_ctx *pin, *direct, *other;
	struct odpx_mr *omr, *mr;
	struct odpx_attr da = { .comp_mask = ODPX_ATTR_MODE, .mode = ODPX_MODE_DIRECT };
	void *obuf;

	mode_env_saved = getenv("ODPX_MODE");
	CHECK(pin0 >= 0, "no VmPin in /proc/self/status");
	fd_set_now(fds0);

	bad_open();
	bad_env();
	check_fds(fds0, 1, "after the failed opens");

	pin = open_pin(0);
	other = open_pin(0);
	CHECK_RC(odpx_open_uring(&da, &direct), 0);

	obuf = map_anon(NULL, LEN);
	CHECK_RC(odpx_reg(other, obuf, LEN, 0, &omr), 0);
	null_ctx(omr, obuf);

	/* a handle of another context */
	CHECK_RC(odpx_dereg(pin, omr), -EINVAL);
	CHECK_RC(odpx_dereg(direct, omr), -EINVAL);
	CHECK_RC(odpx_transfer(pin, omr, 0, 0, obuf, 4096, ODPX_XFER_TO_FD), -EINVAL);

	bad_regs(pin, "pin");
	bad_regs(direct, "direct");

	/* direct: released twice right away (the entry is freed by the first) */
	CHECK_RC(odpx_reg(direct, obuf, 4096, 0, &mr), 0);
	CHECK_RC(odpx_dereg(direct, mr), 0);
	CHECK_RC(odpx_dereg(direct, mr), -EINVAL);

	/* the other context's handle survived all that */
	CHECK(data_check(other, omr, obuf, LEN, 9), "the other context's registration");
	CHECK_RC(odpx_dereg(other, omr), 0);

	CHECK_RC(odpx_close(pin), 0);
	CHECK_RC(odpx_close(direct), 0);
	CHECK_RC(odpx_close(other), 0);
	CHECK(vm_pinned_kb() == pin0, "VmPin %ld kB after close, baseline %ld kB", vm_pinned_kb(), pin0);
	check_fds(fds0, 1, "after close");
	munmap(obuf, LEN);
	printf("ok\n");
	return 0;
}
