/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_cgp.c - CGP (docs/protocols.md): the chunk rule (the warm-up as
 * BSP, a barrier at its end, groups BSP inside and free between, the
 * weights 1/n damped by staleness, the barrier at each epoch's end and
 * the plan in force only there, joins, leaves, refused events); the
 * planner (groups by speed after the warm-up, kept while speeds hold,
 * re-solved on drift or a membership change, rounds per group, the
 * degenerate cases); and two chunk rules fed the same pushes in
 * different orders with plans at different times, which must apply the
 * same contributions with the same weights: what keeps servers agreeing.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "sync_priv.h"

#define MAXW   8
#define MAXACT (2 + MAXW)

static struct kn__sync_params params(uint32_t n)
{
	return (struct kn__sync_params){ .protocol = KN_SYNC_CGP,
					 .max_workers = n,
					 .members = n,
					 .warmup = 2,
					 .epoch_rounds = 4,
					 .latency = 1e-9f,
					 .bandwidth = 1e12f };
}

static struct kn__sync_rule *make_rule(const struct kn__sync_params *p)
{
	struct kn__sync_rule *r;

	cr_assert_eq(kn__sync_rule_create(p, &r), 0);
	return r;
}

static int push(struct kn__sync_rule *r, uint32_t w, uint64_t version,
		struct kn__sync_action *out)
{
	static uint64_t clock[MAXW];
	struct kn__sync_event ev = { .type = KN__SYNC_EV_PUSH,
				     .worker = w,
				     .slot = (uint32_t)(clock[w] & 1),
				     .clock = ++clock[w],
				     .version = version };

	return kn__sync_rule_event(r, &ev, out);
}

static int plan(struct kn__sync_rule *r, uint64_t epoch, const uint32_t *p,
		struct kn__sync_action *out)
{
	struct kn__sync_event ev = { .type = KN__SYNC_EV_PLAN,
				     .epoch = epoch,
				     .plan = p };

	return kn__sync_rule_event(r, &ev, out);
}

/* The workers @out's RELEASEs name, as a bit set, all with @version. */
static uint32_t released(const struct kn__sync_action *out, int n,
			 uint64_t version)
{
	uint32_t set = 0;

	for (int i = 0; i < n; i++) {
		if (out[i].type != KN__SYNC_ACT_RELEASE)
			continue;
		cr_assert_eq(out[i].version, version);
		set |= 1u << out[i].worker;
	}
	return set;
}

static bool has(const struct kn__sync_action *out, int n, uint32_t type)
{
	for (int i = 0; i < n; i++)
		if (out[i].type == type)
			return true;
	return false;
}

/* 4 workers: groups {0, 1, 2} for 3 rounds and {3} for 1. */
#define G(group, rounds) KN__SYNC_CGP_PLAN(group, rounds)
static const uint32_t plan4[4] = { G(0, 3), G(0, 3), G(0, 3), G(1, 1) };

/* The warm-up (2 rounds of BSP) of 4 workers, ending at the barrier. */
static void warm_up(struct kn__sync_rule *r, struct kn__sync_action *out)
{
	int n;

	for (uint64_t v = 0; v < 2; v++) {
		for (uint32_t w = 0; w < 3; w++)
			cr_assert_eq(push(r, w, v, out), 0);
		n = push(r, 3, v, out);
		cr_assert_eq(out[0].type, KN__SYNC_ACT_APPLY);
		cr_assert_eq(out[0].ncontrib, 4);
		cr_assert_float_eq(out[0].contrib[0].weight, 0.25f, 1e-7);
		if (v == 0) {
			cr_assert_eq(n, 5);
			cr_assert_eq(released(out, n, 1), 0xf);
		} else {
			/* the end of the warm-up: nobody goes on */
			cr_assert_eq(n, 2);
			cr_assert_eq(out[1].type, KN__SYNC_ACT_BARRIER);
			cr_assert_eq(out[1].epoch, 0);
		}
	}
}

Test(cgp_rule, warm_up_is_bsp_and_ends_at_a_barrier)
{
	struct kn__sync_params p = params(4);
	struct kn__sync_rule *r = make_rule(&p);
	struct kn__sync_action out[MAXACT];

	warm_up(r, out);
	/* held: a push now was released with nothing */
	cr_assert_eq(push(r, 0, 2, out), -EINVAL);
	/* the plan releases everyone with the barrier's model, epoch 1 */
	cr_assert_eq(plan(r, 1, plan4, out), 4);
	cr_assert_eq(released(out, 4, 2), 0xf);
	cr_assert_eq(out[0].epoch, 1);
	kn__sync_rule_destroy(r);
}

