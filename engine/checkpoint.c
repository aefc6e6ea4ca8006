/* SPDX-License-Identifier: Apache-2.0 */
/*
 * checkpoint.c - a server's checkpoint files (checkpoint.h): written in
 * pieces to NAME.tmp, sealed with SHA-256 digests, made the newest by
 * rename; read back only after every digest checks.
 *
 * The file, in the machine's byte order (a file from another order fails
 * its magic): a head, a table of one entry per chunk, then each chunk's
 * record (its arrays: master, then m, then v, fp32).  Format 1's entries
 * lack the round position (its last 8 bytes); such a file loads with
 * none (a round starting afresh).
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
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "checkpoint.h"

#define MAGIC	"KNCKPT1"
#define DIGEST	32
#define IO_STEP (1u << 20) /* bytes hashed per read when verifying */

struct ckpt_head {
	char magic[8];
	uint32_t format, rank, nservers, nchunks;
	uint64_t version;
	uint32_t narrays, pad;
	uint8_t digest[DIGEST]; /* of the head (this zeroed) and the table */
};

struct ckpt_entry {
	uint32_t idx, count;
	uint64_t step, offset, bytes;
	uint8_t digest[DIGEST]; /* of the record */
	float round_w;	     /* format 2 on */
	uint32_t round_full; /* 0 or 1 */
};

#define ENTRY_V1 64 /* format 1's entry: this one without the round */

_Static_assert(sizeof(struct ckpt_head) == 72, "the head is 72 bytes");
_Static_assert(sizeof(struct ckpt_entry) == 72, "an entry is 72 bytes");
_Static_assert(offsetof(struct ckpt_entry, round_w) == ENTRY_V1,
	       "format 1's entry is the head of format 2's");

struct kn__ckpt {
	char dir[PATH_MAX], tmp[PATH_MAX], name[PATH_MAX];
	int fd;
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

static int file_name(char *buf, size_t cap, const char *dir, uint32_t rank,
		     uint64_t version, const char *suffix)
{
	int n = snprintf(buf, cap, "%s/server-%u.v%020" PRIu64 ".ckpt%s", dir,
			 rank, version, suffix);

	return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
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

/* The bytes of one table entry in a file of @format. */
static size_t entry_size(uint32_t format)
{
	return format == 1 ? ENTRY_V1 : sizeof(struct ckpt_entry);
}

/*
 * SHA-256 of the head, with its digest field zeroed, and the table as
 * the file holds it (@table: its nchunks entries of entry_size bytes).
 */
static void head_digest(const struct ckpt_head *h, const void *table,
			uint8_t *out)
{
	struct ckpt_head z = *h;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();

	memset(z.digest, 0, sizeof(z.digest));
	if (!ctx || !EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) ||
	    !EVP_DigestUpdate(ctx, &z, sizeof(z)) ||
	    !EVP_DigestUpdate(ctx, table,
			      (size_t)h->nchunks * entry_size(h->format)) ||
	    !EVP_DigestFinal_ex(ctx, out, NULL))
		memset(out, 0xff, DIGEST); /* matches no file */
	EVP_MD_CTX_free(ctx);
}

/* The arrays of @c in record order, and how many there are. */
static uint32_t arrays_of(const struct kn__ckpt_chunk *c, uint32_t narrays,
			  float **out)
{
	out[0] = c->master;
	out[1] = c->m;
	out[2] = c->v;
	return narrays;
}

int kn__ckpt_open(const char *dir, uint32_t rank, uint32_t nservers,
		  uint64_t version, uint32_t narrays,
		  const struct kn__ckpt_chunk *chunks, uint32_t nchunks,
		  struct kn__ckpt **out, char *err, size_t errlen)
{
	struct kn__ckpt *c = calloc(1, sizeof(*c));
	uint64_t off;
	int ret;

