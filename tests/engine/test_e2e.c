/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_e2e.c - whole jobs on this machine: a coordinator and servers as
 * child processes (the roles' entry points), workers as child processes
 * on the public kn_worker_* API, over the transport named by
 * KANEL_TEST_TRANSPORT (tcp on loopback by default; tests/rxe runs it
 * with verbs).  Values are chosen so that every sum and update is exact
 * in fp32 (small integers, powers of two), so results are compared for
 * equality: the documented summation order gives one answer.
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "kanel.h"
#include "job_util.h"
#include "roles.h"

/* ---- BSP, exact ---- */

#define LEN_A  5000 /* 5 chunks of 1024 floats: not a multiple */
#define LEN_B  3
#define ROUNDS 4
#define LR     "0.5"

static float grad_value(unsigned int rank, unsigned int round, size_t i)
{
	return (float)((rank + 1) * (round + 1)) + (float)(i % 4);
}

static float init_value(size_t i)
{
	return (float)(i % 16) * 0.125f;
}

/* What BSP with SGD makes of it: w -= lr * (sum over ranks) / n. */
static float expected(size_t i, unsigned int nworkers, unsigned int rounds,
		      const unsigned int *alive_until)
{
	float w = init_value(i);

	for (unsigned int r = 0; r < rounds; r++) {
		float sum = 0;
		unsigned int n = 0;

		for (unsigned int k = 0; k < nworkers; k++) {
			if (alive_until && r >= alive_until[k])
				continue;
			sum += grad_value(k, r, i);
			n++;
		}
		w -= 0.5f * (sum * (1.0f / (float)n));
	}
	return w;
}

/* 0 if the @n values at @p are expected()'s, -EBADMSG (the first that
 * is not on stderr) if not. */
static int model_is(const float *p, size_t n, unsigned int nworkers,
		    unsigned int rounds, const unsigned int *alive_until)
{
	for (size_t i = 0; i < n; i++) {
		float want = expected(i, nworkers, rounds, alive_until);

		if (p[i] != want) {
			fprintf(stderr, "value %zu is %g, expected %g\n", i,
				(double)p[i], (double)want);
			return -EBADMSG;
		}
	}
	return 0;
}

static unsigned int bsp_workers;

static int bsp_worker(unsigned int rank)
{
	float *pa = malloc(LEN_A * 4), *ga = malloc(LEN_A * 4);
	float pb[LEN_B], gb[LEN_B];
	struct kn_worker *w = join(rank);
	int ret;

	if (!w || !pa || !ga)
		return -ENOMEM;
	for (size_t i = 0; i < LEN_A; i++)
		pa[i] = rank == 0 ? init_value(i) : -1;
	for (size_t i = 0; i < LEN_B; i++)
		pb[i] = rank == 0 ? init_value(i) : -1;
	ret = kn_worker_register(w, "b", KN_DTYPE_FP32, LEN_B, pb, gb);
	if (!ret)
		ret = start_with(w, "a", LEN_A, pa, ga);
	/* the initial model is rank 0's everywhere */
	for (size_t i = 0; !ret && i < LEN_A; i++)
		if (pa[i] != init_value(i))
			ret = -EBADMSG;
	for (unsigned int r = 0; !ret && r < ROUNDS; r++) {
		for (size_t i = 0; i < LEN_A; i++)
			ga[i] = grad_value(rank, r, i);
		for (size_t i = 0; i < LEN_B; i++)
			gb[i] = grad_value(rank, r, i);
		ret = kn_worker_step(w, NULL);
	}
	if (!ret)
		ret = model_is(pa, LEN_A, bsp_workers, ROUNDS, NULL);
	if (!ret)
		ret = model_is(pb, LEN_B, bsp_workers, ROUNDS, NULL);
	return end_worker(w, pa, ga, ret);
}

Test(e2e, bsp_sgd_exact_4_workers_2_servers, .timeout = 120)
{
	bsp_workers = 4;
	run_job(4, 2, "bsp", "sgd", LR, bsp_worker);
}

/* ---- --metrics: where the time went ---- */

/* The "n" of stage @stage in @line, or -1. */
static long stage_count(const char *line, const char *stage)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\":{\"n\":", stage);
	p = strstr(line, pat);
	return p ? strtol(p + strlen(pat), NULL, 10) : -1;
}

/* The "p50_us" of stage @stage in @line, or -1. */
static double stage_p50(const char *line, const char *stage)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\":{", stage);
	p = strstr(line, pat);
	p = p ? strstr(p, "\"p50_us\":") : NULL;
	return p ? strtod(p + 9, NULL) : -1;
}

/*
 * Every worker and the server write a figures line with their stages:
 * a worker one round per kn_worker_step, the server one apply per chunk
 * and round (a: 5 chunks, b: 1, ROUNDS rounds).
 */
Test(e2e, metrics_lines_give_every_stage, .timeout = 120)
{
	char path[] = "/tmp/kanel-stages-XXXXXX", line[4096];
	unsigned int workers = 0, servers = 0;
	struct job j = { 0 };
	int fd = mkstemp(path);
	FILE *f;

	cr_assert_geq(fd, 0);
	close(fd);
	setenv("KANEL_METRICS", path, 1);
	bsp_workers = 2;
	job_env(&j, 2, 1, "bsp", "sgd", LR);
	start_job(&j);
	for (unsigned int w = 0; w < 2; w++)
		spawn_worker(&j, w, bsp_worker);
	end_job(&j, true);
	unsetenv("KANEL_METRICS");
	assert_workers_ok(2);
	f = fopen(path, "r");
	cr_assert(f);
	while (fgets(line, sizeof(line), f)) {
		if (strstr(line, "\"role\":\"worker\"")) {
			workers++;
			cr_expect_eq(stage_count(line, "round"), ROUNDS, "%s",
				     line);
			cr_expect_eq(stage_count(line, "handoff"), ROUNDS);
			cr_expect_eq(stage_count(line, "answer"), ROUNDS);
			cr_expect_gt(stage_p50(line, "round"), 0, "%s", line);
			cr_expect_geq(stage_p50(line, "round"),
				      stage_p50(line, "answer"), "%s", line);
		} else if (strstr(line, "\"role\":\"server\"")) {
			servers++;
			cr_expect_eq(stage_count(line, "apply"), 6 * ROUNDS,
				     "%s", line);
			cr_expect_eq(stage_count(line, "gather"), 6 * ROUNDS);
			/* a release per worker and round, and the model */
			cr_expect_geq(stage_count(line, "write"),
				      2 * 6 * ROUNDS, "%s", line);
		}
	}
	fclose(f);
	unlink(path);
	cr_expect_eq(workers, 2);
	cr_expect_eq(servers, 1);
}

