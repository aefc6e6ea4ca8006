/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_engine.c - figures for the engine: the round time and throughput
 * of BSP push-pull over loopback TCP, next to the transport's own stream
 * bandwidth measured in the same run.
 *
 * For every (workers, servers, size) it starts a fresh job: a 32-byte
 * random secret in a 0600 file, a free port on 127.0.0.1, and a
 * coordinator and the servers as child processes of the `kanel` binary
 * (their output goes to a log file, shown when one of them dies), all
 * started, waited for and killed through launch/ (launch.h), as `kanel
 * launch` does.  The
 * workers are threads of this process, each with its own kn_worker, all
 * registering one fp32 tensor of the size under the same key.  A sample
 * is R rounds of kn_worker_step() by every worker at once (BSP keeps them
 * in lockstep); a round's time runs from the moment the last worker
 * finished the previous round to the moment the last worker finished
 * this one, and a sample is the median round of its R.  R is calibrated
 * so that a sample takes about 0.2 s.  gbps counts both directions of
 * every worker: 2 * bytes * workers / round time.
 *
 * The baseline is the transport alone: perf/bench_transport's stream test,
 * two threads with one tcp context each, side 0 streaming write_imms of
 * the same size into side 1 over 127.0.0.1; its gbps is bytes / time per
 * message.  This program sees kanel.h alone, so the baseline runs in
 * bench_transport --serve-stream, a co-process started once for the run
 * (from this program's folder, or --bench-transport) with its sides up
 * all along: a line on its stdin asks for one sample and a line on its
 * stdout gives the messages and the time (a warm-up per job sizes the
 * samples to about 0.1 or 0.2 s).  Engine and transport samples of a job
 * alternate, the order too, and the transport samples of all the jobs of
 * a size make that size's baseline, so that ratio_vs_transport (engine
 * gbps / transport gbps) compares the same stretch of time.  Every figure
 * is a median over repeats with min and max.  The parameters are checked
 * once per job against the SGD updates the rounds made.  Every wait has a
 * deadline (the co-process's answers included); a child that dies is
 * named.  It prints figures and judges nothing: it is not a test.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "kanel.h"
#include "launch.h"

#define MAX_REPS     5
#define WAIT_S	     30 /* deadline of every wait */
#define KIB	     ((size_t)1 << 10)
#define MIB	     ((size_t)1 << 20)
#define MIN_SIZE     (4 * KIB)
#define MAX_SIZE     (256 * MIB)
#define MAX_WORKERS  64
#define MAX_SERVERS  16
#define MAX_CHILDREN (1 + MAX_SERVERS)
#define KEY	     "bench"
#define LR	     0.001
#define SAMPLE_NS    0.2e9 /* time an engine sample should take */
#define CAL_ROUNDS   3	   /* the warm-up that sizes the engine's samples, */
#define CAL_NS	     50e6  /* or as many rounds as take this long */
#define MIN_ROUNDS   3
#define MAX_ROUNDS   1000
#define MAX_TENSORS  4096 /* of a model list */
#define MODEL_ALIGN  64	  /* bytes between a model's tensors */

static struct {
	bool quick, csv, stages;
	unsigned int reps;
	double tp_ns;	      /* time a transport sample should take */
	char kanel[4096];     /* the kanel binary */
	char transport[4096]; /* bench_transport, for the baseline */
	size_t chunk_bytes;   /* KANEL_CHUNK_BYTES */
	size_t fuse_bytes;    /* KANEL_FUSE_BYTES */
	size_t push_window;   /* KANEL_PUSH_WINDOW */
	size_t sizes[BENCH_MAX_LIST], workers[BENCH_MAX_LIST],
		servers[BENCH_MAX_LIST];
	unsigned int nsizes, nworkers, nservers;
	/* --model: its file, its tensors' element counts, their dtype */
	char model[4096], model_name[64];
	size_t counts[MAX_TENSORS];
	unsigned int ntensors;
	enum kn_dtype dtype;
	bool model_pairs; /* neither --workers nor --servers: 1w1s, 2w1s, 4w2s */
	/* --forward: a simulated backward and forward pass a round, at
	 * compute_gbps bytes of the model per ns backward (half forward);
	 * fifo: priorities in push order, as an engine without them */
	bool forward, fifo;
	double compute_gbps;
} cfg;

static double now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static void check(int ret, const char *call)
{
	if (ret < 0) {
		fprintf(stderr, "bench_engine: %s: %s\n", call, strerror(-ret));
		exit(1);
	}
}

static const char *size_name(size_t bytes, char *buf, size_t cap)
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

/* ---- the job's processes: coordinator and servers ---- */

struct child {
	pid_t pid; /* 0: reaped */
	char name[32];
	char log[300];
};

static struct child children[MAX_CHILDREN];
static unsigned int nchildren;
/* the baseline's co-process, for the whole run (below) */
static struct child tp_proc = { .name = "bench_transport --serve-stream" };
static char tmpdir[256], secret_path[300];

/* On any exit: no child outlives us, no secret stays behind. */
static void cleanup(void)
{
	if (tp_proc.pid > 0) {
		kn__launch_kill(tp_proc.pid);
		tp_proc.pid = 0;
	}
	for (unsigned int i = 0; i < nchildren; i++)
		if (children[i].pid > 0) {
			kn__launch_kill(children[i].pid);
			children[i].pid = 0;
		}
	for (unsigned int i = 0; i < nchildren; i++)
		unlink(children[i].log);
	nchildren = 0;
	if (secret_path[0])
		unlink(secret_path);
	if (tmpdir[0])
		rmdir(tmpdir);
}

/* The last lines of a child's log, to stderr. */
static void show_log(const struct child *c)
{
	char buf[2048];
	FILE *f = fopen(c->log, "r");
	size_t n;
	long end;

	if (!f) /* or no log: the co-process's stderr is ours */
		return;
	fseek(f, 0, SEEK_END);
	end = ftell(f);
	fseek(f, end > (long)sizeof(buf) - 1 ? end - (long)sizeof(buf) + 1 : 0,
	      SEEK_SET);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = 0;
	fclose(f);
	fprintf(stderr, "bench_engine: --- the end of %s's output (%s) ---\n%s",
		c->name, c->log, buf);
	if (n && buf[n - 1] != '\n')
		fputc('\n', stderr);
}

static void __attribute__((noreturn)) child_died(struct child *c, int st)
{
	char how[64];

	fprintf(stderr, "bench_engine: %s (pid %d) %s\n", c->name, (int)c->pid,
		kn__launch_strstatus(st, how, sizeof(how)));
	c->pid = 0;
	show_log(c);
	exit(1);
}

/* Every child still running?  One that is not ends the run. */
static void children_check(void)
{
	for (unsigned int i = 0; i < nchildren; i++) {
		struct child *c = &children[i];
		int st;

		if (c->pid > 0 && kn__launch_wait(c->pid, 0, &st) == 0)
			child_died(c, st);
	}
}

/* A 32-byte random secret in a 0600 file of a fresh temporary folder. */
static void make_secret(void)
{
	uint8_t key[32];
	int fd;

	snprintf(tmpdir, sizeof(tmpdir), "%s/bench-engine-XXXXXX",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(tmpdir)) {
		tmpdir[0] = 0;
		check(-errno, "mkdtemp");
	}
	snprintf(secret_path, sizeof(secret_path), "%s/secret", tmpdir);
	fd = open(secret_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		check(-errno, "creating the secret file");
	if (getentropy(key, sizeof(key)) ||
	    write(fd, key, sizeof(key)) != (ssize_t)sizeof(key))
		check(-EIO, "writing the secret file");
	memset(key, 0, sizeof(key));
	close(fd);
}

/* A free TCP port on 127.0.0.1 (the coordinator binds it right after). */
static int free_port(void)
{
	int port = kn__launch_free_port();

	check(port, "finding a free port");
	return port;
}

/*
 * Wait until something listens on TCP @port (the coordinator), as
 * /proc/net/tcp shows it, so that the workers' first connect does not
 * meet a closed port (they would retry, but log it).  Without
 * /proc/net/tcp the workers' retries do the waiting.
 */
static void wait_listening(int port)
{
	double deadline = now_ns() + WAIT_S * 1e9;
	char line[256], want[16];

	snprintf(want, sizeof(want), ":%04X ", port);
	for (;;) {
		FILE *f = fopen("/proc/net/tcp", "r");
		bool up = false;

		if (!f)
			return;
		while (!up && fgets(line, sizeof(line), f)) {
			/* "sl local_address rem_address st ...", st 0A: LISTEN */
			char local[64], remote[64], st[8];

			if (sscanf(line, "%*s %62s %63s %7s", local, remote,
				   st) == 3 &&
			    strstr(strcat(local, " "), want) &&
			    strcmp(st, "0A") == 0)
				up = true;
		}
		fclose(f);
		if (up)
			return;
		children_check();
		if (now_ns() > deadline) {
			fprintf(stderr,
				"bench_engine: waited %d s for the coordinator "
				"to listen on port %d\n",
				WAIT_S, port);
			show_log(&children[0]);
			exit(1);
		}
		usleep(2000);
	}
}

/*
 * In a child, before its exec: SIGPIPE's default action, which ours is
 * not (main() ignores it, for the co-process's pipe).
 */
static int sigpipe_default(void *arg)
{
	(void)arg;
	signal(SIGPIPE, SIG_DFL);
	return 0;
}

/* Start `kanel ROLE` with KANEL_ROLE and KANEL_RANK, output to its log. */
static void spawn(const char *role, unsigned int rank)
{
	struct child *c = &children[nchildren];
	char *argv[3] = { cfg.kanel, (char *)role, NULL };
	const struct kn__launch_child lc = {
		.argv = argv,
		.setup = sigpipe_default,
		.role = role,
		.rank = rank,
		.log = c->log,
		.log_stdout = true,
	};
	int ret;

	if (strcmp(role, "server") == 0)
		snprintf(c->name, sizeof(c->name), "server %u", rank);
	else
		snprintf(c->name, sizeof(c->name), "%s", role);
	snprintf(c->log, sizeof(c->log), "%s/%s%u.log", tmpdir, role, rank);
	ret = kn__launch_spawn(&lc, &c->pid, NULL);
	if (ret) {
		fprintf(stderr, "bench_engine: cannot start %s %s: %s\n",
			cfg.kanel, role, strerror(-ret));
		exit(1);
	}
	nchildren++;
}

/*
 * The job is over (every worker left, and the coordinator and servers
 * would end by themselves within a second): SIGTERM, reap, and SIGKILL
 * what is still there after 5 s.
 */
static void children_stop(void)
{
	double deadline = kn__launch_now() + 5;

	for (unsigned int i = 0; i < nchildren; i++)
		if (children[i].pid > 0)
			kill(children[i].pid, SIGTERM);
	for (unsigned int i = 0; i < nchildren; i++) {
		struct child *c = &children[i];

		if (c->pid > 0 &&
		    kn__launch_wait(c->pid, deadline, NULL) == -ETIMEDOUT) {
			fprintf(stderr,
				"bench_engine: %s (pid %d) ignored SIGTERM for "
				"5 s: killed\n",
				c->name, (int)c->pid);
			kn__launch_kill(c->pid);
		}
		c->pid = 0;
	}
	for (unsigned int i = 0; i < nchildren; i++)
		unlink(children[i].log);
	nchildren = 0;
}

/* ---- the baseline: bench_transport --serve-stream, a co-process ---- */

/*
 * The transport alone: bench_transport in its --serve-stream mode, started
 * once for the whole run, with its two sides up all along.  A command a
 * sample on its stdin, one line of answer on its stdout (the protocol is
 * at the top of bench_transport.c); its stderr is ours.
 */
static int tp_in = -1, tp_out = -1; /* its stdin, its stdout */
static char tp_buf[256];	    /* what it wrote past the last line */
static size_t tp_len;
static char tp_name[64]; /* the transport provider it measures */

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
	double deadline = now_ns() + (WAIT_S + 5) * 1e9;

	for (;;) {
		char *nl = memchr(tp_buf, '\n', tp_len);
		struct pollfd p = { .fd = tp_out, .events = POLLIN };
		double left = deadline - now_ns();
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
			check(-errno, "poll on bench_transport's output");
		if (n <= 0)
			continue;
		n = read(tp_out, tp_buf + tp_len, sizeof(tp_buf) - tp_len);
		if (n < 0 && errno != EINTR)
			check(-errno, "reading bench_transport's output");
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
static void tp_start(void)
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
		check(-errno, "pipe2");
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
			check(-errno, "writing to bench_transport");
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
static void stream_calibrate(size_t bytes, double ns)
{
	char cmd[64];

	snprintf(cmd, sizeof(cmd), "calibrate %zu %.0f", bytes, ns);
	tp_command(cmd, bytes);
}

/* One stream sample of @bytes: ns per message. */
static double stream_sample(size_t bytes)
{
	char cmd[64];

	snprintf(cmd, sizeof(cmd), "stream %zu", bytes);
	return tp_command(cmd, bytes);
}

/*
 * EOF on its stdin ends it; it must exit 0 within WAIT_S (its sides' tear
 * down), or it is killed.
 */
static void tp_stop(void)
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

/* ---- the workers: threads of this process ---- */

struct wk {
	unsigned int rank;
	pthread_t th;
	struct kn_worker *w;
	unsigned char *params, *grads; /* eng.elems of eng.dtype */
	double *ends;	   /* when each round of the current sample ended */
	double *firsts;	   /* --forward: each round's first layer back, ns */
	uint64_t *handles; /* --forward: a handle per tensor */
	atomic_ulong done; /* rounds of the current sample done */
	int err;	   /* the first failure, a negative errno */
	char what[96];	   /* what failed */
};

/* What main and the workers share, under lock. */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned long gen;    /* bumped by main for every sample */
	unsigned long rounds; /* of the sample of gen; 0: leave */
	unsigned int idle;    /* workers waiting for the next gen */
	unsigned int failed;
	double t0; /* when main released the sample */
	unsigned int n;
	/* the tensors: element counts, where each starts in a worker's
	 * buffers (elements, MODEL_ALIGN apart), all of one dtype */
	unsigned int ntensors;
	const size_t *counts;
	size_t offs[MAX_TENSORS], elems;
	enum kn_dtype dtype;
	struct wk wk[MAX_WORKERS];
} eng = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

static pthread_mutex_t create_lock = PTHREAD_MUTEX_INITIALIZER;

static void wk_fail(struct wk *k, int err, const char *what)
{
	pthread_mutex_lock(&eng.lock);
	k->err = err;
	snprintf(k->what, sizeof(k->what), "%s", what);
	eng.failed++;
	pthread_cond_broadcast(&eng.cond);
	pthread_mutex_unlock(&eng.lock);
}

/* Simulated compute until @deadline (now_ns); sleeps, so that the
 * engine's threads have the CPUs (spans too short to sleep are skipped,
 * the deadlines are absolute: no error adds up). */
static void compute_until(double deadline)
{
	struct timespec ts;

	if (deadline - now_ns() < 60e3)
		return;
	ts.tv_sec = (time_t)(deadline / 1e9);
	ts.tv_nsec = (long)(deadline - (double)ts.tv_sec * 1e9);
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) ==
	       EINTR)
		;
}

