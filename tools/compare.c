/* SPDX-License-Identifier: Apache-2.0 */
/*
 * compare.c - `kanel compare`: the same training under several protocols
 * and imbalances, one `kanel train` run each (a child process, so every
 * run starts from a clean job), then one table of them all (Markdown,
 * and CSV with the summary JSON's keys as columns) and, per imbalance,
 * a plot of test accuracy against worker 0's training time with one line
 * per protocol and the target accuracy, drawn by gnuplot when it is
 * installed from a script that names its files relative to its own
 * folder, so that it runs from anywhere (docs/compare.md).
 *
 * With --seeds each protocol and imbalance is run once per seed, and the
 * tables give every figure as the median over the seeds with its range;
 * a run that misses the target counts as +infinity in its time to
 * target.  The plots then draw, per protocol, the median seed's run.
 * Without --seeds nothing of this shows: one run each, the output as it
 * always was.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tool.h"

extern char **environ;

#define MAX_LIST 16
#define MAX_KEYS 64

static void compare_usage(FILE *out)
{
	fprintf(out,
		"usage: kanel compare --protocols P[,P...] "
		"[--imbalance SPEC[,SPEC...]]\n"
		"                     [--seeds S[,S...]] [--out DIR] "
		"[--plot png|svg]\n"
		"                     [kanel train options]\n"
		"Runs `kanel train` once per protocol and imbalance, then "
		"writes into DIR\n(default kanel-compare): compare.md, "
		"compare.csv, one plot per imbalance\n"
		"(accuracy-vs-time-IMBALANCE.png or .svg) with the gnuplot "
		"script that draws it\n(accuracy-vs-time-IMBALANCE.gp, which "
		"runs from any directory), and each\nrun's curve and "
		"summary.\n"
		"--seeds runs each protocol and imbalance once per seed "
		"(kanel train --seed S;\nat most 16, none twice) and gives "
		"every figure as the median over the seeds\nwith its range; "
		"each run's files then end in -seedS, and the plots draw "
		"each\nprotocol's median run.  Every other option goes to "
		"each `kanel train` run\n(kanel train --help).\n");
}

/* Split @list at commas into @out (pointers into @list): the count. */
static int split(char *list, char **out)
{
	int n = 0;

	for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ","))
		if (*tok && n < MAX_LIST)
			out[n++] = tok;
	return n;
}

/* The seeds of --seeds, in the order given, each in canonical decimal. */
struct seeds {
	int n;
	char s[MAX_LIST][24];
};

/*
 * Parse --seeds @list into @out: comma-separated whole numbers from 0 to
 * ULONG_MAX (what kanel train's --seed takes), none empty, none twice,
 * at most MAX_LIST.  0, or -EINVAL with the reason printed.
 */
static int parse_seeds(const char *list, struct seeds *out)
{
	unsigned long long v[MAX_LIST];
	const char *tok = list;
	struct seeds got = { 0 };

	if (!*list) {
		fprintf(stderr, "kanel compare: --seeds: the list is empty\n");
		return -EINVAL;
	}
	for (;;) {
		size_t len = strcspn(tok, ",");
		unsigned long long u;
		char buf[32], *end;

		if (len == 0) {
			fprintf(stderr,
				"kanel compare: --seeds: an empty seed in "
				"'%s'\n",
				list);
			return -EINVAL;
		}
		if (len >= sizeof(buf) || strspn(tok, "0123456789") < len) {
			fprintf(stderr,
				"kanel compare: --seeds: '%.*s' is not a "
				"whole number from 0 to %lu (in '%s')\n",
				(int)(len > 64 ? 64 : len), tok, ULONG_MAX,
				list);
			return -EINVAL;
		}
		memcpy(buf, tok, len);
		buf[len] = '\0';
		errno = 0;
		u = strtoull(buf, &end, 10);
		if (errno || u > ULONG_MAX) {
			fprintf(stderr,
				"kanel compare: --seeds: %s is more than "
				"%lu\n",
				buf, ULONG_MAX);
			return -EINVAL;
		}
		for (int k = 0; k < got.n; k++) {
			if (v[k] == u) {
				fprintf(stderr,
					"kanel compare: --seeds: seed %llu "
					"is given twice\n",
					u);
				return -EINVAL;
			}
		}
		if (got.n == MAX_LIST) {
			fprintf(stderr,
				"kanel compare: --seeds: more than %d "
				"seeds\n",
				MAX_LIST);
			return -EINVAL;
		}
		v[got.n] = u;
		snprintf(got.s[got.n], sizeof(got.s[0]), "%llu", u);
		got.n++;
		if (!tok[len]) {
			*out = got;
			return 0;
		}
		tok += len + 1;
	}
}

