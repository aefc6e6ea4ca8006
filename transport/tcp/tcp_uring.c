/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tcp_uring.c - the tcp provider's io_uring driver: at most one recv and
 * one send in flight per socket, a multishot poll per listener, and an
 * eventfd the kernel signals as it posts completions (the fd a caller
 * sleeps on).
 *
 * Each submission's user_data points at a struct req that says what its
 * completion is about.  Large payloads to a peer on another host go out
 * with zero-copy sendmsg: the operation is done only when the kernel
 * lets go of its buffer.  A closed endpoint or listener whose requests
 * are still the kernel's becomes a zombie, freed by the poll that takes
 * its last completion.
 *
 * Every call into the ring is checked.  No room in the submission queue
 * fails the endpoint that needed it, or, for a listener's poll and a
 * cancellation, is retried by the next poll.  A submission the kernel
 * refuses for now (-EAGAIN, -EBUSY, -EINTR) stays queued for the next
 * poll; any other refusal fails the context, whose every poll then
 * returns that error.
 */
#include <errno.h>
#include <liburing.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "tcp_priv.h"

#define RING_ENTRIES 1024
#define ZC_THRESHOLD (64u << 10) /* payloads sent zero-copy from here */

struct uring_ctx {
	struct tcp_ctx tcp;
	bool ring_live; /* enabled by the first thread to submit */
	int ring_err;	/* the ring failed: every poll returns this */
	size_t zc_threshold;
	struct io_uring ring;
	int ring_evfd;	       /* signalled on completions: kn__tp_fd */
	uint32_t cancels_owed; /* cancellations waiting for room */
	/* handles closed, waiting for their completions */
	struct kn__list zombies;
};

/* Tags submissions whose completion needs nothing (cancellations). */
static struct req ignore_req = { R_IGNORE, NULL };

static struct uring_ctx *uctx(struct tcp_ctx *c)
{
	return container_of(c, struct uring_ctx, tcp);
}

static struct uring_ctx *ep_uctx(const struct tcp_ep *ep)
{
	return uctx(ep_ctx(ep));
}

static void uring_log(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));

static void uring_log(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	kn__tp_vlog("tcp/io_uring", fmt, ap);
	va_end(ap);
}

/* ---- the ring ---- */

/*
 * @ret, what a call into the ring returned, as 0 or the context's
 * failure.  The kernel refuses a submission for now when it is short of
 * memory or its completion queue overflowed (-EAGAIN, -EBUSY), or a
 * signal came (-EINTR): what was queued stays queued, and the next poll
 * submits it.  Anything else means the ring is unusable: logged once,
 * and kept as the error every later poll returns.
 */
static int ring_check(struct uring_ctx *u, int ret, const char *what)
{
	if (ret >= 0 || ret == -EINTR || ret == -EAGAIN || ret == -EBUSY)
		return 0;
	if (!u->ring_err) {
		uring_log("%s: %s; the context fails", what, strerror(-ret));
		u->ring_err = ret;
	}
	return ret;
}

/*
 * liburing 2.3 declares io_uring_enable_rings() but its library does not
 * export it (Debian 12), so enable the ring with the register call.
 */
static int ring_enable(struct uring_ctx *u)
{
	if (u->ring_live)
		return 0;
	if (syscall(__NR_io_uring_register, u->ring.ring_fd,
		    IORING_REGISTER_ENABLE_RINGS, NULL, 0) < 0)
		return ring_check(u, -errno, "enabling the ring");
	u->ring_live = true;
	return 0;
}

/*
 * Submit what is queued: 0 or the context's failure.  The ring starts
 * disabled and is enabled by the first submission, so that with
 * IORING_SETUP_SINGLE_ISSUER the issuer is the thread that uses the
 * context, not the one that created it.
 */
static int ring_submit(struct uring_ctx *u)
{
	int ret = ring_enable(u);

	if (ret)
		return ret;
	return ring_check(u, io_uring_submit(&u->ring), "submit");
}

/* A free submission entry, or NULL when the queue stays full. */
static struct io_uring_sqe *get_sqe(struct uring_ctx *u)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);

	/* the queue is full: hand it to the kernel first */
	if (!sqe && ring_submit(u) == 0)
		sqe = io_uring_get_sqe(&u->ring);
	return sqe;
}

/*
 * Cancel every request on @fd (by fd: a poll_remove by user data was not
 * honoured for the multishot poll, and the ring waited a second).  With
 * no room in the queue *@owed is set and the next poll tries again; the
 * socket is shut down already, which ends its I/O in any case.
 */
