/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_kernels.c - figures for the aggregation kernels, on the public API.
 *
 * In one run and on one thread it measures: a STREAM-style triad, with
 * regular and with non-temporal stores, as the memory bandwidth one core
 * gets on this machine; the pairwise reduction most parameter servers run
 * (N - 1 passes of dst += src, through Kanel's own 2-input kernel so that
 * the comparison is fair); the fused N-way kn_sum() on fp32, fp16 and bf16
 * inputs; and kn_update() for SGD, momentum and Adam against a two-pass
 * sum-then-update.  Every figure is a median with min and max.  GB/s
 * counts the bytes a call reads plus writes, frac_of_stream divides it by
 * the faster triad, and ratio is the baseline's time over the kernel's.
 * A kernel and its baseline (and, for inputs of 4 MiB and more, a 64 MiB
 * triad) are sampled in turn, so ratios compare the same stretch of time.
 * With --threads T every kernel call goes through a kernel pool of T
 * threads, and the rows are named KERNEL_tT.
 * Buffers sit at distinct offsets modulo 4 KiB, as kanel.h advises;
 * sum_alias4k shows what a many-input sum costs when they do not.  It
 * prints figures and judges nothing: it is not a test.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef __x86_64__
#include <immintrin.h>
#define TRIADS 2 /* regular and non-temporal stores */
#else
#define TRIADS 1 /* C has no portable streaming store */
#endif

#include "bench_util.h"
#include "kanel.h"

#define MAX_INPUTS    256  /* largest N */
#define MAX_REPS      1000 /* largest --reps */
#define MAX_SET	      3	   /* functions measured in turn */
#define NEAR_MIB      4	   /* from this input size, triad interleaved */
#define REF_TRIAD_MIB 64   /* arrays of the interleaved triad: 6x the LLC */
#define MIN_SAMPLES   5
#define SAMPLE_NS     50e3 /* shortest sample: far above the clock's cost */
#define WARM_NS	      5e6  /* calls shorter than this are warmed (see below) */
#define PAGE_ALIGN    4096
#define STAGGER	      320 /* 5 lines: 64 distinct L1 sets modulo 4 KiB */
#define PATTERN_LEN   16384
#define KIB	      ((size_t)1 << 10)
#define MIB	      ((size_t)1 << 20)

/* --kernels groups, in the order of group_names */
enum group {
	G_SUM = 1 << 0,
	G_PAIRWISE = 1 << 1,
	G_SGD = 1 << 2, /* then momentum and Adam, as enum kn_optimizer */
	G_ALIAS = 1 << 5,
	G_WEIGHTED = 1 << 6,
};

static const char *const group_names[] = {
	"sum", "pairwise", "sgd", "momentum", "adam", "alias", "weighted",
};

static struct {
	bool quick, csv, progress;
	unsigned int reps;	  /* samples per measurement; 0: by duration */
	unsigned int threads;	  /* --threads: kernel pool size, 0/1 none */
	unsigned int max_samples; /* samples when they are short */
	double budget_ns;	  /* time of a measurement when they are long */
	size_t triad_bytes;
	bool upd_quick; /* quick mode's default: updates at N = 2 and 8 */
	size_t sizes[BENCH_MAX_LIST], inputs[BENCH_MAX_LIST];
	unsigned int nsizes, ninputs;
	unsigned int dtypes[BENCH_MAX_LIST], ndtypes;
	unsigned int groups;
} cfg;

static float pattern[PATTERN_LEN];

typedef void bench_fn(const void *ctx);

struct triad {
	float *a;
	const float *b, *c;
	size_t len;
	bool nt;
};

static double stream_gbps;	      /* the faster triad's */
static struct kn_kernel_pool *pool_k; /* --threads above 1: every call's */
static struct triad ref_triad; /* that triad, interleaved with large rows */
static char *triad_mem[3];

/*
 * Every buffer, allocated once at the largest size and used in part by
 * the smaller measurements, so that page faults and fills happen once.
 * Inputs come first, then the output, w, m, v and the two-pass scratch.
 */
static struct {
	char *base[MAX_INPUTS + 5];
	unsigned int nin;
	size_t alloc;
} pool;

