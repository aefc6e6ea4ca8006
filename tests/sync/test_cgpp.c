/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_cgpp.c - CGPP (sync/cgpp.h, docs/cgpp.md): the cost model on
 * partitions computed the long way (sums over pairs of groups, the
 * chunk rule's damping d_G = 1 / max(1, m_G), ASP's, and the staleness
 * price 1 / (1 + beta m_G) included); what the model implies on
 * degenerate inputs (equal workers, one slow worker, a lone straggler
 * 8x or 6x slower, n = 1, a bound that admits only BSP); the step-time
 * distributions (kn__cgpp_dist_*) on hand-computed cases, and workers of
 * equal means that fluctuate independently, which split where steady
 * ones stay one group; argument checks; and 200 seeded random instances
 * of up to 16 workers on which CGP_AGA must reach the exhaustive optimum
 * on at least 95% and never be infeasible, and CGP_PLS's archive must be
 * mutually non-dominated and hold the exhaustive optimum for S = 4 on
 * at least 95%.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "cgpp.h"
#include "imbalance.h"

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

/*
 * The model of cgpp.h the long way: for each group G, V_G and m_G summed
 * over the other groups H, d_G = 1 / max(1, m_G), Lambda = sum_G d_G /
 * (1 + beta m_G) |G| b / T_G (beta = KN__CGPP_STALE_COST), tau_max =
 * max_G d_G V_G.
 */
static void long_way(const double *T, const int *size, int k, double b,
		     double *lambda, double *tau)
{
	double n = 0;

	for (int g = 0; g < k; g++)
		n += size[g];
	*lambda = 0;
	*tau = 0;
	for (int g = 0; g < k; g++) {
		double v = 0, m = 0, d;

		for (int h = 0; h < k; h++) {
			if (h == g)
				continue;
			v += T[g] / T[h];
			m += size[h] / n * T[g] / T[h];
		}
		d = 1 / fmax(1, m);
		*lambda +=
			d / (1 + KN__CGPP_STALE_COST * m) * size[g] * b / T[g];
		*tau = fmax(*tau, d * v);
	}
}

/*
 * p4 cut at @cuts, evaluated and checked against the long way over its
 * @k groups of @size workers with round times @T, whose Lambda and
 * tau_max go to @lambda and @tau; the evaluation.
 */
static struct kn__cgpp_eval eval_p4(const uint8_t *cuts, const double *T,
				    const int *size, int k, double *lambda,
				    double *tau)
{
	struct kn__cgpp_eval ev;

	long_way(T, size, k, p4.batch, lambda, tau);
	cr_assert_eq(kn__cgpp_eval(&p4, cuts, &ev), 0);
	assert_close(ev.lambda, *lambda, "lambda");
	assert_close(ev.tau_max, *tau, "tau_max");
	return ev;
}

Test(cgpp, eval_bsp)
{
	const uint8_t cuts[3] = { 0, 0, 0 };
	struct kn__cgpp_eval ev;

	cr_assert_eq(kn__cgpp_eval(&p4, cuts, &ev), 0);
	/* T = 4 + 0.5 + 4 x 0.25 = 5.5; nobody else applies: undamped */
	assert_close(ev.lambda, 40 / 5.5, "lambda");
	cr_assert_eq(ev.tau_max, 0.0);
	cr_assert(ev.feasible);
	cr_assert_eq(ev.groups, 1);
}

