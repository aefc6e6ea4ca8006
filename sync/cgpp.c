/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cgpp.c - the CGPP cost model and its three solvers (cgpp.h,
 * docs/cgpp.md): the exhaustive oracle, CGP_AGA and CGP_PLS.  The
 * step-time distributions its group times may come from are
 * cgpp_dist.c.
 *
 * Two representations of a partition meet here.  The API and the genetic
 * algorithm use n - 1 cut bits, which crossover and mutation treat as a
 * plain bit string.  The Pareto local search keeps, per partition, the
 * ascending list of group ends (end[j] is one past the last worker of
 * group j, end[k - 1] = n), because its moves touch one or two groups
 * and must not cost O(n) to describe.
 *
 * Every evaluation takes two passes over the groups of a partition: the
 * first sums R = sum_H 1/T_H and N = sum_H |H|/T_H, the second gives
 * each group G, from those, its versions V_G = T_G R - 1, its staleness
 * in rounds of n m_G = (T_G N - |G|) / n and its damping d_G =
 * 1 / max(1, m_G) (the chunk rule's, ASP's, sync/cgp.c), hence its
 * share of Lambda, d_G / (1 + KN__CGPP_STALE_COST m_G) |G| / T_G, and
 * its staleness tau_G = d_G V_G (see cgpp.h).  So one
 * partition of k groups costs O(k) once its group times are known, and
 * a local-search move, which changes one or two groups, is scored in
 * O(k) without rebuilding the partition: the explored partition's group
 * times are kept, the move's new groups substituted for the ones it
 * removes.
 *
 * A group's T_G is its slowest member's step time plus C_sync, or, with
 * step-time distributions (struct kn__cgpp_dist, cgpp_dist.c), the
 * expected slowest step of its members, tabled for every contiguous
 * group up to 1,024 workers so that a solver's group time stays O(1).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cgpp.h"
#include "imbalance.h"

#define TAU_SLACK 1e-9 /* relative; feasibility only absorbs rounding */
#define TIE_REL	  1e-12

/* --- shared helpers ------------------------------------------------------- */

/*
 * The solvers' randomness: splitmix64 (imbalance.h), small, fast and
 * enough for selection and mutation.
 */
static double rng_unit(uint64_t *s)
{
	return (double)(kn__splitmix_next(s) >> 11) * 0x1p-53;
}

/* Uniform in [0, n), n > 0; the modulo bias is below 2^-32 for our n. */
static uint32_t rng_below(uint64_t *s, uint32_t n)
{
	return (uint32_t)(kn__splitmix_next(s) % n);
}

static bool feasible(double tau, double bound)
{
	return tau <= bound * (1.0 + TAU_SLACK);
}

static int check(const struct kn__cgpp *p)
{
	if (!p || !p->t || p->n == 0 ||
	    (p->dist && kn__cgpp_dist_workers(p->dist) != p->n))
		return -EINVAL;
	if (!(p->batch > 0) || !(p->bw > 0) || !(p->lat >= 0) ||
	    !(p->bytes >= 0) || !(p->bound >= 0) || !isfinite(p->batch) ||
	    !isfinite(p->bw) || !isfinite(p->lat) || !isfinite(p->bytes) ||
	    !isfinite(p->bound))
		return -EINVAL;
	for (uint32_t i = 0; i < p->n; i++) {
		if (!isfinite(p->t[i]) || !(p->t[i] >= 0))
			return -EINVAL;
		if (i && p->t[i] < p->t[i - 1])
			return -EINVAL;
	}
	return 0;
}

/*
 * T_G of the group [s, e) (e > s): its expected slowest step, or its
 * slowest step time without distributions, plus C_sync.
 */
static double group_time(const struct kn__cgpp *p, uint32_t s, uint32_t e)
{
	double slowest =
		p->dist ? kn__cgpp_dist_max(p->dist, s, e) : p->t[e - 1];

	return slowest + p->lat + (double)(e - s) * p->bytes / p->bw;
}

/*
 * The figures of a partition, accumulated group by group in two passes
 * (pass 0: the sums; pass 1: each group's terms, which need them).
 */
struct figs {
	double n;      /* workers */
	double r;      /* sum_H 1 / T_H */
	double nr;     /* sum_H |H| / T_H */
	uint32_t k;    /* groups */
	int pass;      /* 0 or 1 */
	double lambda; /* sum_G d_G / (1 + beta m_G) |G| / T_G (b = 1) */
	double tau;    /* max_G d_G V_G */
};

