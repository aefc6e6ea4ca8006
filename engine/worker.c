/* SPDX-License-Identifier: Apache-2.0 */
/*
 * worker.c - the worker library behind kn_worker_*: a progress thread
 * that owns the transport context and runs the job's protocol, and the
 * application's calls, which hand it requests under a lock and wait on a
 * condition variable.
 *
 * Start-up (kn_worker_create, kn_worker_start): coordinator first (JOB,
 * the servers' HELLOs), then our tensor table to it, then, once it says
 * the servers are ready (READY TABLE), our buffers to every server
 * (BUFFERS..., READY BUFFERS), their slot areas back (SLOTS).  Worker 0
 * writes its initial values (INIT); every server answers every worker
 * with the model (a PULL write per chunk).  With the model in hand we
 * tell the coordinator (READY START) and wait for everyone (READY
 * START back).
 *
 * Steps: a push of chunk c writes the gradient chunk into our slot of
 * parity (push count mod 2) on its server, a PUSH immediate; the server
 * answers each push with a PULL write of the new values.  A chunk has
 * two slots, so at most two of its pushes are unanswered: a third waits
 * (operations are carried out in order).  Counters per chunk: expect
 * (answers due: the initial model plus one per push) and delivered.
 *
 * A worker that rejoins a running BSP job may find its chunks a round
 * apart (the others were between their pushes to two chunks): every
 * first release comes with a RELEASE message that names its version,
 * and the worker sits out (SKIP) the round in progress of every chunk
 * behind the newest, so that its first gradient is computed from one
 * round's model.
 */
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "auth.h"
#include "kernels.h"
#include "node.h"
#include "roles.h"
#include "stages.h"

#define MAX_OPS 1024

enum wk_state {
	WK_JOINING, /* waiting for JOB and the servers */
	WK_JOINED,  /* registering tensors */
	WK_TABLE,   /* table sent, waiting for READY TABLE */
	WK_SERVERS, /* connecting to servers, waiting for the model */
	WK_MODEL,   /* model in hand, waiting for READY START */
	WK_RUNNING,
	WK_FAILED,
};

struct wk_tensor {
	struct kn__tensor_desc d;
	void *params, *grads; /* grads: what pushes read */
	void *inbox;	      /* where pulls land instead, or NULL */
	struct kn__tp_mr *pmr, *gmr, *imr;
	/*
	 * ESP, PSP (the engine's own, fp32): the program's gradients, the
	 * last global model (the anchor deltas are taken from), the model
	 * at the last push, the inner optimizer's state; grads and inbox
	 * are the engine's then too (the delta pushed, the model pulled).
	 */
	float *user_grads, *anchor, *at_push, *m, *v;
	/*
	 * A fused group's wire tensor (nmembers > 0): its members are
	 * w->members[first_member ...], its three buffers the engine's.
	 * gen: the wire pushes posted; contributed: the members in the one
	 * being gathered (all: it waits for a slot); sending: its write is
	 * still reading grads.
	 */
	uint32_t first_member, nmembers, contributed;
	uint64_t gen;
	bool sending;
	/* the program's priority (lower: sooner; by default the
	 * registration order); a group's is its most urgent member's */
	int priority;
};

/* A tensor of the program's that travels inside a fused group. */
struct wk_member {
	struct kn__tensor_desc d;
	void *params, *grads, *inbox;
	uint32_t wire;	 /* its group's index in w->tensors */
	uint64_t offset; /* elements into the group */
	uint64_t pushes; /* gradients copied into the group */
	int priority;
};

/* Keys of fused groups; the program's keys may not start so. */
#define FUSED_PREFIX "kanel.fused."
#define MEMBER_BIT   0x80000000u /* an op's tensor that is a member */
#define MAX_MEMBERS  64		 /* a key-less op's bit mask */

struct wk_server {
	struct kn__chan *ch;
	struct sockaddr_storage addr;
	struct kn__tp_rdesc slots;
	bool known, have_slots;
};

struct wk_chunk {
	/*
	 * pushed: pushes taken (each has its answer due: expect); written:
	 * those whose write was posted, in priority order across chunks;
	 * wdone: those whose write completed.  owner[n % 4]: push n's op
	 * or group, told when its write completes.
	 */
	uint64_t pushed, written, wdone, expect, delivered;
	void *owner[4];
	/* ESP, PSP: a release is delivered once both its write and its
	 * RELEASE message are in, whichever comes first */
	uint64_t writes, infos;
	bool skip;	 /* a SKIP to post (first_model_in) */
	uint32_t steps;	 /* the last RELEASE message's */
	uint64_t joined; /* the version of the model we joined with */
	uint64_t epoch;
	float hint;
};

struct wk_op {
	uint64_t id;
	uint32_t tensor; /* UINT32_MAX: every tensor */
	bool push, pull, posted, done;
	uint32_t next;	   /* the next chunk to push, relative */
	uint32_t writes;   /* pushes in flight */
	uint64_t mask;	   /* the members of chunk next it has pushed */
	uint64_t *targets; /* per chunk of the op: deliveries it waits for */
	uint32_t ntargets; /* room in targets */
	int status;
	/* when it was posted, its first write went, its writes were all
	 * sent, it was done (kn__now; the stages of --metrics) */
	double t_post, t_first, t_sent, t_done;
};

/* Where an operation's time went, for --metrics (docs/configuration.md). */
struct wk_stages {
	struct kn__hist handoff; /* posted -> the thread posts its writes */
	struct kn__hist send;	 /* first write posted -> every write sent */
	struct kn__hist answer;	 /* sent -> every chunk's answer in */
	struct kn__hist wake;	 /* done -> the program's wait returns */
	struct kn__hist round;	 /* posted -> the wait returns */
};

struct kn_worker {
	bool own_optimizer; /* kn_worker_options.own_optimizer */
	struct kn__node node;
	struct kn__config cfg;
	uint8_t secret[KN__SECRET_MAX];
	size_t secret_len;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int wake; /* eventfd: the application has news for the thread */
	/* the news itself: set by the application, cleared by the thread;
	 * kicked: the eventfd was written (wake) */
	atomic_uint news;
	atomic_bool kicked;
	bool stop, start_requested, done_sent;
	bool finished; /* kn_worker_finish: DONE goes out now */
	enum wk_state state;
	int error;
	struct kn__chan *coord;
	struct sockaddr_storage coord_addr;
	socklen_t coord_len;
	double reconnect_at; /* refused as connected already: again then */
	struct kn__msg job;
	struct wk_server *servers;
	uint32_t nservers_known, nslots;
	/* registration order; at the start, the wire's tensors (the
	 * unfused ones and the fused groups) in key order */
	struct wk_tensor *tensors;
	uint32_t ntensors;
	struct wk_member *members; /* the fused tensors, group by group */
	uint32_t nmembers;
	struct kn__layout *layout;
	struct wk_chunk *chunks;
	/*
	 * Chunks by priority: order[k] is the k-th most urgent, place[c]
	 * chunk c's k; ready has bit k set while chunk order[k] has a push
	 * whose write waits.  Writes are posted most urgent first while
	 * fewer than window bytes of them are in flight (0: no limit).
	 */
	uint32_t *order, *place;
	uint64_t *ready;
	uint64_t inflight, window;
	int next_priority; /* the registration order's */
	uint32_t delivered_once;
	uint32_t skipping; /* BSP: rounds we sit out before we start */
	/* the next chunk whose INIT (worker 0), whose SKIP to post: what
	 * the transport had no room for is posted from the loop */
	uint32_t init_next, skip_next;
	struct wk_op ops[MAX_OPS];
	uint64_t next_id, first_unposted, first_undone;
	uint64_t clock;
	double last_beat;
	bool release_info; /* the job's protocol sends RELEASE messages */
	/* PSP, CGP, ESP: the timings reported since the last TIMING was
	 * sent; it carries their mean */
	double timing_sum;
	uint32_t timing_count;
	/* kn_worker_step_done, on the application's side (no lock) */
	bool local;		      /* the job takes local steps */
	struct kn__sync_worker *rule; /* ESP's, PSP's worker rule */
	bool pending;		      /* a pushpull is on its way */
	uint64_t pending_handle;
	double push_t;		 /* when it left */
	double round_s;		 /* PSP: seconds of local steps ... */
	uint32_t round_steps;	 /* ... since the last release */
	uint64_t inner_step;	 /* the inner optimizer's (Adam) */
	double step_return;	 /* when the last step call returned */
	bool told_local;	 /* -EPROTO explained once */
	struct wk_stages stages; /* of the ops waited for */
	/* a server lost while the coordinator may still say why (its
	 * reason is the cause, the loss a consequence) */
	int lost_err;
	double lost_at;
};

/* How long a server's loss waits for the coordinator's word: before
 * the start, to fail with its reason; at kn_worker_destroy, to close. */
#define LOST_GRACE_S 1.0
#define RECONNECT_S 0.2 /* a rank refused as connected already */

/* ---- in the progress thread ---- */

static struct kn_worker *wk_of(struct kn__node *n)
{
	return n->role;
}

/* Everything fails with @err: ops, waits, the state. */
static void fail(struct kn_worker *w, int err)
{
	if (w->state == WK_FAILED)
		return;
	w->state = WK_FAILED;
	w->error = err;
	for (uint64_t id = w->first_undone; id < w->next_id; id++) {
		struct wk_op *op = &w->ops[id % MAX_OPS];

		if (!op->done) {
			op->done = true;
			op->status = err;
		}
	}
	pthread_cond_broadcast(&w->cond);
}

static void chunk_range(const struct kn_worker *w, uint32_t tensor,
			uint32_t *first, uint32_t *end)
{
	const struct kn__layout *l = w->layout;

	if (tensor == UINT32_MAX) {
		*first = 0;
		*end = l->nchunks;
	} else if (tensor & MEMBER_BIT) {
		/* a group is one chunk */
		*first = l->first_chunk[w->members[tensor & ~MEMBER_BIT].wire];
		*end = *first + 1;
	} else {
		*first = l->first_chunk[tensor];
		*end = l->first_chunk[tensor + 1];
	}
}

static bool op_finished(const struct kn_worker *w, const struct wk_op *op)
{
	uint32_t first, end;

	if (!op->posted || op->writes)
		return false;
	if (!op->pull)
		return true;
	chunk_range(w, op->tensor, &first, &end);
	for (uint32_t c = first; c < end; c++)
		if (w->chunks[c].delivered < op->targets[c - first])
			return false;
	return true;
}

