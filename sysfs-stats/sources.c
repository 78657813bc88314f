// SPDX-License-Identifier: MIT
/*
 * sources.c - counters from files: the legacy MLNX_OFED uverbs files, the
 * mlx5 debugfs odp_stats directory, port hw_counters, /proc/vmstat and
 * /proc/<pid>/stat.  Each source is optional: an absent directory or file
 * adds nothing.  A file that is present but empty, not a number, or above
 * 2^64 - 1 adds an error naming the file, never a counter.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "counters.h"

static const char *const source_names[SRC_MAX] = {
	[SRC_UVERBS] = "uverbs",
	[SRC_DEBUGFS] = "debugfs",
	[SRC_HW_COUNTERS] = "hw_counters",
	[SRC_NL_PORT] = "netlink_port",
	[SRC_NL_MR] = "netlink_mr",
	[SRC_NL_RES_MR] = "netlink_res_mr",
	[SRC_VMSTAT] = "vmstat",
	[SRC_PROC_PID] = "proc_pid",
	[SRC_ODPX] = "odpx",
	[SRC_MEMCG] = "memcg",
};

const char *ctr_source_name(enum ctr_source s)
{
	return (unsigned)s < SRC_MAX ? source_names[s] : "?";
}

void ctr_set_init(struct ctr_set *s)
{
	memset(s, 0, sizeof(*s));
}

void ctr_set_clear(struct ctr_set *s)
{
	s->n = 0;
	s->nerr = 0;
}

void ctr_set_free(struct ctr_set *s)
{
	free(s->v);
	free(s->err);
	ctr_set_init(s);
}

int ctr_add(struct ctr_set *s, enum ctr_source src, const char *where, const char *name,
	    uint64_t value, bool gauge)
{
	struct ctr *c;

	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 64;
		struct ctr *v = realloc(s->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		s->v = v;
		s->cap = cap;
	}
	c = &s->v[s->n++];
	memset(c, 0, sizeof(*c));
	snprintf(c->name, sizeof(c->name), "%s", name);
	snprintf(c->where, sizeof(c->where), "%s", where ? where : "");
	c->src = (uint8_t)src;
	c->gauge = gauge;
	c->value = value;
	return 0;
}

void ctr_error(struct ctr_set *s, enum ctr_source src, const char *fmt, ...)
{
	va_list ap;

	if (s->nerr == s->errcap) {
		size_t cap = s->errcap ? s->errcap * 2 : 8;
		struct ctr_err *e = realloc(s->err, cap * sizeof(*e));
		if (!e)
			return;
		s->err = e;
		s->errcap = cap;
	}
	s->err[s->nerr].src = (uint8_t)src;
	va_start(ap, fmt);
	vsnprintf(s->err[s->nerr].msg, sizeof(s->err[0].msg), fmt, ap);
	va_end(ap);
	s->nerr++;
}

const struct ctr *ctr_find(const struct ctr_set *s, enum ctr_source src, const char *where,
			   const char *name)
{
	for (size_t i = 0; i < s->n; i++)
		if (s->v[i].src == src && !strcmp(s->v[i].name, name) &&
		    (!where || !strcmp(s->v[i].where, where)))
			return &s->v[i];
	return NULL;
}

uint64_t ctr_sum(const struct ctr_set *s, enum ctr_source src, const char *name, bool *found)
{
	uint64_t sum = 0;

	for (size_t i = 0; i < s->n; i++)
		if (s->v[i].src == src && !strcmp(s->v[i].name, name)) {
			sum = ctr_sat_add(sum, s->v[i].value);
			if (found)
				*found = true;
		}
	return sum;
}

/* Whether @s lists the MRs of @where's device whole: "rxe0/mr3" -> the gauge "mrs" of "rxe0". */
static bool mrs_listed(const struct ctr_set *s, enum ctr_source src, const char *where)
{
	const char *slash = strrchr(where, '/');
	char dev[sizeof(((struct ctr *)0)->where)];

	if (src != SRC_NL_MR || !slash)
		return false;
	snprintf(dev, sizeof(dev), "%.*s", (int)(slash - where), where);
	return ctr_find(s, SRC_NL_MR, dev, "mrs") != NULL;
}

