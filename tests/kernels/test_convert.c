/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_convert.c - fp16 <-> fp32 and bf16 <-> fp32 on every kernel path:
 * all 65,536 half and bfloat16 values widened, every fp32 tie between two
 * neighbours and a million sampled fp32 bit patterns narrowed, all bit
 * for bit against the reference in kernel_test.h; NaN never becomes Inf.
 */
#include "kernel_test.h"

#define NSAMPLES 1000000

/* Every 16-bit pattern, widened, matches the reference bit for bit. */
static void widen_all(const struct kn__kernel_ops *ops, enum kn_dtype t,
		      float (*ref)(uint16_t))
{
	uint16_t *h = malloc(65536 * sizeof(*h));
	float *f = malloc(65536 * sizeof(*f));

	cr_assert(h && f);
	for (uint32_t i = 0; i < 65536; i++)
		h[i] = (uint16_t)i;
	ops->to_f32[t](f, h, 65536);
	for (uint32_t i = 0; i < 65536; i++)
		cr_assert_eq(bits_of(f[i]), bits_of(ref((uint16_t)i)),
			     "%s 0x%04x widened to 0x%08x, expected 0x%08x",
			     kn_dtype_name(t), i, bits_of(f[i]),
			     bits_of(ref((uint16_t)i)));
	free(h);
	free(f);
}

PATH_TEST(convert, f16_to_f32_all_values)
{
	widen_all(ops, KN_DTYPE_FP16, ref_f16_to_f32);
}

PATH_TEST(convert, bf16_to_f32_all_values)
{
	widen_all(ops, KN_DTYPE_BF16, ref_bf16_to_f32);
}

static void check_narrow(const struct kn__kernel_ops *ops, enum kn_dtype t,
			 uint16_t (*ref)(float), const float *f, size_t n)
{
	uint16_t *h = malloc(n * sizeof(*h));

	cr_assert(h);
	ops->from_f32[t](h, f, n);
	for (size_t i = 0; i < n; i++) {
		cr_assert_eq(h[i], ref(f[i]),
			     "%s: fp32 0x%08x (%a) narrowed to 0x%04x, "
			     "expected 0x%04x",
			     kn_dtype_name(t), bits_of(f[i]), (double)f[i],
			     h[i], ref(f[i]));
		if (isnan(f[i]))
			cr_assert(isnan(ref_load(t, h, i)),
				  "NaN 0x%08x became 0x%04x", bits_of(f[i]),
				  h[i]);
	}
	free(h);
}

/*
 * Every value of the narrow type, and every midpoint between neighbours
 * (exactly representable in fp32), round-trips or rounds to even.
 */
static void narrow_all(const struct kn__kernel_ops *ops, enum kn_dtype t,
		       uint16_t (*ref)(float))
{
	float *f = malloc(2 * 65536 * sizeof(*f));
	size_t n = 0;

	cr_assert(f);
	for (uint32_t i = 0; i < 65536; i++) {
		float a = ref_load(t, &(uint16_t){ (uint16_t)i }, 0);
		float b = ref_load(t, &(uint16_t){ (uint16_t)(i + 1) }, 0);

		f[n++] = a;
		if (isfinite(a) && isfinite(b) && (i & 0x7fff) != 0x7fff)
			f[n++] = (float)(((double)a + (double)b) / 2);
	}
	check_narrow(ops, t, ref, f, n);
	free(f);
}

PATH_TEST(convert, f32_to_f16_values_and_ties)
{
	narrow_all(ops, KN_DTYPE_FP16, ref_f32_to_f16);
}

PATH_TEST(convert, f32_to_bf16_values_and_ties)
{
	narrow_all(ops, KN_DTYPE_BF16, ref_f32_to_bf16);
}

/*
 * A million fp32 values: half uniform bit patterns (every class: NaN with
 * any payload, Inf, subnormals), half with exponents around the fp16 range
 * so that rounding, overflow to Inf and fp16 subnormals are all hit.
 */
static float *sample_floats(uint64_t seed)
{
	float *f = malloc(NSAMPLES * sizeof(*f));

	cr_assert(f);
	for (size_t i = 0; i < NSAMPLES; i++) {
		uint64_t r = rnd_next(&seed);

		if (i % 2)
			f[i] = float_of((uint32_t)r);
		else
			f[i] = ldexpf((float)(r >> 40) * 0x1p-24f,
				      (int)((r >> 8) % 48) - 30) *
			       ((r & 1) ? -1.0f : 1.0f);
	}
	return f;
}

