/* SPDX-License-Identifier: Apache-2.0 */
/*
 * worker_priv.h - what the worker's files share: the worker library
 * behind kn_worker_* is a progress thread that owns the transport
 * context and runs the job's protocol, and the application's calls,
 * which hand it requests under a lock and wait on a condition variable.
 *
 * The files, one concern each, each calling only those below it:
 *   worker.c       the public API (kanel.h's kn_worker_*), the
 *                  application's side: create, register, post,
 *                  destroy;
 *   worker_loop.c  the progress thread: its loop, the control messages
 *                  from the coordinator and the servers;
 *   worker_rule.c  kn_worker_step_done: the local-step protocols' worker
 *                  rule, on the program's thread;
 *   worker_push.c  the data path: operations, pushes taken per chunk,
 *                  writes posted by priority within the window, their
 *                  completions and the answers (PULL writes);
 *   worker_boot.c  start-up: the tensor table, the layout, the buffers
 *                  granted to the servers, the first model (INIT, SKIP);
 *   worker_fuse.c  fused groups of small tensors;
 *   worker_base.c  the handoff to the thread (wake, an operation's post,
 *                  test and wait), failure, aligned buffers;
 *   worker_keys.c  the program's keys to the tensors: the key table.
 *
 * Threading: everything in struct kn_worker is under w->lock, except
 * what is marked as the application's own (kn_worker_step_done's state,
 * taken without the lock by the one application thread that calls in)
 * and the key table.  The progress thread holds the lock while it runs
 * the role and drops it only to sleep; kn__wk_* functions of the
 * thread's files run with it held.  The tensor table is final once
 * kn_worker_start has sorted and fused it: it then builds the key table
 * (keys to tensor indices) and publishes it, and from then on a post
 * finds its tensor there without the lock and without a search, takes
 * the lock only to fill its operation's slot, and wakes the thread after
 * releasing it (kn__wk_wake may run without the lock).
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
#ifndef KN_ENGINE_WORKER_PRIV_H
#define KN_ENGINE_WORKER_PRIV_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "node.h"
#include "stages.h"
#include "sync.h"

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
	 * wdone: those whose write completed.  op[n % 4]: push n's op,
	 * told when its write completes (a fused group's chunk: NULL, the
	 * group is told).
	 */
	uint64_t pushed, written, wdone, expect, delivered;
	struct wk_op *op[4];
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

/*
 * The program's keys to their kn__wk_tensor_index() answers (a wire tensor's
 * index, or MEMBER_BIT | a member's): open addressing, mask + 1 slots (a
 * power of two, at least twice the keys), UINT32_MAX where empty.
 */
struct wk_keys {
	uint32_t mask;
	uint32_t slot[];
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
	/*
	 * Built by kn_worker_start under the lock once the table above is
	 * final, and read-only from then on (the table too): a post looks
	 * its key up here without the lock (acquire, paired with the
	 * release that publishes it).  NULL before.
	 */
	struct wk_keys *_Atomic keys;
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
	/* the next chunk whose INIT (worker 0), whose SKIP to post */
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
#define RECONNECT_S  0.2 /* a rank refused as connected already */

static inline struct kn_worker *wk_of(struct kn__node *n)
{
	return n->role;
}

/*
 * The files' functions, in the order above: each file calls only those
 * of files after it, never one before (the calls make no circle).
 */

/* ---- worker_loop.c: the progress thread ---- */

/* The thread's body (pthread_create's), and the node's callbacks. */
void *kn__wk_progress(void *arg);
extern const struct kn__node_ops kn__wk_ops;

/* ---- worker_rule.c: the local-step rule, on the program's thread ---- */

int kn__wk_local_buffers(struct wk_tensor *t, uint32_t optimizer);
void kn__wk_local_free(struct wk_tensor *t);
int kn__wk_local_start(struct kn_worker *w);
int kn__wk_local_wait(struct kn_worker *w);
int kn__wk_report_timing(struct kn_worker *w, double seconds);

/* ---- worker_push.c: the data path, in the thread ---- */

void kn__wk_advance(struct kn_worker *w);
void kn__wk_delivered(struct kn_worker *w, uint32_t c);
void kn__wk_on_imm(struct kn__node *n, struct kn__chan *ch, uint32_t imm,
		   uint64_t bytes);
void kn__wk_on_written(struct kn__node *n, void *user, int status);

/* ---- worker_boot.c: start-up, in the thread ---- */

int kn__wk_send_table(struct kn_worker *w);
void kn__wk_go_to_servers(struct kn_worker *w);
void kn__wk_send_buffers(struct kn_worker *w, struct wk_server *ws);
void kn__wk_send_init(struct kn_worker *w);
void kn__wk_ready_to_start(struct kn_worker *w);
void kn__wk_first_model_in(struct kn_worker *w);

/* ---- worker_fuse.c: fused groups ---- */

/* @op's part of group @i copied in: true once all of it is. */
bool kn__wk_push_fused(struct kn_worker *w, struct wk_op *op, uint32_t i);
void kn__wk_unpack(struct kn_worker *w, const struct wk_tensor *t);
/* At kn_worker_start, under the lock: the groups of the table. */
int kn__wk_fuse(struct kn_worker *w);
void kn__wk_fused_free(struct wk_tensor *t);

/* ---- worker_base.c: what every file above may call ---- */

/* Tell the thread there is news (with the lock or without). */
void kn__wk_wake(struct kn_worker *w);
/* Wait under the lock until @cond(w, arg), failure or @timeout_ms; log
 * a timeout with @what unless it is NULL. */
int kn__wk_wait_for(struct kn_worker *w,
		    bool (*cond)(struct kn_worker *, uint64_t), uint64_t arg,
		    int timeout_ms, const char *what);
/* Everything fails with @err: ops, waits, the state. */
void kn__wk_fail(struct kn_worker *w, int err);
/* Post an operation on @key (NULL: every tensor); takes the lock. */
int kn__wk_post_op(struct kn_worker *w, const char *key, bool push, bool pull,
		   uint64_t *handle);
/* 64-byte aligned and zeroed. */
void *kn__wk_zalloc64(size_t bytes);

/* ---- worker_keys.c: keys to tensors, at the bottom ---- */

/* qsort's order of struct wk_tensor: by key. */
int kn__wk_by_key(const void *a, const void *b);
/*
 * @key's tensor: a wire tensor's index, MEMBER_BIT | a member's, or
 * UINT32_MAX for NULL (every tensor); -ENOENT for a key not registered.
 * kn__wk_tensor_index takes the key table if it is built (no lock
 * needed), else searches the table (under the lock before the start);
 * kn__wk_keys_find takes the key table @k, loaded by the caller.
 */
int kn__wk_tensor_index(struct kn_worker *w, const char *key, uint32_t *idx);
int kn__wk_keys_find(const struct kn_worker *w, const struct wk_keys *k,
		     const char *key, uint32_t *idx);
/* kn_worker_start, under the lock, once the table is final. */
int kn__wk_keys_build(struct kn_worker *w);

#endif /* KN_ENGINE_WORKER_PRIV_H */
