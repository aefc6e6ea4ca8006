/* SPDX-License-Identifier: Apache-2.0 */
/*
 * server_data.c - a server's data path: a worker's PUSH (or SKIP)
 * immediate becomes an event of its chunk's rule, whose actions are
 * carried out (APPLY into a free out buffer, RELEASE as a PULL write to
 * each worker, BARRIER to the coordinator); an event that needs an out
 * buffer while none is free waits in the chunk's queue, drained as
 * writes complete (a release the transport has no room for waits in
 * the node's pending queue of its channel).  Workers joining and leaving, and
 * worker 0's initial values (INIT), are events of the rules too.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "roles.h"
#include "server_state.h"

/* ---- the data path ---- */

/* The write of a release to worker @w from out buffer @out of @ch: now,
 * or once the node's pending queue lets it go. */
static int post_release(struct server *s, struct srv_chunk *ch, uint32_t w,
			int out)
{
	struct srv_worker *sw = &s->workers[w];
	const struct kn__tp_rdesc *dst;
	struct srv_write *wr;

	dst = kn__job_sums(s->job.u.job.protocol, s->job.u.job.optimizer)
		      ? &sw->grads[ch->c->tensor]
		      : &sw->params[ch->c->tensor];
	wr = &s->writes[(ch - s->chunks) * NOUT + out];
	wr->t = kn__now();
	return kn__chan_write(sw->ch, ch->out_mr[out], 0, ch->c->bytes, dst,
			      ch->c->first * kn_dtype_size(ch->dtype),
			      kn__imm(KN__IMM_PULL, 0, ch->idx), wr);
}

static void release(struct server *s, struct srv_chunk *ch,
		    const struct kn__sync_action *a)
{
	uint32_t w = a->worker;
	struct srv_worker *sw = &s->workers[w];
	uint64_t lead, version = a->version;
	int ret;

	if (!sw->ch || !sw->ready)
		return; /* gone: it gets the model when it comes back */
	sw->steps = a->steps;
	if (s->release_info || ch->announce[w]) {
		/*
		 * Before the write: the worker counts the chunk delivered
		 * once it has both, whichever order they come in.  Every
		 * protocol announces the answer to a JOIN, whose version a
		 * rejoining worker needs (a BSP joiner sits out the rounds
		 * of chunks that lag its others).
		 */
		struct kn__msg m = { .type = KN__MSG_RELEASE };

		ch->announce[w] = false;
		m.u.release.chunk = ch->idx;
		m.u.release.version = version;
		m.u.release.steps = a->steps;
		m.u.release.epoch = a->epoch;
		m.u.release.hint = a->hint >= 0 ? a->hint : 0;
		kn__chan_send(sw->ch, &m);
	}
	ret = post_release(s, ch, w, ch->cur);
	if (ret) {
		kn__log(&s->node, "%s: release of chunk %u: %s", sw->ch->name,
			ch->idx, strerror(-ret));
		kn__chan_close(sw->ch);
		return;
	}
	ch->refs[ch->cur]++;
	ch->delivered[w] = version;
	lead = kn__sync_rule_lead(ch->rule, w);
	if (lead > s->stale.max_lead)
		s->stale.max_lead = lead;
}

static int free_out(const struct srv_chunk *ch)
{
	if (ch->direct)
		return ch->refs[0] ? -1 : 0; /* the master, once idle */
	for (int o = 0; o < NOUT; o++)
		if (o != ch->cur && ch->refs[o] == 0)
			return o;
	return -1;
}

/*
 * CGP: a chunk rule waits at the end of @epoch for the next plan.  Each
 * of our rules says so; the coordinator hears it from us once an epoch.
 */
static void barrier(struct server *s, uint64_t epoch)
{
	struct kn__msg m = { .type = KN__MSG_BARRIER };

	if (s->barrier_sent && epoch <= s->barrier_epoch)
		return;
	s->barrier_sent = true;
	s->barrier_epoch = epoch;
	m.u.barrier.epoch = epoch;
	if (s->coord)
		kn__chan_send(s->coord, &m);
}

/*
 * Feed @ev to @ch's rule and carry out its actions.  False when an
 * APPLY found no free out buffer: the event waits in the queue.
 */
