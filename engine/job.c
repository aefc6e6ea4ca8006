/* SPDX-License-Identifier: Apache-2.0 */
/*
 * job.c - a job's protocol parameters as sync/ takes them, from the JOB
 * message every process gets: the one translation that the coordinator
 * (its planner), the servers (their chunk rules) and the workers (their
 * worker rule) all use, so that they run the same protocol.
 */
#include <stdint.h>

#include "config.h"
#include "msg.h"
#include "roles.h"
#include "sync.h"

/* The engine's numbers are sync/'s: they go from one to the other as is. */
_Static_assert((int)KN__CONFIG_CGP == (int)KN__SYNC_CGP,
	       "protocol numbers differ");
_Static_assert((int)KN__CONFIG_CGP_AUTO == (int)KN__SYNC_CGP_AUTO &&
		       (int)KN__CONFIG_CGP_AGA == (int)KN__SYNC_CGP_AGA &&
		       (int)KN__CONFIG_CGP_PLS == (int)KN__SYNC_CGP_PLS,
	       "solver numbers differ");
_Static_assert(KN_CONFIG_CGP_MAX_ROUNDS == KN__SYNC_CGP_MAX_ROUNDS,
	       "the most epoch rounds differ");

void kn__job_sync_params(const struct kn__msg *job, uint32_t members,
			 struct kn__sync_params *out)
{
	/* .bytes: only the coordinator's planner needs the model's size,
	 * and it sets it (coordinator.c, plan_with_table) */
	*out = job->u.job.proto;
	out->protocol = job->u.job.protocol;
	out->max_workers = job->u.job.workers;
	out->members = members;
	out->bytes = 0;
}
