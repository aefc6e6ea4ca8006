/* SPDX-License-Identifier: Apache-2.0 */
/*
 * imbalance.c - the injected-delay models (imbalance.h, docs/imbalance.md):
 * the spec parser and formatter, a per-worker generator, and the keyed
 * permutation that picks slow sets.
 *
 * Randomness: every stream is derived from the seed with the splitmix64
 * finalizer and a tag per use, so the streams are unrelated.  A worker
 * draws from its own xoshiro256** generator, seeded from (seed, rank);
 * normals come from Box-Muller, both halves used.
 *
 * Slow sets without coordination or O(n) memory: a keyed bijection of
 * [0, n) gives each rank a position, and the ranks whose position is
 * below the set's size are in it.  That gives exactly that many workers,
 * the same ones in every process, and any one rank's membership costs a
 * few hash calls.  The bijection is a balanced Feistel network over the
 * smallest even power of two >= n (at least 4), restricted to [0, n) by
 * cycle-walking: re-encrypt until the value falls below n.  The domain
 * is under 4n, so that takes under 4 passes of the network on average.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "imbalance.h"

#define TWO_PI 6.283185307179586476925286766559

/*
 * Any number of Feistel rounds is a bijection; the rounds are for
 * looking random.  Halves of 1 or 2 bits (n <= 16) need more than the
 * 4 of Luby-Rackoff: with 2, some ranks are picked far more often.
 */
#define FEISTEL_ROUNDS 8

/* One tag per use of the seed, so each use draws an unrelated stream. */
#define TAG_PERSISTENT 0x7065727369737431ull
#define TAG_EPISODE    0x657069736f646531ull
#define TAG_WORKER     0x776f726b65723031ull
#define TAG_PHASE      0x7068617365303031ull

#define GOLDEN 0x9e3779b97f4a7c15ull

/* --- generators ------------------------------------------------------- */

/* A 64-bit key for use @tag of @seed, specialised by @index. */
static uint64_t derive(uint64_t seed, uint64_t tag, uint64_t index)
{
	return kn__mix64(kn__mix64(seed ^ tag) + index * GOLDEN);
}

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

