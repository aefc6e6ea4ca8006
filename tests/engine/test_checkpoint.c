/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_checkpoint.c - servers' checkpoints: the file module alone
 * (written, listed, loaded; a torn, corrupted or foreign file found and
 * passed over; only the newest two kept), then whole jobs that write
 * them and a second job that goes on from them (--restore), compared
 * value for value with a job that was never interrupted.
 */
#include <criterion/criterion.h>
#include <openssl/evp.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint.h"
#include "kanel.h"
#include "job_util.h"

static char dir[64];

static void make_dir(void)
{
	strcpy(dir, "/tmp/kanel-ckpt-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
}

static void remove_dir(void)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char path[512];

	if (!d)
		return;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.') {
			snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
			unlink(path);
		}
	closedir(d);
	rmdir(dir);
}

static unsigned int files_in_dir(void)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	unsigned int n = 0;

	cr_assert_not_null(d);
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

/* ---- the file module ---- */

#define NCH 3
static const uint32_t counts[NCH] = { 1000, 7, 4096 };

/* Server 1's chunks 2, 5 and 9 at @version, values from @seed. */
static void fill(struct kn__ckpt_chunk *c, float *mem, uint32_t seed)
{
	float *p = mem;

	for (uint32_t i = 0; i < NCH; i++) {
		c[i] = (struct kn__ckpt_chunk){
			.idx = 2 + 3 * i + (i > 1),
			.count = counts[i],
			.step = seed * 10 + i,
			.round_w = 0.125f * (float)((seed + i) % 8),
			.round_full = (seed + i) % 3 == 0,
		};
		c[i].master = p;
		c[i].m = p + counts[i];
		c[i].v = p + 2 * counts[i];
		for (uint32_t k = 0; k < 3 * counts[i]; k++)
			p[k] = (float)(seed * 7 + i) + (float)k * 0.25f;
		p += 3 * counts[i];
	}
}

static size_t total(void)
{
	size_t n = 0;

	for (uint32_t i = 0; i < NCH; i++)
		n += 3 * counts[i];
	return n;
}

static void write_version(uint64_t version, uint32_t narrays)
{
	struct kn__ckpt_chunk c[NCH];
	float *mem = malloc(total() * sizeof(float));
	struct kn__ckpt *f;
	char err[512];

	cr_assert_not_null(mem);
	fill(c, mem, (uint32_t)version);
	cr_assert_eq(kn__ckpt_open(dir, 1, 2, version, narrays, c, NCH, &f,
				   err, sizeof(err)),
		     0, "%s", err);
	/* chunks come in any order, as they reach the version */
	for (int i = NCH - 1; i >= 0; i--) {
		cr_assert_not(kn__ckpt_whole(f));
		cr_assert_eq(kn__ckpt_put(f, (uint32_t)i, &c[i]), 0);
	}
	cr_assert(kn__ckpt_whole(f));
	cr_assert_eq(kn__ckpt_close(f, err, sizeof(err)), 0, "%s", err);
	free(mem);
}

/* Load @version and compare it with what write_version wrote; @round:
 * whether the file holds the round position (format 2 does). */
