// SPDX-License-Identifier: MIT
/*
 * preload.c - libodpx-preload.so: odpx under unmodified verbs programs.
 *
 *   LD_PRELOAD=libodpx-preload.so program     (or odpx-run -- program)
 *
 * The library exports libibverbs' memory-registration calls with their exact
 * symbol versions (preload.map) and answers each one from an odpx context of
 * the protection domain, opened at the PD's first registration in mode auto
 * (ODPX_MODE and the library's other knobs apply).  The caller gets a shadow
 * struct ibv_mr laid out like rdma-core's struct verbs_mr {ibv_mr; mr_type;
 * access}, carrying the request's context, pd, addr and length and the
 * lkey/rkey of the odpx registration that covers it; ibv_dereg_mr() of a
 * shadow releases that registration.  libodpx-preload(7) is the user's page.
 *
 * Passed to libibverbs untouched, and counted in the context's
 * preload_passthrough: IBV_ACCESS_MW_BIND (a memory window needs the
 * provider's own MR behind it), IBV_ACCESS_ZERO_BASED or an iova other than
 * the address, dma-buf (ibv_reg_dmabuf_mr, ibv_reg_mr_ex with a file, an
 * ibv_alloc_buf() buffer backed by one), IBV_ACCESS_HUGETLB (the device
 * decides), IBV_ACCESS_ON_DEMAND on a context that pins (the program asked
 * for ODP: it gets the device's), access bits odpx does not know, and any
 * request odpx refuses (the real call then gives libibverbs' own answer).
 *
 * Keys.  Natively every live MR has keys of its own; odpx's registrations
 * are shared (a cache hit, one ODP chunk).  A registration whose lkey a live
 * shadow already carries is given back, and the request gets a real MR of
 * its own, counted as "own" in the exit line.  A shadow with no remote
 * access carries the rkey of the MR behind it, as the device reports it.
 *
 * Remote access: odpx grants it over exactly the request's pages.
 * Contexts are opened ODPX_OPEN_PROT_CHECK: a program expects a registration
 * of pages mprotect() made read-only to fail, and cannot call
 * odpx_invalidate() (ODPX_CHECK_PROT=0 turns the check off).
 *
 * ODPX_PRELOAD_REMOTE=strict (default) opens contexts with
 * ODPX_OPEN_REMOTE_UNCACHED, so the MR behind a remote-access shadow is
 * deregistered by its ibv_dereg_mr(); =cache lets pin mode keep it cached
 * until evicted or invalidated.
 *
 * Re-entry.  libibverbs calls its own exported functions through its PLT
 * (ibv_reg_mr -> ibv_reg_mr_iova2, ibv_reg_buf_mr -> ibv_reg_mr_ex), and the
 * odpx objects linked in here call ibv_reg_mr/ibv_dereg_mr, which resolve to
 * these wrappers too.  A thread-local depth counts wrappers under way on the
 * thread: a wrapper entered at depth > 0 forwards at once, so each
 * application call is served (and counted) once.  odpx's engine thread may
 * call ibv_dereg_mr at depth 0: on a real MR, which is forwarded.
 *
 * libfabric.  The drop-in also exports fi_fabric (FABRIC_1.1) and fi_fabric2
 * (FABRIC_1.8): a program opens a fabric after fi_getinfo() has initialised
 * libfabric and before any domain opens its registration cache, which is
 * when libfabric takes an imported memory monitor.  The first call imports
 * odpx's (odpx_fabric_monitor_import(), lib/fabric_monitor.c), then
 * forwards.  libfabric is reached through dlvsym() alone; no memory call
 * is intercepted.  Not imported: ODPX_PRELOAD_FABRIC=0, or
 * FI_MR_CACHE_MONITOR set (the user chose a monitor, or none).  The exit
 * line says which.
 *
 * Shadows live in one reserved mapping (an array of struct shadow), so
 * "is this MR ours?" is a range test that never reads a real MR.  The table
 * of PDs is append-only, read without a lock.
 */
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "backend_verbs.h"
#include "internal.h"

#undef ibv_reg_mr
#undef ibv_reg_mr_iova

#define EXPORT __attribute__((visibility("default")))

/* access bits (values of enum ibv_access_flags, some newer than the host's verbs.h) */
#define ACC_ODPX	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
			 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)
#define ACC_ON_DEMAND	(1u << 6)
#define ACC_HUGETLB	(1u << 7)
#define ACC_OPTIONAL	0x3ff00000u	/* IBV_ACCESS_OPTIONAL_RANGE: hints a provider may drop */
/* hints a provider may drop; ON_DEMAND is served only by a context in an ODP mode */
#define ACC_DROPPED	(ACC_ON_DEMAND | ACC_OPTIONAL)

/* struct ibv_mr_init_attr of rdma-core 59+ (ibv_reg_mr_ex), absent from older headers */
struct mr_init_attr {
	size_t length;
	int access;
	uint64_t comp_mask;
	uint64_t iova;
	void *addr;
	int fd;
	uint64_t fd_offset;
	void *dmah;
	void *buf;
};
#define MASK_IOVA	(1u << 0)
#define MASK_ADDR	(1u << 1)
#define MASK_BUF	(1u << 5)	/* ibv_alloc_buf() memory, at addr */

