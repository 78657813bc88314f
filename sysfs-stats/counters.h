/* SPDX-License-Identifier: MIT */
/*
 * counters.h - sysfs-stats: counter sources, the segment reader, the thrash
 * detector and odpstat.  Private to libodpx and its tools/tests.
 *
 * Every source adds named counters to one struct ctr_set, each tagged with
 * its source and where it was read.  An absent source adds nothing; an
 * unreadable file or message adds an error, never a counter.
 */
#ifndef ODPX_SYSFS_STATS_COUNTERS_H
#define ODPX_SYSFS_STATS_COUNTERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <limits.h>
#include <sys/types.h>
#include <time.h>

#include "odpx.h"
#include "segment.h"	/* the layout of a segment, ODPX_SHM_* */

enum ctr_source {
	SRC_UVERBS = 0,		/* legacy MLNX_OFED infiniband_verbs/uverbs* files */
	SRC_DEBUGFS,		/* mlx5 debugfs odp_stats/ */
	SRC_HW_COUNTERS,	/* class/infiniband/<dev>/ports/<n>/hw_counters */
	SRC_NL_PORT,		/* RDMA_NLDEV_CMD_STAT_GET of a port */
	SRC_NL_MR,		/* RDMA_NLDEV_CMD_STAT_GET, STAT_RES = RES_MR */
	SRC_NL_RES_MR,		/* RDMA_NLDEV_CMD_RES_MR_GET */
	SRC_VMSTAT,		/* /proc/vmstat */
	SRC_PROC_PID,		/* /proc/<pid>/stat */
	SRC_ODPX,		/* an odpx context's published segment */
	SRC_MEMCG,		/* the memory cgroup v2 of a process: memory.stat */
	SRC_MAX,
};

const char *ctr_source_name(enum ctr_source s);

struct ctr {
	char name[48];
	char where[48];		/* "rxe0/1", "uverbs0", "0000:08:00.0", "1234/0" */
	uint8_t src;		/* enum ctr_source */
	bool gauge;		/* not a counter: no rate */
	uint64_t value;
};

struct ctr_err {
	char msg[240];
};

struct ctr_set {
	struct ctr *v;
	size_t n, cap;
	struct ctr_err *err;
	size_t nerr, errcap;
};

/* Room for @n elements of @size in the array *@array of *@cap: 0 or -ENOMEM */
int ctr_grow(void *array, size_t *cap, size_t n, size_t size);
void ctr_set_init(struct ctr_set *s);
void ctr_set_clear(struct ctr_set *s);	/* keeps the memory */
void ctr_set_free(struct ctr_set *s);
int ctr_add(struct ctr_set *s, enum ctr_source src, const char *where, const char *name,
	    uint64_t value, bool gauge);
void ctr_error(struct ctr_set *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const struct ctr *ctr_find(const struct ctr_set *s, enum ctr_source src, const char *where,
			   const char *name);
/* ctr_find of @where (not NULL), trying index @hint first: two samples list in the same order */
const struct ctr *ctr_find_near(const struct ctr_set *s, ptrdiff_t hint, enum ctr_source src,
				const char *where, const char *name);
/* sum of every counter of @src named @name (any where) */
uint64_t ctr_sum(const struct ctr_set *s, enum ctr_source src, const char *name, bool *found);

/* The one clock of sample times, in seconds: sources are timed apart and compared. */
static inline double ctr_now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}
/*
 * Increase of the counters of @src named @name between two samples, each
 * place (where) against its own earlier value, summed.  A place new in @cur
 * adds its whole value only when @prev listed its device's MRs whole (the
 * "mrs" gauge of SRC_NL_MR; odpstat(1), netlink_mr).  *@found, unless NULL:
 * both samples have the counter, or such a listing.
 */
uint64_t ctr_inc_each(const struct ctr_set *prev, const struct ctr_set *cur, enum ctr_source src,
		      const char *name, bool *found);

/* Sums of counters saturate: a foreign segment's numbers are hostile. */
static inline uint64_t ctr_sat_add(uint64_t a, uint64_t b)
{
	uint64_t s;

	return __builtin_add_overflow(a, b, &s) ? UINT64_MAX : s;
}

/* A counter that went down wrapped (modulo 2^64) from the top half of the range, else was reset */
static inline uint64_t ctr_delta(uint64_t prev, uint64_t cur)
{
	return cur >= prev || prev >= (1ULL << 63) ? cur - prev : cur;
}