static void check_loaded(uint64_t version, uint32_t narrays, bool round)
{
	struct kn__ckpt_chunk want[NCH], got[NCH];
	float *a = malloc(total() * sizeof(float));
	float *b = calloc(total(), sizeof(float));
	char err[512];

	cr_assert(a && b);
	fill(want, a, (uint32_t)version);
	fill(got, b, 0);
	for (uint32_t i = 0; i < NCH; i++)
		got[i].step = 0;
	cr_assert_eq(kn__ckpt_load(dir, 1, 2, version, got, NCH, err,
				   sizeof(err)),
		     0, "%s", err);
	for (uint32_t i = 0; i < NCH; i++) {
		cr_expect_eq(got[i].step, want[i].step);
		cr_expect_eq(got[i].round_w, round ? want[i].round_w : 0,
			     "chunk %u's round: %g", i,
			     (double)got[i].round_w);
		cr_expect_eq(got[i].round_full,
			     round ? want[i].round_full : false,
			     "chunk %u's round_full", i);
		cr_expect_eq(memcmp(got[i].master, want[i].master,
				    counts[i] * sizeof(float)),
			     0, "chunk %u's master", i);
		for (uint32_t k = 0; k < counts[i]; k++) {
			/* arrays the file does not keep come back zeroed */
			float m = narrays > 1 ? want[i].m[k] : 0;
			float v = narrays > 2 ? want[i].v[k] : 0;

			cr_assert_eq(got[i].m[k], m, "chunk %u m[%u]", i, k);
			cr_assert_eq(got[i].v[k], v, "chunk %u v[%u]", i, k);
		}
	}
	free(a);
	free(b);
}

static void check_version(uint64_t version, uint32_t narrays)
{
	check_loaded(version, narrays, true);
}

static void list(uint64_t *v, uint32_t *n)
{
	cr_assert_eq(kn__ckpt_list(dir, 1, 2, v, 8, n, NULL, NULL), 0);
}

static char *file_of(uint64_t version)
{
	static char path[256];

	snprintf(path, sizeof(path), "%s/server-1.v%020llu.ckpt", dir,
		 (unsigned long long)version);
	return path;
}

/* Flip one byte at @off of @version's file (from its end if < 0). */
static void corrupt(uint64_t version, long off)
{
	int fd = open(file_of(version), O_RDWR);
	struct stat st;
	unsigned char b;

	cr_assert_geq(fd, 0);
	cr_assert_eq(fstat(fd, &st), 0);
	if (off < 0)
		off += st.st_size;
	cr_assert_eq(pread(fd, &b, 1, off), 1);
	b ^= 0x40;
	cr_assert_eq(pwrite(fd, &b, 1, off), 1);
	close(fd);
}

Test(checkpoint, written_listed_and_loaded_back, .init = make_dir,
     .fini = remove_dir)
{
	uint64_t v[8];
	uint32_t n;

	for (uint32_t narrays = 1; narrays <= 3; narrays++) {
		write_version(10 * narrays, narrays);
		check_version(10 * narrays, narrays);
	}
	list(v, &n);
	/* the newest two are kept */
	cr_assert_eq(n, 2);
	cr_expect_eq(v[0], 30);
	cr_expect_eq(v[1], 20);
	cr_expect_eq(files_in_dir(), 2);
}

/*
 * @version's file rewritten as format 1 wrote it: 64-byte table entries
 * (format 2's without the round position), the records 8 bytes per
 * chunk nearer, the head's digest made anew.
 */
static void make_format_1(uint64_t version)
{
	int fd = open(file_of(version), O_RDWR);
	struct stat st;
	char *buf, *out;
	uint32_t nchunks;
	size_t head = 72, e1 = 64, e2 = 72, tab, rest;
	unsigned int len;

	cr_assert_geq(fd, 0);
	cr_assert_eq(fstat(fd, &st), 0);
	buf = malloc((size_t)st.st_size);
	out = malloc((size_t)st.st_size);
	cr_assert(buf && out);
	cr_assert_eq(pread(fd, buf, (size_t)st.st_size, 0), st.st_size);
	memcpy(&nchunks, buf + 20, 4);
	tab = nchunks * e1;
	rest = (size_t)st.st_size - head - nchunks * e2;
	memcpy(out, buf, head);
	memcpy(out + 8, &(uint32_t){ 1 }, 4); /* format */
	for (uint32_t i = 0; i < nchunks; i++) {
		char *e = out + head + i * e1;
		uint64_t off;

		memcpy(e, buf + head + i * e2, e1);
		memcpy(&off, e + 16, 8);
		off -= nchunks * (e2 - e1);
		memcpy(e + 16, &off, 8);
	}
	memcpy(out + head + tab, buf + head + nchunks * e2, rest);
	/* the digest of the head (its digest zeroed) and the table */
	memset(out + 40, 0, 32);
	cr_assert(EVP_Digest(out, head + tab, (unsigned char *)buf, &len,
			     EVP_sha256(), NULL));
	memcpy(out + 40, buf, 32);
	cr_assert_eq(ftruncate(fd, 0), 0);
	cr_assert_eq(pwrite(fd, out, head + tab + rest, 0),
		     (ssize_t)(head + tab + rest));
	close(fd);
	free(buf);
	free(out);
}