static void check_ops(struct kn_worker *w)
{
	bool any = false;

	for (uint64_t id = w->first_undone; id < w->first_unposted; id++) {
		struct wk_op *op = &w->ops[id % MAX_OPS];

		if (!op->done && op_finished(w, op)) {
			op->done = true;
			op->t_done = kn__now();
			any = true;
		}
	}
	while (w->first_undone < w->first_unposted &&
	       w->ops[w->first_undone % MAX_OPS].done)
		w->first_undone++;
	if (any)
		pthread_cond_broadcast(&w->cond);
}

/*
 * Fused groups.  A member's push copies its gradient into its group's
 * push buffer; once every member's is in, the group is one push of one
 * chunk, written when that chunk has a free slot.  A member's n-th push
 * goes into the group's n-th: a member pushed again before the rest of
 * its group waits (as its operation, and those after it, do).
 */
static void ready_set(struct kn_worker *w, uint32_t c, bool on)
{
	uint32_t k = w->place[c];

	if (on)
		w->ready[k / 64] |= (uint64_t)1 << (k % 64);
	else
		w->ready[k / 64] &= ~((uint64_t)1 << (k % 64));
}

/*
 * Take a push of chunk @c for @owner (an op, or a group's tensor): its
 * answer is due from now on, its write goes when schedule() picks it.
 * False while both of the chunk's slots are taken.
 */
static bool take_push(struct kn_worker *w, uint32_t c, void *owner)
{
	struct wk_chunk *wc = &w->chunks[c];

	if (wc->expect - wc->delivered >= 2 || wc->pushed - wc->wdone >= 4)
		return false;
	wc->owner[wc->pushed % 4] = owner;
	wc->pushed++;
	wc->expect++;
	ready_set(w, c, true);
	return true;
}

/* Post the waiting writes, most urgent chunk first, within the window. */
static void schedule(struct kn_worker *w)
{
	const struct kn__layout *l = w->layout;
	uint32_t words = (l->nchunks + 63) / 64;

	for (uint32_t i = 0; i < words && w->state == WK_RUNNING; i++) {
		while (w->ready[i]) {
			uint32_t c =
				w->order[i * 64 + (uint32_t)__builtin_ctzll(
							  w->ready[i])];
			struct wk_chunk *wc = &w->chunks[c];
			const struct kn__chunk *kc = &l->chunks[c];
			const struct wk_tensor *t = &w->tensors[kc->tensor];
			struct wk_server *s = &w->servers[kc->server];
			uint32_t parity = (uint32_t)(wc->written & 1);
			int ret;

			if (w->window && w->inflight &&
			    w->inflight + kc->bytes > w->window)
				return; /* the window is full */
			ret = kn__tp_post_write_imm(
				s->ch->ep, t->gmr,
				kc->first * kn_dtype_size(t->d.dtype),
				kc->bytes, &s->slots,
				kn__layout_own_slot(l, c, parity),
				kn__imm(KN__IMM_PUSH, parity, c), wc);
			if (ret == -EAGAIN)
				return; /* the transport's queue is full: its
					 * completions bring us back */
			if (ret) {
				kn__log(&w->node, "push to server %u: %s",
					kc->server, strerror(-ret));
				fail(w, ret);
				return;
			}
			w->inflight += kc->bytes;
			if (++wc->written == wc->pushed)
				ready_set(w, c, false);
		}
	}
}

/* A group whose members are all in: its push, once a slot is free. */
static void post_group(struct kn_worker *w, uint32_t i)
{
	struct wk_tensor *t = &w->tensors[i];

	if (w->state != WK_RUNNING || t->contributed < t->nmembers ||
	    !take_push(w, w->layout->first_chunk[i], t))
		return;
	t->gen++;
	t->contributed = 0;
	t->sending = true;
}

/* Member @mi's gradient into its group, if the group takes it now. */
static bool contribute(struct kn_worker *w, uint32_t mi)
{
	struct wk_member *m = &w->members[mi];
	struct wk_tensor *t = &w->tensors[m->wire];
	size_t es = kn_dtype_size(m->d.dtype);

	if (t->sending || t->contributed == t->nmembers || m->pushes != t->gen)
		return false;
	memcpy((char *)t->grads + m->offset * es, m->grads, m->d.len * es);
	m->pushes++;
	if (++t->contributed == t->nmembers)
		post_group(w, m->wire);
	return true;
}

/* @op's push into group @i: true once all of its part is in. */
static bool push_fused(struct kn_worker *w, struct wk_op *op, uint32_t i)
{
	const struct wk_tensor *t = &w->tensors[i];
	uint64_t all = t->nmembers == 64 ? UINT64_MAX
					 : ((uint64_t)1 << t->nmembers) - 1;

	if (op->tensor != UINT32_MAX)
		return contribute(w, op->tensor & ~MEMBER_BIT);
	for (uint32_t j = 0; j < t->nmembers; j++)
		if (!(op->mask >> j & 1) && contribute(w, t->first_member + j))
			op->mask |= (uint64_t)1 << j;
	if (op->mask != all)
		return false;
	op->mask = 0;
	return true;
}

/* The group's answer is in its inbox: every member's part to its own. */
static void unpack(struct kn_worker *w, const struct wk_tensor *t)
{
	bool sum = kn__job_sums(w->job.u.job.protocol,
				 w->job.u.job.optimizer);
	size_t es = kn_dtype_size(t->d.dtype);

	for (uint32_t j = 0; j < t->nmembers; j++) {
		const struct wk_member *m = &w->members[t->first_member + j];
		void *to = m->inbox ? m->inbox : sum ? m->grads : m->params;

		memcpy(to, (const char *)t->inbox + m->offset * es,
		       m->d.len * es);
	}
}

/* The answers chunk @c of @op's waits for: those of its pushes so far. */
static uint64_t answers_due(const struct kn_worker *w, const struct wk_op *op,
			    uint32_t c)
{
	const struct wk_tensor *t = &w->tensors[w->layout->chunks[c].tensor];
	uint64_t due = w->chunks[c].expect;

	/* a group's push still being gathered is due too */
	if (t->nmembers && op->tensor == UINT32_MAX)
		due += t->contributed > 0;
	else if (t->nmembers)
		due += w->members[op->tensor & ~MEMBER_BIT].pushes > t->gen;
	return due;
}

/* Post the pushes of the waiting operations, in order, while chunks have
 * free slots. */
static void advance(struct kn_worker *w)
{
	const struct kn__layout *l = w->layout;

	if (w->state != WK_RUNNING)
		return;
	while (w->state == WK_RUNNING && w->first_unposted < w->next_id) {
		struct wk_op *op = &w->ops[w->first_unposted % MAX_OPS];
		uint32_t first, end;

		chunk_range(w, op->tensor, &first, &end);
		for (; op->push && first + op->next < end; op->next++) {
			uint32_t c = first + op->next;
			const struct kn__chunk *kc = &l->chunks[c];
			const struct wk_tensor *t = &w->tensors[kc->tensor];

			if (!op->t_first)
				op->t_first = kn__now();
			if (t->nmembers) {
				if (!push_fused(w, op, kc->tensor))
					goto wait; /* the group is busy */
				if (w->state != WK_RUNNING)
					return;
				continue;
			}
			if (!take_push(w, c, op))
				goto wait; /* both slots taken */
			op->writes++;
		}
		if (op->pull && end - first > op->ntargets) {
			/* kept with the op's slot: no allocation per op */
			uint64_t *tg =
				realloc(op->targets,
					(end - first) * sizeof(*op->targets));

			if (!tg) {
				fail(w, -ENOMEM);
				return;
			}
			op->targets = tg;
			op->ntargets = end - first;
		}
		for (uint32_t c = first; op->pull && c < end; c++)
			op->targets[c - first] = answers_due(w, op, c);
		op->posted = true;
		if (!op->t_first)
			op->t_first = kn__now(); /* a pull alone */
		if (op->push && !op->writes && !op->t_sent)
			op->t_sent = kn__now(); /* fused: copied is sent */
		w->first_unposted++;
	}
wait:
	schedule(w);
	check_ops(w);
}

static int send_table(struct kn_worker *w)
{
	struct kn__msg m = { .type = KN__MSG_TENSOR };

	for (uint32_t i = 0; i < w->ntensors; i++) {
		m.u.tensor.index = i;
		m.u.tensor.dtype = w->tensors[i].d.dtype;
		m.u.tensor.len = w->tensors[i].d.len;
		memcpy(m.u.tensor.key, w->tensors[i].d.key, KN__KEY_MAX);
		if (kn__chan_send(w->coord, &m))
			return -ENOTCONN;
	}
	m = (struct kn__msg){ .type = KN__MSG_TENSORS_END };
	m.u.tensors_end.count = w->ntensors;
	m.u.tensors_end.flags = w->own_optimizer ? KN__TABLE_OWN_OPTIMIZER : 0;
	return kn__chan_send(w->coord, &m);
}

static int by_key(const void *a, const void *b)
{
	const struct wk_tensor *x = a, *y = b;

	return strcmp(x->d.key, y->d.key);
}

struct urgency {
	int priority;
	uint32_t chunk;
};

static int by_urgency(const void *a, const void *b)
{
	const struct urgency *x = a, *y = b;

	if (x->priority != y->priority)
		return x->priority < y->priority ? -1 : 1;
	return x->chunk < y->chunk ? -1 : x->chunk > y->chunk;
}

/* The chunks by their tensors' priorities (ties: layout order). */
static int chunk_order(struct kn_worker *w)
{
	const struct kn__layout *l = w->layout;
	uint32_t n = l->nchunks;
	struct urgency *u = malloc((n + 1) * sizeof(*u));

	w->order = malloc((n + 1) * sizeof(*w->order));
	w->place = malloc((n + 1) * sizeof(*w->place));
	w->ready = calloc((n + 63) / 64 + 1, sizeof(*w->ready));
	if (!u || !w->order || !w->place || !w->ready) {
		free(u);
		return -ENOMEM;
	}
	for (uint32_t c = 0; c < n; c++)
		u[c] = (struct urgency){
			.priority = w->tensors[l->chunks[c].tensor].priority,
			.chunk = c,
		};
	qsort(u, n, sizeof(*u), by_urgency);
	for (uint32_t k = 0; k < n; k++) {
		w->order[k] = u[k].chunk;
		w->place[u[k].chunk] = k;
	}
	free(u);
	w->window = w->job.u.job.push_window;
	return 0;
}

