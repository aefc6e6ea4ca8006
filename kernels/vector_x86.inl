/* SPDX-License-Identifier: Apache-2.0 */
/*
 * vector_x86.inl - the part of body.inl's vector vocabulary that is the
 * same intrinsic at every x86 width, written once for kernels_avx2.c and
 * kernels_avx512.c.  Each includes it, compiled with its own ISA flags,
 * after defining:
 *   KN_V, KN_MM(op)       its float vector and its intrinsics' names
 *                         (KN_MM(add_ps) is _mm256_add_ps for AVX2)
 *   KN_HALF               the integer vector of half its width, which
 *                         holds it as fp16 or bf16
 *   KN_HALF_LOADU, KN_HALF_STOREU, KN_HALF_STREAM  its loads and stores
 * and then defines v_ld_bf16 and to_bf16 itself, where the widths differ
 * in more than a name.  The macros expand to the very intrinsics each
 * file called before, so the loops compile as they did.
 */
#ifndef KN_MM
#error "include vector_x86.inl from a kernel path file that defines KN_MM"
#endif

/* The vocabulary reads best one operation a line. */
/* clang-format off */
static inline KN_V v_set1(float a) { return KN_MM(set1_ps)(a); }
static inline KN_V v_add(KN_V a, KN_V b) { return KN_MM(add_ps)(a, b); }
static inline KN_V v_mul(KN_V a, KN_V b) { return KN_MM(mul_ps)(a, b); }
static inline KN_V v_div(KN_V a, KN_V b) { return KN_MM(div_ps)(a, b); }
static inline KN_V v_sqrt(KN_V a) { return KN_MM(sqrt_ps)(a); }
static inline KN_V v_fmadd(KN_V a, KN_V b, KN_V c) { return KN_MM(fmadd_ps)(a, b, c); }
static inline KN_V v_fnmadd(KN_V a, KN_V b, KN_V c) { return KN_MM(fnmadd_ps)(a, b, c); }
/* clang-format on */

static inline KN_V v_ld_f32(const float *p)
{
	return KN_MM(loadu_ps)(p);
}

static inline KN_V v_ld_f16(const uint16_t *p)
{
	return KN_MM(cvtph_ps)(KN_HALF_LOADU((const KN_HALF *)(const void *)p));
}

static inline KN_HALF to_f16(KN_V v)
{
	return KN_MM(cvtps_ph)(v, _MM_FROUND_TO_NEAREST_INT);
}

static inline KN_HALF to_bf16(KN_V v);

static inline void v_st_f32(float *p, KN_V v)
{
	KN_MM(storeu_ps)(p, v);
}

static inline void v_st_f16(uint16_t *p, KN_V v)
{
	KN_HALF_STOREU((KN_HALF *)(void *)p, to_f16(v));
}

static inline void v_st_bf16(uint16_t *p, KN_V v)
{
	KN_HALF_STOREU((KN_HALF *)(void *)p, to_bf16(v));
}

static inline void v_nt_f32(float *p, KN_V v)
{
	KN_MM(stream_ps)(p, v);
}

static inline void v_nt_f16(uint16_t *p, KN_V v)
{
	KN_HALF_STREAM((KN_HALF *)(void *)p, to_f16(v));
}

static inline void v_nt_bf16(uint16_t *p, KN_V v)
{
	KN_HALF_STREAM((KN_HALF *)(void *)p, to_bf16(v));
}

static inline void v_fence(void)
{
	_mm_sfence();
}
