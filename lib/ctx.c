// SPDX-License-Identifier: MIT
/*
 * ctx.c - the public API: open, close, reg/dereg, accessors, transfer, mode.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <linux/capability.h>
#include <sys/syscall.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cache.h"
#include "../sysfs-stats/counters.h"
#include "log.h"
#include "memcg.h"
#include "mode.h"

_Atomic uint32_t odpx_fork_gen;
static __thread char last_reason[512];	/* a cause and its remedy */
static __thread char mode_reason[192];	/* odpx_mode_get's copy */
static pthread_once_t once = PTHREAD_ONCE_INIT;
/* every open context, for the child after fork (ctx->list_next) */
static pthread_mutex_t ctx_list_lock = PTHREAD_MUTEX_INITIALIZER;
static struct odpx_ctx *ctx_list;
/*
 * Closed contexts, kept for the next open (ctx_list_lock): never freed, so
 * that a call on a closed context fails on its cleared magic (odpx_close(3)).
 */
static struct odpx_ctx *ctx_closed;

int odpx_fail(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last_reason, sizeof(last_reason), fmt, ap);
	va_end(ap);
	return err;
}

void ctx_reason_set(struct odpx_ctx *ctx, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&ctx->reason_lock);
	va_start(ap, fmt);
	vsnprintf(ctx->reason, sizeof(ctx->reason), fmt, ap);
	va_end(ap);
	pthread_mutex_unlock(&ctx->reason_lock);
	stats_seg_reason(ctx);	/* odpstat reads it without waiting for a miss */
}

/* The monitor's attach failed (@why: the reason until a success) or succeeded (NULL). */
void ctx_reason_monitor(struct odpx_ctx *ctx, const char *why)
{
	bool changed = false;

	pthread_mutex_lock(&ctx->reason_lock);
	if (why) {
		if (!ctx->reason_open[0])
			memcpy(ctx->reason_open, ctx->reason, sizeof(ctx->reason));
		snprintf(ctx->reason, sizeof(ctx->reason),
			 "pin mode without invalidation is unsafe: %.96s; serving direct", why);
		changed = true;
	} else if (ctx->reason_open[0] && strcmp(ctx->reason, ctx->reason_open)) {
		memcpy(ctx->reason, ctx->reason_open, sizeof(ctx->reason));
		changed = true;
	}
	pthread_mutex_unlock(&ctx->reason_lock);
	if (changed)
		stats_seg_reason(ctx);
}

uint64_t odpx_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);	/* vDSO: no system call */
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

ODPX_EXPORT const char *odpx_last_reason(void)
{
	return last_reason[0] ? last_reason : "no error";
}

ODPX_EXPORT const char *odpx_version(void)
{
	return ODPX_VERSION;
}

ODPX_EXPORT const char *odpx_mode_str(enum odpx_mode m)
{
	static const char *const names[] = { "auto", "implicit", "explicit", "pin", "direct",
						   "hybrid" };

	return (unsigned)m < ODPX_MODE_RESERVED ? names[m] : "invalid";
}

/* The lock order: the context list, the engine, the monitor, the segments' list, memcg's. */
static void atfork_prepare(void)
{
	pthread_mutex_lock(&ctx_list_lock);
	engine_atfork_prepare();
	monitor_atfork_prepare();
	stats_atfork_prepare();
	memcg_atfork_prepare();
}

static void atfork_parent(void)
{
	memcg_atfork_done();
	stats_atfork_parent();
	monitor_atfork_parent();
	engine_atfork_done();
	pthread_mutex_unlock(&ctx_list_lock);
}

/*
 * A fork child's contexts are stale.  Their descriptors close now: a close
 * by number later would close whatever the child opened there.
 */
static void atfork_child(void)
{
	atomic_fetch_add(&odpx_fork_gen, 1);
	memcg_atfork_done();
	monitor_atfork_child();
	engine_atfork_done();
	for (struct odpx_ctx *c = ctx_list; c; c = c->list_next) {
		engine_child_fds(c);
		if (c->be->child_fds)
			c->be->child_fds(c);
	}
	stats_atfork_child();
	shard_atfork_child();
	pthread_mutex_unlock(&ctx_list_lock);	/* taken by this thread in prepare */
}

