/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_sync.c - the BSP and ASP chunk rules, planners and worker rules of
 * sync/ (docs/protocols.md): when a round completes, the exact actions
 * and their order, weights, versions and staleness factors, membership
 * changes inside a round, refusal of events that break the protocol
 * (and that a refusal changes nothing), and randomized event sequences
 * checked against a reference model.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "sync.h"

#define MAXW   8
#define MAXACT (1 + MAXW)

/* --- helpers ---------------------------------------------------------- */

static struct kn__sync_rule *rule_new(uint32_t protocol, uint32_t max_workers,
				      uint32_t members)
{
	struct kn__sync_params p = {
		.protocol = protocol,
		.max_workers = max_workers,
		.members = members,
	};
	struct kn__sync_rule *rule = NULL;

	cr_assert_eq(kn__sync_rule_create(&p, &rule), 0);
	cr_assert_not_null(rule);
	cr_assert_leq(kn__sync_max_actions(&p), MAXACT);
	return rule;
}

static int push(struct kn__sync_rule *rule, uint32_t worker, uint64_t clock,
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

static int member_event(struct kn__sync_rule *rule, uint32_t type,
			uint32_t worker, struct kn__sync_action *out)
{
	struct kn__sync_event ev = { .type = type, .worker = worker };

	return kn__sync_rule_event(rule, &ev, out);
}

static void assert_release(const struct kn__sync_action *a, uint32_t worker,
			   uint64_t version)
{
	cr_assert_eq(a->type, KN__SYNC_ACT_RELEASE);
	cr_assert_eq(a->worker, worker, "release of %u, expected %u", a->worker,
		     worker);
	cr_assert_eq(a->version, version);
	cr_assert_eq(a->epoch, 0);
	cr_assert_eq(a->steps, 1);
}

/* A BSP round of every worker in @ws (ascending), all from @version. */
static void assert_bsp_round(const struct kn__sync_action *a, int n,
			     const uint32_t *ws, uint32_t count,
			     uint64_t version)
{
	cr_assert_eq(n, (int)(1 + count));
	cr_assert_eq(a[0].type, KN__SYNC_ACT_APPLY);
	cr_assert_eq(a[0].version, version + 1);
	cr_assert_eq(a[0].lr_scale, 1.0f);
	cr_assert_eq(a[0].ncontrib, count);
	for (uint32_t k = 0; k < count; k++) {
		cr_assert_eq(a[0].contrib[k].worker, ws[k]);
		cr_assert_eq(a[0].contrib[k].weight, 1.0f / (float)count);
		assert_release(&a[1 + k], ws[k], version + 1);
	}
}

/* --- names, parameters ------------------------------------------------ */

Test(rules, protocol_names_round_trip)
{
	cr_assert_str_eq(kn__sync_protocol_name(KN_SYNC_BSP), "bsp");
	cr_assert_str_eq(kn__sync_protocol_name(KN_SYNC_ASP), "asp");
	cr_assert_str_eq(kn__sync_protocol_name(KN_SYNC_SSP), "ssp");
	cr_assert_null(kn__sync_protocol_name(99));
	cr_assert_null(kn__sync_protocol_name(UINT32_MAX));
	cr_assert_eq(kn__sync_protocol_parse("bsp"), KN_SYNC_BSP);
	cr_assert_eq(kn__sync_protocol_parse("asp"), KN_SYNC_ASP);
	cr_assert_eq(kn__sync_protocol_parse("ssp"), KN_SYNC_SSP);
	cr_assert_eq(kn__sync_protocol_parse("BSP"), -EINVAL);
	cr_assert_eq(kn__sync_protocol_parse("hogwild"), -EINVAL);
	cr_assert_eq(kn__sync_protocol_parse(""), -EINVAL);
	cr_assert_eq(kn__sync_protocol_parse(NULL), -EINVAL);
}

/* The registry's names, in the order a usage line lists them. */
Test(rules, every_name_a_protocol_goes_by_is_listed_once)
{
	static const char *const want[] = { "bsp",	 "asp", "ssp", "esp",
					    "predicted", "psp", "cgp" };
	const char *name;
	uint32_t i, p;

	for (i = 0; (name = kn__sync_protocol_name_at(i, &p)); i++) {
		cr_assert_lt(i, sizeof(want) / sizeof(want[0]));
		cr_assert_str_eq(name, want[i]);
		cr_assert_eq(kn__sync_protocol_parse(name), (int)p);
	}
	cr_assert_eq(i, sizeof(want) / sizeof(want[0]));
	/* the printed name is the first */
	cr_assert_str_eq(kn__sync_protocol_name(KN_SYNC_PSP), "predicted");
	cr_assert_str_eq(kn__sync_cgp_solver_name(KN__SYNC_CGP_AUTO), "auto");
	cr_assert_eq(kn__sync_cgp_solver_parse("pls"), KN__SYNC_CGP_PLS);
	cr_assert_eq(kn__sync_cgp_solver_parse("PLS"), -EINVAL);
	cr_assert_eq(kn__sync_cgp_solver_parse(NULL), -EINVAL);
	cr_assert_null(kn__sync_cgp_solver_name(3));
	for (i = 0; (name = kn__sync_cgp_solver_name_at(i, &p)); i++)
		cr_assert_eq(kn__sync_cgp_solver_parse(name), (int)p);
	cr_assert_eq(i, 3);
}

/* The public names are the registry's. */
Test(rules, the_public_names_are_the_registry_s)
{
	enum kn_sync e;
	uint32_t p;
	const char *name;
	unsigned int i;

	cr_assert_str_eq(kn_sync_name(KN_SYNC_PSP), "predicted");
	cr_assert_null(kn_sync_name((enum kn_sync)99));
	for (i = 0; (name = kn_sync_name_at(i, &e)); i++) {
		cr_assert_str_eq(name, kn__sync_protocol_name_at(i, &p));
		cr_assert_eq((uint32_t)e, p);
	}
	cr_assert_null(kn__sync_protocol_name_at(i, &p));
	cr_assert_null(kn_sync_name_at(0, NULL));
}

/* What the engine reads instead of comparing ids: one row per protocol. */
Test(rules, traits_say_what_each_protocol_asks)
{
	static const struct {
		uint32_t protocol;
		bool local_steps, mean_model, skips, release_info;
		uint32_t timing, plans;
	} want[] = {
		{ KN_SYNC_BSP, false, true, true, false, KN__SYNC_TIMING_NONE,
		  KN__SYNC_PLANS_NONE },
		{ KN_SYNC_ASP, false, false, false, false, KN__SYNC_TIMING_NONE,
		  KN__SYNC_PLANS_NONE },
		{ KN_SYNC_SSP, false, false, false, false, KN__SYNC_TIMING_NONE,
		  KN__SYNC_PLANS_NONE },
		{ KN_SYNC_ESP, true, false, false, true, KN__SYNC_TIMING_RULES,
		  KN__SYNC_PLANS_NONE },
		{ KN_SYNC_PSP, true, false, false, true,
		  KN__SYNC_TIMING_PLANNER, KN__SYNC_PLANS_STEPS },
		{ KN_SYNC_CGP, false, false, false, false,
		  KN__SYNC_TIMING_PLANNER, KN__SYNC_PLANS_GROUPS },
	};
	const struct kn__sync_traits *none = kn__sync_traits(99);

	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		const struct kn__sync_traits *t =
			kn__sync_traits(want[i].protocol);

		cr_assert_eq(t->local_steps, want[i].local_steps);
		cr_assert_eq(t->mean_model, want[i].mean_model);
		cr_assert_eq(t->skips, want[i].skips);
		cr_assert_eq(t->release_info, want[i].release_info);
		cr_assert_eq(t->delta_ratio, want[i].protocol == KN_SYNC_ESP);
		cr_assert_eq(t->model_bytes, want[i].protocol == KN_SYNC_CGP);
		cr_assert_eq(t->timing, want[i].timing);
		cr_assert_eq(t->plans, want[i].plans);
	}
	/* an unknown protocol asks for nothing, and is no crash */
	cr_assert_not_null(none);
	cr_assert(!none->local_steps && !none->mean_model && !none->skips &&
		  !none->release_info && !none->delta_ratio &&
		  !none->model_bytes);
	cr_assert_eq(none->timing, KN__SYNC_TIMING_NONE);
	cr_assert_eq(none->plans, KN__SYNC_PLANS_NONE);
}

