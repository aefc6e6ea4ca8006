/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_model.c - the models of `kanel train` (tools/train/model.c): the
 * layout of the flat parameter vector; the gradient of both models
 * against central finite differences of an independent double-precision
 * implementation written here from model.h's description; the loss at
 * zero; evaluate() on a case worked by hand; and a short seeded SGD run
 * on the real Fashion-MNIST that must learn (and repeat itself bit for
 * bit).
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>
#include <criterion/criterion.h>

#include "idx.h"
#include "model.h"

/* `kanel train` runs OpenBLAS on one thread a worker; so do we, which
 * also makes the sums' order, and so the results, repeatable. */
static void one_thread(void)
{
	openblas_set_num_threads(1);
}

TestSuite(model, .init = one_thread);

static uint64_t rng_state;

static double uniform(double lo, double hi)
{
	rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
	return lo + (hi - lo) * (double)(rng_state >> 11) * 0x1p-53;
}

Test(model, init_layout)
{
	struct kn__model m;
	static const char *const keys[] = { "w1", "b1", "w2", "b2" };

	cr_assert_eq(kn__model_init(&m, KN__MODEL_SOFTMAX, 784, 128, 10), 0);
	cr_assert_eq(m.hidden, 0, "softmax keeps no hidden size");
	cr_assert_eq(m.ntensors, 2);
	cr_assert_str_eq(m.tensor[0].key, "w");
	cr_assert_str_eq(m.tensor[1].key, "b");
	cr_assert_eq(m.tensor[0].offset, 0);
	cr_assert_eq(m.tensor[0].count, 7840);
	cr_assert_eq(m.tensor[1].offset, 7840);
	cr_assert_eq(m.tensor[1].count, 10);
	cr_assert_eq(m.nparams, 7856);

	cr_assert_eq(kn__model_init(&m, KN__MODEL_MLP, 20, 16, 10), 0);
	cr_assert_eq(m.ntensors, 4);
	for (unsigned i = 0; i < 4; i++) {
		cr_assert_str_eq(m.tensor[i].key, keys[i]);
		cr_assert_eq(m.tensor[i].offset % 16, 0);
		if (i)
			cr_assert_geq(m.tensor[i].offset,
				      m.tensor[i - 1].offset +
					      m.tensor[i - 1].count);
	}
	cr_assert_eq(m.tensor[0].count, 320);
	cr_assert_eq(m.tensor[1].count, 16);
	cr_assert_eq(m.tensor[2].count, 160);
	cr_assert_eq(m.tensor[3].count, 10);
	cr_assert_eq(m.tensor[3].offset, 496);
	cr_assert_eq(m.nparams, 512);
	cr_assert_eq(m.nparams % 16, 0);
}

Test(model, init_rejects_zero_sizes)
{
	struct kn__model m = { .inputs = 12345 };

	cr_assert_eq(kn__model_init(&m, KN__MODEL_SOFTMAX, 0, 0, 10), -EINVAL);
	cr_assert_eq(kn__model_init(&m, KN__MODEL_SOFTMAX, 784, 0, 0), -EINVAL);
	cr_assert_eq(kn__model_init(&m, KN__MODEL_MLP, 0, 16, 10), -EINVAL);
	cr_assert_eq(kn__model_init(&m, KN__MODEL_MLP, 784, 0, 10), -EINVAL);
	cr_assert_eq(kn__model_init(&m, KN__MODEL_MLP, 784, 16, 0), -EINVAL);
	cr_assert_eq(kn__model_init(&m, (enum kn__model_kind)7, 784, 16, 10),
		     -EINVAL);
	cr_assert_eq(kn__model_init(&m, KN__MODEL_MLP, 784,
				    (unsigned)INT_MAX + 1, 10),
		     -EINVAL);
	cr_assert_eq(m.inputs, 12345, "model written on failure");
}

Test(model, parse_and_name)
{
	enum kn__model_kind k = KN__MODEL_MLP;

	cr_assert_eq(kn__model_parse("softmax", &k), 0);
	cr_assert_eq(k, KN__MODEL_SOFTMAX);
	cr_assert_eq(kn__model_parse("mlp", &k), 0);
	cr_assert_eq(k, KN__MODEL_MLP);
	cr_assert_eq(kn__model_parse("MLP", &k), -EINVAL);
	cr_assert_eq(kn__model_parse("", &k), -EINVAL);
	cr_assert_eq(k, KN__MODEL_MLP);
	cr_assert_str_eq(kn__model_name(KN__MODEL_SOFTMAX), "softmax");
	cr_assert_str_eq(kn__model_name(KN__MODEL_MLP), "mlp");
	cr_assert_str_eq(kn__model_name((enum kn__model_kind)9), "?");
}