uint64_t ctr_inc_each(const struct ctr_set *prev, const struct ctr_set *cur, enum ctr_source src,
		      const char *name, bool *found)
{
	uint64_t sum = 0;

	for (size_t i = 0; i < cur->n; i++) {
		const struct ctr *c = &cur->v[i], *p;
		if (c->src != src || strcmp(c->name, name))
			continue;
		if ((p = ctr_find(prev, src, c->where, name)))
			sum = ctr_sat_add(sum, ctr_delta(p->value, c->value));
		else if (mrs_listed(prev, src, c->where))
			sum = ctr_sat_add(sum, c->value);	/* registered since: counted from 0 */
	}
	if (found)
		*found = (ctr_find(prev, src, NULL, name) || ctr_find(prev, src, NULL, "mrs")) &&
			 (ctr_find(cur, src, NULL, name) || ctr_find(cur, src, NULL, "mrs"));
	return sum;
}

static void root_pick(char *dst, const char *opt, const char *env, const char *def, bool *dflt)
{
	const char *e = getenv(env);
	const char *v = opt && *opt ? opt : e && *e ? e : def;

	snprintf(dst, PATH_MAX, "%s", v);
	/* "/" would make paths like //class: harmless, but keep them tidy */
	for (size_t n = strlen(dst); n > 1 && dst[n - 1] == '/'; n--)
		dst[n - 1] = 0;
	if (dflt)
		*dflt = !strcmp(dst, def);
}

void stats_roots_init(struct stats_roots *r, const char *sys, const char *debugfs,
		      const char *proc)
{
	root_pick(r->sys, sys, "ODPX_SYSFS_ROOT", "/sys", &r->sys_default);
	root_pick(r->debugfs, debugfs, "ODPX_DEBUGFS_ROOT", "/sys/kernel/debug", NULL);
	root_pick(r->proc, proc, "ODPX_PROCFS_ROOT", "/proc", NULL);
}

int ctr_parse_value(const char *t, size_t len, uint64_t *v)
{
	size_t i = 0, end = len;
	uint64_t x = 0;
	int base = 10;

	while (i < end && isspace((unsigned char)t[i]))
		i++;
	while (end > i && isspace((unsigned char)t[end - 1]))
		end--;
	if (i == end)
		return -ENODATA;
	if (end - i > 2 && t[i] == '0' && (t[i + 1] == 'x' || t[i + 1] == 'X')) {
		base = 16;
		i += 2;
	}
	for (; i < end; i++) {
		int d;
		char c = t[i];
		if (c >= '0' && c <= '9')
			d = c - '0';
		else if (base == 16 && c >= 'a' && c <= 'f')
			d = c - 'a' + 10;
		else if (base == 16 && c >= 'A' && c <= 'F')
			d = c - 'A' + 10;
		else
			return -EINVAL;
		if (x > (UINT64_MAX - (uint64_t)d) / (uint64_t)base)
			return -ERANGE;
		x = x * (uint64_t)base + (uint64_t)d;
	}
	*v = x;
	return 0;
}

int ctr_read_file(const char *path, uint64_t *v)
{
	char buf[128];
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);

	if (fd < 0)
		return errno == ENOENT || errno == ENOTDIR ? -ENOENT : -errno;
	n = read(fd, buf, sizeof(buf));
	close(fd);
	if (n < 0)
		return -errno;
	if (n == (ssize_t)sizeof(buf))
		return -EINVAL;	/* no counter is that long */
	return ctr_parse_value(buf, (size_t)n, v);
}

static const char *why(int r)
{
	switch (r) {
	case -ENODATA: return "empty file";
	case -EINVAL: return "not an unsigned number";
	case -ERANGE: return "value above 2^64-1";
	default: return strerror(-r);
	}
}