static void figs_group(struct figs *f, double size, double tg)
{
	double v, m, d;

	if (f->pass == 0) {
		f->r += 1.0 / tg;
		f->nr += size / tg;
		f->k++;
		return;
	}
	if (f->k <= 1) {
		/* one group: nobody else applies, V = m = 0 exactly */
		f->lambda += size / tg;
		return;
	}
	v = tg * f->r - 1;		/* versions others make in a round */
	m = (tg * f->nr - size) / f->n; /* the same in rounds of n */
	v = v > 0 ? v : 0;
	m = m > 0 ? m : 0;
	d = 1 / (m > 1 ? m : 1); /* the chunk rule's damping */
	f->lambda += d / (1 + KN__CGPP_STALE_COST * m) * size / tg;
	if (d * v > f->tau)
		f->tau = d * v;
}

static void figs_out(const struct figs *f, double batch, double bound,
		     struct kn__cgpp_eval *ev)
{
	ev->lambda = f->lambda * batch;
	ev->tau_max = f->tau;
	ev->feasible = feasible(f->tau, bound);
	ev->groups = f->k;
}

/* Evaluate cut bits, already validated; O(n). */
static void eval_cuts(const struct kn__cgpp *p, const uint8_t *cuts,
		      struct kn__cgpp_eval *ev)
{
	struct figs f = { .n = p->n };

	for (f.pass = 0; f.pass < 2; f.pass++) {
		uint32_t s = 0;

		for (uint32_t i = 0; i < p->n; i++) {
			if (i + 1 < p->n && !cuts[i])
				continue;
			figs_group(&f, (double)(i + 1 - s),
				   group_time(p, s, i + 1));
			s = i + 1;
		}
	}
	figs_out(&f, p->batch, p->bound, ev);
}

/* Evaluate a list of group ends; O(k). */
static void eval_ends(const struct kn__cgpp *p, const uint32_t *end, uint32_t k,
		      struct kn__cgpp_eval *ev)
{
	struct figs f = { .n = p->n };

	for (f.pass = 0; f.pass < 2; f.pass++) {
		uint32_t s = 0;

		for (uint32_t j = 0; j < k; j++) {
			figs_group(&f, (double)(end[j] - s),
				   group_time(p, s, end[j]));
			s = end[j];
		}
	}
	figs_out(&f, p->batch, p->bound, ev);
}

int kn__cgpp_eval_groups(const double *T, const uint32_t *size, uint32_t k,
			 double batch, double bound, struct kn__cgpp_eval *out)
{
	struct figs f = { 0 };

	if (!T || !size || !out || !(batch > 0) || !isfinite(batch) ||
	    !(bound >= 0) || !isfinite(bound))
		return -EINVAL;
	for (uint32_t j = 0; j < k; j++) {
		if (!size[j])
			continue;
		if (!(T[j] > 0) || !isfinite(T[j]))
			return -EINVAL;
		f.n += size[j];
	}
	if (f.n == 0)
		return -EINVAL;
	for (f.pass = 0; f.pass < 2; f.pass++)
		for (uint32_t j = 0; j < k; j++)
			if (size[j])
				figs_group(&f, size[j], T[j]);
	figs_out(&f, batch, bound, out);
	return 0;
}

int kn__cgpp_eval(const struct kn__cgpp *p, const uint8_t *cuts,
		  struct kn__cgpp_eval *out)
{
	int rc = check(p);

	if (rc)
		return rc;
	if (!out || (p->n > 1 && !cuts))
		return -EINVAL;
	for (uint32_t i = 0; i + 1 < p->n; i++)
		if (cuts[i] > 1)
			return -EINVAL;
	eval_cuts(p, cuts, out);
	return 0;
}

/* Seed partitions shared by AGA and PLS, as cut bits (n >= 2). */
static void equal_cuts(uint32_t n, uint32_t k, uint8_t *cuts)
{
	memset(cuts, 0, n - 1);
	for (uint32_t g = 1; g < k; g++)
		cuts[(uint64_t)g * n / k - 1] = 1;
}

/* Cut at the k - 1 largest gaps t[i + 1] - t[i] (ties: lower i). */
static void gap_cuts(const struct kn__cgpp *p, uint32_t k, uint8_t *cuts)
{
	memset(cuts, 0, p->n - 1);
	for (uint32_t g = 1; g < k; g++) {
		double best = -1;
		uint32_t bi = 0;

		for (uint32_t i = 0; i + 1 < p->n; i++) {
			double gap = p->t[i + 1] - p->t[i];

			if (!cuts[i] && gap > best) {
				best = gap;
				bi = i;
			}
		}
		cuts[bi] = 1;
	}
}

