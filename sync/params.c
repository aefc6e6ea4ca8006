/* SPDX-License-Identifier: Apache-2.0 */
/*
 * params.c - the protocols' parameter block (struct kn__sync_params):
 * its defaults and limits, and its one encoding as words, which the
 * engine's JOB message carries.  The only place that lists the fields,
 * so a new parameter is added here, in sync.h, in the engine's option
 * table and in the docs, and nowhere else.  No protocol code: the
 * message decoders (and their fuzz target) link it alone.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "sync.h"

int kn__sync_params_resolve(struct kn__sync_params *p)
{
	if (!p || !isfinite(p->gamma) || p->gamma < 0 ||
	    !isfinite(p->theta) || p->theta < 0 || !(p->alpha >= 0) ||
	    p->alpha > 1 || !(p->miss >= 0) || p->miss > 1 ||
	    p->max_steps > 1024 || p->solver > KN__SYNC_CGP_PLS ||
	    p->epoch_rounds > KN__SYNC_CGP_MAX_ROUNDS ||
	    !isfinite(p->bound) || p->bound < 0 || !isfinite(p->latency) ||
	    p->latency < 0 || !isfinite(p->bandwidth) || p->bandwidth < 0 ||
	    !isfinite(p->outer_lr) || p->outer_lr < 0 ||
	    !(p->outer_momentum >= 0) || p->outer_momentum >= 1)
		return -EINVAL;
	if (!p->staleness)
		p->staleness = 3;
	if (!p->max_skip)
		p->max_skip = 8;
	if (!p->max_steps)
		p->max_steps = 15;
	if (!p->warmup)
		p->warmup = 3;
	if (p->gamma == 0)
		p->gamma = 1;
	if (p->theta == 0)
		p->theta = 0.01f;
	if (p->alpha == 0)
		p->alpha = 0.5f;
	if (p->miss == 0)
		p->miss = 0.25f;
	if (!p->epoch_rounds)
		p->epoch_rounds = 20;
	if (!p->period)
		p->period = 100;
	if (p->bound == 0)
		p->bound = 4;
	if (p->latency == 0)
		p->latency = 100e-6f;
	if (p->bandwidth == 0)
		p->bandwidth = 1e9f;
	if (p->outer_lr == 0)
		p->outer_lr = 1;
	return 0;
}

static uint32_t bits_of(float f)
{
	uint32_t v;

	memcpy(&v, &f, sizeof(v));
	return v;
}

static float float_of(uint32_t v)
{
	float f;

	memcpy(&f, &v, sizeof(f));
	return f;
}

void kn__sync_params_pack(const struct kn__sync_params *p,
			  uint32_t w[KN__SYNC_PARAMS_WORDS])
{
	const uint32_t v[KN__SYNC_PARAMS_WORDS] = {
		p->staleness,	      p->max_skip,
		p->max_steps,	      p->warmup,
		bits_of(p->gamma),    bits_of(p->theta),
		bits_of(p->alpha),    bits_of(p->miss),
		p->solver,	      p->epoch_rounds,
		p->period,	      bits_of(p->bound),
		bits_of(p->latency),  bits_of(p->bandwidth),
		bits_of(p->outer_lr), bits_of(p->outer_momentum),
	};

	memcpy(w, v, sizeof(v));
}

void kn__sync_params_unpack(struct kn__sync_params *p,
			    const uint32_t w[KN__SYNC_PARAMS_WORDS])
{
	p->staleness = w[0];
	p->max_skip = w[1];
	p->max_steps = w[2];
	p->warmup = w[3];
	p->gamma = float_of(w[4]);
	p->theta = float_of(w[5]);
	p->alpha = float_of(w[6]);
	p->miss = float_of(w[7]);
	p->solver = w[8];
	p->epoch_rounds = w[9];
	p->period = w[10];
	p->bound = float_of(w[11]);
	p->latency = float_of(w[12]);
	p->bandwidth = float_of(w[13]);
	p->outer_lr = float_of(w[14]);
	p->outer_momentum = float_of(w[15]);
}