/*
 * --forward: one training step's exchange as a program would overlap
 * it: the backward pass makes each tensor's gradient in turn, last
 * layer first, and pushes it at once (pushpull); the next forward pass
 * takes the layers in order, each once its parameters are back and the
 * layer before it is done.  @first: when layer 0 was back, from the
 * step's start.
 */
static int forward_round(struct wk *k, double *first)
{
	size_t es = kn_dtype_size(eng.dtype);
	double start = now_ns(), t = start;
	char key[16];
	int ret = 0;

	for (unsigned int i = eng.ntensors; !ret && i-- > 0;) {
		t += (double)(eng.counts[i] * es) / cfg.compute_gbps;
		compute_until(t);
		snprintf(key, sizeof(key), "t%04u", i);
		ret = kn_worker_pushpull(k->w, key, &k->handles[i]);
	}
	for (unsigned int i = 0; !ret && i < eng.ntensors; i++) {
		ret = kn_worker_wait(k->w, k->handles[i], -1);
		if (i == 0)
			*first = now_ns() - start;
		t = fmax(t, now_ns()) +
		    (double)(eng.counts[i] * es) / (2 * cfg.compute_gbps);
		compute_until(t);
	}
	return ret;
}

/*
 * A worker's thread: join the job and start, then run the samples main
 * hands out, until it says leave.  Gradients are rank + 1 in every
 * element and never change; the parameters start at 0 (rank 0's).  One
 * tensor is KEY; a model's are t0000, t0001, ... in its list's order
 * (which is then the layout's key order too), and a round is one
 * kn_worker_step() of every tensor.
 */
