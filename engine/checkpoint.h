/* SPDX-License-Identifier: Apache-2.0 */
/*
 * checkpoint.h - a server's checkpoints: its chunks' fp32 parameters,
 * optimizer state and step counts at one model version, in one file per
 * server and version (docs/reliability.md has the format).
 *
 * A file is written as NAME.tmp, fsync'ed, renamed to NAME and the
 * folder fsync'ed, so a crash leaves either the whole file or none; a
 * SHA-256 per chunk record and one over the header and table find a
 * torn or corrupted one, which is then passed over for an older one.
 * The two newest files of a server are kept.
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

#define KN__CKPT_FORMAT	 2 /* written; 1 is read too */
#define KN__CKPT_KEEP	 2 /* files kept per server */

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
 * Start the checkpoint of @version for server @rank of @nservers, whose
 * @nchunks chunks are @chunks (their idx and count; the arrays are
 * @narrays per chunk: 1 master, 2 and m, 3 and v).  0 or a negative
 * errno, the reason in @err.
 */
int kn__ckpt_open(const char *dir, uint32_t rank, uint32_t nservers,
		  uint64_t version, uint32_t narrays,
		  const struct kn__ckpt_chunk *chunks, uint32_t nchunks,
		  struct kn__ckpt **out, char *err, size_t errlen);
/* Write chunk @i (of the list given to open) as it is now. */
int kn__ckpt_put(struct kn__ckpt *c, uint32_t i,
		 const struct kn__ckpt_chunk *chunk);
/* Every chunk put: seal the file and make it the newest (0), or -errno.
 * Either way @c is freed. */
int kn__ckpt_close(struct kn__ckpt *c, char *err, size_t errlen);
/* Give up on @c (NULL-safe): its temporary file is removed. */
void kn__ckpt_abort(struct kn__ckpt *c);
/* The version @c is for. */
uint64_t kn__ckpt_version(const struct kn__ckpt *c);
/* Whether every chunk of @c has been put (it is ready to close). */
bool kn__ckpt_whole(const struct kn__ckpt *c);
/* The bytes of @c's records put so far, and the seconds the puts took. */
void kn__ckpt_cost(const struct kn__ckpt *c, uint64_t *bytes,
		   double *seconds);

/*
 * The versions of server @rank's checkpoints in @dir whose files are
 * whole and intact (each checksum verified), newest first, at most
 * @max; a damaged one is skipped with its reason logged through @log
 * (may be NULL).  0 and their number in @n, or a negative errno.
 */
int kn__ckpt_list(const char *dir, uint32_t rank, uint32_t nservers,
		  uint64_t *versions, uint32_t max, uint32_t *n,
		  void (*log)(void *arg, const char *line), void *arg);

/*
 * Remove server @rank's files of versions above @version: a job gone
 * back to @version writes them anew, and until it has they are not its
 * model.  Errors are ignored (a file left is still checked at a load).
 */
void kn__ckpt_remove_newer(const char *dir, uint32_t rank, uint64_t version);

/*
 * Load server @rank's checkpoint of @version into @chunks (idx and count
 * must match the file's, in order; the arrays the file holds are filled,
 * the others zeroed).  0, or a negative errno with the reason in @err
 * (-EINVAL: a file that does not match this job's layout, -EBADMSG: a
 * checksum that fails).
 */
int kn__ckpt_load(const char *dir, uint32_t rank, uint32_t nservers,
		  uint64_t version, struct kn__ckpt_chunk *chunks,
		  uint32_t nchunks, char *err, size_t errlen);

#endif /* KN_ENGINE_CHECKPOINT_H */
