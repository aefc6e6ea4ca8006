/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sync_test.c - what the BSP and ASP suites share (sync_test.h): making a
 * chunk rule and feeding it events, the checks both protocols pass the
 * same way (refusals, TIMING and TIMER, the planner without plans, the
 * worker rule that communicates after every step), and randomized event
 * sequences checked against a reference model of docs/protocols.md.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "sync_test.h"

/* --- helpers ---------------------------------------------------------- */

struct kn__sync_rule *rule_of(const struct kn__sync_params *p)
{
	struct kn__sync_rule *rule = NULL;

	cr_assert_eq(kn__sync_rule_create(p, &rule), 0);
	cr_assert_not_null(rule);
	cr_assert_leq(kn__sync_max_actions(p), MAXACT);
	return rule;
}

struct kn__sync_worker *worker_of(const struct kn__sync_params *p, uint32_t id)
{
	struct kn__sync_worker *w = NULL;

	cr_assert_eq(kn__sync_worker_create(p, id, &w), 0);
	cr_assert_not_null(w);
	return w;
}

struct kn__sync_rule *rule_new(uint32_t protocol, uint32_t max_workers,
			       uint32_t members)
{
	return rule_of(&(struct kn__sync_params){ .protocol = protocol,
						  .max_workers = max_workers,
						  .members = members });
}

int push(struct kn__sync_rule *rule, uint32_t worker, uint64_t clock,
	 uint64_t version, uint32_t slot, struct kn__sync_action *out)
{
	struct kn__sync_event ev = {
		.type = KN__SYNC_EV_PUSH,
		.worker = worker,
		.slot = slot,
		.clock = clock,
		.version = version,
	};

	return kn__sync_rule_event(rule, &ev, out);
}

int member_event(struct kn__sync_rule *rule, uint32_t type, uint32_t worker,
		 struct kn__sync_action *out)
{
	struct kn__sync_event ev = { .type = type, .worker = worker };

	return kn__sync_rule_event(rule, &ev, out);
}

void assert_release_at(const struct kn__sync_action *a, uint32_t worker,
		       uint64_t version, uint64_t epoch, uint32_t steps)
{
	cr_assert_eq(a->type, KN__SYNC_ACT_RELEASE);
	cr_assert_eq(a->worker, worker, "release of %u, not %u", a->worker,
		     worker);
	cr_assert_eq(a->version, version);
	cr_assert_eq(a->epoch, epoch, "worker %u: epoch %lu, not %lu", worker,
		     (unsigned long)a->epoch, (unsigned long)epoch);
	cr_assert_eq(a->steps, steps, "worker %u: %u steps, not %u", worker,
		     a->steps, steps);
}

void assert_release(const struct kn__sync_action *a, uint32_t worker,
		    uint64_t version)
{
	assert_release_at(a, worker, version, 0, 1);
}

void assert_round(const struct kn__sync_action *a, int n, const uint32_t *ws,
		  uint32_t count, uint64_t version, uint64_t epoch,
		  const uint32_t *rsteps)
{
	cr_assert_eq(n, (int)(1 + count));
	cr_assert_eq(a[0].type, KN__SYNC_ACT_APPLY);
	cr_assert_eq(a[0].version, version + 1);
	cr_assert_eq(a[0].lr_scale, 1.0f);
	cr_assert_eq(a[0].ncontrib, count);
	for (uint32_t i = 0; i < count; i++) {
		cr_assert_eq(a[0].contrib[i].worker, ws[i]);
		cr_assert_eq(a[0].contrib[i].weight, 1.0f / (float)count,
			     "worker %u: weight %g of %u", ws[i],
			     a[0].contrib[i].weight, count);
		assert_release_at(&a[1 + i], ws[i], version + 1, epoch,
				  rsteps ? rsteps[i] : 1);
	}
}

uint64_t rng_state;

uint64_t rnd64(void)
{
	/* xorshift64*: fixed seed, same sequence on every machine */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545F4914F6CDD1DULL;
}

uint32_t rnd(uint32_t n)
{
	return (uint32_t)(rnd64() >> 32) % n;
}