/* @spec made fit for a file name. */
static void slug(const char *spec, char *buf, size_t cap)
{
	size_t i = 0;

	for (; spec[i] && i + 1 < cap; i++)
		buf[i] = (spec[i] == ':' || spec[i] == '/') ? '_' : spec[i];
	buf[i] = '\0';
}

static int run(char *const *argv)
{
	pid_t pid;
	int st;

	if (posix_spawnp(&pid, argv[0], NULL, NULL, argv, environ))
		return -1;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* One run's summary JSON, flat: its keys and raw values in order. */
struct summary {
	int n;
	char key[MAX_KEYS][48];
	char val[MAX_KEYS][96];
};

static int read_summary(const char *path, struct summary *s)
{
	char line[512];
	FILE *f = fopen(path, "r");

	s->n = 0;
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f) && s->n < MAX_KEYS) {
		char *k = strchr(line, '"'), *ke, *v, *ve;

		if (!k || !(ke = strchr(k + 1, '"')) || ke[1] != ':')
			continue;
		*ke = '\0';
		v = ke + 2;
		while (*v == ' ')
			v++;
		ve = v + strlen(v);
		while (ve > v && (ve[-1] == '\n' || ve[-1] == ','))
			*--ve = '\0';
		if (*v == '"' && ve > v + 1 && ve[-1] == '"') {
			v++;
			ve[-1] = '\0';
		}
		snprintf(s->key[s->n], sizeof(s->key[0]), "%s", k + 1);
		snprintf(s->val[s->n], sizeof(s->val[0]), "%s", v);
		s->n++;
	}
	fclose(f);
	return s->n ? 0 : -EINVAL;
}

static const char *get(const struct summary *s, const char *key)
{
	for (int i = 0; i < s->n; i++)
		if (strcmp(s->key[i], key) == 0)
			return s->val[i];
	return "";
}

static bool have_gnuplot(void)
{
	char *argv[] = { "gnuplot", "--version", NULL };
	posix_spawn_file_actions_t fa;
	pid_t pid;
	int st, ok;

	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", 1, 0);
	ok = posix_spawnp(&pid, "gnuplot", &fa, NULL, argv, environ) == 0 &&
	     waitpid(pid, &st, 0) == pid && WIFEXITED(st) &&
	     WEXITSTATUS(st) == 0;
	posix_spawn_file_actions_destroy(&fa);
	return ok;
}

/*
 * The plot of one imbalance: each protocol's curve, test accuracy against
 * worker 0's training time (the curve's t_s), and the runs' target
 * accuracy as a dashed line.  @runs names each protocol's curve (the
 * file without its .csv), @titles its line; @seeds says that they are
 * median runs.  The script finds its files through ARG0,
 * the script's own path as gnuplot (5.0 and later) gives it to
 * `gnuplot FILE`, `gnuplot -c FILE` and `load`, so that it can be run
 * again from any directory and the folder can be moved.
 */
