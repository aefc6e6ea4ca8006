/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_cgpp.c - how fast the CGPP solvers of sync/cgpp.h are and how
 * good their answers: CGP_AGA at n = 16, 128 and 1000, CGP_PLS at
 * n = 16, 128, 1000 and 10000, on seeded speeds from a persistent and a
 * fluctuating imbalance model (sync/imbalance.h), with the exhaustive
 * oracle's Lambda beside them where n <= 20.  Then the same solvers as
 * the CGP planner runs them, on each worker's step-time distribution
 * (its last DIST_SAMPLES steps, struct kn__cgpp_dist) up to n = 1000,
 * the planner's most: rows aga+dist and pls+dist time one plan, the
 * distributions' table built and the solve, which is what a CGP epoch
 * barrier costs the planner.
 *
 * A worker's step time is base x the mean of its first 8 imbalance
 * factors (steps at t = 0..7 s), what a short predictor would see; with
 * distributions, of its first DIST_SAMPLES (steps 0.1 s apart), which are
 * its samples too.  The times are sorted, as CGPP wants them.  The sync cost is that of a 1 M
 * float model over 10 Gb/s: C_sync(m) = 1 ms + m x 3.2 ms.  Time is the
 * median of --runs runs of one solve (PLS: create and select), by
 * CLOCK_MONOTONIC; the answer is the same every run (fixed seeds).
 *
 *	bench_cgpp [--csv] [--runs N] [--seed S]
 *
 * --csv prints `solver,n,median_ms,lambda,tau_max,feasible,gap_to_oracle`
 * (gap_to_oracle = 1 - lambda / oracle lambda where n <= 20, else empty;
 * solver aga, pls, aga+dist or pls+dist), the rows without distributions
 * first, each time the persistent model's before the fluctuating one's;
 * without it a table that also names the model and the spread.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "cgpp.h"
#include "imbalance.h"

#define MAX_RUNS 64

static const char *const models[] = { "persistent:0.25:4", "random:0.05:4" };
static const uint32_t sizes[] = { 16, 128, 1000, 10000 };
#define AGA_MAX_N    1000
#define DIST_MAX_N   1000
#define DIST_SAMPLES 128 /* the planner's window of timings */

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

struct drawn {
	double mean;
	uint32_t rank;
};

static int cmp_drawn(const void *a, const void *b)
{
	const struct drawn *x = a, *y = b;

	return (x->mean > y->mean) - (x->mean < y->mean);
}

/*
 * Every worker's step times: @nsteps steps of base 0.1 s at t = 0, @dt,
 * 2 @dt ... s, their mean into @t, sorted; with @samples, the steps too, at
 * @samples + i nsteps for the worker at sorted position i.  @by_rank is
 * scratch of n nsteps doubles when @samples is set.
 */
static int draw_times(const char *spec, uint64_t seed, uint32_t n,
		      unsigned nsteps, double dt, double *t, double *samples,
		      double *by_rank, struct drawn *order)
{
	struct kn__imb m;
	char err[128];
	int rc = kn__imb_parse(spec, seed, &m, err, sizeof(err));

	if (rc) {
		fprintf(stderr, "bench_cgpp: %s: %s\n", spec, err);
		return rc;
	}
	for (uint32_t i = 0; i < n; i++) {
		struct kn__imb_worker w;
		double f = 0;

		rc = kn__imb_worker_init(&m, i, n, &w);
		if (rc)
			return rc;
		for (unsigned s = 0; s < nsteps; s++) {
			double x = 0.1 * kn__imb_factor(&m, &w, dt * s);

			if (samples)
				by_rank[(size_t)i * nsteps + s] = x;
			f += x;
		}
		order[i] = (struct drawn){ f / nsteps, i };
	}
	qsort(order, n, sizeof(*order), cmp_drawn);
	for (uint32_t i = 0; i < n; i++) {
		t[i] = order[i].mean;
		if (samples)
			memcpy(samples + (size_t)i * nsteps,
			       by_rank + (size_t)order[i].rank * nsteps,
			       nsteps * sizeof(*samples));
	}
	return 0;
}

/* One plan: with @samples, the distributions' table, then the solve. */
static int solve(int pls, struct kn__cgpp *p, const double *samples,
		 const uint32_t *count, uint64_t seed, uint8_t *cuts,
		 struct kn__cgpp_eval *ev)
{
	struct kn__cgpp_dist *d = NULL;
	struct kn__cgpp_pls *a;
	int rc;

	if (samples) {
		rc = kn__cgpp_dist_create(p->t, p->n, samples, count,
					  DIST_SAMPLES, &d);
		if (rc)
			return rc;
	}
	p->dist = d;
	if (!pls) {
		rc = kn__cgpp_aga(p, seed, NULL, cuts, ev);
	} else {
		rc = kn__cgpp_pls_create(p, seed, 64, &a);
		if (!rc) {
			rc = kn__cgpp_pls_select(a, p->bound, cuts, ev);
			kn__cgpp_pls_destroy(a);
		}
	}
	p->dist = NULL;
	kn__cgpp_dist_destroy(d);
	return rc;
}

