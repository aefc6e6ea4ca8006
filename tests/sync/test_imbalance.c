/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_imbalance.c - the injected-delay models of sync/imbalance.h
 * (docs/imbalance.md): the spec grammar, defaults, canonical form and
 * refusals; the exact sizes of slow sets and that every process picks
 * the same ones; and the distributions (jitter, per-step draws, episode
 * membership, phases) against bounds that a wrong model would miss.
 * Seeds are fixed, so each statistical check is deterministic; the
 * bounds are 4 sigma so that they also hold for other seeds.  The cost
 * test prints nanoseconds per call at the simulator's scale.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <criterion/criterion.h>

#include "imbalance.h"

/* --- helpers ---------------------------------------------------------- */

static struct kn__imb parse_ok(const char *spec, uint64_t seed)
{
	struct kn__imb m;
	char err[256] = "";
	int rc = kn__imb_parse(spec, seed, &m, err, sizeof(err));

	cr_assert_eq(rc, 0, "parse \"%s\": %d (%s)", spec, rc, err);
	return m;
}

/* Field by field: the structs have padding. */
static bool same_model(const struct kn__imb *a, const struct kn__imb *b)
{
	return a->kind == b->kind && a->fraction == b->fraction &&
	       a->factor == b->factor && a->p == b->p &&
	       a->period == b->period && a->duration == b->duration &&
	       a->amplitude == b->amplitude && a->k == b->k &&
	       a->jitter_sigma == b->jitter_sigma && a->seed == b->seed;
}

static void worker_ok(const struct kn__imb *m, unsigned rank, unsigned n,
		      struct kn__imb_worker *w)
{
	cr_assert_eq(kn__imb_worker_init(m, rank, n, w), 0, "rank %u of %u",
		     rank, n);
}

/* Workers 0 .. n - 1 of @m, in calloc'd memory. */
static struct kn__imb_worker *workers_new(const struct kn__imb *m, unsigned n)
{
	struct kn__imb_worker *w = calloc(n, sizeof(*w));

	cr_assert_not_null(w);
	for (unsigned i = 0; i < n; i++)
		worker_ok(m, i, n, &w[i]);
	return w;
}

/* How many of @n workers have factor @f at time @t. */
static unsigned count_at(const struct kn__imb *m, struct kn__imb_worker *w,
			 unsigned n, double t, double f)
{
	unsigned c = 0;

	for (unsigned i = 0; i < n; i++)
		c += kn__imb_factor(m, &w[i], t) == f;
	return c;
}

