/* SPDX-License-Identifier: Apache-2.0 */
/*
 * server_ckpt.c - a server's checkpoints (--checkpoint-dir, the files
 * of checkpoint.h): each chunk's state written into its version's file
 * as the chunk makes the version, the file sealed once every chunk of
 * ours has; at a restore the versions held intact offered to the
 * coordinator (CHECKPOINTS), the chosen one loaded (RESTORE) and every
 * chunk's rule started anew from it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "auth.h"
#include "roles.h"
#include "server_state.h"

/* ---- checkpoints ---- */

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

int kn__srv_setup_checkpoints(struct server *s)
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
void kn__srv_checkpoint(struct server *s, struct srv_chunk *ch,
			uint64_t version)
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
int kn__srv_offer_checkpoints(struct server *s)
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

/* RESTORE: load @version into every chunk and restart their rules; the
 * caller then takes the INITs that came meanwhile (their values are not
 * used: the file's are). */
int kn__srv_restore(struct server *s, uint64_t version)
{
	char err[512];
	struct kn__ckpt_chunk *st;
	int ret;

	if (!s->restoring) {
		srv_fatal(s, -EPROTO, "a RESTORE out of place");
		return -EPROTO;
	}
	st = calloc(s->nchunks + 1, sizeof(*st));
	if (!st) {
		srv_fatal(s, -ENOMEM, "out of memory");
		return -ENOMEM;
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
		srv_fatal(s, ret, "the checkpoint cannot be loaded");
		return ret;
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
			srv_fatal(s, -ENOMEM, "out of memory for a chunk rule");
			return -ENOMEM;
		}
	}
	return 0;
}

/*
 * A server was lost and the job goes back to a checkpoint: the workers
 * are let go (they come back for the restored model), the files being
 * filled are dropped, and the coordinator hears which versions we hold.
 */
void kn__srv_on_recover(struct server *s)
{
	if (!s->layout || s->restoring) {
		srv_fatal(s, -EPROTO, "a RECOVER out of place");
		return;
	}
	for (uint32_t w = 0; w < s->layout->nworkers; w++)
		if (s->workers[w].ch)
			kn__chan_close(s->workers[w].ch);
	for (int i = 0; i < CKPT_OPEN; i++) {
		kn__ckpt_abort(s->ckpt[i]);
		s->ckpt[i] = NULL;
	}
	if (kn__srv_offer_checkpoints(s))
		srv_fatal(s, -EINVAL, "no checkpoints to offer");
}
