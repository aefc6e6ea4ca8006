/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_predicted.c - PSP, `predicted` (docs/protocols.md): the ZipLine
 * search on hand-computed cases and against an exhaustive search; the
 * chunk rule (BSP while warming up, a plan in force only from the next
 * completion, weights 1/n whatever the steps, joins and leaves); the
 * planner (EMA predictions restarted by a miss, the first plan at barrier
 * `warmup`, re-plans at the barrier of a miss or after a membership
 * change only); the worker rule (k_i steps, training
 * while waiting, the merge of those steps); and the three machines run
 * together for a few rounds.  It includes sync_priv.h to call ZipLine
 * directly and to see that a refused event changed nothing.
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "sync_priv.h"
#include "sync_test.h"

/* --- ZipLine: hand-computed cases ---------------------------------------- */

static void assert_zipline(const double *t, uint32_t n, uint32_t R,
			   const uint32_t *expect)
{
	uint32_t k[MAXW];

	cr_assert_eq(kn__sync_zipline(t, n, R, k), 0);
	for (uint32_t i = 0; i < n; i++)
		cr_assert_eq(k[i], expect[i], "t[%u] = %g, R %u: k %u, not %u",
			     i, t[i], R, k[i], expect[i]);
}

Test(predicted, zipline_equal_times_give_one_step_each)
{
	/* every window [j t, j t] has width 0; the lowest is [t, t] */
	const double t[] = { 0.3, 0.3, 0.3, 0.3, 0.3 };
	const uint32_t one[] = { 1, 1, 1, 1, 1 };

	for (uint32_t R = 1; R <= 15; R++)
		assert_zipline(t, 5, R, one);
	/* one worker: [t, t] as well */
	assert_zipline((const double[]){ 7 }, 1, 15, one);
}

Test(predicted, zipline_hand_computed_cases)
{
	/* {1, 2}: width 0 first at [2, 2] (2 x 1, 1 x 2) */
	assert_zipline((const double[]){ 1, 2 }, 2, 15,
		       (const uint32_t[]){ 2, 1 });
	/* {1, 1.5}: 1.5 matches no integer, 3 = 3 x 1 = 2 x 1.5 */
	assert_zipline((const double[]){ 1, 1.5 }, 2, 15,
		       (const uint32_t[]){ 3, 2 });
	/* the order of the workers does not matter */
	assert_zipline((const double[]){ 1.5, 1 }, 2, 15,
		       (const uint32_t[]){ 2, 3 });
	/* {1, 4, 4}: [4, 4] */
	assert_zipline((const double[]){ 1, 4, 4 }, 3, 15,
		       (const uint32_t[]){ 4, 1, 1 });
	/*
	 * {1, 100}, R = 15: the fast one's candidates stop at 15, so the
	 * best window is [15, 100] (width 85); it does all 15 steps.
	 */
	assert_zipline((const double[]){ 1, 100 }, 2, 15,
		       (const uint32_t[]){ 15, 1 });
	/*
	 * {1, 2.5, 4}, R = 15: every candidate is a multiple of 0.5, and
	 * width 0 needs a common multiple of 2.5 and 4 (20) that worker 0
	 * reaches (it stops at 15): none.  Width 0.5 needs 2.5a and 4b
	 * within 0.5: 5 vs 4 is 1, 7.5 vs 8 is 0.5, so [7.5, 8] (which
	 * holds 8 = 8 x 1), not the window at the start [1, 4]: k = 8, 3
	 * (7.5 <= 8 < 10), 2.
	 */
	assert_zipline((const double[]){ 1, 2.5, 4 }, 3, 15,
		       (const uint32_t[]){ 8, 3, 2 });
	/* with R = 20 worker 0 reaches 20: width 0 beats the lower hi */
	assert_zipline((const double[]){ 1, 2.5, 4 }, 3, 20,
		       (const uint32_t[]){ 20, 8, 5 });
	/*
	 * {2, 3, 5}, R = 5: candidates are integers, no common value
	 * below 30, so width 1: [5, 6] (6, 6, 5) before [9, 10]; k = 3
	 * (2 x 3 = 6), 2, 1.  With R = 15, 30 = 15 x 2 = 10 x 3 = 6 x 5.
	 */
	assert_zipline((const double[]){ 2, 3, 5 }, 3, 5,
		       (const uint32_t[]){ 3, 2, 1 });
	assert_zipline((const double[]){ 2, 3, 5 }, 3, 15,
		       (const uint32_t[]){ 15, 10, 6 });
	/* R = 1: one step each, whatever the times */
	assert_zipline((const double[]){ 1, 2.5, 4 }, 3, 1,
		       (const uint32_t[]){ 1, 1, 1 });
}

Test(predicted, zipline_refuses_bad_input_and_leaves_k_alone)
{
	const double ok[] = { 1, 2 };
	const double bad[][2] = {
		{ 1, 0 },	 { -1, 1 },	 { NAN, 1 },
		{ 1, INFINITY }, { DBL_MAX, 1 },
	};
	uint32_t k[2] = { 77, 77 };

	cr_assert_eq(kn__sync_zipline(ok, 0, 15, k), -EINVAL);
	cr_assert_eq(kn__sync_zipline(ok, 2, 0, k), -EINVAL);
	cr_assert_eq(kn__sync_zipline(NULL, 2, 15, k), -EINVAL);
	cr_assert_eq(kn__sync_zipline(ok, 2, 15, NULL), -EINVAL);
	/* DBL_MAX is finite but 15 x DBL_MAX is not */
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_assert_eq(kn__sync_zipline(bad[i], 2, 15, k), -EINVAL,
			     "case %zu", i);
	cr_assert_eq(kn__sync_zipline(bad[4], 2, 1, k), 0);
	cr_assert_eq(k[0], 1);
	cr_assert_eq(k[1], 1, "1 x DBL_MAX is finite: one step each");
	k[0] = k[1] = 77;
	cr_assert_eq(kn__sync_zipline(bad[0], 2, 15, k), -EINVAL);
	cr_assert_eq(k[0], 77);
	cr_assert_eq(k[1], 77);
}

/* --- ZipLine against an exhaustive search --------------------------------- */

/*
 * Every step vector in 1..R^n: the window it spans, [min, max] of
 * k_i t_i, the smallest by (hi - lo, then hi) with the same doubles as
 * kn__sync_zipline, then the most steps of each worker that fit in it.
 */
static void zipline_brute(const double *t, uint32_t n, uint32_t R, uint32_t *k)
{
	uint32_t v[MAXW];
	double best_width = INFINITY, best_hi = INFINITY;

	for (uint32_t i = 0; i < n; i++)
		v[i] = 1;
	for (;;) {
		double lo = INFINITY, hi = -INFINITY;
		uint32_t i;

		for (i = 0; i < n; i++) {
			double c = (double)v[i] * t[i];

			lo = c < lo ? c : lo;
			hi = c > hi ? c : hi;
		}
		if (hi - lo < best_width ||
		    (hi - lo == best_width && hi < best_hi)) {
			best_width = hi - lo;
			best_hi = hi;
		}
		/* the next vector, as an odometer */
		for (i = 0; i < n && v[i] == R; i++)
			v[i] = 1;
		if (i == n)
			break;
		v[i]++;
	}
	for (uint32_t i = 0; i < n; i++) {
		k[i] = 0;
		for (uint32_t s = 1; s <= R; s++)
			if ((double)s * t[i] <= best_hi)
				k[i] = s;
	}
}

