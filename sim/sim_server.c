/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sim_server.c - the simulator's servers and planner (sim_state.h): each
 * server's chunk rule of sync/ fed the PUSH, TIMING, PLAN and LEAVE
 * events the engine's server would see, its APPLY carried out on the
 * model chunk with the job's optimizer and its RELEASE sent back one
 * wire time later; the planner fed timing reports and barriers, its
 * plans broadcast to every server.  It schedules events (sim_event.c)
 * and calls nothing of the workers.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_state.h"

/* --- servers: chunk rules and their actions --------------------------- */

static const char *ev_name(uint32_t type)
{
	static const char *const names[] = {
		[KN__SYNC_EV_PUSH] = "PUSH",
		[KN__SYNC_EV_JOIN] = "JOIN",
		[KN__SYNC_EV_LEAVE] = "LEAVE",
		[KN__SYNC_EV_TIMING] = "TIMING",
		[KN__SYNC_EV_TIMER] = "TIMER",
		[KN__SYNC_EV_PLAN] = "PLAN",
		[KN__SYNC_EV_BARRIER] = "BARRIER",
	};

	return type < sizeof(names) / sizeof(names[0]) && names[type]
		       ? names[type]
		       : "?";
}

/* Sum the contributions with their weights and take the SGD step. */
static int apply(struct kn__sim *s, uint32_t sv,
		 const struct kn__sync_action *a)
{
	struct server *srv = &s->srv[sv];
	double *sum = s->sum, step, mu;
	bool turn = false;

	for (uint32_t j = srv->lo; j < srv->hi; j++)
		sum[j] = 0;
	/* in contrib[] order: that is the summation order the rule chose */
	for (uint32_t c = 0; c < a->ncontrib; c++) {
		uint32_t wk = a->contrib[c].worker;
		size_t ws = 2 * (size_t)wk + (a->contrib[c].slot & 1);
		double wt = a->contrib[c].weight;
		const double *src;
		uint64_t read, tau;

		if (wk >= s->n)
			return kn__sim_fail(s, -EPROTO,
					    "server %u: APPLY names worker %u",
					    sv, wk);
		src = s->slots + ws * s->d;
		for (uint32_t j = srv->lo; j < srv->hi; j++)
			sum[j] += wt * src[j];
		/* engine/server_apply.c's count: 0 for a fresh contribution */
		read = s->slot_ver[ws * s->m + sv];
		tau = a->version > read + 1 ? a->version - read - 1 : 0;
		s->stale_sum += (double)tau;
		if (tau > s->res.max_staleness)
			s->res.max_staleness = tau;
		s->res.staleness_hist[tau < KN__SIM_STALE_BUCKETS
					      ? tau
					      : KN__SIM_STALE_BUCKETS - 1]++;
	}
	/*
	 * As engine/server_apply.c applies it: the job's optimizer on gradients
	 * (momentum m = mu m + g, x -= lr m); on the deltas of ESP and PSP
	 * the outer update, at outer_lr with Nesterov outer momentum; under
	 * ASP, SSP and CGP each apply a share of a round, the velocity
	 * turning once the shares since the last turn weigh a round.
	 */
	step = (s->deltas ? s->params.outer_lr : s->cfg.lr) * a->lr_scale;
	mu = s->deltas ? s->params.outer_momentum : s->cfg.momentum;
	if (a->share && mu > 0) {
		turn = srv->round_full;
		srv->round_full = false;
		for (uint32_t c = 0; c < a->ncontrib; c++)
			srv->round_w += a->contrib[c].weight;
		if (srv->round_w > 1.0 - 1e-4) {
			srv->round_w =
				srv->round_w > 1.0 ? srv->round_w - 1.0 : 0;
			srv->round_full = true;
		}
	}
	for (uint32_t j = srv->lo; j < srv->hi; j++) {
		double g = sum[j];

		if (a->share && mu > 0) {
			/* the turn, then the share */
			if (turn) {
				s->x[j] -= s->cfg.lr * mu * s->vel[j];
				s->vel[j] *= mu;
			}
			s->x[j] -= step * g;
			s->vel[j] += a->lr_scale * g;
			continue;
		}
		if (mu > 0) {
			s->vel[j] = mu * s->vel[j] + g;
			g = s->deltas ? g + mu * s->vel[j] : s->vel[j];
		}
		s->x[j] -= step * g;
	}
	s->loss_dirty = true;
	s->res.contributions += a->ncontrib;
	s->res.applies++;
	return 0;
}

