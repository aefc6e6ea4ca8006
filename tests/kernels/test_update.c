/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_update.c - the optimizer updates fused with the N-way sum, on
 * every kernel path: against a plain fp32 evaluation of the textbook
 * formulas within the tolerance docs/kernels.md states, bit for bit
 * against the unfused sum-then-update, on hand-computed steps, and the
 * argument checks of kn_update().
 */
#include <errno.h>

#include "kernel_test.h"

/*
 * The stated tolerance: each result within 1e-5 of the magnitude of the
 * terms that make it (vector paths fuse multiply-adds and fold Adam's
 * bias corrections into two constants, so they round differently from
 * the textbook evaluation, by a few ulp of those terms).
 */
#define REL_TOL 1e-5f

static void ref_update(const struct kn_update_params *p, float *w, float *m,
		       float *v, const void *const *g, unsigned int n,
		       enum kn_dtype t, size_t count)
{
	double bc1 = 1.0 - pow(p->beta1, (double)p->step);
	double bc2 = 1.0 - pow(p->beta2, (double)p->step);

	for (size_t i = 0; i < count; i++) {
		float gs = ref_load(t, g[0], i);

		for (unsigned int k = 1; k < n; k++)
			gs += ref_load(t, g[k], i);
		gs *= p->grad_scale;
		gs += p->weight_decay * w[i];
		switch (p->optimizer) {
		case KN_OPT_SGD:
			w[i] -= p->lr * gs;
			break;
		case KN_OPT_MOMENTUM:
			m[i] = p->momentum * m[i] + gs;
			w[i] -= p->lr * ((p->flags & KN_UPDATE_NESTEROV)
						 ? gs + p->momentum * m[i]
						 : m[i]);
			break;
		case KN_OPT_ADAM: {
			float mhat, vhat;

			m[i] = p->beta1 * m[i] + (1.0f - p->beta1) * gs;
			v[i] = p->beta2 * v[i] + (1.0f - p->beta2) * gs * gs;
			mhat = m[i] / (float)bc1;
			vhat = v[i] / (float)bc2;
			w[i] -= p->lr * mhat / (sqrtf(vhat) + p->eps);
			break;
		}
		}
	}
}

static void assert_close(const char *what, size_t i, float got, float want,
			 float scale)
{
	float tol = REL_TOL * scale + 1e-30f;

	cr_assert(fabsf(got - want) <= tol,
		  "%s[%zu] = %.9g, reference %.9g (tolerance %.3g)", what, i,
		  (double)got, (double)want, (double)tol);
}

#define LEN 1029 /* vectors of every width plus a tail */
#define N   5

static const struct kn_update_params cases[] = {
	{ .optimizer = KN_OPT_SGD, .lr = 0.1f, .grad_scale = 1.0f / N },
	{ .optimizer = KN_OPT_SGD,
	  .lr = 0.05f,
	  .grad_scale = 1.0f,
	  .weight_decay = 1e-2f },
	{ .optimizer = KN_OPT_MOMENTUM,
	  .lr = 0.1f,
	  .grad_scale = 1.0f / N,
	  .momentum = 0.9f },
	{ .optimizer = KN_OPT_MOMENTUM,
	  .flags = KN_UPDATE_NESTEROV,
	  .lr = 0.1f,
	  .grad_scale = 1.0f / N,
	  .momentum = 0.9f,
	  .weight_decay = 5e-4f },
	{ .optimizer = KN_OPT_ADAM,
	  .lr = 1e-3f,
	  .grad_scale = 1.0f / N,
	  .beta1 = 0.9f,
	  .beta2 = 0.999f,
	  .eps = 1e-8f },
	{ .optimizer = KN_OPT_ADAM,
	  .lr = 1e-2f,
	  .grad_scale = 1.0f,
	  .beta1 = 0.8f,
	  .beta2 = 0.99f,
	  .eps = 1e-3f,
	  .weight_decay = 1e-3f },
};

static kn__update_fn *pick(const struct kn__kernel_ops *ops,
			   enum kn_optimizer o, enum kn_dtype t)
{
	return o == KN_OPT_SGD	      ? ops->sgd[t]
	       : o == KN_OPT_MOMENTUM ? ops->momentum[t]
				      : ops->adam[t];
}

/* The coefficients kn_update() derives for @p. */
static struct kn__update_coef coef_of(const struct kn_update_params *p)
{
	struct kn__update_coef c;

	cr_assert_eq(kn__update_coef_init(p, &c), 0);
	return c;
}

