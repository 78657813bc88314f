/* SPDX-License-Identifier: MIT */
/*
 * memcg-headroom: lib/memcg.c's reading of the memory cgroup.
 *
 * 1. memcg_read() over the fixture trees tests/fixtures/memcg-limits (no
 *    swap) and memcg-limits-swap (the same cgroups, free swap): v2 with two
 *    levels where the outer one is the tightest, memory.high below
 *    memory.max, no limit anywhere, a garbage limit (-EINVAL), v1's
 *    hierarchical limit with and without a limit, no memory cgroup at all.
 *    Each headroom is worked out in the comment beside it.
 * 2. The live cgroup: memcg_read() of /proc and /sys succeeds; where a
 *    memory cgroup (v1, or v2 at the root of its hierarchy) can be made,
 *    a child in one of 96 MiB (1 GiB under a sanitizer, whose runtime's own memory
 *    is charged there too) sees that limit through memcg_headroom(), and
 *    its headroom falls by at least the 24 MiB it touches (no swap) or by
 *    the 24 MiB it says it pins (swap).
 */
#include <inttypes.h>
#include <limits.h>
#include <sys/stat.h>

#include "memcg-test.h"

#define MiB ((uint64_t)1 << 20)

/* the live cgroup's limit: room beside a sanitizer's shadow memory */
#define LIVE_LIMIT (SANITIZER_MALLOC ? 1024 * MiB : 96 * MiB)

static char fx[PATH_MAX];

static struct memcg_view view(const char *tree, pid_t pid, uint64_t pinned, int want_rc)
{
	char proc[PATH_MAX + 32], sys[PATH_MAX + 32];
	struct memcg_roots r = { .proc = proc, .sys = sys, .pid = pid };
	struct memcg_view v;
	int rc;

	snprintf(proc, sizeof(proc), "%s/%s/proc", fx, tree);
	snprintf(sys, sizeof(sys), "%s/%s/sys", fx, tree);
	rc = memcg_read(&r, pinned, &v);
	CHECK(rc == want_rc, "%s pid %d: memcg_read = %d (%s), want %d", tree, (int)pid, rc,
	      strerror(-rc), want_rc);
	if (!rc)
		printf("%-17s pid %d: v%d %-18s limit %-20" PRIu64 " headroom %-20" PRIu64
		       " unreclaimable %" PRIu64 "%s\n", tree, (int)pid, v.version, v.path,
		       v.limit_bytes, v.headroom_bytes, v.unreclaimable_bytes, v.swap ? " swap" : "");
	return v;
}

static void test_fixtures(void)
{
	struct memcg_view v;

	/*
	 * b.scope: 200 MiB (memory.high), margin 25, 32 unreclaimable (39 - (9 - 2)): 143.
	 * a.slice: 100 MiB, margin 16, 32 unreclaimable (40 - (10 - 2)): 52, the least.
	 */
	v = view("memcg-limits", 100, 0, 0);
	CHECK(v.version == 2 && !strcmp(v.path, "/a.slice/b.scope"), "v%d %s", v.version, v.path);
	CHECK(v.limit_bytes == 100 * MiB && v.margin_bytes == 16 * MiB, "limit %" PRIu64, v.limit_bytes);
	CHECK(v.headroom_bytes == 52 * MiB, "headroom %" PRIu64 ", want 52 MiB", v.headroom_bytes);
	CHECK(!v.swap, "no swap in meminfo, yet swap");
	/* with swap anon and shmem can go, but not the 4 MiB odpx pins: a.slice 40 - 36 = 4 */
	v = view("memcg-limits-swap", 100, 4 * MiB, 0);
	CHECK(v.swap && v.headroom_bytes == 80 * MiB, "swap %d headroom %" PRIu64 ", want 80 MiB",
	      v.swap, v.headroom_bytes);
	/* without swap, what odpx pins is anon, unreclaimable either way: unchanged */
	v = view("memcg-limits", 100, 4 * MiB, 0);
	CHECK(v.headroom_bytes == 52 * MiB, "headroom %" PRIu64, v.headroom_bytes);
	/* memory.high 1 GiB under memory.max 2 GiB: 1024 - 128 - 100 */
	v = view("memcg-limits", 300, 0, 0);
	CHECK(v.limit_bytes == 1024 * MiB && v.headroom_bytes == 796 * MiB,
	      "limit %" PRIu64 " headroom %" PRIu64, v.limit_bytes, v.headroom_bytes);
	/* "max" at every level */
	v = view("memcg-limits", 400, 0, 0);
	CHECK(v.version == 2 && v.limit_bytes == UINT64_MAX && v.headroom_bytes == UINT64_MAX,
	      "v%d limit %" PRIu64, v.version, v.limit_bytes);
	view("memcg-limits", 500, 0, -EINVAL);	/* memory.max "12abc" */
	/* v1: 256 MiB, margin 32, 80 unreclaimable (100 - 20 of cache): 144; memsw = limit: no swap */
	for (int i = 0; i < 2; i++) {
		v = view(i ? "memcg-limits-swap" : "memcg-limits", 600, 0, 0);
		CHECK(v.version == 1 && !strcmp(v.path, "/job") && v.headroom_bytes == 144 * MiB &&
		      !v.swap, "v%d %s headroom %" PRIu64 " swap %d", v.version, v.path,
		      v.headroom_bytes, v.swap);
	}
	v = view("memcg-limits", 700, 0, 0);	/* v1 at its root: PAGE_COUNTER_MAX, no limit */
	CHECK(v.version == 1 && v.headroom_bytes == UINT64_MAX, "v%d", v.version);
	v = view("memcg-limits", 800, 0, 0);	/* no memory controller line */
	CHECK(v.version == 0 && v.headroom_bytes == UINT64_MAX, "v%d", v.version);
	view("memcg-limits", 900, 0, 0);	/* no such process: no cgroup, no error */
}

