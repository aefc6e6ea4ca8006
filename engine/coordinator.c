/* SPDX-License-Identifier: Apache-2.0 */
/*
 * coordinator.c - rendezvous and membership.  Every process connects to
 * the coordinator first (the one address everyone is told) and proves it
 * knows the job secret.  Servers say where they listen (HELLO); once all
 * have, everyone gets the job (JOB) and workers the servers' addresses.
 * The first worker's tensor table becomes the job's: it goes to the
 * servers, and every other worker's table must match it name for name,
 * dtype for dtype, length for length (a mismatch is that worker's error).
 * Once the servers have built their layout (READY LAYOUT) workers are
 * sent to them (READY TABLE); once every worker holds the initial model
 * (READY START from each), all start together.
 *
 * Afterwards: heartbeats.  A worker that is silent for the heartbeat
 * timeout, or whose connection drops, is removed: the servers hear it
 * (MEMBER) and their chunk rules stop waiting for it.  It may come back
 * with the same rank and is brought up to the current model.  The job
 * ends when every worker has finished (DONE) or been removed; then
 * everyone is told (SHUTDOWN).  Start-up has a deadline, and missing it
 * names who never came.
 *
 * Checkpoints: with --restore the servers say which checkpoints they
 * hold (CHECKPOINTS) and all load the newest one every server has
 * (RESTORE) before the workers come.  With --checkpoint-dir a server
 * lost after the start does not end the job: the workers are let go,
 * the other servers asked for their checkpoints (RECOVER), and once the
 * lost one is back (restarted by its supervisor) every server goes back
 * to the newest common version and the workers that come back start
 * together from it.
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "node.h"
#include "sync.h"
#include "roles.h"

/* A gap in the loop longer than this (and than a quarter of the heartbeat
 * timeout) is a pause of the coordinator's own */
#define PAUSE_MIN_S 0.5
/* steps of reading what is queued before a peer is called silent */
#define DRAIN_STEPS 16

struct crd_server {
	struct kn__chan *ch;
	struct sockaddr_storage addr;
	bool hello, layout;
	/* --restore: the versions it can load (CHECKPOINTS), newest first;
	 * @any: it owns no chunk, and every version will do */
	bool listed, any;
	uint32_t nckpt;
	uint64_t ckpt[KN__MSG_CKPT_MAX];
	double last_seen; /* its last message (a heartbeat at least) */
};

struct crd_worker {
	struct kn__chan *ch;
	bool held; /* its READY START waits for the others' (recovery) */
	struct kn__tensor_desc *table; /* as it arrives */
	uint32_t ntable;
	double last_seen;
	bool table_done, table_ok, started, done, removed;
	bool planned; /* a member of the planner's membership */
	bool own;     /* its program steps the model (TENSORS_END) */
};

struct coordinator {
	struct kn__node node;
	const struct kn__config *cfg;
	struct crd_server *servers;
	struct crd_worker *workers;
	struct kn__tensor_desc *table; /* the job's, once known */
	uint32_t ntable;
	uint32_t hellos, layouts, ready;
	bool table_sent, started, done;
	/* the job's optimizer: --optimizer, or what AUTO became at worker
	 * 0's table (until then AUTO) */
	enum kn__config_optimizer optimizer;
	/*
	 * Checkpoints: @restore, the servers start from theirs (--restore,
	 * or a recovery), @restoring until the version is chosen.  A server
	 * lost after the start with --checkpoint-dir given is waited for
	 * (@recovering since @recover_t0); once it is back every server goes
	 * back to the chosen version and the workers that come back start
	 * together again (@holding: their READY START held until @expected
	 * have sent one).
	 */
	bool restore, restoring, recovering, holding;
	double recover_t0, hold_t0;
	uint32_t expected, held;
	uint32_t let_go; /* workers let go at the loss: expected back */
	double t0;
	/* the loop's last look at the clock: a longer gap than PAUSE_MIN_S
	 * is a pause of our own (SIGSTOP, a VM stopped), not the peers' */
	double last_tick;
	int status;
	/* the planner of the job's protocol (PSP's, CGP's plans; none for
	 * most) */
	struct kn__sync_planner *planner;
	struct kn__sync_action *actions;
	uint64_t plans; /* plans sent */
	/* CGP: the last plan sent, [workers], for the regroup line */
	uint32_t *last_plan;
};

static struct coordinator *crd_of(struct kn__node *n)
{
	return n->role;
}

/* The JOB message for worker @rank (servers: 0). */
static void job_msg(const struct coordinator *c, struct kn__msg *out,
		    uint32_t rank)
{
	struct kn__msg m = { .type = KN__MSG_JOB };

	m.u.job.workers = c->cfg->workers;
	m.u.job.servers = c->cfg->servers;
	m.u.job.protocol = c->cfg->sync;
	m.u.job.proto = c->cfg->proto;
	m.u.job.optimizer = c->optimizer;
	m.u.job.chunk_bytes = c->cfg->chunk_bytes;
	m.u.job.fuse_bytes = c->cfg->fuse_bytes;
	m.u.job.push_window = c->cfg->push_window;
	m.u.job.lr = c->cfg->lr;
	m.u.job.momentum = c->cfg->momentum;
	m.u.job.rank = rank;
	m.u.job.restore = c->restore;
	*out = m;
}

