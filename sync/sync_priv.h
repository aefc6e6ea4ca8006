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
 * asp.c, ssp.c, esp.c, predicted.c, cgp.c) that defines its table, which
 * registry.c declares and lists with its number and name.
 */
#ifndef KN_SYNC_PRIV_H
#define KN_SYNC_PRIV_H

#include <stddef.h>

#include "sync.h"

/* What a chunk rule keeps per worker id. */
struct kn__sync_wstate {
	bool member;
	bool pushed;	/* rounds: has a contribution in the current one */
	bool skipped;	/* rounds: sits the current one out (SKIP) */
	bool clocked;	/* a push was accepted since it became a member */
	uint32_t slot;	/* rounds: where this round's contribution lies */
	uint64_t clock; /* the clock of the last accepted push */
	/* the bound's (SSP, ESP), zero at creation and at a JOIN */
	bool blocked;	/* pushed, release held back */
	uint64_t syncs; /* its sync count P (the bound below) */
};

struct kn__sync_rule {
	const struct kn__sync_ops *ops;
	struct kn__sync_params params;
	uint64_t version;	   /* the version the rule has made so far */
	uint32_t nmembers;	   /* members now */
	uint32_t npushed;	   /* rounds: members with a contribution */
	uint32_t nskipped;	   /* rounds: members sitting this round out */
	struct kn__sync_wstate *w; /* [max_workers] */
	struct kn__sync_contrib *contrib; /* [max_workers], APPLY points here */
	/* a protocol that plans (traits.plans: PSP, CGP): the plan in
	 * force and one waiting for the next barrier; NULL for others */
	uint64_t epoch, next_epoch;
	bool have_next;
	uint32_t *plan, *next_plan; /* [max_workers] each, zeroed */
	/* SSP, ESP: the bound on sync counts (kn__sync_bound_*) */
	uint64_t pmin;	/* the members' smallest sync count */
	uint32_t *ring; /* [staleness + 2]: members per count, mod */
	uint32_t *held; /* [max_workers]: workers held back */
	uint32_t nheld;
	uint64_t held_pmin; /* P_min when the held were last looked at */
	uint32_t lead;	    /* the bound in force: params.staleness, or 0 */
	/* the protocol's own state, ops->rule_size bytes, zero at
	 * creation: a struct its file defines (esp.c: step times, cgp.c:
	 * groups), whose arrays its @rule_init makes */
	max_align_t own[];
};

struct kn__sync_planner {
	const struct kn__sync_ops *ops;
	struct kn__sync_params params;
	uint64_t epoch;
	uint32_t nmembers;
	bool *member; /* [max_workers] */
	/* a protocol that plans (PSP, CGP): predicted seconds per step,
	 * the plan in force; NULL for the others */
	double *pred;	/* [max_workers], 0: no timing yet */
	uint32_t *plan; /* [max_workers], zeroed */
	bool changed;	/* PSP, CGP: a JOIN or LEAVE since the last plan */
	/* the protocol's own state, ops->planner_size bytes, as the
	 * rule's (predicted.c: barriers, misses; cgp.c: groups, solver) */
	max_align_t own[];
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
	/* the protocol's own state, ops->worker_size bytes, zero at
	 * creation: a struct its file defines (esp.c, predicted.c) */
	max_align_t own[];
};

/*
 * PSP's own state in a worker rule (predicted.c; here, not there, so that
 * its tests can look at it).
 */
struct kn__sync_psp_worker {
	uint32_t steps; /* local steps since the last push */
	uint32_t due;	/* the steps its plan asks before a push */
	uint32_t extra; /* steps taken while waiting for the release */
	double step_s;	/* predicted seconds of a local step (0: none) */
	double wait_s;	/* the longest recent wait from a push to its release */
	double push_t;	/* when the pending push left */
	bool stepping;	/* the last answer while waiting was STEP */
	uint64_t epoch; /* the plan in force (0: warm-up, plain BSP) */
};

