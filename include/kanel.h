/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kanel.h - the public API of Kanel, a parameter exchange engine for
 * data-parallel deep learning.
 *
 * This is the only installed header.  Everything public is prefixed kn_,
 * every macro KN_.  Functions return 0 (or a count) on success and a
 * negative errno on failure; out-parameters come last and are written
 * only on success.
 *
 * It holds the aggregation kernels (the fused N-way sum, the optimizer
 * updates fused with that sum, dtype conversions: what a server runs on
 * every round, exported so that benchmarks and users can call them) and
 * the worker API that training programs use.
 */
#ifndef KANEL_H
#define KANEL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(KN_BUILDING_LIBRARY) && defined(__GNUC__)
#define KN_EXPORT __attribute__((visibility("default")))
#else
#define KN_EXPORT
#endif

/* Element types of tensors.  Accumulation is always in fp32. */
enum kn_dtype {
	KN_DTYPE_FP32 = 0,
	KN_DTYPE_FP16 = 1, /* IEEE 754 binary16 */
	KN_DTYPE_BF16 = 2, /* bfloat16: the top half of an fp32 */
};

/* Size of one element of @dtype in bytes, or 0 for an unknown dtype. */
KN_EXPORT size_t kn_dtype_size(enum kn_dtype dtype);

/* Short lower-case name ("fp32", "fp16", "bf16"), or NULL if unknown. */
KN_EXPORT const char *kn_dtype_name(enum kn_dtype dtype);

/*
 * Kernel paths.  One is chosen when the library is loaded: the best the
 * CPU supports, or a lower one named by the environment variable
 * KANEL_KERNELS ("scalar", "avx2", "avx512"; a path the CPU lacks is
 * ignored and the best available one is used).
 */
enum kn_kernel_path {
	KN_KERNEL_SCALAR = 0,
	KN_KERNEL_AVX2 = 1,   /* AVX2 + FMA + F16C */
	KN_KERNEL_AVX512 = 2, /* AVX-512 F + BW + VL, with FMA and F16C */
};

/* The path every kernel call uses in this process. */
KN_EXPORT enum kn_kernel_path kn_kernel_path_active(void);

/* "scalar", "avx2", "avx512", or NULL for an unknown value. */
KN_EXPORT const char *kn_kernel_path_name(enum kn_kernel_path path);

/*
 * Fused N-way sum:  dst[i] = alpha * (src[0][i] + src[1][i] + ... )
 *
 * One pass over memory: every input is read once and dst written once.
 * Inputs are all of @src_type; accumulation is in fp32, adding the
 * inputs in index order (so results are bit-identical on every kernel
 * path); the product with @alpha is rounded once to fp32 and, when
 * @dst_type is fp16 or bf16, once more to @dst_type with
 * round-to-nearest-even.  NaN and Inf propagate; no NaN becomes Inf.
 *
 * @dst:      output, @count elements of @dst_type; @dst_type is fp32 or
 *            equal to @src_type.  It may be one of the inputs exactly
 *            (dst == src[k]); any other overlap is undefined.
 * @src:      array of @n input pointers, each @count elements.
 * @n:        number of inputs, 1 or more (no upper bound).
 * @alpha:    scale, e.g. 1.0f for a sum or 1.0f / n for a mean.
 *
 * Pointers need only be aligned to their element size.  For the fastest
 * many-input sums, allocate the inputs so that their addresses differ
 * modulo 4096 (docs/kernels.md, "Allocating inputs").
 *
 * Returns 0, or -EINVAL for n == 0, a NULL pointer with count > 0, an
 * unknown dtype or an unsupported dst_type.  Never blocks; thread-safe
 * (no shared state); the caller keeps ownership of every buffer.
 */
KN_EXPORT int kn_sum(void *dst, enum kn_dtype dst_type, const void *const *src,
		     unsigned int n, enum kn_dtype src_type, size_t count,
		     float alpha);

/*
 * Weighted fused N-way sum:
 *   dst[i] = weight[0] * src[0][i] + weight[1] * src[1][i] + ...
 *
 * kn_sum() with a factor of its own for every input, in the same single
 * pass.  Each product is rounded to fp32 and the products are added in
 * index order, never fused into an FMA, so results are bit-identical on
 * every kernel path (a weight of 1 gives exactly kn_sum()'s terms).
 * @weight holds @n floats, the caller's; the other arguments, the
 * rounding to @dst_type, the errors (and -EINVAL for a NULL @weight),
 * blocking and thread-safety are kn_sum()'s.
 */