/* One row: one solver, n and model, timed over @runs solves. */
static int row(bool csv, const char *model, int pls, bool dist,
	       struct kn__cgpp *p, const double *samples, const uint32_t *count,
	       uint64_t seed, unsigned runs, const struct kn__cgpp_eval *oracle,
	       uint8_t *cuts)
{
	static const char *const names[2][2] = { { "aga", "pls" },
						 { "aga+dist", "pls+dist" } };
	double sample[MAX_RUNS];
	struct kn__cgpp_eval ev;
	struct stats st;
	char gap[32] = "";

	for (unsigned r = 0; r < runs; r++) {
		double t0 = now_ms();
		int rc = solve(pls, p, dist ? samples : NULL, count, seed, cuts,
			       &ev);

		sample[r] = now_ms() - t0;
		if (rc) {
			fprintf(stderr, "bench_cgpp: n %u: %s\n", p->n,
				strerror(-rc));
			return rc;
		}
	}
	st = summarize(sample, runs);
	if (oracle)
		snprintf(gap, sizeof(gap), "%.3g",
			 1 - ev.lambda / oracle->lambda);
	if (csv)
		printf("%s,%u,%.3f,%.6g,%.6g,%d,%s\n", names[dist][pls], p->n,
		       st.med, ev.lambda, ev.tau_max, ev.feasible, gap);
	else
		printf("%-18s %-8s %6u %10.3f %10.3f %10.3f %12.6g %8.4g %3s "
		       "%10s\n",
		       model, names[dist][pls], p->n, st.med, st.min, st.max,
		       ev.lambda, ev.tau_max, ev.feasible ? "yes" : "no", gap);
	return 0;
}

/* What the rows of one run share. */
struct bench {
	bool csv;
	unsigned runs;
	uint64_t seed;
	double *t;	     /* [sizes' max] sorted mean step times */
	uint8_t *cuts;	     /* [sizes' max] */
	struct drawn *order; /* [sizes' max] */
	double *samples;     /* [DIST_MAX_N DIST_SAMPLES] by sorted position */
	double *scratch;     /* the same, by rank */
	uint32_t *count;     /* [DIST_MAX_N], all DIST_SAMPLES */
};

/* The rows of one model and size, with distributions or without. */
static int size_rows(struct bench *b, const char *model, uint32_t n, bool dist)
{
	struct kn__cgpp p = {
		.t = b->t,
		.n = n,
		.batch = 32,
		.lat = 1e-3,
		.bytes = 4e6,
		.bw = 1.25e9,
		.bound = KN__CGPP_DEFAULT_BOUND,
	};
	struct kn__cgpp_eval oracle = { 0 };
	bool have_oracle = false;
	int rc = draw_times(model, b->seed + n, n, dist ? DIST_SAMPLES : 8,
			    dist ? 0.1 : 1.0, b->t, dist ? b->samples : NULL,
			    b->scratch, b->order);

	if (rc)
		return rc;
	if (n <= KN__CGPP_EXHAUSTIVE_MAX) {
		struct kn__cgpp_dist *d = NULL;

		if (dist)
			rc = kn__cgpp_dist_create(b->t, n, b->samples, b->count,
						  DIST_SAMPLES, &d);
		p.dist = d;
		if (!rc)
			rc = kn__cgpp_exhaustive(&p, b->cuts, &oracle);
		p.dist = NULL;
		kn__cgpp_dist_destroy(d);
		if (rc)
			return rc;
		have_oracle = true;
	}
	for (int pls = 0; pls < 2 && !rc; pls++)
		if (pls || n <= AGA_MAX_N)
			rc = row(b->csv, model, pls, dist, &p, b->samples,
				 b->count, b->seed, b->runs,
				 have_oracle ? &oracle : NULL, b->cuts);
	return rc;
}

int main(int argc, char **argv)
{
	uint32_t nmax = sizes[sizeof(sizes) / sizeof(sizes[0]) - 1];
	size_t nsamples = (size_t)DIST_MAX_N * DIST_SAMPLES;
	struct bench b = {
		.runs = 5,
		.seed = 1,
		.t = malloc(nmax * sizeof(*b.t)),
		.cuts = malloc(nmax),
		.order = malloc(nmax * sizeof(*b.order)),
		.samples = malloc(nsamples * sizeof(*b.samples)),
		.scratch = malloc(nsamples * sizeof(*b.scratch)),
		.count = malloc(DIST_MAX_N * sizeof(*b.count)),
	};
	int rc = 0;

	if (!b.t || !b.cuts || !b.order || !b.samples || !b.scratch ||
	    !b.count) {
		fprintf(stderr, "bench_cgpp: out of memory\n");
		return 1;
	}
	for (uint32_t i = 0; i < DIST_MAX_N; i++)
		b.count[i] = DIST_SAMPLES;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--csv")) {
			b.csv = true;
		} else if (!strcmp(argv[i], "--runs") && i + 1 < argc) {
			b.runs = (unsigned)strtoul(argv[++i], NULL, 10);
			if (b.runs < 1 || b.runs > MAX_RUNS)
				bad_value("runs", argv[i], "1..64");
		} else if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
			b.seed = strtoull(argv[++i], NULL, 10);
		} else {
			fprintf(stderr, "usage: bench_cgpp [--csv] [--runs N] "
					"[--seed S]\n");
			return 2;
		}
	}
	bench_header(b.csv,
		     "solver,n,median_ms,lambda,tau_max,feasible,"
		     "gap_to_oracle",
		     "%-18s %-8s %6s %10s %10s %10s %12s %8s %3s %10s\n",
		     "model", "alg", "n", "median_ms", "min_ms", "max_ms",
		     "lambda", "tau_max", "ok", "gap");
	for (int dist = 0; dist < 2 && !rc; dist++)
		for (size_t mi = 0; mi < sizeof(models) / sizeof(models[0]);
		     mi++)
			for (size_t si = 0;
			     si < sizeof(sizes) / sizeof(sizes[0]) && !rc; si++)
				if (!dist || sizes[si] <= DIST_MAX_N)
					rc = size_rows(&b, models[mi],
						       sizes[si], dist);
	free(b.count);
	free(b.scratch);
	free(b.samples);
	free(b.order);
	free(b.cuts);
	free(b.t);
	return rc ? 1 : 0;
}
