/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ssp.c - Stale Synchronous Parallel, the chunk rule (docs/protocols.md).
 *
 * Pushes are applied on arrival, alone, as under ASP (one worker's share
 * of a round: weight 1/n, the rate damped by the rounds missed), so the
 * held workers that the slowest frees, who all computed from one model,
 * push a round's worth between them, not n - 1 whole steps of the same
 * gradient; and no worker runs more than s pushes ahead of
 * the slowest member: a push that would take it further is applied and
 * its release held back until the slowest catches up (the bound of
 * sync.c, kn__sync_bound_*).  So the staleness a worker sees is bounded
 * by the protocol, not only by luck, which is what SSP's convergence
 * argument needs.
 */
#include <errno.h>

#include "sync_priv.h"

static int ssp_push(struct kn__sync_rule *rule, const struct kn__sync_event *ev,
		    struct kn__sync_action *out)
{
	uint64_t tau = rule->version - ev->version;
	float lr_scale;
	int n = 0;

	/* a held worker has not been released: it cannot have pushed */
	if (rule->w[ev->worker].blocked)
		return -EINVAL;
	rule->contrib[0] = (struct kn__sync_contrib){
		.worker = ev->worker,
		.slot = ev->slot,
	};
	lr_scale = kn__sync_share(rule, tau, &rule->contrib[0]);
	kn__sync_apply(rule, 1, lr_scale, true, &out[n++]);
	if (kn__sync_bound_push(rule, ev->worker))
		kn__sync_release(&out[n++], ev->worker, rule->version);
	/* the slowest may just have caught up: let the held ones go */
	n += (int)kn__sync_bound_release(rule, rule->version, out + n);
	return n;
}

/* The joiner counts from the slowest member's count: it holds no one. */
static int ssp_join(struct kn__sync_rule *rule, const struct kn__sync_event *ev,
		    struct kn__sync_action *out)
{
	kn__sync_release(&out[0], ev->worker, rule->version);
	return 1 + (int)kn__sync_bound_release(rule, rule->version, out + 1);
}

/* The slowest may have left: the bound may let held workers go. */
static int ssp_leave(struct kn__sync_rule *rule,
		     const struct kn__sync_event *ev,
		     struct kn__sync_action *out)
{
	(void)ev;
	return (int)kn__sync_bound_release(rule, rule->version, out);
}

const struct kn__sync_ops kn__sync_ssp_ops = {
	/* no traits: gradients, no plans, no timings */
	/* an APPLY, the pusher's RELEASE and every held worker's */
	.actions_fixed = 2, .actions_per_worker = 1, .push = ssp_push,
	.join = ssp_join,   .leave = ssp_leave,
};