Test(cgp_rule, groups_are_bsp_inside_and_free_between)
{
	struct kn__sync_params p = params(4);
	struct kn__sync_rule *r = make_rule(&p);
	struct kn__sync_action out[MAXACT];
	int n;

	warm_up(r, out);
	cr_assert_eq(plan(r, 1, plan4, out), 4);
	/* group 0's first round: v2 -> v3, only its members go on */
	cr_assert_eq(push(r, 0, 2, out), 0);
	cr_assert_eq(push(r, 1, 2, out), 0);
	n = push(r, 2, 2, out);
	cr_assert_eq(n, 4);
	cr_assert_eq(out[0].type, KN__SYNC_ACT_APPLY);
	cr_assert_eq(out[0].version, 3);
	cr_assert_eq(out[0].ncontrib, 3);
	/* nothing applied since their release: weight 1/n, undamped */
	cr_assert_float_eq(out[0].contrib[0].weight, 0.25f, 1e-7);
	cr_assert_eq(released(out, n, 3), 0x7);
	/* a second round, while worker 3 still computes on v2 */
	for (uint32_t w = 0; w < 2; w++)
		cr_assert_eq(push(r, w, 3, out), 0);
	cr_assert_eq(push(r, 2, 2, out), -EINVAL); /* the old version */
	n = push(r, 2, 3, out);
	cr_assert_eq(released(out, n, 4), 0x7);
	/*
	 * Worker 3 alone is group 1: its one round applies at once.  Since
	 * its release, 6 contributions (m = 1.5 rounds of n = 4) went in:
	 * its weight is 1/4 / max(1, 1.5), ASP's damping.  It has run its
	 * round: it waits.
	 */
	n = push(r, 3, 2, out);
	cr_assert_eq(n, 1);
	cr_assert_eq(out[0].version, 5);
	cr_assert_eq(out[0].ncontrib, 1);
	cr_assert_float_eq(out[0].contrib[0].weight, 0.25f / 1.5f, 1e-7);
	/* group 0's third and last round ends the epoch */
	for (uint32_t w = 0; w < 2; w++)
		cr_assert_eq(push(r, w, 4, out), 0);
	n = push(r, 2, 4, out);
	cr_assert_eq(n, 2);
	cr_assert_eq(out[0].version, 6);
	/* one contribution (m = 1/4 round) came in since its release: less
	 * than a round, undamped, 1/4 / max(1, 1/4) */
	cr_assert_float_eq(out[0].contrib[0].weight, 0.25f, 1e-7);
	cr_assert_eq(out[1].type, KN__SYNC_ACT_BARRIER);
	cr_assert_eq(out[1].epoch, 1);
	kn__sync_rule_destroy(r);
}

Test(cgp_rule, a_plan_that_comes_early_waits_for_the_barrier)
{
	struct kn__sync_params p = params(4);
	struct kn__sync_rule *r = make_rule(&p);
	struct kn__sync_action out[MAXACT];
	const uint32_t next[4] = { G(0, 2), G(1, 2), G(1, 2), G(0, 2) };
	int n;

	warm_up(r, out);
	cr_assert_eq(plan(r, 1, plan4, out), 4);
	/* epoch 2's plan, before epoch 1 ends: kept, nothing released */
	cr_assert_eq(plan(r, 2, next, out), 0);
	/* and no other one until it is in force */
	cr_assert_eq(plan(r, 3, next, out), -EINVAL);
	n = push(r, 3, 2, out);
	cr_assert_eq(n, 1);
	for (uint64_t v = 3; v < 6; v++) {
		for (uint32_t w = 0; w < 2; w++)
			cr_assert_eq(push(r, w, v == 3 ? 2 : v, out), 0);
		n = push(r, 2, v == 3 ? 2 : v, out);
	}
	/* the last completion switches at once: APPLY, then everyone */
	cr_assert_eq(n, 5);
	cr_assert_eq(out[0].version, 6);
	cr_assert_eq(released(out, n, 6), 0xf);
	cr_assert_eq(out[1].epoch, 2);
	/* the new groups: {0, 3} and {1, 2} */
	cr_assert_eq(push(r, 0, 6, out), 0);
	cr_assert_eq(push(r, 1, 6, out), 0);
	n = push(r, 3, 6, out);
	cr_assert_eq(out[0].ncontrib, 2);
	cr_assert_eq(out[0].contrib[0].worker, 0);
	cr_assert_eq(out[0].contrib[1].worker, 3);
	cr_assert_eq(released(out, n, 7), 0x9);
	kn__sync_rule_destroy(r);
}

Test(cgp_rule, bad_plans_and_pushes_are_refused)
{
	struct kn__sync_params p = params(4);
	struct kn__sync_rule *r = make_rule(&p);
	struct kn__sync_action out[MAXACT];
	const uint32_t mixed[4] = { G(0, 3), G(0, 2), G(1, 1), G(1, 1) };
	const uint32_t zero[4] = { G(0, 0), G(0, 3), G(1, 1), G(1, 1) };

	cr_assert_eq(plan(r, 2, plan4, out), -EINVAL); /* not the next */
	cr_assert_eq(plan(r, 0, plan4, out), -EINVAL); /* a replay */
	cr_assert_eq(plan(r, 1, mixed, out), -EINVAL); /* two counts */
	cr_assert_eq(plan(r, 1, zero, out), -EINVAL);  /* no rounds */
	warm_up(r, out);
	cr_assert_eq(plan(r, 1, plan4, out), 4);
	cr_assert_eq(plan(r, 1, plan4, out), -EINVAL); /* in force */
	cr_assert_eq(push(r, 0, 2, out), 0);
	cr_assert_eq(push(r, 0, 2, out), -EINVAL); /* twice a round */
	cr_assert_eq(push(r, 3, 1, out), -EINVAL); /* not its version */
	/* a planner event is not a chunk rule's */
	cr_assert_eq(kn__sync_rule_event(r,
					 &(struct kn__sync_event){
						 .type = KN__SYNC_EV_BARRIER },
					 out),
		     -EINVAL);
	kn__sync_rule_destroy(r);
}

