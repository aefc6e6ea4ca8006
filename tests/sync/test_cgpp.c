/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_cgpp.c - CGPP (sync/cgpp.h, docs/cgpp.md): the cost model on
 * hand-computed partitions; what the model implies on degenerate inputs
 * (equal workers, one slow worker, n = 1, a bound that admits only BSP);
 * argument checks; and 200 seeded random instances of up to 16 workers
 * on which CGP_AGA must reach the exhaustive optimum on at least 95% and
 * never be infeasible, and CGP_PLS's archive must be mutually
 * non-dominated and hold the exhaustive optimum for S = 4 on at least 95%.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "cgpp.h"

#define MAXN 32

static void assert_close(double got, double want, const char *what)
{
	cr_assert(fabs(got - want) <= 1e-12 * fmax(1, fabs(want)),
		  "%s: %.17g, not %.17g", what, got, want);
}

/* --- the cost model on hand-computed cases -------------------------------- */

/* t = 1 1 2 4, b = 10, C_sync(m) = 0.5 + 0.25 m */
static const double t4[] = { 1, 1, 2, 4 };
static const struct kn__cgpp p4 = {
	.t = t4,
	.n = 4,
	.batch = 10,
	.lat = 0.5,
	.bytes = 1,
	.bw = 4,
	.bound = 4,
};

Test(cgpp, eval_bsp)
{
	const uint8_t cuts[3] = { 0, 0, 0 };
	struct kn__cgpp_eval ev;

	cr_assert_eq(kn__cgpp_eval(&p4, cuts, &ev), 0);
	/* T = 4 + 0.5 + 4 x 0.25 = 5.5 */
	assert_close(ev.lambda, 40 / 5.5, "lambda");
	cr_assert_eq(ev.tau_max, 0.0);
	cr_assert(ev.feasible);
	cr_assert_eq(ev.groups, 1);
}

Test(cgpp, eval_asp)
{
	const uint8_t cuts[3] = { 1, 1, 1 };
	struct kn__cgpp_eval ev;

	cr_assert_eq(kn__cgpp_eval(&p4, cuts, &ev), 0);
	/* T_i = t_i + 0.75; tau_max from the slowest group */
	assert_close(ev.lambda, 10 * (2 / 1.75 + 1 / 2.75 + 1 / 4.75),
		     "lambda");
	assert_close(ev.tau_max, 4.75 * (2 / 1.75 + 1 / 2.75), "tau_max");
	cr_assert(!ev.feasible, "tau_max %g > 4", ev.tau_max);
	cr_assert_eq(ev.groups, 4);
}

Test(cgpp, eval_two_groups)
{
	const uint8_t cuts[3] = { 0, 0, 1 };
	struct kn__cgpp_eval ev;

	cr_assert_eq(kn__cgpp_eval(&p4, cuts, &ev), 0);
	/* {1 1 2}: T = 2 + 0.5 + 0.75 = 3.25; {4}: T = 4 + 0.5 + 0.25 */
	assert_close(ev.lambda, 30 / 3.25 + 10 / 4.75, "lambda");
	assert_close(ev.tau_max, 4.75 / 3.25, "tau_max");
	cr_assert(ev.feasible);
	cr_assert_eq(ev.groups, 2);
}

Test(cgpp, eval_tau_max_is_the_max_over_groups)
{
	/* tau_max = max_G sum_{H != G} T_G / T_H, computed the long way */
	const uint8_t cuts[3] = { 1, 0, 1 };
	double T[3] = { 1 + 0.75, 2 + 1.0, 4 + 0.75 }, want = 0;
	struct kn__cgpp_eval ev;

	for (int g = 0; g < 3; g++) {
		double s = 0;

		for (int h = 0; h < 3; h++)
			if (h != g)
				s += T[g] / T[h];
		want = fmax(want, s);
	}
	cr_assert_eq(kn__cgpp_eval(&p4, cuts, &ev), 0);
	assert_close(ev.tau_max, want, "tau_max");
}

