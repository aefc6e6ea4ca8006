/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_esp.c - the ESP chunk rule and worker rule of sync/
 * (docs/protocols.md): the communicate-or-skip decision (cost against
 * gamma steps, delta against theta, the H_max cap) and its refusals; the
 * chunk rule's lone applies with weight 1/n and staleness damping, the
 * bound on sync counts (who is held, who is let go, when, in which
 * order, with which version), joiners and leavers, and the hints, hand
 * computed; then randomized sequences against a reference model.
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>

#include <criterion/criterion.h>

#include "sync.h"
#include "sync_base.h"

/* --- helpers ---------------------------------------------------------- */

/* ESP's rule, whose max_actions is exactly MAXACT. */
static struct kn__sync_rule *rule_new(uint32_t members, uint32_t staleness)
{
	struct kn__sync_params p = { KN_SYNC_ESP, MAXW, members,
				     .staleness = staleness };

	cr_assert_eq(kn__sync_max_actions(&p), MAXACT);
	return rule_of(&p);
}

static int push(struct kn__sync_rule *rule, uint32_t worker, uint64_t clock,
		uint64_t version, double t, struct kn__sync_action *out)
{
	struct kn__sync_event ev = {
		.type = KN__SYNC_EV_PUSH,
		.worker = worker,
		.slot = (uint32_t)(clock & 1),
		.clock = clock,
		.version = version,
		.t = t,
	};

	return kn__sync_rule_event(rule, &ev, out);
}

static int member_event(struct kn__sync_rule *rule, uint32_t type,
			uint32_t worker, double t, struct kn__sync_action *out)
{
	struct kn__sync_event ev = { .type = type, .worker = worker, .t = t };

	return kn__sync_rule_event(rule, &ev, out);
}

static void assert_apply(const struct kn__sync_action *a, uint32_t worker,
			 uint32_t slot, uint64_t version, float weight,
			 float lr_scale)
{
	cr_assert_eq(a->type, KN__SYNC_ACT_APPLY);
	cr_assert_eq(a->version, version, "apply makes %llu, expected %llu",
		     (unsigned long long)a->version,
		     (unsigned long long)version);
	cr_assert_eq(a->ncontrib, 1);
	cr_assert_eq(a->contrib[0].worker, worker);
	cr_assert_eq(a->contrib[0].slot, slot);
	cr_assert_eq(a->contrib[0].weight, weight, "weight %.9g, expected %.9g",
		     a->contrib[0].weight, weight);
	cr_assert_eq(a->lr_scale, lr_scale, "lr_scale %.9g, expected %.9g",
		     a->lr_scale, lr_scale);
}

static void assert_release(const struct kn__sync_action *a, uint32_t worker,
			   uint64_t version, float hint)
{
	cr_assert_eq(a->type, KN__SYNC_ACT_RELEASE);
	cr_assert_eq(a->worker, worker, "release of %u, expected %u", a->worker,
		     worker);
	cr_assert_eq(a->version, version, "release with %llu, expected %llu",
		     (unsigned long long)a->version,
		     (unsigned long long)version);
	cr_assert_eq(a->epoch, 0);
	cr_assert_eq(a->steps, 1);
	cr_assert_eq(a->hint, hint, "worker %u: hint %.9g, expected %.9g",
		     worker, a->hint, hint);
}

/* A push that is applied and released at once, with hint 0. */
static void push_free(struct kn__sync_rule *rule, uint32_t worker,
		      uint64_t clock, double t)
{
	struct kn__sync_action out[MAXACT];
	uint64_t v = kn__sync_rule_version(rule);

	cr_assert_eq(push(rule, worker, clock, v, t, out), 2,
		     "worker %u clock %llu", worker, (unsigned long long)clock);
	assert_release(&out[1], worker, v + 1, 0);
}

/* A push that is applied and held back: no release. */
static void push_held(struct kn__sync_rule *rule, uint32_t worker,
		      uint64_t clock, double t)
{
	struct kn__sync_action out[MAXACT];
	uint64_t v = kn__sync_rule_version(rule);

	cr_assert_eq(push(rule, worker, clock, v, t, out), 1,
		     "worker %u clock %llu", worker, (unsigned long long)clock);
	cr_assert_eq(out[0].type, KN__SYNC_ACT_APPLY);
	cr_assert_eq(out[0].version, v + 1);
}

static struct kn__sync_worker *worker_new(uint32_t max_skip, float gamma,
					  float theta)
{
	return worker_of(&(struct kn__sync_params){ .protocol = KN_SYNC_ESP,
						    .max_workers = MAXW,
						    .members = MAXW,
						    .max_skip = max_skip,
						    .gamma = gamma,
						    .theta = theta },
			 3);
}

static int step(struct kn__sync_worker *w, double seconds, float delta,
		uint32_t *next)
{
	struct kn__sync_worker_event ev = {
		.type = KN__SYNC_WEV_STEP,
		.seconds = seconds,
		.delta_ratio = delta,
	};

	return kn__sync_worker_event(w, &ev, next);
}

static int pushed(struct kn__sync_worker *w, uint32_t *next)
{
	struct kn__sync_worker_event ev = { .type = KN__SYNC_WEV_PUSHED };

	return kn__sync_worker_event(w, &ev, next);
}

static int release(struct kn__sync_worker *w, double rtt, float hint,
		   uint32_t *next)
{
	struct kn__sync_worker_event ev = {
		.type = KN__SYNC_WEV_RELEASE,
		.steps = 1,
		.rtt = rtt,
		.hint = hint,
	};

	return kn__sync_worker_event(w, &ev, next);
}

static void expect_step(struct kn__sync_worker *w, double seconds, float delta,
			uint32_t want)
{
	uint32_t next = 0;

	cr_assert_eq(step(w, seconds, delta, &next), 0);
	cr_assert_eq(next, want, "step %.9g s, delta %.9g: %u, expected %u",
		     seconds, delta, next, want);
}

/*
 * PUSHED, then a release, with no step on the copy between them, that
 * sets the round trip to @rtt and the predicted wait to @hint.
 */
static void sync_with_cost(struct kn__sync_worker *w, double rtt, float hint)
{
	uint32_t next = 0;

	cr_assert_eq(pushed(w, &next), 0);
	/* which of them, by H_max: worker_trains_on_its_copy_while_... */
	cr_assert(next == KN__SYNC_NEXT_STEP || next == KN__SYNC_NEXT_WAIT);
	cr_assert_eq(release(w, rtt, hint, &next), 0);
	cr_assert_eq(next, KN__SYNC_NEXT_STEP);
}

/* --- names, parameters, planner --------------------------------------- */

Test(esp, name_and_room_for_actions)
{
	struct kn__sync_params p = { KN_SYNC_ESP, 8, 8 };

	cr_assert_str_eq(kn__sync_protocol_name(KN_SYNC_ESP), "esp");
	cr_assert_eq(kn__sync_protocol_parse("esp"), KN_SYNC_ESP);
	cr_assert_eq(kn__sync_protocol_parse("ESP"), -EINVAL);
	/* one APPLY and, at most, every worker released */
	cr_assert_eq(kn__sync_max_actions(&p), 9);
	p.max_workers = 1000;
	cr_assert_eq(kn__sync_max_actions(&p), 1001);
}

Test(esp, planner_has_no_plans)
{
	planner_has_no_plans(KN_SYNC_ESP);
}

/* --- the worker rule -------------------------------------------------- */