Test(cgp_rule, leaves_complete_or_close_a_group)
{
	struct kn__sync_params p = params(4);
	struct kn__sync_rule *r = make_rule(&p);
	struct kn__sync_action out[MAXACT];
	struct kn__sync_event leave = { .type = KN__SYNC_EV_LEAVE };
	int n;

	warm_up(r, out);
	cr_assert_eq(plan(r, 1, plan4, out), 4);
	cr_assert_eq(push(r, 0, 2, out), 0);
	cr_assert_eq(push(r, 1, 2, out), 0);
	/* worker 2 dies: the round is complete without it */
	leave.worker = 2;
	n = kn__sync_rule_event(r, &leave, out);
	cr_assert_eq(out[0].type, KN__SYNC_ACT_APPLY);
	cr_assert_eq(out[0].ncontrib, 2);
	/* n = 3 members now */
	cr_assert_float_eq(out[0].contrib[0].weight, 1.0f / 3, 1e-7);
	cr_assert_eq(released(out, n, 3), 0x3);
	/* worker 3, all of group 1, dies: that group is done */
	leave.worker = 3;
	cr_assert_eq(kn__sync_rule_event(r, &leave, out), 0);
	for (uint64_t v = 3; v < 5; v++) {
		cr_assert_eq(push(r, 0, v, out), 0);
		n = push(r, 1, v, out);
	}
	cr_assert_eq(n, 2);
	cr_assert(has(out, n, KN__SYNC_ACT_BARRIER));
	kn__sync_rule_destroy(r);
}

Test(cgp_rule, a_joiner_waits_for_a_plan_that_names_it)
{
	struct kn__sync_params p = params(4);
	struct kn__sync_rule *r;
	struct kn__sync_action out[MAXACT];
	struct kn__sync_event join = { .type = KN__SYNC_EV_JOIN, .worker = 3 };
	const uint32_t without[4] = { G(0, 1), G(0, 1), G(0, 1), 0 };
	const uint32_t with[4] = { G(0, 1), G(0, 1), G(0, 1), G(1, 1) };
	int n;

	p.members = 3;
	r = make_rule(&p);
	/* in the warm-up it joins the round, as under BSP */
	cr_assert_eq(kn__sync_rule_event(r, &join, out), 1);
	cr_assert_eq(released(out, 1, 0), 0x8);
	kn__sync_rule_event(r,
			    &(struct kn__sync_event){ .type = KN__SYNC_EV_LEAVE,
						      .worker = 3 },
			    out);
	for (uint64_t v = 0; v < 2; v++) {
		for (uint32_t w = 0; w < 3; w++)
			n = push(r, w, v, out);
	}
	cr_assert(has(out, n, KN__SYNC_ACT_BARRIER));
	/* after the warm-up: held, even by a plan that does not name it */
	cr_assert_eq(kn__sync_rule_event(r, &join, out), 0);
	n = plan(r, 1, without, out);
	cr_assert_eq(released(out, n, 2), 0x7);
	for (uint32_t w = 0; w < 3; w++)
		n = push(r, w, 2, out);
	cr_assert(has(out, n, KN__SYNC_ACT_BARRIER));
	n = plan(r, 2, with, out);
	cr_assert_eq(released(out, n, 3), 0xf);
	kn__sync_rule_destroy(r);
}

/* --- the planner -------------------------------------------------------- */

static struct kn__sync_planner *make_planner(const struct kn__sync_params *p)
{
	struct kn__sync_planner *pl;

	cr_assert_eq(kn__sync_planner_create(p, &pl), 0);
	return pl;
}

static void timings(struct kn__sync_planner *pl, const double *t, uint32_t n)
{
	struct kn__sync_action out[MAXACT];

	for (uint32_t w = 0; w < n; w++) {
		struct kn__sync_event ev = { .type = KN__SYNC_EV_TIMING,
					     .worker = w,
					     .value = t[w] };

		cr_assert_eq(kn__sync_planner_event(pl, &ev, out), 0);
	}
}

static int barrier_ev(struct kn__sync_planner *pl, uint64_t epoch,
		      struct kn__sync_action *out)
{
	struct kn__sync_event ev = { .type = KN__SYNC_EV_BARRIER,
				     .epoch = epoch };

	return kn__sync_planner_event(pl, &ev, out);
}

/* The timings @t of workers 0..@n-1, then the barrier of @epoch: one
 * plan, in out[0]. */
static void plan_after(struct kn__sync_planner *pl, const double *t, uint32_t n,
		       uint64_t epoch, struct kn__sync_action *out)
{
	timings(pl, t, n);
	cr_assert_eq(barrier_ev(pl, epoch, out), 1);
}

/*
 * @steps rounds of the timings @t of workers 0..@n-1, then the barrier
 * of @epoch: one plan, in out[0].  The planner's distributions hold each
 * worker's last 128 timings, and only those since its last change of
 * speed (a shift of its epoch's mean).
 */
static void plan_after_steps(struct kn__sync_planner *pl, const double *t,
			     uint32_t n, int steps, uint64_t epoch,
			     struct kn__sync_action *out)
{
	for (int step = 0; step < steps; step++)
		timings(pl, t, n);
	cr_assert_eq(barrier_ev(pl, epoch, out), 1);
}

