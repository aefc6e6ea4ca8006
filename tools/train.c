/* SPDX-License-Identifier: Apache-2.0 */
/*
 * train.c - `kanel train`: a real model trained through a Kanel job on
 * Fashion-MNIST, under the job's protocol and an injected imbalance,
 * reporting time to accuracy (docs/training.md).
 *
 * Without --join it starts the whole job here, as `kanel launch` does:
 * the coordinator, the servers, and the workers, each worker a child
 * running `kanel train --join` with a pipe to report on.  The parent
 * reads the pipe, draws the progress line and at the end writes the
 * summary, the curve and the JSON.  With --join the process takes the
 * role its options give it (srun, mpirun, KANEL_* variables); rank 0 of
 * the workers then writes what it alone can see.
 *
 * A worker's step: gather a minibatch of its shard, compute the gradient
 * (OpenBLAS, one thread), sleep the injected delay (base step time times
 * the imbalance factor: sleeping, so many workers share two cores), then
 * hand the step to the engine (kn_worker_step_done), which does what the
 * job's protocol says: push the gradient and wait for the parameters,
 * or, under ESP and PSP, a local step with the job's optimizer, and a
 * model delta pushed or a global model merged when the protocol's
 * worker rule says so.  Rank 0
 * copies the job's global model (kn_worker_global_model: under ESP and
 * PSP the one last delivered, without its local steps since) into a
 * snapshot every --eval-interval seconds or --eval-every steps, and its evaluator
 * thread tests the snapshot on the 10,000 test images, so training never
 * waits for an evaluation; a snapshot comes only when the evaluator is
 * idle.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>

#include "idx.h"
#include "kanel.h"
#include "tool.h"
#include "train.h"

#define REPORT_FD_ENV "KANEL_TRAIN_REPORT_FD"
#define DATA_FD_ENV   "KANEL_TRAIN_DATA_FD"
#define STATUS_PERIOD 0.5 /* seconds between a worker's status lines */
#define EVAL_BATCH    1000
#define MAX_REJOINS   10 /* a worker removed from the job comes back */

/* Ctrl-C (SIGINT) or SIGTERM: stop after this step and report. */
static volatile sig_atomic_t stop_requested;

static void on_stop(int sig)
{
	(void)sig;
	stop_requested++;
}

static void catch_stop(int sig)
{
	struct sigaction sa = { .sa_handler = on_stop };

	sigemptyset(&sa.sa_mask);
	sigaction(sig, &sa, NULL);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Sleep @s seconds, through signals. */
static void sleep_s(double s)
{
	struct timespec until;
	double end = now_s() + s;

	if (s <= 0)
		return;
	until.tv_sec = (time_t)end;
	until.tv_nsec = (long)((end - (double)until.tv_sec) * 1e9);
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) ==
	       EINTR)
		;
}

/* ---- options ---- */

/* kanel train's workers when neither --workers nor KANEL_WORKERS says */
#define KN__TRAIN_DEFAULT_WORKERS "4"

