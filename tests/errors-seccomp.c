// SPDX-License-Identifier: MIT
/*
 * errors-seccomp: io_uring and userfaultfd refused by a seccomp filter, as a
 * container's profile may.  A refused io_uring fails odpx_open_uring() with a
 * reason that names io_uring and the seccomp filter (or the
 * kernel.io_uring_disabled sysctl, when that refuses it first), and keeps
 * the memory of the closed context it reused: a stale pointer to that one
 * still fails with -EINVAL (odpx.h: odpx_close; under ASan, a read of
 * freed memory fails the test).  A refused userfaultfd lets the context
 * open, serves every registration direct, says so in odpx_mode_get(), and
 * ODPX_LOG=warn writes exactly one line on stderr for it however many
 * registrations follow.  odpx-info, under the same filters, says the monitor
 * is available exactly when the library caches: through /dev/userfaultfd
 * when only the system call is refused and the device is open to us.
 *
 * Each case runs in a child that installs the filter (EPERM for the calls
 * refused, everything else allowed) with its stderr in a file read back.
 */
#include <stddef.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include "test.h"

#ifndef USERFAULTFD_IOC_NEW
#define USERFAULTFD_IOC_NEW _IO(0xAA, 0x00)
#endif

/* EPERM for system call @nr, and for ioctl(USERFAULTFD_IOC_NEW) when @ioc. */
static void refuse(int nr, bool ioc)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)nr, 4, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ioc ? SYS_ioctl : (unsigned)-1, 0, 2),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[1])),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, USERFAULTFD_IOC_NEW, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
	};
	struct sock_fprog prog = { sizeof(f) / sizeof(f[0]), f };

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0)
		FAIL("seccomp filter: %s", strerror(errno));
}

static long sysctl_long(const char *path)
{
	FILE *f = fopen(path, "r");
	long v = 0;

	if (f) {
		if (fscanf(f, "%ld", &v) != 1)
			v = 0;
		fclose(f);
	}
	return v;
}

static int uring_refused(void *arg)
{
	long dis = sysctl_long("/proc/sys/kernel/io_uring_disabled");
	struct odpx_ctx *ctx, *closed;
	const char *why;
	int r;

	CHECK_RC(odpx_open_uring(NULL, &closed), 0);
	CHECK_RC(odpx_close(closed), 0);	/* its memory is the next open's */
	refuse(SYS_io_uring_setup, false);
	r = odpx_open_uring(NULL, &ctx);
	why = odpx_last_reason();
	printf("open with io_uring refused: %d: %s\n", r, why);
	CHECK(r == -EPERM, "open with io_uring_setup refused: %d, want -EPERM", r);
	CHECK(strstr(why, "io_uring"), "reason names no io_uring");
	if (dis)
		CHECK(strstr(why, "kernel.io_uring_disabled="), "reason names no io_uring_disabled");
	else
		CHECK(strstr(why, "runs under a seccomp filter"), "reason names no seccomp filter");
	CHECK(odpx_close(closed) == -EINVAL, "the closed context reused by the failed open: "
	      "odpx_close() of it did not fail with -EINVAL");
	return 0;
}

