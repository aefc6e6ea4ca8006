/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tcp_epoll.c - the tcp provider's epoll driver: level-triggered epoll
 * over every socket, non-blocking sendmsg and recv.
 *
 * Each endpoint's interest follows what its wire wants (EPOLLOUT while
 * connecting or while a frame waits to go, EPOLLIN unless a message
 * waits for a recv buffer or a completion for room in the queue).  A
 * post sends at once when the socket is idle: the one syscall that
 * moves its data.  The fallback where io_uring is refused (seccomp, an
 * old kernel) or the context asks for it (KN_TP_CTX_FORCE_EPOLL).
 */
#include <errno.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tcp_priv.h"

#define EPOLL_BATCH 64

struct epoll_ctx {
	struct tcp_ctx tcp;
	int epfd;
};

static int ep_epfd(const struct tcp_ep *ep)
{
	return container_of(ep_ctx(ep), struct epoll_ctx, tcp)->epfd;
}

/* ---- epoll interest ---- */

static void ep_update_events(struct tcp_ep *ep)
{
	struct epoll_event ev = { .data.ptr = &ep->h };
	uint32_t want = 0;

	if (ep->sw.state == KN_SWR_STARTING)
		want = EPOLLOUT;
	else if (ep->sw.state == KN_SWR_OPEN)
		want = (ep->rx == RX_WAIT_RECV || ep->sw.owed ? 0 : EPOLLIN) |
		       (tx_pending(ep) ? EPOLLOUT : 0);
	if (want == ep->events)
		return;
	ev.events = want;
	if (epoll_ctl(ep_epfd(ep), EPOLL_CTL_MOD, ep->h.fd, &ev) == 0)
		ep->events = want;
}

/* ---- transmit and receive ---- */

/* Send until the socket is full or nothing is left. */
static void ep_tx(struct tcp_ep *ep)
{
	size_t plen;

	while (kn__tcp_tx_want(ep, &plen)) {
		ssize_t n = sendmsg(ep->h.fd, &ep->tx_msg,
				    MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (n < 0 && errno == EINTR)
			continue;
		kn__tcp_tx_got(ep, n < 0 ? -errno : n);
	}
	ep_update_events(ep);
}

/* Receive until the socket is empty or the endpoint must wait. */
static void ep_rx(struct tcp_ep *ep)
{
	char *dst;
	size_t len;

	while (kn__tcp_rx_want(ep, &dst, &len)) {
		ssize_t n = recv(ep->h.fd, dst, len, MSG_DONTWAIT);

		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (n < 0 && errno == EINTR)
			continue;
		kn__tcp_rx_got(ep, n < 0 ? -errno : n);
	}
	if (tx_pending(ep))
		ep_tx(ep); /* answers to reads just received */
	ep_update_events(ep);
}

/* ---- the driver's hooks ---- */

static int epoll_init(struct tcp_ctx *c, const struct kn__tp_ctx_attr *attr)
{
	struct epoll_ctx *e = container_of(c, struct epoll_ctx, tcp);

	(void)attr;
	e->epfd = epoll_create1(EPOLL_CLOEXEC);
	return e->epfd < 0 ? -errno : 0;
}

static void epoll_fini(struct tcp_ctx *c)
{
	close(container_of(c, struct epoll_ctx, tcp)->epfd);
}

static int epoll_ep_add(struct tcp_ep *ep)
{
	struct epoll_event ev;

	ep->events = ep->sw.state == KN_SWR_STARTING ? EPOLLOUT : EPOLLIN;
	ev = (struct epoll_event){ .events = ep->events, .data.ptr = &ep->h };
	if (epoll_ctl(ep_epfd(ep), EPOLL_CTL_ADD, ep->h.fd, &ev))
		return -errno;
	return 0;
}

static void epoll_ep_post(struct tcp_ep *ep)
{
	if (ep->sw.state == KN_SWR_OPEN && ep->tx == TX_NONE)
		ep_tx(ep); /* the one syscall that moves the data */
	else
		ep_update_events(ep);
}

static void epoll_ep_recv_posted(struct tcp_ep *ep)
{
	ep_rx(ep); /* the paused message lands now */
}

static void epoll_ep_stop(struct tcp_ep *ep)
{
	epoll_ctl(ep_epfd(ep), EPOLL_CTL_DEL, ep->h.fd, NULL);
	ep->events = 0;
}

static void epoll_ep_close(struct tcp_ep *ep)
{
	if (ep->sw.state != KN_SWR_ERROR)
		epoll_ctl(ep_epfd(ep), EPOLL_CTL_DEL, ep->h.fd, NULL);
	kn__tcp_ep_free(ep);
}

static int epoll_listen(struct tcp_listener *l)
{
	struct epoll_ctx *e =
		container_of(tctx(l->base.ctx), struct epoll_ctx, tcp);
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &l->h };

	return epoll_ctl(e->epfd, EPOLL_CTL_ADD, l->h.fd, &ev) ? -errno : 0;
}

static void epoll_listener_close(struct tcp_listener *l)
{
	struct epoll_ctx *e =
		container_of(tctx(l->base.ctx), struct epoll_ctx, tcp);

	epoll_ctl(e->epfd, EPOLL_CTL_DEL, l->h.fd, NULL);
	kn__tcp_listener_free(l);
}

static int epoll_progress(struct tcp_ctx *c)
{
	struct epoll_ctx *e = container_of(c, struct epoll_ctx, tcp);
	struct epoll_event evs[EPOLL_BATCH];
	int n;

	n = epoll_wait(e->epfd, evs, EPOLL_BATCH, 0);
	if (n < 0 && errno != EINTR)
		return -errno;
	for (int i = 0; i < n; i++) {
		struct handle *h = evs[i].data.ptr;
		struct tcp_ep *ep;

		if (h->kind == H_LISTENER) {
			kn__tcp_listener_accept(
				container_of(h, struct tcp_listener, h));
			continue;
		}
		ep = container_of(h, struct tcp_ep, h);
		if (ep->sw.state == KN_SWR_STARTING) {
			/* then send what was posted while connecting */
			if (kn__tcp_ep_connected(ep) == 0)
				ep_tx(ep);
			continue;
		}
		if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
			ep_rx(ep);
		if (evs[i].events & EPOLLOUT)
			ep_tx(ep);
	}
	return 0;
}

static int epoll_fd(const struct tcp_ctx *c)
{
	return container_of(c, struct epoll_ctx, tcp)->epfd;
}

const struct tcp_driver kn__tcp_epoll_driver = {
	.name = "tcp/epoll",
	.ctx_size = sizeof(struct epoll_ctx),
	.init = epoll_init,
	.fini = epoll_fini,
	.ep_add = epoll_ep_add,
	.ep_kick = ep_update_events,
	.ep_post = epoll_ep_post,
	.ep_recv_posted = epoll_ep_recv_posted,
	.ep_stop = epoll_ep_stop,
	.ep_close = epoll_ep_close,
	.listen = epoll_listen,
	.listener_close = epoll_listener_close,
	.progress = epoll_progress,
	.flush = NULL,
	.fd = epoll_fd,
};
