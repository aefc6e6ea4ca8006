/* SPDX-License-Identifier: Apache-2.0 */
/*
 * model.c - forward and backward passes of the softmax and MLP models
 * (model.h) over minibatches, on cblas_sgemm.
 *
 * A dense layer is out = in * W + b with W stored [fan_in x fan_out], so
 * the forward product takes no transpose, the weight gradient is
 * in^T * dout and the gradient sent back is dout * W^T; the bias is
 * copied into each output row first and sgemm adds the product to it
 * (beta = 1).  The softmax subtracts each row's largest logit before
 * exponentiating, so no logit can overflow expf(), and takes the loss as
 * log-sum-exp minus the label's logit.  The gradient at the logits,
 * (p - onehot) / batch, already carries the mean over the batch, so every
 * gradient computed from it does too.  The loss is summed in double:
 * evaluating 10,000 examples in float would lose digits.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "model.h"

/* Tensors start at multiples of this many floats (64 bytes). */
#define KN_MODEL_ALIGN 16

struct kn__model_work {
	enum kn__model_kind kind;
	unsigned inputs, hidden, classes; /* the shape it was made for */
	unsigned max_batch;
	float *z;  /* [max_batch x classes]: logits, probabilities, then dZ */
	float *h;  /* [max_batch x hidden]: ReLU activations (MLP) */
	float *dh; /* [max_batch x hidden]: gradient at the hidden layer */
};

static size_t align_up(size_t n)
{
	return (n + KN_MODEL_ALIGN - 1) & ~(size_t)(KN_MODEL_ALIGN - 1);
}

static int add_tensor(struct kn__model *m, const char *key, size_t rows,
		      size_t cols, size_t *off)
{
	struct kn__model_tensor *t = &m->tensor[m->ntensors];
	size_t count;

	if (__builtin_mul_overflow(rows, cols, &count) ||
	    count > SIZE_MAX - KN_MODEL_ALIGN - *off)
		return -EINVAL;
	t->key = key;
	t->offset = *off;
	t->count = count;
	*off = align_up(*off + count);
	m->ntensors++;
	return 0;
}

int kn__model_init(struct kn__model *m, enum kn__model_kind kind,
		   unsigned inputs, unsigned hidden, unsigned classes)
{
	struct kn__model t = { .kind = kind };
	size_t off = 0;
	int ret;

	if (kind == KN__MODEL_SOFTMAX)
		hidden = 0;
	else if (kind != KN__MODEL_MLP)
		return -EINVAL;
	if (!inputs || !classes || (kind == KN__MODEL_MLP && !hidden))
		return -EINVAL;
	if (inputs > INT_MAX || hidden > INT_MAX || classes > INT_MAX)
		return -EINVAL;
	t.inputs = inputs;
	t.hidden = hidden;
	t.classes = classes;
	if (kind == KN__MODEL_SOFTMAX) {
		ret = add_tensor(&t, "w", inputs, classes, &off);
		if (!ret)
			ret = add_tensor(&t, "b", 1, classes, &off);
	} else {
		ret = add_tensor(&t, "w1", inputs, hidden, &off);
		if (!ret)
			ret = add_tensor(&t, "b1", 1, hidden, &off);
		if (!ret)
			ret = add_tensor(&t, "w2", hidden, classes, &off);
		if (!ret)
			ret = add_tensor(&t, "b2", 1, classes, &off);
	}
	if (ret)
		return ret;
	t.nparams = off;
	*m = t;
	return 0;
}

int kn__model_parse(const char *name, enum kn__model_kind *kind)
{
	if (!strcmp(name, "softmax")) {
		*kind = KN__MODEL_SOFTMAX;
		return 0;
	}
	if (!strcmp(name, "mlp")) {
		*kind = KN__MODEL_MLP;
		return 0;
	}
	return -EINVAL;
}

const char *kn__model_name(enum kn__model_kind kind)
{
	switch (kind) {
	case KN__MODEL_SOFTMAX:
		return "softmax";
	case KN__MODEL_MLP:
		return "mlp";
	}
	return "?";
}

/* splitmix64 (Steele, Lea and Flood, 2014): one 64-bit state is all the
 * initialization needs, and it is the same on every machine. */
static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* U(-limit, limit), from 24 random bits: exactly representable steps. */
static void fill_uniform(float *v, size_t n, float limit, uint64_t *state)
{
	for (size_t i = 0; i < n; i++) {
		float u = (float)(splitmix64(state) >> 40) * 0x1p-24f;

		v[i] = (2.0f * u - 1.0f) * limit;
	}
}

