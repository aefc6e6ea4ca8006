/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sim.c - the simulator core (sim.h, docs/simulator.md): the set-up of
 * a simulator, the run loop over its event heap, and the loss curve.
 * The workers (sim_worker.c), the servers and the planner
 * (sim_server.c), each driving its own machine of sync/ exactly as the
 * engine would, and the event heap (sim_event.c) have files of their
 * own around sim_state.h; what follows holds for all of them.
 *
 * Every message has a fixed delay: a push takes latency + chunk / bw to
 * reach a server, a release as long to come back, a timing report, a
 * plan or a barrier (CGP) takes the latency.  Events are processed in
 * time order, so the pushes reach each server in the order they were
 * sent, and the server's FIFO queue can be settled the moment a push
 * leaves: its aggregation ends at max(arrival, end of the previous one)
 * + chunk / server_rate.  That end is the one event a push makes per
 * server; the chunk rule sees the PUSH then.  Ties in time are broken
 * by a sequence number given when an event is scheduled, so a run
 * depends on its configuration and seed alone.
 *
 * With cpu_time set, a step's CPU part is shared: the workers inside it
 * each progress at min(1, cores / k) with k of them computing, so all
 * of them advance one common virtual clock of CPU seconds, and a worker
 * entering at virtual time v leaves at v + cpu_time.  Only the earliest
 * of those ends is an event; whenever k changes, the clock is brought up
 * to date and that end scheduled anew, the old event carrying a stale
 * generation that makes it a no-op.
 *
 * Per-worker data lives in flat arrays indexed by worker (and by worker
 * and server, or worker and slot), allocated once in kn__sim_create();
 * the heap and the event pool grow by doubling if the first guess was
 * short, and plan copies are kept for reuse, so a run allocates next to
 * nothing.  The clock is read only to measure wall_s.
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sim_state.h"

/* --- the objective and the loss curve --------------------------------- */

static double loss_of(const struct kn__sim *s, const double *x)
{
	double f = 0;

	for (uint32_t j = 0; j < s->d; j++) {
		double e = x[j] - s->xs[j];

		f += s->h[j] * e * e;
	}
	return 0.5 * f;
}

static double global_loss(struct kn__sim *s)
{
	if (s->loss_dirty) {
		s->loss = loss_of(s, s->x);
		s->loss_dirty = false;
	}
	return s->loss;
}

static int add_sample(struct kn__sim *s, double t)
{
	if (s->ncurve == s->curve_cap) {
		size_t ncap = s->curve_cap ? 2 * s->curve_cap : 256;
		void *p = realloc(s->curve, ncap * sizeof(*s->curve));

		if (!p)
			return kn__sim_fail(s, -ENOMEM,
					    "out of memory for the curve");
		s->curve = p;
		s->curve_cap = ncap;
	}
	s->curve[s->ncurve++] = (struct kn__sim_sample){ t, global_loss(s) };
	return 0;
}

/*
 * Record the samples due before @t: the model is the one after every
 * event up to the sample's time.  Samples lie on the grid k * every;
 * when there are curve_max of them, every other one goes and the
 * spacing doubles, so a curve stays evenly spaced and bounded whatever
 * the run's length.
 */
static int sample_until(struct kn__sim *s, double t)
{
	double ts;

	while ((ts = (double)s->next_k * s->every) < t) {
		if (add_sample(s, ts))
			return -ENOMEM;
		s->next_k++;
		if (s->ncurve == s->curve_max) {
			for (size_t i = 0; 2 * i < s->ncurve; i++)
				s->curve[i] = s->curve[2 * i];
			s->ncurve = (s->ncurve + 1) / 2;
			s->next_k = s->ncurve;
			s->every *= 2;
		}
	}
	return 0;
}

/* --- set-up ----------------------------------------------------------- */

