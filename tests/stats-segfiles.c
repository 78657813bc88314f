// SPDX-License-Identifier: MIT
/*
 * stats-segfiles: what others can leave under the segment names in
 * /dev/shm neither stops a context nor is read as a segment.
 *   - a FIFO (another user's, when we are root) at the very name a process
 *     will give its first segment: odpx_open() in that process returns, and
 *     its counters are still found.  The open of the old file, to read its
 *     header, waited for a writer forever.
 *   - a segment whose shard or cold-counter offset is not aligned for its
 *     struct (shards_off 4097): rejected, -EPROTO, where the same segment
 *     with aligned offsets is read.  It was read, through misaligned loads.
 * Everything runs in a mount namespace of its own with a tmpfs on /dev/shm;
 * without the privilege for one it skips, saying so.
 */
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "test.h"
#include "internal.h"
#include "../sysfs-stats/counters.h"
#include "../sysfs-stats/segment.h"

uint64_t proc_start_time(pid_t pid);	/* publish.c */

static void fifo_at_our_name(void)
{
	char path[64], c;
	int go[2], st;
	pid_t g;

	CHECK(pipe(go) == 0, "pipe");
	fflush(stdout);
	if (!(g = fork())) {
		struct odpx_seg_info si[4];
		struct odpx_ctx *ctx;
		struct odpx_mr *mr;
		char *p = map_anon(NULL, 4096);
		int k;

		close(go[1]);
		CHECK(read(go[0], &c, 1) == 1, "the FIFO is planted");
		alarm(10);	/* a deadline: SIGALRM ends a process stuck in the open */
		CHECK_RC(odpx_open_uring(NULL, &ctx), 0);
		alarm(0);
		CHECK_RC(odpx_reg(ctx, p, 4096, 0, &mr), 0);
		CHECK_RC(odpx_dereg(ctx, mr), 0);
		k = odpx_seg_scan(getpid(), si, 4);
		CHECK(k == 1 && si[0].st.misses == 1, "after a FIFO at its name: %d segments", k);
		CHECK_RC(odpx_close(ctx), 0);
		_exit(0);
	}
	close(go[0]);
	/* no context opened in this process before the fork: the child's first is <n> 0 */
	snprintf(path, sizeof(path), "/dev/shm/" ODPX_SHM_PREFIX "%d.0", (int)g);
	CHECK(mkfifo(path, 0666) == 0, "mkfifo %s: %s", path, strerror(errno));
	if (geteuid() == 0)
		CHECK(chown(path, 65534, 65534) == 0, "chown: %s", strerror(errno));
	CHECK(write(go[1], "x", 1) == 1, "go");
	CHECK(waitpid(g, &st, 0) == g, "waitpid");
	CHECK(!(WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM),
	      "odpx_open still blocked after 10 s on a FIFO at %s", path);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child: status %#x", st);
	close(go[1]);
	unlink(path);
	printf("a FIFO at a context's segment name: the open returned, counters found\n");
}

/* A segment of @pid at @path, as its writer would lay it out but at these offsets. */
static void forge(const char *path, pid_t pid, uint32_t shards_off, uint32_t cold_off)
{
	size_t bytes = (cold_off + sizeof(struct cold_stats) + 4095) & ~(size_t)4095;
	char *p = calloc(1, bytes);
	struct seg_hdr *h = (struct seg_hdr *)p;
	int fd;

	CHECK(p, "calloc");
	h->version = ODPX_SHM_VERSION;
	h->hdr_bytes = SEG_HDR_BYTES;
	h->total_bytes = bytes;
	h->shards_off = shards_off;
	h->shard_bytes = sizeof(struct stat_shard);
	h->nshards = STAT_SHARDS + 1;
	h->cold_off = cold_off;
	h->cold_bytes = sizeof(struct cold_stats);
	h->stats_bytes = sizeof(struct odpx_stats);
	h->pid = pid;
	h->start_time = proc_start_time(pid);
	h->pidns = odpx_pidns();
	h->mode = ODPX_MODE_PIN;
	h->backend = ODPX_BACKEND_URING;
	atomic_store(&h->magic, ODPX_SHM_MAGIC);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	CHECK(fd >= 0 && write(fd, p, bytes) == (ssize_t)bytes, "write %s: %s", path,
	      strerror(errno));
	close(fd);
	free(p);
}

static void misaligned(void)
{
	uint32_t shards = (uint32_t)sizeof(struct stat_shard) * (STAT_SHARDS + 1);
	struct odpx_seg_info si[4];
	char path[64];
	int hold[2], st, k;
	pid_t g;

	CHECK(pipe(hold) == 0, "pipe");
	fflush(stdout);
	if (!(g = fork())) {	/* a live process of ours for the segments to name */
		char c;
		close(hold[1]);
		_exit(read(hold[0], &c, 1) < 0);
	}
	close(hold[0]);
	snprintf(path, sizeof(path), "/dev/shm/" ODPX_SHM_PREFIX "%d.0", (int)g);
	forge(path, g, SEG_HDR_BYTES, SEG_HDR_BYTES + shards);
	k = odpx_seg_scan(g, si, 4);
	CHECK(k == 1, "a well-formed forged segment: %d found (the forgery is wrong)", k);
	forge(path, g, SEG_HDR_BYTES + 1, SEG_HDR_BYTES + 8 + shards);
	k = odpx_seg_scan(g, si, 4);
	CHECK(k == -EPROTO, "shards_off %u: odpx_seg_scan %d, want -EPROTO", SEG_HDR_BYTES + 1, k);
	forge(path, g, SEG_HDR_BYTES, SEG_HDR_BYTES + shards + 4);
	k = odpx_seg_scan(g, si, 4);
	CHECK(k == -EPROTO, "cold_off %u: odpx_seg_scan %d, want -EPROTO",
	      SEG_HDR_BYTES + shards + 4, k);
	unlink(path);
	close(hold[1]);
	CHECK(waitpid(g, &st, 0) == g && WIFEXITED(st) && WEXITSTATUS(st) == 0, "holder %#x", st);
	printf("segments with misaligned offsets: rejected (-EPROTO)\n");
}

static int private_shm(void *arg)
{
	(void)arg;
	if (unshare(CLONE_NEWNS) < 0) {	/* only the lack of privilege is a reason to skip */
		CHECK(errno == EPERM && geteuid() != 0, "unshare(CLONE_NEWNS): %s", strerror(errno));
		SKIP("unshare(CLONE_NEWNS): %s as uid %d: no private mount of /dev/shm",
		     strerror(errno), (int)geteuid());
	}
	CHECK(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0, "private mounts: %s",
	      strerror(errno));
	CHECK(mount("odpx-test", "/dev/shm", "tmpfs", 0, "mode=1777") == 0,
	      "mount tmpfs on /dev/shm: %s", strerror(errno));
	fifo_at_our_name();
	misaligned();
	fflush(stdout);
	return 0;
}

int main(void)
{
	int r = run_forked(NULL, private_shm, NULL);

	CHECK(r == 0 || r == 77, "%s %d", r > 128 ? "signal" : "exit", r > 128 ? r - 128 : r);
	return r;
}
