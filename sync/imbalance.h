/* SPDX-License-Identifier: Apache-2.0 */
/*
 * imbalance.h - the injected-delay models of DESIGN.md section 5
 * (docs/imbalance.md): how much slower than its base step time each
 * worker's next step is.  The trainer sleeps base * factor per step; the
 * discrete-event simulator adds the same base * factor to simulated
 * time, so both run this code and see the same stragglers.
 *
 * It lives in sync/, not with the simulator (sim/), because both sides
 * use it: the engine wraps it as the public kn_imbalance_* of kanel.h
 * (the trainer's and the Python package's models), and the engine may
 * not depend on the simulator; both may depend on sync/.
 *
 * Like the rest of sync/ this is pure: no I/O, no clock reads, no global
 * state, no allocation.  Time comes in as an argument, randomness from a
 * seed, and a worker's whole state lives in a struct kn__imb_worker in
 * the caller's memory.  A worker's factors are a function of (spec,
 * seed, rank, n, the t values it is asked about), so every process and
 * the simulator agree on who is slow without talking to each other.
 *
 * A model (struct kn__imb) is read-only once parsed and may be shared by
 * any number of threads; a struct kn__imb_worker belongs to one caller at
 * a time.  Nothing here blocks.
 */
#ifndef KN_IMBALANCE_H
#define KN_IMBALANCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * The splitmix64 finalizer: a bijection of 64-bit words that mixes well.
 * Every seeded stream of the imbalance models and of the simulator is
 * derived through it.
 */
static inline uint64_t kn__mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* The next output of the splitmix64 generator whose state is @st. */
static inline uint64_t kn__splitmix_next(uint64_t *st)
{
	*st += 0x9e3779b97f4a7c15ull;
	return kn__mix64(*st);
}

enum kn__imb_kind {
	KN__IMB_NONE,
	KN__IMB_PERSISTENT, /* persistent:FRACTION:FACTOR */
	KN__IMB_RANDOM,	    /* random:P:FACTOR (F1) */
	KN__IMB_EPISODIC,   /* episodic:PERIOD:DURATION:K:FACTOR (F2) */
	KN__IMB_PERIODIC,   /* periodic:PERIOD:AMPLITUDE (F3) */
};

/* A parsed model; the fields a kind does not use are 0. */
struct kn__imb {
	enum kn__imb_kind kind;
	double fraction;     /* persistent: share of slow workers, [0, 1] */
	double factor;	     /* persistent, random, episodic: >= 1 */
	double p;	     /* random: probability of a slow step, [0, 1] */
	double period;	     /* episodic, periodic: seconds, > 0 */
	double duration;     /* episodic: seconds, (0, period] */
	double amplitude;    /* periodic: [0, 1) */
	unsigned k;	     /* episodic: workers slowed per episode, >= 1 */
	double jitter_sigma; /* 0.05 for persistent, 0 otherwise */
	uint64_t seed;
};

/*
 * Parse @spec, one of
 *   none
 *   persistent[:FRACTION[:FACTOR]]             defaults 0.25, 4
 *   random[:P[:FACTOR]]                        defaults 0.05, 4
 *   episodic[:PERIOD[:DURATION[:K[:FACTOR]]]]  defaults 30, 10, 1, 4
 *   periodic[:PERIOD[:AMPLITUDE]]              defaults 120, 0.5
 * with trailing fields optional and the others given.  Numbers are
 * plain decimal (digits, '.', an exponent; no inf, nan, hex or spaces);
 * K is a whole number.  Returns 0 and fills @out, or -EINVAL and writes
 * one sentence naming the field and its accepted range into @err (when
 * @errlen > 0; truncated to fit).  @out is written only on success.
 */
int kn__imb_parse(const char *spec, uint64_t seed, struct kn__imb *out,
		  char *err, size_t errlen);

/*
 * The canonical spec of @m, every field present and each number as %g
 * writes it, with more digits only where needed to parse back to the
 * same double, e.g. "persistent:0.25:4" (the seed is not part of it).
 * Returns the length written, without the NUL, or -ENOSPC when that and
 * the NUL do not fit in @cap, or -EINVAL for an unknown kind.
 */
int kn__imb_format(const struct kn__imb *m, char *buf, size_t cap);

/*
 * One worker's state, in the caller's memory; set by
 * kn__imb_worker_init(), then advanced only by kn__imb_factor().
 */
struct kn__imb_worker {
	uint64_t s[4];	  /* xoshiro256** state: jitter, random draws */
	double base;	  /* persistent: FACTOR when slow, else 1 */
	double phase;	  /* periodic: phi_i in [0, 2 pi) */
	double spare;	  /* the second normal of a Box-Muller pair */
	uint64_t episode; /* episodic: the episode cached in in_set */
	unsigned rank;
	unsigned n;
	bool have_spare;
	bool have_episode;
	bool in_set; /* episodic: slowed during episode @episode */
};

/*
 * Set up worker @rank of @n under @m.  Returns 0, or -EINVAL when
 * rank >= n, when an episodic model's K exceeds n (n is first known
 * here, so this is where that is refused), or for an unknown kind.
 * @w is written only on success.  O(1).
 */
int kn__imb_worker_init(const struct kn__imb *m, unsigned rank, unsigned n,
			struct kn__imb_worker *w);

/*
 * The factor of this worker's next step, which starts at @t seconds
 * since the job's start: the step should take base_step_time * factor.
 * Always > 0.  Advances the worker's generator (persistent jitter,
 * random draws), so the sequence is deterministic given (seed, rank, n,
 * the t values).  O(1); episodic recomputes set membership once per
 * episode, in O(1) expected time.  Episodic treats t < 0 and NaN as
 * outside every episode.
 */
double kn__imb_factor(const struct kn__imb *m, struct kn__imb_worker *w,
		      double t);

/*
 * Whether @rank is in the persistent slow set of @n workers (false for
 * the other kinds and for rank >= n).  O(1) expected; needs no worker.
 */
bool kn__imb_is_slow(const struct kn__imb *m, unsigned rank, unsigned n);

#endif /* KN_IMBALANCE_H */
