/* SPDX-License-Identifier: Apache-2.0 */
/*
 * predicted.c - PSP, Predicted Synchronization Parallel (`predicted`,
 * DESIGN.md section 4, docs/protocols.md): its chunk rule, planner and
 * worker rule.
 *
 * The planner predicts every member's seconds per local step (an EMA of
 * its TIMING reports, restarted from the report that misses it) and, at
 * a barrier, gives each member a number of
 * local steps k_i <= R so that the predicted finish times k_i * t_i lie
 * as close together as they can (ZipLine, below).  The plan goes out as
 * a REGROUP; the caller hands it to every chunk rule as a PLAN event, and
 * a chunk rule puts it in force only at its next round completion, so no
 * round is ever released under two plans.  Rounds are BSP's.  A worker
 * runs the job's optimizer locally and pushes its model delta (the model
 * it was released minus its local model after its steps_i local steps);
 * every push is weighted 1/n, so an update is the plain mean of the
 * round's deltas, whatever steps each holds.  Until `warmup` barriers
 * have passed there is no plan: one step per round, weight 1/n, BSP.
 *
 * A worker that has pushed under a plan keeps training on its local copy
 * (R steps at most) until the new model arrives; the caller then merges
 *	params = new_model + (local_now - local_at_push)
 * and the steps taken while waiting count toward its next push.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sync_priv.h"

/* --- ZipLine ------------------------------------------------------------ */

/* The head of worker @list's candidate list: its @k-th finish time. */
struct head {
	double value; /* (double)k * t[list] */
	uint32_t list;
	uint32_t k;
};

/* Ties go to the lower list so the search is the same on every run. */
static bool head_before(const struct head *a, const struct head *b)
{
	return a->value < b->value ||
	       (a->value == b->value && a->list < b->list);
}

static void sift_down(struct head *heap, uint32_t n, uint32_t i)
{
	for (;;) {
		uint32_t l = 2 * i + 1, r = l + 1, min = i;
		struct head tmp;

		if (l < n && head_before(&heap[l], &heap[min]))
			min = l;
		if (r < n && head_before(&heap[r], &heap[min]))
			min = r;
		if (min == i)
			return;
		tmp = heap[i];
		heap[i] = heap[min];
		heap[min] = tmp;
		i = min;
	}
}

/*
 * ZipLine (ElasticBSP): worker i's candidate finish times are k * t[i]
 * for k = 1 .. @R.  Find the window [lo, hi] that holds at least one
 * candidate of every worker and is the smallest by (hi - lo, then hi),
 * and give each worker the most steps that fit: k[i] = the largest
 * k <= @R with k * t[i] <= hi (at least 1, since the window holds one of
 * its candidates).
 *
 * The search is the smallest range over n sorted lists: a min-heap over
 * the lists' current heads, popping the smallest and advancing its list,
 * each step looking at [smallest head, largest head]; it ends when a
 * list is exhausted.  The optimum is among the windows it looks at:
 * take the first moment a head would move past the optimum's candidate
 * of its list; the window then is inside the optimum.  O(R n log n).
 *
 * Floating point: a candidate is the double (double)k * t[i], a window's
 * width the double hi - lo; windows are compared on (width, hi) exactly,
 * with no tolerance, so finish times that differ in the last bit are
 * different.  Rounding is monotonic, so a window inside another is never
 * wider, and the result is what an exhaustive search over all R^n step
 * vectors computing the same doubles finds (tests/sync/test_predicted.c
 * checks that).  Callers wanting "equal within noise" round @t first.
 *
 * @t: n predicted seconds per step, finite and positive, with R * t[i]
 * finite; @k: n step counts out, written only on success.  Returns 0,
 * -EINVAL for n == 0, R == 0 or a bad time, -ENOMEM (it allocates a heap
 * of n entries).  Pure; safe to call from any thread.
 */
