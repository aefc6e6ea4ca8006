/* SPDX-License-Identifier: Apache-2.0 */
/*
 * core.c - what the endpoint core (swrdma.h: failure, release in post
 * order, held messages, cancel-on-close, shared with tcp) asks of the
 * dpdk wire: stopping a failed endpoint, and the segments it holds after
 * a gap.
 *
 * The bottom of the provider's files but packet.c: it calls nothing of
 * theirs, and they all call it (dpdk.h has the order).
 */
#include <errno.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <rte_mbuf.h>

#include "dpdk.h"

/*
 * @e failed: close its control connection (the peer fails its end too)
 * and forget the send stream and what it held after gaps.
 */
static void dp_stop(struct kn__swr_ep *e, enum kn__swr_state was)
{
	struct dp_ep *ep = container_of(e, struct dp_ep, sw);
	struct dp_ctx *c = dp_ep_ctx(ep);

	if (was == KN_SWR_OPEN)
		c->nopen--;
	epoll_ctl(c->epfd, EPOLL_CTL_DEL, ep->h.fd, NULL);
	shutdown(ep->h.fd, SHUT_RDWR);
	dp_ep_drop_held(ep);
	ep->tx_head = ep->tx_cur = ep->tx_tail;
	ep->snd_una = ep->snd_nxt = ep->snd_max = ep->snd_end;
	ep->ack_owed = ep->rnr_owed = false;
}

const struct kn__swr_prov kn__dp_prov = {
	.name = "dpdk",
	.stop = dp_stop,
	.resume = NULL,
};

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
