// SPDX-License-Identifier: MIT
/*
 * transfer: odpx_transfer's contract at its edges.
 *   - A signal while a READ_FIXED waits (an empty pipe): the call returns
 *     -EINTR, or the bytes moved before it, and the request is over: it
 *     reads nothing from the pipe afterwards, writes nothing into the pages,
 *     and the next transfers return exactly their own bytes.
 *   - Offset -1 reads at the file position and advances it, through every
 *     chunk of the call (a short read then EOF, here).
 *   - Submissions the kernel refuses (-EAGAIN: no memory for a request; it
 *     takes nothing, and liburing has published the SQ tail), by this
 *     program's io_uring_submit() (libodpx.a's calls bind to it; the real
 *     one is liburing's), on this thread while `refusals` says so:
 *     - 12 transfers in a row: each returns -EAGAIN, and once the kernel
 *       takes submissions again the next one moves its bytes.  The NOPs
 *       left by 8 refusals filled the 8-entry SQ, and every later transfer
 *       returned -EBUSY, for good.
 *     - the cancel that a signal sends: it is sent again until it goes in,
 *       and the call returns -EINTR.  A refused cancel was never sent
 *       again, and the call swallowed every later signal until the request
 *       ended by itself (here: a pipe written 3 s later).
 */
#include <dlfcn.h>
#include <liburing.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "test.h"

#define LEN (64 * 1024)

static __thread int refusals;	/* this thread's submissions to refuse... */
static __thread int let_through;	/* ...after letting these through */

static int (*real_submit)(struct io_uring *);

/* before main(): the engine thread submits too, and must find it set */
__attribute__((constructor)) static void find_real(void)
{
	real_submit = (int (*)(struct io_uring *))dlsym(RTLD_NEXT, "io_uring_submit");
}

int io_uring_submit(struct io_uring *ring)
{
	if (refusals > 0 && io_uring_sq_ready(ring) && let_through-- <= 0) {
		refusals--;
		ring->sq.sqe_head = ring->sq.sqe_tail;	/* liburing's flush of the SQ */
		IO_URING_WRITE_ONCE(*ring->sq.ktail, ring->sq.sqe_tail);
		return -EAGAIN;
	}
	return real_submit(ring);
}

/* odpx_transfer() from @fd while another thread signals this one. */
static ssize_t transfer_signalled(struct odpx_ctx *ctx, struct odpx_mr *mr, int fd, void *p,
				  size_t len)
{
	struct storm s;
	ssize_t n;

	storm_begin(&s, 1000000);	/* every millisecond: one lands in its wait */
	n = odpx_transfer(ctx, mr, fd, 0, p, len, ODPX_XFER_FROM_FD);
	storm_end(&s);
	return n;
}

/* Each later transfer moves exactly its own bytes; nothing lands in @quiet meanwhile. */
static void after_interrupt(struct odpx_ctx *ctx, struct odpx_mr *mr, char *buf, int rd, int wr,
			    const char *quiet, size_t quiet_len, const char *what)
{
	int in = pattern_fd(8192, 3);
	char got[8];

	CHECK(write(wr, "AAAA", 4) == 4, "write pipe");
	memset(buf + 8192, 0, 4096);
	CHECK_RC(odpx_transfer(ctx, mr, in, 0, buf + 8192, 4096, ODPX_XFER_FROM_FD), 4096);
	CHECK(pattern_ok((unsigned char *)buf + 8192, 4096, 3), "%s: file data wrong", what);
	CHECK_RC(odpx_transfer(ctx, mr, in, 0, buf + 16384, 100, ODPX_XFER_FROM_FD), 100);
	/* the interrupted read is gone: the pipe still holds what was written */
	CHECK(fcntl(rd, F_SETFL, O_NONBLOCK) == 0, "fcntl");
	CHECK_RC(read(rd, got, sizeof(got)), 4);
	CHECK(!memcmp(got, "AAAA", 4), "%s: pipe gave %.4s", what, got);
	CHECK(fcntl(rd, F_SETFL, 0) == 0, "fcntl");
	CHECK(!memcmp(buf, quiet, quiet_len), "%s: the pages changed after the call returned: %.8s",
	      what, buf);
	/* and a transfer from the pipe takes its own bytes */
	CHECK(write(wr, "BBBB", 4) == 4, "write pipe");
	CHECK_RC(odpx_transfer(ctx, mr, rd, 0, buf + 24576, 4, ODPX_XFER_FROM_FD), 4);
	CHECK(!memcmp(buf + 24576, "BBBB", 4), "%s: pipe transfer read %.4s", what, buf + 24576);
	CHECK(!memcmp(buf, quiet, quiet_len), "%s: the pages changed: %.8s", what, buf);
	close(in);
}

