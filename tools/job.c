/* SPDX-License-Identifier: Apache-2.0 */
/*
 * job.c - a Kanel job on this machine: the coordinator on a free loopback
 * port, M servers and N workers as child processes, the job's options
 * and a fresh secret handed to them through the environment (each
 * option's KANEL_* variable, docs/configuration.md).  `kanel launch`
 * runs a command in every worker; `kanel train` runs the trainer.  The
 * processes are started, reaped and killed through launch/ (launch.h);
 * what is the kanel command's own is here: the job's options and
 * secret, restarts, and the messages.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "launch.h"
#include "tool.h"

/* A worker that fails sooner than this after its start is not restarted
 * by --restart-workers: it would only fail again (the messages say 2 s). */
#define RESTART_MIN_S 2.0
/* Times a server is started again after a crash (checkpoints on). */
#define SERVER_RESTARTS 5

/* SIGTERM or SIGHUP to a job's parent that kn__job_catch_term set up:
 * the job is ended, not left running without its supervisor. */
static volatile sig_atomic_t term_signal;

static void on_term(int sig)
{
	term_signal = sig;
}

void kn__job_catch_term(void)
{
	/* no SA_RESTART: a blocking waitpid returns, and the loop ends */
	struct sigaction sa = { .sa_handler = on_term };

	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
}

void kn__tool_log(const char *fmt, ...)
{
	char buf[4096];
	size_t len;
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	len = (size_t)n;
	if (len >= sizeof(buf)) {
		memcpy(buf + sizeof(buf) - 5, "...\n", 5);
		len = sizeof(buf) - 1;
	}
	/* one write: up to PIPE_BUF bytes reach a pipe whole, and a
	 * terminal gets the line in one piece in practice */
	while (write(STDERR_FILENO, buf, len) < 0 && errno == EINTR)
		;
}

/*
 * Whether this process may append to @path, found without making or
 * changing anything: an existing file must open for writing (never
 * blocking: a FIFO without a reader is refused), a new one needs a
 * folder it may write in.  0 or a negative errno.
 */
static int writable(const char *path)
{
	char dir[PATH_MAX];
	const char *slash = strrchr(path, '/');
	struct stat st;
	int fd;

	fd = open(path,
		  O_WRONLY | O_APPEND | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd >= 0) {
		close(fd);
		return 0;
	}
	if (errno != ENOENT)
		return -errno;
	if (!slash)
		strcpy(dir, ".");
	else if (slash == path)
		strcpy(dir, "/");
	else if ((size_t)(slash - path) < sizeof(dir))
		snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
	else
		return -ENAMETOOLONG;
	if (stat(dir, &st))
		return -errno;
	if (!S_ISDIR(st.st_mode))
		return -ENOTDIR;
	return access(dir, W_OK | X_OK) ? -errno : 0;
}

int kn__tool_parse(int argc, char **argv, const struct kn_config_scope *scope,
		   struct kn_config **cfg)
{
	char err[512];
	int ret = kn_config_parse(scope, argc, argv, err, sizeof(err), cfg);
	const char *metrics;

	if (ret) {
		kn__tool_log("kanel: %s\n",
			     ret == -ENOMEM ? strerror(ENOMEM) : err);
		return ret;
	}
	/* the figures are written at the end: a path that cannot take
	 * them is refused now, not found out after the job */
	metrics = kn_config_help(*cfg) ? NULL : kn_config_metrics(*cfg);
	if (metrics && (ret = writable(metrics))) {
		kn__tool_log("kanel: --metrics %s: %s\n", metrics,
			     strerror(-ret));
		kn_config_destroy(*cfg);
		*cfg = NULL;
		return -EINVAL;
	}
	return 0;
}

void kn__tool_usage(FILE *out, const char *head, unsigned int options)
{
	fputs(head, out);
	fprintf(out, "Job options (each also a KANEL_* variable):\n");
	kn_config_usage(out, options);
}

int kn__tool_check_addresses(const struct kn_config *cfg)
{
	char err[512];
	int ret = kn_config_check_addresses(cfg, err, sizeof(err));

	if (ret)
		kn__tool_log("kanel: %s\n", err);
	return ret;
}

