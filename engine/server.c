/* SPDX-License-Identifier: Apache-2.0 */
/*
 * server.c - a server (kn__server_run): its progress loop, start-up
 * (connect to the coordinator, HELLO, the JOB and the tensor table, the
 * layout, the chunks and their slot area, READY LAYOUT), the control
 * messages of the coordinator and the workers, and the --metrics line.
 * server_state.h says how the server's files fit.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth.h"
#include "roles.h"
#include "server_state.h"

/* ---- start-up ---- */

static int setup_chunks(struct server *s)
{
	const struct kn__layout *l = s->layout;
	uint32_t self = s->cfg->rank, nw = l->nworkers;
	struct kn__sync_params sp;
	int ret;

	kn__job_sync_params(&s->job, 0, &sp);
	sp.max_workers = nw;
	for (uint32_t i = 0; i < l->nchunks; i++)
		s->nchunks += l->chunks[i].server == self;
	s->chunks = calloc(s->nchunks + 1, sizeof(*s->chunks));
	s->writes = calloc((size_t)s->nchunks * NOUT + 1, sizeof(*s->writes));
	s->actions = calloc(kn__sync_max_actions(&sp), sizeof(*s->actions));
	s->srcs = calloc(nw, sizeof(*s->srcs));
	s->weights = calloc(nw, sizeof(*s->weights));
	if (!s->chunks || !s->writes || !s->actions || !s->srcs || !s->weights)
		return -ENOMEM;
	for (uint32_t i = 0, k = 0; i < l->nchunks; i++) {
		struct srv_chunk *ch = &s->chunks[k];
		size_t n;

		if (l->chunks[i].server != self)
			continue;
		ch->idx = i;
		ch->c = &l->chunks[i];
		ch->dtype = l->tensors[ch->c->tensor].dtype;
		n = ch->c->count;
		ch->master = calloc(n, sizeof(float));
		ch->m = calloc(n, sizeof(float));
		ch->v = calloc(n, sizeof(float));
		ch->delivered = calloc(nw, sizeof(uint64_t));
		ch->announce = calloc(nw, sizeof(bool));
		ch->pushes = calloc(nw, sizeof(uint64_t));
		ch->pushed = calloc(2 * (size_t)nw, sizeof(uint64_t));
		ch->qcap = 4 * nw;
		ch->queue = calloc(ch->qcap, sizeof(*ch->queue));
		if (!ch->master || !ch->m || !ch->v || !ch->delivered ||
		    !ch->announce || !ch->pushes || !ch->pushed || !ch->queue)
			return -ENOMEM;
		/*
		 * fp32 parameters leave straight from the master copy: no
		 * conversion, no copy; the next apply waits until the
		 * writes from it are done.
		 */
		ch->direct = ch->dtype == KN_DTYPE_FP32 &&
			     !kn__job_sums(s->job.u.job.protocol,
					   s->job.u.job.optimizer);
		for (int o = 0; o < (ch->direct ? 1 : NOUT); o++) {
			ch->out[o] =
				ch->direct ? (void *)ch->master
					   : aligned_alloc(64,
							   (ch->c->bytes + 63) /
								   64 * 64);
			if (!ch->out[o])
				return -ENOMEM;
			ret = kn__tp_mr_reg(s->node.ctx, ch->out[o],
					    ch->c->bytes, 0, &ch->out_mr[o]);
			if (ret)
				return ret;
			s->writes[k * NOUT + o] =
				(struct srv_write){ .chunk = ch, .out = o };
		}
		ret = kn__sync_rule_create(&sp, &ch->rule);
		if (ret)
			return ret;
		k++;
	}
	return 0;
}

