/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_engine_workers.c - bench_engine's workers (bench_engine.h):
 * threads of this process, each with its own kn_worker, which main hands
 * samples of rounds, the time every round ended, and the check of the
 * parameters the rounds made.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_engine.h"
#include "kanel.h"

struct wk {
	unsigned int rank;
	pthread_t th;
	struct kn_worker *w;
	unsigned char *params, *grads; /* eng.elems of eng.dtype */
	double *ends;	   /* when each round of the current sample ended */
	double *firsts;	   /* --forward: each round's first layer back, ns */
	uint64_t *handles; /* --forward: a handle per tensor */
	atomic_ulong done; /* rounds of the current sample done */
	int err;	   /* the first failure, a negative errno */
	char what[96];	   /* what failed */
};

/* What main and the workers share, under lock. */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned long gen;    /* bumped by main for every sample */
	unsigned long rounds; /* of the sample of gen; 0: leave */
	unsigned int idle;    /* workers waiting for the next gen */
	unsigned int failed;
	double t0; /* when main released the sample */
	unsigned int n;
	/* the tensors: element counts, where each starts in a worker's
	 * buffers (elements, MODEL_ALIGN apart), all of one dtype */
	unsigned int ntensors;
	const size_t *counts;
	size_t offs[MAX_TENSORS], elems;
	enum kn_dtype dtype;
	struct wk wk[MAX_WORKERS];
} eng = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

static pthread_mutex_t create_lock = PTHREAD_MUTEX_INITIALIZER;

static void wk_fail(struct wk *k, int err, const char *what)
{
	pthread_mutex_lock(&eng.lock);
	k->err = err;
	snprintf(k->what, sizeof(k->what), "%s", what);
	eng.failed++;
	pthread_cond_broadcast(&eng.cond);
	pthread_mutex_unlock(&eng.lock);
}

/* Simulated compute until @deadline (now_ns); sleeps, so that the
 * engine's threads have the CPUs (spans too short to sleep are skipped,
 * the deadlines are absolute: no error adds up). */
static void compute_until(double deadline)
{
	struct timespec ts;

	if (deadline - bench_now_ns() < 60e3)
		return;
	ts.tv_sec = (time_t)(deadline / 1e9);
	ts.tv_nsec = (long)(deadline - (double)ts.tv_sec * 1e9);
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) ==
	       EINTR)
		;
}

/*
 * --forward: one training step's exchange as a program would overlap
 * it: the backward pass makes each tensor's gradient in turn, last
 * layer first, and pushes it at once (pushpull); the next forward pass
 * takes the layers in order, each once its parameters are back and the
 * layer before it is done.  @first: when layer 0 was back, from the
 * step's start.
 */
static int forward_round(struct wk *k, double *first)
{
	size_t es = kn_dtype_size(eng.dtype);
	double start = bench_now_ns(), t = start;
	char key[16];
	int ret = 0;

	for (unsigned int i = eng.ntensors; !ret && i-- > 0;) {
		t += (double)(eng.counts[i] * es) / cfg.compute_gbps;
		compute_until(t);
		snprintf(key, sizeof(key), "t%04u", i);
		ret = kn_worker_pushpull(k->w, key, &k->handles[i]);
	}
	for (unsigned int i = 0; !ret && i < eng.ntensors; i++) {
		ret = kn_worker_wait(k->w, k->handles[i], -1);
		if (i == 0)
			*first = bench_now_ns() - start;
		t = fmax(t, bench_now_ns()) +
		    (double)(eng.counts[i] * es) / (2 * cfg.compute_gbps);
		compute_until(t);
	}
	return ret;
}

/*
 * A worker's thread: join the job and start, then run the samples main
 * hands out, until it says leave.  Gradients are rank + 1 in every
 * element and never change; the parameters start at 0 (rank 0's).  One
 * tensor is KEY; a model's are t0000, t0001, ... in its list's order
 * (which is then the layout's key order too), and a round is one
 * kn_worker_step() of every tensor.
 */