static void *wk_main(void *arg)
{
	struct wk *k = arg;
	struct kn_worker_options opt = { .coordinator =
						 getenv("KANEL_COORDINATOR"),
					 .secret_file = secret_path,
					 .rank = (int)k->rank,
					 .timeout_ms = WAIT_S * 1000 };
	unsigned long gen = 0, rounds;
	int ret;

	/*
	 * One kn_worker_create() at a time: it parses its options with
	 * getopt_long(), whose state is global, and two at once fail now
	 * and then ("unknown option").  It returns once the coordinator has
	 * welcomed this worker, which does not wait for the others.
	 */
	pthread_mutex_lock(&create_lock);
	ret = kn_worker_create(&opt, &k->w);
	pthread_mutex_unlock(&create_lock);
	if (ret) {
		wk_fail(k, ret, "kn_worker_create");
		return NULL;
	}
	for (unsigned int t = 0; t < eng.ntensors; t++) {
		size_t off = eng.offs[t] * kn_dtype_size(eng.dtype);
		char key[16];

		snprintf(key, sizeof(key), "t%04u", t);
		ret = kn_worker_register(k->w, eng.ntensors > 1 ? key : KEY,
					 eng.dtype, eng.counts[t],
					 k->params + off, k->grads + off);
		/* fifo: the order the backward pass pushes them */
		if (!ret && cfg.forward && cfg.fifo)
			ret = kn_worker_set_priority(k->w, key,
						     (int)(eng.ntensors - t));
		if (ret) {
			wk_fail(k, ret, "kn_worker_register");
			return NULL;
		}
	}
	ret = kn_worker_start(k->w);
	if (ret) {
		wk_fail(k, ret, "kn_worker_start");
		return NULL;
	}
	for (;;) {
		pthread_mutex_lock(&eng.lock);
		eng.idle++;
		pthread_cond_broadcast(&eng.cond);
		while (eng.gen == gen)
			pthread_cond_wait(&eng.cond, &eng.lock);
		gen = eng.gen;
		rounds = eng.rounds;
		pthread_mutex_unlock(&eng.lock);
		if (!rounds)
			break;
		for (unsigned long i = 0; i < rounds; i++) {
			if (cfg.forward && eng.ntensors > 1)
				ret = forward_round(k, &k->firsts[i]);
			else
				ret = kn_worker_step(
					k->w, eng.ntensors > 1 ? NULL : KEY);
			if (ret) {
				char what[96];

				snprintf(what, sizeof(what),
					 "kn_worker_step, round %lu of %lu",
					 i + 1, rounds);
				wk_fail(k, ret, what);
				return NULL;
			}
			k->ends[i] = now_ns();
			atomic_store(&k->done, i + 1);
		}
	}
	kn_worker_destroy(k->w); /* the coordinator hears we left */
	k->w = NULL;
	pthread_mutex_lock(&eng.lock);
	eng.idle++;
	pthread_cond_broadcast(&eng.cond);
	pthread_mutex_unlock(&eng.lock);
	return NULL;
}

/*
 * Wait until every worker is idle (started, done with its sample, or
 * gone).  Every 50 ms: a failed worker or (with @watch) a dead child
 * ends the run, and so does @stall_s without a round finished anywhere.
 */
static void workers_wait(const char *what, double stall_s, bool watch)
{
	unsigned long last = 0, sum;
	double stall = now_ns() + stall_s * 1e9;
	struct timespec dl;

	pthread_mutex_lock(&eng.lock);
	while (eng.idle < eng.n && !eng.failed) {
		clock_gettime(CLOCK_REALTIME, &dl);
		dl.tv_nsec += 50000000;
		if (dl.tv_nsec >= 1000000000) {
			dl.tv_sec++;
			dl.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&eng.cond, &eng.lock, &dl);
		pthread_mutex_unlock(&eng.lock);
		if (watch)
			children_check();
		sum = 0;
		for (unsigned int i = 0; i < eng.n; i++)
			sum += atomic_load(&eng.wk[i].done);
		if (sum != last) {
			last = sum;
			stall = now_ns() + stall_s * 1e9;
		} else if (now_ns() > stall) {
			fprintf(stderr,
				"bench_engine: waited %.0f s for %s; rounds "
				"done:",
				stall_s, what);
			for (unsigned int i = 0; i < eng.n; i++)
				fprintf(stderr, " worker %u: %lu", i,
					atomic_load(&eng.wk[i].done));
			fputc('\n', stderr);
			exit(1);
		}
		pthread_mutex_lock(&eng.lock);
	}
	pthread_mutex_unlock(&eng.lock);
	for (unsigned int i = 0; eng.failed && i < eng.n; i++)
		if (eng.wk[i].err) {
			fprintf(stderr, "bench_engine: worker %u: %s: %s\n", i,
				eng.wk[i].what, strerror(-eng.wk[i].err));
			children_check();
			for (unsigned int c = 0; c < nchildren; c++)
				show_log(&children[c]);
			exit(1);
		}
}

