/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_transport.c - the transport conformance suite, run for every
 * provider and backend (BACKEND_TEST defines each test once per backend:
 * tcp over loopback with io_uring by default, with epoll, and with
 * io_uring zero-copy sends forced on loopback; and verbs, over the RDMA
 * device whose IP address is in KANEL_RDMA_ADDR, skipped with the reason
 * where there is none; tests/rxe/ runs them on soft-RoCE in a VM; and
 * dpdk, over the interfaces in KANEL_DPDK_IFACES, skipped where that is
 * unset; tests/dpdk/netns.sh runs them on a veth pair in a namespace):
 * write-with-immediate and read of 0 B to 64 MiB verified byte for byte,
 * immediates once each and in order, send/recv with and without a recv
 * posted first, completions in post order, arguments refused at post
 * time, malformed frames from a raw socket, a peer dying mid-transfer,
 * 64 endpoints at once.  Every wait has a deadline: nothing can hang.
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <linux/capability.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef KN_HAVE_VERBS
#include <fcntl.h>
#include <rdma/rdma_cma.h>
#endif

#include "transport.h"
#include "wire.h"

#define WAIT_S 20 /* deadline of every wait */
#define QLEN   4096

/* The contexts of a test, each with the completions not yet consumed. */
struct side {
	struct kn__tp_ctx *ctx;
	struct kn__tp_completion q[QLEN];
	unsigned int head, tail;
};

static struct side sides[2];

static const char *provider = "tcp";
static uint32_t backend_flags;
static uint32_t cq_depth;      /* 0: the default */
static struct in_addr test_ip; /* where the tests listen and connect */

static void use_tcp(uint32_t flags)
{
	provider = "tcp";
	backend_flags = flags;
	test_ip.s_addr = htonl(INADDR_LOOPBACK);
}

/* The verbs provider on the device that has KANEL_RDMA_ADDR, or a skip. */
static void use_verbs(void)
{
	struct kn__tp_ctx_attr attr = { .provider = "verbs" };
	const char *ip = getenv("KANEL_RDMA_ADDR");
	struct kn__tp_ctx *ctx;
	int ret = kn__tp_ctx_create(&attr, &ctx);

	if (ret == -ENOENT)
		cr_skip_test("built without the verbs provider "
			     "(libibverbs-dev and librdmacm-dev missing)");
	if (ret == -ENODEV)
		cr_skip_test("no RDMA device here; tests/rxe/ runs these "
			     "tests on soft-RoCE in a VM");
	cr_assert_eq(ret, 0, "verbs context: %s", strerror(-ret));
	kn__tp_ctx_destroy(ctx);
	if (!ip)
		cr_skip_test("KANEL_RDMA_ADDR is not set to an IP address "
			     "of the RDMA device");
	cr_assert_eq(inet_pton(AF_INET, ip, &test_ip), 1,
		     "KANEL_RDMA_ADDR=%s is no IPv4 address", ip);
	provider = "verbs";
	backend_flags = 0;
}

/*
 * The dpdk provider on the interfaces in KANEL_DPDK_IFACES, or a skip.
 * The variable is checked before any context is made, so that where it
 * is unset no test starts DPDK's EAL only to be told -ENODEV.  Each
 * context claims one of the interfaces: the probe's is given back
 * before the test opens its own two.  The handshake is a kernel TCP
 * connection to the listener's address, so the tests listen and
 * connect on loopback as tcp does, whichever interfaces carry the data.
 */
static void use_dpdk(void)
{
	struct kn__tp_ctx_attr attr = { .provider = "dpdk" };
	struct kn__tp_ctx *ctx;
	int ret;

	if (!getenv("KANEL_DPDK_IFACES"))
		cr_skip_test("KANEL_DPDK_IFACES is not set: "
			     "tests/dpdk/netns.sh runs these tests on a "
			     "veth pair");
	ret = kn__tp_ctx_create(&attr, &ctx);
	if (ret == -ENOENT)
		cr_skip_test("built without the dpdk provider "
			     "(libdpdk-dev missing)");
	cr_assert_eq(ret, 0, "dpdk context on KANEL_DPDK_IFACES=%s: %s",
		     getenv("KANEL_DPDK_IFACES"), strerror(-ret));
	kn__tp_ctx_destroy(ctx);
	provider = "dpdk";
	backend_flags = 0;
	test_ip.s_addr = htonl(INADDR_LOOPBACK);
}

