/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_kanel.c - the kanel command as a user meets it: each subcommand
 * takes the job options it uses and refuses the others, naming both; a
 * flag wins over its KANEL_* variable in every role; a process started
 * without a subcommand takes its role from --role, KANEL_ROLE or the
 * launcher; a missing value and a bad address are named; kanel launch
 * ends a job at once when a command cannot run or a child fails; every
 * subcommand has its own --help; log lines reach stderr whole; kanel
 * compare refuses a bad --seeds list before it runs anything, and with a
 * good one runs once per seed into files of their own.
 *
 * The processes run with the test's environment minus every KANEL_*,
 * SLURM_* and OMPI_* variable, plus what each test gives.  A role that
 * should connect is pointed at a socket the test listens on: the
 * connection arriving proves where the process went.  A start-up timeout
 * of a day makes a process that would wait out its start-up hang, which
 * the suite's timeout turns into a failure; nothing here measures time.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "proc_util.h"

extern char **environ;

static char dir[64];

static void setup(void)
{
	strcpy(dir, "/tmp/kanel-cli-XXXXXX");
	cr_assert_not_null(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
}

static void teardown(void)
{
	static const char *const names[] = { "stdout", "stderr" };
	char path[128];

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		unlink(path);
	}
	rmdir(dir);
}

TestSuite(kanel, .init = setup, .fini = teardown, .timeout = 120);

static char *kanel(void)
{
	return kanel_exe();
}

static const char *in_dir(const char *name)
{
	return path_in(dir, name);
}

/* The environment for a child: ours without the job's, plus @extra. */
static char **child_env(char *const *extra)
{
	size_t n = 0, k = 0;
	char **env;

	while (environ[n])
		n++;
	for (size_t i = 0; extra && extra[i]; i++)
		n++;
	env = calloc(n + 1, sizeof(*env));
	cr_assert_not_null(env);
	for (size_t i = 0; environ[i]; i++)
		if (strncmp(environ[i], "KANEL_", 6) &&
		    strncmp(environ[i], "SLURM_", 6) &&
		    strncmp(environ[i], "OMPI_", 5))
			env[k++] = environ[i];
	for (size_t i = 0; extra && extra[i]; i++)
		env[k++] = extra[i];
	return env;
}

/* Start kanel with @args and @extra variables; stdout and stderr go to
 * files of the test's directory, or stderr to @err_fd if >= 0. */
static pid_t start(char *const *args, char *const *extra, int err_fd)
{
	char *argv[32] = { kanel() };
	char **env = child_env(extra);
	size_t n = 1;
	pid_t pid;

	for (; args[n - 1]; n++) {
		cr_assert_lt(n, 31);
		argv[n] = args[n - 1];
	}
	argv[n] = NULL;
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		int out = open(in_dir("stdout"), O_WRONLY | O_CREAT | O_TRUNC,
			       0644);
		int err = err_fd >= 0
				  ? err_fd
				  : open(in_dir("stderr"),
					 O_WRONLY | O_CREAT | O_TRUNC, 0644);

		setpgid(0, 0);
		dup2(out, 1);
		dup2(err, 2);
		execve(argv[0], argv, env);
		_exit(127);
	}
	free(env);
	return pid;
}

static int wait_exit(pid_t pid)
{
	int st;

	cr_assert_eq(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int run(char *const *args, char *const *extra)
{
	return wait_exit(start(args, extra, -1));
}

static char *slurp(const char *name)
{
	FILE *f = fopen(in_dir(name), "r");
	char *buf;
	long n;

	cr_assert_not_null(f, "%s: %s", name, strerror(errno));
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = calloc(1, (size_t)n + 1);
	cr_assert_not_null(buf);
	cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	return buf;
}

/* Run; expect exit code @rc and @needle in stderr. */
static void expect_refusal(char *const *args, char *const *extra, int rc,
			   const char *needle)
{
	int got = run(args, extra);
	char *err = slurp("stderr");

	cr_expect_eq(got, rc, "%s %s: exit %d, stderr: %s", args[0],
		     args[1] ? args[1] : "", got, err);
	cr_expect_not_null(strstr(err, needle), "%s %s: no \"%s\" in: %s",
			   args[0], args[1] ? args[1] : "", needle, err);
	free(err);
}

/* A TCP socket listening on 127.0.0.1, its port in @port. */
static int listener(unsigned int *port)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	cr_assert_geq(fd, 0);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(listen(fd, 16), 0);
	cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	*port = ntohs(a.sin_port);
	return fd;
}

/* A port nothing listens on (bound, then released). */
static unsigned int dead_port(void)
{
	unsigned int port;

	close(listener(&port));
	return port;
}

/*
 * Start kanel @args with @extra as start() does, and wait until it
 * connects to listener @fd (true), or exits first (false, with its
 * stderr logged); then end it and close @fd.
 */
static bool connects(int fd, char *const *args, char *const *extra)
{
	pid_t pid = start(args, extra, -1);
	bool connected = false;

	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int st;

		if (poll(&p, 1, 100) > 0) {
			int c = accept(fd, NULL, NULL);

			cr_assert_geq(c, 0);
			close(c);
			kill(-pid, SIGKILL);
			waitpid(pid, NULL, 0);
			connected = true;
			break;
		}
		if (waitpid(pid, &st, WNOHANG) == pid) {
			char *err = slurp("stderr");

			cr_log_error("exited (%d) without connecting: %s",
				     WIFEXITED(st) ? WEXITSTATUS(st) : -1, err);
			free(err);
			break;
		}
	}
	close(fd);
	return connected;
}

