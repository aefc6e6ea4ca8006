/* SPDX-License-Identifier: Apache-2.0 */
/*
 * train_worker.c - a worker of `kanel train` (docs/training.md).
 *
 * A worker's step: gather a minibatch of its shard, compute the gradient
 * (OpenBLAS, one thread), sleep the injected delay (base step time times
 * the imbalance factor: sleeping, so many workers share two cores), then
 * hand the step to the engine (kn_worker_step_done), which does what the
 * job's protocol says: push the gradient and wait for the parameters,
 * or, under ESP and PSP, a local step with the job's optimizer, and a
 * model delta pushed or a global model merged when the protocol's
 * worker rule says so.  Rank 0 copies the job's global model
 * (kn_worker_global_model: under ESP and PSP the one last delivered,
 * without its local steps since) into a snapshot every --eval-interval
 * seconds or --eval-every steps, and its evaluator thread tests the
 * snapshot on the 10,000 test images, so training never waits for an
 * evaluation; a snapshot comes only when the evaluator is idle.
 *
 * Its status lines and evaluations go to the pipe of a local job
 * (train.c) or, without one, into rank 0's own summary (train_report.c).
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cblas.h>

#include "idx.h"
#include "kanel.h"
#include "tool.h"
#include "trainer.h"

#define STATUS_PERIOD 0.5 /* seconds between a worker's status lines */
#define EVAL_BATCH    1000
#define MAX_REJOINS   10 /* a worker removed from the job comes back */

/* ---- the worker ---- */

struct evaluator {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	const struct kn__model *model;
	struct kn__model_work *work;
	const struct kn__dataset *test;
	float *snapshot;
	struct kn__train_eval pending; /* what the snapshot is */
	bool busy;		       /* a snapshot waits or is being tested */
	bool stop;
	void (*report)(void *arg, const struct kn__train_eval *ev);
	void *arg;
};

static void evaluate(struct evaluator *e, const float *params,
		     struct kn__train_eval *ev)
{
	if (kn__model_evaluate(e->model, e->work, params, e->test->x,
			       e->test->y, e->test->count, &ev->accuracy,
			       &ev->loss)) {
		ev->accuracy = NAN;
		ev->loss = NAN;
	}
	e->report(e->arg, ev);
}

static void *evaluator_main(void *arg)
{
	struct evaluator *e = arg;

	pthread_mutex_lock(&e->lock);
	for (;;) {
		struct kn__train_eval ev;

		while (!e->busy && !e->stop)
			pthread_cond_wait(&e->cond, &e->lock);
		if (!e->busy)
			break;
		ev = e->pending;
		pthread_mutex_unlock(&e->lock);
		evaluate(e, e->snapshot, &ev);
		pthread_mutex_lock(&e->lock);
		e->busy = false;
		pthread_cond_broadcast(&e->cond);
	}
	pthread_mutex_unlock(&e->lock);
	return NULL;
}

/* The job's global model into @dst: under ESP and PSP the last one
 * delivered, not the local copy with its steps since. */
static int global_model(const struct kn__model *m, struct kn_worker *w,
			float *dst)
{
	int ret = 0;

	for (unsigned int t = 0; !ret && t < m->ntensors; t++)
		ret = kn_worker_global_model(w, m->tensor[t].key,
					     dst + m->tensor[t].offset);
	return ret;
}

/* Test the global model if the evaluator is idle: true if so. */
static bool evaluator_offer(struct evaluator *e, struct kn_worker *w,
			    const struct kn__train_eval *ev)
{
	bool taken = false;

	pthread_mutex_lock(&e->lock);
	if (!e->busy && !global_model(e->model, w, e->snapshot)) {
		e->pending = *ev;
		e->busy = true;
		taken = true;
		pthread_cond_signal(&e->cond);
	}
	pthread_mutex_unlock(&e->lock);
	return taken;
}

/* Finish the snapshot in hand, if any, and stop the thread. */
static void evaluator_stop(struct evaluator *e)
{
	pthread_mutex_lock(&e->lock);
	e->stop = true;
	pthread_cond_broadcast(&e->cond);
	pthread_mutex_unlock(&e->lock);
	pthread_join(e->thread, NULL);
}