void refusals(uint32_t protocol)
{
	struct kn__sync_rule *rule = rule_new(protocol, MAXW, 3);
	struct kn__sync_action out[MAXACT];
	const uint32_t bad_ids[] = { MAXW, MAXW + 1, UINT32_MAX };
	const uint32_t types[] = { KN__SYNC_EV_PUSH, KN__SYNC_EV_JOIN,
				   KN__SYNC_EV_LEAVE, KN__SYNC_EV_TIMING };
	struct kn__sync_event ev = { 0 };

	for (int i = 0; i < 3; i++)
		for (int t = 0; t < 4; t++)
			cr_assert_eq(
				member_event(rule, types[t], bad_ids[i], out),
				-EINVAL, "type %u worker %u", types[t],
				bad_ids[i]);
	cr_assert_eq(push(rule, 3, 0, 0, 0, out), -EINVAL, "non-member");
	cr_assert_eq(member_event(rule, KN__SYNC_EV_JOIN, 1, out), -EINVAL);
	cr_assert_eq(member_event(rule, KN__SYNC_EV_LEAVE, 4, out), -EINVAL);
	cr_assert_eq(member_event(rule, 0, 0, out), -EINVAL);
	cr_assert_eq(member_event(rule, KN__SYNC_EV_TIMER + 1, 0, out),
		     -EINVAL);
	ev = (struct kn__sync_event){ .type = KN__SYNC_EV_TIMING, .value = -1 };
	cr_assert_eq(kn__sync_rule_event(rule, &ev, out), -EINVAL);
	ev.value = NAN;
	cr_assert_eq(kn__sync_rule_event(rule, &ev, out), -EINVAL);
	cr_assert_eq(kn__sync_rule_event(NULL, &ev, out), -EINVAL);
	cr_assert_eq(kn__sync_rule_event(rule, NULL, out), -EINVAL);
	ev.value = 0.5;
	cr_assert_eq(kn__sync_rule_event(rule, &ev, NULL), -EINVAL);

	/* none of it changed the membership or the version */
	cr_assert_eq(kn__sync_rule_version(rule), 0);
	cr_assert_eq(push(rule, 0, 0, 0, 0, out),
		     protocol == KN_SYNC_BSP ? 0 : 2);
	cr_assert_eq(push(rule, 1, 0, 0, 0, out),
		     protocol == KN_SYNC_BSP ? 0 : 2);
	cr_assert_eq(push(rule, 2, 0, 0, 0, out),
		     protocol == KN_SYNC_BSP ? 4 : 2);
	kn__sync_rule_destroy(rule);
}

void timing_and_timer_do_nothing(uint32_t protocol)
{
	struct kn__sync_rule *rule = rule_new(protocol, MAXW, 2);
	struct kn__sync_action out[MAXACT];
	struct kn__sync_event timing = {
		.type = KN__SYNC_EV_TIMING,
		.worker = 1,
		.t = 3.5,
		.value = 0.25,
	};
	/* a timer names no worker: whatever is in the field is ignored */
	struct kn__sync_event timer = {
		.type = KN__SYNC_EV_TIMER,
		.worker = UINT32_MAX,
		.t = 4.0,
	};

	cr_assert_eq(push(rule, 0, 0, 0, 0, out),
		     protocol == KN_SYNC_BSP ? 0 : 2);
	cr_assert_eq(kn__sync_rule_event(rule, &timing, out), 0);
	cr_assert_eq(kn__sync_rule_event(rule, &timer, out), 0);
	timing.worker = 6; /* not a member, but a valid id */
	cr_assert_eq(kn__sync_rule_event(rule, &timing, out), 0);
	cr_assert_eq(kn__sync_rule_version(rule),
		     protocol == KN_SYNC_BSP ? 0 : 1);
	kn__sync_rule_destroy(rule);
}