#define ARGS(...)     ((char *[]){ __VA_ARGS__, NULL })
#define FMT(buf, ...) (snprintf(buf, sizeof(buf), __VA_ARGS__), buf)

/* The environment of a one-worker job whose coordinator (in @coord)
 * never answers, the start-up timeout @timeout. */
#define DEAD_COORDINATOR_ENV(coord, timeout)                            \
	ARGS(FMT(coord, "KANEL_COORDINATOR=127.0.0.1:%u", dead_port()), \
	     "KANEL_WORKERS=1", "KANEL_SECRET=s",                       \
	     "KANEL_STARTUP_TIMEOUT=" timeout)

/* What the last run wrote to stderr, into the test's log. */
static void log_stderr(void)
{
	char *err = slurp("stderr");

	cr_log_error("stderr: %s", err);
	free(err);
}

/* @rc, the last run's exit code, is 0; its stderr is logged if not. */
static void assert_ran_ok(int rc)
{
	if (rc)
		log_stderr();
	cr_assert_eq(rc, 0);
}

/* --- precedence and roles ---------------------------------------------- */

/*
 * kanel worker's flags beat the KANEL_* variables: the variables name a
 * dead coordinator and one worker, the flags ours and four.
 */
Test(kanel, worker_flags_win_over_variables)
{
	unsigned int port;
	int fd = listener(&port);
	char coord[64], env_coord[64];

	cr_expect(connects(fd,
			   ARGS("worker", "--coordinator",
				FMT(coord, "127.0.0.1:%u", port), "--workers",
				"4", "--rank", "3", "--startup-timeout",
				"86400s"),
			   ARGS(FMT(env_coord, "KANEL_COORDINATOR=127.0.0.1:%u",
				    dead_port()),
				"KANEL_WORKERS=1", "KANEL_RANK=0",
				"KANEL_SECRET=s")),
		  "the worker did not use its flags");
}

/* kanel --role worker, as configuration.md's recipe by hand. */
Test(kanel, role_from_the_role_flag_without_subcommand)
{
	unsigned int port;
	int fd = listener(&port);
	char coord[64];

	cr_expect(connects(fd, ARGS("--role", "worker", "--rank", "1"),
			   ARGS(FMT(coord, "KANEL_COORDINATOR=127.0.0.1:%u",
				    port),
				"KANEL_WORKERS=2", "KANEL_SECRET=s",
				"KANEL_STARTUP_TIMEOUT=86400s")),
		  "kanel --role worker did not run");
}

/* srun -n 3 kanel --coordinator ...: rank 2 of 3 is worker 0. */
Test(kanel, role_from_the_launcher_without_subcommand)
{
	unsigned int port;
	int fd = listener(&port);
	char coord[64];

	cr_expect(
		connects(fd,
			 ARGS("--coordinator", FMT(coord, "127.0.0.1:%u", port),
			      "--startup-timeout", "86400s"),
			 ARGS("SLURM_PROCID=2", "SLURM_NTASKS=3",
			      "KANEL_SECRET=s")),
		"rank 2 did not run as a worker");
}

