/* SPDX-License-Identifier: Apache-2.0 */
/*
 * verbs_priv.h - what the files of the RDMA provider share: its objects,
 * its constants, the small helpers every file inlines, and the functions
 * that cross files.  The provider: reliable-connection queue pairs set
 * up with rdma_cm, zero-copy both ways.
 *
 * One context is one protection domain on one device, one completion
 * queue with its completion channel, one shared receive queue, and an
 * rdma_cm event channel; an endpoint is one RC queue pair.
 *
 * Sending.  Each endpoint keeps its posts in a ring: [head, issue) are
 * given to the QP, [issue, tail) wait for send-queue credits (or for the
 * connection).  An operation becomes one or more work requests (WRs):
 * write_imm is unsignaled RDMA WRITEs of at most the port's max message
 * size and one RDMA_WRITE_WITH_IMM; read is RDMA READs; send is one SEND,
 * inline when it fits.  WRs carry a per-endpoint sequence number; only
 * every 64th and the last of each batch are signaled, and a signaled
 * completion retires every WR up to it (a QP's send queue completes in
 * order), so an operation completes once its last WR is retired.  A
 * write_imm split in pieces also writes its total length into a mailbox
 * slot of the peer (an "inbox" registered by each context), which the
 * peer reads when the immediate arrives.
 *
 * Access.  A peer reaches only what was granted to its own endpoint.
 * Where the device has type-2 memory windows (every current NIC, and
 * rxe), no registration has remote rights of its own: a grant binds a
 * memory window over the granted range to the endpoint's queue pair (a
 * BIND_MW work request on it), so the rkey the peer gets works on that
 * queue pair alone, and its low byte is random.  The endpoint's mailbox
 * slice is granted the same way when the connection comes up, and its
 * address and rkey reach the peer in an internal SEND_WITH_IMM (INFO)
 * instead of the connection's private data: before the connection is up
 * nothing at all is open to the peer.  Without type-2 windows a grant is
 * a registration of its own range, whose rkey works on any queue pair of
 * the context: said once in the log when the context is created.
 *
 * Receiving.  The shared receive queue holds bounce buffers of max_msg
 * bytes.  A write-with-immediate consumes one and leaves it untouched; a
 * SEND lands in it and is copied into the oldest recv the application
 * posted on that endpoint, or waits for one.  Control messages are small
 * (max_msg, 4 KiB by default), so the copy is cheap, and recv buffers
 * need not be registered with the peer's order in mind.
 *
 * Failure.  An error completion, a disconnect or a fatal async event
 * moves the endpoint to the error state: the QP goes to the error state,
 * its WRs are flushed, and only when every issued WR is back do the
 * pending operations complete (the hardware may use their buffers until
 * then); DISCONNECT comes last.  kn__tp_ep_close() does the same, without
 * the endpoint (zombies wait in their slot until their flush is done).
 * A completion's wr_id names the endpoint by slot and generation, so a
 * completion of a closed endpoint is recognised and dropped.
 *
 * Files, each calling only those after it: ctx.c (the context: device,
 * queues, buffers, the poll loop and the ops table) -> conn.c
 * (endpoints, their queue pairs and handshake, rdma_cm and async
 * events, listeners) -> mr.c (registrations, RLIMIT_MEMLOCK accounting,
 * grants) -> datapath.c (posts, work requests, completions and their
 * release).  Two things datapath.c needs are conn.c's, and it reaches
 * them through hooks ctx.c sets in the context, so that no file calls
 * one above it: a zombie endpoint whose flush is done is freed
 * (c->ep_free), and data that beats the ESTABLISHED event establishes
 * the connection (c->ep_established).  Both are cold.  The hot path (post, issue, poll the CQ,
 * release) lives in datapath.c, so that its helpers inline there.
 */
#ifndef KN_TRANSPORT_VERBS_PRIV_H
#define KN_TRANSPORT_VERBS_PRIV_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "list.h"
#include "transport_priv.h"

#define MAX_EPS	    1024 /* endpoints (and zombies) per context */
#define OP_DEPTH    1024 /* posted operations per endpoint */
#define RV_DEPTH    1024 /* posted recv buffers per endpoint */
#define SQ_DEPTH    128	 /* WRs in flight per QP */
#define SIGNAL_EACH 64	 /* signal at least every this many WRs */
#define SRQ_DEPTH   1024 /* bounce buffers on the shared receive queue */
#define BATCH	    32	 /* WRs per ibv_post_send, CQEs per ibv_poll_cq */
#define ACK_EACH    32	 /* CQ events acknowledged in batches */
#define INLINE_WANT 128	 /* inline data asked for at QP creation */
#define MAILBOX	    64	 /* length records per endpoint */
#define RD_ATOMIC   16	 /* RDMA READs in flight per QP, at most */
#define RESOLVE_MS  2000 /* address and route resolution */
#define CONNECT_S   20	 /* a connection comes up in this or fails */

