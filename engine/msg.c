/* SPDX-License-Identifier: Apache-2.0 */
/*
 * msg.c - encoding and bounds-checked decoding of the control messages.
 */
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <string.h>

#include "msg.h"

struct cursor {
	uint8_t *w;	  /* encoding */
	const uint8_t *r; /* decoding */
	size_t pos, cap;
	int err;
};

static void put(struct cursor *c, const void *p, size_t n)
{
	if (c->err || n > c->cap - c->pos) {
		c->err = -EINVAL;
		return;
	}
	memcpy(c->w + c->pos, p, n);
	c->pos += n;
}

static void put_u16(struct cursor *c, uint16_t v)
{
	uint8_t b[2] = { (uint8_t)v, (uint8_t)(v >> 8) };

	put(c, b, 2);
}

static void put_u32(struct cursor *c, uint32_t v)
{
	uint8_t b[4];

	for (int i = 0; i < 4; i++)
		b[i] = (uint8_t)(v >> (8 * i));
	put(c, b, 4);
}

static void put_u64(struct cursor *c, uint64_t v)
{
	put_u32(c, (uint32_t)v);
	put_u32(c, (uint32_t)(v >> 32));
}

static void put_f32(struct cursor *c, float f)
{
	uint32_t v;

	memcpy(&v, &f, 4);
	put_u32(c, v);
}

/* sync/'s parameter block, in its own order of words. */
static void put_words(struct cursor *c, const struct kn__sync_params *p)
{
	uint32_t w[KN__SYNC_PARAMS_WORDS];

	kn__sync_params_pack(p, w);
	for (uint32_t i = 0; i < KN__SYNC_PARAMS_WORDS; i++)
		put_u32(c, w[i]);
}

/* A string as u16 length + bytes (no NUL on the wire). */
static void put_str(struct cursor *c, const char *s, size_t max)
{
	size_t n = strnlen(s, max);

	if (n == max) {
		c->err = -EINVAL;
		return;
	}
	put_u16(c, (uint16_t)n);
	put(c, s, n);
}

static void put_rdesc(struct cursor *c, const struct kn__tp_rdesc *d)
{
	put_u64(c, d->addr);
	put_u64(c, d->len);
	put_u32(c, d->key);
	put_u32(c, d->access);
}

/* An IPv4 or IPv6 address with its port: family u16, port u16, 16 bytes. */
static void put_addr(struct cursor *c, const struct sockaddr_storage *ss)
{
	uint8_t ip[16] = { 0 };
	uint16_t port = 0;

	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *a = (const void *)ss;

		memcpy(ip, &a->sin_addr, 4);
		port = ntohs(a->sin_port);
	} else if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const void *)ss;

		memcpy(ip, &a->sin6_addr, 16);
		port = ntohs(a->sin6_port);
	} else {
		c->err = -EINVAL;
	}
	put_u16(c, ss->ss_family == AF_INET6 ? 6 : 4);
	put_u16(c, port);
	put(c, ip, 16);
}

static void get(struct cursor *c, void *p, size_t n)
{
	if (c->err || n > c->cap - c->pos) {
		c->err = -EPROTO;
		memset(p, 0, n);
		return;
	}
	memcpy(p, c->r + c->pos, n);
	c->pos += n;
}

static uint16_t get_u16(struct cursor *c)
{
	uint8_t b[2];

	get(c, b, 2);
	return (uint16_t)(b[0] | b[1] << 8);
}

static uint32_t get_u32(struct cursor *c)
{
	uint8_t b[4];
	uint32_t v = 0;

	get(c, b, 4);
	for (int i = 0; i < 4; i++)
		v |= (uint32_t)b[i] << (8 * i);
	return v;
}

static uint64_t get_u64(struct cursor *c)
{
	uint64_t lo = get_u32(c);

	return lo | (uint64_t)get_u32(c) << 32;
}

static float get_f32(struct cursor *c)
{
	uint32_t v = get_u32(c);
	float f;

	memcpy(&f, &v, 4);
	return f;
}

