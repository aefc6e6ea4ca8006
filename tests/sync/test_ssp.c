/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_ssp.c - the SSP chunk rule (docs/protocols.md): each push applied
 * on arrival like ASP, and the bound on how far a worker may run ahead
 * of the slowest member — when a release is held, when it is let go,
 * joins and leaves, and a randomized run checked against a reference
 * model that keeps every sync count explicitly.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "sync.h"

#define MAXW 16

static uint64_t clocks[MAXW];
static uint64_t versions[MAXW]; /* the version each worker holds */

static int push(struct kn__sync_rule *rule, uint32_t w,
		struct kn__sync_action *out)
{
	struct kn__sync_event ev = { .type = KN__SYNC_EV_PUSH,
				     .worker = w,
				     .slot = (uint32_t)(clocks[w] & 1),
				     .clock = clocks[w],
				     .version = versions[w] };
	int n = kn__sync_rule_event(rule, &ev, out);

	if (n >= 0)
		clocks[w]++;
	return n;
}

static int member(struct kn__sync_rule *rule, uint32_t type, uint32_t w,
		  struct kn__sync_action *out)
{
	struct kn__sync_event ev = { .type = type, .worker = w };

	if (type == KN__SYNC_EV_JOIN)
		clocks[w] = 0;
	return kn__sync_rule_event(rule, &ev, out);
}

/* The workers released by @a[0..n), in order; their versions noted. */
static int released(const struct kn__sync_action *a, int n, uint32_t *ids)
{
	int k = 0;

	for (int i = 0; i < n; i++)
		if (a[i].type == KN__SYNC_ACT_RELEASE) {
			ids[k++] = a[i].worker;
			versions[a[i].worker] = a[i].version;
			cr_assert_eq(a[i].steps, 1);
		}
	return k;
}

/* A rule of @n workers, @members of them members, staleness @s; the
 * workers' clocks and versions start again with it. */
static struct kn__sync_rule *ssp_new(uint32_t n, uint32_t members, uint32_t s)
{
	struct kn__sync_params p = { .protocol = KN_SYNC_SSP,
				     .max_workers = n,
				     .members = members,
				     .staleness = s };
	struct kn__sync_rule *rule = NULL;

	cr_assert_eq(kn__sync_rule_create(&p, &rule), 0);
	cr_assert_eq(kn__sync_max_actions(&p), 2 + n);
	memset(clocks, 0, sizeof(clocks));
	memset(versions, 0, sizeof(versions));
	return rule;
}

/* @a[0..n) releases exactly the workers @want[0..k), in that order. */
static void assert_releases(const struct kn__sync_action *a, int n,
			    const uint32_t *want, int k)
{
	uint32_t ids[MAXW];

	cr_assert_eq(released(a, n, ids), k);
	for (int i = 0; i < k; i++)
		cr_assert_eq(ids[i], want[i], "release %d: worker %u, not %u",
			     i, ids[i], want[i]);
}

Test(ssp, applies_each_push_alone_with_damping)
{
	struct kn__sync_rule *rule = ssp_new(3, 3, 3);
	struct kn__sync_action a[8];
	int n;

	n = push(rule, 0, a); /* from version 0: tau 0 */
	cr_assert_eq(n, 2);
	cr_assert_eq(a[0].type, KN__SYNC_ACT_APPLY);
	cr_assert_eq(a[0].version, 1);
	cr_assert_eq(a[0].ncontrib, 1);
	cr_assert_eq(a[0].contrib[0].worker, 0);
	/* one worker's share of a round */
	cr_assert_float_eq(a[0].contrib[0].weight, 1.0f / 3, 1e-7);
	cr_assert_eq(a[0].lr_scale, 1.0f);
	assert_releases(a, n, (const uint32_t[]){ 0 }, 1);
	cr_assert_eq(versions[0], 1);
	push(rule, 0, a);
	push(rule, 0, a); /* version 3 now; worker 1 still reads 0 */
	n = push(rule, 1, a);
	cr_assert_eq(a[0].version, 4);
	/* tau 3 with 3 members is one round: not damped */
	cr_assert_eq(a[0].lr_scale, 1.0f);
	cr_assert_float_eq(a[0].contrib[0].weight, 1.0f / 3, 1e-7);
	kn__sync_rule_destroy(rule);
}

Test(ssp, holds_a_worker_beyond_the_bound_until_the_slowest_pushes)
{
	struct kn__sync_rule *rule = ssp_new(3, 3, 2);
	struct kn__sync_action a[8];
	uint32_t ids[8];
	int n;

	/* worker 0 may be 2 pushes ahead of the slowest (0 pushes) */
	cr_assert_eq(released(a, push(rule, 0, a), ids), 1);
	cr_assert_eq(released(a, push(rule, 0, a), ids), 1);
	n = push(rule, 0, a); /* its 3rd: 3 - 0 > 2, applied, held */
	cr_assert_eq(n, 1);
	cr_assert_eq(a[0].type, KN__SYNC_ACT_APPLY);
	cr_assert_eq(a[0].version, 3);
	/* worker 1 pushes: the slowest is still worker 2, at 0 */
	n = push(rule, 1, a);
	assert_releases(a, n, (const uint32_t[]){ 1 }, 1);
	/* worker 2 pushes: P_min becomes 1, worker 0 is let go */
	n = push(rule, 2, a);
	cr_assert_eq(n, 3);
	assert_releases(a, n, (const uint32_t[]){ 2, 0 }, 2);
	cr_assert_eq(versions[0], 5, "the newest version, %lu",
		     (unsigned long)versions[0]);
	/* a held worker may not push: it has not been released */
	cr_assert_eq(released(a, push(rule, 0, a), ids), 0); /* 4 - 1 > 2 */
	cr_assert_eq(push(rule, 0, a), -EINVAL);
	cr_assert_eq(clocks[0], 4);
	kn__sync_rule_destroy(rule);
}

