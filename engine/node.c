/* SPDX-License-Identifier: Apache-2.0 */
/*
 * node.c - control channels over the transport, the job-secret
 * handshake on each, and the progress loop step that dispatches every
 * completion to the role.
 *
 * A stranger gets little: a connection that has not authenticated
 * within HANDSHAKE_S is closed, at most PENDING_MAX connections per
 * listener may be in the handshake at once (more are closed as they
 * come), and every refusal is logged once, naming the peer's address,
 * at most REFUSALS_PER_S lines a second (the rest are counted and the
 * count logged).  Log lines are written whole by one write(2), and every
 * byte outside printable ASCII in them is escaped, so that text a peer
 * sent (an ERROR's) can neither forge lines nor splice with another
 * process's.
 */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "node.h"
#include "roles.h"

#define RECVS	       16
#define SENDS	       64
#define BUSY_POLL_S    50e-6 /* spin this long before sleeping */
#define RETRY_S	       0.1   /* between connects to a peer not yet up */
#define CHAN_BYTES     ((size_t)(RECVS + SENDS) * KN__MSG_MAX)
#define HANDSHAKE_S    5.0 /* an acceptor's handshake must end by then */
#define PENDING_MAX    64  /* connections in the handshake at once */
#define REFUSALS_PER_S 5   /* refusal lines a second; more are counted */

enum chan_state {
	CH_CONNECTING,	   /* connector: waiting for the connection */
	CH_WAIT_CHALLENGE, /* connector: waiting for the challenge */
	CH_WAIT_ANSWER,	   /* acceptor: challenge sent */
	CH_WAIT_CONFIRM,   /* connector: answer sent */
	CH_OPEN,
};

/*
 * A post that waits on its channel's pending list: a write (@mr set) or
 * a message (@mr NULL, @data its encoded bytes, ours).  See kn__chan_write.
 */
struct kn__chan_pend {
	struct kn__tp_mr *mr;
	void *user; /* a write's context */
	uint8_t *data;
	size_t off, len;
	struct kn__tp_rdesc dst;
	uint64_t dst_off;
	uint32_t imm;
};

/* A posted message buffer; the post's user pointer. */
struct kn__chan_post {
	struct kn__chan *ch;
	uint32_t idx;
	bool send;
};

double kn__now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

size_t kn__escape(const char *in, char *out, size_t size)
{
	static const char hex[] = "0123456789abcdef";
	size_t k = 0;

	if (!size)
		return 0;
	for (; *in && k + 1 < size; in++) {
		unsigned char ch = (unsigned char)*in;

		if (ch >= 0x20 && ch < 0x7f && ch != '\\') {
			out[k++] = (char)ch;
			continue;
		}
		if (k + 4 >= size)
			break;
		out[k++] = '\\';
		if (ch == '\\') {
			out[k++] = '\\';
			continue;
		}
		out[k++] = 'x';
		out[k++] = hex[ch >> 4];
		out[k++] = hex[ch & 15];
	}
	out[k] = 0;
	return k;
}

/*
 * The last line logged in this process, without "kanel: " and the
 * newline, for kn_last_message(): bindings that raise an exception
 * carry the engine's reason in it.
 */
static pthread_mutex_t last_lock = PTHREAD_MUTEX_INITIALIZER;
static char last_line[2048];
#define PREFIX (sizeof("kanel: ") - 1)

static void vlog_line(const char *name, const char *fmt, va_list ap)
{
	char msg[1024], line[2048];
	int n;

	vsnprintf(msg, sizeof(msg), fmt, ap);
	n = snprintf(line, sizeof(line), "kanel: %s: ", name);
	if (n < 0 || (size_t)n >= sizeof(line))
		return;
	n += (int)kn__escape(msg, line + n, sizeof(line) - (size_t)n - 1);
	pthread_mutex_lock(&last_lock);
	memcpy(last_line, line + PREFIX, (size_t)n - PREFIX);
	last_line[n - PREFIX] = '\0';
	pthread_mutex_unlock(&last_lock);
	line[n++] = '\n';
	/* one write: lines of processes sharing stderr never splice */
	(void)!write(STDERR_FILENO, line, (size_t)n);
}

void kn__log(const struct kn__node *n, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog_line(n->name, fmt, ap);
	va_end(ap);
}

