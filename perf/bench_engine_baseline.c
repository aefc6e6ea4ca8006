/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_engine_baseline.c - bench_engine's baseline (bench_engine.h):
 * the transport alone, measured by bench_transport in its
 * --serve-stream mode, a co-process of the whole run.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_engine.h"
#include "launch.h"

/*
 * The transport alone: bench_transport in its --serve-stream mode, started
 * once for the whole run, with its two sides up all along.  A command a
 * sample on its stdin, one line of answer on its stdout (the protocol is
 * at the top of bench_transport.c); its stderr is ours.
 */
static int tp_in = -1, tp_out = -1; /* its stdin, its stdout */
static char tp_buf[256];	    /* what it wrote past the last line */
static size_t tp_len;
char tp_name[64]; /* the transport provider it measures */

/*
 * It stopped answering while we waited for @what: its exit status if it
 * comes within 5 s, and the run is over.
 */
static void __attribute__((noreturn)) tp_gone(const char *what)
{
	int st;

	fprintf(stderr, "bench_engine: %s closed its output before %s\n",
		tp_proc.name, what);
	if (kn__launch_wait(tp_proc.pid, kn__launch_now() + 5, &st) == 0)
		child_died(&tp_proc, st);
	fprintf(stderr, "bench_engine: %s (pid %d) is still running: killed\n",
		tp_proc.name, (int)tp_proc.pid);
	exit(1); /* cleanup() kills it */
}

/*
 * Its next line, without the newline, into @line of @cap bytes.  The wait
 * ends after WAIT_S + 5 s: its own waits end after WAIT_S, and it then says
 * why itself.
 */
static void tp_read(char *line, size_t cap, const char *what)
{
	double deadline = bench_now_ns() + (WAIT_S + 5) * 1e9;

	for (;;) {
		char *nl = memchr(tp_buf, '\n', tp_len);
		struct pollfd p = { .fd = tp_out, .events = POLLIN };
		double left = deadline - bench_now_ns();
		ssize_t n;

		if (nl) {
			*nl = 0;
			snprintf(line, cap, "%s", tp_buf);
			tp_len -= (size_t)(nl + 1 - tp_buf);
			memmove(tp_buf, nl + 1, tp_len);
			return;
		}
		if (tp_len == sizeof(tp_buf)) {
			fprintf(stderr,
				"bench_engine: %s: a line over %zu bytes "
				"(%s)\n",
				tp_proc.name, sizeof(tp_buf), what);
			exit(1);
		}
		if (left <= 0) {
			fprintf(stderr,
				"bench_engine: waited %d s for %s from %s\n",
				WAIT_S + 5, what, tp_proc.name);
			exit(1);
		}
		n = poll(&p, 1, (int)(left / 1e6) + 1);
		if (n < 0 && errno != EINTR)
			bench_check(-errno, "poll on bench_transport's output");
		if (n <= 0)
			continue;
		n = read(tp_out, tp_buf + tp_len, sizeof(tp_buf) - tp_len);
		if (n < 0 && errno != EINTR)
			bench_check(-errno, "reading bench_transport's output");
		if (n == 0)
			tp_gone(what);
		if (n > 0)
			tp_len += (size_t)n;
	}
}

/*
 * In its child, before the exec: the pipes' ends @arg (int[2]) become
 * its stdin and stdout (without close-on-exec), SIGPIPE as by default.
 */
static int tp_child_setup(void *arg)
{
	const int *fds = arg;

	if (dup2(fds[0], STDIN_FILENO) < 0 || dup2(fds[1], STDOUT_FILENO) < 0)
		return -errno;
	return sigpipe_default(NULL);
}

/*
 * Start it, regions sized for every size of the run, and wait for its
 * "ready PROVIDER": the two sides are connected then.
 */