/* One kernel call's arguments, pointing into the pool. */
struct job {
	enum kn_dtype dtype;
	unsigned int n;
	size_t count; /* elements of one input */
	const void *in[MAX_INPUTS];
	void *out;
	float *w, *m, *v, *scratch;
	struct kn_update_params par;
};

static void check(int ret, const char *fn)
{
	if (ret) {
		fprintf(stderr, "bench_kernels: %s: %s\n", fn, strerror(-ret));
		exit(1);
	}
}

static void *alloc_or_die(size_t bytes)
{
	void *p = aligned_alloc(PAGE_ALIGN, bytes);

	if (!p) {
		fprintf(stderr, "bench_kernels: cannot allocate %zu bytes\n",
			bytes);
		exit(1);
	}
	return p;
}

static double time_batch(bench_fn *fn, const void *ctx, unsigned long batch)
{
	struct timespec t0, t1;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (unsigned long i = 0; i < batch; i++)
		fn(ctx);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (double)(t1.tv_sec - t0.tv_sec) * 1e9 +
	       (double)(t1.tv_nsec - t0.tv_nsec);
}

/*
 * Median, min and max time of one call of each of the @k functions
 * @fn[i](@ctx[i]), their samples taken in turn (fn[0], fn[1], ... then
 * fn[1], fn[2], ..., fn[0], the order rotating so that none always
 * follows the same one), so that a ratio between them compares the same
 * stretch of time: this machine's memory bandwidth drifts by tens of
 * percent within a run.  Short calls are timed in batches so that a sample lasts at
 * least SAMPLE_NS; long samples are fewer (down to MIN_SAMPLES), which
 * keeps the large sizes affordable.
 */
static void measure_set(unsigned int k, bench_fn *const fn[],
			const void *const ctx[], struct stats st[])
{
	static double sample[MAX_SET][MAX_REPS];
	unsigned long batch[MAX_SET];
	double once[MAX_SET]; /* ns of one call */
	unsigned int want = cfg.reps;
	double slowest = 0;

	for (unsigned int f = 0; f < k; f++) {
		double t;

		fn[f](ctx[f]); /* warm-up: caches, TLB, lazy binding */
		batch[f] = 1;
		t = time_batch(fn[f], ctx[f], 1);
		while (t < SAMPLE_NS) {
			double per = fmax(t / (double)batch[f], 1.0);
			unsigned long next =
				(unsigned long)(1.5 * SAMPLE_NS / per);

			batch[f] = next > 2 * batch[f] ? next : 2 * batch[f];
			t = time_batch(fn[f], ctx[f], batch[f]);
		}
		once[f] = t / (double)batch[f];
		slowest = fmax(slowest, t);
	}
	if (!want)
		want = (unsigned int)fmax(
			fmin(cfg.budget_ns / slowest, cfg.max_samples),
			MIN_SAMPLES);
	for (unsigned int n = 0; n < want; n++)
		for (unsigned int r = 0, f = n % k; r < k;
		     r++, f = (f + 1) % k) {
			/*
			 * The function sampled before this one left the
			 * caches in its own state (the triad flushes them):
			 * one untimed call first, so that a pass small enough
			 * to stay in the last-level cache is timed warm
			 * whatever ran before it.  Longer passes do not fit.
			 */
			if (k > 1 && once[f] < WARM_NS)
				fn[f](ctx[f]);
			sample[f][n] = time_batch(fn[f], ctx[f], batch[f]) /
				       (double)batch[f];
		}
	for (unsigned int f = 0; f < k; f++)
		st[f] = summarize(sample[f], want);
}

static struct stats measure(bench_fn *fn, const void *ctx)
{
	struct stats st;

	measure_set(1, &fn, &ctx, &st);
	return st;
}

static void progress(const char *what, enum kn_dtype t, unsigned int n)
{
	if (cfg.progress)
		fprintf(stderr, "%s %s N=%u ...\n", what, kn_dtype_name(t), n);
}