Test(cgpp, refuses_bad_input)
{
	const double uns[] = { 2, 1 };
	double t[KN__CGPP_EXHAUSTIVE_MAX + 1];
	struct kn__cgpp p = p4;
	uint8_t cuts[KN__CGPP_EXHAUSTIVE_MAX + 1] = { 0 };
	struct kn__cgpp_eval ev = { .lambda = -1 };
	struct kn__cgpp_pls *a = NULL;

	p.t = uns;
	p.n = 2;
	cr_assert_eq(kn__cgpp_eval(&p, cuts, &ev), -EINVAL);
	cr_assert_eq(kn__cgpp_exhaustive(&p, cuts, &ev), -EINVAL);
	cr_assert_eq(kn__cgpp_aga(&p, 1, NULL, cuts, &ev), -EINVAL);
	cr_assert_eq(kn__cgpp_pls_create(&p, 1, 0, &a), -EINVAL);
	cr_assert_null(a);
	cr_assert_eq(ev.lambda, -1, "out written on failure");

	p = p4;
	p.bw = 0;
	cr_assert_eq(kn__cgpp_eval(&p, cuts, &ev), -EINVAL);
	p = p4;
	p.bound = -1;
	cr_assert_eq(kn__cgpp_eval(&p, cuts, &ev), -EINVAL);
	p = p4;
	cuts[1] = 2;
	cr_assert_eq(kn__cgpp_eval(&p, cuts, &ev), -EINVAL);

	for (int i = 0; i <= KN__CGPP_EXHAUSTIVE_MAX; i++)
		t[i] = 1;
	p.t = t;
	p.n = KN__CGPP_EXHAUSTIVE_MAX + 1;
	cr_assert_eq(kn__cgpp_exhaustive(&p, cuts, &ev), -E2BIG);
}

/* --- degenerate inputs ---------------------------------------------------- */

static void all_solvers(const struct kn__cgpp *p, uint8_t *ex,
			struct kn__cgpp_eval *eex, struct kn__cgpp_eval *eaga,
			struct kn__cgpp_eval *epls)
{
	uint8_t cuts[MAXN];
	struct kn__cgpp_pls *a;

	cr_assert_eq(kn__cgpp_exhaustive(p, ex, eex), 0);
	cr_assert_eq(kn__cgpp_aga(p, 7, NULL, cuts, eaga), 0);
	cr_assert_eq(kn__cgpp_pls_create(p, 7, 0, &a), 0);
	cr_assert_eq(kn__cgpp_pls_select(a, p->bound, cuts, epls), 0);
	kn__cgpp_pls_destroy(a);
}

Test(cgpp, equal_workers_free_sync_is_one_group)
{
	/* C_sync independent of m: every partition has the same Lambda,
	 * so the tie-break (fewer groups) picks BSP
	 */
	double t[10];
	struct kn__cgpp p = { .t = t,
			      .n = 10,
			      .batch = 32,
			      .lat = 0.1,
			      .bytes = 0,
			      .bw = 1,
			      .bound = 4 };
	struct kn__cgpp_eval e, ea, ep;
	uint8_t cuts[9];

	for (int i = 0; i < 10; i++)
		t[i] = 1;
	all_solvers(&p, cuts, &e, &ea, &ep);
	cr_assert_eq(e.groups, 1);
	for (int i = 0; i < 9; i++)
		cr_assert_eq(cuts[i], 0);
	assert_close(ea.lambda, e.lambda, "aga lambda");
	cr_assert_eq(ep.groups, 1);
}

Test(cgpp, equal_workers_size_cost_split_up_to_the_bound)
{
	/* With C_sync growing in m, m / (a + c m) is concave, so splitting
	 * always gains; k groups of equal T have tau_max = k - 1, so the
	 * model's optimum under S = 4 is 5 groups of 2.
	 */
	double t[10];
	struct kn__cgpp p = { .t = t,
			      .n = 10,
			      .batch = 32,
			      .lat = 0.1,
			      .bytes = 1,
			      .bw = 10,
			      .bound = 4 };
	const uint8_t want[9] = { 0, 1, 0, 1, 0, 1, 0, 1, 0 };
	struct kn__cgpp_eval e, ea, ep;
	uint8_t cuts[9];

	for (int i = 0; i < 10; i++)
		t[i] = 1;
	all_solvers(&p, cuts, &e, &ea, &ep);
	cr_assert_eq(e.groups, 5);
	cr_assert_arr_eq(cuts, want, 9);
	assert_close(ea.lambda, e.lambda, "aga lambda");
	assert_close(ep.lambda, e.lambda, "pls lambda");
}

