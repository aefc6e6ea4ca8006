/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sync.h - the synchronization protocols as pure state machines
 * (DESIGN.md section 4): events in, actions out, no I/O, no clock reads;
 * time comes in with the event.  The engine executes the actions; the
 * simulator drives the same code with simulated time.
 *
 * Three kinds of machine, so that several servers never disagree:
 * - the chunk rule (one per parameter chunk, on the server that owns it):
 *   decides when contributions are applied, with which weights, and when
 *   each worker is released with which version;
 * - the planner (one, on the coordinator): global plans from timing
 *   reports (PSP step counts, CGP partitions), each with an epoch;
 * - the worker rule (one per worker): communicate now or take another
 *   local step (ESP), local steps while waiting (PSP).
 * BSP and ASP need only the chunk rule; their planner and worker rule
 * are the trivial ones (no plans; communicate after every step).
 *
 * Calls return the number of actions written (0 or more) or a negative
 * errno: -EINVAL for an event that breaks the protocol (a push from a
 * worker that is not a member, a second push for the same round), which
 * the engine treats as the sender's fault.  @out must hold at least
 * kn__sync_max_actions(); action arrays point into the machine's own
 * storage and stay valid until its next call.
 */
#ifndef KN_SYNC_H
#define KN_SYNC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kanel.h"

/*
 * The protocols are kanel.h's public enum kn_sync, the one enum that
 * names them (its values are ABI: a worker reports them in struct
 * kn_job_info, and the JOB message carries them).  Every other layer
 * names a protocol by that number or by its name (kn__sync_protocol_*),
 * and asks for what it needs through kn__sync_traits(): the registry in
 * registry.c is the one list of protocols.
 */
#define KN__SYNC_DEFAULT KN_SYNC_BSP /* what a job runs unless told */

/* CGP: how the planner solves CGPP (sync/cgpp.h). */
enum kn__sync_cgp_solver {
	KN__SYNC_CGP_AUTO = 0, /* AGA up to KN__SYNC_CGP_AUTO_AGA workers */
	KN__SYNC_CGP_AGA = 1,
	KN__SYNC_CGP_PLS = 2,
};

/* auto: CGP_AGA for at most this many workers, CGP_PLS above. */
#define KN__SYNC_CGP_AUTO_AGA 128u

/*
 * A machine's parameters.  The protocols' own ones are 0 for "the
 * documented default" (docs/protocols.md); the create functions resolve
 * them (kn__sync_params_resolve) before the protocol sees them, and
 * refuse values out of range.
 */
struct kn__sync_params {
	uint32_t protocol;    /* enum kn_sync */
	uint32_t max_workers; /* worker ids are 0 .. max_workers - 1 */
	uint32_t members;     /* workers 0 .. members - 1 start as members */
	uint32_t
		staleness; /* SSP s, ESP s_e: clocks ahead of the slowest (3) */
	uint32_t max_skip; /* ESP H_max: local steps before a push is due (8) */
	uint32_t max_steps; /* PSP R: most local steps a plan gives (15) */
	uint32_t warmup;    /* PSP, CGP: barriers under BSP before a plan (3) */
	float gamma;	    /* ESP: push when cost <= gamma x one step (1) */
	float theta;	    /* ESP: or |delta|/|anchor| >= theta (0: off) */
	float alpha;	    /* PSP: EMA weight of the newest timing (0.5) */
	float miss; /* PSP: re-plan when a prediction misses by more (0.25) */
	/* CGP (alpha above is its EMA weight too) */
	uint32_t solver;       /* enum kn__sync_cgp_solver (auto) */
	uint32_t epoch_rounds; /* rounds of the fastest group an epoch (40) */
	uint32_t period; /* T_re: iterations between regroup checks (100) */
	float bound;	 /* S: the staleness bound tau_max <= S (8) */
	float latency;	 /* C_sync: seconds per sync (100e-6) */
	float bandwidth; /* C_sync: bytes per second the servers take in (1e9) */
	uint64_t bytes;	 /* C_sync: bytes a worker pushes a round (0) */
	/* ESP, PSP: the servers' outer update of the workers' model deltas */
	float outer_lr;	      /* rate on the mean delta (1) */
	float outer_momentum; /* Nesterov momentum of that update (0) */
};