static int plot(const char *dir, const char *imb, int np,
		char (*const runs)[160], char (*const titles)[160],
		const char *format, double target, bool seeds)
{
	char gp[4096], out[4096], name[256];
	char *argv[] = { "gnuplot", gp, NULL };
	char s[128];
	FILE *f;

	slug(imb, s, sizeof(s));
	snprintf(gp, sizeof(gp), "%s/accuracy-vs-time-%s.gp", dir, s);
	snprintf(name, sizeof(name), "accuracy-vs-time-%s.%s", s, format);
	snprintf(out, sizeof(out), "%s/%s", dir, name);
	f = fopen(gp, "w");
	if (!f)
		return -errno;
	fprintf(f,
		"# kanel compare: test accuracy under imbalance %s.\n"
		"# gnuplot %s, from any directory: the files are "
		"found next to this script.\n",
		imb, strrchr(gp, '/') ? strrchr(gp, '/') + 1 : gp);
	if (seeds)
		fprintf(f, "# One line per protocol: the run of its median "
			   "seed (compare.md).\n");
	fprintf(f, "here = '.'\n"
		   "i = strlen(ARG0)\n"
		   "while (i > 0 && ARG0[i:i] ne '/') { i = i - 1 }\n"
		   "if (i == 1) { here = '' } else { if (i > 1) "
		   "{ here = ARG0[1:i-1] } }\n");
	fprintf(f, "set terminal %s size 900,560\n",
		strcmp(format, "svg") == 0 ? "svg dynamic" : "pngcairo");
	fprintf(f, "set output here.'/%s'\nset datafile separator ','\n", name);
	fprintf(f, "set title 'Test accuracy, imbalance %s'\n", imb);
	fprintf(f, "set xlabel \"worker 0's training time (s)\"\n"
		   "set ylabel 'test accuracy'\n");
	fprintf(f, "set key bottom right\nset grid\n");
	fprintf(f, "plot ");
	for (int p = 0; p < np; p++)
		fprintf(f,
			"%shere.'/%s.csv' using 1:4 skip 1 with lines "
			"linewidth 2 title '%s'",
			p ? ", \\\n     " : "", runs[p], titles[p]);
	if (isfinite(target))
		fprintf(f,
			", \\\n     %.6g with lines dashtype 2 linecolor "
			"'gray40' title 'target %.4g'",
			target, target);
	fprintf(f, "\n");
	if (fclose(f))
		return -EIO;
	if (run(argv) != 0) {
		fprintf(stderr, "kanel compare: gnuplot failed on %s\n", gp);
		return -EIO;
	}
	printf("kanel compare: plot %s\n", out);
	return 0;
}

/* @key of @s as a number; NAN where it is missing or null. */
static double num(const struct summary *s, const char *key)
{
	const char *v = get(s, key);
	char *end;
	double d;

	if (!*v)
		return NAN;
	d = strtod(v, &end);
	return end == v ? NAN : d;
}

/*
 * The time to target of the bsp run under @r's imbalance, for the "vs
 * bsp" column: NAN where there is none or it did not reach the target.
 */
static double bsp_time(const struct summary *runs, int nruns,
		       const struct summary *r)
{
	for (int i = 0; i < nruns; i++)
		if (strcmp(get(&runs[i], "protocol"), "bsp") == 0 &&
		    strcmp(get(&runs[i], "imbalance"), get(r, "imbalance")) ==
			    0)
			return num(&runs[i], "time_to_target_s");
	return NAN;
}

/*
 * One protocol under one imbalance over the seeds: the runs that
 * succeeded, in the order of --seeds, with their seeds; how many reached
 * the target; and which is the median run.
 */
struct group {
	int n, reached, median;
	const struct summary *run[MAX_LIST];
	const char *seed[MAX_LIST];
};

/* A figure over a group: median, smallest and largest. */
struct spread {
	double med, lo, hi;
};

/* Sort @v[0..@n) ascending, +inf last (insertion: n is at most 16). */
static void sort_doubles(double *v, int n)
{
	for (int i = 1; i < n; i++) {
		double x = v[i];
		int j = i;

		for (; j > 0 && v[j - 1] > x; j--)
			v[j] = v[j - 1];
		v[j] = x;
	}
}

/*
 * @key over @g's runs.  A null (NAN) is +infinity where @null_inf (the
 * time to a target not reached), otherwise left out.  The median of an
 * even count is the mean of the middle two, +infinity if one of them is.
 * False where no value is left.
 */
static bool spread_of(const struct group *g, const char *key, bool null_inf,
		      struct spread *out)
{
	double v[MAX_LIST];
	int n = 0;