int kn__sync_zipline(const double *t, uint32_t n, uint32_t R, uint32_t *k)
{
	struct head *heap;
	double hi, best_width = INFINITY, best_hi = INFINITY;

	if (!t || !k || n == 0 || R == 0)
		return -EINVAL;
	for (uint32_t i = 0; i < n; i++)
		if (!(t[i] > 0) || !isfinite((double)R * t[i]))
			return -EINVAL;
	heap = malloc((size_t)n * sizeof(*heap));
	if (!heap)
		return -ENOMEM;

	hi = 0;
	for (uint32_t i = 0; i < n; i++) {
		heap[i] = (struct head){ .value = t[i], .list = i, .k = 1 };
		if (t[i] > hi)
			hi = t[i];
	}
	for (uint32_t i = n / 2; i-- > 0;)
		sift_down(heap, n, i);

	for (;;) {
		double width = hi - heap[0].value;

		/* (width, hi) in that order; hi never decreases here */
		if (width < best_width ||
		    (width == best_width && hi < best_hi)) {
			best_width = width;
			best_hi = hi;
		}
		if (heap[0].k == R)
			break;
		heap[0].k++;
		heap[0].value = (double)heap[0].k * t[heap[0].list];
		if (heap[0].value > hi)
			hi = heap[0].value;
		sift_down(heap, n, 0);
	}
	free(heap);

	for (uint32_t i = 0; i < n; i++) {
		uint32_t steps = R;

		while (steps > 1 && (double)steps * t[i] > best_hi)
			steps--;
		k[i] = steps;
	}
	return 0;
}

/* --- the chunk rule ------------------------------------------------------ */

/* The steps a release under the plan in force asks of @worker. */
static uint32_t plan_steps(const struct kn__sync_rule *rule, uint32_t worker)
{
	uint32_t steps = rule->plan[worker];

	/* no plan, or none for this worker: one step, as under BSP */
	if (steps == 0)
		return 1;
	return steps < rule->params.max_steps ? steps : rule->params.max_steps;
}

static void release(const struct kn__sync_rule *rule,
		    struct kn__sync_action *act, uint32_t worker)
{
	kn__sync_release(act, worker, rule->version);
	act->epoch = rule->epoch;
	act->steps = plan_steps(rule, worker);
}

/*
 * The APPLY and the RELEASEs of a complete round, or nothing, as BSP's
 * (ascending worker id order is the summation order).  A completion is
 * the barrier a waiting plan waits for: it is put in force before the
 * releases, which carry it.
 */
static int complete(struct kn__sync_rule *rule, struct kn__sync_action *out)
{
	uint32_t n = kn__sync_round_complete(rule, out);

	if (!n)
		return 0;
	if (rule->have_next) {
		/* copied, not swapped: plan and next_plan are one allocation */
		memcpy(rule->plan, rule->next_plan,
		       rule->params.max_workers * sizeof(*rule->plan));
		rule->epoch = rule->next_epoch;
		rule->have_next = false;
	}
	/*
	 * A push is a model delta that already holds its steps_i local
	 * steps: the update is their plain mean.  Weighting by steps_i
	 * would count the fast workers' progress twice.
	 */
	for (uint32_t c = 0; c < n; c++) {
		rule->contrib[c].weight = 1.0f / (float)n;
		release(rule, &out[1 + c], rule->contrib[c].worker);
	}
	return (int)(1 + n);
}

static int psp_push(struct kn__sync_rule *rule, const struct kn__sync_event *ev,
		    struct kn__sync_action *out)
{
	uint32_t steps = ev->steps ? ev->steps : 1;

	/*
	 * As BSP: one push per member per round, from the round's version.
	 * The worker rule never holds more than R + 1 steps (R while
	 * waiting, then one); beyond 2R no plan explains the drift.
	 */
	if (steps > 2 * rule->params.max_steps || kn__sync_round_push(rule, ev))
		return -EINVAL;
	return complete(rule, out);
}