static void *wk_main(void *arg)
{
	struct wk *k = arg;
	struct kn_worker_options opt = { .coordinator =
						 getenv("KANEL_COORDINATOR"),
					 .secret_file = secret_path,
					 .rank = (int)k->rank,
					 .timeout_ms = WAIT_S * 1000 };
	unsigned long gen = 0, rounds;
	int ret;

	/*
	 * One kn_worker_create() at a time: it parses its options with
	 * getopt_long(), whose state is global, and two at once fail now
	 * and then ("unknown option").  It returns once the coordinator has
	 * welcomed this worker, which does not wait for the others.
	 */
	pthread_mutex_lock(&create_lock);
	ret = kn_worker_create(&opt, &k->w);
	pthread_mutex_unlock(&create_lock);
	if (ret) {
		wk_fail(k, ret, "kn_worker_create");
		return NULL;
	}
	for (unsigned int t = 0; t < eng.ntensors; t++) {
		size_t off = eng.offs[t] * kn_dtype_size(eng.dtype);
		char key[16];

		snprintf(key, sizeof(key), "t%04u", t);
		ret = kn_worker_register(k->w, eng.ntensors > 1 ? key : KEY,
					 eng.dtype, eng.counts[t],
					 k->params + off, k->grads + off);
		/* fifo: the order the backward pass pushes them */
		if (!ret && cfg.forward && cfg.fifo)
			ret = kn_worker_set_priority(k->w, key,
						     (int)(eng.ntensors - t));
		if (ret) {
			wk_fail(k, ret, "kn_worker_register");
			return NULL;
		}
	}
	ret = kn_worker_start(k->w);
	if (ret) {
		wk_fail(k, ret, "kn_worker_start");
		return NULL;
	}
	for (;;) {
		pthread_mutex_lock(&eng.lock);
		eng.idle++;
		pthread_cond_broadcast(&eng.cond);
		while (eng.gen == gen)
			pthread_cond_wait(&eng.cond, &eng.lock);
		gen = eng.gen;
		rounds = eng.rounds;
		pthread_mutex_unlock(&eng.lock);
		if (!rounds)
			break;
		for (unsigned long i = 0; i < rounds; i++) {
			if (cfg.forward && eng.ntensors > 1)
				ret = forward_round(k, &k->firsts[i]);
			else
				ret = kn_worker_step(
					k->w, eng.ntensors > 1 ? NULL : KEY);
			if (ret) {
				char what[96];

				snprintf(what, sizeof(what),
					 "kn_worker_step, round %lu of %lu",
					 i + 1, rounds);
				wk_fail(k, ret, what);
				return NULL;
			}
			k->ends[i] = bench_now_ns();
			atomic_store(&k->done, i + 1);
		}
	}
	kn_worker_destroy(k->w); /* the coordinator hears we left */
	k->w = NULL;
	pthread_mutex_lock(&eng.lock);
	eng.idle++;
	pthread_cond_broadcast(&eng.cond);
	pthread_mutex_unlock(&eng.lock);
	return NULL;
}

/*
 * Wait until every worker is idle (started, done with its sample, or
 * gone).  Every 50 ms: a failed worker or (with @watch) a dead child
 * ends the run, and so does @stall_s without a round finished anywhere.
 */
