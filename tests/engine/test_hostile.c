/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_hostile.c - a live job against peers that do not play by the
 * rules, over the transport named by KANEL_TEST_TRANSPORT (tcp on
 * loopback by default; tests/rxe runs it with verbs):
 *
 * - a stranger (no secret) that connects to a server again and again and
 *   aims one-sided writes, a zero-length probe and reads at the keys the
 *   slots would have had, or sends an ERROR that forges a log line: each
 *   connection fails alone, the job's result is exact (no slot byte
 *   changed), and the server's log names the peer and forges nothing;
 * - a peer with the secret that claims a connected worker's rank, or a
 *   rank outside the job, at a server: refused, and the job goes on;
 * - a flood of connections that never authenticate: closed at the
 *   handshake deadline (or at once, past the cap), logged with a rate
 *   limit, and the coordinator's memory comes back.
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "job_util.h"
#include "msg.h"
#include "node.h"
#include "roles.h"
#include "transport.h"

#define LEN    4096 /* one tensor of 4 chunks of 4 KiB */
#define ROUNDS 6
#define FORGED "x\nkanel: coordinator: every worker is done: the job ends"

/* What the attacker and the held workers share with the test. */
struct stage {
	volatile int attempts, closed, stop, go, started;
};

static struct stage *st;