/* Hand out the next generation: @rounds rounds, or 0 to leave. */
static void workers_go(unsigned long rounds)
{
	pthread_mutex_lock(&eng.lock);
	for (unsigned int i = 0; i < eng.n; i++)
		atomic_store(&eng.wk[i].done, 0);
	eng.idle = 0;
	eng.rounds = rounds;
	eng.t0 = now_ns();
	eng.gen++;
	pthread_cond_broadcast(&eng.cond);
	pthread_mutex_unlock(&eng.lock);
}

/*
 * One sample of @rounds rounds: the median round, in ns; in @elapsed, the
 * time from the release to the end of the last round.
 */
static double engine_sample(unsigned long rounds, double *round_ns,
			    double *elapsed, double *first)
{
	double prev;

	workers_go(rounds);
	workers_wait("the workers' rounds (no round finished)", WAIT_S + 5,
		     true);
	prev = eng.t0;
	for (unsigned long i = 0; i < rounds; i++) {
		double end = 0;

		for (unsigned int k = 0; k < eng.n; k++)
			end = fmax(end, eng.wk[k].ends[i]);
		round_ns[i] = end - prev;
		prev = end;
	}
	*elapsed = prev - eng.t0;
	if (first && cfg.forward) {
		/* the slowest worker's, round by round: its median */
		double *f = malloc(rounds * sizeof(*f));

		if (!f)
			check(-ENOMEM, "malloc");
		for (unsigned long i = 0; i < rounds; i++) {
			f[i] = 0;
			for (unsigned int k = 0; k < eng.n; k++)
				f[i] = fmax(f[i], eng.wk[k].firsts[i]);
		}
		*first = summarize(f, rounds).med;
		free(f);
	}
	return summarize(round_ns, rounds).med;
}

/*
 * After @rounds rounds of SGD with every worker's gradient rank + 1, the
 * servers' mean gradient is (n + 1) / 2 and every fp32 parameter
 * -LR * rounds * (n + 1) / 2.  fp16 and bf16 parameters round every
 * update, so their value is not predicted: every element of a tensor
 * must be the same finite negative number, on every worker the same
 * bits.  Returns how many workers disagree.
 */
static unsigned int params_check(unsigned long rounds)
{
	double want = -LR * (double)rounds * (eng.n + 1) / 2.0;
	double tol = 1e-3 * fabs(want) + 1e-6;
	size_t es = kn_dtype_size(eng.dtype);
	unsigned int bad = 0;

	for (unsigned int k = 0; k < eng.n; k++) {
		for (unsigned int t = 0; t < eng.ntensors; t++) {
			const unsigned char *p =
				eng.wk[k].params + eng.offs[t] * es;
			const float *f = (const float *)p;
			size_t i = 0;
			float v[1];

			if (eng.dtype == KN_DTYPE_FP32) {
				for (; i < eng.counts[t]; i++)
					if (!(fabs(f[i] - want) <= tol))
						break;
				v[0] = i < eng.counts[t] ? f[i] : 0;
			} else {
				check(kn_convert(v, KN_DTYPE_FP32, p, eng.dtype,
						 1),
				      "kn_convert");
				if (!(isfinite(v[0]) && v[0] < 0) ||
				    memcmp(p,
					   eng.wk[0].params + eng.offs[t] * es,
					   eng.counts[t] * es))
					i = 0;
				else
					for (i = 1; i < eng.counts[t]; i++)
						if (memcmp(p + i * es, p, es))
							break;
				if (i < eng.counts[t])
					check(kn_convert(v, KN_DTYPE_FP32,
							 p + i * es, eng.dtype,
							 1),
					      "kn_convert");
			}
			if (i < eng.counts[t]) {
				fprintf(stderr,
					"bench_engine: worker %u: element %zu "
					"of tensor %u is %g after %lu rounds, "
					"%g expected%s\n",
					k, i, t, (double)v[0], rounds, want,
					eng.dtype == KN_DTYPE_FP32
						? ""
						: " (or so: all elements the "
						  "same on every worker)");
				bad++;
				break;
			}
		}
	}
	return bad;
}

/* ---- measurement and output ---- */

struct result {
	size_t workers, servers, bytes;
	struct stats eng;   /* ns per round */
	struct stats first; /* --forward: ns until layer 0 is back */
	double gbps, tp_gbps, ratio;
};

static void emit(const struct result *r)
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

/* --stages: the job's figures file (KANEL_METRICS), one per job. */
static char metrics_path[320];

/*
 * Print what the workers and servers of the job wrote in their figures
 * lines: the median (and 90th percentile) of every stage, in us.
 */
static void stages_show(size_t workers, size_t servers, size_t bytes)
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

/* Set the job's variables, which the children and the workers read. */
static void job_env(size_t workers, size_t servers, int port)
{
	char v[64];

	snprintf(v, sizeof(v), "127.0.0.1:%d", port);
	setenv("KANEL_COORDINATOR", v, 1);
	snprintf(v, sizeof(v), "%zu", workers);
	setenv("KANEL_WORKERS", v, 1);
	snprintf(v, sizeof(v), "%zu", servers);
	setenv("KANEL_SERVERS", v, 1);
	setenv("KANEL_SECRET_FILE", secret_path, 1);
	setenv("KANEL_SYNC", "bsp", 1);
	setenv("KANEL_OPTIMIZER", "sgd", 1);
	snprintf(v, sizeof(v), "%g", LR);
	setenv("KANEL_LR", v, 1);
	snprintf(v, sizeof(v), "%zu", cfg.chunk_bytes);
	setenv("KANEL_CHUNK_BYTES", v, 1);
	snprintf(v, sizeof(v), "%zu", cfg.fuse_bytes);
	setenv("KANEL_FUSE_BYTES", v, 1);
	snprintf(v, sizeof(v), "%zu", cfg.push_window);
	setenv("KANEL_PUSH_WINDOW", v, 1);
	if (cfg.stages) {
		snprintf(metrics_path, sizeof(metrics_path), "%s/metrics-%d",
			 tmpdir, port);
		unlink(metrics_path);
		setenv("KANEL_METRICS", metrics_path, 1);
	}
}

/* Every element of the @bytes of @g (eng.dtype) @value. */
static void grads_fill(unsigned char *g, size_t bytes, float value)
{
	size_t es = kn_dtype_size(eng.dtype);
	unsigned char one[4];

	check(kn_convert(one, eng.dtype, &value, KN_DTYPE_FP32, 1),
	      "kn_convert");
	for (size_t off = 0; off + es <= bytes; off += es)
		memcpy(g + off, one, es);
}

