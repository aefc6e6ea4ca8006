/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tcp_priv.h - what the files of the tcp provider share: its objects,
 * the I/O driver table, and the endpoint functions the drivers call.
 *
 * The provider is three parts.  tcp.c holds the ops table: contexts,
 * regions, grants, endpoints, posts, listeners and poll.  tcp_frame.c is
 * each endpoint's wire: the frames of wire.h in and out, the checks of
 * one-sided frames against grants, failure, and the release of
 * completions in post order.  A driver moves the bytes and says when a
 * socket is ready: tcp_epoll.c (level-triggered epoll, non-blocking
 * send and recv) and tcp_uring.c (io_uring: at most one recv and one
 * send per socket in flight).  The driver is chosen once per context,
 * when it is created (the first in KN_TCP_DRIVERS whose init succeeds),
 * and reached through the const table in ctx->drv, as Redis's ae.c
 * reaches ae_epoll.c: the framing code never names one.
 *
 * The endpoint core (grants, posted recv buffers, the op ring and its
 * release in post order, failure, the ready list) is swrdma.h's, shared
 * with the dpdk provider: each endpoint and context begins with its
 * half.
 *
 * The drivers call only what this header declares: the framing's
 * tx_want/tx_got and rx_want/rx_got, the core's failure and ready list,
 * and the life cycle of endpoints and listeners; the framing calls back
 * into the driver only through ep_kick() and the table's hooks.  The
 * files call in one direction: the drivers use tcp.c and tcp_frame.c,
 * tcp.c uses tcp_frame.c, and all of them use swrdma.c.
 */
#ifndef KN_TCP_PRIV_H
#define KN_TCP_PRIV_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "swrdma.h"
#include "transport_priv.h"
#include "wire.h"

#define SQ_DEPTH   KN_SWR_SQ_DEPTH /* posted operations per endpoint */
#define RECV_CHUNK (1u << 30)

enum handle_kind { H_EP = 1, H_LISTENER };

/* What an io_uring completion is about: its user_data points at one. */
enum req_kind { R_RX = 1, R_TX, R_TX_ZC, R_CONNECT, R_ACCEPT, R_IGNORE };

struct req {
	enum req_kind kind;
	void *obj; /* the endpoint or listener */
};

/* An endpoint's or listener's socket, and its I/O in the kernel. */
struct handle {
	enum handle_kind kind;
	int fd;
	/* io_uring: completions still to come; its cancel waits for room
	 * in the SQ; once closed, on the driver's zombies until the
	 * kernel has let go of it */
	uint32_t inflight;
	bool cancel_owed;
	struct kn__list zombie;
};

struct tcp_mr {
	struct kn__tp_mr base;
	struct kn__list link; /* on the context's, freed with it */
};

struct tcp_listener {
	struct kn__tp_listener base;
	struct handle h;
	struct kn__list link; /* on the context's */
	struct req req;	      /* io_uring: the multishot poll */
	bool starved;	      /* connections wait for room in the CQ */
	bool closing;
	bool rearm; /* io_uring: the poll waits for room in the SQ */
};

/*
 * A posted write_imm, read or send, from post to release: done once
 * sent and answered (read); sw.refs counts its zero-copy sends the
 * kernel still holds.
 */
struct op {
	struct kn__swr_op sw;
	bool sent;	 /* its frame is out */
	struct req zreq; /* io_uring: tags its zero-copy sends */
	uint8_t hdr[KN_WIRE_HDR_LEN];
	const char *payload; /* WRITE_IMM, SEND */
	char *dst;	     /* READ: where the answer goes */
	uint32_t len;
};

/* An answer we owe the peer: a READ_RESP from one of our regions. */
struct resp {
	uint8_t hdr[KN_WIRE_HDR_LEN];
	const char *src;
	uint32_t len;
};

enum rx_state { RX_HDR, RX_WAIT_RECV, RX_PAYLOAD };
enum rx_target { T_IMM, T_RECV, T_READ };
enum tx_kind { TX_NONE, TX_OP, TX_RESP };

