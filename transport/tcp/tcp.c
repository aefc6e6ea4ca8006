/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tcp.c - the tcp provider: RDMA semantics over TCP sockets, epoll
 * backend.
 *
 * Each endpoint is one non-blocking TCP connection carrying the frames of
 * wire.h.  A one-sided write is a WRITE_IMM frame whose payload the
 * receiver reads straight into the target region, after checking the
 * key, bounds and rights against what this endpoint's peer was granted
 * (kn__tp_ep_grant): no intermediate buffer.  Grants belong to one
 * endpoint, and their keys are random: a peer reaches only the ranges
 * granted to its own connection, and before the first grant a one-sided
 * frame fails the endpoint.  A read is a
 * READ_REQ answered by a READ_RESP whose payload goes straight into the
 * reader's local region.  SEND frames fill the oldest posted recv buffer;
 * with none posted, the receiver stops reading that socket until one is
 * (TCP's own flow control then holds the sender).
 *
 * Posted operations live in a per-endpoint ring in post order (the send
 * queue, fixed size: posting allocates nothing) and are released to the
 * completion queue from its head, so completions come back in post
 * order.  One frame is on the wire at a time per socket, so frames never
 * interleave; answers to the peer's reads go first.  Anything malformed
 * fails that endpoint alone: it is logged once, every pending operation
 * completes with an error, and the peer's socket is shut down.
 *
 * Progress happens in kn__tp_poll() (and opportunistically in posts, one
 * send call): level-triggered epoll over every socket, a completion
 * queue ring that poll drains.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#ifdef KN_HAVE_URING
#include <liburing.h>
#include <poll.h>
#include <sys/syscall.h>
#endif

#include "transport_priv.h"
#include "wire.h"

#define SQ_DEPTH     1024 /* posted operations per endpoint, in flight */
#define RQ_DEPTH     1024 /* posted recv buffers per endpoint */
#define CQ_DEPTH     4096
#define MAX_MSG	     4096
#define RECV_CHUNK   (1u << 30)
#define EPOLL_BATCH  64
#define RING_ENTRIES 1024
#define ZC_THRESHOLD (64u << 10) /* payloads sent zero-copy from here */

enum handle_kind { H_EP = 1, H_LISTENER };

/* What an io_uring completion is about: its user_data points at one. */
enum req_kind { R_RX = 1, R_TX, R_TX_ZC, R_CONNECT, R_ACCEPT, R_IGNORE };

struct req {
	enum req_kind kind;
	void *obj; /* the endpoint or listener */
};

#ifdef KN_HAVE_URING
/* Tags submissions whose completion needs nothing (cancellations). */
static struct req ignore_req = { R_IGNORE, NULL };
#endif

struct handle {
	enum handle_kind kind;
	int fd;
};

struct tcp_mr {
	struct kn__tp_mr base;
	struct tcp_mr *prev, *next; /* the context's, freed with it */
};

/* A range of one of our regions that an endpoint's peer may touch. */
struct grant {
	uint32_t key;	 /* random; unique among the endpoint's grants */
	uint32_t access; /* KN_TP_REMOTE_* */
	struct tcp_mr *mr;
	uint64_t off, len;
};

struct tcp_listener {
	struct kn__tp_listener base;
	struct handle h;
	struct tcp_listener *next;
	struct req req;	   /* io_uring: the multishot poll */
	bool starved;	   /* connections wait for room in the CQ */
	uint32_t inflight; /* io_uring: completions still to come */
	bool closing;
};

/* A posted write_imm, read or send, from post to release. */
struct op {
	uint32_t kind; /* KN_TP_OP_* */
	int status;
	bool sent;	  /* its frame is out */
	bool done;	  /* sent and answered (read) or released (zero-copy) */
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

struct recvbuf {
	char *buf;
	uint32_t len;
	void *user;
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
	struct grant *grants; /* sorted by key */
	uint32_t ngrants, grant_cap;

	struct op ops[SQ_DEPTH]; /* ring: head released, sent, tail */
	uint32_t op_head, op_sent, op_tail, rd_next;
	struct resp resps[SQ_DEPTH];
	uint32_t resp_head, resp_tail;
	struct recvbuf recvs[RQ_DEPTH];
	uint32_t rv_head, rv_tail;

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
	bool zc;	   /* zero-copy sends pay off: the peer is not local */
	uint32_t inflight; /* completions still to come */
};

struct tcp_ctx {
	struct kn__tp_ctx base;
	int epfd;
	struct kn__tp_cq cq; /* completions not yet polled */
	struct tcp_mr *mrs;
	bool test_keys; /* KN_TP_CTX_TEST_KEYS */
	struct tcp_ep *eps;
	struct tcp_listener *listeners;
#ifdef KN_HAVE_URING
	bool uring;	  /* else epoll */
	bool ring_live;	  /* enabled by the first thread to submit */
	bool zc_loopback; /* KN_TP_CTX_ZC_LOOPBACK */
	size_t zc_threshold;
	struct io_uring ring;
	int ring_evfd;		/* signalled on new completions: kn__tp_fd */
	struct tcp_ep *zombies; /* closed, waiting for their completions */
	struct tcp_listener *zombie_listeners;
#endif
};

#ifdef KN_HAVE_URING
#define USE_URING(c) ((c)->uring)
#else
#define USE_URING(c) false
#endif

static struct tcp_ctx *tctx(struct kn__tp_ctx *c)
{
	return container_of(c, struct tcp_ctx, base);
}

static struct tcp_ep *tep(struct kn__tp_ep *e)
{
	return container_of(e, struct tcp_ep, base);
}

static struct tcp_ctx *ep_ctx(const struct tcp_ep *ep)
{
	return tctx(ep->base.ctx);
}

static void ep_log(const struct tcp_ep *ep, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void ep_log(const struct tcp_ep *ep, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	kn__tp_peer_vlog("tcp", ep->peer, fmt, ap);
	va_end(ap);
}

/* ---- epoll interest ---- */

static bool tx_pending(const struct tcp_ep *ep)
{
	return ep->tx != TX_NONE || ep->resp_head != ep->resp_tail ||
	       ep->op_sent != ep->op_tail;
}

static void ep_update_events(struct tcp_ep *ep)
{
	struct epoll_event ev = { .data.ptr = &ep->h };
	uint32_t want = 0;

	if (ep->state == EP_CONNECTING)
		want = EPOLLOUT;
	else if (ep->state == EP_OPEN)
		want = (ep->rx == RX_WAIT_RECV || ep->rx_owed ? 0 : EPOLLIN) |
		       (tx_pending(ep) ? EPOLLOUT : 0);
	if (want == ep->events)
		return;
	ev.events = want;
	if (epoll_ctl(ep_ctx(ep)->epfd, EPOLL_CTL_MOD, ep->h.fd, &ev) == 0)
		ep->events = want;
}

static void ep_kick(struct tcp_ep *ep);

/* ---- failure ---- */

/*
 * Move @ep to the error state once: log @why, shut the socket (the peer
 * sees it close), and complete every pending operation, the oldest with
 * @err and the rest with -ECANCELED.  The completions leave through
 * ep_release(), in order, DISCONNECT last.
 */
static void ep_fail(struct tcp_ep *ep, int err, const char *why, ...)
	__attribute__((format(printf, 3, 4)));

static void ep_fail(struct tcp_ep *ep, int err, const char *why, ...)
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
		ep_log(ep, "%s (%s); endpoint closed", msg, strerror(-err));
	if (ep->state == EP_CONNECTING) {
		ep->connect_event = true;
		ep->disc_event = false;
	} else {
		ep->disc_event = true;
	}
	ep->state = EP_ERROR;
	ep->error = err;
	shutdown(ep->h.fd, SHUT_RDWR); /* in-flight io_uring I/O ends too */
	if (!USE_URING(ep_ctx(ep)))
		epoll_ctl(ep_ctx(ep)->epfd, EPOLL_CTL_DEL, ep->h.fd, NULL);
	ep->events = 0;
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
}

/* ---- release: ring head to the completion queue, in order ---- */

static void ep_release(struct tcp_ep *ep)
{
	struct tcp_ctx *c = ep_ctx(ep);
	struct kn__tp_completion comp = { .ep = &ep->base };

	if (ep->connect_event && ep->state != EP_CONNECTING) {
		comp.op = KN_TP_OP_CONNECT;
		comp.user = ep->base.user;
		comp.status = ep->state == EP_ERROR ? ep->error : 0;
		if (!kn__tp_cq_push(&c->cq, &comp))
			return;
		ep->connect_event = false;
	}
	if (ep->rx_owed) {
		if (!kn__tp_cq_push(&c->cq, &ep->rx_comp))
			return;
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
			return;
		ep->op_head++;
	}
	if (ep->state != EP_ERROR)
		return;
	while (ep->rv_head != ep->rv_tail) {
		struct recvbuf *r = &ep->recvs[ep->rv_head % RQ_DEPTH];

		comp = (struct kn__tp_completion){ .user = r->user,
						   .ep = &ep->base,
						   .status = -ECANCELED,
						   .op = KN_TP_OP_RECV };
		if (!kn__tp_cq_push(&c->cq, &comp))
			return;
		ep->rv_head++;
	}
	if (ep->disc_event) {
		comp = (struct kn__tp_completion){ .user = ep->base.user,
						   .ep = &ep->base,
						   .status = ep->error,
						   .op = KN_TP_OP_DISCONNECT };
		if (kn__tp_cq_push(&c->cq, &comp))
			ep->disc_event = false;
	}
}

/* ---- transmit ---- */

/*
 * The next bytes to send, as ep->tx_msg over ep->tx_iov: the rest of the
 * frame on the wire, or the next frame (answers to the peer's reads
 * first).  False when there is nothing to send.  *@payload_len is the
 * frame's payload size, for the choice of a zero-copy send.
 */
static bool tx_want(struct tcp_ep *ep, size_t *payload_len)
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
static void tx_got(struct tcp_ep *ep, ssize_t n)
{
	size_t plen;

	if (n < 0) {
		ep_fail(ep, (int)n, "send failed");
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
		if (op->kind != KN_TP_OP_READ && !op->zc_refs)
			op->done = true;
		ep->op_sent++;
	}
	ep->tx = TX_NONE;
}

/* epoll: send until the socket is full or nothing is left. */
static void ep_tx(struct tcp_ep *ep)
{
	size_t plen;

	while (tx_want(ep, &plen)) {
		ssize_t n = sendmsg(ep->h.fd, &ep->tx_msg,
				    MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (n < 0 && errno == EINTR)
			continue;
		tx_got(ep, n < 0 ? -errno : n);
	}
	ep_update_events(ep);
}

/* ---- receive ---- */

/* The grant of @ep's with @key, or NULL. */
static const struct grant *grant_find(const struct tcp_ep *ep, uint32_t key)
{
	uint32_t lo = 0, hi = ep->ngrants;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (ep->grants[mid].key == key)
			return &ep->grants[mid];
		if (ep->grants[mid].key < key)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/*
 * The local range a WRITE_IMM or READ_REQ names, or NULL (the endpoint
 * failed, logged): only what this endpoint's peer was granted.
 */
static char *rx_region_range(struct tcp_ep *ep, uint32_t right)
{
	const struct grant *g = grant_find(ep, ep->rh.region);
	const char *what = right == KN_TP_REMOTE_WRITE ? "write" : "read";

	if (!ep->ngrants) {
		ep_fail(ep, -EACCES,
			"one-sided %s before anything was granted to this "
			"peer",
			what);
		return NULL;
	}
	if (!g) {
		ep_fail(ep, -EACCES, "%s with key 0x%x, never granted to this "
				     "peer", what, ep->rh.region);
		return NULL;
	}
	if (!(g->access & right)) {
		ep_fail(ep, -EACCES, "%s of key 0x%x without the right", what,
			ep->rh.region);
		return NULL;
	}
	if (ep->rh.offset > g->len || ep->rh.length > g->len - ep->rh.offset) {
		ep_fail(ep, -EACCES,
			"%s of [%llu, +%u) outside the %llu bytes of key 0x%x",
			what, (unsigned long long)ep->rh.offset, ep->rh.length,
			(unsigned long long)g->len, ep->rh.region);
		return NULL;
	}
	return g->mr->base.addr + g->off + ep->rh.offset;
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
		return;
	}
	case T_RECV: {
		struct recvbuf *r = &ep->recvs[ep->rv_head++ % RQ_DEPTH];

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
			ep_fail(ep, -EPROTO, "more than %u reads outstanding",
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
			ep_fail(ep, -EPROTO,
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
		struct recvbuf *r;

		if (ep->rv_head == ep->rv_tail) {
			ep->rx = RX_WAIT_RECV; /* until a recv is posted */
			ep_kick(ep);
			return true;
		}
		r = &ep->recvs[ep->rv_head % RQ_DEPTH];
		if (h->length > r->len) {
			ep_fail(ep, -EMSGSIZE,
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
static bool rx_want(struct tcp_ep *ep, char **dst, size_t *len)
{
	while (ep->state == EP_OPEN && ep->rx == RX_WAIT_RECV &&
	       ep->rv_head != ep->rv_tail)
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

/* @n bytes arrived where rx_want() said (0: end of stream; < 0: errno). */
static void rx_got(struct tcp_ep *ep, ssize_t n)
{
	int err;

	if (n == 0) {
		ep_fail(ep, -ECONNRESET, "connection closed by peer");
		return;
	}
	if (n < 0) {
		ep_fail(ep, (int)n, "receive failed");
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
		ep_fail(ep, err, "malformed frame header");
		return;
	}
	if (ep->rh.seq != ep->rx_seq++) {
		ep_fail(ep, -EPROTO, "frame %u out of sequence", ep->rh.seq);
		return;
	}
	ep->rx_dst = NULL;
	rx_start(ep);
}

/* epoll: receive until the socket is empty or the endpoint must wait. */
static void ep_rx(struct tcp_ep *ep)
{
	char *dst;
	size_t len;

	while (rx_want(ep, &dst, &len)) {
		ssize_t n = recv(ep->h.fd, dst, len, MSG_DONTWAIT);

		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (n < 0 && errno == EINTR)
			continue;
		rx_got(ep, n < 0 ? -errno : n);
	}
	if (tx_pending(ep))
		ep_tx(ep); /* answers to reads just received */
	ep_update_events(ep);
}

/* ---- io_uring driver ---- */

#ifdef KN_HAVE_URING
static struct io_uring_sqe *get_sqe(struct tcp_ctx *c)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&c->ring);

	if (!sqe) { /* the queue is full: hand it to the kernel first */
		io_uring_submit(&c->ring);
		sqe = io_uring_get_sqe(&c->ring);
	}
	return sqe;
}

/*
 * liburing 2.3 declares io_uring_enable_rings() but its library does not
 * export it (Debian 12), so enable the ring with the register call.
 */
static void ring_enable(struct tcp_ctx *c)
{
	if (c->ring_live)
		return;
	syscall(__NR_io_uring_register, c->ring.ring_fd,
		IORING_REGISTER_ENABLE_RINGS, NULL, 0);
	c->ring_live = true;
}

/*
 * Submit what is queued.  The ring starts disabled and is enabled by the
 * first submission, so that with IORING_SETUP_SINGLE_ISSUER the issuer
 * is the thread that uses the context, not the one that created it.
 */
static void ring_submit(struct tcp_ctx *c)
{
	ring_enable(c);
	io_uring_submit(&c->ring);
}

static void arm_rx(struct tcp_ep *ep)
{
	struct io_uring_sqe *sqe;
	char *dst;
	size_t len;

	if (ep->rx_inflight || ep->closing || !rx_want(ep, &dst, &len))
		return;
	sqe = get_sqe(ep_ctx(ep));
	if (!sqe) {
		ep_fail(ep, -EBUSY, "no room in the submission queue");
		return;
	}
	io_uring_prep_recv(sqe, ep->h.fd, dst, len, 0);
	io_uring_sqe_set_data(sqe, &ep->rx_req);
	ep->rx_inflight = true;
	ep->inflight++;
}

static void arm_tx(struct tcp_ep *ep)
{
	struct tcp_ctx *c = ep_ctx(ep);
	struct io_uring_sqe *sqe;
	size_t plen;

	if (ep->tx_inflight || ep->closing || !tx_want(ep, &plen))
		return;
	sqe = get_sqe(c);
	if (!sqe) {
		ep_fail(ep, -EBUSY, "no room in the submission queue");
		return;
	}
	if (ep->zc && plen >= c->zc_threshold) {
		/* the buffer stays the kernel's until the notification */
		io_uring_prep_sendmsg_zc(sqe, ep->h.fd, &ep->tx_msg,
					 MSG_NOSIGNAL);
		if (ep->tx == TX_OP) {
			struct op *op = &ep->ops[ep->op_sent % SQ_DEPTH];

			op->zreq = (struct req){ R_TX_ZC, ep };
			op->zc_refs++;
			io_uring_sqe_set_data(sqe, &op->zreq);
		} else {
			io_uring_sqe_set_data(sqe, &ep->zresp_req);
		}
	} else {
		io_uring_prep_sendmsg(sqe, ep->h.fd, &ep->tx_msg, MSG_NOSIGNAL);
		io_uring_sqe_set_data(sqe, &ep->tx_req);
	}
	ep->tx_inflight = true;
	ep->inflight++;
}
#endif

/* After the endpoint's state changed: ask for what it can do now. */
static void ep_kick(struct tcp_ep *ep)
{
#ifdef KN_HAVE_URING
	if (USE_URING(ep_ctx(ep))) {
		arm_rx(ep);
		arm_tx(ep);
		return;
	}
#endif
	ep_update_events(ep);
}

/* ---- endpoints ---- */

/*
 * Name the peer for logs, and decide whether zero-copy sends pay off:
 * not to a peer on this host, where the kernel copies the pages into the
 * receiver's socket anyway and zero-copy only adds pinning and a second
 * completion (measured: 16 MiB streams at 0.70-0.80x of plain sockets
 * with it, 1.28-1.40x without).
 */
static void ep_peer(struct tcp_ep *ep)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	bool local = true, inet = false;

	if (getpeername(ep->h.fd, (struct sockaddr *)&ss, &len) == 0) {
		kn__tp_addr_name((struct sockaddr *)&ss, ep->peer, sizeof(ep->peer));
		inet = ss.ss_family == AF_INET || ss.ss_family == AF_INET6;
		if (ss.ss_family == AF_INET)
			local = (ntohl(((struct sockaddr_in *)&ss)
					       ->sin_addr.s_addr) >>
				 24) == 127;
		else if (ss.ss_family == AF_INET6)
			local = IN6_IS_ADDR_LOOPBACK(
				&((struct sockaddr_in6 *)&ss)->sin6_addr);
	}
#ifdef KN_HAVE_URING
	ep->zc = inet && (!local || ep_ctx(ep)->zc_loopback);
#else
	(void)local, (void)inet;
#endif
}

/*
 * An endpoint is large (its rings), and a flood of connections makes and
 * frees many: each is a mapping of its own, so that its memory goes back
 * to the system when it closes, whatever malloc's thresholds are.
 */
static struct tcp_ep *ep_alloc(void)
{
	void *p = mmap(NULL, sizeof(struct tcp_ep), PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	return p == MAP_FAILED ? NULL : p; /* zeroed */
}

static void ep_dealloc(struct tcp_ep *ep)
{
	free(ep->grants);
	munmap(ep, sizeof(*ep));
}

static int ep_new(struct tcp_ctx *c, int fd, enum ep_state state, void *user,
		  struct tcp_ep **out)
{
	struct tcp_ep *ep = ep_alloc();
	struct epoll_event ev;
	int one = 1;

	if (!ep)
		return -ENOMEM;
	ep->base.ctx = &c->base;
	ep->base.user = user;
	ep->h = (struct handle){ H_EP, fd };
	ep->state = state;
	ep->events = state == EP_CONNECTING ? EPOLLOUT : EPOLLIN;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	ep->rx_req = (struct req){ R_RX, ep };
	ep->tx_req = (struct req){ R_TX, ep };
	ep->zresp_req = (struct req){ R_TX_ZC, ep };
	ep->conn_req = (struct req){ R_CONNECT, ep };
	if (!USE_URING(c)) {
		ev = (struct epoll_event){ .events = ep->events,
					   .data.ptr = &ep->h };
		if (epoll_ctl(c->epfd, EPOLL_CTL_ADD, fd, &ev)) {
			int err = -errno;

			ep_dealloc(ep);
			return err;
		}
	}
	if (state == EP_OPEN)
		ep_peer(ep);
	ep->next = c->eps;
	if (c->eps)
		c->eps->prev = ep;
	c->eps = ep;
#ifdef KN_HAVE_URING
	if (USE_URING(c) && state == EP_CONNECTING) {
		struct io_uring_sqe *sqe = get_sqe(c);

		/* connected (or refused) when the socket becomes writable */
		if (sqe) {
			io_uring_prep_poll_add(sqe, fd, POLLOUT);
			io_uring_sqe_set_data(sqe, &ep->conn_req);
			ep->inflight++;
		}
	} else if (USE_URING(c)) {
		arm_rx(ep);
	}
#endif
	*out = ep;
	return 0;
}

static int tcp_connect(struct kn__tp_ctx *ctx, const struct sockaddr *addr,
		       socklen_t addrlen, void *user, struct kn__tp_ep **out)
{
	struct tcp_ctx *c = tctx(ctx);
	struct tcp_ep *ep = NULL;
	int fd, ret;

	fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
		    0);
	if (fd < 0)
		return -errno;
	if (connect(fd, addr, addrlen) && errno != EINPROGRESS) {
		ret = -errno;
		goto err_close;
	}
	ret = ep_new(c, fd, EP_CONNECTING, user, &ep);
	if (ret)
		goto err_close;
	ep->connect_event = true;
	kn__tp_addr_name(addr, ep->peer, sizeof(ep->peer));
	*out = &ep->base;
	return 0;

err_close:
	close(fd);
	return ret;
}

static int tcp_adopt(struct kn__tp_ctx *ctx, int fd, void *user,
		     struct kn__tp_ep **out)
{
	struct tcp_ep *ep = NULL;
	int flags = fcntl(fd, F_GETFL), ret;

	if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK)) {
		ret = -errno;
		goto err_close;
	}
	ret = ep_new(tctx(ctx), fd, EP_OPEN, user, &ep);
	if (ret)
		goto err_close;
	*out = &ep->base;
	return 0;

err_close:
	close(fd);
	return ret;
}

static void ep_connected(struct tcp_ep *ep)
{
	int err = 0;
	socklen_t len = sizeof(err);

	if (getsockopt(ep->h.fd, SOL_SOCKET, SO_ERROR, &err, &len) || err) {
		ep_fail(ep, -(err ? err : errno), "connect failed");
		return;
	}
	ep->state = EP_OPEN;
	ep_peer(ep);
	if (USE_URING(ep_ctx(ep)))
		ep_kick(ep);
	else
		ep_tx(ep); /* what was posted while connecting */
	ep_update_events(ep);
}

/* Report what a closed endpoint leaves pending, then free it. */
static void ep_free(struct tcp_ep *ep)
{
	struct tcp_ctx *c = ep_ctx(ep);

	for (; ep->op_head != ep->op_tail; ep->op_head++) {
		struct op *op = &ep->ops[ep->op_head % SQ_DEPTH];

		struct kn__tp_completion comp = {
			.user = op->user,
			.status = op->done ? op->status : -ECANCELED,
			.op = op->kind,
			.bytes = op->done && !op->status ? op->bytes : 0,
		};

		kn__tp_cq_push_grow(&c->cq, &comp, "tcp");
	}
	for (; ep->rv_head != ep->rv_tail; ep->rv_head++) {
		struct kn__tp_completion comp = {
			.user = ep->recvs[ep->rv_head % RQ_DEPTH].user,
			.status = -ECANCELED,
			.op = KN_TP_OP_RECV,
		};

		kn__tp_cq_push_grow(&c->cq, &comp, "tcp");
	}
	close(ep->h.fd);
	ep_dealloc(ep);
}

static void tcp_ep_close(struct kn__tp_ep *e)
{
	struct tcp_ep *ep = tep(e);
	struct tcp_ctx *c = ep_ctx(ep);

	if (ep->prev)
		ep->prev->next = ep->next;
	else
		c->eps = ep->next;
	if (ep->next)
		ep->next->prev = ep->prev;
	if (!USE_URING(c)) {
		if (ep->state != EP_ERROR)
			epoll_ctl(c->epfd, EPOLL_CTL_DEL, ep->h.fd, NULL);
		ep_free(ep);
		return;
	}
#ifdef KN_HAVE_URING
	/*
	 * The kernel may still hold its buffers (a recv in flight, a
	 * zero-copy send): cancel, and free it only once every completion
	 * has come back (tcp_poll reaps it).
	 */
	ep->closing = true;
	shutdown(ep->h.fd, SHUT_RDWR);
	if (ep->inflight) {
		struct io_uring_sqe *sqe = get_sqe(c);

		if (sqe) {
			io_uring_prep_cancel_fd(sqe, ep->h.fd,
						IORING_ASYNC_CANCEL_ALL);
			io_uring_sqe_set_data(sqe, &ignore_req);
		}
		ep->next = c->zombies;
		c->zombies = ep;
		ring_submit(c);
		return;
	}
	ep_free(ep);
#endif
}

/* ---- posts ---- */

static struct op *op_new(struct tcp_ep *ep, uint32_t kind, void *user)
{
	struct op *op;

	if (ep->op_tail - ep->op_head == SQ_DEPTH)
		return NULL;
	op = &ep->ops[ep->op_tail % SQ_DEPTH];
	*op = (struct op){ .kind = kind, .user = user };
	return op;
}

static int op_post(struct tcp_ep *ep, struct op *op, struct kn__wire_hdr *h)
{
	h->seq = ep->tx_seq++;
	kn__wire_encode(h, op->hdr);
	ep->op_tail++;
#ifdef KN_HAVE_URING
	if (USE_URING(ep_ctx(ep))) {
		arm_tx(ep);
		if (ep->tx_inflight)
			ring_submit(ep_ctx(ep)); /* the syscall that moves it */
		return 0;
	}
#endif
	if (ep->state == EP_OPEN && ep->tx == TX_NONE)
		ep_tx(ep); /* the one syscall that moves the data */
	else
		ep_update_events(ep);
	return 0;
}

static int post_check(struct tcp_ep *ep)
{
	if (ep->state == EP_ERROR)
		return -ENOTCONN;
	if (ep->op_tail - ep->op_head == SQ_DEPTH)
		return -EAGAIN;
	return 0;
}

static int tcp_post_write_imm(struct kn__tp_ep *e, struct kn__tp_mr *mr,
			      size_t off, size_t len,
			      const struct kn__tp_rdesc *dst, uint64_t dst_off,
			      uint32_t imm, void *user)
{
	struct tcp_ep *ep = tep(e);
	struct op *op;
	int ret = post_check(ep);

	if (ret)
		return ret;
	op = op_new(ep, KN_TP_OP_WRITE_IMM, user);
	op->payload = mr->addr + off;
	op->len = (uint32_t)len;
	op->bytes = len;
	return op_post(ep, op,
		       &(struct kn__wire_hdr){ .op = KN_WIRE_WRITE_IMM,
					       .region = dst->key,
					       .imm = imm,
					       .offset = dst_off,
					       .length = (uint32_t)len });
}

static int tcp_post_read(struct kn__tp_ep *e, struct kn__tp_mr *mr, size_t off,
			 size_t len, const struct kn__tp_rdesc *src,
			 uint64_t src_off, void *user)
{
	struct tcp_ep *ep = tep(e);
	struct op *op;
	int ret = post_check(ep);

	if (ret)
		return ret;
	op = op_new(ep, KN_TP_OP_READ, user);
	op->dst = mr->addr + off;
	op->len = (uint32_t)len;
	op->bytes = len;
	return op_post(ep, op,
		       &(struct kn__wire_hdr){ .op = KN_WIRE_READ_REQ,
					       .region = src->key,
					       .offset = src_off,
					       .length = (uint32_t)len });
}

static int tcp_post_send(struct kn__tp_ep *e, struct kn__tp_mr *mr, size_t off,
			 size_t len, void *user)
{
	struct tcp_ep *ep = tep(e);
	struct op *op;
	int ret = post_check(ep);

	if (ret)
		return ret;
	op = op_new(ep, KN_TP_OP_SEND, user);
	op->payload = mr->addr + off;
	op->len = (uint32_t)len;
	op->bytes = len;
	return op_post(ep, op,
		       &(struct kn__wire_hdr){ .op = KN_WIRE_SEND,
					       .length = (uint32_t)len });
}

static int tcp_post_recv(struct kn__tp_ep *e, struct kn__tp_mr *mr, size_t off,
			 size_t len, void *user)
{
	struct tcp_ep *ep = tep(e);
	struct recvbuf *r;

	if (ep->state == EP_ERROR)
		return -ENOTCONN;
	if (ep->rv_tail - ep->rv_head == RQ_DEPTH)
		return -EAGAIN;
	r = &ep->recvs[ep->rv_tail++ % RQ_DEPTH];
	*r = (struct recvbuf){ mr->addr + off,
			       len > UINT32_MAX ? UINT32_MAX : (uint32_t)len,
			       user };
	if (ep->rx != RX_WAIT_RECV || ep->state != EP_OPEN)
		return 0;
#ifdef KN_HAVE_URING
	if (USE_URING(ep_ctx(ep))) {
		arm_rx(ep); /* the paused message lands now */
		ring_submit(ep_ctx(ep));
		return 0;
	}
#endif
	ep_rx(ep); /* the paused message lands now */
	return 0;
}

/* ---- regions ---- */

static int tcp_mr_reg(struct kn__tp_ctx *ctx, void *addr, size_t len,
		      uint32_t access, struct kn__tp_mr **out)
{
	struct tcp_mr *mr = calloc(1, sizeof(*mr));

	if (!mr)
		return -ENOMEM;
	mr->base = (struct kn__tp_mr){ ctx, addr, len, access };
	mr->next = tctx(ctx)->mrs;
	if (mr->next)
		mr->next->prev = mr;
	tctx(ctx)->mrs = mr;
	*out = &mr->base;
	return 0;
}

/* Drop @ep's grants of @mr (a region going away). */
static void ep_revoke(struct tcp_ep *ep, const struct tcp_mr *mr)
{
	uint32_t k = 0;

	for (uint32_t i = 0; i < ep->ngrants; i++)
		if (ep->grants[i].mr != mr)
			ep->grants[k++] = ep->grants[i];
	ep->ngrants = k;
}

static void tcp_mr_dereg(struct kn__tp_mr *m)
{
	struct tcp_mr *mr = container_of(m, struct tcp_mr, base);
	struct tcp_ctx *c = tctx(m->ctx);

	for (struct tcp_ep *ep = c->eps; ep; ep = ep->next)
		ep_revoke(ep, mr);
	if (mr->prev)
		mr->prev->next = mr->next;
	else
		c->mrs = mr->next;
	if (mr->next)
		mr->next->prev = mr->prev;
	free(mr);
}

static int tcp_ep_grant(struct kn__tp_ep *e, struct kn__tp_mr *m, uint64_t off,
			uint64_t len, uint32_t access,
			struct kn__tp_rdesc *rdesc)
{
	struct tcp_ep *ep = tep(e);
	uint32_t key, pos;

	if (ep->ngrants == ep->grant_cap) {
		uint32_t n = ep->grant_cap ? 2 * ep->grant_cap : 8;
		struct grant *g = realloc(ep->grants, n * sizeof(*g));

		if (!g)
			return -ENOMEM;
		ep->grants = g;
		ep->grant_cap = n;
	}
	/* a key a peer cannot guess, and none it was given before */
	do {
		int ret = 0;

		if (tctx(e->ctx)->test_keys)
			key = (ep->ngrants + 1) * 0x100001u;
		else
			ret = kn__tp_random(&key, sizeof(key));
		if (ret)
			return ret;
	} while (!key || grant_find(ep, key));
	for (pos = ep->ngrants; pos && ep->grants[pos - 1].key > key; pos--)
		ep->grants[pos] = ep->grants[pos - 1];
	ep->grants[pos] = (struct grant){
		.key = key,
		.access = access,
		.mr = container_of(m, struct tcp_mr, base),
		.off = off,
		.len = len,
	};
	ep->ngrants++;
	*rdesc = (struct kn__tp_rdesc){
		.addr = 0, .len = len, .key = key, .access = access
	};
	return 0;
}

static int tcp_ep_peer(const struct kn__tp_ep *e, struct sockaddr_storage *ss)
{
	const struct tcp_ep *ep = container_of(e, struct tcp_ep, base);
	socklen_t len = sizeof(*ss);

	if (getpeername(ep->h.fd, (struct sockaddr *)ss, &len))
		return -errno;
	return 0;
}

/* ---- listeners ---- */

static int tcp_listen(struct kn__tp_ctx *ctx, const struct sockaddr *addr,
		      socklen_t addrlen, void *user,
		      struct kn__tp_listener **out)
{
	struct tcp_ctx *c = tctx(ctx);
	struct tcp_listener *l;
	struct epoll_event ev;
	int fd, one = 1, ret;

	fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
		    0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, addr, addrlen) || listen(fd, 128)) {
		ret = -errno;
		goto err_close;
	}
	l = calloc(1, sizeof(*l));
	if (!l) {
		ret = -ENOMEM;
		goto err_close;
	}
	l->base = (struct kn__tp_listener){ ctx, user };
	l->h = (struct handle){ H_LISTENER, fd };
	l->req = (struct req){ R_ACCEPT, l };
#ifdef KN_HAVE_URING
	if (USE_URING(c)) {
		struct io_uring_sqe *sqe = get_sqe(c);

		if (!sqe) {
			ret = -EBUSY;
			free(l);
			goto err_close;
		}
		io_uring_prep_poll_multishot(sqe, fd, POLLIN);
		io_uring_sqe_set_data(sqe, &l->req);
		l->inflight++;
	}
#endif
	ev = (struct epoll_event){ .events = EPOLLIN, .data.ptr = &l->h };
	if (!USE_URING(c) && epoll_ctl(c->epfd, EPOLL_CTL_ADD, fd, &ev)) {
		ret = -errno;
		free(l);
		goto err_close;
	}
	l->next = c->listeners;
	c->listeners = l;
	*out = &l->base;
	return 0;

err_close:
	close(fd);
	return ret;
}

static int tcp_listener_addr(const struct kn__tp_listener *lb,
			     struct sockaddr_storage *addr)
{
	const struct tcp_listener *l =
		container_of(lb, struct tcp_listener, base);
	socklen_t len = sizeof(*addr);

	return getsockname(l->h.fd, (struct sockaddr *)addr, &len) ? -errno : 0;
}

static void tcp_listener_close(struct kn__tp_listener *lb)
{
	struct tcp_listener *l = container_of(lb, struct tcp_listener, base);
	struct tcp_ctx *c = tctx(lb->ctx);

	for (struct tcp_listener **p = &c->listeners; *p; p = &(*p)->next)
		if (*p == l) {
			*p = l->next;
			break;
		}
	/* stop listening now: the fd may outlive this call (io_uring) */
	shutdown(l->h.fd, SHUT_RDWR);
#ifdef KN_HAVE_URING
	if (USE_URING(c) && l->inflight) {
		struct io_uring_sqe *sqe = get_sqe(c);

		/* freed when its poll's last completion is back */
		l->closing = true;
		if (sqe) {
			/* by fd: see uring_quiesce */
			io_uring_prep_cancel_fd(sqe, l->h.fd,
						IORING_ASYNC_CANCEL_ALL);
			io_uring_sqe_set_data(sqe, &ignore_req);
		}
		l->next = c->zombie_listeners;
		c->zombie_listeners = l;
		ring_submit(c);
		return;
	}
#endif
	if (!USE_URING(c))
		epoll_ctl(c->epfd, EPOLL_CTL_DEL, l->h.fd, NULL);
	close(l->h.fd);
	free(l);
}

static void listener_accept(struct tcp_listener *l)
{
	struct tcp_ctx *c = tctx(l->base.ctx);

	for (;;) {
		struct tcp_ep *ep = NULL;
		int fd;

		l->starved = !kn__tp_cq_room(&c->cq);
		if (l->starved)
			return; /* the next poll that has room accepts */
		fd = accept4(l->h.fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK &&
			    errno != EINTR && errno != ECONNABORTED)
				fprintf(stderr, "kanel: tcp: accept: %s\n",
					strerror(errno));
			return;
		}
		if (ep_new(c, fd, EP_OPEN, NULL, &ep)) {
			close(fd);
			continue;
		}
		kn__tp_cq_push(&c->cq, &(struct kn__tp_completion){
					       .user = l->base.user,
					       .ep = &ep->base,
					       .op = KN_TP_OP_ACCEPT });
	}
}

/* ---- progress ---- */

#ifdef KN_HAVE_URING
/* One io_uring completion: what it is about is in its user_data. */
static void uring_complete(struct tcp_ctx *c, const struct io_uring_cqe *cqe)
{
	struct req *r = io_uring_cqe_get_data(cqe);
	bool more = cqe->flags & IORING_CQE_F_MORE;
	struct tcp_listener *l;
	struct tcp_ep *ep;

	if (r->kind == R_IGNORE)
		return;
	if (r->kind == R_ACCEPT) {
		l = r->obj;
		if (!more)
			l->inflight--;
		if (l->closing)
			return;
		listener_accept(l);
		if (!more) { /* the multishot poll ended: arm it again */
			struct io_uring_sqe *sqe = get_sqe(c);

			if (sqe) {
				io_uring_prep_poll_multishot(sqe, l->h.fd,
							     POLLIN);
				io_uring_sqe_set_data(sqe, &l->req);
				l->inflight++;
			}
		}
		return;
	}
	ep = r->obj;
	if (!more)
		ep->inflight--;
	if (r->kind == R_TX_ZC && (cqe->flags & IORING_CQE_F_NOTIF)) {
		/* the kernel let go of a zero-copy send's buffer */
		if (r != &ep->zresp_req) {
			struct op *op = container_of(r, struct op, zreq);

			if (--op->zc_refs == 0 && op->sent &&
			    op->kind != KN_TP_OP_READ)
				op->done = true;
		}
		return;
	}
	if (r->kind == R_TX_ZC && !more && r != &ep->zresp_req)
		container_of(r, struct op, zreq)->zc_refs--; /* no notif */
	if (ep->closing || ep->state == EP_ERROR) {
		ep->rx_inflight &= r->kind != R_RX;
		ep->tx_inflight &= r->kind == R_RX || r->kind == R_CONNECT;
		return;
	}
	switch (r->kind) {
	case R_CONNECT:
		ep_connected(ep);
		break;
	case R_RX:
		ep->rx_inflight = false;
		if (cqe->res != -EAGAIN && cqe->res != -EINTR)
			rx_got(ep, cqe->res);
		break;
	default: /* R_TX, R_TX_ZC */
		ep->tx_inflight = false;
		if (r->kind == R_TX_ZC && cqe->res == -EOPNOTSUPP) {
			ep->zc = false; /* this socket cannot: resend plainly */
			break;
		}
		if (cqe->res != -EAGAIN && cqe->res != -EINTR)
			tx_got(ep, cqe->res);
		break;
	}
	ep_kick(ep);
}

static int uring_progress(struct tcp_ctx *c)
{
	struct io_uring_cqe *cqe;
	unsigned int head, n = 0;
	uint64_t v;
	int ret;

	/* flush the submissions and reap what completed */
	if (read(c->ring_evfd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		return -errno;
	ring_enable(c);
	ret = io_uring_submit_and_get_events(&c->ring);
	if (ret < 0 && ret != -EINTR && ret != -EBUSY && ret != -EAGAIN)
		return ret;
	io_uring_for_each_cqe(&c->ring, head, cqe)
	{
		uring_complete(c, cqe);
		n++;
	}
	io_uring_cq_advance(&c->ring, n);
	/* a multishot poll fires on new connections only */
	for (struct tcp_listener *l = c->listeners; l; l = l->next)
		if (l->starved && !l->closing)
			listener_accept(l);
	for (struct tcp_ep **p = &c->zombies; *p;) {
		struct tcp_ep *ep = *p;

		if (ep->inflight) {
			p = &ep->next;
			continue;
		}
		*p = ep->next;
		ep_free(ep);
	}
	for (struct tcp_listener **p = &c->zombie_listeners; *p;) {
		struct tcp_listener *l = *p;

		if (l->inflight) {
			p = &l->next;
			continue;
		}
		*p = l->next;
		close(l->h.fd);
		free(l);
	}
	/* the recvs and sends armed above are in flight while we sleep */
	if (io_uring_sq_ready(&c->ring))
		io_uring_submit(&c->ring);
	return 0;
}
#endif

static int tcp_poll(struct kn__tp_ctx *ctx, struct kn__tp_completion *out,
		    int max)
{
	struct tcp_ctx *c = tctx(ctx);
	struct epoll_event evs[EPOLL_BATCH];
	int n = 0, got = 0;

#ifdef KN_HAVE_URING
	if (USE_URING(c)) {
		int ret = uring_progress(c);

		if (ret)
			return ret;
	} else
#endif
	{
		n = epoll_wait(c->epfd, evs, EPOLL_BATCH, 0);
		if (n < 0 && errno != EINTR)
			return -errno;
	}
	for (int i = 0; i < n; i++) {
		struct handle *h = evs[i].data.ptr;
		struct tcp_ep *ep;

		if (h->kind == H_LISTENER) {
			listener_accept(
				container_of(h, struct tcp_listener, h));
			continue;
		}
		ep = container_of(h, struct tcp_ep, h);
		if (ep->state == EP_CONNECTING) {
			ep_connected(ep);
			continue;
		}
		if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
			ep_rx(ep);
		if (evs[i].events & EPOLLOUT)
			ep_tx(ep);
	}
	for (struct tcp_ep *ep = c->eps; ep; ep = ep->next)
		ep_release(ep);
	got = kn__tp_cq_take(&c->cq, out, max);
#ifdef KN_HAVE_URING
	/*
	 * Completions handled above may have queued new requests (the next
	 * recv of a stream): the kernel must have them before the caller
	 * sleeps on the ring's fd, or nothing would wake it.
	 */
	if (USE_URING(c) && io_uring_sq_ready(&c->ring))
		ring_submit(c);
#endif
	return got;
}

static int tcp_fd(const struct kn__tp_ctx *ctx)
{
	const struct tcp_ctx *c = container_of(ctx, struct tcp_ctx, base);

#ifdef KN_HAVE_URING
	if (USE_URING(c))
		return c->ring_evfd;
#endif
	return c->epfd;
}

/* ---- context ---- */

#ifdef KN_HAVE_URING
static bool uring_busy(const struct tcp_ctx *c)
{
	for (const struct tcp_ep *ep = c->eps; ep; ep = ep->next)
		if (ep->inflight)
			return true;
	for (const struct tcp_listener *l = c->listeners; l; l = l->next)
		if (l->inflight)
			return true;
	return c->zombies || c->zombie_listeners;
}

/*
 * Before the endpoints' memory goes: stop every socket, cancel what the
 * kernel still has in flight (a recv may be filling an endpoint's header
 * buffer) and take its last completions, for at most about a second.
 */
static void uring_quiesce(struct tcp_ctx *c)
{
	struct __kernel_timespec ts = { .tv_nsec = 1000000 };
	struct io_uring_cqe *cqe;

	for (struct tcp_ep *ep = c->eps; ep; ep = ep->next) {
		struct io_uring_sqe *sqe;

		ep->closing = true;
		shutdown(ep->h.fd, SHUT_RDWR);
		if (ep->inflight && (sqe = get_sqe(c))) {
			io_uring_prep_cancel_fd(sqe, ep->h.fd,
						IORING_ASYNC_CANCEL_ALL);
			io_uring_sqe_set_data(sqe, &ignore_req);
		}
	}
	for (struct tcp_listener *l = c->listeners; l; l = l->next) {
		struct io_uring_sqe *sqe;

		l->closing = true;
		shutdown(l->h.fd, SHUT_RDWR);
		if (l->inflight && (sqe = get_sqe(c))) {
			/* by fd: a poll_remove by user data was not honoured
			 * for the multishot poll (the ring waited a second) */
			io_uring_prep_cancel_fd(sqe, l->h.fd,
						IORING_ASYNC_CANCEL_ALL);
			io_uring_sqe_set_data(sqe, &ignore_req);
		}
	}
	for (int i = 0; i < 1000 && uring_busy(c); i++) {
		if (uring_progress(c))
			break;
		if (uring_busy(c))
			io_uring_wait_cqe_timeout(&c->ring, &cqe, &ts);
	}
}
#endif

static void tcp_ctx_destroy(struct kn__tp_ctx *ctx)
{
	struct tcp_ctx *c = tctx(ctx);

#ifdef KN_HAVE_URING
	if (USE_URING(c))
		uring_quiesce(c);
#endif

	while (c->eps) {
		struct tcp_ep *ep = c->eps;

		c->eps = ep->next;
		close(ep->h.fd);
		ep_dealloc(ep);
	}
	while (c->mrs) {
		struct tcp_mr *mr = c->mrs;

		c->mrs = mr->next;
		free(mr);
	}
	while (c->listeners) {
		struct tcp_listener *l = c->listeners;

		c->listeners = l->next;
		close(l->h.fd);
		free(l);
	}
#ifdef KN_HAVE_URING
	if (USE_URING(c)) {
		/* exiting the ring cancels and waits for what is in flight */
		io_uring_queue_exit(&c->ring);
		close(c->ring_evfd);
		while (c->zombies) {
			struct tcp_ep *ep = c->zombies;

			c->zombies = ep->next;
			close(ep->h.fd);
			ep_dealloc(ep);
		}
		while (c->zombie_listeners) {
			struct tcp_listener *l = c->zombie_listeners;

			c->zombie_listeners = l->next;
			close(l->h.fd);
			free(l);
		}
	}
#endif
	kn__tp_cq_fini(&c->cq);
	if (c->epfd >= 0)
		close(c->epfd);
	free(c);
}

#ifdef KN_HAVE_URING
/*
 * Set up the ring: single issuer where the kernel has it (6.0), plain
 * otherwise; false when io_uring is refused (old kernel, seccomp), and
 * the epoll backend is used instead.  Not IORING_SETUP_DEFER_TASKRUN:
 * deferred task work runs only inside io_uring_enter(), and we sleep in
 * poll() on the eventfd below, which the kernel signals when it posts
 * completions.  On 6.18.44 a deferred completion did not signal it
 * until something else woke the thread, and every round took about
 * 35 ms instead of well under one.
 */
static bool uring_init(struct tcp_ctx *c, const struct kn__tp_ctx_attr *attr)
{
	struct io_uring_params p = {
		.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_R_DISABLED,
	};
	struct io_uring_probe *probe;
	int ret;

	ret = io_uring_queue_init_params(RING_ENTRIES, &c->ring, &p);
	if (ret == -EINVAL) {
		p = (struct io_uring_params){ .flags =
						      IORING_SETUP_R_DISABLED };
		ret = io_uring_queue_init_params(RING_ENTRIES, &c->ring, &p);
	}
	if (ret)
		return false;
	/*
	 * The fd to sleep on: an eventfd registered with the ring, which
	 * the kernel signals as it posts completions.
	 */
	c->ring_evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (c->ring_evfd < 0 ||
	    io_uring_register_eventfd(&c->ring, c->ring_evfd)) {
		if (c->ring_evfd >= 0)
			close(c->ring_evfd);
		io_uring_queue_exit(&c->ring);
		return false;
	}
	probe = io_uring_get_probe_ring(&c->ring);
	c->zc_threshold = SIZE_MAX;
	if (probe && io_uring_opcode_supported(probe, IORING_OP_SENDMSG_ZC) &&
	    !(attr && attr->zc_threshold == UINT32_MAX))
		c->zc_threshold = attr && attr->zc_threshold
					  ? attr->zc_threshold
					  : ZC_THRESHOLD;
	if (probe)
		io_uring_free_probe(probe);
	c->zc_loopback = attr && (attr->flags & KN_TP_CTX_ZC_LOOPBACK);
	c->uring = true;
	c->base.name = "tcp/io_uring";
	return true;
}
#endif

static int tcp_ctx_create(const struct kn__tp_ctx_attr *attr,
			  struct kn__tp_ctx **out)
{
	uint32_t depth = attr && attr->cq_depth ? attr->cq_depth : CQ_DEPTH;
	struct tcp_ctx *c;
	int ret;

	if (attr && (attr->flags & ~(KN_TP_CTX_FORCE_EPOLL |
				     KN_TP_CTX_ZC_LOOPBACK |
				     KN_TP_CTX_TEST_KEYS)))
		return -EINVAL;
	if (attr && attr->max_msg > KN_WIRE_MAX_LEN)
		return -EINVAL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->base.ops = &kn__tp_tcp_ops;
	c->base.name = "tcp/epoll";
	c->base.max_msg = attr && attr->max_msg ? attr->max_msg : MAX_MSG;
	c->test_keys = attr && (attr->flags & KN_TP_CTX_TEST_KEYS);
	ret = kn__tp_cq_init(&c->cq, depth);
	if (ret)
		goto err_free;
	c->epfd = -1;
#ifdef KN_HAVE_URING
	if (!(attr && (attr->flags & KN_TP_CTX_FORCE_EPOLL)) &&
	    uring_init(c, attr)) {
		*out = &c->base;
		return 0;
	}
#endif
	c->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (c->epfd < 0) {
		ret = -errno;
		goto err_free_cq;
	}
	*out = &c->base;
	return 0;

err_free_cq:
	kn__tp_cq_fini(&c->cq);
err_free:
	free(c);
	return ret;
}

const struct kn__tp_ops kn__tp_tcp_ops = {
	.name = "tcp",
	.max_len = KN_WIRE_MAX_LEN, /* a frame's 32-bit length */
	.ctx_create = tcp_ctx_create,
	.ctx_destroy = tcp_ctx_destroy,
	.mr_reg = tcp_mr_reg,
	.mr_dereg = tcp_mr_dereg,
	.ep_grant = tcp_ep_grant,
	.ep_peer = tcp_ep_peer,
	.listen = tcp_listen,
	.listener_addr = tcp_listener_addr,
	.listener_close = tcp_listener_close,
	.connect = tcp_connect,
	.adopt = tcp_adopt,
	.ep_close = tcp_ep_close,
	.post_write_imm = tcp_post_write_imm,
	.post_read = tcp_post_read,
	.post_send = tcp_post_send,
	.post_recv = tcp_post_recv,
	.poll = tcp_poll,
	.fd = tcp_fd,
};
