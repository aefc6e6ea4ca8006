/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_step.c - kn_worker_step_done, the worker rule behind kanel.h, in
 * whole jobs on loopback: what the job reports, the answers of each
 * kind of protocol, the inner optimizer and the outer update worked out
 * by hand, the merge of PSP, and the refusals that keep a program from
 * training a local-step protocol as if it were BSP.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "job_util.h"

#define LEN 1500 /* a few 4 KiB chunks */
#define LR  "0.125"

static float grad_of(unsigned int rank, unsigned int step, size_t i)
{
	return (float)((int)((rank + 1) * 3 + step * 5 + i % 7) % 11 - 5) /
	       16.0f;
}

static float init_of(size_t i)
{
	return (float)(i % 13) / 8.0f - 0.75f;
}

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Within a few float roundings of @want (the paths round differently). */
static bool near(float got, double want)
{
	return fabs((double)got - want) <= 1e-5 * fmax(1.0, fabs(want));
}

static unsigned int nworkers, nsteps;
static unsigned int steps_of[MAXW]; /* 0: nsteps */
static double sleep_of[MAXW];	    /* >0: sleep so long a step, and let
				       * the engine measure it ... */
static bool tell_sleep;		    /* ... or give it as the step time */
static double linger_of[MAXW];	    /* seconds between finish and destroy */

/*
 * Plain SGD on every worker, the same gradients whatever the protocol:
 * the model it ends with in sh->values (its first 61 elements), the
 * number of steps that stayed local in values[61], its clock in
 * values[62], the results of its first 16 steps as a mask in values[63],
 * and the seconds its steps took in sh->seconds.
 */
static int sgd_worker(unsigned int rank)
{
	float *p = malloc(LEN * 4), *g = malloc(LEN * 4);
	struct kn_worker *w = join(rank);
	struct kn_job_info job;
	uint32_t results = 0, local = 0;
	unsigned int steps = steps_of[rank] ? steps_of[rank] : nsteps;
	double seconds =
		sleep_of[rank] > 0 ? (tell_sleep ? sleep_of[rank] : -1) : 0.001;
	int ret;

	if (!w || !p || !g)
		return -ENOMEM;
	for (size_t i = 0; i < LEN; i++)
		p[i] = rank == 0 ? init_of(i) : 99;
	ret = kn_worker_job(w, &job);
	if (!ret)
		ret = start_with(w, "p", LEN, p, g);
	for (size_t i = 0; !ret && i < LEN; i++)
		if (p[i] != init_of(i))
			ret = -EBADMSG; /* the initial model is rank 0's */
	sh->seconds[rank] = now_s();
	for (unsigned int s = 0; !ret && s < steps; s++) {
		unsigned int what = 99;

		for (size_t i = 0; i < LEN; i++)
			g[i] = grad_of(rank, s, i);
		if (sleep_of[rank] > 0)
			usleep((useconds_t)(sleep_of[rank] * 1e6));
		ret = kn_worker_step_done(w, seconds, 0, &what);
		if (!ret && what > KN_STEP_SYNCED)
			ret = -EBADMSG;
		local += !ret && what == KN_STEP_LOCAL;
		if (!ret && s < 16 && what == KN_STEP_SYNCED)
			results |= 1u << s;
	}
	if (!ret)
		ret = kn_worker_finish(w);
	sh->seconds[rank] = now_s() - sh->seconds[rank];
	if (linger_of[rank] > 0) /* a program busy after its last step */
		usleep((useconds_t)(linger_of[rank] * 1e6));
	for (size_t i = 0; !ret && i < 61; i++)
		sh->values[rank][i] = p[i];
	sh->values[rank][61] = (float)local;
	sh->values[rank][62] = (float)kn_worker_clock(w);
	sh->values[rank][63] = (float)results;
	return end_worker(w, p, g, ret);
}

static void run(const char *sync, unsigned int workers, unsigned int steps)
{
	nworkers = workers;
	nsteps = steps;
	run_job(workers, 1, sync, "sgd", LR, sgd_worker);
}

