/* SPDX-License-Identifier: Apache-2.0 */
/*
 * msg.c - encoding and bounds-checked decoding of the control messages
 * (one walk of each message's fields serves both), and the JOB message's
 * mapping to and from a configuration.
 */
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <string.h>

#include "msg.h"

struct cursor {
	uint8_t *w;	  /* encoding: the bytes written; NULL when decoding */
	const uint8_t *r; /* decoding */
	size_t pos, cap;
	int err;
};

/* A message that cannot be: -EINVAL to encode, -EPROTO decoded. */
static void refuse(struct cursor *c)
{
	if (!c->err)
		c->err = c->w ? -EINVAL : -EPROTO;
}

/*
 * The fields: each one call, which writes *@v when encoding and reads it
 * into *@v when decoding, so that one walk of a message (payload) is its
 * layout both ways.  Decoding past the end reads zeros, and the message
 * is refused.
 */
static void bytes(struct cursor *c, void *v, size_t n)
{
	if (c->err || n > c->cap - c->pos) {
		refuse(c);
		if (!c->w)
			memset(v, 0, n);
		return;
	}
	if (c->w)
		memcpy(c->w + c->pos, v, n);
	else
		memcpy(v, c->r + c->pos, n);
	c->pos += n;
}

static void u16(struct cursor *c, uint16_t *v)
{
	uint8_t b[2] = { (uint8_t)*v, (uint8_t)(*v >> 8) };

	bytes(c, b, 2);
	if (!c->w)
		*v = (uint16_t)(b[0] | b[1] << 8);
}

static void u32(struct cursor *c, uint32_t *v)
{
	uint8_t b[4];

	for (int i = 0; i < 4; i++)
		b[i] = (uint8_t)(*v >> (8 * i));
	bytes(c, b, 4);
	if (c->w)
		return;
	*v = 0;
	for (int i = 0; i < 4; i++)
		*v |= (uint32_t)b[i] << (8 * i);
}

static void u64(struct cursor *c, uint64_t *v)
{
	uint32_t lo = (uint32_t)*v, hi = (uint32_t)(*v >> 32);

	u32(c, &lo);
	u32(c, &hi);
	if (!c->w)
		*v = lo | (uint64_t)hi << 32;
}

/* A float or a signed word: its 32 bits. */
static void bits32(struct cursor *c, void *v)
{
	uint32_t b;

	memcpy(&b, v, 4);
	u32(c, &b);
	if (!c->w)
		memcpy(v, &b, 4);
}

/*
 * A count that sizes the array after it, of at most @max: false, the
 * message refused, when the array would not fit.
 */
static bool count(struct cursor *c, uint32_t *n, uint32_t max)
{
	u32(c, n);
	if (*n <= max)
		return true;
	refuse(c);
	return false;
}

/* A string as u16 length + bytes (no NUL on the wire). */
static void str(struct cursor *c, char *s, size_t max)
{
	uint16_t n = c->w ? (uint16_t)strnlen(s, max) : 0;

	if (c->w && strnlen(s, max) == max) {
		refuse(c);
		return;
	}
	u16(c, &n);
	if (n >= max) {
		refuse(c);
		s[0] = 0;
		return;
	}
	bytes(c, s, n);
	if (c->w)
		return;
	s[c->err ? 0 : n] = 0;
	if (!c->err && memchr(s, 0, n))
		refuse(c); /* an embedded NUL */
}

static void rdesc(struct cursor *c, struct kn__tp_rdesc *d)
{
	u64(c, &d->addr);
	u64(c, &d->len);
	u32(c, &d->key);
	u32(c, &d->access);
}

