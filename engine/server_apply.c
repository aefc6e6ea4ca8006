/* SPDX-License-Identifier: Apache-2.0 */
/*
 * server_apply.c - one APPLY of a chunk rule: the contributions' slots
 * summed in one fused pass with the job's optimizer (the outer update
 * under the delta-pushing protocols, round-weighted momentum under ASP,
 * SSP and CGP), or into the mean in summation mode, converted into a
 * free out buffer; and the staleness of what was applied (--metrics).
 */
#include <errno.h>

#include "roles.h"
#include "server_state.h"

/* Count the staleness of an APPLY's contributions (--metrics). */
static void count_staleness(struct srv_staleness *st,
			    const struct srv_chunk *ch,
			    const struct kn__sync_action *a)
{
	for (uint32_t i = 0; i < a->ncontrib; i++) {
		const struct kn__sync_contrib *c = &a->contrib[i];
		uint64_t read =
			ch->pushed[2 * (size_t)c->worker + (c->slot & 1)];
		uint64_t tau =
			a->version > read + 1 ? a->version - read - 1 : 0;

		st->count++;
		st->sum += tau;
		if (tau > st->max)
			st->max = tau;
		st->hist[tau < STALE_BUCKETS ? tau : STALE_BUCKETS - 1]++;
	}
}

/*
 * ESP and PSP push model deltas, not gradients: the job's optimizer ran
 * on the workers.  The servers apply the outer update: the weighted mean
 * of the deltas at the outer rate, with Nesterov momentum if one is set
 * (docs/protocols.md, "What a contribution is").
 */
static void outer_update(const struct kn__sync_params *proto, float lr_scale,
			 struct kn_update_params *p)
{
	p->optimizer = proto->outer_momentum > 0 ? KN_OPT_MOMENTUM : KN_OPT_SGD;
	p->flags = proto->outer_momentum > 0 ? KN_UPDATE_NESTEROV : 0;
	p->lr = (proto->outer_lr > 0 ? proto->outer_lr : 1.0f) * lr_scale;
	p->momentum = proto->outer_momentum;
	p->weight_decay = 0;
}

/* The job's update of the master and its moments by @p, over @src. */
static int update(const struct kn_update_params *p, struct srv_chunk *ch,
		  const void **src, const float *weights, uint32_t n)
{
	return weights ? kn_update_weighted(p, ch->master, ch->m, ch->v, src,
					    weights, n, ch->dtype, ch->c->count)
		       : kn_update(p, ch->master, ch->m, ch->v, src, n,
				   ch->dtype, ch->c->count);
}

/*
 * ASP, SSP and CGP under momentum: each apply is a share of a round (a
 * push, or a group's round, weighted 1/n per push and damped by
 * staleness), and the velocity turns once per round's worth of shares,
 * as BSP's does once per mean (docs/protocols.md, "Momentum once per
 * round").  The first apply of a round turns it, applying what it
 * carries over from the last round,
 *   w -= lr * mu * m;  m = mu * m,
 * and every apply's share s * g moves the model at once and joins it,
 *   w -= lr * s * g;  m += s * g.
 * A round of shares so moves the model by lr * (mu * m + sum of s * g),
 * BSP's heavy-ball step, and every apply shows in its own releases.
 */
static int apply_share(struct server *s, struct srv_chunk *ch,
		       const struct kn__sync_action *a, const void **src,
		       const float *weights, float w)
{
	const struct kn__msg *job = &s->job;
	struct kn_update_params turn = {
		.optimizer = KN_OPT_MOMENTUM,
		.lr = job->u.job.lr,
		.momentum = job->u.job.momentum,
	}; /* grad_scale 0: the velocity alone */
	struct kn_update_params step = {
		.optimizer = KN_OPT_SGD,
		.lr = job->u.job.lr * a->lr_scale,
		.grad_scale = w,
	};
	/* m = 1 * m + s * g, and w -= 0 * m leaves the model as it is */
	struct kn_update_params join = {
		.optimizer = KN_OPT_MOMENTUM,
		.grad_scale = w * a->lr_scale,
		.momentum = 1.0f,
	};
	int ret = 0;

	if (ch->round_full)
		ret = update(&turn, ch, src, NULL, 1);
	ch->round_full = false;
	if (!ret)
		ret = update(&step, ch, src, weights, a->ncontrib);
	if (!ret)
		ret = update(&join, ch, src, weights, a->ncontrib);
	for (uint32_t i = 0; i < a->ncontrib; i++)
		ch->round_w += a->contrib[i].weight;
	/* n shares of 1/n add up to a hair under 1 in floats */
	if (ch->round_w > 1.0f - 1e-4f) {
		ch->round_w = ch->round_w > 1.0f ? ch->round_w - 1.0f : 0;
		ch->round_full = true;
	}
	return ret;
}

/* Apply one APPLY action into the free out buffer @o. */
int kn__srv_apply(struct server *s, struct srv_chunk *ch,
		  const struct kn__sync_action *a, int o)
{
	const void **src = s->srcs;
	const struct kn__msg *job = &s->job;
	size_t n = ch->c->count;
	float w = a->ncontrib ? a->contrib[0].weight : 1.0f;
	const float *weights = NULL;
	int ret;

	if (a->ncontrib == 0 || a->ncontrib > s->layout->nworkers)
		return -EINVAL;
	for (uint32_t i = 0; i < a->ncontrib; i++) {
		src[i] = slot_ptr(s, ch, a->contrib[i].worker,
				  a->contrib[i].slot);
		s->weights[i] = a->contrib[i].weight;
		if (a->contrib[i].weight != w)
			weights = s->weights; /* they differ (PSP, CGP) */
	}
	if (weights)
		w = 1.0f; /* each input's own factor, in the same pass */
	count_staleness(&s->stale, ch, a);
	if (kn__job_sums(job->u.job.protocol, job->u.job.optimizer)) {
		/* the mean, in the tensor's dtype, for the workers */
		ret = weights ? kn_sum_weighted(ch->out[o], ch->dtype, src,
						weights, a->ncontrib, ch->dtype,
						n)
			      : kn_sum(ch->out[o], ch->dtype, src, a->ncontrib,
				       ch->dtype, n, w);
	} else {
		struct kn_update_params p = {
			.optimizer = (enum kn_optimizer)job->u.job.optimizer,
			.lr = job->u.job.lr * a->lr_scale,
			.grad_scale = w,
			.momentum = job->u.job.momentum,
			.beta1 = 0.9f,
			.beta2 = 0.999f,
			.eps = 1e-8f,
			.step = ++ch->step,
		};

		if (kn__job_deltas(job->u.job.protocol, job->u.job.optimizer))
			outer_update(&job->u.job.proto, a->lr_scale, &p);
		if (job->u.job.optimizer == KN__CONFIG_MOMENTUM && a->share)
			ret = apply_share(s, ch, a, src, weights, w);
		else
			ret = update(&p, ch, src, weights, a->ncontrib);
		if (!ret && !ch->direct)
			ret = kn_convert(ch->out[o], ch->dtype, ch->master,
					 KN_DTYPE_FP32, n);
	}
	if (!ret)
		ch->cur = o;
	return ret;
}
