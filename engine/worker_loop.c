/* SPDX-License-Identifier: Apache-2.0 */
/*
 * worker_loop.c - the worker's progress thread: it owns the transport
 * context (the io_uring ring has one issuer), runs the job's protocol
 * with the lock held and sleeps without it; the control messages from
 * the coordinator and the servers, lost peers, heartbeats, TIMING and
 * DONE.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "worker_priv.h"

/* ---- in the progress thread ---- */

/*
 * The mean of the timings reported since the last TIMING, sent where its
 * protocol reads it: PSP's and CGP's planners are the coordinator's; ESP
 * compares its members' step times in the servers' chunk rules, so each
 * server gets it (once the job runs).  Under the lock.
 */
static void send_timing(struct kn_worker *w)
{
	struct kn__msg m = { .type = KN__MSG_TIMING };
	bool esp = kn__sync_traits(w->job.u.job.protocol)->timing ==
		   KN__SYNC_TIMING_RULES;

	if (!w->timing_count || (esp ? w->state != WK_RUNNING : !w->coord))
		return;
	m.u.timing.seconds = (float)(w->timing_sum / w->timing_count);
	if (!esp)
		kn__chan_send(w->coord, &m);
	for (uint32_t i = 0; esp && i < w->job.u.job.servers; i++)
		if (w->servers[i].ch)
			kn__chan_send(w->servers[i].ch, &m);
	w->timing_sum = 0;
	w->timing_count = 0;
}

/*
 * kn_worker_finish was called: this worker takes no more steps, so the
 * servers and the coordinator hear it at once, not when the program
 * destroys the worker.  Under PSP, ESP, SSP and CGP the workers may make
 * different numbers of pushes for the same steps, and a round (or a
 * bound) that still counted a worker that has stopped, while its
 * program evaluates the model say, would hold every other worker.
 */
static void send_done(struct kn_worker *w)
{
	struct kn__msg m = { .type = KN__MSG_DONE };

	if (!w->finished || w->done_sent || !w->coord || w->state != WK_RUNNING)
		return;
	for (uint32_t i = 0; i < w->job.u.job.servers; i++)
		if (w->servers[i].ch)
			kn__chan_send(w->servers[i].ch, &m);
	kn__chan_send(w->coord, &m);
	w->done_sent = true;
}

