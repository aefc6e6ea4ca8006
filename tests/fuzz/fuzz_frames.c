/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_frames.c - libFuzzer target for the tcp provider's receive path.
 *
 * Each input is a byte stream as a peer would send it.  It is checked
 * twice.  First its first 32 bytes go through kn__wire_decode() alone:
 * a header it accepts must have an op in range and a length within
 * KN_WIRE_MAX_LEN (and max_msg for SEND), must encode back to the same
 * 32 bytes and decode again to the same fields; one it refuses must be
 * refused with -EPROTO or -EMSGSIZE, leaving the output untouched.
 *
 * Then the whole input is written into one end of a socketpair whose
 * other end a tcp context has adopted as an endpoint, and the writing
 * side is shut, so the endpoint sees the frames and then EOF.  The
 * context is created once (with the default backend, and again with
 * epoll where the default is another), with a CQ of 64 entries so that
 * the receiver has to wait for room; its regions are guarded by canaries
 * (also poisoned for AddressSanitizer) that no frame may reach:
 *
 *	key 0x100001  4 KiB  REMOTE_WRITE
 *	key 0x200002  4 KiB  REMOTE_READ
 *	key 0x300003 64 KiB  REMOTE_WRITE | REMOTE_READ
 *	local, never granted: two recv buffers of 256 B and 4 KiB, and the
 *	                     512 B destination of a read
 *
 * (the keys of an endpoint's first three grants in a context made with
 * KN_TP_CTX_TEST_KEYS; the seed corpus in corpus/frames/ uses them).
 * Each input runs twice per context: on an endpoint granted the three
 * regions, and on one granted nothing, where no frame may change a byte
 * of any region (a one-sided frame before a grant that reaches memory is
 * a finding).  Per input the endpoint has
 * the two recvs and one read (of 512 B, so a READ_RESP can answer it)
 * posted.  The target polls until the endpoint reports DISCONNECT, stalls
 * (a SEND with no recv left waits forever) or MAX_POLLS pass, discarding
 * what the endpoint sends back (its READ_REQ, READ_RESP answers), then
 * closes it and checks that every canary is intact, that each posted
 * operation completed exactly once, and that every failure is one an
 * input can cause (the target's end stays open, so a send error, say,
 * is the provider's).  Any violation is __builtin_trap().
 *
 * The provider logs one line to stderr per failed endpoint: run with
 * -close_fd_mask=2 to keep libFuzzer's output readable (sanitizer reports
 * still show).
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "transport.h"
#include "wire.h"

#define FUZZ_TARGET "fuzz_frames"
#include "fuzz_fail.h"

#define MAX_INPUT  (64u << 10) /* also -max_len */
#define MAX_POLLS  1000
#define IDLE_POLLS 4 /* polls with no progress at all: it is stuck */
#define CANARY_LEN 64
#define CQ_DEPTH   64 /* small, so the CQ fills and rx waits for room */
#define RECV0_LEN  256
#define RECV1_LEN  4096 /* max_msg */
#define READ_LEN   512
#define NREGIONS   3 /* the remote ones */
#define MAX_GUARDS (NREGIONS + NTAGS)

#ifdef HAVE_ASAN
#define NO_SANITIZE_ADDRESS __attribute__((no_sanitize("address")))
#else
#define NO_SANITIZE_ADDRESS
#endif

/* One guarded range of an arena: a canary on each side. */
struct guarded {
	size_t off, len; /* in the arena, of the usable bytes */
};

/* The posted operations, by the user pointer their completions carry. */
enum tag { TAG_RECV0, TAG_RECV1, TAG_READ, NTAGS };

/* The layout of every arena, the same for each context. */
static struct guarded guards[MAX_GUARDS];
static int nguards;
static size_t arena_len, region_off[NREGIONS], local_at, local_off[NTAGS];

/* The regions a peer may target, in the order of their keys. */
static const struct {
	size_t len;
	uint32_t access;
} remote[NREGIONS] = {
	{ 4096, KN_TP_REMOTE_WRITE },
	{ 4096, KN_TP_REMOTE_READ },
	{ 64 << 10, KN_TP_REMOTE_WRITE | KN_TP_REMOTE_READ },
};

/* A context under test and the memory it exposes. */
struct rig {
	struct kn__tp_ctx *ctx;
	struct kn__tp_mr *local_mr, *remote_mr[NREGIONS];
	char *arena, *before; /* before: the regions' bytes, for a check */
};

/* The default backend's, and the epoll backend's where that differs. */
static struct rig rigs[2];
static int nrigs;
static char tags[NTAGS], ep_tag;

