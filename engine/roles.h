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

/*
 * The job as its coordinator set it up, as worker @w was told when it
 * joined: counts, protocol, optimizer, rate, momentum and chunk size into
 * those fields of @cfg (the rest untouched).  0, or -EAGAIN before
 * kn_worker_start has succeeded.
 */
int kn__worker_job(const struct kn_worker *w, struct kn__config *cfg);

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