/*
 * The protocol parameters a job hands to every process (everything above
 * but protocol, max_workers, members and bytes), as 32-bit words (floats
 * by their bits) in one fixed order: the engine's JOB message carries
 * them so.  kn__sync_param_table below is the list.
 */
#define KN__SYNC_PARAMS_WORDS 16u
void kn__sync_params_pack(const struct kn__sync_params *params,
			  uint32_t words[KN__SYNC_PARAMS_WORDS]);
/* The inverse: sets those fields of @params, leaves the others. */
void kn__sync_params_unpack(struct kn__sync_params *params,
			    const uint32_t words[KN__SYNC_PARAMS_WORDS]);

/*
 * The protocol parameters, one row each: everything a program needs to
 * offer one as an option and to check it, so that the engine's options
 * and KANEL_* variables (engine/config_table.c), the simulator's options
 * (kanel sim) and kn__sync_params_resolve are all made from this table
 * and a new parameter is one row here and one field above.  Every row is
 * one 32-bit word of the JOB message (kn__sync_params_pack), at @word.
 */
/* kanel.h's enum kn_sync_param_type, as kn_sync_param_at tells it */
enum kn__sync_param_type {
	KN__SYNC_PARAM_U32 = KN_SYNC_PARAM_UINT, /* uint32_t, lo to hi */
	/* float: above lo (from lo if lo_closed), below hi, finite */
	KN__SYNC_PARAM_FLOAT = KN_SYNC_PARAM_FLOAT,
	/* uint32_t: a CGP solver, by its name */
	KN__SYNC_PARAM_SOLVER = KN_SYNC_PARAM_CHOICE,
};

struct kn__sync_param {
	const char *name;  /* its field above, and kanel.Job's: "max_skip" */
	size_t off;	   /* offsetof(struct kn__sync_params, that field) */
	const char *flag;  /* the engine's option, "--esp-max-skip" */
	const char *env;   /* its variable, "KANEL_ESP_MAX_SKIP" */
	const char *sim;   /* the simulator's option; NULL: it has none */
	const char *arg;   /* the value's name in a usage line */
	uint32_t type;	   /* enum kn__sync_param_type */
	uint32_t word;	   /* its index in kn__sync_params_pack's words */
	const char *deflt; /* the default, written as an option's value */
	double lo, hi;
	bool lo_closed;
	const char *help;
};

extern const struct kn__sync_param kn__sync_param_table[KN__SYNC_PARAMS_WORDS];

/* The value of row @i of the table in @params, as kn_job_info's
 * params[i] holds it. */
double kn__sync_param_value(const struct kn__sync_params *params, uint32_t i);

/*
 * What a protocol asks of whoever runs it (the engine, the simulator),
 * declared by the protocol itself (its ops table, sync_priv.h): the
 * engine and the simulator read these and never compare a protocol id.
 */
enum kn__sync_timing_to {
	KN__SYNC_TIMING_NONE = 0, /* nobody reads TIMING events */
	KN__SYNC_TIMING_RULES,	  /* the chunk rules: every server (ESP) */
	KN__SYNC_TIMING_PLANNER,  /* the planner, on the coordinator */
};

enum kn__sync_plans {
	KN__SYNC_PLANS_NONE = 0, /* no planner: no REGROUP ever comes */
	KN__SYNC_PLANS_STEPS,	 /* a REGROUP's plan is each worker's k_i */
	KN__SYNC_PLANS_GROUPS,	 /* ... KN__SYNC_CGP_PLAN(group, rounds) */
};

