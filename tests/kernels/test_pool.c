/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_pool.c - the kernel thread pool: ranges cover a call exactly once,
 * one per thread with the caller taking the first; pooled sums and
 * updates are bit-identical to single-threaded ones; small passes stay on
 * the caller; calls from several threads on one pool take turns; bad
 * arguments are refused.
 */
#include <pthread.h>

#include "kernel_test.h"

#define MAXPARTS 8

/* What a recording "kernel" saw: which thread ran which range. */
static struct {
	pthread_mutex_t lock;
	unsigned int calls;
	size_t begin[MAXPARTS], end[MAXPARTS];
	pthread_t who[MAXPARTS];
} seen = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void record(void *dst, const void *first, const void *const *rest,
		   unsigned int nrest, size_t begin, size_t end, float alpha,
		   bool nt)
{
	(void)dst, (void)first, (void)rest, (void)nrest, (void)alpha, (void)nt;
	/* no assertion here: this may run on a helper thread */
	pthread_mutex_lock(&seen.lock);
	if (seen.calls < MAXPARTS) {
		seen.begin[seen.calls] = begin;
		seen.end[seen.calls] = end;
		seen.who[seen.calls] = pthread_self();
	}
	seen.calls++;
	pthread_mutex_unlock(&seen.lock);
}

Test(pool, ranges_cover_the_call_once_one_per_thread)
{
	struct kn_kernel_pool *pool;
	struct kn__job j = { .count = 100003, .sum = record };
	size_t saved = kn__pool_threshold;
	bool covered[100003] = { false };

	cr_assert_eq(kn_kernel_pool_create(4, &pool), 0);
	cr_assert_eq(kn_kernel_pool_threads(pool), 4);
	kn__pool_threshold = 0;
	seen.calls = 0;
	kn__pool_run(pool, &j, 1);
	kn__pool_threshold = saved;
	cr_assert_eq(seen.calls, 4);
	for (unsigned int c = 0; c < seen.calls; c++) {
		for (size_t i = seen.begin[c]; i < seen.end[c]; i++) {
			cr_assert(!covered[i], "element %zu twice", i);
			covered[i] = true;
		}
		/* the caller runs the first range itself */
		if (seen.begin[c] == 0)
			cr_assert(pthread_equal(seen.who[c], pthread_self()));
		for (unsigned int d = 0; d < c; d++)
			cr_assert(!pthread_equal(seen.who[c], seen.who[d]),
				  "two ranges on one thread");
	}
	for (size_t i = 0; i < j.count; i++)
		cr_assert(covered[i], "element %zu not run", i);
	kn_kernel_pool_destroy(pool);
}

Test(pool, small_passes_stay_on_the_caller)
{
	struct kn_kernel_pool *pool;
	struct kn__job j = { .count = 100000, .sum = record };

	cr_assert_eq(kn_kernel_pool_create(3, &pool), 0);
	seen.calls = 0;
	kn__pool_run(pool, &j, kn__pool_threshold - 1);
	cr_assert_eq(seen.calls, 1);
	cr_assert_eq(seen.begin[0], 0);
	cr_assert_eq(seen.end[0], 100000);
	cr_assert(pthread_equal(seen.who[0], pthread_self()));
	/* and so does everything without a pool */
	seen.calls = 0;
	kn__pool_run(NULL, &j, (size_t)-1);
	cr_assert_eq(seen.calls, 1);
	kn_kernel_pool_destroy(pool);
}

#define LEN 300007 /* not a multiple of the grain: an odd last range */
#define N   5

static float in[N][LEN], out1[LEN], out2[LEN];
static uint16_t h[N][LEN], hout1[LEN], hout2[LEN];

/* @dt's sum of @src into @one by one thread and into @many by @pool: the
 * same @bytes. */
static void assert_pool_sum(struct kn_kernel_pool *pool, void *one, void *many,
			    size_t bytes, enum kn_dtype dt,
			    const void *const *src, float alpha)
{
	cr_assert_eq(kn_sum(one, dt, src, N, dt, LEN, alpha), 0);
	cr_assert_eq(kn_sum_pool(pool, many, dt, src, N, dt, LEN, alpha), 0);
	cr_assert_eq(memcmp(one, many, bytes), 0);
}

Test(pool, sums_are_bit_identical_to_one_thread)
{
	struct kn_kernel_pool *pool;
	const void *src[N], *hsrc[N];
	uint64_t seed = 21;
	size_t saved = kn__pool_threshold;

	for (int k = 0; k < N; k++) {
		fill_random(KN_DTYPE_FP32, in[k], LEN, &seed);
		fill_random(KN_DTYPE_BF16, h[k], LEN, &seed);
		src[k] = in[k];
		hsrc[k] = h[k];
	}
	cr_assert_eq(kn_kernel_pool_create(3, &pool), 0);
	kn__pool_threshold = 0;
	assert_pool_sum(pool, out1, out2, sizeof(out1), KN_DTYPE_FP32, src,
			0.2f);
	assert_pool_sum(pool, hout1, hout2, sizeof(hout1), KN_DTYPE_BF16, hsrc,
			1.0f);
	kn__pool_threshold = saved;
	kn_kernel_pool_destroy(pool);
}

