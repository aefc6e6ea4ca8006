/* SPDX-License-Identifier: Apache-2.0 */
/*
 * logistic.c - the smallest whole Kanel program: logistic regression on a
 * synthetic task, trained by every worker of a job under whatever
 * protocol the job runs, with nothing but kanel.h.
 *
 *   cc logistic.c $(pkg-config --cflags --libs kanel) -lm -o logistic
 *   kanel launch --workers 4 --sync esp -- ./logistic
 *
 * Each worker draws its own samples of one task (labels from a hidden
 * weight vector), computes the gradient of the log loss on a minibatch,
 * and hands the step to kn_worker_step_done(): the engine pushes it, or
 * takes a local step, as the protocol says.  Worker 0 reports the
 * accuracy of the model it ends with on samples no worker trained on,
 * and every worker exits 1 if it is below 0.9.  Arguments: [STEPS].
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <kanel.h>

#define DIM   16 /* features; the model is DIM weights and a bias */
#define BATCH 32

/* xorshift64*: the same stream for the same seed on every machine. */
static double uniform(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return (double)((*s * 2685821657736338717ull) >> 11) * 0x1p-53;
}

static float truth[DIM]; /* the hidden weights, the same everywhere */

/* One sample: features in [-1, 1), labelled by the hidden weights. */
static float sample(uint64_t *s, float x[DIM])
{
	double z = 0.1;

	for (int j = 0; j < DIM; j++) {
		x[j] = (float)(2 * uniform(s) - 1);
		z += (double)truth[j] * x[j];
	}
	return z > 0 ? 1.0f : 0.0f;
}

static float predict(const float *model, const float x[DIM])
{
	double z = model[DIM];

	for (int j = 0; j < DIM; j++)
		z += (double)model[j] * x[j];
	return (float)(1 / (1 + exp(-z)));
}

/* The mean gradient of the log loss over one minibatch. */
static void gradient(const float *model, uint64_t *s, float *grad)
{
	float x[DIM];

	for (int j = 0; j <= DIM; j++)
		grad[j] = 0;
	for (int b = 0; b < BATCH; b++) {
		float y = sample(s, x);
		float e = (predict(model, x) - y) / BATCH;

		for (int j = 0; j < DIM; j++)
			grad[j] += e * x[j];
		grad[DIM] += e;
	}
}

static double accuracy(const float *model)
{
	uint64_t s = 0x5eed;
	float x[DIM];
	int right = 0;

	for (int i = 0; i < 2000; i++) {
		float y = sample(&s, x);

		right += (predict(model, x) > 0.5f) == (y > 0.5f);
	}
	return right / 2000.0;
}

int main(int argc, char **argv)
{
	struct kn_worker_options opt = { .rank = -1 };
	float model[DIM + 1] = { 0 }, grad[DIM + 1];
	long steps = argc > 1 ? atol(argv[1]) : 300;
	struct kn_job_info job;
	struct kn_worker *w;
	uint64_t seed = 42;
	double acc;
	int ret;

	for (int j = 0; j < DIM; j++)
		truth[j] = (float)(2 * uniform(&seed) - 1);
	ret = kn_worker_create(&opt, &w);
	if (ret) {
		fprintf(stderr, "logistic: cannot join the job: %d\n", ret);
		return 1;
	}
	seed = 0x9e3779b97f4a7c15ull * (kn_worker_rank(w) + 1);
	kn_worker_job(w, &job);
	ret = kn_worker_register(w, "model", KN_DTYPE_FP32, DIM + 1, model,
				 grad);
	if (!ret)
		ret = kn_worker_start(w);
	for (long i = 0; !ret && i < steps; i++) {
		gradient(model, &seed, grad);
		ret = kn_worker_step_done(w, -1, 0, NULL);
	}
	if (!ret)
		ret = kn_worker_finish(w);
	if (ret) {
		fprintf(stderr, "logistic: worker %u: %d\n", kn_worker_rank(w),
			ret);
		kn_worker_destroy(w);
		return 1;
	}
	acc = accuracy(model);
	if (kn_worker_rank(w) == 0)
		printf("logistic: %s, %u workers, %ld steps: accuracy %.3f\n",
		       job.protocol_name, job.workers, steps, acc);
	kn_worker_destroy(w);
	return acc >= 0.9 ? 0 : 1;
}