static void on_table_end(struct server *s, uint32_t count)
{
	const struct kn__layout *l;
	struct kn__msg m = { .type = KN__MSG_READY };
	size_t bytes;
	int ret;

	if (count != s->ntable) {
		srv_fatal(s, -EPROTO, "the coordinator's tensor table is torn");
		return;
	}
	ret = kn__layout_build(s->table, s->ntable, s->job.u.job.servers,
			       s->job.u.job.workers, s->job.u.job.chunk_bytes,
			       &s->layout);
	if (ret) {
		srv_fatal(s, ret, "the tensor table makes no layout");
		return;
	}
	l = s->layout;
	bytes = l->slot_bytes[s->cfg->rank];
	s->slots = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096 + 4096);
	s->workers = calloc(l->nworkers, sizeof(*s->workers));
	if (!s->slots || !s->workers) {
		srv_fatal(s, -ENOMEM, "out of memory for the slot area");
		return;
	}
	ret = kn__tp_mr_reg(s->node.ctx, s->slots, bytes ? bytes : 1,
			    KN_TP_REMOTE_WRITE, &s->slots_mr);
	if (!ret)
		ret = setup_chunks(s);
	if (ret) {
		srv_fatal(s, ret, "allocating the chunks failed");
		return;
	}
	ret = kn__srv_setup_checkpoints(s);
	if (ret) {
		srv_fatal(s, ret, "no checkpoints can be written");
		return;
	}
	if (s->job.u.job.restore && kn__srv_offer_checkpoints(s)) {
		srv_fatal(s, -EINVAL, "no checkpoints to offer");
		return;
	}
	if (s->cfg->verbose)
		kn__log(&s->node,
			"%u chunks, %llu parameter bytes, %zu slot "
			"bytes",
			s->nchunks,
			(unsigned long long)l->server_bytes[s->cfg->rank],
			bytes);
	m.u.ready.what = KN__READY_LAYOUT;
	kn__chan_send(s->coord, &m);
}

/* ---- messages ---- */

static void on_worker_msg(struct server *s, struct kn__chan *ch,
			  const struct kn__msg *m)
{
	uint32_t w = ch->peer_rank;
	struct srv_worker *sw = &s->workers[w];
	struct kn__msg r = { .type = KN__MSG_SLOTS };
	int ret;

	switch (m->type) {
	case KN__MSG_BUFFERS:
		if (m->u.buffers.index >= s->layout->ntensors) {
			kn__chan_send_error(ch, -EINVAL, "no tensor %u",
					    m->u.buffers.index);
			kn__chan_close(ch);
			return;
		}
		sw->params[m->u.buffers.index] = m->u.buffers.params;
		sw->grads[m->u.buffers.index] = m->u.buffers.grads;
		sw->nbuffers++;
		return;
	case KN__MSG_READY:
		if (m->u.ready.what != KN__READY_BUFFERS ||
		    sw->nbuffers != s->layout->ntensors) {
			kn__chan_send_error(ch, -EINVAL,
					    "%u of %u buffers before READY",
					    sw->nbuffers, s->layout->ntensors);
			kn__chan_close(ch);
			return;
		}
		/* the worker's own slice of the slots, and nothing else */
		ret = kn__tp_ep_grant(
			ch->ep, s->slots_mr,
			w * s->layout->worker_slot_bytes[s->cfg->rank],
			s->layout->worker_slot_bytes[s->cfg->rank],
			KN_TP_REMOTE_WRITE, &r.u.slots.slots);
		if (ret) {
			kn__chan_send_error(ch, ret, "granting the slots: %s",
					    strerror(-ret));
			kn__chan_close(ch);
			return;
		}
		sw->ready = true;
		kn__chan_send(ch, &r);
		kn__srv_join(s, w);
		return;
	case KN__MSG_DONE:
		kn__srv_leave(s, w);
		return;
	case KN__MSG_TIMING:
		if (kn__sync_traits(s->job.u.job.protocol)->timing !=
		    KN__SYNC_TIMING_RULES)
			break;
		kn__srv_timing(s, w, m->u.timing.seconds);
		return;
	default:
		break;
	}
	kn__chan_send_error(ch, -EPROTO, "%s is no worker message",
			    kn__msg_name(m->type));
	kn__chan_close(ch);
}

