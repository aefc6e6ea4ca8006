/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_msg.c - the control messages of engine/msg.h: the JOB fields of
 * every protocol, CGP's BARRIER and a restore's CHECKPOINTS, RESTORE and
 * RECOVER go through encode and decode intact,
 * and values sync/ would refuse are refused on decoding.  The fuzz
 * target (tests/fuzz/fuzz_msg.c) checks every type in depth, but only in
 * a clang build; these run everywhere.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <string.h>

#include "msg.h"

static struct kn__msg round_trip(const struct kn__msg *m, int *len)
{
	static uint8_t buf[KN__MSG_MAX];
	struct kn__msg back;

	*len = kn__msg_encode(m, buf, sizeof(buf));
	cr_assert_gt(*len, KN__MSG_HDR, "%s did not encode: %d",
		     kn__msg_name(m->type), *len);
	memset(&back, 0xee, sizeof(back));
	cr_assert_eq(kn__msg_decode(buf, (size_t)*len, &back), 0,
		     "%s did not decode", kn__msg_name(m->type));
	/* one byte short is malformed */
	cr_assert_eq(kn__msg_decode(buf, (size_t)*len - 1, &back), -EPROTO);
	return back;
}

static struct kn__msg cgp_job(void)
{
	struct kn__msg m = { .type = KN__MSG_JOB };

	m.u.job.workers = 8;
	m.u.job.servers = 2;
	m.u.job.protocol = KN_SYNC_CGP;
	m.u.job.optimizer = KN__CONFIG_MOMENTUM;
	m.u.job.chunk_bytes = 1 << 20;
	m.u.job.fuse_bytes = 48 << 10;
	m.u.job.push_window = 3 << 20;
	m.u.job.lr = 0.05f;
	m.u.job.momentum = 0.9f;
	m.u.job.proto.staleness = 3;
	m.u.job.proto.max_skip = 8;
	m.u.job.proto.max_steps = 15;
	m.u.job.proto.warmup = 5;
	m.u.job.proto.gamma = 1;
	m.u.job.proto.theta = 0.01f;
	m.u.job.proto.alpha = 0.25f;
	m.u.job.proto.miss = 0.25f;
	m.u.job.proto.solver = KN__SYNC_CGP_PLS;
	m.u.job.proto.epoch_rounds = KN__SYNC_CGP_MAX_ROUNDS;
	m.u.job.proto.period = 100000;
	m.u.job.proto.bound = 2.5f;
	m.u.job.proto.latency = 3e-5f;
	m.u.job.proto.bandwidth = 12.5e9f;
	m.u.job.proto.outer_lr = 0.7f;
	m.u.job.proto.outer_momentum = 0.5f;
	m.u.job.rank = 7;
	return m;
}

Test(msg, job_carries_every_protocols_parameters)
{
	struct kn__msg m = cgp_job(), b;
	int len;

	b = round_trip(&m, &len);
	cr_assert_eq(b.type, KN__MSG_JOB);
	cr_assert_eq(b.u.job.protocol, KN_SYNC_CGP);
	cr_assert_eq(b.u.job.chunk_bytes, 1 << 20);
	cr_assert_eq(b.u.job.fuse_bytes, 48 << 10);
	cr_assert_eq(b.u.job.push_window, 3 << 20);
	cr_assert_eq(b.u.job.proto.warmup, 5);
	cr_assert_eq(b.u.job.proto.alpha, 0.25f);
	cr_assert_eq(b.u.job.proto.solver, KN__SYNC_CGP_PLS);
	cr_assert_eq(b.u.job.proto.epoch_rounds, KN__SYNC_CGP_MAX_ROUNDS);
	cr_assert_eq(b.u.job.proto.period, 100000);
	cr_assert_eq(b.u.job.proto.bound, 2.5f);
	cr_assert_eq(b.u.job.proto.latency, 3e-5f);
	cr_assert_eq(b.u.job.proto.bandwidth, 12.5e9f);
	cr_assert_eq(b.u.job.proto.outer_lr, 0.7f);
	cr_assert_eq(b.u.job.proto.outer_momentum, 0.5f);
	cr_assert_eq(b.u.job.rank, 7);
	/* 0 is "the default" to sync/, so it travels too */
	m.u.job.proto.solver = KN__SYNC_CGP_AUTO;
	m.u.job.proto.epoch_rounds = 0;
	m.u.job.proto.bound = m.u.job.proto.latency = m.u.job.proto.bandwidth =
		0;
	b = round_trip(&m, &len);
	cr_assert_eq(b.u.job.proto.solver, KN__SYNC_CGP_AUTO);
	cr_assert_eq(b.u.job.proto.bound, 0);
}

