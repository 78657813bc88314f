// SPDX-License-Identifier: MIT
/*
 * sources.c - the counter sets, and counters from files: the legacy uverbs
 * files, mlx5 debugfs, port hw_counters, /proc and the memory cgroup.
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
	s->n = s->nerr = 0;
}

void ctr_set_free(struct ctr_set *s)
{
	free(s->v);
	free(s->err);
	ctr_set_init(s);
}

int ctr_grow(void *array, size_t *cap, size_t n, size_t size)
{
	size_t c = n < 8 ? 16 : 2 * n;
	void *v;

	if (n <= *cap)
		return 0;
	memcpy(&v, array, sizeof(v));
	if (!(v = realloc(v, c * size)))
		return -ENOMEM;
	memcpy(array, &v, sizeof(v));
	*cap = c;
	return 0;
}

int ctr_add(struct ctr_set *s, enum ctr_source src, const char *where, const char *name,
	    uint64_t value, bool gauge)
{
	struct ctr *c;

	if (ctr_grow(&s->v, &s->cap, s->n + 1, sizeof(*s->v)) < 0)
		return -ENOMEM;
	c = &s->v[s->n++];
	*c = (struct ctr){ .src = (uint8_t)src, .gauge = gauge, .value = value };
	snprintf(c->name, sizeof(c->name), "%s", name);
	snprintf(c->where, sizeof(c->where), "%s", where ? where : "");
	return 0;
}

void ctr_error(struct ctr_set *s, const char *fmt, ...)
{
	va_list ap;

	if (ctr_grow(&s->err, &s->errcap, s->nerr + 1, sizeof(*s->err)) < 0)
		return;
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

const struct ctr *ctr_find_near(const struct ctr_set *s, ptrdiff_t hint, enum ctr_source src,
				const char *where, const char *name)
{
	const struct ctr *c = hint >= 0 && (size_t)hint < s->n ? &s->v[hint] : NULL;

	if (c && c->src == src && !strcmp(c->name, name) && !strcmp(c->where, where))
		return c;
	return ctr_find(s, src, where, name);
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
	ptrdiff_t off = 0;	/* of the last counter found in @prev from its index in @cur */

	for (size_t i = 0; i < cur->n; i++) {
		const struct ctr *c = &cur->v[i], *p;
		if (c->src != src || strcmp(c->name, name))
			continue;
		if ((p = ctr_find_near(prev, (ptrdiff_t)i + off, src, c->where, name))) {
			off = (p - prev->v) - (ptrdiff_t)i;
			sum = ctr_sat_add(sum, ctr_delta(p->value, c->value));
		} else if (mrs_listed(prev, src, c->where))
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
	char buf[128], *end;
	size_t i = 0;
	bool hex;

	while (len && isspace((unsigned char)t[len - 1]))
		len--;
	while (i < len && isspace((unsigned char)t[i]))
		i++;
	if (i == len)
		return -ENODATA;
	if (len - i >= sizeof(buf))
		return -ERANGE;
	memcpy(buf, t + i, len - i);
	buf[len - i] = 0;
	hex = buf[0] == '0' && (buf[1] == 'x' || buf[1] == 'X');
	/* strtoull() takes a sign and blanks: a digit comes first */
	if (!(hex ? isxdigit((unsigned char)buf[2]) : isdigit((unsigned char)buf[0])))
		return -EINVAL;
	errno = 0;
	unsigned long long x = strtoull(buf, &end, hex ? 16 : 10);
	if (end != buf + (len - i))
		return -EINVAL;
	if (errno)
		return -ERANGE;
	*v = x;
	return 0;
}

/* The first @cap - 1 bytes of @path into @buf, NUL-terminated: their length, or -errno */
static ssize_t read_text(const char *path, char *buf, size_t cap)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	ssize_t n = fd < 0 ? -errno : read(fd, buf, cap - 1);

	if (n < 0 && fd >= 0)
		n = -errno;
	if (fd >= 0)
		close(fd);
	buf[n > 0 ? n : 0] = 0;
	return n;
}

