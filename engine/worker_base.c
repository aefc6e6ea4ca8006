/* SPDX-License-Identifier: Apache-2.0 */
/*
 * worker_base.c - the bottom of the worker's files: what the others
 * share, calling none of them but the key table.  The handoff between
 * the program's thread and the progress thread (the wake, an
 * operation's post, test and wait, a wait under the lock), failure,
 * which ends every operation and wait, and the 64-byte aligned buffers
 * of fused groups and local steps.  worker_priv.h says how the files
 * fit.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "worker_priv.h"

/*
 * Tell the thread there is news.  A thread that busy-polls sees the flag;
 * only one asleep (or about to be: it sets sleeping, then looks at the
 * news once more) needs the eventfd, a system call on both sides.
 */
void kn__wk_wake(struct kn_worker *w)
{
	uint64_t one = 1;

	atomic_store(&w->news, 1);
	if (!atomic_load(&w->node.sleeping))
		return;
	/*
	 * The count before kicked: a post wakes without the lock, and the
	 * thread reads the eventfd only once it saw kicked (its exchange
	 * under the lock pairs with this store), so it never sees kicked
	 * before the count is there to read, which would leave a count
	 * behind that no kick clears.
	 */
	if (write(w->wake, &one, sizeof(one)) < 0)
		kn__log(&w->node, "eventfd: %s", strerror(errno));
	atomic_store(&w->kicked, true);
}

/* Wait under the lock until @cond(w, arg) or failure or the deadline. */
int kn__wk_wait_for(struct kn_worker *w,
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

/* Everything fails with @err: ops, waits, the state. */
void kn__wk_fail(struct kn_worker *w, int err)
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

/*
 * Post an operation.  From the start on the key is looked up in the key
 * table without the lock; the lock covers the operation's slot alone,
 * and the thread is woken after it is released, so that the thread,
 * woken, does not wait for the lock.
 */
int kn__wk_post_op(struct kn_worker *w, const char *key, bool push, bool pull,
		   uint64_t *handle)
{
	const struct wk_keys *k =
		atomic_load_explicit(&w->keys, memory_order_acquire);
	struct wk_op *op;
	uint32_t idx = UINT32_MAX;
	double t = kn__now();
	int found = k ? kn__wk_keys_find(w, k, key, &idx) : 0;
	int ret;

	pthread_mutex_lock(&w->lock);
	if (!k && w->state == WK_RUNNING)
		found = kn__wk_tensor_index(w, key, &idx);
	ret = w->state == WK_RUNNING  ? found
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
			      .t_post = t };
	*handle = w->next_id++;
	if (push && !key)
		w->clock++;
	pthread_mutex_unlock(&w->lock);
	kn__wk_wake(w);
	return 0;
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
	ret = kn__wk_wait_for(
		w, handle_done, handle,
		timeout_ms < 0 ? (int)w->cfg.startup_timeout_ms : timeout_ms,
		timeout_ms < 0 ? "waiting for an operation" : NULL);
	if (!ret)
		ret = op_state(w, handle);
	if (ret == 1)
		count_stages(w, &w->ops[handle % MAX_OPS], handle);
	pthread_mutex_unlock(&w->lock);
	return ret < 0 ? ret : 0;
}

/* 64-byte aligned, zeroed: a fused group's buffers, the local ones. */
void *kn__wk_zalloc64(size_t bytes)
{
	size_t n = (bytes + 63) & ~(size_t)63;
	void *p = aligned_alloc(64, n ? n : 64);

	if (p)
		memset(p, 0, n ? n : 64);
	return p;
}
