/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wire.h - the frame header of the tcp provider (docs/wire-format.md).
 *
 * Every frame is a 32-byte little-endian header, then @length bytes of
 * payload for WRITE_IMM, READ_RESP and SEND.  Decoding checks everything
 * that does not depend on the receiver's state (magic, version, op,
 * reserved bits, payload size); region bounds and rights are checked by
 * the receiver against its registrations.  Pure functions: this is what
 * the fuzzer drives.
 */
#ifndef KN_TRANSPORT_WIRE_H
#define KN_TRANSPORT_WIRE_H

#include <errno.h>
#include <stdint.h>
#include <string.h>

#define KN_WIRE_MAGIC	0x4e4bu /* "KN" on the wire */
#define KN_WIRE_VERSION 1u
#define KN_WIRE_HDR_LEN 32u
/* Largest payload of one frame, and so of one post. */
#define KN_WIRE_MAX_LEN (1u << 31)

enum kn__wire_op {
	KN_WIRE_WRITE_IMM = 1, /* payload into region@offset, then imm */
	KN_WIRE_READ_REQ = 2,  /* send back length bytes of region@offset */
	KN_WIRE_READ_RESP = 3, /* payload answers the READ_REQ of seq */
	KN_WIRE_SEND = 4,      /* payload fills the oldest posted recv */
};

struct kn__wire_hdr {
	uint8_t op;
	uint32_t region; /* WRITE_IMM, READ_REQ: the target's region key */
	uint32_t imm;	 /* WRITE_IMM */
	uint64_t offset; /* WRITE_IMM, READ_REQ: byte offset in the region */
	uint32_t length; /* payload bytes, or bytes asked for (READ_REQ) */
	uint32_t seq;	 /* per-endpoint sequence of the sender's frames */
};

static inline void kn__wire_put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static inline void kn__wire_put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline void kn__wire_put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint32_t kn__wire_get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static inline uint64_t kn__wire_get64(const uint8_t *p)
{
	return (uint64_t)kn__wire_get32(p) | (uint64_t)kn__wire_get32(p + 4)
						     << 32;
}

/* Whether frames of @op carry a payload of ->length bytes. */
static inline int kn__wire_has_payload(uint8_t op)
{
	return op != KN_WIRE_READ_REQ;
}

static inline void kn__wire_encode(const struct kn__wire_hdr *h,
				   uint8_t out[KN_WIRE_HDR_LEN])
{
	kn__wire_put16(out, KN_WIRE_MAGIC);
	out[2] = KN_WIRE_VERSION;
	out[3] = h->op;
	kn__wire_put32(out + 4, 0); /* flags and reserved */
	kn__wire_put32(out + 8, h->region);
	kn__wire_put32(out + 12, h->imm);
	kn__wire_put64(out + 16, h->offset);
	kn__wire_put32(out + 24, h->length);
	kn__wire_put32(out + 28, h->seq);
}

/*
 * Decode a header.  Returns 0, -EPROTO for a bad magic, version, op or a
 * non-zero reserved field, or -EMSGSIZE for a length above
 * KN_WIRE_MAX_LEN or (SEND) above @max_msg.  @h is written only on
 * success.
 */
static inline int kn__wire_decode(const uint8_t in[KN_WIRE_HDR_LEN],
				  uint32_t max_msg, struct kn__wire_hdr *h)
{
	struct kn__wire_hdr d;

	if ((uint16_t)(in[0] | in[1] << 8) != KN_WIRE_MAGIC ||
	    in[2] != KN_WIRE_VERSION || kn__wire_get32(in + 4) != 0)
		return -EPROTO;
	d.op = in[3];
	if (d.op < KN_WIRE_WRITE_IMM || d.op > KN_WIRE_SEND)
		return -EPROTO;
	d.region = kn__wire_get32(in + 8);
	d.imm = kn__wire_get32(in + 12);
	d.offset = kn__wire_get64(in + 16);
	d.length = kn__wire_get32(in + 24);
	d.seq = kn__wire_get32(in + 28);
	if (d.length > KN_WIRE_MAX_LEN ||
	    (d.op == KN_WIRE_SEND && d.length > max_msg))
		return -EMSGSIZE;
	*h = d;
	return 0;
}

#endif /* KN_TRANSPORT_WIRE_H */
