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
 * the address, dma-buf (ibv_reg_dmabuf_mr, or ibv_reg_mr_ex with a file),
 * access bits odpx does not know, and any request odpx refuses (the real
 * call then gives the application libibverbs' own answer).
 *
 * Remote access: odpx grants it over exactly the request's pages.
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
/* ON_DEMAND: odpx decides how the pages are mapped; HUGETLB: a hint */
#define ACC_DROPPED	(ACC_ON_DEMAND | ACC_HUGETLB | ACC_OPTIONAL)

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
};

#define SHADOW_HANDLE UINT32_MAX	/* a shadow's ibv_mr.handle: no kernel object has it */
#define SHADOWS_MAX (1u << 18)	/* live shadow MRs at once; the mapping is reserved lazily */
#define PDS_MAX 256

/*
 * The PD table.  A row is written under table_lock before @pd is stored
 * (release); readers load @pd (acquire) and then read the row.  A row whose
 * PD was deallocated keeps @pd NULL and is reused by a later PD.
 */
struct pd_row {
	_Atomic(struct ibv_pd *) pd;
	struct odpx_ctx *ctx;		/* NULL: odpx_open_verbs() failed, all passes through */
	_Atomic int64_t live;		/* shadows held on this PD */
};

static struct pd_row pds[PDS_MAX];
static _Atomic uint32_t npds;
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;

/* @arena is set once and @arena_top only grows, under arena_lock; shadow_of() reads both without */
static struct shadow *_Atomic arena;
static _Atomic uint32_t arena_top;
static uint32_t free_head = UINT32_MAX;
static pthread_mutex_t arena_lock = PTHREAD_MUTEX_INITIALIZER;

/* process-wide counts, for ODPX_PRELOAD_VERBOSE (per PD in odpx's stats too) */
static _Atomic uint64_t n_served, n_passed, n_released, n_no_ctx;
/* the counters of contexts closed with their PD, and the first one's mode (table_lock) */
static struct odpx_stats closed;
static unsigned nclosed;
static enum odpx_mode first_mode;
static char first_reason[192];

static __thread unsigned depth __attribute__((tls_model("initial-exec")));

static uint32_t open_flags;
static bool verbose;

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
	v = getenv("ODPX_PRELOAD_UNSAFE_NO_MONITOR");	/* tests only: stale registrations */
	if (v && *v && strcmp(v, "0"))
		open_flags |= ODPX_OPEN_UNSAFE_NO_MONITOR;
	v = getenv("ODPX_PRELOAD_VERBOSE");
	verbose = v && *v && strcmp(v, "0");
}

/* ---- shadows ---- */

static struct shadow *shadow_alloc(void)
{
	struct shadow *s = NULL;

	pthread_mutex_lock(&arena_lock);
	struct shadow *a = atomic_load_explicit(&arena, memory_order_relaxed);
	if (!a) {
		void *p = mmap(NULL, (size_t)SHADOWS_MAX * sizeof(*a), PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (p != MAP_FAILED)
			atomic_store_explicit(&arena, (a = p), memory_order_release);
	}
	uint32_t top = atomic_load_explicit(&arena_top, memory_order_relaxed);
	if (a && free_head != UINT32_MAX) {
		s = &a[free_head];
		free_head = s->next_free;
	} else if (a && top < SHADOWS_MAX) {
		s = &a[top];
		atomic_store_explicit(&arena_top, top + 1, memory_order_release);
	}
	pthread_mutex_unlock(&arena_lock);
	return s;
}

static void shadow_free(struct shadow *s)
{
	pthread_mutex_lock(&arena_lock);
	__atomic_store_n(&s->h, NULL, __ATOMIC_RELAXED);
	s->next_free = free_head;
	free_head = (uint32_t)(s - atomic_load_explicit(&arena, memory_order_relaxed));
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
 * odpx's access bits for @access, or -1 when the request must pass through
 * (a bit odpx cannot honour).
 */
static int odpx_access(unsigned access)
{
	unsigned rest = access & ~(ACC_ODPX | ACC_DROPPED);

	if (rest)
		return -1;	/* MW_BIND, ZERO_BASED, FLUSH_*, unknown */
	return (int)(access & ACC_ODPX);
}

/*
 * A shadow for [addr, addr + len) on @pd, or NULL: then the caller passes
 * the request to libibverbs.  @r: the PD's row, filled.
 */
static struct ibv_mr *serve(struct ibv_pd *pd, void *addr, size_t len, unsigned access,
			    struct pd_row **r)
{
	int acc = odpx_access(access);
	struct shadow *s;
	struct odpx_mr *h;

	*r = pd ? row_get(pd) : NULL;
	if (acc < 0 || !*r || !(*r)->ctx)
		return NULL;
	if (odpx_reg((*r)->ctx, addr, len, (uint32_t)acc, &h) < 0)
		return NULL;
	if (!(s = shadow_alloc())) {
		odpx_dereg((*r)->ctx, h);
		return NULL;
	}
	s->mr = (struct ibv_mr){
		.context = pd->context, .pd = pd, .addr = addr, .length = len,
		.handle = SHADOW_HANDLE,	/* ibv_import_mr() refuses it */
		.lkey = odpx_mr_lkey(h), .rkey = odpx_mr_rkey(h),
	};
	s->mr_type = 0;
	s->access = (int)access;
	s->pd_slot = (uint32_t)(*r - pds);
	atomic_fetch_add_explicit(&(*r)->live, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&n_served, 1, memory_order_relaxed);
	__atomic_store_n(&s->h, h, __ATOMIC_RELEASE);
	return &s->mr;
}

/* A real MR libibverbs made for the application: counted. */
static struct ibv_mr *passed(struct pd_row *r, struct ibv_mr *mr)
{
	if (!mr)
		return NULL;
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

/* ---- the interposed symbols (preload.map gives each its version) ---- */

EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length,
				       uint64_t iova, unsigned int access)
{
	struct ibv_mr *mr = NULL;
	struct pd_row *r = NULL;

	if (depth)
		return R_REG_MR_IOVA2(pd, addr, length, iova, access);
	depth++;
	if (iova == (uintptr_t)addr)
		mr = serve(pd, addr, length, access, &r);
	if (!mr)
		mr = passed(r ? r : (pd ? row_get(pd) : NULL), R_REG_MR_IOVA2(pd, addr, length, iova, access));
	depth--;
	return mr;
}

EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	struct ibv_mr *mr;
	struct pd_row *r = NULL;

	if (depth)
		return R_REG_MR(pd, addr, length, access);
	depth++;
	mr = serve(pd, addr, length, (unsigned)access, &r);
	if (!mr)
		mr = passed(r, R_REG_MR(pd, addr, length, access));
	depth--;
	return mr;
}

EXPORT struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length,
				      uint64_t iova, int access)
{
	struct ibv_mr *mr = NULL;
	struct pd_row *r = NULL;

	if (depth)
		return R_REG_MR_IOVA(pd, addr, length, iova, access);
	depth++;
	if (iova == (uintptr_t)addr)
		mr = serve(pd, addr, length, (unsigned)access, &r);
	if (!mr)
		mr = passed(r ? r : (pd ? row_get(pd) : NULL), R_REG_MR_IOVA(pd, addr, length, iova, access));
	depth--;
	return mr;
}