void kn__sim_config_init(struct kn__sim_config *cfg)
{
	*cfg = (struct kn__sim_config){
		.workers = 16,
		.servers = 1,
		.iterations = 100,
		.dim = 16,
		.seed = 1,
		.imbalance = "none",
		.step_time = 0.02,
		.latency = 20e-6,
		.bandwidth = 1.25e9,
		.model_bytes = 4194304,
		.server_rate = 10e9,
		.cores = 1,
		.sigma = 0.5,
		.lr = 0.1,
		.loss_every = 0,
		.sync = { .protocol = KN__SYNC_DEFAULT },
	};
}

static int bad(char *err, size_t errlen, const char *what)
{
	if (errlen)
		snprintf(err, errlen, "%s", what);
	return -EINVAL;
}

static int check_config(const struct kn__sim_config *c, char *err,
			size_t errlen)
{
	struct kn__sync_params p = c->sync;

	if (!kn__sync_protocol_name(c->sync.protocol))
		return bad(err, errlen, "unknown protocol");
	if (c->workers < 1 || c->workers > KN__SYNC_MAX_WORKERS)
		return bad(err, errlen, "workers must be 1 to 1048576");
	if (c->servers < 1 || c->servers > KN__SIM_MAX_SERVERS)
		return bad(err, errlen, "servers must be 1 to 1024");
	if (c->iterations < 1)
		return bad(err, errlen, "iterations must be at least 1");
	if (!isfinite(c->duration) || !(c->duration >= 0))
		return bad(err, errlen, "duration must be 0 or more");
	if (c->dim < 1 || c->dim > KN__SIM_MAX_DIM)
		return bad(err, errlen, "dim must be 1 to 4096");
	if (!isfinite(c->step_time) || !(c->step_time > 0))
		return bad(err, errlen, "step time must be above 0");
	if (!isfinite(c->latency) || !(c->latency >= 0))
		return bad(err, errlen, "latency must be 0 or more");
	if (!isfinite(c->bandwidth) || !(c->bandwidth > 0))
		return bad(err, errlen, "bandwidth must be above 0");
	if (!isfinite(c->model_bytes) || !(c->model_bytes >= 0))
		return bad(err, errlen, "model bytes must be 0 or more");
	if (!isfinite(c->server_rate) || !(c->server_rate > 0))
		return bad(err, errlen, "server rate must be above 0");
	if (!isfinite(c->cpu_time) || !(c->cpu_time >= 0) || c->cpu_time > 1e6)
		return bad(err, errlen, "cpu time must be 0 to 1e6 seconds");
	if (c->cores < 1 || c->cores > KN__SYNC_MAX_WORKERS)
		return bad(err, errlen, "cores must be 1 to 1048576");
	if (!isfinite(c->sigma) || !(c->sigma >= 0))
		return bad(err, errlen, "sigma must be 0 or more");
	if (!isfinite(c->lr) || !(c->lr > 0))
		return bad(err, errlen, "lr must be above 0");
	if (!(c->momentum >= 0 && c->momentum < 1))
		return bad(err, errlen, "momentum must be in [0, 1)");
	if (!isfinite(c->loss_every) || !(c->loss_every >= 0))
		return bad(err, errlen, "loss-every must be 0 or more");
	if (kn__sync_params_resolve(&p))
		return bad(err, errlen,
			   "a protocol parameter is out of range "
			   "(docs/protocols.md)");
	return 0;
}

/*
 * The vectors and per-worker arrays, all zeroed, carved out of one block
 * (s->mem), each part on a cache line of its own, so that one free()
 * undoes them.
 */