Test(esp, worker_communicates_at_once_when_cost_is_within_gamma_steps)
{
	struct kn__sync_worker *w = worker_new(0, 0, 0);

	/* never released yet: cost 0, so it pushes after its first step */
	expect_step(w, 0.1, 0, KN__SYNC_NEXT_PUSH);
	/* rtt + hint = 0.5: a step of 0.5 s pays for it, exactly */
	sync_with_cost(w, 0.25, 0.25f);
	expect_step(w, 0.5, 0, KN__SYNC_NEXT_PUSH);
	/* against a shorter step: skip while the round trip and what is
	 * left of the wait cost more than the step */
	sync_with_cost(w, 0.25, 0.25f);
	expect_step(w, 0.125, 0, KN__SYNC_NEXT_STEP); /* 0.25 + 0.125 */
	expect_step(w, nextafter(0.25, 0), 0, KN__SYNC_NEXT_STEP);
	expect_step(w, 0.25, 0, KN__SYNC_NEXT_PUSH); /* 0.25 + 0 */
	/* the round trip is paid whatever the wait */
	sync_with_cost(w, 0.5, 0);
	expect_step(w, 0.25, 0, KN__SYNC_NEXT_STEP);
	expect_step(w, 0.25, 0, KN__SYNC_NEXT_STEP);
	expect_step(w, 0.5, 0, KN__SYNC_NEXT_PUSH);
	/* a free sync is worth it even after a step that took no time */
	sync_with_cost(w, 0, 0);
	expect_step(w, 0, 0, KN__SYNC_NEXT_PUSH);
	kn__sync_worker_destroy(w);

	/* gamma = 2: a cost of two steps is still worth it */
	w = worker_new(0, 2, 0);
	expect_step(w, 0.1, 0, KN__SYNC_NEXT_PUSH);
	sync_with_cost(w, 0.25, 0.25f);
	expect_step(w, 0.25, 0, KN__SYNC_NEXT_PUSH);
	sync_with_cost(w, 0.25, 0.5f);
	expect_step(w, 0.125, 0, KN__SYNC_NEXT_STEP); /* 0.25 + 0.375 */
	expect_step(w, 0.25, 0, KN__SYNC_NEXT_PUSH);  /* 0.25 + 0.125 */
	kn__sync_worker_destroy(w);
}

/*
 * The rule of old kept a release's whole cost until the next push: a
 * worker told to expect a wait of 3 steps skipped until H_max, 8 steps,
 * though the wait was over after 3.  The wait runs down as it trains.
 */
Test(esp, worker_pushes_once_the_predicted_wait_has_run_down)
{
	struct kn__sync_worker *w = worker_new(0, 0, 0);

	expect_step(w, 0.1, 0, KN__SYNC_NEXT_PUSH);
	sync_with_cost(w, 0.01, 0.3f);
	expect_step(w, 0.1, 0, KN__SYNC_NEXT_STEP); /* 0.01 + 0.2 */
	expect_step(w, 0.1, 0, KN__SYNC_NEXT_STEP); /* 0.01 + 0.1 */
	expect_step(w, 0.1, 0, KN__SYNC_NEXT_PUSH); /* 0.01 + 0 */
	/* what is left of the wait at a release is not carried over */
	sync_with_cost(w, 0.01, 0.05f);
	expect_step(w, 0.1, 0, KN__SYNC_NEXT_PUSH);
	kn__sync_worker_destroy(w);
}

/*
 * After a push the worker trains on its copy instead of idling, at most
 * H_max - 1 steps, which count toward its next push: no delta holds
 * more than H_max steps.  H_max = 1 never trains while waiting.
 */
Test(esp, worker_trains_on_its_copy_while_its_push_waits)
{
	uint32_t next = 0;

	for (uint32_t h = 1; h <= 8; h++) {
		struct kn__sync_worker *w = worker_new(h, 0, 0);

		expect_step(w, 0.1, 0, KN__SYNC_NEXT_PUSH);
		cr_assert_eq(pushed(w, &next), 0);
		cr_assert_eq(next,
			     h > 1 ? KN__SYNC_NEXT_STEP : KN__SYNC_NEXT_WAIT);
		for (uint32_t s = 1; s < h; s++) {
			cr_assert_eq(step(w, 0.1, 0, &next), 0);
			cr_assert_eq(next, s + 1 < h ? KN__SYNC_NEXT_STEP
						     : KN__SYNC_NEXT_WAIT);
		}
		/* told to wait: no more steps */
		cr_assert_eq(step(w, 0.1, 0, &next), -EINVAL);
		cr_assert_eq(next, KN__SYNC_NEXT_WAIT);
		/* a costly sync: the step after the release is the H_max-th */
		cr_assert_eq(release(w, 1.0, 1.0f, &next), 0);
		cr_assert_eq(next, KN__SYNC_NEXT_STEP);
		expect_step(w, 0.1, 0, KN__SYNC_NEXT_PUSH);
		kn__sync_worker_destroy(w);
	}

	/* a release that comes early ends the steps on the copy, and those
	 * taken count: H_max 8, 2 while waiting, 6 more */
	{
		struct kn__sync_worker *w = worker_new(8, 0, 0);

		expect_step(w, 0.1, 0, KN__SYNC_NEXT_PUSH);
		cr_assert_eq(pushed(w, &next), 0);
		expect_step(w, 0.1, 0, KN__SYNC_NEXT_STEP);
		expect_step(w, 0.1, 0, KN__SYNC_NEXT_STEP);
		cr_assert_eq(release(w, 1.0, 1.0f, &next), 0);
		for (int s = 0; s < 5; s++)
			expect_step(w, 0.1, 0, KN__SYNC_NEXT_STEP);
		expect_step(w, 0.1, 0, KN__SYNC_NEXT_PUSH);
		kn__sync_worker_destroy(w);
	}
}

Test(esp, worker_skips_while_cost_is_high_and_delta_small)
{
	struct kn__sync_worker *w = worker_new(0, 0, 0.01f);

	expect_step(w, 0.1, 0, KN__SYNC_NEXT_PUSH);
	sync_with_cost(w, 1.0, 0.5f);
	/* H_max = 8 by default: seven skips, then the push is due */
	for (int i = 1; i < 8; i++)
		expect_step(w, 0.1, nextafterf(0.01f, 0), KN__SYNC_NEXT_STEP);
	expect_step(w, 0.1, 0, KN__SYNC_NEXT_PUSH);
	kn__sync_worker_destroy(w);
}

Test(esp, worker_pushes_when_delta_ratio_reaches_theta)
{
	struct kn__sync_worker *w = worker_new(0, 0, 0.01f);

	expect_step(w, 0.1, 0, KN__SYNC_NEXT_PUSH);
	sync_with_cost(w, 1.0, 0.5f);
	expect_step(w, 0.1, nextafterf(0.01f, 0), KN__SYNC_NEXT_STEP);
	expect_step(w, 0.1, 0.01f, KN__SYNC_NEXT_PUSH);
	sync_with_cost(w, 1.0, 0.5f);
	expect_step(w, 0.1, 0.5f, KN__SYNC_NEXT_PUSH);
	/* a ratio to a zero anchor: any change is significant */
	sync_with_cost(w, 1.0, 0.5f);
	expect_step(w, 0.1, INFINITY, KN__SYNC_NEXT_PUSH);
	kn__sync_worker_destroy(w);

	w = worker_new(0, 0, 0.25f);
	expect_step(w, 0.1, 0, KN__SYNC_NEXT_PUSH);
	sync_with_cost(w, 1.0, 0.5f);
	expect_step(w, 0.1, 0.2f, KN__SYNC_NEXT_STEP);
	expect_step(w, 0.1, 0.25f, KN__SYNC_NEXT_PUSH);
	kn__sync_worker_destroy(w);
}

