/* SPDX-License-Identifier: Apache-2.0 */
/*
 * main.c - the one binary of a Kanel job, `kanel`:
 *
 *   kanel coordinator [options]
 *   kanel server      [options]
 *   kanel worker      [options] [--steps N] [--tensors N]
 *                     [--tensor-bytes BYTES] [--dtype fp32|fp16|bf16]
 *                     [--pause-ms N]
 *   kanel launch      --workers N [--servers M] [options] [-- CMD [ARG...]]
 *   kanel [options]   the role from --role, KANEL_ROLE or the launcher
 *   kanel train       [train options] [options]
 *   kanel compare     --protocols P,... [--imbalance SPEC,...] [...]
 *   kanel sim         --protocol P --workers N --iterations K [...]
 *
 * The options are the job's (docs/configuration.md); every one has a
 * KANEL_* variable, and Slurm's or Open MPI's rank variables pick the
 * role where no flag or variable does.  A subcommand takes the options it
 * uses and refuses the others (tool.h); without one, the process is
 * whatever role its sources say, and a worker is the synthetic one.  `worker` exchanges synthetic
 * tensors (for tests and benchmarks).  `launch` runs a whole job on this
 * machine: a coordinator on a free loopback port, M servers, and N
 * workers running CMD (default: `kanel worker`), each with its role in
 * its environment, and a fresh job secret unless one is given.  `train`
 * trains a model on Fashion-MNIST through a job (tools/train.c);
 * `compare` runs `train` under several protocols and imbalances; `sim`
 * is the discrete-event simulator (sim/, docs/simulator.md).
 */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kanel.h"
#include "tool.h"

static void usage(FILE *out)
{
	fprintf(out,
		"usage: kanel coordinator|server|worker|launch|train|compare|"
		"sim [options]\n"
		"       kanel [options]   (the role from --role, KANEL_ROLE, "
		"or srun/mpirun)\n"
		"  kanel COMMAND --help: the command's own usage and options\n"
		"  kanel launch --workers N [--servers M] [options] "
		"[-- CMD [ARG...]]\n"
		"  kanel worker [--steps N] [--tensors N] "
		"[--tensor-bytes BYTES] [--dtype fp32|fp16|bf16]\n"
		"               [--pause-ms N]\n\n"
		"The job's options (each also a KANEL_* variable):\n"
		"Usage: kanel [OPTION]...\n");
	kn_config_usage(out, KN_CONFIG_OPT_ALL);
}

static const char coordinator_head[] =
	"usage: kanel coordinator [options]\n"
	"The job's coordinator: listens on the --coordinator address, "
	"gathers the\nservers and the workers and sends them the job.\n\n";

static const char server_head[] =
	"usage: kanel server [--rank R] [options]\n"
	"One of the job's servers: connects to the coordinator, listens on "
	"--listen\nand aggregates the workers' pushes.\n\n";

static const char worker_head[] =
	"usage: kanel worker [--steps N] [--tensors N] [--tensor-bytes BYTES]\n"
	"                    [--dtype fp32|fp16|bf16] [options]\n"
	"A synthetic worker, for tests and benchmarks: registers N tensors "
	"of\nBYTES each and does N steps.\n"
	"  --steps N               steps (default 10)\n"
	"  --tensors N             tensors, 1 or more (default 1)\n"
	"  --tensor-bytes BYTES    bytes of each, 1 or more (default "
	"1048576)\n"
	"  --dtype fp32|fp16|bf16  their element type (default fp32)\n"
	"  --pause-ms N            sleep N ms before each step, a stand-in "
	"for\n"
	"                          compute (default 0)\n\n";

static const char launch_head[] =
	"usage: kanel launch --workers N [--servers M] [options] "
	"[-- CMD [ARG...]]\n"
	"A whole job on this machine: a coordinator on a free loopback port, "
	"M servers\nand N workers running CMD (default: kanel worker), each "
	"with its role in\nKANEL_ROLE/KANEL_RANK and the job in KANEL_* "
	"variables, and a fresh job\nsecret unless one is given.  A process "
	"that fails, or a CMD that cannot be\nrun, ends the job at once; "
	"a worker that fails after the start is let go,\nand the others "
	"go on.\n\n"
	"Launch options (docs/engine.md):\n"
	"  --restart-workers       start a worker that fails after the start "
	"again, with\n"
	"                          its rank (not one that failed within 2 s "
	"of its start)\n\n";