/* A file of format 1 (written before the round position was kept) is
 * still listed and loaded, with a round starting afresh. */
Test(checkpoint, a_format_1_file_loads_without_the_round, .init = make_dir,
     .fini = remove_dir)
{
	uint64_t v[8];
	uint32_t n;

	write_version(7, 2);
	make_format_1(7);
	list(v, &n);
	cr_assert_eq(n, 1);
	cr_expect_eq(v[0], 7);
	check_loaded(7, 2, false);
}

Test(checkpoint, a_corrupted_record_is_passed_over, .init = make_dir,
     .fini = remove_dir)
{
	uint64_t v[8];
	uint32_t n;
	struct kn__ckpt_chunk c[NCH];
	float *mem = calloc(total(), sizeof(float));

	write_version(4, 3);
	write_version(8, 3);
	corrupt(8, -5); /* inside the last chunk's record */
	list(v, &n);
	cr_assert_eq(n, 1);
	cr_expect_eq(v[0], 4);
	fill(c, mem, 0);
	cr_expect_eq(kn__ckpt_load(dir, 1, 2, 8, c, NCH, NULL, 0), -EBADMSG);
	check_version(4, 3);
	free(mem);
}

Test(checkpoint, a_torn_file_or_header_is_passed_over, .init = make_dir,
     .fini = remove_dir)
{
	uint64_t v[8];
	uint32_t n;
	struct stat st;

	write_version(4, 2);
	write_version(8, 2);
	cr_assert_eq(stat(file_of(8), &st), 0);
	cr_assert_eq(truncate(file_of(8), st.st_size - 100), 0);
	list(v, &n);
	cr_assert_eq(n, 1);
	cr_expect_eq(v[0], 4);
	corrupt(4, 20); /* the head */
	list(v, &n);
	cr_expect_eq(n, 0);
}

Test(checkpoint, an_unsealed_file_is_no_checkpoint, .init = make_dir,
     .fini = remove_dir)
{
	struct kn__ckpt_chunk c[NCH];
	float *mem = calloc(total(), sizeof(float));
	struct kn__ckpt *f;
	uint64_t v[8];
	uint32_t n;

	fill(c, mem, 3);
	cr_assert_eq(kn__ckpt_open(dir, 1, 2, 3, 1, c, NCH, &f, NULL, 0), 0);
	cr_assert_eq(kn__ckpt_put(f, 0, &c[0]), 0);
	cr_expect_eq(kn__ckpt_put(f, 0, &c[0]), -EINVAL); /* twice */
	cr_expect_eq(kn__ckpt_put(f, NCH, &c[0]), -EINVAL);
	list(v, &n);
	cr_expect_eq(n, 0); /* only NAME.tmp so far */
	/* closing with a chunk missing fails and leaves nothing */
	cr_expect_eq(kn__ckpt_close(f, NULL, 0), -EINVAL);
	cr_expect_eq(files_in_dir(), 0);
	cr_assert_eq(kn__ckpt_open(dir, 1, 2, 3, 1, c, NCH, &f, NULL, 0), 0);
	kn__ckpt_abort(f);
	cr_expect_eq(files_in_dir(), 0);
	kn__ckpt_abort(NULL);
	free(mem);
}

