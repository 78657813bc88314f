// SPDX-License-Identifier: MIT
/*
 * odpstat.c - report ODP, registration-cache and paging activity (odpstat(1)).
 * Every interval: sample every source (counters.h), turn increases into
 * rates, run the thrash detector over the interval, print one vmstat-like
 * line (the header again every screenful) or one JSON object (NDJSON).
 * The tool's code is odpstat_main, not part of libodpx: the device tests
 * link it (build/libodpstat-internal.a) to run it inside the guest.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "config.h"	/* ODPX_HAVE_VERBS */
#include "counters.h"

#ifdef ODPX_HAVE_VERBS
#include <infiniband/verbs.h>
#endif

static const struct {
	const char *name;
	size_t off;
	bool gauge;
} stat_fields[] = {
#define F(f) { #f, offsetof(struct odpx_stats, f), false }
#define G(f) { #f, offsetof(struct odpx_stats, f), true }
	F(hits), F(misses), F(hits_slow), F(deregs), G(entries), G(pinned_bytes),
	G(unused_bytes), F(pins), F(unpins), F(pin_failures), F(evictions),
	F(enomem_retries), F(merges), F(superseded), F(miss_retries), F(repins),
	F(inval_unmap), F(inval_remove), F(inval_remap), F(inval_api), F(inval_entries), F(inval_bytes),
	F(dead_unpinned), G(watch_vmas), F(watch_regs), F(direct_regs), F(direct_shared),
	F(direct_unwatchable), F(direct_budget), F(direct_no_monitor), F(direct_racing),
	F(prefetch_queued), F(prefetch_merged), F(prefetch_dropped), F(prefetch_issued),
	F(prefetch_failed), F(engine_wakeups), F(engine_ticks), F(engine_lingers), G(unsafe_no_monitor),
	G(thrash_state), G(thrash_metric), G(thrash_value_milli), F(thrash_changes),
	F(odp_mrs), F(odp_fallbacks), F(prefetch_sges), G(prefetch_errno), G(global_rkey),
	F(direct_no_engine), F(evict_remiss), F(try_again), F(idle_released), F(prereg_repins),
	F(repin_fresh), F(preload_passthrough), F(memcg_refusals), F(memcg_released),
	F(memcg_pressure), F(hybrid_pinned), F(hybrid_odp), F(hybrid_to_pin), F(hybrid_released),
	G(odp_bytes),
#undef F
#undef G
};

/*
 * One sample.  Each source is timed where it is read (the netlink queries
 * take up to 2 s each): @t before the files (sysfs, debugfs, procfs),
 * @nl.t_port and @nl.t_mr at the netlink replies, @t_odpx before the
 * segments.  A rate divides by the time between two samples' reads of its
 * source (src_secs).
 */
struct sample {
	double t, t_odpx;
	struct ctr_set c;
	struct nl_result nl;
	struct odpx_seg_info *seg;	/* grown to hold every context found */
	int nseg;
	size_t cap;
};

struct opts {
	const char *dev;
	pid_t pid;
	bool json, once, netlink, stamp;
	double interval;
	long count;
	uint64_t pid_start;		/* -p: its start time at the first sample, 0 unknown */
	const char *record, *replay;
	struct stats_roots roots;
	struct thrash_cfg cfg;
};

static const char *prog = "odpstat";

__attribute__((format(printf, 1, 2)))
static int die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return 1;
}

/* @b exactly, in the largest binary unit that divides it */
static const char *bytes_str(uint64_t b, char *buf, size_t len)
{
	static const char *const unit[] = { "bytes", "KiB", "MiB", "GiB", "TiB" };
	unsigned u = 0;

	while (u < 4 && b && !(b % 1024)) {
		b /= 1024;
		u++;
	}
	snprintf(buf, len, "%" PRIu64 " %s", b, unit[u]);
	return buf;
}

/* enum odpx_limit_source, as odpstat prints it */
static const char *limit_source_str(uint32_t s)
{
	return s == ODPX_LIMIT_ATTR ? "attributes" : s == ODPX_LIMIT_MEMLOCK ? "RLIMIT_MEMLOCK" :
	       s == ODPX_LIMIT_RAM ? "1/8 of RAM" : "unknown";
}

static const char *backend_str(enum odpx_backend b)
{
	return b == ODPX_BACKEND_URING ? "uring" : b == ODPX_BACKEND_VERBS ? "verbs" : "?";
}

/* ---- device capabilities ---- */

