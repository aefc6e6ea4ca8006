/* SPDX-License-Identifier: Apache-2.0 */
/*
 * body.inl - the kernels, written once over a small vector vocabulary.
 *
 * Each path (kernels_scalar.c, kernels_avx2.c, kernels_avx512.c) defines
 * the vector type and its operations, then includes this file, which
 * expands into that path's kernels and its const ops table.  The scalar
 * path's "vector" is one float, so all paths share one algorithm and one
 * summation order, which is what makes their fp32 sums bit-identical.
 *
 * The including file provides:
 *   KN_V, KN_VW             vector type and its width in floats
 *   KN_PATH, KN_OPS_NAME    its enum kn_kernel_path and table name
 *   v_set1 v_add v_mul v_div v_sqrt
 *   v_fmadd(a, b, c) = a * b + c,  v_fnmadd(a, b, c) = c - a * b
 *   v_ld_f32 v_ld_f16 v_ld_bf16    unaligned loads, widened to fp32
 *   v_st_f32 v_st_f16 v_st_bf16    unaligned stores, rounded (RNE)
 *   v_nt_f32 v_nt_f16 v_nt_bf16    non-temporal stores to aligned memory
 *   v_fence                         orders the non-temporal stores
 *
 * The type arguments of the always-inline helpers below are constants in
 * every caller, so each (input, output) pair compiles to its own loop with
 * no dtype branches inside; that specialisation is why they are
 * force-inlined.
 */
#ifndef KN_V
#error "include body.inl from a kernel path file that defines KN_V"
#endif

#define KN_INLINE static inline __attribute__((always_inline))
#define KN_UNROLL 4 /* vectors per loop trip: two cache lines of fp32 */

static const size_t dsize[KN__NDTYPES] = { 4, 2, 2 };

KN_INLINE KN_V ld(enum kn_dtype t, const void *p, size_t i)
{
	if (t == KN_DTYPE_FP32)
		return v_ld_f32((const float *)p + i);
	if (t == KN_DTYPE_FP16)
		return v_ld_f16((const uint16_t *)p + i);
	return v_ld_bf16((const uint16_t *)p + i);
}

KN_INLINE void st(enum kn_dtype t, bool nt, void *p, size_t i, KN_V v)
{
	if (t == KN_DTYPE_FP32) {
		if (nt)
			v_nt_f32((float *)p + i, v);
		else
			v_st_f32((float *)p + i, v);
	} else if (t == KN_DTYPE_FP16) {
		if (nt)
			v_nt_f16((uint16_t *)p + i, v);
		else
			v_st_f16((uint16_t *)p + i, v);
	} else {
		if (nt)
			v_nt_bf16((uint16_t *)p + i, v);
		else
			v_st_bf16((uint16_t *)p + i, v);
	}
}

/*
 * Elements to handle one at a time before @dst reaches the alignment that
 * non-temporal vector stores need, or (size_t)-1 when it never will
 * (dst not even element-aligned).
 */
KN_INLINE size_t nt_head(enum kn_dtype t, const void *dst, size_t count)
{
	size_t esz = dsize[t], align = esz * KN_VW;
	uintptr_t a = (uintptr_t)dst;
	size_t head;

	if (KN_VW == 1 || a % esz)
		return (size_t)-1;
	head = ((align - a % align) % align) / esz;
	return head < count ? head : count;
}

/*
 * In every loop below, the first operand has its own dtype @ft and is
 * indexed from @fofs (element i of the pass is first[i - fofs]), and so
 * is the output (dst[i - dofs]): that lets a pass read or write an fp32
 * tile that holds only the current stretch of elements.  Otherwise both
 * offsets are 0 and ft is the inputs' dtype.
 */
/*
 * Weighted passes (@W true) multiply the first operand by @w0 and input
 * k of @rest by @wr[k] before adding, each product rounded to fp32 and
 * never fused with the add, so every path rounds alike.  An fp32 tile of
 * partial sums is a first operand of weight 1: x * 1.0f is x exactly,
 * so a tiled weighted pass equals the one-pass one bit for bit.
 */
KN_INLINE float sum1(bool W, enum kn_dtype ft, const void *first, size_t fofs,
		     float w0, enum kn_dtype it, const void *const *rest,
		     const float *wr, unsigned int nrest, size_t i)
{
	float acc = kn__load1(ft, first, i - fofs);

	if (W)
		acc *= w0;
	for (unsigned int k = 0; k < nrest; k++)
		acc += W ? kn__load1(it, rest[k], i) * wr[k]
			 : kn__load1(it, rest[k], i);
	return acc;
}

