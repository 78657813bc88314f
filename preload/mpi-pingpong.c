// SPDX-License-Identifier: MIT
/*
 * mpi-pingpong - an MPI ping-pong of 2 ranks that knows nothing of odpx: the
 * drop-in (libodpx-preload.so) is tested under an MPI job with it.
 *
 *   mpirun -n 2 ... mpi-pingpong [ITER [SIZE]...]
 *
 * Per iteration and size (default 8 iterations of 64 B, 4 KiB, 64 KiB and
 * 1 MiB), rank 0 sends a message to rank 1 and rank 1 answers it, each time:
 *   - from a buffer freshly malloc()ed for that message and freed after it;
 *   - into a buffer freshly malloc()ed for it, every byte checked;
 *   - then once more from, and into, a fixed mapping of each rank that is
 *     replaced before each iteration by munmap() and mmap(MAP_FIXED) at the
 *     same address with new contents.
 * The contents differ per iteration, size, direction and buffer, so a
 * registration that still maps the old pages delivers bytes the check
 * rejects.  Large malloc()s are mmap()ed chunks that free() unmaps, and the
 * next malloc() of the size tends to get the same address back: the count
 * of such reuses is printed.
 *
 * Then it times TIMED_ROUNDS round trips of TIMED_BYTES (1 MiB: ofi_rxm's
 * rendezvous size, where it registers the buffer) of each of two kinds,
 * interleaved: from and into a buffer pair reused as it is, and from and
 * into the pair replaced just before, every byte checked in both; it prints
 * half the median round trip of each (rank 0's line is the figure).
 *
 * Each rank prints one line "rank R: ... every byte correct" and exits 0, or
 * prints the first wrong byte and calls MPI_Abort (exit 1).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <mpi.h>

#define MAX_SIZES 16
#define FIXED_BYTES (1u << 20)	/* the remapped buffer: the largest default size */
#define TIMED_BYTES FIXED_BYTES	/* 64 KiB and below: ofi_rxm registered nothing in the guests */
#define TIMED_ROUNDS 16

static int rank;

__attribute__((format(printf, 1, 2))) static void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "rank %d: ", rank);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	MPI_Abort(MPI_COMM_WORLD, 1);
	exit(1);
}

/* The byte at @i of the message with @seed (its iteration, size, direction and buffer). */
static uint8_t pattern(uint32_t seed, size_t i)
{
	uint32_t x = seed * 2654435761u + (uint32_t)i * 40503u + (uint32_t)(i >> 12);

	return (uint8_t)(x ^ (x >> 11) ^ (x >> 19));
}

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = pattern(seed, i);
}

static void check(const uint8_t *p, size_t n, uint32_t seed, const char *what)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != pattern(seed, i))
			die("%s: byte %zu of %zu is wrong (stale or lost data)", what, i, n);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* @fixed replaced at the same address: new, zeroed pages in place of the old ones. */