static uint8_t canary_byte(size_t at)
{
	return (uint8_t)(0xa5 ^ (at * 131));
}

/* Reserve @len usable bytes between two canaries; their arena offset. */
static size_t guard_add(size_t *end, size_t len)
{
	size_t off = *end + CANARY_LEN;

	if (nguards == MAX_GUARDS)
		fail("too many guarded ranges");
	guards[nguards++] = (struct guarded){ off, len };
	*end = (off + len + 63) & ~(size_t)63;
	return off;
}

static void layout(void)
{
	size_t end = 0;

	for (int i = 0; i < NREGIONS; i++)
		region_off[i] = guard_add(&end, remote[i].len);
	/* the local region spans its buffers and the canaries between */
	local_at = end;
	local_off[TAG_RECV0] = guard_add(&end, RECV0_LEN) - local_at;
	local_off[TAG_RECV1] = guard_add(&end, RECV1_LEN) - local_at;
	local_off[TAG_READ] = guard_add(&end, READ_LEN) - local_at;
	arena_len = end + CANARY_LEN;
}

/* Neighbours share a canary: write them all, then poison them. */
static void canaries_set(char *arena)
{
	for (int g = 0; g < nguards; g++) {
		size_t before = guards[g].off - CANARY_LEN;
		size_t after = guards[g].off + guards[g].len;

		for (size_t i = 0; i < CANARY_LEN; i++) {
			arena[before + i] = (char)canary_byte(before + i);
			arena[after + i] = (char)canary_byte(after + i);
		}
	}
#ifdef HAVE_ASAN
	for (int g = 0; g < nguards; g++) {
		ASAN_POISON_MEMORY_REGION(arena + guards[g].off - CANARY_LEN,
					  CANARY_LEN);
		ASAN_POISON_MEMORY_REGION(arena + guards[g].off + guards[g].len,
					  CANARY_LEN);
	}
#endif
}

/* The canaries are poisoned: read them past AddressSanitizer. */
NO_SANITIZE_ADDRESS static void canaries_check(const char *arena)
{
	volatile const char *a = arena;

	for (int g = 0; g < nguards; g++) {
		size_t before = guards[g].off - CANARY_LEN;
		size_t after = guards[g].off + guards[g].len;

		for (size_t i = 0; i < CANARY_LEN; i++) {
			if ((uint8_t)a[before + i] != canary_byte(before + i))
				fail("canary %zu bytes before range %d hit",
				     CANARY_LEN - i, g);
			if ((uint8_t)a[after + i] != canary_byte(after + i))
				fail("canary %zu bytes after range %d hit", i,
				     g);
		}
	}
}

static struct kn__tp_mr *region_reg(struct rig *rig, size_t off, size_t len,
				    uint32_t access)
{
	struct kn__tp_mr *mr;
	int ret = kn__tp_mr_reg(rig->ctx, rig->arena + off, len, access, &mr);

	if (ret)
		fail("mr_reg: %s", strerror(-ret));
	return mr;
}

static void rig_init(struct rig *rig, uint32_t flags)
{
	struct kn__tp_ctx_attr attr = { .provider = "tcp",
					.flags = flags | KN_TP_CTX_TEST_KEYS,
					.cq_depth = CQ_DEPTH };
	int ret = kn__tp_ctx_create(&attr, &rig->ctx);

	if (ret)
		fail("ctx_create: %s", strerror(-ret));
	rig->arena = aligned_alloc(64, arena_len);
	rig->before = malloc(arena_len);
	if (!rig->arena || !rig->before)
		fail("out of memory");
	memset(rig->arena, 0x5a, arena_len);
	canaries_set(rig->arena);
	for (int i = 0; i < NREGIONS; i++)
		rig->remote_mr[i] = region_reg(rig, region_off[i],
					       remote[i].len, remote[i].access);
	rig->local_mr = region_reg(rig, local_at, arena_len - local_at, 0);
}