void planner_has_no_plans(uint32_t protocol)
{
	struct kn__sync_params p = { protocol, MAXW, 2 };
	struct kn__sync_planner *planner;
	struct kn__sync_action out[MAXACT];
	struct kn__sync_event ev = { .type = KN__SYNC_EV_TIMING, .value = 1 };

	cr_assert_eq(kn__sync_planner_create(&p, &planner), 0);
	for (uint32_t w = 0; w < MAXW; w++) {
		ev.worker = w;
		ev.t = w;
		cr_assert_eq(kn__sync_planner_event(planner, &ev, out), 0);
	}
	ev = (struct kn__sync_event){ .type = KN__SYNC_EV_JOIN, .worker = 4 };
	cr_assert_eq(kn__sync_planner_event(planner, &ev, out), 0);
	cr_assert_eq(kn__sync_planner_event(planner, &ev, out), -EINVAL);
	ev.type = KN__SYNC_EV_LEAVE;
	cr_assert_eq(kn__sync_planner_event(planner, &ev, out), 0);
	cr_assert_eq(kn__sync_planner_event(planner, &ev, out), -EINVAL);
	ev.worker = 0;
	cr_assert_eq(kn__sync_planner_event(planner, &ev, out), 0);
	ev = (struct kn__sync_event){ .type = KN__SYNC_EV_TIMER, .t = 9 };
	cr_assert_eq(kn__sync_planner_event(planner, &ev, out), 0);
	ev = (struct kn__sync_event){ .type = KN__SYNC_EV_PUSH, .worker = 1 };
	cr_assert_eq(kn__sync_planner_event(planner, &ev, out), -EINVAL);
	ev = (struct kn__sync_event){ .type = KN__SYNC_EV_JOIN,
				      .worker = MAXW };
	cr_assert_eq(kn__sync_planner_event(planner, &ev, out), -EINVAL);
	ev.type = 0;
	ev.worker = 0;
	cr_assert_eq(kn__sync_planner_event(planner, &ev, out), -EINVAL);
	cr_assert_eq(kn__sync_planner_epoch(planner), 0);
	kn__sync_planner_destroy(planner);
}

Test(planner, bsp_emits_nothing)
{
	planner_has_no_plans(KN_SYNC_BSP);
}

Test(planner, asp_emits_nothing)
{
	planner_has_no_plans(KN_SYNC_ASP);
}

static int wev(struct kn__sync_worker *w, uint32_t type, uint32_t *next)
{
	struct kn__sync_worker_event ev = {
		.type = type,
		.steps = 1,
		.seconds = 0.1,
	};

	return kn__sync_worker_event(w, &ev, next);
}

void worker_communicates_every_step(uint32_t protocol)
{
	struct kn__sync_params p = { protocol, MAXW, MAXW };
	struct kn__sync_worker *w;
	uint32_t next;

	cr_assert_eq(kn__sync_worker_create(&p, MAXW - 1, &w), 0);
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(wev(w, KN__SYNC_WEV_STEP, &next), 0);
		cr_assert_eq(next, KN__SYNC_NEXT_PUSH);
		/* told to push: neither a step nor a release fits now */
		next = 0;
		cr_assert_eq(wev(w, KN__SYNC_WEV_STEP, &next), -EINVAL);
		cr_assert_eq(wev(w, KN__SYNC_WEV_RELEASE, &next), -EINVAL);
		cr_assert_eq(next, 0);
		cr_assert_eq(wev(w, KN__SYNC_WEV_PUSHED, &next), 0);
		cr_assert_eq(next, KN__SYNC_NEXT_WAIT);
		/* waiting: no local steps under BSP/ASP */
		cr_assert_eq(wev(w, KN__SYNC_WEV_STEP, &next), -EINVAL);
		cr_assert_eq(wev(w, KN__SYNC_WEV_PUSHED, &next), -EINVAL);
		cr_assert_eq(wev(w, KN__SYNC_WEV_RELEASE, &next), 0);
		cr_assert_eq(next, KN__SYNC_NEXT_STEP);
	}
	cr_assert_eq(wev(w, KN__SYNC_WEV_PUSHED, &next), -EINVAL);
	cr_assert_eq(wev(w, 0, &next), -EINVAL);
	cr_assert_eq(wev(w, KN__SYNC_WEV_RELEASE + 1, &next), -EINVAL);
	kn__sync_worker_destroy(w);

	/* a joiner's first event is its release */
	cr_assert_eq(kn__sync_worker_create(&p, 0, &w), 0);
	cr_assert_eq(wev(w, KN__SYNC_WEV_RELEASE, &next), 0);
	cr_assert_eq(next, KN__SYNC_NEXT_STEP);
	cr_assert_eq(wev(w, KN__SYNC_WEV_STEP, &next), 0);
	cr_assert_eq(next, KN__SYNC_NEXT_PUSH);
	kn__sync_worker_destroy(w);
}

