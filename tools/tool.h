/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tool.h - what the kanel command's files share: the job's options, and
 * a local job (coordinator, servers and workers as child processes on
 * loopback) as `kanel launch`, `kanel train` and `kanel compare` start it.
 */
#ifndef KN_TOOL_H
#define KN_TOOL_H

#include <stdbool.h>
#include <sys/types.h>

#include "config.h"

/*
 * Parse the job's options in @argv (argv[0] is the command's name) with
 * @role forced (NULL: from the usual sources); the error, or the usage
 * for --help, is printed.  0 or -EINVAL.
 */
int kn__tool_parse(int argc, char **argv, const char *role,
		   struct kn__config *cfg);

/* Run a coordinator or a server as @cfg says: the process's exit code. */
int kn__tool_run_role(const struct kn__config *cfg);

/* A job on this machine, its processes children of this one. */
struct kn__job {
	struct kn__config cfg; /* the job's options, as checked */
	char self[4096];       /* this program, for the roles */
	char secret_path[256]; /* a secret made for the job; "" if given */
	pid_t *pids;	       /* coordinator, servers, then workers */
	unsigned int total;    /* 1 + servers + workers */
	unsigned int running;
	unsigned int failed;
	int status; /* the first failure's exit code, else 0 */
};

/*
 * Check the job's options in @argv, pick a free loopback port for the
 * coordinator, make a fresh secret unless one is given, and export all
 * of it to the environment, where the children read it.  0, or -EINVAL
 * (printed); @job->cfg.help is set (and nothing else done) for --help.
 */
int kn__job_init(struct kn__job *job, int argc, char **argv);

/* Start the coordinator and the servers: 0 or a negative errno. */
int kn__job_start_roles(struct kn__job *job);

/* Start worker @rank running @argv: 0 or a negative errno. */
int kn__job_start_worker(struct kn__job *job, unsigned int rank,
			 char *const *argv);

/*
 * Reap the children that have ended, waiting for all of them if @block;
 * a failure is counted in @job->failed.  Returns how many still run.
 */
unsigned int kn__job_reap(struct kn__job *job, bool block);

/* Send @sig to every child still running. */
void kn__job_kill(struct kn__job *job, int sig);

/* Remove the secret made for the job and free it (children not waited). */
void kn__job_fini(struct kn__job *job);

/* The subcommands beyond the roles. */
int kn__train_main(int argc, char **argv);
int kn__compare_main(int argc, char **argv);
int kn__sim_main(int argc, char **argv); /* perf/sim/sim_cli.c */

#endif /* KN_TOOL_H */
