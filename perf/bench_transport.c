/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_transport.c - figures for the transport layer over loopback (or,
 * for verbs, the RDMA device's own address; with --peer-netns, across a
 * link into another network namespace), next to plain blocking sockets
 * measured in the same run.
 *
 * Two threads each own one side of a connection on 127.0.0.1 (--addr):
 * a context (created, polled and destroyed on that thread) with its
 * endpoint and registered regions, busy-polled, and one end of a
 * TCP_NODELAY socket used with blocking send() and recv().  pingpong: side 0 writes N bytes
 * into side 1's region with write_imm and side 1, on the RECV_IMM, writes
 * N bytes back; median_us is one full round trip (a sample is the median
 * round trip of a batch).  stream: side 0 keeps a window of write_imms in
 * flight and side 1 counts the RECV_IMMs; median_us is the time from the
 * first post to the last arrival divided by the messages moved.  The sockets do
 * the same work: the same messages both ways, or the same bytes in
 * messages of the same size, each received whole.  Kanel and socket
 * samples of a size alternate, the order too, so that the ratio (socket
 * time over Kanel time: higher is better) compares the same stretch of
 * time.  Every figure is a median over repeats with min and max.  Busy
 * polling suffers most when other processes want the CPUs, so the header
 * gives the load average.  Regions are registered and touched up front;
 * every wait has a deadline.  It prints figures and judges nothing: it is
 * not a test.
 *
 * Side 1 listens (its context's listener and the sockets') at --addr and
 * side 0 connects.  Within one network namespace the kernel carries TCP
 * to any of its own addresses over lo, so a figure over a real link
 * needs the sides in two namespaces: with --peer-netns NAME, side 0's
 * thread first enters /run/netns/NAME (a network namespace is a thread's
 * own), and everything it then makes, its context (for dpdk, its port),
 * its socket, is there, while side 1 and --addr stay in the namespace the
 * benchmark was started in.  Every frame between the two, Kanel's and
 * the sockets', then crosses the link between the namespaces: a veth
 * pair from tests/dpdk/netns.sh --split, so that the dpdk provider over
 * af_packet, the tcp provider and plain sockets are measured on one wire.
 *
 * With --serve-stream it is a co-process instead (perf/bench_engine's
 * baseline, the transport alone in the engine's run): it sets up the two
 * sides once (no sockets), says "ready PROVIDER" on stdout, then reads
 * commands on stdin, one a line, and answers each with one line:
 *
 *   calibrate BYTES NS  a warm-up stream of BYTES-byte messages, as the
 *                       stream test's; it sizes the samples of BYTES to
 *                       take about NS ns
 *   stream BYTES        one stream sample of BYTES-byte messages, as many
 *                       as the last calibrate of BYTES chose
 *
 * The answer is "ok BYTES MESSAGES NS" (NS from the first post to the last
 * arrival) or "error TEXT"; a side that fails answers "error TEXT" and
 * exits 1.  --stream-sizes sizes the regions (BYTES may go up to 64 MiB
 * or the largest of them), --provider, --provider-flags and --addr apply,
 * and EOF on stdin ends it.  Window, warm-up and sample sizing are the stream
 * test's own (stream_window(), stream_warmup_msgs(), stream_msgs()).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "transport.h"

#define MAX_REPS     5
#define WAIT_S	     30 /* deadline of every wait */
#define KIB	     ((size_t)1 << 10)
#define MIB	     ((size_t)1 << 20)
#define MAX_SIZE     (256 * MIB)
#define RING_BYTES   (64 * MIB) /* stream messages cycle through this much */
#define WINDOW_BYTES (64 * MIB) /* stream: bytes in flight, as writes in: */
#define MIN_WINDOW   64
#define MAX_WINDOW   1024 /* the tcp provider's send queue: no -EAGAIN */
#define CAL_ROUNDS   100  /* round trips of the calibrating run */
#define CAL_BYTES    (16 * MIB)
#define MIN_ROUNDS   50
#define MAX_ROUNDS   200000
#define MIN_MSGS     8
#define POLL_BATCH   64

enum test { PINGPONG, STREAM };

static const char *const test_names[] = { "pingpong", "stream" };

static struct {
	bool quick, csv, progress;
	bool serve;		/* --serve-stream */
	uint32_t flags;		/* of the contexts */
	const char *provider;	/* tcp, verbs or dpdk */
	const char *peer_netns; /* side 0's network namespace, or NULL */
	struct in_addr ip;	/* where side 1 listens and side 0 connects */
	unsigned int reps;
	double pp_ns, st_ns; /* time a sample should take */
	size_t max_total;    /* stream bytes of a sample */
	size_t sizes[BENCH_MAX_LIST], ssizes[BENCH_MAX_LIST];
	unsigned int nsizes, nssizes;
	size_t buf_bytes; /* of each region: RING_BYTES or the largest size */
} cfg;

/* One run of a test by both sides, and what it measured. */
struct job {
	enum test test;
	bool socket; /* the baseline */
	size_t bytes;
	unsigned long count; /* round trips or messages */
	unsigned int window; /* stream: write_imms in flight */
	double t0, t1;	     /* stream: first post, last arrival (ns) */
	double *rtt;	     /* pingpong: ns of each round trip */
};

/* One side; its thread runs side_main() on the job of the moment. */
struct side {
	int id; /* 0 starts every exchange, 1 answers */
	struct kn__tp_ctx *ctx;
	struct kn__tp_ep *ep;
	struct kn__tp_mr *src_mr, *dst_mr;
	struct kn__tp_rdesc mine, peer; /* dst regions */
	char *src, *dst;
	int fd; /* the baseline's socket */
	struct job *job;
	double deadline;
	unsigned long posts, writes, imms; /* of this job, so far */
};

static struct side sides[2];
static pthread_barrier_t bar; /* main and both sides */
static struct job *job_now;   /* the job after the next barrier */
static struct sockaddr_storage listen_addr;
static int sock_lfd = -1;	     /* the baseline's listener, */
static struct sockaddr_in sock_addr; /* and its address */
static const char *kn_name;	     /* the contexts' provider */

static double now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* With --serve-stream the failure is the answer, on stdout. */
static void check(int ret, const char *call)
{
	if (ret >= 0)
		return;
	if (cfg.serve) {
		printf("error %s: %s\n", call, strerror(-ret));
		fflush(stdout);
	} else {
		fprintf(stderr, "bench_transport: %s: %s\n", call,
			strerror(-ret));
	}
	exit(1);
}

/*
 * A side's run cannot go on: say why, and in which job (with
 * --serve-stream, as the answer on stdout).
 */
static void __attribute__((noreturn, format(printf, 2, 3)))
die(const struct side *s, const char *fmt, ...)
{
	const struct job *j = s->job;
	char why[256], job[64] = "";
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	if (j)
		snprintf(job, sizeof(job), " (%s %s, %zu B)",
			 j->socket ? "socket" : "kanel", test_names[j->test],
			 j->bytes);
	if (cfg.serve) {
		printf("error side %d: %s%s\n", s->id, why, job);
		fflush(stdout);
	} else {
		fprintf(stderr, "bench_transport: side %d: %s%s\n", s->id, why,
			job);
	}
	exit(1);
}

/* Where message @k of a stream goes: slots over RING_BYTES. */
static size_t slot(const struct job *j, unsigned long k)
{
	size_t n = j->bytes < RING_BYTES ? RING_BYTES / j->bytes : 1;

	return k % n * j->bytes;
}

/*
 * How a stream of @bytes is sized, here and for --serve-stream alike: the
 * write_imms it keeps in flight, the messages of its warm-up, and those of
 * a sample that takes about @ns when the warm-up took @msg_ns a message.
 */
static unsigned int stream_window(size_t bytes)
{
	return (unsigned int)fmin(
		fmax((double)(WINDOW_BYTES / bytes), MIN_WINDOW), MAX_WINDOW);
}

static unsigned long stream_warmup_msgs(size_t bytes)
{
	return (unsigned long)fmax((double)(CAL_BYTES / bytes), MIN_MSGS);
}

static unsigned long stream_msgs(size_t bytes, double ns, double msg_ns)
{
	return (unsigned long)fmax(
		fmin(ns / msg_ns, (double)(cfg.max_total / bytes)), MIN_MSGS);
}

/* ---- Kanel's side ---- */

static void kn_write(struct side *s, size_t off, uint32_t imm)
{
	check(kn__tp_post_write_imm(s->ep, s->src_mr, off, s->job->bytes,
				    &s->peer, off, imm, NULL),
	      "kn__tp_post_write_imm");
	s->posts++;
}

/*
 * Poll once, counting the peer's write_imms (which must arrive whole and
 * in order) and our own write_imm completions; anything else ends the run.
 */
static void kn_progress(struct side *s, const char *what)
{
	struct kn__tp_completion c[POLL_BATCH];
	int n = kn__tp_poll(s->ctx, c, POLL_BATCH);

	check(n, "kn__tp_poll");
	if (n == 0 && now_ns() > s->deadline)
		die(s, "waited %d s for %s", WAIT_S, what);
	for (int i = 0; i < n; i++) {
		if (c[i].status)
			die(s, "completion of op %u: %s", c[i].op,
			    strerror(-c[i].status));
		if (c[i].op == KN_TP_OP_WRITE_IMM) {
			s->writes++;
		} else if (c[i].op == KN_TP_OP_RECV_IMM &&
			   c[i].imm == (uint32_t)s->imms &&
			   c[i].bytes == s->job->bytes) {
			s->imms++;
		} else {
			die(s, "unexpected op %u (imm %u, %llu B)", c[i].op,
			    c[i].imm, (unsigned long long)c[i].bytes);
		}
	}
}

/*
 * A round trip is over when the answer is in and our own write has
 * completed, so that its source is ours again before the next post.
 */
static void kn_pingpong(struct side *s, struct job *j)
{
	double t = now_ns(), t1;

	for (unsigned long i = 0; i < j->count; i++) {
		if (s->id == 0)
			kn_write(s, 0, (uint32_t)i);
		while (s->imms == i || s->writes != s->posts)
			kn_progress(s, "the peer's write_imm");
		if (s->id == 1) {
			kn_write(s, 0, (uint32_t)i);
			continue;
		}
		t1 = now_ns();
		j->rtt[i] = t1 - t;
		t = t1;
	}
	while (s->writes != s->posts)
		kn_progress(s, "the last write_imm completion");
}

/*
 * Messages in flight may share a source range (the transport only reads
 * it) and a destination range (the payload is not checked).
 */
static void kn_stream(struct side *s, struct job *j)
{
	if (s->id == 1) {
		while (s->imms < j->count)
			kn_progress(s, "the stream's messages");
		j->t1 = now_ns();
		return;
	}
	j->t0 = now_ns();
	while (s->writes < j->count) {
		while (s->posts < j->count && s->posts - s->writes < j->window)
			kn_write(s, slot(j, s->posts), (uint32_t)s->posts);
		kn_progress(s, "write_imm completions");
	}
}

/* ---- the baseline's side ---- */

/* All @n bytes at @p sent (@out) or received; SO_*TIMEO is the deadline. */
static void sock_io(const struct side *s, bool out, char *p, size_t n)
{
	while (n) {
		ssize_t r = out ? send(s->fd, p, n, MSG_NOSIGNAL)
				: recv(s->fd, p, n, 0);

		if (r < 0 && errno == EINTR)
			continue;
		if (r == 0)
			errno = ECONNRESET;
		if (r <= 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			die(s, "waited %d s in %s", WAIT_S,
			    out ? "send" : "recv");
		if (r <= 0)
			die(s, "%s: %s", out ? "send" : "recv",
			    strerror(errno));
		p += r;
		n -= (size_t)r;
	}
}

static void sock_pingpong(struct side *s, struct job *j)
{
	double t = now_ns(), t1;

	for (unsigned long i = 0; i < j->count; i++) {
		if (s->id == 0)
			sock_io(s, true, s->src, j->bytes);
		sock_io(s, false, s->dst, j->bytes);
		if (s->id == 1) {
			sock_io(s, true, s->src, j->bytes);
			continue;
		}
		t1 = now_ns();
		j->rtt[i] = t1 - t;
		t = t1;
	}
}

static void sock_stream(struct side *s, struct job *j)
{
	if (s->id == 0)
		j->t0 = now_ns();
	for (unsigned long k = 0; k < j->count; k++) {
		sock_io(s, s->id == 0, (s->id ? s->dst : s->src) + slot(j, k),
			j->bytes);
	}
	if (s->id == 1)
		j->t1 = now_ns();
}

/* ---- set-up and the two-thread harness ---- */

static struct sockaddr_in meeting_addr(uint16_t port)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_port = htons(port),
				 .sin_addr = cfg.ip };

	return a;
}