void kn__model_init_params(const struct kn__model *m, float *params,
			   uint64_t seed)
{
	const struct kn__model_tensor *w1 = &m->tensor[0], *w2 = &m->tensor[2];

	memset(params, 0, m->nparams * sizeof(*params));
	if (m->kind != KN__MODEL_MLP)
		return;
	fill_uniform(params + w1->offset, w1->count,
		     sqrtf(6.0f / (float)m->inputs), &seed);
	fill_uniform(params + w2->offset, w2->count,
		     sqrtf(6.0f / (float)(m->hidden + m->classes)), &seed);
}

static float *alloc_floats(size_t n)
{
	size_t bytes;

	/* aligned_alloc() wants a multiple of the alignment. */
	if (__builtin_mul_overflow(align_up(n), sizeof(float), &bytes))
		return NULL;
	return aligned_alloc(64, bytes);
}

void kn__model_work_destroy(struct kn__model_work *w)
{
	if (!w)
		return;
	free(w->dh);
	free(w->h);
	free(w->z);
	free(w);
}

int kn__model_work_create(const struct kn__model *m, unsigned max_batch,
			  struct kn__model_work **out)
{
	struct kn__model_work *w;
	size_t nz, nh;

	if (!max_batch || max_batch > INT_MAX || !m->inputs || !m->classes ||
	    (m->kind == KN__MODEL_MLP && !m->hidden))
		return -EINVAL;
	if (__builtin_mul_overflow((size_t)max_batch, m->classes, &nz) ||
	    __builtin_mul_overflow((size_t)max_batch, m->hidden, &nh))
		return -ENOMEM;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->kind = m->kind;
	w->inputs = m->inputs;
	w->hidden = m->hidden;
	w->classes = m->classes;
	w->max_batch = max_batch;
	w->z = alloc_floats(nz);
	if (!w->z)
		goto fail;
	if (m->kind == KN__MODEL_MLP) {
		w->h = alloc_floats(nh);
		w->dh = alloc_floats(nh);
		if (!w->h || !w->dh)
			goto fail;
	}
	*out = w;
	return 0;

fail:
	kn__model_work_destroy(w);
	return -ENOMEM;
}

static int work_fits(const struct kn__model *m, const struct kn__model_work *w)
{
	return w->kind == m->kind && w->inputs == m->inputs &&
	       w->hidden == m->hidden && w->classes == m->classes;
}

static int labels_ok(const uint8_t *y, size_t n, unsigned classes)
{
	for (size_t i = 0; i < n; i++)
		if (y[i] >= classes)
			return 0;
	return 1;
}

/* out[batch x n] = in[batch x k] * W[k x n] + b */
static void dense(const float *in, unsigned k, const float *w, const float *b,
		  unsigned n, unsigned batch, float *out)
{
	for (unsigned i = 0; i < batch; i++)
		memcpy(out + (size_t)i * n, b, n * sizeof(*out));
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)batch,
		    (int)n, (int)k, 1.0f, in, (int)k, w, (int)n, 1.0f, out,
		    (int)n);
}

/* gw[k x n] = in[batch x k]^T * dout[batch x n]; gb[n] = column sums */
static void dense_back(const float *in, unsigned k, const float *dout,
		       unsigned n, unsigned batch, float *gw, float *gb)
{
	cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)k, (int)n,
		    (int)batch, 1.0f, in, (int)k, dout, (int)n, 0.0f, gw,
		    (int)n);
	memset(gb, 0, n * sizeof(*gb));
	for (unsigned i = 0; i < batch; i++)
		for (unsigned j = 0; j < n; j++)
			gb[j] += dout[(size_t)i * n + j];
}

/* Leaves the logits of @batch examples in w->z (and, for the MLP, the
 * hidden activations in w->h). */
static void forward(const struct kn__model *m, struct kn__model_work *w,
		    const float *params, const float *x, unsigned batch)
{
	const struct kn__model_tensor *t = m->tensor;

	if (m->kind == KN__MODEL_SOFTMAX) {
		dense(x, m->inputs, params + t[0].offset, params + t[1].offset,
		      m->classes, batch, w->z);
		return;
	}
	dense(x, m->inputs, params + t[0].offset, params + t[1].offset,
	      m->hidden, batch, w->h);
	for (size_t i = 0; i < (size_t)batch * m->hidden; i++)
		w->h[i] = w->h[i] > 0.0f ? w->h[i] : 0.0f;
	dense(w->h, m->hidden, params + t[2].offset, params + t[3].offset,
	      m->classes, batch, w->z);
}

/*
 * Turns each row of logits into probabilities in place and returns the
 * summed cross-entropy; adds to *correct the rows whose largest logit
 * (the first of equals) is the label.
 */
