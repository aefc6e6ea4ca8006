/* SPDX-License-Identifier: Apache-2.0 */
/*
 * swrdma.c - the endpoint core the software-RDMA providers share (tcp,
 * dpdk): grants, posted recv buffers, held messages, failure, release
 * in post order and cancel-on-close.  See swrdma.h.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "swrdma.h"

/* ---- grants ---- */

int kn__swr_grant_add(struct kn__swr_grants *t, struct kn__tp_mr *mr,
		      uint64_t off, uint64_t len, uint32_t access,
		      bool test_keys, struct kn__tp_rdesc *rdesc)
{
	uint32_t key, pos;

	if (t->n == t->cap) {
		uint32_t n = t->cap ? 2 * t->cap : 8;
		struct kn__swr_grant *g = realloc(t->v, n * sizeof(*g));

		if (!g)
			return -ENOMEM;
		t->v = g;
		t->cap = n;
	}
	/* a key a peer cannot guess, and none it was given before */
	do {
		int ret = 0;

		if (test_keys)
			key = (t->n + 1) * 0x100001u;
		else
			ret = kn__tp_random(&key, sizeof(key));
		if (ret)
			return ret;
	} while (!key || kn__swr_grant_find(t, key));
	for (pos = t->n; pos && t->v[pos - 1].key > key; pos--)
		t->v[pos] = t->v[pos - 1];
	t->v[pos] = (struct kn__swr_grant){
		.key = key,
		.access = access,
		.mr = mr,
		.off = off,
		.len = len,
	};
	t->n++;
	*rdesc = (struct kn__tp_rdesc){
		.addr = 0, .len = len, .key = key, .access = access
	};
	return 0;
}

void kn__swr_grant_revoke(struct kn__swr_grants *t, const struct kn__tp_mr *mr)
{
	uint32_t k = 0;

	for (uint32_t i = 0; i < t->n; i++)
		if (t->v[i].mr != mr)
			t->v[k++] = t->v[i];
	t->n = k;
}

void kn__swr_grants_fini(struct kn__swr_grants *t)
{
	free(t->v);
	*t = (struct kn__swr_grants){ 0 };
}

/* ---- posted recv buffers ---- */

int kn__swr_post_recv(struct kn__swr_ep *e, char *buf, size_t len, void *user)
{
	struct kn__swr_rq *q = &e->rq;

	if (e->state == KN_SWR_ERROR)
		return -ENOTCONN;
	if (q->tail - q->head == KN_SWR_RQ_DEPTH)
		return -EAGAIN;
	q->v[q->tail++ % KN_SWR_RQ_DEPTH] = (struct kn__swr_recv){
		buf, len > UINT32_MAX ? UINT32_MAX : (uint32_t)len, user
	};
	return 0;
}

/*
 * A failed endpoint's buffers to @cq as RECV completions with
 * -ECANCELED, oldest first, while @cq has room: true once none is left.
 */
static bool rq_cancel(struct kn__swr_rq *q, struct kn__tp_cq *cq,
		      struct kn__tp_ep *ep)
{
	while (q->head != q->tail) {
		struct kn__swr_recv *r = &q->v[q->head % KN_SWR_RQ_DEPTH];
		struct kn__tp_completion comp = { .user = r->user,
						  .ep = ep,
						  .status = -ECANCELED,
						  .op = KN_TP_OP_RECV };

		if (!kn__tp_cq_push(cq, &comp))
			return false;
		q->head++;
	}
	return true;
}

/*
 * A closing endpoint's buffers to @cq as above, with no endpoint named
 * (it is gone), growing @cq if it must (@provider names it in the log).
 */
static void rq_drop(struct kn__swr_rq *q, struct kn__tp_cq *cq,
		    const char *provider)
{
	for (; q->head != q->tail; q->head++) {
		struct kn__tp_completion comp = {
			.user = q->v[q->head % KN_SWR_RQ_DEPTH].user,
			.status = -ECANCELED,
			.op = KN_TP_OP_RECV,
		};

		kn__tp_cq_push_grow(cq, &comp, provider);
	}
}

/* ---- held messages ---- */

void kn__swr_held_match(struct kn__swr_ep *e, struct kn__swr_held *h)
{
	while (h->head != h->tail && !kn__swr_rq_empty(&e->rq) &&
	       e->state == KN_SWR_OPEN) {
		struct kn__swr_recv *m = &h->v[h->head % KN_SWR_HELD];
		struct kn__swr_recv *r = &e->rq.v[e->rq.head % KN_SWR_RQ_DEPTH];

		if (m->len > r->len) {
			kn__swr_ep_fail(e, -EMSGSIZE,
					"message of %u bytes for a recv buffer "
					"of %u",
					m->len, r->len);
			return;
		}
		memcpy(r->buf, m->buf, m->len);
		kn__swr_ep_push(e, KN_TP_OP_RECV, r->user, 0, m->len);
		free(m->buf);
		h->head++;
		e->rq.head++;
	}
}

void kn__swr_held_fini(struct kn__swr_held *h)
{
	for (; h->head != h->tail; h->head++)
		free(h->v[h->head % KN_SWR_HELD].buf);
}

/* ---- the endpoint core ---- */

void kn__swr_ctx_init(struct kn__swr_ctx *c, const struct kn__swr_prov *prov)
{
	c->prov = prov;
	kn__list_init(&c->eps);
	kn__list_init(&c->ready);
}

