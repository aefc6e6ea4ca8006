/* SPDX-License-Identifier: Apache-2.0 */
/*
 * params.c - the protocols' parameter block (struct kn__sync_params):
 * the table of its parameters (kn__sync_param_table: each one's option,
 * variable, default, range and help), from which the engine's options,
 * the simulator's and the defaults and checks here are all made, the
 * names of CGP's solvers, the block's one encoding as words, which the
 * engine's JOB message carries, and the public query of the table
 * (kn_sync_param_at: struct kn_job_info's params and the Python
 * package's mirror come from it).  A new parameter is a field in
 * sync.h, a row here and its lines in the docs.  No protocol code: the
 * message decoders (and their fuzz target) link it alone.
 */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "sync.h"

_Static_assert(sizeof(float) == sizeof(uint32_t),
	       "a float parameter is one word");

/* In the order the engine's usage lists them (and kn_sync_param_at
 * numbers them); @word is their place in the JOB message
 * (kn__sync_params_pack), which never changes.  A row's name is its
 * field's. */
#define F(field) #field, offsetof(struct kn__sync_params, field)
const struct kn__sync_param kn__sync_param_table[KN__SYNC_PARAMS_WORDS] = {
	{ F(staleness), "--staleness", "KANEL_STALENESS", "--staleness", "S",
	  KN__SYNC_PARAM_U32, 0, "3", 1, 1u << 20, false,
	  "SSP, ESP: pushes a worker may run ahead of the slowest" },
	{ F(max_skip), "--esp-max-skip", "KANEL_ESP_MAX_SKIP", "--max-skip",
	  "H", KN__SYNC_PARAM_U32, 1, "8", 1, 1u << 20, false,
	  "ESP: local steps after which a push is due" },
	{ F(gamma), "--esp-gamma", "KANEL_ESP_GAMMA", "--gamma", "G",
	  KN__SYNC_PARAM_FLOAT, 4, "1", 0, INFINITY, false,
	  "ESP: push when the expected cost is at most G local steps" },
	{ F(theta), "--esp-theta", "KANEL_ESP_THETA", "--theta", "T",
	  KN__SYNC_PARAM_FLOAT, 5, "0", 0, INFINITY, true,
	  "ESP: or when the model moved by T relative to its last version; "
	  "0: off" },
	{ F(max_steps), "--psp-max-steps", "KANEL_PSP_MAX_STEPS", "--max-steps",
	  "R", KN__SYNC_PARAM_U32, 2, "15", 1, 1024, false,
	  "predicted: most local steps a plan gives, 1 to 1024" },
	{ F(warmup), "--psp-warmup", "KANEL_PSP_WARMUP", "--warmup", "B",
	  KN__SYNC_PARAM_U32, 3, "3", 1, 1u << 20, false,
	  "predicted, cgp: barriers under BSP before the first plan" },
	/* (0, 1]: the range is half-open, so the top is just above 1 */
	{ F(alpha), "--psp-alpha", "KANEL_PSP_ALPHA", "--alpha", "A",
	  KN__SYNC_PARAM_FLOAT, 6, "0.5", 0, 1.0000001, false,
	  "predicted, cgp: weight of the newest timing, (0, 1]" },
	{ F(miss), "--psp-miss", "KANEL_PSP_MISS", "--miss", "M",
	  KN__SYNC_PARAM_FLOAT, 7, "0.25", 0, 1.0000001, false,
	  "predicted: re-plan when a prediction misses by more, (0, 1]" },
	{ F(solver), "--cgp-solver", "KANEL_CGP_SOLVER", "--cgp-solver", "S",
	  KN__SYNC_PARAM_SOLVER, 8, "auto", 0, 0, false,
	  "cgp: how workers are grouped; auto: aga up to 128 workers, pls "
	  "above" },
	{ F(bound), "--cgp-bound", "KANEL_CGP_BOUND", "--cgp-bound", "S",
	  KN__SYNC_PARAM_FLOAT, 11, "8", 0, INFINITY, false,
	  "cgp: most staleness the groups may cause, above 0" },
	{ F(epoch_rounds), "--cgp-epoch", "KANEL_CGP_EPOCH", "--cgp-epoch", "R",
	  KN__SYNC_PARAM_U32, 9, "40", 1, KN__SYNC_CGP_MAX_ROUNDS, false,
	  "cgp: rounds the fastest group runs between two barriers, 1 to "
	  "4095" },
	{ F(period), "--cgp-period", "KANEL_CGP_PERIOD", "--cgp-period", "T",
	  KN__SYNC_PARAM_U32, 10, "100", 1, UINT32_MAX, false,
	  "cgp: iterations between regroup checks, 1 or more" },
	/* the simulator prices syncs from its own network: none of its */
	{ F(latency), "--cgp-latency", "KANEL_CGP_LATENCY", NULL, "SECONDS",
	  KN__SYNC_PARAM_FLOAT, 12, "100e-6", 0, INFINITY, false,
	  "cgp: fixed seconds of a sync in its cost model, above 0" },
	{ F(bandwidth), "--cgp-bandwidth", "KANEL_CGP_BANDWIDTH", NULL,
	  "BYTES_PER_S", KN__SYNC_PARAM_FLOAT, 13, "1e9", 0, INFINITY, false,
	  "cgp: bytes per second the servers take in, in its cost model" },
	{ F(outer_lr), "--outer-lr", "KANEL_OUTER_LR", "--outer-lr", "RATE",
	  KN__SYNC_PARAM_FLOAT, 14, "1", 0, INFINITY, false,
	  "esp, predicted: the servers' rate on the mean model delta, "
	  "above 0" },
	{ F(outer_momentum), "--outer-momentum", "KANEL_OUTER_MOMENTUM",
	  "--outer-momentum", "MU", KN__SYNC_PARAM_FLOAT, 15, "0", 0, 1, true,
	  "esp, predicted: Nesterov momentum of the servers' update, in "
	  "[0, 1)" },
};
#undef F