static int alloc_arrays(struct kn__sim *s)
{
	size_t n = s->n, d = s->d, m = s->m;
	const size_t len[] = {
		5 * d * sizeof(double),	      /* h, xs, x, sum, vel */
		8 * n * d * sizeof(double),   /* xl ... slots */
		4 * n * m * sizeof(uint64_t), /* ver_read, ver_in, slot_ver */
		m * sizeof(*s->srv),
		n * sizeof(*s->w),
		n * sizeof(*s->iw),
		kn__sync_max_actions(&s->params) * sizeof(*s->out),
		n * sizeof(*s->on_cpu),
		n * m, /* await */
	};
	size_t off[sizeof(len) / sizeof(len[0]) + 1] = { 0 };

	for (size_t i = 0; i < sizeof(len) / sizeof(len[0]); i++)
		off[i + 1] = off[i] + (len[i] + 63) / 64 * 64;
	s->mem = calloc(1, off[sizeof(len) / sizeof(len[0])]);
	if (!s->mem)
		return -ENOMEM;
	s->h = (void *)(s->mem + off[0]);
	s->xl = (void *)(s->mem + off[1]);
	s->ver_read = (void *)(s->mem + off[2]);
	s->srv = (void *)(s->mem + off[3]);
	s->w = (void *)(s->mem + off[4]);
	s->iw = (void *)(s->mem + off[5]);
	s->out = (void *)(s->mem + off[6]);
	s->on_cpu = (void *)(s->mem + off[7]);
	s->await = s->mem + off[8];
	s->xs = s->h + d;
	s->x = s->xs + d;
	s->sum = s->x + d;
	s->vel = s->sum + d;
	s->anchor = s->xl + n * d;
	s->xpush = s->anchor + n * d;
	s->xin = s->xpush + n * d;
	s->acc = s->xin + n * d;
	s->wvel = s->acc + n * d;
	s->slots = s->wvel + n * d; /* 2 n d */
	s->ver_in = s->ver_read + n * m;
	s->slot_ver = s->ver_in + n * m; /* 2 n m */

	/* room for a step or a push's events per worker, grown if short */
	s->pool_cap = s->heap_cap = (uint32_t)(4 * n + 64);
	s->heap = malloc(s->heap_cap * sizeof(*s->heap));
	s->pool = malloc(s->pool_cap * sizeof(*s->pool));
	s->free = malloc(s->pool_cap * sizeof(*s->free));
	if (!s->heap || !s->pool || !s->free)
		return -ENOMEM;
	for (uint32_t i = s->pool_cap; i > 0; i--)
		s->free[s->nfree++] = i - 1;
	return 0;
}

/* h log-spaced in [0.1, 1], the optimum a normal draw, x0 = 0. */
static void init_objective(struct kn__sim *s)
{
	uint64_t st = stream(s->cfg.seed, TAG_OPTIMUM, 0);
	double z[2];

	for (uint32_t j = 0; j < s->d; j++) {
		s->h[j] = s->d == 1 ? 1.0
				    : pow(10.0, -(double)(s->d - 1 - j) /
							(double)(s->d - 1));
		if (!(j & 1))
			normal_pair(&st, &z[0], &z[1]);
		s->xs[j] = z[j & 1];
	}
	s->loss_dirty = true;
}

/* @v as a float that stays finite and, if @v is not 0, not 0. */
static float to_float(double v)
{
	if (v > FLT_MAX)
		return FLT_MAX;
	if (v > 0 && v < FLT_MIN)
		return FLT_MIN;
	return (float)v;
}

/*
 * CGP's cost model, C_sync(m) = latency + m * bytes / bandwidth, as the
 * simulation prices a round of m workers: each push crosses the wire and
 * its release comes back (2 wire, whatever m), and at every server the
 * m pushes queue for their chunk's service, model_bytes / M each at
 * server_rate, so m * model_bytes / (M * server_rate).  A caller's own
 * value (not 0) stays.
 */
static void cost_model(struct kn__sim *s)
{
	struct kn__sync_params *p = &s->params;

	if (p->latency == 0)
		p->latency = to_float(2 * s->wire);
	if (p->bandwidth == 0)
		p->bandwidth = to_float(s->cfg.server_rate * s->m);
	if (p->bytes == 0)
		p->bytes = s->cfg.model_bytes < 0x1p64
				   ? (uint64_t)s->cfg.model_bytes
				   : UINT64_MAX;
}

int kn__sim_create(const struct kn__sim_config *cfg, char *err, size_t errlen,
		   struct kn__sim **sim)
{
	struct kn__sim *s;
	double chunk;
	int ret;