/* The baseline's socket options: Nagle off, and every wait's deadline. */
static void sock_opts(int fd)
{
	struct timeval tv = { .tv_sec = WAIT_S };
	int one = 1;

	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) ||
	    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) ||
	    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)))
		check(-errno, "setsockopt");
}

/*
 * The baseline's connection in three steps: main listens at --addr before
 * the sides start, side 0 connects from its own thread (a socket belongs
 * to the network namespace of the thread that made it, so with
 * --peer-netns side 0's is in the other one), and main accepts once side
 * 0 is through (the backlog holds the connection until then), for side 1.
 */
static void sock_listen(void)
{
	struct timeval tv = { .tv_sec = WAIT_S }; /* accept's deadline */
	socklen_t len = sizeof(sock_addr);

	sock_addr = meeting_addr(0);
	sock_lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (sock_lfd < 0 ||
	    bind(sock_lfd, (struct sockaddr *)&sock_addr, sizeof(sock_addr)) ||
	    listen(sock_lfd, 1) ||
	    getsockname(sock_lfd, (struct sockaddr *)&sock_addr, &len) ||
	    setsockopt(sock_lfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)))
		check(-errno, "baseline socket set-up");
}

static void sock_connect(struct side *s)
{
	s->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s->fd < 0 ||
	    connect(s->fd, (struct sockaddr *)&sock_addr, sizeof(sock_addr)))
		die(s, "baseline socket connect: %s", strerror(errno));
	sock_opts(s->fd);
}