static double softmax_xent(float *z, unsigned batch, unsigned classes,
			   const uint8_t *y, size_t *correct)
{
	double sum_loss = 0.0;

	for (unsigned i = 0; i < batch; i++) {
		float *row = z + (size_t)i * classes;
		unsigned best = 0;
		float max = row[0], zy, sum = 0.0f, inv;

		for (unsigned j = 1; j < classes; j++) {
			if (row[j] > max) {
				max = row[j];
				best = j;
			}
		}
		*correct += best == y[i];
		zy = row[y[i]] - max;
		for (unsigned j = 0; j < classes; j++) {
			row[j] = expf(row[j] - max);
			sum += row[j];
		}
		/* sum >= 1 (the largest term is exp(0)): the log is finite. */
		sum_loss += (double)(logf(sum) - zy);
		inv = 1.0f / sum;
		for (unsigned j = 0; j < classes; j++)
			row[j] *= inv;
	}
	return sum_loss;
}

/* Zeroes what lies between and after the tensors. */
static void zero_padding(const struct kn__model *m, float *v)
{
	size_t end = 0;

	for (unsigned i = 0; i < m->ntensors; i++) {
		memset(v + end, 0, (m->tensor[i].offset - end) * sizeof(*v));
		end = m->tensor[i].offset + m->tensor[i].count;
	}
	memset(v + end, 0, (m->nparams - end) * sizeof(*v));
}

int kn__model_grad(const struct kn__model *m, struct kn__model_work *w,
		   const float *params, const float *x, const uint8_t *y,
		   unsigned batch, float *grads, float *loss)
{
	const struct kn__model_tensor *t = m->tensor;
	unsigned c = m->classes;
	size_t correct = 0;
	float scale, *dz = w->z;
	double sum_loss;

	if (!batch || batch > w->max_batch || !work_fits(m, w) ||
	    !labels_ok(y, batch, c))
		return -EINVAL;
	forward(m, w, params, x, batch);
	sum_loss = softmax_xent(w->z, batch, c, y, &correct);
	/* d loss / d z = (p - onehot(y)) / batch */
	scale = 1.0f / (float)batch;
	for (unsigned i = 0; i < batch; i++) {
		float *row = dz + (size_t)i * c;

		row[y[i]] -= 1.0f;
		for (unsigned j = 0; j < c; j++)
			row[j] *= scale;
	}
	if (m->kind == KN__MODEL_SOFTMAX) {
		dense_back(x, m->inputs, dz, c, batch, grads + t[0].offset,
			   grads + t[1].offset);
	} else {
		dense_back(w->h, m->hidden, dz, c, batch, grads + t[2].offset,
			   grads + t[3].offset);
		/* dH = dZ * W2^T, then through the ReLU: h > 0 iff active */
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)batch,
			    (int)m->hidden, (int)c, 1.0f, dz, (int)c,
			    params + t[2].offset, (int)c, 0.0f, w->dh,
			    (int)m->hidden);
		for (size_t i = 0; i < (size_t)batch * m->hidden; i++)
			w->dh[i] = w->h[i] > 0.0f ? w->dh[i] : 0.0f;
		dense_back(x, m->inputs, w->dh, m->hidden, batch,
			   grads + t[0].offset, grads + t[1].offset);
	}
	zero_padding(m, grads);
	*loss = (float)(sum_loss / batch);
	return 0;
}

int kn__model_evaluate(const struct kn__model *m, struct kn__model_work *w,
		       const float *params, const float *x, const uint8_t *y,
		       size_t n, double *accuracy, double *loss)
{
	double sum_loss = 0.0;
	size_t correct = 0;

	if (!n || !work_fits(m, w) || !labels_ok(y, n, m->classes))
		return -EINVAL;
	for (size_t done = 0; done < n;) {
		unsigned b = n - done < w->max_batch ? (unsigned)(n - done)
						     : w->max_batch;

		forward(m, w, params, x + done * m->inputs, b);
		sum_loss +=
			softmax_xent(w->z, b, m->classes, y + done, &correct);
		done += b;
	}
	*accuracy = (double)correct / (double)n;
	*loss = sum_loss / (double)n;
	return 0;
}

void kn__model_gather(const struct kn__model *m, const float *x,
		      const uint8_t *y, const uint32_t *idx, unsigned n,
		      float *bx, uint8_t *by)
{
	size_t row = m->inputs;

	for (unsigned i = 0; i < n; i++) {
		memcpy(bx + i * row, x + idx[i] * row, row * sizeof(*bx));
		by[i] = y[idx[i]];
	}
}
