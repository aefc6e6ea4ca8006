/* SPDX-License-Identifier: Apache-2.0 */
/*
 * swrdma.h - what the software-RDMA providers (tcp, dpdk) share of an
 * endpoint: its grant table, and its queue of posted recv buffers with
 * their cancellation when the endpoint fails or closes.
 *
 * Both providers give RDMA semantics with no NIC to enforce them, so
 * each endpoint keeps the grants its peer may use: ranges of our regions
 * under random 32-bit keys, sorted by key, looked up for every one-sided
 * frame or segment that arrives.  Lookup is inline (it is on the receive
 * path); the rest is in swrdma.c.  Nothing here does I/O or knows a
 * provider's objects beyond the generic heads of transport_priv.h.
 */
#ifndef KN_TRANSPORT_SWRDMA_H
#define KN_TRANSPORT_SWRDMA_H

#include <stdbool.h>
#include <stdint.h>

#include "transport_priv.h"

/* A range of one of our regions that an endpoint's peer may touch. */
struct kn__swr_grant {
	uint32_t key;	 /* random; unique among the endpoint's grants */
	uint32_t access; /* KN_TP_REMOTE_* */
	struct kn__tp_mr *mr;
	uint64_t off, len;
};

/* An endpoint's grants, sorted by key; zeroed is empty. */
struct kn__swr_grants {
	struct kn__swr_grant *v;
	uint32_t n, cap;
};

/* The grant of @t with @key, or NULL. */
static inline const struct kn__swr_grant *
kn__swr_grant_find(const struct kn__swr_grants *t, uint32_t key)
{
	uint32_t lo = 0, hi = t->n;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (t->v[mid].key == key)
			return &t->v[mid];
		if (t->v[mid].key < key)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/*
 * Grant [@off, +@len) of @mr with @access under a new key, described in
 * *@rdesc for the peer: 0, -ENOMEM, or kn__tp_random's error.  The key
 * is random and unused in @t; with @test_keys it is the grant's number
 * times 0x100001 instead (KN_TP_CTX_TEST_KEYS: reproducible frames).
 */
int kn__swr_grant_add(struct kn__swr_grants *t, struct kn__tp_mr *mr,
		      uint64_t off, uint64_t len, uint32_t access,
		      bool test_keys, struct kn__tp_rdesc *rdesc);

/* Drop @t's grants of @mr (a region going away). */
void kn__swr_grant_revoke(struct kn__swr_grants *t, const struct kn__tp_mr *mr);

/* Free @t's memory; it is empty after. */
void kn__swr_grants_fini(struct kn__swr_grants *t);

#define KN_SWR_RQ_DEPTH 1024 /* posted recv buffers per endpoint */

/* A posted recv buffer, borrowed until its completion is reaped. */
struct kn__swr_recv {
	char *buf;
	uint32_t len;
	void *user;
};

/* The recv buffers posted to an endpoint, oldest at head. */
struct kn__swr_rq {
	struct kn__swr_recv v[KN_SWR_RQ_DEPTH];
	uint32_t head, tail; /* free-running */
};

static inline bool kn__swr_rq_empty(const struct kn__swr_rq *q)
{
	return q->head == q->tail;
}

/* Post [@buf, +@len) as the newest buffer: 0, or -EAGAIN when full. */
int kn__swr_rq_post(struct kn__swr_rq *q, char *buf, size_t len, void *user);

/*
 * A failed endpoint's buffers to @cq as RECV completions with
 * -ECANCELED, oldest first, while @cq has room: true once none is left.
 */
bool kn__swr_rq_cancel(struct kn__swr_rq *q, struct kn__tp_cq *cq,
		       struct kn__tp_ep *ep);

/*
 * A closing endpoint's buffers to @cq as above, with no endpoint named
 * (it is gone), growing @cq if it must (@provider names it in the log).
 */
void kn__swr_rq_drop(struct kn__swr_rq *q, struct kn__tp_cq *cq,
		     const char *provider);

#endif /* KN_TRANSPORT_SWRDMA_H */