/*
 * struct shadow - what a served registration returns.  @mr, @mr_type and
 * @access sit where rdma-core's struct verbs_mr has them.  @h is the odpx
 * registration (NULL while the slot is free), @pd_slot the PD's row.
 */
struct shadow {
	struct ibv_mr mr;
	uint32_t mr_type;	/* IBV_MR_TYPE_MR (0) */
	int access;
	struct odpx_mr *h;
	uint32_t pd_slot;
	uint32_t next_free;
	uint32_t key_next;	/* the next shadow (+1) in its lkey's chain, 0 ends it */
};

#define SHADOW_HANDLE UINT32_MAX	/* a shadow's ibv_mr.handle: no kernel object has it */
#define SHADOWS_MAX (1u << 18)	/* live shadow MRs at once; the mapping is reserved lazily */
#define PDS_MAX 256
#define KEY_BUCKETS (1u << 14)	/* chains of live shadows by lkey (arena_lock) */

/*
 * The PD table.  A row is written under table_lock before @pd is stored
 * (release); readers load @pd (acquire) and then read the row.  A row whose
 * PD was deallocated keeps @pd NULL and is reused by a later PD.
 */
struct pd_row {
	_Atomic(struct ibv_pd *) pd;
	struct odpx_ctx *ctx;		/* NULL: odpx_open_verbs() failed, all passes through */
	bool odp;			/* @ctx runs an ODP mode: it serves IBV_ACCESS_ON_DEMAND */
	_Atomic int64_t live;		/* shadows held on this PD */
};

static struct pd_row pds[PDS_MAX];
static _Atomic uint32_t npds;
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;

/* @arena is set once and @arena_top only grows, under arena_lock; shadow_of() reads both without */
static struct shadow *_Atomic arena;
static _Atomic uint32_t arena_top;
static uint32_t free_head = UINT32_MAX;
static uint32_t key_head[KEY_BUCKETS];	/* index + 1 of a chain's first shadow, 0: none */
static pthread_mutex_t arena_lock = PTHREAD_MUTEX_INITIALIZER;

/* process-wide counts, for ODPX_PRELOAD_VERBOSE (per PD in odpx's stats too) */
static _Atomic uint64_t n_served, n_passed, n_released, n_no_ctx, n_own;
/* the counters of contexts closed with their PD, and the first one's mode (table_lock) */
static struct odpx_stats closed;
static unsigned nclosed;
static enum odpx_mode first_mode;
static char first_reason[192];

static __thread unsigned depth __attribute__((tls_model("initial-exec")));

static uint32_t open_flags;
static bool verbose;
static bool fabric_off;		/* ODPX_PRELOAD_FABRIC=0 */

/* ---- the real functions ---- */

static void *real(const char *name, const char *version, void *_Atomic *cache)
{
	void *f = atomic_load_explicit(cache, memory_order_acquire);

	if (!f) {
		f = dlvsym(RTLD_NEXT, name, version);
		if (f)
			atomic_store_explicit(cache, f, memory_order_release);
	}
	return f;
}

#define REAL(type, name, version) \
	({ static void *_Atomic c_; (type)real(name, version, &c_); })

typedef struct ibv_mr *(*reg_mr_fn)(struct ibv_pd *, void *, size_t, int);
typedef struct ibv_mr *(*reg_mr_iova_fn)(struct ibv_pd *, void *, size_t, uint64_t, int);
typedef struct ibv_mr *(*reg_mr_iova2_fn)(struct ibv_pd *, void *, size_t, uint64_t, unsigned);
typedef struct ibv_mr *(*reg_mr_ex_fn)(struct ibv_pd *, struct mr_init_attr *);
typedef struct ibv_mr *(*reg_buf_mr_fn)(struct ibv_pd *, void *, void *, size_t, int);
typedef struct ibv_mr *(*reg_dmabuf_mr_fn)(struct ibv_pd *, uint64_t, size_t, uint64_t, int, int);
typedef int (*rereg_mr_fn)(struct ibv_mr *, int, struct ibv_pd *, void *, size_t, int);
typedef int (*dereg_mr_fn)(struct ibv_mr *);
typedef struct ibv_mr *(*import_mr_fn)(struct ibv_pd *, uint32_t);
typedef void (*unimport_mr_fn)(struct ibv_mr *);
typedef int (*dealloc_pd_fn)(struct ibv_pd *);