Test(msg, job_refuses_cgp_values_sync_refuses)
{
	static const struct {
		uint32_t solver, rounds;
		float bound, latency, bandwidth;
	} bad[] = {
		{ 3, 20, 4, 1e-4f, 1e9f },
		{ 0, KN__SYNC_CGP_MAX_ROUNDS + 1, 4, 1e-4f, 1e9f },
		{ 0, 20, -1, 1e-4f, 1e9f },
		{ 0, 20, NAN, 1e-4f, 1e9f },
		{ 0, 20, 4, -1e-4f, 1e9f },
		{ 0, 20, 4, INFINITY, 1e9f },
		{ 0, 20, 4, 1e-4f, -1 },
		{ 0, 20, 4, 1e-4f, NAN },
	};
	uint8_t buf[KN__MSG_MAX];
	struct kn__msg m, b;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int len;

		m = cgp_job();
		m.u.job.proto.solver = bad[i].solver;
		m.u.job.proto.epoch_rounds = bad[i].rounds;
		m.u.job.proto.bound = bad[i].bound;
		m.u.job.proto.latency = bad[i].latency;
		m.u.job.proto.bandwidth = bad[i].bandwidth;
		/* the encoder writes what it is given; the reader checks */
		len = kn__msg_encode(&m, buf, sizeof(buf));
		cr_assert_gt(len, 0);
		cr_assert_eq(kn__msg_decode(buf, (size_t)len, &b), -EPROTO,
			     "case %zu accepted", i);
	}
}

Test(msg, barrier_carries_its_epoch)
{
	struct kn__msg m = { .type = KN__MSG_BARRIER }, b;
	int len;

	m.u.barrier.epoch = 0x0123456789abcdefull;
	b = round_trip(&m, &len);
	cr_assert_eq(len, KN__MSG_HDR + 8);
	cr_assert_eq(b.type, KN__MSG_BARRIER);
	cr_assert_eq(b.u.barrier.epoch, 0x0123456789abcdefull);
	cr_assert_str_eq(kn__msg_name(KN__MSG_BARRIER), "BARRIER");
}

Test(msg, a_restore_exchange_goes_through_and_is_checked)
{
	struct kn__msg m = { .type = KN__MSG_CHECKPOINTS }, b;
	uint8_t buf[KN__MSG_MAX];
	int len;

	m.u.checkpoints.count = 3;
	m.u.checkpoints.versions[0] = 300;
	m.u.checkpoints.versions[1] = 200;
	m.u.checkpoints.versions[2] = 100;
	b = round_trip(&m, &len);
	cr_assert_eq(len, KN__MSG_HDR + 8 + 3 * 8);
	cr_assert_eq(b.u.checkpoints.count, 3);
	cr_assert_eq(b.u.checkpoints.versions[2], 100);
	cr_assert_str_eq(kn__msg_name(KN__MSG_CHECKPOINTS), "CHECKPOINTS");

	/* newest first, each once: an order the coordinator can trust */
	m.u.checkpoints.versions[2] = 200;
	len = kn__msg_encode(&m, buf, sizeof(buf));
	cr_assert_gt(len, 0);
	cr_expect_eq(kn__msg_decode(buf, (size_t)len, &b), -EPROTO);
	m.u.checkpoints.count = KN__MSG_CKPT_MAX + 1;
	cr_expect_eq(kn__msg_encode(&m, buf, sizeof(buf)), -EINVAL);

	m = (struct kn__msg){ .type = KN__MSG_RESTORE };
	m.u.restore.version = 1ull << 40;
	b = round_trip(&m, &len);
	cr_assert_eq(b.u.restore.version, 1ull << 40);
	m = (struct kn__msg){ .type = KN__MSG_RECOVER };
	len = kn__msg_encode(&m, buf, sizeof(buf));
	cr_assert_eq(len, KN__MSG_HDR); /* no payload */
	cr_assert_eq(kn__msg_decode(buf, (size_t)len, &b), 0);
	cr_assert_eq(b.type, KN__MSG_RECOVER);
	cr_assert_str_eq(kn__msg_name(KN__MSG_RECOVER), "RECOVER");
}

Test(msg, job_says_whether_it_restores)
{
	struct kn__msg m = cgp_job(), b;
	uint8_t buf[KN__MSG_MAX];
	int len;

	m.u.job.restore = 1;
	b = round_trip(&m, &len);
	cr_assert_eq(b.u.job.restore, 1);
	/* the flag is the last field: anything but 0 or 1 is refused */
	len = kn__msg_encode(&m, buf, sizeof(buf));
	buf[len - 1] = 0;
	buf[len - 4] = 2;
	cr_expect_eq(kn__msg_decode(buf, (size_t)len, &b), -EPROTO);
}
