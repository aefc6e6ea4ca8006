/* SPDX-License-Identifier: Apache-2.0 */
/*
 * worker_rule.c - kn_worker_step_done, on the program's thread: under
 * ESP and PSP the worker takes local steps with its own optimizer, and
 * its worker rule (sync/) says when to push the model delta and when to
 * wait for the merged model; timings for the planners; the local-step
 * buffers.  Under other protocols a step is one pushpull.
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "roles.h"
#include "worker_priv.h"

void kn__wk_local_free(struct wk_tensor *t)
{
	if (!t->user_grads)
		return; /* not a local-step job's: nothing of ours */
	free(t->grads);
	free(t->inbox);
	free(t->anchor);
	free(t->at_push);
	free(t->m);
	free(t->v);
}

/*
 * A local-step job's tensor: the program's gradients are read by
 * kn_worker_step_done alone; pushes read our delta buffer, pulls land
 * in our inbox, and the anchor, the copy at push time and the inner
 * optimizer's state (@optimizer's) are ours.  fp32 only: the merge is done in fp32.
 */
int kn__wk_local_buffers(struct wk_tensor *t, uint32_t optimizer)
{
	size_t n = t->d.len;

	if (t->d.dtype != KN_DTYPE_FP32) {
		kn__log_as("worker",
			   "tensor '%s' is %s: workers that push model "
			   "deltas (esp, predicted; any protocol but bsp "
			   "under --optimizer sum) keep fp32 tensors only",
			   t->d.key, kn_dtype_name(t->d.dtype));
		return -ENOTSUP;
	}
	t->user_grads = t->grads;
	t->grads = kn__wk_zalloc64(n * sizeof(float));
	t->inbox = kn__wk_zalloc64(n * sizeof(float));
	t->anchor = kn__wk_zalloc64(n * sizeof(float));
	t->at_push = kn__wk_zalloc64(n * sizeof(float));
	/* the optimizer's state where it has one: momentum's m, Adam's m, v
	 * (none under sum: the program steps its own) */
	bool m = optimizer == KN__CONFIG_MOMENTUM ||
		 optimizer == KN__CONFIG_ADAM;

	if (m)
		t->m = kn__wk_zalloc64(n * sizeof(float));
	if (optimizer == KN__CONFIG_ADAM)
		t->v = kn__wk_zalloc64(n * sizeof(float));
	if (!t->grads || !t->inbox || !t->anchor || !t->at_push ||
	    (m && !t->m) || (optimizer == KN__CONFIG_ADAM && !t->v)) {
		kn__wk_local_free(t);
		return -ENOMEM;
	}
	return 0;
}

/*
 * A local-step job has started: the initial model is in every inbox.
 * It becomes the parameters the program trains and the first anchor,
 * and the worker rule starts as if just released.
 */
int kn__wk_local_start(struct kn_worker *w)
{
	struct kn__sync_params p;

	for (uint32_t i = 0; i < w->ntensors; i++) {
		struct wk_tensor *t = &w->tensors[i];
		size_t bytes = t->d.len * sizeof(float);

		memcpy(t->params, t->inbox, bytes);
		memcpy(t->anchor, t->inbox, bytes);
	}
	kn__job_sync_params(&w->job, w->job.u.job.workers, &p);
	return kn__sync_worker_create(&p, w->cfg.rank, &w->rule);
}

/*
 * ESP, PSP: what the servers said with the last releases: the local
 * steps the plan asks before the next push, the plan's epoch, and the
 * longest predicted wait (seconds) of any server.  0, or -EAGAIN for a
 * protocol that sends none or before the start.
 */
static int release_info(struct kn_worker *w, uint32_t *steps, uint64_t *epoch,
			float *hint)
{
	uint32_t st = 0;
	uint64_t ep = 0;
	float h = 0;

	pthread_mutex_lock(&w->lock);
	if (!w->layout || !w->release_info) {
		pthread_mutex_unlock(&w->lock);
		return -EAGAIN;
	}
	/* every chunk switches plans at the same round: take the largest
	 * epoch's steps, and the longest predicted wait of any server */
	for (uint32_t c = 0; c < w->layout->nchunks; c++) {
		const struct wk_chunk *k = &w->chunks[c];

		if (k->epoch > ep || c == 0) {
			ep = k->epoch;
			st = k->steps;
		}
		if (k->hint > h)
			h = k->hint;
	}
	pthread_mutex_unlock(&w->lock);
	*steps = st;
	*epoch = ep;
	*hint = h;
	return 0;
}