int kn__tool_run_role(const struct kn_config *cfg)
{
	char err[512];
	int ret = kn_config_role(cfg) == KN_ROLE_COORDINATOR
			  ? kn_run_coordinator(cfg, err, sizeof(err))
			  : kn_run_server(cfg, err, sizeof(err));

	/* a reason in @err: it did not start; none: the engine logged it */
	if (ret && err[0]) {
		kn__tool_log("kanel: %s\n", err);
		return 2;
	}
	return ret ? 1 : 0;
}

/* A fresh random secret in a 0600 file; its path in @path. */
static int make_secret(char *path, size_t cap)
{
	uint8_t key[32];
	int fd, ok;

	snprintf(path, cap, "%s/kanel-secret-XXXXXX",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	fd = mkstemp(path);
	if (fd < 0)
		return -errno;
	ok = fchmod(fd, 0600) == 0 && getentropy(key, sizeof(key)) == 0 &&
	     write(fd, key, sizeof(key)) == (ssize_t)sizeof(key);
	explicit_bzero(key, sizeof(key));
	close(fd);
	if (!ok) {
		unlink(path);
		path[0] = '\0';
		return -EIO;
	}
	return 0;
}

/*
 * The secret of a job that keeps checkpoints in @dir and was given none:
 * DIR/secret (0600, 32 random bytes), made with the folder if missing and
 * kept after the job, so that a later --resume DIR can check the seals
 * of the files this job writes.  An existing one is used as it is (the
 * processes that read it refuse one that is not a regular file or that
 * group or others may read).  Its path in @path.
 */
static int folder_secret(const char *dir, char *path, size_t cap)
{
	uint8_t key[32];
	int fd, n, ok;

	n = snprintf(path, cap, "%s/secret", dir);
	if (n < 0 || (size_t)n >= cap)
		return -ENAMETOOLONG;
	if (mkdir(dir, 0700) && errno != EEXIST)
		return -errno;
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
		  0600);
	if (fd < 0)
		return errno == EEXIST ? 0 : -errno;
	ok = getentropy(key, sizeof(key)) == 0 &&
	     write(fd, key, sizeof(key)) == (ssize_t)sizeof(key);
	explicit_bzero(key, sizeof(key));
	close(fd);
	if (!ok) {
		unlink(path);
		return -EIO;
	}
	return 0;
}

static void setenv_u(const char *name, unsigned int v, const char *suffix)
{
	char num[32];

	snprintf(num, sizeof(num), "%u%s", v, suffix);
	setenv(name, num, 1);
}

void kn__tool_export_member(const struct kn_config *cfg)
{
	kn_config_export(cfg, KN__TOOL_EXPORT_MEMBER);
}