/* acc + x, or acc + x * w in a weighted pass */
KN_INLINE KN_V add_in(bool W, KN_V acc, KN_V x, KN_V w)
{
	return v_add(acc, W ? v_mul(x, w) : x);
}

KN_INLINE void sum_span(bool W, enum kn_dtype ft, enum kn_dtype it,
			enum kn_dtype ot, void *dst, size_t dofs,
			const void *first, size_t fofs, float w0,
			const void *const *rest, const float *wr,
			unsigned int nrest, size_t begin, size_t end,
			float alpha, bool nt)
{
	const KN_V va = v_set1(alpha), vw0 = v_set1(w0);
	size_t i = begin, head;

	if (nt) {
		head = nt_head(ot,
			       (const char *)dst + (begin - dofs) * dsize[ot],
			       end - begin);
		if (head == (size_t)-1)
			nt = false;
		else
			for (; i < begin + head; i++)
				kn__store1(ot, dst, i - dofs,
					   sum1(W, ft, first, fofs, w0, it,
						rest, wr, nrest, i) *
						   alpha);
	}
	for (; i + KN_UNROLL * KN_VW <= end; i += KN_UNROLL * KN_VW) {
		KN_V acc[KN_UNROLL];

#pragma GCC unroll 4
		for (int u = 0; u < KN_UNROLL; u++) {
			acc[u] = ld(ft, first, i - fofs + u * KN_VW);
			if (W)
				acc[u] = v_mul(acc[u], vw0);
		}
		for (unsigned int k = 0; k < nrest; k++) {
			const void *p = rest[k];
			const KN_V wk = v_set1(W ? wr[k] : 1.0f);

#pragma GCC unroll 4
			for (int u = 0; u < KN_UNROLL; u++)
				acc[u] = add_in(W, acc[u],
						ld(it, p, i + u * KN_VW), wk);
		}
#pragma GCC unroll 4
		for (int u = 0; u < KN_UNROLL; u++)
			st(ot, nt, dst, i - dofs + u * KN_VW,
			   v_mul(acc[u], va));
	}
	for (; i + KN_VW <= end; i += KN_VW) {
		KN_V acc = ld(ft, first, i - fofs);

		if (W)
			acc = v_mul(acc, vw0);
		for (unsigned int k = 0; k < nrest; k++)
			acc = add_in(W, acc, ld(it, rest[k], i),
				     v_set1(W ? wr[k] : 1.0f));
		st(ot, nt, dst, i - dofs, v_mul(acc, va));
	}
	for (; i < end; i++)
		kn__store1(
			ot, dst, i - dofs,
			sum1(W, ft, first, fofs, w0, it, rest, wr, nrest, i) *
				alpha);
	if (nt)
		v_fence();
}

/*
 * Sums of many inputs go a tile of KN_TILE elements at a time: the first
 * group of inputs into an fp32 tile that stays in the L2, then more
 * groups into the same tile, the last group straight to the output.  The
 * tile holds exactly the fp32 partial sums of the one-pass loop, so
 * results are bit for bit the same; what changes is that only one group
 * of input streams is in flight at once, where one pass over all of them
 * falls apart on this machine.
 *
 * Measured on 16 MiB inputs, the one-pass and the tiled code in one
 * process, alternating, 21 calls each (docs/performance.md): fp32 N = 16
 * 0.98-1.37x as fast, N = 32 1.86-2.66x, fused updates over 16 fp32
 * gradients 1.27-1.45x; fp32 N = 9-12 0.98-1.13x.  fp16 and bf16 run 16
 * inputs in one pass well (tiled 0.78-1.13x) and lose up to 20 (fp16
 * N = 17: 0.68-0.81x, N = 20: 0.90-1.25x, N = 24: 1.31-1.60x, bf16
 * N = 32: 2.79-3.84x).  Hence groups of KN_GROUP_BYTES of input per
 * element (8 fp32, 16 fp16/bf16 inputs), and tiling only from a quarter
 * of a group more inputs than that (11 fp32, 21 fp16/bf16).
 *
 * The passes are as even as the group allows (fp32 N = 16: two of 8, not
 * 8, 7 and a last pass of one input beside the output), and the tile is
 * 16,384 elements (64 KiB, in the L2): each pass reads a longer stretch
 * of every input before it turns to the next group, so the hardware
 * prefetchers stay trained.  On an AMD EPYC with AVX-512, fp32 N = 16
 * went from 0.63-0.73 of the triad to 0.80-0.92 on the avx512 path and
 * from 0.71-0.78 to 0.79-0.97 on the avx2 one (docs/performance.md,
 * "Even passes and a 64 KiB tile"); 32,768 elements measured the same,
 * and software prefetch 256 to 4,096 bytes ahead did not help (16-bit
 * N = 16 fell to 0.39-0.54 of the triad at 1 and 4 KiB ahead).
 */
