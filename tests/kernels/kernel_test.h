/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kernel_test.h - what the kernel suites share: one Test per kernel path
 * (skipped, with the reason, where the CPU cannot run it), a seeded
 * random source, and reference conversions written independently of
 * kernels/scalar.h, in double arithmetic, so that a bug in the library's
 * bit tricks cannot hide behind the same bug in the reference.
 */
#ifndef KN_TEST_KERNEL_TEST_H
#define KN_TEST_KERNEL_TEST_H

#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

/*
 * PATH_TEST(suite, name) { ... ops ... } defines the body once and one
 * Criterion test per kernel path; inside, @ops is that path's table.
 */
#define PATH_TEST(suite, name)                                     \
	static void name##_body(const struct kn__kernel_ops *ops); \
	Test(suite, name##_scalar)                                 \
	{                                                          \
		run_on_path(KN_KERNEL_SCALAR, name##_body);        \
	}                                                          \
	Test(suite, name##_avx2)                                   \
	{                                                          \
		run_on_path(KN_KERNEL_AVX2, name##_body);          \
	}                                                          \
	Test(suite, name##_avx512)                                 \
	{                                                          \
		run_on_path(KN_KERNEL_AVX512, name##_body);        \
	}                                                          \
	static void name##_body(const struct kn__kernel_ops *ops)

static inline void run_on_path(enum kn_kernel_path path,
			       void (*body)(const struct kn__kernel_ops *))
{
	const struct kn__kernel_ops *ops = kn__kernel_ops_get(path);

	if (!ops)
		cr_skip_test("the %s path is not compiled in or this CPU "
			     "cannot run it",
			     kn_kernel_path_name(path));
	cr_assert_eq(ops->path, path);
	body(ops);
}

/* splitmix64: small, seedable, good enough to pick test values */
static inline uint64_t rnd_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in [-1, 1) times 2^e with e in [-8, 8]: sums lose bits. */
static inline float rnd_float(uint64_t *s)
{
	uint64_t r = rnd_next(s);
	float u = (float)(r >> 40) * 0x1p-23f - 1.0f;

	return ldexpf(u, (int)(r % 17) - 8);
}

/* 64-byte aligned; C11 wants the size a multiple of the alignment. */
static inline char *alloc64(size_t bytes)
{
	char *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);

	cr_assert(p);
	return p;
}

static inline uint32_t bits_of(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return u;
}

static inline float float_of(uint32_t u)
{
	float f;

	memcpy(&f, &u, 4);
	return f;
}

/*
 * Reference narrowing of a finite or infinite fp32 to a format with
 * @mbits stored mantissa bits, exponent bias @bias and maximum biased
 * exponent @emax_field (all ones means Inf/NaN): round-to-nearest-even
 * done by nearbyint() on an exactly scaled double.
 */
static inline uint16_t ref_narrow(float f, int mbits, int bias, int ebits)
{
	uint16_t sign = signbit(f) ? (uint16_t)(1u << (mbits + ebits)) : 0;
	double a = fabs((double)f);
	int emin = 1 - bias, emaxf = (1 << ebits) - 1;
	uint16_t inf = (uint16_t)(emaxf << mbits);
	int e;

	if (isinf(a))
		return sign | inf;
	if (a < ldexp(1.0, emin)) /* subnormal quantum 2^(emin - mbits) */
		return sign | (uint16_t)nearbyint(ldexp(a, mbits - emin));
	frexp(a, &e);
	e -= 1; /* a = s * 2^e, s in [1, 2) */
	double q = nearbyint(ldexp(a, mbits - e));
	if (q == ldexp(1.0, mbits + 1)) {
		q /= 2;
		e += 1;
	}
	if (e + bias >= emaxf)
		return sign | inf;
	return sign | (uint16_t)((e + bias) << mbits) |
	       (uint16_t)(q - ldexp(1.0, mbits));
}

static inline uint16_t ref_f32_to_f16(float f)
{
	if (isnan(f)) /* quiet, top ten payload bits, sign kept */
		return (uint16_t)(((bits_of(f) >> 16) & 0x8000u) | 0x7e00u |
				  ((bits_of(f) >> 13) & 0x3ffu));
	return ref_narrow(f, 10, 15, 5);
}

static inline uint16_t ref_f32_to_bf16(float f)
{
	if (isnan(f))
		return (uint16_t)((bits_of(f) >> 16) | 0x40u);
	return ref_narrow(f, 7, 127, 8);
}

static inline float ref_f16_to_f32(uint16_t h)
{
	int e = (h >> 10) & 0x1f, m = h & 0x3ff;
	float s = (h & 0x8000) ? -1.0f : 1.0f;

	if (e == 31 && m) /* NaN, made quiet */
		return float_of((h & 0x8000u) << 16 | 0x7fc00000u |
				(uint32_t)m << 13);
	if (e == 31)
		return s * INFINITY;
	if (e == 0)
		return s * ldexpf((float)m, -24);
	return s * ldexpf((float)(m + 1024), e - 25);
}

static inline float ref_bf16_to_f32(uint16_t b)
{
	return float_of((uint32_t)b << 16);
}

static inline float ref_load(enum kn_dtype t, const void *p, size_t i)
{
	uint16_t h;

	if (t == KN_DTYPE_FP32) {
		float f;

		memcpy(&f, (const char *)p + 4 * i, 4);
		return f;
	}
	memcpy(&h, (const char *)p + 2 * i, 2);
	return t == KN_DTYPE_FP16 ? ref_f16_to_f32(h) : ref_bf16_to_f32(h);
}

static inline void ref_store(enum kn_dtype t, void *p, size_t i, float f)
{
	uint16_t h;

	if (t == KN_DTYPE_FP32) {
		memcpy((char *)p + 4 * i, &f, 4);
		return;
	}
	h = t == KN_DTYPE_FP16 ? ref_f32_to_f16(f) : ref_f32_to_bf16(f);
	memcpy((char *)p + 2 * i, &h, 2);
}

/* @count random values of @t at @p (any alignment). */
static inline void fill_random(enum kn_dtype t, void *p, size_t count,
			       uint64_t *seed)
{
	for (size_t i = 0; i < count; i++)
		ref_store(t, p, i, rnd_float(seed));
}

/* @n inputs of @len random fp32 values, @len apart from @in on, and
 * @src pointing at each. */
static inline void fill_inputs(float *in, const void **src, unsigned int n,
			       size_t len, uint64_t *seed)
{
	for (unsigned int k = 0; k < n; k++) {
		fill_random(KN_DTYPE_FP32, in + k * len, len, seed);
		src[k] = in + k * len;
	}
}

#define SUM_MAXN 64

/*
 * The buffers of the sum tests: inputs with room for a byte offset of
 * up to 64, an output and its expected twin with room for the canaries
 * after them, and the weighted sum's weights (which the test fills).
 */
struct sum_bufs {
	char *in[SUM_MAXN];
	char *out, *want;
	float w[SUM_MAXN];
};

/*
 * @n inputs with room for @len fp32 elements, outputs for @guard more,
 * from @seed.  The inputs hold finite fp16 values of magnitude <= 256:
 * every aligned view of them, fp32 and bf16 included, is finite too, so
 * the sums compare real numbers bit for bit (views at odd byte offsets
 * may hold NaNs, compared only as NaN).
 */
static inline struct sum_bufs *sum_bufs_new(unsigned int n, size_t len,
					    size_t guard, uint64_t seed)
{
	struct sum_bufs *b = calloc(1, sizeof(*b));

	cr_assert(b);
	cr_assert_leq(n, SUM_MAXN);
	for (unsigned int k = 0; k < n; k++) {
		b->in[k] = alloc64(4 * (len + 64));
		fill_random(KN_DTYPE_FP16, b->in[k], 2 * (len + 64), &seed);
	}
	b->out = alloc64(4 * (len + 64 + guard));
	b->want = alloc64(4 * (len + 64 + guard));
	return b;
}

static inline void sum_bufs_free(struct sum_bufs *b)
{
	for (unsigned int k = 0; k < SUM_MAXN; k++)
		free(b->in[k]);
	free(b->out);
	free(b->want);
	free(b);
}

/* One case of a sum test: @n inputs of @count elements, input k at byte
 * offset (k * in_off) % 64 and the output at @out_off. */
struct sum_case {
	enum kn_kernel_path path;
	enum kn_dtype it, ot;
	unsigned int n;
	size_t count, in_off, out_off;
	bool nt;
};

/*
 * @c's inputs from @in into @src, and its output and expected output,
 * @out and @want, filled with the same canary for @count + @guard
 * elements, so that what a kernel writes past the end shows.
 */
static inline void sum_case_setup(const struct sum_case *c, char *const *in,
				  const void **src, char *out, char *want,
				  size_t guard)
{
	size_t bytes = kn_dtype_size(c->ot) * (c->count + guard);

	for (unsigned int k = 0; k < c->n; k++)
		src[k] = in[k] + (k * c->in_off) % 64;
	memset(out, 0x5a, bytes);
	memset(want, 0x5a, bytes);
}

/* @c's @out against @want bit for bit, the @guard canaries past the end
 * included. */
static inline void sum_case_check(const struct sum_case *c, const char *out,
				  const char *want, size_t guard)
{
	size_t osz = kn_dtype_size(c->ot);

	for (size_t i = 0; i < c->count + guard; i++) {
		/* which NaN an add returns is the compiler's choice */
		if (i < c->count && isnan(ref_load(c->ot, out, i)) &&
		    isnan(ref_load(c->ot, want, i)))
			continue;
		if (memcmp(out + i * osz, want + i * osz, osz))
			cr_assert_fail("%s %s->%s n=%u count=%zu in_off=%zu "
				       "out_off=%zu nt=%d: element %zu: %a, "
				       "want %a%s",
				       kn_kernel_path_name(c->path),
				       kn_dtype_name(c->it),
				       kn_dtype_name(c->ot), c->n, c->count,
				       c->in_off, c->out_off, c->nt, i,
				       (double)ref_load(c->ot, out, i),
				       (double)ref_load(c->ot, want, i),
				       i >= c->count ? " past the end" : "");
	}
}

/* Two identical random optimizer states: weights, momenta, v >= 0. */
static inline void twin_state(float *w1, float *w2, float *m1, float *m2,
			      float *v1, float *v2, size_t len, uint64_t *seed)
{
	for (size_t i = 0; i < len; i++) {
		w1[i] = w2[i] = rnd_float(seed);
		m1[i] = m2[i] = rnd_float(seed);
		v1[i] = v2[i] = fabsf(rnd_float(seed));
	}
}

#endif /* KN_TEST_KERNEL_TEST_H */