/* --- randomized, against a reference model ---------------------------- */

#define NEVENTS 50000

/* What the model knows of a worker. */
struct model_worker {
	bool member;
	bool pending;	  /* BSP: pushed this round */
	bool clocked;	  /* pushed since it joined */
	uint64_t clock;	  /* last accepted clock */
	uint64_t held;	  /* the version it was last released with */
	uint32_t slot;	  /* of the pending push */
	uint32_t push_id; /* of the pending push */
};

struct model {
	struct model_worker w[MAXW];
	uint64_t version;
	uint32_t npush;		  /* pushes accepted so far */
	uint8_t applied[NEVENTS]; /* per push id: times applied */
};

/* A push the model would accept or refuse, with plausible mistakes. */
static struct kn__sync_event random_push(const struct model *m)
{
	struct kn__sync_event ev = { .type = KN__SYNC_EV_PUSH };
	const struct model_worker *w;
	uint32_t due[MAXW], ndue = 0;

	/* mostly a member that has yet to push, or any id (MAXW: too big) */
	for (uint32_t k = 0; k < MAXW; k++)
		if (m->w[k].member && !m->w[k].pending)
			due[ndue++] = k;
	ev.worker = ndue && rnd(2) ? due[rnd(ndue)] : rnd(MAXW + 1);
	w = &m->w[ev.worker < MAXW ? ev.worker : 0];
	ev.slot = rnd(2);
	ev.version = w->held;
	ev.clock = w->clocked ? w->clock + 1 + rnd(2) : rnd(3);
	switch (rnd(12)) {
	case 0:
		ev.version = m->version + 1;
		break;
	case 1:
		ev.version = w->held ? w->held - 1 : 0;
		break;
	case 2:
		ev.clock = w->clock; /* a replay, if it had pushed */
		break;
	}
	return ev;
}

