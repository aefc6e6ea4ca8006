/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_bsp.c - BSP's chunk rule, planner and worker rule (sync/bsp.c,
 * docs/protocols.md "BSP"): when a round completes, its actions in worker
 * id order with the mean's weights, versions one per round, membership
 * changes inside a round, SKIP, refusals that change nothing, and
 * randomized event sequences checked against a reference model.
 */
#include <errno.h>
#include <math.h>

#include <criterion/criterion.h>

#include "sync_test.h"

/* --- BSP ---------------------------------------------------------------- */

Test(bsp, completes_only_when_every_member_pushed)
{
	struct kn__sync_rule *rule = rule_new(KN_SYNC_BSP, MAXW, 4);
	struct kn__sync_action out[MAXACT];
	const uint32_t all[] = { 0, 1, 2, 3 };

	cr_assert_eq(push(rule, 2, 0, 0, 0, out), 0);
	cr_assert_eq(push(rule, 0, 0, 0, 0, out), 0);
	cr_assert_eq(push(rule, 3, 0, 0, 0, out), 0);
	cr_assert_eq(kn__sync_rule_version(rule), 0);
	assert_round(out, push(rule, 1, 0, 0, 0, out), all, 4, 0, 0, NULL);
	cr_assert_eq(kn__sync_rule_version(rule), 1);
	kn__sync_rule_destroy(rule);
}

Test(bsp, actions_in_worker_id_order_whatever_the_arrival_order)
{
	struct kn__sync_rule *rule = rule_new(KN_SYNC_BSP, MAXW, 4);
	struct kn__sync_action out[MAXACT];
	const uint32_t order[] = { 3, 1, 0, 2 };
	const uint32_t slot[] = { 1, 0, 1, 0 }; /* by worker id */
	int n = 0;

	for (int i = 0; i < 4; i++)
		n = push(rule, order[i], 5, 0, slot[order[i]], out);
	cr_assert_eq(n, 5);
	cr_assert_eq(out[0].type, KN__SYNC_ACT_APPLY);
	cr_assert_eq(out[0].version, 1);
	cr_assert_eq(out[0].lr_scale, 1.0f);
	cr_assert_eq(out[0].ncontrib, 4);
	for (uint32_t k = 0; k < 4; k++) {
		cr_assert_eq(out[0].contrib[k].worker, k);
		cr_assert_eq(out[0].contrib[k].slot, slot[k]);
		cr_assert_eq(out[0].contrib[k].weight, 0.25f);
		assert_release(&out[1 + k], k, 1);
	}
	kn__sync_rule_destroy(rule);
}

Test(bsp, weights_are_the_mean_and_sum_to_one)
{
	for (uint32_t m = 1; m <= MAXW; m++) {
		struct kn__sync_rule *rule = rule_new(KN_SYNC_BSP, MAXW, m);
		struct kn__sync_action out[MAXACT];
		double sum = 0;
		int n = 0;

		for (uint32_t w = 0; w < m; w++)
			n = push(rule, w, 0, 0, 0, out);
		cr_assert_eq(n, (int)(1 + m));
		cr_assert_eq(out[0].ncontrib, m);
		for (uint32_t k = 0; k < m; k++) {
			cr_assert_eq(out[0].contrib[k].weight, 1.0f / (float)m);
			sum += out[0].contrib[k].weight;
		}
		cr_assert(fabs(sum - 1.0) < 1e-6, "m %u: sum %.9g", m, sum);
		kn__sync_rule_destroy(rule);
	}
}

Test(bsp, versions_increase_by_one_per_round)
{
	struct kn__sync_rule *rule = rule_new(KN_SYNC_BSP, MAXW, 3);
	struct kn__sync_action out[MAXACT];
	const uint32_t all[] = { 0, 1, 2 };

	for (uint64_t v = 0; v < 6; v++) {
		cr_assert_eq(push(rule, 1, v, v, v & 1, out), 0);
		cr_assert_eq(push(rule, 0, v, v, v & 1, out), 0);
		assert_round(out, push(rule, 2, v, v, v & 1, out), all, 3, v, 0,
			     NULL);
		cr_assert_eq(out[0].contrib[1].slot, v & 1);
		cr_assert_eq(kn__sync_rule_version(rule), v + 1);
	}
	kn__sync_rule_destroy(rule);
}