#define SEED_K_MAX 8 /* equal-size and largest-gap seeds: k = 2..8 */

/*
 * Seed partition @i (0: BSP, 1: ASP, then equal-size and largest-gap for
 * k = 2..SEED_K_MAX); false past the last one.
 */
static bool seed_cuts(const struct kn__cgpp *p, uint32_t i, uint8_t *cuts)
{
	uint32_t kmax = p->n < SEED_K_MAX ? p->n : SEED_K_MAX;

	if (i == 0) {
		memset(cuts, 0, p->n - 1);
		return true;
	}
	if (i == 1) {
		memset(cuts, 1, p->n - 1);
		return true;
	}
	i -= 2;
	if (i < kmax - 1) {
		equal_cuts(p->n, i + 2, cuts);
		return true;
	}
	i -= kmax - 1;
	if (i < kmax - 1) {
		gap_cuts(p, i + 2, cuts);
		return true;
	}
	return false;
}

/* --- exhaustive ----------------------------------------------------------- */

int kn__cgpp_exhaustive(const struct kn__cgpp *p, uint8_t *cuts,
			struct kn__cgpp_eval *out)
{
	uint8_t cur[KN__CGPP_EXHAUSTIVE_MAX], best[KN__CGPP_EXHAUSTIVE_MAX];
	struct kn__cgpp_eval be = { 0 }, ev;
	uint32_t L;
	int rc = check(p);

	if (rc)
		return rc;
	if (p->n > KN__CGPP_EXHAUSTIVE_MAX)
		return -E2BIG;
	if (!out || (p->n > 1 && !cuts))
		return -EINVAL;
	L = p->n - 1;
	/* Masks in increasing order are cut vectors in lexicographic order
	 * (cuts[0] is the top bit), so keeping the first of equals is the
	 * lexicographic tie-break.
	 */
	for (uint32_t mask = 0; mask < (1u << L); mask++) {
		for (uint32_t i = 0; i < L; i++)
			cur[i] = (mask >> (L - 1 - i)) & 1;
		eval_cuts(p, cur, &ev);
		if (!ev.feasible)
			continue;
		if (mask == 0 || ev.lambda > be.lambda * (1 + TIE_REL) ||
		    (ev.lambda >= be.lambda * (1 - TIE_REL) &&
		     ev.groups < be.groups)) {
			be = ev;
			memcpy(best, cur, L);
		}
	}
	if (L)
		memcpy(cuts, best, L);
	*out = be;
	return 0;
}

/* --- CGP_AGA -------------------------------------------------------------- */

static double fitness(const struct kn__cgpp_eval *ev)
{
	/* Lambda > 0, so every feasible partition beats every infeasible. */
	return ev->feasible ? ev->lambda : -ev->tau_max;
}

static bool fitter(double a, double b)
{
	return a > b + TIE_REL * fabs(b);
}

static uint32_t tournament(uint64_t *rs, const double *fit, uint32_t pop,
			   uint32_t size)
{
	uint32_t best = rng_below(rs, pop);

	for (uint32_t i = 1; i < size; i++) {
		uint32_t c = rng_below(rs, pop);

		if (fit[c] > fit[best])
			best = c;
	}
	return best;
}

/* One mutation: flip a bit (split or merge) or move a cut by one. */
static void mutate(uint64_t *rs, uint8_t *g, uint32_t L)
{
	uint32_t i = rng_below(rs, L);

	if (L >= 2 && (kn__splitmix_next(rs) & 1)) {
		/* move the cut nearest to i one place, when there is one */
		for (uint32_t d = 0; d < L; d++) {
			uint32_t j = (i + d) % L;
			uint32_t k;

			if (!g[j])
				continue;
			k = (kn__splitmix_next(rs) & 1) ? (j + 1) % L
							: (j + L - 1) % L;
			if (!g[k]) {
				g[j] = 0;
				g[k] = 1;
				return;
			}
			break;
		}
	}
	g[i] ^= 1;
}

/* Adaptive probability (Srinivas & Patnaik), guarded for fmax == favg. */
static double adaptive(double f, double fmax, double favg, double khi,
		       double klo)
{
	double spread = fmax - favg;

	if (!(spread > TIE_REL * fabs(fmax)))
		return klo; /* converged: disrupt at the low-fitness rate */
	if (f < favg)
		return klo;
	return khi * (fmax - f) / spread;
}

