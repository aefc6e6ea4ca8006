/* SPDX-License-Identifier: Apache-2.0 */
/*
 * model.h - the two models `kanel train` trains on Fashion-MNIST:
 * softmax regression and a one-hidden-layer perceptron (ReLU), both with
 * a mean cross-entropy loss.
 *
 * A model's parameters are one flat float vector, the unit the engine
 * exchanges; struct kn__model says where each tensor lies in it.  All
 * weights are row-major with the input index first, so that the forward
 * pass is a plain X * W:
 *   softmax: "w" [inputs x classes], "b" [classes];
 *   mlp:     "w1" [inputs x hidden], "b1" [hidden],
 *            "w2" [hidden x classes], "b2" [classes].
 * Each tensor starts at a multiple of 16 floats (64 bytes) and nparams is
 * a multiple of 16; the padding between tensors is always zero, in
 * parameters and gradients alike.
 *
 * The matrix products are OpenBLAS's cblas_sgemm; the caller chooses its
 * threads (`kanel train` calls openblas_set_num_threads(1) and runs one
 * worker a core).  A struct kn__model is plain shapes, shared freely; a
 * struct kn__model_work is scratch for one thread at a time.  Nothing
 * here blocks.
 */
#ifndef KN_TRAIN_MODEL_H
#define KN_TRAIN_MODEL_H

#include <stddef.h>
#include <stdint.h>

enum kn__model_kind {
	KN__MODEL_SOFTMAX,
	KN__MODEL_MLP,
};

/* One tensor: @count floats from @offset (in floats) of the flat vector. */
struct kn__model_tensor {
	const char *key;
	size_t offset, count;
};

struct kn__model {
	enum kn__model_kind kind;
	unsigned inputs, hidden, classes; /* hidden = 0 for softmax */
	size_t nparams;			  /* floats in the flat vector */
	unsigned ntensors;
	struct kn__model_tensor tensor[4]; /* "w","b" or "w1","b1","w2","b2" */
};

/* Scratch for one thread, sized for a maximum batch. */
struct kn__model_work;

/*
 * kn__model_init - fill @m with the shapes of a @kind model; allocates
 * nothing.  @hidden is ignored for softmax (m->hidden is then 0), so a
 * caller may pass its --hidden setting whatever the kind.  Returns 0, or
 * -EINVAL for an unknown kind, a zero size, or a size past INT_MAX (the
 * BLAS interface counts in int).  @m is filled only on success.
 */
int kn__model_init(struct kn__model *m, enum kn__model_kind kind,
		   unsigned inputs, unsigned hidden, unsigned classes);

/* kn__model_parse - "softmax" or "mlp" into @kind; 0 or -EINVAL. */
int kn__model_parse(const char *name, enum kn__model_kind *kind);

/* kn__model_name - the name kn__model_parse() takes; "?" if unknown. */
const char *kn__model_name(enum kn__model_kind kind);

/*
 * kn__model_init_params - write @m->nparams initial floats into @params,
 * the same for the same @seed on every machine.  Softmax starts at zero
 * (its loss is convex; zero gives a loss of exactly ln(classes)).  The
 * MLP draws w1 He-uniform, U(+-sqrt(6 / inputs)), because the ReLU after
 * it zeroes half the variance that Glorot would keep; w2 feeds the
 * softmax linearly and is Glorot-uniform, U(+-sqrt(6 / (hidden +
 * classes))); biases and padding are zero.
 */
void kn__model_init_params(const struct kn__model *m, float *params,
			   uint64_t seed);

/*
 * kn__model_work_create - allocate scratch for batches of up to
 * @max_batch examples of @m into *@out.  Returns 0, -EINVAL (max_batch 0
 * or past INT_MAX, or a bad @m) or -ENOMEM.
 */
int kn__model_work_create(const struct kn__model *m, unsigned max_batch,
			  struct kn__model_work **out);

/* kn__model_work_destroy - free @w; NULL-safe. */
void kn__model_work_destroy(struct kn__model_work *w);

/*
 * kn__model_grad - the mean cross-entropy of @batch examples and its
 * gradient (also the mean over the batch).  @x holds @batch rows of
 * @m->inputs floats, @y their labels (each < @m->classes).  Writes all
 * @m->nparams floats of @grads (padding zero) and *@loss.  Allocates
 * nothing.  @params, @x and @y are only read.  Returns 0, or -EINVAL
 * (batch 0 or past the work's max_batch, a work made for another shape,
 * a label out of range) with nothing written.
 */
int kn__model_grad(const struct kn__model *m, struct kn__model_work *w,
		   const float *params, const float *x, const uint8_t *y,
		   unsigned batch, float *grads, float *loss);

/*
 * kn__model_evaluate - accuracy (the fraction of examples whose largest
 * logit is the label; a tie goes to the lower class) and mean loss over
 * @n examples, in batches of the work's max_batch.  Returns 0, or -EINVAL
 * (n 0, a work made for another shape, a label out of range) with nothing
 * written.
 */
int kn__model_evaluate(const struct kn__model *m, struct kn__model_work *w,
		       const float *params, const float *x, const uint8_t *y,
		       size_t n, double *accuracy, double *loss);

/*
 * kn__model_gather - copy the examples @idx[0 .. n - 1] of (@x, @y) into
 * the contiguous minibatch (@bx, @by) that kn__model_grad() takes.
 */
void kn__model_gather(const struct kn__model *m, const float *x,
		      const uint8_t *y, const uint32_t *idx, unsigned n,
		      float *bx, uint8_t *by);

#endif /* KN_TRAIN_MODEL_H */