Test(bsp, second_push_in_a_round_is_refused_and_changes_nothing)
{
	struct kn__sync_rule *rule = rule_new(KN_SYNC_BSP, MAXW, 2);
	struct kn__sync_action out[MAXACT];
	const uint32_t all[] = { 0, 1 };

	cr_assert_eq(push(rule, 0, 0, 0, 0, out), 0);
	/* a new clock, a new slot: still the same round */
	cr_assert_eq(push(rule, 0, 1, 0, 1, out), -EINVAL);
	assert_round(out, push(rule, 1, 0, 0, 0, out), all, 2, 0, 0, NULL);
	cr_assert_eq(out[0].contrib[0].slot, 0, "the refused push's slot");
	kn__sync_rule_destroy(rule);
}

Test(bsp, replayed_or_off_version_push_is_refused)
{
	struct kn__sync_rule *rule = rule_new(KN_SYNC_BSP, MAXW, 2);
	struct kn__sync_action out[MAXACT];
	const uint32_t all[] = { 0, 1 };

	cr_assert_eq(push(rule, 0, 0, 1, 0, out), -EINVAL); /* future */
	cr_assert_eq(push(rule, 0, 0, 0, 0, out), 0);
	assert_round(out, push(rule, 1, 0, 0, 0, out), all, 2, 0, 0, NULL);
	/* the round-0 push seen again, as it was or with the new version */
	cr_assert_eq(push(rule, 0, 0, 0, 0, out), -EINVAL);
	cr_assert_eq(push(rule, 0, 0, 1, 0, out), -EINVAL);
	/* computed from an old version: not a push of this round */
	cr_assert_eq(push(rule, 0, 1, 0, 1, out), -EINVAL);
	cr_assert_eq(push(rule, 0, 1, 1, 1, out), 0);
	assert_round(out, push(rule, 1, 1, 1, 1, out), all, 2, 1, 0, NULL);
	kn__sync_rule_destroy(rule);
}

Test(bsp, leave_of_the_last_waited_for_member_completes_the_round)
{
	struct kn__sync_rule *rule = rule_new(KN_SYNC_BSP, MAXW, 3);
	struct kn__sync_action out[MAXACT];
	const uint32_t rest[] = { 0, 2 };

	cr_assert_eq(push(rule, 2, 0, 0, 1, out), 0);
	cr_assert_eq(push(rule, 0, 0, 0, 0, out), 0);
	assert_round(out, member_event(rule, KN__SYNC_EV_LEAVE, 1, out), rest,
		     2, 0, 0, NULL);
	cr_assert_eq(out[0].contrib[0].slot, 0);
	cr_assert_eq(out[0].contrib[1].slot, 1);
	/* and the next round needs only the two left */
	cr_assert_eq(push(rule, 0, 1, 1, 1, out), 0);
	assert_round(out, push(rule, 2, 1, 1, 0, out), rest, 2, 1, 0, NULL);
	kn__sync_rule_destroy(rule);
}

Test(bsp, leave_after_push_drops_the_contribution)
{
	struct kn__sync_rule *rule = rule_new(KN_SYNC_BSP, MAXW, 3);
	struct kn__sync_action out[MAXACT];
	const uint32_t rest[] = { 1, 2 };

	cr_assert_eq(push(rule, 0, 0, 0, 0, out), 0);
	cr_assert_eq(push(rule, 1, 0, 0, 0, out), 0);
	cr_assert_eq(member_event(rule, KN__SYNC_EV_LEAVE, 0, out), 0);
	assert_round(out, push(rule, 2, 0, 0, 0, out), rest, 2, 0, 0, NULL);
	kn__sync_rule_destroy(rule);
}

Test(bsp, a_round_without_members_never_completes)
{
	struct kn__sync_rule *rule = rule_new(KN_SYNC_BSP, MAXW, 2);
	struct kn__sync_action out[MAXACT];
	const uint32_t five[] = { 5 };

	cr_assert_eq(push(rule, 0, 0, 0, 0, out), 0);
	cr_assert_eq(member_event(rule, KN__SYNC_EV_LEAVE, 0, out), 0);
	cr_assert_eq(member_event(rule, KN__SYNC_EV_LEAVE, 1, out), 0);
	cr_assert_eq(kn__sync_rule_version(rule), 0);
	cr_assert_eq(member_event(rule, KN__SYNC_EV_JOIN, 5, out), 1);
	assert_release(&out[0], 5, 0);
	/* worker 0's dropped push is not applied with 5's */
	assert_round(out, push(rule, 5, 0, 0, 0, out), five, 1, 0, 0, NULL);
	kn__sync_rule_destroy(rule);
}

