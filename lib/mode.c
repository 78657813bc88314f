// SPDX-License-Identifier: MIT
/*
 * mode.c - which mode a verbs context runs in, and why; the pure helpers of
 * the verbs backend (error conversion, prefetch scatter lists); the verbs
 * synchronous prefetch, reachable from the core without linking libibverbs.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "mode.h"

/* each declared transport: the ODP caps it needs, and where the device says them */
static const struct {
	uint32_t bit, need;
	const char *name, *caps;
	size_t off;
} transports[] = {
	{ ODPX_TRANSPORT_RC, MODE_ODP_SEND | MODE_ODP_RECV | MODE_ODP_WRITE | MODE_ODP_READ,
	  "RC", "rc_odp_caps", offsetof(struct mode_caps, rc) },
	{ ODPX_TRANSPORT_UD, MODE_ODP_SEND | MODE_ODP_RECV,
	  "UD", "ud_odp_caps", offsetof(struct mode_caps, ud) },
	{ ODPX_TRANSPORT_UC, MODE_ODP_SEND | MODE_ODP_RECV | MODE_ODP_WRITE,
	  "UC", "uc_odp_caps", offsetof(struct mode_caps, uc) },
	{ ODPX_TRANSPORT_XRC, MODE_ODP_SEND | MODE_ODP_WRITE | MODE_ODP_READ | MODE_ODP_SRQ_RECV,
	  "XRC", "xrc_odp_caps", offsetof(struct mode_caps, xrc) },
};

/* the per-transport cap bits, lowest first */
static const char *const cap_names[] = { "SEND", "RECV", "WRITE", "READ", "ATOMIC", "SRQ_RECV" };

/*
 * The names of the transports @want ("RC+UD") into @tr, and why explicit
 * ODP cannot serve them into @why ("" if it can).
 */
static void no_odp(const struct mode_caps *c, uint32_t want, char *why, size_t len, char *tr,
		   size_t trlen)
{
	why[0] = tr[0] = '\0';
	for (size_t i = 0; i < sizeof(transports) / sizeof(transports[0]); i++) {
		uint32_t have = *(const uint32_t *)((const char *)c + transports[i].off);
		uint32_t miss = transports[i].need & ~have;

		if (!(want & transports[i].bit))
			continue;
		snprintf(tr + strlen(tr), trlen - strlen(tr), "%s%s", tr[0] ? "+" : "",
			 transports[i].name);
		if (miss && !why[0])
			snprintf(why, len, "%s %s not in %s", transports[i].name,
				 cap_names[__builtin_ctz(miss)], transports[i].caps);
	}
	if (!c->queried)
		snprintf(why, len, "no ODP caps: ibv_query_device_ex failed (%s)",
			 strerror(c->query_err ? c->query_err : EIO));
	else if (!(c->general & MODE_ODP_SUPPORT))
		snprintf(why, len, "no ODP (IBV_ODP_SUPPORT not in general_caps)");
}

int mode_decide(const struct mode_caps *c, const struct mode_request *rq,
		struct mode_choice *out)
{
	static const char *const how[] = {
		[ODPX_MODE_IMPLICIT] = "one ODP MR over the address space",
		[ODPX_MODE_EXPLICIT] = "ODP MRs over aligned chunks",
		[ODPX_MODE_PIN] = "pin-down cache invalidated by userfaultfd",
		[ODPX_MODE_DIRECT] = "register and deregister per request",
		[ODPX_MODE_HYBRID] = "pinned within the budget and memory headroom, ODP MRs beyond",
	};
	char no_impl[128], no_expl[128], tr[32];
	const char *by = rq->forced_by ? rq->forced_by : "attributes", *no;
	enum odpx_mode m = rq->forced;
	bool odp = m == ODPX_MODE_IMPLICIT || m == ODPX_MODE_EXPLICIT || m == ODPX_MODE_HYBRID;