/* The tensors of a job, @n of @counts elements, laid out in eng. */
static size_t job_tensors(unsigned int n, const size_t *counts,
			  enum kn_dtype dtype)
{
	size_t es = kn_dtype_size(dtype), per = MODEL_ALIGN / es, bytes = 0;

	eng.ntensors = n;
	eng.counts = counts;
	eng.dtype = dtype;
	eng.elems = 0;
	for (unsigned int t = 0; t < n; t++) {
		eng.offs[t] = eng.elems;
		eng.elems += (counts[t] + per - 1) / per * per;
		bytes += counts[t] * es;
	}
	return bytes;
}

/*
 * One job: @workers worker threads and @servers servers exchanging the
 * @ntensors tensors of @counts elements of @dtype.
 * Engine and transport samples alternate, the transport's streaming
 * messages of @tp_bytes; a warm-up of each sizes the samples.
 */
static void bench_job(size_t workers, size_t servers, unsigned int ntensors,
		      const size_t *counts, enum kn_dtype dtype,
		      size_t tp_bytes, struct result *r, double *tp_s)
{
	double eng_s[MAX_REPS], first_s[MAX_REPS], el, *round_ns, t0 = now_ns(),
								  t1;
	unsigned long rounds, total = CAL_ROUNDS;
	size_t bytes = job_tensors(ntensors, counts, dtype);
	size_t buf =
		(eng.elems * kn_dtype_size(eng.dtype) + 4095) / 4096 * 4096;
	char size[32];
	int port;

	fprintf(stderr,
		"bench_engine: %zu worker%s, %zu server%s, %s%s%s: ", workers,
		workers > 1 ? "s" : "", servers, servers > 1 ? "s" : "",
		ntensors > 1 ? cfg.model_name : "", ntensors > 1 ? " " : "",
		size_name(bytes, size, sizeof(size)));
	port = free_port();
	job_env(workers, servers, port);
	/* setenv is done: from here other threads may read the env */
	spawn("coordinator", 0);
	wait_listening(port);
	for (unsigned int s = 0; s < servers; s++)
		spawn("server", s);
	eng.n = (unsigned int)workers;
	eng.idle = 0;
	eng.failed = 0;
	eng.gen = 0;
	round_ns = malloc(MAX_ROUNDS * sizeof(*round_ns));
	if (!round_ns)
		check(-ENOMEM, "malloc");
	for (unsigned int i = 0; i < workers; i++) {
		struct wk *k = &eng.wk[i];

		*k = (struct wk){ .rank = i };
		k->params = aligned_alloc(4096, buf);
		k->grads = aligned_alloc(4096, buf);
		k->ends = malloc(MAX_ROUNDS * sizeof(*k->ends));
		k->firsts = calloc(MAX_ROUNDS, sizeof(*k->firsts));
		k->handles = calloc(ntensors, sizeof(*k->handles));
		if (!k->params || !k->grads || !k->ends || !k->firsts ||
		    !k->handles)
			check(-ENOMEM, "aligned_alloc");
		memset(k->params, 0, buf); /* 0 in every dtype */
		grads_fill(k->grads, buf, (float)(i + 1));
		check(-pthread_create(&k->th, NULL, wk_main, k),
		      "pthread_create");
	}
	workers_wait("the job to start (kn_worker_create and "
		     "kn_worker_start of every worker)",
		     WAIT_S + 10, true);
	t1 = now_ns();
	fprintf(stderr, "started in %.1f s; ", (t1 - t0) / 1e9);

	/*
	 * Warm-up: CAL_ROUNDS rounds, then, if they were over too soon to
	 * time a round well (the first rounds are the slowest), as many as
	 * take CAL_NS; the rounds of a sample follow from the last.
	 */
	rounds = CAL_ROUNDS;
	engine_sample(rounds, round_ns, &el, NULL);
	if (el < CAL_NS) {
		rounds = (unsigned long)fmin(
			fmax(CAL_NS * rounds / el, CAL_ROUNDS), MAX_ROUNDS);
		engine_sample(rounds, round_ns, &el, NULL);
		total += rounds;
	}
	rounds = (unsigned long)fmin(
		fmax(SAMPLE_NS * (double)rounds / el, MIN_ROUNDS), MAX_ROUNDS);
	stream_calibrate(tp_bytes, cfg.tp_ns);
	fprintf(stderr, "%u samples of %lu rounds ", cfg.reps, rounds);
	for (unsigned int s = 0; s < cfg.reps; s++) {
		for (int i = 0; i < 2; i++) {
			if ((s + (unsigned int)i) % 2 == 0) {
				eng_s[s] = engine_sample(rounds, round_ns, &el,
							 &first_s[s]);
				total += rounds;
			} else {
				tp_s[s] = stream_sample(tp_bytes);
			}
		}
		fputc('.', stderr);
	}
	fprintf(stderr, " %.1f s\n", (now_ns() - t1) / 1e9);
	if (params_check(total)) {
		fprintf(stderr, "bench_engine: wrong parameters: the figures "
				"of this job mean nothing\n");
		exit(1);
	}

	workers_go(0); /* leave: the job ends, and its processes with it */
	workers_wait("the workers to leave (kn_worker_destroy)", WAIT_S, false);
	for (unsigned int i = 0; i < workers; i++)
		check(-pthread_join(eng.wk[i].th, NULL), "pthread_join");
	children_stop();
	if (cfg.stages)
		stages_show(workers, servers, bytes);
	for (unsigned int i = 0; i < workers; i++) {
		free(eng.wk[i].params);
		free(eng.wk[i].grads);
		free(eng.wk[i].ends);
		free(eng.wk[i].firsts);
		free(eng.wk[i].handles);
	}
	free(round_ns);

	*r = (struct result){ .workers = workers,
			      .servers = servers,
			      .bytes = bytes,
			      .eng = summarize(eng_s, cfg.reps) };
	if (cfg.forward && ntensors > 1)
		r->first = summarize(first_s, cfg.reps);
	r->gbps = 2.0 * (double)bytes * (double)workers / r->eng.med;
}

/*
 * Every job of one size, then their rows.  The transport samples of all
 * these jobs make one baseline for the size: the median of many samples
 * taken in the same stretch of time, which one job's few would not be.
 * Returns the ratio of 1 worker and 1 server (NAN if not measured).
 */
static double bench_size(size_t bytes)
{
	unsigned int njobs = cfg.nworkers * cfg.nservers, n = 0;
	struct result *r = calloc(njobs, sizeof(*r));
	double *tp_s = calloc((size_t)njobs * cfg.reps, sizeof(*tp_s));
	double tp_gbps, ratio1 = NAN;
	size_t count[1] = { bytes / sizeof(float) };
	struct stats tp;
	char size[32];

	if (!r || !tp_s)
		check(-ENOMEM, "calloc");
	for (unsigned int v = 0; v < cfg.nservers; v++)
		for (unsigned int w = 0; w < cfg.nworkers; w++, n++)
			bench_job(cfg.workers[w], cfg.servers[v], 1, count,
				  KN_DTYPE_FP32, bytes, &r[n],
				  tp_s + (size_t)n * cfg.reps);
	tp = summarize(tp_s, (size_t)njobs * cfg.reps);
	tp_gbps = (double)bytes / tp.med;
	fprintf(cfg.csv ? stderr : stdout,
		"# transport stream of %s: median %.3f GB/s, min %.3f, max "
		"%.3f (%u samples)\n",
		size_name(bytes, size, sizeof(size)), tp_gbps,
		(double)bytes / tp.max, (double)bytes / tp.min,
		njobs * cfg.reps);
	for (unsigned int i = 0; i < njobs; i++) {
		r[i].tp_gbps = tp_gbps;
		r[i].ratio = r[i].gbps / tp_gbps;
		emit(&r[i]);
		if (r[i].workers == 1 && r[i].servers == 1)
			ratio1 = r[i].ratio;
	}
	free(tp_s);
	free(r);
	return ratio1;
}