/*
 * theta 0, the default, is off: the ratio to the last model given grows
 * with the model's scale (a model that starts at 0 moves by several
 * times its norm), so no one threshold fits every model, and a push it
 * forces into a wait would idle the worker.  Only cost and H_max count.
 */
Test(esp, worker_ignores_the_delta_ratio_by_default)
{
	struct kn__sync_worker *w = worker_new(0, 0, 0);

	expect_step(w, 0.1, 0, KN__SYNC_NEXT_PUSH);
	sync_with_cost(w, 1.0, 0.5f);
	for (int i = 1; i < 8; i++)
		expect_step(w, 0.1, INFINITY, KN__SYNC_NEXT_STEP);
	expect_step(w, 0.1, INFINITY, KN__SYNC_NEXT_PUSH);
	kn__sync_worker_destroy(w);
}

Test(esp, worker_pushes_at_exactly_the_h_max_th_step)
{
	for (uint32_t h = 1; h <= 12; h++) {
		struct kn__sync_worker *w = worker_new(h, 0, 0);

		expect_step(w, 0.1, 0, KN__SYNC_NEXT_PUSH);
		/* twice: the count starts again at every release */
		for (int round = 0; round < 2; round++) {
			sync_with_cost(w, 1.0, 1.0f);
			for (uint32_t s = 1; s < h; s++)
				expect_step(w, 0.1, 0, KN__SYNC_NEXT_STEP);
			expect_step(w, 0.1, 0, KN__SYNC_NEXT_PUSH);
		}
		kn__sync_worker_destroy(w);
	}
}

Test(esp, worker_refuses_events_that_do_not_fit_and_changes_nothing)
{
	struct kn__sync_worker *w = worker_new(0, 0, 0);
	uint32_t next = 0;
	struct kn__sync_worker_event ev = { .type = 0 };

	/* training, never released */
	cr_assert_eq(pushed(w, &next), -EINVAL, "a PUSHED not asked for");
	cr_assert_eq(step(w, -1, 0, &next), -EINVAL);
	cr_assert_eq(step(w, NAN, 0, &next), -EINVAL);
	cr_assert_eq(step(w, 0.1, NAN, &next), -EINVAL);
	cr_assert_eq(step(w, 0.1, -0.5f, &next), -EINVAL);
	cr_assert_eq(kn__sync_worker_event(w, &ev, &next), -EINVAL);
	ev.type = KN__SYNC_WEV_RELEASE + 1;
	cr_assert_eq(kn__sync_worker_event(w, &ev, &next), -EINVAL);
	cr_assert_eq(kn__sync_worker_event(NULL, &ev, &next), -EINVAL);
	ev.type = KN__SYNC_WEV_STEP;
	cr_assert_eq(kn__sync_worker_event(w, NULL, &next), -EINVAL);
	cr_assert_eq(kn__sync_worker_event(w, &ev, NULL), -EINVAL);
	cr_assert_eq(next, 0);

	/* a joiner's first release, then five skipped steps */
	cr_assert_eq(release(w, 1.0, 0.5f, &next), 0);
	for (int i = 0; i < 5; i++)
		expect_step(w, 0.1, 0, KN__SYNC_NEXT_STEP);
	/* bad costs: had any been taken, the cost or the count would move */
	next = 0;
	cr_assert_eq(release(w, NAN, 0, &next), -EINVAL);
	cr_assert_eq(release(w, 0, NAN, &next), -EINVAL);
	cr_assert_eq(release(w, INFINITY, 0, &next), -EINVAL);
	cr_assert_eq(release(w, 0, INFINITY, &next), -EINVAL);
	cr_assert_eq(release(w, -1, 0, &next), -EINVAL);
	cr_assert_eq(release(w, 0, -1.0f, &next), -EINVAL);
	cr_assert_eq(step(w, 0.1, NAN, &next), -EINVAL);
	cr_assert_eq(next, 0);
	/* so the push is still due at the 8th step, not earlier, not later */
	expect_step(w, 0.1, 0, KN__SYNC_NEXT_STEP);
	expect_step(w, 0.1, 0, KN__SYNC_NEXT_STEP);
	expect_step(w, 0.1, 0, KN__SYNC_NEXT_PUSH);

	/* told to push: neither a step nor a release fits */
	cr_assert_eq(step(w, 10, 1, &next), -EINVAL);
	cr_assert_eq(release(w, 0, 0, &next), -EINVAL);
	cr_assert_eq(next, 0);
	cr_assert_eq(pushed(w, &next), 0);
	cr_assert_eq(next, KN__SYNC_NEXT_STEP);
	/* waiting, on its copy: no second PUSHED, no bad step or release */
	cr_assert_eq(pushed(w, &next), -EINVAL);
	cr_assert_eq(release(w, 0, NAN, &next), -EINVAL);
	cr_assert_eq(step(w, NAN, 0, &next), -EINVAL);
	cr_assert_eq(step(w, 0.1, NAN, &next), -EINVAL);
	cr_assert_eq(next, KN__SYNC_NEXT_STEP);
	/* so H_max - 1 = 7 steps on the copy, then the wait */
	for (int i = 0; i < 6; i++)
		expect_step(w, 0.1, 0, KN__SYNC_NEXT_STEP);
	cr_assert_eq(step(w, 0.1, 0, &next), 0);
	cr_assert_eq(next, KN__SYNC_NEXT_WAIT);
	/* waiting: no steps, no second PUSHED, no bad release */
	cr_assert_eq(step(w, 10, 1, &next), -EINVAL);
	cr_assert_eq(pushed(w, &next), -EINVAL);
	cr_assert_eq(release(w, 0, NAN, &next), -EINVAL);
	cr_assert_eq(step(w, 10, 1, &next), -EINVAL, "still waiting");
	cr_assert_eq(next, KN__SYNC_NEXT_WAIT);
	cr_assert_eq(release(w, 0, 0, &next), 0);
	cr_assert_eq(next, KN__SYNC_NEXT_STEP);
	expect_step(w, 0, 0, KN__SYNC_NEXT_PUSH);
	kn__sync_worker_destroy(w);
}

/* --- randomized, with a fixed seed ------------------------------------ */

/* Uniform in [0, 1). */
static double rndf(void)
{
	return rnd(1u << 24) / (double)(1u << 24);
}

#define NWEVENTS 100000

/*
 * A model of the rule, step by step: the wait runs down by each step,
 * the push comes when the round trip and what is left of the wait cost
 * at most a step, when the ratio reaches theta or at H_max; after it, a
 * random number of steps on the copy (the release may come during any
 * of them) up to H_max - 1.  No delta holds more than H_max steps.
 */