KN_EXPORT int kn_sum_weighted(void *dst, enum kn_dtype dst_type,
			      const void *const *src, const float *weight,
			      unsigned int n, enum kn_dtype src_type,
			      size_t count);

/*
 * In-place N-way sum:  acc[i] = alpha * (acc[i] + src[0][i] + ... )
 *
 * The same pass as kn_sum() with the accumulator as the first input; it
 * is read and written in @type.  @n may be 0 (acc is only scaled).
 * Returns 0 or -EINVAL as kn_sum().
 */
KN_EXPORT int kn_sum_inplace(void *acc, const void *const *src, unsigned int n,
			     enum kn_dtype type, size_t count, float alpha);

/*
 * Conversion between dtypes, round-to-nearest-even when narrowing.  NaN
 * stays NaN (quieted, sign and top payload bits kept), Inf stays Inf;
 * finite values too large for fp16 become Inf as IEEE 754 says.  Any
 * pair of dtypes is accepted; equal dtypes copy.  @dst and @src must not
 * overlap.  Returns 0, or -EINVAL for NULL with count > 0 or an unknown
 * dtype.
 */
KN_EXPORT int kn_convert(void *dst, enum kn_dtype dst_type, const void *src,
			 enum kn_dtype src_type, size_t count);

/* Optimizers that kn_update() fuses with the aggregation. */
enum kn_optimizer {
	KN_OPT_SGD = 0,	     /* w -= lr * g */
	KN_OPT_MOMENTUM = 1, /* m = mu * m + g; w -= lr * m (or Nesterov) */
	KN_OPT_ADAM = 2,     /* Adam with bias correction */
};

/* Flags of struct kn_update_params.  Unknown bits are rejected. */
#define KN_UPDATE_NESTEROV (1u << 0) /* momentum: w -= lr * (g + mu * m) */

/*
 * Hyper-parameters of one update.  The gradient that the optimizer sees
 * is  g = grad_scale * sum_k grad[k] + weight_decay * w.
 */
struct kn_update_params {
	enum kn_optimizer optimizer;
	uint32_t flags;	    /* KN_UPDATE_* */
	float lr;	    /* learning rate */
	float grad_scale;   /* e.g. 1/n to average n contributions */
	float weight_decay; /* L2 penalty folded into g; 0 for none */
	float momentum;	    /* mu, momentum only */
	float beta1, beta2; /* Adam moment decays, e.g. 0.9, 0.999 */
	float eps;	    /* Adam denominator guard, e.g. 1e-8 */
	uint64_t step;	    /* Adam: 1-based step for bias correction */
};

/*
 * Fused aggregation and optimizer update, in one pass over memory: reads
 * the @n gradients @grad[k] (each @count elements of @grad_type), sums
 * them in fp32 in index order, and updates the fp32 master weights @w and
 * the optimizer state in place:
 *   SGD:       w -= lr * g                              (m, v unused)
 *   momentum:  m = mu * m + g;  w -= lr * m             (v unused)
 *              Nesterov: w -= lr * (g + mu * m)
 *   Adam:      m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
 *              w -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
 * @m and @v may be NULL where unused.  Results agree with a scalar
 * evaluation of these formulas to a few ulp (docs/kernels.md states the
 * tolerance; vector paths use fused multiply-add).
 *
 * Returns 0, or -EINVAL for n == 0, NULL buffers that the optimizer
 * needs, an unknown optimizer, dtype or flag, or Adam with step == 0.
 * Never blocks; thread-safe; the caller keeps ownership of every buffer.
 */
KN_EXPORT int kn_update(const struct kn_update_params *params, float *w,
			float *m, float *v, const void *const *grad,
			unsigned int n, enum kn_dtype grad_type, size_t count);

/*
 * kn_update() over a weighted sum of the gradients: the optimizer sees
 *   g = grad_scale * sum_k weight[k] * grad[k] + weight_decay * w,
 * the sum formed as kn_sum_weighted() forms it, in the same single pass
 * (@weight: @n floats, the caller's).  Errors as kn_update(), and -EINVAL
 * for a NULL @weight.
 */