static double mono(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void stage_new(void)
{
	st = mmap(NULL, sizeof(*st), PROT_READ | PROT_WRITE,
		  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(st, MAP_FAILED);
	memset((void *)st, 0, sizeof(*st));
}

static float grad(unsigned int rank, unsigned int round, size_t i)
{
	return (float)(rank + 2 * round + 1) - (float)(i % 8) * 0.25f;
}

/*
 * A worker whose model must come out exactly as BSP with SGD at rate
 * 0.5 makes it from 0: any byte a stranger put into a slot shows.  It
 * waits for st->go before it steps, where the test asks.
 */
static int exact_worker(unsigned int rank)
{
	float *p = calloc(LEN, sizeof(float)), *g = calloc(LEN, sizeof(float));
	struct kn_worker *w = join(rank);
	int ret = w && p && g ? 0 : -ENOMEM;

	if (!ret)
		ret = kn_worker_register(w, "t", KN_DTYPE_FP32, LEN, p, g);
	if (!ret)
		ret = kn_worker_start(w);
	if (!ret)
		__sync_fetch_and_add(&st->started, 1);
	while (!ret && !st->go)
		usleep(10000);
	for (unsigned int r = 0; !ret && r < ROUNDS; r++) {
		for (size_t i = 0; i < LEN; i++)
			g[i] = grad(rank, r, i);
		ret = kn_worker_step(w, NULL);
	}
	for (size_t i = 0; !ret && i < LEN; i++) {
		float want = 0;

		for (unsigned int r = 0; r < ROUNDS; r++)
			want -= 0.5f * ((grad(0, r, i) + grad(1, r, i)) * 0.5f);
		if (p[i] != want) {
			fprintf(stderr, "worker %u: p[%zu] = %g, not %g\n",
				rank, i, (double)p[i], (double)want);
			ret = -EBADMSG;
		}
	}
	kn_worker_destroy(w);
	free(p);
	free(g);
	return ret;
}

static struct sockaddr_in addr_of(const char *hostport)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	char h[64];
	const char *colon = strrchr(hostport, ':');

	cr_assert(colon && (size_t)(colon - hostport) < sizeof(h));
	memcpy(h, hostport, (size_t)(colon - hostport));
	h[colon - hostport] = 0;
	cr_assert_eq(inet_pton(AF_INET, h, &a.sin_addr), 1);
	a.sin_port = htons((uint16_t)atoi(colon + 1));
	return a;
}

/* The next completion of @ctx within @secs, or op 0. */
static struct kn__tp_completion wait_one(struct kn__tp_ctx *ctx, double secs)
{
	struct kn__tp_completion c = { 0 };
	double end = mono() + secs;

	while (mono() < end)
		if (kn__tp_poll_wait(ctx, &c, 1, 50) == 1)
			return c;
	c.op = 0;
	return c;
}

/*
 * The stranger: a transport client without the secret.  Each attempt is
 * a new connection with one kind of attack; it counts one closed when
 * the server ends that connection.  Runs until st->stop.
 */
static void stranger(const char *server)
{
	static uint8_t buf[1 << 16];
	struct kn__tp_ctx_attr attr = { .provider = transport() };
	struct sockaddr_in a = addr_of(server);
	struct kn__tp_ctx *ctx;
	struct kn__tp_mr *mr;
	struct kn__msg m = { .type = KN__MSG_ERROR };
	int len;

	if (kn__tp_ctx_create(&attr, &ctx) ||
	    kn__tp_mr_reg(ctx, buf, sizeof(buf), 0, &mr))
		_exit(2);
	memset(buf, 0xff, sizeof(buf)); /* NaN, as floats */
	m.u.error.code = -EIO;
	snprintf(m.u.error.text, sizeof(m.u.error.text), "%s", FORGED);
	len = kn__msg_encode(&m, buf + 8192, KN__MSG_MAX);
	if (len < 0)
		_exit(3);
	for (uint32_t i = 0; !st->stop && i < 400; i++) {
		/*
		 * The keys regions used to have, (index + 1) | (generation
		 * << 20): the diagonal first (no region freed yet), where
		 * the slot area's was, then the rest of the grid.
		 */
		uint32_t k = i / 4, idx = k < 8 ? k : k % 8,
			 gen = k < 8 ? k : k / 8 % 8;
		struct kn__tp_rdesc rd = {
			.len = 1u << 20,
			.key = (idx + 1) | ((gen + 1) << 20),
			.access = KN_TP_REMOTE_WRITE | KN_TP_REMOTE_READ,
		};
		struct kn__tp_completion c;
		struct kn__tp_ep *ep;
		int ret = kn__tp_connect(ctx, (struct sockaddr *)&a, sizeof(a),
					 NULL, &ep);

		if (ret) { /* the job may have ended before st->stop */
			usleep(20000);
			continue;
		}
		c = wait_one(ctx, 5);
		if (c.op != KN_TP_OP_CONNECT || c.status) {
			kn__tp_ep_close(ep);
			usleep(20000);
			continue;
		}
		/* room for the challenge, so that the close is seen */
		if (kn__tp_post_recv(ep, mr, 16384, 4096, NULL) ||
		    kn__tp_post_recv(ep, mr, 20480, 4096, NULL))
			_exit(6);
		switch (i % 4) {
		case 0:
			ret = kn__tp_post_write_imm(ep, mr, 0, 4096, &rd, 0,
						    0x10000001, NULL);
			break;
		case 1: /* a zero-length probe */
			ret = kn__tp_post_write_imm(ep, mr, 0, 0, &rd, 0,
						    0x10000001, NULL);
			break;
		case 2:
			ret = kn__tp_post_read(ep, mr, 0, 4096, &rd, 0, NULL);
			break;
		default:
			ret = kn__tp_post_send(ep, mr, 8192, (size_t)len, NULL);
		}
		if (ret)
			_exit(5);
		st->attempts++;
		/* the server ends the connection */
		for (double end = mono() + 8; mono() < end;) {
			c = wait_one(ctx, 0.2);
			if (c.op == KN_TP_OP_DISCONNECT) {
				st->closed++;
				break;
			}
		}
		kn__tp_ep_close(ep);
		while (wait_one(ctx, 0.01).op)
			; /* what the close flushed */
	}
	kn__tp_ctx_destroy(ctx);
	_exit(0);
}

/* Count the lines of @path, and whether one starts with @prefix. */
static int log_lines(const char *path, const char *prefix, bool *seen)
{
	FILE *f = fopen(path, "r");
	char line[4096];
	int n = 0;

	*seen = false;
	cr_assert(f, "%s", path);
	while (fgets(line, sizeof(line), f)) {
		n++;
		if (prefix && strncmp(line, prefix, strlen(prefix)) == 0)
			*seen = true;
	}
	fclose(f);
	return n;
}

static bool log_has(const char *path, const char *text)
{
	FILE *f = fopen(path, "r");
	char line[4096];
	bool found = false;

	cr_assert(f, "%s", path);
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, text) != NULL;
	fclose(f);
	return found;
}

static void print_log(const char *path)
{
	FILE *f = fopen(path, "r");
	char line[4096];

	while (f && fgets(line, sizeof(line), f))
		cr_log_info("%s", line);
	if (f)
		fclose(f);
}

/* Start a job's coordinator and one server listening on @server. */
static void start_logged(struct job *j, char *server, size_t n, char *slog,
			 char *clog)
{
	snprintf(server, n, "%s:%d", host(), free_port());
	snprintf(slog, 64, "/tmp/kanel-hostile-%d-server.log", getpid());
	snprintf(clog, 64, "/tmp/kanel-hostile-%d-coord.log", getpid());
	start_job_logged(j, clog, slog, server);
}

/*
 * A 2-worker BSP job whose coordinator and server log into @clog and
 * @slog, the server on @server (64 bytes each), with both workers in and
 * held before their first step until st->go.
 */
static void start_held(struct job *j, char *server, char *slog, char *clog)
{
	stage_new();
	job_env(j, 2, 1, "bsp", "sgd", "0.5");
	start_logged(j, server, 64, slog, clog);
	spawn_worker(j, 0, exact_worker);
	spawn_worker(j, 1, exact_worker);
	for (double end = mono() + 30; st->started < 2 && mono() < end;)
		usleep(10000);
	cr_assert_eq(st->started, 2);
}