/* First-improvement hill climbing on flips and one-place cut shifts. */
static void polish(const struct kn__cgpp *p, uint8_t *g,
		   struct kn__cgpp_eval *ev)
{
	uint32_t L = p->n - 1;
	double f = fitness(ev);
	struct kn__cgpp_eval e;
	bool improved = true;

	for (int pass = 0; improved && pass < 16; pass++) {
		improved = false;
		for (uint32_t i = 0; i < L; i++) {
			g[i] ^= 1;
			eval_cuts(p, g, &e);
			if (fitter(fitness(&e), f)) {
				*ev = e;
				f = fitness(&e);
				improved = true;
			} else {
				g[i] ^= 1;
			}
		}
		for (uint32_t i = 0; i + 1 < L; i++) {
			uint8_t x;

			if (g[i] == g[i + 1])
				continue;
			x = g[i];
			g[i] = g[i + 1];
			g[i + 1] = x;
			eval_cuts(p, g, &e);
			if (fitter(fitness(&e), f)) {
				*ev = e;
				f = fitness(&e);
				improved = true;
			} else {
				g[i + 1] = g[i];
				g[i] = x;
			}
		}
	}
}

int kn__cgpp_aga(const struct kn__cgpp *p, uint64_t seed,
		 const struct kn__cgpp_aga_params *ap, uint8_t *cuts,
		 struct kn__cgpp_eval *out)
{
	struct kn__cgpp_aga_params a = { 64, 400, 80, 3, 1.0, 0.5, 1.0, 0.5 };
	struct kn__cgpp_eval *ev, best_ev;
	uint8_t *cur, *nxt, *best;
	double *fit, best_f;
	uint32_t L, pop, stall = 0;
	uint64_t rs = seed;
	int rc = check(p);

	if (rc)
		return rc;
	if (!out || (p->n > 1 && !cuts))
		return -EINVAL;
	if (ap) {
		const double k[4] = { ap->k1, ap->k2, ap->k3, ap->k4 };

		for (int i = 0; i < 4; i++)
			if (!(k[i] >= 0 && k[i] <= 1))
				return -EINVAL;
		a.pop = ap->pop ? ap->pop : a.pop;
		a.generations =
			ap->generations ? ap->generations : a.generations;
		a.stall = ap->stall ? ap->stall : a.stall;
		a.tournament = ap->tournament ? ap->tournament : a.tournament;
		a.k1 = ap->k1 ? ap->k1 : a.k1;
		a.k2 = ap->k2 ? ap->k2 : a.k2;
		a.k3 = ap->k3 ? ap->k3 : a.k3;
		a.k4 = ap->k4 ? ap->k4 : a.k4;
	}
	if (p->n == 1) {
		eval_cuts(p, cuts, out);
		return 0;
	}
	L = p->n - 1;
	/* room for two elites and a pair of children */
	pop = a.pop < 4 ? 4 : a.pop;

	cur = malloc((size_t)pop * L);
	nxt = malloc((size_t)pop * L);
	best = malloc(L);
	fit = malloc(pop * sizeof(*fit));
	ev = malloc(pop * sizeof(*ev));
	if (!cur || !nxt || !best || !fit || !ev) {
		rc = -ENOMEM;
		goto out_free;
	}

	for (uint32_t i = 0; i < pop; i++) {
		uint8_t *g = cur + (size_t)i * L;

		if (!seed_cuts(p, i, g)) {
			/* sparse random: good partitions have few groups */
			double u = rng_unit(&rs), d = u * u * 0.5;

			for (uint32_t b = 0; b < L; b++)
				g[b] = rng_unit(&rs) < d;
		}
		eval_cuts(p, g, &ev[i]);
		fit[i] = fitness(&ev[i]);
	}
	/* individual 0 is BSP, always feasible */
	best_ev = ev[0];
	best_f = fit[0];
	memcpy(best, cur, L);