/* ---- fp16 and bf16 tensors, 100 tensors ---- */

#define NT    100
#define LEN_T 300
static enum kn_dtype half_type;

static int many_worker(unsigned int rank)
{
	size_t es = kn_dtype_size(half_type);
	char *p = malloc(NT * LEN_T * es), *g = malloc(NT * LEN_T * es);
	float *tmp = malloc(LEN_T * 4);
	struct kn_worker *w = join(rank);
	int ret = w && p && g && tmp ? 0 : -ENOMEM;

	for (unsigned int t = 0; !ret && t < NT; t++) {
		char key[16];

		for (size_t i = 0; i < LEN_T; i++)
			tmp[i] = rank == 0 ? init_value(i + t) : -1;
		kn_convert(p + t * LEN_T * es, half_type, tmp, KN_DTYPE_FP32,
			   LEN_T);
		snprintf(key, sizeof(key), "layer%03u", t);
		ret = kn_worker_register(w, key, half_type, LEN_T,
					 p + t * LEN_T * es,
					 g + t * LEN_T * es);
	}
	if (!ret)
		ret = kn_worker_start(w);
	for (unsigned int r = 0; !ret && r < 2; r++) {
		for (unsigned int t = 0; t < NT; t++) {
			for (size_t i = 0; i < LEN_T; i++)
				tmp[i] = grad_value(rank, r, i + t);
			kn_convert(g + t * LEN_T * es, half_type, tmp,
				   KN_DTYPE_FP32, LEN_T);
		}
		ret = kn_worker_step(w, NULL);
	}
	for (unsigned int t = 0; !ret && t < NT; t++) {
		kn_convert(tmp, KN_DTYPE_FP32, p + t * LEN_T * es, half_type,
			   LEN_T);
		for (size_t i = 0; !ret && i < LEN_T; i++) {
			float want = expected(i + t, 2, 2, NULL);

			/* the master copy is fp32; the tensor rounds it */
			if (fabsf(tmp[i] - want) > fabsf(want) * 0.01f) {
				fprintf(stderr,
					"worker %u: %u[%zu] = %g, want "
					"%g\n",
					rank, t, i, (double)tmp[i],
					(double)want);
				ret = -EBADMSG;
			}
		}
	}
	kn_worker_destroy(w);
	free(p);
	free(g);
	free(tmp);
	return ret;
}

static void many_tensors(enum kn_dtype dt)
{
	half_type = dt;
	run_job(2, 2, "bsp", "sgd", LR, many_worker);
}

Test(e2e, hundred_fp16_tensors, .timeout = 120)
{
	many_tensors(KN_DTYPE_FP16);
}

Test(e2e, hundred_bf16_tensors, .timeout = 120)
{
	many_tensors(KN_DTYPE_BF16);
}

/* ---- ASP ---- */

#define ASP_STEPS 20

static unsigned int asp_workers;

/*
 * Every worker of the job has made its steps.  ASP weighs a push by the
 * workers in the job when it is applied, so one that left early would
 * make the others' last pushes weigh more: the bound the test checks
 * holds for pushes applied while all are in.  Bounded by the test's wait.
 */
static void all_pushed(void)
{
	__atomic_add_fetch(&sh->arrived, 1, __ATOMIC_SEQ_CST);
	for (int i = 0;
	     i < WAIT_S * 1000 &&
	     __atomic_load_n(&sh->arrived, __ATOMIC_SEQ_CST) < (int)asp_workers;
	     i++)
		usleep(1000);
}

static int asp_worker(unsigned int rank)
{
	float p[64], g[64];
	struct kn_worker *w = join(rank);
	int ret = w ? 0 : -ENOTCONN;

	for (size_t i = 0; i < 64; i++) {
		p[i] = rank == 0 ? 1000.0f : -1;
		g[i] = 1.0f;
	}
	if (!ret)
		ret = start_with(w, "p", 64, p, g);
	for (unsigned int s = 0; !ret && s < ASP_STEPS; s++)
		ret = kn_worker_step(w, NULL);
	memcpy(sh->values[rank], p, sizeof(p));
	all_pushed();
	kn_worker_destroy(w);
	return ret;
}

/*
 * One worker: every push applied exactly once at staleness 0, so the
 * value is exact.  Three workers: each push applied once as a third of a
 * round, its rate damped by the rounds it missed (lr / max(1, tau / 3)),
 * so the 60 pushes move the model by 20 at most, all of them undamped;
 * each worker's last view has moved, and by no more than that.  The
 * workers stay until all have pushed (all_pushed): over the net suite's
 * slow links one once finished first, and the others' last pushes,
 * weighed by the two left, moved worker 2's view by 20.58.
 */
Test(e2e, asp_applies_every_push_once, .timeout = 120)
{
	asp_workers = 1;
	run_job(1, 1, "asp", "sgd", "1", asp_worker);
	cr_assert_eq(sh->values[0][0], 1000.0f - ASP_STEPS);
	cr_assert_eq(sh->values[0][63], 1000.0f - ASP_STEPS);

	asp_workers = 3;
	run_job(3, 2, "asp", "sgd", "1", asp_worker);
	for (unsigned int w = 0; w < 3; w++) {
		float v = sh->values[w][0];

		cr_assert_lt(v, 1000.0f, "worker %u: %g", w, (double)v);
		cr_assert_geq(v, 1000.0f - ASP_STEPS - 1e-3f, "worker %u: %g",
			      w, (double)v);
	}
}

/* Heavy ball's distance after @rounds rounds of a mean gradient of 1. */
static double heavy_ball(unsigned int rounds, double mu)
{
	double m = 0, moved = 0;

	for (unsigned int r = 0; r < rounds; r++) {
		m = mu * m + 1;
		moved += m;
	}
	return moved;
}

/*
 * ASP under momentum 0.9: each push is a third of a round, and the
 * velocity turns once per round's worth of pushes.  One worker: a push is
 * a round, and the model follows heavy ball step for step (120.94 after
 * 20).  Three workers: 60 pushes make 20 rounds, so the model moves by
 * heavy ball's 20 rounds at most; turning the velocity at every push, as
 * a round of its own, it moved by 170 (momentum over pushes, not rounds).
 */
