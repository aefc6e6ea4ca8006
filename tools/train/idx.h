/* SPDX-License-Identifier: Apache-2.0 */
/*
 * idx.h - the Fashion-MNIST reader of `kanel train`: IDX files (the
 * format of MNIST and Fashion-MNIST), gzip-compressed or plain, loaded
 * into one labelled image set with pixels scaled to [0, 1], and the
 * deterministic shuffle the trainer draws its minibatches with.
 *
 * Every input is checked before it is trusted (magic, dimensions, length,
 * trailing bytes, labels, image and label counts), because the files come
 * from wherever --data points.  On error a function returns a negative
 * errno and writes one sentence naming the file and the problem into the
 * caller's buffer @err (@errlen bytes, NUL-terminated, truncated if
 * needed; @err may be NULL when @errlen is 0):
 *   -ENOENT  a file is missing;
 *   -EINVAL  not a regular file (a FIFO, a device or a directory is
 *            refused before it is read, so a FIFO cannot hang the load);
 *            malformed content: a .gz file that is not gzip, bad magic,
 *            zero or absurd dimensions, truncated data, trailing bytes,
 *            a label >= 10, image and label counts that differ;
 *   -EIO     a corrupt gzip stream (bad deflate data, CRC mismatch, a
 *            stream cut short) or a read error;
 *   -ENOMEM, -ENAMETOOLONG, or the errno of open(2).
 * Nothing here keeps state: the functions are thread-safe on distinct
 * arguments, and they block only on file I/O.
 */
#ifndef KN_TRAIN_IDX_H
#define KN_TRAIN_IDX_H

#include <stddef.h>
#include <stdint.h>

/* IDX magics: two zero bytes, the element type (0x08 = unsigned byte), the
 * number of dimensions. */
#define KN_IDX_MAGIC_IMAGES 0x00000803u
#define KN_IDX_MAGIC_LABELS 0x00000801u

/* Where Debian's package dataset-fashion-mnist installs the data. */
#define KN_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

/* One labelled image set, pixels scaled to [0, 1]. */
struct kn__dataset {
	uint32_t count;	     /* images */
	uint32_t rows, cols; /* 28 x 28 for Fashion-MNIST */
	float *x;   /* count * rows * cols, row-major, 64-byte aligned */
	uint8_t *y; /* count labels, each < 10 */
	void *map;  /* kn__dataset_map's read-only mapping, or NULL */
	size_t map_len;
};

/*
 * kn__dataset_load - load DIR/PREFIX-images-idx3-ubyte(.gz) and
 * DIR/PREFIX-labels-idx1-ubyte(.gz), PREFIX being "train" or "t10k".
 * For each file the .gz name is tried first, then the plain name.  Pixel
 * bytes b become b / 255.0f.  @out is filled only on success; the caller
 * releases it with kn__dataset_fini().  Returns 0 or a negative errno
 * (see the top of this file); a missing file's message says that the
 * package dataset-fashion-mnist provides KN_FASHION_MNIST_DIR and that
 * --data DIR selects another copy.
 */
int kn__dataset_load(const char *dir, const char *prefix,
		     struct kn__dataset *out, char *err, size_t errlen);

/* kn__dataset_fini - free @d's arrays (or unmap them) and zero it;
 * NULL-safe, idempotent. */
void kn__dataset_fini(struct kn__dataset *d);

/*
 * kn__dataset_share - @d in a sealed anonymous file (memfd: a header,
 * the pixels 64-byte aligned, the labels), for the workers of one
 * machine to map instead of each loading its own copy.  The file can no
 * longer be written, grown or shrunk.  0 and its descriptor (not
 * close-on-exec, for the children) in @fd, or a negative errno.
 */
int kn__dataset_share(const struct kn__dataset *d, int *fd);

/*
 * kn__dataset_map - map the file kn__dataset_share made, read-only and
 * shared, into @out (its arrays point into the mapping).  The header is
 * checked against the file's size and seals, and every label again, as
 * for a file from disk (-EINVAL, with a sentence in @err).  @fd may be
 * closed afterwards.  0 or a negative errno.
 */
int kn__dataset_map(int fd, struct kn__dataset *out, char *err, size_t errlen);

/*
 * kn__idx_read - read the IDX file @path whose magic must be @magic
 * (KN_IDX_MAGIC_IMAGES or KN_IDX_MAGIC_LABELS).  A name ending in ".gz"
 * must hold gzip data; any other name is read as is (zlib's transparent
 * mode; gzip data under a plain name is decompressed all the same).  The
 * dimensions must be non-zero and describe less than 1 GiB.  On success
 * @dims holds the dimensions (those past the file's count set to 1),
 * @data a malloc'ed array the caller frees, and @len its size in bytes
 * (the product of @dims).  Returns 0 or a negative errno.
 */
int kn__idx_read(const char *path, uint32_t magic, uint32_t dims[3],
		 uint8_t **data, size_t *len, char *err, size_t errlen);

/*
 * kn__shuffle - fill @idx with a permutation of 0 .. @n - 1 drawn from
 * @seed: Fisher-Yates over xoshiro256** seeded through splitmix64, with
 * unbiased bounded draws.  The same seed gives the same permutation on
 * every machine.
 */
void kn__shuffle(uint32_t *idx, uint32_t n, uint64_t seed);

#endif /* KN_TRAIN_IDX_H */