#define HELLO_MAGIC   0x4b4e5642u /* "KNVB" */
#define HELLO_VERSION 2
#define INFO_IMM      0x4b4e4946u /* "KNIF": the internal INFO message */

/* Internal operations: they complete without a completion of their own. */
enum { VOP_BIND = 0x100, VOP_INFO };

/* wr_id: bit 63 recv (bounce index below), else slot | gen | seq. */
#define WR_RECV	    (1ull << 63)
#define WR_SEQ_BITS 40
#define WR_SEQ_MASK ((1ull << WR_SEQ_BITS) - 1)
#define WR_GEN_MASK 0xffu

enum ep_state {
	EP_RESOLVING, /* active: address, route, connect */
	EP_ACCEPTING, /* passive: accepted, not yet established */
	EP_OPEN,
	EP_ERROR, /* failed: flushing, then reporting */
};

struct vop {
	uint32_t kind; /* KN_TP_OP_* */
	uint32_t imm;
	int status;
	bool mailbox_sent; /* a split write_imm's length record */
	char *laddr;
	uint32_t lkey;
	uint32_t rkey;
	uint64_t raddr;
	uint64_t len;
	uint64_t issued;   /* bytes given to WRs so far */
	uint64_t last_seq; /* the WR whose retirement completes it */
	uint64_t msg_no;   /* write_imm: which message of the endpoint */
	void *user;
	struct ibv_mw *mw; /* VOP_BIND: the window, over bind_mr */
	struct ibv_mr *bind_mr;
	uint32_t mw_access;
};

/* The INFO message: where this endpoint's mailbox is, to the peer. */
struct info {
	uint64_t inbox_addr;
	uint32_t inbox_rkey;
	uint32_t pad;
};

/* What an endpoint granted: freed with the endpoint or the region. */
struct vgrant {
	struct vgrant *next;
	struct vep *ep;
	struct reg *reg;   /* NULL: the mailbox's */
	struct ibv_mw *mw; /* type-2 windows */
	struct ibv_mr *mr; /* a registration of just the range, if any */
};

struct vrecv {
	char *addr;
	uint64_t len;
	void *user;
};

/* One length record in a peer's inbox. */
struct mailrec {
	uint64_t tag; /* message number + 1; 0: never written */
	uint64_t len;
};

/* The private data of connect and accept (at most 56 bytes). */
struct hello {
	uint32_t magic;
	uint16_t version;
	uint16_t reserved;
	uint32_t max_msg; /* largest control message the sender accepts */
	uint32_t inbox_rkey;
	uint64_t inbox_addr; /* this endpoint's MAILBOX records */
	int32_t reject;	     /* in a rejection: why, a positive errno */
	uint32_t pad;
};

struct vctx;

/* What an rdma_cm id's context points at: an endpoint or a listener. */
struct owner {
	bool is_listener;
};

struct held {
	uint32_t idx; /* bounce buffer */
	uint32_t len; /* bytes of the message in it */
};

struct vep {
	struct kn__tp_ep base;
	struct owner owner;
	struct rdma_cm_id *id;
	struct kn__tp_listener *listener; /* passive, until ACCEPT */
	enum ep_state state;
	uint32_t slot, gen;
	bool zombie;	     /* closed by the application, flushing */
	bool queued;	     /* on the context's release list */
	bool report_connect; /* a failed CONNECT owed */
	bool report_disc;    /* DISCONNECT owed */
	int error;
	double deadline; /* EP_RESOLVING: fail after this */
	uint32_t peer_max_msg;
	uint32_t peer_inbox_rkey;
	uint64_t peer_inbox_addr;
	bool peer_inbox_ok; /* known: split writes may go */
	bool info_sent;
	uint64_t tx_msgs, rx_msgs; /* write_imm messages each way */
	uint32_t max_inline;
	uint64_t next_seq; /* the next WR's sequence number (from 1) */
	uint64_t acked;	   /* every WR up to this one is retired */
	uint32_t op_head, op_issue, op_tail;
	struct vop ops[OP_DEPTH];
	uint32_t rv_head, rv_tail;
	struct vrecv recvs[RV_DEPTH];
	uint32_t held_head, held_tail; /* messages waiting for a recv */
	struct held held[SRQ_DEPTH];
	struct vep *next_ready;
	char peer[64];
};

struct vlistener {
	struct kn__tp_listener base;
	struct owner owner;
	struct rdma_cm_id *id;
	struct vlistener *next;
};

/* A registration, shared by every kn__tp_mr that maps to it. */
struct reg {
	struct ibv_mr *mr; /* NULL for an empty range */
	char *addr;
	size_t len;
	uint32_t access;
	unsigned int refs;
	struct reg *next;
};

