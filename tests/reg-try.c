// SPDX-License-Identifier: MIT
/*
 * reg-try: odpx_reg_ex()'s ODPX_REG_TRY and ODPX_REG_PARTIAL never register
 * and never wait (uring backend, pin mode).
 *
 * - a hit (exact, and interior) returns the registration that exists;
 * - a miss returns -EAGAIN and registers nothing: pins, misses and entries
 *   unchanged, try_again counts it;
 * - PARTIAL over two registrations with a hole between returns the one
 *   holding the lowest registered page of the range, whichever part of the
 *   range is registered, and -EAGAIN over the hole alone;
 * - while another thread's miss is stopped inside its pin (the slot update
 *   of the io_uring backend, held by the wrapper below), TRY on another
 *   range, registered or not, returns without waiting for it;
 * - while the invalidation lock is held with the index's seq odd (the monitor applying
 *   events), TRY returns -EAGAIN rather than wait for the lock as
 *   odpx_reg() would: a thread that calls it is joined within a generous
 *   deadline;
 * - once munmap() has returned, TRY and PARTIAL never return the
 *   registration of the old pages (the invalidation guarantee holds for
 *   them as for odpx_reg()): 2,000 rounds of register, unmap, map again at
 *   the same address, TRY and PARTIAL, with another thread's misses and
 *   releases moving the index's seq meanwhile; a registration they return
 *   would be checked through odpx_transfer and fail;
 * - unknown flag bits are -EINVAL; flags 0 is odpx_reg().
 */
#include <dlfcn.h>
#include <liburing.h>
#include <semaphore.h>

#include "test.h"
#include "odpx-private.h"	/* monitor_lock() and the index's seq, for the odd-seq case */

#define PG 4096UL

static struct odpx_ctx *ctx;
static unsigned char *buf;	/* 64 pages */

/* the io_uring slot update is the pin of this backend: stop one there */
static __thread bool stall_me;
static sem_t stalled, go_on;
static int (*real_update)(struct io_uring *, unsigned, const struct iovec *, const __u64 *,
			  unsigned);

__attribute__((constructor)) static void find_real_update(void)
{
	real_update = (int (*)(struct io_uring *, unsigned, const struct iovec *, const __u64 *,
			       unsigned))dlsym(RTLD_NEXT, "io_uring_register_buffers_update_tag");
}

int io_uring_register_buffers_update_tag(struct io_uring *ring, unsigned off,
					 const struct iovec *iov, const __u64 *tags, unsigned nr)
{
	if (stall_me && iov->iov_base) {
		stall_me = false;
		sem_post(&stalled);
		struct timespec t;
		clock_gettime(CLOCK_REALTIME, &t);
		t.tv_sec += 30;
		CHECK(sem_timedwait(&go_on, &t) == 0, "the stopped pin was never let go");
	}
	return real_update(ring, off, iov, tags, nr);
}

static void *stalled_miss(void *arg)
{
	struct odpx_mr *mr;

	stall_me = true;
	CHECK_RC(odpx_reg(ctx, arg, 4 * PG, 0, &mr), 0);
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	return NULL;
}

struct try_arg { void *p; size_t len; int r; double took; };

static void *try_thread(void *arg)
{
	struct try_arg *a = arg;
	struct odpx_mr *mr;
	double t0 = now_s();

	a->r = odpx_reg_ex(ctx, a->p, a->len, 0, ODPX_REG_TRY, &mr);
	a->took = now_s() - t0;
	if (a->r == 0)
		CHECK_RC(odpx_dereg(ctx, mr), 0);
	return NULL;
}

/* Run TRY on another thread; fail if it is not back within @secs. */
static int try_joined(void *p, size_t len, double secs)
{
	struct try_arg a = { .p = p, .len = len, .r = 1 };
	pthread_t t;
	struct timespec dl;

	CHECK(pthread_create(&t, NULL, try_thread, &a) == 0, "pthread_create");
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += (time_t)secs;
	int j = pthread_timedjoin_np(t, NULL, &dl);
	if (j)
		return -1000 - j;	/* still waiting: the caller lets it go, then fails */
	return a.r;
}