struct kn__sync_traits {
	/* the workers take local steps and push model deltas (ESP, PSP);
	 * the others push one gradient per step */
	bool local_steps;
	/* every APPLY is the mean of a round that every member pushed
	 * once to, all from one version (BSP): under the workers' own
	 * optimizer (sum) the servers publish the mean of their models
	 * instead of adding model deltas */
	bool mean_model;
	/* a rejoined worker whose chunks are a round apart sits that
	 * round out in the others with a SKIP (BSP) */
	bool skips;
	/* a RELEASE carries the worker rule's steps, epoch and hint, so
	 * the servers send every release to the worker (ESP, PSP) */
	bool release_info;
	/* the worker rule reads a STEP's delta_ratio (ESP) */
	bool delta_ratio;
	/* the planner's cost model needs the bytes a worker pushes a
	 * round (kn__sync_planner_set_bytes, CGP) */
	bool model_bytes;
	uint32_t timing; /* enum kn__sync_timing_to: where TIMING goes */
	uint32_t plans;	 /* enum kn__sync_plans: what a REGROUP's plan is */
};

/*
 * The traits of @protocol; never NULL: an unknown protocol has none
 * (every field 0), which is what a caller that checked nothing expects.
 */
const struct kn__sync_traits *kn__sync_traits(uint32_t protocol);

/*
 * Replace the zero fields of @params by their defaults: 0, or -EINVAL,
 * @params unchanged, for a value outside its range in
 * kn__sync_param_table (0 is always "the default").
 */
int kn__sync_params_resolve(struct kn__sync_params *params);

enum kn__sync_event_type {
	KN__SYNC_EV_PUSH = 1, /* worker's contribution is in slot @slot */
	KN__SYNC_EV_JOIN,     /* worker (re)joins the membership */
	KN__SYNC_EV_LEAVE,    /* worker left (died, timed out, finished) */
	KN__SYNC_EV_TIMING,   /* worker reports an iteration time @value */
	KN__SYNC_EV_TIMER,    /* the time is @t: deadlines may have passed */
	KN__SYNC_EV_PLAN,     /* chunk rules: the planner's plan @epoch */
	KN__SYNC_EV_BARRIER,  /* planner: a chunk rule waits at @epoch's end */
	KN__SYNC_EV_SKIP,     /* BSP: worker sits out the current round */
};

struct kn__sync_event {
	uint32_t type;	  /* enum kn__sync_event_type */
	uint32_t worker;  /* PUSH, SKIP, JOIN, LEAVE, TIMING */
	uint32_t slot;	  /* PUSH: where the contribution lies (parity) */
	uint64_t clock;	  /* PUSH, SKIP: the worker's push count, from 0 */
	uint64_t version; /* PUSH: the model version it was computed from;
			   * SKIP: the version the skipped round starts from */
	double t;	  /* seconds on the caller's clock */
	double value;	  /* TIMING: seconds per iteration */
	uint32_t steps;	  /* PUSH: local steps it holds (0 counts as 1) */
	uint64_t epoch; /* PLAN: the plan's epoch; BARRIER: the epoch ending */
	const uint32_t *plan; /* PLAN: per worker id, as REGROUP's @plan */
};

/* One contribution to apply: worker @worker's data in slot @slot. */
struct kn__sync_contrib {
	uint32_t worker;
	uint32_t slot;
	float weight; /* its factor in the weighted sum */
};

enum kn__sync_action_type {
	KN__SYNC_ACT_APPLY = 1, /* sum contrib[] with weights, update */
	KN__SYNC_ACT_RELEASE,	/* deliver @version to @worker */
	KN__SYNC_ACT_REGROUP,	/* a new plan (CGP, PSP) from @epoch */
	KN__SYNC_ACT_BARRIER,	/* CGP: waiting at the end of @epoch for
				 * the plan of @epoch + 1: tell the planner */
};

struct kn__sync_action {
	uint32_t type;	   /* enum kn__sync_action_type */
	uint32_t worker;   /* RELEASE */
	uint64_t version;  /* APPLY: the version it makes; RELEASE: to send */
	uint64_t epoch;	   /* RELEASE, REGROUP: the plan in force; BARRIER */
	uint32_t steps;	   /* RELEASE: local steps before the next push */
	float lr_scale;	   /* APPLY: factor on the optimizer's rate */
	uint32_t ncontrib; /* APPLY */
	const struct kn__sync_contrib *contrib; /* APPLY */
	/* APPLY: one share of a round (an ASP or SSP push, a CGP group),
	 * not a whole one: under momentum the servers turn the velocity
	 * once per round's worth of shares (docs/protocols.md, "Momentum
	 * once per round") */
	bool share;
	float hint; /* RELEASE: ESP's predicted wait, seconds */
	/* REGROUP: per worker id (max_workers entries); PSP: its k_i;
	 * CGP: KN__SYNC_CGP_PLAN(group, rounds), 0 for none */
	const uint32_t *plan;
	/* REGROUP, CGP: the groups changed, why, and the predicted gain in
	 * throughput (0.2: 20% more) over keeping the old ones */
	bool regrouped;
	uint32_t why; /* enum kn__sync_regroup_why */
	float gain;
};