/* KANEL_ROLE=coordinator kanel: a coordinator, which listens. */
Test(kanel, role_from_the_variable_without_subcommand)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	unsigned int port = dead_port();
	char coord[64];
	bool listening = false;
	pid_t pid;

	pid = start(ARGS("--workers", "1"),
		    ARGS("KANEL_ROLE=coordinator", "KANEL_SECRET=s",
			 FMT(coord, "KANEL_COORDINATOR=127.0.0.1:%u", port),
			 "KANEL_STARTUP_TIMEOUT=86400s"),
		    -1);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	a.sin_port = htons((uint16_t)port);
	while (!listening && waitpid(pid, NULL, WNOHANG) == 0) {
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

		listening = !connect(fd, (struct sockaddr *)&a, sizeof(a));
		close(fd);
		if (!listening)
			usleep(50 * 1000);
	}
	if (!listening) {
		log_stderr();
	} else {
		kill(-pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
	cr_expect(listening, "KANEL_ROLE=coordinator kanel did not listen");
}

/* --- options a command does not use --------------------------------- */

Test(kanel, subcommands_refuse_options_they_do_not_use)
{
	char coord[64];
	char **env = DEAD_COORDINATOR_ENV(coord, "2s");

	expect_refusal(ARGS("train", "--listen", "0.0.0.0:1", "--data",
			    "/nonexistent"),
		       env, 2, "--listen is not an option of kanel train");
	expect_refusal(ARGS("train", "--coordinator", "127.0.0.1:1", "--data",
			    "/nonexistent"),
		       env, 2, "--coordinator is not an option of kanel train");
	expect_refusal(ARGS("launch", "--workers", "1", "--rank", "0"), env, 2,
		       "--rank is not an option of kanel launch");
	expect_refusal(ARGS("launch", "--workers", "1", "--listen", ":0"), env,
		       2, "--listen is not an option of kanel launch");
	expect_refusal(ARGS("worker", "--sync", "asp"), env, 2,
		       "--sync is not an option of kanel worker");
	expect_refusal(ARGS("worker", "--role", "server"), env, 2,
		       "--role is not an option of kanel worker");
	expect_refusal(ARGS("coordinator", "--listen", ":1"), env, 2,
		       "--listen is not an option of kanel coordinator");
	expect_refusal(ARGS("server", "--lr", "0.1"), env, 2,
		       "--lr is not an option of kanel server");
}

/* --- bad input is named ------------------------------------------------ */

Test(kanel, a_missing_value_names_its_option)
{
	char **env = ARGS("KANEL_SECRET=s");

	expect_refusal(ARGS("train", "--lr", "--momentum", "0.9"), env, 2,
		       "--lr needs a value, but the next argument is "
		       "'--momentum'");
	expect_refusal(ARGS("train", "--lr"), env, 2, "--lr needs a value");
	expect_refusal(ARGS("train", "--epochs", "--lr", "0.1"), env, 2,
		       "--epochs needs a value");
	expect_refusal(ARGS("worker", "--workers", "1", "--steps"), env, 2,
		       "--steps needs a value");
	expect_refusal(ARGS("worker", "--steps", "--tensors", "2"), env, 2,
		       "--steps needs a value");
	expect_refusal(ARGS("launch", "--workers"), env, 2,
		       "--workers needs a value");
}

Test(kanel, a_bad_address_is_named)
{
	expect_refusal(ARGS("worker", "--workers", "1", "--coordinator",
			    "999.0.0.1:7000"),
		       ARGS("KANEL_SECRET=s"), 2,
		       "'999.0.0.1' is not an IPv4 address");
	expect_refusal(ARGS("server", "--workers", "1", "--coordinator",
			    "127.0.0.1:7000", "--listen", "10.0.0.256:0"),
		       ARGS("KANEL_SECRET=s"), 2,
		       "'10.0.0.256' is not an IPv4 address");
	/* a name that does not resolve (.invalid never does) is named, not
	 * reported as "No such file or directory" */
	expect_refusal(ARGS("worker", "--workers", "1", "--coordinator",
			    "no-such-host.invalid:7000"),
		       ARGS("KANEL_SECRET=s"), 2,
		       "the coordinator's address no-such-host.invalid:7000: ");
	expect_refusal(ARGS("coordinator", "--workers", "1", "--coordinator",
			    "no-such-host.invalid:7000"),
		       ARGS("KANEL_SECRET=s"), 2,
		       "the coordinator's address no-such-host.invalid:7000: ");
}

/*
 * A role that never joined a job failed: under srun or mpirun a server
 * that never served must not look like a success.  Here the coordinator
 * is unreachable for the whole start-up timeout; both roles exit 1 and
 * say why (a server exited 0 before).
 */
Test(kanel, a_role_that_never_joined_exits_non_zero)
{
	char coord[64];
	char **env = DEAD_COORDINATOR_ENV(coord, "1s");

	expect_refusal(ARGS("server"), env, 1,
		       "server 0: never joined a job: the coordinator at "
		       "127.0.0.1:");
	expect_refusal(ARGS("server"), env, 1, "Connection refused");
	expect_refusal(ARGS("worker"), env, 1, "worker 0: timed out");
}

/*
 * A bad value is named, and refused before anything runs: a role
 * variable of a bare `kanel` (the whole usage came, naming nothing), a
 * --metrics path that cannot take the figures (accepted, and the job
 * ran to exit 0), a simulated model past 1 PiB (accepted).
 */
Test(kanel, bad_values_are_named_at_the_start)
{
	char path[160], *err;
	int rc;

	rc = run((char *[]){ NULL }, ARGS("KANEL_ROLE=king", "KANEL_SECRET=s"));
	err = slurp("stderr");
	cr_expect_eq(rc, 2, "exit %d: %s", rc, err);
	cr_expect_not_null(strstr(err, "KANEL_ROLE='king'"), "%s", err);
	cr_expect_null(strstr(err, "usage:"), "%s", err);
	free(err);
	expect_refusal(ARGS("train", "--metrics", "/nonexistent/m.json",
			    "--data", "/nonexistent"),
		       ARGS("KANEL_SECRET=s"), 2,
		       "--metrics /nonexistent/m.json: No such file or "
		       "directory");
	/* the test's folder: a directory cannot take the lines */
	expect_refusal(ARGS("launch", "--workers", "1", "--metrics", dir),
		       ARGS("KANEL_SECRET=s"), 2,
		       FMT(path, "--metrics %s: Is a directory", dir));
	expect_refusal(ARGS("server", "--workers", "1", "--coordinator",
			    "127.0.0.1:1", "--metrics", "/nonexistent/m"),
		       ARGS("KANEL_SECRET=s"), 2,
		       "--metrics /nonexistent/m: No such file");
	expect_refusal(ARGS("sim", "--model-bytes", "1e30"), NULL, 2,
		       "--model-bytes 1e30: a number from 0 to");
}

/* --- kanel launch ---------------------------------------------------- */

Test(kanel, launch_fails_at_once_when_its_command_cannot_run)
{
	char *err;

	cr_expect_eq(run(ARGS("launch", "--workers", "2", "--startup-timeout",
			      "86400s", "--", "./does-not-exist"),
			 NULL),
		     2);
	err = slurp("stderr");
	cr_expect_not_null(strstr(err, "kanel launch: worker 0: cannot run "
				       "'./does-not-exist': No such file"),
			   "%s", err);
	free(err);
}

Test(kanel, launch_ends_the_job_when_a_child_fails)
{
	char *err;

	cr_expect_eq(run(ARGS("launch", "--workers", "2", "--startup-timeout",
			      "86400s", "--", "/bin/sh", "-c", "exit 3"),
			 NULL),
		     3);
	err = slurp("stderr");
	cr_expect_not_null(strstr(err, "(/bin/sh, pid "), "%s", err);
	cr_expect_not_null(strstr(err, "exited with status 3"), "%s", err);
	cr_expect_not_null(strstr(err, "kanel launch: ending the job"), "%s",
			   err);
	free(err);
}

/*
 * A worker that fails after the job started is let go, as the engine
 * lets it go: the others finish, and launch's status is the failure's.
 */
Test(kanel, launch_goes_on_when_a_worker_fails_after_the_start)
{
	char script[8192], *err;
	const char *exe = getenv("KANEL_EXE");

	cr_assert_not_null(exe);
	snprintf(script, sizeof(script),
		 "if [ \"$KANEL_RANK\" = 1 ]; then '%s' worker --steps 3 && "
		 "exit 4; else exec '%s' worker --steps 60; fi",
		 exe, exe);
	cr_expect_eq(run(ARGS("launch", "--workers", "2", "--", "/bin/sh", "-c",
			      script),
			 NULL),
		     4);
	err = slurp("stderr");
	cr_expect_not_null(strstr(err, "worker 1 (/bin/sh, pid "), "%s", err);
	cr_expect_not_null(strstr(err, "the job goes on without it"), "%s",
			   err);
	cr_expect_not_null(strstr(err, "1 worker failed after the start"), "%s",
			   err);
	cr_expect_null(strstr(err, "ending the job"), "%s", err);
	free(err);
}

/*
 * kanel launch --restart-workers of 2 workers: worker 1 is killed 2.5 s
 * into the job and, started again, runs the shell code @again ($k is
 * kanel); worker 0's steps outlast that.  The exit code.
 */
static int launch_restarting(const char *again)
{
	char script[8192];
	int rc;

	snprintf(script, sizeof(script),
		 "k='%s'; if [ \"$KANEL_RANK\" = 1 ]; then "
		 "if [ ! -e '%s' ]; then : > '%s'; "
		 "(sleep 2.5; kill -9 $$) & "
		 "exec \"$k\" worker --steps 1000000 --tensor-bytes 4096; fi; "
		 "%s "
		 "else exec \"$k\" worker --steps 4000 --pause-ms 2 "
		 "--tensor-bytes 4096; fi",
		 kanel(), in_dir("killed"), in_dir("killed"), again);
	rc = run(ARGS("launch", "--workers", "2", "--restart-workers", "--",
		      "/bin/sh", "-c", script),
		 NULL);
	unlink(in_dir("killed"));
	return rc;
}

/*
 * --restart-workers: worker 1 is killed 2.5 s into the job and started
 * again with its rank; it rejoins, and the job ends well.  Worker 0's
 * steps outlast the kill and the restart whatever the engine's speed:
 * 4000 steps with a 2 ms pause before each are 8 s at least (a count
 * alone was not: 30000 steps of 4 KiB once took 6 s here, and took 2.5 s
 * when the engine's small rounds got faster, so the job ended as worker
 * 1 was killed).
 */
Test(kanel, launch_restarts_a_worker_that_fails_after_the_start)
{
	char *err;

	cr_expect_eq(launch_restarting("exec \"$k\" worker --steps 200 "
				       "--tensor-bytes 4096;"),
		     0);
	err = slurp("stderr");
	cr_expect_not_null(strstr(err, "(signal 9): restarting it, with its "
				       "rank"),
			   "%s", err);
	cr_expect_not_null(strstr(err, "worker 1 is back"), "%s", err);
	cr_expect_not_null(strstr(err, "kanel launch: 1 worker restart\n"),
			   "%s", err);
	cr_expect_null(strstr(err, "failed after the start"), "%s", err);
	free(err);
}

/*
 * A restarted worker that fails again at once is not restarted again
 * (worker 0 outlasts the kill as above).
 */
Test(kanel, launch_does_not_restart_a_worker_that_fails_at_once)
{
	char *err;

	cr_expect_eq(launch_restarting("exit 5;"), 5);
	err = slurp("stderr");
	cr_expect_not_null(strstr(err, "restarting it, with its rank"), "%s",
			   err);
	cr_expect_not_null(strstr(err, "(status 5): the job goes on without "
				       "it"),
			   "%s", err);
	cr_expect_not_null(strstr(err, "worker 1 is not restarted: it failed "
				       "within 2 s of its start"),
			   "%s", err);
	cr_expect_not_null(strstr(err, "1 worker failed after the start"), "%s",
			   err);
	free(err);
}

/* --- help ------------------------------------------------------------ */

static void expect_help(char *const *args, const char *const *want,
			const char *const * not )
{
	char *out;

	cr_expect_eq(run(args, NULL), 0, "%s --help", args[0]);
	out = slurp("stdout");
	for (; want && *want; want++)
		cr_expect_not_null(strstr(out, *want), "%s: no \"%s\" in: %s",
				   args[0], *want, out);
	for (; not &&*not ; not ++)
		cr_expect_null(strstr(out, *not ), "%s: \"%s\" in: %s", args[0],
			       *not, out);
	free(out);
}

#define LIST(...) ((const char *const[]){ __VA_ARGS__, NULL })

Test(kanel, each_subcommand_has_its_own_help)
{
	expect_help(ARGS("launch", "--help"),
		    LIST("usage: kanel launch", "[-- CMD [ARG...]]",
			 "--workers N", "--sync"),
		    LIST("--listen", "--rank R", "--role"));
	expect_help(ARGS("worker", "--help"),
		    LIST("usage: kanel worker", "--steps N", "--tensors N",
			 "--tensor-bytes BYTES", "--dtype fp32|fp16|bf16",
			 "--coordinator HOST:PORT", "--rank R"),
		    LIST("--sync", "--listen"));
	expect_help(ARGS("coordinator", "--help"),
		    LIST("usage: kanel coordinator", "--sync", "--workers N"),
		    LIST("--listen HOST", "--rank R", "--steps"));
	expect_help(
		ARGS("server", "--help"),
		LIST("usage: kanel server", "--listen HOST:PORT", "--rank R"),
		LIST("--sync", "--steps"));
	expect_help(ARGS("sim", "--help"), LIST("usage: kanel sim"),
		    LIST("usage: sim"));
	expect_help(ARGS("--help"),
		    LIST("kanel [options]", "--role coordinator|server|worker"),
		    NULL);
}

/* --- log lines --------------------------------------------------------- */

/*
 * Every write to stderr is a whole line: with stderr a SOCK_SEQPACKET
 * socket each write(2) is one record, so a line written in pieces shows
 * as records that do not end in a newline.  A failing launch makes the
 * launcher and its children write to the same socket.
 */
Test(kanel, log_lines_are_written_whole)
{
	char buf[8192];
	int sv[2], records = 0;
	ssize_t n;
	pid_t pid;

	cr_assert_eq(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
	pid = start(ARGS("launch", "--workers", "2", "--", "/bin/sh", "-c",
			 "exit 4"),
		    NULL, sv[1]);
	close(sv[1]);
	while ((n = recv(sv[0], buf, sizeof(buf) - 1, 0)) > 0) {
		buf[n] = '\0';
		records++;
		cr_expect_eq(buf[n - 1], '\n',
			     "a record without its newline: "
			     "'%s'",
			     buf);
		cr_expect_eq(strchr(buf, '\n'), buf + n - 1,
			     "a record of several lines: '%s'", buf);
	}
	close(sv[0]);
	cr_expect_eq(wait_exit(pid), 4);
	cr_expect_gt(records, 0);
}

/* --- kanel compare --seeds ------------------------------------------ */

#define DATA "/usr/share/datasets/fashion-mnist"

/* Every bad list is refused with status 2, naming what is wrong, before
 * a run starts or the output folder is made. */
Test(kanel, compare_refuses_bad_seed_lists)
{
	static const struct {
		const char *list, *why;
	} bad[] = {
		{ "", "--seeds: the list is empty" },
		{ "1,,2", "--seeds: an empty seed in '1,,2'" },
		{ "1,2,", "--seeds: an empty seed in '1,2,'" },
		{ "x", "--seeds: 'x' is not a whole number from 0 to " },
		{ "1,-2", "--seeds: '-2' is not a whole number" },
		{ "1.5", "--seeds: '1.5' is not a whole number" },
		{ "+1", "--seeds: '+1' is not a whole number" },
		{ "3,1,03", "--seeds: seed 3 is given twice" },
		{ "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17",
		  "--seeds: more than 16 seeds" },
		{ "99999999999999999999999", "--seeds: " },
	};
	char out[128];
	struct stat st;

	snprintf(out, sizeof(out), "%s/cmp", dir);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		expect_refusal(ARGS("compare", "--protocols", "bsp", "--seeds",
				    (char *)bad[i].list, "--out", out),
			       NULL, 2, bad[i].why);
	expect_refusal(
		ARGS("compare", "--protocols", "bsp", "--out", out, "--seeds"),
		NULL, 2, "--seeds needs a value");
	expect_refusal(ARGS("compare", "--protocols", "bsp", "--seed", "4",
			    "--seeds", "1,2", "--out", out),
		       NULL, 2, "--seed and --seeds: give one");
	expect_refusal(ARGS("compare", "--protocols", "bsp", "--seeds=1,2",
			    "--seed=4", "--out", out),
		       NULL, 2, "--seed=4 and --seeds: give one");
	cr_expect_neq(stat(out, &st), 0, "%s was made", out);
}

static void remove_tree(const char *path)
{
	char cmd[256];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path);
	cr_expect_eq(system(cmd), 0);
}

/* How many lines of @text start with @prefix; @first the first, if any. */
static int lines_starting(const char *text, const char *prefix,
			  const char **first)
{
	int n = 0;

	for (const char *l = text; *l;) {
		const char *nl = strchr(l, '\n');

		if (strncmp(l, prefix, strlen(prefix)) == 0 && !n++ && first)
			*first = l;
		if (!nl)
			break;
		l = nl + 1;
	}
	return n;
}

/* The length of the CSV field at @p. */
static size_t field_len(const char *p)
{
	return strcspn(p, ",\n");
}

/* The field under @key in @line of @csv, whose first line is the header
 * (fails the test where @key is not a column). */
static const char *field(const char *csv, const char *line, const char *key)
{
	static char buf[128];
	const char *h = csv;

	for (;;) {
		size_t n = field_len(h);

		if (n == strlen(key) && strncmp(h, key, n) == 0)
			break;
		cr_assert_eq(h[n], ',', "no column %s in %s", key, csv);
		h += n + 1;
		line += field_len(line);
		cr_assert_eq(*line, ',', "a short row: %s", csv);
		line++;
	}
	snprintf(buf, sizeof(buf), "%.*s", (int)field_len(line), line);
	return buf;
}

/*
 * Two seeds, one protocol, a sliver of an epoch: a run per seed, its
 * seed passed on (the summary says so) and in its files' names; the
 * table of medians with how many reached the target.  A target of 0 is
 * reached at the first evaluation and one of 1 never is, so the figures
 * checked do not depend on the machine.
 */
Test(kanel, compare_runs_once_per_seed)
{
	char out[128], path[192], *csv, *md, *json;
	const char *line = NULL;
	struct stat st;
	int rc;

	if (access(DATA "/train-images-idx3-ubyte.gz", R_OK))
		cr_skip_test("no %s (Debian package dataset-fashion-mnist)",
			     DATA);
	snprintf(out, sizeof(out), "%s/cmp", dir);
	rc = run(ARGS("compare", "--protocols", "bsp", "--seeds", "7,3",
		      "--workers", "1", "--model", "softmax", "--epochs",
		      "0.01", "--step-time", "0", "--target-accuracy", "0",
		      "--out", out),
		 NULL);
	assert_ran_ok(rc);
	snprintf(path, sizeof(path), "%s/run-bsp-none.json", out);
	cr_expect_neq(stat(path, &st), 0, "%s without a seed", path);
	snprintf(path, sizeof(path), "%s/run-bsp-none-seed3.csv", out);
	cr_expect_eq(stat(path, &st), 0, "no %s", path);
	json = slurp("cmp/run-bsp-none-seed7.json");
	cr_expect(strstr(json, "\"seed\": 7,"), "%s", json);
	free(json);
	csv = slurp("cmp/compare.csv");
	cr_expect(strstr(csv, ",figures_of,reached\n"), "%s", csv);
	cr_expect_eq(lines_starting(csv, "bsp,softmax,1,1,none,7,", NULL), 1,
		     "%s", csv);
	cr_expect_eq(lines_starting(csv, "bsp,softmax,1,1,none,3,", NULL), 1,
		     "%s", csv);
	cr_expect_eq(lines_starting(csv, "bsp,softmax,1,1,none,median,", NULL),
		     1, "%s", csv);
	cr_expect_eq(lines_starting(csv, "bsp,softmax,1,1,none,min,", NULL), 1,
		     "%s", csv);
	cr_expect_eq(lines_starting(csv, "bsp,softmax,1,1,none,max,", NULL), 1,
		     "%s", csv);
	free(csv);
	md = slurp("cmp/compare.md");
	cr_expect(strstr(md, "| reached |"), "%s", md);
	/* the time is the first evaluation's, a few ms on a loaded machine:
	 * its figure is not checked, only that both seeds reached it */
	cr_expect(strstr(md, "| bsp | none | "), "%s", md);
	cr_expect(strstr(md, ") | 2/2 | 1.00x | "), "%s", md);
	free(md);
	if (access("/usr/bin/gnuplot", X_OK) == 0) {
		char *gp = slurp("cmp/accuracy-vs-time-none.gp");

		cr_expect(strstr(gp, "-seed7.csv'") ||
				  strstr(gp, "-seed3.csv'"),
			  "%s", gp);
		cr_expect(strstr(gp, "title 'bsp (seed "), "%s", gp);
		free(gp);
	}

	/* a target no run reaches: no median time, no range, 0 of 1 */
	rc = run(ARGS("compare", "--protocols", "bsp", "--seeds", "5",
		      "--workers", "1", "--model", "softmax", "--epochs",
		      "0.01", "--step-time", "0", "--target-accuracy", "1",
		      "--plot", "svg", "--out", out),
		 NULL);
	cr_assert_eq(rc, 0);
	md = slurp("cmp/compare.md");
	cr_expect(strstr(md, "| bsp | none | not reached | 0/1 | - |"), "%s",
		  md);
	free(md);
	csv = slurp("cmp/compare.csv");
	cr_expect_eq(lines_starting(csv, "bsp,softmax,1,1,none,median,", &line),
		     1, "%s", csv);
	cr_assert_not_null(line);
	cr_expect_str_empty(field(csv, line, "time_to_target_s"), "%s", csv);
	cr_expect_str_eq(field(csv, line, "reached"), "0", "%s", csv);
	free(csv);
	remove_tree(out);
}

/*
 * Load: 256 synthetic workers on two servers start, do their steps and
 * finish, and the servers' figures count every push.  A sanitizer build
 * runs 64: 256 instrumented processes would want some 10 GB.
 */
#if defined(__SANITIZE_ADDRESS__)
#define LOAD_WORKERS "64"
#define LOAD_PUSHES  "\"contributions\":1280," /* 64 x 20, per server */
#else
#define LOAD_WORKERS "256"
#define LOAD_PUSHES  "\"contributions\":5120,"
#endif

Test(kanel, launch_runs_256_synthetic_workers, .timeout = 300)
{
	char *m;
	int rc;

	/* two tensors of one 4 KiB chunk each: one chunk per server */
	rc = run(ARGS("launch", "--workers", LOAD_WORKERS, "--servers", "2",
		      "--chunk-bytes", "4096", "--metrics",
		      (char *)in_dir("m.json"), "--", kanel(), "worker",
		      "--steps", "20", "--tensors", "2", "--tensor-bytes",
		      "4096"),
		 NULL);
	assert_ran_ok(rc);
	m = slurp("m.json");
	cr_expect(strstr(m, "{\"role\":\"server\",\"rank\":0,\"status\":"
			    "0," LOAD_PUSHES),
		  "%s", m);
	cr_expect(strstr(m, "{\"role\":\"server\",\"rank\":1,\"status\":"
			    "0," LOAD_PUSHES),
		  "%s", m);
	free(m);
}

/*
 * SIGTERM to kanel launch ends its job: every child is stopped and
 * reaped (none is left running with nobody to supervise it) and launch
 * exits 128 + 15.
 */
Test(kanel, launch_ends_its_job_on_sigterm)
{
	pid_t pid =
		start(ARGS("launch", "--workers", "2", "--", kanel(), "worker",
			   "--steps", "1000000", "--pause-ms", "10"),
		      NULL, -1);
	char *err;
	int gone = 0;

	sleep(2);
	cr_assert_eq(kill(pid, SIGTERM), 0);
	cr_assert_eq(wait_exit(pid), 128 + SIGTERM);
	/* launch's children share its process group */
	for (int i = 0; i < 100 && !gone; i++) {
		gone = kill(-pid, 0) && errno == ESRCH;
		if (!gone)
			usleep(50000);
	}
	cr_expect(gone, "processes of the job outlived kanel launch");
	if (!gone)
		kill(-pid, SIGKILL);
	err = slurp("stderr");
	cr_expect(strstr(err, "kanel launch: Terminated: ending the job"), "%s",
		  err);
	free(err);
}

/*
 * A server stopped (SIGSTOP) in a running job: the coordinator and the
 * workers name it, and launch's last line says the job failed and what
 * each process did (the server hung, nothing finished).  Before, the
 * coordinator ended the job with status 0 and no word about the server,
 * and launch waited for the stopped server for ever.
 */
Test(kanel, launch_names_a_hung_server_in_its_last_line)
{
	pid_t pid =
		start(ARGS("launch", "--workers", "2", "--heartbeat-timeout",
			   "1s", "--", kanel(), "worker", "--steps", "100000",
			   "--pause-ms", "20"),
		      NULL, -1);
	pid_t server = -1;
	char *err, *last;
	int st = -1;

	for (int i = 0; i < 100 && server < 0; i++) {
		usleep(50000);
		server = proc_child_running(pid, "server");
	}
	cr_assert_gt(server, 0, "no server");
	sleep(2); /* the job runs */
	cr_assert_eq(kill(server, SIGSTOP), 0);
	for (int i = 0; i < 600 && st < 0; i++) {
		if (waitpid(pid, &st, WNOHANG) != pid)
			st = -1;
		usleep(50000);
	}
	if (st < 0) {
		kill(-pid, SIGKILL);
		waitpid(pid, &st, 0);
	}
	err = slurp("stderr");
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1,
		  "launch did not end with status 1: %s", err);
	/* 3 timeouts, or a little more on a loaded machine (3.1 s seen
	 * under the sanitizers) */
	cr_expect_not_null(strstr(err, "coordinator: server 0 sent nothing "
				       "for 3."),
			   "%s", err);
	cr_expect_not_null(strstr(err, " s: treating it as hung"), "%s", err);
	cr_expect_not_null(strstr(err, "worker 0: coordinator: server 0 sent "
				       "nothing for"),
			   "%s", err);
	/* the last line */
	err[strlen(err) - 1] = '\0';
	last = strrchr(err, '\n');
	last = last ? last + 1 : err;
	for (const char *const *w =
		     (const char *const[]){ "kanel launch: ", "the job failed",
					    "killed): server 0;",
					    "finished: none", NULL };
	     *w; w++)
		cr_expect_not_null(strstr(last, *w), "%s", last);
	free(err);
}