static void cancel_fd(struct uring_ctx *u, int fd, bool *owed)
{
	struct io_uring_sqe *sqe = get_sqe(u);

	if (!sqe) {
		if (!*owed)
			u->cancels_owed++;
		*owed = true;
		return;
	}
	io_uring_prep_cancel_fd(sqe, fd, IORING_ASYNC_CANCEL_ALL);
	io_uring_sqe_set_data(sqe, &ignore_req);
	if (*owed)
		u->cancels_owed--;
	*owed = false;
}

static void retry_cancel(struct uring_ctx *u, struct handle *h)
{
	if (h->cancel_owed)
		cancel_fd(u, h->fd, &h->cancel_owed);
}

/* Try again the cancellations that found no room. */
static void retry_cancels(struct uring_ctx *u)
{
	struct kn__list *n;

	kn__list_each(n, &u->tcp.sw.eps) retry_cancel(u, &tep_of(n)->h);
	kn__list_each(n, &u->tcp.listeners)
		retry_cancel(u, &tlistener_of(n)->h);
	kn__list_each(n, &u->zombies)
		retry_cancel(u, container_of(n, struct handle, zombie));
}

/* Free a zombie's endpoint or listener: the kernel let go of it. */
static void zombie_free(struct handle *h)
{
	if (h->kind == H_EP)
		kn__tcp_ep_free(container_of(h, struct tcp_ep, h));
	else
		kn__tcp_listener_free(container_of(h, struct tcp_listener, h));
}

/* (Re)arm @l's multishot poll; with no room, the next poll tries again. */
static void listener_arm(struct uring_ctx *u, struct tcp_listener *l)
{
	struct io_uring_sqe *sqe = get_sqe(u);

	l->rearm = !sqe;
	if (!sqe)
		return;
	io_uring_prep_poll_multishot(sqe, l->h.fd, POLLIN);
	io_uring_sqe_set_data(sqe, &l->req);
	l->h.inflight++;
}

/* ---- transmit and receive ---- */

static void arm_rx(struct tcp_ep *ep)
{
	struct io_uring_sqe *sqe;
	char *dst;
	size_t len;

	if (ep->rx_inflight || ep->sw.closing ||
	    !kn__tcp_rx_want(ep, &dst, &len))
		return;
	sqe = get_sqe(ep_uctx(ep));
	if (!sqe) {
		kn__swr_ep_fail(&ep->sw, -EBUSY,
				"no room in the submission queue");
		return;
	}
	io_uring_prep_recv(sqe, ep->h.fd, dst, len, 0);
	io_uring_sqe_set_data(sqe, &ep->rx_req);
	ep->rx_inflight = true;
	ep->h.inflight++;
}

static void arm_tx(struct tcp_ep *ep)
{
	struct uring_ctx *u = ep_uctx(ep);
	struct io_uring_sqe *sqe;
	size_t plen;

	if (ep->tx_inflight || ep->sw.closing || !kn__tcp_tx_want(ep, &plen))
		return;
	sqe = get_sqe(u);
	if (!sqe) {
		kn__swr_ep_fail(&ep->sw, -EBUSY,
				"no room in the submission queue");
		return;
	}
	if (ep->zc && plen >= u->zc_threshold) {
		/* the buffer stays the kernel's until the notification */
		io_uring_prep_sendmsg_zc(sqe, ep->h.fd, &ep->tx_msg,
					 MSG_NOSIGNAL);
		if (ep->tx == TX_OP) {
			struct op *op = &ep->ops[ep->op_sent % SQ_DEPTH];

			op->zreq = (struct req){ R_TX_ZC, ep };
			op->sw.refs++;
			io_uring_sqe_set_data(sqe, &op->zreq);
		} else {
			io_uring_sqe_set_data(sqe, &ep->zresp_req);
		}
	} else {
		io_uring_prep_sendmsg(sqe, ep->h.fd, &ep->tx_msg, MSG_NOSIGNAL);
		io_uring_sqe_set_data(sqe, &ep->tx_req);
	}
	ep->tx_inflight = true;
	ep->h.inflight++;
}

/* ---- endpoint and listener hooks ---- */

/* After the endpoint's state changed: ask for what it can do now. */
static void uring_ep_kick(struct tcp_ep *ep)
{
	arm_rx(ep);
	arm_tx(ep);
}

