/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dpdk.h - what the files of the dpdk provider share: its objects and
 * the functions that cross files.  The design is in docs/dpdk.md.
 *
 * The files call each other in one direction only, each using just the
 * ones below it (a DAG, no cycle):
 *
 *   port.c   the context, the port, regions, the poll loop, the ops table
 *     ep.c   endpoints: making and freeing, the control connection,
 *            listeners, grants, posts
 *     rx.c   what arrives: decode, match to an endpoint, deliver
 *   hello.c  the handshake over the control connection
 *     tx.c   segmentation, the window, acknowledgements, retransmission
 *   core.c   what the endpoint core asks of the wire: stopping a failed
 *            endpoint, the segments it holds after gaps
 * packet.c   the wire format, pure functions over bytes (packet.h)
 *
 * Below them all, transport/swrdma.c: the endpoint core shared with the
 * tcp provider (grants, the recv queue, the op ring and its release in
 * post order, held messages, failure, cancel-on-close, the ready list).
 *
 * port.c uses ep.c, rx.c, tx.c and core.c; ep.c uses hello.c, tx.c and
 * core.c; rx.c uses hello.c, tx.c, core.c and packet.c; hello.c uses
 * tx.c and core.c; tx.c uses core.c and packet.c.  A function that a
 * lower file would need from a higher one belongs lower.
 */
#ifndef KN_TRANSPORT_DPDK_H
#define KN_TRANSPORT_DPDK_H

#include <net/if.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include <rte_mbuf.h>

#include "packet.h"
#include "swrdma.h"
#include "transport_priv.h"

#define DP_SQ_DEPTH KN_SWR_SQ_DEPTH /* posted operations per endpoint */
/* messages awaiting acknowledgement: our posts and answers to reads */
#define DP_TXQ_DEPTH (2 * DP_SQ_DEPTH)
#define DP_BURST     32
/* the largest post: a read's length travels in 32 bits */
#define DP_MAX_POST  (1ull << 31)
#define DP_HELLO_LEN 40
/* segments after a gap each endpoint holds until the gap fills */
#define DP_OOO 512
/* and all endpoints of a context together (mbufs of its pool) */
#define DP_HELD_MAX 2048

struct dp_mr {
	struct kn__tp_mr base;
	struct kn__list link; /* on the context's */
	/* held by every segment the port still has of this region */
	struct rte_mbuf_ext_shared_info shinfo;
	bool zc;	 /* its pages may be handed to the port as they are */
	bool dma_mapped; /* rte_extmem_register + rte_dev_dma_map done */
	void *map_addr;	 /* the page-aligned range that was mapped */
	size_t map_len;
};

/* A posted write_imm, read or send, from post to release. */
struct dp_op {
	struct kn__swr_op sw;
	char *dst;	   /* READ: where the answer goes */
	uint64_t len, got; /* READ: bytes asked, bytes landed */
};

/*
 * A message in the send stream: one of our posts, or the answer to one
 * of the peer's reads.  It owns the sequence numbers [seq0, seq0 + nseg)
 * and is rebuilt segment by segment from the region each time it is
 * sent, so that retransmission needs no copy.
 */
struct dp_msg {
	uint8_t op;	 /* KN_DP_* */
	uint32_t op_idx; /* the post it completes; UINT32_MAX for answers */
	const char *src;
	struct dp_mr *mr; /* where @src lies */
	uint64_t len;
	uint32_t key, imm;
	uint32_t total; /* READ_REQ: the bytes asked for */
	uint64_t off;
	uint32_t seq0, nseg; /* nseg 0: not numbered yet (handshake) */
	bool gone;	     /* its region was deregistered under it */
};

/* What an epoll event of the context is about. */
enum dp_handle_kind { DP_H_EP = 1, DP_H_LISTENER, DP_H_TIMER };

struct dp_handle {
	enum dp_handle_kind kind;
	int fd;
};

/*
 * An endpoint.  In its core (swrdma.h): sw.client, we connected (else a
 * listener accepted); sw.connect_event, a failed CONNECT is owed (a good
 * one is reported as the handshake ends); sw.hidden, accepted with its
 * handshake not done: not the user's yet, freed by the poll loop if it
 * fails.
 */
