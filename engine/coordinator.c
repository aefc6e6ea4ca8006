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
 * Checkpoints: with --restore every server loads the newest version all
 * of them hold before the workers come, and with --checkpoint-dir a
 * server lost after the start is waited for (coordinator_recover.c).
 * This file holds the messages, start-up and the loop; the others are
 * listed in coordinator_priv.h.
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coordinator_priv.h"

static struct coordinator *crd_of(struct kn__node *n)
{
	return n->role;
}

/* Every server has its layout and, in a restore, its model: workers
 * may go to them. */
static bool servers_ready(const struct coordinator *c)
{
	return c->layouts == c->cfg->servers && !c->restoring;
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
		kn__crd_shutdown(c, -EINVAL);
		return;
	}
	cw->table_ok = true;
	if (servers_ready(c))
		kn__crd_send_ready(cw->ch, KN__READY_TABLE);
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
	kn__crd_plan_with_table(c);
	for (uint32_t s = 0; s < c->cfg->servers; s++)
		if (c->servers[s].ch && c->servers[s].hello)
			kn__crd_send_table(c, c->servers[s].ch);
	c->table_sent = true;
	cw->table_ok = true;
	if (servers_ready(c))
		kn__crd_send_ready(cw->ch, KN__READY_TABLE);
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
	case KN__MSG_TENSOR:
		if (cw->table_ok ||
		    kn__layout_table_append(&cw->table, &cw->ntable, m))
			break;
		return;
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
				kn__crd_release_held(c);
			return;
		}
		if (c->started) {
			kn__crd_send_ready(cw->ch,
					   KN__READY_START); /* a rejoin */
			kn__crd_plan_event(c, KN__SYNC_EV_JOIN, w, 0);
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
			kn__crd_send_ready(c->workers[i].ch, KN__READY_START);
			/* one that left before the start and came back is
			 * a member of the servers' rules again */
			kn__crd_plan_event(c, KN__SYNC_EV_JOIN, i, 0);
		}
		return;
	case KN__MSG_DONE:
		kn__crd_plan_event(c, KN__SYNC_EV_LEAVE, w, 0);
		cw->done = true;
		kn__crd_check_end(c);
		return;
	case KN__MSG_TIMING:
		if (!c->started)
			break;
		kn__crd_plan_event(c, KN__SYNC_EV_TIMING, w,
				   m->u.timing.seconds);
		return;
	default:
		break;
	}
	kn__chan_send_error(cw->ch, -EPROTO, "worker %u: %s out of place", w,
			    kn__msg_name(m->type));
	kn__chan_close(cw->ch);
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
		kn__crd_send_job(c, cs->ch, s);
		if (c->table_sent)
			kn__crd_send_table(c, cs->ch);
		if (++c->hellos < c->cfg->servers)
			return;
		for (uint32_t w = 0; w < c->cfg->workers; w++)
			if (c->workers[w].ch)
				kn__crd_welcome_worker(c, w);
		return;
	}
	if (m->type == KN__MSG_CHECKPOINTS && c->restoring && !cs->listed) {
		cs->listed = true;
		cs->any = m->u.checkpoints.any;
		cs->nckpt = m->u.checkpoints.count;
		memcpy(cs->ckpt, m->u.checkpoints.versions,
		       cs->nckpt * sizeof(*cs->ckpt));
		kn__crd_maybe_restore(c);
		return;
	}
	if (m->type == KN__MSG_READY && m->u.ready.what == KN__READY_LAYOUT &&
	    !cs->layout && (cs->listed || !c->restore)) {
		cs->layout = true;
		if (++c->layouts < c->cfg->servers)
			return;
		if (c->restoring)
			kn__crd_maybe_restore(c);
		else
			kn__crd_workers_to_servers(c);
		return;
	}
	if (m->type == KN__MSG_BARRIER && c->started) {
		kn__crd_plan_barrier(c, s, m->u.barrier.epoch);
		return;
	}
	if (m->type == KN__MSG_ERROR) {
		kn__log(&c->node, "server %u: %s", s, m->u.error.text);
		kn__crd_shutdown(c, m->u.error.code);
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
			kn__crd_welcome_worker(c, r);
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
		kn__crd_lose_server(c, r);
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
				kn__crd_release_held(c);
		}
		if (!cw->done)
			kn__crd_remove_worker(c, r, "lost its connection");
	}
}

static const struct kn__node_ops coordinator_ops = {
	.open = on_open,
	.message = on_message,
	.closed = on_closed,
};

int kn__coordinator_run(const struct kn__config *cfg, const uint8_t *secret,
			size_t secret_len)
{
	struct coordinator c = { .cfg = cfg,
				 .optimizer = cfg->optimizer,
				 .t0 = kn__now(),
				 .restore = cfg->restore,
				 .restoring = cfg->restore };
	struct sockaddr_storage addr;
	char why[KN__CONFIG_WHY_MAX];
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
	kn__crd_planner_params(&c, &sp);
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
	ret = kn__config_resolve_why(&cfg->coordinator, &addr, &len, why);
	if (ret) {
		kn__log(&c.node, "cannot listen on %s", why);
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
		kn__crd_tick(&c);
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