Test(hostile, a_stranger_reaches_nothing, .timeout = 180)
{
	char server[64], slog[64], clog[64];
	struct job j = { 0 };
	double t0 = mono(), secs;
	pid_t att;
	bool forged;
	int lines, ret;

	/* the slots exist once both workers are in; then the stranger */
	start_held(&j, server, slog, clog);
	att = fork();
	cr_assert_geq(att, 0);
	if (att == 0)
		stranger(server);
	/* the rounds run while it keeps at it */
	for (double end = mono() + 60; st->attempts < 40 && mono() < end;)
		usleep(10000);
	cr_assert_geq(st->attempts, 40, "the stranger got %d attacks through",
		      st->attempts);
	st->go = 1;
	end_job(&j, true);
	st->stop = 1;
	ret = reap(att, (double)time(NULL) + WAIT_S);
	cr_assert_eq(ret, 0, "the stranger %s %d",
		     ret < 0 ? "did not exit:" : "exited with", ret);
	secs = mono() - t0;
	for (unsigned int w = 0; w < 2; w++)
		cr_assert_eq(sh->status[w], 0, "worker %u: %s", w,
			     strerror(-sh->status[w]));
	print_log(slog);
	cr_assert_eq(st->closed, st->attempts,
		     "%d of %d connections ended by the server", st->closed,
		     st->attempts);
	/* the server named the stranger, and nobody forged its lines */
	cr_assert(log_has(slog, "127.0.0.1:") || log_has(slog, host()));
	cr_assert(
		log_has(slog, "every worker is done: the job ends\\x0a") ||
			log_has(slog, "\\x0akanel: coordinator: every worker"),
		"the forged text was not logged escaped");
	lines = log_lines(slog, "kanel: coordinator:", &forged);
	cr_assert(!forged, "a forged line in the server's log");
	/* rate-limited: a few lines a second, whatever the stranger does */
	cr_assert_leq(lines, 20 * (int)(secs + 2), "%d lines in %.1f s", lines,
		      secs);
	cr_log_info("%d attacks in %.1f s, each connection closed; %d log "
		    "lines",
		    st->attempts, secs, lines);
	unlink(slog);
	unlink(clog);
}

/* A secret holder's connection as worker @rank to @server: the ERROR. */
struct claim {
	int error;
	bool open, closed;
};

static void claim_message(struct kn__node *n, struct kn__chan *ch,
			  const struct kn__msg *m)
{
	struct claim *c = n->role;

	(void)ch;
	if (m->type == KN__MSG_ERROR)
		c->error = m->u.error.code;
}

static void claim_open(struct kn__node *n, struct kn__chan *ch)
{
	(void)ch;
	((struct claim *)n->role)->open = true;
}

static void claim_closed(struct kn__node *n, struct kn__chan *ch, int status)
{
	(void)ch;
	(void)status;
	((struct claim *)n->role)->closed = true;
}

static int claim_rank(const char *server, uint32_t rank)
{
	static const struct kn__node_ops ops = { .open = claim_open,
						 .message = claim_message,
						 .closed = claim_closed };
	struct sockaddr_in a = addr_of(server);
	struct claim c = { 0 };
	struct kn__node n;
	struct kn__chan *ch;

	cr_assert_eq(kn__node_init(&n, transport(), KN__ROLE_WORKER, rank,
				   (const uint8_t *)"the job's secret", 16,
				   &ops, &c),
		     0);
	cr_assert_eq(kn__node_connect(&n, (struct sockaddr *)&a, sizeof(a),
				      KN__ROLE_SERVER, 0, NULL, &ch),
		     0);
	for (double end = mono() + 10; !c.closed && mono() < end;)
		cr_assert_geq(kn__node_step(&n, 50, -1), 0);
	kn__node_fini(&n);
	cr_assert(c.open, "the handshake with the secret failed");
	cr_assert(c.closed, "the server kept a claim to rank %u", rank);
	return c.error;
}

/*
 * The server refuses the claim with @err.  Over verbs the ERROR may be
 * flushed with the connection before it is read: then the close alone
 * says it, and the server's log (checked by the caller) says why.
 */
static void expect_refused(const char *server, uint32_t rank, int err)
{
	int got = claim_rank(server, rank);

	if (got == 0 && strcmp(transport(), "verbs") == 0)
		return;
	cr_assert_eq(got, err, "rank %u: %d, expected %d", rank, got, err);
}

