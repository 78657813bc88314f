/* SPDX-License-Identifier: MIT */
/*
 * stats-forge.h - forged stats segments for the stats tests (header-only):
 * a segment as its writer lays it out, named whole in /dev/shm, with the
 * OFD read lock its writer holds.
 */
#ifndef ODPX_TEST_STATS_FORGE_H
#define ODPX_TEST_STATS_FORGE_H

#include "test.h"
#include "../sysfs-stats/counters.h"
#include "segment.h"

static inline void forge_path(char *path, size_t len, pid_t pid, unsigned n)
{
	snprintf(path, len, "/dev/shm/" ODPX_SHM_PREFIX "%d.%u", (int)pid, n);
}

static inline size_t forge_bytes(uint32_t cold_off)
{
	return (cold_off + sizeof(struct cold_stats) + 4095) & ~(size_t)4095;
}

/*
 * Segment @n of @pid, as its writer would lay it out but at these offsets,
 * @hits in its first shard.  Returns its descriptor, read-write, holding
 * the writer's OFD read lock: closing it is the writer's end, whatever its
 * PID.  The file is written under another name, locked, then renamed.
 */
static inline int forge_at(pid_t pid, unsigned n, uint32_t shards_off, uint32_t cold_off,
			   uint64_t hits)
{
	struct flock lk = { .l_type = F_RDLCK, .l_whence = SEEK_SET };
	size_t bytes = forge_bytes(cold_off);
	char path[64], tmp[80];
	char *p = calloc(1, bytes);
	struct seg_hdr *h = (struct seg_hdr *)p;
	int fd;

	CHECK(p, "calloc");
	forge_path(path, sizeof(path), pid, n);
	seg_header_init(h, bytes, pid, n);
	h->shards_off = shards_off;
	h->cold_off = cold_off;
	/* maybe misaligned */
	memcpy(p + shards_off + offsetof(struct stat_shard, hits), &hits, sizeof(hits));
	seg_header_publish(h);
	snprintf(tmp, sizeof(tmp), "%s.new", path);	/* not a segment name */
	fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	CHECK(fd >= 0 && write(fd, p, bytes) == (ssize_t)bytes, "write %s: %s", tmp,
	      strerror(errno));
	CHECK(fcntl(fd, F_OFD_SETLK, &lk) == 0, "lock %s: %s", tmp, strerror(errno));
	CHECK(rename(tmp, path) == 0, "rename %s: %s", path, strerror(errno));
	free(p);
	return fd;
}

/* The same at the offsets of a writer of this build. */
static inline int forge(pid_t pid, unsigned n, uint64_t hits)
{
	return forge_at(pid, n, SEG_HDR_BYTES, SEG_COLD_OFF, hits);
}

#endif
