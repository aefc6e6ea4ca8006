/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tx.c - the dpdk provider's send stream: messages cut into segments of
 * the endpoint's payload size, a window of segments in flight, the
 * peer's cumulative acknowledgements, and retransmission: of the one
 * segment after which the peer holds the rest (on the third duplicate
 * acknowledgement, and again for each gap a partial acknowledgement
 * shows, as TCP's NewReno does), and of everything unacknowledged
 * (go-back-N) at a timeout, which backs off exponentially from an RTO
 * computed from measured round trips (RFC 6298).  A message is rebuilt from its region each time a
 * segment of it goes out, so keeping a segment for retransmission costs
 * nothing; the region is borrowed until the post completes anyway.
 */
#include <errno.h>
#include <string.h>

#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include "dpdk.h"

static uint64_t rto_of(const struct dp_ep *ep);

static uint32_t nseg_of(const struct dp_ep *ep, const struct dp_msg *m)
{
	uint64_t n = (m->len + ep->max_payload - 1) / ep->max_payload;

	return n ? (uint32_t)n : 1; /* a message of 0 bytes is one segment */
}

static void number(struct dp_ep *ep, struct dp_msg *m)
{
	m->seq0 = ep->snd_end;
	m->nseg = nseg_of(ep, m);
	ep->snd_end += m->nseg;
}

int dp_tx_queue(struct dp_ep *ep, const struct dp_msg *m)
{
	struct dp_msg *slot;

	if (ep->tx_tail - ep->tx_head == DP_TXQ_DEPTH)
		return -EAGAIN;
	slot = &ep->txq[ep->tx_tail++ % DP_TXQ_DEPTH];
	*slot = *m;
	slot->nseg = 0;
	if (ep->sw.state == KN_SWR_OPEN)
		number(ep, slot);
	dp_tx_busy(ep);
	return 0;
}

void dp_tx_open(struct dp_ep *ep, uint64_t now)
{
	ep->rto_ns = rto_of(ep);
	ep->progress_at = now;
	for (uint32_t i = ep->tx_head; i != ep->tx_tail; i++)
		number(ep, &ep->txq[i % DP_TXQ_DEPTH]);
	dp_tx_busy(ep);
}

void dp_tx_flush(struct dp_ctx *c)
{
	uint16_t n;

	if (!c->ntx)
		return;
	n = rte_eth_tx_burst(c->port, 0, c->tx, (uint16_t)c->ntx);
	/* what the port did not take goes out at the next flush */
	memmove(c->tx, c->tx + n, (c->ntx - n) * sizeof(c->tx[0]));
	c->ntx -= n;
}

/* Queue one packet for the port; false if it has no room now. */
static bool tx_add(struct dp_ctx *c, struct rte_mbuf *mb)
{
	if (c->ntx == DP_BURST)
		dp_tx_flush(c);
	if (c->ntx == DP_BURST)
		return false;
	c->tx[c->ntx++] = mb;
	return true;
}

static struct rte_mbuf *packet(struct dp_ep *ep, const struct kn__dp_hdr *h,
			       uint32_t copy)
{
	struct dp_ctx *c = dp_ep_ctx(ep);
	struct rte_mbuf *mb = rte_pktmbuf_alloc(c->pool);
	uint8_t *p;

	if (!mb)
		return NULL;
	p = (uint8_t *)rte_pktmbuf_append(mb,
					  (uint16_t)(KN_DP_HDRS_LEN + copy));
	if (!p) {
		rte_pktmbuf_free(mb);
		return NULL;
	}
	kn__dp_encode(&c->me, &ep->peer, h, c->ip_id++, p);
	return mb;
}

/* Send segment @i of @m: false if the port or the pools are full. */
static bool seg_out(struct dp_ep *ep, const struct dp_msg *m, uint32_t i)
{
	struct dp_ctx *c = dp_ep_ctx(ep);
	uint64_t at = (uint64_t)i * ep->max_payload;
	uint32_t len = m->len - at < ep->max_payload ? (uint32_t)(m->len - at)
						     : ep->max_payload;
	struct kn__dp_hdr h = {
		.type = KN_DP_DATA,
		.op = m->op,
		.len = (uint16_t)len,
		.dst_ep = ep->peer_id,
		.token = ep->peer_token,
		.seq = m->seq0 + i,
		.ack = ep->rcv_nxt,
		.key = m->key,
	};
	bool zc = len && len >= c->zc_threshold && m->mr && m->mr->zc;
	struct rte_mbuf *mb, *x = NULL;

	if (m->gone) {
		kn__swr_ep_fail(&ep->sw, -ECANCELED,
				"the region a read was answered "
				"from was deregistered before the answer was "
				"acknowledged");
		return false;
	}
	h.flags = (i == 0 ? KN_DP_F_FIRST : 0) |
		  (i + 1 == m->nseg ? KN_DP_F_LAST : 0);
	switch (m->op) {
	case KN_DP_WRITE:
		h.off = m->off + at;
		h.imm = (h.flags & KN_DP_F_LAST) ? m->imm : 0;
		break;
	case KN_DP_READ_REQ:
		h.off = m->off;
		h.total = m->total;
		break;
	case KN_DP_SEND:
		h.total = (uint32_t)m->len;
		/* fall through */
	default: /* READ_RESP */
		h.off = at;
		break;
	}
	if (c->ntx == DP_BURST)
		dp_tx_flush(c);
	if (c->ntx == DP_BURST)
		return false;
	mb = packet(ep, &h, zc ? 0 : len);
	if (!mb)
		return false;
	if (!zc) {
		if (len)
			memcpy(rte_pktmbuf_mtod_offset(mb, char *,
						       KN_DP_HDRS_LEN),
			       m->src + at, len);
	} else {
		x = rte_pktmbuf_alloc(c->ext_pool);
		if (!x) {
			rte_pktmbuf_free(mb);
			return false;
		}
		/* the port gets the region's own pages: IOVA = VA, which
		 * is how port.c maps regions for a device that does DMA */
		rte_mbuf_ext_refcnt_update(&m->mr->shinfo, 1);
		rte_pktmbuf_attach_extbuf(x, (void *)(m->src + at),
					  (rte_iova_t)(uintptr_t)(m->src + at),
					  (uint16_t)len, &m->mr->shinfo);
		x->data_len = (uint16_t)len;
		x->pkt_len = len;
		rte_pktmbuf_chain(mb, x);
	}
	tx_add(c, mb);
	ep->ack_owed = false; /* it went with the segment */
	return true;
}

static void pure_ack(struct dp_ep *ep)
{
	struct kn__dp_hdr h = {
		.type = KN_DP_ACK,
		.flags = ep->rnr_owed ? KN_DP_F_RNR : 0,
		.dst_ep = ep->peer_id,
		.token = ep->peer_token,
		.ack = ep->rcv_nxt,
	};
	struct dp_ctx *c = dp_ep_ctx(ep);
	struct rte_mbuf *mb;

	if (c->ntx == DP_BURST)
		dp_tx_flush(c);
	if (c->ntx == DP_BURST || !(mb = packet(ep, &h, 0)))
		return; /* still owed: the next poll tries again */
	tx_add(c, mb);
	ep->ack_owed = ep->rnr_owed = false;
}

void dp_tx_ack_now(struct dp_ep *ep)
{
	pure_ack(ep);
}

/* Timeout: send everything from the oldest unacknowledged segment. */
static void go_back(struct dp_ep *ep)
{
	ep->snd_nxt = ep->snd_una;
	ep->tx_cur = ep->tx_head;
	ep->rtt_on = false; /* what comes back now may answer either copy */
}

/* Send the oldest unacknowledged segment again, alone: the peer holds
 * what came after it (rx.c), so one fills the gap. */
static void resend_una(struct dp_ep *ep)
{
	struct dp_msg *m = &ep->txq[ep->tx_head % DP_TXQ_DEPTH];

	if (ep->tx_head == ep->tx_tail || !m->nseg)
		return;
	ep->rtt_on = false;
	seg_out(ep, m, ep->snd_una - m->seq0);
}

static bool outstanding(const struct dp_ep *ep)
{
	return ep->snd_una != ep->snd_max;
}

/* The retransmission timeout from the smoothed round-trip time. */
static uint64_t rto_of(const struct dp_ep *ep)
{
	const struct dp_ctx *c = dp_ep_ctx(ep);
	uint64_t rto =
		ep->srtt_ns ? ep->srtt_ns + 4 * ep->rttvar_ns : 10 * 1000000ull;

	if (rto < c->rto_min_ns)
		rto = c->rto_min_ns;
	return rto < c->rto_max_ns ? rto : c->rto_max_ns;
}

static void rtt_sample(struct dp_ep *ep, uint64_t rtt)
{
	if (!ep->srtt_ns) {
		ep->srtt_ns = rtt;
		ep->rttvar_ns = rtt / 2;
		return;
	}
	{
		uint64_t err = rtt > ep->srtt_ns ? rtt - ep->srtt_ns
						 : ep->srtt_ns - rtt;

		ep->rttvar_ns = (3 * ep->rttvar_ns + err) / 4;
		ep->srtt_ns = (7 * ep->srtt_ns + rtt) / 8;
	}
}

void dp_tx_ack(struct dp_ep *ep, uint32_t ack, bool rnr, bool pure,
	       uint64_t now)
{
	int32_t d = kn__dp_seq_diff(ack, ep->snd_una);

	if (d > 0) {
		if (kn__dp_seq_diff(ack, ep->snd_max) > 0) {
			kn__swr_ep_fail(
				&ep->sw, -EPROTO,
				"acknowledgement of segments never sent");
			return;
		}
		if (ep->rtt_on && kn__dp_seq_diff(ack, ep->rtt_seq) > 0) {
			rtt_sample(ep, now - ep->rtt_at);
			ep->rtt_on = false;
		}
		while (ep->tx_head != ep->tx_tail) {
			struct dp_msg *m = &ep->txq[ep->tx_head % DP_TXQ_DEPTH];

			if (kn__dp_seq_diff(ack, m->seq0 + m->nseg) < 0)
				break;
			if (m->op_idx != UINT32_MAX &&
			    m->op != KN_DP_READ_REQ) {
				struct dp_op *op =
					&ep->ops[m->op_idx % DP_SQ_DEPTH];

				op->sw.done = true;
				op->sw.bytes = m->len;
				kn__swr_ep_ready(&ep->sw);
			}
			ep->tx_head++;
		}
		ep->snd_una = ack;
		if (kn__dp_seq_diff(ep->snd_nxt, ack) < 0 ||
		    ep->tx_cur - ep->tx_head > ep->tx_tail - ep->tx_head) {
			/* what went again was acknowledged: on from here */
			ep->snd_nxt = ack;
			ep->tx_cur = ep->tx_head;
		}
		ep->dupacks = 0;
		ep->rnr = false;
		if (ep->recovering) {
			if (kn__dp_seq_diff(ack, ep->recover) < 0)
				resend_una(ep); /* the next gap: fill it too */
			else
				ep->recovering = false;
		}
		ep->rto_ns = rto_of(ep);
		ep->progress_at = now;
		ep->rto_at = now + ep->rto_ns;
		return;
	}
	if (d < 0 || !pure || !outstanding(ep))
		return;
	if (rnr) {
		/* the peer is there, without a recv buffer: wait and resend
		 * the SEND it dropped; this is no sign of a dead peer */
		ep->rnr = true;
		ep->hold_until = now + dp_ep_ctx(ep)->rnr_ns;
		ep->progress_at = now;
		ep->rto_at = ep->hold_until + ep->rto_ns;
		ep->recovering = false;
		go_back(ep);
		return;
	}
	if (!ep->rnr && !ep->recovering && ++ep->dupacks >= 3) {
		/* three segments came after a gap: fill it now rather than
		 * at the timeout */
		ep->recovering = true;
		ep->recover = ep->snd_max;
		resend_una(ep);
	}
}

bool dp_tx_idle(const struct dp_ep *ep)
{
	return ep->sw.state != KN_SWR_OPEN ||
	       (!outstanding(ep) && !ep->rnr && ep->snd_nxt == ep->snd_end &&
		!ep->ack_owed && !ep->rnr_owed);
}

uint64_t dp_tx_deadline(const struct dp_ep *ep)
{
	uint64_t t = UINT64_MAX;

	if (ep->sw.state != KN_SWR_OPEN)
		return t;
	if (outstanding(ep))
		t = ep->rto_at;
	if (ep->rnr && ep->hold_until < t)
		t = ep->hold_until;
	return t;
}

void dp_tx_progress(struct dp_ep *ep, uint64_t now)
{
	struct dp_ctx *c = dp_ep_ctx(ep);

	if (ep->sw.state != KN_SWR_OPEN)
		return;
	if (outstanding(ep) && now >= ep->rto_at) {
		if (now - ep->progress_at >= c->timeout_ns) {
			kn__swr_ep_fail(&ep->sw, -ETIMEDOUT,
					"no acknowledgement for %.1f s",
					(double)(now - ep->progress_at) * 1e-9);
			return;
		}
		go_back(ep);
		ep->recovering = false;
		ep->dupacks = 0;
		ep->rto_ns = 2 * ep->rto_ns < c->rto_max_ns ? 2 * ep->rto_ns
							    : c->rto_max_ns;
		ep->rto_at = now + ep->rto_ns;
	}
	if (ep->rnr && now >= ep->hold_until)
		ep->rnr = false;
	while (!ep->rnr && ep->snd_nxt != ep->snd_end &&
	       (uint32_t)(ep->snd_nxt - ep->snd_una) < c->window) {
		struct dp_msg *m = &ep->txq[ep->tx_cur % DP_TXQ_DEPTH];
		bool fresh = ep->snd_nxt == ep->snd_max;

		if (!outstanding(ep)) {
			ep->progress_at = now;
			ep->rto_ns = rto_of(ep);
			ep->rto_at = now + ep->rto_ns;
		}
		if (!seg_out(ep, m, ep->snd_nxt - m->seq0))
			break;
		if (fresh && !ep->rtt_on) {
			ep->rtt_on = true;
			ep->rtt_seq = ep->snd_nxt;
			ep->rtt_at = now;
		}
		ep->snd_nxt++;
		if (kn__dp_seq_diff(ep->snd_nxt, ep->snd_max) > 0)
			ep->snd_max = ep->snd_nxt;
		if (ep->snd_nxt == m->seq0 + m->nseg)
			ep->tx_cur++;
	}
	if (ep->ack_owed || ep->rnr_owed)
		pure_ack(ep);
}