/*
 * Roots of the trees read (tests: fixtures): an option, else ODPX_SYSFS_ROOT,
 * ODPX_DEBUGFS_ROOT, ODPX_PROCFS_ROOT, else /sys, /sys/kernel/debug, /proc.
 */
struct stats_roots {
	char sys[PATH_MAX];
	char debugfs[PATH_MAX];
	char proc[PATH_MAX];
	bool sys_default;	/* the real /sys: netlink describes the same devices */
};
void stats_roots_init(struct stats_roots *r, const char *sys, const char *debugfs,
		      const char *proc);

/* One unsigned decimal or 0x number amid blanks: 0, -ENODATA, -EINVAL, -ERANGE (> 2^64-1) */
int ctr_parse_value(const char *text, size_t len, uint64_t *v);
/* Read and parse one file: 0, -ENOENT (absent: not an error), or as above. */
int ctr_read_file(const char *path, uint64_t *v);

/* sources.c: each returns the number of counters added or -errno */
int src_uverbs_read(const struct stats_roots *r, const char *dev, struct ctr_set *s);
int src_debugfs_read(const struct stats_roots *r, struct ctr_set *s);
int src_hw_counters_read(const struct stats_roots *r, const char *dev, struct ctr_set *s);
int src_vmstat_read(const struct stats_roots *r, struct ctr_set *s);
/* The memory.stat of @pid's cgroup v2 (0: the caller's), where = its path; 0 without one */
int src_memcg_read(const struct stats_roots *r, pid_t pid, struct ctr_set *s);
/* and, into *@start unless NULL, the start time of @pid (field 22; 0 if none) */
int src_pid_stat_read(const struct stats_roots *r, pid_t pid, struct ctr_set *s, uint64_t *start);

/* ---- netlink.c: RDMA netlink (NETLINK_RDMA, the nldev client) ---- */

struct nl_mr {
	char dev[64];
	uint32_t mrn, rkey, lkey, pdn, pid;
	uint64_t mrlen;
	bool has_keys, has_pid;
};

struct nl_result {
	struct ctr_set *ctrs;	/* port and per-MR counters go here */
	bool no_ports;		/* nl_collect: the per-MR statistics only */
	/* nl_collect: 0, or the one process whose MRs' statistics are kept, as the MR dump says */
	pid_t pid;
	struct nl_mr *mr;
	size_t nmr, mrcap;
	size_t mr_dev;		/* nl_collect: mr[mr_dev...]: the device's, by number with @pid */
	size_t nmr_stats;	/* MR entries with statistics (counters) parsed */
	struct nl_dev {		/* from RDMA_NLDEV_CMD_GET, every device */
		char name[64];
		uint32_t index, ports;
	} *dev;
	size_t ndev, devcap;
	double t_port, t_mr;	/* nl_collect: ctr_now_s() of the replies (mean), 0 if none */
};

/*
 * Parse netlink messages as received (a dump ending in NLMSG_DONE or not):
 * SRC_NL_PORT counters "<dev>/<port>", SRC_NL_MR "<dev>/mr<mrn>", MR dump
 * entries into @res->mr.  Return the messages parsed, -EBADMSG (malformed),
 * -EPROTO (unexpected type), or the error of an NLMSG_ERROR.
 */
int nl_parse(const void *buf, size_t len, struct nl_result *res);
void nl_result_free(struct nl_result *res);

/*
 * Live queries of @dev (NULL: all), adding per device the gauge "mrs" of
 * SRC_NL_MR (MRs with statistics) when its statistics dump was read whole.
 * @record, @replay: directories of raw replies (odpstat --record, --replay).
 * Return 0, -EPROTONOSUPPORT (no RDMA netlink), -ENODEV or -errno.
 */
int nl_collect(const char *dev, struct nl_result *res, const char *record, const char *replay);

/*
 * The SRC_NL_MR counters of @pid's MRs on @dev into @out, as nl_collect.
 * *@listed: @pid's MRs the MR dump listed.  Returns how many carry
 * statistics (0 with *@listed > 0: the driver gives none), or -errno.
 */
int nl_pid_mr_stats(const char *dev, pid_t pid, struct ctr_set *out, const char *replay,
		    unsigned *listed);

/* ---- shm.c: the segment each context publishes ---- */