/* @cases random cases; @grid: times on a grid of 0.25, so ties abound. */
static void zipline_vs_brute(uint64_t seed, uint32_t cases, bool grid)
{
	uint32_t uneven = 0;

	rng_state = seed;
	for (uint32_t c = 0; c < cases; c++) {
		uint32_t n = 1 + rnd(5), R = 1 + rnd(6);
		uint32_t k[MAXW], want[MAXW];
		double t[MAXW];
		bool all_one = true;

		for (uint32_t i = 0; i < n; i++) {
			/* in (0.5, 5]: 53 random bits, or 0.75 .. 5 by 0.25 */
			double u = (double)(rnd64() >> 11) * 0x1p-53;

			t[i] = grid ? 0.5 + 0.25 * (1 + rnd(18)) : 5 - 4.5 * u;
		}
		zipline_brute(t, n, R, want);
		cr_assert_eq(kn__sync_zipline(t, n, R, k), 0);
		for (uint32_t i = 0; i < n; i++) {
			cr_assert_eq(k[i], want[i],
				     "case %u (n %u, R %u): k[%u] = %u, "
				     "brute force %u, t[%u] = %.17g",
				     c, n, R, i, k[i], want[i], i, t[i]);
			all_one = all_one && k[i] == 1;
		}
		uneven += !all_one;
	}
	/* the cases were not all the trivial answer */
	cr_assert_gt(uneven, cases / 4, "only %u of %u cases not all 1", uneven,
		     cases);
}

Test(predicted, zipline_matches_exhaustive_search_on_random_times)
{
	zipline_vs_brute(0x7a69704c696e65ULL, 2000, false);
}

Test(predicted, zipline_matches_exhaustive_search_on_tied_times)
{
	zipline_vs_brute(0x7469657321ULL, 2000, true);
}

/* --- the chunk rule ------------------------------------------------------ */

static int push_steps(struct kn__sync_rule *rule, uint32_t worker,
		      uint64_t clock, uint32_t steps,
		      struct kn__sync_action *out)
{
	struct kn__sync_event ev = {
		.type = KN__SYNC_EV_PUSH,
		.worker = worker,
		.slot = (uint32_t)(clock & 1),
		.clock = clock,
		.version = kn__sync_rule_version(rule),
		.steps = steps,
	};

	return kn__sync_rule_event(rule, &ev, out);
}

static int plan_event(struct kn__sync_rule *rule, uint64_t epoch,
		      const uint32_t *plan, struct kn__sync_action *out)
{
	struct kn__sync_event ev = {
		.type = KN__SYNC_EV_PLAN,
		.epoch = epoch,
		.plan = plan,
	};

	return kn__sync_rule_event(rule, &ev, out);
}

Test(predicted, name_and_max_actions)
{
	struct kn__sync_params p = { KN_SYNC_PSP, 100, 3 };

	cr_assert_str_eq(kn__sync_protocol_name(KN_SYNC_PSP), "predicted");
	cr_assert_eq(kn__sync_protocol_parse("predicted"), KN_SYNC_PSP);
	/* PSP, as the theses call it */
	cr_assert_eq(kn__sync_protocol_parse("psp"), KN_SYNC_PSP);
	cr_assert_eq(kn__sync_max_actions(&p), 101);
}

/*
 * Warm-up is BSP: fed the same events, a `predicted` rule without a
 * plan and a `bsp` rule answer the same actions, field by field.
 */
Test(predicted, warmup_rounds_are_exactly_bsp)
{
	struct kn__sync_rule *psp = rule_new(KN_SYNC_PSP, MAXW, 4);
	struct kn__sync_rule *bsp = rule_new(KN_SYNC_BSP, MAXW, 4);
	struct kn__sync_action a[MAXACT], b[MAXACT];
	const uint32_t all[] = { 0, 1, 2, 3 }, one[] = { 1, 1, 1, 1 };
	uint64_t clock[MAXW] = { 0 };
	int rounds = 0;

	rng_state = 0x7761726dULL;
	for (int e = 0; e < 3000; e++) {
		struct kn__sync_event ev = { .worker = rnd(MAXW) };
		int na, nb;

		switch (rnd(8)) {
		case 0:
			ev.type = KN__SYNC_EV_JOIN;
			clock[ev.worker] = 0;
			break;
		case 1:
			ev.type = KN__SYNC_EV_LEAVE;
			break;
		default:
			/* mostly a member still due (rule->w says who) */
			for (uint32_t d = 0; d < 4 * MAXW && rnd(8); d++) {
				if (psp->w[ev.worker].member &&
				    !psp->w[ev.worker].pushed)
					break;
				ev.worker = rnd(MAXW);
			}
			ev.type = KN__SYNC_EV_PUSH;
			ev.clock = clock[ev.worker]++;
			ev.slot = rnd(2);
			ev.version = kn__sync_rule_version(bsp);
			ev.steps = rnd(2); /* 0 counts as 1 */
			break;
		}
		na = kn__sync_rule_event(psp, &ev, a);
		nb = kn__sync_rule_event(bsp, &ev, b);
		cr_assert_eq(na, nb, "event %d", e);
		for (int i = 0; i < na; i++) {
			cr_assert_eq(a[i].type, b[i].type);
			cr_assert_eq(a[i].worker, b[i].worker);
			cr_assert_eq(a[i].version, b[i].version);
			cr_assert_eq(a[i].epoch, 0);
			cr_assert_eq(a[i].epoch, b[i].epoch);
			cr_assert_eq(a[i].steps, b[i].steps);
			cr_assert_eq(a[i].ncontrib, b[i].ncontrib);
			if (a[i].type != KN__SYNC_ACT_APPLY)
				continue;
			rounds++;
			cr_assert_eq(a[i].lr_scale, b[i].lr_scale);
			for (uint32_t c = 0; c < a[i].ncontrib; c++) {
				cr_assert_eq(a[i].contrib[c].worker,
					     b[i].contrib[c].worker);
				cr_assert_eq(a[i].contrib[c].slot,
					     b[i].contrib[c].slot);
				cr_assert_eq(a[i].contrib[c].weight,
					     b[i].contrib[c].weight);
			}
		}
	}
	cr_log_info("warm-up vs bsp: %d rounds", rounds);
	cr_assert_gt(rounds, 150, "only %d rounds", rounds);
	kn__sync_rule_destroy(psp);
	kn__sync_rule_destroy(bsp);

	/* and explicitly: 1/n, epoch 0, one step */
	psp = rule_new(KN_SYNC_PSP, MAXW, 4);
	cr_assert_eq(push_steps(psp, 3, 0, 0, a), 0);
	cr_assert_eq(push_steps(psp, 1, 0, 1, a), 0);
	cr_assert_eq(push_steps(psp, 0, 0, 0, a), 0);
	assert_round(a, push_steps(psp, 2, 0, 1, a), all, 4, 0, 0, one);
	cr_assert_eq(a[0].contrib[0].weight, 0.25f);
	kn__sync_rule_destroy(psp);
}

