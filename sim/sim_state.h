/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sim_state.h - what the simulator's files share (sim.h is the layer's
 * API): the event, the worker, server and plan records, the simulator
 * itself, the random streams, and the calls from one file into the
 * next.  The files call downwards only: sim.c (set-up and the run loop)
 * into sim_worker.c (the workers and the shared CPU), into sim_server.c
 * (the servers' chunk rules and the planner), into sim_event.c (the
 * event heap and errors).
 */
#ifndef KN_SIM_STATE_H
#define KN_SIM_STATE_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

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
struct sim_worker {
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
struct sim_plan {
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
	struct sim_plan *plans;
	uint32_t nplans;
	/* CGP: the highest epoch whose barrier went to the planner */
	uint64_t barrier_epoch;
	bool barrier_sent;

	struct sim_worker *w;	   /* [n] */
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
	unsigned char *mem; /* where the arrays above live: alloc_arrays() */
};

/* --- randomness: splitmix64 streams ----------------------------------- */

#define TAG_OPTIMUM 0x6f7074696d756dull /* "optimum" */
#define TAG_NOISE   0x6e6f697365ull	/* "noise" */

/* The state of stream @i of @tag under @seed: unrelated streams. */
static inline uint64_t stream(uint64_t seed, uint64_t tag, uint64_t i)
{
	return kn__mix64(kn__mix64(seed ^ kn__mix64(tag)) + i);
}

/* Uniform in (-1, 1), from the top 53 bits. */
static inline double uniform_pm1(uint64_t *st)
{
	return (double)(kn__splitmix_next(st) >> 11) * 0x1.0p-52 - 1.0;
}

/* Two independent standard normals (Marsaglia's polar method). */
static inline void normal_pair(uint64_t *st, double *z0, double *z1)
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

/* sim_event.c: errors, the event heap and its pool */
/* Say once why the run stops (the first reason is kept); returns @err. */
int kn__sim_fail(struct kn__sim *s, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Schedule a copy of @ev at @t: 0, or -ENOMEM. */
int kn__sim_schedule(struct kn__sim *s, double t, const struct event *ev);
/* Take the earliest event off the heap; the caller frees its entry. */
struct hent kn__sim_heap_pop(struct kn__sim *s);
/* Free the heap and the event pool (kn__sim_destroy). */
void kn__sim_events_fini(struct kn__sim *s);

/* sim_server.c: the servers' chunk rules and the planner */
/* Feed @ev to the chunk rule of server @sv and carry out its actions. */
int kn__sim_rule_call(struct kn__sim *s, uint32_t sv,
		      const struct kn__sync_event *ev);
/* Feed @ev to the planner and broadcast the plans it makes. */
int kn__sim_planner_call(struct kn__sim *s, const struct kn__sync_event *ev);
/* The events that reach a server or the planner */
int kn__sim_on_plan(struct kn__sim *s, const struct event *e, double t);
int kn__sim_on_service(struct kn__sim *s, const struct event *e, double t);
int kn__sim_on_barrier(struct kn__sim *s, const struct event *e, double t);
int kn__sim_on_timing(struct kn__sim *s, const struct event *e, double t);

/* sim_worker.c: the workers and the shared CPU */
/* Worker @i begins a local step at @t. */
int kn__sim_start_step(struct kn__sim *s, uint32_t i, double t);
/* The events that reach a worker */
int kn__sim_on_step_end(struct kn__sim *s, uint32_t i, double t);
int kn__sim_on_release(struct kn__sim *s, const struct event *e, double t);
int kn__sim_on_cpu_end(struct kn__sim *s, const struct event *e, double t);

#endif /* KN_SIM_STATE_H */