/*
 * The magnitude of the terms behind element @i's new values: rounding
 * errors scale with these, not with the results, which may cancel.
 */
static void term_scales(const struct kn_update_params *p, const void *const *g,
			enum kn_dtype t, float w0, float m0, float v0, size_t i,
			float *sw, float *sm, float *sv)
{
	float ga = 0.0f;

	for (int k = 0; k < N; k++)
		ga += fabsf(ref_load(t, g[k], i));
	ga = ga * fabsf(p->grad_scale) + fabsf(p->weight_decay * w0);
	*sm = fabsf(m0) + ga;
	*sv = fabsf(v0) + ga * ga;
	/* Adam's step is at most about lr / (1 - beta1^t) per element */
	*sw = fabsf(w0) + fabsf(p->lr) * (p->optimizer == KN_OPT_ADAM
						  ? 1.0f / (1.0f - p->beta1)
						  : 1.0f + *sm + ga);
}

/* Three steps of every case and dtype against the formulas. */
PATH_TEST(update, matches_formulas)
{
	static float w[LEN], m[LEN], v[LEN], rw[LEN], rm[LEN], rv[LEN];
	static float w0[LEN], m0[LEN], v0[LEN];
	static uint16_t g16[N][LEN + 1];
	static float g32[N][LEN + 1];

	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++)
		for (int t = 0; t < 3; t++) {
			enum kn_dtype dt = (enum kn_dtype)t;
			struct kn_update_params p = cases[c];
			const void *g[N];
			uint64_t seed = 100 + c;

			for (size_t i = 0; i < LEN; i++) {
				w[i] = rw[i] = rnd_float(&seed);
				m[i] = rm[i] = 0.0f;
				v[i] = rv[i] = 0.0f;
			}
			for (p.step = 1; p.step <= 3; p.step++) {
				struct kn__update_coef k = coef_of(&p);

				for (int j = 0; j < N; j++) {
					/* odd element offset: unaligned */
					void *buf =
						dt == KN_DTYPE_FP32
							? (void *)(g32[j] + 1)
							: (void *)(g16[j] + 1);

					fill_random(dt, buf, LEN, &seed);
					g[j] = buf;
				}
				memcpy(w0, rw, sizeof(w0));
				memcpy(m0, rm, sizeof(m0));
				memcpy(v0, rv, sizeof(v0));
				pick(ops, p.optimizer, dt)(&k, w, m, v, g[0],
							   g + 1, N - 1, 0,
							   LEN);
				ref_update(&p, rw, rm, rv, g, N, dt, LEN);
				for (size_t i = 0; i < LEN; i++) {
					float sw, sm, sv;

					term_scales(&p, g, dt, w0[i], m0[i],
						    v0[i], i, &sw, &sm, &sv);
					assert_close("w", i, w[i], rw[i], sw);
					assert_close("m", i, m[i], rm[i], sm);
					assert_close("v", i, v[i], rv[i], sv);
				}
			}
		}
}

/*
 * Fusing changes no rounding: N gradients in one pass give bit for bit
 * what a separate sum and a one-input update give.
 */
PATH_TEST(update, fused_equals_sum_then_update)
{
	static float w1[LEN], w2[LEN], m1[LEN], m2[LEN], v1[LEN], v2[LEN];
	static float grads[N][LEN], sum[LEN];
	const void *g[N], *s[1] = { sum };
	uint64_t seed = 9;

	for (int j = 0; j < N; j++) {
		fill_random(KN_DTYPE_FP32, grads[j], LEN, &seed);
		g[j] = grads[j];
	}
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		struct kn_update_params p = cases[c];
		struct kn__update_coef k;

		p.step = 2;
		k = coef_of(&p);
		twin_state(w1, w2, m1, m2, v1, v2, LEN, &seed);
		/* the fused one in two ranges, as a pool would run it */
		pick(ops, p.optimizer, KN_DTYPE_FP32)(&k, w1, m1, v1, g[0],
						      g + 1, N - 1, 0, 333);
		pick(ops, p.optimizer, KN_DTYPE_FP32)(&k, w1, m1, v1, g[0],
						      g + 1, N - 1, 333, LEN);
		ops->sum_to_f32[KN_DTYPE_FP32](sum, g[0], g + 1, N - 1, 0, LEN,
					       1.0f, false);
		pick(ops, p.optimizer, KN_DTYPE_FP32)(&k, w2, m2, v2, s[0],
						      NULL, 0, 0, LEN);
		cr_assert_eq(memcmp(w1, w2, sizeof(w1)), 0, "case %zu", c);
		cr_assert_eq(memcmp(m1, m2, sizeof(m1)), 0, "case %zu", c);
		cr_assert_eq(memcmp(v1, v2, sizeof(v1)), 0, "case %zu", c);
	}
}