/* ---- --model: a real network's list of tensors ---- */

/*
 * Read the model list @path: one tensor a line, its element count first
 * (a name may follow); '#' starts a comment, blank lines are skipped.
 */
static void model_load(const char *path)
{
	FILE *f = fopen(path, "r");
	char line[512];
	unsigned int no = 0;

	if (!f) {
		fprintf(stderr, "bench_engine: --model %s: %s\n", path,
			strerror(errno));
		exit(2);
	}
	while (fgets(line, sizeof(line), f)) {
		char *p = line, *end;
		unsigned long long n;

		no++;
		p[strcspn(p, "#\n")] = 0;
		p += strspn(p, " \t");
		if (!*p)
			continue;
		errno = 0;
		n = strtoull(p, &end, 10);
		if (*p < '0' || *p > '9' || errno || !n || n > (1ull << 34) ||
		    (*end && *end != ' ' && *end != '\t')) {
			fprintf(stderr,
				"bench_engine: %s:%u: not an element count "
				"(1 to 2^34) at the start of the line\n",
				path, no);
			exit(2);
		}
		if (cfg.ntensors == MAX_TENSORS) {
			fprintf(stderr,
				"bench_engine: %s: more than %d tensors\n",
				path, MAX_TENSORS);
			exit(2);
		}
		cfg.counts[cfg.ntensors++] = (size_t)n;
	}
	fclose(f);
	if (cfg.ntensors < 2) {
		fprintf(stderr,
			"bench_engine: %s: %u tensor%s; a model has 2 or "
			"more (one tensor: --sizes)\n",
			path, cfg.ntensors, cfg.ntensors == 1 ? "" : "s");
		exit(2);
	}
}

static void emit_model(const struct result *m, const struct result *one)
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
static void emit_forward(const struct result *m, size_t bytes)
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
 * The model's jobs: for every (workers, servers), the model's tensors,
 * then one tensor of the same bytes, each a job of its own.  Every
 * transport sample streams messages of the chunk size (the engine's
 * write unit for every tensor as large), or of the model's bytes if
 * less, and all of them make one baseline.
 */
static void bench_model(const size_t (*jobs)[2], unsigned int njobs)
{
	size_t es = kn_dtype_size(cfg.dtype), total[1] = { 0 }, tp_bytes;
	struct result *r = calloc((size_t)njobs * 2, sizeof(*r));
	double *tp_s = calloc((size_t)njobs * 2 * cfg.reps, sizeof(*tp_s));
	double tp_gbps;
	struct stats tp;
	char size[32];

	if (!r || !tp_s)
		check(-ENOMEM, "calloc");
	for (unsigned int t = 0; t < cfg.ntensors; t++)
		total[0] += cfg.counts[t];
	tp_bytes = total[0] * es < cfg.chunk_bytes ? total[0] * es
						   : cfg.chunk_bytes;
	for (unsigned int j = 0; j < njobs; j++) {
		bench_job(jobs[j][0], jobs[j][1], cfg.ntensors, cfg.counts,
			  cfg.dtype, tp_bytes, &r[2 * j],
			  tp_s + (size_t)2 * j * cfg.reps);
		if (cfg.forward) {
			emit_forward(&r[2 * j], total[0] * es);
			continue;
		}
		bench_job(jobs[j][0], jobs[j][1], 1, total, cfg.dtype, tp_bytes,
			  &r[2 * j + 1], tp_s + (size_t)(2 * j + 1) * cfg.reps);
	}
	if (cfg.forward) {
		free(tp_s);
		free(r);
		return;
	}
	tp = summarize(tp_s, (size_t)njobs * 2 * cfg.reps);
	tp_gbps = (double)tp_bytes / tp.med;
	fprintf(cfg.csv ? stderr : stdout,
		"# transport stream of %s messages: median %.3f GB/s, min "
		"%.3f, max %.3f (%u samples)\n",
		size_name(tp_bytes, size, sizeof(size)), tp_gbps,
		(double)tp_bytes / tp.max, (double)tp_bytes / tp.min,
		njobs * 2 * cfg.reps);
	for (unsigned int j = 0; j < njobs; j++) {
		r[2 * j].tp_gbps = tp_gbps;
		r[2 * j].ratio = r[2 * j].gbps / tp_gbps;
		emit_model(&r[2 * j], &r[2 * j + 1]);
	}
	free(tp_s);
	free(r);
}

static void usage(void)
{
	printf("usage: bench_engine [options]\n"
	       "  --quick             3 repeats; workers 1,2,4, servers 1,2,\n"
	       "                      sizes 64K,1M,16M unless given\n"
	       "  --csv               CSV on stdout, other text on stderr\n"
	       "  --stages            after each job, where its time went: the "
	       "median and\n"
	       "                      90th percentile of every stage the "
	       "workers and the\n"
	       "                      servers measured (their --metrics "
	       "lines)\n"
	       "  --workers LIST      worker threads, e.g. 1,2,4,8 (the "
	       "default)\n"
	       "  --servers LIST      server processes, e.g. 1,2 (the "
	       "default)\n"
	       "  --sizes LIST        tensor bytes, e.g. 4K,64K,1M,16M,64M "
	       "(the default)\n"
	       "  --chunk-bytes N     KANEL_CHUNK_BYTES of the jobs (default "
	       "512K)\n"
	       "  --fuse-bytes N      KANEL_FUSE_BYTES of the jobs: tensors "
	       "below N are\n"
	       "                      fused (default 64K; 0: none)\n"
	       "  --push-window N     KANEL_PUSH_WINDOW of the jobs (default "
	       "4M; 0: no limit)\n"
	       "  --forward           with --model: a round is a simulated "
	       "training step\n"
	       "                      (backward pass pushing each gradient, "
	       "forward pass\n"
	       "                      waiting for each layer); reports the "
	       "time until\n"
	       "                      layer 0 is back\n"
	       "  --order fifo|priority  --forward: priorities in push "
	       "order, or the\n"
	       "                      registration order (the default)\n"
	       "  --compute-gbps G    --forward: backward pass speed, GB of "
	       "the model\n"
	       "                      per second (default 8; forward: 2G)\n"
	       "  --model NAME|FILE   a network's tensors instead of --sizes: "
	       "resnet50,\n"
	       "                      bert-base, vgg16 (perf/models/) or a "
	       "FILE with one\n"
	       "                      element count a line; jobs 1w1s, 2w1s, "
	       "4w2s unless\n"
	       "                      --workers or --servers are given\n"
	       "  --dtype TYPE        the model's dtype: fp32 (the default), "
	       "fp16, bf16\n"
	       "  --kanel PATH        the kanel binary (default: "
	       "../tools/kanel from\n"
	       "                      this program's folder)\n"
	       "  --bench-transport PATH\n"
	       "                      bench_transport, which measures the "
	       "baseline (default:\n"
	       "                      the one in this program's folder)\n"
	       "Sizes may end in K, M or G (binary), from 4 KiB to %zu MiB, "
	       "multiples of 4.\n",
	       MAX_SIZE / MIB);
}