/*
 * The bytes the process's contexts hold pinned or on their way to
 * unpinned (the memory cgroup's headroom, reserve.c).  Lock order: the
 * context list before each context's lock; no caller holds either.
 */
uint64_t ctx_pinned_total(void)
{
	uint64_t sum = 0;

	pthread_mutex_lock(&ctx_list_lock);
	/* pin and direct contexts, the verbs backend's and a hybrid context's pinned part included */
	for (struct odpx_ctx *c = ctx_list; c; c = c->list_next) {
		/* the ODP modes pin nothing; a hybrid context's pins are its pinned part's */
		if (c->mode != ODPX_MODE_PIN && c->mode != ODPX_MODE_DIRECT)
			continue;
		pthread_mutex_lock(&c->lock);
		sum += c->pinned_bytes + c->releasing_bytes;
		pthread_mutex_unlock(&c->lock);
	}
	pthread_mutex_unlock(&ctx_list_lock);
	return sum;
}

static void ctx_list_del(struct odpx_ctx *ctx)
{
	pthread_mutex_lock(&ctx_list_lock);
	for (struct odpx_ctx **pp = &ctx_list; *pp; pp = &(*pp)->list_next) {
		if (*pp == ctx) {
			*pp = ctx->list_next;
			break;
		}
	}
	pthread_mutex_unlock(&ctx_list_lock);
}

static void init_once(void)
{
	pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

static bool has_ipc_lock(void)
{
	struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct d[2];

	if (syscall(SYS_capget, &h, d) < 0)
		return false;
	return d[CAP_IPC_LOCK / 32].effective & (1U << (CAP_IPC_LOCK % 32));
}

/* Returns where max_pinned_bytes came from (enum odpx_limit_source). */
static uint32_t default_limits(struct odpx_limits *l)
{
	struct rlimit rl;
	uint64_t phys = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
	uint32_t src = ODPX_LIMIT_ATTR;

	if (!l->max_pinned_bytes) {
		if (!has_ipc_lock() && getrlimit(RLIMIT_MEMLOCK, &rl) == 0 &&
		    rl.rlim_cur != RLIM_INFINITY) {
			l->max_pinned_bytes = rl.rlim_cur;
			src = ODPX_LIMIT_MEMLOCK;
		} else {
			l->max_pinned_bytes = phys / 8;
			src = ODPX_LIMIT_RAM;
		}
	}
	if (!l->max_entries)
		l->max_entries = 4096;
	if (!l->max_unused_bytes)
		l->max_unused_bytes = l->max_pinned_bytes / 2;
	if (!l->max_entry_bytes)
		l->max_entry_bytes = 1UL << 30;
	return src;
}

bool odpx_is_prime(uint32_t n)
{
	if (n < 4)
		return n > 1;
	if (!(n & 1))
		return false;
	for (uint32_t d = 3; (uint64_t)d * d <= n; d += 2)
		if (!(n % d))
			return false;
	return true;
}

/* The slab's size: in pin mode the next prime for index.h's hash, where the backend has room. */
static uint32_t slab_slots(const struct odpx_attr *a, const struct backend_ops *ops)
{
	uint64_t n = a->limits.max_entries;

	if (a->mode != ODPX_MODE_PIN)
		return (uint32_t)n;
	while (!odpx_is_prime((uint32_t)n) && n < ENTRIES_MAX)
		n++;
	if (n >= ENTRIES_MAX || (ops->max_entries && n > ops->max_entries))
		return (uint32_t)a->limits.max_entries;
	return (uint32_t)n;
}

#define IDLE_MS_DEFAULT 300000	/* as o2iblnd reaps an idle pool */
#define IDLE_MS_MAX 86400000
#define LINGER_US_DEFAULT 100	/* outlasts a caller's short sleep on a shared CPU (bench/prefetch.c) */
#define LINGER_US_MAX 1000000

static int env_uint(const char *name, uint64_t min, uint64_t max, uint64_t dflt, uint64_t *out)
{
	const char *s = getenv(name);
	unsigned long long v;
	char *end;

	*out = dflt;
	if (!s || !*s)
		return 0;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || *s < '0' || *s > '9' || v < min || v > max)
		return odpx_fail(-EINVAL, "%s=%s: not a whole number from %llu to %llu", name, s,
				 (unsigned long long)min, (unsigned long long)max);
	*out = v;
	return 0;
}

