/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sim_worker.c - the simulator's workers (sim_state.h): local steps on
 * the noisy quadratic, with the imbalance factor and, with cpu_time,
 * a CPU part shared on a few cores; the push to every server and the
 * merge of the releases, each told to the worker's own rule of sync/
 * exactly as the engine's worker tells it.  It schedules events
 * (sim_event.c) and feeds the servers and the planner (sim_server.c).
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_state.h"

/* --- workers ---------------------------------------------------------- */

static const char *wev_name(uint32_t type)
{
	return type == KN__SYNC_WEV_STEP     ? "STEP"
	       : type == KN__SYNC_WEV_PUSHED ? "PUSHED"
					     : "RELEASE";
}

static int wcall(struct kn__sim *s, uint32_t i,
		 const struct kn__sync_worker_event *ev, uint32_t *next)
{
	int ret = kn__sync_worker_event(s->w[i].rule, ev, next);

	if (ret < 0)
		return kn__sim_fail(
			s, -EPROTO,
			"worker %u: its rule refused %s at t = %.9g s: %s", i,
			wev_name(ev->type), ev->t, strerror(-ret));
	return 0;
}

/* --- the shared CPU (cpu_time) ---------------------------------------- */

static double cpu_rate(const struct kn__sim *s)
{
	return s->ncpu > s->cfg.cores ? (double)s->cfg.cores / s->ncpu : 1;
}

static void cpu_advance(struct kn__sim *s, double t)
{
	s->vclock += (t - s->vclock_t) * cpu_rate(s);
	s->vclock_t = t;
}

/* Schedule the earliest end of a CPU part at the current rate. */
static int cpu_schedule(struct kn__sim *s, double t)
{
	struct event ev = { .type = EV_CPU_END, .a = ++s->cpu_gen };
	double v = HUGE_VAL;

	if (!s->ncpu)
		return 0;
	for (uint32_t j = 0; j < s->ncpu; j++)
		v = fmin(v, s->w[s->on_cpu[j]].cpu_end_v);
	return kn__sim_schedule(s, t + fmax(v - s->vclock, 0) / cpu_rate(s),
				&ev);
}

/* The earliest CPU parts are over: their steps go on off the CPU. */
int kn__sim_on_cpu_end(struct kn__sim *s, const struct event *e, double t)
{
	struct event ev = { .type = EV_STEP_END };
	int ret = 0;

	if (e->a != s->cpu_gen)
		return 0; /* rescheduled since */
	cpu_advance(s, t);
	for (uint32_t j = 0; j < s->ncpu && !ret;) {
		struct sim_worker *w = &s->w[s->on_cpu[j]];

		/* a relative tolerance for the clock's rounding */
		if (w->cpu_end_v > s->vclock + 1e-12 * fmax(1, s->vclock)) {
			j++;
			continue;
		}
		ev.worker = s->on_cpu[j];
		w->step_len = t - w->step_t0 + w->off_len;
		s->on_cpu[j] = s->on_cpu[--s->ncpu];
		ret = kn__sim_schedule(s, t + w->off_len, &ev);
	}
	return ret ? ret : cpu_schedule(s, t);
}

int kn__sim_start_step(struct kn__sim *s, uint32_t i, double t)
{
	struct sim_worker *w = &s->w[i];
	struct event ev = { .type = EV_STEP_END, .worker = i };
	double off = s->cfg.step_time * kn__imb_factor(&s->imb, &s->iw[i], t);

	w->state = W_STEP;
	w->step_t0 = t;
	if (!(s->cfg.cpu_time > 0)) {
		w->step_len = off;
		return kn__sim_schedule(s, t + off, &ev);
	}
	cpu_advance(s, t);
	w->off_len = off;
	w->cpu_end_v = s->vclock + s->cfg.cpu_time;
	s->on_cpu[s->ncpu++] = i;
	return cpu_schedule(s, t);
}

/*
 * One step on the worker's local copy with a fresh noisy gradient, which
 * also goes into the sum it will push: SGD, or under ESP and PSP the
 * job's momentum with the worker's own buffer (the engine runs the job's
 * optimizer on the workers there).  Returns |x - anchor| / |anchor|
 * (FLT_MAX for any change from a zero anchor).
 */