/* SGD on the mean gradient of every step: what BSP computes. */
static double bsp_value(size_t i, unsigned int workers, unsigned int steps)
{
	double x = init_of(i);

	for (unsigned int s = 0; s < steps; s++) {
		double sum = 0;

		for (unsigned int r = 0; r < workers; r++)
			sum += grad_of(r, s, i);
		x -= 0.125 * sum / workers;
	}
	return x;
}

/* Each of the @n workers pushed @steps times and holds the model of
 * BSP with SGD after @steps steps of @n workers. */
static void assert_bsp_model(unsigned int n, unsigned int steps)
{
	for (unsigned int w = 0; w < n; w++) {
		cr_assert_eq(sh->values[w][62], (float)steps,
			     "one push a step");
		for (size_t i = 0; i < 61; i++)
			cr_assert(
				near(sh->values[w][i], bsp_value(i, n, steps)),
				"worker %u [%zu] = %g, want %g", w, i,
				(double)sh->values[w][i],
				bsp_value(i, n, steps));
	}
}

Test(step, gradient_protocols_push_every_step, .timeout = 120)
{
	run("bsp", 2, 6);
	assert_bsp_model(2, 6);
	for (unsigned int w = 0; w < 2; w++)
		cr_assert_eq(sh->values[w][63], (float)0x3f, "all synced");
}

/*
 * PSP before its first plan runs BSP's rounds with deltas: each worker
 * takes one SGD step itself and pushes the delta, the servers average
 * the deltas at rate 1.  That is BSP with SGD, to the rounding.
 */
Test(step, psp_warmup_is_bsp_with_deltas, .timeout = 120)
{
	setenv("KANEL_PSP_WARMUP", "1000", 1);
	run("predicted", 3, 5);
	unsetenv("KANEL_PSP_WARMUP");
	assert_bsp_model(3, 5);
}

/*
 * A worker that has finished holds no round of the others, though its
 * program goes on for seconds before it destroys the worker: under PSP
 * (its rounds here, the plan never coming) worker 0 stops after 3 steps
 * and lingers 8 s; worker 1's other 5 rounds complete without it.
 * Without DONE at kn_worker_finish they waited for worker 0 to go.
 */
Test(step, a_finished_worker_holds_no_round, .timeout = 120)
{
	setenv("KANEL_PSP_WARMUP", "1000", 1);
	steps_of[0] = 3;
	linger_of[0] = 8;
	run("predicted", 2, 8);
	steps_of[0] = 0;
	linger_of[0] = 0;
	unsetenv("KANEL_PSP_WARMUP");
	cr_assert_eq(sh->values[1][62], 8.0f, "worker 1 made its 8 rounds");
	cr_assert_lt(sh->seconds[1], 5.0,
		     "worker 1's 8 steps took %.2f s: held by worker 0",
		     sh->seconds[1]);
}

/*
 * ESP with one worker that never finds a push worth it before H_max: it
 * pushes at its first step (no round trip is measured yet, so the cost
 * counts as none), then at every 4th step since; the steps between stay
 * local, and the model it ends with is its own SGD trajectory (the mean
 * of one delta is that delta).  After each push it trains on its copy
 * until the release lands, at the latest H_max - 1 = 3 steps later, when
 * it waits: so each release is taken (KN_STEP_SYNCED) at one of the 3
 * steps after its push.
 */
static bool one_bit(unsigned int x)
{
	return x && !(x & (x - 1));
}