/* Why CGP's planner changed the groups. */
enum kn__sync_regroup_why {
	KN__SYNC_REGROUP_GAIN = 1, /* more than 5% more throughput */
	KN__SYNC_REGROUP_BOUND,	   /* the old groups broke the bound S */
	KN__SYNC_REGROUP_JOIN,	   /* a member had no group */
};

/*
 * A CGP plan entry: the worker's group (0 .. 2^20 - 2) and the rounds
 * its group runs in the epoch (1 .. 4095); 0 is "not in the plan".
 */
#define KN__SYNC_CGP_PLAN(group, rounds) \
	(((uint32_t)(group) + 1u) | ((uint32_t)(rounds) << 20))
#define KN__SYNC_CGP_GROUP(entry)  (((entry)&0xfffffu) - 1u)
#define KN__SYNC_CGP_ROUNDS(entry) ((entry) >> 20)
#define KN__SYNC_CGP_MAX_ROUNDS	   4095u
#define KN__SYNC_CGP_MAX_GROUPS	   0xfffffu /* ids 0 .. 2^20 - 2 */

struct kn__sync_rule;

/* A chunk rule for @params; 0 and the rule, or -EINVAL / -ENOMEM. */
int kn__sync_rule_create(const struct kn__sync_params *params,
			 struct kn__sync_rule **rule);
void kn__sync_rule_destroy(struct kn__sync_rule *rule);

/* Feed one event; up to kn__sync_max_actions() actions into @out. */
int kn__sync_rule_event(struct kn__sync_rule *rule,
			const struct kn__sync_event *ev,
			struct kn__sync_action *out);

/* The model version the rule has made so far (0 before any apply). */
uint64_t kn__sync_rule_version(const struct kn__sync_rule *rule);

/*
 * How many syncs @worker is ahead of the slowest member under the bound
 * of SSP and ESP (0 under the other protocols, and for non-members).
 */
uint64_t kn__sync_rule_lead(const struct kn__sync_rule *rule, uint32_t worker);

/* Room @out needs for one call with @params. */
uint32_t kn__sync_max_actions(const struct kn__sync_params *params);

/* "bsp", "asp", ...; NULL for an unknown protocol. */
const char *kn__sync_protocol_name(uint32_t protocol);
/* The protocol named @name (its name or another it goes by, as "psp"),
 * or -EINVAL. */
int kn__sync_protocol_parse(const char *name);
/*
 * The @i-th of the names kn__sync_protocol_parse takes, from 0, in the
 * order a usage line lists them (each protocol's name, then the others
 * it goes by), with its protocol in @protocol; NULL past the last.
 */
const char *kn__sync_protocol_name_at(uint32_t i, uint32_t *protocol);

/* CGP's solvers, the same way: "auto", "aga", "pls"; NULL, -EINVAL. */
const char *kn__sync_cgp_solver_name(uint32_t solver);
int kn__sync_cgp_solver_parse(const char *name);
const char *kn__sync_cgp_solver_name_at(uint32_t i, uint32_t *solver);

/* The largest max_workers any machine accepts; above it is -EINVAL. */
#define KN__SYNC_MAX_WORKERS (1u << 20)

/*
 * The planner (one, on the coordinator).  It sees JOIN, LEAVE, TIMING,
 * TIMER and BARRIER events (a PUSH is -EINVAL: pushes go to the chunk
 * rules; a BARRIER is a chunk rule's BARRIER action, passed on by the
 * caller, once or many times) and answers with REGROUP actions, each naming the @epoch of the plan that
 * it starts; what else a REGROUP carries is defined by the protocol that
 * emits it.  Membership is checked as by the chunk rule: workers
 * 0 .. members - 1 start as members, a JOIN of a member or a LEAVE of a
 * non-member is -EINVAL.  BSP and ASP have no plans: their planner
 * checks the events and never emits an action.  @out must hold
 * kn__sync_max_actions(); the return value is as for the chunk rule.
 */
