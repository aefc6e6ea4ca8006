/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hello.c - the dpdk provider's handshake: the hello each end sends over
 * its control connection (MAC, IPv4 address and UDP port of its DPDK
 * port, the endpoint id and the random token the other end must put in
 * every packet, the initial sequence number of its send stream and the
 * largest segment payload it takes), and the reading and checking of the
 * peer's, which opens the endpoint and starts its send stream (tx.c).
 *
 * ep.c sends the client's hello once its connection is up and reads the
 * peer's when the connection is readable; rx.c reads it too when a
 * packet arrives for an endpoint still in its handshake, since the
 * peer's first segment may overtake the hello on the other path.
 */
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

#include "dpdk.h"
#include "wire.h"

#define HELLO_MAGIC   0x48444e4bu /* "KNDH" */
#define HELLO_VERSION 1u
#define MIN_PAYLOAD   256u

/* Our address on the port: the control connection's, if none is set. */
static void local_ip(struct dp_ep *ep)
{
	struct dp_ctx *c = dp_ep_ctx(ep);
	struct sockaddr_in sa;
	socklen_t len = sizeof(sa);

	if (!c->me.ip &&
	    getsockname(ep->h.fd, (struct sockaddr *)&sa, &len) == 0 &&
	    sa.sin_family == AF_INET)
		c->me.ip = sa.sin_addr.s_addr;
}

int dp_ep_send_hello(struct dp_ep *ep)
{
	struct dp_ctx *c = dp_ep_ctx(ep);
	uint8_t b[DP_HELLO_LEN] = { 0 };
	ssize_t n;

	local_ip(ep);
	kn__wire_put32(b, HELLO_MAGIC);
	b[4] = HELLO_VERSION;
	memcpy(b + 8, c->me.mac, 6);
	memcpy(b + 16, &c->me.ip, 4);
	b[20] = (uint8_t)c->me.port;
	b[21] = (uint8_t)(c->me.port >> 8);
	kn__wire_put32(b + 24, ep->id);
	kn__wire_put32(b + 28, ep->token);
	kn__wire_put32(b + 32, ep->snd_end);
	kn__wire_put32(b + 36, c->max_payload);
	/* the first bytes on a fresh connection: the socket buffer takes
	 * them whole */
	n = send(ep->h.fd, b, sizeof(b), MSG_NOSIGNAL | MSG_DONTWAIT);
	if (n != (ssize_t)sizeof(b))
		return n < 0 ? -errno : -EIO;
	return 0;
}

/* The peer's hello is in: check it, and the endpoint is open. */
static void hello_done(struct dp_ep *ep)
{
	struct dp_ctx *c = dp_ep_ctx(ep);
	const uint8_t *b = ep->hello_in;
	uint32_t maxp = kn__wire_get32(b + 36);
	struct kn__tp_completion comp;
	int ret;

	if (kn__wire_get32(b) != HELLO_MAGIC || b[4] != HELLO_VERSION) {
		kn__swr_ep_fail(&ep->sw, -EPROTO,
				"not a kanel dpdk hello (is the peer "
				"on another transport?)");
		return;
	}
	if (maxp < MIN_PAYLOAD || !kn__wire_get32(b + 24) || !(b[20] | b[21]) ||
	    (b[8] & 1)) {
		kn__swr_ep_fail(&ep->sw, -EPROTO,
				"hello with a bad payload size, id, "
				"port or MAC");
		return;
	}
	memcpy(ep->peer.mac, b + 8, 6);
	memcpy(&ep->peer.ip, b + 16, 4);
	ep->peer.port = (uint16_t)(b[20] | b[21] << 8);
	ep->peer_id = kn__wire_get32(b + 24);
	ep->peer_token = kn__wire_get32(b + 28);
	ep->rcv_nxt = kn__wire_get32(b + 32);
	ep->max_payload = maxp < c->max_payload ? maxp : c->max_payload;
	if (!ep->sw.client && (ret = dp_ep_send_hello(ep))) {
		kn__swr_ep_fail(&ep->sw, ret, "cannot answer the hello");
		return;
	}
	ep->sw.state = KN_SWR_OPEN;
	ep->sw.hidden = false;
	c->nopen++;
	/* reported now, before anything the peer sends can be: its first
	 * message may be in the same burst as the packet that made us read
	 * the hello (rx.c), and the user must see the endpoint first */
	comp = (struct kn__tp_completion){
		.user = ep->sw.client  ? ep->sw.base.user
			: ep->listener ? ep->listener->base.user
				       : NULL,
		.ep = &ep->sw.base,
		.op = ep->sw.client ? KN_TP_OP_CONNECT : KN_TP_OP_ACCEPT,
	};
	kn__tp_cq_push_grow(&c->sw.cq, &comp, "dpdk");
	dp_tx_open(ep, dp_now_ns());
	dp_tx_progress(ep, dp_now_ns()); /* what was posted meanwhile */
}

void dp_ep_read_hello(struct dp_ep *ep)
{
	ssize_t n;

	if (ep->sw.state != KN_SWR_STARTING || !ep->connected)
		return;
	n = recv(ep->h.fd, ep->hello_in + ep->hello_got,
		 DP_HELLO_LEN - ep->hello_got, MSG_DONTWAIT);
	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
		kn__swr_ep_fail(&ep->sw, n ? -errno : -ECONNRESET,
				"control connection closed in the handshake");
		return;
	}
	if (n < 0)
		return;
	ep->hello_got += (uint32_t)n;
	if (ep->hello_got == DP_HELLO_LEN)
		hello_done(ep);
}