Test(checkpoint, another_layout_is_refused, .init = make_dir,
     .fini = remove_dir)
{
	struct kn__ckpt_chunk c[NCH];
	float *mem = calloc(total(), sizeof(float));
	uint64_t v[8];
	uint32_t n = 99;
	char err[512] = "";

	write_version(5, 1);
	fill(c, mem, 0);
	c[1].count = 8;
	cr_expect_eq(kn__ckpt_load(dir, 1, 2, 5, c, NCH, err, sizeof(err)),
		     -EINVAL);
	cr_expect(strstr(err, "chunk 5"), "%s", err);
	c[1].count = counts[1];
	/* another job's server count */
	cr_expect_eq(kn__ckpt_load(dir, 1, 3, 5, c, NCH, err, sizeof(err)),
		     -EINVAL, "%s", err);
	cr_expect_eq(kn__ckpt_list(dir, 1, 3, v, 8, &n, NULL, NULL), 0);
	cr_expect_eq(n, 0);
	cr_expect_eq(kn__ckpt_list("/nonexistent/kanel", 1, 2, v, 8, &n, NULL,
				   NULL),
		     -ENOENT);
	free(mem);
}

/* ---- whole jobs: written, then restored ---- */

#define LEN_A 5000 /* 5 chunks of 4 KiB over 2 servers */
#define LEN_B 3
#define PROBE 64 /* values reported per worker */

static unsigned int first_round, rounds;
static bool restoring;
static const char *run_sync = "bsp"; /* run()'s protocol... */
static unsigned int run_workers = 2; /* ... and workers */

static float grad_value(unsigned int rank, unsigned int round, size_t i)
{
	return (float)((rank + 1) * (round + 1)) * 0.25f + (float)(i % 4);
}

/*
 * Rounds first_round.. of BSP; the model's values at PROBE places are
 * reported.  A restoring job's workers start from garbage, rank 0 too:
 * what they hold after the start must be the file's.
 */
static int ckpt_worker(unsigned int rank)
{
	float *pa = malloc(LEN_A * 4), *ga = malloc(LEN_A * 4);
	float pb[LEN_B], gb[LEN_B];
	struct kn_worker *w = join(rank);
	int ret = w && pa && ga ? 0 : -ENOMEM;

	for (size_t i = 0; i < LEN_A; i++)
		pa[i] = rank == 0 && !restoring ? (float)(i % 16) * 0.125f
						: -1000;
	for (size_t i = 0; i < LEN_B; i++)
		pb[i] = rank == 0 && !restoring ? 1 : -1000;
	if (!ret)
		ret = kn_worker_register(w, "a", KN_DTYPE_FP32, LEN_A, pa, ga);
	if (!ret)
		ret = kn_worker_register(w, "b", KN_DTYPE_FP32, LEN_B, pb, gb);
	if (!ret)
		ret = kn_worker_start(w);
	for (size_t i = 0; !ret && i < LEN_A; i++)
		if (pa[i] == -1000)
			ret = -EBADMSG; /* the start brought no model */
	for (unsigned int r = first_round; !ret && r < first_round + rounds;
	     r++) {
		for (size_t i = 0; i < LEN_A; i++)
			ga[i] = grad_value(rank, r, i);
		for (size_t i = 0; i < LEN_B; i++)
			gb[i] = grad_value(rank, r, i);
		ret = kn_worker_step(w, NULL);
	}
	for (size_t k = 0; k < PROBE - 1; k++)
		sh->values[rank][k] = pa[k * (LEN_A / PROBE)];
	sh->values[rank][PROBE - 1] = pb[2];
	kn_worker_destroy(w);
	free(pa);
	free(ga);
	return ret;
}

/*
 * A 2-worker, 2-server BSP job with momentum (run_sync, run_workers
 * otherwise), rounds @first.. @first + @n - 1, checkpoints every 2
 * versions into @ckdir (NULL: none); with @restore, started from them.
 * Worker 0's probe values into @out.
 */