int kn__job_init(struct kn__job *job, const char *command, int argc,
		 char **argv)
{
	const struct kn_config_scope scope = {
		.command = command,
		.options = KN__TOOL_OPTS_LOCAL,
		.role = KN_ROLE_COORDINATOR,
	};
	const char *secret_file, *ckpt_dir;
	char coord[64];
	int port, n;

	memset(job, 0, sizeof(*job));
	job->start_fd = -1;
	job->command = command;
	/* the job's options, checked once here; children read the env */
	if (kn__tool_parse(argc, argv, &scope, &job->cfg))
		return -EINVAL;
	if (kn_config_help(job->cfg))
		return 0;
	kn_config_job(job->cfg, &job->info);
	port = kn__launch_free_port();
	if (port < 0) {
		kn__tool_log("%s: no free port on 127.0.0.1\n", command);
		return -EADDRNOTAVAIL;
	}
	snprintf(coord, sizeof(coord), "127.0.0.1:%d", port);
	setenv("KANEL_COORDINATOR", coord, 1);
	n = (int)readlink("/proc/self/exe", job->self, sizeof(job->self) - 1);
	if (n <= 0)
		return -errno;
	job->self[n] = '\0';
	/* the checked options, for the children to read back; a secret
	 * file given is among them */
	if (kn_config_export(job->cfg, KN__TOOL_OPTS_LOCAL))
		return -ENOMEM;
	/* with checkpoints a server that dies is started again: the
	 * coordinator waits for it and the job goes on from them */
	ckpt_dir = getenv("KANEL_CHECKPOINT_DIR");
	job->restart_servers = ckpt_dir && *ckpt_dir;
	secret_file = getenv("KANEL_SECRET_FILE");
	if ((!secret_file || !*secret_file) && !getenv("KANEL_SECRET") &&
	    job->restart_servers) {
		char path[4096];
		int ret = folder_secret(ckpt_dir, path, sizeof(path));

		if (ret) {
			kn__tool_log("%s: cannot keep a job secret in %s: %s\n",
				     command, ckpt_dir, strerror(-ret));
			return ret;
		}
		setenv("KANEL_SECRET_FILE", path, 1);
	} else if ((!secret_file || !*secret_file) && !getenv("KANEL_SECRET")) {
		if (make_secret(job->secret_path, sizeof(job->secret_path))) {
			kn__tool_log("%s: cannot make a job secret\n", command);
			return -EIO;
		}
		setenv("KANEL_SECRET_FILE", job->secret_path, 1);
	}
	unsetenv("SLURM_PROCID"); /* the roles are ours to give */
	unsetenv("OMPI_COMM_WORLD_RANK");
	/* a variable the job's processes would read instead of ours */
	unsetenv("KANEL_LISTEN");
	job->total = 1 + job->info.servers + job->info.workers;
	job->pids = calloc(job->total, sizeof(*job->pids));
	job->names = calloc(job->total, sizeof(*job->names));
	job->started_at = calloc(job->total, sizeof(*job->started_at));
	job->ended = calloc(job->total, sizeof(*job->ended));
	return job->pids && job->names && job->started_at && job->ended
		       ? 0
		       : -ENOMEM;
}

/* Process @idx of @job as messages name it: "worker 3". */
static void describe(const struct kn__job *job, unsigned int idx, char *buf,
		     size_t cap)
{
	if (idx == 0)
		snprintf(buf, cap, "the coordinator");
	else if (idx <= job->info.servers)
		snprintf(buf, cap, "server %u", idx - 1);
	else
		snprintf(buf, cap, "worker %u", idx - 1 - job->info.servers);
}

/*
 * In the coordinator's child, before its exec: its way to say the job
 * started, a copy of the start pipe's write end in KANEL_START_FD.
 */
static int pass_start_fd(void *arg)
{
	const struct kn__job *job = arg;
	int fd = dup(job->start_w); /* without CLOEXEC */

	if (fd >= 0)
		setenv_u("KANEL_START_FD", (unsigned int)fd, "");
	return 0;
}

/*
 * Start process @idx of @job: @argv with the role in the environment.
 * An exec that fails is known at once (kn__launch_spawn), without
 * waiting for a start-up that cannot happen.
 */
static int spawn(struct kn__job *job, unsigned int idx, char *const *argv,
		 const char *role, unsigned int rank)
{
	const struct kn__launch_child c = {
		.argv = argv,
		.setup = idx == 0 && job->start_w >= 0 ? pass_start_fd : NULL,
		.arg = job,
		.role = role,
		.rank = rank,
	};
	bool forked;
	char who[32];
	pid_t pid;
	int ret;

	describe(job, idx, who, sizeof(who));
	ret = kn__launch_spawn(&c, &pid, &forked);
	if (ret && !forked) {
		kn__tool_log("%s: %s: cannot start: %s\n", job->command, who,
			     strerror(-ret));
		return ret;
	}
	job->names[idx] = argv[0];
	if (ret) {
		kn__tool_log("%s: %s: cannot run '%s': %s\n", job->command, who,
			     argv[0], strerror(-ret));
		return ret;
	}
	job->pids[idx] = pid;
	job->started_at[idx] = kn__launch_now();
	job->ended[idx] = KN__JOB_RUNNING;
	job->running++;
	return 0;
}

