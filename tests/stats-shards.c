// SPDX-License-Identifier: MIT
/*
 * stats-shards: the hit's counters stay thread-private however many threads
 * come and go.  A thread that counts borrows one of the context's counter
 * shards and gives it back when it exits; only threads beyond the shards
 * alive at the same time share the atomic overflow.
 *  - 4 x the shards of threads one after another: each owns shard 0, the
 *    one its predecessor gave back;
 *  - the shards + 8 threads alive at once: exactly the shards own one, 8
 *    count in the overflow; once they are gone, a new thread owns one again;
 *  - a fork child, forked while they all hold theirs, lends none but its
 *    own thread's (the others do not live there), and that thread gets one;
 *  - every hit and release is counted: the sums are exact.
 */
#include "test.h"
#include "odpx-private.h"

#define OPS 1000
static struct odpx_ctx *ctx;
static char *buf;
static pthread_barrier_t all_in, all_go;
static atomic_uint owned, overflow;

/* OPS hits of page @i, then this thread's shard (odpx_priv_shard()) */
static int count(unsigned i)
{
	unsigned n, lent;

	for (int k = 0; k < OPS; k++) {
		struct odpx_mr *mr;

		CHECK_RC(odpx_reg(ctx, buf + (size_t)i * 4096, 4096, ODPX_ACCESS_LOCAL_WRITE, &mr), 0);
		CHECK_RC(odpx_dereg(ctx, mr), 0);
	}
	return odpx_priv_shard(&n, &lent);
}

static void *one(void *arg)
{
	return (void *)(intptr_t)count((unsigned)(uintptr_t)arg);
}

static void *together(void *arg)
{
	pthread_barrier_wait(&all_in);
	int s = count((unsigned)(uintptr_t)arg);

	atomic_fetch_add(s >= 0 ? &owned : &overflow, 1);
	pthread_barrier_wait(&all_go);	/* hold the shard until main has forked */
	return NULL;
}

static int run_one(unsigned i)
{
	pthread_t t;
	void *s;

	CHECK(pthread_create(&t, NULL, one, (void *)(uintptr_t)i) == 0, "pthread_create");
	pthread_join(t, &s);
	return (int)(intptr_t)s;
}

/* The child of a fork taken while every shard was lent: only its own thread's may be */
static void child(unsigned nthr)
{
	unsigned n, lent;
	int mine = odpx_priv_shard(&n, &lent);

	if (lent != (mine >= 0 ? 1u : 0u)) {
		fprintf(stderr, "FAIL: the fork child lends %u shards (its thread: %d)\n", lent, mine);
		_exit(1);
	}
	ctx = open_pin(0);	/* a fork's child gets no inherited context */
	if ((mine = count(nthr)) < 0) {
		fprintf(stderr, "FAIL: the fork child's thread counts in shard %d\n", mine);
		_exit(1);
	}
	_exit(0);
}

int main(void)
{
	unsigned nshards, lent;
	uint64_t ops = 0;

	odpx_priv_shard(&nshards, &lent);
	unsigned nthr = nshards + 8;

	ctx = open_pin(0);
	buf = map_anon(NULL, (size_t)(nthr + 1) * 4096);

	/* one after another: each gets the shard its predecessor gave back */
	for (unsigned i = 0; i < 4 * nshards; i++, ops += OPS) {
		int s = run_one(i % nthr);

		CHECK(s == 0, "thread %u of %u, one at a time: shard %d, want 0 (given back)",
		      i + 1, 4 * nshards, s);
	}
	printf("%u threads one after another: each owned shard 0\n", 4 * nshards);

	/* more at once than there are shards */
	pthread_t t[nthr];

	pthread_barrier_init(&all_in, NULL, nthr);
	pthread_barrier_init(&all_go, NULL, nthr + 1);
	for (unsigned i = 0; i < nthr; i++, ops += OPS)
		CHECK(pthread_create(&t[i], NULL, together, (void *)(uintptr_t)i) == 0, "create");
	while (owned + overflow < nthr)
		usleep(1000);
	CHECK(owned == nshards && overflow == 8,
	      "%u threads at once: %u owned a shard, %u the overflow; want %u and 8",
	      nthr, owned, overflow, nshards);
	printf("%u threads at once: %u owned a shard, %u shared the overflow\n", nthr, owned,
	       overflow);

	/* a fork now: every shard is lent to a thread the child will not have */
	pid_t pid = fork();
	int st;

	CHECK(pid >= 0, "fork");
	if (pid == 0)
		child(nthr);
	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	      "the fork child (status %#x)", st);
	printf("a child forked meanwhile lent no shard but its own thread's\n");

	pthread_barrier_wait(&all_go);
	for (unsigned i = 0; i < nthr; i++)
		pthread_join(t[i], NULL);
	int s = run_one(0);

	CHECK(s >= 0, "after they exited: shard %d, want one of its own", s);
	ops += OPS;

	struct odpx_stats sum = stats_of(ctx);

	CHECK(sum.hits + sum.misses == ops && sum.deregs == ops,
	      "counted %llu hits + %llu misses and %llu releases, want %llu of each",
	      (unsigned long long)sum.hits, (unsigned long long)sum.misses,
	      (unsigned long long)sum.deregs, (unsigned long long)ops);
	printf("counted all %llu registrations and releases\n", (unsigned long long)ops);
	CHECK_RC(odpx_close(ctx), 0);
	printf("PASS stats-shards\n");
	return 0;
}