static char cg[PATH_MAX];
static int cg_version;

static int child(void *arg)
{
	uint64_t h1, h2;
	struct memcg_view v;
	uint64_t len = 24 * MiB;
	char *p;

	(void)arg;
	memcg_test_enter(cg);
	CHECK(memcg_headroom(0, &h1, &v) == 0, "memcg_headroom failed");
	printf("in %s (v%d): limit %" PRIu64 " MiB, headroom %" PRIu64 " MiB, unreclaimable %"
	       PRIu64 " MiB%s\n", v.path, v.version, v.limit_bytes / MiB, h1 / MiB,
	       v.unreclaimable_bytes / MiB, v.swap ? ", swap" : "");
	CHECK(v.version == cg_version && v.limit_bytes == LIVE_LIMIT, "v%d limit %" PRIu64,
	      v.version, v.limit_bytes);
	CHECK(h1 <= LIVE_LIMIT - v.margin_bytes && v.margin_bytes >= 16 * MiB,
	      "headroom %" PRIu64 " above limit - margin (%" PRIu64 ")", h1, v.margin_bytes);
	/* the pin paths' reading: a lower bound once it is enough, the whole reading else */
	uint64_t q;
	CHECK(memcg_headroom_atleast(0, MiB, &q, NULL) == 0 && q >= MiB && q <= h1 + 2 * MiB,
	      "memcg_headroom_atleast(1 MiB) = %" PRIu64 ", headroom %" PRIu64, q, h1);
	CHECK(memcg_headroom_atleast(0, LIVE_LIMIT, &q, NULL) == 0 && q + 2 * MiB >= h1 &&
	      q <= h1 + 2 * MiB, "memcg_headroom_atleast(the limit) = %" PRIu64 ", headroom %"
	      PRIu64, q, h1);
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(p != MAP_FAILED, "mmap");
	memset(p, 1, len);
	/* with swap the touched pages can go, but the ones said pinned cannot */
	CHECK(memcg_headroom(v.swap ? len : 0, &h2, &v) == 0, "memcg_headroom failed");
	printf("after touching %" PRIu64 " MiB: headroom %" PRIu64 " MiB\n", len / MiB, h2 / MiB);
	CHECK(h2 + len - 2 * MiB <= h1, "headroom fell from %" PRIu64 " to %" PRIu64
	      ", less than the 24 MiB", h1, h2);
	return 0;
}

static void test_live(void)
{
	struct memcg_roots r = { .proc = "/proc", .sys = "/sys" };
	struct memcg_view v;
	int rc = memcg_read(&r, 0, &v);

	CHECK(rc == 0, "memcg_read of this process: %s", strerror(-rc));
	printf("this process: v%d %s, limit %" PRIu64 ", headroom %" PRIu64 "\n", v.version, v.path,
	       v.limit_bytes, v.headroom_bytes);
	if (v.version == 0) {
		printf("no memory cgroup here: the live part is not run\n");
		return;
	}
	if (!(cg_version = memcg_test_make(cg, sizeof(cg), LIVE_LIMIT))) {
		printf("no memory cgroup of our own could be made: the live part is not run\n");
		return;
	}
	rc = run_forked(NULL, child, NULL);
	rmdir(cg);
	CHECK(rc == 0, "the child in %s failed (%d)", cg, rc);
}

int main(void)
{
	find_fixtures(fx, sizeof(fx), "memcg-limits");
	test_fixtures();
	test_live();
	printf("PASS\n");
	return 0;
}