KN_EXPORT int kn_update_weighted(const struct kn_update_params *params,
				 float *w, float *m, float *v,
				 const void *const *grad, const float *weight,
				 unsigned int n, enum kn_dtype grad_type,
				 size_t count);

/*
 * A pool of threads for large kernel calls (optional).  One core does not
 * reach the memory bandwidth of a socket, so kn_sum_pool() and
 * kn_update_pool() cut a large pass into equal ranges, one per thread of
 * the pool, the calling thread running the first.  Passes that move less
 * than a threshold (2 MiB read plus written by default, measured on the
 * development machine; KANEL_POOL_THRESHOLD overrides it) run on the
 * caller alone, as do all calls with a NULL pool.  Results are
 * bit-identical to the single-threaded call.
 */
struct kn_kernel_pool;

#define KN_KERNEL_POOL_MAX 64 /* most threads in one pool */

/*
 * Create a pool of @threads threads in all, the caller of each pooled
 * call counted: @threads - 1 helpers are started and sleep until work
 * comes.  Returns 0 and the pool in @pool, -EINVAL for threads outside
 * [1, KN_KERNEL_POOL_MAX] or a NULL @pool, -ENOMEM, or the error of
 * pthread_create().
 */
KN_EXPORT int kn_kernel_pool_create(unsigned int threads,
				    struct kn_kernel_pool **pool);

/* Stop and join the helpers, free the pool.  NULL-safe; not concurrent
 * with a call on the same pool. */
KN_EXPORT void kn_kernel_pool_destroy(struct kn_kernel_pool *pool);

/* Threads of @pool, the caller counted (1 for NULL). */
KN_EXPORT unsigned int
kn_kernel_pool_threads(const struct kn_kernel_pool *pool);

/*
 * kn_sum() and kn_update() split over @pool (which may be NULL).  They
 * block until every range is done.  Calls on one pool from several
 * threads are safe and take turns; calls on different pools run at once.
 */
KN_EXPORT int kn_sum_pool(struct kn_kernel_pool *pool, void *dst,
			  enum kn_dtype dst_type, const void *const *src,
			  unsigned int n, enum kn_dtype src_type, size_t count,
			  float alpha);
KN_EXPORT int kn_update_pool(struct kn_kernel_pool *pool,
			     const struct kn_update_params *params, float *w,
			     float *m, float *v, const void *const *grad,
			     unsigned int n, enum kn_dtype grad_type,
			     size_t count);

/*
 * ---- The worker ----
 *
 * A worker takes part in a job of a coordinator, servers and workers
 * (docs/engine.md).  It registers its tensors, each with the buffer its
 * parameters live in and the buffer it computes gradients into; both
 * stay the caller's, registered with the transport (zero-copy: pushes
 * read the gradient buffer, pulls write the parameter buffer, or in
 * summation mode the averaged gradient into the gradient buffer).
 *
 * Threads: one progress thread per worker drives the transport.  Every
 * kn_worker_* call may come from any one application thread at a time
 * (the calls lock); a buffer taking part in a pending operation must not
 * be written (gradients) or read (parameters) until it has completed.
 */
struct kn_worker;

struct kn_worker_options {
	/* "HOST:PORT"; NULL: $KANEL_COORDINATOR */
	const char *coordinator;
	/* "tcp", "verbs" or "dpdk"; NULL: $KANEL_TRANSPORT, else tcp */
	const char *transport;
	/* the job secret's file; NULL: $KANEL_SECRET_FILE, else $KANEL_SECRET */
	const char *secret_file;
	/* this worker's rank; -1: $KANEL_RANK or the launcher's */
	int rank;
	/* every wait's limit; 0: $KANEL_STARTUP_TIMEOUT or 30 s */
	unsigned int timeout_ms;
	/* 1: the program steps the model with an optimizer of its own (a
	 * PyTorch script's): a job of the default --optimizer auto then
	 * runs the workers' optimizer (sum) instead of the servers' sgd */
	int own_optimizer;
};

/*
 * Join the job: connect to the coordinator, authenticate, learn the job.
 * 0 and the worker, or a negative errno with the reason on stderr
 * (-ETIMEDOUT, -EACCES for a wrong secret, -EINVAL for bad options).
 */
