/* SPDX-License-Identifier: Apache-2.0 */
/*
 * esp.c - Efficient Synchronous Parallel, the chunk rule and the worker
 * rule (docs/protocols.md, DESIGN.md section 4).
 *
 * The worker rule decides after every local step whether talking to the
 * servers now is worth it: it pushes when the last release's round trip
 * plus what is left of the wait the server predicted is at most gamma
 * local steps, when its model has moved significantly (delta ratio >=
 * theta, if theta is set), or at its H_max-th step since its last push;
 * otherwise it takes one more local step.  What it pushes is its model
 * delta since its last release.  While the push waits for its release,
 * the worker trains on its copy (at most H_max - 1 steps) rather than
 * idle.
 *
 * The chunk rule applies every push on arrival, alone, weighted 1/n and
 * damped by its staleness as under ASP, and bounds the sync counts as
 * SSP bounds clocks: a pusher more than s_e pushes ahead of the slowest
 * member is held back, and released with the current version as soon as
 * the slowest catches up (the bound is sync.c's, kn__sync_bound_*,
 * shared with SSP).  Each release carries the hint that feeds the worker
 * rule: the wait its next push is predicted to meet.  There are no plans:
 * the planner is the trivial one.
 *
 * While the members' step times (their TIMING reports) are even, within
 * BALANCE of each other, the bound tightens to 0, rounds: a pusher ahead
 * of the slowest is held until the slowest catches up, so that equal
 * workers train on BSP's model instead of on deltas n - 1 versions stale.
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>

#include "sync_priv.h"

/* What ESP's chunk rule keeps per worker id, zero at creation and JOIN. */
struct esp_member {
	double last_t;	 /* when its last push came */
	double interval; /* EMA of the time between its pushes */
	double step;	 /* EMA of its seconds per local step, 0: none */
	double peak;	 /* its peak seconds per step, slowly falling */
};

/* ESP's own state in a chunk rule (its @own, ops->rule_size). */
struct kn__sync_esp_rule {
	struct esp_member *m; /* [max_workers] */
	/* the members' step times are even (rounds, lead 0), and the
	 * TIMING events since they were last compared */
	bool balanced;
	uint32_t timings;
};

/* @rule's ESP state; a const rule's too, as its arrays are not it. */
static struct kn__sync_esp_rule *esp_of(const struct kn__sync_rule *rule)
{
	return (struct kn__sync_esp_rule *)(void *)rule->own;
}

static int rule_init(struct kn__sync_rule *rule)
{
	struct kn__sync_esp_rule *e = esp_of(rule);

	e->m = calloc(rule->params.max_workers, sizeof(*e->m));
	return e->m ? 0 : -ENOMEM;
}

static void rule_fini(struct kn__sync_rule *rule)
{
	free(esp_of(rule)->m);
}

/* "Not looked for yet" for the slowest member. */
#define NONE UINT32_MAX

/*
 * Step times within this factor of each other are even: a round then
 * waits at most half a step for its slowest member, and 2x apart (one
 * worker of 8 twice as slow) is already an imbalance ESP's bound wins on.
 */
#define BALANCE 1.5
/*
 * A member's peak step time falls towards a shorter one by this share
 * of the difference per TIMING: a step 4 times as long keeps it above
 * BALANCE for about 14 timings, so workers that are slow now and then
 * (one step in 20, say) stay uneven instead of dropping into rounds
 * between two slow steps, each of which would hold the whole round.
 */
#define PEAK_FALL 0.125

/*
 * The slowest member other than @skip: the smallest worker id but @skip
 * whose sync count is P_min, NONE if there is none.  A scan, but only
 * for a hint that needs it (a release at the lead or more ahead), so
 * once per event at most, twice in rounds.
 */
static uint32_t slowest(const struct kn__sync_rule *rule, uint32_t skip)
{
	for (uint32_t i = 0; i < rule->params.max_workers; i++)
		if (i != skip && rule->w[i].member &&
		    rule->w[i].syncs == rule->pmin)
			return i;
	return NONE;
}