static void get_str(struct cursor *c, char *s, size_t max)
{
	uint16_t n = get_u16(c);

	if (n >= max) {
		c->err = -EPROTO;
		s[0] = 0;
		return;
	}
	get(c, s, n);
	s[c->err ? 0 : n] = 0;
	if (!c->err && memchr(s, 0, n))
		c->err = -EPROTO; /* an embedded NUL */
}

static void get_rdesc(struct cursor *c, struct kn__tp_rdesc *d)
{
	d->addr = get_u64(c);
	d->len = get_u64(c);
	d->key = get_u32(c);
	d->access = get_u32(c);
}

static void get_addr(struct cursor *c, struct sockaddr_storage *ss)
{
	uint16_t fam = get_u16(c), port = get_u16(c);
	uint8_t ip[16];

	get(c, ip, 16);
	memset(ss, 0, sizeof(*ss));
	if (fam == 4) {
		struct sockaddr_in *a = (void *)ss;

		for (int i = 4; i < 16; i++)
			if (ip[i])
				c->err = -EPROTO; /* one encoding only */

		a->sin_family = AF_INET;
		a->sin_port = htons(port);
		memcpy(&a->sin_addr, ip, 4);
	} else if (fam == 6) {
		struct sockaddr_in6 *a = (void *)ss;

		a->sin6_family = AF_INET6;
		a->sin6_port = htons(port);
		memcpy(&a->sin6_addr, ip, 16);
	} else {
		c->err = -EPROTO;
	}
}