Test(step, esp_takes_local_steps_until_h_max, .timeout = 120)
{
	unsigned int results;

	setenv("KANEL_ESP_MAX_SKIP", "4", 1);
	setenv("KANEL_ESP_GAMMA", "1e-30", 1);
	setenv("KANEL_ESP_THETA", "1e30", 1);
	run("esp", 1, 8);
	unsetenv("KANEL_ESP_MAX_SKIP");
	unsetenv("KANEL_ESP_GAMMA");
	unsetenv("KANEL_ESP_THETA");
	cr_assert_eq(sh->values[0][62], 2.0f, "pushes: %g",
		     (double)sh->values[0][62]);
	results = (unsigned int)sh->values[0][63];
	cr_assert(one_bit(results & 0xe) && one_bit(results & 0xe0) &&
			  !(results & ~0xeeu),
		  "results %#x: one release in steps 1-3, one in 5-7", results);
	for (size_t i = 0; i < 61; i++)
		cr_assert(near(sh->values[0][i], bsp_value(i, 1, 8)),
			  "[%zu] = %g, want %g", i, (double)sh->values[0][i],
			  bsp_value(i, 1, 8));
}

/*
 * PSP's planner hears the step times the engine measures: a worker whose
 * steps take 4 times as long as the other's pushes after each step, and
 * the fast one, given about 4 local steps a round by the plan, pushes
 * as often while it does 4 times the steps.  With equal step times the
 * plan gives both one step, and the fast one pushes far more per step.
 * Steps of 40 ms, longer than the round trip even on two loaded cores,
 * so that neither worker takes steps on its copy while it waits (one
 * that fits the wait would count toward its next push).
 */
static double pushes_per_step(double slow_s)
{
	const double base_s = 0.04;

	setenv("KANEL_PSP_WARMUP", "2", 1);
	sleep_of[0] = base_s;
	sleep_of[1] = slow_s;
	steps_of[0] = 160;
	steps_of[1] = (unsigned int)(160 * base_s / slow_s);
	run("predicted", 2, 160);
	unsetenv("KANEL_PSP_WARMUP");
	memset(sleep_of, 0, sizeof(sleep_of));
	memset(steps_of, 0, sizeof(steps_of));
	fprintf(stderr,
		"slow %g s: worker 0 %g pushes in 160 steps, "
		"worker 1 %g\n",
		slow_s, (double)sh->values[0][62], (double)sh->values[1][62]);
	return sh->values[0][62] / 160.0;
}

Test(step, psp_plans_from_the_measured_step_times, .timeout = 120)
{
	double equal = pushes_per_step(0.04);
	double skewed = pushes_per_step(0.16);

	/* at most 1/4 once the plan is in force, about 1 with equal peers */
	cr_assert_leq(skewed, 0.3, "4x slower peer: %g pushes a step", skewed);
	cr_assert_lt(2 * skewed, equal, "%g pushes a step against %g", skewed,
		     equal);
}

/*
 * ESP holds rounds while its workers' step times are even: the workers
 * report their step times to the server, which then holds each pusher
 * until the round's last push, so that every worker's last release
 * carries the same model, holding every worker's last delta.  Without
 * rounds a worker finishing first takes a model without the others'
 * last deltas; with one worker 4 times slower there are no rounds, and
 * the fast ones end before the slow one's last pushes.
 */
static bool esp_ends_level(double slow_s)
{
	bool level = true;

	/* push after every step, and take none on the copy while waiting */
	setenv("KANEL_ESP_MAX_SKIP", "1", 1);
	for (unsigned int w = 0; w < 3; w++)
		sleep_of[w] = 0.01;
	sleep_of[2] = slow_s;
	/* step times as given, not as a loaded machine stretches them */
	tell_sleep = true;
	run("esp", 3, 40);
	tell_sleep = false;
	unsetenv("KANEL_ESP_MAX_SKIP");
	memset(sleep_of, 0, sizeof(sleep_of));
	for (unsigned int w = 0; w < 3; w++) {
		cr_assert_eq(sh->values[w][62], 40.0f, "worker %u: %g pushes",
			     w, (double)sh->values[w][62]);
		for (size_t i = 0; i < 61; i++)
			level = level && sh->values[w][i] == sh->values[0][i];
	}
	return level;
}

Test(step, esp_holds_rounds_while_step_times_are_even, .timeout = 120)
{
	cr_assert(esp_ends_level(0.01), "even workers did not end level");
	cr_assert_not(esp_ends_level(0.04), "uneven workers ended level");
}

