/* SPDX-License-Identifier: Apache-2.0 */
/*
 * coordinator_plan.c - the planner of the job's protocol (PSP's and
 * CGP's plans; none for most): the workers' joins, leaves and timings and
 * the servers' epoch barriers go to it, and the plans it makes go to
 * every server (PLAN), with a line that says what changed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator_priv.h"

#define GROUPS_TEXT 200 /* characters of a grouping in the regroup line */

static int by_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

/*
 * The groups of the CGP plan @plan (NULL: one group of every worker) as
 * "{0,1,2} {3,4}", groups in their order and ranks ascending, into @buf
 * (GROUPS_TEXT + 64 bytes at least).  Past GROUPS_TEXT characters the
 * rest is cut and the count given instead: "{0,1} ... (9 groups)".
 */
static void format_groups(const uint32_t *plan, uint32_t n, char *buf,
			  size_t cap)
{
	uint64_t *key = malloc((n ? n : 1) * sizeof(*key));
	uint32_t k = 0, ngroups = 0;
	size_t len = 0;
	bool cut = false;

	buf[0] = '\0';
	if (!key) {
		snprintf(buf, cap, "(no memory to list them)");
		return;
	}
	for (uint32_t w = 0; w < n; w++) {
		if (plan && !plan[w])
			continue; /* not in the plan */
		key[k++] = (uint64_t)(plan ? KN__SYNC_CGP_GROUP(plan[w]) : 0)
				   << 32 |
			   w;
	}
	qsort(key, k, sizeof(*key), by_u64);
	for (uint32_t i = 0; i < k; i++) {
		bool first = i == 0 || key[i] >> 32 != key[i - 1] >> 32;
		bool last = i + 1 == k || key[i + 1] >> 32 != key[i] >> 32;

		ngroups += first;
		if (cut)
			continue; /* only counting now */
		if (len >= GROUPS_TEXT) {
			if (!first)
				len += (size_t)snprintf(buf + len, cap - len,
							",...}");
			cut = true;
			continue;
		}
		len += (size_t)snprintf(buf + len, cap - len, "%s%u%s",
					first ? (i ? " {" : "{") : ",",
					(uint32_t)key[i], last ? "}" : "");
	}
	if (cut)
		snprintf(buf + len, cap - len, " ... (%u group%s)", ngroups,
			 ngroups == 1 ? "" : "s");
	else if (!k)
		snprintf(buf, cap, "(none)");
	free(key);
}

/* CGP changed the groups: one line that says from what to what. */
static void log_regroup(struct coordinator *c, const struct kn__sync_action *a)
{
	char from[GROUPS_TEXT + 64], to[GROUPS_TEXT + 64];

	format_groups(c->plans ? c->last_plan : NULL, c->cfg->workers, from,
		      sizeof(from));
	format_groups(a->plan, c->cfg->workers, to, sizeof(to));
	kn__log(&c->node,
		"cgp: epoch %llu: groups %s -> %s, predicted gain "
		"%+.1f%%%s",
		(unsigned long long)a->epoch, from, to, 100.0 * a->gain,
		a->why == KN__SYNC_REGROUP_BOUND ? " (the old groups broke the "
						   "staleness bound)"
		: a->why == KN__SYNC_REGROUP_JOIN
			? " (a worker without a group)"
			: "");
}

/*
 * --verbose: a plan sent.  PSP's is each worker's steps per round, in
 * worker order ("plan 7 sent: steps 1,2,1,1"), cut past PLAN_TEXT
 * characters; CGP's groups have their own line (log_regroup).
 */
#define PLAN_TEXT 400

static void log_plan(struct coordinator *c, const struct kn__sync_action *a)
{
	char steps[PLAN_TEXT + 48] = "";
	size_t len = 0;
	uint32_t n = c->cfg->workers, i;

	if (kn__sync_traits(c->cfg->sync)->plans != KN__SYNC_PLANS_STEPS) {
		kn__log(&c->node, "plan %llu sent",
			(unsigned long long)a->epoch);
		return;
	}
	for (i = 0; i < n && len < PLAN_TEXT; i++)
		len += (size_t)snprintf(steps + len, sizeof(steps) - len,
					"%s%u", i ? "," : "", a->plan[i]);
	if (i < n)
		snprintf(steps + len, sizeof(steps) - len, ",... (%u workers)",
			 n);
	kn__log(&c->node, "plan %llu sent: steps %s",
		(unsigned long long)a->epoch, steps);
}