struct worker_run {
	const struct kn__train_opts *o;
	const struct kn_config *cfg;
	unsigned int rank, n;
	unsigned int rejoins; /* times it came back after being removed */
	int report_fd;	      /* the parent's pipe; -1: joined */
	struct kn__train_results *local; /* joined rank 0: its own results */
	pthread_mutex_t report_lock;
};

static void report_line(struct worker_run *wr, const char *line, int len)
{
	/* one write of a line below PIPE_BUF: lines never interleave */
	if (wr->report_fd >= 0 && len > 0 &&
	    write(wr->report_fd, line, (size_t)len) != len) {
		/* the parent is gone: nothing to report to, keep training */
	}
}

static void report_eval(void *arg, const struct kn__train_eval *ev)
{
	struct worker_run *wr = arg;
	char line[256];

	if (wr->report_fd >= 0) {
		report_line(wr, line, kn__report_eval(line, sizeof(line), ev));
		return;
	}
	pthread_mutex_lock(&wr->report_lock);
	kn__results_eval(wr->local, ev, wr->o->target);
	pthread_mutex_unlock(&wr->report_lock);
	kn__tool_log("kanel train: %.1f s, step %llu: test accuracy %.4f\n",
		     ev->t, (unsigned long long)ev->iters, ev->accuracy);
}

static void report_status(struct worker_run *wr,
			  const struct kn__train_status *st)
{
	char line[256];

	if (wr->report_fd >= 0) {
		report_line(
			wr, line,
			kn__report_status(line, sizeof(line), wr->rank, st));
		return;
	}
	if (wr->local) {
		pthread_mutex_lock(&wr->report_lock);
		kn__results_status(wr->local, wr->rank, st);
		pthread_mutex_unlock(&wr->report_lock);
	}
	if (st->final)
		kn__tool_log(
			"kanel train: worker %u: %llu steps, %llu samples in "
			"%.1f s, %.1f%% waiting\n",
			wr->rank, (unsigned long long)st->iters,
			(unsigned long long)st->samples, st->t,
			st->t > 0 ? 100 * st->wait_s / st->t : 0.0);
}

/* The shard of worker @rank of @n: every n-th image of a seeded order. */
static uint32_t *make_shard(uint32_t count, unsigned int rank, unsigned int n,
			    uint64_t seed, uint32_t *len)
{
	uint32_t *perm = malloc(count * sizeof(*perm)), k = 0;

	if (!perm)
		return NULL;
	kn__shuffle(perm, count, seed);
	for (uint32_t i = rank; i < count; i += n)
		perm[k++] = perm[i];
	*len = k;
	return perm;
}

struct worker_state {
	struct kn__model model;
	struct kn__dataset train, test;
	struct kn__model_work *work;
	float *params, *grads, *bx;
	uint8_t *by;
	uint32_t *shard, *order, *bidx, shard_len;
	struct kn_imbalance *imb; /* for the job's workers */
};

static void worker_state_fini(struct worker_state *s)
{
	kn__model_work_destroy(s->work);
	kn_imbalance_destroy(s->imb);
	kn__dataset_fini(&s->train);
	kn__dataset_fini(&s->test);
	free(s->params);
	free(s->grads);
	free(s->bx);
	free(s->by);
	free(s->shard);
	free(s->order);
	free(s->bidx);
}

/*
 * The training set kanel train shared with its workers (KN__TRAIN_DATA_FD_ENV),
 * mapped read-only: one copy on the machine, not one per worker.
 * -ENOENT when there is none (a --join run started elsewhere).
 */
static int shared_dataset(struct kn__dataset *d, char *err, size_t errlen)
{
	const char *v = getenv(KN__TRAIN_DATA_FD_ENV);
	int fd, ret;

	if (!v || !*v)
		return -ENOENT;
	fd = atoi(v);
	ret = kn__dataset_map(fd, d, err, errlen);
	close(fd);
	return ret;
}