/* Their bounds; the monitor's defaults are its own (uffd/monitor.c). */
static const struct knob {
	const char *name;
	uint64_t min, max;
} knobs[] = {
	{ "ODPX_ENGINE_LINGER_US", 0, LINGER_US_MAX },
	{ "ODPX_MONITOR_SPIN_US", 0, 1000000 },
	{ "ODPX_REMOVE_QUARANTINE_MS", 0, 60000 },
	{ "ODPX_WATCH_MAX", 1, 1 << 20 },
	{ "ODPX_WATCH_WIDEN_KB", 0, 1 << 20 },
	{ "ODPX_IDLE_MS", 0, IDLE_MS_MAX },
	{ "ODPX_CHECK_PROT", 0, 1 },
};

/*
 * The other variables of odpx(7), odpx-paging(1) and libodpx-preload(7):
 * with the knobs, every ODPX_ variable odpx or its programs read.
 */
static const char *const other_vars[] = {
	"ODPX_MODE", "ODPX_UFFD_MODE", "ODPX_THRASH", "ODPX_LOG", "ODPX_SYSFS_ROOT",
	"ODPX_DEBUGFS_ROOT", "ODPX_PROCFS_ROOT", "ODPX_NO_NETLINK", "ODPX_DEV",
	"ODPX_PAGING_COMMIT", "ODPX_PRELOAD_REMOTE", "ODPX_PRELOAD_VERBOSE",
	"ODPX_PRELOAD_UNSAFE_NO_MONITOR", "ODPX_PRELOAD_FABRIC", "ODPX_FABRIC_UNSAFE_NO_NOTIFY",
};

static bool env_known(const char *name, size_t len)
{
	for (size_t i = 0; i < sizeof(knobs) / sizeof(knobs[0]); i++)
		if (strlen(knobs[i].name) == len && !strncmp(knobs[i].name, name, len))
			return true;
	for (size_t i = 0; i < sizeof(other_vars) / sizeof(other_vars[0]); i++)
		if (strlen(other_vars[i]) == len && !strncmp(other_vars[i], name, len))
			return true;
	return false;
}

uint64_t odpx_env(const char *name, uint64_t dflt)
{
	uint64_t v = dflt;

	for (size_t i = 0; i < sizeof(knobs) / sizeof(knobs[0]); i++)
		if (!strcmp(knobs[i].name, name))
			env_uint(name, knobs[i].min, knobs[i].max, dflt, &v);
	return v;
}

int thrash_env(struct thrash_cfg *c)
{
	const char *s = getenv("ODPX_THRASH");
	struct thrash_cfg t;
	char err[128];

	thrash_cfg_default(&t);
	if (s && *s && thrash_cfg_parse(&t, s, err, sizeof(err)) < 0)
		return odpx_fail(-EINVAL, "ODPX_THRASH=%s: %s", s, err);
	if (c)
		*c = t;
	return 0;
}

static int env_check(void)
{
	const char *m = getenv("ODPX_UFFD_MODE");
	uint64_t v;
	int r;

	for (size_t i = 0; i < sizeof(knobs) / sizeof(knobs[0]); i++)
		if ((r = env_uint(knobs[i].name, knobs[i].min, knobs[i].max, 0, &v)) < 0)
			return r;
	if (m && *m && strcmp(m, "auto") && strcmp(m, "wp-async") && strcmp(m, "wp") &&
	    strcmp(m, "missing"))
		return odpx_fail(-EINVAL, "ODPX_UFFD_MODE=%s: not one of auto, wp-async, wp, missing",
				 m);
	return thrash_env(NULL);
}