/*
 * PSP, CGP: tell the coordinator this worker's seconds per local step in
 * its last round (sent by the progress thread; reports that come before
 * it sent the last go as their mean).  0, or -EINVAL for a value that is
 * negative, not finite or above FLT_MAX.  Does not block.
 */
int kn__wk_report_timing(struct kn_worker *w, double seconds)
{
	/* a float on the wire: above FLT_MAX it would be infinite */
	if (!(seconds >= 0) || !(seconds <= FLT_MAX))
		return -EINVAL;
	pthread_mutex_lock(&w->lock);
	/* reports that come faster than the thread sends them are
	 * averaged, not lost (their mean fits a float, as each does) */
	if (w->timing_count == UINT32_MAX) {
		w->timing_sum = 0;
		w->timing_count = 0;
	}
	w->timing_sum += seconds;
	w->timing_count++;
	kn__wk_wake(w);
	pthread_mutex_unlock(&w->lock);
	return 0;
}

/* ---- kn_worker_step_done: the worker rule, on the program's thread ---- */

/* The job's optimizer on this worker's own copy, with its own state. */
static int inner_update(struct kn_worker *w)
{
	const struct kn__msg *j = &w->job;
	struct kn_update_params p = {
		.optimizer = (enum kn_optimizer)j->u.job.optimizer,
		.lr = j->u.job.lr,
		.grad_scale = 1,
		.momentum = j->u.job.momentum,
		.beta1 = 0.9f,
		.beta2 = 0.999f,
		.eps = 1e-8f,
		.step = ++w->inner_step,
	};

	for (uint32_t i = 0; i < w->ntensors; i++) {
		struct wk_tensor *t = &w->tensors[i];
		const void *g = t->user_grads;
		int ret = kn_update(&p, t->params, t->m, t->v, &g, 1,
				    KN_DTYPE_FP32, t->d.len);

		if (ret)
			return ret;
	}
	return 0;
}

/* ESP's significance test: |params - anchor| / |anchor| over the model. */
static float delta_ratio(const struct kn_worker *w)
{
	double sums[2] = { 0, 0 }; /* |x - a|^2, |a|^2 */

	for (uint32_t i = 0; i < w->ntensors; i++) {
		const struct wk_tensor *t = &w->tensors[i];

		kn__kernels->local_dist(t->params, t->anchor, t->d.len, sums);
	}
	return (float)(sqrt(sums[0]) / fmax(sqrt(sums[1]), 1e-12));
}

/*
 * The global model of the pending push has landed in the inboxes: the
 * parameters become it plus the progress made since the push, it is the
 * new anchor, and the rule hears of the release.  PSP's planner, or
 * ESP's chunk rules, hear the mean step time since the last release.
 */
static int local_released(struct kn_worker *w, double landed)
{
	struct kn__sync_worker_event ev = { .type = KN__SYNC_WEV_RELEASE };
	uint32_t next, steps = 1;
	uint64_t epoch = 0;
	float hint = 0;
	int ret;

	for (uint32_t i = 0; i < w->ntensors; i++) {
		struct wk_tensor *t = &w->tensors[i];

		kn__kernels->local_merge(t->params, t->anchor, t->inbox,
					 t->at_push, t->d.len);
	}
	w->pending = false;
	release_info(w, &steps, &epoch, &hint);
	ev.t = kn__now();
	ev.steps = steps;
	ev.epoch = epoch;
	ev.hint = hint;
	ev.rtt = landed - w->push_t;
	ret = kn__sync_worker_event(w->rule, &ev, &next);
	if (!ret && w->round_steps)
		ret = kn__wk_report_timing(w, w->round_s / w->round_steps);
	w->round_s = 0;
	w->round_steps = 0;
	return ret;
}

int kn__wk_local_wait(struct kn_worker *w)
{
	int ret = kn_worker_wait(w, w->pending_handle, -1);

	return ret ? ret : local_released(w, kn__now());
}

/*
 * When the pending push's release landed, found done by a test after a
 * step on the copy: the release time is its own, not the step's end.
 */
