/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sim.c - the simulator core (sim.h, docs/simulator.md): an event heap
 * over simulated time, and the workers, servers and planner of a job,
 * each driving its own machine of sync/ exactly as the engine would.
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
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sim.h"

/* What a scheduled event is; the fields of struct event it uses. */
enum ev_type {
	EV_STEP_END = 1, /* worker: its local step ended */
	EV_SERVICE,	 /* worker, server, a clock, b version, steps */
	EV_RELEASE,	 /* worker, server, a version, b epoch, steps, value */
	EV_TIMING,  /* worker, value: a timing report reached the planner */
	EV_PLAN,    /* server, a: index of the plan copy */
	EV_BARRIER, /* a: the epoch whose end a chunk rule reached (CGP) */
	EV_CPU_END, /* a: the generation; the earliest CPU part ends */
};

struct event {
	uint32_t type;
	uint32_t worker;
	uint32_t server;
	uint32_t steps;
	uint64_t a, b;
	double value;
};

/* A heap entry; the event itself stays put in the pool. */
struct hent {
	double t;
	uint64_t seq;
	uint32_t ev;
};

enum wstate {
	W_STEP = 0, /* inside a local step */
	W_BLOCKED,  /* waiting for its release */
	W_DONE,	    /* took its K steps and left */
};

/* A worker's scalars; its vectors are in the arrays of struct kn__sim. */
struct worker {
	struct kn__sync_worker *rule;
	uint64_t rng;	/* its own stream: the gradient noise */
	uint64_t clock; /* pushes made */
	/* the fields of the latest RELEASE to arrive */
	uint64_t rel_version, rel_epoch;
	float rel_hint;
	uint32_t rel_steps;
	double push_t;	    /* when the outstanding push left */
	double rel_t;	    /* when its release arrived (the last server's) */
	double wait_t;	    /* when it began to block */
	double step_len;    /* seconds of the current step */
	double step_t0;	    /* when it began (cpu_time: its CPU part) */
	double off_len;	    /* cpu_time: the part off the CPU after it */
	double cpu_end_v;   /* cpu_time: virtual CPU time it leaves at */
	double step_sum;    /* step seconds since the last release */
	double anchor_norm; /* |anchor| */
	uint32_t nsince;    /* steps since the last release */
	uint32_t taken;	    /* local steps taken */
	uint32_t nacc;	    /* gradients summed in its accumulator */
	uint32_t pending;   /* servers that have not released its push */
	uint8_t state;	    /* enum wstate */
	bool outstanding;   /* a push is out and its release not merged */
	bool ready;	    /* released during a step: merge at its end */
	bool stopping;	    /* took its K steps: leave once released */
};

struct server {
	struct kn__sync_rule *rule;
	uint32_t lo, hi; /* its chunk: coordinates [lo, hi) */
	double free_t;	 /* when it will have aggregated the pushes so far */
	double round_w;	 /* ASP, SSP, CGP: shares since the velocity turned */
	bool round_full; /* ... weigh a round: the velocity turns next */
};

/* A plan copy on its way to the servers; reused once all have it. */
struct plan {
	uint32_t *v; /* [n] */
	uint64_t epoch;
	uint32_t refs; /* servers it has not reached yet */
};

struct kn__sim {
	struct kn__sim_config cfg;
	struct kn__sync_params params;
	struct kn__imb imb;
	uint32_t n, m, d, k;
	double wire;	/* latency + chunk bytes / bandwidth */
	double service; /* chunk bytes / server rate */
	/* cpu_time: the shared CPU's virtual clock (CPU seconds each
	 * computing worker has had), when it was last brought up to date,
	 * the workers inside their CPU part, and the generation of the
	 * one CPU_END event that is live */
	double vclock, vclock_t;
	uint32_t *on_cpu, ncpu;
	uint64_t cpu_gen;
	bool deltas; /* ESP, PSP push model deltas, applied at outer_lr */
	/* what the protocol asks: where its TIMING events go */
	const struct kn__sync_traits *traits;

	/* the objective f(x) = 0.5 sum h_j (x_j - xs_j)^2, and the model */
	double *h, *xs, *x, *sum; /* [d] each; sum: an APPLY's scratch */
	double *vel;		  /* [d]: the servers' momentum buffer */
	double loss;
	bool loss_dirty;

