/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_idx.c - the IDX reader of `kanel train` (tools/train/idx.c) on
 * small files written into a temporary directory, plain and gzip: a good
 * pair loads with the right values; every kind of damage gives its errno
 * and a message that names the file and the problem.  Then the real
 * Fashion-MNIST where Debian's package put it, and the shuffle.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <zlib.h>

#include "idx.h"

static char dir[64];

static void make_dir(void)
{
	strcpy(dir, "/tmp/kanel-idx-XXXXXX");
	cr_assert(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
}

static void remove_dir(void)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char path[PATH_MAX];

	if (!d)
		return;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		unlink(path);
	}
	closedir(d);
	rmdir(dir);
}

TestSuite(idx, .init = make_dir, .fini = remove_dir);

/* DIR/NAME, in a static buffer per slot so that two can be alive. */
static const char *in_dir(const char *name, int slot)
{
	static char paths[2][PATH_MAX];

	snprintf(paths[slot], PATH_MAX, "%s/%s", dir, name);
	return paths[slot];
}

static void put_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static void write_bytes(const char *name, const uint8_t *buf, size_t len,
			int gz)
{
	const char *path = in_dir(name, 0);

	if (gz) {
		gzFile f = gzopen(path, "wb");

		cr_assert(f, "gzopen %s", path);
		cr_assert_eq(gzwrite(f, buf, (unsigned)len), (int)len);
		cr_assert_eq(gzclose(f), Z_OK);
	} else {
		FILE *f = fopen(path, "wb");

		cr_assert(f, "fopen %s: %s", path, strerror(errno));
		cr_assert_eq(fwrite(buf, 1, len, f), len);
		cr_assert_eq(fclose(f), 0);
	}
}

/*
 * Writes an IDX file: @magic, @ndims dimensions, then @len bytes of
 * @data (which may disagree with the dimensions, on purpose).
 */
static void write_idx(const char *name, int gz, uint32_t magic,
		      const uint32_t *dims, unsigned ndims, const uint8_t *data,
		      size_t len)
{
	size_t head = 4 + 4 * (size_t)ndims;
	uint8_t *buf = malloc(head + len);

	cr_assert(buf);
	put_be32(buf, magic);
	for (unsigned i = 0; i < ndims; i++)
		put_be32(buf + 4 + 4 * i, dims[i]);
	if (len)
		memcpy(buf + head, data, len);
	write_bytes(name, buf, head + len, gz);
	free(buf);
}

/* A small image set: pixels cover 0 and 255, labels 0 .. 9 in turn. */
#define N    12
#define ROWS 3
#define COLS 4

static uint8_t pixel(size_t i)
{
	return (uint8_t)(i * 37 + 11 * (i / 7));
}

static void write_images(const char *prefix, int gz, uint32_t count, size_t len)
{
	uint32_t dims[3] = { count, ROWS, COLS };
	uint8_t *data = malloc(len + 1);
	char name[64];

	cr_assert(data);
	for (size_t i = 0; i < len; i++)
		data[i] = pixel(i);
	if (len > 1) {
		data[0] = 0;
		data[1] = 255;
	}
	snprintf(name, sizeof(name), "%s-images-idx3-ubyte%s", prefix,
		 gz ? ".gz" : "");
	write_idx(name, gz, KN_IDX_MAGIC_IMAGES, dims, 3, data, len);
	free(data);
}

static void write_labels(const char *prefix, int gz, uint32_t count,
			 uint8_t first)
{
	uint8_t y[256];
	char name[64];

	cr_assert(count <= sizeof(y));
	for (uint32_t i = 0; i < count; i++)
		y[i] = (uint8_t)((first + i) % 10);
	snprintf(name, sizeof(name), "%s-labels-idx1-ubyte%s", prefix,
		 gz ? ".gz" : "");
	write_idx(name, gz, KN_IDX_MAGIC_LABELS, &count, 1, y, count);
}