void workers_wait(const char *what, double stall_s, bool watch)
{
	unsigned long last = 0, sum;
	double stall = bench_now_ns() + stall_s * 1e9;
	struct timespec dl;

	pthread_mutex_lock(&eng.lock);
	while (eng.idle < eng.n && !eng.failed) {
		clock_gettime(CLOCK_REALTIME, &dl);
		dl.tv_nsec += 50000000;
		if (dl.tv_nsec >= 1000000000) {
			dl.tv_sec++;
			dl.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&eng.cond, &eng.lock, &dl);
		pthread_mutex_unlock(&eng.lock);
		if (watch)
			children_check();
		sum = 0;
		for (unsigned int i = 0; i < eng.n; i++)
			sum += atomic_load(&eng.wk[i].done);
		if (sum != last) {
			last = sum;
			stall = bench_now_ns() + stall_s * 1e9;
		} else if (bench_now_ns() > stall) {
			fprintf(stderr,
				"bench_engine: waited %.0f s for %s; rounds "
				"done:",
				stall_s, what);
			for (unsigned int i = 0; i < eng.n; i++)
				fprintf(stderr, " worker %u: %lu", i,
					atomic_load(&eng.wk[i].done));
			fputc('\n', stderr);
			exit(1);
		}
		pthread_mutex_lock(&eng.lock);
	}
	pthread_mutex_unlock(&eng.lock);
	for (unsigned int i = 0; eng.failed && i < eng.n; i++)
		if (eng.wk[i].err) {
			fprintf(stderr, "bench_engine: worker %u: %s: %s\n", i,
				eng.wk[i].what, strerror(-eng.wk[i].err));
			children_check();
			children_show_logs();
			exit(1);
		}
}

/* Hand out the next generation: @rounds rounds, or 0 to leave. */
void workers_go(unsigned long rounds)
{
	pthread_mutex_lock(&eng.lock);
	for (unsigned int i = 0; i < eng.n; i++)
		atomic_store(&eng.wk[i].done, 0);
	eng.idle = 0;
	eng.rounds = rounds;
	eng.t0 = bench_now_ns();
	eng.gen++;
	pthread_cond_broadcast(&eng.cond);
	pthread_mutex_unlock(&eng.lock);
}

/*
 * One sample of @rounds rounds: the median round, in ns; in @elapsed, the
 * time from the release to the end of the last round.
 */
double engine_sample(unsigned long rounds, double *round_ns, double *elapsed,
		     double *first)
{
	double prev;

	workers_go(rounds);
	workers_wait("the workers' rounds (no round finished)", WAIT_S + 5,
		     true);
	prev = eng.t0;
	for (unsigned long i = 0; i < rounds; i++) {
		double end = 0;

		for (unsigned int k = 0; k < eng.n; k++)
			end = fmax(end, eng.wk[k].ends[i]);
		round_ns[i] = end - prev;
		prev = end;
	}
	*elapsed = prev - eng.t0;
	if (first && cfg.forward) {
		/* the slowest worker's, round by round: its median */
		double *f = malloc(rounds * sizeof(*f));

		if (!f)
			bench_check(-ENOMEM, "malloc");
		for (unsigned long i = 0; i < rounds; i++) {
			f[i] = 0;
			for (unsigned int k = 0; k < eng.n; k++)
				f[i] = fmax(f[i], eng.wk[k].firsts[i]);
		}
		*first = summarize(f, rounds).med;
		free(f);
	}
	return summarize(round_ns, rounds).med;
}

/*
 * After @rounds rounds of SGD with every worker's gradient rank + 1, the
 * servers' mean gradient is (n + 1) / 2 and every fp32 parameter
 * -LR * rounds * (n + 1) / 2.  fp16 and bf16 parameters round every
 * update, so their value is not predicted: every element of a tensor
 * must be the same finite negative number, on every worker the same
 * bits.  Returns how many workers disagree.
 */
