/* SPDX-License-Identifier: Apache-2.0 */
/*
 * job_util.c - whole jobs for the engine's tests (job_util.h).  The
 * processes are started, waited for and killed through launch/
 * (launch.h), as `kanel launch` starts its own; the roles run their
 * entry points in the forked child instead of an exec.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "job_util.h"
#include "launch.h"
#include "roles.h"

struct shared *sh;
static char listen_buf[64];

const char *transport(void)
{
	const char *t = getenv("KANEL_TEST_TRANSPORT");

	return t ? t : "tcp";
}

const char *host(void)
{
	const char *a = getenv("KANEL_RDMA_ADDR");
	const char *net = getenv("KANEL_TEST_HOST");

	if (net && *net)
		return net; /* tests/net/netns.sh: the workers are elsewhere */
	return strcmp(transport(), "verbs") == 0 && a ? a : "127.0.0.1";
}

/*
 * Move this process into worker @rank's network namespace, where
 * tests/net/netns.sh made one (KANEL_TEST_WORKER_NETNS names its
 * prefix); elsewhere nothing.
 */
static void enter_worker_netns(unsigned int rank)
{
	const char *prefix = getenv("KANEL_TEST_WORKER_NETNS");
	char path[128];
	int fd;

	if (!prefix || !*prefix)
		return;
	snprintf(path, sizeof(path), "/run/netns/%s%u", prefix, rank);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || setns(fd, CLONE_NEWNET)) {
		fprintf(stderr, "worker %u: cannot enter %s: %s\n", rank, path,
			strerror(errno));
		_exit(1);
	}
	close(fd);
}

int free_port(void)
{
	int port = kn__launch_free_port();

	cr_assert_gt(port, 0, "no free port: %s", strerror(-port));
	return port;
}

void write_secret(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	cr_assert(f);
	fputs(text, f);
	fclose(f);
	cr_assert_eq(chmod(path, 0600), 0);
}

/* The job's settings, as every process reads them. */
void job_env(struct job *j, unsigned int workers, unsigned int servers,
	     const char *sync, const char *opt, const char *lr)
{
	char n[16];

	snprintf(j->secret, sizeof(j->secret), "/tmp/kanel-test-%d.secret",
		 getpid());
	write_secret(j->secret, "the job's secret");
	snprintf(j->coordinator, sizeof(j->coordinator), "%s:%d", host(),
		 free_port());
	setenv("KANEL_COORDINATOR", j->coordinator, 1);
	setenv("KANEL_SECRET_FILE", j->secret, 1);
	snprintf(n, sizeof(n), "%u", workers);
	setenv("KANEL_WORKERS", n, 1);
	snprintf(n, sizeof(n), "%u", servers);
	setenv("KANEL_SERVERS", n, 1);
	setenv("KANEL_SYNC", sync, 1);
	setenv("KANEL_OPTIMIZER", opt, 1);
	setenv("KANEL_LR", lr, 1);
	setenv("KANEL_TRANSPORT", transport(), 1);
	setenv("KANEL_CHUNK_BYTES", "4096", 1); /* many chunks per tensor */
	/*
	 * Short, so that a dead worker is seen soon; in the rxe VM (qemu's
	 * TCG runs code several times slower) pinning a 32 MiB tensor in the
	 * progress thread took longer than 1 s, and the worker was removed
	 * while it registered.
	 */
	setenv("KANEL_HEARTBEAT_TIMEOUT",
	       getenv("KANEL_IN_RXE_VM") ? "4000ms" : "1000ms", 1);
	setenv("KANEL_STARTUP_TIMEOUT", "20", 1);
	if (strcmp(transport(), "verbs") == 0 || getenv("KANEL_TEST_HOST"))
		setenv("KANEL_LISTEN", strcat(strcpy(listen_buf, host()), ":0"),
		       1);
	j->nworkers = workers;
	j->nservers = servers;
}

/* Run a coordinator or server in a child process. */
pid_t spawn_role(const char *role, unsigned int rank)
{
	return spawn_role_logged(role, rank, NULL, NULL);
}

/* What a role's child is given (in the child's copy of our stack). */
struct role_arg {
	const char *role, *listen;
	unsigned int rank;
};

static int role_setup(void *arg)
{
	const struct role_arg *a = arg;

	if (a->listen)
		setenv("KANEL_LISTEN", a->listen, 1);
	return 0;
}

/* A coordinator or server: its entry point, its exit status. */
static int role_main(void *arg)
{
	const struct role_arg *a = arg;
	char r[16], err[256];
	char *argv[] = {
		"kanel", "--role", (char *)a->role, "--rank", r, NULL
	};
	struct kn__config cfg;
	uint8_t secret[64];
	size_t len;
	int ret;

	snprintf(r, sizeof(r), "%u", a->rank);
	if (kn__config_parse(5, argv, NULL, &cfg, err, sizeof(err))) {
		fprintf(stderr, "test: %s\n", err);
		return 2;
	}
	memcpy(secret, "the job's secret", 16);
	len = 16;
	ret = strcmp(a->role, "coordinator") == 0
		      ? kn__coordinator_run(&cfg, secret, len)
		      : kn__server_run(&cfg, secret, len);
	return ret ? 1 : 0;
}

