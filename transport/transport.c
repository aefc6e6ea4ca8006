/* SPDX-License-Identifier: Apache-2.0 */
/*
 * transport.c - the provider-independent half of the transport layer:
 * picks a provider, checks every post's ranges against its region and
 * the peer's descriptor once, here, and dispatches through the ops table.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "transport_priv.h"

#define KN_TP_BUSY_POLL_US 50 /* about one small round trip */

static const struct kn__tp_ops *const providers[] = {
	&kn__tp_tcp_ops,
#ifdef KN_HAVE_VERBS
	&kn__tp_verbs_ops,
#endif
#ifdef KN_HAVE_DPDK
	&kn__tp_dpdk_ops,
#endif
};

int kn__tp_ctx_create(const struct kn__tp_ctx_attr *attr,
		      struct kn__tp_ctx **ctx)
{
	const char *name = attr && attr->provider ? attr->provider : "tcp";

	if (!ctx)
		return -EINVAL;
	for (size_t i = 0; i < sizeof(providers) / sizeof(providers[0]); i++) {
		struct kn__tp_ctx *c;
		int ret;

		if (strcmp(name, providers[i]->name) != 0)
			continue;
		ret = providers[i]->ctx_create(attr, &c);
		if (ret)
			return ret;
		c->busy_poll_us = attr && attr->busy_poll_us
					  ? attr->busy_poll_us
					  : KN_TP_BUSY_POLL_US;
		*ctx = c;
		return 0;
	}
	return -ENOENT;
}

void kn__tp_ctx_destroy(struct kn__tp_ctx *ctx)
{
	if (ctx)
		ctx->ops->ctx_destroy(ctx);
}

const char *kn__tp_ctx_provider(const struct kn__tp_ctx *ctx)
{
	return ctx->name;
}

int kn__tp_mr_reg(struct kn__tp_ctx *ctx, void *addr, size_t len,
		  uint32_t access, struct kn__tp_mr **mr)
{
	if (!ctx || !mr || (!addr && len) ||
	    (access & ~(KN_TP_REMOTE_WRITE | KN_TP_REMOTE_READ)))
		return -EINVAL;
	return ctx->ops->mr_reg(ctx, addr, len, access, mr);
}

size_t kn__tp_mr_len(const struct kn__tp_mr *mr)
{
	return mr->len;
}

uint32_t kn__tp_mr_access(const struct kn__tp_mr *mr)
{
	return mr->access;
}

void kn__tp_mr_dereg(struct kn__tp_mr *mr)
{
	if (mr)
		mr->ctx->ops->mr_dereg(mr);
}

int kn__tp_ep_grant(struct kn__tp_ep *ep, struct kn__tp_mr *mr, uint64_t off,
		    uint64_t len, uint32_t access, struct kn__tp_rdesc *rdesc)
{
	if (!ep || !mr || !rdesc || mr->ctx != ep->ctx || !access ||
	    (access & ~mr->access) || off > mr->len || len > mr->len - off)
		return -EINVAL;
	return ep->ctx->ops->ep_grant(ep, mr, off, len, access, rdesc);
}

int kn__tp_ep_peer(const struct kn__tp_ep *ep, struct sockaddr_storage *addr)
{
	if (!ep || !addr)
		return -EINVAL;
	return ep->ctx->ops->ep_peer(ep, addr);
}

int kn__tp_random(void *buf, size_t len)
{
	for (size_t got = 0; got < len;) {
		ssize_t n = getrandom((char *)buf + got, len - got, 0);

		if (n < 0 && errno != EINTR)
			return -errno;
		if (n > 0)
			got += (size_t)n;
	}
	return 0;
}

int kn__tp_listen_fd(const struct sockaddr *addr, socklen_t addrlen,
		     int backlog)
{
	int fd = socket(addr->sa_family,
			SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int one = 1, ret;

	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, addr, addrlen) || listen(fd, backlog)) {
		ret = -errno;
		close(fd);
		return ret;
	}
	return fd;
}

