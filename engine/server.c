/* SPDX-License-Identifier: Apache-2.0 */
/*
 * server.c - a server: owns a share of the parameter chunks, one slot
 * area that workers push into, an fp32 master copy and optimizer state
 * per chunk, and one chunk rule (sync/) per chunk that says when to
 * apply what and whom to release.
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
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "auth.h"
#include "checkpoint.h"
#include "node.h"
#include "roles.h"
#include "stages.h"
#include "sync.h"

#define NOUT 2 /* out buffers per chunk */
#define RECONNECT_S 0.2 /* a rank refused as connected already */
/* Checkpoint files being filled at once: under BSP a chunk is at most
 * one version ahead of another, so two always suffice; a chunk further
 * behind (ASP) gets its oldest file abandoned. */
#define CKPT_OPEN 2

/* A release whose write waits: the chunk and the out buffer it is from. */
struct srv_pending {
	uint32_t chunk;
	int out;
};

struct srv_worker {
	struct kn__chan *ch;
	struct kn__tp_rdesc *params, *grads; /* per tensor */
	uint32_t nbuffers;
	bool ready;	/* buffers known, slots sent */
	bool member;	/* in the chunk rules' membership */
	uint32_t steps; /* local steps its last release asked for */
	/* releases the transport had no room for (-EAGAIN), in order:
	 * pend[phead .. pn), posted as its writes complete */
	struct srv_pending *pend;
	uint32_t phead, pn, pcap;
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
	double round_t; /* the first push since the last apply arrived */
	float round_w;	/* ASP, SSP, CGP: shares since the velocity turned */
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

static struct server *srv_of(struct kn__node *n)
{
	return n->role;
}

static void fatal(struct server *s, int status, const char *why)
{
	kn__log(&s->node, "%s", why);
	s->status = status;
	s->done = true;
}

/* ---- checkpoints ---- */

static void init_chunk(struct server *s, struct srv_chunk *ch);

/* The arrays a chunk's state needs: the master copy, and the moments the
 * servers' optimizer keeps (under ESP and PSP: the outer update's). */
static uint32_t state_arrays(const struct kn__msg *job)
{
	if (kn__job_deltas(job->u.job.protocol, job->u.job.optimizer))
		return job->u.job.proto.outer_momentum > 0 ? 2 : 1;
	switch (job->u.job.optimizer) {
	case KN__CONFIG_MOMENTUM:
		return 2;
	case KN__CONFIG_ADAM:
		return 3;
	default:
		return 1;
	}
}

/* What that state is: a file of another optimizer is not ours to load. */
static uint32_t state_kind(const struct kn__msg *job)
{
	if (kn__job_deltas(job->u.job.protocol, job->u.job.optimizer))
		return job->u.job.proto.outer_momentum > 0
			       ? KN__CKPT_OUTER_MOMENTUM
			       : KN__CKPT_PLAIN;
	switch (job->u.job.optimizer) {
	case KN__CONFIG_MOMENTUM:
		return KN__CKPT_MOMENTUM;
	case KN__CONFIG_ADAM:
		return KN__CKPT_ADAM;
	default:
		return KN__CKPT_PLAIN;
	}
}

static void log_line(void *arg, const char *line)
{
	kn__log(arg, "%s", line);
}

/*
 * --restore-secret-file: the key of the secret that sealed the files to
 * restore, accepted beside our own (a job restored under a new secret).
 */
static int load_old_key(struct server *s)
{
	uint8_t secret[KN_AUTH_SECRET_MAX];
	char err[512];
	size_t len;
	int ret;

	if (!s->cfg->restore_secret_file[0])
		return 0;
	ret = kn__auth_load_secret(s->cfg->restore_secret_file, NULL, secret,
				   sizeof(secret), &len, err, sizeof(err));
	if (!ret)
		ret = kn__ckpt_key(secret, len, s->ckjob.old_key);
	kn__auth_wipe(secret, sizeof(secret));
	if (ret) {
		kn__log(&s->node, "--restore-secret-file: %s",
			err[0] ? err : strerror(-ret));
		return ret;
	}
	s->ckjob.has_old_key = true;
	return 0;
}

static int setup_checkpoints(struct server *s)
{
	struct kn__ckpt_job *j = &s->ckjob;
	char err[512];
	int ret;

	if (!s->cfg->checkpoint_dir[0])
		return 0;
	if (kn__job_sums(s->job.u.job.protocol, s->job.u.job.optimizer)) {
		/* the servers keep no model to write */
		kn__log(&s->node, "--checkpoint-dir: the workers apply the "
				  "update (--optimizer sum): no checkpoints");
		return 0;
	}
	/* made if missing (its parent is not), and checked now, not at the
	 * first checkpoint: a directory we own, that only we can write */
	if (mkdir(s->cfg->checkpoint_dir, 0700) && errno != EEXIST) {
		kn__log(&s->node, "--checkpoint-dir %s: %s",
			s->cfg->checkpoint_dir, strerror(errno));
		return -errno;
	}
	ret = kn__ckpt_dir_check(s->cfg->checkpoint_dir, err, sizeof(err));
	if (ret) {
		kn__log(&s->node, "--checkpoint-dir: %s", err);
		return ret;
	}
	s->ckpt_desc = calloc(s->nchunks + 1, sizeof(*s->ckpt_desc));
	if (!s->ckpt_desc)
		return -ENOMEM;
	for (uint32_t i = 0; i < s->nchunks; i++) {
		s->ckpt_desc[i].idx = s->chunks[i].idx;
		s->ckpt_desc[i].count = (uint32_t)s->chunks[i].c->count;
	}
	j->dir = s->cfg->checkpoint_dir;
	j->rank = s->cfg->rank;
	j->nservers = s->job.u.job.servers;
	j->state = state_kind(&s->job);
	j->narrays = state_arrays(&s->job);
	j->chunks = s->ckpt_desc;
	j->nchunks = s->nchunks;
	j->log = log_line;
	j->arg = &s->node;
	ret = kn__ckpt_key(s->node.secret, s->node.secret_len, j->key);
	if (!ret)
		ret = load_old_key(s);
	return ret;
}

/* Chunk @k's state as it is now, for a file or from one. */
static struct kn__ckpt_chunk ckpt_state(struct server *s, uint32_t k)
{
	struct kn__ckpt_chunk c = s->ckpt_desc[k];
	struct srv_chunk *ch = &s->chunks[k];

	c.step = ch->step;
	c.round_w = ch->round_w;
	c.round_full = ch->round_full;
	c.master = ch->master;
	c.m = ch->m;
	c.v = ch->v;
	return c;
}

/*
 * @ch's state has just been loaded from a checkpoint while its rule ran:
 * a new rule (no members, version 0), and nothing owed to anyone.  A
 * write still in flight from an out buffer went to a worker that has
 * been let go; its completion only drops the reference.
 */
static int restart_chunk(struct server *s, struct srv_chunk *ch)
{
	const uint32_t nw = s->layout->nworkers;
	struct kn__sync_rule *rule;
	struct kn__sync_params sp;
	int ret;

	kn__job_sync_params(&s->job, 0, &sp);
	sp.max_workers = nw;
	ret = kn__sync_rule_create(&sp, &rule);
	if (ret)
		return ret;
	kn__sync_rule_destroy(ch->rule);
	ch->rule = rule;
	memset(ch->delivered, 0, nw * sizeof(*ch->delivered));
	memset(ch->announce, 0, nw * sizeof(*ch->announce));
	memset(ch->pushes, 0, nw * sizeof(*ch->pushes));
	memset(ch->pushed, 0, 2 * (size_t)nw * sizeof(*ch->pushed));
	ch->qhead = ch->qtail = 0;
	ch->initialized = false; /* init_chunk: members join, get version 0 */
	return 0;
}

/* The open file for @version, a new one, or NULL (an error, logged). */
static struct kn__ckpt **ckpt_file(struct server *s, uint64_t version)
{
	struct kn__ckpt **slot = NULL;
	char err[512];
	int ret;