/*
 * Many gradients (23: enough that fp32 and 16-bit inputs alike are summed
 * a tile at a time) over several tiles give bit for bit the same as a
 * plain in-order sum followed by a one-input update.
 */
PATH_TEST(update, many_gradients_tiled)
{
	enum { NG = 23, LG = 36001 };
	static float w1[LG], w2[LG], m1[LG], m2[LG], v1[LG], v2[LG], sum[LG];
	static uint16_t g16[NG][LG];
	static float g32[NG][LG];
	const void *g[NG], *s[1] = { sum };
	uint64_t seed = 31;

	for (int t = 0; t < 3; t++) {
		enum kn_dtype dt = (enum kn_dtype)t;

		for (int j = 0; j < NG; j++) {
			g[j] = dt == KN_DTYPE_FP32 ? (void *)g32[j]
						   : (void *)g16[j];
			fill_random(dt, (void *)g[j], LG, &seed);
		}
		for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
			struct kn_update_params p = cases[c];
			struct kn__update_coef k;

			p.step = 1;
			k = coef_of(&p);
			twin_state(w1, w2, m1, m2, v1, v2, LG, &seed);
			pick(ops, p.optimizer, dt)(&k, w1, m1, v1, g[0], g + 1,
						   NG - 1, 5, LG);
			/* the sum in index order, independent of the kernels */
			for (size_t i = 5; i < LG; i++) {
				sum[i] = ref_load(dt, g[0], i);
				for (int j = 1; j < NG; j++)
					sum[i] += ref_load(dt, g[j], i);
			}
			pick(ops, p.optimizer, KN_DTYPE_FP32)(
				&k, w2, m2, v2, s[0], NULL, 0, 5, LG);
			cr_assert_eq(memcmp(w1, w2, sizeof(w1)), 0,
				     "%s case %zu", kn_dtype_name(dt), c);
			cr_assert_eq(memcmp(m1, m2, sizeof(m1)), 0);
			cr_assert_eq(memcmp(v1, v2, sizeof(v1)), 0);
		}
	}
}

/* Steps worked out by hand, through the public entry point. */
Test(update, hand_computed_steps)
{
	float w[20], m[20], v[20], g[20];
	const void *gp[2] = { g, g };
	struct kn_update_params p = { .optimizer = KN_OPT_MOMENTUM,
				      .lr = 0.125f,
				      .grad_scale = 0.5f,
				      .momentum = 0.5f };

	for (int i = 0; i < 20; i++) {
		w[i] = 1.0f;
		m[i] = 0.0f;
		g[i] = 0.5f;
	}
	/* g = 0.5 (mean of two 0.5s); m = 0.5; w = 1 - 0.0625 */
	cr_assert_eq(kn_update(&p, w, m, NULL, gp, 2, KN_DTYPE_FP32, 20), 0);
	cr_assert_eq(m[19], 0.5f);
	cr_assert_eq(w[19], 0.9375f);
	/* m = 0.25 + 0.5 = 0.75; w = 0.9375 - 0.09375 */
	cr_assert_eq(kn_update(&p, w, m, NULL, gp, 2, KN_DTYPE_FP32, 20), 0);
	cr_assert_eq(m[0], 0.75f);
	cr_assert_eq(w[0], 0.84375f);
	/* Nesterov from rest: m = 0.5, w -= lr * (0.5 + 0.25) */
	p.flags = KN_UPDATE_NESTEROV;
	for (int i = 0; i < 20; i++) {
		w[i] = 1.0f;
		m[i] = 0.0f;
	}
	cr_assert_eq(kn_update(&p, w, m, NULL, gp, 2, KN_DTYPE_FP32, 20), 0);
	cr_assert_eq(w[7], 0.90625f);
	/* SGD with weight decay: g = 0.5 + 0.5 * 1 */
	p = (struct kn_update_params){ .optimizer = KN_OPT_SGD,
				       .lr = 0.25f,
				       .grad_scale = 0.5f,
				       .weight_decay = 0.5f };
	for (int i = 0; i < 20; i++)
		w[i] = 1.0f;
	cr_assert_eq(kn_update(&p, w, NULL, NULL, gp, 2, KN_DTYPE_FP32, 20), 0);
	cr_assert_eq(w[3], 0.75f);
	/*
	 * Adam's first step from zero state, bias-corrected: mhat = g,
	 * vhat = g^2, so every weight moves by lr against its gradient's
	 * sign, whatever its magnitude.
	 */
	p = (struct kn_update_params){ .optimizer = KN_OPT_ADAM,
				       .lr = 0.01f,
				       .grad_scale = 1.0f,
				       .beta1 = 0.9f,
				       .beta2 = 0.999f,
				       .eps = 1e-8f,
				       .step = 1 };
	for (int i = 0; i < 20; i++) {
		w[i] = 1.0f;
		m[i] = v[i] = 0.0f;
		g[i] = (i % 2 ? -1.0f : 1.0f) * ldexpf(1.0f, i - 10);
	}
	cr_assert_eq(kn_update(&p, w, m, v, gp, 1, KN_DTYPE_FP32, 20), 0);
	for (int i = 0; i < 20; i++)
		cr_assert_float_eq(w[i], i % 2 ? 1.01f : 0.99f, 1e-6f,
				   "w[%d] = %.9g", i, (double)w[i]);
}