Test(pool, updates_are_bit_identical_to_one_thread)
{
	static float w1[LEN], w2[LEN], m1[LEN], m2[LEN], v1[LEN], v2[LEN];
	struct kn_kernel_pool *pool;
	struct kn_update_params p = { .optimizer = KN_OPT_ADAM,
				      .lr = 1e-3f,
				      .grad_scale = 1.0f / N,
				      .beta1 = 0.9f,
				      .beta2 = 0.999f,
				      .eps = 1e-8f,
				      .step = 3 };
	const void *src[N];
	uint64_t seed = 22;
	size_t saved = kn__pool_threshold;

	fill_inputs(&in[0][0], src, N, LEN, &seed);
	twin_state(w1, w2, m1, m2, v1, v2, LEN, &seed);
	cr_assert_eq(kn_kernel_pool_create(2, &pool), 0);
	kn__pool_threshold = 0;
	cr_assert_eq(kn_update(&p, w1, m1, v1, src, N, KN_DTYPE_FP32, LEN), 0);
	cr_assert_eq(kn_update_pool(pool, &p, w2, m2, v2, src, N, KN_DTYPE_FP32,
				    LEN),
		     0);
	kn__pool_threshold = saved;
	cr_assert_eq(memcmp(w1, w2, sizeof(w1)), 0);
	cr_assert_eq(memcmp(m1, m2, sizeof(m1)), 0);
	cr_assert_eq(memcmp(v1, v2, sizeof(v1)), 0);
	kn_kernel_pool_destroy(pool);
}

/* Two threads share one pool; each result must be its own. */
struct caller {
	struct kn_kernel_pool *pool;
	float *out;
	float alpha;
	int ret;
};

static void *call_many(void *p)
{
	struct caller *c = p;
	const void *src[N] = { in[0], in[1], in[2], in[3], in[4] };

	for (int r = 0; r < 20 && c->ret == 0; r++)
		c->ret = kn_sum_pool(c->pool, c->out, KN_DTYPE_FP32, src, N,
				     KN_DTYPE_FP32, LEN, c->alpha);
	return NULL;
}

Test(pool, concurrent_callers_take_turns)
{
	static float ref[LEN];
	struct kn_kernel_pool *pool;
	struct caller a, b;
	const void *src[N] = { in[0], in[1], in[2], in[3], in[4] };
	pthread_t t;
	size_t saved = kn__pool_threshold;
	uint64_t seed = 23;

	for (int k = 0; k < N; k++)
		fill_random(KN_DTYPE_FP32, in[k], LEN, &seed);
	cr_assert_eq(kn_kernel_pool_create(2, &pool), 0);
	kn__pool_threshold = 0;
	a = (struct caller){ pool, out1, 1.0f, 0 };
	b = (struct caller){ pool, out2, 0.5f, 0 };
	cr_assert_eq(pthread_create(&t, NULL, call_many, &a), 0);
	call_many(&b);
	pthread_join(t, NULL);
	kn__pool_threshold = saved;
	cr_assert_eq(a.ret, 0);
	cr_assert_eq(b.ret, 0);
	cr_assert_eq(
		kn_sum(ref, KN_DTYPE_FP32, src, N, KN_DTYPE_FP32, LEN, 1.0f),
		0);
	cr_assert_eq(memcmp(ref, out1, sizeof(ref)), 0);
	cr_assert_eq(
		kn_sum(ref, KN_DTYPE_FP32, src, N, KN_DTYPE_FP32, LEN, 0.5f),
		0);
	cr_assert_eq(memcmp(ref, out2, sizeof(ref)), 0);
	kn_kernel_pool_destroy(pool);
}

Test(pool, invalid_arguments)
{
	struct kn_kernel_pool *pool = (struct kn_kernel_pool *)&pool;
	float x[4] = { 0 };
	const void *src[1] = { x };

	cr_assert_eq(kn_kernel_pool_create(0, &pool), -EINVAL);
	cr_assert_eq(kn_kernel_pool_create(KN_KERNEL_POOL_MAX + 1, &pool),
		     -EINVAL);
	cr_assert_eq(kn_kernel_pool_create(2, NULL), -EINVAL);
	/* the out-parameter is untouched on failure */
	cr_assert_eq(pool, (struct kn_kernel_pool *)&pool);
	kn_kernel_pool_destroy(NULL);
	cr_assert_eq(kn_kernel_pool_threads(NULL), 1);
	/* a pooled call checks its arguments like the plain one */
	cr_assert_eq(kn_sum_pool(NULL, x, KN_DTYPE_FP32, src, 0, KN_DTYPE_FP32,
				 4, 1.0f),
		     -EINVAL);
	cr_assert_eq(kn_update_pool(NULL, NULL, x, NULL, NULL, src, 1,
				    KN_DTYPE_FP32, 4),
		     -EINVAL);
	/* one thread in all: a pool with no helpers works */
	cr_assert_eq(kn_kernel_pool_create(1, &pool), 0);
	cr_assert_eq(kn_sum_pool(pool, x, KN_DTYPE_FP32, src, 1, KN_DTYPE_FP32,
				 4, 2.0f),
		     0);
	kn_kernel_pool_destroy(pool);
}
