/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_weighted.c - the weighted fused sum and update on every kernel
 * path: the sum bit for bit against a scalar reference that rounds each
 * product and adds in order (every dtype pair, N from 1 to 33 across the
 * tiled threshold, tails, misaligned and non-temporal outputs), weights of
 * 1 giving exactly the plain sum, the update bit for bit against the plain
 * update of inputs scaled beforehand, and the public entry points'
 * results and argument checks.
 */
#include <errno.h>

#include "kernel_test.h"

static const unsigned int inputs[] = { 1, 2, 3, 9, 11, 12, 21, 33 };
static const struct {
	enum kn_dtype in, out;
} pairs[] = {
	{ KN_DTYPE_FP32, KN_DTYPE_FP32 }, { KN_DTYPE_FP16, KN_DTYPE_FP32 },
	{ KN_DTYPE_BF16, KN_DTYPE_FP32 }, { KN_DTYPE_FP16, KN_DTYPE_FP16 },
	{ KN_DTYPE_BF16, KN_DTYPE_BF16 },
};
static const size_t lengths[] = { 0,	1,    7,     8,	   15,	 16,
				  17,	31,   33,    63,   64,	 65,
				  127,	129,  257,   1023, 1025, 4095,
				  4097, 9000, 16385, 32775 };

#define MAXN   33
#define MAXLEN 32775
#define GUARD  16

/* dst = sum_k w[k] * src[k], each product rounded, added in order. */
static void ref_wsum(enum kn_dtype it, enum kn_dtype ot, void *dst,
		     const void *const *src, const float *w, unsigned int n,
		     size_t count)
{
	for (size_t i = 0; i < count; i++) {
		float acc = ref_load(it, src[0], i) * w[0];

		for (unsigned int k = 1; k < n; k++) {
			float p = ref_load(it, src[k], i) * w[k];

			acc = acc + p;
		}
		ref_store(ot, dst, i, acc);
	}
}

/* The sum tests' buffers, with weights of every sign and size, 0 and 1
 * among them. */
static struct sum_bufs *bufs_new(void)
{
	struct sum_bufs *b = sum_bufs_new(MAXN, MAXLEN, GUARD, 23);
	uint64_t seed = 29;

	for (int k = 0; k < MAXN; k++)
		b->w[k] = k % 7 == 3   ? 0.0f
			  : k % 7 == 5 ? 1.0f
				       : rnd_float(&seed) * 4.0f;
	return b;
}

static void check_case(const struct kn__kernel_ops *ops, struct sum_bufs *b,
		       enum kn_dtype it, enum kn_dtype ot, unsigned int n,
		       size_t count, size_t in_off, size_t out_off, bool nt)
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
	kn__wsum_fn *fn =
		ot == KN_DTYPE_FP32 ? ops->wsum_to_f32[it] : ops->wsum_same[it];

	sum_case_setup(&c, b->in, src, out, want, GUARD);
	ref_wsum(it, ot, want, src, b->w, n, count);
	if (nt) { /* two ranges, as a pool would split it */
		fn(out, src[0], src + 1, b->w, n - 1, 0, count / 3, nt);
		fn(out, src[0], src + 1, b->w, n - 1, count / 3, count, nt);
	} else {
		fn(out, src[0], src + 1, b->w, n - 1, 0, count, nt);
	}
	sum_case_check(&c, out, want, GUARD);
}

PATH_TEST(weighted, sum_every_tail_dtype_and_input_count)
{
	struct sum_bufs *b = bufs_new();

	for (size_t p = 0; p < sizeof(pairs) / sizeof(pairs[0]); p++)
		for (size_t q = 0; q < sizeof(inputs) / sizeof(inputs[0]); q++)
			for (size_t j = 0;
			     j < sizeof(lengths) / sizeof(lengths[0]); j++) {
				size_t esz = kn_dtype_size(pairs[p].in);

				check_case(ops, b, pairs[p].in, pairs[p].out,
					   inputs[q], lengths[j], 0, 0, false);
				check_case(ops, b, pairs[p].in, pairs[p].out,
					   inputs[q], lengths[j], esz, esz * 3,
					   true);
			}
	sum_bufs_free(b);
}