static void check_good_load(const char *prefix, uint8_t first)
{
	struct kn__dataset d;
	char err[512] = "";
	int ret = kn__dataset_load(dir, prefix, &d, err, sizeof(err));

	cr_assert_eq(ret, 0, "load: %d (%s)", ret, err);
	cr_assert_eq(d.count, N);
	cr_assert_eq(d.rows, ROWS);
	cr_assert_eq(d.cols, COLS);
	cr_assert_eq((uintptr_t)d.x % 64, 0, "x is not 64-byte aligned");
	cr_assert_eq(d.x[0], 0.0f);
	cr_assert_eq(d.x[1], 1.0f);
	for (size_t i = 2; i < (size_t)N * ROWS * COLS; i++)
		cr_assert_eq(d.x[i], (float)pixel(i) / 255.0f,
			     "x[%zu] = %g, byte %u", i, d.x[i], pixel(i));
	for (uint32_t i = 0; i < N; i++)
		cr_assert_eq(d.y[i], (first + i) % 10, "y[%u] = %u", i, d.y[i]);
	kn__dataset_fini(&d);
	cr_assert_null(d.x);
	kn__dataset_fini(&d); /* idempotent */
	kn__dataset_fini(NULL);
}

Test(idx, loads_plain_pair)
{
	write_images("train", 0, N, N * ROWS * COLS);
	write_labels("train", 0, N, 0);
	check_good_load("train", 0);
}

Test(idx, loads_gzip_pair)
{
	write_images("t10k", 1, N, N * ROWS * COLS);
	write_labels("t10k", 1, N, 3);
	check_good_load("t10k", 3);
}

Test(idx, prefers_gz_over_plain)
{
	write_images("train", 1, N, N * ROWS * COLS);
	write_images("train", 0, N, N * ROWS * COLS);
	write_labels("train", 1, N, 7);
	write_labels("train", 0, N, 0);
	check_good_load("train", 7);
}

Test(idx, read_reports_dims)
{
	uint32_t dims[3];
	uint8_t *data;
	size_t len;
	char err[512] = "";
	int ret;

	write_labels("train", 1, N, 0);
	ret = kn__idx_read(in_dir("train-labels-idx1-ubyte.gz", 0),
			   KN_IDX_MAGIC_LABELS, dims, &data, &len, err,
			   sizeof(err));
	cr_assert_eq(ret, 0, "%d (%s)", ret, err);
	cr_assert_eq(dims[0], N);
	cr_assert_eq(dims[1], 1);
	cr_assert_eq(dims[2], 1);
	cr_assert_eq(len, N);
	for (size_t i = 0; i < len; i++)
		cr_assert_eq(data[i], i % 10);
	free(data);

	write_images("train", 0, N, N * ROWS * COLS);
	ret = kn__idx_read(in_dir("train-images-idx3-ubyte", 0),
			   KN_IDX_MAGIC_IMAGES, dims, &data, &len, err,
			   sizeof(err));
	cr_assert_eq(ret, 0, "%d (%s)", ret, err);
	cr_assert_eq(dims[0], N);
	cr_assert_eq(dims[1], ROWS);
	cr_assert_eq(dims[2], COLS);
	cr_assert_eq(len, N * ROWS * COLS);
	free(data);

	/* A magic that is neither: refused before the file is opened. */
	ret = kn__idx_read(in_dir("train-images-idx3-ubyte", 0), 0x802, dims,
			   &data, &len, NULL, 0);
	cr_assert_eq(ret, -EINVAL);
}

/*
 * Loads from the temporary directory, expecting @want and a message
 * that contains each of the NULL-terminated strings after @want.
 */
static void expect_failure(const char *prefix, int want, ...)
{
	struct kn__dataset d = { .count = 0xdead };
	char err[1024] = "";
	const char *s;
	va_list ap;
	int ret;

	ret = kn__dataset_load(dir, prefix, &d, err, sizeof(err));
	cr_assert_eq(ret, want, "load gave %d (%s), expected %d", ret, err,
		     want);
	cr_assert_eq(d.count, 0xdead, "out written on failure");
	cr_log_info("%s", err);
	va_start(ap, want);
	while ((s = va_arg(ap, const char *)))
		cr_assert(strstr(err, s), "message \"%s\" lacks \"%s\"", err,
			  s);
	va_end(ap);
}