/* READY TABLE: build the layout, register buffers, go to the servers. */
static void go_to_servers(struct kn_worker *w)
{
	struct kn__tensor_desc *d = calloc(w->ntensors + 1, sizeof(*d));
	bool sum = kn__job_sums(w->job.u.job.protocol,
				 w->job.u.job.optimizer);
	int ret;

	if (!d) {
		fail(w, -ENOMEM);
		return;
	}
	for (uint32_t i = 0; i < w->ntensors; i++)
		d[i] = w->tensors[i].d;
	ret = kn__layout_build(d, w->ntensors, w->job.u.job.servers,
			       w->job.u.job.workers, w->job.u.job.chunk_bytes,
			       &w->layout);
	free(d);
	if (!ret) {
		w->chunks = calloc(w->layout->nchunks + 1, sizeof(*w->chunks));
		ret = w->chunks ? chunk_order(w) : -ENOMEM;
	}
	for (uint32_t i = 0; !ret && i < w->ntensors; i++) {
		struct wk_tensor *t = &w->tensors[i];
		size_t bytes = t->d.len * kn_dtype_size(t->d.dtype);

		/* pulls land in params (summing: grads), or the inbox */
		ret = kn__tp_mr_reg(w->node.ctx, t->params, bytes,
				    sum || t->inbox ? 0 : KN_TP_REMOTE_WRITE,
				    &t->pmr);
		if (!ret)
			ret = kn__tp_mr_reg(
				w->node.ctx, t->grads, bytes,
				sum && !t->inbox ? KN_TP_REMOTE_WRITE : 0,
				&t->gmr);
		if (!ret && t->inbox)
			ret = kn__tp_mr_reg(w->node.ctx, t->inbox, bytes,
					    KN_TP_REMOTE_WRITE, &t->imr);
	}
	for (uint32_t s = 0; !ret && s < w->job.u.job.servers; s++) {
		struct wk_server *ws = &w->servers[s];

		ret = kn__node_connect(&w->node, (struct sockaddr *)&ws->addr,
				       kn__addr_len(&ws->addr), KN__ROLE_SERVER,
				       s, ws, &ws->ch);
	}
	if (ret) {
		kn__log(&w->node, "going to the servers: %s", strerror(-ret));
		fail(w, ret);
		return;
	}
	for (uint32_t c = 0; c < w->layout->nchunks; c++)
		w->chunks[c].expect = 1; /* the initial model */
	w->state = WK_SERVERS;
}

/*
 * What server @ws may write of @mr: all of it when the server writes
 * there at all (the region has remote write), else nothing (an empty
 * descriptor that no write can name).
 */
static int grant(struct wk_server *ws, struct kn__tp_mr *mr,
		 struct kn__tp_rdesc *rd)
{
	*rd = (struct kn__tp_rdesc){ 0 };
	if (!(kn__tp_mr_access(mr) & KN_TP_REMOTE_WRITE))
		return 0;
	return kn__tp_ep_grant(ws->ch->ep, mr, 0, kn__tp_mr_len(mr),
			       KN_TP_REMOTE_WRITE, rd);
}

static void send_buffers(struct kn_worker *w, struct wk_server *ws)
{
	struct kn__msg m = { .type = KN__MSG_BUFFERS };

	for (uint32_t i = 0; i < w->ntensors; i++) {
		const struct wk_tensor *t = &w->tensors[i];
		bool sum = kn__job_sums(w->job.u.job.protocol,
				 w->job.u.job.optimizer);
		int ret;

		m.u.buffers.index = i;
		ret = grant(ws, t->imr && !sum ? t->imr : t->pmr,
			    &m.u.buffers.params);
		if (!ret)
			ret = grant(ws, t->imr && sum ? t->imr : t->gmr,
				    &m.u.buffers.grads);
		if (ret) {
			kn__log(&w->node, "granting server %u its buffers: %s",
				ws->ch->peer_rank, strerror(-ret));
			fail(w, ret);
			return;
		}
		kn__chan_send(ws->ch, &m);
	}
	m = (struct kn__msg){ .type = KN__MSG_READY };
	m.u.ready.what = KN__READY_BUFFERS;
	kn__chan_send(ws->ch, &m);
}

/*
 * Every server has our buffers: worker 0 writes the initial model, as
 * far as the transport has room (the progress loop posts the rest).
 */
static void send_init(struct kn_worker *w)
{
	const struct kn__layout *l = w->layout;

	if (w->cfg.rank != 0 || w->nslots < w->job.u.job.servers)
		return;
	for (; w->init_next < l->nchunks; w->init_next++) {
		uint32_t c = w->init_next;
		const struct kn__chunk *kc = &l->chunks[c];
		const struct wk_tensor *t = &w->tensors[kc->tensor];
		struct wk_server *s = &w->servers[kc->server];
		int ret = kn__tp_post_write_imm(
			s->ch->ep, t->pmr,
			kc->first * kn_dtype_size(t->d.dtype), kc->bytes,
			&s->slots, kn__layout_own_slot(l, c, 0),
			kn__imm(KN__IMM_INIT, 0, c), NULL);

		if (ret == -EAGAIN)
			return;
		if (ret) {
			fail(w, ret);
			return;
		}
	}
}

/* The model is in hand: tell the coordinator we can start. */
static void ready_to_start(struct kn_worker *w)
{
	struct kn__msg m = { .type = KN__MSG_READY };

	/* a worker already failed (the job cannot start: the coordinator
	 * said why) stays failed with that reason; the model can still
	 * land after it on a slow host */
	if (w->state == WK_FAILED)
		return;
	w->state = WK_MODEL;
	m.u.ready.what = KN__READY_START;
	kn__chan_send(w->coord, &m);
}

/* The SKIPs first_model_in asked for, as far as the transport has room. */
static void post_skips(struct kn_worker *w)
{
	const struct kn__layout *l = w->layout;

	for (; w->skip_next < l->nchunks && w->state == WK_SERVERS;
	     w->skip_next++) {
		uint32_t c = w->skip_next;
		const struct kn__chunk *kc = &l->chunks[c];
		const struct wk_tensor *t = &w->tensors[kc->tensor];
		struct wk_server *s = &w->servers[kc->server];
		struct wk_chunk *wc = &w->chunks[c];
		/* the slot's contents are not read: any bytes of ours do */
		uint32_t parity = (uint32_t)(wc->written & 1);
		int ret;

		if (!wc->skip)
			continue;
		ret = kn__tp_post_write_imm(
			s->ch->ep, t->gmr,
			kc->first * kn_dtype_size(t->d.dtype), kc->bytes,
			&s->slots, kn__layout_own_slot(l, c, parity),
			kn__imm(KN__IMM_SKIP, parity, c), NULL);
		if (ret == -EAGAIN)
			return;
		if (ret) {
			kn__log(&w->node, "sitting out a round of chunk %u: %s",
				c, strerror(-ret));
			fail(w, ret);
			return;
		}
		wc->skip = false;
		wc->pushed++;
		wc->written++;
		wc->wdone++; /* not waited for */
		wc->expect++;
	}
}

/*
 * Every chunk's first release is in.  Under BSP a chunk released with
 * an older version than another has a round in progress that we are a
 * member of: we sit it out (a SKIP in the push's place) and start once
 * its result is in, so that every chunk is at the newest version.
 */
static void first_model_in(struct kn_worker *w)
{
	const struct kn__layout *l = w->layout;
	uint64_t newest = 0;

	if (!kn__sync_traits(w->job.u.job.protocol)->skips) {
		ready_to_start(w);
		return;
	}
	for (uint32_t c = 0; c < l->nchunks; c++)
		if (w->chunks[c].joined > newest)
			newest = w->chunks[c].joined;
	for (uint32_t c = 0; c < l->nchunks; c++) {
		if (w->chunks[c].joined == newest)
			continue;
		w->chunks[c].skip = true;
		w->skipping++;
	}
	w->skip_next = 0;
	post_skips(w);
	if (w->skipping)
		kn__log(&w->node,
			"rejoined with %u of %u chunks a round behind the "
			"others: sitting that round out",
			w->skipping, l->nchunks);
	else
		ready_to_start(w);
}

/*
 * The mean of the timings reported since the last TIMING, sent where its
 * protocol reads it: PSP's and CGP's planners are the coordinator's; ESP
 * compares its members' step times in the servers' chunk rules, so each
 * server gets it (once the job runs).  Under the lock.
 */
static void send_timing(struct kn_worker *w)
{
	struct kn__msg m = { .type = KN__MSG_TIMING };
	bool esp = kn__sync_traits(w->job.u.job.protocol)->timing ==
		   KN__SYNC_TIMING_RULES;

	if (!w->timing_count || (esp ? w->state != WK_RUNNING : !w->coord))
		return;
	m.u.timing.seconds = (float)(w->timing_sum / w->timing_count);
	if (!esp)
		kn__chan_send(w->coord, &m);
	for (uint32_t i = 0; esp && i < w->job.u.job.servers; i++)
		if (w->servers[i].ch)
			kn__chan_send(w->servers[i].ch, &m);
	w->timing_sum = 0;
	w->timing_count = 0;
}

/*
 * kn_worker_finish was called: this worker takes no more steps, so the
 * servers and the coordinator hear it at once, not when the program
 * destroys the worker.  Under PSP, ESP, SSP and CGP the workers may make
 * different numbers of pushes for the same steps, and a round (or a
 * bound) that still counted a worker that has stopped, while its
 * program evaluates the model say, would hold every other worker.
 */
static void send_done(struct kn_worker *w)
{
	struct kn__msg m = { .type = KN__MSG_DONE };

	if (!w->finished || w->done_sent || !w->coord ||
	    w->state != WK_RUNNING)
		return;
	for (uint32_t i = 0; i < w->job.u.job.servers; i++)
		if (w->servers[i].ch)
			kn__chan_send(w->servers[i].ch, &m);
	kn__chan_send(w->coord, &m);
	w->done_sent = true;
}

/* Count what of chunk @c's releases is now complete. */
static void delivered(struct kn_worker *w, uint32_t c)
{
	struct wk_chunk *k = &w->chunks[c];
	struct wk_tensor *t = &w->tensors[w->layout->chunks[c].tensor];
	uint64_t done = k->writes;

	if (w->release_info && k->infos < done)
		done = k->infos;
	else if (k->infos == 0)
		done = 0; /* the first release comes with its version */
	if (done > k->delivered && t->nmembers)
		unpack(w, t);
	for (; k->delivered < done; k->delivered++) {
		if (k->delivered == 0 &&
		    ++w->delivered_once == w->layout->nchunks)
			first_model_in(w);
		else if (k->delivered == 1 && w->skipping &&
			 w->state == WK_SERVERS && --w->skipping == 0)
			ready_to_start(w);
	}
	if (t->nmembers)
		post_group(w, w->layout->chunks[c].tensor); /* a slot is free */
	check_ops(w);
	advance(w);
}

