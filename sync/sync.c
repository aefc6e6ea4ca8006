/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sync.c - the generic half of the protocols: creation of the three
 * kinds of machine, and the checks every event goes through before the
 * protocol's own hook (sync_priv.h) sees it.  The list of protocols is
 * registry.c's.
 *
 * Keeping the checks and the membership here means that every protocol
 * refuses the same bad events in the same way, and that a protocol file
 * holds only the rule that makes it what it is.  Nothing here does I/O
 * or reads a clock; the only allocations are in the create functions.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sync_priv.h"

/*
 * The protocol's ops if @params describe a machine we can build, with
 * the parameters resolved into @out.
 */
static const struct kn__sync_ops *
check_params(const struct kn__sync_params *params, struct kn__sync_params *out)
{
	if (!params || params->max_workers == 0 ||
	    params->max_workers > KN__SYNC_MAX_WORKERS ||
	    params->members > params->max_workers)
		return NULL;
	*out = *params;
	if (kn__sync_params_resolve(out))
		return NULL;
	return kn__sync_ops_of(params->protocol);
}

uint32_t kn__sync_max_actions(const struct kn__sync_params *params)
{
	struct kn__sync_params p;
	const struct kn__sync_ops *ops = check_params(params, &p);

	return ops ? ops->actions_fixed +
			       ops->actions_per_worker * p.max_workers
		   : 0;
}

/*
 * The checks every machine makes on a chunk-rule or planner event:
 * a known type, a worker id in range where the type has one, and a
 * TIMING value that is a duration.
 */
static int check_event(const struct kn__sync_params *params,
		       const struct kn__sync_event *ev)
{
	switch (ev->type) {
	case KN__SYNC_EV_TIMER:
		return 0;
	case KN__SYNC_EV_PLAN:
		return ev->plan ? 0 : -EINVAL;
	case KN__SYNC_EV_BARRIER:
		return 0;
	case KN__SYNC_EV_TIMING:
		if (!isfinite(ev->value) || ev->value < 0)
			return -EINVAL;
		break;
	case KN__SYNC_EV_PUSH:
	case KN__SYNC_EV_SKIP:
	case KN__SYNC_EV_JOIN:
	case KN__SYNC_EV_LEAVE:
		break;
	default:
		return -EINVAL;
	}
	return ev->worker < params->max_workers ? 0 : -EINVAL;
}

/* --- the chunk rule --------------------------------------------------- */

int kn__sync_rule_create(const struct kn__sync_params *params,
			 struct kn__sync_rule **rule)
{
	struct kn__sync_params p;
	const struct kn__sync_ops *ops = check_params(params, &p);
	uint32_t max = params ? params->max_workers : 0;
	struct kn__sync_rule *r;

	if (!ops || !rule)
		return -EINVAL;
	r = calloc(1, sizeof(*r) + ops->rule_size);
	if (!r)
		return -ENOMEM;
	r->ops = ops;
	r->params = p;
	r->lead = p.staleness;
	r->w = calloc(max, sizeof(*r->w));
	r->contrib = calloc(max, sizeof(*r->contrib));
	r->ring = calloc((size_t)p.staleness + 2, sizeof(*r->ring));
	r->held = calloc(max, sizeof(*r->held));
	if (ops->traits.plans != KN__SYNC_PLANS_NONE) {
		r->plan = calloc(2 * (size_t)max, sizeof(*r->plan));
		r->next_plan = r->plan ? r->plan + max : NULL;
	}
	if (!r->w || !r->contrib || !r->ring || !r->held ||
	    (ops->traits.plans != KN__SYNC_PLANS_NONE && !r->plan))
		goto err_rule;
	r->ring[0] = params->members; /* everyone's count starts at 0 */
	for (uint32_t i = 0; i < params->members; i++)
		r->w[i].member = true;
	r->nmembers = params->members;
	/* the protocol's own state last: it may read the membership */
	if (ops->rule_init && ops->rule_init(r))
		goto err_rule;
	*rule = r;
	return 0;

err_rule: /* destroy frees what there is, the protocol's too */
	kn__sync_rule_destroy(r);
	return -ENOMEM;
}

void kn__sync_rule_destroy(struct kn__sync_rule *rule)
{
	if (!rule)
		return;
	if (rule->ops->rule_fini)
		rule->ops->rule_fini(rule);
	free(rule->held);
	free(rule->ring);
	free(rule->plan);
	free(rule->contrib);
	free(rule->w);
	free(rule);
}

uint64_t kn__sync_rule_version(const struct kn__sync_rule *rule)
{
	return rule ? rule->version : 0;
}