/* |x - mean| within 4 binomial sigmas of @trials draws with @p. */
static void assert_binomial(double x, double trials, double p, const char *what)
{
	double mean = trials * p, sigma = sqrt(trials * p * (1 - p));

	cr_assert(fabs(x - mean) <= 4 * sigma,
		  "%s: %.0f, expected %.1f +- %.1f", what, x, mean, 4 * sigma);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* --- parsing ---------------------------------------------------------- */

#define PERS KN__IMB_PERSISTENT
#define RAND KN__IMB_RANDOM
#define EPIS KN__IMB_EPISODIC
#define PERI KN__IMB_PERIODIC

/*
 * Specs, the seed each is parsed with, and the whole model it must give,
 * in struct kn__imb's order: kind, fraction, factor, p, period,
 * duration, amplitude, k, jitter_sigma (the fields of other kinds 0);
 * the seed is the one given.  @defaults: some fields left out.
 */
static const struct {
	bool defaults;
	const char *spec;
	uint64_t seed;
	struct kn__imb want;
} parses[] = {
	/* every field given */
	{ false, "none", 9, { KN__IMB_NONE, 0, 0, 0, 0, 0, 0, 0, 0 } },
	{ false, "persistent:0.1:8", 1, { PERS, 0.1, 8, 0, 0, 0, 0, 0, 0.05 } },
	{ false, "random:0.2:1.5", 1, { RAND, 0, 1.5, 0.2, 0, 0, 0, 0, 0 } },
	{ false, "episodic:60:20:3:2", 1, { EPIS, 0, 2, 0, 60, 20, 0, 3, 0 } },
	{ false, "periodic:90:0.25", 1, { PERI, 0, 0, 0, 90, 0, 0.25, 0, 0 } },
	/* edges of the ranges are accepted */
	{ false, "persistent:0:1", 1, { PERS, 0, 1, 0, 0, 0, 0, 0, 0.05 } },
	{ false,
	  "persistent:1:1e3",
	  1,
	  { PERS, 1, 1000, 0, 0, 0, 0, 0, 0.05 } },
	{ false, "random:1:4", 1, { RAND, 0, 4, 1, 0, 0, 0, 0, 0 } },
	{ false, "episodic:30:30:1:4", 1, { EPIS, 0, 4, 0, 30, 30, 0, 1, 0 } },
	{ false, "periodic:1:0", 1, { PERI, 0, 0, 0, 1, 0, 0, 0, 0 } },
	{ false,
	  "periodic:.5:0.999",
	  1,
	  { PERI, 0, 0, 0, 0.5, 0, 0.999, 0, 0 } },
	/* trailing fields left to their defaults */
	{ true, "persistent", 1, { PERS, 0.25, 4, 0, 0, 0, 0, 0, 0.05 } },
	{ true, "persistent:0.5", 1, { PERS, 0.5, 4, 0, 0, 0, 0, 0, 0.05 } },
	{ true, "random", 1, { RAND, 0, 4, 0.05, 0, 0, 0, 0, 0 } },
	{ true, "random:0.5", 1, { RAND, 0, 4, 0.5, 0, 0, 0, 0, 0 } },
	{ true, "episodic", 1, { EPIS, 0, 4, 0, 30, 10, 0, 1, 0 } },
	{ true, "episodic:40", 1, { EPIS, 0, 4, 0, 40, 10, 0, 1, 0 } },
	{ true, "episodic:40:20", 1, { EPIS, 0, 4, 0, 40, 20, 0, 1, 0 } },
	{ true, "episodic:40:20:5", 1, { EPIS, 0, 4, 0, 40, 20, 0, 5, 0 } },
	{ true, "periodic", 1, { PERI, 0, 0, 0, 120, 0, 0.5, 0, 0 } },
	{ true, "periodic:60", 1, { PERI, 0, 0, 0, 60, 0, 0.5, 0, 0 } },
};

/* The specs of parses[] with @defaults or without parse as they must. */
static void assert_parses(bool defaults)
{
	for (size_t i = 0; i < sizeof(parses) / sizeof(parses[0]); i++) {
		const char *spec = parses[i].spec;
		const struct kn__imb *w = &parses[i].want;
		struct kn__imb m;

		if (parses[i].defaults != defaults)
			continue;
		m = parse_ok(spec, parses[i].seed);
		cr_assert_eq(m.kind, w->kind, "%s", spec);
		cr_assert_eq(m.fraction, w->fraction, "%s", spec);
		cr_assert_eq(m.factor, w->factor, "%s", spec);
		cr_assert_eq(m.p, w->p, "%s", spec);
		cr_assert_eq(m.period, w->period, "%s", spec);
		cr_assert_eq(m.duration, w->duration, "%s", spec);
		cr_assert_eq(m.amplitude, w->amplitude, "%s", spec);
		cr_assert_eq(m.k, w->k, "%s", spec);
		cr_assert_eq(m.jitter_sigma, w->jitter_sigma, "%s", spec);
		cr_assert_eq(m.seed, parses[i].seed, "%s", spec);
	}
}

Test(imbalance, parse_every_field)
{
	assert_parses(false);
}

Test(imbalance, parse_defaults)
{
	assert_parses(true);
}

Test(imbalance, format_is_canonical_and_round_trips)
{
	static const struct {
		const char *spec, *canonical;
	} cases[] = {
		{ "none", "none" },
		{ "persistent", "persistent:0.25:4" },
		{ "persistent:0.5", "persistent:0.5:4" },
		{ "persistent:1e-3:4.0", "persistent:0.001:4" },
		{ "persistent:-0:2", "persistent:0:2" },
		{ "random", "random:0.05:4" },
		{ "random:0.30000000000000004:1.5",
		  "random:0.30000000000000004:1.5" },
		{ "episodic", "episodic:30:10:1:4" },
		{ "episodic:0.3:0.1:007:8", "episodic:0.3:0.1:7:8" },
		{ "periodic", "periodic:120:0.5" },
		{ "periodic:1e6:0.999", "periodic:1e+06:0.999" },
	};
	char buf[128];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct kn__imb m = parse_ok(cases[i].spec, 5), back;
		int len = kn__imb_format(&m, buf, sizeof(buf));

		cr_assert_eq(len, (int)strlen(cases[i].canonical), "%s",
			     cases[i].spec);
		cr_assert_str_eq(buf, cases[i].canonical);
		back = parse_ok(buf, 5);
		cr_assert(same_model(&back, &m), "%s", buf);

		/* Exactly enough room, then one byte less. */
		cr_assert_eq(kn__imb_format(&m, buf, (size_t)len + 1), len);
		cr_assert_eq(kn__imb_format(&m, buf, (size_t)len), -ENOSPC);
	}
}