Test(bsp, join_releases_the_current_version_and_joins_the_round)
{
	struct kn__sync_rule *rule = rule_new(KN_SYNC_BSP, MAXW, 2);
	struct kn__sync_action out[MAXACT];
	const uint32_t three[] = { 0, 1, 5 };

	for (uint64_t v = 0; v < 2; v++) {
		cr_assert_eq(push(rule, 0, v, v, 0, out), 0);
		cr_assert_eq(push(rule, 1, v, v, 0, out), 3);
	}
	cr_assert_eq(push(rule, 0, 2, 2, 0, out), 0);
	cr_assert_eq(member_event(rule, KN__SYNC_EV_JOIN, 5, out), 1);
	assert_release(&out[0], 5, 2);
	cr_assert_eq(push(rule, 1, 2, 2, 0, out), 0, "waits for the joiner");
	assert_round(out, push(rule, 5, 0, 2, 1, out), three, 3, 2, 0, NULL);
	kn__sync_rule_destroy(rule);
}

Test(bsp, rejoin_after_leave_starts_its_clock_afresh)
{
	struct kn__sync_rule *rule = rule_new(KN_SYNC_BSP, MAXW, 2);
	struct kn__sync_action out[MAXACT];
	const uint32_t all[] = { 0, 1 };

	cr_assert_eq(push(rule, 0, 7, 0, 1, out), 0);
	cr_assert_eq(member_event(rule, KN__SYNC_EV_LEAVE, 0, out), 0);
	cr_assert_eq(push(rule, 0, 8, 0, 0, out), -EINVAL, "not a member");
	cr_assert_eq(member_event(rule, KN__SYNC_EV_JOIN, 0, out), 1);
	assert_release(&out[0], 0, 0);
	cr_assert_eq(push(rule, 0, 0, 0, 0, out), 0);
	assert_round(out, push(rule, 1, 0, 0, 0, out), all, 2, 0, 0, NULL);
	kn__sync_rule_destroy(rule);
}

static int skip(struct kn__sync_rule *rule, uint32_t worker, uint64_t clock,
		uint64_t version, struct kn__sync_action *out)
{
	struct kn__sync_event ev = {
		.type = KN__SYNC_EV_SKIP,
		.worker = worker,
		.clock = clock,
		.version = version,
	};

	return kn__sync_rule_event(rule, &ev, out);
}

/*
 * A joiner whose other chunks are a round ahead sits this chunk's round
 * out: the round is the others' mean, and the skipper is released with
 * its result after them.
 */
Test(bsp, a_skipper_is_released_with_the_round_it_sat_out)
{
	struct kn__sync_rule *rule = rule_new(KN_SYNC_BSP, MAXW, 2);
	struct kn__sync_action out[MAXACT];
	const uint32_t both[] = { 0, 1 }, three[] = { 0, 1, 5 };

	cr_assert_eq(push(rule, 0, 0, 0, 0, out), 0);
	cr_assert_eq(member_event(rule, KN__SYNC_EV_JOIN, 5, out), 1);
	assert_release(&out[0], 5, 0);
	cr_assert_eq(skip(rule, 5, 0, 0, out), 0, "waits for worker 1");
	cr_assert_eq(push(rule, 1, 0, 0, 1, out), 4);
	cr_assert_eq(out[0].ncontrib, 2);
	for (uint32_t k = 0; k < 2; k++) {
		cr_assert_eq(out[0].contrib[k].worker, both[k]);
		cr_assert_eq(out[0].contrib[k].weight, 0.5f);
		assert_release(&out[1 + k], both[k], 1);
	}
	assert_release(&out[3], 5, 1);
	/* the next round is everyone's, the skipper's slot parity 1 */
	cr_assert_eq(push(rule, 0, 1, 1, 1, out), 0);
	cr_assert_eq(push(rule, 1, 1, 1, 0, out), 0, "waits for the joiner");
	assert_round(out, push(rule, 5, 1, 1, 1, out), three, 3, 1, 0, NULL);
	kn__sync_rule_destroy(rule);
}