int attr_copy(const struct odpx_attr *attr, struct odpx_attr *a)
{
	if (attr)
		*a = *attr;
	if (a->comp_mask & ~(uint64_t)(ODPX_ATTR_RESERVED - 1))
		return odpx_fail(-EINVAL, "unknown comp_mask bits %#llx",
				 (unsigned long long)(a->comp_mask & ~(uint64_t)(ODPX_ATTR_RESERVED - 1)));
	if (!(a->comp_mask & ODPX_ATTR_FLAGS))
		a->flags = 0;
	return 0;
}

/* The attributes checked, with defaults and knobs, into @a; *@lim_source as default_limits(). */
static int open_attr(const struct backend_ops *ops, const struct odpx_attr *attr,
		     struct odpx_attr *a, uint32_t *lim_source)
{
	int r;

	if ((r = attr_copy(attr, a)) < 0)
		return r;
	if (!(a->comp_mask & ODPX_ATTR_MODE))
		a->mode = ODPX_MODE_AUTO;
	if (!(a->comp_mask & ODPX_ATTR_LIMITS))
		memset(&a->limits, 0, sizeof(a->limits));
	if (!(a->comp_mask & ODPX_ATTR_TICK) || !a->tick_ms)
		a->tick_ms = 100;
	if ((unsigned)a->mode >= ODPX_MODE_RESERVED)
		return odpx_fail(-EINVAL, "mode %d out of range", a->mode);
	if (a->flags & ~(uint32_t)(ODPX_OPEN_RESERVED - 1))
		return odpx_fail(-EINVAL, "unknown open flags %#x", a->flags);
	if (a->mode == ODPX_MODE_AUTO && (r = mode_env(&a->mode)) < 0)
		return r;
	if ((r = env_check()) < 0)
		return r;
	odpx_log_unknown_env(env_known);
	if (!(a->comp_mask & ODPX_ATTR_LINGER))
		a->linger_us = (uint32_t)odpx_env("ODPX_ENGINE_LINGER_US", LINGER_US_DEFAULT);
	if (a->linger_us > LINGER_US_MAX)
		return odpx_fail(-EINVAL, "linger_us %u above %u", a->linger_us, LINGER_US_MAX);
	if (!(a->comp_mask & ODPX_ATTR_IDLE))
		a->idle_ms = (uint32_t)odpx_env("ODPX_IDLE_MS", IDLE_MS_DEFAULT);
	if (a->idle_ms > IDLE_MS_MAX)
		return odpx_fail(-EINVAL, "idle_ms %u above %u", a->idle_ms, IDLE_MS_MAX);
	if ((a->comp_mask & ODPX_ATTR_PREREG) &&
	    (a->nprereg > PREREG_MAX || (a->nprereg && !a->prereg)))
		return odpx_fail(-EINVAL, "nprereg %u: at most %d, with a prereg array",
				 a->nprereg, PREREG_MAX);
	if (a->mode == ODPX_MODE_AUTO)
		a->mode = ODPX_MODE_PIN;
	/* only the verbs backend pages on demand (its open chose the mode) */
	if ((a->mode == ODPX_MODE_IMPLICIT || a->mode == ODPX_MODE_EXPLICIT ||
	     a->mode == ODPX_MODE_HYBRID) &&
	    ops->id != ODPX_BACKEND_VERBS)
		return odpx_fail(-EOPNOTSUPP, "the %s backend cannot page on demand: mode %s impossible",
				 ops->name, odpx_mode_str(a->mode));
	*lim_source = default_limits(&a->limits);
	if (ops->max_entries && a->limits.max_entries > ops->max_entries)
		return odpx_fail(-EINVAL, "max_entries %llu above the %s backend's %u",
				 (unsigned long long)a->limits.max_entries, ops->name, ops->max_entries);
	if (a->limits.max_entries >= ENTRIES_MAX)
		return odpx_fail(-EINVAL, "max_entries too large");
	if (a->limits.max_entry_bytes > SPAN_MAX_BYTES ||
	    (ops->max_entry_bytes && a->limits.max_entry_bytes > ops->max_entry_bytes))
		return odpx_fail(-EINVAL, "max_entry_bytes %llu above the backend's limit",
				 (unsigned long long)a->limits.max_entry_bytes);
	return 0;
}

