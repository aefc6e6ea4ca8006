/* SPDX-License-Identifier: Apache-2.0 */
/*
 * roles.h - the three roles' entry points, what a worker learned of its
 * job, and address helpers the roles share.
 */
#ifndef KN_ENGINE_ROLES_H
#define KN_ENGINE_ROLES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "config.h"

/* Most contributions one apply sums (the most workers of a job). */
#define KN__APPLY_MAX KN_CONFIG_MAX_COUNT

/* Run a role until the job ends: 0, or a negative errno (logged). */
int kn__coordinator_run(const struct kn__config *cfg, const uint8_t *secret,
			size_t secret_len);
int kn__server_run(const struct kn__config *cfg, const uint8_t *secret,
		   size_t secret_len);

struct kn_worker;
struct kn__msg;
struct kn__sync_params;

/*
 * The sync/ parameters of the job @job (a JOB message) for a machine of
 * @members members out of its workers (job.c).
 */
void kn__job_sync_params(const struct kn__msg *job, uint32_t members,
			 struct kn__sync_params *out);

/*
 * What the job described by @cfg runs, as kanel.h's struct kn_job_info
 * gives it (kn_worker_job from the JOB message, kn_config_job from the
 * options): the one place that maps the one onto the other.
 */
void kn__job_info(const struct kn__config *cfg, struct kn_job_info *info);

/*
 * Where a job's optimizer runs (docs/protocols.md, "What a contribution
 * is").  Under --optimizer sum the workers run their own (a PyTorch
 * script's): BSP's servers publish the round's mean gradient into the
 * workers' gradient buffers (kn__job_sums); under every other protocol
 * the workers push the delta their optimizer made, as ESP's and PSP's
 * always do, and the servers add the deltas to the model with the outer
 * update (kn__job_deltas; both in job.c).
 */
bool kn__job_sums(uint32_t protocol, uint32_t optimizer);
bool kn__job_deltas(uint32_t protocol, uint32_t optimizer);

bool kn__addr_is_any(const struct sockaddr_storage *a);
bool kn__addr_is_loopback(const struct sockaddr_storage *a);
/* @dst's IP becomes @src's; the port stays. */
void kn__addr_copy_ip(struct sockaddr_storage *dst,
		      const struct sockaddr_storage *src);
/* The length of @a as its family has it. */
socklen_t kn__addr_len(const struct sockaddr_storage *a);
/* "IP:PORT" of @a into @buf. */
void kn__addr_name(const struct sockaddr_storage *a, char *buf, size_t n);
/* @a's IP becomes this host's first non-loopback IPv4 address. */
int kn__addr_local(struct sockaddr_storage *a);

#endif /* KN_ENGINE_ROLES_H */