int devcaps_query(const char *dev, struct devcaps **out,
		  void (*fn)(struct ibv_context *c, const struct devcaps *d))
{
	struct devcaps *all = NULL;
	int n = 0;
#ifdef ODPX_HAVE_VERBS
	int nd = 0;
	struct ibv_device **list = ibv_get_device_list(&nd);

	if (list && nd > 0 && !(all = calloc((size_t)nd, sizeof(*all))))
		n = -ENOMEM;
	for (int i = 0; all && i < nd; i++) {
		struct devcaps *d = &all[n];
		struct ibv_device_attr_ex ax;
		struct ibv_context *c;
		int r = 0;

		if (dev && strcmp(dev, ibv_get_device_name(list[i])))
			continue;
		snprintf(d->name, sizeof(d->name), "%s", ibv_get_device_name(list[i]));
		n++;
		memset(&ax, 0, sizeof(ax));
		if (!(c = ibv_open_device(list[i])))
			snprintf(d->err, sizeof(d->err), "ibv_open_device: %s", strerror(errno));
		else if ((r = ibv_query_device_ex(c, NULL, &ax)))
			snprintf(d->err, sizeof(d->err), "ibv_query_device_ex: %s", strerror(r));
		d->queried = c && !r;
		d->general = ax.odp_caps.general_caps;
		d->rc = ax.odp_caps.per_transport_caps.rc_odp_caps;
		d->uc = ax.odp_caps.per_transport_caps.uc_odp_caps;
		d->ud = ax.odp_caps.per_transport_caps.ud_odp_caps;
		d->xrc = ax.xrc_odp_caps;
		d->max_mr = (uint64_t)ax.orig_attr.max_mr;
		d->max_mr_size = ax.orig_attr.max_mr_size;
		d->max_pd = (uint64_t)ax.orig_attr.max_pd;
		if (fn)
			fn(c, d);
		if (c)
			ibv_close_device(c);
	}
	if (list)
		ibv_free_device_list(list);
#endif
	if (out)
		*out = all;
	else
		free(all);
	return n;
}

static void transport_bits(char *buf, size_t len, uint32_t v)
{
	static const char *const names[] = { "SEND", "RECV", "WRITE", "READ", "ATOMIC",
					     "SRQ_RECV", "FLUSH", "ATOMIC_WRITE" };
	size_t o = 0;

	buf[0] = 0;
	for (unsigned b = 0; b < 8; b++)
		if (v & (1u << b))
			o += (size_t)snprintf(buf + o, o < len ? len - o : 0, "%s%s", o ? " " : "",
					      names[b]);
	if (!o)
		snprintf(buf, len, "-");
}

/* "rxe0: explicit ODP (rc: SEND RECV ...; ud: ...), no implicit" */
static void caps_line(const struct devcaps *d, char *buf, size_t len)
{
	char rc[96], ud[96], uc[96];

	if (!d->queried) {
		snprintf(buf, len, "%s: capabilities unknown (%s)", d->name, d->err);
		return;
	}
	int n;

	if (!(d->general & 1)) {	/* IBV_ODP_SUPPORT */
		n = snprintf(buf, len, "%s: no ODP (pin mode)", d->name);
	} else {
		transport_bits(rc, sizeof(rc), d->rc);
		transport_bits(ud, sizeof(ud), d->ud);
		transport_bits(uc, sizeof(uc), d->uc);
		n = snprintf(buf, len, "%s: ODP%s (rc: %s; ud: %s; uc: %s)", d->name,
			     d->general & 2 ? " with implicit" : " explicit only, no implicit",
			     rc, ud, uc);
	}
	if (n > 0 && (size_t)n < len)
		snprintf(buf + n, len - (size_t)n, "; max_mr %" PRIu64 ", max_mr_size %" PRIu64
			 ", max_pd %" PRIu64, d->max_mr, d->max_mr_size, d->max_pd);
}

/* ---- sampling ---- */

static void add_seg_counters(struct sample *s)
{
	for (int i = 0; i < s->nseg; i++) {
		char where[48];
		/* born_ns: a context that took a gone one's name (exec) is another */
		snprintf(where, sizeof(where), "%d/%u/%" PRIx64, (int)s->seg[i].pid, s->seg[i].n,
			 s->seg[i].born_ns);
		for (size_t f = 0; f < sizeof(stat_fields) / sizeof(stat_fields[0]); f++)
			ctr_add(&s->c, SRC_ODPX, where, stat_fields[f].name,
				*(const uint64_t *)((const char *)&s->seg[i].st + stat_fields[f].off),
				stat_fields[f].gauge);
	}
}

/* Whether MR @m is one odpstat reports: any, or of the process of -p */
static bool mr_of(const struct opts *o, const struct nl_mr *m)
{
	return !o->pid || (m->has_pid && m->pid == (uint32_t)o->pid);
}

/*
 * 0, 1 when the process of -p ended after the first sample, or -errno (said).
 * A start time other than the first sample's is another process given the
 * PID of the one that ended.
 */