	if (!cfg || !sim)
		return bad(err, errlen, "no configuration");
	ret = check_config(cfg, err, errlen);
	if (ret)
		return ret;
	s = calloc(1, sizeof(*s));
	if (!s) {
		bad(err, errlen, "out of memory");
		return -ENOMEM;
	}
	s->cfg = *cfg;
	s->cfg.imbalance = NULL; /* not kept */
	s->n = cfg->workers;
	s->m = cfg->servers;
	s->d = cfg->dim;
	s->k = cfg->iterations;
	ret = kn__imb_parse(cfg->imbalance ? cfg->imbalance : "none", cfg->seed,
			    &s->imb, err, errlen);
	if (ret)
		goto err_sim;
	if (kn__imb_format(&s->imb, s->res.imbalance,
			   sizeof(s->res.imbalance)) < 0) {
		ret = bad(err, errlen, "imbalance spec too long");
		goto err_sim;
	}
	s->params = cfg->sync;
	s->params.max_workers = s->n;
	s->params.members = s->n;
	/* the defaults, as the rules will see them (outer_lr is ours too) */
	if (kn__sync_params_resolve(&s->params)) {
		ret = bad(err, errlen, "a protocol parameter is out of range");
		goto err_sim;
	}
	s->traits = kn__sync_traits(s->params.protocol);
	s->deltas = s->traits->local_steps;
	chunk = cfg->model_bytes / s->m;
	s->wire = cfg->latency + chunk / cfg->bandwidth;
	s->service = chunk / cfg->server_rate;
	cost_model(s);

	ret = alloc_arrays(s);
	if (ret) {
		bad(err, errlen, "out of memory");
		goto err_sim;
	}
	init_objective(s);
	for (uint32_t sv = 0; sv < s->m; sv++) {
		s->srv[sv].lo = (uint32_t)((uint64_t)sv * s->d / s->m);
		s->srv[sv].hi = (uint32_t)((uint64_t)(sv + 1) * s->d / s->m);
		ret = kn__sync_rule_create(&s->params, &s->srv[sv].rule);
		if (ret)
			goto err_sync;
	}
	ret = kn__sync_planner_create(&s->params, &s->planner);
	if (ret)
		goto err_sync;
	for (uint32_t i = 0; i < s->n; i++) {
		ret = kn__sync_worker_create(&s->params, i, &s->w[i].rule);
		if (ret)
			goto err_sync;
		ret = kn__imb_worker_init(&s->imb, i, s->n, &s->iw[i]);
		if (ret) {
			bad(err, errlen,
			    "the imbalance model does not fit the workers "
			    "(episodic K above the number of workers?)");
			goto err_sim;
		}
		s->w[i].rng = stream(cfg->seed, TAG_NOISE, i);
	}

	if (cfg->loss_every > 0) {
		s->every = cfg->loss_every;
		s->curve_max = (size_t)1 << 20;
	} else {
		s->every = cfg->duration > 0
				   ? fmin(cfg->duration,
					  cfg->step_time * cfg->iterations) /
					     128
				   : cfg->step_time * cfg->iterations / 128;
		s->curve_max = 256;
	}
	*sim = s;
	return 0;

err_sync:
	bad(err, errlen,
	    ret == -ENOMEM ? "out of memory"
			   : "sync/ refused the protocol's parameters");
err_sim:
	kn__sim_destroy(s);
	return ret;
}

void kn__sim_destroy(struct kn__sim *sim)
{
	if (!sim)
		return;
	free(sim->curve);
	kn__sim_events_fini(sim);
	for (uint32_t i = 0; i < sim->nplans; i++)
		free(sim->plans[i].v);
	free(sim->plans);
	if (sim->w)
		for (uint32_t i = 0; i < sim->n; i++)
			kn__sync_worker_destroy(sim->w[i].rule);
	kn__sync_planner_destroy(sim->planner);
	if (sim->srv)
		for (uint32_t sv = 0; sv < sim->m; sv++)
			kn__sync_rule_destroy(sim->srv[sv].rule);
	free(sim->mem);
	free(sim);
}

/* --- the run ---------------------------------------------------------- */

