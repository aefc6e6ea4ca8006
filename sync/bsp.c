/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bsp.c - Bulk Synchronous Parallel, the chunk rule (docs/protocols.md).
 *
 * A round is complete when every current member has pushed once for it.
 * Then one APPLY makes the next version from the mean of the round's
 * contributions, and every contributor is released with that version.
 * Membership may change inside a round: a joiner must push for it too, a
 * leaver's contribution is dropped, and a leave may be what completes
 * the round.  A round with no members left never completes.
 */
#include <errno.h>

#include "sync_priv.h"

/*
 * The APPLY and the RELEASEs of a complete round, or nothing.  The
 * contributions are listed in ascending worker id order: the engine sums
 * them in that order, which is what makes a round's result bit-exact
 * whatever order the pushes arrived in.
 */
static int complete(struct kn__sync_rule *rule, struct kn__sync_action *out)
{
	uint32_t n = 0;
	float weight;

	if (rule->nmembers == 0 || rule->npushed != rule->nmembers)
		return 0;

	for (uint32_t i = 0; i < rule->params.max_workers; i++) {
		struct kn__sync_wstate *w = &rule->w[i];

		if (!w->pushed)
			continue;
		rule->contrib[n++] = (struct kn__sync_contrib){
			.worker = i,
			.slot = w->slot,
		};
		w->pushed = false;
	}
	weight = 1.0f / (float)n;
	for (uint32_t k = 0; k < n; k++)
		rule->contrib[k].weight = weight;

	rule->version++;
	rule->npushed = 0;
	out[0] = (struct kn__sync_action){
		.type = KN__SYNC_ACT_APPLY,
		.version = rule->version,
		.lr_scale = 1.0f,
		.ncontrib = n,
		.contrib = rule->contrib,
	};
	for (uint32_t k = 0; k < n; k++)
		kn__sync_release(&out[1 + k], rule->contrib[k].worker,
				 rule->version);
	return (int)(1 + n);
}

static int bsp_push(struct kn__sync_rule *rule, const struct kn__sync_event *ev,
		    struct kn__sync_action *out)
{
	struct kn__sync_wstate *w = &rule->w[ev->worker];

	/*
	 * Every member of a round was released with the version the round
	 * starts from, so a push computed from any other one, or a second
	 * push for the round, is not a push of this round.
	 */
	if (w->pushed || ev->version != rule->version)
		return -EINVAL;
	w->pushed = true;
	w->slot = ev->slot;
	rule->npushed++;
	return complete(rule, out);
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
	struct kn__sync_wstate *w = &rule->w[ev->worker];

	/* the round is applied by its members only: drop the leaver's push */
	if (w->pushed) {
		w->pushed = false;
		rule->npushed--;
	}
	return complete(rule, out);
}

/* One APPLY and a RELEASE for every worker that can be a member. */
static uint32_t bsp_max_actions(const struct kn__sync_params *params)
{
	return 1 + params->max_workers;
}

const struct kn__sync_ops kn__sync_bsp_ops = {
	.name = "bsp",
	.max_actions = bsp_max_actions,
	.push = bsp_push,
	.join = bsp_join,
	.leave = bsp_leave,
};