Test(cgpp, one_slow_worker_alone_when_the_bound_allows)
{
	/* 7 workers at 1 s, one at 3 s: alone it gives tau_max = 3.1/1.1 */
	const double t[8] = { 1, 1, 1, 1, 1, 1, 1, 3 };
	struct kn__cgpp p = { .t = t,
			      .n = 8,
			      .batch = 32,
			      .lat = 0.1,
			      .bytes = 0,
			      .bw = 1,
			      .bound = 4 };
	const uint8_t want[7] = { 0, 0, 0, 0, 0, 0, 1 };
	struct kn__cgpp_eval e, ea, ep;
	uint8_t cuts[7];

	all_solvers(&p, cuts, &e, &ea, &ep);
	cr_assert_arr_eq(cuts, want, 7);
	assert_close(e.tau_max, 3.1 / 1.1, "tau_max");
	assert_close(ea.lambda, e.lambda, "aga lambda");
	assert_close(ep.lambda, e.lambda, "pls lambda");
}

Test(cgpp, bound_below_every_split_gives_bsp)
{
	/* every split leaves the slow worker's group at >= 3.1 s beside a
	 * 1.1 s one, tau_max >= 2.8, so S = 2 admits BSP only
	 */
	const double t[8] = { 1, 1, 1, 1, 1, 1, 1, 3 };
	struct kn__cgpp p = { .t = t,
			      .n = 8,
			      .batch = 32,
			      .lat = 0.1,
			      .bytes = 0,
			      .bw = 1,
			      .bound = 2 };
	struct kn__cgpp_eval e, ea, ep;
	uint8_t cuts[7];

	all_solvers(&p, cuts, &e, &ea, &ep);
	cr_assert_eq(e.groups, 1);
	cr_assert_eq(ea.groups, 1);
	cr_assert_eq(ep.groups, 1);
}

Test(cgpp, bound_zero_gives_one_group)
{
	const double t[6] = { 0.5, 1, 1, 2, 4, 8 };
	struct kn__cgpp p = { .t = t,
			      .n = 6,
			      .batch = 32,
			      .lat = 0.01,
			      .bytes = 1,
			      .bw = 100,
			      .bound = 0 };
	struct kn__cgpp_eval e, ea, ep;
	uint8_t cuts[5];

	all_solvers(&p, cuts, &e, &ea, &ep);
	cr_assert_eq(e.groups, 1);
	cr_assert_eq(ea.groups, 1);
	cr_assert_eq(ep.groups, 1);
	cr_assert_eq(e.tau_max, 0.0);
}

Test(cgpp, one_worker)
{
	const double t[1] = { 2 };
	struct kn__cgpp p = { .t = t,
			      .n = 1,
			      .batch = 8,
			      .lat = 0.5,
			      .bytes = 1,
			      .bw = 2,
			      .bound = 4 };
	struct kn__cgpp_eval e, ea, ep;
	uint8_t cuts[1];

	cr_assert_eq(kn__cgpp_eval(&p, NULL, &e), 0);
	assert_close(e.lambda, 8 / 3.0, "lambda");
	all_solvers(&p, cuts, &e, &ea, &ep);
	cr_assert_eq(e.groups, 1);
	cr_assert_eq(ea.groups, 1);
	cr_assert_eq(ep.groups, 1);
	cr_assert_eq(ep.tau_max, 0.0);
	assert_close(ea.lambda, 8 / 3.0, "aga lambda");
}

/* --- random instances against the oracle ---------------------------------- */

