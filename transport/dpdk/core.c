/* SPDX-License-Identifier: Apache-2.0 */
/*
 * core.c - the dpdk provider's endpoint core: what an endpoint's queues
 * do whatever moves the packets.  Failure (every pending operation
 * completes with an error, once), the release of completions from the
 * head of the post ring in post order, messages held for recv buffers
 * not yet posted, and the segments held after a gap.  The grant table
 * and the queue of posted recv buffers are the ones tcp has too
 * (swrdma.h).
 *
 * The bottom of the provider's files but packet.c: it calls nothing of
 * theirs, and they all call it (dpdk.h has the order).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <rte_mbuf.h>

#include "dpdk.h"

/* ---- logging ---- */

void dp_ep_log(const struct dp_ep *ep, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	kn__tp_peer_vlog("dpdk", ep->peer_name, fmt, ap);
	va_end(ap);
}

/* ---- failure ---- */

void dp_ep_fail(struct dp_ep *ep, int err, const char *why, ...)
{
	struct dp_ctx *c = dp_ep_ctx(ep);
	bool first = true;
	char msg[256];
	va_list ap;

	if (ep->state == DP_ERROR)
		return;
	va_start(ap, why);
	vsnprintf(msg, sizeof(msg), why, ap);
	va_end(ap);
	if (err != -ECONNRESET && err != -ECONNREFUSED && kn__tp_fail_log_ok())
		dp_ep_log(ep, "%s (%s); endpoint closed", msg, strerror(-err));
	if (ep->client && !ep->connect_event && ep->state == DP_HANDSHAKE)
		ep->connect_event = true;
	else if (!ep->hidden)
		ep->disc_event = true;
	ep->state = DP_ERROR;
	ep->error = err;
	/* the peer's control connection closes: it fails its end too */
	epoll_ctl(c->epfd, EPOLL_CTL_DEL, ep->h.fd, NULL);
	shutdown(ep->h.fd, SHUT_RDWR);
	for (uint32_t i = ep->op_head; i != ep->op_tail; i++) {
		struct dp_op *op = &ep->ops[i % DP_SQ_DEPTH];

		if (op->done)
			continue;
		op->done = true;
		op->status = first ? err : -ECANCELED;
		first = false;
	}
	dp_ep_drop_held(ep);
	ep->tx_head = ep->tx_cur = ep->tx_tail;
	ep->snd_una = ep->snd_nxt = ep->snd_max = ep->snd_end;
	ep->ack_owed = ep->rnr_owed = false;
	dp_ep_ready(ep);
}

/* ---- release: ring head to the completion queue, in order ---- */

bool dp_ep_release(struct dp_ep *ep)
{
	struct kn__tp_cq *cq = &dp_ep_ctx(ep)->cq;
	struct kn__tp_completion comp = { .ep = &ep->base };

	if (ep->hidden)
		return true;
	if (ep->connect_event && ep->state != DP_HANDSHAKE) {
		comp.op = KN_TP_OP_CONNECT;
		comp.user = ep->base.user;
		comp.status = ep->state == DP_ERROR ? ep->error : 0;
		if (!kn__tp_cq_push(cq, &comp))
			return false;
		ep->connect_event = false;
	}
	while (ep->op_head != ep->op_tail) {
		struct dp_op *op = &ep->ops[ep->op_head % DP_SQ_DEPTH];

		if (!op->done)
			break;
		comp = (struct kn__tp_completion){
			.user = op->user,
			.ep = &ep->base,
			.status = op->status,
			.op = op->kind,
			.bytes = op->status ? 0 : op->bytes,
		};
		if (!kn__tp_cq_push(cq, &comp))
			return false;
		ep->op_head++;
	}
	if (ep->state != DP_ERROR)
		return true;
	if (!kn__swr_rq_cancel(&ep->rq, cq, &ep->base))
		return false;
	if (ep->disc_event) {
		comp = (struct kn__tp_completion){ .user = ep->base.user,
						   .ep = &ep->base,
						   .status = ep->error,
						   .op = KN_TP_OP_DISCONNECT };
		if (!kn__tp_cq_push(cq, &comp))
			return false;
		ep->disc_event = false;
	}
	return true;
}

/* ---- completions ---- */

void dp_ep_push(struct dp_ep *ep, uint32_t op, void *user, uint32_t imm,
		uint64_t bytes)
{
	struct kn__tp_completion comp = {
		.user = user,
		.ep = &ep->base,
		.op = op,
		.imm = imm,
		.bytes = bytes,
	};

	kn__tp_cq_push_grow(&dp_ep_ctx(ep)->cq, &comp, "dpdk");
}

/* ---- held messages and segments ---- */

void dp_ep_match(struct dp_ep *ep)
{
	while (ep->ux_head != ep->ux_tail && !kn__swr_rq_empty(&ep->rq) &&
	       ep->state == DP_OPEN) {
		struct kn__swr_recv *m = &ep->unexp[ep->ux_head % DP_UNEXP];
		struct kn__swr_recv *r =
			&ep->rq.v[ep->rq.head % KN_SWR_RQ_DEPTH];

		if (m->len > r->len) {
			dp_ep_fail(ep, -EMSGSIZE,
				   "message of %u bytes for a recv buffer of "
				   "%u",
				   m->len, r->len);
			return;
		}
		memcpy(r->buf, m->buf, m->len);
		dp_ep_push(ep, KN_TP_OP_RECV, r->user, 0, m->len);
		free(m->buf);
		ep->ux_head++;
		ep->rq.head++;
	}
}

void dp_ep_drop_held(struct dp_ep *ep)
{
	struct dp_ctx *c = dp_ep_ctx(ep);

	for (uint32_t i = 0; ep->nheld && i < DP_OOO; i++)
		if (ep->ooo[i].m) {
			rte_pktmbuf_free(ep->ooo[i].m);
			ep->ooo[i].m = NULL;
			ep->nheld--;
			c->held--;
		}
}