static int worker_setup(struct worker_state *s, const struct kn__train_opts *o,
			unsigned int rank, unsigned int n)
{
	char err[512];
	size_t bytes;
	int ret;

	ret = shared_dataset(&s->train, err, sizeof(err));
	if (ret == -ENOENT)
		ret = kn__dataset_load(o->data, "train", &s->train, err,
				       sizeof(err));
	if (!ret && rank == 0)
		ret = kn__dataset_load(o->data, "t10k", &s->test, err,
				       sizeof(err));
	if (ret) {
		kn__tool_log("kanel train: worker %u: %s\n", rank, err);
		return ret;
	}
	ret = kn_imbalance_parse(o->imbalance, o->seed, n, err, sizeof(err),
				 &s->imb);
	if (ret) {
		kn__tool_log("kanel train: --imbalance %s does not fit %u "
			     "workers\n",
			     o->imbalance, n);
		return ret;
	}
	ret = kn__model_init(&s->model, o->model, s->train.rows * s->train.cols,
			     o->model == KN__MODEL_MLP ? o->hidden : 0, 10);
	if (!ret)
		ret = kn__model_work_create(&s->model, o->batch, &s->work);
	if (ret)
		return ret;
	bytes = (s->model.nparams * sizeof(float) + 63) & ~(size_t)63;
	s->params = aligned_alloc(64, bytes);
	s->grads = aligned_alloc(64, bytes);
	s->bx = malloc((size_t)o->batch * s->model.inputs * sizeof(float));
	s->by = malloc(o->batch);
	s->bidx = malloc((size_t)o->batch * sizeof(*s->bidx));
	s->shard = make_shard(s->train.count, rank, n, o->seed, &s->shard_len);
	s->order =
		malloc((s->shard_len ? s->shard_len : 1) * sizeof(*s->order));
	if (!s->params || !s->grads || !s->bx || !s->by || !s->bidx ||
	    !s->shard || !s->order)
		return -ENOMEM;
	if (s->shard_len < o->batch) {
		kn__tool_log("kanel train: worker %u: its shard has %u images, "
			     "fewer than --batch %u\n",
			     rank, s->shard_len, o->batch);
		return -EINVAL;
	}
	memset(s->grads, 0, bytes);
	/* rank 0's values are the job's initial model */
	kn__model_init_params(&s->model, s->params, o->seed);
	return 0;
}

/* Epoch @e's order of the shard: seeded per worker and epoch. */
static void shuffle_epoch(struct worker_state *s, uint64_t seed,
			  unsigned int rank, uint64_t e)
{
	kn__shuffle(s->order, s->shard_len,
		    seed ^ (0x9e3779b97f4a7c15ull * (e + 1)) ^
			    ((uint64_t)rank << 40));
}

/*
 * The job must run the protocol this worker was told: every process of a
 * job gets the same --protocol, and a mismatch is a mistake to report.
 */
static int check_protocol(const struct kn_config *cfg, struct kn_worker *w)
{
	struct kn_job_info job, told;
	int ret = kn_worker_job(w, &job);

	if (!ret)
		ret = kn_config_job(cfg, &told);
	if (ret || job.protocol == told.protocol)
		return ret;
	kn__tool_log("kanel train: worker %u: the job runs %s, this worker "
		     "was told %s: give every process the same --protocol\n",
		     kn_config_rank(cfg), job.protocol_name,
		     told.protocol_name);
	return -EINVAL;
}

/*
 * Join the job as a worker with our tensors and start: the model every
 * worker has now lands in our parameters (the initial one at the job's
 * start, the current one on a rejoin).  0 and the worker, or a negative
 * errno (printed).
 */
static int join_job(struct worker_run *wr, struct worker_state *s,
		    struct kn_worker **out)
{
	struct kn_worker_options wo = { .rank = -1 };
	struct kn_worker *w = NULL;
	int ret = kn_worker_create(&wo, &w);

	for (unsigned int t = 0; !ret && t < s->model.ntensors; t++) {
		const struct kn__model_tensor *mt = &s->model.tensor[t];

		ret = kn_worker_register(w, mt->key, KN_DTYPE_FP32, mt->count,
					 s->params + mt->offset,
					 s->grads + mt->offset);
	}
	if (!ret)
		ret = check_protocol(wr->cfg, w);
	if (!ret)
		ret = kn_worker_start(w);
	if (ret) {
		kn__tool_log("kanel train: worker %u: cannot %s: %s\n",
			     wr->rank, wr->rejoins ? "rejoin" : "start",
			     strerror(-ret));
		kn_worker_destroy(w);
		return ret;
	}
	*out = w;
	return 0;
}

