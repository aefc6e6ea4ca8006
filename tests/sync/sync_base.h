/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sync_base.h - what every sync/ suite shares (defined in sync_test.c),
 * apart from sync_test.h so that suites whose own event helpers take
 * other arguments (test_esp.c) can use it: a rule and a worker rule made
 * from any parameters, the check of a protocol without a planner, and the seeded
 * generator of the randomized tests, xorshift64* on @rng_state, which
 * each test seeds, so the sequence is the same on every machine.
 */
#ifndef KN_TEST_SYNC_BASE_H
#define KN_TEST_SYNC_BASE_H

#include <stdint.h>

#include "sync.h"

#define MAXW   8
#define MAXACT (1 + MAXW)

/* The rule of @p, whose max_actions must fit MAXACT; fails the test if
 * creation fails. */
struct kn__sync_rule *rule_of(const struct kn__sync_params *p);
/* The worker rule of @p for worker @id; fails the test if creation
 * fails. */
struct kn__sync_worker *worker_of(const struct kn__sync_params *p, uint32_t id);

extern uint64_t rng_state;
uint64_t rnd64(void);
/* Uniform in [0, @n); the modulo's bias is immaterial for these n. */
uint32_t rnd(uint32_t n);

/* The planner of @protocol, which has none of its own, checks its events
 * and never plans; its epoch stays 0. */
void planner_has_no_plans(uint32_t protocol);

#endif /* KN_TEST_SYNC_BASE_H */
