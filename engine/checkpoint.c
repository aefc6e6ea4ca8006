/* SPDX-License-Identifier: Apache-2.0 */
/*
 * checkpoint.c - a server's checkpoint files (checkpoint.h): written in
 * pieces to NAME.tmp, sealed with an HMAC keyed by the job secret, made
 * the newest by rename; read back only from a trusted folder, as a
 * regular file of this job, after the seal and every digest check.
 *
 * The file, in the machine's byte order (a file from another order fails
 * its magic): a head, a table of one entry per chunk, then each chunk's
 * record (its arrays: master, then m, then v, fp32).  The head's seal
 * covers the head and the table, and the table holds each record's
 * SHA-256, so the seal vouches for every byte.  Formats 1 and 2 sealed
 * with plain SHA-256, which anyone can recompute: they are refused.
 *
 * Every file of the folder is reached through the folder's descriptor
 * (openat, renameat, unlinkat), so that the checks made on the folder
 * hold for what is read and written in it.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "auth.h"
#include "checkpoint.h"

#define MAGIC	  "KNCKPT1"
#define DIGEST	  32
#define IO_STEP	  (1u << 20) /* bytes hashed per read when verifying */
#define NAME_LEN  64	     /* "server-RANK.vVERSION.ckpt.tmp" */
#define KEY_LABEL "kanel-checkpoint-v1"

_Static_assert(KN__CKPT_KEY_LEN == KN_AUTH_MAC_LEN, "a key is one HMAC");

struct ckpt_head {
	char magic[8];
	uint32_t format, rank, nservers, nchunks;
	uint64_t version;
	uint32_t narrays, state;
	uint8_t seal[DIGEST]; /* HMAC of the head (this zeroed) and table */
};

struct ckpt_entry {
	uint32_t idx, count;
	uint64_t step, offset, bytes;
	uint8_t digest[DIGEST]; /* SHA-256 of the record */
	float round_w;
	uint32_t round_full; /* 0 or 1 */
};

_Static_assert(sizeof(struct ckpt_head) == 72, "the head is 72 bytes");
_Static_assert(sizeof(struct ckpt_entry) == 72, "an entry is 72 bytes");

