/* SPDX-License-Identifier: Apache-2.0 */
/*
 * train_report.c - what `kanel train` makes of its workers' reports: the
 * report lines themselves (a local job's workers write them on a pipe),
 * the job-wide figures, the live progress line, the summary, the curve
 * CSV and the summary JSON (the formats are in docs/training.md).
 *
 * Report lines are text, one per write, far below PIPE_BUF so that the
 * lines of several workers never interleave:
 *   S RANK T ITERS SAMPLES COMPUTE_S DELAY_S WAIT_S EPOCH MAXLOCAL FINAL
 *   E T ITERS EPOCH ACCURACY LOSS FINAL
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tool.h"
#include "trainer.h"

#define STALE_BUCKETS 64 /* as engine/server.c writes them */

int kn__results_init(struct kn__train_results *r, unsigned int workers)
{
	memset(r, 0, sizeof(*r));
	r->workers = workers;
	r->status = calloc(workers ? workers : 1, sizeof(*r->status));
	r->best = NAN;
	r->target_t = -1;
	return r->status ? 0 : -ENOMEM;
}

void kn__results_fini(struct kn__train_results *r)
{
	free(r->status);
	free(r->evals);
	memset(r, 0, sizeof(*r));
}

void kn__results_status(struct kn__train_results *r, unsigned int rank,
			const struct kn__train_status *st)
{
	if (rank < r->workers)
		r->status[rank] = *st;
}

int kn__results_eval(struct kn__train_results *r,
		     const struct kn__train_eval *ev, double target)
{
	if (r->nevals == r->cap) {
		size_t cap = r->cap ? 2 * r->cap : 64;
		void *p = realloc(r->evals, cap * sizeof(*r->evals));

		if (!p)
			return -ENOMEM;
		r->evals = p;
		r->cap = cap;
	}
	r->evals[r->nevals++] = *ev;
	if (!isnan(ev->accuracy) && (isnan(r->best) || ev->accuracy > r->best))
		r->best = ev->accuracy;
	if (r->target_t < 0 && ev->accuracy >= target)
		r->target_t = ev->t;
	return 0;
}

int kn__report_status(char *buf, size_t cap, unsigned int rank,
		      const struct kn__train_status *st)
{
	return snprintf(buf, cap,
			"S %u %.6f %" PRIu64 " %" PRIu64 " %.6f %.6f %.6f "
			"%.6f %u %d\n",
			rank, st->t, st->iters, st->samples, st->compute_s,
			st->delay_s, st->wait_s, st->epoch, st->max_local,
			st->final);
}

int kn__report_eval(char *buf, size_t cap, const struct kn__train_eval *ev)
{
	return snprintf(buf, cap, "E %.6f %" PRIu64 " %.6f %.6f %.6f %d\n",
			ev->t, ev->iters, ev->epoch, ev->accuracy, ev->loss,
			ev->final);
}

int kn__results_line(struct kn__train_results *r, const char *line,
		     double target)
{
	struct kn__train_status st = { .seen = true };
	struct kn__train_eval ev;
	unsigned int rank;
	int final, end = 0;

	if (line[0] == 'S' &&
	    sscanf(line,
		   "S %u %lf %" SCNu64 " %" SCNu64 " %lf %lf %lf %lf %u %d%n",
		   &rank, &st.t, &st.iters, &st.samples, &st.compute_s,
		   &st.delay_s, &st.wait_s, &st.epoch, &st.max_local, &final,
		   &end) == 10 &&
	    !line[end] && rank < r->workers) {
		st.final = final;
		kn__results_status(r, rank, &st);
		return 0;
	}
	if (line[0] == 'E' &&
	    sscanf(line, "E %lf %" SCNu64 " %lf %lf %lf %d%n", &ev.t, &ev.iters,
		   &ev.epoch, &ev.accuracy, &ev.loss, &final, &end) == 6 &&
	    !line[end]) {
		ev.final = final;
		return kn__results_eval(r, &ev, target);
	}
	return -EINVAL;
}

/* The number after "KEY": in @line, or NAN. */
static double json_number(const char *line, const char *key)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	p = strstr(line, pat);
	return p ? strtod(p + strlen(pat), NULL) : NAN;
}