/* Worker @a and @b are in the same group of @out's plan. */
static bool together(const struct kn__sync_action *out, uint32_t a, uint32_t b)
{
	return KN__SYNC_CGP_GROUP(out->plan[a]) ==
	       KN__SYNC_CGP_GROUP(out->plan[b]);
}

/* The number of groups of @out's plan of @n members. */
static uint32_t ngroups(const struct kn__sync_action *out, uint32_t n)
{
	uint32_t k = 0;

	for (uint32_t w = 0; w < n; w++) {
		uint32_t v = 0;

		while (v < w && !together(out, v, w))
			v++;
		k += v == w; /* the first of its group */
	}
	return k;
}

Test(cgp_planner, a_persistent_straggler_pair_gets_its_own_group)
{
	struct kn__sync_params p = params(8);
	struct kn__sync_planner *pl;
	struct kn__sync_action out[MAXACT];
	/* persistent:0.25:4 - workers 2 and 5 are 4x slower */
	const double t[8] = { .020, .021, .080, .020, .022, .081, .020, .021 };

	p.epoch_rounds = 20;
	pl = make_planner(&p);
	plan_after(pl, t, 8, 0, out);
	cr_assert_eq(out[0].type, KN__SYNC_ACT_REGROUP);
	cr_assert_eq(out[0].epoch, 1);
	cr_assert(out[0].regrouped);
	cr_assert_eq(out[0].why, KN__SYNC_REGROUP_GAIN);
	/* 2.84x BSP's throughput (280.76 / 98.77): far above 5% */
	cr_assert_gt(out[0].gain, 1.0f);
	cr_assert(together(&out[0], 2, 5));
	/*
	 * The pair alone misses V = 81/21 + 81/22 = 7.5 versions a round,
	 * m = 5/8 x 81/21 + 1/8 x 81/22 = 2.87 rounds of n, damped 1/m:
	 * tau = 2.63 <= 4.  Within the fast six, worker 4 (22 ms) alone costs
	 * it m = 5/8 x 22/21 + 2/8 x 22/81 = 0.72 (undamped, a price of
	 * 1 / 1.09) but rounds of 21 ms, not 22 ms, for the other five: the
	 * model's optimum by 1.3% (Lambda 280.76 against 277.08 for
	 * {fast six} {pair}, 98.8 for BSP).
	 */
	for (uint32_t w = 0; w < 8; w++) {
		if (w == 2 || w == 5)
			continue;
		cr_assert(!together(&out[0], w, 2), "worker %u", w);
		cr_assert(w == 4 || together(&out[0], w, 0), "worker %u", w);
		/* the fastest run 20 rounds, worker 4 round(20 x 21/22) */
		cr_assert_eq(KN__SYNC_CGP_ROUNDS(out[0].plan[w]),
			     w == 4 ? 19 : 20, "worker %u", w);
	}
	cr_assert(!together(&out[0], 4, 0));
	/* the slow pair round(20 x 21/81) = 5 */
	cr_assert_eq(KN__SYNC_CGP_ROUNDS(out[0].plan[2]), 5);
	/* a second barrier of epoch 0 (another chunk) plans nothing */
	cr_assert_eq(barrier_ev(pl, 0, out), 0);
	cr_assert_eq(barrier_ev(pl, 5, out), -EINVAL);
	/* the same speeds: the same groups, not a regroup */
	plan_after(pl, t, 8, 1, out);
	cr_assert(!out[0].regrouped);
	cr_assert(together(&out[0], 2, 5));
	cr_assert(!together(&out[0], 0, 2));
	kn__sync_planner_destroy(pl);
}

Test(cgp_planner, equal_workers_stay_one_group)
{
	struct kn__sync_params p = params(8);
	struct kn__sync_planner *pl = make_planner(&p);
	struct kn__sync_action out[MAXACT];
	const double t[8] = { .02, .02, .02, .02, .02, .02, .02, .02 };

	plan_after(pl, t, 8, 0, out);
	cr_assert(!out[0].regrouped);
	for (uint32_t w = 0; w < 8; w++) {
		cr_assert_eq(KN__SYNC_CGP_GROUP(out[0].plan[w]), 0);
		cr_assert_eq(KN__SYNC_CGP_ROUNDS(out[0].plan[w]), 4);
	}
	kn__sync_planner_destroy(pl);
}

Test(cgp_planner, a_tiny_bound_keeps_bsp_and_one_worker_is_one_group)
{
	struct kn__sync_params p = params(8);
	struct kn__sync_planner *pl;
	struct kn__sync_action out[MAXACT];
	const double t[8] = { .02, .02, .02, .02, .02, .02, .08, .08 };

	p.bound = 0.01f; /* any split has tau_max >= min(V, 1) = 1 */
	pl = make_planner(&p);
	plan_after(pl, t, 8, 0, out);
	for (uint32_t w = 0; w < 8; w++)
		cr_assert_eq(KN__SYNC_CGP_GROUP(out[0].plan[w]), 0);
	kn__sync_planner_destroy(pl);

	p = params(1);
	pl = make_planner(&p);
	plan_after(pl, t, 1, 0, out);
	cr_assert_eq(out[0].plan[0], KN__SYNC_CGP_PLAN(0, 4));
	kn__sync_planner_destroy(pl);
}

