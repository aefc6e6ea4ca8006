/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_asp.c - ASP's chunk rule, planner and worker rule (sync/asp.c,
 * docs/protocols.md "ASP"): every push applied at once as one worker's
 * share of a round, its rate damped by the rounds it missed, refusals
 * that change nothing, and randomized event sequences checked against a
 * reference model.
 */
#include <errno.h>

#include <criterion/criterion.h>

#include "sync_test.h"

Test(asp, refuses_bad_worker_ids_and_membership_errors)
{
	refusals(KN_SYNC_ASP);
}

Test(asp, timing_and_timer_do_nothing)
{
	timing_and_timer_do_nothing(KN_SYNC_ASP);
}

/* --- ASP ---------------------------------------------------------------- */

static void assert_asp_apply(const struct kn__sync_action *a, int n,
			     uint32_t worker, uint32_t slot, uint64_t version,
			     float weight, float lr_scale)
{
	cr_assert_eq(n, 2);
	cr_assert_eq(a[0].type, KN__SYNC_ACT_APPLY);
	cr_assert_eq(a[0].version, version);
	cr_assert_float_eq(a[0].lr_scale, lr_scale, 1e-7,
			   "lr_scale %.9g, expected %.9g", a[0].lr_scale,
			   lr_scale);
	cr_assert_eq(a[0].ncontrib, 1);
	cr_assert_eq(a[0].contrib[0].worker, worker);
	cr_assert_eq(a[0].contrib[0].slot, slot);
	cr_assert_float_eq(a[0].contrib[0].weight, weight, 1e-7,
			   "weight %.9g, expected %.9g", a[0].contrib[0].weight,
			   weight);
	assert_release(&a[1], worker, version);
}

/* A push is one worker's share of a round: weight 1/n. */
Test(asp, every_push_is_applied_at_once)
{
	struct kn__sync_rule *rule = rule_new(KN_SYNC_ASP, MAXW, 3);
	struct kn__sync_action out[MAXACT];

	assert_asp_apply(out, push(rule, 2, 0, 0, 1, out), 2, 1, 1, 1.0f / 3,
			 1.0f);
	cr_assert_eq(kn__sync_rule_version(rule), 1);
	assert_asp_apply(out, push(rule, 2, 1, 1, 0, out), 2, 0, 2, 1.0f / 3,
			 1.0f);
	cr_assert_eq(kn__sync_rule_version(rule), 2);
	kn__sync_rule_destroy(rule);
}

/*
 * The rate is damped by the rounds a push missed, tau / n: up to a
 * round old (n workers pushing in turn) it is not damped at all.
 */
Test(asp, staleness_in_rounds_damps_the_learning_rate)
{
	struct kn__sync_rule *rule = rule_new(KN_SYNC_ASP, MAXW, 4);
	struct kn__sync_action out[MAXACT];

	/* worker 0 alone makes versions 1, 2, 3 (staleness 0 each) */
	for (uint64_t v = 0; v < 3; v++)
		assert_asp_apply(out, push(rule, 0, v, v, 0, out), 0, 0, v + 1,
				 0.25f, 1.0f);
	/* tau = 0, 1, 2, 3: within a round */
	assert_asp_apply(out, push(rule, 1, 0, 3, 0, out), 1, 0, 4, 0.25f,
			 1.0f);
	assert_asp_apply(out, push(rule, 2, 0, 3, 0, out), 2, 0, 5, 0.25f,
			 1.0f);
	assert_asp_apply(out, push(rule, 3, 0, 3, 0, out), 3, 0, 6, 0.25f,
			 1.0f);
	assert_asp_apply(out, push(rule, 1, 1, 3, 1, out), 1, 1, 7, 0.25f,
			 1.0f);
	/* from the initial model: tau 7, 1.75 rounds; then tau 8, 2 */
	assert_asp_apply(out, push(rule, 2, 1, 0, 1, out), 2, 1, 8, 0.25f,
			 4.0f / 7.0f);
	assert_asp_apply(out, push(rule, 3, 1, 0, 1, out), 3, 1, 9, 0.25f,
			 0.5f);
	kn__sync_rule_destroy(rule);
}

Test(asp, push_from_the_future_or_seen_before_is_refused)
{
	struct kn__sync_rule *rule = rule_new(KN_SYNC_ASP, MAXW, 2);
	struct kn__sync_action out[MAXACT];

	cr_assert_eq(push(rule, 0, 0, 1, 0, out), -EINVAL);
	assert_asp_apply(out, push(rule, 0, 0, 0, 0, out), 0, 0, 1, 0.5f, 1.0f);
	/* the same push again: it was applied already */
	cr_assert_eq(push(rule, 0, 0, 0, 0, out), -EINVAL);
	cr_assert_eq(push(rule, 0, 0, 1, 0, out), -EINVAL);
	cr_assert_eq(kn__sync_rule_version(rule), 1);
	/* clocks only have to grow, not step by one */
	assert_asp_apply(out, push(rule, 0, 4, 1, 0, out), 0, 0, 2, 0.5f, 1.0f);
	cr_assert_eq(push(rule, 0, 3, 2, 1, out), -EINVAL);
	kn__sync_rule_destroy(rule);
}

/* The share follows the membership. */
Test(asp, join_releases_the_current_version_leave_stops_pushes)
{
	struct kn__sync_rule *rule = rule_new(KN_SYNC_ASP, MAXW, 1);
	struct kn__sync_action out[MAXACT];

	assert_asp_apply(out, push(rule, 0, 0, 0, 0, out), 0, 0, 1, 1.0f, 1.0f);
	assert_asp_apply(out, push(rule, 0, 1, 1, 1, out), 0, 1, 2, 1.0f, 1.0f);
	cr_assert_eq(member_event(rule, KN__SYNC_EV_JOIN, 7, out), 1);
	assert_release(&out[0], 7, 2);
	assert_asp_apply(out, push(rule, 7, 0, 2, 0, out), 7, 0, 3, 0.5f, 1.0f);
	cr_assert_eq(member_event(rule, KN__SYNC_EV_LEAVE, 7, out), 0);
	cr_assert_eq(push(rule, 7, 1, 3, 1, out), -EINVAL);
	cr_assert_eq(kn__sync_rule_version(rule), 3);
	kn__sync_rule_destroy(rule);
}

Test(asp, planner_emits_nothing)
{
	planner_has_no_plans(KN_SYNC_ASP);
}

Test(asp, worker_communicates_after_every_step)
{
	worker_communicates_every_step(KN_SYNC_ASP);
}

Test(asp, randomized_sequences_match_the_model)
{
	randomized(KN_SYNC_ASP, 0x73796e63ULL);
}
