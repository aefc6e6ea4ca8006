/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tcp.c - the tcp provider: RDMA semantics over TCP sockets.
 *
 * Each endpoint is one non-blocking TCP connection carrying the frames of
 * wire.h (tcp_frame.c: what a frame does, and the checks of one-sided
 * frames against this endpoint's grants).  This file is the provider's
 * ops table: contexts, regions, grants, endpoints, posts, listeners, and
 * poll.
 *
 * Posted operations live in a per-endpoint ring in post order (the send
 * queue, fixed size: posting allocates nothing) and are released to the
 * completion queue from its head, so completions come back in post
 * order.  A post hands its frame to the context's I/O driver at once
 * (one send call where the socket is idle).
 *
 * Progress happens in kn__tp_poll(): the driver (tcp_epoll.c or
 * tcp_uring.c, chosen when the context is created; see tcp_priv.h)
 * handles what is ready, then the finished work of the endpoints on the
 * context's ready list (those that may have some: ep_ready) moves to a
 * completion queue ring that poll drains.  That endpoint core (grants,
 * posted recv buffers, the op ring, failure, release, the ready list)
 * is the one the dpdk provider has too (swrdma.h).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tcp_priv.h"

#define CQ_DEPTH 4096
#define MAX_MSG	 4096

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
		kn__tp_addr_name((struct sockaddr *)&ss, ep->sw.peer_name,
				 sizeof(ep->sw.peer_name));
		inet = ss.ss_family == AF_INET || ss.ss_family == AF_INET6;
		if (ss.ss_family == AF_INET)
			local = (ntohl(((struct sockaddr_in *)&ss)
					       ->sin_addr.s_addr) >>
				 24) == 127;
		else if (ss.ss_family == AF_INET6)
			local = IN6_IS_ADDR_LOOPBACK(
				&((struct sockaddr_in6 *)&ss)->sin6_addr);
	}
	ep->zc = inet && (!local || ep_ctx(ep)->zc_loopback);
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

void kn__tcp_ep_dealloc(struct tcp_ep *ep)
{
	kn__swr_ep_fini(&ep->sw);
	munmap(ep, sizeof(*ep));
}

static int ep_new(struct tcp_ctx *c, int fd, enum kn__swr_state state,
		  void *user, struct tcp_ep **out)
{
	struct tcp_ep *ep = ep_alloc();
	int one = 1, ret;

	if (!ep)
		return -ENOMEM;
	kn__swr_ep_init(&ep->sw, &c->sw, user, ep->ops, sizeof(ep->ops[0]));
	ep->h = (struct handle){ H_EP, fd };
	ep->sw.state = state;
	ep->sw.client = state == KN_SWR_STARTING;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	ep->rx_req = (struct req){ R_RX, ep };
	ep->tx_req = (struct req){ R_TX, ep };
	ep->zresp_req = (struct req){ R_TX_ZC, ep };
	ep->conn_req = (struct req){ R_CONNECT, ep };
	if (state == KN_SWR_OPEN)
		ep_peer(ep);
	ret = c->drv->ep_add(ep);
	if (ret) {
		kn__tcp_ep_dealloc(ep);
		return ret;
	}
	kn__list_push(&c->sw.eps, &ep->sw.link);
	*out = ep;
	return 0;
}

static int tcp_connect(struct kn__tp_ctx *ctx, const struct sockaddr *addr,
		       socklen_t addrlen, void *user, struct kn__tp_ep **out)
{
	struct tcp_ctx *c = tctx(ctx);
	struct tcp_ep *ep = NULL;
	int fd = kn__tp_connect_fd(addr, addrlen), ret;

	if (fd < 0)
		return fd;
	ret = ep_new(c, fd, KN_SWR_STARTING, user, &ep);
	if (ret)
		goto err_close;
	ep->sw.connect_event = true;
	kn__tp_addr_name(addr, ep->sw.peer_name, sizeof(ep->sw.peer_name));
	*out = &ep->sw.base;
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
	ret = ep_new(tctx(ctx), fd, KN_SWR_OPEN, user, &ep);
	if (ret)
		goto err_close;
	*out = &ep->sw.base;
	return 0;

err_close:
	close(fd);
	return ret;
}

int kn__tcp_ep_connected(struct tcp_ep *ep)
{
	int err = 0;
	socklen_t len = sizeof(err);

	if (getsockopt(ep->h.fd, SOL_SOCKET, SO_ERROR, &err, &len) || err) {
		err = -(err ? err : errno);
		kn__swr_ep_fail(&ep->sw, err, "connect failed");
		return err;
	}
	ep->sw.state = KN_SWR_OPEN;
	ep_peer(ep);
	ep_ready(ep); /* its CONNECT completion */
	return 0;
}

void kn__tcp_ep_free(struct tcp_ep *ep)
{
	kn__swr_ep_cancel(&ep->sw);
	close(ep->h.fd);
	kn__tcp_ep_dealloc(ep);
}