static const struct kn_config_scope coordinator_scope = {
	.command = "kanel coordinator",
	.options = KN__TOOL_OPTS_COORDINATOR,
	.role = KN_ROLE_COORDINATOR,
};

static const struct kn_config_scope server_scope = {
	.command = "kanel server",
	.options = KN__TOOL_OPTS_SERVER,
	.role = KN_ROLE_SERVER,
};

static const struct kn_config_scope worker_scope = {
	.command = "kanel worker",
	.options = KN__TOOL_OPTS_WORKER,
	.role = KN_ROLE_WORKER,
};

static int run_role(int argc, char **argv, const struct kn_config_scope *sc,
		    const char *head)
{
	struct kn_config *cfg;
	int ret;

	if (kn__tool_parse(argc, argv, sc, &cfg))
		return 2;
	if (kn_config_help(cfg)) {
		kn__tool_usage(stdout, head, sc->options);
		ret = 0;
	} else {
		ret = kn__tool_run_role(cfg);
	}
	kn_config_destroy(cfg);
	return ret;
}

/* ---- kanel worker: synthetic tensors ---- */

struct synth {
	unsigned long steps, tensors, pause_ms;
	size_t bytes;
	enum kn_dtype dtype;
};

static bool is_synth_flag(const char *a, const char *flag, const char **val)
{
	size_t n = strlen(flag);

	if (strncmp(a, flag, n))
		return false;
	if (a[n] == '=')
		*val = a + n + 1;
	else if (a[n])
		return false;
	else
		*val = NULL;
	return true;
}

/* Take the synthetic worker's own options out of argv. */
static int synth_options(int *argc, char **argv, struct synth *o)
{
	static const char *const flags[] = { "--steps", "--tensors",
					     "--tensor-bytes", "--dtype",
					     "--pause-ms" };
	int out = 1;

	for (int i = 1; i < *argc; i++) {
		const char *a = argv[i], *v = NULL;
		unsigned long n;
		size_t k;
		char *end;

		if (strcmp(a, "--") == 0) {
			while (i < *argc)
				argv[out++] = argv[i++];
			break;
		}
		for (k = 0; k < sizeof(flags) / sizeof(flags[0]); k++)
			if (is_synth_flag(a, flags[k], &v))
				break;
		if (k == sizeof(flags) / sizeof(flags[0])) {
			argv[out++] = argv[i];
			continue;
		}
		if (!v) {
			v = i + 1 < *argc ? argv[++i] : NULL;
			if (!v || strncmp(v, "--", 2) == 0) {
				kn__tool_log("kanel worker: %s needs a "
					     "value%s%s%s\n",
					     flags[k],
					     v ? ", but the next argument "
						 "is '"
					       : "",
					     v ? v : "", v ? "'" : "");
				return -EINVAL;
			}
		}
		if (k == 3) {
			o->dtype = strcmp(v, "fp16") == 0   ? KN_DTYPE_FP16
				   : strcmp(v, "bf16") == 0 ? KN_DTYPE_BF16
				   : strcmp(v, "fp32") == 0 ? KN_DTYPE_FP32
							    : (enum kn_dtype)99;
			if (!kn_dtype_size(o->dtype)) {
				kn__tool_log("kanel worker: --dtype %s: "
					     "fp32, fp16 or bf16\n",
					     v);
				return -EINVAL;
			}
			continue;
		}
		errno = 0;
		n = strtoul(v, &end, 10);
		/* --steps and --pause-ms may be 0, the sizes may not */
		if (errno || end == v || *end || v[0] == '-' ||
		    ((k == 1 || k == 2) && !n) || (k == 4 && n > 3600000)) {
			kn__tool_log("kanel worker: %s %s: %s\n", flags[k], v,
				     k == 1 || k == 2 ? "a positive number"
				     : k == 4 ? "milliseconds, 0 to 3600000"
					      : "a number");
			return -EINVAL;
		}
		if (k == 0)
			o->steps = n;
		else if (k == 1)
			o->tensors = n;
		else if (k == 2)
			o->bytes = n;
		else
			o->pause_ms = n;
	}
	argv[out] = NULL;
	*argc = out;
	return 0;
}