/* Step 1: the header decoder alone. */
static void check_decode(const uint8_t *data, size_t size)
{
	const uint32_t max_msg = 4096;
	struct kn__wire_hdr h, again, poison;
	uint8_t out[KN_WIRE_HDR_LEN];
	int ret;

	if (size < KN_WIRE_HDR_LEN)
		return;
	memset(&poison, 0xee, sizeof(poison));
	memcpy(&h, &poison, sizeof(h));
	ret = kn__wire_decode(data, max_msg, &h);
	if (ret) {
		if (ret != -EPROTO && ret != -EMSGSIZE)
			fail("decode returned %d", ret);
		if (memcmp(&h, &poison, sizeof(h)))
			fail("decode wrote its output on failure");
		return;
	}
	if (h.op < KN_WIRE_WRITE_IMM || h.op > KN_WIRE_SEND)
		fail("decoded op %u", h.op);
	if (h.length > KN_WIRE_MAX_LEN)
		fail("decoded length %u", h.length);
	if (h.op == KN_WIRE_SEND && h.length > max_msg)
		fail("decoded SEND of %u bytes", h.length);
	kn__wire_encode(&h, out);
	if (memcmp(out, data, KN_WIRE_HDR_LEN))
		fail("an accepted header does not encode back to itself");
	memcpy(&again, &poison, sizeof(again));
	if (kn__wire_decode(out, max_msg, &again))
		fail("a re-encoded header does not decode");
	if (again.op != h.op || again.region != h.region ||
	    again.imm != h.imm || again.offset != h.offset ||
	    again.length != h.length || again.seq != h.seq)
		fail("decode, encode, decode changed the header");
}

/* Read and drop whatever the endpoint sent; how many bytes. */
static size_t drain(int fd)
{
	static char sink[64 << 10];
	size_t total = 0;

	for (;;) {
		ssize_t n = recv(fd, sink, sizeof(sink), MSG_DONTWAIT);

		if (n <= 0)
			return total;
		total += (size_t)n;
	}
}

/* One input through one rig. */
struct run {
	struct rig *rig;
	struct kn__tp_ep *ep;
	int done[NTAGS];
	int disconnects;
};

/* Which posted operation @user names, or -1. */
static int tag_of(const void *user)
{
	for (int t = 0; t < NTAGS; t++)
		if (user == &tags[t])
			return t;
	return -1;
}

/*
 * Whether @status is a failure the input can cause.  The target never
 * closes its end early, so anything else (a send error, say) is the
 * provider's own fault.
 */
static bool input_error(int status)
{
	return status == -EPROTO || status == -EACCES || status == -EMSGSIZE ||
	       status == -ECONNRESET;
}

static void unprovoked(const char *what, int status) __attribute__((noreturn));

static void unprovoked(const char *what, int status)
{
	fail("%s with %d (%s), which no input causes", what, status,
	     strerror(-status));
}

/*
 * Poll once and check what comes back; how many completions.  Once
 * @closed, what kn__tp_ep_close() flushed comes with ->ep NULL.
 */
static int poll_once(struct run *run, bool closed)
{
	struct kn__tp_completion comp[CQ_DEPTH];
	int n = kn__tp_poll(run->rig->ctx, comp, CQ_DEPTH);

	if (n < 0)
		fail("poll: %s", strerror(-n));
	for (int i = 0; i < n; i++) {
		const struct kn__tp_completion *c = &comp[i];
		int t = tag_of(c->user);

		if (c->ep != run->ep && !(closed && !c->ep))
			fail("completion op %u of another endpoint", c->op);
		switch (c->op) {
		case KN_TP_OP_RECV_IMM:
			if (c->user != &ep_tag || c->status ||
			    c->bytes > (64 << 10))
				fail("bad RECV_IMM (%d, %llu bytes)", c->status,
				     (unsigned long long)c->bytes);
			continue;
		case KN_TP_OP_DISCONNECT:
			if (c->user != &ep_tag || run->disconnects++)
				fail("a second DISCONNECT");
			if (!input_error(c->status))
				unprovoked("DISCONNECT", c->status);
			continue;
		case KN_TP_OP_RECV:
			if (t != TAG_RECV0 && t != TAG_RECV1)
				fail("RECV completion of no recv");
			if (c->status && c->status != -ECANCELED)
				fail("RECV with %d", c->status);
			if (c->bytes > (t == TAG_RECV0 ? RECV0_LEN : RECV1_LEN))
				fail("RECV of %llu bytes",
				     (unsigned long long)c->bytes);
			break;
		case KN_TP_OP_READ:
			if (t != TAG_READ)
				fail("READ completion of no read");
			if (c->status && c->status != -ECANCELED &&
			    !input_error(c->status))
				unprovoked("READ", c->status);
			if (!c->status && c->bytes != READ_LEN)
				fail("READ of %llu bytes",
				     (unsigned long long)c->bytes);
			break;
		default:
			fail("completion op %u", c->op);
		}
		if (run->done[t]++)
			fail("operation %d completed twice", t);
	}
	return n;
}

static bool all_done(const struct run *run)
{
	for (int t = 0; t < NTAGS; t++)
		if (!run->done[t])
			return false;
	return true;
}

/* Sleep up to @ms until the context may have work. */
static void ctx_wait(struct rig *rig, int ms)
{
	struct pollfd p = { .fd = kn__tp_fd(rig->ctx), .events = POLLIN };

	poll(&p, 1, ms);
}