	if (!c)
		return -ENOMEM;
	c->fd = -1;
	c->table = calloc(nchunks ? nchunks : 1, sizeof(*c->table));
	c->done = calloc(nchunks ? nchunks : 1, sizeof(*c->done));
	if (!c->table || !c->done) {
		ret = -ENOMEM;
		goto fail;
	}
	snprintf(c->dir, sizeof(c->dir), "%s", dir);
	ret = file_name(c->name, sizeof(c->name), dir, rank, version, "");
	if (!ret)
		ret = file_name(c->tmp, sizeof(c->tmp), dir, rank, version,
				".tmp");
	if (ret)
		goto fail;
	memcpy(c->head.magic, MAGIC, sizeof(MAGIC));
	c->head.format = KN__CKPT_FORMAT;
	c->head.rank = rank;
	c->head.nservers = nservers;
	c->head.nchunks = nchunks;
	c->head.version = version;
	c->head.narrays = narrays;
	off = sizeof(c->head) + (uint64_t)nchunks * sizeof(*c->table);
	for (uint32_t i = 0; i < nchunks; i++) {
		c->table[i].idx = chunks[i].idx;
		c->table[i].count = chunks[i].count;
		c->table[i].offset = off;
		c->table[i].bytes =
			(uint64_t)chunks[i].count * sizeof(float) * narrays;
		off += c->table[i].bytes;
	}
	c->fd = open(c->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (c->fd < 0) {
		ret = -errno;
		seterr(err, errlen, "%s: %s", c->tmp, strerror(errno));
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
	uint32_t n = arrays_of(chunk, c->head.narrays, arr);
	uint64_t off;
	size_t bytes;
	double t0;
	int ret = 0;

	if (i >= c->head.nchunks || c->done[i] ||
	    chunk->count != c->table[i].count)
		return -EINVAL;
	e = &c->table[i];
	off = e->offset;
	bytes = (size_t)e->count * sizeof(float);
	t0 = now_s();
	ctx = EVP_MD_CTX_new();
	if (!ctx || !EVP_DigestInit_ex(ctx, EVP_sha256(), NULL))
		ret = -ENOMEM;
	for (uint32_t a = 0; !ret && a < n; a++, off += bytes) {
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
		unlink(c->tmp);
	}
	free(c->table);
	free(c->done);
	free(c);
}

static int cmp_desc(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x < y) - (x > y);
}

/* The versions of @rank's files in @dir (any state), newest first; a
 * malloc'ed array in @out.  Their number, or a negative errno. */
static int scan(const char *dir, uint32_t rank, uint64_t **out)
{
	char prefix[32];
	size_t plen, cap = 16, n = 0;
	uint64_t *v = malloc(cap * sizeof(*v));
	struct dirent *d;
	DIR *dp = opendir(dir);

	if (!dp || !v) {
		int ret = dp ? -ENOMEM : -errno;

		if (dp)
			closedir(dp);
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

/* Remove every file of @rank but the newest KN__CKPT_KEEP. */
static void prune(const char *dir, uint32_t rank)
{
	char path[PATH_MAX];
	uint64_t *v;
	int n = scan(dir, rank, &v);

	for (int i = KN__CKPT_KEEP; i < n; i++)
		if (!file_name(path, sizeof(path), dir, rank, v[i], ""))
			unlink(path);
	if (n >= 0)
		free(v);
}

void kn__ckpt_remove_newer(const char *dir, uint32_t rank, uint64_t version)
{
	char path[PATH_MAX];
	uint64_t *v;
	int n = scan(dir, rank, &v);

	for (int i = 0; i < n && v[i] > version; i++)
		if (!file_name(path, sizeof(path), dir, rank, v[i], ""))
			unlink(path);
	if (n >= 0)
		free(v);
}

int kn__ckpt_close(struct kn__ckpt *c, char *err, size_t errlen)
{
	const size_t tbytes = (size_t)c->head.nchunks * sizeof(*c->table);
	int ret = 0, dfd;

	if (c->put != c->head.nchunks) {
		seterr(err, errlen, "%s: %u of %u chunks written", c->tmp,
		       c->put, c->head.nchunks);
		kn__ckpt_abort(c);
		return -EINVAL;
	}
	head_digest(&c->head, c->table, c->head.digest);
	ret = pwrite_all(c->fd, c->table, tbytes, sizeof(c->head));
	if (!ret)
		ret = pwrite_all(c->fd, &c->head, sizeof(c->head), 0);
	if (!ret && fsync(c->fd))
		ret = -errno;
	if (!ret && rename(c->tmp, c->name))
		ret = -errno;
	if (ret) {
		seterr(err, errlen, "%s: %s", c->tmp, strerror(-ret));
		kn__ckpt_abort(c);
		return ret;
	}
	close(c->fd);
	c->fd = -1;
	/* the rename itself is durable once the folder is */
	dfd = open(c->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		fsync(dfd);
		close(dfd);
	}
	prune(c->dir, c->head.rank);
	kn__ckpt_abort(c);
	return 0;
}

/*
 * Open @rank's file of @version and check its head and table: the fd and
 * the table (malloc'ed) on success, or a negative errno with the reason.
 */
static int open_checked(const char *dir, uint32_t rank, uint32_t nservers,
			uint64_t version, struct ckpt_head *h,
			struct ckpt_entry **table, char *err, size_t errlen)
{
	char path[PATH_MAX];
	uint8_t digest[DIGEST];
	struct ckpt_entry *t = NULL;
	uint64_t off;
	size_t esize;
	off_t size;
	int fd, ret = file_name(path, sizeof(path), dir, rank, version, "");

	if (ret)
		return ret;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		seterr(err, errlen, "%s: %s", path, strerror(errno));
		return -errno;
	}
	size = lseek(fd, 0, SEEK_END);
	ret = pread_all(fd, h, sizeof(*h), 0);
	if (ret || memcmp(h->magic, MAGIC, sizeof(MAGIC)) ||
	    h->format < 1 || h->format > KN__CKPT_FORMAT ||
	    h->version != version) {
		seterr(err, errlen,
		       "%s: not a Kanel checkpoint of format 1 to %d", path,
		       KN__CKPT_FORMAT);
		ret = -EBADMSG;
		goto fail;
	}
	esize = entry_size(h->format);
	if (h->rank != rank || h->nservers != nservers || h->narrays < 1 ||
	    h->narrays > 3 || h->nchunks > (uint64_t)size / esize) {
		seterr(err, errlen,
		       "%s: written by server %u of %u, with %u chunks: not "
		       "this job's server %u of %u",
		       path, h->rank, h->nservers, h->nchunks, rank, nservers);
		ret = -EINVAL;
		goto fail;
	}
	t = malloc((h->nchunks ? h->nchunks : 1) * sizeof(*t));
	if (!t) {
		ret = -ENOMEM;
		goto fail;
	}
	ret = pread_all(fd, t, (size_t)h->nchunks * esize, sizeof(*h));
	head_digest(h, t, digest);
	if (ret || memcmp(digest, h->digest, DIGEST)) {
		seterr(err, errlen, "%s: its head or table fails its checksum",
		       path);
		ret = -EBADMSG;
		goto fail;
	}
	/* format 1's entries, packed: spread from the last, no round */
	for (uint32_t i = h->nchunks; esize != sizeof(*t) && i-- > 0;) {
		memmove(&t[i], (char *)t + i * esize, esize);
		t[i].round_w = 0;
		t[i].round_full = 0;
	}
	off = sizeof(*h) + (uint64_t)h->nchunks * esize;
	for (uint32_t i = 0; i < h->nchunks; i++) {
		if (t[i].offset != off ||
		    t[i].bytes !=
			    (uint64_t)t[i].count * sizeof(float) * h->narrays) {
			seterr(err, errlen, "%s: chunk %u's record is out of "
					    "place",
			       path, t[i].idx);
			ret = -EBADMSG;
			goto fail;
		}
		off += t[i].bytes;
	}
	if ((uint64_t)size != off) {
		seterr(err, errlen, "%s: %lld bytes where %" PRIu64
				    " are due",
		       path, (long long)size, off);
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
	int ret = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) ? 0
								    : -ENOMEM;

	for (uint32_t a = 0; !ret && a < narrays; a++) {
		uint64_t off = e->offset + a * (uint64_t)bytes;

		for (size_t done = 0; !ret && done < bytes;) {
			size_t k = bytes - done < IO_STEP ? bytes - done
							  : IO_STEP;
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

int kn__ckpt_list(const char *dir, uint32_t rank, uint32_t nservers,
		  uint64_t *versions, uint32_t max, uint32_t *n,
		  void (*log)(void *arg, const char *line), void *arg)
{
	uint64_t *v;
	uint32_t k = 0;
	int found = scan(dir, rank, &v);

	if (found < 0)
		return found;
	for (int i = 0; i < found && k < max; i++) {
		float *none[3] = { NULL, NULL, NULL };
		struct ckpt_head h;
		struct ckpt_entry *t;
		char err[PATH_MAX + 128] = "";
		int fd = open_checked(dir, rank, nservers, v[i], &h, &t, err,
				      sizeof(err));
		int ret = fd < 0 ? fd : 0;

		for (uint32_t c = 0; !ret && c < h.nchunks; c++) {
			ret = read_record(fd, &t[c], h.narrays, none);
			if (ret == -EBADMSG)
				snprintf(err, sizeof(err),
					 "version %" PRIu64 ": chunk %u's "
					 "record fails its checksum",
					 v[i], t[c].idx);
		}
		if (fd >= 0) {
			close(fd);
			free(t);
		}
		if (!ret)
			versions[k++] = v[i];
		else if (log)
			log(arg, err);
	}
	free(v);
	*n = k;
	return 0;
}

int kn__ckpt_load(const char *dir, uint32_t rank, uint32_t nservers,
		  uint64_t version, struct kn__ckpt_chunk *chunks,
		  uint32_t nchunks, char *err, size_t errlen)
{
	struct ckpt_head h;
	struct ckpt_entry *t;
	int fd = open_checked(dir, rank, nservers, version, &h, &t, err,
			      errlen);
	int ret = fd < 0 ? fd : 0;

	if (!ret && h.nchunks != nchunks) {
		seterr(err, errlen, "version %" PRIu64 " holds %u chunks, this "
				    "server %u",
		       version, h.nchunks, nchunks);
		ret = -EINVAL;
	}
	for (uint32_t i = 0; !ret && i < nchunks; i++) {
		struct kn__ckpt_chunk *c = &chunks[i];
		float *dst[3];
		size_t bytes = (size_t)c->count * sizeof(float);

		if (t[i].idx != c->idx || t[i].count != c->count) {
			seterr(err, errlen, "version %" PRIu64 ": chunk %u of "
					    "%u values where this job has "
					    "chunk %u of %u",
			       version, t[i].idx, t[i].count, c->idx,
			       c->count);
			ret = -EINVAL;
			break;
		}
		arrays_of(c, 3, dst);
		for (uint32_t a = h.narrays; a < 3; a++)
			if (dst[a])
				memset(dst[a], 0, bytes);
		for (uint32_t a = 0; a < h.narrays; a++)
			if (!dst[a]) {
				ret = -EINVAL; /* the job keeps less state */
				seterr(err, errlen, "version %" PRIu64 " keeps "
						    "optimizer state this job "
						    "does not have",
				       version);
			}
		if (!ret)
			ret = read_record(fd, &t[i], h.narrays, dst);
		if (ret == -EBADMSG)
			seterr(err, errlen, "version %" PRIu64 ": chunk %u's "
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
	return ret;
}
