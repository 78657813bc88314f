/* SPDX-License-Identifier: MIT */
/*
 * odpx.h - which memory registration covers this buffer?  With no memory
 * hooks; on-demand paging first, else a pin-down cache kept coherent by
 * userfaultfd events.
 *
 * Every function returns 0, a count, or a negative errno.  Handles are
 * opaque.  All functions are thread-safe unless stated otherwise.  Manual:
 * odpx(7), then a page in section 3 for each function below.
 */
#ifndef ODPX_H
#define ODPX_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this header; odpx_version() tells the library's. */
#define ODPX_VERSION_MAJOR 0
#define ODPX_VERSION_MINOR 1
#define ODPX_VERSION_PATCH 0
#define ODPX_VERSION "0.1.0"

struct odpx_ctx;
struct odpx_mr;
struct odpx_caps;
struct ibv_pd;

enum odpx_mode {
	ODPX_MODE_AUTO = 0,	/* choose from the device's capabilities */
	ODPX_MODE_IMPLICIT,	/* one ODP MR over the whole address space */
	ODPX_MODE_EXPLICIT,	/* ODP MRs over aligned chunks, never invalidated */
	ODPX_MODE_PIN,		/* pin-down cache, invalidated by userfaultfd */
	ODPX_MODE_DIRECT,	/* pin per request, unpin on dereg */
	ODPX_MODE_HYBRID,	/* pinned within the budget and memory headroom, ODP beyond */
	ODPX_MODE_RESERVED,
};

enum odpx_backend {
	ODPX_BACKEND_URING = 1,	/* io_uring fixed buffers: pins like an MR */
	ODPX_BACKEND_VERBS,	/* libibverbs */
	ODPX_BACKEND_RESERVED,
};

/* Access bits for odpx_reg(); values match enum ibv_access_flags. */
enum {
	ODPX_ACCESS_LOCAL_WRITE = 1 << 0,
	ODPX_ACCESS_REMOTE_WRITE = 1 << 1,
	ODPX_ACCESS_REMOTE_READ = 1 << 2,
	ODPX_ACCESS_REMOTE_ATOMIC = 1 << 3,
	ODPX_ACCESS_RESERVED = 1 << 4,
};

/* Limits of the pin cache; a field left 0 takes its default (odpx_open_uring(3)). */
struct odpx_limits {
	uint64_t max_pinned_bytes;	/* pinned bytes, cached and direct */
	uint64_t max_entries;		/* registrations alive at once */
	uint64_t max_unused_bytes;	/* released entries kept as victims */
	uint64_t max_entry_bytes;	/* one entry; merging never grows one beyond it */
};

enum odpx_attr_mask {
	ODPX_ATTR_MODE = 1 << 0,
	ODPX_ATTR_LIMITS = 1 << 1,
	ODPX_ATTR_FLAGS = 1 << 2,
	ODPX_ATTR_TICK = 1 << 3,
	ODPX_ATTR_THRASH_CB = 1 << 4,
	ODPX_ATTR_TRANSPORTS = 1 << 5,
	ODPX_ATTR_CHUNK = 1 << 6,
	ODPX_ATTR_LINGER = 1 << 7,
	ODPX_ATTR_IDLE = 1 << 8,
	ODPX_ATTR_PREREG = 1 << 9,
	ODPX_ATTR_RESERVED = 1 << 10,
};

/* A range to register for the context's whole life (odpx_prereg_add(3)). */
struct odpx_range {
	void *addr;
	size_t len;
	uint32_t access;	/* ODPX_ACCESS_* */
};

/* Transports the caller will use with its registrations (verbs backend). */
enum odpx_transport {
	ODPX_TRANSPORT_RC = 1 << 0,
	ODPX_TRANSPORT_UD = 1 << 1,
	ODPX_TRANSPORT_UC = 1 << 2,
	ODPX_TRANSPORT_XRC = 1 << 3,
	ODPX_TRANSPORT_RESERVED = 1 << 4,
};

/* Open flags (odpx_open_uring(3), odpx_open_verbs(3)). */
enum odpx_open_flags {
	ODPX_OPEN_UNSAFE_NO_MONITOR = 1 << 0,	/* tests: cache with no invalidation */
	ODPX_OPEN_GLOBAL_RKEY = 1 << 1,		/* ODP: remote access beyond the request */
	ODPX_OPEN_REMOTE_UNCACHED = 1 << 2,	/* pin: remote access ends at odpx_dereg() */
	ODPX_OPEN_NO_PROT_CHECK = 1 << 3,	/* pin: never check protection on a hit */
	ODPX_OPEN_PROT_CHECK = 1 << 4,		/* pin: a hit asks the pages' protection */
	ODPX_OPEN_RESERVED = 1 << 5,
};