	struct server *srv;	     /* [m] */
	struct kn__sync_action *out; /* [kn__sync_max_actions] */
	struct kn__sync_planner *planner;
	struct plan *plans;
	uint32_t nplans;
	/* CGP: the highest epoch whose barrier went to the planner */
	uint64_t barrier_epoch;
	bool barrier_sent;

	struct worker *w;	   /* [n] */
	struct kn__imb_worker *iw; /* [n] */
	/* [n * d]: local model, anchor, model at push, inbox, gradient sum,
	 * the worker's momentum buffer (ESP, PSP) */
	double *xl, *anchor, *xpush, *xin, *acc, *wvel;
	double *slots;	    /* [n * 2 * d]: pushed contributions by parity */
	uint64_t *ver_read; /* [n * m]: chunk versions it computes from */
	uint64_t *ver_in;   /* [n * m]: chunk versions in its inbox */
	uint64_t *slot_ver; /* [n * 2 * m]: versions its slots were read at */
	uint8_t *await;	    /* [n * m]: a push there waits for its release */

	struct hent *heap;
	uint32_t nheap, heap_cap;
	struct event *pool;
	uint32_t *free; /* free pool entries, a stack */
	uint32_t nfree, pool_cap;
	uint64_t seq;
	double now; /* the time of the event being processed */

	struct kn__sim_sample *curve;
	size_t ncurve, curve_cap, curve_max;
	double every;	 /* seconds between samples */
	uint64_t next_k; /* the next sample is at next_k * every */

	struct kn__sim_result res;
	double stale_sum;
	uint32_t ndone;
	bool ran;
	char err[256];
};

/* --- errors ----------------------------------------------------------- */