static void on_imm(struct kn__node *n, struct kn__chan *ch, uint32_t imm,
		   uint64_t bytes)
{
	struct kn_worker *w = wk_of(n);
	uint32_t c = kn__imm_chunk(imm);

	if (!w->layout || kn__imm_op(imm) != KN__IMM_PULL ||
	    c >= w->layout->nchunks || ch->peer_role != KN__ROLE_SERVER ||
	    w->layout->chunks[c].server != ch->peer_rank ||
	    bytes != w->layout->chunks[c].bytes) {
		kn__log(n, "%s: a write that is no answer of ours", ch->name);
		fail(w, -EPROTO);
		return;
	}
	w->chunks[c].writes++;
	delivered(w, c);
}

static void on_written(struct kn__node *n, void *user, int status)
{
	struct kn_worker *w = wk_of(n);
	struct wk_op *op = user;
	uintptr_t u = (uintptr_t)user;

	if (!op)
		return; /* an INIT write */
	if (status)
		fail(w, status);
	if (u >= (uintptr_t)w->chunks &&
	    u < (uintptr_t)(w->chunks + w->layout->nchunks)) {
		struct wk_chunk *wc = user;
		uint32_t c = (uint32_t)(wc - w->chunks);
		void *owner = wc->owner[wc->wdone++ % 4];
		uintptr_t o = (uintptr_t)owner;

		w->inflight -= w->layout->chunks[c].bytes;
		if (o >= (uintptr_t)w->tensors &&
		    o < (uintptr_t)(w->tensors + w->ntensors)) {
			/* a group's: its buffer takes the next push now */
			((struct wk_tensor *)owner)->sending = false;
		} else {
			op = owner;
			if (--op->writes == 0)
				op->t_sent = kn__now();
		}
		advance(w); /* the window has room, a group may take more */
		return;
	}
	check_ops(w);
}

static void on_message(struct kn__node *n, struct kn__chan *ch,
		       const struct kn__msg *m)
{
	struct kn_worker *w = wk_of(n);

	if (m->type == KN__MSG_ERROR && ch == w->coord &&
	    m->u.error.code == -EEXIST && w->state == WK_JOINING &&
	    kn__now() + RECONNECT_S < w->node.retry_until) {
		/*
		 * Restarted before this rank's old connection was seen
		 * closed (kanel launch --restart-workers does it at once):
		 * the coordinator lets it in once that one is gone.
		 */
		kn__log(n, "%s: %s: again in %.1f s", ch->name,
			m->u.error.text, RECONNECT_S);
		w->coord = NULL;
		w->reconnect_at = kn__now() + RECONNECT_S;
		kn__chan_close(ch);
		return;
	}
	if (m->type == KN__MSG_ERROR) {
		kn__log(n, "%s: %s", ch->name, m->u.error.text);
		fail(w, m->u.error.code);
		return;
	}
	if (m->type == KN__MSG_SHUTDOWN) {
		/* a worker that failed said why already: its reason stays
		 * the last word (kn_last_message) */
		if (w->state != WK_FAILED &&
		    (w->state != WK_RUNNING || w->first_undone < w->next_id))
			kn__log(n, "the job ended");
		fail(w, -ESHUTDOWN);
		return;
	}
	if (ch == w->coord) {
		if (m->type == KN__MSG_JOB && w->state == WK_JOINING) {
			w->job = *m;
			/* --optimizer auto: settled by our own program, as the
			 * coordinator settles it by worker 0's (it refuses a
			 * table that says otherwise) */
			if (m->u.job.optimizer == KN__CONFIG_AUTO)
				w->job.u.job.optimizer = w->own_optimizer
								 ? KN__CONFIG_SUM
								 : KN__CONFIG_SGD;
			w->release_info =
				kn__sync_traits(m->u.job.protocol)->release_info;
			w->servers =
				calloc(m->u.job.servers, sizeof(*w->servers));
			if (!w->servers || m->u.job.rank != w->cfg.rank)
				fail(w, -EPROTO);
			return;
		}
		if (m->type == KN__MSG_HELLO && w->servers &&
		    m->u.hello.role == KN__ROLE_SERVER &&
		    m->u.hello.rank < w->job.u.job.servers &&
		    !w->servers[m->u.hello.rank].known) {
			w->servers[m->u.hello.rank].addr = m->u.hello.addr;
			w->servers[m->u.hello.rank].known = true;
			if (++w->nservers_known == w->job.u.job.servers) {
				w->state = WK_JOINED;
				pthread_cond_broadcast(&w->cond);
			}
			return;
		}
		if (m->type == KN__MSG_READY &&
		    m->u.ready.what == KN__READY_TABLE &&
		    w->state == WK_TABLE) {
			go_to_servers(w);
			return;
		}
		if (m->type == KN__MSG_READY &&
		    m->u.ready.what == KN__READY_START &&
		    w->state == WK_MODEL) {
			w->state = WK_RUNNING;
			pthread_cond_broadcast(&w->cond);
			advance(w);
			return;
		}
	} else if (m->type == KN__MSG_RELEASE && ch->user && w->layout) {
		uint32_t c = m->u.release.chunk;

		/* every release's under ESP and PSP, else the first's only */
		if (c < w->layout->nchunks &&
		    w->layout->chunks[c].server == ch->peer_rank &&
		    (w->release_info || w->chunks[c].infos == 0)) {
			if (w->chunks[c].infos++ == 0)
				w->chunks[c].joined = m->u.release.version;
			w->chunks[c].steps = m->u.release.steps;
			w->chunks[c].epoch = m->u.release.epoch;
			w->chunks[c].hint = m->u.release.hint;
			delivered(w, c);
			return;
		}
	} else if (m->type == KN__MSG_SLOTS && ch->user) {
		struct wk_server *ws = ch->user;

		if (!ws->have_slots) {
			ws->slots = m->u.slots.slots;
			ws->have_slots = true;
			w->nslots++;
			send_init(w);
			return;
		}
	}
	kn__log(n, "%s: %s out of place", ch->name, kn__msg_name(m->type));
	fail(w, -EPROTO);
}

static void on_open(struct kn__node *n, struct kn__chan *ch)
{
	struct kn_worker *w = wk_of(n);

	if (ch != w->coord)
		send_buffers(w, ch->user);
}

static void on_closed(struct kn__node *n, struct kn__chan *ch, int status)
{
	struct kn_worker *w = wk_of(n);

	if (ch != w->coord && ch->peer_role == KN__ROLE_COORDINATOR &&
	    w->reconnect_at)
		return; /* the refused one: another comes in a moment */
	if (ch == w->coord)
		w->coord = NULL;
	else if (ch->user)
		((struct wk_server *)ch->user)->ch = NULL;
	/*
	 * Done (kn_worker_finish sent DONE): no step comes after, and the
	 * job may end at any moment.  The servers exit at the coordinator's
	 * SHUTDOWN, and a server's reset can reach us before the SHUTDOWN
	 * does (another socket): that is the job's orderly end, not a
	 * loss, and it is neither logged nor a failure.
	 */
	if (w->done_sent && w->state == WK_RUNNING)
		return;
	if (w->state != WK_FAILED && !w->stop) {
		kn__log(n, "lost %s%s%s", ch->name, status ? ": " : "",
			status ? strerror(-status) : "");
		if (ch != w->coord && !w->lost_err) {
			w->lost_err = status ? status : -ECONNRESET;
			w->lost_at = kn__now();
		}
		/* a job that cannot start goes down at once: the
		 * coordinator's reason may come a moment later */
		if (ch != w->coord && w->coord && w->state < WK_RUNNING)
			return;
		fail(w, status ? status : -ECONNRESET);
	}
}

static const struct kn__node_ops worker_ops = {
	.open = on_open,
	.message = on_message,
	.closed = on_closed,
	.imm = on_imm,
	.written = on_written,
};

static void heartbeat(struct kn_worker *w)
{
	struct kn__msg m = { .type = KN__MSG_HEARTBEAT };
	double t = kn__now();

	if (!w->coord || !kn__chan_open(w->coord) ||
	    t - w->last_beat < w->cfg.heartbeat_timeout_ms / 4000.0)
		return;
	w->last_beat = t;
	kn__chan_send(w->coord, &m);
}

/* Deliver what comes for @seconds, the lock held around each batch. */
static void linger(struct kn_worker *w, struct kn__tp_completion *c,
		   double seconds)
{
	pthread_mutex_unlock(&w->lock);
	for (double end = kn__now() + seconds; kn__now() < end;) {
		int got = kn__node_wait(&w->node, 20, -1, c, 64);

		pthread_mutex_lock(&w->lock);
		if (got > 0)
			kn__node_dispatch(&w->node, c, got);
		pthread_mutex_unlock(&w->lock);
	}
	pthread_mutex_lock(&w->lock);
}