Test(esp, worker_never_takes_more_than_h_max_steps_between_pushes)
{
	const uint32_t hmax[] = { 1, 3, 8 };

	for (size_t k = 0; k < sizeof(hmax) / sizeof(hmax[0]); k++) {
		struct kn__sync_worker *w = worker_new(hmax[k], 0, 0.01f);
		uint32_t steps = 0, by_cost = 0, by_delta = 0, by_cap = 0;
		uint32_t on_copy = 0;
		double rtt = 0, wait = 0;

		rng_state = 0x657370ULL + k;
		for (uint32_t i = 0; i < NWEVENTS; i++) {
			double seconds = 0.2 * rndf();
			/* mostly small deltas: most pushes are not early */
			float delta = rnd(10) ? (float)(0.01 * rndf())
					      : (float)(0.01 + 0.1 * rndf());
			bool c, d, cap;
			uint32_t next = 0, extra;

			cr_assert_eq(step(w, seconds, delta, &next), 0);
			steps++;
			wait = fmax(0, wait - seconds);
			c = rtt + wait <= 1.0 * seconds;
			d = delta >= 0.01f;
			cap = steps >= hmax[k];
			cr_assert_eq(next,
				     c || d || cap ? KN__SYNC_NEXT_PUSH
						   : KN__SYNC_NEXT_STEP,
				     "event %u: cost %.9g step %.9g delta %.9g"
				     " steps %u",
				     i, rtt + wait, seconds, delta, steps);
			cr_assert_leq(steps, hmax[k]);
			if (next == KN__SYNC_NEXT_STEP)
				continue;
			by_cost += c;
			by_delta += !c && d;
			by_cap += !c && !d;
			cr_assert_eq(pushed(w, &next), 0);
			/* the release lands after some steps on the copy */
			extra = rnd(hmax[k]);
			for (uint32_t e = 1; e <= extra; e++)
				expect_step(w, 0.2 * rndf(), 0,
					    e + 1 < hmax[k]
						    ? KN__SYNC_NEXT_STEP
						    : KN__SYNC_NEXT_WAIT);
			on_copy += extra;
			steps = extra;
			/* the cost the server hints at: sometimes cheap */
			rtt = 0.3 * rndf();
			wait = rnd(2) ? 0 : 0.5 * rndf();
			cr_assert_eq(release(w, rtt, (float)wait, &next), 0);
			cr_assert_eq(next, KN__SYNC_NEXT_STEP);
			wait = (float)wait;
		}
		cr_log_info("H_max %u: pushes by cost %u, delta %u, cap %u; "
			    "%u steps on the copy",
			    hmax[k], by_cost, by_delta, by_cap, on_copy);
		cr_assert_gt(by_cost, 100);
		if (hmax[k] > 1) {
			cr_assert_gt(by_delta, 100);
			cr_assert_gt(by_cap, 100);
			cr_assert_gt(on_copy, 1000);
		}
		kn__sync_worker_destroy(w);
	}
}

/* --- the chunk rule: applies ------------------------------------------ */

Test(esp, each_push_is_applied_alone_weighted_one_over_n)
{
	struct kn__sync_rule *rule = rule_new(4, 100);
	struct kn__sync_action out[MAXACT];

	cr_assert_eq(push(rule, 2, 0, 0, 0, out), 2);
	assert_apply(&out[0], 2, 0, 1, 0.25f, 1.0f);
	assert_release(&out[1], 2, 1, 0);
	cr_assert_eq(push(rule, 0, 1, 1, 0, out), 2);
	assert_apply(&out[0], 0, 1, 2, 0.25f, 1.0f);
	/* the weight follows the membership */
	cr_assert_eq(member_event(rule, KN__SYNC_EV_JOIN, 5, 0, out), 1);
	assert_release(&out[0], 5, 2, 0);
	cr_assert_eq(push(rule, 5, 0, 2, 0, out), 2);
	assert_apply(&out[0], 5, 0, 3, 1.0f / 5.0f, 1.0f);
	cr_assert_eq(member_event(rule, KN__SYNC_EV_LEAVE, 0, 0, out), 0);
	cr_assert_eq(member_event(rule, KN__SYNC_EV_LEAVE, 1, 0, out), 0);
	cr_assert_eq(push(rule, 3, 0, 3, 0, out), 2);
	assert_apply(&out[0], 3, 0, 4, 1.0f / 3.0f, 1.0f);
	cr_assert_eq(member_event(rule, KN__SYNC_EV_LEAVE, 2, 0, out), 0);
	cr_assert_eq(member_event(rule, KN__SYNC_EV_LEAVE, 3, 0, out), 0);
	cr_assert_eq(push(rule, 5, 1, 4, 0, out), 2);
	assert_apply(&out[0], 5, 1, 5, 1.0f, 1.0f);
	cr_assert_eq(kn__sync_rule_version(rule), 5);
	kn__sync_rule_destroy(rule);
}

Test(esp, staleness_damps_the_learning_rate)
{
	struct kn__sync_rule *rule = rule_new(4, 100);
	struct kn__sync_action out[MAXACT];

	for (uint64_t v = 0; v < 3; v++) {
		cr_assert_eq(push(rule, 0, v, v, 0, out), 2);
		assert_apply(&out[0], 0, v & 1, v + 1, 0.25f, 1.0f);
	}
	/* tau = 0, 1, 2, 3, then 7: in rounds of 4 pushes, only the last
	 * is older than a round (7/4) */
	cr_assert_eq(push(rule, 1, 0, 3, 0, out), 2);
	assert_apply(&out[0], 1, 0, 4, 0.25f, 1.0f);
	cr_assert_eq(push(rule, 2, 0, 3, 0, out), 2);
	assert_apply(&out[0], 2, 0, 5, 0.25f, 1.0f);
	cr_assert_eq(push(rule, 3, 0, 3, 0, out), 2);
	assert_apply(&out[0], 3, 0, 6, 0.25f, 1.0f);
	cr_assert_eq(push(rule, 1, 1, 3, 0, out), 2);
	assert_apply(&out[0], 1, 1, 7, 0.25f, 1.0f);
	cr_assert_eq(push(rule, 2, 1, 0, 0, out), 2);
	assert_apply(&out[0], 2, 1, 8, 0.25f, 1.0f / (7.0f / 4.0f));
	assert_release(&out[1], 2, 8, 0);
	kn__sync_rule_destroy(rule);
}

/* --- the chunk rule: the bound ---------------------------------------- */

Test(esp, a_worker_too_far_ahead_is_held_until_the_slowest_pushes)
{
	struct kn__sync_rule *rule = rule_new(3, 2);
	struct kn__sync_action out[MAXACT];
	struct kn__sync_event tick = { .type = KN__SYNC_EV_TIMER, .t = 1 };
	struct kn__sync_event timing = {
		.type = KN__SYNC_EV_TIMING,
		.worker = 2,
		.value = 0.5,
	};

	/* s_e = 2: worker 0 may be 2 pushes ahead, not 3 */
	push_free(rule, 0, 0, 0);
	push_free(rule, 0, 1, 0);
	push_held(rule, 0, 2, 0);
	/* worker 1 pushing does not help: worker 2 is still at 0 */
	push_free(rule, 1, 0, 0);
	push_free(rule, 1, 1, 0);
	cr_assert_eq(kn__sync_rule_event(rule, &tick, out), 0);
	cr_assert_eq(kn__sync_rule_event(rule, &timing, out), 0);
	/* the slowest pushes: worker 0 goes, with the version of now */
	cr_assert_eq(push(rule, 2, 0, 0, 0, out), 3);
	assert_apply(&out[0], 2, 0, 6, 1.0f / 3.0f, 1.0f / (5.0f / 3.0f));
	assert_release(&out[1], 0, 6, 0);
	assert_release(&out[2], 2, 6, 0);
	cr_assert_eq(kn__sync_rule_version(rule), 6);
	kn__sync_rule_destroy(rule);
}

Test(esp, releases_ascend_by_worker_id_with_the_pusher_in_its_place)
{
	struct kn__sync_rule *rule = rule_new(5, 1);
	struct kn__sync_action out[MAXACT];

	push_free(rule, 1, 0, 0);
	push_free(rule, 3, 0, 0);
	push_free(rule, 4, 0, 0);
	/* held in the order 4, 3, 1 */
	push_held(rule, 4, 1, 0);
	push_held(rule, 3, 1, 0);
	push_held(rule, 1, 1, 0);
	/* P_min stays 0 while worker 2 has not pushed */
	push_free(rule, 0, 0, 0);
	cr_assert_eq(kn__sync_rule_version(rule), 7);
	cr_assert_eq(push(rule, 2, 0, 7, 0, out), 5);
	assert_apply(&out[0], 2, 0, 8, 0.2f, 1.0f);
	for (uint32_t k = 0; k < 4; k++)
		assert_release(&out[1 + k], 1 + k, 8, 0);
	kn__sync_rule_destroy(rule);
}