int kn__results_metrics(struct kn__train_results *r, const char *path,
			long from)
{
	uint64_t hist[STALE_BUCKETS] = { 0 }, count = 0, need, seen;
	double sum = 0, max = 0, lead = 0;
	char line[4096];
	FILE *f = fopen(path, "r");

	if (!f)
		return -errno;
	if (from > 0)
		fseek(f, from, SEEK_SET);
	while (fgets(line, sizeof(line), f)) {
		const char *h = strstr(line, "\"staleness_hist\":[");
		double c = json_number(line, "contributions");

		if (!strstr(line, "\"role\":\"server\"") || !h || isnan(c))
			continue;
		count += (uint64_t)c;
		sum += c * json_number(line, "staleness_mean");
		max = fmax(max, json_number(line, "staleness_max"));
		lead = fmax(lead, json_number(line, "max_lead"));
		h += strlen("\"staleness_hist\":[");
		for (int t = 0; t < STALE_BUCKETS && *h && *h != ']'; t++) {
			char *end;

			hist[t] += strtoull(h, &end, 10);
			h = *end == ',' ? end + 1 : end;
		}
	}
	fclose(f);
	if (!count)
		return -ENOENT;
	r->have_staleness = true;
	r->contributions = count;
	r->stale_mean = sum / (double)count;
	r->stale_max = (uint64_t)max;
	r->max_lead = (uint64_t)lead;
	for (int q = 0; q < 2; q++) {
		uint64_t *out = q ? &r->stale_p99 : &r->stale_p50;

		need = (uint64_t)ceil((q ? 0.99 : 0.5) * (double)count);
		seen = 0;
		*out = r->stale_max;
		for (int t = 0; t < STALE_BUCKETS - 1; t++) {
			seen += hist[t];
			if (seen >= need) {
				*out = (uint64_t)t;
				break;
			}
		}
	}
	return 0;
}

/* The slowest worker's training time: the job's. */
static double train_time(const struct kn__train_results *r)
{
	double t = 0;

	for (unsigned int w = 0; w < r->workers; w++)
		t = fmax(t, r->status[w].t);
	return t;
}

static uint64_t total(const struct kn__train_results *r, bool samples)
{
	uint64_t n = 0;

	for (unsigned int w = 0; w < r->workers; w++)
		n += samples ? r->status[w].samples : r->status[w].iters;
	return n;
}

/* The most local steps any worker put in one push (1 without them). */
static uint32_t max_local(const struct kn__train_results *r)
{
	uint32_t m = 1;

	for (unsigned int w = 0; w < r->workers; w++)
		if (r->status[w].max_local > m)
			m = r->status[w].max_local;
	return m;
}

double kn__results_samples_per_s(const struct kn__train_results *r)
{
	double t = train_time(r);

	return t > 0 ? (double)total(r, true) / t : 0;
}

double kn__results_wait_fraction(const struct kn__train_results *r)
{
	double wait = 0, t = 0;

	for (unsigned int w = 0; w < r->workers; w++) {
		wait += r->status[w].wait_s;
		t += r->status[w].t;
	}
	return t > 0 ? wait / t : 0;
}

static double mean_epoch(const struct kn__train_results *r)
{
	double e = 0;
	unsigned int n = 0;

	for (unsigned int w = 0; w < r->workers; w++)
		if (r->status[w].seen) {
			e += r->status[w].epoch;
			n++;
		}
	return n ? e / n : 0;
}

static const struct kn__train_eval *last_eval(const struct kn__train_results *r)
{
	return r->nevals ? &r->evals[r->nevals - 1] : NULL;
}

static const struct kn__train_eval *
final_eval(const struct kn__train_results *r)
{
	for (size_t i = r->nevals; i-- > 0;)
		if (r->evals[i].final)
			return &r->evals[i];
	return NULL;
}

void kn__results_progress(const struct kn__train_results *r,
			  const struct kn__train_opts *o, char *buf, size_t cap)
{
	const struct kn__train_eval *e = last_eval(r);
	char acc[64] = "test accuracy -";

	if (e)
		snprintf(acc, sizeof(acc), "test accuracy %.4f (best %.4f)",
			 e->accuracy, r->best);
	snprintf(buf, cap,
		 "[%6.1f s] %" PRIu64 " steps, epoch %.2f/%g | %s | "
		 "%.0f samples/s | waiting %.1f%%",
		 train_time(r), total(r, false), mean_epoch(r), o->epochs, acc,
		 kn__results_samples_per_s(r),
		 100 * kn__results_wait_fraction(r));
}

/* The name of the job's update, as --optimizer takes it. */
static const char *optimizer_name(const struct kn_job_info *job)
{
	return job->summation ? "sum" : kn_optimizer_name(job->optimizer);
}

void kn__results_summary(const struct kn__train_results *r,
			 const struct kn__train_opts *o,
			 const struct kn_job_info *job, FILE *out)
{
	const struct kn__train_eval *fin = final_eval(r);

	fprintf(out, "kanel train: %s, %s, %u worker%s, imbalance %s%s\n",
		job->protocol_name, kn__model_name(o->model), r->workers,
		r->workers == 1 ? "" : "s", o->imbalance,
		r->rank0_only ? " (worker 0's figures only)" : "");
	/* the job's update, which its coordinator decided */
	fprintf(out, "  optimizer              %s, lr %g", optimizer_name(job),
		(double)job->lr);
	if (!job->summation && job->optimizer == KN_OPT_MOMENTUM)
		fprintf(out, ", momentum %g", (double)job->momentum);
	fputc('\n', out);
	if (r->target_t >= 0)
		fprintf(out, "  time to %.4g accuracy  %.2f s\n", o->target,
			r->target_t);
	else
		fprintf(out, "  time to %.4g accuracy  not reached\n",
			o->target);
	fprintf(out, "  best accuracy          %.4f\n", r->best);
	fprintf(out, "  final accuracy         %.4f\n",
		fin ? fin->accuracy : NAN);
	fprintf(out,
		"  samples/s              %.0f (%" PRIu64
		" samples in %.1f s)\n",
		kn__results_samples_per_s(r), total(r, true), train_time(r));
	fprintf(out, "  wait fraction          %.3f\n",
		kn__results_wait_fraction(r));
	if (r->have_staleness)
		fprintf(out,
			"  staleness              mean %.3f, median %" PRIu64
			", p99 %" PRIu64 ", max %" PRIu64 " (%" PRIu64
			" contributions); most pushes ahead %" PRIu64 "\n",
			r->stale_mean, r->stale_p50, r->stale_p99, r->stale_max,
			r->contributions, r->max_lead);
	else
		fprintf(out, "  staleness              not measured\n");
	if (o->curve)
		fprintf(out, "  curve                  %s (%zu evaluations)\n",
			o->curve, r->nevals);
	fflush(out);
}

