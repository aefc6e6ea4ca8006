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
 * Anything malformed fails that endpoint alone (kn__tcp_ep_fail): it is
 * logged once, every pending operation completes with an error, and the
 * peer's socket is shut down.  Completions leave through
 * kn__tcp_ep_release, in post order.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "tcp_priv.h"

void kn__tcp_ep_log(const struct tcp_ep *ep, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	kn__tp_peer_vlog("tcp", ep->peer, fmt, ap);
	va_end(ap);
}

/* ---- failure ---- */

/*
 * Move @ep to the error state once: log @why, shut the socket (the peer
 * sees it close), and complete every pending operation, the oldest with
 * @err and the rest with -ECANCELED.  The completions leave through
 * kn__tcp_ep_release(), in order, DISCONNECT last.
 */
void kn__tcp_ep_fail(struct tcp_ep *ep, int err, const char *why, ...)
{
	bool first = true;
	char msg[256];
	va_list ap;

	if (ep->state == EP_ERROR)
		return;
	va_start(ap, why);
	vsnprintf(msg, sizeof(msg), why, ap);
	va_end(ap);
	/* a peer that hangs up or is not there yet is no news: DISCONNECT
	 * and CONNECT say so; what else goes wrong is logged */
	if (err != -ECONNRESET && err != -ECONNREFUSED && kn__tp_fail_log_ok())
		kn__tcp_ep_log(ep, "%s (%s); endpoint closed", msg,
			       strerror(-err));
	if (ep->state == EP_CONNECTING) {
		ep->connect_event = true;
		ep->disc_event = false;
	} else {
		ep->disc_event = true;
	}
	ep->state = EP_ERROR;
	ep->error = err;
	shutdown(ep->h.fd, SHUT_RDWR); /* in-flight io_uring I/O ends too */
	ep_ctx(ep)->drv->ep_stop(ep);
	for (uint32_t i = ep->op_head; i != ep->op_tail; i++) {
		struct op *op = &ep->ops[i % SQ_DEPTH];

		if (op->done)
			continue;
		op->done = true;
		op->status = first ? err : -ECANCELED;
		first = false;
	}
	ep->tx = TX_NONE;
	ep->op_sent = ep->op_tail;
	ep->resp_head = ep->resp_tail;
	ep->rx_owed = false;
	ep_ready(ep);
}

/* ---- release: ring head to the completion queue, in order ---- */