/* Send the chunk as it is now to the worker the action names. */
static int release(struct kn__sim *s, uint32_t sv,
		   const struct kn__sync_action *a, double t)
{
	const struct server *srv = &s->srv[sv];
	uint32_t wk = a->worker;
	struct event ev;
	size_t ix;

	if (wk >= s->n)
		return kn__sim_fail(s, -EPROTO,
				    "server %u: RELEASE names worker %u", sv,
				    wk);
	ix = (size_t)wk * s->m + sv;
	if (!s->await[ix])
		return kn__sim_fail(
			s, -EPROTO,
			"server %u released worker %u at t = %.9g s, "
			"which has no push waiting there",
			sv, wk, t);
	s->await[ix] = 0;
	memcpy(s->xin + (size_t)wk * s->d + srv->lo, s->x + srv->lo,
	       (srv->hi - srv->lo) * sizeof(double));
	ev = (struct event){
		.type = EV_RELEASE,
		.worker = wk,
		.server = sv,
		.steps = a->steps,
		.a = a->version,
		.b = a->epoch,
		.value = a->hint,
	};
	s->res.releases++;
	return kn__sim_schedule(s, t + s->wire, &ev);
}

/*
 * CGP: a chunk rule waits at the end of @epoch.  The planner hears it
 * once an epoch, one latency later, from whichever server got there
 * first (the engine's coordinator hears it from each server; the
 * planner takes it once or many times).
 */
static int barrier(struct kn__sim *s, uint64_t epoch, double t)
{
	struct event ev = { .type = EV_BARRIER, .a = epoch };

	if (s->barrier_sent && epoch <= s->barrier_epoch)
		return 0;
	s->barrier_sent = true;
	s->barrier_epoch = epoch;
	return kn__sim_schedule(s, t + s->cfg.latency, &ev);
}

/* Feed @ev to the chunk rule of server @sv and carry out its actions. */
int kn__sim_rule_call(struct kn__sim *s, uint32_t sv,
		      const struct kn__sync_event *ev)
{
	int n = kn__sync_rule_event(s->srv[sv].rule, ev, s->out);

	if (n < 0)
		return kn__sim_fail(
			s, -EPROTO,
			"server %u: the chunk rule refused %s of worker %u "
			"at t = %.9g s: %s",
			sv, ev_name(ev->type), ev->worker, ev->t, strerror(-n));
	for (int i = 0; i < n; i++) {
		const struct kn__sync_action *a = &s->out[i];
		int ret;

		if (a->type == KN__SYNC_ACT_APPLY)
			ret = apply(s, sv, a);
		else if (a->type == KN__SYNC_ACT_RELEASE)
			ret = release(s, sv, a, ev->t);
		else if (a->type == KN__SYNC_ACT_BARRIER)
			ret = barrier(s, a->epoch, ev->t);
		else
			ret = kn__sim_fail(
				s, -EPROTO,
				"server %u: the chunk rule answered action "
				"%u",
				sv, a->type);
		if (ret)
			return ret;
	}
	return 0;
}

/* --- the planner ------------------------------------------------------ */