struct kn__ckpt {
	struct kn__ckpt_job job; /* a copy: dir and chunks borrowed */
	char tmp[NAME_LEN], name[NAME_LEN];
	int dfd, fd;
	struct ckpt_head head;
	struct ckpt_entry *table;
	uint32_t put; /* chunks written */
	bool *done;
	uint64_t bytes; /* of the records put */
	double spent;	/* seconds in kn__ckpt_put */
};

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void seterr(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

static void file_name(char *buf, uint32_t rank, uint64_t version,
		      const char *suffix)
{
	/* at most 7 + 10 + 2 + 20 + 5 + 4 bytes and the NUL */
	snprintf(buf, NAME_LEN, "server-%u.v%020" PRIu64 ".ckpt%s", rank,
		 version, suffix);
}

static int pwrite_all(int fd, const void *buf, size_t n, uint64_t off)
{
	const char *p = buf;

	while (n) {
		ssize_t k = pwrite(fd, p, n, (off_t)off);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return k < 0 ? -errno : -EIO;
		p += k;
		n -= (size_t)k;
		off += (uint64_t)k;
	}
	return 0;
}

static int pread_all(int fd, void *buf, size_t n, uint64_t off)
{
	char *p = buf;

	while (n) {
		ssize_t k = pread(fd, p, n, (off_t)off);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return k < 0 ? -errno : -EBADMSG; /* cut short */
		p += k;
		n -= (size_t)k;
		off += (uint64_t)k;
	}
	return 0;
}

int kn__ckpt_key(const uint8_t *secret, size_t len,
		 uint8_t key[KN__CKPT_KEY_LEN])
{
	if (!secret || !len)
		return -EINVAL;
	return kn__auth_hmac(secret, len, KEY_LABEL, sizeof(KEY_LABEL) - 1,
			     key);
}

/*
 * The seal of a head (its seal field taken as zero) and its table of
 * nchunks entries, under @key.  0 or a negative errno.
 */
static int head_seal(const struct ckpt_head *h, const struct ckpt_entry *table,
		     const uint8_t *key, uint8_t *out)
{
	const size_t tbytes = (size_t)h->nchunks * sizeof(*table);
	uint8_t *buf = malloc(sizeof(*h) + tbytes);
	struct ckpt_head *z = (struct ckpt_head *)buf;
	int ret;

	if (!buf)
		return -ENOMEM;
	memcpy(buf, h, sizeof(*h));
	memset(z->seal, 0, sizeof(z->seal));
	memcpy(buf + sizeof(*h), table, tbytes);
	ret = kn__auth_hmac(key, KN__CKPT_KEY_LEN, buf, sizeof(*h) + tbytes,
			    out);
	free(buf);
	return ret;
}

/* What @st is, for a line that says why it is not read. */
static const char *kind_of(const struct stat *st)
{
	if (S_ISDIR(st->st_mode))
		return "a directory";
	if (S_ISFIFO(st->st_mode))
		return "a FIFO";
	if (S_ISSOCK(st->st_mode))
		return "a socket";
	if (S_ISCHR(st->st_mode) || S_ISBLK(st->st_mode))
		return "a device";
	return "not a regular file";
}

/*
 * Owned by us or root, as ssh wants of what it trusts: 0, or -EPERM with
 * "@who owned by uid ..." in @err and @fd closed.
 */
static int owner_check(const struct stat *st, int fd, const char *who,
		       char *err, size_t errlen)
{
	if (st->st_uid == geteuid() || st->st_uid == 0)
		return 0;
	seterr(err, errlen,
	       "%s owned by uid %u, not by this user (uid %u) or root", who,
	       (unsigned int)st->st_uid, (unsigned int)geteuid());
	close(fd);
	return -EPERM;
}

/*
 * Open @dir for the files in it, once it has passed ssh's checks: a
 * directory, owned by this user or root, not group- or world-writable.
 * Its descriptor, or a negative errno with one line in @err.
 */
static int dir_open(const char *dir, char *err, size_t errlen)
{
	char what[PATH_MAX + 32];
	struct stat st;
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), e;

	if (fd < 0 || fstat(fd, &st)) {
		e = errno;
		seterr(err, errlen, "checkpoint folder %s: %s", dir,
		       strerror(e));
		if (fd >= 0)
			close(fd);
		return -e;
	}
	snprintf(what, sizeof(what), "checkpoint folder %s is", dir);
	e = owner_check(&st, fd, what, err, errlen);
	if (e)
		return e;
	if (st.st_mode & (S_IWGRP | S_IWOTH)) {
		bool g = st.st_mode & S_IWGRP, o = st.st_mode & S_IWOTH;
		const char *who = g && o ? "group- and world" : "group";
		const char *fix = g && o ? "go-w" : "g-w";

		if (!g) {
			who = "world";
			fix = "o-w";
		}
		seterr(err, errlen,
		       "checkpoint folder %s is %s-writable; chmod %s %s", dir,
		       who, fix, dir);
		close(fd);
		return -EPERM;
	}
	return fd;
}

int kn__ckpt_dir_check(const char *dir, char *err, size_t errlen)
{
	int fd = dir_open(dir, err, errlen), ret = 0;

	if (fd < 0)
		return fd;
	if (faccessat(fd, ".", W_OK | X_OK, 0)) {
		ret = -errno;
		seterr(err, errlen, "checkpoint folder %s: %s", dir,
		       strerror(errno));
	}
	close(fd);
	return ret;
}