/* ---- what a program learns of the job, and what it is refused ---- */

static char refusal_log[64]; /* the worker's stderr */

static int local_refusals(unsigned int rank)
{
	float p[8] = { 0 }, g[8] = { 0 };
	struct kn_worker *w;
	struct kn_job_info job;
	uint64_t h;
	int ret;

	if (!freopen(refusal_log, "w", stderr))
		return -errno;
	setvbuf(stderr, NULL, _IONBF, 0);
	w = join(rank);
	if (!w)
		return -ENOMEM;
	ret = kn_worker_job(w, &job);
	if (!ret &&
	    (job.protocol != KN_SYNC_ESP || !job.local_steps ||
	     strcmp(job.protocol_name, "esp") != 0 || job.outer_lr != 0.5f ||
	     job.workers != 1 || job.max_skip != 8 || job.lr != 0.125f))
		ret = -EBADMSG;
	if (!ret && kn_worker_set_inbox(w, "x", g) != -EINVAL)
		ret = -EBADMSG;
	if (!ret)
		ret = start_with(w, "x", 8, p, g);
	/* the calls that would train it as BSP are refused, every time */
	if (!ret && (kn_worker_step(w, NULL) != -EPROTO ||
		     kn_worker_pushpull(w, NULL, &h) != -EPROTO ||
		     kn_worker_push(w, "x", &h) != -EPROTO ||
		     kn_worker_step(w, NULL) != -EPROTO))
		ret = -EBADMSG;
	if (!ret && kn_worker_step_done(w, 0.001, 1u << 7, NULL) != -EINVAL)
		ret = -EBADMSG;
	if (!ret)
		ret = kn_worker_step_done(w, -1, KN_STEP_APPLIED, NULL);
	if (!ret)
		ret = kn_worker_finish(w);
	kn_worker_destroy(w);
	return ret;
}

Test(step, local_step_jobs_refuse_gradient_calls, .timeout = 60)
{
	struct job j = { 0 };
	FILE *f;
	char line[512];
	bool told = false;

	snprintf(refusal_log, sizeof(refusal_log), "/tmp/kanel-step-%d.log",
		 getpid());
	job_env(&j, 1, 1, "esp", "momentum", LR);
	setenv("KANEL_OUTER_LR", "0.5", 1);
	start_job(&j);
	unsetenv("KANEL_OUTER_LR");
	spawn_worker(&j, 0, local_refusals);
	end_job(&j, true);
	assert_workers_ok(1);
	f = fopen(refusal_log, "r");
	cr_assert(f);
	while (fgets(line, sizeof(line), f))
		told |= strstr(line, "kn_worker_step_done()") != NULL;
	fclose(f);
	unlink(refusal_log);
	cr_assert(told, "no reason given for -EPROTO");
}

static int applied_under_bsp(unsigned int rank)
{
	float p[8] = { 0 }, g[8] = { 0 };
	struct kn_worker *w = join(rank);
	struct kn_job_info job;
	int ret;

	if (!w)
		return -ENOMEM;
	ret = kn_worker_register(w, "x", KN_DTYPE_FP32, 8, p, g);
	if (!ret)
		ret = kn_worker_start(w);
	if (!ret)
		ret = kn_worker_job(w, &job);
	if (!ret && (job.local_steps || job.protocol != KN_SYNC_CGP))
		ret = -EBADMSG;
	/* the servers apply this job's update: the program may not */
	if (!ret &&
	    kn_worker_step_done(w, 0.001, KN_STEP_APPLIED, NULL) != -EINVAL)
		ret = -EBADMSG;
	if (!ret)
		ret = kn_worker_step_done(w, 0.001, 0, NULL);
	if (!ret)
		ret = kn_worker_step(w, NULL); /* allowed, and timed */
	kn_worker_destroy(w);
	return ret;
}

Test(step, gradient_jobs_refuse_applied_steps, .timeout = 60)
{
	run_job(1, 1, "cgp", "sgd", LR, applied_under_bsp);
}
