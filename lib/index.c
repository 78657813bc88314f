// SPDX-License-Identifier: MIT
/*
 * index.c - the write side of the cache's index (see index.h): the exact-start
 * hash, whose bucket heads live inside the entries (bucket i's head is
 * ent[i].bucket, so the table costs no memory), and an AVL tree by start per
 * access class.  Every writer holds the invalidation lock inside a ctx->seq
 * write section; the stores are relaxed atomics because readers walk the
 * structures without a lock and validate with ctx->seq.
 */
#include "index.h"

/* ---- exact-start hash ---- */

/*
 * New entries go first, except behind an entry that sits in its own bucket's
 * slot: that one stays first, so its lookup reads a single line.
 */
static void hash_insert(struct odpx_ctx *ctx, uint32_t idx, uintptr_t start, uint32_t acc)
{
	uint32_t b = bucket_of(ctx, start, acc), head = LD(ctx->ent[b].bucket);
	_Atomic uint32_t *link = head == b && idx != b ? &ctx->ent[b].hnext : &ctx->ent[b].bucket;

	ST(ctx->ent[idx].hnext, LD(*link));
	ST(*link, idx);
}

static void hash_remove(struct odpx_ctx *ctx, uint32_t idx, uintptr_t start, uint32_t acc)
{
	_Atomic uint32_t *pp = &ctx->ent[bucket_of(ctx, start, acc)].bucket;

	for (uint32_t i = LD(*pp); i != NIL; pp = &ctx->ent[i].hnext, i = LD(*pp)) {
		if (i == idx) {
			ST(*pp, LD(ctx->ent[idx].hnext));
			return;
		}
	}
}

/* ---- AVL tree by start (writers under the invalidation lock) ---- */

static inline int height(struct odpx_ctx *ctx, uint32_t n)
{
	return n == NIL ? 0 : LD(ctx->ent[n].height);
}

static void fix_height(struct odpx_ctx *ctx, uint32_t n)
{
	int l = height(ctx, LD(ctx->ent[n].left)), r = height(ctx, LD(ctx->ent[n].right));
	ST(ctx->ent[n].height, (uint8_t)((l > r ? l : r) + 1));
}

static uint32_t rot_right(struct odpx_ctx *ctx, uint32_t n)
{
	uint32_t l = LD(ctx->ent[n].left);

	ST(ctx->ent[n].left, LD(ctx->ent[l].right));
	ST(ctx->ent[l].right, n);
	fix_height(ctx, n);
	fix_height(ctx, l);
	return l;
}

static uint32_t rot_left(struct odpx_ctx *ctx, uint32_t n)
{
	uint32_t r = LD(ctx->ent[n].right);

	ST(ctx->ent[n].right, LD(ctx->ent[r].left));
	ST(ctx->ent[r].left, n);
	fix_height(ctx, n);
	fix_height(ctx, r);
	return r;
}

static uint32_t balance(struct odpx_ctx *ctx, uint32_t n)
{
	struct entry *e = &ctx->ent[n];
	int bf;

	fix_height(ctx, n);
	bf = height(ctx, LD(e->left)) - height(ctx, LD(e->right));
	if (bf > 1) {
		uint32_t l = LD(e->left);
		if (height(ctx, LD(ctx->ent[l].left)) < height(ctx, LD(ctx->ent[l].right)))
			ST(e->left, rot_left(ctx, l));
		return rot_right(ctx, n);
	}
	if (bf < -1) {
		uint32_t r = LD(e->right);
		if (height(ctx, LD(ctx->ent[r].right)) < height(ctx, LD(ctx->ent[r].left)))
			ST(e->right, rot_right(ctx, r));
		return rot_left(ctx, n);
	}
	return n;
}

static uint32_t avl_insert(struct odpx_ctx *ctx, uint32_t n, uint32_t x)
{
	if (n == NIL) {
		ST(ctx->ent[x].left, NIL);
		ST(ctx->ent[x].right, NIL);
		ST(ctx->ent[x].height, 1);
		return x;
	}
	if (e_start(&ctx->ent[x]) < e_start(&ctx->ent[n]))
		ST(ctx->ent[n].left, avl_insert(ctx, LD(ctx->ent[n].left), x));
	else
		ST(ctx->ent[n].right, avl_insert(ctx, LD(ctx->ent[n].right), x));
	return balance(ctx, n);
}

