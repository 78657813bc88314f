// SPDX-License-Identifier: MIT
/*
 * shared-mappings: memfd (shmem) and shared file mappings change their
 * pages with no userfaultfd event (ftruncate, fallocate PUNCH_HOLE), so they
 * must never be cached: served in direct mode, counted, and never stale.
 * A shared mapping of an ext4 file cannot be pinned by io_uring at all:
 * -EFAULT with a reason.
 */
#include <linux/falloc.h>

#include "test.h"

#define LEN (64 * 1024)

static void one(struct odpx_ctx *ctx, int fd, const char *what, int punch)
{
	struct odpx_mr *mr;
	struct odpx_stats a = stats_of(ctx), b;
	char *p;

	CHECK(ftruncate(fd, LEN) == 0, "ftruncate");
	p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(p != MAP_FAILED, "mmap shared");
	memset(p, 1, LEN);
	CHECK_RC(odpx_reg(ctx, p, LEN, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
	CHECK(data_check(ctx, mr, p, LEN, 5), "%s: first check", what);
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	b = stats_of(ctx);
	CHECK(b.direct_shared >= a.direct_shared + 1, "%s: not counted as direct_shared", what);
	CHECK(b.entries == a.entries, "%s: a shared mapping stayed cached", what);

	/* replace the pages silently */
	if (punch)
		CHECK(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, LEN) == 0,
		      "punch hole: %s", strerror(errno));
	else
		CHECK(ftruncate(fd, 0) == 0 && ftruncate(fd, LEN) == 0, "truncate");

	CHECK_RC(odpx_reg(ctx, p, LEN, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
	CHECK(data_check(ctx, mr, p, LEN, 7), "%s: stale data after %s", what,
	      punch ? "PUNCH_HOLE" : "ftruncate");
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	munmap(p, LEN);
}

int main(void)
{
	struct odpx_ctx *ctx = open_pin(0);
	long pin0 = vm_pinned_kb();
	char path[] = "./odpx-shared-XXXXXX";
	struct odpx_mr *mr;
	int fd;

	fd = memfd_create("odpx-shm", MFD_CLOEXEC);
	one(ctx, fd, "memfd", 0);
	one(ctx, fd, "memfd", 1);
	close(fd);

	/* a shared mapping of a file on a disk filesystem */
	fd = mkstemp(path);
	CHECK(fd >= 0, "mkstemp");
	unlink(path);
	CHECK(ftruncate(fd, LEN) == 0, "ftruncate");
	char *p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(p != MAP_FAILED, "mmap");
	memset(p, 2, LEN);
	int r = odpx_reg(ctx, p, LEN, ODPX_ACCESS_LOCAL_WRITE, &mr);
	if (r == 0) {	/* a filesystem io_uring can pin (tmpfs): must be direct */
		CHECK(data_check(ctx, mr, p, LEN, 9), "file: check");
		CHECK_RC(odpx_dereg(ctx, mr), 0);
		CHECK(stats_of(ctx).entries == 0, "file mapping cached");
	} else {
		CHECK(r == -EFAULT, "shared file mapping: %d, want -EFAULT", r);
		CHECK(strstr(odpx_last_reason(), "shared file"), "reason: %s", odpx_last_reason());
	}
	munmap(p, LEN);
	close(fd);
	CHECK_RC(odpx_close(ctx), 0);
	CHECK(vm_pinned_kb() == pin0, "VmPin %ld kB after close, %ld before", vm_pinned_kb(), pin0);
	return 0;
}
