/* SPDX-License-Identifier: Apache-2.0 */
/*
 * coordinator_members.c - who is in the job.  A worker that is silent for
 * the heartbeat timeout is removed (the servers hear it: MEMBER), a
 * server silent for longer is taken for hung and lost; the job ends once
 * every worker has finished or been removed.  Start-up and recovery have
 * deadlines, and missing one names who never came.  A pause of the
 * coordinator's own is not held against its peers.
 */
#include <errno.h>
#include <stdio.h>

#include "coordinator_priv.h"

/* A gap in the loop longer than this (and than a quarter of the heartbeat
 * timeout) is a pause of the coordinator's own */
#define PAUSE_MIN_S 0.5
/* steps of reading what is queued before a peer is called silent */
#define DRAIN_STEPS 16

/* The job ends once every worker has finished or been removed. */
void kn__crd_check_end(struct coordinator *c)
{
	if (!c->started || c->recovering)
		return; /* the workers gone in a recovery come back */
	for (uint32_t w = 0; w < c->cfg->workers; w++)
		if (!c->workers[w].done && !c->workers[w].removed)
			return;
	if (c->cfg->verbose)
		kn__log(&c->node, "every worker is done: the job ends");
	kn__crd_shutdown(c, 0);
}

void kn__crd_remove_worker(struct coordinator *c, uint32_t w, const char *why)
{
	struct crd_worker *cw = &c->workers[w];
	struct kn__msg m = { .type = KN__MSG_MEMBER };

	if (cw->removed || cw->done)
		return;
	kn__log(&c->node, "worker %u %s: removed from the job", w, why);
	cw->removed = true;
	kn__crd_plan_event(c, KN__SYNC_EV_LEAVE, w, 0);
	m.u.member.rank = w;
	m.u.member.joined = 0;
	kn__crd_broadcast(c, &m);
	if (cw->ch) {
		struct kn__chan *ch = cw->ch;

		cw->ch = NULL;
		kn__chan_close(ch);
	}
	kn__crd_check_end(c);
}

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

void kn__crd_tick(struct coordinator *c)
{
	double t = kn__now();

	judge_after_pause(c, t);
	if (c->done)
		return;

	if (!c->started && t - c->t0 > c->cfg->startup_timeout_ms / 1000.0) {
		log_missing(c);
		kn__crd_shutdown(c, -ETIMEDOUT);
		return;
	}
	if (c->recovering &&
	    t - c->recover_t0 > c->cfg->startup_timeout_ms / 1000.0) {
		kn__log(&c->node,
			"the servers lost were not back within the "
			"start-up timeout (%.0f s): the job ends",
			c->cfg->startup_timeout_ms / 1000.0);
		log_missing(c);
		kn__crd_shutdown(c, -ETIMEDOUT);
		return;
	}
	/* a worker that does not come back is not waited for long */
	if (c->holding &&
	    t - c->hold_t0 > c->cfg->heartbeat_timeout_ms / 1000.0)
		kn__crd_release_held(c);
	for (uint32_t k = 0; k < c->cfg->servers && !c->done; k++)
		if (server_silent(c, k, t))
			hung_server(c, k, t);
	for (uint32_t w = 0; w < c->cfg->workers && !c->done; w++) {
		struct crd_worker *cw = &c->workers[w];

		if (cw->ch && !cw->done && cw->table_ok &&
		    t - cw->last_seen > c->cfg->heartbeat_timeout_ms / 1000.0)
			kn__crd_remove_worker(c, w,
					      "sent no heartbeat in time");
	}
}
