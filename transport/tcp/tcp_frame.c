/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tcp_frame.c - the tcp provider's wire: one endpoint's frames in and
 * out, whichever I/O driver moves the bytes.
 *
 * A one-sided write is a WRITE_IMM frame whose payload the receiver
 * reads straight into the target region, after checking the key, bounds
 * and rights against what this endpoint's peer was granted
 * (kn__tp_ep_grant): no intermediate buffer.  Grants belong to one
 * endpoint, and their keys are random: a peer reaches only the ranges
 * granted to its own connection, and before the first grant a one-sided
 * frame fails the endpoint.  A read is a READ_REQ answered by a
 * READ_RESP whose payload goes straight into the reader's local region.
 * SEND frames fill the oldest posted recv buffer; with none posted, the
 * receiver stops reading that socket until one is (TCP's own flow
 * control then holds the sender).
 *
 * The driver asks what to send (kn__tcp_tx_want) and where received
 * bytes go (kn__tcp_rx_want), and reports what moved (kn__tcp_tx_got,
 * kn__tcp_rx_got).  One frame is on the wire at a time per socket, so
 * frames never interleave; answers to the peer's reads go first.
 * Anything malformed fails that endpoint alone (kn__swr_ep_fail): it is
 * logged once, every pending operation completes with an error, and the
 * peer's socket is shut down (tcp_stop below).  Completions leave
 * through kn__swr_ep_release, in post order.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "tcp_priv.h"

/* ---- what the endpoint core asks of the wire (swrdma.h) ---- */

/* @e failed: shut its socket (the peer sees it close, in-flight
 * io_uring I/O ends too) and forget the frames it had under way. */
static void tcp_stop(struct kn__swr_ep *e, enum kn__swr_state was)
{
	struct tcp_ep *ep = container_of(e, struct tcp_ep, sw);

	shutdown(ep->h.fd, SHUT_RDWR);
	ep_ctx(ep)->drv->ep_stop(ep);
	ep->tx = TX_NONE;
	ep->op_sent = ep->sw.op_tail;
	ep->resp_head = ep->resp_tail;
	(void)was;
}

/* A received message's owed completion went: read the socket again. */
static void tcp_resume(struct kn__swr_ep *e)
{
	ep_kick(container_of(e, struct tcp_ep, sw));
}

const struct kn__swr_prov kn__tcp_prov = {
	.name = "tcp",
	.stop = tcp_stop,
	.resume = tcp_resume,
};

/* ---- transmit ---- */

/*
 * The next bytes to send, as ep->tx_msg over ep->tx_iov: the rest of the
 * frame on the wire, or the next frame (answers to the peer's reads
 * first).  False when there is nothing to send.  *@payload_len is the
 * frame's payload size, for the choice of a zero-copy send.
 */
bool kn__tcp_tx_want(struct tcp_ep *ep, size_t *payload_len)
{
	const uint8_t *hdr;
	const char *payload;
	size_t plen;

	if (ep->sw.state != KN_SWR_OPEN)
		return false;
	if (ep->tx == TX_NONE) {
		if (ep->resp_head != ep->resp_tail)
			ep->tx = TX_RESP;
		else if (ep->op_sent != ep->sw.op_tail)
			ep->tx = TX_OP;
		else
			return false;
		ep->tx_done = 0;
	}
	if (ep->tx == TX_RESP) {
		struct resp *r = &ep->resps[ep->resp_head % SQ_DEPTH];

		hdr = r->hdr;
		payload = r->src;
		plen = r->len;
	} else {
		struct op *op = &ep->ops[ep->op_sent % SQ_DEPTH];

		hdr = op->hdr;
		payload = op->payload;
		plen = op->sw.kind == KN_TP_OP_READ ? 0 : op->len;
	}
	ep->tx_msg = (struct msghdr){ .msg_iov = ep->tx_iov };
	if (ep->tx_done < KN_WIRE_HDR_LEN) {
		ep->tx_iov[0] = (struct iovec){ (void *)(hdr + ep->tx_done),
						KN_WIRE_HDR_LEN - ep->tx_done };
		ep->tx_iov[1] = (struct iovec){ (void *)payload, plen };
		ep->tx_msg.msg_iovlen = plen ? 2 : 1;
	} else {
		size_t at = ep->tx_done - KN_WIRE_HDR_LEN;

		ep->tx_iov[0] =
			(struct iovec){ (void *)(payload + at), plen - at };
		ep->tx_msg.msg_iovlen = 1;
	}
	*payload_len = plen;
	return true;
}