static uint32_t avl_pop_min(struct odpx_ctx *ctx, uint32_t n, uint32_t *min)
{
	uint32_t l = LD(ctx->ent[n].left);

	if (l == NIL) {
		*min = n;
		return LD(ctx->ent[n].right);
	}
	ST(ctx->ent[n].left, avl_pop_min(ctx, l, min));
	return balance(ctx, n);
}

static uint32_t avl_remove(struct odpx_ctx *ctx, uint32_t n, uintptr_t key)
{
	if (n == NIL)
		return NIL;
	uintptr_t s = e_start(&ctx->ent[n]);
	if (key < s) {
		ST(ctx->ent[n].left, avl_remove(ctx, LD(ctx->ent[n].left), key));
	} else if (key > s) {
		ST(ctx->ent[n].right, avl_remove(ctx, LD(ctx->ent[n].right), key));
	} else {
		uint32_t l = LD(ctx->ent[n].left), r = LD(ctx->ent[n].right), m;
		if (r == NIL)
			return l;
		r = avl_pop_min(ctx, r, &m);
		ST(ctx->ent[m].left, l);
		ST(ctx->ent[m].right, r);
		return balance(ctx, m);
	}
	return balance(ctx, n);
}

/* Largest start <= a; optimistic callers bound the walk. */
uint32_t index_floor(struct odpx_ctx *ctx, uint32_t n, uintptr_t a)
{
	uint32_t best = NIL;

	for (int steps = 0; n != NIL && n < ctx->max_entries && steps < MAX_STEPS; steps++) {
		if (e_start(&ctx->ent[n]) <= a) {
			best = n;
			n = LD(ctx->ent[n].right);
		} else {
			n = LD(ctx->ent[n].left);
		}
	}
	return best < ctx->max_entries ? best : NIL;
}

/* Smallest start > a; bounded as index_floor() is, beyond any AVL tree's depth. */
uint32_t index_next(struct odpx_ctx *ctx, uint32_t n, uintptr_t a)
{
	uint32_t best = NIL;

	for (int steps = 0; n != NIL && n < ctx->max_entries && steps < MAX_STEPS; steps++) {
		if (e_start(&ctx->ent[n]) > a) {
			best = n;
			n = LD(ctx->ent[n].left);
		} else {
			n = LD(ctx->ent[n].right);
		}
	}
	return best < ctx->max_entries ? best : NIL;
}

/*
 * First indexed entry of class @acc overlapping [s, e), or NIL.  Alive
 * entries of a class never overlap: it is the one whose end passes @s with
 * the least start.  Optimistic callers validate it with a CAS and ctx->seq.
 */
uint32_t index_first_overlap(struct odpx_ctx *ctx, uint32_t acc, uintptr_t s, uintptr_t e)
{
	uint32_t root = LD(ctx->root[acc]);
	uint32_t x = index_floor(ctx, root, s);

	if (x == NIL || e_end(&ctx->ent[x]) <= s)
		x = index_next(ctx, root, s);
	return x != NIL && e_start(&ctx->ent[x]) < e ? x : NIL;
}

void index_insert(struct odpx_ctx *ctx, uint32_t idx, uint32_t acc)
{
	uintptr_t s = e_start(&ctx->ent[idx]);

	hash_insert(ctx, idx, s, acc);
	ST(ctx->root[acc], avl_insert(ctx, LD(ctx->root[acc]), idx));
}

void index_remove(struct odpx_ctx *ctx, uint32_t idx, uint32_t acc)
{
	uintptr_t s = e_start(&ctx->ent[idx]);

	hash_remove(ctx, idx, s, acc);
	ST(ctx->root[acc], avl_remove(ctx, LD(ctx->root[acc]), s));
}