KN_EXPORT int kn_worker_create(const struct kn_worker_options *opt,
			       struct kn_worker **w);

/*
 * Register a tensor of @count elements of @dtype under @key (at most 127
 * bytes), before kn_worker_start.  Every worker registers the same keys,
 * dtypes and counts, in any order.  @params holds the parameters (rank
 * 0's values are the initial model); @grads is where gradients go.
 */
KN_EXPORT int kn_worker_register(struct kn_worker *w, const char *key,
				 enum kn_dtype dtype, size_t count,
				 void *params, void *grads);

/*
 * Deliver the tensor @key into @inbox (its size) instead of its
 * parameter buffer, from kn_worker_start on: the initial model and every
 * pull land there, and the program merges them into the parameters it
 * keeps training (the protocols that let a worker compute on its own
 * copy while the model is on its way need that).  In summation mode the
 * averaged gradient lands there instead of in the gradient buffer.
 * Before kn_worker_start; -ENOENT for a key not registered.
 */
KN_EXPORT int kn_worker_set_inbox(struct kn_worker *w, const char *key,
				  void *inbox);

/*
 * The order in which @key's pushes are written when several wait: lower
 * first.  By default a tensor's priority is its registration index (0 for
 * the first registered), so a program that registers its tensors in the
 * order its forward pass uses them gets the first layers' parameters back
 * first; give one explicitly to change that.  Writes are posted most
 * urgent first while fewer than --push-window bytes are in flight, so a
 * large tensor pushed early does not hold back a small urgent one pushed
 * after it.  A fused group takes its most urgent member's priority.
 * Before kn_worker_start (-EBUSY after); -ENOENT for a key not
 * registered.
 */
KN_EXPORT int kn_worker_set_priority(struct kn_worker *w, const char *key,
				     int priority);

/*
 * Send the tensor table, connect to the servers, receive the initial
 * model into every parameter buffer, and start once every worker has:
 * 0, or a negative errno (-EINVAL for a table that differs from the
 * job's, with the tensor named on stderr; -ETIMEDOUT).
 */
KN_EXPORT int kn_worker_start(struct kn_worker *w);

/*
 * Non-blocking operations on the tensor @key (NULL: every tensor); each
 * returns 0 and a handle in @handle, or a negative errno.  Under ESP and
 * PSP, whose workers take local steps, they (and kn_worker_step) are
 * -EPROTO with the reason on stderr: train with kn_worker_step_done().
 *   push:     send the gradients; done when they have left.
 *   pull:     done when the parameters that answer every push so far
 *             have landed in the parameter buffers.
 *   pushpull: push, then pull: one step of training.  The caller may
 *             compute meanwhile.
 */
KN_EXPORT int kn_worker_push(struct kn_worker *w, const char *key,
			     uint64_t *handle);
KN_EXPORT int kn_worker_pull(struct kn_worker *w, const char *key,
			     uint64_t *handle);
KN_EXPORT int kn_worker_pushpull(struct kn_worker *w, const char *key,
				 uint64_t *handle);

/* 1 if @handle is done, 0 if not yet, or the negative errno it failed
 * with. */
KN_EXPORT int kn_worker_test(struct kn_worker *w, uint64_t handle);

/* Wait for @handle up to @timeout_ms (-1: the worker's timeout): 0, the
 * negative errno it failed with, or -ETIMEDOUT. */
KN_EXPORT int kn_worker_wait(struct kn_worker *w, uint64_t handle,
			     int timeout_ms);

/* pushpull and wait: one blocking training step.  Under CGP the time
 * since the previous call returned is reported to its planner as this
 * step's compute time. */
KN_EXPORT int kn_worker_step(struct kn_worker *w, const char *key);

/*
 * ---- What the job runs, and the worker rule ----
 *
 * Every program trains under every protocol with one call per step,
 * kn_worker_step_done(): the engine does what the job's protocol asks
 * of a worker (docs/engine.md, "The training loop"; docs/protocols.md
 * says what each protocol does with a step).
 */

/*
 * The synchronization protocols (docs/protocols.md): the one enum that
 * names them, in the library and out of it.
 */