/*
 * Open @name in the folder @dfd for reading: never through a link, never
 * blocking (a FIFO opens at once), and only a regular file owned by us
 * or root that group and others cannot write.  The descriptor and the
 * file's size, or a negative errno with one line in @err.
 */
static int open_file(const struct kn__ckpt_job *job, int dfd, const char *name,
		     off_t *size, char *err, size_t errlen)
{
	char who[PATH_MAX + NAME_LEN + 8];
	struct stat st;
	int fd = openat(dfd, name,
			O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC),
	    e;

	if (fd < 0 || fstat(fd, &st)) {
		e = errno;
		if (e == ELOOP)
			seterr(err, errlen,
			       "%s/%s: a symbolic link, not "
			       "followed",
			       job->dir, name);
		else
			seterr(err, errlen, "%s/%s: %s", job->dir, name,
			       strerror(e));
		if (fd >= 0)
			close(fd);
		return -e;
	}
	if (!S_ISREG(st.st_mode)) {
		seterr(err, errlen, "%s/%s: %s, not read", job->dir, name,
		       kind_of(&st));
		close(fd);
		return -EPERM;
	}
	snprintf(who, sizeof(who), "%s/%s:", job->dir, name);
	e = owner_check(&st, fd, who, err, errlen);
	if (e)
		return e;
	if (st.st_mode & (S_IWGRP | S_IWOTH)) {
		seterr(err, errlen,
		       "%s/%s: group- or world-writable (mode "
		       "%04o); chmod go-w it",
		       job->dir, name, (unsigned int)(st.st_mode & 07777));
		close(fd);
		return -EPERM;
	}
	*size = st.st_size;
	return fd;
}

static const char *state_name(uint32_t state)
{
	switch (state) {
	case KN__CKPT_PLAIN:
		return "none (SGD)";
	case KN__CKPT_MOMENTUM:
		return "momentum";
	case KN__CKPT_ADAM:
		return "Adam";
	case KN__CKPT_OUTER_MOMENTUM:
		return "the outer update's momentum";
	default:
		return "unknown";
	}
}

/* Does @h's seal check under the job's key, or the old one it accepts? */
static int seal_ok(const struct kn__ckpt_job *job, const struct ckpt_head *h,
		   const struct ckpt_entry *t)
{
	uint8_t mac[DIGEST];
	int ret = head_seal(h, t, job->key, mac);

	if (ret)
		return ret;
	if (!CRYPTO_memcmp(mac, h->seal, DIGEST))
		return 0;
	if (job->has_old_key) {
		ret = head_seal(h, t, job->old_key, mac);
		if (ret)
			return ret;
		if (!CRYPTO_memcmp(mac, h->seal, DIGEST))
			return 0;
	}
	return -EBADMSG;
}

/*
 * Open @job's file of @version in @dfd and check all but its records:
 * a trusted regular file, a head of format 3, this job's server, seal,
 * layout and optimizer, records in place.  The fd and the table
 * (malloc'ed) on success, or a negative errno with the reason.
 */
static int open_checked(const struct kn__ckpt_job *job, int dfd,
			uint64_t version, struct ckpt_head *h,
			struct ckpt_entry **table, char *err, size_t errlen)
{
	char name[NAME_LEN];
	struct ckpt_entry *t = NULL;
	uint64_t off;
	off_t size = 0;
	int fd, ret;