/* named by assembler labels: newer verbs.h declare them with types older ones lack */
EXPORT struct ibv_mr *reg_mr_ex(struct ibv_pd *pd, struct mr_init_attr *in) __asm__("ibv_reg_mr_ex");
EXPORT struct ibv_mr *reg_buf_mr(struct ibv_pd *pd, void *buf, void *addr, size_t length,
				 int access) __asm__("ibv_reg_buf_mr");

EXPORT struct ibv_mr *reg_mr_ex(struct ibv_pd *pd, struct mr_init_attr *in)
{
	reg_mr_ex_fn f = R_REG_MR_EX;
	struct ibv_mr *mr = NULL;
	struct pd_row *r = NULL;

	if (!f)
		return missing();
	if (depth)
		return f(pd, in);
	depth++;
	/* an address (plain or ibv_alloc_buf memory), no file, no DMA handle */
	if (in && (in->comp_mask & MASK_ADDR) && !(in->comp_mask & ~(MASK_ADDR | MASK_IOVA | MASK_BUF)) &&
	    (!(in->comp_mask & MASK_IOVA) || in->iova == (uintptr_t)in->addr))
		mr = serve(pd, in->addr, in->length, (unsigned)in->access, &r);
	if (!mr)
		mr = passed(r ? r : (pd ? row_get(pd) : NULL), f(pd, in));
	depth--;
	return mr;
}

EXPORT struct ibv_mr *reg_buf_mr(struct ibv_pd *pd, void *buf, void *addr, size_t length,
				 int access)
{
	reg_buf_mr_fn f = R_REG_BUF_MR;
	struct ibv_mr *mr;
	struct pd_row *r = NULL;

	if (!f)
		return missing();
	if (depth)
		return f(pd, buf, addr, length, access);
	depth++;
	/* ibv_alloc_buf() memory is mapped into the process: served like any other */
	mr = serve(pd, addr, length, (unsigned)access, &r);
	if (!mr)
		mr = passed(r, f(pd, buf, addr, length, access));
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
	mr = passed(pd ? row_get(pd) : NULL, f(pd, offset, length, iova, fd, access));
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
 * A shadow's rereg: the new registration is taken before the old one is
 * released, so a failure leaves the MR as it was (IBV_REREG_MR_ERR_INPUT for
 * what the drop-in would pass through: a real MR cannot replace a shadow).
 */
EXPORT int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr,
			size_t length, int access)
{
	struct shadow *s;
	int ret = IBV_REREG_MR_ERR_INPUT;

	if (depth || !(s = shadow_of(mr)))
		return R_REREG_MR(mr, flags, pd, addr, length, access);
	depth++;
	if (flags & ~IBV_REREG_MR_FLAGS_SUPPORTED) {
		errno = EINVAL;
		goto out;
	}
	if (!(flags & IBV_REREG_MR_CHANGE_PD))
		pd = mr->pd;
	if (!(flags & IBV_REREG_MR_CHANGE_TRANSLATION)) {
		addr = mr->addr;
		length = mr->length;
	}
	if (!(flags & IBV_REREG_MR_CHANGE_ACCESS))
		access = s->access;
	struct pd_row *r;
	struct ibv_mr *n = serve(pd, addr, length, (unsigned)access, &r);
	if (!n) {
		errno = EOPNOTSUPP;
		goto out;
	}
	struct shadow *ns = (struct shadow *)n;
	struct shadow old = *s;
	/* the new registration moves into the application's struct */
	*s = *ns;
	__atomic_store_n(&ns->h, old.h, __ATOMIC_RELAXED);
	ns->pd_slot = old.pd_slot;
	ret = release(ns) ? IBV_REREG_MR_ERR_CMD : 0;
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
		", odp_mrs %" PRIu64 ", passthrough %" PRIu64 " (%" PRIu64 " without a context)\n",
		(int)getpid(), ctxs, ctxs ? odpx_mode_str(mode) : "none", why,
		atomic_load(&n_served), atomic_load(&n_released), sum.hits, sum.misses,
		sum.direct_regs, sum.odp_mrs, atomic_load(&n_passed), atomic_load(&n_no_ctx));
	pthread_mutex_unlock(&table_lock);
	depth--;
}