/* One context found by odpstat, its counters summed. */
struct odpx_seg_info {
	pid_t pid;
	unsigned n;
	uint64_t born_ns;	/* with @pid and @n, the context's identity (0: unknown) */
	enum odpx_mode mode;
	enum odpx_backend backend;
	char reason[192];
	struct odpx_limits lim;		/* 0: a writer that did not publish them */
	uint32_t lim_source, idle_ms;	/* enum odpx_limit_source; idle release, 0 off */
	struct odpx_stats st;
};

/*
 * The segments of @pid (0: every process of the caller's uid), at most @max,
 * each read and summed.  Return the count, or -errno of the first segment
 * that could not be read (-EPROTO: another layout) when none was, or of
 * @pid's descriptor table (-EACCES: another user's).
 */
int odpx_seg_scan(pid_t pid, struct odpx_seg_info *out, int max);

/* ---- thrash.c: the detector ---- */

/* Thresholds, defaults: odpstat(1) THRASH DETECTOR; ODPX_THRASH, odpstat --thresholds */
struct thrash_cfg {
	double min_rate, fault_rate, inval_ratio, refault_ratio, repin_ratio;
	double evict_miss_ratio, warm_ratio, exit_factor;
	unsigned enter_n, exit_n;
	unsigned window_ms;		/* the library's window */
	double mem_refault_rate;
};

/* The inputs of one window: counter increases over @secs seconds. */
struct thrash_in {
	double secs;
	double dev_secs;	/* of the device counts, read at other times (0: secs) */
	/* device (ODP): pages */
	uint64_t dev_faults, dev_inval, dev_refaults;
	bool have_dev;
	/* pin cache */
	uint64_t misses, evictions, repins, invals, evict_remiss;
	bool have_pin, have_evict_remiss;
	/* memory (ODP modes): the process's memory cgroup, else /proc/vmstat; pages */
	uint64_t mem_refaults, mem_majfaults;
	double mem_secs;	/* of the memory counts, read at other times (0: secs) */
	bool have_mem;
};

struct thrash {
	struct thrash_cfg cfg;
	enum odpx_thrash_state state;
	enum odpx_thrash_metric metric;	/* what decided the state */
	double value;			/* that metric's value */
	enum odpx_thrash_state cand;	/* the state the run supports, and its length */
	unsigned run;
	enum odpx_thrash_metric cand_metric;	/* of the run's last window of class cand */
	double cand_value;
	uint64_t changes;
};

void thrash_cfg_default(struct thrash_cfg *c);
/* "key=value,..." into @c; -EINVAL with a message in @err on an unknown key or bad value */
int thrash_cfg_parse(struct thrash_cfg *c, const char *spec, char *err, size_t errlen);
void thrash_init(struct thrash *t, const struct thrash_cfg *c);
/* One window; returns true when the state changed. */
bool thrash_step(struct thrash *t, const struct thrash_in *in);
const char *thrash_state_str(enum odpx_thrash_state s);
const char *thrash_metric_str(enum odpx_thrash_metric m);
/* The inputs between two samples; each returns the source used, SRC_MAX for none. */
enum ctr_source thrash_mem_inputs(const struct ctr_set *prev, const struct ctr_set *cur,
				  struct thrash_in *in);
enum ctr_source thrash_dev_inputs(const struct ctr_set *prev, const struct ctr_set *cur,
				  struct thrash_in *in);

/* ---- odpstat.c, with what odpx-info takes from it ---- */
int odpstat_main(int argc, char **argv);
void json_str(FILE *f, const char *s);	/* @s quoted and escaped for JSON */

/* An RDMA device's ODP caps and limits (ibv_query_device_ex), as odpx_query(3) gives them. */
struct devcaps {
	char name[64];
	bool queried;
	char err[96];		/* why not */
	uint64_t general;	/* enum ibv_odp_general_caps */
	uint32_t rc, uc, ud, xrc;
	uint64_t max_mr, max_mr_size, max_pd;
};
struct ibv_context;
/*
 * The caps of every RDMA device (@dev: that one only) into *@out, unless NULL
 * (the caller frees it); @fn, unless NULL, sees each while it is open (NULL:
 * it did not open).  Returns how many, or -ENOMEM.
 */
int devcaps_query(const char *dev, struct devcaps **out,
		  void (*fn)(struct ibv_context *c, const struct devcaps *d));

#endif
