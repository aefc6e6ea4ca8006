/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_engine_procs.c - bench_engine's processes (bench_engine.h): the
 * coordinator and the servers of a job, children of the `kanel` binary
 * started, watched and stopped through launch/ (launch.h) as `kanel
 * launch` does, their logs, the job's secret and variables, and the
 * clean-up that leaves no child and no secret behind on any exit.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_engine.h"
#include "launch.h"

static struct child children[MAX_CHILDREN];
static unsigned int nchildren;
/* the baseline's co-process, for the whole run (below) */
struct child tp_proc = { .name = "bench_transport --serve-stream" };
static char tmpdir[256];
char secret_path[300];

/* On any exit: no child outlives us, no secret stays behind. */
void cleanup(void)
{
	if (tp_proc.pid > 0) {
		kn__launch_kill(tp_proc.pid);
		tp_proc.pid = 0;
	}
	for (unsigned int i = 0; i < nchildren; i++)
		if (children[i].pid > 0) {
			kn__launch_kill(children[i].pid);
			children[i].pid = 0;
		}
	for (unsigned int i = 0; i < nchildren; i++)
		unlink(children[i].log);
	nchildren = 0;
	if (secret_path[0])
		unlink(secret_path);
	if (tmpdir[0])
		rmdir(tmpdir);
}

/* The last lines of a child's log, to stderr. */
void show_log(const struct child *c)
{
	char buf[2048];
	FILE *f = fopen(c->log, "r");
	size_t n;
	long end;

	if (!f) /* or no log: the co-process's stderr is ours */
		return;
	fseek(f, 0, SEEK_END);
	end = ftell(f);
	fseek(f, end > (long)sizeof(buf) - 1 ? end - (long)sizeof(buf) + 1 : 0,
	      SEEK_SET);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = 0;
	fclose(f);
	fprintf(stderr, "bench_engine: --- the end of %s's output (%s) ---\n%s",
		c->name, c->log, buf);
	if (n && buf[n - 1] != '\n')
		fputc('\n', stderr);
}

void __attribute__((noreturn)) child_died(struct child *c, int st)
{
	char how[64];

	fprintf(stderr, "bench_engine: %s (pid %d) %s\n", c->name, (int)c->pid,
		kn__launch_strstatus(st, how, sizeof(how)));
	c->pid = 0;
	show_log(c);
	exit(1);
}

/* Every child still running?  One that is not ends the run. */
void children_check(void)
{
	for (unsigned int i = 0; i < nchildren; i++) {
		struct child *c = &children[i];
		int st;

		if (c->pid > 0 && kn__launch_wait(c->pid, 0, &st) == 0)
			child_died(c, st);
	}
}