#define R_REG_MR	REAL(reg_mr_fn, "ibv_reg_mr", "IBVERBS_1.1")
#define R_REG_MR_IOVA	REAL(reg_mr_iova_fn, "ibv_reg_mr_iova", "IBVERBS_1.7")
#define R_REG_MR_IOVA2	REAL(reg_mr_iova2_fn, "ibv_reg_mr_iova2", "IBVERBS_1.8")
#define R_REG_MR_EX	REAL(reg_mr_ex_fn, "ibv_reg_mr_ex", "IBVERBS_1.15")
#define R_REG_BUF_MR	REAL(reg_buf_mr_fn, "ibv_reg_buf_mr", "IBVERBS_1.17")
#define R_REG_DMABUF_MR	REAL(reg_dmabuf_mr_fn, "ibv_reg_dmabuf_mr", "IBVERBS_1.12")
#define R_REREG_MR	REAL(rereg_mr_fn, "ibv_rereg_mr", "IBVERBS_1.1")
#define R_DEREG_MR	REAL(dereg_mr_fn, "ibv_dereg_mr", "IBVERBS_1.1")
#define R_IMPORT_MR	REAL(import_mr_fn, "ibv_import_mr", "IBVERBS_1.10")
#define R_UNIMPORT_MR	REAL(unimport_mr_fn, "ibv_unimport_mr", "IBVERBS_1.10")
#define R_DEALLOC_PD	REAL(dealloc_pd_fn, "ibv_dealloc_pd", "IBVERBS_1.1")

/* A symbol this libibverbs lacks: no program linked against it can call us for it. */
static struct ibv_mr *missing(void)
{
	errno = EOPNOTSUPP;
	return NULL;
}

/* ---- configuration ---- */

__attribute__((constructor)) static void preload_init(void)
{
	const char *v = getenv("ODPX_PRELOAD_REMOTE");

	if (!v || !*v || !strcmp(v, "strict"))
		open_flags |= ODPX_OPEN_REMOTE_UNCACHED;
	else if (strcmp(v, "cache"))
		fprintf(stderr, "libodpx-preload: ODPX_PRELOAD_REMOTE=%s is neither strict nor "
			"cache; using strict\n", v), open_flags |= ODPX_OPEN_REMOTE_UNCACHED;
	/* native semantics: a registration of pages mprotect() made read-only fails */
	open_flags |= ODPX_OPEN_PROT_CHECK;
	v = getenv("ODPX_PRELOAD_UNSAFE_NO_MONITOR");	/* tests only: stale registrations */
	if (v && *v && strcmp(v, "0"))
		open_flags |= ODPX_OPEN_UNSAFE_NO_MONITOR;
	v = getenv("ODPX_PRELOAD_VERBOSE");
	verbose = v && *v && strcmp(v, "0");
	v = getenv("ODPX_PRELOAD_FABRIC");
	fabric_off = v && !strcmp(v, "0");
}

/* ---- libfabric: odpx's monitor imported at the first fabric ---- */

struct fid;
struct fi_fabric_attr;
typedef int (*fi_open_fn)(uint32_t, const char *, void *, size_t, uint64_t, struct fid **, void *);
typedef int (*fi_fabric_fn)(struct fi_fabric_attr *, struct fid **, void *);
typedef int (*fi_fabric2_fn)(void *, struct fid **, uint64_t, void *);
/* the fid's first fields, as rdma/fabric.h lays them out (fclass, context, ops) */
struct fid_head {
	size_t fclass;
	void *context;
	struct { size_t size; int (*close)(struct fid *); } *ops;
};
#define FI_VERSION_1_13 ((1u << 16) | 13u)

static pthread_once_t fabric_once = PTHREAD_ONCE_INIT;
static char fabric_state[96] = "not imported (no fabric opened)";

static void fabric_import(void)
{
	fi_open_fn op = (fi_open_fn)dlvsym(RTLD_NEXT, "fi_open", "FABRIC_1.5");
	const char *m = getenv("FI_MR_CACHE_MONITOR");
	struct fid *c;
	int r;

	if (fabric_off) {
		snprintf(fabric_state, sizeof(fabric_state), "off (ODPX_PRELOAD_FABRIC=0)");
		return;
	}
	if (m && *m) {
		snprintf(fabric_state, sizeof(fabric_state), "not imported (FI_MR_CACHE_MONITOR=%.40s)", m);
		return;
	}
	if (!op) {
		snprintf(fabric_state, sizeof(fabric_state), "not imported (libfabric has no fi_open)");
		return;
	}
	if ((r = op(FI_VERSION_1_13, "mr_cache", NULL, 0, 0, &c, NULL)) != 0) {
		snprintf(fabric_state, sizeof(fabric_state), "not imported (fi_open mr_cache: %s)",
			 strerror(r < 0 ? -r : r));
		return;
	}
	r = odpx_fabric_monitor_import(c, 0);
	((struct fid_head *)c)->ops->close(c);
	if (r == 0)
		snprintf(fabric_state, sizeof(fabric_state), "imported");
	else
		snprintf(fabric_state, sizeof(fabric_state), "not imported (%s)", strerror(-r));
}

EXPORT int fi_fabric(struct fi_fabric_attr *attr, struct fid **fabric, void *context)
{
	fi_fabric_fn f = REAL(fi_fabric_fn, "fi_fabric", "FABRIC_1.1");

	pthread_once(&fabric_once, fabric_import);
	return f ? f(attr, fabric, context) : -ENOSYS;
}