/* Tests of the tcp wire itself: one per tcp backend. */
#define TCP_TEST(suite, name)                   \
	static void name##_body(void);          \
	Test(suite, name##_default)             \
	{                                       \
		use_tcp(0);                     \
		name##_body();                  \
	}                                       \
	Test(suite, name##_epoll)               \
	{                                       \
		use_tcp(KN_TP_CTX_FORCE_EPOLL); \
		name##_body();                  \
	}                                       \
	Test(suite, name##_zerocopy)            \
	{                                       \
		use_tcp(KN_TP_CTX_ZC_LOOPBACK); \
		name##_body();                  \
	}                                       \
	static void name##_body(void)

/* Tests of the interface: every tcp backend, verbs and dpdk. */
#define BACKEND_TEST(suite, name)      \
	static void name##_body(void); \
	TCP_TEST(suite, name##_tcp)    \
	{                              \
		name##_body();         \
	}                              \
	Test(suite, name##_verbs)      \
	{                              \
		use_verbs();           \
		name##_body();         \
	}                              \
	Test(suite, name##_dpdk)       \
	{                              \
		use_dpdk();            \
		name##_body();         \
	}                              \
	static void name##_body(void)

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void open_sides(void)
{
	struct kn__tp_ctx_attr attr = { .provider = provider,
					.flags = backend_flags,
					.cq_depth = cq_depth,
					/* zero-copy from 4 KiB when forced */
					.zc_threshold = 4096 };

	for (int s = 0; s < 2; s++) {
		sides[s].head = sides[s].tail = 0;
		cr_assert_eq(kn__tp_ctx_create(&attr, &sides[s].ctx), 0);
	}
}

static void close_sides(void)
{
	for (int s = 0; s < 2; s++)
		kn__tp_ctx_destroy(sides[s].ctx);
}

/* Poll every context once, queueing what comes back. */
static void pump(void)
{
	for (int s = 0; s < 2; s++) {
		struct side *d = &sides[s];
		int room = (int)(QLEN - (d->tail - d->head)), n;
		struct kn__tp_completion c[64];

		if (room > 64)
			room = 64;
		if (room <= 0)
			continue;
		n = kn__tp_poll(d->ctx, c, room);
		cr_assert_geq(n, 0, "poll: %s", strerror(-n));
		for (int i = 0; i < n; i++)
			d->q[d->tail++ % QLEN] = c[i];
	}
}

/* The next completion of side @s, pumping both sides until it comes. */
static struct kn__tp_completion next(int s)
{
	double end = now() + WAIT_S;

	while (sides[s].head == sides[s].tail) {
		cr_assert_lt(now(), end, "side %d: no completion in %d s", s,
			     WAIT_S);
		pump();
	}
	return sides[s].q[sides[s].head++ % QLEN];
}

static struct kn__tp_completion expect(int s, uint32_t op)
{
	struct kn__tp_completion c = next(s);

	cr_assert_eq(c.op, op, "side %d: op %u, expected %u (status %d)", s,
		     c.op, op, c.status);
	return c;
}

/* @port on the address of the provider under test. */
static struct sockaddr_in test_addr(uint16_t port)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_port = htons(port),
				 .sin_addr = test_ip };

	return a;
}

/* Side 0 listens, side 1 connects: the two ends of one connection. */
struct conn {
	struct kn__tp_listener *l;
	struct kn__tp_ep *e0, *e1;
	struct sockaddr_in addr;
};

static void listen0(struct conn *c)
{
	struct sockaddr_in any = test_addr(0);
	struct sockaddr_storage ss;

	cr_assert_eq(kn__tp_listen(sides[0].ctx, (struct sockaddr *)&any,
				   sizeof(any), c, &c->l),
		     0);
	cr_assert_eq(kn__tp_listener_addr(c->l, &ss), 0);
	memcpy(&c->addr, &ss, sizeof(c->addr));
}

static void connect_pair(struct conn *c)
{
	struct kn__tp_completion a;

	listen0(c);
	cr_assert_eq(kn__tp_connect(sides[1].ctx, (struct sockaddr *)&c->addr,
				    sizeof(c->addr), c, &c->e1),
		     0);
	a = expect(0, KN_TP_OP_ACCEPT);
	cr_assert_eq(a.user, c);
	c->e0 = a.ep;
	a = expect(1, KN_TP_OP_CONNECT);
	cr_assert_eq(a.status, 0);
	cr_assert_eq(a.ep, c->e1);
}

/* Let @ep's peer reach all of @mr, with its rights: the descriptor. */
static void grant(struct kn__tp_ep *ep, struct kn__tp_mr *mr,
		  struct kn__tp_rdesc *rd)
{
	cr_assert_eq(kn__tp_ep_grant(ep, mr, 0, kn__tp_mr_len(mr),
				     kn__tp_mr_access(mr), rd),
		     0);
}

static void fill(char *p, size_t n, unsigned int seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (char)((i * 2654435761u + seed) >> 13);
}

/* One connection and a transfer's two regions, the remote one granted. */
struct path {
	struct conn c;
	struct kn__tp_mr *ms, *md;
	struct kn__tp_rdesc rd;
};

/*
 * The sides open and connected, and a transfer of @n bytes that side 1
 * starts, from @src to @dst: the buffer on side 0 (@dst for
 * KN_TP_REMOTE_WRITE, @src for KN_TP_REMOTE_READ) registered with
 * @access and granted to side 1 in p->rd, the other registered on side 1
 * for local use.
 */
static void open_path(struct path *p, void *src, void *dst, size_t n,
		      uint32_t access)
{
	bool read = access == KN_TP_REMOTE_READ;

	open_sides();
	connect_pair(&p->c);
	cr_assert_eq(kn__tp_mr_reg(sides[read ? 0 : 1].ctx, src, n,
				   read ? access : 0, &p->ms),
		     0);
	cr_assert_eq(kn__tp_mr_reg(sides[read ? 1 : 0].ctx, dst, n,
				   read ? 0 : access, &p->md),
		     0);
	grant(p->c.e0, read ? p->ms : p->md, &p->rd);
}

static const size_t sizes[] = { 0, 1, 4095, 4096, 1 << 20, 16 << 20, 64 << 20 };
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))
#define TOTAL  ((1u << 20) + (16u << 20) + (64u << 20) + 3 * 4096)

/* open_path on TOTAL bytes each, the source filled from @seed and the
 * destination zeroed, for every size in turn. */
static void open_every_size(struct path *p, char **src, char **dst,
			    uint32_t access, unsigned int seed)
{
	*src = malloc(TOTAL);
	*dst = calloc(1, TOTAL);
	cr_assert(*src && *dst);
	fill(*src, TOTAL, seed);
	open_path(p, *src, *dst, TOTAL, access);
}

/* The first @bytes arrived as they left; then all of it goes. */
static void close_every_size(struct path *p, char *src, char *dst, size_t bytes)
{
	cr_assert_eq(memcmp(src, dst, bytes), 0, "data differs");
	kn__tp_mr_dereg(p->ms);
	kn__tp_mr_dereg(p->md);
	close_sides();
	free(src);
	free(dst);
}

BACKEND_TEST(transport, write_imm_every_size_in_order)
{
	char *src, *dst;
	struct path p;
	size_t off = 0;

	open_every_size(&p, &src, &dst, KN_TP_REMOTE_WRITE, 1);
	for (size_t i = 0; i < NSIZES; i++) {
		cr_assert_eq(kn__tp_post_write_imm(
				     p.c.e1, p.ms, off, sizes[i], &p.rd, off,
				     100 + (uint32_t)i, (void *)(i + 1)),
			     0);
		off += sizes[i];
	}
	for (size_t i = 0; i < NSIZES; i++) {
		struct kn__tp_completion r = expect(0, KN_TP_OP_RECV_IMM);
		struct kn__tp_completion w = expect(1, KN_TP_OP_WRITE_IMM);

		cr_assert_eq(r.imm, 100 + i, "immediates out of order");
		cr_assert_eq(r.bytes, sizes[i]);
		cr_assert_eq(r.status, 0);
		cr_assert_eq(w.user, (void *)(i + 1));
		cr_assert_eq(w.status, 0);
	}
	/* nothing more: each immediate came exactly once */
	for (int k = 0; k < 50; k++)
		pump();
	cr_assert_eq(sides[0].head, sides[0].tail);
	close_every_size(&p, src, dst, off);
}

BACKEND_TEST(transport, read_every_size)
{
	char *src, *dst;
	struct path p;
	size_t off = 0;

	open_every_size(&p, &src, &dst, KN_TP_REMOTE_READ, 2);
	for (size_t i = 0; i < NSIZES; i++) {
		cr_assert_eq(kn__tp_post_read(p.c.e1, p.md, off, sizes[i],
					      &p.rd, off, (void *)(i + 1)),
			     0);
		off += sizes[i];
	}
	for (size_t i = 0; i < NSIZES; i++) {
		struct kn__tp_completion r = expect(1, KN_TP_OP_READ);

		cr_assert_eq(r.status, 0);
		cr_assert_eq(r.user, (void *)(i + 1));
		cr_assert_eq(r.bytes, sizes[i]);
	}
	close_every_size(&p, src, dst, off);
}

BACKEND_TEST(transport, send_recv_with_and_without_a_posted_recv)
{
	static char out[3][4096], in[4][4096];
	static const size_t len[3] = { 0, 100, 4096 };
	struct kn__tp_mr *mo, *mi;
	struct conn c;

	open_sides();
	connect_pair(&c);
	cr_assert_eq(kn__tp_mr_reg(sides[1].ctx, out, sizeof(out), 0, &mo), 0);
	cr_assert_eq(kn__tp_mr_reg(sides[0].ctx, in, sizeof(in), 0, &mi), 0);
	for (int i = 0; i < 3; i++) {
		fill(out[i], sizeof(out[i]), 10 + (unsigned int)i);
		cr_assert_eq(kn__tp_post_recv(c.e0, mi, 4096 * (size_t)i, 4096,
					      (void *)(uintptr_t)(i + 1)),
			     0);
	}
	for (int i = 0; i < 3; i++)
		cr_assert_eq(kn__tp_post_send(c.e1, mo, 4096 * (size_t)i,
					      len[i], NULL),
			     0);
	for (int i = 0; i < 3; i++) {
		struct kn__tp_completion r = expect(0, KN_TP_OP_RECV);

		cr_assert_eq(r.user, (void *)(uintptr_t)(i + 1));
		cr_assert_eq(r.bytes, len[i]);
		cr_assert_eq(memcmp(in[i], out[i], len[i]), 0);
		cr_assert_eq(expect(1, KN_TP_OP_SEND).status, 0);
	}
	/* a message with no recv posted waits for one, then lands */
	cr_assert_eq(kn__tp_post_send(c.e1, mo, 4096, 100, NULL), 0);
	expect(1, KN_TP_OP_SEND);
	for (int k = 0; k < 50; k++)
		pump();
	cr_assert_eq(sides[0].head, sides[0].tail, "a message with no recv");
	cr_assert_eq(kn__tp_post_recv(c.e0, mi, 3 * 4096, 4096, (void *)9), 0);
	cr_assert_eq(expect(0, KN_TP_OP_RECV).bytes, 100);
	cr_assert_eq(memcmp(in[3], out[1], 100), 0);
	kn__tp_mr_dereg(mo);
	kn__tp_mr_dereg(mi);
	close_sides();
}

BACKEND_TEST(transport, completions_in_post_order)
{
	static char loc[1 << 16], rem[1 << 16], msg[4][64];
	struct kn__tp_mr *ml, *mr, *mm;
	struct kn__tp_rdesc rd;
	struct conn c;

	open_sides();
	connect_pair(&c);
	cr_assert_eq(kn__tp_mr_reg(sides[1].ctx, loc, sizeof(loc), 0, &ml), 0);
	cr_assert_eq(kn__tp_mr_reg(sides[0].ctx, rem, sizeof(rem),
				   KN_TP_REMOTE_READ | KN_TP_REMOTE_WRITE, &mr),
		     0);
	cr_assert_eq(kn__tp_mr_reg(sides[0].ctx, msg, sizeof(msg), 0, &mm), 0);
	grant(c.e0, mr, &rd);
	for (int i = 0; i < 4; i++)
		cr_assert_eq(
			kn__tp_post_recv(c.e0, mm, 64 * (size_t)i, 64, NULL),
			0);
	/* reads finish last on the wire, yet complete in their place */
	for (uintptr_t i = 0; i < 12; i++) {
		int ret;

		if (i % 3 == 0)
			ret = kn__tp_post_read(c.e1, ml, 4096 * i, 4096, &rd,
					       4096 * i, (void *)(i + 1));
		else if (i % 3 == 1)
			ret = kn__tp_post_write_imm(c.e1, ml, 4096 * i, 4096,
						    &rd, 4096 * i, 0,
						    (void *)(i + 1));
		else
			ret = kn__tp_post_send(c.e1, ml, 0, 64,
					       (void *)(i + 1));
		cr_assert_eq(ret, 0);
	}
	for (uintptr_t i = 0; i < 12; i++) {
		struct kn__tp_completion r = next(1);
		static const uint32_t ops[3] = { KN_TP_OP_READ,
						 KN_TP_OP_WRITE_IMM,
						 KN_TP_OP_SEND };

		cr_assert_eq(r.user, (void *)(i + 1), "completion %lu",
			     (unsigned long)i);
		cr_assert_eq(r.op, ops[i % 3]);
		cr_assert_eq(r.status, 0);
	}
	close_sides();
}

BACKEND_TEST(transport, bad_arguments_refused_at_post)
{
	static char buf[8192], rbuf[4096], msg[4096];
	struct kn__tp_mr *m, *mw, *mr, *mm, *bad = NULL;
	struct kn__tp_rdesc rw, rr;
	struct conn c;

	open_sides();
	connect_pair(&c);
	cr_assert_eq(kn__tp_mr_reg(sides[1].ctx, buf, sizeof(buf), 0, &m), 0);
	cr_assert_eq(kn__tp_mr_reg(sides[0].ctx, rbuf, 4096, KN_TP_REMOTE_WRITE,
				   &mw),
		     0);
	cr_assert_eq(
		kn__tp_mr_reg(sides[0].ctx, rbuf, 4096, KN_TP_REMOTE_READ, &mr),
		0);
	cr_assert_eq(kn__tp_mr_reg(sides[0].ctx, msg, sizeof(msg), 0, &mm), 0);
	grant(c.e0, mw, &rw);
	grant(c.e0, mr, &rr);
	/* outside the local region */
	cr_assert_eq(kn__tp_post_write_imm(c.e1, m, 8100, 100, &rw, 0, 0, NULL),
		     -EINVAL);
	cr_assert_eq(
		kn__tp_post_write_imm(c.e1, m, SIZE_MAX, 2, &rw, 0, 0, NULL),
		-EINVAL);
	/* outside the remote region, or without the right */
	cr_assert_eq(kn__tp_post_write_imm(c.e1, m, 0, 100, &rw, 4000, 0, NULL),
		     -EINVAL);
	cr_assert_eq(kn__tp_post_write_imm(c.e1, m, 0, 100, &rr, 0, 0, NULL),
		     -EINVAL);
	cr_assert_eq(kn__tp_post_read(c.e1, m, 0, 100, &rw, 0, NULL), -EINVAL);
	cr_assert_eq(kn__tp_post_read(c.e1, m, 0, 100, &rr, UINT64_MAX, NULL),
		     -EINVAL);
	/* a message above max_msg (4096), a region of another context */
	cr_assert_eq(kn__tp_post_send(c.e1, m, 0, 4097, NULL), -EMSGSIZE);
	cr_assert_eq(kn__tp_post_send(c.e1, mw, 0, 16, NULL), -EINVAL);
	/* unknown access bits; the out-parameter is left alone */
	cr_assert_eq(kn__tp_mr_reg(sides[0].ctx, buf, 16, 1u << 7, &bad),
		     -EINVAL);
	cr_assert_null(bad);
	/* the endpoint still works */
	cr_assert_eq(kn__tp_post_recv(c.e0, mm, 0, sizeof(msg), NULL), 0);
	cr_assert_eq(kn__tp_post_send(c.e1, m, 0, 4096, NULL), 0);
	cr_assert_eq(kn__tp_post_write_imm(c.e1, m, 0, 100, &rw, 0, 5, NULL),
		     0);
	cr_assert_eq(expect(1, KN_TP_OP_SEND).status, 0);
	cr_assert_eq(expect(1, KN_TP_OP_WRITE_IMM).status, 0);
	cr_assert_eq(expect(0, KN_TP_OP_RECV).bytes, 4096);
	cr_assert_eq(expect(0, KN_TP_OP_RECV_IMM).imm, 5);
	close_sides();
}

/* A raw socket speaking the wire format, for frames no post can make. */
static int raw_connect(const struct sockaddr_in *addr)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	cr_assert_geq(fd, 0);
	cr_assert_eq(connect(fd, (const struct sockaddr *)addr, sizeof(*addr)),
		     0);
	return fd;
}

static void raw_frame(int fd, const struct kn__wire_hdr *h, const void *p,
		      size_t n)
{
	uint8_t b[KN_WIRE_HDR_LEN];

	kn__wire_encode(h, b);
	cr_assert_eq(send(fd, b, sizeof(b), MSG_NOSIGNAL), (ssize_t)sizeof(b));
	if (n)
		cr_assert_eq(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
}

/* The accepted endpoint of a raw peer fails with @status, alone. */
static void expect_rejected(int fd, int status)
{
	struct kn__tp_completion d = expect(0, KN_TP_OP_DISCONNECT);
	char b;

	cr_assert_eq(d.status, status, "status %d, expected %d", d.status,
		     status);
	kn__tp_ep_close(d.ep);
	/* the raw peer's socket is shut */
	cr_assert_leq(recv(fd, &b, 1, 0), 0);
	close(fd);
}

TCP_TEST(transport, malformed_frames_close_only_their_endpoint)
{
	static char region[4096], canary[4096], src[4096];
	static const struct kn__wire_hdr refused[] = {
		{ .op = KN_WIRE_WRITE_IMM, .offset = 4000, .length = 200 },
		{ .op = KN_WIRE_WRITE_IMM,
		  .offset = UINT64_MAX - 10,
		  .length = 100 },
		{ .op = KN_WIRE_WRITE_IMM, .region = 1, .length = 10 },
		{ .op = KN_WIRE_READ_REQ, .length = 10 },
	};
	struct kn__tp_mr *m, *ms;
	struct kn__tp_rdesc rd;
	struct conn c;
	uint8_t junk[KN_WIRE_HDR_LEN];
	int fd;

	open_sides();
	connect_pair(&c); /* a good connection that must survive */
	memset(region, 0x11, sizeof(region));
	memset(canary, 0x11, sizeof(canary));
	cr_assert_eq(kn__tp_mr_reg(sides[0].ctx, region, sizeof(region),
				   KN_TP_REMOTE_WRITE, &m),
		     0);
	grant(c.e0, m, &rd);

	/* garbage instead of a header */
	fd = raw_connect(&c.addr);
	expect(0, KN_TP_OP_ACCEPT);
	memset(junk, 0xee, sizeof(junk));
	cr_assert_eq(send(fd, junk, sizeof(junk), MSG_NOSIGNAL),
		     (ssize_t)sizeof(junk));
	expect_rejected(fd, -EPROTO);

	/*
	 * Frames a granted raw peer may not send: a write past the end of
	 * the region, an offset that wraps around, a key nobody granted
	 * (region counts from the grant's key), and a read without the
	 * right.  A write carries its length in payload.
	 */
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		struct kn__wire_hdr h = refused[i];
		bool write = h.op == KN_WIRE_WRITE_IMM;

		fd = raw_connect(&c.addr);
		grant(expect(0, KN_TP_OP_ACCEPT).ep, m, &rd);
		h.region += rd.key;
		raw_frame(fd, &h, write ? src : NULL, write ? h.length : 0);
		expect_rejected(fd, -EACCES);
	}

	/* a frame out of sequence, an answer to no read */
	fd = raw_connect(&c.addr);
	expect(0, KN_TP_OP_ACCEPT);
	raw_frame(fd, &(struct kn__wire_hdr){ .op = KN_WIRE_SEND, .seq = 7 },
		  NULL, 0);
	expect_rejected(fd, -EPROTO);
	fd = raw_connect(&c.addr);
	expect(0, KN_TP_OP_ACCEPT);
	raw_frame(
		fd,
		&(struct kn__wire_hdr){ .op = KN_WIRE_READ_RESP, .length = 4 },
		src, 4);
	expect_rejected(fd, -EPROTO);

	/* half a header, then gone */
	fd = raw_connect(&c.addr);
	expect(0, KN_TP_OP_ACCEPT);
	cr_assert_eq(send(fd, junk, 10, MSG_NOSIGNAL), 10);
	shutdown(fd, SHUT_WR);
	expect_rejected(fd, -ECONNRESET);

	/* nothing was written, and the good connection still works */
	cr_assert_eq(memcmp(region, canary, sizeof(region)), 0);
	grant(c.e0, m, &rd);
	cr_assert_eq(kn__tp_mr_reg(sides[1].ctx, src, sizeof(src), 0, &ms), 0);
	fill(src, sizeof(src), 3);
	cr_assert_eq(kn__tp_post_write_imm(c.e1, ms, 0, 4096, &rd, 0, 77, NULL),
		     0);
	cr_assert_eq(expect(0, KN_TP_OP_RECV_IMM).imm, 77);
	cr_assert_eq(memcmp(region, src, sizeof(src)), 0);
	close_sides();
}

/*
 * Nothing reaches memory before a grant: one-sided frames on a fresh
 * connection fail it, even with a key that is valid on another
 * connection, a zero-length probe included, and read nothing back.
 */
TCP_TEST(transport, one_sided_frames_before_a_grant_fail_their_endpoint)
{
	static char region[4096], canary[4096], src[4096];
	const struct kn__wire_hdr frames[] = {
		{ .op = KN_WIRE_WRITE_IMM, .length = 64 },
		{ .op = KN_WIRE_WRITE_IMM, .length = 0 },
		{ .op = KN_WIRE_READ_REQ, .length = 64 },
	};
	struct kn__tp_mr *m, *ms;
	struct kn__tp_rdesc rd;
	struct conn c;

	open_sides();
	connect_pair(&c);
	memset(region, 0x22, sizeof(region));
	memcpy(canary, region, sizeof(region));
	fill(src, sizeof(src), 60);
	cr_assert_eq(kn__tp_mr_reg(sides[0].ctx, region, sizeof(region),
				   KN_TP_REMOTE_WRITE | KN_TP_REMOTE_READ, &m),
		     0);
	grant(c.e0, m, &rd); /* the good connection's, not the raw peer's */
	for (size_t i = 0; i < sizeof(frames) / sizeof(frames[0]); i++) {
		struct kn__wire_hdr h = frames[i];
		int fd = raw_connect(&c.addr);

		expect(0, KN_TP_OP_ACCEPT);
		h.region = rd.key;
		raw_frame(fd, &h, src,
			  h.op == KN_WIRE_WRITE_IMM ? h.length : 0);
		expect_rejected(fd, -EACCES);
		cr_assert_eq(memcmp(region, canary, sizeof(region)), 0,
			     "frame %zu reached the region", i);
	}
	cr_assert_eq(kn__tp_mr_reg(sides[1].ctx, src, sizeof(src), 0, &ms), 0);
	cr_assert_eq(kn__tp_post_write_imm(c.e1, ms, 0, 64, &rd, 0, 8, NULL),
		     0);
	cr_assert_eq(expect(0, KN_TP_OP_RECV_IMM).imm, 8);
	cr_assert_eq(memcmp(region, src, 64), 0);
	close_sides();
}

/*
 * Two peers, each granted its own half of one region: one that names
 * the other's descriptor, or writes past its own half, fails alone and
 * leaves every byte as it was.
 */
BACKEND_TEST(transport, a_peer_reaches_only_its_own_grant)
{
	static char region[4096], canary[4096], src[4096];
	struct kn__tp_rdesc ra, rb;
	struct kn__tp_mr *m, *ms;
	struct kn__tp_ep *b1, *b0;
	struct kn__tp_completion w;
	struct conn c;

	open_sides();
	connect_pair(&c);
	cr_assert_eq(kn__tp_connect(sides[1].ctx, (struct sockaddr *)&c.addr,
				    sizeof(c.addr), NULL, &b1),
		     0);
	b0 = expect(0, KN_TP_OP_ACCEPT).ep;
	cr_assert_eq(expect(1, KN_TP_OP_CONNECT).status, 0);
	memset(region, 0x33, sizeof(region));
	fill(src, sizeof(src), 70);
	cr_assert_eq(kn__tp_mr_reg(sides[0].ctx, region, sizeof(region),
				   KN_TP_REMOTE_WRITE, &m),
		     0);
	cr_assert_eq(kn__tp_mr_reg(sides[1].ctx, src, sizeof(src), 0, &ms), 0);
	cr_assert_eq(kn__tp_ep_grant(c.e0, m, 0, 2048, KN_TP_REMOTE_WRITE, &ra),
		     0);
	cr_assert_eq(
		kn__tp_ep_grant(b0, m, 2048, 2048, KN_TP_REMOTE_WRITE, &rb), 0);
	/* rights beyond the region's, or a range outside it: refused */
	cr_assert_eq(kn__tp_ep_grant(b0, m, 0, 16, KN_TP_REMOTE_READ, &rb),
		     -EINVAL);
	cr_assert_eq(kn__tp_ep_grant(b0, m, 4000, 200, KN_TP_REMOTE_WRITE, &rb),
		     -EINVAL);
	/* each peer writes its own half, at offsets relative to it */
	cr_assert_eq(kn__tp_post_write_imm(c.e1, ms, 0, 2048, &ra, 0, 1, NULL),
		     0);
	cr_assert_eq(kn__tp_post_write_imm(b1, ms, 2048, 2048, &rb, 0, 2, NULL),
		     0);
	/* from two connections: in either order */
	cr_assert_eq(expect(0, KN_TP_OP_RECV_IMM).imm +
			     expect(0, KN_TP_OP_RECV_IMM).imm,
		     3);
	cr_assert_eq(expect(1, KN_TP_OP_WRITE_IMM).status, 0);
	cr_assert_eq(expect(1, KN_TP_OP_WRITE_IMM).status, 0);
	cr_assert_eq(memcmp(region, src, sizeof(src)), 0);
	memcpy(canary, region, sizeof(region));

	/*
	 * Peer b names a's descriptor: b fails, alone.  Not over verbs
	 * without memory windows (KANEL_RDMA_MW=0), where an rkey works on
	 * every connection of the context, as docs/rdma.md says.
	 */
	if (strcmp(provider, "verbs") == 0 && getenv("KANEL_RDMA_MW") &&
	    strcmp(getenv("KANEL_RDMA_MW"), "0") == 0) {
		cr_log_info("no windows: an rkey is not bound to a connection");
	} else {
		cr_assert_eq(
			kn__tp_post_write_imm(b1, ms, 0, 64, &ra, 0, 3, NULL),
			0);
		w = expect(1, KN_TP_OP_WRITE_IMM);
		if (strcmp(provider, "verbs") == 0)
			cr_assert_eq(w.status, -EACCES, "%s",
				     strerror(-w.status));
		cr_assert_lt(expect(1, KN_TP_OP_DISCONNECT).status, 0);
		w = expect(0, KN_TP_OP_DISCONNECT);
		cr_assert_eq(w.ep, b0);
		cr_assert_eq(memcmp(region, canary, sizeof(region)), 0);
	}
	kn__tp_ep_close(b0);
	kn__tp_ep_close(b1);

	/* a's own descriptor, stretched past its half: a fails too */
	ra.len = sizeof(region);
	cr_assert_eq(kn__tp_post_write_imm(c.e1, ms, 0, 64, &ra, 2048, 4, NULL),
		     0);
	w = expect(1, KN_TP_OP_WRITE_IMM);
	if (strcmp(provider, "verbs") == 0)
		cr_assert_eq(w.status, -EACCES, "%s", strerror(-w.status));
	cr_assert_lt(expect(1, KN_TP_OP_DISCONNECT).status, 0);
	cr_assert_lt(expect(0, KN_TP_OP_DISCONNECT).status, 0);
	cr_assert_eq(memcmp(region, canary, sizeof(region)), 0);
	close_sides();
}

BACKEND_TEST(transport, peer_dying_mid_transfer_fails_the_survivor)
{
	size_t n = 64u << 20;
	char *src = malloc(n), *dst = malloc(n);
	struct kn__tp_completion d;
	struct path p;

	cr_assert(src && dst);
	open_path(&p, src, dst, n, KN_TP_REMOTE_WRITE);
	cr_assert_eq(kn__tp_post_write_imm(p.c.e1, p.ms, 0, n, &p.rd, 0, 1,
					   (void *)1),
		     0);
	for (int k = 0; k < 3; k++)
		pump(); /* part of it is across */
	kn__tp_ep_close(p.c.e1);
	d = expect(1, KN_TP_OP_WRITE_IMM);
	cr_assert_eq(d.status, -ECANCELED);
	cr_assert_null(d.ep);
	d = expect(0, KN_TP_OP_DISCONNECT);
	cr_assert_lt(d.status, 0);
	cr_assert_eq(d.ep, p.c.e0);
	/* a failed endpoint refuses posts until closed */
	cr_assert_eq(kn__tp_post_recv(p.c.e0, p.md, 0, 16, NULL), -ENOTCONN);
	kn__tp_ep_close(p.c.e0);
	close_sides();
	free(src);
	free(dst);
}

BACKEND_TEST(transport, connect_refused)
{
	struct sockaddr_in a;
	struct kn__tp_listener *l;
	struct sockaddr_storage ss;
	struct kn__tp_ep *ep;
	struct kn__tp_completion c;

	open_sides();
	/* a port that was free a moment ago */
	a = test_addr(0);
	cr_assert_eq(kn__tp_listen(sides[0].ctx, (struct sockaddr *)&a,
				   sizeof(a), NULL, &l),
		     0);
	cr_assert_eq(kn__tp_listener_addr(l, &ss), 0);
	memcpy(&a, &ss, sizeof(a));
	kn__tp_listener_close(l);
	cr_assert_eq(kn__tp_connect(sides[1].ctx, (struct sockaddr *)&a,
				    sizeof(a), (void *)3, &ep),
		     0);
	c = expect(1, KN_TP_OP_CONNECT);
	cr_assert_eq(c.status, -ECONNREFUSED);
	cr_assert_eq(c.user, (void *)3);
	kn__tp_ep_close(ep);
	close_sides();
}

static void many_endpoints(void)
{
	enum { NEP = 64, LEN = 65536 };
	static char src[NEP][LEN], dst[NEP][LEN];
	static struct kn__tp_rdesc out[NEP], in[NEP];
	struct kn__tp_ep *eps[NEP];
	struct kn__tp_mr *ms, *md, *mo, *mi;
	struct conn c;
	unsigned int next_k[NEP] = { 0 };
	int accepts = 0, got = 0, imms = 0, writes = 0, sends = 0, connects = 0;
	double end = now() + 3 * WAIT_S;

	open_sides();
	listen0(&c);
	cr_assert_eq(kn__tp_mr_reg(sides[1].ctx, src, sizeof(src), 0, &ms), 0);
	cr_assert_eq(kn__tp_mr_reg(sides[0].ctx, dst, sizeof(dst),
				   KN_TP_REMOTE_WRITE, &md),
		     0);
	cr_assert_eq(kn__tp_mr_reg(sides[0].ctx, out, sizeof(out), 0, &mo), 0);
	cr_assert_eq(kn__tp_mr_reg(sides[1].ctx, in, sizeof(in), 0, &mi), 0);
	/* posted before the connections are up: held until they are */
	for (int i = 0; i < NEP; i++) {
		cr_assert_eq(kn__tp_connect(sides[1].ctx,
					    (struct sockaddr *)&c.addr,
					    sizeof(c.addr), NULL, &eps[i]),
			     0);
		cr_assert_eq(kn__tp_post_recv(eps[i], mi, i * sizeof(in[0]),
					      sizeof(in[0]),
					      (void *)(uintptr_t)i),
			     0);
	}
	for (int i = 0; i < NEP; i++)
		fill(src[i], LEN, (unsigned int)i);
	/*
	 * Each accepted endpoint grants the region and sends the
	 * descriptor; each connector writes once it has its own.  Accepts
	 * and immediates interleave across endpoints.
	 */
	while (accepts < NEP || got < NEP || imms < NEP * 4 ||
	       writes < NEP * 4 || sends < NEP || connects < NEP) {
		struct kn__tp_completion r;

		cr_assert_lt(now(), end,
			     "%d accepts, %d descriptors, %d "
			     "immediates in %d s",
			     accepts, got, imms, 3 * WAIT_S);
		pump();
		if (sides[0].head == sides[0].tail &&
		    sides[1].head == sides[1].tail)
			continue;
		r = next(sides[0].head != sides[0].tail ? 0 : 1);
		cr_assert_eq(r.status, 0, "op %u: %d", r.op, r.status);
		switch (r.op) {
		case KN_TP_OP_ACCEPT:
			grant(r.ep, md, &out[accepts]);
			cr_assert_eq(kn__tp_post_send(r.ep, mo,
						      accepts * sizeof(out[0]),
						      sizeof(out[0]), NULL),
				     0);
			accepts++;
			break;
		case KN_TP_OP_RECV: {
			int i = (int)(uintptr_t)r.user;

			for (int k = 0; k < 4; k++)
				cr_assert_eq(
					kn__tp_post_write_imm(
						eps[i], ms,
						(size_t)i * LEN + k * LEN / 4,
						LEN / 4, &in[i],
						(size_t)i * LEN + k * LEN / 4,
						(uint32_t)(i * 4 + k), NULL),
					0);
			got++;
			break;
		}
		case KN_TP_OP_RECV_IMM:
			/* per endpoint, the immediates come in order */
			cr_assert_eq(r.imm % 4, next_k[r.imm / 4]++);
			imms++;
			break;
		case KN_TP_OP_WRITE_IMM:
			writes++;
			break;
		case KN_TP_OP_SEND:
			sends++;
			break;
		case KN_TP_OP_CONNECT:
			connects++;
			break;
		default:
			cr_assert_fail("unexpected completion %u", r.op);
		}
	}
	cr_assert_eq(memcmp(src, dst, sizeof(src)), 0);
	close_sides();
}

TCP_TEST(transport, adopted_socketpair)
{
	static char src[8192], dst[8192];
	struct kn__tp_ep *e0, *e1;
	struct kn__tp_mr *ms, *md;
	struct kn__tp_rdesc rd;
	int sv[2];

	open_sides();
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	cr_assert_eq(kn__tp_adopt(sides[0].ctx, sv[0], NULL, &e0), 0);
	cr_assert_eq(kn__tp_adopt(sides[1].ctx, sv[1], NULL, &e1), 0);
	cr_assert_eq(kn__tp_adopt(sides[1].ctx, -1, NULL, &e1), -EINVAL);
	fill(src, sizeof(src), 4);
	cr_assert_eq(kn__tp_mr_reg(sides[1].ctx, src, sizeof(src), 0, &ms), 0);
	cr_assert_eq(kn__tp_mr_reg(sides[0].ctx, dst, sizeof(dst),
				   KN_TP_REMOTE_WRITE, &md),
		     0);
	grant(e0, md, &rd);
	cr_assert_eq(
		kn__tp_post_write_imm(e1, ms, 0, sizeof(src), &rd, 0, 42, NULL),
		0);
	cr_assert_eq(expect(0, KN_TP_OP_RECV_IMM).imm, 42);
	cr_assert_eq(expect(1, KN_TP_OP_WRITE_IMM).status, 0);
	cr_assert_eq(memcmp(src, dst, sizeof(src)), 0);
	close_sides();
}

Test(transport, backend_names)
{
	struct kn__tp_ctx_attr attr = { .flags = KN_TP_CTX_FORCE_EPOLL };
	struct kn__tp_ctx *ctx;
	const char *name;

	cr_assert_eq(kn__tp_ctx_create(&attr, &ctx), 0);
	cr_assert_str_eq(kn__tp_ctx_provider(ctx), "tcp/epoll");
	kn__tp_ctx_destroy(ctx);
	/* the default is io_uring, unless the kernel refuses it */
	cr_assert_eq(kn__tp_ctx_create(NULL, &ctx), 0);
	name = kn__tp_ctx_provider(ctx);
	cr_assert(strcmp(name, "tcp/io_uring") == 0 ||
			  strcmp(name, "tcp/epoll") == 0,
		  "%s", name);
	cr_log_info("default backend: %s", name);
	kn__tp_ctx_destroy(ctx);
	attr = (struct kn__tp_ctx_attr){ .provider = "nope" };
	cr_assert_eq(kn__tp_ctx_create(&attr, &ctx), -ENOENT);
	attr = (struct kn__tp_ctx_attr){ .flags = 1u << 9 };
	cr_assert_eq(kn__tp_ctx_create(&attr, &ctx), -EINVAL);
}

BACKEND_TEST(transport, sixty_four_endpoints_at_once)
{
	cq_depth = 0;
	many_endpoints();
}

/* A completion queue of 2 entries holds the transport back, loses nothing. */
BACKEND_TEST(transport, tiny_completion_queue_loses_nothing)
{
	cq_depth = 2;
	many_endpoints();
	cq_depth = 0;
}

/*
 * A write to a region the peer never registered (a forged key) fails
 * the connection: the writer sees DISCONNECT, so does the peer, and
 * nothing was written.  Over verbs the write itself fails (the NIC
 * answers with a remote access error); over tcp it has left when it
 * completes, and the peer's verdict comes as the disconnect.
 */
BACKEND_TEST(transport, forged_region_key_fails_the_endpoint)
{
	static char src[4096], dst[4096], canary[4096];
	struct kn__tp_completion w;
	struct path p;

	open_path(&p, src, dst, sizeof(src), KN_TP_REMOTE_WRITE);
	p.rd.key ^= 0x5a5a00; /* a key of nothing */
	fill(src, sizeof(src), 40);
	cr_assert_eq(kn__tp_post_write_imm(p.c.e1, p.ms, 0, sizeof(src), &p.rd,
					   0, 1, (void *)1),
		     0);
	w = expect(1, KN_TP_OP_WRITE_IMM);
	cr_assert_eq(w.user, (void *)1);
	if (strcmp(provider, "verbs") == 0)
		cr_assert_eq(w.status, -EACCES, "%s", strerror(-w.status));
	cr_assert_lt(expect(1, KN_TP_OP_DISCONNECT).status, 0);
	cr_assert_eq(
		kn__tp_post_write_imm(p.c.e1, p.ms, 0, 16, &p.rd, 0, 2, NULL),
		-ENOTCONN);
	cr_assert_lt(expect(0, KN_TP_OP_DISCONNECT).status, 0);
	cr_assert_eq(memcmp(dst, canary, sizeof(dst)), 0);
	close_sides();
}

/* A connection closed on both sides comes up again, and works. */
BACKEND_TEST(transport, close_and_reconnect)
{
	static char src[4096], dst[4096];
	struct kn__tp_mr *ms, *md;
	struct kn__tp_rdesc rd;
	struct conn c;

	open_sides();
	cr_assert_eq(kn__tp_mr_reg(sides[1].ctx, src, sizeof(src), 0, &ms), 0);
	cr_assert_eq(kn__tp_mr_reg(sides[0].ctx, dst, sizeof(dst),
				   KN_TP_REMOTE_WRITE, &md),
		     0);
	connect_pair(&c);
	for (int round = 0; round < 3; round++) {
		/* a grant is the endpoint's: each connection gets its own */
		grant(c.e0, md, &rd);
		fill(src, sizeof(src), 20 + (unsigned int)round);
		cr_assert_eq(kn__tp_post_write_imm(c.e1, ms, 0, sizeof(src),
						   &rd, 0, (uint32_t)round,
						   NULL),
			     0);
		cr_assert_eq(expect(0, KN_TP_OP_RECV_IMM).imm, (uint32_t)round);
		cr_assert_eq(expect(1, KN_TP_OP_WRITE_IMM).status, 0);
		cr_assert_eq(memcmp(src, dst, sizeof(src)), 0);
		/* the initiator hangs up; the acceptor hears it */
		kn__tp_ep_close(c.e1);
		cr_assert_lt(expect(0, KN_TP_OP_DISCONNECT).status, 0);
		kn__tp_ep_close(c.e0);
		cr_assert_eq(kn__tp_connect(sides[1].ctx,
					    (struct sockaddr *)&c.addr,
					    sizeof(c.addr), &c, &c.e1),
			     0);
		c.e0 = expect(0, KN_TP_OP_ACCEPT).ep;
		cr_assert_eq(expect(1, KN_TP_OP_CONNECT).status, 0);
	}
	close_sides();
}

/*
 * A process that forks after registering (a data loader) keeps working:
 * the child writes its copy of a registered buffer, and what the peer
 * writes still lands in the parent's.
 */
BACKEND_TEST(transport, fork_after_registration)
{
	static char src[1 << 16], dst[1 << 16];
	struct path p;
	int status;
	pid_t pid;

	open_path(&p, src, dst, sizeof(src), KN_TP_REMOTE_WRITE);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		memset(dst, 0x5a, sizeof(dst)); /* the child's copy only */
		_exit(0);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	memset(dst, 0, sizeof(dst)); /* the parent's pages, after the fork */
	fill(src, sizeof(src), 30);
	cr_assert_eq(kn__tp_post_write_imm(p.c.e1, p.ms, 0, sizeof(src), &p.rd,
					   0, 9, NULL),
		     0);
	cr_assert_eq(expect(0, KN_TP_OP_RECV_IMM).imm, 9);
	cr_assert_eq(memcmp(src, dst, sizeof(src)), 0,
		     "the peer's write missed the parent's buffer");
	close_sides();
}

/*
 * poll_wait sleeps until its timeout when idle, wakes for a completion.
 * Side 0 sleeps in rounds of a second, and side 1 is polled between
 * them: a provider that makes its own reliability (dpdk) retransmits
 * only when its context is polled, so on a lossy link a lost write
 * comes again after the round in which it was lost.  The round that
 * returns the completion must end well before its timeout.
 */
BACKEND_TEST(transport, poll_wait_sleeps_and_wakes)
{
	static char src[64], dst[64];
	struct kn__tp_completion got[4];
	struct path p;
	double t0, t1;
	int n;

	open_path(&p, src, dst, sizeof(src), KN_TP_REMOTE_WRITE);
	t0 = now();
	cr_assert_eq(kn__tp_poll_wait(sides[0].ctx, got, 4, 200), 0);
	cr_assert_geq(now() - t0, 0.19, "woke after %.3f s", now() - t0);
	/* the peer's write arrives while side 0 sleeps */
	cr_assert_eq(kn__tp_post_write_imm(p.c.e1, p.ms, 0, sizeof(src), &p.rd,
					   0, 4, NULL),
		     0);
	t0 = now();
	do {
		struct kn__tp_completion other[4];

		t1 = now();
		n = kn__tp_poll_wait(sides[0].ctx, got, 4, 1000);
		cr_assert_geq(n, 0);
		if (n == 0)
			cr_assert_geq(kn__tp_poll(sides[1].ctx, other, 4), 0);
	} while (n == 0 && now() - t0 < WAIT_S);
	cr_assert_eq(n, 1, "no completion in %d s", WAIT_S);
	cr_assert_eq(got[0].op, KN_TP_OP_RECV_IMM);
	cr_assert_eq(got[0].imm, 4);
	cr_assert_lt(now() - t1, 0.5, "the completion woke side 0 after %.3f s",
		     now() - t1);
	close_sides();
}

/* ---- the verbs provider alone ---- */

Test(transport, verbs_context)
{
	struct kn__tp_ctx_attr attr = { .provider = "verbs" };
	struct kn__tp_ctx *ctx;
	struct kn__tp_ep *ep;
	int sv[2];

	use_verbs();
	cr_assert_eq(kn__tp_ctx_create(&attr, &ctx), 0);
	cr_assert_eq(strncmp(kn__tp_ctx_provider(ctx), "verbs/", 6), 0, "%s",
		     kn__tp_ctx_provider(ctx));
	cr_log_info("provider: %s", kn__tp_ctx_provider(ctx));
	/* no sockets to adopt */
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	cr_assert_eq(kn__tp_adopt(ctx, sv[0], NULL, &ep), -EOPNOTSUPP);
	close(sv[1]);
	kn__tp_ctx_destroy(ctx);
	attr.device = "no-such-device";
	cr_assert_eq(kn__tp_ctx_create(&attr, &ctx), -ENODEV);
	attr = (struct kn__tp_ctx_attr){ .provider = "verbs", .flags = 1 };
	cr_assert_eq(kn__tp_ctx_create(&attr, &ctx), -EINVAL);
}

/*
 * Registering a buffer again shares the registration: releasing one
 * handle leaves the other working, for a grant and the peer's writes.
 */
Test(transport, verbs_registration_cache)
{
	static char buf[1 << 16], src[4096];
	struct kn__tp_mr *a, *b, *part, *other, *ms;
	struct kn__tp_rdesc rd;
	struct conn c;

	use_verbs();
	open_sides();
	connect_pair(&c);
	cr_assert_eq(kn__tp_mr_reg(sides[0].ctx, buf, sizeof(buf),
				   KN_TP_REMOTE_WRITE, &a),
		     0);
	cr_assert_eq(kn__tp_mr_reg(sides[0].ctx, buf, sizeof(buf),
				   KN_TP_REMOTE_WRITE, &b),
		     0);
	/* other rights are another registration: least access */
	cr_assert_eq(kn__tp_mr_reg(sides[0].ctx, buf, sizeof(buf),
				   KN_TP_REMOTE_READ, &other),
		     0);
	cr_assert_eq(kn__tp_mr_reg(sides[0].ctx, buf + 4096, 4096, 0, &part),
		     0);
	cr_assert_eq(kn__tp_mr_reg(sides[1].ctx, src, sizeof(src), 0, &ms), 0);
	kn__tp_mr_dereg(a);
	grant(c.e0, b, &rd);
	fill(src, sizeof(src), 50);
	cr_assert_eq(kn__tp_post_write_imm(c.e1, ms, 0, sizeof(src), &rd, 0, 3,
					   NULL),
		     0);
	cr_assert_eq(expect(0, KN_TP_OP_RECV_IMM).imm, 3);
	cr_assert_eq(expect(1, KN_TP_OP_WRITE_IMM).status, 0);
	cr_assert_eq(memcmp(buf, src, sizeof(src)), 0);
	kn__tp_mr_dereg(b);
	kn__tp_mr_dereg(other);
	kn__tp_mr_dereg(part);
	close_sides();
}

/*
 * Without CAP_IPC_LOCK, a registration above RLIMIT_MEMLOCK fails at
 * once with -ENOMEM (and a message that says which limit to raise).
 */
Test(transport, verbs_memlock_limit_checked_up_front)
{
	struct __user_cap_header_struct hdr = {
		.version = _LINUX_CAPABILITY_VERSION_3
	};
	struct __user_cap_data_struct caps[2];
	struct rlimit rl = { 1 << 20, 1 << 20 };
	size_t big = 4u << 20;
	char *buf = malloc(big);
	struct kn__tp_mr *mr;

	use_verbs();
	cr_assert(buf);
	open_sides(); /* its own buffers are pinned before the limit */
	cr_assert_eq(syscall(SYS_capget, &hdr, caps), 0);
	caps[0].effective &= ~(1u << CAP_IPC_LOCK);
	cr_assert_eq(syscall(SYS_capset, &hdr, caps), 0);
	cr_assert_eq(setrlimit(RLIMIT_MEMLOCK, &rl), 0);
	cr_assert_eq(kn__tp_mr_reg(sides[0].ctx, buf, big, 0, &mr), -ENOMEM);
	close_sides();
	free(buf);
}

#ifdef KN_HAVE_VERBS
/* The next rdma_cm event of @ch, pumping both sides while it comes. */
static struct rdma_cm_event *raw_cm_event(struct rdma_event_channel *ch)
{
	struct rdma_cm_event *ev;
	double end = now() + WAIT_S;

	while (rdma_get_cm_event(ch, &ev)) {
		cr_assert_eq(errno, EAGAIN);
		cr_assert_lt(now(), end, "no rdma_cm event in %d s", WAIT_S);
		pump();
	}
	return ev;
}

/*
 * A listener turns away a connection that is not Kanel's (private data
 * without the magic) with a rejection that says why, and goes on
 * accepting Kanel's.
 */
Test(transport, verbs_listener_rejects_a_stranger)
{
	struct rdma_event_channel *ch;
	struct rdma_conn_param p = { .private_data = "stranger",
				     .private_data_len = 8,
				     .qp_num = 1,
				     .retry_count = 1 };
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;
	struct conn c;
	uint8_t reply[32];

	use_verbs();
	open_sides();
	listen0(&c);
	ch = rdma_create_event_channel();
	cr_assert(ch);
	cr_assert_eq(fcntl(ch->fd, F_SETFL, O_NONBLOCK), 0);
	cr_assert_eq(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), 0);
	cr_assert_eq(
		rdma_resolve_addr(id, NULL, (struct sockaddr *)&c.addr, 2000),
		0);
	ev = raw_cm_event(ch);
	cr_assert_eq(ev->event, RDMA_CM_EVENT_ADDR_RESOLVED);
	rdma_ack_cm_event(ev);
	cr_assert_eq(rdma_resolve_route(id, 2000), 0);
	ev = raw_cm_event(ch);
	cr_assert_eq(ev->event, RDMA_CM_EVENT_ROUTE_RESOLVED);
	rdma_ack_cm_event(ev);
	cr_assert_eq(rdma_connect(id, &p), 0);
	ev = raw_cm_event(ch);
	cr_assert_eq(ev->event, RDMA_CM_EVENT_REJECTED, "%s",
		     rdma_event_str(ev->event));
	/* docs/rdma.md: magic, version, ..., the reason at byte 24 */
	cr_assert_geq(ev->param.conn.private_data_len, sizeof(reply));
	memcpy(reply, ev->param.conn.private_data, sizeof(reply));
	rdma_ack_cm_event(ev);
	cr_assert_eq(memcmp(reply, "KNVB", 4), 0);
	cr_assert_eq(reply[24] << 24 | reply[25] << 16 | reply[26] << 8 |
			     reply[27],
		     EPROTO);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
	/* the listener still accepts Kanel */
	cr_assert_eq(kn__tp_connect(sides[1].ctx, (struct sockaddr *)&c.addr,
				    sizeof(c.addr), &c, &c.e1),
		     0);
	cr_assert_eq(expect(0, KN_TP_OP_ACCEPT).user, &c);
	cr_assert_eq(expect(1, KN_TP_OP_CONNECT).status, 0);
	close_sides();
}

