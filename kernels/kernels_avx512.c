/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kernels_avx512.c - the AVX-512 path: body.inl over __m512, with the
 * vocabulary both x86 widths share (vector_x86.inl) and its own bf16
 * load and rounding.  Compiled with -mavx512f -mavx512bw -mavx512vl
 * -mfma -mf16c and used only where the CPU and OS support all of them
 * (kernels.c checks).
 */
#include <immintrin.h>
#include <stdint.h>

#include "kernels.h"
#include "scalar.h"

#define KN_V	       __m512
#define KN_VW	       16
#define KN_PATH	       KN_KERNEL_AVX512
#define KN_OPS_NAME    kn__kernel_ops_avx512
#define KN_MM(op)      _mm512_##op
#define KN_HALF	       __m256i
#define KN_HALF_LOADU  _mm256_loadu_si256
#define KN_HALF_STOREU _mm256_storeu_si256
#define KN_HALF_STREAM _mm256_stream_si256

#include "vector_x86.inl"

static inline __m512 v_ld_bf16(const uint16_t *p)
{
	__m512i x = _mm512_cvtepu16_epi32(
		_mm256_loadu_si256((const __m256i *)(const void *)p));

	return _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
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

#include "body.inl"
