/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_engine.c - figures for the engine: the round time and throughput
 * of BSP push-pull over loopback TCP, next to the transport's own stream
 * bandwidth measured in the same run.
 *
 * For every (workers, servers, size) it starts a fresh job: a 32-byte
 * random secret in a 0600 file, a free port on 127.0.0.1, and a
 * coordinator and the servers as child processes of the `kanel` binary
 * (their output goes to a log file, shown when one of them dies), all
 * started, waited for and killed through launch/ (launch.h), as `kanel
 * launch` does.  The
 * workers are threads of this process, each with its own kn_worker, all
 * registering one fp32 tensor of the size under the same key.  A sample
 * is R rounds of kn_worker_step() by every worker at once (BSP keeps them
 * in lockstep); a round's time runs from the moment the last worker
 * finished the previous round to the moment the last worker finished
 * this one, and a sample is the median round of its R.  R is calibrated
 * so that a sample takes about 0.2 s.  gbps counts both directions of
 * every worker: 2 * bytes * workers / round time.
 *
 * The baseline is the transport alone: perf/bench_transport's stream test,
 * two threads with one tcp context each, side 0 streaming write_imms of
 * the same size into side 1 over 127.0.0.1; its gbps is bytes / time per
 * message.  This program sees kanel.h alone, so the baseline runs in
 * bench_transport --serve-stream, a co-process started once for the run
 * (from this program's folder, or --bench-transport) with its sides up
 * all along: a line on its stdin asks for one sample and a line on its
 * stdout gives the messages and the time (a warm-up per job sizes the
 * samples to about 0.1 or 0.2 s).  Engine and transport samples of a job
 * alternate, the order too, and the transport samples of all the jobs of
 * a size make that size's baseline, so that ratio_vs_transport (engine
 * gbps / transport gbps) compares the same stretch of time.  Every figure
 * is a median over repeats with min and max.  The parameters are checked
 * once per job against the SGD updates the rounds made.  Every wait has a
 * deadline (the co-process's answers included); a child that dies is
 * named.  It prints figures and judges nothing: it is not a test.
 *
 * This file holds the options and runs the jobs; the job's processes,
 * the baseline co-process, the worker threads and the output have files
 * of their own (bench_engine.h says which holds what).
 */
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_engine.h"
#include "kanel.h"

struct bench_cfg cfg;

/*
 * One job: @workers worker threads and @servers servers exchanging the
 * @ntensors tensors of @counts elements of @dtype.
 * Engine and transport samples alternate, the transport's streaming
 * messages of @tp_bytes; a warm-up of each sizes the samples.
 */
static void bench_job(size_t workers, size_t servers, unsigned int ntensors,
		      const size_t *counts, enum kn_dtype dtype,
		      size_t tp_bytes, struct result *r, double *tp_s)
{
	double eng_s[MAX_REPS], first_s[MAX_REPS], el, *round_ns,
		t0 = bench_now_ns(), t1;
	unsigned long rounds, total = CAL_ROUNDS;
	size_t bytes = job_tensors(ntensors, counts, dtype);
	char size[32];
	int port;

	fprintf(stderr,
		"bench_engine: %zu worker%s, %zu server%s, %s%s%s: ", workers,
		workers > 1 ? "s" : "", servers, servers > 1 ? "s" : "",
		ntensors > 1 ? cfg.model_name : "", ntensors > 1 ? " " : "",
		size_name(bytes, size, sizeof(size)));
	port = free_port();
	job_env(workers, servers, port);
	/* setenv is done: from here other threads may read the env */
	spawn("coordinator", 0);
	wait_listening(port);
	for (unsigned int s = 0; s < servers; s++)
		spawn("server", s);
	round_ns = malloc(MAX_ROUNDS * sizeof(*round_ns));
	if (!round_ns)
		bench_check(-ENOMEM, "malloc");
	workers_start(workers);
	workers_wait("the job to start (kn_worker_create and "
		     "kn_worker_start of every worker)",
		     WAIT_S + 10, true);
	t1 = bench_now_ns();
	fprintf(stderr, "started in %.1f s; ", (t1 - t0) / 1e9);

	/*
	 * Warm-up: CAL_ROUNDS rounds, then, if they were over too soon to
	 * time a round well (the first rounds are the slowest), as many as
	 * take CAL_NS; the rounds of a sample follow from the last.
	 */
	rounds = CAL_ROUNDS;
	engine_sample(rounds, round_ns, &el, NULL);
	if (el < CAL_NS) {
		rounds = (unsigned long)fmin(
			fmax(CAL_NS * rounds / el, CAL_ROUNDS), MAX_ROUNDS);
		engine_sample(rounds, round_ns, &el, NULL);
		total += rounds;
	}
	rounds = (unsigned long)fmin(
		fmax(SAMPLE_NS * (double)rounds / el, MIN_ROUNDS), MAX_ROUNDS);
	stream_calibrate(tp_bytes, cfg.tp_ns);
	fprintf(stderr, "%u samples of %lu rounds ", cfg.reps, rounds);
	for (unsigned int s = 0; s < cfg.reps; s++) {
		for (int i = 0; i < 2; i++) {
			if ((s + (unsigned int)i) % 2 == 0) {
				eng_s[s] = engine_sample(rounds, round_ns, &el,
							 &first_s[s]);
				total += rounds;
			} else {
				tp_s[s] = stream_sample(tp_bytes);
			}
		}
		fputc('.', stderr);
	}
	fprintf(stderr, " %.1f s\n", (bench_now_ns() - t1) / 1e9);
	if (params_check(total)) {
		fprintf(stderr, "bench_engine: wrong parameters: the figures "
				"of this job mean nothing\n");
		exit(1);
	}

	workers_go(0); /* leave: the job ends, and its processes with it */
	workers_join();
	children_stop();
	if (cfg.stages)
		stages_show(workers, servers, bytes);
	free(round_ns);

	*r = (struct result){ .workers = workers,
			      .servers = servers,
			      .bytes = bytes,
			      .eng = summarize(eng_s, cfg.reps) };
	if (cfg.forward && ntensors > 1)
		r->first = summarize(first_s, cfg.reps);
	r->gbps = 2.0 * (double)bytes * (double)workers / r->eng.med;
}

/*
 * Every job of one size, then their rows.  The transport samples of all
 * these jobs make one baseline for the size: the median of many samples
 * taken in the same stretch of time, which one job's few would not be.
 * Returns the ratio of 1 worker and 1 server (NAN if not measured).
 */
static double bench_size(size_t bytes)
{
	unsigned int njobs = cfg.nworkers * cfg.nservers, n = 0;
	struct result *r = calloc(njobs, sizeof(*r));
	double *tp_s = calloc((size_t)njobs * cfg.reps, sizeof(*tp_s));
	double tp_gbps, ratio1 = NAN;
	size_t count[1] = { bytes / sizeof(float) };

	if (!r || !tp_s)
		bench_check(-ENOMEM, "calloc");
	for (unsigned int v = 0; v < cfg.nservers; v++)
		for (unsigned int w = 0; w < cfg.nworkers; w++, n++)
			bench_job(cfg.workers[w], cfg.servers[v], 1, count,
				  KN_DTYPE_FP32, bytes, &r[n],
				  tp_s + (size_t)n * cfg.reps);
	tp_gbps = baseline_show(bytes, "", tp_s, njobs * cfg.reps);
	for (unsigned int i = 0; i < njobs; i++) {
		r[i].tp_gbps = tp_gbps;
		r[i].ratio = r[i].gbps / tp_gbps;
		emit(&r[i]);
		if (r[i].workers == 1 && r[i].servers == 1)
			ratio1 = r[i].ratio;
	}
	free(tp_s);
	free(r);
	return ratio1;
}

/* ---- --model: a real network's list of tensors ---- */

/*
 * Read the model list @path: one tensor a line, its element count first
 * (a name may follow); '#' starts a comment, blank lines are skipped.
 */
static void model_load(const char *path)
{
	FILE *f = fopen(path, "r");
	char line[512];
	unsigned int no = 0;

	if (!f) {
		fprintf(stderr, "bench_engine: --model %s: %s\n", path,
			strerror(errno));
		exit(2);
	}
	while (fgets(line, sizeof(line), f)) {
		char *p = line, *end;
		unsigned long long n;

		no++;
		p[strcspn(p, "#\n")] = 0;
		p += strspn(p, " \t");
		if (!*p)
			continue;
		errno = 0;
		n = strtoull(p, &end, 10);
		if (*p < '0' || *p > '9' || errno || !n || n > (1ull << 34) ||
		    (*end && *end != ' ' && *end != '\t')) {
			fprintf(stderr,
				"bench_engine: %s:%u: not an element count "
				"(1 to 2^34) at the start of the line\n",
				path, no);
			exit(2);
		}
		if (cfg.ntensors == MAX_TENSORS) {
			fprintf(stderr,
				"bench_engine: %s: more than %d tensors\n",
				path, MAX_TENSORS);
			exit(2);
		}
		cfg.counts[cfg.ntensors++] = (size_t)n;
	}
	fclose(f);
	if (cfg.ntensors < 2) {
		fprintf(stderr,
			"bench_engine: %s: %u tensor%s; a model has 2 or "
			"more (one tensor: --sizes)\n",
			path, cfg.ntensors, cfg.ntensors == 1 ? "" : "s");
		exit(2);
	}
}

/*
 * The model's jobs: for every (workers, servers), the model's tensors,
 * then one tensor of the same bytes, each a job of its own.  Every
 * transport sample streams messages of the chunk size (the engine's
 * write unit for every tensor as large), or of the model's bytes if
 * less, and all of them make one baseline.
 */
static void bench_model(const size_t (*jobs)[2], unsigned int njobs)
{
	size_t es = kn_dtype_size(cfg.dtype), total[1] = { 0 }, tp_bytes;
	struct result *r = calloc((size_t)njobs * 2, sizeof(*r));
	double *tp_s = calloc((size_t)njobs * 2 * cfg.reps, sizeof(*tp_s));
	double tp_gbps;

	if (!r || !tp_s)
		bench_check(-ENOMEM, "calloc");
	for (unsigned int t = 0; t < cfg.ntensors; t++)
		total[0] += cfg.counts[t];
	tp_bytes = total[0] * es < cfg.chunk_bytes ? total[0] * es
						   : cfg.chunk_bytes;
	for (unsigned int j = 0; j < njobs; j++) {
		bench_job(jobs[j][0], jobs[j][1], cfg.ntensors, cfg.counts,
			  cfg.dtype, tp_bytes, &r[2 * j],
			  tp_s + (size_t)2 * j * cfg.reps);
		if (cfg.forward) {
			emit_forward(&r[2 * j], total[0] * es);
			continue;
		}
		bench_job(jobs[j][0], jobs[j][1], 1, total, cfg.dtype, tp_bytes,
			  &r[2 * j + 1], tp_s + (size_t)(2 * j + 1) * cfg.reps);
	}
	if (cfg.forward) {
		free(tp_s);
		free(r);
		return;
	}
	tp_gbps = baseline_show(tp_bytes, " messages", tp_s,
				njobs * 2 * cfg.reps);
	for (unsigned int j = 0; j < njobs; j++) {
		r[2 * j].tp_gbps = tp_gbps;
		r[2 * j].ratio = r[2 * j].gbps / tp_gbps;
		emit_model(&r[2 * j], &r[2 * j + 1]);
	}
	free(tp_s);
	free(r);
}

static void usage(void)
{
	printf("usage: bench_engine [options]\n"
	       "  --quick             3 repeats; workers 1,2,4, servers 1,2,\n"
	       "                      sizes 64K,1M,16M unless given\n"
	       "  --csv               CSV on stdout, other text on stderr\n"
	       "  --stages            after each job, where its time went: the "
	       "median and\n"
	       "                      90th percentile of every stage the "
	       "workers and the\n"
	       "                      servers measured (their --metrics "
	       "lines)\n"
	       "  --workers LIST      worker threads, e.g. 1,2,4,8 (the "
	       "default)\n"
	       "  --servers LIST      server processes, e.g. 1,2 (the "
	       "default)\n"
	       "  --sizes LIST        tensor bytes, e.g. 4K,64K,1M,16M,64M "
	       "(the default)\n"
	       "  --chunk-bytes N     KANEL_CHUNK_BYTES of the jobs (default "
	       "512K)\n"
	       "  --fuse-bytes N      KANEL_FUSE_BYTES of the jobs: tensors "
	       "below N are\n"
	       "                      fused (default 64K; 0: none)\n"
	       "  --push-window N     KANEL_PUSH_WINDOW of the jobs (default "
	       "4M; 0: no limit)\n"
	       "  --forward           with --model: a round is a simulated "
	       "training step\n"
	       "                      (backward pass pushing each gradient, "
	       "forward pass\n"
	       "                      waiting for each layer); reports the "
	       "time until\n"
	       "                      layer 0 is back\n"
	       "  --order fifo|priority  --forward: priorities in push "
	       "order, or the\n"
	       "                      registration order (the default)\n"
	       "  --compute-gbps G    --forward: backward pass speed, GB of "
	       "the model\n"
	       "                      per second (default 8; forward: 2G)\n"
	       "  --model NAME|FILE   a network's tensors instead of --sizes: "
	       "resnet50,\n"
	       "                      bert-base, vgg16 (perf/models/) or a "
	       "FILE with one\n"
	       "                      element count a line; jobs 1w1s, 2w1s, "
	       "4w2s unless\n"
	       "                      --workers or --servers are given\n"
	       "  --dtype TYPE        the model's dtype: fp32 (the default), "
	       "fp16, bf16\n"
	       "  --kanel PATH        the kanel binary (default: "
	       "../tools/kanel from\n"
	       "                      this program's folder)\n"
	       "  --bench-transport PATH\n"
	       "                      bench_transport, which measures the "
	       "baseline (default:\n"
	       "                      the one in this program's folder)\n"
	       "Sizes may end in K, M or G (binary), from 4 KiB to %zu MiB, "
	       "multiples of 4.\n",
	       MAX_SIZE / MIB);
}

/*
 * @rel from this program's own folder (the build tree's perf/) into @path
 * of 4096 bytes, unless an option set it.
 */
static void default_path(char *path, const char *rel)
{
	char self[4096];
	ssize_t n;

	if (path[0])
		return;
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		bench_check(-errno, "readlink /proc/self/exe");
	self[n] = 0;
	snprintf(path, 4096, "%s/%s", dirname(self), rel);
	if (realpath(path, self))
		snprintf(path, 4096, "%s", self);
}

/* A program we start, @option to say where, must be there. */
static void need_program(const char *path, const char *what, const char *option)
{
	if (access(path, X_OK) == 0)
		return;
	fprintf(stderr,
		"bench_engine: no %s at %s (%s); build it (ninja -C BUILD-DIR) "
		"or pass --%s PATH\n",
		what, path, strerror(errno), option);
	exit(2);
}

/* 0, or one size up to @max (the list parser takes sizes from 1). */
static size_t zero_or_size(const char *option, char *arg, size_t max,
			   const char *max_name)
{
	size_t v[BENCH_MAX_LIST];
	char why[64];

	if (!strcmp(arg, "0"))
		return 0;
	if (parse_list(option, arg, NULL, 1, max, true, v) != 1) {
		snprintf(why, sizeof(why), "one size, 0 to %s", max_name);
		bad_value(option, arg, why);
	}
	return v[0];
}

static void parse_args(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "quick", no_argument, NULL, 'q' },
		{ "stages", no_argument, NULL, 'g' },
		{ "csv", no_argument, NULL, 'c' },
		{ "workers", required_argument, NULL, 'w' },
		{ "servers", required_argument, NULL, 's' },
		{ "sizes", required_argument, NULL, 'S' },
		{ "chunk-bytes", required_argument, NULL, 'C' },
		{ "fuse-bytes", required_argument, NULL, 'F' },
		{ "push-window", required_argument, NULL, 'W' },
		{ "forward", no_argument, NULL, 'f' },
		{ "order", required_argument, NULL, 'o' },
		{ "compute-gbps", required_argument, NULL, 'G' },
		{ "kanel", required_argument, NULL, 'k' },
		{ "bench-transport", required_argument, NULL, 'b' },
		{ "model", required_argument, NULL, 'm' },
		{ "dtype", required_argument, NULL, 'd' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static const size_t def_sizes[] = { 4 * KIB, 64 * KIB, MIB, 16 * MIB,
					    64 * MIB };
	static const size_t quick_sizes[] = { 64 * KIB, MIB, 16 * MIB };
	static const size_t def_workers[] = { 1, 2, 4, 8 };
	static const size_t def_servers[] = { 1, 2 };
	size_t chunk[BENCH_MAX_LIST];
	int c;

	cfg.chunk_bytes = 512 * KIB;
	cfg.fuse_bytes = 64 * KIB;
	cfg.push_window = 4 * MIB;
	cfg.compute_gbps = 8;
	while ((c = bench_getopt(argc, argv, longopts, usage)) != -1) {
		switch (c) {
		case 'q':
			cfg.quick = true;
			break;
		case 'g':
			cfg.stages = true;
			break;
		case 'c':
			cfg.csv = true;
			break;
		case 'w':
			cfg.nworkers =
				parse_list("workers", optarg, NULL, 1,
					   MAX_WORKERS, false, cfg.workers);
			break;
		case 's':
			cfg.nservers =
				parse_list("servers", optarg, NULL, 1,
					   MAX_SERVERS, false, cfg.servers);
			break;
		case 'S':
			cfg.nsizes = parse_list("sizes", optarg, NULL, MIN_SIZE,
						MAX_SIZE, true, cfg.sizes);
			for (unsigned int i = 0; i < cfg.nsizes; i++)
				if (cfg.sizes[i] % 4)
					bad_value("sizes", optarg,
						  "fp32: a multiple of 4");
			break;
		case 'C':
			if (parse_list("chunk-bytes", optarg, NULL, 4 * KIB,
				       1024 * MIB, true, chunk) != 1 ||
			    chunk[0] % 4)
				bad_value("chunk-bytes", optarg,
					  "one size, a multiple of 4");
			cfg.chunk_bytes = chunk[0];
			break;
		case 'f':
			cfg.forward = true;
			break;
		case 'o':
			if (strcmp(optarg, "fifo") &&
			    strcmp(optarg, "priority"))
				bad_value("order", optarg, "fifo or priority");
			cfg.fifo = !strcmp(optarg, "fifo");
			break;
		case 'G': {
			char *end;

			cfg.compute_gbps = strtod(optarg, &end);
			if (*end || !(cfg.compute_gbps > 0) ||
			    !isfinite(cfg.compute_gbps))
				bad_value("compute-gbps", optarg,
					  "a number above 0");
			break;
		}
		case 'W':
			cfg.push_window = zero_or_size("push-window", optarg,
						       1024 * MIB, "1024M");
			break;
		case 'F':
			cfg.fuse_bytes =
				zero_or_size("fuse-bytes", optarg, MIB, "1M");
			break;
		case 'k':
			snprintf(cfg.kanel, sizeof(cfg.kanel), "%s", optarg);
			break;
		case 'b':
			snprintf(cfg.transport, sizeof(cfg.transport), "%s",
				 optarg);
			break;
		case 'm':
			if (strchr(optarg, '/'))
				snprintf(cfg.model, sizeof(cfg.model), "%s",
					 optarg);
			else
				snprintf(cfg.model, sizeof(cfg.model),
					 "%s/%s.txt", KN_MODELS_DIR, optarg);
			snprintf(cfg.model_name, sizeof(cfg.model_name), "%s",
				 basename(optarg));
			cfg.model_name[strcspn(cfg.model_name, ".")] = 0;
			break;
		case 'd':
			cfg.dtype = (enum kn_dtype)0;
			while (kn_dtype_name(cfg.dtype) &&
			       strcmp(kn_dtype_name(cfg.dtype), optarg))
				cfg.dtype++;
			if (!kn_dtype_name(cfg.dtype))
				bad_value("dtype", optarg,
					  "fp32, fp16 or bf16");
			break;
		}
	}
	default_path(cfg.kanel, "../tools/kanel");
	need_program(cfg.kanel, "kanel binary", "kanel");
	default_path(cfg.transport, "bench_transport");
	need_program(cfg.transport, "bench_transport", "bench-transport");
	if (cfg.model[0] && cfg.nsizes)
		bad_value("model", cfg.model, "--sizes is for one tensor");
	if (cfg.forward && !cfg.model[0])
		bad_value("forward", "", "a model's step: give --model");
	if (cfg.model[0])
		model_load(cfg.model);
	if (!cfg.nsizes && cfg.quick) {
		cfg.nsizes = 3;
		memcpy(cfg.sizes, quick_sizes, sizeof(quick_sizes));
	} else if (!cfg.nsizes) {
		cfg.nsizes = 5;
		memcpy(cfg.sizes, def_sizes, sizeof(def_sizes));
	}
	cfg.model_pairs = cfg.model[0] && !cfg.nworkers && !cfg.nservers;
	if (!cfg.nworkers) {
		cfg.nworkers = cfg.quick ? 3 : 4;
		memcpy(cfg.workers, def_workers,
		       cfg.nworkers * sizeof(def_workers[0]));
	}
	if (!cfg.nservers) {
		cfg.nservers = 2;
		memcpy(cfg.servers, def_servers, sizeof(def_servers));
	}
	cfg.reps = cfg.quick ? 3 : MAX_REPS;
	/* many jobs' samples make a size's baseline: each may be short */
	cfg.tp_ns = cfg.quick ? 0.1e9 : 0.2e9;
}

int main(int argc, char **argv)
{
	double load[1], target = NAN;
	char chunk[32], fuse[32];
	FILE *f;

	parse_args(argc, argv);
	/* the workers pass --role and --rank; the children get their own */
	unsetenv("KANEL_ROLE");
	unsetenv("KANEL_RANK");
	make_secret();
	atexit(cleanup);
	/* a co-process gone makes our writes to it EPIPE, not our death */
	signal(SIGPIPE, SIG_IGN);
	tp_start();

	f = cfg.csv ? stderr : stdout;
	if (cfg.model[0])
		fprintf(f,
			"# engine: BSP push-pull of model %s (%s): %u %s "
			"tensors, one kn_worker_step() of all a round, sgd, "
			"chunks of %s, fused below %s, over tcp on 127.0.0.1; "
			"workers: threads "
			"of this process; coordinator and servers: %s; "
			"baseline: transport provider %s, write_imm stream; "
			"%u repeats\n",
			cfg.model_name, cfg.model, cfg.ntensors,
			kn_dtype_name(cfg.dtype),
			size_name(cfg.chunk_bytes, chunk, sizeof(chunk)),
			cfg.fuse_bytes
				? size_name(cfg.fuse_bytes, fuse, sizeof(fuse))
				: "0 (none)",
			cfg.kanel, tp_name, cfg.reps);
	else
		fprintf(f,
			"# engine: BSP push-pull of one fp32 tensor, sgd, "
			"chunks of %s, over tcp on 127.0.0.1; workers: "
			"threads of this process; coordinator and servers: "
			"%s; baseline: transport provider %s, write_imm "
			"stream; %u repeats\n",
			size_name(cfg.chunk_bytes, chunk, sizeof(chunk)),
			cfg.kanel, tp_name, cfg.reps);
	if (getloadavg(load, 1) == 1)
		fprintf(f,
			"# %ld CPUs, load average %.2f: jobs with more "
			"processes and threads than CPUs share them\n",
			sysconf(_SC_NPROCESSORS_ONLN), load[0]);
	fprintf(f, "# gbps = 2 * bytes * workers / median round time (both "
		   "directions, all workers); ratio = gbps / transport "
		   "stream gbps\n");
	if (cfg.model[0]) {
		static const size_t pairs[][2] = { { 1, 1 },
						   { 2, 1 },
						   { 4, 2 } };
		size_t jobs[BENCH_MAX_LIST * BENCH_MAX_LIST][2];
		unsigned int njobs = 0;

		if (cfg.model_pairs) {
			memcpy(jobs, pairs, sizeof(pairs));
			njobs = 3;
		}
		for (unsigned int v = 0; !cfg.model_pairs && v < cfg.nservers;
		     v++)
			for (unsigned int w = 0; w < cfg.nworkers; w++) {
				jobs[njobs][0] = cfg.workers[w];
				jobs[njobs++][1] = cfg.servers[v];
			}
		if (cfg.forward) {
			fprintf(f,
				"# --forward: a round is a training step: a "
				"backward pass (%.3g GB/s of the model's "
				"bytes), each gradient pushed (pushpull) as it "
				"is made, last layer first, then a forward "
				"pass (twice as fast), each layer once its "
				"parameters are back; order %s\n",
				cfg.compute_gbps,
				cfg.fifo ? "fifo (priorities in push order)"
					 : "priority (registration order)");
			fprintf(f, "# step = one step; first = until layer "
				   "0's parameters are back (slowest "
				   "worker); compute = the passes alone; "
				   "window in KiB\n");
			bench_header(cfg.csv,
				     "model,dtype,workers,servers,tensors,"
				     "order,push_window,step_us,first_us,"
				     "compute_us,step_vs_compute",
				     "%-9s %5s %7s %7s %7s %8s %9s %10s %10s "
				     "%10s %10s %8s\n",
				     "model", "dtype", "workers", "servers",
				     "tensors", "order", "window", "step_ms",
				     "min_ms", "first_ms", "compute_ms",
				     "vs_comp");
			bench_model((const size_t(*)[2])jobs, njobs);
			tp_stop();
			return 0;
		}
		fprintf(f, "# step = every tensor pushed and pulled once; "
			   "single = one tensor of the model's bytes, its own "
			   "job; vs_single = step / single\n");
		bench_header(cfg.csv,
			     "model,dtype,workers,servers,tensors,bytes,"
			     "median_us,gbps,ratio_vs_transport,single_us,"
			     "vs_single",
			     "%-9s %5s %7s %7s %7s %8s %10s %10s %10s %7s "
			     "%7s %6s %10s %6s\n",
			     "model", "dtype", "workers", "servers", "tensors",
			     "MiB", "step_ms", "min_ms", "max_ms", "GB/s",
			     "tp_GB/s", "ratio", "single_ms", "vs_1");
		bench_model((const size_t(*)[2])jobs, njobs);
		tp_stop();
		return 0;
	}
	bench_header(cfg.csv,
		     "workers,servers,bytes,median_us,gbps,"
		     "ratio_vs_transport",
		     "%7s %7s %6s %11s %11s %11s %8s %8s %6s\n", "workers",
		     "servers", "size", "median_us", "min_us", "max_us", "GB/s",
		     "tp_GB/s", "ratio");
	for (unsigned int s = 0; s < cfg.nsizes; s++) {
		double ratio1 = bench_size(cfg.sizes[s]);

		if (cfg.sizes[s] == 16 * MIB)
			target = ratio1;
	}
	tp_stop();

	if (isnan(target))
		fprintf(f, "# target 1w1s@16MiB: not measured (it needs "
			   "workers 1, servers 1 and size 16M)\n");
	else
		fprintf(f, "# target 1w1s@16MiB: ratio %.3f (>= 0.8 wanted)\n",
			target);
	return 0;
}