	for (int r = 0; r < g->n; r++) {
		double d = num(g->run[r], key);

		if (isnan(d) && !null_inf)
			continue;
		v[n++] = isnan(d) ? INFINITY : d;
	}
	if (!n)
		return false;
	sort_doubles(v, n);
	out->lo = v[0];
	out->hi = v[n - 1];
	out->med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
	return true;
}

/*
 * Fill @g with the runs of one protocol and imbalance, @runs[0..@ns)
 * (one per seed; n == 0 where the run failed).  The median run is the
 * middle one (the lower middle of an even count) in the order of time to
 * target, a target not reached last, ties going to the higher best
 * accuracy and then to the earlier seed.
 */
static void group_init(struct group *g, const struct summary *runs,
		       const struct seeds *seeds, int ns)
{
	int order[MAX_LIST];

	g->n = g->reached = g->median = 0;
	for (int k = 0; k < ns; k++) {
		if (!runs[k].n)
			continue;
		g->run[g->n] = &runs[k];
		g->seed[g->n] = seeds->s[k];
		if (isfinite(num(&runs[k], "time_to_target_s")))
			g->reached++;
		g->n++;
	}
	for (int i = 0; i < g->n; i++) {
		double t = num(g->run[i], "time_to_target_s");
		double a = num(g->run[i], "best_accuracy");
		int j = i;

		t = isnan(t) ? INFINITY : t;
		for (; j > 0; j--) {
			const struct summary *o = g->run[order[j - 1]];
			double ot = num(o, "time_to_target_s");

			ot = isnan(ot) ? INFINITY : ot;
			if (ot < t ||
			    (ot == t && !(num(o, "best_accuracy") < a)))
				break;
			order[j] = order[j - 1];
		}
		order[j] = i;
	}
	if (g->n)
		g->median = order[(g->n - 1) / 2];
}

/*
 * compare.md: one row per run, the figures rounded as a reader compares
 * them (time to 0.01 s, accuracy to 4 places, samples/s whole); a "vs
 * bsp" column, bsp's time to target over the run's, when bsp is among
 * the protocols.  @first is the first run that succeeded; the others
 * that failed (n == 0) are left out.
 */
static void write_markdown(FILE *m, const struct summary *runs, int nruns,
			   const struct summary *first)
{
	bool have_bsp = false;
	double target = num(first, "target_accuracy");

	for (int r = 0; r < nruns; r++)
		have_bsp |= strcmp(get(&runs[r], "protocol"), "bsp") == 0;
	fprintf(m,
		"| protocol | imbalance | time to %.4g (s) |%s best "
		"accuracy | final accuracy | samples/s | wait fraction | "
		"mean staleness |\n",
		target, have_bsp ? " vs bsp |" : "");
	fprintf(m, "|---|---|---:|%s---:|---:|---:|---:|---:|\n",
		have_bsp ? "---:|" : "");
	for (int r = 0; r < nruns; r++) {
		const struct summary *s = &runs[r];
		double t = num(s, "time_to_target_s"), b;
		double st = num(s, "staleness_mean");

		if (!s->n)
			continue;
		fprintf(m, "| %s | %s | ", get(s, "protocol"),
			get(s, "imbalance"));
		if (isfinite(t))
			fprintf(m, "%.2f |", t);
		else
			fprintf(m, "not reached |");
		if (have_bsp) {
			b = bsp_time(runs, nruns, s);
			if (isfinite(t) && isfinite(b) && t > 0)
				fprintf(m, " %.2fx |", b / t);
			else
				fprintf(m, " - |");
		}
		fprintf(m, " %.4f | %.4f | %.0f | %.3f | ",
			num(s, "best_accuracy"), num(s, "final_accuracy"),
			num(s, "samples_per_s"), num(s, "wait_fraction"));
		if (isfinite(st))
			fprintf(m, "%.2f |\n", st);
		else
			fprintf(m, "- |\n");
	}
}

/* One seconds figure as compare.md shows it: +inf is "not reached". */
static void print_time(FILE *m, double t)
{
	if (isfinite(t))
		fprintf(m, "%.2f", t);
	else
		fprintf(m, "not reached");
}