static void set_link(const char *dev, const char *updown)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "ip link set %s %s", dev, updown);
	cr_assert_eq(system(cmd), 0, "%s", cmd);
}

/*
 * The port going down fails every endpoint of every context on the
 * device with -ENETDOWN: the async event reaches one context, the others
 * hear it through the device's alarm.  It takes the network interface
 * down, and rxe (Linux 6.1) does not carry rdma_cm traffic again after
 * a port went down under live connections, so it runs alone in a VM of
 * its own: meson test rxe/port-down sets KANEL_RXE_PORT_DOWN.
 */
Test(transport_rxe_alone, port_down_fails_every_endpoint)
{
	const char *dev = getenv("KANEL_RDMA_NETDEV");
	struct conn c;

	use_verbs();
	if (!dev || !getenv("KANEL_RXE_PORT_DOWN"))
		cr_skip_test("takes the RDMA interface down: runs only alone "
			     "in the rxe VM (meson test rxe/port-down)");
	open_sides();
	connect_pair(&c);
	set_link(dev, "down");
	cr_assert_eq(expect(0, KN_TP_OP_DISCONNECT).status, -ENETDOWN);
	cr_assert_eq(expect(1, KN_TP_OP_DISCONNECT).status, -ENETDOWN);
	kn__tp_ep_close(c.e0);
	kn__tp_ep_close(c.e1);
	close_sides();
	set_link(dev, "up");
}
#endif