Test(imbalance, parse_rejects_bad_specs)
{
	static const struct {
		const char *spec, *names;
	} cases[] = {
		{ "", "model" },
		{ "slow", "\"slow\"" },
		{ "Persistent", "\"Persistent\"" },
		{ "none:1", "none takes at most 0" },
		{ "persistent:1.5", "FRACTION" },
		{ "persistent:-0.1", "FRACTION" },
		{ "persistent:0.25:0.5", "FACTOR" },
		{ "persistent:0.25:4 ", "FACTOR" },
		{ "persistent:0.25:4:1", "at most 2 fields" },
		{ "persistent::4", "FRACTION is empty" },
		{ "random:1.01", "random P must" },
		{ "random:nan", "random P must" },
		{ "random:-0.5", "random P must" },
		{ "random:0.1:inf", "FACTOR" },
		{ "random:0.1:4x", "FACTOR" },
		{ "random:0.1:4:", "at most 2 fields" },
		{ "random:", "random P is empty" },
		{ "episodic:0", "PERIOD" },
		{ "episodic:30:40", "DURATION" },
		{ "episodic:30:0", "DURATION" },
		{ "episodic:30:10:0", "K" },
		{ "episodic:30:10:1.5", "K" },
		{ "episodic:30:10:-1", "K" },
		{ "episodic:30:10:99999999999", "K" },
		{ "episodic:30:10:1:0.99", "FACTOR" },
		{ "episodic:30:10:1:4:5", "at most 4 fields" },
		{ "periodic:120:1", "AMPLITUDE" },
		{ "periodic:120: 0.5", "AMPLITUDE" },
		{ "periodic:-5", "PERIOD" },
		{ "periodic:0x10", "PERIOD" },
		{ "periodic:1e999", "PERIOD" },
	};
	struct kn__imb m, before;
	char err[256];

	memset(&before, 0xa5, sizeof(before));
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		memcpy(&m, &before, sizeof(m)); /* padding too */
		err[0] = '\0';
		cr_assert_eq(
			kn__imb_parse(cases[i].spec, 1, &m, err, sizeof(err)),
			-EINVAL, "\"%s\" accepted", cases[i].spec);
		cr_assert(strstr(err, cases[i].names), "\"%s\": \"%s\"",
			  cases[i].spec, err);
		cr_assert_eq(memcmp(&m, &before, sizeof(m)), 0,
			     "\"%s\" wrote the model", cases[i].spec);
	}

	/* The message says what is accepted, and fits any buffer. */
	kn__imb_parse("random:2", 1, &m, err, sizeof(err));
	cr_assert_str_eq(err, "random P must be a number in [0, 1], got \"2\"");
	kn__imb_parse("episodic:30:40", 1, &m, err, sizeof(err));
	cr_assert_str_eq(err, "episodic DURATION must be in (0, PERIOD], "
			      "got 40 with PERIOD 30");
	kn__imb_parse("slow", 1, &m, err, 5);
	cr_assert_str_eq(err, "unkn");
	cr_assert_eq(kn__imb_parse("slow", 1, &m, NULL, 0), -EINVAL);
	cr_assert_eq(kn__imb_parse(NULL, 1, &m, NULL, 0), -EINVAL);
}

/* --- none ------------------------------------------------------------- */

Test(imbalance, none_is_always_one)
{
	struct kn__imb m = parse_ok("none", 3);
	struct kn__imb_worker w;

	worker_ok(&m, 0, 1, &w);
	for (int i = 0; i < 1000; i++)
		cr_assert_eq(kn__imb_factor(&m, &w, i * 0.37), 1.0);
	cr_assert_not(kn__imb_is_slow(&m, 0, 1));
	cr_assert_eq(kn__imb_worker_init(&m, 1, 1, &w), -EINVAL);
	cr_assert_eq(kn__imb_worker_init(&m, 0, 0, &w), -EINVAL);
}

/* --- persistent ------------------------------------------------------- */