#define KN_GROUP_BYTES 32
#define KN_TILE	       16384

KN_INLINE unsigned int group(enum kn_dtype it)
{
	return KN_GROUP_BYTES / dsize[it];
}

KN_INLINE bool tiled(enum kn_dtype it, unsigned int nrest)
{
	return KN_VW > 1 && nrest >= group(it) + group(it) / 4;
}

/*
 * Adds all inputs but the last pass's into @tile, in passes of as even a
 * size as the group allows (16 fp32 inputs: 8 and 8, not 8, 7 and 1: a
 * pass with few streams leaves the memory system idle); returns the
 * index in @rest where the last pass starts.
 */
KN_INLINE unsigned int tile_partial(bool W, enum kn_dtype it, float *tile,
				    const void *first, float w0,
				    const void *const *rest, const float *wr,
				    unsigned int nrest, size_t i, size_t e)
{
	unsigned int passes = (nrest + group(it)) / group(it);
	unsigned int per = (nrest + passes) / passes, k = per - 1;

	sum_span(W, it, it, KN_DTYPE_FP32, tile, i, first, 0, w0, rest, wr, k,
		 i, e, 1.0f, false);
	for (; nrest - k > per; k += per)
		sum_span(W, KN_DTYPE_FP32, it, KN_DTYPE_FP32, tile, i, tile, i,
			 1.0f, rest + k, W ? wr + k : NULL, per, i, e, 1.0f,
			 false);
	return k;
}

KN_INLINE void sum_body(bool W, enum kn_dtype it, enum kn_dtype ot, void *dst,
			const void *first, float w0, const void *const *rest,
			const float *wr, unsigned int nrest, size_t begin,
			size_t end, float alpha, bool nt)
{
	float tile[KN_TILE] __attribute__((aligned(64)));

	if (!tiled(it, nrest)) {
		sum_span(W, it, it, ot, dst, 0, first, 0, w0, rest, wr, nrest,
			 begin, end, alpha, nt);
		return;
	}
	for (size_t i = begin; i < end; i += KN_TILE) {
		size_t e = end - i < KN_TILE ? end : i + KN_TILE;
		unsigned int k = tile_partial(W, it, tile, first, w0, rest, wr,
					      nrest, i, e);

		sum_span(W, KN_DTYPE_FP32, it, ot, dst, 0, tile, i, 1.0f,
			 rest + k, W ? wr + k : NULL, nrest - k, i, e, alpha,
			 nt);
	}
}

/*
 * The fused updates.  Each element's gradient is summed from all inputs
 * and consumed at once, so weights and state are read and written once
 * and the sum never goes to memory.  A loop trip first sums KN_UNROLL
 * vectors of gradients (independent add chains, all loads issued before
 * any store, which the compiler could not reorder past stores to w, m and
 * v that might alias), then applies the optimizer to each.
 */
enum upd_kind { UPD_SGD, UPD_MOMENTUM, UPD_ADAM };

