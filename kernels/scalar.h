/* SPDX-License-Identifier: Apache-2.0 */
/*
 * scalar.h - element-wise loads, stores and dtype conversions in plain C.
 *
 * Every kernel path uses these for the elements that do not fill a vector
 * (the tails), and the scalar path uses them throughout, so they must give
 * bit for bit what the F16C and AVX-512 conversion instructions give:
 * round-to-nearest-even, NaN quieted with its sign and top payload bits
 * kept, never a NaN turned into Inf.  Loads and stores go through memcpy
 * so that pointers need only be aligned to their element size (or not at
 * all); the compiler turns them into plain moves.
 */
#ifndef KN_KERNELS_SCALAR_H
#define KN_KERNELS_SCALAR_H

#include <stdint.h>
#include <string.h>

#include "kanel.h"

static inline uint32_t kn__f32_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

static inline float kn__f32_from_bits(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

static inline float kn__f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t exp = (h >> 10) & 0x1fu;
	uint32_t man = h & 0x3ffu;

	if (exp == 0x1f) /* Inf, or NaN made quiet as vcvtph2ps does */
		return kn__f32_from_bits(sign | 0x7f800000u | man << 13 |
					 (man ? 0x00400000u : 0));
	if (exp != 0) /* normal: rebias the exponent from 15 to 127 */
		return kn__f32_from_bits(sign | (exp + 112) << 23 | man << 13);
	/* zero or subnormal: man * 2^-24 is exact in fp32 */
	return kn__f32_from_bits(sign | kn__f32_bits((float)man * 0x1p-24f));
}

static inline uint16_t kn__f32_to_f16(float f)
{
	uint32_t x = kn__f32_bits(f);
	uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
	uint32_t ax = x & 0x7fffffffu;

	if (ax > 0x7f800000u) /* NaN: quiet, keep the top 10 payload bits */
		return sign | 0x7e00u | ((ax >> 13) & 0x3ffu);
	if (ax >= 0x477ff000u) /* 65520 and up round to Inf */
		return sign | 0x7c00u;
	if (ax >= 0x38800000u) { /* normal in fp16: round at bit 13 */
		uint32_t r = ax + 0xfffu + ((ax >> 13) & 1u);

		return sign | (uint16_t)((r - 0x38000000u) >> 13);
	}
	/*
	 * Below 2^-14 the result is subnormal (or zero) with quantum 2^-24,
	 * which is the ulp of 0.5f: the fp32 addition does the
	 * round-to-nearest-even for us.
	 */
	return sign | (uint16_t)(kn__f32_bits(kn__f32_from_bits(ax) + 0.5f) -
				 kn__f32_bits(0.5f));
}

static inline float kn__bf16_to_f32(uint16_t b)
{
	return kn__f32_from_bits((uint32_t)b << 16);
}

static inline uint16_t kn__f32_to_bf16(float f)
{
	uint32_t x = kn__f32_bits(f);

	if ((x & 0x7fffffffu) > 0x7f800000u) /* NaN: truncate, make quiet */
		return (uint16_t)((x >> 16) | 0x40u);
	return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* Element @i of a @t array, widened to fp32. */
static inline float kn__load1(enum kn_dtype t, const void *p, size_t i)
{
	if (t == KN_DTYPE_FP32) {
		float f;

		memcpy(&f, (const char *)p + i * 4, 4);
		return f;
	}
	uint16_t h;

	memcpy(&h, (const char *)p + i * 2, 2);
	return t == KN_DTYPE_FP16 ? kn__f16_to_f32(h) : kn__bf16_to_f32(h);
}

/* Store @f as element @i of a @t array, rounding to nearest even. */
static inline void kn__store1(enum kn_dtype t, void *p, size_t i, float f)
{
	if (t == KN_DTYPE_FP32) {
		memcpy((char *)p + i * 4, &f, 4);
		return;
	}
	uint16_t h =
		t == KN_DTYPE_FP16 ? kn__f32_to_f16(f) : kn__f32_to_bf16(f);

	memcpy((char *)p + i * 2, &h, 2);
}

#endif /* KN_KERNELS_SCALAR_H */