static void basic(void)
{
	struct odpx_mr *a, *b, *m;
	struct odpx_stats s0, s1;

	/* a miss: nothing registered, nothing counted but try_again */
	s0 = stats_of(ctx);
	CHECK_RC(odpx_reg_ex(ctx, buf, 4 * PG, 0, ODPX_REG_TRY, &m), -EAGAIN);
	CHECK_RC(odpx_reg_ex(ctx, buf, 4 * PG, 0, ODPX_REG_PARTIAL, &m), -EAGAIN);
	s1 = stats_of(ctx);
	CHECK(s1.pins == s0.pins && s1.misses == s0.misses && s1.entries == s0.entries &&
	      s1.pinned_bytes == s0.pinned_bytes && s1.try_again == s0.try_again + 2,
	      "a TRY miss changed pins %lu->%lu misses %lu->%lu entries %lu->%lu, try_again %lu->%lu",
	      (unsigned long)s0.pins, (unsigned long)s1.pins, (unsigned long)s0.misses,
	      (unsigned long)s1.misses, (unsigned long)s0.entries, (unsigned long)s1.entries,
	      (unsigned long)s0.try_again, (unsigned long)s1.try_again);

	/* hits: exact and interior, the same registration */
	CHECK_RC(odpx_reg(ctx, buf, 4 * PG, 0, &a), 0);
	s0 = stats_of(ctx);
	CHECK_RC(odpx_reg_ex(ctx, buf, 4 * PG, 0, ODPX_REG_TRY, &m), 0);
	CHECK(odpx_priv_same(ctx, m, a), "TRY exact: another handle");
	CHECK_RC(odpx_dereg(ctx, m), 0);
	CHECK_RC(odpx_reg_ex(ctx, buf + PG + 100, PG, 0, ODPX_REG_TRY, &m), 0);
	CHECK(odpx_priv_same(ctx, m, a), "TRY interior: another handle");
	CHECK_RC(odpx_dereg(ctx, m), 0);
	s1 = stats_of(ctx);
	CHECK(s1.hits == s0.hits + 2 && s1.pins == s0.pins && s1.misses == s0.misses,
	      "TRY hits: hits %lu->%lu pins %lu->%lu", (unsigned long)s0.hits,
	      (unsigned long)s1.hits, (unsigned long)s0.pins, (unsigned long)s1.pins);
	/* beyond it: TRY misses, PARTIAL gives the part that exists */
	CHECK_RC(odpx_reg_ex(ctx, buf + 2 * PG, 4 * PG, 0, ODPX_REG_TRY, &m), -EAGAIN);
	CHECK_RC(odpx_reg_ex(ctx, buf + 2 * PG, 4 * PG, 0, ODPX_REG_PARTIAL, &m), 0);
	CHECK(odpx_priv_same(ctx, m, a) && odpx_mr_addr(m) == buf && odpx_mr_length(m) == 4 * PG,
	      "PARTIAL past the end: %p+%zu", odpx_mr_addr(m), odpx_mr_length(m));
	CHECK_RC(odpx_dereg(ctx, m), 0);
	CHECK_RC(odpx_dereg(ctx, a), 0);
	printf("TRY/PARTIAL: hits answer, a miss registers nothing: ok\n");

	/* PARTIAL over [8, 10) and [14, 16), a hole between */
	CHECK_RC(odpx_reg(ctx, buf + 8 * PG, 2 * PG, 0, &a), 0);
	CHECK_RC(odpx_reg(ctx, buf + 14 * PG, 2 * PG, 0, &b), 0);
	CHECK(a != b, "two registrations merged");
	s0 = stats_of(ctx);
	CHECK_RC(odpx_reg_ex(ctx, buf + 6 * PG, 12 * PG, 0, ODPX_REG_PARTIAL, &m), 0);
	CHECK(odpx_priv_same(ctx, m, a) && odpx_mr_addr(m) == buf + 8 * PG &&
	      odpx_mr_length(m) == 2 * PG,
	      "PARTIAL [6,18): not the lowest registered page's");
	CHECK_RC(odpx_dereg(ctx, m), 0);
	CHECK_RC(odpx_reg_ex(ctx, buf + 9 * PG + 7, 6 * PG, 0, ODPX_REG_PARTIAL, &m), 0);
	CHECK(odpx_priv_same(ctx, m, a), "PARTIAL from inside the first: not the first");
	CHECK_RC(odpx_dereg(ctx, m), 0);
	CHECK_RC(odpx_reg_ex(ctx, buf + 10 * PG, 6 * PG, 0, ODPX_REG_PARTIAL, &m), 0);
	CHECK(m == b && odpx_mr_addr(m) == buf + 14 * PG, "PARTIAL [10,16): not the second");
	CHECK_RC(odpx_dereg(ctx, m), 0);
	CHECK_RC(odpx_reg_ex(ctx, buf + 10 * PG, 4 * PG, 0, ODPX_REG_PARTIAL, &m), -EAGAIN);
	CHECK_RC(odpx_reg_ex(ctx, buf + 9 * PG, 6 * PG, 0, ODPX_REG_TRY, &m), -EAGAIN);
	s1 = stats_of(ctx);
	CHECK(s1.pins == s0.pins && s1.misses == s0.misses && s1.entries == s0.entries,
	      "PARTIAL registered something");
	CHECK_RC(odpx_dereg(ctx, a), 0);
	CHECK_RC(odpx_dereg(ctx, b), 0);
	printf("PARTIAL: the lowest registered page over a hole: ok\n");

	CHECK_RC(odpx_reg_ex(ctx, buf, PG, 0, ODPX_REG_RESERVED, &m), -EINVAL);
	CHECK_RC(odpx_reg_ex(ctx, buf, PG, 0, 0, &m), 0);	/* odpx_reg() */
	CHECK_RC(odpx_dereg(ctx, m), 0);
	CHECK_RC(odpx_reg_ex(ctx, buf, 0, 0, ODPX_REG_TRY, &m), -EINVAL);
	CHECK_RC(odpx_reg_ex(ctx, buf, PG, 0, ODPX_REG_TRY, NULL), -EINVAL);
	CHECK_RC(odpx_reg_ex(NULL, buf, PG, 0, ODPX_REG_TRY, &m), -EINVAL);
}