	out->mode = ODPX_MODE_PIN;
	out->reason[0] = '\0';
	if ((unsigned)m >= ODPX_MODE_RESERVED) {
		snprintf(out->reason, sizeof(out->reason), "mode %d out of range", m);
		return -EINVAL;
	}
	if (!rq->transports || rq->transports & ~(uint32_t)(ODPX_TRANSPORT_RESERVED - 1)) {
		snprintf(out->reason, sizeof(out->reason), "transports %#x: none or unknown bits",
			 rq->transports);
		return -EINVAL;
	}
	no_odp(c, rq->transports, no_expl, sizeof(no_expl), tr, sizeof(tr));
	if (no_expl[0])
		snprintf(no_impl, sizeof(no_impl), "%s", no_expl);
	else if (!(c->general & MODE_ODP_SUPPORT_IMPLICIT))
		snprintf(no_impl, sizeof(no_impl),
			 "no implicit ODP (no IBV_ODP_SUPPORT_IMPLICIT in general_caps)");
	else if (rq->implicit_err)
		snprintf(no_impl, sizeof(no_impl), "the implicit ODP MR failed: %s",
			 strerror(rq->implicit_err));
	else
		no_impl[0] = '\0';

	if (m == ODPX_MODE_AUTO) {
		if (c->odp_bad && (!no_impl[0] || !no_expl[0])) {
			snprintf(out->reason, sizeof(out->reason), "pin: the ODP self-test moved "
				 "wrong bytes (%s); %s ODP caps present, not used", c->odp_check,
				 no_impl[0] ? "explicit" : "implicit");
		} else if (!no_impl[0]) {
			out->mode = ODPX_MODE_IMPLICIT;
			snprintf(out->reason, sizeof(out->reason), "implicit ODP: "
				 "IBV_ODP_SUPPORT_IMPLICIT and %s ODP caps present", tr);
		} else if (!no_expl[0]) {
			out->mode = ODPX_MODE_EXPLICIT;
			snprintf(out->reason, sizeof(out->reason),
				 "explicit ODP: %s; %s ODP caps present", no_impl, tr);
		} else {
			snprintf(out->reason, sizeof(out->reason),
				 "pin: %s; pin-down cache invalidated by userfaultfd", no_expl);
		}
		if (out->mode != ODPX_MODE_PIN && c->odp_check[0])
			snprintf(out->reason + strlen(out->reason),
				 sizeof(out->reason) - strlen(out->reason), "; %s", c->odp_check);
		return 0;
	}
	no = m == ODPX_MODE_IMPLICIT ? no_impl : odp ? no_expl : "";
	if (*no) {
		snprintf(out->reason, sizeof(out->reason), "%s forced (%s) but %s",
			 odpx_mode_str(m), by, no);
		return -EOPNOTSUPP;
	}
	out->mode = m;
	snprintf(out->reason, sizeof(out->reason), "%s forced (%s): %s%s%s%s", odpx_mode_str(m), by,
		 how[m], odp ? ", " : "", odp ? tr : "", odp ? " ODP caps present" : "");
	return 0;
}

enum hybrid_place hybrid_place(const struct hybrid_in *in)
{
	bool fits = in->bytes <= in->budget &&
		    in->pinned <= in->budget - in->bytes && in->bytes <= in->headroom;

	if (!fits || in->churn)
		return HYB_ODP;
	if (!in->odp_serves)
		return HYB_PIN;
	return in->thrash ? HYB_TO_PIN : HYB_ODP;
}

int mode_parse(const char *s, enum odpx_mode *m)
{
	if (!s || !*s || !strcmp(s, "auto")) {
		*m = ODPX_MODE_AUTO;
		return 0;
	}
	for (int i = ODPX_MODE_IMPLICIT; i < ODPX_MODE_RESERVED; i++) {
		if (!strcmp(s, odpx_mode_str(i))) {
			*m = i;
			return 0;
		}
	}
	return -EINVAL;
}