enum kn_sync {
	KN_SYNC_BSP = 0,
	KN_SYNC_ASP = 1,
	KN_SYNC_SSP = 2,
	KN_SYNC_ESP = 3,
	KN_SYNC_PSP = 4, /* Predicted Synchronization Parallel ("predicted") */
	KN_SYNC_CGP = 5,
};

/* The name of @protocol ("bsp", ..., "predicted", "cgp"), NULL for none. */
KN_EXPORT const char *kn_sync_name(enum kn_sync protocol);

/*
 * The @i-th name the --sync option takes, from 0: each protocol's name,
 * then the other names it goes by (as "psp"), with its protocol in
 * @protocol; NULL past the last.  A program lists the protocols so.
 */
KN_EXPORT const char *kn_sync_name_at(unsigned int i, enum kn_sync *protocol);

/*
 * The protocols' parameters: one table, the library's, from which its
 * options and KANEL_* variables, the job's message, the simulator's
 * options, struct kn_job_info's @params and this query all come, so
 * that a program (the Python package) that lists them learns of a new
 * one with no edit.
 */
enum kn_sync_param_type {
	KN_SYNC_PARAM_UINT = 1,	  /* an unsigned integer in [min, max] */
	KN_SYNC_PARAM_FLOAT = 2,  /* a float above min (from min if
				   * min_closed), below max */
	KN_SYNC_PARAM_CHOICE = 3, /* one of @choices, its index the value */
};

struct kn_sync_param {
	const char *name;     /* "staleness": its name in kanel.Job */
	const char *option;   /* "--staleness" */
	const char *variable; /* "KANEL_STALENESS" */
	enum kn_sync_param_type type;
	const char *default_value; /* as an option's value: "3", "auto" */
	double min, max;
	int min_closed;
	/* CHOICE: the names by value, NULL-terminated; else NULL */
	const char *const *choices;
	const char *help; /* which protocols read it, and what for */
};

/* Room for the parameters in struct kn_job_info; the table has fewer. */
#define KN_SYNC_PARAMS_MAX 32

/*
 * Parameter @i of the table, from 0, into @param (its strings are the
 * library's, valid for its lifetime): 0, -ENOENT past the last, or
 * -EINVAL for a NULL @param.  Thread-safe.
 */
KN_EXPORT int kn_sync_param_at(unsigned int i, struct kn_sync_param *param);

/* What the job a worker joined runs, as its coordinator was told. */
struct kn_job_info {
	enum kn_sync protocol;
	const char *protocol_name;   /* "bsp", "asp", ..., "predicted", "cgp" */
	enum kn_optimizer optimizer; /* the job's optimizer */
	int summation;		     /* 1: --optimizer sum: the workers
				      * run their own optimizer */
	int local_steps; /* 1: the workers step the model and push model
			  * deltas: ESP, PSP (with the job's optimizer, or
			  * the program's under sum), and ASP, SSP, CGP
			  * under sum; pass KN_STEP_APPLIED where the
			  * program stepped it */
	float lr, momentum;
	unsigned int workers, servers;
	/* some of the protocols' parameters by name, for the programs
	 * written against them (docs/configuration.md) */
	unsigned int staleness;		/* SSP's s, ESP's s_e */
	unsigned int max_skip;		/* ESP's H_max */
	float gamma, theta;		/* ESP */
	unsigned int max_steps;		/* PSP's R */
	unsigned int warmup;		/* PSP, CGP */
	float alpha, miss;		/* PSP (alpha: CGP too) */
	float bound;			/* CGP's S */
	float outer_lr, outer_momentum; /* the servers' update of deltas */
	/* every one of them, params[i] being kn_sync_param_at(i)'s (a
	 * CHOICE's by its index), exact: a new one appears here alone */
	double params[KN_SYNC_PARAMS_MAX];
};

/* Fill @info from the job: 0, or -EINVAL for NULL arguments. */
KN_EXPORT int kn_worker_job(const struct kn_worker *w,
			    struct kn_job_info *info);

/* Flags of kn_worker_step_done().  KN_STEP_APPLIED: under a local-step
 * protocol, the program updated its parameters itself. */
#define KN_STEP_APPLIED (1u << 0)

/* What kn_worker_step_done() did, in its @result. */
enum kn_step_result {
	KN_STEP_LOCAL = 0,  /* the step stayed local: compute the next one */
	KN_STEP_PUSHED = 1, /* pushed; the global model is on its way (PSP
			     * trains on meanwhile) */
	KN_STEP_SYNCED = 2, /* the parameters hold a new global model (under
			     * ESP and PSP, merged with local progress) */
};