/*
 * A step failed with @err: if the job is still there (it did not end,
 * and we were removed from it, say for missing heartbeats while the
 * process was stopped), join it again with our rank and the current
 * model, at most MAX_REJOINS times.  0 and the new worker in *@w, or
 * @err.
 */
static int rejoin(struct worker_run *wr, struct worker_state *s,
		  struct kn_worker **w, int err)
{
	char why[256], self[32];
	const char *reason = why;
	int n = snprintf(self, sizeof(self), "worker %u: ", wr->rank);

	if (err == -ESHUTDOWN || kn__train_stop_requested ||
	    wr->rejoins >= MAX_REJOINS)
		return err;
	kn_last_message(why, sizeof(why));
	if (!why[0])
		reason = strerror(-err);
	else if (strncmp(why, self, (size_t)n) == 0)
		reason += n; /* the engine's line names us already */
	kn__tool_log("kanel train: worker %u: out of the job (%s): "
		     "rejoining\n",
		     wr->rank, reason);
	kn_worker_destroy(*w);
	*w = NULL;
	wr->rejoins++;
	return join_job(wr, s, w) ? err : 0;
}

/*
 * The steps of one worker, until its epochs or the time budget are done:
 * 0, or the negative errno the engine failed with.
 */
static int train_loop(struct worker_run *wr, struct worker_state *s,
		      struct kn_worker **wp, struct evaluator *ev)
{
	struct kn_worker *w = *wp;
	const struct kn__train_opts *o = wr->o;
	uint64_t per_epoch = s->shard_len / o->batch;
	uint64_t steps = (uint64_t)ceil(o->epochs * (double)per_epoch);
	struct kn__train_status st = { .seen = true };
	double t0 = kn__train_now(), next_status = STATUS_PERIOD;
	double next_eval = 0;
	uint64_t next_eval_step = 0, clock = kn_worker_clock(w);
	uint32_t since_push = 0;
	int ret = 0;

	for (uint64_t i = 0; i < steps; i++) {
		uint64_t pos = i % per_epoch;
		double a, b, c;
		float loss;

		a = kn__train_now();
		st.t = a - t0;
		if (kn__train_stop_requested ||
		    (o->time_budget > 0 && st.t >= o->time_budget))
			break;
		if (pos == 0)
			shuffle_epoch(s, o->seed, wr->rank, i / per_epoch);
		for (unsigned int k = 0; k < o->batch; k++)
			s->bidx[k] = s->shard[s->order[pos * o->batch + k]];
		kn__model_gather(&s->model, s->train.x, s->train.y, s->bidx,
				 o->batch, s->bx, s->by);
		ret = kn__model_grad(&s->model, s->work, s->params, s->bx,
				     s->by, o->batch, s->grads, &loss);
		if (ret)
			break;
		b = kn__train_now();
		kn__train_sleep(o->step_time *
				kn_imbalance_factor(s->imb, wr->rank, a - t0));
		c = kn__train_now();
		st.compute_s += b - a;
		st.delay_s += c - b;
		/* the engine does what the protocol says: push and pull,
		 * or a local step, a delta pushed, a model merged; the
		 * planners hear the step's compute and delay, not its wait */
		ret = kn_worker_step_done(w, c - a, 0, NULL);
		st.wait_s += kn__train_now() - c;
		/* local steps in one push: the steps between two clocks */
		since_push++;
		if (kn_worker_clock(w) != clock) {
			clock = kn_worker_clock(w);
			if (since_push > st.max_local)
				st.max_local = since_push;
			since_push = 0;
		}
		if (ret) {
			kn__tool_log("kanel train: worker %u: step %llu: %s\n",
				     wr->rank, (unsigned long long)i,
				     strerror(-ret));
			ret = rejoin(wr, s, wp, ret);
			if (ret)
				break;
			/* the step's gradient is lost; the model is the job's */
			w = *wp;
			clock = kn_worker_clock(w);
			since_push = 0;
			continue;
		}
		st.iters = i + 1;
		st.samples += o->batch;
		st.epoch = (double)st.iters / (double)per_epoch;
		st.t = kn__train_now() - t0;
		if (ev && (st.t >= next_eval ||
			   (o->eval_every && st.iters >= next_eval_step))) {
			struct kn__train_eval e = { .t = st.t,
						    .iters = st.iters,
						    .epoch = st.epoch };

			/* a busy evaluator: try again after the next step */
			if (evaluator_offer(ev, w, &e)) {
				next_eval = st.t + o->eval_interval;
				next_eval_step = st.iters + o->eval_every;
			}
		}
		if (st.t >= next_status) {
			report_status(wr, &st);
			next_status = st.t + STATUS_PERIOD;
		}
	}
	/* the model on its way lands before the buffers go */
	if (!ret) {
		double t = kn__train_now();

		ret = kn_worker_finish(w);
		st.wait_s += kn__train_now() - t;
	}
	st.t = kn__train_now() - t0;
	if (ev) {
		struct kn__train_eval e = { .t = st.t,
					    .iters = st.iters,
					    .epoch = st.epoch,
					    .final = true };

		evaluator_stop(ev);
		if (!global_model(&s->model, w, ev->snapshot))
			evaluate(ev, ev->snapshot, &e);
	}
	st.final = true;
	report_status(wr, &st);
	return ret;
}

