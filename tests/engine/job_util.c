/* SPDX-License-Identifier: Apache-2.0 */
/* job_util.c - whole jobs for the engine's tests (job_util.h). */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "job_util.h"
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
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	port = ntohs(a.sin_port);
	close(fd);
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

pid_t spawn_role_logged(const char *role, unsigned int rank, const char *log,
			const char *listen)
{
	pid_t pid = fork();

	cr_assert_geq(pid, 0);
	if (pid == 0) {
		char r[16], err[256];
		char *argv[] = { "kanel",  "--role", (char *)role,
				 "--rank", r,	     NULL };
		struct kn__config cfg;
		uint8_t secret[64];
		size_t len;
		int ret;

		snprintf(r, sizeof(r), "%u", rank);
		if (log) {
			int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);

			if (fd < 0 || dup2(fd, 2) < 0)
				_exit(3);
			close(fd);
		}
		if (listen)
			setenv("KANEL_LISTEN", listen, 1);
		if (kn__config_parse(5, argv, NULL, &cfg, err, sizeof(err))) {
			fprintf(stderr, "test: %s\n", err);
			_exit(2);
		}
		memcpy(secret, "the job's secret", 16);
		len = 16;
		ret = strcmp(role, "coordinator") == 0
			      ? kn__coordinator_run(&cfg, secret, len)
			      : kn__server_run(&cfg, secret, len);
		_exit(ret ? 1 : 0);
	}
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

void spawn_worker(struct job *j, unsigned int rank, worker_fn *fn)
{
	pid_t pid = fork();

	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct timespec t0, t1;
		int ret;

		enter_worker_netns(rank);
		clock_gettime(CLOCK_MONOTONIC, &t0);
		ret = fn(rank);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		sh->seconds[rank] = (double)(t1.tv_sec - t0.tv_sec) +
				    (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
		sh->status[rank] = ret;
		_exit(0);
	}
	j->workers[rank] = pid;
}

/* Wait for @pid up to the deadline; its exit status, or -1. */
int reap(pid_t pid, double deadline)
{
	int st;

	while (time(NULL) < deadline) {
		pid_t got = waitpid(pid, &st, WNOHANG);

		if (got == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
		usleep(20000);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
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
