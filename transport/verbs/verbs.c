/* SPDX-License-Identifier: Apache-2.0 */
/*
 * verbs.c - the RDMA provider: reliable-connection queue pairs set up
 * with rdma_cm, zero-copy both ways.
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
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "../transport_priv.h"

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
	struct vmr *prev, *next;
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

#define MAX_DEVICES 64
static struct dev_alarm alarms[MAX_DEVICES];
static pthread_mutex_t alarms_lock = PTHREAD_MUTEX_INITIALIZER;

static struct dev_alarm *alarm_of(struct ibv_context *verbs)
{
	struct dev_alarm *a = NULL;

	pthread_mutex_lock(&alarms_lock);
	for (int i = 0; i < MAX_DEVICES && !a; i++)
		if (alarms[i].verbs == verbs || !alarms[i].verbs) {
			alarms[i].verbs = verbs;
			a = &alarms[i];
		}
	pthread_mutex_unlock(&alarms_lock);
	return a;
}

struct vctx {
	struct kn__tp_ctx base;
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
	bool mw2;	     /* type-2 memory windows: grants bind them */
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
	struct vmr *mrs;
	struct kn__tp_cq cq_ring; /* completions waiting for kn__tp_poll */
};

static struct vctx *vctx_of(struct kn__tp_ctx *c)
{
	return (struct vctx *)c;
}

static struct vep *vep_of(struct kn__tp_ep *e)
{
	return (struct vep *)e;
}

static struct vctx *ep_ctx(const struct vep *ep)
{
	return (struct vctx *)ep->base.ctx;
}

static struct vop *kn__verbs_op_new(struct vep *ep, uint32_t kind, int *err);
static int kn__verbs_op_post(struct vep *ep, struct vop *op, void *user);
static void kn__verbs_grants_drop(struct vctx *c, const struct vep *ep,
				  const struct reg *reg);

static struct vep *ep_of_id(const struct rdma_cm_id *id)
{
	struct owner *o = id->context;

	return o && !o->is_listener ? container_of(o, struct vep, owner) : NULL;
}