uint64_t kn__sync_rule_lead(const struct kn__sync_rule *rule, uint32_t worker)
{
	if (!rule || worker >= rule->params.max_workers ||
	    !rule->w[worker].member)
		return 0;
	return rule->w[worker].syncs - rule->pmin;
}

/* --- rounds, for BSP and PSP (sync_priv.h) ---------------------------- */

int kn__sync_round_push(struct kn__sync_rule *rule,
			const struct kn__sync_event *ev)
{
	struct kn__sync_wstate *w = &rule->w[ev->worker];

	/*
	 * Every member of a round was released with the version the round
	 * starts from, so a push computed from any other one, or a second
	 * push for the round, is not a push of this round.
	 */
	if (w->pushed || w->skipped || ev->version != rule->version)
		return -EINVAL;
	w->pushed = true;
	w->slot = ev->slot;
	rule->npushed++;
	return 0;
}

void kn__sync_round_drop(struct kn__sync_rule *rule, uint32_t worker)
{
	struct kn__sync_wstate *w = &rule->w[worker];

	if (w->pushed) {
		w->pushed = false;
		rule->npushed--;
	}
	if (w->skipped) {
		w->skipped = false;
		rule->nskipped--;
	}
}

int kn__sync_round_skip(struct kn__sync_rule *rule,
			const struct kn__sync_event *ev)
{
	struct kn__sync_wstate *w = &rule->w[ev->worker];

	if (w->pushed || w->skipped || ev->version != rule->version)
		return -EINVAL;
	w->skipped = true;
	rule->nskipped++;
	return 0;
}

uint32_t kn__sync_round_unskip(struct kn__sync_rule *rule,
			       struct kn__sync_action *out)
{
	uint32_t n = 0;

	for (uint32_t i = 0; rule->nskipped && i < rule->params.max_workers;
	     i++) {
		struct kn__sync_wstate *w = &rule->w[i];

		if (!w->skipped)
			continue;
		w->skipped = false;
		rule->nskipped--;
		kn__sync_release(&out[n++], i, rule->version);
	}
	return n;
}

uint32_t kn__sync_round_complete(struct kn__sync_rule *rule,
				 struct kn__sync_action *out)
{
	uint32_t n = 0;

	if (rule->npushed == 0 ||
	    rule->npushed + rule->nskipped != rule->nmembers)
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
	rule->npushed = 0;
	kn__sync_apply(rule, n, 1.0f, false, &out[0]);
	return n;
}

/* --- the bound of SSP and ESP (sync_priv.h) --------------------------- */

static uint32_t *ring_at(struct kn__sync_rule *rule, uint64_t count)
{
	return &rule->ring[count % (rule->params.staleness + 2)];
}

/* Move P_min up past counts no member has any more. */
static void bound_advance(struct kn__sync_rule *rule)
{
	while (rule->nmembers && *ring_at(rule, rule->pmin) == 0)
		rule->pmin++;
}

void kn__sync_bound_join(struct kn__sync_rule *rule, uint32_t worker)
{
	/* a joiner neither holds the others back nor runs ahead of them */
	rule->w[worker].syncs = rule->pmin;
	(*ring_at(rule, rule->pmin))++;
}

void kn__sync_bound_leave(struct kn__sync_rule *rule, uint32_t worker)
{
	struct kn__sync_wstate *w = &rule->w[worker];

	(*ring_at(rule, w->syncs))--;
	if (w->blocked) {
		for (uint32_t i = 0; i < rule->nheld; i++)
			if (rule->held[i] == worker) {
				rule->held[i] = rule->held[--rule->nheld];
				break;
			}
		w->blocked = false;
	}
	bound_advance(rule);
}

bool kn__sync_bound_push(struct kn__sync_rule *rule, uint32_t worker)
{
	struct kn__sync_wstate *w = &rule->w[worker];

	(*ring_at(rule, w->syncs))--;
	w->syncs++;
	(*ring_at(rule, w->syncs))++;
	bound_advance(rule);
	if (w->syncs - rule->pmin <= rule->lead)
		return true;
	w->blocked = true;
	rule->held[rule->nheld++] = worker;
	return false;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return (x > y) - (x < y);
}

uint32_t kn__sync_bound_release(struct kn__sync_rule *rule, uint64_t version,
				struct kn__sync_action *out)
{
	uint32_t n = 0, kept = 0;