Test(e2e, asp_momentum_turns_once_per_round, .timeout = 120)
{
	double hb = heavy_ball(ASP_STEPS, 0.9);

	setenv("KANEL_MOMENTUM", "0.9", 1);
	asp_workers = 1;
	run_job(1, 1, "asp", "momentum", "1", asp_worker);
	cr_assert_float_eq(sh->values[0][0], 1000.0 - hb, 0.02, "%g, not %g",
			   (double)sh->values[0][0], 1000.0 - hb);

	asp_workers = 3;
	run_job(3, 2, "asp", "momentum", "1", asp_worker);
	unsetenv("KANEL_MOMENTUM");
	for (unsigned int w = 0; w < 3; w++) {
		float v = sh->values[w][0];

		cr_assert_lt(v, 1000.0f, "worker %u: %g", w, (double)v);
		cr_assert_geq(v, 1000.0 - hb - 0.02, "worker %u: %g, below %g",
			      w, (double)v, 1000.0 - hb);
	}
}

/* ---- faults ---- */

/* Worker 2 dies (kill -9) before its third push; the others go on. */
static int dying_worker(unsigned int rank)
{
	float *pa = malloc(LEN_A * 4), *ga = malloc(LEN_A * 4);
	struct kn_worker *w = join(rank);
	unsigned int alive_until[3] = { 99, 99, 2 };
	int ret = w && pa && ga ? 0 : -ENOMEM;

	for (size_t i = 0; i < LEN_A; i++)
		pa[i] = rank == 0 ? init_value(i) : -1;
	if (!ret)
		ret = start_with(w, "a", LEN_A, pa, ga);
	for (unsigned int r = 0; !ret && r < ROUNDS + 2; r++) {
		if (rank == 2 && r == 2)
			raise(SIGKILL);
		for (size_t i = 0; i < LEN_A; i++)
			ga[i] = grad_value(rank, r, i);
		ret = kn_worker_step(w, NULL);
	}
	if (!ret)
		ret = model_is(pa, LEN_A, 3, ROUNDS + 2, alive_until);
	return end_worker(w, pa, ga, ret);
}

/* A 3-worker, 2-server BSP job of @fn in @j, back once its worker 2 is
 * dead of SIGKILL (reaped; its pid is still in @j). */
static void start_losing_worker_2(struct job *j, worker_fn *fn)
{
	int st;

	job_env(j, 3, 2, "bsp", "sgd", LR);
	start_job(j);
	for (unsigned int w = 0; w < 3; w++)
		spawn_worker(j, w, fn);
	cr_assert_eq(waitpid(j->workers[2], &st, 0), j->workers[2]);
	cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
}

Test(e2e, killed_worker_is_removed_and_the_rest_go_on, .timeout = 120)
{
	struct job j = { 0 };

	start_losing_worker_2(&j, dying_worker);
	j.workers[2] = 0;
	end_job(&j, true);
	for (unsigned int w = 0; w < 2; w++) {
		cr_assert_eq(sh->status[w], 0, "worker %u: %s", w,
			     strerror(-sh->status[w]));
		/* within the heartbeat timeout, not a start-up timeout */
		cr_assert_lt(sh->seconds[w], 15.0, "worker %u: %.1f s", w,
			     sh->seconds[w]);
	}
}

/*
 * The coordinator stopped (SIGSTOP) for twice the heartbeat timeout
 * while every worker trains on: the workers' heartbeats wait in its
 * sockets, and the pause is its own, not theirs.  Once it runs again it
 * must remove nobody, and every worker ends its steps.  A coordinator
 * that judged by the clock alone removed all of them at once ("sent no
 * heartbeat in time"), and their next step failed.
 */
#define PAUSED_STEPS 40

/* The heartbeat timeout job_env sets, in seconds. */
static double heartbeat_s(void)
{
	return getenv("KANEL_IN_RXE_VM") ? 4.0 : 1.0;
}

static int paced_worker(unsigned int rank)
{
	float p[64] = { 0 }, g[64];
	struct kn_worker *w = join(rank);
	int ret = w ? 0 : -ENOTCONN;

	if (!ret)
		ret = start_with(w, "p", 64, p, g);
	if (!ret)
		__atomic_add_fetch(&sh->arrived, 1, __ATOMIC_SEQ_CST);
	for (unsigned int r = 0; !ret && r < PAUSED_STEPS; r++) {
		for (size_t i = 0; i < 64; i++)
			g[i] = 1;
		ret = kn_worker_step(w, NULL);
		usleep(100000);
	}
	if (ret)
		kn_last_message(sh->text[rank], sizeof(sh->text[rank]));
	kn_worker_destroy(w);
	return ret;
}

/* Workers 0 to @n - 1 of @j running paced_worker(), back once they
 * all train. */
static void spawn_paced(struct job *j, int n)
{
	double deadline = (double)time(NULL) + WAIT_S;

	for (int w = 0; w < n; w++)
		spawn_worker(j, (unsigned int)w, paced_worker);
	while (__atomic_load_n(&sh->arrived, __ATOMIC_SEQ_CST) < n &&
	       time(NULL) < deadline)
		usleep(20000);
	cr_assert_eq(sh->arrived, n, "the workers did not start");
}

Test(e2e, a_paused_coordinator_removes_no_worker, .timeout = 120)
{
	struct job j = { 0 };

	job_env(&j, 3, 1, "bsp", "sgd", LR);
	start_job(&j);
	spawn_paced(&j, 3);
	usleep(300000);
	/* twice the heartbeat timeout */
	cr_assert_eq(kill(j.coord, SIGSTOP), 0);
	usleep((useconds_t)(2 * heartbeat_s() * 1e6));
	cr_assert_eq(kill(j.coord, SIGCONT), 0);
	end_job(&j, true);
	assert_workers_ok(3);
}

/*
 * A server stopped (SIGSTOP) while the workers train: its connections
 * stay up and say nothing.  The coordinator names it within three
 * heartbeat timeouts, every worker's step fails with that reason, and
 * the job ends; before, the workers waited out their start-up timeout
 * and the coordinator ended without a word about the server.
 */