Test(imbalance, persistent_sets_have_exact_size)
{
	static const unsigned ns[] = { 1, 4, 8, 10, 100, 10000 };
	static const char *const specs[] = {
		"persistent:0:4", "persistent:0.25:4",	"persistent:0.5:4",
		"persistent:1:4", "persistent:0.001:4", "persistent:0.4:4",
	};
	/*
	 * round(FRACTION * n), halves away from zero (2.5 -> 3), at least 1
	 * when FRACTION > 0, at most n.
	 */
	static const unsigned want[6][6] = {
		{ 0, 0, 0, 0, 0, 0 },	  { 1, 1, 2, 3, 25, 2500 },
		{ 1, 2, 4, 5, 50, 5000 }, { 1, 4, 8, 10, 100, 10000 },
		{ 1, 1, 1, 1, 1, 10 },	  { 1, 2, 3, 4, 40, 4000 },
	};

	for (size_t s = 0; s < 6; s++) {
		struct kn__imb m = parse_ok(specs[s], 42);

		for (size_t j = 0; j < 6; j++) {
			unsigned n = ns[j], by_set = 0, by_factor = 0;
			struct kn__imb_worker w;

			for (unsigned r = 0; r < n; r++) {
				bool slow = kn__imb_is_slow(&m, r, n);
				double f;

				worker_ok(&m, r, n, &w);
				f = kn__imb_factor(&m, &w, 0);
				/* 4 * jitter vs 1 * jitter: 2 is 13 sigma. */
				cr_assert_eq(f > 2, slow, "%s rank %u/%u: %g",
					     specs[s], r, n, f);
				by_set += slow;
				by_factor += f > 2;
			}
			cr_assert_eq(by_set, want[s][j], "%s n=%u: %u",
				     specs[s], n, by_set);
			cr_assert_eq(by_factor, want[s][j]);
			cr_assert_not(kn__imb_is_slow(&m, n, n));
		}
	}
}

Test(imbalance, persistent_set_depends_on_seed_only)
{
	struct kn__imb a = parse_ok("persistent:0.25:4", 1);
	struct kn__imb a2 = parse_ok("persistent:0.25:8", 1);
	struct kn__imb b = parse_ok("persistent:0.25:4", 2);
	struct kn__imb half = parse_ok("persistent:0.5:4", 1);
	unsigned differ = 0, first = 0;

	for (unsigned r = 0; r < 100; r++) {
		bool in_a = kn__imb_is_slow(&a, r, 100);

		/* Another process parsing the same spec and seed agrees. */
		cr_assert_eq(kn__imb_is_slow(&a2, r, 100), in_a);
		differ += kn__imb_is_slow(&b, r, 100) != in_a;
		/* Larger fractions extend the set (positions < count). */
		if (in_a)
			cr_assert(kn__imb_is_slow(&half, r, 100));
		first += in_a && r < 25;
	}
	cr_assert_gt(differ, 0, "seeds 1 and 2 chose the same set");
	cr_assert_lt(first, 25, "the set is the first ranks");
}

Test(imbalance, persistent_every_rank_equally_likely)
{
	/* n = 10 exercises cycle-walking over a domain of 16. */
	static const struct {
		const char *spec;
		unsigned n;
		double p;
	} cases[] = {
		{ "persistent:0.25:4", 100, 0.25 },
		{ "persistent:0.3:4", 10, 0.3 },
	};

	for (size_t c = 0; c < 2; c++) {
		unsigned n = cases[c].n, hits[100] = { 0 };
		const unsigned seeds = 2000;

		for (uint64_t seed = 0; seed < seeds; seed++) {
			struct kn__imb m = parse_ok(cases[c].spec, seed);

			for (unsigned r = 0; r < n; r++)
				hits[r] += kn__imb_is_slow(&m, r, n);
		}
		for (unsigned r = 0; r < n; r++) {
			char what[64];

			snprintf(what, sizeof(what), "%s n=%u rank %u",
				 cases[c].spec, n, r);
			assert_binomial(hits[r], seeds, cases[c].p, what);
		}
	}
}

