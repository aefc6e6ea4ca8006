/* SPDX-License-Identifier: Apache-2.0 */
/*
 * swrdma.h - the endpoint core the software-RDMA providers (tcp, dpdk)
 * share: its grant table, its queue of posted recv buffers, its ring of
 * posted operations released in post order, messages held for recv
 * buffers not yet posted, failure and cancel-on-close, and the context's
 * lists (its endpoints, and the ready list of those with completions to
 * release).  Each provider keeps only its wire and its I/O.
 *
 * Both providers give RDMA semantics with no NIC to enforce them, so
 * each endpoint keeps the grants its peer may use: ranges of our regions
 * under random 32-bit keys, sorted by key, looked up for every one-sided
 * frame or segment that arrives.  Lookup is inline (it is on the receive
 * path); the rest is in swrdma.c.
 *
 * Each provider's endpoint begins with struct kn__swr_ep and its
 * context with struct kn__swr_ctx; its ops begin with struct kn__swr_op
 * in an array of its own (the core steps through it by op_size).
 * Nothing here does I/O: where failure must stop a socket or a port,
 * the core calls the provider's hooks (struct kn__swr_prov).
 */
#ifndef KN_TRANSPORT_SWRDMA_H
#define KN_TRANSPORT_SWRDMA_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

#include "list.h"
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

/*
 * Messages that arrived before a recv was posted for them, each in a
 * buffer of its own (malloc'd), oldest at head: a provider that cannot
 * stop its peer's sends (dpdk) holds them as a socket buffer would.
 */
#define KN_SWR_HELD 64

struct kn__swr_held {
	struct kn__swr_recv v[KN_SWR_HELD];
	uint32_t head, tail; /* free-running */
};

/* ---- the endpoint core ---- */

#define KN_SWR_SQ_DEPTH 1024 /* posted operations per endpoint */

enum kn__swr_state {
	KN_SWR_STARTING, /* connecting, or in its handshake */
	KN_SWR_OPEN,
	KN_SWR_ERROR, /* failed: only completions leave it */
};

/*
 * A posted write_imm, read or send, from post to release; each
 * provider's own op begins with it.
 */
struct kn__swr_op {
	uint32_t kind; /* KN_TP_OP_* */
	int status;
	bool done;
	uint32_t refs; /* holds on its buffer (zero-copy sends): not
			  released before they are let go */
	void *user;
	uint64_t bytes;
};

struct kn__swr_ep;

/* What the core needs of a provider. */
struct kn__swr_prov {
	const char *name; /* in logs: "tcp" */
	/* @e failed (state ERROR now, error set; it was in state @was):
	 * stop its I/O and drop what it had in flight on the wire. */
	void (*stop)(struct kn__swr_ep *e, enum kn__swr_state was);
	/* @e's owed completion went to the queue: it may receive again.
	 * May be NULL. */
	void (*resume)(struct kn__swr_ep *e);
};

/* The context's half; each provider's context begins with it. */
struct kn__swr_ctx {
	struct kn__tp_ctx base;
	const struct kn__swr_prov *prov;
	struct kn__tp_cq cq; /* completions not yet polled */
	struct kn__list eps; /* every endpoint not closed */
	/* the endpoints that may have completions to release, oldest
	 * first: poll visits these, not every endpoint */
	struct kn__list ready;
};

/* The endpoint's half; each provider's endpoint begins with it. */
struct kn__swr_ep {
	struct kn__tp_ep base;
	enum kn__swr_state state;
	int error;	    /* first failure, negative errno */
	bool client;	    /* we connected: a failed start is a CONNECT */
	bool hidden;	    /* accepted, not yet the user's: reports nothing */
	bool closing;	    /* closed, freed once its I/O is done */
	bool connect_event; /* a CONNECT completion is owed */
	bool disc_event;    /* a DISCONNECT completion is owed */
	bool owed;	    /* @owed_comp waits for room in the CQ */
	struct kn__tp_completion owed_comp;
	char peer_name[64];
	struct kn__list link;  /* on the context's eps */
	struct kn__list ready; /* on the context's ready list */
	struct kn__swr_grants grants;
	/* the provider's ops, @op_size bytes each: head released, tail */
	char *ops;
	uint32_t op_size, op_head, op_tail;
	struct kn__swr_rq rq; /* posted recv buffers */
};

static inline struct kn__swr_ctx *kn__swr_ctx_of(const struct kn__swr_ep *e)
{
	return container_of(e->base.ctx, struct kn__swr_ctx, base);
}