void kn__swr_ep_init(struct kn__swr_ep *e, struct kn__swr_ctx *c, void *user,
		     void *ops, size_t op_size)
{
	e->base = (struct kn__tp_ep){ &c->base, user };
	e->ops = ops;
	e->op_size = (uint32_t)op_size;
}

void kn__swr_ep_log(const struct kn__swr_ep *e, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	kn__tp_peer_vlog(kn__swr_ctx_of(e)->prov->name, e->peer_name, fmt, ap);
	va_end(ap);
}

void kn__swr_ep_fail(struct kn__swr_ep *e, int err, const char *why, ...)
{
	enum kn__swr_state was = e->state;
	bool first = true;
	va_list ap;

	if (e->state == KN_SWR_ERROR)
		return;
	va_start(ap, why);
	kn__tp_fail_vlog(kn__swr_ctx_of(e)->prov->name, e->peer_name, err, why,
			 ap);
	va_end(ap);
	if (e->state == KN_SWR_STARTING && e->client)
		e->connect_event = true;
	else if (!e->hidden)
		e->disc_event = true;
	e->state = KN_SWR_ERROR;
	e->error = err;
	kn__swr_ctx_of(e)->prov->stop(e, was);
	for (uint32_t i = e->op_head; i != e->op_tail; i++) {
		struct kn__swr_op *op = kn__swr_op_at(e, i);

		if (op->done)
			continue;
		op->done = true;
		op->status = first ? err : -ECANCELED;
		first = false;
	}
	e->owed = false;
	kn__swr_ep_ready(e);
}

bool kn__swr_ep_release(struct kn__swr_ep *e)
{
	struct kn__swr_ctx *c = kn__swr_ctx_of(e);
	struct kn__tp_completion comp = { .ep = &e->base };

	if (e->hidden)
		return true;
	if (e->connect_event && e->state != KN_SWR_STARTING) {
		comp.op = KN_TP_OP_CONNECT;
		comp.user = e->base.user;
		comp.status = e->state == KN_SWR_ERROR ? e->error : 0;
		if (!kn__tp_cq_push(&c->cq, &comp))
			return false;
		e->connect_event = false;
	}
	if (e->owed) {
		if (!kn__tp_cq_push(&c->cq, &e->owed_comp))
			return false;
		e->owed = false;
		if (c->prov->resume)
			c->prov->resume(e);
	}
	while (e->op_head != e->op_tail) {
		struct kn__swr_op *op = kn__swr_op_at(e, e->op_head);

		/* the kernel may still read a zero-copy send's buffer */
		if (!op->done || op->refs)
			break;
		comp = (struct kn__tp_completion){
			.user = op->user,
			.ep = &e->base,
			.status = op->status,
			.op = op->kind,
			.bytes = op->status ? 0 : op->bytes,
		};
		if (!kn__tp_cq_push(&c->cq, &comp))
			return false;
		e->op_head++;
	}
	if (e->state != KN_SWR_ERROR)
		return true;
	if (!rq_cancel(&e->rq, &c->cq, &e->base))
		return false;
	if (e->disc_event) {
		comp = (struct kn__tp_completion){ .user = e->base.user,
						   .ep = &e->base,
						   .status = e->error,
						   .op = KN_TP_OP_DISCONNECT };
		if (!kn__tp_cq_push(&c->cq, &comp))
			return false;
		e->disc_event = false;
	}
	return true;
}

void kn__swr_release_ready(struct kn__swr_ctx *c)
{
	struct kn__list *n;

	/* off the list first: releasing may make it ready again */
	while ((n = kn__list_first(&c->ready))) {
		struct kn__swr_ep *e =
			container_of(n, struct kn__swr_ep, ready);

		kn__list_del(n);
		if (!kn__swr_ep_release(e)) {
			kn__swr_ep_ready(e); /* the queue is full: next poll */
			break;
		}
	}
}

void kn__swr_ep_push(struct kn__swr_ep *e, uint32_t op, void *user,
		     uint32_t imm, uint64_t bytes)
{
	struct kn__swr_ctx *c = kn__swr_ctx_of(e);
	struct kn__tp_completion comp = {
		.user = user,
		.ep = &e->base,
		.op = op,
		.imm = imm,
		.bytes = bytes,
	};

	kn__tp_cq_push_grow(&c->cq, &comp, c->prov->name);
}

void kn__swr_ep_unlink(struct kn__swr_ep *e)
{
	kn__list_del(&e->link);
	kn__list_del(&e->ready);
}

void kn__swr_ep_cancel(struct kn__swr_ep *e)
{
	struct kn__swr_ctx *c = kn__swr_ctx_of(e);

	for (; e->op_head != e->op_tail; e->op_head++) {
		struct kn__swr_op *op = kn__swr_op_at(e, e->op_head);
		struct kn__tp_completion comp = {
			.user = op->user,
			.status = op->done ? op->status : -ECANCELED,
			.op = op->kind,
			.bytes = op->done && !op->status ? op->bytes : 0,
		};

		kn__tp_cq_push_grow(&c->cq, &comp, c->prov->name);
	}
	rq_drop(&e->rq, &c->cq, c->prov->name);
}

void kn__swr_ep_fini(struct kn__swr_ep *e)
{
	kn__swr_grants_fini(&e->grants);
}