Test(cgp_planner, drift_and_membership_changes_regroup)
{
	struct kn__sync_params p = params(8);
	struct kn__sync_planner *pl;
	struct kn__sync_action out[MAXACT];
	double t[8] = { .02, .02, .02, .02, .02, .02, .08, .08 };
	struct kn__sync_event ev = { .type = KN__SYNC_EV_LEAVE, .worker = 7 };

	p.alpha = 1; /* the newest timing is the prediction */
	pl = make_planner(&p);
	plan_after(pl, t, 8, 0, out);
	cr_assert(together(&out[0], 6, 7));
	cr_assert(!together(&out[0], 0, 6));
	/* worker 6 is fast now (an episode ended): back with the others;
	 * its slow timing is dropped at the shift */
	t[6] = .02;
	plan_after_steps(pl, t, 8, 32, 1, out);
	cr_assert(out[0].regrouped);
	cr_assert(together(&out[0], 0, 6));
	cr_assert(!together(&out[0], 0, 7));
	/* worker 7 leaves: the rest is one group already, 7 not planned */
	cr_assert_eq(kn__sync_planner_event(pl, &ev, out), 0);
	cr_assert_eq(barrier_ev(pl, 2, out), 1);
	cr_assert(!out[0].regrouped);
	cr_assert_eq(out[0].plan[7], 0);
	for (uint32_t w = 0; w < 7; w++)
		cr_assert(together(&out[0], 0, w));
	/* it comes back: without a timing it counts as slow as the slowest
	 * (all equal), and it needs a group: a regroup, whatever the gain */
	ev.type = KN__SYNC_EV_JOIN;
	cr_assert_eq(kn__sync_planner_event(pl, &ev, out), 0);
	cr_assert_eq(barrier_ev(pl, 3, out), 1);
	cr_assert(out[0].regrouped);
	cr_assert_eq(out[0].why, KN__SYNC_REGROUP_JOIN);
	cr_assert_neq(out[0].plan[7], 0);
	/* a slow joiner, once timed, goes to a group of its own */
	t[7] = .08;
	plan_after(pl, t, 8, 4, out);
	cr_assert(out[0].regrouped);
	cr_assert(!together(&out[0], 0, 7));
	kn__sync_planner_destroy(pl);
}

/*
 * A worker slow for 64 steps, then fast for 40: the epoch's mean is far
 * outside the older timings' spread, so the planner drops them and the
 * worker is as fast as the others.  Kept, they would make it slow in
 * 64 of its 104 samples, an expected step of .02 + .06 x 64/104 = .057.
 */
Test(cgp_planner, a_change_of_speed_drops_the_older_timings)
{
	struct kn__sync_params p = params(8);
	struct kn__sync_planner *pl;
	struct kn__sync_action out[MAXACT];
	double t[8] = { .02, .02, .02, .02, .02, .02, .08, .02 };

	pl = make_planner(&p);
	plan_after_steps(pl, t, 8, 64, 0, out);
	cr_assert(out[0].regrouped);
	cr_assert(!together(&out[0], 0, 6));
	/* equal now: merging it would gain only the staleness price of
	 * a group of one (1 - 1 / (1 + 0.125 x 7/8) of its share, 2.7% in
	 * all), below the 5% a regroup needs, so it keeps its group; but its
	 * group's rounds are the others' (4), not 4 x .02 / .057 = 1 */
	t[6] = .02;
	plan_after_steps(pl, t, 8, 40, 1, out);
	cr_assert(!out[0].regrouped);
	for (uint32_t w = 0; w < 8; w++)
		cr_assert_eq(KN__SYNC_CGP_ROUNDS(out[0].plan[w]), 4);
	kn__sync_planner_destroy(pl);
}

Test(cgp_planner, groups_that_break_the_bound_are_replaced_whatever_the_gain)
{
	struct kn__sync_params p = params(8);
	struct kn__sync_planner *pl;
	struct kn__sync_action out[MAXACT];
	double t[8] = { .02, .02, .02, .02, .02, .02, .024, .024 };

	/*
	 * A slow pair beside six fast misses V = T_slow / T_fast versions
	 * a round, m = 6/8 V in rounds of n, damped by 1 / max(1, m): tau =
	 * V up to V = 4/3, then 4/3 (so the default S = 4 never breaks).  At
	 * 1.2x the pair apart has tau = 1.2 <= S = 1.25 and Lambda 367.3
	 * against BSP's 8 / .024 = 333.3: a 10% gain.
	 */
	p.alpha = 1;
	p.bound = 1.25f;
	pl = make_planner(&p);
	plan_after_steps(pl, t, 8, 32, 0, out);
	cr_assert(out[0].regrouped);
	cr_assert(!together(&out[0], 0, 6));
	cr_assert(together(&out[0], 6, 7));
	/* the pair is 1.5x slower now: tau_max = 4/3 > S.  The best the
	 * bound allows is BSP, 8 / .03 = 266.7, below the 345.8 of the
	 * groups in force: replaced all the same */
	t[6] = t[7] = .03;
	plan_after_steps(pl, t, 8, 32, 1, out);
	cr_assert(out[0].regrouped);
	cr_assert_eq(out[0].why, KN__SYNC_REGROUP_BOUND);
	cr_assert_lt(out[0].gain, 0);
	for (uint32_t w = 0; w < 8; w++)
		cr_assert(together(&out[0], 0, w), "worker %u", w);
	kn__sync_planner_destroy(pl);
}

