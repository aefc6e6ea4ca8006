/* SPDX-License-Identifier: Apache-2.0 */
/*
 * worker_boot.c - a worker's start-up, in the progress thread: the
 * tensor table to the coordinator, then at READY TABLE the layout, the
 * chunks' priority order, the buffers registered and granted to every
 * server (BUFFERS), worker 0's initial values (INIT), and once every
 * chunk's first model is in, READY START (after the SKIPs of a BSP
 * worker that rejoined a round behind).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "roles.h"
#include "worker_priv.h"

int kn__wk_send_table(struct kn_worker *w)
{
	struct kn__msg m = { .type = KN__MSG_TENSOR };

	for (uint32_t i = 0; i < w->ntensors; i++) {
		m.u.tensor.index = i;
		m.u.tensor.dtype = w->tensors[i].d.dtype;
		m.u.tensor.len = w->tensors[i].d.len;
		memcpy(m.u.tensor.key, w->tensors[i].d.key, KN__KEY_MAX);
		if (kn__chan_send(w->coord, &m))
			return -ENOTCONN;
	}
	m = (struct kn__msg){ .type = KN__MSG_TENSORS_END };
	m.u.tensors_end.count = w->ntensors;
	m.u.tensors_end.flags = w->own_optimizer ? KN__TABLE_OWN_OPTIMIZER : 0;
	return kn__chan_send(w->coord, &m);
}

struct urgency {
	int priority;
	uint32_t chunk;
};

static int by_urgency(const void *a, const void *b)
{
	const struct urgency *x = a, *y = b;

	if (x->priority != y->priority)
		return x->priority < y->priority ? -1 : 1;
	return x->chunk < y->chunk ? -1 : x->chunk > y->chunk;
}

/* The chunks by their tensors' priorities (ties: layout order). */
static int chunk_order(struct kn_worker *w)
{
	const struct kn__layout *l = w->layout;
	uint32_t n = l->nchunks;
	struct urgency *u = malloc((n + 1) * sizeof(*u));

	w->order = malloc((n + 1) * sizeof(*w->order));
	w->place = malloc((n + 1) * sizeof(*w->place));
	w->ready = calloc((n + 63) / 64 + 1, sizeof(*w->ready));
	if (!u || !w->order || !w->place || !w->ready) {
		free(u);
		return -ENOMEM;
	}
	for (uint32_t c = 0; c < n; c++)
		u[c] = (struct urgency){
			.priority = w->tensors[l->chunks[c].tensor].priority,
			.chunk = c,
		};
	qsort(u, n, sizeof(*u), by_urgency);
	for (uint32_t k = 0; k < n; k++) {
		w->order[k] = u[k].chunk;
		w->place[u[k].chunk] = k;
	}
	free(u);
	w->window = w->job.u.job.push_window;
	return 0;
}

/* READY TABLE: build the layout, register buffers, go to the servers. */
void kn__wk_go_to_servers(struct kn_worker *w)
{
	struct kn__tensor_desc *d = calloc(w->ntensors + 1, sizeof(*d));
	bool sum = kn__job_sums(w->job.u.job.protocol, w->job.u.job.optimizer);
	int ret;

	if (!d) {
		kn__wk_fail(w, -ENOMEM);
		return;
	}
	for (uint32_t i = 0; i < w->ntensors; i++)
		d[i] = w->tensors[i].d;
	ret = kn__layout_build(d, w->ntensors, w->job.u.job.servers,
			       w->job.u.job.workers, w->job.u.job.chunk_bytes,
			       &w->layout);
	free(d);
	if (!ret) {
		w->chunks = calloc(w->layout->nchunks + 1, sizeof(*w->chunks));
		ret = w->chunks ? chunk_order(w) : -ENOMEM;
	}
	for (uint32_t i = 0; !ret && i < w->ntensors; i++) {
		struct wk_tensor *t = &w->tensors[i];
		size_t bytes = t->d.len * kn_dtype_size(t->d.dtype);

		/* pulls land in params (summing: grads), or the inbox */
		ret = kn__tp_mr_reg(w->node.ctx, t->params, bytes,
				    sum || t->inbox ? 0 : KN_TP_REMOTE_WRITE,
				    &t->pmr);
		if (!ret)
			ret = kn__tp_mr_reg(
				w->node.ctx, t->grads, bytes,
				sum && !t->inbox ? KN_TP_REMOTE_WRITE : 0,
				&t->gmr);
		if (!ret && t->inbox)
			ret = kn__tp_mr_reg(w->node.ctx, t->inbox, bytes,
					    KN_TP_REMOTE_WRITE, &t->imr);
	}
	for (uint32_t s = 0; !ret && s < w->job.u.job.servers; s++) {
		struct wk_server *ws = &w->servers[s];

		ret = kn__node_connect(&w->node, (struct sockaddr *)&ws->addr,
				       kn__addr_len(&ws->addr), KN__ROLE_SERVER,
				       s, ws, &ws->ch);
	}
	if (ret) {
		kn__log(&w->node, "going to the servers: %s", strerror(-ret));
		kn__wk_fail(w, ret);
		return;
	}
	for (uint32_t c = 0; c < w->layout->nchunks; c++)
		w->chunks[c].expect = 1; /* the initial model */
	w->state = WK_SERVERS;
}

/*
 * What server @ws may write of @mr: all of it when the server writes
 * there at all (the region has remote write), else nothing (an empty
 * descriptor that no write can name).
 */
