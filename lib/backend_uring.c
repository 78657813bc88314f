// SPDX-License-Identifier: MIT
/*
 * backend_uring.c - pinning through io_uring fixed buffers (docs/design.md,
 * Backends).  Entry i of the cache owns slot i of a sparse table; a slot
 * update pins (an empty iovec unpins) with the long-term pinning of an MR,
 * and replaces a buffer the slot holds in one call (pin new, then unpin
 * old; a failed pin keeps the old).  A slot holds at most 1 GiB (-E2BIG
 * beyond); the kernel pins writable, so read-only memory fails (-EFAULT).
 */
#include <errno.h>
#include <liburing.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/uio.h>

#include "internal.h"
#include "log.h"

/* The ring carries transfers only; xfer_lock: one in flight (and its cancel), next_tag. */
struct uring_be {
	struct io_uring ring;
	pthread_mutex_t xfer_lock;
	uint64_t next_tag;		/* user_data of the next request (xfer_lock) */
};

/* user_data: UD_STALE for a NOP, a request's tag, a request's cancel */
#define UD_STALE 0
#define UD_CANCEL (1ULL << 63)
#define CANCEL_RETRY_NS (1000 * 1000)	/* a refused cancel is sent again at least this often */

static struct uring_be *be(struct odpx_ctx *ctx) { return ctx->be_priv; }

static int update_slot(struct odpx_ctx *ctx, uint32_t idx, void *base, size_t len)
{
	struct iovec iov = { base, len };
	__u64 tag = 0;
	int r = io_uring_register_buffers_update_tag(&be(ctx)->ring, idx, &iov, &tag, 1);

	return r < 0 ? r : 0;
}

static int uring_pin(struct odpx_ctx *ctx, uint32_t idx, uintptr_t start, size_t len,
		     uint32_t access, uint32_t *lkey, uint32_t *rkey)
{
	int r;

	(void)access;	/* io_uring always pins writable */
	if (len > URING_SLOT_MAX_BYTES)
		return -E2BIG;
	r = update_slot(ctx, idx, (void *)start, len);
	if (r < 0)
		return r;
	*lkey = *rkey = idx;
	return 0;
}

static void uring_unpin(struct odpx_ctx *ctx, uint32_t idx)
{
	update_slot(ctx, idx, NULL, 0);
}

static void uring_close(struct odpx_ctx *ctx)
{
	struct uring_be *b = be(ctx);	/* set by every open that succeeded */

	if (b->ring.ring_fd >= 0)	/* else a child's: gone at the fork */
		io_uring_queue_exit(&b->ring);	/* unpins whatever is left */
	pthread_mutex_destroy(&b->xfer_lock);
	free(b);
}

/* Child after fork: the ring's descriptor and mappings, which keep the parent's pins. */
static void uring_child_fds(struct odpx_ctx *ctx)
{
	io_uring_queue_exit(&be(ctx)->ring);
	be(ctx)->ring.ring_fd = -1;
}

int uring_backend_open(struct odpx_ctx *ctx)
{
	struct uring_be *b = calloc(1, sizeof(*b));
	char why[256];
	int r;

	if (!b)
		return odpx_fail(-ENOMEM, "odpx_open_uring: out of memory");
	r = io_uring_queue_init(8, &b->ring, 0);
	if (r < 0) {
		odpx_why_uring(r, why, sizeof(why));
		odpx_fail(r, "io_uring_setup: %s: %s", strerror(-r), why);
		goto out_free;
	}
	r = io_uring_register_buffers_sparse(&b->ring, URING_SLOTS);
	if (r < 0) {
		if (r == -ENOMEM)
			odpx_why_memlock(why, sizeof(why));
		else
			snprintf(why, sizeof(why), "%s", r == -EINVAL ? "a sparse fixed-buffer table "
				 "needs Linux 5.19" : "the kernel refused the fixed-buffer table");
		odpx_fail(r, "io_uring_register_buffers_sparse(%u): %s: %s", URING_SLOTS,
			  strerror(-r), why);
		goto out_ring;
	}
	pthread_mutex_init(&b->xfer_lock, NULL);
	b->next_tag = UD_STALE + 1;
	ctx->be_priv = b;
	return 0;
out_ring:
	io_uring_queue_exit(&b->ring);
out_free:
	free(b);
	return r;
}

/* Submit what is queued, @sqe last; one the kernel refuses becomes a NOP, UD_STALE. */
static int submit(struct io_uring *ring, struct io_uring_sqe *sqe)
{
	int r = io_uring_submit(ring);

	if (r > 0 && !io_uring_sq_ready(ring))
		return 0;
	io_uring_prep_nop(sqe);
	io_uring_sqe_set_data64(sqe, UD_STALE);
	return r < 0 ? r : -EAGAIN;
}

/* A free SQE, a full SQ (NOPs of refused submissions) flushed; NULL and *@err if refused. */
static struct io_uring_sqe *get_sqe(struct io_uring *ring, int *err)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
	int r;

	if (sqe)
		return sqe;
	r = io_uring_submit(ring);
	if (!(sqe = io_uring_get_sqe(ring)))
		*err = r < 0 ? r : -EBUSY;
	return sqe;
}