/*
 * One worker far slower than all the others: alone in its group it
 * misses T_slow / T_fast versions a round, 8 (or 6) > S = 4, and a model
 * that did not count the damping refused every split: the planner stayed
 * at BSP and the fast workers waited for the straggler.  Damped by the
 * chunk rule (1 / max(1, m), m = (n - 1) / n x 8 = 7 for 8x of 8), its
 * tau is V / m = n / (n - 1), within the bound, and the first plan after
 * the warm-up sets it apart.
 */
static void lone_straggler(uint32_t n, uint32_t slow, double factor)
{
	struct kn__sync_params p = params(n);
	struct kn__sync_planner *pl;
	struct kn__sync_action out[2 + 16];
	double t[16];

	for (uint32_t w = 0; w < n; w++)
		t[w] = w == slow ? .02 * factor : .02 * (1 + 0.01 * (w % 3));
	p.epoch_rounds = 20;
	pl = make_planner(&p);
	/* the warm-up's timings, one per round */
	for (int round = 0; round < 2; round++)
		timings(pl, t, n);
	cr_assert_eq(barrier_ev(pl, 0, out), 1);
	cr_assert_eq(out[0].type, KN__SYNC_ACT_REGROUP);
	cr_assert_eq(out[0].epoch, 1);
	cr_assert(out[0].regrouped);
	cr_assert_eq(out[0].why, KN__SYNC_REGROUP_GAIN);
	cr_assert_gt(out[0].gain, 2.0f);
	for (uint32_t w = 0; w < n; w++) {
		if (w == slow)
			continue;
		cr_assert(!together(&out[0], w, slow), "worker %u", w);
		cr_assert(together(&out[0], w, slow ? 0 : 1), "worker %u", w);
		cr_assert_eq(KN__SYNC_CGP_ROUNDS(out[0].plan[w]), 20);
	}
	/* round(20 x 0.0204 / 0.16) = round(2.55), round(20 x 0.0204 / 0.12) */
	cr_assert_eq(KN__SYNC_CGP_ROUNDS(out[0].plan[slow]), 3);
	/* the same speeds: kept */
	plan_after(pl, t, n, 1, out);
	cr_assert(!out[0].regrouped);
	cr_assert(!together(&out[0], 0 == slow ? 1 : 0, slow));
	kn__sync_planner_destroy(pl);
}

Test(cgp_planner, a_lone_straggler_8x_of_8_gets_its_own_group)
{
	lone_straggler(8, 5, 8);
}

Test(cgp_planner, a_lone_straggler_6x_of_16_gets_its_own_group)
{
	lone_straggler(16, 11, 6);
}

Test(cgp_planner, equal_workers_with_a_sync_cost_stay_one_group)
{
	/*
	 * A 200 kB model at 1 GB/s: C_sync(8) = 1.6 ms beside 20 ms steps.
	 * Smaller groups have shorter rounds, and equal groups are less
	 * than a round of n stale (undamped), but each contribution of k
	 * equal groups is worth 1 / (1 + (k - 1) / 8k): BSP, 8 / .0216 =
	 * 370.4, beats two halves' 8 / .0208 / 1.0625 = 362.0 and four
	 * pairs' 8 / .0204 / 1.094 = 358.5.  (At 1 MB, C_sync(8) = 8 ms,
	 * four pairs win by 16%: splitting pays above about 13%.)
	 */
	struct kn__sync_params p = params(8);
	struct kn__sync_planner *pl;
	struct kn__sync_action out[MAXACT];
	const double t[8] = { .02, .02, .02, .02, .02, .02, .02, .02 };

	p.bytes = 200000;
	p.bandwidth = 1e9f;
	pl = make_planner(&p);
	plan_after(pl, t, 8, 0, out);
	cr_assert(!out[0].regrouped);
	for (uint32_t w = 0; w < 8; w++)
		cr_assert_eq(KN__SYNC_CGP_GROUP(out[0].plan[w]), 0);
	kn__sync_planner_destroy(pl);
}

/*
 * Eight workers of the same mean step, 1.15 s, through a warm-up of 20
 * rounds.  In one job each takes 4 s at one step, at its own step (2w +
 * 1 for worker w), and 1 s at the others; in the other every step takes
 * 1.15 s.  A planner that looked at the means alone saw the same job
 * twice.  But a group waits for its slowest member at every round: all
 * 8 together see one of the 4 s steps in 1 - 0.95^8 = 34% of rounds
 * (E[max] = 2.01 s) where a pair sees one in 10% (1.29 s).  With
 * C_sync(m) = 0.1 + 0.01 m the first job's BSP makes 8 / 2.19 = 3.65
 * samples (of b) a second and four pairs 8 / 1.41 / (1 + 0.125 x 3/4) =
 * 5.18 (test_cgpp.c, fluctuating_workers_split_steady_workers_stay_one_
 * group): a regroup.  The steady job's BSP, 8 / 1.33 = 6.02, is the best.
 */
