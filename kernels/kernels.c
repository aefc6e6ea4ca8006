/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kernels.c - the public kernel entry points and the choice of path.
 *
 * When the library is loaded, a constructor picks the best ops table the
 * CPU can run (or the lower one KANEL_KERNELS names) and stores it in
 * kn__kernels; from then on the table is only read.  The kn_* functions
 * here check their arguments, derive what each call needs once (the
 * non-temporal decision, the optimizer's bias corrections) and call the
 * table.  Nothing here allocates or does I/O.
 */
#include <errno.h>
#include <math.h>
#ifdef KN_HAVE_AVX2
#include <cpuid.h>
#endif
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

/*
 * Default for kn__nt_threshold, measured with perf/bench_kernels on the
 * development machine (docs/performance.md): below it the output is still
 * in cache when the pass ends, and streaming it past the caches loses.
 */
#define KN_NT_THRESHOLD_DEFAULT (8u << 20)

/*
 * Default for kn__pool_threshold, measured the same way: below it the
 * microseconds of waking the helpers are not won back.
 */
#define KN_POOL_THRESHOLD_DEFAULT (2u << 20)

const struct kn__kernel_ops *kn__kernels = &kn__kernel_ops_scalar;
size_t kn__nt_threshold = KN_NT_THRESHOLD_DEFAULT;
size_t kn__pool_threshold = KN_POOL_THRESHOLD_DEFAULT;

static const char *const path_names[] = {
	[KN_KERNEL_SCALAR] = "scalar",
	[KN_KERNEL_AVX2] = "avx2",
	[KN_KERNEL_AVX512] = "avx512",
};

static const char *const dtype_names[KN__NDTYPES] = {
	[KN_DTYPE_FP32] = "fp32",
	[KN_DTYPE_FP16] = "fp16",
	[KN_DTYPE_BF16] = "bf16",
};

static const size_t dtype_sizes[KN__NDTYPES] = { 4, 2, 2 };

static bool dtype_ok(enum kn_dtype t)
{
	return (unsigned int)t < KN__NDTYPES;
}

size_t kn_dtype_size(enum kn_dtype dtype)
{
	return dtype_ok(dtype) ? dtype_sizes[dtype] : 0;
}

const char *kn_dtype_name(enum kn_dtype dtype)
{
	return dtype_ok(dtype) ? dtype_names[dtype] : NULL;
}

const char *kn_kernel_path_name(enum kn_kernel_path path)
{
	return (unsigned int)path <= KN_KERNEL_AVX512 ? path_names[path] : NULL;
}

enum kn_kernel_path kn_kernel_path_active(void)
{
	return kn__kernels->path;
}

#ifdef KN_HAVE_AVX2
/* F16C from CPUID leaf 1 (ECX bit 29): not every compiler's builtin knows it. */
static bool cpu_has_f16c(void)
{
	unsigned int a, b, c, d;

	return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}

static bool cpu_has_avx2(void)
{
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx2") &&
	       __builtin_cpu_supports("fma") && cpu_has_f16c();
}
#endif

const struct kn__kernel_ops *kn__kernel_ops_get(enum kn_kernel_path path)
{
	switch (path) {
	case KN_KERNEL_SCALAR:
		return &kn__kernel_ops_scalar;
	case KN_KERNEL_AVX2:
#ifdef KN_HAVE_AVX2
		if (cpu_has_avx2())
			return &kn__kernel_ops_avx2;
#endif
		return NULL;
	case KN_KERNEL_AVX512:
#ifdef KN_HAVE_AVX512
		/* libgcc checks XCR0, so "supports" includes the OS */
		if (cpu_has_avx2() && __builtin_cpu_supports("avx512f") &&
		    __builtin_cpu_supports("avx512bw") &&
		    __builtin_cpu_supports("avx512vl"))
			return &kn__kernel_ops_avx512;
#endif
		return NULL;
	}
	return NULL;
}

/*
 * A byte count from the environment: a number (decimal, or 0x hex), or
 * "off" for never.  Anything else leaves @v as it was.
 */
static void parse_bytes(const char *s, size_t *v)
{
	char *end;
	unsigned long long x;

	if (!s || !*s)
		return;
	if (strcmp(s, "off") == 0) {
		*v = (size_t)-1;
		return;
	}
	x = strtoull(s, &end, 0);
	if (*end == '\0')
		*v = (size_t)x;
}

__attribute__((constructor)) static void kernels_init(void)
{
	enum kn_kernel_path max = KN_KERNEL_AVX512;
	const char *env = getenv("KANEL_KERNELS");

	if (env)
		for (int p = KN_KERNEL_SCALAR; p <= KN_KERNEL_AVX512; p++)
			if (strcmp(env, path_names[p]) == 0)
				max = (enum kn_kernel_path)p;
	for (int p = max; p >= KN_KERNEL_SCALAR; p--) {
		const struct kn__kernel_ops *ops =
			kn__kernel_ops_get((enum kn_kernel_path)p);

		if (ops) {
			kn__kernels = ops;
			break;
		}
	}
	parse_bytes(getenv("KANEL_NT_THRESHOLD"), &kn__nt_threshold);
	parse_bytes(getenv("KANEL_POOL_THRESHOLD"), &kn__pool_threshold);
}

static bool pointers_ok(const void *const *p, unsigned int n)
{
	if (!p)
		return false;
	for (unsigned int k = 0; k < n; k++)
		if (!p[k])
			return false;
	return true;
}

/* Bytes a pass reads and writes; cannot overflow for any real buffer. */
static size_t pass_bytes(size_t count, unsigned int n_read, size_t isz,
			 size_t osz)
{
	return count * ((size_t)n_read * isz + osz);
}

/* kn_sum_pool(), or with @weight (not NULL) the weighted sum. */
static int sum_pass(struct kn_kernel_pool *pool, void *dst,
		    enum kn_dtype dst_type, const void *const *src,
		    const float *weight, unsigned int n, enum kn_dtype src_type,
		    size_t count, float alpha)
{
	const struct kn__kernel_ops *ops = kn__kernels;
	const bool same = dst_type != KN_DTYPE_FP32;
	struct kn__job j;
	size_t bytes;

	if (n == 0 || !dtype_ok(src_type) ||
	    (dst_type != KN_DTYPE_FP32 && dst_type != src_type))
		return -EINVAL;
	if (count == 0)
		return 0;
	if (!dst || !pointers_ok(src, n))
		return -EINVAL;
	bytes = pass_bytes(count, n, dtype_sizes[src_type],
			   dtype_sizes[dst_type]);
	j = (struct kn__job){
		.count = count,
		.first = src[0],
		.rest = src + 1,
		.nrest = n - 1,
		.dst = dst,
		.alpha = alpha,
		.nt = bytes >= kn__nt_threshold,
		.weight = weight,
	};
	if (weight)
		j.wsum = same ? ops->wsum_same[src_type]
			      : ops->wsum_to_f32[src_type];
	else
		j.sum = same ? ops->sum_same[src_type]
			     : ops->sum_to_f32[src_type];
	kn__pool_run(pool, &j, bytes);
	return 0;
}

int kn_sum_pool(struct kn_kernel_pool *pool, void *dst, enum kn_dtype dst_type,
		const void *const *src, unsigned int n, enum kn_dtype src_type,
		size_t count, float alpha)
{
	return sum_pass(pool, dst, dst_type, src, NULL, n, src_type, count,
			alpha);
}

int kn_sum_weighted(void *dst, enum kn_dtype dst_type, const void *const *src,
		    const float *weight, unsigned int n, enum kn_dtype src_type,
		    size_t count)
{
	if (!weight)
		return -EINVAL;
	return sum_pass(NULL, dst, dst_type, src, weight, n, src_type, count,
			1.0f);
}

int kn_sum(void *dst, enum kn_dtype dst_type, const void *const *src,
	   unsigned int n, enum kn_dtype src_type, size_t count, float alpha)
{
	return kn_sum_pool(NULL, dst, dst_type, src, n, src_type, count, alpha);
}

int kn_sum_inplace(void *acc, const void *const *src, unsigned int n,
		   enum kn_dtype type, size_t count, float alpha)
{
	size_t esz;

	if (!dtype_ok(type))
		return -EINVAL;
	if (count == 0)
		return 0;
	if (!acc || (n > 0 && !pointers_ok(src, n)))
		return -EINVAL;
	esz = dtype_sizes[type];
	kn__kernels->sum_same[type](acc, acc, src, n, 0, count, alpha,
				    pass_bytes(count, n + 1, esz, esz) >=
					    kn__nt_threshold);
	return 0;
}

int kn_convert(void *dst, enum kn_dtype dst_type, const void *src,
	       enum kn_dtype src_type, size_t count)
{
	const struct kn__kernel_ops *ops = kn__kernels;

	if (!dtype_ok(dst_type) || !dtype_ok(src_type))
		return -EINVAL;
	if (count == 0)
		return 0;
	if (!dst || !src)
		return -EINVAL;
	if (dst_type == src_type) {
		memcpy(dst, src, count * dtype_sizes[src_type]);
	} else if (src_type == KN_DTYPE_FP32) {
		ops->from_f32[dst_type](dst, src, count);
	} else if (dst_type == KN_DTYPE_FP32) {
		ops->to_f32[src_type](dst, src, count);
	} else {
		/* fp16 <-> bf16 through fp32, a cache-resident block at a time */
		float tmp[1024];

		for (size_t i = 0; i < count; i += 1024) {
			size_t b = count - i < 1024 ? count - i : 1024;

			ops->to_f32[src_type](tmp, (const char *)src + 2 * i,
					      b);
			ops->from_f32[dst_type]((char *)dst + 2 * i, tmp, b);
		}
	}
	return 0;
}

int kn__update_coef_init(const struct kn_update_params *p,
			 struct kn__update_coef *c)
{
	struct kn__update_coef k = {
		.lr = p->lr,
		.scale = p->grad_scale,
		.wd = p->weight_decay,
	};

	if (p->flags & ~KN_UPDATE_NESTEROV)
		return -EINVAL;
	if ((p->flags & KN_UPDATE_NESTEROV) && p->optimizer != KN_OPT_MOMENTUM)
		return -EINVAL;
	switch (p->optimizer) {
	case KN_OPT_SGD:
		break;
	case KN_OPT_MOMENTUM:
		k.mu = p->momentum;
		k.nesterov = p->flags & KN_UPDATE_NESTEROV;
		break;
	case KN_OPT_ADAM:
		if (p->step == 0 || !(p->beta1 >= 0.0f && p->beta1 < 1.0f) ||
		    !(p->beta2 >= 0.0f && p->beta2 < 1.0f))
			return -EINVAL;
		k.b1 = p->beta1;
		k.c1 = 1.0f - p->beta1;
		k.b2 = p->beta2;
		k.c2 = 1.0f - p->beta2;
		k.eps = p->eps;
		/* in double: for large t, 1 - beta^t must keep its digits */
		k.step_size =
			(float)(p->lr / (1.0 - pow(p->beta1, (double)p->step)));
		k.inv_sqrt_bc2 =
			(float)(1.0 /
				sqrt(1.0 - pow(p->beta2, (double)p->step)));
		break;
	default:
		return -EINVAL;
	}
	*c = k;
	return 0;
}

/* kn_update_pool(), or with @weight (not NULL) over the weighted sum. */
static int update_pass(struct kn_kernel_pool *pool,
		       const struct kn_update_params *params, float *w,
		       float *m, float *v, const void *const *grad,
		       const float *weight, unsigned int n,
		       enum kn_dtype grad_type, size_t count)
{
	const struct kn__kernel_ops *ops = kn__kernels;
	struct kn__update_coef c;
	struct kn__job j = {
		.count = count, .coef = &c, .w = w, .weight = weight
	};
	size_t state = 1; /* fp32 arrays read and written: w, m, v */
	int ret;

	if (!params || n == 0 || !dtype_ok(grad_type))
		return -EINVAL;
	ret = kn__update_coef_init(params, &c);
	if (ret)
		return ret;
	if (count == 0)
		return 0;
	if (!w || !pointers_ok(grad, n))
		return -EINVAL;
	switch (params->optimizer) {
	case KN_OPT_SGD:
		j.update = ops->sgd[grad_type];
		j.wupdate = ops->wsgd[grad_type];
		break;
	case KN_OPT_MOMENTUM:
		if (!m)
			return -EINVAL;
		j.update = ops->momentum[grad_type];
		j.wupdate = ops->wmomentum[grad_type];
		j.m = m;
		state = 2;
		break;
	default: /* KN_OPT_ADAM; kn__update_coef_init() rejected anything else */
		if (!m || !v)
			return -EINVAL;
		j.update = ops->adam[grad_type];
		j.wupdate = ops->wadam[grad_type];
		j.m = m;
		j.v = v;
		state = 3;
		break;
	}
	if (weight)
		j.update = NULL; /* kn__job_run: the weighted one */
	else
		j.wupdate = NULL;
	j.first = grad[0];
	j.rest = grad + 1;
	j.nrest = n - 1;
	kn__pool_run(pool, &j,
		     pass_bytes(count, n, dtype_sizes[grad_type], 8 * state));
	return 0;
}

int kn_update_pool(struct kn_kernel_pool *pool,
		   const struct kn_update_params *params, float *w, float *m,
		   float *v, const void *const *grad, unsigned int n,
		   enum kn_dtype grad_type, size_t count)
{
	return update_pass(pool, params, w, m, v, grad, NULL, n, grad_type,
			   count);
}

int kn_update(const struct kn_update_params *params, float *w, float *m,
	      float *v, const void *const *grad, unsigned int n,
	      enum kn_dtype grad_type, size_t count)
{
	return kn_update_pool(NULL, params, w, m, v, grad, n, grad_type, count);
}

int kn_update_weighted(const struct kn_update_params *params, float *w,
		       float *m, float *v, const void *const *grad,
		       const float *weight, unsigned int n,
		       enum kn_dtype grad_type, size_t count)
{
	if (!weight)
		return -EINVAL;
	return update_pass(NULL, params, w, m, v, grad, weight, n, grad_type,
			   count);
}