/*
 * One step of training is done: the program has computed this step's
 * gradients into every tensor's gradient buffer, in @seconds (its
 * compute time, waits excluded; below 0: the engine measures the time
 * since the previous kn_worker_step_done() or kn_worker_start()
 * returned).  The engine then does what the protocol says:
 *
 * - BSP, ASP, SSP, CGP: push the gradients and wait for the parameters
 *   (as kn_worker_step); CGP's planner hears @seconds.  KN_STEP_SYNCED.
 * - ESP, PSP: apply the job's optimizer to the parameters here, with
 *   this worker's own optimizer state (or, with KN_STEP_APPLIED, take
 *   the parameters as the program's own optimizer left them); then
 *   either go on locally, or push the model delta since the last global
 *   model, or wait; a global model that has landed is merged into the
 *   parameters with the progress made since the push.  PSP's planner,
 *   and ESP's servers (which hold rounds while every worker's step
 *   times are even), hear the step times.  The gradient buffers are
 *   read only here.
 *
 * Between calls the program may read and write its parameter and
 * gradient buffers.  @result (may be NULL) says what happened.  0, or
 * a negative errno: -EINVAL (a bad argument, KN_STEP_APPLIED under a
 * protocol whose servers apply the update), or the engine's failure.
 */
KN_EXPORT int kn_worker_step_done(struct kn_worker *w, double seconds,
				  unsigned int flags, unsigned int *result);

/*
 * Finish, once, after the last step: under ESP and PSP, wait for a model
 * still on its way and merge it, so that the parameters hold the last
 * global model with this worker's progress.  Then, under every
 * protocol, the servers and the coordinator hear that this worker is
 * done: no round or bound of the other workers waits for it while the
 * program goes on before kn_worker_destroy().  No step after it.  0 or
 * an errno.
 */
KN_EXPORT int kn_worker_finish(struct kn_worker *w);

/*
 * Copy the last global model of the tensor @key into @dst (as many bytes
 * as the tensor has): under ESP and PSP the model the servers delivered
 * last, without this worker's local steps since (what to evaluate: the
 * parameters hold local progress on top of it); under the other
 * protocols the parameters themselves.  Not while an operation on the
 * tensor is pending.  0, -ENOENT for an unknown key, -EINVAL.
 */
KN_EXPORT int kn_worker_global_model(struct kn_worker *w, const char *key,
				     void *dst);

/* Pushes this worker has made of every tensor (its clock). */
KN_EXPORT uint64_t kn_worker_clock(const struct kn_worker *w);

/* Its rank, and the job's number of workers. */
KN_EXPORT unsigned int kn_worker_rank(const struct kn_worker *w);
KN_EXPORT unsigned int kn_worker_size(const struct kn_worker *w);

/*
 * Leave the job, stop the progress thread and free everything.  The
 * coordinator hears that this worker is done unless it has failed: a
 * failed worker's rank may come back (a new worker with the same rank).
 * A worker failed by a server's loss waits up to 1 s here for the
 * coordinator to let it go.  NULL-safe.
 */
KN_EXPORT void kn_worker_destroy(struct kn_worker *w);

/*
 * The last line the engine logged on stderr in this process (any role,
 * any thread), without the "kanel: " prefix and the newline, into @buf
 * (@cap bytes, NUL-terminated, truncated to fit): what a binding puts in
 * the exception it raises for a negative errno.  Its length, 0 when
 * nothing was logged yet (or @buf is NULL or @cap 0).
 */
KN_EXPORT size_t kn_last_message(char *buf, size_t cap);

/*
 * ---- The kanel command's API: configuration, roles, imbalance ----
 *
 * What the kanel command is built on, so that it needs nothing but this
 * header, as any program that starts a job's processes would: the job
 * configuration every process starts from (options, KANEL_* variables,
 * the launcher's rank variables; docs/configuration.md), the
 * coordinator's and the servers' entry points, and the injected-delay
 * models of docs/imbalance.md.  Nothing here is on a data path; the
 * parse and the exports touch process-wide state (getopt, the
 * environment) and are not thread-safe.
 */