/* xoshiro256** (Blackman and Vigna). */
static uint64_t next_u64(struct kn__imb_worker *w)
{
	uint64_t *s = w->s;
	uint64_t result = rotl(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return result;
}

/* Uniform in [0, 1), on the 2^-53 grid. */
static double to_unit(uint64_t x)
{
	return (double)(x >> 11) * 0x1.0p-53;
}

static double next_unit(struct kn__imb_worker *w)
{
	return to_unit(next_u64(w));
}

/* Standard normal by Box-Muller; the second of each pair is kept. */
static double next_normal(struct kn__imb_worker *w)
{
	double u1, u2, r;

	if (w->have_spare) {
		w->have_spare = false;
		return w->spare;
	}
	u1 = 1.0 - next_unit(w); /* (0, 1], so the log is finite */
	u2 = next_unit(w);
	r = sqrt(-2.0 * log(u1));
	w->spare = r * sin(TWO_PI * u2);
	w->have_spare = true;
	return r * cos(TWO_PI * u2);
}

/* --- slow sets -------------------------------------------------------- */

/*
 * The position of @x (< @n) in the permutation of [0, n) keyed by @key.
 * Cycle-walking terminates because the walk stays on x's cycle of the
 * permutation of the whole domain, and x itself is below n.
 */
static uint64_t permute(uint64_t key, uint64_t x, uint64_t n)
{
	uint64_t rk[FEISTEL_ROUNDS];
	unsigned half = 1;
	uint64_t mask;

	while ((1ull << (2 * half)) < n)
		half++;
	mask = (1ull << half) - 1;
	for (unsigned i = 0; i < FEISTEL_ROUNDS; i++)
		rk[i] = kn__mix64(key + (i + 1) * GOLDEN);

	do {
		uint64_t l = x >> half, r = x & mask;

		for (unsigned i = 0; i < FEISTEL_ROUNDS; i++) {
			uint64_t f = kn__mix64(rk[i] ^ r) & mask;

			x = r;
			r = l ^ f;
			l = x;
		}
		x = (l << half) | r;
	} while (x >= n);
	return x;
}

/* round(FRACTION * n), at least 1 when FRACTION > 0, at most n. */
static unsigned slow_count(const struct kn__imb *m, unsigned n)
{
	double c;

	if (!(m->fraction > 0))
		return 0;
	c = round(m->fraction * n);
	if (c < 1)
		return 1;
	if (c > n)
		return n;
	return (unsigned)c;
}

bool kn__imb_is_slow(const struct kn__imb *m, unsigned rank, unsigned n)
{
	if (m->kind != KN__IMB_PERSISTENT || rank >= n)
		return false;
	return permute(derive(m->seed, TAG_PERSISTENT, 0), rank, n) <
	       slow_count(m, n);
}

/* --- workers ---------------------------------------------------------- */

int kn__imb_worker_init(const struct kn__imb *m, unsigned rank, unsigned n,
			struct kn__imb_worker *w)
{
	struct kn__imb_worker tmp = { .rank = rank, .n = n, .base = 1.0 };
	uint64_t x;

	if (rank >= n || m->kind > KN__IMB_PERIODIC)
		return -EINVAL;
	if (m->kind == KN__IMB_EPISODIC && (m->k < 1 || m->k > n))
		return -EINVAL;

	/* Consecutive splitmix64 outputs: never the all-zero state. */
	x = derive(m->seed, TAG_WORKER, rank);
	for (unsigned i = 0; i < 4; i++) {
		x += GOLDEN;
		tmp.s[i] = kn__mix64(x);
	}

	if (kn__imb_is_slow(m, rank, n))
		tmp.base = m->factor;
	if (m->kind == KN__IMB_PERIODIC) {
		tmp.phase = TWO_PI * to_unit(derive(m->seed, TAG_PHASE, rank));
		if (tmp.phase >= TWO_PI) /* rounding of the product */
			tmp.phase = 0;
	}
	*w = tmp;
	return 0;
}

/*
 * Episode e covers [e * PERIOD, e * PERIOD + DURATION), both bounds
 * computed in doubles as a caller would write them.  t / PERIOD is
 * rounded, so its floor can be one off next to a boundary: correct it
 * against e * PERIOD itself.  Beyond 2^53 periods e is no longer exact;
 * such times (and t < 0, NaN) are outside every episode.
 */
static double episodic_factor(const struct kn__imb *m, struct kn__imb_worker *w,
			      double t)
{
	double e;

	if (!(t >= 0))
		return 1.0;
	e = floor(t / m->period);
	if (!(e < 0x1p53))
		return 1.0;
	if (t < e * m->period)
		e -= 1;
	else if (t >= (e + 1) * m->period)
		e += 1;
	if (!(t < e * m->period + m->duration))
		return 1.0;

	if (!w->have_episode || w->episode != (uint64_t)e) {
		uint64_t key = derive(m->seed, TAG_EPISODE, (uint64_t)e);

		w->episode = (uint64_t)e;
		w->have_episode = true;
		w->in_set = permute(key, w->rank, w->n) < m->k;
	}
	return w->in_set ? m->factor : 1.0;
}

double kn__imb_factor(const struct kn__imb *m, struct kn__imb_worker *w,
		      double t)
{
	double f;

	switch (m->kind) {
	case KN__IMB_PERSISTENT:
		f = w->base;
		break;
	case KN__IMB_RANDOM:
		/* One draw per step whatever P is, so P moves no other draw. */
		f = next_unit(w) < m->p ? m->factor : 1.0;
		break;
	case KN__IMB_EPISODIC:
		f = episodic_factor(m, w, t);
		break;
	case KN__IMB_PERIODIC:
		if (!isfinite(t))
			return 1.0;
		f = 1.0 + m->amplitude * sin(TWO_PI * t / m->period + w->phase);
		break;
	default:
		return 1.0;
	}
	/* Log-normal with mu = -sigma^2 / 2: mean exactly 1. */
	if (m->jitter_sigma > 0)
		f *= exp(m->jitter_sigma *
			 (next_normal(w) - 0.5 * m->jitter_sigma));
	return f;
}

/* --- parsing and formatting ------------------------------------------- */

struct field {
	const char *name;
	double def;
	double lo, hi;
	bool lo_open, hi_open;
	bool whole; /* K: digits only */
	const char *range;
};

struct model {
	const char *name;
	enum kn__imb_kind kind;
	unsigned nfields;
	const char *usage;
	struct field f[4];
};

/* One model per paragraph reads better than what clang-format packs. */
/* clang-format off */
#define F_FACTOR \
	{ "FACTOR", 4, 1, INFINITY, false, true, false, "a number >= 1" }
#define F_PERIOD(def) \
	{ "PERIOD", def, 0, INFINITY, true, true, false, "a number > 0" }

static const struct model models[] = {
	{ "none", KN__IMB_NONE, 0, "none", { { 0 } } },
	{ "persistent", KN__IMB_PERSISTENT, 2, "persistent:FRACTION:FACTOR",
	  { { "FRACTION", 0.25, 0, 1, false, false, false,
	      "a number in [0, 1]" },
	    F_FACTOR } },
	{ "random", KN__IMB_RANDOM, 2, "random:P:FACTOR",
	  { { "P", 0.05, 0, 1, false, false, false, "a number in [0, 1]" },
	    F_FACTOR } },
	{ "episodic", KN__IMB_EPISODIC, 4,
	  "episodic:PERIOD:DURATION:K:FACTOR",
	  { F_PERIOD(30),
	    { "DURATION", 10, 0, INFINITY, true, true, false,
	      "a number in (0, PERIOD]" },
	    { "K", 1, 1, UINT_MAX, false, false, true,
	      "a whole number >= 1" },
	    F_FACTOR } },
	{ "periodic", KN__IMB_PERIODIC, 2, "periodic:PERIOD:AMPLITUDE",
	  { F_PERIOD(120),
	    { "AMPLITUDE", 0.5, 0, 1, false, true, false,
	      "a number in [0, 1)" } } },
};
/* clang-format on */

static int fail(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* -EINVAL, with the sentence in @err when there is room for any of it. */
static int fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen > 0) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

/*
 * Field @txt (@len bytes, not NUL-terminated) as a value of @f.  strtod
 * alone would take spaces, inf, nan and hex; the character set keeps
 * numbers plain decimal.  -0 becomes 0 so that it formats as 0.
 */
static bool parse_value(const struct field *f, const char *txt, size_t len,
			double *out)
{
	const char *ok = f->whole ? "0123456789" : "0123456789.eE+-";
	char buf[64];
	char *end;
	double v;

	if (len == 0 || len >= sizeof(buf) || strspn(txt, ok) < len)
		return false;
	memcpy(buf, txt, len);
	buf[len] = '\0';
	v = strtod(buf, &end);
	if (end != buf + len || !isfinite(v))
		return false;
	v += 0.0;
	if (v < f->lo || (f->lo_open && v == f->lo))
		return false;
	if (v > f->hi || (f->hi_open && v == f->hi))
		return false;
	*out = v;
	return true;
}

int kn__imb_parse(const char *spec, uint64_t seed, struct kn__imb *out,
		  char *err, size_t errlen)
{
	const struct model *md = NULL;
	struct kn__imb m = { .seed = seed };
	double v[4];
	const char *p;
	size_t len;
	unsigned i;

	if (!spec || !*spec)
		return fail(err, errlen,
			    "the imbalance model is empty; expected none, "
			    "persistent, random, episodic or periodic");
	len = strcspn(spec, ":");
	for (i = 0; i < sizeof(models) / sizeof(models[0]); i++) {
		if (strlen(models[i].name) == len &&
		    !memcmp(models[i].name, spec, len)) {
			md = &models[i];
			break;
		}
	}
	if (!md)
		return fail(err, errlen,
			    "unknown imbalance model \"%.*s\"; expected none, "
			    "persistent, random, episodic or periodic",
			    (int)(len > 32 ? 32 : len), spec);

	for (i = 0; i < md->nfields; i++)
		v[i] = md->f[i].def;
	p = spec + len;
	for (i = 0; *p == ':'; i++) {
		const struct field *f = &md->f[i];

		p++;
		len = strcspn(p, ":");
		if (i >= md->nfields)
			return fail(err, errlen,
				    "%s takes at most %u fields (%s), "
				    "got more",
				    md->name, md->nfields, md->usage);
		if (len == 0)
			return fail(err, errlen,
				    "%s %s is empty; it must be %s", md->name,
				    f->name, f->range);
		if (!parse_value(f, p, len, &v[i]))
			return fail(err, errlen,
				    "%s %s must be %s, got \"%.*s\"", md->name,
				    f->name, f->range,
				    (int)(len > 32 ? 32 : len), p);
		p += len;
	}

	m.kind = md->kind;
	switch (md->kind) {
	case KN__IMB_NONE:
		break;
	case KN__IMB_PERSISTENT:
		m.fraction = v[0];
		m.factor = v[1];
		m.jitter_sigma = 0.05;
		break;
	case KN__IMB_RANDOM:
		m.p = v[0];
		m.factor = v[1];
		break;
	case KN__IMB_EPISODIC:
		if (v[1] > v[0])
			return fail(err, errlen,
				    "episodic DURATION must be in (0, PERIOD], "
				    "got %g with PERIOD %g",
				    v[1], v[0]);
		m.period = v[0];
		m.duration = v[1];
		m.k = (unsigned)v[2];
		m.factor = v[3];
		break;
	case KN__IMB_PERIODIC:
		m.period = v[0];
		m.amplitude = v[1];
		break;
	}
	*out = m;
	return 0;
}

/*
 * @v as %g writes it (precision 6: "30", not "3e+01"), with more digits
 * only where strtod would not read back the same double.
 */
static void format_number(double v, char buf[32])
{
	for (int prec = 6; prec <= 17; prec++) {
		snprintf(buf, 32, "%.*g", prec, v);
		if (strtod(buf, NULL) == v)
			return;
	}
}

/* "NAME:X:Y", the spec of the models with two numbers, into @tmp. */
static int format_two(char tmp[160], const char *name, double x, double y)
{
	char a[32], b[32];

	format_number(x, a);
	format_number(y, b);
	return snprintf(tmp, 160, "%s:%s:%s", name, a, b);
}

int kn__imb_format(const struct kn__imb *m, char *buf, size_t cap)
{
	char a[32], b[32], c[32], tmp[160];
	int len;

	switch (m->kind) {
	case KN__IMB_NONE:
		len = snprintf(tmp, sizeof(tmp), "none");
		break;
	case KN__IMB_PERSISTENT:
		len = format_two(tmp, "persistent", m->fraction, m->factor);
		break;
	case KN__IMB_RANDOM:
		len = format_two(tmp, "random", m->p, m->factor);
		break;
	case KN__IMB_EPISODIC:
		format_number(m->period, a);
		format_number(m->duration, b);
		format_number(m->factor, c);
		len = snprintf(tmp, sizeof(tmp), "episodic:%s:%s:%u:%s", a, b,
			       m->k, c);
		break;
	case KN__IMB_PERIODIC:
		len = format_two(tmp, "periodic", m->period, m->amplitude);
		break;
	default:
		return -EINVAL;
	}
	if (len < 0 || (size_t)len >= cap)
		return -ENOSPC;
	memcpy(buf, tmp, (size_t)len + 1);
	return len;
}