static struct kn__sync_planner *fluctuating_job(bool steady,
						struct kn__sync_action *out)
{
	struct kn__sync_params p = params(8);
	struct kn__sync_planner *pl;

	p.warmup = 20;
	p.latency = 0.1f;
	p.bytes = 10000000;
	p.bandwidth = 1e9f;
	p.bound = 4;
	pl = make_planner(&p);
	for (uint32_t step = 0; step < 20; step++) {
		double t[8];

		for (uint32_t w = 0; w < 8; w++)
			t[w] = steady ? 1.15 : step == 2 * w + 1 ? 4.0 : 1.0;
		timings(pl, t, 8);
	}
	cr_assert_eq(barrier_ev(pl, 0, out), 1);
	cr_assert_eq(out[0].type, KN__SYNC_ACT_REGROUP);
	cr_assert_eq(out[0].epoch, 1);
	return pl; /* out's plan is the planner's */
}

Test(cgp_planner, fluctuating_workers_split_steady_workers_stay_one_group)
{
	struct kn__sync_action out[MAXACT];
	struct kn__sync_planner *pl = fluctuating_job(false, out);

	cr_assert(out[0].regrouped);
	cr_assert_eq(out[0].why, KN__SYNC_REGROUP_GAIN);
	cr_assert_gt(ngroups(&out[0], 8), 1);
	/* 5.18 / 3.65 - 1 = 0.42 by the model */
	cr_assert_gt(out[0].gain, 0.3f);
	/* the model's optimum: four pairs (ASP, tau = 7, breaks S = 4) */
	cr_assert_eq(ngroups(&out[0], 8), 4);
	kn__sync_planner_destroy(pl);

	pl = fluctuating_job(true, out);
	cr_assert(!out[0].regrouped);
	cr_assert_eq(ngroups(&out[0], 8), 1);
	for (uint32_t w = 0; w < 8; w++)
		cr_assert_eq(KN__SYNC_CGP_GROUP(out[0].plan[w]), 0);
	kn__sync_planner_destroy(pl);
}

/*
 * One late step (a scheduler hiccup) among an epoch's timings moves the
 * prediction by its share of the epoch's mean, not by alpha of itself:
 * the worker stays with the fast ones.
 */
Test(cgp_planner, one_late_step_does_not_move_a_worker)
{
	struct kn__sync_params p = params(8);
	struct kn__sync_planner *pl = make_planner(&p);
	struct kn__sync_action out[MAXACT];
	const double t[8] = { .02, .02, .02, .02, .02, .02, .08, .08 };

	plan_after(pl, t, 8, 0, out);
	cr_assert(!together(&out[0], 0, 6));
	for (int step = 0; step < 19; step++)
		timings(pl, t, 8);
	/* worker 0's 20th step of the epoch takes 4x as long */
	cr_assert_eq(kn__sync_planner_event(pl,
					    &(struct kn__sync_event){
						    .type = KN__SYNC_EV_TIMING,
						    .worker = 0,
						    .value = .08 },
					    out),
		     0);
	cr_assert_eq(barrier_ev(pl, 1, out), 1);
	cr_assert(together(&out[0], 0, 1));
	cr_assert(!together(&out[0], 0, 6));
	kn__sync_planner_destroy(pl);
}

Test(cgp_planner, with_nobody_left_the_next_join_gets_the_plan)
{
	struct kn__sync_params p = params(1);
	struct kn__sync_planner *pl = make_planner(&p);
	struct kn__sync_action out[MAXACT];
	struct kn__sync_event ev = { .type = KN__SYNC_EV_LEAVE };

	cr_assert_eq(kn__sync_planner_event(pl, &ev, out), 0);
	cr_assert_eq(barrier_ev(pl, 0, out), 0);
	ev.type = KN__SYNC_EV_JOIN;
	cr_assert_eq(kn__sync_planner_event(pl, &ev, out), 1);
	cr_assert_eq(out[0].epoch, 1);
	cr_assert_neq(out[0].plan[0], 0);
	kn__sync_planner_destroy(pl);
}

Test(cgp_planner, pls_is_used_above_the_auto_limit_or_when_asked)
{
	struct kn__sync_params p = params(8);
	struct kn__sync_planner *pl;
	struct kn__sync_action out[MAXACT];
	const double t[8] = { .02, .021, .08, .02, .022, .081, .02, .021 };

	p.solver = KN__SYNC_CGP_PLS;
	p.period = 1; /* a look at every barrier: the archive re-scored */
	pl = make_planner(&p);
	for (uint64_t e = 0; e < 3; e++) {
		plan_after(pl, t, 8, e, out);
		cr_assert(together(&out[0], 2, 5));
		cr_assert(!together(&out[0], 0, 2));
	}
	kn__sync_planner_destroy(pl);
}

/* --- two servers agree ---------------------------------------------------- */

/*
 * A tiny job of two chunk rules (two servers) and the planner.  A worker
 * pushes to both once both released it; each rule gets each push and
 * each plan at its own random moment.
 */
struct job {
	struct kn__sync_rule *r[2];
	struct kn__sync_planner *pl;
	uint64_t version[2][MAXW]; /* released with, per rule */
	bool released[2][MAXW];	   /* a release from that rule is in */
	bool pending[2][MAXW];	   /* a push on its way to that rule */
	uint64_t clock[MAXW];
	uint32_t plans;		 /* plans made */
	uint32_t copy[32][MAXW]; /* each one's entries */
	uint32_t delivered[2];	 /* plans each rule has had */
	/* each rule's applies as epoch << 32 | contributors (a bit set) */
	uint64_t apply[2][4096];
	uint32_t napplies[2];
};