static bool feed(struct server *s, struct srv_chunk *ch,
		 const struct kn__sync_event *ev)
{
	bool push = ev->type == KN__SYNC_EV_PUSH, released = false;
	int n, o = -1;
	double t;

	if ((push || ev->type == KN__SYNC_EV_SKIP) && (o = free_out(ch)) < 0)
		return false; /* a push may apply: it needs a free buffer */
	if (push && !ch->round_t)
		ch->round_t = ev->t;
	if (ev->type == KN__SYNC_EV_JOIN)
		ch->announce[ev->worker] = true;
	n = kn__sync_rule_event(ch->rule, ev, s->actions);
	if (n < 0 && ev->type == KN__SYNC_EV_PLAN) {
		/* the coordinator's plan, which no worker is to blame for */
		kn__log(&s->node, "chunk %u: the rule refused plan %llu: %s",
			ch->idx, (unsigned long long)ev->epoch, strerror(-n));
		srv_fatal(s, -EPROTO, "a plan the protocol refuses");
		return true;
	}
	if (n < 0) {
		struct srv_worker *sw = &s->workers[ev->worker];

		if (sw->ch)
			kn__chan_send_error(sw->ch, n,
					    "chunk %u: a push the protocol "
					    "refuses",
					    ch->idx);
		return true;
	}
	for (int i = 0; i < n; i++) {
		const struct kn__sync_action *a = &s->actions[i];

		if (a->type == KN__SYNC_ACT_APPLY) {
			if (o < 0)
				o = free_out(ch);
			t = kn__now();
			if (ch->round_t)
				kn__hist_add(&s->stages.gather,
					     t - ch->round_t);
			ch->round_t = 0;
			if (o < 0 || kn__srv_apply(s, ch, a, o)) {
				srv_fatal(s, -EIO, "an apply failed");
				return true;
			}
			kn__hist_add(&s->stages.apply, kn__now() - t);
			o = -1;
			kn__srv_checkpoint(s, ch, s->base + a->version);
		} else if (a->type == KN__SYNC_ACT_RELEASE) {
			release(s, ch, a);
			released = true;
		} else if (a->type == KN__SYNC_ACT_BARRIER) {
			barrier(s, a->epoch);
		}
	}
	if (push && released)
		kn__hist_add(&s->stages.turn, kn__now() - ev->t);
	return true;
}

static void drain_queue(struct server *s, struct srv_chunk *ch)
{
	while (ch->qhead != ch->qtail &&
	       feed(s, ch, &ch->queue[ch->qhead % ch->qcap]))
		ch->qhead++;
}

void kn__srv_event(struct server *s, struct srv_chunk *ch,
		   const struct kn__sync_event *ev)
{
	if (ch->qhead == ch->qtail && feed(s, ch, ev))
		return;
	if (ch->qtail - ch->qhead == ch->qcap) {
		srv_fatal(s, -ENOBUFS, "a chunk's event queue overflowed");
		return;
	}
	ch->queue[ch->qtail++ % ch->qcap] = *ev;
}

static struct srv_chunk *chunk_of(struct server *s, uint32_t idx)
{
	uint32_t lo = 0, hi = s->nchunks;