static void vlog(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void vlog(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	kn__tp_vlog("verbs", fmt, ap);
	va_end(ap);
}

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ---- qp_num -> slot (linear probing, backward-shift deletion) ---- */

#define QPN_MASK (2 * MAX_EPS - 1)

static uint32_t qpn_hash(uint32_t qpn)
{
	return (qpn * 2654435761u) & QPN_MASK;
}

static void qpn_add(struct vctx *c, uint32_t qpn, uint32_t slot)
{
	uint32_t i = qpn_hash(qpn);

	while (c->qpn_slot[i] >= 0)
		i = (i + 1) & QPN_MASK;
	c->qpn_key[i] = qpn;
	c->qpn_slot[i] = (int32_t)slot;
}

static struct vep *qpn_find(struct vctx *c, uint32_t qpn)
{
	for (uint32_t i = qpn_hash(qpn); c->qpn_slot[i] >= 0;
	     i = (i + 1) & QPN_MASK)
		if (c->qpn_key[i] == qpn)
			return c->slots[c->qpn_slot[i]];
	return NULL;
}

static void qpn_del(struct vctx *c, uint32_t qpn)
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

/* ---- names ---- */

static void ep_log(const struct vep *ep, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void ep_log(const struct vep *ep, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	kn__tp_peer_vlog("verbs", ep->peer, fmt, ap);
	va_end(ap);
}

/* What a failed work completion means, as an errno. */
static int wc_errno(enum ibv_wc_status s)
{
	switch (s) {
	case IBV_WC_LOC_LEN_ERR:
	case IBV_WC_REM_INV_REQ_ERR:
		return -EMSGSIZE;
	case IBV_WC_LOC_PROT_ERR:
	case IBV_WC_REM_ACCESS_ERR:
	case IBV_WC_MW_BIND_ERR:
		return -EACCES;
	case IBV_WC_RETRY_EXC_ERR:
	case IBV_WC_RNR_RETRY_EXC_ERR:
	case IBV_WC_RESP_TIMEOUT_ERR:
		return -ETIMEDOUT;
	case IBV_WC_WR_FLUSH_ERR:
		return -ECANCELED;
	default:
		return -EIO;
	}
}

/* ---- endpoint failure and release ---- */

/* Make the context's fd readable: there is something to report. */
static void kn__verbs_kick(struct vctx *c)
{
	uint64_t one = 1;

	if (write(c->evfd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		vlog("eventfd: %s", strerror(errno));
}

/*
 * Queue @ep for kn__verbs_ep_release.  Outside kn__tp_poll (a post that
 * completes at once, a close), wake a thread sleeping on the fd.
 */
static void ready(struct vep *ep)
{
	struct vctx *c = ep_ctx(ep);

	if (ep->queued)
		return;
	ep->queued = true;
	ep->next_ready = c->ready;
	c->ready = ep;
	if (!c->in_poll)
		kn__verbs_kick(c);
}

/* True once the QP has nothing of ours left: every issued WR retired. */
static bool drained(const struct vep *ep)
{
	return ep->acked + 1 == ep->next_seq;
}

/*
 * Move @ep to the error state once: log, stop the QP (its WRs flush),
 * fail the operations not yet issued; the issued ones fail as their
 * flush completions come back, the oldest pending one with @err.
 */
static void kn__verbs_ep_fail(struct vep *ep, int err, const char *why, ...)
	__attribute__((format(printf, 3, 4)));

static void kn__verbs_ep_fail(struct vep *ep, int err, const char *why, ...)
{
	char msg[256];
	bool first = true;
	va_list ap;

	if (ep->state == EP_ERROR)
		return;
	va_start(ap, why);
	vsnprintf(msg, sizeof(msg), why, ap);
	va_end(ap);
	/* as over tcp: a peer hanging up or not listening is no news */
	if (!ep->zombie && err != -ECONNRESET && err != -ECONNREFUSED &&
	    kn__tp_fail_log_ok())
		ep_log(ep, "%s (%s); endpoint closed", msg, strerror(-err));
	if (ep->state == EP_RESOLVING) {
		ep_ctx(ep)->resolving--;
		ep->report_connect = true;
	} else if (ep->state == EP_OPEN) {
		ep->report_disc = true;
	}
	ep->state = EP_ERROR;
	ep->error = err;
	/* rdma_disconnect moves the QP to the error state, then says bye */
	if (ep->id && ep->id->qp)
		rdma_disconnect(ep->id);
	for (uint32_t i = ep->op_head; i != ep->op_tail; i++) {
		struct vop *op = &ep->ops[i % OP_DEPTH];

		op->status = first ? err : -ECANCELED;
		first = false;
		/* WRs that ibv_post_send refused will never come back */
		if (op->last_seq >= ep->next_seq)
			op->last_seq = ep->next_seq - 1;
	}
	/*
	 * An operation never given to the QP completes at once; one given
	 * in part waits for the flush of what was, like those before it.
	 */
	for (uint32_t i = ep->op_issue; i != ep->op_tail; i++) {
		struct vop *op = &ep->ops[i % OP_DEPTH];

		op->last_seq =
			op->issued || op->mailbox_sent ? ep->next_seq - 1 : 0;
	}
	ep->op_issue = ep->op_tail;
	ready(ep);
}

static void kn__verbs_bounce_repost(struct vctx *c, uint32_t idx);

static void kn__verbs_ep_free(struct vep *ep);

/*
 * Copy held control messages into the oldest posted recvs, in order,
 * while the ring has room; false when it ran out of room.
 */
static bool release_held(struct vep *ep)
{
	struct vctx *c = ep_ctx(ep);

	while (ep->state == EP_OPEN && ep->held_head != ep->held_tail &&
	       ep->rv_head != ep->rv_tail) {
		struct held h = ep->held[ep->held_head % SRQ_DEPTH];
		struct vrecv *r = &ep->recvs[ep->rv_head % RV_DEPTH];
		struct kn__tp_completion comp = { .user = r->user,
						  .ep = &ep->base,
						  .op = KN_TP_OP_RECV,
						  .bytes = h.len };

		if (h.len > r->len) {
			kn__verbs_ep_fail(
				ep, -EMSGSIZE,
				"a %u-byte control message for a %llu-byte "
				"recv buffer",
				h.len, (unsigned long long)r->len);
			break;
		}
		if (!kn__tp_cq_push(&c->cq_ring, &comp))
			return false;
		memcpy(r->addr, c->bounce + (size_t)h.idx * c->base.max_msg,
		       h.len);
		ep->rv_head++;
		ep->held_head++;
		kn__verbs_bounce_repost(c, h.idx);
	}
	return true;
}

/*
 * Report what @ep owes, in order, while the ring has room: a failed
 * CONNECT, retired operations, control messages for posted recvs; once
 * failed and drained, the cancelled recvs and DISCONNECT last.  What
 * finds no room waits for the next poll.
 */
static void kn__verbs_ep_release(struct vep *ep)
{
	struct vctx *c = ep_ctx(ep);
	struct kn__tp_ep *self = ep->zombie ? NULL : &ep->base;
	struct kn__tp_completion comp = { .ep = self };

	if (ep->report_connect && ep->state != EP_RESOLVING) {
		comp.op = KN_TP_OP_CONNECT;
		comp.user = ep->base.user;
		comp.status = ep->state == EP_ERROR ? ep->error : 0;
		if (!ep->zombie && !kn__tp_cq_push(&c->cq_ring, &comp))
			goto full;
		ep->report_connect = false;
	}
	while (ep->op_head != ep->op_issue) {
		struct vop *op = &ep->ops[ep->op_head % OP_DEPTH];

		if (op->last_seq > ep->acked)
			break;
		if (op->kind >= VOP_BIND) {
			ep->op_head++;
			continue;
		}
		comp = (struct kn__tp_completion){
			.user = op->user,
			.ep = self,
			.status = op->status,
			.op = op->kind,
			.bytes = op->status ? 0 : op->len,
		};
		if (ep->zombie)
			kn__tp_cq_push_grow(&c->cq_ring, &comp, "verbs");
		else if (!kn__tp_cq_push(&c->cq_ring, &comp))
			goto full;
		ep->op_head++;
	}
	if (!release_held(ep))
		goto full;
	if (ep->state != EP_ERROR || ep->op_head != ep->op_tail || !drained(ep))
		return;
	while (ep->rv_head != ep->rv_tail) {
		struct vrecv *r = &ep->recvs[ep->rv_head % RV_DEPTH];

		comp = (struct kn__tp_completion){ .user = r->user,
						   .ep = self,
						   .status = -ECANCELED,
						   .op = KN_TP_OP_RECV };
		if (ep->zombie)
			kn__tp_cq_push_grow(&c->cq_ring, &comp, "verbs");
		else if (!kn__tp_cq_push(&c->cq_ring, &comp))
			goto full;
		ep->rv_head++;
	}
	if (ep->report_disc && !ep->zombie) {
		comp = (struct kn__tp_completion){ .user = ep->base.user,
						   .ep = self,
						   .status = ep->error,
						   .op = KN_TP_OP_DISCONNECT };
		if (!kn__tp_cq_push(&c->cq_ring, &comp))
			goto full;
	}
	ep->report_disc = false;
	if (ep->zombie)
		kn__verbs_ep_free(ep);
	return;
full:
	ready(ep); /* the rest at the next poll */
}

/* ---- bounce buffers ---- */

static void kn__verbs_bounce_repost(struct vctx *c, uint32_t idx)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)(c->bounce + (size_t)idx * c->base.max_msg),
		.length = c->base.max_msg,
		.lkey = c->bounce_mr->lkey,
	};
	struct ibv_recv_wr wr = { .wr_id = WR_RECV | idx,
				  .sg_list = &sge,
				  .num_sge = 1 },
			   *bad;
	int ret = ibv_post_srq_recv(c->srq, &wr, &bad);

	if (ret)
		vlog("ibv_post_srq_recv: %s; the shared receive queue "
		     "shrinks by one",
		     strerror(ret));
}

/* ---- issuing WRs ---- */

static uint64_t wr_id(const struct vep *ep, uint64_t seq)
{
	return ((uint64_t)ep->slot << 48) | ((uint64_t)ep->gen << 40) |
	       (seq & WR_SEQ_MASK);
}

/*
 * Turn the waiting operations of @ep into WRs while the send queue has
 * room, a batch per ibv_post_send, each batch's last WR signaled.
 */
static void kn__verbs_ep_issue(struct vep *ep)
{
	struct vctx *c = ep_ctx(ep);
	uint32_t max_piece = c->port_max_msg;

	while (ep->state == EP_OPEN && ep->op_issue != ep->op_tail) {
		struct ibv_send_wr wrs[BATCH], *bad;
		struct ibv_sge sges[BATCH];
		uint64_t inflight = ep->next_seq - 1 - ep->acked;
		bool stall = false;
		int n = 0, ret;

		while (n < BATCH && inflight + (uint64_t)n < SQ_DEPTH &&
		       ep->op_issue != ep->op_tail) {
			struct vop *op = &ep->ops[ep->op_issue % OP_DEPTH];
			struct ibv_send_wr *wr = &wrs[n];
			struct ibv_sge *sge = &sges[n];
			uint64_t piece = op->len - op->issued;
			bool last;

			memset(wr, 0, sizeof(*wr));
			if (op->kind == KN_TP_OP_READ && op->len == 0) {
				/* nothing to move: done when those before are */
				op->last_seq = ep->next_seq - 1;
				ep->op_issue++;
				if (op->last_seq <= ep->acked)
					ready(ep);
				continue;
			}
			if (op->kind == KN_TP_OP_WRITE_IMM &&
			    op->len > max_piece && !ep->peer_inbox_ok) {
				/* its length record needs the peer's INFO */
				stall = true;
				break;
			}
			if (op->kind == VOP_BIND) {
				wr->opcode = IBV_WR_BIND_MW;
				wr->bind_mw.mw = op->mw;
				wr->bind_mw.rkey = op->rkey;
				wr->bind_mw.bind_info = (struct ibv_mw_bind_info){
					.mr = op->bind_mr,
					.addr = (uintptr_t)op->laddr,
					.length = op->len,
					.mw_access_flags = op->mw_access,
				};
				sge->length = 0;
				op->last_seq = ep->next_seq;
				ep->op_issue++;
				goto chain;
			}
			if (op->kind == KN_TP_OP_WRITE_IMM &&
			    op->len > max_piece && !op->mailbox_sent &&
			    piece <= max_piece) {
				/* the length record, before the immediate */
				uint64_t k = op->msg_no % MAILBOX;
				struct mailrec *rec =
					&c->outbox[ep->slot * MAILBOX + k];

				rec->tag = op->msg_no + 1;
				rec->len = op->len;
				sge->addr = (uintptr_t)rec;
				sge->length = sizeof(*rec);
				sge->lkey = c->outbox_mr->lkey;
				wr->opcode = IBV_WR_RDMA_WRITE;
				wr->wr.rdma.remote_addr =
					ep->peer_inbox_addr + k * sizeof(*rec);
				wr->wr.rdma.rkey = ep->peer_inbox_rkey;
				if (ep->max_inline >= sizeof(*rec))
					wr->send_flags = IBV_SEND_INLINE;
				op->mailbox_sent = true;
				goto chain;
			}
			if (piece > max_piece)
				piece = max_piece;
			sge->addr = (uintptr_t)(op->laddr + op->issued);
			sge->length = (uint32_t)piece;
			sge->lkey = op->lkey;
			last = op->issued + piece == op->len;
			switch (op->kind) {
			case KN_TP_OP_WRITE_IMM:
				wr->opcode = last ? IBV_WR_RDMA_WRITE_WITH_IMM
						  : IBV_WR_RDMA_WRITE;
				wr->imm_data = htonl(op->imm);
				wr->wr.rdma.remote_addr =
					op->raddr + op->issued;
				wr->wr.rdma.rkey = op->rkey;
				break;
			case KN_TP_OP_READ:
				wr->opcode = IBV_WR_RDMA_READ;
				wr->wr.rdma.remote_addr =
					op->raddr + op->issued;
				wr->wr.rdma.rkey = op->rkey;
				break;
			case VOP_INFO:
				wr->opcode = IBV_WR_SEND_WITH_IMM;
				wr->imm_data = htonl(INFO_IMM);
				if (piece <= ep->max_inline)
					wr->send_flags = IBV_SEND_INLINE;
				break;
			default:
				wr->opcode = IBV_WR_SEND;
				if (piece <= ep->max_inline)
					wr->send_flags = IBV_SEND_INLINE;
				break;
			}
			op->issued += piece;
			if (last) {
				op->last_seq = ep->next_seq;
				ep->op_issue++;
			}
chain:
			wr->sg_list = sge;
			wr->num_sge = sge->length ? 1 : 0;
			wr->wr_id = wr_id(ep, ep->next_seq);
			if (ep->next_seq % SIGNAL_EACH == 0)
				wr->send_flags |= IBV_SEND_SIGNALED;
			if (n)
				wrs[n - 1].next = wr;
			ep->next_seq++;
			n++;
		}
		if (n == 0)
			break;
		wrs[n - 1].send_flags |= IBV_SEND_SIGNALED;
		ret = ibv_post_send(ep->id->qp, wrs, &bad);
		if (ret) {
			/* the WRs from @bad on were not taken */
			ep->next_seq -= (uint64_t)(&wrs[n] - bad);
			kn__verbs_ep_fail(ep, -ret, "ibv_post_send: %s",
					  strerror(ret));
			return;
		}
		if (stall)
			return;
	}
}

/* ---- completions ---- */

static void on_send_wc(struct vctx *c, const struct ibv_wc *wc)
{
	uint32_t slot = (uint32_t)(wc->wr_id >> 48) & 0x7fff;
	uint32_t gen = (uint32_t)(wc->wr_id >> 40) & WR_GEN_MASK;
	struct vep *ep = slot < MAX_EPS ? c->slots[slot] : NULL;
	uint64_t seq;

	if (!ep || ep->gen != gen)
		return; /* an endpoint freed since */
	seq = ep->acked + ((wc->wr_id - (ep->acked + 1)) & WR_SEQ_MASK) + 1;
	if (seq >= ep->next_seq)
		return; /* cannot be: not issued */
	if (wc->status != IBV_WC_SUCCESS && wc->status != IBV_WC_WR_FLUSH_ERR &&
	    ep->state != EP_ERROR) {
		int err = wc_errno(wc->status);

		kn__verbs_ep_fail(
			ep, err, "work request failed: %s (vendor error %#x)",
			ibv_wc_status_str(wc->status), wc->vendor_err);
	}
	if (seq > ep->acked)
		ep->acked = seq;
	ready(ep);
	kn__verbs_ep_issue(ep);
}

static void kn__verbs_ep_established(struct vep *ep);

/* The peer's INFO: where its mailbox for us is; split writes may go. */
static void on_info(struct vep *ep, const void *data, uint32_t len,
		    uint32_t imm)
{
	struct info in;

	if (imm != INFO_IMM || len != sizeof(in) || ep->peer_inbox_ok) {
		kn__verbs_ep_fail(
			ep, -EPROTO,
			"an immediate with a message (%u bytes, %#x), or a "
			"second INFO",
			len, imm);
		return;
	}
	memcpy(&in, data, sizeof(in));
	ep->peer_inbox_addr = be64toh(in.inbox_addr);
	ep->peer_inbox_rkey = ntohl(in.inbox_rkey);
	ep->peer_inbox_ok = true;
	kn__verbs_ep_issue(ep);
}

static void on_recv_wc(struct vctx *c, const struct ibv_wc *wc)
{
	uint32_t idx = (uint32_t)wc->wr_id;
	struct vep *ep = qpn_find(c, wc->qp_num);

	if (wc->status != IBV_WC_SUCCESS) {
		if (ep && ep->state != EP_ERROR &&
		    wc->status != IBV_WC_WR_FLUSH_ERR)
			kn__verbs_ep_fail(
				ep, wc_errno(wc->status),
				"receive failed: %s (vendor error %#x)",
				ibv_wc_status_str(wc->status), wc->vendor_err);
		kn__verbs_bounce_repost(c, idx);
		return;
	}
	/* data can beat the ESTABLISHED event: it proves the connection */
	if (ep && ep->state == EP_ACCEPTING)
		kn__verbs_ep_established(ep);
	if (!ep || ep->zombie || ep->state != EP_OPEN) {
		kn__verbs_bounce_repost(c, idx);
		return;
	}
	if (wc->opcode == IBV_WC_RECV && (wc->wc_flags & IBV_WC_WITH_IMM)) {
		on_info(ep, c->bounce + (size_t)idx * c->base.max_msg,
			wc->byte_len, ntohl(wc->imm_data));
		kn__verbs_bounce_repost(c, idx);
		return;
	}
	if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
		uint64_t no = ep->rx_msgs++;
		const struct mailrec *rec =
			&c->inbox[ep->slot * MAILBOX + no % MAILBOX];
		struct kn__tp_completion comp = {
			.user = ep->base.user,
			.ep = &ep->base,
			.op = KN_TP_OP_RECV_IMM,
			.imm = ntohl(wc->imm_data),
			/* a split message left its whole length */
			.bytes = rec->tag == no + 1 ? rec->len : wc->byte_len,
		};

		kn__verbs_bounce_repost(c, idx);
		kn__tp_cq_push_grow(&c->cq_ring, &comp, "verbs");
		return;
	}
	/*
	 * A control message: to the oldest recv, now (in arrival order
	 * with immediates) or once one is posted; a message waiting for a
	 * recv does not hold back the immediates behind it.
	 */
	ep->held[ep->held_tail++ % SRQ_DEPTH] =
		(struct held){ .idx = idx, .len = wc->byte_len };
	if (!release_held(ep))
		ready(ep);
}

