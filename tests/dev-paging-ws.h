/* SPDX-License-Identifier: MIT */
/*
 * dev-paging-ws.h - a working set swept by RDMA under a memory limit, shared by the guest
 * test dev-paging-workingset and the workingset experiment of bench/odpx-paging.
 * Header-only, static; include after dev-util.h.
 *
 * The memory limit is a cgroup v2 made for the run: ws_cg_create() makes
 * <parent>/<name> with memory.max set (parent: the cgroup2 mount's root by default, or a
 * directory delegated to the caller), and the process that runs the working set writes
 * itself into its cgroup.procs (ws_cg_enter()).  Pages over the limit go to swap, so swap
 * must be on (ws_swap_bytes()).
 *
 * The sweep checks every transfer byte for byte.  The region holds chunks of WS_CHUNK bytes,
 * each with a generation: chunk i of generation g is the pattern ws_pattern(i, g).  One step
 * on chunk i: an RDMA WRITE of the chunk from the region into a sink buffer (the device reads
 * the region's pages, faulting them in), the sink compared with the pattern of the chunk's
 * generation, then an RDMA READ of the next generation's pattern from a source buffer into
 * the chunk (the device writes the region's pages).  So every byte the device wrote into the
 * region is read back by the device on the next pass, and ws_check_region() compares the
 * whole region with the CPU at the end.  Transfers are WS_CHUNK bytes at chunk-aligned
 * addresses: rxe corrupts ODP transfers that do not start at a page offset of 0
 * (dev-rxe-odp-offset).
 */
#ifndef ODPX_DEV_PAGING_WS_H
#define ODPX_DEV_PAGING_WS_H

#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <sys/statfs.h>

#include "odpx.h"

#define WS_CHUNK	(64 * 1024)
#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif
#define WS_CG_ROOT	"/sys/fs/cgroup"

/* ---- the memory cgroup ---- */

struct ws_cg {
	char dir[PATH_MAX];
};

static inline int ws_write_file(const char *dir, const char *file, const char *text)
{
	char path[PATH_MAX + 64];
	ssize_t n;
	int fd, r = 0;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	if ((fd = open(path, O_WRONLY | O_CLOEXEC)) < 0)
		return -errno;
	n = write(fd, text, strlen(text));
	if (n < 0)
		r = -errno;
	else if ((size_t)n != strlen(text))
		r = -EIO;
	close(fd);
	return r;
}

/* The value of "@key value" in <dir>/<file> (memory.stat, memory.events); -ENOENT if absent. */
static inline int64_t ws_cg_value(const struct ws_cg *cg, const char *file, const char *key)
{
	char path[PATH_MAX + 64], line[256];
	size_t kl = strlen(key);
	int64_t v = -ENOENT;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", cg->dir, file);
	if (!(f = fopen(path, "re")))
		return -errno;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, kl) && line[kl] == ' ') {
			v = (int64_t)strtoll(line + kl + 1, NULL, 10);
			break;
		}
	fclose(f);
	return v;
}

/*
 * Make <parent>/<name> (parent NULL: the cgroup2 root /sys/fs/cgroup) with memory.max =
 * @max_bytes and memory.swap.max unlimited, enabling the memory controller in the parent's
 * subtree_control if it is not.  Returns 0, or -errno with what failed in @why.
 */