/* A context off ctx_list, its engine (a reader of the magic) stopped, to ctx_closed. */
static void ctx_free(struct odpx_ctx *ctx)
{
	stats_seg_close(ctx);
	free(ctx->pq);
	ctx->magic = 0;
	pthread_mutex_lock(&ctx_list_lock);
	ctx->list_next = ctx_closed;
	ctx_closed = ctx;
	pthread_mutex_unlock(&ctx_list_lock);
}

/* The fields that follow from the checked attributes @a. */
static void ctx_setup(struct odpx_ctx *ctx, const struct backend_ops *ops,
		      const struct odpx_attr *a, uint32_t lim_source)
{
	struct thrash_cfg tc;

	ctx->fork_gen = atomic_load(&odpx_fork_gen);
	memcg_forget();	/* the process may have moved to another cgroup since */
	ctx->magic = CTX_MAGIC;
	ctx->be = ops;
	ctx->mode = a->mode;
	ctx->flags = a->flags;
	ctx->lim = a->limits;
	ctx->lim_source = lim_source;
	ctx->idle_ms = a->idle_ms;
	ctx->tick_ms = a->tick_ms;
	thrash_env(&tc);	/* checked by open_attr() */
	/* evicted ranges live as long as the detector needs to enter THRASH */
	uint64_t age = (uint64_t)tc.window_ms * tc.enter_n;
	ctx->evict_age_ms = age < (1U << 30) ? (uint32_t)age : 1U << 30;
	ctx->linger_us = a->linger_us;
	ctx->max_entries = slab_slots(a, ops);
	ctx->hmod = ctx->max_entries;
	while (ctx->hmod > 2 && !odpx_is_prime(ctx->hmod))
		ctx->hmod--;
	ctx->hmul = UINT64_MAX / ctx->hmod + 1;
	ctx->cache_enabled = a->mode == ODPX_MODE_PIN;
	/* off unless asked: a hit makes no system call (odpx_reg(3)) */
	ctx->check_prot = ctx->cache_enabled && !(a->flags & ODPX_OPEN_NO_PROT_CHECK) &&
			  odpx_env("ODPX_CHECK_PROT", !!(a->flags & ODPX_OPEN_PROT_CHECK));
	ctx->hits_inline = ctx->cache_enabled && !ctx->check_prot &&
			   (!ops->reg || ops->reg_is_cache);
	/* io_uring pins are always writable: access does not split its index */
	ctx->acc_mask = ops->id == ODPX_BACKEND_URING ? 0 : 0xf;
	pthread_mutex_init(&ctx->lock, NULL);
	pthread_mutex_init(&ctx->eng_lock, NULL);
	pthread_mutex_init(&ctx->reason_lock, NULL);
	pthread_mutex_init(&ctx->prereg.lock, NULL);
}

int odpx_open_backend(const struct backend_ops *ops, const struct odpx_attr *attr,
		      struct odpx_ctx **out)
{
	struct odpx_attr a = { 0 };
	struct odpx_ctx *ctx;
	uint32_t lim_source = ODPX_LIMIT_ATTR;
	int r;

