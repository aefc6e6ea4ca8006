/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sim.h - the discrete-event simulator of a parameter-server job
 * (docs/simulator.md).  It drives the protocols' own state machines of
 * sync/ (chunk rules, planner, worker rules: sync.h) and the imbalance
 * models the trainer uses (imbalance.h) with simulated time, so that a
 * protocol can be measured at 10,000 workers on a laptop: nothing here
 * re-implements a protocol.
 *
 * What is simulated: n workers taking local steps of base time times the
 * imbalance factor, on a noisy quadratic objective; M servers, each
 * holding one contiguous chunk of the model with its own chunk rule;
 * pushes and releases that take latency + bytes / bandwidth on the wire
 * and pushes that queue at each server for bytes / server_rate of
 * aggregation (contention); optionally, a CPU part of every step that
 * the workers share on a few cores (a host running them all); one
 * planner fed by timing reports.  Time is
 * a double in seconds; events are ordered by (time, sequence number), so
 * a run is a function of its configuration and seed alone.
 *
 * A simulator (struct kn__sim) belongs to one thread at a time; separate
 * simulators share nothing.  Nothing here blocks; kn__sim_run() computes
 * until the job is over.
 */
#ifndef KN_SIM_H
#define KN_SIM_H

#include <stddef.h>
#include <stdint.h>

#include "imbalance.h"
#include "kanel_sim.h"
#include "sync.h"

#define KN__SIM_MAX_SERVERS   1024u
#define KN__SIM_MAX_DIM	      4096u
#define KN__SIM_STALE_BUCKETS 64 /* the last one holds 63 and above */

/*
 * Called every few tens of thousands of events with the simulated time
 * and the share of all local steps taken so far (0 to 1); the CLI uses
 * it for its progress line.  It must not call back into the simulator.
 */
typedef void kn__sim_progress_fn(void *arg, double sim_t, double done);

/* A run's configuration; kn__sim_config_init() sets the defaults. */
struct kn__sim_config {
	uint32_t workers;    /* n, 1 .. KN__SYNC_MAX_WORKERS (16) */
	uint32_t servers;    /* M, 1 .. KN__SIM_MAX_SERVERS (1) */
	uint32_t iterations; /* K: local steps each worker takes, >= 1 (100) */
	/* > 0: a worker also stops at its first step end at or after this
	 * simulated time, so protocols compare over the same time (0) */
	double duration;
	uint32_t dim;  /* d of the objective, 1 .. KN__SIM_MAX_DIM (16) */
	uint64_t seed; /* objective, noise, imbalance (1) */
	const char *imbalance; /* a spec of imbalance.h; NULL: "none" */
	double step_time;      /* base seconds of a local step, > 0 (0.02) */
	double latency;	       /* seconds one way, >= 0 (20e-6) */
	double bandwidth;      /* bytes/s of every link, > 0 (1.25e9) */
	double model_bytes;    /* simulated model size, >= 0 (4 MiB) */
	double server_rate;    /* bytes/s a server aggregates, > 0 (10e9) */
	/*
	 * > 0: each step first does this many seconds of CPU work, shared
	 * with the other workers' on @cores cores (each runs at
	 * min(1, cores / computing workers)), then its step_time times the
	 * imbalance factor off the CPU (0: none; 0 .. 1e6)
	 */
	double cpu_time;
	uint32_t cores; /* for cpu_time, 1 .. 1048576 (1) */
	double sigma;	/* gradient noise per coordinate, >= 0 (0.5) */
	double lr;	/* SGD rate, workers and servers, > 0 (0.1) */
	/* the job's momentum, [0, 1) (0): the servers' under gradient
	 * protocols, the workers' own under ESP and PSP, as in the engine */
	double momentum;
	double loss_every; /* seconds between loss samples; 0: auto */
	/*
	 * The protocol and its own parameters (0: the documented default);
	 * max_workers and members are set from @workers.
	 */
	struct kn__sync_params sync;
	kn__sim_progress_fn *progress; /* NULL: none */
	void *progress_arg;
};