static void run(const char *ckdir, bool restore, unsigned int first,
		unsigned int n, float *out, bool expect_clean)
{
	struct job j = { 0 };

	first_round = first;
	rounds = n;
	restoring = restore;
	job_env(&j, run_workers, 2, run_sync, "momentum", "0.5");
	setenv("KANEL_MOMENTUM", "0.5", 1);
	if (ckdir) {
		setenv("KANEL_CHECKPOINT_DIR", ckdir, 1);
		setenv("KANEL_CHECKPOINT_EVERY", "2", 1);
	} else {
		unsetenv("KANEL_CHECKPOINT_DIR");
	}
	setenv("KANEL_RESTORE", restore ? "1" : "0", 1);
	start_job(&j);
	memset(sh->values, 0, sizeof(sh->values));
	for (unsigned int w = 0; w < run_workers; w++)
		spawn_worker(&j, w, ckpt_worker);
	end_job(&j, expect_clean);
	if (out)
		memcpy(out, sh->values[0], PROBE * sizeof(float));
	unsetenv("KANEL_CHECKPOINT_DIR");
	unsetenv("KANEL_CHECKPOINT_EVERY");
	unsetenv("KANEL_RESTORE");
	unsetenv("KANEL_MOMENTUM");
}

static void expect_same(const float *a, const float *b)
{
	for (int k = 0; k < PROBE; k++)
		cr_expect_eq(a[k], b[k], "value %d: %g, uninterrupted %g", k,
			     (double)b[k], (double)a[k]);
}

/*
 * ASP's servers turn the velocity once per round's worth of shares; one
 * worker's push is a round, so after every push the next one turns it.
 * That position is in the file: four pushes in one job, and two then two
 * more in a job restored from version 2, give the same model to the bit
 * (a restore that started the round afresh skipped a turn).
 */
Test(checkpoint, a_restored_asp_job_turns_its_velocity_on_time,
     .init = make_dir, .fini = remove_dir, .timeout = 240)
{
	float whole[PROBE], resumed[PROBE];

	run_sync = "asp";
	run_workers = 1;
	run(NULL, false, 0, 4, whole, true);
	cr_assert_eq(sh->status[0], 0, "%s", strerror(-sh->status[0]));
	run(dir, false, 0, 2, NULL, true);
	cr_assert_eq(sh->status[0], 0, "%s", strerror(-sh->status[0]));
	run(dir, true, 2, 2, resumed, true);
	cr_assert_eq(sh->status[0], 0, "%s", strerror(-sh->status[0]));
	expect_same(whole, resumed);
}

/*
 * Six rounds in one job, and four rounds then two more in a job restored
 * from the first's last checkpoint (version 4): the same model to the
 * bit, so the servers' momentum came back with the parameters.
 */
Test(checkpoint, a_restored_job_goes_on_exactly, .init = make_dir,
     .fini = remove_dir, .timeout = 240)
{
	float whole[PROBE], resumed[PROBE];

	run(NULL, false, 0, 6, whole, true);
	cr_assert_eq(sh->status[0], 0, "%s", strerror(-sh->status[0]));
	run(dir, false, 0, 4, NULL, true);
	cr_assert_eq(sh->status[0], 0, "%s", strerror(-sh->status[0]));
	/* versions 2 and 4 of both servers */
	cr_expect_eq(files_in_dir(), 4);
	run(dir, true, 4, 2, resumed, true);
	for (unsigned int w = 0; w < 2; w++)
		cr_assert_eq(sh->status[w], 0, "worker %u: %s", w,
			     strerror(-sh->status[w]));
	expect_same(whole, resumed);
	cr_expect_neq(sh->values[1][0], -1000);
	cr_expect_eq(memcmp(sh->values[0], sh->values[1],
			    PROBE * sizeof(float)),
		     0, "the two workers hold different models");
}