static int grant(struct wk_server *ws, struct kn__tp_mr *mr,
		 struct kn__tp_rdesc *rd)
{
	*rd = (struct kn__tp_rdesc){ 0 };
	if (!(kn__tp_mr_access(mr) & KN_TP_REMOTE_WRITE))
		return 0;
	return kn__tp_ep_grant(ws->ch->ep, mr, 0, kn__tp_mr_len(mr),
			       KN_TP_REMOTE_WRITE, rd);
}

void kn__wk_send_buffers(struct kn_worker *w, struct wk_server *ws)
{
	struct kn__msg m = { .type = KN__MSG_BUFFERS };

	for (uint32_t i = 0; i < w->ntensors; i++) {
		const struct wk_tensor *t = &w->tensors[i];
		bool sum = kn__job_sums(w->job.u.job.protocol,
					w->job.u.job.optimizer);
		int ret;

		m.u.buffers.index = i;
		ret = grant(ws, t->imr && !sum ? t->imr : t->pmr,
			    &m.u.buffers.params);
		if (!ret)
			ret = grant(ws, t->imr && sum ? t->imr : t->gmr,
				    &m.u.buffers.grads);
		if (ret) {
			kn__log(&w->node, "granting server %u its buffers: %s",
				ws->ch->peer_rank, strerror(-ret));
			kn__wk_fail(w, ret);
			return;
		}
		kn__chan_send(ws->ch, &m);
	}
	m = (struct kn__msg){ .type = KN__MSG_READY };
	m.u.ready.what = KN__READY_BUFFERS;
	kn__chan_send(ws->ch, &m);
}

/* Every server has our buffers: worker 0 writes the initial model. */
void kn__wk_send_init(struct kn_worker *w)
{
	const struct kn__layout *l = w->layout;

	if (w->cfg.rank != 0 || w->nslots < w->job.u.job.servers)
		return;
	for (; w->init_next < l->nchunks; w->init_next++) {
		uint32_t c = w->init_next;
		const struct kn__chunk *kc = &l->chunks[c];
		const struct wk_tensor *t = &w->tensors[kc->tensor];
		struct wk_server *s = &w->servers[kc->server];
		int ret = kn__chan_write(
			s->ch, t->pmr, kc->first * kn_dtype_size(t->d.dtype),
			kc->bytes, &s->slots, kn__layout_own_slot(l, c, 0),
			kn__imm(KN__IMM_INIT, 0, c), NULL);

		if (ret) {
			kn__wk_fail(w, ret);
			return;
		}
	}
}

/* The model is in hand: tell the coordinator we can start. */
void kn__wk_ready_to_start(struct kn_worker *w)
{
	struct kn__msg m = { .type = KN__MSG_READY };

	/* a worker already failed (the job cannot start: the coordinator
	 * said why) stays failed with that reason; the model can still
	 * land after it on a slow host */
	if (w->state == WK_FAILED)
		return;
	w->state = WK_MODEL;
	m.u.ready.what = KN__READY_START;
	kn__chan_send(w->coord, &m);
}

/* The SKIPs first_model_in asked for. */
static void post_skips(struct kn_worker *w)
{
	const struct kn__layout *l = w->layout;

	for (; w->skip_next < l->nchunks && w->state == WK_SERVERS;
	     w->skip_next++) {
		uint32_t c = w->skip_next;
		const struct kn__chunk *kc = &l->chunks[c];
		const struct wk_tensor *t = &w->tensors[kc->tensor];
		struct wk_server *s = &w->servers[kc->server];
		struct wk_chunk *wc = &w->chunks[c];
		/* the slot's contents are not read: any bytes of ours do */
		uint32_t parity = (uint32_t)(wc->written & 1);
		int ret;

		if (!wc->skip)
			continue;
		ret = kn__chan_write(
			s->ch, t->gmr, kc->first * kn_dtype_size(t->d.dtype),
			kc->bytes, &s->slots, kn__layout_own_slot(l, c, parity),
			kn__imm(KN__IMM_SKIP, parity, c), NULL);
		if (ret) {
			kn__log(&w->node, "sitting out a round of chunk %u: %s",
				c, strerror(-ret));
			kn__wk_fail(w, ret);
			return;
		}
		wc->skip = false;
		wc->pushed++;
		wc->written++;
		wc->wdone++; /* not waited for */
		wc->expect++;
	}
}

/*
 * Every chunk's first release is in.  Under BSP a chunk released with
 * an older version than another has a round in progress that we are a
 * member of: we sit it out (a SKIP in the push's place) and start once
 * its result is in, so that every chunk is at the newest version.
 */
void kn__wk_first_model_in(struct kn_worker *w)
{
	const struct kn__layout *l = w->layout;
	uint64_t newest = 0;

	if (!kn__sync_traits(w->job.u.job.protocol)->skips) {
		kn__wk_ready_to_start(w);
		return;
	}
	for (uint32_t c = 0; c < l->nchunks; c++)
		if (w->chunks[c].joined > newest)
			newest = w->chunks[c].joined;
	for (uint32_t c = 0; c < l->nchunks; c++) {
		if (w->chunks[c].joined == newest)
			continue;
		w->chunks[c].skip = true;
		w->skipping++;
	}
	w->skip_next = 0;
	post_skips(w);
	if (w->skipping)
		kn__log(&w->node,
			"rejoined with %u of %u chunks a round behind the "
			"others: sitting that round out",
			w->skipping, l->nchunks);
	else
		kn__wk_ready_to_start(w);
}
