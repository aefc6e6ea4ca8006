/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kanel.c - the one binary of a Kanel job:
 *
 *   kanel coordinator [options]
 *   kanel server      [options]
 *   kanel worker      [options] [--steps N] [--tensors N]
 *                     [--tensor-bytes BYTES] [--dtype fp32|fp16|bf16]
 *   kanel launch      --workers N --servers M [options] [-- CMD [ARG...]]
 *   kanel train       [train options] [options]
 *   kanel compare     --protocols P,... [--imbalance SPEC,...] [...]
 *   kanel sim         --protocol P --workers N --iterations K [...]
 *
 * The options are the job's (docs/configuration.md); every one has a
 * KANEL_* variable, and Slurm's or Open MPI's rank variables pick the
 * role where no flag or variable does.  `worker` exchanges synthetic
 * tensors (for tests and benchmarks).  `launch` runs a whole job on this
 * machine: a coordinator on a free loopback port, M servers, and N
 * workers running CMD (default: `kanel worker`), each with its role in
 * its environment, and a fresh job secret unless one is given.  `train`
 * trains a model on Fashion-MNIST through a job (tools/train.c);
 * `compare` runs `train` under several protocols and imbalances; `sim`
 * is the discrete-event simulator (perf/sim/, docs/simulator.md).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kanel.h"
#include "tool.h"

static void usage(FILE *out)
{
	fprintf(out, "usage: kanel coordinator|server|worker|launch|train|"
		     "compare [options]\n"
		     "  kanel worker ... [--steps N] [--tensors N] "
		     "[--tensor-bytes BYTES] [--dtype fp32|fp16|bf16]\n"
		     "  kanel launch --workers N --servers M [options] "
		     "[-- CMD [ARG...]]\n"
		     "  kanel train --help, kanel compare --help, kanel sim "
		     "--help: their own options\n"
		     "The job's options (each also a KANEL_* variable):\n");
	kn__config_usage(out);
}

static int run_role(int argc, char **argv, const char *role)
{
	struct kn__config cfg;

	if (kn__tool_parse(argc, argv, role, &cfg))
		return 2;
	return cfg.help ? 0 : kn__tool_run_role(&cfg);
}

/* ---- kanel worker: synthetic tensors ---- */

struct synth {
	unsigned long steps, tensors;
	size_t bytes;
	enum kn_dtype dtype;
};

/* Take the synthetic worker's own options out of argv. */
static int synth_options(int *argc, char **argv, struct synth *o)
{
	int out = 1;

	for (int i = 1; i < *argc; i++) {
		const char *a = argv[i];
		char *end = NULL;

		if (i + 1 < *argc && strcmp(a, "--steps") == 0)
			o->steps = strtoul(argv[++i], &end, 10);
		else if (i + 1 < *argc && strcmp(a, "--tensors") == 0)
			o->tensors = strtoul(argv[++i], &end, 10);
		else if (i + 1 < *argc && strcmp(a, "--tensor-bytes") == 0)
			o->bytes = strtoul(argv[++i], &end, 10);
		else if (i + 1 < *argc && strcmp(a, "--dtype") == 0) {
			const char *d = argv[++i];

			o->dtype = strcmp(d, "fp16") == 0   ? KN_DTYPE_FP16
				   : strcmp(d, "bf16") == 0 ? KN_DTYPE_BF16
				   : strcmp(d, "fp32") == 0 ? KN_DTYPE_FP32
							    : (enum kn_dtype)99;
			if (!kn_dtype_size(o->dtype)) {
				fprintf(stderr,
					"kanel worker: --dtype %s: "
					"fp32, fp16 or bf16\n",
					d);
				return -EINVAL;
			}
			continue;
		} else {
			argv[out++] = argv[i];
			continue;
		}
		if (!end || *end || !o->tensors || !o->bytes) {
			fprintf(stderr,
				"kanel worker: %s %s: a positive "
				"number\n",
				a, argv[i]);
			return -EINVAL;
		}
	}
	*argc = out;
	return 0;
}

static int run_worker(int argc, char **argv)
{
	struct synth o = { .steps = 10,
			   .tensors = 1,
			   .bytes = 1 << 20,
			   .dtype = KN_DTYPE_FP32 };
	struct kn_worker_options wo = { .rank = -1 };
	struct kn__config cfg;
	struct kn_worker *w;
	char **bufs;
	size_t count;
	int ret;

	if (synth_options(&argc, argv, &o) || kn__tool_parse(argc, argv, "worker", &cfg))
		return 2;
	if (cfg.help)
		return 0;
	count = o.bytes / kn_dtype_size(o.dtype);
	bufs = calloc(2 * o.tensors, sizeof(*bufs));
	if (!bufs || !count)
		return 2;
	/* the options reach kn_worker_create through the same sources */
	ret = kn_worker_create(&wo, &w);
	if (ret) {
		free(bufs);
		return 1;
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
	for (unsigned long s = 0; !ret && s < o.steps; s++)
		ret = kn_worker_step(w, NULL);
	if (ret)
		fprintf(stderr, "kanel: worker %u: %s\n", cfg.rank,
			strerror(-ret));
	else if (cfg.verbose)
		fprintf(stderr, "kanel: worker %u: %lu steps done\n", cfg.rank,
			o.steps);
	kn_worker_destroy(w);
	for (unsigned long t = 0; t < 2 * o.tensors; t++)
		free(bufs[t]);
	free(bufs);
	return ret ? 1 : 0;
}

/* ---- kanel launch ---- */

static int run_launch(int argc, char **argv)
{
	char *wargv[3] = { NULL, "worker", NULL }, **cmd = NULL;
	struct kn__job job;
	int ret;

	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "--") == 0) {
			cmd = argv + i + 1;
			argv[i] = NULL;
			argc = i;
			break;
		}
	ret = kn__job_init(&job, argc, argv);
	if (ret || job.cfg.help) {
		kn__job_fini(&job);
		return ret ? 2 : 0;
	}
	wargv[0] = job.self;
	ret = kn__job_start_roles(&job);
	for (unsigned int w = 0; !ret && w < job.cfg.workers; w++)
		ret = kn__job_start_worker(&job, w,
					   cmd && cmd[0] ? cmd : wargv);
	if (ret) {
		fprintf(stderr, "kanel launch: cannot start: %s\n",
			strerror(-ret));
		kn__job_kill(&job, SIGTERM);
	}
	kn__job_reap(&job, true);
	if (job.failed)
		fprintf(stderr, "kanel launch: %u of %u processes failed\n",
			job.failed, job.total);
	ret = ret ? 2 : job.status;
	kn__job_fini(&job);
	return ret;
}

int main(int argc, char **argv)
{
	if (argc < 2 || strcmp(argv[1], "--help") == 0 ||
	    strcmp(argv[1], "-h") == 0) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	if (strcmp(argv[1], "coordinator") == 0 ||
	    strcmp(argv[1], "server") == 0)
		return run_role(argc - 1, argv + 1, argv[1]);
	if (strcmp(argv[1], "worker") == 0)
		return run_worker(argc - 1, argv + 1);
	if (strcmp(argv[1], "launch") == 0)
		return run_launch(argc - 1, argv + 1);
	if (strcmp(argv[1], "train") == 0)
		return kn__train_main(argc - 1, argv + 1);
	if (strcmp(argv[1], "compare") == 0)
		return kn__compare_main(argc - 1, argv + 1);
	if (strcmp(argv[1], "sim") == 0)
		return kn__sim_main(argc - 1, argv + 1);
	fprintf(stderr, "kanel: unknown command '%s'; try kanel --help\n",
		argv[1]);
	return 2;
}
