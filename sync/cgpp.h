/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cgpp.h - CGPP, the grouping problem of CGP (DESIGN.md section 4,
 * docs/cgpp.md), and its solvers: an exhaustive oracle for n <= 20,
 * CGP_AGA (adaptive genetic algorithm, n up to ~128) and CGP_PLS (Pareto
 * local search, n in the thousands).  The CGP planner calls these to
 * choose a partition of the workers; tests and perf/bench_cgpp call them
 * directly.
 *
 * The cost model.  n workers with step times t_0 <= ... <= t_{n-1}
 * (ascending: the caller sorts, and every function here refuses an
 * unsorted array).  A partition is a set of groups contiguous in that
 * order, written as n - 1 cut bits: cuts[i] = 1 when a group ends after
 * worker i.  For a group G of |G| workers
 *	T_G = max_{i in G} t_i + C_sync(|G|),  C_sync(m) = lat + m bytes / bw
 *	      (with step-time distributions, below: the expected slowest
 *	      step of G, E[max_{i in G} step_i], in place of max t_i)
 *	V_G = sum_{H != G} T_G / T_H         (versions made in a round of G)
 *	m_G = sum_{H != G} (|H| / n) T_G / T_H  (the same, in rounds of n)
 *	d_G = 1 / max(1, m_G)                (the chunk rule's damping)
 *	Lambda(P) = sum_G d_G / (1 + beta m_G) |G| b / T_G
 *	                                     (useful samples per second)
 *	tau_max(P) = max_G d_G V_G
 * with beta = KN__CGPP_STALE_COST.  CGP's chunk rule (sync/cgp.c)
 * weights each push of G by d_G / n, with m_G counted as it happens;
 * the model uses its steady-state value.  It is ASP's damping: only the
 * rounds of n missed beyond the first count, so a group less than a
 * round stale is not damped.  So Lambda counts a stale group's samples
 * at the weight they get, times 1 / (1 + beta m_G), the price of their
 * staleness (below), and tau_G is G's staleness in versions at that
 * weight: an update damped by d perturbs the model as an undamped one
 * d V versions stale does (docs/protocols.md, CGP).  One group (BSP)
 * has d = 1 and tau_max = 0 exactly; n groups is ASP.  P is feasible
 * when tau_max <= S (1 + 1e-9): the slack only absorbs rounding, so
 * S = 0 admits one group only.  k equal groups of equal workers have
 * tau_max = k - 1 (less than a round stale, undamped), so S admits at
 * most S + 1 of them; every tau_G is at most n (m_G >= V_G / n), so
 * S >= n admits every partition, and every split has tau_max >= 1.
 *
 * Everything is pure: no I/O, no clock, no global state; randomness comes
 * from a caller's seed through a private generator, so a seed gives the
 * same answer everywhere.  Functions return 0 or a negative errno and
 * fill their out-parameters only on success.  Nothing blocks; an
 * instance may be shared read-only by any number of threads, and an
 * archive (struct kn__cgpp_pls) is read-only once created.
 */
#ifndef KN_CGPP_H
#define KN_CGPP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KN__CGPP_DEFAULT_BOUND	8.0 /* S */
#define KN__CGPP_EXHAUSTIVE_MAX 20  /* workers the oracle accepts */

/*
 * The value of a contribution applied m rounds of n stale, against a
 * fresh one: 1 / (1 + KN__CGPP_STALE_COST m), on top of the damping.
 * From the project's measured training runs (8 workers, MLP, momentum):
 * ASP's time-to-target gain over BSP was 0.86 to 0.94 of its samples/s
 * gain in five of six imbalance cells, i.e. a sample 7/8 of a round
 * stale was worth about 0.9 of a fresh one: 1 / (1 + 0.125 x 7/8).
 */
#define KN__CGPP_STALE_COST 0.125

/* Step-time distributions of an instance's workers (below). */
struct kn__cgpp_dist;

/* An instance; the caller owns @t, which must stay valid during a call. */
struct kn__cgpp {
	const double *t; /* n step times, ascending, finite, >= 0 */
	/* NULL: steady step times, T_G from max t; else T_G from the
	 * expected slowest step of the group's distributions (n as here) */
	const struct kn__cgpp_dist *dist;
	uint32_t n;   /* >= 1 */
	double batch; /* b, > 0 */
	double lat;   /* C_sync(m) = lat + m * bytes / bw; lat >= 0 */
	double bytes; /* >= 0 */
	double bw;    /* > 0 */
	double bound; /* S, >= 0 */
};

/* The figures of one partition under one instance. */
struct kn__cgpp_eval {
	double lambda;	 /* Lambda(P) */
	double tau_max;	 /* tau_max(P), >= 0 */
	bool feasible;	 /* tau_max <= S (1 + 1e-9) */
	uint32_t groups; /* number of groups, 1..n */
};

/*
 * Evaluate the partition @cuts (n - 1 bytes, each 0 or 1; may be NULL
 * when n == 1) of @p.  Returns 0, or -EINVAL for a bad instance (NULL,
 * n == 0, unsorted or non-finite t, b <= 0, bw <= 0, negative lat,
 * bytes or S) or a cut byte other than 0 or 1.  O(n).
 */
int kn__cgpp_eval(const struct kn__cgpp *p, const uint8_t *cuts,
		  struct kn__cgpp_eval *out);

/*
 * The same figures for any grouping, contiguous or not: @k groups, group
 * j of @size[j] workers (0: skipped) with round time @T[j] (T_G above,
 * finite and > 0 when size[j] > 0), n = sum size[j] > 0.  The CGP
 * planner compares the groups in force with a solver's answer with it.
 * Returns 0 or -EINVAL.  O(k).
 */
int kn__cgpp_eval_groups(const double *T, const uint32_t *size, uint32_t k,
			 double batch, double bound, struct kn__cgpp_eval *out);

/*
 * The exact optimum: the feasible partition of largest Lambda, found by
 * trying all 2^(n-1) of them.  Ties (Lambda within 1e-12 relative) go to
 * fewer groups, then to the lexicographically smaller @cuts.  Always
 * finds one, since BSP is feasible.  Writes n - 1 bytes to @cuts.
 * Returns 0, -EINVAL as kn__cgpp_eval(), or -E2BIG when
 * n > KN__CGPP_EXHAUSTIVE_MAX.  O(2^n n); about 10 M steps at n = 20.
 */
int kn__cgpp_exhaustive(const struct kn__cgpp *p, uint8_t *cuts,
			struct kn__cgpp_eval *out);

/*
 * CGP_AGA's knobs; a zero field takes its default.  k1..k4 are Srinivas
 * and Patnaik's (1994): pc = k1 (fmax - f') / (fmax - favg) for parents
 * whose better fitness f' >= favg, else k3; pm = k2 (fmax - f) /
 * (fmax - favg) for a child of fitness f >= favg, else k4.
 */
struct kn__cgpp_aga_params {
	uint32_t pop;	       /* population, default 64 */
	uint32_t generations;  /* at most, default 400 */
	uint32_t stall;	       /* stop after this many without gain, 80 */
	uint32_t tournament;   /* tournament size, default 3 */
	double k1, k2, k3, k4; /* defaults 1.0, 0.5, 1.0, 0.5 */
};

/*
 * CGP_AGA: best feasible partition found by the adaptive genetic
 * algorithm with seed @seed and knobs @ap (NULL: all defaults), then
 * polished by bit-flip and cut-shift hill climbing.  The result is
 * always feasible (BSP is in the first population and elitism keeps the
 * best feasible).  Writes n - 1 bytes to @cuts.  Returns 0, -EINVAL as
 * kn__cgpp_eval() or for k's outside [0, 1], or -ENOMEM.  Deterministic
 * for (p, seed, ap).  About pop x generations x n steps.
 */
int kn__cgpp_aga(const struct kn__cgpp *p, uint64_t seed,
		 const struct kn__cgpp_aga_params *ap, uint8_t *cuts,
		 struct kn__cgpp_eval *out);

/* CGP_PLS's archive: non-dominated partitions over (Lambda, tau_max). */
struct kn__cgpp_pls;

/* The staleness span the archive covers for an instance bound S. */
#define KN__CGPP_PLS_SPAN(S) (2 * (S) + 4)

/*
 * CGP_PLS: run a Pareto local search on @p with seed @seed and keep at
 * most @archive_max (0: 64; at least 3) mutually non-dominated
 * partitions, maximizing Lambda and minimizing tau_max, over tau_max <=
 * KN__CGPP_PLS_SPAN(p->bound) and at most KN__CGPP_PLS_SPAN(p->bound) + 1
 * groups: the span a later re-selection with a different bound can use,
 * without spending the search on partitions no sensible bound admits
 * (k groups of equal T and size have tau_max = k - 1: a bound of
 * 2 S + 4 admits at most 2 S + 5 of them).
 * BSP (the lowest tau_max) and the best partition for p->bound are
 * always kept.  The archive copies what
 * it needs; @p->t may go once this returns.  Returns 0 and sets *@out,
 * -EINVAL as kn__cgpp_eval(), or -ENOMEM.  About 32 archive_max
 * explorations of O(n + groups^2 x 60) each.
 */
int kn__cgpp_pls_create(const struct kn__cgpp *p, uint64_t seed,
			uint32_t archive_max, struct kn__cgpp_pls **out);

/*
 * The archive's partition of largest Lambda with tau_max <= @bound
 * (1 + 1e-9), ties to fewer groups; no new search.  A bound above the
 * archive's span selects from the span.  Writes n - 1 bytes
 * to @cuts (may be NULL) and sets out->feasible against @bound.  Returns
 * 0 or -EINVAL (NULL archive, negative or NaN bound).
 */
int kn__cgpp_pls_select(const struct kn__cgpp_pls *a, double bound,
			uint8_t *cuts, struct kn__cgpp_eval *out);

/* Members in the archive (0 for NULL). */
size_t kn__cgpp_pls_size(const struct kn__cgpp_pls *a);

/*
 * Member @i (ascending tau_max, so ascending Lambda): its figures, with
 * feasible against the instance's bound, and its cuts when @cuts is not
 * NULL.  Returns 0 or -EINVAL (NULL archive, i out of range).
 */
int kn__cgpp_pls_member(const struct kn__cgpp_pls *a, size_t i, uint8_t *cuts,
			struct kn__cgpp_eval *out);

/* Free @a; NULL is fine. */
void kn__cgpp_pls_destroy(struct kn__cgpp_pls *a);

/*
 * Step-time distributions: @count[i] recent step times of the worker at
 * sorted position i at @samples + i @stride (count[i] <= stride; 0:
 * none yet, it counts as a steady @t[i]).  Steps are taken to be
 * independent between workers, so a group's slowest step has the
 * product of their distributions.  Returns 0 and sets *@out, -EINVAL
 * (NULL, n == 0, a count above @stride, a time negative or not finite)
 * or -ENOMEM.  O(n^2 q) up to 1,024 workers (every contiguous group's
 * mean is tabled), O(n q) above, q the grid (at most 256 values).
 */
int kn__cgpp_dist_create(const double *t, uint32_t n, const double *samples,
			 const uint32_t *count, uint32_t stride,
			 struct kn__cgpp_dist **out);

/* The expected slowest step of the workers at sorted positions [s, e),
 * s < e <= n: O(1) with the table, O(q) without. */
double kn__cgpp_dist_max(const struct kn__cgpp_dist *d, uint32_t s, uint32_t e);

/* The same for @k groups of any shape: worker at sorted position i in
 * group @label[i] < k; the mean of group j into @out[j] (an empty
 * group's is the smallest time seen).  0, -EINVAL or -ENOMEM. */
int kn__cgpp_dist_groups(const struct kn__cgpp_dist *d, const uint32_t *label,
			 uint32_t k, double *out);

/* The number of workers @d was made for. */
uint32_t kn__cgpp_dist_workers(const struct kn__cgpp_dist *d);

/* Free @d; NULL is fine. */
void kn__cgpp_dist_destroy(struct kn__cgpp_dist *d);

#endif /* KN_CGPP_H */
