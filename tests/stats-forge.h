/* SPDX-License-Identifier: MIT */
/*
 * stats-forge.h - forged stats segments for the stats tests (header-only):
 * a segment as its writer lays it out, in a memfd of the caller's
 * descriptor table, as a writer holds it.
 */
#ifndef ODPX_TEST_STATS_FORGE_H
#define ODPX_TEST_STATS_FORGE_H

#include <sys/stat.h>

#include "test.h"
#include "../sysfs-stats/counters.h"
#include "segment.h"

/*
 * Segment @n naming @pid (the caller's own, or another's to test whose a
 * segment is), with @hits in its first shard, as a writer of @version
 * whose segments are @bytes long would make it.  Returns its descriptor,
 * read-write: closing it is the writer's end.
 */
static inline int forge_at(pid_t pid, unsigned n, uint32_t version, size_t bytes, uint64_t hits)
{
	char name[64];
	char *p = calloc(1, bytes > SEG_BYTES ? bytes : SEG_BYTES);	/* @bytes may be short */
	struct seg_hdr *h = (struct seg_hdr *)p;
	int fd;

	CHECK(p, "calloc");
	snprintf(name, sizeof(name), ODPX_SHM_PREFIX "%d.%u", (int)pid, n);
	seg_header_init(h, pid, n);
	h->version = version;
	memcpy(p + SEG_HDR_BYTES + offsetof(struct stat_shard, hits), &hits, sizeof(hits));
	seg_header_publish(h);
	fd = memfd_create(name, MFD_CLOEXEC);
	CHECK(fd >= 0 && fchmod(fd, 0600) == 0 && write(fd, p, bytes) == (ssize_t)bytes,
	      "memfd %s: %s", name, strerror(errno));
	free(p);
	return fd;
}

/* The same as a writer of this build. */
static inline int forge(pid_t pid, unsigned n, uint64_t hits)
{
	return forge_at(pid, n, ODPX_SHM_VERSION, SEG_BYTES, hits);
}

#endif