/* Weights of 1 are the plain sum's terms exactly: the same bits. */
PATH_TEST(weighted, unit_weights_are_the_plain_sum)
{
	struct sum_bufs *b = bufs_new();
	float ones[MAXN];

	for (int k = 0; k < MAXN; k++)
		ones[k] = 1.0f;
	for (size_t p = 0; p < sizeof(pairs) / sizeof(pairs[0]); p++)
		for (size_t q = 0; q < sizeof(inputs) / sizeof(inputs[0]);
		     q++) {
			enum kn_dtype it = pairs[p].in, ot = pairs[p].out;
			const void *src[MAXN];
			size_t bytes = 1031 * kn_dtype_size(ot);
			unsigned int n = inputs[q];

			for (unsigned int k = 0; k < n; k++)
				src[k] = b->in[k];
			(ot == KN_DTYPE_FP32 ? ops->sum_to_f32[it]
					     : ops->sum_same[it])(
				b->want, src[0], src + 1, n - 1, 0, 1031, 1.0f,
				false);
			(ot == KN_DTYPE_FP32 ? ops->wsum_to_f32[it]
					     : ops->wsum_same[it])(
				b->out, src[0], src + 1, ones, n - 1, 0, 1031,
				false);
			cr_assert_eq(memcmp(b->out, b->want, bytes), 0,
				     "%s %s->%s n=%u",
				     kn_kernel_path_name(ops->path),
				     kn_dtype_name(it), kn_dtype_name(ot), n);
		}
	sum_bufs_free(b);
}

static kn__update_fn *plain(const struct kn__kernel_ops *ops,
			    enum kn_optimizer o)
{
	return o == KN_OPT_SGD	      ? ops->sgd[KN_DTYPE_FP32]
	       : o == KN_OPT_MOMENTUM ? ops->momentum[KN_DTYPE_FP32]
				      : ops->adam[KN_DTYPE_FP32];
}

static kn__wupdate_fn *weighted(const struct kn__kernel_ops *ops,
				enum kn_optimizer o, enum kn_dtype t)
{
	return o == KN_OPT_SGD	      ? ops->wsgd[t]
	       : o == KN_OPT_MOMENTUM ? ops->wmomentum[t]
				      : ops->wadam[t];
}

/*
 * The weighted update over inputs of any dtype equals the plain fp32
 * update over copies already multiplied by their weights (in fp32, as the
 * kernel does after widening), bit for bit: the same products, added in
 * the same order, fed to the same optimizer.
 */
PATH_TEST(weighted, update_is_the_update_of_scaled_inputs)
{
	enum { LEN = 1037 };
	static const struct kn_update_params params[] = {
		{ .optimizer = KN_OPT_SGD, .lr = 0.1f, .grad_scale = 1.0f },
		{ .optimizer = KN_OPT_MOMENTUM,
		  .lr = 0.05f,
		  .grad_scale = 0.5f,
		  .momentum = 0.9f,
		  .weight_decay = 1e-3f },
		{ .optimizer = KN_OPT_ADAM,
		  .lr = 1e-3f,
		  .grad_scale = 1.0f,
		  .beta1 = 0.9f,
		  .beta2 = 0.999f,
		  .eps = 1e-8f,
		  .step = 3 },
	};
	static const unsigned int ns[] = { 1, 4, 13, 24 };
	struct sum_bufs *b = bufs_new();
	static float scaled[MAXN][LEN], w1[LEN], w2[LEN], m1[LEN], m2[LEN],
		v1[LEN], v2[LEN];

	for (size_t o = 0; o < sizeof(params) / sizeof(params[0]); o++)
		for (int t = KN_DTYPE_FP32; t <= KN_DTYPE_BF16; t++)
			for (size_t q = 0; q < sizeof(ns) / sizeof(ns[0]);
			     q++) {
				const enum kn_dtype dt = (enum kn_dtype)t;
				const void *src[MAXN], *ssrc[MAXN];
				struct kn__update_coef c;
				unsigned int n = ns[q];
				uint64_t seed = 7;

				cr_assert_eq(
					kn__update_coef_init(&params[o], &c),
					0);
				for (unsigned int k = 0; k < n; k++) {
					src[k] = b->in[k];
					for (size_t i = 0; i < LEN; i++)
						scaled[k][i] =
							ref_load(dt, src[k],
								 i) *
							b->w[k];
					ssrc[k] = scaled[k];
				}
				for (size_t i = 0; i < LEN; i++) {
					w1[i] = w2[i] = rnd_float(&seed);
					m1[i] = m2[i] = rnd_float(&seed);
					v1[i] = v2[i] = fabsf(rnd_float(&seed));
				}
				plain(ops, params[o].optimizer)(
					&c, w1, m1, v1, ssrc[0], ssrc + 1,
					n - 1, 0, LEN);
				weighted(ops, params[o].optimizer,
					 dt)(&c, w2, m2, v2, src[0], src + 1,
					     b->w, n - 1, 0, LEN);
				cr_assert_eq(memcmp(w1, w2, sizeof(w1)), 0,
					     "%s optimizer %d %s n=%u: w",
					     kn_kernel_path_name(ops->path),
					     params[o].optimizer,
					     kn_dtype_name(dt), n);
				cr_assert_eq(memcmp(m1, m2, sizeof(m1)), 0,
					     "m");
				cr_assert_eq(memcmp(v1, v2, sizeof(v1)), 0,
					     "v");
			}
	sum_bufs_free(b);
}