/*
 * Two threads, each sleeping on its own context's fd between messages
 * (kn__tp_poll_wait with no busy-poll budget): 50 round trips must not
 * wait for timeouts.  A provider whose fd stays quiet while a completion
 * is pending (or that sleeps with requests not yet given to the kernel)
 * takes the 1 s timeout for every message and fails.
 */
struct echo {
	struct kn__tp_ctx *ctx;
	struct sockaddr_in addr;
	pthread_barrier_t *bar;
	struct echo *peer; /* the pinging side: the one it connects to */
	int rounds, status;
};

static int wait_op(struct kn__tp_ctx *ctx, uint32_t op,
		   struct kn__tp_completion *out)
{
	double end = now() + WAIT_S;

	while (now() < end) {
		int n = kn__tp_poll_wait(ctx, out, 1, 1000);

		if (n < 0)
			return n;
		if (n == 1 && out->op == op)
			return out->status;
		if (n == 1 && out->op != KN_TP_OP_SEND &&
		    out->op != KN_TP_OP_WRITE_IMM)
			return -EPROTO;
	}
	return -ETIMEDOUT;
}

static void *echo_side(void *arg)
{
	struct echo *e = arg;
	struct kn__tp_ctx_attr attr = { .provider = provider,
					.flags = backend_flags,
					.busy_poll_us = UINT32_MAX };
	struct kn__tp_listener *l = NULL;
	struct kn__tp_completion c;
	struct kn__tp_mr *mr = NULL;
	struct kn__tp_ep *ep = NULL;
	static __thread char buf[2][64];
	int ret = kn__tp_ctx_create(&attr, &e->ctx);

	if (!ret)
		ret = kn__tp_mr_reg(e->ctx, buf, sizeof(buf), 0, &mr);
	if (!ret && e->rounds < 0) { /* the echoing side listens */
		struct sockaddr_storage ss;

		ret = kn__tp_listen(e->ctx, (struct sockaddr *)&e->addr,
				    sizeof(e->addr), NULL, &l);
		if (!ret)
			ret = kn__tp_listener_addr(l, &ss);
		memcpy(&e->addr, &ss, sizeof(e->addr));
	}
	pthread_barrier_wait(e->bar);
	if (!ret && e->rounds < 0) {
		ret = wait_op(e->ctx, KN_TP_OP_ACCEPT, &c);
		ep = c.ep;
	} else if (!ret) {
		e->addr = e->peer->addr; /* out since the barrier */
		ret = kn__tp_connect(e->ctx, (struct sockaddr *)&e->addr,
				     sizeof(e->addr), NULL, &ep);
		if (!ret)
			ret = wait_op(e->ctx, KN_TP_OP_CONNECT, &c);
	}
	for (int i = 0; !ret && i < (e->rounds < 0 ? -e->rounds : e->rounds);
	     i++) {
		ret = kn__tp_post_recv(ep, mr, 64, 64, NULL);
		if (!ret && e->rounds > 0) /* the pinging side speaks first */
			ret = kn__tp_post_send(ep, mr, 0, 8, NULL);
		if (!ret)
			ret = wait_op(e->ctx, KN_TP_OP_RECV, &c);
		if (!ret && e->rounds < 0)
			ret = kn__tp_post_send(ep, mr, 0, 8, NULL);
	}
	/* the last answer leaves before the context goes */
	for (double end = now() + 0.2; now() < end;)
		kn__tp_poll_wait(e->ctx, &c, 1, 10);
	e->status = ret;
	kn__tp_ctx_destroy(e->ctx);
	return NULL;
}

