/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pool.c - an optional pool of threads that splits one large kernel call.
 *
 * One core cannot saturate the memory system (bench_kernels --threads
 * shows by how much), so a pass over a large tensor is cut into equal
 * ranges, one per thread, the caller taking the first.  Passes below
 * kn__pool_threshold bytes run on the caller alone.  Waking a thread
 * that sleeps costs tens of microseconds on a virtual machine (measured:
 * about 75 us a call), so after a call the helpers, and the caller
 * waiting for them, spin for up to KN_POOL_SPIN_NS before they block on a
 * condition variable: back-to-back calls, the way a server aggregates
 * the chunks of a round, never sleep, and an idle pool costs nothing
 * once the spin is over.  Calls on one pool from several threads take
 * turns.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "kernels.h"

/* Range boundaries fall on multiples of this many elements (>= a line). */
#define KN_POOL_GRAIN 256
/* How long a thread polls for work (or completion) before it sleeps. */
#define KN_POOL_SPIN_NS 200000

struct kn_kernel_pool {
	pthread_mutex_t call_lock; /* one pooled call at a time */
	pthread_mutex_t lock;	   /* with the condition variables */
	pthread_cond_t wake;	   /* helpers: gen moved or stop set */
	pthread_cond_t done;	   /* caller: pending reached 0 */
	const struct kn__job *job; /* published by the release on gen */
	atomic_ulong gen;	   /* bumped for every job */
	atomic_uint pending;	   /* helpers still running the job */
	atomic_bool stop;
	unsigned int parts; /* helpers + 1 */
	unsigned int nthreads;
	pthread_t threads[];
};

struct helper_arg {
	struct kn_kernel_pool *pool;
	unsigned int part;
};

void kn__job_run(const struct kn__job *j, size_t begin, size_t end)
{
	if (j->sum)
		j->sum(j->dst, j->first, j->rest, j->nrest, begin, end,
		       j->alpha, j->nt);
	else if (j->wsum)
		j->wsum(j->dst, j->first, j->rest, j->weight, j->nrest, begin,
			end, j->nt);
	else if (j->wupdate)
		j->wupdate(j->coef, j->w, j->m, j->v, j->first, j->rest,
			   j->weight, j->nrest, begin, end);
	else
		j->update(j->coef, j->w, j->m, j->v, j->first, j->rest,
			  j->nrest, begin, end);
}

static void run_part(const struct kn__job *j, unsigned int part,
		     unsigned int parts)
{
	size_t per = (j->count / parts) / KN_POOL_GRAIN * KN_POOL_GRAIN;
	size_t begin = per * part;
	size_t end = part + 1 == parts ? j->count : begin + per;

	kn__job_run(j, begin, end);
}

static long long now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long long)t.tv_sec * 1000000000 + t.tv_nsec;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

/* Polls @ready(@pool, @arg) for up to KN_POOL_SPIN_NS; true if it held. */
static bool spin_until(bool (*ready)(struct kn_kernel_pool *, unsigned long),
		       struct kn_kernel_pool *pool, unsigned long arg)
{
	long long end = now_ns() + KN_POOL_SPIN_NS;

	for (unsigned int i = 1;; i++) {
		if (ready(pool, arg))
			return true;
		cpu_relax();
		/* the clock is a vDSO call: read it now and then */
		if (i % 64 == 0 && now_ns() > end)
			return false;
	}
}

static bool job_posted(struct kn_kernel_pool *pool, unsigned long seen)
{
	return atomic_load_explicit(&pool->gen, memory_order_acquire) != seen ||
	       atomic_load_explicit(&pool->stop, memory_order_acquire);
}

static bool job_done(struct kn_kernel_pool *pool, unsigned long unused)
{
	(void)unused;
	/* pairs with the release decrement in helper_main() */
	return atomic_load_explicit(&pool->pending, memory_order_acquire) == 0;
}