static int fail(struct kn__sim *s, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Say once why the run stops; the first reason is the one kept. */
static int fail(struct kn__sim *s, int err, const char *fmt, ...)
{
	va_list ap;

	if (!s->err[0]) {
		va_start(ap, fmt);
		vsnprintf(s->err, sizeof(s->err), fmt, ap);
		va_end(ap);
	}
	return err;
}

const char *kn__sim_strerror(const struct kn__sim *sim)
{
	return sim ? sim->err : "";
}

/* --- randomness: splitmix64 streams ----------------------------------- */

#define TAG_OPTIMUM 0x6f7074696d756dull /* "optimum" */
#define TAG_NOISE   0x6e6f697365ull	/* "noise" */

static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* The state of stream @i of @tag under @seed: unrelated streams. */
static uint64_t stream(uint64_t seed, uint64_t tag, uint64_t i)
{
	return mix64(mix64(seed ^ mix64(tag)) + i);
}

static uint64_t next64(uint64_t *st)
{
	*st += 0x9e3779b97f4a7c15ull;
	return mix64(*st);
}

/* Uniform in (-1, 1), from the top 53 bits. */
static double uniform_pm1(uint64_t *st)
{
	return (double)(next64(st) >> 11) * 0x1.0p-52 - 1.0;
}

/* Two independent standard normals (Marsaglia's polar method). */
static void normal_pair(uint64_t *st, double *z0, double *z1)
{
	double u, v, q, f;

	do {
		u = uniform_pm1(st);
		v = uniform_pm1(st);
		q = u * u + v * v;
	} while (q >= 1.0 || q == 0.0);
	f = sqrt(-2.0 * log(q) / q);
	*z0 = u * f;
	*z1 = v * f;
}

/* --- the event heap and pool ------------------------------------------ */

static bool before(const struct hent *a, const struct hent *b)
{
	return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

static int grow(void **p, uint32_t *cap, size_t size)
{
	uint32_t ncap = *cap ? 2 * *cap : 64;
	void *np;

	if (*cap > UINT32_MAX / 2)
		return -ENOMEM;
	np = realloc(*p, (size_t)ncap * size);
	if (!np)
		return -ENOMEM;
	*p = np;
	*cap = ncap;
	return 0;
}

/* Schedule a copy of @ev at @t: 0, or -ENOMEM. */
static int schedule(struct kn__sim *s, double t, const struct event *ev)
{
	struct hent e = { .t = t, .seq = s->seq++ };
	uint32_t i, parent;

	if (!s->nfree) {
		uint32_t old = s->pool_cap, cap = old;

		/* the free stack has room for the whole pool */
		if (grow((void **)&s->pool, &cap, sizeof(*s->pool)) ||
		    grow((void **)&s->free, &old, sizeof(*s->free)))
			return fail(s, -ENOMEM, "out of memory for events");
		for (i = cap; i > s->pool_cap; i--)
			s->free[s->nfree++] = i - 1;
		s->pool_cap = cap;
	}
	if (s->nheap == s->heap_cap &&
	    grow((void **)&s->heap, &s->heap_cap, sizeof(*s->heap)))
		return fail(s, -ENOMEM, "out of memory for events");
	e.ev = s->free[--s->nfree];
	s->pool[e.ev] = *ev;

	/* sift up, moving parents into the hole */
	for (i = s->nheap++; i > 0; i = parent) {
		parent = (i - 1) / 2;
		if (!before(&e, &s->heap[parent]))
			break;
		s->heap[i] = s->heap[parent];
	}
	s->heap[i] = e;
	return 0;
}

/* Take the earliest event off the heap; the caller frees its entry. */
static struct hent heap_pop(struct kn__sim *s)
{
	struct hent top = s->heap[0], last = s->heap[--s->nheap];
	uint32_t i = 0, c;

	while ((c = 2 * i + 1) < s->nheap) {
		if (c + 1 < s->nheap && before(&s->heap[c + 1], &s->heap[c]))
			c++;
		if (!before(&s->heap[c], &last))
			break;
		s->heap[i] = s->heap[c];
		i = c;
	}
	if (s->nheap)
		s->heap[i] = last;
	return top;
}

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
			return fail(s, -ENOMEM, "out of memory for the curve");
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

/* --- servers: chunk rules and their actions --------------------------- */

static const char *ev_name(uint32_t type)
{
	switch (type) {
	case KN__SYNC_EV_PUSH:
		return "PUSH";
	case KN__SYNC_EV_JOIN:
		return "JOIN";
	case KN__SYNC_EV_LEAVE:
		return "LEAVE";
	case KN__SYNC_EV_TIMING:
		return "TIMING";
	case KN__SYNC_EV_TIMER:
		return "TIMER";
	case KN__SYNC_EV_PLAN:
		return "PLAN";
	case KN__SYNC_EV_BARRIER:
		return "BARRIER";
	default:
		return "?";
	}
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
			return fail(s, -EPROTO,
				    "server %u: APPLY names worker %u", sv, wk);
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
		return fail(s, -EPROTO, "server %u: RELEASE names worker %u",
			    sv, wk);
	ix = (size_t)wk * s->m + sv;
	if (!s->await[ix])
		return fail(s, -EPROTO,
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
	return schedule(s, t + s->wire, &ev);
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
	return schedule(s, t + s->cfg.latency, &ev);
}

/* Feed @ev to the chunk rule of server @sv and carry out its actions. */
static int rule_call(struct kn__sim *s, uint32_t sv,
		     const struct kn__sync_event *ev)
{
	int n = kn__sync_rule_event(s->srv[sv].rule, ev, s->out);

	if (n < 0)
		return fail(s, -EPROTO,
			    "server %u: the chunk rule refused %s of worker %u "
			    "at t = %.9g s: %s",
			    sv, ev_name(ev->type), ev->worker, ev->t,
			    strerror(-n));
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
			ret = fail(s, -EPROTO,
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
	struct plan *p = NULL;
	uint32_t i;

	if (!a->plan)
		return fail(s, -EPROTO, "the planner's REGROUP has no plan");
	for (i = 0; i < s->nplans; i++) {
		if (!s->plans[i].refs) {
			p = &s->plans[i];
			break;
		}
	}
	if (!p) {
		void *np = realloc(s->plans, (s->nplans + 1) * sizeof(*p));

		if (!np)
			return fail(s, -ENOMEM, "out of memory for a plan");
		s->plans = np;
		p = &s->plans[s->nplans];
		p->v = malloc((size_t)s->n * sizeof(*p->v));
		if (!p->v)
			return fail(s, -ENOMEM, "out of memory for a plan");
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
		ret = schedule(s, t + s->cfg.latency, &ev);
		if (ret)
			return ret;
	}
	return 0;
}

static int planner_call(struct kn__sim *s, const struct kn__sync_event *ev)
{
	int n = kn__sync_planner_event(s->planner, ev, s->out);

	if (n < 0 && ev->type == KN__SYNC_EV_BARRIER)
		return fail(s, -EPROTO,
			    "the planner refused the BARRIER of epoch %llu at "
			    "t = %.9g s: %s",
			    (unsigned long long)ev->epoch, ev->t, strerror(-n));
	if (n < 0)
		return fail(s, -EPROTO,
			    "the planner refused %s of worker %u at t = %.9g "
			    "s: %s",
			    ev_name(ev->type), ev->worker, ev->t, strerror(-n));
	for (int i = 0; i < n; i++) {
		int ret;

		if (s->out[i].type != KN__SYNC_ACT_REGROUP)
			return fail(s, -EPROTO,
				    "the planner answered action %u",
				    s->out[i].type);
		ret = broadcast(s, &s->out[i], ev->t);
		if (ret)
			return ret;
	}
	return 0;
}

static int on_plan(struct kn__sim *s, const struct event *e, double t)
{
	struct plan *p = &s->plans[e->a];
	struct kn__sync_event ev = {
		.type = KN__SYNC_EV_PLAN,
		.t = t,
		.epoch = p->epoch,
		.plan = p->v,
	};

	p->refs--;
	return rule_call(s, e->server, &ev);
}

/* --- workers ---------------------------------------------------------- */

static const char *wev_name(uint32_t type)
{
	switch (type) {
	case KN__SYNC_WEV_STEP:
		return "STEP";
	case KN__SYNC_WEV_PUSHED:
		return "PUSHED";
	default:
		return "RELEASE";
	}
}

static int wcall(struct kn__sim *s, uint32_t i,
		 const struct kn__sync_worker_event *ev, uint32_t *next)
{
	int ret = kn__sync_worker_event(s->w[i].rule, ev, next);

	if (ret < 0)
		return fail(s, -EPROTO,
			    "worker %u: its rule refused %s at t = %.9g s: %s",
			    i, wev_name(ev->type), ev->t, strerror(-ret));
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
	return schedule(s, t + fmax(v - s->vclock, 0) / cpu_rate(s), &ev);
}

/* The earliest CPU parts are over: their steps go on off the CPU. */
static int on_cpu_end(struct kn__sim *s, const struct event *e, double t)
{
	struct event ev = { .type = EV_STEP_END };
	int ret = 0;

	if (e->a != s->cpu_gen)
		return 0; /* rescheduled since */
	cpu_advance(s, t);
	for (uint32_t j = 0; j < s->ncpu && !ret;) {
		struct worker *w = &s->w[s->on_cpu[j]];

		/* a relative tolerance for the clock's rounding */
		if (w->cpu_end_v > s->vclock + 1e-12 * fmax(1, s->vclock)) {
			j++;
			continue;
		}
		ev.worker = s->on_cpu[j];
		w->step_len = t - w->step_t0 + w->off_len;
		s->on_cpu[j] = s->on_cpu[--s->ncpu];
		ret = schedule(s, t + w->off_len, &ev);
	}
	return ret ? ret : cpu_schedule(s, t);
}

static int start_step(struct kn__sim *s, uint32_t i, double t)
{
	struct worker *w = &s->w[i];
	struct event ev = { .type = EV_STEP_END, .worker = i };
	double off = s->cfg.step_time * kn__imb_factor(&s->imb, &s->iw[i], t);

	w->state = W_STEP;
	w->step_t0 = t;
	if (!(s->cfg.cpu_time > 0)) {
		w->step_len = off;
		return schedule(s, t + off, &ev);
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
	struct worker *w = &s->w[i];
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
	struct worker *w = &s->w[i];
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
		return fail(s, -EPROTO,
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
		ret = schedule(s, srv->free_t, &ev);
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
		ret = rule_call(s, sv, &ev);
		if (ret)
			return ret;
	}
	return planner_call(s, &ev);
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
	struct worker *w = &s->w[i];
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
		int ret = schedule(s, t + s->cfg.latency, &ev);

		if (ret)
			return ret;
	}
	w->nsince = 0;
	w->step_sum = 0;
	return wcall(s, i, &wev, next);
}

static int block(struct kn__sim *s, uint32_t i, double t)
{
	struct worker *w = &s->w[i];

	if (!w->outstanding)
		return fail(s, -EPROTO,
			    "worker %u: told to wait at t = %.9g s with no "
			    "push out",
			    i, t);
	w->state = W_BLOCKED;
	w->wait_t = t;
	return 0;
}

static int on_step_end(struct kn__sim *s, uint32_t i, double t)
{
	struct worker *w = &s->w[i];
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
		return start_step(s, i, t);
	if (next == KN__SYNC_NEXT_WAIT)
		return block(s, i, t);
	return fail(s, -EPROTO, "worker %u: its rule answered %u", i, next);
}

static int on_release(struct kn__sim *s, const struct event *e, double t)
{
	struct worker *w = &s->w[e->worker];
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
		return fail(s, -EPROTO,
			    "worker %u: its rule answered %u to a RELEASE", i,
			    next);
	return start_step(s, i, t);
}

static int on_service(struct kn__sim *s, const struct event *e, double t)
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

	return rule_call(s, e->server, &ev);
}

static int on_barrier(struct kn__sim *s, const struct event *e, double t)
{
	struct kn__sync_event ev = {
		.type = KN__SYNC_EV_BARRIER,
		.t = t,
		.epoch = e->a,
	};

	return planner_call(s, &ev);
}

/*
 * A worker's mean step time since its last release reached the
 * coordinator's planner (PSP, CGP) and, under ESP, whose chunk rules
 * compare their members' step times, every server (as the engine sends
 * it).
 */
static int on_timing(struct kn__sim *s, const struct event *e, double t)
{
	struct kn__sync_event ev = {
		.type = KN__SYNC_EV_TIMING,
		.worker = e->worker,
		.t = t,
		.value = e->value,
	};
	int ret = planner_call(s, &ev);

	for (uint32_t sv = 0;
	     !ret && s->traits->timing == KN__SYNC_TIMING_RULES &&
	     sv < s->cfg.servers;
	     sv++)
		ret = rule_call(s, sv, &ev);
	return ret;
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

/* The vectors and per-worker arrays, all zeroed. */
static int alloc_arrays(struct kn__sim *s)
{
	size_t n = s->n, d = s->d, m = s->m;

	s->h = calloc(5 * d, sizeof(double));
	s->srv = calloc(m, sizeof(*s->srv));
	s->w = calloc(n, sizeof(*s->w));
	s->iw = calloc(n, sizeof(*s->iw));
	s->xl = calloc(8 * n * d, sizeof(double));
	s->ver_read = calloc(4 * n * m, sizeof(uint64_t));
	s->await = calloc(n * m, 1);
	s->out = calloc(kn__sync_max_actions(&s->params), sizeof(*s->out));
	s->on_cpu = calloc(n, sizeof(*s->on_cpu));
	if (!s->h || !s->srv || !s->w || !s->iw || !s->xl || !s->ver_read ||
	    !s->await || !s->out || !s->on_cpu)
		return -ENOMEM;
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
	free(sim->free);
	free(sim->pool);
	free(sim->heap);
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
	free(sim->out);
	free(sim->on_cpu);
	free(sim->await);
	free(sim->ver_read);
	free(sim->xl);
	free(sim->iw);
	free(sim->w);
	free(sim->srv);
	free(sim->h);
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
		return on_step_end(s, e->worker, t);
	case EV_SERVICE:
		return on_service(s, e, t);
	case EV_RELEASE:
		return on_release(s, e, t);
	case EV_TIMING:
		return on_timing(s, e, t);
	case EV_BARRIER:
		return on_barrier(s, e, t);
	case EV_CPU_END:
		return on_cpu_end(s, e, t);
	default: /* EV_PLAN */
		return on_plan(s, e, t);
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
		return fail(s, -EALREADY, "a simulator runs once");
	s->ran = true;
	total = (double)s->n * s->k;

	/* every worker starts its first step at 0 from x0 = 0 */
	for (uint32_t i = 0; i < s->n && !ret; i++)
		ret = start_step(s, i, 0);
	if (!ret)
		ret = add_sample(s, 0);
	s->next_k = 1;

	while (!ret && s->nheap && s->ndone < s->n) {
		struct hent top = heap_pop(s);
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
		ret = fail(s, -EDEADLK,
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