/* Is v[i] inside one of the tensors (not padding)? */
static int in_tensor(const struct kn__model *m, size_t i)
{
	for (unsigned t = 0; t < m->ntensors; t++)
		if (i >= m->tensor[t].offset &&
		    i < m->tensor[t].offset + m->tensor[t].count)
			return 1;
	return 0;
}

Test(model, init_params_seeded)
{
	struct kn__model m;
	float *a, *b, *c;
	float lim1 = sqrtf(6.0f / 20), lim2 = sqrtf(6.0f / (16 + 10));

	cr_assert_eq(kn__model_init(&m, KN__MODEL_MLP, 20, 16, 10), 0);
	a = malloc(m.nparams * sizeof(float));
	b = malloc(m.nparams * sizeof(float));
	c = malloc(m.nparams * sizeof(float));
	cr_assert(a && b && c);
	memset(a, 0xff, m.nparams * sizeof(float)); /* NaN */
	kn__model_init_params(&m, a, 1);
	kn__model_init_params(&m, b, 1);
	kn__model_init_params(&m, c, 2);
	cr_assert(!memcmp(a, b, m.nparams * sizeof(float)));
	cr_assert(memcmp(a, c, m.nparams * sizeof(float)));
	for (size_t i = 0; i < m.tensor[0].count; i++)
		cr_assert(fabsf(a[m.tensor[0].offset + i]) <= lim1);
	for (size_t i = 0; i < m.tensor[2].count; i++)
		cr_assert(fabsf(a[m.tensor[2].offset + i]) <= lim2);
	for (size_t i = 0; i < m.nparams; i++)
		if (!in_tensor(&m, i) || i >= m.tensor[3].offset ||
		    (i >= m.tensor[1].offset && i < m.tensor[2].offset))
			cr_assert_eq(a[i], 0.0f, "a[%zu] = %g", i, a[i]);
	free(a);
	free(b);
	free(c);

	cr_assert_eq(kn__model_init(&m, KN__MODEL_SOFTMAX, 20, 0, 10), 0);
	a = malloc(m.nparams * sizeof(float));
	cr_assert(a);
	memset(a, 0xff, m.nparams * sizeof(float));
	kn__model_init_params(&m, a, 1);
	for (size_t i = 0; i < m.nparams; i++)
		cr_assert_eq(a[i], 0.0f);
	free(a);
}

/*
 * The reference: the mean cross-entropy in double, computed the slow
 * obvious way from the layout model.h documents.  @mask, if not NULL,
 * gets the ReLU pattern (batch x hidden) so that the caller can see a
 * finite difference step across a kink.
 */
static double ref_loss(const struct kn__model *m, const double *p,
		       const float *x, const uint8_t *y, unsigned batch,
		       uint8_t *mask)
{
	const struct kn__model_tensor *t = m->tensor, *w, *b;
	unsigned c = m->classes, hd = m->hidden, k;
	double in[64], z[16], sum = 0.0;

	cr_assert(m->inputs <= 64 && hd <= 64 && c <= 16);
	for (unsigned e = 0; e < batch; e++) {
		const float *xe = x + (size_t)e * m->inputs;
		double max, s = 0.0;

		/* in: what the last layer sees, x or the hidden layer */
		if (m->kind == KN__MODEL_MLP) {
			for (unsigned j = 0; j < hd; j++) {
				double a = p[t[1].offset + j];

				for (unsigned i = 0; i < m->inputs; i++)
					a += xe[i] *
					     p[t[0].offset + i * hd + j];
				in[j] = a > 0 ? a : 0;
				if (mask)
					mask[e * hd + j] = a > 0;
			}
			k = hd;
			w = &t[2];
			b = &t[3];
		} else {
			for (unsigned i = 0; i < m->inputs; i++)
				in[i] = xe[i];
			k = m->inputs;
			w = &t[0];
			b = &t[1];
		}
		for (unsigned j = 0; j < c; j++) {
			z[j] = p[b->offset + j];
			for (unsigned i = 0; i < k; i++)
				z[j] += in[i] * p[w->offset + i * c + j];
		}
		max = z[0];
		for (unsigned j = 1; j < c; j++)
			max = z[j] > max ? z[j] : max;
		for (unsigned j = 0; j < c; j++)
			s += exp(z[j] - max);
		sum += max + log(s) - z[y[e]];
	}
	return sum / batch;
}