/*
 * A compare.md cell over the seeds, "median (min-max)" to @prec places,
 * or "-" where @key has no value in any run (nulls are left out).
 */
static void print_spread(FILE *m, const struct group *g, const char *key,
			 int prec)
{
	struct spread s;

	if (!spread_of(g, key, false, &s)) {
		fprintf(m, " - |");
		return;
	}
	fprintf(m, " %.*f (%.*f-%.*f) |", prec, s.med, prec, s.lo, prec, s.hi);
}

/*
 * compare.md with --seeds: one row per protocol and imbalance, each
 * figure the median over the seeds that ran with its range; the time to
 * target with a target not reached as +infinity, and how many reached
 * it; "vs bsp" the ratio of the median times; the median run's seed,
 * whose curve the plot draws.  @groups is imbalance-major, @np per
 * imbalance, as the runs were made.
 */
static void write_markdown_seeds(FILE *m, const struct group *groups,
				 int ngroups, int np, char **protocols,
				 const struct summary *first)
{
	double target = num(first, "target_accuracy");
	int bsp = -1;

	for (int p = 0; p < np; p++)
		if (strcmp(protocols[p], "bsp") == 0)
			bsp = p;
	fprintf(m,
		"| protocol | imbalance | time to %.4g (s) | reached |%s "
		"best accuracy | final accuracy | samples/s | wait fraction "
		"| mean staleness | median seed |\n",
		target, bsp >= 0 ? " vs bsp |" : "");
	fprintf(m, "|---|---|---:|---:|%s---:|---:|---:|---:|---:|---:|\n",
		bsp >= 0 ? "---:|" : "");
	for (int i = 0; i < ngroups; i++) {
		const struct group *g = &groups[i];
		const struct summary *s = g->n ? g->run[g->median] : NULL;
		struct spread t, b;

		if (!s)
			continue;
		spread_of(g, "time_to_target_s", true, &t);
		fprintf(m, "| %s | %s | ", get(s, "protocol"),
			get(s, "imbalance"));
		print_time(m, t.med);
		/* no range when no seed reached it: all "not reached" */
		if (isfinite(t.lo)) {
			fprintf(m, " (%.2f-", t.lo);
			print_time(m, t.hi);
			fprintf(m, ")");
		}
		fprintf(m, " | %d/%d |", g->reached, g->n);
		if (bsp >= 0) {
			const struct group *bg = &groups[i - i % np + bsp];

			if (bg->n &&
			    spread_of(bg, "time_to_target_s", true, &b) &&
			    isfinite(b.med) && isfinite(t.med) && t.med > 0)
				fprintf(m, " %.2fx |", b.med / t.med);
			else
				fprintf(m, " - |");
		}
		print_spread(m, g, "best_accuracy", 4);
		print_spread(m, g, "final_accuracy", 4);
		print_spread(m, g, "samples_per_s", 0);
		print_spread(m, g, "wait_fraction", 3);
		print_spread(m, g, "staleness_mean", 2);
		fprintf(m, " %s |\n", g->seed[g->median]);
	}
}

/* A CSV field: the raw JSON value, null as empty. */
static void csv_field(FILE *csv, bool comma, const char *v)
{
	fprintf(csv, "%s%s", comma ? "," : "", strcmp(v, "null") ? v : "");
}

/* Does @key hold a number (or null) in every run of @g? */
static bool numeric(const struct group *g, const char *key)
{
	for (int r = 0; r < g->n; r++) {
		const char *v = get(g->run[r], key);
		char *end;

		if (strcmp(v, "null") == 0)
			continue;
		strtod(v, &end);
		if (!*v || *end)
			return false;
	}
	return true;
}

/*
 * The median, min and max rows of @g in compare.csv, under the header of
 * @first: "median", "min" or "max" as the seed; each numeric column that
 * figure over the seeds (%.15g; empty for +infinity or no value; a null
 * time to target is +infinity, other nulls are left out); a text column
 * its value when every seed has the same, else empty; then the count of
 * seeds that reached the target.
 */