	for (int i = 0; i < CKPT_OPEN; i++) {
		if (s->ckpt[i] && kn__ckpt_version(s->ckpt[i]) == version)
			return &s->ckpt[i];
		if (!s->ckpt[i] && !slot)
			slot = &s->ckpt[i];
		else if (s->ckpt[i] && kn__ckpt_version(s->ckpt[i]) > version)
			return NULL; /* a chunk that fell behind: skipped */
	}
	if (!slot) {
		/* the oldest never filled: its chunks drifted apart */
		slot = &s->ckpt[0];
		kn__log(&s->node,
			"checkpoint of version %llu abandoned: a "
			"chunk of it fell %d checkpoints behind",
			(unsigned long long)kn__ckpt_version(*slot), CKPT_OPEN);
		kn__ckpt_abort(*slot);
		memmove(&s->ckpt[0], &s->ckpt[1],
			(CKPT_OPEN - 1) * sizeof(s->ckpt[0]));
		slot = &s->ckpt[CKPT_OPEN - 1];
		*slot = NULL;
	}
	ret = kn__ckpt_open(&s->ckjob, version, slot, err, sizeof(err));
	if (ret) {
		kn__log(&s->node, "checkpoint of version %llu: %s",
			(unsigned long long)version, err);
		return NULL;
	}
	return slot;
}

/*
 * @ch has just made @version: every --checkpoint-every versions its
 * state goes into that version's file, which is sealed once every
 * chunk of ours has reached the version.  Synchronous file I/O, a
 * chunk's bytes at a time; an error costs that checkpoint only.
 */
static void checkpoint(struct server *s, struct srv_chunk *ch, uint64_t version)
{
	const uint32_t k = (uint32_t)(ch - s->chunks);
	struct kn__ckpt **f;
	struct kn__ckpt_chunk state;
	uint64_t bytes;
	double spent, t0;
	char err[512];
	int ret;

	if (!s->ckpt_desc || version % s->cfg->checkpoint_every)
		return;
	f = ckpt_file(s, version);
	if (!f)
		return;
	state = ckpt_state(s, k);
	ret = kn__ckpt_put(*f, k, &state);
	if (!ret && !kn__ckpt_whole(*f))
		return;
	kn__ckpt_cost(*f, &bytes, &spent);
	t0 = kn__now();
	if (ret) {
		kn__log(&s->node, "checkpoint of version %llu, chunk %u: %s",
			(unsigned long long)version, ch->idx, strerror(-ret));
		kn__ckpt_abort(*f);
	} else if ((ret = kn__ckpt_close(*f, err, sizeof(err)))) {
		kn__log(&s->node, "checkpoint of version %llu: %s",
			(unsigned long long)version, err);
	} else if (s->cfg->verbose) {
		/* what the progress loop spent on it: the chunks' writes,
		 * then the seal (fsync, rename, the folder's fsync) */
		kn__log(&s->node,
			"checkpoint of version %llu written: %.1f MiB, "
			"%.1f ms of writes, %.1f ms to seal",
			(unsigned long long)version, (double)bytes / 1048576.0,
			spent * 1e3, (kn__now() - t0) * 1e3);
	}
	*f = NULL;
	/* keep the open ones oldest first, packed */
	for (int i = 0; i + 1 < CKPT_OPEN; i++)
		if (!s->ckpt[i]) {
			s->ckpt[i] = s->ckpt[i + 1];
			s->ckpt[i + 1] = NULL;
		}
}

/* The job restores: tell the coordinator which versions we can load. */
static int offer_checkpoints(struct server *s)
{
	struct kn__msg m = { .type = KN__MSG_CHECKPOINTS };
	uint32_t n = 0;
	int ret;

	if (!s->ckpt_desc) {
		kn__log(&s->node, "the job restores from checkpoints, and this "
				  "server keeps none (no --checkpoint-dir, "
				  "or --optimizer sum)");
		return -EINVAL;
	}
	if (!s->nchunks) {
		/* nothing of the model here, nothing to go back to */
		m.u.checkpoints.any = 1;
		s->restoring = true;
		kn__chan_send(s->coord, &m);
		return 0;
	}
	ret = kn__ckpt_list(&s->ckjob, m.u.checkpoints.versions,
			    KN__MSG_CKPT_MAX, &n);
	if (ret)
		return ret; /* the folder's line is logged */
	kn__log(&s->node, "%u intact checkpoint%s in %s%s", n,
		n == 1 ? "" : "s", s->cfg->checkpoint_dir,
		n ? "" : ": nothing to restore");
	m.u.checkpoints.count = n;
	s->restoring = true;
	kn__chan_send(s->coord, &m);
	return 0;
}

/* RESTORE: load @version into every chunk, then take the INITs that
 * came meanwhile (their values are not used: the file's are). */
static void on_restore(struct server *s, uint64_t version)
{
	char err[512];
	struct kn__ckpt_chunk *st;
	int ret;

	if (!s->restoring) {
		fatal(s, -EPROTO, "a RESTORE out of place");
		return;
	}
	st = calloc(s->nchunks + 1, sizeof(*st));
	if (!st) {
		fatal(s, -ENOMEM, "out of memory");
		return;
	}
	for (uint32_t k = 0; k < s->nchunks; k++)
		st[k] = ckpt_state(s, k);
	ret = !s->nchunks
		      ? 0
		      : kn__ckpt_load(&s->ckjob, version, st, err, sizeof(err));
	for (uint32_t k = 0; !ret && k < s->nchunks; k++) {
		s->chunks[k].step = st[k].step;
		s->chunks[k].round_w = st[k].round_w;
		s->chunks[k].round_full = st[k].round_full;
	}
	free(st);
	if (ret) {
		kn__log(&s->node, "restoring version %llu: %s",
			(unsigned long long)version, err);
		fatal(s, ret, "the checkpoint cannot be loaded");
		return;
	}
	kn__log(&s->node, "restored version %llu", (unsigned long long)version);
	kn__ckpt_remove_newer(&s->ckjob, version);
	s->base = version;
	s->restoring = false;
	s->restored = true;
	/* the rules start anew at epoch 0, and so does the planner: no
	 * plan half received, no barrier told */
	s->plan_have = 0;
	s->barrier_sent = false;
	s->barrier_epoch = 0;
	for (uint32_t k = 0; k < s->nchunks; k++) {
		struct srv_chunk *ch = &s->chunks[k];

		if (ch->initialized && restart_chunk(s, ch)) {
			fatal(s, -ENOMEM, "out of memory for a chunk rule");
			return;
		}
		/* the file's values, version 0 of the chunk's new rule, to
		 * every worker that came meanwhile */
		init_chunk(s, ch);
	}
}

/*
 * A server was lost and the job goes back to a checkpoint: the workers
 * are let go (they come back for the restored model), the files being
 * filled are dropped, and the coordinator hears which versions we hold.
 */
static void on_recover(struct server *s)
{
	if (!s->layout || s->restoring) {
		fatal(s, -EPROTO, "a RECOVER out of place");
		return;
	}
	for (uint32_t w = 0; w < s->layout->nworkers; w++)
		if (s->workers[w].ch)
			kn__chan_close(s->workers[w].ch);
	for (int i = 0; i < CKPT_OPEN; i++) {
		kn__ckpt_abort(s->ckpt[i]);
		s->ckpt[i] = NULL;
	}
	if (offer_checkpoints(s))
		fatal(s, -EINVAL, "no checkpoints to offer");
}

/* ---- start-up ---- */

static int setup_chunks(struct server *s)
{
	const struct kn__layout *l = s->layout;
	uint32_t self = s->cfg->rank, nw = l->nworkers;
	struct kn__sync_params sp;
	int ret;

	kn__job_sync_params(&s->job, 0, &sp);
	sp.max_workers = nw;
	for (uint32_t i = 0; i < l->nchunks; i++)
		s->nchunks += l->chunks[i].server == self;
	s->chunks = calloc(s->nchunks + 1, sizeof(*s->chunks));
	s->writes = calloc((size_t)s->nchunks * NOUT + 1, sizeof(*s->writes));
	s->actions = calloc(kn__sync_max_actions(&sp), sizeof(*s->actions));
	s->srcs = calloc(nw, sizeof(*s->srcs));
	s->weights = calloc(nw, sizeof(*s->weights));
	if (!s->chunks || !s->writes || !s->actions || !s->srcs || !s->weights)
		return -ENOMEM;
	for (uint32_t i = 0, k = 0; i < l->nchunks; i++) {
		struct srv_chunk *ch = &s->chunks[k];
		size_t n;

		if (l->chunks[i].server != self)
			continue;
		ch->idx = i;
		ch->c = &l->chunks[i];
		ch->dtype = l->tensors[ch->c->tensor].dtype;
		n = ch->c->count;
		ch->master = calloc(n, sizeof(float));
		ch->m = calloc(n, sizeof(float));
		ch->v = calloc(n, sizeof(float));
		ch->delivered = calloc(nw, sizeof(uint64_t));
		ch->announce = calloc(nw, sizeof(bool));
		ch->pushes = calloc(nw, sizeof(uint64_t));
		ch->pushed = calloc(2 * (size_t)nw, sizeof(uint64_t));
		ch->qcap = 4 * nw;
		ch->queue = calloc(ch->qcap, sizeof(*ch->queue));
		if (!ch->master || !ch->m || !ch->v || !ch->delivered ||
		    !ch->announce || !ch->pushes || !ch->pushed || !ch->queue)
			return -ENOMEM;
		/*
		 * fp32 parameters leave straight from the master copy: no
		 * conversion, no copy; the next apply waits until the
		 * writes from it are done.
		 */
		ch->direct = ch->dtype == KN_DTYPE_FP32 &&
			     !kn__job_sums(s->job.u.job.protocol,
					   s->job.u.job.optimizer);
		for (int o = 0; o < (ch->direct ? 1 : NOUT); o++) {
			ch->out[o] =
				ch->direct ? (void *)ch->master
					   : aligned_alloc(64,
							   (ch->c->bytes + 63) /
								   64 * 64);
			if (!ch->out[o])
				return -ENOMEM;
			ret = kn__tp_mr_reg(s->node.ctx, ch->out[o],
					    ch->c->bytes, 0, &ch->out_mr[o]);
			if (ret)
				return ret;
			s->writes[k * NOUT + o] =
				(struct srv_write){ .chunk = ch, .out = o };
		}
		ret = kn__sync_rule_create(&sp, &ch->rule);
		if (ret)
			return ret;
		k++;
	}
	return 0;
}

static void on_table_end(struct server *s, uint32_t count)
{
	const struct kn__layout *l;
	struct kn__msg m = { .type = KN__MSG_READY };
	size_t bytes;
	int ret;

	if (count != s->ntable) {
		fatal(s, -EPROTO, "the coordinator's tensor table is torn");
		return;
	}
	ret = kn__layout_build(s->table, s->ntable, s->job.u.job.servers,
			       s->job.u.job.workers, s->job.u.job.chunk_bytes,
			       &s->layout);
	if (ret) {
		fatal(s, ret, "the tensor table makes no layout");
		return;
	}
	l = s->layout;
	bytes = l->slot_bytes[s->cfg->rank];
	s->slots = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096 + 4096);
	s->workers = calloc(l->nworkers, sizeof(*s->workers));
	if (!s->slots || !s->workers) {
		fatal(s, -ENOMEM, "out of memory for the slot area");
		return;
	}
	ret = kn__tp_mr_reg(s->node.ctx, s->slots, bytes ? bytes : 1,
			    KN_TP_REMOTE_WRITE, &s->slots_mr);
	if (!ret)
		ret = setup_chunks(s);
	if (ret) {
		fatal(s, ret, "allocating the chunks failed");
		return;
	}
	ret = setup_checkpoints(s);
	if (ret) {
		fatal(s, ret, "no checkpoints can be written");
		return;
	}
	if (s->job.u.job.restore && offer_checkpoints(s)) {
		fatal(s, -EINVAL, "no checkpoints to offer");
		return;
	}
	if (s->cfg->verbose)
		kn__log(&s->node,
			"%u chunks, %llu parameter bytes, %zu slot "
			"bytes",
			s->nchunks,
			(unsigned long long)l->server_bytes[s->cfg->rank],
			bytes);
	m.u.ready.what = KN__READY_LAYOUT;
	kn__chan_send(s->coord, &m);
}

