/* SPDX-License-Identifier: Apache-2.0 */
/*
 * datapath.c - the verbs provider's data path: the posts, each
 * endpoint's ring of operations and the work requests they become, the
 * completions from the completion queue and the shared receive queue's
 * bounce buffers, and the release of what an endpoint owes the
 * application, in order (kn__verbs_ep_release).  An endpoint's failure
 * (kn__verbs_ep_fail) is here too: most failures show in completions.
 * The per-operation and per-completion helpers are static here so that
 * they inline; the context's poll loop (ctx.c) calls in.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "verbs_priv.h"

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
void kn__verbs_kick(struct vctx *c)
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

void kn__verbs_ep_fail(struct vep *ep, int err, const char *why, ...)
{
	bool first = true;
	va_list ap;

	if (ep->state == EP_ERROR)
		return;
	if (!ep->zombie) { /* closed: nobody to tell */
		va_start(ap, why);
		kn__tp_fail_vlog("verbs", ep->peer, err, why, ap);
		va_end(ap);
	}
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
void kn__verbs_ep_release(struct vep *ep)
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
		c->ep_free(ep);
	return;
full:
	ready(ep); /* the rest at the next poll */
}

/* ---- bounce buffers ---- */

void kn__verbs_bounce_repost(struct vctx *c, uint32_t idx)
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
void kn__verbs_ep_issue(struct vep *ep)
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
				wr->bind_mw.bind_info =
					(struct ibv_mw_bind_info){
						.mr = op->bind_mr,
						.addr = (uintptr_t)op->laddr,
						.length = op->len,
						.mw_access_flags =
							op->mw_access,
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
		c->ep_established(ep);
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
void kn__verbs_drain_cq(struct vctx *c)
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

static uint32_t lkey_of(const struct kn__tp_mr *mr)
{
	const struct vmr *m = (const struct vmr *)mr;

	return m->reg->mr ? m->reg->mr->lkey : 0;
}

/* ---- posts ---- */

struct vop *kn__verbs_op_new(struct vep *ep, uint32_t kind, int *err)
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

int kn__verbs_op_post(struct vep *ep, struct vop *op, void *user)
{
	op->user = user;
	ep->op_tail++;
	kn__verbs_ep_issue(ep);
	return 0;
}

int kn__verbs_post_write_imm(struct kn__tp_ep *e, struct kn__tp_mr *mr,
			     size_t off, size_t len,
			     const struct kn__tp_rdesc *dst, uint64_t dst_off,
			     uint32_t imm, void *user)
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

int kn__verbs_post_read(struct kn__tp_ep *e, struct kn__tp_mr *mr, size_t off,
			size_t len, const struct kn__tp_rdesc *src,
			uint64_t src_off, void *user)
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

int kn__verbs_post_send(struct kn__tp_ep *e, struct kn__tp_mr *mr, size_t off,
			size_t len, void *user)
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

int kn__verbs_post_recv(struct kn__tp_ep *e, struct kn__tp_mr *mr, size_t off,
			size_t len, void *user)
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

void kn__verbs_release_ready(struct vctx *c)
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