/*
 * Poll the hardware queue while the ring has room for what comes out;
 * the send queues' retirements are reported later by kn__verbs_ep_release.
 */
static void kn__verbs_drain_cq(struct vctx *c)
{
	for (;;) {
		struct ibv_wc wc[BATCH];
		uint32_t room = kn__tp_cq_room(&c->cq_ring);
		int n;

		if (room == 0)
			return;
		n = ibv_poll_cq(c->cq, room < BATCH ? (int)room : BATCH, wc);
		if (n <= 0) {
			if (n < 0)
				vlog("ibv_poll_cq failed");
			return;
		}
		for (int i = 0; i < n; i++) {
			if (wc[i].wr_id & WR_RECV)
				on_recv_wc(c, &wc[i]);
			else
				on_send_wc(c, &wc[i]);
		}
		if (n < BATCH)
			return;
	}
}

/* ---- endpoints: creation and teardown ---- */

static struct vep *ep_new(struct vctx *c, struct rdma_cm_id *id, void *user)
{
	struct vep *ep;
	uint32_t slot;

	for (slot = 0; slot < MAX_EPS && c->slots[slot]; slot++)
		;
	if (slot == MAX_EPS)
		return NULL;
	ep = calloc(1, sizeof(*ep));
	if (!ep)
		return NULL;
	ep->base.ctx = &c->base;
	ep->base.user = user;
	ep->id = id;
	ep->owner.is_listener = false;
	ep->slot = slot;
	ep->gen = ++c->gens[slot] & WR_GEN_MASK;
	ep->next_seq = 1;
	c->slots[slot] = ep;
	memset(&c->inbox[slot * MAILBOX], 0, MAILBOX * sizeof(struct mailrec));
	if (id)
		id->context = &ep->owner;
	return ep;
}

/*
 * Free @ep and its QP, and hand back its rdma_cm id: an id whose event
 * is not yet acknowledged cannot be destroyed (rdma_destroy_id would wait
 * for that ack for ever).
 */
static struct rdma_cm_id *ep_unlink(struct vep *ep)
{
	struct vctx *c = ep_ctx(ep);
	struct rdma_cm_id *id = ep->id;

	if (ep->queued) {
		/* leave the ready list */
		struct vep **p = &c->ready;

		while (*p != ep)
			p = &(*p)->next_ready;
		*p = ep->next_ready;
	}
	if (ep->state == EP_RESOLVING)
		c->resolving--;
	while (ep->held_head != ep->held_tail)
		kn__verbs_bounce_repost(
			c, ep->held[ep->held_head++ % SRQ_DEPTH].idx);
	/* windows first: one bound to a QP holds the QP (rxe waits on it) */
	kn__verbs_grants_drop(c, ep, NULL);
	if (id && id->qp) {
		qpn_del(c, id->qp->qp_num);
		rdma_destroy_qp(id);
		c->nqps--;
	}
	c->slots[ep->slot] = NULL;
	free(ep);
	return id;
}

static void kn__verbs_ep_free(struct vep *ep)
{
	struct rdma_cm_id *id = ep_unlink(ep);

	if (id)
		rdma_destroy_id(id);
}

/* Room on the CQ for every CQE @qps queue pairs can produce at once. */
static int cq_reserve(struct vctx *c, uint32_t qps)
{
	int need = (int)(qps * SQ_DEPTH + SRQ_DEPTH);

	if (need <= c->cq_size)
		return 0;
	if (need > c->max_cqe) {
		vlog("%u queue pairs need %d completion queue entries; the "
		     "device has %d",
		     qps, need, c->max_cqe);
		return -ENOSPC;
	}
	if (need < 2 * c->cq_size)
		need = 2 * c->cq_size < c->max_cqe ? 2 * c->cq_size
						   : c->max_cqe;
	if (ibv_resize_cq(c->cq, need)) {
		int err = errno;

		vlog("ibv_resize_cq to %d: %s", need, strerror(err));
		return -err;
	}
	c->cq_size = need;
	return 0;
}

static int ep_create_qp(struct vep *ep)
{
	struct vctx *c = ep_ctx(ep);
	struct ibv_qp_init_attr a = {
		.send_cq = c->cq,
		.recv_cq = c->cq,
		.srq = c->srq,
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = SQ_DEPTH,
			 .max_send_sge = 1,
			 .max_inline_data = INLINE_WANT },
	};
	int ret = cq_reserve(c, c->nqps + 1);

	if (ret)
		return ret;
	if (rdma_create_qp(ep->id, c->pd, &a)) {
		/* some devices have no inline data: ask again without */
		a.cap.max_inline_data = 0;
		if (rdma_create_qp(ep->id, c->pd, &a))
			return -errno;
	}
	ep->max_inline = a.cap.max_inline_data;
	c->nqps++;
	qpn_add(c, ep->id->qp->qp_num, ep->slot);
	return 0;
}

