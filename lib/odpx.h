/* SPDX-License-Identifier: MIT */
/*
 * odpx.h - which memory registration covers this buffer?
 *
 * odpx answers that question for any buffer a process owns, with no memory
 * hooks: nothing intercepts malloc, free, mmap or munmap.  Where the device
 * pages on demand nothing is pinned; elsewhere a pin-down cache is kept
 * coherent by userfaultfd events.
 *
 * Every function returns 0, a count, or a negative errno.  Handles are
 * opaque.  All functions are thread-safe unless stated otherwise.
 *
 * Manual: odpx(7) for the overview, the modes, the invalidation guarantee
 * and the environment variables; a page in section 3 for each function
 * below (odpx_open_uring(3), odpx_reg(3), ...); odpstat(1) and odpx-info(1)
 * for the tools.
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

/*
 * Limits of the pin cache.  A field left 0 takes its default.
 *   max_pinned_bytes  pinned bytes of the context, cached and direct:
 *                     RLIMIT_MEMLOCK when finite and the process lacks
 *                     CAP_IPC_LOCK, else 1/8 of physical memory.
 *   max_entries       registrations alive at once (cached + direct):
 *                     4096, at most 16384 on the uring backend (its slots).
 *                     Pin mode sizes the entry slab (64 bytes a slot) to
 *                     the next prime at or above it, where the backend
 *                     allows: a few slots more, never more live entries.
 *   max_unused_bytes  bytes of released entries kept as victims: 1/2 of
 *                     max_pinned_bytes.  Trimmed on each engine tick
 *                     (ODPX_ATTR_TICK), least recently released first;
 *                     between ticks it may be exceeded, never the two
 *                     limits above, which every miss enforces.
 *   max_entry_bytes   bytes of one entry; merging never grows an entry
 *                     beyond it: 1 GiB (the uring slot size).  In the
 *                     verbs pin and direct modes an entry is one MR: at
 *                     most the device's max_mr_size (the default is
 *                     lowered to it; a larger value fails the open with
 *                     -EINVAL).
 */
