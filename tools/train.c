/* SPDX-License-Identifier: Apache-2.0 */
/*
 * train.c - `kanel train`: a real model trained through a Kanel job on
 * Fashion-MNIST, under the job's protocol and an injected imbalance,
 * reporting time to accuracy (docs/training.md).
 *
 * Without --join it starts the whole job here, as `kanel launch` does:
 * the coordinator, the servers, and the workers, each worker a child
 * running `kanel train --join` with a pipe to report on.  The parent
 * reads the pipe, draws the progress line and at the end writes the
 * summary, the curve and the JSON (train_report.c).  With --join the
 * process takes the role its options give it (srun, mpirun, KANEL_*
 * variables); a worker runs train_worker.c, and rank 0 of the workers
 * then writes what it alone can see.  The trainer's own options are
 * taken out of the command line first (train_options.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "idx.h"
#include "kanel.h"
#include "tool.h"
#include "trainer.h"

#define REPORT_FD_ENV "KANEL_TRAIN_REPORT_FD"

volatile sig_atomic_t kn__train_stop_requested;

/* ---- a whole job on this machine ---- */

/* Whether the job's option @flag was given, as a flag or its variable. */
static bool job_option_given(int argc, char **argv, const char *flag,
			     const char *env)
{
	size_t n = strlen(flag);

	for (int i = 1; i < argc; i++)
		if (strncmp(argv[i], flag, n) == 0 &&
		    (argv[i][n] == '\0' || argv[i][n] == '='))
			return true;
	return getenv(env) && *getenv(env);
}

/*
 * --optimizer sum leaves the workers to step the model themselves (a
 * PyTorch script's optimizer); the trainer's workers have none of their
 * own, so a job of theirs names the optimizer the servers or the
 * local-step workers run.
 */
static bool sum_requested(int argc, char **argv)
{
	const char *v = getenv("KANEL_OPTIMIZER");
	bool sum = v && strcmp(v, "sum") == 0;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--optimizer") == 0 && i + 1 < argc)
			sum = strcmp(argv[i + 1], "sum") == 0;
		else if (strncmp(argv[i], "--optimizer=", 12) == 0)
			sum = strcmp(argv[i] + 12, "sum") == 0;
	}
	return sum;
}

/*
 * The dataset, checked before any process starts, the training set
 * handed to the workers as one shared read-only file (*@fd; -1 if it
 * cannot be made, and each worker loads its own copy): 0 or -errno.
 */
static int check_dataset(const struct kn__train_opts *o, int *fd)
{
	struct kn__dataset d = { 0 };
	char err[512];
	int ret = kn__dataset_load(o->data, "t10k", &d, err, sizeof(err));

	kn__dataset_fini(&d);
	if (!ret)
		ret = kn__dataset_load(o->data, "train", &d, err, sizeof(err));
	if (!ret && kn__dataset_share(&d, fd))
		*fd = -1;
	kn__dataset_fini(&d);
	if (ret)
		kn__tool_log("kanel train: %s\n", err);
	return ret;
}

/* The command line a local job's workers run: the options, canonical. */
struct worker_cmd {
	char *argv[40];
	char num[10][64];
};

static void worker_cmd(struct worker_cmd *c, const char *self,
		       const struct kn__train_opts *o)
{
	int a = 0, k = 0;

#define ARG(flag, fmt, ...)                                               \
	do {                                                              \
		snprintf(c->num[k], sizeof(c->num[k]), fmt, __VA_ARGS__); \
		c->argv[a++] = flag;                                      \
		c->argv[a++] = c->num[k++];                               \
	} while (0)

	c->argv[a++] = (char *)self;
	c->argv[a++] = "train";
	c->argv[a++] = "--join";
	c->argv[a++] = "--model";
	c->argv[a++] = (char *)kn__model_name(o->model);
	c->argv[a++] = "--imbalance";
	c->argv[a++] = (char *)o->imbalance;
	c->argv[a++] = "--data";
	c->argv[a++] = (char *)o->data;
	ARG("--hidden", "%u", o->hidden);
	ARG("--batch", "%u", o->batch);
	ARG("--epochs", "%.17g", o->epochs);
	ARG("--time-budget", "%.17g", o->time_budget);
	ARG("--target-accuracy", "%.17g", o->target);
	ARG("--step-time", "%.17gs", o->step_time);
	ARG("--seed", "%llu", (unsigned long long)o->seed);
	ARG("--eval-interval", "%.17g", o->eval_interval);
	ARG("--eval-every", "%u", o->eval_every);
	c->argv[a] = NULL;
#undef ARG
}

struct monitor {
	struct kn__train_results *r;
	const struct kn__train_opts *o;
	bool tty;
	double t0, next_log;
	size_t logged_evals;
	char buf[8192];
	size_t len;
};

static void show_progress(struct monitor *m, bool force)
{
	char line[256];
	double t = kn__train_now() - m->t0;

	if (!m->tty && !force && m->r->nevals == m->logged_evals &&
	    t < m->next_log)
		return;
	kn__results_progress(m->r, m->o, line, sizeof(line));
	if (m->tty) {
		kn__tool_log("\r%s\033[K", line);
	} else {
		kn__tool_log("%s\n", line);
		m->next_log = t + 10;
		m->logged_evals = m->r->nevals;
	}
}