/* One row; @traffic is the bytes one call reads plus writes. */
static void emit(const char *kernel, enum kn_dtype t, unsigned int n,
		 size_t bytes, const struct stats *st, double traffic,
		 double stream, double ratio)
{
	double gbps = traffic / st->med; /* a byte per ns is 1e9 B/s */
	char size[32], name[48];

	/* pooled rows are reported apart from the single-thread ones */
	if (pool_k && strncmp(kernel, "triad", 5) != 0) {
		snprintf(name, sizeof(name), "%s_t%u", kernel, cfg.threads);
		kernel = name;
	}

	if (cfg.csv) {
		printf("%s,%s,%u,%zu,%.1f,%.6g,%.6g,%.6g\n", kernel,
		       kn_dtype_name(t), n, bytes, st->med, gbps, gbps / stream,
		       ratio);
		return;
	}
	if (bytes % MIB == 0)
		snprintf(size, sizeof(size), "%zuM", bytes / MIB);
	else if (bytes % KIB == 0)
		snprintf(size, sizeof(size), "%zuK", bytes / KIB);
	else
		snprintf(size, sizeof(size), "%zu", bytes);
	printf("%-12s %-5s %3u %6s %11.3f %11.3f %11.3f %8.2f %6.3f %6.2f\n",
	       kernel, kn_dtype_name(t), n, size, st->med / 1e3, st->min / 1e3,
	       st->max / 1e3, gbps, gbps / stream, ratio);
}

#ifdef __x86_64__
/*
 * The bench is built for baseline x86-64, so AVX2 is chosen at run time.
 * The store test is loop-invariant and so always predicted: it costs
 * nothing in a loop that waits on memory.
 */
__attribute__((target("avx2"))) static void triad_avx2(const struct triad *t)
{
	const __m256 s = _mm256_set1_ps(3.0f);
	float *a = t->a;
	const float *b = t->b, *c = t->c;
	size_t i = 0;

	for (; i + 8 <= t->len; i += 8) {
		__m256 x =
			_mm256_add_ps(_mm256_loadu_ps(b + i),
				      _mm256_mul_ps(s, _mm256_loadu_ps(c + i)));

		if (t->nt)
			_mm256_stream_ps(a + i, x);
		else
			_mm256_storeu_ps(a + i, x);
	}
	for (; i < t->len; i++)
		a[i] = b[i] + 3.0f * c[i];
	_mm_sfence();
}

static void triad_sse(const struct triad *t)
{
	const __m128 s = _mm_set1_ps(3.0f);
	float *a = t->a;
	const float *b = t->b, *c = t->c;
	size_t i = 0;

	for (; i + 4 <= t->len; i += 4) {
		__m128 x = _mm_add_ps(_mm_loadu_ps(b + i),
				      _mm_mul_ps(s, _mm_loadu_ps(c + i)));

		if (t->nt)
			_mm_stream_ps(a + i, x);
		else
			_mm_storeu_ps(a + i, x);
	}
	for (; i < t->len; i++)
		a[i] = b[i] + 3.0f * c[i];
	_mm_sfence();
}
#endif

static void run_triad(const void *ctx)
{
#ifdef __x86_64__
	if (__builtin_cpu_supports("avx2"))
		triad_avx2(ctx);
	else
		triad_sse(ctx);
#else
	const struct triad *t = ctx;

	for (size_t i = 0; i < t->len; i++)
		t->a[i] = t->b[i] + 3.0f * t->c[i];
#endif
}

/*
 * The bandwidth every row is compared with: a[i] = b[i] + s * c[i] over
 * arrays far larger than the last-level cache, counting 2 reads and 1
 * write per element.  st[1] is the non-temporal triad, NAN where there
 * is none.  The arrays stay allocated: the faster variant, over its first
 * REF_TRIAD_MIB, is re-measured beside every row of large tensors.
 */
static void bench_triad(struct stats st[2])
{
	size_t bytes = cfg.triad_bytes, len = bytes / sizeof(float);
	float *arr[3];
	struct triad t;

	for (int k = 0; k < 3; k++) {
		triad_mem[k] = alloc_or_die(bytes + PAGE_ALIGN);
		arr[k] = (float *)(void *)(triad_mem[k] + k * STAGGER);
		for (size_t i = 0; i < len; i++) /* first touch */
			arr[k][i] = k ? pattern[i % PATTERN_LEN] : 0.0f;
	}
	t = (struct triad){ arr[0], arr[1], arr[2], len, false };
	st[1] = (struct stats){ NAN, NAN, NAN };
	for (int nt = 0; nt < TRIADS; nt++) {
		double gbps;

		if (cfg.progress)
			fprintf(stderr, "triad%s ...\n", nt ? "_nt" : "");
		t.nt = nt;
		st[nt] = measure(run_triad, &t);
		gbps = 3.0 * bytes / st[nt].med;
		if (gbps > stream_gbps) {
			stream_gbps = gbps;
			ref_triad = t;
		}
	}
	if (ref_triad.len > REF_TRIAD_MIB * MIB / sizeof(float))
		ref_triad.len = REF_TRIAD_MIB * MIB / sizeof(float);
}