/* Registrations served direct, each; the reason and the log say why. */
static int uffd_refused(void *arg)
{
	size_t len = 64 << 10;
	char *p = map_anon(NULL, len);
	struct odpx_ctx *ctx;
	struct odpx_mr *mr;
	enum odpx_mode mode;
	const char *why;

	refuse(SYS_userfaultfd, true);
	setenv("ODPX_LOG", "warn", 1);
	CHECK_RC(odpx_open_uring(NULL, &ctx), 0);
	for (int i = 0; i < 8; i++) {
		CHECK_RC(odpx_reg(ctx, p + (i % 4) * 4096, 4096, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
		CHECK_RC(odpx_dereg(ctx, mr), 0);
	}
	CHECK(stats_of(ctx).direct_no_monitor == 8, "direct_no_monitor %llu, want 8",
	      (unsigned long long)stats_of(ctx).direct_no_monitor);
	CHECK_RC(odpx_mode_get(ctx, &mode, &why), 0);
	printf("mode %s: %s\n", odpx_mode_str(mode), why);
	CHECK(strstr(why, "userfaultfd") && strstr(why, "direct"),
	      "odpx_mode_get names no userfaultfd refusal");
	CHECK(strstr(why, "seccomp") && strstr(why, "vm.unprivileged_userfaultfd"),
	      "odpx_mode_get names neither seccomp nor vm.unprivileged_userfaultfd");
	CHECK_RC(odpx_close(ctx), 0);
	/* a second context of the process: no second line */
	CHECK_RC(odpx_open_uring(NULL, &ctx), 0);
	CHECK_RC(odpx_reg(ctx, p, 4096, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	CHECK_RC(odpx_close(ctx), 0);
	return 0;
}

/*
 * odpx-info with the userfaultfd system call refused (@arg: the ioctl of
 * /dev/userfaultfd too, or not), its JSON on stdout: it says the monitor is
 * available exactly when its own registration through the library was cached.
 */
static int info_refused(void *arg)
{
	char exe[4096], *cut;
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 16);

	CHECK(n > 0, "readlink /proc/self/exe: %s", strerror(errno));
	exe[n] = 0;
	CHECK((cut = strstr(exe, "/tests/errors-seccomp")), "not run from the build tree: %s", exe);
	strcpy(cut, "/odpx-info");
	refuse(SYS_userfaultfd, arg != NULL);
	execl(exe, "odpx-info", "--json", (char *)NULL);
	FAIL("exec %s: %s", exe, strerror(errno));
}

static void info_case(bool ioc_too)
{
	FILE *f = tmpfile();
	int saved = dup(1), st;
	static char out[16384];
	size_t got;

	CHECK(f && saved >= 0, "tmpfile: %s", strerror(errno));
	fflush(stdout);
	dup2(fileno(f), 1);
	st = run_forked(NULL, info_refused, ioc_too ? "" : NULL);
	dup2(saved, 1);
	close(saved);
	rewind(f);
	got = fread(out, 1, sizeof(out) - 1, f);
	out[got] = 0;
	fclose(f);
	CHECK(st == 0 && got, "odpx-info exited %d with %zu bytes", st, got);
	bool avail = strstr(out, "\"available\":\"yes\"");
	bool cached = strstr(out, "\"registration\":\"cached");
	bool said = (avail || strstr(out, "\"available\":\"no")) &&
		    (cached || strstr(out, "\"registration\":\"served direct"));
	int dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);

	if (dev >= 0)
		close(dev);
	CHECK(strstr(out, "\"usable\":\"yes\""), "io_uring is not usable here: %s", out);
	CHECK(said, "odpx-info --json gives no userfaultfd availability or registration: %s", out);
	CHECK(avail == cached, "odpx-info says userfaultfd is%s available, and its registration "
	      "was%s cached", avail ? "" : " not", cached ? "" : " not");
	CHECK(avail == (!ioc_too && dev >= 0), "userfaultfd refused%s, /dev/userfaultfd %s: "
	      "odpx-info says it is%s available", ioc_too ? " with its ioctl" : "",
	      dev >= 0 ? "open to us" : "not open to us", avail ? "" : " not");
	printf("odpx-info, userfaultfd refused%s: available %s, registration %s\n",
	       ioc_too ? " with its ioctl" : "", avail ? "yes" : "no", cached ? "cached" : "direct");
}

/* Run @fn in a child with stderr in a file; returns its status, the text in @err. */
static int with_stderr(int (*fn)(void *), char *err, size_t n)
{
	FILE *f = tmpfile();
	int saved = dup(2), st;
	size_t got;

	CHECK(f && saved >= 0, "tmpfile: %s", strerror(errno));
	fflush(stderr);
	dup2(fileno(f), 2);
	st = run_forked(NULL, fn, NULL);
	dup2(saved, 2);
	close(saved);
	rewind(f);
	got = fread(err, 1, n - 1, f);
	err[got] = 0;
	fclose(f);
	fputs(err, stderr);	/* for the log */
	return st;
}

static int count_lines(const char *s, const char *needle)
{
	int n = 0;

	for (const char *l = s; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		const char *e = strchr(l, '\n');
		size_t len = e ? (size_t)(e - l) : strlen(l);

		if (memmem(l, len, needle, strlen(needle)))
			n++;
	}
	return n;
}

int main(void)
{
	static char err[8192];

#ifndef __x86_64__
	SKIP("the seccomp filter here is written for x86_64 system call numbers");
#endif

	CHECK(with_stderr(uring_refused, err, sizeof(err)) == 0, "io_uring case failed");
	CHECK(with_stderr(uffd_refused, err, sizeof(err)) == 0, "userfaultfd case failed");
	CHECK(count_lines(err, "warning:") == 1, "%d warning lines for the refused userfaultfd, "
	      "want 1", count_lines(err, "warning:"));
	CHECK(count_lines(err, "userfaultfd") == 1 && count_lines(err, "served direct") == 1,
	      "the warning does not say userfaultfd is refused and registrations go direct");
	CHECK(strstr(err, "runs under a seccomp filter") &&
	      strstr(err, "vm.unprivileged_userfaultfd"),
	      "the warning names neither the seccomp filter nor vm.unprivileged_userfaultfd");
	info_case(false);
	info_case(true);
	printf("PASS\n");
	return 0;
}