unsigned int params_check(unsigned long rounds)
{
	double want = -LR * (double)rounds * (eng.n + 1) / 2.0;
	double tol = 1e-3 * fabs(want) + 1e-6;
	size_t es = kn_dtype_size(eng.dtype);
	unsigned int bad = 0;

	for (unsigned int k = 0; k < eng.n; k++) {
		for (unsigned int t = 0; t < eng.ntensors; t++) {
			const unsigned char *p =
				eng.wk[k].params + eng.offs[t] * es;
			const float *f = (const float *)p;
			size_t i = 0;
			float v[1];

			if (eng.dtype == KN_DTYPE_FP32) {
				for (; i < eng.counts[t]; i++)
					if (!(fabs(f[i] - want) <= tol))
						break;
				v[0] = i < eng.counts[t] ? f[i] : 0;
			} else {
				bench_check(kn_convert(v, KN_DTYPE_FP32, p,
						       eng.dtype, 1),
					    "kn_convert");
				if (!(isfinite(v[0]) && v[0] < 0) ||
				    memcmp(p,
					   eng.wk[0].params + eng.offs[t] * es,
					   eng.counts[t] * es))
					i = 0;
				else
					for (i = 1; i < eng.counts[t]; i++)
						if (memcmp(p + i * es, p, es))
							break;
				if (i < eng.counts[t])
					bench_check(kn_convert(v, KN_DTYPE_FP32,
							       p + i * es,
							       eng.dtype, 1),
						    "kn_convert");
			}
			if (i < eng.counts[t]) {
				fprintf(stderr,
					"bench_engine: worker %u: element %zu "
					"of tensor %u is %g after %lu rounds, "
					"%g expected%s\n",
					k, i, t, (double)v[0], rounds, want,
					eng.dtype == KN_DTYPE_FP32
						? ""
						: " (or so: all elements the "
						  "same on every worker)");
				bad++;
				break;
			}
		}
	}
	return bad;
}

/* Every element of the @bytes of @g (eng.dtype) @value. */
static void grads_fill(unsigned char *g, size_t bytes, float value)
{
	size_t es = kn_dtype_size(eng.dtype);
	unsigned char one[4];

	bench_check(kn_convert(one, eng.dtype, &value, KN_DTYPE_FP32, 1),
		    "kn_convert");
	for (size_t off = 0; off + es <= bytes; off += es)
		memcpy(g + off, one, es);
}

/* The tensors of a job, @n of @counts elements, laid out in eng. */
size_t job_tensors(unsigned int n, const size_t *counts, enum kn_dtype dtype)
{
	size_t es = kn_dtype_size(dtype), per = MODEL_ALIGN / es, bytes = 0;

	eng.ntensors = n;
	eng.counts = counts;
	eng.dtype = dtype;
	eng.elems = 0;
	for (unsigned int t = 0; t < n; t++) {
		eng.offs[t] = eng.elems;
		eng.elems += (counts[t] + per - 1) / per * per;
		bytes += counts[t] * es;
	}
	return bytes;
}

/*
 * Start @workers threads, each with the buffers of the tensors laid out
 * (job_tensors): its parameters 0, its gradients rank + 1.  They join
 * the job; workers_wait() says when all have started.
 */
void workers_start(size_t workers)
{
	size_t buf =
		(eng.elems * kn_dtype_size(eng.dtype) + 4095) / 4096 * 4096;

	eng.n = (unsigned int)workers;
	eng.idle = 0;
	eng.failed = 0;
	eng.gen = 0;
	for (unsigned int i = 0; i < workers; i++) {
		struct wk *k = &eng.wk[i];

		*k = (struct wk){ .rank = i };
		k->params = aligned_alloc(4096, buf);
		k->grads = aligned_alloc(4096, buf);
		k->ends = malloc(MAX_ROUNDS * sizeof(*k->ends));
		k->firsts = calloc(MAX_ROUNDS, sizeof(*k->firsts));
		k->handles = calloc(eng.ntensors, sizeof(*k->handles));
		if (!k->params || !k->grads || !k->ends || !k->firsts ||
		    !k->handles)
			bench_check(-ENOMEM, "aligned_alloc");
		memset(k->params, 0, buf); /* 0 in every dtype */
		grads_fill(k->grads, buf, (float)(i + 1));
		bench_check(-pthread_create(&k->th, NULL, wk_main, k),
			    "pthread_create");
	}
}

/* Every worker was told to leave: wait for them, join, free. */
void workers_join(void)
{
	workers_wait("the workers to leave (kn_worker_destroy)", WAIT_S, false);
	for (unsigned int i = 0; i < eng.n; i++) {
		struct wk *k = &eng.wk[i];

		bench_check(-pthread_join(k->th, NULL), "pthread_join");
		free(k->params);
		free(k->grads);
		free(k->ends);
		free(k->firsts);
		free(k->handles);
	}
}