static float local_step(struct kn__sim *s, uint32_t i)
{
	struct sim_worker *w = &s->w[i];
	size_t off = (size_t)i * s->d;
	double *xl = s->xl + off, *acc = s->acc + off, *v = s->wvel + off;
	const double *an = s->anchor + off, *h = s->h, *xs = s->xs;
	double sigma = s->cfg.sigma, lr = s->cfg.lr, dn = 0, z[2] = { 0, 0 };
	double mu = s->deltas ? s->cfg.momentum : 0, r;

	for (uint32_t j = 0; j < s->d; j++) {
		double g, e;

		/* pairs from the worker's own stream; an odd d drops one */
		if (sigma > 0 && !(j & 1))
			normal_pair(&w->rng, &z[0], &z[1]);
		g = h[j] * (xl[j] - xs[j]) + sigma * z[j & 1];
		acc[j] += g;
		if (mu > 0) {
			v[j] = mu * v[j] + g;
			g = v[j];
		}
		xl[j] -= lr * g;
		e = xl[j] - an[j];
		dn += e * e;
	}
	w->taken++;
	w->nacc++;
	w->nsince++;
	w->step_sum += w->step_len;
	s->res.steps++;
	if (w->anchor_norm > 0)
		r = sqrt(dn) / w->anchor_norm;
	else
		r = dn > 0 ? FLT_MAX : 0;
	return r < FLT_MAX ? (float)r : FLT_MAX;
}

/* Push the contribution to every server, then tell the rule. */
static int push(struct kn__sim *s, uint32_t i, double t, uint32_t *next)
{
	struct sim_worker *w = &s->w[i];
	size_t off = (size_t)i * s->d;
	uint32_t slot = (uint32_t)(w->clock & 1);
	size_t ws = 2 * (size_t)i + slot;
	double *dst = s->slots + ws * s->d;
	struct kn__sync_worker_event wev = { .type = KN__SYNC_WEV_PUSHED,
					     .t = t };
	struct event ev = {
		.type = EV_SERVICE,
		.worker = i,
		.steps = w->nacc,
		.a = w->clock,
	};

	if (w->outstanding)
		return kn__sim_fail(
			s, -EPROTO,
			"worker %u: told to push at t = %.9g s while its "
			"last push is not released",
			i, t);
	/* as the engine's workers push: the model delta since the last
	 * release under ESP and PSP, the gradient otherwise */
	for (uint32_t j = 0; j < s->d; j++) {
		dst[j] = s->deltas ? s->anchor[off + j] - s->xl[off + j]
				   : s->acc[off + j];
		s->acc[off + j] = 0;
	}
	memcpy(s->xpush + off, s->xl + off, s->d * sizeof(double));
	for (uint32_t sv = 0; sv < s->m; sv++) {
		struct server *srv = &s->srv[sv];
		double arrive = t + s->wire;
		int ret;

		/* FIFO at the server: arrivals come in push order */
		srv->free_t = (arrive > srv->free_t ? arrive : srv->free_t) +
			      s->service;
		s->slot_ver[ws * s->m + sv] =
			s->ver_read[(size_t)i * s->m + sv];
		s->await[(size_t)i * s->m + sv] = 1;
		ev.server = sv;
		ev.b = s->ver_read[(size_t)i * s->m + sv];
		ret = kn__sim_schedule(s, srv->free_t, &ev);
		if (ret)
			return ret;
	}
	w->outstanding = true;
	w->pending = s->m;
	w->push_t = t;
	w->clock++;
	w->nacc = 0;
	s->res.pushes++;
	return wcall(s, i, &wev, next);
}

/* The worker took its K steps and has nothing out: it leaves. */
static int finish(struct kn__sim *s, uint32_t i, double t)
{
	struct kn__sync_event ev = {
		.type = KN__SYNC_EV_LEAVE,
		.worker = i,
		.t = t,
	};
	int ret;

	s->w[i].state = W_DONE;
	s->ndone++;
	s->res.worker_s += t;
	if (t > s->res.sim_time_s)
		s->res.sim_time_s = t;
	/* so that the protocols stop waiting for it */
	for (uint32_t sv = 0; sv < s->m; sv++) {
		ret = kn__sim_rule_call(s, sv, &ev);
		if (ret)
			return ret;
	}
	return kn__sim_planner_call(s, &ev);
}

/*
 * Every server has released the worker's push: take the new model and
 * keep the progress made since the push (PSP's steps while waiting),
 * report the timing, and tell the rule (unless the worker is leaving).
 * *@next is what the rule answered.
 */