void kn__log_as(const char *name, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog_line(name, fmt, ap);
	va_end(ap);
}

size_t kn_last_message(char *buf, size_t cap)
{
	size_t len;

	if (!buf || !cap)
		return 0;
	pthread_mutex_lock(&last_lock);
	len = strlen(last_line);
	if (len >= cap)
		len = cap - 1;
	memcpy(buf, last_line, len);
	buf[len] = '\0';
	pthread_mutex_unlock(&last_lock);
	return len;
}

/* Say how many refusals went unlogged in the window that ended. */
static void refusals_flush(struct kn__node *n, double t)
{
	if (t - n->refuse_window < 1.0)
		return;
	if (n->refuse_quiet)
		kn__log(n,
			"%u more connections refused in the last %.0f s "
			"(not logged one by one)",
			n->refuse_quiet, t - n->refuse_window);
	n->refuse_window = t;
	n->refuse_lines = 0;
	n->refuse_quiet = 0;
}

/* Log that the peer @who was refused, and why; rate-limited. */
static void refusal(struct kn__node *n, const char *who, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void refusal(struct kn__node *n, const char *who, const char *fmt, ...)
{
	char why[256];
	va_list ap;

	refusals_flush(n, kn__now());
	if (n->refuse_lines >= REFUSALS_PER_S) {
		n->refuse_quiet++;
		return;
	}
	n->refuse_lines++;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	kn__log(n, "refused %s: %s", who, why);
}

int kn__node_init(struct kn__node *n, const char *transport, uint32_t self_role,
		  uint32_t self_rank, const uint8_t *secret, size_t secret_len,
		  const struct kn__node_ops *ops, void *role)
{
	struct kn__tp_ctx_attr attr = { .provider = transport,
					.max_msg = KN__MSG_MAX };
	int ret;

	if (!secret_len || secret_len > KN__SECRET_MAX)
		return -EINVAL;
	memset(n, 0, sizeof(*n));
	n->ops = ops;
	n->role = role;
	n->self_role = self_role;
	n->self_rank = self_rank;
	memcpy(n->secret, secret, secret_len);
	n->secret_len = secret_len;
	if (self_role == KN__ROLE_COORDINATOR)
		snprintf(n->name_buf, sizeof(n->name_buf), "coordinator");
	else
		snprintf(n->name_buf, sizeof(n->name_buf), "%s %u",
			 self_role == KN__ROLE_SERVER ? "server" : "worker",
			 self_rank);
	n->name = n->name_buf;
	ret = kn__tp_ctx_create(&attr, &n->ctx);
	if (ret == -ENOENT)
		kn__log(n, "transport '%s' is not available in this build",
			transport);
	else if (ret == -ENODEV)
		kn__log(n, "transport '%s': no RDMA device here", transport);
	else if (ret)
		kn__log(n, "transport '%s': %s", transport, strerror(-ret));
	return ret;
}

static void chan_free(struct kn__chan *ch)
{
	for (uint32_t i = ch->pq_head; i != ch->pq_tail; i++)
		free(ch->pq[i & (ch->pq_cap - 1)].data);
	free(ch->pq);
	free(ch->wq);
	kn__tp_mr_dereg(ch->mr);
	if (ch->buf)
		munmap(ch->buf, CHAN_BYTES);
	free(ch->posts);
	free(ch->free_sends);
	free(ch);
}

void kn__node_fini(struct kn__node *n)
{
	/* the context takes every endpoint and region with it */
	kn__tp_ctx_destroy(n->ctx);
	n->ctx = NULL;
	while (n->chans) {
		struct kn__chan *ch = n->chans;

		n->chans = ch->next;
		ch->mr = NULL;
		chan_free(ch);
	}
	kn__auth_wipe(n->secret, sizeof(n->secret));
}

static uint8_t *slot(struct kn__chan *ch, uint32_t idx)
{
	return ch->buf + (size_t)idx * KN__MSG_MAX;
}

static int post_recv(struct kn__chan *ch, uint32_t idx)
{
	int ret = kn__tp_post_recv(ch->ep, ch->mr, (size_t)idx * KN__MSG_MAX,
				   KN__MSG_MAX, &ch->posts[idx]);

	if (!ret)
		ch->outstanding++;
	return ret;
}

static struct kn__chan *chan_new(struct kn__node *n, struct kn__tp_ep *ep,
				 bool acceptor, void *user)
{
	struct kn__chan *ch = calloc(1, sizeof(*ch));
	size_t bytes = CHAN_BYTES;

	if (!ch)
		return NULL;
	ch->node = n;
	ch->ep = ep;
	ch->acceptor = acceptor;
	ch->user = user;
	/* a mapping of its own: a closed channel's memory goes back */
	ch->buf = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (ch->buf == MAP_FAILED)
		ch->buf = NULL;
	ch->posts = calloc(RECVS + SENDS, sizeof(*ch->posts));
	ch->free_sends = calloc(SENDS, sizeof(*ch->free_sends));
	if (!ch->buf || !ch->posts || !ch->free_sends ||
	    kn__tp_mr_reg(n->ctx, ch->buf, bytes, 0, &ch->mr)) {
		chan_free(ch);
		return NULL;
	}
	for (uint32_t i = 0; i < RECVS + SENDS; i++)
		ch->posts[i] = (struct kn__chan_post){ .ch = ch,
						       .idx = i,
						       .send = i >= RECVS };
	for (uint32_t i = 0; i < SENDS; i++)
		ch->free_sends[ch->nfree++] = RECVS + i;
	snprintf(ch->name, sizeof(ch->name), "a new peer");
	ch->next = n->chans;
	n->chans = ch;
	return ch;
}

/* Post the encoded message in send buffer @idx. */
static int post_send(struct kn__chan *ch, uint32_t idx, size_t len)
{
	int ret = kn__tp_post_send(ch->ep, ch->mr, (size_t)idx * KN__MSG_MAX,
				   len, &ch->posts[idx]);

	if (ret) {
		ch->free_sends[ch->nfree++] = idx;
		return ret;
	}
	ch->outstanding++;
	return 0;
}

/*
 * Room for one more in the ring *@v of *@cap elements of @size bytes
 * (a power of two, or 0), [@head, @tail) in use with free-running
 * indices: doubled when full, the elements keeping their indices.
 */
static int ring_room(void **v, uint32_t *cap, size_t size, uint32_t head,
		     uint32_t tail)
{
	uint32_t ncap = *cap ? 2 * *cap : 64;
	char *nv;

	if (tail - head < *cap)
		return 0;
	nv = malloc((size_t)ncap * size);
	if (!nv)
		return -ENOMEM;
	for (uint32_t i = head; i != tail; i++)
		memcpy(nv + (size_t)(i & (ncap - 1)) * size,
		       (char *)*v + (size_t)(i & (*cap - 1)) * size, size);
	free(*v);
	*v = nv;
	*cap = ncap;
	return 0;
}

/*
 * Post a write on @ch's endpoint.  The transport's context is the
 * channel, and the role's @user goes into the channel's ring of writes
 * in flight: an endpoint's posts complete in the order they were posted,
 * so the completion takes the oldest (and the channel outlives its
 * writes: they count as outstanding).
 */
static int post_write(struct kn__chan *ch, struct kn__tp_mr *mr, size_t off,
		      size_t len, const struct kn__tp_rdesc *dst,
		      uint64_t dst_off, uint32_t imm, void *user)
{
	int ret = ring_room((void **)&ch->wq, &ch->wq_cap, sizeof(*ch->wq),
			    ch->wq_head, ch->wq_tail);

	if (!ret)
		ret = kn__tp_post_write_imm(ch->ep, mr, off, len, dst, dst_off,
					    imm, ch);
	if (ret)
		return ret;
	ch->wq[ch->wq_tail++ & (ch->wq_cap - 1)] = user;
	ch->outstanding++;
	return 0;
}

static bool pend_empty(const struct kn__chan *ch)
{
	return ch->pq_head == ch->pq_tail;
}

/* @e waits behind what waits on @ch already. */
static int pend_add(struct kn__chan *ch, const struct kn__chan_pend *e)
{
	int ret = ring_room((void **)&ch->pq, &ch->pq_cap, sizeof(*ch->pq),
			    ch->pq_head, ch->pq_tail);

	if (!ret)
		ch->pq[ch->pq_tail++ & (ch->pq_cap - 1)] = *e;
	return ret;
}

/*
 * Post what waits on @ch, oldest first, while the transport takes it
 * and a message finds a send buffer: called from the completions of
 * @ch's posts, which make that room.  A write that fails here completes
 * with its error, a message that fails closes the channel.
 */
static void drain(struct kn__chan *ch)
{
	struct kn__node *n = ch->node;

	while (!pend_empty(ch) && ch->ep) {
		struct kn__chan_pend e = ch->pq[ch->pq_head & (ch->pq_cap - 1)];
		uint32_t idx;
		int ret;

		if (e.mr) {
			ret = post_write(ch, e.mr, e.off, e.len, &e.dst,
					 e.dst_off, e.imm, e.user);
		} else {
			if (!ch->nfree)
				return; /* a send's completion brings us back */
			idx = ch->free_sends[--ch->nfree];
			memcpy(slot(ch, idx), e.data, e.len);
			ret = post_send(ch, idx, e.len);
		}
		if (ret == -EAGAIN)
			return;
		ch->pq_head++;
		free(e.data);
		if (ret && e.mr && n->ops->written)
			n->ops->written(n, e.user, ret);
		else if (ret && !e.mr)
			kn__chan_close(ch);
	}
}

/* @ch is closed and its endpoint gone: what waits never leaves. */
static void pend_cancel(struct kn__chan *ch)
{
	struct kn__node *n = ch->node;

	while (!pend_empty(ch)) {
		struct kn__chan_pend e =
			ch->pq[ch->pq_head++ & (ch->pq_cap - 1)];

		free(e.data);
		if (e.mr && n->ops->written)
			n->ops->written(n, e.user, -ECANCELED);
	}
}

static bool sends_pending(const struct kn__chan *ch)
{
	return ch->nfree < SENDS || !pend_empty(ch);
}

int kn__chan_write(struct kn__chan *ch, struct kn__tp_mr *mr, size_t off,
		   size_t len, const struct kn__tp_rdesc *dst, uint64_t dst_off,
		   uint32_t imm, void *user)
{
	if (ch->closed || !ch->ep)
		return -ENOTCONN;
	if (pend_empty(ch)) {
		int ret = post_write(ch, mr, off, len, dst, dst_off, imm, user);

		if (ret != -EAGAIN)
			return ret;
	}
	/* the transport's queue is full, or others wait: behind them */
	return pend_add(ch, &(struct kn__chan_pend){ .mr = mr,
						     .user = user,
						     .off = off,
						     .len = len,
						     .dst = *dst,
						     .dst_off = dst_off,
						     .imm = imm });
}

int kn__chan_send(struct kn__chan *ch, const struct kn__msg *m)
{
	struct kn__chan_pend e = { 0 };
	int len, ret;

	if (ch->closed)
		return -ENOTCONN;
	if (ch->nfree && pend_empty(ch)) {
		uint32_t idx = ch->free_sends[--ch->nfree];

		len = kn__msg_encode(m, slot(ch, idx), KN__MSG_MAX);
		if (len < 0) {
			ch->free_sends[ch->nfree++] = idx;
			return len;
		}
		ret = post_send(ch, idx, (size_t)len);
		if (ret != -EAGAIN)
			return ret;
	}
	/* no send buffer, no room in the transport, or others wait */
	e.data = malloc(KN__MSG_MAX);
	if (!e.data)
		return -ENOMEM;
	len = kn__msg_encode(m, e.data, KN__MSG_MAX);
	e.len = len < 0 ? 0 : (size_t)len;
	ret = len < 0 ? len : pend_add(ch, &e);
	if (ret)
		free(e.data);
	return ret;
}

/* Send an ERROR with @text, logging nothing. */
static void send_error(struct kn__chan *ch, int code, const char *text)
{
	struct kn__msg m = { .type = KN__MSG_ERROR };

	m.u.error.code = code < 0 ? code : -EPROTO;
	snprintf(m.u.error.text, sizeof(m.u.error.text), "%s", text);
	if (kn__chan_send(ch, &m) == 0)
		ch->linger = true; /* a close lets the error leave first */
}

void kn__chan_send_error(struct kn__chan *ch, int code, const char *fmt, ...)
{
	char text[sizeof(((struct kn__msg *)0)->u.error.text)];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	kn__log(ch->node, "%s: %s", ch->name, text);
	send_error(ch, code, text);
}

/* An acceptor's handshake is over (done, or the channel closed). */
static void pending_done(struct kn__chan *ch)
{
	if (ch->pending) {
		ch->pending = false;
		ch->node->pending--;
	}
}

/*
 * Close @ch, telling the role (once) if it knows the channel: one it
 * connected itself, or one that passed the handshake.
 */
static void chan_close_status(struct kn__chan *ch, int status)
{
	struct kn__node *n = ch->node;

	if (ch->closed)
		return;
	ch->closed = true;
	pending_done(ch);
	if ((!ch->acceptor || ch->state == CH_OPEN) && n->ops->closed)
		n->ops->closed(n, ch, status);
	/* an ERROR on its way goes first: closing would cancel it */
	if (ch->ep && ch->linger && sends_pending(ch) && !status)
		return;
	if (ch->ep)
		kn__tp_ep_close(ch->ep);
	ch->ep = NULL;
	/*
	 * It is freed once its cancelled posts are back, at the end of a
	 * dispatch (completions of this batch may still name it).
	 */
}

/*
 * What waited on a closed channel whose endpoint is gone completes with
 * -ECANCELED, from here (the progress loop), never from inside the
 * role's own kn__chan_close; then free the closed channels that the
 * transport holds nothing of.
 */
static void sweep(struct kn__node *n)
{
	for (struct kn__chan *ch = n->chans; ch; ch = ch->next)
		if (ch->closed && !ch->ep)
			pend_cancel(ch);
	/* no role runs here: the list stays as it is while it is cut */
	for (struct kn__chan **pp = &n->chans, *ch; (ch = *pp);) {
		if (ch->closed && !ch->outstanding && pend_empty(ch)) {
			*pp = ch->next;
			chan_free(ch);
		} else {
			pp = &ch->next;
		}
	}
}

bool kn__chan_open(const struct kn__chan *ch)
{
	return ch->state == CH_OPEN && !ch->closed;
}

void kn__chan_close(struct kn__chan *ch)
{
	chan_close_status(ch, 0);
}

/* ---- the handshake ---- */

static void name_peer(struct kn__chan *ch)
{
	if (ch->peer_role == KN__ROLE_COORDINATOR)
		snprintf(ch->name, sizeof(ch->name), "coordinator");
	else
		snprintf(ch->name, sizeof(ch->name), "%s %u",
			 kn__role_name(ch->peer_role), ch->peer_rank);
}

static int send_auth(struct kn__chan *ch, const uint8_t *data, size_t len)
{
	struct kn__msg m = { .type = KN__MSG_AUTH };

	if (len > KN__AUTH_MAX)
		return -EINVAL;
	m.u.auth.len = (uint32_t)len;
	memcpy(m.u.auth.data, data, len);
	return kn__chan_send(ch, &m);
}

static void opened(struct kn__chan *ch)
{
	pending_done(ch);
	ch->state = CH_OPEN;
	name_peer(ch);
	if (ch->node->verbose)
		kn__log(ch->node, "%s connected", ch->name);
	if (ch->node->ops->open)
		ch->node->ops->open(ch->node, ch);
}

/* An AUTH message in the handshake; false: refuse the peer. */
static bool auth_step(struct kn__chan *ch, const struct kn__msg *m)
{
	struct kn__node *n = ch->node;
	const uint8_t *data = m->u.auth.data;
	size_t len = m->u.auth.len;
	struct kn__auth_confirm conf;
	uint8_t out[KN_AUTH_MSG_MAX];
	int ret;

	switch (ch->state) {
	case CH_WAIT_CHALLENGE:
		ret = kn__auth_challenge_decode(data, len, &ch->challenge);
		if (!ret)
			ret = kn__auth_answer_make(n->secret, n->secret_len,
						   &ch->challenge, n->self_role,
						   n->self_rank, &ch->answer);
		if (ret)
			return false;
		kn__auth_answer_encode(&ch->answer, out);
		ch->state = CH_WAIT_CONFIRM;
		return send_auth(ch, out, KN_AUTH_ANSWER_LEN) == 0;
	case CH_WAIT_ANSWER:
		ret = kn__auth_answer_decode(data, len, &ch->answer);
		if (!ret)
			ret = kn__auth_answer_check(n->secret, n->secret_len,
						    &ch->challenge,
						    &ch->answer);
		if (!ret)
			ret = kn__auth_confirm_make(n->secret, n->secret_len,
						    &ch->challenge, &ch->answer,
						    &conf);
		if (ret) {
			refusal(n, ch->name, "%s",
				ret == -EACCES ? "it does not know the job "
						 "secret"
					       : "a malformed handshake");
			send_error(ch, -EACCES, "authentication failed");
			return false;
		}
		kn__auth_confirm_encode(&conf, out);
		if (send_auth(ch, out, KN_AUTH_CONFIRM_LEN))
			return false;
		ch->peer_role = ch->answer.role;
		ch->peer_rank = ch->answer.id;
		opened(ch);
		return true;
	case CH_WAIT_CONFIRM:
		ret = kn__auth_confirm_decode(data, len, &conf);
		if (!ret)
			ret = kn__auth_confirm_check(n->secret, n->secret_len,
						     &ch->challenge,
						     &ch->answer, &conf);
		if (ret) {
			kn__log(n,
				"%s does not know the job secret: "
				"disconnecting",
				ch->name);
			return false;
		}
		opened(ch);
		return true;
	default:
		return false;
	}
}

/* A new connection: challenge it. */
static void accepted(struct kn__node *n, struct kn__tp_ep *ep)
{
	uint8_t out[KN_AUTH_CHALLENGE_LEN];
	struct sockaddr_storage ss;
	char who[sizeof(((struct kn__chan *)0)->name)] = "a peer";
	struct kn__chan *ch;

	if (kn__tp_ep_peer(ep, &ss) == 0)
		kn__addr_name(&ss, who, sizeof(who));
	if (n->pending >= PENDING_MAX) {
		refusal(n, who, "%u connections are in the handshake already",
			PENDING_MAX);
		kn__tp_ep_close(ep);
		return;
	}
	ch = chan_new(n, ep, true, NULL);
	if (!ch) {
		refusal(n, who, "out of memory for a new connection");
		kn__tp_ep_close(ep);
		return;
	}
	snprintf(ch->name, sizeof(ch->name), "%s", who);
	ch->pending = true;
	n->pending++;
	ch->deadline = kn__now() + HANDSHAKE_S;
	kn__tp_ep_set_user(ep, ch);
	for (uint32_t i = 0; i < RECVS; i++)
		post_recv(ch, i);
	ch->state = CH_WAIT_ANSWER;
	if (kn__auth_challenge_make(&ch->challenge)) {
		kn__chan_close(ch);
		return;
	}
	kn__auth_challenge_encode(&ch->challenge, out);
	if (send_auth(ch, out, sizeof(out)))
		kn__chan_close(ch);
}

/* ---- progress ---- */

static void on_recv(struct kn__chan *ch, struct kn__chan_post *p,
		    uint64_t bytes)
{
	struct kn__node *n = ch->node;
	struct kn__msg m;
	int ret = kn__msg_decode(slot(ch, p->idx), bytes, &m);

	if (ret && ch->pending) {
		refusal(n, ch->name, "a malformed message in the handshake");
		kn__chan_close(ch);
		return;
	}
	if (ret) {
		kn__log(n, "%s sent a malformed message: closing", ch->name);
		kn__chan_close(ch);
		return;
	}
	if (ch->state != CH_OPEN) {
		if (m.type == KN__MSG_ERROR && ch->pending) {
			/* escaped like every log line: it cannot forge one */
			refusal(n, ch->name,
				"an error before the handshake: %s",
				m.u.error.text);
			kn__chan_close(ch);
			return;
		}
		if (m.type == KN__MSG_ERROR) { /* the peer refused us */
			kn__log(n, "%s: %s", ch->name, m.u.error.text);
			kn__chan_close(ch);
			return;
		}
		if (m.type != KN__MSG_AUTH) {
			if (ch->pending)
				refusal(n, ch->name, "%s before the handshake",
					kn__msg_name(m.type));
			else
				kn__log(n,
					"%s: %s before the handshake: "
					"closing",
					ch->name, kn__msg_name(m.type));
			kn__chan_close(ch);
			return;
		}
		if (!auth_step(ch, &m)) {
			kn__chan_close(ch);
			return;
		}
	} else if (m.type == KN__MSG_AUTH) {
		kn__log(n, "%s: a handshake message after the handshake",
			ch->name);
		kn__chan_close(ch);
		return;
	} else if (n->ops->message) {
		n->ops->message(n, ch, &m);
	}
	if (ch->closed)
		return;
	ret = post_recv(ch, p->idx);
	/*
	 * -ENOTCONN: the endpoint failed after this message came (the peer
	 * sent it, then hung up).  Messages behind it are delivered still,
	 * and its DISCONNECT closes the channel with the reason; closing
	 * here would lose them (a refusal's ERROR behind its CONFIRM).
	 */
	if (ret && ret != -ENOTCONN)
		kn__chan_close(ch);
}

/* A lingering close ends once its last message has left. */
static void linger_end(struct kn__chan *ch, int status)
{
	if (ch->ep && (!sends_pending(ch) || status)) {
		kn__tp_ep_close(ch->ep);
		ch->ep = NULL;
	}
}

static void dispatch(struct kn__node *n, const struct kn__tp_completion *c)
{
	struct kn__chan *ch;
	struct kn__chan_post *p;
	void *user;

	switch (c->op) {
	case KN_TP_OP_ACCEPT:
		accepted(n, c->ep);
		return;
	case KN_TP_OP_CONNECT:
		ch = c->user;
		if (c->status == -ECONNREFUSED && kn__now() < n->retry_until) {
			/* not listening yet: again in a moment */
			kn__tp_ep_close(ch->ep);
			ch->ep = NULL;
			ch->retry_at = kn__now() + RETRY_S;
			return;
		}
		if (c->status) {
			kn__log(n, "connecting to %s: %s", ch->name,
				strerror(-c->status));
			chan_close_status(ch, c->status);
			return;
		}
		ch->state = CH_WAIT_CHALLENGE;
		return;
	case KN_TP_OP_DISCONNECT:
		ch = c->user;
		if (ch && !ch->closed && !ch->acceptor &&
		    ch->state == CH_WAIT_CHALLENGE &&
		    kn__now() < n->retry_until) {
			/*
			 * Closed before its challenge came: the acceptor holds
			 * as many handshakes as it takes at once (a job's
			 * workers all connect together), or it is going down.
			 * Again in a moment, spread by rank so that a crowd
			 * does not come back together; a peer that is gone
			 * stays refused, and the start-up deadline ends it.
			 */
			kn__tp_ep_close(ch->ep);
			ch->ep = NULL;
			ch->retry_at = kn__now() + RETRY_S +
				       (double)(n->self_rank % 64) * 0.005;
			return;
		}
		if (ch && !ch->closed) {
			chan_close_status(ch, c->status);
		} else if (ch && ch->ep) { /* lingering: nothing will leave */
			kn__tp_ep_close(ch->ep);
			ch->ep = NULL;
		}
		return;
	case KN_TP_OP_RECV:
	case KN_TP_OP_SEND:
		p = c->user;
		ch = p->ch;
		ch->outstanding--;
		if (p->send) {
			ch->free_sends[ch->nfree++] = p->idx;
			drain(ch);
		}
		if (ch->closed) {
			linger_end(ch, c->status);
			return;
		}
		if (c->status)
			return; /* the endpoint failed: CONNECT or DISCONNECT
				   says so, and closes the channel */
		if (c->op == KN_TP_OP_RECV)
			on_recv(ch, p, c->bytes);
		return;
	case KN_TP_OP_RECV_IMM:
		ch = c->user;
		if (ch && !ch->closed && ch->state == CH_OPEN && n->ops->imm)
			n->ops->imm(n, ch, c->imm, c->bytes);
		return;
	case KN_TP_OP_WRITE_IMM:
		ch = c->user;
		ch->outstanding--;
		user = ch->wq[ch->wq_head++ & (ch->wq_cap - 1)];
		if (n->ops->written)
			n->ops->written(n, user, c->status);
		drain(ch);
		if (ch->closed)
			linger_end(ch, c->status);
		return;
	}
}

static int start_connect(struct kn__chan *ch)
{
	int ret = kn__tp_connect(ch->node->ctx, (struct sockaddr *)&ch->addr,
				 ch->addrlen, ch, &ch->ep);

	if (ret)
		return ret;
	ch->state = CH_CONNECTING;
	for (uint32_t i = 0; i < RECVS; i++)
		post_recv(ch, i);
	return 0;
}

static void retry_connects(struct kn__node *n)
{
	double t = kn__now();

	for (struct kn__chan *ch = n->chans, *next; ch; ch = next) {
		next = ch->next;
		if (!ch->retry_at || t < ch->retry_at)
			continue;
		ch->retry_at = 0;
		if (start_connect(ch))
			chan_close_status(ch, -ECONNREFUSED);
	}
}

/* Close the connections whose handshake ran out of time. */
static void expire_handshakes(struct kn__node *n)
{
	double t = kn__now();

	refusals_flush(n, t);
	if (!n->pending)
		return;
	for (struct kn__chan *ch = n->chans; ch; ch = ch->next)
		if (ch->pending && !ch->closed && t > ch->deadline) {
			refusal(n, ch->name, "no handshake within %.0f s",
				HANDSHAKE_S);
			kn__chan_close(ch);
		}
}

static bool has_news(const struct kn__node *n)
{
	return n->news && atomic_load(n->news);
}

int kn__node_wait(struct kn__node *n, int timeout_ms, int extra_fd,
		  struct kn__tp_completion *c, int max)
{
	struct pollfd pfd[2] = {
		{ .fd = kn__tp_fd(n->ctx), .events = POLLIN },
		{ .fd = extra_fd, .events = POLLIN },
	};
	double spin_end = kn__now() + BUSY_POLL_S;
	int got;

	retry_connects(n);
	expire_handshakes(n);
	/* wake for the next handshake deadline */
	if (n->pending && (timeout_ms < 0 || timeout_ms > 200))
		timeout_ms = 200;

	/* busy-poll a little (the reply may be on its way), then sleep;
	 * news from the other thread ends both */
	while ((got = kn__tp_poll(n->ctx, c, max)) == 0 &&
	       kn__now() < spin_end && !has_news(n))
		sched_yield(); /* a thread we woke may wait for this CPU */
	if (got == 0 && timeout_ms && !has_news(n)) {
		int ret = 0;

		atomic_store(&n->sleeping, true);
		if (!has_news(n))
			ret = poll(pfd, extra_fd >= 0 ? 2 : 1, timeout_ms);
		atomic_store(&n->sleeping, false);
		if (ret < 0 && errno != EINTR)
			return -errno;
		got = kn__tp_poll(n->ctx, c, max);
	}
	return got;
}

void kn__node_dispatch(struct kn__node *n, const struct kn__tp_completion *c,
		       int count)
{
	for (int i = 0; i < count; i++)
		dispatch(n, &c[i]);
	sweep(n);
}

int kn__node_step(struct kn__node *n, int timeout_ms, int extra_fd)
{
	struct kn__tp_completion c[64];
	int got = kn__node_wait(n, timeout_ms, extra_fd, c, 64);

	if (got > 0)
		kn__node_dispatch(n, c, got);
	return got;
}

int kn__node_listen(struct kn__node *n, const struct sockaddr *addr,
		    socklen_t len)
{
	return kn__tp_listen(n->ctx, addr, len, NULL, &n->listener);
}

int kn__node_connect(struct kn__node *n, const struct sockaddr *addr,
		     socklen_t len, uint32_t peer_role, uint32_t peer_rank,
		     void *user, struct kn__chan **out)
{
	struct kn__chan *ch;
	int ret;

	if (len > sizeof(ch->addr))
		return -EINVAL;
	ch = chan_new(n, NULL, false, user);
	if (!ch)
		return -ENOMEM;
	memcpy(&ch->addr, addr, len);
	ch->addrlen = len;
	ch->peer_role = peer_role; /* proven by the handshake's CONFIRM */
	ch->peer_rank = peer_rank;
	kn__addr_name(&ch->addr, ch->name, sizeof(ch->name));
	ret = start_connect(ch);
	if (ret) {
		ch->acceptor = true; /* unknown to the role: no closed() */
		chan_close_status(ch, ret);
		return ret;
	}
	*out = ch;
	return 0;
}