/*
 * @rel from this program's own folder (the build tree's perf/) into @path
 * of 4096 bytes, unless an option set it.
 */
static void default_path(char *path, const char *rel)
{
	char self[4096];
	ssize_t n;

	if (path[0])
		return;
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		check(-errno, "readlink /proc/self/exe");
	self[n] = 0;
	snprintf(path, 4096, "%s/%s", dirname(self), rel);
	if (realpath(path, self))
		snprintf(path, 4096, "%s", self);
}

/* A program we start, @option to say where, must be there. */
static void need_program(const char *path, const char *what, const char *option)
{
	if (access(path, X_OK) == 0)
		return;
	fprintf(stderr,
		"bench_engine: no %s at %s (%s); build it (ninja -C BUILD-DIR) "
		"or pass --%s PATH\n",
		what, path, strerror(errno), option);
	exit(2);
}

/* 0, or one size up to @max (the list parser takes sizes from 1). */
static size_t zero_or_size(const char *option, char *arg, size_t max,
			   const char *max_name)
{
	size_t v[BENCH_MAX_LIST];
	char why[64];

	if (!strcmp(arg, "0"))
		return 0;
	if (parse_list(option, arg, NULL, 1, max, true, v) != 1) {
		snprintf(why, sizeof(why), "one size, 0 to %s", max_name);
		bad_value(option, arg, why);
	}
	return v[0];
}

static void parse_args(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "quick", no_argument, NULL, 'q' },
		{ "stages", no_argument, NULL, 'g' },
		{ "csv", no_argument, NULL, 'c' },
		{ "workers", required_argument, NULL, 'w' },
		{ "servers", required_argument, NULL, 's' },
		{ "sizes", required_argument, NULL, 'S' },
		{ "chunk-bytes", required_argument, NULL, 'C' },
		{ "fuse-bytes", required_argument, NULL, 'F' },
		{ "push-window", required_argument, NULL, 'W' },
		{ "forward", no_argument, NULL, 'f' },
		{ "order", required_argument, NULL, 'o' },
		{ "compute-gbps", required_argument, NULL, 'G' },
		{ "kanel", required_argument, NULL, 'k' },
		{ "bench-transport", required_argument, NULL, 'b' },
		{ "model", required_argument, NULL, 'm' },
		{ "dtype", required_argument, NULL, 'd' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static const size_t def_sizes[] = { 4 * KIB, 64 * KIB, MIB, 16 * MIB,
					    64 * MIB };
	static const size_t quick_sizes[] = { 64 * KIB, MIB, 16 * MIB };
	static const size_t def_workers[] = { 1, 2, 4, 8 };
	static const size_t def_servers[] = { 1, 2 };
	size_t chunk[BENCH_MAX_LIST];
	int c;

	cfg.chunk_bytes = 512 * KIB;
	cfg.fuse_bytes = 64 * KIB;
	cfg.push_window = 4 * MIB;
	cfg.compute_gbps = 8;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'q':
			cfg.quick = true;
			break;
		case 'g':
			cfg.stages = true;
			break;
		case 'c':
			cfg.csv = true;
			break;
		case 'w':
			cfg.nworkers =
				parse_list("workers", optarg, NULL, 1,
					   MAX_WORKERS, false, cfg.workers);
			break;
		case 's':
			cfg.nservers =
				parse_list("servers", optarg, NULL, 1,
					   MAX_SERVERS, false, cfg.servers);
			break;
		case 'S':
			cfg.nsizes = parse_list("sizes", optarg, NULL, MIN_SIZE,
						MAX_SIZE, true, cfg.sizes);
			for (unsigned int i = 0; i < cfg.nsizes; i++)
				if (cfg.sizes[i] % 4)
					bad_value("sizes", optarg,
						  "fp32: a multiple of 4");
			break;
		case 'C':
			if (parse_list("chunk-bytes", optarg, NULL, 4 * KIB,
				       1024 * MIB, true, chunk) != 1 ||
			    chunk[0] % 4)
				bad_value("chunk-bytes", optarg,
					  "one size, a multiple of 4");
			cfg.chunk_bytes = chunk[0];
			break;
		case 'f':
			cfg.forward = true;
			break;
		case 'o':
			if (strcmp(optarg, "fifo") &&
			    strcmp(optarg, "priority"))
				bad_value("order", optarg, "fifo or priority");
			cfg.fifo = !strcmp(optarg, "fifo");
			break;
		case 'G': {
			char *end;

			cfg.compute_gbps = strtod(optarg, &end);
			if (*end || !(cfg.compute_gbps > 0) ||
			    !isfinite(cfg.compute_gbps))
				bad_value("compute-gbps", optarg,
					  "a number above 0");
			break;
		}
		case 'W':
			cfg.push_window = zero_or_size("push-window", optarg,
						       1024 * MIB, "1024M");
			break;
		case 'F':
			cfg.fuse_bytes =
				zero_or_size("fuse-bytes", optarg, MIB, "1M");
			break;
		case 'k':
			snprintf(cfg.kanel, sizeof(cfg.kanel), "%s", optarg);
			break;
		case 'b':
			snprintf(cfg.transport, sizeof(cfg.transport), "%s",
				 optarg);
			break;
		case 'm':
			if (strchr(optarg, '/'))
				snprintf(cfg.model, sizeof(cfg.model), "%s",
					 optarg);
			else
				snprintf(cfg.model, sizeof(cfg.model),
					 "%s/%s.txt", KN_MODELS_DIR, optarg);
			snprintf(cfg.model_name, sizeof(cfg.model_name), "%s",
				 basename(optarg));
			cfg.model_name[strcspn(cfg.model_name, ".")] = 0;
			break;
		case 'd':
			cfg.dtype = (enum kn_dtype)0;
			while (kn_dtype_name(cfg.dtype) &&
			       strcmp(kn_dtype_name(cfg.dtype), optarg))
				cfg.dtype++;
			if (!kn_dtype_name(cfg.dtype))
				bad_value("dtype", optarg,
					  "fp32, fp16 or bf16");
			break;
		case 'h':
			usage();
			exit(0);
		default:
			fprintf(stderr, "try 'bench_engine --help'\n");
			exit(2);
		}
	}
	if (optind < argc) {
		fprintf(stderr, "bench_engine: unexpected argument '%s'\n",
			argv[optind]);
		exit(2);
	}
	default_path(cfg.kanel, "../tools/kanel");
	need_program(cfg.kanel, "kanel binary", "kanel");
	default_path(cfg.transport, "bench_transport");
	need_program(cfg.transport, "bench_transport", "bench-transport");
	if (cfg.model[0] && cfg.nsizes)
		bad_value("model", cfg.model, "--sizes is for one tensor");
	if (cfg.forward && !cfg.model[0])
		bad_value("forward", "", "a model's step: give --model");
	if (cfg.model[0])
		model_load(cfg.model);
	if (!cfg.nsizes && cfg.quick) {
		cfg.nsizes = 3;
		memcpy(cfg.sizes, quick_sizes, sizeof(quick_sizes));
	} else if (!cfg.nsizes) {
		cfg.nsizes = 5;
		memcpy(cfg.sizes, def_sizes, sizeof(def_sizes));
	}
	cfg.model_pairs = cfg.model[0] && !cfg.nworkers && !cfg.nservers;
	if (!cfg.nworkers) {
		cfg.nworkers = cfg.quick ? 3 : 4;
		memcpy(cfg.workers, def_workers,
		       cfg.nworkers * sizeof(def_workers[0]));
	}
	if (!cfg.nservers) {
		cfg.nservers = 2;
		memcpy(cfg.servers, def_servers, sizeof(def_servers));
	}
	cfg.reps = cfg.quick ? 3 : MAX_REPS;
	/* many jobs' samples make a size's baseline: each may be short */
	cfg.tp_ns = cfg.quick ? 0.1e9 : 0.2e9;
}