static void csv_spread_rows(FILE *csv, const struct group *g,
			    const struct summary *first)
{
	static const char *const label[] = { "median", "min", "max" };

	for (int row = 0; row < 3; row++) {
		for (int i = 0; i < first->n; i++) {
			const char *key = first->key[i];
			struct spread s;
			double d;

			if (strcmp(key, "seed") == 0) {
				fprintf(csv, "%s%s", i ? "," : "", label[row]);
			} else if (numeric(g, key)) {
				bool inf = strcmp(key, "time_to_target_s") == 0;

				if (!spread_of(g, key, inf, &s))
					s.med = s.lo = s.hi = INFINITY;
				d = row == 0 ? s.med : row == 1 ? s.lo : s.hi;
				fprintf(csv, "%s", i ? "," : "");
				if (isfinite(d))
					fprintf(csv, "%.15g", d);
			} else {
				const char *v = get(g->run[0], key);

				for (int r = 1; r < g->n; r++)
					if (strcmp(get(g->run[r], key), v))
						v = "";
				csv_field(csv, i, v);
			}
		}
		fprintf(csv, ",%d\n", g->reached);
	}
}

/*
 * compare.csv and compare.md from @runs[0..@nruns) (n == 0 where a run
 * failed; at least one did not).  With @groups (--seeds), compare.csv
 * has a row per run, the seed exactly as given, and after each protocol
 * and imbalance its median, min and max rows, with a last column,
 * reached; compare.md a row per protocol and imbalance.
 */
static int write_tables(const char *dir, const struct summary *runs, int nruns,
			const struct group *groups, int ngroups, int np,
			char **protocols)
{
	const struct summary *first = runs;
	char path[4096];
	FILE *csv, *m;
	int ret = 0;

	while (!first->n)
		first++;
	snprintf(path, sizeof(path), "%s/compare.csv", dir);
	csv = fopen(path, "w");
	snprintf(path, sizeof(path), "%s/compare.md", dir);
	m = fopen(path, "w");
	if (!csv || !m) {
		if (csv)
			fclose(csv);
		if (m)
			fclose(m);
		return -errno;
	}
	for (int i = 0; i < first->n; i++)
		fprintf(csv, "%s%s", i ? "," : "", first->key[i]);
	fprintf(csv, "%s\n", groups ? ",reached" : "");
	for (int r = 0; !groups && r < nruns; r++) {
		if (!runs[r].n)
			continue;
		for (int i = 0; i < first->n; i++)
			csv_field(csv, i, get(&runs[r], first->key[i]));
		fputc('\n', csv);
	}
	for (int k = 0; groups && k < ngroups; k++) {
		const struct group *g = &groups[k];

		for (int r = 0; r < g->n; r++) {
			for (int i = 0; i < first->n; i++)
				csv_field(
					csv, i,
					strcmp(first->key[i], "seed")
						? get(g->run[r], first->key[i])
						: g->seed[r]);
			fprintf(csv, ",%d\n",
				isfinite(num(g->run[r], "time_to_target_s"))
					? 1
					: 0);
		}
		if (g->n)
			csv_spread_rows(csv, g, first);
	}
	if (groups)
		write_markdown_seeds(m, groups, ngroups, np, protocols, first);
	else
		write_markdown(m, runs, nruns, first);
	if (fclose(csv))
		ret = -EIO;
	if (fclose(m))
		ret = -EIO;
	return ret;
}

/* Is @a the option @flag, as "--flag" or "--flag=VALUE"? */
static bool is_flag(const char *a, const char *flag)
{
	size_t n = strlen(flag);

	return strncmp(a, flag, n) == 0 && (a[n] == '\0' || a[n] == '=');
}

/*
 * Run every protocol under every imbalance, once per seed of @seeds (once
 * with kanel train's own seed where @seeds is NULL), into @runs in that
 * order, imbalance-major; a run that failed is left with n == 0.  The
 * count of failed runs.
 */
static int run_all(char **targv, int nargs, const char *dir, char **protocols,
		   int np, char **imbalances, int ni, const struct seeds *seeds,
		   struct summary *runs)
{
	int ns = seeds ? seeds->n : 1, total = np * ni * ns, failed = 0;