/* The thrash detector's states and thresholds (ODPX_THRASH): odpstat(1). */
enum odpx_thrash_state {
	ODPX_THRASH_OK = 0,		/* idle, or hits */
	ODPX_THRASH_WARMING,		/* a working set is loading */
	ODPX_THRASH_THRASH,		/* the working set does not fit */
	ODPX_THRASH_RESERVED,
};

/* The metric that decided the state. */
enum odpx_thrash_metric {
	ODPX_METRIC_NONE = 0,
	ODPX_METRIC_FAULT_RATE,		/* device faulted pages per second */
	ODPX_METRIC_INVAL_RATIO,	/* invalidated pages / faulted pages */
	ODPX_METRIC_REFAULT_RATIO,	/* pages faulted again soon after invalidation / faulted */
	ODPX_METRIC_REPIN_RATIO,	/* pin: re-pins of recently invalidated ranges / misses */
	ODPX_METRIC_EVICT_MISS_RATIO,	/* pin: evictions followed by a miss / misses */
	ODPX_METRIC_MISS_RATE,		/* pin: misses per second (WARMING) */
	ODPX_METRIC_MEM_REFAULT_RATE,	/* ODP: the memory cgroup's (else the system's)
					   workingset refaults per second */
	ODPX_METRIC_MAJFAULT_RATE,	/* ODP: its major faults per second (WARMING) */
	ODPX_METRIC_RESERVED,
};

struct odpx_thrash_event {
	enum odpx_thrash_state state, prev;
	enum odpx_thrash_metric metric;
	double value;			/* of @metric over the last window */
};

/* On the engine thread when the state changes; never odpx_close(@ctx) from it. */
typedef void (*odpx_thrash_cb)(struct odpx_ctx *ctx, const struct odpx_thrash_event *ev,
			       void *arg);

struct odpx_attr {
	uint64_t comp_mask;		/* enum odpx_attr_mask */
	enum odpx_mode mode;		/* ODPX_ATTR_MODE; env ODPX_MODE overrides AUTO */
	uint32_t flags;			/* ODPX_ATTR_FLAGS: enum odpx_open_flags */
	struct odpx_limits limits;	/* ODPX_ATTR_LIMITS */
	uint32_t tick_ms;		/* ODPX_ATTR_TICK: engine tick, default 100 */
	odpx_thrash_cb thrash_cb;	/* ODPX_ATTR_THRASH_CB */
	void *thrash_arg;
	uint32_t transports;		/* ODPX_ATTR_TRANSPORTS: enum odpx_transport, default RC */
	uint64_t chunk_bytes;		/* ODPX_ATTR_CHUNK: explicit-ODP chunk, default 64 MiB */
	uint32_t linger_us;		/* ODPX_ATTR_LINGER: engine's wait before it sleeps */
	uint32_t idle_ms;		/* ODPX_ATTR_IDLE: idle release, 0 never */
	const struct odpx_range *prereg;	/* ODPX_ATTR_PREREG: pre-registered at open, */
	uint32_t nprereg;		/* as by odpx_prereg_add() each, at most 64 */
};

/**
 * odpx_open_uring - open a context on the io_uring backend (pin or direct mode)
 * @attr: may be NULL for defaults
 * @ctx: out
 *
 * Return: 0, -EINVAL (bad attributes), -EOPNOTSUPP (mode impossible here),
 * -ENOMEM, or the errno of io_uring setup.
 */
int odpx_open_uring(const struct odpx_attr *attr, struct odpx_ctx **ctx);

/**
 * odpx_open_verbs - open a context on a protection domain (verbs backend)
 * @pd: the protection domain every registration is made on, held until close
 * @attr: may be NULL for defaults
 * @ctx: out
 *
 * The mode: ODP first, from the device's caps and the transports in @attr.
 * Return: 0, -EINVAL (bad attributes, NULL @pd), -EOPNOTSUPP (forced mode
 * impossible, or built without libibverbs), -ENOMEM, or the -errno of a
 * verbs call.
 */
int odpx_open_verbs(struct ibv_pd *pd, const struct odpx_attr *attr,
		    struct odpx_ctx **ctx);

/**
 * odpx_close - release every registration, held ones too, and stop the threads
 *
 * No call on @ctx may run concurrently with its close.
 * Return: 0 or -EINVAL (NULL or closed @ctx).
 */
int odpx_close(struct odpx_ctx *ctx);

