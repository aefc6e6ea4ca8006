/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_msg.c - libFuzzer target for the engine's control-message and
 * handshake decoders (engine/msg.c, engine/auth.c).
 *
 * Each input is one received message; every decoder sees every input.
 * Where the input's header gives a payload length other than what
 * follows it, the message decoder also sees a copy with that length
 * fixed, so that mutations that grow or shrink a payload stay useful.
 *
 * kn__msg_decode() on the whole input.  A refusal must be -EPROTO.  A
 * message it accepts must hold only values the decoder promises (a known
 * type, a role in range, joined 0 or 1, a negative error code, strings
 * NUL-terminated within their arrays, an AUTH payload within
 * KN__AUTH_MAX), must encode back into exactly as many bytes as the input
 * (into a buffer of that size, while one byte less is refused with
 * -EINVAL), and those bytes must be the input's: the format is canonical
 * (fixed-width little-endian fields, the header's version and length
 * checked exactly, strings with their length and no NUL, nothing left
 * over) except for one slack, the 12 address bytes after an IPv4 address
 * in HELLO, which the decoder ignores and the encoder writes as zeros.
 * The encoding must decode again to the same message, field by field
 * (floats bit for bit).
 *
 * kn__auth_challenge_decode(), kn__auth_answer_decode() and
 * kn__auth_confirm_decode() on the whole input, and again on the payload
 * of an AUTH message, which is how node.c hands them what a peer sent.
 * A refusal must be -EPROTO and leave the output untouched; an accepted
 * message has the exact size, encodes back to the same bytes and decodes
 * again to the same fields.
 *
 * Every buffer a decoder or encoder gets is a heap block of exactly its
 * length, so that AddressSanitizer sees a byte read or written past it.
 * Any violation is __builtin_trap().
 */
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "msg.h"

#define FUZZ_TARGET "fuzz_msg"
#include "fuzz_fail.h"

/* HELLO: header, role, rank, family, port, then the 16 address bytes. */
#define HELLO_IP     (KN__MSG_HDR + 4 + 4 + 2 + 2)
#define HELLO_IP_LEN 16
#define HELLO_LEN    (HELLO_IP + HELLO_IP_LEN)

/* A heap copy of exactly @len bytes (at least one, for malloc). */
static uint8_t *dup_exact(const void *p, size_t len)
{
	uint8_t *d = malloc(len ? len : 1);

	if (!d)
		fail("out of memory");
	if (len)
		memcpy(d, p, len);
	return d;
}

/* Whether @s is NUL-terminated within @max bytes. */
static bool terminated(const char *s, size_t max)
{
	return memchr(s, 0, max) != NULL;
}

static bool same_f32(float a, float b)
{
	return !memcmp(&a, &b, sizeof(a));
}

/* sync/'s parameter block, bit for bit, in its own words. */
static bool same_proto(const struct kn__sync_params *a,
		       const struct kn__sync_params *b)
{
	uint32_t wa[KN__SYNC_PARAMS_WORDS], wb[KN__SYNC_PARAMS_WORDS];

	kn__sync_params_pack(a, wa);
	kn__sync_params_pack(b, wb);
	return memcmp(wa, wb, sizeof(wa)) == 0;
}

static bool same_rdesc(const struct kn__tp_rdesc *a,
		       const struct kn__tp_rdesc *b)
{
	return a->addr == b->addr && a->len == b->len && a->key == b->key &&
	       a->access == b->access;
}

static bool same_addr(const struct sockaddr_storage *a,
		      const struct sockaddr_storage *b)
{
	if (a->ss_family != b->ss_family)
		return false;
	if (a->ss_family == AF_INET) {
		const struct sockaddr_in *x = (const void *)a;
		const struct sockaddr_in *y = (const void *)b;

		return x->sin_port == y->sin_port &&
		       x->sin_addr.s_addr == y->sin_addr.s_addr;
	}
	if (a->ss_family == AF_INET6) {
		const struct sockaddr_in6 *x = (const void *)a;
		const struct sockaddr_in6 *y = (const void *)b;

		return x->sin6_port == y->sin6_port &&
		       x->sin6_flowinfo == y->sin6_flowinfo &&
		       x->sin6_scope_id == y->sin6_scope_id &&
		       !memcmp(&x->sin6_addr, &y->sin6_addr, 16);
	}
	fail("decoded address family %u", a->ss_family);
}