EXPORT int fi_fabric2(void *info, struct fid **fabric, uint64_t flags, void *context)
{
	fi_fabric2_fn f = REAL(fi_fabric2_fn, "fi_fabric2", "FABRIC_1.8");

	pthread_once(&fabric_once, fabric_import);
	return f ? f(info, fabric, flags, context) : -ENOSYS;
}

/* ---- shadows ---- */

/*
 * The arena, reserved at the first shadow (arena_lock).  Live shadows are
 * also chained by lkey from key_head[], so that no two carry the same one.
 */
static struct shadow *arena_locked(void)
{
	struct shadow *a = atomic_load_explicit(&arena, memory_order_relaxed);

	if (!a) {
		void *p = mmap(NULL, (size_t)SHADOWS_MAX * sizeof(*a), PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (p != MAP_FAILED)
			atomic_store_explicit(&arena, (a = p), memory_order_release);
	}
	return a;
}

static uint32_t *key_chain(uint32_t lkey)
{
	return &key_head[(lkey * 2654435761u) >> (32 - __builtin_ctz(KEY_BUCKETS))];
}

/* A live shadow other than @except that carries @lkey (arena_lock). */
static bool key_taken(struct shadow *a, uint32_t lkey, const struct shadow *except)
{
	for (uint32_t i = *key_chain(lkey); i; i = a[i - 1].key_next)
		if (a[i - 1].mr.lkey == lkey && &a[i - 1] != except)
			return true;
	return false;
}

static void key_link(struct shadow *a, struct shadow *s)
{
	uint32_t *head = key_chain(s->mr.lkey);

	s->key_next = *head;
	*head = (uint32_t)(s - a) + 1;
}

static void key_unlink(struct shadow *a, struct shadow *s)
{
	uint32_t *p = key_chain(s->mr.lkey), me = (uint32_t)(s - a) + 1;

	while (*p != me)
		p = &a[*p - 1].key_next;
	*p = s->key_next;
}

/* A free slot (arena_lock), or NULL when SHADOWS_MAX are live. */
static struct shadow *slot_take(struct shadow *a)
{
	uint32_t top = atomic_load_explicit(&arena_top, memory_order_relaxed);
	struct shadow *s = NULL;

	if (free_head != UINT32_MAX) {
		s = &a[free_head];
		free_head = s->next_free;
	} else if (top < SHADOWS_MAX) {
		s = &a[top];
		atomic_store_explicit(&arena_top, top + 1, memory_order_release);
	}
	return s;
}

static void shadow_free(struct shadow *s)
{
	pthread_mutex_lock(&arena_lock);
	struct shadow *a = atomic_load_explicit(&arena, memory_order_relaxed);
	key_unlink(a, s);
	__atomic_store_n(&s->h, NULL, __ATOMIC_RELAXED);
	s->next_free = free_head;
	free_head = (uint32_t)(s - a);
	pthread_mutex_unlock(&arena_lock);
}

/* A shadow of ours that is held, or NULL (a real MR, or a freed shadow). */
static struct shadow *shadow_of(struct ibv_mr *mr)
{
	struct shadow *a = atomic_load_explicit(&arena, memory_order_acquire);
	uintptr_t off = (uintptr_t)mr - (uintptr_t)a;

	if (!a || off >= (uintptr_t)atomic_load_explicit(&arena_top, memory_order_acquire) * sizeof(*a) ||
	    off % sizeof(*a))
		return NULL;
	struct shadow *s = (struct shadow *)mr;
	/* pairs with the release store of serve(): the fields behind @h are written */
	return __atomic_load_n(&s->h, __ATOMIC_ACQUIRE) ? s : NULL;
}

/* ---- PDs ---- */

static struct pd_row *row_find(struct ibv_pd *pd)
{
	uint32_t n = atomic_load_explicit(&npds, memory_order_acquire);

	for (uint32_t i = 0; i < n; i++)
		if (atomic_load_explicit(&pds[i].pd, memory_order_acquire) == pd)
			return &pds[i];
	return NULL;
}

/* The PD's row, its context opened on first use; NULL when the table is full. */
static struct pd_row *row_get(struct ibv_pd *pd)
{
	struct pd_row *r = row_find(pd);
	struct odpx_attr attr = { .comp_mask = ODPX_ATTR_FLAGS, .flags = open_flags };

