// SPDX-License-Identifier: MIT
/*
 * publish.c - the writer of the stats segment (segment.h) and the library's
 * thrash detector, run on the engine's tick.
 *
 * Where no memfd can be made (the descriptor limit) the segment is private
 * memory odpstat cannot see: the statistics never fail an open that could
 * work.  A fork child's copy becomes private zeroes (stats_atfork_child()).
 *
 * Detector (engine thread only): once per cfg.window_ms the increases of
 * the cache's counters (and, in the ODP modes, of the device's and the
 * memory's) go through thrash_step(); a change of state is published in
 * the header and given to the open's callback.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "segment.h"
#include "../sysfs-stats/counters.h"	/* the detector, the device sources */
#ifdef ODPX_HAVE_VERBS
#include "backend_verbs.h"		/* the device of the context's PD */
#endif

struct seg_priv {
	struct thrash t;
	struct odpx_stats prev;
	uint64_t win_start_ns;
	bool have_prev;
	bool dev_inputs;		/* ODP mode: read the device's files too */
	/* per-MR ODP statistics over netlink: absent for good once our MRs carry none (rxe) */
	enum { NL_MR_UNKNOWN, NL_MR_PRESENT, NL_MR_ABSENT } nl_mr;
	struct ctr_set *dev_prev, *dev_cur;	/* in sets[] */
	struct ctr_set sets[2];
	struct stats_roots roots;
	odpx_thrash_cb cb;
	void *cb_arg;
	int fd;				/* the memfd, -1 if private; closed in a fork child */
	void *map;			/* the segment, mapped shared from fd */
	struct seg_priv *next;		/* on seg_list */
};

static _Atomic uint32_t seg_next;

/*
 * The segments that hold a descriptor, for fork's child handler.  A leaf
 * lock, held from a descriptor's creation to its entry on the list and by
 * fork's prepare handler: a child finds every descriptor it inherits.
 */
static pthread_mutex_t seg_list_lock = PTHREAD_MUTEX_INITIALIZER;
static struct seg_priv *seg_list;

void seg_header_init(struct seg_hdr *h, pid_t pid, unsigned n)
{
	h->version = ODPX_SHM_VERSION;
	h->pid = pid;
	h->n = n;
	h->born_ns = odpx_now_ns();
}

#ifndef MFD_NOEXEC_SEAL
#define MFD_NOEXEC_SEAL 0x0008U		/* linux/memfd.h, since 6.3 */
#endif

/*
 * The segment: a memfd, allocated (a full memory cgroup fails here, not
 * with SIGBUS at a first store), mapped shared; else private memory.
 * seg_list_lock held.
 */