/* Field by field, for the fields of @a's type. */
static bool same_msg(const struct kn__msg *a, const struct kn__msg *b)
{
	if (a->type != b->type)
		return false;
	switch (a->type) {
	case KN__MSG_AUTH:
		return a->u.auth.len == b->u.auth.len &&
		       !memcmp(a->u.auth.data, b->u.auth.data, a->u.auth.len);
	case KN__MSG_HELLO:
		return a->u.hello.role == b->u.hello.role &&
		       a->u.hello.rank == b->u.hello.rank &&
		       same_addr(&a->u.hello.addr, &b->u.hello.addr);
	case KN__MSG_JOB:
		return a->u.job.workers == b->u.job.workers &&
		       a->u.job.servers == b->u.job.servers &&
		       a->u.job.protocol == b->u.job.protocol &&
		       a->u.job.optimizer == b->u.job.optimizer &&
		       a->u.job.chunk_bytes == b->u.job.chunk_bytes &&
		       same_f32(a->u.job.lr, b->u.job.lr) &&
		       same_f32(a->u.job.momentum, b->u.job.momentum) &&
		       same_proto(&a->u.job.proto, &b->u.job.proto) &&
		       a->u.job.rank == b->u.job.rank &&
		       a->u.job.restore == b->u.job.restore;
	case KN__MSG_TENSOR:
		return a->u.tensor.index == b->u.tensor.index &&
		       a->u.tensor.dtype == b->u.tensor.dtype &&
		       a->u.tensor.len == b->u.tensor.len &&
		       !strcmp(a->u.tensor.key, b->u.tensor.key);
	case KN__MSG_TENSORS_END:
		return a->u.tensors_end.count == b->u.tensors_end.count;
	case KN__MSG_BUFFERS:
		return a->u.buffers.index == b->u.buffers.index &&
		       same_rdesc(&a->u.buffers.params, &b->u.buffers.params) &&
		       same_rdesc(&a->u.buffers.grads, &b->u.buffers.grads);
	case KN__MSG_SLOTS:
		return same_rdesc(&a->u.slots.slots, &b->u.slots.slots);
	case KN__MSG_READY:
		return a->u.ready.what == b->u.ready.what;
	case KN__MSG_HEARTBEAT:
	case KN__MSG_DONE:
	case KN__MSG_SHUTDOWN:
	case KN__MSG_RECOVER:
		return true;
	case KN__MSG_CHECKPOINTS:
		return a->u.checkpoints.any == b->u.checkpoints.any &&
		       a->u.checkpoints.count == b->u.checkpoints.count &&
		       !memcmp(a->u.checkpoints.versions,
			       b->u.checkpoints.versions,
			       a->u.checkpoints.count * sizeof(uint64_t));
	case KN__MSG_RESTORE:
		return a->u.restore.version == b->u.restore.version;
	case KN__MSG_MEMBER:
		return a->u.member.rank == b->u.member.rank &&
		       a->u.member.joined == b->u.member.joined;
	case KN__MSG_ERROR:
		return a->u.error.code == b->u.error.code &&
		       !strcmp(a->u.error.text, b->u.error.text);
	case KN__MSG_RELEASE:
		return a->u.release.chunk == b->u.release.chunk &&
		       a->u.release.steps == b->u.release.steps &&
		       a->u.release.epoch == b->u.release.epoch &&
		       a->u.release.version == b->u.release.version &&
		       same_f32(a->u.release.hint, b->u.release.hint);
	case KN__MSG_TIMING:
		return same_f32(a->u.timing.seconds, b->u.timing.seconds);
	case KN__MSG_PLAN:
		return a->u.plan.epoch == b->u.plan.epoch &&
		       a->u.plan.workers == b->u.plan.workers &&
		       a->u.plan.first == b->u.plan.first &&
		       a->u.plan.count == b->u.plan.count &&
		       !memcmp(a->u.plan.steps, b->u.plan.steps,
			       a->u.plan.count * sizeof(uint32_t));
	case KN__MSG_BARRIER:
		return a->u.barrier.epoch == b->u.barrier.epoch;
	default:
		fail("decoded type %u", a->type);
	}
}