static void send_job(struct coordinator *c, struct kn__chan *ch, uint32_t rank)
{
	struct kn__msg m;

	job_msg(c, &m, rank);
	/* a worker settles --optimizer auto from its own program, even
	 * after worker 0's table settled the job's: a different answer is
	 * refused at its table, with the reason */
	if (ch->peer_role == KN__ROLE_WORKER)
		m.u.job.optimizer = c->cfg->optimizer;
	kn__chan_send(ch, &m);
}

/* A worker learns the job and where the servers are. */
static void welcome_worker(struct coordinator *c, uint32_t w)
{
	struct kn__chan *ch = c->workers[w].ch;
	struct kn__msg m = { .type = KN__MSG_HELLO };

	send_job(c, ch, w);
	for (uint32_t s = 0; s < c->cfg->servers; s++) {
		m.u.hello.role = KN__ROLE_SERVER;
		m.u.hello.rank = s;
		m.u.hello.addr = c->servers[s].addr;
		kn__chan_send(ch, &m);
	}
}

static void send_ready(struct kn__chan *ch, uint32_t what)
{
	struct kn__msg m = { .type = KN__MSG_READY };

	m.u.ready.what = what;
	kn__chan_send(ch, &m);
}

/* Every server has its layout and, in a restore, its model: workers
 * may go to them. */
static bool servers_ready(const struct coordinator *c)
{
	return c->layouts == c->cfg->servers && !c->restoring;
}

/* Send every worker whose table is checked to the servers. */
static void workers_to_servers(struct coordinator *c)
{
	for (uint32_t w = 0; w < c->cfg->workers; w++)
		if (c->workers[w].ch && c->workers[w].table_ok)
			send_ready(c->workers[w].ch, KN__READY_TABLE);
}

static void send_table(struct coordinator *c, struct kn__chan *ch)
{
	struct kn__msg m = { .type = KN__MSG_TENSOR };

	/* a server learns what --optimizer auto became before the table
	 * it builds its chunks from */
	if (c->cfg->optimizer == KN__CONFIG_AUTO)
		send_job(c, ch, ch->peer_rank);

	for (uint32_t i = 0; i < c->ntable; i++) {
		m.u.tensor.index = i;
		m.u.tensor.dtype = c->table[i].dtype;
		m.u.tensor.len = c->table[i].len;
		memcpy(m.u.tensor.key, c->table[i].key, KN__KEY_MAX);
		kn__chan_send(ch, &m);
	}
	m = (struct kn__msg){ .type = KN__MSG_TENSORS_END };
	m.u.tensors_end.count = c->ntable;
	kn__chan_send(ch, &m);
}

static void broadcast_servers(struct coordinator *c, const struct kn__msg *m)
{
	for (uint32_t s = 0; s < c->cfg->servers; s++)
		if (c->servers[s].ch)
			kn__chan_send(c->servers[s].ch, m);
}

static void shutdown_job(struct coordinator *c, int status)
{
	struct kn__msg m = { .type = KN__MSG_SHUTDOWN };

	c->recovering = false;
	broadcast_servers(c, &m);
	for (uint32_t w = 0; w < c->cfg->workers; w++)
		if (c->workers[w].ch)
			kn__chan_send(c->workers[w].ch, &m);
	/* the first reason stays: the workers that leave after a lost
	 * server end the job again, with 0 */
	if (!c->status)
		c->status = status;
	c->done = true;
}

/* The job ends once every worker has finished or been removed. */
static void check_end(struct coordinator *c)
{
	if (!c->started || c->recovering)
		return; /* the workers gone in a recovery come back */
	for (uint32_t w = 0; w < c->cfg->workers; w++)
		if (!c->workers[w].done && !c->workers[w].removed)
			return;
	if (c->cfg->verbose)
		kn__log(&c->node, "every worker is done: the job ends");
	shutdown_job(c, 0);
}

static void plan_event(struct coordinator *c, uint32_t type, uint32_t w,
		       double value);

/* After a recovery: the workers back hold the restored model; start
 * them together, as at the job's start. */
