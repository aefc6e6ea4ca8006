/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cgpp_dist.c - the step-time distributions of CGPP's workers (cgpp.h,
 * docs/cgpp.md): the expected slowest step of a group, which CGP's
 * planner prices a group's round by when steps fluctuate.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cgpp.h"

/*
 * Every worker's recent step times are an empirical distribution F_i.  A
 * round of a group ends with its slowest member's step, and with steps
 * independent between workers the slowest has the distribution
 * H = prod_{i in G} F_i, whose mean is
 *	E[max] = x_0 + int_{x_0}^inf (1 - H(x)) dx
 * (x_0 the smallest time seen: below it H = 0).  H is a step function
 * that moves only at sample values, so on a grid that holds every
 * sample value the left-endpoint sum is exact; with more distinct values
 * than the grid holds, the grid takes evenly spaced ones of them, and
 * the sum overestimates by at most one gap.  Up to DIST_TABLE_MAX
 * workers every contiguous group's mean is computed once, extending the
 * group one worker at a time (no logarithms); above it, prefix sums of
 * log F over the sorted workers give a group's H in O(grid).
 */
#define DIST_GRID_MAX  256
#define DIST_GRID_MIN  32
#define DIST_TABLE_MAX 1024

struct kn__cgpp_dist {
	uint32_t n, q;
	double *x;	 /* [q] the grid, ascending */
	double *F;	 /* [n q]: F_i(x_g), i by sorted position */
	double *table;	 /* [n (n + 1) / 2]: E[max] of [s, e), or NULL */
	double *lf;	 /* [(n + 1) q]: prefix sums of log F (no table) */
	uint32_t *zeros; /* [(n + 1) q]: prefix counts of F == 0 */
};

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* E[max] of a distribution H given on the grid. */
static double mean_of_max(const struct kn__cgpp_dist *d, const double *h)
{
	double e = d->x[0];

	for (uint32_t g = 0; g + 1 < d->q; g++)
		e += (1 - h[g]) * (d->x[g + 1] - d->x[g]);
	return e;
}

static size_t tri(uint32_t n, uint32_t s, uint32_t e)
{
	return (size_t)s * (2 * (size_t)n - s + 1) / 2 + (e - s - 1);
}

void kn__cgpp_dist_destroy(struct kn__cgpp_dist *d)
{
	if (!d)
		return;
	free(d->x);
	free(d->F);
	free(d->table);
	free(d->lf);
	free(d->zeros);
	free(d);
}

/*
 * The grid: the pooled samples' distinct values, or, when there are more
 * of them than it holds, q evenly spaced ones of the distinct values
 * (the smallest and the largest always), so that no grid point is spent
 * on a value many samples share; its size into d->q.  @pool is sorted.
 */
static int make_grid(struct kn__cgpp_dist *d, const double *pool, size_t np)
{
	size_t distinct = 0, rank = 0, g = 0;
	uint32_t qmax = (uint32_t)((1u << 17) / d->n);
	double step;

	qmax = qmax > DIST_GRID_MAX   ? DIST_GRID_MAX
	       : qmax < DIST_GRID_MIN ? DIST_GRID_MIN
				      : qmax;
	for (size_t j = 0; j < np; j++)
		distinct += !j || pool[j] != pool[j - 1];
	d->q = distinct < qmax ? (uint32_t)distinct : qmax;
	d->x = malloc(d->q * sizeof(*d->x));
	if (!d->x)
		return -ENOMEM;
	/*
	 * Grid point g is the distinct value of rank round(g step): every
	 * one when they fit (step 1), else ranks 0 and distinct - 1 and
	 * evenly spaced ones between.  step >= 1, so the ranks rise and one
	 * pass over the distinct values meets each.
	 */
	step = d->q > 1 ? (double)(distinct - 1) / (d->q - 1) : 0;
	for (size_t j = 0; j < np && g < d->q; j++) {
		if (j && pool[j] == pool[j - 1])
			continue;
		if (rank++ == (size_t)((double)g * step + 0.5))
			d->x[g++] = pool[j];
	}
	return 0;
}

static int fill_table(struct kn__cgpp_dist *d)
{
	uint32_t n = d->n, q = d->q;
	double *h = malloc(q * sizeof(*h));

	d->table = malloc((size_t)n * (n + 1) / 2 * sizeof(*d->table));
	if (!h || !d->table) {
		free(h);
		return -ENOMEM;
	}
	for (uint32_t s = 0; s < n; s++) {
		for (uint32_t g = 0; g < q; g++)
			h[g] = 1;
		for (uint32_t e = s + 1; e <= n; e++) {
			const double *f = d->F + (size_t)(e - 1) * q;

			for (uint32_t g = 0; g < q; g++)
				h[g] *= f[g];
			d->table[tri(n, s, e)] = mean_of_max(d, h);
		}
	}
	free(h);
	return 0;
}