/* The joiner takes part in the current round, under the plan in force. */
static int psp_join(struct kn__sync_rule *rule, const struct kn__sync_event *ev,
		    struct kn__sync_action *out)
{
	release(rule, &out[0], ev->worker);
	return 1;
}

static int psp_leave(struct kn__sync_rule *rule,
		     const struct kn__sync_event *ev,
		     struct kn__sync_action *out)
{
	kn__sync_round_drop(rule, ev->worker);
	return complete(rule, out);
}

/*
 * A plan waits for the next completion.  Epochs only grow: a plan not
 * newer than the one in force or the one waiting is a replay or came
 * out of order.  A newer plan replaces a waiting one that never came
 * into force.
 */
static int psp_plan(struct kn__sync_rule *rule, const struct kn__sync_event *ev,
		    struct kn__sync_action *out)
{
	(void)out;
	if (ev->epoch <= rule->epoch ||
	    (rule->have_next && ev->epoch <= rule->next_epoch))
		return -EINVAL;
	memcpy(rule->next_plan, ev->plan,
	       rule->params.max_workers * sizeof(*rule->next_plan));
	rule->next_epoch = ev->epoch;
	rule->have_next = true;
	return 0;
}

/* --- the planner --------------------------------------------------------- */

/*
 * A step shorter than a nanosecond is taken as one: a prediction of 0
 * would mean "no timing yet", and ZipLine needs positive times.
 */
#define PRED_MIN 1e-9

/*
 * Predictions that keep missing plan worse than BSP: a plan made from a
 * speed that has changed again by the time it is in force (a plan needs
 * a round to reach the servers) gives a worker that has just become slow
 * many steps, and the whole round waits for them.  So after
 * FALLBACK_MISSES barriers in a row that each saw a miss (a re-plan
 * that missed at once; a single change of speed misses once, since the
 * prediction restarts from it) the planner falls back to one step per
 * member, BSP's rounds, and leaves the fallback with a ZipLine plan
 * after FALLBACK_HOLDS barriers in a row without a miss, as many as the
 * default warm-up.  2 and 3: the fallback is cheap (it is BSP, with the
 * waiting time still trained on the copy), a plan that misses is not.
 */
#define FALLBACK_MISSES 2
#define FALLBACK_HOLDS	3

/*
 * The most steps a plan gives: enough for the fastest member to span
 * one step of the slowest, and at most R.  ZipLine alone finds the
 * tightest window over up to R steps each, which can be several steps
 * of the slowest long (t = {23, 80} ms gives {7, 2}, 161 against 160
 * ms, where the cap gives {3, 1}, 69 against 80); a round that long is
 * a long run of local steps between two averages, and each one costs
 * accuracy per sample (measured in docs/results.md).  Capped so, the slowest takes one step a round, or two
 * where the fastest is almost as slow, and what the window leaves idle
 * is filled by the steps the workers take while they wait.
 */
static uint32_t round_steps(const double *t, uint32_t n, uint32_t R)
{
	double lo = t[0], hi = t[0], span;

	for (uint32_t i = 1; i < n; i++) {
		lo = fmin(lo, t[i]);
		hi = fmax(hi, t[i]);
	}
	span = ceil(hi / lo);
	return span < R ? (uint32_t)span : R;
}

/*
 * ZipLine over the members' predictions into planner->plan (0 for
 * non-members); planner->plan is untouched on failure.
 */
static int make_plan(struct kn__sync_planner *planner)
{
	uint32_t max = planner->params.max_workers, n = 0;
	size_t len = planner->nmembers ? planner->nmembers : 1;
	double *t = calloc(len, sizeof(*t));
	uint32_t *k = malloc(len * sizeof(*k));
	int ret = -ENOMEM;

	if (t && k) {
		for (uint32_t i = 0; i < max && n < len; i++)
			if (planner->member[i])
				t[n++] = planner->pred[i];
		ret = n ? kn__sync_zipline(
				  t, n,
				  round_steps(t, n, planner->params.max_steps),
				  k)
			: -EINVAL;
	}
	if (ret == 0) {
		n = 0;
		for (uint32_t i = 0; i < max; i++)
			planner->plan[i] = planner->member[i] ? k[n++] : 0;
	}
	free(k);
	free(t);
	return ret;
}