int main(int argc, char **argv)
{
	double load[1], target = NAN;
	char chunk[32], fuse[32];
	FILE *f;

	parse_args(argc, argv);
	/* the workers pass --role and --rank; the children get their own */
	unsetenv("KANEL_ROLE");
	unsetenv("KANEL_RANK");
	make_secret();
	atexit(cleanup);
	/* a co-process gone makes our writes to it EPIPE, not our death */
	signal(SIGPIPE, SIG_IGN);
	tp_start();

	f = cfg.csv ? stderr : stdout;
	if (cfg.model[0])
		fprintf(f,
			"# engine: BSP push-pull of model %s (%s): %u %s "
			"tensors, one kn_worker_step() of all a round, sgd, "
			"chunks of %s, fused below %s, over tcp on 127.0.0.1; "
			"workers: threads "
			"of this process; coordinator and servers: %s; "
			"baseline: transport provider %s, write_imm stream; "
			"%u repeats\n",
			cfg.model_name, cfg.model, cfg.ntensors,
			kn_dtype_name(cfg.dtype),
			size_name(cfg.chunk_bytes, chunk, sizeof(chunk)),
			cfg.fuse_bytes
				? size_name(cfg.fuse_bytes, fuse, sizeof(fuse))
				: "0 (none)",
			cfg.kanel, tp_name, cfg.reps);
	else
		fprintf(f,
			"# engine: BSP push-pull of one fp32 tensor, sgd, "
			"chunks of %s, over tcp on 127.0.0.1; workers: "
			"threads of this process; coordinator and servers: "
			"%s; baseline: transport provider %s, write_imm "
			"stream; %u repeats\n",
			size_name(cfg.chunk_bytes, chunk, sizeof(chunk)),
			cfg.kanel, tp_name, cfg.reps);
	if (getloadavg(load, 1) == 1)
		fprintf(f,
			"# %ld CPUs, load average %.2f: jobs with more "
			"processes and threads than CPUs share them\n",
			sysconf(_SC_NPROCESSORS_ONLN), load[0]);
	fprintf(f, "# gbps = 2 * bytes * workers / median round time (both "
		   "directions, all workers); ratio = gbps / transport "
		   "stream gbps\n");
	if (cfg.model[0]) {
		static const size_t pairs[][2] = { { 1, 1 },
						   { 2, 1 },
						   { 4, 2 } };
		size_t jobs[BENCH_MAX_LIST * BENCH_MAX_LIST][2];
		unsigned int njobs = 0;

		if (cfg.model_pairs) {
			memcpy(jobs, pairs, sizeof(pairs));
			njobs = 3;
		}
		for (unsigned int v = 0; !cfg.model_pairs && v < cfg.nservers;
		     v++)
			for (unsigned int w = 0; w < cfg.nworkers; w++) {
				jobs[njobs][0] = cfg.workers[w];
				jobs[njobs++][1] = cfg.servers[v];
			}
		if (cfg.forward) {
			fprintf(f,
				"# --forward: a round is a training step: a "
				"backward pass (%.3g GB/s of the model's "
				"bytes), each gradient pushed (pushpull) as it "
				"is made, last layer first, then a forward "
				"pass (twice as fast), each layer once its "
				"parameters are back; order %s\n",
				cfg.compute_gbps,
				cfg.fifo ? "fifo (priorities in push order)"
					 : "priority (registration order)");
			fprintf(f, "# step = one step; first = until layer "
				   "0's parameters are back (slowest "
				   "worker); compute = the passes alone; "
				   "window in KiB\n");
			if (cfg.csv)
				printf("model,dtype,workers,servers,tensors,"
				       "order,push_window,step_us,first_us,"
				       "compute_us,step_vs_compute\n");
			else
				printf("%-9s %5s %7s %7s %7s %8s %9s %10s %10s "
				       "%10s %10s %8s\n",
				       "model", "dtype", "workers", "servers",
				       "tensors", "order", "window", "step_ms",
				       "min_ms", "first_ms", "compute_ms",
				       "vs_comp");
			fflush(stdout);
			bench_model((const size_t(*)[2])jobs, njobs);
			tp_stop();
			return 0;
		}
		fprintf(f, "# step = every tensor pushed and pulled once; "
			   "single = one tensor of the model's bytes, its own "
			   "job; vs_single = step / single\n");
		if (cfg.csv)
			printf("model,dtype,workers,servers,tensors,bytes,"
			       "median_us,gbps,ratio_vs_transport,single_us,"
			       "vs_single\n");
		else
			printf("%-9s %5s %7s %7s %7s %8s %10s %10s %10s %7s "
			       "%7s %6s %10s %6s\n",
			       "model", "dtype", "workers", "servers",
			       "tensors", "MiB", "step_ms", "min_ms", "max_ms",
			       "GB/s", "tp_GB/s", "ratio", "single_ms", "vs_1");
		fflush(stdout);
		bench_model((const size_t(*)[2])jobs, njobs);
		tp_stop();
		return 0;
	}
	if (cfg.csv)
		printf("workers,servers,bytes,median_us,gbps,"
		       "ratio_vs_transport\n");
	else
		printf("%7s %7s %6s %11s %11s %11s %8s %8s %6s\n", "workers",
		       "servers", "size", "median_us", "min_us", "max_us",
		       "GB/s", "tp_GB/s", "ratio");
	fflush(stdout);
	for (unsigned int s = 0; s < cfg.nsizes; s++) {
		double ratio1 = bench_size(cfg.sizes[s]);

		if (cfg.sizes[s] == 16 * MIB)
			target = ratio1;
	}
	tp_stop();

	if (isnan(target))
		fprintf(f, "# target 1w1s@16MiB: not measured (it needs "
			   "workers 1, servers 1 and size 16M)\n");
	else
		fprintf(f, "# target 1w1s@16MiB: ratio %.3f (>= 0.8 wanted)\n",
			target);
	return 0;
}