Test(imbalance, persistent_jitter_is_lognormal_mean_one)
{
	struct kn__imb m = parse_ok("persistent:0.5:4", 11);
	const int steps = 100000;

	for (unsigned r = 0; r < 2; r++) {
		struct kn__imb_worker w;
		double factor = kn__imb_is_slow(&m, r, 2) ? 4 : 1;
		double sum = 0, sl = 0, sl2 = 0, mean_log, sd_log;

		worker_ok(&m, r, 2, &w);
		for (int i = 0; i < steps; i++) {
			double f = kn__imb_factor(&m, &w, i * 0.1);
			double l = log(f / factor);

			sum += f / factor;
			sl += l;
			sl2 += l * l;
		}
		mean_log = sl / steps;
		sd_log = sqrt(sl2 / steps - mean_log * mean_log);
		cr_assert(fabs(sum / steps - 1) < 0.002, "rank %u mean %g", r,
			  sum / steps);
		cr_assert(fabs(sd_log - 0.05) < 0.002, "rank %u sd %g", r,
			  sd_log);
		/* mu = -sigma^2 / 2 = -0.00125, sd of the mean 1.6e-4. */
		cr_assert(fabs(mean_log + 0.00125) < 0.0007, "rank %u mu %g", r,
			  mean_log);
	}
	cr_assert(kn__imb_is_slow(&m, 0, 2) != kn__imb_is_slow(&m, 1, 2));
}

/* --- random (F1) ------------------------------------------------------ */

Test(imbalance, random_fraction_is_p)
{
	static const char *const specs[] = { "random:0.05:4",
					     "random:0.3:2.5" };
	static const double ps[] = { 0.05, 0.3 }, fs[] = { 4, 2.5 };
	const int steps = 200000;

	for (int s = 0; s < 2; s++) {
		struct kn__imb m = parse_ok(specs[s], 77);
		struct kn__imb_worker w;
		unsigned slow = 0, pairs = 0;
		bool prev = false;

		worker_ok(&m, 5, 8, &w);
		for (int i = 0; i < steps; i++) {
			double f = kn__imb_factor(&m, &w, i * 0.1);

			cr_assert(f == 1 || f == fs[s], "%s: %g", specs[s], f);
			slow += f == fs[s];
			pairs += prev && f == fs[s];
			prev = f == fs[s];
		}
		assert_binomial(slow, steps, ps[s], specs[s]);
		/* Independent steps: two slow in a row with P^2. */
		assert_binomial(pairs, steps - 1, ps[s] * ps[s], "pairs");
	}
}

Test(imbalance, random_extreme_probabilities)
{
	struct kn__imb never = parse_ok("random:0:4", 1);
	struct kn__imb always = parse_ok("random:1:4", 1);
	struct kn__imb_worker a, b;

	worker_ok(&never, 0, 1, &a);
	worker_ok(&always, 0, 1, &b);
	for (int i = 0; i < 10000; i++) {
		cr_assert_eq(kn__imb_factor(&never, &a, i), 1.0);
		cr_assert_eq(kn__imb_factor(&always, &b, i), 4.0);
	}
}

Test(imbalance, random_sequence_is_seed_and_rank)
{
	struct kn__imb m = parse_ok("random:0.5:4", 123);
	struct kn__imb other = parse_ok("random:0.5:4", 124);
	struct kn__imb_worker a, b, c, d;
	unsigned diff_rank = 0, diff_seed = 0;

	worker_ok(&m, 3, 10, &a);
	worker_ok(&m, 3, 10, &b);
	worker_ok(&m, 4, 10, &c);
	worker_ok(&other, 3, 10, &d);
	for (int i = 0; i < 1000; i++) {
		double f = kn__imb_factor(&m, &a, i * 0.5);

		cr_assert_eq(kn__imb_factor(&m, &b, i * 0.5), f);
		diff_rank += kn__imb_factor(&m, &c, i * 0.5) != f;
		diff_seed += kn__imb_factor(&other, &d, i * 0.5) != f;
	}
	/* Unrelated sequences differ in half the steps at P = 0.5. */
	assert_binomial(diff_rank, 1000, 0.5, "rank 3 vs 4");
	assert_binomial(diff_seed, 1000, 0.5, "seed 123 vs 124");
}

/* --- episodic (F2) ---------------------------------------------------- */