static double wall_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int dispatch(struct kn__sim *s, const struct event *e, double t)
{
	switch (e->type) {
	case EV_STEP_END:
		return kn__sim_on_step_end(s, e->worker, t);
	case EV_SERVICE:
		return kn__sim_on_service(s, e, t);
	case EV_RELEASE:
		return kn__sim_on_release(s, e, t);
	case EV_TIMING:
		return kn__sim_on_timing(s, e, t);
	case EV_BARRIER:
		return kn__sim_on_barrier(s, e, t);
	case EV_CPU_END:
		return kn__sim_on_cpu_end(s, e, t);
	default: /* EV_PLAN */
		return kn__sim_on_plan(s, e, t);
	}
}

static void finish_result(struct kn__sim *s, struct kn__sim_result *res)
{
	struct kn__sim_result *r = &s->res;

	r->iterations_per_s =
		r->sim_time_s > 0 ? (double)r->steps / r->sim_time_s : 0;
	r->wait_fraction = r->worker_s > 0 ? r->blocked_s / r->worker_s : 0;
	r->mean_staleness =
		r->contributions ? s->stale_sum / (double)r->contributions : 0;
	r->initial_loss = s->ncurve ? s->curve[0].loss : loss_of(s, s->x);
	r->final_loss = global_loss(s);
	r->curve = s->curve;
	r->ncurve = s->ncurve;
	*res = *r;
}

int kn__sim_time_to_loss(const struct kn__sim_sample *curve, size_t n,
			 double target, double window, double *t)
{
	double sum = 0;
	size_t lo = 0; /* the oldest sample inside the window */

	if (!isfinite(window) || window < 0)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		const double from = curve[i].t - window;

		sum += curve[i].loss;
		/* (t - window, t]: a sample exactly window old is out */
		while (lo < i && curve[lo].t <= from + 1e-9 * window) {
			sum -= curve[lo].loss;
			lo++;
		}
		if (curve[i].t - curve[0].t < window * (1 - 1e-9))
			continue; /* the window is not full yet */
		if (sum / (double)(i - lo + 1) <= target) {
			*t = curve[i].t;
			return 0;
		}
	}
	return -ENOENT;
}

int kn__sim_run(struct kn__sim *sim, struct kn__sim_result *res)
{
	struct kn__sim *s = sim;
	double wall0 = wall_now(), total;
	int ret = 0;

	if (!s || !res)
		return -EINVAL;
	if (s->ran)
		return kn__sim_fail(s, -EALREADY, "a simulator runs once");
	s->ran = true;
	total = (double)s->n * s->k;

	/* every worker starts its first step at 0 from x0 = 0 */
	for (uint32_t i = 0; i < s->n && !ret; i++)
		ret = kn__sim_start_step(s, i, 0);
	if (!ret)
		ret = add_sample(s, 0);
	s->next_k = 1;

	while (!ret && s->nheap && s->ndone < s->n) {
		struct hent top = kn__sim_heap_pop(s);
		struct event e = s->pool[top.ev];

		s->free[s->nfree++] = top.ev;
		s->now = top.t;
		if (top.t > (double)s->next_k * s->every) {
			ret = sample_until(s, top.t);
			if (ret)
				break;
		}
		ret = dispatch(s, &e, top.t);
		s->res.events++;
		if (s->cfg.progress && !(s->res.events & 0xffff))
			s->cfg.progress(s->cfg.progress_arg, top.t,
					(double)s->res.steps / total);
	}
	if (!ret && s->ndone < s->n)
		ret = kn__sim_fail(
			s, -EDEADLK,
			"no event left at t = %.9g s but %u of %u workers "
			"have not finished: the protocol waits forever",
			s->now, s->n - s->ndone, s->n);
	if (!ret && s->curve[s->ncurve - 1].t < s->res.sim_time_s)
		ret = add_sample(s, s->res.sim_time_s);
	s->res.wall_s = wall_now() - wall0;
	if (ret)
		return ret;
	finish_result(s, res);
	return 0;
}