bool kn__tcp_ep_release(struct tcp_ep *ep)
{
	struct tcp_ctx *c = ep_ctx(ep);
	struct kn__tp_completion comp = { .ep = &ep->base };

	if (ep->connect_event && ep->state != EP_CONNECTING) {
		comp.op = KN_TP_OP_CONNECT;
		comp.user = ep->base.user;
		comp.status = ep->state == EP_ERROR ? ep->error : 0;
		if (!kn__tp_cq_push(&c->cq, &comp))
			return false;
		ep->connect_event = false;
	}
	if (ep->rx_owed) {
		if (!kn__tp_cq_push(&c->cq, &ep->rx_comp))
			return false;
		ep->rx_owed = false;
		ep_kick(ep);
	}
	while (ep->op_head != ep->op_tail) {
		struct op *op = &ep->ops[ep->op_head % SQ_DEPTH];

		/* the kernel may still read a zero-copy send's buffer */
		if (!op->done || op->zc_refs)
			break;
		comp = (struct kn__tp_completion){
			.user = op->user,
			.ep = &ep->base,
			.status = op->status,
			.op = op->kind,
			.bytes = op->status ? 0 : op->bytes,
		};
		if (!kn__tp_cq_push(&c->cq, &comp))
			return false;
		ep->op_head++;
	}
	if (ep->state != EP_ERROR)
		return true;
	if (!kn__swr_rq_cancel(&ep->rq, &c->cq, &ep->base))
		return false;
	if (ep->disc_event) {
		comp = (struct kn__tp_completion){ .user = ep->base.user,
						   .ep = &ep->base,
						   .status = ep->error,
						   .op = KN_TP_OP_DISCONNECT };
		if (!kn__tp_cq_push(&c->cq, &comp))
			return false;
		ep->disc_event = false;
	}
	return true;
}

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

	if (ep->state != EP_OPEN)
		return false;
	if (ep->tx == TX_NONE) {
		if (ep->resp_head != ep->resp_tail)
			ep->tx = TX_RESP;
		else if (ep->op_sent != ep->op_tail)
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
		plen = op->kind == KN_TP_OP_READ ? 0 : op->len;
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
		kn__tcp_ep_fail(ep, (int)n, "send failed");
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

		plen = op->kind == KN_TP_OP_READ ? 0 : op->len;
		if (ep->tx_done < KN_WIRE_HDR_LEN + plen)
			return;
		/*
		 * A read is done when its answer has arrived, a zero-copy
		 * send when the kernel has let go of the buffer.
		 */
		op->sent = true;
		if (op->kind != KN_TP_OP_READ && !op->zc_refs) {
			op->done = true;
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
		kn__swr_grant_find(&ep->grants, ep->rh.region);
	const char *what = right == KN_TP_REMOTE_WRITE ? "write" : "read";

	if (!ep->grants.n) {
		kn__tcp_ep_fail(
			ep, -EACCES,
			"one-sided %s before anything was granted to this "
			"peer",
			what);
		return NULL;
	}
	if (!g) {
		kn__tcp_ep_fail(ep, -EACCES,
				"%s with key 0x%x, never granted to this peer",
				what, ep->rh.region);
		return NULL;
	}
	if (!(g->access & right)) {
		kn__tcp_ep_fail(ep, -EACCES, "%s of key 0x%x without the right",
				what, ep->rh.region);
		return NULL;
	}
	if (ep->rh.offset > g->len || ep->rh.length > g->len - ep->rh.offset) {
		kn__tcp_ep_fail(
			ep, -EACCES,
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
	if (ep->rd_next - ep->op_head > ep->op_sent - ep->op_head)
		ep->rd_next = ep->op_head; /* released past it */
	for (; ep->rd_next != ep->op_sent; ep->rd_next++) {
		struct op *op = &ep->ops[ep->rd_next % SQ_DEPTH];

		if (op->kind == KN_TP_OP_READ && !op->done)
			return op;
	}
	return NULL;
}

/* A whole frame is in: report it (or owe the report) and start anew. */
static void rx_complete(struct tcp_ep *ep)
{
	struct kn__tp_completion comp = { .ep = &ep->base };

	ep->rx = RX_HDR;
	ep->rx_hlen = 0;
	switch (ep->rx_target) {
	case T_READ: {
		struct op *op = &ep->ops[ep->rd_next % SQ_DEPTH];

		op->done = true;
		ep->rd_next++;
		ep_ready(ep);
		return;
	}
	case T_RECV: {
		struct kn__swr_recv *r =
			&ep->rq.v[ep->rq.head++ % KN_SWR_RQ_DEPTH];

		comp.op = KN_TP_OP_RECV;
		comp.user = r->user;
		comp.bytes = ep->rh.length;
		break;
	}
	case T_IMM:
		comp.op = KN_TP_OP_RECV_IMM;
		comp.user = ep->base.user;
		comp.imm = ep->rh.imm;
		comp.bytes = ep->rh.length;
		break;
	}
	if (!kn__tp_cq_push(&ep_ctx(ep)->cq, &comp)) {
		ep->rx_comp = comp;
		ep->rx_owed = true;
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
			kn__tcp_ep_fail(ep, -EPROTO,
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
			kn__tcp_ep_fail(
				ep, -EPROTO,
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

		if (kn__swr_rq_empty(&ep->rq)) {
			ep->rx = RX_WAIT_RECV; /* until a recv is posted */
			ep_kick(ep);
			return true;
		}
		r = &ep->rq.v[ep->rq.head % KN_SWR_RQ_DEPTH];
		if (h->length > r->len) {
			kn__tcp_ep_fail(
				ep, -EMSGSIZE,
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
	while (ep->state == EP_OPEN && ep->rx == RX_WAIT_RECV &&
	       !kn__swr_rq_empty(&ep->rq))
		if (!rx_start(ep))
			return false;
	if (ep->state != EP_OPEN || ep->rx_owed || ep->rx == RX_WAIT_RECV)
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
		kn__tcp_ep_fail(ep, -ECONNRESET, "connection closed by peer");
		return;
	}
	if (n < 0) {
		kn__tcp_ep_fail(ep, (int)n, "receive failed");
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
	err = kn__wire_decode(ep->rx_hdr, ep->base.ctx->max_msg, &ep->rh);
	if (err) {
		kn__tcp_ep_fail(ep, err, "malformed frame header");
		return;
	}
	if (ep->rh.seq != ep->rx_seq++) {
		kn__tcp_ep_fail(ep, -EPROTO, "frame %u out of sequence",
				ep->rh.seq);
		return;
	}
	ep->rx_dst = NULL;
	rx_start(ep);
}