Test(ssp, releases_held_workers_in_ascending_order)
{
	struct kn__sync_rule *rule = ssp_new(4, 4, 1);
	struct kn__sync_action a[8];
	uint32_t ids[8];
	int n;

	/* 3, 1, 2 each run 2 ahead (held at their 2nd push), 0 is slow */
	for (uint32_t w = 3; w >= 1; w--) {
		cr_assert_eq(released(a, push(rule, w, a), ids), 1);
		cr_assert_eq(released(a, push(rule, w, a), ids), 0);
	}
	n = push(rule, 0, a);
	assert_releases(a, n, (const uint32_t[]){ 0, 1, 2, 3 }, 4);
	kn__sync_rule_destroy(rule);
}

Test(ssp, leave_of_the_slowest_lets_the_held_go)
{
	struct kn__sync_rule *rule = ssp_new(2, 2, 1);
	struct kn__sync_action a[8];
	uint32_t ids[8];
	int n;

	push(rule, 0, a);
	cr_assert_eq(released(a, push(rule, 0, a), ids), 0); /* held */
	n = member(rule, KN__SYNC_EV_LEAVE, 1, a);
	assert_releases(a, n, (const uint32_t[]){ 0 }, 1);
	/* alone, it never waits again */
	for (int i = 0; i < 10; i++)
		cr_assert_eq(released(a, push(rule, 0, a), ids), 1);
	kn__sync_rule_destroy(rule);
}

Test(ssp, a_joiner_counts_from_the_slowest)
{
	struct kn__sync_rule *rule = ssp_new(3, 2, 1);
	struct kn__sync_action a[8];
	uint32_t ids[8];
	int n;

	for (int i = 0; i < 5; i++) {
		push(rule, 0, a);
		push(rule, 1, a);
	}
	/* P = 5 for both; the joiner starts at 5, not at 0 */
	n = member(rule, KN__SYNC_EV_JOIN, 2, a);
	assert_releases(a, n, (const uint32_t[]){ 2 }, 1);
	cr_assert_eq(versions[2], 10);
	/* 0 may still run one ahead of the joiner */
	cr_assert_eq(released(a, push(rule, 0, a), ids), 1);
	cr_assert_eq(released(a, push(rule, 0, a), ids), 0);
	kn__sync_rule_destroy(rule);
}

Test(ssp, default_bound_is_3)
{
	struct kn__sync_rule *rule = ssp_new(2, 2, 0);
	struct kn__sync_action a[8];
	uint32_t ids[8];

	for (int i = 0; i < 3; i++)
		cr_assert_eq(released(a, push(rule, 0, a), ids), 1);
	cr_assert_eq(released(a, push(rule, 0, a), ids), 0);
	kn__sync_rule_destroy(rule);
}

/*
 * Random pushes, joins and leaves against a reference model that keeps
 * every member's sync count: each accepted push is applied once, no
 * worker is ever released more than s ahead of the slowest member, and
 * a held worker is released in the answer to the first event after
 * which the bound allows it.
 */
Test(ssp, random_events_keep_the_bound)
{
	enum { N = 6 };
	for (uint32_t s = 1; s <= 3; s++) {
		struct kn__sync_rule *rule = ssp_new(N, N, s);
		struct kn__sync_action a[N + 2];
		bool memb[N], held[N];
		uint64_t P[N], applies = 0, pushes = 0;
		uint32_t ids[N + 2];

		srand(1000 + s);
		for (int i = 0; i < N; i++) {
			memb[i] = true;
			held[i] = false;
			P[i] = 0;
		}
		for (int step = 0; step < 50000; step++) {
			uint32_t w = (uint32_t)rand() % N;
			int r = rand() % 100, n;
			uint64_t pmin = UINT64_MAX;

			if (r < 4 && memb[w]) {
				n = member(rule, KN__SYNC_EV_LEAVE, w, a);
				memb[w] = false;
				held[w] = false;
			} else if (r < 8 && !memb[w]) {
				for (int j = 0; j < N; j++)
					if (memb[j] && P[j] < pmin)
						pmin = P[j];
				n = member(rule, KN__SYNC_EV_JOIN, w, a);
				memb[w] = true;
				P[w] = pmin == UINT64_MAX ? P[w] : pmin;
			} else if (memb[w] && !held[w]) {
				n = push(rule, w, a);
				cr_assert_geq(n, 1);
				cr_assert_eq(a[0].type, KN__SYNC_ACT_APPLY);
				applies++;
				pushes++;
				P[w]++;
				held[w] =
					true; /* until a RELEASE says otherwise */
			} else {
				continue;
			}
			cr_assert_geq(n, 0);
			pmin = UINT64_MAX;
			for (int j = 0; j < N; j++)
				if (memb[j] && P[j] < pmin)
					pmin = P[j];
			for (int k = released(a, n, ids); k-- > 0;) {
				cr_assert(memb[ids[k]]);
				cr_assert_leq(
					P[ids[k]] - pmin, s,
					"worker %u released %lu ahead", ids[k],
					(unsigned long)(P[ids[k]] - pmin));
				held[ids[k]] = false;
			}
			/* nobody the bound lets go is still held */
			for (int j = 0; j < N; j++)
				if (memb[j] && held[j])
					cr_assert_gt(
						P[j] - pmin, s,
						"worker %d held at %lu "
						"ahead, bound %u",
						j, (unsigned long)(P[j] - pmin),
						s);
		}
		cr_assert_eq(applies, pushes);
		cr_assert_gt(pushes, 10000);
		kn__sync_rule_destroy(rule);
	}
}