/* One point of the loss curve: f(global model) at simulated time @t. */
struct kn__sim_sample {
	double t;
	double loss;
};

/* What a run measured; see docs/simulator.md for the definitions. */
struct kn__sim_result {
	char imbalance[128];	 /* canonical spec (kn__imb_format) */
	double sim_time_s;	 /* when the last worker finished */
	double iterations_per_s; /* local steps of all workers / sim_time_s */
	double wait_fraction;	 /* blocked seconds / worker seconds */
	double mean_staleness;	 /* over applied contributions */
	uint64_t max_staleness;
	uint64_t staleness_hist[KN__SIM_STALE_BUCKETS];
	double initial_loss, final_loss;
	double blocked_s, worker_s; /* summed over workers */
	uint64_t steps;		    /* local steps of all workers */
	uint64_t pushes;	    /* worker pushes (each to all servers) */
	uint64_t contributions;	    /* applied, summed over servers */
	uint64_t applies;	    /* APPLY actions, summed over servers */
	uint64_t releases;	    /* RELEASE actions, summed over servers */
	uint64_t regroups;	    /* REGROUP actions of the planner */
	uint64_t events;	    /* events processed */
	double wall_s;		    /* wall-clock seconds of kn__sim_run */
	/* the loss curve, owned by the simulator, valid until destroy */
	const struct kn__sim_sample *curve;
	size_t ncurve;
};

/* Fill @cfg with the defaults above (protocol BSP). */
void kn__sim_config_init(struct kn__sim_config *cfg);

struct kn__sim;

/*
 * Set up a simulator for @cfg: the objective, the workers, the machines
 * of sync/ (one chunk rule per server, one planner, one worker rule per
 * worker) and every pool the run needs, so that the run allocates only
 * when a plan is broadcast.  Returns 0 and the simulator in @sim, or
 * -EINVAL (with a sentence in @err when @errlen > 0) for a configuration
 * out of range or refused by sync/, or -ENOMEM.  @cfg is copied, its
 * strings are not kept.
 */
int kn__sim_create(const struct kn__sim_config *cfg, char *err, size_t errlen,
		   struct kn__sim **sim);
void kn__sim_destroy(struct kn__sim *sim);

/*
 * Run the job to its end: every worker has taken its K local steps and
 * left.  Returns 0 and fills @res, or -EPROTO when a machine of sync/
 * refused an event or asked for something impossible (a release of a
 * worker that has no push there, a push while one is outstanding), or
 * -EDEADLK when no event is left but workers have not finished; then
 * kn__sim_strerror() says what happened.  A simulator runs once: a second
 * call is -EALREADY.  Reads the clock only to measure @res->wall_s.
 */
int kn__sim_run(struct kn__sim *sim, struct kn__sim_result *res);

/*
 * The time at which the loss curve @curve (@n samples, by time) first
 * reaches @target, averaged over the last @window seconds: the first
 * sample time t >= curve[0].t + @window at which the mean loss of the
 * samples in (t - @window, t] is at most @target (@window 0: the sample
 * alone).  A loss below the noise floor of the objective is reached by
 * chance dips of single samples; the mean over a window is not, which
 * makes the time a measure of progress rather than of luck.  0 and the
 * time in @t, -ENOENT when the curve never reaches @target, -EINVAL for
 * a negative or non-finite @window.
 */
int kn__sim_time_to_loss(const struct kn__sim_sample *curve, size_t n,
			 double target, double window, double *t);

/* Why the last kn__sim_run() failed; "" when it did not. */
const char *kn__sim_strerror(const struct kn__sim *sim);

/* `kanel sim` and sim/sim: kn_sim_main() of kanel_sim.h. */

#endif /* KN_SIM_H */