Test(predicted, a_plan_takes_effect_at_the_next_completion)
{
	struct kn__sync_rule *rule = rule_new(KN_SYNC_PSP, MAXW, 3);
	struct kn__sync_action out[MAXACT];
	const uint32_t plan1[MAXW] = { 3, 2, 1, 0, 6, 4 };
	const uint32_t plan2[MAXW] = { 1, 5, 2 };
	const uint32_t ws[] = { 0, 1, 2, 5 };
	const uint32_t held[] = { 3, 2, 1, 4 };
	const uint32_t ws2[] = { 0, 1, 2 }, k2[] = { 1, 5, 2 };

	/* round 0: two pushes, then the plan, then a joiner */
	cr_assert_eq(push_steps(rule, 0, 0, 1, out), 0);
	cr_assert_eq(push_steps(rule, 1, 0, 1, out), 0);
	cr_assert_eq(plan_event(rule, 1, plan1, out), 0);
	/* not in force yet: the joiner is released under no plan */
	cr_assert_eq(member_event(rule, KN__SYNC_EV_JOIN, 5, out), 1);
	assert_release_at(&out[0], 5, 0, 0, 1);
	cr_assert_eq(push_steps(rule, 2, 0, 1, out), 0, "waits for the joiner");
	/* the round completes with its pushes; its releases carry plan 1 */
	assert_round(out, push_steps(rule, 5, 0, 1, out), ws, 4, 0, 1, held);

	/* round 1 under plan 1; plan 2 arrives in the middle */
	cr_assert_eq(push_steps(rule, 0, 1, 3, out), 0);
	cr_assert_eq(push_steps(rule, 1, 1, 2, out), 0);
	cr_assert_eq(plan_event(rule, 2, plan2, out), 0);
	cr_assert_eq(push_steps(rule, 2, 1, 1, out), 0);
	/* a joiner now still gets plan 1, the plan in force */
	cr_assert_eq(member_event(rule, KN__SYNC_EV_JOIN, 4, out), 1);
	assert_release_at(&out[0], 4, 1, 1, 6);
	cr_assert_eq(member_event(rule, KN__SYNC_EV_LEAVE, 4, out), 0);
	/* 5's leave completes it: 3, 2 and 1 steps, 1/3 each; plan 2 */
	assert_round(out, member_event(rule, KN__SYNC_EV_LEAVE, 5, out), ws2, 3,
		     1, 2, k2);
	kn__sync_rule_destroy(rule);
}

Test(predicted, a_joiner_is_released_under_the_plan_in_force)
{
	struct kn__sync_rule *rule = rule_new(KN_SYNC_PSP, MAXW, 2);
	struct kn__sync_action out[MAXACT];
	/* R is 15: 100 is clamped, 0 (no step count) is one step */
	const uint32_t plan[MAXW] = { 100, 2, 0, 0, 5, 0 };
	const uint32_t ws[] = { 0, 1 }, k[] = { 15, 2 };

	cr_assert_eq(plan_event(rule, 7, plan, out), 0);
	cr_assert_eq(push_steps(rule, 0, 0, 1, out), 0);
	assert_round(out, push_steps(rule, 1, 0, 1, out), ws, 2, 0, 7, k);
	cr_assert_eq(member_event(rule, KN__SYNC_EV_JOIN, 4, out), 1);
	assert_release_at(&out[0], 4, 1, 7, 5);
	cr_assert_eq(member_event(rule, KN__SYNC_EV_JOIN, 5, out), 1);
	assert_release_at(&out[0], 5, 1, 7, 1);
	kn__sync_rule_destroy(rule);
}

/*
 * A push is a model delta that holds its local steps already: the
 * update is the plain mean of the deltas, 1/n each, however many steps
 * each holds (steps_i / n would count the fast workers' progress twice).
 */
Test(predicted, weights_are_one_over_n_whatever_the_steps)
{
	struct kn__sync_rule *rule = rule_new(KN_SYNC_PSP, MAXW, 4);
	struct kn__sync_action out[MAXACT];
	const uint32_t ws[] = { 0, 1, 2, 3 }, ones[] = { 1, 1, 1, 1 };

	/* {3, 0 (one), 2, 1} steps: 0.25 each */
	cr_assert_eq(push_steps(rule, 2, 0, 2, out), 0);
	cr_assert_eq(push_steps(rule, 0, 0, 3, out), 0);
	cr_assert_eq(push_steps(rule, 3, 0, 1, out), 0);
	assert_round(out, push_steps(rule, 1, 0, 0, out), ws, 4, 0, 0, ones);
	for (uint32_t c = 0; c < 4; c++)
		cr_assert_eq(out[0].contrib[c].weight, 0.25f);
	kn__sync_rule_destroy(rule);

	/* 2R = 30 is the most a push may hold; a refusal changes nothing */
	rule = rule_new(KN_SYNC_PSP, MAXW, 3);
	cr_assert_eq(push_steps(rule, 0, 0, 7, out), 0);
	cr_assert_eq(push_steps(rule, 1, 0, 31, out), -EINVAL);
	cr_assert_eq(push_steps(rule, 1, 0, UINT32_MAX, out), -EINVAL);
	cr_assert_eq(push_steps(rule, 1, 0, 30, out), 0,
		     "same clock: accepted");
	/* 7, 30 and 1 steps: 1/3 each, not 10 for the one of 30 */
	assert_round(out, push_steps(rule, 2, 0, 1, out), ws, 3, 0, 0, ones);
	cr_assert_eq(out[0].contrib[1].weight, 1.0f / 3.0f);
	kn__sync_rule_destroy(rule);
}

Test(predicted, a_stale_or_replayed_plan_is_refused)
{
	struct kn__sync_rule *rule = rule_new(KN_SYNC_PSP, MAXW, 2);
	struct kn__sync_action out[MAXACT];
	const uint32_t p2[MAXW] = { 2, 2 }, p4[MAXW] = { 4, 3 };
	const uint32_t ws[] = { 0, 1 };
	struct kn__sync_event ev = { .type = KN__SYNC_EV_PLAN, .epoch = 9 };

	cr_assert_eq(kn__sync_rule_event(rule, &ev, out), -EINVAL, "no plan");
	cr_assert_eq(plan_event(rule, 0, p2, out), -EINVAL, "epoch 0");
	cr_assert_eq(plan_event(rule, 2, p2, out), 0);
	cr_assert_eq(plan_event(rule, 2, p4, out), -EINVAL, "the one waiting");
	cr_assert_eq(plan_event(rule, 1, p4, out), -EINVAL, "older");
	/* a newer one replaces the waiting one */
	cr_assert_eq(plan_event(rule, 4, p4, out), 0);
	cr_assert_eq(push_steps(rule, 0, 0, 1, out), 0);
	assert_round(out, push_steps(rule, 1, 0, 1, out), ws, 2, 0, 4,
		     (uint32_t[]){ 4, 3 });
	/* in force now: not newer than 4 is refused */
	cr_assert_eq(plan_event(rule, 4, p2, out), -EINVAL);
	cr_assert_eq(plan_event(rule, 3, p2, out), -EINVAL);
	cr_assert_eq(push_steps(rule, 0, 1, 4, out), 0);
	assert_round(out, push_steps(rule, 1, 1, 3, out), ws, 2, 1, 4,
		     (uint32_t[]){ 4, 3 });
	cr_assert_eq(plan_event(rule, 5, p2, out), 0);
	kn__sync_rule_destroy(rule);
}

Test(predicted, a_leave_completes_the_round_under_the_new_plan)
{
	struct kn__sync_rule *rule = rule_new(KN_SYNC_PSP, MAXW, 4);
	struct kn__sync_action out[MAXACT];
	const uint32_t plan[MAXW] = { 6, 0, 3, 9 };
	const uint32_t ws[] = { 0, 2 }, k[] = { 6, 3 };

	cr_assert_eq(push_steps(rule, 0, 0, 2, out), 0);
	cr_assert_eq(push_steps(rule, 3, 0, 5, out), 0);
	cr_assert_eq(push_steps(rule, 2, 0, 1, out), 0);
	cr_assert_eq(plan_event(rule, 1, plan, out), 0);
	/* 3's push is dropped with it, then 1's leave completes the round */
	cr_assert_eq(member_event(rule, KN__SYNC_EV_LEAVE, 3, out), 0);
	assert_round(out, member_event(rule, KN__SYNC_EV_LEAVE, 1, out), ws, 2,
		     0, 1, k);
	/* 2 of 2 contributions, of 2 and 1 steps: 1/2 each */
	cr_assert_eq(out[0].contrib[0].weight, 0.5f);
	cr_assert_eq(out[0].contrib[1].weight, 0.5f);
	kn__sync_rule_destroy(rule);
}

/* --- the planner --------------------------------------------------------- */