/* What a process of a job is. */
enum kn_role {
	KN_ROLE_COORDINATOR = 1,
	KN_ROLE_SERVER = 2,
	KN_ROLE_WORKER = 3,
};

/*
 * The groups of options, for a command that takes only some of them;
 * each option is in one group (--help is in none: always taken).
 */
#define KN_CONFIG_OPT_ROLE	  (1u << 0) /* --role */
#define KN_CONFIG_OPT_RANK	  (1u << 1) /* --rank */
#define KN_CONFIG_OPT_COUNTS	  (1u << 2) /* --servers, --workers */
#define KN_CONFIG_OPT_COORDINATOR (1u << 3) /* --coordinator */
#define KN_CONFIG_OPT_LISTEN	  (1u << 4) /* --listen */
/* --transport, --secret-file, --startup-timeout, --verbose */
#define KN_CONFIG_OPT_COMMON	(1u << 5)
#define KN_CONFIG_OPT_HEARTBEAT (1u << 6) /* --heartbeat-timeout */
/* the job's rules: --sync, the protocols' parameters, --optimizer, --lr,
 * --momentum, --chunk-bytes */
#define KN_CONFIG_OPT_JOB     (1u << 7)
#define KN_CONFIG_OPT_METRICS (1u << 8) /* --metrics */
/* --checkpoint-dir, --checkpoint-every, --restore */
#define KN_CONFIG_OPT_CHECKPOINT (1u << 9)
#define KN_CONFIG_OPT_ALL	 ((1u << 10) - 1)

/*
 * What a command takes.  A flag outside @options is refused, naming the
 * flag and @command; a variable outside them is not read (the processes
 * of a job share one environment).  With a @role, no flag or variable
 * sets the role, and messages name @command as its source.
 */
struct kn_config_scope {
	const char *command; /* "kanel train", for messages; kept, not copied */
	unsigned int options; /* KN_CONFIG_OPT_* */
	enum kn_role role;    /* 0: from --role, KANEL_ROLE or the launcher */
};

/* A job configuration, read-only once parsed. */
struct kn_config;

/*
 * Parse @argv (argv[0] is the program's name; it is not reordered) with
 * the process's environment and the defaults, as @scope says (NULL:
 * every option, the role from the usual sources).  0 and a new
 * configuration in @cfg, or -EINVAL with one line in @err (if not NULL;
 * truncated to @errlen) that names the offending option, variable or
 * value, or -ENOMEM.  --help parses nothing else: kn_config_help() is
 * then 1 and the rest is the defaults.  Names are not resolved here.
 */
KN_EXPORT int kn_config_parse(const struct kn_config_scope *scope, int argc,
			      char **argv, char *err, size_t errlen,
			      struct kn_config **cfg);

/* Free @cfg.  NULL-safe. */
KN_EXPORT void kn_config_destroy(struct kn_config *cfg);

/*
 * Print the options of the groups @options (KN_CONFIG_OPT_*) to @out,
 * each with its variable and its default, after a paragraph on where
 * values come from.
 */
KN_EXPORT void kn_config_usage(FILE *out, unsigned int options);

/* Whether --help was given (1 or 0). */
KN_EXPORT int kn_config_help(const struct kn_config *cfg);

/* The process's role, and its rank within the role (from 0). */
KN_EXPORT enum kn_role kn_config_role(const struct kn_config *cfg);
KN_EXPORT unsigned int kn_config_rank(const struct kn_config *cfg);

/* Whether --verbose is on (1 or 0). */
KN_EXPORT int kn_config_verbose(const struct kn_config *cfg);

/* The --metrics file, or NULL when none is written. */
KN_EXPORT const char *kn_config_metrics(const struct kn_config *cfg);

/*
 * The job @cfg describes, as a coordinator started with it would set it
 * up: protocol, optimizer, rates, counts and the protocols' parameters,
 * the fields kn_worker_job() fills from a job joined.  0, or -EINVAL for
 * NULL arguments.
 */
KN_EXPORT int kn_config_job(const struct kn_config *cfg,
			    struct kn_job_info *info);

