/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_cgpp.c - how fast the CGPP solvers of sync/cgpp.h are and how
 * good their answers: CGP_AGA at n = 16, 128 and 1000, CGP_PLS at
 * n = 16, 128, 1000 and 10000, on seeded speeds from a persistent and a
 * fluctuating imbalance model (sync/imbalance.h), with the exhaustive
 * oracle's Lambda beside them where n <= 20.
 *
 * A worker's step time is base x the mean of its first 8 imbalance
 * factors (steps at t = 0..7 s), what a short predictor would see; the
 * times are sorted, as CGPP wants them.  The sync cost is that of a 1 M
 * float model over 10 Gb/s: C_sync(m) = 1 ms + m x 3.2 ms.  Time is the
 * median of --runs runs of one solve (PLS: create and select), by
 * CLOCK_MONOTONIC; the answer is the same every run (fixed seeds).
 *
 *	bench_cgpp [--csv] [--runs N] [--seed S]
 *
 * --csv prints `solver,n,median_ms,lambda,tau_max,feasible,gap_to_oracle`
 * (gap_to_oracle = 1 - lambda / oracle lambda where n <= 20, else empty),
 * the persistent model's rows first, then the fluctuating model's;
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
#define AGA_MAX_N 1000

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static int draw_times(const char *spec, uint64_t seed, uint32_t n, double *t)
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
		for (int s = 0; s < 8; s++)
			f += kn__imb_factor(&m, &w, s);
		t[i] = 0.1 * f / 8;
	}
	qsort(t, n, sizeof(*t), cmp_double);
	return 0;
}

static int solve(int pls, const struct kn__cgpp *p, uint64_t seed,
		 uint8_t *cuts, struct kn__cgpp_eval *ev)
{
	struct kn__cgpp_pls *a;
	int rc;

	if (!pls)
		return kn__cgpp_aga(p, seed, NULL, cuts, ev);
	rc = kn__cgpp_pls_create(p, seed, 64, &a);
	if (rc)
		return rc;
	rc = kn__cgpp_pls_select(a, p->bound, cuts, ev);
	kn__cgpp_pls_destroy(a);
	return rc;
}

int main(int argc, char **argv)
{
	bool csv = false;
	unsigned runs = 5;
	uint64_t seed = 1;
	double sample[MAX_RUNS];
	uint32_t nmax = sizes[sizeof(sizes) / sizeof(sizes[0]) - 1];
	double *t = malloc(nmax * sizeof(*t));
	uint8_t *cuts = malloc(nmax);

	if (!t || !cuts) {
		fprintf(stderr, "bench_cgpp: out of memory\n");
		return 1;
	}
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--csv")) {
			csv = true;
		} else if (!strcmp(argv[i], "--runs") && i + 1 < argc) {
			runs = (unsigned)strtoul(argv[++i], NULL, 10);
			if (runs < 1 || runs > MAX_RUNS)
				bad_value("runs", argv[i], "1..64");
		} else if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
			seed = strtoull(argv[++i], NULL, 10);
		} else {
			fprintf(stderr, "usage: bench_cgpp [--csv] [--runs N] "
					"[--seed S]\n");
			return 2;
		}
	}
	bench_header(csv,
		     "solver,n,median_ms,lambda,tau_max,feasible,"
		     "gap_to_oracle",
		     "%-18s %-4s %6s %10s %10s %10s %12s %8s %3s %10s\n",
		     "model", "alg", "n", "median_ms", "min_ms", "max_ms",
		     "lambda", "tau_max", "ok", "gap");

	for (size_t mi = 0; mi < sizeof(models) / sizeof(models[0]); mi++) {
		for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]);
		     si++) {
			uint32_t n = sizes[si];
			struct kn__cgpp p = {
				.t = t,
				.n = n,
				.batch = 32,
				.lat = 1e-3,
				.bytes = 4e6,
				.bw = 1.25e9,
				.bound = KN__CGPP_DEFAULT_BOUND,
			};
			struct kn__cgpp_eval oracle = { 0 };
			bool have_oracle = false;

			if (draw_times(models[mi], seed + n, n, t))
				return 1;
			if (n <= KN__CGPP_EXHAUSTIVE_MAX) {
				if (kn__cgpp_exhaustive(&p, cuts, &oracle))
					return 1;
				have_oracle = true;
			}
			for (int pls = 0; pls < 2; pls++) {
				struct kn__cgpp_eval ev;
				struct stats st;
				char gap[32] = "";
				int rc;

				if (!pls && n > AGA_MAX_N)
					continue;
				for (unsigned r = 0; r < runs; r++) {
					double t0 = now_ms();

					rc = solve(pls, &p, seed, cuts, &ev);
					sample[r] = now_ms() - t0;
					if (rc) {
						fprintf(stderr,
							"bench_cgpp: n %u: "
							"%s\n",
							n, strerror(-rc));
						return 1;
					}
				}
				st = summarize(sample, runs);
				if (have_oracle)
					snprintf(gap, sizeof(gap), "%.3g",
						 1 - ev.lambda / oracle.lambda);
				if (csv)
					printf("%s,%u,%.3f,%.6g,%.6g,%d,%s\n",
					       pls ? "pls" : "aga", n, st.med,
					       ev.lambda, ev.tau_max,
					       ev.feasible, gap);
				else
					printf("%-18s %-4s %6u %10.3f %10.3f "
					       "%10.3f %12.6g %8.4g %3s "
					       "%10s\n",
					       models[mi], pls ? "pls" : "aga",
					       n, st.med, st.min, st.max,
					       ev.lambda, ev.tau_max,
					       ev.feasible ? "yes" : "no", gap);
			}
		}
	}
	free(cuts);
	free(t);
	return 0;
}