Test(e2e, a_hung_server_is_named, .timeout = 120)
{
	struct job j = { 0 };
	char log[64], *text = NULL;
	size_t cap = 0;
	int st[2];
	FILE *f;

	snprintf(log, sizeof(log), "/tmp/kanel-test-%d.coord", getpid());
	job_env(&j, 2, 1, "bsp", "sgd", LR);
	start_job_logged(&j, log, NULL, NULL);
	spawn_paced(&j, 2);
	cr_assert_eq(kill(j.servers[0], SIGSTOP), 0);
	/* named within 3 heartbeat timeouts (and a margin): not the
	 * start-up timeout's 20 s */
	for (unsigned int w = 0; w < 2; w++)
		st[w] = reap(j.workers[w],
			     (double)time(NULL) + 3 * heartbeat_s() + 5);
	kill(j.servers[0], SIGCONT); /* before any assertion: never left
					stopped */
	for (unsigned int w = 0; w < 2; w++) {
		j.workers[w] = 0;
		cr_assert_eq(st[w], 0, "worker %u did not end in time", w);
		cr_assert_neq(sh->status[w], 0, "worker %u finished", w);
		cr_assert_not_null(strstr(sh->text[w], "server 0 sent nothing "
						       "for"),
				   "worker %u: %s", w, sh->text[w]);
	}
	end_job(&j, false);
	f = fopen(log, "r");
	cr_assert_not_null(f);
	cr_assert_gt(getdelim(&text, &cap, '\0', f), 0);
	fclose(f);
	unlink(log);
	cr_assert_not_null(strstr(text, "coordinator: server 0 sent nothing "
					"for"),
			   "%s", text);
	cr_assert_not_null(strstr(text, "treating it as hung"), "%s", text);
	free(text);
}

/*
 * A worker that finished (kn_worker_finish) and lives on, as kanel
 * train's worker 0 does while it evaluates, sees a server go away: the
 * job's orderly end, where the server's reset overtakes the SHUTDOWN
 * (about one normal end in ten).  Here the server is killed after worker
 * 0 finished, so that the reset comes first every time.  Worker 0 logs
 * no loss ("lost server 0: Connection reset by peer", then "the job
 * ended" came before).
 */
static char finished_log[64];