static int merge_release(struct kn__sim *s, uint32_t i, double t,
			 uint32_t *next)
{
	struct sim_worker *w = &s->w[i];
	size_t off = (size_t)i * s->d;
	double *xl = s->xl + off, *an = s->anchor + off;
	const double *xin = s->xin + off, *xp = s->xpush + off;
	double nn = 0;
	struct kn__sync_worker_event wev = {
		.type = KN__SYNC_WEV_RELEASE,
		.t = t,
		.steps = w->rel_steps,
		.version = w->rel_version,
		.epoch = w->rel_epoch,
		.hint = w->rel_hint,
		.rtt = w->rel_t - w->push_t,
	};

	for (uint32_t j = 0; j < s->d; j++) {
		xl[j] = xin[j] + (xl[j] - xp[j]);
		an[j] = xin[j];
		nn += xin[j] * xin[j];
	}
	w->anchor_norm = sqrt(nn);
	memcpy(s->ver_read + (size_t)i * s->m, s->ver_in + (size_t)i * s->m,
	       s->m * sizeof(uint64_t));
	w->outstanding = false;
	*next = KN__SYNC_NEXT_STEP;
	if (w->stopping)
		return 0;
	if (w->nsince) {
		struct event ev = {
			.type = EV_TIMING,
			.worker = i,
			.value = w->step_sum / w->nsince,
		};
		int ret = kn__sim_schedule(s, t + s->cfg.latency, &ev);

		if (ret)
			return ret;
	}
	w->nsince = 0;
	w->step_sum = 0;
	return wcall(s, i, &wev, next);
}

static int block(struct kn__sim *s, uint32_t i, double t)
{
	struct sim_worker *w = &s->w[i];

	if (!w->outstanding)
		return kn__sim_fail(
			s, -EPROTO,
			"worker %u: told to wait at t = %.9g s with no "
			"push out",
			i, t);
	w->state = W_BLOCKED;
	w->wait_t = t;
	return 0;
}

int kn__sim_on_step_end(struct kn__sim *s, uint32_t i, double t)
{
	struct sim_worker *w = &s->w[i];
	struct kn__sync_worker_event wev = {
		.type = KN__SYNC_WEV_STEP,
		.t = t,
		.seconds = w->step_len,
	};
	uint32_t next;
	int ret;

	wev.delta_ratio = local_step(s, i);
	ret = wcall(s, i, &wev, &next);
	if (ret)
		return ret;
	if (w->taken >= s->k || (s->cfg.duration > 0 && t >= s->cfg.duration))
		w->stopping = true;
	if (next == KN__SYNC_NEXT_PUSH) {
		ret = push(s, i, t, &next);
		if (ret)
			return ret;
	}
	/* a release that came during the step is taken after it */
	if (w->ready) {
		w->ready = false;
		ret = merge_release(s, i, t, &next);
		if (ret)
			return ret;
	}
	if (w->stopping)
		return w->outstanding ? block(s, i, t) : finish(s, i, t);
	if (next == KN__SYNC_NEXT_STEP)
		return kn__sim_start_step(s, i, t);
	if (next == KN__SYNC_NEXT_WAIT)
		return block(s, i, t);
	return kn__sim_fail(s, -EPROTO, "worker %u: its rule answered %u", i,
			    next);
}

int kn__sim_on_release(struct kn__sim *s, const struct event *e, double t)
{
	struct sim_worker *w = &s->w[e->worker];
	uint32_t i = e->worker, next;
	int ret;

	s->ver_in[(size_t)i * s->m + e->server] = e->a;
	w->rel_version = e->a;
	w->rel_epoch = e->b;
	w->rel_steps = e->steps;
	w->rel_hint = (float)e->value;
	if (--w->pending)
		return 0;
	w->rel_t = t;
	if (w->state == W_STEP) {
		w->ready = true;
		return 0;
	}
	s->res.blocked_s += t - w->wait_t;
	ret = merge_release(s, i, t, &next);
	if (ret)
		return ret;
	if (w->stopping)
		return finish(s, i, t);
	if (next != KN__SYNC_NEXT_STEP)
		return kn__sim_fail(
			s, -EPROTO,
			"worker %u: its rule answered %u to a RELEASE", i,
			next);
	return kn__sim_start_step(s, i, t);
}
