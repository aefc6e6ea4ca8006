/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kernels.h - the kernels layer's own API: the ops table each kernel path
 * fills, and how the library picks one.
 *
 * Users call the checked wrappers in kanel.h (kn_sum, kn_update, ...).
 * They validate arguments and then call through kn__kernels, the table
 * chosen once when the library is loaded.  Tests and the engine may call
 * a table directly (kn__kernel_ops_get) to exercise every path the CPU
 * supports; the table functions do no argument checking.
 */
#ifndef KN_KERNELS_H
#define KN_KERNELS_H

#include <stdbool.h>
#include <stddef.h>

#include "kanel.h"

#define KN__NDTYPES 3

/*
 * dst = alpha * (first + rest[0] + ... + rest[nrest - 1]), element-wise
 * over the elements [begin, end) of every array, in fp32, adding in that
 * order.  @nt asks for non-temporal stores (used when dst is element-
 * aligned; the function fences before returning).  The range lets a pool
 * of threads split one call without copying the array of input pointers.
 */
typedef void kn__sum_fn(void *dst, const void *first, const void *const *rest,
			unsigned int nrest, size_t begin, size_t end,
			float alpha, bool nt);

/*
 * The weighted sum: dst = weight[0] * first + weight[1] * rest[0] + ...,
 * each product rounded to fp32 and added in that order (no FMA), so every
 * path gives the same bits; see kn_sum_weighted().
 */
typedef void kn__wsum_fn(void *dst, const void *first, const void *const *rest,
			 const float *weight, unsigned int nrest, size_t begin,
			 size_t end, bool nt);

/* Per-call constants of an update, derived once from kn_update_params. */
struct kn__update_coef {
	float lr;	    /* SGD and momentum step */
	float scale;	    /* grad_scale */
	float wd;	    /* weight decay */
	float mu;	    /* momentum */
	float b1, c1;	    /* Adam: beta1 and 1 - beta1 */
	float b2, c2;	    /* Adam: beta2 and 1 - beta2 */
	float step_size;    /* Adam: lr / (1 - beta1^t) */
	float inv_sqrt_bc2; /* Adam: 1 / sqrt(1 - beta2^t) */
	float eps;
	bool nesterov;
};

/*
 * Check @p (flags, Adam's step and betas) and derive the per-call
 * constants.  Returns 0 or -EINVAL; @c is written only on success.
 */
int kn__update_coef_init(const struct kn_update_params *p,
			 struct kn__update_coef *c);

/*
 * One fused update over n = 1 + nrest gradients, elements [begin, end);
 * see kn_update().
 */
typedef void kn__update_fn(const struct kn__update_coef *c, float *w, float *m,
			   float *v, const void *first, const void *const *rest,
			   unsigned int nrest, size_t begin, size_t end);

/* The same over the weighted sum of the gradients (kn_update_weighted). */
typedef void kn__wupdate_fn(const struct kn__update_coef *c, float *w, float *m,
			    float *v, const void *first,
			    const void *const *rest, const float *weight,
			    unsigned int nrest, size_t begin, size_t end);

typedef void kn__convert_fn(void *dst, const void *src, size_t count);

/*
 * The local-step protocols' passes over a worker's fp32 model, each
 * reading and writing every array once (engine/worker_rule.c):
 *   dist:  out[0] += sum (x - a)^2, out[1] += sum a^2 (ESP's delta
 *          ratio; in fp32 vectors per block of KN__DIST_BLOCK elements,
 *          the blocks added in double: the paths agree to rounding, not
 *          bit for bit);
 *   delta: d = a - x and at = x (a push: the delta from the anchor, and
 *          the model at the push);
 *   merge: x = in + (x - at) and a = in (a release: the new model with
 *          the progress since the push, and the new anchor).
 */
#define KN__DIST_BLOCK 1024
typedef void kn__local_dist_fn(const float *x, const float *a, size_t n,
			       double out[2]);
typedef void kn__local_delta_fn(float *d, float *at, const float *a,
				const float *x, size_t n);
typedef void kn__local_merge_fn(float *x, float *a, const float *in,
				const float *at, size_t n);

struct kn__kernel_ops {
	enum kn_kernel_path path;
	/* indexed by the input dtype */
	kn__sum_fn *sum_to_f32[KN__NDTYPES]; /* fp32 output */
	kn__sum_fn *sum_same[KN__NDTYPES];   /* output in the input dtype */
	kn__wsum_fn *wsum_to_f32[KN__NDTYPES];
	kn__wsum_fn *wsum_same[KN__NDTYPES];
	kn__update_fn *sgd[KN__NDTYPES];
	kn__update_fn *momentum[KN__NDTYPES];
	kn__update_fn *adam[KN__NDTYPES];
	kn__wupdate_fn *wsgd[KN__NDTYPES];
	kn__wupdate_fn *wmomentum[KN__NDTYPES];
	kn__wupdate_fn *wadam[KN__NDTYPES];
	kn__convert_fn *to_f32[KN__NDTYPES];   /* dtype -> fp32 */
	kn__convert_fn *from_f32[KN__NDTYPES]; /* fp32 -> dtype */
	kn__local_dist_fn *local_dist;
	kn__local_delta_fn *local_delta;
	kn__local_merge_fn *local_merge;
};

/*
 * One kernel call, as kn__pool_run() splits it: a sum (@sum, or @wsum
 * with @weight) or an update (@update, or @wupdate with @weight) over
 * elements [0, count) of every array.
 */
struct kn__job {
	size_t count;
	const void *first;
	const void *const *rest;
	unsigned int nrest;
	kn__sum_fn *sum;
	kn__wsum_fn *wsum;
	void *dst;
	float alpha;
	bool nt;
	kn__update_fn *update;
	kn__wupdate_fn *wupdate;
	const float *weight; /* 1 + nrest of them */
	const struct kn__update_coef *coef;
	float *w, *m, *v;
};

/* Runs elements [begin, end) of @j on the calling thread. */
void kn__job_run(const struct kn__job *j, size_t begin, size_t end);

/*
 * Runs @j, a pass that moves @bytes, split over @pool's threads when the
 * pass is at least kn__pool_threshold bytes, else (or with no pool) on
 * the calling thread alone.  Returns when every part is done.
 */
void kn__pool_run(struct kn_kernel_pool *pool, const struct kn__job *j,
		  size_t bytes);

/*
 * Smallest pass, in bytes read plus written, that a pool splits;
 * KANEL_POOL_THRESHOLD overrides it at load time.
 */
extern size_t kn__pool_threshold;

extern const struct kn__kernel_ops kn__kernel_ops_scalar;
#ifdef KN_HAVE_AVX2
extern const struct kn__kernel_ops kn__kernel_ops_avx2;
#endif
#ifdef KN_HAVE_AVX512
extern const struct kn__kernel_ops kn__kernel_ops_avx512;
#endif

/* The table every public kernel call goes through; set at load time. */
extern const struct kn__kernel_ops *kn__kernels;

/*
 * The table of @path, or NULL when it was not compiled in or the CPU (and
 * OS) cannot run it.
 */
const struct kn__kernel_ops *kn__kernel_ops_get(enum kn_kernel_path path);

/*
 * Outputs whose pass moves at least this many bytes (all inputs read plus
 * the output written) use non-temporal stores: they bypass the caches,
 * which helps only once the pass no longer fits in them.
 * KANEL_NT_THRESHOLD overrides it at load time (0: always, "off": never).
 */
extern size_t kn__nt_threshold;

#endif /* KN_KERNELS_H */