	if (r)
		return r;
	pthread_mutex_lock(&table_lock);
	if ((r = row_find(pd)))
		goto out;
	uint32_t n = atomic_load_explicit(&npds, memory_order_relaxed), i;
	for (i = 0; i < n && atomic_load_explicit(&pds[i].pd, memory_order_relaxed); i++)
		;
	if (i == PDS_MAX)
		goto out;
	r = &pds[i];
	int err = odpx_open_verbs(pd, &attr, &r->ctx);
	if (err < 0) {
		r->ctx = NULL;
		fprintf(stderr, "libodpx-preload: no odpx context on PD %p (%s: %s): its "
			"registrations pass through\n", (void *)pd, strerror(-err),
			odpx_last_reason());
	}
	r->odp = r->ctx && (r->ctx->mode == ODPX_MODE_EXPLICIT || r->ctx->mode == ODPX_MODE_IMPLICIT);
	atomic_store_explicit(&r->live, 0, memory_order_relaxed);
	atomic_store_explicit(&r->pd, pd, memory_order_release);
	if (i == n)
		atomic_store_explicit(&npds, n + 1, memory_order_release);
out:
	pthread_mutex_unlock(&table_lock);
	return r;
}

/* ---- serving ---- */

/*
 * odpx's access bits for @access on the context of @r, or -1 when the
 * request must pass through: a bit odpx cannot honour, or ODP asked of a
 * context that pins.
 */
static int odpx_access(const struct pd_row *r, unsigned access)
{
	unsigned rest = access & ~(ACC_ODPX | ACC_DROPPED);

	if (rest)
		return -1;	/* MW_BIND, ZERO_BASED, HUGETLB, FLUSH_*, unknown */
	if ((access & ACC_ON_DEMAND) && !r->odp)
		return -1;
	return (int)(access & ACC_ODPX);
}

/*
 * The rkey of the MR behind @h as the device reports it.  odpx reports 0 for
 * a registration without remote access; its MR then grants none either.
 */
static uint32_t device_rkey(struct odpx_ctx *ctx, struct odpx_mr *h)
{
	struct ibv_mr *mr;

	if (odpx_mr_rkey(h))
		return odpx_mr_rkey(h);
	ctx = ctx_of_entry(ctx, mr_entry(h));	/* hybrid: its pinned part's MR */
	mr = vbe_of(ctx)->mr[entry_idx(ctx, mr_entry(h))];
	return mr ? mr->rkey : 0;
}

static void shadow_fill(struct shadow *s, struct pd_row *r, struct ibv_pd *pd, void *addr,
			size_t len, unsigned access, struct odpx_mr *h)
{
	s->mr = (struct ibv_mr){
		.context = pd->context, .pd = pd, .addr = addr, .length = len,
		.handle = SHADOW_HANDLE,	/* ibv_import_mr() refuses it */
		.lkey = odpx_mr_lkey(h), .rkey = device_rkey(r->ctx, h),
	};
	s->mr_type = 0;
	s->access = (int)access;
	s->pd_slot = (uint32_t)(r - pds);
}

/*
 * A shadow for [addr, addr + len) on @pd, or NULL: then the caller passes
 * the request to libibverbs, with *@own set when the registration odpx
 * found has keys a live shadow carries (the caller's MR is then counted as
 * its own).  @r: the PD's row, filled.
 */
static struct ibv_mr *serve(struct ibv_pd *pd, void *addr, size_t len, unsigned access,
			    struct pd_row **r, bool *own)
{
	struct shadow *a, *s = NULL;
	struct odpx_mr *h;
	int acc;