/*
 * Put the options of the groups @options (KN_CONFIG_OPT_*) into the
 * process's environment, each under its KANEL_* variable, written so
 * that a parse reads back the value @cfg holds: how a process hands its
 * options to the processes it starts, or to kn_worker_create(), which
 * reads the environment.  Options without a value (a path or an address
 * not given) leave their variable alone.  Every option of the table is
 * covered, so a new one needs no edit in the caller.  0, -EINVAL for a
 * NULL @cfg, or -ENOMEM.  Not thread-safe (setenv).
 */
KN_EXPORT int kn_config_export(const struct kn_config *cfg,
			       unsigned int options);

/*
 * Resolve the addresses @cfg's role needs (the coordinator's; a
 * server's --listen too), so that a name that does not resolve is
 * reported as such before anything starts.  0, or a negative errno
 * (-ENOENT: no such host, -EAGAIN: the name service failed for now)
 * with one line in @err naming the address.  May block on DNS.
 */
KN_EXPORT int kn_config_check_addresses(const struct kn_config *cfg, char *err,
					size_t errlen);

/*
 * Run the job's coordinator, or one of its servers, as @cfg says (its
 * role must be that one) until the job ends.  First the job secret is
 * read (--secret-file, else KANEL_SECRET) and the addresses resolved
 * (kn_config_check_addresses); a failure there returns a negative errno
 * with one line in @err (non-empty), and nothing was started.  Once the
 * role runs, it returns 0 when the job ended well, or a negative errno,
 * logged on stderr by the engine, with @err left empty.  -EINVAL for a
 * configuration of another role (@err says so).  Blocks; installs no
 * signal handlers.
 */
KN_EXPORT int kn_run_coordinator(const struct kn_config *cfg, char *err,
				 size_t errlen);
KN_EXPORT int kn_run_server(const struct kn_config *cfg, char *err,
			    size_t errlen);

/* "sgd", "momentum", "adam", or NULL for an unknown value. */
KN_EXPORT const char *kn_optimizer_name(enum kn_optimizer opt);

/*
 * Imbalance models (docs/imbalance.md): how much slower than its base
 * step time each worker's next step is.  A program that injects delay
 * sleeps base * kn_imbalance_factor() per step; the simulator adds the
 * same to simulated time, so both see the same stragglers: a worker's
 * factors depend only on (spec, seed, rank, workers, the t values it is
 * asked about).
 */
struct kn_imbalance;

/*
 * Parse @spec, one of
 *   none
 *   persistent[:FRACTION[:FACTOR]]             defaults 0.25, 4
 *   random[:P[:FACTOR]]                        defaults 0.05, 4
 *   episodic[:PERIOD[:DURATION[:K[:FACTOR]]]]  defaults 30, 10, 1, 4
 *   periodic[:PERIOD[:AMPLITUDE]]              defaults 120, 0.5
 * into a model with @seed for @workers workers (0: none, for a model
 * that is only formatted or named).  0 and the model in @model, or
 * -EINVAL with one sentence in @err (if not NULL) naming the field and
 * its range, or saying that the model does not fit @workers (episodic K
 * above it), or -ENOMEM.
 */
KN_EXPORT int kn_imbalance_parse(const char *spec, uint64_t seed,
				 unsigned int workers, char *err, size_t errlen,
				 struct kn_imbalance **model);

/*
 * The canonical spec of @model, every field present, e.g.
 * "persistent:0.25:4" (the seed is not part of it): the length written
 * without the NUL, -ENOSPC when it does not fit in @cap, or -EINVAL.
 */
KN_EXPORT int kn_imbalance_format(const struct kn_imbalance *model, char *buf,
				  size_t cap);

/* The model's kind: "none", "persistent", "random", "episodic" or
 * "periodic". */
KN_EXPORT const char *kn_imbalance_name(const struct kn_imbalance *model);

/*
 * The factor of the next step of worker @worker (below the model's
 * workers), which starts @t seconds after the job's start: the step
 * should take base * factor.  Always above 0; NaN for a worker out of
 * range.  Advances that worker's generator, so each worker is asked by
 * one thread at a time; different workers may be asked concurrently.
 * O(1); never blocks.
 */
KN_EXPORT double kn_imbalance_factor(struct kn_imbalance *model,
				     unsigned int worker, double t);

/* Free @model.  NULL-safe. */
KN_EXPORT void kn_imbalance_destroy(struct kn_imbalance *model);

#ifdef __cplusplus
}
#endif

#endif /* KANEL_H */