/* TRY does not wait for a miss stopped in its pin. */
static void during_pin(void)
{
	struct odpx_mr *a;
	pthread_t t;
	struct timespec dl;

	CHECK_RC(odpx_reg(ctx, buf + 32 * PG, 4 * PG, 0, &a), 0);
	sem_init(&stalled, 0, 0);
	sem_init(&go_on, 0, 0);
	CHECK(pthread_create(&t, NULL, stalled_miss, buf + 48 * PG) == 0, "pthread_create");
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += 30;
	CHECK(sem_timedwait(&stalled, &dl) == 0, "the miss never reached its pin");
	int hit = try_joined(buf + 32 * PG, 4 * PG, 10);
	int miss = try_joined(buf + 40 * PG, 4 * PG, 10);
	int inside = try_joined(buf + 48 * PG, PG, 10);	/* the range being pinned */
	sem_post(&go_on);
	CHECK(pthread_join(t, NULL) == 0, "join");
	CHECK(hit == 0, "TRY hit during another's pin: %d", hit);
	CHECK(miss == -EAGAIN, "TRY miss during another's pin: %d", miss);
	CHECK(inside == -EAGAIN, "TRY on the range being pinned: %d", inside);
	CHECK_RC(odpx_dereg(ctx, a), 0);
	printf("TRY during another thread's pin: answered without waiting: ok\n");
}

