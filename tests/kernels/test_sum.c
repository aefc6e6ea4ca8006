/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_sum.c - the fused N-way sum on every kernel path, bit for bit
 * against a scalar reference that adds in the same order: every tail
 * length, unaligned and misaligned pointers, regular and non-temporal
 * stores, every dtype pair, N = 1 to 64, aliasing, NaN and Inf, and the
 * argument checks of the public entry points.
 */
#include <errno.h>

#include "kernel_test.h"

static const unsigned int inputs[] = { 1, 2, 3, 7, 8, 9, 11, 21, 64 };
static const struct {
	enum kn_dtype in, out;
} pairs[] = {
	{ KN_DTYPE_FP32, KN_DTYPE_FP32 }, { KN_DTYPE_FP16, KN_DTYPE_FP32 },
	{ KN_DTYPE_BF16, KN_DTYPE_FP32 }, { KN_DTYPE_FP16, KN_DTYPE_FP16 },
	{ KN_DTYPE_BF16, KN_DTYPE_BF16 },
};

#define MAXN   64
#define MAXLEN 32800
#define GUARD  16 /* canary elements after every output */

static void ref_sum(enum kn_dtype it, enum kn_dtype ot, void *dst,
		    const void *const *src, unsigned int n, size_t count,
		    float alpha)
{
	for (size_t i = 0; i < count; i++) {
		float acc = ref_load(it, src[0], i);

		for (unsigned int k = 1; k < n; k++)
			acc += ref_load(it, src[k], i);
		ref_store(ot, dst, i, acc * alpha);
	}
}

/*
 * One case: @n inputs of @count elements, input k at byte offset
 * (k * in_off) % 64 and the output at @out_off, compared bit for bit,
 * and nothing written past the end.  Non-temporal cases run as two
 * ranges, each with its own alignment head.
 */
static void check_case(const struct kn__kernel_ops *ops, struct sum_bufs *b,
		       enum kn_dtype it, enum kn_dtype ot, unsigned int n,
		       size_t count, size_t in_off, size_t out_off, bool nt,
		       float alpha)
{
	const struct sum_case c = {
		.path = ops->path,
		.it = it,
		.ot = ot,
		.n = n,
		.count = count,
		.in_off = in_off,
		.out_off = out_off,
		.nt = nt,
	};
	const void *src[MAXN];
	char *out = b->out + out_off, *want = b->want + out_off;
	kn__sum_fn *fn =
		ot == KN_DTYPE_FP32 ? ops->sum_to_f32[it] : ops->sum_same[it];

	sum_case_setup(&c, b->in, src, out, want, GUARD);
	ref_sum(it, ot, want, src, n, count, alpha);
	if (nt) { /* in two ranges, as a pool of threads would split it */
		fn(out, src[0], src + 1, n - 1, 0, count / 3, alpha, nt);
		fn(out, src[0], src + 1, n - 1, count / 3, count, alpha, nt);
	} else {
		fn(out, src[0], src + 1, n - 1, 0, count, alpha, nt);
	}
	sum_case_check(&c, out, want, GUARD);
}

static size_t length_at(size_t j)
{
	/* past the kernels' tile of 16,384 elements, and past two */
	static const size_t longer[] = { 127,  128,   129,  255,  256,
					 257,  1000,  1023, 1024, 1025,
					 4097, 16385, 32775 };

	return j <= 70 ? j : longer[j - 71];
}

#define NLENGTHS (71 + 13)

PATH_TEST(sum, every_tail_dtype_and_input_count)
{
	struct sum_bufs *b = sum_bufs_new(MAXN, MAXLEN, GUARD, 11);

	for (size_t p = 0; p < sizeof(pairs) / sizeof(pairs[0]); p++)
		for (size_t q = 0; q < sizeof(inputs) / sizeof(inputs[0]); q++)
			for (size_t j = 0; j < NLENGTHS; j++) {
				size_t len = length_at(j);
				size_t esz = kn_dtype_size(pairs[p].in);

				/* aligned, regular stores */
				check_case(ops, b, pairs[p].in, pairs[p].out,
					   inputs[q], len, 0, 0, false, 1.0f);
				/* element-misaligned inputs and output,
				   non-temporal stores with a scalar head */
				check_case(ops, b, pairs[p].in, pairs[p].out,
					   inputs[q], len, esz, esz * 3, true,
					   1.0f / 3);
			}
	sum_bufs_free(b);
}