static int take_sample(struct opts *o, struct sample *s, bool first)
{
	uint64_t start;
	int r;

	ctr_set_clear(&s->c);
	nl_result_free(&s->nl);
	s->nl.ctrs = &s->c;
	s->nl.pid = o->pid;	/* the per-MR statistics of its MRs only */
	s->t = ctr_now_s();
	src_uverbs_read(&o->roots, o->dev, &s->c);
	src_debugfs_read(&o->roots, &s->c);
	src_hw_counters_read(&o->roots, o->dev, &s->c);
	src_vmstat_read(&o->roots, &s->c);
	if (o->pid) {
		src_memcg_read(&o->roots, o->pid, &s->c);
		r = src_pid_stat_read(&o->roots, o->pid, &s->c, &start);
		if (first)
			o->pid_start = start;
		else if (r >= 0 && start && o->pid_start && start != o->pid_start)
			r = -ESRCH;
		if (r == -ESRCH && !first) {
			fprintf(stderr, "%s: %d: exited\n", prog, (int)o->pid);
			return 1;
		}
		if (r == -ESRCH)
			return die("%d: no such process", (int)o->pid), -ESRCH;
	}
	if (o->netlink) {
		r = nl_collect(o->dev, &s->nl, first ? o->record : NULL, o->replay);
		if (r < 0 && r != -EPROTONOSUPPORT && r != -ENODEV)
			ctr_error(&s->c, "RDMA netlink: %s", strerror(-r));
		/* port counters through netlink only where sysfs had none (read before: kept) */
		size_t k = 0;
		for (size_t i = 0; i < s->c.n; i++)
			if (s->c.v[i].src != SRC_NL_PORT ||
			    !ctr_find(&s->c, SRC_HW_COUNTERS, s->c.v[i].where, s->c.v[i].name))
				s->c.v[k++] = s->c.v[i];
		s->c.n = k;
		for (size_t i = 0; i < s->nl.nmr; i++) {
			struct nl_mr *m = &s->nl.mr[i];
			char where[64];
			if (!mr_of(o, m))
				continue;
			snprintf(where, sizeof(where), "%.40s/mr%u", m->dev, m->mrn);
			ctr_add(&s->c, SRC_NL_RES_MR, where, "mrlen", m->mrlen, true);
		}
	}
	/* a full array may have left contexts out: grow it and scan again */
	while ((s->t_odpx = ctr_now_s(), r = odpx_seg_scan(o->pid, s->seg, (int)s->cap)) ==
	       (int)s->cap) {
		if (ctr_grow(&s->seg, &s->cap, s->cap + 1, sizeof(*s->seg)) < 0) {
			ctr_error(&s->c, "odpx segments: out of memory: only %zu contexts read",
				  s->cap);
			break;
		}
	}
	if (r < 0) {
		if (o->pid)
			return die("%d: cannot read its odpx statistics: %s", (int)o->pid,
				   strerror(-r)), r;
		s->nseg = 0;
		ctr_error(&s->c, "odpx segments: %s", strerror(-r));
	} else {
		s->nseg = r;
	}
	add_seg_counters(s);
	return 0;
}

/* Increase of every counter of @src whose name contains @part (and not @but). */
static uint64_t inc_match(const struct sample *a, const struct sample *b, enum ctr_source src,
			  const char *part, const char *but)
{
	uint64_t sum = 0;

	for (size_t i = 0; i < b->c.n; i++) {
		const struct ctr *c = &b->c.v[i], *p;
		if (c->src != src || !strstr(c->name, part) || (but && strstr(c->name, but)))
			continue;
		if ((p = ctr_find(&a->c, src, c->where, c->name)))
			sum = ctr_sat_add(sum, ctr_delta(p->value, c->value));
	}
	return sum;
}

/* When @s read the counters of @src */
static double src_time(const struct sample *s, enum ctr_source src)
{
	if (src == SRC_ODPX)
		return s->t_odpx;
	if (src == SRC_NL_PORT && s->nl.t_port)
		return s->nl.t_port;
	return src == SRC_NL_MR && s->nl.t_mr ? s->nl.t_mr : s->t;
}

/* Seconds between two samples' reads of @src (at least 1 us) */
static double src_secs(const struct sample *a, const struct sample *b, enum ctr_source src)
{
	double dt = src_time(b, src) - src_time(a, src);

	return dt > 1e-6 ? dt : 1e-6;
}

