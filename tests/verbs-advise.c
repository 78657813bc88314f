// SPDX-License-Identifier: MIT
/*
 * verbs-advise: how prefetch hints become ibv_advise_mr calls, without a device.  The engine
 * coalesces and de-duplicates (prefetch_coalesce); the verbs backend cuts the result into
 * SGEs that each lie inside one chunk MR and at most 1 GiB long, grouped by advice, and
 * batches them ADV_MAX_SGE at a time, one call per batch (adv_next).
 */
#include "test.h"
#include "odpx-private.h"	/* mode.h: the advice's splitting; prefetch_coalesce */

#define MB (1UL << 20)
#define BASE 0x7f0000000000UL

struct adv_batch {
	uint8_t advice;
	uint32_t first, count;
};

/* The batches of adv_next() over @r, their pieces into @p one after another. */
static size_t plan(struct pf_range *r, size_t n, unsigned shift, struct adv_piece *p, size_t max,
		   struct adv_batch *b, size_t *npieces)
{
	struct adv_cursor cur = { 0 };
	size_t k = 0, nb = 0, m;

	while ((m = adv_next(r, n, shift, &cur, p + k, ADV_MAX_SGE)) > 0) {
		CHECK(m <= ADV_MAX_SGE && k + m + ADV_MAX_SGE <= max, "adv_next: %zu pieces", m);
		for (size_t j = 1; j < m; j++)
			CHECK(p[k + j].advice == p[k].advice, "a batch of two advices");
		b[nb++] = (struct adv_batch){ p[k].advice, (uint32_t)k, (uint32_t)m };
		k += m;
	}
	*npieces = k;
	return nb;
}

int main(void)
{
	static struct adv_piece p[20000];
	static struct adv_batch b[20000];
	static struct pf_range r[20000];
	size_t k, nb;

	/* 1. one range over three 2 MiB chunks: three SGEs, cut at the chunk boundaries */
	r[0] = (struct pf_range){ BASE + MB, BASE + 5 * MB, 0 };
	nb = plan(r, 1, 21, p, 20000, b, &k);
	CHECK(k == 3 && nb == 1, "k %zu nb %zu", k, nb);
	CHECK(p[0].addr == BASE + MB && p[0].len == MB, "piece 0");
	CHECK(p[1].addr == BASE + 2 * MB && p[1].len == 2 * MB, "piece 1");
	CHECK(p[2].addr == BASE + 4 * MB && p[2].len == MB, "piece 2");
	/* implicit (no chunks): one SGE, unless longer than 1 GiB */
	nb = plan(r, 1, 0, p, 20000, b, &k);
	CHECK(k == 1 && p[0].len == 4 * MB, "implicit: one SGE");
	r[0] = (struct pf_range){ BASE, BASE + 2500 * MB, 0 };
	nb = plan(r, 1, 0, p, 20000, b, &k);
	CHECK(k == 3 && p[0].len == ADV_SGE_MAX_BYTES && p[2].len == 452 * MB, "1 GiB SGE cap");

	/* 2. advice by flags, grouped: PREFETCH, then PREFETCH_WRITE, then NO_FAULT */
	CHECK(adv_of_flags(0) == ADV_PREFETCH, "0");
	CHECK(adv_of_flags(ODPX_PREFETCH_WRITE) == ADV_PREFETCH_WRITE, "write");
	CHECK(adv_of_flags(ODPX_PREFETCH_NO_FAULT) == ADV_PREFETCH_NO_FAULT, "no fault");
	CHECK(adv_of_flags(ODPX_PREFETCH_NO_FAULT | ODPX_PREFETCH_WRITE) == ADV_PREFETCH_NO_FAULT,
	      "no fault wins");
	for (int i = 0; i < 9; i++)
		r[i] = (struct pf_range){ BASE + i * 8 * MB, BASE + i * 8 * MB + 4096,
					  i % 3 == 0 ? 0 : i % 3 == 1 ? ODPX_PREFETCH_WRITE
								: ODPX_PREFETCH_NO_FAULT };
	nb = plan(r, 9, 26, p, 20000, b, &k);
	CHECK(k == 9 && nb == 3, "k %zu nb %zu", k, nb);
	for (int i = 0; i < 3; i++) {
		CHECK(b[i].advice == i && b[i].count == 3 && b[i].first == 3u * i, "batch %d", i);
		for (int j = 0; j < 3; j++)
			CHECK(p[3 * i + j].advice == i, "piece advice");
		CHECK(p[3 * i].addr < p[3 * i + 1].addr && p[3 * i + 1].addr < p[3 * i + 2].addr,
		      "address order within an advice");
	}

	/* 3. batches hold at most ADV_MAX_SGE SGEs */
	for (int i = 0; i < 100; i++)
		r[i] = (struct pf_range){ BASE + i * 4 * MB, BASE + i * 4 * MB + 8192,
					  ODPX_PREFETCH_WRITE };
	nb = plan(r, 100, 21, p, 20000, b, &k);
	CHECK(k == 100 && nb == (100 + ADV_MAX_SGE - 1) / ADV_MAX_SGE, "k %zu nb %zu", k, nb);
	for (size_t i = 0; i < nb; i++)
		CHECK(b[i].count == (i + 1 < nb ? ADV_MAX_SGE : 100 - (nb - 1) * ADV_MAX_SGE),
		      "batch %zu count %u", i, b[i].count);

	/* 4. 10,000 one-page hints walking 5,000 adjacent pages, each page twice, shuffled
	 * within groups of 64: the engine pops at most 256 at a time and coalesces each window */
	size_t n = 10000, calls = 0, sges = 0;
	for (size_t i = 0; i < n; i++) {
		size_t pg = (i / 2 / 64) * 64 + ((i / 2) * 37) % 64;
		r[i] = (struct pf_range){ BASE + pg * 4096, BASE + (pg + 1) * 4096, ODPX_PREFETCH_WRITE };
	}
	for (size_t off = 0; off < n; off += 256) {
		size_t w = n - off < 256 ? n - off : 256;
		size_t m = prefetch_coalesce(r + off, w, UINT64_MAX, NULL);
		CHECK(m >= 1 && m <= w, "coalesce");
		for (size_t j = 1; j < m; j++)
			CHECK(r[off + j - 1].end < r[off + j].start, "coalesced ranges overlap or touch");
		nb = plan(r + off, m, 26, p, 20000, b, &k);
		calls += nb;
		sges += k;
	}
	printf("10000 hints -> %zu SGEs in %zu ibv_advise_mr calls (windows of 256)\n", sges, calls);
	CHECK(calls <= (n + 255) / 256, "too many calls: %zu", calls);
	/* the whole set at once: one range, one SGE */
	for (size_t i = 0; i < n; i++) {
		size_t pg = (i * 7919) % 5000;
		r[i] = (struct pf_range){ BASE + pg * 4096, BASE + (pg + 1) * 4096, ODPX_PREFETCH_WRITE };
	}
	k = prefetch_coalesce(r, n, UINT64_MAX, NULL);
	CHECK(k == 1 && r[0].start == BASE && r[0].end == BASE + 5000 * 4096UL, "one range");
	return 0;
}