static void sock_accept(void)
{
	sides[1].fd = accept(sock_lfd, NULL, NULL);
	if (sides[1].fd < 0)
		check(-errno, "baseline socket accept");
	close(sock_lfd);
	sock_opts(sides[1].fd);
}

/*
 * --peer-netns: side 0's thread moves into the namespace before it makes
 * anything.  sysfs shows the interfaces of the namespace it was mounted
 * in, whoever looks, and the dpdk provider reads an interface's MTU
 * there: without a sysfs of its own the thread would find no dk1 and the
 * other namespace's dk0.  So, as ip netns exec does for a process, the
 * thread also takes a mount namespace of its own (the thread's alone;
 * it comes with a copy of the process's root and working directory,
 * which nothing here changes) and mounts sysfs anew there.
 */
static void enter_netns(struct side *s)
{
	char path[PATH_MAX];
	int fd;

	snprintf(path, sizeof(path), "/run/netns/%s", cfg.peer_netns);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		die(s, "%s: %s", path, strerror(errno));
	if (setns(fd, CLONE_NEWNET))
		die(s, "setns %s: %s", path, strerror(errno));
	close(fd);
	/* no mount of ours may leak out to the rest of the system */
	if (unshare(CLONE_NEWNS) ||
	    mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL))
		die(s, "a mount namespace for %s: %s", cfg.peer_netns,
		    strerror(errno));
	umount2("/sys", MNT_DETACH); /* there may be none */
	if (mount("sysfs", "/sys", "sysfs", 0, NULL))
		die(s, "mount sysfs in %s: %s", cfg.peer_netns,
		    strerror(errno));
}

