/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config.h - the job configuration every kanel process starts from
 * (every option is in docs/configuration.md).
 *
 * Three sources, per field: command-line flags (long options only), then
 * KANEL_* environment variables, then the launcher's own variables (Slurm
 * SLURM_PROCID/SLURM_NTASKS, Open MPI OMPI_COMM_WORLD_RANK/_SIZE).  A
 * flag wins over its variable, a variable over the launcher.  The
 * launcher gives a global rank r of size processes: rank 0 is the
 * coordinator, ranks 1..M the servers, the rest the workers, and size
 * must be 1 + M + N.
 *
 * Parsing is pure: it reads argv and the environment block it is given
 * and touches nothing else.  Names are resolved to socket addresses by a
 * separate call, kn__config_resolve, when the engine is ready to connect.
 */
#ifndef KN_ENGINE_CONFIG_H
#define KN_ENGINE_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>

#include "kanel.h"
#include "sync.h"

#define KN_CONFIG_HOST_MAX  256u   /* host of HOST:PORT, with its NUL */
#define KN_CONFIG_PATH_MAX  4096u  /* --secret-file, with its NUL */
#define KN_CONFIG_MAX_COUNT 65536u /* most workers, and most servers */

/* What a process is.  Also the role byte of auth.h's ANSWER.  Numbered
 * as the public enum kn_role of kanel.h. */
enum kn__role {
	KN__ROLE_COORDINATOR = KN_ROLE_COORDINATOR,
	KN__ROLE_SERVER = KN_ROLE_SERVER,
	KN__ROLE_WORKER = KN_ROLE_WORKER,
};

enum kn__config_transport {
	KN__CONFIG_TCP = 0,
	KN__CONFIG_VERBS = 1,
	KN__CONFIG_DPDK = 2,
};

/*
 * Who applies the update: the first three are the server's optimizer
 * (numbered as enum kn_optimizer); SUM is the workers' own (BSP's servers
 * publish the mean, the others' add the workers' deltas).  AUTO is the
 * default of a job: SUM when worker 0's program steps the model itself
 * (kn_worker_options.own_optimizer), else SGD; the coordinator settles it
 * at worker 0's tensor table, and a worker settles it at once from its
 * own program's answer.
 */
enum kn__config_optimizer {
	KN__CONFIG_SGD = 0,
	KN__CONFIG_MOMENTUM = 1,
	KN__CONFIG_ADAM = 2,
	KN__CONFIG_SUM = 3,
	KN__CONFIG_AUTO = 4,
};

/* HOST:PORT as given: a hostname, an IPv4 literal or a [bracketed] IPv6. */
struct kn__config_addr {
	char host[KN_CONFIG_HOST_MAX]; /* without brackets */
	uint16_t port;
};

struct kn__config {
	enum kn__role role;
	uint32_t rank;	  /* index within the role: 0 .. count - 1 */
	uint32_t servers; /* M */
	uint32_t workers; /* N */
	/* Which flag or variable set role and rank (a string constant). */
	const char *role_source;
	struct kn__config_addr coordinator;
	struct kn__config_addr listen; /* a server's bind address */
	enum kn__config_transport transport;
	uint32_t sync; /* enum kn_sync, named by sync/ */
	enum kn__config_optimizer optimizer;
	uint32_t chunk_bytes; /* a multiple of 4, at least 4 KiB */
	uint32_t fuse_bytes;  /* tensors below it are fused; 0: none */
	uint32_t push_window; /* a worker's push bytes in flight; 0: any */
	float lr;
	float momentum;
	/*
	 * The protocols' parameters: sync/'s one block (sync.h says what
	 * each is; its protocol, max_workers, members and bytes are unused)
	 */
	struct kn__sync_params proto;
	uint32_t heartbeat_timeout_ms;
	uint32_t startup_timeout_ms;
	char secret_file[KN_CONFIG_PATH_MAX]; /* "": KANEL_SECRET instead */
	char metrics[KN_CONFIG_PATH_MAX];     /* "": no figures file */
	/* servers: where checkpoints go ("": none), every how many
	 * versions; coordinator: start from them */
	char checkpoint_dir[KN_CONFIG_PATH_MAX];
	uint32_t checkpoint_every;
	bool restore;
	/* servers: the secret whose files a restore accepts beside the
	 * job's own ("": only the job's) */
	char restore_secret_file[KN_CONFIG_PATH_MAX];
	bool verbose;
	/* --help was given: nothing else was checked; print the usage. */
	bool help;
};

/*
 * The groups of options, for a command that takes only some of them
 * (kn__config_parse_as): each option belongs to one.
 */