Test(imbalance, episodic_exactly_k_inside_none_outside)
{
	const unsigned n = 100, k = 7;
	struct kn__imb m = parse_ok("episodic:30:10:7:4", 99);
	struct kn__imb_worker *w = workers_new(&m, n);
	static const double inside[] = { 0, 5, 9.999 };
	static const double outside[] = { 10, 20, 29.999 };
	bool first[100], changed = false;

	for (unsigned e = 0; e < 200; e++) {
		struct kn__imb_worker *fresh = workers_new(&m, n);
		double t0 = e * 30.0;

		for (int j = 0; j < 3; j++)
			cr_assert_eq(count_at(&m, w, n, t0 + inside[j], 4), k,
				     "episode %u at +%g", e, inside[j]);
		for (unsigned r = 0; r < n; r++) {
			bool in = kn__imb_factor(&m, &w[r], t0 + 5) == 4;

			/* The same workers the whole episode... */
			cr_assert_eq(kn__imb_factor(&m, &w[r], t0) == 4, in);
			/* ...and in a process that never saw earlier ones. */
			cr_assert_eq(kn__imb_factor(&m, &fresh[r], t0 + 1) == 4,
				     in);
			if (e == 0)
				first[r] = in;
			else if (first[r] != in)
				changed = true;
		}
		for (int j = 0; j < 3; j++)
			cr_assert_eq(count_at(&m, w, n, t0 + outside[j], 1), n,
				     "episode %u at +%g", e, outside[j]);
		free(fresh);
	}
	cr_assert(changed, "every episode slowed the same workers");
	free(w);
}

Test(imbalance, episodic_every_worker_equally_likely)
{
	const unsigned n = 50, k = 5, episodes = 2000;
	struct kn__imb m = parse_ok("episodic:30:10:5:4", 2024);
	struct kn__imb_worker *w = workers_new(&m, n);
	unsigned hits[50] = { 0 }, total = 0;

	for (unsigned e = 0; e < episodes; e++)
		for (unsigned r = 0; r < n; r++)
			hits[r] += kn__imb_factor(&m, &w[r], e * 30.0 + 2) == 4;
	for (unsigned r = 0; r < n; r++) {
		char what[32];

		snprintf(what, sizeof(what), "worker %u", r);
		assert_binomial(hits[r], episodes, (double)k / n, what);
		total += hits[r];
	}
	cr_assert_eq(total, k * episodes);
	free(w);
}

Test(imbalance, episodic_boundaries)
{
	/* 0.3 and 0.1 are inexact in binary: the bounds must still hold. */
	const unsigned n = 5;
	struct kn__imb m = parse_ok("episodic:0.3:0.1:2:4", 8);
	struct kn__imb_worker *w = workers_new(&m, n);

	for (unsigned e = 0; e < 10000; e++) {
		double start = e * 0.3, end = e * 0.3 + 0.1;

		if (e > 0)
			cr_assert_eq(count_at(&m, w, n, nextafter(start, 0), 4),
				     0, "before episode %u", e);
		cr_assert_eq(count_at(&m, w, n, start, 4), 2, "episode %u", e);
		cr_assert_eq(count_at(&m, w, n, nextafter(end, 0), 4), 2,
			     "end of episode %u", e);
		cr_assert_eq(count_at(&m, w, n, end, 4), 0, "after %u", e);
	}
	cr_assert_eq(count_at(&m, w, n, -1, 1), n);
	cr_assert_eq(count_at(&m, w, n, NAN, 1), n);
	cr_assert_eq(count_at(&m, w, n, INFINITY, 1), n);
	free(w);
}

Test(imbalance, episodic_whole_period_and_limits)
{
	struct kn__imb full = parse_ok("episodic:30:30:3:2", 4);
	struct kn__imb all = parse_ok("episodic:30:10:6:2", 4);
	struct kn__imb_worker *w = workers_new(&full, 6);
	struct kn__imb_worker v;

	/* DURATION = PERIOD: K workers slowed at every time. */
	for (int i = 0; i < 3000; i++)
		cr_assert_eq(count_at(&full, w, 6, i * 0.7, 2), 3, "t %g",
			     i * 0.7);
	free(w);

	w = workers_new(&all, 6);
	cr_assert_eq(count_at(&all, w, 6, 31, 2), 6);
	free(w);

	/* K > n is refused where n is known. */
	cr_assert_eq(kn__imb_worker_init(&all, 0, 5, &v), -EINVAL);
	cr_assert_eq(kn__imb_worker_init(&all, 6, 6, &v), -EINVAL);
	cr_assert_not(kn__imb_is_slow(&all, 0, 6));
}

/* --- periodic (F3) ---------------------------------------------------- */