static void *progress(void *arg)
{
	struct kn_worker *w = arg;
	struct kn__tp_completion c[64];
	uint64_t v;
	int got;

	pthread_mutex_lock(&w->lock);
	/* the context's first post is ours: it is this thread's */
	got = kn__node_connect(&w->node, (struct sockaddr *)&w->coord_addr,
			       w->coord_len, KN__ROLE_COORDINATOR, 0, NULL,
			       &w->coord);
	if (got) {
		kn__log(&w->node, "cannot reach the coordinator at %s:%u: %s",
			w->cfg.coordinator.host, w->cfg.coordinator.port,
			strerror(-got));
		fail(w, got);
	}
	while (!w->stop) {
		if (w->reconnect_at && kn__now() >= w->reconnect_at) {
			w->reconnect_at = 0;
			got = kn__node_connect(
				&w->node, (struct sockaddr *)&w->coord_addr,
				w->coord_len, KN__ROLE_COORDINATOR, 0, NULL,
				&w->coord);
			if (got)
				fail(w, got);
		}
		if (w->start_requested && w->state == WK_JOINED) {
			w->start_requested = false;
			w->state = WK_TABLE;
			if (send_table(w))
				fail(w, -ENOTCONN);
		}
		if (w->state == WK_SERVERS) {
			send_init(w);
			if (w->skipping)
				post_skips(w);
		}
		advance(w);
		heartbeat(w);
		if (w->lost_err &&
		    (!w->coord || kn__now() - w->lost_at > LOST_GRACE_S))
			fail(w, w->lost_err);
		send_timing(w);
		send_done(w);
		pthread_mutex_unlock(&w->lock);
		/* the lock is free while the thread sleeps */
		got = kn__node_wait(&w->node, 100, w->wake, c, 64);
		pthread_mutex_lock(&w->lock);
		/* what the news was about is under the lock: the loop's top
		 * sees it, and news after this is for the next wait */
		atomic_store(&w->news, 0);
		if (atomic_exchange(&w->kicked, false) &&
		    read(w->wake, &v, sizeof(v)) < 0 && errno != EAGAIN)
			break;
		if (got < 0)
			fail(w, got);
		else
			kn__node_dispatch(&w->node, c, got);
	}
	if (w->coord && !w->done_sent && w->state != WK_FAILED) {
		struct kn__msg m = { .type = KN__MSG_DONE };

		kn__chan_send(w->coord, &m);
		w->done_sent = true;
		linger(w, c, 0.2); /* a moment for DONE to leave */
	} else if (w->coord && w->lost_err) {
		/*
		 * Failed, not done (a DONE would keep the rank from coming
		 * back), and failed by a server's loss, which the
		 * coordinator may not have seen yet: a server killed with
		 * its io_uring ring open can reset the workers' connections
		 * before the coordinator's.  Had this channel closed first,
		 * the coordinator would take it for this worker's own loss,
		 * and a job whose every worker is lost ends, where a job
		 * with checkpoints waits for the server.  Once the
		 * coordinator knows, it closes this channel itself.
		 */
		for (double end = kn__now() + LOST_GRACE_S;
		     w->coord && kn__now() < end;)
			linger(w, c, 0.02);
	}
	/*
	 * The context is this thread's (the io_uring ring has one issuer):
	 * it goes with the thread.
	 */
	kn__node_fini(&w->node);
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

/* ---- the application's side ---- */

/*
 * Tell the thread there is news.  A thread that busy-polls sees the flag;
 * only one asleep (or about to be: it sets sleeping, then looks at the
 * news once more) needs the eventfd, a system call on both sides.
 */
static void wake(struct kn_worker *w)
{
	uint64_t one = 1;

	atomic_store(&w->news, 1);
	if (!atomic_load(&w->node.sleeping))
		return;
	atomic_store(&w->kicked, true);
	if (write(w->wake, &one, sizeof(one)) < 0)
		kn__log(&w->node, "eventfd: %s", strerror(errno));
}

/* Wait under the lock until @cond(w, arg) or failure or the deadline. */
static int wait_for(struct kn_worker *w,
		    bool (*cond)(struct kn_worker *, uint64_t), uint64_t arg,
		    int timeout_ms, const char *what)
{
	struct timespec dl;
	int ret = 0;

	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += timeout_ms / 1000;
	dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
	if (dl.tv_nsec >= 1000000000) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000;
	}
	while (!cond(w, arg) && w->state != WK_FAILED && ret != ETIMEDOUT)
		ret = pthread_cond_timedwait(&w->cond, &w->lock, &dl);
	if (cond(w, arg))
		return 0;
	if (w->state == WK_FAILED)
		return w->error;
	if (what)
		kn__log(&w->node, "timed out after %.1f s %s",
			timeout_ms / 1000.0, what);
	return -ETIMEDOUT;
}

static bool joined(struct kn_worker *w, uint64_t unused)
{
	(void)unused;
	return w->state >= WK_JOINED && w->state != WK_FAILED;
}

static bool running(struct kn_worker *w, uint64_t unused)
{
	(void)unused;
	return w->state == WK_RUNNING;
}

static pthread_mutex_t parse_lock = PTHREAD_MUTEX_INITIALIZER;

/*
 * Whether this process takes its role and rank from the launcher's rank
 * (Open MPI's, Slurm's), as the kanel command does: no rank given, by
 * the options or KANEL_RANK, and no KANEL_ROLE.
 */
static bool role_from_launcher(const struct kn_worker_options *opt)
{
	if ((opt && opt->rank >= 0) || getenv("KANEL_RANK") ||
	    getenv("KANEL_ROLE"))
		return false;
	return getenv("OMPI_COMM_WORLD_RANK") || getenv("SLURM_PROCID");
}

static int options(const struct kn_worker_options *opt, struct kn__config *cfg)
{
	char rank[16], timeout[16], err[256];
	char *argv[16] = { "kanel-worker", "--role", "worker" };
	bool launcher = role_from_launcher(opt);
	int argc = launcher ? 1 : 3, ret;

	if (opt && opt->coordinator) {
		argv[argc++] = "--coordinator";
		argv[argc++] = (char *)opt->coordinator;
	}
	if (opt && opt->transport) {
		argv[argc++] = "--transport";
		argv[argc++] = (char *)opt->transport;
	}
	if (opt && opt->secret_file) {
		argv[argc++] = "--secret-file";
		argv[argc++] = (char *)opt->secret_file;
	}
	if (opt && opt->rank >= 0) {
		snprintf(rank, sizeof(rank), "%d", opt->rank);
		argv[argc++] = "--rank";
		argv[argc++] = rank;
	}
	if (opt && opt->timeout_ms) {
		snprintf(timeout, sizeof(timeout), "%ums", opt->timeout_ms);
		argv[argc++] = "--startup-timeout";
		argv[argc++] = timeout;
	}
	/* getopt's state is the process's: one parse at a time */
	pthread_mutex_lock(&parse_lock);
	ret = kn__config_parse(argc, argv, NULL, cfg, err, sizeof(err));
	pthread_mutex_unlock(&parse_lock);
	if (ret)
		kn__log_as("worker", "%s", err);
	else if (cfg->role != KN__ROLE_WORKER) {
		kn__log_as("worker",
			   "%s makes this process the job's %s, not a "
			   "worker: start the kanel command on it "
			   "(docs/engine.md, the role script)",
			   cfg->role_source,
			   cfg->role == KN__ROLE_COORDINATOR ? "coordinator"
							     : "server");
		ret = -EINVAL;
	}
	return ret;
}

int kn_worker_create(const struct kn_worker_options *opt,
		     struct kn_worker **out)
{
	struct kn_worker *w = calloc(1, sizeof(*w));
	int ret;

	if (!w)
		return -ENOMEM;
	w->wake = -1;
	w->own_optimizer = opt && opt->own_optimizer;
	ret = options(opt, &w->cfg);
	if (!ret) {
		char err[512];

		ret = kn__auth_load_secret(
			w->cfg.secret_file[0] ? w->cfg.secret_file : NULL, NULL,
			w->secret, sizeof(w->secret), &w->secret_len, err,
			sizeof(err));
		if (ret)
			kn__log_as("worker", "%s", err);
	}
	if (!ret) {
		ret = kn__config_resolve(&w->cfg.coordinator, &w->coord_addr,
					 &w->coord_len);
		if (ret)
			kn__log_as("worker",
				   "the coordinator's address %s:%u: %s",
				   w->cfg.coordinator.host,
				   w->cfg.coordinator.port,
				   kn__config_resolve_strerror(
					   &w->cfg.coordinator, ret));
	}
	if (ret) {
		free(w);
		return ret;
	}
	ret = kn__node_init(&w->node,
			    kn__config_transport_name(w->cfg.transport),
			    KN__ROLE_WORKER, w->cfg.rank, w->secret,
			    w->secret_len, &worker_ops, w);
	if (ret) {
		free(w);
		return ret;
	}
	w->node.verbose = w->cfg.verbose;
	w->node.news = &w->news;
	w->node.retry_until = kn__now() + w->cfg.startup_timeout_ms / 1000.0;
	w->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cond, NULL);
	ret = w->wake < 0 ? -errno : 0;
	if (!ret)
		ret = -pthread_create(&w->thread, NULL, progress, w);
	if (ret) {
		kn__node_fini(&w->node);
		if (w->wake >= 0)
			close(w->wake);
		free(w);
		return ret;
	}
	pthread_mutex_lock(&w->lock);
	ret = wait_for(w, joined, 0, (int)w->cfg.startup_timeout_ms,
		       "waiting for the coordinator and the servers");
	w->local =
		kn__job_deltas(w->job.u.job.protocol, w->job.u.job.optimizer);
	pthread_mutex_unlock(&w->lock);
	if (ret) {
		kn_worker_destroy(w);
		return ret;
	}
	*out = w;
	return 0;
}

/* 64-byte aligned, zeroed: a fused group's buffers, the local ones. */
static void *zalloc64(size_t bytes)
{
	size_t n = (bytes + 63) & ~(size_t)63;
	void *p = aligned_alloc(64, n ? n : 64);

	if (p)
		memset(p, 0, n ? n : 64);
	return p;
}

static void local_free(struct wk_tensor *t)
{
	if (!t->user_grads)
		return; /* not a local-step job's: nothing of ours */
	free(t->grads);
	free(t->inbox);
	free(t->anchor);
	free(t->at_push);
	free(t->m);
	free(t->v);
}

/*
 * A local-step job's tensor: the program's gradients are read by
 * kn_worker_step_done alone; pushes read our delta buffer, pulls land
 * in our inbox, and the anchor, the copy at push time and the inner
 * optimizer's state (@optimizer's) are ours.  fp32 only: the merge is done in fp32.
 */
static int local_buffers(struct wk_tensor *t, uint32_t optimizer)
{
	size_t n = t->d.len;

	if (t->d.dtype != KN_DTYPE_FP32) {
		kn__log_as("worker",
			   "tensor '%s' is %s: workers that push model "
			   "deltas (esp, predicted; any protocol but bsp "
			   "under --optimizer sum) keep fp32 tensors only",
			   t->d.key, kn_dtype_name(t->d.dtype));
		return -ENOTSUP;
	}
	t->user_grads = t->grads;
	t->grads = zalloc64(n * sizeof(float));
	t->inbox = zalloc64(n * sizeof(float));
	t->anchor = zalloc64(n * sizeof(float));
	t->at_push = zalloc64(n * sizeof(float));
	/* the optimizer's state where it has one: momentum's m, Adam's m, v
	 * (none under sum: the program steps its own) */
	bool m = optimizer == KN__CONFIG_MOMENTUM ||
		 optimizer == KN__CONFIG_ADAM;

	if (m)
		t->m = zalloc64(n * sizeof(float));
	if (optimizer == KN__CONFIG_ADAM)
		t->v = zalloc64(n * sizeof(float));
	if (!t->grads || !t->inbox || !t->anchor || !t->at_push ||
	    (m && !t->m) || (optimizer == KN__CONFIG_ADAM && !t->v)) {
		local_free(t);
		return -ENOMEM;
	}
	return 0;
}