struct odpx_limits {
	uint64_t max_pinned_bytes;
	uint64_t max_entries;
	uint64_t max_unused_bytes;
	uint64_t max_entry_bytes;
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

enum odpx_open_flags {
	/*
	 * Test-only: cache without invalidation (no userfaultfd monitor).
	 * Reproduces the stale-registration hazard that odpx exists to
	 * prevent; counted in stats and shown by odpstat.
	 */
	ODPX_OPEN_UNSAFE_NO_MONITOR = 1 << 0,
	/*
	 * Verbs, ODP modes: remote-access requests may be served by an MR that
	 * reaches beyond the request, in pages and in rights: the implicit MR,
	 * or an ODP MR per chunk, with every remote access the device's ODP
	 * offers (remote read, write and, where supported, atomic) whatever
	 * the request asked.  Without it, remote access covers exactly the
	 * request's pages with exactly its rights.  Shown as global_rkey in
	 * stats.
	 */
	ODPX_OPEN_GLOBAL_RKEY = 1 << 1,
	/*
	 * Pin mode: a request with remote access is pinned for itself (direct,
	 * counted in direct_regs) and unpinned by its odpx_dereg(), so a peer's
	 * rkey ends exactly there.  Without it such a registration stays cached
	 * after its release, until evicted or invalidated.  The ODP modes
	 * always deregister a remote-access range at its last release.
	 */
	ODPX_OPEN_REMOTE_UNCACHED = 1 << 2,
	/*
	 * Pin mode: a hit does not ask the kernel whether the pages still
	 * allow the access asked (odpx_reg()): a hit costs no system call,
	 * and an mprotect() that takes access away from cached pages must be
	 * followed by odpx_invalidate() on them.  ODPX_CHECK_PROT=0 does the
	 * same for every context of the process.
	 */
	ODPX_OPEN_NO_PROT_CHECK = 1 << 3,
	ODPX_OPEN_RESERVED = 1 << 4,
};

/*
 * The thrash detector (odpstat(1) documents it): from counter increases over
 * a window it finds a working set that keeps being registered again.
 *   OK       idle, or hits: nothing to report
 *   WARMING  faults (misses) with no invalidations (evictions), or misses
 *            on memory unmapped or zapped lately (new memory): a working
 *            set is loading
 *   THRASH   pages invalidated (ranges evicted) and faulted (missed)
 *            again: the working set does not fit
 * Thresholds and the window: ODPX_THRASH="key=value,..." (odpstat(1)).
 */
enum odpx_thrash_state {
	ODPX_THRASH_OK = 0,
	ODPX_THRASH_WARMING,
	ODPX_THRASH_THRASH,
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

/*
 * Called on the context's engine thread when the state changes (and so only
 * while the engine runs: pin mode with cached entries, or after a prefetch).
 * It must not call odpx_close() on @ctx nor block for long.
 */
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
	uint64_t chunk_bytes;		/* ODPX_ATTR_CHUNK: explicit-ODP chunk, a power of 2,
					 * 2 MiB..2 GiB, at most max_mr_size; default 64 MiB */
	uint32_t linger_us;		/* ODPX_ATTR_LINGER: how long the engine waits on a
					 * timer after work before it sleeps on its doorbell,
					 * 0 (never) to 1000000; default ODPX_ENGINE_LINGER_US
					 * from the environment, else 100 */
	uint32_t idle_ms;		/* ODPX_ATTR_IDLE: unused registrations (and ODP MRs
					 * no registration holds) idle this long are released
					 * by the engine; 0 never.  Default ODPX_IDLE_MS from
					 * the environment, else 300000 */
	const struct odpx_range *prereg;	/* ODPX_ATTR_PREREG: pre-registered at open, */
	uint32_t nprereg;		/* as by odpx_prereg_add() each, at most 64 */
};

/**
 * odpx_open_uring - open a context on the io_uring backend
 * @attr: may be NULL for defaults
 * @ctx: out
 *
 * The backend pins pages into a sparse io_uring fixed-buffer table (16384
 * slots of at most 1 GiB each); READ_FIXED/WRITE_FIXED through a slot move
 * bytes through the pinned pages exactly as a NIC's DMA would.
 * Return: 0, -EINVAL (bad attributes), -EOPNOTSUPP (mode impossible here),
 * -ENOMEM, or the errno of io_uring setup.
 */
int odpx_open_uring(const struct odpx_attr *attr, struct odpx_ctx **ctx);

/**
 * odpx_open_verbs - open a context on a protection domain (verbs backend)
 * @pd: the protection domain every registration is made on
 * @attr: may be NULL for defaults
 * @ctx: out
 *
 * The mode comes from the device's ODP capabilities and the transports in
 * @attr, ODP first: implicit, explicit, pin; direct only when forced
 * (odpx_open_verbs(3) has the rules; odpx_mode_get() tells the choice).
 * The context holds MRs on @pd from open to close: ibv_dealloc_pd(@pd)
 * before odpx_close() fails with EBUSY.  Nothing closes a context at
 * exit().  Implicit mode: odpx_mr_addr() of the implicit MR is NULL and
 * odpx_mr_length() 0 (it covers everything).
 * Return: 0, -EINVAL (bad attributes, NULL @pd), -EOPNOTSUPP (forced mode
 * impossible, or built without libibverbs), -ENOMEM, or the -errno of a
 * verbs call.
 */
int odpx_open_verbs(struct ibv_pd *pd, const struct odpx_attr *attr,
		    struct odpx_ctx **ctx);

/**
 * odpx_close - release every registration and stop the context's threads
 *
 * Registrations still held by the caller are released too; their handles
 * become invalid.  Prefetch hints not yet served are dropped: the engine
 * ends the pre-pin under way, if any, and pins nothing more.
 *
 * A closed context's memory stays odpx's: odpx_close() of it again, and
 * every call that takes it, fail with -EINVAL until a later open reuses it
 * (then the pointer is that new context's).  Undefined: a call on a context
 * concurrent with its close, and odpx_mr_lkey() and the other handle
 * accessors on a handle of a closed context.
 * Return: 0 or -EINVAL (NULL or closed @ctx).
 */
int odpx_close(struct odpx_ctx *ctx);

/**
 * odpx_reg - get a registration covering [@addr, @addr + @len)
 * @access: ODPX_ACCESS_* bits
 * @mr: out, a reference released with odpx_dereg()
 *
 * A hit takes no lock.  A range invalidated while it is pinned, three
 * times in a row, is served direct (counted in direct_racing).  In pin
 * mode a hit asks the kernel whether the pages still allow @access
 * (mprotect() raises no userfaultfd event; odpx_reg(3), -EFAULT).
 * Return: 0, or -EINVAL (bad length, wrap, unknown access bits), -EFAULT
 * (unmapped, PROT_NONE or unpinnable memory: read-only or shared file
 * mappings on the uring backend), -ENOMEM (limits reached with every entry
 * in use), -E2BIG (longer than max_entry_bytes).
 */
int odpx_reg(struct odpx_ctx *ctx, void *addr, size_t len, uint32_t access,
	     struct odpx_mr **mr);

enum odpx_reg_flags {
	/* a registration that exists and covers the whole range, or -EAGAIN */
	ODPX_REG_TRY = 1 << 0,
	/*
	 * one that exists and covers the lowest-addressed page of the range
	 * that any registration covers (its bounds: odpx_mr_addr(),
	 * odpx_mr_length()), or -EAGAIN; implies ODPX_REG_TRY
	 */
	ODPX_REG_PARTIAL = 1 << 1,
	ODPX_REG_RESERVED = 1 << 2,
};

/**
 * odpx_reg_ex - odpx_reg() with flags: lookups that never block
 * @flags: 0 (odpx_reg()), or ODPX_REG_TRY or ODPX_REG_PARTIAL
 *
 * With either flag the call never pins, registers, waits for another
 * thread's miss or takes a lock that a miss may hold for long: it answers
 * from the registrations that exist.  Nothing registers for a call that
 * got -EAGAIN: spinning on it is no way to wait (odpx_reg_ex(3)).  In pin
 * mode a hit over pages that no longer allow @access is -EAGAIN too.
 * Return: 0, -EAGAIN (none serves it now, counted in try_again), or the
 * errors of odpx_reg(); -EINVAL for unknown flag bits.
 */
int odpx_reg_ex(struct odpx_ctx *ctx, void *addr, size_t len, uint32_t access,
		uint32_t flags, struct odpx_mr **mr);

/**
 * odpx_prereg_add - register [@addr, @addr + @len) for the context's life
 * @access: ODPX_ACCESS_* bits of the registration
 *
 * The registration is made now and held by the context: never evicted nor
 * released as idle, not unused bytes, and it may be longer than
 * max_entry_bytes.  Invalidated like any registration, it is made again by
 * the next request inside it (odpx_prereg_add(3)).
 * Return: 0, -EEXIST (the same range and access is pre-registered),
 * -ENOSPC (64 regions), -EOPNOTSUPP (direct mode, or memory that cannot
 * be cached: a shared file mapping, a range the monitor cannot watch), or
 * the errors of odpx_reg().
 */
int odpx_prereg_add(struct odpx_ctx *ctx, void *addr, size_t len, uint32_t access);

/**
 * odpx_prereg_release - let go of a region of odpx_prereg_add()
 *
 * Its registration becomes an ordinary one: released when unused, as
 * the limits and idle reaping decide.  odpx_close() releases them all.
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
 * odpx_transfer - move bytes between @fd and a registration's pinned pages
 *
 * The "DMA" of the uring backend: the bytes go through the pages pinned at
 * registration time, whatever the address now maps.  [@addr, @addr + @len)
 * must lie inside @mr.  @offset is the position in @fd, or -1 for the
 * file's current position, which the call advances.  Transfers of one
 * context run one at a time.  A signal, or a stop and continue, cancels the
 * request, and the call returns once nothing more moves through the pages
 * (SA_RESTART does not restart it; odpx_transfer(3)).
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
	/*
	 * Serve the hint on the caller's thread and return when it is done:
	 * ibv_advise_mr with IBV_ADVISE_MR_FLAG_FLUSH in the ODP modes (pages
	 * resident), a pre-pin in pin mode.  This one may block.
	 */
	ODPX_PREFETCH_SYNC = 1 << 2,
	ODPX_PREFETCH_RESERVED = 1 << 3,
};

