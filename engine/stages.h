/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stages.h - where an exchange's time goes: a histogram per stage of a
 * worker's operations and of a server's rounds, with logarithmic buckets
 * (8 a doubling, so a quantile is within 9% of the true value), bounded
 * memory whatever the run's length, and one JSON object per histogram
 * for the --metrics line (docs/configuration.md, "The figures file").
 */
#ifndef KN_ENGINE_STAGES_H
#define KN_ENGINE_STAGES_H

#include <stddef.h>
#include <stdint.h>

#define KN__HIST_BUCKETS 320 /* up to 2^42 ns, about 73 minutes */

struct kn__hist {
	uint64_t count;
	uint32_t b[KN__HIST_BUCKETS];
};

/* Count a duration of @seconds (negative ones as 0). */
void kn__hist_add(struct kn__hist *h, double seconds);

/* The @q quantile (0 to 1) in seconds; 0 for an empty histogram. */
double kn__hist_quantile(const struct kn__hist *h, double q);

/*
 * Append `"NAME":{"n":N,"p50_us":X,"p90_us":Y,"p99_us":Z}` to @buf at
 * @len (of @cap); returns the new length, or @cap if it did not fit.
 */
size_t kn__hist_json(char *buf, size_t len, size_t cap, const char *name,
		     const struct kn__hist *h);

#endif /* KN_ENGINE_STAGES_H */
