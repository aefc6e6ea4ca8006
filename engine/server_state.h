/* SPDX-License-Identifier: Apache-2.0 */
/*
 * server_state.h - what a server's files share.  A server owns a share
 * of the parameter chunks, one slot area that workers push into, an
 * fp32 master copy and optimizer state per chunk, and one chunk rule
 * (sync/) per chunk that says when to apply what and whom to release.
 *
 * The files, one concern each, each calling only those below it:
 *   server.c        the role's entry point and loop, start-up (the
 *                   layout, the chunks), the control messages;
 *   server_data.c   the data path: pushes in as events of the chunk
 *                   rules, their actions carried out, releases written
 *                   back;
 *   server_apply.c  an APPLY: the sum or the optimizer's update over
 *                   the contributions, into an out buffer;
 *   server_ckpt.c   checkpoints: written as chunks make their versions,
 *                   offered, restored.
 *
 * One thread: the progress loop runs everything; nothing is locked.
 *
 * Start-up: connect to the coordinator, say where we listen (HELLO), get
 * the job (JOB) and the tensor table (TENSOR..., TENSORS_END), build the
 * layout, allocate and register the slot area (remote write only), tell
 * the coordinator (READY LAYOUT).  Then workers connect: each sends the
 * descriptors of its buffers (BUFFERS..., READY BUFFERS) and gets the
 * slot area's (SLOTS).  Worker 0 writes its initial values (INIT); every
 * worker is then released with version 0 of every chunk, which brings
 * all of them to the same model.
 *
 * Per push (a PUSH immediate): the chunk rule gets a PUSH event (a SKIP
 * immediate, a SKIP event: a rejoined BSP worker sits a round out); an
 * APPLY action sums the named slots in one fused pass with the
 * optimizer (or, in summation mode, into the mean), converts the result
 * to the tensor's dtype in one of two out buffers, and each RELEASE
 * writes that buffer into the worker's buffer with a PULL immediate.  An
 * out buffer is reused only once every write from it has completed;
 * events that would need one meanwhile wait in the chunk's queue.
 *
 * Checkpoints (--checkpoint-dir): every --checkpoint-every versions a
 * chunk's state goes into that version's file as the chunk makes it,
 * and the file is sealed once all our chunks have (checkpoint.h).  A job
 * that restores (JOB's flag, or RECOVER after a server was lost) offers
 * the coordinator the versions we hold intact (CHECKPOINTS), loads the
 * one it picks (RESTORE) and starts every chunk's rule anew from it; the
 * workers, let go meanwhile, come back for that model.
 */
#ifndef KN_ENGINE_SERVER_STATE_H
#define KN_ENGINE_SERVER_STATE_H

#include <stdbool.h>
#include <stdint.h>

#include "checkpoint.h"
#include "node.h"
#include "stages.h"
#include "sync.h"

#define NOUT	    2	/* out buffers per chunk */
#define RECONNECT_S 0.2 /* a rank refused as connected already */
/* Checkpoint files being filled at once: under BSP a chunk is at most
 * one version ahead of another, so two always suffice; a chunk further
 * behind (ASP) gets its oldest file abandoned. */
#define CKPT_OPEN 2

struct srv_worker {
	struct kn__chan *ch;
	struct kn__tp_rdesc *params, *grads; /* per tensor */
	uint32_t nbuffers;
	bool ready;	/* buffers known, slots sent */
	bool member;	/* in the chunk rules' membership */
	uint32_t steps; /* local steps its last release asked for */
};

struct srv_chunk {
	uint32_t idx; /* global chunk index */
	const struct kn__chunk *c;
	uint32_t dtype;
	float *master, *m, *v;
	uint64_t step; /* Adam's */
	void *out[NOUT];
	struct kn__tp_mr *out_mr[NOUT];
	uint32_t refs[NOUT]; /* writes in flight from each out buffer */
	int cur;	     /* the out buffer holding the newest version */
	bool initialized;
	bool direct; /* fp32: out[0] is the master copy itself */
	struct kn__sync_rule *rule;
	uint64_t *delivered; /* per worker: version last released to it */
	bool *announce;	     /* per worker: its next release answers a JOIN */
	uint64_t *pushes;    /* per worker: pushes seen */
	uint64_t *pushed;    /* per worker and slot: the version it read */
	struct kn__sync_event *queue; /* events waiting for an out buffer */
	uint32_t qhead, qtail, qcap;
	double round_t;	 /* the first push since the last apply arrived */
	float round_w;	 /* ASP, SSP, CGP: shares since the velocity turned */
	bool round_full; /* ... weigh a round: the velocity turns next */
};

/*
 * Staleness of the applied contributions: the versions applied between
 * the one a contribution was computed from and the one it makes, less
 * one (0 under BSP).  A histogram, for the --metrics line.
 */
#define STALE_BUCKETS 64 /* the last one holds 63 and above */