/**
 * odpx_reg - get a registration covering [@addr, @addr + @len)
 * @access: ODPX_ACCESS_* bits
 * @mr: out, a reference released with odpx_dereg()
 *
 * A hit takes no lock.
 * Return: 0, or -EINVAL (bad length, wrap, unknown access bits), -EFAULT
 * (unmapped, PROT_NONE or unpinnable memory), -ENOMEM (limits reached with
 * every entry in use), -E2BIG (longer than max_entry_bytes).
 */
int odpx_reg(struct odpx_ctx *ctx, void *addr, size_t len, uint32_t access,
	     struct odpx_mr **mr);

enum odpx_reg_flags {
	ODPX_REG_TRY = 1 << 0,		/* one that covers the whole range */
	ODPX_REG_PARTIAL = 1 << 1,	/* one that covers the first page any covers */
	ODPX_REG_RESERVED = 1 << 2,
};

/**
 * odpx_reg_ex - odpx_reg() with flags: lookups that never block
 * @flags: 0 (odpx_reg()), or ODPX_REG_TRY or ODPX_REG_PARTIAL
 *
 * With either flag the call never pins, registers, waits for a miss or
 * takes a lock a miss may hold for long.
 * Return: 0, -EAGAIN (none serves it now; nothing is registered for it), or
 * the errors of odpx_reg(); -EINVAL for unknown flag bits.
 */
int odpx_reg_ex(struct odpx_ctx *ctx, void *addr, size_t len, uint32_t access,
		uint32_t flags, struct odpx_mr **mr);

/**
 * odpx_prereg_add - register [@addr, @addr + @len) for the context's life
 * @access: ODPX_ACCESS_* bits of the registration
 *
 * Never evicted nor released as idle; made again after an invalidation.
 * Return: 0, -EEXIST (the same range and access is pre-registered),
 * -ENOSPC (64 regions), -EOPNOTSUPP (direct mode, or memory that cannot
 * be cached: a shared file mapping, a range the monitor cannot watch), or
 * the errors of odpx_reg().
 */
int odpx_prereg_add(struct odpx_ctx *ctx, void *addr, size_t len, uint32_t access);

/**
 * odpx_prereg_release - make a region of odpx_prereg_add() an ordinary registration
 *
 * Return: 0, -ENOENT (no such region), -EINVAL.
 */
int odpx_prereg_release(struct odpx_ctx *ctx, void *addr, size_t len, uint32_t access);

/**
 * odpx_dereg - release a reference from odpx_reg()
 *
 * Return: 0, or -EINVAL for a handle that is not this context's or was
 * already released (detected while the entry has no other holder).
 */
int odpx_dereg(struct odpx_ctx *ctx, struct odpx_mr *mr);

/* Accessors of a held registration (no checks: the handle must be held). */
uint32_t odpx_mr_lkey(const struct odpx_mr *mr);
uint32_t odpx_mr_rkey(const struct odpx_mr *mr);
void *odpx_mr_addr(const struct odpx_mr *mr);	/* start of the whole registration */
size_t odpx_mr_length(const struct odpx_mr *mr);
/* uring backend: the fixed-buffer index, or -EOPNOTSUPP on other backends */
int odpx_mr_buf_index(const struct odpx_mr *mr);

enum odpx_xfer_dir {
	ODPX_XFER_FROM_FD = 0,	/* device writes memory: READ_FIXED */
	ODPX_XFER_TO_FD,	/* device reads memory: WRITE_FIXED */
};

/**
 * odpx_transfer - move bytes between @fd and the pages @mr pinned (uring backend)
 * @offset: the position in @fd, or -1 for its current position, advanced
 *
 * [@addr, @addr + @len) must lie inside @mr.  One transfer of a context at a
 * time.  A signal cancels the request; the call returns once nothing moves.
 * Return: bytes moved (those moved before an error or a signal, if any),
 * -EINTR when a signal, or a stop and continue, came before any, -EINVAL
 * (bad arguments, an offset below -1), or the -errno of the read or write.
 */
ssize_t odpx_transfer(struct odpx_ctx *ctx, struct odpx_mr *mr, int fd,
		      off_t offset, void *addr, size_t len,
		      enum odpx_xfer_dir dir);

enum odpx_prefetch_flags {
	ODPX_PREFETCH_WRITE = 1 << 0,	/* the device will write */
	ODPX_PREFETCH_NO_FAULT = 1 << 1,	/* map only what is resident */
	ODPX_PREFETCH_SYNC = 1 << 2,	/* served on the caller's thread: may block */
	ODPX_PREFETCH_RESERVED = 1 << 3,
};