/* Read the named files of @dir as counters; absent ones are skipped. */
static int read_named(struct ctr_set *s, enum ctr_source src, const char *dir, const char *where,
		      const char *const *names, size_t n)
{
	char path[PATH_MAX + 64];
	int added = 0;

	for (size_t i = 0; i < n; i++) {
		uint64_t v;
		int r;
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		r = ctr_read_file(path, &v);
		if (r == -ENOENT)
			continue;
		if (r < 0) {
			ctr_error(s, src, "%s: %s", path, why(r));
			continue;
		}
		if (ctr_add(s, src, where, names[i], v, false) == 0)
			added++;
	}
	return added;
}

/* Read every regular file of @dir as a counter (hw_counters). */
static int read_all(struct ctr_set *s, enum ctr_source src, const char *dir, const char *where)
{
	char path[PATH_MAX + 300];
	struct dirent *d;
	DIR *dp = opendir(dir);
	int added = 0;

	if (!dp)
		return 0;
	while ((d = readdir(dp))) {
		uint64_t v;
		int r;
		if (d->d_name[0] == '.')
			continue;
		/* lifespan is the refresh period of the others, in ms: a setting */
		if (!strcmp(d->d_name, "lifespan"))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, d->d_name);
		r = ctr_read_file(path, &v);
		if (r == -ENOENT || r == -EISDIR)
			continue;
		if (r < 0) {
			ctr_error(s, src, "%s: %s", path, why(r));
			continue;
		}
		if (ctr_add(s, src, where, d->d_name, v, false) == 0)
			added++;
	}
	closedir(dp);
	return added;
}

static void read_line_file(const char *path, char *out, size_t len)
{
	FILE *f = fopen(path, "re");

	out[0] = 0;
	if (!f)
		return;
	if (fgets(out, (int)len, f))
		out[strcspn(out, "\n")] = 0;
	fclose(f);
}

static const char *const uverbs_files[] = {
	"num_page_faults", "num_page_fault_pages", "num_invalidations",
	"num_invalidation_pages", "num_prefetches_handled", "num_prefetch_pages",
	"invalidations_faults_contentions",
};

int src_uverbs_read(const struct stats_roots *r, const char *dev, struct ctr_set *s)
{
	char dir[PATH_MAX + 64], path[PATH_MAX + 512], ibdev[64];
	struct dirent *d;
	DIR *dp;
	int added = 0;

	snprintf(dir, sizeof(dir), "%s/class/infiniband_verbs", r->sys);
	if (!(dp = opendir(dir)))
		return 0;
	while ((d = readdir(dp))) {
		char sub[PATH_MAX + 400];
		if (strncmp(d->d_name, "uverbs", 6))
			continue;
		snprintf(sub, sizeof(sub), "%s/%s", dir, d->d_name);
		snprintf(path, sizeof(path), "%s/ibdev", sub);
		read_line_file(path, ibdev, sizeof(ibdev));
		if (dev && strcmp(dev, ibdev))
			continue;
		added += read_named(s, SRC_UVERBS, sub, ibdev[0] ? ibdev : d->d_name, uverbs_files,
				    sizeof(uverbs_files) / sizeof(uverbs_files[0]));
	}
	closedir(dp);
	return added;
}

static const char *const odp_stats_files[] = {
	"num_odp_mrs", "num_odp_mr_pages", "num_prefetch", "num_mrs_not_found",
	"num_failed_resolutions",
};

int src_debugfs_read(const struct stats_roots *r, struct ctr_set *s)
{
	char dir[PATH_MAX + 64];
	struct dirent *d;
	DIR *dp;
	int added = 0;

	snprintf(dir, sizeof(dir), "%s/mlx5", r->debugfs);
	if (!(dp = opendir(dir)))
		return 0;
	while ((d = readdir(dp))) {
		char sub[PATH_MAX + 400];
		if (d->d_name[0] == '.')
			continue;
		snprintf(sub, sizeof(sub), "%s/%s/odp_stats", dir, d->d_name);
		added += read_named(s, SRC_DEBUGFS, sub, d->d_name, odp_stats_files,
				    sizeof(odp_stats_files) / sizeof(odp_stats_files[0]));
	}
	closedir(dp);
	return added;
}