PATH_TEST(convert, f32_to_f16_million_samples)
{
	float *f = sample_floats(1);

	check_narrow(ops, KN_DTYPE_FP16, ref_f32_to_f16, f, NSAMPLES);
	free(f);
}

PATH_TEST(convert, f32_to_bf16_million_samples)
{
	float *f = sample_floats(2);

	check_narrow(ops, KN_DTYPE_BF16, ref_f32_to_bf16, f, NSAMPLES);
	free(f);
}

/* Every length up to a few vectors, at an odd element offset. */
PATH_TEST(convert, every_tail_unaligned)
{
	float src[131], back[132];
	uint16_t mid[132];
	uint64_t seed = 3;

	for (size_t i = 0; i < 131; i++)
		src[i] = rnd_float(&seed);
	for (int t = KN_DTYPE_FP16; t <= KN_DTYPE_BF16; t++) {
		enum kn_dtype dt = (enum kn_dtype)t;

		for (size_t len = 0; len <= 130; len++) {
			mid[len + 1] = 0xabcd;
			back[len + 1] = -7.0f;
			ops->from_f32[dt](mid + 1, src + 1, len);
			ops->to_f32[dt](back + 1, mid + 1, len);
			cr_assert_eq(mid[len + 1], 0xabcd,
				     "%s: wrote past the end at len %zu",
				     kn_dtype_name(dt), len);
			cr_assert_eq(back[len + 1], -7.0f);
			for (size_t i = 1; i <= len; i++) {
				uint16_t want =
					dt == KN_DTYPE_FP16
						? ref_f32_to_f16(src[i])
						: ref_f32_to_bf16(src[i]);

				cr_assert_eq(mid[i], want, "len %zu elem %zu",
					     len, i);
				cr_assert_eq(bits_of(back[i]),
					     bits_of(ref_load(dt, mid, i)));
			}
		}
	}
}

/* The public entry point: every pair of dtypes, including fp16 <-> bf16. */
Test(convert, public_any_pair)
{
	enum { N = 3000 };
	static float src[N], f32[N], back[N];
	static uint16_t a[N], b[N];
	uint64_t seed = 4;

	for (size_t i = 0; i < N; i++)
		src[i] = rnd_float(&seed);
	cr_assert_eq(kn_convert(a, KN_DTYPE_FP16, src, KN_DTYPE_FP32, N), 0);
	cr_assert_eq(kn_convert(b, KN_DTYPE_BF16, a, KN_DTYPE_FP16, N), 0);
	cr_assert_eq(kn_convert(f32, KN_DTYPE_FP32, b, KN_DTYPE_BF16, N), 0);
	for (size_t i = 0; i < N; i++) {
		uint16_t want = ref_f32_to_bf16(ref_f16_to_f32(a[i]));

		cr_assert_eq(b[i], want, "element %zu", i);
		cr_assert_eq(bits_of(f32[i]), bits_of(ref_bf16_to_f32(want)));
	}
	cr_assert_eq(kn_convert(back, KN_DTYPE_FP32, f32, KN_DTYPE_FP32, N), 0);
	cr_assert_eq(memcmp(back, f32, sizeof(back)), 0);
}

Test(convert, invalid_arguments)
{
	float f[4] = { 0 };

	cr_assert_eq(kn_convert(NULL, KN_DTYPE_FP16, f, KN_DTYPE_FP32, 4),
		     -EINVAL);
	cr_assert_eq(kn_convert(f, KN_DTYPE_FP32, NULL, KN_DTYPE_FP16, 4),
		     -EINVAL);
	cr_assert_eq(kn_convert(f, (enum kn_dtype)3, f, KN_DTYPE_FP32, 4),
		     -EINVAL);
	cr_assert_eq(kn_convert(f, KN_DTYPE_FP32, f, (enum kn_dtype) - 1, 4),
		     -EINVAL);
	/* nothing to do is not an error, even with no buffers */
	cr_assert_eq(kn_convert(NULL, KN_DTYPE_FP16, NULL, KN_DTYPE_FP32, 0),
		     0);
}