/**
 * odpx_prefetch - hint that [@addr, @addr + @len) will be registered soon
 *
 * Never blocks, unless ODPX_PREFETCH_SYNC.
 * Return: 0 queued (or done), -EAGAIN dropped (the queue is full, or the
 * engine could not start), -EINVAL, or the error of a synchronous prefetch.
 */
int odpx_prefetch(struct odpx_ctx *ctx, void *addr, size_t len, uint32_t flags);

/**
 * odpx_invalidate - the pages of [@addr, @addr + @len) changed unseen
 *
 * As a REMOVE event would, on every pin-mode context of the process; for
 * madvise(MADV_GUARD_INSTALL), which raises none.
 * Return: the number of cached entries it invalidated (0 in the modes that
 * cache nothing), or -EINVAL.
 */
int odpx_invalidate(struct odpx_ctx *ctx, void *addr, size_t len);

struct odpx_stats {
	/* registration cache */
	uint64_t hits, misses, hits_slow;	/* slow: taken under the lock */
	uint64_t deregs;
	uint64_t entries, pinned_bytes, unused_bytes;	/* gauges */
	uint64_t pins, unpins, pin_failures;
	uint64_t evictions, enomem_retries;
	uint64_t merges, superseded;
	uint64_t miss_retries;		/* invalidated while pinning */
	uint64_t repins;		/* miss on a range invalidated recently: new memory */
	/* invalidation (userfaultfd) */
	uint64_t inval_unmap, inval_remove, inval_remap;	/* events seen */
	uint64_t inval_entries, inval_bytes;	/* entries marked dead */
	uint64_t dead_unpinned;		/* by the engine */
	uint64_t watch_vmas, watch_regs;	/* gauge; registrations made */
	/* direct-mode fallbacks, each counted */
	uint64_t direct_regs;		/* every direct registration */
	uint64_t direct_shared;		/* file-backed or shared: no events */
	uint64_t direct_unwatchable;	/* uffd EINVAL/EBUSY; no descriptor to look up the VMA */
	uint64_t direct_budget;		/* VMA budget, or vm.max_map_count, exhausted */
	uint64_t direct_no_monitor;	/* no userfaultfd at all */
	uint64_t direct_racing;		/* a DONTNEED not yet zapped, or one each retry */
	/* prefetch */
	uint64_t prefetch_queued, prefetch_merged;
	uint64_t prefetch_dropped;	/* refused, or left by an engine odpx_close() stopped */
	uint64_t prefetch_issued, prefetch_failed;	/* failed: also a pre-pin served direct */
	/* engine */
	uint64_t engine_wakeups, engine_ticks;
	uint64_t unsafe_no_monitor;	/* 1 when opened ODPX_OPEN_UNSAFE_NO_MONITOR */
	/* thrash detector (engine thread, each window) */
	uint64_t thrash_state;		/* enum odpx_thrash_state */
	uint64_t thrash_metric;		/* enum odpx_thrash_metric that decided it */
	uint64_t thrash_value_milli;	/* that metric's last value x 1000 */
	uint64_t thrash_changes;	/* state changes since open */
	/* verbs backend */
	uint64_t prefetch_sges;		/* SGEs passed to ibv_advise_mr */
	uint64_t prefetch_errno;	/* errno of the last failed ibv_advise_mr, 0: none */
	uint64_t global_rkey;		/* 1: remote access may exceed the request (GLOBAL_RKEY) */
	uint64_t odp_mrs;		/* ODP MRs registered: chunks and ranges */
	uint64_t odp_fallbacks;		/* chunk registration failed: range MR instead */
	/* appended in this order: the struct only grows (odpx_stats_read(3)) */
	uint64_t evict_remiss;		/* misses at the start of a recently evicted range */
	uint64_t inval_api;		/* odpx_invalidate calls that reached this context */
	uint64_t engine_lingers;	/* lingers that ended by their timeout */
	uint64_t direct_no_engine;	/* the engine could not start; retried each second */
	uint64_t try_again;		/* odpx_reg_ex() TRY or PARTIAL that returned -EAGAIN */
	uint64_t idle_released;		/* unused registrations and ODP MRs released as idle */
	uint64_t prereg_repins;		/* pre-registered regions made again after an invalidation */
	uint64_t repin_fresh;		/* like evict_remiss, but the memory went since: new */
	uint64_t preload_passthrough;	/* verbs registrations libodpx-preload.so passed on */
	/* the memory cgroup (odpx(7), "Memory cgroup") */
	uint64_t memcg_refusals;	/* pins refused with -ENOMEM: past the cgroup's headroom */
	uint64_t memcg_released;	/* bytes of unused pins released for headroom or pressure */
	uint64_t memcg_pressure;	/* engine ticks that found the cgroup under pressure */
	/* hybrid mode: where each registration that missed the pinned part went */
	uint64_t hybrid_pinned;		/* pinned: it fit the budget and the memory headroom */
	uint64_t hybrid_odp;		/* ODP: a pin would have passed the budget or headroom */
	uint64_t hybrid_to_pin;		/* moved from ODP to pinned: ODP thrashed, the pin fit */
	uint64_t hybrid_released;	/* bytes of unused pins its pinned part released for the cgroup */
	uint64_t odp_bytes;		/* gauge: bytes the chunk and range ODP MRs span */
};