	if (!out)
		return odpx_fail(-EINVAL, "NULL ctx pointer");
	*out = NULL;
	if ((r = open_attr(ops, attr, &a, &lim_source)) < 0)
		return r;
	pthread_once(&once, init_once);
	pthread_mutex_lock(&ctx_list_lock);
	if ((ctx = ctx_closed))
		ctx_closed = ctx->list_next;
	pthread_mutex_unlock(&ctx_list_lock);
	if (!ctx)	/* its ALIGNED_LINE fields are cache lines */
		ctx = aligned_alloc(64, sizeof(*ctx));
	if (!ctx)
		return -ENOMEM;
	memset(ctx, 0, sizeof(*ctx));
	ctx_setup(ctx, ops, &a, lim_source);
	ctx->pq = aligned_alloc(64, sizeof(struct prefetch_cell) * PREFETCH_QLEN);
	if (!ctx->pq) {
		r = -ENOMEM;
		goto out_free;
	}
	if ((r = stats_seg_open(ctx, attr)) < 0)
		goto out_free;
	for (uint64_t i = 0; i < PREFETCH_QLEN; i++)
		atomic_init(&ctx->pq[i].seq, i);
	if ((r = cache_init(ctx)) < 0)
		goto out_free;
	if (ops->id == ODPX_BACKEND_URING && (r = uring_backend_open(ctx)) < 0) {
		cache_fini(ctx);
		ctx_free(ctx);
		return r;	/* its reason names the setting to change */
	}
	if (ctx->mode == ODPX_MODE_DIRECT)
		ctx_reason_set(ctx, "direct forced (%s): register and deregister per request",
			       attr && (attr->comp_mask & ODPX_ATTR_MODE) &&
			       attr->mode != ODPX_MODE_AUTO ? "attributes" : "ODPX_MODE");
	else if (ctx->flags & ODPX_OPEN_UNSAFE_NO_MONITOR)
		ctx_reason_set(ctx, "pin WITHOUT invalidation (ODPX_OPEN_UNSAFE_NO_MONITOR, test only)");
	else
		ctx_reason_set(ctx, "%s backend has no on-demand paging:"
			       " pin-down cache invalidated by userfaultfd", ops->name);
	stats_gauges_publish(ctx);	/* entries and pinned bytes, for odpstat */
	if (ops->id != ODPX_BACKEND_VERBS)	/* the verbs open says its own */
		odpx_log(LOG_INFO, "%s context opened, mode %s: %s", ops->name,
			 odpx_mode_str(ctx->mode), ctx->reason);
	pthread_mutex_lock(&ctx_list_lock);
	ctx->list_next = ctx_list;
	ctx_list = ctx;
	pthread_mutex_unlock(&ctx_list_lock);
	/* the verbs backend is not set up yet: odpx_open_verbs() makes its regions */
	if (ops->id != ODPX_BACKEND_VERBS && (r = prereg_open(ctx, &a)) < 0) {
		odpx_close(ctx);
		return r;
	}
	*out = ctx;
	return 0;

out_free:
	ctx_free(ctx);
	return odpx_fail(r, "odpx_open: %s", strerror(-r));
}

ODPX_EXPORT int odpx_open_uring(const struct odpx_attr *attr, struct odpx_ctx **ctx)
{
	return odpx_open_backend(&uring_ops, attr, ctx);
}

#ifndef ODPX_HAVE_VERBS
ODPX_EXPORT int odpx_open_verbs(struct ibv_pd *pd, const struct odpx_attr *attr,
				struct odpx_ctx **ctx)
{
	(void)pd;
	(void)attr;
	if (ctx)
		*ctx = NULL;
	return odpx_fail(-EOPNOTSUPP, "odpx was built without libibverbs");
}
#endif

ODPX_EXPORT int odpx_close(struct odpx_ctx *ctx)
{
	if (!ctx)
		return odpx_fail(-EINVAL, "NULL context");
	if (ctx->magic != CTX_MAGIC)
		return odpx_fail(-EINVAL, "context %p is closed", (void *)ctx);
	ctx_list_del(ctx);	/* first: a fork child then never closes them twice */
	if (ctx->fork_gen != atomic_load(&odpx_fork_gen)) {
		/* child: the parent's threads and pins are not ours to touch */
		ctx->be->close(ctx);	/* atfork_child() closed its descriptors; never unpins */
		munmap(ctx->ent, slab_bytes(ctx));
		goto out_free;
	}
	engine_stop(ctx);	/* first: a miss of its prefetch after detach would attach */
	cache_detach(ctx);
	cache_reap_dead(ctx);
	cache_fini(ctx);
	ctx->be->close(ctx);
out_free:
	pthread_mutex_destroy(&ctx->prereg.lock);	/* cache_fini() unpinned the regions */
	ctx_free(ctx);
	return 0;
}

/* NULL, empty, or wrapping (or ending in the top page, which no mapping holds) */
static bool bad_range(uintptr_t a, size_t len)
{
	uintptr_t end;

	return !a || !len || __builtin_add_overflow(a, len, &end) || end > UINTPTR_MAX - PAGE_SIZE;
}