/* What kn__msg_decode() promises about a message it accepted. */
static void msg_valid(const struct kn__msg *m)
{
	if (!strcmp(kn__msg_name(m->type), "?"))
		fail("decoded type %u has no name", m->type);
	switch (m->type) {
	case KN__MSG_AUTH:
		if (m->u.auth.len > KN__AUTH_MAX)
			fail("decoded AUTH of %u bytes", m->u.auth.len);
		break;
	case KN__MSG_HELLO:
		if (m->u.hello.role < KN__ROLE_COORDINATOR ||
		    m->u.hello.role > KN__ROLE_WORKER)
			fail("decoded HELLO role %u", m->u.hello.role);
		if (m->u.hello.addr.ss_family != AF_INET &&
		    m->u.hello.addr.ss_family != AF_INET6)
			fail("decoded HELLO family %u",
			     m->u.hello.addr.ss_family);
		break;
	case KN__MSG_JOB:
		/* CGP's parameters as sync/ takes them */
		if (m->u.job.proto.solver > KN__SYNC_CGP_PLS ||
		    m->u.job.proto.epoch_rounds > KN__SYNC_CGP_MAX_ROUNDS)
			fail("decoded JOB solver %u, epoch rounds %u",
			     m->u.job.proto.solver,
			     m->u.job.proto.epoch_rounds);
		if (!(m->u.job.proto.bound >= 0) ||
		    isinf(m->u.job.proto.bound) ||
		    !(m->u.job.proto.latency >= 0) ||
		    isinf(m->u.job.proto.latency) ||
		    !(m->u.job.proto.bandwidth >= 0) ||
		    isinf(m->u.job.proto.bandwidth))
			fail("decoded JOB bound %g, latency %g, bandwidth %g",
			     (double)m->u.job.proto.bound,
			     (double)m->u.job.proto.latency,
			     (double)m->u.job.proto.bandwidth);
		if (m->u.job.restore > 1)
			fail("decoded JOB restore %u", m->u.job.restore);
		break;
	case KN__MSG_TENSOR:
		if (!terminated(m->u.tensor.key, KN__KEY_MAX))
			fail("decoded TENSOR key without NUL");
		break;
	case KN__MSG_MEMBER:
		if (m->u.member.joined > 1)
			fail("decoded MEMBER joined %u", m->u.member.joined);
		break;
	case KN__MSG_ERROR:
		if (m->u.error.code >= 0)
			fail("decoded ERROR code %d", m->u.error.code);
		if (!terminated(m->u.error.text, KN__TEXT_MAX))
			fail("decoded ERROR text without NUL");
		break;
	case KN__MSG_RELEASE:
		if (!(m->u.release.hint >= 0) || isinf(m->u.release.hint))
			fail("decoded RELEASE hint %g",
			     (double)m->u.release.hint);
		break;
	case KN__MSG_TIMING:
		if (!(m->u.timing.seconds >= 0) || isinf(m->u.timing.seconds))
			fail("decoded TIMING of %g s",
			     (double)m->u.timing.seconds);
		break;
	case KN__MSG_PLAN:
		/* the part lies inside the plan and inside one message */
		if (m->u.plan.count > KN__PLAN_PART ||
		    m->u.plan.first > m->u.plan.workers ||
		    m->u.plan.count > m->u.plan.workers - m->u.plan.first)
			fail("decoded PLAN part %u+%u of %u", m->u.plan.first,
			     m->u.plan.count, m->u.plan.workers);
		break;
	case KN__MSG_CHECKPOINTS:
		/* at most the room, newest first, each version once */
		if (m->u.checkpoints.any > 1 ||
		    m->u.checkpoints.count > KN__MSG_CKPT_MAX)
			fail("decoded CHECKPOINTS any %u, count %u",
			     m->u.checkpoints.any, m->u.checkpoints.count);
		for (uint32_t i = 1; i < m->u.checkpoints.count; i++)
			if (m->u.checkpoints.versions[i] >=
			    m->u.checkpoints.versions[i - 1])
				fail("decoded CHECKPOINTS out of order");
		break;
	default:
		break;
	}
}

