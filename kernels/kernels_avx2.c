/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kernels_avx2.c - the AVX2 + FMA + F16C path: body.inl over __m256.
 * Compiled with -mavx2 -mfma -mf16c and used only where the CPU has all
 * three (kernels.c checks).  fp16 converts with vcvtph2ps/vcvtps2ph,
 * bf16 with integer shifts and an explicit round-to-nearest-even.
 */
#include <immintrin.h>
#include <stdint.h>

#include "kernels.h"
#include "scalar.h"

#define KN_V	    __m256
#define KN_VW	    8
#define KN_PATH	    KN_KERNEL_AVX2
#define KN_OPS_NAME kn__kernel_ops_avx2

/* The vocabulary reads best one operation a line. */
/* clang-format off */
static inline __m256 v_set1(float a) { return _mm256_set1_ps(a); }
static inline __m256 v_add(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }
static inline __m256 v_mul(__m256 a, __m256 b) { return _mm256_mul_ps(a, b); }
static inline __m256 v_div(__m256 a, __m256 b) { return _mm256_div_ps(a, b); }
static inline __m256 v_sqrt(__m256 a) { return _mm256_sqrt_ps(a); }
static inline __m256 v_fmadd(__m256 a, __m256 b, __m256 c) { return _mm256_fmadd_ps(a, b, c); }
static inline __m256 v_fnmadd(__m256 a, __m256 b, __m256 c) { return _mm256_fnmadd_ps(a, b, c); }
/* clang-format on */

static inline __m256 v_ld_f32(const float *p)
{
	return _mm256_loadu_ps(p);
}

static inline __m256 v_ld_f16(const uint16_t *p)
{
	return _mm256_cvtph_ps(
		_mm_loadu_si128((const __m128i *)(const void *)p));
}

/*
 * bf16 is the top half of an fp32: one byte shuffle of the broadcast
 * load puts each element in the high half of its lane and zeroes the low
 * half (a load-only broadcast and one shuffle, where zero-extend and
 * shift cost two ALU operations; the sums of bf16 inputs are bound by
 * these operations, not by memory).
 */
static inline __m256 v_ld_bf16(const uint16_t *p)
{
	const __m256i spread = _mm256_setr_epi8(
		-1, -1, 0, 1, -1, -1, 2, 3, -1, -1, 4, 5, -1, -1, 6, 7, -1, -1,
		8, 9, -1, -1, 10, 11, -1, -1, 12, 13, -1, -1, 14, 15);
	__m256i x = _mm256_broadcastsi128_si256(
		_mm_loadu_si128((const __m128i *)(const void *)p));

	return _mm256_castsi256_ps(_mm256_shuffle_epi8(x, spread));
}

static inline __m128i to_f16(__m256 v)
{
	return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
}

/* Round to nearest even at bit 16; NaN truncated and made quiet. */
static inline __m128i to_bf16(__m256 v)
{
	__m256i x = _mm256_castps_si256(v);
	__m256i hi = _mm256_srli_epi32(x, 16);
	__m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
	__m256i r = _mm256_srli_epi32(
		_mm256_add_epi32(
			x, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))),
		16);
	__m256i qnan = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
	__m256i isnan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));

	r = _mm256_blendv_epi8(r, qnan, isnan);
	/* every lane is <= 0xffff, so the saturating pack is exact */
	return _mm_packus_epi32(_mm256_castsi256_si128(r),
				_mm256_extracti128_si256(r, 1));
}

static inline void v_st_f32(float *p, __m256 v)
{
	_mm256_storeu_ps(p, v);
}

static inline void v_st_f16(uint16_t *p, __m256 v)
{
	_mm_storeu_si128((__m128i *)(void *)p, to_f16(v));
}

static inline void v_st_bf16(uint16_t *p, __m256 v)
{
	_mm_storeu_si128((__m128i *)(void *)p, to_bf16(v));
}

static inline void v_nt_f32(float *p, __m256 v)
{
	_mm256_stream_ps(p, v);
}

static inline void v_nt_f16(uint16_t *p, __m256 v)
{
	_mm_stream_si128((__m128i *)(void *)p, to_f16(v));
}

static inline void v_nt_bf16(uint16_t *p, __m256 v)
{
	_mm_stream_si128((__m128i *)(void *)p, to_bf16(v));
}

static inline void v_fence(void)
{
	_mm_sfence();
}

#include "body.inl"