Test(idx, missing_file)
{
	expect_failure(
		"train", -ENOENT, in_dir("train-images-idx3-ubyte.gz", 1),
		"dataset-fashion-mnist", KN_FASHION_MNIST_DIR, "--data", NULL);
	/* Images present, labels missing: the message names the labels. */
	write_images("train", 1, N, N * ROWS * COLS);
	expect_failure("train", -ENOENT,
		       in_dir("train-labels-idx1-ubyte.gz", 1),
		       "dataset-fashion-mnist", "--data", NULL);
}

Test(idx, missing_directory)
{
	struct kn__dataset d;
	char err[512] = "";

	cr_assert_eq(kn__dataset_load("/nonexistent/kanel", "train", &d, err,
				      sizeof(err)),
		     -ENOENT);
	cr_assert(strstr(err, "/nonexistent/kanel/train-images-idx3-ubyte"),
		  "%s", err);
	/* A NULL buffer is allowed when its length is 0. */
	cr_assert_eq(
		kn__dataset_load("/nonexistent/kanel", "train", &d, NULL, 0),
		-ENOENT);
}

/*
 * A FIFO in the data folder must be refused, not opened for reading: a
 * blocking open waits for a writer that never comes.  The timeout only
 * turns that hang into a failure.
 */
Test(idx, fifo_refused, .timeout = 30)
{
	const char *fifo = in_dir("train-images-idx3-ubyte.gz", 1);

	write_labels("train", 1, N, 0);
	cr_assert_eq(mkfifo(fifo, 0600), 0, "mkfifo: %s", strerror(errno));
	expect_failure("train", -EINVAL, fifo, "not a regular file", NULL);
}

/* A directory where a file belongs: the same answer, not a read error. */
Test(idx, directory_refused)
{
	const char *sub = in_dir("train-images-idx3-ubyte.gz", 1);

	write_labels("train", 1, N, 0);
	cr_assert_eq(mkdir(sub, 0700), 0, "mkdir: %s", strerror(errno));
	expect_failure("train", -EINVAL, sub, "not a regular file", NULL);
	rmdir(sub);
}

Test(idx, wrong_magic)
{
	uint32_t dims[3] = { N, ROWS, COLS };
	uint8_t px[N * ROWS * COLS] = { 0 };

	write_idx("train-images-idx3-ubyte.gz", 1, KN_IDX_MAGIC_LABELS, dims, 3,
		  px, sizeof(px));
	write_labels("train", 1, N, 0);
	expect_failure("train", -EINVAL,
		       in_dir("train-images-idx3-ubyte.gz", 1), "magic",
		       "0x00000803", "0x00000801", NULL);
}

Test(idx, wrong_magic_labels)
{
	uint32_t count = N;
	uint8_t y[N] = { 0 };

	write_images("train", 0, N, N * ROWS * COLS);
	write_idx("train-labels-idx1-ubyte", 0, 0x12345678, &count, 1, y, N);
	expect_failure("train", -EINVAL, in_dir("train-labels-idx1-ubyte", 1),
		       "magic", "0x00000801", "0x12345678", NULL);
}

Test(idx, truncated_pixels)
{
	write_images("train", 0, N, 100);
	write_labels("train", 0, N, 0);
	expect_failure("train", -EINVAL, in_dir("train-images-idx3-ubyte", 1),
		       "truncated", "expected 144 bytes of pixels, got 100",
		       NULL);
}

Test(idx, truncated_pixels_gzip)
{
	write_images("train", 1, N, 143);
	write_labels("train", 1, N, 0);
	expect_failure("train", -EINVAL,
		       in_dir("train-images-idx3-ubyte.gz", 1),
		       "expected 144 bytes of pixels, got 143", NULL);
}

Test(idx, truncated_header)
{
	uint8_t head[6] = { 0, 0, 8, 3, 0, 0 };

	write_bytes("train-images-idx3-ubyte", head, sizeof(head), 0);
	write_labels("train", 0, N, 0);
	expect_failure("train", -EINVAL, in_dir("train-images-idx3-ubyte", 1),
		       "truncated", "header", NULL);
}

