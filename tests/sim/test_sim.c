/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_sim.c - the discrete-event simulator (sim/sim.h,
 * docs/simulator.md) on small jobs: that BSP converges without
 * staleness, that ASP is stale and outruns BSP behind a straggler, that
 * without noise the model follows the closed-form SGD trajectory (which
 * checks gradients, APPLYs, releases and the workers' merge), that a run
 * is a function of its seed, that every step is taken and every
 * push applied, that the cost model gives the exact time of a lone
 * worker's rounds, that a slow server bounds throughput, that every
 * protocol sync/ knows runs to the end, the loss curve, and the command
 * line's refusals and JSON.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "sim.h"
#include "test_util.h"

/* --- helpers ---------------------------------------------------------- */

static struct kn__sim_config config(uint32_t protocol, uint32_t workers,
				    uint32_t iterations, const char *imb)
{
	struct kn__sim_config cfg;

	kn__sim_config_init(&cfg);
	cfg.sync.protocol = protocol;
	cfg.workers = workers;
	cfg.iterations = iterations;
	cfg.imbalance = imb;
	return cfg;
}

/*
 * @protocol's @workers for @iterations on a noiseless one-dimensional
 * model (h = 1) at rate @lr, whose loss ratio has a closed form.
 */
static struct kn__sim_config line(uint32_t protocol, uint32_t workers,
				  uint32_t iterations, double lr)
{
	struct kn__sim_config cfg = config(protocol, workers, iterations, NULL);

	cfg.dim = 1;
	cfg.sigma = 0;
	cfg.lr = lr;
	return cfg;
}

/* @r's final loss over its initial one is @ratio, to @tol relative. */
static void expect_ratio(const struct kn__sim_result *r, double ratio,
			 double tol, const char *what)
{
	double got = r->final_loss / r->initial_loss;

	cr_expect_leq(fabs(got - ratio), tol * ratio,
		      "%s: %.17g, expected %.17g", what, got, ratio);
}

/* Run @cfg to its end; the curve is not kept (it dies with the sim). */
static struct kn__sim_result run(const struct kn__sim_config *cfg)
{
	struct kn__sim_result res;
	struct kn__sim *sim = NULL;
	char err[256] = "";
	int ret;

	ret = kn__sim_create(cfg, err, sizeof(err), &sim);
	cr_assert_eq(ret, 0, "create: %d (%s)", ret, err);
	ret = kn__sim_run(sim, &res);
	cr_assert_eq(ret, 0, "run: %d (%s)", ret, kn__sim_strerror(sim));
	kn__sim_destroy(sim);
	res.curve = NULL;
	res.ncurve = 0;
	return res;
}

/* A fresh empty file under /tmp; the caller unlinks it. */
static void temp_path(char *path, size_t cap)
{
	int fd;

	snprintf(path, cap, "/tmp/kn-test-sim-XXXXXX");
	fd = mkstemp(path);
	cr_assert_geq(fd, 0, "mkstemp: %s", strerror(errno));
	close(fd);
}

/* Cut the "wall_s" line, the one part of the JSON that may differ. */
static void drop_wall(char *json)
{
	char *p = strstr(json, "  \"wall_s\"");

	cr_assert_not_null(p, "no wall_s in %s", json);
	*p = '\0';
}

/*
 * `sim` with @args (a NULL-terminated list) plus --quiet --summary-json
 * --curve into fresh files; returns the JSON without wall_s and, in
 * *@curve, the CSV.
 */
static char *cli_run(const char *const *args, char **curve)
{
	char json_path[64], curve_path[64], *argv[64], *json;
	int argc = 0, ret;

	temp_path(json_path, sizeof(json_path));
	temp_path(curve_path, sizeof(curve_path));
	argv[argc++] = "sim";
	for (; *args; args++)
		argv[argc++] = (char *)*args;
	argv[argc++] = "--quiet";
	argv[argc++] = "--summary-json";
	argv[argc++] = json_path;
	argv[argc++] = "--curve";
	argv[argc++] = curve_path;
	argv[argc] = NULL;
	ret = kn_sim_main(argc, argv);
	cr_assert_eq(ret, 0, "sim exited %d", ret);
	json = slurp(json_path);
	*curve = slurp(curve_path);
	unlink(json_path);
	unlink(curve_path);
	drop_wall(json);
	return json;
}

/* --- convergence and staleness ---------------------------------------- */

Test(sim, bsp_without_imbalance_converges_with_no_staleness)
{
	struct kn__sim_config cfg = config(KN_SYNC_BSP, 8, 200, "none");
	struct kn__sim_result r;

	/* a small model: the wire is short next to a step */
	cfg.model_bytes = 65536;
	r = run(&cfg);
	cr_expect_eq(r.max_staleness, 0);
	cr_expect_eq(r.mean_staleness, 0.0);
	cr_expect_eq(r.staleness_hist[0], r.contributions);
	cr_expect_eq(r.applies, 200, "one version per round: %lu",
		     (unsigned long)r.applies);
	cr_expect_lt(r.final_loss, 0.05 * r.initial_loss, "loss %g -> %g",
		     r.initial_loss, r.final_loss);
	cr_expect_lt(r.wait_fraction, 0.05, "wait fraction %g",
		     r.wait_fraction);
	cr_expect_gt(r.wait_fraction, 0.0);
}

Test(sim, asp_is_stale_and_outruns_bsp_behind_a_straggler)
{
	struct kn__sim_config bc =
		config(KN_SYNC_BSP, 8, 200, "persistent:0.25:4");
	struct kn__sim_config ac =
		config(KN_SYNC_ASP, 8, 200, "persistent:0.25:4");
	struct kn__sim_result b = run(&bc), a = run(&ac);

	cr_expect_gt(a.max_staleness, 0);
	cr_expect_gt(a.mean_staleness, 0.0);
	cr_expect_gt(a.iterations_per_s, b.iterations_per_s,
		     "asp %g <= bsp %g iterations/s", a.iterations_per_s,
		     b.iterations_per_s);
	/* six fast workers idle three quarters of every round */
	cr_expect_gt(b.wait_fraction, 0.5, "bsp waits %g", b.wait_fraction);
	cr_expect_lt(a.wait_fraction, b.wait_fraction);
	cr_expect_lt(a.final_loss, 0.1 * a.initial_loss);
}

/*
 * Without noise and in one dimension (h = 1) the trajectory is known in
 * closed form, which pins down the gradients, the APPLYs, the releases
 * and the workers' merge.  BSP: every round is one full step, e_k+1 =
 * (1 - lr) e_k.  ASP with two workers stepping alike: worker 0 always
 * reaches the server first, so versions alternate between them and every
 * update, half a round (weight 1/2, staleness 1 of a round of 2: not
 * damped), uses the model of the version before last, e_n+1 = e_n -
 * (lr / 2) e_n-1 (after e_1 = (1 - lr / 2) e_0), with staleness 1 for
 * all but the first contribution.
 */
Test(sim, the_model_follows_sgd_exactly_without_noise)
{
	struct kn__sim_config bc = line(KN_SYNC_BSP, 4, 60, 0.1);
	struct kn__sim_config ac = line(KN_SYNC_ASP, 2, 60, 0.1);
	struct kn__sim_result b, a;
	double lr = 0.1, e0 = 1, e1 = 1 - lr / 2, e2, ratio;

	b = run(&bc);
	expect_ratio(&b, pow(1 - lr, 2 * 60), 1e-12, "bsp");

	a = run(&ac);
	for (int n = 1; n < 2 * 60; n++) {
		e2 = e1 - lr / 2 * e0;
		e0 = e1;
		e1 = e2;
	}
	ratio = e1 * e1;
	expect_ratio(&a, ratio, 1e-9, "asp");
	cr_expect_eq(a.max_staleness, 1);
	cr_expect_eq(a.staleness_hist[0], 1);
	cr_expect_eq(a.staleness_hist[1], 2 * 60 - 1);
}

/*
 * With momentum, as the engine applies it.  Under BSP the servers keep
 * the buffer: m_k = mu m_k-1 + e_k, e_k+1 = e_k - lr m_k (one dimension,
 * h = 1, no noise, so the round's mean gradient is e_k).
 */
Test(sim, bsp_momentum_is_the_servers_heavy_ball)
{
	struct kn__sim_config cfg = line(KN_SYNC_BSP, 4, 60, 0.1);
	struct kn__sim_result r, plain;
	double lr = 0.1, mu = 0.9, e = 1, m = 0;

	plain = run(&cfg);
	cfg.momentum = mu;
	r = run(&cfg);
	for (int k = 0; k < 60; k++) {
		m = mu * m + e;
		e -= lr * m;
	}
	expect_ratio(&r, e * e, 1e-9, "bsp");
	cr_expect_neq(r.final_loss, plain.final_loss);
}

/*
 * Under ESP the job's momentum runs on the worker with its own buffer.
 * One worker: every delta it pushes is applied whole (weight 1, outer
 * rate 1) to the model it came from, so the global model is the
 * worker's local heavy-ball
 * trajectory as it was at its last push, a few steps before the end.
 */
Test(sim, esp_momentum_runs_on_the_worker)
{
	struct kn__sim_config cfg = line(KN_SYNC_ESP, 1, 80, 0.1);
	struct kn__sim_result r;
	double lr = 0.1, mu = 0.9, e = 1, m = 0, got, best = INFINITY;

	cfg.momentum = mu;
	/* a wire slower than a step, so that ESP skips pushes */
	cfg.latency = 0.05;
	r = run(&cfg);
	got = r.final_loss / r.initial_loss;
	cr_assert_lt(r.pushes, 80, "esp skipped no push");
	for (int k = 1; k <= 80; k++) {
		double d;

		m = mu * m + e;
		e -= lr * m;
		d = fabs(got - e * e) / (e * e);
		if (k > 80 - 20 && d < best)
			best = d;
	}
	cr_expect_leq(best, 1e-9, "%.17g is no step of the heavy ball", got);
}

/*
 * The simulated ESP holds rounds while its workers' step times are even,
 * as the engine's does: the simulator hands the chunk rules the timing
 * each worker reports after a release.  In rounds every worker is
 * released with the whole round, so a round's deltas are 0 to n - 1
 * versions old, 1.5 on average with 4 workers pushing every step; under
 * the bound a worker released at once meets the other three's pushes
 * before its next, 3 versions.  One worker 4 times slower: no rounds,
 * and its deltas are older than any round's (the fast run 3 ahead).
 */
static struct kn__sim_result esp_run(const char *imb)
{
	struct kn__sim_config cfg = config(KN_SYNC_ESP, 4, 200, imb);

	cfg.latency = 0;
	cfg.sync.gamma = 1e30f; /* push after every step */
	return run(&cfg);
}

Test(sim, esp_holds_rounds_while_step_times_are_even)
{
	struct kn__sim_result even = esp_run(NULL);
	struct kn__sim_result uneven = esp_run("persistent:0.25:4");

	cr_assert_leq(even.mean_staleness, 1.6, "even workers: staleness %g",
		      even.mean_staleness);
	cr_assert_leq(even.max_staleness, 3);
	cr_assert_gt(uneven.max_staleness, 3, "a slow worker: staleness %llu",
		     (unsigned long long)uneven.max_staleness);
}

/*
 * The outer update's Nesterov momentum.  One worker, plain SGD inside
 * (no inner momentum), a wire that costs nothing and H_max 1, so that
 * ESP pushes after every step and takes none on its copy while the
 * release is on its way: each delta is lr e_k, applied whole (weight 1, outer
 * rate 1) as v_k = mu v_k-1 + d_k, x -= d_k + mu v_k.  In one dimension
 * (h = 1, no noise) that is e_k+1 = e_k - lr e_k - mu v_k, in closed
 * form; the outer momentum off is plain gradient descent, a different
 * trajectory.  (Few steps: a delta is anchor - local, and its rounding
 * grows against e as e shrinks.)
 */
Test(sim, esp_outer_momentum_is_nesterov_on_the_deltas)
{
	struct kn__sim_config cfg = line(KN_SYNC_ESP, 1, 30, 0.1);
	struct kn__sim_result r, plain;
	double lr = 0.1, mu = 0.5, e = 1, v = 0;

	cfg.latency = 0;
	cfg.sync.max_skip = 1;
	plain = run(&cfg);
	cfg.sync.outer_momentum = (float)mu;
	r = run(&cfg);
	cr_assert_eq(r.pushes, 30, "esp skipped %llu pushes",
		     (unsigned long long)(30 - r.pushes));
	cr_assert_eq(r.applies, r.pushes);
	for (uint64_t k = 0; k < r.applies; k++) {
		double d = lr * e;

		v = mu * v + d;
		e -= d + mu * v;
	}
	expect_ratio(&r, e * e, 1e-9, "esp, outer momentum 0.5");
	cr_expect_gt(fabs(r.final_loss - plain.final_loss),
		     1e-6 * plain.final_loss,
		     "the outer momentum changed nothing");
}

/* --- determinism ------------------------------------------------------ */

Test(sim, a_seed_gives_the_same_run_and_another_a_different_one)
{
	const char *const one[] = {
		"--protocol",	"asp", "--workers",   "12",
		"--iterations", "150", "--imbalance", "random:0.1:4",
		"--seed",	"7",   NULL
	};
	const char *const other[] = {
		"--protocol",	"asp", "--workers",   "12",
		"--iterations", "150", "--imbalance", "random:0.1:4",
		"--seed",	"8",   NULL
	};
	char *c1, *c2, *c3;
	char *j1 = cli_run(one, &c1), *j2 = cli_run(one, &c2);
	char *j3 = cli_run(other, &c3);

	cr_expect_str_eq(j1, j2);
	cr_expect_str_eq(c1, c2);
	cr_expect_str_neq(j1, j3);
	cr_expect(strstr(j1, "\"seed\": 7,") != NULL, "%s", j1);
	cr_expect(strstr(j1, "\"imbalance\": \"random:0.1:4\",") != NULL);
	free(j1);
	free(j2);
	free(j3);
	free(c1);
	free(c2);
	free(c3);
}

/* --- conservation ----------------------------------------------------- */

Test(sim, every_step_is_taken_and_every_push_applied_once)
{
	static const uint32_t protocols[] = { KN_SYNC_BSP, KN_SYNC_ASP };

	for (size_t p = 0; p < 2; p++) {
		struct kn__sim_config cfg =
			config(protocols[p], 9, 120, "persistent:0.25:4");
		struct kn__sim_result r;

		/* three uneven chunks: 5, 5 and 6 coordinates */
		cfg.servers = 3;
		r = run(&cfg);
		cr_expect_eq(r.steps, 9 * 120, "%s: %lu steps",
			     kn__sync_protocol_name(protocols[p]),
			     (unsigned long)r.steps);
		cr_expect_eq(r.pushes, r.steps);
		cr_expect_eq(r.contributions, 3 * r.pushes, "%s: %lu of %lu",
			     kn__sync_protocol_name(protocols[p]),
			     (unsigned long)r.contributions,
			     (unsigned long)(3 * r.pushes));
		cr_expect_eq(r.releases, 3 * r.pushes);
		cr_expect_eq(r.regroups, 0);
	}
}

/* --- the cost model --------------------------------------------------- */

Test(sim, a_lone_worker_round_is_step_wire_service_wire)
{
	static const uint32_t servers[] = { 1, 4 };

	for (size_t k = 0; k < 2; k++) {
		struct kn__sim_config cfg = config(KN_SYNC_BSP, 1, 300, NULL);
		double chunk, expect;
		struct kn__sim_result r;

		cfg.servers = servers[k];
		cfg.step_time = 0.0173;
		cfg.latency = 31e-6;
		cfg.model_bytes = 3e6;
		cfg.bandwidth = 1.1e9;
		cfg.server_rate = 7e9;
		r = run(&cfg);
		chunk = cfg.model_bytes / cfg.servers;
		expect = cfg.iterations *
			 (cfg.step_time +
			  2 * (cfg.latency + chunk / cfg.bandwidth) +
			  chunk / cfg.server_rate);
		cr_expect_leq(fabs(r.sim_time_s - expect), 1e-9 * expect,
			      "%u servers: %.17g s, expected %.17g s",
			      servers[k], r.sim_time_s, expect);
		cr_expect_leq(
			fabs(r.wait_fraction -
			     (1 - cfg.iterations * cfg.step_time / expect)),
			1e-9);
	}
}

/*
 * --cpu-time on --cores: a BSP round's workers start their CPU parts
 * together, so they share the cores for n * cpu / cores seconds (one
 * worker alone, or no more workers than cores: cpu seconds), then the
 * pushes queue at the server, n of them one after another.
 */
Test(sim, the_cpu_part_of_a_step_is_shared_on_the_cores)
{
	static const uint32_t workers[] = { 1, 4, 4, 3 };
	static const uint32_t cores[] = { 1, 2, 4, 2 };

	for (size_t k = 0; k < 4; k++) {
		struct kn__sim_config cfg =
			config(KN_SYNC_BSP, workers[k], 200, NULL);
		double n = workers[k], share, expect;
		struct kn__sim_result r;

		cfg.step_time = 0.0173;
		cfg.cpu_time = 0.0021;
		cfg.cores = cores[k];
		cfg.latency = 31e-6;
		cfg.model_bytes = 3e6;
		cfg.bandwidth = 1.1e9;
		cfg.server_rate = 7e9;
		r = run(&cfg);
		share = n > cfg.cores ? n / cfg.cores : 1;
		expect = cfg.iterations *
			 (share * cfg.cpu_time + cfg.step_time +
			  2 * (cfg.latency + cfg.model_bytes / cfg.bandwidth) +
			  n * cfg.model_bytes / cfg.server_rate);
		cr_expect_leq(fabs(r.sim_time_s - expect), 1e-9 * expect,
			      "%u workers on %u cores: %.17g s, expected %.17g",
			      workers[k], cfg.cores, r.sim_time_s, expect);
	}
}

/*
 * Sharing the cores is what widens ASP's lead over equal BSP workers:
 * BSP's all start their CPU parts at the release and share the cores,
 * while ASP's, spread out by the server's queue, compute more of theirs
 * alone.  (Measured: 1.11x without --cpu-time, 1.42x with 4 ms on 2
 * cores.)
 */
Test(sim, shared_cores_widen_asps_lead_over_bsp)
{
	double rate[2][2]; /* [shared][asp] */

	for (int shared = 0; shared < 2; shared++)
		for (int asp = 0; asp < 2; asp++) {
			struct kn__sim_config cfg = config(
				asp ? KN_SYNC_ASP : KN_SYNC_BSP, 8, 300, NULL);
			struct kn__sim_result r;

			cfg.cpu_time = shared ? 0.004 : 0;
			cfg.cores = 2;
			r = run(&cfg);
			rate[shared][asp] = r.iterations_per_s;
		}
	cr_expect_geq(rate[1][1] / rate[1][0], rate[0][1] / rate[0][0] + 0.2,
		      "ASP against BSP: %.1f / %.1f steps/s alone, %.1f / "
		      "%.1f shared",
		      rate[0][1], rate[0][0], rate[1][1], rate[1][0]);
}

/* --duration: a lone worker stops at its first step end at or after it,
 * K being only a cap. */
Test(sim, a_duration_stops_the_workers_in_time)
{
	struct kn__sim_config cfg = config(KN_SYNC_BSP, 1, 1000000, NULL);
	struct kn__sim_result r;
	double round;

	cfg.step_time = 0.01;
	cfg.latency = 0;
	cfg.model_bytes = 0;
	cfg.duration = 2.005;
	r = run(&cfg);
	round = cfg.step_time;
	/* 201 steps end at 2.01 s, the first at or after 2.005 s */
	cr_expect_eq(r.steps, 201, "%llu steps", (unsigned long long)r.steps);
	cr_expect_geq(r.sim_time_s, cfg.duration);
	cr_expect_lt(r.sim_time_s, cfg.duration + round + 1e-9);
}

Test(sim, a_slow_server_bounds_asp_throughput)
{
	static const uint32_t servers[] = { 1, 2 };

	for (size_t k = 0; k < 2; k++) {
		struct kn__sim_config cfg = config(KN_SYNC_ASP, 32, 40, NULL);
		struct kn__sim_result r;
		double bound;

		cfg.servers = servers[k];
		cfg.server_rate = 1e8; /* 42 ms per whole-model push */
		r = run(&cfg);
		bound = cfg.server_rate * cfg.servers / cfg.model_bytes;
		cr_expect_leq(r.iterations_per_s, bound * (1 + 1e-9),
			      "%u servers: %g iterations/s above %g",
			      servers[k], r.iterations_per_s, bound);
		/* and the server, not the workers, is what limits it */
		cr_expect_geq(r.iterations_per_s, 0.95 * bound,
			      "%u servers: %g iterations/s, bound %g",
			      servers[k], r.iterations_per_s, bound);
		cr_expect_gt(r.wait_fraction, 0.9);
	}
}

/* --- every protocol --------------------------------------------------- */

Test(sim, every_protocol_of_sync_runs_to_the_end)
{
	int n = 0;

	for (uint32_t p = 0; p < 16; p++) {
		const char *name = kn__sync_protocol_name(p);
		struct kn__sim_config cfg =
			config(p, 10, 150, "persistent:0.25:4");
		struct kn__sim_result r;

		if (!name)
			continue;
		n++;
		cfg.servers = 2;
		r = run(&cfg);
		cr_expect_eq(r.steps, 10 * 150, "%s: %lu steps", name,
			     (unsigned long)r.steps);
		cr_expect_leq(r.pushes, r.steps, "%s", name);
		cr_expect_leq(r.contributions, 2 * r.pushes, "%s", name);
		cr_expect_gt(r.contributions, 0, "%s", name);
		cr_expect_lt(r.final_loss, r.initial_loss, "%s: loss %g -> %g",
			     name, r.initial_loss, r.final_loss);
		cr_expect_leq(r.wait_fraction, 1.0, "%s", name);
	}
	cr_expect_geq(n, 2, "bsp and asp at least");
}

/* --- the loss curve --------------------------------------------------- */

Test(sim, the_loss_curve_is_even_and_bounded)
{
	struct kn__sim_config cfg =
		config(KN_SYNC_BSP, 4, 2000, "persistent:0.25:4");
	struct kn__sim_result r;
	struct kn__sim *sim = NULL;
	double dt;

	/* the straggler makes the run 4x its nominal length: decimation */
	cr_assert_eq(kn__sim_create(&cfg, NULL, 0, &sim), 0);
	cr_assert_eq(kn__sim_run(sim, &r), 0);
	cr_expect_geq(r.ncurve, 100);
	cr_expect_leq(r.ncurve, 257);
	cr_expect_eq(r.curve[0].t, 0.0);
	cr_expect_eq(r.curve[0].loss, r.initial_loss);
	cr_expect_eq(r.curve[r.ncurve - 1].t, r.sim_time_s);
	cr_expect_eq(r.curve[r.ncurve - 1].loss, r.final_loss);
	dt = r.curve[1].t;
	for (size_t i = 1; i + 1 < r.ncurve; i++)
		cr_expect_leq(fabs(r.curve[i].t - (double)i * dt),
			      1e-9 * r.curve[i].t, "sample %zu at %g", i,
			      r.curve[i].t);
	cr_expect_eq(kn__sim_run(sim, &r), -EALREADY);
	kn__sim_destroy(sim);
}

Test(sim, time_to_loss_averages_over_the_window)
{
	/* one sample dips below 1 at 1.0; the 1 s mean reaches it at 3.0 */
	static const struct kn__sim_sample c[] = {
		{ 0, 4 },     { 0.5, 2 }, { 1.0, 0.5 }, { 1.5, 2 },
		{ 2.0, 1.5 }, { 2.5, 1 }, { 3.0, 0.8 }, { 3.5, 0.9 },
	};
	const size_t n = sizeof(c) / sizeof(c[0]);
	double t = -1;

	cr_assert_eq(kn__sim_time_to_loss(c, n, 1.0, 1.0, &t), 0);
	cr_expect_eq(t, 3.0, "the mean over (t - 1, t] first reaches 1 at %g",
		     t);
	cr_assert_eq(kn__sim_time_to_loss(c, n, 1.0, 0, &t), 0);
	cr_expect_eq(t, 1.0, "without a window the dip counts: %g", t);
	/* over 2 s: (1.0, 3.0] holds 2, 1.5, 1, 0.8, mean 1.325; at 3.5 it
	 * is (1.5, 3.5]: 1.05; never at most 1 */
	t = -1;
	cr_expect_eq(kn__sim_time_to_loss(c, n, 1.0, 2.0, &t), -ENOENT);
	cr_expect_eq(kn__sim_time_to_loss(c, n, 0.1, 0, &t), -ENOENT);
	/* a window longer than the curve is never full */
	cr_expect_eq(kn__sim_time_to_loss(c, n, 100, 4.0, &t), -ENOENT);
	cr_expect_eq(t, -1, "left alone on failure");
	cr_expect_eq(kn__sim_time_to_loss(c, n, 1.0, -1, &t), -EINVAL);
	cr_expect_eq(kn__sim_time_to_loss(c, n, 1.0, NAN, &t), -EINVAL);
}

/* --- the command line ------------------------------------------------- */

Test(sim, the_command_line_refuses_what_it_cannot_run)
{
	/* argv, NULL-terminated, and its exit status: 2 is a usage error */
	static const struct {
		int status;
		char *argv[7];
	} cases[] = {
		{ 2, { "sim", "--protocol", "nope" } },
		{ 2, { "sim", "--imbalance", "persistent:2" } },
		{ 2, { "sim", "--workers", "0" } },
		{ 2, { "sim", "--step-time=5min" } },
		{ 2, { "sim", "--workers" } }, /* no value */
		{ 2, { "sim", "--frobnicate" } },
		/* k above the workers */
		{ 2,
		  { "sim", "--workers", "2", "--imbalance", "episodic:30:10:3",
		    "--quiet" } },
		{ 2, { "sim", "--target-loss", "-1" } },
		{ 2, { "sim", "--target-window=-2s" } },
		{ 2, { "sim", "--cores", "0" } },
		{ 2, { "sim", "--cpu-time=-1ms" } },
		{ 0, { "sim", "--help" } },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *argv[7];
		int argc = 0;

		/* a copy: the parser may reorder its argv */
		memcpy(argv, cases[i].argv, sizeof(argv));
		while (argv[argc])
			argc++;
		cr_expect_eq(kn_sim_main(argc, argv), cases[i].status, "%s %s",
			     argv[1], argc > 2 ? argv[2] : "");
	}
}

Test(sim, the_json_has_every_key)
{
	static const char *const keys[] = {
		"protocol",	  "workers",	      "servers",
		"iterations",	  "imbalance",	      "seed",
		"sim_time_s",	  "iterations_per_s", "wait_fraction",
		"mean_staleness", "max_staleness",    "staleness_hist",
		"final_loss",	  "initial_loss",     "events",
	};
	const char *const args[] = {
		"--workers=3", "--iterations=20", "--step-time",
		"20ms",	       "--model-bytes",	  "1MiB",
		NULL
	};
	char *curve, *json = cli_run(args, &curve);
	char key[64];

	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		snprintf(key, sizeof(key), "\"%s\": ", keys[i]);
		cr_expect(strstr(json, key) != NULL, "no %s in %s", key, json);
	}
	cr_expect(strstr(json, "\"protocol\": \"bsp\",") != NULL);
	cr_expect(strstr(json, "\"model_bytes\": 1048576,") != NULL, "%s",
		  json);
	cr_expect(strstr(json, "\"step_time_s\": 0.02,") != NULL, "%s", json);
	cr_expect_eq(strncmp(curve, "t_s,loss\n0,", 11), 0, "%s", curve);
	cr_expect(strstr(json, "time_to_target_s") == NULL,
		  "no target, no time: %s", json);
	free(json);
	free(curve);
}

Test(sim, the_json_has_the_time_to_a_target_loss)
{
	/* any loss is at most 1e9: reached at the first sample */
	const char *const reached[] = { "--workers=2",
					"--iterations=20",
					"--target-loss=1e9",
					"--target-window",
					"0",
					NULL };
	/* the noisy objective never reaches 0 */
	const char *const never[] = { "--workers=2", "--iterations=20",
				      "--target-loss=0", NULL };
	char *curve, *json = cli_run(reached, &curve);

	cr_expect(strstr(json, "\"target_loss\": 1000000000,") != NULL, "%s",
		  json);
	cr_expect(strstr(json, "\"target_window_s\": 0,") != NULL, "%s", json);
	cr_expect(strstr(json, "\"time_to_target_s\": 0,") != NULL, "%s", json);
	free(json);
	free(curve);
	json = cli_run(never, &curve);
	cr_expect(strstr(json, "\"target_window_s\": 1,") != NULL, "%s", json);
	cr_expect(strstr(json, "\"time_to_target_s\": null,") != NULL, "%s",
		  json);
	free(json);
	free(curve);
}