/* A registration of LEN bytes of '.', and an empty pipe to read into it. */
struct piped {
	struct odpx_ctx *ctx;
	struct odpx_mr *mr;
	char *buf;
	int p[2];
};

static void piped_open(struct piped *f)
{
	f->ctx = open_pin(0);
	f->buf = map_anon(NULL, LEN);
	memset(f->buf, '.', LEN);
	CHECK_RC(odpx_reg(f->ctx, f->buf, LEN, ODPX_ACCESS_LOCAL_WRITE, &f->mr), 0);
	CHECK(pipe(f->p) == 0, "pipe");
}

static void piped_close(struct piped *f)
{
	CHECK_RC(odpx_dereg(f->ctx, f->mr), 0);
	CHECK_RC(odpx_close(f->ctx), 0);
	close(f->p[0]);
	close(f->p[1]);
	munmap(f->buf, LEN);
	signal(SIGUSR1, SIG_DFL);
}

static void interrupted(void)
{
	struct piped f;
	ssize_t n;

	piped_open(&f);
	/* nothing moved: -EINTR */
	n = transfer_signalled(f.ctx, f.mr, f.p[0], f.buf, 4096);
	CHECK(n == -EINTR, "empty pipe, signalled: %zd, want -EINTR", n);
	CHECK(atomic_load(storm_count()) > 0, "no signal handled");
	after_interrupt(f.ctx, f.mr, f.buf, f.p[0], f.p[1], "....", 4, "nothing moved");

	/* a short read, then the wait for the rest is interrupted: the bytes moved */
	CHECK(write(f.p[1], "CCCC", 4) == 4, "write pipe");
	n = transfer_signalled(f.ctx, f.mr, f.p[0], f.buf, 4096);
	CHECK(n == 4, "4 bytes in the pipe, signalled: %zd, want 4", n);
	after_interrupt(f.ctx, f.mr, f.buf, f.p[0], f.p[1], "CCCC....", 8, "4 bytes moved");
	piped_close(&f);
}