Test(esp, a_leave_of_the_slowest_releases_the_held)
{
	struct kn__sync_rule *rule = rule_new(4, 2);
	struct kn__sync_action out[MAXACT];

	push_free(rule, 0, 0, 0);
	push_free(rule, 0, 1, 0);
	push_held(rule, 0, 2, 0);
	push_free(rule, 1, 0, 0);
	push_free(rule, 1, 1, 0);
	/* 3 and 2 are both at 0: one leaving is not enough */
	cr_assert_eq(member_event(rule, KN__SYNC_EV_LEAVE, 3, 0, out), 0);
	cr_assert_eq(member_event(rule, KN__SYNC_EV_LEAVE, 2, 0, out), 1);
	assert_release(&out[0], 0, 5, 0);

	/* a held worker that leaves is not released, then or later */
	push_free(rule, 0, 3, 0); /* 4 against P_min 2 */
	push_held(rule, 0, 4, 0);
	cr_assert_eq(member_event(rule, KN__SYNC_EV_LEAVE, 0, 0, out), 0);
	push_free(rule, 1, 2, 0);
	cr_assert_eq(push(rule, 0, 5, 8, 0, out), -EINVAL, "not a member");
	/* rejoined, it starts afresh: its clock from 0, not held */
	cr_assert_eq(member_event(rule, KN__SYNC_EV_JOIN, 0, 0, out), 1);
	assert_release(&out[0], 0, 8, 0);
	push_free(rule, 0, 0, 0);
	cr_assert_eq(kn__sync_rule_version(rule), 9);
	kn__sync_rule_destroy(rule);
}

Test(esp, a_joiner_starts_level_with_the_slowest_and_holds_no_one)
{
	struct kn__sync_rule *rule = rule_new(2, 2);
	struct kn__sync_action out[MAXACT];

	for (uint64_t c = 0; c < 5; c++) {
		push_free(rule, 0, c, 0);
		push_free(rule, 1, c, 0);
	}
	cr_assert_eq(member_event(rule, KN__SYNC_EV_JOIN, 3, 0, out), 1);
	assert_release(&out[0], 3, 10, 0);
	/* counted from 0, the joiner would hold worker 0 here already */
	push_free(rule, 0, 5, 0);
	push_free(rule, 0, 6, 0);
	push_held(rule, 0, 7, 0);
	/* P_min is 5 while the joiner has not pushed: 0 stays held */
	push_free(rule, 1, 5, 0);
	cr_assert_eq(push(rule, 3, 0, 10, 0, out), 3);
	assert_apply(&out[0], 3, 0, 15, 1.0f / 3.0f, 1.0f / (4.0f / 3.0f));
	assert_release(&out[1], 0, 15, 0);
	assert_release(&out[2], 3, 15, 0);
	kn__sync_rule_destroy(rule);

	/* the first member of an empty rule is released at once too */
	rule = rule_new(0, 2);
	cr_assert_eq(member_event(rule, KN__SYNC_EV_JOIN, 4, 0, out), 1);
	assert_release(&out[0], 4, 0, 0);
	push_free(rule, 4, 0, 0);
	push_free(rule, 4, 1, 0);
	kn__sync_rule_destroy(rule);
}

Test(esp, a_held_worker_cannot_push_and_refusals_change_nothing)
{
	struct kn__sync_rule *rule = rule_new(2, 1);
	struct kn__sync_action out[MAXACT];

	push_free(rule, 0, 0, 0);
	push_held(rule, 0, 1, 0);
	/* it has not been released: a push from it breaks the protocol */
	cr_assert_eq(push(rule, 0, 2, 2, 0, out), -EINVAL);
	/* a time that is not a time */
	cr_assert_eq(push(rule, 1, 0, 2, NAN, out), -EINVAL);
	cr_assert_eq(push(rule, 1, 0, 2, INFINITY, out), -EINVAL);
	/* the common refusals */
	cr_assert_eq(push(rule, 1, 0, 3, 0, out), -EINVAL, "future");
	cr_assert_eq(push(rule, 2, 0, 0, 0, out), -EINVAL, "non-member");
	cr_assert_eq(push(rule, MAXW, 0, 0, 0, out), -EINVAL);
	cr_assert_eq(kn__sync_rule_version(rule), 2);
	/* none of it counted: clock 0 is new for 1, and 0 is still held */
	cr_assert_eq(push(rule, 1, 0, 2, 0, out), 3);
	assert_apply(&out[0], 1, 0, 3, 0.5f, 1.0f);
	assert_release(&out[1], 0, 3, 0);
	assert_release(&out[2], 1, 3, 0);
	cr_assert_eq(push(rule, 1, 0, 3, 0, out), -EINVAL, "replay");
	kn__sync_rule_destroy(rule);
}

/* --- the chunk rule: hints -------------------------------------------- */

/* One push, released with the others in @rel (ascending), with hints. */
static void push_hint(struct kn__sync_rule *rule, uint32_t worker,
		      uint64_t clock, double t, int nrel, const uint32_t *rel,
		      const float *hints)
{
	struct kn__sync_action out[MAXACT];
	uint64_t v = kn__sync_rule_version(rule);

	cr_assert_eq(push(rule, worker, clock, v, t, out), 1 + nrel,
		     "worker %u at t %.9g", worker, t);
	for (int k = 0; k < nrel; k++)
		assert_release(&out[1 + k], rel[k], v + 1, hints[k]);
}

#define PUSH1(rule, worker, clock, t, hint)                                \
	push_hint(rule, worker, clock, t, 1, (const uint32_t[]){ worker }, \
		  (const float[]){ hint })

