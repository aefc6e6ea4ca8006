/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_engine.h - what the files of bench_engine share (what it
 * measures and how: the top of bench_engine.c).  bench_engine.c holds
 * the options and runs the jobs; it calls the job's processes
 * (bench_engine_procs.c), the baseline co-process
 * (bench_engine_baseline.c), the worker threads
 * (bench_engine_workers.c) and the output (bench_engine_report.c).  The
 * baseline and the workers call into the processes' file (a child that
 * died ends the run), and nothing calls back up.
 */
#ifndef KN_PERF_BENCH_ENGINE_H
#define KN_PERF_BENCH_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

#include "bench_util.h"
#include "kanel.h"

#define MAX_REPS     5
#define WAIT_S	     30 /* deadline of every wait */
#define KIB	     ((size_t)1 << 10)
#define MIB	     ((size_t)1 << 20)
#define MIN_SIZE     (4 * KIB)
#define MAX_SIZE     (256 * MIB)
#define MAX_WORKERS  64
#define MAX_SERVERS  16
#define MAX_CHILDREN (1 + MAX_SERVERS)
#define KEY	     "bench"
#define LR	     0.001
#define SAMPLE_NS    0.2e9 /* time an engine sample should take */
#define CAL_ROUNDS   3	   /* the warm-up that sizes the engine's samples, */
#define CAL_NS	     50e6  /* or as many rounds as take this long */
#define MIN_ROUNDS   3
#define MAX_ROUNDS   1000
#define MAX_TENSORS  4096 /* of a model list */
#define MODEL_ALIGN  64	  /* bytes between a model's tensors */

struct bench_cfg {
	bool quick, csv, stages;
	unsigned int reps;
	double tp_ns;	      /* time a transport sample should take */
	char kanel[4096];     /* the kanel binary */
	char transport[4096]; /* bench_transport, for the baseline */
	size_t chunk_bytes;   /* KANEL_CHUNK_BYTES */
	size_t fuse_bytes;    /* KANEL_FUSE_BYTES */
	size_t push_window;   /* KANEL_PUSH_WINDOW */
	size_t sizes[BENCH_MAX_LIST], workers[BENCH_MAX_LIST],
		servers[BENCH_MAX_LIST];
	unsigned int nsizes, nworkers, nservers;
	/* --model: its file, its tensors' element counts, their dtype */
	char model[4096], model_name[64];
	size_t counts[MAX_TENSORS];
	unsigned int ntensors;
	enum kn_dtype dtype;
	bool model_pairs; /* neither --workers nor --servers: 1w1s, 2w1s, 4w2s */
	/* --forward: a simulated backward and forward pass a round, at
	 * compute_gbps bytes of the model per ns backward (half forward);
	 * fifo: priorities in push order, as an engine without them */
	bool forward, fifo;
	double compute_gbps;
};
extern struct bench_cfg cfg;

/* bench_engine_procs.c: the job's processes, coordinator and servers */
struct child {
	pid_t pid; /* 0: reaped */
	char name[32];
	char log[300];
};

/* the baseline's co-process, for the whole run (bench_engine_baseline.c) */
extern struct child tp_proc;
extern char secret_path[300];
/* --stages: the job's figures file (KANEL_METRICS), one per job */
extern char metrics_path[320];

/* On any exit: no child outlives us, no secret stays behind. */
void cleanup(void);
/* The last lines of a child's log, to stderr. */
void show_log(const struct child *c);
void children_show_logs(void);
/* @c ended with wait status @st: say how, show its log, exit 1. */
void __attribute__((noreturn)) child_died(struct child *c, int st);
/* Every child still running?  One that is not ends the run. */
void children_check(void);
/* A 32-byte random secret in a 0600 file of a fresh temporary folder. */
void make_secret(void);
/* A free TCP port on 127.0.0.1 (the coordinator binds it right after). */
int free_port(void);
/* Wait until the coordinator listens on TCP @port. */
void wait_listening(int port);
/* In a child, before its exec: SIGPIPE's default action. */
int sigpipe_default(void *arg);
/* Start `kanel ROLE` with KANEL_ROLE and KANEL_RANK, output to its log. */
void spawn(const char *role, unsigned int rank);
/* The job is over: SIGTERM, reap, SIGKILL what is left after 5 s. */
void children_stop(void);
/* Set the job's variables, which the children and the workers read. */
void job_env(size_t workers, size_t servers, int port);

/* bench_engine_baseline.c: bench_transport --serve-stream */
extern char tp_name[64]; /* the transport provider it measures */
/* Start it and wait for its "ready PROVIDER". */
void tp_start(void);
/* A warm-up stream of @bytes, which sizes its samples to about @ns. */
void stream_calibrate(size_t bytes, double ns);
/* One stream sample of @bytes: ns per message. */
double stream_sample(size_t bytes);
/* EOF on its stdin ends it: wait for its exit. */
void tp_stop(void);

/* bench_engine_workers.c: the workers, threads of this process */
/* Lay out the tensors of a job, @n of @counts elements: their bytes. */
size_t job_tensors(unsigned int n, const size_t *counts, enum kn_dtype dtype);
/* Start @workers threads, which join the job (workers_wait: started). */
void workers_start(size_t workers);
/* Wait until every worker is idle; @stall_s without a round ends the run. */
void workers_wait(const char *what, double stall_s, bool watch);
/* Hand out the next generation: @rounds rounds, or 0 to leave. */
void workers_go(unsigned long rounds);
/* Every worker left: join the threads and free their buffers. */
void workers_join(void);
/* One sample of @rounds rounds: the median round, in ns. */
double engine_sample(unsigned long rounds, double *round_ns, double *elapsed,
		     double *first);
/* The parameters after @rounds rounds: how many workers disagree. */
unsigned int params_check(unsigned long rounds);

/* bench_engine_report.c: the output */
struct result {
	size_t workers, servers, bytes;
	struct stats eng;   /* ns per round */
	struct stats first; /* --forward: ns until layer 0 is back */
	double gbps, tp_gbps, ratio;
};

const char *size_name(size_t bytes, char *buf, size_t cap);
/* A row of the tables of sizes, of models, of --forward */
void emit(const struct result *r);
void emit_model(const struct result *m, const struct result *one);
void emit_forward(const struct result *m, size_t bytes);
/* The transport's GB/s, the median of @n samples (ns per message of
 * @bytes) on a comment line; @what follows the size there. */
double baseline_show(size_t bytes, const char *what, double *tp_s,
		     unsigned int n);
/* --stages: where the time of the job just ended went, by stage. */
void stages_show(size_t workers, size_t servers, size_t bytes);

#endif /* KN_PERF_BENCH_ENGINE_H */