struct kn__sync_planner;

/* A planner for @params; 0 and the planner, or -EINVAL / -ENOMEM. */
int kn__sync_planner_create(const struct kn__sync_params *params,
			    struct kn__sync_planner **planner);
void kn__sync_planner_destroy(struct kn__sync_planner *planner);

/* Feed one event; up to kn__sync_max_actions() actions into @out. */
int kn__sync_planner_event(struct kn__sync_planner *planner,
			   const struct kn__sync_event *ev,
			   struct kn__sync_action *out);

/* The epoch of the plan in force (0 before the first REGROUP). */
uint64_t kn__sync_planner_epoch(const struct kn__sync_planner *planner);

/*
 * Set params.bytes (CGP's cost model: the bytes a worker pushes a round)
 * once the caller knows the model, as the coordinator does when the
 * tensor table is in.  Plans made from then on use it.
 */
void kn__sync_planner_set_bytes(struct kn__sync_planner *planner,
				uint64_t bytes);

/*
 * The worker rule (one per worker, in the worker).  The worker tells it
 * what just happened and it answers what to do next:
 *
 *   STEP    a local step ended (@t, @seconds)  -> PUSH or STEP
 *   PUSHED  the worker pushed (after a PUSH)   -> WAIT or STEP
 *   RELEASE a release arrived (@version, @epoch, @steps)  -> STEP
 *
 * PUSH: push now, then report PUSHED.  STEP: take one more local step
 * (before a push: ESP skipping a round, PSP's k_i not reached yet; after
 * a push: ESP and PSP training on the local copy while they wait).  WAIT: block
 * until the release.  A worker starts as if just released: it trains
 * from version 0, or, when it joined, from the version its first
 * RELEASE brings.  An event that does not fit (a STEP after being told
 * to PUSH or WAIT, a PUSHED that was not asked for, a RELEASE while a
 * push is due) is -EINVAL and changes nothing.  BSP and ASP communicate
 * after every step: STEP -> PUSH, PUSHED -> WAIT, RELEASE -> STEP.
 */
enum kn__sync_worker_event_type {
	KN__SYNC_WEV_STEP = 1, /* a local step ended at @t, took @seconds */
	KN__SYNC_WEV_PUSHED,   /* the worker pushed at @t */
	KN__SYNC_WEV_RELEASE,  /* a RELEASE action reached the worker */
};

struct kn__sync_worker_event {
	uint32_t type;	   /* enum kn__sync_worker_event_type */
	uint32_t steps;	   /* RELEASE: local steps before the next push */
	uint64_t version;  /* RELEASE: the version delivered */
	uint64_t epoch;	   /* RELEASE: the plan in force */
	double t;	   /* seconds on the caller's clock */
	double seconds;	   /* STEP: how long the local step took */
	float delta_ratio; /* STEP: |model - anchor| / |anchor| (ESP) */
	float hint;	   /* RELEASE: the RELEASE action's @hint */
	double rtt;	   /* RELEASE: seconds from the push to this release */
};

enum kn__sync_worker_next {
	KN__SYNC_NEXT_PUSH = 1, /* push now, then report PUSHED */
	KN__SYNC_NEXT_STEP,	/* take one more local step */
	KN__SYNC_NEXT_WAIT,	/* wait for the release */
};

struct kn__sync_worker;

/* The rule of worker @worker under @params; -EINVAL / -ENOMEM. */
int kn__sync_worker_create(const struct kn__sync_params *params,
			   uint32_t worker, struct kn__sync_worker **rule);
void kn__sync_worker_destroy(struct kn__sync_worker *rule);

/* Feed one event; 0 and the next thing to do in @next, or -EINVAL. */
int kn__sync_worker_event(struct kn__sync_worker *rule,
			  const struct kn__sync_worker_event *ev,
			  uint32_t *next);

#endif /* KN_SYNC_H */