/*
 * A part of a plan (PSP, CGP): the parts of one epoch come in order;
 * once the plan is whole, every chunk rule gets it, to switch to at its
 * next barrier (CGP's rules may then release the workers they held
 * there).  The entries are the protocol's to check: PSP's steps, CGP's
 * groups and rounds.
 */
static void on_plan(struct server *s, const struct kn__msg *m)
{
	const uint32_t nw = s->layout ? s->layout->nworkers : 0;
	struct kn__sync_event ev = { .type = KN__SYNC_EV_PLAN };

	if (!nw || m->u.plan.workers != nw ||
	    (m->u.plan.first == 0) != (s->plan_have == 0) ||
	    (m->u.plan.first && m->u.plan.epoch != s->plan_epoch) ||
	    m->u.plan.first != s->plan_have) {
		srv_fatal(s, -EPROTO, "a plan out of order");
		return;
	}
	if (!s->plan && !(s->plan = calloc(nw, sizeof(*s->plan)))) {
		srv_fatal(s, -ENOMEM, "out of memory");
		return;
	}
	s->plan_epoch = m->u.plan.epoch;
	memcpy(s->plan + m->u.plan.first, m->u.plan.steps,
	       m->u.plan.count * sizeof(*s->plan));
	s->plan_have += m->u.plan.count;
	if (s->plan_have < nw)
		return;
	s->plan_have = 0;
	ev.epoch = s->plan_epoch;
	/* a rule copies the plan when it takes the event; one queued
	 * behind an apply is taken within the round, long before the next
	 * plan (a plan needs rounds of timings) overwrites the array */
	ev.plan = s->plan;
	ev.t = kn__now();
	for (uint32_t i = 0; i < s->nchunks; i++)
		if (s->chunks[i].initialized)
			kn__srv_event(s, &s->chunks[i], &ev);
}

static void on_coord_msg(struct server *s, const struct kn__msg *m)
{
	int ret;

	switch (m->type) {
	case KN__MSG_JOB:
		s->job = *m;
		s->joined = true;
		s->release_info =
			kn__sync_traits(m->u.job.protocol)->release_info;
		if (m->u.job.workers == 0 ||
		    m->u.job.workers > KN_CONFIG_MAX_COUNT)
			srv_fatal(s, -EPROTO, "a job without workers");
		return;
	case KN__MSG_TENSOR:
		ret = s->layout ? -EPROTO
				: kn__layout_table_append(&s->table, &s->ntable,
							  m);
		if (ret)
			srv_fatal(s, ret,
				  ret == -ENOMEM ? "out of memory"
						 : "tensor table out of order");
		return;
	case KN__MSG_TENSORS_END:
		on_table_end(s, m->u.tensors_end.count);
		return;
	case KN__MSG_MEMBER:
		if (!s->layout || m->u.member.rank >= s->layout->nworkers)
			return;
		if (!m->u.member.joined) {
			struct kn__chan *ch = s->workers[m->u.member.rank].ch;

			kn__srv_leave(s, m->u.member.rank);
			if (ch)
				kn__chan_close(ch);
		}
		return;
	case KN__MSG_PLAN:
		on_plan(s, m);
		return;
	case KN__MSG_RESTORE:
		/* the file's values, version 0 of each chunk's new rule, to
		 * every worker that came meanwhile */
		if (kn__srv_restore(s, m->u.restore.version) == 0)
			for (uint32_t k = 0; k < s->nchunks; k++)
				kn__srv_init_chunk(s, &s->chunks[k]);
		return;
	case KN__MSG_RECOVER:
		kn__srv_on_recover(s);
		return;
	case KN__MSG_SHUTDOWN:
		s->done = true;
		return;
	case KN__MSG_ERROR:
		if (m->u.error.code == -EEXIST && !s->layout &&
		    kn__now() + RECONNECT_S < s->node.retry_until) {
			/* this rank's old connection is not gone yet */
			struct kn__chan *old = s->coord;

			kn__log(&s->node, "coordinator: %s: again in %.1f s",
				m->u.error.text, RECONNECT_S);
			s->coord = NULL;
			s->reconnect_at = kn__now() + RECONNECT_S;
			kn__chan_close(old);
			return;
		}
		kn__log(&s->node, "coordinator: %s", m->u.error.text);
		s->status = m->u.error.code;
		s->done = true;
		return;
	default:
		srv_fatal(s, -EPROTO,
			  "an unexpected message from the coordinator");
	}
}

