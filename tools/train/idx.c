/* SPDX-License-Identifier: Apache-2.0 */
/*
 * idx.c - reading IDX files (MNIST's format) into a labelled image set,
 * and the deterministic shuffle of `kanel train`.
 *
 * Every file goes through zlib's gzFile, which decompresses gzip and
 * passes anything else through unchanged, so one reader serves the .gz
 * files Debian ships and the plain ones a user may have unpacked.  The
 * header is checked before anything is allocated, and the data buffer
 * grows as bytes actually arrive, so a short file that claims a huge
 * count costs no huge allocation.  After the data, one more read proves
 * the file ends there: for gzip it is also what makes zlib check the
 * stream's CRC and length, so corruption that still inflates is caught.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "idx.h"

/* The data of one file must be smaller than this (bytes). */
#define KN_IDX_MAX_BYTES (1ul << 30)
/* The data buffer starts this large and doubles as the data arrives. */
#define KN_IDX_FIRST_ALLOC (1ul << 20)
/* zlib's buffers: 128 KiB inflates the 26 MB training images about twice
 * as fast as the 8 KiB default. */
#define KN_IDX_GZBUF (128u << 10)
/* Labels must be below this (the ten Fashion-MNIST classes). */
#define KN_IDX_CLASSES 10

__attribute__((format(printf, 3, 4))) static void
seterr(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

static int ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);

	return n >= k && !strcmp(s + n - k, suffix);
}