struct vmr {
	struct kn__tp_mr base;
	struct reg *reg;
	struct kn__list link; /* on the context's */
};

/*
 * Port and device failures concern every context on the device, but the
 * device's async event fd is one per process (rdma_cm opens each device
 * once), so only the context that reads an event sees it: it bumps the
 * device's alarm, and every context fails its endpoints when it finds
 * the alarm moved.
 */
struct dev_alarm {
	struct ibv_context *verbs;
	_Atomic unsigned int gen;
};

struct vctx {
	struct kn__tp_ctx base;
	/* conn.c's, for datapath.c (set by ctx.c): kn__verbs_ep_free and
	 * kn__verbs_ep_established */
	void (*ep_free)(struct vep *ep);
	void (*ep_established)(struct vep *ep);
	char name[32];
	struct ibv_context **devices; /* rdma_cm's, held while we live */
	struct ibv_context *verbs;
	struct dev_alarm *alarm; /* NULL: more devices than MAX_DEVICES */
	unsigned int alarm_seen;
	struct ibv_pd *pd;
	struct ibv_comp_channel *chan;
	struct ibv_cq *cq;
	int cq_size;
	struct ibv_srq *srq;
	struct rdma_event_channel *cm;
	int epfd, evfd;
	bool armed;
	unsigned int unacked;
	uint32_t port_max_msg;
	uint32_t rd_atomic, rd_init;
	int max_cqe;
	/* bounce buffers */
	char *bounce;
	struct ibv_mr *bounce_mr;
	/* mailboxes: inbox (peers write), outbox (our records' source) */
	struct mailrec *inbox, *outbox;
	struct ibv_mr *inbox_mr, *outbox_mr;
	struct info *infos; /* per endpoint slot, INFO's source */
	struct ibv_mr *infos_mr;
	bool mw2; /* type-2 memory windows: grants bind them */
	struct vgrant *grants;
	/* endpoints by slot, with generations; qp_num -> slot hash */
	struct vep *slots[MAX_EPS];
	uint8_t gens[MAX_EPS];
	uint32_t nqps;
	uint32_t qpn_key[2 * MAX_EPS];
	int32_t qpn_slot[2 * MAX_EPS]; /* -1: empty */
	struct vep *ready;	       /* endpoints with something to report */
	bool in_poll;
	struct vlistener *listeners;
	unsigned int resolving;
	struct reg *regs;
	struct kn__list mrs;
	struct kn__tp_cq cq_ring; /* completions waiting for kn__tp_poll */
};

/* ---- what every file inlines: downcasts, logs, the qp_num hash ---- */

static inline struct vctx *vctx_of(struct kn__tp_ctx *c)
{
	return (struct vctx *)c;
}

static inline struct vep *vep_of(struct kn__tp_ep *e)
{
	return (struct vep *)e;
}

static inline struct vctx *ep_ctx(const struct vep *ep)
{
	return (struct vctx *)ep->base.ctx;
}

/* "kanel: verbs: ..." lines, and those naming the peer of @ep */
static inline void vlog(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));

static inline void vlog(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	kn__tp_vlog("verbs", fmt, ap);
	va_end(ap);
}