static int fill_prefix(struct kn__cgpp_dist *d)
{
	uint32_t n = d->n, q = d->q;

	d->lf = calloc(((size_t)n + 1) * q, sizeof(*d->lf));
	d->zeros = calloc(((size_t)n + 1) * q, sizeof(*d->zeros));
	if (!d->lf || !d->zeros)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++)
		for (uint32_t g = 0; g < q; g++) {
			size_t at = (size_t)i * q + g, up = at + q;
			double f = d->F[at];

			d->lf[up] = d->lf[at] + (f > 0 ? log(f) : 0);
			d->zeros[up] = d->zeros[at] + (f <= 0);
		}
	return 0;
}

int kn__cgpp_dist_create(const double *t, uint32_t n, const double *samples,
			 const uint32_t *count, uint32_t stride,
			 struct kn__cgpp_dist **out)
{
	struct kn__cgpp_dist *d;
	double *pool, *mine;
	size_t np = 0;
	int rc = -ENOMEM;

	if (!t || !n || !count || !out || (stride && !samples))
		return -EINVAL;
	for (uint32_t i = 0; i < n; i++) {
		if (count[i] > stride || !isfinite(t[i]) || t[i] < 0)
			return -EINVAL;
		for (uint32_t j = 0; j < count[i]; j++) {
			double v = samples[(size_t)i * stride + j];

			if (!isfinite(v) || v < 0)
				return -EINVAL;
		}
		np += count[i] ? count[i] : 1;
	}
	d = calloc(1, sizeof(*d));
	pool = malloc(np * sizeof(*pool));
	mine = malloc(((size_t)stride + 1) * sizeof(*mine));
	if (!d || !pool || !mine)
		goto out;
	d->n = n;
	np = 0;
	for (uint32_t i = 0; i < n; i++) {
		if (!count[i])
			pool[np++] = t[i]; /* no samples yet: its mean */
		for (uint32_t j = 0; j < count[i]; j++)
			pool[np++] = samples[(size_t)i * stride + j];
	}
	qsort(pool, np, sizeof(*pool), cmp_double);
	rc = make_grid(d, pool, np);
	if (rc)
		goto out;
	rc = -ENOMEM;
	d->F = malloc((size_t)n * d->q * sizeof(*d->F));
	if (!d->F)
		goto out;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t c = count[i] ? count[i] : 1, j = 0;

		if (count[i])
			memcpy(mine, samples + (size_t)i * stride,
			       c * sizeof(*mine));
		else
			mine[0] = t[i];
		qsort(mine, c, sizeof(*mine), cmp_double);
		for (uint32_t g = 0; g < d->q; g++) {
			while (j < c && mine[j] <= d->x[g])
				j++;
			d->F[(size_t)i * d->q + g] = (double)j / c;
		}
	}
	rc = n <= DIST_TABLE_MAX ? fill_table(d) : fill_prefix(d);
out:
	free(pool);
	free(mine);
	if (rc) {
		kn__cgpp_dist_destroy(d);
		return rc;
	}
	*out = d;
	return 0;
}

double kn__cgpp_dist_max(const struct kn__cgpp_dist *d, uint32_t s, uint32_t e)
{
	double e_max = d->x[0];

	if (d->table)
		return d->table[tri(d->n, s, e)];
	for (uint32_t g = 0; g + 1 < d->q; g++) {
		size_t a = (size_t)s * d->q + g, b = (size_t)e * d->q + g;
		double h = d->zeros[b] != d->zeros[a]
				   ? 0
				   : exp(d->lf[b] - d->lf[a]);

		e_max += (1 - h) * (d->x[g + 1] - d->x[g]);
	}
	return e_max;
}

int kn__cgpp_dist_groups(const struct kn__cgpp_dist *d, const uint32_t *label,
			 uint32_t k, double *out)
{
	double *h;

	if (!d || !label || !out || !k)
		return -EINVAL;
	for (uint32_t i = 0; i < d->n; i++)
		if (label[i] >= k)
			return -EINVAL;
	h = malloc((size_t)k * d->q * sizeof(*h));
	if (!h)
		return -ENOMEM;
	for (size_t j = 0; j < (size_t)k * d->q; j++)
		h[j] = 1;
	for (uint32_t i = 0; i < d->n; i++)
		for (uint32_t g = 0; g < d->q; g++)
			h[(size_t)label[i] * d->q + g] *=
				d->F[(size_t)i * d->q + g];
	for (uint32_t j = 0; j < k; j++)
		out[j] = mean_of_max(d, h + (size_t)j * d->q);
	free(h);
	return 0;
}

uint32_t kn__cgpp_dist_workers(const struct kn__cgpp_dist *d)
{
	return d->n;
}