Test(update, invalid_arguments)
{
	float w[4] = { 0 }, m[4] = { 0 }, v[4] = { 0 };
	const void *g[1] = { w }, *bad[2] = { w, NULL };
	struct kn_update_params sgd = { .optimizer = KN_OPT_SGD, .lr = 1 };
	struct kn_update_params mom = { .optimizer = KN_OPT_MOMENTUM };
	struct kn_update_params adam = { .optimizer = KN_OPT_ADAM,
					 .beta1 = 0.9f,
					 .beta2 = 0.999f,
					 .step = 1 };
	struct kn_update_params p;

	cr_assert_eq(kn_update(NULL, w, m, v, g, 1, KN_DTYPE_FP32, 4), -EINVAL);
	cr_assert_eq(kn_update(&sgd, w, m, v, g, 0, KN_DTYPE_FP32, 4), -EINVAL);
	cr_assert_eq(kn_update(&sgd, NULL, m, v, g, 1, KN_DTYPE_FP32, 4),
		     -EINVAL);
	cr_assert_eq(kn_update(&sgd, w, m, v, NULL, 1, KN_DTYPE_FP32, 4),
		     -EINVAL);
	cr_assert_eq(kn_update(&sgd, w, m, v, bad, 2, KN_DTYPE_FP32, 4),
		     -EINVAL);
	cr_assert_eq(kn_update(&sgd, w, m, v, g, 1, (enum kn_dtype)5, 4),
		     -EINVAL);
	cr_assert_eq(kn_update(&mom, w, NULL, v, g, 1, KN_DTYPE_FP32, 4),
		     -EINVAL);
	cr_assert_eq(kn_update(&adam, w, m, NULL, g, 1, KN_DTYPE_FP32, 4),
		     -EINVAL);
	cr_assert_eq(kn_update(&adam, w, NULL, v, g, 1, KN_DTYPE_FP32, 4),
		     -EINVAL);
	p = sgd;
	p.optimizer = (enum kn_optimizer)7;
	cr_assert_eq(kn_update(&p, w, m, v, g, 1, KN_DTYPE_FP32, 4), -EINVAL);
	p = sgd;
	p.flags = 1u << 5; /* unknown flag */
	cr_assert_eq(kn_update(&p, w, m, v, g, 1, KN_DTYPE_FP32, 4), -EINVAL);
	p.flags = KN_UPDATE_NESTEROV; /* only momentum has Nesterov */
	cr_assert_eq(kn_update(&p, w, m, v, g, 1, KN_DTYPE_FP32, 4), -EINVAL);
	p = adam;
	p.step = 0;
	cr_assert_eq(kn_update(&p, w, m, v, g, 1, KN_DTYPE_FP32, 4), -EINVAL);
	p = adam;
	p.beta2 = 1.0f;
	cr_assert_eq(kn_update(&p, w, m, v, g, 1, KN_DTYPE_FP32, 4), -EINVAL);
	p = adam;
	p.beta1 = NAN;
	cr_assert_eq(kn_update(&p, w, m, v, g, 1, KN_DTYPE_FP32, 4), -EINVAL);
	/* nothing was touched by any of the failed calls */
	for (int i = 0; i < 4; i++)
		cr_assert(w[i] == 0.0f && m[i] == 0.0f && v[i] == 0.0f);
	/* zero elements: a valid call that does nothing */
	cr_assert_eq(
		kn_update(&adam, NULL, NULL, NULL, NULL, 1, KN_DTYPE_FP32, 0),
		0);
}
