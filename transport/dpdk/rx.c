/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rx.c - what arrives on the port: each frame is decoded (packet.c),
 * matched to its endpoint by id, secret token and the peer's addresses,
 * its acknowledgement handed to the send stream (tx.c), and a data
 * segment accepted only if it is the next in sequence: earlier ones are
 * duplicates, later ones wait for the retransmission go-back-N brings;
 * either way the peer gets an acknowledgement of where we are.  An
 * accepted segment is copied once, from the mbuf straight into the
 * region it targets, after its grant, bounds and place in its message
 * are checked.
 *
 * Packets that do not name a live endpoint with its token (a stranger,
 * or a peer from before a restart) are dropped and counted, without
 * failing anything: otherwise whoever can send to the port could close
 * endpoints.  A packet that does name one and is malformed or breaks the
 * endpoint's rules fails that endpoint alone, with the reason logged.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <rte_mbuf.h>

#include "dpdk.h"

static bool in_range(uint64_t off, uint64_t len, uint64_t size)
{
	return off <= size && len <= size - off;
}

/* The target of a one-sided segment: NULL (the endpoint failed) if the
 * grant, its rights or the range do not allow it. */
static char *target(struct dp_ep *ep, const struct kn__dp_hdr *h, uint64_t len,
		    uint32_t right)
{
	const struct kn__swr_grant *g =
		kn__swr_grant_find(&ep->sw.grants, h->key);

	if (!g || !(g->access & right)) {
		kn__swr_ep_fail(&ep->sw, -EPERM,
				"%s of key %#x, which it was not "
				"granted",
				right == KN_TP_REMOTE_WRITE ? "write" : "read",
				h->key);
		return NULL;
	}
	if (!in_range(h->off, len, g->len)) {
		kn__swr_ep_fail(&ep->sw, -EINVAL,
				"%s of %llu bytes at %llu outside "
				"its grant of %llu bytes",
				right == KN_TP_REMOTE_WRITE ? "write" : "read",
				(unsigned long long)len,
				(unsigned long long)h->off,
				(unsigned long long)g->len);
		return NULL;
	}
	return g->mr->addr + g->off + h->off;
}

/* A segment that does not continue the message in progress. */
static bool out_of_place(struct dp_ep *ep, const struct kn__dp_hdr *h)
{
	bool first = h->flags & KN_DP_F_FIRST;

	if (first == (ep->rx_op == 0) && (first || ep->rx_op == h->op))
		return false;
	kn__swr_ep_fail(&ep->sw, -EPROTO, "segment of op %u out of its message",
			h->op);
	return true;
}

static void on_write(struct dp_ep *ep, const struct kn__dp_pkt *p)
{
	const struct kn__dp_hdr *h = &p->h;
	char *dst;

	if (out_of_place(ep, h))
		return;
	if (h->flags & KN_DP_F_FIRST) {
		ep->rx_op = KN_DP_WRITE;
		ep->rx_key = h->key;
		ep->rx_next = h->off;
		ep->rx_bytes = 0;
	} else if (h->key != ep->rx_key || h->off != ep->rx_next) {
		kn__swr_ep_fail(&ep->sw, -EPROTO,
				"write segment at %llu, expected %llu",
				(unsigned long long)h->off,
				(unsigned long long)ep->rx_next);
		return;
	}
	dst = target(ep, h, h->len, KN_TP_REMOTE_WRITE);
	if (!dst)
		return;
	memcpy(dst, p->payload, h->len);
	ep->rx_next += h->len;
	ep->rx_bytes += h->len;
	if (h->flags & KN_DP_F_LAST) {
		kn__swr_ep_push(&ep->sw, KN_TP_OP_RECV_IMM, ep->sw.base.user,
				h->imm, ep->rx_bytes);
		ep->rx_op = 0;
	}
}

static void on_read_req(struct dp_ep *ep, const struct kn__dp_pkt *p)
{
	const struct kn__dp_hdr *h = &p->h;
	const struct kn__swr_grant *g;
	struct dp_msg m;
	char *src;

	if (out_of_place(ep, h))
		return;
	if (h->total > DP_MAX_POST) {
		kn__swr_ep_fail(&ep->sw, -EMSGSIZE, "read of %u bytes",
				h->total);
		return;
	}
	src = target(ep, h, h->total, KN_TP_REMOTE_READ);
	if (!src)
		return;
	g = kn__swr_grant_find(&ep->sw.grants, h->key);
	m = (struct dp_msg){ .op = KN_DP_READ_RESP,
			     .op_idx = UINT32_MAX,
			     .src = src,
			     .mr = container_of(g->mr, struct dp_mr, base),
			     .len = h->total };
	if (dp_tx_queue(ep, &m))
		kn__swr_ep_fail(&ep->sw, -EPROTO,
				"more reads outstanding than it may post");
}