/*
 * An endpoint; sw.owed_comp is a received message's completion that
 * found the CQ full (the socket is not read until it goes), and
 * sw.closing means the io_uring driver waits for the kernel to let go.
 */
struct tcp_ep {
	struct kn__swr_ep sw;
	struct handle h;
	uint32_t events; /* epoll interest now registered */

	/* ring sw.ops: sw.op_head released, op_sent, sw.op_tail */
	struct op ops[SQ_DEPTH];
	uint32_t op_sent, rd_next;
	struct resp resps[SQ_DEPTH];
	uint32_t resp_head, resp_tail;

	enum tx_kind tx;      /* the frame on the wire */
	size_t tx_done;	      /* its bytes sent so far */
	struct msghdr tx_msg; /* what of it to send next */
	struct iovec tx_iov[2];
	uint32_t tx_seq, rx_seq;

	enum rx_state rx;
	enum rx_target rx_target;
	uint8_t rx_hdr[KN_WIRE_HDR_LEN];
	uint32_t rx_hlen;
	struct kn__wire_hdr rh;
	char *rx_dst;
	uint64_t rx_left;

	/* io_uring: at most one recv and one send in flight */
	struct req rx_req, tx_req, zresp_req, conn_req;
	bool rx_inflight, tx_inflight;
	bool zc; /* zero-copy sends pay off: the peer is not local */
};

struct tcp_driver;

/* The context; each driver's own begins with it (ctx_size below). */
struct tcp_ctx {
	struct kn__swr_ctx sw; /* its endpoints, the ready list, the CQ */
	const struct tcp_driver *drv;
	struct kn__list mrs;
	bool test_keys;	  /* KN_TP_CTX_TEST_KEYS */
	bool zc_loopback; /* KN_TP_CTX_ZC_LOOPBACK */
	struct kn__list listeners;
};

/*
 * An I/O driver: how a context learns that sockets are ready and moves
 * their bytes.  Every hook is called from the thread that uses the
 * context; none blocks.
 */
struct tcp_driver {
	const char *name; /* the context's name: "tcp/epoll" */
	size_t ctx_size;  /* its context, which begins with a tcp_ctx */
	/* Set up @c's driver half: 0, or a negative errno (the next
	 * driver is tried; the last one's error is the context's). */
	int (*init)(struct tcp_ctx *c, const struct kn__tp_ctx_attr *attr);
	/* Undo init, before the endpoints and listeners are freed: nothing
	 * of theirs may still be the kernel's when it returns. */
	void (*fini)(struct tcp_ctx *c);
	/* Watch a new endpoint (connecting or open), not yet listed in
	 * c->sw.eps: 0, or a negative errno and the caller frees it. */
	int (*ep_add)(struct tcp_ep *ep);
	/* The endpoint's state changed: ask for what it can do now. */
	void (*ep_kick)(struct tcp_ep *ep);
	/* A frame was queued (op_tail moved): send it if it can go now. */
	void (*ep_post)(struct tcp_ep *ep);
	/* A recv was posted while a SEND waited for one: take it in. */
	void (*ep_recv_posted)(struct tcp_ep *ep);
	/* The endpoint failed (ep_fail, its socket shut): stop watching. */
	void (*ep_stop)(struct tcp_ep *ep);
	/* Close an endpoint already taken off c's lists: free it with
	 * kn__tcp_ep_free(), now or once the kernel has let go of it. */
	void (*ep_close)(struct tcp_ep *ep);
	/* Watch a new listener: 0, or a negative errno. */
	int (*listen)(struct tcp_listener *l);
	/* Close a listener already taken off c->listeners, its socket
	 * shut: free it (kn__tcp_listener_free), now or later. */
	void (*listener_close)(struct tcp_listener *l);
	/* Handle what is ready (reads, writes, connects, accepts) without
	 * waiting: 0 or a negative errno, the context's failure. */
	int (*progress)(struct tcp_ctx *c);
	/* After a poll: what the caller may sleep on must be in flight.
	 * May be NULL. */
	void (*flush)(struct tcp_ctx *c);
	/* The fd to sleep on for completions. */
	int (*fd)(const struct tcp_ctx *c);
};