	/*
	 * A held worker sits beyond P_min + s, so none can go before P_min
	 * moves (or the lead rises, which resets held_pmin): without this,
	 * every push would look at every held worker, and behind a
	 * straggler that is most of them.
	 */
	if (!rule->nheld || rule->pmin == rule->held_pmin)
		return 0;
	rule->held_pmin = rule->pmin;
	/* each goes once P_min is within the lead of its count */
	qsort(rule->held, rule->nheld, sizeof(*rule->held), cmp_u32);
	for (uint32_t i = 0; i < rule->nheld; i++) {
		uint32_t id = rule->held[i];
		struct kn__sync_wstate *w = &rule->w[id];

		if (w->syncs - rule->pmin > rule->lead) {
			rule->held[kept++] = id;
			continue;
		}
		w->blocked = false;
		kn__sync_release(&out[n++], id, version);
	}
	rule->nheld = kept;
	return n;
}

static int rule_push(struct kn__sync_rule *rule,
		     const struct kn__sync_event *ev,
		     struct kn__sync_action *out)
{
	struct kn__sync_wstate *w = &rule->w[ev->worker];
	kn__sync_rule_event_fn *hook = ev->type == KN__SYNC_EV_SKIP
					       ? rule->ops->skip
					       : rule->ops->push;
	int ret;

	/*
	 * A version the rule has not made yet cannot have been read, and a
	 * clock not above the last one is a push seen before: applying it
	 * again would count one gradient twice.  A SKIP is a push without a
	 * contribution, with the same clock; only protocols with rounds
	 * have one.
	 */
	if (!hook || !w->member || ev->version > rule->version ||
	    (w->clocked && ev->clock <= w->clock))
		return -EINVAL;
	ret = hook(rule, ev, out);
	if (ret < 0)
		return ret;
	w->clocked = true;
	w->clock = ev->clock;
	return ret;
}

int kn__sync_rule_event(struct kn__sync_rule *rule,
			const struct kn__sync_event *ev,
			struct kn__sync_action *out)
{
	struct kn__sync_wstate *w;
	int ret;

	if (!rule || !ev || !out)
		return -EINVAL;
	ret = check_event(&rule->params, ev);
	if (ret < 0)
		return ret;

	switch (ev->type) {
	case KN__SYNC_EV_PUSH:
	case KN__SYNC_EV_SKIP:
		return rule_push(rule, ev, out);
	case KN__SYNC_EV_JOIN:
		w = &rule->w[ev->worker];
		if (w->member)
			return -EINVAL;
		/* a joiner starts afresh: a restarted worker counts from 0 */
		*w = (struct kn__sync_wstate){ .member = true };
		rule->nmembers++;
		kn__sync_bound_join(rule, ev->worker);
		return rule->ops->join ? rule->ops->join(rule, ev, out) : 0;
	case KN__SYNC_EV_LEAVE:
		w = &rule->w[ev->worker];
		if (!w->member)
			return -EINVAL;
		w->member = false;
		w->clocked = false;
		rule->nmembers--;
		kn__sync_bound_leave(rule, ev->worker);
		return rule->ops->leave ? rule->ops->leave(rule, ev, out) : 0;
	case KN__SYNC_EV_TIMING:
		return rule->ops->timing ? rule->ops->timing(rule, ev, out) : 0;
	case KN__SYNC_EV_PLAN:
		return rule->ops->plan ? rule->ops->plan(rule, ev, out) : 0;
	case KN__SYNC_EV_BARRIER: /* the planner's, from the chunk rules */
		return -EINVAL;
	default: /* KN__SYNC_EV_TIMER */
		return rule->ops->timer ? rule->ops->timer(rule, ev, out) : 0;
	}
}

/* --- the planner ------------------------------------------------------ */

int kn__sync_planner_create(const struct kn__sync_params *params,
			    struct kn__sync_planner **planner)
{
	struct kn__sync_params resolved;
	const struct kn__sync_ops *ops = check_params(params, &resolved);
	uint32_t max = params ? params->max_workers : 0;
	struct kn__sync_planner *p;

	if (!ops || !planner)
		return -EINVAL;
	p = calloc(1, sizeof(*p) + ops->planner_size);
	if (!p)
		return -ENOMEM;
	p->ops = ops;
	p->params = resolved;
	p->member = calloc(max, sizeof(*p->member));
	if (ops->traits.plans != KN__SYNC_PLANS_NONE) {
		p->pred = calloc(max, sizeof(*p->pred));
		p->plan = calloc(max, sizeof(*p->plan));
	}
	if (!p->member || (ops->traits.plans != KN__SYNC_PLANS_NONE &&
			   (!p->pred || !p->plan)))
		goto err_planner;
	for (uint32_t i = 0; i < params->members; i++)
		p->member[i] = true;
	p->nmembers = params->members;
	if (ops->planner_init && ops->planner_init(p))
		goto err_planner;
	*planner = p;
	return 0;

err_planner: /* as the rule's */
	kn__sync_planner_destroy(p);
	return -ENOMEM;
}