/* The public calls give the active path's results and check arguments. */
Test(weighted, public_entry_points)
{
	enum { LEN = 3001 };
	static float a[LEN], bb[LEN], out[LEN], want[LEN], w[LEN], wref[LEN];
	const void *src[2] = { a, bb };
	const float weight[2] = { 0.25f, -3.0f };
	struct kn_update_params sgd = { .optimizer = KN_OPT_SGD,
					.lr = 0.5f,
					.grad_scale = 1.0f };
	uint64_t seed = 3;

	fill_random(KN_DTYPE_FP32, a, LEN, &seed);
	fill_random(KN_DTYPE_FP32, bb, LEN, &seed);
	cr_assert_eq(kn_sum_weighted(out, KN_DTYPE_FP32, src, weight, 2,
				     KN_DTYPE_FP32, LEN),
		     0);
	ref_wsum(KN_DTYPE_FP32, KN_DTYPE_FP32, want, src, weight, 2, LEN);
	cr_assert_eq(memcmp(out, want, sizeof(out)), 0);
	for (size_t i = 0; i < LEN; i++)
		w[i] = wref[i] = 1.0f;
	cr_assert_eq(kn_update_weighted(&sgd, w, NULL, NULL, src, weight, 2,
					KN_DTYPE_FP32, LEN),
		     0);
	for (size_t i = 0; i < LEN; i++)
		wref[i] = wref[i] - 0.5f * want[i];
	cr_assert_eq(memcmp(w, wref, sizeof(w)), 0);

	cr_expect_eq(kn_sum_weighted(out, KN_DTYPE_FP32, src, NULL, 2,
				     KN_DTYPE_FP32, LEN),
		     -EINVAL);
	cr_expect_eq(kn_sum_weighted(out, KN_DTYPE_FP32, src, weight, 0,
				     KN_DTYPE_FP32, LEN),
		     -EINVAL);
	cr_expect_eq(kn_sum_weighted(out, KN_DTYPE_FP16, src, weight, 2,
				     KN_DTYPE_BF16, LEN),
		     -EINVAL);
	cr_expect_eq(kn_update_weighted(&sgd, w, NULL, NULL, src, NULL, 2,
					KN_DTYPE_FP32, LEN),
		     -EINVAL);
	cr_expect_eq(kn_update_weighted(NULL, w, NULL, NULL, src, weight, 2,
					KN_DTYPE_FP32, LEN),
		     -EINVAL);
	/* nothing to do is no error, with or without buffers */
	cr_expect_eq(kn_sum_weighted(NULL, KN_DTYPE_FP32, NULL, weight, 2,
				     KN_DTYPE_FP32, 0),
		     0);
}