/* A side's context and its two regions, registered and touched. */
static void side_ctx(struct side *s)
{
	struct kn__tp_ctx_attr attr = { .provider = cfg.provider,
					.flags = cfg.flags };

	check(kn__tp_ctx_create(&attr, &s->ctx), "kn__tp_ctx_create");
	s->src = aligned_alloc(4096, cfg.buf_bytes);
	s->dst = aligned_alloc(4096, cfg.buf_bytes);
	if (!s->src || !s->dst)
		check(-ENOMEM, "aligned_alloc");
	memset(s->src, 0x5a + s->id, cfg.buf_bytes); /* pages in, now */
	memset(s->dst, 0, cfg.buf_bytes);
	check(kn__tp_mr_reg(s->ctx, s->src, cfg.buf_bytes, 0, &s->src_mr),
	      "kn__tp_mr_reg");
	check(kn__tp_mr_reg(s->ctx, s->dst, cfg.buf_bytes, KN_TP_REMOTE_WRITE,
			    &s->dst_mr),
	      "kn__tp_mr_reg");
}

/*
 * Kanel's set-up, on the side's own thread: the context is the thread's
 * for the whole run (the io_uring backend binds a context to the thread
 * that first submits on it).  Side 1 makes its context and listens at
 * --addr, then side 0 makes its own and connects: one after the other,
 * because a dpdk context takes the first interface of KANEL_DPDK_IFACES
 * that no other holds, and with --peer-netns side 1 must hold dk0 (the
 * end in its namespace) before side 0 looks, or side 0, in the middle of
 * passing dk0 by, could make side 1 pass it by too.  The barriers (with
 * main) say when the address (and side 0's socket) and the descriptors
 * are out, then that both are up.
 */