/* Set up @c's lists, for @prov (its cq is the provider's to init). */
void kn__swr_ctx_init(struct kn__swr_ctx *c, const struct kn__swr_prov *prov);

/*
 * Set up a zeroed @e of @c for @user, its ring at @ops of
 * KN_SWR_SQ_DEPTH ops of @op_size bytes (the provider's op type).  The
 * provider puts it on c->eps once it is fully made.
 */
void kn__swr_ep_init(struct kn__swr_ep *e, struct kn__swr_ctx *c, void *user,
		     void *ops, size_t op_size);

/* Op @i of @e's ring (a free-running index). */
static inline struct kn__swr_op *kn__swr_op_at(const struct kn__swr_ep *e,
					       uint32_t i)
{
	return (struct kn__swr_op *)(void *)(e->ops +
					     (size_t)(i % KN_SWR_SQ_DEPTH) *
						     e->op_size);
}

/*
 * A new op of @kind for @user at the ring's tail in *@out (not yet
 * counted: the provider moves op_tail once it queued the op's frame);
 * -ENOTCONN when @e failed, -EAGAIN when the ring is full.
 */
static inline int kn__swr_op_new(struct kn__swr_ep *e, uint32_t kind,
				 void *user, struct kn__swr_op **out)
{
	struct kn__swr_op *op;

	if (e->state == KN_SWR_ERROR)
		return -ENOTCONN;
	if (e->op_tail - e->op_head == KN_SWR_SQ_DEPTH)
		return -EAGAIN;
	op = kn__swr_op_at(e, e->op_tail);
	*op = (struct kn__swr_op){ .kind = kind, .user = user };
	*out = op;
	return 0;
}

/*
 * @e may have something to release now (an operation done, an owed
 * completion, a state change): put it on its context's ready list for
 * the next poll.  A closing endpoint is gone from the list for good.
 */
static inline void kn__swr_ep_ready(struct kn__swr_ep *e)
{
	if (kn__list_on(&e->ready) || e->closing)
		return;
	kn__list_append(&kn__swr_ctx_of(e)->ready, &e->ready);
}

/* One log line about @e: "kanel: PROVIDER: peer HOST:PORT: ...". */
void kn__swr_ep_log(const struct kn__swr_ep *e, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/*
 * Move @e to the error state once: log @why (unless the peer merely hung
 * up), stop its I/O (the provider's stop hook), and complete every
 * pending operation, the oldest with @err and the rest with -ECANCELED.
 * The completions leave through kn__swr_ep_release(), in order: CONNECT
 * (a client still starting) or DISCONNECT last.
 */
void kn__swr_ep_fail(struct kn__swr_ep *e, int err, const char *why, ...)
	__attribute__((format(printf, 3, 4)));

/*
 * Move @e's finished work to the completion queue, in order: false when
 * the queue filled before all of it went.
 */
bool kn__swr_ep_release(struct kn__swr_ep *e);

/*
 * Release the work of the endpoints on @c's ready list, oldest first,
 * until the queue fills (the rest waits for the next poll).
 */
void kn__swr_release_ready(struct kn__swr_ctx *c);

/*
 * Post [@buf, +@len) as @e's newest recv buffer, borrowed until its
 * completion is reaped: 0, -ENOTCONN (failed), or -EAGAIN (full).
 */
int kn__swr_post_recv(struct kn__swr_ep *e, char *buf, size_t len, void *user);

/* Queue a completion of @e's, growing the queue if it must. */
void kn__swr_ep_push(struct kn__swr_ep *e, uint32_t op, void *user,
		     uint32_t imm, uint64_t bytes);

/*
 * Hand @h's messages to @e's posted recv buffers, oldest to oldest,
 * while @e is open (one too large for its buffer fails @e).
 */
void kn__swr_held_match(struct kn__swr_ep *e, struct kn__swr_held *h);

/* Free the messages @h still holds. */
void kn__swr_held_fini(struct kn__swr_held *h);

/* Take @e off its context's lists: it is being closed. */
void kn__swr_ep_unlink(struct kn__swr_ep *e);

/*
 * A closed endpoint's operations and recv buffers to the completion
 * queue (the unfinished ones with -ECANCELED, no endpoint named: it is
 * gone), growing the queue if it must.
 */
void kn__swr_ep_cancel(struct kn__swr_ep *e);

/* Free what the core of @e allocated (its grants). */
void kn__swr_ep_fini(struct kn__swr_ep *e);

#endif /* KN_TRANSPORT_SWRDMA_H */
