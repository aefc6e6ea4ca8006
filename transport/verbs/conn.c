/* SPDX-License-Identifier: Apache-2.0 */
/*
 * conn.c - the verbs provider's endpoints and connections: endpoint
 * slots and their queue pairs, the hello carried in rdma_cm's private
 * data and the INFO message that opens the mailbox, the rdma_cm events
 * that bring a connection up or down, the device's async events and
 * the connect deadline that fail endpoints, listeners, connect and
 * close.  What an open endpoint does with its queue pair is in
 * datapath.c; its grants are in mr.c.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "verbs_priv.h"

static struct vep *ep_of_id(const struct rdma_cm_id *id)
{
	struct owner *o = id->context;

	return o && !o->is_listener ? container_of(o, struct vep, owner) : NULL;
}

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
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

void kn__verbs_ep_free(struct vep *ep)
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
void kn__verbs_ep_established(struct vep *ep)
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
	kn__tp_addr_name(rdma_get_peer_addr(ep->id), ep->peer,
			 sizeof(ep->peer));
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
	kn__tp_addr_name(rdma_get_peer_addr(ev->id), ep->peer,
			 sizeof(ep->peer));
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

void kn__verbs_drain_cm(struct vctx *c)
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

void kn__verbs_drain_async(struct vctx *c)
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
void kn__verbs_check_alarm(struct vctx *c)
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

void kn__verbs_check_deadlines(struct vctx *c)
{
	double t = now_s();

	for (uint32_t s = 0; s < MAX_EPS && c->resolving; s++) {
		struct vep *ep = c->slots[s];

		if (ep && ep->state == EP_RESOLVING && t > ep->deadline)
			kn__verbs_ep_fail(ep, -ETIMEDOUT,
					  "no connection in %d s", CONNECT_S);
	}
}

int kn__verbs_ep_peer(const struct kn__tp_ep *e, struct sockaddr_storage *ss)
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

/* ---- listeners and connections ---- */

int kn__verbs_listen(struct kn__tp_ctx *ctx, const struct sockaddr *addr,
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

int kn__verbs_listener_addr(const struct kn__tp_listener *listener,
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

void kn__verbs_listener_close(struct kn__tp_listener *listener)
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

int kn__verbs_connect(struct kn__tp_ctx *ctx, const struct sockaddr *addr,
		      socklen_t addrlen, void *user, struct kn__tp_ep **out)
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

void kn__verbs_ep_close(struct kn__tp_ep *e)
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