/* An IPv4 or IPv6 address with its port: family u16, port u16, 16 bytes. */
static void addr(struct cursor *c, struct sockaddr_storage *ss)
{
	struct sockaddr_in *a4 = (void *)ss;
	struct sockaddr_in6 *a6 = (void *)ss;
	uint8_t ip[16] = { 0 };
	uint16_t fam = ss->ss_family == AF_INET6 ? 6 : 4, port = 0;

	if (c->w && ss->ss_family == AF_INET) {
		memcpy(ip, &a4->sin_addr, 4);
		port = ntohs(a4->sin_port);
	} else if (c->w && ss->ss_family == AF_INET6) {
		memcpy(ip, &a6->sin6_addr, 16);
		port = ntohs(a6->sin6_port);
	} else if (c->w) {
		refuse(c);
	}
	u16(c, &fam);
	u16(c, &port);
	bytes(c, ip, 16);
	if (c->w)
		return;
	memset(ss, 0, sizeof(*ss));
	if (fam == 4) {
		for (int i = 4; i < 16; i++)
			if (ip[i])
				refuse(c); /* one encoding only */
		a4->sin_family = AF_INET;
		a4->sin_port = htons(port);
		memcpy(&a4->sin_addr, ip, 4);
	} else if (fam == 6) {
		a6->sin6_family = AF_INET6;
		a6->sin6_port = htons(port);
		memcpy(&a6->sin6_addr, ip, 16);
	} else {
		refuse(c);
	}
}

/* sync/'s parameter block, in its own order of words. */
static void words(struct cursor *c, struct kn__sync_params *p)
{
	uint32_t w[KN__SYNC_PARAMS_WORDS];

	if (c->w)
		kn__sync_params_pack(p, w);
	for (uint32_t i = 0; i < KN__SYNC_PARAMS_WORDS; i++)
		u32(c, &w[i]);
	if (!c->w)
		kn__sync_params_unpack(p, w);
}

/*
 * The payload of @m, written or read through @c: the one description of
 * every message's layout.  Encoding only reads *@m.  The counts that
 * size an array are checked before the array; what a value may be is
 * checked after decoding (check).
 */
static void payload(struct cursor *c, struct kn__msg *m)
{
	switch (m->type) {
	case KN__MSG_AUTH:
		if (!count(c, &m->u.auth.len, KN__AUTH_MAX))
			return;
		bytes(c, m->u.auth.data, m->u.auth.len);
		break;
	case KN__MSG_HELLO:
		u32(c, &m->u.hello.role);
		u32(c, &m->u.hello.rank);
		addr(c, &m->u.hello.addr);
		break;
	case KN__MSG_JOB:
		u32(c, &m->u.job.workers);
		u32(c, &m->u.job.servers);
		u32(c, &m->u.job.protocol);
		u32(c, &m->u.job.optimizer);
		u64(c, &m->u.job.chunk_bytes);
		u32(c, &m->u.job.fuse_bytes);
		u32(c, &m->u.job.push_window);
		bits32(c, &m->u.job.lr);
		bits32(c, &m->u.job.momentum);
		words(c, &m->u.job.proto);
		u32(c, &m->u.job.rank);
		u32(c, &m->u.job.restore);
		break;
	case KN__MSG_TENSOR:
		u32(c, &m->u.tensor.index);
		u32(c, &m->u.tensor.dtype);
		u64(c, &m->u.tensor.len);
		str(c, m->u.tensor.key, KN__KEY_MAX);
		break;
	case KN__MSG_TENSORS_END:
		u32(c, &m->u.tensors_end.count);
		u32(c, &m->u.tensors_end.flags);
		break;
	case KN__MSG_BUFFERS:
		u32(c, &m->u.buffers.index);
		rdesc(c, &m->u.buffers.params);
		rdesc(c, &m->u.buffers.grads);
		break;
	case KN__MSG_SLOTS:
		rdesc(c, &m->u.slots.slots);
		break;
	case KN__MSG_READY:
		u32(c, &m->u.ready.what);
		break;
	case KN__MSG_HEARTBEAT:
	case KN__MSG_DONE:
	case KN__MSG_SHUTDOWN:
	case KN__MSG_RECOVER:
		break;
	case KN__MSG_MEMBER:
		u32(c, &m->u.member.rank);
		u32(c, &m->u.member.joined);
		break;
	case KN__MSG_ERROR:
		bits32(c, &m->u.error.code);
		str(c, m->u.error.text, KN__TEXT_MAX);
		break;
	case KN__MSG_RELEASE:
		u32(c, &m->u.release.chunk);
		u32(c, &m->u.release.steps);
		u64(c, &m->u.release.epoch);
		bits32(c, &m->u.release.hint);
		u64(c, &m->u.release.version);
		break;
	case KN__MSG_TIMING:
		bits32(c, &m->u.timing.seconds);
		break;
	case KN__MSG_PLAN:
		u64(c, &m->u.plan.epoch);
		u32(c, &m->u.plan.workers);
		u32(c, &m->u.plan.first);
		if (!count(c, &m->u.plan.count, KN__PLAN_PART))
			return;
		for (uint32_t i = 0; i < m->u.plan.count; i++)
			u32(c, &m->u.plan.steps[i]);
		break;
	case KN__MSG_BARRIER:
		u64(c, &m->u.barrier.epoch);
		break;
	case KN__MSG_CHECKPOINTS:
		u32(c, &m->u.checkpoints.any);
		if (!count(c, &m->u.checkpoints.count, KN__MSG_CKPT_MAX))
			return;
		for (uint32_t i = 0; i < m->u.checkpoints.count; i++)
			u64(c, &m->u.checkpoints.versions[i]);
		break;
	case KN__MSG_RESTORE:
		u64(c, &m->u.restore.version);
		break;
	default:
		refuse(c);
		break;
	}
}