Test(bsp, a_skip_that_completes_the_round_releases_everyone)
{
	struct kn__sync_rule *rule = rule_new(KN_SYNC_BSP, MAXW, 2);
	struct kn__sync_action out[MAXACT];

	cr_assert_eq(push(rule, 0, 0, 0, 0, out), 0);
	cr_assert_eq(push(rule, 1, 0, 0, 0, out), 3);
	cr_assert_eq(push(rule, 0, 1, 1, 1, out), 0);
	cr_assert_eq(push(rule, 1, 1, 1, 1, out), 3);
	cr_assert_eq(push(rule, 1, 2, 2, 0, out), 0);
	cr_assert_eq(member_event(rule, KN__SYNC_EV_JOIN, 3, out), 1);
	cr_assert_eq(push(rule, 0, 2, 2, 0, out), 0, "waits for the joiner");
	cr_assert_eq(skip(rule, 3, 0, 2, out), 4);
	cr_assert_eq(out[0].type, KN__SYNC_ACT_APPLY);
	cr_assert_eq(out[0].version, 3);
	cr_assert_eq(out[0].ncontrib, 2);
	assert_release(&out[1], 0, 3);
	assert_release(&out[2], 1, 3);
	assert_release(&out[3], 3, 3);
	kn__sync_rule_destroy(rule);
}

Test(bsp, a_round_of_skippers_only_applies_nothing)
{
	struct kn__sync_rule *rule = rule_new(KN_SYNC_BSP, MAXW, 1);
	struct kn__sync_action out[MAXACT];

	cr_assert_eq(member_event(rule, KN__SYNC_EV_JOIN, 2, out), 1);
	cr_assert_eq(skip(rule, 2, 0, 0, out), 0, "waits for worker 0");
	/* worker 0 goes without pushing: nothing to apply, version stays */
	cr_assert_eq(member_event(rule, KN__SYNC_EV_LEAVE, 0, out), 1);
	assert_release(&out[0], 2, 0);
	cr_assert_eq(push(rule, 2, 1, 0, 1, out), 2, "alone from now on");
	cr_assert_eq(out[0].type, KN__SYNC_ACT_APPLY);
	cr_assert_eq(out[0].version, 1);
	kn__sync_rule_destroy(rule);
}

Test(bsp, skips_that_break_the_round_are_refused_and_change_nothing)
{
	struct kn__sync_rule *rule = rule_new(KN_SYNC_BSP, MAXW, 3);
	struct kn__sync_action out[MAXACT];

	cr_assert_eq(push(rule, 0, 0, 0, 0, out), 0);
	cr_assert_eq(skip(rule, 0, 1, 0, out), -EINVAL, "pushed already");
	cr_assert_eq(skip(rule, 1, 0, 1, out), -EINVAL, "a future version");
	cr_assert_eq(skip(rule, 7, 0, 0, out), -EINVAL, "not a member");
	cr_assert_eq(skip(rule, 1, 0, 0, out), 0, "waits for worker 2");
	cr_assert_eq(skip(rule, 1, 1, 0, out), -EINVAL, "skipped already");
	cr_assert_eq(push(rule, 1, 1, 0, 1, out), -EINVAL, "skipped already");
	cr_assert_eq(push(rule, 2, 0, 0, 0, out), 4);
	cr_assert_eq(out[0].ncontrib, 2);
	cr_assert_eq(out[0].contrib[1].worker, 2);
	assert_release(&out[3], 1, 1);
	cr_assert_eq(skip(rule, 1, 0, 1, out), -EINVAL, "a clock seen");
	cr_assert_eq(skip(rule, 1, 1, 0, out), -EINVAL, "an old version");
	kn__sync_rule_destroy(rule);
	/* no round to sit out elsewhere */
	rule = rule_new(KN_SYNC_ASP, MAXW, 2);
	cr_assert_eq(skip(rule, 0, 0, 0, out), -EINVAL);
	cr_assert_eq(push(rule, 0, 0, 0, 0, out), 2, "the clock is unused");
	kn__sync_rule_destroy(rule);
}

Test(bsp, refuses_bad_worker_ids_and_membership_errors)
{
	refusals(KN_SYNC_BSP);
}

Test(bsp, timing_and_timer_do_nothing)
{
	timing_and_timer_do_nothing(KN_SYNC_BSP);
}

Test(bsp, planner_emits_nothing)
{
	planner_has_no_plans(KN_SYNC_BSP);
}

Test(bsp, worker_communicates_after_every_step)
{
	worker_communicates_every_step(KN_SYNC_BSP);
}

Test(bsp, randomized_sequences_match_the_model)
{
	randomized(KN_SYNC_BSP, 0x6b616e656cULL);
}