extern const struct tcp_driver kn__tcp_epoll_driver;
#ifdef KN_HAVE_URING
extern const struct tcp_driver kn__tcp_uring_driver;
/* The drivers in the order tried; io_uring may be refused (seccomp). */
#define KN_TCP_DRIVERS &kn__tcp_uring_driver, &kn__tcp_epoll_driver
#else
#define KN_TCP_DRIVERS &kn__tcp_epoll_driver
#endif

static inline struct tcp_ctx *tctx(struct kn__tp_ctx *c)
{
	return container_of(c, struct tcp_ctx, sw.base);
}

static inline struct tcp_ep *tep(struct kn__tp_ep *e)
{
	return container_of(e, struct tcp_ep, sw.base);
}

static inline struct tcp_ep *tep_of(struct kn__list *link)
{
	return container_of(link, struct tcp_ep, sw.link);
}

static inline struct tcp_listener *tlistener_of(struct kn__list *link)
{
	return container_of(link, struct tcp_listener, link);
}

static inline struct tcp_ctx *ep_ctx(const struct tcp_ep *ep)
{
	return tctx(ep->sw.base.ctx);
}

/* @ep may have something to release: on the ready list (swrdma.h). */
static inline void ep_ready(struct tcp_ep *ep)
{
	kn__swr_ep_ready(&ep->sw);
}

/* After the endpoint's state changed: ask for what it can do now. */
static inline void ep_kick(struct tcp_ep *ep)
{
	ep_ctx(ep)->drv->ep_kick(ep);
}

/* Whether @ep has a frame to send, partly sent or not yet started. */
static inline bool tx_pending(const struct tcp_ep *ep)
{
	return ep->tx != TX_NONE || ep->resp_head != ep->resp_tail ||
	       ep->op_sent != ep->sw.op_tail;
}

/* tcp_frame.c: an endpoint's wire. */

/* The wire's hooks for the endpoint core: failure, owed completions. */
extern const struct kn__swr_prov kn__tcp_prov;

/*
 * The next bytes to send, as ep->tx_msg over ep->tx_iov, or false when
 * there are none; *@payload_len is the frame's payload size.
 */
bool kn__tcp_tx_want(struct tcp_ep *ep, size_t *payload_len);

/* @n bytes of the frame on the wire went out (or a negative errno). */
void kn__tcp_tx_got(struct tcp_ep *ep, ssize_t n);

/*
 * Where the next received bytes go (*@dst, at most *@len), or false when
 * the endpoint should not read now.
 */
bool kn__tcp_rx_want(struct tcp_ep *ep, char **dst, size_t *len);

/* @n bytes arrived where rx_want said (0: end of stream; < 0: errno). */
void kn__tcp_rx_got(struct tcp_ep *ep, ssize_t n);

/* tcp.c: the endpoint and listener life cycle, for the drivers. */

/*
 * A connecting endpoint's socket became writable: 0 when it is open now,
 * else the negative errno it failed with (kn__swr_ep_fail done).
 */
int kn__tcp_ep_connected(struct tcp_ep *ep);

/* Report what a closed endpoint leaves pending, close it, free it. */
void kn__tcp_ep_free(struct tcp_ep *ep);

/* Close and free @ep's socket and memory, reporting nothing. */
void kn__tcp_ep_dealloc(struct tcp_ep *ep);

/* Accept what waits on @l while the completion queue has room. */
void kn__tcp_listener_accept(struct tcp_listener *l);

/* Close @l's socket and free it. */
void kn__tcp_listener_free(struct tcp_listener *l);

#endif