/*
 * Server 1's newest file damaged: the newest version both servers hold
 * intact is 2, and the job goes on from there (two rounds from version
 * 2 equal four uninterrupted rounds).
 */
Test(checkpoint, a_damaged_newest_file_falls_back_to_the_one_before,
     .init = make_dir, .fini = remove_dir, .timeout = 240)
{
	float whole[PROBE], resumed[PROBE];
	char path[256];
	int fd;

	run(NULL, false, 0, 4, whole, true);
	run(dir, false, 0, 4, NULL, true);
	snprintf(path, sizeof(path), "%s/server-1.v%020llu.ckpt", dir, 4ULL);
	fd = open(path, O_WRONLY);
	cr_assert_geq(fd, 0);
	cr_assert_eq(pwrite(fd, "junk", 4, 300), 4);
	close(fd);
	run(dir, true, 2, 2, resumed, true);
	cr_assert_eq(sh->status[0], 0, "%s", strerror(-sh->status[0]));
	expect_same(whole, resumed);
}

/* Nothing to restore from: the workers' start fails, nobody hangs. */
Test(checkpoint, restoring_without_checkpoints_fails_clearly,
     .init = make_dir, .fini = remove_dir, .timeout = 120)
{
	run(dir, true, 0, 1, NULL, false);
	for (unsigned int w = 0; w < 2; w++)
		cr_expect_neq(sh->status[w], 0, "worker %u started", w);
}

/* ---- a server lost mid-job ---- */

#define LIVE_STEPS 60
#define LIVE_G(rank) ((float)(rank + 1)) /* each rank's constant gradient */

/*
 * LIVE_STEPS successful BSP steps of a constant gradient, 20 ms apart,
 * rejoining (a new worker, the same rank) whenever a step fails, as a
 * program that survives a server's loss does.  The number of rejoins
 * goes into values[rank][PROBE - 1].
 */
static int live_worker(unsigned int rank)
{
	float *pa = malloc(LEN_A * 4), *ga = malloc(LEN_A * 4);
	struct kn_worker *w = NULL;
	unsigned int done = 0, rejoins = 0;
	int ret = pa && ga ? 0 : -ENOMEM;

	for (size_t i = 0; i < LEN_A; i++)
		pa[i] = rank == 0 ? 100 : -1000;
	while (!ret && done < LIVE_STEPS) {
		if (!w) {
			struct kn_worker_options o = { .rank = (int)rank };

			ret = kn_worker_create(&o, &w);
			if (!ret)
				ret = kn_worker_register(w, "a", KN_DTYPE_FP32,
							 LEN_A, pa, ga);
			if (!ret)
				ret = kn_worker_start(w);
			if (ret)
				break;
		}
		for (size_t i = 0; i < LEN_A; i++)
			ga[i] = LIVE_G(rank);
		usleep(20000);
		ret = kn_worker_step(w, NULL);
		if (!ret) {
			done++;
		} else if (rejoins < 3) {
			kn_worker_destroy(w);
			w = NULL;
			rejoins++;
			ret = 0;
		}
	}
	for (size_t k = 0; k < PROBE - 1; k++)
		sh->values[rank][k] = pa[k * (LEN_A / PROBE)];
	sh->values[rank][PROBE - 1] = (float)rejoins;
	kn_worker_destroy(w);
	free(pa);
	free(ga);
	return ret;
}

/* Whether both servers' files of @version are there, by @deadline. */
static bool wait_for_checkpoints(uint64_t version, double deadline)
{
	char path[256];
	unsigned int s = 0;

	while (s < 2 && time(NULL) < deadline) {
		snprintf(path, sizeof(path), "%s/server-%u.v%020llu.ckpt", dir,
			 s, (unsigned long long)version);
		if (access(path, F_OK) == 0)
			s++;
		else
			usleep(2000);
	}
	return s == 2;
}

