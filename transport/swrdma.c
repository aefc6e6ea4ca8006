/* SPDX-License-Identifier: Apache-2.0 */
/*
 * swrdma.c - the endpoint parts the software-RDMA providers share (tcp,
 * dpdk): the grant table and the queue of posted recv buffers.  See
 * swrdma.h.
 */
#include <errno.h>
#include <stdlib.h>

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

int kn__swr_rq_post(struct kn__swr_rq *q, char *buf, size_t len, void *user)
{
	if (q->tail - q->head == KN_SWR_RQ_DEPTH)
		return -EAGAIN;
	q->v[q->tail++ % KN_SWR_RQ_DEPTH] = (struct kn__swr_recv){
		buf, len > UINT32_MAX ? UINT32_MAX : (uint32_t)len, user
	};
	return 0;
}

bool kn__swr_rq_cancel(struct kn__swr_rq *q, struct kn__tp_cq *cq,
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

void kn__swr_rq_drop(struct kn__swr_rq *q, struct kn__tp_cq *cq,
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