/* ASP's push is one share of a round; BSP's round is a whole one. */
Test(rules, an_apply_says_whether_it_is_a_share_of_a_round)
{
	struct kn__sync_action out[MAXACT];
	struct kn__sync_rule *bsp = rule_new(KN_SYNC_BSP, MAXW, 2);
	struct kn__sync_rule *asp = rule_new(KN_SYNC_ASP, MAXW, 2);

	cr_assert_eq(push(asp, 0, 0, 0, 0, out), 2);
	cr_assert_eq(out[0].type, KN__SYNC_ACT_APPLY);
	cr_assert(out[0].share);
	cr_assert_eq(push(bsp, 0, 0, 0, 0, out), 0);
	cr_assert_eq(push(bsp, 1, 0, 0, 0, out), 3);
	cr_assert_eq(out[0].type, KN__SYNC_ACT_APPLY);
	cr_assert(!out[0].share);
	kn__sync_rule_destroy(bsp);
	kn__sync_rule_destroy(asp);
}

/*
 * The parameter table: every JOB word once, every default in its range
 * and resolved to itself, and a block packed and unpacked unchanged.
 */
Test(rules, the_parameter_table_covers_the_block_once)
{
	struct kn__sync_params zero = { KN_SYNC_BSP, 4, 4 }, res = zero,
			       back = zero;
	uint32_t words[KN__SYNC_PARAMS_WORDS], again[KN__SYNC_PARAMS_WORDS];
	uint32_t seen = 0;

	cr_assert_eq(kn__sync_params_resolve(&res), 0);
	for (uint32_t i = 0; i < KN__SYNC_PARAMS_WORDS; i++) {
		const struct kn__sync_param *t = &kn__sync_param_table[i];
		struct kn__sync_params one = zero;
		uint32_t w;

		cr_assert_lt(t->word, KN__SYNC_PARAMS_WORDS);
		cr_assert_eq(seen & (1u << t->word), 0, "%s: word %u twice",
			     t->flag, t->word);
		seen |= 1u << t->word;
		cr_assert_lt(t->off + sizeof(uint32_t), sizeof(zero) + 1);
		cr_assert(t->flag && t->env && t->arg && t->deflt && t->help);
		/* the resolved default, set by hand, is taken as it is */
		memcpy(&w, (const char *)&res + t->off, sizeof(w));
		memcpy((char *)&one + t->off, &w, sizeof(w));
		cr_assert_eq(kn__sync_params_resolve(&one), 0, "%s", t->flag);
		kn__sync_params_pack(&one, words);
		kn__sync_params_pack(&res, again);
		cr_assert_eq(memcmp(words, again, sizeof(words)), 0, "%s",
			     t->flag);
	}
	cr_assert_eq(seen, (1u << KN__SYNC_PARAMS_WORDS) - 1);
	kn__sync_params_pack(&res, words);
	kn__sync_params_unpack(&back, words);
	kn__sync_params_pack(&back, again);
	cr_assert_eq(memcmp(words, again, sizeof(words)), 0);
	/* the words' order is the JOB message's: staleness first, then
	 * max_skip, max_steps, warmup, gamma... outer_momentum last */
	cr_assert_eq(words[0], 3);
	cr_assert_eq(words[1], 8);
	cr_assert_eq(words[2], 15);
	cr_assert_eq(words[3], 3);
	cr_assert_eq(words[9], 20);
	cr_assert_eq(words[10], 100);
	cr_assert_eq(words[15], 0);
}