static void run_sum(const void *ctx)
{
	const struct job *j = ctx;

	check(kn_sum_pool(pool_k, j->out, j->dtype, j->in, j->n, j->dtype,
			  j->count, 1.0f),
	      "kn_sum");
}

/* One weight per input, 1 (the values stay as they are, call after
 * call), read at run time like any weights. */
static float unit_weights[MAX_INPUTS];

static void run_wsum(const void *ctx)
{
	const struct job *j = ctx;

	check(kn_sum_weighted(j->out, j->dtype, j->in, unit_weights, j->n,
			      j->dtype, j->count),
	      "kn_sum_weighted");
}

/*
 * What a weighted sum cost before it had a kernel: every input scaled in
 * place by its weight (a pass over each, read and written), then the
 * plain sum.  fp32 only, as that loop was.
 */
static void run_scale_sum(const void *ctx)
{
	const struct job *j = ctx;

	for (unsigned int k = 0; k < j->n; k++) {
		float *x = (float *)(uintptr_t)j->in[k];
		const float w = unit_weights[k];

		for (size_t i = 0; i < j->count; i++)
			x[i] *= w;
	}
	check(kn_sum(j->out, j->dtype, j->in, j->n, j->dtype, j->count, 1.0f),
	      "kn_sum");
}

static void run_pairwise(const void *ctx)
{
	const struct job *j = ctx;
	const void *pair[2] = { j->out, NULL };

	check(kn_sum_pool(pool_k, j->out, j->dtype, j->in, 2, j->dtype,
			  j->count, 1.0f),
	      "kn_sum");
	/* dst += src: kn_sum_inplace's pass, which a pool can split too */
	for (unsigned int k = 2; k < j->n; k++) {
		pair[1] = j->in[k];
		check(kn_sum_pool(pool_k, j->out, j->dtype, pair, 2, j->dtype,
				  j->count, 1.0f),
		      "kn_sum");
	}
}

static void run_update(const void *ctx)
{
	const struct job *j = ctx;

	check(kn_update_pool(pool_k, &j->par, j->w, j->m, j->v, j->in, j->n,
			     KN_DTYPE_FP32, j->count),
	      "kn_update");
}

static void run_two_pass(const void *ctx)
{
	const struct job *j = ctx;
	const void *sum = j->scratch;

	check(kn_sum_pool(pool_k, j->scratch, KN_DTYPE_FP32, j->in, j->n,
			  KN_DTYPE_FP32, j->count, 1.0f),
	      "kn_sum");
	check(kn_update_pool(pool_k, &j->par, j->w, j->m, j->v, &sum, 1,
			     KN_DTYPE_FP32, j->count),
	      "kn_update");
}

/*
 * Fills buffer @k of the pool with the pattern in @dtype, from a place
 * in the pattern of its own so that inputs differ.
 */
static void pool_fill(unsigned int k, enum kn_dtype dtype)
{
	size_t esz = kn_dtype_size(dtype), count = pool.alloc / esz;
	size_t i = 0, j = (size_t)k * 1021 % PATTERN_LEN;

	while (i < count) {
		size_t b = PATTERN_LEN - j < count - i ? PATTERN_LEN - j
						       : count - i;

		check(kn_convert(pool.base[k] + i * esz, dtype, pattern + j,
				 KN_DTYPE_FP32, b),
		      "kn_convert");
		i += b;
		j = 0;
	}
}

static void pool_create(unsigned int nin, size_t bytes)
{
	pool.nin = nin;
	/* room for the stagger; C11 wants a multiple of the alignment */
	pool.alloc = (bytes + 2 * PAGE_ALIGN - 1) / PAGE_ALIGN * PAGE_ALIGN;
	for (unsigned int k = 0; k < nin + 5; k++) {
		pool.base[k] = alloc_or_die(pool.alloc);
		/* touch every page now, not while timing */
		if (k <= nin + 1) /* inputs and w */
			pool_fill(k, KN_DTYPE_FP32);
		else
			memset(pool.base[k], 0, pool.alloc);
	}
}

