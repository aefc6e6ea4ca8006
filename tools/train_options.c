/* SPDX-License-Identifier: Apache-2.0 */
/*
 * train_options.c - `kanel train`'s own options (docs/training.md): its
 * usage, and the trainer's flags taken out of the command line and
 * checked, leaving the job's options to kn_config_parse.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idx.h"
#include "kanel.h"
#include "tool.h"
#include "trainer.h"

void kn__train_usage(FILE *out)
{
	fprintf(out,
		"usage: kanel train [train options] [job options]\n"
		"Trains a model on Fashion-MNIST through a Kanel job: a "
		"whole job on this\nmachine, or with --join one process of "
		"a job started elsewhere.\n\n"
		"Train options (docs/training.md):\n"
		"  --model softmax|mlp     the model (default mlp)\n"
		"  --hidden N              MLP hidden units (default 256)\n"
		"  --batch N               minibatch per worker step "
		"(default 64)\n"
		"  --epochs E              passes over each worker's shard "
		"(default 10)\n"
		"  --time-budget S         stop after S seconds of training "
		"(default: none)\n"
		"  --target-accuracy A     the accuracy time-to-target "
		"measures (default 0.85)\n"
		"  --imbalance SPEC        none | persistent:FRACTION:FACTOR "
		"|\n"
		"                          random:P:FACTOR | "
		"episodic:PERIOD:DURATION:K:FACTOR |\n"
		"                          periodic:PERIOD:AMPLITUDE "
		"(default none; docs/imbalance.md)\n"
		"  --step-time T           base compute time per step, "
		"ms or with an s suffix (default 20ms)\n"
		"  --seed N                data order, initial model, "
		"imbalance (default 1)\n"
		"  --eval-interval S       seconds between evaluations "
		"(default 1)\n"
		"  --eval-every N          also every N steps of rank 0 "
		"(default 0: off)\n"
		"  --data DIR              the dataset (default %s)\n"
		"  --curve FILE            accuracy-vs-time CSV "
		"(default kanel-curve.csv; - for none)\n"
		"  --summary-json FILE     the summary as one JSON object\n"
		"  --progress auto|tty|log the live line or plain log lines "
		"(default auto)\n"
		"  --protocol P            the same as --sync P\n"
		"  --join                  be one process of a job started "
		"elsewhere\n\n"
		"The trainer's defaults for the job: --workers %s "
		"--optimizer momentum --lr 0.05.\n"
		"With --join every job option is taken (one command line "
		"serves every rank);\nwithout, those below (the job on this "
		"machine places its processes itself).\n\n",
		KN_FASHION_MNIST_DIR, KN__TRAIN_DEFAULT_WORKERS);
	fprintf(out, "Job options (each also a KANEL_* variable):\n");
	kn_config_usage(out, KN__TOOL_OPTS_LOCAL);
}

static int bad_value(const char *flag, const char *val, const char *want)
{
	kn__tool_log("kanel train: %s %s: %s\n", flag, val, want);
	return -EINVAL;
}

static int parse_double(const char *flag, const char *val, double lo, double hi,
			double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(val, &end);
	if (errno || end == val || *end || !isfinite(v) || v < lo || v > hi) {
		char want[96];

		snprintf(want, sizeof(want), "a number from %g to %g", lo, hi);
		return bad_value(flag, val, want);
	}
	*out = v;
	return 0;
}

static int parse_uint(const char *flag, const char *val, unsigned long lo,
		      unsigned long hi, unsigned long *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(val, &end, 10);
	if (errno || end == val || *end || val[0] == '-' || v < lo || v > hi) {
		char want[96];

		snprintf(want, sizeof(want), "a whole number from %lu to %lu",
			 lo, hi);
		return bad_value(flag, val, want);
	}
	*out = v;
	return 0;
}

/* "20", "20ms", "0.02s": seconds into @out. */
static int parse_duration(const char *flag, const char *val, double *out)
{
	char num[64];
	size_t n = strlen(val);
	double scale = 1e-3, v;

	if (n >= sizeof(num))
		return bad_value(flag, val, "too long");
	memcpy(num, val, n + 1);
	if (n > 2 && strcmp(num + n - 2, "ms") == 0) {
		num[n - 2] = '\0';
	} else if (n > 1 && num[n - 1] == 's') {
		num[n - 1] = '\0';
		scale = 1;
	}
	if (parse_double(flag, num, 0, 3600 / scale, &v))
		return -EINVAL;
	*out = v * scale;
	return 0;
}

static const char *const own_flags[] = {
	"--model",	 "--hidden",	      "--batch",      "--epochs",
	"--time-budget", "--target-accuracy", "--imbalance",  "--step-time",
	"--seed",	 "--eval-interval",   "--eval-every", "--data",
	"--curve",	 "--summary-json",    "--progress",   "--protocol",
};