static double landed_at(struct kn_worker *w)
{
	const struct wk_op *op = &w->ops[w->pending_handle % MAX_OPS];
	double t = 0;

	pthread_mutex_lock(&w->lock);
	if (op->id == w->pending_handle)
		t = op->t_done;
	pthread_mutex_unlock(&w->lock);
	return t > 0 ? t : kn__now();
}

/* Push the model delta since the anchor (a descent direction). */
static int local_push(struct kn_worker *w)
{
	for (uint32_t i = 0; i < w->ntensors; i++) {
		struct wk_tensor *t = &w->tensors[i];

		kn__kernels->local_delta(t->grads, t->at_push, t->anchor,
					 t->params, t->d.len);
	}
	w->push_t = kn__now();
	return kn__wk_post_op(w, NULL, true, true, &w->pending_handle);
}

static int local_step(struct kn_worker *w, double seconds, unsigned int flags,
		      unsigned int *result)
{
	struct kn__sync_worker_event ev = { .type = KN__SYNC_WEV_STEP };
	uint32_t next;
	int ret = 0;

	*result = KN_STEP_LOCAL;
	if (!(flags & KN_STEP_APPLIED) &&
	    w->job.u.job.optimizer == KN__CONFIG_SUM) {
		if (!w->told_local)
			kn__log(&w->node,
				"the job runs the workers' optimizer "
				"(--optimizer sum): step the model yourself "
				"and pass KN_STEP_APPLIED to "
				"kn_worker_step_done");
		w->told_local = true;
		return -EINVAL;
	}
	if (!(flags & KN_STEP_APPLIED))
		ret = inner_update(w);
	if (ret)
		return ret;
	w->round_s += seconds;
	w->round_steps++;
	ev.t = kn__now();
	ev.seconds = seconds;
	ev.delta_ratio = kn__sync_traits(w->job.u.job.protocol)->delta_ratio
				 ? delta_ratio(w)
				 : 0;
	ret = kn__sync_worker_event(w->rule, &ev, &next);
	if (ret)
		return ret;
	if (w->pending) {
		/* PSP, training on while the model is on its way */
		ret = kn_worker_test(w, w->pending_handle);
		if (ret == 1 || (ret == 0 && next == KN__SYNC_NEXT_WAIT)) {
			*result = KN_STEP_SYNCED;
			return ret == 1 ? local_released(w, landed_at(w))
					: kn__wk_local_wait(w);
		}
		return ret;
	}
	if (next != KN__SYNC_NEXT_PUSH)
		return 0;
	ret = local_push(w);
	if (ret)
		return ret;
	w->pending = true;
	*result = KN_STEP_PUSHED;
	ev = (struct kn__sync_worker_event){ .type = KN__SYNC_WEV_PUSHED,
					     .t = w->push_t };
	ret = kn__sync_worker_event(w->rule, &ev, &next);
	if (ret || next != KN__SYNC_NEXT_WAIT)
		return ret;
	*result = KN_STEP_SYNCED;
	return kn__wk_local_wait(w);
}

int kn_worker_step_done(struct kn_worker *w, double seconds, unsigned int flags,
			unsigned int *result)
{
	unsigned int what = KN_STEP_SYNCED;
	double now = kn__now();
	int ret;

	if (!w || (flags & ~KN_STEP_APPLIED) || isnan(seconds) ||
	    seconds > FLT_MAX)
		return -EINVAL;
	if (seconds < 0)
		seconds = w->step_return > 0 ? now - w->step_return : 0;
	if (w->local && !w->rule) /* not started */
		ret = -EINVAL;
	else if (w->local)
		ret = local_step(w, seconds, flags, &what);
	else if (flags & KN_STEP_APPLIED)
		ret = -EINVAL; /* the servers apply this job's update */
	else {
		uint64_t h;

		ret = kn__wk_post_op(w, NULL, true, true, &h);
		if (!ret && kn__sync_traits(w->job.u.job.protocol)->timing ==
				    KN__SYNC_TIMING_PLANNER)
			ret = kn__wk_report_timing(w, seconds);
		if (!ret)
			ret = kn_worker_wait(w, h, -1);
	}
	w->step_return = kn__now();
	if (!ret && result)
		*result = what;
	return ret;
}