static uint64_t mix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static double unit(uint64_t *s)
{
	return (double)(mix(s) >> 11) * 0x1p-53;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/*
 * A persistent-like instance: most workers near 1 s, a quarter slowed by
 * 1.5..8, 5% jitter; sync costs from negligible to a tenth of a step.
 */
static void random_instance(uint64_t seed, double *t, struct kn__cgpp *p)
{
	uint64_t s = seed;
	uint32_t n = 2 + (uint32_t)(mix(&s) % 15);

	for (uint32_t i = 0; i < n; i++) {
		double f = unit(&s) < 0.25 ? 1.5 + 6.5 * unit(&s) : 1;

		t[i] = f * (1 + 0.05 * (2 * unit(&s) - 1));
	}
	qsort(t, n, sizeof(*t), cmp_double);
	*p = (struct kn__cgpp){ .t = t,
				.n = n,
				.batch = 32,
				.lat = 0.001 + 0.05 * unit(&s),
				.bytes = 1e6 * unit(&s),
				.bw = 1e8,
				.bound = 4 };
}

Test(cgpp, aga_and_pls_against_exhaustive, .timeout = 240)
{
	int aga_hit = 0, pls_hit = 0, runs = 200;

	for (int r = 0; r < runs; r++) {
		double t[16];
		struct kn__cgpp p;
		struct kn__cgpp_eval eo, ea, es, em, ej;
		uint8_t co[16], ca[16];
		struct kn__cgpp_pls *a;
		size_t na;

		random_instance(1000 + (uint64_t)r, t, &p);
		cr_assert_eq(kn__cgpp_exhaustive(&p, co, &eo), 0);
		cr_assert(eo.feasible);

		cr_assert_eq(kn__cgpp_aga(&p, (uint64_t)r, NULL, ca, &ea), 0);
		cr_assert(ea.feasible, "instance %d: aga infeasible", r);
		cr_assert(ea.lambda <= eo.lambda * (1 + 1e-9),
			  "instance %d: aga beats the oracle", r);
		if (ea.lambda >= eo.lambda * (1 - 1e-9))
			aga_hit++;

		cr_assert_eq(kn__cgpp_pls_create(&p, (uint64_t)r, 64, &a), 0);
		na = kn__cgpp_pls_size(a);
		cr_assert(na >= 1 && na <= 64);
		for (size_t i = 0; i < na; i++) {
			cr_assert_eq(kn__cgpp_pls_member(a, i, ca, &em), 0);
			/* the figures are the partition's */
			cr_assert_eq(kn__cgpp_eval(&p, ca, &ej), 0);
			assert_close(em.lambda, ej.lambda, "member lambda");
			for (size_t k = 0; k < i; k++) {
				struct kn__cgpp_eval ek;

				kn__cgpp_pls_member(a, k, NULL, &ek);
				cr_assert(!(ek.lambda >= em.lambda &&
					    ek.tau_max <= em.tau_max) &&
						  !(em.lambda >= ek.lambda &&
						    em.tau_max <= ek.tau_max),
					  "instance %d: members %zu, %zu "
					  "dominate",
					  r, k, i);
			}
		}
		cr_assert_eq(kn__cgpp_pls_select(a, 4, ca, &es), 0);
		cr_assert(es.feasible);
		if (es.lambda >= eo.lambda * (1 - 1e-9))
			pls_hit++;
		/* BSP is always in the archive */
		cr_assert_eq(kn__cgpp_pls_select(a, 0, ca, &es), 0);
		cr_assert_eq(es.groups, 1);
		kn__cgpp_pls_destroy(a);
	}
	cr_log_info("aga reached the optimum on %d/%d, pls on %d/%d", aga_hit,
		    runs, pls_hit, runs);
	fprintf(stderr, "cgpp: aga %d/%d, pls %d/%d\n", aga_hit, runs, pls_hit,
		runs);
	cr_assert(aga_hit * 100 >= 95 * runs, "aga %d/%d", aga_hit, runs);
	cr_assert(pls_hit * 100 >= 95 * runs, "pls %d/%d", pls_hit, runs);
}

Test(cgpp, aga_is_deterministic_for_a_seed)
{
	double t[16];
	struct kn__cgpp p;
	struct kn__cgpp_eval e1, e2;
	uint8_t c1[16], c2[16];

	random_instance(42, t, &p);
	cr_assert_eq(kn__cgpp_aga(&p, 9, NULL, c1, &e1), 0);
	cr_assert_eq(kn__cgpp_aga(&p, 9, NULL, c2, &e2), 0);
	cr_assert_arr_eq(c1, c2, p.n - 1);
	cr_assert_eq(e1.lambda, e2.lambda);
}

Test(cgpp, pls_selects_by_bound_without_searching)
{
	/* a looser bound can only select as much throughput or more */
	double t[16];
	struct kn__cgpp p;
	struct kn__cgpp_pls *a;
	double prev = 0;

	random_instance(7, t, &p);
	cr_assert_eq(kn__cgpp_pls_create(&p, 3, 0, &a), 0);
	for (double s = 0; s <= 16; s += 0.5) {
		struct kn__cgpp_eval e;

		cr_assert_eq(kn__cgpp_pls_select(a, s, NULL, &e), 0);
		cr_assert(e.feasible && e.tau_max <= s * (1 + 1e-9));
		cr_assert(e.lambda >= prev);
		prev = e.lambda;
	}
	cr_assert_eq(kn__cgpp_pls_select(a, -1, NULL, NULL), -EINVAL);
	kn__cgpp_pls_destroy(a);
}