int kn__msg_encode(const struct kn__msg *m, uint8_t *buf, size_t cap)
{
	struct cursor c = { .w = buf, .pos = KN__MSG_HDR, .cap = cap };

	if (cap < KN__MSG_HDR)
		return -EINVAL;
	/* payload writes nothing into *m when encoding */
	payload(&c, (struct kn__msg *)m);
	if (c.err)
		return c.err;
	buf[0] = (uint8_t)m->type;
	buf[1] = (uint8_t)(m->type >> 8);
	buf[2] = KN__MSG_VERSION;
	buf[3] = 0;
	for (int i = 0; i < 4; i++)
		buf[4 + i] = (uint8_t)((c.pos - KN__MSG_HDR) >> (8 * i));
	return (int)c.pos;
}

/* What a decoded message's values may be: 0 or -EPROTO. */
static int check(const struct kn__msg *m)
{
	struct kn__sync_params proto;
	bool ok = true;

	switch (m->type) {
	case KN__MSG_HELLO:
		return m->u.hello.role < KN__ROLE_COORDINATOR ||
				       m->u.hello.role > KN__ROLE_WORKER
			       ? -EPROTO
			       : 0;
	case KN__MSG_JOB:
		/* what sync/ would refuse is refused here (0: the default) */
		proto = m->u.job.proto;
		return m->u.job.restore > 1 || kn__sync_params_resolve(&proto)
			       ? -EPROTO
			       : 0;
	case KN__MSG_TENSORS_END:
		return m->u.tensors_end.flags & ~KN__TABLE_OWN_OPTIMIZER
			       ? -EPROTO
			       : 0;
	case KN__MSG_MEMBER:
		return m->u.member.joined > 1 ? -EPROTO : 0;
	case KN__MSG_ERROR:
		return m->u.error.code >= 0 ? -EPROTO : 0;
	case KN__MSG_RELEASE:
		return !(m->u.release.hint >= 0) || !isfinite(m->u.release.hint)
			       ? -EPROTO
			       : 0;
	case KN__MSG_TIMING:
		return !(m->u.timing.seconds >= 0) ||
				       !isfinite(m->u.timing.seconds)
			       ? -EPROTO
			       : 0;
	case KN__MSG_PLAN:
		/* a part within the plan */
		return m->u.plan.first > m->u.plan.workers ||
				       m->u.plan.count > m->u.plan.workers -
								 m->u.plan.first
			       ? -EPROTO
			       : 0;
	case KN__MSG_CHECKPOINTS:
		/* newest first, each once: what the coordinator intersects */
		for (uint32_t i = 1; i < m->u.checkpoints.count; i++)
			ok &= m->u.checkpoints.versions[i] <
			      m->u.checkpoints.versions[i - 1];
		return m->u.checkpoints.any > 1 || !ok ? -EPROTO : 0;
	default:
		return 0;
	}
}