static void hello_fill(const struct vep *ep, struct hello *h, int reject)
{
	const struct vctx *c = ep_ctx(ep);

	memset(h, 0, sizeof(*h));
	h->magic = htonl(HELLO_MAGIC);
	h->version = htons(HELLO_VERSION);
	h->max_msg = htonl(c->base.max_msg);
	if (!c->mw2) { /* with windows, INFO says it once the QP is up */
		h->inbox_rkey = htonl(c->inbox_mr->rkey);
		h->inbox_addr =
			htobe64((uintptr_t)&c->inbox[ep->slot * MAILBOX]);
	}
	h->reject = (int32_t)htonl((uint32_t)reject);
}

/* 0 and the peer's parameters taken, or a negative errno. */
static int hello_take(struct vep *ep, const void *data, size_t len)
{
	struct hello h;

	if (!data || len < sizeof(h))
		return -EPROTO;
	memcpy(&h, data, sizeof(h));
	if (ntohl(h.magic) != HELLO_MAGIC)
		return -EPROTO;
	if (ntohs(h.version) != HELLO_VERSION)
		return -EPROTONOSUPPORT;
	ep->peer_max_msg = ntohl(h.max_msg);
	ep->peer_inbox_rkey = ntohl(h.inbox_rkey);
	ep->peer_inbox_addr = be64toh(h.inbox_addr);
	ep->peer_inbox_ok = ep->peer_inbox_rkey != 0; /* else INFO tells */
	return 0;
}

static void conn_param(const struct vctx *c, const struct hello *h,
		       struct rdma_conn_param *p)
{
	memset(p, 0, sizeof(*p));
	p->private_data = h;
	p->private_data_len = sizeof(*h);
	p->responder_resources = (uint8_t)c->rd_atomic;
	p->initiator_depth = (uint8_t)c->rd_init;
	p->retry_count = 7;
	p->rnr_retry_count = 7; /* infinite: a full SRQ only slows a peer */
}

static void grant_free(struct vgrant *g)
{
	if (g->mw) /* first: a registration with a window bound stays busy */
		ibv_dealloc_mw(g->mw);
	if (g->mr)
		ibv_dereg_mr(g->mr);
	free(g);
}

/* Free the grants of @ep (NULL: any) on @reg (NULL: any). */
static void kn__verbs_grants_drop(struct vctx *c, const struct vep *ep,
				  const struct reg *reg)
{
	for (struct vgrant **p = &c->grants; *p;) {
		struct vgrant *g = *p;

		if ((!ep || g->ep == ep) && (!reg || g->reg == reg)) {
			*p = g->next;
			grant_free(g);
		} else {
			p = &g->next;
		}
	}
}

/*
 * Open [@addr, +@len) of @mr to @ep's peer with the remote rights
 * @access (IBV_ACCESS_REMOTE_*): a type-2 window bound to @ep's queue
 * pair (its BIND_MW goes before anything posted after it), or without
 * windows a registration of the range.  The rkey in *@rkey.
 */
static int kn__verbs_grant_new(struct vep *ep, struct reg *reg,
			       struct ibv_mr *mr, char *addr, uint64_t len,
			       int access, uint32_t *rkey)
{
	struct vctx *c = ep_ctx(ep);
	struct vgrant *g = calloc(1, sizeof(*g));
	struct vop *op;
	uint8_t salt;
	int err = 0;

	if (!g)
		return -ENOMEM;
	g->ep = ep;
	g->reg = reg;
	if (!c->mw2) {
		g->mr = ibv_reg_mr(c->pd, addr, len,
				   IBV_ACCESS_LOCAL_WRITE | access);
		if (!g->mr) {
			err = errno ? -errno : -ENOMEM;
			goto fail;
		}
		*rkey = g->mr->rkey;
		goto done;
	}
	op = kn__verbs_op_new(ep, VOP_BIND, &err);
	if (!op)
		goto fail;
	if (addr != (char *)mr->addr || len != mr->length) {
		/*
		 * Part of a region: the window goes over a registration of
		 * just that part, so that the range is enforced whether the
		 * device checks a window's bounds or (rxe on Linux 6.1)
		 * only those of the registration under it.
		 */
		g->mr = ibv_reg_mr(c->pd, addr, len,
				   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
		if (!g->mr) {
			err = errno ? -errno : -ENOMEM;
			goto fail;
		}
		mr = g->mr;
	}
	g->mw = ibv_alloc_mw(c->pd, IBV_MW_TYPE_2);
	if (!g->mw) {
		err = errno ? -errno : -ENOMEM;
		goto fail;
	}
	/* the window's index, with a key byte nobody can predict */
	err = kn__tp_random(&salt, sizeof(salt));
	if (err)
		goto fail;
	op->rkey = (g->mw->rkey & ~0xffu) | salt;
	if (op->rkey == g->mw->rkey)
		op->rkey ^= 1;
	op->mw = g->mw;
	op->bind_mr = mr;
	op->laddr = addr;
	op->len = len;
	op->mw_access = (uint32_t)access;
	*rkey = op->rkey;
	kn__verbs_op_post(ep, op, NULL);
done:
	g->next = c->grants;
	c->grants = g;
	return 0;
fail:
	grant_free(g);
	return err;
}

/*
 * With windows, the mailbox slice of @ep is opened to its peer only
 * now, on its own queue pair, and the peer learns where it is from the
 * INFO message; without, the connection's private data said so.
 */
static int send_info(struct vep *ep)
{
	struct vctx *c = ep_ctx(ep);
	struct mailrec *box = &c->inbox[ep->slot * MAILBOX];
	struct info *in = &c->infos[ep->slot];
	uint32_t rkey;
	struct vop *op;
	int err;

	if (!c->mw2 || ep->info_sent)
		return 0;
	ep->info_sent = true;
	err = kn__verbs_grant_new(ep, NULL, c->inbox_mr, (char *)box,
				  MAILBOX * sizeof(*box),
				  IBV_ACCESS_REMOTE_WRITE, &rkey);
	if (err)
		return err;
	*in = (struct info){ .inbox_addr = htobe64((uintptr_t)box),
			     .inbox_rkey = htonl(rkey) };
	op = kn__verbs_op_new(ep, VOP_INFO, &err);
	if (!op)
		return err;
	op->laddr = (char *)in;
	op->lkey = c->infos_mr->lkey;
	op->len = sizeof(*in);
	return kn__verbs_op_post(ep, op, NULL);
}

/*
 * The connection is up: report it at once (before anything it carries)
 * and issue what was posted while it came up.
 */
static void kn__verbs_ep_established(struct vep *ep)
{
	struct vctx *c = ep_ctx(ep);
	struct kn__tp_completion comp = { .ep = &ep->base };
	int ret;

	if (ep->state == EP_RESOLVING) {
		c->resolving--;
		comp.op = KN_TP_OP_CONNECT;
		comp.user = ep->base.user;
	} else {
		comp.op = KN_TP_OP_ACCEPT;
		comp.user = ep->listener->user;
		ep->listener = NULL;
	}
	ep->state = EP_OPEN;
	kn__tp_addr_name(rdma_get_peer_addr(ep->id), ep->peer, sizeof(ep->peer));
	kn__tp_cq_push_grow(&c->cq_ring, &comp, "verbs");
	ret = send_info(ep);
	if (ret)
		kn__verbs_ep_fail(ep, ret,
				  "opening the mailbox to the peer: %s",
				  strerror(-ret));
	kn__verbs_ep_issue(ep);
}

/* ---- rdma_cm events ---- */

static int reject_errno(const struct rdma_cm_event *ev)
{
	struct hello h;

	if (ev->param.conn.private_data &&
	    ev->param.conn.private_data_len >= sizeof(h)) {
		memcpy(&h, ev->param.conn.private_data, sizeof(h));
		if (ntohl(h.magic) == HELLO_MAGIC && h.reject)
			return -(int)ntohl((uint32_t)h.reject);
	}
	return -ECONNREFUSED; /* nobody listens there */
}

static void reject(struct rdma_cm_id *id, int err)
{
	struct hello h = { .magic = htonl(HELLO_MAGIC),
			   .version = htons(HELLO_VERSION),
			   .reject = (int32_t)htonl((uint32_t)err) };

	rdma_reject(id, &h, sizeof(h));
}

/*
 * A connection request: accept it on a new endpoint, or reject it with
 * the reason.  Returns the id to destroy once the event is acknowledged
 * (a rejected one), or NULL.
 */
static struct rdma_cm_id *on_connect_request(struct vctx *c,
					     struct rdma_cm_event *ev)
{
	struct vlistener *l =
		container_of(ev->listen_id->context, struct vlistener, owner);
	struct rdma_conn_param p;
	struct hello h;
	struct vep *ep;
	int ret;

	if (ev->id->verbs != c->verbs) {
		char a[64];

		kn__tp_addr_name(rdma_get_peer_addr(ev->id), a, sizeof(a));
		vlog("refusing %s: it came in on %s, this context uses %s", a,
		     ibv_get_device_name(ev->id->verbs->device),
		     ibv_get_device_name(c->verbs->device));
		reject(ev->id, ENODEV);
		return ev->id;
	}
	ep = ep_new(c, ev->id, NULL);
	if (!ep) {
		vlog("refusing a connection: %d endpoints already", MAX_EPS);
		reject(ev->id, EMFILE);
		return ev->id;
	}
	kn__tp_addr_name(rdma_get_peer_addr(ev->id), ep->peer, sizeof(ep->peer));
	ep->state = EP_ACCEPTING;
	ep->listener = &l->base;
	ret = hello_take(ep, ev->param.conn.private_data,
			 ev->param.conn.private_data_len);
	if (!ret)
		ret = ep_create_qp(ep);
	if (ret) {
		ep_log(ep, "connection refused: %s",
		       ret == -EPROTO ? "no Kanel hello in its private data"
				      : strerror(-ret));
		reject(ev->id, -ret);
		return ep_unlink(ep);
	}
	hello_fill(ep, &h, 0);
	conn_param(c, &h, &p);
	/* the peer's limits bound what we ask for */
	if (p.responder_resources > ev->param.conn.initiator_depth)
		p.responder_resources = ev->param.conn.initiator_depth;
	if (p.initiator_depth > ev->param.conn.responder_resources)
		p.initiator_depth = ev->param.conn.responder_resources;
	if (rdma_accept(ev->id, &p)) {
		ep_log(ep, "rdma_accept: %s", strerror(errno));
		return ep_unlink(ep);
	}
	return NULL;
}

static void on_ep_event(struct vctx *c, struct vep *ep,
			const struct rdma_cm_event *ev)
{
	bool accepting = ep->state == EP_ACCEPTING;
	struct rdma_conn_param p;
	struct hello h;
	int ret;

	switch (ev->event) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		if (ep->id->verbs != c->verbs) {
			kn__verbs_ep_fail(
				ep, -ENODEV,
				"the address is on device %s, this context "
				"uses %s (set KANEL_RDMA_DEVICE)",
				ibv_get_device_name(ep->id->verbs->device),
				ibv_get_device_name(c->verbs->device));
			break;
		}
		ret = ep_create_qp(ep);
		if (ret)
			kn__verbs_ep_fail(ep, ret, "creating the queue pair");
		else if (rdma_resolve_route(ep->id, RESOLVE_MS))
			kn__verbs_ep_fail(ep, -errno, "rdma_resolve_route");
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		hello_fill(ep, &h, 0);
		conn_param(c, &h, &p);
		if (rdma_connect(ep->id, &p))
			kn__verbs_ep_fail(ep, -errno, "rdma_connect");
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
		if (ep->state == EP_RESOLVING) {
			ret = hello_take(ep, ev->param.conn.private_data,
					 ev->param.conn.private_data_len);
			if (ret) {
				kn__verbs_ep_fail(ep, ret,
						  "the peer is no Kanel");
				break;
			}
		}
		if (ep->state != EP_OPEN)
			kn__verbs_ep_established(ep);
		break;
	case RDMA_CM_EVENT_ADDR_ERROR:
		kn__verbs_ep_fail(ep, ev->status ? ev->status : -EHOSTUNREACH,
				  "address resolution failed");
		break;
	case RDMA_CM_EVENT_ROUTE_ERROR:
		kn__verbs_ep_fail(ep, ev->status ? ev->status : -ENETUNREACH,
				  "route resolution failed");
		break;
	case RDMA_CM_EVENT_UNREACHABLE:
		kn__verbs_ep_fail(ep, -EHOSTUNREACH, "unreachable (status %d)",
				  ev->status);
		break;
	case RDMA_CM_EVENT_REJECTED:
		kn__verbs_ep_fail(ep, reject_errno(ev), "connection rejected");
		break;
	case RDMA_CM_EVENT_CONNECT_ERROR:
		kn__verbs_ep_fail(ep, -ECONNABORTED,
				  "connection error (status %d)", ev->status);
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
		/*
		 * What the peer sent before it hung up is in the CQ already
		 * (its sends completed before it disconnected): deliver it
		 * before the endpoint fails.
		 */
		kn__verbs_drain_cq(c);
		kn__verbs_ep_fail(ep, -ECONNRESET, "the peer disconnected");
		break;
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		kn__verbs_ep_fail(ep, -ENODEV, "the device was removed");
		break;
	case RDMA_CM_EVENT_TIMEWAIT_EXIT:
		break;
	default:
		vlog("rdma_cm event %s on %s ignored",
		     rdma_event_str(ev->event), ep->peer);
		break;
	}
	if (accepting && ep->state == EP_ERROR)
		kn__verbs_ep_free(
			ep); /* failed before the application saw it */
}