static int finishing_worker(unsigned int rank)
{
	float p[64] = { 0 }, g[64] = { 0 };
	struct kn_worker *w;
	int fd, ret;

	if (rank == 0) {
		fd = open(finished_log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (fd < 0 || dup2(fd, 2) < 0)
			return -errno;
		close(fd);
	}
	w = join(rank);
	ret = w ? 0 : -ENOTCONN;
	if (!ret)
		ret = start_with(w, "p", 64, p, g);
	for (unsigned int r = 0; !ret && rank == 0 && r < 3; r++)
		ret = kn_worker_step(w, NULL);
	if (!ret && rank == 0) {
		ret = kn_worker_finish(w);
		__atomic_add_fetch(&sh->arrived, 1, __ATOMIC_SEQ_CST);
		/* lives on until the test has killed the server */
		for (int i = 0;
		     i < 200 &&
		     __atomic_load_n(&sh->arrived, __ATOMIC_SEQ_CST) < 2;
		     i++)
			usleep(20000);
	}
	/* worker 1 steps alone until the server is gone */
	while (!ret && rank == 1) {
		ret = kn_worker_step(w, NULL);
		usleep(20000);
	}
	kn_worker_destroy(w);
	return rank == 1 ? 0 : ret;
}

Test(e2e, a_finished_worker_logs_no_loss_when_a_server_goes, .timeout = 120)
{
	struct job j = { 0 };
	double deadline = (double)time(NULL) + WAIT_S;
	char *text = NULL;
	size_t cap = 0;
	FILE *f;

	snprintf(finished_log, sizeof(finished_log), "/tmp/kanel-test-%d.w0",
		 getpid());
	job_env(&j, 2, 1, "bsp", "sgd", LR);
	start_job(&j);
	for (unsigned int w = 0; w < 2; w++)
		spawn_worker(&j, w, finishing_worker);
	while (__atomic_load_n(&sh->arrived, __ATOMIC_SEQ_CST) < 1 &&
	       time(NULL) < deadline)
		usleep(20000);
	cr_assert_eq(sh->arrived, 1, "worker 0 did not finish");
	cr_assert_eq(kill(j.servers[0], SIGKILL), 0);
	usleep(500000); /* its reset reaches worker 0 */
	__atomic_add_fetch(&sh->arrived, 1, __ATOMIC_SEQ_CST);
	end_job(&j, false);
	cr_assert_eq(sh->status[0], 0, "worker 0: %s",
		     strerror(-sh->status[0]));
	f = fopen(finished_log, "r");
	cr_assert_not_null(f);
	if (getdelim(&text, &cap, '\0', f) < 0) {
		free(text);
		text = strdup("");
	}
	fclose(f);
	unlink(finished_log);
	cr_assert_null(strstr(text, "lost"), "%s", text);
	cr_assert_null(strstr(text, "the job ended"), "%s", text);
	free(text);
}

/*
 * The coordinator killed while the job runs: the servers exit non-zero
 * (the job did not end well, and a supervisor may start one again),
 * where they exited 0 as at a normal end.
 */
Test(e2e, a_server_whose_coordinator_dies_exits_non_zero, .timeout = 120)
{
	struct job j = { 0 };

	job_env(&j, 2, 1, "bsp", "sgd", LR);
	start_job(&j);
	spawn_paced(&j, 2);
	cr_assert_eq(kill(j.coord, SIGKILL), 0);
	cr_assert_eq(reap(j.servers[0], (double)time(NULL) + WAIT_S), 1,
		     "the server's exit status");
	j.servers[0] = 0;
	j.nservers = 0;
	for (unsigned int w = 0; w < 2; w++)
		reap(j.workers[w], (double)time(NULL) + WAIT_S);
	j.nworkers = 0;
	end_job(&j, false);
}

/* A process with the wrong secret is refused; the job is unharmed. */
static int intruder(unsigned int rank)
{
	struct kn_worker_options o = { .rank = (int)rank,
				       .secret_file = "/tmp/kanel-test-wrong",
				       .timeout_ms = 5000 };
	struct kn_worker *w = NULL;
	int ret = kn_worker_create(&o, &w);

	if (!ret)
		kn_worker_destroy(w);
	return ret;
}

static int one_step_worker(unsigned int rank)
{
	float p[16] = { 0 }, g[16] = { 0 };
	struct kn_worker *w;
	int ret;

	usleep(300000); /* after the intruder */
	w = join(rank);
	ret = w ? 0 : -ENOTCONN;
	if (!ret)
		ret = start_with(w, "p", 16, p, g);
	if (!ret)
		ret = kn_worker_step(w, NULL);
	kn_worker_destroy(w);
	return ret;
}

Test(e2e, wrong_secret_is_refused, .timeout = 120)
{
	struct job j = { 0 };
	pid_t pid;
	int st;

	write_secret("/tmp/kanel-test-wrong", "not the job's secret");
	job_env(&j, 1, 1, "bsp", "sgd", LR);
	start_job(&j);
	/* it claims to be worker 0, and comes first */
	pid = fork();
	if (pid == 0) {
		sh->status[7] = intruder(0);
		_exit(0);
	}
	spawn_worker(&j, 0, one_step_worker);
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	end_job(&j, true);
	unlink("/tmp/kanel-test-wrong");
	cr_assert_neq(sh->status[7], 0, "the intruder got in");
	assert_workers_ok(1);
}

/* A worker whose tensor differs from the job's gets -EINVAL at start. */
static int odd_worker(unsigned int rank)
{
	float p[32] = { 0 }, g[32] = { 0 };
	struct kn_worker *w;
	int ret;

	if (rank == 1)
		usleep(300000); /* worker 0's table is the job's */
	w = join(rank);
	ret = w ? 0 : -ENOTCONN;
	if (!ret)
		ret = start_with(w, "p", rank == 1 ? 31 : 32, p, g);
	kn_worker_destroy(w);
	return ret;
}

/*
 * A 2-worker BSP job under @opt whose worker 1, running @fn as worker 0
 * does, is refused: -EINVAL within 3 s, and worker 0 is refused too.
 */
static void run_refused_job(const char *opt, worker_fn *fn)
{
	struct job j = { 0 };

	job_env(&j, 2, 1, "bsp", opt, LR);
	setenv("KANEL_STARTUP_TIMEOUT", "20", 1);
	start_job(&j);
	for (unsigned int w = 0; w < 2; w++)
		spawn_worker(&j, w, fn);
	end_job(&j, false);
	cr_assert_eq(sh->status[1], -EINVAL, "%s", strerror(-sh->status[1]));
	cr_assert_lt(sh->seconds[1], 3.0, "the error came late");
	cr_assert_eq(sh->status[0], -EINVAL, "%s", strerror(-sh->status[0]));
}

Test(e2e, mismatched_shape_is_a_clear_error, .timeout = 120)
{
	/* the job cannot start: worker 0 hears it at once, not at the
	 * start-up deadline */
	run_refused_job("sgd", odd_worker);
	cr_assert_lt(sh->seconds[0], 3.0, "worker 0 waited %.1f s",
		     sh->seconds[0]);
}

/*
 * --optimizer auto: worker 0 steps the model itself (own_optimizer), so
 * the job runs sum; worker 1 has no optimizer of its own and is refused
 * with a reason, and the job cannot start.
 */
static int own_or_not_worker(unsigned int rank)
{
	struct kn_worker_options o = { .rank = (int)rank,
				       .own_optimizer = rank == 0 };
	float p[32] = { 0 }, g[32] = { 0 };
	struct kn_worker *w = NULL;
	struct kn_job_info info;
	int ret;

	if (rank == 1)
		usleep(300000); /* worker 0's table is the job's */
	ret = kn_worker_create(&o, &w);
	/* each worker settles auto from its own program at once */
	if (!ret)
		ret = kn_worker_job(w, &info);
	if (!ret && info.summation != (rank == 0))
		ret = -EBADMSG;
	if (!ret)
		ret = start_with(w, "p", 32, p, g);
	kn_worker_destroy(w);
	return ret;
}

Test(e2e, auto_optimizer_refuses_a_worker_without_the_first_ones,
     .timeout = 120)
{
	run_refused_job("auto", own_or_not_worker);
}

/*
 * Worker 2 dies; a new process takes its rank, is brought up to the
 * current model (not the initial one) and trains on with the others.
 */
static int rejoining_worker(unsigned int rank)
{
	float *pa = malloc(LEN_A * 4), *ga = malloc(LEN_A * 4);
	struct kn_worker *w;
	int ret;

	usleep(1500000); /* after the first one was removed */
	w = join(rank);
	ret = w && pa && ga ? 0 : -ENOMEM;
	for (size_t i = 0; i < LEN_A; i++)
		pa[i] = -1;
	if (!ret)
		ret = start_with(w, "a", LEN_A, pa, ga);
	/* a model that has moved, one round's in every chunk (the five
	 * chunks sit on two servers: a chunk a round behind the others is
	 * sat out, so the start waits for its round) */
	for (size_t i = 0; !ret && i < LEN_A; i++)
		if (pa[i] == -1 || pa[i] == init_value(i) ||
		    pa[i] != pa[i % 16])
			ret = -EBADMSG;
	for (unsigned int r = 0; !ret && r < 3; r++) {
		for (size_t i = 0; i < LEN_A; i++)
			ga[i] = 1;
		ret = kn_worker_step(w, NULL);
	}
	return end_worker(w, pa, ga, ret);
}

/* @rounds steps of 1 on tensor "a", 0.1 s apart; worker 2 dies in the
 * third if @kill_rank_2. */
static int stepping_worker(unsigned int rank, unsigned int rounds,
			   bool kill_rank_2)
{
	float *pa = malloc(LEN_A * 4), *ga = malloc(LEN_A * 4);
	struct kn_worker *w = join(rank);
	int ret = w && pa && ga ? 0 : -ENOMEM;

	for (size_t i = 0; i < LEN_A; i++)
		pa[i] = rank == 0 ? init_value(i) : -1;
	if (!ret)
		ret = start_with(w, "a", LEN_A, pa, ga);
	for (unsigned int r = 0; !ret && r < rounds; r++) {
		if (kill_rank_2 && rank == 2 && r == 2)
			raise(SIGKILL);
		for (size_t i = 0; i < LEN_A; i++)
			ga[i] = 1;
		ret = kn_worker_step(w, NULL);
		usleep(100000); /* long enough for the rejoin to overlap */
	}
	return end_worker(w, pa, ga, ret);
}

static int slow_worker(unsigned int rank)
{
	return stepping_worker(rank, 40, true);
}

Test(e2e, a_dead_worker_rejoins_with_the_current_model, .timeout = 120)
{
	struct job j = { 0 };

	start_losing_worker_2(&j, slow_worker);
	spawn_worker(&j, 2, rejoining_worker);
	end_job(&j, true);
	assert_workers_ok(3);
}

/*
 * A process that takes a rank whose old process still holds it (as
 * kanel launch --restart-workers does, at once, while the old one's
 * reset may not have been seen yet) is refused "connected already" and
 * connects again until the old connection is gone: here the first
 * worker 2 is still training when the second comes, and is killed a
 * second later; the second gets in then and trains on with the others.
 * A refusal that ended the newcomer fails this.
 */
static int steady_worker(unsigned int rank)
{
	return stepping_worker(rank, 50, false);
}

Test(e2e, a_rank_held_by_a_live_process_is_taken_once_it_is_gone,
     .timeout = 120)
{
	struct job j = { 0 };
	pid_t first;
	int st;

	job_env(&j, 3, 2, "bsp", "sgd", LR);
	start_job(&j);
	for (unsigned int w = 0; w < 3; w++)
		spawn_worker(&j, w, steady_worker);
	first = j.workers[2];
	/* joins 1.5 s from now, while the first worker 2 trains */
	spawn_worker(&j, 2, rejoining_worker);
	sleep(3);
	cr_assert_eq(waitpid(first, &st, WNOHANG), 0,
		     "the first worker 2 did not outlast the second's arrival");
	kill(first, SIGKILL);
	cr_assert_eq(waitpid(first, &st, 0), first);
	end_job(&j, true);
	assert_workers_ok(3);
}

/*
 * A rejoiner that finds its chunks a round apart: worker 0, alone after
 * worker 1 died, has taken a round of tensor "a" but not yet of "b".
 * The rejoiner sits out b's round and starts from one round's model
 * (each value init - 1.0), not from a's newer and b's older one; the
 * next step is then both workers' (init - 1.5 everywhere).  Flags in
 * values[][63] order the two: "a" pushed, the rejoiner joining.
 */
#define FLAG(w) (*(volatile float *)&sh->values[w][63])

static void set_flag(unsigned int w)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	FLAG(w) = 1.0f;
}