/* In the order a usage line lists them. */
static const struct solver {
	const char *name;
	uint32_t solver;
} solvers[] = {
	{ "aga", KN__SYNC_CGP_AGA },
	{ "pls", KN__SYNC_CGP_PLS },
	{ "auto", KN__SYNC_CGP_AUTO },
};

#define NSOLVERS (sizeof(solvers) / sizeof(solvers[0]))

/* The same by value: a CHOICE's choices (kn_sync_param_at). */
static const char *const solver_names[] = {
	[KN__SYNC_CGP_AUTO] = "auto",
	[KN__SYNC_CGP_AGA] = "aga",
	[KN__SYNC_CGP_PLS] = "pls",
	NULL,
};

const char *kn__sync_cgp_solver_name(uint32_t solver)
{
	return solver < NSOLVERS ? solver_names[solver] : NULL;
}

int kn__sync_cgp_solver_parse(const char *name)
{
	for (uint32_t i = 0; name && i < NSOLVERS; i++)
		if (strcmp(solvers[i].name, name) == 0)
			return (int)solvers[i].solver;
	return -EINVAL;
}

const char *kn__sync_cgp_solver_name_at(uint32_t i, uint32_t *solver)
{
	if (i >= NSOLVERS)
		return NULL;
	*solver = solvers[i].solver;
	return solvers[i].name;
}

/* A field of @p as the word it is (a float by its bits). */
static uint32_t word_of(const struct kn__sync_params *p,
			const struct kn__sync_param *t)
{
	uint32_t w;

	memcpy(&w, (const char *)p + t->off, sizeof(w));
	return w;
}

static void set_word(struct kn__sync_params *p, const struct kn__sync_param *t,
		     uint32_t w)
{
	memcpy((char *)p + t->off, &w, sizeof(w));
}

static float float_of(uint32_t w)
{
	float f;

	memcpy(&f, &w, sizeof(f));
	return f;
}

