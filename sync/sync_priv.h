/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sync_priv.h - what the protocols share with the generic half of sync/
 * (sync.c): the machines' state and one ops table per protocol.
 *
 * sync.c checks every event once (worker ids, membership, staleness
 * bounds, clocks), keeps the membership, and only then calls the
 * protocol's hook, so a hook sees events that are valid for every
 * protocol and adds only its own checks.  A hook that returns a negative
 * errno must have changed nothing.  Each protocol is one file (bsp.c,
 * asp.c, later ssp.c, esp.c, predicted.c, cgp.c) that defines its table.
 */
#ifndef KN_SYNC_PRIV_H
#define KN_SYNC_PRIV_H

#include "sync.h"

/* What a chunk rule keeps per worker id. */
struct kn__sync_wstate {
	bool member;
	bool pushed;	/* BSP: has a contribution in the current round */
	bool clocked;	/* a push was accepted since it became a member */
	uint32_t slot;	/* BSP: where this round's contribution lies */
	uint64_t clock; /* the clock of the last accepted push */
	/* the protocols' own, zero at creation and at a JOIN */
	bool blocked;	 /* SSP, ESP: pushed, release held back */
	uint32_t steps;	 /* PSP: the local steps of its pushed contribution */
	double last_t;	 /* ESP: when its last push came */
	double interval; /* ESP: EMA of the time between its pushes */
};

struct kn__sync_rule {
	const struct kn__sync_ops *ops;
	struct kn__sync_params params;
	uint64_t version;  /* the version the rule has made so far */
	uint32_t nmembers; /* members now */
	uint32_t npushed;  /* BSP: members with a contribution this round */
	struct kn__sync_wstate *w;	  /* [max_workers] */
	struct kn__sync_contrib *contrib; /* [max_workers], APPLY points here */
	/* PSP: the plan in force and one waiting for the next barrier */
	uint64_t epoch, next_epoch;
	bool have_next;
	uint32_t *plan, *next_plan; /* [max_workers] each, zeroed */
};

struct kn__sync_planner {
	const struct kn__sync_ops *ops;
	struct kn__sync_params params;
	uint64_t epoch;
	uint32_t nmembers;
	bool *member; /* [max_workers] */
	/* PSP: predicted seconds per step, the plan in force, barriers seen */
	double *pred;	/* [max_workers], 0: no timing yet */
	uint32_t *plan; /* [max_workers], zeroed */
	uint64_t barriers;
};

/* Where a worker rule stands between two events. */
enum kn__sync_wrule_state {
	KN__SYNC_WS_RUN = 0, /* training; a STEP may come */
	KN__SYNC_WS_PUSH,    /* told to push; PUSHED must come */
	KN__SYNC_WS_WAIT,    /* pushed; waiting for the RELEASE */
};

struct kn__sync_worker {
	const struct kn__sync_ops *ops;
	struct kn__sync_params params;
	uint32_t worker;
	uint32_t state; /* enum kn__sync_wrule_state */
	/* the protocols' own, zero at creation */
	uint32_t steps; /* local steps since the last push */
	uint32_t due;	/* PSP: the steps its plan asks before a push */
	uint32_t extra; /* PSP: steps taken while waiting for the release */
	double cost;	/* ESP: the last release's rtt + hint, seconds */
};

typedef uint32_t kn__sync_max_actions_fn(const struct kn__sync_params *params);
typedef int kn__sync_rule_event_fn(struct kn__sync_rule *rule,
				   const struct kn__sync_event *ev,
				   struct kn__sync_action *out);
typedef int kn__sync_planner_event_fn(struct kn__sync_planner *planner,
				      const struct kn__sync_event *ev,
				      struct kn__sync_action *out);
typedef int kn__sync_worker_event_fn(struct kn__sync_worker *rule,
				     const struct kn__sync_worker_event *ev,
				     uint32_t *next);

/*
 * One protocol.  The chunk-rule hooks are called after sync.c's checks:
 * @push for a member whose clock is new and whose version is not in the
 * future (sync.c records the clock when @push succeeds); @join after
 * the worker became a member; @leave after it stopped being one (its
 * wstate still says whether it had pushed: @leave clears that).  @join
 * and @leave cannot refuse, the membership has changed already; they
 * only say what follows from it.  @plan gets a PLAN event (its @plan
 * array is the caller's: copy what is kept).  A NULL hook means "no
 * actions", a NULL @planner_event "no plans", a NULL @worker_event
 * "communicate after every step" (sync.c's BSP/ASP worker rule).
 */
struct kn__sync_ops {
	const char *name;
	kn__sync_max_actions_fn *max_actions;
	kn__sync_rule_event_fn *push;
	kn__sync_rule_event_fn *join;
	kn__sync_rule_event_fn *leave;
	kn__sync_rule_event_fn *timing;
	kn__sync_rule_event_fn *timer;
	kn__sync_rule_event_fn *plan;
	kn__sync_planner_event_fn *planner_event;
	kn__sync_worker_event_fn *worker_event;
};

extern const struct kn__sync_ops kn__sync_bsp_ops;
extern const struct kn__sync_ops kn__sync_asp_ops;

/* Write "deliver @version to @worker" (plan 0, one step) into @act. */
static inline void kn__sync_release(struct kn__sync_action *act,
				    uint32_t worker, uint64_t version)
{
	*act = (struct kn__sync_action){
		.type = KN__SYNC_ACT_RELEASE,
		.worker = worker,
		.version = version,
		.epoch = 0,
		.steps = 1,
	};
}

#endif /* KN_SYNC_PRIV_H */
