/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ep.c - the dpdk provider's endpoints: making and freeing them, the
 * control connection that sets each one up, listeners, grants and
 * posts.
 *
 * An endpoint starts as a kernel TCP connection to the address the
 * caller names (kn__tp_listen / kn__tp_connect take the same addresses
 * as with tcp).  Over it the two ends swap one hello each (hello.c):
 * MAC, IPv4 address and UDP port of their DPDK port, the endpoint id
 * and the random token the other end must put in every packet, the
 * initial sequence number of their send stream and the largest segment
 * payload they take.  From then on data goes over the port only.  The
 * connection stays open and quiet: it closing (the peer closed the
 * endpoint, or its process died) is how the end of an endpoint is
 * noticed at once, while a peer that vanishes without its kernel
 * noticing is caught by the retransmission timeout (tx.c).
 *
 * Posted operations live in a per-endpoint ring in post order and are
 * released to the completion queue from its head (core.c), as in the
 * tcp provider: completions come back in post order.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dpdk.h"

/* ---- endpoints: making, freeing ---- */

static struct dp_ep *ep_alloc(void)
{
	/* large (its rings) and made and freed in floods: a mapping of its
	 * own, so its memory goes back to the system when it closes */
	void *p = mmap(NULL, sizeof(struct dp_ep), PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

/* A free slot in the id table (0 is never used). */
static int tab_slot(struct dp_ctx *c, uint32_t *id)
{
	for (uint32_t i = 1; i < c->tab_cap; i++)
		if (!c->tab[i]) {
			*id = i;
			return 0;
		}
	{
		uint32_t n = c->tab_cap ? 2 * c->tab_cap : 64;
		struct dp_ep **t = realloc(c->tab, n * sizeof(*t));

		if (!t)
			return -ENOMEM;
		memset(t + c->tab_cap, 0, (n - c->tab_cap) * sizeof(*t));
		*id = c->tab_cap ? c->tab_cap : 1;
		c->tab = t;
		c->tab_cap = n;
	}
	return 0;
}

static int ep_new(struct dp_ctx *c, int fd, bool client, void *user,
		  struct dp_ep **out)
{
	struct epoll_event ev;
	struct dp_ep *ep;
	uint32_t id, isn;
	int ret, one = 1;

	ep = ep_alloc();
	if (!ep) {
		close(fd);
		return -ENOMEM;
	}
	ret = tab_slot(c, &id);
	if (!ret)
		ret = kn__tp_random(&ep->token, sizeof(ep->token));
	if (!ret)
		ret = kn__tp_random(&isn, sizeof(isn));
	if (ret) {
		close(fd);
		munmap(ep, sizeof(*ep));
		return ret;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	kn__swr_ep_init(&ep->sw, &c->sw, user, ep->ops, sizeof(ep->ops[0]));
	ep->h = (struct dp_handle){ DP_H_EP, fd };
	ep->sw.client = client;
	ep->sw.hidden = !client;
	ep->id = id;
	ep->sw.state = KN_SWR_STARTING;
	ep->snd_una = ep->snd_nxt = ep->snd_max = ep->snd_end = isn;
	ep->rto_ns = 10 * 1000000ull; /* until a round trip is measured */
	snprintf(ep->sw.peer_name, sizeof(ep->sw.peer_name), "?");
	ev = (struct epoll_event){ .events = client ? EPOLLOUT : EPOLLIN,
				   .data.ptr = &ep->h };
	if (epoll_ctl(c->epfd, EPOLL_CTL_ADD, fd, &ev)) {
		ret = -errno;
		close(fd);
		munmap(ep, sizeof(*ep));
		return ret;
	}
	c->tab[id] = ep;
	kn__list_push(&c->sw.eps, &ep->sw.link);
	*out = ep;
	return 0;
}

static void ep_unlink(struct dp_ep *ep)
{
	struct dp_ctx *c = dp_ep_ctx(ep);

	kn__swr_ep_unlink(&ep->sw);
	kn__list_del(&ep->tx_link);
	c->tab[ep->id] = NULL;
	if (ep->sw.state == KN_SWR_OPEN)
		c->nopen--;
	if (ep->sw.state != KN_SWR_ERROR)
		epoll_ctl(c->epfd, EPOLL_CTL_DEL, ep->h.fd, NULL);
	close(ep->h.fd);
}

static void ep_dealloc(struct dp_ep *ep)
{
	dp_ep_drop_held(ep);
	kn__swr_held_fini(&ep->held);
	if (ep->rx_unexp)
		free(ep->rx_recv.buf);
	kn__swr_ep_fini(&ep->sw);
	munmap(ep, sizeof(*ep));
}

void dp_ep_reap(struct dp_ctx *c)
{
	struct kn__list *n, *tmp;

	kn__list_each_safe(n, tmp, &c->sw.eps)
	{
		struct dp_ep *ep = dp_ep_of(n);

		if (ep->sw.hidden && ep->sw.state == KN_SWR_ERROR) {
			ep_unlink(ep);
			ep_dealloc(ep);
		}
	}
}

void dp_ep_close(struct kn__tp_ep *e)
{
	struct dp_ep *ep = dp_ep(e);

	ep_unlink(ep);
	kn__swr_ep_cancel(&ep->sw);
	ep_dealloc(ep);
}

/* ---- the handshake ---- */

static void name_peer(struct dp_ep *ep)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (getpeername(ep->h.fd, (struct sockaddr *)&ss, &len) == 0)
		kn__tp_addr_name((struct sockaddr *)&ss, ep->sw.peer_name,
				 sizeof(ep->sw.peer_name));
}

/* The client's connection came up (or not): send our hello. */
static void connected(struct dp_ep *ep)
{
	struct dp_ctx *c = dp_ep_ctx(ep);
	struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP,
				  .data.ptr = &ep->h };
	socklen_t len = sizeof(int);
	int err = 0, ret;

	if (getsockopt(ep->h.fd, SOL_SOCKET, SO_ERROR, &err, &len) || err) {
		kn__swr_ep_fail(&ep->sw, -(err ? err : errno),
				"connect failed");
		return;
	}
	ep->connected = true;
	name_peer(ep);
	epoll_ctl(c->epfd, EPOLL_CTL_MOD, ep->h.fd, &ev);
	ret = dp_ep_send_hello(ep);
	if (ret)
		kn__swr_ep_fail(&ep->sw, ret, "cannot send the hello");
}

/* After the handshake the control connection only ever closes. */
static void control_readable(struct dp_ep *ep)
{
	char b;
	ssize_t n = recv(ep->h.fd, &b, 1, MSG_DONTWAIT);

	if (n == 0)
		kn__swr_ep_fail(&ep->sw, -ECONNRESET,
				"peer closed the endpoint");
	else if (n > 0)
		kn__swr_ep_fail(&ep->sw, -EPROTO,
				"bytes on the control connection "
				"after the handshake");
	else if (errno != EAGAIN && errno != EINTR)
		kn__swr_ep_fail(&ep->sw, -errno, "control connection failed");
}

static void listener_accept(struct dp_ctx *c, struct dp_listener *l)
{
	for (int k = 0; k < 64; k++) {
		int fd = accept4(l->h.fd, NULL, NULL,
				 SOCK_NONBLOCK | SOCK_CLOEXEC);
		struct epoll_event ev;
		struct dp_ep *ep;

		if (fd < 0)
			return;
		if (ep_new(c, fd, false, NULL, &ep))
			continue;
		ep->listener = l;
		ep->connected = true;
		name_peer(ep);
		ev = (struct epoll_event){ .events = EPOLLIN | EPOLLRDHUP,
					   .data.ptr = &ep->h };
		epoll_ctl(c->epfd, EPOLL_CTL_MOD, fd, &ev);
		dp_ep_read_hello(ep);
	}
}

void dp_ctl_event(struct dp_ctx *c, struct dp_handle *h, uint32_t events)
{
	if (h->kind == DP_H_LISTENER) {
		listener_accept(c, container_of(h, struct dp_listener, h));
		return;
	}
	if (h->kind == DP_H_EP) {
		struct dp_ep *ep = container_of(h, struct dp_ep, h);

		if (ep->sw.state == KN_SWR_ERROR)
			return;
		if (!ep->connected)
			connected(ep);
		else if (ep->sw.state == KN_SWR_STARTING)
			dp_ep_read_hello(ep);
		else if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
			control_readable(ep);
	}
}

/* ---- listen, connect ---- */

int dp_listen(struct kn__tp_ctx *ctx, const struct sockaddr *addr,
	      socklen_t addrlen, void *user, struct kn__tp_listener **out)
{
	struct dp_ctx *c = dp_ctx(ctx);
	struct dp_listener *l;
	struct epoll_event ev;
	int fd = kn__tp_listen_fd(addr, addrlen, 512), ret;

	if (fd < 0)
		return fd;
	l = calloc(1, sizeof(*l));
	if (!l) {
		close(fd);
		return -ENOMEM;
	}
	l->base = (struct kn__tp_listener){ ctx, user };
	l->h = (struct dp_handle){ DP_H_LISTENER, fd };
	ev = (struct epoll_event){ .events = EPOLLIN, .data.ptr = &l->h };
	if (epoll_ctl(c->epfd, EPOLL_CTL_ADD, fd, &ev)) {
		ret = -errno;
		close(fd);
		free(l);
		return ret;
	}
	kn__list_push(&c->listeners, &l->link);
	*out = &l->base;
	return 0;
}

int dp_listener_addr(const struct kn__tp_listener *lb,
		     struct sockaddr_storage *ss)
{
	const struct dp_listener *l =
		container_of(lb, struct dp_listener, base);
	socklen_t len = sizeof(*ss);