static void *pool_buf(unsigned int k, bool aliased)
{
	return pool.base[k] + (aliased ? 0 : k * STAGGER % PAGE_ALIGN);
}

static void job_init(struct job *j, enum kn_dtype t, unsigned int n,
		     size_t bytes, bool aliased)
{
	j->dtype = t;
	j->n = n;
	j->count = bytes / kn_dtype_size(t);
	for (unsigned int k = 0; k < n; k++)
		j->in[k] = pool_buf(k, aliased);
	j->out = pool_buf(pool.nin, aliased);
	j->w = pool_buf(pool.nin + 1, aliased);
	j->m = pool_buf(pool.nin + 2, aliased);
	j->v = pool_buf(pool.nin + 3, aliased);
	j->scratch = pool_buf(pool.nin + 4, aliased);
	j->par = (struct kn_update_params){
		.lr = 1e-3f,
		.grad_scale = 1.0f / (float)n,
		.momentum = 0.9f,
		.beta1 = 0.9f,
		.beta2 = 0.999f,
		.eps = 1e-8f,
		.step = 1,
	};
}

/*
 * Measures @fn on @j, in turn with @base on @base_ctx (if set) and, for
 * inputs of NEAR_MIB MiB and more, with the reference triad; prints
 * @base's row first if @base_kernel names it, then @fn's, and returns
 * @fn's median.  @tensors (and @base_tensors) is the traffic of one call
 * in tensors of one input's size; the ratio is @base's time over @fn's.
 * Rows of smaller, cache-resident inputs divide by the triad measured at
 * the start.
 */
static double row(const char *kernel, const struct job *j, bench_fn *fn,
		  double tensors, const char *base_kernel, bench_fn *base,
		  const void *base_ctx, double base_tensors)
{
	size_t bytes = j->count * kn_dtype_size(j->dtype);
	bench_fn *fns[MAX_SET] = { fn };
	const void *ctx[MAX_SET] = { j };
	struct stats st[MAX_SET];
	unsigned int k = 1, b = 0, t = 0;
	double stream = stream_gbps, ratio;

	if (base) {
		b = k;
		fns[k] = base;
		ctx[k++] = base_ctx;
	}
	if (bytes >= NEAR_MIB * MIB && ref_triad.len) {
		t = k;
		fns[k] = run_triad;
		ctx[k++] = &ref_triad;
	}
	measure_set(k, fns, ctx, st);
	if (t)
		stream = 3.0 * (double)(ref_triad.len * sizeof(float)) /
			 st[t].med;
	if (base_kernel)
		emit(base_kernel, j->dtype, j->n, bytes, &st[b],
		     base_tensors * (double)bytes, stream, 1.0);
	/* pairwise measured alone is its own baseline */
	ratio = b ? st[b].med / st[0].med : fn == run_pairwise ? 1.0 : NAN;
	emit(kernel, j->dtype, j->n, bytes, &st[0], tensors * (double)bytes,
	     stream, ratio);
	return st[0].med;
}

static bool alias_size(size_t b)
{
	return b == 4 * KIB || b == 64 * KIB || b == MIB || b == 16 * MIB;
}

/*
 * Pairwise, fused and (fp32, N = 8 or 16, some sizes) aliased sums of
 * dtype @t, each row next to its baseline.  Pairwise rows count their
 * real traffic: 3 tensors in each of N - 1 passes.
 */
