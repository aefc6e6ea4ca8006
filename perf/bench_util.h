/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_util.h - what the benchmarks in perf/ share: the monotonic clock
 * in ns, the exit on a failed call, the median, min and max of a set of
 * samples, a table's header (CSV or text), and the parsing of list options ("4K,1M,64M", "fp32,bf16")
 * with errors that name the option and exit 2.
 */
#ifndef KN_PERF_BENCH_UTIL_H
#define KN_PERF_BENCH_UTIL_H

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BENCH_MAX_LIST 32 /* entries of a list option */

static inline double bench_now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* A call that failed (@ret a negative errno) ends the program: exit 1. */
static inline void bench_check(int ret, const char *call)
{
	if (ret < 0) {
		fprintf(stderr, "%s: %s: %s\n", program_invocation_short_name,
			call, strerror(-ret));
		exit(1);
	}
}

struct stats {
	double med, min, max;
};

static inline int bench_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Median, min and max of @n samples (sorted in place). */
static inline struct stats summarize(double *sample, size_t n)
{
	qsort(sample, n, sizeof(sample[0]), bench_cmp_double);
	return (struct stats){
		.med = n % 2 ? sample[n / 2]
			     : (sample[n / 2 - 1] + sample[n / 2]) / 2,
		.min = sample[0],
		.max = sample[n - 1],
	};
}

/*
 * A table's header line on stdout: with --csv (@csv) the CSV column
 * names @csv_names, else the text columns @fmt makes of its arguments.
 */
static inline void __attribute__((format(printf, 3, 4)))
bench_header(bool csv, const char *csv_names, const char *fmt, ...)
{
	va_list ap;

	if (csv) {
		printf("%s\n", csv_names);
	} else {
		va_start(ap, fmt);
		vprintf(fmt, ap);
		va_end(ap);
	}
	fflush(stdout);
}

static inline void __attribute__((noreturn))
bad_value(const char *option, const char *value, const char *why)
{
	fprintf(stderr, "%s: bad value '%s' for --%s: %s\n",
		program_invocation_short_name, value, option, why);
	exit(2);
}

/*
 * The next option of @longopts (getopt_long), -1 after the last, with
 * what every benchmark does alike: --help prints @usage and exits 0; an
 * unknown option, or an argument after the options, exits 2.
 */
static inline int bench_getopt(int argc, char **argv,
			       const struct option *longopts,
			       void (*usage)(void))
{
	int c = getopt_long(argc, argv, "h", longopts, NULL);

	if (c == 'h') {
		usage();
		exit(0);
	}
	if (c == '?') {
		fprintf(stderr, "try '%s --help'\n",
			program_invocation_short_name);
		exit(2);
	}
	if (c == -1 && optind < argc) {
		fprintf(stderr, "%s: unexpected argument '%s'\n",
			program_invocation_short_name, argv[optind]);
		exit(2);
	}
	return c;
}

/*
 * Parse the comma list @arg of option @option into @out (at most
 * BENCH_MAX_LIST entries) and return its length.  With @names, each
 * entry is one of the first @max names and becomes its index; otherwise
 * a number in [@min, @max], with a K, M or G suffix when @size.
 */
static inline unsigned int parse_list(const char *option, char *arg,
				      const char *const *names, size_t min,
				      size_t max, bool size, size_t *out)
{
	static const char units[] = "KkMmGg";
	unsigned int n = 0;
	char *save = NULL, *end;
	const char *u;

	for (char *s = strtok_r(arg, ",", &save); s;
	     s = strtok_r(NULL, ",", &save)) {
		unsigned long long v = 0;
		unsigned int shift = 0;

		if (n == BENCH_MAX_LIST)
			bad_value(option, s, "too many entries");
		if (names) {
			while (v < max && strcmp(s, names[v]) != 0)
				v++;
			if (v == max)
				bad_value(option, s, "unknown name");
			out[n++] = (size_t)v;
			continue;
		}
		errno = 0;
		v = strtoull(s, &end, 10);
		if (size && *end && (u = strchr(units, *end))) {
			shift = 10 * (unsigned int)((u - units) / 2 + 1);
			end++;
		}
		if (*s < '0' || *s > '9' || *end || errno || v > max >> shift ||
		    v << shift < min)
			bad_value(option, s, "not a number in range");
		out[n++] = (size_t)(v << shift);
	}
	if (n == 0)
		bad_value(option, "", "empty list");
	return n;
}

#endif /* KN_PERF_BENCH_UTIL_H */
