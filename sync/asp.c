/* SPDX-License-Identifier: Apache-2.0 */
/*
 * asp.c - Asynchronous Parallel, the chunk rule (docs/protocols.md).
 *
 * Every push is applied the moment it arrives, alone, as one worker's
 * share of a round: weighted 1/n, the rate damped by the rounds it
 * missed, lr_scale = 1 / max(1, tau / n), tau being the versions made
 * since the one the worker computed from (kn__sync_share).  So a round
 * of n pushes moves the model as far as BSP's one mean, and the servers'
 * momentum sees n pushes of a round as BSP's one apply.  The pusher
 * is then released with the version its push made.  No rounds, so
 * joins and leaves change nothing but who may push.
 */
#include "sync_priv.h"

static int asp_push(struct kn__sync_rule *rule, const struct kn__sync_event *ev,
		    struct kn__sync_action *out)
{
	/* sync.c refused versions from the future: tau >= 0 */
	uint64_t tau = rule->version - ev->version;

	float lr_scale;

	rule->contrib[0] = (struct kn__sync_contrib){
		.worker = ev->worker,
		.slot = ev->slot,
	};
	lr_scale = kn__sync_share(rule, tau, &rule->contrib[0]);
	kn__sync_apply(rule, 1, lr_scale, true, &out[0]);
	kn__sync_release(&out[1], ev->worker, rule->version);
	return 2;
}

/* Bring the joiner up to date; it pushes from there. */
static int asp_join(struct kn__sync_rule *rule, const struct kn__sync_event *ev,
		    struct kn__sync_action *out)
{
	kn__sync_release(&out[0], ev->worker, rule->version);
	return 1;
}

const struct kn__sync_ops kn__sync_asp_ops = {
	/* no traits: gradients, no plans, no timings */
	/* an APPLY and the pusher's RELEASE */
	.actions_fixed = 2,
	.push = asp_push,
	.join = asp_join,
};