struct dp_ep {
	struct kn__swr_ep sw;
	struct dp_handle h; /* the control connection */
	/* on the context's tx list: it has segments, acknowledgements or
	 * timers to see to */
	struct kn__list tx_link;
	bool connected;		      /* the control connection is up */
	struct dp_listener *listener; /* where it was accepted */

	/* handshake: what we sent and what came */
	uint8_t hello_in[DP_HELLO_LEN];
	uint32_t hello_got;

	uint32_t id, token;	      /* ours, named in the peer's packets */
	uint32_t peer_id, peer_token; /* the peer's, named in ours */
	struct kn__dp_addr peer;
	uint32_t max_payload; /* the smaller of the two ends' */

	struct dp_op ops[DP_SQ_DEPTH]; /* ring sw.ops */
	uint32_t rd_next;

	/* the send stream */
	struct dp_msg txq[DP_TXQ_DEPTH];   /* head: oldest unacknowledged */
	uint32_t tx_head, tx_cur, tx_tail; /* tx_cur holds snd_nxt */
	uint32_t snd_una, snd_nxt, snd_max, snd_end;
	uint32_t dupacks;
	uint64_t rto_ns, rto_at, progress_at, hold_until;
	bool rnr;	 /* the peer had no recv posted: wait, then resend */
	bool recovering; /* fast retransmission until snd_una passes recover */
	uint32_t recover;
	/* round-trip time (RFC 6298): one segment timed at a time, never a
	 * retransmitted one (Karn) */
	bool rtt_on;
	uint32_t rtt_seq;
	uint64_t rtt_at, srtt_ns, rttvar_ns;

	/* the receive stream */
	uint32_t rcv_nxt;
	bool ack_owed, rnr_owed;
	uint8_t rx_op; /* the message in progress, 0: none */
	uint32_t rx_key, rx_total;
	uint64_t rx_next, rx_bytes;
	struct kn__swr_recv rx_recv;
	bool rx_unexp; /* rx_recv is ours: the message waits for a recv */
	/* messages that came before a recv was posted for them; beyond
	 * KN_SWR_HELD the sender waits (RNR) */
	struct kn__swr_held held;
	/* segments that came after a gap, by seq % DP_OOO */
	struct dp_held {
		struct rte_mbuf *m; /* NULL: empty */
		struct kn__dp_pkt p;
	} ooo[DP_OOO];
	uint32_t nheld;
};

struct dp_listener {
	struct kn__tp_listener base;
	struct dp_handle h;
	struct kn__list link; /* on the context's */
};

struct dp_ctx {
	struct kn__swr_ctx sw; /* its endpoints, the ready list, the CQ */
	uint16_t port;
	bool probed; /* we hot-plugged the port's vdev: remove it too */
	bool started;
	bool vdev; /* no DMA: any pages may be handed to the port */
	char iface[IF_NAMESIZE];
	char devname[64];
	int lock_fd; /* holds the interface for this context */
	struct kn__dp_addr me;
	uint32_t max_payload;
	struct rte_mempool *pool, *ext_pool;
	int epfd, tfd;
	struct dp_handle timer;
	struct kn__list mrs, listeners;
	/* the endpoints with something to send or time (dp_tx_busy): the
	 * poll's transmit and timer sweeps visit these, not every one */
	struct kn__list tx_eps;
	uint32_t nopen;	    /* endpoints open: the timer wakes while any is */
	struct dp_ep **tab; /* by endpoint id */
	uint32_t tab_cap;
	struct rte_mbuf *tx[DP_BURST];
	unsigned int ntx;
	uint16_t ip_id;
	uint32_t polls;
	uint32_t held;	   /* mbufs the endpoints hold after gaps */
	uint64_t timer_at; /* when the timer fd fires; 0: disarmed */
	/* parameters (KANEL_DPDK_*) */
	uint32_t window; /* segments in flight per endpoint */
	uint64_t rto_min_ns, rto_max_ns, timeout_ns, rnr_ns, wake_ns;
	uint32_t zc_threshold;
	uint64_t forged; /* packets dropped for a wrong id or token */
};

static inline struct dp_ctx *dp_ctx(struct kn__tp_ctx *c)
{
	return container_of(c, struct dp_ctx, sw.base);
}

static inline struct dp_ep *dp_ep(struct kn__tp_ep *e)
{
	return container_of(e, struct dp_ep, sw.base);
}

