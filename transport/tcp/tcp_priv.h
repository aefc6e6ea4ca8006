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
 * The grant table and the queue of posted recv buffers are swrdma.h's,
 * shared with the dpdk provider.
 *
 * The drivers call only what this header declares: the framing's
 * tx_want/tx_got and rx_want/rx_got, failure, the ready list, and the
 * life cycle of endpoints and listeners; the framing calls back into the
 * driver only through ep_kick() and the table's hooks.
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

#define SQ_DEPTH   1024 /* posted operations per endpoint, in flight */
#define RECV_CHUNK (1u << 30)

enum handle_kind { H_EP = 1, H_LISTENER };

/* What an io_uring completion is about: its user_data points at one. */
enum req_kind { R_RX = 1, R_TX, R_TX_ZC, R_CONNECT, R_ACCEPT, R_IGNORE };

struct req {
	enum req_kind kind;
	void *obj; /* the endpoint or listener */
};

struct handle {
	enum handle_kind kind;
	int fd;
};

struct tcp_mr {
	struct kn__tp_mr base;
	struct tcp_mr *prev, *next; /* the context's, freed with it */
};

struct tcp_listener {
	struct kn__tp_listener base;
	struct handle h;
	struct tcp_listener *next;
	struct req req;	   /* io_uring: the multishot poll */
	bool starved;	   /* connections wait for room in the CQ */
	uint32_t inflight; /* io_uring: completions still to come */
	bool closing;
	bool rearm;	  /* io_uring: the poll waits for room in the SQ */
	bool cancel_owed; /* io_uring: its cancel waits for room in the SQ */
};

/* A posted write_imm, read or send, from post to release. */
struct op {
	uint32_t kind; /* KN_TP_OP_* */
	int status;
	bool sent;	  /* its frame is out */
	bool done;	  /* sent and answered (read), released (zero-copy) */
	uint32_t zc_refs; /* zero-copy sends of it the kernel still holds */
	struct req zreq;  /* io_uring: tags its zero-copy sends */
	void *user;
	uint64_t bytes;
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

enum ep_state { EP_CONNECTING, EP_OPEN, EP_ERROR };
enum rx_state { RX_HDR, RX_WAIT_RECV, RX_PAYLOAD };
enum rx_target { T_IMM, T_RECV, T_READ };
enum tx_kind { TX_NONE, TX_OP, TX_RESP };

struct tcp_ep {
	struct kn__tp_ep base;
	struct handle h;
	struct tcp_ep *prev, *next;
	enum ep_state state;
	int error;	    /* first failure, negative errno */
	bool connect_event; /* a CONNECT completion is owed */
	bool disc_event;    /* a DISCONNECT completion is owed */
	uint32_t events;    /* epoll interest now registered */
	char peer[64];
	struct kn__swr_grants grants;

	struct op ops[SQ_DEPTH]; /* ring: head released, sent, tail */
	uint32_t op_head, op_sent, op_tail, rd_next;
	struct resp resps[SQ_DEPTH];
	uint32_t resp_head, resp_tail;
	struct kn__swr_rq rq; /* posted recv buffers */

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
	bool rx_owed; /* rx_comp waits for room in the CQ */
	struct kn__tp_completion rx_comp;

	/* io_uring: at most one recv and one send in flight */
	struct req rx_req, tx_req, zresp_req, conn_req;
	bool rx_inflight, tx_inflight, closing;
	bool cancel_owed;  /* its cancel waits for room in the SQ */
	bool zc;	   /* zero-copy sends pay off: the peer is not local */
	uint32_t inflight; /* completions still to come */

	/* on the context's ready list: it may have completions to release */
	bool ready;
	struct tcp_ep *ready_prev, *ready_next;
};

struct tcp_driver;

/* The context; each driver's own begins with it (ctx_size below). */
struct tcp_ctx {
	struct kn__tp_ctx base;
	const struct tcp_driver *drv;
	struct kn__tp_cq cq; /* completions not yet polled */
	struct tcp_mr *mrs;
	bool test_keys;	  /* KN_TP_CTX_TEST_KEYS */
	bool zc_loopback; /* KN_TP_CTX_ZC_LOOPBACK */
	struct tcp_ep *eps;
	/* the endpoints that may have completions to release, oldest
	 * first: poll visits these, not every endpoint */
	struct tcp_ep *ready_head, *ready_tail;
	struct tcp_listener *listeners;
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
	 * c->eps: 0, or a negative errno and the caller frees it. */
	int (*ep_add)(struct tcp_ep *ep);
	/* The endpoint's state changed: ask for what it can do now. */
	void (*ep_kick)(struct tcp_ep *ep);
	/* A frame was queued (op_tail moved): send it if it can go now. */
	void (*ep_post)(struct tcp_ep *ep);
	/* A recv was posted while a SEND waited for one: take it in. */
	void (*ep_recv_posted)(struct tcp_ep *ep);
	/* The endpoint failed (ep_fail, its socket shut): stop watching. */
	void (*ep_stop)(struct tcp_ep *ep);
	/* Close an endpoint already taken off c->eps: free it with
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
	return container_of(c, struct tcp_ctx, base);
}

static inline struct tcp_ep *tep(struct kn__tp_ep *e)
{
	return container_of(e, struct tcp_ep, base);
}

static inline struct tcp_ctx *ep_ctx(const struct tcp_ep *ep)
{
	return tctx(ep->base.ctx);
}

/*
 * @ep may have something to release now (an operation done, an owed
 * completion, a state change): put it on its context's ready list for
 * the next poll.  A closing endpoint is gone from the list for good.
 */
static inline void ep_ready(struct tcp_ep *ep)
{
	struct tcp_ctx *c = ep_ctx(ep);

	if (ep->ready || ep->closing)
		return;
	ep->ready = true;
	ep->ready_next = NULL;
	ep->ready_prev = c->ready_tail;
	if (c->ready_tail)
		c->ready_tail->ready_next = ep;
	else
		c->ready_head = ep;
	c->ready_tail = ep;
}

/* Take @ep off its context's ready list, if it is there. */
static inline void ep_unready(struct tcp_ep *ep)
{
	struct tcp_ctx *c = ep_ctx(ep);

	if (!ep->ready)
		return;
	ep->ready = false;
	if (ep->ready_prev)
		ep->ready_prev->ready_next = ep->ready_next;
	else
		c->ready_head = ep->ready_next;
	if (ep->ready_next)
		ep->ready_next->ready_prev = ep->ready_prev;
	else
		c->ready_tail = ep->ready_prev;
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
	       ep->op_sent != ep->op_tail;
}

/* tcp_frame.c: an endpoint's wire. */

/* One log line about @ep: "kanel: tcp: peer HOST:PORT: ...". */
void kn__tcp_ep_log(const struct tcp_ep *ep, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/*
 * Move @ep to the error state once: log @why, shut the socket, and
 * complete every pending operation (through kn__tcp_ep_release).
 */
void kn__tcp_ep_fail(struct tcp_ep *ep, int err, const char *why, ...)
	__attribute__((format(printf, 3, 4)));

/*
 * Move @ep's finished work to the completion queue, in order: false when
 * the queue filled before all of it went.
 */
bool kn__tcp_ep_release(struct tcp_ep *ep);

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
 * else the negative errno it failed with (kn__tcp_ep_fail done).
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