typedef void write_fn(FILE *f, const struct kn__train_results *r,
		      const struct kn__train_opts *o,
		      const struct kn_job_info *job);

/* @path written by @fn: 0, or -errno once logged. */
static int write_file(const char *path, write_fn *fn,
		      const struct kn__train_results *r,
		      const struct kn__train_opts *o,
		      const struct kn_job_info *job)
{
	FILE *f = fopen(path, "w");
	int ret;

	if (f) {
		fn(f, r, o, job);
		if (fclose(f) == 0)
			return 0;
	}
	ret = -errno;
	kn__tool_log("kanel train: %s: %s\n", path, strerror(-ret));
	return ret;
}

static void write_curve(FILE *f, const struct kn__train_results *r,
			const struct kn__train_opts *o,
			const struct kn_job_info *job)
{
	(void)o;
	(void)job;
	fprintf(f, "t_s,steps,epoch,test_accuracy,test_loss,final\n");
	for (size_t i = 0; i < r->nevals; i++) {
		const struct kn__train_eval *e = &r->evals[i];

		fprintf(f, "%.3f,%" PRIu64 ",%.4f,%.4f,%.4f,%d\n", e->t,
			e->iters, e->epoch, e->accuracy, e->loss, e->final);
	}
}

int kn__results_write_curve(const struct kn__train_results *r, const char *path)
{
	return write_file(path, write_curve, r, NULL, NULL);
}

/* A number, or null where it is not one (JSON has no NaN). */
static void json_num(FILE *f, const char *key, double v, bool last)
{
	if (isfinite(v))
		fprintf(f, "  \"%s\": %.6g%s\n", key, v, last ? "" : ",");
	else
		fprintf(f, "  \"%s\": null%s\n", key, last ? "" : ",");
}

static void write_json(FILE *f, const struct kn__train_results *r,
		       const struct kn__train_opts *o,
		       const struct kn_job_info *job)
{
	const struct kn__train_eval *fin = final_eval(r);

	fprintf(f, "{\n  \"protocol\": \"%s\",\n  \"model\": \"%s\",\n",
		job->protocol_name, kn__model_name(o->model));
	fprintf(f, "  \"workers\": %u,\n  \"servers\": %u,\n", r->workers,
		job->servers);
	fprintf(f, "  \"imbalance\": \"%s\",\n", o->imbalance);
	json_num(f, "seed", (double)o->seed, false);
	json_num(f, "batch", o->batch, false);
	fprintf(f, "  \"optimizer\": \"%s\",\n", optimizer_name(job));
	json_num(f, "lr", job->lr, false);
	json_num(f, "target_accuracy", o->target, false);
	json_num(f, "time_to_target_s", r->target_t >= 0 ? r->target_t : NAN,
		 false);
	json_num(f, "best_accuracy", r->best, false);
	json_num(f, "final_accuracy", fin ? fin->accuracy : NAN, false);
	json_num(f, "samples_per_s", kn__results_samples_per_s(r), false);
	json_num(f, "wait_fraction", kn__results_wait_fraction(r), false);
	json_num(f, "train_time_s", train_time(r), false);
	json_num(f, "steps", (double)total(r, false), false);
	json_num(f, "samples", (double)total(r, true), false);
	json_num(f, "evaluations", (double)r->nevals, false);
	json_num(f, "max_local_steps", (double)max_local(r), false);
	json_num(f, "staleness_mean", r->have_staleness ? r->stale_mean : NAN,
		 false);
	json_num(f, "staleness_p99",
		 r->have_staleness ? (double)r->stale_p99 : NAN, false);
	json_num(f, "staleness_max",
		 r->have_staleness ? (double)r->stale_max : NAN, false);
	json_num(f, "max_lead", r->have_staleness ? (double)r->max_lead : NAN,
		 false);
	fprintf(f, "  \"figures_of\": \"%s\"\n}\n",
		r->rank0_only ? "worker 0" : "all workers");
}

int kn__results_write_json(const struct kn__train_results *r,
			   const struct kn__train_opts *o,
			   const struct kn_job_info *job, const char *path)
{
	return write_file(path, write_json, r, o, job);
}