int kn__tp_connect_fd(const struct sockaddr *addr, socklen_t addrlen)
{
	int fd = socket(addr->sa_family,
			SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int ret;

	if (fd < 0)
		return -errno;
	if (connect(fd, addr, addrlen) && errno != EINPROGRESS) {
		ret = -errno;
		close(fd);
		return ret;
	}
	return fd;
}

/* Endpoint failures: this window's start, lines logged, lines not. */
static pthread_mutex_t fail_lock = PTHREAD_MUTEX_INITIALIZER;
static double fail_window;
static unsigned int fail_lines, fail_quiet;

static void log_line(const char *prefix, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void log_line(const char *prefix, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	kn__tp_vlog(prefix, fmt, ap);
	va_end(ap);
}

bool kn__tp_fail_log_ok(void)
{
	struct timespec ts;
	double t;
	bool ok;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	t = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
	pthread_mutex_lock(&fail_lock);
	if (t - fail_window >= 1.0) {
		if (fail_quiet)
			log_line("transport",
				 "%u more endpoints failed in the last %.0f s "
				 "(not logged one by one)",
				 fail_quiet, t - fail_window);
		fail_window = t;
		fail_lines = fail_quiet = 0;
	}
	ok = fail_lines < KN_TP_FAIL_LOGS_PER_S;
	if (ok)
		fail_lines++;
	else
		fail_quiet++;
	pthread_mutex_unlock(&fail_lock);
	return ok;
}

void kn__tp_addr_name(const struct sockaddr *sa, char *buf, size_t size)
{
	char host[INET6_ADDRSTRLEN] = "?";
	unsigned int port = 0;

	if (sa && sa->sa_family == AF_INET) {
		const struct sockaddr_in *a = (const void *)sa;

		inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
		port = ntohs(a->sin_port);
	} else if (sa && sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const void *)sa;

		inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
		port = ntohs(a->sin6_port);
	}
	snprintf(buf, size, "%s:%u", host, port);
}

void kn__tp_peer_vlog(const char *provider, const char *peer, const char *fmt,
		      va_list ap)
{
	char prefix[96];

	snprintf(prefix, sizeof(prefix), "%s: peer %s", provider, peer);
	kn__tp_vlog(prefix, fmt, ap);
}

void kn__tp_fail_vlog(const char *provider, const char *peer, int err,
		      const char *why, va_list ap)
{
	char prefix[96], msg[256];

	if (err == -ECONNRESET || err == -ECONNREFUSED || !kn__tp_fail_log_ok())
		return;
	vsnprintf(msg, sizeof(msg), why, ap);
	snprintf(prefix, sizeof(prefix), "%s: peer %s", provider, peer);
	log_line(prefix, "%s (%s); endpoint closed", msg, strerror(-err));
}

void kn__tp_vlog(const char *prefix, const char *fmt, va_list ap)
{
	char line[512];
	int n = snprintf(line, sizeof(line), "kanel: %s: ", prefix);

	if (n < 0)
		return;
	if ((size_t)n < sizeof(line) - 1) {
		int m = vsnprintf(line + n, sizeof(line) - 1 - (size_t)n, fmt,
				  ap);

		if (m > 0)
			n += m;
	}
	if ((size_t)n > sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	(void)!write(STDERR_FILENO, line, (size_t)n);
}

int kn__tp_listen(struct kn__tp_ctx *ctx, const struct sockaddr *addr,
		  socklen_t addrlen, void *user,
		  struct kn__tp_listener **listener)
{
	if (!ctx || !addr || !listener)
		return -EINVAL;
	return ctx->ops->listen(ctx, addr, addrlen, user, listener);
}

int kn__tp_listener_addr(const struct kn__tp_listener *listener,
			 struct sockaddr_storage *addr)
{
	return listener->ctx->ops->listener_addr(listener, addr);
}

void kn__tp_listener_close(struct kn__tp_listener *listener)
{
	if (listener)
		listener->ctx->ops->listener_close(listener);
}

int kn__tp_connect(struct kn__tp_ctx *ctx, const struct sockaddr *addr,
		   socklen_t addrlen, void *user, struct kn__tp_ep **ep)
{
	if (!ctx || !addr || !ep)
		return -EINVAL;
	return ctx->ops->connect(ctx, addr, addrlen, user, ep);
}

int kn__tp_adopt(struct kn__tp_ctx *ctx, int fd, void *user,
		 struct kn__tp_ep **ep)
{
	if (!ctx || fd < 0 || !ep)
		return -EINVAL;
	if (!ctx->ops->adopt) {
		close(fd);
		return -EOPNOTSUPP;
	}
	return ctx->ops->adopt(ctx, fd, user, ep);
}

void kn__tp_ep_set_user(struct kn__tp_ep *ep, void *user)
{
	ep->user = user;
}

void *kn__tp_ep_user(const struct kn__tp_ep *ep)
{
	return ep->user;
}

void kn__tp_ep_close(struct kn__tp_ep *ep)
{
	if (ep)
		ep->ctx->ops->ep_close(ep);
}

/* [off, off + len) inside [0, size), without overflow. */
static bool in_range(uint64_t off, uint64_t len, uint64_t size)
{
	return off <= size && len <= size - off;
}

static int check_local(const struct kn__tp_ep *ep, const struct kn__tp_mr *mr,
		       size_t off, size_t len)
{
	if (!ep || !mr || mr->ctx != ep->ctx || !in_range(off, len, mr->len))
		return -EINVAL;
	if (len > ep->ctx->ops->max_len)
		return -EMSGSIZE;
	return 0;
}

/* A one-sided post's local range, and its remote range @r needs @right. */
static int check_one_sided(const struct kn__tp_ep *ep,
			   const struct kn__tp_mr *mr, size_t off, size_t len,
			   const struct kn__tp_rdesc *r, uint64_t roff,
			   uint32_t right)
{
	int ret = check_local(ep, mr, off, len);

	if (ret)
		return ret;
	if (!r || !(r->access & right) || !in_range(roff, len, r->len))
		return -EINVAL;
	return 0;
}

int kn__tp_post_write_imm(struct kn__tp_ep *ep, struct kn__tp_mr *mr,
			  size_t off, size_t len,
			  const struct kn__tp_rdesc *dst, uint64_t dst_off,
			  uint32_t imm, void *user)
{
	int ret = check_one_sided(ep, mr, off, len, dst, dst_off,
				  KN_TP_REMOTE_WRITE);

	return ret ? ret
		   : ep->ctx->ops->post_write_imm(ep, mr, off, len, dst,
						  dst_off, imm, user);
}

int kn__tp_post_read(struct kn__tp_ep *ep, struct kn__tp_mr *mr, size_t off,
		     size_t len, const struct kn__tp_rdesc *src,
		     uint64_t src_off, void *user)
{
	int ret = check_one_sided(ep, mr, off, len, src, src_off,
				  KN_TP_REMOTE_READ);

	return ret ? ret
		   : ep->ctx->ops->post_read(ep, mr, off, len, src, src_off,
					     user);
}

int kn__tp_post_send(struct kn__tp_ep *ep, struct kn__tp_mr *mr, size_t off,
		     size_t len, void *user)
{
	int ret = check_local(ep, mr, off, len);

	if (ret)
		return ret;
	if (len > ep->ctx->max_msg)
		return -EMSGSIZE;
	return ep->ctx->ops->post_send(ep, mr, off, len, user);
}

int kn__tp_post_recv(struct kn__tp_ep *ep, struct kn__tp_mr *mr, size_t off,
		     size_t len, void *user)
{
	int ret = check_local(ep, mr, off, len);

	if (ret)
		return ret;
	return ep->ctx->ops->post_recv(ep, mr, off, len, user);
}

int kn__tp_poll(struct kn__tp_ctx *ctx, struct kn__tp_completion *out, int max)
{
	if (!ctx || !out || max <= 0)
		return -EINVAL;
	return ctx->ops->poll(ctx, out, max);
}

int kn__tp_fd(const struct kn__tp_ctx *ctx)
{
	return ctx->ops->fd(ctx);
}

static uint64_t now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

int kn__tp_poll_wait(struct kn__tp_ctx *ctx, struct kn__tp_completion *out,
		     int max, int timeout_ms)
{
	uint64_t spin_end, deadline;
	struct pollfd pfd;
	int n = kn__tp_poll(ctx, out, max);

	if (n)
		return n;
	if (ctx->busy_poll_us != UINT32_MAX) {
		spin_end = now_ns() + (uint64_t)ctx->busy_poll_us * 1000u;
		while (now_ns() < spin_end)
			if ((n = ctx->ops->poll(ctx, out, max)))
				return n;
	}
	if (timeout_ms == 0)
		return 0;
	/*
	 * The spin's last poll armed the provider: the fd will tell.  A
	 * provider may also wake the fd for its own timers (dpdk: poll-mode
	 * ports make no fd readable, so it wakes to look): sleep again
	 * until something comes or the time is up.
	 */
	deadline = timeout_ms < 0 ? UINT64_MAX
				  : now_ns() + (uint64_t)timeout_ms * 1000000u;
	for (;;) {
		uint64_t t = now_ns();
		int wait_ms = -1;

		if (deadline != UINT64_MAX) {
			if (t >= deadline)
				return 0;
			wait_ms = (int)((deadline - t + 999999u) / 1000000u);
		}
		pfd = (struct pollfd){ .fd = ctx->ops->fd(ctx),
				       .events = POLLIN };
		if (poll(&pfd, 1, wait_ms) < 0 && errno != EINTR)
			return -errno;
		if ((n = ctx->ops->poll(ctx, out, max)))
			return n;
	}
}

int kn__tp_cq_init(struct kn__tp_cq *q, uint32_t depth)
{
	uint32_t cap = 1;

	while (cap < depth)
		cap *= 2;
	q->ring = calloc(cap, sizeof(*q->ring));
	if (!q->ring)
		return -ENOMEM;
	q->cap = cap;
	q->head = q->tail = 0;
	return 0;
}

void kn__tp_cq_fini(struct kn__tp_cq *q)
{
	free(q->ring);
	q->ring = NULL;
}

void kn__tp_cq_push_grow(struct kn__tp_cq *q,
			 const struct kn__tp_completion *comp, const char *who)
{
	if (!kn__tp_cq_room(q)) {
		struct kn__tp_completion *n =
			malloc(2 * (size_t)q->cap * sizeof(*n));

		if (!n) {
			fprintf(stderr,
				"kanel: %s: out of memory, a "
				"completion is lost\n",
				who);
			return;
		}
		for (uint32_t i = 0; i < q->cap; i++)
			n[i] = q->ring[(q->head + i) & (q->cap - 1)];
		free(q->ring);
		q->ring = n;
		q->head = 0;
		q->tail = q->cap;
		q->cap *= 2;
	}
	kn__tp_cq_push(q, comp);
}