Test(cgpp, eval_asp)
{
	const uint8_t cuts[3] = { 1, 1, 1 };
	const double T[4] = { 1.75, 1.75, 2.75, 4.75 }; /* t_i + 0.75 */
	const int size[4] = { 1, 1, 1, 1 };
	double lambda, tau;
	struct kn__cgpp_eval ev = eval_p4(cuts, T, size, 4, &lambda, &tau);

	/*
	 * the slowest: V = 4.75 (2/1.75 + 1/2.75) = 7.16 versions a round,
	 * m = V/4 = 1.79 rounds of n > 1, so d = 1/m and tau = V/m = 4
	 * exactly: ASP's damping caps a singleton's tau at n.  The fastest:
	 * V = 1.75 (1/1.75 + 1/2.75 + 1/4.75) = 2.00, m = V/4 < 1, d = 1.
	 */
	assert_close(tau, 4, "the slowest's");
	assert_close(
		lambda,
		2 * 10 / 1.75 /
				(1 +
				 0.125 * (1 + 1.75 / 2.75 + 1.75 / 4.75) / 4) +
			10 / 2.75 /
				(1 +
				 0.125 * (2.75 * 2 / 1.75 + 2.75 / 4.75) / 4) +
			10 / 4.75 * 4 / (4.75 * (2 / 1.75 + 1 / 2.75)) /
				(1 + 0.125 * 4.75 * (2 / 1.75 + 1 / 2.75) / 4),
		"by hand");
	/* undamped it was 7.16 > 4; at the weight the rule gives it, 4 */
	cr_assert(ev.feasible, "tau_max %g", ev.tau_max);
	cr_assert_eq(ev.groups, 4);
}

Test(cgpp, eval_two_groups)
{
	const uint8_t cuts[3] = { 0, 0, 1 };
	/* {1 1 2}: T = 2 + 0.5 + 0.75 = 3.25; {4}: T = 4 + 0.5 + 0.25 */
	const double T[2] = { 3.25, 4.75 };
	const int size[2] = { 3, 1 };
	double lambda, tau;
	struct kn__cgpp_eval ev = eval_p4(cuts, T, size, 2, &lambda, &tau);

	/*
	 * by hand: the fast group's m = 1/4 x 3.25/4.75 = 0.17 < 1, d = 1;
	 * the slow one's m = 3/4 x 4.75/3.25 = 1.10 > 1, d = 1/m, and its
	 * tau = d V = (4.75/3.25) / (3/4 x 4.75/3.25) = 4/3
	 */
	assert_close(lambda,
		     30 / 3.25 / (1 + 0.125 * 0.25 * 3.25 / 4.75) +
			     10 / 4.75 / (0.75 * 4.75 / 3.25) /
				     (1 + 0.125 * 0.75 * 4.75 / 3.25),
		     "by hand");
	assert_close(tau, 4.0 / 3, "the slow group's");
	cr_assert(ev.feasible);
	cr_assert_eq(ev.groups, 2);
}

Test(cgpp, eval_tau_max_is_the_max_over_groups)
{
	const uint8_t cuts[3] = { 1, 0, 1 };
	const double T[3] = { 1 + 0.75, 2 + 1.0, 4 + 0.75 };
	const int size[3] = { 1, 2, 1 };
	double lambda, tau;

	eval_p4(cuts, T, size, 3, &lambda, &tau);
}