/*
 * Checks every coordinate of every tensor of @m's gradient at random
 * parameters and data against central differences of ref_loss().
 */
static void check_gradient(enum kn__model_kind kind, unsigned inputs,
			   unsigned hidden, unsigned classes, unsigned batch)
{
	const double eps = 1e-6, tol = 1e-3, floor = 1e-4;
	struct kn__model m;
	struct kn__model_work *w;
	float *params, *grads, *x, loss;
	double *p, ref, worst = 0.0;
	uint8_t *y, *mask, *mask2;
	unsigned active = 0, kinks = 0;
	int ret;

	cr_assert_eq(kn__model_init(&m, kind, inputs, hidden, classes), 0);
	cr_assert_eq(kn__model_work_create(&m, batch, &w), 0);
	params = malloc(m.nparams * sizeof(float));
	grads = malloc(m.nparams * sizeof(float));
	p = malloc(m.nparams * sizeof(double));
	x = malloc((size_t)batch * inputs * sizeof(float));
	y = malloc(batch);
	mask = calloc((size_t)batch * (hidden ? hidden : 1), 1);
	mask2 = calloc((size_t)batch * (hidden ? hidden : 1), 1);
	cr_assert(params && grads && p && x && y && mask && mask2);

	rng_state = 12345 + kind;
	kn__model_init_params(&m, params, 7);
	/* Nonzero everywhere, biases included, so that every term counts. */
	for (size_t i = 0; i < m.nparams; i++)
		if (in_tensor(&m, i))
			params[i] += (float)uniform(-0.3, 0.3);
	for (size_t i = 0; i < (size_t)batch * inputs; i++)
		x[i] = (float)uniform(-1.0, 1.0);
	for (unsigned e = 0; e < batch; e++)
		y[e] = (uint8_t)(uniform(0, classes));
	for (size_t i = 0; i < m.nparams; i++)
		p[i] = params[i];

	memset(grads, 0xff, m.nparams * sizeof(float)); /* NaN */
	ret = kn__model_grad(&m, w, params, x, y, batch, grads, &loss);
	cr_assert_eq(ret, 0);
	ref = ref_loss(&m, p, x, y, batch, mask);
	cr_assert(fabs(loss - ref) < 1e-5 * ref, "loss %.9g, reference %.9g",
		  loss, ref);
	if (kind == KN__MODEL_MLP) {
		for (size_t i = 0; i < (size_t)batch * hidden; i++)
			active += mask[i];
		cr_log_info("mlp: %u of %u hidden units active", active,
			    batch * hidden);
		/* Both sides of the ReLU must be exercised. */
		cr_assert(active > batch * hidden / 5 &&
				  active < batch * hidden * 4 / 5,
			  "%u of %u units active", active, batch * hidden);
	}

	for (size_t i = 0; i < m.nparams; i++) {
		double save = p[i], plus, minus, fd, err;

		if (!in_tensor(&m, i)) {
			cr_assert_eq(grads[i], 0.0f, "padding grads[%zu]", i);
			continue;
		}
		p[i] = save + eps;
		plus = ref_loss(&m, p, x, y, batch, mask);
		p[i] = save - eps;
		minus = ref_loss(&m, p, x, y, batch, mask2);
		p[i] = save;
		if (kind == KN__MODEL_MLP &&
		    memcmp(mask, mask2, (size_t)batch * hidden)) {
			kinks++; /* the difference straddles a kink */
			continue;
		}
		fd = (plus - minus) / (2 * eps);
		err = fabs(grads[i] - fd) /
		      fmax(floor, fmax(fabs(fd), fabs(grads[i])));
		worst = fmax(worst, err);
		cr_assert(err < tol, "%s: param %zu: grad %.9g, fd %.9g",
			  kn__model_name(kind), i, grads[i], fd);
	}
	cr_log_info("%s: worst relative error %.2e, %u kinks skipped",
		    kn__model_name(kind), worst, kinks);
	cr_assert_lt(kinks, 5);

	free(mask2);
	free(mask);
	free(y);
	free(x);
	free(p);
	free(grads);
	free(params);
	kn__model_work_destroy(w);
}

Test(model, softmax_gradient_matches_finite_differences)
{
	check_gradient(KN__MODEL_SOFTMAX, 20, 0, 10, 8);
}

Test(model, mlp_gradient_matches_finite_differences)
{
	check_gradient(KN__MODEL_MLP, 20, 16, 10, 8);
}