Test(idx, trailing_bytes)
{
	write_images("train", 0, N, N * ROWS * COLS + 5);
	write_labels("train", 0, N, 0);
	expect_failure("train", -EINVAL, in_dir("train-images-idx3-ubyte", 1),
		       "trailing", NULL);
}

Test(idx, trailing_bytes_gzip)
{
	uint32_t count = N;
	uint8_t y[N + 1] = { 0 };

	write_images("train", 1, N, N * ROWS * COLS);
	write_idx("train-labels-idx1-ubyte.gz", 1, KN_IDX_MAGIC_LABELS, &count,
		  1, y, N + 1);
	expect_failure("train", -EINVAL,
		       in_dir("train-labels-idx1-ubyte.gz", 1), "trailing",
		       NULL);
}

static uint8_t *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf;
	long n;

	cr_assert(f);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	buf = malloc((size_t)n);
	cr_assert(buf);
	cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	*len = (size_t)n;
	return buf;
}

/*
 * A training set whose gzip image file is big enough for a deflate stream
 * with some body; that file's bytes, @gz_len of them (the caller frees
 * them).
 */
static uint8_t *write_big_gz_set(size_t *gz_len)
{
	uint32_t dims[3] = { 64, 28, 28 };
	size_t len = 64 * 28 * 28;
	uint8_t *px = malloc(len);
	uint64_t s = 1;

	cr_assert(px);
	for (size_t i = 0; i < len; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		/* Half structure, half noise: compresses, but not to nothing */
		px[i] = (uint8_t)((i % 28) * 9 + (s >> 60));
	}
	write_idx("train-images-idx3-ubyte.gz", 1, KN_IDX_MAGIC_IMAGES, dims, 3,
		  px, len);
	free(px);
	write_labels("train", 1, 64, 0);
	return slurp(in_dir("train-images-idx3-ubyte.gz", 1), gz_len);
}

Test(idx, corrupt_gzip_stream)
{
	const char *path = in_dir("train-images-idx3-ubyte.gz", 1);
	size_t len;
	uint8_t *gz = write_big_gz_set(&len);

	cr_assert_gt(len, 200);
	for (size_t i = len / 2; i < len / 2 + 16; i++)
		gz[i] ^= 0x5a;
	write_bytes("train-images-idx3-ubyte.gz", gz, len, 0);
	free(gz);
	expect_failure("train", -EIO, path, "corrupt gzip", NULL);
}

Test(idx, gzip_stream_cut_short)
{
	const char *path = in_dir("train-images-idx3-ubyte.gz", 1);
	size_t len;
	uint8_t *gz = write_big_gz_set(&len);

	write_bytes("train-images-idx3-ubyte.gz", gz, len - 6, 0);
	free(gz);
	expect_failure("train", -EIO, path, "corrupt gzip", NULL);
}

Test(idx, gz_name_without_gzip)
{
	write_images("train", 0, N, N * ROWS * COLS);
	rename(in_dir("train-images-idx3-ubyte", 0),
	       in_dir("train-images-idx3-ubyte.gz", 1));
	write_labels("train", 0, N, 0);
	expect_failure("train", -EINVAL,
		       in_dir("train-images-idx3-ubyte.gz", 1),
		       "not a gzip file", NULL);
}

Test(idx, label_out_of_range)
{
	uint32_t count = N;
	uint8_t y[N];

	for (int i = 0; i < N; i++)
		y[i] = (uint8_t)(i % 10);
	y[5] = 10;
	write_images("train", 1, N, N * ROWS * COLS);
	write_idx("train-labels-idx1-ubyte.gz", 1, KN_IDX_MAGIC_LABELS, &count,
		  1, y, N);
	expect_failure("train", -EINVAL,
		       in_dir("train-labels-idx1-ubyte.gz", 1),
		       "label 10 at index 5", NULL);
}

Test(idx, count_mismatch)
{
	write_images("train", 1, N, N * ROWS * COLS);
	write_labels("train", 1, N - 1, 0);
	expect_failure("train", -EINVAL,
		       in_dir("train-images-idx3-ubyte.gz", 0),
		       in_dir("train-labels-idx1-ubyte.gz", 1), "12 images",
		       "11 labels", NULL);
}