static void bench_sums(enum kn_dtype t)
{
	static struct job j, ja;

	for (unsigned int ni = 0; ni < cfg.ninputs; ni++) {
		unsigned int n = (unsigned int)cfg.inputs[ni];
		bool alias = (cfg.groups & G_ALIAS) && t == KN_DTYPE_FP32 &&
			     (n == 8 || n == 16);
		bool pw = cfg.groups & G_PAIRWISE;

		if (!alias && !(cfg.groups & (G_SUM | G_PAIRWISE)))
			continue;
		progress("sum", t, n);
		for (unsigned int si = 0; si < cfg.nsizes; si++) {
			job_init(&j, t, n, cfg.sizes[si], false);
			if (cfg.groups & G_SUM)
				row("sum", &j, run_sum, n + 1.0,
				    pw ? "pairwise" : NULL,
				    pw ? run_pairwise : NULL, &j,
				    3.0 * (n - 1));
			else if (pw)
				row("pairwise", &j, run_pairwise, 3.0 * (n - 1),
				    NULL, NULL, NULL, 0);
			if (!alias || !alias_size(cfg.sizes[si]))
				continue;
			job_init(&ja, t, n, cfg.sizes[si], true);
			row("sum_alias4k", &ja, run_sum, n + 1.0, NULL,
			    pw ? run_pairwise : NULL, &j, 0);
		}
	}
}

/*
 * The weighted sum (one thread), beside the plain fused sum for the cost
 * of its weights, and for fp32 beside the in-place scaling it replaced
 * in the servers.
 */
static void bench_weighted(enum kn_dtype t)
{
	static struct job j;

	for (unsigned int k = 0; k < MAX_INPUTS; k++)
		unit_weights[k] = 1.0f;
	for (unsigned int ni = 0; ni < cfg.ninputs; ni++) {
		unsigned int n = (unsigned int)cfg.inputs[ni];

		progress("weighted", t, n);
		for (unsigned int si = 0; si < cfg.nsizes; si++) {
			job_init(&j, t, n, cfg.sizes[si], false);
			/* each row after its baseline, the ratio theirs
			 * over the weighted sum's */
			row("wsum", &j, run_wsum, n + 1.0, "sum", run_sum, &j,
			    n + 1.0);
			if (t == KN_DTYPE_FP32)
				row("wsum", &j, run_wsum, n + 1.0, "scale_sum",
				    run_scale_sum, &j, 3.0 * n + 1.0);
		}
	}
}

static void bench_updates(void)
{
	static const char *const names[] = { "sgd", "momentum", "adam" };
	static struct job j;

	for (int o = KN_OPT_SGD; o <= KN_OPT_ADAM; o++) {
		/* w, and m and v where used, are read and written */
		int state = 1 + (o >= KN_OPT_MOMENTUM) + (o == KN_OPT_ADAM);

		if (!(cfg.groups & (G_SGD << o)))
			continue;
		for (unsigned int ni = 0; ni < cfg.ninputs; ni++) {
			unsigned int n = (unsigned int)cfg.inputs[ni];

			if (cfg.upd_quick && n != 2 && n != 8)
				continue;
			progress(names[o], KN_DTYPE_FP32, n);
			for (unsigned int si = 0; si < cfg.nsizes; si++) {
				job_init(&j, KN_DTYPE_FP32, n, cfg.sizes[si],
					 false);
				j.par.optimizer = (enum kn_optimizer)o;
				row(names[o], &j, run_update, n + 2.0 * state,
				    NULL, run_two_pass, &j, 0);
			}
		}
	}
}

static void usage(void)
{
	printf("usage: bench_kernels [options]\n"
	       "  --quick         a reduced set, well under 30 s\n"
	       "  --csv           CSV on stdout, all other text on stderr\n"
	       "  --sizes LIST    bytes of one input, e.g. 4K,1M,64M\n"
	       "  --inputs LIST   numbers of inputs N (2..%d), e.g. 2,8,16\n"
	       "  --dtypes LIST   dtypes of the sums: fp32,fp16,bf16\n"
	       "  --kernels LIST  sum,pairwise,sgd,momentum,adam,alias,\n"
	       "                  weighted\n"
	       "  --reps N        samples per measurement (1..%d)\n"
	       "  --threads T     every kernel call split over a kernel pool\n"
	       "                  of T threads (1..%d); rows named KERNEL_tT\n"
	       "The triad always runs, on one thread; sums' ratios need\n"
	       "pairwise.  Updates take fp32 gradients; alias runs with the\n"
	       "fp32 sums at N = 8, 16 and sizes 4K, 64K, 1M, 16M.  The\n"
	       "library reads the environment variables KANEL_KERNELS,\n"
	       "KANEL_NT_THRESHOLD and KANEL_POOL_THRESHOLD.\n",
	       MAX_INPUTS, MAX_REPS, KN_KERNEL_POOL_MAX);
}