/* A 32-byte random secret in a 0600 file of a fresh temporary folder. */
void make_secret(void)
{
	uint8_t key[32];
	int fd;

	snprintf(tmpdir, sizeof(tmpdir), "%s/bench-engine-XXXXXX",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(tmpdir)) {
		tmpdir[0] = 0;
		bench_check(-errno, "mkdtemp");
	}
	snprintf(secret_path, sizeof(secret_path), "%s/secret", tmpdir);
	fd = open(secret_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		bench_check(-errno, "creating the secret file");
	if (getentropy(key, sizeof(key)) ||
	    write(fd, key, sizeof(key)) != (ssize_t)sizeof(key))
		bench_check(-EIO, "writing the secret file");
	memset(key, 0, sizeof(key));
	close(fd);
}

/* A free TCP port on 127.0.0.1 (the coordinator binds it right after). */
int free_port(void)
{
	int port = kn__launch_free_port();

	bench_check(port, "finding a free port");
	return port;
}

/*
 * Wait until something listens on TCP @port (the coordinator), as
 * /proc/net/tcp shows it, so that the workers' first connect does not
 * meet a closed port (they would retry, but log it).  Without
 * /proc/net/tcp the workers' retries do the waiting.
 */
void wait_listening(int port)
{
	double deadline = bench_now_ns() + WAIT_S * 1e9;
	char line[256], want[16];

	snprintf(want, sizeof(want), ":%04X ", port);
	for (;;) {
		FILE *f = fopen("/proc/net/tcp", "r");
		bool up = false;

		if (!f)
			return;
		while (!up && fgets(line, sizeof(line), f)) {
			/* "sl local_address rem_address st ...", st 0A: LISTEN */
			char local[64], remote[64], st[8];

			if (sscanf(line, "%*s %62s %63s %7s", local, remote,
				   st) == 3 &&
			    strstr(strcat(local, " "), want) &&
			    strcmp(st, "0A") == 0)
				up = true;
		}
		fclose(f);
		if (up)
			return;
		children_check();
		if (bench_now_ns() > deadline) {
			fprintf(stderr,
				"bench_engine: waited %d s for the coordinator "
				"to listen on port %d\n",
				WAIT_S, port);
			show_log(&children[0]);
			exit(1);
		}
		usleep(2000);
	}
}

/*
 * In a child, before its exec: SIGPIPE's default action, which ours is
 * not (main() ignores it, for the co-process's pipe).
 */
int sigpipe_default(void *arg)
{
	(void)arg;
	signal(SIGPIPE, SIG_DFL);
	return 0;
}

/* Start `kanel ROLE` with KANEL_ROLE and KANEL_RANK, output to its log. */
void spawn(const char *role, unsigned int rank)
{
	struct child *c = &children[nchildren];
	char *argv[3] = { cfg.kanel, (char *)role, NULL };
	const struct kn__launch_child lc = {
		.argv = argv,
		.setup = sigpipe_default,
		.role = role,
		.rank = rank,
		.log = c->log,
		.log_stdout = true,
	};
	int ret;

	if (strcmp(role, "server") == 0)
		snprintf(c->name, sizeof(c->name), "server %u", rank);
	else
		snprintf(c->name, sizeof(c->name), "%s", role);
	snprintf(c->log, sizeof(c->log), "%s/%s%u.log", tmpdir, role, rank);
	ret = kn__launch_spawn(&lc, &c->pid, NULL);
	if (ret) {
		fprintf(stderr, "bench_engine: cannot start %s %s: %s\n",
			cfg.kanel, role, strerror(-ret));
		exit(1);
	}
	nchildren++;
}

/*
 * The job is over (every worker left, and the coordinator and servers
 * would end by themselves within a second): SIGTERM, reap, and SIGKILL
 * what is still there after 5 s.
 */
void children_stop(void)
{
	double deadline = kn__launch_now() + 5;

	for (unsigned int i = 0; i < nchildren; i++)
		if (children[i].pid > 0)
			kill(children[i].pid, SIGTERM);
	for (unsigned int i = 0; i < nchildren; i++) {
		struct child *c = &children[i];

		if (c->pid > 0 &&
		    kn__launch_wait(c->pid, deadline, NULL) == -ETIMEDOUT) {
			fprintf(stderr,
				"bench_engine: %s (pid %d) ignored SIGTERM for "
				"5 s: killed\n",
				c->name, (int)c->pid);
			kn__launch_kill(c->pid);
		}
		c->pid = 0;
	}
	for (unsigned int i = 0; i < nchildren; i++)
		unlink(children[i].log);
	nchildren = 0;
}

/* The last lines of every child's log, to stderr. */
void children_show_logs(void)
{
	for (unsigned int c = 0; c < nchildren; c++)
		show_log(&children[c]);
}

/* --stages: the job's figures file (KANEL_METRICS), one per job. */
char metrics_path[320];

/* Set the job's variables, which the children and the workers read. */
void job_env(size_t workers, size_t servers, int port)
{
	char v[64];

	snprintf(v, sizeof(v), "127.0.0.1:%d", port);
	setenv("KANEL_COORDINATOR", v, 1);
	snprintf(v, sizeof(v), "%zu", workers);
	setenv("KANEL_WORKERS", v, 1);
	snprintf(v, sizeof(v), "%zu", servers);
	setenv("KANEL_SERVERS", v, 1);
	setenv("KANEL_SECRET_FILE", secret_path, 1);
	setenv("KANEL_SYNC", "bsp", 1);
	setenv("KANEL_OPTIMIZER", "sgd", 1);
	snprintf(v, sizeof(v), "%g", LR);
	setenv("KANEL_LR", v, 1);
	snprintf(v, sizeof(v), "%zu", cfg.chunk_bytes);
	setenv("KANEL_CHUNK_BYTES", v, 1);
	snprintf(v, sizeof(v), "%zu", cfg.fuse_bytes);
	setenv("KANEL_FUSE_BYTES", v, 1);
	snprintf(v, sizeof(v), "%zu", cfg.push_window);
	setenv("KANEL_PUSH_WINDOW", v, 1);
	if (cfg.stages) {
		snprintf(metrics_path, sizeof(metrics_path), "%s/metrics-%d",
			 tmpdir, port);
		unlink(metrics_path);
		setenv("KANEL_METRICS", metrics_path, 1);
	}
}
