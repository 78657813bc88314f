// SPDX-License-Identifier: MIT
/*
 * self-deadlock: the two ways an application can make its own munmap wait
 * on odpx, each under a deadline (alarm: a hang kills the child, and fails).
 *  1. free() of a cached heap buffer makes glibc trim the heap top: the
 *     free() blocks until the monitor reads the UNMAP event.
 *  2. an application thread munmaps cached memory while other threads hit
 *     the cache lock-free and take misses.
 */
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/wait.h>

#include "test.h"

static struct odpx_ctx *ctx;
static atomic_bool stop;
static atomic_ulong hits;

static void heap_trim(void)
{
	struct odpx_mr *mr;
	char *w = map_anon(NULL, 4096);

	/* first-use allocations (monitor, engine) must not sit above the buffers */
	CHECK_RC(odpx_reg(ctx, w, 4096, 0, &mr), 0);
	CHECK_RC(odpx_dereg(ctx, mr), 0);
	mallopt(M_MMAP_THRESHOLD, 64 << 20);
	mallopt(M_TRIM_THRESHOLD, 64 * 1024);
	mallopt(M_TOP_PAD, 0);
	for (int i = 0; i < 50; i++) {
		char *p = malloc(1 << 20);
		CHECK(p, "malloc");
		memset(p, i, 1 << 20);
		CHECK_RC(odpx_reg(ctx, p, 1 << 20, 0, &mr), 0);
		CHECK_RC(odpx_dereg(ctx, mr), 0);	/* cached, unused */
		free(p);	/* trims the heap: UNMAP of a watched range */
	}
	CHECK(stats_of(ctx).inval_unmap > 0, "no heap trim was seen");
}

static void *hitter(void *arg)
{
	size_t len = 64 * 1024;
	char *p = map_anon(NULL, len);
	struct odpx_mr *mr;

	(void)arg;
	while (!atomic_load(&stop)) {
		CHECK_RC(odpx_reg(ctx, p, len, 0, &mr), 0);
		CHECK_RC(odpx_dereg(ctx, mr), 0);
		atomic_fetch_add(&hits, 1);
	}
	return NULL;
}

static void munmap_while_hitting(void)
{
	pthread_t t[3];
	double end = now_s() + 2;
	unsigned long n = 0;

	for (int i = 0; i < 3; i++)
		pthread_create(&t[i], NULL, hitter, NULL);
	while (now_s() < end) {
		struct odpx_mr *mr;
		size_t len = 4096 * (1 + n % 16);
		char *p = map_anon(NULL, len);
		memset(p, 1, len);
		CHECK_RC(odpx_reg(ctx, p, len, 0, &mr), 0);
		CHECK_RC(odpx_dereg(ctx, mr), 0);
		CHECK(munmap(p, len) == 0, "munmap");
		n++;
	}
	atomic_store(&stop, true);
	for (int i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	printf("munmaps of cached memory: %lu, concurrent hits: %lu\n", n, atomic_load(&hits));
	CHECK(stats_of(ctx).inval_unmap >= n, "unmaps not all seen");
	CHECK(atomic_load(&hits) > 0 && n > 0, "no munmap beside hits: %lu munmaps, %lu hits", n,
	      atomic_load(&hits));
}

static int run(void (*fn)(void), const char *name)
{
	int st;
	pid_t pid;

	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		alarm(30);	/* the deadline: SIGALRM kills a hung child */
		ctx = open_pin(0);
		fn();
		CHECK_RC(odpx_close(ctx), 0);
		fflush(stdout);
		_exit(0);
	}
	CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
	if (WIFSIGNALED(st))
		FAIL("%s: killed by signal %d%s", name, WTERMSIG(st),
		     WTERMSIG(st) == SIGALRM ? " (deadlock: deadline passed)" : "");
	CHECK(WEXITSTATUS(st) == 0, "%s failed", name);
	printf("%s: ok\n", name);
	return 0;
}

int main(void)
{
	if (SANITIZER_MALLOC)
		printf("free() trims a cached heap: n/a, the sanitizer's malloc has no brk heap "
		       "(run in the plain build)\n");
	else
		run(heap_trim, "free() trims a cached heap");
	run(munmap_while_hitting, "munmap while others hit");
	return 0;
}