/* The rate columns (odpstat(1), COLUMNS): header, width, precision, key under "rates" in JSON */
enum { HIT, MISS, EVICT, INVAL, REPIN, PIN_MB, DFLT, DINV, RETRY, RNR, MINFLT, MAJFLT, RFLT, NCOL };
static const struct {
	const char *head;
	int width, prec;
	const char *key;	/* NULL: rflt/s is "refault_pages" under "memory" */
} cols[NCOL] = {
	{ "hit/s", 8, 0, "hits" }, { "miss/s", 7, 0, "misses" }, { "evict/s", 7, 0, "evictions" },
	{ "inval/s", 7, 0, "invalidations" }, { "repin/s", 7, 0, "repins" },
	{ "pin_MiB", 8, 1, "pinned_mib" }, { "dflt/s", 8, 0, "dev_fault_pages" },
	{ "dinval/s", 8, 0, "dev_inval_pages" }, { "retry/s", 7, 0, "retries" },
	{ "rnr/s", 6, 0, "rnr" }, { "minflt/s", 8, 0, "minflt" }, { "majflt/s", 7, 0, "majflt" },
	{ "rflt/s", 7, 0, NULL },
};

struct row {
	double v[NCOL];
	double hit_ratio;		/* hits / (hits + misses), NAN with neither */
	double mem_majflt;		/* pages/s of the memory the detector reads, as v[RFLT] */
	enum ctr_source mem;		/* its source: SRC_MEMCG, SRC_VMSTAT, SRC_MAX none */
};

static void compute(const struct opts *o, const struct sample *a, const struct sample *b,
		    struct thrash *t, struct row *rw)
{
	double dt_files = src_secs(a, b, SRC_VMSTAT), dt_odpx = src_secs(a, b, SRC_ODPX), dt_dev;
	double dt_port = src_secs(a, b, SRC_NL_PORT);
	const struct ctr_set *p = &a->c, *c = &b->c;
	enum ctr_source faults = o->pid ? SRC_PROC_PID : SRC_VMSTAT;
	struct thrash_in in = { .secs = dt_odpx, .mem_secs = dt_files };
	bool odp = false;

	memset(rw, 0, sizeof(*rw));
	in.misses = ctr_inc_each(p, c, SRC_ODPX, "misses", NULL);
	in.evictions = ctr_inc_each(p, c, SRC_ODPX, "evictions", NULL);
	in.repins = ctr_inc_each(p, c, SRC_ODPX, "repins", NULL);
	in.invals = ctr_inc_each(p, c, SRC_ODPX, "inval_entries", NULL);
	in.evict_remiss = ctr_inc_each(p, c, SRC_ODPX, "evict_remiss", NULL);
	in.have_evict_remiss = true;	/* every segment of this layout counts it */
	for (int i = 0; i < b->nseg; i++) {
		in.have_pin |= b->seg[i].mode == ODPX_MODE_PIN;
		odp |= b->seg[i].mode == ODPX_MODE_IMPLICIT || b->seg[i].mode == ODPX_MODE_EXPLICIT ||
		       b->seg[i].mode == ODPX_MODE_HYBRID;
	}
	in.dev_secs = dt_dev = src_secs(a, b, thrash_dev_inputs(p, c, &in));
	/* the memory side in the ODP modes only, as the library: the device faults what is reclaimed */
	rw->mem = thrash_mem_inputs(p, c, &in);
	in.have_mem &= odp;
	thrash_step(t, &in);

	uint64_t hits = ctr_inc_each(p, c, SRC_ODPX, "hits", NULL);
	rw->hit_ratio = hits + in.misses ? (double)hits / (double)(hits + in.misses) : NAN;
	rw->v[RFLT] = (double)in.mem_refaults / dt_files;
	rw->mem_majflt = (double)in.mem_majfaults / dt_files;
	rw->v[HIT] = (double)hits / dt_odpx;
	rw->v[MISS] = (double)in.misses / dt_odpx;
	rw->v[EVICT] = (double)in.evictions / dt_odpx;
	rw->v[INVAL] = (double)in.invals / dt_odpx;
	rw->v[REPIN] = (double)in.repins / dt_odpx;
	rw->v[PIN_MB] = (double)ctr_sum(c, SRC_ODPX, "pinned_bytes", NULL) / 1048576.0;
	rw->v[DFLT] = (double)in.dev_faults / dt_dev;
	rw->v[DINV] = (double)in.dev_inval / dt_dev;
	rw->v[RETRY] = (double)(inc_match(a, b, SRC_HW_COUNTERS, "retry", "rnr") +
				inc_match(a, b, SRC_HW_COUNTERS, "timeout", "rnr")) / dt_files +
		       (double)(inc_match(a, b, SRC_NL_PORT, "retry", "rnr") +
				inc_match(a, b, SRC_NL_PORT, "timeout", "rnr")) / dt_port;
	rw->v[RNR] = (double)inc_match(a, b, SRC_HW_COUNTERS, "rnr", NULL) / dt_files +
		     (double)inc_match(a, b, SRC_NL_PORT, "rnr", NULL) / dt_port;
	rw->v[MINFLT] = (double)ctr_inc_each(p, c, faults, o->pid ? "minflt" : "pgfault", NULL) /
			dt_files;
	rw->v[MAJFLT] = (double)ctr_inc_each(p, c, faults, o->pid ? "majflt" : "pgmajfault", NULL) /
			dt_files;
}

