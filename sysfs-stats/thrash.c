// SPDX-License-Identifier: MIT
/*
 * thrash.c - the thrash detector: counter increases over a window in, a
 * state (OK, WARMING, THRASH) and the metric that decided it out.  The
 * rules, thresholds and hysteresis are odpstat(1)'s THRASH DETECTOR:
 * classify() is its list, the worst class found winning, thrash_step() its
 * hysteresis.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "counters.h"

/* The keys of "key=value,..." (odpstat(1), THRASH DETECTOR) and their defaults */
static const struct {
	const char *key;
	size_t off;
	bool integer;
	double dflt;
} keys[] = {
#define K(f, i, d) { #f, offsetof(struct thrash_cfg, f), i, d }
	K(min_rate, false, 10), K(fault_rate, false, 50000), K(inval_ratio, false, 0.5),
	K(refault_ratio, false, 0.2), K(repin_ratio, false, 0.25), K(evict_miss_ratio, false, 0.5),
	K(warm_ratio, false, 0.05), K(exit_factor, false, 0.5), K(enter_n, true, 2),
	K(exit_n, true, 3), K(window_ms, true, 1000), K(mem_refault_rate, false, 1000),
#undef K
};

static void set(struct thrash_cfg *c, size_t i, double v)
{
	if (keys[i].integer)
		*(unsigned *)((char *)c + keys[i].off) = (unsigned)v;
	else
		*(double *)((char *)c + keys[i].off) = v;
}

void thrash_cfg_default(struct thrash_cfg *c)
{
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		set(c, i, keys[i].dflt);
}

int thrash_cfg_parse(struct thrash_cfg *c, const char *spec, char *err, size_t errlen)
{
	char *dup = strdup(spec), *tok, *save = NULL;
	struct thrash_cfg n = *c;
	int r = -EINVAL;

	if (!dup)
		return -ENOMEM;
	for (tok = strtok_r(dup, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
		char *eq = strchr(tok, '='), *end;
		size_t i = 0;
		double v;

		if (!eq) {
			snprintf(err, errlen, "'%s': expected key=value", tok);
			goto out;
		}
		*eq = 0;
		while (i < sizeof(keys) / sizeof(keys[0]) && strcmp(keys[i].key, tok))
			i++;
		if (i == sizeof(keys) / sizeof(keys[0])) {
			snprintf(err, errlen, "unknown threshold '%s'", tok);
			goto out;
		}
		v = strtod(eq + 1, &end);
		if (end == eq + 1 || *end || !(v >= 0) || v > 1e12 ||
		    (keys[i].integer && (v < 1 || v != (double)(unsigned)v))) {
			snprintf(err, errlen, "%s=%s: not a %s", tok, eq + 1,
				 keys[i].integer ? "positive integer" : "non-negative number");
			goto out;
		}
		set(&n, i, v);
	}
	if (n.exit_factor > 1) {
		snprintf(err, errlen, "exit_factor=%g: must be at most 1", n.exit_factor);
		goto out;
	}
	*c = n;
	r = 0;
out:
	free(dup);
	return r;
}

void thrash_init(struct thrash *t, const struct thrash_cfg *c)
{
	*t = (struct thrash){ .cfg = *c, .state = ODPX_THRASH_OK, .cand = ODPX_THRASH_OK };
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
	/* an eviction followed by a miss of the same range: a working set that does not fit */
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
	/*
	 * A run counts the windows on one side of the state whatever their class (per class,
	 * two classes in turn would reset each other's runs); cand: what all its windows support.
	 */
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

/* Faulted, invalidated and refaulted pages: the legacy files, else the per-MR statistics */
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

/* Workingset refaults and major faults of the memory cgroup, else the system's (odpstat(1)) */
enum ctr_source thrash_mem_inputs(const struct ctr_set *prev, const struct ctr_set *cur,
				  struct thrash_in *in)
{
	static const enum ctr_source srcs[] = { SRC_MEMCG, SRC_VMSTAT };

	for (size_t i = 0; i < sizeof(srcs) / sizeof(srcs[0]); i++) {
		bool anon = false, file = false;
		uint64_t r = ctr_inc_each(prev, cur, srcs[i], "workingset_refault_anon", &anon) +
			     ctr_inc_each(prev, cur, srcs[i], "workingset_refault_file", &file);

		if (!anon && !file)
			continue;
		in->have_mem = true;
		in->mem_refaults += r;
		in->mem_majfaults += ctr_inc_each(prev, cur, srcs[i], "pgmajfault", NULL);
		return srcs[i];
	}
	return SRC_MAX;
}