static void remap(void *fixed)
{
	if (munmap(fixed, FIXED_BYTES))
		die("munmap: %s", strerror(errno));
	void *p = mmap(fixed, FIXED_BYTES, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	if (p != fixed)
		die("mmap MAP_FIXED: %s", strerror(errno));
}

/* One message of @n bytes from rank @from to the other, sent from @sbuf, received into @rbuf. */
static void one(int from, uint8_t *sbuf, uint8_t *rbuf, size_t n, uint32_t seed, const char *what)
{
	if (rank == from) {
		fill(sbuf, n, seed);
		if (MPI_Send(sbuf, (int)n, MPI_BYTE, 1 - rank, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
			die("%s: MPI_Send of %zu bytes failed", what, n);
	} else {
		memset(rbuf, 0, n);
		if (MPI_Recv(rbuf, (int)n, MPI_BYTE, 1 - rank, 0, MPI_COMM_WORLD,
			     MPI_STATUS_IGNORE) != MPI_SUCCESS)
			die("%s: MPI_Recv of %zu bytes failed", what, n);
		check(rbuf, n, seed, what);
	}
}

int main(int argc, char **argv)
{
	size_t sizes[MAX_SIZES] = { 64, 4096, 65536, FIXED_BYTES };
	int nsizes = 4, iters = 8, nranks;
	uint64_t checked = 0, reused = 0, msgs = 0;
	char host[MPI_MAX_PROCESSOR_NAME];
	int hostlen;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	MPI_Get_processor_name(host, &hostlen);
	if (nranks != 2)
		die("%d ranks, want 2", nranks);
	if (argc > 1 && (iters = atoi(argv[1])) <= 0)
		die("bad ITER %s", argv[1]);
	if (argc > 2) {
		nsizes = 0;
		for (int a = 2; a < argc && nsizes < MAX_SIZES; a++) {
			long s = atol(argv[a]);
			if (s <= 0 || s > (long)FIXED_BYTES)
				die("bad SIZE %s (1..%u)", argv[a], FIXED_BYTES);
			sizes[nsizes++] = (size_t)s;
		}
	}

	/* the fixed buffers: [0] sent from, [1] received into, both replaced every iteration */
	uint8_t *fixed[2];
	for (int b = 0; b < 2; b++) {
		fixed[b] = mmap(NULL, FIXED_BYTES, PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (fixed[b] == MAP_FAILED)
			die("mmap: %s", strerror(errno));
	}

	void *last[MAX_SIZES][2] = { { NULL } };
	double t0 = MPI_Wtime();
	for (int it = 0; it < iters; it++) {
		if (it > 0) {
			remap(fixed[0]);
			remap(fixed[1]);
		}
		for (int si = 0; si < nsizes; si++) {
			size_t n = sizes[si];
			for (int dir = 0; dir < 2; dir++) {
				uint32_t seed = ((uint32_t)it * MAX_SIZES + (uint32_t)si) * 4 + (uint32_t)dir * 2;
				uint8_t *s = malloc(n), *r = malloc(n);
				if (!s || !r)
					die("malloc(%zu) failed", n);
				void *mine = rank == dir ? (void *)s : (void *)r;
				reused += mine == last[si][dir];
				last[si][dir] = mine;
				one(dir, s, r, n, seed, "malloc buffer");
				free(s);
				free(r);
				one(dir, fixed[0], fixed[1], n, seed + 1, "remapped buffer");
				msgs += 2;
				if (rank != dir)
					checked += 2 * n;
			}
		}
	}
	double secs = MPI_Wtime() - t0;

	/*
	 * Per-message cost, round trips of the two kinds interleaved so that drift
	 * falls on both: the pair reused as it is, and the pair replaced first
	 * (the remap inside the timed window: a monitor's cost of it counts).
	 * The median round trip of each, halved.
	 */
	static double rt[2][TIMED_ROUNDS];
	for (int k = 0; k < TIMED_ROUNDS; k++) {
		for (int phase = 0; phase < 2; phase++) {
			uint32_t seed = 0x40000000u + (uint32_t)(k * 2 + phase) * 4;
			MPI_Barrier(MPI_COMM_WORLD);
			double p0 = MPI_Wtime();
			if (phase) {
				remap(fixed[0]);
				remap(fixed[1]);
			}
			one(0, fixed[0], fixed[1], TIMED_BYTES, seed, phase ? "timed remapped" : "timed reused");
			one(1, fixed[0], fixed[1], TIMED_BYTES, seed + 2, phase ? "timed remapped" : "timed reused");
			rt[phase][k] = MPI_Wtime() - p0;
		}
	}
	double us[2];
	for (int phase = 0; phase < 2; phase++) {
		qsort(rt[phase], TIMED_ROUNDS, sizeof(double), cmp_double);
		us[phase] = rt[phase][TIMED_ROUNDS / 2] * 1e6 / 2;
	}
	MPI_Barrier(MPI_COMM_WORLD);
	printf("rank %d: %d round trips of %u bytes: reused %.0f us/msg, remapped %.0f us/msg, "
	       "ratio %.2f\n", rank, TIMED_ROUNDS, TIMED_BYTES, us[0], us[1], us[1] / us[0]);
	printf("rank %d on %.*s: %d iterations of %d sizes, %" PRIu64 " messages in %.2f s, "
	       "%" PRIu64 " bytes received and checked, %" PRIu64 " malloc addresses reused: "
	       "every byte correct\n", rank, hostlen, host, iters, nsizes, msgs, secs, checked,
	       reused);
	fflush(stdout);
	MPI_Finalize();
	return 0;
}