static int wait_flag(unsigned int w)
{
	for (int i = 0; i < WAIT_S * 100; i++) {
		if (FLAG(w) == 1.0f)
			return 0;
		usleep(10000);
	}
	return -ETIMEDOUT;
}

static int one_round_model(const float *pa, const float *pb, float lost)
{
	for (size_t i = 0; i < LEN_A; i++)
		if (pa[i] != init_value(i) - lost)
			return -EBADMSG;
	for (size_t i = 0; i < LEN_B; i++)
		if (pb[i] != init_value(i) - lost)
			return -EBADMSG;
	return 0;
}

static int split_round_worker(unsigned int rank)
{
	float *pa = malloc(LEN_A * 4), *ga = malloc(LEN_A * 4);
	float pb[LEN_B], gb[LEN_B];
	struct kn_worker *w;
	uint64_t h;
	int ret = pa && ga ? 0 : -ENOMEM;
	bool rejoiner = rank == 1 && sh->status[1] == -ECHILD;

	if (!ret && rejoiner)
		ret = wait_flag(0); /* "a" is a round ahead of "b" */
	if (!ret && rejoiner)
		set_flag(1);
	w = ret ? NULL : join(rank);
	if (!ret && !w)
		ret = -ENOTCONN;
	for (size_t i = 0; !ret && i < LEN_A; i++) {
		pa[i] = rank == 0 ? init_value(i) : -1;
		ga[i] = 1;
	}
	for (size_t i = 0; !ret && i < LEN_B; i++) {
		pb[i] = rank == 0 ? init_value(i) : -1;
		gb[i] = 1;
	}
	if (!ret)
		ret = start_ab(w, LEN_A, pa, ga, LEN_B, pb, gb);
	if (!ret && rejoiner)
		ret = one_round_model(pa, pb, 1.0f);
	if (!ret && !rejoiner)
		ret = kn_worker_step(w, NULL); /* both: init - 0.5 */
	if (!ret && rank == 1 && !rejoiner)
		raise(SIGKILL);
	if (!ret && rank == 0) {
		usleep(300000); /* worker 1 is removed */
		ret = kn_worker_pushpull(w, "a", &h);
		if (!ret)
			ret = kn_worker_wait(w, h, -1);
		set_flag(0);
		if (!ret)
			ret = wait_flag(1);
		usleep(1500000); /* the rejoiner is in */
		if (!ret)
			ret = kn_worker_pushpull(w, "b", &h);
		if (!ret)
			ret = kn_worker_wait(w, h, -1);
		if (!ret)
			ret = one_round_model(pa, pb, 1.0f);
	}
	if (!ret)
		ret = kn_worker_step(w, NULL);
	if (!ret)
		ret = one_round_model(pa, pb, 1.5f);
	return end_worker(w, pa, ga, ret);
}

Test(e2e, a_rejoiner_sits_out_the_round_its_chunks_are_behind_in,
     .timeout = 120)
{
	struct job j = { 0 };
	int st;

	job_env(&j, 2, 1, "bsp", "sgd", LR);
	start_job(&j);
	sh->status[1] = 0;
	for (unsigned int w = 0; w < 2; w++)
		spawn_worker(&j, w, split_round_worker);
	cr_assert_eq(waitpid(j.workers[1], &st, 0), j.workers[1]);
	cr_assert(WIFSIGNALED(st), "worker 1: %s", strerror(-sh->status[1]));
	sh->status[1] = -ECHILD; /* the next one is the rejoiner */
	spawn_worker(&j, 1, split_round_worker);
	end_job(&j, true);
	assert_workers_ok(2);
}

/* With an inbox, pulls land there and the parameters stay the caller's. */
static int inbox_worker(unsigned int rank)
{
	float p[64], g[64], in[64];
	struct kn_worker *w = join(rank);
	int ret = w ? 0 : -ENOTCONN;

	for (size_t i = 0; i < 64; i++) {
		p[i] = init_value(i);
		g[i] = grad_value(0, 0, i);
		in[i] = -1;
	}
	if (!ret)
		ret = kn_worker_register(w, "p", KN_DTYPE_FP32, 64, p, g);
	if (!ret)
		ret = kn_worker_set_inbox(w, "p", in);
	if (!ret && kn_worker_set_inbox(w, "nope", in) != -ENOENT)
		ret = -EBADMSG;
	if (!ret)
		ret = kn_worker_start(w);
	for (size_t i = 0; !ret && i < 64; i++)
		if (in[i] != init_value(i))
			ret = -EBADMSG; /* the initial model, in the inbox */
	if (!ret)
		ret = kn_worker_step(w, NULL);
	for (size_t i = 0; !ret && i < 64; i++)
		if (in[i] != expected(i, 1, 1, NULL) || p[i] != init_value(i))
			ret = -EBADMSG;
	kn_worker_destroy(w);
	return ret;
}

Test(e2e, pulls_land_in_the_inbox, .timeout = 60)
{
	run_job(1, 1, "bsp", "sgd", LR, inbox_worker);
}

/* ---- fused small tensors ---- */

/*
 * A model-shaped list: convolution weights of a few sizes, each with its
 * bias and two norm vectors, and a classifier; in 64 KiB chunks, fused
 * below 64 KiB (the defaults) the small ones travel in a few groups.
 * One tensor's pulls land in an inbox.
 */
#define FT_LAYERS 12
#define FT_N	  (4 * FT_LAYERS + 2)