static void tcp_ep_close(struct kn__tp_ep *e)
{
	struct tcp_ep *ep = tep(e);

	kn__swr_ep_unlink(&ep->sw);
	ep_ctx(ep)->drv->ep_close(ep);
}

/* ---- posts ---- */

/*
 * Queue a frame with header @h for a new op of @kind: its payload (a
 * write_imm's, a send's) or its answer's destination (a read's) is
 * [@buf, +@len).  Posting allocates nothing: the op lives in the ring.
 */
static int post(struct kn__tp_ep *e, uint32_t kind, char *buf, size_t len,
		struct kn__wire_hdr h, void *user)
{
	struct tcp_ep *ep = tep(e);
	struct kn__swr_op *sop;
	struct op *op;
	int ret;

	ret = kn__swr_op_new(&ep->sw, kind, user, &sop);
	if (ret)
		return ret;
	op = container_of(sop, struct op, sw);
	*op = (struct op){ .sw = *sop, .len = (uint32_t)len };
	op->sw.bytes = len;
	if (kind == KN_TP_OP_READ)
		op->dst = buf;
	else
		op->payload = buf;
	h.length = (uint32_t)len;
	h.seq = ep->tx_seq++;
	kn__wire_encode(&h, op->hdr);
	ep->sw.op_tail++;
	ep_ctx(ep)->drv->ep_post(ep);
	return 0;
}

static int tcp_post_write_imm(struct kn__tp_ep *e, struct kn__tp_mr *mr,
			      size_t off, size_t len,
			      const struct kn__tp_rdesc *dst, uint64_t dst_off,
			      uint32_t imm, void *user)
{
	return post(e, KN_TP_OP_WRITE_IMM, mr->addr + off, len,
		    (struct kn__wire_hdr){ .op = KN_WIRE_WRITE_IMM,
					   .region = dst->key,
					   .imm = imm,
					   .offset = dst_off },
		    user);
}

static int tcp_post_read(struct kn__tp_ep *e, struct kn__tp_mr *mr, size_t off,
			 size_t len, const struct kn__tp_rdesc *src,
			 uint64_t src_off, void *user)
{
	return post(e, KN_TP_OP_READ, mr->addr + off, len,
		    (struct kn__wire_hdr){ .op = KN_WIRE_READ_REQ,
					   .region = src->key,
					   .offset = src_off },
		    user);
}

static int tcp_post_send(struct kn__tp_ep *e, struct kn__tp_mr *mr, size_t off,
			 size_t len, void *user)
{
	return post(e, KN_TP_OP_SEND, mr->addr + off, len,
		    (struct kn__wire_hdr){ .op = KN_WIRE_SEND }, user);
}

static int tcp_post_recv(struct kn__tp_ep *e, struct kn__tp_mr *mr, size_t off,
			 size_t len, void *user)
{
	struct tcp_ep *ep = tep(e);
	int ret = kn__swr_post_recv(&ep->sw, mr->addr + off, len, user);

	if (ret)
		return ret;
	if (ep->rx != RX_WAIT_RECV || ep->sw.state != KN_SWR_OPEN)
		return 0;
	ep_ctx(ep)->drv->ep_recv_posted(ep); /* the paused message lands */
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
	kn__list_push(&tctx(ctx)->mrs, &mr->link);
	*out = &mr->base;
	return 0;
}

static void tcp_mr_dereg(struct kn__tp_mr *m)
{
	struct tcp_mr *mr = container_of(m, struct tcp_mr, base);
	struct tcp_ctx *c = tctx(m->ctx);
	struct kn__list *n;

	kn__list_each(n, &c->sw.eps)
		kn__swr_grant_revoke(&tep_of(n)->sw.grants, &mr->base);
	kn__list_del(&mr->link);
	free(mr);
}

static int tcp_ep_grant(struct kn__tp_ep *e, struct kn__tp_mr *m, uint64_t off,
			uint64_t len, uint32_t access,
			struct kn__tp_rdesc *rdesc)
{
	return kn__swr_grant_add(&tep(e)->sw.grants, m, off, len, access,
				 tctx(e->ctx)->test_keys, rdesc);
}

static int tcp_ep_peer(const struct kn__tp_ep *e, struct sockaddr_storage *ss)
{
	const struct tcp_ep *ep = container_of(e, struct tcp_ep, sw.base);
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
	int fd = kn__tp_listen_fd(addr, addrlen, 128), ret;

	if (fd < 0)
		return fd;
	l = calloc(1, sizeof(*l));
	if (!l) {
		ret = -ENOMEM;
		goto err_close;
	}
	l->base = (struct kn__tp_listener){ ctx, user };
	l->h = (struct handle){ H_LISTENER, fd };
	l->req = (struct req){ R_ACCEPT, l };
	ret = c->drv->listen(l);
	if (ret) {
		free(l);
		goto err_close;
	}
	kn__list_push(&c->listeners, &l->link);
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

	kn__list_del(&l->link);
	/* stop listening now: the fd may outlive this call (io_uring) */
	shutdown(l->h.fd, SHUT_RDWR);
	c->drv->listener_close(l);
}

