/* SPDX-License-Identifier: Apache-2.0 */
/*
 * packet.c - encoding and decoding the dpdk provider's packets: the
 * frame layout is in packet.h and docs/dpdk.md.
 */
#include <errno.h>
#include <string.h>

#include "packet.h"
#include "wire.h" /* the little-endian field helpers */

#define ETHERTYPE_IPV4 0x0800u
#define IPPROTO_UDP_   17u
#define IP_TTL_	       64u
#define IP_DF	       0x4000u /* don't fragment */
#define IP_MF_OFF      0x3fffu /* more fragments, fragment offset */

static void put16be(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static uint16_t get16be(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

uint16_t kn__dp_csum(const uint8_t *p, size_t len)
{
	uint32_t sum = 0;

	for (size_t i = 0; i + 1 < len; i += 2)
		sum += get16be(p + i);
	if (len & 1)
		sum += (uint32_t)p[len - 1] << 8;
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return (uint16_t)~sum;
}

void kn__dp_encode(const struct kn__dp_addr *src, const struct kn__dp_addr *dst,
		   const struct kn__dp_hdr *h, uint16_t ip_id,
		   uint8_t out[KN_DP_HDRS_LEN])
{
	uint8_t *ip = out + KN_DP_ETH_LEN, *udp = ip + KN_DP_IP_LEN;
	uint8_t *kn = udp + KN_DP_UDP_LEN;
	uint16_t udp_len = (uint16_t)(KN_DP_UDP_LEN + KN_DP_KN_LEN + h->len);

	memcpy(out, dst->mac, 6);
	memcpy(out + 6, src->mac, 6);
	put16be(out + 12, ETHERTYPE_IPV4);

	ip[0] = 0x45; /* version 4, 5 words */
	ip[1] = 0;    /* DSCP, ECN */
	put16be(ip + 2, (uint16_t)(KN_DP_IP_LEN + udp_len));
	put16be(ip + 4, ip_id);
	put16be(ip + 6, IP_DF);
	ip[8] = IP_TTL_;
	ip[9] = IPPROTO_UDP_;
	put16be(ip + 10, 0);
	memcpy(ip + 12, &src->ip, 4); /* both already in network order */
	memcpy(ip + 16, &dst->ip, 4);
	put16be(ip + 10, kn__dp_csum(ip, KN_DP_IP_LEN));

	put16be(udp, src->port);
	put16be(udp + 2, dst->port);
	put16be(udp + 4, udp_len);
	put16be(udp + 6, 0); /* no UDP checksum: IPv4 allows it; see dpdk.md */

	put16(kn, KN_DP_MAGIC);
	kn[2] = KN_DP_VERSION;
	kn[3] = h->type;
	kn[4] = h->op;
	kn[5] = h->flags;
	put16(kn + 6, h->len);
	kn__wire_put32(kn + 8, h->dst_ep);
	kn__wire_put32(kn + 12, h->token);
	kn__wire_put32(kn + 16, h->seq);
	kn__wire_put32(kn + 20, h->ack);
	kn__wire_put32(kn + 24, h->type == KN_DP_DATA && h->op == KN_DP_WRITE
					? h->imm
					: h->total);
	kn__wire_put32(kn + 28, h->key);
	kn__wire_put64(kn + 32, h->off);
}

#define FAIL(msg)                   \
	do {                        \
		if (why)            \
			*why = msg; \
		return -EPROTO;     \
	} while (0)

int kn__dp_decode(const uint8_t *frame, size_t len, uint16_t port,
		  uint32_t max_payload, struct kn__dp_pkt *pkt,
		  const char **why)
{
	const uint8_t *ip = frame + KN_DP_ETH_LEN, *udp, *kn;
	struct kn__dp_pkt p;
	uint16_t ip_len, udp_len;
	uint32_t word;

	if (len < KN_DP_ETH_LEN + KN_DP_IP_LEN + KN_DP_UDP_LEN ||
	    get16be(frame + 12) != ETHERTYPE_IPV4 || (ip[0] >> 4) != 4 ||
	    ip[9] != IPPROTO_UDP_)
		return -ENOENT;
	udp = ip + KN_DP_IP_LEN;
	if ((ip[0] & 0xf) != 5 || get16be(udp + 2) != port)
		return -ENOENT; /* options: none of ours carries them */
	ip_len = get16be(ip + 2);
	/* Ethernet pads short frames: the IP length rules, if it fits */
	if (ip_len > len - KN_DP_ETH_LEN ||
	    ip_len < KN_DP_IP_LEN + KN_DP_UDP_LEN + KN_DP_KN_LEN)
		FAIL("IPv4 total length does not match the frame");
	if (get16be(ip + 6) & IP_MF_OFF)
		FAIL("IPv4 fragment (the provider never fragments)");
	if (kn__dp_csum(ip, KN_DP_IP_LEN) != 0)
		FAIL("bad IPv4 header checksum");
	udp_len = get16be(udp + 4);
	if (udp_len != ip_len - KN_DP_IP_LEN)
		FAIL("UDP length does not match the IPv4 length");
	kn = udp + KN_DP_UDP_LEN;
	if (get16(kn) != KN_DP_MAGIC || kn[2] != KN_DP_VERSION)
		FAIL("bad magic or version");

	memset(&p, 0, sizeof(p));
	memcpy(p.src.mac, frame + 6, 6);
	memcpy(&p.src.ip, ip + 12, 4);
	p.src.port = get16be(udp);
	p.h.type = kn[3];
	p.h.op = kn[4];
	p.h.flags = kn[5];
	p.h.len = get16(kn + 6);
	p.h.dst_ep = kn__wire_get32(kn + 8);
	p.h.token = kn__wire_get32(kn + 12);
	p.h.seq = kn__wire_get32(kn + 16);
	p.h.ack = kn__wire_get32(kn + 20);
	word = kn__wire_get32(kn + 24);
	p.h.key = kn__wire_get32(kn + 28);
	p.h.off = kn__wire_get64(kn + 32);
	if (p.h.len != udp_len - KN_DP_UDP_LEN - KN_DP_KN_LEN)
		FAIL("payload length does not match the UDP length");
	if (p.h.flags & ~KN_DP_F_MASK)
		FAIL("unknown flags");
	switch (p.h.type) {
	case KN_DP_ACK:
		if (p.h.op || p.h.len || (p.h.flags & ~KN_DP_F_RNR) ||
		    p.h.seq || word || p.h.key || p.h.off)
			FAIL("acknowledgement with data fields set");
		break;
	case KN_DP_DATA:
		if (p.h.op < KN_DP_WRITE || p.h.op > KN_DP_SEND)
			FAIL("unknown op");
		if (p.h.flags & KN_DP_F_RNR)
			FAIL("RNR flag on a data segment");
		if (p.h.len > max_payload)
			FAIL("segment above the port's payload size");
		if (p.h.op == KN_DP_READ_REQ &&
		    (p.h.len || p.h.flags != (KN_DP_F_FIRST | KN_DP_F_LAST)))
			FAIL("read request with a payload or in pieces");
		if (p.h.op == KN_DP_WRITE)
			p.h.imm = word;
		else
			p.h.total = word;
		if ((p.h.op == KN_DP_READ_RESP || p.h.op == KN_DP_WRITE) &&
		    word &&
		    !(p.h.op == KN_DP_WRITE && (p.h.flags & KN_DP_F_LAST)))
			FAIL("immediate on a segment that delivers none");
		if (p.h.op == KN_DP_READ_RESP && p.h.key)
			FAIL("key on a read response");
		if (p.h.op == KN_DP_SEND && (p.h.key || p.h.off > p.h.total ||
					     p.h.len > p.h.total - p.h.off))
			FAIL("send segment outside its message");
		break;
	default:
		FAIL("unknown packet type");
	}
	p.payload = kn + KN_DP_KN_LEN;
	*pkt = p;
	return 0;
}