/* PSP's own state in the planner (predicted.c), as the worker's. */
struct kn__sync_psp_planner {
	uint64_t barriers; /* barriers seen */
	/*
	 * The members that sent a TIMING since the last barrier and how
	 * many; a prediction missed since then.
	 */
	bool *reported; /* [max_workers], zeroed */
	uint32_t nreported;
	bool missed;
	/*
	 * The barriers in a row that saw a miss; in fallback (one step
	 * each, as BSP) and the barriers in a row that held since.
	 */
	uint32_t misses, holds;
	bool fallback;
};

static inline struct kn__sync_psp_worker *
kn__sync_psp_worker_of(struct kn__sync_worker *rule)
{
	return (struct kn__sync_psp_worker *)(void *)rule->own;
}

static inline struct kn__sync_psp_planner *
kn__sync_psp_planner_of(struct kn__sync_planner *planner)
{
	return (struct kn__sync_psp_planner *)(void *)planner->own;
}

typedef int kn__sync_rule_event_fn(struct kn__sync_rule *rule,
				   const struct kn__sync_event *ev,
				   struct kn__sync_action *out);
typedef int kn__sync_planner_event_fn(struct kn__sync_planner *planner,
				      const struct kn__sync_event *ev,
				      struct kn__sync_action *out);
typedef int kn__sync_rule_init_fn(struct kn__sync_rule *rule);
typedef void kn__sync_rule_fini_fn(struct kn__sync_rule *rule);
typedef int kn__sync_planner_init_fn(struct kn__sync_planner *planner);
typedef void kn__sync_planner_fini_fn(struct kn__sync_planner *planner);
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
 * @rule_size, @planner_size and @worker_size are the sizes of the
 * protocol's own state in each machine (its @own), 0 for none.
 * @traits says what the protocol asks of the engine and the simulator
 * (sync.h, struct kn__sync_traits), which is all they know of it.
 * @rule_init and @planner_init, where set, make the arrays of that state
 * once the machine is otherwise complete (0 or -ENOMEM); @rule_fini and
 * @planner_fini free them, and take a machine whose init failed or
 * never ran (its state all zero).
 */
struct kn__sync_ops {
	struct kn__sync_traits traits;
	/* the most actions one call writes (kn__sync_max_actions): this
	 * many, plus this many for each of max_workers */
	uint32_t actions_fixed, actions_per_worker;
	kn__sync_rule_event_fn *push;
	kn__sync_rule_event_fn *skip;
	kn__sync_rule_event_fn *join;
	kn__sync_rule_event_fn *leave;
	kn__sync_rule_event_fn *timing;
	kn__sync_rule_event_fn *timer;
	kn__sync_rule_event_fn *plan;
	kn__sync_planner_event_fn *planner_event;
	kn__sync_worker_event_fn *worker_event;
	kn__sync_rule_init_fn *rule_init;
	kn__sync_rule_fini_fn *rule_fini;
	kn__sync_planner_init_fn *planner_init;
	kn__sync_planner_fini_fn *planner_fini;
	size_t rule_size, planner_size, worker_size;
};

/*
 * A worker rule's PUSHED where the push is followed by the wait for its
 * release (every rule but PSP's, which may step meanwhile): WAIT, or
 * -EINVAL when no push was asked for.
 */
int kn__sync_worker_pushed(struct kn__sync_worker *rule, uint32_t *next);

/* registry.c: @protocol's table, NULL for an unknown one. */
const struct kn__sync_ops *kn__sync_ops_of(uint32_t protocol);

int kn__sync_zipline(const double *t, uint32_t n, uint32_t R, uint32_t *k);

/*
 * Rounds (BSP, PSP): a round starts at the rule's version and is
 * complete when every current member has pushed once for it.
 */
/* Record @ev as its worker's push of this round: 0, or -EINVAL for a
 * second push or one from another version (nothing changes). */
int kn__sync_round_push(struct kn__sync_rule *rule,
			const struct kn__sync_event *ev);
/* A member left: the round is applied by its members only, so its push,
 * if it had one, is dropped. */
