/* SPDX-License-Identifier: Apache-2.0 */
/*
 * worker_push.c - the worker's data path, in the progress thread:
 * operations in order, each chunk's pushes taken while it has a free
 * slot, their writes posted most urgent first within the push window
 * (the node queues what the transport has no room for),
 * the answers (PULL writes) counted, and operations done once every
 * answer they wait for is in.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "worker_priv.h"

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

static void ready_set(struct kn_worker *w, uint32_t c, bool on)
{
	uint32_t k = w->place[c];

	if (on)
		w->ready[k / 64] |= (uint64_t)1 << (k % 64);
	else
		w->ready[k / 64] &= ~((uint64_t)1 << (k % 64));
}

/*
 * Take a push of chunk @c for @op (NULL: the push of the chunk's fused
 * group): its answer is due from now on, its write goes when schedule()
 * picks it.  False while both of the chunk's slots are taken.
 */
static bool take_push(struct kn_worker *w, uint32_t c, struct wk_op *op)
{
	struct wk_chunk *wc = &w->chunks[c];

	if (wc->expect - wc->delivered >= 2 || wc->pushed - wc->wdone >= 4)
		return false;
	wc->op[wc->pushed % 4] = op;
	wc->pushed++;
	wc->expect++;
	ready_set(w, c, true);
	return true;
}

/* Group @i's members are all in: its push, once a slot is free. */
static void post_group(struct kn_worker *w, uint32_t i)
{
	struct wk_tensor *t = &w->tensors[i];

	if (w->state != WK_RUNNING || t->contributed < t->nmembers ||
	    !take_push(w, w->layout->first_chunk[i], NULL))
		return;
	t->gen++;
	t->contributed = 0;
	t->sending = true;
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
			/* the chunk's record is the write's context */
			ret = kn__chan_write(
				s->ch, t->gmr,
				kc->first * kn_dtype_size(t->d.dtype),
				kc->bytes, &s->slots,
				kn__layout_own_slot(l, c, parity),
				kn__imm(KN__IMM_PUSH, parity, c), wc);
			if (ret) {
				kn__log(&w->node, "push to server %u: %s",
					kc->server, strerror(-ret));
				kn__wk_fail(w, ret);
				return;
			}
			w->inflight += kc->bytes;
			if (++wc->written == wc->pushed)
				ready_set(w, c, false);
		}
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
void kn__wk_advance(struct kn_worker *w)
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
				bool in = kn__wk_push_fused(w, op, kc->tensor);

				/* whoever's part completed the group */
				post_group(w, kc->tensor);
				if (!in)
					goto wait; /* the group is busy */
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
				kn__wk_fail(w, -ENOMEM);
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

/* Count what of chunk @c's releases is now complete. */
void kn__wk_delivered(struct kn_worker *w, uint32_t c)
{
	struct wk_chunk *k = &w->chunks[c];
	struct wk_tensor *t = &w->tensors[w->layout->chunks[c].tensor];
	uint64_t done = k->writes;

	if (w->release_info && k->infos < done)
		done = k->infos;
	else if (k->infos == 0)
		done = 0; /* the first release comes with its version */
	if (done > k->delivered && t->nmembers)
		kn__wk_unpack(w, t);
	for (; k->delivered < done; k->delivered++) {
		if (k->delivered == 0 &&
		    ++w->delivered_once == w->layout->nchunks)
			kn__wk_first_model_in(w);
		else if (k->delivered == 1 && w->skipping &&
			 w->state == WK_SERVERS && --w->skipping == 0)
			kn__wk_ready_to_start(w);
	}
	if (t->nmembers) /* a slot is free */
		post_group(w, w->layout->chunks[c].tensor);
	check_ops(w);
	kn__wk_advance(w);
}

void kn__wk_on_imm(struct kn__node *n, struct kn__chan *ch, uint32_t imm,
		   uint64_t bytes)
{
	struct kn_worker *w = wk_of(n);
	uint32_t c = kn__imm_chunk(imm);

	if (!w->layout || kn__imm_op(imm) != KN__IMM_PULL ||
	    c >= w->layout->nchunks || ch->peer_role != KN__ROLE_SERVER ||
	    w->layout->chunks[c].server != ch->peer_rank ||
	    bytes != w->layout->chunks[c].bytes) {
		kn__log(n, "%s: a write that is no answer of ours", ch->name);
		kn__wk_fail(w, -EPROTO);
		return;
	}
	w->chunks[c].writes++;
	kn__wk_delivered(w, c);
}

/*
 * A write of ours is done.  Its context says which: a push's is its
 * chunk's record (the chunk's op, or its group, is told), an INIT's or a
 * SKIP's is NULL (nothing waits for those).
 */
void kn__wk_on_written(struct kn__node *n, void *user, int status)
{
	struct kn_worker *w = wk_of(n);
	struct wk_chunk *wc = user;
	struct wk_tensor *t;
	struct wk_op *op;
	uint32_t c;

	if (!wc)
		return;
	if (status)
		kn__wk_fail(w, status);
	c = (uint32_t)(wc - w->chunks);
	t = &w->tensors[w->layout->chunks[c].tensor];
	op = wc->op[wc->wdone++ % 4];
	w->inflight -= w->layout->chunks[c].bytes;
	if (t->nmembers) {
		/* a group's: its buffer takes the next push now */
		t->sending = false;
	} else if (--op->writes == 0) {
		op->t_sent = kn__now();
	}
	/* the window has room, a group may take more */
	kn__wk_advance(w);
}