	file_name(name, job->rank, version, "");
	if (version > KN__CKPT_VERSION_MAX) {
		seterr(err, errlen,
		       "%s/%s: version beyond 2^63 - 1: a job "
		       "going on from it would wrap its version "
		       "counter",
		       job->dir, name);
		return -EOVERFLOW;
	}
	fd = open_file(job, dfd, name, &size, err, errlen);
	if (fd < 0)
		return fd;
	ret = pread_all(fd, h, sizeof(*h), 0);
	if (ret || memcmp(h->magic, MAGIC, sizeof(MAGIC))) {
		seterr(err, errlen, "%s/%s: not a Kanel checkpoint", job->dir,
		       name);
		ret = -EBADMSG;
		goto fail;
	}
	if (h->format == 1 || h->format == 2) {
		seterr(err, errlen,
		       "%s/%s: format %u, sealed without the job "
		       "secret (before keyed seals): not trusted",
		       job->dir, name, h->format);
		ret = -EBADMSG;
		goto fail;
	}
	if (h->format != KN__CKPT_FORMAT || h->version != version) {
		seterr(err, errlen,
		       "%s/%s: not a Kanel checkpoint of format "
		       "%d and version %" PRIu64,
		       job->dir, name, KN__CKPT_FORMAT, version);
		ret = -EBADMSG;
		goto fail;
	}
	if (h->rank != job->rank || h->nservers != job->nservers ||
	    h->nchunks > (uint64_t)size / sizeof(*t)) {
		seterr(err, errlen,
		       "%s/%s: written by server %u of %u, with %u chunks: not "
		       "this job's server %u of %u",
		       job->dir, name, h->rank, h->nservers, h->nchunks,
		       job->rank, job->nservers);
		ret = -EINVAL;
		goto fail;
	}
	t = malloc((h->nchunks ? h->nchunks : 1) * sizeof(*t));
	if (!t) {
		ret = -ENOMEM;
		goto fail;
	}
	ret = pread_all(fd, t, (size_t)h->nchunks * sizeof(*t), sizeof(*h));
	if (!ret)
		ret = seal_ok(job, h, t);
	if (ret) {
		seterr(err, errlen,
		       "%s/%s: its seal does not check under this "
		       "job's secret (another job's file, or "
		       "altered)",
		       job->dir, name);
		ret = ret == -ENOMEM ? ret : -EBADMSG;
		goto fail;
	}
	/* sealed by a holder of the key: now its fields can be compared */
	if (h->nchunks != job->nchunks) {
		seterr(err, errlen,
		       "%s/%s: another model: %u chunks where "
		       "this server has %u",
		       job->dir, name, h->nchunks, job->nchunks);
		ret = -EINVAL;
		goto fail;
	}
	for (uint32_t i = 0; i < h->nchunks; i++) {
		const struct kn__ckpt_chunk *c = &job->chunks[i];

		if (t[i].idx != c->idx || t[i].count != c->count) {
			seterr(err, errlen,
			       "%s/%s: another model: chunk %u "
			       "of %u values where this job has "
			       "chunk %u of %u",
			       job->dir, name, t[i].idx, t[i].count, c->idx,
			       c->count);
			ret = -EINVAL;
			goto fail;
		}
	}
	if (h->state != job->state || h->narrays != job->narrays) {
		seterr(err, errlen,
		       "%s/%s: holds the state of optimizer %s "
		       "(%u arrays a chunk); this job's is %s "
		       "(%u)",
		       job->dir, name, state_name(h->state), h->narrays,
		       state_name(job->state), job->narrays);
		ret = -EINVAL;
		goto fail;
	}
	off = sizeof(*h) + (uint64_t)h->nchunks * sizeof(*t);
	for (uint32_t i = 0; i < h->nchunks; i++) {
		if (t[i].offset != off || t[i].bytes != (uint64_t)t[i].count *
								sizeof(float) *
								h->narrays) {
			seterr(err, errlen,
			       "%s/%s: chunk %u's record is out "
			       "of place",
			       job->dir, name, t[i].idx);
			ret = -EBADMSG;
			goto fail;
		}
		off += t[i].bytes;
	}
	if ((uint64_t)size != off) {
		seterr(err, errlen,
		       "%s/%s: %lld bytes where %" PRIu64 " are due", job->dir,
		       name, (long long)size, off);
		ret = -EBADMSG;
		goto fail;
	}
	*table = t;
	return fd;
fail:
	free(t);
	close(fd);
	return ret;
}

