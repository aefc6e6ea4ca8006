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
 * @members members out of its workers (coordinator.c).
 */
void kn__job_sync_params(const struct kn__msg *job, uint32_t members,
			 struct kn__sync_params *out);

/*
 * The job as its coordinator set it up, as worker @w was told when it
 * joined: counts, protocol, optimizer, rate, momentum, chunk size and the
 * protocols' parameters into those fields of @cfg (the rest untouched).  0, or -EAGAIN before
 * kn_worker_start has succeeded.
 */
int kn__worker_job(const struct kn_worker *w, struct kn__config *cfg);

/*
 * ESP, PSP: what the servers said with the last releases: the local
 * steps the plan asks before the next push, the plan's epoch, and the
 * longest predicted wait (seconds) of any server.  0, or -EAGAIN for
 * a protocol that sends none or before the start.  Any thread.
 */
int kn__worker_release_info(struct kn_worker *w, uint32_t *steps,
			    uint64_t *epoch, float *hint);

/*
 * PSP, CGP: tell the coordinator this worker's seconds per local step in
 * its last round (sent by the progress thread; reports that come before
 * it sent the last go as their mean).  0, or -EINVAL for a value that is
 * negative, not finite or above FLT_MAX.  Any thread; does not block.
 */
int kn__worker_timing(struct kn_worker *w, double seconds);

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