/* The oldest of our reads still waiting for its answer. */
static struct dp_op *open_read(struct dp_ep *ep)
{
	for (; ep->rd_next != ep->sw.op_tail; ep->rd_next++) {
		struct dp_op *op = &ep->ops[ep->rd_next % DP_SQ_DEPTH];

		if (op->sw.kind == KN_TP_OP_READ && !op->sw.done)
			return op;
	}
	return NULL;
}

static void on_read_resp(struct dp_ep *ep, const struct kn__dp_pkt *p)
{
	const struct kn__dp_hdr *h = &p->h;
	struct dp_op *op = open_read(ep);

	if (out_of_place(ep, h))
		return;
	if (!op) {
		kn__swr_ep_fail(&ep->sw, -EPROTO,
				"read response with no read posted");
		return;
	}
	if (h->off != op->got || h->len > op->len - op->got ||
	    ((h->flags & KN_DP_F_LAST) != 0) != (op->got + h->len == op->len)) {
		kn__swr_ep_fail(
			&ep->sw, -EPROTO,
			"read response of %u bytes at %llu for a read of "
			"%llu (%llu landed)",
			h->len, (unsigned long long)h->off,
			(unsigned long long)op->len,
			(unsigned long long)op->got);
		return;
	}
	memcpy(op->dst + op->got, p->payload, h->len);
	op->got += h->len;
	ep->rx_op = KN_DP_READ_RESP;
	if (h->flags & KN_DP_F_LAST) {
		op->sw.done = true;
		op->sw.bytes = op->len;
		ep->rx_op = 0;
		ep->rd_next++;
		kn__swr_ep_ready(&ep->sw);
	}
}

/*
 * A SEND segment: false if it must wait (RNR).  A message that finds no
 * recv posted is held in a buffer of its own (up to KN_SWR_HELD of them),
 * as a TCP socket buffer would hold it, so that the sender's SEND
 * completes once the message is here, whatever the receiver posts when.
 */
static bool on_send(struct dp_ep *ep, const struct kn__dp_pkt *p)
{
	const struct kn__dp_hdr *h = &p->h;
	struct dp_ctx *c = dp_ep_ctx(ep);

	if (out_of_place(ep, h))
		return true;
	if (h->flags & KN_DP_F_FIRST) {
		if (!kn__swr_rq_empty(&ep->sw.rq) &&
		    ep->held.head == ep->held.tail) {
			ep->rx_recv =
				ep->sw.rq.v[ep->sw.rq.head++ % KN_SWR_RQ_DEPTH];
			ep->rx_unexp = false;
		} else if (h->total > c->sw.base.max_msg) {
			kn__swr_ep_fail(&ep->sw, -EMSGSIZE,
					"message of %u bytes, above "
					"the %u this end takes",
					h->total, c->sw.base.max_msg);
			return true;
		} else if (ep->held.tail - ep->held.head == KN_SWR_HELD ||
			   !(ep->rx_recv.buf =
				     malloc(h->total ? h->total : 1))) {
			return false;
		} else {
			ep->rx_recv.len = h->total;
			ep->rx_recv.user = NULL;
			ep->rx_unexp = true;
		}
		if (h->total > ep->rx_recv.len) {
			/* report the buffer with the failure, as tcp does */
			ep->sw.rq.head--;
			kn__swr_ep_fail(
				&ep->sw, -EMSGSIZE,
				"message of %u bytes for a recv buffer of "
				"%u",
				h->total, ep->rx_recv.len);
			return true;
		}
		ep->rx_op = KN_DP_SEND;
		ep->rx_total = h->total;
		ep->rx_bytes = 0;
	} else if (h->total != ep->rx_total || h->off != ep->rx_bytes) {
		kn__swr_ep_fail(&ep->sw, -EPROTO,
				"send segment at %llu of %u, "
				"expected %llu of %u",
				(unsigned long long)h->off, h->total,
				(unsigned long long)ep->rx_bytes, ep->rx_total);
		return true;
	}
	if (h->off != ep->rx_bytes ||
	    ((h->flags & KN_DP_F_LAST) != 0) != (h->off + h->len == h->total)) {
		kn__swr_ep_fail(&ep->sw, -EPROTO,
				"send segment out of its message");
		return true;
	}
	memcpy(ep->rx_recv.buf + h->off, p->payload, h->len);
	ep->rx_bytes += h->len;
	if (h->flags & KN_DP_F_LAST) {
		ep->rx_op = 0;
		if (ep->rx_unexp) {
			ep->held.v[ep->held.tail++ % KN_SWR_HELD] = ep->rx_recv;
			ep->rx_unexp = false;
			kn__swr_held_match(&ep->sw, &ep->held);
		} else {
			kn__swr_ep_push(&ep->sw, KN_TP_OP_RECV,
					ep->rx_recv.user, 0, h->total);
		}
	}
	return true;
}

