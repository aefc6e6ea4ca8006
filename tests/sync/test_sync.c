/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_sync.c - the generic half of sync/ (sync.c, registry.c, params.c;
 * docs/protocols.md): protocol names, traits, the parameter table and its
 * JOB words, max_actions, and what creation refuses.  Each protocol's own
 * rules are in test_<protocol>.c.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include <criterion/criterion.h>

#include "sync_test.h"

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
	cr_assert_eq(words[9], 40);
	cr_assert_eq(words[10], 100);
	cr_assert_eq(words[15], 0);
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