/*
 * The wait that worker @i's next push is predicted to meet at time @t.
 * Within the lead it is released at once; beyond it, it waits for the
 * slowest member's next push (*@m, found on first need), expected one
 * interval after that member's last.  In rounds @i may be that member
 * itself: then it waits for the next slowest, and if no other member is
 * at P_min its push raises P_min with it and waits for nobody.  A
 * slowest member without an interval yet (or a time that is not a
 * number: JOIN and LEAVE times are not checked) predicts no wait rather
 * than a wrong one.
 */
static float hint(const struct kn__sync_rule *rule, uint32_t i, uint32_t *m,
		  double t)
{
	const struct esp_member *s;
	uint32_t k;
	double wait;

	/*
	 * P_i + 1 - P_min <= L, the lead in force (s_e, or 0 in rounds);
	 * P_i >= P_min, so this cannot wrap.
	 */
	if (rule->w[i].syncs - rule->pmin < rule->lead)
		return 0;
	if (*m == NONE)
		*m = slowest(rule, NONE); /* @i is a member: not NONE */
	k = *m != i ? *m : slowest(rule, i);
	if (k == NONE)
		return 0;
	s = &esp_of(rule)->m[k];
	wait = s->last_t + s->interval - t;
	if (!(wait > 0))
		return 0;
	/* out of float's range the conversion would be undefined */
	return wait < FLT_MAX ? (float)wait : FLT_MAX;
}

/*
 * The releases of one event: the held workers the bound lets go now
 * (kn__sync_bound_release, ascending), with @extra (a pusher within the
 * bound, a joiner; NONE if neither) put in its place among them, so
 * that every answer lists its releases in ascending worker id order.
 * Then each gets its hint, once every count of the event is in.
 */
static int releases(struct kn__sync_rule *rule, uint32_t extra, double t,
		    struct kn__sync_action *out)
{
	uint32_t n = kn__sync_bound_release(rule, rule->version, out);
	uint32_t m = NONE;

	if (extra != NONE) {
		uint32_t k = n;

		for (; k > 0 && out[k - 1].worker > extra; k--)
			out[k] = out[k - 1];
		kn__sync_release(&out[k], extra, rule->version);
		n++;
	}
	for (uint32_t k = 0; k < n; k++)
		out[k].hint = hint(rule, out[k].worker, &m, t);
	return (int)n;
}

static int esp_push(struct kn__sync_rule *rule, const struct kn__sync_event *ev,
		    struct kn__sync_action *out)
{
	struct kn__sync_wstate *w = &rule->w[ev->worker];
	struct esp_member *e = &esp_of(rule)->m[ev->worker];
	/* sync.c refused versions from the future: tau >= 0 */
	uint64_t tau = rule->version - ev->version;
	float rounds;
	bool now;

	/*
	 * A held worker has not been released, so it cannot have pushed
	 * again; and a time that is not a number would spoil its interval,
	 * and every hint that reads it, for good.
	 */
	if (w->blocked || !isfinite(ev->t))
		return -EINVAL;

	/*
	 * The first interval is the first difference, then an EMA with
	 * weight 1/2.  An interval of 0 predicts nothing, so the next
	 * difference replaces it.  A time that went back counts as 0.
	 * (sync.c sets clocked after we return: here it still says whether
	 * an earlier push came since the worker joined.)
	 */
	if (w->clocked) {
		double gap = ev->t > e->last_t ? ev->t - e->last_t : 0;

		e->interval =
			e->interval > 0 ? 0.5 * e->interval + 0.5 * gap : gap;
	}
	e->last_t = ev->t;

	rule->contrib[0] = (struct kn__sync_contrib){
		.worker = ev->worker,
		.slot = ev->slot,
		/* deltas averaged over n; the pusher is a member: n >= 1 */
		.weight = 1.0f / (float)rule->nmembers,
	};
	/*
	 * Damped by staleness in rounds: with n workers pushing in turn, a
	 * delta is n - 1 versions old with no straggler at all, and it is
	 * already weighted 1/n; damping by tau as well (as ASP does for
	 * whole gradients) would shrink every round to 1/n of a step.  A
	 * delta older than a round is damped by the rounds it missed.
	 */
	rounds = (float)tau / (float)rule->nmembers;
	kn__sync_apply(rule, 1, rounds > 1 ? 1.0f / rounds : 1.0f, false,
		       &out[0]);
	/* held beyond the bound, or released with the others it frees */
	now = kn__sync_bound_push(rule, ev->worker);
	return 1 + releases(rule, now ? ev->worker : NONE, ev->t, out + 1);
}