int kn_worker_register(struct kn_worker *w, const char *key,
		       enum kn_dtype dtype, size_t count, void *params,
		       void *grads)
{
	struct wk_tensor *t;
	int ret = 0;

	if (!w || !key || !params || !grads || !count ||
	    !kn_dtype_size(dtype) || strlen(key) >= KN__KEY_MAX)
		return -EINVAL;
	if (!strncmp(key, FUSED_PREFIX, strlen(FUSED_PREFIX))) {
		kn__log_as("worker",
			   "tensor key '%s': keys starting '" FUSED_PREFIX
			   "' name the engine's fused groups",
			   key);
		return -EINVAL;
	}
	pthread_mutex_lock(&w->lock);
	for (uint32_t i = 0; i < w->ntensors; i++)
		if (strcmp(w->tensors[i].d.key, key) == 0)
			ret = -EEXIST;
	if (!ret && w->state != WK_JOINED)
		ret = w->state == WK_FAILED ? w->error : -EBUSY;
	if (!ret) {
		t = realloc(w->tensors, (w->ntensors + 1) * sizeof(*t));
		if (!t) {
			ret = -ENOMEM;
		} else {
			w->tensors = t;
			t += w->ntensors++;
			memset(t, 0, sizeof(*t));
			strcpy(t->d.key, key);
			t->d.dtype = dtype;
			t->d.len = count;
			t->params = params;
			t->grads = grads;
			t->priority = w->next_priority++;
			if (w->local)
				ret = local_buffers(t, w->job.u.job.optimizer);
			if (ret)
				w->ntensors--;
		}
	}
	pthread_mutex_unlock(&w->lock);
	return ret;
}

int kn_worker_set_inbox(struct kn_worker *w, const char *key, void *inbox)
{
	int ret = -ENOENT;

	if (!w || !key || !inbox)
		return -EINVAL;
	if (w->local) {
		kn__log_as(
			"worker",
			"the job runs %s: the engine "
			"keeps the inbox itself (kn_worker_step_done)",
			kn__sync_protocol_name(w->job.u.job.protocol));
		return -EINVAL;
	}
	pthread_mutex_lock(&w->lock);
	for (uint32_t i = 0; i < w->ntensors; i++)
		if (strcmp(w->tensors[i].d.key, key) == 0) {
			w->tensors[i].inbox = inbox;
			ret = 0;
		}
	if (!ret && w->state != WK_JOINED)
		ret = -EBUSY;
	pthread_mutex_unlock(&w->lock);
	return ret;
}

int kn_worker_set_priority(struct kn_worker *w, const char *key, int priority)
{
	int ret = -ENOENT;

	if (!w || !key)
		return -EINVAL;
	pthread_mutex_lock(&w->lock);
	for (uint32_t i = 0; i < w->ntensors; i++)
		if (strcmp(w->tensors[i].d.key, key) == 0) {
			ret = w->state == WK_JOINED ? 0 : -EBUSY;
			if (!ret)
				w->tensors[i].priority = priority;
		}
	pthread_mutex_unlock(&w->lock);
	return ret;
}

/*
 * A BSP job under --optimizer sum has started: the servers' answers land
 * in the gradient buffers, the initial model too.  It becomes the
 * parameters, and the gradients start from zero again (autograd adds
 * into them).
 */
static void sum_start(struct kn_worker *w)
{
	for (uint32_t i = 0; i < w->ntensors; i++) {
		struct wk_tensor *t = &w->tensors[i];
		size_t bytes = t->d.len * kn_dtype_size(t->d.dtype);

		if (t->nmembers || t->inbox)
			continue;
		memcpy(t->params, t->grads, bytes);
		memset(t->grads, 0, bytes);
	}
	for (uint32_t i = 0; i < w->nmembers; i++) {
		struct wk_member *m = &w->members[i];
		size_t bytes = m->d.len * kn_dtype_size(m->d.dtype);

		if (m->inbox)
			continue;
		memcpy(m->params, m->grads, bytes);
		memset(m->grads, 0, bytes);
	}
}

/*
 * A local-step job has started: the initial model is in every inbox.
 * It becomes the parameters the program trains and the first anchor,
 * and the worker rule starts as if just released.
 */
static int local_start(struct kn_worker *w)
{
	struct kn__sync_params p;

	for (uint32_t i = 0; i < w->ntensors; i++) {
		struct wk_tensor *t = &w->tensors[i];
		size_t bytes = t->d.len * sizeof(float);

		memcpy(t->params, t->inbox, bytes);
		memcpy(t->anchor, t->inbox, bytes);
	}
	kn__job_sync_params(&w->job, w->job.u.job.workers, &p);
	return kn__sync_worker_create(&p, w->cfg.rank, &w->rule);
}

static void fused_free(struct wk_tensor *t)
{
	if (!t->nmembers)
		return;
	free(t->params);
	free(t->grads);
	free(t->inbox);
}

/*
 * A fused group of the members @mem[0 .. @n): one wire tensor, the
 * members' initial values in its parameters (what worker 0 sends).
 */
static int fused_group(uint32_t g, struct wk_member *mem, uint32_t n,
		       uint32_t first, struct wk_tensor *t)
{
	size_t es = kn_dtype_size(mem[0].d.dtype);
	uint64_t len = 0;

	memset(t, 0, sizeof(*t));
	for (uint32_t j = 0; j < n; j++) {
		mem[j].offset = len;
		len += mem[j].d.len;
	}
	snprintf(t->d.key, sizeof(t->d.key), FUSED_PREFIX "%04u", g);
	t->d.dtype = mem[0].d.dtype;
	t->d.len = len;
	t->first_member = first;
	t->nmembers = n;
	t->priority = mem[0].priority;
	for (uint32_t j = 1; j < n; j++)
		if (mem[j].priority < t->priority)
			t->priority = mem[j].priority;
	t->params = zalloc64(len * es);
	t->grads = zalloc64(len * es);
	t->inbox = zalloc64(len * es);
	if (!t->params || !t->grads || !t->inbox) {
		fused_free(t);
		return -ENOMEM;
	}
	for (uint32_t j = 0; j < n; j++)
		memcpy((char *)t->params + mem[j].offset * es, mem[j].params,
		       mem[j].d.len * es);
	return 0;
}

/*
 * The job's tensors below --fuse-bytes travel in groups: per dtype, in
 * key order, as many as fit one chunk (and MAX_MEMBERS); a group of one
 * stays itself.  Every worker computes the same groups from the same
 * table, so the servers see one table of wire tensors.  The tensors are
 * in key order; they stay so.
 */
static int fuse(struct kn_worker *w)
{
	uint64_t limit = w->job.u.job.fuse_bytes;
	uint64_t chunk = w->job.u.job.chunk_bytes;
	uint32_t n = w->ntensors, ngroups = 0, nmem = 0, nwire, k = 0;
	uint32_t *group = calloc(n + 1, sizeof(*group)); /* 0: none */
	uint32_t *size = calloc(n + 1, sizeof(*size));
	struct wk_tensor *out = NULL;
	struct wk_member *mem = NULL;
	int ret = group && size ? 0 : -ENOMEM;

	for (uint32_t dt = 0; !ret && dt <= KN_DTYPE_BF16; dt++) {
		uint64_t bytes = 0;
		uint32_t count = 0;

		for (uint32_t i = 0; i < n; i++) {
			const struct wk_tensor *t = &w->tensors[i];
			uint64_t b = t->d.len * kn_dtype_size(t->d.dtype);

			if (t->d.dtype != dt || b >= limit)
				continue;
			if (!count || bytes + b > chunk ||
			    count == MAX_MEMBERS) {
				ngroups++;
				bytes = 0;
				count = 0;
			}
			group[i] = ngroups;
			size[ngroups]++;
			bytes += b;
			count++;
		}
	}
	for (uint32_t i = 0; !ret && i < n; i++) {
		if (group[i] && size[group[i]] < 2)
			group[i] = 0; /* alone: no group */
		nmem += group[i] != 0;
	}
	if (ret || !nmem) {
		free(group);
		free(size);
		return ret;
	}
	/* the groups left, numbered from 0 in order */
	for (uint32_t g = 1, next = 0; g <= ngroups; g++)
		size[g] = size[g] >= 2 ? next++ : UINT32_MAX;
	nwire = n - nmem;
	for (uint32_t g = 1; g <= ngroups; g++)
		nwire += size[g] != UINT32_MAX;
	out = calloc(nwire, sizeof(*out));
	mem = calloc(nmem, sizeof(*mem));
	ret = out && mem ? 0 : -ENOMEM;
	for (uint32_t i = 0; !ret && i < n; i++)
		if (!group[i])
			out[k++] = w->tensors[i];
	for (uint32_t g = 1, m = 0; !ret && g <= ngroups; g++) {
		uint32_t first = m;

		if (size[g] == UINT32_MAX)
			continue;
		for (uint32_t i = 0; i < n; i++)
			if (group[i] == g) {
				const struct wk_tensor *t = &w->tensors[i];

				mem[m++] = (struct wk_member){
					.d = t->d,
					.params = t->params,
					.grads = t->grads,
					.inbox = t->inbox,
					.priority = t->priority,
				};
			}
		ret = fused_group(size[g], mem + first, m - first, first,
				  &out[k]);
		if (!ret)
			k++;
	}
	if (!ret) {
		qsort(out, nwire, sizeof(*out), by_key);
		for (uint32_t i = 0; i < nwire; i++)
			for (uint32_t j = 0; j < out[i].nmembers; j++)
				mem[out[i].first_member + j].wire = i;
		free(w->tensors);
		w->tensors = out;
		w->ntensors = nwire;
		w->members = mem;
		w->nmembers = nmem;
		if (w->node.verbose)
			kn__log(&w->node,
				"%u tensors below %llu bytes travel in %u "
				"groups",
				nmem, (unsigned long long)limit,
				nwire - (n - nmem));
	} else {
		for (uint32_t i = 0; out && i < k; i++)
			fused_free(&out[i]);
		free(out);
		free(mem);
	}
	free(group);
	free(size);
	return ret;
}