static int set_option(struct kn__train_opts *o, const char *flag,
		      const char *val)
{
	unsigned long u = 0; /* read after a failed parse too, then ignored */
	int ret = 0;

	if (strcmp(flag, "--model") == 0) {
		if (kn__model_parse(val, &o->model))
			return bad_value(flag, val, "softmax or mlp");
	} else if (strcmp(flag, "--hidden") == 0) {
		ret = parse_uint(flag, val, 1, 65536, &u);
		o->hidden = (unsigned int)u;
	} else if (strcmp(flag, "--batch") == 0) {
		ret = parse_uint(flag, val, 1, 65536, &u);
		o->batch = (unsigned int)u;
	} else if (strcmp(flag, "--epochs") == 0) {
		ret = parse_double(flag, val, 0, 1e6, &o->epochs);
	} else if (strcmp(flag, "--time-budget") == 0) {
		ret = parse_double(flag, val, 0, 1e7, &o->time_budget);
	} else if (strcmp(flag, "--target-accuracy") == 0) {
		ret = parse_double(flag, val, 0, 1, &o->target);
	} else if (strcmp(flag, "--imbalance") == 0) {
		struct kn_imbalance *m;
		char err[256];

		/* no workers: only checked, and kept in its canonical form */
		if (kn_imbalance_parse(val, 0, 0, err, sizeof(err), &m))
			return bad_value(flag, val, err);
		ret = kn_imbalance_format(m, o->imbalance,
					  sizeof(o->imbalance)) < 0;
		kn_imbalance_destroy(m);
		if (ret)
			return bad_value(flag, val, "");
	} else if (strcmp(flag, "--step-time") == 0) {
		ret = parse_duration(flag, val, &o->step_time);
	} else if (strcmp(flag, "--seed") == 0) {
		ret = parse_uint(flag, val, 0, ~0ul, &u);
		o->seed = u;
	} else if (strcmp(flag, "--eval-interval") == 0) {
		ret = parse_double(flag, val, 0.01, 1e6, &o->eval_interval);
	} else if (strcmp(flag, "--eval-every") == 0) {
		ret = parse_uint(flag, val, 0, ~0u, &u);
		o->eval_every = (unsigned int)u;
	} else if (strcmp(flag, "--data") == 0) {
		o->data = val;
	} else if (strcmp(flag, "--curve") == 0) {
		o->curve = strcmp(val, "-") == 0 ? NULL : val;
	} else if (strcmp(flag, "--summary-json") == 0) {
		o->summary_json = val;
	} else if (strcmp(flag, "--progress") == 0) {
		if (strcmp(val, "auto") && strcmp(val, "tty") &&
		    strcmp(val, "log"))
			return bad_value(flag, val, "auto, tty or log");
		o->progress = val;
	}
	return ret;
}

/*
 * Take the trainer's options out of @argv (in place; --protocol becomes
 * --sync), leaving the job's for kn_config_parse.
 */
int kn__train_take_options(int *argc, char **argv, struct kn__train_opts *o,
			   bool *help)
{
	static char sync[64];
	int out = 1;

	for (int i = 1; i < *argc; i++) {
		const char *a = argv[i], *eq = strchr(a, '='), *val;
		size_t k, n = eq ? (size_t)(eq - a) : strlen(a);
		char flag[32];

		if (strcmp(a, "--join") == 0) {
			o->join = true;
			continue;
		}
		if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)
			*help = true;
		for (k = 0; k < sizeof(own_flags) / sizeof(own_flags[0]); k++)
			if (strlen(own_flags[k]) == n &&
			    strncmp(a, own_flags[k], n) == 0)
				break;
		if (k == sizeof(own_flags) / sizeof(own_flags[0])) {
			argv[out++] = argv[i];
			continue;
		}
		if (!eq && (i + 1 >= *argc || !strncmp(argv[i + 1], "--", 2))) {
			/* no value of ours starts with "--": that is the
			 * next option, and this one's value is missing */
			kn__tool_log("kanel train: %s needs a value%s%s%s\n",
				     own_flags[k],
				     i + 1 < *argc ? ", but the next argument "
						     "is '"
						   : "",
				     i + 1 < *argc ? argv[i + 1] : "",
				     i + 1 < *argc ? "'" : "");
			return -EINVAL;
		}
		val = eq ? eq + 1 : argv[++i];
		if (strcmp(own_flags[k], "--protocol") == 0) {
			/* one argument for one, or two for two: argv[] is
			 * rewritten in place, never ahead of the reading */
			snprintf(sync, sizeof(sync), "--sync=%s", val);
			argv[out++] = sync;
			continue;
		}
		snprintf(flag, sizeof(flag), "%s", own_flags[k]);
		if (set_option(o, flag, val))
			return -EINVAL;
	}
	argv[out] = NULL;
	*argc = out;
	return 0;
}
