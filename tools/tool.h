/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tool.h - what the kanel command's files share: the job's options, and
 * a local job (coordinator, servers and workers as child processes on
 * loopback) as `kanel launch`, `kanel train` and `kanel compare` start it.
 */
#ifndef KN_TOOL_H
#define KN_TOOL_H

#include <stdbool.h>
#include <stdio.h>
#include <sys/types.h>

#include "kanel.h"
#include "kanel_sim.h"

/*
 * The job options each command takes (KN_CONFIG_OPT_* of kanel.h); a
 * flag outside them is refused, naming the flag and the command.
 *   coordinator: the counts, its address, the job's rules, heartbeats,
 *     checkpoints (--restore);
 *   server: its rank, the counts, the coordinator, --listen, --metrics,
 *     checkpoints;
 *   worker: its rank, the counts, the coordinator, heartbeats;
 *   launch and train (a job on this machine): the counts, the job's
 *     rules, heartbeats, --metrics and checkpoints; they place the coordinator and
 *     the servers themselves and give every process its role;
 *   no subcommand, or train --join: every option, the role coming from
 *     --role, KANEL_ROLE or the launcher (one command line serves every
 *     rank under srun or mpirun).
 * All of them take --transport, --secret-file, --startup-timeout and
 * --verbose.
 */
#define KN__TOOL_OPTS_COORDINATOR                                             \
	(KN_CONFIG_OPT_COUNTS | KN_CONFIG_OPT_COORDINATOR |                   \
	 KN_CONFIG_OPT_COMMON | KN_CONFIG_OPT_HEARTBEAT | KN_CONFIG_OPT_JOB | \
	 KN_CONFIG_OPT_CHECKPOINT)
#define KN__TOOL_OPTS_SERVER                                \
	(KN_CONFIG_OPT_RANK | KN_CONFIG_OPT_COUNTS |        \
	 KN_CONFIG_OPT_COORDINATOR | KN_CONFIG_OPT_LISTEN | \
	 KN_CONFIG_OPT_COMMON | KN_CONFIG_OPT_METRICS |     \
	 KN_CONFIG_OPT_CHECKPOINT)
#define KN__TOOL_OPTS_WORKER                                \
	(KN_CONFIG_OPT_RANK | KN_CONFIG_OPT_COUNTS |        \
	 KN_CONFIG_OPT_COORDINATOR | KN_CONFIG_OPT_COMMON | \
	 KN_CONFIG_OPT_HEARTBEAT)
#define KN__TOOL_OPTS_LOCAL                                                    \
	(KN_CONFIG_OPT_COUNTS | KN_CONFIG_OPT_COMMON |                         \
	 KN_CONFIG_OPT_HEARTBEAT | KN_CONFIG_OPT_JOB | KN_CONFIG_OPT_METRICS | \
	 KN_CONFIG_OPT_CHECKPOINT)

/*
 * What a worker's process is told through the environment, where
 * kn_worker_create reads it: its identity and connection options.
 */
#define KN__TOOL_EXPORT_MEMBER                                            \
	(KN_CONFIG_OPT_ROLE | KN_CONFIG_OPT_RANK | KN_CONFIG_OPT_COUNTS | \
	 KN_CONFIG_OPT_COORDINATOR | KN_CONFIG_OPT_COMMON |               \
	 KN_CONFIG_OPT_HEARTBEAT)

/*
 * Parse the job's options in @argv (argv[0] is the command's name) as
 * @scope says (NULL: every option, the role from the usual sources); an
 * error is printed.  0 and a new configuration in @cfg (free it with
 * kn_config_destroy), or -EINVAL or -ENOMEM.  The caller prints the
 * usage for --help (kn_config_help).
 */
int kn__tool_parse(int argc, char **argv, const struct kn_config_scope *scope,
		   struct kn_config **cfg);

/*
 * Print the usage of a command: @head (its usage lines, then a blank
 * line), then the job options of @options with their variables.
 */
void kn__tool_usage(FILE *out, const char *head, unsigned int options);

/*
 * Put @cfg's identity and connection options (KN__TOOL_EXPORT_MEMBER:
 * coordinator, role, rank, counts, transport, timeouts, secret file,
 * verbosity) in the process's environment, where kn_worker_create reads
 * them, so that the flags a command was given win over the KANEL_*
 * variables it inherited.
 */
void kn__tool_export_member(const struct kn_config *cfg);

/*
 * Log: format into a buffer and write it to stderr with one write(2), so
 * that the lines of the job's processes, which share the terminal, never
 * splice.  The text is written as formatted (give the newline); at most
 * 4 KiB, cut with "...\n" beyond.
 */
__attribute__((format(printf, 1, 2))) void kn__tool_log(const char *fmt, ...);

/*
 * Resolve the addresses @cfg's role needs (the coordinator's; a server's
 * --listen too), so that a name that does not resolve is reported as
 * such, naming it, before anything starts: 0 or a negative errno
 * (printed).  May block on DNS.
 */
int kn__tool_check_addresses(const struct kn_config *cfg);

/* Run a coordinator or a server as @cfg says: the process's exit code
 * (2: it could not start, the reason printed; 1: the job failed). */
int kn__tool_run_role(const struct kn_config *cfg);