Test(esp, hints_predict_the_slowest_members_next_push)
{
	struct kn__sync_rule *rule = rule_new(2, 2);
	struct kn__sync_action out[MAXACT];

	/* s_e = 2; 1 pushes at 1, 5, 8.5; 0 at 2, 5.5, 6, 6.5, 7 */
	PUSH1(rule, 1, 0, 1.0, 0);   /* P 0/1: next within the bound */
	PUSH1(rule, 0, 0, 2.0, 0);   /* 1/1 */
	PUSH1(rule, 1, 1, 5.0, 0);   /* 1/2; worker 1's interval: 4 */
	PUSH1(rule, 0, 1, 5.5, 0);   /* 2/2 */
	PUSH1(rule, 0, 2, 6.0, 0);   /* 3/2: its next is 4/2, allowed */
	PUSH1(rule, 0, 3, 6.5, 2.5); /* 4/2: its next waits for 1 at 5+4 */
	push_hint(rule, 0, 4, 7.0, 0, NULL, NULL); /* 5/2: held */
	/*
	 * 5/3: both go.  Worker 1's interval is now 0.5 * 4 + 0.5 * 3.5 =
	 * 3.75 (not the last gap, 3.5, nor the first, 4), so it is expected
	 * at 8.5 + 3.75, and worker 0's next push (6/3) will wait for that.
	 */
	push_hint(rule, 1, 2, 8.5, 2, (const uint32_t[]){ 0, 1 },
		  (const float[]){ 3.75f, 0 });
	kn__sync_rule_destroy(rule);

	/* s_e = 1: a wait already over, and no estimate yet, are 0 */
	rule = rule_new(2, 1);
	PUSH1(rule, 0, 0, 1.0, 0);  /* 1/0: worker 1 has no time yet */
	PUSH1(rule, 1, 0, 2.0, 0);  /* 1/1 */
	PUSH1(rule, 0, 1, 3.0, 0);  /* 2/1: 1 has no interval yet */
	PUSH1(rule, 1, 1, 4.0, 0);  /* 2/2; 0's interval 2, 1's 2 */
	PUSH1(rule, 1, 2, 9.0, 0);  /* 2/3: 0 was due at 3 + 2 < 9 */
	PUSH1(rule, 0, 2, 9.5, 0);  /* 3/3; 0's interval 4.25 */
	PUSH1(rule, 0, 3, 10, 2.5); /* 4/3: 1 due at 9 + 3.5 */
	kn__sync_rule_destroy(rule);

	/* s_e = 1: a time that goes back is a gap of 0 */
	rule = rule_new(2, 1);
	PUSH1(rule, 1, 0, 1.0, 0);
	PUSH1(rule, 0, 0, 1.0, 0);
	PUSH1(rule, 1, 1, 3.0, 0);    /* 1's interval: 2 */
	PUSH1(rule, 0, 1, 3.0, 0);    /* 0's interval: 2 */
	PUSH1(rule, 1, 2, 2.5, 2.5f); /* 1's: 1, not 0.75; 0 due at 3 + 2 */
	PUSH1(rule, 0, 2, 4.0, 0);
	PUSH1(rule, 0, 3, 3.25, 0.25f); /* 1 due at 2.5 + 1 */
	kn__sync_rule_destroy(rule);

	/* ties go to the smallest id; a LEAVE's hint is at its own time */
	rule = rule_new(3, 2);
	for (uint32_t w = 0; w < 3; w++)
		PUSH1(rule, w, 0, 0, 0);
	PUSH1(rule, 1, 1, 2.0, 0); /* interval 2: due at 4 */
	PUSH1(rule, 0, 1, 4.0, 0); /* interval 4: due at 8 */
	PUSH1(rule, 2, 1, 5.0, 0);
	PUSH1(rule, 2, 2, 6.0, 0);
	/* 0 and 1 are both slowest: 0 (due at 8) is the one waited for */
	PUSH1(rule, 2, 3, 7.0, 1.0f);
	push_hint(rule, 2, 4, 7.5, 0, NULL, NULL); /* held */
	PUSH1(rule, 0, 2, 8.0, 0); /* interval 0.5 * 4 + 0.5 * 4 = 4 */
	cr_assert_eq(member_event(rule, KN__SYNC_EV_LEAVE, 1, 9.0, out), 1);
	/* 2 at 5 against 0 at 3: its next waits for 0, due at 8 + 4 */
	assert_release(&out[0], 2, 10, 3.0f);
	kn__sync_rule_destroy(rule);
}

/* --- the chunk rule: rounds while the step times are even ------------- */

static void timing(struct kn__sync_rule *rule, uint32_t worker, double value)
{
	struct kn__sync_action out[MAXACT];
	struct kn__sync_event ev = {
		.type = KN__SYNC_EV_TIMING,
		.worker = worker,
		.value = value,
	};

	cr_assert_eq(kn__sync_rule_event(rule, &ev, out), 0);
}

/* Each of the first @n members reports @value, then member 0 @last. */
static void timings(struct kn__sync_rule *rule, uint32_t n, double value,
		    double last)
{
	for (uint32_t w = 1; w < n; w++)
		timing(rule, w, value);
	timing(rule, 0, last);
}

Test(esp, even_step_times_make_rounds)
{
	struct kn__sync_rule *rule = rule_new(3, 2);
	struct kn__sync_action out[MAXACT];

	/* within 1.5x: 0.1 and 0.15 are even */
	timings(rule, 3, 0.1, 0.15);
	/* each is held until the round's last push, then all go */
	push_held(rule, 1, 0, 0);
	push_held(rule, 0, 0, 0);
	cr_assert_eq(push(rule, 2, 0, 0, 0, out), 4);
	assert_apply(&out[0], 2, 0, 3, 1.0f / 3.0f, 1.0f);
	for (uint32_t w = 0; w < 3; w++)
		assert_release(&out[1 + w], w, 3, 0);
	kn__sync_rule_destroy(rule);
}

Test(esp, uneven_step_times_keep_the_bound)
{
	struct kn__sync_rule *rule = rule_new(3, 2);

	/* beyond 1.5x: 0.1 and 0.16 are not even */
	timings(rule, 3, 0.1, 0.16);
	push_free(rule, 0, 0, 0);
	push_free(rule, 0, 1, 0);
	push_held(rule, 0, 2, 0); /* s_e = 2 */
	kn__sync_rule_destroy(rule);

	/* a member without a step time: no rounds either */
	rule = rule_new(3, 2);
	timing(rule, 0, 0.1);
	timing(rule, 1, 0.1);
	timing(rule, 1, 0.1);
	push_free(rule, 0, 0, 0);
	kn__sync_rule_destroy(rule);
}

/*
 * One slow step keeps the workers uneven after their means are even
 * again: the peak falls by 1/8 of the gap a timing, so a step 4 times
 * as long (0.4 against 0.1) takes 14 timings to fall within 1.5x.
 */
Test(esp, a_slow_step_keeps_the_workers_uneven_for_a_while)
{
	struct kn__sync_rule *rule = rule_new(2, 2);

	timings(rule, 2, 0.1, 0.1);
	timings(rule, 2, 0.1, 0.4);
	for (int k = 0; k < 13; k++)
		timings(rule, 2, 0.1, 0.1); /* peak 0.1 + 0.3 (7/8)^k */
	push_free(rule, 0, 0, 0);	    /* 0.153 > 0.15: the bound */
	timings(rule, 2, 0.1, 0.1);	    /* 0.146: rounds */
	push_held(rule, 0, 1, 0);
	kn__sync_rule_destroy(rule);
}

/* Rounds start while a worker is ahead: it waits for the others. */
Test(esp, a_worker_ahead_when_rounds_start_waits_until_caught_up)
{
	struct kn__sync_rule *rule = rule_new(3, 3);
	struct kn__sync_action out[MAXACT];

	push_free(rule, 0, 0, 0);
	push_free(rule, 0, 1, 0); /* 2 ahead */
	timings(rule, 3, 0.1, 0.1);
	push_held(rule, 0, 2, 0); /* at 3: until P_min is 3 */
	/* the other two go round by round, 0 stays held */
	for (uint64_t c = 0; c < 2; c++) {
		uint64_t v = kn__sync_rule_version(rule);

		push_held(rule, 1, c, 0);
		cr_assert_eq(push(rule, 2, c, v, 0, out), 3);
		assert_release(&out[1], 1, v + 2, 0);
		assert_release(&out[2], 2, v + 2, 0);
	}
	push_held(rule, 1, 2, 0);
	cr_assert_eq(push(rule, 2, 2, 8, 0, out), 4);
	for (uint32_t w = 0; w < 3; w++)
		assert_release(&out[1 + w], w, 9, 0);
	kn__sync_rule_destroy(rule);
}

/* When rounds stop the held within s_e go at the next event. */
Test(esp, when_rounds_stop_the_held_go_at_the_next_event)
{
	struct kn__sync_rule *rule = rule_new(3, 2);
	struct kn__sync_action out[MAXACT];

	timings(rule, 3, 0.1, 0.1);
	push_held(rule, 0, 0, 0);
	push_held(rule, 1, 0, 0);
	timings(rule, 3, 0.1, 1.0); /* 0's EMA: 0.55, uneven */
	/* 2 is within the bound again, and releases the held with it */
	cr_assert_eq(push(rule, 2, 0, 0, 0, out), 4);
	for (uint32_t w = 0; w < 3; w++)
		assert_release(&out[1 + w], w, 3, 0);
	/* a worker that was held in rounds is now free within s_e */
	push_free(rule, 0, 1, 0);
	kn__sync_rule_destroy(rule);
}