int src_devices(const struct stats_roots *r, char names[][64], int max)
{
	char dir[PATH_MAX + 64];
	struct dirent *d;
	DIR *dp;
	int n = 0;

	snprintf(dir, sizeof(dir), "%s/class/infiniband", r->sys);
	if (!(dp = opendir(dir)))
		return 0;
	while ((d = readdir(dp)) && n < max) {
		if (d->d_name[0] == '.')
			continue;
		snprintf(names[n++], 64, "%.63s", d->d_name);
	}
	closedir(dp);
	/* stable order for the columns and the tests */
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
			char t[64];
			memcpy(t, names[j], 64);
			memcpy(names[j], names[j - 1], 64);
			memcpy(names[j - 1], t, 64);
		}
	return n;
}

int src_hw_counters_read(const struct stats_roots *r, const char *dev, struct ctr_set *s)
{
	char devs[32][64];
	int nd = src_devices(r, devs, 32), added = 0;

	for (int i = 0; i < nd; i++) {
		char dir[PATH_MAX + 160], where[64];
		struct dirent *d;
		DIR *dp;

		if (dev && strcmp(dev, devs[i]))
			continue;
		/* device-wide counters (some drivers), then per port */
		snprintf(dir, sizeof(dir), "%s/class/infiniband/%.64s/hw_counters", r->sys, devs[i]);
		added += read_all(s, SRC_HW_COUNTERS, dir, devs[i]);
		snprintf(dir, sizeof(dir), "%s/class/infiniband/%.64s/ports", r->sys, devs[i]);
		if (!(dp = opendir(dir)))
			continue;
		while ((d = readdir(dp))) {
			char sub[PATH_MAX + 400];
			if (d->d_name[0] == '.')
				continue;
			snprintf(sub, sizeof(sub), "%s/%.200s/hw_counters", dir, d->d_name);
			snprintf(where, sizeof(where), "%.40s/%.8s", devs[i], d->d_name);
			added += read_all(s, SRC_HW_COUNTERS, sub, where);
		}
		closedir(dp);
	}
	return added;
}

/* /proc/vmstat: the fault counters and the locked-page gauge. */
/* "name value" lines of @path, those @keep accepts: counters of @src at @where. */
static int read_kv_file(struct ctr_set *s, enum ctr_source src, const char *path,
			const char *where, bool (*keep)(const char *name))
{
	char line[256];
	int added = 0, lineno = 0;
	FILE *f;

	if (!(f = fopen(path, "re")))
		return 0;
	while (fgets(line, sizeof(line), f)) {
		char *sp = strchr(line, ' ');
		uint64_t v;
		int rc;

		lineno++;
		if (!sp) {
			ctr_error(s, src, "%s:%d: no value", path, lineno);
			continue;
		}
		*sp = 0;
		if (!keep(line))
			continue;
		if ((rc = ctr_parse_value(sp + 1, strlen(sp + 1), &v)) < 0) {
			ctr_error(s, src, "%s:%d: %s: %s", path, lineno, line, why(rc));
			continue;
		}
		if (ctr_add(s, src, where, line, v, !strcmp(line, "nr_mlock")) == 0)
			added++;
	}
	fclose(f);
	return added;
}

/* faults (workingset_refault_* included), reclaim scans, and a few more */
static bool vmstat_keep(const char *n)
{
	return strstr(n, "fault") || !strncmp(n, "pgscan_", 7) || !strcmp(n, "nr_mlock") ||
	       !strcmp(n, "pgmigrate_success") || !strcmp(n, "thp_split_pmd");
}

int src_vmstat_read(const struct stats_roots *r, struct ctr_set *s)
{
	char path[PATH_MAX + 16];

	snprintf(path, sizeof(path), "%s/vmstat", r->proc);
	return read_kv_file(s, SRC_VMSTAT, path, "", vmstat_keep);
}

static bool memcg_keep(const char *n)
{
	return !strncmp(n, "workingset_refault", 18) || !strcmp(n, "pgmajfault") ||
	       !strcmp(n, "pgfault") || !strcmp(n, "pgscan") || !strcmp(n, "pgsteal");
}