static inline int ws_cg_create(struct ws_cg *cg, const char *parent, const char *name,
			       uint64_t max_bytes, char *why, size_t whylen)
{
	char num[32], ctl[512] = "";
	struct statfs sf;
	FILE *f;
	int r;

	if (!parent)
		parent = WS_CG_ROOT;
	if (statfs(parent, &sf) < 0 || sf.f_type != CGROUP2_SUPER_MAGIC) {
		snprintf(why, whylen, "%s is not a cgroup v2 directory", parent);
		return -ENOENT;
	}
	snprintf(cg->dir, sizeof(cg->dir), "%s/cgroup.subtree_control", parent);
	if ((f = fopen(cg->dir, "re"))) {
		if (!fgets(ctl, sizeof(ctl), f))
			ctl[0] = 0;
		fclose(f);
	}
	if (!strstr(ctl, "memory") && (r = ws_write_file(parent, "cgroup.subtree_control", "+memory"))) {
		snprintf(why, whylen, "cannot enable the memory controller in %s/cgroup.subtree_control: "
			 "%s", parent, strerror(-r));
		return r;
	}
	snprintf(cg->dir, sizeof(cg->dir), "%s/%s", parent, name);
	if (mkdir(cg->dir, 0755) < 0 && errno != EEXIST) {
		r = -errno;
		snprintf(why, whylen, "mkdir %s: %s", cg->dir, strerror(errno));
		return r;
	}
	snprintf(num, sizeof(num), "%" PRIu64, max_bytes);
	if ((r = ws_write_file(cg->dir, "memory.max", num)) ||
	    (r = ws_write_file(cg->dir, "memory.swap.max", "max"))) {
		snprintf(why, whylen, "%s: cannot set memory.max and memory.swap.max: %s", cg->dir,
			 strerror(-r));
		rmdir(cg->dir);
		return r;
	}
	return 0;
}

/* Move the calling process into @cg. */
static inline int ws_cg_enter(const struct ws_cg *cg)
{
	return ws_write_file(cg->dir, "cgroup.procs", "0");
}

static inline void ws_cg_remove(const struct ws_cg *cg)
{
	rmdir(cg->dir);
}

/* Swap space free, from /proc/meminfo (0: no swap). */
static inline uint64_t ws_swap_bytes(void)
{
	unsigned long long kib = 0;
	char line[128];
	FILE *f = fopen("/proc/meminfo", "re");

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "SwapFree: %llu kB", &kib) == 1)
			break;
	if (f)
		fclose(f);
	return (uint64_t)kib * 1024;
}

/* ---- the working set ---- */

/* Chunk @i of generation @gen: 64-bit words of its byte address and generation, mixed. */
static inline void ws_pattern(void *p, size_t i, uint32_t gen)
{
	uint64_t *w = p, base = (uint64_t)i * WS_CHUNK;

	for (size_t k = 0; k < WS_CHUNK / 8; k++) {
		uint64_t x = (base + 8 * k) ^ ((uint64_t)gen << 40);
		x ^= x >> 29;
		x *= 0xbf58476d1ce4e5b9ULL;
		w[k] = x ^ (x >> 32);
	}
}

struct ws {
	struct dev *d;
	struct odpx_ctx *ctx;
	unsigned char *region, *sink, *src, *want;
	size_t nchunks;
	uint32_t *gen;
	struct odpx_mr *mr, *sink_mr, *src_mr;
	uint64_t bytes, transfers;	/* moved by the device, both ways */
};

/*
 * Map @ws_bytes (a multiple of WS_CHUNK) and write every chunk's generation 0 with the CPU
 * (over a memory limit the pages go to swap as they are written); the sink and source
 * buffers are registered on @ctx with remote access.  0 or -errno (printed).
 */
