/* SPDX-License-Identifier: Apache-2.0 */
/*
 * trainer.h - `kanel train`'s parts (docs/training.md):
 * - train.c: the command (kn__train_main) and a whole job on this
 *   machine, its workers' reports read from a pipe;
 * - train_options.c: the trainer's own options and its usage;
 * - train_worker.c: the worker: Fashion-MNIST minibatches through the
 *   model, the injected delay, one push and pull per step, and on rank
 *   0 the evaluator, which tests snapshots of the global model on a
 *   thread of its own so the worker never waits for it;
 * - train_report.c: what the workers report (status and evaluations, as
 *   text lines on a pipe in a local job), gathered into the live
 *   progress line, the summary, the curve CSV and the summary JSON.
 * train.c calls the other three; they do not call train.c.
 */
#ifndef KN_TOOL_TRAINER_H
#define KN_TOOL_TRAINER_H

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "kanel.h"
#include "model.h"

struct kn__train_opts {
	enum kn__model_kind model;
	unsigned int hidden;	 /* MLP hidden units */
	unsigned int batch;	 /* minibatch per worker step */
	double epochs;		 /* passes over each worker's shard */
	double time_budget;	 /* seconds of training; 0: none */
	double target;		 /* the accuracy time-to-target measures */
	double step_time;	 /* base injected delay per step, seconds */
	double eval_interval;	 /* seconds between evaluations */
	unsigned int eval_every; /* rank-0 steps between them; 0: none */
	char imbalance[128];	 /* the canonical spec */
	uint64_t seed;
	const char *data;	  /* the dataset's directory */
	const char *curve;	  /* the CSV to write; NULL: none */
	const char *summary_json; /* NULL: none */
	const char *progress;	  /* "auto", "tty" or "log" */
	bool join;
};

/* One worker's progress, as of @t seconds into its training. */
struct kn__train_status {
	double t, compute_s, delay_s, wait_s;
	uint64_t iters, samples;
	double epoch;
	uint32_t max_local; /* ESP, PSP: most local steps in one push */
	bool seen, final;
};

/* One evaluation of the global model (by rank 0). */
struct kn__train_eval {
	double t;	/* rank 0's training time when it was taken */
	uint64_t iters; /* rank 0's steps then */
	double epoch;	/* rank 0's epochs then */
	double accuracy, loss;
	bool final; /* the model rank 0 ended with */
};

struct kn__train_results {
	unsigned int workers;
	struct kn__train_status *status; /* per worker */
	struct kn__train_eval *evals;
	size_t nevals, cap;
	double best;	 /* best accuracy so far */
	double target_t; /* first time at or above the target; < 0: not yet */
	/* staleness, from the servers' --metrics lines */
	bool have_staleness;
	uint64_t contributions, stale_p50, stale_p99, stale_max, max_lead;
	double stale_mean;
	bool rank0_only; /* joined a job: only rank 0's figures are here */
};

/* kanel train's workers when neither --workers nor KANEL_WORKERS says */
#define KN__TRAIN_DEFAULT_WORKERS "4"
/* where a local job's workers find the training set it shares */
#define KN__TRAIN_DATA_FD_ENV "KANEL_TRAIN_DATA_FD"

/* Ctrl-C (SIGINT) or SIGTERM: stop after this step and report. */
extern volatile sig_atomic_t kn__train_stop_requested;

static inline void kn__train_on_stop(int sig)
{
	(void)sig;
	kn__train_stop_requested++;
}

static inline void kn__train_catch_stop(int sig)
{
	struct sigaction sa = { .sa_handler = kn__train_on_stop };

	sigemptyset(&sa.sa_mask);
	sigaction(sig, &sa, NULL);
}

static inline double kn__train_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Sleep @s seconds, through signals. */
static inline void kn__train_sleep(double s)
{
	struct timespec until;
	double end = kn__train_now() + s;

	if (s <= 0)
		return;
	until.tv_sec = (time_t)end;
	until.tv_nsec = (long)((end - (double)until.tv_sec) * 1e9);
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) ==
	       EINTR)
		;
}

/* train_options.c */
void kn__train_usage(FILE *out);
/*
 * Take the trainer's options out of @argv (in place; --protocol becomes
 * --sync), leaving the job's for kn_config_parse: 0, or -EINVAL (said).
 */
int kn__train_take_options(int *argc, char **argv, struct kn__train_opts *o,
			   bool *help);

/* train_worker.c: this process is worker kn_config_rank(@cfg) of the
 * job; @report_fd the pipe of a local job, or -1.  The exit code. */
int kn__train_run_worker(const struct kn__train_opts *o,
			 const struct kn_config *cfg, int report_fd);

/* train_report.c */
int kn__results_init(struct kn__train_results *r, unsigned int workers);
void kn__results_fini(struct kn__train_results *r);
void kn__results_status(struct kn__train_results *r, unsigned int rank,
			const struct kn__train_status *st);
int kn__results_eval(struct kn__train_results *r,
		     const struct kn__train_eval *ev, double target);
/* Parse one report line ("S ..." or "E ..."); -EINVAL if malformed. */
int kn__results_line(struct kn__train_results *r, const char *line,
		     double target);
/* Report lines, as a worker writes them (no newline for NUL). */
int kn__report_status(char *buf, size_t cap, unsigned int rank,
		      const struct kn__train_status *st);
int kn__report_eval(char *buf, size_t cap, const struct kn__train_eval *ev);
/* Merge the servers' lines of a --metrics file from byte @from on. */
int kn__results_metrics(struct kn__train_results *r, const char *path,
			long from);
/* Job-wide figures. */
double kn__results_samples_per_s(const struct kn__train_results *r);
double kn__results_wait_fraction(const struct kn__train_results *r);
/* One progress line (no newline) into @buf. */
void kn__results_progress(const struct kn__train_results *r,
			  const struct kn__train_opts *o, char *buf,
			  size_t cap);
/* The human summary, the curve CSV and the summary JSON; @job is the
 * job's protocol, update and counts (kn_config_job, kn_worker_job). */
void kn__results_summary(const struct kn__train_results *r,
			 const struct kn__train_opts *o,
			 const struct kn_job_info *job, FILE *out);
int kn__results_write_curve(const struct kn__train_results *r,
			    const char *path);
int kn__results_write_json(const struct kn__train_results *r,
			   const struct kn__train_opts *o,
			   const struct kn_job_info *job, const char *path);

#endif /* KN_TOOL_TRAINER_H */