/* Pointers not even aligned to their element size still work. */
PATH_TEST(sum, byte_misaligned_pointers)
{
	struct sum_bufs *b = sum_bufs_new(MAXN, MAXLEN, GUARD, 11);

	for (size_t p = 0; p < sizeof(pairs) / sizeof(pairs[0]); p++)
		for (size_t len = 0; len < 300; len += 37) {
			check_case(ops, b, pairs[p].in, pairs[p].out, 8, len, 1,
				   1, false, 0.5f);
			check_case(ops, b, pairs[p].in, pairs[p].out, 8, len, 3,
				   5, true, 0.5f);
		}
	sum_bufs_free(b);
}

/* dst may be any one of the inputs. */
PATH_TEST(sum, output_aliases_an_input)
{
	enum { LEN = 1031 };
	static float in[3][LEN], want[LEN];
	uint64_t seed = 5;

	for (unsigned int which = 0; which < 3; which++) {
		const void *src[3] = { in[0], in[1], in[2] };

		for (int k = 0; k < 3; k++)
			fill_random(KN_DTYPE_FP32, in[k], LEN, &seed);
		ref_sum(KN_DTYPE_FP32, KN_DTYPE_FP32, want, src, 3, LEN, 0.25f);
		ops->sum_to_f32[KN_DTYPE_FP32](in[which], src[0], src + 1, 2, 0,
					       LEN, 0.25f, which == 1);
		cr_assert_eq(memcmp(in[which], want, sizeof(want)), 0,
			     "dst == src[%u]", which);
	}
}

/* NaN and Inf propagate; NaN never turns into Inf when narrowing. */
PATH_TEST(sum, nan_and_inf_propagate)
{
	enum { LEN = 40 };
	float a[LEN], bb[LEN], out[LEN];
	uint16_t h[2][LEN], ho[LEN];
	const void *src[2] = { a, bb }, *hsrc[2] = { h[0], h[1] };

	for (int i = 0; i < LEN; i++) {
		a[i] = 1.0f;
		bb[i] = 2.0f;
	}
	a[3] = NAN;
	a[9] = INFINITY;
	a[17] = INFINITY;
	bb[17] = -INFINITY;
	a[33] = float_of(0x7f800001u); /* signalling NaN */
	a[34] = 60000.0f;
	bb[34] = 60000.0f;
	ops->sum_to_f32[KN_DTYPE_FP32](out, a, src + 1, 1, 0, LEN, 1.0f, false);
	cr_assert(isnan(out[3]));
	cr_assert(isinf(out[9]) && out[9] > 0);
	cr_assert(isnan(out[17]));
	cr_assert(isnan(out[33]));
	cr_assert_eq(out[0], 3.0f);
	for (int t = KN_DTYPE_FP16; t <= KN_DTYPE_BF16; t++) {
		enum kn_dtype dt = (enum kn_dtype)t;

		ops->from_f32[dt](h[0], a, LEN);
		ops->from_f32[dt](h[1], bb, LEN);
		ops->sum_same[dt](ho, hsrc[0], hsrc + 1, 1, 0, LEN, 1.0f,
				  false);
		cr_assert(isnan(ref_load(dt, ho, 3)), "%s", kn_dtype_name(dt));
		cr_assert(isnan(ref_load(dt, ho, 17)));
		cr_assert(isnan(ref_load(dt, ho, 33)));
		cr_assert(isinf(ref_load(dt, ho, 9)));
		/* 120000 overflows fp16 to Inf, fits in bf16 */
		cr_assert_eq(isinf(ref_load(dt, ho, 34)), dt == KN_DTYPE_FP16);
	}
}