/* Deliver the next segment in sequence: false if it must wait (RNR). */
static bool deliver(struct dp_ep *ep, const struct kn__dp_pkt *p)
{
	switch (p->h.op) {
	case KN_DP_WRITE:
		on_write(ep, p);
		break;
	case KN_DP_READ_REQ:
		on_read_req(ep, p);
		break;
	case KN_DP_READ_RESP:
		on_read_resp(ep, p);
		break;
	case KN_DP_SEND:
		if (!on_send(ep, p)) {
			ep->rnr_owed = true;
			return false;
		}
		break;
	}
	if (ep->sw.state != KN_SWR_OPEN)
		return false;
	ep->rcv_nxt++;
	ep->ack_owed = true;
	return true;
}

/* Segments held after a gap that the gap's filling made next. */
static void deliver_held(struct dp_ep *ep)
{
	struct dp_ctx *c = dp_ep_ctx(ep);

	while (ep->nheld && ep->sw.state == KN_SWR_OPEN) {
		struct dp_held *s = &ep->ooo[ep->rcv_nxt % DP_OOO];
		struct rte_mbuf *m = s->m;

		if (!m || s->p.h.seq != ep->rcv_nxt)
			return;
		s->m = NULL;
		ep->nheld--;
		c->held--;
		/* one that must wait for a recv is sent again anyway */
		deliver(ep, &s->p);
		rte_pktmbuf_free(m);
	}
}

/*
 * A data segment: the next in sequence is delivered, with those held
 * after it; one after a gap is held (if there is room) for when the gap
 * fills, and answered with a duplicate acknowledgement at once, which
 * tells the sender to send the missing one again; an old one is a
 * duplicate.  True if the mbuf is kept.
 */
static bool on_data(struct dp_ep *ep, const struct kn__dp_pkt *p,
		    struct rte_mbuf *m)
{
	struct dp_ctx *c = dp_ep_ctx(ep);
	int32_t d = kn__dp_seq_diff(p->h.seq, ep->rcv_nxt);

	if (d == 0) {
		if (deliver(ep, p))
			deliver_held(ep);
		return false;
	}
	if (d > 0) {
		struct dp_held *s = &ep->ooo[p->h.seq % DP_OOO];

		dp_tx_ack_now(ep);
		if (d < DP_OOO && !s->m && c->held < DP_HELD_MAX) {
			s->m = m;
			s->p = *p;
			ep->nheld++;
			c->held++;
			return true;
		}
		return false;
	}
	ep->ack_owed = true; /* a duplicate: our ack was lost */
	return false;
}

static bool same_peer(const struct dp_ep *ep, const struct kn__dp_addr *a)
{
	return !memcmp(ep->peer.mac, a->mac, 6) && ep->peer.ip == a->ip &&
	       ep->peer.port == a->port;
}

bool dp_rx_mbuf(struct dp_ctx *c, struct rte_mbuf *m, uint64_t now)
{
	const char *why = NULL;
	struct kn__dp_pkt p;
	struct dp_ep *ep;
	bool kept = false;
	int ret;

	if (m->nb_segs != 1)
		return false; /* never ours: one segment fits one mbuf */
	ret = kn__dp_decode(rte_pktmbuf_mtod(m, const uint8_t *), m->data_len,
			    c->me.port, c->max_payload, &p, &why);
	if (ret == -ENOENT)
		return false; /* the kernel's or another port's traffic */
	if (ret) {
		/* malformed before it names anyone: nobody to fail */
		c->forged++;
		return false;
	}
	ep = p.h.dst_ep < c->tab_cap ? c->tab[p.h.dst_ep] : NULL;
	if (!ep || p.h.token != ep->token) {
		c->forged++;
		return false;
	}
	if (ep->sw.state == KN_SWR_STARTING)
		dp_ep_read_hello(ep); /* the peer's hello is likely there */
	if (ep->sw.state != KN_SWR_OPEN || !same_peer(ep, &p.src)) {
		c->forged++;
		return false;
	}
	if (p.h.len > ep->max_payload) {
		kn__swr_ep_fail(&ep->sw, -EPROTO,
				"segment of %u bytes, above the %u "
				"agreed",
				p.h.len, ep->max_payload);
		return false;
	}
	dp_tx_busy(ep); /* what comes may owe an ack, or open the window */
	dp_tx_ack(ep, p.h.ack, p.h.flags & KN_DP_F_RNR, p.h.type == KN_DP_ACK,
		  now);
	if (ep->sw.state == KN_SWR_OPEN && p.h.type == KN_DP_DATA)
		kept = on_data(ep, &p, m);
	kn__swr_ep_release(&ep->sw);
	return kept;
}