int src_memcg_read(const struct stats_roots *r, pid_t pid, struct ctr_set *s)
{
	static const char *const mounts[] = { "fs/cgroup", "fs/cgroup/unified" };
	char path[PATH_MAX * 2 + 64], line[PATH_MAX + 8], cg[sizeof(line)] = "";
	FILE *f;

	if (pid)
		snprintf(path, sizeof(path), "%s/%d/cgroup", r->proc, (int)pid);
	else
		snprintf(path, sizeof(path), "%s/self/cgroup", r->proc);
	if (!(f = fopen(path, "re")))
		return 0;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "0::/", 4)) {	/* the v2 hierarchy */
			line[strcspn(line, "\n")] = 0;
			snprintf(cg, sizeof(cg), "%s", line + 3);
			break;
		}
	fclose(f);
	if (!cg[0] || strstr(cg, "/.."))
		return 0;
	for (size_t i = 0; i < sizeof(mounts) / sizeof(mounts[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s%s%smemory.stat", r->sys, mounts[i], cg,
			 cg[strlen(cg) - 1] == '/' ? "" : "/");
		if (access(path, R_OK) == 0)
			return read_kv_file(s, SRC_MEMCG, path, cg, memcg_keep);
	}
	return 0;
}

/*
 * Process @pid's main thread is a zombie: has the process ended, or only
 * that thread (pthread_exit() in main, the others running)?  Ended when no
 * task of it is other than a zombie or dead.
 */
static bool pid_ended(const struct stats_roots *r, pid_t pid)
{
	char path[PATH_MAX + 64], buf[512], *p;
	struct dirent *d;
	bool ended = true;
	DIR *dir;

	snprintf(path, sizeof(path), "%s/%d/task", r->proc, (int)pid);
	if (!(dir = opendir(path)))
		return true;
	while (ended && (d = readdir(dir))) {
		int fd;
		ssize_t n;

		if (d->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%d/task/%.20s/stat", r->proc, (int)pid, d->d_name);
		if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
			continue;	/* gone meanwhile */
		n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (n <= 0)
			continue;
		buf[n] = 0;
		if ((p = strrchr(buf, ')')) && p[1] == ' ' && p[2] != 'Z' && p[2] != 'X')
			ended = false;
	}
	closedir(dir);
	return ended;
}

/*
 * /proc/<pid>/stat: minflt (field 10) and majflt (12), after the ")" of
 * comm; the start time (22) tells the process from a later one given its PID.
 */
int src_pid_stat_read(const struct stats_roots *r, pid_t pid, struct ctr_set *s, uint64_t *start)
{
	char path[PATH_MAX + 32], buf[1024], where[24], *p, *tok, *save = NULL;
	uint64_t minflt = 0, majflt = 0;
	int fd, field = 2;
	bool got_min = false, got_maj = false;
	ssize_t n;

	if (start)
		*start = 0;
	snprintf(path, sizeof(path), "%s/%d/stat", r->proc, (int)pid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n < 0)
		return -errno;
	buf[n] = 0;
	if (!(p = strrchr(buf, ')'))) {
		ctr_error(s, SRC_PROC_PID, "%s: no ')' after the command name", path);
		return -EINVAL;
	}
	for (tok = strtok_r(p + 1, " \n", &save); tok; tok = strtok_r(NULL, " \n", &save)) {
		field++;
		if (field == 3 && (*tok == 'Z' || *tok == 'X') && pid_ended(r, pid))
			return -ESRCH;	/* ended, not yet reaped: nothing of it runs */
		if (field == 10)
			got_min = ctr_parse_value(tok, strlen(tok), &minflt) == 0;
		else if (field == 12)
			got_maj = ctr_parse_value(tok, strlen(tok), &majflt) == 0;
		else if (field == 22 && start && ctr_parse_value(tok, strlen(tok), start) < 0)
			*start = 0;
		if (field >= 22)
			break;
	}
	if (!got_min || !got_maj) {
		ctr_error(s, SRC_PROC_PID, "%s: minflt/majflt fields missing or not numbers", path);
		return -EINVAL;
	}
	snprintf(where, sizeof(where), "%d", (int)pid);
	ctr_add(s, SRC_PROC_PID, where, "minflt", minflt, false);
	ctr_add(s, SRC_PROC_PID, where, "majflt", majflt, false);
	return 2;
}
