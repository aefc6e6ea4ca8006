/* SPDX-License-Identifier: Apache-2.0 */
/*
 * job.c - a job's protocol parameters as sync/ takes them, from the JOB
 * message every process gets: the one translation that the coordinator
 * (its planner), the servers (their chunk rules) and the workers (their
 * worker rule) all use, so that they run the same protocol; and what
 * the job's protocol and optimizer make of a round, which the same three
 * ask (roles.h).
 */
#include <stdint.h>

#include "config.h"
#include "msg.h"
#include "roles.h"
#include "sync.h"

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

bool kn__job_sums(uint32_t protocol, uint32_t optimizer)
{
	return optimizer == KN__CONFIG_SUM &&
	       kn__sync_traits(protocol)->mean_model;
}

bool kn__job_deltas(uint32_t protocol, uint32_t optimizer)
{
	const struct kn__sync_traits *t = kn__sync_traits(protocol);

	return t->local_steps ||
	       (optimizer == KN__CONFIG_SUM && !t->mean_model);
}