void tp_start(void)
{
	char sizes[BENCH_MAX_LIST * 24] = "", line[256], *argv[5];
	int in[2], out[2], ret, used = 0;
	int fds[2]; /* its stdin and stdout, for tp_child_setup */
	const struct kn__launch_child lc = {
		.argv = argv,
		.setup = tp_child_setup,
		.arg = fds,
	};
	size_t len = 0;

	for (unsigned int i = 0; i < cfg.nsizes; i++)
		len += (size_t)snprintf(sizes + len, sizeof(sizes) - len,
					"%s%zu", i ? "," : "", cfg.sizes[i]);
	argv[0] = cfg.transport;
	argv[1] = "--serve-stream";
	argv[2] = "--stream-sizes";
	argv[3] = sizes;
	argv[4] = NULL;
	/* our ends stay out of every other child */
	if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC))
		bench_check(-errno, "pipe2");
	fds[0] = in[0];
	fds[1] = out[1];
	ret = kn__launch_spawn(&lc, &tp_proc.pid, NULL);
	close(in[0]);
	close(out[1]);
	if (ret) {
		tp_proc.pid = 0;
		fprintf(stderr,
			"bench_engine: cannot start %s --serve-stream: "
			"%s\n",
			cfg.transport, strerror(-ret));
		exit(1);
	}
	tp_in = in[1];
	tp_out = out[0];
	tp_read(line, sizeof(line), "the first line ('ready PROVIDER')");
	if (strncmp(line, "error ", 6) == 0) {
		fprintf(stderr, "bench_engine: %s: %s\n", tp_proc.name,
			line + 6);
		exit(1);
	}
	if (sscanf(line, "ready %63s%n", tp_name, &used) != 1 || line[used]) {
		fprintf(stderr,
			"bench_engine: %s said '%s', not 'ready PROVIDER'\n",
			tp_proc.name, line);
		exit(1);
	}
}

/*
 * Send it @cmd and return what its answer says: ns per message of the
 * stream it ran, of messages of @bytes.
 */
static double tp_command(const char *cmd, size_t bytes)
{
	char line[256], what[128], buf[128];
	unsigned long long b, msgs;
	size_t len, off = 0;
	double ns;
	int used = 0;

	len = (size_t)snprintf(buf, sizeof(buf), "%s\n", cmd);
	snprintf(what, sizeof(what), "the answer to '%s'", cmd);
	while (off < len) {
		/* SIGPIPE is ignored: a reader gone is EPIPE */
		ssize_t n = write(tp_in, buf + off, len - off);

		if (n < 0 && errno == EPIPE)
			tp_gone(what);
		if (n < 0 && errno != EINTR)
			bench_check(-errno, "writing to bench_transport");
		if (n > 0)
			off += (size_t)n;
	}
	tp_read(line, sizeof(line), what);
	if (sscanf(line, "ok %llu %llu %lf%n", &b, &msgs, &ns, &used) == 3 &&
	    !line[used] && b == bytes && msgs > 0 && ns > 0 && isfinite(ns))
		return ns / (double)msgs;
	if (strncmp(line, "error ", 6) == 0)
		fprintf(stderr, "bench_engine: %s, '%s': %s\n", tp_proc.name,
			cmd, line + 6);
	else
		fprintf(stderr,
			"bench_engine: %s answered '%s' to '%s', not 'ok "
			"%zu MESSAGES NS'\n",
			tp_proc.name, line, cmd, bytes);
	exit(1);
}

/*
 * A warm-up stream of @bytes, which sizes the stream samples of @bytes to
 * take about @ns (bench_transport does the sizing, as for its own stream
 * test).
 */
void stream_calibrate(size_t bytes, double ns)
{
	char cmd[64];

	snprintf(cmd, sizeof(cmd), "calibrate %zu %.0f", bytes, ns);
	tp_command(cmd, bytes);
}

/* One stream sample of @bytes: ns per message. */
double stream_sample(size_t bytes)
{
	char cmd[64];

	snprintf(cmd, sizeof(cmd), "stream %zu", bytes);
	return tp_command(cmd, bytes);
}

/*
 * EOF on its stdin ends it; it must exit 0 within WAIT_S (its sides' tear
 * down), or it is killed.
 */
void tp_stop(void)
{
	int st;

	close(tp_in);
	tp_in = -1;
	if (kn__launch_wait(tp_proc.pid, kn__launch_now() + WAIT_S, &st)) {
		fprintf(stderr,
			"bench_engine: %s (pid %d) did not end %d s after EOF "
			"on its input: killed\n",
			tp_proc.name, (int)tp_proc.pid, WAIT_S);
		exit(1); /* cleanup() kills it */
	}
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		child_died(&tp_proc, st);
	tp_proc.pid = 0;
	close(tp_out);
	tp_out = -1;
}
