/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_engine_report.c - bench_engine's output (bench_engine.h): the
 * rows of its tables, text or CSV, and --stages, the breakdown of a
 * job's time by stage that its workers and servers measured.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "bench_engine.h"
#include "kanel.h"

const char *size_name(size_t bytes, char *buf, size_t cap)
{
	if (bytes % MIB == 0)
		snprintf(buf, cap, "%zuM", bytes / MIB);
	else if (bytes % KIB == 0)
		snprintf(buf, cap, "%zuK", bytes / KIB);
	else if (bytes >= MIB)
		snprintf(buf, cap, "%.1fM", (double)bytes / (double)MIB);
	else
		snprintf(buf, cap, "%zu", bytes);
	return buf;
}

void emit(const struct result *r)
{
	char size[32];

	if (cfg.csv) {
		printf("%zu,%zu,%zu,%.3f,%.6g,%.6g\n", r->workers, r->servers,
		       r->bytes, r->eng.med / 1e3, r->gbps, r->ratio);
		fflush(stdout);
		return;
	}
	printf("%7zu %7zu %6s %11.1f %11.1f %11.1f %8.3f %8.3f %6.3f\n",
	       r->workers, r->servers, size_name(r->bytes, size, sizeof(size)),
	       r->eng.med / 1e3, r->eng.min / 1e3, r->eng.max / 1e3, r->gbps,
	       r->tp_gbps, r->ratio);
	fflush(stdout);
}

/*
 * Print what the workers and servers of the job wrote in their figures
 * lines: the median (and 90th percentile) of every stage, in us.
 */
void stages_show(size_t workers, size_t servers, size_t bytes)
{
	FILE *f = fopen(metrics_path, "r"), *out = cfg.csv ? stderr : stdout;
	char line[4096], size[32];

	if (!f) {
		fprintf(stderr,
			"bench_engine: --stages: no figures in %s: %s\n",
			metrics_path, strerror(errno));
		return;
	}
	while (fgets(line, sizeof(line), f)) {
		const char *p = strstr(line, "\"stages\":{"), *role;
		unsigned int rank = 0;

		if (!p)
			continue;
		role = strstr(line, "\"role\":\"server\"") ? "server"
							   : "worker";
		sscanf(strstr(line, "\"rank\":") ? strstr(line, "\"rank\":") + 7
						 : "0",
		       "%u", &rank);
		fprintf(out,
			"# stages %zuw%zus %s, %s %u (p50/p90 us):", workers,
			servers, size_name(bytes, size, sizeof(size)), role,
			rank);
		for (p += 10; *p == '"';) {
			char name[32];
			unsigned long long n;
			double p50, p90, p99;
			int used = 0;

			if (sscanf(p,
				   "\"%31[^\"]\":{\"n\":%llu,\"p50_us\":%lf,"
				   "\"p90_us\":%lf,\"p99_us\":%lf}%n",
				   name, &n, &p50, &p90, &p99, &used) != 5 ||
			    !used)
				break;
			if (n)
				fprintf(out, " %s %.1f/%.1f", name, p50, p90);
			p += used;
			if (*p == ',')
				p++;
		}
		fputc('\n', out);
	}
	fclose(f);
	unlink(metrics_path);
}

void emit_model(const struct result *m, const struct result *one)
{
	double mib = (double)m->bytes / (double)MIB;

	if (cfg.csv) {
		printf("%s,%s,%zu,%zu,%u,%zu,%.3f,%.6g,%.6g,%.3f,%.4g\n",
		       cfg.model_name, kn_dtype_name(cfg.dtype), m->workers,
		       m->servers, cfg.ntensors, m->bytes, m->eng.med / 1e3,
		       m->gbps, m->ratio, one->eng.med / 1e3,
		       m->eng.med / one->eng.med);
		fflush(stdout);
		return;
	}
	printf("%-9s %5s %7zu %7zu %7u %8.1f %10.2f %10.2f %10.2f %7.3f "
	       "%7.3f %6.3f %10.2f %6.3f\n",
	       cfg.model_name, kn_dtype_name(cfg.dtype), m->workers, m->servers,
	       cfg.ntensors, mib, m->eng.med / 1e6, m->eng.min / 1e6,
	       m->eng.max / 1e6, m->gbps, m->tp_gbps, m->ratio,
	       one->eng.med / 1e6, m->eng.med / one->eng.med);
	fflush(stdout);
}

/* A --forward row: the step, layer 0's return, the compute alone. */
void emit_forward(const struct result *m, size_t bytes)
{
	double compute = 1.5 * (double)bytes / cfg.compute_gbps;
	const char *order = cfg.fifo ? "fifo" : "priority";

	if (cfg.csv) {
		printf("%s,%s,%zu,%zu,%u,%s,%zu,%.3f,%.3f,%.3f,%.4g\n",
		       cfg.model_name, kn_dtype_name(cfg.dtype), m->workers,
		       m->servers, cfg.ntensors, order, cfg.push_window,
		       m->eng.med / 1e3, m->first.med / 1e3, compute / 1e3,
		       m->eng.med / compute);
		fflush(stdout);
		return;
	}
	printf("%-9s %5s %7zu %7zu %7u %8s %9zu %10.2f %10.2f %10.2f %10.2f "
	       "%8.3f\n",
	       cfg.model_name, kn_dtype_name(cfg.dtype), m->workers, m->servers,
	       cfg.ntensors, order, cfg.push_window / KIB, m->eng.med / 1e6,
	       m->eng.min / 1e6, m->first.med / 1e6, compute / 1e6,
	       m->eng.med / compute);
	fflush(stdout);
}

/*
 * The baseline of a table: the median, min and max of @n transport
 * samples (ns per message of @bytes, sorted in place) in GB/s, said on
 * a comment line (@what after the size).  Returns the median's GB/s.
 */
double baseline_show(size_t bytes, const char *what, double *tp_s,
		     unsigned int n)
{
	struct stats tp = summarize(tp_s, n);
	double gbps = (double)bytes / tp.med;
	char size[32];

	fprintf(cfg.csv ? stderr : stdout,
		"# transport stream of %s%s: median %.3f GB/s, min %.3f, max "
		"%.3f (%u samples)\n",
		size_name(bytes, size, sizeof(size)), what, gbps,
		(double)bytes / tp.max, (double)bytes / tp.min, n);
	return gbps;
}