static void *seg_map(struct odpx_ctx *ctx, pid_t pid, unsigned n, struct seg_priv *pv)
{
	struct seg_hdr *h;
	void *p = MAP_FAILED;
	char name[64];
	int fd;

	snprintf(name, sizeof(name), ODPX_SHM_PREFIX "%d.%u", (int)pid, n);
	fd = memfd_create(name, MFD_CLOEXEC | MFD_NOEXEC_SEAL);
	if (fd < 0 && errno == EINVAL)
		fd = memfd_create(name, MFD_CLOEXEC);	/* a kernel without MFD_NOEXEC_SEAL */
	if (fd >= 0 && fchmod(fd, 0600) == 0 && ftruncate(fd, SEG_BYTES) == 0 &&
	    posix_fallocate(fd, 0, SEG_BYTES) == 0)
		p = mmap(NULL, SEG_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED && fd >= 0) {
		close(fd);
		fd = -1;
	}
	if (p == MAP_FAILED)
		p = mmap(NULL, SEG_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	pv->fd = fd;
	h = p;
	seg_header_init(h, pid, n);
	h->mode = ctx->mode;
	h->backend = ctx->be->id;
	h->flags = ctx->flags;
	h->max_pinned_bytes = ctx->lim.max_pinned_bytes;
	h->max_entries = ctx->lim.max_entries;
	h->max_unused_bytes = ctx->lim.max_unused_bytes;
	h->max_entry_bytes = ctx->lim.max_entry_bytes;
	h->lim_source = ctx->lim_source;
	h->idle_ms = ctx->idle_ms;
	seg_header_publish(h);	/* whole: magic last */
	return h;
}

int stats_seg_open(struct odpx_ctx *ctx, const struct odpx_attr *attr)
{
	struct seg_priv *pv = calloc(1, sizeof(*pv));
	pid_t pid = getpid();
	unsigned n = atomic_fetch_add_explicit(&seg_next, 1, RLX);
	char *p;

	if (!pv)
		return -ENOMEM;
	pthread_mutex_lock(&seg_list_lock);
	if (!(p = seg_map(ctx, pid, n, pv))) {
		pthread_mutex_unlock(&seg_list_lock);
		free(pv);
		return -ENOMEM;
	}
	pv->map = p;
	pv->next = seg_list;
	seg_list = pv;
	pthread_mutex_unlock(&seg_list_lock);

	ctx->stats_priv = pv;
	if (attr && (attr->comp_mask & ODPX_ATTR_THRASH_CB)) {
		pv->cb = attr->thrash_cb;
		pv->cb_arg = attr->thrash_arg;
	}
	pv->dev_prev = &pv->sets[0];
	pv->dev_cur = &pv->sets[1];
	ctr_set_init(pv->dev_prev);
	ctr_set_init(pv->dev_cur);
	thrash_env(&pv->t.cfg);	/* the open checked it */
	thrash_init(&pv->t, &pv->t.cfg);
	pv->dev_inputs = ctx->mode == ODPX_MODE_IMPLICIT || ctx->mode == ODPX_MODE_EXPLICIT ||
			 ctx->mode == ODPX_MODE_HYBRID;
	if (pv->dev_inputs)
		stats_roots_init(&pv->roots, NULL, NULL, NULL);
	/* as odpstat: no netlink beside a sysfs of fixtures, nor under ODPX_NO_NETLINK */
	if (!pv->dev_inputs || !pv->roots.sys_default || getenv("ODPX_NO_NETLINK"))
		pv->nl_mr = NL_MR_ABSENT;

	ctx->stats_region = p;
	ctx->shards = (struct stat_shard *)(p + SEG_HDR_BYTES);
	ctx->cs = (struct cold_stats *)(p + SEG_COLD_OFF);
	return 0;
}

void stats_seg_close(struct odpx_ctx *ctx)
{
	struct seg_hdr *h = ctx->stats_region;
	struct seg_priv *pv = ctx->stats_priv, **pp;

	if (!pv)
		return;	/* an open that failed before the segment */
	/* a child after fork holds private zeroes there */
	if (h->pid == getpid()) {
		atomic_store_explicit(&h->magic, 0, REL);
		ctr_set_free(pv->dev_prev);
		ctr_set_free(pv->dev_cur);
	}
	pthread_mutex_lock(&seg_list_lock);
	for (pp = &seg_list; *pp; pp = &(*pp)->next)
		if (*pp == pv) {
			*pp = pv->next;
			break;
		}
	if (pv->fd >= 0)
		close(pv->fd);
	pthread_mutex_unlock(&seg_list_lock);
	munmap(ctx->stats_region, SEG_BYTES);
	free(pv);
	ctx->stats_priv = ctx->stats_region = NULL;
}

void stats_atfork_prepare(void)
{
	pthread_mutex_lock(&seg_list_lock);
}

void stats_atfork_parent(void)
{
	pthread_mutex_unlock(&seg_list_lock);
}

/* The child's copies close; the mappings become private zeroes until odpx_close(). */
void stats_atfork_child(void)
{
	for (struct seg_priv *pv = seg_list; pv; pv = pv->next) {
		if (pv->fd < 0)
			continue;
		mmap(pv->map, SEG_BYTES, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
		close(pv->fd);
		pv->fd = -1;
	}
	pthread_mutex_unlock(&seg_list_lock);	/* ours: the one thread here took it */
}

_Static_assert(sizeof(((struct seg_hdr *)0)->reason) == sizeof(((struct odpx_ctx *)0)->reason),
	       "the segment holds the context's reason whole");

/* After each change of ctx->reason; reason_lock: one writer, the latest text last. */
void stats_seg_reason(struct odpx_ctx *ctx)
{
	struct seg_hdr *h = ctx->stats_region;
	uint32_t seq;

	pthread_mutex_lock(&ctx->reason_lock);
	seq = LD(h->reason_seq);
	ST(h->reason_seq, seq + 1);
	atomic_thread_fence(REL);	/* odd before the text */
	memcpy(h->reason, ctx->reason, sizeof(h->reason));
	atomic_store_explicit(&h->reason_seq, seq + 2, REL);
	pthread_mutex_unlock(&ctx->reason_lock);
}

#define PUT(f, v) ST(h->f, (v))

void stats_gauges_publish(struct odpx_ctx *ctx)
{
	struct seg_hdr *h = ctx->stats_region;

	/* on the miss path: two plain stores (the reason is published as it changes) */
	PUT(entries, ctx->nentries);
	PUT(pinned_bytes, ctx->pinned_bytes);
}

void stats_seg_read_extra(struct odpx_ctx *ctx, struct odpx_stats *st)
{
	struct seg_hdr *h = ctx->stats_region;

	PUT(entries, st->entries);
	PUT(pinned_bytes, st->pinned_bytes);
	PUT(watch_vmas, st->watch_vmas);
	PUT(watch_regs, st->watch_regs);
	st->thrash_state = LD(h->thrash_state);
	st->thrash_metric = LD(h->thrash_metric);
	st->thrash_value_milli = LD(h->thrash_value_milli);
	st->thrash_changes = LD(h->thrash_changes);
}

/*
 * The per-MR ODP statistics of this process's MRs on the context's device
 * (nl_pid_mr_stats: the kernel tells MRs apart by process, not context).
 */
static void sample_nl_mr(struct odpx_ctx *ctx, struct seg_priv *pv)
{
#ifdef ODPX_HAVE_VERBS
	unsigned listed;
	int r;

	if (pv->nl_mr == NL_MR_ABSENT || ctx->be->id != ODPX_BACKEND_VERBS || !vbe_of(ctx) ||
	    !vbe_of(ctx)->pd)
		return;
	r = nl_pid_mr_stats(ibv_get_device_name(vbe_of(ctx)->pd->context->device), getpid(),
			    pv->dev_cur, NULL, &listed);
	if (r > 0)
		pv->nl_mr = NL_MR_PRESENT;
	else if ((r == 0 && listed) || r == -EPROTONOSUPPORT || r == -ENODEV)
		pv->nl_mr = NL_MR_ABSENT;
#else
	(void)ctx;
	pv->nl_mr = NL_MR_ABSENT;
#endif
}

/*
 * The device's own fault/invalidation counters (ODP modes), and while a
 * thrash callback is set its per-MR statistics and the memory's: the
 * process's memory cgroup, else the system's.
 */
static void sample_device(struct odpx_ctx *ctx, struct seg_priv *pv)
{
	struct ctr_set *t;

	ctr_set_clear(pv->dev_cur);
	src_uverbs_read(&pv->roots, NULL, pv->dev_cur);
	if (pv->cb)
		sample_nl_mr(ctx, pv);
	/* hybrid acts on THRASH (backend_verbs.c:hybrid_reg()): it reads the memory always */
	if ((pv->cb || ctx->mode == ODPX_MODE_HYBRID) &&
	    src_memcg_read(&pv->roots, 0, pv->dev_cur) <= 0)
		src_vmstat_read(&pv->roots, pv->dev_cur);
	t = pv->dev_prev;
	pv->dev_prev = pv->dev_cur;
	pv->dev_cur = t;
}

void stats_seg_tick(struct odpx_ctx *ctx)
{
	struct seg_hdr *h = ctx->stats_region;
	struct seg_priv *pv = ctx->stats_priv;
	struct odpx_stats st;
	struct thrash_in in = { 0 };
	enum odpx_thrash_state was;
	uint64_t now = odpx_now_ns();

	/* once per window: the read takes ctx->lock and the invalidation lock */
	if (pv->have_prev && now - pv->win_start_ns < (uint64_t)pv->t.cfg.window_ms * 1000000ULL)
		return;
	/* gauges, the unused bytes and the watch counts included */
	if (odpx_stats_read(ctx, &st, sizeof(st)) < 0)
		return;
	if (pv->dev_inputs)
		sample_device(ctx, pv);	/* dev_prev is now the new sample, dev_cur the old */
	if (!pv->have_prev) {
		pv->prev = st;
		pv->win_start_ns = now;
		pv->have_prev = true;
		return;
	}
	in.secs = (double)(now - pv->win_start_ns) / 1e9;
	in.have_pin = ctx->cache_enabled;
	in.misses = ctr_delta(pv->prev.misses, st.misses);
	in.evictions = ctr_delta(pv->prev.evictions, st.evictions);
	in.evict_remiss = ctr_delta(pv->prev.evict_remiss, st.evict_remiss);
	in.have_evict_remiss = true;
	in.repins = ctr_delta(pv->prev.repins, st.repins);
	in.invals = ctr_delta(pv->prev.inval_entries, st.inval_entries);
	if (pv->dev_inputs) {
		thrash_dev_inputs(pv->dev_cur, pv->dev_prev, &in);
		thrash_mem_inputs(pv->dev_cur, pv->dev_prev, &in);
	}
	was = pv->t.state;
	bool changed = thrash_step(&pv->t, &in);
	pv->prev = st;
	pv->win_start_ns = now;
	PUT(thrash_state, pv->t.state);
	PUT(thrash_metric, pv->t.metric);
	PUT(thrash_value_milli, pv->t.value > 0 ? (uint64_t)(pv->t.value * 1000.0) : 0);
	PUT(thrash_changes, pv->t.changes);
	if (changed && pv->cb) {
		struct odpx_thrash_event ev = {
			.state = pv->t.state, .prev = was,
			.metric = pv->t.metric, .value = pv->t.value,
		};
		pv->cb(ctx, &ev, pv->cb_arg);
	}
}