static void kn__verbs_drain_cm(struct vctx *c)
{
	struct rdma_cm_event *ev;

	for (int k = 0; k < 64 && rdma_get_cm_event(c->cm, &ev) == 0; k++) {
		struct rdma_cm_event copy = *ev;

		if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
			/* it reads the private data: ack after */
			struct rdma_cm_id *refused = on_connect_request(c, ev);

			rdma_ack_cm_event(ev);
			if (refused)
				rdma_destroy_id(refused);
			continue;
		}
		/*
		 * Ack before acting: rdma_destroy_id waits for its events'
		 * acks.  What we read of the private data is copied first.
		 */
		if (copy.event == RDMA_CM_EVENT_ESTABLISHED ||
		    copy.event == RDMA_CM_EVENT_REJECTED) {
			struct vep *ep = ep_of_id(ev->id);
			char pd[256];
			size_t n = ev->param.conn.private_data_len;

			if (n > sizeof(pd))
				n = sizeof(pd);
			if (ev->param.conn.private_data)
				memcpy(pd, ev->param.conn.private_data, n);
			copy.param.conn.private_data =
				ev->param.conn.private_data ? pd : NULL;
			rdma_ack_cm_event(ev);
			if (ep)
				on_ep_event(c, ep, &copy);
			continue;
		}
		rdma_ack_cm_event(ev);
		if (copy.id && ep_of_id(copy.id))
			on_ep_event(c, ep_of_id(copy.id), &copy);
		else if (copy.event != RDMA_CM_EVENT_TIMEWAIT_EXIT)
			vlog("rdma_cm event %s on a listener (status %d)",
			     rdma_event_str(copy.event), copy.status);
	}
}

static void fail_all(struct vctx *c, int err, const char *why)
{
	for (uint32_t s = 0; s < MAX_EPS; s++) {
		struct vep *ep = c->slots[s];

		if (ep && ep->state == EP_ACCEPTING)
			kn__verbs_ep_free(
				ep); /* the application never saw it */
		else if (ep && !ep->zombie)
			kn__verbs_ep_fail(ep, err, "%s", why);
	}
}

static void kn__verbs_drain_async(struct vctx *c)
{
	struct ibv_async_event ev;

	for (int k = 0; k < 16 && ibv_get_async_event(c->verbs, &ev) == 0;
	     k++) {
		struct vep *ep = NULL;

		switch (ev.event_type) {
		case IBV_EVENT_QP_FATAL:
		case IBV_EVENT_QP_REQ_ERR:
		case IBV_EVENT_QP_ACCESS_ERR:
			ep = qpn_find(c, ev.element.qp->qp_num);
			if (ep)
				kn__verbs_ep_fail(
					ep, -EIO, "async event: %s",
					ibv_event_type_str(ev.event_type));
			else
				vlog("async event %s on QP %u of another "
				     "context",
				     ibv_event_type_str(ev.event_type),
				     ev.element.qp->qp_num);
			break;
		case IBV_EVENT_PORT_ERR:
		case IBV_EVENT_DEVICE_FATAL:
			vlog("async event: %s on %s",
			     ibv_event_type_str(ev.event_type), c->name + 6);
			if (c->alarm)
				atomic_fetch_add(&c->alarm->gen, 1);
			else
				fail_all(c, -ENETDOWN, "the port went down");
			break;
		default:
			vlog("async event: %s",
			     ibv_event_type_str(ev.event_type));
			break;
		}
		ibv_ack_async_event(&ev);
	}
}

/* A port or device failure read by any context fails our endpoints. */
static void kn__verbs_check_alarm(struct vctx *c)
{
	unsigned int gen;

	if (!c->alarm)
		return;
	gen = atomic_load_explicit(&c->alarm->gen, memory_order_relaxed);
	if (gen != c->alarm_seen) {
		c->alarm_seen = gen;
		fail_all(c, -ENETDOWN, "the port or the device failed");
	}
}

static void kn__verbs_check_deadlines(struct vctx *c)
{
	double t = now_s();

	for (uint32_t s = 0; s < MAX_EPS && c->resolving; s++) {
		struct vep *ep = c->slots[s];

		if (ep && ep->state == EP_RESOLVING && t > ep->deadline)
			kn__verbs_ep_fail(ep, -ETIMEDOUT,
					  "no connection in %d s", CONNECT_S);
	}
}

/* ---- context ---- */

static bool has_cap_ipc_lock(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	bool yes = false;

	if (!f)
		return false;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long caps;

		if (sscanf(line, "CapEff: %llx", &caps) == 1) {
			yes = caps & (1ull << 14); /* CAP_IPC_LOCK */
			break;
		}
	}
	fclose(f);
	return yes;
}

/* bytes registered by every verbs context of the process */
static _Atomic size_t locked_bytes;

