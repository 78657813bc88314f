/* SPDX-License-Identifier: MIT */
/*
 * mode.h - the mode decision and the verbs backend's pure helpers.
 *
 * Everything here is free of libibverbs so the host suite can test it
 * without a device: the decision from ODP capabilities to a mode and its
 * reason, the conversion of verbs errors, and the cutting of prefetch hints
 * into ibv_advise_mr scatter lists.  Bit values equal rdma-core's.
 */
#ifndef ODPX_MODE_H
#define ODPX_MODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "odpx-private.h"	/* struct pf_range */

/* enum ibv_odp_general_caps */
#define MODE_ODP_SUPPORT		(1u << 0)
#define MODE_ODP_SUPPORT_IMPLICIT	(1u << 1)
/* enum ibv_odp_transport_cap_bits */
#define MODE_ODP_SEND		(1u << 0)
#define MODE_ODP_RECV		(1u << 1)
#define MODE_ODP_WRITE		(1u << 2)
#define MODE_ODP_READ		(1u << 3)
#define MODE_ODP_ATOMIC		(1u << 4)
#define MODE_ODP_SRQ_RECV	(1u << 5)

/* What ibv_query_device_ex() said (queried false: it failed with query_err). */
struct mode_caps {
	bool queried;
	int query_err;			/* positive errno */
	uint64_t general;		/* odp_caps.general_caps */
	uint32_t rc, uc, ud, xrc;	/* per-transport ODP caps */
	uint64_t max_mr, max_mr_size, max_pd;	/* for odpx_query(); 0: unknown */
	bool odp_bad;			/* the ODP self-test moved wrong bytes: @odp_check says how */
	char odp_check[96];		/* the self-test's finding, or why it did not run; "" if passed */
};

struct mode_request {
	enum odpx_mode forced;		/* ODPX_MODE_AUTO: choose */
	const char *forced_by;		/* "attributes", "ODPX_MODE" */
	uint32_t transports;		/* enum odpx_transport, non-zero */
	int implicit_err;		/* the implicit MR failed with this errno: skip it */
};

struct mode_choice {
	enum odpx_mode mode;
	char reason[192];
};

/*
 * mode_decide - pure: the mode for these caps and this request, and why.
 * Auto: implicit (general IMPLICIT + every declared transport's caps, and
 * the implicit MR did not fail), else explicit (ODP_SUPPORT + the caps),
 * else pin; never an ODP mode when the ODP self-test found wrong bytes
 * (@c->odp_bad).  A forced mode is taken when possible.
 * Return: 0, or -EOPNOTSUPP for a forced mode the caps cannot do (the reason
 * says why), -EINVAL for a mode or transports out of range.
 */
int mode_decide(const struct mode_caps *c, const struct mode_request *rq,
		struct mode_choice *out);

/*
 * Hybrid mode's placement of a registration the pinned part does not hold.
 * @bytes: the request, page-rounded; @pinned: what the pinned part holds
 * (in use, unused, and on its way out); @budget: its max_pinned_bytes;
 * @headroom: the bytes the memory cgroup lets be pinned beyond what is
 * pinned now (memcg.h:memcg_headroom(); UINT64_MAX: no limit);
 * @odp_serves: an ODP MR already holds the range; @thrash: the detector says
 * THRASH for the context's ODP part; @churn: the pinned part released unused
 * pins for the memory cgroup within HYBRID_CHURN_MS.
 */
struct hybrid_in {
	uint64_t bytes, pinned, budget, headroom;
	bool odp_serves, thrash, churn;
};
#define HYBRID_CHURN_MS 1000

enum hybrid_place {
	HYB_PIN,	/* pin it: it fits the budget and leaves headroom */
	HYB_ODP,	/* serve it from ODP */
	HYB_TO_PIN,	/* an ODP MR serves it, ODP thrashes, and the pin fits: move it */
};

/*
 * hybrid_place - pure: where a hybrid registration goes.  A pin must fit
 * both the budget and the headroom: pinned pages cannot be reclaimed, and a
 * cgroup whose memory is pinned up to memory.max answers the next charge
 * with its OOM killer.  A range an ODP MR
 * already serves stays there while ODP does not thrash: re-registering it
 * pinned costs a registration and buys only the faults ODP is not taking.
 * While the cgroup takes back unused pins (@churn) nothing new is pinned:
 * the headroom counts the cold part of the cgroup as room, but a pin made
 * now would be released before it is used again, and a pin and its release
 * cost more than the device's faults on an ODP MR.
 */
enum hybrid_place hybrid_place(const struct hybrid_in *in);

/* "auto", "" or NULL -> AUTO; a mode name -> it; else -EINVAL. */
int mode_parse(const char *s, enum odpx_mode *m);
/* mode_parse() of ODPX_MODE; -EINVAL naming it */
int mode_env(enum odpx_mode *m);

/*
 * mode_verbs_err - the one conversion of libibverbs' errors to -errno.
 * @rc: a verbs return: 0, a positive errno (most verbs), -1 with @err the
 *   errno (the NULL + errno of constructors is passed as -1), or a negative
 *   errno.  A failure that left no errno becomes -EIO.
 */
int mode_verbs_err(int rc, int err);

/*
 * Prefetch scatter lists.  A piece is one SGE: inside one chunk when
 * @chunk_shift is non-zero (an SGE names one MR), at most ADV_SGE_MAX_BYTES.
 * adv_next() gives the next batch, one ibv_advise_mr call: at most @max
 * pieces of one advice, from a cursor that starts zeroed; 0 at the end.
 * Batches come grouped by advice (PREFETCH, PREFETCH_WRITE, NO_FAULT), by
 * range and address within each group.
 */
enum { ADV_PREFETCH = 0, ADV_PREFETCH_WRITE, ADV_PREFETCH_NO_FAULT, ADV_NR };
#define ADV_SGE_MAX_BYTES (1UL << 30)
#define ADV_MAX_SGE 32

struct adv_piece {
	uint64_t addr;
	uint32_t len;
	uint8_t advice;
};

struct adv_cursor {
	unsigned adv;
	size_t i;		/* the range */
	uint64_t a;		/* where in it */
};

unsigned adv_of_flags(uint32_t prefetch_flags);
size_t adv_next(const struct pf_range *r, size_t n, unsigned chunk_shift, struct adv_cursor *cur,
		struct adv_piece *out, size_t max);

#endif
