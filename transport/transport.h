/* SPDX-License-Identifier: Apache-2.0 */
/*
 * transport.h - the transport layer: moving bytes between processes with
 * RDMA semantics, whatever the wire.
 *
 * The model is a reliable-connection RDMA NIC's.  A context owns
 * registered memory regions, endpoints (connected pairs) and one
 * completion queue.  A region has a local handle and a remote descriptor
 * of a few bytes that a peer names in one-sided operations.  Every
 * operation is a non-blocking post that completes through the completion
 * queue: write_imm (place a local range into a peer's region, then
 * deliver a 32-bit immediate to the peer), read (fetch a peer's range
 * into a local region), and small two-sided send/recv control messages.
 * A peer reaches only what was granted to its own endpoint
 * (kn__tp_ep_grant): an endpoint starts with nothing granted, and a
 * one-sided operation a peer aims at anything else fails that endpoint.
 * Connection set-up and teardown are completions too, so one progress
 * loop (poll, and sleep on the fd when idle) drives everything.
 *
 * Providers fill a const ops table: tcp (transport/tcp/), verbs
 * (transport/verbs/, RDMA RC queue pairs set up with rdma_cm) and dpdk
 * (transport/dpdk/, reliable UDP over a DPDK port, docs/dpdk.md).  Only
 * this layer includes socket, io_uring, verbs or DPDK headers; the
 * engine sees these types alone.
 *
 * Rules that hold for every provider:
 * - Posts never block.  Bad arguments return a negative errno at post
 *   time and post nothing; failures after posting come back as a
 *   completion with a negative status.
 * - The completions of one endpoint's write_imm, read and send posts are
 *   delivered in the order they were posted; recv completions are in the
 *   order messages arrived, each taking the oldest posted recv buffer.
 * - A posted buffer is borrowed by the transport until its completion has
 *   been polled: the caller must not free, reuse or (for a read or recv)
 *   look at it before then.
 * - After an error completion the endpoint is in the error state: every
 *   further post returns -ENOTCONN, and every operation still pending
 *   completes with -ECANCELED, until the caller closes the endpoint.
 * - A context belongs to one thread (its progress thread): the thread
 *   that first posts or polls on it (the tcp provider's io_uring ring is
 *   a single-issuer ring).  Different contexts are independent.
 */
#ifndef KN_TRANSPORT_H
#define KN_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct kn__tp_ctx;
struct kn__tp_mr;
struct kn__tp_ep;
struct kn__tp_listener;

/* What a peer may do to a region; local access is always allowed. */
#define KN_TP_REMOTE_WRITE (1u << 0)
#define KN_TP_REMOTE_READ  (1u << 1)

/*
 * A granted range as the peer names it.  Plain old data, 24 bytes, sent
 * to the peer in a control message: verbs puts the range's virtual
 * address and a memory window's rkey here, tcp a random grant key with a
 * base address of 0.  Offsets a peer names are relative to the range.
 */
struct kn__tp_rdesc {
	uint64_t addr;	 /* what offset 0 of the region is, to the provider */
	uint64_t len;	 /* bytes */
	uint32_t key;	 /* provider's key (rkey, region id) */
	uint32_t access; /* KN_TP_REMOTE_* granted */
};

enum kn__tp_op {
	KN_TP_OP_WRITE_IMM = 1, /* a posted write_imm finished */
	KN_TP_OP_READ,		/* a posted read finished: data is local */
	KN_TP_OP_SEND,		/* a posted send finished */
	KN_TP_OP_RECV,		/* a control message filled a posted recv */
	KN_TP_OP_RECV_IMM,	/* a peer's write_imm landed here */
	KN_TP_OP_CONNECT,	/* a connect finished (status says how) */
	KN_TP_OP_ACCEPT,	/* a peer connected to a listener */
	KN_TP_OP_DISCONNECT,	/* the endpoint is down (status: why) */
};

/*
 * One completion.  @user is the post's context pointer; for RECV_IMM,
 * ACCEPT, CONNECT and DISCONNECT it is the endpoint's (or for ACCEPT the
 * listener's) user pointer.  @ep is NULL only for operations flushed by
 * kn__tp_ep_close().
 */