/* ---- output ---- */

void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

static void json_rate(FILE *f, double v)
{
	if (isfinite(v))
		fprintf(f, "%.3f", v);
	else
		fputs("null", f);
}

/*
 * The MRs of device @dev that odpstat reports (mr_of) the MR dump listed,
 * their bytes, and how many MRs carry per-MR ODP statistics (those of the
 * process of -p only, nl_collect): none of several is a driver without
 * them (rxe), or no ODP MR among them (mlx5 reports ODP MRs only).
 */
struct mr_count {
	unsigned mine, with;
	uint64_t mine_bytes;
};

static struct mr_count mrs_of(const struct opts *o, const struct sample *s, const char *dev)
{
	const struct ctr *g = ctr_find(&s->c, SRC_NL_MR, dev, "mrs");
	struct mr_count n = { .with = g ? (unsigned)g->value : 0 };

	for (size_t i = 0; i < s->nl.nmr; i++) {
		if (!strcmp(s->nl.mr[i].dev, dev) && mr_of(o, &s->nl.mr[i])) {
			n.mine++;
			n.mine_bytes += s->nl.mr[i].mrlen;
		}
	}
	return n;
}

static void print_json(const struct opts *o, const struct sample *a, const struct sample *b,
		       const struct thrash *t, const struct row *rw, const struct devcaps *caps,
		       int ncaps)
{
	FILE *f = stdout;
	double dt = b->t - a->t;
	struct timespec rt;

	clock_gettime(CLOCK_REALTIME, &rt);
	fprintf(f, "{\"time\":%.3f,\"schema\":\"odpstat/2\",\"interval\":%.3f,\"state\":\"%s\","
		"\"metric\":\"%s\",\"value\":", (double)rt.tv_sec + (double)rt.tv_nsec / 1e9, dt,
		thrash_state_str(t->state), thrash_metric_str(t->metric));
	json_rate(f, t->value);
	fputs(",\"hit_ratio\":", f);
	json_rate(f, rw->hit_ratio);
	fprintf(f, ",\"memory\":{\"source\":\"%s\",\"refault_pages\":%.3f,\"majflt\":%.3f}",
		rw->mem == SRC_MAX ? "none" : ctr_source_name(rw->mem), rw->v[RFLT], rw->mem_majflt);
	for (int i = 0; i < NCOL; i++)
		if (cols[i].key)
			fprintf(f, "%s\"%s\":%.3f", i ? "," : ",\"rates\":{", cols[i].key, rw->v[i]);
	fputc('}', f);
	fputs(",\"devices\":[", f);
	for (int i = 0; i < ncaps; i++) {
		char line[512];
		caps_line(&caps[i], line, sizeof(line));
		fprintf(f, "%s{\"name\":", i ? "," : "");
		json_str(f, caps[i].name);
		if (caps[i].queried)
			fprintf(f, ",\"odp\":%s,\"implicit\":%s,\"general_caps\":%" PRIu64
				",\"rc_odp_caps\":%u,\"uc_odp_caps\":%u,\"ud_odp_caps\":%u,\"xrc_odp_caps\":%u"
				",\"max_mr\":%" PRIu64 ",\"max_mr_size\":%" PRIu64 ",\"max_pd\":%" PRIu64,
				caps[i].general & 1 ? "true" : "false",
				caps[i].general & 2 ? "true" : "false", caps[i].general, caps[i].rc,
				caps[i].uc, caps[i].ud, caps[i].xrc, caps[i].max_mr, caps[i].max_mr_size,
				caps[i].max_pd);
		fputs(",\"summary\":", f);
		json_str(f, line);
		fputc('}', f);
	}
	fputs("]", f);
	if (!ncaps)
		fputs(",\"rdma\":\"no RDMA device\"", f);
	fputs(",\"contexts\":[", f);
	for (int i = 0; i < b->nseg; i++) {
		const struct odpx_seg_info *s = &b->seg[i];
		fprintf(f, "%s{\"pid\":%d,\"ctx\":%u,\"mode\":\"%s\",\"backend\":\"%s\",\"reason\":",
			i ? "," : "", (int)s->pid, s->n, odpx_mode_str(s->mode),
			backend_str(s->backend));
		json_str(f, s->reason);
		fprintf(f, ",\"limits\":{\"max_pinned_bytes\":%" PRIu64 ",\"max_pinned_source\":\"%s\","
			"\"max_entries\":%" PRIu64 ",\"max_unused_bytes\":%" PRIu64
			",\"max_entry_bytes\":%" PRIu64 ",\"idle_ms\":%" PRIu32 "}",
			s->lim.max_pinned_bytes, limit_source_str(s->lim_source), s->lim.max_entries,
			s->lim.max_unused_bytes, s->lim.max_entry_bytes, s->idle_ms);
		fprintf(f, ",\"thrash_state\":\"%s\",\"thrash_metric\":\"%s\",\"stats\":{",
			thrash_state_str((enum odpx_thrash_state)s->st.thrash_state),
			thrash_metric_str((enum odpx_thrash_metric)s->st.thrash_metric));
		for (size_t k = 0; k < sizeof(stat_fields) / sizeof(stat_fields[0]); k++)
			fprintf(f, "%s\"%s\":%" PRIu64, k ? "," : "", stat_fields[k].name,
				*(const uint64_t *)((const char *)&s->st + stat_fields[k].off));
		fputs("}}", f);
	}
	fputs("],\"per_mr_stats\":[", f);
	for (size_t d = 0; d < b->nl.ndev; d++) {
		struct mr_count n = mrs_of(o, b, b->nl.dev[d].name);
		fprintf(f, "%s{\"dev\":", d ? "," : "");
		json_str(f, b->nl.dev[d].name);
		fprintf(f, ",\"mrs\":%u,\"with_stats\":%u,\"source\":\"%s\"}", n.mine, n.with,
			n.with ? "present" : n.mine ? "absent" : "unknown");
	}
	fputs("],\"mrs\":[", f);
	int nm = 0;
	for (size_t i = 0; i < b->nl.nmr; i++) {
		const struct nl_mr *m = &b->nl.mr[i];
		if (!mr_of(o, m))
			continue;
		fprintf(f, "%s{\"dev\":", nm++ ? "," : "");
		json_str(f, m->dev);
		fprintf(f, ",\"mrn\":%u,\"mrlen\":%" PRIu64 ",\"pdn\":%u", m->mrn, m->mrlen, m->pdn);
		if (m->has_pid)
			fprintf(f, ",\"pid\":%u", m->pid);
		if (m->has_keys)
			fprintf(f, ",\"lkey\":%u,\"rkey\":%u", m->lkey, m->rkey);
		fputc('}', f);
	}
	fputs("],\"counters\":[", f);
	ptrdiff_t off = 0;	/* ctr_find_near */
	for (size_t i = 0; i < b->c.n; i++) {
		const struct ctr *c = &b->c.v[i];
		const struct ctr *p = ctr_find_near(&a->c, (ptrdiff_t)i + off, c->src, c->where, c->name);
		if (p)
			off = (p - a->c.v) - (ptrdiff_t)i;
		fprintf(f, "%s{\"source\":\"%s\",\"where\":", i ? "," : "", ctr_source_name(c->src));
		json_str(f, c->where);
		fputs(",\"name\":", f);
		json_str(f, c->name);
		fprintf(f, ",\"value\":%" PRIu64 ",\"rate\":", c->value);
		if (c->gauge || !p)
			fputs("null", f);
		else
			json_rate(f, (double)ctr_delta(p->value, c->value) / src_secs(a, b, c->src));
		fputc('}', f);
	}
	fputs("],\"errors\":[", f);
	for (size_t i = 0; i < b->c.nerr; i++) {
		fputs(i ? "," : "", f);
		json_str(f, b->c.err[i].msg);
	}
	fputs("]}\n", f);
	fflush(f);
}