static size_t ft_len[FT_N];
static char ft_key[FT_N][24];
static bool ft_fused;

static void ft_shapes(void)
{
	static const size_t weights[] = { 1728,	 36864, 8192,  147456,
					  32768, 16384, 73728, 589824 };

	for (unsigned int l = 0; l < FT_LAYERS; l++) {
		size_t ch = 64u << (l % 4);

		ft_len[4 * l] = weights[l % 8];
		ft_len[4 * l + 1] = ch;
		ft_len[4 * l + 2] = ch;
		ft_len[4 * l + 3] = ch;
		snprintf(ft_key[4 * l], 24, "layer%02u.weight", l);
		snprintf(ft_key[4 * l + 1], 24, "layer%02u.bias", l);
		snprintf(ft_key[4 * l + 2], 24, "layer%02u.bn.gamma", l);
		snprintf(ft_key[4 * l + 3], 24, "layer%02u.bn.beta", l);
	}
	ft_len[FT_N - 2] = 512000; /* fc.weight: 2 MB, many chunks */
	ft_len[FT_N - 1] = 1000;
	snprintf(ft_key[FT_N - 2], 24, "fc.weight");
	snprintf(ft_key[FT_N - 1], 24, "fc.bias");
}

/* Not exact in fp32: the same sums in the same order give the same bits. */
static float ft_grad(unsigned int rank, unsigned int round, unsigned int t,
		     size_t i)
{
	return sinf((float)(i * 7 + t * 131 + round * 17 + rank * 3)) *
	       (0.01f + 0.001f * (float)t);
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;

	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 1099511628211ull;
	return h;
}

static int ft_wait_all(struct kn_worker *w, const uint64_t *h, unsigned int n)
{
	int ret = 0;

	for (unsigned int t = 0; !ret && t < n; t++)
		ret = kn_worker_wait(w, h[t], 20000);
	return ret;
}

static int fused_worker(unsigned int rank)
{
	float *p[FT_N], *g[FT_N], inbox[1000];
	uint64_t h[FT_N], hash = 14695981039346656037ull;
	struct kn_worker *w = join(rank);
	int ret = w ? 0 : -ENOTCONN;

	for (unsigned int t = 0; t < FT_N; t++) {
		p[t] = malloc(ft_len[t] * 4);
		g[t] = malloc(ft_len[t] * 4);
		for (size_t i = 0; p[t] && i < ft_len[t]; i++)
			p[t][i] = rank == 0 ? cosf((float)(i + t)) : -1;
		if (!ret && (!p[t] || !g[t]))
			ret = -ENOMEM;
		if (!ret)
			ret = kn_worker_register(w, ft_key[t], KN_DTYPE_FP32,
						 ft_len[t], p[t], g[t]);
	}
	if (!ret && kn_worker_register(w, "kanel.fused.0000", KN_DTYPE_FP32, 4,
				       inbox, inbox) != -EINVAL)
		ret = -EEXIST; /* the engine's own keys are refused */
	if (!ret)
		ret = kn_worker_set_inbox(w, "fc.bias", inbox);
	if (!ret)
		ret = kn_worker_start(w);
	/* a key never registered: not in the key table either */
	if (!ret && kn_worker_push(w, "layer99.weight", &h[0]) != -ENOENT)
		ret = -EEXIST;
	for (unsigned int r = 0; !ret && r < 6; r++) {
		for (unsigned int t = 0; t < FT_N; t++)
			for (size_t i = 0; i < ft_len[t]; i++)
				g[t][i] = ft_grad(rank, r, t, i);
		if (r < 2) {
			ret = kn_worker_step(w, NULL);
			continue;
		}
		if (r == 3 && rank == 0 && ft_fused) {
			/* a bias alone: its group-mates are not pushed yet,
			 * so its answer cannot come */
			ret = kn_worker_pushpull(w, ft_key[1], &h[1]);
			if (!ret && kn_worker_wait(w, h[1], 300) != -ETIMEDOUT)
				ret = -EALREADY;
			for (unsigned int t = FT_N; !ret && t-- > 0;)
				if (t != 1)
					ret = kn_worker_pushpull(w, ft_key[t],
								 &h[t]);
		} else if (r < 4) {
			/* in the order of a backward pass */
			for (unsigned int t = FT_N; !ret && t-- > 0;)
				ret = kn_worker_pushpull(w, ft_key[t], &h[t]);
		} else {
			/* pushes, then pulls, in key order */
			for (unsigned int t = 0; !ret && t < FT_N; t++)
				ret = kn_worker_push(w, ft_key[t], &h[t]);
			if (!ret)
				ret = ft_wait_all(w, h, FT_N);
			for (unsigned int t = 0; !ret && t < FT_N; t++)
				ret = kn_worker_pull(w, ft_key[t], &h[t]);
		}
		if (!ret)
			ret = ft_wait_all(w, h, FT_N);
	}
	for (unsigned int t = 0; !ret && t < FT_N; t++)
		hash = t == FT_N - 1 ? fnv(hash, inbox, sizeof(inbox))
				     : fnv(hash, p[t], ft_len[t] * 4);
	sh->hash[rank] = hash;
	kn_worker_destroy(w);
	for (unsigned int t = 0; t < FT_N; t++) {
		free(p[t]);
		free(g[t]);
	}
	return ret;
}

static uint64_t fused_job(const char *fuse)
{
	struct job j = { 0 };

	ft_shapes();
	ft_fused = strcmp(fuse, "0") != 0;
	job_env(&j, 3, 2, "bsp", "momentum", "0.1");
	setenv("KANEL_CHUNK_BYTES", "64K", 1);
	setenv("KANEL_FUSE_BYTES", fuse, 1);
	start_job(&j);
	for (unsigned int w = 0; w < 3; w++)
		spawn_worker(&j, w, fused_worker);
	end_job(&j, true);
	unsetenv("KANEL_FUSE_BYTES");
	for (unsigned int w = 0; w < 3; w++) {
		cr_assert_eq(sh->status[w], 0, "fuse %s, worker %u: %s", fuse,
			     w, strerror(-sh->status[w]));
		cr_assert_eq(sh->hash[w], sh->hash[0],
			     "fuse %s: worker %u's model differs from 0's",
			     fuse, w);
	}
	return sh->hash[0];
}

Test(e2e, fused_small_tensors_are_bit_exact_against_unfused, .timeout = 180)
{
	uint64_t unfused = fused_job("0"), fused = fused_job("64K");

	cr_assert_eq(fused, unfused,
		     "BSP with momentum: the fused job's model is not the "
		     "unfused one's");
}

