/* SPDX-License-Identifier: Apache-2.0 */
/*
 * job_util.h - whole jobs for the engine's tests: the job's settings in
 * the environment, the coordinator and servers as child processes (the
 * roles' entry points), workers as child processes on the public API,
 * and reaping them with a deadline.  Shared by test_e2e.c and
 * test_hostile.c.
 */
#ifndef KN_TEST_JOB_UTIL_H
#define KN_TEST_JOB_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kanel.h"

#define MAXW   8
#define WAIT_S 60 /* deadline of every wait, seconds */

struct job {
	pid_t coord, servers[4], workers[MAXW];
	unsigned int nservers, nworkers;
	char secret[64];
	char coordinator[64];
};

/* What the workers report back: shared with the test's process. */
struct shared {
	int status[MAXW];
	double seconds[MAXW];
	float values[MAXW][64];
	int arrived; /* a barrier's count, for tests whose workers need one */
	uint64_t hash[MAXW]; /* of a worker's final model, where a test wants */
	char text[MAXW][256]; /* kn_last_message after a failure, where kept */
};

/* Shared with the workers (MAP_SHARED), made by start_job(). */
extern struct shared *sh;

typedef int worker_fn(unsigned int rank);

/* KANEL_TEST_TRANSPORT, tcp by default; the address to use with it. */
const char *transport(void);
const char *host(void);
/* A loopback port that was free a moment ago. */
int free_port(void);
/* A secret file (mode 0600) with @text. */
void write_secret(const char *path, const char *text);
void job_env(struct job *j, unsigned int workers, unsigned int servers,
	     const char *sync, const char *opt, const char *lr);
/* A coordinator or server in a child; its stderr into @log, listening
 * on @listen (either NULL: inherited, the job's default). */
pid_t spawn_role(const char *role, unsigned int rank);
pid_t spawn_role_logged(const char *role, unsigned int rank, const char *log,
			const char *listen);
void start_job(struct job *j);
/* The same, the coordinator's and servers' stderr into files (NULL: not),
 * the servers listening on @server_listen (NULL: the job's default). */
void start_job_logged(struct job *j, const char *coord_log,
		      const char *server_log, const char *server_listen);
void spawn_worker(struct job *j, unsigned int rank, worker_fn *fn);
/* Wait for @pid until @deadline (time()); its exit status, or -1. */
int reap(pid_t pid, double deadline);
void end_job(struct job *j, bool expect_clean);
/* Fail the test unless workers 0 to @n - 1 all reported 0. */
void assert_workers_ok(unsigned int n);
/* A whole job that must end clean, its @workers workers running @fn and
 * all reporting 0 (job_env()'s settings). */
void run_job(unsigned int workers, unsigned int servers, const char *sync,
	     const char *opt, const char *lr, worker_fn *fn);
struct kn_worker *join(unsigned int rank);
/* A worker function's end: destroy @w, free its parameters @p and
 * gradients @g (malloc'd), and return @ret. */
int end_worker(struct kn_worker *w, void *p, void *g, int ret);
/* Register fp32 tensor @name (@n values at @p, gradients at @g) with
 * @w, and start it: 0 or the error. */
int start_with(struct kn_worker *w, const char *name, size_t n, float *p,
	       float *g);
/* Register fp32 tensors "a" (@na values, at @pa, gradients at @ga) and
 * "b" (@nb at @pb and @gb) with @w, and start it: 0 or the error. */
int start_ab(struct kn_worker *w, size_t na, float *pa, float *ga, size_t nb,
	     float *pb, float *gb);

#endif /* KN_TEST_JOB_UTIL_H */