/*
 * The public query is the table, row for row, and a block's values come
 * out exact (a float's by its value, a choice's by its index).
 */
Test(rules, the_public_query_is_the_parameter_table)
{
	struct kn__sync_params p = { KN_SYNC_BSP, 4, 4 };
	struct kn_sync_param q;
	unsigned int i;

	p.gamma = 0.3f;
	p.solver = KN__SYNC_CGP_PLS;
	cr_assert_eq(kn__sync_params_resolve(&p), 0);
	for (i = 0; kn_sync_param_at(i, &q) == 0; i++) {
		const struct kn__sync_param *t = &kn__sync_param_table[i];
		double v = kn__sync_param_value(&p, i);

		cr_assert_str_eq(q.name, t->name);
		cr_assert_str_eq(q.option, t->flag);
		cr_assert_str_eq(q.variable, t->env);
		cr_assert_str_eq(q.default_value, t->deflt);
		cr_assert_str_eq(q.help, t->help);
		cr_assert_eq((uint32_t)q.type, t->type);
		cr_assert_eq(q.min, t->lo);
		cr_assert_eq(q.max, t->hi);
		cr_assert_eq(q.min_closed, t->lo_closed);
		cr_assert_eq(q.type == KN_SYNC_PARAM_CHOICE, q.choices != NULL);
		if (strcmp(q.name, "gamma") == 0)
			cr_assert_eq(v, (double)0.3f);
		if (strcmp(q.name, "max_skip") == 0)
			cr_assert_eq(v, 8.0);
		if (q.type == KN_SYNC_PARAM_CHOICE) {
			cr_assert_str_eq(q.choices[(unsigned int)v], "pls");
			cr_assert_str_eq(q.choices[KN__SYNC_CGP_AUTO], "auto");
			cr_assert_null(q.choices[3]);
		}
	}
	cr_assert_eq(i, KN__SYNC_PARAMS_WORDS);
	cr_assert_eq(kn_sync_param_at(i, &q), -ENOENT);
	cr_assert_eq(kn_sync_param_at(0, NULL), -EINVAL);
}