Test(idx, zero_dimension)
{
	uint32_t dims[3] = { N, 0, COLS };

	write_idx("train-images-idx3-ubyte", 0, KN_IDX_MAGIC_IMAGES, dims, 3,
		  NULL, 0);
	write_labels("train", 0, N, 0);
	expect_failure("train", -EINVAL, in_dir("train-images-idx3-ubyte", 1),
		       "dimension 2 of 3 is zero", NULL);
}

Test(idx, zero_count)
{
	uint32_t zero = 0;

	write_images("train", 0, N, N * ROWS * COLS);
	write_idx("train-labels-idx1-ubyte", 0, KN_IDX_MAGIC_LABELS, &zero, 1,
		  NULL, 0);
	expect_failure("train", -EINVAL, in_dir("train-labels-idx1-ubyte", 1),
		       "dimension 1 of 1 is zero", NULL);
}

/* Dimensions past 1 GiB (or past size_t) are refused before any read. */
Test(idx, absurd_dimensions)
{
	uint32_t big[3] = { 65536, 128, 128 }; /* exactly 1 GiB */
	uint32_t huge[3] = { 0xffffffffu, 0xffffffffu, 0xffffffffu };

	write_idx("train-images-idx3-ubyte", 0, KN_IDX_MAGIC_IMAGES, big, 3,
		  NULL, 0);
	write_labels("train", 0, N, 0);
	expect_failure("train", -EINVAL, in_dir("train-images-idx3-ubyte", 1),
		       "1 GiB", NULL);
	write_idx("train-images-idx3-ubyte", 0, KN_IDX_MAGIC_IMAGES, huge, 3,
		  NULL, 0);
	expect_failure("train", -EINVAL, in_dir("train-images-idx3-ubyte", 1),
		       "4294967295 x 4294967295 x 4294967295", "1 GiB", NULL);
}

static void check_real(const char *prefix, uint32_t count)
{
	struct kn__dataset d;
	uint32_t per_class[10] = { 0 };
	char err[512] = "";
	float lo = 1.0f, hi = 0.0f;
	int ret;

	ret = kn__dataset_load(KN_FASHION_MNIST_DIR, prefix, &d, err,
			       sizeof(err));
	cr_assert_eq(ret, 0, "%s: %d (%s)", prefix, ret, err);
	cr_assert_eq(d.count, count);
	cr_assert_eq(d.rows, 28);
	cr_assert_eq(d.cols, 28);
	for (uint32_t i = 0; i < d.count; i++) {
		cr_assert_lt(d.y[i], 10);
		per_class[d.y[i]]++;
	}
	for (int c = 0; c < 10; c++)
		cr_assert_eq(per_class[c], count / 10, "%s: class %d has %u",
			     prefix, c, per_class[c]);
	for (size_t i = 0; i < (size_t)d.count * 28 * 28; i++) {
		lo = d.x[i] < lo ? d.x[i] : lo;
		hi = d.x[i] > hi ? d.x[i] : hi;
	}
	cr_assert_eq(lo, 0.0f);
	cr_assert_eq(hi, 1.0f);
	kn__dataset_fini(&d);
}

Test(idx, real_fashion_mnist)
{
	if (access(KN_FASHION_MNIST_DIR, F_OK))
		cr_skip_test("%s is missing (Debian's package "
			     "dataset-fashion-mnist provides it)",
			     KN_FASHION_MNIST_DIR);
	check_real("train", 60000);
	check_real("t10k", 10000);
}

static int is_permutation(const uint32_t *idx, uint32_t n)
{
	uint8_t *seen = calloc(n ? n : 1, 1);
	int ok = 1;

	cr_assert(seen);
	for (uint32_t i = 0; i < n && ok; i++) {
		if (idx[i] >= n || seen[idx[i]])
			ok = 0;
		else
			seen[idx[i]] = 1;
	}
	free(seen);
	return ok;
}