static inline int ws_setup(struct ws *w, struct dev *d, struct odpx_ctx *ctx, size_t ws_bytes)
{
	uint32_t acc = ODPX_ACCESS_LOCAL_WRITE | ODPX_ACCESS_REMOTE_READ | ODPX_ACCESS_REMOTE_WRITE;
	int r;

	memset(w, 0, sizeof(*w));
	w->d = d;
	w->ctx = ctx;
	w->nchunks = ws_bytes / WS_CHUNK;
	w->region = mmap(NULL, ws_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	w->gen = calloc(w->nchunks, sizeof(*w->gen));
	w->sink = dev_map(WS_CHUNK, NULL);
	w->src = dev_map(WS_CHUNK, NULL);
	w->want = dev_map(WS_CHUNK, NULL);
	if (w->region == MAP_FAILED || !w->gen) {
		printf("ws_setup: no memory for %zu bytes\n", ws_bytes);
		return -ENOMEM;
	}
	for (size_t i = 0; i < w->nchunks; i++)
		ws_pattern(w->region + i * WS_CHUNK, i, 0);
	if ((r = odpx_reg(ctx, w->sink, WS_CHUNK, acc, &w->sink_mr)) < 0 ||
	    (r = odpx_reg(ctx, w->src, WS_CHUNK, acc, &w->src_mr)) < 0) {
		printf("ws_setup: odpx_reg of a %d-byte buffer: %s\n", WS_CHUNK, strerror(-r));
		return r;
	}
	return 0;
}

/* Register the region (the point where pinning meets the limit): 0 or -errno. */
static inline int ws_register(struct ws *w)
{
	return odpx_reg(w->ctx, w->region, w->nchunks * WS_CHUNK, ODPX_ACCESS_LOCAL_WRITE, &w->mr);
}

/* One step on chunk @i (see the top of this file): 0, or -EIO after printing what differed. */
static inline int ws_step(struct ws *w, size_t i)
{
	struct ibv_mr lmr = { .lkey = odpx_mr_lkey(w->mr) };
	unsigned char *chunk = w->region + i * WS_CHUNK;
	char what[96];
	int r;

	memset(w->sink, 0, WS_CHUNK);
	r = dev_rdma(w->d, IBV_WR_RDMA_WRITE, &lmr, chunk, WS_CHUNK, w->sink, odpx_mr_rkey(w->sink_mr));
	if (r)
		return r;
	ws_pattern(w->want, i, w->gen[i]);
	snprintf(what, sizeof(what), "RDMA WRITE of chunk %zu (generation %u)", i, w->gen[i]);
	if (memcmp(w->sink, w->want, WS_CHUNK) && !dev_same(what, w->sink, w->want, WS_CHUNK))
		return -EIO;
	ws_pattern(w->src, i, w->gen[i] + 1);
	r = dev_rdma(w->d, IBV_WR_RDMA_READ, &lmr, chunk, WS_CHUNK, w->src, odpx_mr_rkey(w->src_mr));
	if (r)
		return r;
	w->gen[i]++;
	w->bytes += 2 * WS_CHUNK;
	w->transfers += 2;
	return 0;
}

/*
 * Steps over chunks [0, @n) in order, again and again, until @until_ns (CLOCK_MONOTONIC) or
 * @stop returns true (checked every chunk).  @pos carries the next chunk between calls.
 */
static inline int ws_sweep(struct ws *w, size_t n, size_t *pos, uint64_t until_ns,
			   bool (*stop)(void *), void *arg)
{
	int r;

	for (;;) {
		struct timespec ts;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		if ((uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec >= until_ns)
			return 0;
		if (stop && stop(arg))
			return 0;
		if (*pos >= n)
			*pos = 0;
		if ((r = ws_step(w, (*pos)++)))
			return r;
	}
}

/* The whole region against the generations, with the CPU: 0 or -EIO (printed). */
static inline int ws_check_region(struct ws *w)
{
	char what[96];

	for (size_t i = 0; i < w->nchunks; i++) {
		ws_pattern(w->want, i, w->gen[i]);
		snprintf(what, sizeof(what), "region chunk %zu (generation %u), read by the CPU", i,
			 w->gen[i]);
		if (memcmp(w->region + i * WS_CHUNK, w->want, WS_CHUNK) &&
		    !dev_same(what, w->region + i * WS_CHUNK, w->want, WS_CHUNK))
			return -EIO;
	}
	return 0;
}

static inline void ws_teardown(struct ws *w)
{
	if (w->mr)
		odpx_dereg(w->ctx, w->mr);
	if (w->sink_mr)
		odpx_dereg(w->ctx, w->sink_mr);
	if (w->src_mr)
		odpx_dereg(w->ctx, w->src_mr);
	if (w->region && w->region != MAP_FAILED)
		munmap(w->region, w->nchunks * WS_CHUNK);
	munmap(w->sink, WS_CHUNK);
	munmap(w->src, WS_CHUNK);
	munmap(w->want, WS_CHUNK);
	free(w->gen);
	memset(w, 0, sizeof(*w));
}

#endif