static void side_open(struct side *s)
{
	struct sockaddr_in a = meeting_addr(0);
	struct kn__tp_listener *l = NULL;
	struct kn__tp_completion c;
	int n;

	if (s->id == 0 && !cfg.serve)
		sock_connect(s);
	if (s->id == 1) {
		side_ctx(s);
		check(kn__tp_listen(s->ctx, (struct sockaddr *)&a, sizeof(a),
				    NULL, &l),
		      "kn__tp_listen");
		check(kn__tp_listener_addr(l, &listen_addr),
		      "kn__tp_listener_addr");
	}
	pthread_barrier_wait(&bar);
	if (s->id == 0) {
		side_ctx(s);
		check(kn__tp_connect(s->ctx, (struct sockaddr *)&listen_addr,
				     sizeof(a), NULL, &s->ep),
		      "kn__tp_connect");
	}
	s->deadline = now_ns() + WAIT_S * 1e9;
	while ((n = kn__tp_poll(s->ctx, &c, 1)) == 0)
		if (now_ns() > s->deadline)
			die(s, "waited %d s for the connection", WAIT_S);
	check(n, "kn__tp_poll");
	check(c.status, s->id ? "accept" : "connect");
	if (c.op != (s->id ? KN_TP_OP_ACCEPT : KN_TP_OP_CONNECT))
		check(-EPROTO, "connection set-up");
	s->ep = c.ep;
	kn__tp_listener_close(l);
	/* a remote peer would get the descriptor in a control message */
	check(kn__tp_ep_grant(s->ep, s->dst_mr, 0, cfg.buf_bytes,
			      KN_TP_REMOTE_WRITE, &s->mine),
	      "kn__tp_ep_grant");
	pthread_barrier_wait(&bar);
	s->peer = sides[!s->id].mine;
	if (s->id == 0)
		kn_name = kn__tp_ctx_provider(s->ctx);
	pthread_barrier_wait(&bar);
}

/* A side's thread: set-up, then the jobs main hands out, until NULL. */
static void *side_main(void *arg)
{
	struct side *s = arg;
	struct job *j;

	if (s->id == 0 && cfg.peer_netns)
		enter_netns(s);
	side_open(s);
	for (;;) {
		pthread_barrier_wait(&bar);
		j = s->job = job_now;
		if (!j)
			break;
		s->posts = s->writes = s->imms = 0;
		s->deadline = now_ns() + WAIT_S * 1e9;
		if (j->socket && j->test == PINGPONG)
			sock_pingpong(s, j);
		else if (j->socket)
			sock_stream(s, j);
		else if (j->test == PINGPONG)
			kn_pingpong(s, j);
		else
			kn_stream(s, j);
		pthread_barrier_wait(&bar);
	}
	kn__tp_mr_dereg(s->src_mr);
	kn__tp_mr_dereg(s->dst_mr);
	kn__tp_ctx_destroy(s->ctx); /* closes the endpoint */
	if (s->fd >= 0)
		close(s->fd);
	free(s->src);
	free(s->dst);
	return NULL;
}

/* Run @j on both sides; one sample: ns per round trip or per message. */
static double run_job(struct job *j)
{
	job_now = j;
	pthread_barrier_wait(&bar); /* go */
	pthread_barrier_wait(&bar); /* both done: j holds the figures */
	if (j->test == STREAM)
		return (j->t1 - j->t0) / (double)j->count;
	return summarize(j->rtt, j->count).med;
}

/* ---- measurement and output ---- */

static void emit(const char *provider, enum test t, size_t bytes,
		 const struct stats *st, double ratio)
{
	double moved = t == PINGPONG ? 2.0 * (double)bytes : (double)bytes;
	double gbps = moved / st->med; /* a byte per ns is 1e9 B/s */
	char size[32];

	if (cfg.csv) {
		printf("%s,%s,%zu,%.3f,%.6g,%.6g\n", provider, test_names[t],
		       bytes, st->med / 1e3, gbps, ratio);
		return;
	}
	if (bytes % MIB == 0)
		snprintf(size, sizeof(size), "%zuM", bytes / MIB);
	else if (bytes % KIB == 0)
		snprintf(size, sizeof(size), "%zuK", bytes / KIB);
	else
		snprintf(size, sizeof(size), "%zu", bytes);
	printf("%-14s %-8s %6s %11.3f %11.3f %11.3f %8.3f %6.2f\n", provider,
	       test_names[t], size, st->med / 1e3, st->min / 1e3, st->max / 1e3,
	       gbps, ratio);
}

/*
 * One size of one test, Kanel's samples alternating with the sockets'.
 * A short run of each first (a warm-up) sizes the samples, the same for
 * both, so that the slower takes about the time cfg asks for.
 */