	for (int r = 0; r < total; r++) {
		int i = r / (np * ns), p = r / ns % np, k = r % ns;
		char s[128], curve[4096], json[4096], tag[48] = "";
		int a = nargs, rc;

		slug(imbalances[i], s, sizeof(s));
		if (seeds)
			snprintf(tag, sizeof(tag), "-seed%s", seeds->s[k]);
		snprintf(curve, sizeof(curve), "%s/run-%s-%s%s.csv", dir,
			 protocols[p], s, tag);
		snprintf(json, sizeof(json), "%s/run-%s-%s%s.json", dir,
			 protocols[p], s, tag);
		targv[a++] = "--protocol";
		targv[a++] = protocols[p];
		targv[a++] = "--imbalance";
		targv[a++] = imbalances[i];
		targv[a++] = "--curve";
		targv[a++] = curve;
		targv[a++] = "--summary-json";
		targv[a++] = json;
		targv[a++] = "--progress";
		targv[a++] = "log";
		if (seeds) {
			targv[a++] = "--seed";
			targv[a++] = (char *)seeds->s[k];
		}
		targv[a] = NULL;
		snprintf(tag, sizeof(tag), ", seed %s",
			 seeds ? seeds->s[k] : "");
		printf("kanel compare: run %d of %d: %s, imbalance %s%s\n",
		       r + 1, total, protocols[p], imbalances[i],
		       seeds ? tag : "");
		fflush(stdout);
		rc = run(targv);
		if (rc != 0 || read_summary(json, &runs[r])) {
			fprintf(stderr,
				"kanel compare: the %s run under %s%s failed "
				"(exit %d)\n",
				protocols[p], imbalances[i], seeds ? tag : "",
				rc);
			runs[r].n = 0;
			failed++;
		}
	}
	return failed;
}

/*
 * The plot of each imbalance: per protocol the curve of its run, or with
 * @groups of its median run (the first seed's where every run failed, a
 * file that then does not exist, as without --seeds).  The count of
 * plots that failed.
 */
static int plot_all(const char *dir, char **protocols, int np,
		    char **imbalances, int ni, const struct seeds *seeds,
		    const struct group *groups, const char *format,
		    double target)
{
	char names[MAX_LIST][160], titles[MAX_LIST][160];
	int failed = 0;

	for (int i = 0; i < ni; i++) {
		char s[128];
		int p = 0;

		slug(imbalances[i], s, sizeof(s));
		for (; p < np; p++) {
			const struct group *g =
				groups ? &groups[i * np + p] : NULL;
			const char *seed = !g	  ? ""
					   : g->n ? g->seed[g->median]
						  : seeds->s[0];
			int n = snprintf(names[p], sizeof(names[0]),
					 "run-%s-%s%s%s", protocols[p], s,
					 g ? "-seed" : "", seed);
			int t = snprintf(titles[p], sizeof(titles[0]),
					 "%s%s%s%s", protocols[p],
					 g ? " (seed " : "", seed,
					 g ? ")" : "");

			if (n >= (int)sizeof(names[0]) ||
			    t >= (int)sizeof(titles[0]))
				break;
		}
		if (p < np) {
			fprintf(stderr,
				"kanel compare: no plot for %s: the name of "
				"%s's curve is too long\n",
				imbalances[i], protocols[p]);
			failed++;
		} else if (plot(dir, imbalances[i], np, names, titles, format,
				target, groups != NULL)) {
			failed++;
		}
	}
	return failed;
}

