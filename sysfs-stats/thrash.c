// SPDX-License-Identifier: MIT
/*
 * thrash.c - the thrash detector: counter increases over a window in, a
 * state (OK, WARMING, THRASH) and the metric that decided it out.
 *
 * One window is classified first (raw), from the device side (ODP: pages
 * faulted, invalidated, faulted again) and the pin-cache side (misses,
 * evictions, re-pins), the worse of the two winning:
 *
 *   idle: fewer than min_rate faults and misses per second        -> OK
 *   device: refaulted/faulted >= refault_ratio                     -> THRASH
 *           invalidated/faulted >= inval_ratio                     -> THRASH
 *           faulted/s >= fault_rate with any invalidation          -> THRASH
 *           invalidated < warm_ratio x faulted                     -> WARMING
 *   pin:    evict-then-miss/misses >= evict_miss_ratio             -> THRASH
 *           repins/misses >= repin_ratio                           -> WARMING
 *           no eviction and no invalidation                        -> WARMING
 *   memory: refaulted pages/s >= mem_refault_rate                  -> THRASH
 *           major faults/s >= mem_refault_rate                     -> WARMING
 *   else OK
 *
 * The memory side is the kernel's view of the process's pages in the ODP
 * modes, where the device faults what the kernel reclaimed: a workingset
 * refault is a page faulted in again while its shadow entry says it was
 * still in the working set when reclaim took it, which is thrashing by the
 * kernel's own measure.  Its source is the memory cgroup of the process
 * (memory.stat), else /proc/vmstat: the cgroup's or the system's pages,
 * not the process's alone.
 *
 * Hysteresis: while in THRASH, the thresholds are multiplied by
 * exit_factor (a window must fall clearly below them to count as "not
 * thrashing").  States are ordered OK < WARMING < THRASH, and a run is a
 * sequence of consecutive windows all on the same side of the current
 * state (all worse, or all better); a window classified as the current
 * state ends it, and one on the other side starts a run that way.  A run
 * of enter_n windows (exit_n when it leaves THRASH) changes the state to
 * the one every window of the run supports: the best class of a run
 * upwards, the worst of a run downwards.  So in THRASH, windows of OK and
 * WARMING in turn leave it for WARMING; in OK, windows of WARMING and
 * THRASH in turn enter WARMING, not THRASH.  (Counted per class, two
 * classes in turn would reset each other's runs and the state would never
 * change.)  The metric and value reported are those of the
 * run's last window of the new state's class.
 *
 * In pin mode only an eviction followed by a miss on the same range is the
 * working set not fitting.  A re-pin (a miss on a range the monitor
 * invalidated recently) registers memory that was unmapped, zapped or moved:
 * new pages at an old address, the application allocating, which alone is
 * growth (WARMING), never THRASH.
 *
 * Evictions followed by a miss on the same range come from the cache itself
 * (stats.evict_remiss: a miss at the start of a recently evicted range whose
 * memory was not invalidated since, stats.repin_fresh when it was); a
 * reader without it (an older segment) falls back to min(evictions,
 * misses): in a cache at its limits each miss of a cycled working set
 * evicts one range that is missed again later.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "counters.h"

void thrash_cfg_default(struct thrash_cfg *c)
{
	c->min_rate = 10;
	c->fault_rate = 50000;
	c->inval_ratio = 0.5;
	c->refault_ratio = 0.2;
	c->repin_ratio = 0.25;
	c->evict_miss_ratio = 0.5;
	c->warm_ratio = 0.05;
	c->exit_factor = 0.5;
	c->enter_n = 2;
	c->exit_n = 3;
	c->window_ms = 1000;
	c->mem_refault_rate = 1000;
}

static const struct {
	const char *key;
	size_t off;
	bool integer;
} keys[] = {
#define K(f, i) { #f, offsetof(struct thrash_cfg, f), i }
	K(min_rate, false), K(fault_rate, false), K(inval_ratio, false),
	K(refault_ratio, false), K(repin_ratio, false), K(evict_miss_ratio, false),
	K(warm_ratio, false), K(exit_factor, false), K(enter_n, true), K(exit_n, true),
	K(window_ms, true), K(mem_refault_rate, false),
#undef K
};

int thrash_cfg_parse(struct thrash_cfg *c, const char *spec, char *err, size_t errlen)
{
	char *dup = strdup(spec), *tok, *save = NULL;
	struct thrash_cfg n = *c;
	int r = 0;

	if (!dup)
		return -ENOMEM;
	for (tok = strtok_r(dup, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
		char *eq = strchr(tok, '='), *end;
		size_t i;
		double v;

		if (!eq) {
			snprintf(err, errlen, "'%s': expected key=value", tok);
			r = -EINVAL;
			break;
		}
		*eq = 0;
		for (i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
			if (!strcmp(keys[i].key, tok))
				break;
		if (i == sizeof(keys) / sizeof(keys[0])) {
			snprintf(err, errlen, "unknown threshold '%s'", tok);
			r = -EINVAL;
			break;
		}
		v = strtod(eq + 1, &end);
		if (end == eq + 1 || *end || !(v >= 0) || v > 1e12 ||
		    (keys[i].integer && (v < 1 || v != (double)(unsigned)v))) {
			snprintf(err, errlen, "%s=%s: not a %s", tok, eq + 1,
				 keys[i].integer ? "positive integer" : "non-negative number");
			r = -EINVAL;
			break;
		}
		if (keys[i].integer)
			*(unsigned *)((char *)&n + keys[i].off) = (unsigned)v;
		else
			*(double *)((char *)&n + keys[i].off) = v;
	}
	free(dup);
	if (r == 0 && n.exit_factor > 1) {
		snprintf(err, errlen, "exit_factor=%g: must be at most 1", n.exit_factor);
		r = -EINVAL;
	}
	if (r == 0)
		*c = n;
	return r;
}

void thrash_init(struct thrash *t, const struct thrash_cfg *c)
{
	struct thrash_cfg cfg = *c;

	memset(t, 0, sizeof(*t));
	t->cfg = cfg;
	t->state = ODPX_THRASH_OK;
	t->cand = ODPX_THRASH_OK;
}

const char *thrash_state_str(enum odpx_thrash_state s)
{
	static const char *const n[] = { "OK", "WARMING", "THRASH" };

	return (unsigned)s < ODPX_THRASH_RESERVED ? n[s] : "?";
}

const char *thrash_metric_str(enum odpx_thrash_metric m)
{
	static const char *const n[] = {
		"none", "fault_rate", "inval_ratio", "refault_ratio", "repin_ratio",
		"evict_miss_ratio", "miss_rate", "mem_refault_rate", "majfault_rate",
	};

	return (unsigned)m < ODPX_METRIC_RESERVED ? n[m] : "?";
}

struct verdict {
	enum odpx_thrash_state state;
	enum odpx_thrash_metric metric;
	double value;
};

static void worse(struct verdict *v, enum odpx_thrash_state s, enum odpx_thrash_metric m,
		  double value)
{
	if (s > v->state) {
		v->state = s;
		v->metric = m;
		v->value = value;
	}
}

static struct verdict classify(const struct thrash_cfg *c, const struct thrash_in *in, double f)
{
	struct verdict v = { ODPX_THRASH_OK, ODPX_METRIC_NONE, 0 };
	double secs = in->secs > 0 ? in->secs : 1;
	double dsecs = in->dev_secs > 0 ? in->dev_secs : secs;

	/* no fault, nothing to classify (min_rate may be 0: no ratio of 0 faults) */
	if (in->have_dev && in->dev_faults && in->dev_faults / dsecs >= c->min_rate) {
		double faults = (double)in->dev_faults;
		double rate = faults / dsecs;
		double inval = (double)in->dev_inval / faults;
		double refault = (double)in->dev_refaults / faults;

		if (refault >= c->refault_ratio * f)
			worse(&v, ODPX_THRASH_THRASH, ODPX_METRIC_REFAULT_RATIO, refault);
		else if (inval >= c->inval_ratio * f)
			worse(&v, ODPX_THRASH_THRASH, ODPX_METRIC_INVAL_RATIO, inval);
		else if (rate >= c->fault_rate * f && in->dev_inval)
			worse(&v, ODPX_THRASH_THRASH, ODPX_METRIC_FAULT_RATE, rate);
		else if (inval < c->warm_ratio)
			worse(&v, ODPX_THRASH_WARMING, ODPX_METRIC_FAULT_RATE, rate);
	}
	if (in->have_pin && in->misses && in->misses / secs >= c->min_rate) {
		double misses = (double)in->misses;
		double repin = (double)in->repins / misses;
		uint64_t em = in->have_evict_remiss ? in->evict_remiss
			      : in->evictions < in->misses ? in->evictions : in->misses;
		double evm = (double)em / misses;

		if (evm >= c->evict_miss_ratio * f)
			worse(&v, ODPX_THRASH_THRASH, ODPX_METRIC_EVICT_MISS_RATIO, evm);
		else if (repin >= c->repin_ratio)
			worse(&v, ODPX_THRASH_WARMING, ODPX_METRIC_REPIN_RATIO, repin);
		else if (!in->evictions && !in->invals)
			worse(&v, ODPX_THRASH_WARMING, ODPX_METRIC_MISS_RATE, misses / secs);
	}
	if (in->have_mem) {
		double msecs = in->mem_secs > 0 ? in->mem_secs : secs;
		double refaults = (double)in->mem_refaults / msecs;
		double majfaults = (double)in->mem_majfaults / msecs;

		if (refaults >= c->mem_refault_rate * f && refaults >= c->min_rate)
			worse(&v, ODPX_THRASH_THRASH, ODPX_METRIC_MEM_REFAULT_RATE, refaults);
		else if (majfaults >= c->mem_refault_rate && majfaults >= c->min_rate)
			worse(&v, ODPX_THRASH_WARMING, ODPX_METRIC_MAJFAULT_RATE, majfaults);
	}
	return v;
}

