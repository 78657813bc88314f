// SPDX-License-Identifier: MIT
/*
 * vma.c - what mapping holds an address: the PROCMAP_QUERY ioctl on
 * /proc/self/maps (Linux 6.11+), else a parse of /proc/self/maps.
 *
 * A miss needs the VMA's bounds (watch.c) and whether it is anonymous and
 * private: truncation, hole punching and shmdt replace shared or file pages
 * with no userfaultfd event (truncation drops even private COW copies of
 * file pages), so such VMAs are served in direct mode.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
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
/*
 * The descriptor the ioctl needs, kept open from the first query to the
 * last context's detach (vma_close()), with its device and inode: the
 * application may close that number, and open something else there, at
 * any time.  Each query checks the number still holds what was opened, and
 * otherwise forgets it (never closes it: it is the application's) and opens
 * another.  Under fd_lock; the ioctl itself runs outside it.
 */
static int maps_fd = -1;
static dev_t maps_dev;
static ino_t maps_ino;
static int have_ioctl = 1;
static pthread_mutex_t fd_lock = PTHREAD_MUTEX_INITIALIZER;

static bool maps_fd_ours(void)
{
	struct stat sb;

	return maps_fd >= 0 && fstat(maps_fd, &sb) == 0 && sb.st_dev == maps_dev &&
	       sb.st_ino == maps_ino;
}

/* maps_fd, valid; -EMFILE or -ENFILE when no descriptor is free */
static int maps_open(void)
{
	struct stat sb;
	int fd, r = 0;

	pthread_mutex_lock(&fd_lock);
	if (!maps_fd_ours()) {
		__atomic_store_n(&maps_fd, -1, __ATOMIC_RELAXED);
		fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
		if (fd < 0 || fstat(fd, &sb) < 0) {
			r = -errno;
			if (fd >= 0)
				close(fd);
		} else {
			maps_dev = sb.st_dev;
			maps_ino = sb.st_ino;
			__atomic_store_n(&maps_fd, fd, __ATOMIC_RELAXED);
		}
	}
	fd = maps_fd;
	pthread_mutex_unlock(&fd_lock);
	return fd < 0 ? r : fd;
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

int vma_query_ioctl(uintptr_t addr, struct vma_info *v)
{
	int fd, r;

	if (!__atomic_load_n(&have_ioctl, __ATOMIC_RELAXED) || vma_force_maps)
		return -ENOTTY;
	/*
	 * First the ioctl alone on the number last opened (what a hit's check
	 * of protection pays, cache.c): any other file there fails it, since
	 * the command encodes its size, and so does an unmapped address; then
	 * the number is checked, reopened if it is no longer ours, and asked
	 * again.  Only another process's maps file put at that number by the
	 * application would answer for the wrong process.
	 */
	fd = __atomic_load_n(&maps_fd, __ATOMIC_RELAXED);
	if (fd >= 0 && query_ioctl(fd, addr, v) == 0)
		return 0;
	if ((fd = maps_open()) < 0)
		return fd;
	r = query_ioctl(fd, addr, v);
	if (r == -ENOTTY || r == -EINVAL) {
		__atomic_store_n(&have_ioctl, 0, __ATOMIC_RELAXED);
		return -ENOTTY;
	}
	return r;
}

int vma_query(uintptr_t addr, struct vma_info *v)
{
	int r = vma_query_ioctl(addr, v);

	return r == -ENOTTY ? query_maps(addr, v) : r;
}

/* The last context detached: close the descriptor if it is still ours. */
void vma_close(void)
{
	pthread_mutex_lock(&fd_lock);
	if (maps_fd_ours())
		close(maps_fd);
	__atomic_store_n(&maps_fd, -1, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&fd_lock);
}

/* Before vma_close() in a child: another thread of the parent may have held the lock. */
void vma_atfork_child(void)
{
	pthread_mutex_init(&fd_lock, NULL);
}
