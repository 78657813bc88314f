/* SPDX-License-Identifier: MIT */
/*
 * log.h - ODPX_LOG: one line on stderr for each fallback that changes what
 * the library does (it is counted too), and the remedies of failures.
 */
#ifndef ODPX_LOG_H
#define ODPX_LOG_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

enum log_level { LOG_NONE, LOG_WARN, LOG_INFO, LOG_DEBUG };

/* "odpx[PID]: warning: ..." as one write(2), when ODPX_LOG allows @level. */
void odpx_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* odpx_log() the first time @once is found false, for a fallback told once a process. */
#define odpx_log_once(once, level, ...)                                          \
	do {                                                                      \
		if (!atomic_load_explicit((once), memory_order_relaxed) &&          \
		    !atomic_exchange((once), true))                                   \
			odpx_log((level), __VA_ARGS__);                               \
	} while (0)

/*
 * Warn once a process about each ODPX_ variable of the environment that
 * @known() does not know: a misspelt knob is otherwise silently ignored.
 */
void odpx_log_unknown_env(bool (*known)(const char *name, size_t len));

/*
 * Remedies, written into @buf: RLIMIT_MEMLOCK with its value and how to
 * raise it; why the kernel refused io_uring (kernel.io_uring_disabled and
 * its value, or a seccomp filter); why it refused userfaultfd.
 */
void odpx_why_memlock(char *buf, size_t n);
void odpx_why_uring(int err, char *buf, size_t n);
void odpx_why_uffd(int err, char *buf, size_t n);

#endif