static void print_banner(const struct opts *o, const struct sample *s, const struct devcaps *caps,
			 int ncaps)
{
	char line[512];

	if (!ncaps)
		printf("# no RDMA device\n");
	for (int i = 0; i < ncaps; i++) {
		caps_line(&caps[i], line, sizeof(line));
		printf("# %s\n", line);
	}
	for (size_t d = 0; d < s->nl.ndev; d++) {
		struct mr_count n = mrs_of(o, s, s->nl.dev[d].name);
		if (o->dev && strcmp(o->dev, s->nl.dev[d].name))
			continue;
		printf("# %s: %u MRs%s, %.1f MiB; per-MR ODP statistics (netlink): ", s->nl.dev[d].name,
		       n.mine, o->pid ? " of this PID" : "", (double)n.mine_bytes / 1048576.0);
		if (n.with)
			printf("%u of these %u MRs\n", n.with, n.mine);
		else if (n.mine)
			printf("absent (none of these %u MRs carries any)\n", n.mine);
		else
			printf("unknown (no MR)\n");
	}
	if (!s->nseg)
		printf("# no odpx context%s\n", o->pid ? " in this process" : " of this user");
	for (int i = 0; i < s->nseg; i++) {
		const struct odpx_seg_info *g = &s->seg[i];

		printf("# pid %d ctx %u: mode %s, backend %s%s%s\n", (int)g->pid, g->n,
		       odpx_mode_str(g->mode), backend_str(g->backend),
		       g->reason[0] ? ": " : "", g->reason);
		char pin[32], unused[32], entry[32];

		if (g->lim.max_pinned_bytes)
			printf("# pid %d ctx %u: limits: pinned %s (%s), entries %" PRIu64
			       ", unused %s, entry %s; idle release %s%" PRIu32 "%s\n",
			       (int)g->pid, g->n, bytes_str(g->lim.max_pinned_bytes, pin, sizeof(pin)),
			       limit_source_str(g->lim_source), g->lim.max_entries,
			       bytes_str(g->lim.max_unused_bytes, unused, sizeof(unused)),
			       bytes_str(g->lim.max_entry_bytes, entry, sizeof(entry)),
			       g->idle_ms ? "after " : "off", g->idle_ms, g->idle_ms ? " ms" : "");
	}
	for (size_t i = 0; i < s->c.nerr; i++)
		printf("# error: %s\n", s->c.err[i].msg);
}

