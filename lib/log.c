// SPDX-License-Identifier: MIT
/* log.c - ODPX_LOG and the remedies named in odpx_last_reason() (log.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "log.h"
#include "../sysfs-stats/counters.h"	/* ctr_read_file */

extern char **environ;

/* The level of ODPX_LOG (warn when unset), read at each call: fallbacks are rare. */
static int log_level(void)
{
	static atomic_bool told;
	const char *s = getenv("ODPX_LOG");

	if (!s || !*s || !strcmp(s, "warn"))
		return LOG_WARN;
	if (!strcmp(s, "none"))
		return LOG_NONE;
	if (!strcmp(s, "info"))
		return LOG_INFO;
	if (!strcmp(s, "debug"))
		return LOG_DEBUG;
	if (!atomic_exchange(&told, true))	/* before the call, which asks the level again */
		odpx_log(LOG_WARN, "ODPX_LOG=%.40s: not one of none, warn, info, debug; using warn",
			 s);
	return LOG_WARN;
}

void odpx_log(int level, const char *fmt, ...)
{
	static const char *const tag[] = { "", "warning", "info", "debug" };
	char line[512];
	va_list ap;
	int n, m;

	if (level <= LOG_NONE || level > log_level())
		return;
	n = snprintf(line, sizeof(line), "odpx[%d]: %s: ", (int)getpid(), tag[level]);
	va_start(ap, fmt);
	m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	n = m < 0 ? n : n + m < (int)sizeof(line) - 1 ? n + m : (int)sizeof(line) - 2;
	line[n++] = '\n';
	/* one write: lines of several threads or processes do not interleave */
	if (write(STDERR_FILENO, line, (size_t)n) < 0)
		return;
}

/* Once a process: a warning at every open would bury the application's output. */
void odpx_log_unknown_env(bool (*known)(const char *name, size_t len))
{
	static atomic_bool done;

	if (atomic_load_explicit(&done, memory_order_relaxed) || atomic_exchange(&done, true))
		return;
	for (char **e = environ; e && *e; e++) {
		const char *eq = strchr(*e, '=');
		size_t len = eq ? (size_t)(eq - *e) : strlen(*e);

		if (len > 5 && !strncmp(*e, "ODPX_", 5) && !known(*e, len))
			odpx_log(LOG_WARN, "%.*s is not a variable odpx reads (misspelt?); "
				 "odpx(7) lists them", (int)len, *e);
	}
}

void odpx_why_memlock(char *buf, size_t n)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_MEMLOCK, &rl) < 0)
		snprintf(buf, n, "RLIMIT_MEMLOCK unreadable");
	else if (rl.rlim_cur == RLIM_INFINITY)
		snprintf(buf, n, "RLIMIT_MEMLOCK is unlimited");
	else
		snprintf(buf, n, "RLIMIT_MEMLOCK is %llu bytes: raise it (ulimit -l, in KiB; "
			 "LimitMEMLOCK= of a systemd unit; memlock in limits.conf)",
			 (unsigned long long)rl.rlim_cur);
}

void odpx_why_uring(int err, char *buf, size_t n)
{
	uint64_t dis = 0;
	long sec = prctl(PR_GET_SECCOMP);	/* 2: a filter; strict mode could not call */
	bool have_dis = ctr_read_file("/proc/sys/kernel/io_uring_disabled", &dis) == 0;

	if (err == -ENOMEM) {
		char m[160];

		odpx_why_memlock(m, sizeof(m));
		snprintf(buf, n, "io_uring charges its rings to RLIMIT_MEMLOCK: %s", m);
	} else if ((err == -EPERM || err == -EACCES) && have_dis && dis > 0) {
		snprintf(buf, n, "io_uring is disabled: kernel.io_uring_disabled=%" PRIu64 " (%s); "
			 "set it to 0, or%s add the user to kernel.io_uring_group", dis,
			 dis == 2 ? "refused to everyone" : "refused outside kernel.io_uring_group",
			 dis == 2 ? " to 1 and" : "");
	} else if (err == -EPERM || err == -EACCES || err == -ENOSYS) {
		snprintf(buf, n, "io_uring_setup is refused%s: %s; a container's default profile "
			 "refuses io_uring: allow io_uring_setup, io_uring_enter, io_uring_register",
			 have_dis ? " with kernel.io_uring_disabled=0" : "",
			 sec == 2 ? "this process runs under a seccomp filter (Seccomp: 2 in "
			 "/proc/self/status)" : "by a seccomp filter or a security module");
	} else {
		snprintf(buf, n, "io_uring_setup: %s", strerror(-err));
	}
}

void odpx_why_uffd(int err, char *buf, size_t n)
{
	long sec = prctl(PR_GET_SECCOMP);
	uint64_t v;
	long unpriv = ctr_read_file("/proc/sys/vm/unprivileged_userfaultfd", &v) ? -1 : (long)v;

	if (err == -ENOSYS)
		snprintf(buf, n, "the kernel has no userfaultfd (CONFIG_USERFAULTFD), or a seccomp "
			 "filter answers ENOSYS");
	else if (err == -EPERM || err == -EACCES)
		snprintf(buf, n, "userfaultfd is refused: %s; vm.unprivileged_userfaultfd=%ld "
			 "(odpx opens it user-mode-only, which needs Linux 5.11 when that is 0)",
			 sec == 2 ? "this process runs under a seccomp filter (Seccomp: 2 in "
			 "/proc/self/status): allow userfaultfd" : "a security module or the "
			 "kernel refuses it", unpriv);
	else
		snprintf(buf, n, "userfaultfd: %s", strerror(-err));
}