/* @epoch: the rule's before the call (an apply is of that epoch) */
static void act(struct job *j, int s, uint64_t epoch,
		const struct kn__sync_action *out, int n)
{
	cr_assert_geq(n, 0);
	for (int i = 0; i < n; i++) {
		const struct kn__sync_action *a = &out[i];

		if (a->type == KN__SYNC_ACT_APPLY) {
			uint64_t set = 0;
			uint32_t k = j->napplies[s]++;

			cr_assert_lt(k, 4096);
			for (uint32_t c = 0; c < a->ncontrib; c++)
				set |= 1u << a->contrib[c].worker;
			j->apply[s][k] = epoch << 32 | set;
		} else if (a->type == KN__SYNC_ACT_RELEASE) {
			j->version[s][a->worker] = a->version;
			j->released[s][a->worker] = true;
		} else if (a->type == KN__SYNC_ACT_BARRIER && j->plans < 32) {
			struct kn__sync_action po[MAXACT];
			struct kn__sync_event ev = {
				.type = KN__SYNC_EV_BARRIER,
				.epoch = a->epoch,
			};
			int m = kn__sync_planner_event(j->pl, &ev, po);

			cr_assert_geq(m, 0);
			if (m == 1)
				memcpy(j->copy[j->plans++], po[0].plan,
				       sizeof(j->copy[0]));
		}
	}
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

Test(cgp_rule, two_rules_fed_in_different_orders_agree)
{
	struct kn__sync_params p = params(MAXW);
	struct kn__sync_action out[MAXACT];
	const double t[MAXW] = { 1, 1, 1, 1.1, 1, 1, 4, 4.2 };
	struct job *j = calloc(1, sizeof(*j));
	unsigned int seed = 7;
	uint32_t n;

	p.epoch_rounds = 5;
	p.solver = KN__SYNC_CGP_AGA;
	for (int s = 0; s < 2; s++)
		j->r[s] = make_rule(&p);
	j->pl = make_planner(&p);
	timings(j->pl, t, MAXW);
	for (int s = 0; s < 2; s++)
		for (uint32_t w = 0; w < MAXW; w++)
			j->released[s][w] = true; /* version 0, to start */
	for (int step = 0;
	     step < 200000 && j->delivered[1] < 32 && j->delivered[0] < 32;
	     step++) {
		uint32_t w = (uint32_t)rand_r(&seed) % MAXW;
		int s = rand_r(&seed) & 1;
		struct kn__sync_event ev = { .type = KN__SYNC_EV_PUSH,
					     .worker = w };

		if (j->delivered[s] < j->plans && rand_r(&seed) % 4 == 0) {
			uint32_t e = j->delivered[s]++;

			uint64_t before = j->r[s]->epoch;

			act(j, s, before, out,
			    plan(j->r[s], e + 1, j->copy[e], out));
			continue;
		}
		if (j->pending[s][w]) {
			uint64_t before = j->r[s]->epoch;

			j->pending[s][w] = false;
			ev.slot = (uint32_t)(j->clock[w] & 1);
			ev.clock = j->clock[w];
			ev.version = j->version[s][w];
			act(j, s, before, out,
			    kn__sync_rule_event(j->r[s], &ev, out));
		} else if (j->released[0][w] && j->released[1][w] &&
			   !j->pending[1 - s][w]) {
			j->released[0][w] = j->released[1][w] = false;
			j->pending[0][w] = j->pending[1][w] = true;
			j->clock[w]++;
		}
	}
	cr_assert_geq(j->delivered[0], 16, "only %u plans", j->delivered[0]);
	/*
	 * The rules ran the same epochs with the same groups: the same
	 * applies, each with the same contributors in the same epoch, in
	 * orders that may differ between groups.  (The staleness damping is
	 * each rule's own count, as every staleness is a server's.)
	 */
	n = j->napplies[0] < j->napplies[1] ? j->napplies[0] : j->napplies[1];
	cr_assert_gt(n, 100);
	/* compare whole epochs: those both rules finished */
	{
		uint64_t last =
			(j->r[0]->epoch < j->r[1]->epoch ? j->r[0]->epoch
							 : j->r[1]->epoch);
		uint32_t m[2] = { 0, 0 };

		for (int s = 0; s < 2; s++) {
			qsort(j->apply[s], j->napplies[s], sizeof(uint64_t),
			      cmp_u64);
			while (m[s] < j->napplies[s] &&
			       j->apply[s][m[s]] >> 32 < last)
				m[s]++;
		}
		cr_assert_eq(m[0], m[1]);
		for (uint32_t k = 0; k < m[0]; k++)
			cr_assert_eq(j->apply[0][k], j->apply[1][k],
				     "apply %u: %#llx vs %#llx", k,
				     (unsigned long long)j->apply[0][k],
				     (unsigned long long)j->apply[1][k]);
	}
	for (int s = 0; s < 2; s++)
		kn__sync_rule_destroy(j->r[s]);
	kn__sync_planner_destroy(j->pl);
	free(j);
}