int kn__job_start_roles(struct kn__job *job)
{
	char *argv[3] = { job->self, "coordinator", NULL };
	int fds[2], ret;

	job->t0 = kn__launch_now();
	job->start_w = -1;
	if (pipe2(fds, O_CLOEXEC) == 0) {
		fcntl(fds[0], F_SETFL, O_NONBLOCK);
		job->start_fd = fds[0];
		job->start_w = fds[1];
	}
	ret = spawn(job, 0, argv, "coordinator", 0);
	if (job->start_w >= 0)
		close(job->start_w);
	job->start_w = -1;

	argv[1] = "server";
	for (unsigned int s = 0; !ret && s < job->info.servers; s++)
		ret = spawn(job, 1 + s, argv, "server", s);
	return ret;
}

int kn__job_start_worker(struct kn__job *job, unsigned int rank,
			 char *const *argv)
{
	job->worker_argv = argv;
	return spawn(job, 1 + job->info.servers + rank, argv, "worker", rank);
}

/*
 * Whether worker process @i, which failed after the start, @ran seconds
 * after its last one, is to be started again: the job asks for that, it
 * ran long enough to be worth it, and the coordinator is still there to
 * take it back.
 */
static bool restarting(const struct kn__job *job, unsigned int i, double ran)
{
	return job->restart_workers && job->pids[0] && !job->ending &&
	       ran >= RESTART_MIN_S && i > job->info.servers;
}

/* Whether server process @i, which failed after the start, is started
 * again: checkpoints are on, the coordinator is there to wait for it, it
 * has not failed too often, nor too soon after a restart of ours (the
 * first one ran since before the start). */
static bool restarting_server(const struct kn__job *job, unsigned int i,
			      double ran)
{
	bool restarted = job->started_at[i] > job->t0 + 1.0;

	return job->restart_servers && job->pids[0] && !job->ending && i >= 1 &&
	       i <= job->info.servers && (!restarted || ran >= RESTART_MIN_S) &&
	       job->server_restarts < SERVER_RESTARTS * job->info.servers;
}

/* Whether the coordinator has said that the job started. */
static bool started(struct kn__job *job)
{
	char b;

	if (!job->started && job->start_fd >= 0 &&
	    read(job->start_fd, &b, 1) == 1)
		job->started = true;
	return job->started;
}

/*
 * Process @i of @job, which was @pid, ended with wait status @st: its
 * account, a restart, or the message that says how it failed.
 */
static void ended(struct kn__job *job, unsigned int i, pid_t pid, int st)
{
	char who[32], how[64];

	job->pids[i] = 0;
	job->running--;
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
		job->ended[i] = KN__JOB_FINISHED;
		return;
	}
	/* those we stopped need no word */
	if (job->ending) {
		if (job->ended[i] != KN__JOB_HUNG)
			job->ended[i] = KN__JOB_STOPPED;
		job->stopped++;
		return;
	}
	/* a restart below sets it back to running */
	job->ended[i] = KN__JOB_FAILED;
	describe(job, i, who, sizeof(who));
	if (started(job) &&
	    restarting_server(job, i, kn__launch_now() - job->started_at[i])) {
		char *argv[3] = { job->self, "server", NULL };

		kn__tool_log("%s: %s (pid %d) ended badly %.1f s "
			     "after the start (%s %d): "
			     "restarting it; the job goes on "
			     "from the last checkpoint\n",
			     job->command, who, (int)pid,
			     kn__launch_now() - job->t0,
			     WIFEXITED(st) ? "status" : "signal",
			     WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
		if (spawn(job, i, argv, "server", i - 1) == 0) {
			job->server_restarts++;
			return;
		}
	}
	if (job->workers_may_fail && i > job->info.servers && started(job)) {
		double t = kn__launch_now();
		bool again = restarting(job, i, t - job->started_at[i]);

		kn__tool_log("%s: %s (%s, pid %d) ended badly "
			     "%.1f s after the start (%s %d): "
			     "%s\n",
			     job->command, who, job->names[i], (int)pid,
			     t - job->t0, WIFEXITED(st) ? "status" : "signal",
			     WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st),
			     again ? "restarting it, with its "
				     "rank"
				   : "the job goes on without "
				     "it");
		if (again && spawn(job, i, job->worker_argv, "worker",
				   i - 1 - job->info.servers) == 0) {
			job->restarted++;
			return;
		}
		if (job->restart_workers && !again)
			kn__tool_log("%s: %s is not restarted: %s\n",
				     job->command, who,
				     job->pids[0] ? "it failed within 2 s "
						    "of its start"
						  : "the coordinator is "
						    "gone");
		job->lost++;
		if (!job->status)
			job->status = WIFEXITED(st) ? WEXITSTATUS(st) : 1;
		return;
	}
	if (!job->status)
		job->status = WIFEXITED(st) ? WEXITSTATUS(st) : 1;
	job->failed++;
	kn__tool_log("%s: %s (%s, pid %d) %s\n", job->command, who,
		     job->names[i], (int)pid,
		     kn__launch_strstatus(st, how, sizeof(how)));
}