int kn__msg_encode(const struct kn__msg *m, uint8_t *buf, size_t cap)
{
	struct cursor c = { .w = buf, .pos = KN__MSG_HDR, .cap = cap };

	if (cap < KN__MSG_HDR)
		return -EINVAL;
	switch (m->type) {
	case KN__MSG_AUTH:
		if (m->u.auth.len > KN__AUTH_MAX)
			return -EINVAL;
		put_u32(&c, m->u.auth.len);
		put(&c, m->u.auth.data, m->u.auth.len);
		break;
	case KN__MSG_HELLO:
		put_u32(&c, m->u.hello.role);
		put_u32(&c, m->u.hello.rank);
		put_addr(&c, &m->u.hello.addr);
		break;
	case KN__MSG_JOB:
		put_u32(&c, m->u.job.workers);
		put_u32(&c, m->u.job.servers);
		put_u32(&c, m->u.job.protocol);
		put_u32(&c, m->u.job.optimizer);
		put_u64(&c, m->u.job.chunk_bytes);
		put_u32(&c, m->u.job.fuse_bytes);
		put_u32(&c, m->u.job.push_window);
		put_f32(&c, m->u.job.lr);
		put_f32(&c, m->u.job.momentum);
		put_words(&c, &m->u.job.proto);
		put_u32(&c, m->u.job.rank);
		put_u32(&c, m->u.job.restore);
		break;
	case KN__MSG_TENSOR:
		put_u32(&c, m->u.tensor.index);
		put_u32(&c, m->u.tensor.dtype);
		put_u64(&c, m->u.tensor.len);
		put_str(&c, m->u.tensor.key, KN__KEY_MAX);
		break;
	case KN__MSG_TENSORS_END:
		put_u32(&c, m->u.tensors_end.count);
		put_u32(&c, m->u.tensors_end.flags);
		break;
	case KN__MSG_BUFFERS:
		put_u32(&c, m->u.buffers.index);
		put_rdesc(&c, &m->u.buffers.params);
		put_rdesc(&c, &m->u.buffers.grads);
		break;
	case KN__MSG_SLOTS:
		put_rdesc(&c, &m->u.slots.slots);
		break;
	case KN__MSG_READY:
		put_u32(&c, m->u.ready.what);
		break;
	case KN__MSG_HEARTBEAT:
	case KN__MSG_DONE:
	case KN__MSG_SHUTDOWN:
	case KN__MSG_RECOVER:
		break;
	case KN__MSG_MEMBER:
		put_u32(&c, m->u.member.rank);
		put_u32(&c, m->u.member.joined);
		break;
	case KN__MSG_ERROR:
		put_u32(&c, (uint32_t)m->u.error.code);
		put_str(&c, m->u.error.text, KN__TEXT_MAX);
		break;
	case KN__MSG_RELEASE:
		put_u32(&c, m->u.release.chunk);
		put_u32(&c, m->u.release.steps);
		put_u64(&c, m->u.release.epoch);
		put_f32(&c, m->u.release.hint);
		put_u64(&c, m->u.release.version);
		break;
	case KN__MSG_TIMING:
		put_f32(&c, m->u.timing.seconds);
		break;
	case KN__MSG_PLAN:
		if (m->u.plan.count > KN__PLAN_PART)
			return -EINVAL;
		put_u64(&c, m->u.plan.epoch);
		put_u32(&c, m->u.plan.workers);
		put_u32(&c, m->u.plan.first);
		put_u32(&c, m->u.plan.count);
		for (uint32_t i = 0; i < m->u.plan.count; i++)
			put_u32(&c, m->u.plan.steps[i]);
		break;
	case KN__MSG_BARRIER:
		put_u64(&c, m->u.barrier.epoch);
		break;
	case KN__MSG_CHECKPOINTS:
		if (m->u.checkpoints.count > KN__MSG_CKPT_MAX)
			return -EINVAL;
		put_u32(&c, m->u.checkpoints.any);
		put_u32(&c, m->u.checkpoints.count);
		for (uint32_t i = 0; i < m->u.checkpoints.count; i++)
			put_u64(&c, m->u.checkpoints.versions[i]);
		break;
	case KN__MSG_RESTORE:
		put_u64(&c, m->u.restore.version);
		break;
	default:
		return -EINVAL;
	}
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

/* sync/'s parameter block, as put_words wrote it. */
static void get_words(struct cursor *c, struct kn__sync_params *p)
{
	uint32_t w[KN__SYNC_PARAMS_WORDS];

	for (uint32_t i = 0; i < KN__SYNC_PARAMS_WORDS; i++)
		w[i] = get_u32(c);
	kn__sync_params_unpack(p, w);
}

int kn__msg_decode(const uint8_t *buf, size_t len, struct kn__msg *m)
{
	struct cursor c = { .r = buf, .pos = KN__MSG_HDR };
	struct kn__sync_params check;
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
	switch (m->type) {
	case KN__MSG_AUTH:
		m->u.auth.len = get_u32(&c);
		if (m->u.auth.len > KN__AUTH_MAX)
			return -EPROTO;
		get(&c, m->u.auth.data, m->u.auth.len);
		break;
	case KN__MSG_HELLO:
		m->u.hello.role = get_u32(&c);
		m->u.hello.rank = get_u32(&c);
		get_addr(&c, &m->u.hello.addr);
		if (m->u.hello.role < KN__ROLE_COORDINATOR ||
		    m->u.hello.role > KN__ROLE_WORKER)
			return -EPROTO;
		break;
	case KN__MSG_JOB:
		m->u.job.workers = get_u32(&c);
		m->u.job.servers = get_u32(&c);
		m->u.job.protocol = get_u32(&c);
		m->u.job.optimizer = get_u32(&c);
		m->u.job.chunk_bytes = get_u64(&c);
		m->u.job.fuse_bytes = get_u32(&c);
		m->u.job.push_window = get_u32(&c);
		m->u.job.lr = get_f32(&c);
		m->u.job.momentum = get_f32(&c);
		get_words(&c, &m->u.job.proto);
		m->u.job.rank = get_u32(&c);
		m->u.job.restore = get_u32(&c);
		if (m->u.job.restore > 1)
			return -EPROTO;
		/* what sync/ would refuse is refused here (0: the default) */
		check = m->u.job.proto;
		if (kn__sync_params_resolve(&check))
			return -EPROTO;
		break;
	case KN__MSG_TENSOR:
		m->u.tensor.index = get_u32(&c);
		m->u.tensor.dtype = get_u32(&c);
		m->u.tensor.len = get_u64(&c);
		get_str(&c, m->u.tensor.key, KN__KEY_MAX);
		break;
	case KN__MSG_TENSORS_END:
		m->u.tensors_end.count = get_u32(&c);
		m->u.tensors_end.flags = get_u32(&c);
		if (m->u.tensors_end.flags & ~KN__TABLE_OWN_OPTIMIZER)
			return -EPROTO;
		break;
	case KN__MSG_BUFFERS:
		m->u.buffers.index = get_u32(&c);
		get_rdesc(&c, &m->u.buffers.params);
		get_rdesc(&c, &m->u.buffers.grads);
		break;
	case KN__MSG_SLOTS:
		get_rdesc(&c, &m->u.slots.slots);
		break;
	case KN__MSG_READY:
		m->u.ready.what = get_u32(&c);
		break;
	case KN__MSG_HEARTBEAT:
	case KN__MSG_DONE:
	case KN__MSG_SHUTDOWN:
	case KN__MSG_RECOVER:
		break;
	case KN__MSG_MEMBER:
		m->u.member.rank = get_u32(&c);
		m->u.member.joined = get_u32(&c);
		if (m->u.member.joined > 1)
			return -EPROTO;
		break;
	case KN__MSG_ERROR:
		m->u.error.code = (int32_t)get_u32(&c);
		get_str(&c, m->u.error.text, KN__TEXT_MAX);
		if (m->u.error.code >= 0)
			return -EPROTO;
		break;
	case KN__MSG_RELEASE:
		m->u.release.chunk = get_u32(&c);
		m->u.release.steps = get_u32(&c);
		m->u.release.epoch = get_u64(&c);
		m->u.release.hint = get_f32(&c);
		m->u.release.version = get_u64(&c);
		if (!(m->u.release.hint >= 0) || !isfinite(m->u.release.hint))
			return -EPROTO;
		break;
	case KN__MSG_TIMING:
		m->u.timing.seconds = get_f32(&c);
		if (!(m->u.timing.seconds >= 0) ||
		    !isfinite(m->u.timing.seconds))
			return -EPROTO;
		break;
	case KN__MSG_PLAN:
		m->u.plan.epoch = get_u64(&c);
		m->u.plan.workers = get_u32(&c);
		m->u.plan.first = get_u32(&c);
		m->u.plan.count = get_u32(&c);
		/* a part within the plan, and no more than one part's room */
		if (m->u.plan.count > KN__PLAN_PART ||
		    m->u.plan.first > m->u.plan.workers ||
		    m->u.plan.count > m->u.plan.workers - m->u.plan.first)
			return -EPROTO;
		for (uint32_t i = 0; i < m->u.plan.count && !c.err; i++)
			m->u.plan.steps[i] = get_u32(&c);
		break;
	case KN__MSG_BARRIER:
		m->u.barrier.epoch = get_u64(&c);
		break;
	case KN__MSG_CHECKPOINTS:
		m->u.checkpoints.any = get_u32(&c);
		m->u.checkpoints.count = get_u32(&c);
		if (m->u.checkpoints.any > 1 ||
		    m->u.checkpoints.count > KN__MSG_CKPT_MAX)
			return -EPROTO;
		/* newest first, each once: what the coordinator intersects */
		for (uint32_t i = 0; i < m->u.checkpoints.count && !c.err;
		     i++) {
			m->u.checkpoints.versions[i] = get_u64(&c);
			if (i && m->u.checkpoints.versions[i] >=
					 m->u.checkpoints.versions[i - 1])
				return -EPROTO;
		}
		break;
	case KN__MSG_RESTORE:
		m->u.restore.version = get_u64(&c);
		break;
	default:
		return -EPROTO;
	}
	if (c.err || c.pos != len)
		return -EPROTO; /* short, or bytes left over */
	return 0;
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