/*
 * The encoding @enc of a message decoded from @data, both @len bytes, must
 * be @data, but for the slack of an IPv4 HELLO (the encoder's zeros).
 */
static void msg_canonical(const struct kn__msg *m, const uint8_t *data,
			  const uint8_t *enc, size_t len)
{
	static const uint8_t zero[HELLO_IP_LEN];
	size_t skip = 0;

	if (m->type == KN__MSG_HELLO && m->u.hello.addr.ss_family == AF_INET) {
		if (len != HELLO_LEN)
			fail("HELLO of %zu bytes", len);
		skip = HELLO_IP_LEN - 4;
		if (memcmp(enc + HELLO_IP + 4, zero, skip))
			fail("IPv4 HELLO encoded with address bytes after "
			     "the fourth");
		if (memcmp(enc, data, HELLO_IP + 4))
			fail("HELLO does not encode back to itself");
		return;
	}
	for (size_t i = 0; i < len; i++)
		if (enc[i] != data[i])
			fail("%s of %zu bytes encodes differently at byte %zu "
			     "(%#x, not %#x)",
			     kn__msg_name(m->type), len, i, enc[i], data[i]);
}

static void check_auth(const uint8_t *data, size_t size);

static void check_msg(const uint8_t *data, size_t size)
{
	struct kn__msg m, again;
	uint8_t *enc;
	int ret, n;

	ret = kn__msg_decode(data, size, &m);
	if (ret) {
		if (ret != -EPROTO)
			fail("msg decode returned %d", ret);
		return;
	}
	msg_valid(&m);

	/* exactly as many bytes as the input, and not one less */
	enc = malloc(size);
	if (!enc)
		fail("out of memory");
	n = kn__msg_encode(&m, enc, size - 1);
	if (n != -EINVAL)
		fail("%s of %zu bytes encoded into %zu bytes: %d",
		     kn__msg_name(m.type), size, size - 1, n);
	n = kn__msg_encode(&m, enc, size);
	if (n < 0 || (size_t)n != size)
		fail("%s of %zu bytes encodes into %d", kn__msg_name(m.type),
		     size, n);
	msg_canonical(&m, data, enc, size);

	memset(&again, 0xee, sizeof(again));
	ret = kn__msg_decode(enc, size, &again);
	if (ret)
		fail("a re-encoded %s does not decode: %d",
		     kn__msg_name(m.type), ret);
	if (!same_msg(&m, &again))
		fail("decode, encode, decode changed a %s",
		     kn__msg_name(m.type));
	free(enc);

	/* the handshake's messages travel as AUTH payloads */
	if (m.type == KN__MSG_AUTH) {
		uint8_t *payload = dup_exact(m.u.auth.data, m.u.auth.len);

		check_auth(payload, m.u.auth.len);
		free(payload);
	}
}

/*
 * One auth message type: its decoder, encoder, size and field comparison,
 * over a struct the size of the largest (answer).
 */
struct auth_kind {
	const char *name;
	size_t len, size;
	int (*decode)(const void *buf, size_t len, void *m);
	void (*encode)(const void *m, uint8_t *out);
	bool (*same)(const void *a, const void *b);
};

static int challenge_decode(const void *buf, size_t len, void *m)
{
	return kn__auth_challenge_decode(buf, len, m);
}

static void challenge_encode(const void *m, uint8_t *out)
{
	kn__auth_challenge_encode(m, out);
}

static bool challenge_same(const void *a, const void *b)
{
	const struct kn__auth_challenge *x = a, *y = b;

	return !memcmp(x->nonce, y->nonce, KN_AUTH_NONCE_LEN);
}