Test(imbalance, periodic_follows_the_formula)
{
	const double period = 120, a = 0.5, two_pi = 2 * M_PI;
	struct kn__imb m = parse_ok("periodic:120:0.5", 7);

	for (unsigned r = 0; r < 20; r++) {
		struct kn__imb_worker w;
		double s, c, phi;

		worker_ok(&m, r, 20, &w);
		/* f(0) = 1 + A sin(phi), f(P/4) = 1 + A cos(phi). */
		s = kn__imb_factor(&m, &w, 0) - 1;
		c = kn__imb_factor(&m, &w, period / 4) - 1;
		cr_assert(fabs(hypot(s, c) - a) < 1e-12, "amplitude");
		phi = atan2(s, c);
		if (phi < 0)
			phi += two_pi;
		cr_assert(fabs(phi - w.phase) < 1e-9, "phase %g vs %g", phi,
			  w.phase);
		for (int i = 0; i < 1000; i++) {
			double t = i * 1.37, f = kn__imb_factor(&m, &w, t);

			cr_assert(fabs(f - (1 + a * sin(two_pi * t / period +
							phi))) < 1e-9,
				  "rank %u t %g: %g", r, t, f);
		}
	}
}

Test(imbalance, periodic_mean_one_over_a_period)
{
	struct kn__imb m = parse_ok("periodic:120:0.9", 3);
	const int samples = 100000;

	for (unsigned r = 0; r < 4; r++) {
		struct kn__imb_worker w;
		double sum = 0, lo = 2, hi = 0;

		worker_ok(&m, r, 4, &w);
		for (int i = 0; i < samples; i++) {
			double t = 1000 + (i + 0.5) * 120.0 / samples;
			double f = kn__imb_factor(&m, &w, t);

			sum += f;
			lo = fmin(lo, f);
			hi = fmax(hi, f);
		}
		cr_assert(fabs(sum / samples - 1) < 1e-3, "mean %g",
			  sum / samples);
		cr_assert(fabs(lo - 0.1) < 1e-3 && fabs(hi - 1.9) < 1e-3,
			  "range [%g, %g]", lo, hi);
	}
}

Test(imbalance, periodic_phases_spread)
{
	const unsigned n = 1000;
	struct kn__imb m = parse_ok("periodic", 31);
	struct kn__imb other = parse_ok("periodic", 32);
	unsigned quarter[4] = { 0 }, same_other = 0;
	double *phase = calloc(n, sizeof(*phase));

	cr_assert_not_null(phase);
	for (unsigned r = 0; r < n; r++) {
		struct kn__imb_worker w, v;

		worker_ok(&m, r, n, &w);
		worker_ok(&other, r, n, &v);
		cr_assert(w.phase >= 0 && w.phase < 2 * M_PI);
		phase[r] = w.phase;
		quarter[(int)(w.phase / (M_PI / 2))]++;
		same_other += v.phase == w.phase;
		worker_ok(&m, r, n, &v);
		cr_assert_eq(v.phase, w.phase);
	}
	for (int q = 0; q < 4; q++)
		assert_binomial(quarter[q], n, 0.25, "quarter");
	qsort(phase, n, sizeof(*phase), cmp_double);
	for (unsigned r = 1; r < n; r++)
		cr_assert_neq(phase[r], phase[r - 1], "two equal phases");
	cr_assert_eq(same_other, 0);
	free(phase);
}

/* --- cost ------------------------------------------------------------- */

Test(imbalance, cost_at_simulator_scale)
{
	static const char *const specs[] = {
		"none",	    "persistent", "random", "episodic:30:10:100:4",
		"periodic",
	};
	const unsigned n = 10000, steps = 1000;

	for (size_t s = 0; s < 5; s++) {
		struct kn__imb m = parse_ok(specs[s], 1);
		struct kn__imb_worker *w = workers_new(&m, n);
		double sum = 0, t0 = now_s(), dt;

		/* As a simulator would: every worker steps, 0.1 s each. */
		for (unsigned i = 0; i < steps; i++)
			for (unsigned r = 0; r < n; r++)
				sum += kn__imb_factor(&m, &w[r],
						      i * 0.1 + r * 1e-6);
		dt = now_s() - t0;
		cr_log_info("%-22s %u x %u steps: %.3f s, %.1f ns per call "
			    "(mean factor %.4f)",
			    specs[s], n, steps, dt,
			    dt * 1e9 / ((double)n * steps),
			    sum / ((double)n * steps));
		cr_assert(sum > 0);
		free(w);
	}
}