struct kn__tp_completion {
	void *user;
	struct kn__tp_ep *ep;
	int status;	/* 0, or a negative errno */
	uint32_t op;	/* enum kn__tp_op */
	uint32_t imm;	/* RECV_IMM */
	uint64_t bytes; /* bytes moved: READ, RECV, RECV_IMM, WRITE_IMM */
};

/* Attributes of a context.  Unknown flag bits are refused. */
#define KN_TP_CTX_FORCE_EPOLL (1u << 0) /* tcp: never use io_uring */
/* tcp/io_uring: zero-copy sends also to loopback peers (for tests) */
#define KN_TP_CTX_ZC_LOOPBACK (1u << 1)
/*
 * tcp: an endpoint's grants get the keys 0x100001, 0x200002, ... in
 * order instead of random ones, so that a fuzzer's inputs can name them.
 * For tests only: a job never sets it (a peer could guess the keys; it
 * would still reach only its own endpoint's grants).
 */
#define KN_TP_CTX_TEST_KEYS (1u << 2)

struct kn__tp_ctx_attr {
	const char *provider;  /* "tcp", "verbs" or "dpdk" (NULL: tcp) */
	const char *device;    /* verbs: the RDMA device (NULL: the env var
				  KANEL_RDMA_DEVICE, else the first); dpdk:
				  must be NULL (the port comes from the
				  KANEL_DPDK_* variables) */
	uint32_t flags;	       /* KN_TP_CTX_* */
	uint32_t cq_depth;     /* completions held; 0: 4096 */
	uint32_t max_msg;      /* largest send/recv message; 0: 4096 */
	uint32_t zc_threshold; /* tcp/io_uring: zero-copy sends of payloads
				  from this size; 0: 64 KiB, UINT32_MAX: never */
	uint32_t busy_poll_us; /* kn__tp_poll_wait spins this long before
				  it sleeps; 0: 50 us, UINT32_MAX: never */
};

/* Create a context; 0 and the context in @ctx, or a negative errno. */
int kn__tp_ctx_create(const struct kn__tp_ctx_attr *attr,
		      struct kn__tp_ctx **ctx);

/* Close every endpoint and listener, free the context.  NULL-safe. */
void kn__tp_ctx_destroy(struct kn__tp_ctx *ctx);

/* Name of the provider and, where it has several, its I/O backend. */
const char *kn__tp_ctx_provider(const struct kn__tp_ctx *ctx);

/*
 * Register @len bytes at @addr with the remote rights @access
 * (KN_TP_REMOTE_*, the least each use needs).  The memory stays the
 * caller's; it must outlive the registration.
 */
int kn__tp_mr_reg(struct kn__tp_ctx *ctx, void *addr, size_t len,
		  uint32_t access, struct kn__tp_mr **mr);

/* The length and remote rights @mr was registered with. */
size_t kn__tp_mr_len(const struct kn__tp_mr *mr);
uint32_t kn__tp_mr_access(const struct kn__tp_mr *mr);

/* Deregister; no operation may still be using it.  NULL-safe. */
void kn__tp_mr_dereg(struct kn__tp_mr *mr);

/*
 * Listen on @addr (port 0 picks one; kn__tp_listener_addr tells which).
 * Each connection that arrives is an ACCEPT completion with the new
 * endpoint in ->ep and @user in ->user.
 */
int kn__tp_listen(struct kn__tp_ctx *ctx, const struct sockaddr *addr,
		  socklen_t addrlen, void *user,
		  struct kn__tp_listener **listener);

int kn__tp_listener_addr(const struct kn__tp_listener *listener,
			 struct sockaddr_storage *addr);

/* Stop listening and free the listener.  NULL-safe. */
void kn__tp_listener_close(struct kn__tp_listener *listener);

/*
 * Start connecting to @addr.  The endpoint comes back at once in @ep;
 * posts on it are accepted (and held) before the CONNECT completion,
 * which says whether the connection came up.
 */
int kn__tp_connect(struct kn__tp_ctx *ctx, const struct sockaddr *addr,
		   socklen_t addrlen, void *user, struct kn__tp_ep **ep);

/*
 * Take over @fd, a connected stream socket (from socketpair(), an
 * inherited descriptor, a test), as an open endpoint.  The endpoint owns
 * the descriptor from then on, also on failure.  Providers without
 * sockets return -EOPNOTSUPP.
 */
