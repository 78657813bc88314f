/* SPDX-License-Identifier: MIT */
/*
 * counters.h - sysfs-stats: counter sources, the published stats segment,
 * the thrash detector and odpstat.  Private to libodpx and its tools/tests.
 *
 * Every source fills one struct ctr_set: named counters, each tagged with
 * its source and where it was read (device/port, PCI name, MR number, PID).
 * A source that is absent adds nothing; a file or message that is present
 * but unreadable (empty, garbage, out of range, truncated) adds an error to
 * the set, never a counter, and never stops the other sources.
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
	uint8_t src;
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
void ctr_error(struct ctr_set *s, enum ctr_source src, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
const struct ctr *ctr_find(const struct ctr_set *s, enum ctr_source src, const char *where,
			   const char *name);
/*
 * ctr_find of @where (not NULL), trying index @hint of @s first: two
 * samples list their counters mostly in the same order, so a caller
 * walking one sample finds the other's at a steady offset.
 */
const struct ctr *ctr_find_near(const struct ctr_set *s, ptrdiff_t hint, enum ctr_source src,
				const char *where, const char *name);
/* sum of every counter of @src named @name (any where) */
uint64_t ctr_sum(const struct ctr_set *s, enum ctr_source src, const char *name, bool *found);

/* The one clock of sample times (CLOCK_MONOTONIC, seconds): sources are timed apart and compared. */
static inline double ctr_now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}
/*
 * Increase of the counters of @src named @name between two samples: each
 * place (where) against its own earlier value, summed (a sum's increase
 * would take a place that went for a reset of the whole).  A place gone
 * from @cur adds nothing.  A place new in @cur adds its whole value only
 * when @prev listed the MRs of its device whole (the device's "mrs" gauge
 * of SRC_NL_MR, see nl_collect): that MR was registered in between (MR
 * numbers, restrack IDs, are allocated cyclically); any other may have
 * counted long before and adds nothing until the next interval.
 * *@found, unless NULL: both samples have the counter, or such a listing.
 */
uint64_t ctr_inc_each(const struct ctr_set *prev, const struct ctr_set *cur, enum ctr_source src,
		      const char *name, bool *found);

/* Sums of counters saturate: a foreign segment's numbers are hostile. */
static inline uint64_t ctr_sat_add(uint64_t a, uint64_t b)
{
	uint64_t s;

	return __builtin_add_overflow(a, b, &s) ? UINT64_MAX : s;
}

/*
 * Increase of a counter between two samples.  A counter that went down
 * wrapped if it was in the top half of the range (2^64 wrap), else it was
 * reset (device re-created): the increase is then its new value.
 */
static inline uint64_t ctr_delta(uint64_t prev, uint64_t cur)
{
	if (cur >= prev)
		return cur - prev;
	if (prev >= (1ULL << 63))
		return cur - prev;	/* modulo 2^64 */
	return cur;
}

/*
 * Roots of the trees the sources read: an option, else the environment
 * (ODPX_SYSFS_ROOT, ODPX_DEBUGFS_ROOT, ODPX_PROCFS_ROOT), else /sys,
 * /sys/kernel/debug and /proc.  Tests point them at recorded fixture trees.
 */
struct stats_roots {
	char sys[PATH_MAX];
	char debugfs[PATH_MAX];
	char proc[PATH_MAX];
	bool sys_default;	/* the real /sys: netlink describes the same devices */
};
void stats_roots_init(struct stats_roots *r, const char *sys, const char *debugfs,
		      const char *proc);

/*
 * Parse a sysfs/debugfs counter file's text: one unsigned decimal (or 0x
 * hex) number, optional surrounding blanks and a newline.  Return 0, or
 * -ENODATA (empty), -EINVAL (garbage), -ERANGE (above 2^64 - 1).
 */
int ctr_parse_value(const char *text, size_t len, uint64_t *v);
/* Read and parse one file: 0, -ENOENT (absent: not an error), or as above. */
int ctr_read_file(const char *path, uint64_t *v);