int mode_env(enum odpx_mode *m)
{
	const char *s = getenv("ODPX_MODE");

	if (mode_parse(s, m) < 0)
		return odpx_fail(-EINVAL, "ODPX_MODE=%s: not one of auto, implicit, explicit, pin, "
				 "direct, hybrid", s);
	return 0;
}

int mode_verbs_err(int rc, int err)
{
	if (rc == 0)
		return 0;
	if (rc > 0)
		return -rc;
	if (rc == -1)
		return err > 0 ? -err : -EIO;
	return rc;
}

/* ---- prefetch scatter lists ---- */

unsigned adv_of_flags(uint32_t f)
{
	if (f & ODPX_PREFETCH_NO_FAULT)
		return ADV_PREFETCH_NO_FAULT;
	return f & ODPX_PREFETCH_WRITE ? ADV_PREFETCH_WRITE : ADV_PREFETCH;
}

/* Length of the next piece at @a below @end. */
static uint64_t piece_len(uint64_t a, uint64_t end, unsigned chunk_shift)
{
	uint64_t lim = end - a;

	if (chunk_shift) {
		uint64_t ce = ((a >> chunk_shift) + 1) << chunk_shift;
		if (ce - a < lim)
			lim = ce - a;
	}
	return lim > ADV_SGE_MAX_BYTES ? ADV_SGE_MAX_BYTES : lim;
}

size_t adv_next(const struct pf_range *r, size_t n, unsigned chunk_shift, struct adv_cursor *cur,
		struct adv_piece *out, size_t max)
{
	size_t k = 0;

	for (; cur->adv < ADV_NR; cur->adv++, cur->i = 0) {
		for (; cur->i < n; cur->i++, cur->a = 0) {
			if (adv_of_flags(r[cur->i].flags) != cur->adv)
				continue;
			if (cur->a < r[cur->i].start)
				cur->a = r[cur->i].start;
			for (; cur->a < r[cur->i].end; cur->a += out[k - 1].len) {
				if (k == max)
					return k;
				out[k++] = (struct adv_piece){ cur->a,
					(uint32_t)piece_len(cur->a, r[cur->i].end, chunk_shift),
					(uint8_t)cur->adv };
			}
		}
		if (k) {	/* a batch holds one advice */
			cur->adv++;
			cur->i = 0;
			return k;
		}
	}
	return 0;
}

/*
 * mode_prefetch_sync - serve a prefetch now and return when it is done (what
 * ODPX_PREFETCH_SYNC asks of odpx_prefetch): the backend's advise with a
 * flush (ibv_advise_mr with IBV_ADVISE_MR_FLAG_FLUSH) in the ODP modes, a
 * pre-pin into the cache in pin mode; counted and ignored in direct mode.
 * Return: 0 or -errno.
 */
int mode_prefetch_sync(struct odpx_ctx *ctx, uintptr_t addr, size_t len, uint32_t flags)
{
	struct pf_range pg = { addr & ~(PAGE_SIZE - 1), (addr + len + PAGE_SIZE - 1) & ~(PAGE_SIZE - 1),
			       flags & (ODPX_PREFETCH_WRITE | ODPX_PREFETCH_NO_FAULT) };
	int r;

	stats_prefetch(ctx);
	if (ctx->mode == ODPX_MODE_DIRECT)
		return 0;
	if (ctx->mode != ODPX_MODE_PIN) {
		r = ctx->be->advise ? ctx->be->advise(ctx, &pg, 1, true) : -EOPNOTSUPP;
		return r < 0 ? odpx_fail(r, "ibv_advise_mr(FLUSH) of %#lx-%#lx: %s",
					 (unsigned long)pg.start, (unsigned long)pg.end, strerror(-r)) : 0;
	}
	r = prepin(ctx, &(struct pf_range){ addr, addr + len, 0 });
	if (r == 0)
		STAT_INC(ctx, prefetch_issued);
	else
		STAT_INC(ctx, prefetch_failed);	/* served direct: nothing was prefetched */
	return r < 0 ? r : 0;
}