static void current_position(void)
{
	struct odpx_ctx *ctx = open_pin(0);
	char *buf = map_anon(NULL, LEN);
	int in = pattern_fd(100, 5), out = memfd_create("odpx-out", MFD_CLOEXEC);
	unsigned char back[100];
	struct odpx_mr *mr;

	CHECK(out >= 0, "memfd_create");
	CHECK_RC(odpx_reg(ctx, buf, LEN, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
	/* 200 asked of 100 bytes: 100 read, then EOF at the position, not at 99 */
	memset(buf, 0, LEN);
	CHECK_RC(odpx_transfer(ctx, mr, in, -1, buf, 200, ODPX_XFER_FROM_FD), 100);
	CHECK(pattern_ok((unsigned char *)buf, 100, 5), "offset -1: data wrong");
	CHECK_RC(lseek(in, 0, SEEK_CUR), 100);
	CHECK_RC(odpx_transfer(ctx, mr, in, -1, buf, 200, ODPX_XFER_FROM_FD), 0);
	/* writes append at the position, twice */
	CHECK_RC(odpx_transfer(ctx, mr, out, -1, buf, 50, ODPX_XFER_TO_FD), 50);
	CHECK_RC(odpx_transfer(ctx, mr, out, -1, buf + 50, 50, ODPX_XFER_TO_FD), 50);
	CHECK_RC(lseek(out, 0, SEEK_CUR), 100);
	CHECK_RC(pread(out, back, sizeof(back), 0), 100);
	CHECK(pattern_ok(back, 100, 5), "offset -1: written data wrong");
	/* any other negative offset is refused */
	CHECK_RC(odpx_transfer(ctx, mr, in, -2, buf, 100, ODPX_XFER_FROM_FD), -EINVAL);
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	CHECK_RC(odpx_close(ctx), 0);
	close(in);
	close(out);
	munmap(buf, LEN);
}

/* 12 refused transfers, 8 of them enough to fill the SQ with NOPs, then it recovers. */
static void refused(void)
{
	struct odpx_ctx *ctx = open_pin(0);
	char *buf = map_anon(NULL, LEN);
	int in = pattern_fd(LEN, 9);
	struct odpx_mr *mr;

	CHECK_RC(odpx_reg(ctx, buf, LEN, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
	CHECK_RC(odpx_transfer(ctx, mr, in, 0, buf, 4096, ODPX_XFER_FROM_FD), 4096);
	refusals = 12;
	for (int i = 0; i < 12; i++) {
		ssize_t n = odpx_transfer(ctx, mr, in, 0, buf, 4096, ODPX_XFER_FROM_FD);
		CHECK(n == -EAGAIN, "refused submission %d: %zd (%s), want -EAGAIN", i + 1, n,
		      n < 0 ? strerror((int)-n) : "bytes");
	}
	CHECK(refusals == 0, "%d refusals left", refusals);
	for (int i = 0; i < 20; i++) {
		memset(buf, 0, LEN);
		ssize_t n = odpx_transfer(ctx, mr, in, 0, buf, LEN, ODPX_XFER_FROM_FD);
		CHECK(n == LEN, "transfer %d after the kernel recovered: %zd (%s); reason: %s", i, n,
		      n < 0 ? strerror((int)-n) : "bytes", odpx_last_reason());
		CHECK(pattern_ok((unsigned char *)buf, LEN, 9), "transfer %d after recovery: data wrong", i);
	}
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	CHECK_RC(odpx_close(ctx), 0);
	close(in);
	munmap(buf, LEN);
}

static atomic_bool returned;
static int late_fd;

/* Data for the pipe read, 3 s on, unless the transfer has returned by then. */
static void *late_writer(void *arg)
{
	(void)arg;
	if (!WAIT_FOR(atomic_load(&returned), 3))
		CHECK(write(late_fd, "late!", 5) == 5, "write pipe");
	return NULL;
}

/* A signal during a pipe read whose cancel is refused three times. */
static void cancel_refused(void)
{
	struct piped f;
	pthread_t t;
	double t0, took;
	ssize_t n;

	piped_open(&f);
	late_fd = f.p[1];
	atomic_store(&returned, false);
	CHECK(pthread_create(&t, NULL, late_writer, NULL) == 0, "pthread_create");
	let_through = 1;	/* the read goes in, its cancel does not */
	refusals = 3;
	t0 = now_s();
	n = transfer_signalled(f.ctx, f.mr, f.p[0], f.buf, 5);
	took = now_s() - t0;
	atomic_store(&returned, true);
	pthread_join(t, NULL);
	CHECK(n == -EINTR, "signalled, its cancel refused 3 times: %zd (%s) after %.2f s, want -EINTR", n,
	      n < 0 ? strerror((int)-n) : "bytes", took);
	CHECK(refusals == 0 && let_through <= 0, "the cancel was not refused: %d refusals left", refusals);
	refusals = let_through = 0;
	after_interrupt(f.ctx, f.mr, f.buf, f.p[0], f.p[1], ".....", 5, "cancel refused");
	piped_close(&f);
}

int main(void)
{
	interrupted();
	current_position();
	refused();
	cancel_refused();
	printf("ok\n");
	return 0;
}