int kn__compare_main(int argc, char **argv)
{
	char *protocols[MAX_LIST], *imbalances[MAX_LIST];
	char *plist = NULL, *ilist = NULL, none[] = "none";
	const char *dir = "kanel-compare", *format = "png", *slist = NULL;
	const char *seed_flag = NULL;
	char self[4096], **targv;
	struct summary *runs;
	struct group *groups = NULL;
	struct seeds seeds;
	int np = 0, ni = 1, ns = 1, nargs = 0, nruns, ok = 0, failed;
	int ret = 2;
	ssize_t len;

	imbalances[0] = none;
	targv = calloc((size_t)argc + 16, sizeof(*targv));
	if (!targv)
		return 2;
	len = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (len <= 0)
		goto free_targv;
	self[len] = '\0';
	targv[nargs++] = self;
	targv[nargs++] = "train";
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		bool has = i + 1 < argc;

		if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			compare_usage(stdout);
			ret = 0;
			goto free_targv;
		} else if (has && strcmp(a, "--protocols") == 0) {
			plist = argv[++i];
		} else if (has && strcmp(a, "--imbalance") == 0) {
			ilist = argv[++i];
		} else if (has && strcmp(a, "--out") == 0) {
			dir = argv[++i];
		} else if (has && strcmp(a, "--plot") == 0) {
			format = argv[++i];
		} else if (strcmp(a, "--seeds") == 0) {
			if (!has) {
				fprintf(stderr, "kanel compare: --seeds "
						"needs a value\n");
				goto free_targv;
			}
			slist = argv[++i];
		} else if (strncmp(a, "--seeds=", 8) == 0) {
			slist = a + 8;
		} else if (strcmp(a, "--curve") == 0 ||
			   strcmp(a, "--summary-json") == 0 ||
			   strcmp(a, "--protocol") == 0 ||
			   strcmp(a, "--sync") == 0 ||
			   strcmp(a, "--join") == 0) {
			fprintf(stderr,
				"kanel compare: %s is chosen per run; use "
				"--protocols and --out\n",
				a);
			goto free_targv;
		} else {
			if (is_flag(a, "--seed"))
				seed_flag = a;
			targv[nargs++] = argv[i];
		}
	}
	if (!plist || (strcmp(format, "png") && strcmp(format, "svg"))) {
		fprintf(stderr, "kanel compare: %s\n",
			!plist ? "--protocols P[,P...] is required"
			       : "--plot: png or svg");
		goto free_targv;
	}
	if (slist && seed_flag) {
		/* either would be silently lost: kanel train takes the last */
		fprintf(stderr,
			"kanel compare: %s and --seeds: give one (--seeds "
			"chooses the seed per run)\n",
			seed_flag);
		goto free_targv;
	}
	if (slist && parse_seeds(slist, &seeds))
		goto free_targv;
	ns = slist ? seeds.n : 1;
	np = split(plist, protocols);
	if (ilist)
		ni = split(ilist, imbalances);
	if (!np || !ni || (mkdir(dir, 0777) && errno != EEXIST)) {
		fprintf(stderr, "kanel compare: %s\n",
			!np || !ni ? "empty --protocols or --imbalance"
				   : "cannot create the output directory");
		goto free_targv;
	}
	nruns = np * ni * ns;
	runs = calloc((size_t)nruns, sizeof(*runs));
	if (!runs)
		goto free_targv;
	if (slist) {
		groups = calloc((size_t)(np * ni), sizeof(*groups));
		if (!groups)
			goto free_runs;
	}
	failed = run_all(targv, nargs, dir, protocols, np, imbalances, ni,
			 slist ? &seeds : NULL, runs);
	for (int g = 0; groups && g < np * ni; g++)
		group_init(&groups[g], &runs[g * ns], &seeds, ns);
	ok = nruns - failed;
	if (ok && write_tables(dir, runs, nruns, groups, np * ni, np,
			       protocols) == 0) {
		printf("kanel compare: %s/compare.md and %s/compare.csv\n", dir,
		       dir);
	} else if (ok) {
		fprintf(stderr, "kanel compare: cannot write the tables\n");
		failed++;
	}
	if (ok && have_gnuplot()) {
		/* Every run has the same target: the one kanel train used,
		 * given or its default, as its summary says. */
		const struct summary *first = runs;

		while (!first->n)
			first++;
		failed += plot_all(dir, protocols, np, imbalances, ni,
				   slist ? &seeds : NULL, groups, format,
				   num(first, "target_accuracy"));
	} else if (ok) {
		fprintf(stderr, "kanel compare: gnuplot is not installed "
				"(Debian: gnuplot-nox); no plot, the tables "
				"are written\n");
	}
	ret = failed ? 1 : 0;
	free(groups);
free_runs:
	free(runs);
free_targv:
	free(targv);
	return ret;
}