struct srv_staleness {
	uint64_t count, sum, max;
	uint64_t hist[STALE_BUCKETS];
	uint64_t max_lead; /* SSP, ESP: most syncs a released worker led by */
};

/* The user pointer of a release's write: which out buffer it reads. */
struct srv_write {
	struct srv_chunk *chunk;
	int out;
	double t; /* the last write from it was posted (kn__now) */
};

/* Where a round's time goes on a server, for --metrics. */
struct srv_stages {
	struct kn__hist gather; /* a round's first push in -> its apply */
	struct kn__hist apply;	/* the update kernel */
	struct kn__hist turn;	/* the last push in -> its releases posted */
	struct kn__hist write;	/* a release posted -> its write sent */
};

struct server {
	struct kn__node node;
	const struct kn__config *cfg;
	struct kn__chan *coord;
	double reconnect_at; /* refused as connected already: again then */
	double last_beat;    /* the last HEARTBEAT to the coordinator */
	struct kn__msg job;
	bool joined; /* the JOB came: until then no job of ours */
	struct kn__tensor_desc *table;
	uint32_t ntable;
	struct kn__layout *layout;
	char *slots;
	struct kn__tp_mr *slots_mr;
	struct srv_worker *workers;
	struct srv_chunk *chunks; /* the ones this server owns */
	uint32_t nchunks;
	struct kn__sync_action *actions;
	struct srv_write *writes; /* NOUT per chunk */
	const void **srcs;	  /* an apply's inputs, one per worker */
	float *weights;		  /* and their weights, where they differ */
	struct srv_staleness stale;
	struct srv_stages stages;
	bool release_info; /* the protocol tells workers steps and hints */
	uint32_t *plan;	   /* a PLAN being received, [workers] */
	uint64_t plan_epoch;
	uint32_t plan_have; /* its steps received so far */
	/* CGP: the highest epoch whose end we told the coordinator of */
	uint64_t barrier_epoch;
	bool barrier_sent;
	struct sockaddr_storage advertised; /* where workers reach us */
	/* --checkpoint-dir: each owned chunk's index and size, the files
	 * being filled (oldest first), what our files must match and the
	 * key that seals them */
	struct kn__ckpt_chunk *ckpt_desc;
	struct kn__ckpt *ckpt[CKPT_OPEN];
	struct kn__ckpt_job ckjob;
	/* the version restored from (--restore): the rules count from 0,
	 * the checkpoints' versions go on from it */
	uint64_t base;
	bool restoring; /* the job restores: waiting for RESTORE */
	bool restored;	/* the master copies came from a checkpoint */
	bool done;
	int status;
};

static inline struct server *srv_of(struct kn__node *n)
{
	return n->role;
}

static inline const void *slot_ptr(struct server *s, const struct srv_chunk *ch,
				   uint32_t worker, uint32_t parity)
{
	return s->slots + kn__layout_slot(s->layout, ch->idx, worker, parity);
}

/* Log @why and end the server's loop with @status. */
static inline void srv_fatal(struct server *s, int status, const char *why)
{
	kn__log(&s->node, "%s", why);
	s->status = status;
	s->done = true;
}

/*
 * The files' functions, called top to bottom: server.c calls those of
 * server_data.c and server_ckpt.c, server_data.c those of server_apply.c
 * and server_ckpt.c, and these two call none (no circle).
 */

/* ---- server_data.c: the data path ---- */

/* The node's callbacks: a worker's write is in, a release's write done. */
void kn__srv_on_imm(struct kn__node *n, struct kn__chan *ch, uint32_t imm,
		    uint64_t bytes);
void kn__srv_on_written(struct kn__node *n, void *user, int status);
/* Feed @ev to @ch's rule now, or queue it behind the events waiting. */
void kn__srv_event(struct server *s, struct srv_chunk *ch,
		   const struct kn__sync_event *ev);
/* Start @ch's rule from its master copy (worker 0's INIT, a restore). */
void kn__srv_init_chunk(struct server *s, struct srv_chunk *ch);
void kn__srv_join(struct server *s, uint32_t w);
void kn__srv_leave(struct server *s, uint32_t w);
void kn__srv_timing(struct server *s, uint32_t w, double seconds);

/* ---- server_apply.c ---- */

int kn__srv_apply(struct server *s, struct srv_chunk *ch,
		  const struct kn__sync_action *a, int o);

/* ---- server_ckpt.c: checkpoints ---- */

int kn__srv_setup_checkpoints(struct server *s);
void kn__srv_checkpoint(struct server *s, struct srv_chunk *ch,
			uint64_t version);
int kn__srv_offer_checkpoints(struct server *s);
/* RESTORE: @version loaded into every chunk, their rules started anew
 * (each chunk is then to be initialized: kn__srv_init_chunk).  0, or
 * the server failed (logged). */
int kn__srv_restore(struct server *s, uint64_t version);
void kn__srv_on_recover(struct server *s);

#endif /* KN_ENGINE_SERVER_STATE_H */