static void on_message(struct kn__node *n, struct kn__chan *ch,
		       const struct kn__msg *m)
{
	struct kn_worker *w = wk_of(n);

	if (m->type == KN__MSG_ERROR && ch == w->coord &&
	    m->u.error.code == -EEXIST && w->state == WK_JOINING &&
	    kn__now() + RECONNECT_S < w->node.retry_until) {
		/*
		 * Restarted before this rank's old connection was seen
		 * closed (kanel launch --restart-workers does it at once):
		 * the coordinator lets it in once that one is gone.
		 */
		kn__log(n, "%s: %s: again in %.1f s", ch->name, m->u.error.text,
			RECONNECT_S);
		w->coord = NULL;
		w->reconnect_at = kn__now() + RECONNECT_S;
		kn__chan_close(ch);
		return;
	}
	if (m->type == KN__MSG_ERROR) {
		kn__log(n, "%s: %s", ch->name, m->u.error.text);
		kn__wk_fail(w, m->u.error.code);
		return;
	}
	if (m->type == KN__MSG_SHUTDOWN) {
		/* a worker that failed said why already: its reason stays
		 * the last word (kn_last_message) */
		if (w->state != WK_FAILED &&
		    (w->state != WK_RUNNING || w->first_undone < w->next_id))
			kn__log(n, "the job ended");
		kn__wk_fail(w, -ESHUTDOWN);
		return;
	}
	if (ch == w->coord) {
		if (m->type == KN__MSG_JOB && w->state == WK_JOINING) {
			w->job = *m;
			/* --optimizer auto: settled by our own program, as the
			 * coordinator settles it by worker 0's (it refuses a
			 * table that says otherwise) */
			if (m->u.job.optimizer == KN__CONFIG_AUTO)
				w->job.u.job.optimizer =
					w->own_optimizer ? KN__CONFIG_SUM
							 : KN__CONFIG_SGD;
			w->release_info = kn__sync_traits(m->u.job.protocol)
						  ->release_info;
			w->servers =
				calloc(m->u.job.servers, sizeof(*w->servers));
			if (!w->servers || m->u.job.rank != w->cfg.rank)
				kn__wk_fail(w, -EPROTO);
			return;
		}
		if (m->type == KN__MSG_HELLO && w->servers &&
		    m->u.hello.role == KN__ROLE_SERVER &&
		    m->u.hello.rank < w->job.u.job.servers &&
		    !w->servers[m->u.hello.rank].known) {
			w->servers[m->u.hello.rank].addr = m->u.hello.addr;
			w->servers[m->u.hello.rank].known = true;
			if (++w->nservers_known == w->job.u.job.servers) {
				w->state = WK_JOINED;
				pthread_cond_broadcast(&w->cond);
			}
			return;
		}
		if (m->type == KN__MSG_READY &&
		    m->u.ready.what == KN__READY_TABLE &&
		    w->state == WK_TABLE) {
			kn__wk_go_to_servers(w);
			return;
		}
		if (m->type == KN__MSG_READY &&
		    m->u.ready.what == KN__READY_START &&
		    w->state == WK_MODEL) {
			w->state = WK_RUNNING;
			pthread_cond_broadcast(&w->cond);
			kn__wk_advance(w);
			return;
		}
	} else if (m->type == KN__MSG_RELEASE && ch->user && w->layout) {
		uint32_t c = m->u.release.chunk;

		/* every release's under ESP and PSP, else the first's only */
		if (c < w->layout->nchunks &&
		    w->layout->chunks[c].server == ch->peer_rank &&
		    (w->release_info || w->chunks[c].infos == 0)) {
			if (w->chunks[c].infos++ == 0)
				w->chunks[c].joined = m->u.release.version;
			w->chunks[c].steps = m->u.release.steps;
			w->chunks[c].epoch = m->u.release.epoch;
			w->chunks[c].hint = m->u.release.hint;
			kn__wk_delivered(w, c);
			return;
		}
	} else if (m->type == KN__MSG_SLOTS && ch->user) {
		struct wk_server *ws = ch->user;

		if (!ws->have_slots) {
			ws->slots = m->u.slots.slots;
			ws->have_slots = true;
			w->nslots++;
			kn__wk_send_init(w);
			return;
		}
	}
	kn__log(n, "%s: %s out of place", ch->name, kn__msg_name(m->type));
	kn__wk_fail(w, -EPROTO);
}

static void on_open(struct kn__node *n, struct kn__chan *ch)
{
	struct kn_worker *w = wk_of(n);

	if (ch != w->coord)
		kn__wk_send_buffers(w, ch->user);
}

static void on_closed(struct kn__node *n, struct kn__chan *ch, int status)
{
	struct kn_worker *w = wk_of(n);

	if (ch != w->coord && ch->peer_role == KN__ROLE_COORDINATOR &&
	    w->reconnect_at)
		return; /* the refused one: another comes in a moment */
	if (ch == w->coord)
		w->coord = NULL;
	else if (ch->user)
		((struct wk_server *)ch->user)->ch = NULL;
	/*
	 * Done (kn_worker_finish sent DONE): no step comes after, and the
	 * job may end at any moment.  The servers exit at the coordinator's
	 * SHUTDOWN, and a server's reset can reach us before the SHUTDOWN
	 * does (another socket): that is the job's orderly end, not a
	 * loss, and it is neither logged nor a failure.
	 */
	if (w->done_sent && w->state == WK_RUNNING)
		return;
	if (w->state != WK_FAILED && !w->stop) {
		kn__log(n, "lost %s%s%s", ch->name, status ? ": " : "",
			status ? strerror(-status) : "");
		if (ch != w->coord && !w->lost_err) {
			w->lost_err = status ? status : -ECONNRESET;
			w->lost_at = kn__now();
		}
		/* a job that cannot start goes down at once: the
		 * coordinator's reason may come a moment later */
		if (ch != w->coord && w->coord && w->state < WK_RUNNING)
			return;
		kn__wk_fail(w, status ? status : -ECONNRESET);
	}
}

const struct kn__node_ops kn__wk_ops = {
	.open = on_open,
	.message = on_message,
	.closed = on_closed,
	.imm = kn__wk_on_imm,
	.written = kn__wk_on_written,
};