/**
 * odpx_prefetch - hint that [@addr, @addr + @len) will be registered soon
 *
 * Queued without a system call (the engine is woken only when it sleeps);
 * never blocks, unless ODPX_PREFETCH_SYNC.  The engine serves hints with
 * ibv_advise_mr (ODP modes) or pins them into the cache (pin mode);
 * direct mode counts and ignores them (odpx_prefetch(3)).
 * Return: 0 queued (or done), -EAGAIN dropped (counted in prefetch_dropped:
 * the queue is full, or the engine thread could not start, which
 * odpx_last_reason() tells and a hint a second later tries again), -EINVAL,
 * or the error of a synchronous prefetch.
 */
int odpx_prefetch(struct odpx_ctx *ctx, void *addr, size_t len, uint32_t flags);

/**
 * odpx_invalidate - the pages of [@addr, @addr + @len) changed unseen
 *
 * For the one change of private memory the kernel reports to no one,
 * madvise(MADV_GUARD_INSTALL) (odpx_invalidate(3)).  It acts as a REMOVE
 * event read by the monitor would, on every pin-mode context of the process
 * (not those opened ODPX_OPEN_UNSAFE_NO_MONITOR); held registrations stay
 * valid until released.
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
	uint64_t direct_racing;		/* raced invalidations: a DONTNEED not yet
					   zapped, or one at each miss retry */
	/* prefetch */
	uint64_t prefetch_queued, prefetch_merged;
	uint64_t prefetch_dropped;	/* refused (full queue, no engine), or taken by an
					   engine that odpx_close() stopped */
	uint64_t prefetch_issued, prefetch_failed;	/* failed: also a pre-pin served direct
							   (pin mode: nothing was cached) */
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
	/* pin cache, for the thrash detector */
	uint64_t evict_remiss;		/* misses at the start of a recently evicted range */
	uint64_t inval_api;		/* odpx_invalidate calls that reached this context */
	uint64_t engine_lingers;	/* lingers that ended by their timeout: wake-ups that
					   are neither a doorbell nor a tick (engine.c) */
	/* direct-mode fallback, appended */
	uint64_t direct_no_engine;	/* the engine thread could not start (a descriptor,
					   memory or thread limit); retried once a second */
	/* appended */
	uint64_t try_again;		/* odpx_reg_ex() TRY or PARTIAL that returned -EAGAIN */
	uint64_t idle_released;		/* unused registrations and ODP MRs released as idle */
	uint64_t prereg_repins;		/* pre-registered regions made again after an invalidation */
	/* pin cache, for the thrash detector, appended */
	uint64_t repin_fresh;		/* misses at the start of a recently evicted range
					   whose memory was unmapped or zapped since: new
					   memory, not in evict_remiss */
	/* LD_PRELOAD drop-in, appended */
	uint64_t preload_passthrough;	/* verbs registrations libodpx-preload.so left to
					   libibverbs (memory windows, dma-buf, zero-based...) */
};