/* Out of its table's range is refused, and the block left as it was. */
Test(rules, a_parameter_out_of_range_is_refused_untouched)
{
	struct kn__sync_params p = { KN_SYNC_SSP, 4, 4 }, before;

	p.staleness = (1u << 20) + 1;
	before = p;
	cr_assert_eq(kn__sync_params_resolve(&p), -EINVAL);
	cr_assert_eq(p.staleness, before.staleness);
	cr_assert_eq(p.max_skip, 0, "a refused block keeps its zeros");
	p.staleness = 1u << 20;
	p.outer_momentum = 1;
	cr_assert_eq(kn__sync_params_resolve(&p), -EINVAL);
	p.outer_momentum = 0.5f;
	p.alpha = 1;
	cr_assert_eq(kn__sync_params_resolve(&p), 0);
	cr_assert_eq(p.max_skip, 8);
	p.solver = 3;
	cr_assert_eq(kn__sync_params_resolve(&p), -EINVAL);
}

Test(rules, max_actions_per_protocol)
{
	struct kn__sync_params p = { KN_SYNC_BSP, 8, 8 };

	cr_assert_eq(kn__sync_max_actions(&p), 9);
	p.max_workers = 1000;
	cr_assert_eq(kn__sync_max_actions(&p), 1001);
	p.protocol = KN_SYNC_ASP;
	cr_assert_eq(kn__sync_max_actions(&p), 2);
	p.protocol = 99;
	cr_assert_eq(kn__sync_max_actions(&p), 0);
	cr_assert_eq(kn__sync_max_actions(NULL), 0);
}

Test(rules, create_refuses_bad_params_and_leaves_out_alone)
{
	struct kn__sync_params bad[] = {
		{ KN_SYNC_BSP, 0, 0 },
		{ KN_SYNC_BSP, 4, 5 },
		{ 99, 4, 4 },
		{ KN_SYNC_ASP, KN__SYNC_MAX_WORKERS + 1, 0 },
		{ KN_SYNC_SSP, 4, 4, .gamma = NAN },
		{ KN_SYNC_SSP, 4, 4, .theta = -1 },
		{ KN_SYNC_SSP, 4, 4, .alpha = 1.5f },
		{ KN_SYNC_SSP, 4, 4, .miss = NAN },
		{ KN_SYNC_SSP, 4, 4, .max_steps = 1025 },
	};
	struct kn__sync_rule *sentinel = (struct kn__sync_rule *)&bad;
	struct kn__sync_rule *rule = sentinel;
	struct kn__sync_planner *planner = (struct kn__sync_planner *)&bad;
	struct kn__sync_worker *worker = (struct kn__sync_worker *)&bad;
	struct kn__sync_params ok = { KN_SYNC_BSP, 4, 0 };

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cr_assert_eq(kn__sync_rule_create(&bad[i], &rule), -EINVAL,
			     "params %zu", i);
		cr_assert_eq(kn__sync_planner_create(&bad[i], &planner),
			     -EINVAL);
		cr_assert_eq(kn__sync_worker_create(&bad[i], 0, &worker),
			     -EINVAL);
	}
	cr_assert_eq(kn__sync_rule_create(NULL, &rule), -EINVAL);
	cr_assert_eq(kn__sync_rule_create(&ok, NULL), -EINVAL);
	cr_assert_eq(kn__sync_worker_create(&ok, 4, &worker), -EINVAL);
	cr_assert_eq(rule, sentinel);
	cr_assert_eq((void *)planner, (void *)&bad);
	cr_assert_eq((void *)worker, (void *)&bad);

	/* no members at all is a valid start: workers join later */
	cr_assert_eq(kn__sync_rule_create(&ok, &rule), 0);
	cr_assert_eq(kn__sync_rule_version(rule), 0);
	kn__sync_rule_destroy(rule);
	kn__sync_rule_destroy(NULL);
	kn__sync_planner_destroy(NULL);
	kn__sync_worker_destroy(NULL);
}

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
	assert_bsp_round(out, push(rule, 1, 0, 0, 0, out), all, 4, 0);
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
		assert_bsp_round(out, push(rule, 2, v, v, v & 1, out), all, 3,
				 v);
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
	assert_bsp_round(out, push(rule, 1, 0, 0, 0, out), all, 2, 0);
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
	assert_bsp_round(out, push(rule, 1, 0, 0, 0, out), all, 2, 0);
	/* the round-0 push seen again, as it was or with the new version */
	cr_assert_eq(push(rule, 0, 0, 0, 0, out), -EINVAL);
	cr_assert_eq(push(rule, 0, 0, 1, 0, out), -EINVAL);
	/* computed from an old version: not a push of this round */
	cr_assert_eq(push(rule, 0, 1, 0, 1, out), -EINVAL);
	cr_assert_eq(push(rule, 0, 1, 1, 1, out), 0);
	assert_bsp_round(out, push(rule, 1, 1, 1, 1, out), all, 2, 1);
	kn__sync_rule_destroy(rule);
}

