/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sim_cli.c - the simulator's command line (`kanel sim`, sim/sim):
 * options into a struct kn__sim_config, a run, a short summary on
 * stdout, and on request the JSON summary and the loss curve as CSV
 * (docs/simulator.md lists every option and key).
 *
 * The options are one table, so that parsing, checking and --help agree,
 * and the protocols' parameters are sync/'s table (kn__sync_param_table);
 * each is `--name VALUE` or `--name=VALUE`.  Parsing keeps no global
 * state (no getopt), so kn_sim_main() can be called again in one
 * process, as the tests do.  The progress line on stderr is the one
 * place that reads the clock besides wall_s.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kanel_sim.h"
#include "sim.h"

/* The largest --model-bytes, 1 PiB: past it the figures would only be
 * nonsense (1e30 bytes ran, and printed times of 1e20 s) */
#define SIM_MODEL_MAX 1125899906842624.0

struct cli {
	struct kn__sim_config cfg;
	const char *json, *curve;
	double target_loss;   /* NAN: --target-loss not given */
	double target_window; /* seconds the loss is averaged over */
	double time_to_target;
	bool reached; /* the curve reached target_loss at time_to_target */
	bool quiet, help;
	const char *prog;
	/* progress */
	double wall0, last;
};

enum opt_kind {
	O_U32,	    /* uint32_t, whole number in [lo, hi] */
	O_U64,	    /* uint64_t, any whole number */
	O_F64,	    /* double in [lo, hi] */
	O_F32,	    /* float in [lo, hi] */
	O_SECONDS,  /* double: seconds, or with a suffix s, ms, us */
	O_BYTES,    /* double: bytes, or with a suffix KiB, MiB, GiB */
	O_STR,	    /* const char * */
	O_PROTOCOL, /* uint32_t: kn__sync_protocol_parse */
	O_SOLVER,   /* uint32_t: kn__sync_cgp_solver_parse */
	O_FLAG,	    /* bool, takes no value */
};

struct opt {
	const char *name;
	const char *arg; /* what the value is, for --help */
	enum opt_kind kind;
	size_t off; /* into struct cli */
	double lo, hi;
	const char *dflt; /* for --help */
	const char *help;
};

#define C(field) offsetof(struct cli, field)

static const struct opt opts[] = {
	{ "--protocol", "P", O_PROTOCOL, C(cfg.sync.protocol), 0, 0, "bsp",
	  "the protocol of sync/" },
	{ "--workers", "N", O_U32, C(cfg.workers), 1, KN__SYNC_MAX_WORKERS,
	  "16", "workers" },
	{ "--servers", "M", O_U32, C(cfg.servers), 1, KN__SIM_MAX_SERVERS, "1",
	  "servers, one chunk of the model each" },
	{ "--iterations", "K", O_U32, C(cfg.iterations), 1, UINT32_MAX, "100",
	  "local steps each worker takes" },
	{ "--duration", "SEC", O_SECONDS, C(cfg.duration), 0, 1e12, "0",
	  "also stop each worker at this simulated time (0: no)" },
	{ "--imbalance", "SPEC", O_STR, C(cfg.imbalance), 0, 0, "none",
	  "injected slowdown (docs/imbalance.md)" },
	{ "--seed", "S", O_U64, C(cfg.seed), 0, 0, "1",
	  "objective, gradient noise and imbalance" },
	{ "--step-time", "SEC", O_SECONDS, C(cfg.step_time), 1e-12, 1e6, "0.02",
	  "base time of a local step" },
	{ "--latency", "SEC", O_SECONDS, C(cfg.latency), 0, 1e6, "20e-6",
	  "one-way latency of a message" },
	{ "--bandwidth", "BYTES/S", O_F64, C(cfg.bandwidth), 1e-12, 1e300,
	  "1.25e9", "bandwidth of every link" },
	{ "--model-bytes", "BYTES", O_BYTES, C(cfg.model_bytes), 0,
	  SIM_MODEL_MAX, "4MiB", "simulated size of the model" },
	{ "--server-rate", "BYTES/S", O_F64, C(cfg.server_rate), 1e-12, 1e300,
	  "10e9", "bytes a server aggregates per second" },
	{ "--cpu-time", "SEC", O_SECONDS, C(cfg.cpu_time), 0, 1e6, "0",
	  "CPU part of a step, shared on --cores (0: none)" },
	{ "--cores", "C", O_U32, C(cfg.cores), 1, KN__SYNC_MAX_WORKERS, "1",
	  "cores the workers' CPU parts share" },
	{ "--dim", "D", O_U32, C(cfg.dim), 1, KN__SIM_MAX_DIM, "16",
	  "dimensions of the quadratic objective" },
	{ "--sigma", "S", O_F64, C(cfg.sigma), 0, 1e300, "0.5",
	  "gradient noise per coordinate" },
	{ "--lr", "LR", O_F64, C(cfg.lr), 1e-300, 1e300, "0.1",
	  "SGD rate of workers and servers" },
	{ "--momentum", "MU", O_F64, C(cfg.momentum), 0, 0.999999, "0",
	  "momentum: servers' (gradients), workers' (esp, predicted)" },
	{ "--loss-every", "SEC", O_SECONDS, C(cfg.loss_every), 0, 1e300, "auto",
	  "simulated seconds between loss samples" },
	{ "--target-loss", "L", O_F64, C(target_loss), 0, 1e300, "-",
	  "report when the loss, averaged, first reaches L" },
	{ "--target-window", "SEC", O_SECONDS, C(target_window), 0, 1e300, "1",
	  "simulated seconds --target-loss averages over" },
	{ "--summary-json", "FILE", O_STR, C(json), 0, 0, "-",
	  "write the summary as one JSON object" },
	{ "--curve", "FILE", O_STR, C(curve), 0, 0, "-",
	  "write the loss curve as CSV (t_s,loss)" },
	{ "--quiet", NULL, O_FLAG, C(quiet), 0, 0, "-",
	  "no progress line on stderr" },
	{ "--help", NULL, O_FLAG, C(help), 0, 0, "-", "this text" },
};