void kn__sync_planner_destroy(struct kn__sync_planner *planner)
{
	if (!planner)
		return;
	if (planner->ops->planner_fini)
		planner->ops->planner_fini(planner);
	free(planner->plan);
	free(planner->pred);
	free(planner->member);
	free(planner);
}

uint64_t kn__sync_planner_epoch(const struct kn__sync_planner *planner)
{
	return planner ? planner->epoch : 0;
}

void kn__sync_planner_set_bytes(struct kn__sync_planner *planner,
				uint64_t bytes)
{
	if (planner)
		planner->params.bytes = bytes;
}

int kn__sync_planner_event(struct kn__sync_planner *planner,
			   const struct kn__sync_event *ev,
			   struct kn__sync_action *out)
{
	int ret;

	if (!planner || !ev || !out)
		return -EINVAL;
	ret = check_event(&planner->params, ev);
	if (ret < 0)
		return ret;

	switch (ev->type) {
	case KN__SYNC_EV_PUSH: /* pushes go to the chunk rules */
	case KN__SYNC_EV_SKIP:
	case KN__SYNC_EV_PLAN: /* plans come from the planner */
		return -EINVAL;
	case KN__SYNC_EV_JOIN:
		if (planner->member[ev->worker])
			return -EINVAL;
		planner->member[ev->worker] = true;
		planner->nmembers++;
		break;
	case KN__SYNC_EV_LEAVE:
		if (!planner->member[ev->worker])
			return -EINVAL;
		planner->member[ev->worker] = false;
		planner->nmembers--;
		break;
	default:
		break;
	}
	return planner->ops->planner_event
		       ? planner->ops->planner_event(planner, ev, out)
		       : 0;
}

/* --- the worker rule -------------------------------------------------- */

int kn__sync_worker_create(const struct kn__sync_params *params,
			   uint32_t worker, struct kn__sync_worker **rule)
{
	struct kn__sync_params p;
	const struct kn__sync_ops *ops = check_params(params, &p);
	struct kn__sync_worker *r;

	if (!ops || !rule || worker >= params->max_workers)
		return -EINVAL;
	r = calloc(1, sizeof(*r) + ops->worker_size);
	if (!r)
		return -ENOMEM;
	r->ops = ops;
	r->params = p;
	r->worker = worker;
	r->state = KN__SYNC_WS_RUN;
	*rule = r;
	return 0;
}

void kn__sync_worker_destroy(struct kn__sync_worker *rule)
{
	free(rule);
}

int kn__sync_worker_pushed(struct kn__sync_worker *rule, uint32_t *next)
{
	if (rule->state != KN__SYNC_WS_PUSH)
		return -EINVAL;
	rule->state = KN__SYNC_WS_WAIT;
	*next = KN__SYNC_NEXT_WAIT;
	return 0;
}

/* BSP and ASP: push after every step, wait for every release. */
static int worker_every_step(struct kn__sync_worker *rule,
			     const struct kn__sync_worker_event *ev,
			     uint32_t *next)
{
	switch (ev->type) {
	case KN__SYNC_WEV_STEP:
		if (rule->state != KN__SYNC_WS_RUN)
			return -EINVAL;
		rule->state = KN__SYNC_WS_PUSH;
		*next = KN__SYNC_NEXT_PUSH;
		return 0;
	case KN__SYNC_WEV_PUSHED:
		return kn__sync_worker_pushed(rule, next);
	default: /* KN__SYNC_WEV_RELEASE */
		/* in RUN only as a joiner's first release */
		if (rule->state == KN__SYNC_WS_PUSH)
			return -EINVAL;
		rule->state = KN__SYNC_WS_RUN;
		*next = KN__SYNC_NEXT_STEP;
		return 0;
	}
}

int kn__sync_worker_event(struct kn__sync_worker *rule,
			  const struct kn__sync_worker_event *ev,
			  uint32_t *next)
{
	if (!rule || !ev || !next)
		return -EINVAL;
	switch (ev->type) {
	case KN__SYNC_WEV_STEP:
		if (!isfinite(ev->seconds) || ev->seconds < 0)
			return -EINVAL;
		break;
	case KN__SYNC_WEV_PUSHED:
	case KN__SYNC_WEV_RELEASE:
		break;
	default:
		return -EINVAL;
	}
	return rule->ops->worker_event ? rule->ops->worker_event(rule, ev, next)
				       : worker_every_step(rule, ev, next);
}