KN_INLINE void upd_apply(enum upd_kind kind, const struct kn__update_coef *c,
			 float *w, float *m, float *v, size_t i, KN_V g)
{
	KN_V wv = v_ld_f32(w + i);

	g = v_mul(g, v_set1(c->scale));
	if (c->wd != 0.0f)
		g = v_fmadd(v_set1(c->wd), wv, g);
	if (kind == UPD_SGD) {
		wv = v_fnmadd(v_set1(c->lr), g, wv);
	} else if (kind == UPD_MOMENTUM) {
		KN_V mv = v_fmadd(v_set1(c->mu), v_ld_f32(m + i), g);

		v_st_f32(m + i, mv);
		if (c->nesterov)
			mv = v_fmadd(v_set1(c->mu), mv, g);
		wv = v_fnmadd(v_set1(c->lr), mv, wv);
	} else {
		KN_V mv = v_fmadd(v_set1(c->c1), g,
				  v_mul(v_set1(c->b1), v_ld_f32(m + i)));
		KN_V vv = v_fmadd(v_set1(c->c2), v_mul(g, g),
				  v_mul(v_set1(c->b2), v_ld_f32(v + i)));
		KN_V den = v_fmadd(v_sqrt(vv), v_set1(c->inv_sqrt_bc2),
				   v_set1(c->eps));

		v_st_f32(m + i, mv);
		v_st_f32(v + i, vv);
		wv = v_fnmadd(v_set1(c->step_size), v_div(mv, den), wv);
	}
	v_st_f32(w + i, wv);
}

KN_INLINE void upd_span(bool W, enum upd_kind kind, enum kn_dtype ft,
			const void *first, size_t fofs, float w0,
			enum kn_dtype it, const void *const *rest,
			const float *wr, unsigned int nrest,
			const struct kn__update_coef *c, float *w, float *m,
			float *v, size_t begin, size_t end)
{
	const KN_V vw0 = v_set1(w0);
	size_t i = begin;

	for (; i + KN_UNROLL * KN_VW <= end; i += KN_UNROLL * KN_VW) {
		KN_V g[KN_UNROLL];

#pragma GCC unroll 4
		for (int u = 0; u < KN_UNROLL; u++) {
			g[u] = ld(ft, first, i - fofs + u * KN_VW);
			if (W)
				g[u] = v_mul(g[u], vw0);
		}
		for (unsigned int k = 0; k < nrest; k++) {
			const void *p = rest[k];
			const KN_V wk = v_set1(W ? wr[k] : 1.0f);

#pragma GCC unroll 4
			for (int u = 0; u < KN_UNROLL; u++)
				g[u] = add_in(W, g[u], ld(it, p, i + u * KN_VW),
					      wk);
		}
#pragma GCC unroll 4
		for (int u = 0; u < KN_UNROLL; u++)
			upd_apply(kind, c, w, m, v, i + u * KN_VW, g[u]);
	}
	for (; i + KN_VW <= end; i += KN_VW) {
		KN_V g = ld(ft, first, i - fofs);

		if (W)
			g = v_mul(g, vw0);
		for (unsigned int k = 0; k < nrest; k++)
			g = add_in(W, g, ld(it, rest[k], i),
				   v_set1(W ? wr[k] : 1.0f));
		upd_apply(kind, c, w, m, v, i, g);
	}
	if (i < end) {
		/*
		 * The last partial vector goes through the same formulas on
		 * padded copies, so every element rounds the same way.
		 */
		float tg[KN_VW], tw[KN_VW] = { 0 }, tm[KN_VW] = { 0 },
				 tv[KN_VW] = { 0 };
		size_t r = end - i;

		for (size_t e = 0; e < KN_VW; e++)
			tg[e] = e < r ? sum1(W, ft, first, fofs, w0, it, rest,
					     wr, nrest, i + e)
				      : 0.0f;
		memcpy(tw, w + i, r * sizeof(float));
		if (kind != UPD_SGD)
			memcpy(tm, m + i, r * sizeof(float));
		if (kind == UPD_ADAM)
			memcpy(tv, v + i, r * sizeof(float));
		upd_apply(kind, c, tw, tm, tv, 0, v_ld_f32(tg));
		memcpy(w + i, tw, r * sizeof(float));
		if (kind != UPD_SGD)
			memcpy(m + i, tm, r * sizeof(float));
		if (kind == UPD_ADAM)
			memcpy(v + i, tv, r * sizeof(float));
	}
}

/* Updates from more than KN_GROUP gradients are tiled like sums. */
KN_INLINE void upd_body(bool W, enum upd_kind kind, enum kn_dtype it,
			const struct kn__update_coef *c, float *w, float *m,
			float *v, const void *first, float w0,
			const void *const *rest, const float *wr,
			unsigned int nrest, size_t begin, size_t end)
{
	float tile[KN_TILE] __attribute__((aligned(64)));

	if (!tiled(it, nrest)) {
		upd_span(W, kind, it, first, 0, w0, it, rest, wr, nrest, c, w,
			 m, v, begin, end);
		return;
	}
	for (size_t i = begin; i < end; i += KN_TILE) {
		size_t e = end - i < KN_TILE ? end : i + KN_TILE;
		unsigned int k = tile_partial(W, it, tile, first, w0, rest, wr,
					      nrest, i, e);

		upd_span(W, kind, KN_DTYPE_FP32, tile, i, 1.0f, it, rest + k,
			 W ? wr + k : NULL, nrest - k, c, w, m, v, i, e);
	}
}

