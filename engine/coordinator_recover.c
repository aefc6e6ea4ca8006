/* SPDX-License-Identifier: Apache-2.0 */
/*
 * coordinator_recover.c - checkpoints at the job's level.  With --restore
 * the servers say which checkpoints they hold (CHECKPOINTS) and all load
 * the newest one every server has (RESTORE) before the workers come.
 * With --checkpoint-dir a server lost after the start does not end the
 * job: the workers are let go, the other servers asked for their
 * checkpoints (RECOVER), and once the lost one is back every server goes
 * back to the newest common version and the workers that come back start
 * together from it.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "coordinator_priv.h"

/* After a recovery: the workers back hold the restored model; start
 * them together, as at the job's start. */
void kn__crd_release_held(struct coordinator *c)
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
			kn__crd_send_ready(cw->ch, KN__READY_START);
			kn__crd_plan_event(c, KN__SYNC_EV_JOIN, w, 0);
		}
	}
	c->held = c->expected = 0;
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
		kn__crd_broadcast(c, &m);
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
	kn__crd_shutdown(c, -ENOENT);
	return -ENOENT;
}

/*
 * Once every server has its layout and has said which checkpoints it
 * holds: the restore, then the workers go to the servers.  After a
 * recovery, the workers back are started together once they all hold
 * the restored model (release_held).
 */
void kn__crd_maybe_restore(struct coordinator *c)
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
	kn__crd_workers_to_servers(c);
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
void kn__crd_lose_server(struct coordinator *c, uint32_t r)
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
		kn__crd_shutdown(c, -ECONNRESET);
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
	kn__crd_reset_planner(c);
	for (uint32_t w = 0; w < c->cfg->workers; w++) {
		struct crd_worker *cw = &c->workers[w];

		/* every worker is out until it is back */
		kn__crd_plan_event(c, KN__SYNC_EV_LEAVE, w, 0);
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