static void parse_args(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "quick", no_argument, NULL, 'q' },
		{ "csv", no_argument, NULL, 'c' },
		{ "sizes", required_argument, NULL, 's' },
		{ "inputs", required_argument, NULL, 'n' },
		{ "dtypes", required_argument, NULL, 'd' },
		{ "kernels", required_argument, NULL, 'k' },
		{ "reps", required_argument, NULL, 'r' },
		{ "threads", required_argument, NULL, 't' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static const size_t quick_sizes[] = { 4 * KIB, 64 * KIB, MIB,
					      4 * MIB, 16 * MIB, 64 * MIB };
	static const size_t full_inputs[] = { 2, 4, 8, 16 };
	static const size_t quick_inputs[] = { 2, 8, 16 };
	const char *dtype_names[3];
	size_t list[BENCH_MAX_LIST];
	unsigned int n;
	int c;

	for (int t = 0; t < 3; t++)
		dtype_names[t] = kn_dtype_name((enum kn_dtype)t);
	cfg.groups = (1u << 7) - 1;
	while ((c = bench_getopt(argc, argv, longopts, usage)) != -1) {
		switch (c) {
		case 'q':
			cfg.quick = true;
			break;
		case 'c':
			cfg.csv = true;
			break;
		case 's':
			cfg.nsizes =
				parse_list("sizes", optarg, NULL, 4,
					   (size_t)4 << 30, true, cfg.sizes);
			for (unsigned int i = 0; i < cfg.nsizes; i++) {
				char v[32];

				if (cfg.sizes[i] % sizeof(float) == 0)
					continue;
				snprintf(v, sizeof(v), "%zu", cfg.sizes[i]);
				bad_value("sizes", v, "not a multiple of 4");
			}
			break;
		case 'n':
			cfg.ninputs = parse_list("inputs", optarg, NULL, 2,
						 MAX_INPUTS, false, cfg.inputs);
			break;
		case 'd':
			n = parse_list("dtypes", optarg, dtype_names, 0, 3,
				       false, list);
			for (cfg.ndtypes = 0; cfg.ndtypes < n; cfg.ndtypes++)
				cfg.dtypes[cfg.ndtypes] =
					(unsigned int)list[cfg.ndtypes];
			break;
		case 'k':
			n = parse_list("kernels", optarg, group_names, 0, 7,
				       false, list);
			cfg.groups = 0;
			for (unsigned int i = 0; i < n; i++)
				cfg.groups |= 1u << list[i];
			break;
		case 't':
			parse_list("threads", optarg, NULL, 1,
				   KN_KERNEL_POOL_MAX, false, list);
			cfg.threads = (unsigned int)list[0];
			break;
		case 'r':
			parse_list("reps", optarg, NULL, 1, MAX_REPS, false,
				   list);
			cfg.reps = (unsigned int)list[0];
			break;
		}
	}
	if (!cfg.nsizes && cfg.quick) {
		cfg.nsizes = 6;
		memcpy(cfg.sizes, quick_sizes, sizeof(quick_sizes));
	} else if (!cfg.nsizes) {
		for (; cfg.nsizes < 8; cfg.nsizes++) /* 4K to 64M by 4x */
			cfg.sizes[cfg.nsizes] = 4 * KIB << 2 * cfg.nsizes;
	}
	if (!cfg.ninputs) {
		cfg.ninputs = cfg.quick ? 3 : 4;
		memcpy(cfg.inputs, cfg.quick ? quick_inputs : full_inputs,
		       cfg.ninputs * sizeof(size_t));
		cfg.upd_quick = cfg.quick;
	}
	if (!cfg.ndtypes) {
		cfg.ndtypes = 3;
		for (unsigned int t = 0; t < 3; t++)
			cfg.dtypes[t] = t;
	}
	cfg.max_samples = cfg.quick ? 11 : 21;
	cfg.budget_ns = cfg.quick ? 0.05e9 : 0.5e9;
	cfg.triad_bytes = (cfg.quick ? 128 : 256) * MIB;
	/* rows on a terminal are progress enough */
	cfg.progress = isatty(STDERR_FILENO) && !isatty(STDOUT_FILENO);
}