	for (uint32_t gen = 0; gen < a.generations && stall < a.stall; gen++) {
		double fmax, fsum = 0, favg;
		uint32_t e0 = 0, e1, filled = 2;
		uint8_t *tmp;
		bool gained = false;

		for (uint32_t i = 0; i < pop; i++) {
			fsum += fit[i];
			if (fit[i] > fit[e0])
				e0 = i;
		}
		fmax = fit[e0];
		e1 = e0 ? 0 : 1;
		for (uint32_t i = 0; i < pop; i++)
			if (i != e0 && fit[i] > fit[e1])
				e1 = i;
		favg = fsum / pop;

		memcpy(nxt, cur + (size_t)e0 * L, L);
		memcpy(nxt + L, cur + (size_t)e1 * L, L);
		while (filled < pop) {
			uint32_t pa = tournament(&rs, fit, pop, a.tournament);
			uint32_t pb = tournament(&rs, fit, pop, a.tournament);
			double fp = fit[pa] > fit[pb] ? fit[pa] : fit[pb];
			double pc = adaptive(fp, fmax, favg, a.k1, a.k3);
			uint8_t *c1 = nxt + (size_t)filled * L;
			uint8_t *c2 = filled + 1 < pop ? c1 + L : NULL;
			const uint32_t par[2] = { pa, pb };

			memcpy(c1, cur + (size_t)pa * L, L);
			if (c2)
				memcpy(c2, cur + (size_t)pb * L, L);
			if (c2 && rng_unit(&rs) < pc) {
				/* two-point: swap the segment [x, y) */
				uint32_t x = rng_below(&rs, L);
				uint32_t y = x + 1 + rng_below(&rs, L - x);

				for (uint32_t b = x; b < y; b++) {
					uint8_t s = c1[b];

					c1[b] = c2[b];
					c2[b] = s;
				}
			}
			for (int c = 0; c < (c2 ? 2 : 1); c++) {
				uint8_t *g = c ? c2 : c1;
				double pm = adaptive(fit[par[c]], fmax, favg,
						     a.k2, a.k4);

				/* a floor keeps copies of the best moving */
				if (pm < 0.05)
					pm = 0.05;
				for (int m = 0; m < 4 && rng_unit(&rs) < pm;
				     m++)
					mutate(&rs, g, L);
			}
			filled += c2 ? 2 : 1;
		}
		tmp = cur;
		cur = nxt;
		nxt = tmp;
		for (uint32_t i = 0; i < pop; i++) {
			eval_cuts(p, cur + (size_t)i * L, &ev[i]);
			fit[i] = fitness(&ev[i]);
			if (ev[i].feasible && fitter(fit[i], best_f)) {
				best_f = fit[i];
				best_ev = ev[i];
				memcpy(best, cur + (size_t)i * L, L);
				gained = true;
			}
		}
		stall = gained ? 0 : stall + 1;
	}
	polish(p, best, &best_ev);
	memcpy(cuts, best, L);
	*out = best_ev;
	rc = 0;
out_free:
	free(ev);
	free(fit);
	free(best);
	free(nxt);
	free(cur);
	return rc;
}

/* --- CGP_PLS -------------------------------------------------------------- */

struct member {
	uint32_t *end; /* k ascending group ends, end[k - 1] = n */
	uint32_t k;
	double lambda, tau;
	bool explored;
};

struct kn__cgpp_pls {
	uint32_t n;
	double bound;	 /* the instance's S, for protection */
	double tau_span; /* members have tau_max <= this ... */
	uint32_t kmax;	 /* ... and at most this many groups */
	uint32_t cap;	 /* archive_max */
	size_t size;
	struct member *m; /* ascending tau, hence ascending lambda */
};

/* The partition being explored, with its group times. */
struct scan {
	const struct kn__cgpp *p;
	const uint32_t *end;
	uint32_t k;
	double *tg; /* T of each group */
};

static uint32_t gstart(const struct scan *sc, uint32_t j)
{
	return j ? sc->end[j - 1] : 0;
}

static void scan_init(struct scan *sc)
{
	for (uint32_t j = 0; j < sc->k; j++)
		sc->tg[j] = group_time(sc->p, gstart(sc, j), sc->end[j]);
}

/*
 * A move removes groups [ra, rb] (one or two, adjacent) and puts in
 * their place the groups [s, q) and [q, e) (q == 0: the one group
 * [s, e)).  Score it in O(k), from the kept group times.
 */
static void score(const struct scan *sc, uint32_t ra, uint32_t rb, uint32_t s,
		  uint32_t q, uint32_t e, double *lambda, double *tau)
{
	const struct kn__cgpp *p = sc->p;
	struct figs f = { .n = p->n };
	double t1 = group_time(p, s, q ? q : e),
	       t2 = q ? group_time(p, q, e) : 0;
	struct kn__cgpp_eval ev;

	for (f.pass = 0; f.pass < 2; f.pass++) {
		for (uint32_t j = 0; j < sc->k; j++) {
			if (j == ra) {
				figs_group(&f, (double)((q ? q : e) - s), t1);
				if (q)
					figs_group(&f, (double)(e - q), t2);
				j = rb;
				continue;
			}
			figs_group(&f, (double)(sc->end[j] - gstart(sc, j)),
				   sc->tg[j]);
		}
	}
	figs_out(&f, p->batch, p->bound, &ev);
	*lambda = ev.lambda;
	*tau = ev.tau_max;
}