Test(model, zero_softmax_loss_is_ln10)
{
	struct kn__model m;
	struct kn__model_work *w;
	float *params, *grads, x[3 * 784], loss;
	uint8_t y[3] = { 0, 4, 9 };

	cr_assert_eq(kn__model_init(&m, KN__MODEL_SOFTMAX, 784, 0, 10), 0);
	cr_assert_eq(kn__model_work_create(&m, 3, &w), 0);
	params = malloc(m.nparams * sizeof(float));
	grads = malloc(m.nparams * sizeof(float));
	cr_assert(params && grads);
	kn__model_init_params(&m, params, 99);
	for (size_t i = 0; i < 3 * 784; i++)
		x[i] = (float)(i % 17) / 16.0f;
	cr_assert_eq(kn__model_grad(&m, w, params, x, y, 3, grads, &loss), 0);
	cr_assert_float_eq(loss, logf(10.0f), 1e-6, "loss %.9g", loss);
	/* Bias gradient at zero: mean of (1/10 - onehot). */
	for (unsigned c = 0; c < 10; c++) {
		float want = 0.1f - (c == 0 || c == 4 || c == 9) / 3.0f;

		cr_assert_float_eq(grads[m.tensor[1].offset + c], want, 1e-6);
	}
	free(grads);
	free(params);
	kn__model_work_destroy(w);
}

/*
 * Softmax, 2 inputs, 3 classes: logits are (x0, x1, 0.5).  Five examples
 * in batches of 2, 2 and 1; three are right (one of them by the tie
 * rule: equal logits go to the lower class).
 */
Test(model, evaluate_hand_made)
{
	struct kn__model m;
	struct kn__model_work *w;
	float params[32] = { 0 };
	const float x[5][2] = {
		{ 2, 0 }, { 0, 2 }, { 0, 0 }, { 1, 1 }, { 3, 1 }
	};
	const uint8_t y[5] = { 0, 1, 0, 1, 0 };
	double acc, loss, want = 0.0;

	cr_assert_eq(kn__model_init(&m, KN__MODEL_SOFTMAX, 2, 0, 3), 0);
	params[m.tensor[0].offset + 0 * 3 + 0] = 1; /* w[0][0] */
	params[m.tensor[0].offset + 1 * 3 + 1] = 1; /* w[1][1] */
	params[m.tensor[1].offset + 2] = 0.5f;
	cr_assert_eq(kn__model_work_create(&m, 2, &w), 0);
	cr_assert_eq(
		kn__model_evaluate(&m, w, params, &x[0][0], y, 5, &acc, &loss),
		0);
	cr_assert_eq(acc, 0.6, "accuracy %g", acc);
	for (int e = 0; e < 5; e++) {
		double z[3] = { x[e][0], x[e][1], 0.5 };

		want += log(exp(z[0]) + exp(z[1]) + exp(z[2])) - z[y[e]];
	}
	want /= 5;
	cr_assert(fabs(loss - want) < 1e-6, "loss %.9g, want %.9g", loss, want);
	cr_assert_eq(
		kn__model_evaluate(&m, w, params, &x[0][0], y, 0, &acc, &loss),
		-EINVAL);
	kn__model_work_destroy(w);
}