/*
 * Server 1 killed after about a quarter of the steps and started again:
 * the job goes on and ends, every worker having rejoined once.  With a
 * constant gradient the model after K applied rounds is 100 - K * lr *
 * mean(g), so every value names the K it is at: one K for all of a
 * worker's values means both servers went back to the same version, and
 * K is at least the checkpoint's.
 */
Test(checkpoint, a_killed_server_is_restarted_and_the_job_goes_on,
     .init = make_dir, .fini = remove_dir, .timeout = 240)
{
	struct job j = { 0 };
	const float step = 0.5f * (LIVE_G(0) + LIVE_G(1)) / 2;
	float kw[2], lone;
	unsigned int lo;

	job_env(&j, 2, 2, "bsp", "sgd", "0.5");
	setenv("KANEL_CHECKPOINT_DIR", dir, 1);
	setenv("KANEL_CHECKPOINT_EVERY", "8", 1);
	start_job(&j);
	memset(sh->values, 0, sizeof(sh->values));
	for (unsigned int w = 0; w < 2; w++)
		spawn_worker(&j, w, live_worker);
	/*
	 * Killed once both servers hold version 16: a fixed wait (800 ms)
	 * was once not enough, under a sanitizer build beside other tests,
	 * for the job even to start, and a server lost before the start
	 * ends the job.
	 */
	cr_assert(wait_for_checkpoints(16, (double)time(NULL) + 60),
		  "no checkpoint of version 16 within 60 s");
	kill(j.servers[1], SIGKILL);
	cr_assert_eq(reap(j.servers[1], (double)time(NULL) + 10), 128);
	j.servers[1] = spawn_role("server", 1);
	end_job(&j, true);
	unsetenv("KANEL_CHECKPOINT_DIR");
	unsetenv("KANEL_CHECKPOINT_EVERY");
	for (unsigned int w = 0; w < 2; w++) {
		cr_assert_eq(sh->status[w], 0, "worker %u: %s", w,
			     strerror(-sh->status[w]));
		cr_expect_eq(sh->values[w][PROBE - 1], 1.0f,
			     "worker %u rejoined %g times", w,
			     (double)sh->values[w][PROBE - 1]);
	}
	for (unsigned int w = 0; w < 2; w++) {
		kw[w] = (100 - sh->values[w][0]) / step;
		for (int k = 1; k < PROBE - 1; k++)
			cr_assert_eq(sh->values[w][k], sh->values[w][0],
				     "worker %u value %d: %g rounds, value 0 "
				     "%g: the servers at different versions",
				     w, k,
				     (double)((100 - sh->values[w][k]) / step),
				     (double)kw[w]);
	}
	lo = kw[1] < kw[0];
	cr_assert_eq(kw[lo], (float)(int)kw[lo], "worker %u: %g rounds", lo,
		     (double)kw[lo]);
	/*
	 * The step a worker's loss cut short may have been applied and
	 * checkpointed before its pull failed (a kill just after a version
	 * was written).  If so for both, that is one round more than
	 * LIVE_STEPS; for one alone, it makes one more step after the other
	 * has finished: a round of its gradient only, lr * g more.
	 */
	lone = 0.5f * LIVE_G(!lo) / step;
	cr_assert(kw[!lo] == kw[lo] || fabsf(kw[!lo] - kw[lo] - lone) < 1e-3f,
		  "worker 0 at %g rounds, worker 1 at %g", (double)kw[0],
		  (double)kw[1]);
	/*
	 * K = V + the steps after the rejoin, V the checkpoint gone back
	 * to: the rounds lost are those after it (fewer than 8, and the
	 * one the loss cut short).
	 */
	cr_expect_geq(kw[lo], LIVE_STEPS - 9, "%g rounds", (double)kw[lo]);
	cr_expect_leq(kw[lo], LIVE_STEPS + 1, "%g rounds", (double)kw[lo]);
}