bool thrash_step(struct thrash *t, const struct thrash_in *in)
{
	/* in THRASH, a window must fall below exit_factor x the thresholds */
	double f = t->state == ODPX_THRASH_THRASH ? t->cfg.exit_factor : 1.0;
	struct verdict v = classify(&t->cfg, in, f);
	bool up = v.state > t->state;
	unsigned need;

	if (v.state == t->state) {
		t->metric = v.metric;
		t->value = v.value;
		t->cand = t->state;
		t->run = 0;
		return false;
	}
	/* a run goes one way; cand is the state all its windows support */
	if (!t->run || (t->cand > t->state) != up) {
		t->run = 0;
		t->cand = v.state;
	}
	if (up ? v.state <= t->cand : v.state >= t->cand) {
		t->cand = v.state;
		t->cand_metric = v.metric;
		t->cand_value = v.value;
	}
	t->run++;
	need = t->state == ODPX_THRASH_THRASH ? t->cfg.exit_n : t->cfg.enter_n;
	if (t->run < need)
		return false;
	t->state = t->cand;
	t->metric = t->cand_metric;
	t->value = t->cand_value;
	t->run = 0;
	t->changes++;
	return true;
}

/*
 * Device inputs between two samples: faulted pages (legacy files, else
 * netlink per-MR page_faults, else debugfs num_odp_mr_pages is no rate and
 * is not used), invalidated pages, and refaults (faults that raced an
 * invalidation: invalidations_faults_contentions).  Each device or MR
 * against its own earlier value (ctr_inc_each): MRs come and go between
 * samples.  Returns the source used, SRC_MAX for none.
 */