pid_t spawn_role_logged(const char *role, unsigned int rank, const char *log,
			const char *listen)
{
	struct role_arg a = { .role = role, .listen = listen, .rank = rank };
	const struct kn__launch_child c = {
		.body = role_main,
		.setup = role_setup,
		.arg = &a,
		.role = role,
		.rank = rank,
		.log = log,
	};
	pid_t pid;
	int ret = kn__launch_spawn(&c, &pid, NULL);

	cr_assert_eq(ret, 0, "%s %u: cannot start: %s", role, rank,
		     strerror(-ret));
	return pid;
}

void start_job(struct job *j)
{
	start_job_logged(j, NULL, NULL, NULL);
}

void start_job_logged(struct job *j, const char *coord_log,
		      const char *server_log, const char *server_listen)
{
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
		  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(sh, MAP_FAILED);
	memset(sh, 0, sizeof(*sh));
	for (unsigned int w = 0; w < MAXW; w++)
		sh->status[w] = 999; /* not reported */
	j->coord = spawn_role_logged("coordinator", 0, coord_log, NULL);
	for (unsigned int s = 0; s < j->nservers; s++)
		j->servers[s] = spawn_role_logged("server", s, server_log,
						  server_listen);
}

struct worker_arg {
	worker_fn *fn;
	unsigned int rank;
};

/* A worker: @fn's result and time into the shared page; exits 0. */
static int worker_main(void *arg)
{
	const struct worker_arg *a = arg;
	unsigned int rank = a->rank;
	struct timespec t0, t1;
	int ret;

	enter_worker_netns(rank);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	ret = a->fn(rank);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	sh->seconds[rank] = (double)(t1.tv_sec - t0.tv_sec) +
			    (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
	sh->status[rank] = ret;
	return 0;
}

void spawn_worker(struct job *j, unsigned int rank, worker_fn *fn)
{
	struct worker_arg a = { .fn = fn, .rank = rank };
	const struct kn__launch_child c = { .body = worker_main, .arg = &a };
	pid_t pid;
	int ret = kn__launch_spawn(&c, &pid, NULL);

	cr_assert_eq(ret, 0, "worker %u: cannot start: %s", rank,
		     strerror(-ret));
	j->workers[rank] = pid;
}

/* Wait for @pid up to the deadline; its exit status, or -1. */
int reap(pid_t pid, double deadline)
{
	double left = deadline - (double)time(NULL);
	int st;

	if (kn__launch_wait(pid, kn__launch_now() + left, &st) == 0)
		return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
	kn__launch_kill(pid);
	return -1;
}

/* Every process of the job ends by itself once the workers are done. */
void end_job(struct job *j, bool expect_clean)
{
	double deadline = (double)time(NULL) + WAIT_S;

	for (unsigned int w = 0; w < j->nworkers; w++)
		if (j->workers[w] > 0)
			cr_assert_eq(reap(j->workers[w], deadline), 0,
				     "worker %u did not finish", w);
	for (unsigned int s = 0; s < j->nservers; s++) {
		int st = reap(j->servers[s], deadline);

		cr_assert_neq(st, -1, "server %u did not exit", s);
		if (expect_clean)
			cr_assert_eq(st, 0, "server %u failed", s);
	}
	cr_assert_neq(reap(j->coord, deadline), -1,
		      "the coordinator did not exit");
	unlink(j->secret);
}

void assert_workers_ok(unsigned int n)
{
	for (unsigned int w = 0; w < n; w++)
		cr_assert_eq(sh->status[w], 0, "worker %u: %s", w,
			     strerror(-sh->status[w]));
}

void run_job(unsigned int workers, unsigned int servers, const char *sync,
	     const char *opt, const char *lr, worker_fn *fn)
{
	struct job j = { 0 };

	job_env(&j, workers, servers, sync, opt, lr);
	start_job(&j);
	for (unsigned int w = 0; w < workers; w++)
		spawn_worker(&j, w, fn);
	end_job(&j, true);
	assert_workers_ok(workers);
}

int start_with(struct kn_worker *w, const char *name, size_t n, float *p,
	       float *g)
{
	int ret = kn_worker_register(w, name, KN_DTYPE_FP32, n, p, g);

	return ret ? ret : kn_worker_start(w);
}

int start_ab(struct kn_worker *w, size_t na, float *pa, float *ga, size_t nb,
	     float *pb, float *gb)
{
	int ret = kn_worker_register(w, "a", KN_DTYPE_FP32, na, pa, ga);

	return ret ? ret : start_with(w, "b", nb, pb, gb);
}

int end_worker(struct kn_worker *w, void *p, void *g, int ret)
{
	kn_worker_destroy(w);
	free(p);
	free(g);
	return ret;
}

struct kn_worker *join(unsigned int rank)
{
	struct kn_worker_options o = { .rank = (int)rank };
	struct kn_worker *w = NULL;
	int ret = kn_worker_create(&o, &w);

	if (ret) {
		fprintf(stderr, "worker %u: kn_worker_create: %s\n", rank,
			strerror(-ret));
		return NULL;
	}
	return w;
}