/* sources.c: each returns the number of counters added or -errno */
int src_uverbs_read(const struct stats_roots *r, const char *dev, struct ctr_set *s);
int src_debugfs_read(const struct stats_roots *r, struct ctr_set *s);
int src_hw_counters_read(const struct stats_roots *r, const char *dev, struct ctr_set *s);
int src_vmstat_read(const struct stats_roots *r, struct ctr_set *s);
/*
 * The memory.stat of @pid's cgroup v2 (0: the caller's), from <proc>/<pid>/cgroup
 * and <sys>/fs/cgroup (or its unified/ of a hybrid layout): the refault,
 * major fault and scan counters, where = the cgroup's path.  0 added when
 * there is none (cgroup v1, no memory controller, the root cgroup).
 */
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
	/*
	 * nl_collect: 0, or a process whose MRs' statistics alone are kept
	 * (the statistics dump names no process: the MR dump before it does),
	 * and none of a device whose MR dump was not read.
	 */
	pid_t pid;
	struct nl_mr *mr;
	size_t nmr, mrcap;
	size_t mr_dev;		/* nl_collect: mr[mr_dev...] the device parsed, by number with @pid */
	size_t nmr_stats;	/* MR entries with statistics (counters) parsed */
	struct nl_dev {		/* from RDMA_NLDEV_CMD_GET, every device */
		char name[64];
		uint32_t index, ports;
	} *dev;
	size_t ndev, devcap;
	/*
	 * nl_collect: when the port and the per-MR statistics were read
	 * (CLOCK_MONOTONIC seconds as each reply came in, averaged over the
	 * devices), 0 if never: the rates of their counters are timed there.
	 */
	double t_port, t_mr;
};

/*
 * Parse a buffer of netlink messages as received from the kernel (one or
 * more, a dump ending in NLMSG_DONE or not).  Port statistics become
 * SRC_NL_PORT counters "<dev>/<port>", per-MR ODP statistics SRC_NL_MR
 * counters "<dev>/mr<mrn>" (nl_collect adds the gauge "mrs" of "<dev>",
 * the number of MRs with statistics, when a device's dump was read whole), MR dump
 * entries fill @res->mr.  Return the
 * number of messages parsed, or -EBADMSG (truncated, malformed, wrong
 * attribute types), -EPROTO (an unexpected message type), or the negative
 * error carried by an NLMSG_ERROR.
 */
int nl_parse(const void *buf, size_t len, struct nl_result *res);
void nl_result_free(struct nl_result *res);

/*
 * Live queries.  @dev limits them to one device (NULL: all).  @record, if
 * not NULL, is a directory where every raw reply is written as
 * <what>-<dev>.bin (odpstat --record, for fixtures and bug reports).
 * @replay, if not NULL, is such a directory read instead of the kernel
 * (odpstat --replay): a reply whose file is absent is a query that failed.
 * @res->pid, unless 0, keeps the per-MR statistics of that process's MRs
 * only.  Return 0, -EPROTONOSUPPORT (no RDMA netlink here), or -errno.
 */
int nl_collect(const char *dev, struct nl_result *res, const char *record, const char *replay);

/*
 * The per-MR ODP statistics of @pid's MRs on device @dev (the library's
 * detector: the kernel names the process of an MR, not its context), into
 * @out as SRC_NL_MR counters "<dev>/mr<mrn>", with the gauge "mrs" of
 * "<dev>" (their number) when the statistics dump was read whole.  @replay
 * as for nl_collect.  *@listed: the MRs of @pid the MR dump listed.
 * Returns how many of them carry statistics: 0 with *@listed > 0 is a
 * driver that reports none (rxe: the source is absent); or -errno
 * (-EPROTONOSUPPORT: no RDMA netlink, -ENODEV: no such device).
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
 * Find the segments of @pid (0: every process of the caller's uid) in its
 * descriptor table, read a copy of each and sum its counters; at most
 * @max.  Return the count, or -errno of the first segment that could not
 * be read (-EPROTO: another version's layout) when none was, or of @pid's
 * descriptor table (-EACCES: another user's process).
 */
int odpx_seg_scan(pid_t pid, struct odpx_seg_info *out, int max);

/* ---- thrash.c: the detector ---- */

/*
 * Thresholds: rates per second over the window, ratios of counts of the
 * same window; their meaning and defaults are odpstat(1)'s THRASH DETECTOR
 * (the table of keys in thrash.c), set by "key=value,..." (ODPX_THRASH,
 * odpstat --thresholds).
 */
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
/*
 * Memory inputs between two samples: SRC_MEMCG if both have it, else
 * SRC_VMSTAT's (refaults, major faults).  Returns the source
 * used, SRC_MAX for none.
 */
enum ctr_source thrash_mem_inputs(const struct ctr_set *prev, const struct ctr_set *cur,
				  struct thrash_in *in);
const char *thrash_metric_str(enum odpx_thrash_metric m);
/*
 * The device inputs from a set of counters (legacy files, else netlink
 * per-MR), each device or MR against its own earlier value; returns the
 * source used, or SRC_MAX.
 */
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
 * The caps of every RDMA device (@dev: that one only), into *@out unless
 * @out is NULL: an array the caller frees (NULL with none).  Returns how
 * many, or -ENOMEM.  @fn, unless NULL, sees each device while it is open
 * (NULL: it did not open).
 */
int devcaps_query(const char *dev, struct devcaps **out,
		  void (*fn)(struct ibv_context *c, const struct devcaps *d));

#endif
