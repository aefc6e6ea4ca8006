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
 */
#include <errno.h>
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
		"                     [--out DIR] [--plot png|svg] "
		"[kanel train options]\n"
		"Runs `kanel train` once per protocol and imbalance, then "
		"writes into DIR\n(default kanel-compare): compare.md, "
		"compare.csv, one plot per imbalance\n"
		"(accuracy-vs-time-IMBALANCE.png or .svg) with the gnuplot "
		"script that draws it\n(accuracy-vs-time-IMBALANCE.gp, which "
		"runs from any directory), and each\nrun's curve and summary. "
		"Every other option goes to each `kanel train` run\n(kanel "
		"train --help).\n");
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
 * accuracy as a dashed line.  The script finds its files through ARG0,
 * the script's own path as gnuplot (5.0 and later) gives it to
 * `gnuplot FILE`, `gnuplot -c FILE` and `load`, so that it can be run
 * again from any directory and the folder can be moved.
 */
static int plot(const char *dir, const char *imb, char **protocols, int np,
		const char *format, double target)
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
			"%shere.'/run-%s-%s.csv' using 1:4 skip 1 with lines "
			"linewidth 2 title '%s'",
			p ? ", \\\n     " : "", protocols[p], s, protocols[p]);
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
 * compare.md: one row per run, the figures rounded as a reader compares
 * them (time to 0.01 s, accuracy to 4 places, samples/s whole); a "vs
 * bsp" column, bsp's time to target over the run's, when bsp is among
 * the protocols.
 */
static void write_markdown(FILE *m, const struct summary *runs, int nruns)
{
	bool have_bsp = false;
	double target = num(&runs[0], "target_accuracy");

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

static int write_tables(const char *dir, struct summary *runs, int nruns)
{
	char path[4096];
	FILE *csv, *m;
	int ret = 0;

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
	for (int i = 0; i < runs[0].n; i++)
		fprintf(csv, "%s%s", i ? "," : "", runs[0].key[i]);
	fputc('\n', csv);
	for (int r = 0; r < nruns; r++) {
		for (int i = 0; i < runs[0].n; i++) {
			const char *v = get(&runs[r], runs[0].key[i]);

			fprintf(csv, "%s%s", i ? "," : "",
				strcmp(v, "null") == 0 ? "" : v);
		}
		fputc('\n', csv);
	}
	write_markdown(m, runs, nruns);
	if (fclose(csv))
		ret = -EIO;
	if (fclose(m))
		ret = -EIO;
	return ret;
}

int kn__compare_main(int argc, char **argv)
{
	char *protocols[MAX_LIST], *imbalances[MAX_LIST];
	char *plist = NULL, *ilist = NULL, none[] = "none";
	const char *dir = "kanel-compare", *format = "png";
	char self[4096], **targv;
	struct summary *runs;
	int np = 0, ni = 1, nargs = 0, nruns = 0, failed = 0;
	ssize_t len;

	imbalances[0] = none;
	targv = calloc((size_t)argc + 16, sizeof(*targv));
	if (!targv)
		return 2;
	len = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (len <= 0)
		return 2;
	self[len] = '\0';
	targv[nargs++] = self;
	targv[nargs++] = "train";
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		bool has = i + 1 < argc;

		if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			compare_usage(stdout);
			free(targv);
			return 0;
		} else if (has && strcmp(a, "--protocols") == 0) {
			plist = argv[++i];
		} else if (has && strcmp(a, "--imbalance") == 0) {
			ilist = argv[++i];
		} else if (has && strcmp(a, "--out") == 0) {
			dir = argv[++i];
		} else if (has && strcmp(a, "--plot") == 0) {
			format = argv[++i];
		} else if (strcmp(a, "--curve") == 0 ||
			   strcmp(a, "--summary-json") == 0 ||
			   strcmp(a, "--protocol") == 0 ||
			   strcmp(a, "--sync") == 0 ||
			   strcmp(a, "--join") == 0) {
			fprintf(stderr,
				"kanel compare: %s is chosen per run; use "
				"--protocols and --out\n",
				a);
			free(targv);
			return 2;
		} else {
			targv[nargs++] = argv[i];
		}
	}
	if (!plist || (strcmp(format, "png") && strcmp(format, "svg"))) {
		fprintf(stderr, "kanel compare: %s\n",
			!plist ? "--protocols P[,P...] is required"
			       : "--plot: png or svg");
		free(targv);
		return 2;
	}
	np = split(plist, protocols);
	if (ilist)
		ni = split(ilist, imbalances);
	if (!np || !ni || (mkdir(dir, 0777) && errno != EEXIST)) {
		fprintf(stderr, "kanel compare: %s\n",
			!np || !ni ? "empty --protocols or --imbalance"
				   : "cannot create the output directory");
		free(targv);
		return 2;
	}
	runs = calloc((size_t)(np * ni), sizeof(*runs));
	if (!runs) {
		free(targv);
		return 2;
	}
	for (int i = 0; i < ni; i++) {
		for (int p = 0; p < np; p++) {
			char s[128], curve[4096], json[4096];
			int k = nargs, rc;

			slug(imbalances[i], s, sizeof(s));
			snprintf(curve, sizeof(curve), "%s/run-%s-%s.csv", dir,
				 protocols[p], s);
			snprintf(json, sizeof(json), "%s/run-%s-%s.json", dir,
				 protocols[p], s);
			targv[k++] = "--protocol";
			targv[k++] = protocols[p];
			targv[k++] = "--imbalance";
			targv[k++] = imbalances[i];
			targv[k++] = "--curve";
			targv[k++] = curve;
			targv[k++] = "--summary-json";
			targv[k++] = json;
			targv[k++] = "--progress";
			targv[k++] = "log";
			targv[k] = NULL;
			printf("kanel compare: run %d of %d: %s, imbalance "
			       "%s\n",
			       i * np + p + 1, np * ni, protocols[p],
			       imbalances[i]);
			fflush(stdout);
			rc = run(targv);
			if (rc != 0 || read_summary(json, &runs[nruns])) {
				fprintf(stderr,
					"kanel compare: the %s run under %s "
					"failed (exit %d)\n",
					protocols[p], imbalances[i], rc);
				failed++;
				continue;
			}
			nruns++;
		}
	}
	if (nruns && write_tables(dir, runs, nruns) == 0) {
		printf("kanel compare: %s/compare.md and %s/compare.csv\n", dir,
		       dir);
	} else if (nruns) {
		fprintf(stderr, "kanel compare: cannot write the tables\n");
		failed++;
	}
	if (nruns && have_gnuplot()) {
		/* Every run has the same target: the one kanel train used,
		 * given or its default, as its summary says. */
		double target = num(&runs[0], "target_accuracy");

		for (int i = 0; i < ni; i++)
			if (plot(dir, imbalances[i], protocols, np, format,
				 target))
				failed++;
	} else if (nruns) {
		fprintf(stderr, "kanel compare: gnuplot is not installed "
				"(Debian: gnuplot-nox); no plot, the tables "
				"are written\n");
	}
	free(runs);
	free(targv);
	return failed ? 1 : 0;
}