static int uring_ep_add(struct tcp_ep *ep)
{
	struct io_uring_sqe *sqe;

	if (ep->sw.state != KN_SWR_STARTING) {
		arm_rx(ep);
		return 0;
	}
	/* connected (or refused) when the socket becomes writable */
	sqe = get_sqe(ep_uctx(ep));
	if (!sqe)
		return -EBUSY;
	io_uring_prep_poll_add(sqe, ep->h.fd, POLLOUT);
	io_uring_sqe_set_data(sqe, &ep->conn_req);
	ep->h.inflight++;
	return 0;
}

static void uring_ep_post(struct tcp_ep *ep)
{
	arm_tx(ep);
	if (ep->tx_inflight)
		ring_submit(ep_uctx(ep)); /* the syscall that moves it */
}

static void uring_ep_recv_posted(struct tcp_ep *ep)
{
	arm_rx(ep); /* the paused message lands now */
	ring_submit(ep_uctx(ep));
}

static void uring_ep_stop(struct tcp_ep *ep)
{
	(void)ep; /* the shutdown ends what is in flight */
}

static void uring_ep_close(struct tcp_ep *ep)
{
	struct uring_ctx *u = ep_uctx(ep);

	/*
	 * The kernel may still hold its buffers (a recv in flight, a
	 * zero-copy send): cancel, and free it only once every completion
	 * has come back (uring_progress reaps it).
	 */
	ep->sw.closing = true;
	shutdown(ep->h.fd, SHUT_RDWR);
	if (!ep->h.inflight) {
		kn__tcp_ep_free(ep);
		return;
	}
	cancel_fd(u, ep->h.fd, &ep->h.cancel_owed);
	kn__list_push(&u->zombies, &ep->h.zombie);
	ring_submit(u);
}

static int uring_listen(struct tcp_listener *l)
{
	listener_arm(uctx(tctx(l->base.ctx)), l);
	return l->rearm ? -EBUSY : 0;
}

static void uring_listener_close(struct tcp_listener *l)
{
	struct uring_ctx *u = uctx(tctx(l->base.ctx));

	if (!l->h.inflight) {
		kn__tcp_listener_free(l);
		return;
	}
	/* freed when its poll's last completion is back */
	l->closing = true;
	cancel_fd(u, l->h.fd, &l->h.cancel_owed);
	kn__list_push(&u->zombies, &l->h.zombie);
	ring_submit(u);
}

/* ---- progress ---- */

/* A listener's poll completed: accept, and arm it again if it ended. */
static void listener_complete(struct uring_ctx *u, struct tcp_listener *l,
			      const struct io_uring_cqe *cqe, bool more)
{
	if (!more)
		l->h.inflight--;
	if (l->closing)
		return;
	if (cqe->res < 0 && cqe->res != -ECANCELED)
		uring_log("listener: poll: %s", strerror(-cqe->res));
	else
		kn__tcp_listener_accept(l);
	if (!more) /* the multishot poll ended: arm it again */
		listener_arm(u, l);
}

/* One io_uring completion: what it is about is in its user_data. */
static void uring_complete(struct uring_ctx *u, const struct io_uring_cqe *cqe)
{
	struct req *r = io_uring_cqe_get_data(cqe);
	bool more = cqe->flags & IORING_CQE_F_MORE;
	struct tcp_ep *ep;

	if (r->kind == R_IGNORE) {
		/* a cancellation: what it targets ends with its shutdown
		 * anyway; -ENOENT and -EALREADY say it had ended */
		if (cqe->res < 0 && cqe->res != -ENOENT &&
		    cqe->res != -EALREADY)
			uring_log("cancel: %s", strerror(-cqe->res));
		return;
	}
	if (r->kind == R_ACCEPT) {
		listener_complete(u, r->obj, cqe, more);
		return;
	}
	ep = r->obj;
	if (!more)
		ep->h.inflight--;
	if (r->kind == R_TX_ZC && (cqe->flags & IORING_CQE_F_NOTIF)) {
		/* the kernel let go of a zero-copy send's buffer */
		if (r != &ep->zresp_req) {
			struct op *op = container_of(r, struct op, zreq);

			if (--op->sw.refs == 0 && op->sent &&
			    op->sw.kind != KN_TP_OP_READ)
				op->sw.done = true;
			ep_ready(ep); /* released once its refs are 0 */
		}
		return;
	}
	if (r->kind == R_TX_ZC && !more && r != &ep->zresp_req) {
		container_of(r, struct op, zreq)->sw.refs--; /* no notif */
		ep_ready(ep);
	}
	if (ep->sw.closing || ep->sw.state == KN_SWR_ERROR) {
		ep->rx_inflight &= r->kind != R_RX;
		ep->tx_inflight &= r->kind == R_RX || r->kind == R_CONNECT;
		return;
	}
	switch (r->kind) {
	case R_CONNECT:
		if (cqe->res < 0)
			kn__swr_ep_fail(&ep->sw, cqe->res,
					"connect: poll failed");
		else if (kn__tcp_ep_connected(ep) == 0)
			uring_ep_kick(ep);
		break;
	case R_RX:
		ep->rx_inflight = false;
		if (cqe->res != -EAGAIN && cqe->res != -EINTR)
			kn__tcp_rx_got(ep, cqe->res);
		break;
	default: /* R_TX, R_TX_ZC */
		ep->tx_inflight = false;
		if (r->kind == R_TX_ZC && cqe->res == -EOPNOTSUPP) {
			ep->zc = false; /* this socket cannot: resend plainly */
			break;
		}
		if (cqe->res != -EAGAIN && cqe->res != -EINTR)
			kn__tcp_tx_got(ep, cqe->res);
		break;
	}
	uring_ep_kick(ep);
}