Test(model, grad_rejects_bad_arguments)
{
	struct kn__model m, other;
	struct kn__model_work *w;
	float params[32] = { 0 }, grads[32], x[8] = { 0 }, loss = 42.0f;
	uint8_t y[4] = { 0, 1, 2, 0 };

	cr_assert_eq(kn__model_init(&m, KN__MODEL_SOFTMAX, 2, 0, 3), 0);
	cr_assert_eq(kn__model_init(&other, KN__MODEL_SOFTMAX, 2, 0, 4), 0);
	cr_assert_eq(kn__model_work_create(&m, 0, &w), -EINVAL);
	cr_assert_eq(kn__model_work_create(&m, 3, &w), 0);
	for (int i = 0; i < 32; i++)
		grads[i] = 7.0f;
	cr_assert_eq(kn__model_grad(&m, w, params, x, y, 0, grads, &loss),
		     -EINVAL);
	cr_assert_eq(kn__model_grad(&m, w, params, x, y, 4, grads, &loss),
		     -EINVAL);
	y[1] = 3;
	cr_assert_eq(kn__model_grad(&m, w, params, x, y, 3, grads, &loss),
		     -EINVAL);
	y[1] = 1;
	cr_assert_eq(kn__model_grad(&other, w, params, x, y, 3, grads, &loss),
		     -EINVAL);
	for (int i = 0; i < 32; i++)
		cr_assert_eq(grads[i], 7.0f, "grads written on failure");
	cr_assert_eq(loss, 42.0f);
	cr_assert_eq(kn__model_grad(&m, w, params, x, y, 3, grads, &loss), 0);
	kn__model_work_destroy(w);
	kn__model_work_destroy(NULL);
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/*
 * Plain minibatch SGD, seeded: the permutation of each epoch comes from
 * kn__shuffle(seed + epoch).  Returns the parameters (the caller frees).
 */
static float *sgd(const struct kn__model *m, const struct kn__dataset *tr,
		  unsigned steps, unsigned batch, float lr, uint64_t seed)
{
	struct kn__model_work *w;
	float *params, *grads, *bx, loss;
	uint32_t *order;
	uint8_t *by;
	uint32_t pos = tr->count;
	uint64_t epoch = 0;

	params = malloc(m->nparams * sizeof(float));
	grads = malloc(m->nparams * sizeof(float));
	bx = malloc((size_t)batch * m->inputs * sizeof(float));
	by = malloc(batch);
	order = malloc(tr->count * sizeof(*order));
	cr_assert(params && grads && bx && by && order);
	cr_assert_eq(kn__model_work_create(m, batch, &w), 0);
	kn__model_init_params(m, params, seed);
	for (unsigned s = 0; s < steps; s++) {
		if (pos + batch > tr->count) {
			kn__shuffle(order, tr->count, seed + epoch++);
			pos = 0;
		}
		kn__model_gather(m, tr->x, tr->y, order + pos, batch, bx, by);
		pos += batch;
		cr_assert_eq(kn__model_grad(m, w, params, bx, by, batch, grads,
					    &loss),
			     0);
		cr_assert(isfinite(loss));
		for (size_t i = 0; i < m->nparams; i++)
			params[i] -= lr * grads[i];
	}
	kn__model_work_destroy(w);
	free(order);
	free(by);
	free(bx);
	free(grads);
	return params;
}

static void load_or_skip(struct kn__dataset *tr, struct kn__dataset *te)
{
	char err[512] = "";
	int ret;

	if (access(KN_FASHION_MNIST_DIR, F_OK))
		cr_skip_test("%s is missing (Debian's package "
			     "dataset-fashion-mnist provides it)",
			     KN_FASHION_MNIST_DIR);
	ret = kn__dataset_load(KN_FASHION_MNIST_DIR, "train", tr, err,
			       sizeof(err));
	cr_assert_eq(ret, 0, "%s", err);
	ret = kn__dataset_load(KN_FASHION_MNIST_DIR, "t10k", te, err,
			       sizeof(err));
	cr_assert_eq(ret, 0, "%s", err);
}

/* Trains @kind twice with one seed; the test accuracy must pass @floor
 * and the two runs must agree bit for bit. */
static void train_twice(enum kn__model_kind kind, unsigned hidden,
			unsigned steps, unsigned batch, float lr, double floor)
{
	struct kn__dataset tr, te;
	struct kn__model m;
	struct kn__model_work *w;
	float *a, *b;
	double acc, loss, t0, t1;

	load_or_skip(&tr, &te);
	cr_assert_eq(kn__model_init(&m, kind, tr.rows * tr.cols, hidden, 10),
		     0);
	t0 = now();
	a = sgd(&m, &tr, steps, batch, lr, 2024);
	t1 = now();
	b = sgd(&m, &tr, steps, batch, lr, 2024);
	cr_assert(!memcmp(a, b, m.nparams * sizeof(float)),
		  "two runs with one seed differ");
	cr_assert_eq(kn__model_work_create(&m, 1000, &w), 0);
	cr_assert_eq(
		kn__model_evaluate(&m, w, a, te.x, te.y, te.count, &acc, &loss),
		0);
	cr_log_info("%s: %u steps of %u in %.2f s: test accuracy %.4f, "
		    "loss %.4f",
		    kn__model_name(kind), steps, batch, t1 - t0, acc, loss);
	cr_assert_gt(acc, floor, "%s: test accuracy %.4f", kn__model_name(kind),
		     acc);
	kn__model_work_destroy(w);
	free(b);
	free(a);
	kn__dataset_fini(&te);
	kn__dataset_fini(&tr);
}

Test(model, sgd_softmax_learns_fashion_mnist)
{
	train_twice(KN__MODEL_SOFTMAX, 0, 3000, 64, 0.2f, 0.75);
}

Test(model, sgd_mlp_learns_fashion_mnist)
{
	train_twice(KN__MODEL_MLP, 64, 2000, 64, 0.1f, 0.80);
}