static void on_message(struct kn__node *n, struct kn__chan *ch,
		       const struct kn__msg *m)
{
	struct server *s = srv_of(n);

	if (ch == s->coord)
		on_coord_msg(s, m);
	else
		on_worker_msg(s, ch, m);
}

static void on_open(struct kn__node *n, struct kn__chan *ch)
{
	struct server *s = srv_of(n);
	struct srv_worker *sw;
	struct kn__msg m = { .type = KN__MSG_HELLO };

	if (ch == s->coord) {
		m.u.hello.role = KN__ROLE_SERVER;
		m.u.hello.rank = s->cfg->rank;
		m.u.hello.addr = s->advertised;
		kn__chan_send(ch, &m);
		return;
	}
	if (ch->peer_role != KN__ROLE_WORKER || !s->layout ||
	    ch->peer_rank >= s->layout->nworkers) {
		kn__chan_send_error(ch, -EPERM,
				    "only workers of this job "
				    "connect to a server");
		kn__chan_close(ch);
		return;
	}
	sw = &s->workers[ch->peer_rank];
	if (sw->ch) {
		/*
		 * The coordinator refuses a second connection for a rank
		 * too: whoever holds the secret must not take over a
		 * live worker's slots.  A worker that reconnects has
		 * closed its old connection first.
		 */
		kn__chan_send_error(ch, -EEXIST,
				    "this rank is connected already: refused");
		kn__chan_close(ch);
		return;
	}
	free(sw->params);
	free(sw->grads);
	*sw = (struct srv_worker){
		.ch = ch,
		.params = calloc(s->layout->ntensors, sizeof(*sw->params)),
		.grads = calloc(s->layout->ntensors, sizeof(*sw->grads)),
	};
	if (!sw->params || !sw->grads)
		kn__chan_close(ch);
}

static void on_closed(struct kn__node *n, struct kn__chan *ch, int status)
{
	struct server *s = srv_of(n);

	if (ch == s->coord) {
		/*
		 * Never joined (unreachable for the whole start-up timeout,
		 * or closed before the JOB): a server that never served is a
		 * failure, as a worker that never joined is, so that srun or
		 * mpirun does not report it as a success.
		 */
		if (!s->done && !s->joined) {
			kn__log(n,
				"never joined a job: the coordinator at %s:%u "
				"%s%s: exiting with failure",
				s->cfg->coordinator.host,
				s->cfg->coordinator.port,
				status ? "was not reached within the start-up "
					 "timeout: "
				       : "closed the connection before the job",
				status ? strerror(-status) : "");
			s->status = status ? status : -ECONNRESET;
		} else if (!s->done) {
			/*
			 * Before the SHUTDOWN (which comes first on a normal
			 * end, on this same connection): the job did not end
			 * well.  Exiting non-zero also lets a supervisor start
			 * again a server that the coordinator took for hung
			 * (kanel train, kanel launch with --checkpoint-dir).
			 */
			kn__log(n, "the coordinator went away before the "
				   "job's end: exiting with failure");
			s->status = status ? status : -ECONNRESET;
		}
		s->coord = NULL;
		s->done = true;
		return;
	}
	/* a refused claim (a rank outside the job) is in no table */
	if (s->workers && ch->peer_role == KN__ROLE_WORKER &&
	    ch->peer_rank < s->layout->nworkers &&
	    s->workers[ch->peer_rank].ch == ch) {
		/* its slots are free: it is no member any more */
		s->workers[ch->peer_rank].ch = NULL;
		s->workers[ch->peer_rank].ready = false;
		kn__srv_leave(s, ch->peer_rank);
	}
}