	*own = false;
	*r = pd ? row_get(pd) : NULL;
	if (!*r || !(*r)->ctx || (acc = odpx_access(*r, access)) < 0)
		return NULL;
	if (odpx_reg((*r)->ctx, addr, len, (uint32_t)acc, &h) < 0)
		return NULL;
	pthread_mutex_lock(&arena_lock);
	if ((a = arena_locked())) {
		*own = key_taken(a, odpx_mr_lkey(h), NULL);
		s = *own ? NULL : slot_take(a);
	}
	if (s) {
		shadow_fill(s, *r, pd, addr, len, access, h);
		key_link(a, s);
		atomic_fetch_add_explicit(&(*r)->live, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&n_served, 1, memory_order_relaxed);
		__atomic_store_n(&s->h, h, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&arena_lock);
	if (!s) {
		odpx_dereg((*r)->ctx, h);
		return NULL;
	}
	return &s->mr;
}

/* A real MR libibverbs made for the application: counted (@own: keys of its own, see serve()). */
static struct ibv_mr *passed(struct pd_row *r, bool own, struct ibv_mr *mr)
{
	if (!mr)
		return NULL;
	if (own) {
		atomic_fetch_add_explicit(&n_own, 1, memory_order_relaxed);
		return mr;
	}
	atomic_fetch_add_explicit(&n_passed, 1, memory_order_relaxed);
	if (r && r->ctx)
		odpx_stats_passthrough(r->ctx);
	else
		atomic_fetch_add_explicit(&n_no_ctx, 1, memory_order_relaxed);
	return mr;
}

static int release(struct shadow *s)
{
	struct pd_row *r = &pds[s->pd_slot];
	struct odpx_mr *h = s->h;
	int err = odpx_dereg(r->ctx, h);

	if (err < 0)
		return -err;
	atomic_fetch_sub_explicit(&r->live, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&n_released, 1, memory_order_relaxed);
	shadow_free(s);
	return 0;
}

/*
 * ibv_alloc_buf() memory (rdma-core 64+): libibverbs' ibv_reg_mr_ex() checks
 * the buffer's PD and bounds and registers a dma-buf backed one through its
 * file.  Its struct ibv_buf is private (driver.h, IBVERBS_PRIVATE_<n>); the
 * layout below is the one of the private ABIs named in buf_abi[].  Served
 * only when those checks pass on plain memory: anything else goes to
 * libibverbs, which answers as natively.
 */
struct ibv_buf_abi {
	void *addr;
	size_t size;
	struct ibv_pd *pd;
	int dmabuf_fd;
};

static bool buf_servable(struct ibv_pd *pd, const struct mr_init_attr *in)
{
	static const char *const buf_abi[] = { "IBVERBS_PRIVATE_64", "IBVERBS_PRIVATE_65" };
	static _Atomic int known = -1;
	const struct ibv_buf_abi *b = in->buf;
	int k = atomic_load_explicit(&known, memory_order_relaxed);

	if (k < 0) {
		k = 0;
		for (size_t i = 0; i < sizeof(buf_abi) / sizeof(buf_abi[0]) && !k; i++)
			k = dlvsym(RTLD_NEXT, "_verbs_init_and_alloc_context", buf_abi[i]) != NULL;
		atomic_store_explicit(&known, k, memory_order_relaxed);
	}
	if (!k || !b || b->pd != pd || b->dmabuf_fd != -1 || (uintptr_t)in->addr < (uintptr_t)b->addr)
		return false;
	size_t off = (uintptr_t)in->addr - (uintptr_t)b->addr;
	return off <= b->size && in->length <= b->size - off;
}

/* ibv_rereg_mr()'s answer on this device: the same call on a scratch MR of the PD. */
static int rereg_probe(struct shadow *s, int flags, struct ibv_pd *pd, void *addr, size_t length,
		       int access)
{
	static __attribute__((aligned(4096))) char page[4096];
	struct ibv_mr *p = R_REG_MR(s->mr.pd, page, sizeof(page), s->access);
	int ret, err;

	if (!p)
		return IBV_REREG_MR_ERR_CMD;	/* errno is the device's */
	ret = R_REREG_MR(p, flags, pd, addr, length, access);
	err = errno;
	R_DEREG_MR(p);
	errno = err;
	return ret;
}

/* ---- the interposed symbols (preload.map gives each its version) ---- */

EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length,
				       uint64_t iova, unsigned int access)
{
	struct ibv_mr *mr = NULL;
	struct pd_row *r = NULL;
	bool own = false;

	if (depth)
		return R_REG_MR_IOVA2(pd, addr, length, iova, access);
	depth++;
	if (iova == (uintptr_t)addr)
		mr = serve(pd, addr, length, access, &r, &own);
	if (!mr)
		mr = passed(r ? r : (pd ? row_get(pd) : NULL), own,
			    R_REG_MR_IOVA2(pd, addr, length, iova, access));
	depth--;
	return mr;
}

EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	struct ibv_mr *mr;
	struct pd_row *r = NULL;
	bool own;

	if (depth)
		return R_REG_MR(pd, addr, length, access);
	depth++;
	mr = serve(pd, addr, length, (unsigned)access, &r, &own);
	if (!mr)
		mr = passed(r, own, R_REG_MR(pd, addr, length, access));
	depth--;
	return mr;
}

EXPORT struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length,
				      uint64_t iova, int access)
{
	struct ibv_mr *mr = NULL;
	struct pd_row *r = NULL;
	bool own = false;

	if (depth)
		return R_REG_MR_IOVA(pd, addr, length, iova, access);
	depth++;
	if (iova == (uintptr_t)addr)
		mr = serve(pd, addr, length, (unsigned)access, &r, &own);
	if (!mr)
		mr = passed(r ? r : (pd ? row_get(pd) : NULL), own,
			    R_REG_MR_IOVA(pd, addr, length, iova, access));
	depth--;
	return mr;
}

/* named by assembler labels: newer verbs.h declare them with types older ones lack */
EXPORT struct ibv_mr *reg_mr_ex(struct ibv_pd *pd, struct mr_init_attr *in) __asm__("ibv_reg_mr_ex");
EXPORT struct ibv_mr *reg_buf_mr(struct ibv_pd *pd, void *buf, void *addr, size_t length,
				 int access) __asm__("ibv_reg_buf_mr");

/* Serve @in if it is an address (plain, or ibv_alloc_buf() memory that passes libibverbs' checks). */
static struct ibv_mr *serve_ex(struct ibv_pd *pd, const struct mr_init_attr *in,
			       struct pd_row **r, bool *own)
{
	*r = NULL;
	*own = false;
	if (!in || !(in->comp_mask & MASK_ADDR) ||
	    (in->comp_mask & ~(uint64_t)(MASK_ADDR | MASK_IOVA | MASK_BUF)) ||
	    ((in->comp_mask & MASK_IOVA) && in->iova != (uintptr_t)in->addr) ||
	    ((in->comp_mask & MASK_BUF) && !buf_servable(pd, in)))
		return NULL;
	return serve(pd, in->addr, in->length, (unsigned)in->access, r, own);
}