static inline struct dp_ep *dp_ep_of(struct kn__list *link)
{
	return container_of(link, struct dp_ep, sw.link);
}

static inline struct dp_ctx *dp_ep_ctx(const struct dp_ep *ep)
{
	return dp_ctx(ep->sw.base.ctx);
}

/* The monotonic clock, in ns: every timer of the provider runs on it. */
static inline uint64_t dp_now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* @ep has something to send or time: on the tx list for the poll. */
static inline void dp_tx_busy(struct dp_ep *ep)
{
	if (!kn__list_on(&ep->tx_link))
		kn__list_append(&dp_ep_ctx(ep)->tx_eps, &ep->tx_link);
}

/* core.c */
/* The wire's hooks for the endpoint core (failure). */
extern const struct kn__swr_prov kn__dp_prov;
/* Free what an endpoint holds after gaps. */
void dp_ep_drop_held(struct dp_ep *ep);

/* tx.c */
int dp_tx_queue(struct dp_ep *ep, const struct dp_msg *m);
void dp_tx_open(struct dp_ep *ep, uint64_t now);
void dp_tx_ack(struct dp_ep *ep, uint32_t ack, bool rnr, bool pure,
	       uint64_t now);
void dp_tx_progress(struct dp_ep *ep, uint64_t now);
/* Whether @ep has nothing to send or time: off the tx list it goes. */
bool dp_tx_idle(const struct dp_ep *ep);
void dp_tx_flush(struct dp_ctx *c);
/* An acknowledgement now: for a segment after a gap (a duplicate ack) */
void dp_tx_ack_now(struct dp_ep *ep);
/* the earliest time an endpoint's timers want a poll; UINT64_MAX: none */
uint64_t dp_tx_deadline(const struct dp_ep *ep);

/* hello.c */
/* Send our hello on the control connection: 0 or a negative errno. */
int dp_ep_send_hello(struct dp_ep *ep);
/* Read what has come of the peer's hello; the whole of it opens @ep. */
void dp_ep_read_hello(struct dp_ep *ep);

/* rx.c */
/* Take in one received packet: true if it keeps the mbuf. */
bool dp_rx_mbuf(struct dp_ctx *c, struct rte_mbuf *m, uint64_t now);

/* ep.c */
void dp_ctl_event(struct dp_ctx *c, struct dp_handle *h, uint32_t events);
void dp_ep_reap(struct dp_ctx *c);
/* the endpoint half of the ops table */
int dp_listen(struct kn__tp_ctx *ctx, const struct sockaddr *addr,
	      socklen_t addrlen, void *user, struct kn__tp_listener **out);
int dp_listener_addr(const struct kn__tp_listener *lb,
		     struct sockaddr_storage *ss);
void dp_listener_close(struct kn__tp_listener *lb);
int dp_connect(struct kn__tp_ctx *ctx, const struct sockaddr *addr,
	       socklen_t addrlen, void *user, struct kn__tp_ep **out);
void dp_ep_close(struct kn__tp_ep *e);
int dp_ep_grant(struct kn__tp_ep *e, struct kn__tp_mr *m, uint64_t off,
		uint64_t len, uint32_t access, struct kn__tp_rdesc *rdesc);
int dp_ep_peer(const struct kn__tp_ep *e, struct sockaddr_storage *ss);
int dp_post_write_imm(struct kn__tp_ep *e, struct kn__tp_mr *mr, size_t off,
		      size_t len, const struct kn__tp_rdesc *dst,
		      uint64_t dst_off, uint32_t imm, void *user);
int dp_post_read(struct kn__tp_ep *e, struct kn__tp_mr *mr, size_t off,
		 size_t len, const struct kn__tp_rdesc *src, uint64_t src_off,
		 void *user);
int dp_post_send(struct kn__tp_ep *e, struct kn__tp_mr *mr, size_t off,
		 size_t len, void *user);
int dp_post_recv(struct kn__tp_ep *e, struct kn__tp_mr *mr, size_t off,
		 size_t len, void *user);
int dp_ep_post(struct kn__tp_ep *e, const struct dp_msg *m, uint32_t kind,
	       void *user, char *read_dst);

#endif /* KN_TRANSPORT_DPDK_H */