static const char memlock_advice[] =
	"raise RLIMIT_MEMLOCK: `ulimit -l unlimited` in the shell, "
	"LimitMEMLOCK=infinity for a systemd unit, a memlock line in "
	"/etc/security/limits.conf, or `--ulimit memlock=-1` for a container";

/*
 * Registered memory is pinned and counts against RLIMIT_MEMLOCK unless
 * the process may lock any amount; say so here, with the fix, rather than
 * let ibv_reg_mr fail with a bare ENOMEM.
 */
static int kn__verbs_memlock_check(size_t len)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_MEMLOCK, &rl) || rl.rlim_cur == RLIM_INFINITY ||
	    has_cap_ipc_lock())
		return 0;
	if (atomic_load(&locked_bytes) + len <= rl.rlim_cur)
		return 0;
	vlog("registering %zu bytes would pin %zu bytes in all, above "
	     "RLIMIT_MEMLOCK (%llu bytes): %s",
	     len, atomic_load(&locked_bytes) + len,
	     (unsigned long long)rl.rlim_cur, memlock_advice);
	return -ENOMEM;
}

static void kn__verbs_memlock_warn_once(void)
{
	static bool warned;
	struct rlimit rl;

	if (warned || getrlimit(RLIMIT_MEMLOCK, &rl) ||
	    rl.rlim_cur == RLIM_INFINITY || has_cap_ipc_lock())
		return;
	warned = true;
	vlog("RLIMIT_MEMLOCK is %llu KiB, so at most that much memory can be "
	     "registered; to register more, %s",
	     (unsigned long long)rl.rlim_cur / 1024, memlock_advice);
}

static struct ibv_context *pick_device(struct ibv_context **devs, int n,
				       const char *want)
{
	for (int i = 0; i < n; i++)
		if (!want ||
		    strcmp(ibv_get_device_name(devs[i]->device), want) == 0)
			return devs[i];
	return NULL;
}