void kn__tcp_listener_accept(struct tcp_listener *l)
{
	struct tcp_ctx *c = tctx(l->base.ctx);

	for (;;) {
		struct tcp_ep *ep = NULL;
		int fd;

		l->starved = !kn__tp_cq_room(&c->sw.cq);
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
		if (ep_new(c, fd, KN_SWR_OPEN, NULL, &ep)) {
			close(fd);
			continue;
		}
		kn__tp_cq_push(&c->sw.cq, &(struct kn__tp_completion){
						  .user = l->base.user,
						  .ep = &ep->sw.base,
						  .op = KN_TP_OP_ACCEPT });
	}
}

static int tcp_poll(struct kn__tp_ctx *ctx, struct kn__tp_completion *out,
		    int max)
{
	struct tcp_ctx *c = tctx(ctx);
	int ret, got;

	ret = c->drv->progress(c);
	if (ret)
		return ret;
	kn__swr_release_ready(&c->sw);
	got = kn__tp_cq_take(&c->sw.cq, out, max);
	if (c->drv->flush)
		c->drv->flush(c);
	return got;
}

static int tcp_fd(const struct kn__tp_ctx *ctx)
{
	const struct tcp_ctx *c = container_of(ctx, struct tcp_ctx, sw.base);

	return c->drv->fd(c);
}

/* ---- context ---- */

void kn__tcp_listener_free(struct tcp_listener *l)
{
	close(l->h.fd);
	free(l);
}

static void tcp_ctx_destroy(struct kn__tp_ctx *ctx)
{
	struct tcp_ctx *c = tctx(ctx);
	struct kn__list *n, *tmp;

	/* first, so that nothing below is still the kernel's */
	c->drv->fini(c);
	kn__list_each_safe(n, tmp, &c->sw.eps)
	{
		close(tep_of(n)->h.fd);
		kn__tcp_ep_dealloc(tep_of(n));
	}
	kn__list_each_safe(n, tmp, &c->mrs)
		free(container_of(n, struct tcp_mr, link));
	kn__list_each_safe(n, tmp, &c->listeners)
		kn__tcp_listener_free(tlistener_of(n));
	kn__tp_cq_fini(&c->sw.cq);
	free(c);
}

/*
 * A context with the first driver of KN_TCP_DRIVERS whose init succeeds
 * (io_uring, unless it is refused or the context asks for epoll): 0, or
 * the last driver's error.
 */
static int ctx_alloc(const struct kn__tp_ctx_attr *attr, struct tcp_ctx **out)
{
	static const struct tcp_driver *const drivers[] = { KN_TCP_DRIVERS };
	int ret = -ENOSYS;

	for (size_t i = 0; i < sizeof(drivers) / sizeof(drivers[0]); i++) {
		struct tcp_ctx *c = calloc(1, drivers[i]->ctx_size);

		if (!c)
			return -ENOMEM;
		c->drv = drivers[i];
		c->sw.base.name = drivers[i]->name;
		kn__swr_ctx_init(&c->sw, &kn__tcp_prov);
		kn__list_init(&c->mrs);
		kn__list_init(&c->listeners);
		ret = c->drv->init(c, attr);
		if (!ret) {
			*out = c;
			return 0;
		}
		free(c);
	}
	return ret;
}

static int tcp_ctx_create(const struct kn__tp_ctx_attr *attr,
			  struct kn__tp_ctx **out)
{
	uint32_t depth = attr && attr->cq_depth ? attr->cq_depth : CQ_DEPTH;
	struct tcp_ctx *c;
	int ret;

	if (attr &&
	    (attr->flags & ~(KN_TP_CTX_FORCE_EPOLL | KN_TP_CTX_ZC_LOOPBACK |
			     KN_TP_CTX_TEST_KEYS)))
		return -EINVAL;
	if (attr && attr->max_msg > KN_WIRE_MAX_LEN)
		return -EINVAL;
	ret = ctx_alloc(attr, &c);
	if (ret)
		return ret;
	c->sw.base.ops = &kn__tp_tcp_ops;
	c->sw.base.max_msg = attr && attr->max_msg ? attr->max_msg : MAX_MSG;
	c->test_keys = attr && (attr->flags & KN_TP_CTX_TEST_KEYS);
	c->zc_loopback = attr && (attr->flags & KN_TP_CTX_ZC_LOOPBACK);
	ret = kn__tp_cq_init(&c->sw.cq, depth);
	if (ret)
		goto err_fini;
	*out = &c->sw.base;
	return 0;

err_fini:
	c->drv->fini(c);
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