static void post(struct run *run)
{
	/* a read the input may answer: its READ_REQ is our seq 0 */
	const struct kn__tp_rdesc src = { .len = 4096,
					  .key = 1,
					  .access = KN_TP_REMOTE_READ };
	struct kn__tp_mr *mr = run->rig->local_mr;
	int ret;

	ret = kn__tp_post_recv(run->ep, mr, local_off[TAG_RECV0], RECV0_LEN,
			       &tags[TAG_RECV0]);
	if (!ret)
		ret = kn__tp_post_recv(run->ep, mr, local_off[TAG_RECV1],
				       RECV1_LEN, &tags[TAG_RECV1]);
	if (!ret)
		ret = kn__tp_post_read(run->ep, mr, local_off[TAG_READ],
				       READ_LEN, &src, 0, &tags[TAG_READ]);
	if (ret)
		fail("post: %s", strerror(-ret));
}

/* The remote regions as they are now, into rig->before. */
static void regions_save(struct rig *rig)
{
	for (int i = 0; i < NREGIONS; i++)
		memcpy(rig->before + region_off[i], rig->arena + region_off[i],
		       remote[i].len);
}

static void regions_unchanged(const struct rig *rig)
{
	for (int i = 0; i < NREGIONS; i++)
		if (memcmp(rig->before + region_off[i],
			   rig->arena + region_off[i], remote[i].len))
			fail("a frame reached region %d before any grant", i);
}

/*
 * Step 2: the input as a peer's byte stream into an adopted endpoint,
 * which is @granted the three regions (in order: the keys above) or
 * nothing.
 */
static void run_stream(struct rig *rig, const uint8_t *data, size_t size,
		       bool granted)
{
	struct run run = { .rig = rig };
	size_t written = 0;
	int sv[2], ret, idle = 0, sndbuf = 1 << 20;
	bool shut = false;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0,
		       sv))
		fail("socketpair: %s", strerror(errno));
	setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
	ret = kn__tp_adopt(rig->ctx, sv[0], &ep_tag, &run.ep);
	if (ret)
		fail("adopt: %s", strerror(-ret));
	for (int i = 0; granted && i < NREGIONS; i++) {
		struct kn__tp_rdesc rd;

		ret = kn__tp_ep_grant(run.ep, rig->remote_mr[i], 0,
				      remote[i].len, remote[i].access, &rd);
		if (ret || rd.key != (uint32_t)(i + 1) * 0x100001u)
			fail("grant %d: %d, key %#x", i, ret, rd.key);
	}
	if (!granted)
		regions_save(rig);
	post(&run);

	for (int i = 0; i < MAX_POLLS && !run.disconnects; i++) {
		size_t moved = 0;

		while (written < size) {
			ssize_t n = send(sv[1], data + written, size - written,
					 MSG_NOSIGNAL | MSG_DONTWAIT);

			if (n < 0 && (errno == EAGAIN || errno == EINTR))
				break;
			if (n < 0) /* the endpoint failed and shut it */
				written = size;
			else
				written += (size_t)n;
			moved += n > 0 ? (size_t)n : 0;
		}
		if (written == size && !shut) {
			shutdown(sv[1], SHUT_WR);
			shut = true;
		}
		moved += (size_t)poll_once(&run, false);
		moved += drain(sv[1]);
		idle = moved ? 0 : idle + 1;
		if (idle == IDLE_POLLS)
			break;
	}

	/*
	 * What is still pending completes with -ECANCELED, at once (epoll)
	 * or once the kernel has let go of the buffers (io_uring).
	 */
	kn__tp_ep_close(run.ep);
	close(sv[1]);
	for (int i = 0; i < MAX_POLLS && !all_done(&run); i++)
		if (!poll_once(&run, true))
			ctx_wait(rig, 1);
	for (int t = 0; t < NTAGS; t++)
		if (run.done[t] != 1)
			fail("operation %d completed %d times", t, run.done[t]);
	canaries_check(rig->arena);
	if (!granted)
		regions_unchanged(rig);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	layout();
	rig_init(&rigs[nrigs++], 0);
	if (strcmp(kn__tp_ctx_provider(rigs[0].ctx), "tcp/epoll"))
		rig_init(&rigs[nrigs++], KN_TP_CTX_FORCE_EPOLL);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > MAX_INPUT)
		size = MAX_INPUT;
	check_decode(data, size);
	for (int i = 0; i < nrigs; i++) {
		run_stream(&rigs[i], data, size, true);
		run_stream(&rigs[i], data, size, false);
	}
	return 0;
}
