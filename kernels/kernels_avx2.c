/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kernels_avx2.c - the AVX2 + FMA + F16C path: body.inl over __m256,
 * with the vocabulary both x86 widths share (vector_x86.inl) and its
 * own bf16 load and rounding.
 * Compiled with -mavx2 -mfma -mf16c and used only where the CPU has all
 * three (kernels.c checks).  fp16 converts with vcvtph2ps/vcvtps2ph,
 * bf16 with integer shifts and an explicit round-to-nearest-even.
 */
#include <immintrin.h>
#include <stdint.h>

#include "kernels.h"
#include "scalar.h"

#define KN_V	       __m256
#define KN_VW	       8
#define KN_PATH	       KN_KERNEL_AVX2
#define KN_OPS_NAME    kn__kernel_ops_avx2
#define KN_MM(op)      _mm256_##op
#define KN_HALF	       __m128i
#define KN_HALF_LOADU  _mm_loadu_si128
#define KN_HALF_STOREU _mm_storeu_si128
#define KN_HALF_STREAM _mm_stream_si128

#include "vector_x86.inl"

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

#include "body.inl"
