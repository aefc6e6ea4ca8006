/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stages.c - the stage histograms.  A duration of v ns falls in bucket v
 * below 16; above, in 16 + 8 * (octave - 4) + the next 3 bits after the
 * top one, and a bucket reads back as its middle.
 */
#include <stdio.h>

#include "stages.h"

static unsigned int bucket(uint64_t ns)
{
	unsigned int top, b;

	if (ns < 16)
		return (unsigned int)ns;
	top = 63 - (unsigned int)__builtin_clzll(ns);
	b = 16 + 8 * (top - 4) + (unsigned int)((ns >> (top - 3)) & 7);
	return b < KN__HIST_BUCKETS ? b : KN__HIST_BUCKETS - 1;
}

static double middle(unsigned int b)
{
	unsigned int top, sub;
	double lo, width;

	if (b < 16)
		return b;
	top = (b - 16) / 8 + 4;
	sub = (b - 16) % 8;
	width = (double)(1ull << (top - 3));
	lo = (double)(1ull << top) + sub * width;
	return lo + width / 2;
}

void kn__hist_add(struct kn__hist *h, double seconds)
{
	uint64_t ns = seconds > 0 ? (uint64_t)(seconds * 1e9) : 0;

	h->b[bucket(ns)]++;
	h->count++;
}

double kn__hist_quantile(const struct kn__hist *h, double q)
{
	uint64_t want, seen = 0;

	if (!h->count)
		return 0;
	want = (uint64_t)(q * (double)(h->count - 1)) + 1;
	for (unsigned int b = 0; b < KN__HIST_BUCKETS; b++) {
		seen += h->b[b];
		if (seen >= want)
			return middle(b) / 1e9;
	}
	return middle(KN__HIST_BUCKETS - 1) / 1e9;
}

size_t kn__hist_json(char *buf, size_t len, size_t cap, const char *name,
		     const struct kn__hist *h)
{
	int n;

	if (len >= cap)
		return cap;
	n = snprintf(buf + len, cap - len,
		     "%s\"%s\":{\"n\":%llu,\"p50_us\":%.1f,\"p90_us\":%.1f,"
		     "\"p99_us\":%.1f}",
		     len && buf[len - 1] != '{' ? "," : "", name,
		     (unsigned long long)h->count,
		     kn__hist_quantile(h, 0.5) * 1e6,
		     kn__hist_quantile(h, 0.9) * 1e6,
		     kn__hist_quantile(h, 0.99) * 1e6);
	return n < 0 || (size_t)n >= cap - len ? cap : len + (size_t)n;
}