/* A joiner has no step time: the bound until the next comparison. */
Test(esp, a_join_ends_the_rounds)
{
	struct kn__sync_rule *rule = rule_new(2, 2);
	struct kn__sync_action out[MAXACT];

	timings(rule, 2, 0.1, 0.1);
	push_held(rule, 0, 0, 0);
	cr_assert_eq(member_event(rule, KN__SYNC_EV_JOIN, 2, 0, out), 2);
	assert_release(&out[0], 0, 1, 0); /* let go: the bound again */
	assert_release(&out[1], 2, 1, 0);
	push_free(rule, 0, 1, 0);
	/* every member reports even times: rounds again */
	timings(rule, 3, 0.1, 0.1);
	push_held(rule, 0, 2, 0);
	kn__sync_rule_destroy(rule);
}

/* In rounds a worker alone at P_min waits for nobody: hint 0. */
Test(esp, a_lone_worker_in_rounds_is_told_no_wait)
{
	struct kn__sync_rule *rule = rule_new(1, 2);
	struct kn__sync_action out[MAXACT];

	timing(rule, 0, 0.1);
	push_free(rule, 0, 0, 1.0);
	/* an interval of 1 s would predict a wait were it the slowest */
	cr_assert_eq(push(rule, 0, 1, 1, 2.0, out), 2);
	assert_release(&out[1], 0, 2, 0);
	cr_assert_eq(push(rule, 0, 2, 2, 3.0, out), 2);
	assert_release(&out[1], 0, 3, 0);
	kn__sync_rule_destroy(rule);
}

/* --- randomized, against a reference model ---------------------------- */

#define NEVENTS 50000

/* What the model knows of a worker. */
struct model_worker {
	bool member;
	bool held;	 /* owed a release */
	bool clocked;	 /* pushed since it joined */
	uint64_t clock;	 /* last accepted clock */
	uint64_t p;	 /* sync count: pushes since it joined + its base */
	uint64_t base_v; /* the version it was last released with */
	double last_t, interval;
	double step; /* EMA of its TIMING values, 0: none */
	double peak; /* their peak, falling by 1/8 of the gap */
};

struct model {
	struct model_worker w[MAXW];
	uint64_t version;
	uint32_t s;
	bool balanced; /* rounds: the members' step times are even */
	uint32_t timings;
};

/* The bound in force: 0 in rounds, else s_e. */
static uint64_t model_lead(const struct model *m)
{
	return m->balanced ? 0 : m->s;
}

/* docs/protocols.md's test of even step times, written out again. */
static bool model_balanced(const struct model *m)
{
	double lo = 0, hi = 0;
	bool first = true;

	for (uint32_t k = 0; k < MAXW; k++) {
		if (!m->w[k].member)
			continue;
		if (m->w[k].step <= 0)
			return false;
		if (first || m->w[k].step < lo)
			lo = m->w[k].step;
		if (first || m->w[k].peak > hi)
			hi = m->w[k].peak;
		first = false;
	}
	return hi <= 1.5 * lo;
}

static uint64_t model_pmin(const struct model *m, uint32_t skip, bool *any)
{
	uint64_t pmin = UINT64_MAX;

	*any = false;
	for (uint32_t k = 0; k < MAXW; k++)
		if (m->w[k].member && k != skip && m->w[k].p < pmin) {
			pmin = m->w[k].p;
			*any = true;
		}
	return pmin;
}

/* docs/protocols.md's interval, written out again. */
static void model_timing(struct model_worker *w, double t)
{
	double gap = t > w->last_t ? t - w->last_t : 0;

	if (w->clocked)
		w->interval =
			w->interval > 0 ? 0.5 * w->interval + 0.5 * gap : gap;
	w->last_t = t;
}

/* docs/protocols.md's hint, written out again. */
static float model_hint(const struct model *m, uint32_t i, uint64_t pmin,
			double t)
{
	const struct model_worker *s = NULL;
	double wait;

	if (m->w[i].p + 1 - pmin <= model_lead(m))
		return 0;
	/* the slowest but @i: alone at P_min, its push waits for nobody */
	for (uint32_t k = 0; k < MAXW && !s; k++)
		if (k != i && m->w[k].member && m->w[k].p == pmin)
			s = &m->w[k];
	if (!s)
		return 0;
	wait = s->last_t + s->interval - t;
	return wait > 0 ? (float)wait : 0;
}

/*
 * Check the releases in @out[0 .. n) against the bound in force: each is
 * a member owed one and within the lead of the slowest, they ascend, and
 * after them nobody within the lead is still held.
 */
static uint32_t check_releases(struct model *m, const struct kn__sync_action *a,
			       int n, double t, uint32_t event,
			       uint32_t *nonzero)
{
	bool any;
	uint64_t pmin = model_pmin(m, UINT32_MAX, &any);

	for (int k = 0; k < n; k++) {
		struct model_worker *w;

		cr_assert_eq(a[k].type, KN__SYNC_ACT_RELEASE);
		cr_assert_lt(a[k].worker, MAXW);
		if (k > 0)
			cr_assert_gt(a[k].worker, a[k - 1].worker,
				     "event %u: releases out of order", event);
		w = &m->w[a[k].worker];
		cr_assert(w->member && w->held,
			  "event %u: worker %u released, not owed one", event,
			  a[k].worker);
		cr_assert_leq(w->p - pmin, model_lead(m),
			      "event %u: worker %u released %llu ahead", event,
			      a[k].worker, (unsigned long long)(w->p - pmin));
		cr_assert_eq(a[k].version, m->version);
		cr_assert_eq(a[k].epoch, 0);
		cr_assert_eq(a[k].steps, 1);
		cr_assert_eq(a[k].hint, model_hint(m, a[k].worker, pmin, t),
			     "event %u: worker %u hint %.9g", event,
			     a[k].worker, a[k].hint);
		*nonzero += a[k].hint > 0;
		w->held = false;
		w->base_v = m->version;
	}
	/* released as soon as the bound allows, and the bound holds */
	for (uint32_t k = 0; k < MAXW; k++) {
		const struct model_worker *w = &m->w[k];

		if (!w->member)
			continue;
		cr_assert_leq(w->p - pmin, m->s + 1);
		if (w->held)
			cr_assert_gt(w->p - pmin, model_lead(m),
				     "event %u: worker %u held at %llu ahead",
				     event, k,
				     (unsigned long long)(w->p - pmin));
	}
	return (uint32_t)n;
}

/* A worker allowed to push, the faster the higher its id. */
static uint32_t pick_pusher(const struct model *m)
{
	uint32_t weight[MAXW], total = 0, r;

	for (uint32_t k = 0; k < MAXW; k++) {
		weight[k] =
			m->w[k].member && !m->w[k].held ? (k + 1) * (k + 1) : 0;
		total += weight[k];
	}
	if (!total)
		return rnd(MAXW + 1);
	r = rnd(total);
	for (uint32_t k = 0;; k++) {
		if (r < weight[k])
			return k;
		r -= weight[k];
	}
}

