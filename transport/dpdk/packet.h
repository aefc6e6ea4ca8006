/* SPDX-License-Identifier: Apache-2.0 */
/*
 * packet.h - the dpdk provider's packets (docs/dpdk.md, "Wire format"):
 * Ethernet II, IPv4 without options, UDP, then a 40-byte little-endian
 * Kanel header and the segment's payload.
 *
 * Pure functions over bytes, no DPDK: the receive path and the fuzzer
 * (tests/fuzz/fuzz_dpdk.c) drive the same decoder.  Decoding checks
 * everything that does not depend on an endpoint's state: the
 * Ethernet type, the IPv4 version, header length, checksum, total
 * length and fragment bits, the protocol, the UDP port and length, and
 * the Kanel header's magic, version, type, op, flags and payload
 * length.  Grants, bounds and the message a segment continues are the
 * endpoint's to check (rx.c).
 */
#ifndef KN_TRANSPORT_DPDK_PACKET_H
#define KN_TRANSPORT_DPDK_PACKET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KN_DP_ETH_LEN 14u
#define KN_DP_IP_LEN  20u
#define KN_DP_UDP_LEN 8u
#define KN_DP_KN_LEN  40u
/* Everything before a segment's payload. */
#define KN_DP_HDRS_LEN \
	(KN_DP_ETH_LEN + KN_DP_IP_LEN + KN_DP_UDP_LEN + KN_DP_KN_LEN)
#define KN_DP_MAGIC   0x444bu /* "KD" on the wire */
#define KN_DP_VERSION 1u

enum kn__dp_type {
	KN_DP_DATA = 1, /* a segment of a message: carries a sequence number */
	KN_DP_ACK = 2,	/* only the acknowledgement (no payload, no seq) */
};

enum kn__dp_op {
	KN_DP_WRITE = 1,     /* payload into the grant @key at @off */
	KN_DP_READ_REQ = 2,  /* send back @total bytes of grant @key at @off */
	KN_DP_READ_RESP = 3, /* payload answers the oldest open read, at @off */
	KN_DP_SEND = 4,	     /* payload at @off of a message of @total bytes */
};

/* Segment flags. */
#define KN_DP_F_FIRST (1u << 0) /* the first segment of its message */
#define KN_DP_F_LAST  (1u << 1) /* the last: WRITE delivers @imm after it */
#define KN_DP_F_RNR   (1u << 2) /* ACK: a SEND found no recv posted */
#define KN_DP_F_MASK  (KN_DP_F_FIRST | KN_DP_F_LAST | KN_DP_F_RNR)

/* The Kanel header, decoded. */
struct kn__dp_hdr {
	uint8_t type;	 /* enum kn__dp_type */
	uint8_t op;	 /* DATA: enum kn__dp_op; ACK: 0 */
	uint8_t flags;	 /* KN_DP_F_* */
	uint16_t len;	 /* payload bytes in this packet */
	uint32_t dst_ep; /* the receiver's endpoint id */
	uint32_t token;	 /* the receiver's secret for that endpoint */
	uint32_t seq;	 /* DATA: this segment's sequence number */
	uint32_t ack;	 /* the next sequence number the sender expects */
	uint32_t key;	 /* WRITE, READ_REQ: the grant's key */
	uint32_t imm;	 /* WRITE (last): the immediate */
	uint32_t total;	 /* READ_REQ: bytes asked; SEND: the message's */
	uint64_t off;	 /* WRITE, READ_REQ: in the grant; RESP, SEND: in the
			    message */
};

/* The addresses of a packet's two ends: MAC, IPv4 and UDP port. */
struct kn__dp_addr {
	uint8_t mac[6];
	uint32_t ip;   /* network byte order */
	uint16_t port; /* host byte order */
};

/* A decoded packet: who sent it, its header, where its payload is. */
struct kn__dp_pkt {
	struct kn__dp_addr src;
	struct kn__dp_hdr h;
	const uint8_t *payload; /* h.len bytes inside the frame */
};

/*
 * Write the headers of a packet from @src to @dst with @h into @out
 * (KN_DP_HDRS_LEN bytes; the payload of h->len bytes follows them).
 * @ip_id is the IPv4 identification (any value: nothing is fragmented).
 */
void kn__dp_encode(const struct kn__dp_addr *src, const struct kn__dp_addr *dst,
		   const struct kn__dp_hdr *h, uint16_t ip_id,
		   uint8_t out[KN_DP_HDRS_LEN]);

/*
 * Decode the @len bytes of @frame, a packet that arrived on a port
 * whose UDP port is @port, into @pkt.  0 on success; otherwise @pkt is
 * untouched and the return says why: -ENOENT for a frame that is not
 * ours to judge (not IPv4/UDP, or for another UDP port: the kernel's or
 * a neighbour's traffic on a shared link), -EPROTO for a malformed one
 * (bad lengths, checksum, fragment, magic, version, type, op or flags),
 * with @why (if not NULL) set to a static description of the fault.
 * @max_payload is the most payload one segment may carry.
 */
int kn__dp_decode(const uint8_t *frame, size_t len, uint16_t port,
		  uint32_t max_payload, struct kn__dp_pkt *pkt,
		  const char **why);

/* The Internet checksum of @len bytes (RFC 1071), as stored. */
uint16_t kn__dp_csum(const uint8_t *p, size_t len);

/* a - b of two sequence numbers, modulo 2^32: < 0 when a is before b. */
static inline int32_t kn__dp_seq_diff(uint32_t a, uint32_t b)
{
	return (int32_t)(a - b);
}

#endif /* KN_TRANSPORT_DPDK_PACKET_H */