#define NOPTS (sizeof(opts) / sizeof(opts[0]))

/*
 * sync/'s parameter @t as our option (NULL if we have none: CGP's cost
 * model takes the simulated network's figures), written into @tmp: 0
 * asks for the default, which kn__sync_params_resolve gives.
 */
static const struct opt *param_opt(const struct kn__sync_param *t,
				   struct opt *tmp)
{
	static const enum opt_kind kinds[] = {
		[KN__SYNC_PARAM_U32] = O_U32,
		[KN__SYNC_PARAM_FLOAT] = O_F32,
		[KN__SYNC_PARAM_SOLVER] = O_SOLVER,
	};

	if (!t->sim)
		return NULL;
	*tmp = (struct opt){
		.name = t->sim,
		.arg = t->arg,
		.kind = kinds[t->type],
		.off = C(cfg.sync) + t->off,
		.lo = 0,
		.hi = t->hi,
		.dflt = t->deflt,
		.help = t->help,
	};
	return tmp;
}

/* "bsp, asp, ...": the protocols sync/ knows now. */
static void protocol_list(char *buf, size_t cap)
{
	size_t n = 0;

	buf[0] = '\0';
	for (uint32_t p = 0; p < 16; p++) {
		const char *name = kn__sync_protocol_name(p);

		if (name && n < cap)
			n += (size_t)snprintf(buf + n, cap - n, "%s%s",
					      n ? ", " : "", name);
	}
}

static void usage_line(FILE *out, const struct opt *o)
{
	char left[40];

	snprintf(left, sizeof(left), "%s%s%s", o->name, o->arg ? " " : "",
		 o->arg ? o->arg : "");
	fprintf(out, "  %-24s %s", left, o->help);
	if (strcmp(o->dflt, "-"))
		fprintf(out, " [%s]", o->dflt);
	fputc('\n', out);
}

static void usage(FILE *out, const char *prog)
{
	char list[128];

	protocol_list(list, sizeof(list));
	fprintf(out,
		"usage: %s [options]\n"
		"A discrete-event simulation of a parameter-server job that "
		"drives sync/'s\nprotocols (docs/simulator.md).  Options "
		"(--name VALUE or --name=VALUE):\n",
		prog);
	for (size_t i = 0; i < NOPTS; i++)
		usage_line(out, &opts[i]);
	fprintf(out, "The protocols' parameters (0: the default, in "
		     "brackets):\n");
	for (size_t i = 0; i < KN__SYNC_PARAMS_WORDS; i++) {
		struct opt tmp;
		const struct opt *o = param_opt(&kn__sync_param_table[i], &tmp);

		if (o)
			usage_line(out, o);
	}
	fprintf(out,
		"Protocols: %s.  SEC takes a suffix s, ms or us; BYTES "
		"KiB, MiB or GiB.\n",
		list);
}