/* Reap what has ended (@block: wait for all; @one: for one at most). */
static unsigned int reap(struct kn__job *job, bool block, bool one)
{
	while (job->running) {
		unsigned int i;
		int st, ret = kn__launch_reap_any(job->pids, job->total, block,
						  &i, &st);

		if (ret == -EINTR && term_signal)
			break; /* kn__job_wait ends the job */
		if (ret == -EINTR)
			continue;
		if (ret)
			break;
		if (one)
			block = false;
		ended(job, i, job->pids[i], st);
	}
	return job->running;
}

unsigned int kn__job_reap(struct kn__job *job, bool block)
{
	return reap(job, block, false);
}

void kn__job_kill(struct kn__job *job, int sig)
{
	job->ending = true;
	for (unsigned int i = 0; i < job->total; i++)
		if (job->pids[i] > 0)
			kill(job->pids[i], sig);
}

void kn__job_kill_hung(struct kn__job *job)
{
	for (unsigned int i = 0; i < job->total; i++)
		if (job->pids[i] > 0)
			job->ended[i] = KN__JOB_HUNG;
	kn__job_kill(job, SIGKILL);
}

void kn__job_wait(struct kn__job *job, double grace_s)
{
	const struct timespec tick = { .tv_nsec = 20 * 1000 * 1000 };
	double until;

	/* one child at a time, until one fails, all are done or we are
	 * told to stop */
	while (job->running && !job->failed && !term_signal)
		reap(job, true, true);
	if (!job->running)
		return;
	if (term_signal) {
		kn__tool_log("%s: %s: ending the job\n", job->command,
			     strsignal(term_signal));
		if (!job->status)
			job->status = 128 + term_signal;
	}
	kn__tool_log("%s: ending the job: %u process%s stopped\n", job->command,
		     job->running, job->running == 1 ? "" : "es");
	kn__job_kill(job, SIGTERM);
	until = kn__launch_now() + grace_s;
	while (kn__job_reap(job, false) && kn__launch_now() < until)
		nanosleep(&tick, NULL);
	if (job->running)
		kn__job_kill_hung(job);
	kn__job_reap(job, true);
}

/*
 * Append to @buf (@cap bytes, @len used) the processes of role @first ..
 * @last - 1 that ended as @how, ranks in runs ("workers 0-2, 5"); how
 * many there were.
 */
static unsigned int list_role(const struct kn__job *job, unsigned int first,
			      unsigned int last, enum kn__job_end how,
			      const char *one, const char *many, char *buf,
			      size_t cap, size_t *len)
{
	unsigned int n = 0, i, end;

	for (i = first; i < last; i++)
		n += job->ended[i] == how;
	if (!n)
		return 0;
	*len += (size_t)snprintf(buf + *len, cap - *len, "%s%s",
				 *len && buf[*len - 1] != ' ' ? ", " : "",
				 n == 1 ? one : many);
	for (i = first; i < last && *len < cap; i = end) {
		if (job->ended[i] != how) {
			end = i + 1;
			continue;
		}
		for (end = i + 1; end < last && job->ended[end] == how; end++)
			;
		*len += (size_t)snprintf(buf + *len, cap - *len, "%s%u",
					 buf[*len - 1] == ' ' ? "" : ", ",
					 i - first);
		if (end - i > 1 && *len < cap)
			*len += (size_t)snprintf(buf + *len, cap - *len, "-%u",
						 end - 1 - first);
	}
	return n;
}