/* ---- priorities ---- */

#define PR_BIG (8u << 20) /* floats: 32 MiB, 512 chunks of 64 KiB */

static bool pr_small_last; /* the small tensor given the lowest priority */

/*
 * A large tensor pushed first, a small one just after: with a window of
 * one chunk, the small one's write goes as soon as the window has room
 * when it is the more urgent (it was registered first), and after all
 * of the large one's when it is given the lowest priority.
 */
static int priority_worker(unsigned int rank)
{
	float *pb = calloc(PR_BIG, 4), *gb = calloc(PR_BIG, 4);
	float ps[256] = { 0 }, gs[256] = { 0 };
	struct kn_worker *w = join(rank);
	uint64_t hb, hs;
	int ret = w && pb && gb ? 0 : -ENOMEM, big;

	if (!ret)
		ret = kn_worker_register(w, "small", KN_DTYPE_FP32, 256, ps,
					 gs);
	if (!ret)
		ret = kn_worker_register(w, "big", KN_DTYPE_FP32, PR_BIG, pb,
					 gb);
	if (!ret && pr_small_last)
		ret = kn_worker_set_priority(w, "small", 1000);
	if (!ret && kn_worker_set_priority(w, "none", 0) != -ENOENT)
		ret = -EEXIST;
	if (!ret)
		ret = kn_worker_start(w);
	if (!ret && kn_worker_set_priority(w, "big", 0) != -EBUSY)
		ret = -EALREADY; /* set before the start only */
	if (!ret)
		ret = kn_worker_pushpull(w, "big", &hb);
	if (!ret)
		ret = kn_worker_pushpull(w, "small", &hs);
	if (!ret)
		ret = kn_worker_wait(w, hs, 20000);
	big = ret ? ret : kn_worker_test(w, hb);
	/* the big one: still on its way, or done before the small one */
	if (!ret && big != (pr_small_last ? 1 : 0)) {
		fprintf(stderr, "small %s: big was %s when small was done\n",
			pr_small_last ? "last" : "first",
			big ? "done" : "not done");
		ret = -EBADMSG;
	}
	if (!ret)
		ret = kn_worker_wait(w, hb, 20000);
	return end_worker(w, pb, gb, ret);
}

static void priority_job(bool small_last)
{
	struct job j = { 0 };

	pr_small_last = small_last;
	job_env(&j, 1, 1, "bsp", "sgd", LR);
	setenv("KANEL_CHUNK_BYTES", "64K", 1);
	setenv("KANEL_PUSH_WINDOW", "64K", 1);
	start_job(&j);
	spawn_worker(&j, 0, priority_worker);
	end_job(&j, true);
	unsetenv("KANEL_PUSH_WINDOW");
	cr_assert_eq(sh->status[0], 0, "small %s: %s",
		     small_last ? "last" : "first", strerror(-sh->status[0]));
}

Test(e2e, the_more_urgent_tensor_is_written_first, .timeout = 120)
{
	priority_job(false);
	priority_job(true);
}

/* ---- more chunks than the transport's queue ---- */

#define DEEP_LEN (3000u * 1024u) /* 3000 chunks of 4 KiB on one server */

/*
 * The initial model, every push and every release are one write per
 * chunk, and the tcp provider takes 1024 operations per endpoint: the
 * rest waits for room (-EAGAIN) on both sides instead of failing.
 */
static int deep_worker(unsigned int rank)
{
	float *p = malloc(DEEP_LEN * 4), *g = malloc(DEEP_LEN * 4);
	struct kn_worker *w = join(rank);
	int ret = w && p && g ? 0 : -ENOMEM;

	for (size_t i = 0; p && i < DEEP_LEN; i++)
		p[i] = rank == 0 ? init_value(i) : -1;
	if (!ret)
		ret = start_with(w, "deep", DEEP_LEN, p, g);
	for (size_t i = 0; !ret && i < DEEP_LEN; i++)
		if (p[i] != init_value(i))
			ret = -EBADMSG;
	for (unsigned int r = 0; !ret && r < 3; r++) {
		for (size_t i = 0; i < DEEP_LEN; i++)
			g[i] = grad_value(rank, r, i);
		ret = kn_worker_step(w, NULL);
	}
	if (!ret)
		ret = model_is(p, DEEP_LEN, 2, 3, NULL);
	return end_worker(w, p, g, ret);
}

Test(e2e, more_chunks_than_the_transport_queue, .timeout = 120)
{
	run_job(2, 1, "bsp", "sgd", LR, deep_worker);
}

/* ---- a wait the caller limited ---- */

/*
 * Worker 0 pushes and polls its pull with 10 ms waits while worker 1
 * holds the round back 300 ms: every wait but the last ends with
 * -ETIMEDOUT, which is the caller's to handle, so the engine logs no line
 * for any of them (a polling program would get one per slice).
 */
static int polling_worker(unsigned int rank)
{
	float p[64] = { 0 }, g[64];
	struct kn_worker *w = join(rank);
	int ret = w ? 0 : -ENOTCONN, timeouts = 0;
	uint64_t h = 0;

	for (size_t i = 0; i < 64; i++)
		g[i] = 1;
	if (!ret)
		ret = start_with(w, "p", 64, p, g);
	if (!ret && rank == 1)
		usleep(300000);
	if (!ret)
		ret = kn_worker_push(w, NULL, &h);
	if (!ret)
		ret = kn_worker_wait(w, h, -1);
	if (!ret)
		ret = kn_worker_pull(w, NULL, &h);
	while (!ret && rank == 0) {
		ret = kn_worker_wait(w, h, 10);
		if (ret != -ETIMEDOUT)
			break;
		timeouts++;
		ret = 0;
	}
	if (!ret && rank == 1)
		ret = kn_worker_wait(w, h, -1);
	if (!ret && rank == 0) {
		kn_last_message(sh->text[0], sizeof(sh->text[0]));
		if (timeouts < 5)
			ret = -EAGAIN; /* the round was not held back */
	}
	kn_worker_destroy(w);
	return ret;
}

Test(e2e, a_wait_the_caller_limited_logs_nothing, .timeout = 60)
{
	struct job j = { 0 };

	job_env(&j, 2, 1, "bsp", "sgd", LR);
	start_job(&j);
	spawn_worker(&j, 0, polling_worker);
	spawn_worker(&j, 1, polling_worker);
	end_job(&j, true);
	assert_workers_ok(1);
	cr_assert_eq(sh->status[1], 0, "%s", strerror(-sh->status[1]));
	cr_assert_str_empty(sh->text[0], "worker 0 logged: %s", sh->text[0]);
}
