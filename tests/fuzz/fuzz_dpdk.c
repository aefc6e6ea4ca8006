/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_dpdk.c - libFuzzer target for the dpdk provider's packet decoder
 * (transport/dpdk/packet.c), what every frame arriving on a port goes
 * through before any endpoint state is looked at.
 *
 * Each input is one Ethernet frame.  A frame kn__dp_decode() refuses
 * must be refused with -ENOENT (not ours) or -EPROTO (ours, malformed,
 * with a reason), leaving the output untouched.  A frame it accepts
 * must have a payload that lies inside the frame and is at most the
 * payload size, a type, op and flags from the documented sets, and must
 * survive a round trip: the headers kn__dp_encode() writes from the
 * decoded fields (with the frame's own destination addresses and IPv4
 * identification) decode, with the same payload, to exactly the same
 * packet, and their Kanel and UDP headers are byte for byte the input's.
 * The payload size alternates between 1432 (MTU 1500) and 256, so that
 * both sides of the size check are reached.  Any violation is
 * __builtin_trap().
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dpdk/packet.h"

#define PORT 31850

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond)
{
	if (!cond)
		__builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t frame[KN_DP_HDRS_LEN + 65536];
	uint32_t maxp = (size & 1) ? 256 : 1432;
	struct kn__dp_pkt p, q, untouched;
	struct kn__dp_addr dst;
	const char *why = NULL;
	uint16_t ip_id;
	int ret;

	memset(&p, 0xa5, sizeof(p));
	untouched = p;
	ret = kn__dp_decode(data, size, PORT, maxp, &p, &why);
	if (ret) {
		check(ret == -ENOENT || ret == -EPROTO);
		check(ret == -ENOENT || why != NULL);
		check(!memcmp(&p, &untouched, sizeof(p)));
		return 0;
	}
	check(p.payload >= data + KN_DP_HDRS_LEN);
	check(p.payload + p.h.len <= data + size);
	check(p.h.type == KN_DP_DATA || p.h.type == KN_DP_ACK);
	check(!(p.h.flags & ~KN_DP_F_MASK));
	if (p.h.type == KN_DP_ACK)
		check(!p.h.op && !p.h.len);
	else
		check(p.h.op >= KN_DP_WRITE && p.h.op <= KN_DP_SEND &&
		      p.h.len <= maxp);

	memcpy(dst.mac, data, 6);
	memcpy(&dst.ip, data + KN_DP_ETH_LEN + 16, 4);
	dst.port = PORT;
	ip_id = (uint16_t)(data[KN_DP_ETH_LEN + 4] << 8 |
			   data[KN_DP_ETH_LEN + 5]);
	kn__dp_encode(&p.src, &dst, &p.h, ip_id, frame);
	memcpy(frame + KN_DP_HDRS_LEN, p.payload, p.h.len);
	/* UDP and Kanel headers as they came (the checksum field aside:
	 * the input's may be anything, ours is 0) */
	check(!memcmp(frame + KN_DP_ETH_LEN + KN_DP_IP_LEN,
		      data + KN_DP_ETH_LEN + KN_DP_IP_LEN, 6));
	check(!memcmp(frame + KN_DP_HDRS_LEN - KN_DP_KN_LEN,
		      data + KN_DP_HDRS_LEN - KN_DP_KN_LEN, KN_DP_KN_LEN));
	memset(&q, 0, sizeof(q));
	check(kn__dp_decode(frame, KN_DP_HDRS_LEN + p.h.len, PORT, maxp, &q,
			    &why) == 0);
	check(!memcmp(&q.src, &p.src, sizeof(p.src)));
	check(!memcmp(&q.h, &p.h, sizeof(p.h)));
	check(!memcmp(q.payload, p.payload, p.h.len));
	return 0;
}