static inline void ep_log(const struct vep *ep, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static inline void ep_log(const struct vep *ep, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	kn__tp_peer_vlog("verbs", ep->peer, fmt, ap);
	va_end(ap);
}

/* ---- qp_num -> slot (linear probing, backward-shift deletion) ---- */

#define QPN_MASK (2 * MAX_EPS - 1)

static inline uint32_t qpn_hash(uint32_t qpn)
{
	return (qpn * 2654435761u) & QPN_MASK;
}

static inline void qpn_add(struct vctx *c, uint32_t qpn, uint32_t slot)
{
	uint32_t i = qpn_hash(qpn);

	while (c->qpn_slot[i] >= 0)
		i = (i + 1) & QPN_MASK;
	c->qpn_key[i] = qpn;
	c->qpn_slot[i] = (int32_t)slot;
}

static inline struct vep *qpn_find(struct vctx *c, uint32_t qpn)
{
	for (uint32_t i = qpn_hash(qpn); c->qpn_slot[i] >= 0;
	     i = (i + 1) & QPN_MASK)
		if (c->qpn_key[i] == qpn)
			return c->slots[c->qpn_slot[i]];
	return NULL;
}

static inline void qpn_del(struct vctx *c, uint32_t qpn)
{
	uint32_t i = qpn_hash(qpn), j;

	while (c->qpn_slot[i] >= 0 && c->qpn_key[i] != qpn)
		i = (i + 1) & QPN_MASK;
	if (c->qpn_slot[i] < 0)
		return;
	/* move later entries of the run back over the hole */
	for (j = (i + 1) & QPN_MASK; c->qpn_slot[j] >= 0;
	     j = (j + 1) & QPN_MASK) {
		uint32_t h = qpn_hash(c->qpn_key[j]);

		if (((j - h) & QPN_MASK) >= ((j - i) & QPN_MASK)) {
			c->qpn_key[i] = c->qpn_key[j];
			c->qpn_slot[i] = c->qpn_slot[j];
			i = j;
		}
	}
	c->qpn_slot[i] = -1;
}

/* ---- datapath.c: posts, work requests, completions, release ---- */

void kn__verbs_kick(struct vctx *c);
void kn__verbs_ep_fail(struct vep *ep, int err, const char *why, ...)
	__attribute__((format(printf, 3, 4)));
void kn__verbs_ep_release(struct vep *ep);
void kn__verbs_bounce_repost(struct vctx *c, uint32_t idx);
void kn__verbs_ep_issue(struct vep *ep);
void kn__verbs_drain_cq(struct vctx *c);
/* Every endpoint on the ready list through kn__verbs_ep_release. */
void kn__verbs_release_ready(struct vctx *c);
/* The next free operation of @ep, zeroed, or NULL with *@err set. */
struct vop *kn__verbs_op_new(struct vep *ep, uint32_t kind, int *err);
/* Queue @op (from kn__verbs_op_new) and issue what the QP takes: 0. */
int kn__verbs_op_post(struct vep *ep, struct vop *op, void *user);
/* the posts of the ops table: @mr's buffer is borrowed until the
 * operation's completion is reaped */
int kn__verbs_post_write_imm(struct kn__tp_ep *e, struct kn__tp_mr *mr,
			     size_t off, size_t len,
			     const struct kn__tp_rdesc *dst, uint64_t dst_off,
			     uint32_t imm, void *user);
int kn__verbs_post_read(struct kn__tp_ep *e, struct kn__tp_mr *mr, size_t off,
			size_t len, const struct kn__tp_rdesc *src,
			uint64_t src_off, void *user);
int kn__verbs_post_send(struct kn__tp_ep *e, struct kn__tp_mr *mr, size_t off,
			size_t len, void *user);
int kn__verbs_post_recv(struct kn__tp_ep *e, struct kn__tp_mr *mr, size_t off,
			size_t len, void *user);

/* ---- mr.c: registrations and grants ---- */

int kn__verbs_memlock_check(size_t len);
void kn__verbs_memlock_warn_once(void);
/* ibv_reg_mr, counted in the bytes this process has pinned */
struct ibv_mr *kn__verbs_reg_private(struct vctx *c, void *p, size_t len,
				     int access);
/* NULL-safe */
void kn__verbs_dereg_private(struct ibv_mr *mr);
void kn__verbs_grants_drop(struct vctx *c, const struct vep *ep,
			   const struct reg *reg);
int kn__verbs_grant_new(struct vep *ep, struct reg *reg, struct ibv_mr *mr,
			char *addr, uint64_t len, int access, uint32_t *rkey);
/* the regions of the ops table */
int kn__verbs_mr_reg(struct kn__tp_ctx *ctx, void *addr, size_t len,
		     uint32_t access, struct kn__tp_mr **out);
void kn__verbs_mr_dereg(struct kn__tp_mr *mr);
int kn__verbs_ep_grant(struct kn__tp_ep *e, struct kn__tp_mr *mr, uint64_t off,
		       uint64_t len, uint32_t access,
		       struct kn__tp_rdesc *rdesc);

/* ---- conn.c: endpoints, connections and their events ---- */

/* Free @ep, its queue pair, grants and rdma_cm id. */
void kn__verbs_ep_free(struct vep *ep);
void kn__verbs_ep_established(struct vep *ep);
/* the events a poll takes in before the completion queue's */
void kn__verbs_drain_cm(struct vctx *c);
void kn__verbs_drain_async(struct vctx *c);
void kn__verbs_check_alarm(struct vctx *c);
/* Fail the connects that are past their deadline. */
void kn__verbs_check_deadlines(struct vctx *c);
/* the endpoints and listeners of the ops table */
int kn__verbs_ep_peer(const struct kn__tp_ep *e, struct sockaddr_storage *ss);
int kn__verbs_listen(struct kn__tp_ctx *ctx, const struct sockaddr *addr,
		     socklen_t addrlen, void *user,
		     struct kn__tp_listener **out);
int kn__verbs_listener_addr(const struct kn__tp_listener *listener,
			    struct sockaddr_storage *addr);
void kn__verbs_listener_close(struct kn__tp_listener *listener);
int kn__verbs_connect(struct kn__tp_ctx *ctx, const struct sockaddr *addr,
		      socklen_t addrlen, void *user, struct kn__tp_ep **out);
void kn__verbs_ep_close(struct kn__tp_ep *e);

#endif /* KN_TRANSPORT_VERBS_PRIV_H */