static void train_usage(FILE *out)
{
	fprintf(out,
		"usage: kanel train [train options] [job options]\n"
		"Trains a model on Fashion-MNIST through a Kanel job: a "
		"whole job on this\nmachine, or with --join one process of "
		"a job started elsewhere.\n\n"
		"Train options (docs/training.md):\n"
		"  --model softmax|mlp     the model (default mlp)\n"
		"  --hidden N              MLP hidden units (default 256)\n"
		"  --batch N               minibatch per worker step "
		"(default 64)\n"
		"  --epochs E              passes over each worker's shard "
		"(default 10)\n"
		"  --time-budget S         stop after S seconds of training "
		"(default: none)\n"
		"  --target-accuracy A     the accuracy time-to-target "
		"measures (default 0.85)\n"
		"  --imbalance SPEC        none | persistent:FRACTION:FACTOR "
		"|\n"
		"                          random:P:FACTOR | "
		"episodic:PERIOD:DURATION:K:FACTOR |\n"
		"                          periodic:PERIOD:AMPLITUDE "
		"(default none; docs/imbalance.md)\n"
		"  --step-time T           base compute time per step, "
		"ms or with an s suffix (default 20ms)\n"
		"  --seed N                data order, initial model, "
		"imbalance (default 1)\n"
		"  --eval-interval S       seconds between evaluations "
		"(default 1)\n"
		"  --eval-every N          also every N steps of rank 0 "
		"(default 0: off)\n"
		"  --data DIR              the dataset (default %s)\n"
		"  --curve FILE            accuracy-vs-time CSV "
		"(default kanel-curve.csv; - for none)\n"
		"  --summary-json FILE     the summary as one JSON object\n"
		"  --progress auto|tty|log the live line or plain log lines "
		"(default auto)\n"
		"  --protocol P            the same as --sync P\n"
		"  --join                  be one process of a job started "
		"elsewhere\n\n"
		"The trainer's defaults for the job: --workers %s "
		"--optimizer momentum --lr 0.05.\n"
		"With --join every job option is taken (one command line "
		"serves every rank);\nwithout, those below (the job on this "
		"machine places its processes itself).\n\n",
		KN_FASHION_MNIST_DIR, KN__TRAIN_DEFAULT_WORKERS);
	fprintf(out, "Job options (each also a KANEL_* variable):\n");
	kn_config_usage(out, KN__TOOL_OPTS_LOCAL);
}

static int bad_value(const char *flag, const char *val, const char *want)
{
	kn__tool_log("kanel train: %s %s: %s\n", flag, val, want);
	return -EINVAL;
}

static int parse_double(const char *flag, const char *val, double lo, double hi,
			double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(val, &end);
	if (errno || end == val || *end || !isfinite(v) || v < lo || v > hi) {
		char want[96];

		snprintf(want, sizeof(want), "a number from %g to %g", lo, hi);
		return bad_value(flag, val, want);
	}
	*out = v;
	return 0;
}

static int parse_uint(const char *flag, const char *val, unsigned long lo,
		      unsigned long hi, unsigned long *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(val, &end, 10);
	if (errno || end == val || *end || val[0] == '-' || v < lo || v > hi) {
		char want[96];

		snprintf(want, sizeof(want), "a whole number from %lu to %lu",
			 lo, hi);
		return bad_value(flag, val, want);
	}
	*out = v;
	return 0;
}

/* "20", "20ms", "0.02s": seconds into @out. */
static int parse_duration(const char *flag, const char *val, double *out)
{
	char num[64];
	size_t n = strlen(val);
	double scale = 1e-3, v;

	if (n >= sizeof(num))
		return bad_value(flag, val, "too long");
	memcpy(num, val, n + 1);
	if (n > 2 && strcmp(num + n - 2, "ms") == 0) {
		num[n - 2] = '\0';
	} else if (n > 1 && num[n - 1] == 's') {
		num[n - 1] = '\0';
		scale = 1;
	}
	if (parse_double(flag, num, 0, 3600 / scale, &v))
		return -EINVAL;
	*out = v * scale;
	return 0;
}

static const char *const own_flags[] = {
	"--model",	 "--hidden",	      "--batch",      "--epochs",
	"--time-budget", "--target-accuracy", "--imbalance",  "--step-time",
	"--seed",	 "--eval-interval",   "--eval-every", "--data",
	"--curve",	 "--summary-json",    "--progress",   "--protocol",
};

