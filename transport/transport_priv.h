/* SPDX-License-Identifier: Apache-2.0 */
/*
 * transport_priv.h - what providers share with the generic layer: the
 * ops table and the common head of every object.  Each provider's own
 * structs begin with these heads, so the generic layer can check
 * arguments once and dispatch through ctx->ops.
 */
#ifndef KN_TRANSPORT_PRIV_H
#define KN_TRANSPORT_PRIV_H

#include <stdarg.h>
#include <stddef.h>

#include "transport.h"

struct kn__tp_ops {
	const char *name;
	/* the largest post (write_imm, read, send) its wire can carry */
	uint64_t max_len;
	int (*ctx_create)(const struct kn__tp_ctx_attr *attr,
			  struct kn__tp_ctx **ctx);
	void (*ctx_destroy)(struct kn__tp_ctx *ctx);
	int (*mr_reg)(struct kn__tp_ctx *ctx, void *addr, size_t len,
		      uint32_t access, struct kn__tp_mr **mr);
	void (*mr_dereg)(struct kn__tp_mr *mr);
	int (*listen)(struct kn__tp_ctx *ctx, const struct sockaddr *addr,
		      socklen_t addrlen, void *user,
		      struct kn__tp_listener **listener);
	int (*listener_addr)(const struct kn__tp_listener *listener,
			     struct sockaddr_storage *addr);
	void (*listener_close)(struct kn__tp_listener *listener);
	int (*connect)(struct kn__tp_ctx *ctx, const struct sockaddr *addr,
		       socklen_t addrlen, void *user, struct kn__tp_ep **ep);
	int (*adopt)(struct kn__tp_ctx *ctx, int fd, void *user,
		     struct kn__tp_ep **ep);
	void (*ep_close)(struct kn__tp_ep *ep);
	/* arguments checked: the range lies in @mr, @access is a subset */
	int (*ep_grant)(struct kn__tp_ep *ep, struct kn__tp_mr *mr,
			uint64_t off, uint64_t len, uint32_t access,
			struct kn__tp_rdesc *rdesc);
	int (*ep_peer)(const struct kn__tp_ep *ep,
		       struct sockaddr_storage *addr);
	/* posts: arguments already checked against mr and rdesc bounds */
	int (*post_write_imm)(struct kn__tp_ep *ep, struct kn__tp_mr *mr,
			      size_t off, size_t len,
			      const struct kn__tp_rdesc *dst, uint64_t dst_off,
			      uint32_t imm, void *user);
	int (*post_read)(struct kn__tp_ep *ep, struct kn__tp_mr *mr, size_t off,
			 size_t len, const struct kn__tp_rdesc *src,
			 uint64_t src_off, void *user);
	int (*post_send)(struct kn__tp_ep *ep, struct kn__tp_mr *mr, size_t off,
			 size_t len, void *user);
	int (*post_recv)(struct kn__tp_ep *ep, struct kn__tp_mr *mr, size_t off,
			 size_t len, void *user);
	int (*poll)(struct kn__tp_ctx *ctx, struct kn__tp_completion *out,
		    int max);
	int (*fd)(const struct kn__tp_ctx *ctx);
};

struct kn__tp_ctx {
	const struct kn__tp_ops *ops;
	const char *name; /* provider, with its backend where it has one */
	uint32_t max_msg;
	uint32_t busy_poll_us; /* set by the generic layer */
};

struct kn__tp_mr {
	struct kn__tp_ctx *ctx;
	char *addr;
	size_t len;
	uint32_t access;
};

struct kn__tp_ep {
	struct kn__tp_ctx *ctx;
	void *user;
};

struct kn__tp_listener {
	struct kn__tp_ctx *ctx;
	void *user;
};

/*
 * The completions a provider holds until kn__tp_poll hands them out: a
 * ring of a power-of-two capacity with free-running indices.
 */
struct kn__tp_cq {
	struct kn__tp_completion *ring;
	uint32_t cap, head, tail;
};

/* A ring of at least @depth entries: 0 or -ENOMEM. */
int kn__tp_cq_init(struct kn__tp_cq *q, uint32_t depth);
void kn__tp_cq_fini(struct kn__tp_cq *q);