static void bench_size(enum test t, size_t bytes, double *rtt)
{
	double sample[2][MAX_REPS], slowest = 0;
	struct job job[2];
	struct stats st[2];
	unsigned long n;

	if (cfg.progress)
		fprintf(stderr, "%s %zu B ...\n", test_names[t], bytes);
	for (int k = 0; k < 2; k++) {
		job[k] = (struct job){
			.test = t,
			.socket = k == 1,
			.bytes = bytes,
			.count = t == PINGPONG ? CAL_ROUNDS
					       : stream_warmup_msgs(bytes),
			.window = stream_window(bytes),
			.rtt = rtt,
		};
		sample[k][0] = run_job(&job[k]);
		slowest = sample[k][0] > slowest ? sample[k][0] : slowest;
	}
	if (t == PINGPONG)
		n = (unsigned long)fmin(fmax(cfg.pp_ns / slowest, MIN_ROUNDS),
					MAX_ROUNDS);
	else
		n = stream_msgs(bytes, cfg.st_ns, slowest);
	for (unsigned int r = 0; r < cfg.reps; r++)
		for (int i = 0; i < 2; i++) {
			int k = (int)(r + (unsigned int)i) % 2;

			job[k].count = n;
			sample[k][r] = run_job(&job[k]);
		}
	for (int k = 0; k < 2; k++)
		st[k] = summarize(sample[k], cfg.reps);
	emit("socket", t, bytes, &st[1], 1.0);
	emit(kn_name, t, bytes, &st[0], st[1].med / st[0].med);
}

/* ---- --serve-stream: stream samples on command ---- */

static void __attribute__((format(printf, 1, 2)))
answer_error(const char *fmt, ...)
{
	va_list ap;

	fputs("error ", stdout);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

/* @s as the whole of a command's BYTES: 1 to the regions' size, or 0. */
static size_t command_bytes(const char *s)
{
	unsigned long long v;
	char *end;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (*s < '0' || *s > '9' || *end || errno || v < 1 || v > cfg.buf_bytes)
		return 0;
	return (size_t)v;
}

/*
 * One Kanel stream of @count messages of @bytes, answered on stdout;
 * returns its ns per message.
 */
static double serve_stream(size_t bytes, unsigned long count)
{
	struct job j = { .test = STREAM,
			 .bytes = bytes,
			 .count = count,
			 .window = stream_window(bytes) };
	double msg_ns = run_job(&j);

	printf("ok %zu %lu %.0f\n", bytes, count, j.t1 - j.t0);
	fflush(stdout);
	return msg_ns;
}

/*
 * Answer the commands on stdin (see the top of this file) until EOF.  A
 * command that cannot run gets "error TEXT" and the next one is read: the
 * sides are idle between streams.
 */
static void serve(void)
{
	size_t cal_bytes = 0;	    /* the last calibrate's size, */
	unsigned long cal_msgs = 0; /* and the messages of its samples */
	char line[256];

	printf("ready %s\n", kn_name);
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin)) {
		char *save = NULL, *cmd, *arg[3], *end;
		unsigned int n = 0;
		size_t bytes;
		double ns;

		if (!strchr(line, '\n') && !feof(stdin)) {
			int c;

			while ((c = getchar()) != EOF && c != '\n')
				;
			answer_error("a line over %zu bytes", sizeof(line) - 2);
			continue;
		}
		cmd = strtok_r(line, " \t\r\n", &save);
		while (n < 3 && (arg[n] = strtok_r(NULL, " \t\r\n", &save)))
			n++;
		if (!cmd) {
			answer_error("an empty line");
		} else if (strcmp(cmd, "calibrate") == 0) {
			if (n != 2 || !(bytes = command_bytes(arg[0]))) {
				answer_error("usage: calibrate BYTES NS, BYTES "
					     "from 1 to %zu (--stream-sizes "
					     "sizes the regions)",
					     cfg.buf_bytes);
				continue;
			}
			ns = strtod(arg[1], &end);
			if (*end || !(ns > 0) || !isfinite(ns)) {
				answer_error("calibrate: NS '%s' is not a "
					     "positive number",
					     arg[1]);
				continue;
			}
			cal_bytes = bytes;
			cal_msgs = stream_msgs(
				bytes, ns,
				serve_stream(bytes, stream_warmup_msgs(bytes)));
		} else if (strcmp(cmd, "stream") == 0) {
			if (n != 1 || !(bytes = command_bytes(arg[0])))
				answer_error("usage: stream BYTES, BYTES from "
					     "1 to %zu",
					     cfg.buf_bytes);
			else if (bytes != cal_bytes)
				answer_error("stream %zu: the last calibrate "
					     "was not of %zu B",
					     bytes, bytes);
			else
				serve_stream(bytes, cal_msgs);
		} else {
			answer_error("unknown command '%s' (calibrate "
				     "BYTES NS, stream BYTES)",
				     cmd);
		}
	}
	if (ferror(stdin))
		check(-EIO, "reading the commands on stdin");
}