void kn__sync_round_drop(struct kn__sync_rule *rule, uint32_t worker);
/* Record @ev as its worker sitting this round out (SKIP): 0, or -EINVAL
 * as kn__sync_round_push (nothing changes). */
int kn__sync_round_skip(struct kn__sync_rule *rule,
			const struct kn__sync_event *ev);
/*
 * If the round is complete (every member pushed or skipped, and at
 * least one pushed): its contributions into rule->contrib in ascending
 * worker id order (the summation order, which makes a round's result
 * bit-exact whatever order the pushes came in), a new version, and
 * out[0] = the APPLY, whose weights the caller sets; then a new round
 * starts, and the skippers wait for kn__sync_round_unskip.  The number
 * of contributions, 0 if not complete.
 */
uint32_t kn__sync_round_complete(struct kn__sync_rule *rule,
				 struct kn__sync_action *out);
/*
 * Every skipper released into out[] with the rule's version, in
 * ascending id order, for a round kn__sync_round_complete has just
 * completed or one that only skippers are left in (nothing to apply,
 * the version stays).  How many.
 */
uint32_t kn__sync_round_unskip(struct kn__sync_rule *rule,
			       struct kn__sync_action *out);

/*
 * The bound of SSP and ESP: a member's sync count P (pushes accepted
 * since it joined, plus the smallest count of the members when it
 * joined) may exceed the members' smallest count P_min by at most
 * rule->lead = s, which is params.staleness but while ESP holds rounds
 * (0).  A worker whose push takes it beyond P_min + s is held back: it
 * is released when P_min catches up.  So every member's count lies in
 * [P_min, P_min + params.staleness + 1], and a ring of that many + 1
 * counters keeps P_min in O(1) per event (amortized), which the
 * simulator needs at 10,000 workers.  A rule that raises the lead sets
 * held_pmin to UINT64_MAX, so that the next release looks at the held.
 */
/* A member joined (sync.c made it one); its count starts at P_min. */
void kn__sync_bound_join(struct kn__sync_rule *rule, uint32_t worker);
/* A member left (sync.c made it none); a held worker is let go. */
void kn__sync_bound_leave(struct kn__sync_rule *rule, uint32_t worker);
/* @worker's push was accepted: true if it may be released now, false
 * if it is held (pushed beyond the bound). */
bool kn__sync_bound_push(struct kn__sync_rule *rule, uint32_t worker);
/* RELEASE every held worker the bound lets go now, in ascending worker
 * id order, with @version, into @out: the number written. */
uint32_t kn__sync_bound_release(struct kn__sync_rule *rule, uint64_t version,
				struct kn__sync_action *out);

/*
 * A new version from rule->contrib[0 .. @n) (weights set by the caller,
 * before or after): the version goes up and @act is its APPLY, at the
 * optimizer's rate times @lr_scale; @share: it is one share of a round
 * (the action's @share).
 */
static inline void kn__sync_apply(struct kn__sync_rule *rule, uint32_t n,
				  float lr_scale, bool share,
				  struct kn__sync_action *act)
{
	rule->version++;
	*act = (struct kn__sync_action){
		.type = KN__SYNC_ACT_APPLY,
		.version = rule->version,
		.lr_scale = lr_scale,
		.ncontrib = n,
		.contrib = rule->contrib,
		.share = share,
	};
}

/* Write "deliver @version to @worker" (plan 0, one step) into @act. */
/*
 * ASP's and SSP's share of a round: a push applied alone is one worker's
 * part of what BSP applies as one mean, so it is weighted 1/n, and its
 * rate damped only by the rounds it missed (tau / n; with n workers
 * pushing in turn a push is n - 1 versions old with no straggler at
 * all).  Written into @c's weight; the rate factor is returned.
 */
static inline float kn__sync_share(const struct kn__sync_rule *rule,
				   uint64_t tau, struct kn__sync_contrib *c)
{
	float n = rule->nmembers ? (float)rule->nmembers : 1.0f;
	float rounds = (float)tau / n;

	c->weight = 1.0f / n;
	return rounds > 1 ? 1.0f / rounds : 1.0f;
}

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
