/* SPDX-License-Identifier: MIT */
/*
 * cache-memcg: pin mode on the uring backend never pins past the memory
 * cgroup's headroom, in a memory cgroup of 64 MiB (v1 under ours, or v2 at
 * the root of the hierarchy; made here, the host runs the tests as root).
 *
 * A child in the cgroup maps 192 MiB, three times the limit, untouched, and
 * registers it in 8 MiB parts, holding each.  Without the check the kernel
 * pins the parts in (each pin faults its pages in) until the cgroup's OOM
 * killer ends the child inside a registration.  With it: the first parts
 * are pinned, each moves the right bytes through odpx_transfer(), and once
 * the cgroup is full a registration returns -ENOMEM, with a reason naming
 * the memory cgroup, counted in memcg_refusals; the child is not killed.
 * Then, the held parts released (cached, unused) and their memory given
 * back (MADV_DONTNEED: invalidated), the parts beyond are registered and
 * move their bytes right.  Both phases in pin mode and in direct mode.
 * Every call's return is printed.
 *
 * Skips where no memory cgroup of our own can be made (not root, no memory
 * controller to give), with the reason.
 */
#include <inttypes.h>
#include <sys/syscall.h>

#include "memcg-test.h"

#define MiB ((uint64_t)1 << 20)
#define LIMIT (64 * MiB)
#define REGION (192 * MiB)
#define PART (8 * MiB)
#define PARTS (REGION / PART)
#define XFER (64 * 1024)		/* bytes moved per part, both ways */

static char cg[PATH_MAX];

/* One transfer out of the part and one back into it, checked byte for byte. */
static void check_bytes(struct odpx_ctx *ctx, struct odpx_mr *mr, char *part, unsigned i, int fd)
{
	static char back[XFER];
	ssize_t n;

	for (size_t k = 0; k < XFER; k++)
		part[k] = (char)(i * 31 + k * 7);
	n = odpx_transfer(ctx, mr, fd, 0, part, XFER, ODPX_XFER_TO_FD);
	CHECK(n == XFER, "part %u: transfer out %zd (%s)", i, n, odpx_last_reason());
	CHECK(pread(fd, back, XFER, 0) == XFER && !memcmp(back, part, XFER),
	      "part %u: the file holds other bytes than the part", i);
	memset(part, 0, XFER);
	n = odpx_transfer(ctx, mr, fd, 0, part, XFER, ODPX_XFER_FROM_FD);
	CHECK(n == XFER && !memcmp(back, part, XFER), "part %u: transfer in %zd, bytes %s", i, n,
	      n == XFER ? "differ" : "-");
}

static int child(void *arg)
{
	enum odpx_mode mode = *(enum odpx_mode *)arg;
	struct odpx_attr a = { .comp_mask = ODPX_ATTR_MODE | ODPX_ATTR_LIMITS, .mode = mode,
			       .limits = { .max_pinned_bytes = 1ULL << 30, .max_unused_bytes = 1ULL << 30 } };
	struct odpx_mr *mr[PARTS] = { 0 };
	struct odpx_stats st;
	struct odpx_ctx *ctx;
	unsigned pinned = 0, i;
	char *p;
	int fd, r;

	memcg_test_enter(cg);
	CHECK_RC(odpx_open_uring(&a, &ctx), 0);
	fd = (int)syscall(SYS_memfd_create, "cache-memcg", 0);
	CHECK(fd >= 0 && ftruncate(fd, XFER) == 0, "memfd");
	p = mmap(NULL, REGION, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(p != MAP_FAILED, "mmap");

	/* 1: hold every part until the cgroup is full */
	for (i = 0; i < PARTS; i++) {
		r = odpx_reg(ctx, p + i * PART, PART, ODPX_ACCESS_LOCAL_WRITE, &mr[i]);
		printf("%s: odpx_reg part %2u (%3" PRIu64 " MiB in) = %d%s%s\n", odpx_mode_str(mode), i,
		       i * PART / MiB, r, r ? ": " : "", r ? odpx_last_reason() : "");
		if (r < 0)
			break;
		check_bytes(ctx, mr[i], p + i * PART, i, fd);
		pinned++;
	}
	CHECK(i < PARTS, "all %" PRIu64 " MiB pinned in a cgroup of %" PRIu64 " MiB",
	      REGION / MiB, LIMIT / MiB);
	CHECK(r == -ENOMEM && strstr(odpx_last_reason(), "memory cgroup"),
	      "refused with %d, reason \"%s\"", r, odpx_last_reason());
	CHECK(pinned >= 2, "only %u parts pinned in a cgroup of %" PRIu64 " MiB", pinned,
	      LIMIT / MiB);
	CHECK_RC(odpx_stats_read(ctx, &st, sizeof(st)), sizeof(st));
	printf("%s: %u parts pinned, then refused; memcg_refusals %" PRIu64 "\n",
	       odpx_mode_str(mode), pinned, st.memcg_refusals);
	CHECK(st.memcg_refusals >= 1, "memcg_refusals %" PRIu64, st.memcg_refusals);

	/* 2: the held parts released and their memory given back, the rest fits */
	for (i = 0; i < pinned; i++) {
		CHECK_RC(odpx_dereg(ctx, mr[i]), 0);
		CHECK(madvise(p + i * PART, PART, MADV_DONTNEED) == 0, "madvise");
	}
	for (i = pinned; i < 2 * pinned && i < PARTS; i++) {
		r = odpx_reg(ctx, p + i * PART, PART, ODPX_ACCESS_LOCAL_WRITE, &mr[i]);
		printf("%s: odpx_reg part %2u after release = %d%s%s\n", odpx_mode_str(mode), i, r,
		       r ? ": " : "", r ? odpx_last_reason() : "");
		CHECK(r == 0, "part %u refused after the first %u went", i, pinned);
		check_bytes(ctx, mr[i], p + i * PART, i, fd);
	}
	for (i = pinned; i < 2 * pinned && i < PARTS; i++)
		CHECK_RC(odpx_dereg(ctx, mr[i]), 0);
	CHECK_RC(odpx_close(ctx), 0);
	printf("%s: not killed, every byte right\n", odpx_mode_str(mode));
	return 0;
}

int main(void)
{
	static enum odpx_mode modes[] = { ODPX_MODE_PIN, ODPX_MODE_DIRECT };
	int bad = 0;

	unsetenv("ODPX_MODE");
	for (unsigned m = 0; m < 2; m++) {
		if (!memcg_test_make(cg, sizeof(cg), LIMIT))
			SKIP("no memory cgroup of our own to limit");
		int rc = run_forked(NULL, child, &modes[m]);
		rmdir(cg);
		if (rc)
			printf("FAIL: %s mode: the child %s %d\n", odpx_mode_str(modes[m]),
			       rc > 128 ? "was killed by signal" : "exited with", rc > 128 ? rc - 128 : rc);
		bad |= rc;
	}
	if (bad)
		return 1;
	printf("PASS\n");
	return 0;
}