int kn__tp_adopt(struct kn__tp_ctx *ctx, int fd, void *user,
		 struct kn__tp_ep **ep);

/*
 * Let the peer of @ep reach @len bytes of @mr from @off with the rights
 * @access (not empty, and a subset of the region's), and fill @rdesc
 * with the descriptor it must name: send it in a control message.  Until
 * its first grant an endpoint accepts no one-sided operation at all; the
 * peer of one endpoint can never name what was granted to another (tcp:
 * grants are per endpoint, under random keys; verbs: a type-2 memory
 * window bound to the endpoint's queue pair).  A grant lasts until the
 * endpoint closes or the region is deregistered.  Grant only after the
 * peer has proven who it is.
 */
int kn__tp_ep_grant(struct kn__tp_ep *ep, struct kn__tp_mr *mr, uint64_t off,
		    uint64_t len, uint32_t access, struct kn__tp_rdesc *rdesc);

/* The peer's address (for logs and refusals): 0, or a negative errno. */
int kn__tp_ep_peer(const struct kn__tp_ep *ep, struct sockaddr_storage *addr);

void kn__tp_ep_set_user(struct kn__tp_ep *ep, void *user);
void *kn__tp_ep_user(const struct kn__tp_ep *ep);

/*
 * Close @ep and free it.  Operations still pending complete with
 * -ECANCELED and ->ep NULL.  The peer sees a DISCONNECT.  NULL-safe.
 */
void kn__tp_ep_close(struct kn__tp_ep *ep);

/*
 * Write @len bytes at @off of @mr into the peer's region @dst at
 * @dst_off, then deliver @imm to the peer as a RECV_IMM completion; the
 * peer sees the immediate only once the data is in place.  @mr's range
 * is borrowed until this post's WRITE_IMM completion is polled.
 * -EINVAL for a range outside @mr or a destination outside @dst or
 * without remote write, -ENOTCONN once the endpoint failed.
 */
int kn__tp_post_write_imm(struct kn__tp_ep *ep, struct kn__tp_mr *mr,
			  size_t off, size_t len,
			  const struct kn__tp_rdesc *dst, uint64_t dst_off,
			  uint32_t imm, void *user);

/*
 * Read @len bytes at @src_off of the peer's region @src into @mr at
 * @off.  @mr's range is borrowed (and undefined) until the READ
 * completion is polled.  Errors as kn__tp_post_write_imm (remote read
 * instead of write).
 */
int kn__tp_post_read(struct kn__tp_ep *ep, struct kn__tp_mr *mr, size_t off,
		     size_t len, const struct kn__tp_rdesc *src,
		     uint64_t src_off, void *user);

/*
 * Send a control message of @len bytes (at most the context's max_msg)
 * from @mr at @off; it fills the oldest recv buffer the peer posted.
 * The range is borrowed until the SEND completion is polled.
 */
int kn__tp_post_send(struct kn__tp_ep *ep, struct kn__tp_mr *mr, size_t off,
		     size_t len, void *user);

/*
 * Offer @len bytes of @mr at @off for the next control message from the
 * peer.  A message larger than the buffer fails the endpoint.  The range
 * is borrowed until its RECV completion is polled.
 */
int kn__tp_post_recv(struct kn__tp_ep *ep, struct kn__tp_mr *mr, size_t off,
		     size_t len, void *user);

/*
 * Make progress and return up to @max completions in @out (0 when there
 * is nothing to report), never blocking; a negative errno only for a
 * failure of the context itself.
 */
int kn__tp_poll(struct kn__tp_ctx *ctx, struct kn__tp_completion *out, int max);

/*
 * An fd that becomes readable when kn__tp_poll() may have work: sleep on
 * it (poll/epoll) after kn__tp_poll() returned 0.
 */
int kn__tp_fd(const struct kn__tp_ctx *ctx);

/*
 * The progress loop's step: poll; when idle, keep polling for the
 * context's busy-poll budget (the lowest latency), then sleep on the fd,
 * polling each time it wakes, until a completion comes or @timeout_ms
 * has passed (-1: no limit).  Returns as kn__tp_poll, 0 when the time
 * ran out.
 */
int kn__tp_poll_wait(struct kn__tp_ctx *ctx, struct kn__tp_completion *out,
		     int max, int timeout_ms);

#endif /* KN_TRANSPORT_H */