static int answer_decode(const void *buf, size_t len, void *m)
{
	int ret = kn__auth_answer_decode(buf, len, m);
	const struct kn__auth_answer *a = m;

	if (!ret &&
	    (a->role < KN__ROLE_COORDINATOR || a->role > KN__ROLE_WORKER))
		fail("decoded ANSWER role %u", a->role);
	return ret;
}

static void answer_encode(const void *m, uint8_t *out)
{
	kn__auth_answer_encode(m, out);
}

static bool answer_same(const void *a, const void *b)
{
	const struct kn__auth_answer *x = a, *y = b;

	return !memcmp(x->nonce, y->nonce, KN_AUTH_NONCE_LEN) &&
	       x->role == y->role && x->id == y->id &&
	       !memcmp(x->mac, y->mac, KN_AUTH_MAC_LEN);
}

static int confirm_decode(const void *buf, size_t len, void *m)
{
	return kn__auth_confirm_decode(buf, len, m);
}

static void confirm_encode(const void *m, uint8_t *out)
{
	kn__auth_confirm_encode(m, out);
}

static bool confirm_same(const void *a, const void *b)
{
	const struct kn__auth_confirm *x = a, *y = b;

	return !memcmp(x->mac, y->mac, KN_AUTH_MAC_LEN);
}

static const struct auth_kind auth_kinds[] = {
	{ "CHALLENGE", KN_AUTH_CHALLENGE_LEN, sizeof(struct kn__auth_challenge),
	  challenge_decode, challenge_encode, challenge_same },
	{ "ANSWER", KN_AUTH_ANSWER_LEN, sizeof(struct kn__auth_answer),
	  answer_decode, answer_encode, answer_same },
	{ "CONFIRM", KN_AUTH_CONFIRM_LEN, sizeof(struct kn__auth_confirm),
	  confirm_decode, confirm_encode, confirm_same },
};

static void check_auth(const uint8_t *data, size_t size)
{
	for (size_t k = 0; k < sizeof(auth_kinds) / sizeof(auth_kinds[0]);
	     k++) {
		const struct auth_kind *a = &auth_kinds[k];
		struct kn__auth_answer m, again, poison; /* the largest */
		uint8_t *enc;
		int ret;

		memset(&poison, 0xee, sizeof(poison));
		memcpy(&m, &poison, sizeof(m));
		ret = a->decode(data, size, &m);
		if (ret) {
			if (ret != -EPROTO)
				fail("%s decode returned %d", a->name, ret);
			if (memcmp(&m, &poison, sizeof(m)))
				fail("%s decode wrote its output on failure",
				     a->name);
			continue;
		}
		if (size != a->len)
			fail("decoded a %s of %zu bytes", a->name, size);
		if (memcmp((const uint8_t *)&m + a->size,
			   (const uint8_t *)&poison + a->size,
			   sizeof(m) - a->size))
			fail("%s decode wrote past its struct", a->name);
		enc = malloc(a->len);
		if (!enc)
			fail("out of memory");
		a->encode(&m, enc);
		if (memcmp(enc, data, a->len))
			fail("a %s does not encode back to itself", a->name);
		memcpy(&again, &poison, sizeof(again));
		if (a->decode(enc, a->len, &again))
			fail("a re-encoded %s does not decode", a->name);
		if (!a->same(&m, &again))
			fail("decode, encode, decode changed a %s", a->name);
		free(enc);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	check_msg(data, size);
	check_auth(data, size);

	/*
	 * Again with the header's payload length set to what follows it, so
	 * that a mutation that grows or shrinks a payload still reaches the
	 * payload's decoder.
	 */
	if (size >= KN__MSG_HDR && size <= KN__MSG_MAX) {
		uint8_t *fixed = dup_exact(data, size);
		size_t plen = size - KN__MSG_HDR;

		for (int i = 0; i < 4; i++)
			fixed[4 + i] = (uint8_t)(plen >> (8 * i));
		if (memcmp(fixed + 4, data + 4, 4))
			check_msg(fixed, size);
		free(fixed);
	}
	return 0;
}