/* (kanel.h says which options each group holds) */
enum {
	KN__CONFIG_OPT_ROLE = KN_CONFIG_OPT_ROLE,
	KN__CONFIG_OPT_RANK = KN_CONFIG_OPT_RANK,
	KN__CONFIG_OPT_COUNTS = KN_CONFIG_OPT_COUNTS,
	KN__CONFIG_OPT_COORDINATOR = KN_CONFIG_OPT_COORDINATOR,
	KN__CONFIG_OPT_LISTEN = KN_CONFIG_OPT_LISTEN,
	KN__CONFIG_OPT_COMMON = KN_CONFIG_OPT_COMMON,
	KN__CONFIG_OPT_HEARTBEAT = KN_CONFIG_OPT_HEARTBEAT,
	KN__CONFIG_OPT_JOB = KN_CONFIG_OPT_JOB,
	KN__CONFIG_OPT_METRICS = KN_CONFIG_OPT_METRICS,
	KN__CONFIG_OPT_CHECKPOINT = KN_CONFIG_OPT_CHECKPOINT,
	KN__CONFIG_OPT_ALL = KN_CONFIG_OPT_ALL,
};

/*
 * What a command takes: kn__config_parse_as refuses a flag outside
 * @options with a message naming the flag and @command.  Variables are
 * never refused (the environment is shared by every process of a job);
 * those outside @options are simply not read.  --help is always taken.
 */
struct kn__config_scope {
	const char *command;  /* "kanel train", for messages; a constant */
	unsigned int options; /* KN__CONFIG_OPT_* */
	/* the role the command is, which no flag or variable changes;
	 * 0: from --role, KANEL_ROLE or the launcher */
	enum kn__role role;
};

/*
 * Fill @cfg from @argv (argv[0] is the program name), the environment
 * block @envp (NULL: the process's) and defaults.  Returns 0, or -EINVAL
 * with one line in @err (if not NULL) that names the offending option,
 * variable or value; @cfg is written only on success.  Uses getopt_long,
 * so it is not thread-safe; it may be called again (it resets optind).
 * @argv is not reordered.
 */
int kn__config_parse(int argc, char **argv, char *const *envp,
		     struct kn__config *cfg, char *err, size_t errlen);

/*
 * kn__config_parse for a command that takes the options @scope names
 * (NULL: every option, any role, as kn__config_parse).  With a role in
 * @scope, role_source is @scope->command.
 */
int kn__config_parse_as(const struct kn__config_scope *scope, int argc,
			char **argv, char *const *envp, struct kn__config *cfg,
			char *err, size_t errlen);

/*
 * Put the options of the groups @options (KN__CONFIG_OPT_*) into the
 * process's environment, each under its KANEL_* variable and written so
 * that kn__config_parse reads back the value @cfg holds: how a process
 * hands its options to its children.  An option without a value (a path
 * or an address not given) leaves its variable alone.  Walks the option
 * table, so a new option is exported with no edit elsewhere.  Not
 * thread-safe (setenv).  0, -EINVAL for a NULL @cfg, or -ENOMEM.
 */
int kn__config_export(const struct kn__config *cfg, unsigned int options);

/* Print every option with its variable and default to @out. */
void kn__config_usage(FILE *out);

/* The same for the options in @options (KN__CONFIG_OPT_*) only. */
void kn__config_usage_of(FILE *out, unsigned int options);

/*
 * Resolve @addr (getaddrinfo: may block on DNS).  Hostnames and IPv4
 * literals give an IPv4 address, bracketed literals an IPv6 one.
 * Returns 0 with the first address in @out and its length in @len,
 * -ENOENT (no such host or no address of that family), -EAGAIN
 * (temporary failure), -ENOMEM or -EINVAL.
 */
int kn__config_resolve(const struct kn__config_addr *addr,
		       struct sockaddr_storage *out, socklen_t *len);

/* What a failure of kn__config_resolve for @addr means, for messages. */
const char *kn__config_resolve_strerror(const struct kn__config_addr *addr,
					int err);

/* Room for kn__config_resolve_why's message: the host, its port, why. */
#define KN__CONFIG_WHY_MAX (KN_CONFIG_HOST_MAX + 64u)

/*
 * kn__config_resolve, for a caller that logs a failure: on one, @why
 * says "HOST:PORT: what it means" for the caller to put in its message.
 */
int kn__config_resolve_why(const struct kn__config_addr *addr,
			   struct sockaddr_storage *out, socklen_t *len,
			   char why[KN__CONFIG_WHY_MAX]);

/* The names used on the command line, or NULL for an unknown value
 * (a protocol's and a CGP solver's are sync/'s: kn__sync_*_name). */
const char *kn__role_name(enum kn__role role);
const char *kn__config_transport_name(enum kn__config_transport t);
const char *kn__config_optimizer_name(enum kn__config_optimizer o);

#endif /* KN_ENGINE_CONFIG_H */