static const struct kn__node_ops server_ops = {
	.open = on_open,
	.message = on_message,
	.closed = on_closed,
	.imm = kn__srv_on_imm,
	.written = kn__srv_on_written,
};

static void server_free(struct server *s)
{
	for (uint32_t i = 0; i < s->nchunks; i++) {
		struct srv_chunk *ch = &s->chunks[i];

		kn__sync_rule_destroy(ch->rule);
		free(ch->master);
		free(ch->m);
		free(ch->v);
		free(ch->delivered);
		free(ch->announce);
		free(ch->pushes);
		free(ch->pushed);
		free(ch->queue);
		for (int o = 0; o < NOUT && !ch->direct; o++)
			free(ch->out[o]);
	}
	if (s->workers)
		for (uint32_t w = 0; w < s->layout->nworkers; w++) {
			free(s->workers[w].params);
			free(s->workers[w].grads);
		}
	for (int i = 0; i < CKPT_OPEN; i++)
		kn__ckpt_abort(s->ckpt[i]); /* unsealed: never a checkpoint */
	free(s->ckpt_desc);
	kn__auth_wipe(s->ckjob.key, sizeof(s->ckjob.key));
	kn__auth_wipe(s->ckjob.old_key, sizeof(s->ckjob.old_key));
	free(s->workers);
	free(s->chunks);
	free(s->writes);
	free(s->actions);
	free(s->srcs);
	free(s->weights);
	free(s->plan);
	free(s->slots);
	free(s->table);
	kn__layout_free(s->layout);
}

/* The smallest staleness that @q of the contributions do not exceed. */
static uint64_t stale_quantile(const struct srv_staleness *st, double q)
{
	uint64_t need = (uint64_t)(q * (double)st->count + 0.5), seen = 0;

	for (uint64_t t = 0; t < STALE_BUCKETS; t++) {
		seen += st->hist[t];
		if (seen >= need && seen)
			return t == STALE_BUCKETS - 1 ? st->max : t;
	}
	return st->max;
}

/*
 * --metrics: one JSON line appended in one write, so the lines of
 * several processes sharing the file do not interleave (O_APPEND, and
 * far below PIPE_BUF).  docs/configuration.md lists the keys.
 */
static void write_metrics(const struct server *s)
{
	const struct srv_staleness *st = &s->stale;
	char line[2048];
	int n, fd;

	n = snprintf(line, sizeof(line),
		     "{\"role\":\"server\",\"rank\":%u,\"status\":%d,"
		     "\"contributions\":%" PRIu64 ",\"staleness_mean\":%.4f,"
		     "\"staleness_p50\":%" PRIu64 ",\"staleness_p99\":%" PRIu64
		     ",\"staleness_max\":%" PRIu64 ",\"max_lead\":%" PRIu64
		     ",\"staleness_hist\":[",
		     s->cfg->rank, s->status, st->count,
		     st->count ? (double)st->sum / (double)st->count : 0.0,
		     stale_quantile(st, 0.5), stale_quantile(st, 0.99), st->max,
		     st->max_lead);
	for (int t = 0; t < STALE_BUCKETS && n > 0 && n < (int)sizeof(line);
	     t++)
		n += snprintf(line + n, sizeof(line) - (size_t)n, "%s%" PRIu64,
			      t ? "," : "", st->hist[t]);
	if (n > 0 && n < (int)sizeof(line) - 16) {
		size_t len = (size_t)n;

		len += (size_t)snprintf(line + len, sizeof(line) - len,
					"],\"stages\":{");
		len = kn__hist_json(line, len, sizeof(line), "gather",
				    &s->stages.gather);
		len = kn__hist_json(line, len, sizeof(line), "apply",
				    &s->stages.apply);
		len = kn__hist_json(line, len, sizeof(line), "turn",
				    &s->stages.turn);
		len = kn__hist_json(line, len, sizeof(line), "write",
				    &s->stages.write);
		if (len + 3 >= sizeof(line))
			return;
		len += (size_t)snprintf(line + len, sizeof(line) - len, "}}\n");
		n = (int)len;
	} else {
		return;
	}
	fd = open(s->cfg->metrics, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC,
		  0644);
	if (fd < 0 || write(fd, line, (size_t)n) != n)
		kn__log(&s->node, "cannot write the figures to %s: %s",
			s->cfg->metrics, strerror(errno));
	if (fd >= 0)
		close(fd);
}