int kn__msg_decode(const uint8_t *buf, size_t len, struct kn__msg *m)
{
	struct cursor c = { .r = buf, .pos = KN__MSG_HDR };
	uint32_t plen;

	if (len < KN__MSG_HDR || len > KN__MSG_MAX)
		return -EPROTO;
	plen = (uint32_t)buf[4] | (uint32_t)buf[5] << 8 |
	       (uint32_t)buf[6] << 16 | (uint32_t)buf[7] << 24;
	if (buf[2] != KN__MSG_VERSION || buf[3] != 0 ||
	    plen != len - KN__MSG_HDR)
		return -EPROTO;
	c.cap = len;
	memset(m, 0, sizeof(*m));
	m->type = (uint16_t)(buf[0] | buf[1] << 8);
	payload(&c, m);
	if (c.err || c.pos != len)
		return -EPROTO; /* short, or bytes left over */
	return check(m);
}

const char *kn__msg_name(uint16_t type)
{
	static const char *const names[] = {
		[KN__MSG_AUTH] = "AUTH",
		[KN__MSG_HELLO] = "HELLO",
		[KN__MSG_JOB] = "JOB",
		[KN__MSG_TENSOR] = "TENSOR",
		[KN__MSG_TENSORS_END] = "TENSORS_END",
		[KN__MSG_BUFFERS] = "BUFFERS",
		[KN__MSG_SLOTS] = "SLOTS",
		[KN__MSG_READY] = "READY",
		[KN__MSG_HEARTBEAT] = "HEARTBEAT",
		[KN__MSG_MEMBER] = "MEMBER",
		[KN__MSG_DONE] = "DONE",
		[KN__MSG_SHUTDOWN] = "SHUTDOWN",
		[KN__MSG_ERROR] = "ERROR",
		[KN__MSG_RELEASE] = "RELEASE",
		[KN__MSG_TIMING] = "TIMING",
		[KN__MSG_PLAN] = "PLAN",
		[KN__MSG_BARRIER] = "BARRIER",
		[KN__MSG_CHECKPOINTS] = "CHECKPOINTS",
		[KN__MSG_RESTORE] = "RESTORE",
		[KN__MSG_RECOVER] = "RECOVER",
	};

	if (type < sizeof(names) / sizeof(names[0]) && names[type])
		return names[type];
	return "?";
}

void kn__msg_job_init(const struct kn__config *cfg, uint32_t optimizer,
		      uint32_t rank, bool restore, struct kn__msg *out)
{
	*out = (struct kn__msg){ .type = KN__MSG_JOB };
	out->u.job.workers = cfg->workers;
	out->u.job.servers = cfg->servers;
	out->u.job.protocol = cfg->sync;
	out->u.job.proto = cfg->proto;
	out->u.job.optimizer = optimizer;
	out->u.job.chunk_bytes = cfg->chunk_bytes;
	out->u.job.fuse_bytes = cfg->fuse_bytes;
	out->u.job.push_window = cfg->push_window;
	out->u.job.lr = cfg->lr;
	out->u.job.momentum = cfg->momentum;
	out->u.job.rank = rank;
	out->u.job.restore = restore;
}

int kn__msg_job_config(const struct kn__msg *job, struct kn__config *cfg)
{
	if (job->type != KN__MSG_JOB)
		return -EINVAL;
	cfg->workers = job->u.job.workers;
	cfg->servers = job->u.job.servers;
	cfg->sync = job->u.job.protocol;
	cfg->optimizer = (enum kn__config_optimizer)job->u.job.optimizer;
	cfg->chunk_bytes = (uint32_t)job->u.job.chunk_bytes;
	cfg->fuse_bytes = job->u.job.fuse_bytes;
	cfg->push_window = job->u.job.push_window;
	cfg->lr = job->u.job.lr;
	cfg->momentum = job->u.job.momentum;
	cfg->proto = job->u.job.proto;
	return 0;
}