/* One step for every member, 0 for the others: BSP's rounds. */
static void fallback_plan(struct kn__sync_planner *planner)
{
	for (uint32_t i = 0; i < planner->params.max_workers; i++)
		planner->plan[i] = planner->member[i] ? 1 : 0;
}

/*
 * A barrier is passed when every member has sent a TIMING since the
 * last one.  The first plan comes at barrier `warmup`; later ones only
 * when a prediction missed since the last barrier (this very barrier
 * re-plans, from the restarted prediction) or the membership changed,
 * so a steady cluster keeps its plan.  Misses at FALLBACK_MISSES
 * barriers in a row make the plan one step each until FALLBACK_HOLDS
 * barriers in a row hold; in the fallback nothing else re-plans (one
 * step each fits any membership).  On failure nothing has changed and
 * the barrier is tried again with the next TIMING.
 */
static int barrier(struct kn__sync_planner *planner,
		   struct kn__sync_action *out)
{
	struct kn__sync_psp_planner *ps = kn__sync_psp_planner_of(planner);
	uint64_t warmup = planner->params.warmup, next = ps->barriers + 1;
	uint32_t misses = ps->missed ? ps->misses + 1 : 0;
	uint32_t holds = ps->missed ? 0 : ps->holds + 1;
	bool replan = false, fallback = ps->fallback;
	int ret;

	if (planner->nmembers == 0 || ps->nreported < planner->nmembers)
		return 0;
	if (fallback) {
		/* out only with a plan that fits, once predictions hold */
		replan = holds >= FALLBACK_HOLDS;
		fallback = !replan;
	} else if (next >= warmup && misses >= FALLBACK_MISSES) {
		replan = fallback = true;
	} else {
		replan = next == warmup ||
			 (next > warmup && (ps->missed || planner->changed));
	}
	if (replan && !fallback) {
		ret = make_plan(planner);
		if (ret < 0)
			return ret;
	} else if (replan) {
		fallback_plan(planner);
	}
	/* saturated: only "this many in a row" is ever asked */
	ps->misses = misses < FALLBACK_MISSES ? misses : FALLBACK_MISSES;
	ps->holds = holds < FALLBACK_HOLDS ? holds : FALLBACK_HOLDS;
	ps->fallback = fallback;
	ps->barriers = next;
	ps->missed = false;
	ps->nreported = 0;
	memset(ps->reported, 0,
	       planner->params.max_workers * sizeof(*ps->reported));
	if (!replan)
		return 0;
	planner->changed = false;
	out[0] = (struct kn__sync_action){
		.type = KN__SYNC_ACT_REGROUP,
		.epoch = ++planner->epoch,
		.plan = planner->plan,
	};
	return 1;
}

static int planner_timing(struct kn__sync_planner *planner,
			  const struct kn__sync_event *ev,
			  struct kn__sync_action *out)
{
	uint32_t w = ev->worker;
	double value = ev->value > PRED_MIN ? ev->value : PRED_MIN;
	double old = planner->pred[w], alpha = planner->params.alpha;
	struct kn__sync_psp_planner *ps = kn__sync_psp_planner_of(planner);
	bool was_reported = ps->reported[w], was_missed = ps->missed;
	int ret;