/* kanel worker --pause-ms sleeps before every step; a bad value is named. */
Test(kanel, synthetic_worker_pauses_before_each_step)
{
	struct timespec t0, t1;
	char *err;
	double s;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	cr_assert_eq(run(ARGS("launch", "--workers", "1", "--", kanel(),
			      "worker", "--steps", "10", "--pause-ms", "150",
			      "--tensor-bytes", "4096"),
			 NULL),
		     0);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	s = (double)(t1.tv_sec - t0.tv_sec) +
	    (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
	/* ten sleeps of 150 ms at least, whatever else the job took */
	cr_expect_geq(s, 1.5, "%.2f s", s);

	cr_assert_eq(run(ARGS("worker", "--pause-ms", "-3"), NULL), 2);
	err = slurp("stderr");
	cr_expect(strstr(err, "--pause-ms -3: milliseconds, 0 to 3600000"),
		  "%s", err);
	free(err);
}

/* --checkpoint-every without a folder would do nothing: refused. */
Test(kanel, checkpoint_every_without_a_folder_is_refused)
{
	expect_refusal(ARGS("launch", "--workers", "1", "--checkpoint-every",
			    "5", "--", kanel(), "worker", "--steps", "1"),
		       ARGS("KANEL_SECRET=s"), 2,
		       "--checkpoint-every without a checkpoint folder");
}

/*
 * --checkpoint-dir naming a regular file, executable or not, ends the
 * job at its start as "Not a directory", whether launch keeps the job's
 * secret there or the servers check the folder (a secret given).
 */
Test(kanel, a_file_as_checkpoint_folder_is_not_a_directory)
{
	char *const with_secret[] = { "KANEL_SECRET=s", NULL };
	char *err;
	int fd, rc;

	fd = open(in_dir("tool"), O_WRONLY | O_CREAT | O_TRUNC, 0755);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, "#!/bin/sh\n", 10), 10);
	close(fd);
	for (int i = 0; i < 2; i++) {
		rc = run(ARGS("launch", "--workers", "1", "--checkpoint-dir",
			      (char *)in_dir("tool"), "--startup-timeout", "10",
			      "--", kanel(), "worker", "--steps", "2"),
			 i ? with_secret : NULL);
		err = slurp("stderr");
		cr_expect_neq(rc, 0, "%s", err);
		cr_expect(strstr(err, "Not a directory"), "%s", err);
		cr_expect_not(strstr(err, "Permission denied"), "%s", err);
		free(err);
	}
	unlink(in_dir("tool"));
}