/* The public entry points reach the same results, NT path included. */
Test(sum, public_entry_points)
{
	enum { LEN = 5000, N = 9 };
	static float in[N][LEN], out[LEN], want[LEN];
	const void *src[N];
	uint64_t seed = 7;
	size_t saved = kn__nt_threshold;

	fill_inputs(&in[0][0], src, N, LEN, &seed);
	ref_sum(KN_DTYPE_FP32, KN_DTYPE_FP32, want, src, N, LEN, 1.0f / N);
	for (int pass = 0; pass < 2; pass++) {
		kn__nt_threshold = pass ? 0 : (size_t)-1;
		memset(out, 0, sizeof(out));
		cr_assert_eq(kn_sum(out, KN_DTYPE_FP32, src, N, KN_DTYPE_FP32,
				    LEN, 1.0f / N),
			     0);
		cr_assert_eq(memcmp(out, want, sizeof(out)), 0, "pass %d",
			     pass);
		/* in place: acc = in[0], the rest as sources */
		memcpy(out, in[0], sizeof(out));
		cr_assert_eq(kn_sum_inplace(out, src + 1, N - 1, KN_DTYPE_FP32,
					    LEN, 1.0f / N),
			     0);
		cr_assert_eq(memcmp(out, want, sizeof(out)), 0);
	}
	kn__nt_threshold = saved;
	/* in place with no sources only scales */
	memcpy(out, in[0], sizeof(out));
	cr_assert_eq(kn_sum_inplace(out, NULL, 0, KN_DTYPE_FP32, LEN, 2.0f), 0);
	for (int i = 0; i < LEN; i++)
		cr_assert_eq(out[i], in[0][i] * 2.0f);
}

Test(sum, invalid_arguments)
{
	float a[8] = { 0 }, o[8];
	const void *src[2] = { a, a }, *bad[2] = { a, NULL };
	const struct {
		void *dst;
		enum kn_dtype dst_type;
		const void *const *src;
		unsigned int n;
		enum kn_dtype src_type;
	} bad_sum[] = {
		{ o, KN_DTYPE_FP32, src, 0, KN_DTYPE_FP32 },
		{ NULL, KN_DTYPE_FP32, src, 2, KN_DTYPE_FP32 },
		{ o, KN_DTYPE_FP32, NULL, 2, KN_DTYPE_FP32 },
		{ o, KN_DTYPE_FP32, bad, 2, KN_DTYPE_FP32 },
		{ o, KN_DTYPE_FP32, src, 2, (enum kn_dtype)9 },
		/* the output is fp32 or the input dtype, nothing else */
		{ o, KN_DTYPE_BF16, src, 2, KN_DTYPE_FP16 },
		{ o, KN_DTYPE_FP16, src, 2, KN_DTYPE_FP32 },
		{ o, (enum kn_dtype) - 1, src, 2, KN_DTYPE_FP16 },
	};

	for (size_t i = 0; i < sizeof(bad_sum) / sizeof(bad_sum[0]); i++)
		cr_assert_eq(kn_sum(bad_sum[i].dst, bad_sum[i].dst_type,
				    bad_sum[i].src, bad_sum[i].n,
				    bad_sum[i].src_type, 8, 1.0f),
			     -EINVAL, "case %zu", i);
	cr_assert_eq(kn_sum_inplace(NULL, src, 2, KN_DTYPE_FP32, 8, 1.0f),
		     -EINVAL);
	cr_assert_eq(kn_sum_inplace(o, NULL, 2, KN_DTYPE_FP32, 8, 1.0f),
		     -EINVAL);
	cr_assert_eq(kn_sum_inplace(o, bad, 2, KN_DTYPE_FP32, 8, 1.0f),
		     -EINVAL);
	cr_assert_eq(kn_sum_inplace(o, src, 2, (enum kn_dtype)3, 8, 1.0f),
		     -EINVAL);
	/* zero elements need no buffers, but still a valid call */
	cr_assert_eq(
		kn_sum(NULL, KN_DTYPE_FP32, NULL, 1, KN_DTYPE_FP32, 0, 1.0f),
		0);
	cr_assert_eq(
		kn_sum(NULL, KN_DTYPE_FP32, NULL, 0, KN_DTYPE_FP32, 0, 1.0f),
		-EINVAL);
}