/* Send the cancel of @tag: true once taken; a refused one stays in *@sqe for the next try. */
static bool send_cancel(struct io_uring *ring, uint64_t tag, struct io_uring_sqe **sqe)
{
	int err;

	if (!*sqe) {
		if (!(*sqe = get_sqe(ring, &err)))
			return false;
		io_uring_prep_cancel64(*sqe, tag, 0);
		io_uring_sqe_set_data64(*sqe, tag | UD_CANCEL);
	}
	io_uring_submit(ring);
	if (io_uring_sq_ready(ring))	/* the SQ is taken in order: the cancel, last, was not */
		return false;
	*sqe = NULL;
	return true;
}

/*
 * The result of the request tagged @tag, reaped: a submitted request is
 * never left in flight.  A signal (or a failed wait) cancels it, and the
 * wait goes on until its completion and the cancel's are reaped; a refused
 * cancel is sent again every CANCEL_RETRY_NS.  A cancelled request returns
 * -EINTR (or the wait's error), a completed one its result.  Other tags are
 * NOPs of refused submissions, dropped.  A ring that fails twice in one
 * call returns with the request in flight; its tag drops its completion.
 */
static int reap(struct uring_be *b, uint64_t tag)
{
	struct __kernel_timespec retry = { 0, CANCEL_RETRY_NS };
	enum { NO_CANCEL, CANCEL_DUE, CANCEL_OUT, CANCEL_DONE } cancel = NO_CANCEL;
	struct io_uring_sqe *queued = NULL;	/* the cancel, refused so far */
	bool done = false;
	int res = 0, why = 0;

	while (!done || cancel == CANCEL_OUT) {
		struct io_uring_cqe *cqe;
		int r;

		if (cancel == CANCEL_DUE && send_cancel(&b->ring, tag, &queued))
			cancel = CANCEL_OUT;
		if (cancel == CANCEL_DUE)
			r = io_uring_wait_cqe_timeout(&b->ring, &cqe, &retry);
		else
			r = io_uring_wait_cqe(&b->ring, &cqe);
		if (r == -ETIME || (r == -EINTR && cancel != NO_CANCEL))
			continue;	/* bounded: the request is cancelled or ends */
		if (r < 0) {
			if (cancel != NO_CANCEL)
				return why;
			cancel = CANCEL_DUE;
			why = r;
			continue;
		}
		uint64_t ud = io_uring_cqe_get_data64(cqe);
		if (ud == tag) {
			res = cqe->res;
			done = true;
		} else if (ud == (tag | UD_CANCEL)) {
			cancel = CANCEL_DONE;
		}
		io_uring_cqe_seen(&b->ring, cqe);
	}
	if (queued) {	/* the request ended before the cancel went in */
		io_uring_prep_nop(queued);
		io_uring_sqe_set_data64(queued, UD_STALE);
	}
	if (cancel != NO_CANCEL && (res == -ECANCELED || res == -EINTR))
		return why;
	return res;
}

ssize_t uring_transfer(struct odpx_ctx *ctx, uint32_t idx, int fd, off_t off,
		       void *addr, size_t len, int dir)
{
	struct uring_be *b = be(ctx);
	size_t done = 0;
	int r = 0;

	pthread_mutex_lock(&b->xfer_lock);
	while (done < len) {
		struct io_uring_sqe *sqe = get_sqe(&b->ring, &r);
		unsigned n = len - done > (1U << 30) ? 1U << 30 : (unsigned)(len - done);
		/* -1, the file position, stays -1: the kernel advances it */
		off_t at = off < 0 ? -1 : off + (off_t)done;
		uint64_t tag;

		if (!sqe)
			break;
		if (dir == ODPX_XFER_FROM_FD)
			io_uring_prep_read_fixed(sqe, fd, (char *)addr + done, n, at, idx);
		else
			io_uring_prep_write_fixed(sqe, fd, (char *)addr + done, n, at, idx);
		tag = b->next_tag++ & ~UD_CANCEL;
		io_uring_sqe_set_data64(sqe, tag);
		if ((r = submit(&b->ring, sqe)) < 0)
			break;
		r = reap(b, tag);
		if (r <= 0)
			break;
		done += (size_t)r;
	}
	pthread_mutex_unlock(&b->xfer_lock);
	if (r < 0 && !done)
		return odpx_fail(r, "%s through slot %u: %s",
				 dir == ODPX_XFER_FROM_FD ? "READ_FIXED" : "WRITE_FIXED", idx,
				 strerror(-r));
	return (ssize_t)done;
}

const struct backend_ops uring_ops = {
	.name = "uring",
	.id = ODPX_BACKEND_URING,
	.pin = uring_pin,
	.unpin = uring_unpin,
	.pin_replaces = true,	/* a slot update swaps the buffer (see the top) */
	.child_fds = uring_child_fds,
	.close = uring_close,
	.max_entries = URING_SLOTS,
	.max_entry_bytes = URING_SLOT_MAX_BYTES,
};
