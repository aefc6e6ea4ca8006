/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sync_rng.h - the seeded generator every randomized sync/ test draws
 * from (defined in sync_test.c): xorshift64* on @rng_state, which each
 * test seeds, so the sequence is the same on every machine.  Apart from
 * sync_test.h for suites whose own helpers take other arguments.
 */
#ifndef KN_TEST_SYNC_RNG_H
#define KN_TEST_SYNC_RNG_H

#include <stdint.h>

extern uint64_t rng_state;
uint64_t rnd64(void);
/* Uniform in [0, @n); the modulo's bias is immaterial for these n. */
uint32_t rnd(uint32_t n);

#endif /* KN_TEST_SYNC_RNG_H */