/* A secret file at @name in the test's directory, mode 0600. */
static void make_secret(const char *name, const char *text)
{
	int fd = open(in_dir(name), O_WRONLY | O_CREAT | O_TRUNC, 0600);

	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

/* A one-worker momentum job under the secret in file @secret, with
 * kanel launch's options @..., its worker taking @steps steps: the exit
 * code. */
#define SECRET_JOB(secret, steps, ...)                                  \
	run(ARGS("launch", "--workers", "1", "--secret-file", secret,   \
		 __VA_ARGS__, "--optimizer", "momentum", "--", kanel(), \
		 "worker", "--steps", steps),                           \
	    NULL)

/*
 * Checkpoints written under one secret: a job under another finds none
 * of them (their seals do not check) and does not start; named with
 * --restore-secret-file, the old secret lets the same job restore them.
 */
Test(kanel, a_new_secret_restores_only_with_the_old_one_named)
{
	/* copies: in_dir's buffers turn over within one run() */
	char *a = strdup(in_dir("a.secret")), *b = strdup(in_dir("b.secret"));
	char *ck = strdup(in_dir("ck")), *err;

	cr_assert(a && b && ck);
	make_secret("a.secret", "the first job's secret");
	make_secret("b.secret", "the second job's secret");
	cr_assert_eq(SECRET_JOB(a, "5", "--checkpoint-dir", ck,
				"--checkpoint-every", "2"),
		     0);
	cr_expect_neq(
		SECRET_JOB(b, "2", "--resume", ck, "--startup-timeout", "10"),
		0);
	err = slurp("stderr");
	cr_expect(strstr(err, "its seal does not check under this job's "
			      "secret"),
		  "%s", err);
	free(err);
	cr_expect_eq(
		SECRET_JOB(b, "2", "--resume", ck, "--restore-secret-file", a),
		0);
	err = slurp("stderr");
	cr_expect(strstr(err, "restoring the job from its checkpoints of "
			      "version 4"),
		  "%s", err);
	free(err);
	unlink(a);
	unlink(b);
	remove_tree(ck);
	free(a);
	free(b);
	free(ck);
}