/**
 * odpx_stats_read - copy the context's counters
 * @size: sizeof(struct odpx_stats) of the caller; older callers get a prefix
 * Return: bytes written or -EINVAL.
 */
int odpx_stats_read(struct odpx_ctx *ctx, struct odpx_stats *st, size_t size);

/**
 * odpx_mode_get - the mode in force and why it was chosen
 * @reason: out, may be NULL; the calling thread's copy, valid until its next call
 */
int odpx_mode_get(struct odpx_ctx *ctx, enum odpx_mode *mode,
		  const char **reason);

const char *odpx_mode_str(enum odpx_mode mode);

/* Where max_pinned_bytes came from. */
enum odpx_limit_source {
	ODPX_LIMIT_ATTR = 1,		/* the open attributes */
	ODPX_LIMIT_MEMLOCK,		/* RLIMIT_MEMLOCK */
	ODPX_LIMIT_RAM,			/* 1/8 of physical memory */
	ODPX_LIMIT_RESERVED,
};

enum odpx_query_mask {
	ODPX_QUERY_LIMITS = 1 << 0,	/* limits, their source, idle_ms, rlimit_memlock */
	ODPX_QUERY_USAGE = 1 << 1,	/* entries, bytes, pre-registered regions */
	ODPX_QUERY_DEVICE = 1 << 2,	/* verbs backend: the device's limits and ODP caps */
	ODPX_QUERY_WATCH = 1 << 3,	/* pin mode, once a miss attached the monitor */
	ODPX_QUERY_URING = 1 << 4,	/* uring backend */
	ODPX_QUERY_RESERVED = 1 << 5,
};

/* What a resource manager needs to size a process (odpx_query(3)). */
struct odpx_caps {
	uint64_t comp_mask;		/* in: the parts wanted; out: those filled */
	/* ODPX_QUERY_LIMITS */
	struct odpx_limits limits;	/* in force, defaults resolved */
	uint32_t max_pinned_source;	/* enum odpx_limit_source */
	uint32_t idle_ms;		/* 0: no idle release */
	uint64_t rlimit_memlock;	/* soft RLIMIT_MEMLOCK now, UINT64_MAX: unlimited */
	/* ODPX_QUERY_USAGE */
	uint64_t entries, pinned_bytes, unused_bytes;
	uint64_t prereg_regions, prereg_bytes;
	/* ODPX_QUERY_DEVICE (ibv_query_device_ex at open) */
	uint64_t max_mr, max_mr_size, max_pd;
	uint64_t odp_general_caps;	/* enum ibv_odp_general_caps */
	uint32_t odp_rc_caps, odp_uc_caps, odp_ud_caps, odp_xrc_caps;
	/* ODPX_QUERY_WATCH: the process's watched ranges and their budget */
	uint32_t watch_ranges, watch_max;
	/* ODPX_QUERY_URING: fixed-buffer slots and the largest */
	uint32_t uring_slots;
	uint64_t uring_slot_max_bytes;
};

/**
 * odpx_query - the context's limits, their use, and the resources behind
 * @caps: comp_mask in: the parts wanted (enum odpx_query_mask); out: those filled
 * Return: 0, -EINVAL (NULL, unknown bits).
 */
int odpx_query(struct odpx_ctx *ctx, struct odpx_caps *caps);

/*
 * odpx_last_reason - the calling thread's text for the last error returned
 * by odpx (for example why a range could not be pinned).  Never NULL.
 */
const char *odpx_last_reason(void);

/*
 * odpx_version - the version of the library in use, "MAJOR.MINOR.PATCH"
 * (a static string; compare with ODPX_VERSION, the header's).
 */
const char *odpx_version(void);

#ifdef __cplusplus
}
#endif
#endif /* ODPX_H */
