/* SPDX-License-Identifier: Apache-2.0 */
/*
 * checkpoint.h - a server's checkpoints: its chunks' fp32 parameters,
 * optimizer state and step counts at one model version, in one file per
 * server and version (docs/reliability.md has the format).
 *
 * A file is written as NAME.tmp (created anew, never through a link),
 * fsync'ed, renamed to NAME and the folder fsync'ed, so a crash leaves
 * either the whole file or none.  Its head and table are sealed with an
 * HMAC-SHA256 keyed by the job secret; the table holds each record's
 * SHA-256.  A torn, corrupted, foreign or unsealed file is passed over
 * for an older one.  The two newest files of this job's server are kept.
 *
 * The folder is trusted only as far as ssh trusts a key folder: it must
 * be a directory owned by this user (or root) that group and others
 * cannot write; a file is read only if it is a regular file owned so
 * and not group- or world-writable, opened without following a link and
 * without blocking.  Every file read is checked against this job: its
 * server rank and count, every chunk's index and length, the optimizer
 * whose state it holds, the seal.
 *
 * A checkpoint is written piece by piece, as the chunks reach its
 * version: kn__ckpt_open, kn__ckpt_put per chunk (the data is copied to
 * the file at once, the chunk moves on), kn__ckpt_close.  Nothing here
 * touches the network; everything blocks on file I/O only.
 */
#ifndef KN_ENGINE_CHECKPOINT_H
#define KN_ENGINE_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KN__CKPT_FORMAT	 3 /* written and read; 1 and 2 were unkeyed */
#define KN__CKPT_KEEP	 2 /* files kept per server */
#define KN__CKPT_KEY_LEN 32
/* The highest version a file may carry: a job restored from it counts on
 * from there, and its counter must not wrap. */
#define KN__CKPT_VERSION_MAX (UINT64_MAX >> 1)
/* Files refused in one listing that are named one by one; the rest are
 * counted in one line. */
#define KN__CKPT_LOG_MAX 5

/* The servers' optimizer state a file holds beside the master copy. */
enum kn__ckpt_state {
	KN__CKPT_PLAIN = 1,	     /* none: SGD, or the outer update (ESP,
				      * PSP) without momentum */
	KN__CKPT_MOMENTUM = 2,	     /* the velocity */
	KN__CKPT_ADAM = 3,	     /* the first and second moments */
	KN__CKPT_OUTER_MOMENTUM = 4, /* the outer update's velocity */
};

/* One chunk's state: what is written, and where a restore puts it. */
struct kn__ckpt_chunk {
	uint32_t idx;	/* global chunk index */
	uint32_t count; /* elements */
	uint64_t step;	/* Adam's step count */
	/* momentum once per round (ASP, SSP, CGP): the shares applied
	 * since the velocity turned, and whether they weigh a round */
	float round_w;
	bool round_full;
	float *master, *m, *v; /* count each; m, v NULL when unused */
};

struct kn__ckpt;

/*
 * The job a server's files belong to: where they are, what they must
 * match, the key that seals them.  Filled by the caller, who keeps @dir
 * and @chunks (their idx and count) alive while it is in use; the
 * functions below copy the rest.
 */
struct kn__ckpt_job {
	const char *dir;
	uint32_t rank, nservers;
	uint32_t state;	  /* enum kn__ckpt_state */
	uint32_t narrays; /* per chunk: 1 master, 2 and m, 3 and v */
	const struct kn__ckpt_chunk *chunks;
	uint32_t nchunks;
	uint8_t key[KN__CKPT_KEY_LEN]; /* kn__ckpt_key of the job secret */
	/* read only: files sealed with this key are accepted too (the
	 * secret of the job that wrote them, a restore across secrets) */
	bool has_old_key;
	uint8_t old_key[KN__CKPT_KEY_LEN];
	/* where a refused file's line goes (NULL: nowhere) */
	void (*log)(void *arg, const char *line);
	void *arg;
};

/* The sealing key of @secret (@len bytes): HMAC-SHA256(secret,
 * "kanel-checkpoint-v1").  0, -EINVAL (no secret) or -EIO. */
int kn__ckpt_key(const uint8_t *secret, size_t len,
		 uint8_t key[KN__CKPT_KEY_LEN]);

/*
 * Is @dir a folder this user may trust and write?  0, or a negative
 * errno with one line in @err: -ENOTDIR (not a directory), -EPERM (owned
 * by another user, or group- or world-writable: the chmod that fixes
 * it), or open's or access's errno.
 */
int kn__ckpt_dir_check(const char *dir, char *err, size_t errlen);

/*
 * Start @job's checkpoint of @version (at most KN__CKPT_VERSION_MAX, else
 * -EOVERFLOW).  0 or a negative errno, the reason in @err.
 */
int kn__ckpt_open(const struct kn__ckpt_job *job, uint64_t version,
		  struct kn__ckpt **out, char *err, size_t errlen);
/* Write chunk @i (of the job's list) as it is now. */
int kn__ckpt_put(struct kn__ckpt *c, uint32_t i,
		 const struct kn__ckpt_chunk *chunk);
/* Every chunk put: seal the file, make it the newest and remove this
 * job's files but the newest KN__CKPT_KEEP (0), or -errno.  Either way
 * @c is freed. */
int kn__ckpt_close(struct kn__ckpt *c, char *err, size_t errlen);
/* Give up on @c (NULL-safe): its temporary file is removed. */
void kn__ckpt_abort(struct kn__ckpt *c);
/* The version @c is for. */
uint64_t kn__ckpt_version(const struct kn__ckpt *c);
/* Whether every chunk of @c has been put (it is ready to close). */
bool kn__ckpt_whole(const struct kn__ckpt *c);
/* The bytes of @c's records put so far, and the seconds the puts took. */
void kn__ckpt_cost(const struct kn__ckpt *c, uint64_t *bytes, double *seconds);

/*
 * The versions of @job's checkpoints whose files are this job's, whole
 * and intact (seal and every checksum verified), newest first, at most
 * @max.  A file refused is one line through job->log naming it and the
 * reason, for the first KN__CKPT_LOG_MAX; then one line counts the rest.
 * 0 and their number in @n, or a negative errno (the folder).
 */
int kn__ckpt_list(const struct kn__ckpt_job *job, uint64_t *versions,
		  uint32_t max, uint32_t *n);

/*
 * Remove @job's files of versions above @version: a job gone back to
 * @version writes them anew, and until it has they are not its model.
 * Files that are not this job's are left alone.  Errors are ignored (a
 * file left is still checked at a load).
 */
void kn__ckpt_remove_newer(const struct kn__ckpt_job *job, uint64_t version);

/*
 * Load @job's checkpoint of @version into @chunks (job->nchunks of them,
 * idx and count as the job's; the arrays the file holds are filled, the
 * others zeroed).  0, or a negative errno with the reason in @err
 * (-EINVAL: a file of another layout or optimizer, -EBADMSG: a checksum
 * or seal that fails, -EPERM: a file not to be trusted).
 */
int kn__ckpt_load(const struct kn__ckpt_job *job, uint64_t version,
		  struct kn__ckpt_chunk *chunks, char *err, size_t errlen);

#endif /* KN_ENGINE_CHECKPOINT_H */