/**
 * odpx_stats_read - copy the context's counters
 * @size: sizeof(struct odpx_stats) of the caller; older callers get a prefix
 * Return: bytes written or -EINVAL.
 */
int odpx_stats_read(struct odpx_ctx *ctx, struct odpx_stats *st, size_t size);

/**
 * odpx_mode_get - the mode in force and why it was chosen
 * @reason: out, may be NULL; a copy owned by the calling thread, valid
 *	until its next odpx_mode_get() (the reason may change while the
 *	context lives: a failed monitor start serves direct and says why)
 */
int odpx_mode_get(struct odpx_ctx *ctx, enum odpx_mode *mode,
		  const char **reason);

const char *odpx_mode_str(enum odpx_mode mode);

/* Where max_pinned_bytes came from. */
enum odpx_limit_source {
	ODPX_LIMIT_ATTR = 1,		/* the open attributes */
	ODPX_LIMIT_MEMLOCK,		/* RLIMIT_MEMLOCK */
	ODPX_LIMIT_RAM,			/* 1/8 of physical memory (no finite RLIMIT_MEMLOCK,
					 * or CAP_IPC_LOCK) */
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
 * @caps: comp_mask set to the parts wanted (enum odpx_query_mask); on
 *	return it holds those filled: DEVICE only on the verbs backend,
 *	WATCH only in pin mode once the monitor watches, URING only on the
 *	uring backend.  Other fields are left as they were.
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