/* The header (@r NULL) or a row: the same columns in the same widths */
static void print_line(const struct opts *o, const struct thrash *t, const struct row *r)
{
	char ts[16] = "time", val[32] = "value", hr[8] = "hit%";
	time_t now = time(NULL);
	struct tm tm;

	if (r) {
		localtime_r(&now, &tm);
		strftime(ts, sizeof(ts), "%H:%M:%S", &tm);
		snprintf(val, sizeof(val), "%.3f", isfinite(t->value) ? t->value : 0.0);
		strcpy(hr, "-");
		if (!isnan(r->hit_ratio))
			snprintf(hr, sizeof(hr), "%.1f", r->hit_ratio * 100);
	}
	if (o->stamp)
		printf("%-8s ", ts);
	printf("%-8s %-16s %9s %5s", r ? thrash_state_str(t->state) : "state",
	       r ? thrash_metric_str(t->metric) : "metric", val, hr);
	for (int i = 0; i < NCOL; i++) {
		if (r)
			printf(" %*.*f", cols[i].width, cols[i].prec, r->v[i]);
		else
			printf(" %*s", cols[i].width, cols[i].head);
	}
	putchar('\n');
	fflush(stdout);
}

static int screen_rows(void)
{
	struct winsize ws;

	if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 5)
		return ws.ws_row - 2;
	return 22;
}

/* Until @t on ctr_now_s()'s clock */
static void sleep_until(double t)
{
	struct timespec ts = { (time_t)t, (long)((t - (double)(time_t)t) * 1e9) };

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: %s [options] [interval [count]]\n"
		"  -d, --device DEV      one RDMA device\n"
		"  -p, --pid PID         one process (its odpx contexts, faults and MRs)\n"
		"  -j, --json            one JSON object per interval (NDJSON)\n"
		"  -1, --once            one report, then exit (count 1)\n"
		"  -t, --timestamp       a time column (HH:MM:SS, local) before each row\n"
		"      --sysfs DIR       sysfs root (ODPX_SYSFS_ROOT, default /sys)\n"
		"      --debugfs DIR     debugfs root (ODPX_DEBUGFS_ROOT, default /sys/kernel/debug)\n"
		"      --procfs DIR      procfs root (ODPX_PROCFS_ROOT, default /proc)\n"
		"      --no-netlink      do not query RDMA netlink\n"
		"      --thresholds SPEC thrash thresholds, key=value,... (see odpstat(1))\n"
		"      --record DIR      write the raw netlink replies to DIR\n"
		"      --replay DIR      read the netlink replies from DIR, not the kernel\n"
		"  -h, --help            this text\n"
		"  -V, --version         version\n", prog);
}

static bool parse_num(const char *s, double *v)
{
	char *end;

	errno = 0;
	*v = strtod(s, &end);
	return !errno && end != s && !*end && isfinite(*v);
}