void randomized(uint32_t protocol, uint64_t seed)
{
	struct kn__sync_rule *rule = rule_new(protocol, MAXW, MAXW / 2);
	struct kn__sync_action out[MAXACT];
	struct model *m = calloc(1, sizeof(*m));
	uint32_t rounds = 0, refused = 0, dropped = 0;

	cr_assert_not_null(m);
	rng_state = seed;
	for (uint32_t i = 0; i < MAXW / 2; i++)
		m->w[i].member = true;

	for (uint32_t i = 0; i < NEVENTS; i++) {
		struct kn__sync_event ev = { 0 };
		struct model_worker *w;
		uint32_t nmembers = 0, npending = 0;
		uint64_t before = kn__sync_rule_version(rule);
		bool valid, complete = false;
		int expect = 0, n;
		uint32_t r = rnd(100);

		if (r < 70) {
			ev = random_push(m);
		} else {
			ev.type = r < 82   ? KN__SYNC_EV_LEAVE
				  : r < 94 ? KN__SYNC_EV_JOIN
				  : r < 97 ? KN__SYNC_EV_TIMING
					   : KN__SYNC_EV_TIMER;
			ev.worker = rnd(MAXW + 1);
			ev.value = 0.5;
			ev.t = i;
		}
		w = &m->w[ev.worker < MAXW ? ev.worker : 0];

		/* what the rules in docs/protocols.md say happens */
		switch (ev.type) {
		case KN__SYNC_EV_PUSH:
			valid = ev.worker < MAXW && w->member &&
				ev.version <= m->version &&
				!(w->clocked && ev.clock <= w->clock);
			if (protocol == KN_SYNC_BSP)
				valid = valid && !w->pending &&
					ev.version == m->version;
			expect = protocol == KN_SYNC_BSP ? 0 : 2;
			break;
		case KN__SYNC_EV_JOIN:
			valid = ev.worker < MAXW && !w->member;
			expect = 1;
			break;
		case KN__SYNC_EV_LEAVE:
			valid = ev.worker < MAXW && w->member;
			break;
		case KN__SYNC_EV_TIMING:
			valid = ev.worker < MAXW;
			break;
		default:
			valid = true;
			break;
		}

		n = kn__sync_rule_event(rule, &ev, out);
		if (!valid) {
			cr_assert_eq(n, -EINVAL, "event %u type %u worker %u",
				     i, ev.type, ev.worker);
			cr_assert_eq(kn__sync_rule_version(rule), before);
			refused++;
			continue;
		}

		/* the model's state after the event */
		if (ev.type == KN__SYNC_EV_PUSH) {
			w->clocked = true;
			w->clock = ev.clock;
			w->slot = ev.slot;
			w->push_id = m->npush++;
			w->pending = true;
		} else if (ev.type == KN__SYNC_EV_JOIN) {
			*w = (struct model_worker){ .member = true,
						    .held = m->version };
		} else if (ev.type == KN__SYNC_EV_LEAVE) {
			dropped += w->pending;
			w->member = false;
			w->pending = false;
		}
		for (uint32_t k = 0; k < MAXW; k++) {
			nmembers += m->w[k].member;
			npending += m->w[k].member && m->w[k].pending;
		}
		if (protocol == KN_SYNC_BSP &&
		    (ev.type == KN__SYNC_EV_PUSH ||
		     ev.type == KN__SYNC_EV_LEAVE) &&
		    nmembers > 0 && npending == nmembers) {
			complete = true;
			expect = (int)(1 + nmembers);
		}
		cr_assert_eq(n, expect, "event %u type %u worker %u: %d", i,
			     ev.type, ev.worker, n);
		if (n == 0)
			continue;

		if (ev.type == KN__SYNC_EV_JOIN) {
			assert_release(&out[0], ev.worker, m->version);
			continue;
		}

		/* an APPLY: which pushes, each at most once */
		cr_assert_eq(out[0].type, KN__SYNC_ACT_APPLY);
		cr_assert_eq(out[0].version, m->version + 1, "monotonic");
		cr_assert_eq(kn__sync_rule_version(rule), m->version + 1);
		cr_assert_eq(out[0].ncontrib, (uint32_t)(n - 1));
		for (uint32_t k = 0; k < out[0].ncontrib; k++) {
			const struct kn__sync_contrib *c = &out[0].contrib[k];
			struct model_worker *cw;

			cr_assert_lt(c->worker, MAXW);
			cw = &m->w[c->worker];
			if (k > 0)
				cr_assert_gt(c->worker,
					     out[0].contrib[k - 1].worker);
			cr_assert(cw->member && cw->pending,
				  "event %u: worker %u applied without a push",
				  i, c->worker);
			cr_assert_eq(c->slot, cw->slot);
			cr_assert_eq(m->applied[cw->push_id]++, 0,
				     "push %u applied twice", cw->push_id);
			cw->pending = false;
			assert_release(&out[1 + k], c->worker, m->version + 1);
			cw->held = m->version + 1;
			if (protocol == KN_SYNC_BSP) {
				cr_assert_eq(c->weight,
					     1.0f / (float)out[0].ncontrib);
				cr_assert_eq(out[0].lr_scale, 1.0f);
			} else {
				/* a share of a round, damped by rounds */
				uint64_t tau = m->version - ev.version;
				float missed = (float)tau / (float)nmembers;

				cr_assert_eq(c->weight, 1.0f / (float)nmembers);
				cr_assert_eq(out[0].lr_scale,
					     missed > 1 ? 1.0f / missed : 1.0f);
			}
		}
		if (complete)
			cr_assert_eq(out[0].ncontrib, nmembers,
				     "BSP applies every member's push");
		m->version++;
		rounds++;
	}

	/* every accepted push was applied once, or dropped, or is pending */
	for (uint32_t id = 0; id < m->npush; id++)
		cr_assert_leq(m->applied[id], 1);
	if (protocol == KN_SYNC_ASP)
		for (uint32_t id = 0; id < m->npush; id++)
			cr_assert_eq(m->applied[id], 1, "push %u", id);
	cr_log_info("%s: %u applies, %u refusals, %u dropped, %u pushes",
		    kn__sync_protocol_name(protocol), rounds, refused, dropped,
		    m->npush);
	/* the sequence exercised what it is meant to */
	cr_assert_gt(rounds, 3000, "only %u applies", rounds);
	cr_assert_gt(refused, 3000, "only %u refusals", refused);
	if (protocol == KN_SYNC_BSP)
		cr_assert_gt(dropped, 300, "only %u dropped pushes", dropped);
	cr_assert_eq(kn__sync_rule_version(rule), rounds);
	free(m);
	kn__sync_rule_destroy(rule);
}