static void usage(void)
{
	printf("usage: bench_transport [options]\n"
	       "  --quick                3 repeats, shorter samples\n"
	       "  --csv                  CSV on stdout, other text on stderr\n"
	       "  --provider NAME        tcp (the default), verbs or dpdk\n"
	       "  --addr IP              where side 1 listens and side 0\n"
	       "                         connects (default 127.0.0.1; verbs:\n"
	       "                         $KANEL_RDMA_ADDR, an address of the\n"
	       "                         RDMA device; needed with\n"
	       "                         --peer-netns: an address here that\n"
	       "                         NAME reaches)\n"
	       "  --peer-netns NAME      side 0 (the connecting side, its\n"
	       "                         context and its socket) in network\n"
	       "                         namespace /run/netns/NAME, so that\n"
	       "                         all traffic crosses the link to it\n"
	       "                         (tests/dpdk/netns.sh --split)\n"
	       "  --provider-flags epoll the tcp provider's epoll backend\n"
	       "                         (KN_TP_CTX_FORCE_EPOLL)\n"
	       "  --sizes LIST           pingpong message bytes, e.g. "
	       "8,4K,64K\n"
	       "  --stream-sizes LIST    stream message bytes, e.g. 64K,1M\n"
	       "  --serve-stream         no tests: serve stream samples to\n"
	       "                         bench_engine, its baseline (see the\n"
	       "                         top of bench_transport.c): says\n"
	       "                         'ready PROVIDER', then answers each\n"
	       "                         line on stdin with one on stdout:\n"
	       "                         calibrate BYTES NS: a warm-up that\n"
	       "                           sizes the samples of BYTES to\n"
	       "                           take about NS ns\n"
	       "                         stream BYTES: one sample\n"
	       "                         answers: ok BYTES MESSAGES NS, or\n"
	       "                           error TEXT; EOF on stdin ends it.\n"
	       "                         BYTES: up to 64M or the largest\n"
	       "                         --stream-sizes\n"
	       "Sizes may end in K, M or G (binary), from 1 B to %zu MiB.\n",
	       MAX_SIZE / MIB);
}

/* A comma list of sizes in 1..MAX_SIZE into @out; returns its length. */
static unsigned int parse_sizes(const char *option, char *arg, size_t *out)
{
	unsigned int n = parse_list(option, arg, NULL, 1, MAX_SIZE, true, out);

	for (unsigned int i = 0; i < n; i++)
		if (out[i] > cfg.buf_bytes)
			cfg.buf_bytes = (out[i] + 4095) / 4096 * 4096;
	return n;
}

static void parse_args(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "quick", no_argument, NULL, 'q' },
		{ "csv", no_argument, NULL, 'c' },
		{ "provider-flags", required_argument, NULL, 'p' },
		{ "provider", required_argument, NULL, 'P' },
		{ "addr", required_argument, NULL, 'a' },
		{ "peer-netns", required_argument, NULL, 'n' },
		{ "sizes", required_argument, NULL, 's' },
		{ "stream-sizes", required_argument, NULL, 'S' },
		{ "serve-stream", no_argument, NULL, 'e' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static const size_t pp_sizes[] = { 8, 64, 4 * KIB, 64 * KIB };
	static const size_t st_sizes[] = { 4 * KIB, 64 * KIB, MIB, 16 * MIB };
	const char *addr = NULL;
	int c;

	cfg.buf_bytes = RING_BYTES;
	cfg.provider = "tcp";
	while ((c = bench_getopt(argc, argv, longopts, usage)) != -1) {
		switch (c) {
		case 'q':
			cfg.quick = true;
			break;
		case 'c':
			cfg.csv = true;
			break;
		case 'p':
			if (strcmp(optarg, "epoll") != 0)
				bad_value("provider-flags", optarg,
					  "the one flag is epoll");
			cfg.flags = KN_TP_CTX_FORCE_EPOLL;
			break;
		case 'P':
			if (strcmp(optarg, "tcp") && strcmp(optarg, "verbs") &&
			    strcmp(optarg, "dpdk"))
				bad_value("provider", optarg,
					  "tcp, verbs or dpdk");
			cfg.provider = optarg;
			break;
		case 'a':
			addr = optarg;
			break;
		case 'n':
			if (!*optarg || strchr(optarg, '/'))
				bad_value("peer-netns", optarg,
					  "a name under /run/netns");
			cfg.peer_netns = optarg;
			break;
		case 's':
			cfg.nsizes = parse_sizes("sizes", optarg, cfg.sizes);
			break;
		case 'S':
			cfg.nssizes =
				parse_sizes("stream-sizes", optarg, cfg.ssizes);
			break;
		case 'e':
			cfg.serve = true;
			break;
		}
	}
	if (!addr && cfg.peer_netns) {
		/* 127.0.0.1 is each namespace's own */
		fprintf(stderr,
			"bench_transport: --peer-netns needs --addr: "
			"an address of this namespace that %s "
			"reaches\n",
			cfg.peer_netns);
		exit(2);
	}
	if (!addr && strcmp(cfg.provider, "verbs") == 0)
		addr = getenv("KANEL_RDMA_ADDR");
	if (!addr && strcmp(cfg.provider, "verbs") == 0) {
		fprintf(stderr, "bench_transport: --provider verbs needs "
				"--addr (or KANEL_RDMA_ADDR): an IP address "
				"of the RDMA device\n");
		exit(2);
	}
	if (!addr)
		addr = "127.0.0.1";
	if (inet_pton(AF_INET, addr, &cfg.ip) != 1)
		bad_value("addr", addr, "an IPv4 address");
	if (cfg.flags && strcmp(cfg.provider, "tcp") != 0)
		bad_value("provider-flags", "epoll", "tcp only");
	if (!cfg.nsizes) {
		cfg.nsizes = 4;
		memcpy(cfg.sizes, pp_sizes, sizeof(pp_sizes));
	}
	if (!cfg.nssizes) {
		cfg.nssizes = 4;
		memcpy(cfg.ssizes, st_sizes, sizeof(st_sizes));
	}
	cfg.reps = cfg.quick ? 3 : MAX_REPS;
	cfg.pp_ns = cfg.quick ? 0.5e9 : 1e9;
	cfg.st_ns = cfg.quick ? 0.6e9 : 1e9;
	cfg.max_total = (cfg.quick ? 768 : 1024) * MIB;
	/* rows on a terminal are progress enough */
	cfg.progress = isatty(STDERR_FILENO) && !isatty(STDOUT_FILENO);
}