int kn_worker_start(struct kn_worker *w)
{
	int ret = 0;

	pthread_mutex_lock(&w->lock);
	if (w->state != WK_JOINED || !w->ntensors) {
		ret = w->state == WK_FAILED ? w->error : -EINVAL;
		pthread_mutex_unlock(&w->lock);
		return ret;
	}
	qsort(w->tensors, w->ntensors, sizeof(*w->tensors), by_key);
	/* local-step jobs push whole-model deltas of their own buffers */
	if (!w->local && w->job.u.job.fuse_bytes && !w->members)
		ret = fuse(w);
	if (ret) {
		pthread_mutex_unlock(&w->lock);
		return ret;
	}
	w->start_requested = true;
	wake(w);
	ret = wait_for(w, running, 0, (int)w->cfg.startup_timeout_ms,
		       "starting: waiting for the servers, the model and "
		       "the other workers");
	pthread_mutex_unlock(&w->lock);
	if (!ret && w->local)
		ret = local_start(w);
	else if (!ret &&
		 kn__job_sums(w->job.u.job.protocol, w->job.u.job.optimizer))
		sum_start(w);
	w->step_return = kn__now();
	return ret;
}

/*
 * ESP and PSP workers take local steps and push model deltas: a program
 * that pushes gradients itself would train as no protocol says, so it is
 * told at its first try.
 */
static int refuse_local(struct kn_worker *w)
{
	if (!w->told_local)
		kn__log(&w->node,
			"the job runs %s, whose workers push model deltas: "
			"train with kn_worker_step_done() (after each step), "
			"not with push, pull or kn_worker_step "
			"(docs/engine.md)",
			kn__sync_protocol_name(w->job.u.job.protocol));
	w->told_local = true;
	return -EPROTO;
}

static int tensor_index(struct kn_worker *w, const char *key, uint32_t *idx)
{
	if (!key) {
		*idx = UINT32_MAX;
		return 0;
	}
	for (uint32_t i = 0; i < w->ntensors; i++)
		if (!w->tensors[i].nmembers &&
		    strcmp(w->tensors[i].d.key, key) == 0) {
			*idx = i;
			return 0;
		}
	for (uint32_t i = 0; i < w->nmembers; i++)
		if (strcmp(w->members[i].d.key, key) == 0) {
			*idx = MEMBER_BIT | i;
			return 0;
		}
	return -ENOENT;
}

static int post_op(struct kn_worker *w, const char *key, bool push, bool pull,
		   uint64_t *handle)
{
	struct wk_op *op;
	uint32_t idx = UINT32_MAX;
	int ret;

	pthread_mutex_lock(&w->lock);
	ret = w->state == WK_RUNNING  ? tensor_index(w, key, &idx)
	      : w->state == WK_FAILED ? w->error
				      : -EBUSY;
	if (!ret && w->next_id - w->first_undone >= MAX_OPS)
		ret = -EAGAIN;
	if (ret) {
		pthread_mutex_unlock(&w->lock);
		return ret;
	}
	op = &w->ops[w->next_id % MAX_OPS];
	*op = (struct wk_op){ .id = w->next_id,
			      .tensor = idx,
			      .push = push,
			      .pull = pull,
			      .targets = op->targets,
			      .ntargets = op->ntargets,
			      .t_post = kn__now() };
	*handle = w->next_id++;
	if (push && !key)
		w->clock++;
	wake(w);
	pthread_mutex_unlock(&w->lock);
	return 0;
}

/* The program's own operations: not under a local-step protocol. */
static int post(struct kn_worker *w, const char *key, bool push, bool pull,
		uint64_t *handle)
{
	if (!w || !handle)
		return -EINVAL;
	if (w->local)
		return refuse_local(w);
	return post_op(w, key, push, pull, handle);
}

int kn_worker_push(struct kn_worker *w, const char *key, uint64_t *handle)
{
	return post(w, key, true, false, handle);
}

int kn_worker_pull(struct kn_worker *w, const char *key, uint64_t *handle)
{
	return post(w, key, false, true, handle);
}

int kn_worker_pushpull(struct kn_worker *w, const char *key, uint64_t *handle)
{
	return post(w, key, true, true, handle);
}

/* Under the lock: 1 done, 0 pending, or the op's error. */
static int op_state(struct kn_worker *w, uint64_t h)
{
	const struct wk_op *op = &w->ops[h % MAX_OPS];

	if (h >= w->next_id)
		return -EINVAL;
	if (op->id != h)
		return 1; /* long done: its slot was reused */
	if (!op->done)
		return w->state == WK_FAILED ? w->error : 0;
	return op->status ? op->status : 1;
}

int kn_worker_test(struct kn_worker *w, uint64_t handle)
{
	int ret;

	pthread_mutex_lock(&w->lock);
	ret = op_state(w, handle);
	pthread_mutex_unlock(&w->lock);
	return ret;
}

/* The stages of op @h, just waited for (once: its t_done is cleared). */
static void count_stages(struct kn_worker *w, struct wk_op *op, uint64_t h)
{
	struct wk_stages *st = &w->stages;
	double t = kn__now(), sent;

	if (op->id != h || !op->t_done || op->status)
		return;
	sent = op->push ? op->t_sent : op->t_first;
	kn__hist_add(&st->handoff, op->t_first - op->t_post);
	if (op->push)
		kn__hist_add(&st->send, op->t_sent - op->t_first);
	if (op->pull)
		kn__hist_add(&st->answer, op->t_done - sent);
	kn__hist_add(&st->wake, t - op->t_done);
	kn__hist_add(&st->round, t - op->t_post);
	op->t_done = 0;
}

static bool handle_done(struct kn_worker *w, uint64_t handle)
{
	return op_state(w, handle) != 0;
}

int kn_worker_wait(struct kn_worker *w, uint64_t handle, int timeout_ms)
{
	int ret;

	pthread_mutex_lock(&w->lock);
	/* a wait the caller limited may end so: not worth a line (a
	 * polling caller would write one per slice) */
	ret = wait_for(w, handle_done, handle,
		       timeout_ms < 0 ? (int)w->cfg.startup_timeout_ms
				      : timeout_ms,
		       timeout_ms < 0 ? "waiting for an operation" : NULL);
	if (!ret)
		ret = op_state(w, handle);
	if (ret == 1)
		count_stages(w, &w->ops[handle % MAX_OPS], handle);
	pthread_mutex_unlock(&w->lock);
	return ret < 0 ? ret : 0;
}

/*
 * ESP, PSP: what the servers said with the last releases: the local
 * steps the plan asks before the next push, the plan's epoch, and the
 * longest predicted wait (seconds) of any server.  0, or -EAGAIN for a
 * protocol that sends none or before the start.
 */
static int release_info(struct kn_worker *w, uint32_t *steps, uint64_t *epoch,
			float *hint)
{
	uint32_t st = 0;
	uint64_t ep = 0;
	float h = 0;

	pthread_mutex_lock(&w->lock);
	if (!w->layout || !w->release_info) {
		pthread_mutex_unlock(&w->lock);
		return -EAGAIN;
	}
	/* every chunk switches plans at the same round: take the largest
	 * epoch's steps, and the longest predicted wait of any server */
	for (uint32_t c = 0; c < w->layout->nchunks; c++) {
		const struct wk_chunk *k = &w->chunks[c];

		if (k->epoch > ep || c == 0) {
			ep = k->epoch;
			st = k->steps;
		}
		if (k->hint > h)
			h = k->hint;
	}
	pthread_mutex_unlock(&w->lock);
	*steps = st;
	*epoch = ep;
	*hint = h;
	return 0;
}

/*
 * PSP, CGP: tell the coordinator this worker's seconds per local step in
 * its last round (sent by the progress thread; reports that come before
 * it sent the last go as their mean).  0, or -EINVAL for a value that is
 * negative, not finite or above FLT_MAX.  Does not block.
 */
static int report_timing(struct kn_worker *w, double seconds)
{
	/* a float on the wire: above FLT_MAX it would be infinite */
	if (!(seconds >= 0) || !(seconds <= FLT_MAX))
		return -EINVAL;
	pthread_mutex_lock(&w->lock);
	/* reports that come faster than the thread sends them are
	 * averaged, not lost (their mean fits a float, as each does) */
	if (w->timing_count == UINT32_MAX) {
		w->timing_sum = 0;
		w->timing_count = 0;
	}
	w->timing_sum += seconds;
	w->timing_count++;
	wake(w);
	pthread_mutex_unlock(&w->lock);
	return 0;
}

int kn_worker_step(struct kn_worker *w, const char *key)
{
	double t = kn__now();
	uint64_t h;
	int ret = kn_worker_pushpull(w, key, &h);

	/* CGP groups workers by their compute time: the time since the
	 * last step returned, as kn_worker_step_done takes it */
	if (!ret &&
	    kn__sync_traits(w->job.u.job.protocol)->timing ==
		    KN__SYNC_TIMING_PLANNER &&
	    !key && w->step_return > 0)
		ret = report_timing(w, t - w->step_return);
	if (!ret)
		ret = kn_worker_wait(w, h, -1);
	w->step_return = kn__now();
	return ret;
}

uint64_t kn_worker_clock(const struct kn_worker *w)
{
	return w->clock;
}

unsigned int kn_worker_rank(const struct kn_worker *w)
{
	return w->cfg.rank;
}

unsigned int kn_worker_size(const struct kn_worker *w)
{
	return w->job.u.job.workers;
}

/*
 * The job as its coordinator set it up, as this worker was told when it
 * joined, into those fields of @cfg (the rest untouched): 0, or -EAGAIN
 * before the JOB message.
 */
static int job_config(const struct kn_worker *w, struct kn__config *cfg)
{
	const struct kn__msg *j = &w->job;

	if (j->type != KN__MSG_JOB)
		return -EAGAIN;
	cfg->workers = j->u.job.workers;
	cfg->servers = j->u.job.servers;
	cfg->sync = j->u.job.protocol;
	cfg->optimizer = (enum kn__config_optimizer)j->u.job.optimizer;
	cfg->chunk_bytes = (uint32_t)j->u.job.chunk_bytes;
	cfg->fuse_bytes = j->u.job.fuse_bytes;
	cfg->push_window = j->u.job.push_window;
	cfg->lr = j->u.job.lr;
	cfg->momentum = j->u.job.momentum;
	cfg->proto = j->u.job.proto;
	return 0;
}

/* ---- kn_worker_step_done: the worker rule, on the program's thread ---- */

int kn_worker_job(const struct kn_worker *w, struct kn_job_info *info)
{
	struct kn__config c = { 0 };

	if (!w || !info)
		return -EINVAL;
	if (job_config(w, &c))
		return -EAGAIN; /* not after kn_worker_create: it waits */
	kn__job_info(&c, info);
	return 0;
}