static void *helper_main(void *p)
{
	struct helper_arg a = *(struct helper_arg *)p;
	struct kn_kernel_pool *pool = a.pool;
	unsigned long seen = 0;

	free(p);
	for (;;) {
		if (!spin_until(job_posted, pool, seen)) {
			pthread_mutex_lock(&pool->lock);
			while (!job_posted(pool, seen))
				pthread_cond_wait(&pool->wake, &pool->lock);
			pthread_mutex_unlock(&pool->lock);
		}
		if (atomic_load_explicit(&pool->stop, memory_order_acquire))
			break;
		/* the acquire load of gen made pool->job visible */
		seen = atomic_load_explicit(&pool->gen, memory_order_acquire);
		run_part(pool->job, a.part, pool->parts);
		if (atomic_fetch_sub_explicit(&pool->pending, 1,
					      memory_order_release) == 1) {
			pthread_mutex_lock(&pool->lock);
			pthread_cond_signal(&pool->done);
			pthread_mutex_unlock(&pool->lock);
		}
	}
	return NULL;
}

static void stop_helpers(struct kn_kernel_pool *pool, unsigned int started)
{
	pthread_mutex_lock(&pool->lock);
	atomic_store_explicit(&pool->stop, true, memory_order_release);
	pthread_cond_broadcast(&pool->wake);
	pthread_mutex_unlock(&pool->lock);
	for (unsigned int t = 0; t < started; t++)
		pthread_join(pool->threads[t], NULL);
}

int kn_kernel_pool_create(unsigned int threads, struct kn_kernel_pool **out)
{
	struct kn_kernel_pool *pool;
	unsigned int t;
	int ret;

	if (threads < 1 || threads > KN_KERNEL_POOL_MAX || !out)
		return -EINVAL;
	pool = calloc(1, sizeof(*pool) + (threads - 1) * sizeof(pthread_t));
	if (!pool)
		return -ENOMEM;
	pool->nthreads = threads - 1;
	pool->parts = threads;
	pthread_mutex_init(&pool->call_lock, NULL);
	pthread_mutex_init(&pool->lock, NULL);
	pthread_cond_init(&pool->wake, NULL);
	pthread_cond_init(&pool->done, NULL);
	for (t = 0; t < pool->nthreads; t++) {
		struct helper_arg *a = malloc(sizeof(*a));

		if (!a) {
			ret = -ENOMEM;
			goto err_stop;
		}
		*a = (struct helper_arg){ pool, t + 1 };
		ret = -pthread_create(&pool->threads[t], NULL, helper_main, a);
		if (ret) {
			free(a);
			goto err_stop;
		}
	}
	*out = pool;
	return 0;

err_stop:
	stop_helpers(pool, t);
	pthread_cond_destroy(&pool->done);
	pthread_cond_destroy(&pool->wake);
	pthread_mutex_destroy(&pool->lock);
	pthread_mutex_destroy(&pool->call_lock);
	free(pool);
	return ret;
}

void kn_kernel_pool_destroy(struct kn_kernel_pool *pool)
{
	if (!pool)
		return;
	stop_helpers(pool, pool->nthreads);
	pthread_cond_destroy(&pool->done);
	pthread_cond_destroy(&pool->wake);
	pthread_mutex_destroy(&pool->lock);
	pthread_mutex_destroy(&pool->call_lock);
	free(pool);
}

unsigned int kn_kernel_pool_threads(const struct kn_kernel_pool *pool)
{
	return pool ? pool->parts : 1;
}

void kn__pool_run(struct kn_kernel_pool *pool, const struct kn__job *j,
		  size_t bytes)
{
	if (!pool || pool->nthreads == 0 || bytes < kn__pool_threshold ||
	    j->count < (size_t)KN_POOL_GRAIN * pool->parts) {
		kn__job_run(j, 0, j->count);
		return;
	}
	pthread_mutex_lock(&pool->call_lock);
	pool->job = j;
	atomic_store_explicit(&pool->pending, pool->nthreads,
			      memory_order_relaxed);
	/*
	 * The release publishes job and pending to the helpers' acquire
	 * load of gen; taking the lock before the broadcast means a helper
	 * between its check and its wait cannot miss it.
	 */
	atomic_fetch_add_explicit(&pool->gen, 1, memory_order_release);
	pthread_mutex_lock(&pool->lock);
	pthread_cond_broadcast(&pool->wake);
	pthread_mutex_unlock(&pool->lock);

	run_part(j, 0, pool->parts);

	if (!spin_until(job_done, pool, 0)) {
		pthread_mutex_lock(&pool->lock);
		while (!job_done(pool, 0))
			pthread_cond_wait(&pool->done, &pool->lock);
		pthread_mutex_unlock(&pool->lock);
	}
	pthread_mutex_unlock(&pool->call_lock);
}