/* Every test and size, with the header and the table. */
static void bench_all(double *rtt)
{
	double load[1];
	FILE *f;

	f = cfg.csv ? stderr : stdout;
	fprintf(f,
		"# transport provider %s%s over %s%s%s, two threads "
		"busy-polling; baseline: blocking sockets, TCP_NODELAY; "
		"%u repeats\n",
		kn_name, cfg.flags ? " (--provider-flags epoll)" : "",
		inet_ntoa(cfg.ip),
		cfg.peer_netns ? ", side 0 in network namespace " : "",
		cfg.peer_netns ? cfg.peer_netns : "", cfg.reps);
	if (strncmp(kn_name, "verbs/rxe", 9) == 0)
		fprintf(f,
			"# %s is soft-RoCE: its figures measure the CPU's "
			"packet processing, not an RDMA NIC\n",
			kn_name + 6);
	if (getenv("KANEL_IN_RXE_VM"))
		fprintf(f, "# running in a qemu VM under TCG emulation: these "
			   "are NOT performance figures, only a check that "
			   "the benchmark runs\n");
	if (getloadavg(load, 1) == 1)
		fprintf(f,
			"# %ld CPUs, load average %.2f: other busy processes "
			"slow the busy-polling sides most\n",
			sysconf(_SC_NPROCESSORS_ONLN), load[0]);
	bench_header(
		cfg.csv, "provider,test,bytes,median_us,gbps,ratio_vs_socket",
		"%-14s %-8s %6s %11s %11s %11s %8s %6s\n", "provider", "test",
		"size", "median_us", "min_us", "max_us", "GB/s", "ratio");
	for (unsigned int i = 0; i < cfg.nsizes; i++)
		bench_size(PINGPONG, cfg.sizes[i], rtt);
	for (unsigned int i = 0; i < cfg.nssizes; i++)
		bench_size(STREAM, cfg.ssizes[i], rtt);
}

int main(int argc, char **argv)
{
	pthread_t th[2];
	double *rtt;

	parse_args(argc, argv);
	rtt = malloc(MAX_ROUNDS * sizeof(*rtt));
	if (!rtt)
		check(-ENOMEM, "malloc");
	check(-pthread_barrier_init(&bar, NULL, 3), "pthread_barrier_init");
	sides[0].fd = sides[1].fd = -1;
	if (!cfg.serve)
		sock_listen(); /* the stream samples on command need no baseline */
	for (int s = 0; s < 2; s++) {
		sides[s].id = s;
		check(-pthread_create(&th[s], NULL, side_main, &sides[s]),
		      "pthread_create");
	}
	pthread_barrier_wait(&bar); /* side 1 listens, side 0's socket is in */
	if (!cfg.serve)
		sock_accept();
	pthread_barrier_wait(&bar); /* both connected, descriptors out */
	pthread_barrier_wait(&bar); /* both hold the peer's descriptor */
	if (cfg.serve)
		serve();
	else
		bench_all(rtt);

	job_now = NULL;
	pthread_barrier_wait(&bar);
	for (int s = 0; s < 2; s++)
		check(-pthread_join(th[s], NULL), "pthread_join");
	pthread_barrier_destroy(&bar);
	free(rtt);
	return 0;
}