/* Reads up to @n bytes, fewer only at the end of the file or on error. */
static size_t read_full(gzFile f, void *buf, size_t n)
{
	size_t got = 0;
	int r;

	while (got < n) {
		/* gzread() counts in int: never ask for more than fits. */
		size_t want = n - got < INT_MAX ? n - got : INT_MAX;

		r = gzread(f, (char *)buf + got, (unsigned int)want);
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	return got;
}

/*
 * After a short read: zlib's error, if it had one, as a negative errno
 * with its message, else 0 (a clean end of file).  A gzip stream cut
 * short leaves Z_BUF_ERROR, which gzread() reports as a plain end of
 * file, so the state must be asked for explicitly.
 */
static int gz_failed(gzFile f, const char *path, char *err, size_t errlen)
{
	int saved = errno;
	int zerr;
	const char *msg = gzerror(f, &zerr);

	switch (zerr) {
	case Z_OK:
		return 0;
	case Z_MEM_ERROR:
		seterr(err, errlen, "%s: out of memory while inflating", path);
		return -ENOMEM;
	case Z_ERRNO:
		seterr(err, errlen, "%s: read error: %s", path,
		       strerror(saved));
		return -EIO;
	default:
		/* zlib names the file "<fd:N>: "; we name it better. */
		if (!strncmp(msg, "<fd:", 4) && strstr(msg, ": "))
			msg = strstr(msg, ": ") + 2;
		seterr(err, errlen, "%s: corrupt gzip stream (zlib: %s)", path,
		       msg);
		return -EIO;
	}
}

/*
 * The stream ended early or is not what it should be: zlib's error if it
 * had one (gz_failed), else -EINVAL with the sentence @fmt makes.
 */
__attribute__((format(printf, 5, 6))) static int
gz_short(gzFile f, const char *path, char *err, size_t errlen, const char *fmt,
	 ...)
{
	int ret = gz_failed(f, path, err, errlen);
	va_list ap;

	if (ret)
		return ret;
	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

static uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* Checks the dimensions and sets *len to their product in bytes. */
static int check_dims(const char *path, const uint32_t *dims, unsigned ndims,
		      size_t *len, char *err, size_t errlen)
{
	size_t n = 1;

	for (unsigned i = 0; i < ndims; i++) {
		if (!dims[i]) {
			seterr(err, errlen, "%s: dimension %u of %u is zero",
			       path, i + 1, ndims);
			return -EINVAL;
		}
	}
	for (unsigned i = 0; i < ndims; i++) {
		if (__builtin_mul_overflow(n, (size_t)dims[i], &n) ||
		    n >= KN_IDX_MAX_BYTES) {
			seterr(err, errlen,
			       "%s: dimensions %u x %u x %u describe 1 GiB or "
			       "more of data",
			       path, dims[0], ndims > 1 ? dims[1] : 1,
			       ndims > 2 ? dims[2] : 1);
			return -EINVAL;
		}
	}
	*len = n;
	return 0;
}

/*
 * Reads exactly @len bytes of data, then proves the file ends there.  The
 * buffer grows with what arrives so that a lying header cannot make us
 * allocate up to 1 GiB for a file of a few bytes.
 */
static int read_data(gzFile f, const char *path, const char *what, size_t len,
		     uint8_t **data, char *err, size_t errlen)
{
	size_t cap = len < KN_IDX_FIRST_ALLOC ? len : KN_IDX_FIRST_ALLOC;
	size_t got = 0, r;
	uint8_t *buf, *bigger, extra;
	int ret;

	buf = malloc(cap);
	if (!buf)
		return -ENOMEM;
	for (;;) {
		r = read_full(f, buf + got, cap - got);
		got += r;
		if (got < cap || cap == len)
			break;
		cap = cap <= len / 2 ? cap * 2 : len;
		bigger = realloc(buf, cap);
		if (!bigger) {
			ret = -ENOMEM;
			goto free_buf;
		}
		buf = bigger;
	}
	if (got < len) {
		ret = gz_short(f, path, err, errlen,
			       "%s is truncated: expected %zu bytes of %s, got "
			       "%zu",
			       path, len, what, got);
		goto free_buf;
	}
	if (read_full(f, &extra, 1)) {
		seterr(err, errlen,
		       "%s has trailing bytes after its %zu bytes of %s", path,
		       len, what);
		ret = -EINVAL;
		goto free_buf;
	}
	ret = gz_failed(f, path, err, errlen);
	if (ret)
		goto free_buf;
	*data = buf;
	return 0;

free_buf:
	free(buf);
	return ret;
}

int kn__idx_read(const char *path, uint32_t magic, uint32_t dims[3],
		 uint8_t **data, size_t *len, char *err, size_t errlen)
{
	unsigned ndims = magic & 0xff;
	const char *what = ndims == 3 ? "pixels" : "labels";
	uint8_t head[16];
	uint32_t d[3] = { 1, 1, 1 };
	struct stat st;
	uint32_t got_magic;
	uint8_t *buf = NULL; /* read_data() sets it whenever it returns 0 */
	size_t n, need;
	gzFile f;
	int fd, ret;

	if (magic != KN_IDX_MAGIC_IMAGES && magic != KN_IDX_MAGIC_LABELS) {
		seterr(err, errlen,
		       "%s: unsupported IDX magic 0x%08x asked for", path,
		       magic);
		return -EINVAL;
	}
	/* O_NONBLOCK: opening a FIFO must not wait for a writer; what is
	 * not a regular file (a FIFO, a device, a directory) is refused
	 * before anything is read from it */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		ret = -errno;
		seterr(err, errlen, "cannot open %s: %s", path, strerror(-ret));
		return ret;
	}
	if (fstat(fd, &st)) {
		ret = -errno;
		seterr(err, errlen, "%s: %s", path, strerror(-ret));
		close(fd);
		return ret;
	}
	if (!S_ISREG(st.st_mode)) {
		seterr(err, errlen, "%s: not a regular file", path);
		close(fd);
		return -EINVAL;
	}
	/* a regular file never blocks; clear the flag all the same so that
	 * zlib's reads see the plain semantics they expect */
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)) {
		ret = -errno;
		seterr(err, errlen, "%s: %s", path, strerror(-ret));
		close(fd);
		return ret;
	}
	f = gzdopen(fd, "rb");
	if (!f) {
		close(fd);
		return -ENOMEM;
	}
	gzbuffer(f, KN_IDX_GZBUF);
	/* Transparent mode would read anything: a .gz name promises gzip. */
	if (ends_with(path, ".gz") && gzdirect(f)) {
		ret = gz_short(f, path, err, errlen,
			       "%s is not a gzip file though its name ends in "
			       ".gz",
			       path);
		goto close_file;
	}

	need = 4 + 4 * (size_t)ndims;
	n = read_full(f, head, need);
	if (n < need) {
		ret = gz_short(f, path, err, errlen,
			       "%s is truncated: expected a %zu-byte IDX "
			       "header, got %zu bytes",
			       path, need, n);
		/* Too short for the dimensions, yet the magic may be wrong. */
		if (n < 4 || be32(head) == magic)
			goto close_file;
	}
	got_magic = be32(head);
	if (got_magic != magic) {
		seterr(err, errlen,
		       "%s: bad magic: expected 0x%08x (IDX of unsigned bytes, "
		       "%u dimension%s), got 0x%08x",
		       path, magic, ndims, ndims > 1 ? "s" : "", got_magic);
		ret = -EINVAL;
		goto close_file;
	}
	for (unsigned i = 0; i < ndims; i++)
		d[i] = be32(head + 4 + 4 * i);
	ret = check_dims(path, d, ndims, &n, err, errlen);
	if (ret)
		goto close_file;
	ret = read_data(f, path, what, n, &buf, err, errlen);
	if (ret)
		goto close_file;
	gzclose_r(f);

	memcpy(dims, d, sizeof(d));
	*data = buf;
	*len = n;
	return 0;