static int bad_value(const struct cli *c, const char *flag, const char *val,
		     const char *want)
{
	fprintf(stderr, "%s: %s %s: %s\n", c->prog, flag, val, want);
	return -EINVAL;
}

/* @val as a finite double times the scale of its suffix, if any. */
static int parse_number(const char *val, const struct opt *o, double *out)
{
	static const struct {
		const char *suffix;
		double scale;
		enum opt_kind kind;
	} suffixes[] = {
		{ "us", 1e-6, O_SECONDS },     { "ms", 1e-3, O_SECONDS },
		{ "s", 1, O_SECONDS },	       { "KiB", 1024.0, O_BYTES },
		{ "MiB", 1048576.0, O_BYTES }, { "GiB", 1073741824.0, O_BYTES },
	};
	char *end;
	double v, scale = 1;

	errno = 0;
	v = strtod(val, &end);
	if (errno || end == val || !isfinite(v))
		return -EINVAL;
	if (*end) {
		size_t k;

		for (k = 0; k < sizeof(suffixes) / sizeof(suffixes[0]); k++)
			if (suffixes[k].kind == o->kind &&
			    strcmp(end, suffixes[k].suffix) == 0)
				break;
		if (k == sizeof(suffixes) / sizeof(suffixes[0]))
			return -EINVAL;
		scale = suffixes[k].scale;
	}
	v *= scale;
	if (!isfinite(v) || v < o->lo || v > o->hi)
		return -EINVAL;
	*out = v;
	return 0;
}

static int set_option(struct cli *c, const struct opt *o, const char *val)
{
	void *field = (char *)c + o->off;
	unsigned long long u;
	char want[160], *end;
	double v;
	int p;

	switch (o->kind) {
	case O_U32:
	case O_U64:
		errno = 0;
		u = strtoull(val, &end, 10);
		if (errno || end == val || *end || val[0] == '-' ||
		    (o->kind == O_U32 && (u < o->lo || u > o->hi))) {
			if (o->kind == O_U64)
				return bad_value(c, o->name, val,
						 "a whole number");
			snprintf(want, sizeof(want),
				 "a whole number from %.0f to %.0f", o->lo,
				 o->hi);
			return bad_value(c, o->name, val, want);
		}
		if (o->kind == O_U32)
			*(uint32_t *)field = (uint32_t)u;
		else
			*(uint64_t *)field = u;
		return 0;
	case O_F64:
	case O_F32:
	case O_SECONDS:
	case O_BYTES:
		if (parse_number(val, o, &v)) {
			snprintf(want, sizeof(want), "a number from %g to %g%s",
				 o->lo, o->hi,
				 o->kind == O_SECONDS ? " (s, ms or us)"
				 : o->kind == O_BYTES ? " (KiB, MiB or GiB)"
						      : "");
			return bad_value(c, o->name, val, want);
		}
		if (o->kind == O_F32)
			*(float *)field = (float)v;
		else
			*(double *)field = v;
		return 0;
	case O_STR:
		*(const char **)field = val;
		return 0;
	case O_PROTOCOL:
		p = kn__sync_protocol_parse(val);
		if (p < 0) {
			char list[128];

			protocol_list(list, sizeof(list));
			snprintf(want, sizeof(want), "one of %s", list);
			return bad_value(c, o->name, val, want);
		}
		*(uint32_t *)field = (uint32_t)p;
		return 0;
	case O_SOLVER:
		p = kn__sync_cgp_solver_parse(val);
		if (p < 0)
			return bad_value(c, o->name, val, "aga, pls or auto");
		*(uint32_t *)field = (uint32_t)p;
		return 0;
	default: /* O_FLAG */
		*(bool *)field = true;
		return 0;
	}
}

/* The option named by the @n bytes at @a: ours or sync/'s (in @tmp). */
static const struct opt *find_opt(const char *a, size_t n, struct opt *tmp)
{
	for (size_t k = 0; k < NOPTS; k++)
		if (strlen(opts[k].name) == n &&
		    strncmp(a, opts[k].name, n) == 0)
			return &opts[k];
	for (size_t k = 0; k < KN__SYNC_PARAMS_WORDS; k++) {
		const struct opt *o = param_opt(&kn__sync_param_table[k], tmp);

		if (o && strlen(o->name) == n && strncmp(a, o->name, n) == 0)
			return o;
	}
	return NULL;
}