/*
 * Rounds start or stop.  In rounds the bound in force is 0: a pusher
 * ahead of the slowest is held until the slowest has caught up with it,
 * so that even workers push in lockstep, once a round.  When they stop,
 * the held are looked at again at the next event, against s_e.
 */
static void set_rounds(struct kn__sync_rule *rule, bool rounds)
{
	struct kn__sync_esp_rule *e = esp_of(rule);

	if (rounds == e->balanced)
		return;
	e->balanced = rounds;
	rule->lead = rounds ? 0 : rule->params.staleness;
	if (!rounds)
		rule->held_pmin = UINT64_MAX;
}

/*
 * Are the members' step times even?  Every member has reported one, and
 * the highest peak is within BALANCE of the shortest mean.  A scan of
 * the ids, so it is made once per nmembers TIMING events (esp_timing):
 * O(1) each, amortized.
 */
static bool balanced(const struct kn__sync_rule *rule)
{
	double lo = INFINITY, hi = 0;

	for (uint32_t i = 0; i < rule->params.max_workers; i++) {
		const struct esp_member *s = &esp_of(rule)->m[i];

		if (!rule->w[i].member)
			continue;
		if (!(s->step > 0))
			return false;
		lo = fmin(lo, s->step);
		hi = fmax(hi, s->peak);
	}
	return hi <= BALANCE * lo;
}

/*
 * A member's seconds per local step (the mean of the steps before its
 * last release, as it measured them): its mean, an EMA with weight 1/2
 * as the push intervals, and its peak, which rises to a longer step at
 * once and falls by PEAK_FALL of the gap to a shorter one.  Once as
 * many have come as there are members, the step times are compared and
 * rounds start or stop.  A non-member's timing (it left after sending
 * it) is dropped.
 */
static int esp_timing(struct kn__sync_rule *rule,
		      const struct kn__sync_event *ev,
		      struct kn__sync_action *out)
{
	struct kn__sync_esp_rule *e = esp_of(rule);
	struct esp_member *w = &e->m[ev->worker];

	(void)out;
	if (!rule->w[ev->worker].member)
		return 0;
	w->step = w->step > 0 ? 0.5 * w->step + 0.5 * ev->value : ev->value;
	w->peak = ev->value >= w->peak
			  ? ev->value
			  : w->peak + PEAK_FALL * (ev->value - w->peak);
	if (++e->timings >= rule->nmembers) {
		e->timings = 0;
		set_rounds(rule, balanced(rule));
	}
	return 0;
}

/*
 * sync.c has started the joiner's count at P_min (kn__sync_bound_join):
 * counted from 0 it would be the slowest by far and hold back everyone
 * more than s_e ahead of 0 until it caught up.  So it moves no one's
 * bound, and is released at once with the current version.
 */
static int esp_join(struct kn__sync_rule *rule, const struct kn__sync_event *ev,
		    struct kn__sync_action *out)
{
	struct kn__sync_esp_rule *e = esp_of(rule);

	/* a joiner starts afresh, as sync.c's part of its state does */
	e->m[ev->worker] = (struct esp_member){ 0 };
	/* no step time from it yet: the bound until every member has one */
	set_rounds(rule, false);
	e->timings = 0;
	return releases(rule, ev->worker, ev->t, out);
}

/* Nothing of its own is pending; if it was the slowest, P_min rose. */
static int esp_leave(struct kn__sync_rule *rule,
		     const struct kn__sync_event *ev,
		     struct kn__sync_action *out)
{
	return releases(rule, NONE, ev->t, out);
}

/*
 * ESP's own state in a worker rule (ops->worker_size).  While waiting,
 * @steps are the steps taken on the copy since the push.
 */
struct esp_worker {
	uint32_t steps; /* local steps since the last push */
	double rtt;	/* the last release's round trip, seconds */
	double wait;	/* its predicted wait less the steps since, seconds */
};

