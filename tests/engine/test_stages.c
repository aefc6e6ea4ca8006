/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_stages.c - the stage histograms: quantiles within the buckets'
 * 9% of the true value, the JSON they become.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "stages.h"

Test(stages, empty_is_zero)
{
	struct kn__hist h = { 0 };

	cr_assert_eq(kn__hist_quantile(&h, 0.5), 0);
}

Test(stages, quantiles_within_the_bucket_width)
{
	static struct kn__hist h;

	/* 1 us, 2 us, ..., 10000 us: the q quantile is about 10000 q us */
	for (int i = 1; i <= 10000; i++)
		kn__hist_add(&h, i * 1e-6);
	cr_assert_eq(h.count, 10000);
	for (double q = 0.1; q < 1; q += 0.1) {
		double got = kn__hist_quantile(&h, q), want = q * 10000e-6;

		cr_expect(fabs(got - want) <= 0.09 * want,
			  "q %.1f: %g s, want %g s", q, got, want);
	}
}

Test(stages, small_and_huge_durations)
{
	static struct kn__hist h;

	kn__hist_add(&h, -1);	/* a clock step back: 0 */
	kn__hist_add(&h, 5e-9); /* exact below 16 ns */
	kn__hist_add(&h, 1e6);	/* beyond the last bucket: counted there */
	cr_assert_eq(h.count, 3);
	cr_expect_eq(kn__hist_quantile(&h, 0), 0);
	cr_expect_eq(kn__hist_quantile(&h, 0.5), 5e-9);
	cr_expect_gt(kn__hist_quantile(&h, 1), 3000);
}

Test(stages, json)
{
	static struct kn__hist h;
	char buf[256] = "{";
	size_t n;

	for (int i = 0; i < 3; i++)
		kn__hist_add(&h, 100e-6);
	n = kn__hist_json(buf, 1, sizeof(buf), "apply", &h);
	n = kn__hist_json(buf, n, sizeof(buf), "send", &h);
	cr_assert_lt(n, sizeof(buf));
	cr_expect(strstr(buf, "{\"apply\":{\"n\":3,\"p50_us\":"), "%s", buf);
	cr_expect(strstr(buf, "},\"send\":{\"n\":3,"), "%s", buf);
	/* no room: the length says so */
	cr_expect_eq(kn__hist_json(buf, n, n + 10, "x", &h), n + 10);
}