/* The arrays of @c in record order. */
static void arrays_of(const struct kn__ckpt_chunk *c, float **out)
{
	out[0] = c->master;
	out[1] = c->m;
	out[2] = c->v;
}

/*
 * Create @name in @dfd for writing, anew: O_EXCL and O_NOFOLLOW, so a
 * link planted at the name is never followed and its target never
 * written.  A name that exists (a crash's leftover, or planted) is
 * removed, itself and not what it may point to, and created again once.
 */
static int create_file(int dfd, const char *name)
{
	const int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
	int fd = openat(dfd, name, flags, 0600);

	if (fd < 0 && errno == EEXIST && !unlinkat(dfd, name, 0))
		fd = openat(dfd, name, flags, 0600);
	return fd < 0 ? -errno : fd;
}

static void job_fini(struct kn__ckpt_job *job)
{
	kn__auth_wipe(job->key, sizeof(job->key));
	kn__auth_wipe(job->old_key, sizeof(job->old_key));
}

int kn__ckpt_open(const struct kn__ckpt_job *job, uint64_t version,
		  struct kn__ckpt **out, char *err, size_t errlen)
{
	const uint32_t nchunks = job->nchunks;
	struct kn__ckpt *c;
	uint64_t off;
	int ret;

	if (version > KN__CKPT_VERSION_MAX) {
		seterr(err, errlen, "version %" PRIu64 " is beyond 2^63 - 1",
		       version);
		return -EOVERFLOW;
	}
	if (job->narrays < 1 || job->narrays > 3)
		return -EINVAL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->job = *job;
	c->job.log = NULL;
	c->fd = c->dfd = -1;
	c->table = calloc(nchunks ? nchunks : 1, sizeof(*c->table));
	c->done = calloc(nchunks ? nchunks : 1, sizeof(*c->done));
	if (!c->table || !c->done) {
		ret = -ENOMEM;
		goto fail;
	}
	file_name(c->name, job->rank, version, "");
	file_name(c->tmp, job->rank, version, ".tmp");
	memcpy(c->head.magic, MAGIC, sizeof(MAGIC));
	c->head.format = KN__CKPT_FORMAT;
	c->head.rank = job->rank;
	c->head.nservers = job->nservers;
	c->head.nchunks = nchunks;
	c->head.version = version;
	c->head.narrays = job->narrays;
	c->head.state = job->state;
	off = sizeof(c->head) + (uint64_t)nchunks * sizeof(*c->table);
	for (uint32_t i = 0; i < nchunks; i++) {
		c->table[i].idx = job->chunks[i].idx;
		c->table[i].count = job->chunks[i].count;
		c->table[i].offset = off;
		c->table[i].bytes = (uint64_t)job->chunks[i].count *
				    sizeof(float) * job->narrays;
		off += c->table[i].bytes;
	}
	c->dfd = dir_open(job->dir, err, errlen);
	if (c->dfd < 0) {
		ret = c->dfd;
		goto fail;
	}
	c->fd = create_file(c->dfd, c->tmp);
	if (c->fd < 0) {
		ret = c->fd;
		seterr(err, errlen, "%s/%s: %s", job->dir, c->tmp,
		       strerror(-ret));
		goto fail;
	}
	*out = c;
	return 0;
fail:
	kn__ckpt_abort(c);
	return ret;
}