int ctr_read_file(const char *path, uint64_t *v)
{
	char buf[129];
	ssize_t n = read_text(path, buf, sizeof(buf));

	if (n == -ENOENT || n == -ENOTDIR)
		return -ENOENT;
	if (n < 0)
		return (int)n;
	if (n == (ssize_t)sizeof(buf) - 1)
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

static int not_dot(const struct dirent *d)
{
	return d->d_name[0] != '.';
}

/* The entries of @dir but the dot files, sorted: their count, 0 if it cannot be read */
static int list(const char *dir, struct dirent ***l)
{
	int n = scandir(dir, l, not_dot, alphasort);

	if (n < 0)
		*l = NULL;
	return n < 0 ? 0 : n;
}

static void list_free(struct dirent **l, int n)
{
	while (n-- > 0)
		free(l[n]);
	free(l);
}

/*
 * Counters of @src at @where from the files of @dir: those of @names (NULL
 * ended; an absent one is skipped), or with @names NULL every file but
 * lifespan (hw_counters: the refresh period of the others in ms, a setting).
 */
static int read_dir(struct ctr_set *s, enum ctr_source src, const char *dir, const char *where,
		    const char *const *names)
{
	char path[PATH_MAX + 300];
	struct dirent **l = NULL;
	int n = names ? 0 : list(dir, &l), added = 0, r;
	uint64_t v;

	for (int i = 0; names ? names[i] != NULL : i < n; i++) {
		const char *name = names ? names[i] : l[i]->d_name;

		snprintf(path, sizeof(path), "%s/%s", dir, name);
		if (!strcmp(name, "lifespan") || (r = ctr_read_file(path, &v)) == -ENOENT ||
		    (r == -EISDIR && !names))
			continue;
		if (r < 0)
			ctr_error(s, "%s: %s", path, why(r));
		else if (ctr_add(s, src, where, name, v, false) == 0)
			added++;
	}
	list_free(l, n);
	return added;
}

int src_uverbs_read(const struct stats_roots *r, const char *dev, struct ctr_set *s)
{
	static const char *const files[] = {
		"num_page_faults", "num_page_fault_pages", "num_invalidations",
		"num_invalidation_pages", "num_prefetches_handled", "num_prefetch_pages",
		"invalidations_faults_contentions", NULL,
	};
	char dir[PATH_MAX + 64], sub[PATH_MAX + 400], ibdev[64];
	struct dirent **l;
	int n, added = 0;

	snprintf(dir, sizeof(dir), "%s/class/infiniband_verbs", r->sys);
	n = list(dir, &l);
	for (int i = 0; i < n; i++) {
		if (strncmp(l[i]->d_name, "uverbs", 6))
			continue;
		snprintf(sub, sizeof(sub), "%s/%s/ibdev", dir, l[i]->d_name);
		read_text(sub, ibdev, sizeof(ibdev));
		ibdev[strcspn(ibdev, "\n")] = 0;
		if (dev && strcmp(dev, ibdev))
			continue;
		*strrchr(sub, '/') = 0;
		added += read_dir(s, SRC_UVERBS, sub, ibdev[0] ? ibdev : l[i]->d_name, files);
	}
	list_free(l, n);
	return added;
}

int src_debugfs_read(const struct stats_roots *r, struct ctr_set *s)
{
	static const char *const files[] = {
		"num_odp_mrs", "num_odp_mr_pages", "num_prefetch", "num_mrs_not_found",
		"num_failed_resolutions", NULL,
	};
	char dir[PATH_MAX + 64], sub[PATH_MAX + 400];
	struct dirent **l;
	int n, added = 0;

	snprintf(dir, sizeof(dir), "%s/mlx5", r->debugfs);
	n = list(dir, &l);
	for (int i = 0; i < n; i++) {
		snprintf(sub, sizeof(sub), "%s/%s/odp_stats", dir, l[i]->d_name);
		added += read_dir(s, SRC_DEBUGFS, sub, l[i]->d_name, files);
	}
	list_free(l, n);
	return added;
}

int src_hw_counters_read(const struct stats_roots *r, const char *dev, struct ctr_set *s)
{
	char dir[PATH_MAX + 160], sub[PATH_MAX + 400], where[64];
	struct dirent **devs, **ports;
	int nd, np, added = 0;

	snprintf(dir, sizeof(dir), "%s/class/infiniband", r->sys);
	nd = list(dir, &devs);
	for (int i = 0; i < nd; i++) {
		const char *name = devs[i]->d_name;

		if (dev && strcmp(dev, name))
			continue;
		/* device-wide counters (some drivers), then per port */
		snprintf(sub, sizeof(sub), "%s/%.64s/hw_counters", dir, name);
		added += read_dir(s, SRC_HW_COUNTERS, sub, name, NULL);
		snprintf(sub, sizeof(sub), "%s/%.64s/ports", dir, name);
		np = list(sub, &ports);
		for (int k = 0; k < np; k++) {
			char pdir[PATH_MAX + 700];
			snprintf(pdir, sizeof(pdir), "%s/%.200s/hw_counters", sub, ports[k]->d_name);
			snprintf(where, sizeof(where), "%.40s/%.8s", name, ports[k]->d_name);
			added += read_dir(s, SRC_HW_COUNTERS, pdir, where, NULL);
		}
		list_free(ports, np);
	}
	list_free(devs, nd);
	return added;
}

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
			ctr_error(s, "%s:%d: no value", path, lineno);
			continue;
		}
		*sp = 0;
		if (!keep(line))
			continue;
		if ((rc = ctr_parse_value(sp + 1, strlen(sp + 1), &v)) < 0) {
			ctr_error(s, "%s:%d: %s: %s", path, lineno, line, why(rc));
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

/* @pid's main thread is a zombie: has the process ended (no task but zombies), or that thread? */
static bool pid_ended(const struct stats_roots *r, pid_t pid)
{
	char path[PATH_MAX + 64], buf[512], *p;
	struct dirent **l;
	bool ended = true;
	int n;

	snprintf(path, sizeof(path), "%s/%d/task", r->proc, (int)pid);
	n = list(path, &l);
	for (int i = 0; ended && i < n; i++) {
		snprintf(path, sizeof(path), "%s/%d/task/%.20s/stat", r->proc, (int)pid, l[i]->d_name);
		/* a task gone meanwhile is no running one */
		if (read_text(path, buf, sizeof(buf)) > 0 && (p = strrchr(buf, ')')) && p[1] == ' ' &&
		    p[2] != 'Z' && p[2] != 'X')
			ended = false;
	}
	list_free(l, n);
	return ended;
}

/*
 * /proc/<pid>/stat after the ")" of comm: the state (field 3), minflt (10),
 * majflt (12), and the start time (22) that tells the process from a later
 * one given its PID.
 */
int src_pid_stat_read(const struct stats_roots *r, pid_t pid, struct ctr_set *s, uint64_t *start)
{
	char path[PATH_MAX + 32], buf[1024], where[24], *p, *f[20], *save = NULL;
	uint64_t minflt, majflt;
	int nf = 0;		/* f[i]: field i + 3 */
	ssize_t n;

	if (start)
		*start = 0;
	snprintf(path, sizeof(path), "%s/%d/stat", r->proc, (int)pid);
	if ((n = read_text(path, buf, sizeof(buf))) < 0)
		return n == -ENOENT ? -ESRCH : (int)n;
	if (!(p = strrchr(buf, ')'))) {
		ctr_error(s, "%s: no ')' after the command name", path);
		return -EINVAL;
	}
	for (p = strtok_r(p + 1, " \n", &save); p && nf < 20; p = strtok_r(NULL, " \n", &save))
		f[nf++] = p;
	if (nf && (*f[0] == 'Z' || *f[0] == 'X') && pid_ended(r, pid))
		return -ESRCH;	/* ended, not yet reaped: nothing of it runs */
	if (nf < 10 || ctr_parse_value(f[7], strlen(f[7]), &minflt) < 0 ||
	    ctr_parse_value(f[9], strlen(f[9]), &majflt) < 0) {
		ctr_error(s, "%s: minflt/majflt fields missing or not numbers", path);
		return -EINVAL;
	}
	if (start && nf == 20 && ctr_parse_value(f[19], strlen(f[19]), start) < 0)
		*start = 0;
	snprintf(where, sizeof(where), "%d", (int)pid);
	ctr_add(s, SRC_PROC_PID, where, "minflt", minflt, false);
	ctr_add(s, SRC_PROC_PID, where, "majflt", majflt, false);
	return 2;
}