static int set_option(struct kn__train_opts *o, const char *flag,
		      const char *val)
{
	unsigned long u;
	int ret = 0;

	if (strcmp(flag, "--model") == 0) {
		if (kn__model_parse(val, &o->model))
			return bad_value(flag, val, "softmax or mlp");
	} else if (strcmp(flag, "--hidden") == 0) {
		ret = parse_uint(flag, val, 1, 65536, &u);
		o->hidden = (unsigned int)u;
	} else if (strcmp(flag, "--batch") == 0) {
		ret = parse_uint(flag, val, 1, 65536, &u);
		o->batch = (unsigned int)u;
	} else if (strcmp(flag, "--epochs") == 0) {
		ret = parse_double(flag, val, 0, 1e6, &o->epochs);
	} else if (strcmp(flag, "--time-budget") == 0) {
		ret = parse_double(flag, val, 0, 1e7, &o->time_budget);
	} else if (strcmp(flag, "--target-accuracy") == 0) {
		ret = parse_double(flag, val, 0, 1, &o->target);
	} else if (strcmp(flag, "--imbalance") == 0) {
		struct kn_imbalance *m;
		char err[256];

		/* no workers: only checked, and kept in its canonical form */
		if (kn_imbalance_parse(val, 0, 0, err, sizeof(err), &m))
			return bad_value(flag, val, err);
		ret = kn_imbalance_format(m, o->imbalance,
					  sizeof(o->imbalance)) < 0;
		kn_imbalance_destroy(m);
		if (ret)
			return bad_value(flag, val, "");
	} else if (strcmp(flag, "--step-time") == 0) {
		ret = parse_duration(flag, val, &o->step_time);
	} else if (strcmp(flag, "--seed") == 0) {
		ret = parse_uint(flag, val, 0, ~0ul, &u);
		o->seed = u;
	} else if (strcmp(flag, "--eval-interval") == 0) {
		ret = parse_double(flag, val, 0.01, 1e6, &o->eval_interval);
	} else if (strcmp(flag, "--eval-every") == 0) {
		ret = parse_uint(flag, val, 0, ~0u, &u);
		o->eval_every = (unsigned int)u;
	} else if (strcmp(flag, "--data") == 0) {
		o->data = val;
	} else if (strcmp(flag, "--curve") == 0) {
		o->curve = strcmp(val, "-") == 0 ? NULL : val;
	} else if (strcmp(flag, "--summary-json") == 0) {
		o->summary_json = val;
	} else if (strcmp(flag, "--progress") == 0) {
		if (strcmp(val, "auto") && strcmp(val, "tty") &&
		    strcmp(val, "log"))
			return bad_value(flag, val, "auto, tty or log");
		o->progress = val;
	}
	return ret;
}

/*
 * Take the trainer's options out of @argv (in place; --protocol becomes
 * --sync), leaving the job's for kn_config_parse.
 */
static int take_options(int *argc, char **argv, struct kn__train_opts *o,
			bool *help)
{
	static char sync[64];
	int out = 1;

	for (int i = 1; i < *argc; i++) {
		const char *a = argv[i], *eq = strchr(a, '='), *val;
		size_t k, n = eq ? (size_t)(eq - a) : strlen(a);
		char flag[32];

		if (strcmp(a, "--join") == 0) {
			o->join = true;
			continue;
		}
		if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)
			*help = true;
		for (k = 0; k < sizeof(own_flags) / sizeof(own_flags[0]); k++)
			if (strlen(own_flags[k]) == n &&
			    strncmp(a, own_flags[k], n) == 0)
				break;
		if (k == sizeof(own_flags) / sizeof(own_flags[0])) {
			argv[out++] = argv[i];
			continue;
		}
		if (!eq && (i + 1 >= *argc || !strncmp(argv[i + 1], "--", 2))) {
			/* no value of ours starts with "--": that is the
			 * next option, and this one's value is missing */
			kn__tool_log("kanel train: %s needs a value%s%s%s\n",
				     own_flags[k],
				     i + 1 < *argc ? ", but the next argument "
						     "is '"
						   : "",
				     i + 1 < *argc ? argv[i + 1] : "",
				     i + 1 < *argc ? "'" : "");
			return -EINVAL;
		}
		val = eq ? eq + 1 : argv[++i];
		if (strcmp(own_flags[k], "--protocol") == 0) {
			/* one argument for one, or two for two: argv[] is
			 * rewritten in place, never ahead of the reading */
			snprintf(sync, sizeof(sync), "--sync=%s", val);
			argv[out++] = sync;
			continue;
		}
		snprintf(flag, sizeof(flag), "%s", own_flags[k]);
		if (set_option(o, flag, val))
			return -EINVAL;
	}
	argv[out] = NULL;
	*argc = out;
	return 0;
}

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
 * The training set kanel train shared with its workers (DATA_FD_ENV),
 * mapped read-only: one copy on the machine, not one per worker.
 * -ENOENT when there is none (a --join run started elsewhere).
 */