static struct kn__sync_planner *planner_new(uint32_t members, uint32_t warmup)
{
	struct kn__sync_params p = { KN_SYNC_PSP, MAXW, members,
				     .warmup = warmup };
	struct kn__sync_planner *planner = NULL;

	cr_assert_eq(kn__sync_planner_create(&p, &planner), 0);
	return planner;
}

static int timing(struct kn__sync_planner *planner, uint32_t worker,
		  double value, struct kn__sync_action *out)
{
	struct kn__sync_event ev = {
		.type = KN__SYNC_EV_TIMING,
		.worker = worker,
		.value = value,
	};

	return kn__sync_planner_event(planner, &ev, out);
}

static int planner_member(struct kn__sync_planner *planner, uint32_t type,
			  uint32_t worker, struct kn__sync_action *out)
{
	struct kn__sync_event ev = { .type = type, .worker = worker };

	return kn__sync_planner_event(planner, &ev, out);
}

/*
 * Timings @v[i] from workers 0 .. n-1 in order (skipping NAN): no
 * action until the last, whose answer is returned.
 */
static int barrier(struct kn__sync_planner *planner, const double *v,
		   uint32_t n, struct kn__sync_action *out)
{
	uint32_t last = n;

	while (last > 0 && isnan(v[last - 1]))
		last--;
	for (uint32_t i = 0; i + 1 < last; i++)
		if (!isnan(v[i]))
			cr_assert_eq(timing(planner, i, v[i], out), 0,
				     "worker %u is not the last", i);
	return timing(planner, last - 1, v[last - 1], out);
}

/* A barrier of timings @v that completes with no new plan. */
static void no_plan(struct kn__sync_planner *planner, const double *v,
		    uint32_t n)
{
	struct kn__sync_action out[MAXACT];

	cr_assert_eq(barrier(planner, v, n, out), 0, "a plan at %g, %g", v[0],
		     v[1]);
}

static void assert_regroup(const struct kn__sync_action *a, int n,
			   uint64_t epoch, const uint32_t *plan)
{
	cr_assert_eq(n, 1);
	cr_assert_eq(a->type, KN__SYNC_ACT_REGROUP);
	cr_assert_eq(a->epoch, epoch);
	for (uint32_t w = 0; w < MAXW; w++)
		cr_assert_eq(a->plan[w], plan[w], "plan[%u] = %u, not %u", w,
			     a->plan[w], plan[w]);
}

/*
 * Warm-up: worker 1 reports 2, 2.5 and 2.75, none a miss: the EMA makes
 * it 2.5.
 */
static void warm_up(struct kn__sync_planner *planner)
{
	struct kn__sync_action out[MAXACT];
	const uint32_t plan[MAXW] = { 4, 2, 1 };

	no_plan(planner, (const double[]){ 1, 2, 4 }, 3);
	/* 2.5 vs 2 is off by exactly 25%: no miss, pred 2.25 */
	no_plan(planner, (const double[]){ 1, 2.5, 4 }, 3);
	cr_assert_eq(planner->pred[1], 2.25);
	cr_assert_eq(kn__sync_planner_epoch(planner), 0);
	/*
	 * Barrier 3 = warmup: 2.75 vs 2.25 is no miss either, pred =
	 * {1, 0.5 x 2.75 + 0.5 x 2.25, 4} = {1, 2.5, 4}, whose plan is
	 * ZipLine's over at most 4 = 4 / 1 steps: {4, 2, 1}, the window
	 * [4, 5] (with R = 15 it would be {8, 3, 2}, see the hand-computed
	 * cases).  The last timings alone, {1, 2.75, 4}, would give
	 * {4, 1, 1}.
	 */
	assert_regroup(out,
		       barrier(planner, (const double[]){ 1, 2.75, 4 }, 3, out),
		       1, plan);
	cr_assert_eq(planner->pred[1], 2.5);
	cr_assert_eq(kn__sync_planner_epoch(planner), 1);
}

/*
 * warm_up, then worker 2 slows from 4 to 8, a miss by 100%: the barrier
 * of the miss re-plans from the new speed, pred {1, 2.5, 8}, window
 * [7.5, 8].
 */
static void slow_down(struct kn__sync_planner *planner)
{
	struct kn__sync_action out[MAXACT];

	warm_up(planner);
	assert_regroup(out,
		       barrier(planner, (const double[]){ 1, 2.5, 8 }, 3, out),
		       2, (const uint32_t[MAXW]){ 8, 3, 1 });
	cr_assert_eq(planner->pred[2], 8);
}

Test(predicted, planner_first_plan_at_the_warmup_barrier)
{
	struct kn__sync_planner *planner = planner_new(3, 0);
	struct kn__sync_action out[MAXACT];

	warm_up(planner);
	kn__sync_planner_destroy(planner);

	/* warmup = 1: the first barrier plans; 5: not before the fifth */
	planner = planner_new(2, 1);
	assert_regroup(out, barrier(planner, (const double[]){ 1, 2 }, 2, out),
		       1, (const uint32_t[MAXW]){ 2, 1 });
	kn__sync_planner_destroy(planner);
	planner = planner_new(2, 5);
	for (int b = 1; b < 5; b++)
		cr_assert_eq(barrier(planner, (const double[]){ 1, 2 }, 2, out),
			     0, "barrier %d", b);
	assert_regroup(out, barrier(planner, (const double[]){ 1, 2 }, 2, out),
		       1, (const uint32_t[MAXW]){ 2, 1 });
	kn__sync_planner_destroy(planner);
}

/*
 * A plan spans about one step of the slowest: ZipLine over at most
 * ceil(slowest / fastest) steps.  Two workers of 23 and 80 ms get
 * {3, 1} (69 against 80 ms: the window [69, 80] is narrower than
 * [80, 92]); ZipLine over R = 15 would pick the tighter [160, 161] of
 * {7, 2}, a round twice as long.
 */
Test(predicted, planner_keeps_rounds_to_one_step_of_the_slowest)
{
	struct kn__sync_planner *planner = planner_new(2, 1);
	struct kn__sync_action out[MAXACT];
	uint32_t k[2];

	cr_assert_eq(
		kn__sync_zipline((const double[]){ 0.023, 0.080 }, 2, 15, k),
		0);
	cr_assert(k[0] == 7 && k[1] == 2, "R = 15: {%u, %u}", k[0], k[1]);
	assert_regroup(
		out, barrier(planner, (const double[]){ 0.023, 0.080 }, 2, out),
		1, (const uint32_t[MAXW]){ 3, 1 });
	kn__sync_planner_destroy(planner);
	/* {1, 100}: the fastest would span it in 100 steps, R caps it */
	planner = planner_new(2, 1);
	assert_regroup(out,
		       barrier(planner, (const double[]){ 1, 100 }, 2, out), 1,
		       (const uint32_t[MAXW]){ 15, 1 });
	kn__sync_planner_destroy(planner);
}

Test(predicted, planner_barrier_needs_every_member_once)
{
	struct kn__sync_planner *planner = planner_new(3, 1);
	struct kn__sync_action out[MAXACT];

	/* worker 0 twice and a non-member do not make a barrier */
	cr_assert_eq(timing(planner, 0, 1, out), 0);
	cr_assert_eq(timing(planner, 0, 1, out), 0);
	cr_assert_eq(timing(planner, 1, 2, out), 0);
	cr_assert_eq(timing(planner, 5, 1, out), 0);
	cr_assert_eq(planner->pred[5], 0, "a non-member is not predicted");
	/* R x 1e308 is not finite: refused, and 2 is still due */
	cr_assert_eq(timing(planner, 2, 1e308, out), -EINVAL);
	cr_assert_eq(kn__sync_planner_epoch(planner), 0);
	assert_regroup(out, timing(planner, 2, 4, out), 1,
		       (const uint32_t[MAXW]){ 4, 2, 1 });
	/* TIMER, PUSH and PLAN change nothing */
	cr_assert_eq(planner_member(planner, KN__SYNC_EV_TIMER, 0, out), 0);
	cr_assert_eq(planner_member(planner, KN__SYNC_EV_PUSH, 0, out),
		     -EINVAL);
	cr_assert_eq(planner_member(planner, KN__SYNC_EV_PLAN, 0, out),
		     -EINVAL);
	cr_assert_eq(kn__sync_planner_epoch(planner), 1);
	kn__sync_planner_destroy(planner);
}