/* splitmix64: small floats in [-1, 1), the same in every run */
static void make_pattern(void)
{
	uint64_t x = 0;

	for (int i = 0; i < PATTERN_LEN; i++) {
		uint64_t z = (x += 0x9e3779b97f4a7c15u);

		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
		z ^= z >> 31;
		pattern[i] = (float)(z >> 40) / (float)(1 << 23) - 1.0f;
	}
}

/* Where the run stands, on stdout above the table or on stderr with CSV. */
static void print_header(const struct stats triad[2])
{
	FILE *f = cfg.csv ? stderr : stdout;
	const char *nt = getenv("KANEL_NT_THRESHOLD");
	double bytes = 3.0 * cfg.triad_bytes;

	fprintf(f, "# kanel kernel path %s, %u thread%s\n",
		kn_kernel_path_name(kn_kernel_path_active()),
		kn_kernel_pool_threads(pool_k),
		kn_kernel_pool_threads(pool_k) > 1 ? "s (kernel pool)" : "");
	fprintf(f,
		"# triad 3 x %zu MiB fp32: %.2f GB/s regular stores, %.2f GB/s "
		"non-temporal; baseline %.2f GB/s\n",
		cfg.triad_bytes / MIB, bytes / triad[0].med,
		bytes / triad[1].med, stream_gbps);
	if (nt && *nt) /* the library ignores an empty value */
		fprintf(f, "# KANEL_NT_THRESHOLD=%s\n", nt);
	else
		fprintf(f, "# KANEL_NT_THRESHOLD unset: library default\n");
	bench_header(cfg.csv,
		     "kernel,dtype,n_inputs,bytes,median_ns,gbps,"
		     "frac_of_stream,ratio_vs_pairwise",
		     "%-12s %-5s %3s %6s %11s %11s %11s %8s %6s %6s\n",
		     "kernel", "dtype", "N", "size", "median_us", "min_us",
		     "max_us", "GB/s", "frac", "ratio");
	emit("triad", KN_DTYPE_FP32, 2, cfg.triad_bytes, &triad[0], bytes,
	     stream_gbps, NAN);
	if (!isnan(triad[1].med))
		emit("triad_nt", KN_DTYPE_FP32, 2, cfg.triad_bytes, &triad[1],
		     bytes, stream_gbps, NAN);
}

int main(int argc, char **argv)
{
	enum kn_dtype filled = KN_DTYPE_FP32;
	struct stats triad[2];
	unsigned int maxn = 0;
	size_t maxb = 0;

	parse_args(argc, argv);
	if (cfg.threads > 1)
		check(kn_kernel_pool_create(cfg.threads, &pool_k),
		      "kn_kernel_pool_create");
	make_pattern();
	bench_triad(triad);
	print_header(triad);
	for (unsigned int i = 0; i < cfg.ninputs; i++)
		maxn = cfg.inputs[i] > maxn ? (unsigned int)cfg.inputs[i]
					    : maxn;
	for (unsigned int i = 0; i < cfg.nsizes; i++)
		maxb = cfg.sizes[i] > maxb ? cfg.sizes[i] : maxb;
	pool_create(maxn, maxb);
	for (unsigned int i = 0; i < cfg.ndtypes; i++) {
		enum kn_dtype t = (enum kn_dtype)cfg.dtypes[i];

		/* alias alone runs with fp32 only */
		if (!(cfg.groups & (G_SUM | G_PAIRWISE | G_WEIGHTED)) &&
		    !(cfg.groups & G_ALIAS && t == KN_DTYPE_FP32))
			continue;
		for (unsigned int k = 0; k < maxn && t != filled; k++)
			pool_fill(k, t);
		filled = t;
		bench_sums(t);
		if (cfg.groups & G_WEIGHTED)
			bench_weighted(t);
	}
	/* the pool starts in fp32, the gradients' dtype */
	for (unsigned int k = 0; k < maxn && filled != KN_DTYPE_FP32; k++)
		pool_fill(k, KN_DTYPE_FP32);
	bench_updates();
	for (unsigned int k = 0; k < maxn + 5; k++)
		free(pool.base[k]);
	for (int k = 0; k < 3; k++)
		free(triad_mem[k]);
	kn_kernel_pool_destroy(pool_k);
	return 0;
}