static bool dominates(double la, double ta, double lb, double tb)
{
	return la >= lb && ta <= tb && (la > lb || ta < tb);
}

static bool same(double la, double ta, double lb, double tb)
{
	return fabs(la - lb) <= TIE_REL * fabs(lb) &&
	       fabs(ta - tb) <= TIE_REL * (fabs(tb) + 1);
}

/*
 * Whether (l, t) would enter the archive (before pruning): within the
 * span and neither dominated by nor the same as a member.  The archive
 * is a front sorted by tau, so Lambda ascends too, and only the last
 * member with tau <= t can dominate (it has the largest Lambda of those
 * that could); O(log size).
 */
static bool wanted(const struct kn__cgpp_pls *a, double l, double t, uint32_t k)
{
	size_t lo = 0, hi = a->size;

	if (!(t <= a->tau_span) || k > a->kmax)
		return false;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (a->m[mid].tau <= t)
			lo = mid + 1;
		else
			hi = mid;
	}
	/* lo: the first member with tau > t */
	if (lo > 0 && (a->m[lo - 1].lambda >= l ||
		       same(a->m[lo - 1].lambda, a->m[lo - 1].tau, l, t)))
		return false;
	if (lo < a->size && same(a->m[lo].lambda, a->m[lo].tau, l, t))
		return false;
	return true;
}

static void member_free(struct member *m)
{
	free(m->end);
	m->end = NULL;
}

static void remove_at(struct kn__cgpp_pls *a, size_t i)
{
	member_free(&a->m[i]);
	memmove(&a->m[i], &a->m[i + 1], (a->size - i - 1) * sizeof(a->m[0]));
	a->size--;
}

/* The last member feasible under the instance's own S. */
static size_t best_for_bound(const struct kn__cgpp_pls *a)
{
	size_t b = 0;

	for (size_t i = 0; i < a->size; i++)
		if (feasible(a->m[i].tau, a->bound))
			b = i;
	return b;
}

/*
 * Drop the member with the smallest crowding distance on (log(1 + tau),
 * Lambda), each scaled to the archive's range: log keeps the spread
 * denser at small staleness, where the bounds of interest lie.  The two
 * ends and the best for the instance's S are never dropped.
 */
static void prune(struct kn__cgpp_pls *a)
{
	double xr = log1p(a->m[a->size - 1].tau) - log1p(a->m[0].tau);
	double yr = a->m[a->size - 1].lambda - a->m[0].lambda;
	size_t keep = best_for_bound(a), victim = 0;
	double worst = INFINITY;

	xr = xr > 0 ? xr : 1;
	yr = yr > 0 ? yr : 1;
	for (size_t i = 1; i + 1 < a->size; i++) {
		double d;

		if (i == keep)
			continue;
		d = (log1p(a->m[i + 1].tau) - log1p(a->m[i - 1].tau)) / xr +
		    (a->m[i + 1].lambda - a->m[i - 1].lambda) / yr;
		if (d < worst) {
			worst = d;
			victim = i;
		}
	}
	if (victim)
		remove_at(a, victim);
}

/* Insert the partition @end[0..k) (copied); 0 or -ENOMEM. */
static int insert(struct kn__cgpp_pls *a, const struct kn__cgpp *p,
		  const uint32_t *end, uint32_t k)
{
	struct kn__cgpp_eval ev;
	struct member nm;
	size_t i, at;

	eval_ends(p, end, k, &ev);
	if (!wanted(a, ev.lambda, ev.tau_max, k))
		return 0;
	for (i = 0; i < a->size;) {
		if (dominates(ev.lambda, ev.tau_max, a->m[i].lambda,
			      a->m[i].tau))
			remove_at(a, i);
		else
			i++;
	}
	nm.end = malloc(k * sizeof(*end));
	if (!nm.end)
		return -ENOMEM;
	memcpy(nm.end, end, k * sizeof(*end));
	nm.k = k;
	nm.lambda = ev.lambda;
	nm.tau = ev.tau_max;
	nm.explored = false;
	for (at = 0; at < a->size && a->m[at].tau < nm.tau; at++)
		;
	/* a->m has room for cap + 1 */
	memmove(&a->m[at + 1], &a->m[at], (a->size - at) * sizeof(a->m[0]));
	a->m[at] = nm;
	a->size++;
	if (a->size > a->cap)
		prune(a);
	return 0;
}