static void randomized(uint32_t staleness, uint64_t seed)
{
	struct kn__sync_rule *rule = rule_new(MAXW / 2, staleness);
	struct kn__sync_action out[MAXACT];
	struct model m = { .s = staleness ? staleness : 3 };
	uint8_t *applied = calloc(NEVENTS, 1);
	uint32_t npush = 0, refused = 0, held = 0, freed = 0, joins = 0;
	uint32_t leaves = 0, nonzero = 0, rounds = 0, balanced = 0;
	double t = 0;

	cr_assert_not_null(applied);
	rng_state = seed;
	for (uint32_t k = 0; k < MAXW / 2; k++)
		m.w[k].member = true;

	for (uint32_t i = 0; i < NEVENTS; i++) {
		struct kn__sync_event ev = { .t = t };
		struct model_worker *w;
		uint32_t r = rnd(100);
		bool valid, any;
		uint64_t pmin;
		int n;

		t += 0.001 * (1 + rnd(100));
		ev.t = t;
		if (r < 80) {
			ev.type = KN__SYNC_EV_PUSH;
			ev.worker = rnd(10) ? pick_pusher(&m) : rnd(MAXW + 1);
			w = &m.w[ev.worker < MAXW ? ev.worker : 0];
			ev.slot = rnd(2);
			ev.version = w->base_v > m.version ? 0 : w->base_v;
			if (!rnd(8)) /* computed from an older copy */
				ev.version -= ev.version ? 1 : 0;
			/* clocks only have to grow */
			ev.clock = w->clocked ? w->clock + 1 + !rnd(8) : 0;
			switch (rnd(50)) {
			case 0:
				ev.version = m.version + 1;
				break;
			case 1: /* a replay, if it pushed */
				ev.clock = w->clock;
				break;
			case 2:
				ev.t = NAN;
				break;
			}
		} else if ((i / 5000) % 2) {
			/* a calm stretch: timings, few joins, rounds */
			ev.type = r < 97   ? KN__SYNC_EV_TIMING
				  : r < 98 ? KN__SYNC_EV_LEAVE
				  : r < 99 ? KN__SYNC_EV_JOIN
					   : KN__SYNC_EV_TIMER;
			ev.worker = rnd(MAXW + 1);
			/* mostly even step times, now and then not */
			ev.value = rnd(32) ? 0.5 : 0.5 + 0.25 * rnd(5);
		} else {
			ev.type = r < 89   ? KN__SYNC_EV_LEAVE
				  : r < 98 ? KN__SYNC_EV_JOIN
				  : r < 99 ? KN__SYNC_EV_TIMING
					   : KN__SYNC_EV_TIMER;
			ev.worker = rnd(MAXW + 1);
			ev.value = 0.5;
		}
		w = &m.w[ev.worker < MAXW ? ev.worker : 0];

		switch (ev.type) {
		case KN__SYNC_EV_PUSH:
			valid = ev.worker < MAXW && w->member && !w->held &&
				ev.version <= m.version &&
				!(w->clocked && ev.clock <= w->clock) &&
				isfinite(ev.t);
			break;
		case KN__SYNC_EV_JOIN:
			valid = ev.worker < MAXW && !w->member;
			break;
		case KN__SYNC_EV_LEAVE:
			valid = ev.worker < MAXW && w->member;
			break;
		default:
			valid = ev.type == KN__SYNC_EV_TIMER ||
				ev.worker < MAXW;
			break;
		}

		n = kn__sync_rule_event(rule, &ev, out);
		if (!valid) {
			cr_assert_eq(n, -EINVAL, "event %u type %u worker %u",
				     i, ev.type, ev.worker);
			cr_assert_eq(kn__sync_rule_version(rule), m.version);
			refused++;
			continue;
		}
		cr_assert_geq(n, 0, "event %u type %u worker %u: %d", i,
			      ev.type, ev.worker, n);

		switch (ev.type) {
		case KN__SYNC_EV_PUSH: {
			uint32_t nmembers = 0;
			uint64_t tau = m.version - ev.version;
			bool round;

			for (uint32_t k = 0; k < MAXW; k++)
				nmembers += m.w[k].member;
			model_timing(w, ev.t);
			w->clocked = true;
			w->clock = ev.clock;
			w->p++;
			w->held = true;
			m.version++;
			/* in rounds, ahead of the slowest: held for its round */
			pmin = model_pmin(&m, UINT32_MAX, &any);
			round = m.balanced && w->p > pmin && w->p - pmin <= m.s;
			rounds += round;
			cr_assert_geq(n, 1);
			assert_apply(
				&out[0], ev.worker, ev.slot, m.version,
				1.0f / (float)nmembers,
				(float)tau / (float)nmembers > 1
					? 1.0f / ((float)tau / (float)nmembers)
					: 1.0f);
			cr_assert_eq(applied[npush]++, 0);
			npush++;
			cr_assert_eq(kn__sync_rule_version(rule), m.version);
			check_releases(&m, out + 1, n - 1, ev.t, i, &nonzero);
			cr_assert(!round || w->held,
				  "event %u: worker %u released in rounds", i,
				  ev.worker);
			held += w->held;
			freed += (uint32_t)(n - 1) - !w->held;
			break;
		}
		case KN__SYNC_EV_JOIN:
			/* no step time from the joiner: the bound, for now */
			m.balanced = false;
			m.timings = 0;
			pmin = model_pmin(&m, ev.worker, &any);
			*w = (struct model_worker){
				.member = true,
				.held = true,
				.p = any ? pmin : 0,
			};
			cr_assert_geq(n, 1, "the joiner is released");
			check_releases(&m, out, n, ev.t, i, &nonzero);
			cr_assert(!w->held);
			joins++;
			break;
		case KN__SYNC_EV_LEAVE:
			w->member = false;
			w->held = false;
			freed += check_releases(&m, out, n, ev.t, i, &nonzero);
			leaves++;
			break;
		case KN__SYNC_EV_TIMING:
			cr_assert_eq(n, 0);
			if (!w->member)
				break;
			w->step = w->step > 0 ? 0.5 * w->step + 0.5 * ev.value
					      : ev.value;
			if (ev.value >= w->peak)
				w->peak = ev.value;
			else
				w->peak += (ev.value - w->peak) / 8;
			{
				uint32_t nmembers = 0;

				for (uint32_t k = 0; k < MAXW; k++)
					nmembers += m.w[k].member;
				if (++m.timings >= nmembers) {
					m.timings = 0;
					m.balanced = model_balanced(&m);
					balanced += m.balanced;
				}
			}
			break;
		default:
			cr_assert_eq(n, 0);
			break;
		}
	}

	for (uint32_t id = 0; id < npush; id++)
		cr_assert_eq(applied[id], 1, "push %u", id);
	cr_log_info("s_e %u: %u pushes, %u held, %u let go by others, "
		    "%u joins, %u leaves, %u refusals, %u hints > 0, "
		    "%u held for their round, %u comparisons found them even",
		    m.s, npush, held, freed, joins, leaves, refused, nonzero,
		    rounds, balanced);
	/* the sequence exercised what it is meant to */
	cr_assert_gt(npush, 30000);
	cr_assert_gt(held, 1000, "only %u held", held);
	cr_assert_gt(freed, 1000, "only %u let go by others", freed);
	cr_assert_gt(joins, 1000);
	cr_assert_gt(leaves, 1000);
	cr_assert_gt(refused, 1000);
	cr_assert_gt(nonzero, 500, "only %u hints > 0", nonzero);
	cr_assert_gt(rounds, 1000, "only %u held for their round", rounds);
	cr_assert_eq(kn__sync_rule_version(rule), npush);
	free(applied);
	kn__sync_rule_destroy(rule);
}

Test(esp, randomized_sequences_match_the_model)
{
	randomized(1, 0x6b616e656cULL);
	randomized(2, 0x65737031ULL);
	randomized(0, 0x65737032ULL); /* the default, 3 */
	randomized(5, 0x65737033ULL);
}