/* @n bytes of the frame on the wire went out (or a negative errno). */
void kn__tcp_tx_got(struct tcp_ep *ep, ssize_t n)
{
	size_t plen;

	if (n < 0) {
		kn__swr_ep_fail(&ep->sw, (int)n, "send failed");
		return;
	}
	ep->tx_done += (size_t)n;
	if (ep->tx == TX_RESP) {
		plen = ep->resps[ep->resp_head % SQ_DEPTH].len;
		if (ep->tx_done < KN_WIRE_HDR_LEN + plen)
			return;
		ep->resp_head++;
	} else {
		struct op *op = &ep->ops[ep->op_sent % SQ_DEPTH];

		plen = op->sw.kind == KN_TP_OP_READ ? 0 : op->len;
		if (ep->tx_done < KN_WIRE_HDR_LEN + plen)
			return;
		/*
		 * A read is done when its answer has arrived, a zero-copy
		 * send when the kernel has let go of the buffer.
		 */
		op->sent = true;
		if (op->sw.kind != KN_TP_OP_READ && !op->sw.refs) {
			op->sw.done = true;
			ep_ready(ep);
		}
		ep->op_sent++;
	}
	ep->tx = TX_NONE;
}

/* ---- receive ---- */

/*
 * The local range a WRITE_IMM or READ_REQ names, or NULL (the endpoint
 * failed, logged): only what this endpoint's peer was granted.
 */
static char *rx_region_range(struct tcp_ep *ep, uint32_t right)
{
	const struct kn__swr_grant *g =
		kn__swr_grant_find(&ep->sw.grants, ep->rh.region);
	const char *what = right == KN_TP_REMOTE_WRITE ? "write" : "read";

	if (!ep->sw.grants.n) {
		kn__swr_ep_fail(
			&ep->sw, -EACCES,
			"one-sided %s before anything was granted to this "
			"peer",
			what);
		return NULL;
	}
	if (!g) {
		kn__swr_ep_fail(&ep->sw, -EACCES,
				"%s with key 0x%x, never granted to this peer",
				what, ep->rh.region);
		return NULL;
	}
	if (!(g->access & right)) {
		kn__swr_ep_fail(&ep->sw, -EACCES,
				"%s of key 0x%x without the right", what,
				ep->rh.region);
		return NULL;
	}
	if (ep->rh.offset > g->len || ep->rh.length > g->len - ep->rh.offset) {
		kn__swr_ep_fail(
			&ep->sw, -EACCES,
			"%s of [%llu, +%u) outside the %llu bytes of key 0x%x",
			what, (unsigned long long)ep->rh.offset, ep->rh.length,
			(unsigned long long)g->len, ep->rh.region);
		return NULL;
	}
	return g->mr->addr + g->off + ep->rh.offset;
}

/* The oldest read we sent that has no answer yet, or NULL. */
static struct op *next_read(struct tcp_ep *ep)
{
	if (ep->rd_next - ep->sw.op_head > ep->op_sent - ep->sw.op_head)
		ep->rd_next = ep->sw.op_head; /* released past it */
	for (; ep->rd_next != ep->op_sent; ep->rd_next++) {
		struct op *op = &ep->ops[ep->rd_next % SQ_DEPTH];

		if (op->sw.kind == KN_TP_OP_READ && !op->sw.done)
			return op;
	}
	return NULL;
}

/* A whole frame is in: report it (or owe the report) and start anew. */
static void rx_complete(struct tcp_ep *ep)
{
	struct kn__tp_completion comp = { .ep = &ep->sw.base };

	ep->rx = RX_HDR;
	ep->rx_hlen = 0;
	switch (ep->rx_target) {
	case T_READ: {
		struct op *op = &ep->ops[ep->rd_next % SQ_DEPTH];

		op->sw.done = true;
		ep->rd_next++;
		ep_ready(ep);
		return;
	}
	case T_RECV: {
		struct kn__swr_recv *r =
			&ep->sw.rq.v[ep->sw.rq.head++ % KN_SWR_RQ_DEPTH];

		comp.op = KN_TP_OP_RECV;
		comp.user = r->user;
		comp.bytes = ep->rh.length;
		break;
	}
	case T_IMM:
		comp.op = KN_TP_OP_RECV_IMM;
		comp.user = ep->sw.base.user;
		comp.imm = ep->rh.imm;
		comp.bytes = ep->rh.length;
		break;
	}
	if (!kn__tp_cq_push(&ep_ctx(ep)->sw.cq, &comp)) {
		ep->sw.owed_comp = comp;
		ep->sw.owed = true;
		ep_ready(ep);
	}
}