static int add_fd(struct vctx *c, int fd)
{
	struct epoll_event ev = { .events = EPOLLIN };
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ||
	    epoll_ctl(c->epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
		return -errno;
	return 0;
}

static struct ibv_mr *kn__verbs_reg_private(struct vctx *c, void *p, size_t len,
					    int access)
{
	struct ibv_mr *mr = ibv_reg_mr(c->pd, p, len, access);

	if (mr)
		atomic_fetch_add(&locked_bytes, len);
	return mr;
}

static void kn__verbs_dereg_private(struct ibv_mr *mr)
{
	if (mr) {
		atomic_fetch_sub(&locked_bytes, mr->length);
		ibv_dereg_mr(mr);
	}
}

static void verbs_ctx_destroy(struct kn__tp_ctx *ctx);
static void kn__verbs_listener_close(struct kn__tp_listener *listener);

/* Device queues, buffers and fds; a negative errno with a log line. */
static int ctx_setup(struct vctx *c)
{
	struct ibv_device_attr da;
	struct ibv_port_attr pa;
	size_t mbox = (size_t)MAX_EPS * MAILBOX * sizeof(struct mailrec);
	int ret;

	if (ibv_query_device(c->verbs, &da) ||
	    ibv_query_port(c->verbs, 1, &pa)) {
		vlog("querying %s failed", c->name);
		return -EIO;
	}
	if (da.max_srq == 0) {
		vlog("%s has no shared receive queues", c->name);
		return -EOPNOTSUPP;
	}
	c->port_max_msg = pa.max_msg_sz ? pa.max_msg_sz : 1u << 30;
	c->rd_atomic = da.max_qp_rd_atom < RD_ATOMIC
			       ? (uint32_t)da.max_qp_rd_atom
			       : RD_ATOMIC;
	c->rd_init = da.max_qp_init_rd_atom < RD_ATOMIC
			     ? (uint32_t)da.max_qp_init_rd_atom
			     : RD_ATOMIC;
	c->max_cqe = da.max_cqe;
	c->mw2 = (da.device_cap_flags & (IBV_DEVICE_MEM_WINDOW_TYPE_2A |
					 IBV_DEVICE_MEM_WINDOW_TYPE_2B)) &&
		 !(getenv("KANEL_RDMA_MW") &&
		   strcmp(getenv("KANEL_RDMA_MW"), "0") == 0);
	if (!c->mw2)
		vlog("%s: no type-2 memory windows%s: each grant is a "
		     "registration whose rkey works on every connection of "
		     "this process, so a peer that knows the job secret and "
		     "guesses another's rkey reaches that memory too",
		     c->name, getenv("KANEL_RDMA_MW") ? " (KANEL_RDMA_MW=0)" : "");
	c->pd = ibv_alloc_pd(c->verbs);
	c->chan = ibv_create_comp_channel(c->verbs);
	c->cq_size = 16 * SQ_DEPTH + SRQ_DEPTH;
	if (c->cq_size > c->max_cqe)
		c->cq_size = c->max_cqe;
	c->cq = c->chan ? ibv_create_cq(c->verbs, c->cq_size, c, c->chan, 0)
			: NULL;
	c->srq = c->pd ? ibv_create_srq(c->pd,
					&(struct ibv_srq_init_attr){
						.attr = { .max_wr = SRQ_DEPTH,
							  .max_sge = 1 } })
		       : NULL;
	if (!c->pd || !c->chan || !c->cq || !c->srq) {
		ret = -errno;
		vlog("creating the device queues on %s: %s", c->name,
		     strerror(errno));
		return ret ? ret : -ENOMEM;
	}
	c->cq_size = c->cq->cqe;
	ret = kn__verbs_memlock_check((size_t)SRQ_DEPTH * c->base.max_msg +
				      2 * mbox);
	if (ret)
		return ret;
	c->bounce = aligned_alloc(4096, (size_t)SRQ_DEPTH * c->base.max_msg);
	c->inbox = aligned_alloc(4096, mbox);
	c->outbox = aligned_alloc(4096, mbox);
	c->infos = aligned_alloc(4096, MAX_EPS * sizeof(*c->infos));
	if (!c->bounce || !c->inbox || !c->outbox || !c->infos)
		return -ENOMEM;
	memset(c->inbox, 0, mbox);
	c->bounce_mr = kn__verbs_reg_private(
		c, c->bounce, (size_t)SRQ_DEPTH * c->base.max_msg,
		IBV_ACCESS_LOCAL_WRITE);
	c->inbox_mr = kn__verbs_reg_private(
		c, c->inbox, mbox,
		IBV_ACCESS_LOCAL_WRITE | (c->mw2 ? IBV_ACCESS_MW_BIND
						 : IBV_ACCESS_REMOTE_WRITE));
	c->outbox_mr = kn__verbs_reg_private(c, c->outbox, mbox, 0);
	c->infos_mr = kn__verbs_reg_private(c, c->infos,
					    MAX_EPS * sizeof(*c->infos), 0);
	if (!c->bounce_mr || !c->inbox_mr || !c->outbox_mr || !c->infos_mr) {
		ret = -errno;
		vlog("registering the context's buffers: %s", strerror(errno));
		return ret ? ret : -ENOMEM;
	}
	for (uint32_t i = 0; i < SRQ_DEPTH; i++)
		kn__verbs_bounce_repost(c, i);
	c->cm = rdma_create_event_channel();
	c->epfd = epoll_create1(EPOLL_CLOEXEC);
	c->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (!c->cm || c->epfd < 0 || c->evfd < 0)
		return -errno;
	if ((ret = add_fd(c, c->cm->fd)) || (ret = add_fd(c, c->chan->fd)) ||
	    (ret = add_fd(c, c->evfd)))
		return ret;
	/* shared by every context on the device: whoever reads, reports */
	add_fd(c, c->verbs->async_fd);
	return 0;
}

static int verbs_ctx_create(const struct kn__tp_ctx_attr *attr,
			    struct kn__tp_ctx **out)
{
	uint32_t depth = attr && attr->cq_depth ? attr->cq_depth : 4096;
	const char *want = attr && attr->device ? attr->device
						: getenv("KANEL_RDMA_DEVICE");
	struct vctx *c;
	int n = 0, ret;

	if (attr && attr->flags)
		return -EINVAL;
	/*
	 * Registered pages must stay the parent's across fork() (data
	 * loaders fork): with kernels from 5.13 this is a no-op (pinned
	 * pages are copied for the child at fork), before that it marks
	 * registered memory MADV_DONTFORK.
	 */
	if (ibv_is_fork_initialized() == IBV_FORK_DISABLED && ibv_fork_init())
		vlog("ibv_fork_init failed: a child process must not touch "
		     "registered memory");
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->base.ops = &kn__tp_verbs_ops;
	c->base.name = c->name;
	c->base.max_msg = attr && attr->max_msg ? attr->max_msg : 4096;
	c->epfd = c->evfd = -1;
	for (uint32_t i = 0; i < 2 * MAX_EPS; i++)
		c->qpn_slot[i] = -1;
	if (kn__tp_cq_init(&c->cq_ring, depth)) {
		free(c);
		return -ENOMEM;
	}
	c->devices = rdma_get_devices(&n);
	c->verbs = c->devices ? pick_device(c->devices, n, want) : NULL;
	if (!c->verbs) {
		if (want)
			vlog("no RDMA device named %s (KANEL_RDMA_DEVICE)",
			     want);
		ret = -ENODEV;
		goto fail;
	}
	snprintf(c->name, sizeof(c->name), "verbs/%s",
		 ibv_get_device_name(c->verbs->device));
	c->alarm = alarm_of(c->verbs);
	if (c->alarm)
		c->alarm_seen = atomic_load(&c->alarm->gen);
	kn__verbs_memlock_warn_once();
	ret = ctx_setup(c);
	if (ret)
		goto fail;
	*out = &c->base;
	return 0;
fail:
	verbs_ctx_destroy(&c->base);
	return ret;
}

static void verbs_ctx_destroy(struct kn__tp_ctx *ctx)
{
	struct vctx *c = vctx_of(ctx);

	for (uint32_t s = 0; s < MAX_EPS; s++)
		if (c->slots[s])
			kn__verbs_ep_free(c->slots[s]);
	while (c->listeners)
		kn__verbs_listener_close(&c->listeners->base);
	kn__verbs_grants_drop(c, NULL, NULL);
	while (c->mrs) {
		struct vmr *m = c->mrs;

		c->mrs = m->next;
		free(m);
	}
	while (c->regs) {
		struct reg *r = c->regs;

		c->regs = r->next;
		kn__verbs_dereg_private(r->mr);
		free(r);
	}
	if (c->srq)
		ibv_destroy_srq(c->srq);
	if (c->cq) {
		if (c->unacked)
			ibv_ack_cq_events(c->cq, c->unacked);
		ibv_destroy_cq(c->cq);
	}
	if (c->chan)
		ibv_destroy_comp_channel(c->chan);
	kn__verbs_dereg_private(c->bounce_mr);
	kn__verbs_dereg_private(c->inbox_mr);
	kn__verbs_dereg_private(c->outbox_mr);
	kn__verbs_dereg_private(c->infos_mr);
	if (c->pd)
		ibv_dealloc_pd(c->pd);
	if (c->cm)
		rdma_destroy_event_channel(c->cm);
	if (c->devices)
		rdma_free_devices(c->devices);
	if (c->epfd >= 0)
		close(c->epfd);
	if (c->evfd >= 0)
		close(c->evfd);
	free(c->bounce);
	free(c->inbox);
	free(c->outbox);
	free(c->infos);
	kn__tp_cq_fini(&c->cq_ring);
	free(c);
}

/* ---- memory regions ---- */

/* Remote rights as verbs spells them. */
static int ibv_remote(uint32_t access)
{
	return (access & KN_TP_REMOTE_WRITE ? IBV_ACCESS_REMOTE_WRITE : 0) |
	       (access & KN_TP_REMOTE_READ ? IBV_ACCESS_REMOTE_READ : 0);
}

/*
 * A registration never has remote rights of its own: peers reach only
 * grants (windows bound over it, or registrations of their ranges).
 */
static int ibv_access(const struct vctx *c, uint32_t access)
{
	return IBV_ACCESS_LOCAL_WRITE |
	       (access && c->mw2 ? IBV_ACCESS_MW_BIND : 0);
}

/*
 * A live registration @addr/@len can share: the same range and rights,
 * or, for local-only use, any local-only registration that holds it
 * (it exposes nothing to peers).  Idle registrations are not kept: the
 * allocator may hand the same addresses out over other pages.
 */
static struct reg *reg_find(struct vctx *c, char *addr, size_t len,
			    uint32_t access)
{
	for (struct reg *r = c->regs; r; r = r->next) {
		if (r->access != access)
			continue;
		if (r->addr == addr && r->len == len)
			return r;
		if (access == 0 && r->mr && addr >= r->addr && len <= r->len &&
		    (size_t)(addr - r->addr) <= r->len - len)
			return r;
	}
	return NULL;
}

static int kn__verbs_mr_reg(struct kn__tp_ctx *ctx, void *addr, size_t len,
			    uint32_t access, struct kn__tp_mr **out)
{
	struct vctx *c = vctx_of(ctx);
	struct reg *r = reg_find(c, addr, len, access);
	struct vmr *m = calloc(1, sizeof(*m));
	int ret;

	if (!m)
		return -ENOMEM;
	if (!r) {
		r = calloc(1, sizeof(*r));
		if (!r) {
			free(m);
			return -ENOMEM;
		}
		r->addr = addr;
		r->len = len;
		r->access = access;
		if (len) {
			ret = kn__verbs_memlock_check(len);
			if (!ret) {
				r->mr = kn__verbs_reg_private(
					c, addr, len, ibv_access(c, access));
				if (!r->mr) {
					ret = errno ? -errno : -ENOMEM;
					vlog("ibv_reg_mr of %zu bytes: %s", len,
					     strerror(-ret));
				}
			}
			if (ret) {
				free(r);
				free(m);
				return ret;
			}
		}
		r->next = c->regs;
		c->regs = r;
	}
	r->refs++;
	m->base.ctx = ctx;
	m->base.addr = addr;
	m->base.len = len;
	m->base.access = access;
	m->reg = r;
	m->next = c->mrs;
	if (c->mrs)
		c->mrs->prev = m;
	c->mrs = m;
	*out = &m->base;
	return 0;
}

static void kn__verbs_mr_dereg(struct kn__tp_mr *mr)
{
	struct vmr *m = (struct vmr *)mr;
	struct vctx *c = vctx_of(mr->ctx);
	struct reg *r = m->reg;

	if (m->prev)
		m->prev->next = m->next;
	else
		c->mrs = m->next;
	if (m->next)
		m->next->prev = m->prev;
	free(m);
	if (--r->refs)
		return;
	for (struct reg **p = &c->regs; *p; p = &(*p)->next)
		if (*p == r) {
			*p = r->next;
			break;
		}
	kn__verbs_grants_drop(c, NULL, r); /* windows over it go first */
	kn__verbs_dereg_private(r->mr);
	free(r);
}

static int kn__verbs_ep_grant(struct kn__tp_ep *e, struct kn__tp_mr *mr,
			      uint64_t off, uint64_t len, uint32_t access,
			      struct kn__tp_rdesc *rdesc)
{
	struct vep *ep = vep_of(e);
	struct reg *r = ((struct vmr *)mr)->reg;
	uint32_t rkey = 0;
	int ret;

	if (ep->state == EP_ERROR)
		return -ENOTCONN;
	if (len) {
		ret = kn__verbs_grant_new(ep, r, r->mr, mr->addr + off, len,
					  ibv_remote(access), &rkey);
		if (ret)
			return ret;
	}
	*rdesc = (struct kn__tp_rdesc){ .addr = (uintptr_t)(mr->addr + off),
					.len = len,
					.key = rkey,
					.access = access };
	return 0;
}

static int kn__verbs_ep_peer(const struct kn__tp_ep *e,
			     struct sockaddr_storage *ss)
{
	const struct vep *ep = (const struct vep *)e;
	const struct sockaddr *sa = ep->id ? rdma_get_peer_addr(ep->id) : NULL;

	if (!sa || (sa->sa_family != AF_INET && sa->sa_family != AF_INET6))
		return -ENOTCONN;
	memset(ss, 0, sizeof(*ss));
	memcpy(ss, sa,
	       sa->sa_family == AF_INET ? sizeof(struct sockaddr_in)
					: sizeof(struct sockaddr_in6));
	return 0;
}

static uint32_t lkey_of(const struct kn__tp_mr *mr)
{
	const struct vmr *m = (const struct vmr *)mr;

	return m->reg->mr ? m->reg->mr->lkey : 0;
}

/* ---- listeners and connections ---- */

static int kn__verbs_listen(struct kn__tp_ctx *ctx, const struct sockaddr *addr,
			    socklen_t addrlen, void *user,
			    struct kn__tp_listener **out)
{
	struct vctx *c = vctx_of(ctx);
	struct vlistener *l;
	int ret;

	(void)addrlen;
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->base.ctx = ctx;
	l->base.user = user;
	l->owner.is_listener = true;
	if (rdma_create_id(c->cm, &l->id, &l->owner, RDMA_PS_TCP)) {
		ret = -errno;
		free(l);
		return ret;
	}
	if (rdma_bind_addr(l->id, (struct sockaddr *)addr)) {
		ret = -errno;
		goto fail;
	}
	if (l->id->verbs && l->id->verbs != c->verbs) {
		vlog("the address to listen on is on %s, this context uses "
		     "%s (set KANEL_RDMA_DEVICE)",
		     ibv_get_device_name(l->id->verbs->device),
		     ibv_get_device_name(c->verbs->device));
		ret = -ENODEV;
		goto fail;
	}
	if (rdma_listen(l->id, 128)) {
		ret = -errno;
		goto fail;
	}
	l->next = c->listeners;
	c->listeners = l;
	*out = &l->base;
	return 0;
fail:
	rdma_destroy_id(l->id);
	free(l);
	return ret;
}

static int kn__verbs_listener_addr(const struct kn__tp_listener *listener,
				   struct sockaddr_storage *addr)
{
	const struct vlistener *l = (const struct vlistener *)listener;
	struct sockaddr *sa = rdma_get_local_addr(l->id);

	memset(addr, 0, sizeof(*addr));
	memcpy(addr, sa,
	       sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
					 : sizeof(struct sockaddr_in));
	return 0;
}

static void kn__verbs_listener_close(struct kn__tp_listener *listener)
{
	struct vlistener *l = (struct vlistener *)listener;
	struct vctx *c = vctx_of(listener->ctx);

	/* connections it accepted but did not report yet go with it */
	for (uint32_t s = 0; s < MAX_EPS; s++) {
		struct vep *ep = c->slots[s];

		if (ep && ep->listener == listener)
			kn__verbs_ep_free(ep);
	}
	for (struct vlistener **p = &c->listeners; *p; p = &(*p)->next)
		if (*p == l) {
			*p = l->next;
			break;
		}
	rdma_destroy_id(l->id);
	free(l);
}

static int kn__verbs_connect(struct kn__tp_ctx *ctx,
			     const struct sockaddr *addr, socklen_t addrlen,
			     void *user, struct kn__tp_ep **out)
{
	struct vctx *c = vctx_of(ctx);
	struct rdma_cm_id *id;
	struct vep *ep;
	int ret;

	(void)addrlen;
	if (rdma_create_id(c->cm, &id, NULL, RDMA_PS_TCP))
		return -errno;
	ep = ep_new(c, id, user);
	if (!ep) {
		rdma_destroy_id(id);
		return -EMFILE;
	}
	kn__tp_addr_name(addr, ep->peer, sizeof(ep->peer));
	ep->state = EP_RESOLVING;
	ep->deadline = now_s() + CONNECT_S;
	c->resolving++;
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)addr, RESOLVE_MS)) {
		ret = -errno;
		kn__verbs_ep_free(ep);
		return ret;
	}
	*out = &ep->base;
	return 0;
}