/* Whether @w, a value of @t and not 0 ("the default"), is in range. */
static bool in_range(const struct kn__sync_param *t, uint32_t w)
{
	float f;

	switch (t->type) {
	case KN__SYNC_PARAM_U32:
		return w >= t->lo && w <= t->hi;
	case KN__SYNC_PARAM_FLOAT:
		f = float_of(w);
		return isfinite(f) && f >= t->lo &&
		       (t->lo_closed || f > t->lo) && f < t->hi;
	case KN__SYNC_PARAM_SOLVER:
		return kn__sync_cgp_solver_name(w) != NULL;
	}
	return false;
}

/* @t's default as a word. */
static uint32_t default_of(const struct kn__sync_param *t)
{
	float f;
	uint32_t w;

	switch (t->type) {
	case KN__SYNC_PARAM_U32:
		return (uint32_t)strtoul(t->deflt, NULL, 10);
	case KN__SYNC_PARAM_FLOAT:
		f = (float)strtod(t->deflt, NULL);
		memcpy(&w, &f, sizeof(w));
		return w;
	default: /* KN__SYNC_PARAM_SOLVER */
		return (uint32_t)kn__sync_cgp_solver_parse(t->deflt);
	}
}

/* A float 0 is either zero; its bits are not. */
static bool is_zero(const struct kn__sync_param *t, uint32_t w)
{
	return t->type == KN__SYNC_PARAM_FLOAT ? float_of(w) == 0 : w == 0;
}

int kn__sync_params_resolve(struct kn__sync_params *p)
{
	const struct kn__sync_param *t;

	if (!p)
		return -EINVAL;
	/* every value first: a refused block is left as it was */
	for (t = kn__sync_param_table;
	     t < kn__sync_param_table + KN__SYNC_PARAMS_WORDS; t++) {
		uint32_t w = word_of(p, t);

		if (!is_zero(t, w) && !in_range(t, w))
			return -EINVAL;
	}
	for (t = kn__sync_param_table;
	     t < kn__sync_param_table + KN__SYNC_PARAMS_WORDS; t++)
		if (is_zero(t, word_of(p, t)))
			set_word(p, t, default_of(t));
	return 0;
}

void kn__sync_params_pack(const struct kn__sync_params *p,
			  uint32_t w[KN__SYNC_PARAMS_WORDS])
{
	for (uint32_t i = 0; i < KN__SYNC_PARAMS_WORDS; i++)
		w[kn__sync_param_table[i].word] =
			word_of(p, &kn__sync_param_table[i]);
}

void kn__sync_params_unpack(struct kn__sync_params *p,
			    const uint32_t w[KN__SYNC_PARAMS_WORDS])
{
	for (uint32_t i = 0; i < KN__SYNC_PARAMS_WORDS; i++)
		set_word(p, &kn__sync_param_table[i],
			 w[kn__sync_param_table[i].word]);
}

double kn__sync_param_value(const struct kn__sync_params *p, uint32_t i)
{
	const struct kn__sync_param *t = &kn__sync_param_table[i];
	uint32_t w = word_of(p, t);

	return t->type == KN__SYNC_PARAM_FLOAT ? (double)float_of(w)
					       : (double)w;
}

_Static_assert(KN__SYNC_PARAMS_WORDS <= KN_SYNC_PARAMS_MAX,
	       "struct kn_job_info has room for every parameter");

int kn_sync_param_at(unsigned int i, struct kn_sync_param *param)
{
	const struct kn__sync_param *t;

	if (!param)
		return -EINVAL;
	if (i >= KN__SYNC_PARAMS_WORDS)
		return -ENOENT;
	t = &kn__sync_param_table[i];
	*param = (struct kn_sync_param){
		.name = t->name,
		.option = t->flag,
		.variable = t->env,
		.type = (enum kn_sync_param_type)t->type,
		.default_value = t->deflt,
		.min = t->lo,
		.max = t->hi,
		.min_closed = t->lo_closed,
		.choices =
			t->type == KN__SYNC_PARAM_SOLVER ? solver_names : NULL,
		.help = t->help,
	};
	return 0;
}