close_file:
	gzclose_r(f);
	return ret;
}

/*
 * Finds DIR/PREFIX-KIND.gz, else DIR/PREFIX-KIND, into @path.  Errors
 * other than a missing file are left for open() to report on the .gz
 * name.
 */
static int find_file(const char *dir, const char *prefix, const char *kind,
		     char *path, char *err, size_t errlen)
{
	struct stat st;
	int n;

	n = snprintf(path, PATH_MAX, "%s/%s-%s.gz", dir, prefix, kind);
	if (n < 0 || n >= PATH_MAX) {
		seterr(err, errlen, "%s/%s-%s.gz: path too long", dir, prefix,
		       kind);
		return -ENAMETOOLONG;
	}
	if (!stat(path, &st) || errno != ENOENT)
		return 0;
	path[n - 3] = '\0';
	if (!stat(path, &st) || errno != ENOENT)
		return 0;
	seterr(err, errlen,
	       "%s/%s-%s.gz is missing (and so is %s): Debian's package "
	       "dataset-fashion-mnist provides the default directory %s, and "
	       "--data DIR selects another copy",
	       dir, prefix, kind, path, KN_FASHION_MNIST_DIR);
	return -ENOENT;
}

int kn__dataset_load(const char *dir, const char *prefix,
		     struct kn__dataset *out, char *err, size_t errlen)
{
	char ipath[PATH_MAX], lpath[PATH_MAX];
	uint32_t idims[3], ldims[3];
	uint8_t *pixels, *labels;
	size_t npix, nlab, bytes;
	float *x;
	int ret;

	ret = find_file(dir, prefix, "images-idx3-ubyte", ipath, err, errlen);
	if (ret)
		return ret;
	ret = find_file(dir, prefix, "labels-idx1-ubyte", lpath, err, errlen);
	if (ret)
		return ret;
	ret = kn__idx_read(ipath, KN_IDX_MAGIC_IMAGES, idims, &pixels, &npix,
			   err, errlen);
	if (ret)
		return ret;
	ret = kn__idx_read(lpath, KN_IDX_MAGIC_LABELS, ldims, &labels, &nlab,
			   err, errlen);
	if (ret)
		goto free_pixels;
	if (ldims[0] != idims[0]) {
		seterr(err, errlen, "%s holds %u images but %s holds %u labels",
		       ipath, idims[0], lpath, ldims[0]);
		ret = -EINVAL;
		goto free_labels;
	}
	for (size_t i = 0; i < nlab; i++) {
		if (labels[i] >= KN_IDX_CLASSES) {
			seterr(err, errlen,
			       "%s: label %u at index %zu is not below %u",
			       lpath, labels[i], i, KN_IDX_CLASSES);
			ret = -EINVAL;
			goto free_labels;
		}
	}
	/* aligned_alloc() wants a multiple of the alignment. */
	if (__builtin_mul_overflow(npix, sizeof(*x), &bytes) ||
	    bytes > SIZE_MAX - 63) {
		ret = -ENOMEM;
		goto free_labels;
	}
	x = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
	if (!x) {
		ret = -ENOMEM;
		goto free_labels;
	}
	for (size_t i = 0; i < npix; i++)
		x[i] = (float)pixels[i] / 255.0f;
	free(pixels);

	out->count = idims[0];
	out->rows = idims[1];
	out->cols = idims[2];
	out->x = x;
	out->y = labels;
	out->map = NULL; /* our own arrays: kn__dataset_fini frees them */
	out->map_len = 0;
	return 0;

free_labels:
	free(labels);
free_pixels:
	free(pixels);
	return ret;
}

void kn__dataset_fini(struct kn__dataset *d)
{
	if (!d)
		return;
	if (d->map) {
		munmap(d->map, d->map_len);
	} else {
		free(d->x);
		free(d->y);
	}
	memset(d, 0, sizeof(*d));
}

/* The head of a shared dataset file; the arrays follow at their offsets. */
struct share_head {
	char magic[8]; /* SHARE_MAGIC */
	uint32_t count, rows, cols, pad;
	uint64_t x_off, y_off, total;
};

#define SHARE_MAGIC "KNDATA1"
#define SHARE_SEALS (F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE)

static int pwrite_full(int fd, const void *buf, size_t n, uint64_t off)
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

