/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ctx.c - the verbs provider's context: the device rdma_cm picked and
 * its alarm, the protection domain, completion queue and channel,
 * shared receive queue, bounce buffers and mailboxes, and the fds a
 * caller sleeps on; the poll loop that drives the other files; and the
 * ops table.  The objects, and the order in which the files call each
 * other, are in verbs_priv.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "verbs_priv.h"

/* Each device's alarm, shared by the contexts on it (see struct dev_alarm). */
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

static void verbs_ctx_destroy(struct kn__tp_ctx *ctx);

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
		     c->name,
		     getenv("KANEL_RDMA_MW") ? " (KANEL_RDMA_MW=0)" : "");
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
	kn__list_init(&c->mrs);
	c->ep_free = kn__verbs_ep_free;
	c->ep_established = kn__verbs_ep_established;
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
	struct kn__list *n, *tmp;

	for (uint32_t s = 0; s < MAX_EPS; s++)
		if (c->slots[s])
			kn__verbs_ep_free(c->slots[s]);
	while (c->listeners)
		kn__verbs_listener_close(&c->listeners->base);
	kn__verbs_grants_drop(c, NULL, NULL);
	kn__list_each_safe(n, tmp, &c->mrs)
		free(container_of(n, struct vmr, link));
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