	while (lo < hi) { /* owned chunks are in index order */
		uint32_t mid = (lo + hi) / 2;

		if (s->chunks[mid].idx < idx)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < s->nchunks && s->chunks[lo].idx == idx ? &s->chunks[lo]
							   : NULL;
}

/* A worker is in: member of every rule, which releases it. */
void kn__srv_join(struct server *s, uint32_t w)
{
	struct kn__sync_event ev = { .type = KN__SYNC_EV_JOIN,
				     .worker = w,
				     .t = kn__now() };

	if (s->workers[w].member)
		return;
	s->workers[w].member = true;
	if (s->restoring)
		return; /* it joins the restored rules (init_chunk) */
	for (uint32_t i = 0; i < s->nchunks; i++)
		if (s->chunks[i].initialized)
			kn__srv_event(s, &s->chunks[i], &ev);
}

void kn__srv_leave(struct server *s, uint32_t w)
{
	struct kn__sync_event ev = { .type = KN__SYNC_EV_LEAVE,
				     .worker = w,
				     .t = kn__now() };

	if (!s->workers[w].member)
		return;
	s->workers[w].member = false;
	for (uint32_t i = 0; i < s->nchunks; i++)
		if (s->chunks[i].initialized)
			kn__srv_event(s, &s->chunks[i], &ev);
}

/*
 * ESP: a member's seconds per local step, for every rule, which compare
 * the members' (rounds while they are even).  It needs no out buffer and
 * emits nothing, so it goes in at once, ahead of any queued push: it is
 * a measurement, not a contribution, and its place among the pushes can
 * only move the push at which rounds start or stop.  A refused value
 * (not a duration) is the worker's bug: it hears of it.
 */
void kn__srv_timing(struct server *s, uint32_t w, double seconds)
{
	struct kn__sync_event ev = { .type = KN__SYNC_EV_TIMING,
				     .worker = w,
				     .t = kn__now(),
				     .value = seconds };
	int ret;

	if (!s->workers[w].member || s->restoring)
		return;
	for (uint32_t i = 0; i < s->nchunks; i++) {
		if (!s->chunks[i].initialized)
			continue;
		ret = kn__sync_rule_event(s->chunks[i].rule, &ev, s->actions);
		if (ret < 0) {
			if (s->workers[w].ch)
				kn__chan_send_error(s->workers[w].ch, ret,
						    "a timing the protocol "
						    "refuses");
			return;
		}
	}
}

/* Worker 0's initial values of a chunk: the master copy, version 0. */
void kn__srv_init_chunk(struct server *s, struct srv_chunk *ch)
{
	const void *src = slot_ptr(s, ch, 0, 0);
	struct kn__sync_event ev = { .type = KN__SYNC_EV_JOIN, .t = kn__now() };

	if (ch->initialized)
		return;
	if (s->restoring) {
		/* the master comes from the file: on_restore */
		return;
	}
	if (!s->restored)
		kn_convert(ch->master, KN_DTYPE_FP32, src, ch->dtype,
			   ch->c->count);
	if (!ch->direct)
		kn_convert(ch->out[ch->cur], ch->dtype, ch->master,
			   KN_DTYPE_FP32, ch->c->count);
	ch->initialized = true;
	/* the initial model is version 0's checkpoint: a server lost
	 * before the first --checkpoint-every versions goes back to it */
	if (!s->restored)
		kn__srv_checkpoint(s, ch, 0);
	/* members so far join the rule now, and get version 0 */
	for (uint32_t w = 0; w < s->layout->nworkers; w++) {
		if (!s->workers[w].member)
			continue;
		ev.worker = w;
		kn__srv_event(s, ch, &ev);
	}
}

void kn__srv_on_imm(struct kn__node *n, struct kn__chan *ch, uint32_t imm,
		    uint64_t bytes)
{
	struct server *s = srv_of(n);
	struct srv_chunk *c =
		s->layout ? chunk_of(s, kn__imm_chunk(imm)) : NULL;
	uint32_t w = ch->peer_rank;
	struct kn__sync_event ev;

	if (!c || ch->peer_role != KN__ROLE_WORKER || bytes != c->c->bytes ||
	    !s->workers[w].ready) {
		kn__log(n,
			"%s: a write for chunk %u that is not ours: "
			"closing",
			ch->name, kn__imm_chunk(imm));
		kn__chan_close(ch);
		return;
	}
	switch (kn__imm_op(imm)) {
	case KN__IMM_INIT:
		if (w == 0)
			kn__srv_init_chunk(s, c);
		return;
	case KN__IMM_PUSH:
	case KN__IMM_SKIP:
		if (!c->initialized || !s->workers[w].member)
			return; /* not in the job (yet): dropped */
		ev = (struct kn__sync_event){
			.type = kn__imm_op(imm) == KN__IMM_PUSH
					? KN__SYNC_EV_PUSH
					: KN__SYNC_EV_SKIP,
			.worker = w,
			.slot = kn__imm_parity(imm),
			.clock = c->pushes[w]++,
			.version = c->delivered[w],
			.t = kn__now(),
			.steps = s->workers[w].steps,
		};
		c->pushed[2 * (size_t)w + ev.slot] = ev.version;
		kn__srv_event(s, c, &ev);
		return;
	default:
		kn__chan_close(ch);
	}
}

void kn__srv_on_written(struct kn__node *n, void *user, int status)
{
	struct srv_write *wr = user;
	struct srv_chunk *ch = wr->chunk;

	/* a failed write fails its endpoint (closed()), a cancelled one
	 * was for a worker gone: either way the buffer is free of it */
	(void)status;
	kn__hist_add(&srv_of(n)->stages.write, kn__now() - wr->t);
	ch->refs[wr->out]--;
	drain_queue(srv_of(n), ch);
}