KN_INLINE void convert_body(enum kn_dtype it, enum kn_dtype ot, void *dst,
			    const void *src, size_t count)
{
	size_t i = 0;

	for (; i + KN_UNROLL * KN_VW <= count; i += KN_UNROLL * KN_VW) {
#pragma GCC unroll 4
		for (int u = 0; u < KN_UNROLL; u++)
			st(ot, false, dst, i + u * KN_VW,
			   ld(it, src, i + u * KN_VW));
	}
	for (; i + KN_VW <= count; i += KN_VW)
		st(ot, false, dst, i, ld(it, src, i));
	for (; i < count; i++)
		kn__store1(ot, dst, i, kn__load1(it, src, i));
}

/*
 * Instantiate one function per (input, output) dtype pair, and its
 * weighted twin (@weight: one per input, the first's first).
 */
#define KN_SUM(name, it, ot)                                                 \
	static void name(void *dst, const void *first,                       \
			 const void *const *rest, unsigned int nrest,        \
			 size_t begin, size_t end, float alpha, bool nt)     \
	{                                                                    \
		sum_body(false, it, ot, dst, first, 1.0f, rest, NULL, nrest, \
			 begin, end, alpha, nt);                             \
	}                                                                    \
	static void w##name(void *dst, const void *first,                    \
			    const void *const *rest, const float *weight,    \
			    unsigned int nrest, size_t begin, size_t end,    \
			    bool nt)                                         \
	{                                                                    \
		sum_body(true, it, ot, dst, first, weight[0], rest,          \
			 weight + 1, nrest, begin, end, 1.0f, nt);           \
	}
KN_SUM(sum_f32_f32, KN_DTYPE_FP32, KN_DTYPE_FP32)
KN_SUM(sum_f16_f32, KN_DTYPE_FP16, KN_DTYPE_FP32)
KN_SUM(sum_bf16_f32, KN_DTYPE_BF16, KN_DTYPE_FP32)
KN_SUM(sum_f16_f16, KN_DTYPE_FP16, KN_DTYPE_FP16)
KN_SUM(sum_bf16_bf16, KN_DTYPE_BF16, KN_DTYPE_BF16)

#define KN_UPD(name, kind, it)                                                 \
	static void name(const struct kn__update_coef *c, float *w, float *m,  \
			 float *v, const void *first, const void *const *rest, \
			 unsigned int nrest, size_t begin, size_t end)         \
	{                                                                      \
		upd_body(false, kind, it, c, w, m, v, first, 1.0f, rest, NULL, \
			 nrest, begin, end);                                   \
	}                                                                      \
	static void w##name(const struct kn__update_coef *c, float *w,         \
			    float *m, float *v, const void *first,             \
			    const void *const *rest, const float *weight,      \
			    unsigned int nrest, size_t begin, size_t end)      \
	{                                                                      \
		upd_body(true, kind, it, c, w, m, v, first, weight[0], rest,   \
			 weight + 1, nrest, begin, end);                       \
	}
KN_UPD(sgd_f32, UPD_SGD, KN_DTYPE_FP32)
KN_UPD(sgd_f16, UPD_SGD, KN_DTYPE_FP16)
KN_UPD(sgd_bf16, UPD_SGD, KN_DTYPE_BF16)
KN_UPD(momentum_f32, UPD_MOMENTUM, KN_DTYPE_FP32)
KN_UPD(momentum_f16, UPD_MOMENTUM, KN_DTYPE_FP16)
KN_UPD(momentum_bf16, UPD_MOMENTUM, KN_DTYPE_BF16)
KN_UPD(adam_f32, UPD_ADAM, KN_DTYPE_FP32)
KN_UPD(adam_f16, UPD_ADAM, KN_DTYPE_FP16)
KN_UPD(adam_bf16, UPD_ADAM, KN_DTYPE_BF16)