int kn__dataset_share(const struct kn__dataset *d, int *fd)
{
	size_t pixels = (size_t)d->count * d->rows * d->cols;
	struct share_head h = {
		.magic = SHARE_MAGIC,
		.count = d->count,
		.rows = d->rows,
		.cols = d->cols,
		.x_off = 64,
	};
	int f, ret;

	h.y_off = (h.x_off + pixels * sizeof(float) + 63) & ~(uint64_t)63;
	h.total = h.y_off + d->count;
	f = memfd_create("kanel-dataset", MFD_ALLOW_SEALING);
	if (f < 0)
		return -errno;
	ret = ftruncate(f, (off_t)h.total) ? -errno : 0;
	if (!ret)
		ret = pwrite_full(f, &h, sizeof(h), 0);
	if (!ret)
		ret = pwrite_full(f, d->x, pixels * sizeof(float), h.x_off);
	if (!ret)
		ret = pwrite_full(f, d->y, d->count, h.y_off);
	if (!ret && fcntl(f, F_ADD_SEALS, SHARE_SEALS))
		ret = -errno;
	if (ret) {
		close(f);
		return ret;
	}
	*fd = f;
	return 0;
}

int kn__dataset_map(int fd, struct kn__dataset *out, char *err, size_t errlen)
{
	struct share_head h;
	struct stat st;
	uint64_t pixels;
	char *base;
	int seals = fcntl(fd, F_GET_SEALS);

	if (fstat(fd, &st) || seals < 0)
		return -errno;
	if ((seals & SHARE_SEALS) != SHARE_SEALS ||
	    pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) ||
	    memcmp(h.magic, SHARE_MAGIC, sizeof(h.magic)) ||
	    (uint64_t)st.st_size != h.total || !h.count || !h.rows || !h.cols ||
	    h.rows > 4096 || h.cols > 4096) {
		seterr(err, errlen,
		       "the shared dataset is not one kanel "
		       "train made");
		return -EINVAL;
	}
	pixels = (uint64_t)h.count * h.rows * h.cols;
	if (h.x_off < sizeof(h) || h.x_off % 64 ||
	    pixels > (h.total - h.x_off) / sizeof(float) ||
	    h.y_off < h.x_off + pixels * sizeof(float) || h.y_off > h.total ||
	    h.total - h.y_off != h.count) {
		seterr(err, errlen,
		       "the shared dataset's layout does not fit "
		       "its size");
		return -EINVAL;
	}
	base = mmap(NULL, h.total, PROT_READ, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED)
		return -errno;
	for (uint32_t i = 0; i < h.count; i++) {
		if ((uint8_t)base[h.y_off + i] >= KN_IDX_CLASSES) {
			munmap(base, h.total);
			seterr(err, errlen,
			       "the shared dataset's label %u is "
			       "not below %u",
			       i, KN_IDX_CLASSES);
			return -EINVAL;
		}
	}
	*out = (struct kn__dataset){
		.count = h.count,
		.rows = h.rows,
		.cols = h.cols,
		.x = (float *)(void *)(base + h.x_off),
		.y = (uint8_t *)base + h.y_off,
		.map = base,
		.map_len = h.total,
	};
	return 0;
}

/* splitmix64: expands the 64-bit seed into xoshiro's 256-bit state. */
static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

/* xoshiro256** (Blackman and Vigna, 2018). */
static uint64_t xoshiro(uint64_t s[4])
{
	uint64_t result = rotl(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return result;
}

/*
 * Uniform in [0, range), range >= 1: Lemire's multiply-shift, rejecting
 * the few low products that would favour some values (a plain modulo
 * would bias the permutation).
 */
static uint32_t bounded(uint64_t s[4], uint32_t range)
{
	uint64_t m = (xoshiro(s) >> 32) * range;
	uint32_t low = (uint32_t)m;

	if (low < range) {
		uint32_t thresh = -range % range;

		while (low < thresh) {
			m = (xoshiro(s) >> 32) * range;
			low = (uint32_t)m;
		}
	}
	return (uint32_t)(m >> 32);
}

void kn__shuffle(uint32_t *idx, uint32_t n, uint64_t seed)
{
	uint64_t s[4];

	for (int k = 0; k < 4; k++)
		s[k] = splitmix64(&seed);
	for (uint32_t i = 0; i < n; i++)
		idx[i] = i;
	for (uint32_t i = n; i > 1; i--) {
		uint32_t j = bounded(s, i);
		uint32_t t = idx[i - 1];

		idx[i - 1] = idx[j];
		idx[j] = t;
	}
}