/* Candidate cut positions in the open range (lo, hi), at most ~70. */
static uint32_t positions(const struct kn__cgpp *p, uint32_t lo, uint32_t hi,
			  uint32_t around, uint32_t *pos)
{
	uint32_t np = 0, gi = 0;
	double gap = -1;

	if (hi - lo <= 34) {
		for (uint32_t q = lo + 1; q < hi; q++)
			pos[np++] = q;
		return np;
	}
	/* steps doubling away from the ends and from @around, the middle,
	 * and the largest gap in speed: where the good boundaries lie
	 */
	for (uint32_t d = 1; d < hi - lo; d *= 2) {
		pos[np++] = lo + d;
		pos[np++] = hi - d;
		if (around > lo + d)
			pos[np++] = around - d;
		if (around + d < hi)
			pos[np++] = around + d;
	}
	pos[np++] = lo + (hi - lo) / 2;
	for (uint32_t q = lo + 1; q < hi; q++) {
		double g = p->t[q] - p->t[q - 1];

		if (g > gap) {
			gap = g;
			gi = q;
		}
	}
	pos[np++] = gi;
	return np;
}

#define POS_MAX 200

/* Offer every neighbour of the scanned partition to the archive. */
static int explore(struct kn__cgpp_pls *a, struct scan *sc, uint32_t *tmp)
{
	const struct kn__cgpp *p = sc->p;
	uint32_t pos[POS_MAX], k = sc->k;
	double l, t;
	int rc;

	scan_init(sc);
	for (uint32_t j = 0; j < k; j++) {
		uint32_t s = gstart(sc, j), e = sc->end[j], np;

		/* merge j and j + 1 */
		if (j + 1 < k) {
			score(sc, j, j + 1, s, 0, sc->end[j + 1], &l, &t);
			if (wanted(a, l, t, k - 1)) {
				memcpy(tmp, sc->end, j * sizeof(*tmp));
				memcpy(tmp + j, sc->end + j + 1,
				       (k - j - 1) * sizeof(*tmp));
				rc = insert(a, p, tmp, k - 1);
				if (rc)
					return rc;
			}
		}
		/* move the boundary between j and j + 1 */
		if (j + 1 < k) {
			np = positions(p, s, sc->end[j + 1], e, pos);
			for (uint32_t i = 0; i < np; i++) {
				if (pos[i] == e)
					continue;
				score(sc, j, j + 1, s, pos[i], sc->end[j + 1],
				      &l, &t);
				if (!wanted(a, l, t, k))
					continue;
				memcpy(tmp, sc->end, k * sizeof(*tmp));
				tmp[j] = pos[i];
				rc = insert(a, p, tmp, k);
				if (rc)
					return rc;
			}
		}
		/* split j, unless that makes too many groups */
		if (e - s < 2 || k + 1 > a->kmax)
			continue;
		np = positions(p, s, e, s + (e - s) / 2, pos);
		for (uint32_t i = 0; i < np; i++) {
			score(sc, j, j, s, pos[i], e, &l, &t);
			if (!wanted(a, l, t, k + 1))
				continue;
			memcpy(tmp, sc->end, j * sizeof(*tmp));
			tmp[j] = pos[i];
			memcpy(tmp + j + 1, sc->end + j,
			       (k - j) * sizeof(*tmp));
			rc = insert(a, p, tmp, k + 1);
			if (rc)
				return rc;
		}
	}
	return 0;
}

void kn__cgpp_pls_destroy(struct kn__cgpp_pls *a)
{
	if (!a)
		return;
	for (size_t i = 0; i < a->size; i++)
		member_free(&a->m[i]);
	free(a->m);
	free(a);
}

static uint32_t cuts_to_ends(uint32_t n, const uint8_t *cuts, uint32_t *end)
{
	uint32_t k = 0;

	for (uint32_t i = 0; i + 1 < n; i++)
		if (cuts[i])
			end[k++] = i + 1;
	end[k++] = n;
	return k;
}