static int shared_dataset(struct kn__dataset *d, char *err, size_t errlen)
{
	const char *v = getenv(DATA_FD_ENV);
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

	if (err == -ESHUTDOWN || stop_requested || wr->rejoins >= MAX_REJOINS)
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
	double t0 = now_s(), next_status = STATUS_PERIOD;
	double next_eval = 0;
	uint64_t next_eval_step = 0, clock = kn_worker_clock(w);
	uint32_t since_push = 0;
	int ret = 0;

	for (uint64_t i = 0; i < steps; i++) {
		uint64_t pos = i % per_epoch;
		double a, b, c;
		float loss;

		a = now_s();
		st.t = a - t0;
		if (stop_requested ||
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
		b = now_s();
		sleep_s(o->step_time *
			kn_imbalance_factor(s->imb, wr->rank, a - t0));
		c = now_s();
		st.compute_s += b - a;
		st.delay_s += c - b;
		/* the engine does what the protocol says: push and pull,
		 * or a local step, a delta pushed, a model merged; the
		 * planners hear the step's compute and delay, not its wait */
		ret = kn_worker_step_done(w, c - a, 0, NULL);
		st.wait_s += now_s() - c;
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
		st.t = now_s() - t0;
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
		double t = now_s();

		ret = kn_worker_finish(w);
		st.wait_s += now_s() - t;
	}
	st.t = now_s() - t0;
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

static int run_worker(const struct kn__train_opts *o,
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
	catch_stop(SIGINT);
	catch_stop(SIGTERM);
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

/* ---- a whole job on this machine ---- */

/* Whether the job's option @flag was given, as a flag or its variable. */
static bool job_option_given(int argc, char **argv, const char *flag,
			     const char *env)
{
	size_t n = strlen(flag);

	for (int i = 1; i < argc; i++)
		if (strncmp(argv[i], flag, n) == 0 &&
		    (argv[i][n] == '\0' || argv[i][n] == '='))
			return true;
	return getenv(env) && *getenv(env);
}

/*
 * --optimizer sum leaves the workers to step the model themselves (a
 * PyTorch script's optimizer); the trainer's workers have none of their
 * own, so a job of theirs names the optimizer the servers or the
 * local-step workers run.
 */
static bool sum_requested(int argc, char **argv)
{
	const char *v = getenv("KANEL_OPTIMIZER");
	bool sum = v && strcmp(v, "sum") == 0;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--optimizer") == 0 && i + 1 < argc)
			sum = strcmp(argv[i + 1], "sum") == 0;
		else if (strncmp(argv[i], "--optimizer=", 12) == 0)
			sum = strcmp(argv[i] + 12, "sum") == 0;
	}
	return sum;
}

/*
 * The dataset, checked before any process starts, the training set
 * handed to the workers as one shared read-only file (*@fd; -1 if it
 * cannot be made, and each worker loads its own copy): 0 or -errno.
 */
static int check_dataset(const struct kn__train_opts *o, int *fd)
{
	struct kn__dataset d = { 0 };
	char err[512];
	int ret = kn__dataset_load(o->data, "t10k", &d, err, sizeof(err));

	kn__dataset_fini(&d);
	if (!ret)
		ret = kn__dataset_load(o->data, "train", &d, err, sizeof(err));
	if (!ret && kn__dataset_share(&d, fd))
		*fd = -1;
	kn__dataset_fini(&d);
	if (ret)
		kn__tool_log("kanel train: %s\n", err);
	return ret;
}

/* The command line a local job's workers run: the options, canonical. */
struct worker_cmd {
	char *argv[40];
	char num[10][64];
};

static void worker_cmd(struct worker_cmd *c, const char *self,
		       const struct kn__train_opts *o)
{
	int a = 0, k = 0;

#define ARG(flag, fmt, ...)                                               \
	do {                                                              \
		snprintf(c->num[k], sizeof(c->num[k]), fmt, __VA_ARGS__); \
		c->argv[a++] = flag;                                      \
		c->argv[a++] = c->num[k++];                               \
	} while (0)

	c->argv[a++] = (char *)self;
	c->argv[a++] = "train";
	c->argv[a++] = "--join";
	c->argv[a++] = "--model";
	c->argv[a++] = (char *)kn__model_name(o->model);
	c->argv[a++] = "--imbalance";
	c->argv[a++] = (char *)o->imbalance;
	c->argv[a++] = "--data";
	c->argv[a++] = (char *)o->data;
	ARG("--hidden", "%u", o->hidden);
	ARG("--batch", "%u", o->batch);
	ARG("--epochs", "%.17g", o->epochs);
	ARG("--time-budget", "%.17g", o->time_budget);
	ARG("--target-accuracy", "%.17g", o->target);
	ARG("--step-time", "%.17gs", o->step_time);
	ARG("--seed", "%llu", (unsigned long long)o->seed);
	ARG("--eval-interval", "%.17g", o->eval_interval);
	ARG("--eval-every", "%u", o->eval_every);
	c->argv[a] = NULL;
#undef ARG
}

struct monitor {
	struct kn__train_results *r;
	const struct kn__train_opts *o;
	bool tty;
	double t0, next_log;
	size_t logged_evals;
	char buf[8192];
	size_t len;
};

static void show_progress(struct monitor *m, bool force)
{
	char line[256];
	double t = now_s() - m->t0;

	if (!m->tty && !force && m->r->nevals == m->logged_evals &&
	    t < m->next_log)
		return;
	kn__results_progress(m->r, m->o, line, sizeof(line));
	if (m->tty) {
		kn__tool_log("\r%s\033[K", line);
	} else {
		kn__tool_log("%s\n", line);
		m->next_log = t + 10;
		m->logged_evals = m->r->nevals;
	}
}

/* Read what the pipe has: false at its end. */
static bool drain_reports(struct monitor *m, int fd)
{
	ssize_t n = read(fd, m->buf + m->len, sizeof(m->buf) - 1 - m->len);
	char *line, *nl;

	if (n < 0)
		return errno == EINTR || errno == EAGAIN;
	if (n == 0)
		return false;
	m->len += (size_t)n;
	m->buf[m->len] = '\0';
	for (line = m->buf; (nl = strchr(line, '\n')); line = nl + 1) {
		*nl = '\0';
		if (kn__results_line(m->r, line, m->o->target))
			kn__tool_log("kanel train: a report line makes no "
				     "sense, ignored: %.80s\n",
				     line);
	}
	m->len = (size_t)(m->buf + m->len - line);
	memmove(m->buf, line, m->len);
	if (m->len == sizeof(m->buf) - 1)
		m->len = 0; /* a line that long is not ours */
	return true;
}

static int run_local(int nargs, char **args, struct kn__train_opts *o)
{
	char metrics_path[PATH_MAX] = "", fdnum[16];
	struct kn__train_results r;
	struct monitor m = { .r = &r, .o = o };
	struct worker_cmd cmd;
	struct kn__job job;
	const char *metrics;
	double failed_at = -1;
	bool terminated = false; /* SIGTERM sent after a failure */
	long metrics_from = 0;
	int fds[2] = { -1, -1 }, data_fd = -1, ret;
	bool open_pipe = true, stopping = false;

	/* the options first, which are cheap to check, then the data */
	ret = kn__job_init(&job, "kanel train", nargs, args);
	if (ret || kn_config_help(job.cfg) || check_dataset(o, &data_fd)) {
		ret = ret || !kn_config_help(job.cfg) ? 2 : 0;
		kn__job_fini(&job);
		return ret;
	}
	/* the roles start first: they need no dataset */
	if (data_fd >= 0)
		fcntl(data_fd, F_SETFD, FD_CLOEXEC);
	if (kn__results_init(&r, job.info.workers)) {
		if (data_fd >= 0)
			close(data_fd);
		kn__job_fini(&job);
		return 2;
	}
	metrics = kn_config_metrics(job.cfg);
	if (metrics) {
		FILE *f = fopen(metrics, "r");

		if (f && fseek(f, 0, SEEK_END) == 0)
			metrics_from = ftell(f);
		if (f)
			fclose(f);
		snprintf(metrics_path, sizeof(metrics_path), "%s", metrics);
	} else {
		int mfd;

		snprintf(metrics_path, sizeof(metrics_path),
			 "%s/kanel-metrics-XXXXXX",
			 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
		mfd = mkstemp(metrics_path);
		if (mfd >= 0)
			close(mfd);
		else
			metrics_path[0] = '\0';
		if (metrics_path[0])
			setenv("KANEL_METRICS", metrics_path, 1);
	}
	if (pipe(fds)) {
		ret = -errno;
		goto out;
	}
	fcntl(fds[0], F_SETFD, FD_CLOEXEC);
	snprintf(fdnum, sizeof(fdnum), "%d", fds[1]);
	setenv(REPORT_FD_ENV, fdnum, 1);
	setenv("OPENBLAS_NUM_THREADS", "1", 1);
	worker_cmd(&cmd, job.self, o);
	m.tty = strcmp(o->progress, "tty") == 0 ||
		(strcmp(o->progress, "auto") == 0 && isatty(STDERR_FILENO));
	kn__tool_log("kanel train: %s, %s, %u worker%s, %u server%s, imbalance "
		     "%s, on this machine\n",
		     job.info.protocol_name, kn__model_name(o->model),
		     job.info.workers, job.info.workers == 1 ? "" : "s",
		     job.info.servers, job.info.servers == 1 ? "" : "s",
		     o->imbalance);
	/* Ctrl-C stops the workers, which finish their step, report and
	 * leave; the coordinator and servers ignore it and end the job as
	 * usual.  A second Ctrl-C ends everything at once. */
	signal(SIGINT, SIG_IGN);
	/* a worker lost after the start is reported; the others go on */
	job.workers_may_fail = true;
	ret = kn__job_start_roles(&job);
	catch_stop(SIGINT);
	if (data_fd >= 0) {
		snprintf(fdnum, sizeof(fdnum), "%d", data_fd);
		setenv(DATA_FD_ENV, fdnum, 1);
		fcntl(data_fd, F_SETFD, 0);
	}
	for (unsigned int w = 0; !ret && w < job.info.workers; w++)
		ret = kn__job_start_worker(&job, w, cmd.argv);
	close(fds[1]);
	unsetenv(REPORT_FD_ENV);
	if (data_fd >= 0) {
		close(data_fd); /* the workers hold it now */
		data_fd = -1;
		unsetenv(DATA_FD_ENV);
	}
	if (ret) /* the reason is printed: end what did start */
		kn__job_kill(&job, SIGTERM);
	m.t0 = now_s();
	while (open_pipe || kn__job_reap(&job, false)) {
		struct pollfd p = { .fd = fds[0], .events = POLLIN };

		if (open_pipe && poll(&p, 1, 250) > 0)
			open_pipe = drain_reports(&m, fds[0]);
		else if (!open_pipe)
			sleep_s(0.1);
		kn__job_reap(&job, false);
		show_progress(&m, false);
		if (stop_requested == 1 && !stopping) {
			kn__tool_log("%skanel train: stopping after the "
				     "current step (Ctrl-C again: now)\n",
				     m.tty ? "\n" : "");
			stopping = true;
		} else if (stop_requested > 1) {
			kn__job_kill(&job, SIGKILL);
		}
		/* a process failed: give the others a moment to notice,
		 * then end the job rather than wait on it */
		if (job.failed && failed_at < 0)
			failed_at = now_s();
		if (failed_at >= 0 && now_s() - failed_at > 5 && !terminated) {
			kn__job_kill(&job, SIGTERM);
			terminated = true;
		}
		/* a worker waiting to rejoin a job that is gone does not
		 * see SIGTERM until its wait ends */
		if (terminated && now_s() - failed_at > 10) {
			kn__job_kill_hung(&job);
			failed_at = 1e300;
		}
	}
	if (m.tty)
		kn__tool_log("\n");
	if (metrics_path[0])
		kn__results_metrics(&r, metrics_path, metrics_from);
	kn__results_summary(&r, o, &job.info, stdout);
	if (o->curve && kn__results_write_curve(&r, o->curve))
		ret = ret ? ret : -EIO;
	if (o->summary_json &&
	    kn__results_write_json(&r, o, &job.info, o->summary_json))
		ret = ret ? ret : -EIO;
	if (job.server_restarts)
		kn__tool_log("kanel train: %u server restart%s from the "
			     "checkpoints\n",
			     job.server_restarts,
			     job.server_restarts == 1 ? "" : "s");
	/* the last line: what happened, by role and rank */
	kn__job_log_end(&job);
out:
	if (fds[0] >= 0)
		close(fds[0]);
	if (data_fd >= 0)
		close(data_fd);
	if (!metrics && metrics_path[0])
		unlink(metrics_path);
	kn__results_fini(&r);
	kn__job_fini(&job);
	return ret ? 2 : job.status;
}

int kn__train_main(int argc, char **argv)
{
	struct kn__train_opts o = {
		.model = KN__MODEL_MLP,
		.hidden = 256,
		.batch = 64,
		.epochs = 10,
		.target = 0.85,
		.step_time = 0.020,
		.eval_interval = 1,
		.imbalance = "none",
		.seed = 1,
		.data = KN_FASHION_MNIST_DIR,
		.curve = "kanel-curve.csv",
		.progress = "auto",
	};
	struct kn_config *cfg = NULL;
	bool help = false;
	const char *fd;
	char **args;
	int nargs = 0, ret;

	if (take_options(&argc, argv, &o, &help))
		return 2;
	if (help) {
		train_usage(stdout);
		return 0;
	}
	if (sum_requested(argc, argv)) {
		kn__tool_log("kanel train: --optimizer sum: the workers would "
			     "run an optimizer of their own, and the "
			     "trainer's have none: pick sgd, momentum or "
			     "adam\n");
		return 2;
	}
	/* the trainer's defaults for the job, where the user gave none;
	 * a joined coordinator makes them the job's.  They go before the
	 * user's arguments, so that a message about those (a value missing
	 * at the end) is about what the user wrote. */
	args = calloc((size_t)argc + 7, sizeof(*args));
	if (!args)
		return 2;
	args[nargs++] = argv[0];
	if (!job_option_given(argc, argv, "--optimizer", "KANEL_OPTIMIZER")) {
		args[nargs++] = "--optimizer";
		args[nargs++] = "momentum";
	}
	if (!job_option_given(argc, argv, "--lr", "KANEL_LR")) {
		args[nargs++] = "--lr";
		args[nargs++] = "0.05";
	}
	/* a job of its own: the workers are ours to count; under --join
	 * they come from the job's sources like every role's */
	if (!o.join &&
	    !job_option_given(argc, argv, "--workers", "KANEL_WORKERS")) {
		args[nargs++] = "--workers";
		args[nargs++] = KN__TRAIN_DEFAULT_WORKERS;
	}
	for (int i = 1; i < argc; i++)
		args[nargs++] = argv[i];
	if (!o.join) {
		ret = run_local(nargs, args, &o);
	} else if (kn__tool_parse(nargs, args, NULL, &cfg)) {
		ret = 2;
	} else if (kn_config_role(cfg) != KN_ROLE_WORKER) {
		ret = kn__tool_run_role(cfg);
	} else {
		fd = getenv(REPORT_FD_ENV);
		ret = run_worker(&o, cfg, fd ? atoi(fd) : -1);
	}
	kn_config_destroy(cfg);
	free(args);
	return ret;
}
