// SPDX-License-Identifier: MIT
/*
 * vma.c - what mapping holds an address: the PROCMAP_QUERY ioctl on
 * /proc/self/maps (Linux 6.11+), else a parse of /proc/self/maps.
 *
 * A miss needs the VMA's bounds (odpx watches whole VMAs, which never splits
 * one) and whether it is anonymous and private: only such memory raises a
 * userfaultfd event whenever its pages change.  Truncation, hole punching
 * and shmdt replace shared or file pages silently, and truncation even drops
 * private COW copies of file pages, so any file-backed or shared VMA is served
 * in direct mode.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "monitor_priv.h"

/* uapi/linux/fs.h of 6.11; bookworm's headers predate it */
struct odpx_procmap_query {
	uint64_t size, query_flags, query_addr;
	uint64_t vma_start, vma_end, vma_flags, vma_page_size, vma_offset;
	uint64_t inode;
	uint32_t dev_major, dev_minor;
	uint32_t vma_name_size, build_id_size;
	uint64_t vma_name_addr, build_id_addr;
};
#define ODPX_PROCMAP_QUERY _IOWR('f', 17, struct odpx_procmap_query)
#define Q_READABLE 0x01
#define Q_WRITABLE 0x02
#define Q_SHARED 0x08

int vma_force_maps;
static int maps_fd = -1;	/* kept open: the ioctl needs it */
static int have_ioctl = 1;
static pthread_mutex_t fd_lock = PTHREAD_MUTEX_INITIALIZER;

static int maps_open(void)
{
	int fd = __atomic_load_n(&maps_fd, __ATOMIC_ACQUIRE);

	if (fd >= 0)
		return fd;
	pthread_mutex_lock(&fd_lock);
	if (maps_fd < 0) {
		fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
		if (fd >= 0)
			__atomic_store_n(&maps_fd, fd, __ATOMIC_RELEASE);
	}
	fd = maps_fd;
	pthread_mutex_unlock(&fd_lock);
	return fd < 0 ? -errno : fd;
}

static int query_ioctl(int fd, uintptr_t addr, struct vma_info *v)
{
	struct odpx_procmap_query q = {
		.size = sizeof(q), .query_addr = addr,
	};

	if (ioctl(fd, ODPX_PROCMAP_QUERY, &q) < 0)
		return -errno;
	v->start = q.vma_start;
	v->end = q.vma_end;
	v->readable = q.vma_flags & Q_READABLE;
	v->writable = q.vma_flags & Q_WRITABLE;
	v->shared = q.vma_flags & Q_SHARED;
	v->file = q.inode != 0 || q.dev_major || q.dev_minor;
	return 0;
}

/* Fallback: scan /proc/self/maps with no allocation beyond the stack. */
static int query_maps(uintptr_t addr, struct vma_info *v)
{
	char buf[8192], line[512];
	size_t ll = 0;
	ssize_t n;
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	while ((n = read(fd, buf, sizeof(buf))) > 0) {
		for (ssize_t i = 0; i < n; i++) {
			if (buf[i] != '\n') {
				if (ll < sizeof(line) - 1)
					line[ll++] = buf[i];
				continue;
			}
			line[ll] = 0;
			ll = 0;
			uintptr_t s, e;
			char perm[5];
			unsigned maj, min;
			unsigned long long off, ino;
			if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %4s %llx %x:%x %llu",
				   &s, &e, perm, &off, &maj, &min, &ino) != 7)
				continue;
			if (addr < s || addr >= e)
				continue;
			close(fd);
			v->start = s;
			v->end = e;
			v->readable = perm[0] == 'r';
			v->writable = perm[1] == 'w';
			v->shared = perm[3] == 's';
			v->file = ino != 0 || maj || min;
			return 0;
		}
	}
	close(fd);
	return -ENOENT;
}

int vma_query(uintptr_t addr, struct vma_info *v)
{
	int fd, r;

	if (have_ioctl && !vma_force_maps) {
		fd = maps_open();
		if (fd < 0)
			return fd;
		r = query_ioctl(fd, addr, v);
		if (r != -ENOTTY && r != -EINVAL)
			return r;
		__atomic_store_n(&have_ioctl, 0, __ATOMIC_RELAXED);
	}
	return query_maps(addr, v);
}

void vma_atfork_child(void)
{
	/* /proc/self of the parent: reopen in the child */
	if (maps_fd >= 0)
		close(maps_fd);
	maps_fd = -1;
	pthread_mutex_init(&fd_lock, NULL);
}
