/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bsp.c - Bulk Synchronous Parallel, the chunk rule (docs/protocols.md).
 *
 * A round is complete when every current member has pushed once for it.
 * Then one APPLY makes the next version from the mean of the round's
 * contributions, and every contributor is released with that version.
 * Membership may change inside a round: a joiner must push for it too, a
 * leaver's contribution is dropped, and a leave may be what completes
 * the round.  A member may sit a round out (SKIP: a rejoined worker
 * whose other chunks are a round ahead of this one): it is released
 * with the round's result and contributes nothing.  A round with no
 * members left never completes; one with only skippers left ends
 * without an APPLY, the skippers released with the version it began
 * from.
 */

#include "sync_priv.h"

/* The APPLY (the mean) and the RELEASEs of a complete round, or nothing. */
static int complete(struct kn__sync_rule *rule, struct kn__sync_action *out)
{
	uint32_t n = kn__sync_round_complete(rule, out);

	if (!n)
		return rule->nskipped && rule->nskipped == rule->nmembers
			       ? (int)kn__sync_round_unskip(rule, out)
			       : 0;
	for (uint32_t k = 0; k < n; k++) {
		rule->contrib[k].weight = 1.0f / (float)n;
		kn__sync_release(&out[1 + k], rule->contrib[k].worker,
				 rule->version);
	}
	return (int)(1 + n + kn__sync_round_unskip(rule, out + 1 + n));
}

static int bsp_push(struct kn__sync_rule *rule, const struct kn__sync_event *ev,
		    struct kn__sync_action *out)
{
	int ret = kn__sync_round_push(rule, ev);

	return ret ? ret : complete(rule, out);
}

static int bsp_skip(struct kn__sync_rule *rule, const struct kn__sync_event *ev,
		    struct kn__sync_action *out)
{
	int ret = kn__sync_round_skip(rule, ev);

	return ret ? ret : complete(rule, out);
}

/* The joiner takes part in the current round, from its base version. */
static int bsp_join(struct kn__sync_rule *rule, const struct kn__sync_event *ev,
		    struct kn__sync_action *out)
{
	kn__sync_release(&out[0], ev->worker, rule->version);
	return 1;
}

static int bsp_leave(struct kn__sync_rule *rule,
		     const struct kn__sync_event *ev,
		     struct kn__sync_action *out)
{
	kn__sync_round_drop(rule, ev->worker);
	return complete(rule, out);
}

const struct kn__sync_ops kn__sync_bsp_ops = {
	.traits = {
		.mean_model = true,
		.skips = true,
	},
	/* one APPLY and a RELEASE for every worker that can be a member */
	.actions_fixed = 1,
	.actions_per_worker = 1,
	.push = bsp_push,
	.skip = bsp_skip,
	.join = bsp_join,
	.leave = bsp_leave,
};