Test(predicted, planner_keeps_its_plan_while_predictions_hold)
{
	struct kn__sync_planner *planner = planner_new(3, 0);

	warm_up(planner);
	for (int b = 0; b < 5; b++)
		no_plan(planner, (const double[]){ 1, 2.5, 4 }, 3);
	/* off by exactly 25% is not a miss: 1.25 vs 1, 3.125 vs 2.5, 3 vs 4 */
	no_plan(planner, (const double[]){ 1.25, 3.125, 3 }, 3);
	cr_assert_eq(planner->pred[0], 1.125);
	cr_assert_eq(kn__sync_planner_epoch(planner), 1);
	kn__sync_planner_destroy(planner);
}

/*
 * A miss re-plans at the barrier it is seen at, and that plan already
 * follows the new speed: the missing report restarts the prediction.
 * Averaged into the EMA instead (8 vs 4 -> 6), the plan would be
 * {6, 2, 1} and 8 would miss 6 again at the next barrier, so the plan
 * that fits would only come a barrier later.
 */
Test(predicted, planner_replans_at_the_barrier_of_a_miss_from_the_new_speed)
{
	struct kn__sync_planner *planner = planner_new(3, 0);
	struct kn__sync_action out[MAXACT];

	slow_down(planner);
	/* the slow worker stays slow: the plan holds, no second one */
	no_plan(planner, (const double[]){ 1, 2.5, 8 }, 3);
	no_plan(planner, (const double[]){ 1, 2.5, 8 }, 3);
	/* 1.5 vs 2.5 misses by 40%: pred {1, 1.5, 8} */
	assert_regroup(out,
		       barrier(planner, (const double[]){ 1, 1.5, 8 }, 3, out),
		       3, (const uint32_t[MAXW]){ 8, 5, 1 });
	cr_assert_eq(planner->pred[1], 1.5);
	/* the miss was this barrier's: the next one keeps the plan */
	no_plan(planner, (const double[]){ 1, 1.5, 8 }, 3);
	cr_assert_eq(kn__sync_planner_epoch(planner), 3);
	kn__sync_planner_destroy(planner);
}

/*
 * Predictions that keep missing: the re-plan after a miss misses at once
 * (the slow worker is fast again), so the second barrier in a row with a
 * miss falls back to one step per member, BSP's rounds.  Misses in the
 * fallback plan nothing more, nor does a JOIN (one step fits anyone).
 */
Test(predicted, planner_falls_back_to_one_step_after_repeated_misses)
{
	struct kn__sync_planner *planner = planner_new(3, 0);
	struct kn__sync_action out[MAXACT];

	/* a miss: re-planned from the new speed */
	slow_down(planner);
	/* 4 vs 8, missed again at the next barrier: the fallback */
	assert_regroup(out,
		       barrier(planner, (const double[]){ 1, 2.5, 4 }, 3, out),
		       3, (const uint32_t[MAXW]){ 1, 1, 1 });
	cr_assert(kn__sync_psp_planner_of(planner)->fallback);
	/* more misses, a joiner: still one step each, no new plan */
	no_plan(planner, (const double[]){ 1, 2.5, 8 }, 3);
	cr_assert_eq(planner_member(planner, KN__SYNC_EV_JOIN, 3, out), 0);
	no_plan(planner, (const double[]){ 1, 5, 4, 2 }, 4);
	cr_assert_eq(kn__sync_planner_epoch(planner), 3);
	cr_assert(kn__sync_psp_planner_of(planner)->fallback);
	kn__sync_planner_destroy(planner);

	/* a miss that holds afterwards is one change of speed: no fallback */
	planner = planner_new(3, 0);
	slow_down(planner);
	no_plan(planner, (const double[]){ 1, 2.5, 8 }, 3);
	assert_regroup(out,
		       barrier(planner, (const double[]){ 1, 2.5, 4 }, 3, out),
		       3, (const uint32_t[MAXW]){ 4, 2, 1 });
	cr_assert(!kn__sync_psp_planner_of(planner)->fallback);
	kn__sync_planner_destroy(planner);
}

/*
 * The fallback ends with a ZipLine plan after three barriers in a row
 * whose predictions hold; a miss among them starts the count again.
 */
Test(predicted, planner_leaves_the_fallback_when_predictions_hold)
{
	struct kn__sync_planner *planner = planner_new(3, 0);
	struct kn__sync_action out[MAXACT];

	warm_up(planner);
	cr_assert_eq(barrier(planner, (const double[]){ 1, 2.5, 8 }, 3, out),
		     1);
	assert_regroup(out,
		       barrier(planner, (const double[]){ 1, 2.5, 4 }, 3, out),
		       3, (const uint32_t[MAXW]){ 1, 1, 1 });
	/* two that hold, then a miss (8 vs 4): the count starts again */
	for (int b = 0; b < 2; b++)
		no_plan(planner, (const double[]){ 1, 2.5, 4 }, 3);
	no_plan(planner, (const double[]){ 1, 2.5, 8 }, 3);
	for (int b = 0; b < 2; b++)
		cr_assert_eq(
			barrier(planner, (const double[]){ 1, 2.5, 8 }, 3, out),
			0, "hold %d of 3", b + 1);
	cr_assert(kn__sync_psp_planner_of(planner)->fallback);
	/* the third in a row: out, with the plan that fits {1, 2.5, 8} */
	assert_regroup(out,
		       barrier(planner, (const double[]){ 1, 2.5, 8 }, 3, out),
		       4, (const uint32_t[MAXW]){ 8, 3, 1 });
	cr_assert(!kn__sync_psp_planner_of(planner)->fallback);
	/* and back to the usual rules: a steady cluster keeps its plan */
	no_plan(planner, (const double[]){ 1, 2.5, 8 }, 3);
	cr_assert_eq(kn__sync_planner_epoch(planner), 4);
	kn__sync_planner_destroy(planner);
}