/* The errno of odpx_reg()'s arguments, once reg_args_bad() found one bad. */
int __attribute__((noinline, cold)) reg_bad_args(const void *addr, size_t len, uint32_t access,
						 struct odpx_mr **mr)
{
	if (!mr)
		return odpx_fail(-EINVAL, "NULL mr pointer");
	if (!addr)
		return odpx_fail(-EFAULT, "NULL address");
	if (!len)
		return odpx_fail(-EINVAL, "zero length");
	if (bad_range((uintptr_t)addr, len))
		return odpx_fail(-EINVAL, "address + length wraps");
	return odpx_fail(-EINVAL, "unknown access bits %#x", access);
}

/* Everything but an inline hit: the backend's reg, or the cache's. */
static int __attribute__((noinline)) reg_lookup(struct odpx_ctx *ctx, uintptr_t a, size_t len,
						uint32_t access, struct odpx_mr **mr)
{
	struct odpx_mr *h;
	struct entry *e;
	int r;

	if (ctx->hits_inline && (h = hit_next(ctx, a, a + len, access & ctx->acc_mask))) {
		*mr = h;
		return 0;
	}
	r = ctx->be->reg ? ctx->be->reg(ctx, a, len, access, &e) : cache_reg(ctx, a, len, access, &e);

	if (r == 0)
		*mr = (struct odpx_mr *)e;
	return r;
}

ODPX_EXPORT int odpx_reg(struct odpx_ctx *ctx, void *addr, size_t len, uint32_t access,
			 struct odpx_mr **mr)
{
	uintptr_t a = (uintptr_t)addr, end;
	struct odpx_mr *h;
	int r;

	if (unlikely((r = ctx_check(ctx)) < 0))
		return r;
	if (unlikely(reg_args_bad(a, len, access, mr, &end)))
		return reg_bad_args(addr, len, access, mr);
	if (likely(ctx->hits_inline) && (h = hit_home(ctx, a, end, access & ctx->acc_mask))) {
		*mr = h;
		return 0;
	}
	return reg_lookup(ctx, a, len, access, mr);
}

/* An entry handle must point at an entry of this context's slab; NULL fails the same test. */
static struct entry *slab_entry(struct odpx_ctx *ctx, const struct odpx_mr *mr)
{
	uintptr_t off = (uintptr_t)mr - (uintptr_t)ctx->ent;

	if (off >= (uintptr_t)ctx->max_entries * sizeof(struct entry) || off % sizeof(struct entry))
		return NULL;
	return (struct entry *)mr;
}

/* odpx_dereg() of a pin cache's handle, a hazard slot's or an entry's; 1: not @ctx's */
static inline __attribute__((always_inline)) int
cache_dereg_handle(struct odpx_ctx *ctx, struct odpx_mr *mr)
{
	hz_slot *slot = hz_slot_of(ctx, mr);
	struct entry *e;

	if (likely(slot))
		return hz_dereg(ctx, slot);
	return (e = slab_entry(ctx, mr)) ? cache_dereg(ctx, e) : 1;
}

ODPX_EXPORT int odpx_dereg(struct odpx_ctx *ctx, struct odpx_mr *mr)
{
	int r;

	if (unlikely((r = ctx_check(ctx)) < 0))
		return r;
	if (likely(!ctx->be->dereg)) {
		if (likely((r = cache_dereg_handle(ctx, mr)) <= 0))
			return r;
	} else if (slab_entry(ctx, mr) || hz_slot_of(ctx, mr)) {
		return ctx->be->dereg(ctx, (struct entry *)mr);	/* a handle, as reg() gave it */
	}
	/* a hybrid context's pinned registrations are its pin cache's */
	if (ctx->pin_part && (r = cache_dereg_handle(ctx->pin_part, mr)) <= 0)
		return r;
	return odpx_fail(-EINVAL, "handle %p does not belong to this context", (void *)mr);
}

ODPX_EXPORT uint32_t odpx_mr_lkey(const struct odpx_mr *mr)
{
	return mr_entry(mr)->lkey;
}

ODPX_EXPORT uint32_t odpx_mr_rkey(const struct odpx_mr *mr)
{
	return mr_entry(mr)->rkey;
}