/* Where the payload of the frame just decoded goes; false on failure. */
static bool rx_start(struct tcp_ep *ep)
{
	struct kn__wire_hdr *h = &ep->rh;

	switch (h->op) {
	case KN_WIRE_WRITE_IMM:
		ep->rx_dst = rx_region_range(ep, KN_TP_REMOTE_WRITE);
		ep->rx_target = T_IMM;
		break;
	case KN_WIRE_READ_REQ: {
		char *src = rx_region_range(ep, KN_TP_REMOTE_READ);
		struct resp *r;

		if (!src)
			return false;
		if (ep->resp_tail - ep->resp_head == SQ_DEPTH) {
			kn__swr_ep_fail(&ep->sw, -EPROTO,
					"more than %u reads outstanding",
					SQ_DEPTH);
			return false;
		}
		r = &ep->resps[ep->resp_tail++ % SQ_DEPTH];
		r->src = src;
		r->len = h->length;
		kn__wire_encode(&(struct kn__wire_hdr){ .op = KN_WIRE_READ_RESP,
							.length = h->length,
							.seq = ep->tx_seq++ },
				r->hdr);
		ep->rx = RX_HDR;
		ep->rx_hlen = 0;
		return true;
	}
	case KN_WIRE_READ_RESP: {
		struct op *op = next_read(ep);

		if (!op || op->len != h->length) {
			kn__swr_ep_fail(
				&ep->sw, -EPROTO,
				op ? "read answered with %u bytes, not %u"
				   : "answer (%u bytes) to no read%.0u",
				h->length, op ? op->len : 0);
			return false;
		}
		ep->rx_dst = op->dst;
		ep->rx_target = T_READ;
		break;
	}
	case KN_WIRE_SEND: {
		struct kn__swr_recv *r;

		if (kn__swr_rq_empty(&ep->sw.rq)) {
			ep->rx = RX_WAIT_RECV; /* until a recv is posted */
			ep_kick(ep);
			return true;
		}
		r = &ep->sw.rq.v[ep->sw.rq.head % KN_SWR_RQ_DEPTH];
		if (h->length > r->len) {
			kn__swr_ep_fail(
				&ep->sw, -EMSGSIZE,
				"message of %u bytes for a %u-byte recv",
				h->length, r->len);
			return false;
		}
		ep->rx_dst = r->buf;
		ep->rx_target = T_RECV;
		break;
	}
	}
	if (!ep->rx_dst)
		return false;
	ep->rx = RX_PAYLOAD;
	ep->rx_left = h->length;
	if (!ep->rx_left)
		rx_complete(ep);
	return true;
}

/*
 * Where the next received bytes go (*@dst, at most *@len), or false when
 * the endpoint should not read now: not open, a completion owed, or a
 * message waiting for a recv buffer.
 */
bool kn__tcp_rx_want(struct tcp_ep *ep, char **dst, size_t *len)
{
	while (ep->sw.state == KN_SWR_OPEN && ep->rx == RX_WAIT_RECV &&
	       !kn__swr_rq_empty(&ep->sw.rq))
		if (!rx_start(ep))
			return false;
	if (ep->sw.state != KN_SWR_OPEN || ep->sw.owed ||
	    ep->rx == RX_WAIT_RECV)
		return false;
	if (ep->rx == RX_HDR) {
		*dst = (char *)ep->rx_hdr + ep->rx_hlen;
		*len = KN_WIRE_HDR_LEN - ep->rx_hlen;
	} else {
		*dst = ep->rx_dst;
		*len = ep->rx_left < RECV_CHUNK ? ep->rx_left : RECV_CHUNK;
	}
	return true;
}

/* @n bytes arrived where kn__tcp_rx_want() said (0: end of stream; < 0:
 * errno). */
void kn__tcp_rx_got(struct tcp_ep *ep, ssize_t n)
{
	int err;

	if (n == 0) {
		kn__swr_ep_fail(&ep->sw, -ECONNRESET,
				"connection closed by peer");
		return;
	}
	if (n < 0) {
		kn__swr_ep_fail(&ep->sw, (int)n, "receive failed");
		return;
	}
	if (ep->rx == RX_PAYLOAD) {
		ep->rx_dst += n;
		ep->rx_left -= (uint64_t)n;
		if (!ep->rx_left)
			rx_complete(ep);
		return;
	}
	ep->rx_hlen += (uint32_t)n;
	if (ep->rx_hlen < KN_WIRE_HDR_LEN)
		return;
	err = kn__wire_decode(ep->rx_hdr, ep->sw.base.ctx->max_msg, &ep->rh);
	if (err) {
		kn__swr_ep_fail(&ep->sw, err, "malformed frame header");
		return;
	}
	if (ep->rh.seq != ep->rx_seq++) {
		kn__swr_ep_fail(&ep->sw, -EPROTO, "frame %u out of sequence",
				ep->rh.seq);
		return;
	}
	ep->rx_dst = NULL;
	rx_start(ep);
}