int odpstat_main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "device", required_argument, NULL, 'd' },
		{ "pid", required_argument, NULL, 'p' },
		{ "json", no_argument, NULL, 'j' },
		{ "once", no_argument, NULL, '1' },
		{ "sysfs", required_argument, NULL, 's' },
		{ "debugfs", required_argument, NULL, 'D' },
		{ "procfs", required_argument, NULL, 'P' },
		{ "no-netlink", no_argument, NULL, 'n' },
		{ "thresholds", required_argument, NULL, 'T' },
		{ "timestamp", no_argument, NULL, 't' },
		{ "record", required_argument, NULL, 'r' },
		{ "replay", required_argument, NULL, 'R' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ 0 },
	};
	const char *sys = NULL, *dbg = NULL, *proc = NULL, *thr = NULL;
	struct opts o = { .interval = 1, .count = 1, .netlink = true };
	struct devcaps *caps;
	struct sample s[2] = { 0 }, *a = &s[0], *b = &s[1];
	struct thrash t;
	int c, ncaps, rc = 0, rows, lines = 0;
	char err[160];

	optind = 1;
	thrash_cfg_default(&o.cfg);
	/* "+": options before the operands only, so that "1 -1" is a count, not --once */
	while ((c = getopt_long(argc, argv, "+d:p:j1thV", lo, NULL)) != -1) {
		switch (c) {
		case 'd': o.dev = optarg; break;
		case 'p': {
			char *end;
			long v = strtol(optarg, &end, 10);
			if (*end || end == optarg || v <= 0 || v > INT32_MAX)
				return die("-p %s: not a process ID", optarg);
			o.pid = (pid_t)v;
			break;
		}
		case 'j': o.json = true; break;
		case '1': o.once = true; break;
		case 's': sys = optarg; break;
		case 'D': dbg = optarg; break;
		case 'P': proc = optarg; break;
		case 'n': o.netlink = false; break;
		case 'T': thr = optarg; break;
		case 't': o.stamp = true; break;
		case 'r': o.record = optarg; break;
		case 'R': o.replay = optarg; break;
		case 'h': usage(stdout); return 0;
		case 'V': printf("%s from odpx 0.1\n", prog); return 0;
		default: usage(stderr); return 1;
		}
	}
	if (optind < argc) {
		if (!parse_num(argv[optind], &o.interval) || o.interval <= 0 || o.interval > 86400)
			return die("interval '%s': not a positive number of seconds", argv[optind]);
		if (o.interval < 0.01)
			return die("interval '%s': below the shortest, 0.01 seconds", argv[optind]);
		o.count = -1;	/* an interval with no count: until interrupted */
		optind++;
	}
	if (optind < argc) {
		double v;
		if (!parse_num(argv[optind], &v) || v < 1 || v > 1e15 || v != (double)(long)v)
			return die("count '%s': not a positive integer", argv[optind]);
		o.count = (long)v;
		optind++;
	}
	if (optind < argc && argv[optind][0] == '-')
		return die("%s: options come before the interval", argv[optind]);
	if (optind < argc)
		return usage(stderr), 1;
	if (o.once)
		o.count = 1;
	if (thr && thrash_cfg_parse(&o.cfg, thr, err, sizeof(err)) < 0)
		return die("--thresholds: %s", err);
	stats_roots_init(&o.roots, sys, dbg, proc);
	/* netlink describes the real devices, unless it is a replay */
	if (o.replay)
		o.netlink = true;
	else if (!o.roots.sys_default || getenv("ODPX_NO_NETLINK"))
		o.netlink = false;
	if ((ncaps = devcaps_query(o.dev, &caps, NULL)) < 0)
		return die("out of memory");
	if (o.dev) {
		char path[PATH_MAX + 128];
		snprintf(path, sizeof(path), "%s/class/infiniband/%s", o.roots.sys, o.dev);
		if (!ncaps && access(path, F_OK) < 0)
			return die("%s: no such RDMA device", o.dev);
	}
	thrash_init(&t, &o.cfg);
	rows = screen_rows();
	if (take_sample(&o, a, true) != 0) {
		rc = 1;
		goto out;
	}
	if (!o.json)
		print_banner(&o, a, caps, ncaps);
	for (long i = 0; o.count < 0 || i < o.count; i++) {
		struct row rw;
		struct sample *x;

		sleep_until(a->t + o.interval);
		/* a process that closed its contexts reads as idle; one that ended ends the run */
		if ((c = take_sample(&o, b, false)) != 0) {
			rc = c < 0;
			break;
		}
		compute(&o, a, b, &t, &rw);
		if (o.json) {
			print_json(&o, a, b, &t, &rw, caps, ncaps);
		} else {
			if (lines % rows == 0)
				print_line(&o, &t, NULL);
			print_line(&o, &t, &rw);
			lines++;
		}
		x = a;
		a = b;
		b = x;
	}
out:
	for (int i = 0; i < 2; i++) {
		ctr_set_free(&s[i].c);
		nl_result_free(&s[i].nl);
		free(s[i].seg);
	}
	free(caps);
	return rc;
}