Test(bsp, leave_of_the_last_waited_for_member_completes_the_round)
{
	struct kn__sync_rule *rule = rule_new(KN_SYNC_BSP, MAXW, 3);
	struct kn__sync_action out[MAXACT];
	const uint32_t rest[] = { 0, 2 };

	cr_assert_eq(push(rule, 2, 0, 0, 1, out), 0);
	cr_assert_eq(push(rule, 0, 0, 0, 0, out), 0);
	assert_bsp_round(out, member_event(rule, KN__SYNC_EV_LEAVE, 1, out),
			 rest, 2, 0);
	cr_assert_eq(out[0].contrib[0].slot, 0);
	cr_assert_eq(out[0].contrib[1].slot, 1);
	/* and the next round needs only the two left */
	cr_assert_eq(push(rule, 0, 1, 1, 1, out), 0);
	assert_bsp_round(out, push(rule, 2, 1, 1, 0, out), rest, 2, 1);
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
	assert_bsp_round(out, push(rule, 2, 0, 0, 0, out), rest, 2, 0);
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
	assert_bsp_round(out, push(rule, 5, 0, 0, 0, out), five, 1, 0);
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
	assert_bsp_round(out, push(rule, 5, 0, 2, 1, out), three, 3, 2);
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
	assert_bsp_round(out, push(rule, 1, 0, 0, 0, out), all, 2, 0);
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
	assert_bsp_round(out, push(rule, 5, 1, 1, 1, out), three, 3, 1);
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

/* --- both protocols --------------------------------------------------- */

static void refusals(uint32_t protocol)
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

Test(bsp, refuses_bad_worker_ids_and_membership_errors)
{
	refusals(KN_SYNC_BSP);
}

Test(asp, refuses_bad_worker_ids_and_membership_errors)
{
	refusals(KN_SYNC_ASP);
}

static void timing_and_timer_do_nothing(uint32_t protocol)
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

Test(bsp, timing_and_timer_do_nothing)
{
	timing_and_timer_do_nothing(KN_SYNC_BSP);
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

/* --- planner and worker rule ------------------------------------------ */

static void planner_has_no_plans(uint32_t protocol)
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

static void worker_communicates_every_step(uint32_t protocol)
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

Test(worker, bsp_communicates_after_every_step)
{
	worker_communicates_every_step(KN_SYNC_BSP);
}

Test(worker, asp_communicates_after_every_step)
{
	worker_communicates_every_step(KN_SYNC_ASP);
}

/* --- randomized, against a reference model ---------------------------- */

static uint64_t rng_state;

static uint32_t rnd(uint32_t n)
{
	/* xorshift64*: fixed seed, same sequence on every machine */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return (uint32_t)((rng_state * 0x2545F4914F6CDD1DULL) >> 32) % n;
}

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

static void randomized(uint32_t protocol, uint64_t seed)
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

Test(bsp, randomized_sequences_match_the_model)
{
	randomized(KN_SYNC_BSP, 0x6b616e656cULL);
}

Test(asp, randomized_sequences_match_the_model)
{
	randomized(KN_SYNC_ASP, 0x73796e63ULL);
}