/*
 * A heartbeat to the coordinator every quarter of the heartbeat timeout,
 * from the progress loop: a server that stops (SIGSTOP, a hang) stops
 * beating, and the coordinator names it instead of the job waiting on
 * it in silence.
 */
static void heartbeat(struct server *s)
{
	struct kn__msg m = { .type = KN__MSG_HEARTBEAT };
	double t = kn__now();

	if (!s->joined || !s->coord || !kn__chan_open(s->coord) ||
	    t - s->last_beat < s->cfg->heartbeat_timeout_ms / 4000.0)
		return;
	s->last_beat = t;
	kn__chan_send(s->coord, &m);
}

int kn__server_run(const struct kn__config *cfg, const uint8_t *secret,
		   size_t secret_len)
{
	struct server s = { .cfg = cfg };
	struct sockaddr_storage coord, self;
	char why[KN__CONFIG_WHY_MAX];
	socklen_t clen, slen;
	int ret;

	ret = kn__node_init(&s.node, kn__config_transport_name(cfg->transport),
			    KN__ROLE_SERVER, cfg->rank, secret, secret_len,
			    &server_ops, &s);
	if (ret)
		return ret;
	s.node.verbose = cfg->verbose;
	s.node.retry_until = kn__now() + cfg->startup_timeout_ms / 1000.0;
	ret = kn__config_resolve_why(&cfg->coordinator, &coord, &clen, why);
	if (ret) {
		kn__log(&s.node, "the coordinator's address %s", why);
		goto out;
	}
	ret = kn__config_resolve_why(&cfg->listen, &self, &slen, why);
	if (ret) {
		kn__log(&s.node, "--listen %s", why);
		goto out;
	}
	if (kn__addr_is_any(&self) && kn__addr_is_loopback(&coord))
		kn__addr_copy_ip(&self, &coord); /* a job on this machine */
	ret = kn__node_listen(&s.node, (struct sockaddr *)&self, slen);
	if (!ret)
		ret = kn__tp_listener_addr(s.node.listener, &s.advertised);
	if (!ret && kn__addr_is_any(&s.advertised))
		ret = kn__addr_local(&s.advertised);
	if (ret) {
		kn__log(&s.node, "cannot listen on %s:%u: %s", cfg->listen.host,
			cfg->listen.port, strerror(-ret));
		goto out;
	}
	ret = kn__node_connect(&s.node, (struct sockaddr *)&coord, clen,
			       KN__ROLE_COORDINATOR, 0, NULL, &s.coord);
	if (ret) {
		kn__log(&s.node, "cannot reach the coordinator at %s:%u: %s",
			cfg->coordinator.host, cfg->coordinator.port,
			strerror(-ret));
		goto out;
	}
	while (!s.done) {
		if (s.reconnect_at && kn__now() >= s.reconnect_at) {
			s.reconnect_at = 0;
			ret = kn__node_connect(
				&s.node, (struct sockaddr *)&coord, clen,
				KN__ROLE_COORDINATOR, 0, NULL, &s.coord);
			if (ret) {
				s.status = ret;
				break;
			}
		}
		heartbeat(&s);
		ret = kn__node_step(&s.node, 100, -1);
		if (ret < 0) {
			s.status = ret;
			break;
		}
	}
	ret = s.status;
	if (cfg->metrics[0])
		write_metrics(&s);
out:
	kn__node_fini(&s.node);
	server_free(&s);
	return ret;
}