/* Read what the pipe has: false at its end. */
static bool drain_reports(struct monitor *m, int fd)
{
	ssize_t n = read(fd, m->buf + m->len, sizeof(m->buf) - 1 - m->len);
	char *line, *nl;

	if (n < 0)
		return errno == EINTR || errno == EAGAIN;
	if (n == 0)
		return false;
	m->len += (size_t)n;
	m->buf[m->len] = '\0';
	for (line = m->buf; (nl = strchr(line, '\n')); line = nl + 1) {
		*nl = '\0';
		if (kn__results_line(m->r, line, m->o->target))
			kn__tool_log("kanel train: a report line makes no "
				     "sense, ignored: %.80s\n",
				     line);
	}
	m->len = (size_t)(m->buf + m->len - line);
	memmove(m->buf, line, m->len);
	if (m->len == sizeof(m->buf) - 1)
		m->len = 0; /* a line that long is not ours */
	return true;
}

static int run_local(int nargs, char **args, struct kn__train_opts *o)
{
	char metrics_path[PATH_MAX] = "", fdnum[16];
	struct kn__train_results r;
	struct monitor m = { .r = &r, .o = o };
	struct worker_cmd cmd;
	struct kn__job job;
	const char *metrics;
	double failed_at = -1;
	bool terminated = false; /* SIGTERM sent after a failure */
	long metrics_from = 0;
	int fds[2] = { -1, -1 }, data_fd = -1, ret;
	bool open_pipe = true, stopping = false;

	/* the options first, which are cheap to check, then the data */
	ret = kn__job_init(&job, "kanel train", nargs, args);
	if (ret || kn_config_help(job.cfg) || check_dataset(o, &data_fd)) {
		ret = ret || !kn_config_help(job.cfg) ? 2 : 0;
		kn__job_fini(&job);
		return ret;
	}
	/* the roles start first: they need no dataset */
	if (data_fd >= 0)
		fcntl(data_fd, F_SETFD, FD_CLOEXEC);
	if (kn__results_init(&r, job.info.workers)) {
		if (data_fd >= 0)
			close(data_fd);
		kn__job_fini(&job);
		return 2;
	}
	metrics = kn_config_metrics(job.cfg);
	if (metrics) {
		FILE *f = fopen(metrics, "r");

		if (f && fseek(f, 0, SEEK_END) == 0)
			metrics_from = ftell(f);
		if (f)
			fclose(f);
		snprintf(metrics_path, sizeof(metrics_path), "%s", metrics);
	} else {
		int mfd;

		snprintf(metrics_path, sizeof(metrics_path),
			 "%s/kanel-metrics-XXXXXX",
			 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
		mfd = mkstemp(metrics_path);
		if (mfd >= 0)
			close(mfd);
		else
			metrics_path[0] = '\0';
		if (metrics_path[0])
			setenv("KANEL_METRICS", metrics_path, 1);
	}
	if (pipe(fds)) {
		ret = -errno;
		goto out;
	}
	fcntl(fds[0], F_SETFD, FD_CLOEXEC);
	snprintf(fdnum, sizeof(fdnum), "%d", fds[1]);
	setenv(REPORT_FD_ENV, fdnum, 1);
	setenv("OPENBLAS_NUM_THREADS", "1", 1);
	worker_cmd(&cmd, job.self, o);
	m.tty = strcmp(o->progress, "tty") == 0 ||
		(strcmp(o->progress, "auto") == 0 && isatty(STDERR_FILENO));
	kn__tool_log("kanel train: %s, %s, %u worker%s, %u server%s, imbalance "
		     "%s, on this machine\n",
		     job.info.protocol_name, kn__model_name(o->model),
		     job.info.workers, job.info.workers == 1 ? "" : "s",
		     job.info.servers, job.info.servers == 1 ? "" : "s",
		     o->imbalance);
	/* Ctrl-C stops the workers, which finish their step, report and
	 * leave; the coordinator and servers ignore it and end the job as
	 * usual.  A second Ctrl-C ends everything at once. */
	signal(SIGINT, SIG_IGN);
	/* a worker lost after the start is reported; the others go on */
	job.workers_may_fail = true;
	ret = kn__job_start_roles(&job);
	kn__train_catch_stop(SIGINT);
	if (data_fd >= 0) {
		snprintf(fdnum, sizeof(fdnum), "%d", data_fd);
		setenv(KN__TRAIN_DATA_FD_ENV, fdnum, 1);
		fcntl(data_fd, F_SETFD, 0);
	}
	for (unsigned int w = 0; !ret && w < job.info.workers; w++)
		ret = kn__job_start_worker(&job, w, cmd.argv);
	close(fds[1]);
	unsetenv(REPORT_FD_ENV);
	if (data_fd >= 0) {
		close(data_fd); /* the workers hold it now */
		data_fd = -1;
		unsetenv(KN__TRAIN_DATA_FD_ENV);
	}
	if (ret) /* the reason is printed: end what did start */
		kn__job_kill(&job, SIGTERM);
	m.t0 = kn__train_now();
	while (open_pipe || kn__job_reap(&job, false)) {
		struct pollfd p = { .fd = fds[0], .events = POLLIN };

		if (open_pipe && poll(&p, 1, 250) > 0)
			open_pipe = drain_reports(&m, fds[0]);
		else if (!open_pipe)
			kn__train_sleep(0.1);
		kn__job_reap(&job, false);
		show_progress(&m, false);
		if (kn__train_stop_requested == 1 && !stopping) {
			kn__tool_log("%skanel train: stopping after the "
				     "current step (Ctrl-C again: now)\n",
				     m.tty ? "\n" : "");
			stopping = true;
		} else if (kn__train_stop_requested > 1) {
			kn__job_kill(&job, SIGKILL);
		}
		/* a process failed: give the others a moment to notice,
		 * then end the job rather than wait on it */
		if (job.failed && failed_at < 0)
			failed_at = kn__train_now();
		if (failed_at >= 0 && kn__train_now() - failed_at > 5 &&
		    !terminated) {
			kn__job_kill(&job, SIGTERM);
			terminated = true;
		}
		/* a worker waiting to rejoin a job that is gone does not
		 * see SIGTERM until its wait ends */
		if (terminated && kn__train_now() - failed_at > 10) {
			kn__job_kill_hung(&job);
			failed_at = 1e300;
		}
	}
	if (m.tty)
		kn__tool_log("\n");
	if (metrics_path[0])
		kn__results_metrics(&r, metrics_path, metrics_from);
	kn__results_summary(&r, o, &job.info, stdout);
	if (o->curve && kn__results_write_curve(&r, o->curve))
		ret = ret ? ret : -EIO;
	if (o->summary_json &&
	    kn__results_write_json(&r, o, &job.info, o->summary_json))
		ret = ret ? ret : -EIO;
	if (job.server_restarts)
		kn__tool_log("kanel train: %u server restart%s from the "
			     "checkpoints\n",
			     job.server_restarts,
			     job.server_restarts == 1 ? "" : "s");
	/* the last line: what happened, by role and rank */
	kn__job_log_end(&job);
out:
	if (fds[0] >= 0)
		close(fds[0]);
	if (data_fd >= 0)
		close(data_fd);
	if (!metrics && metrics_path[0])
		unlink(metrics_path);
	kn__results_fini(&r);
	kn__job_fini(&job);
	return ret ? 2 : job.status;
}

int kn__train_main(int argc, char **argv)
{
	struct kn__train_opts o = {
		.model = KN__MODEL_MLP,
		.hidden = 256,
		.batch = 64,
		.epochs = 10,
		.target = 0.85,
		.step_time = 0.020,
		.eval_interval = 1,
		.imbalance = "none",
		.seed = 1,
		.data = KN_FASHION_MNIST_DIR,
		.curve = "kanel-curve.csv",
		.progress = "auto",
	};
	struct kn_config *cfg = NULL;
	bool help = false;
	const char *fd;
	char **args;
	int nargs = 0, ret;

	if (kn__train_take_options(&argc, argv, &o, &help))
		return 2;
	if (help) {
		kn__train_usage(stdout);
		return 0;
	}
	if (sum_requested(argc, argv)) {
		kn__tool_log("kanel train: --optimizer sum: the workers would "
			     "run an optimizer of their own, and the "
			     "trainer's have none: pick sgd, momentum or "
			     "adam\n");
		return 2;
	}
	/* the trainer's defaults for the job, where the user gave none;
	 * a joined coordinator makes them the job's.  They go before the
	 * user's arguments, so that a message about those (a value missing
	 * at the end) is about what the user wrote. */
	args = calloc((size_t)argc + 7, sizeof(*args));
	if (!args)
		return 2;
	args[nargs++] = argv[0];
	if (!job_option_given(argc, argv, "--optimizer", "KANEL_OPTIMIZER")) {
		args[nargs++] = "--optimizer";
		args[nargs++] = "momentum";
	}
	if (!job_option_given(argc, argv, "--lr", "KANEL_LR")) {
		args[nargs++] = "--lr";
		args[nargs++] = "0.05";
	}
	/* a job of its own: the workers are ours to count; under --join
	 * they come from the job's sources like every role's */
	if (!o.join &&
	    !job_option_given(argc, argv, "--workers", "KANEL_WORKERS")) {
		args[nargs++] = "--workers";
		args[nargs++] = KN__TRAIN_DEFAULT_WORKERS;
	}
	for (int i = 1; i < argc; i++)
		args[nargs++] = argv[i];
	if (!o.join) {
		ret = run_local(nargs, args, &o);
	} else if (kn__tool_parse(nargs, args, NULL, &cfg)) {
		ret = 2;
	} else if (kn_config_role(cfg) != KN_ROLE_WORKER) {
		ret = kn__tool_run_role(cfg);
	} else {
		fd = getenv(REPORT_FD_ENV);
		ret = kn__train_run_worker(&o, cfg, fd ? atoi(fd) : -1);
	}
	kn_config_destroy(cfg);
	free(args);
	return ret;
}