static void heartbeat(struct kn_worker *w)
{
	struct kn__msg m = { .type = KN__MSG_HEARTBEAT };
	double t = kn__now();

	if (!w->coord || !kn__chan_open(w->coord) ||
	    t - w->last_beat < w->cfg.heartbeat_timeout_ms / 4000.0)
		return;
	w->last_beat = t;
	kn__chan_send(w->coord, &m);
}

/* Deliver what comes for @seconds, the lock held around each batch. */
static void linger(struct kn_worker *w, struct kn__tp_completion *c,
		   double seconds)
{
	pthread_mutex_unlock(&w->lock);
	for (double end = kn__now() + seconds; kn__now() < end;) {
		int got = kn__node_wait(&w->node, 20, -1, c, 64);

		pthread_mutex_lock(&w->lock);
		if (got > 0)
			kn__node_dispatch(&w->node, c, got);
		pthread_mutex_unlock(&w->lock);
	}
	pthread_mutex_lock(&w->lock);
}

void *kn__wk_progress(void *arg)
{
	struct kn_worker *w = arg;
	struct kn__tp_completion c[64];
	uint64_t v;
	int got;

	pthread_mutex_lock(&w->lock);
	/* the context's first post is ours: it is this thread's */
	got = kn__node_connect(&w->node, (struct sockaddr *)&w->coord_addr,
			       w->coord_len, KN__ROLE_COORDINATOR, 0, NULL,
			       &w->coord);
	if (got) {
		kn__log(&w->node, "cannot reach the coordinator at %s:%u: %s",
			w->cfg.coordinator.host, w->cfg.coordinator.port,
			strerror(-got));
		kn__wk_fail(w, got);
	}
	while (!w->stop) {
		if (w->reconnect_at && kn__now() >= w->reconnect_at) {
			w->reconnect_at = 0;
			got = kn__node_connect(
				&w->node, (struct sockaddr *)&w->coord_addr,
				w->coord_len, KN__ROLE_COORDINATOR, 0, NULL,
				&w->coord);
			if (got)
				kn__wk_fail(w, got);
		}
		if (w->start_requested && w->state == WK_JOINED) {
			w->start_requested = false;
			w->state = WK_TABLE;
			if (kn__wk_send_table(w))
				kn__wk_fail(w, -ENOTCONN);
		}
		kn__wk_advance(w);
		heartbeat(w);
		if (w->lost_err &&
		    (!w->coord || kn__now() - w->lost_at > LOST_GRACE_S))
			kn__wk_fail(w, w->lost_err);
		send_timing(w);
		send_done(w);
		pthread_mutex_unlock(&w->lock);
		/* the lock is free while the thread sleeps */
		got = kn__node_wait(&w->node, 100, w->wake, c, 64);
		pthread_mutex_lock(&w->lock);
		/* what the news was about is under the lock: the loop's top
		 * sees it, and news after this is for the next wait */
		atomic_store(&w->news, 0);
		if (atomic_exchange(&w->kicked, false) &&
		    read(w->wake, &v, sizeof(v)) < 0 && errno != EAGAIN)
			break;
		if (got < 0)
			kn__wk_fail(w, got);
		else
			kn__node_dispatch(&w->node, c, got);
	}
	if (w->coord && !w->done_sent && w->state != WK_FAILED) {
		struct kn__msg m = { .type = KN__MSG_DONE };

		kn__chan_send(w->coord, &m);
		w->done_sent = true;
		linger(w, c, 0.2); /* a moment for DONE to leave */
	} else if (w->coord && w->lost_err) {
		/*
		 * Failed, not done (a DONE would keep the rank from coming
		 * back), and failed by a server's loss, which the
		 * coordinator may not have seen yet: a server killed with
		 * its io_uring ring open can reset the workers' connections
		 * before the coordinator's.  Had this channel closed first,
		 * the coordinator would take it for this worker's own loss,
		 * and a job whose every worker is lost ends, where a job
		 * with checkpoints waits for the server.  Once the
		 * coordinator knows, it closes this channel itself.
		 */
		for (double end = kn__now() + LOST_GRACE_S;
		     w->coord && kn__now() < end;)
			linger(w, c, 0.02);
	}
	/*
	 * The context is this thread's (the io_uring ring has one issuer):
	 * it goes with the thread.
	 */
	kn__node_fini(&w->node);
	pthread_mutex_unlock(&w->lock);
	return NULL;
}