EXPORT struct ibv_mr *reg_mr_ex(struct ibv_pd *pd, struct mr_init_attr *in)
{
	reg_mr_ex_fn f = R_REG_MR_EX;
	struct ibv_mr *mr;
	struct pd_row *r;
	bool own;

	if (!f)
		return missing();
	if (depth)
		return f(pd, in);
	depth++;
	mr = serve_ex(pd, in, &r, &own);
	if (!mr)
		mr = passed(r ? r : (pd ? row_get(pd) : NULL), own, f(pd, in));
	depth--;
	return mr;
}

EXPORT struct ibv_mr *reg_buf_mr(struct ibv_pd *pd, void *buf, void *addr, size_t length,
				 int access)
{
	struct mr_init_attr in = { .length = length, .access = access, .addr = addr, .buf = buf,
				   .comp_mask = MASK_BUF | MASK_ADDR };
	reg_buf_mr_fn f = R_REG_BUF_MR;
	struct ibv_mr *mr;
	struct pd_row *r;
	bool own;

	if (!f)
		return missing();
	if (depth)
		return f(pd, buf, addr, length, access);
	depth++;
	mr = serve_ex(pd, &in, &r, &own);
	if (!mr)
		mr = passed(r ? r : (pd ? row_get(pd) : NULL), own, f(pd, buf, addr, length, access));
	depth--;
	return mr;
}

EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length,
					uint64_t iova, int fd, int access)
{
	reg_dmabuf_mr_fn f = R_REG_DMABUF_MR;
	struct ibv_mr *mr;

	if (!f)
		return missing();
	if (depth)
		return f(pd, offset, length, iova, fd, access);
	depth++;
	mr = passed(pd ? row_get(pd) : NULL, false, f(pd, offset, length, iova, fd, access));
	depth--;
	return mr;
}

EXPORT int ibv_dereg_mr(struct ibv_mr *mr)
{
	struct shadow *s;
	int err;

	if (depth || !(s = shadow_of(mr)))
		return R_DEREG_MR(mr);
	depth++;
	err = release(s);
	depth--;
	return err;
}

/*
 * A shadow's rereg.  The device answers first: the same call on a scratch
 * MR of the PD, so that a device without rereg (rxe: EOPNOTSUPP) refuses it
 * here too and the MR stays as it was.  Where the device takes it, the new
 * registration is taken before the old one is released, so a failure leaves
 * the MR as it was (IBV_REREG_MR_ERR_INPUT for what the drop-in would pass
 * through: a real MR cannot replace a shadow), and a new translation or PD
 * invalidates the old range in its context first, so that the old keys die
 * with the last registration that holds them.
 */
EXPORT int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr,
			size_t length, int access)
{
	struct shadow *s, old;
	struct odpx_mr *h;
	struct pd_row *r;
	int ret, acc;

	if (depth || !(s = shadow_of(mr)))
		return R_REREG_MR(mr, flags, pd, addr, length, access);
	depth++;
	if ((ret = rereg_probe(s, flags, pd, addr, length, access)))
		goto out;
	ret = IBV_REREG_MR_ERR_INPUT;
	if (!(flags & IBV_REREG_MR_CHANGE_PD))
		pd = mr->pd;
	if (!(flags & IBV_REREG_MR_CHANGE_TRANSLATION)) {
		addr = mr->addr;
		length = mr->length;
	}
	if (!(flags & IBV_REREG_MR_CHANGE_ACCESS))
		access = s->access;
	r = row_get(pd);
	if (!r || !r->ctx || (acc = odpx_access(r, (unsigned)access)) < 0) {
		errno = EOPNOTSUPP;
		goto out;
	}
	if (flags & (IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD))
		odpx_invalidate(pds[s->pd_slot].ctx, mr->addr, mr->length);
	if ((ret = odpx_reg(r->ctx, addr, length, (uint32_t)acc, &h)) < 0) {
		errno = -ret;
		ret = IBV_REREG_MR_ERR_CMD;
		goto out;
	}
	pthread_mutex_lock(&arena_lock);
	struct shadow *a = atomic_load_explicit(&arena, memory_order_relaxed);
	bool taken = key_taken(a, odpx_mr_lkey(h), s);
	if (!taken) {
		old = *s;
		key_unlink(a, s);
		shadow_fill(s, r, pd, addr, length, (unsigned)access, h);
		key_link(a, s);
		__atomic_store_n(&s->h, h, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&arena_lock);
	if (taken) {	/* another live MR has these keys, and this one must keep its own */
		odpx_dereg(r->ctx, h);
		errno = EBUSY;
		ret = IBV_REREG_MR_ERR_CMD;
		goto out;
	}
	atomic_fetch_add_explicit(&r->live, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&n_served, 1, memory_order_relaxed);
	ret = odpx_dereg(pds[old.pd_slot].ctx, old.h) < 0 ? IBV_REREG_MR_ERR_CMD : 0;
	atomic_fetch_sub_explicit(&pds[old.pd_slot].live, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&n_released, 1, memory_order_relaxed);
out:
	depth--;
	return ret;
}

/* A shadow's handle is refused here, whether or not the provider can import MRs. */
EXPORT struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t mr_handle)
{
	import_mr_fn f = R_IMPORT_MR;

	if (mr_handle == SHADOW_HANDLE) {
		errno = EINVAL;
		return NULL;
	}
	return f ? f(pd, mr_handle) : missing();
}