/*
 * The communicate-or-skip decision, after a step, once the wait has run
 * down by it.  A sync costs the last release's round trip plus what is
 * left of the wait it predicted: so a worker told to expect a wait of
 * three steps skips about three and then pushes, into a release that is
 * due.  A worker never released yet (an initial member) has cost 0, so
 * it pushes after its first step.
 */
static bool worth_pushing(const struct kn__sync_worker *rule,
			  const struct esp_worker *w,
			  const struct kn__sync_worker_event *ev)
{
	return w->rtt + w->wait <= (double)rule->params.gamma * ev->seconds ||
	       (rule->params.theta > 0 &&
		ev->delta_ratio >= rule->params.theta) ||
	       w->steps >= rule->params.max_skip;
}

/*
 * Whether a worker waiting with @steps on its copy takes another: after
 * a push it trains on its copy until the release comes (the caller
 * merges those steps onto the new model, as under PSP) rather than
 * idle, so a push held at the bound, or one that a wrong prediction sent
 * into a wait, costs no time.  At most H_max - 1 steps, so that with the
 * step after the release no delta holds more than H_max, and a worker
 * whose release is late stops drifting from the model; then it waits.
 * H_max = 1 trains on nothing while waiting.
 */
static bool steps_on(const struct kn__sync_worker *rule, uint32_t steps)
{
	return steps + 1 < rule->params.max_skip;
}

static int esp_worker_event(struct kn__sync_worker *rule,
			    const struct kn__sync_worker_event *ev,
			    uint32_t *next)
{
	struct esp_worker *w = (struct esp_worker *)(void *)rule->own;
	int ret;

	switch (ev->type) {
	case KN__SYNC_WEV_STEP:
		/* a ratio of norms is never negative; NaN is a worker bug */
		if (!(ev->delta_ratio >= 0))
			return -EINVAL;
		/* waiting: only where the last answer was STEP */
		if (rule->state == KN__SYNC_WS_WAIT &&
		    steps_on(rule, w->steps)) {
			w->steps++;
			*next = steps_on(rule, w->steps) ? KN__SYNC_NEXT_STEP
							 : KN__SYNC_NEXT_WAIT;
			return 0;
		}
		if (rule->state != KN__SYNC_WS_RUN)
			return -EINVAL;
		w->steps++;
		/* the wait runs on while the worker trains */
		w->wait = fmax(0, w->wait - ev->seconds);
		if (worth_pushing(rule, w, ev)) {
			rule->state = KN__SYNC_WS_PUSH;
			*next = KN__SYNC_NEXT_PUSH;
		} else {
			*next = KN__SYNC_NEXT_STEP;
		}
		return 0;
	case KN__SYNC_WEV_PUSHED:
		ret = kn__sync_worker_pushed(rule, next);
		if (ret)
			return ret;
		w->steps = 0;
		if (steps_on(rule, 0))
			*next = KN__SYNC_NEXT_STEP;
		return 0;
	default: /* KN__SYNC_WEV_RELEASE */
		/* in RUN only as a joiner's first release */
		if (rule->state == KN__SYNC_WS_PUSH || !(ev->rtt >= 0) ||
		    !(ev->hint >= 0) || !isfinite(ev->rtt + (double)ev->hint))
			return -EINVAL;
		w->rtt = ev->rtt;
		w->wait = ev->hint;
		/*
		 * The steps taken on the copy count toward the next push's
		 * H_max.  (A release in RUN, a joiner's first, finds no steps:
		 * a worker never released pushes after its first step.)
		 */
		rule->state = KN__SYNC_WS_RUN;
		*next = KN__SYNC_NEXT_STEP;
		return 0;
	}
}

const struct kn__sync_ops kn__sync_esp_ops = {
	.traits = {
		.local_steps = true,
		.release_info = true,
		.delta_ratio = true,
		.timing = KN__SYNC_TIMING_RULES,
	},
	/* one APPLY and a RELEASE for every worker that can be a member */
	.actions_fixed = 1,
	.actions_per_worker = 1,
	.push = esp_push,
	.join = esp_join,
	.leave = esp_leave,
	.timing = esp_timing,
	.worker_event = esp_worker_event,
	.rule_init = rule_init,
	.rule_fini = rule_fini,
	.rule_size = sizeof(struct kn__sync_esp_rule),
	.worker_size = sizeof(struct esp_worker),
};
