/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sync_test.h - what the sync/ suites share (sync_test.c): a chunk rule
 * made and fed events in one call each, a RELEASE checked field by field,
 * and the checks that BSP and ASP, whose rules differ only in rounds,
 * pass through the same code (test_bsp.c and test_asp.c call each with
 * their protocol), and the seeded generator every randomized test draws
 * from (sync_base.h).
 */
#ifndef KN_TEST_SYNC_TEST_H
#define KN_TEST_SYNC_TEST_H

#include <stdint.h>

#include "sync.h"
#include "sync_base.h"

/* A rule of @protocol whose max_actions fits MAXACT; fails the test if
 * creation fails. */
struct kn__sync_rule *rule_new(uint32_t protocol, uint32_t max_workers,
			       uint32_t members);
int push(struct kn__sync_rule *rule, uint32_t worker, uint64_t clock,
	 uint64_t version, uint32_t slot, struct kn__sync_action *out);
/* JOIN or LEAVE (or any @type) of @worker. */
int member_event(struct kn__sync_rule *rule, uint32_t type, uint32_t worker,
		 struct kn__sync_action *out);
/* A RELEASE of @worker with @version under @epoch for @steps steps. */
void assert_release_at(const struct kn__sync_action *a, uint32_t worker,
		       uint64_t version, uint64_t epoch, uint32_t steps);
/* A RELEASE of @worker with @version, epoch 0 and 1 step. */
void assert_release(const struct kn__sync_action *a, uint32_t worker,
		    uint64_t version);
/*
 * A completion from @version: APPLY of workers @ws (ascending), each a
 * model delta weighted 1 / count whatever its steps, then their
 * releases under @epoch with @rsteps[i] steps (1 each if @rsteps is
 * NULL).
 */
void assert_round(const struct kn__sync_action *a, int n, const uint32_t *ws,
		  uint32_t count, uint64_t version, uint64_t epoch,
		  const uint32_t *rsteps);

/* Bad ids, membership errors and malformed events are refused, and the
 * refusals change nothing. */
void refusals(uint32_t protocol);
/* TIMING and TIMER, of members or not, emit nothing. */
void timing_and_timer_do_nothing(uint32_t protocol);
/* The worker rule: STEP -> PUSH, PUSHED -> WAIT, RELEASE -> STEP. */
void worker_communicates_every_step(uint32_t protocol);
/* 50,000 random events (seeded) against a reference model of the rules. */
void randomized(uint32_t protocol, uint64_t seed);

#endif /* KN_TEST_SYNC_TEST_H */