int kn__ckpt_put(struct kn__ckpt *c, uint32_t i,
		 const struct kn__ckpt_chunk *chunk)
{
	struct ckpt_entry *e;
	EVP_MD_CTX *ctx;
	float *arr[3];
	uint64_t off;
	size_t bytes;
	double t0;
	int ret = 0;

	if (i >= c->head.nchunks || c->done[i] ||
	    chunk->count != c->table[i].count)
		return -EINVAL;
	arrays_of(chunk, arr);
	e = &c->table[i];
	off = e->offset;
	bytes = (size_t)e->count * sizeof(float);
	t0 = now_s();
	ctx = EVP_MD_CTX_new();
	if (!ctx || !EVP_DigestInit_ex(ctx, EVP_sha256(), NULL))
		ret = -ENOMEM;
	for (uint32_t a = 0; !ret && a < c->head.narrays; a++, off += bytes) {
		if (!arr[a]) {
			ret = -EINVAL;
			break;
		}
		ret = pwrite_all(c->fd, arr[a], bytes, off);
		if (!ret && !EVP_DigestUpdate(ctx, arr[a], bytes))
			ret = -ENOMEM;
	}
	if (!ret && !EVP_DigestFinal_ex(ctx, e->digest, NULL))
		ret = -ENOMEM;
	EVP_MD_CTX_free(ctx);
	c->spent += now_s() - t0;
	if (ret)
		return ret;
	e->step = chunk->step;
	e->round_w = chunk->round_w;
	e->round_full = chunk->round_full;
	c->done[i] = true;
	c->put++;
	c->bytes += e->bytes;
	return 0;
}

void kn__ckpt_cost(const struct kn__ckpt *c, uint64_t *bytes, double *seconds)
{
	*bytes = c->bytes;
	*seconds = c->spent;
}

uint64_t kn__ckpt_version(const struct kn__ckpt *c)
{
	return c->head.version;
}

bool kn__ckpt_whole(const struct kn__ckpt *c)
{
	return c->put == c->head.nchunks;
}

void kn__ckpt_abort(struct kn__ckpt *c)
{
	if (!c)
		return;
	if (c->fd >= 0) {
		close(c->fd);
		unlinkat(c->dfd, c->tmp, 0);
	}
	if (c->dfd >= 0)
		close(c->dfd);
	job_fini(&c->job);
	free(c->table);
	free(c->done);
	free(c);
}

static int cmp_desc(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x < y) - (x > y);
}

/* The versions named by @rank's file names in @dfd (any state), newest
 * first; a malloc'ed array in @out.  Their number, or a negative errno. */
static int scan(int dfd, uint32_t rank, uint64_t **out)
{
	char prefix[32];
	size_t plen, cap = 16, n = 0;
	uint64_t *v = malloc(cap * sizeof(*v));
	struct dirent *d;
	int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *dp = fd >= 0 ? fdopendir(fd) : NULL;

	if (!dp || !v) {
		int ret = !v ? -ENOMEM : -errno;

		if (dp)
			closedir(dp);
		else if (fd >= 0)
			close(fd);
		free(v);
		return ret;
	}
	plen = (size_t)snprintf(prefix, sizeof(prefix), "server-%u.v", rank);
	while ((d = readdir(dp))) {
		const char *p = d->d_name;
		char *end;
		unsigned long long x;

		if (strncmp(p, prefix, plen))
			continue;
		p += plen;
		if (strlen(p) != 20 + 5 || strcmp(p + 20, ".ckpt"))
			continue;
		errno = 0;
		x = strtoull(p, &end, 10);
		if (errno || end != p + 20)
			continue;
		if (n == cap) {
			uint64_t *g = realloc(v, 2 * cap * sizeof(*v));

			if (!g)
				continue;
			v = g;
			cap *= 2;
		}
		v[n++] = x;
	}
	closedir(dp);
	qsort(v, n, sizeof(*v), cmp_desc);
	*out = v;
	return (int)n;
}

/* Whether @version's file in @dfd is @job's (all but its records). */
static bool is_ours(const struct kn__ckpt_job *job, int dfd, uint64_t version)
{
	struct ckpt_head h;
	struct ckpt_entry *t;
	int fd = open_checked(job, dfd, version, &h, &t, NULL, 0);

	if (fd < 0)
		return false;
	close(fd);
	free(t);
	return true;
}