Test(hostile, a_secret_holder_takes_no_connected_rank, .timeout = 120)
{
	char server[64], slog[64], clog[64];
	struct job j = { 0 };

	/* both workers are in, waiting for st->go */
	start_held(&j, server, slog, clog);
	expect_refused(server, 1, -EEXIST);
	expect_refused(server, 7, -EPERM);
	st->go = 1;
	end_job(&j, true);
	print_log(slog);
	for (unsigned int w = 0; w < 2; w++)
		cr_assert_eq(sh->status[w], 0, "worker %u: %s", w,
			     strerror(-sh->status[w]));
	cr_assert(log_has(slog, "worker 1: this rank is connected already: "
				"refused"));
	cr_assert(log_has(slog, "worker 7: only workers of this job"));
	unlink(slog);
	unlink(clog);
}

/* What a peer sent is logged as one line of printable ASCII. */
Test(hostile, log_text_is_escaped)
{
	char out[64];

	cr_assert_eq(kn__escape("a\nb\\c\x01\xff", out, sizeof(out)), 17);
	cr_assert_str_eq(out, "a\\x0ab\\\\c\\x01\\xff");
	/* a short buffer cuts whole escapes, and stays terminated */
	cr_assert_eq(kn__escape("ab\ncd", out, 5), 2);
	cr_assert_str_eq(out, "ab");
}

static long rss_kib(pid_t pid)
{
	char path[64], line[256];
	long kib = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	cr_assert(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

Test(hostile, idle_connections_closed_at_the_deadline, .timeout = 120)
{
	enum { NFLOOD = 300 };
	static int fds[NFLOOD];
	char clog[64];
	struct job j = { 0 };
	struct sockaddr_in a;
	long before, during, after;
	int open_left = NFLOOD, lines;
	double t0;
	bool forged;

	if (strcmp(transport(), "tcp"))
		cr_skip_test("raw sockets: tcp only");
	job_env(&j, 2, 1, "bsp", "sgd", "0.5");
	setenv("KANEL_STARTUP_TIMEOUT", "40", 1);
	snprintf(clog, sizeof(clog), "/tmp/kanel-hostile-%d-flood.log",
		 getpid());
	j.coord = spawn_role_logged("coordinator", 0, clog, NULL);
	a = addr_of(j.coordinator);
	/* up: a connection is accepted */
	for (double end = mono() + 10;; usleep(20000)) {
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		int ok = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;

		close(fd);
		if (ok)
			break;
		cr_assert_lt(mono(), end, "the coordinator never listened");
	}
	usleep(500000); /* the probe's connection is gone */
	before = rss_kib(j.coord);
	for (int i = 0; i < NFLOOD; i++) {
		fds[i] = socket(AF_INET, SOCK_STREAM, 0);
		cr_assert_geq(fds[i], 0);
		cr_assert_eq(connect(fds[i], (struct sockaddr *)&a, sizeof(a)),
			     0);
	}
	t0 = mono();
	usleep(500000);
	during = rss_kib(j.coord);
	/* every one is closed: past the cap at once, the rest at 5 s */
	while (open_left && mono() - t0 < 12) {
		for (int i = 0; i < NFLOOD; i++) {
			char b[256];
			ssize_t n;

			if (fds[i] < 0)
				continue;
			n = recv(fds[i], b, sizeof(b), MSG_DONTWAIT);
			if (n == 0 || (n < 0 && errno != EAGAIN))
				close(fds[i]), fds[i] = -1, open_left--;
		}
		usleep(50000);
	}
	cr_assert_eq(open_left, 0,
		     "%d idle connections still open after "
		     "%.1f s",
		     open_left, mono() - t0);
	cr_assert_geq(mono() - t0, 4.0, "closed before the deadline");
	usleep(300000);
	after = rss_kib(j.coord);
	kill(j.coord, SIGTERM);
	cr_assert_neq(reap(j.coord, (double)time(NULL) + WAIT_S), -1);
	print_log(clog);
	cr_log_info("coordinator RSS: %ld KiB before %d idle connections, "
		    "%ld during, %ld after (%.1f%%)",
		    before, NFLOOD, during, after,
		    100.0 * (double)(after - before) / (double)before);
#ifndef __SANITIZE_ADDRESS__
	/* ASan's quarantine keeps freed memory resident by design, so RSS
	 * says nothing there; LeakSanitizer checks that build instead */
	cr_assert_leq(after, before + before / 10,
		      "RSS %ld KiB after, %ld before", after, before);
#endif
	cr_assert(log_has(clog, "no handshake within 5 s"));
	cr_assert(log_has(clog, "connections are in the handshake already"));
	cr_assert(log_has(clog, "more connections refused"));
	cr_assert(log_has(clog, "refused 127.0.0.1:"));
	lines = log_lines(clog, NULL, &forged);
	cr_assert_leq(lines, 40, "%d log lines for %d connections", lines,
		      NFLOOD);
	unlink(clog);
	unlink(j.secret);
}