BACKEND_TEST(transport, sleeping_sides_wake_for_every_message)
{
	pthread_barrier_t bar;
	struct echo a = { .addr = test_addr(0), .bar = &bar, .rounds = -50 };
	struct echo b = { .bar = &bar, .peer = &a, .rounds = 50 };
	pthread_t ta, tb;
	double t0;

	pthread_barrier_init(&bar, NULL, 2);
	t0 = now();
	cr_assert_eq(pthread_create(&ta, NULL, echo_side, &a), 0);
	cr_assert_eq(pthread_create(&tb, NULL, echo_side, &b), 0);
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	pthread_barrier_destroy(&bar);
	cr_assert_eq(a.status, 0, "echo side: %s", strerror(-a.status));
	cr_assert_eq(b.status, 0, "ping side: %s", strerror(-b.status));
	cr_assert_lt(now() - t0, 10.0, "50 round trips took %.1f s",
		     now() - t0);
}

/*
 * Destroying contexts with a listener and connections is prompt: the
 * provider cancels what it has in flight rather than waiting it out
 * (the io_uring backend used to wait a full second for its listener's
 * poll).
 */
BACKEND_TEST(transport, destroy_with_a_listener_is_prompt)
{
	struct conn c;
	double t0;

	open_sides();
	connect_pair(&c);
	t0 = now();
	close_sides();
	cr_assert_lt(now() - t0, 0.5, "destroying took %.2f s", now() - t0);
}