/*
 * kanel worker, or (@given: its configuration, already parsed) a process
 * whose sources made it a worker.
 */
static int run_worker(int argc, char **argv, const struct kn_config *given)
{
	struct synth o = { .steps = 10,
			   .tensors = 1,
			   .bytes = 1 << 20,
			   .dtype = KN_DTYPE_FP32 };
	struct kn_worker_options wo = { .rank = -1 };
	struct kn_config *own = NULL;
	const struct kn_config *cfg = given;
	struct kn_worker *w;
	char **bufs = NULL;
	size_t count;
	int ret;

	if (synth_options(&argc, argv, &o))
		return 2;
	if (!given) {
		if (kn__tool_parse(argc, argv, &worker_scope, &own))
			return 2;
		cfg = own;
		if (kn_config_help(cfg)) {
			kn__tool_usage(stdout, worker_head,
				       worker_scope.options);
			ret = 0;
			goto out;
		}
	}
	count = o.bytes / kn_dtype_size(o.dtype);
	if (!count) {
		kn__tool_log("kanel worker: --tensor-bytes %zu: less than one "
			     "element of its dtype\n",
			     o.bytes);
		ret = 2;
		goto out;
	}
	ret = 2;
	bufs = calloc(2 * o.tensors, sizeof(*bufs));
	if (!bufs)
		goto out;
	/* kn_worker_create reads the environment: what this command was
	 * told, flags included, goes there first */
	kn__tool_export_member(cfg);
	if (kn__tool_check_addresses(cfg))
		goto out;
	ret = kn_worker_create(&wo, &w);
	if (ret) {
		ret = 1;
		goto out;
	}
	for (unsigned long t = 0; !ret && t < o.tensors; t++) {
		char key[32];

		snprintf(key, sizeof(key), "t%05lu", t);
		bufs[2 * t] = calloc(count, kn_dtype_size(o.dtype));
		bufs[2 * t + 1] = calloc(count, kn_dtype_size(o.dtype));
		ret = !bufs[2 * t] || !bufs[2 * t + 1]
			      ? -ENOMEM
			      : kn_worker_register(w, key, o.dtype, count,
						   bufs[2 * t],
						   bufs[2 * t + 1]);
	}
	if (!ret)
		ret = kn_worker_start(w);
	for (unsigned long s = 0; !ret && s < o.steps; s++) {
		if (o.pause_ms) {
			struct timespec ts = {
				.tv_sec = (time_t)(o.pause_ms / 1000),
				.tv_nsec = (long)(o.pause_ms % 1000) * 1000000,
			};

			while (nanosleep(&ts, &ts) && errno == EINTR)
				;
		}
		ret = kn_worker_step(w, NULL);
	}
	if (ret)
		kn__tool_log("kanel: worker %u: %s\n", kn_config_rank(cfg),
			     strerror(-ret));
	else if (kn_config_verbose(cfg))
		kn__tool_log("kanel: worker %u: %lu steps done\n",
			     kn_config_rank(cfg), o.steps);
	kn_worker_destroy(w);
	for (unsigned long t = 0; t < 2 * o.tensors; t++)
		free(bufs[t]);
	ret = ret ? 1 : 0;
out:
	free(bufs);
	kn_config_destroy(own);
	return ret;
}

/* ---- kanel [options]: the role from the sources ---- */

static int run_any(int argc, char **argv)
{
	char **job_args = calloc((size_t)argc + 1, sizeof(*job_args));
	struct kn_config *cfg = NULL;
	struct synth o;
	int nargs = argc, ret;

	if (!job_args)
		return 2;
	/* the synthetic worker's options are taken whatever the role: one
	 * command line serves every rank under srun or mpirun */
	memcpy(job_args, argv, (size_t)argc * sizeof(*argv));
	ret = synth_options(&nargs, job_args, &o) ||
	      kn__tool_parse(nargs, job_args, NULL, &cfg);
	free(job_args);
	if (ret) {
		kn_config_destroy(cfg);
		return 2;
	}
	if (kn_config_help(cfg))
		usage(stdout);
	else if (kn_config_role(cfg) != KN_ROLE_WORKER)
		ret = kn__tool_run_role(cfg);
	else
		ret = run_worker(argc, argv, cfg);
	kn_config_destroy(cfg);
	return ret;
}