static void release_held(struct coordinator *c)
{
	c->holding = false;
	/* the servers are judged again from now (server_silent) */
	for (uint32_t k = 0; k < c->cfg->servers; k++)
		c->servers[k].last_seen = kn__now();
	kn__log(&c->node, "%u worker%s back: the job goes on", c->held,
		c->held == 1 ? "" : "s");
	for (uint32_t w = 0; w < c->cfg->workers; w++) {
		struct crd_worker *cw = &c->workers[w];

		if (!cw->held)
			continue;
		cw->held = false;
		if (cw->ch) {
			send_ready(cw->ch, KN__READY_START);
			plan_event(c, KN__SYNC_EV_JOIN, w, 0);
		}
	}
	c->held = c->expected = 0;
}

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
		broadcast_servers(c, &m);
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
static void plan_event(struct coordinator *c, uint32_t type, uint32_t w,
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
static void plan_barrier(struct coordinator *c, uint32_t s, uint64_t epoch)
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

static void remove_worker(struct coordinator *c, uint32_t w, const char *why)
{
	struct crd_worker *cw = &c->workers[w];
	struct kn__msg m = { .type = KN__MSG_MEMBER };

	if (cw->removed || cw->done)
		return;
	kn__log(&c->node, "worker %u %s: removed from the job", w, why);
	cw->removed = true;
	plan_event(c, KN__SYNC_EV_LEAVE, w, 0);
	m.u.member.rank = w;
	m.u.member.joined = 0;
	broadcast_servers(c, &m);
	if (cw->ch) {
		struct kn__chan *ch = cw->ch;

		cw->ch = NULL;
		kn__chan_close(ch);
	}
	check_end(c);
}

/* Compare worker @w's table with the job's; false after an ERROR. */
static bool table_matches(struct coordinator *c, uint32_t w)
{
	struct crd_worker *cw = &c->workers[w];
	static const char *const dt[] = { "fp32", "fp16", "bf16" };

	if (c->cfg->optimizer == KN__CONFIG_AUTO &&
	    cw->own != (c->optimizer == KN__CONFIG_SUM)) {
		kn__chan_send_error(cw->ch, -EINVAL,
				    "worker %u %s its own optimizer and worker "
				    "0 %s (--optimizer auto): start every "
				    "worker with the same program, or name "
				    "the job's --optimizer",
				    w, cw->own ? "runs" : "has not",
				    cw->own ? "has not" : "runs");
		return false;
	}
	for (uint32_t i = 0; i < c->ntable || i < cw->ntable; i++) {
		const struct kn__tensor_desc *a =
			i < c->ntable ? &c->table[i] : NULL;
		const struct kn__tensor_desc *b =
			i < cw->ntable ? &cw->table[i] : NULL;

		if (!a || !b || strcmp(a->key, b->key)) {
			kn__chan_send_error(cw->ch, -EINVAL,
					    "worker %u registered tensor '%s' "
					    "where the job has '%s' (every "
					    "worker must register the same "
					    "tensors)",
					    w, b ? b->key : "(none)",
					    a ? a->key : "(none)");
			return false;
		}
		if (a->dtype != b->dtype || a->len != b->len) {
			kn__chan_send_error(
				cw->ch, -EINVAL,
				"tensor '%s': worker %u registered %llu "
				"elements of %s, the job has %llu of %s",
				a->key, w, (unsigned long long)b->len,
				b->dtype < 3 ? dt[b->dtype] : "?",
				(unsigned long long)a->len,
				a->dtype < 3 ? dt[a->dtype] : "?");
			return false;
		}
	}
	return true;
}

/*
 * kanel launch hands its coordinator the write end of a pipe
 * (KANEL_START_FD): a byte there says the job started, so that the
 * launcher ends the job at once when a process fails before, and lets a
 * worker that fails after go, as the job does.
 */
static void tell_launcher(void)
{
	const char *v = getenv("KANEL_START_FD");
	char *end;
	long fd;

	if (!v || !*v)
		return;
	errno = 0;
	fd = strtol(v, &end, 10);
	if (errno || *end || fd < 0 || fd > INT_MAX)
		return;
	(void)!write((int)fd, "s", 1);
	close((int)fd);
	unsetenv("KANEL_START_FD");
}

/* Worker @w's complete table against the job's: go on, or an error. */
static void check_table(struct coordinator *c, uint32_t w)
{
	struct crd_worker *cw = &c->workers[w];

	if (!table_matches(c, w)) {
		struct kn__chan *ch = cw->ch;

		cw->ch = NULL;
		kn__chan_close(ch);
		if (c->started)
			return; /* a rejoin: the job goes on without it */
		/* it cannot start: the others hear why now, not at the
		 * start-up deadline */
		for (uint32_t i = 0; i < c->cfg->workers; i++)
			if (c->workers[i].ch)
				kn__chan_send_error(
					c->workers[i].ch, -EINVAL,
					"worker %u registered other tensors "
					"than the job's: the job cannot start",
					w);
		shutdown_job(c, -EINVAL);
		return;
	}
	cw->table_ok = true;
	if (servers_ready(c))
		send_ready(cw->ch, KN__READY_TABLE);
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
static void planner_params(struct coordinator *c, struct kn__sync_params *sp)
{
	struct kn__msg job;

	/* every worker starts as a member of the planner's membership */
	job_msg(c, &job, 0);
	kn__job_sync_params(&job, c->cfg->workers, sp);
}

/*
 * CGP's cost model needs the bytes a worker pushes a round, known once
 * worker 0's table is (no plan comes before: the warm-up has not begun).
 * The other protocols' planners do not read them.
 */
static void plan_with_table(struct coordinator *c)
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
 * Worker 0's table is the job's (its values are the initial model);
 * the others' wait for it and must match it.
 */
static void on_table_end(struct coordinator *c, uint32_t w, uint32_t count)
{
	struct crd_worker *cw = &c->workers[w];

	if (count != cw->ntable || cw->table_done) {
		kn__chan_send_error(cw->ch, -EPROTO, "a torn tensor table");
		kn__chan_close(cw->ch);
		return;
	}
	cw->table_done = true;
	if (c->table) {
		check_table(c, w);
		return;
	}
	if (w != 0)
		return;
	c->table = cw->table;
	c->ntable = cw->ntable;
	cw->table = NULL;
	cw->ntable = 0;
	if (c->cfg->optimizer == KN__CONFIG_AUTO) {
		c->optimizer = cw->own ? KN__CONFIG_SUM : KN__CONFIG_SGD;
		if (c->cfg->verbose)
			kn__log(&c->node, "--optimizer auto: %s",
				cw->own ? "the workers' own (sum)"
					: "the servers' sgd");
	}
	plan_with_table(c);
	for (uint32_t s = 0; s < c->cfg->servers; s++)
		if (c->servers[s].ch && c->servers[s].hello)
			send_table(c, c->servers[s].ch);
	c->table_sent = true;
	cw->table_ok = true;
	if (servers_ready(c))
		send_ready(cw->ch, KN__READY_TABLE);
	for (uint32_t k = 1; k < c->cfg->workers; k++)
		if (c->workers[k].ch && c->workers[k].table_done &&
		    !c->workers[k].table_ok)
			check_table(c, k);
}

static void on_worker_msg(struct coordinator *c, uint32_t w,
			  const struct kn__msg *m)
{
	struct crd_worker *cw = &c->workers[w];

	cw->last_seen = kn__now();
	switch (m->type) {
	case KN__MSG_HEARTBEAT:
		return;
	case KN__MSG_TENSOR: {
		struct kn__tensor_desc *t;

		if (m->u.tensor.index != cw->ntable || cw->table_ok ||
		    cw->ntable >= KN__CHUNK_MAX)
			break;
		t = realloc(cw->table, (cw->ntable + 1) * sizeof(*t));
		if (!t)
			break;
		cw->table = t;
		memcpy(t[cw->ntable].key, m->u.tensor.key, KN__KEY_MAX);
		t[cw->ntable].dtype = m->u.tensor.dtype;
		t[cw->ntable].len = m->u.tensor.len;
		cw->ntable++;
		return;
	}
	case KN__MSG_TENSORS_END:
		cw->own = m->u.tensors_end.flags & KN__TABLE_OWN_OPTIMIZER;
		on_table_end(c, w, m->u.tensors_end.count);
		return;
	case KN__MSG_READY:
		if (m->u.ready.what != KN__READY_START || !cw->table_ok)
			break;
		if (c->started && c->holding) {
			cw->held = true; /* after a recovery: all together */
			if (++c->held >= c->expected)
				release_held(c);
			return;
		}
		if (c->started) {
			send_ready(cw->ch, KN__READY_START); /* a rejoin */
			plan_event(c, KN__SYNC_EV_JOIN, w, 0);
			return;
		}
		if (++c->ready < c->cfg->workers)
			return;
		c->started = true;
		/* the servers are judged from now (server_silent) */
		for (uint32_t k = 0; k < c->cfg->servers; k++)
			c->servers[k].last_seen = kn__now();
		tell_launcher();
		if (c->cfg->verbose)
			kn__log(&c->node,
				"all %u workers hold the model: "
				"start",
				c->cfg->workers);
		for (uint32_t i = 0; i < c->cfg->workers; i++) {
			if (!c->workers[i].ch)
				continue;
			send_ready(c->workers[i].ch, KN__READY_START);
			/* one that left before the start and came back is
			 * a member of the servers' rules again */
			plan_event(c, KN__SYNC_EV_JOIN, i, 0);
		}
		return;
	case KN__MSG_DONE:
		plan_event(c, KN__SYNC_EV_LEAVE, w, 0);
		cw->done = true;
		check_end(c);
		return;
	case KN__MSG_TIMING:
		if (!c->started)
			break;
		plan_event(c, KN__SYNC_EV_TIMING, w, m->u.timing.seconds);
		return;
	default:
		break;
	}
	kn__chan_send_error(cw->ch, -EPROTO, "worker %u: %s out of place", w,
			    kn__msg_name(m->type));
	kn__chan_close(cw->ch);
}

/* Whether server @s offered checkpoint @version. */
static bool offered(const struct crd_server *cs, uint64_t version)
{
	if (cs->any)
		return true;
	for (uint32_t i = 0; i < cs->nckpt; i++)
		if (cs->ckpt[i] == version)
			return true;
	return false;
}

/*
 * --restore, once every server has said which checkpoints it can load:
 * the newest version all of them offer is the one the job starts from
 * (under BSP every server's file of one version holds the same round,
 * so together they are one model).  0 once RESTORE is sent, or -ENOENT
 * with the job ended and everyone told why.
 */
static int restore(struct coordinator *c)
{
	struct kn__msg m = { .type = KN__MSG_RESTORE };
	const struct crd_server *first = NULL;

	/* the versions of a server that owns chunks are the candidates */
	for (uint32_t s = 0; s < c->cfg->servers && !first; s++)
		if (!c->servers[s].any)
			first = &c->servers[s];
	for (uint32_t i = 0; first && i < first->nckpt; i++) {
		uint32_t s = 0;

		while (s < c->cfg->servers &&
		       offered(&c->servers[s], first->ckpt[i]))
			s++;
		if (s < c->cfg->servers)
			continue;
		m.u.restore.version = first->ckpt[i];
		kn__log(&c->node,
			"restoring the job from its checkpoints "
			"of version %llu",
			(unsigned long long)m.u.restore.version);
		broadcast_servers(c, &m);
		c->restoring = false;
		return 0;
	}
	kn__log(&c->node,
		"--restore: no checkpoint version that all %u "
		"servers hold intact: the job cannot start",
		c->cfg->servers);
	for (uint32_t w = 0; w < c->cfg->workers; w++)
		if (c->workers[w].ch)
			kn__chan_send_error(c->workers[w].ch, -ENOENT,
					    "no checkpoint to restore the job "
					    "from (the coordinator says why)");
	for (uint32_t s = 0; s < c->cfg->servers; s++)
		if (c->servers[s].ch)
			kn__chan_send_error(c->servers[s].ch, -ENOENT,
					    "no checkpoint version that every "
					    "server holds");
	shutdown_job(c, -ENOENT);
	return -ENOENT;
}

/*
 * Once every server has its layout and has said which checkpoints it
 * holds: the restore, then the workers go to the servers.  After a
 * recovery, the workers back are started together once they all hold
 * the restored model (release_held).
 */
static void maybe_restore(struct coordinator *c)
{
	if (c->layouts < c->cfg->servers)
		return;
	for (uint32_t s = 0; s < c->cfg->servers; s++)
		if (!c->servers[s].listed)
			return;
	if (restore(c))
		return;
	if (c->recovering) {
		c->recovering = false;
		c->holding = true;
		c->hold_t0 = kn__now();
		/* all those let go, unless they fail to come back within
		 * a heartbeat timeout (tick) */
		c->held = 0;
		c->expected = c->let_go;
		if (!c->expected)
			c->holding = false;
	}
	workers_to_servers(c);
}

/*
 * A recovery starts the protocol again from the restored model: the
 * servers' chunk rules are new, so the planner that feeds them plans is
 * too (the same parameters, the model's bytes known).
 */
static void reset_planner(struct coordinator *c)
{
	struct kn__sync_planner *p;
	struct kn__sync_params sp;

	planner_params(c, &sp);
	if (kn__sync_planner_create(&sp, &p)) {
		kn__log(&c->node, "out of memory for a new planner: the job "
				  "ends");
		shutdown_job(c, -ENOMEM);
		return;
	}
	kn__sync_planner_destroy(c->planner);
	c->planner = p;
	c->plans = 0;
	for (uint32_t w = 0; w < c->cfg->workers; w++)
		c->workers[w].planned = true; /* the new one's membership */
	if (c->table)
		plan_with_table(c);
}

/*
 * Server @r is gone.  Before the start, or without checkpoints, that ends
 * the job.  With --checkpoint-dir the job waits for it to come back (its
 * supervisor restarts it): every worker is let go (each comes back, as
 * after a removal, and is held), the other servers are asked which
 * checkpoints they hold (RECOVER), and once the lost one is back and has
 * offered its own, every server goes back to the newest version all of
 * them hold.
 */
static void lose_server(struct coordinator *c, uint32_t r)
{
	struct crd_server *cs = &c->servers[r];
	struct kn__msg m = { .type = KN__MSG_RECOVER };
	struct kn__msg e = { .type = KN__MSG_ERROR };
	struct kn__chan *ch;

	cs->ch = NULL;
	if (cs->hello)
		c->hellos--;
	if (cs->layout)
		c->layouts--;
	cs->hello = cs->layout = cs->listed = false;
	if (c->done)
		return;
	if (!c->started || !c->cfg->checkpoint_dir[0] ||
	    kn__job_sums((uint32_t)c->cfg->sync, (uint32_t)c->optimizer)) {
		/* (bsp --optimizer sum: the servers keep no model to go back
		 * to) */
		kn__log(&c->node, "server %u went away: the job cannot go on%s",
			r,
			c->started && !c->cfg->checkpoint_dir[0]
				? " (with --checkpoint-dir it would wait for "
				  "the server to come back)"
				: "");
		shutdown_job(c, -ECONNRESET);
		return;
	}
	if (c->recovering)
		return; /* another one: it offers its checkpoints when back */
	kn__log(&c->node,
		"server %u went away: the job waits for it to come "
		"back, then goes on from the newest checkpoint",
		r);
	e.u.error.code = -ECONNRESET;
	snprintf(e.u.error.text, sizeof(e.u.error.text),
		 "server %u went away: come back for the model of the last "
		 "checkpoint",
		 r);
	c->recovering = c->restore = c->restoring = true;
	c->holding = false;
	c->let_go = 0;
	c->recover_t0 = kn__now();
	for (uint32_t s = 0; s < c->cfg->servers; s++) {
		c->servers[s].listed = false;
		if (c->servers[s].ch && c->servers[s].layout)
			kn__chan_send(c->servers[s].ch, &m);
	}
	reset_planner(c);
	for (uint32_t w = 0; w < c->cfg->workers; w++) {
		struct crd_worker *cw = &c->workers[w];

		/* every worker is out until it is back */
		plan_event(c, KN__SYNC_EV_LEAVE, w, 0);
		if (!cw->ch || cw->done)
			continue;
		ch = cw->ch;
		c->let_go++;
		cw->ch = NULL; /* closed by us: no removal of its own */
		cw->removed = true;
		cw->held = false;
		kn__chan_send(ch, &e); /* the program's kn_last_message */
		kn__chan_close(ch);
	}
}

static void on_server_msg(struct coordinator *c, uint32_t s,
			  const struct kn__msg *m)
{
	struct crd_server *cs = &c->servers[s];

	cs->last_seen = kn__now();
	if (m->type == KN__MSG_HEARTBEAT)
		return;
	if (m->type == KN__MSG_HELLO && !cs->hello &&
	    m->u.hello.role == KN__ROLE_SERVER && m->u.hello.rank == s) {
		cs->hello = true;
		cs->addr = m->u.hello.addr;
		send_job(c, cs->ch, s);
		if (c->table_sent)
			send_table(c, cs->ch);
		if (++c->hellos < c->cfg->servers)
			return;
		for (uint32_t w = 0; w < c->cfg->workers; w++)
			if (c->workers[w].ch)
				welcome_worker(c, w);
		return;
	}
	if (m->type == KN__MSG_CHECKPOINTS && c->restoring && !cs->listed) {
		cs->listed = true;
		cs->any = m->u.checkpoints.any;
		cs->nckpt = m->u.checkpoints.count;
		memcpy(cs->ckpt, m->u.checkpoints.versions,
		       cs->nckpt * sizeof(*cs->ckpt));
		maybe_restore(c);
		return;
	}
	if (m->type == KN__MSG_READY && m->u.ready.what == KN__READY_LAYOUT &&
	    !cs->layout && (cs->listed || !c->restore)) {
		cs->layout = true;
		if (++c->layouts < c->cfg->servers)
			return;
		if (c->restoring)
			maybe_restore(c);
		else
			workers_to_servers(c);
		return;
	}
	if (m->type == KN__MSG_BARRIER && c->started) {
		plan_barrier(c, s, m->u.barrier.epoch);
		return;
	}
	if (m->type == KN__MSG_ERROR) {
		kn__log(&c->node, "server %u: %s", s, m->u.error.text);
		shutdown_job(c, m->u.error.code);
		return;
	}
	kn__chan_send_error(cs->ch, -EPROTO, "server %u: %s out of place", s,
			    kn__msg_name(m->type));
	kn__chan_close(cs->ch);
}

static void on_message(struct kn__node *n, struct kn__chan *ch,
		       const struct kn__msg *m)
{
	struct coordinator *c = crd_of(n);

	if (ch->peer_role == KN__ROLE_SERVER)
		on_server_msg(c, ch->peer_rank, m);
	else
		on_worker_msg(c, ch->peer_rank, m);
}

static void on_open(struct kn__node *n, struct kn__chan *ch)
{
	struct coordinator *c = crd_of(n);
	uint32_t r = ch->peer_rank;

	if (ch->peer_role == KN__ROLE_SERVER && r < c->cfg->servers &&
	    !c->servers[r].ch) {
		c->servers[r].ch = ch;
		c->servers[r].last_seen = kn__now();
		return;
	}
	if (ch->peer_role == KN__ROLE_WORKER && r < c->cfg->workers &&
	    !c->workers[r].ch && !c->workers[r].done) {
		struct crd_worker *cw = &c->workers[r];

		if (cw->removed)
			kn__log(n, "worker %u is back", r);
		bool planned = cw->planned; /* the planner's, kept */

		if (cw->held) /* held, then reconnected: counted again */
			c->held--;

		free(cw->table);
		*cw = (struct crd_worker){ .ch = ch,
					   .last_seen = kn__now(),
					   .planned = planned };
		if (c->hellos == c->cfg->servers)
			welcome_worker(c, r);
		return;
	}
	if ((ch->peer_role == KN__ROLE_SERVER && r < c->cfg->servers) ||
	    (ch->peer_role == KN__ROLE_WORKER && r < c->cfg->workers &&
	     !c->workers[r].done)) {
		/*
		 * A rank whose connection is still open here.  Whoever holds
		 * the secret must not take over a live member's place; but a
		 * process restarted at once (kanel launch, kanel train) can
		 * come back before its old connection's reset is seen.
		 * -EEXIST tells it so: it connects again in a moment, until
		 * its start-up deadline.
		 */
		kn__chan_send_error(ch, -EEXIST,
				    "%s: connected already (an old "
				    "connection of this rank not yet "
				    "closed?)",
				    ch->name);
		kn__chan_close(ch);
		return;
	}
	kn__chan_send_error(ch, -EPERM,
			    "%s: not in this job of %u servers and %u "
			    "workers",
			    ch->name, c->cfg->servers, c->cfg->workers);
	kn__chan_close(ch);
}

static void on_closed(struct kn__node *n, struct kn__chan *ch, int status)
{
	struct coordinator *c = crd_of(n);
	uint32_t r = ch->peer_rank;

	(void)status;
	if (ch->peer_role == KN__ROLE_SERVER && r < c->cfg->servers &&
	    c->servers[r].ch == ch) {
		lose_server(c, r);
		return;
	}
	if (ch->peer_role == KN__ROLE_WORKER && r < c->cfg->workers &&
	    c->workers[r].ch == ch) {
		struct crd_worker *cw = &c->workers[r];

		cw->ch = NULL;
		if (c->holding) {
			/* one fewer to wait for */
			c->held -= cw->held;
			cw->held = false;
			if (c->expected)
				c->expected--;
			if (c->held >= c->expected)
				release_held(c);
		}
		if (!cw->done)
			remove_worker(c, r, "lost its connection");
	}
}

static const struct kn__node_ops coordinator_ops = {
	.open = on_open,
	.message = on_message,
	.closed = on_closed,
};

/* Who has not arrived, for the start-up deadline's message. */
static void log_missing(struct coordinator *c)
{
	char buf[512];
	size_t len = 0;

	for (uint32_t s = 0; s < c->cfg->servers && len < sizeof(buf); s++)
		if (!c->servers[s].hello || !c->servers[s].layout)
			len += (size_t)snprintf(
				buf + len, sizeof(buf) - len, " server %u%s", s,
				c->servers[s].ch ? " (connected)" : "");
	for (uint32_t w = 0; w < c->cfg->workers && len < sizeof(buf); w++)
		if (!c->workers[w].ch)
			len += (size_t)snprintf(buf + len, sizeof(buf) - len,
						" worker %u", w);
	kn__log(&c->node, "start-up timed out after %.0f s; never arrived:%s",
		c->cfg->startup_timeout_ms / 1000.0,
		len ? buf : " (all connected, start-up did not finish)");
}

/*
 * A server beats every quarter of the heartbeat timeout from its progress
 * loop, which also applies updates and writes checkpoints: it is given
 * three timeouts before it is taken for hung, so that a long write is
 * not.
 */
static double server_silence_s(const struct coordinator *c)
{
	return 3 * (c->cfg->heartbeat_timeout_ms / 1000.0);
}

/*
 * Servers are judged once the job runs and no checkpoint is being
 * loaded (a load blocks a server's loop; start-up and recovery have
 * their own deadline).
 */
static bool server_silent(const struct coordinator *c, uint32_t s, double t)
{
	const struct crd_server *cs = &c->servers[s];

	return c->started && !c->restoring && !c->recovering && !c->holding &&
	       cs->ch && cs->hello && t - cs->last_seen > server_silence_s(c);
}

/*
 * A server that sent nothing for server_silence_s (stopped, hung, cut
 * off: its connection is up and says nothing) is named, and the workers
 * are told why, before it is treated as lost: the job ends, or with
 * checkpoints waits for it to be started again.
 */
static void hung_server(struct coordinator *c, uint32_t s, double t)
{
	struct crd_server *cs = &c->servers[s];
	struct kn__msg e = { .type = KN__MSG_ERROR };
	struct kn__chan *ch = cs->ch;

	snprintf(e.u.error.text, sizeof(e.u.error.text),
		 "server %u sent nothing for %.1f s: treating it as hung", s,
		 t - cs->last_seen);
	kn__log(&c->node, "%s", e.u.error.text);
	e.u.error.code = -ETIMEDOUT;
	if (!c->cfg->checkpoint_dir[0]) {
		/* the job ends: every worker hears why first */
		for (uint32_t w = 0; w < c->cfg->workers; w++)
			if (c->workers[w].ch && !c->workers[w].done)
				kn__chan_send(c->workers[w].ch, &e);
		if (!c->status)
			c->status = -ETIMEDOUT;
	}
	kn__chan_close(ch); /* lose_server, through on_closed */
}

/* Whether any worker or server looks silent at @t: the sweep's test. */
static bool any_silent(const struct coordinator *c, double t)
{
	for (uint32_t k = 0; k < c->cfg->servers; k++)
		if (server_silent(c, k, t))
			return true;
	for (uint32_t w = 0; w < c->cfg->workers; w++) {
		const struct crd_worker *cw = &c->workers[w];

		if (cw->ch && !cw->done && cw->table_ok &&
		    t - cw->last_seen > c->cfg->heartbeat_timeout_ms / 1000.0)
			return true;
	}
	return false;
}

/*
 * Liveness is judged by what arrived, not by when we last looked.  A gap
 * in our own loop longer than a quarter of the heartbeat timeout (the
 * loop wakes every 100 ms) is a pause of ours: the peers' heartbeats of
 * that time wait in our sockets, and their deadlines start again from
 * now.  Before anyone is called silent, what is queued is read, so that
 * a late look does not count as a late heartbeat.
 */
static void judge_after_pause(struct coordinator *c, double t)
{
	double gap = c->last_tick ? t - c->last_tick : 0;

	c->last_tick = t;
	if (gap > PAUSE_MIN_S && gap > c->cfg->heartbeat_timeout_ms / 4000.0) {
		kn__log(&c->node,
			"this process did not run for %.1f s (stopped or "
			"descheduled): every peer's heartbeat deadline "
			"starts again from now",
			gap);
		for (uint32_t w = 0; w < c->cfg->workers; w++)
			if (c->workers[w].last_seen < t)
				c->workers[w].last_seen = t;
		for (uint32_t k = 0; k < c->cfg->servers; k++)
			if (c->servers[k].last_seen < t)
				c->servers[k].last_seen = t;
		/* nor are the deadlines of start-up and recovery */
		c->t0 += gap;
		c->recover_t0 += gap;
		c->hold_t0 += gap;
	}
	for (int i = 0; i < DRAIN_STEPS && !c->done && any_silent(c, t); i++)
		if (kn__node_step(&c->node, 0, -1) <= 0)
			break;
}

static void tick(struct coordinator *c)
{
	double t = kn__now();

	judge_after_pause(c, t);
	if (c->done)
		return;

	if (!c->started && t - c->t0 > c->cfg->startup_timeout_ms / 1000.0) {
		log_missing(c);
		shutdown_job(c, -ETIMEDOUT);
		return;
	}
	if (c->recovering &&
	    t - c->recover_t0 > c->cfg->startup_timeout_ms / 1000.0) {
		kn__log(&c->node,
			"the servers lost were not back within the "
			"start-up timeout (%.0f s): the job ends",
			c->cfg->startup_timeout_ms / 1000.0);
		log_missing(c);
		shutdown_job(c, -ETIMEDOUT);
		return;
	}
	/* a worker that does not come back is not waited for long */
	if (c->holding &&
	    t - c->hold_t0 > c->cfg->heartbeat_timeout_ms / 1000.0)
		release_held(c);
	for (uint32_t k = 0; k < c->cfg->servers && !c->done; k++)
		if (server_silent(c, k, t))
			hung_server(c, k, t);
	for (uint32_t w = 0; w < c->cfg->workers && !c->done; w++) {
		struct crd_worker *cw = &c->workers[w];

		if (cw->ch && !cw->done && cw->table_ok &&
		    t - cw->last_seen > c->cfg->heartbeat_timeout_ms / 1000.0)
			remove_worker(c, w, "sent no heartbeat in time");
	}
}

int kn__coordinator_run(const struct kn__config *cfg, const uint8_t *secret,
			size_t secret_len)
{
	struct coordinator c = { .cfg = cfg,
				 .optimizer = cfg->optimizer,
				 .t0 = kn__now(),
				 .restore = cfg->restore,
				 .restoring = cfg->restore };
	struct sockaddr_storage addr;
	socklen_t len;
	struct kn__sync_params sp;
	int ret;

	c.servers = calloc(cfg->servers, sizeof(*c.servers));
	c.workers = calloc(cfg->workers, sizeof(*c.workers));
	if (!c.servers || !c.workers) {
		free(c.servers);
		free(c.workers);
		return -ENOMEM;
	}
	ret = kn__node_init(&c.node, kn__config_transport_name(cfg->transport),
			    KN__ROLE_COORDINATOR, 0, secret, secret_len,
			    &coordinator_ops, &c);
	if (ret)
		goto out;
	c.node.verbose = cfg->verbose;
	/* the model's bytes come with its table (plan_with_table) */
	planner_params(&c, &sp);
	ret = kn__sync_planner_create(&sp, &c.planner);
	if (!ret) {
		c.actions =
			calloc(kn__sync_max_actions(&sp), sizeof(*c.actions));
		ret = c.actions ? 0 : -ENOMEM;
	}
	if (!ret &&
	    kn__sync_traits(cfg->sync)->plans == KN__SYNC_PLANS_GROUPS) {
		c.last_plan = calloc(cfg->workers, sizeof(*c.last_plan));
		ret = c.last_plan ? 0 : -ENOMEM;
	}
	if (ret) {
		kn__log(&c.node, "cannot make the planner: %s", strerror(-ret));
		goto out;
	}
	for (uint32_t w = 0; w < cfg->workers; w++)
		c.workers[w].planned = true;
	ret = kn__config_resolve(&cfg->coordinator, &addr, &len);
	if (ret) {
		kn__log(&c.node, "cannot listen on %s:%u: %s",
			cfg->coordinator.host, cfg->coordinator.port,
			kn__config_resolve_strerror(&cfg->coordinator, ret));
		goto out;
	}
	ret = kn__node_listen(&c.node, (struct sockaddr *)&addr, len);
	if (ret) {
		kn__log(&c.node, "cannot listen on %s:%u: %s",
			cfg->coordinator.host, cfg->coordinator.port,
			strerror(-ret));
		goto out;
	}
	if (cfg->verbose)
		kn__log(&c.node,
			"listening on %s:%u for %u servers and %u "
			"workers",
			cfg->coordinator.host, cfg->coordinator.port,
			cfg->servers, cfg->workers);
	while (!c.done) {
		ret = kn__node_step(&c.node, 100, -1);
		if (ret < 0) {
			c.status = ret;
			break;
		}
		tick(&c);
	}
	/* let the SHUTDOWNs leave before the connections close */
	for (double end = kn__now() + 0.5; kn__now() < end;)
		if (kn__node_step(&c.node, 50, -1) <= 0)
			break;
	ret = c.status;
out:
	kn__node_fini(&c.node);
	for (uint32_t w = 0; w < cfg->workers; w++)
		free(c.workers[w].table);
	free(c.table);
	free(c.servers);
	free(c.workers);
	free(c.actions);
	free(c.last_plan);
	kn__sync_planner_destroy(c.planner);
	return ret;
}