/* ---- the dpdk provider alone ---- */

/* What the listening child tells the test: its port, then its grant. */
struct silent_peer {
	int status;
	uint16_t port;
	struct kn__tp_rdesc rd;
};

static void silent_peer_child(int fd)
{
	static char dst[1 << 20];
	struct kn__tp_ctx_attr attr = { .provider = "dpdk" };
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct silent_peer sp = { 0 };
	struct kn__tp_completion c;
	struct kn__tp_listener *l;
	struct sockaddr_storage ss;
	struct kn__tp_ctx *ctx;
	struct kn__tp_mr *md;

	sp.status = kn__tp_ctx_create(&attr, &ctx);
	if (!sp.status)
		sp.status = kn__tp_listen(ctx, (struct sockaddr *)&a, sizeof(a),
					  NULL, &l);
	if (!sp.status)
		sp.status = kn__tp_listener_addr(l, &ss);
	if (!sp.status)
		sp.status = kn__tp_mr_reg(ctx, dst, sizeof(dst),
					  KN_TP_REMOTE_WRITE, &md);
	sp.port = sp.status ? 0 : ntohs(((struct sockaddr_in *)&ss)->sin_port);
	if (write(fd, &sp, sizeof(sp)) != sizeof(sp) || sp.status)
		_exit(0);
	for (;;) {
		if (kn__tp_poll(ctx, &c, 1) != 1 || c.op != KN_TP_OP_ACCEPT)
			continue;
		sp.status = kn__tp_ep_grant(c.ep, md, 0, sizeof(dst),
					    KN_TP_REMOTE_WRITE, &sp.rd);
		if (write(fd, &sp, sizeof(sp)) != sizeof(sp))
			_exit(1);
	}
}