int kn__cgpp_pls_create(const struct kn__cgpp *p, uint64_t seed,
			uint32_t archive_max, struct kn__cgpp_pls **out)
{
	struct kn__cgpp_pls *a;
	struct scan sc = { .p = p };
	uint32_t *cur = NULL, *tmp = NULL, *idx = NULL;
	uint8_t *cuts = NULL;
	uint64_t rs = seed;
	uint32_t budget;
	int rc = check(p);

	if (rc)
		return rc;
	if (!out)
		return -EINVAL;
	archive_max = archive_max ? archive_max : 64;
	if (archive_max < 3)
		archive_max = 3;

	rc = -ENOMEM;
	a = calloc(1, sizeof(*a));
	if (!a)
		return rc;
	a->n = p->n;
	a->bound = p->bound;
	a->cap = archive_max;
	a->tau_span = KN__CGPP_PLS_SPAN(p->bound);
	a->kmax = a->tau_span + 1 < (double)p->n ? (uint32_t)(a->tau_span + 1)
						 : p->n;
	a->m = calloc((size_t)archive_max + 1, sizeof(a->m[0]));
	cur = malloc(((size_t)p->n + 1) * sizeof(*cur));
	tmp = malloc(((size_t)p->n + 1) * sizeof(*tmp));
	sc.tg = malloc(((size_t)p->n + 1) * sizeof(*sc.tg));
	idx = malloc(((size_t)archive_max + 1) * sizeof(*idx));
	cuts = malloc(p->n);
	if (!a->m || !cur || !tmp || !sc.tg || !idx || !cuts)
		goto err_free;

	if (p->n == 1) {
		cur[0] = 1;
		rc = insert(a, p, cur, 1);
		if (rc)
			goto err_free;
	}
	for (uint32_t i = 0; p->n > 1 && seed_cuts(p, i, cuts); i++) {
		rc = insert(a, p, cur, cuts_to_ends(p->n, cuts, cur));
		if (rc)
			goto err_free;
	}

	/* Explore unexplored members, chosen at random, until none is left
	 * or the budget is spent; a member may leave the archive while its
	 * neighbours are offered, so it is explored from a copy.
	 */
	for (budget = 32 * archive_max; budget; budget--) {
		uint32_t nu = 0;
		struct member *m;

		for (size_t i = 0; i < a->size; i++)
			if (!a->m[i].explored)
				idx[nu++] = (uint32_t)i;
		if (!nu)
			break;
		m = &a->m[idx[rng_below(&rs, nu)]];
		m->explored = true;
		memcpy(cur, m->end, m->k * sizeof(*cur));
		sc.end = cur;
		sc.k = m->k;
		rc = explore(a, &sc, tmp);
		if (rc)
			goto err_free;
	}
	free(cuts);
	free(idx);
	free(sc.tg);
	free(tmp);
	free(cur);
	*out = a;
	return 0;

err_free:
	free(cuts);
	free(idx);
	free(sc.tg);
	free(tmp);
	free(cur);
	kn__cgpp_pls_destroy(a);
	return rc;
}

size_t kn__cgpp_pls_size(const struct kn__cgpp_pls *a)
{
	return a ? a->size : 0;
}

static void member_out(const struct kn__cgpp_pls *a, const struct member *m,
		       double bound, uint8_t *cuts, struct kn__cgpp_eval *out)
{
	if (cuts && a->n > 1) {
		memset(cuts, 0, a->n - 1);
		for (uint32_t j = 0; j + 1 < m->k; j++)
			cuts[m->end[j] - 1] = 1;
	}
	out->lambda = m->lambda;
	out->tau_max = m->tau;
	out->feasible = feasible(m->tau, bound);
	out->groups = m->k;
}

int kn__cgpp_pls_member(const struct kn__cgpp_pls *a, size_t i, uint8_t *cuts,
			struct kn__cgpp_eval *out)
{
	if (!a || !out || i >= a->size)
		return -EINVAL;
	member_out(a, &a->m[i], a->bound, cuts, out);
	return 0;
}

int kn__cgpp_pls_select(const struct kn__cgpp_pls *a, double bound,
			uint8_t *cuts, struct kn__cgpp_eval *out)
{
	const struct member *best = NULL;

	if (!a || !out || !(bound >= 0))
		return -EINVAL;
	for (size_t i = 0; i < a->size; i++) {
		const struct member *m = &a->m[i];

		if (!feasible(m->tau, bound))
			continue;
		if (!best || m->lambda > best->lambda * (1 + TIE_REL) ||
		    (m->lambda >= best->lambda * (1 - TIE_REL) &&
		     m->k < best->k))
			best = m;
	}
	/* BSP (tau 0) is never pruned, so this holds for any bound >= 0 */
	if (!best)
		return -EINVAL;
	member_out(a, best, bound, cuts, out);
	return 0;
}