/* A shadow was never imported: nothing to undo, and libibverbs must not free it. */
EXPORT void ibv_unimport_mr(struct ibv_mr *mr)
{
	unimport_mr_fn f = R_UNIMPORT_MR;

	if (shadow_of(mr)) {
		fprintf(stderr, "libodpx-preload: ibv_unimport_mr() of MR %p, which odpx "
			"registered: ignored\n", (void *)mr);
		return;
	}
	if (f)
		f(mr);
}

/* Add @ctx's counters to those the exit line sums (table_lock). */
static void note_counts(struct odpx_ctx *ctx)
{
	struct odpx_stats st;
	const char *why;

	if (odpx_stats_read(ctx, &st, sizeof(st)) < 0)
		return;
	if (!nclosed++ && odpx_mode_get(ctx, &first_mode, &why) == 0)
		snprintf(first_reason, sizeof(first_reason), "%s", why);
	closed.hits += st.hits;
	closed.misses += st.misses;
	closed.direct_regs += st.direct_regs;
	closed.odp_mrs += st.odp_mrs;
}

/*
 * The PD's context holds MRs on it: closed first, unless the application
 * still holds shadows there (then EBUSY, as libibverbs answers for a PD with
 * MRs).
 */
EXPORT int ibv_dealloc_pd(struct ibv_pd *pd)
{
	struct pd_row *r;

	if (depth || !(r = row_find(pd)))
		return R_DEALLOC_PD(pd);
	depth++;
	pthread_mutex_lock(&table_lock);
	if (atomic_load_explicit(&r->live, memory_order_relaxed) > 0) {
		pthread_mutex_unlock(&table_lock);
		depth--;
		return EBUSY;
	}
	if (r->ctx) {
		note_counts(r->ctx);
		odpx_close(r->ctx);
	}
	r->ctx = NULL;
	atomic_store_explicit(&r->pd, NULL, memory_order_release);
	pthread_mutex_unlock(&table_lock);
	int err = R_DEALLOC_PD(pd);
	depth--;
	return err;
}

/*
 * ODPX_PRELOAD_VERBOSE=1: one line at exit, over the contexts open and those
 * closed with their PD; open ones stay open (odpx_open_verbs()).  "contexts"
 * counts both.
 */
__attribute__((destructor)) static void preload_fini(void)
{
	struct odpx_stats st, sum;
	enum odpx_mode mode = first_mode;
	const char *why = nclosed ? first_reason : "no PD registered through the drop-in";
	unsigned ctxs;

	if (!verbose)
		return;
	depth++;
	pthread_mutex_lock(&table_lock);
	sum = closed;
	ctxs = nclosed;
	for (uint32_t i = 0; i < atomic_load(&npds); i++) {
		if (!atomic_load(&pds[i].pd) || !pds[i].ctx)
			continue;
		if (odpx_stats_read(pds[i].ctx, &st, sizeof(st)) < 0)
			continue;
		if (!ctxs++)
			odpx_mode_get(pds[i].ctx, &mode, &why);
		sum.hits += st.hits;
		sum.misses += st.misses;
		sum.direct_regs += st.direct_regs;
		sum.odp_mrs += st.odp_mrs;
	}
	fprintf(stderr, "libodpx-preload: pid %d: contexts %u, mode %s (%s), served %" PRIu64
		", released %" PRIu64 ", hits %" PRIu64 ", misses %" PRIu64 ", direct %" PRIu64
		", odp_mrs %" PRIu64 ", passthrough %" PRIu64 " (%" PRIu64 " without a context)"
		", own %" PRIu64 ", libfabric monitor %s",
		(int)getpid(), ctxs, ctxs ? odpx_mode_str(mode) : "none", why,
		atomic_load(&n_served), atomic_load(&n_released), sum.hits, sum.misses,
		sum.direct_regs, sum.odp_mrs, atomic_load(&n_passed), atomic_load(&n_no_ctx),
		atomic_load(&n_own), fabric_state);
	struct odpx_fabric_stats fs = { 0 };
	if (odpx_fabric_monitor_stats(&fs) == 0 && (fs.imported || fs.subscribes))
		fprintf(stderr, " (subscribes %" PRIu64 ", refused %" PRIu64 ", invalidated %" PRIu64
			", notifies %" PRIu64 ", invalid %" PRIu64 ", live %" PRIu64 ")",
			fs.subscribes, fs.refused, fs.invalidated, fs.notifies, fs.invalid_answers,
			fs.subscriptions);
	fputc('\n', stderr);
	pthread_mutex_unlock(&table_lock);
	depth--;
}