/* ---- kanel launch ---- */

static int run_launch(int argc, char **argv)
{
	char *wargv[3] = { NULL, "worker", NULL }, **cmd = NULL;
	struct kn__job job;
	bool restart = false;
	int ret;

	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "--") == 0) {
			cmd = argv + i + 1;
			argv[i] = NULL;
			argc = i;
			break;
		}
	/* launch's own option, before the job's */
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "--restart-workers") == 0) {
			restart = true;
			memmove(argv + i, argv + i + 1,
				(size_t)(argc - i) * sizeof(*argv));
			argc--;
			i--;
		}
	ret = kn__job_init(&job, "kanel launch", argc, argv);
	if (ret || kn_config_help(job.cfg)) {
		if (!ret)
			kn__tool_usage(stdout, launch_head,
				       KN__TOOL_OPTS_LOCAL);
		kn__job_fini(&job);
		return ret ? 2 : 0;
	}
	if (cmd && !cmd[0]) {
		kn__tool_log("kanel launch: nothing after '--': give the "
			     "workers' command, or no '--'\n");
		kn__job_fini(&job);
		return 2;
	}
	wargv[0] = job.self;
	job.workers_may_fail = true;
	job.restart_workers = restart;
	kn__job_catch_term();
	ret = kn__job_start_roles(&job);
	for (unsigned int w = 0; !ret && w < job.info.workers; w++)
		ret = kn__job_start_worker(&job, w, cmd ? cmd : wargv);
	if (ret) {
		/* the reason is printed: end what did start */
		kn__job_kill(&job, SIGTERM);
		kn__job_reap(&job, true);
	} else {
		kn__job_wait(&job, 5);
	}
	if (job.restarted && !ret)
		kn__tool_log("kanel launch: %u worker restart%s\n",
			     job.restarted, job.restarted == 1 ? "" : "s");
	if (job.server_restarts && !ret)
		kn__tool_log("kanel launch: %u server restart%s from the "
			     "checkpoints\n",
			     job.server_restarts,
			     job.server_restarts == 1 ? "" : "s");
	/* the last line: what happened, by role and rank */
	if (!ret)
		kn__job_log_end(&job);
	ret = ret ? 2 : job.status;
	kn__job_fini(&job);
	return ret;
}

int main(int argc, char **argv)
{
	const char *role = getenv("KANEL_ROLE");

	/* KANEL_ROLE names the role of a bare `kanel`: run it, or name
	 * the bad value, rather than print the usage */
	if (argc < 2 && role && *role)
		return run_any(argc, argv);
	if (argc < 2 || strcmp(argv[1], "--help") == 0 ||
	    strcmp(argv[1], "-h") == 0) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	if (argv[1][0] == '-')
		return run_any(argc, argv);
	if (strcmp(argv[1], "coordinator") == 0)
		return run_role(argc - 1, argv + 1, &coordinator_scope,
				coordinator_head);
	if (strcmp(argv[1], "server") == 0)
		return run_role(argc - 1, argv + 1, &server_scope, server_head);
	if (strcmp(argv[1], "worker") == 0)
		return run_worker(argc - 1, argv + 1, NULL);
	if (strcmp(argv[1], "launch") == 0)
		return run_launch(argc - 1, argv + 1);
	if (strcmp(argv[1], "train") == 0)
		return kn__train_main(argc - 1, argv + 1);
	if (strcmp(argv[1], "compare") == 0)
		return kn__compare_main(argc - 1, argv + 1);
	if (strcmp(argv[1], "sim") == 0) {
		/* its messages and usage say "kanel sim" */
		argv[1] = "kanel sim";
		return kn_sim_main(argc - 1, argv + 1);
	}
	kn__tool_log("kanel: unknown command '%s'; try kanel --help\n",
		     argv[1]);
	return 2;
}