/* A REGROUP's plan to every server, in parts of KN__PLAN_PART steps. */
static void send_plan(struct coordinator *c, const struct kn__sync_action *a)
{
	struct kn__msg m = { .type = KN__MSG_PLAN };
	uint32_t n = c->cfg->workers;

	m.u.plan.epoch = a->epoch;
	m.u.plan.workers = n;
	for (uint32_t first = 0; first < n; first += KN__PLAN_PART) {
		m.u.plan.first = first;
		m.u.plan.count =
			n - first < KN__PLAN_PART ? n - first : KN__PLAN_PART;
		memcpy(m.u.plan.steps, a->plan + first,
		       m.u.plan.count * sizeof(uint32_t));
		kn__crd_broadcast(c, &m);
	}
	if (c->last_plan) {
		if (a->regrouped)
			log_regroup(c, a);
		memcpy(c->last_plan, a->plan, n * sizeof(*c->last_plan));
	}
	c->plans++;
	if (c->cfg->verbose)
		log_plan(c, a);
}

/* Feed @ev to the planner and send its plans: 0, or its refusal. */
static int feed_planner(struct coordinator *c, const struct kn__sync_event *ev)
{
	int n = kn__sync_planner_event(c->planner, ev, c->actions);

	for (int i = 0; i < n; i++)
		if (c->actions[i].type == KN__SYNC_ACT_REGROUP &&
		    c->actions[i].plan)
			send_plan(c, &c->actions[i]);
	return n < 0 ? n : 0;
}

/* A worker's event for the planner: JOIN, LEAVE or TIMING. */
void kn__crd_plan_event(struct coordinator *c, uint32_t type, uint32_t w,
			double value)
{
	struct kn__sync_event ev = {
		.type = type, .worker = w, .t = kn__now(), .value = value
	};
	struct crd_worker *cw = &c->workers[w];

	if (!c->planner || (type == KN__SYNC_EV_JOIN) == cw->planned ||
	    (type == KN__SYNC_EV_TIMING && !cw->planned))
		return; /* not a change, or not a member */
	if (feed_planner(c, &ev)) {
		kn__log(&c->node, "worker %u: the planner refused %s", w,
			type == KN__SYNC_EV_TIMING ? "a timing" : "a change");
		return;
	}
	if (type != KN__SYNC_EV_TIMING)
		cw->planned = type == KN__SYNC_EV_JOIN;
}

/*
 * CGP: server @s's chunk rules wait at the end of @epoch for the next
 * plan.  Every server says so once per epoch; the planner takes each.
 */
void kn__crd_plan_barrier(struct coordinator *c, uint32_t s, uint64_t epoch)
{
	struct kn__sync_event ev = { .type = KN__SYNC_EV_BARRIER,
				     .t = kn__now(),
				     .epoch = epoch };

	if (c->planner && feed_planner(c, &ev))
		kn__log(&c->node,
			"server %u: the planner refused the barrier "
			"of epoch %llu",
			s, (unsigned long long)epoch);
}

/* The bytes of the model, which every worker pushes each round. */
static uint64_t table_bytes(const struct coordinator *c)
{
	uint64_t sum = 0;

	for (uint32_t i = 0; i < c->ntable; i++) {
		uint64_t es = kn_dtype_size(c->table[i].dtype);
		uint64_t b = c->table[i].len > UINT64_MAX / (es ? es : 1)
				     ? UINT64_MAX
				     : c->table[i].len * es;

		sum = b > UINT64_MAX - sum ? UINT64_MAX : sum + b;
	}
	return sum;
}

/* The parameters of the job's planner (the model's bytes come later). */
void kn__crd_planner_params(struct coordinator *c, struct kn__sync_params *sp)
{
	struct kn__msg job;

	/* every worker starts as a member of the planner's membership */
	kn__msg_job_init(c->cfg, c->optimizer, 0, c->restore, &job);
	kn__job_sync_params(&job, c->cfg->workers, sp);
}

/*
 * CGP's cost model needs the bytes a worker pushes a round, known once
 * worker 0's table is (no plan comes before: the warm-up has not begun).
 * The other protocols' planners do not read them.
 */
void kn__crd_plan_with_table(struct coordinator *c)
{
	uint64_t bytes = table_bytes(c);

	if (!kn__sync_traits(c->cfg->sync)->model_bytes)
		return;
	kn__sync_planner_set_bytes(c->planner, bytes);
	if (c->cfg->verbose)
		kn__log(&c->node,
			"cgp: the planner knows the model: %llu bytes",
			(unsigned long long)bytes);
}

/*
 * A recovery starts the protocol again from the restored model: the
 * servers' chunk rules are new, so the planner that feeds them plans is
 * too (the same parameters, the model's bytes known).
 */
void kn__crd_reset_planner(struct coordinator *c)
{
	struct kn__sync_planner *p;
	struct kn__sync_params sp;

	kn__crd_planner_params(c, &sp);
	if (kn__sync_planner_create(&sp, &p)) {
		kn__log(&c->node, "out of memory for a new planner: the job "
				  "ends");
		kn__crd_shutdown(c, -ENOMEM);
		return;
	}
	kn__sync_planner_destroy(c->planner);
	c->planner = p;
	c->plans = 0;
	for (uint32_t w = 0; w < c->cfg->workers; w++)
		c->workers[w].planned = true; /* the new one's membership */
	if (c->table)
		kn__crd_plan_with_table(c);
}