Test(predicted, planner_replans_after_a_join_or_a_leave)
{
	struct kn__sync_planner *planner = planner_new(3, 0);
	struct kn__sync_action out[MAXACT];

	/* changes before the first plan are in it: no re-plan after it */
	cr_assert_eq(planner_member(planner, KN__SYNC_EV_JOIN, 3, out), 0);
	cr_assert_eq(planner_member(planner, KN__SYNC_EV_LEAVE, 3, out), 0);
	warm_up(planner);
	no_plan(planner, (const double[]){ 1, 2.5, 4 }, 3);

	/* a joiner: the barrier waits for it; pred {1, 2.5, 4, 2.5} */
	cr_assert_eq(planner_member(planner, KN__SYNC_EV_JOIN, 3, out), 0);
	assert_regroup(
		out,
		barrier(planner, (const double[]){ 1, 2.5, 4, 2.5 }, 4, out), 2,
		(const uint32_t[MAXW]){ 4, 2, 1, 2 });

	/* a leave that completes a barrier re-plans at once, without it */
	cr_assert_eq(timing(planner, 0, 1, out), 0);
	cr_assert_eq(timing(planner, 2, 4, out), 0);
	cr_assert_eq(timing(planner, 3, 2.5, out), 0);
	assert_regroup(out, planner_member(planner, KN__SYNC_EV_LEAVE, 1, out),
		       3, (const uint32_t[MAXW]){ 4, 0, 1, 2 });
	/* a leave before the barrier: the barrier re-plans */
	cr_assert_eq(timing(planner, 1, 9, out), 0, "not a member");
	cr_assert_eq(planner_member(planner, KN__SYNC_EV_LEAVE, 3, out), 0);
	assert_regroup(out,
		       barrier(planner, (const double[]){ 1, NAN, 4 }, 3, out),
		       4, (const uint32_t[MAXW]){ 4, 0, 1 });
	no_plan(planner, (const double[]){ 1, NAN, 4 }, 3);
	cr_assert_eq(kn__sync_planner_epoch(planner), 4);

	/*
	 * 1 comes back on slower hardware: its prediction starts afresh
	 * from 3 (not 0.5 x 3 + 0.5 x 2.5 = 2.75, which 3 does not miss
	 * by more than 25%); {1, 3, 4} gives {4, 1, 1}.
	 */
	cr_assert_eq(planner_member(planner, KN__SYNC_EV_JOIN, 1, out), 0);
	assert_regroup(out,
		       barrier(planner, (const double[]){ 1, 3, 4 }, 3, out), 5,
		       (const uint32_t[MAXW]){ 4, 1, 1 });
	cr_assert_eq(planner->pred[1], 3);
	kn__sync_planner_destroy(planner);
}

/* --- the worker rule ----------------------------------------------------- */

static struct kn__sync_worker *worker_new(uint32_t max_steps)
{
	return worker_of(&(struct kn__sync_params){ .protocol = KN_SYNC_PSP,
						    .max_workers = MAXW,
						    .members = MAXW,
						    .max_steps = max_steps },
			 1);
}

static int wev_at(struct kn__sync_worker *w, uint32_t type, double t,
		  double seconds, uint32_t *next)
{
	struct kn__sync_worker_event ev = {
		.type = type,
		.t = t,
		.seconds = seconds,
	};

	return kn__sync_worker_event(w, &ev, next);
}

static int wev(struct kn__sync_worker *w, uint32_t type, uint32_t *next)
{
	return wev_at(w, type, 0, 0.1, next);
}

/* A RELEASE @rtt seconds after the push (0: none measured). */
static int wrelease_at(struct kn__sync_worker *w, uint64_t epoch,
		       uint32_t steps, double rtt, uint32_t *next)
{
	struct kn__sync_worker_event ev = {
		.type = KN__SYNC_WEV_RELEASE,
		.version = 1,
		.epoch = epoch,
		.steps = steps,
		.rtt = rtt,
	};

	return kn__sync_worker_event(w, &ev, next);
}

static int wrelease(struct kn__sync_worker *w, uint64_t epoch, uint32_t steps,
		    uint32_t *next)
{
	return wrelease_at(w, epoch, steps, 0, next);
}

/* @type at @t (a STEP of @seconds) is answered @want. */
static void expect_at(struct kn__sync_worker *w, uint32_t type, double t,
		      double seconds, uint32_t want)
{
	uint32_t next = 0;

	cr_assert_eq(wev_at(w, type, t, seconds, &next), 0, "event %u at %g",
		     type, t);
	cr_assert_eq(next, want, "event %u at %g: %u, not %u", type, t, next,
		     want);
}

/* @type is answered @want. */
static void expect(struct kn__sync_worker *w, uint32_t type, uint32_t want)
{
	expect_at(w, type, 0, 0.1, want);
}

/* @type is refused and nothing changes. */
static void refused(struct kn__sync_worker *w, uint32_t type)
{
	struct kn__sync_worker before = *w;
	uint32_t next = 99;

	cr_assert_eq(wev(w, type, &next), -EINVAL, "event %u", type);
	cr_assert_eq(next, 99);
	cr_assert_eq(memcmp(&before, w, sizeof(before)), 0, "event %u", type);
}

Test(predicted, worker_warmup_is_bsp)
{
	struct kn__sync_worker *w = worker_new(0);
	uint32_t next;

	for (int i = 0; i < 3; i++) {
		expect(w, KN__SYNC_WEV_STEP, KN__SYNC_NEXT_PUSH);
		expect(w, KN__SYNC_WEV_PUSHED, KN__SYNC_NEXT_WAIT);
		/* no plan: no training on the local copy */
		refused(w, KN__SYNC_WEV_STEP);
		cr_assert_eq(wrelease_at(w, 0, 1, 1, &next), 0);
		cr_assert_eq(next, KN__SYNC_NEXT_STEP);
	}
	kn__sync_worker_destroy(w);
}

/*
 * Steps of 0.1 s and releases 0.25 s after the push: k steps, then
 * steps on the copy only while they end before the release is due.
 */
Test(predicted, worker_takes_k_steps_and_fills_the_wait)
{
	struct kn__sync_worker *w = worker_new(4); /* R = 4 */
	uint32_t next;

	expect_at(w, KN__SYNC_WEV_STEP, 0.1, 0.1, KN__SYNC_NEXT_PUSH);
	expect_at(w, KN__SYNC_WEV_PUSHED, 0.1, 0, KN__SYNC_NEXT_WAIT);
	cr_assert_eq(wrelease_at(w, 1, 3, 0.25, &next), 0);
	cr_assert_eq(next, KN__SYNC_NEXT_STEP);
	cr_assert_eq(kn__sync_psp_worker_of(w)->wait_s, 0.25);
	/* k = 3: STEP, STEP, then PUSH */
	expect_at(w, KN__SYNC_WEV_STEP, 0.45, 0.1, KN__SYNC_NEXT_STEP);
	expect_at(w, KN__SYNC_WEV_STEP, 0.55, 0.1, KN__SYNC_NEXT_STEP);
	expect_at(w, KN__SYNC_WEV_STEP, 0.65, 0.1, KN__SYNC_NEXT_PUSH);
	/* the release is due at 0.9: steps ending at 0.75 and 0.85 fit */
	expect_at(w, KN__SYNC_WEV_PUSHED, 0.65, 0, KN__SYNC_NEXT_STEP);
	expect_at(w, KN__SYNC_WEV_STEP, 0.75, 0.1, KN__SYNC_NEXT_STEP);
	/* one ending at 0.95 would hold up the next push: wait */
	expect_at(w, KN__SYNC_WEV_STEP, 0.85, 0.1, KN__SYNC_NEXT_WAIT);
	refused(w, KN__SYNC_WEV_STEP);
	cr_assert_eq(kn__sync_psp_worker_of(w)->extra, 2);
	/* the 2 count toward the next push, and the plan's 3 are still due */
	cr_assert_eq(wrelease_at(w, 1, 3, 0.25, &next), 0);
	cr_assert_eq(next, KN__SYNC_NEXT_STEP);
	cr_assert_eq(kn__sync_psp_worker_of(w)->steps, 2);
	cr_assert_eq(kn__sync_psp_worker_of(w)->due, 5);
	cr_assert_eq(kn__sync_psp_worker_of(w)->extra, 0);
	expect_at(w, KN__SYNC_WEV_STEP, 1.0, 0.1, KN__SYNC_NEXT_STEP);
	expect_at(w, KN__SYNC_WEV_STEP, 1.1, 0.1, KN__SYNC_NEXT_STEP);
	expect_at(w, KN__SYNC_WEV_STEP, 1.2, 0.1, KN__SYNC_NEXT_PUSH);
	kn__sync_worker_destroy(w);

	/* a late model (releases 10 s after the push): R = 4, then WAIT */
	w = worker_new(4);
	expect(w, KN__SYNC_WEV_STEP, KN__SYNC_NEXT_PUSH);
	expect(w, KN__SYNC_WEV_PUSHED, KN__SYNC_NEXT_WAIT);
	cr_assert_eq(wrelease_at(w, 1, 3, 10, &next), 0);
	for (int i = 0; i < 3; i++)
		expect(w, KN__SYNC_WEV_STEP,
		       i < 2 ? KN__SYNC_NEXT_STEP : KN__SYNC_NEXT_PUSH);
	expect(w, KN__SYNC_WEV_PUSHED, KN__SYNC_NEXT_STEP);
	for (int i = 0; i < 3; i++)
		expect(w, KN__SYNC_WEV_STEP, KN__SYNC_NEXT_STEP);
	expect(w, KN__SYNC_WEV_STEP, KN__SYNC_NEXT_WAIT);
	refused(w, KN__SYNC_WEV_STEP);
	/* R + k = 7 steps in the next push; a release of 0 steps asks 1 */
	cr_assert_eq(wrelease_at(w, 2, 3, 10, &next), 0);
	cr_assert_eq(kn__sync_psp_worker_of(w)->steps, 4);
	cr_assert_eq(kn__sync_psp_worker_of(w)->due, 7);
	cr_assert_eq(kn__sync_psp_worker_of(w)->epoch, 2);
	for (int i = 0; i < 3; i++)
		expect(w, KN__SYNC_WEV_STEP,
		       i < 2 ? KN__SYNC_NEXT_STEP : KN__SYNC_NEXT_PUSH);
	expect(w, KN__SYNC_WEV_PUSHED, KN__SYNC_NEXT_STEP);
	cr_assert_eq(wrelease_at(w, 2, 0, 10, &next), 0);
	cr_assert_eq(kn__sync_psp_worker_of(w)->due, 1);
	expect(w, KN__SYNC_WEV_STEP, KN__SYNC_NEXT_PUSH);
	kn__sync_worker_destroy(w);
}