static inline uint32_t kn__tp_cq_room(const struct kn__tp_cq *q)
{
	return q->cap - (q->tail - q->head);
}

/* Queue @comp if there is room; false if not. */
static inline bool kn__tp_cq_push(struct kn__tp_cq *q,
				  const struct kn__tp_completion *comp)
{
	if (!kn__tp_cq_room(q))
		return false;
	q->ring[q->tail++ & (q->cap - 1)] = *comp;
	return true;
}

/*
 * Queue @comp however full the ring is, growing it: for what must be
 * reported regardless (cancellations, connection events; a cold path).
 * @who names the provider in the message if memory runs out.
 */
void kn__tp_cq_push_grow(struct kn__tp_cq *q,
			 const struct kn__tp_completion *comp, const char *who);

/* Move up to @max completions into @out; how many. */
static inline int kn__tp_cq_take(struct kn__tp_cq *q,
				 struct kn__tp_completion *out, int max)
{
	int n = 0;

	while (n < max && q->head != q->tail)
		out[n++] = q->ring[q->head++ & (q->cap - 1)];
	return n;
}

/* The object of type @type whose member @member is at @p (DPDK's
 * rte_common.h has the same, under the same guard). */
#ifndef container_of
#define container_of(p, type, member) \
	((type *)(void *)((char *)(p)-offsetof(type, member)))
#endif

/* "host:port" of @sa (NULL-safe), for logs. */
void kn__tp_addr_name(const struct sockaddr *sa, char *buf, size_t size);

/*
 * One log line about an endpoint: "kanel: @provider: peer @peer: <fmt>"
 * (kn__tp_vlog); each provider's ep_log() passes its names through.
 */
void kn__tp_peer_vlog(const char *provider, const char *peer, const char *fmt,
		      va_list ap) __attribute__((format(printf, 3, 0)));

/*
 * Log that an endpoint failed with @err because of @why: "kanel:
 * @provider: peer @peer: <why> (<err>); endpoint closed".  Not for a
 * peer that hung up or was not there (-ECONNRESET, -ECONNREFUSED: the
 * DISCONNECT or CONNECT completion says so), nor past the rate of
 * kn__tp_fail_log_ok().
 */
void kn__tp_fail_vlog(const char *provider, const char *peer, int err,
		      const char *why, va_list ap)
	__attribute__((format(printf, 4, 0)));

/*
 * A non-blocking TCP socket (close-on-exec) bound to @addr and listening
 * with @backlog: its fd, or a negative errno.
 */
int kn__tp_listen_fd(const struct sockaddr *addr, socklen_t addrlen,
		     int backlog);

/*
 * A non-blocking TCP socket (close-on-exec) connecting to @addr: its fd
 * (the connection comes up, or fails, later), or a negative errno.
 */
int kn__tp_connect_fd(const struct sockaddr *addr, socklen_t addrlen);

/* Fill @buf with @len bytes from the kernel's CSPRNG: 0 or -errno. */
int kn__tp_random(void *buf, size_t len);

/*
 * One log line "kanel: @prefix: <fmt>" to stderr, written whole by one
 * write(2) so that lines of processes sharing the stream never splice.
 */
void kn__tp_vlog(const char *prefix, const char *fmt, va_list ap)
	__attribute__((format(printf, 2, 0)));

/*
 * Whether an endpoint's failure may be logged now: at most
 * KN_TP_FAIL_LOGS_PER_S lines a second in a process, so that a flood of
 * bad peers cannot flood the log; the lines held back are counted, and
 * the count is logged when the next second starts.
 */
#define KN_TP_FAIL_LOGS_PER_S 10
bool kn__tp_fail_log_ok(void);

extern const struct kn__tp_ops kn__tp_tcp_ops;
#ifdef KN_HAVE_VERBS
extern const struct kn__tp_ops kn__tp_verbs_ops;
#endif
#ifdef KN_HAVE_DPDK
extern const struct kn__tp_ops kn__tp_dpdk_ops;
#endif

#endif /* KN_TRANSPORT_PRIV_H */
