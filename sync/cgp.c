/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cgp.c - CGP, Cooperative Grouping Parallel (DESIGN.md section 4,
 * docs/protocols.md): its chunk rule and its planner.  Workers never
 * skip or add steps, so the worker rule is BSP's (sync.c).
 *
 * The workers are split into groups of similar speed.  Inside a group it
 * is BSP: a group's round is complete when each of its members has
 * pushed once, its sum is applied to the global model at once, and the
 * whole group is released with the new model.  Between groups there is
 * no barrier: a fast group applies many rounds while a slow one computes
 * one, and the slow one's update is stale by the applies in between.
 *
 * Time is cut into epochs, each ending at a global barrier.  Epoch 0 is
 * the warm-up: one group of every member, `warmup` rounds, so BSP, while
 * the planner learns the speeds.  The plan of epoch e >= 1 names every
 * worker's group and the rounds its group runs in the epoch (the fastest
 * group `epoch_rounds`, the others as many as end at about the same
 * time: ZipLine over the groups' round times).  A group that has run its
 * rounds waits; when every group waits, the epoch is over.  Only there,
 * with nobody computing, does a new plan come into force, so no worker
 * ever merges state made under two groupings.  Since a plan names where
 * its epoch ends, every server ends it after the same pushes, whenever
 * its messages come.
 *
 * A chunk rule at the barrier without the next plan answers BARRIER; the
 * caller tells the planner, which then plans the next epoch from the
 * speeds it has (an EMA over epochs of each epoch's mean TIMING): it
 * re-solves CGPP
 * (sync/cgpp.h) after the warm-up, every `period` iterations, when a
 * worker's speed drifted by more than 20% since the last look, or when
 * the membership changed, and it regroups only when the new grouping is
 * predicted to be more than 5% faster (or the old one broke the bound).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cgpp.h"
#include "sync_priv.h"

#define NONE UINT32_MAX

/* Step times kept per worker for its distribution. */
#define SAMPLES 128
/* A speed change: the epoch's mean this many standard errors ... */
#define SHIFT_SIGMAS 4.0
/* ... and this fraction away from the older samples' mean. */
#define SHIFT_REL 0.05
/* Regroup only for a predicted throughput gain above this. */
#define MIN_GAIN 0.05
/* A speed that moved this much (relative) since the last look. */
#define DRIFT 0.20

/* --- the chunk rule -------------------------------------------------- */

struct group {
	uint32_t size;	  /* its members at this rule */
	uint32_t npushed; /* of them, pushed in this round */
	uint32_t rounds;  /* rounds applied in this epoch */
	uint32_t due;	  /* rounds the epoch asks of it */
	uint32_t first;	  /* its workers: order[first .. first + count) */
	uint32_t count;
	uint64_t read;	  /* the version its members were released with */
	uint64_t applied; /* contributions applied by then (staleness) */
	bool done;	  /* it ran its rounds: waits for the barrier */
};

struct kn__sync_cgp_rule {
	struct group *g;    /* [max_workers] */
	uint32_t *group_of; /* [max_workers]: its group, NONE: held */
	uint32_t *order;    /* [max_workers]: planned workers by group */
	uint32_t *scratch;  /* [max_workers]: counts; a plan's check */
	uint32_t ngroups;
	uint32_t nopen;	      /* groups with members not done */
	uint32_t warm_rounds; /* epoch 0: rounds applied */
	uint64_t applied;     /* contributions applied in all */
	bool barrier;	      /* every group is done: waiting for a plan */
};

/* @rule's CGP state (its @own); a const rule's too, as in esp.c. */
static struct kn__sync_cgp_rule *cgp_rule(const struct kn__sync_rule *rule)
{
	return (struct kn__sync_cgp_rule *)(void *)rule->own;
}

static int rule_init(struct kn__sync_rule *rule)
{
	uint32_t max = rule->params.max_workers;
	struct kn__sync_cgp_rule *c = cgp_rule(rule);

	c->g = calloc(max, sizeof(*c->g));
	c->group_of = malloc(max * sizeof(*c->group_of));
	c->order = calloc(max, sizeof(*c->order));
	c->scratch = calloc(max, sizeof(*c->scratch));
	if (!c->g || !c->group_of || !c->order || !c->scratch)
		return -ENOMEM;
	/* the warm-up: the members so far are group 0 */
	for (uint32_t i = 0; i < max; i++)
		c->group_of[i] = rule->w[i].member ? 0 : NONE;
	return 0;
}

static void rule_fini(struct kn__sync_rule *rule)
{
	struct kn__sync_cgp_rule *c = cgp_rule(rule);

	free(c->g);
	free(c->group_of);
	free(c->order);
	free(c->scratch);
}

static void release(const struct kn__sync_rule *rule,
		    struct kn__sync_action *act, uint32_t worker)
{
	kn__sync_release(act, worker, rule->version);
	act->epoch = rule->epoch;
}

/*
 * The plan of the next epoch comes into force: groups from its entries
 * (each group's workers in ascending id order, the summation order),
 * and every member it names released.  Members it does not name (they
 * joined after it was made) stay held until a later barrier.
 */
static int switch_plan(struct kn__sync_rule *rule, struct kn__sync_action *out)
{
	struct kn__sync_cgp_rule *c = cgp_rule(rule);
	uint32_t max = rule->params.max_workers, n = 0, pos = 0;

	memcpy(rule->plan, rule->next_plan, max * sizeof(*rule->plan));
	rule->epoch = rule->next_epoch;
	rule->have_next = false;
	c->barrier = false;

	c->ngroups = 0;
	for (uint32_t i = 0; i < max; i++) {
		uint32_t e = rule->plan[i];

		if (e && KN__SYNC_CGP_GROUP(e) + 1 > c->ngroups)
			c->ngroups = KN__SYNC_CGP_GROUP(e) + 1;
	}
	for (uint32_t k = 0; k < c->ngroups; k++)
		c->g[k] = (struct group){ .read = rule->version,
					  .applied = c->applied };
	for (uint32_t i = 0; i < max; i++) {
		uint32_t e = rule->plan[i];

		c->group_of[i] = NONE;
		if (!e)
			continue;
		c->g[KN__SYNC_CGP_GROUP(e)].count++;
		c->g[KN__SYNC_CGP_GROUP(e)].due = KN__SYNC_CGP_ROUNDS(e);
	}
	for (uint32_t k = 0; k < c->ngroups; k++) {
		c->g[k].first = pos;
		pos += c->g[k].count;
		c->g[k].count = 0;
	}
	c->nopen = 0;
	for (uint32_t i = 0; i < max; i++) {
		uint32_t e = rule->plan[i];
		struct group *g;

		if (!e)
			continue;
		g = &c->g[KN__SYNC_CGP_GROUP(e)];
		c->order[g->first + g->count++] = i;
		if (!rule->w[i].member)
			continue;
		c->group_of[i] = KN__SYNC_CGP_GROUP(e);
		rule->w[i].pushed = false;
		if (g->size++ == 0)
			c->nopen++;
		release(rule, &out[n++], i);
	}
	if (c->nopen == 0) {
		/* nobody in it is here: the epoch is over as it starts */
		c->barrier = true;
		out[n++] = (struct kn__sync_action){
			.type = KN__SYNC_ACT_BARRIER,
			.epoch = rule->epoch,
		};
	}
	return (int)n;
}

/* Every group waits: switch if the next plan is here, else ask for it. */
static int barrier(struct kn__sync_rule *rule, struct kn__sync_action *out)
{
	cgp_rule(rule)->barrier = true;
	if (rule->have_next)
		return switch_plan(rule, out);
	out[0] = (struct kn__sync_action){
		.type = KN__SYNC_ACT_BARRIER,
		.epoch = rule->epoch,
	};
	return 1;
}

/* A warm-up round is complete (BSP's): the mean, then on or the barrier. */
static int warm_complete(struct kn__sync_rule *rule,
			 struct kn__sync_action *out)
{
	struct kn__sync_cgp_rule *c = cgp_rule(rule);
	uint32_t n = kn__sync_round_complete(rule, out);
	int ret;

	if (!n)
		return 0;
	/* a whole round, yet counted as the groups' shares are, so that
	 * the servers' momentum turns the same way through the warm-up */
	out[0].share = true;
	c->applied += n;
	for (uint32_t k = 0; k < n; k++)
		rule->contrib[k].weight = 1.0f / (float)n;
	if (++c->warm_rounds < rule->params.warmup) {
		for (uint32_t k = 0; k < n; k++)
			release(rule, &out[1 + k], rule->contrib[k].worker);
		return (int)(1 + n);
	}
	ret = barrier(rule, out + 1);
	return ret < 0 ? ret : 1 + ret;
}

/*
 * Group @k's round is complete: its sum goes in, each push weighted
 * 1 / n (the group's mean at rate lr |G| / n) and damped by its
 * staleness: the contributions of other groups applied since the group
 * was released, counted in rounds of n, m, give the factor 1 / (1 + m).
 * The planner's cost model (cgpp.h) prices exactly this damping, at its
 * steady rate, in throughput and in the staleness bound.  Then the group
 * goes on, or waits for the barrier.
 */
static int group_complete(struct kn__sync_rule *rule, uint32_t k,
			  struct kn__sync_action *out)
{
	struct kn__sync_cgp_rule *c = cgp_rule(rule);
	struct group *g = &c->g[k];
	uint32_t n = 0, nout;
	double m = (double)(c->applied - g->applied) / rule->nmembers;
	float weight = (float)(1.0 / (m > 1 ? m : 1) / rule->nmembers);

	for (uint32_t j = 0; j < g->count; j++) {
		uint32_t i = c->order[g->first + j];
		struct kn__sync_wstate *w = &rule->w[i];

		if (c->group_of[i] != k || !w->pushed)
			continue;
		rule->contrib[n++] = (struct kn__sync_contrib){
			.worker = i,
			.slot = w->slot,
			.weight = weight,
		};
		w->pushed = false;
	}
	g->npushed = 0;
	c->applied += n;
	kn__sync_apply(rule, n, 1.0f, true, &out[0]);
	nout = 1;
	if (++g->rounds < g->due) {
		g->read = rule->version;
		g->applied = c->applied;
		for (uint32_t j = 0; j < n; j++)
			release(rule, &out[nout++], rule->contrib[j].worker);
		return (int)nout;
	}
	g->done = true;
	if (--c->nopen > 0)
		return (int)nout;
	return (int)nout + barrier(rule, out + nout);
}

static int cgp_push(struct kn__sync_rule *rule, const struct kn__sync_event *ev,
		    struct kn__sync_action *out)
{
	struct kn__sync_cgp_rule *c = cgp_rule(rule);
	struct kn__sync_wstate *w = &rule->w[ev->worker];
	uint32_t k = c->group_of[ev->worker];
	struct group *g;

	if (k == NONE || c->barrier)
		return -EINVAL; /* held: it was released with nothing */
	if (rule->epoch == 0)
		return kn__sync_round_push(rule, ev) ? -EINVAL
						     : warm_complete(rule, out);
	g = &c->g[k];
	/* one push per round, from the version the group was given */
	if (g->done || w->pushed || ev->version != g->read)
		return -EINVAL;
	w->pushed = true;
	w->slot = ev->slot;
	if (++g->npushed < g->size)
		return 0;
	return group_complete(rule, k, out);
}

/*
 * A joiner takes part in the warm-up as under BSP; after it, it waits
 * for the first plan that names it, at a barrier.
 */
static int cgp_join(struct kn__sync_rule *rule, const struct kn__sync_event *ev,
		    struct kn__sync_action *out)
{
	struct kn__sync_cgp_rule *c = cgp_rule(rule);

	c->group_of[ev->worker] = NONE;
	if (rule->epoch != 0 || c->barrier)
		return 0;
	c->group_of[ev->worker] = 0;
	release(rule, &out[0], ev->worker);
	return 1;
}

/* Its group is complete without it, or, if it was the last, done. */
static int cgp_leave(struct kn__sync_rule *rule,
		     const struct kn__sync_event *ev,
		     struct kn__sync_action *out)
{
	struct kn__sync_cgp_rule *c = cgp_rule(rule);
	struct kn__sync_wstate *w = &rule->w[ev->worker];
	uint32_t k = c->group_of[ev->worker];
	struct group *g;

	c->group_of[ev->worker] = NONE;
	if (k == NONE)
		return 0;
	if (rule->epoch == 0) {
		kn__sync_round_drop(rule, ev->worker);
		return c->barrier ? 0 : warm_complete(rule, out);
	}
	g = &c->g[k];
	g->size--;
	if (w->pushed) {
		w->pushed = false;
		g->npushed--;
	}
	if (g->done)
		return 0;
	if (g->size == 0) {
		g->done = true;
		return --c->nopen > 0 ? 0 : barrier(rule, out);
	}
	return g->npushed == g->size ? group_complete(rule, k, out) : 0;
}

/*
 * The plan of the next epoch, and only that one: plans are made one
 * per barrier, and the one of epoch e + 1 always comes before any
 * worker can finish epoch e + 1, so anything else is a replay or a
 * fault.  Every entry must name a group and at least one round, one
 * group one number of rounds.  At the barrier it comes into force now.
 */
static int cgp_plan(struct kn__sync_rule *rule, const struct kn__sync_event *ev,
		    struct kn__sync_action *out)
{
	struct kn__sync_cgp_rule *c = cgp_rule(rule);
	uint32_t max = rule->params.max_workers;

	if (ev->epoch != rule->epoch + 1 || rule->have_next)
		return -EINVAL;
	memset(c->scratch, 0, max * sizeof(*c->scratch));
	for (uint32_t i = 0; i < max; i++) {
		uint32_t e = ev->plan[i], k;

		if (!e)
			continue;
		k = KN__SYNC_CGP_GROUP(e);
		if (k >= max || KN__SYNC_CGP_ROUNDS(e) == 0 ||
		    (c->scratch[k] && c->scratch[k] != KN__SYNC_CGP_ROUNDS(e)))
			return -EINVAL;
		c->scratch[k] = KN__SYNC_CGP_ROUNDS(e);
	}
	memcpy(rule->next_plan, ev->plan, max * sizeof(*rule->next_plan));
	rule->next_epoch = ev->epoch;
	rule->have_next = true;
	return c->barrier ? switch_plan(rule, out) : 0;
}

/* --- the planner ------------------------------------------------------ */

struct kn__sync_cgp_planner {
	uint32_t *group;  /* [max_workers]: group in the plan in force */
	double *base;	  /* [max_workers]: speed at the last look */
	uint32_t *ids;	  /* [max_workers]: members by speed */
	double *t;	  /* [max_workers]: their speeds, ascending */
	uint8_t *cuts;	  /* [max_workers]: a partition of ids */
	double *gtime;	  /* [max_workers + 1]: round time per group */
	double *gT;	  /* [max_workers + 1]: the same with C_sync */
	uint32_t *gsize;  /* [max_workers + 1]: members per group */
	uint32_t *rounds; /* [max_workers + 1]: rounds per group */
	uint32_t *label;  /* [max_workers]: group per sorted position */
	double *sum;	  /* [max_workers]: its timings this epoch ... */
	uint32_t *count;  /* [max_workers]: ... and how many */
	double *samp;	  /* [max_workers][SAMPLES]: its latest timings */
	uint32_t *nsamp;  /* [max_workers]: how many of them (<= SAMPLES) */
	uint32_t *next;	  /* [max_workers]: where the next one goes */
	double *ssamp;	  /* [max_workers][SAMPLES]: the same by speed */
	uint32_t *scount; /* [max_workers]: ... and their counts */
	uint32_t ngroups;
	uint64_t since; /* iterations since the last look */
	bool waiting;	/* a barrier came while nobody was a member */
	struct kn__cgpp_pls *archive; /* PLS: from the last search */
	struct kn__cgpp_dist *dist;   /* the members' step times, by speed */
};

static struct kn__sync_cgp_planner *
cgp_planner(const struct kn__sync_planner *planner)
{
	return (struct kn__sync_cgp_planner *)(void *)planner->own;
}

static int planner_init(struct kn__sync_planner *planner)
{
	uint32_t max = planner->params.max_workers;
	struct kn__sync_cgp_planner *c = cgp_planner(planner);

	c->group = calloc(max, sizeof(*c->group));
	c->base = calloc(max, sizeof(*c->base));
	c->ids = calloc(max, sizeof(*c->ids));
	c->t = calloc(max, sizeof(*c->t));
	c->cuts = calloc(max, sizeof(*c->cuts));
	c->gtime = calloc((size_t)max + 1, sizeof(*c->gtime));
	c->gT = calloc((size_t)max + 1, sizeof(*c->gT));
	c->gsize = calloc((size_t)max + 1, sizeof(*c->gsize));
	c->rounds = calloc((size_t)max + 1, sizeof(*c->rounds));
	c->label = calloc(max + 1, sizeof(*c->label));
	c->sum = calloc(max, sizeof(*c->sum));
	c->count = calloc(max, sizeof(*c->count));
	c->samp = calloc((size_t)max * SAMPLES, sizeof(*c->samp));
	c->nsamp = calloc(max, sizeof(*c->nsamp));
	c->next = calloc(max, sizeof(*c->next));
	c->ssamp = calloc((size_t)max * SAMPLES, sizeof(*c->ssamp));
	c->scount = calloc(max, sizeof(*c->scount));
	if (!c->group || !c->base || !c->ids || !c->t || !c->cuts ||
	    !c->gtime || !c->gT || !c->gsize || !c->rounds || !c->label ||
	    !c->sum || !c->count || !c->samp || !c->nsamp || !c->next ||
	    !c->ssamp || !c->scount)
		return -ENOMEM;
	/* the warm-up's grouping: every member in group 0 */
	for (uint32_t i = 0; i < max; i++)
		c->group[i] = planner->member[i] ? 0 : NONE;
	c->ngroups = 1;
	return 0;
}

static void planner_fini(struct kn__sync_planner *planner)
{
	struct kn__sync_cgp_planner *c = cgp_planner(planner);

	kn__cgpp_pls_destroy(c->archive);
	free(c->group);
	free(c->base);
	free(c->ids);
	free(c->t);
	free(c->cuts);
	free(c->gtime);
	free(c->gT);
	free(c->gsize);
	free(c->rounds);
	free(c->label);
	free(c->sum);
	free(c->count);
	free(c->samp);
	free(c->nsamp);
	free(c->next);
	free(c->ssamp);
	free(c->scount);
	kn__cgpp_dist_destroy(c->dist);
}

/* C_sync(m), the cost model's. */
static double sync_cost(const struct kn__sync_params *p, uint32_t m)
{
	return p->latency + (double)m * (double)p->bytes / p->bandwidth;
}

/* Members by predicted speed, ascending (ties by id); their number. */
struct by_speed {
	double t;
	uint32_t id;
};

static int cmp_speed(const void *a, const void *b)
{
	const struct by_speed *x = a, *y = b;

	if (x->t != y->t)
		return x->t < y->t ? -1 : 1;
	return (x->id > y->id) - (x->id < y->id);
}

/*
 * The sorted members' recent step times as distributions (c->dist), for
 * the cost model's expected slowest step of a group.
 */
static int sort_samples(struct kn__sync_planner *planner, uint32_t n)
{
	struct kn__sync_cgp_planner *c = cgp_planner(planner);
	struct kn__cgpp_dist *d;
	int ret;

	for (uint32_t j = 0; j < n; j++) {
		uint32_t id = c->ids[j];

		c->scount[j] = c->nsamp[id];
		memcpy(c->ssamp + (size_t)j * SAMPLES,
		       c->samp + (size_t)id * SAMPLES,
		       c->nsamp[id] * sizeof(*c->ssamp));
	}
	ret = kn__cgpp_dist_create(c->t, n, c->ssamp, c->scount, SAMPLES, &d);
	if (ret)
		return ret;
	kn__cgpp_dist_destroy(c->dist);
	c->dist = d;
	return 0;
}

/*
 * The members' predicted seconds per step into c->ids / c->t, sorted.
 * A member without a timing yet (a joiner) is taken to be as slow as
 * the slowest known one, so it cannot make a fast group wait; with no
 * timing at all, every member counts one second.
 */
static int sort_members(struct kn__sync_planner *planner, uint32_t *count)
{
	struct kn__sync_cgp_planner *c = cgp_planner(planner);
	uint32_t max = planner->params.max_workers, n = 0;
	double slowest = 0;
	struct by_speed *v;

	v = malloc((planner->nmembers ? planner->nmembers : 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (uint32_t i = 0; i < max; i++)
		if (planner->member[i] && planner->pred[i] > slowest)
			slowest = planner->pred[i];
	if (slowest == 0)
		slowest = 1;
	for (uint32_t i = 0; i < max; i++) {
		if (!planner->member[i])
			continue;
		v[n].t = planner->pred[i] > 0 ? planner->pred[i] : slowest;
		v[n++].id = i;
	}
	qsort(v, n, sizeof(*v), cmp_speed);
	for (uint32_t j = 0; j < n; j++) {
		c->ids[j] = v[j].id;
		c->t[j] = v[j].t;
	}
	free(v);
	*count = n;
	return n ? sort_samples(planner, n) : 0;
}

/*
 * Throughput (samples per step of each worker per second) and tau_max
 * of a grouping of the sorted members given as @label per position:
 * the cost model of cgpp.h (its own code), for groups that need not be
 * contiguous.  Leaves each group's expected slowest step (c->dist) in
 * c->gtime and its size in c->gsize.  0, -EINVAL for speeds the model
 * refuses, or -ENOMEM.
 */
static int eval_labels(struct kn__sync_planner *planner, uint32_t n,
		       const uint32_t *label, uint32_t ngroups,
		       struct kn__cgpp_eval *out)
{
	struct kn__sync_cgp_planner *c = cgp_planner(planner);
	int ret;

	for (uint32_t k = 0; k < ngroups; k++)
		c->gsize[k] = 0;
	for (uint32_t j = 0; j < n; j++)
		c->gsize[label[j]]++;
	ret = kn__cgpp_dist_groups(c->dist, label, ngroups, c->gtime);
	if (ret)
		return ret;
	for (uint32_t k = 0; k < ngroups; k++)
		c->gT[k] =
			c->gtime[k] + sync_cost(&planner->params, c->gsize[k]);
	return kn__cgpp_eval_groups(c->gT, c->gsize, ngroups, 1,
				    planner->params.bound, out);
}

/*
 * Solve CGPP for the sorted members into c->cuts.  PLS keeps its
 * archive: when only time has passed (no drift, no membership change),
 * the archive is re-scored under the new speeds and the best feasible
 * member taken, without a new search.
 */
static int solve(struct kn__sync_planner *planner, uint32_t n, bool fresh,
		 struct kn__cgpp_eval *best)
{
	struct kn__sync_cgp_planner *c = cgp_planner(planner);
	const struct kn__sync_params *p = &planner->params;
	struct kn__cgpp inst = {
		.t = c->t,
		.dist = c->dist,
		.n = n,
		.batch = 1,
		.lat = p->latency,
		.bytes = (double)p->bytes,
		.bw = p->bandwidth,
		.bound = p->bound,
	};
	bool pls =
		p->solver == KN__SYNC_CGP_PLS ||
		(p->solver == KN__SYNC_CGP_AUTO && n > KN__SYNC_CGP_AUTO_AGA);
	size_t best_i = 0;
	int ret;

	if (!pls)
		return kn__cgpp_aga(&inst, planner->epoch, NULL, c->cuts, best);
	if (fresh || !c->archive) {
		struct kn__cgpp_pls *a;

		ret = kn__cgpp_pls_create(&inst, planner->epoch, 0, &a);
		if (ret)
			return ret;
		kn__cgpp_pls_destroy(c->archive);
		c->archive = a;
		return kn__cgpp_pls_select(a, p->bound, c->cuts, best);
	}
	/* re-score the archive; BSP, always in it, is always feasible */
	best->lambda = -1;
	for (size_t i = 0; i < kn__cgpp_pls_size(c->archive); i++) {
		struct kn__cgpp_eval e;

		ret = kn__cgpp_pls_member(c->archive, i, c->cuts, &e);
		if (!ret)
			ret = kn__cgpp_eval(&inst, c->cuts, &e);
		if (ret)
			return ret;
		if (e.feasible && e.lambda > best->lambda) {
			*best = e;
			best_i = i;
		}
	}
	return kn__cgpp_pls_member(c->archive, best_i, c->cuts,
				   &(struct kn__cgpp_eval){ 0 });
}

/* Labels per sorted position from c->cuts (0: the fastest group). */
static uint32_t label_cuts(struct kn__sync_cgp_planner *c, uint32_t n)
{
	uint32_t k = 0;

	for (uint32_t j = 0; j < n; j++) {
		c->label[j] = k;
		if (j + 1 < n && c->cuts[j])
			k++;
	}
	return k + 1;
}

/* Whether the new labels split the members as c->group does. */
static bool same_groups(struct kn__sync_cgp_planner *c, uint32_t n,
			uint32_t ngroups)
{
	uint32_t *map = c->rounds; /* scratch: old group -> new */

	if (ngroups != c->ngroups)
		return false;
	for (uint32_t k = 0; k < ngroups; k++)
		map[k] = NONE;
	for (uint32_t j = 0; j < n; j++) {
		uint32_t old = c->group[c->ids[j]];

		if (old == NONE || old >= ngroups)
			return false;
		if (map[old] == NONE)
			map[old] = c->label[j];
		else if (map[old] != c->label[j])
			return false;
	}
	return true;
}

/* Worker @i's @j-th oldest kept timing. */
static double *sample_at(struct kn__sync_cgp_planner *c, uint32_t i, uint32_t j)
{
	uint32_t first = (c->next[i] + SAMPLES - c->nsamp[i]) % SAMPLES;

	return &c->samp[(size_t)i * SAMPLES + (first + j) % SAMPLES];
}

/*
 * Whether worker @i's timings of this epoch (the newest @fresh of its
 * samples) come from another distribution than the older ones: their
 * mean is more than SHIFT_SIGMAS standard errors (the variance pooled
 * within both parts) and SHIFT_REL of the older mean away from the older
 * mean.  Then it changed speed (an episode began or ended, another job
 * took its GPU) and the older samples are dropped: a window that mixes
 * two speeds would look like a worker that fluctuates, and a worker that
 * sped up would count as a straggler for 128 steps.  A worker whose
 * steps fluctuate the same way all along keeps its window.
 */
static void drop_if_shifted(struct kn__sync_cgp_planner *c, uint32_t i,
			    uint32_t fresh)
{
	uint32_t old = c->nsamp[i] - fresh;
	double mo = 0, me = 0, ss = 0, se;

	if (fresh == 0 || old == 0 || old + fresh < 3)
		return;
	for (uint32_t j = 0; j < old; j++)
		mo += *sample_at(c, i, j);
	mo /= old;
	for (uint32_t j = old; j < c->nsamp[i]; j++)
		me += *sample_at(c, i, j);
	me /= fresh;
	for (uint32_t j = 0; j < c->nsamp[i]; j++) {
		double dx = *sample_at(c, i, j) - (j < old ? mo : me);

		ss += dx * dx;
	}
	ss /= old + fresh - 2;
	se = sqrt(ss / fresh + ss / old);
	if (fabs(me - mo) <= SHIFT_SIGMAS * se ||
	    fabs(me - mo) <= SHIFT_REL * mo)
		return;
	/* keep the fresh ones, oldest first from position 0 */
	for (uint32_t j = 0; j < fresh; j++)
		c->ssamp[j] = *sample_at(c, i, old + j);
	memcpy(c->samp + (size_t)i * SAMPLES, c->ssamp,
	       fresh * sizeof(*c->ssamp));
	c->nsamp[i] = fresh;
	c->next[i] = fresh % SAMPLES;
}

/*
 * The prediction moves once per epoch, by the mean of the epoch's
 * timings: t = alpha mean + (1 - alpha) t, or t = mean for the first.
 * A single step's time is noisy (a scheduler hiccup doubles it), and a
 * grouping follows it for a whole epoch: one late step must not move a
 * worker to the slow group and back.
 */
static void fold_timings(struct kn__sync_planner *planner)
{
	struct kn__sync_cgp_planner *c = cgp_planner(planner);
	double alpha = planner->params.alpha;

	for (uint32_t i = 0; i < planner->params.max_workers; i++) {
		double mean;

		if (!c->count[i])
			continue;
		drop_if_shifted(c, i,
				c->count[i] < c->nsamp[i] ? c->count[i]
							  : c->nsamp[i]);
		mean = c->sum[i] / c->count[i];
		if (mean < 1e-9)
			mean = 1e-9; /* 0 is "no timing yet" */
		planner->pred[i] =
			planner->pred[i] == 0
				? mean
				: alpha * mean + (1 - alpha) * planner->pred[i];
		c->sum[i] = 0;
		c->count[i] = 0;
	}
}

/*
 * The plan of the next epoch, as a REGROUP in @out: the groups (new
 * ones if a look at CGPP finds them worth it) and their rounds, the
 * fastest group epoch_rounds, each other one the nearest whole number
 * that ends with it, at least 1.  1 action, 0 with no members (the
 * plan is made at the next JOIN), or -ENOMEM with the groups and the
 * epoch as they were (the epoch's timings are folded in already, and
 * the solver's archive may be new: the next BARRIER tries again).
 */
static int plan_next(struct kn__sync_planner *planner,
		     struct kn__sync_action *out)
{
	struct kn__sync_cgp_planner *c = cgp_planner(planner);
	const struct kn__sync_params *p = &planner->params;
	uint32_t max = p->max_workers, n, ngroups = c->ngroups;
	bool drift = false, fresh, regrouped = false, homeless = false;
	uint32_t why = 0;
	struct kn__cgpp_eval now, best;
	double gain = 0, tmin = INFINITY;
	uint64_t longest = 0;
	int ret;

	fold_timings(planner);
	ret = sort_members(planner, &n);
	if (ret)
		return ret;
	c->waiting = n == 0;
	if (n == 0)
		return 0;
	for (uint32_t j = 0; j < n; j++) {
		double b = c->base[c->ids[j]];

		if (b > 0 && fabs(c->t[j] - b) > DRIFT * b)
			drift = true;
	}
	fresh = planner->epoch == 0 || planner->changed || drift;
	if (fresh || c->since >= p->period) {
		/* the groups in force, joiners (none yet) in one more of their
		 * own: gtime and gsize have room for it */
		for (uint32_t j = 0; j < n; j++) {
			uint32_t k = c->group[c->ids[j]];

			if (k == NONE || k >= c->ngroups) {
				homeless = true;
				k = c->ngroups;
			}
			c->label[j] = k;
		}
		ret = eval_labels(planner, n, c->label, c->ngroups + 1, &now);
		if (!ret)
			ret = solve(planner, n, fresh, &best);
		if (ret)
			return ret;
		gain = best.lambda / now.lambda - 1;
		ngroups = label_cuts(c, n);
		if (ngroups > KN__SYNC_CGP_MAX_GROUPS) {
			/* more than a plan entry can name (every one of 2^20
			 * workers alone): BSP, which is always feasible */
			memset(c->cuts, 0, n);
			ngroups = label_cuts(c, n);
		}
		why = homeless		? KN__SYNC_REGROUP_JOIN
		      : !now.feasible	? KN__SYNC_REGROUP_BOUND
		      : gain > MIN_GAIN ? KN__SYNC_REGROUP_GAIN
					: 0;
		if (why && !same_groups(c, n, ngroups)) {
			regrouped = true;
			for (uint32_t i = 0; i < max; i++)
				c->group[i] = NONE;
			for (uint32_t j = 0; j < n; j++)
				c->group[c->ids[j]] = c->label[j];
			c->ngroups = ngroups;
		}
		for (uint32_t j = 0; j < n; j++)
			c->base[c->ids[j]] = c->t[j];
		c->since = 0;
	}

	/* every member has a group: a homeless one made the new ones stick */
	for (uint32_t j = 0; j < n; j++)
		c->label[j] = c->group[c->ids[j]];
	ret = eval_labels(planner, n, c->label, c->ngroups, &now);
	if (ret)
		return ret;
	for (uint32_t k = 0; k < c->ngroups; k++) {
		c->gtime[k] += sync_cost(p, c->gsize[k]);
		if (c->gsize[k] && c->gtime[k] < tmin)
			tmin = c->gtime[k];
	}
	for (uint32_t k = 0; k < c->ngroups; k++) {
		/* T_G >= tmin, so r <= epoch_rounds; a group whose members
		 * all left has no T and no entry */
		double r = floor(p->epoch_rounds * tmin / c->gtime[k] + 0.5);

		if (!c->gsize[k]) {
			c->rounds[k] = 0;
			continue;
		}
		c->rounds[k] = r < 1 ? 1 : (uint32_t)r;
		if (c->rounds[k] > longest)
			longest = c->rounds[k];
	}
	c->since += longest;
	for (uint32_t i = 0; i < max; i++) {
		uint32_t k = c->group[i];

		planner->plan[i] = planner->member[i] && k != NONE
					   ? KN__SYNC_CGP_PLAN(k, c->rounds[k])
					   : 0;
	}
	planner->changed = false;
	out[0] = (struct kn__sync_action){
		.type = KN__SYNC_ACT_REGROUP,
		.epoch = ++planner->epoch,
		.plan = planner->plan,
		.regrouped = regrouped,
		.why = regrouped ? why : 0,
		.gain = regrouped ? (float)gain : 0,
	};
	return 1;
}

static int cgp_planner_event(struct kn__sync_planner *planner,
			     const struct kn__sync_event *ev,
			     struct kn__sync_action *out)
{
	struct kn__sync_cgp_planner *c = cgp_planner(planner);
	uint32_t w = ev->worker;

	switch (ev->type) {
	case KN__SYNC_EV_TIMING:
		/* kept for the epoch's mean (fold_timings) */
		if (planner->member[w]) {
			c->sum[w] += ev->value;
			c->count[w]++;
			c->samp[(size_t)w * SAMPLES + c->next[w]] = ev->value;
			c->next[w] = (c->next[w] + 1) % SAMPLES;
			if (c->nsamp[w] < SAMPLES)
				c->nsamp[w]++;
		}
		return 0;
	case KN__SYNC_EV_JOIN:
		/* a restarted worker may run on other hardware: learn anew */
		planner->pred[w] = 0;
		c->base[w] = 0;
		c->sum[w] = 0;
		c->count[w] = 0;
		c->nsamp[w] = 0;
		c->next[w] = 0;
		c->group[w] = NONE;
		planner->changed = true;
		return c->waiting ? plan_next(planner, out) : 0;
	case KN__SYNC_EV_LEAVE:
		c->group[w] = NONE;
		planner->changed = true;
		return 0;
	case KN__SYNC_EV_BARRIER:
		/* every chunk rule of every server says it: plan once */
		if (ev->epoch > planner->epoch)
			return -EINVAL;
		return ev->epoch == planner->epoch ? plan_next(planner, out)
						   : 0;
	default: /* KN__SYNC_EV_TIMER */
		return 0;
	}
}

const struct kn__sync_ops kn__sync_cgp_ops = {
	.traits = {
		.model_bytes = true,
		.timing = KN__SYNC_TIMING_PLANNER,
		.plans = KN__SYNC_PLANS_GROUPS,
	},
	/* an APPLY, a RELEASE for every worker, and a BARRIER */
	.actions_fixed = 2,
	.actions_per_worker = 1,
	.push = cgp_push,
	.join = cgp_join,
	.leave = cgp_leave,
	.plan = cgp_plan,
	.planner_event = cgp_planner_event,
	.rule_init = rule_init,
	.rule_fini = rule_fini,
	.planner_init = planner_init,
	.planner_fini = planner_fini,
	.rule_size = sizeof(struct kn__sync_cgp_rule),
	.planner_size = sizeof(struct kn__sync_cgp_planner),
};
