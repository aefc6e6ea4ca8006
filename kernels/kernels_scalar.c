/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kernels_scalar.c - the portable path: body.inl over a one-float
 * "vector".  It runs anywhere, is the reference the vector paths must
 * match, and is what KANEL_KERNELS=scalar forces for bisecting.
 */
#include <stdint.h>

#include "kernels.h"
#include "scalar.h"

#define KN_V	    float
#define KN_VW	    1
#define KN_PATH	    KN_KERNEL_SCALAR
#define KN_OPS_NAME kn__kernel_ops_scalar

/* The vocabulary reads best one operation a line. */
/* clang-format off */
static inline float v_set1(float a) { return a; }
static inline float v_add(float a, float b) { return a + b; }
static inline float v_mul(float a, float b) { return a * b; }
static inline float v_div(float a, float b) { return a / b; }
static inline float v_sqrt(float a) { return __builtin_sqrtf(a); }
static inline float v_fmadd(float a, float b, float c) { return a * b + c; }
static inline float v_fnmadd(float a, float b, float c) { return c - a * b; }

static inline float v_ld_f32(const float *p) { return kn__load1(KN_DTYPE_FP32, p, 0); }
static inline float v_ld_f16(const uint16_t *p) { return kn__load1(KN_DTYPE_FP16, p, 0); }
static inline float v_ld_bf16(const uint16_t *p) { return kn__load1(KN_DTYPE_BF16, p, 0); }
static inline void v_st_f32(float *p, float v) { kn__store1(KN_DTYPE_FP32, p, 0, v); }
static inline void v_st_f16(uint16_t *p, float v) { kn__store1(KN_DTYPE_FP16, p, 0, v); }
static inline void v_st_bf16(uint16_t *p, float v) { kn__store1(KN_DTYPE_BF16, p, 0, v); }
/* No streaming stores in portable C; nt_head() never asks for them. */
static inline void v_nt_f32(float *p, float v) { v_st_f32(p, v); }
static inline void v_nt_f16(uint16_t *p, float v) { v_st_f16(p, v); }
static inline void v_nt_bf16(uint16_t *p, float v) { v_st_bf16(p, v); }
static inline void v_fence(void) { }
/* clang-format on */

#include "body.inl"