	return getsockname(l->h.fd, (struct sockaddr *)ss, &len) ? -errno : 0;
}

void dp_listener_close(struct kn__tp_listener *lb)
{
	struct dp_listener *l = container_of(lb, struct dp_listener, base);
	struct dp_ctx *c = dp_ctx(lb->ctx);
	struct kn__list *n;

	kn__list_del(&l->link);
	/* connections it accepted whose handshake is not done go too */
	kn__list_each(n, &c->sw.eps)
	{
		struct dp_ep *ep = dp_ep_of(n);

		if (ep->listener == l) {
			ep->listener = NULL;
			if (ep->sw.hidden)
				kn__swr_ep_fail(&ep->sw, -ECANCELED,
						"listener closed");
		}
	}
	dp_ep_reap(c);
	epoll_ctl(c->epfd, EPOLL_CTL_DEL, l->h.fd, NULL);
	close(l->h.fd);
	free(l);
}

int dp_connect(struct kn__tp_ctx *ctx, const struct sockaddr *addr,
	       socklen_t addrlen, void *user, struct kn__tp_ep **out)
{
	struct dp_ep *ep;
	int fd = kn__tp_connect_fd(addr, addrlen), ret;

	if (fd < 0)
		return fd;
	ret = ep_new(dp_ctx(ctx), fd, true, user, &ep);
	if (ret)
		return ret;
	kn__tp_addr_name(addr, ep->sw.peer_name, sizeof(ep->sw.peer_name));
	*out = &ep->sw.base;
	return 0;
}

/* ---- grants ---- */

int dp_ep_grant(struct kn__tp_ep *e, struct kn__tp_mr *m, uint64_t off,
		uint64_t len, uint32_t access, struct kn__tp_rdesc *rdesc)
{
	return kn__swr_grant_add(&dp_ep(e)->sw.grants, m, off, len, access,
				 false, rdesc);
}

int dp_ep_peer(const struct kn__tp_ep *e, struct sockaddr_storage *ss)
{
	const struct dp_ep *ep = container_of(e, struct dp_ep, sw.base);
	socklen_t len = sizeof(*ss);

	return getpeername(ep->h.fd, (struct sockaddr *)ss, &len) ? -errno : 0;
}

/* ---- posts ---- */

int dp_ep_post(struct kn__tp_ep *e, const struct dp_msg *m, uint32_t kind,
	       void *user, char *read_dst)
{
	struct dp_ep *ep = dp_ep(e);
	struct dp_ctx *c = dp_ep_ctx(ep);
	struct dp_msg msg = *m;
	struct kn__swr_op *sop;
	struct dp_op *op;
	int ret;

	ret = kn__swr_op_new(&ep->sw, kind, user, &sop);
	if (ret)
		return ret;
	msg.op_idx = ep->sw.op_tail;
	ret = dp_tx_queue(ep, &msg);
	if (ret)
		return ret;
	op = container_of(sop, struct dp_op, sw);
	*op = (struct dp_op){ .sw = *sop };
	ep->sw.op_tail++;
	if (kind == KN_TP_OP_READ) {
		op->dst = read_dst;
		op->len = m->total;
	}
	if (ep->sw.state == KN_SWR_OPEN) {
		dp_tx_progress(ep, dp_now_ns());
		dp_tx_flush(c);
	}
	return 0;
}

int dp_post_write_imm(struct kn__tp_ep *e, struct kn__tp_mr *mr, size_t off,
		      size_t len, const struct kn__tp_rdesc *dst,
		      uint64_t dst_off, uint32_t imm, void *user)
{
	struct dp_msg m = { .op = KN_DP_WRITE,
			    .src = mr->addr + off,
			    .mr = container_of(mr, struct dp_mr, base),
			    .len = len,
			    .key = dst->key,
			    .imm = imm,
			    .off = dst_off };

	return dp_ep_post(e, &m, KN_TP_OP_WRITE_IMM, user, NULL);
}

int dp_post_read(struct kn__tp_ep *e, struct kn__tp_mr *mr, size_t off,
		 size_t len, const struct kn__tp_rdesc *src, uint64_t src_off,
		 void *user)
{
	struct dp_msg m = { .op = KN_DP_READ_REQ,
			    .key = src->key,
			    .total = (uint32_t)len,
			    .off = src_off };

	return dp_ep_post(e, &m, KN_TP_OP_READ, user, mr->addr + off);
}

int dp_post_send(struct kn__tp_ep *e, struct kn__tp_mr *mr, size_t off,
		 size_t len, void *user)
{
	struct dp_msg m = { .op = KN_DP_SEND,
			    .src = mr->addr + off,
			    .mr = container_of(mr, struct dp_mr, base),
			    .len = len };

	return dp_ep_post(e, &m, KN_TP_OP_SEND, user, NULL);
}

int dp_post_recv(struct kn__tp_ep *e, struct kn__tp_mr *mr, size_t off,
		 size_t len, void *user)
{
	struct dp_ep *ep = dp_ep(e);
	int ret = kn__swr_post_recv(&ep->sw, mr->addr + off, len, user);

	if (ret)
		return ret;
	/* a message that waited for it lands now */
	kn__swr_held_match(&ep->sw, &ep->held);
	return 0;
}