	/* ZipLine needs R x t finite: such a time is no measurement */
	if (!isfinite((double)planner->params.max_steps * ev->value))
		return -EINVAL;
	/* a non-member's speed plans nothing; it is forgotten at its JOIN */
	if (!planner->member[w])
		return 0;
	if (old == 0) {
		planner->pred[w] = value;
	} else if (fabs(value - old) > (double)planner->params.miss * old) {
		/*
		 * A miss is a change of speed, not noise: the EMA restarts
		 * from the new speed, so the plan this barrier makes already
		 * follows it.  Averaged in, the prediction would be off
		 * again at the next barrier, and the plan that fits would
		 * come barriers later.
		 */
		ps->missed = true;
		planner->pred[w] = value;
	} else {
		planner->pred[w] = alpha * value + (1 - alpha) * old;
	}
	if (!was_reported) {
		ps->reported[w] = true;
		ps->nreported++;
	}
	ret = barrier(planner, out);
	if (ret < 0) {
		planner->pred[w] = old;
		ps->missed = was_missed;
		if (!was_reported) {
			ps->reported[w] = false;
			ps->nreported--;
		}
	}
	return ret;
}

static int psp_planner_event(struct kn__sync_planner *planner,
			     const struct kn__sync_event *ev,
			     struct kn__sync_action *out)
{
	struct kn__sync_psp_planner *ps = kn__sync_psp_planner_of(planner);
	uint32_t w = ev->worker;

	switch (ev->type) {
	case KN__SYNC_EV_TIMING:
		return planner_timing(planner, ev, out);
	case KN__SYNC_EV_JOIN:
		/* a restarted worker may run on other hardware: predict anew */
		planner->pred[w] = 0;
		planner->changed = true;
		return 0;
	case KN__SYNC_EV_LEAVE:
		if (ps->reported[w]) {
			ps->reported[w] = false;
			ps->nreported--;
		}
		planner->changed = true;
		/* the barrier may have waited only for the leaver */
		return barrier(planner, out);
	default: /* KN__SYNC_EV_TIMER: time alone changes no plan */
		return 0;
	}
}

/* --- the worker rule ----------------------------------------------------- */

/*
 * The longest recent wait rises to a longer one at once and falls by
 * this share of the gap to a shorter one per release: about the longest
 * of the last 32.  A worker that turns slow (and so no longer waits)
 * takes about 32 rounds to stop stepping on its copy.
 */
#define WAIT_FALL (1.0 / 32)

static double longest_recent(double prev, double x)
{
	return x >= prev ? x : prev + WAIT_FALL * (x - prev);
}

/* An EMA with the planner's weight; the first sample sets it. */
static double ema(double prev, double x, float alpha)
{
	return prev > 0 ? alpha * x + (1 - alpha) * prev : x;
}

/*
 * Another step on the copy fits while the model is on its way: it is
 * predicted to end before the release is, so it only fills time the
 * worker would spend idle.  A step that would run past the release
 * delays the worker's next push and, with it, the next round (a slow
 * worker's one step is longer than the wait), and every such step is
 * computed on a model that lacks the round's progress.  The release is
 * predicted by the longest recent wait, not the mean: when slow steps
 * strike at random, most rounds release at once and one in a few holds
 * everyone for several steps, and the mean, far shorter than those
 * waits, had the workers idle through them.  The slowest worker of a
 * steady imbalance never waits long, so it still starts no step.
 */
static bool step_fits(const struct kn__sync_psp_worker *w, double t)
{
	return w->wait_s > 0 && t + w->step_s <= w->push_t + w->wait_s;
}

