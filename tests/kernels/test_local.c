/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_local.c - the local-step protocols' passes (kernels.h: local_dist,
 * local_delta, local_merge) on every path, against the formulas in double
 * arithmetic, at lengths that leave every tail and block remainder.
 */
#include "kernel_test.h"

static const size_t lengths[] = { 0,  1,    7,	  15,	16,  17,
				  63, 1023, 1024, 1025, 4099 };

static float *filled(size_t n, unsigned int seed)
{
	float *p = malloc((n + 1) * sizeof(float));

	cr_assert(p);
	srand(seed);
	for (size_t i = 0; i < n; i++)
		p[i] = (float)(rand() % 2001 - 1000) / 256.0f;
	return p;
}

PATH_TEST(local, dist_is_the_squared_distance_and_norm)
{
	for (size_t l = 0; l < sizeof(lengths) / sizeof(lengths[0]); l++) {
		size_t n = lengths[l];
		float *x = filled(n, 1), *a = filled(n, 2);
		double want[2] = { 0.5, 0.25 }, got[2] = { 0.5, 0.25 };

		for (size_t i = 0; i < n; i++) {
			double e = (double)x[i] - a[i];

			want[0] += e * e;
			want[1] += (double)a[i] * a[i];
		}
		ops->local_dist(x, a, n, got);
		/* it adds to what is there, and agrees to fp32 rounding */
		for (int k = 0; k < 2; k++)
			cr_assert(fabs(got[k] - want[k]) <= 1e-6 * want[k],
				  "n %zu: [%d] %.17g, want %.17g", n, k, got[k],
				  want[k]);
		free(x);
		free(a);
	}
}

PATH_TEST(local, delta_and_merge_are_exact)
{
	for (size_t l = 0; l < sizeof(lengths) / sizeof(lengths[0]); l++) {
		size_t n = lengths[l];
		float *x = filled(n, 3), *a = filled(n, 4), *in = filled(n, 5);
		float *d = filled(n, 6), *at = filled(n, 7);
		float *x0 = filled(n, 3);

		ops->local_delta(d, at, a, x, n);
		for (size_t i = 0; i < n; i++) {
			cr_assert_eq(d[i], a[i] - x[i], "n %zu [%zu]", n, i);
			cr_assert_eq(at[i], x[i]);
		}
		/* some progress since the push, then the release */
		for (size_t i = 0; i < n; i++)
			x[i] -= 0.125f;
		ops->local_merge(x, a, in, at, n);
		for (size_t i = 0; i < n; i++) {
			cr_assert_eq(x[i], in[i] + ((x0[i] - 0.125f) - at[i]),
				     "n %zu [%zu]", n, i);
			cr_assert_eq(a[i], in[i]);
		}
		free(x);
		free(a);
		free(in);
		free(d);
		free(at);
		free(x0);
	}
}