/* Remove @job's files but the newest KN__CKPT_KEEP; others' stay. */
static void prune(const struct kn__ckpt_job *job, int dfd)
{
	char name[NAME_LEN];
	uint64_t *v;
	int n = scan(dfd, job->rank, &v), kept = 0;

	for (int i = 0; i < n; i++) {
		if (!is_ours(job, dfd, v[i]) || kept++ < KN__CKPT_KEEP)
			continue;
		file_name(name, job->rank, v[i], "");
		unlinkat(dfd, name, 0);
	}
	if (n >= 0)
		free(v);
}

void kn__ckpt_remove_newer(const struct kn__ckpt_job *job, uint64_t version)
{
	char name[NAME_LEN];
	uint64_t *v;
	int dfd = dir_open(job->dir, NULL, 0), n;

	if (dfd < 0)
		return;
	n = scan(dfd, job->rank, &v);
	for (int i = 0; i < n && v[i] > version; i++) {
		if (!is_ours(job, dfd, v[i]))
			continue;
		file_name(name, job->rank, v[i], "");
		unlinkat(dfd, name, 0);
	}
	if (n >= 0)
		free(v);
	close(dfd);
}

int kn__ckpt_close(struct kn__ckpt *c, char *err, size_t errlen)
{
	const size_t tbytes = (size_t)c->head.nchunks * sizeof(*c->table);
	int ret = 0;

	if (c->put != c->head.nchunks) {
		seterr(err, errlen, "%s/%s: %u of %u chunks written",
		       c->job.dir, c->tmp, c->put, c->head.nchunks);
		kn__ckpt_abort(c);
		return -EINVAL;
	}
	ret = head_seal(&c->head, c->table, c->job.key, c->head.seal);
	if (!ret)
		ret = pwrite_all(c->fd, c->table, tbytes, sizeof(c->head));
	if (!ret)
		ret = pwrite_all(c->fd, &c->head, sizeof(c->head), 0);
	if (!ret && fsync(c->fd))
		ret = -errno;
	if (!ret && renameat(c->dfd, c->tmp, c->dfd, c->name))
		ret = -errno;
	if (ret) {
		seterr(err, errlen, "%s/%s: %s", c->job.dir, c->tmp,
		       strerror(-ret));
		kn__ckpt_abort(c);
		return ret;
	}
	close(c->fd);
	c->fd = -1;
	/* the rename itself is durable once the folder is */
	fsync(c->dfd);
	prune(&c->job, c->dfd);
	kn__ckpt_abort(c);
	return 0;
}

/*
 * Read record @e of @fd into @dst (its arrays, NULL: read and hashed
 * only) and check its digest: 0 or -EBADMSG.
 */
static int read_record(int fd, const struct ckpt_entry *e, uint32_t narrays,
		       float *const *dst)
{
	const size_t bytes = (size_t)e->count * sizeof(float);
	uint8_t digest[DIGEST];
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	char *scratch = NULL;
	int ret =
		ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) ? 0 : -ENOMEM;

	for (uint32_t a = 0; !ret && a < narrays; a++) {
		uint64_t off = e->offset + a * (uint64_t)bytes;

		for (size_t done = 0; !ret && done < bytes;) {
			size_t k =
				bytes - done < IO_STEP ? bytes - done : IO_STEP;
			char *p;

			if (dst[a]) {
				p = (char *)dst[a] + done;
			} else {
				if (!scratch && !(scratch = malloc(IO_STEP))) {
					ret = -ENOMEM;
					break;
				}
				p = scratch;
			}
			ret = pread_all(fd, p, k, off + done);
			if (!ret && !EVP_DigestUpdate(ctx, p, k))
				ret = -ENOMEM;
			done += k;
		}
	}
	if (!ret && (!EVP_DigestFinal_ex(ctx, digest, NULL) ||
		     memcmp(digest, e->digest, DIGEST)))
		ret = -EBADMSG;
	EVP_MD_CTX_free(ctx);
	free(scratch);
	return ret;
}