static void kn__verbs_ep_close(struct kn__tp_ep *e)
{
	struct vep *ep = vep_of(e);

	ep->zombie = true;
	ep->report_connect = false;
	if (ep->state != EP_ERROR)
		kn__verbs_ep_fail(ep, -ECANCELED, "closed");
	ep->report_disc = false;
	/* what is issued flushes; cancellations leave as it does */
	kn__verbs_kick(ep_ctx(ep));
	kn__verbs_ep_release(ep);
}

/* ---- posts ---- */

static struct vop *kn__verbs_op_new(struct vep *ep, uint32_t kind, int *err)
{
	struct vop *op;

	if (ep->state == EP_ERROR) {
		*err = -ENOTCONN;
		return NULL;
	}
	if (ep->op_tail - ep->op_head == OP_DEPTH) {
		*err = -EAGAIN;
		return NULL;
	}
	op = &ep->ops[ep->op_tail % OP_DEPTH];
	memset(op, 0, sizeof(*op));
	op->kind = kind;
	return op;
}

static int kn__verbs_op_post(struct vep *ep, struct vop *op, void *user)
{
	op->user = user;
	ep->op_tail++;
	kn__verbs_ep_issue(ep);
	return 0;
}

static int kn__verbs_post_write_imm(struct kn__tp_ep *e, struct kn__tp_mr *mr,
				    size_t off, size_t len,
				    const struct kn__tp_rdesc *dst,
				    uint64_t dst_off, uint32_t imm, void *user)
{
	struct vep *ep = vep_of(e);
	int err;
	struct vop *op = kn__verbs_op_new(ep, KN_TP_OP_WRITE_IMM, &err);

	if (!op)
		return err;
	op->laddr = mr->addr + off;
	op->lkey = lkey_of(mr);
	op->len = len;
	op->raddr = dst->addr + dst_off;
	op->rkey = dst->key;
	op->imm = imm;
	op->msg_no = ep->tx_msgs++;
	return kn__verbs_op_post(ep, op, user);
}

static int kn__verbs_post_read(struct kn__tp_ep *e, struct kn__tp_mr *mr,
			       size_t off, size_t len,
			       const struct kn__tp_rdesc *src, uint64_t src_off,
			       void *user)
{
	struct vep *ep = vep_of(e);
	int err;
	struct vop *op = kn__verbs_op_new(ep, KN_TP_OP_READ, &err);

	if (!op)
		return err;
	op->laddr = mr->addr + off;
	op->lkey = lkey_of(mr);
	op->len = len;
	op->raddr = src->addr + src_off;
	op->rkey = src->key;
	return kn__verbs_op_post(ep, op, user);
}

static int kn__verbs_post_send(struct kn__tp_ep *e, struct kn__tp_mr *mr,
			       size_t off, size_t len, void *user)
{
	struct vep *ep = vep_of(e);
	int err;
	struct vop *op;

	/* the peer's bounce buffers are its max_msg (known once open) */
	if (ep->state == EP_OPEN && len > ep->peer_max_msg)
		return -EMSGSIZE;
	op = kn__verbs_op_new(ep, KN_TP_OP_SEND, &err);
	if (!op)
		return err;
	op->laddr = mr->addr + off;
	op->lkey = lkey_of(mr);
	op->len = len;
	return kn__verbs_op_post(ep, op, user);
}

static int kn__verbs_post_recv(struct kn__tp_ep *e, struct kn__tp_mr *mr,
			       size_t off, size_t len, void *user)
{
	struct vep *ep = vep_of(e);
	struct vrecv *r;

	if (ep->state == EP_ERROR)
		return -ENOTCONN;
	if (ep->rv_tail - ep->rv_head == RV_DEPTH)
		return -EAGAIN;
	r = &ep->recvs[ep->rv_tail++ % RV_DEPTH];
	r->addr = mr->addr + off;
	r->len = len;
	r->user = user;
	if (ep->held_head != ep->held_tail)
		ready(ep);
	return 0;
}

/* ---- progress ---- */

static void kn__verbs_release_ready(struct vctx *c)
{
	struct vep *list = c->ready;

	c->ready = NULL;
	while (list) {
		struct vep *ep = list;

		list = ep->next_ready;
		ep->queued = false;
		kn__verbs_ep_release(
			ep); /* may free a zombie, or queue it again */
	}
}

static void wake_events(struct vctx *c)
{
	struct ibv_cq *cq;
	void *cq_ctx;
	uint64_t v;

	if (read(c->evfd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		vlog("eventfd: %s", strerror(errno));
	while (ibv_get_cq_event(c->chan, &cq, &cq_ctx) == 0) {
		c->armed = false;
		if (++c->unacked == ACK_EACH) {
			ibv_ack_cq_events(c->cq, c->unacked);
			c->unacked = 0;
		}
	}
}

static int verbs_poll(struct kn__tp_ctx *ctx, struct kn__tp_completion *out,
		      int max)
{
	struct vctx *c = vctx_of(ctx);
	int n = 0;

	c->in_poll = true;
	wake_events(c);
	kn__verbs_drain_cm(c);
	kn__verbs_drain_async(c);
	kn__verbs_check_alarm(c);
	if (c->resolving)
		kn__verbs_check_deadlines(c);
	for (int round = 0; round < 2; round++) {
		kn__verbs_drain_cq(c);
		kn__verbs_release_ready(c);
		n += kn__tp_cq_take(&c->cq_ring, out + n, max - n);
		if (n || c->armed)
			break;
		/* idle: arm, then look once more for what raced the arming */
		if (ibv_req_notify_cq(c->cq, 0) == 0)
			c->armed = true;
	}
	if (c->cq_ring.head != c->cq_ring.tail || c->ready)
		kn__verbs_kick(c); /* more to report: keep the fd readable */
	c->in_poll = false;
	return n;
}

static int verbs_fd(const struct kn__tp_ctx *ctx)
{
	return ((const struct vctx *)ctx)->epfd;
}

const struct kn__tp_ops kn__tp_verbs_ops = {
	.name = "verbs",
	/* posts above the port's max_msg_sz are split into pieces; this is
	 * what the completion's and the engine's lengths are sized for */
	.max_len = 1u << 31,
	.ctx_create = verbs_ctx_create,
	.ctx_destroy = verbs_ctx_destroy,
	.mr_reg = kn__verbs_mr_reg,
	.mr_dereg = kn__verbs_mr_dereg,
	.ep_grant = kn__verbs_ep_grant,
	.ep_peer = kn__verbs_ep_peer,
	.listen = kn__verbs_listen,
	.listener_addr = kn__verbs_listener_addr,
	.listener_close = kn__verbs_listener_close,
	.connect = kn__verbs_connect,
	.adopt = NULL,
	.ep_close = kn__verbs_ep_close,
	.post_write_imm = kn__verbs_post_write_imm,
	.post_read = kn__verbs_post_read,
	.post_send = kn__verbs_post_send,
	.post_recv = kn__verbs_post_recv,
	.poll = verbs_poll,
	.fd = verbs_fd,
};