/*
 * A worker whose step outlasts the wait does not start one: it would
 * push a step late, and its round, held up by it, would last two of its
 * steps instead of one.
 */
Test(predicted, worker_waits_when_a_step_would_outlast_the_wait)
{
	struct kn__sync_worker *w = worker_new(4);
	uint32_t next;

	/* no wait measured yet (a release 0 s after the push): none fits */
	expect_at(w, KN__SYNC_WEV_STEP, 1, 1, KN__SYNC_NEXT_PUSH);
	expect_at(w, KN__SYNC_WEV_PUSHED, 1, 0, KN__SYNC_NEXT_WAIT);
	cr_assert_eq(wrelease_at(w, 1, 1, 0, &next), 0);
	expect_at(w, KN__SYNC_WEV_STEP, 2, 1, KN__SYNC_NEXT_PUSH);
	expect_at(w, KN__SYNC_WEV_PUSHED, 2, 0, KN__SYNC_NEXT_WAIT);
	/* steps of 1 s, releases 0.3 s after the push */
	cr_assert_eq(wrelease_at(w, 1, 1, 0.3, &next), 0);
	expect_at(w, KN__SYNC_WEV_STEP, 3.3, 1, KN__SYNC_NEXT_PUSH);
	expect_at(w, KN__SYNC_WEV_PUSHED, 3.3, 0, KN__SYNC_NEXT_WAIT);
	refused(w, KN__SYNC_WEV_STEP);
	/*
	 * The same worker, its steps now 0.1 s: the prediction (an EMA of
	 * weight 1/2) falls to 0.55, 0.325, then 0.2125 s, and from then
	 * on a step fits the wait.
	 */
	for (int round = 0; round < 3; round++) {
		double t = 4 + round;

		cr_assert_eq(wrelease_at(w, 1, 1, 0.3, &next), 0);
		expect_at(w, KN__SYNC_WEV_STEP, t, 0.1, KN__SYNC_NEXT_PUSH);
		expect_at(w, KN__SYNC_WEV_PUSHED, t, 0,
			  round < 2 ? KN__SYNC_NEXT_WAIT : KN__SYNC_NEXT_STEP);
	}
	kn__sync_worker_destroy(w);
}

/*
 * The release is predicted by the longest recent wait: one long wait
 * (1 s) and then short ones (0.05 s) against steps of 0.1 s.  A mean of
 * them (the rule of old, an EMA of weight 1/2) is below a step after 5
 * short waits, so the worker idled through the next long one; the
 * longest recent wait falls by 1/32 of the gap a release, so a step
 * fits for 92 more rounds and then no longer does.
 */
Test(predicted, worker_fits_steps_into_the_longest_recent_wait)
{
	struct kn__sync_worker *w = worker_new(4);
	double longest = 1.0;
	uint32_t next;

	expect_at(w, KN__SYNC_WEV_STEP, 0, 0.1, KN__SYNC_NEXT_PUSH);
	expect_at(w, KN__SYNC_WEV_PUSHED, 0, 0, KN__SYNC_NEXT_WAIT);
	cr_assert_eq(wrelease_at(w, 1, 1, 1.0, &next), 0);
	for (int round = 1; round <= 200; round++) {
		double t = round;
		bool fits = 0.1 <= longest;

		expect_at(w, KN__SYNC_WEV_STEP, t, 0.1, KN__SYNC_NEXT_PUSH);
		expect_at(w, KN__SYNC_WEV_PUSHED, t, 0,
			  fits ? KN__SYNC_NEXT_STEP : KN__SYNC_NEXT_WAIT);
		if (round == 8)
			cr_assert(fits, "after 7 short waits a step fits");
		if (round == 200)
			cr_assert_not(fits, "after 199 it no longer does");
		cr_assert_eq(wrelease_at(w, 1, 1, 0.05, &next), 0);
		longest += (0.05 - longest) / 32;
		cr_assert_float_eq(kn__sync_psp_worker_of(w)->wait_s, longest,
				   1e-12);
	}
	kn__sync_worker_destroy(w);
}

Test(predicted, worker_joiner_starts_from_its_release)
{
	struct kn__sync_worker *w = worker_new(0);
	uint32_t next;

	cr_assert_eq(wrelease(w, 3, 2, &next), 0);
	cr_assert_eq(next, KN__SYNC_NEXT_STEP);
	expect(w, KN__SYNC_WEV_STEP, KN__SYNC_NEXT_STEP);
	/* another release while running replaces the model: count anew */
	cr_assert_eq(wrelease_at(w, 3, 2, 5, &next), 0);
	cr_assert_eq(kn__sync_psp_worker_of(w)->steps, 0);
	cr_assert_eq(kn__sync_psp_worker_of(w)->wait_s, 0,
		     "a release that answers no push times none");
	expect(w, KN__SYNC_WEV_STEP, KN__SYNC_NEXT_STEP);
	expect(w, KN__SYNC_WEV_STEP, KN__SYNC_NEXT_PUSH);
	/* no wait measured yet: it waits for its first release */
	expect(w, KN__SYNC_WEV_PUSHED, KN__SYNC_NEXT_WAIT);
	kn__sync_worker_destroy(w);
}