/* TRY does not wait for the invalidation lock, where odpx_reg() would. */
static void during_apply(void)
{
	struct odpx_mr *a;

	CHECK_RC(odpx_reg(ctx, buf + 56 * PG, 2 * PG, 0, &a), 0);
	monitor_lock();
	odpx_priv_seq_write(ctx, true);	/* as the monitor does while it applies events */
	int r = try_joined(buf + 56 * PG, 2 * PG, 10);
	odpx_priv_seq_write(ctx, false);
	monitor_unlock();
	CHECK(r > -1000, "TRY waited while the invalidation lock was held");
	CHECK(r == -EAGAIN, "TRY with the seq odd: %d, want -EAGAIN", r);
	r = try_joined(buf + 56 * PG, 2 * PG, 10);
	CHECK(r == 0, "TRY after the apply: %d", r);
	CHECK_RC(odpx_dereg(ctx, a), 0);
	printf("TRY while the monitor applies: -EAGAIN, no wait: ok\n");
}

static _Atomic bool churn_stop;

static void *churn(void *arg)
{
	unsigned char *p = arg;
	struct odpx_mr *mr;

	for (unsigned i = 0; !atomic_load(&churn_stop); i++) {
		CHECK_RC(odpx_reg(ctx, p + (i % 8) * PG, PG, 0, &mr), 0);
		CHECK_RC(odpx_dereg(ctx, mr), 0);
	}
	return NULL;
}

/* After munmap() returns, no TRY or PARTIAL returns the old pages. */
static void after_unmap(void)
{
	unsigned char *x = buf + 24 * PG, *other = map_anon(NULL, 8 * PG);
	struct odpx_mr *mr;
	pthread_t t;
	unsigned served = 0;

	memset(other, 3, 8 * PG);
	CHECK(pthread_create(&t, NULL, churn, other) == 0, "pthread_create");
	for (int round = 0; round < 2000; round++) {
		CHECK_RC(odpx_reg(ctx, x, 4 * PG, 0, &mr), 0);
		CHECK_RC(odpx_dereg(ctx, mr), 0);	/* cached, unused */
		CHECK(munmap(x, 4 * PG) == 0, "munmap");
		CHECK(map_anon(x, 4 * PG) == x, "mmap at the same address");
		memset(x, round & 0xff, 4 * PG);
		for (int f = 0; f < 2; f++) {
			int r = odpx_reg_ex(ctx, x + PG, PG, 0, f ? ODPX_REG_PARTIAL : ODPX_REG_TRY, &mr);
			if (r == -EAGAIN)
				continue;
			CHECK(r == 0, "%s after munmap: %d", f ? "PARTIAL" : "TRY", r);
			served++;	/* only a registration of the new pages may come back */
			CHECK(data_check(ctx, mr, x + PG, PG, (unsigned)round),
			      "round %d: %s returned the unmapped pages' registration", round,
			      f ? "PARTIAL" : "TRY");
			CHECK_RC(odpx_dereg(ctx, mr), 0);
		}
	}
	atomic_store(&churn_stop, true);
	CHECK(pthread_join(t, NULL) == 0, "join");
	CHECK(served == 0, "%u lookups served after munmap with nothing registered since", served);
	munmap(other, 8 * PG);
	printf("TRY/PARTIAL after munmap: never the old pages (2000 rounds): ok\n");
}

int main(void)
{
	CHECK(real_update, "no io_uring_register_buffers_update_tag to wrap");
	CHECK_RC(odpx_open_uring(NULL, &ctx), 0);
	buf = map_anon(NULL, 64 * PG);
	memset(buf, 1, 64 * PG);
	basic();
	during_pin();
	during_apply();
	after_unmap();
	CHECK_RC(odpx_close(ctx), 0);
	munmap(buf, 64 * PG);
	return 0;
}