static struct kn__tp_completion poll_one(struct kn__tp_ctx *ctx)
{
	struct kn__tp_completion c;
	double end = now() + WAIT_S;
	int n;

	while ((n = kn__tp_poll(ctx, &c, 1)) == 0)
		cr_assert_lt(now(), end, "no completion in %d s", WAIT_S);
	cr_assert_eq(n, 1, "poll: %s", strerror(-n));
	return c;
}

/*
 * A peer that stops answering while its kernel keeps its end of the
 * control connection open (a process stopped, a host whose link went):
 * nothing closes, so only the retransmission timeout can tell.  With
 * KANEL_DPDK_TIMEOUT_MS=1000 the write in flight fails with ETIMEDOUT
 * about a second after the peer's last acknowledgement, and the
 * endpoint with it.  The peer is a child process with the other
 * interface, forked before this process starts its EAL.
 */
Test(transport, dpdk_silent_peer_times_out, .timeout = 60)
{
	static char src[1 << 20];
	struct kn__tp_ctx_attr attr = { .provider = "dpdk" };
	struct silent_peer sp;
	struct kn__tp_completion c;
	struct sockaddr_in a;
	struct kn__tp_ctx *ctx;
	struct kn__tp_mr *ms;
	struct kn__tp_ep *ep;
	int pfd[2], status;
	double t0, waited;
	pid_t pid;

	if (!getenv("KANEL_DPDK_IFACES"))
		cr_skip_test("KANEL_DPDK_IFACES is not set: "
			     "tests/dpdk/netns.sh runs these tests on a "
			     "veth pair");
	setenv("KANEL_DPDK_TIMEOUT_MS", "1000", 1);
	cr_assert_eq(pipe(pfd), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		close(pfd[0]);
		silent_peer_child(pfd[1]);
	}
	close(pfd[1]);
	cr_assert_eq(read(pfd[0], &sp, sizeof(sp)), (ssize_t)sizeof(sp));
	if (sp.status == -ENOENT) {
		waitpid(pid, &status, 0);
		cr_skip_test("built without the dpdk provider");
	}
	cr_assert_eq(sp.status, 0, "the peer: %s", strerror(-sp.status));
	cr_assert_eq(kn__tp_ctx_create(&attr, &ctx), 0);
	cr_assert_eq(kn__tp_mr_reg(ctx, src, sizeof(src), 0, &ms), 0);
	a = test_addr(sp.port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert_eq(kn__tp_connect(ctx, (struct sockaddr *)&a, sizeof(a), NULL,
				    &ep),
		     0);
	c = poll_one(ctx);
	cr_assert_eq(c.op, KN_TP_OP_CONNECT);
	cr_assert_eq(c.status, 0);
	cr_assert_eq(read(pfd[0], &sp, sizeof(sp)), (ssize_t)sizeof(sp));
	cr_assert_eq(sp.status, 0);
	/* while the peer answers, a megabyte goes across */
	cr_assert_eq(kn__tp_post_write_imm(ep, ms, 0, sizeof(src), &sp.rd, 0, 1,
					   NULL),
		     0);
	c = poll_one(ctx);
	cr_assert_eq(c.op, KN_TP_OP_WRITE_IMM);
	cr_assert_eq(c.status, 0);
	/* and now it is silent */
	cr_assert_eq(kill(pid, SIGSTOP), 0);
	t0 = now();
	cr_assert_eq(kn__tp_post_write_imm(ep, ms, 0, sizeof(src), &sp.rd, 0, 2,
					   NULL),
		     0);
	c = poll_one(ctx);
	waited = now() - t0;
	cr_assert_eq(c.op, KN_TP_OP_WRITE_IMM);
	cr_assert_eq(c.status, -ETIMEDOUT, "status %d", c.status);
	cr_assert(waited > 0.9 && waited < 3.0, "failed after %.2f s", waited);
	c = poll_one(ctx);
	cr_assert_eq(c.op, KN_TP_OP_DISCONNECT);
	cr_assert_eq(c.status, -ETIMEDOUT);
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	kn__tp_ep_close(ep);
	kn__tp_mr_dereg(ms);
	kn__tp_ctx_destroy(ctx);
}