Test(idx, shuffle_is_deterministic_permutation)
{
	enum { n = 10000 };
	static uint32_t a[n], b[n], c[n];
	uint32_t one = 7, fixed = 0;

	kn__shuffle(a, n, 42);
	kn__shuffle(b, n, 42);
	kn__shuffle(c, n, 43);
	cr_assert(is_permutation(a, n));
	cr_assert(is_permutation(c, n));
	cr_assert(!memcmp(a, b, sizeof(a)), "same seed, other permutation");
	cr_assert(memcmp(a, c, sizeof(a)), "seeds 42 and 43 agree");
	for (uint32_t i = 0; i < n; i++)
		fixed += a[i] == i;
	cr_assert_lt(fixed, 10, "%u fixed points: hardly shuffled", fixed);
	kn__shuffle(&one, 1, 42);
	cr_assert_eq(one, 0);
	kn__shuffle(NULL, 0, 42);
}

/* The 6 orders of 3 items come up equally often over many seeds: catches
 * the off-by-one Fisher-Yates variants (Sattolo's, or j in [0, n)). */
Test(idx, shuffle_is_uniform)
{
	enum { trials = 60000 };
	unsigned hits[3][3][3] = { { { 0 } } };
	uint32_t p[3];

	for (uint64_t seed = 0; seed < trials; seed++) {
		kn__shuffle(p, 3, seed);
		hits[p[0]][p[1]][p[2]]++;
	}
	for (int i = 0; i < 3; i++)
		for (int j = 0; j < 3; j++)
			for (int k = 0; k < 3; k++) {
				unsigned want = i != j && j != k && i != k
							? trials / 6
							: 0;
				unsigned h = hits[i][j][k];

				/* 5 sigma of the binomial is about 460 */
				cr_assert(h + 500 >= want && h <= want + 500,
					  "order %d%d%d came %u times of %u", i,
					  j, k, h, trials);
			}
}

/* --- one copy for a machine's workers --------------------------------- */

static void load_small(struct kn__dataset *d)
{
	char err[512] = "";

	write_images("train", 0, N, (size_t)N * ROWS * COLS);
	write_labels("train", 0, N, 3);
	cr_assert_eq(kn__dataset_load(dir, "train", d, err, sizeof(err)), 0,
		     "%s", err);
}

Test(idx, a_shared_dataset_maps_back_equal_and_read_only)
{
	struct kn__dataset d, m;
	char err[512] = "";
	int fd;

	load_small(&d);
	cr_assert_eq(kn__dataset_share(&d, &fd), 0);
	cr_assert_eq(kn__dataset_map(fd, &m, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(m.count, d.count);
	cr_assert_eq(m.rows, d.rows);
	cr_assert_eq(m.cols, d.cols);
	cr_assert_eq((uintptr_t)m.x % 64, 0, "x is not 64-byte aligned");
	cr_assert_eq(memcmp(m.x, d.x, (size_t)N * ROWS * COLS * 4), 0);
	cr_assert_eq(memcmp(m.y, d.y, N), 0);
	/* sealed: nobody changes the workers' data under them */
	cr_assert_lt(pwrite(fd, "x", 1, 100), 0);
	cr_assert_eq(errno, EPERM);
	cr_assert_neq(ftruncate(fd, 1), 0);
	close(fd);
	kn__dataset_fini(&m);
	cr_assert_null(m.map);
	kn__dataset_fini(&d);
}

Test(idx, a_shared_dataset_that_is_not_ours_is_refused)
{
	struct kn__dataset d, m;
	char err[512] = "";
	char junk[4096] = "KNDATA1";
	int fd;

	/* a file without the seals, whatever its content */
	fd = memfd_create("not-kanel", MFD_ALLOW_SEALING);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
	cr_assert_eq(kn__dataset_map(fd, &m, err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, "not one kanel train made"), "%s", err);
	close(fd);
	/* ours, one label changed before the seals: refused by label */
	load_small(&d);
	d.y[5] = 10;
	cr_assert_eq(kn__dataset_share(&d, &fd), 0);
	cr_assert_eq(kn__dataset_map(fd, &m, err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, "label 5 is not below 10"), "%s", err);
	close(fd);
	kn__dataset_fini(&d);
}