static int uring_progress(struct tcp_ctx *c)
{
	struct uring_ctx *u = uctx(c);
	struct io_uring_cqe *cqe;
	struct kn__list *it, *tmp;
	unsigned int head, n = 0;
	uint64_t v;
	int ret;

	if (u->ring_err)
		return u->ring_err;
	/* flush the submissions and reap what completed */
	if (read(u->ring_evfd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		return -errno;
	ret = ring_enable(u);
	if (ret)
		return ret;
	ret = ring_check(u, io_uring_submit_and_get_events(&u->ring), "submit");
	if (ret)
		return ret;
	io_uring_for_each_cqe(&u->ring, head, cqe)
	{
		uring_complete(u, cqe);
		n++;
	}
	io_uring_cq_advance(&u->ring, n);
	/* a multishot poll fires on new connections only */
	kn__list_each(it, &c->listeners)
	{
		struct tcp_listener *l = tlistener_of(it);

		if (l->closing)
			continue;
		if (l->rearm)
			listener_arm(u, l);
		if (l->starved)
			kn__tcp_listener_accept(l);
	}
	if (u->cancels_owed)
		retry_cancels(u);
	kn__list_each_safe(it, tmp, &u->zombies)
	{
		struct handle *h = container_of(it, struct handle, zombie);

		if (h->inflight)
			continue;
		if (h->cancel_owed)
			u->cancels_owed--;
		kn__list_del(it);
		zombie_free(h);
	}
	/* the recvs and sends armed above are in flight while we sleep */
	if (io_uring_sq_ready(&u->ring))
		return ring_submit(u);
	return 0;
}

/*
 * Completions handled by the poll may have queued new requests (the next
 * recv of a stream): the kernel must have them before the caller sleeps
 * on the ring's fd, or nothing would wake it.  A failure is the next
 * poll's to return.
 */
static void uring_flush(struct tcp_ctx *c)
{
	struct uring_ctx *u = uctx(c);

	if (io_uring_sq_ready(&u->ring))
		ring_submit(u);
}

static int uring_fd(const struct tcp_ctx *c)
{
	return container_of(c, struct uring_ctx, tcp)->ring_evfd;
}

/* ---- set-up and teardown ---- */

static bool uring_busy(const struct uring_ctx *u)
{
	struct kn__list *n;

	kn__list_each(n, &u->tcp.sw.eps) if (tep_of(n)->h.inflight) return true;
	kn__list_each(
		n,
		&u->tcp.listeners) if (tlistener_of(n)->h.inflight) return true;
	return !kn__list_empty(&u->zombies);
}

/* Shut @h's socket and cancel what the kernel still has of it. */
static void stop_handle(struct uring_ctx *u, struct handle *h)
{
	shutdown(h->fd, SHUT_RDWR);
	if (h->inflight)
		cancel_fd(u, h->fd, &h->cancel_owed);
}

/*
 * Before the endpoints' memory goes: stop every socket, cancel what the
 * kernel still has in flight (a recv may be filling an endpoint's header
 * buffer) and take its last completions, for at most about a second.
 */
static void uring_quiesce(struct uring_ctx *u)
{
	struct __kernel_timespec ts = { .tv_nsec = 1000000 };
	struct io_uring_cqe *cqe;
	struct kn__list *n;

	kn__list_each(n, &u->tcp.sw.eps)
	{
		tep_of(n)->sw.closing = true;
		stop_handle(u, &tep_of(n)->h);
	}
	kn__list_each(n, &u->tcp.listeners)
	{
		tlistener_of(n)->closing = true;
		stop_handle(u, &tlistener_of(n)->h);
	}
	for (int i = 0; i < 1000 && uring_busy(u); i++) {
		int ret;

		if (uring_progress(&u->tcp))
			break;
		if (!uring_busy(u))
			break;
		ret = io_uring_wait_cqe_timeout(&u->ring, &cqe, &ts);
		if (ret < 0 && ret != -ETIME && ret != -EINTR &&
		    ring_check(u, ret, "wait"))
			break;
	}
}

static void uring_fini(struct tcp_ctx *c)
{
	struct uring_ctx *u = uctx(c);
	struct kn__list *n, *tmp;

	uring_quiesce(u);
	/* exiting the ring cancels and waits for what is in flight */
	io_uring_queue_exit(&u->ring);
	close(u->ring_evfd);
	/* what is left reports nothing: the context goes */
	kn__list_each_safe(n, tmp, &u->zombies)
	{
		struct handle *h = container_of(n, struct handle, zombie);

		if (h->kind == H_EP) {
			close(h->fd);
			kn__tcp_ep_dealloc(container_of(h, struct tcp_ep, h));
		} else {
			kn__tcp_listener_free(
				container_of(h, struct tcp_listener, h));
		}
	}
}

/*
 * Set up the ring: single issuer where the kernel has it (6.0), plain
 * otherwise; an error when io_uring is refused (old kernel, seccomp) or
 * the context asks for epoll, and the epoll driver is used instead.  Not
 * IORING_SETUP_DEFER_TASKRUN: deferred task work runs only inside
 * io_uring_enter(), and we sleep in poll() on the eventfd below, which
 * the kernel signals when it posts completions.  On 6.18.44 a deferred
 * completion did not signal it until something else woke the thread,
 * and every round took about 35 ms instead of well under one.
 */
static int uring_init(struct tcp_ctx *c, const struct kn__tp_ctx_attr *attr)
{
	struct uring_ctx *u = uctx(c);
	struct io_uring_params p = {
		.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_R_DISABLED,
	};
	struct io_uring_probe *probe;
	int ret;

	kn__list_init(&u->zombies);
	if (attr && (attr->flags & KN_TP_CTX_FORCE_EPOLL))
		return -EOPNOTSUPP;
	ret = io_uring_queue_init_params(RING_ENTRIES, &u->ring, &p);
	if (ret == -EINVAL) {
		p = (struct io_uring_params){ .flags =
						      IORING_SETUP_R_DISABLED };
		ret = io_uring_queue_init_params(RING_ENTRIES, &u->ring, &p);
	}
	if (ret)
		return ret;
	/*
	 * The fd to sleep on: an eventfd registered with the ring, which
	 * the kernel signals as it posts completions.
	 */
	u->ring_evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (u->ring_evfd < 0) {
		ret = -errno;
		goto err_exit;
	}
	ret = io_uring_register_eventfd(&u->ring, u->ring_evfd);
	if (ret)
		goto err_close_evfd;
	probe = io_uring_get_probe_ring(&u->ring);
	u->zc_threshold = SIZE_MAX;
	if (probe && io_uring_opcode_supported(probe, IORING_OP_SENDMSG_ZC) &&
	    !(attr && attr->zc_threshold == UINT32_MAX))
		u->zc_threshold = attr && attr->zc_threshold
					  ? attr->zc_threshold
					  : ZC_THRESHOLD;
	if (probe)
		io_uring_free_probe(probe);
	return 0;

err_close_evfd:
	close(u->ring_evfd);
err_exit:
	io_uring_queue_exit(&u->ring);
	return ret;
}

const struct tcp_driver kn__tcp_uring_driver = {
	.name = "tcp/io_uring",
	.ctx_size = sizeof(struct uring_ctx),
	.init = uring_init,
	.fini = uring_fini,
	.ep_add = uring_ep_add,
	.ep_kick = uring_ep_kick,
	.ep_post = uring_ep_post,
	.ep_recv_posted = uring_ep_recv_posted,
	.ep_stop = uring_ep_stop,
	.ep_close = uring_ep_close,
	.listen = uring_listen,
	.listener_close = uring_listener_close,
	.progress = uring_progress,
	.flush = uring_flush,
	.fd = uring_fd,
};