#define KN_CVT(name, it, ot)                                       \
	static void name(void *dst, const void *src, size_t count) \
	{                                                          \
		convert_body(it, ot, dst, src, count);             \
	}
KN_CVT(cvt_f16_f32, KN_DTYPE_FP16, KN_DTYPE_FP32)
KN_CVT(cvt_bf16_f32, KN_DTYPE_BF16, KN_DTYPE_FP32)
KN_CVT(cvt_f32_f16, KN_DTYPE_FP32, KN_DTYPE_FP16)
KN_CVT(cvt_f32_bf16, KN_DTYPE_FP32, KN_DTYPE_BF16)

/* fp32 to fp32 "conversion" is a copy. */
static void cvt_f32_f32(void *dst, const void *src, size_t count)
{
	memcpy(dst, src, count * sizeof(float));
}

/* The local-step passes (kernels.h says what each computes). */
static void local_dist(const float *x, const float *a, size_t n, double out[2])
{
	const KN_V one = v_set1(1.0f);
	float ld[KN_VW], la[KN_VW];
	size_t i = 0;

	while (i < n) {
		size_t end = n - i > KN__DIST_BLOCK ? i + KN__DIST_BLOCK : n;
		KN_V d2 = v_set1(0.0f), a2 = v_set1(0.0f);

		for (; i + KN_VW <= end; i += KN_VW) {
			KN_V va = v_ld_f32(a + i);
			KN_V e = v_fnmadd(va, one, v_ld_f32(x + i));

			d2 = v_fmadd(e, e, d2);
			a2 = v_fmadd(va, va, a2);
		}
		v_st_f32(ld, d2);
		v_st_f32(la, a2);
		for (int k = 0; k < KN_VW; k++) {
			out[0] += ld[k];
			out[1] += la[k];
		}
		for (; i < end; i++) {
			double e = (double)x[i] - a[i];

			out[0] += e * e;
			out[1] += (double)a[i] * a[i];
		}
	}
}

static void local_delta(float *d, float *at, const float *a, const float *x,
			size_t n)
{
	const KN_V one = v_set1(1.0f);
	size_t i = 0;

	for (; i + KN_VW <= n; i += KN_VW) {
		KN_V vx = v_ld_f32(x + i);

		v_st_f32(d + i, v_fnmadd(vx, one, v_ld_f32(a + i)));
		v_st_f32(at + i, vx);
	}
	for (; i < n; i++) {
		d[i] = a[i] - x[i];
		at[i] = x[i];
	}
}

static void local_merge(float *x, float *a, const float *in, const float *at,
			size_t n)
{
	const KN_V one = v_set1(1.0f);
	size_t i = 0;

	for (; i + KN_VW <= n; i += KN_VW) {
		KN_V vin = v_ld_f32(in + i);
		KN_V since = v_fnmadd(v_ld_f32(at + i), one, v_ld_f32(x + i));

		v_st_f32(x + i, v_add(vin, since));
		v_st_f32(a + i, vin);
	}
	for (; i < n; i++) {
		x[i] = in[i] + (x[i] - at[i]);
		a[i] = in[i];
	}
}

const struct kn__kernel_ops KN_OPS_NAME = {
	.path = KN_PATH,
	.sum_to_f32 = { sum_f32_f32, sum_f16_f32, sum_bf16_f32 },
	.sum_same = { sum_f32_f32, sum_f16_f16, sum_bf16_bf16 },
	.wsum_to_f32 = { wsum_f32_f32, wsum_f16_f32, wsum_bf16_f32 },
	.wsum_same = { wsum_f32_f32, wsum_f16_f16, wsum_bf16_bf16 },
	.sgd = { sgd_f32, sgd_f16, sgd_bf16 },
	.momentum = { momentum_f32, momentum_f16, momentum_bf16 },
	.adam = { adam_f32, adam_f16, adam_bf16 },
	.wsgd = { wsgd_f32, wsgd_f16, wsgd_bf16 },
	.wmomentum = { wmomentum_f32, wmomentum_f16, wmomentum_bf16 },
	.wadam = { wadam_f32, wadam_f16, wadam_bf16 },
	.to_f32 = { cvt_f32_f32, cvt_f16_f32, cvt_bf16_f32 },
	.from_f32 = { cvt_f32_f32, cvt_f32_f16, cvt_f32_bf16 },
	.local_dist = local_dist,
	.local_delta = local_delta,
	.local_merge = local_merge,
};