static int psp_worker_event(struct kn__sync_worker *rule,
			    const struct kn__sync_worker_event *ev,
			    uint32_t *next)
{
	struct kn__sync_psp_worker *w = kn__sync_psp_worker_of(rule);
	uint32_t max_steps = rule->params.max_steps;
	float alpha = rule->params.alpha;

	switch (ev->type) {
	case KN__SYNC_WEV_STEP:
		if (rule->state == KN__SYNC_WS_RUN) {
			w->step_s = ema(w->step_s, ev->seconds, alpha);
			/* due 0 is the start: one step, as under BSP */
			w->steps++;
			if (w->steps < w->due) {
				*next = KN__SYNC_NEXT_STEP;
				return 0;
			}
			rule->state = KN__SYNC_WS_PUSH;
			*next = KN__SYNC_NEXT_PUSH;
			return 0;
		}
		/*
		 * Steps while waiting only where PUSHED or the last of them
		 * said STEP: under a plan, and fewer than R so far, so a
		 * worker whose model is late stops drifting from it.
		 */
		if (rule->state != KN__SYNC_WS_WAIT || w->epoch == 0 ||
		    w->extra >= max_steps || !w->stepping)
			return -EINVAL;
		w->step_s = ema(w->step_s, ev->seconds, alpha);
		w->extra++;
		w->stepping = w->extra < max_steps && step_fits(w, ev->t);
		*next = w->stepping ? KN__SYNC_NEXT_STEP : KN__SYNC_NEXT_WAIT;
		return 0;
	case KN__SYNC_WEV_PUSHED:
		if (rule->state != KN__SYNC_WS_PUSH)
			return -EINVAL;
		rule->state = KN__SYNC_WS_WAIT;
		w->steps = 0;
		w->extra = 0;
		w->push_t = ev->t;
		/* in warm-up it is BSP: no training on a copy while waiting */
		w->stepping = w->epoch && step_fits(w, ev->t);
		*next = w->stepping ? KN__SYNC_NEXT_STEP : KN__SYNC_NEXT_WAIT;
		return 0;
	default: /* KN__SYNC_WEV_RELEASE */
		/* no chunk rule releases more than R steps */
		if (rule->state == KN__SYNC_WS_PUSH || ev->steps > max_steps)
			return -EINVAL;
		/* a joiner's first release follows no push of its own */
		if (rule->state == KN__SYNC_WS_WAIT && isfinite(ev->rtt) &&
		    ev->rtt > 0)
			w->wait_s = longest_recent(w->wait_s, ev->rtt);
		/*
		 * The caller merges the steps taken while waiting onto the
		 * new model: they count toward the next push, on top of the
		 * plan's.  Were they taken off the steps due, a fast worker
		 * would push ever sooner after its release, until it pushed
		 * at once and spent the whole round training on a copy the
		 * round's progress never reaches.
		 */
		w->due = w->extra + (ev->steps ? ev->steps : 1);
		w->epoch = ev->epoch;
		w->steps = w->extra;
		w->extra = 0;
		w->stepping = false;
		rule->state = KN__SYNC_WS_RUN;
		*next = KN__SYNC_NEXT_STEP;
		return 0;
	}
}

static int planner_init(struct kn__sync_planner *planner)
{
	struct kn__sync_psp_planner *ps = kn__sync_psp_planner_of(planner);

	ps->reported =
		calloc(planner->params.max_workers, sizeof(*ps->reported));
	return ps->reported ? 0 : -ENOMEM;
}

static void planner_fini(struct kn__sync_planner *planner)
{
	free(kn__sync_psp_planner_of(planner)->reported);
}

const struct kn__sync_ops kn__sync_predicted_ops = {
	.traits = {
		.local_steps = true,
		.release_info = true,
		.timing = KN__SYNC_TIMING_PLANNER,
		.plans = KN__SYNC_PLANS_STEPS,
	},
	/* one APPLY and a RELEASE for every worker that can be a member */
	.actions_fixed = 1,
	.actions_per_worker = 1,
	.push = psp_push,
	.join = psp_join,
	.leave = psp_leave,
	.plan = psp_plan,
	.planner_event = psp_planner_event,
	.worker_event = psp_worker_event,
	.planner_init = planner_init,
	.planner_fini = planner_fini,
	.planner_size = sizeof(struct kn__sync_psp_planner),
	.worker_size = sizeof(struct kn__sync_psp_worker),
};