int kn__ckpt_list(const struct kn__ckpt_job *job, uint64_t *versions,
		  uint32_t max, uint32_t *n)
{
	char err[PATH_MAX + 256] = "";
	uint32_t k = 0, refused = 0;
	uint64_t *v;
	int dfd = dir_open(job->dir, err, sizeof(err)), found;

	if (dfd < 0) {
		if (job->log)
			job->log(job->arg, err);
		return dfd;
	}
	found = scan(dfd, job->rank, &v);
	if (found < 0) {
		close(dfd);
		return found;
	}
	for (int i = 0; i < found && k < max; i++) {
		float *none[3] = { NULL, NULL, NULL };
		struct ckpt_head h;
		struct ckpt_entry *t;
		int fd = open_checked(job, dfd, v[i], &h, &t, err, sizeof(err));
		int ret = fd < 0 ? fd : 0;

		for (uint32_t c = 0; !ret && c < h.nchunks; c++) {
			ret = read_record(fd, &t[c], h.narrays, none);
			if (ret == -EBADMSG)
				snprintf(err, sizeof(err),
					 "%s/server-%u.v%020" PRIu64 ".ckpt: "
					 "chunk %u's record fails its checksum",
					 job->dir, job->rank, v[i], t[c].idx);
		}
		if (fd >= 0) {
			close(fd);
			free(t);
		}
		if (!ret)
			versions[k++] = v[i];
		else if (++refused <= KN__CKPT_LOG_MAX && job->log)
			job->log(job->arg, err);
	}
	if (refused > KN__CKPT_LOG_MAX && job->log) {
		snprintf(err, sizeof(err),
			 "%u more files of server %u in %s skipped (not named "
			 "one by one)",
			 refused - KN__CKPT_LOG_MAX, job->rank, job->dir);
		job->log(job->arg, err);
	}
	free(v);
	close(dfd);
	*n = k;
	return 0;
}

int kn__ckpt_load(const struct kn__ckpt_job *job, uint64_t version,
		  struct kn__ckpt_chunk *chunks, char *err, size_t errlen)
{
	struct ckpt_head h;
	struct ckpt_entry *t = NULL;
	int dfd = dir_open(job->dir, err, errlen), fd, ret;

	if (dfd < 0)
		return dfd;
	fd = open_checked(job, dfd, version, &h, &t, err, errlen);
	ret = fd < 0 ? fd : 0;
	for (uint32_t i = 0; !ret && i < job->nchunks; i++) {
		struct kn__ckpt_chunk *c = &chunks[i];
		float *dst[3];
		size_t bytes = (size_t)c->count * sizeof(float);

		if (t[i].idx != c->idx || t[i].count != c->count) {
			seterr(err, errlen,
			       "version %" PRIu64 ": chunk %u of "
			       "%u values where this job has "
			       "chunk %u of %u",
			       version, t[i].idx, t[i].count, c->idx, c->count);
			ret = -EINVAL;
			break;
		}
		arrays_of(c, dst);
		for (uint32_t a = h.narrays; a < 3; a++)
			if (dst[a])
				memset(dst[a], 0, bytes);
		for (uint32_t a = 0; a < h.narrays; a++)
			if (!dst[a]) {
				ret = -EINVAL; /* the job keeps less state */
				seterr(err, errlen,
				       "version %" PRIu64 " keeps "
				       "optimizer state this job "
				       "does not have",
				       version);
			}
		if (!ret)
			ret = read_record(fd, &t[i], h.narrays, dst);
		if (ret == -EBADMSG)
			seterr(err, errlen,
			       "version %" PRIu64 ": chunk %u's "
			       "record fails its checksum",
			       version, t[i].idx);
		c->step = t[i].step;
		c->round_w = t[i].round_w;
		c->round_full = t[i].round_full != 0;
	}
	if (fd >= 0) {
		close(fd);
		free(t);
	}
	close(dfd);
	return ret;
}