/* ---- the data path ---- */

static const void *slot_ptr(struct server *s, const struct srv_chunk *ch,
			    uint32_t worker, uint32_t parity)
{
	return s->slots + kn__layout_slot(s->layout, ch->idx, worker, parity);
}

/* Write the newest version of @ch into worker @w's buffer. */
/* The write of a release to worker @w from out buffer @out of @ch. */
static int post_release(struct server *s, struct srv_chunk *ch, uint32_t w,
			int out)
{
	struct srv_worker *sw = &s->workers[w];
	const struct kn__tp_rdesc *dst;
	struct srv_write *wr;

	dst = kn__job_sums(s->job.u.job.protocol, s->job.u.job.optimizer)
		      ? &sw->grads[ch->c->tensor]
		      : &sw->params[ch->c->tensor];
	wr = &s->writes[(ch - s->chunks) * NOUT + out];
	wr->t = kn__now();
	return kn__tp_post_write_imm(sw->ch->ep, ch->out_mr[out], 0,
				     ch->c->bytes, dst,
				     ch->c->first * kn_dtype_size(ch->dtype),
				     kn__imm(KN__IMM_PULL, 0, ch->idx), wr);
}

/* Keep a release for later: the transport's queue to @sw is full. */
static int pend_push(struct srv_worker *sw, uint32_t chunk, int out)
{
	if (sw->pn == sw->pcap && sw->phead) {
		memmove(sw->pend, sw->pend + sw->phead,
			(sw->pn - sw->phead) * sizeof(*sw->pend));
		sw->pn -= sw->phead;
		sw->phead = 0;
	}
	if (sw->pn == sw->pcap) {
		uint32_t cap = sw->pcap ? 2 * sw->pcap : 64;
		struct srv_pending *p = realloc(sw->pend, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		sw->pend = p;
		sw->pcap = cap;
	}
	sw->pend[sw->pn++] = (struct srv_pending){ chunk, out };
	return 0;
}

/* Post the releases that waited for room, in order, while there is. */
static void flush_pending(struct server *s)
{
	for (uint32_t w = 0; s->workers && w < s->layout->nworkers; w++) {
		struct srv_worker *sw = &s->workers[w];

		while (sw->phead < sw->pn && sw->ch) {
			const struct srv_pending *p = &sw->pend[sw->phead];
			int ret = post_release(s, &s->chunks[p->chunk], w,
					       p->out);

			if (ret == -EAGAIN)
				break;
			if (ret) {
				kn__log(&s->node, "%s: release of chunk %u: %s",
					sw->ch->name, s->chunks[p->chunk].idx,
					strerror(-ret));
				kn__chan_close(sw->ch);
				break;
			}
			sw->phead++;
		}
		if (sw->phead == sw->pn)
			sw->phead = sw->pn = 0;
	}
}

/* Worker @w is gone: its waiting releases will not be written. */
static void pend_drop(struct server *s, uint32_t w)
{
	struct srv_worker *sw = &s->workers[w];

	for (; sw->phead < sw->pn; sw->phead++) {
		struct srv_chunk *ch = &s->chunks[sw->pend[sw->phead].chunk];

		ch->refs[sw->pend[sw->phead].out]--;
	}
	sw->phead = sw->pn = 0;
}

static void release(struct server *s, struct srv_chunk *ch,
		    const struct kn__sync_action *a)
{
	uint32_t w = a->worker;
	struct srv_worker *sw = &s->workers[w];
	uint64_t lead, version = a->version;
	int ret;

	if (!sw->ch || !sw->ready)
		return; /* gone: it gets the model when it comes back */
	sw->steps = a->steps;
	if (s->release_info || ch->announce[w]) {
		/*
		 * Before the write: the worker counts the chunk delivered
		 * once it has both, whichever order they come in.  Every
		 * protocol announces the answer to a JOIN, whose version a
		 * rejoining worker needs (a BSP joiner sits out the rounds
		 * of chunks that lag its others).
		 */
		struct kn__msg m = { .type = KN__MSG_RELEASE };

		ch->announce[w] = false;
		m.u.release.chunk = ch->idx;
		m.u.release.version = version;
		m.u.release.steps = a->steps;
		m.u.release.epoch = a->epoch;
		m.u.release.hint = a->hint >= 0 ? a->hint : 0;
		kn__chan_send(sw->ch, &m);
	}
	/* behind the releases already waiting, or at once */
	ret = sw->phead < sw->pn ? -EAGAIN : post_release(s, ch, w, ch->cur);
	if (ret == -EAGAIN)
		ret = pend_push(sw, (uint32_t)(ch - s->chunks), ch->cur);
	if (ret) {
		kn__log(&s->node, "%s: release of chunk %u: %s", sw->ch->name,
			ch->idx, strerror(-ret));
		kn__chan_close(sw->ch);
		return;
	}
	ch->refs[ch->cur]++;
	ch->delivered[w] = version;
	lead = kn__sync_rule_lead(ch->rule, w);
	if (lead > s->stale.max_lead)
		s->stale.max_lead = lead;
}

/* Count the staleness of an APPLY's contributions (--metrics). */
static void count_staleness(struct srv_staleness *st,
			    const struct srv_chunk *ch,
			    const struct kn__sync_action *a)
{
	for (uint32_t i = 0; i < a->ncontrib; i++) {
		const struct kn__sync_contrib *c = &a->contrib[i];
		uint64_t read =
			ch->pushed[2 * (size_t)c->worker + (c->slot & 1)];
		uint64_t tau =
			a->version > read + 1 ? a->version - read - 1 : 0;

		st->count++;
		st->sum += tau;
		if (tau > st->max)
			st->max = tau;
		st->hist[tau < STALE_BUCKETS ? tau : STALE_BUCKETS - 1]++;
	}
}

/*
 * ESP and PSP push model deltas, not gradients: the job's optimizer ran
 * on the workers.  The servers apply the outer update: the weighted mean
 * of the deltas at the outer rate, with Nesterov momentum if one is set
 * (docs/protocols.md, "What a contribution is").
 */
static void outer_update(const struct kn__sync_params *proto, float lr_scale,
			 struct kn_update_params *p)
{
	p->optimizer = proto->outer_momentum > 0 ? KN_OPT_MOMENTUM : KN_OPT_SGD;
	p->flags = proto->outer_momentum > 0 ? KN_UPDATE_NESTEROV : 0;
	p->lr = (proto->outer_lr > 0 ? proto->outer_lr : 1.0f) * lr_scale;
	p->momentum = proto->outer_momentum;
	p->weight_decay = 0;
}

/* The job's update of the master and its moments by @p, over @src. */
static int update(const struct kn_update_params *p, struct srv_chunk *ch,
		  const void **src, const float *weights, uint32_t n)
{
	return weights ? kn_update_weighted(p, ch->master, ch->m, ch->v, src,
					    weights, n, ch->dtype, ch->c->count)
		       : kn_update(p, ch->master, ch->m, ch->v, src, n,
				   ch->dtype, ch->c->count);
}

/*
 * ASP, SSP and CGP under momentum: each apply is a share of a round (a
 * push, or a group's round, weighted 1/n per push and damped by
 * staleness), and the velocity turns once per round's worth of shares,
 * as BSP's does once per mean (docs/protocols.md, "Momentum once per
 * round").  The first apply of a round turns it, applying what it
 * carries over from the last round,
 *   w -= lr * mu * m;  m = mu * m,
 * and every apply's share s * g moves the model at once and joins it,
 *   w -= lr * s * g;  m += s * g.
 * A round of shares so moves the model by lr * (mu * m + sum of s * g),
 * BSP's heavy-ball step, and every apply shows in its own releases.
 */
static int apply_share(struct server *s, struct srv_chunk *ch,
		       const struct kn__sync_action *a, const void **src,
		       const float *weights, float w)
{
	const struct kn__msg *job = &s->job;
	struct kn_update_params turn = {
		.optimizer = KN_OPT_MOMENTUM,
		.lr = job->u.job.lr,
		.momentum = job->u.job.momentum,
	}; /* grad_scale 0: the velocity alone */
	struct kn_update_params step = {
		.optimizer = KN_OPT_SGD,
		.lr = job->u.job.lr * a->lr_scale,
		.grad_scale = w,
	};
	/* m = 1 * m + s * g, and w -= 0 * m leaves the model as it is */
	struct kn_update_params join = {
		.optimizer = KN_OPT_MOMENTUM,
		.grad_scale = w * a->lr_scale,
		.momentum = 1.0f,
	};
	int ret = 0;

	if (ch->round_full)
		ret = update(&turn, ch, src, NULL, 1);
	ch->round_full = false;
	if (!ret)
		ret = update(&step, ch, src, weights, a->ncontrib);
	if (!ret)
		ret = update(&join, ch, src, weights, a->ncontrib);
	for (uint32_t i = 0; i < a->ncontrib; i++)
		ch->round_w += a->contrib[i].weight;
	/* n shares of 1/n add up to a hair under 1 in floats */
	if (ch->round_w > 1.0f - 1e-4f) {
		ch->round_w = ch->round_w > 1.0f ? ch->round_w - 1.0f : 0;
		ch->round_full = true;
	}
	return ret;
}

/* Apply one APPLY action into the free out buffer @o. */
static int apply(struct server *s, struct srv_chunk *ch,
		 const struct kn__sync_action *a, int o)
{
	const void **src = s->srcs;
	const struct kn__msg *job = &s->job;
	size_t n = ch->c->count;
	float w = a->ncontrib ? a->contrib[0].weight : 1.0f;
	const float *weights = NULL;
	int ret;

	if (a->ncontrib == 0 || a->ncontrib > s->layout->nworkers)
		return -EINVAL;
	for (uint32_t i = 0; i < a->ncontrib; i++) {
		src[i] = slot_ptr(s, ch, a->contrib[i].worker,
				  a->contrib[i].slot);
		s->weights[i] = a->contrib[i].weight;
		if (a->contrib[i].weight != w)
			weights = s->weights; /* they differ (PSP, CGP) */
	}
	if (weights)
		w = 1.0f; /* each input's own factor, in the same pass */
	count_staleness(&s->stale, ch, a);
	if (kn__job_sums(job->u.job.protocol, job->u.job.optimizer)) {
		/* the mean, in the tensor's dtype, for the workers */
		ret = weights ? kn_sum_weighted(ch->out[o], ch->dtype, src,
						weights, a->ncontrib, ch->dtype,
						n)
			      : kn_sum(ch->out[o], ch->dtype, src, a->ncontrib,
				       ch->dtype, n, w);
	} else {
		struct kn_update_params p = {
			.optimizer = (enum kn_optimizer)job->u.job.optimizer,
			.lr = job->u.job.lr * a->lr_scale,
			.grad_scale = w,
			.momentum = job->u.job.momentum,
			.beta1 = 0.9f,
			.beta2 = 0.999f,
			.eps = 1e-8f,
			.step = ++ch->step,
		};

		if (kn__job_deltas(job->u.job.protocol, job->u.job.optimizer))
			outer_update(&job->u.job.proto, a->lr_scale, &p);
		if (job->u.job.optimizer == KN__CONFIG_MOMENTUM && a->share)
			ret = apply_share(s, ch, a, src, weights, w);
		else
			ret = update(&p, ch, src, weights, a->ncontrib);
		if (!ret && !ch->direct)
			ret = kn_convert(ch->out[o], ch->dtype, ch->master,
					 KN_DTYPE_FP32, n);
	}
	if (!ret)
		ch->cur = o;
	return ret;
}

static int free_out(const struct srv_chunk *ch)
{
	if (ch->direct)
		return ch->refs[0] ? -1 : 0; /* the master, once idle */
	for (int o = 0; o < NOUT; o++)
		if (o != ch->cur && ch->refs[o] == 0)
			return o;
	return -1;
}

/*
 * CGP: a chunk rule waits at the end of @epoch for the next plan.  Each
 * of our rules says so; the coordinator hears it from us once an epoch.
 */
static void barrier(struct server *s, uint64_t epoch)
{
	struct kn__msg m = { .type = KN__MSG_BARRIER };

	if (s->barrier_sent && epoch <= s->barrier_epoch)
		return;
	s->barrier_sent = true;
	s->barrier_epoch = epoch;
	m.u.barrier.epoch = epoch;
	if (s->coord)
		kn__chan_send(s->coord, &m);
}

/*
 * Feed @ev to @ch's rule and carry out its actions.  False when an
 * APPLY found no free out buffer: the event waits in the queue.
 */
static bool feed(struct server *s, struct srv_chunk *ch,
		 const struct kn__sync_event *ev)
{
	bool push = ev->type == KN__SYNC_EV_PUSH, released = false;
	int n, o = -1;
	double t;

	if ((push || ev->type == KN__SYNC_EV_SKIP) && (o = free_out(ch)) < 0)
		return false; /* a push may apply: it needs a free buffer */
	if (push && !ch->round_t)
		ch->round_t = ev->t;
	if (ev->type == KN__SYNC_EV_JOIN)
		ch->announce[ev->worker] = true;
	n = kn__sync_rule_event(ch->rule, ev, s->actions);
	if (n < 0 && ev->type == KN__SYNC_EV_PLAN) {
		/* the coordinator's plan, which no worker is to blame for */
		kn__log(&s->node, "chunk %u: the rule refused plan %llu: %s",
			ch->idx, (unsigned long long)ev->epoch, strerror(-n));
		fatal(s, -EPROTO, "a plan the protocol refuses");
		return true;
	}
	if (n < 0) {
		struct srv_worker *sw = &s->workers[ev->worker];

		if (sw->ch)
			kn__chan_send_error(sw->ch, n,
					    "chunk %u: a push the protocol "
					    "refuses",
					    ch->idx);
		return true;
	}
	for (int i = 0; i < n; i++) {
		const struct kn__sync_action *a = &s->actions[i];

		if (a->type == KN__SYNC_ACT_APPLY) {
			if (o < 0)
				o = free_out(ch);
			t = kn__now();
			if (ch->round_t)
				kn__hist_add(&s->stages.gather,
					     t - ch->round_t);
			ch->round_t = 0;
			if (o < 0 || apply(s, ch, a, o)) {
				fatal(s, -EIO, "an apply failed");
				return true;
			}
			kn__hist_add(&s->stages.apply, kn__now() - t);
			o = -1;
			checkpoint(s, ch, s->base + a->version);
		} else if (a->type == KN__SYNC_ACT_RELEASE) {
			release(s, ch, a);
			released = true;
		} else if (a->type == KN__SYNC_ACT_BARRIER) {
			barrier(s, a->epoch);
		}
	}
	if (push && released)
		kn__hist_add(&s->stages.turn, kn__now() - ev->t);
	return true;
}

static void drain_queue(struct server *s, struct srv_chunk *ch)
{
	while (ch->qhead != ch->qtail &&
	       feed(s, ch, &ch->queue[ch->qhead % ch->qcap]))
		ch->qhead++;
}

static void event(struct server *s, struct srv_chunk *ch,
		  const struct kn__sync_event *ev)
{
	if (ch->qhead == ch->qtail && feed(s, ch, ev))
		return;
	if (ch->qtail - ch->qhead == ch->qcap) {
		fatal(s, -ENOBUFS, "a chunk's event queue overflowed");
		return;
	}
	ch->queue[ch->qtail++ % ch->qcap] = *ev;
}

static struct srv_chunk *chunk_of(struct server *s, uint32_t idx)
{
	uint32_t lo = 0, hi = s->nchunks;

	while (lo < hi) { /* owned chunks are in index order */
		uint32_t mid = (lo + hi) / 2;

		if (s->chunks[mid].idx < idx)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < s->nchunks && s->chunks[lo].idx == idx ? &s->chunks[lo]
							   : NULL;
}

/* A worker is in: member of every rule, which releases it. */
static void join(struct server *s, uint32_t w)
{
	struct kn__sync_event ev = { .type = KN__SYNC_EV_JOIN,
				     .worker = w,
				     .t = kn__now() };

	if (s->workers[w].member)
		return;
	s->workers[w].member = true;
	if (s->restoring)
		return; /* it joins the restored rules (init_chunk) */
	for (uint32_t i = 0; i < s->nchunks; i++)
		if (s->chunks[i].initialized)
			event(s, &s->chunks[i], &ev);
}

static void leave(struct server *s, uint32_t w)
{
	struct kn__sync_event ev = { .type = KN__SYNC_EV_LEAVE,
				     .worker = w,
				     .t = kn__now() };

	if (!s->workers[w].member)
		return;
	s->workers[w].member = false;
	for (uint32_t i = 0; i < s->nchunks; i++)
		if (s->chunks[i].initialized)
			event(s, &s->chunks[i], &ev);
}

/*
 * ESP: a member's seconds per local step, for every rule, which compare
 * the members' (rounds while they are even).  It needs no out buffer and
 * emits nothing, so it goes in at once, ahead of any queued push: it is
 * a measurement, not a contribution, and its place among the pushes can
 * only move the push at which rounds start or stop.  A refused value
 * (not a duration) is the worker's bug: it hears of it.
 */
static void timing(struct server *s, uint32_t w, double seconds)
{
	struct kn__sync_event ev = { .type = KN__SYNC_EV_TIMING,
				     .worker = w,
				     .t = kn__now(),
				     .value = seconds };
	int ret;

	if (!s->workers[w].member || s->restoring)
		return;
	for (uint32_t i = 0; i < s->nchunks; i++) {
		if (!s->chunks[i].initialized)
			continue;
		ret = kn__sync_rule_event(s->chunks[i].rule, &ev, s->actions);
		if (ret < 0) {
			if (s->workers[w].ch)
				kn__chan_send_error(s->workers[w].ch, ret,
						    "a timing the protocol "
						    "refuses");
			return;
		}
	}
}

/* Worker 0's initial values of a chunk: the master copy, version 0. */
static void init_chunk(struct server *s, struct srv_chunk *ch)
{
	const void *src = slot_ptr(s, ch, 0, 0);
	struct kn__sync_event ev = { .type = KN__SYNC_EV_JOIN, .t = kn__now() };

	if (ch->initialized)
		return;
	if (s->restoring) {
		/* the master comes from the file: on_restore */
		return;
	}
	if (!s->restored)
		kn_convert(ch->master, KN_DTYPE_FP32, src, ch->dtype,
			   ch->c->count);
	if (!ch->direct)
		kn_convert(ch->out[ch->cur], ch->dtype, ch->master,
			   KN_DTYPE_FP32, ch->c->count);
	ch->initialized = true;
	/* the initial model is version 0's checkpoint: a server lost
	 * before the first --checkpoint-every versions goes back to it */
	if (!s->restored)
		checkpoint(s, ch, 0);
	/* members so far join the rule now, and get version 0 */
	for (uint32_t w = 0; w < s->layout->nworkers; w++) {
		if (!s->workers[w].member)
			continue;
		ev.worker = w;
		event(s, ch, &ev);
	}
}

static void on_imm(struct kn__node *n, struct kn__chan *ch, uint32_t imm,
		   uint64_t bytes)
{
	struct server *s = srv_of(n);
	struct srv_chunk *c =
		s->layout ? chunk_of(s, kn__imm_chunk(imm)) : NULL;
	uint32_t w = ch->peer_rank;
	struct kn__sync_event ev;

	if (!c || ch->peer_role != KN__ROLE_WORKER || bytes != c->c->bytes ||
	    !s->workers[w].ready) {
		kn__log(n,
			"%s: a write for chunk %u that is not ours: "
			"closing",
			ch->name, kn__imm_chunk(imm));
		kn__chan_close(ch);
		return;
	}
	switch (kn__imm_op(imm)) {
	case KN__IMM_INIT:
		if (w == 0)
			init_chunk(s, c);
		return;
	case KN__IMM_PUSH:
	case KN__IMM_SKIP:
		if (!c->initialized || !s->workers[w].member)
			return; /* not in the job (yet): dropped */
		ev = (struct kn__sync_event){
			.type = kn__imm_op(imm) == KN__IMM_PUSH
					? KN__SYNC_EV_PUSH
					: KN__SYNC_EV_SKIP,
			.worker = w,
			.slot = kn__imm_parity(imm),
			.clock = c->pushes[w]++,
			.version = c->delivered[w],
			.t = kn__now(),
			.steps = s->workers[w].steps,
		};
		c->pushed[2 * (size_t)w + ev.slot] = ev.version;
		event(s, c, &ev);
		return;
	default:
		kn__chan_close(ch);
	}
}

static void on_written(struct kn__node *n, void *user, int status)
{
	struct srv_write *wr = user;
	struct srv_chunk *ch = wr->chunk;

	(void)status; /* a failed write fails its endpoint: closed() */
	kn__hist_add(&srv_of(n)->stages.write, kn__now() - wr->t);
	ch->refs[wr->out]--;
	flush_pending(srv_of(n)); /* the transport has room again */
	drain_queue(srv_of(n), ch);
}

/* ---- messages ---- */

static void on_worker_msg(struct server *s, struct kn__chan *ch,
			  const struct kn__msg *m)
{
	uint32_t w = ch->peer_rank;
	struct srv_worker *sw = &s->workers[w];
	struct kn__msg r = { .type = KN__MSG_SLOTS };
	int ret;

	switch (m->type) {
	case KN__MSG_BUFFERS:
		if (m->u.buffers.index >= s->layout->ntensors) {
			kn__chan_send_error(ch, -EINVAL, "no tensor %u",
					    m->u.buffers.index);
			kn__chan_close(ch);
			return;
		}
		sw->params[m->u.buffers.index] = m->u.buffers.params;
		sw->grads[m->u.buffers.index] = m->u.buffers.grads;
		sw->nbuffers++;
		return;
	case KN__MSG_READY:
		if (m->u.ready.what != KN__READY_BUFFERS ||
		    sw->nbuffers != s->layout->ntensors) {
			kn__chan_send_error(ch, -EINVAL,
					    "%u of %u buffers before READY",
					    sw->nbuffers, s->layout->ntensors);
			kn__chan_close(ch);
			return;
		}
		/* the worker's own slice of the slots, and nothing else */
		ret = kn__tp_ep_grant(
			ch->ep, s->slots_mr,
			w * s->layout->worker_slot_bytes[s->cfg->rank],
			s->layout->worker_slot_bytes[s->cfg->rank],
			KN_TP_REMOTE_WRITE, &r.u.slots.slots);
		if (ret) {
			kn__chan_send_error(ch, ret, "granting the slots: %s",
					    strerror(-ret));
			kn__chan_close(ch);
			return;
		}
		sw->ready = true;
		kn__chan_send(ch, &r);
		join(s, w);
		return;
	case KN__MSG_DONE:
		leave(s, w);
		return;
	case KN__MSG_TIMING:
		if (kn__sync_traits(s->job.u.job.protocol)->timing !=
		    KN__SYNC_TIMING_RULES)
			break;
		timing(s, w, m->u.timing.seconds);
		return;
	default:
		break;
	}
	kn__chan_send_error(ch, -EPROTO, "%s is no worker message",
			    kn__msg_name(m->type));
	kn__chan_close(ch);
}

/*
 * A part of a plan (PSP, CGP): the parts of one epoch come in order;
 * once the plan is whole, every chunk rule gets it, to switch to at its
 * next barrier (CGP's rules may then release the workers they held
 * there).  The entries are the protocol's to check: PSP's steps, CGP's
 * groups and rounds.
 */
static void on_plan(struct server *s, const struct kn__msg *m)
{
	const uint32_t nw = s->layout ? s->layout->nworkers : 0;
	struct kn__sync_event ev = { .type = KN__SYNC_EV_PLAN };

	if (!nw || m->u.plan.workers != nw ||
	    (m->u.plan.first == 0) != (s->plan_have == 0) ||
	    (m->u.plan.first && m->u.plan.epoch != s->plan_epoch) ||
	    m->u.plan.first != s->plan_have) {
		fatal(s, -EPROTO, "a plan out of order");
		return;
	}
	if (!s->plan && !(s->plan = calloc(nw, sizeof(*s->plan)))) {
		fatal(s, -ENOMEM, "out of memory");
		return;
	}
	s->plan_epoch = m->u.plan.epoch;
	memcpy(s->plan + m->u.plan.first, m->u.plan.steps,
	       m->u.plan.count * sizeof(*s->plan));
	s->plan_have += m->u.plan.count;
	if (s->plan_have < nw)
		return;
	s->plan_have = 0;
	ev.epoch = s->plan_epoch;
	/* a rule copies the plan when it takes the event; one queued
	 * behind an apply is taken within the round, long before the next
	 * plan (a plan needs rounds of timings) overwrites the array */
	ev.plan = s->plan;
	ev.t = kn__now();
	for (uint32_t i = 0; i < s->nchunks; i++)
		if (s->chunks[i].initialized)
			event(s, &s->chunks[i], &ev);
}

static void on_coord_msg(struct server *s, const struct kn__msg *m)
{
	switch (m->type) {
	case KN__MSG_JOB:
		s->job = *m;
		s->joined = true;
		s->release_info =
			kn__sync_traits(m->u.job.protocol)->release_info;
		if (m->u.job.workers == 0 ||
		    m->u.job.workers > KN_CONFIG_MAX_COUNT)
			fatal(s, -EPROTO, "a job without workers");
		return;
	case KN__MSG_TENSOR: {
		struct kn__tensor_desc *t;

		if (s->layout || m->u.tensor.index != s->ntable ||
		    s->ntable >= KN__CHUNK_MAX) {
			fatal(s, -EPROTO, "tensor table out of order");
			return;
		}
		t = realloc(s->table, (s->ntable + 1) * sizeof(*t));
		if (!t) {
			fatal(s, -ENOMEM, "out of memory");
			return;
		}
		s->table = t;
		memcpy(t[s->ntable].key, m->u.tensor.key, KN__KEY_MAX);
		t[s->ntable].dtype = m->u.tensor.dtype;
		t[s->ntable].len = m->u.tensor.len;
		s->ntable++;
		return;
	}
	case KN__MSG_TENSORS_END:
		on_table_end(s, m->u.tensors_end.count);
		return;
	case KN__MSG_MEMBER:
		if (!s->layout || m->u.member.rank >= s->layout->nworkers)
			return;
		if (!m->u.member.joined) {
			struct kn__chan *ch = s->workers[m->u.member.rank].ch;

			leave(s, m->u.member.rank);
			if (ch)
				kn__chan_close(ch);
		}
		return;
	case KN__MSG_PLAN:
		on_plan(s, m);
		return;
	case KN__MSG_RESTORE:
		on_restore(s, m->u.restore.version);
		return;
	case KN__MSG_RECOVER:
		on_recover(s);
		return;
	case KN__MSG_SHUTDOWN:
		s->done = true;
		return;
	case KN__MSG_ERROR:
		if (m->u.error.code == -EEXIST && !s->layout &&
		    kn__now() + RECONNECT_S < s->node.retry_until) {
			/* this rank's old connection is not gone yet */
			struct kn__chan *old = s->coord;

			kn__log(&s->node, "coordinator: %s: again in %.1f s",
				m->u.error.text, RECONNECT_S);
			s->coord = NULL;
			s->reconnect_at = kn__now() + RECONNECT_S;
			kn__chan_close(old);
			return;
		}
		kn__log(&s->node, "coordinator: %s", m->u.error.text);
		s->status = m->u.error.code;
		s->done = true;
		return;
	default:
		fatal(s, -EPROTO, "an unexpected message from the coordinator");
	}
}

static void on_message(struct kn__node *n, struct kn__chan *ch,
		       const struct kn__msg *m)
{
	struct server *s = srv_of(n);

	if (ch == s->coord)
		on_coord_msg(s, m);
	else
		on_worker_msg(s, ch, m);
}

static void on_open(struct kn__node *n, struct kn__chan *ch)
{
	struct server *s = srv_of(n);
	struct srv_worker *sw;
	struct kn__msg m = { .type = KN__MSG_HELLO };

	if (ch == s->coord) {
		m.u.hello.role = KN__ROLE_SERVER;
		m.u.hello.rank = s->cfg->rank;
		m.u.hello.addr = s->advertised;
		kn__chan_send(ch, &m);
		return;
	}
	if (ch->peer_role != KN__ROLE_WORKER || !s->layout ||
	    ch->peer_rank >= s->layout->nworkers) {
		kn__chan_send_error(ch, -EPERM,
				    "only workers of this job "
				    "connect to a server");
		kn__chan_close(ch);
		return;
	}
	sw = &s->workers[ch->peer_rank];
	if (sw->ch) {
		/*
		 * The coordinator refuses a second connection for a rank
		 * too: whoever holds the secret must not take over a
		 * live worker's slots.  A worker that reconnects has
		 * closed its old connection first.
		 */
		kn__chan_send_error(ch, -EEXIST,
				    "this rank is connected already: refused");
		kn__chan_close(ch);
		return;
	}
	free(sw->params);
	free(sw->grads);
	*sw = (struct srv_worker){
		.ch = ch,
		.params = calloc(s->layout->ntensors, sizeof(*sw->params)),
		.grads = calloc(s->layout->ntensors, sizeof(*sw->grads)),
	};
	if (!sw->params || !sw->grads)
		kn__chan_close(ch);
}

static void on_closed(struct kn__node *n, struct kn__chan *ch, int status)
{
	struct server *s = srv_of(n);

	if (ch == s->coord) {
		/*
		 * Never joined (unreachable for the whole start-up timeout,
		 * or closed before the JOB): a server that never served is a
		 * failure, as a worker that never joined is, so that srun or
		 * mpirun does not report it as a success.
		 */
		if (!s->done && !s->joined) {
			kn__log(n,
				"never joined a job: the coordinator at %s:%u "
				"%s%s: exiting with failure",
				s->cfg->coordinator.host,
				s->cfg->coordinator.port,
				status ? "was not reached within the start-up "
					 "timeout: "
				       : "closed the connection before the job",
				status ? strerror(-status) : "");
			s->status = status ? status : -ECONNRESET;
		} else if (!s->done) {
			/*
			 * Before the SHUTDOWN (which comes first on a normal
			 * end, on this same connection): the job did not end
			 * well.  Exiting non-zero also lets a supervisor start
			 * again a server that the coordinator took for hung
			 * (kanel train, kanel launch with --checkpoint-dir).
			 */
			kn__log(n, "the coordinator went away before the "
				   "job's end: exiting with failure");
			s->status = status ? status : -ECONNRESET;
		}
		s->coord = NULL;
		s->done = true;
		return;
	}
	/* a refused claim (a rank outside the job) is in no table */
	if (s->workers && ch->peer_role == KN__ROLE_WORKER &&
	    ch->peer_rank < s->layout->nworkers &&
	    s->workers[ch->peer_rank].ch == ch) {
		/* its slots are free: it is no member any more */
		s->workers[ch->peer_rank].ch = NULL;
		s->workers[ch->peer_rank].ready = false;
		pend_drop(s, ch->peer_rank);
		leave(s, ch->peer_rank);
	}
}

static const struct kn__node_ops server_ops = {
	.open = on_open,
	.message = on_message,
	.closed = on_closed,
	.imm = on_imm,
	.written = on_written,
};

static void server_free(struct server *s)
{
	for (uint32_t i = 0; i < s->nchunks; i++) {
		struct srv_chunk *ch = &s->chunks[i];

		kn__sync_rule_destroy(ch->rule);
		free(ch->master);
		free(ch->m);
		free(ch->v);
		free(ch->delivered);
		free(ch->announce);
		free(ch->pushes);
		free(ch->pushed);
		free(ch->queue);
		for (int o = 0; o < NOUT && !ch->direct; o++)
			free(ch->out[o]);
	}
	if (s->workers)
		for (uint32_t w = 0; w < s->layout->nworkers; w++) {
			free(s->workers[w].params);
			free(s->workers[w].grads);
			free(s->workers[w].pend);
		}
	for (int i = 0; i < CKPT_OPEN; i++)
		kn__ckpt_abort(s->ckpt[i]); /* unsealed: never a checkpoint */
	free(s->ckpt_desc);
	kn__auth_wipe(s->ckjob.key, sizeof(s->ckjob.key));
	kn__auth_wipe(s->ckjob.old_key, sizeof(s->ckjob.old_key));
	free(s->workers);
	free(s->chunks);
	free(s->writes);
	free(s->actions);
	free(s->srcs);
	free(s->weights);
	free(s->plan);
	free(s->slots);
	free(s->table);
	kn__layout_free(s->layout);
}

/* The smallest staleness that @q of the contributions do not exceed. */
static uint64_t stale_quantile(const struct srv_staleness *st, double q)
{
	uint64_t need = (uint64_t)(q * (double)st->count + 0.5), seen = 0;

	for (uint64_t t = 0; t < STALE_BUCKETS; t++) {
		seen += st->hist[t];
		if (seen >= need && seen)
			return t == STALE_BUCKETS - 1 ? st->max : t;
	}
	return st->max;
}

/*
 * --metrics: one JSON line appended in one write, so the lines of
 * several processes sharing the file do not interleave (O_APPEND, and
 * far below PIPE_BUF).  docs/configuration.md lists the keys.
 */
static void write_metrics(const struct server *s)
{
	const struct srv_staleness *st = &s->stale;
	char line[2048];
	int n, fd;

	n = snprintf(line, sizeof(line),
		     "{\"role\":\"server\",\"rank\":%u,\"status\":%d,"
		     "\"contributions\":%" PRIu64 ",\"staleness_mean\":%.4f,"
		     "\"staleness_p50\":%" PRIu64 ",\"staleness_p99\":%" PRIu64
		     ",\"staleness_max\":%" PRIu64 ",\"max_lead\":%" PRIu64
		     ",\"staleness_hist\":[",
		     s->cfg->rank, s->status, st->count,
		     st->count ? (double)st->sum / (double)st->count : 0.0,
		     stale_quantile(st, 0.5), stale_quantile(st, 0.99), st->max,
		     st->max_lead);
	for (int t = 0; t < STALE_BUCKETS && n > 0 && n < (int)sizeof(line);
	     t++)
		n += snprintf(line + n, sizeof(line) - (size_t)n, "%s%" PRIu64,
			      t ? "," : "", st->hist[t]);
	if (n > 0 && n < (int)sizeof(line) - 16) {
		size_t len = (size_t)n;

		len += (size_t)snprintf(line + len, sizeof(line) - len,
					"],\"stages\":{");
		len = kn__hist_json(line, len, sizeof(line), "gather",
				    &s->stages.gather);
		len = kn__hist_json(line, len, sizeof(line), "apply",
				    &s->stages.apply);
		len = kn__hist_json(line, len, sizeof(line), "turn",
				    &s->stages.turn);
		len = kn__hist_json(line, len, sizeof(line), "write",
				    &s->stages.write);
		if (len + 3 >= sizeof(line))
			return;
		len += (size_t)snprintf(line + len, sizeof(line) - len, "}}\n");
		n = (int)len;
	} else {
		return;
	}
	fd = open(s->cfg->metrics, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC,
		  0644);
	if (fd < 0 || write(fd, line, (size_t)n) != n)
		kn__log(&s->node, "cannot write the figures to %s: %s",
			s->cfg->metrics, strerror(errno));
	if (fd >= 0)
		close(fd);
}

/*
 * A heartbeat to the coordinator every quarter of the heartbeat timeout,
 * from the progress loop: a server that stops (SIGSTOP, a hang) stops
 * beating, and the coordinator names it instead of the job waiting on
 * it in silence.
 */
static void heartbeat(struct server *s)
{
	struct kn__msg m = { .type = KN__MSG_HEARTBEAT };
	double t = kn__now();

	if (!s->joined || !s->coord || !kn__chan_open(s->coord) ||
	    t - s->last_beat < s->cfg->heartbeat_timeout_ms / 4000.0)
		return;
	s->last_beat = t;
	kn__chan_send(s->coord, &m);
}

int kn__server_run(const struct kn__config *cfg, const uint8_t *secret,
		   size_t secret_len)
{
	struct server s = { .cfg = cfg };
	struct sockaddr_storage coord, self;
	socklen_t clen, slen;
	int ret;

	ret = kn__node_init(&s.node, kn__config_transport_name(cfg->transport),
			    KN__ROLE_SERVER, cfg->rank, secret, secret_len,
			    &server_ops, &s);
	if (ret)
		return ret;
	s.node.verbose = cfg->verbose;
	s.node.retry_until = kn__now() + cfg->startup_timeout_ms / 1000.0;
	ret = kn__config_resolve(&cfg->coordinator, &coord, &clen);
	if (ret) {
		kn__log(&s.node, "the coordinator's address %s:%u: %s",
			cfg->coordinator.host, cfg->coordinator.port,
			kn__config_resolve_strerror(&cfg->coordinator, ret));
		goto out;
	}
	ret = kn__config_resolve(&cfg->listen, &self, &slen);
	if (ret) {
		kn__log(&s.node, "--listen %s:%u: %s", cfg->listen.host,
			cfg->listen.port,
			kn__config_resolve_strerror(&cfg->listen, ret));
		goto out;
	}
	if (kn__addr_is_any(&self) && kn__addr_is_loopback(&coord))
		kn__addr_copy_ip(&self, &coord); /* a job on this machine */
	ret = kn__node_listen(&s.node, (struct sockaddr *)&self, slen);
	if (!ret)
		ret = kn__tp_listener_addr(s.node.listener, &s.advertised);
	if (!ret && kn__addr_is_any(&s.advertised))
		ret = kn__addr_local(&s.advertised);
	if (ret) {
		kn__log(&s.node, "cannot listen on %s:%u: %s", cfg->listen.host,
			cfg->listen.port, strerror(-ret));
		goto out;
	}
	ret = kn__node_connect(&s.node, (struct sockaddr *)&coord, clen,
			       KN__ROLE_COORDINATOR, 0, NULL, &s.coord);
	if (ret) {
		kn__log(&s.node, "cannot reach the coordinator at %s:%u: %s",
			cfg->coordinator.host, cfg->coordinator.port,
			strerror(-ret));
		goto out;
	}
	while (!s.done) {
		if (s.reconnect_at && kn__now() >= s.reconnect_at) {
			s.reconnect_at = 0;
			ret = kn__node_connect(&s.node, (struct sockaddr *)&coord,
					       clen, KN__ROLE_COORDINATOR, 0,
					       NULL, &s.coord);
			if (ret) {
				s.status = ret;
				break;
			}
		}
		flush_pending(&s);
		heartbeat(&s);
		ret = kn__node_step(&s.node, 100, -1);
		if (ret < 0) {
			s.status = ret;
			break;
		}
	}
	ret = s.status;
	if (cfg->metrics[0])
		write_metrics(&s);
out:
	kn__node_fini(&s.node);
	server_free(&s);
	return ret;
}