int kn__train_run_worker(const struct kn__train_opts *o,
			 const struct kn_config *cfg, int report_fd)
{
	struct kn_job_info told;
	struct worker_run wr = { .o = o,
				 .cfg = cfg,
				 .rank = kn_config_rank(cfg),
				 .n = kn_config_job(cfg, &told) ? 0
								: told.workers,
				 .report_fd = report_fd };
	struct kn__train_results local;
	struct worker_state s = { 0 };
	struct evaluator ev = { .model = &s.model, .report = report_eval };
	struct kn_worker *w = NULL;
	bool evaluating = false;
	sigset_t stop_signals;
	int ret;

	openblas_set_num_threads(1); /* many workers share the cores */
	/* a parent gone is no reason to stop: reports just go nowhere */
	signal(SIGPIPE, SIG_IGN);
	/* the signals reach only this thread: the engine's progress thread
	 * and the evaluator, made below, start with them blocked */
	sigemptyset(&stop_signals);
	sigaddset(&stop_signals, SIGINT);
	sigaddset(&stop_signals, SIGTERM);
	kn__train_catch_stop(SIGINT);
	kn__train_catch_stop(SIGTERM);
	pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
	pthread_mutex_init(&wr.report_lock, NULL);
	if (report_fd < 0 && wr.rank == 0) {
		if (kn__results_init(&local, wr.n))
			return 1;
		local.rank0_only = true;
		wr.local = &local;
	}
	ret = worker_setup(&s, o, wr.rank, wr.n);
	if (ret)
		goto out;
	/* where kn_worker_create reads them: the flags given to --join */
	kn__tool_export_member(cfg);
	ret = kn__tool_check_addresses(cfg);
	if (!ret)
		ret = join_job(&wr, &s, &w);
	if (ret)
		goto out;
	if (wr.rank == 0) {
		ev.test = &s.test;
		ev.arg = &wr;
		ev.snapshot = malloc(s.model.nparams * sizeof(float));
		pthread_mutex_init(&ev.lock, NULL);
		pthread_cond_init(&ev.cond, NULL);
		ret = ev.snapshot ? kn__model_work_create(&s.model, EVAL_BATCH,
							  &ev.work)
				  : -ENOMEM;
		if (!ret)
			ret = -pthread_create(&ev.thread, NULL, evaluator_main,
					      &ev);
		if (ret)
			goto out;
		evaluating = true;
	}
	pthread_sigmask(SIG_UNBLOCK, &stop_signals, NULL);
	ret = train_loop(&wr, &s, &w, evaluating ? &ev : NULL);
	if (wr.local) {
		/* the job's settings are its coordinator's, not ours */
		struct kn_job_info job = told;

		kn_worker_job(w, &job);
		kn__results_summary(wr.local, o, &job, stdout);
		if (o->curve && kn__results_write_curve(wr.local, o->curve))
			ret = ret ? ret : -EIO;
		if (o->summary_json &&
		    kn__results_write_json(wr.local, o, &job, o->summary_json))
			ret = ret ? ret : -EIO;
	}
out:
	kn_worker_destroy(w);
	if (evaluating || ev.snapshot) {
		kn__model_work_destroy(ev.work);
		free(ev.snapshot);
	}
	worker_state_fini(&s);
	if (wr.local)
		kn__results_fini(wr.local);
	return ret ? 1 : 0;
}