Test(predicted, worker_refuses_what_does_not_fit_and_changes_nothing)
{
	struct kn__sync_worker *w = worker_new(2);
	struct kn__sync_worker before;
	struct kn__sync_worker_event bad_step = {
		.type = KN__SYNC_WEV_STEP,
		.seconds = NAN,
	};
	uint32_t next = 99;

	/* RUN */
	refused(w, KN__SYNC_WEV_PUSHED);
	refused(w, 0);
	refused(w, KN__SYNC_WEV_RELEASE + 1);
	cr_assert_eq(kn__sync_worker_event(w, &bad_step, &next), -EINVAL);
	/* a release no chunk rule makes: more than R steps */
	before = *w;
	cr_assert_eq(wrelease(w, 1, 3, &next), -EINVAL);
	cr_assert_eq(memcmp(&before, w, sizeof(before)), 0);
	cr_assert_eq(wrelease(w, 1, 2, &next), 0);
	expect(w, KN__SYNC_WEV_STEP, KN__SYNC_NEXT_STEP);
	expect(w, KN__SYNC_WEV_STEP, KN__SYNC_NEXT_PUSH);
	/* PUSH: only PUSHED fits */
	refused(w, KN__SYNC_WEV_STEP);
	before = *w;
	cr_assert_eq(wrelease(w, 1, 2, &next), -EINVAL);
	cr_assert_eq(memcmp(&before, w, sizeof(before)), 0);
	/* WAIT with no wait measured: neither PUSHED nor STEP fits */
	expect(w, KN__SYNC_WEV_PUSHED, KN__SYNC_NEXT_WAIT);
	refused(w, KN__SYNC_WEV_PUSHED);
	refused(w, KN__SYNC_WEV_STEP);
	cr_assert_eq(wrelease_at(w, 1, 2, 10, &next), 0);
	expect(w, KN__SYNC_WEV_STEP, KN__SYNC_NEXT_STEP);
	expect(w, KN__SYNC_WEV_STEP, KN__SYNC_NEXT_PUSH);
	/* WAIT with room: PUSHED again does not fit; STEPs until R, then none */
	expect(w, KN__SYNC_WEV_PUSHED, KN__SYNC_NEXT_STEP);
	refused(w, KN__SYNC_WEV_PUSHED);
	expect(w, KN__SYNC_WEV_STEP, KN__SYNC_NEXT_STEP);
	expect(w, KN__SYNC_WEV_STEP, KN__SYNC_NEXT_WAIT);
	refused(w, KN__SYNC_WEV_STEP);
	refused(w, KN__SYNC_WEV_PUSHED);
	cr_assert_eq(wrelease(w, 1, 2, &next), 0);
	cr_assert_eq(next, KN__SYNC_NEXT_STEP);
	kn__sync_worker_destroy(w);
}

/* --- the three machines together ----------------------------------------- */

/*
 * Three workers of 1, 2.5 and 4 seconds a step, in simulated time with
 * no latency: each trains until its worker rule says PUSH, pushes to a
 * chunk rule, trains on its copy while the rule says STEP and the round
 * is not complete, and reports its seconds per step to the planner
 * after each round; the planner's plans go to the chunk rule.  After the
 * warm-up the plan is {4, 2, 1} (a round of 5 s), and every delta is
 * weighted 1/3.  Worker 0 pushes after 4 s and has 1 s to wait: it takes
 * one step on its copy, which its next push holds on top of the plan's
 * 4.  Workers 1 and 2 wait 0 and 1 s, shorter than their steps: they
 * take none, so the rounds stay 5 s long.
 */
Test(predicted, the_machines_run_rounds_together)
{
	const double t[] = { 1, 2.5, 4 };
	const uint32_t k[] = { 4, 2, 1 };
	struct kn__sync_params p = {
		.protocol = KN_SYNC_PSP,
		.max_workers = 3,
		.members = 3,
	};
	struct kn__sync_rule *rule;
	struct kn__sync_planner *planner;
	struct kn__sync_worker *wr[3];
	struct kn__sync_action out[4], reg[4];
	double now[3] = { 0 }, push_t[3], start = 0;
	uint32_t pushed_steps[3], answer[3];

	cr_assert_eq(kn__sync_rule_create(&p, &rule), 0);
	cr_assert_eq(kn__sync_planner_create(&p, &planner), 0);
	for (uint32_t i = 0; i < 3; i++)
		cr_assert_eq(kn__sync_worker_create(&p, i, &wr[i]), 0);

	for (uint64_t round = 0; round < 8; round++) {
		double end = 0;
		int n = 0;

		for (uint32_t i = 0; i < 3; i++) {
			uint32_t next = KN__SYNC_NEXT_STEP;
			struct kn__sync_event ev = {
				.type = KN__SYNC_EV_PUSH,
				.worker = i,
				.clock = round,
				.version = round,
			};

			/* the steps since the last push, merged ones too */
			pushed_steps[i] = kn__sync_psp_worker_of(wr[i])->steps;
			while (next == KN__SYNC_NEXT_STEP) {
				now[i] += t[i];
				cr_assert_eq(wev_at(wr[i], KN__SYNC_WEV_STEP,
						    now[i], t[i], &next),
					     0);
				pushed_steps[i]++;
			}
			cr_assert_eq(next, KN__SYNC_NEXT_PUSH);
			ev.steps = pushed_steps[i];
			n = kn__sync_rule_event(rule, &ev, out);
			cr_assert_geq(n, 0);
			end = now[i] > end ? now[i] : end;
			push_t[i] = now[i];
			cr_assert_eq(wev_at(wr[i], KN__SYNC_WEV_PUSHED, now[i],
					    0, &answer[i]),
				     0);
		}
		cr_assert_eq(n, 4, "round %lu completes", (unsigned long)round);
		cr_assert_eq(end - start, round < 4 ? 4 : 5,
			     "round %lu lasts %g s", (unsigned long)round,
			     end - start);
		start = end;
		for (uint32_t i = 0; i < 3; i++) {
			cr_assert_eq(out[0].contrib[i].weight, 1.0f / 3.0f);
			/* train on the copy until the round's model is in */
			while (answer[i] == KN__SYNC_NEXT_STEP &&
			       now[i] < end) {
				now[i] += t[i];
				cr_assert_eq(wev_at(wr[i], KN__SYNC_WEV_STEP,
						    now[i], t[i], &answer[i]),
					     0);
			}
			now[i] = now[i] > end ? now[i] : end;
		}
		for (uint32_t i = 0; i < 3; i++) {
			struct kn__sync_worker_event rel = {
				.type = KN__SYNC_WEV_RELEASE,
				.version = out[1 + i].version,
				.epoch = out[1 + i].epoch,
				.steps = out[1 + i].steps,
				.t = end,
				.rtt = end - push_t[i],
			};
			struct kn__sync_event tev = {
				.type = KN__SYNC_EV_TIMING,
				.worker = i,
				.value = t[i],
			};
			uint32_t next;
			int r;

			cr_assert_eq(kn__sync_worker_event(wr[i], &rel, &next),
				     0);
			r = kn__sync_planner_event(planner, &tev, reg);
			cr_assert_eq(r, i == 2 && round == 2 ? 1 : 0,
				     "round %lu: one plan, at barrier 3",
				     (unsigned long)round);
			if (r == 1) {
				struct kn__sync_event pev = {
					.type = KN__SYNC_EV_PLAN,
					.epoch = reg[0].epoch,
					.plan = reg[0].plan,
				};

				for (uint32_t j = 0; j < 3; j++)
					cr_assert_eq(reg[0].plan[j], k[j]);
				cr_assert_eq(
					kn__sync_rule_event(rule, &pev, out),
					0);
			}
		}
		/*
		 * rounds 0-3 are BSP: the plan is in force from round 3's
		 * end; from round 5 on worker 0's pushes hold the step it
		 * took while waiting for round 4's model
		 */
		for (uint32_t i = 0; i < 3; i++)
			cr_assert_eq(pushed_steps[i],
				     round < 4		   ? 1
				     : round > 4 && i == 0 ? k[i] + 1
							   : k[i],
				     "round %lu worker %u: %u steps",
				     (unsigned long)round, i, pushed_steps[i]);
	}
	cr_assert_eq(kn__sync_rule_version(rule), 8);
	for (uint32_t i = 0; i < 3; i++)
		kn__sync_worker_destroy(wr[i]);
	kn__sync_planner_destroy(planner);
	kn__sync_rule_destroy(rule);
}