/* The job's optimizer on this worker's own copy, with its own state. */
static int inner_update(struct kn_worker *w)
{
	const struct kn__msg *j = &w->job;
	struct kn_update_params p = {
		.optimizer = (enum kn_optimizer)j->u.job.optimizer,
		.lr = j->u.job.lr,
		.grad_scale = 1,
		.momentum = j->u.job.momentum,
		.beta1 = 0.9f,
		.beta2 = 0.999f,
		.eps = 1e-8f,
		.step = ++w->inner_step,
	};

	for (uint32_t i = 0; i < w->ntensors; i++) {
		struct wk_tensor *t = &w->tensors[i];
		const void *g = t->user_grads;
		int ret = kn_update(&p, t->params, t->m, t->v, &g, 1,
				    KN_DTYPE_FP32, t->d.len);

		if (ret)
			return ret;
	}
	return 0;
}

/* ESP's significance test: |params - anchor| / |anchor| over the model. */
static float delta_ratio(const struct kn_worker *w)
{
	double sums[2] = { 0, 0 }; /* |x - a|^2, |a|^2 */

	for (uint32_t i = 0; i < w->ntensors; i++) {
		const struct wk_tensor *t = &w->tensors[i];

		kn__kernels->local_dist(t->params, t->anchor, t->d.len, sums);
	}
	return (float)(sqrt(sums[0]) / fmax(sqrt(sums[1]), 1e-12));
}

/*
 * The global model of the pending push has landed in the inboxes: the
 * parameters become it plus the progress made since the push, it is the
 * new anchor, and the rule hears of the release.  PSP's planner, or
 * ESP's chunk rules, hear the mean step time since the last release.
 */
static int local_released(struct kn_worker *w, double landed)
{
	struct kn__sync_worker_event ev = { .type = KN__SYNC_WEV_RELEASE };
	uint32_t next, steps = 1;
	uint64_t epoch = 0;
	float hint = 0;
	int ret;

	for (uint32_t i = 0; i < w->ntensors; i++) {
		struct wk_tensor *t = &w->tensors[i];

		kn__kernels->local_merge(t->params, t->anchor, t->inbox,
					 t->at_push, t->d.len);
	}
	w->pending = false;
	release_info(w, &steps, &epoch, &hint);
	ev.t = kn__now();
	ev.steps = steps;
	ev.epoch = epoch;
	ev.hint = hint;
	ev.rtt = landed - w->push_t;
	ret = kn__sync_worker_event(w->rule, &ev, &next);
	if (!ret && w->round_steps)
		ret = report_timing(w, w->round_s / w->round_steps);
	w->round_s = 0;
	w->round_steps = 0;
	return ret;
}

static int local_wait(struct kn_worker *w)
{
	int ret = kn_worker_wait(w, w->pending_handle, -1);

	return ret ? ret : local_released(w, kn__now());
}

/*
 * When the pending push's release landed, found done by a test after a
 * step on the copy: the release time is its own, not the step's end.
 */
static double landed_at(struct kn_worker *w)
{
	const struct wk_op *op = &w->ops[w->pending_handle % MAX_OPS];
	double t = 0;

	pthread_mutex_lock(&w->lock);
	if (op->id == w->pending_handle)
		t = op->t_done;
	pthread_mutex_unlock(&w->lock);
	return t > 0 ? t : kn__now();
}

/* Push the model delta since the anchor (a descent direction). */
static int local_push(struct kn_worker *w)
{
	for (uint32_t i = 0; i < w->ntensors; i++) {
		struct wk_tensor *t = &w->tensors[i];

		kn__kernels->local_delta(t->grads, t->at_push, t->anchor,
					 t->params, t->d.len);
	}
	w->push_t = kn__now();
	return post_op(w, NULL, true, true, &w->pending_handle);
}

static int local_step(struct kn_worker *w, double seconds, unsigned int flags,
		      unsigned int *result)
{
	struct kn__sync_worker_event ev = { .type = KN__SYNC_WEV_STEP };
	uint32_t next;
	int ret = 0;

	*result = KN_STEP_LOCAL;
	if (!(flags & KN_STEP_APPLIED) &&
	    w->job.u.job.optimizer == KN__CONFIG_SUM) {
		if (!w->told_local)
			kn__log(&w->node,
				"the job runs the workers' optimizer "
				"(--optimizer sum): step the model yourself "
				"and pass KN_STEP_APPLIED to "
				"kn_worker_step_done");
		w->told_local = true;
		return -EINVAL;
	}
	if (!(flags & KN_STEP_APPLIED))
		ret = inner_update(w);
	if (ret)
		return ret;
	w->round_s += seconds;
	w->round_steps++;
	ev.t = kn__now();
	ev.seconds = seconds;
	ev.delta_ratio = kn__sync_traits(w->job.u.job.protocol)->delta_ratio
				 ? delta_ratio(w)
				 : 0;
	ret = kn__sync_worker_event(w->rule, &ev, &next);
	if (ret)
		return ret;
	if (w->pending) {
		/* PSP, training on while the model is on its way */
		ret = kn_worker_test(w, w->pending_handle);
		if (ret == 1 || (ret == 0 && next == KN__SYNC_NEXT_WAIT)) {
			*result = KN_STEP_SYNCED;
			return ret == 1 ? local_released(w, landed_at(w))
					: local_wait(w);
		}
		return ret;
	}
	if (next != KN__SYNC_NEXT_PUSH)
		return 0;
	ret = local_push(w);
	if (ret)
		return ret;
	w->pending = true;
	*result = KN_STEP_PUSHED;
	ev = (struct kn__sync_worker_event){ .type = KN__SYNC_WEV_PUSHED,
					     .t = w->push_t };
	ret = kn__sync_worker_event(w->rule, &ev, &next);
	if (ret || next != KN__SYNC_NEXT_WAIT)
		return ret;
	*result = KN_STEP_SYNCED;
	return local_wait(w);
}

int kn_worker_step_done(struct kn_worker *w, double seconds, unsigned int flags,
			unsigned int *result)
{
	unsigned int what = KN_STEP_SYNCED;
	double now = kn__now();
	int ret;

	if (!w || (flags & ~KN_STEP_APPLIED) || isnan(seconds) ||
	    seconds > FLT_MAX)
		return -EINVAL;
	if (seconds < 0)
		seconds = w->step_return > 0 ? now - w->step_return : 0;
	if (w->local && !w->rule) /* not started */
		ret = -EINVAL;
	else if (w->local)
		ret = local_step(w, seconds, flags, &what);
	else if (flags & KN_STEP_APPLIED)
		ret = -EINVAL; /* the servers apply this job's update */
	else {
		uint64_t h;

		ret = post_op(w, NULL, true, true, &h);
		if (!ret && kn__sync_traits(w->job.u.job.protocol)->timing ==
				    KN__SYNC_TIMING_PLANNER)
			ret = report_timing(w, seconds);
		if (!ret)
			ret = kn_worker_wait(w, h, -1);
	}
	w->step_return = kn__now();
	if (!ret && result)
		*result = what;
	return ret;
}

int kn_worker_global_model(struct kn_worker *w, const char *key, void *dst)
{
	const struct wk_tensor *t;
	uint32_t i;

	if (!w || !key || !dst)
		return -EINVAL;
	if (tensor_index(w, key, &i))
		return -ENOENT;
	if (i & MEMBER_BIT) {
		const struct wk_member *m = &w->members[i & ~MEMBER_BIT];

		memcpy(dst, m->params, m->d.len * kn_dtype_size(m->d.dtype));
		return 0;
	}
	t = &w->tensors[i];
	memcpy(dst, w->local && w->rule ? (const void *)t->anchor : t->params,
	       t->d.len * kn_dtype_size(t->d.dtype));
	return 0;
}

int kn_worker_finish(struct kn_worker *w)
{
	int ret = 0;

	if (!w)
		return -EINVAL;
	if (w->pending)
		ret = local_wait(w);
	if (ret)
		return ret;
	pthread_mutex_lock(&w->lock);
	w->finished = true;
	wake(w);
	pthread_mutex_unlock(&w->lock);
	return 0;
}

/* --metrics: one JSON line, as the servers write theirs. */
static void write_metrics(const struct kn_worker *w)
{
	const struct wk_stages *st = &w->stages;
	char line[1024];
	size_t n;
	int m, fd;

	m = snprintf(line, sizeof(line),
		     "{\"role\":\"worker\",\"rank\":%u,\"status\":%d,"
		     "\"stages\":{",
		     w->cfg.rank, w->state == WK_FAILED ? w->error : 0);
	n = m > 0 ? (size_t)m : sizeof(line);
	n = kn__hist_json(line, n, sizeof(line), "handoff", &st->handoff);
	n = kn__hist_json(line, n, sizeof(line), "send", &st->send);
	n = kn__hist_json(line, n, sizeof(line), "answer", &st->answer);
	n = kn__hist_json(line, n, sizeof(line), "wake", &st->wake);
	n = kn__hist_json(line, n, sizeof(line), "round", &st->round);
	if (n + 3 >= sizeof(line))
		return;
	n += (size_t)snprintf(line + n, sizeof(line) - n, "}}\n");
	fd = open(w->cfg.metrics, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC,
		  0644);
	if (fd < 0 || write(fd, line, n) != (ssize_t)n)
		kn__log_as("worker", "cannot write the figures to %s: %s",
			   w->cfg.metrics, strerror(errno));
	if (fd >= 0)
		close(fd);
}

void kn_worker_destroy(struct kn_worker *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->lock);
	w->stop = true;
	wake(w);
	pthread_mutex_unlock(&w->lock);
	pthread_join(w->thread, NULL);
	if (w->cfg.metrics[0])
		write_metrics(w);
	for (uint32_t i = 0; i < MAX_OPS; i++)
		free(w->ops[i].targets);
	for (uint32_t i = 0; i < w->ntensors; i++) {
		local_free(&w->tensors[i]);
		fused_free(&w->tensors[i]);
	}
	kn__sync_worker_destroy(w->rule);
	free(w->tensors);
	free(w->members);
	free(w->servers);
	free(w->chunks);
	free(w->order);
	free(w->place);
	free(w->ready);
	kn__layout_free(w->layout);
	close(w->wake);
	pthread_mutex_destroy(&w->lock);
	pthread_cond_destroy(&w->cond);
	kn__auth_wipe(w->secret, sizeof(w->secret));
	free(w);
}