static int parse(struct cli *c, int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *eq = strchr(a, '='), *val;
		size_t n = eq ? (size_t)(eq - a) : strlen(a);
		const struct opt *o;
		struct opt tmp;

		if (strcmp(a, "-h") == 0) {
			c->help = true;
			continue;
		}
		o = find_opt(a, n, &tmp);
		if (!o) {
			fprintf(stderr, "%s: unknown option %s (see --help)\n",
				c->prog, a);
			return -EINVAL;
		}
		if (o->kind == O_FLAG) {
			if (eq) {
				fprintf(stderr, "%s: %s takes no value\n",
					c->prog, o->name);
				return -EINVAL;
			}
			set_option(c, o, NULL);
			continue;
		}
		if (!eq && i + 1 >= argc) {
			fprintf(stderr, "%s: %s needs a value\n", c->prog, a);
			return -EINVAL;
		}
		val = eq ? eq + 1 : argv[++i];
		if (set_option(c, o, val))
			return -EINVAL;
	}
	return 0;
}

static double wall_clock(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A line every 2 s of wall time, so a long run shows it is alive. */
static void progress(void *arg, double sim_t, double done)
{
	struct cli *c = arg;
	double now = wall_clock();

	if (now - c->last < 2.0)
		return;
	c->last = now;
	fprintf(stderr,
		"%s: %.4g s simulated, %.1f%% of the steps, %.0f s wall\n",
		c->prog, sim_t, 100.0 * done, now - c->wall0);
}

/* A number, or null where it is not one (JSON has no NaN). */
static void json_num(FILE *f, const char *key, double v)
{
	if (isfinite(v))
		fprintf(f, "  \"%s\": %.10g,\n", key, v);
	else
		fprintf(f, "  \"%s\": null,\n", key);
}

static void json_u64(FILE *f, const char *key, uint64_t v)
{
	fprintf(f, "  \"%s\": %" PRIu64 ",\n", key, v);
}

/*
 * The summary as one JSON object, wall_s last and alone on its line:
 * everything before it is a function of the options and the seed.
 */
static void write_json(FILE *f, const struct cli *c,
		       const struct kn__sim_result *r)
{
	const struct kn__sim_config *g = &c->cfg;

	fprintf(f, "{\n  \"protocol\": \"%s\",\n",
		kn__sync_protocol_name(g->sync.protocol));
	json_u64(f, "workers", g->workers);
	json_u64(f, "servers", g->servers);
	json_u64(f, "iterations", g->iterations);
	json_num(f, "duration_s", g->duration);
	fprintf(f, "  \"imbalance\": \"%s\",\n", r->imbalance);
	json_u64(f, "seed", g->seed);
	json_num(f, "step_time_s", g->step_time);
	json_num(f, "latency_s", g->latency);
	json_num(f, "bandwidth", g->bandwidth);
	json_num(f, "model_bytes", g->model_bytes);
	json_num(f, "server_rate", g->server_rate);
	json_num(f, "cpu_time_s", g->cpu_time);
	json_u64(f, "cores", g->cores);
	json_u64(f, "dim", g->dim);
	json_num(f, "sigma", g->sigma);
	json_num(f, "lr", g->lr);
	json_num(f, "momentum", g->momentum);
	json_num(f, "sim_time_s", r->sim_time_s);
	json_num(f, "iterations_per_s", r->iterations_per_s);
	json_num(f, "wait_fraction", r->wait_fraction);
	json_num(f, "mean_staleness", r->mean_staleness);
	json_u64(f, "max_staleness", r->max_staleness);
	fprintf(f, "  \"staleness_hist\": [");
	for (int i = 0; i < KN__SIM_STALE_BUCKETS; i++)
		fprintf(f, "%s%" PRIu64, i ? ", " : "", r->staleness_hist[i]);
	fprintf(f, "],\n");
	json_num(f, "initial_loss", r->initial_loss);
	json_num(f, "final_loss", r->final_loss);
	if (!isnan(c->target_loss)) {
		json_num(f, "target_loss", c->target_loss);
		json_num(f, "target_window_s", c->target_window);
		json_num(f, "time_to_target_s",
			 c->reached ? c->time_to_target : INFINITY); /* null */
	}
	json_u64(f, "steps", r->steps);
	json_u64(f, "pushes", r->pushes);
	json_u64(f, "contributions", r->contributions);
	json_u64(f, "applies", r->applies);
	json_u64(f, "regroups", r->regroups);
	json_u64(f, "events", r->events);
	fprintf(f, "  \"wall_s\": %.3f\n}\n", r->wall_s);
}

static void write_curve(FILE *f, const struct cli *c,
			const struct kn__sim_result *r)
{
	(void)c;
	fprintf(f, "t_s,loss\n");
	for (size_t i = 0; i < r->ncurve; i++)
		fprintf(f, "%.9g,%.9g\n", r->curve[i].t, r->curve[i].loss);
}

typedef void write_fn(FILE *f, const struct cli *c,
		      const struct kn__sim_result *r);

/* @path written by @fn: 0, or -errno once said on stderr. */
static int write_file(const struct cli *c, const char *path, write_fn *fn,
		      const struct kn__sim_result *r)
{
	FILE *f = fopen(path, "w");
	int ret;

	if (f) {
		fn(f, c, r);
		if (fclose(f) == 0)
			return 0;
	}
	ret = -errno;
	fprintf(stderr, "%s: %s: %s\n", c->prog, path, strerror(errno));
	return ret;
}

static void summary(const struct cli *c, const struct kn__sim_result *r)
{
	const struct kn__sim_config *g = &c->cfg;

	printf("%s: %s, %" PRIu32 " worker%s, %" PRIu32 " server%s, %" PRIu32
	       " iterations each, imbalance %s, seed %" PRIu64 "\n",
	       c->prog, kn__sync_protocol_name(g->sync.protocol), g->workers,
	       g->workers == 1 ? "" : "s", g->servers,
	       g->servers == 1 ? "" : "s", g->iterations, r->imbalance,
	       g->seed);
	printf("  simulated time    %.6g s (%" PRIu64 " events in %.2f s "
	       "wall)\n",
	       r->sim_time_s, r->events, r->wall_s);
	printf("  throughput        %.6g iterations/s (all workers)\n",
	       r->iterations_per_s);
	printf("  wait fraction     %.4f\n", r->wait_fraction);
	printf("  staleness         mean %.3f, max %" PRIu64 "\n",
	       r->mean_staleness, r->max_staleness);
	printf("  loss              %.6g at the start, %.6g at the end\n",
	       r->initial_loss, r->final_loss);
	if (!isnan(c->target_loss) && c->reached)
		printf("  time to loss %g   %.6g s (mean over %g s)\n",
		       c->target_loss, c->time_to_target, c->target_window);
	else if (!isnan(c->target_loss))
		printf("  time to loss %g   not reached (mean over %g s)\n",
		       c->target_loss, c->target_window);
	if (c->curve)
		printf("  curve             %s (%zu points)\n", c->curve,
		       r->ncurve);
	fflush(stdout);
}

int kn_sim_main(int argc, char **argv)
{
	struct cli c = { .prog = argc > 0 && argv[0] ? argv[0] : "sim",
			 .target_loss = NAN,
			 .target_window = 1 };
	struct kn__sim_result res;
	struct kn__sim *sim = NULL;
	const char *slash = strrchr(c.prog, '/');
	char err[256] = "";
	int ret;

	if (slash)
		c.prog = slash + 1;
	kn__sim_config_init(&c.cfg);
	if (parse(&c, argc, argv))
		return 2;
	if (c.help) {
		usage(stdout, c.prog);
		return 0;
	}
	if (!c.quiet) {
		c.cfg.progress = progress;
		c.cfg.progress_arg = &c;
	}
	c.wall0 = c.last = wall_clock();
	ret = kn__sim_create(&c.cfg, err, sizeof(err), &sim);
	if (ret) {
		fprintf(stderr, "%s: %s\n", c.prog, err);
		return ret == -EINVAL ? 2 : 1;
	}
	ret = kn__sim_run(sim, &res);
	if (ret) {
		fprintf(stderr, "%s: %s\n", c.prog, kn__sim_strerror(sim));
		kn__sim_destroy(sim);
		return 1;
	}
	if (!isnan(c.target_loss))
		c.reached = kn__sim_time_to_loss(res.curve, res.ncurve,
						 c.target_loss, c.target_window,
						 &c.time_to_target) == 0;
	summary(&c, &res);
	ret = 0;
	if (c.json && write_file(&c, c.json, write_json, &res))
		ret = 1;
	if (c.curve && write_file(&c, c.curve, write_curve, &res))
		ret = 1;
	kn__sim_destroy(sim);
	return ret;
}
