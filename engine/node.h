/* SPDX-License-Identifier: Apache-2.0 */
/*
 * node.h - what every Kanel process is: one transport context, driven by
 * one thread, with authenticated control channels to its peers.
 *
 * A channel is a transport endpoint with a few registered message
 * buffers.  It starts with the job-secret handshake (engine/auth.h):
 * the accepting side challenges, the connecting side answers with its
 * role and rank, the accepting side confirms.  Only then does the role
 * hear of it (on_open), so an unauthenticated peer never sees a message,
 * a slot or a remote key.  Every message is decoded with bounds checks;
 * a malformed one closes that channel, with a logged reason, and nothing
 * else.
 */
#ifndef KN_ENGINE_NODE_H
#define KN_ENGINE_NODE_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "auth.h"
#include "engine.h"

#define KN__SECRET_MAX KN_AUTH_SECRET_MAX

struct kn__node;
struct kn__chan;

/* What a role does with its channels; every member may be NULL. */
struct kn__node_ops {
	void (*open)(struct kn__node *n, struct kn__chan *ch);
	void (*message)(struct kn__node *n, struct kn__chan *ch,
			const struct kn__msg *m);
	/* the channel is gone (status: why); it is freed after this */
	void (*closed)(struct kn__node *n, struct kn__chan *ch, int status);
	void (*imm)(struct kn__node *n, struct kn__chan *ch, uint32_t imm,
		    uint64_t bytes);
	/* a write the role posted (kn__chan_write) has completed: @user
	 * is its context */
	void (*written)(struct kn__node *n, void *user, int status);
};

struct kn__node {
	struct kn__tp_ctx *ctx;
	struct kn__tp_listener *listener;
	const struct kn__node_ops *ops;
	void *role;
	uint32_t self_role, self_rank; /* enum kn__role */
	uint8_t secret[KN__SECRET_MAX];
	size_t secret_len;
	struct kn__chan *chans;
	const char *name; /* "coordinator", "server 1", "worker 3" */
	/* until then a refused connect is tried again (peers start in any
	 * order) */
	double retry_until;
	char name_buf[32];
	bool verbose;
	uint32_t pending; /* accepted connections in the handshake */
	/* refusal log lines: this window's start, lines, those unlogged */
	double refuse_window;
	uint32_t refuse_lines, refuse_quiet;
	/*
	 * Another thread's news (the worker's application posting an
	 * operation): kn__node_wait's busy-poll ends as soon as *news is
	 * set, and it sleeps only after it said so in sleeping and saw no
	 * news; that thread writes the wake fd only if sleeping is set.
	 */
	atomic_uint *news;
	atomic_bool sleeping;
};

struct kn__chan {
	struct kn__node *node;
	struct kn__tp_ep *ep;
	struct kn__tp_mr *mr;
	uint8_t *buf; /* the message buffers */
	struct kn__chan_post *posts;
	uint32_t *free_sends;
	uint32_t nfree, outstanding;
	int state;
	bool acceptor, closed;
	bool pending;	 /* an acceptor in the handshake, counted */
	double deadline; /* when its handshake runs out */
	bool linger;	 /* an ERROR was sent: closing waits for it to leave */
	uint32_t peer_role, peer_rank;
	struct kn__auth_challenge challenge; /* the handshake's state */
	struct kn__auth_answer answer;
	void *user;	       /* the role's */
	struct kn__chan *next; /* the node's list */
	char name[64];	       /* "worker 3" once known, the address before */
	struct sockaddr_storage addr; /* a connector's peer */
	socklen_t addrlen;
	double retry_at; /* 0, or when to connect again */
	/* the contexts of the writes in flight, oldest first */
	void **wq;
	uint32_t wq_head, wq_tail, wq_cap;
	/* the pending queue: posts waiting for room, oldest first */
	struct kn__chan_pend *pq;
	uint32_t pq_head, pq_tail, pq_cap;
};

int kn__node_init(struct kn__node *n, const char *transport, uint32_t self_role,
		  uint32_t self_rank, const uint8_t *secret, size_t secret_len,
		  const struct kn__node_ops *ops, void *role);
void kn__node_fini(struct kn__node *n);

int kn__node_listen(struct kn__node *n, const struct sockaddr *addr,
		    socklen_t len);
/* Connect to the @peer_role @peer_rank at @addr; the role hears of it in
 * open() once the handshake is done, or in closed(). */
int kn__node_connect(struct kn__node *n, const struct sockaddr *addr,
		     socklen_t len, uint32_t peer_role, uint32_t peer_rank,
		     void *user, struct kn__chan **ch);

/*
 * One step of the progress loop: poll, busy-poll 50 us when idle, then
 * sleep up to @timeout_ms on the transport's fd and @extra_fd (-1: none;
 * the worker's wake-up from the application's thread); dispatch what
 * came.  The number of completions, or a negative errno.
 */
int kn__node_step(struct kn__node *n, int timeout_ms, int extra_fd);

/* kn__node_step in two halves, for a caller that must hold a lock while
 * the role runs but not while the thread sleeps. */
int kn__node_wait(struct kn__node *n, int timeout_ms, int extra_fd,
		  struct kn__tp_completion *c, int max);
void kn__node_dispatch(struct kn__node *n, const struct kn__tp_completion *c,
		       int count);

/*
 * One pending queue per channel, drained by completions (as UCX's
 * uct_ep_pending_add): a post the transport has no room for (-EAGAIN),
 * or a message with no free send buffer, waits on the channel's queue
 * and is posted from the completions of the channel's own posts, which
 * make the room, in the order posted; anything posted while others wait
 * goes behind them.  So a role just posts, and never sees -EAGAIN.
 */

/* Send @m on @ch (copied: the caller's message is free at return). */
int kn__chan_send(struct kn__chan *ch, const struct kn__msg *m);
/*
 * Write @len bytes at @off of @mr into the peer's region @dst at
 * @dst_off, then deliver @imm to the peer (kn__tp_post_write_imm), now
 * or once there is room.  The role's written() gets @user and the
 * status once it completes; a write still waiting when the channel
 * closes completes with -ECANCELED, from the progress loop.  @mr's
 * range is borrowed until then; @dst is copied.  0, or a negative errno
 * (-ENOTCONN: the channel is closed or failed; -EINVAL; -ENOMEM).
 */
int kn__chan_write(struct kn__chan *ch, struct kn__tp_mr *mr, size_t off,
		   size_t len, const struct kn__tp_rdesc *dst, uint64_t dst_off,
		   uint32_t imm, void *user);
/* An ERROR message with a text, and a log line. */
void kn__chan_send_error(struct kn__chan *ch, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Past the handshake and not closed. */
bool kn__chan_open(const struct kn__chan *ch);
/* Close @ch: the role's closed() runs now (status 0). */
void kn__chan_close(struct kn__chan *ch);

/*
 * One log line "kanel: <name>: <message>", written whole by one write,
 * with every byte outside printable ASCII (and the backslash) escaped.
 */
void kn__log(const struct kn__node *n, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* The same line under @name, for a role with no node yet. */
void kn__log_as(const char *name, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/*
 * Copy @in to @out (@size bytes, NUL-terminated) with every byte outside
 * printable ASCII as \xNN and a backslash as two; the length written.
 */
size_t kn__escape(const char *in, char *out, size_t size);

/* Seconds on CLOCK_MONOTONIC. */
double kn__now(void);

#endif /* KN_ENGINE_NODE_H */