Test(cgpp, eval_groups_is_the_same_model)
{
	/* the planner's entry: any order, empty groups skipped */
	const double T[4] = { 4.75, 0, 1.75, 3.0 };
	const uint32_t size[4] = { 1, 0, 1, 2 };
	const uint8_t cuts[3] = { 1, 0, 1 };
	struct kn__cgpp_eval eg, ec;

	cr_assert_eq(kn__cgpp_eval_groups(T, size, 4, 10, 4, &eg), 0);
	cr_assert_eq(kn__cgpp_eval(&p4, cuts, &ec), 0);
	assert_close(eg.lambda, ec.lambda, "lambda");
	assert_close(eg.tau_max, ec.tau_max, "tau_max");
	cr_assert_eq(eg.groups, 3);
	cr_assert_eq(kn__cgpp_eval_groups(T, size, 1, 10, 4, &eg), 0);
	cr_assert_eq(eg.tau_max, 0.0);
	assert_close(eg.lambda, 10 / 4.75, "one group");
	cr_assert_eq(kn__cgpp_eval_groups(T, size, 2, 0, 4, &eg), -EINVAL);
	cr_assert_eq(kn__cgpp_eval_groups(T, size, 0, 10, 4, &eg), -EINVAL);
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

static const double ones[16] = {
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1
};
/* 7 workers at 1 s, one at 3 s */
static const double one_slow[8] = { 1, 1, 1, 1, 1, 1, 1, 3 };

/*
 * An instance: @n workers of step times @t, batch @batch, C_sync(m) =
 * @lat + m @bytes / @bw, and the bound @bound.
 */
static struct kn__cgpp instance(const double *t, uint32_t n, double batch,
				double lat, double bytes, double bw,
				double bound)
{
	return (struct kn__cgpp){ .t = t,
				  .n = n,
				  .batch = batch,
				  .lat = lat,
				  .bytes = bytes,
				  .bw = bw,
				  .bound = bound };
}

/* What the three solvers make of one instance. */
struct solved {
	uint8_t cuts[MAXN];		/* the exhaustive optimum's */
	struct kn__cgpp_eval e, ea, ep; /* exhaustive, AGA, PLS at S */
};

static struct solved solve(const struct kn__cgpp *p)
{
	struct solved s;
	struct kn__cgpp_pls *a;
	uint8_t cuts[MAXN];

	cr_assert_eq(kn__cgpp_exhaustive(p, s.cuts, &s.e), 0);
	cr_assert_eq(kn__cgpp_aga(p, 7, NULL, cuts, &s.ea), 0);
	cr_assert_eq(kn__cgpp_pls_create(p, 7, 0, &a), 0);
	cr_assert_eq(kn__cgpp_pls_select(a, p->bound, cuts, &s.ep), 0);
	kn__cgpp_pls_destroy(a);
	return s;
}

/* Every solver keeps one group: BSP. */
static void assert_one_group(const struct solved *s)
{
	cr_assert_eq(s->e.groups, 1);
	cr_assert_eq(s->ea.groups, 1);
	cr_assert_eq(s->ep.groups, 1);
}

/* AGA and PLS reach the exhaustive optimum's Lambda. */
static void assert_optimum_reached(const struct solved *s)
{
	assert_close(s->ea.lambda, s->e.lambda, "aga lambda");
	assert_close(s->ep.lambda, s->e.lambda, "pls lambda");
}

Test(cgpp, equal_workers_free_sync_is_one_group)
{
	/* C_sync independent of m: every group's round is as long as
	 * BSP's, so a split only adds the staleness price: BSP strictly
	 */
	struct kn__cgpp p = instance(ones, 10, 32, 0.1, 0, 1, 4);
	struct solved s = solve(&p);

	cr_assert_eq(s.e.groups, 1);
	for (int i = 0; i < 9; i++)
		cr_assert_eq(s.cuts[i], 0);
	assert_close(s.ea.lambda, s.e.lambda, "aga lambda");
	cr_assert_eq(s.ep.groups, 1);
}

Test(cgpp, equal_workers_moderate_sync_cost_stay_one_group)
{
	/*
	 * With C_sync growing in m, m / (a + c m) is concave, so splitting
	 * shortens rounds.  k equal groups of equal workers are each m =
	 * (k - 1)/k < 1 rounds of n stale: undamped (d = 1), but each
	 * contribution is worth 1 / (1 + m/8), and with C_sync(10) = 0.2 s
	 * against 1 s steps that costs more than the shorter rounds gain:
	 * BSP, 10 x 32 / 1.2 = 266.7, against two halves' 320 / 1.15 /
	 * 1.0625 = 261.9, five pairs' 320 / 1.12 / 1.1 = 259.7 and ASP's
	 * 320 / 1.11 / 1.1125 = 259.1.  (At C_sync(10) = 1.1 s splitting
	 * already wins, five pairs 223.8 against BSP's 152.4; the next
	 * test's sync costs ten times that.)
	 */
	struct kn__cgpp p = instance(ones, 10, 32, 0.1, 1, 100, 4);
	struct solved s = solve(&p);

	assert_one_group(&s);
	assert_close(s.e.lambda, 320 / 1.2, "bsp lambda");
}

Test(cgpp, equal_workers_costly_sync_split_up_to_the_bound)
{
	/*
	 * C_sync(10) = 10.1 s against 1 s steps: shorter rounds win despite
	 * the staleness price, and the bound is what stops the splitting.
	 * k equal groups miss V = k - 1 versions a round, m = (k - 1)/k < 1
	 * rounds of n: undamped, tau = k - 1, so ASP (ten groups, tau_max =
	 * 9) breaks S = 4 and five pairs (tau_max = 4) are the most it
	 * allows; without the bound ASP would be the optimum.
	 */
	struct kn__cgpp p = instance(ones, 10, 32, 0.1, 1, 1, 4);
	struct kn__cgpp_eval ev;
	struct solved s;
	uint8_t asp[9];

	memset(asp, 1, sizeof(asp));
	cr_assert_eq(kn__cgpp_eval(&p, asp, &ev), 0);
	assert_close(ev.tau_max, 9, "asp tau_max");
	cr_assert(!ev.feasible);
	s = solve(&p);
	cr_assert_gt(s.e.groups, 4);
	cr_assert_lt(s.e.groups, 10);
	cr_assert(s.e.feasible);
	assert_optimum_reached(&s);
	/* with S = 9, ASP: the bound was what stopped it */
	p.bound = 9;
	s = solve(&p);
	cr_assert_eq(s.e.groups, 10);
	assert_close(s.e.lambda, 320 / 2.1 / (1 + 0.125 * 0.9), "asp lambda");
}

Test(cgpp, one_slow_worker_alone_when_the_bound_allows)
{
	/* alone, V = 3.1/1.1 = 2.8 versions, m = 7/8 of that = 2.5 > 1,
	 * so d = 1/m and tau_max = V / m = 8/7; the fast group's tau is
	 * 1.1/3.1 = 0.35, undamped
	 */
	struct kn__cgpp p = instance(one_slow, 8, 32, 0.1, 0, 1, 4);
	const uint8_t want[7] = { 0, 0, 0, 0, 0, 0, 1 };
	struct solved s = solve(&p);

	cr_assert_arr_eq(s.cuts, want, 7);
	assert_close(s.e.tau_max, 8.0 / 7, "tau_max");
	assert_close(s.e.lambda,
		     32 * 7 / 1.1 / (1 + 0.125 / 8 * 1.1 / 3.1) +
			     32 / 3.1 / (7.0 / 8 * 3.1 / 1.1) /
				     (1 + 0.125 * 7 / 8 * 3.1 / 1.1),
		     "lambda");
	assert_optimum_reached(&s);
}

/*
 * A lone straggler far slower than the rest: alone it misses
 * V = T_slow / T_fast versions, above S = 4, which the model without the
 * damping refused, so every solver stayed at BSP and everyone waited for
 * it.  Damped as the chunk rule damps it, 1 / m with m = (n - 1)/n V
 * rounds of n, its tau is V / m = n / (n - 1), within the bound.
 */
static void lone_straggler(uint32_t n, double factor)
{
	double t[16];
	struct kn__cgpp p = instance(t, n, 32, 1e-4, 0, 1, 4);
	uint8_t want[15] = { 0 };
	struct solved s;
	double tf = 0.02 + 1e-4, ts = 0.02 * factor + 1e-4;
	double v = ts / tf, m = (n - 1.0) / n * v;

	for (uint32_t i = 0; i < n; i++)
		t[i] = i + 1 < n ? 0.02 : 0.02 * factor;
	want[n - 2] = 1;
	cr_assert_gt(v, 4, "the undamped staleness breaks the bound");
	s = solve(&p);
	cr_assert_arr_eq(s.cuts, want, n - 1);
	cr_assert_eq(s.e.groups, 2);
	assert_close(s.e.tau_max, n / (n - 1.0), "tau_max");
	/* the fast group: m = 1/n x tf/ts < 1, undamped; the straggler at
	 * 1 / m, each at the staleness price */
	assert_close(s.e.lambda,
		     32 * (n - 1) / tf / (1 + 0.125 / n / v) +
			     32 / ts / m / (1 + 0.125 * m),
		     "lambda");
	cr_assert(s.e.feasible);
	/* far above BSP's n / T_slow */
	cr_assert_gt(s.e.lambda, 3 * n * 32 / ts);
	assert_optimum_reached(&s);
	cr_assert_eq(s.ea.groups, 2);
	cr_assert_eq(s.ep.groups, 2);
}

Test(cgpp, a_lone_straggler_8x_of_8_is_alone)
{
	lone_straggler(8, 8);
}

Test(cgpp, a_lone_straggler_6x_of_16_is_alone)
{
	lone_straggler(16, 6);
}

Test(cgpp, bound_below_every_split_gives_bsp)
{
	/* in every split the slowest group misses V >= 1 versions, counted
	 * m <= V in rounds of n, so tau_max >= V / max(1, V) = 1: S = 0.99
	 * admits BSP only (and a fortiori S = 0.4)
	 */
	struct kn__cgpp p = instance(one_slow, 8, 32, 0.1, 0, 1, 0.99);
	struct solved s = solve(&p);

	assert_one_group(&s);
	p.bound = 0.4;
	s = solve(&p);
	assert_one_group(&s);
	/* and S = 8/7 admits the slow worker alone (the previous test):
	 * the bound is what kept BSP */
	p.bound = 8.0 / 7;
	s = solve(&p);
	cr_assert_gt(s.e.groups, 1);
}

Test(cgpp, bound_zero_gives_one_group)
{
	const double t[6] = { 0.5, 1, 1, 2, 4, 8 };
	struct kn__cgpp p = instance(t, 6, 32, 0.01, 1, 100, 0);
	struct solved s = solve(&p);

	assert_one_group(&s);
	cr_assert_eq(s.e.tau_max, 0.0);
}

Test(cgpp, one_worker)
{
	const double t[1] = { 2 };
	struct kn__cgpp p = instance(t, 1, 8, 0.5, 1, 2, 4);
	struct kn__cgpp_eval e;
	struct solved s;

	cr_assert_eq(kn__cgpp_eval(&p, NULL, &e), 0);
	assert_close(e.lambda, 8 / 3.0, "lambda");
	s = solve(&p);
	assert_one_group(&s);
	cr_assert_eq(s.ep.tau_max, 0.0);
	assert_close(s.ea.lambda, 8 / 3.0, "aga lambda");
}

/* --- step-time distributions ---------------------------------------------- */

/* A distribution of @n workers, each with @count[i] samples of @stride. */
static struct kn__cgpp_dist *dist(const double *t, uint32_t n,
				  const double *samples, const uint32_t *count,
				  uint32_t stride)
{
	struct kn__cgpp_dist *d = NULL;

	cr_assert_eq(kn__cgpp_dist_create(t, n, samples, count, stride, &d), 0);
	cr_assert_not_null(d);
	return d;
}

Test(cgpp, dist_two_fluctuating_workers)
{
	/* each 1 or 3, half the time: alone E = 2; the slower of the two
	 * is 1 only when both are (1/4), so E[max] = 1/4 + 3 x 3/4 = 2.5 */
	const double t[2] = { 2, 2 };
	const double samples[2][2] = { { 1, 3 }, { 3, 1 } };
	const uint32_t count[2] = { 2, 2 };
	const uint32_t one[2] = { 0, 0 }, apart[2] = { 0, 1 };
	struct kn__cgpp_dist *d = dist(t, 2, samples[0], count, 2);
	double out[2];

	assert_close(kn__cgpp_dist_max(d, 0, 2), 2.5, "both");
	assert_close(kn__cgpp_dist_max(d, 0, 1), 2, "the first alone");
	assert_close(kn__cgpp_dist_max(d, 1, 2), 2, "the second alone");
	cr_assert_eq(kn__cgpp_dist_groups(d, one, 1, out), 0);
	assert_close(out[0], 2.5, "groups: both");
	cr_assert_eq(kn__cgpp_dist_groups(d, apart, 2, out), 0);
	assert_close(out[0], 2, "groups: the first");
	assert_close(out[1], 2, "groups: the second");
	kn__cgpp_dist_destroy(d);
}

Test(cgpp, dist_steady_workers_give_the_max)
{
	/* every sample of a worker the same: E[max] is the slowest's */
	const double t[5] = { 0.5, 1, 1, 2, 4.25 };
	double samples[5][4];
	const uint32_t count[5] = { 4, 1, 3, 4, 2 };
	struct kn__cgpp_dist *d;

	for (int i = 0; i < 5; i++)
		for (int j = 0; j < 4; j++)
			samples[i][j] = t[i];
	d = dist(t, 5, samples[0], count, 4);
	for (uint32_t s = 0; s < 5; s++)
		for (uint32_t e = s + 1; e <= 5; e++)
			assert_close(kn__cgpp_dist_max(d, s, e), t[e - 1],
				     "steady");
	kn__cgpp_dist_destroy(d);
}

Test(cgpp, dist_groups_of_any_shape_match_dist_max)
{
	/* 6 workers of 2..4 samples among 0.5 .. 3 */
	const double t[6] = { 1, 1, 1.5, 1.5, 2, 2 };
	const double samples[6][4] = {
		{ 0.5, 1.5, 1, 1 }, { 1, 1, 1, 1 }, { 0.5, 2.5, 1.5, 1.5 },
		{ 1.5, 1.5, 0, 0 }, { 1, 3, 2, 2 }, { 1, 3, 0, 0 },
	};
	const uint32_t count[6] = { 4, 4, 4, 2, 4, 2 };
	/* contiguous blocks under labels in no particular order */
	const uint32_t blocks[6] = { 2, 2, 0, 0, 0, 1 };
	/* interleaved: {0, 2, 4} and {1, 3, 5} */
	const uint32_t odd_even[6] = { 0, 1, 0, 1, 0, 1 };
	const uint32_t bad[6] = { 0, 1, 0, 1, 0, 2 };
	struct kn__cgpp_dist *d = dist(t, 6, samples[0], count, 4), *sub;
	double out[3], st[3], ss[3][4];
	uint32_t sc[3];

	cr_assert_eq(kn__cgpp_dist_groups(d, blocks, 3, out), 0);
	assert_close(out[2], kn__cgpp_dist_max(d, 0, 2), "block [0, 2)");
	assert_close(out[0], kn__cgpp_dist_max(d, 2, 5), "block [2, 5)");
	assert_close(out[1], kn__cgpp_dist_max(d, 5, 6), "block [5, 6)");
	/* an interleaved group is the contiguous group of a distribution
	 * made of its members alone */
	cr_assert_eq(kn__cgpp_dist_groups(d, odd_even, 2, out), 0);
	for (uint32_t g = 0; g < 2; g++) {
		for (uint32_t j = 0; j < 3; j++) {
			st[j] = t[2 * j + g];
			sc[j] = count[2 * j + g];
			memcpy(ss[j], samples[2 * j + g], sizeof(ss[j]));
		}
		sub = dist(st, 3, ss[0], sc, 4);
		assert_close(out[g], kn__cgpp_dist_max(sub, 0, 3), "odd/even");
		kn__cgpp_dist_destroy(sub);
	}
	/* by hand, {1, 3, 5}: max(1, U{1.5}, U{1, 3}) is 3 half the
	 * time, else 1.5: 2.25 */
	assert_close(out[1], 2.25, "by hand");
	cr_assert_eq(kn__cgpp_dist_groups(d, bad, 2, out), -EINVAL);
	cr_assert_eq(kn__cgpp_dist_groups(d, odd_even, 0, out), -EINVAL);
	cr_assert_eq(kn__cgpp_dist_groups(d, NULL, 2, out), -EINVAL);
	cr_assert_eq(kn__cgpp_dist_groups(NULL, odd_even, 2, out), -EINVAL);
	kn__cgpp_dist_destroy(d);
}

Test(cgpp, dist_a_worker_without_samples_counts_as_its_t)
{
	/* worker 0 has none yet: a steady 2; worker 1 is 1 or 3 */
	const double t[2] = { 2, 2 };
	const double samples[2][2] = { { 0, 0 }, { 1, 3 } };
	const uint32_t count[2] = { 0, 2 };
	struct kn__cgpp_dist *d = dist(t, 2, samples[0], count, 2);

	assert_close(kn__cgpp_dist_max(d, 0, 1), 2, "alone: its t");
	/* max(2, U{1, 3}) = 2 or 3: 2.5 */
	assert_close(kn__cgpp_dist_max(d, 0, 2), 2.5, "with the other");
	kn__cgpp_dist_destroy(d);
	/* nobody has samples: t itself, and stride 0 needs no samples */
	cr_assert_eq(kn__cgpp_dist_create(t, 2, NULL,
					  (const uint32_t[]){ 0, 0 }, 0, &d),
		     0);
	assert_close(kn__cgpp_dist_max(d, 0, 2), 2, "no samples at all");
	kn__cgpp_dist_destroy(d);
}

Test(cgpp, dist_refuses_bad_input)
{
	const double t[2] = { 1, 2 };
	double samples[2][2] = { { 1, 1 }, { 2, 2 } };
	const uint32_t count[2] = { 2, 2 }, over[2] = { 2, 3 };
	struct kn__cgpp_dist *d = NULL;
	struct kn__cgpp p = p4;
	uint8_t cuts[3] = { 0 };
	struct kn__cgpp_eval ev;

	cr_assert_eq(kn__cgpp_dist_create(t, 2, samples[0], over, 2, &d),
		     -EINVAL, "count > stride");
	cr_assert_eq(kn__cgpp_dist_create(t, 0, samples[0], count, 2, &d),
		     -EINVAL, "n = 0");
	cr_assert_eq(kn__cgpp_dist_create(NULL, 2, samples[0], count, 2, &d),
		     -EINVAL);
	cr_assert_eq(kn__cgpp_dist_create(t, 2, NULL, count, 2, &d), -EINVAL);
	cr_assert_eq(kn__cgpp_dist_create(t, 2, samples[0], NULL, 2, &d),
		     -EINVAL);
	cr_assert_eq(kn__cgpp_dist_create(t, 2, samples[0], count, 2, NULL),
		     -EINVAL);
	samples[1][1] = -1;
	cr_assert_eq(kn__cgpp_dist_create(t, 2, samples[0], count, 2, &d),
		     -EINVAL, "negative sample");
	samples[1][1] = NAN;
	cr_assert_eq(kn__cgpp_dist_create(t, 2, samples[0], count, 2, &d),
		     -EINVAL, "NaN sample");
	samples[1][1] = INFINITY;
	cr_assert_eq(kn__cgpp_dist_create(t, 2, samples[0], count, 2, &d),
		     -EINVAL, "infinite sample");
	cr_assert_null(d, "out written on failure");
	/* a distribution of another n than the instance's */
	samples[1][1] = 2;
	d = dist(t, 2, samples[0], count, 2);
	p.dist = d;
	cr_assert_eq(kn__cgpp_eval(&p, cuts, &ev), -EINVAL);
	kn__cgpp_dist_destroy(d);
	kn__cgpp_dist_destroy(NULL);
}

/*
 * Above 1,024 workers a group's mean comes from prefix sums of log F, not
 * from a table: against the product of the F_i taken directly, at every
 * distinct value v, E[max] = sum_v v (P(max <= v) - P(max < v)).
 */
Test(cgpp, dist_many_workers_agree_with_a_direct_computation)
{
	enum { N = 1100, S = 8 };
	static double samples[N][S];
	static double t[N];
	static uint32_t count[N];
	uint64_t rs = 99;
	struct kn__cgpp_dist *d;
	const uint32_t groups[][2] = { { 0, 1 },      { 0, 7 },
				       { 3, 40 },     { 100, 613 },
				       { 512, 1100 }, { 0, 1100 },
				       { 1099, 1100 } };

	for (uint32_t i = 0; i < N; i++) {
		/* 40 distinct values, 0.5 .. 10.25; a worker's low ones
		 * above the others' minimum now and then (F = 0 there) */
		uint32_t lo = (uint32_t)(kn__splitmix_next(&rs) % 8);

		count[i] = 1 + (uint32_t)(kn__splitmix_next(&rs) % S);
		t[i] = 0;
		for (uint32_t j = 0; j < count[i]; j++) {
			samples[i][j] =
				0.5 +
				0.25 * (double)(lo +
						kn__splitmix_next(&rs) % 32);
			t[i] += samples[i][j] / count[i];
		}
	}
	d = dist(t, N, samples[0], count, S);
	for (size_t g = 0; g < sizeof(groups) / sizeof(groups[0]); g++) {
		uint32_t s = groups[g][0], e = groups[g][1];
		double want = 0, below = 0; /* P(max < v) */

		for (uint32_t k = 0; k < 40; k++) {
			double v = 0.5 + 0.25 * k, le = 1; /* P(max <= v) */

			for (uint32_t i = s; i < e; i++) {
				uint32_t c = 0;

				for (uint32_t j = 0; j < count[i]; j++)
					c += samples[i][j] <= v;
				le *= (double)c / count[i];
			}
			want += v * (le - below);
			below = le;
		}
		cr_assert(fabs(kn__cgpp_dist_max(d, s, e) - want) <=
				  1e-9 * want,
			  "[%u, %u): %.17g, not %.17g", s, e,
			  kn__cgpp_dist_max(d, s, e), want);
	}
	kn__cgpp_dist_destroy(d);
}

/*
 * 8 workers of the same mean step, 1.15 s: each takes 1 s nineteen steps
 * in twenty and 4 s in the twentieth (random:0.05:4's shape), at its own
 * times.  Alone a worker's round is its mean, but a group waits for its
 * slowest: 8 together see a slow step in 1 - 0.95^8 = 34% of rounds,
 * E[max] = 1 + 3 x 0.337 = 2.01.  With C_sync(m) = 0.1 + 0.01 m:
 *	BSP: T = 2.01 + 0.18 = 2.19, Lambda = 8 b / 2.19 = 3.65 b;
 *	four pairs: E[max] = 1 + 3 x (1 - 0.95^2) = 1.2925, T = 1.4125,
 *	     V = 3, m = 3/4 (d = 1), tau = 3, Lambda = 8 b / 1.4125 /
 *	     (1 + 0.125 x 3/4) = 5.18 b, the optimum (ASP's 5.72 b has
 *	     tau = 7 > S):
 * not one group.  The same means as steady steps: BSP's T = 1.15 + 0.18 =
 * 1.33, Lambda = 6.02 b, above four pairs' 8 b / 1.27 / 1.094 = 5.76 b
 * and two halves' 8 b / 1.29 / 1.0625 = 5.84 b: one group.
 */
Test(cgpp, fluctuating_workers_split_steady_workers_stay_one_group)
{
	double t[8], samples[8][20];
	uint32_t count[8];
	struct kn__cgpp p = instance(t, 8, 32, 0.1, 1, 100, 4);
	struct kn__cgpp_dist *d;
	struct kn__cgpp_eval ev;
	uint8_t bsp[7] = { 0 };
	struct solved s;

	for (int i = 0; i < 8; i++) {
		t[i] = 1.15;
		count[i] = 20;
		for (int j = 0; j < 20; j++)
			samples[i][j] = j == i ? 4 : 1;
	}
	d = dist(t, 8, samples[0], count, 20);
	p.dist = d;
	cr_assert_eq(kn__cgpp_eval(&p, bsp, &ev), 0);
	assert_close(ev.lambda, 8 * 32 / (1 + 3 * (1 - pow(0.95, 8)) + 0.18),
		     "bsp lambda");
	s = solve(&p);
	cr_assert_gt(s.e.groups, 1);
	cr_assert_gt(s.ea.groups, 1);
	cr_assert_gt(s.ep.groups, 1);
	cr_assert_eq(s.e.groups, 4);
	assert_close(s.e.lambda,
		     8 * 32 / (1 + 3 * (1 - 0.95 * 0.95) + 0.12) /
			     (1 + 0.125 * 0.75),
		     "pairs lambda");
	assert_optimum_reached(&s);
	kn__cgpp_dist_destroy(d);

	/* steady: every sample the mean, as without distributions */
	for (int i = 0; i < 8; i++)
		for (int j = 0; j < 20; j++)
			samples[i][j] = 1.15;
	d = dist(t, 8, samples[0], count, 20);
	p.dist = d;
	s = solve(&p);
	assert_one_group(&s);
	assert_close(s.e.lambda, 8 * 32 / 1.33, "steady bsp lambda");
	p.dist = NULL;
	s = solve(&p);
	assert_one_group(&s);
	kn__cgpp_dist_destroy(d);
}

/* --- random instances against the oracle ---------------------------------- */

static double unit(uint64_t *s)
{
	return (double)(kn__splitmix_next(s) >> 11) * 0x1p-53;
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
	uint32_t n = 2 + (uint32_t)(kn__splitmix_next(&s) % 15);

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
