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
	ep->base = (struct kn__tp_ep){ &c->base, user };
	ep->h = (struct dp_handle){ DP_H_EP, fd };
	ep->client = client;
	ep->hidden = !client;
	ep->id = id;
	ep->state = DP_HANDSHAKE;
	ep->snd_una = ep->snd_nxt = ep->snd_max = ep->snd_end = isn;
	ep->rto_ns = 10 * 1000000ull; /* until a round trip is measured */
	snprintf(ep->peer_name, sizeof(ep->peer_name), "?");
	ev = (struct epoll_event){ .events = client ? EPOLLOUT : EPOLLIN,
				   .data.ptr = &ep->h };
	if (epoll_ctl(c->epfd, EPOLL_CTL_ADD, fd, &ev)) {
		ret = -errno;
		close(fd);
		munmap(ep, sizeof(*ep));
		return ret;
	}
	c->tab[id] = ep;
	ep->next = c->eps;
	if (ep->next)
		ep->next->prev = ep;
	c->eps = ep;
	*out = ep;
	return 0;
}

static void ep_unlink(struct dp_ep *ep)
{
	struct dp_ctx *c = dp_ep_ctx(ep);

	if (ep->prev)
		ep->prev->next = ep->next;
	else
		c->eps = ep->next;
	if (ep->next)
		ep->next->prev = ep->prev;
	c->tab[ep->id] = NULL;
	dp_ep_unready(ep);
	if (ep->state != DP_ERROR)
		epoll_ctl(c->epfd, EPOLL_CTL_DEL, ep->h.fd, NULL);
	close(ep->h.fd);
}

static void ep_dealloc(struct dp_ep *ep)
{
	dp_ep_drop_held(ep);
	for (; ep->ux_head != ep->ux_tail; ep->ux_head++)
		free(ep->unexp[ep->ux_head % DP_UNEXP].buf);
	if (ep->rx_unexp)
		free(ep->rx_recv.buf);
	kn__swr_grants_fini(&ep->grants);
	munmap(ep, sizeof(*ep));
}

void dp_ep_reap(struct dp_ctx *c)
{
	for (struct dp_ep *ep = c->eps, *next; ep; ep = next) {
		next = ep->next;
		if (ep->hidden && ep->state == DP_ERROR) {
			ep_unlink(ep);
			ep_dealloc(ep);
		}
	}
}

void dp_ep_close(struct kn__tp_ep *e)
{
	struct dp_ep *ep = dp_ep(e);
	struct dp_ctx *c = dp_ep_ctx(ep);

	ep_unlink(ep);
	for (; ep->op_head != ep->op_tail; ep->op_head++) {
		struct dp_op *op = &ep->ops[ep->op_head % DP_SQ_DEPTH];
		struct kn__tp_completion comp = {
			.user = op->user,
			.status = op->done ? op->status : -ECANCELED,
			.op = op->kind,
			.bytes = op->done && !op->status ? op->bytes : 0,
		};

		kn__tp_cq_push_grow(&c->cq, &comp, "dpdk");
	}
	kn__swr_rq_drop(&ep->rq, &c->cq, "dpdk");
	ep_dealloc(ep);
}

/* ---- the handshake ---- */

static void name_peer(struct dp_ep *ep)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (getpeername(ep->h.fd, (struct sockaddr *)&ss, &len) == 0)
		kn__tp_addr_name((struct sockaddr *)&ss, ep->peer_name,
				 sizeof(ep->peer_name));
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
		dp_ep_fail(ep, -(err ? err : errno), "connect failed");
		return;
	}
	ep->connected = true;
	name_peer(ep);
	epoll_ctl(c->epfd, EPOLL_CTL_MOD, ep->h.fd, &ev);
	ret = dp_ep_send_hello(ep);
	if (ret)
		dp_ep_fail(ep, ret, "cannot send the hello");
}

/* After the handshake the control connection only ever closes. */
static void control_readable(struct dp_ep *ep)
{
	char b;
	ssize_t n = recv(ep->h.fd, &b, 1, MSG_DONTWAIT);

	if (n == 0)
		dp_ep_fail(ep, -ECONNRESET, "peer closed the endpoint");
	else if (n > 0)
		dp_ep_fail(ep, -EPROTO,
			   "bytes on the control connection "
			   "after the handshake");
	else if (errno != EAGAIN && errno != EINTR)
		dp_ep_fail(ep, -errno, "control connection failed");
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

		if (ep->state == DP_ERROR)
			return;
		if (!ep->connected)
			connected(ep);
		else if (ep->state == DP_HANDSHAKE)
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
	int fd, one = 1, ret;

	fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
		    0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, addr, addrlen) || listen(fd, 512)) {
		ret = -errno;
		close(fd);
		return ret;
	}
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
	l->next = c->listeners;
	c->listeners = l;
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

	for (struct dp_listener **p = &c->listeners; *p; p = &(*p)->next)
		if (*p == l) {
			*p = l->next;
			break;
		}
	/* connections it accepted whose handshake is not done go too */
	for (struct dp_ep *ep = c->eps; ep; ep = ep->next)
		if (ep->listener == l) {
			ep->listener = NULL;
			if (ep->hidden)
				dp_ep_fail(ep, -ECANCELED, "listener closed");
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
	int fd, ret;

	fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
		    0);
	if (fd < 0)
		return -errno;
	if (connect(fd, addr, addrlen) && errno != EINPROGRESS) {
		ret = -errno;
		close(fd);
		return ret;
	}
	ret = ep_new(dp_ctx(ctx), fd, true, user, &ep);
	if (ret)
		return ret;
	kn__tp_addr_name(addr, ep->peer_name, sizeof(ep->peer_name));
	*out = &ep->base;
	return 0;
}

/* ---- grants ---- */

int dp_ep_grant(struct kn__tp_ep *e, struct kn__tp_mr *m, uint64_t off,
		uint64_t len, uint32_t access, struct kn__tp_rdesc *rdesc)
{
	return kn__swr_grant_add(&dp_ep(e)->grants, m, off, len, access, false,
				 rdesc);
}

int dp_ep_peer(const struct kn__tp_ep *e, struct sockaddr_storage *ss)
{
	const struct dp_ep *ep = container_of(e, struct dp_ep, base);
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
	struct dp_op *op;
	int ret;

	if (ep->state == DP_ERROR)
		return -ENOTCONN;
	if (ep->op_tail - ep->op_head == DP_SQ_DEPTH)
		return -EAGAIN;
	msg.op_idx = ep->op_tail;
	ret = dp_tx_queue(ep, &msg);
	if (ret)
		return ret;
	op = &ep->ops[ep->op_tail++ % DP_SQ_DEPTH];
	*op = (struct dp_op){ .kind = kind, .user = user };
	if (kind == KN_TP_OP_READ) {
		op->dst = read_dst;
		op->len = m->total;
	}
	if (ep->state == DP_OPEN) {
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
	int ret;

	if (ep->state == DP_ERROR)
		return -ENOTCONN;
	ret = kn__swr_rq_post(&ep->rq, mr->addr + off, len, user);
	if (ret)
		return ret;
	dp_ep_match(ep); /* a message that waited for it lands now */
	return 0;
}