/* Every process that ended as @how, by role; "none" if none did. */
static void list_ended(const struct kn__job *job, enum kn__job_end how,
		       const char *label, char *buf, size_t cap, size_t *len)
{
	unsigned int s = job->info.servers, n = 0;

	bool any = false;

	for (unsigned int i = 0; i < job->total; i++)
		any = any || job->ended[i] == how;
	/* a kind no process ended as is left out, but for "finished" */
	if (*len >= cap || (!any && how != KN__JOB_FINISHED))
		return;
	*len += (size_t)snprintf(buf + *len, cap - *len,
				 "%s%s: ", *len ? "; " : "", label);
	if (job->ended[0] == how && *len < cap) {
		*len += (size_t)snprintf(buf + *len, cap - *len,
					 "the coordinator");
		n++;
	}
	if (*len < cap)
		n += list_role(job, 1, 1 + s, how, "server ", "servers ", buf,
			       cap, len);
	if (*len < cap)
		n += list_role(job, 1 + s, job->total, how, "worker ",
			       "workers ", buf, cap, len);
	if (!n && *len < cap)
		*len += (size_t)snprintf(buf + *len, cap - *len, "none");
}

void kn__job_outcome(const struct kn__job *job, char *buf, size_t cap)
{
	bool all = true;
	size_t len = 0;

	if (!cap)
		return;
	buf[0] = '\0';
	for (unsigned int i = 0; i < job->total; i++)
		all = all && job->ended[i] == KN__JOB_FINISHED;
	if (all) {
		snprintf(buf, cap, "every process finished");
		return;
	}
	list_ended(job, KN__JOB_FAILED, "failed", buf, cap, &len);
	list_ended(job, KN__JOB_HUNG, "hung (deaf to SIGTERM, killed)", buf,
		   cap, &len);
	list_ended(job, KN__JOB_STOPPED, "stopped", buf, cap, &len);
	list_ended(job, KN__JOB_FINISHED, "finished", buf, cap, &len);
}

void kn__job_log_end(const struct kn__job *job)
{
	unsigned int finished = 0, bad = 0;
	char out[1024];

	if (!job->failed && !job->lost)
		return;
	for (unsigned int i = 1 + job->info.servers; i < job->total; i++)
		finished += job->ended[i] == KN__JOB_FINISHED;
	for (unsigned int i = 0; i < job->total; i++)
		bad += job->ended[i] == KN__JOB_FAILED ||
		       job->ended[i] == KN__JOB_HUNG;
	kn__job_outcome(job, out, sizeof(out));
	if (job->failed)
		kn__tool_log("%s: %u of %u process%s failed: the job failed "
			     "(%s)\n",
			     job->command, bad, job->total,
			     job->total == 1 ? "" : "es", out);
	else if (finished)
		kn__tool_log("%s: %u worker%s failed after the start; the "
			     "others finished the job (%s)\n",
			     job->command, job->lost, job->lost == 1 ? "" : "s",
			     out);
	else
		kn__tool_log("%s: %u worker%s failed after the start and none "
			     "finished: the job failed (%s)\n",
			     job->command, job->lost, job->lost == 1 ? "" : "s",
			     out);
}

void kn__job_fini(struct kn__job *job)
{
	if (job->secret_path[0])
		unlink(job->secret_path);
	job->secret_path[0] = '\0';
	free(job->pids);
	job->pids = NULL;
	free(job->names);
	job->names = NULL;
	free(job->started_at);
	job->started_at = NULL;
	free(job->ended);
	job->ended = NULL;
	if (job->start_fd >= 0)
		close(job->start_fd);
	job->start_fd = -1;
	kn_config_destroy(job->cfg);
	job->cfg = NULL;
}