/* Copy a REGROUP's plan and send it to every server. */
static int broadcast(struct kn__sim *s, const struct kn__sync_action *a,
		     double t)
{
	struct event ev = { .type = EV_PLAN };
	struct sim_plan *p = NULL;
	uint32_t i;

	if (!a->plan)
		return kn__sim_fail(s, -EPROTO,
				    "the planner's REGROUP has no plan");
	for (i = 0; i < s->nplans; i++) {
		if (!s->plans[i].refs) {
			p = &s->plans[i];
			break;
		}
	}
	if (!p) {
		void *np = realloc(s->plans, (s->nplans + 1) * sizeof(*p));

		if (!np)
			return kn__sim_fail(s, -ENOMEM,
					    "out of memory for a plan");
		s->plans = np;
		p = &s->plans[s->nplans];
		p->v = malloc((size_t)s->n * sizeof(*p->v));
		if (!p->v)
			return kn__sim_fail(s, -ENOMEM,
					    "out of memory for a plan");
		i = s->nplans++;
	}
	memcpy(p->v, a->plan, (size_t)s->n * sizeof(*p->v));
	p->epoch = a->epoch;
	p->refs = s->m;
	s->res.regroups++;
	ev.a = i;
	for (uint32_t sv = 0; sv < s->m; sv++) {
		int ret;

		ev.server = sv;
		ret = kn__sim_schedule(s, t + s->cfg.latency, &ev);
		if (ret)
			return ret;
	}
	return 0;
}

int kn__sim_planner_call(struct kn__sim *s, const struct kn__sync_event *ev)
{
	int n = kn__sync_planner_event(s->planner, ev, s->out);

	if (n < 0 && ev->type == KN__SYNC_EV_BARRIER)
		return kn__sim_fail(
			s, -EPROTO,
			"the planner refused the BARRIER of epoch %llu at "
			"t = %.9g s: %s",
			(unsigned long long)ev->epoch, ev->t, strerror(-n));
	if (n < 0)
		return kn__sim_fail(
			s, -EPROTO,
			"the planner refused %s of worker %u at t = %.9g "
			"s: %s",
			ev_name(ev->type), ev->worker, ev->t, strerror(-n));
	for (int i = 0; i < n; i++) {
		int ret;

		if (s->out[i].type != KN__SYNC_ACT_REGROUP)
			return kn__sim_fail(s, -EPROTO,
					    "the planner answered action %u",
					    s->out[i].type);
		ret = broadcast(s, &s->out[i], ev->t);
		if (ret)
			return ret;
	}
	return 0;
}

int kn__sim_on_plan(struct kn__sim *s, const struct event *e, double t)
{
	struct sim_plan *p = &s->plans[e->a];
	struct kn__sync_event ev = {
		.type = KN__SYNC_EV_PLAN,
		.t = t,
		.epoch = p->epoch,
		.plan = p->v,
	};

	p->refs--;
	return kn__sim_rule_call(s, e->server, &ev);
}

int kn__sim_on_service(struct kn__sim *s, const struct event *e, double t)
{
	struct kn__sync_event ev = {
		.type = KN__SYNC_EV_PUSH,
		.worker = e->worker,
		.slot = (uint32_t)(e->a & 1),
		.clock = e->a,
		.version = e->b,
		.t = t,
		.steps = e->steps,
	};

	return kn__sim_rule_call(s, e->server, &ev);
}

int kn__sim_on_barrier(struct kn__sim *s, const struct event *e, double t)
{
	struct kn__sync_event ev = {
		.type = KN__SYNC_EV_BARRIER,
		.t = t,
		.epoch = e->a,
	};

	return kn__sim_planner_call(s, &ev);
}

/*
 * A worker's mean step time since its last release reached the
 * coordinator's planner (PSP, CGP) and, under ESP, whose chunk rules
 * compare their members' step times, every server (as the engine sends
 * it).
 */
int kn__sim_on_timing(struct kn__sim *s, const struct event *e, double t)
{
	struct kn__sync_event ev = {
		.type = KN__SYNC_EV_TIMING,
		.worker = e->worker,
		.t = t,
		.value = e->value,
	};
	int ret = kn__sim_planner_call(s, &ev);

	for (uint32_t sv = 0;
	     !ret && s->traits->timing == KN__SYNC_TIMING_RULES &&
	     sv < s->cfg.servers;
	     sv++)
		ret = kn__sim_rule_call(s, sv, &ev);
	return ret;
}