ODPX_EXPORT void *odpx_mr_addr(const struct odpx_mr *mr)
{
	return (void *)SPAN_START(LD(mr_entry(mr)->span));
}

ODPX_EXPORT size_t odpx_mr_length(const struct odpx_mr *mr)
{
	return SPAN_BYTES(LD(mr_entry(mr)->span));
}

ODPX_EXPORT int odpx_mr_buf_index(const struct odpx_mr *mr)
{
	const struct entry *e = mr_entry(mr);

	return (e->kind & KIND_URING) ? (int)e->lkey : -EOPNOTSUPP;
}

ODPX_EXPORT ssize_t odpx_transfer(struct odpx_ctx *ctx, struct odpx_mr *mr, int fd,
				  off_t offset, void *addr, size_t len,
				  enum odpx_xfer_dir dir)
{
	struct entry *e;
	int r;

	if ((r = ctx_check(ctx)) < 0)
		return r;
	hz_slot *slot = hz_slot_of(ctx, mr);

	if (slot ? !(e = hz_entry(LD(*slot)))
		 : !(e = slab_entry(ctx, mr)) || !W_REF(atomic_load(&e->word)))
		return odpx_fail(-EINVAL, "handle %p is not a held registration of this context",
				 (void *)mr);
	if (ctx->be->id != ODPX_BACKEND_URING)
		return odpx_fail(-EOPNOTSUPP, "transfer is the uring backend's DMA");
	if (dir != ODPX_XFER_FROM_FD && dir != ODPX_XFER_TO_FD)
		return odpx_fail(-EINVAL, "bad direction %d", dir);
	if (offset < -1)
		return odpx_fail(-EINVAL, "offset %lld: -1 or a position", (long long)offset);
	uintptr_t s = (uintptr_t)odpx_mr_addr(mr), a = (uintptr_t)addr;
	if (!len || a < s || a + len < a || a + len > s + odpx_mr_length(mr))
		return odpx_fail(-EINVAL, "range outside the registration");
	return uring_transfer(ctx, entry_idx(ctx, e), fd, offset, addr, len, dir);
}

ODPX_EXPORT int odpx_prefetch(struct odpx_ctx *ctx, void *addr, size_t len, uint32_t flags)
{
	int r;

	if (unlikely((r = ctx_check(ctx)) < 0))
		return r;
	if (unlikely(bad_range((uintptr_t)addr, len)))
		return odpx_fail(-EINVAL, "bad prefetch range");
	if (unlikely(flags & ~(uint32_t)(ODPX_PREFETCH_RESERVED - 1)))
		return odpx_fail(-EINVAL, "unknown prefetch flags %#x", flags);
	if (flags & ODPX_PREFETCH_SYNC)
		return mode_prefetch_sync(ctx, (uintptr_t)addr, len, flags);
	return prefetch_enqueue(ctx, (uintptr_t)addr, len, flags);
}

ODPX_EXPORT int odpx_invalidate(struct odpx_ctx *ctx, void *addr, size_t len)
{
	uintptr_t a = (uintptr_t)addr;
	unsigned n;
	int r;

	if ((r = ctx_check(ctx)) < 0)
		return r;
	if (bad_range(a, len))
		return odpx_fail(-EINVAL, "bad invalidate range");
	n = monitor_invalidate(a & ~(PAGE_SIZE - 1), (a + len + PAGE_SIZE - 1) & ~(PAGE_SIZE - 1));
	return n > INT_MAX ? INT_MAX : (int)n;
}

ODPX_EXPORT int odpx_mode_get(struct odpx_ctx *ctx, enum odpx_mode *mode, const char **reason)
{
	int r;

	if ((r = ctx_check(ctx)) < 0)
		return r;
	if (mode)
		*mode = ctx->mode;
	if (reason) {
		pthread_mutex_lock(&ctx->reason_lock);
		snprintf(mode_reason, sizeof(mode_reason), "%s", ctx->reason);
		pthread_mutex_unlock(&ctx->reason_lock);
		*reason = mode_reason;
	}
	return 0;
}
