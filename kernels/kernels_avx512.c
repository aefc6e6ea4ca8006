/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kernels_avx512.c - the AVX-512 path: body.inl over __m512.  Compiled
 * with -mavx512f -mavx512bw -mavx512vl -mfma -mf16c and used only where
 * the CPU and OS support all of them (kernels.c checks).
 */
#include <immintrin.h>
#include <stdint.h>

#include "kernels.h"
#include "scalar.h"

#define KN_V	    __m512
#define KN_VW	    16
#define KN_PATH	    KN_KERNEL_AVX512
#define KN_OPS_NAME kn__kernel_ops_avx512

/* The vocabulary reads best one operation a line. */
/* clang-format off */
static inline __m512 v_set1(float a) { return _mm512_set1_ps(a); }
static inline __m512 v_add(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
static inline __m512 v_mul(__m512 a, __m512 b) { return _mm512_mul_ps(a, b); }
static inline __m512 v_div(__m512 a, __m512 b) { return _mm512_div_ps(a, b); }
static inline __m512 v_sqrt(__m512 a) { return _mm512_sqrt_ps(a); }
static inline __m512 v_fmadd(__m512 a, __m512 b, __m512 c) { return _mm512_fmadd_ps(a, b, c); }
static inline __m512 v_fnmadd(__m512 a, __m512 b, __m512 c) { return _mm512_fnmadd_ps(a, b, c); }
/* clang-format on */

static inline __m512 v_ld_f32(const float *p)
{
	return _mm512_loadu_ps(p);
}

static inline __m512 v_ld_f16(const uint16_t *p)
{
	return _mm512_cvtph_ps(
		_mm256_loadu_si256((const __m256i *)(const void *)p));
}

static inline __m512 v_ld_bf16(const uint16_t *p)
{
	__m512i x = _mm512_cvtepu16_epi32(
		_mm256_loadu_si256((const __m256i *)(const void *)p));

	return _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
}

static inline __m256i to_f16(__m512 v)
{
	return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
}

/* Round to nearest even at bit 16; NaN truncated and made quiet. */
static inline __m256i to_bf16(__m512 v)
{
	__m512i x = _mm512_castps_si512(v);
	__m512i hi = _mm512_srli_epi32(x, 16);
	__m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
	__m512i r = _mm512_srli_epi32(
		_mm512_add_epi32(
			x, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))),
		16);
	__mmask16 isnan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);

	r = _mm512_mask_or_epi32(r, isnan, hi, _mm512_set1_epi32(0x40));
	return _mm512_cvtepi32_epi16(r);
}

static inline void v_st_f32(float *p, __m512 v)
{
	_mm512_storeu_ps(p, v);
}

static inline void v_st_f16(uint16_t *p, __m512 v)
{
	_mm256_storeu_si256((__m256i *)(void *)p, to_f16(v));
}

static inline void v_st_bf16(uint16_t *p, __m512 v)
{
	_mm256_storeu_si256((__m256i *)(void *)p, to_bf16(v));
}

static inline void v_nt_f32(float *p, __m512 v)
{
	_mm512_stream_ps(p, v);
}

static inline void v_nt_f16(uint16_t *p, __m512 v)
{
	_mm256_stream_si256((__m256i *)(void *)p, to_f16(v));
}

static inline void v_nt_bf16(uint16_t *p, __m512 v)
{
	_mm256_stream_si256((__m256i *)(void *)p, to_bf16(v));
}

static inline void v_fence(void)
{
	_mm_sfence();
}

#include "body.inl"