/* A job on this machine, its processes children of this one. */
struct kn__job {
	struct kn_config *cfg;	 /* the job's options, as checked */
	struct kn_job_info info; /* the job they describe: counts, protocol */
	char self[4096];	 /* this program, for the roles */
	char secret_path[256];	 /* a secret made for the job; "" if given */
	pid_t *pids;		 /* coordinator, servers, then workers */
	char **names;		 /* the command each runs, for messages */
	unsigned int total;	 /* 1 + servers + workers */
	unsigned int running;
	unsigned int failed;  /* ended badly on their own */
	unsigned int stopped; /* ended badly once kn__job_kill was called */
	int status;	      /* the first failure's exit code, else 0 */
	const char *command;  /* "kanel launch", for messages */
	bool ending;	      /* the job is being stopped: kn__job_kill */
	/*
	 * The coordinator writes a byte to the pipe whose read end this is
	 * when the job starts (KANEL_START_FD); -1 before kn__job_start_roles.
	 */
	int start_fd, start_w;
	bool started;
	/* launch, train: a worker that fails after the start is let go, and
	 * the others go on, as the engine does; counted in @lost */
	bool workers_may_fail;
	unsigned int lost;
	/*
	 * launch --restart-workers: such a worker is started again with its
	 * rank (and @worker_argv, the last kn__job_start_worker's), unless
	 * it failed within 2 s of its last start or the coordinator is
	 * gone; restarts counted in @restarted.
	 */
	bool restart_workers;
	char *const *worker_argv;
	unsigned int restarted;
	/*
	 * --checkpoint-dir given: a server that fails after the start is
	 * started again (5 restarts per server in all, and not one that failed
	 * within 2 s of a restart); the coordinator holds the workers
	 * until it is back.  Restarts counted in @server_restarts.
	 */
	bool restart_servers;
	unsigned int server_restarts;
	double t0;	    /* when the roles were started (CLOCK_MONOTONIC) */
	double *started_at; /* per process: its last start, the same clock */
	unsigned char *ended; /* per process: enum kn__job_end, its last */
};

/* How a process of the job ended, for the job's last line. */
enum kn__job_end {
	KN__JOB_RUNNING,  /* not ended (or never started) */
	KN__JOB_FINISHED, /* exit status 0 */
	KN__JOB_FAILED,	  /* ended badly on its own */
	KN__JOB_STOPPED,  /* ended once the job was being stopped */
	KN__JOB_HUNG,	  /* did not end on SIGTERM: killed (SIGKILL) */
};

/*
 * Check the job's options in @argv as @command ("kanel launch") takes
 * them (KN__TOOL_OPTS_LOCAL), pick a free loopback port for the
 * coordinator, make a fresh secret unless one is given, and export all
 * of it to the environment, where the children read it.  0, or -EINVAL
 * (printed); for --help, kn_config_help(@job->cfg) is 1 and nothing else
 * is done.
 */
int kn__job_init(struct kn__job *job, const char *command, int argc,
		 char **argv);

/* Start the coordinator and the servers: 0 or a negative errno (printed). */
int kn__job_start_roles(struct kn__job *job);

/*
 * Start worker @rank running @argv: 0 or a negative errno, printed
 * naming the process.  A command that cannot be run (not found, not
 * executable) is known at once, not when the job fails to assemble.
 */
int kn__job_start_worker(struct kn__job *job, unsigned int rank,
			 char *const *argv);

/*
 * Reap the children that have ended, waiting for all of them if @block;
 * a failure is counted in @job->failed and printed, naming the process
 * (its role, rank, command and pid) and how it ended.  Returns how many
 * still run.
 */
unsigned int kn__job_reap(struct kn__job *job, bool block);

/*
 * Wait for the children; the first that fails ends the job at once:
 * the others get SIGTERM (and SIGKILL if they are still there after
 * @grace_s seconds) and are reaped.
 */
void kn__job_wait(struct kn__job *job, double grace_s);
/*
 * From now on SIGTERM and SIGHUP make kn__job_wait end the job (SIGTERM
 * to every process, SIGKILL after its grace) and exit with 128 + the
 * signal, rather than leave the children running with nobody to reap
 * them (kanel launch; kanel train has its own stop).
 */
void kn__job_catch_term(void);

/* Send @sig to every child still running. */
void kn__job_kill(struct kn__job *job, int sig);
/* SIGKILL to every child still running after a SIGTERM: each is
 * reported as hung (stopped, or deaf to the signal) in the last line. */
void kn__job_kill_hung(struct kn__job *job);

/*
 * How each process of the job ended, by role and rank, into @buf (@cap
 * bytes, NUL-terminated, cut short if it must): "failed: the
 * coordinator, workers 0-1; hung (deaf to SIGTERM, killed): server 0;
 * finished: none".  A kind no process ended as is left out, but for
 * "finished"; a job whose every process finished gets "every process
 * finished".
 */
void kn__job_outcome(const struct kn__job *job, char *buf, size_t cap);

/*
 * Print the job's last line where a process failed: how many failed and,
 * by kn__job_outcome, which failed, were stopped and finished; "the
 * others finished the job" only where some worker did.
 */
void kn__job_log_end(const struct kn__job *job);

/* Remove the secret made for the job and free it (children not waited). */
void kn__job_fini(struct kn__job *job);

/* The subcommands beyond the roles. */
int kn__train_main(int argc, char **argv);
int kn__compare_main(int argc, char **argv);

#endif /* KN_TOOL_H */