enum ctr_source thrash_dev_inputs(const struct ctr_set *prev, const struct ctr_set *cur,
				  struct thrash_in *in)
{
	static const struct {
		enum ctr_source src;
		const char *faults, *inval, *refault;
	} srcs[] = {
		{ SRC_UVERBS, "num_page_fault_pages", "num_invalidation_pages",
		  "invalidations_faults_contentions" },
		{ SRC_NL_MR, "page_faults", "page_invalidations", NULL },
	};

	for (size_t i = 0; i < sizeof(srcs) / sizeof(srcs[0]); i++) {
		enum ctr_source src = srcs[i].src;
		bool found = false;
		uint64_t faults = ctr_inc_each(prev, cur, src, srcs[i].faults, &found);

		if (!found)
			continue;
		in->have_dev = true;
		in->dev_faults += faults;
		in->dev_inval += ctr_inc_each(prev, cur, src, srcs[i].inval, NULL);
		if (srcs[i].refault)
			in->dev_refaults += ctr_inc_each(prev, cur, src, srcs[i].refault, NULL);
		return src;	/* one source: the legacy files and netlink count the same faults */
	}
	return SRC_MAX;
}

/*
 * Memory inputs: the pages the kernel reclaimed and had to fault in again
 * while their shadow entries said they were still in the working set
 * (workingset_refault_anon + _file, or workingset_refault before 5.9),
 * major faults (swap-ins and file reads) and pages scanned by reclaim, of
 * the process's memory cgroup if it was read twice, else of the system.
 */
enum ctr_source thrash_mem_inputs(const struct ctr_set *prev, const struct ctr_set *cur,
				  struct thrash_in *in)
{
	static const char *const refaults[] = {
		"workingset_refault_anon", "workingset_refault_file", "workingset_refault",
	};
	static const char *const scans[] = { "pgscan", "pgscan_kswapd", "pgscan_direct",
					     "pgscan_khugepaged" };
	static const enum ctr_source srcs[] = { SRC_MEMCG, SRC_VMSTAT };

	for (size_t i = 0; i < sizeof(srcs) / sizeof(srcs[0]); i++) {
		bool found = false, f;
		uint64_t r = 0, sc = 0;

		for (size_t k = 0; k < sizeof(refaults) / sizeof(refaults[0]); k++) {
			f = false;
			r += ctr_inc_each(prev, cur, srcs[i], refaults[k], &f);
			found |= f;
		}
		if (!found)
			continue;
		for (size_t k = 0; k < sizeof(scans) / sizeof(scans[0]); k++)
			sc += ctr_inc_each(prev, cur, srcs[i], scans[k], NULL);
		in->have_mem = true;
		in->mem_refaults += r;
		in->mem_scanned += sc;
		in->mem_majfaults += ctr_inc_each(prev, cur, srcs[i], "pgmajfault", NULL);
		return srcs[i];
	}
	return SRC_MAX;
}
