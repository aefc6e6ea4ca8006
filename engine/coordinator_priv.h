/* SPDX-License-Identifier: Apache-2.0 */
/*
 * coordinator_priv.h - the coordinator's state and the functions its
 * files share.  The files call downwards only, each the ones below it:
 *
 *   coordinator.c          messages, start-up, the loop (kn__coordinator_run)
 *   coordinator_members.c  membership, heartbeats, deadlines (the tick)
 *   coordinator_recover.c  --restore, and a lost server's recovery
 *   coordinator_plan.c     the planner: its events and the plans it sends
 *   coordinator_send.c     what goes to many: JOB, the table, READY, SHUTDOWN
 */
#ifndef KN_ENGINE_COORDINATOR_PRIV_H
#define KN_ENGINE_COORDINATOR_PRIV_H

#include <stdbool.h>
#include <stdint.h>

#include "node.h"
#include "sync.h"
#include "roles.h"

struct crd_server {
	struct kn__chan *ch;
	struct sockaddr_storage addr;
	bool hello, layout;
	/* --restore: the versions it can load (CHECKPOINTS), newest first;
	 * @any: it owns no chunk, and every version will do */
	bool listed, any;
	uint32_t nckpt;
	uint64_t ckpt[KN__MSG_CKPT_MAX];
	double last_seen; /* its last message (a heartbeat at least) */
};

struct crd_worker {
	struct kn__chan *ch;
	bool held; /* its READY START waits for the others' (recovery) */
	struct kn__tensor_desc *table; /* as it arrives */
	uint32_t ntable;
	double last_seen;
	bool table_done, table_ok, started, done, removed;
	bool planned; /* a member of the planner's membership */
	bool own;     /* its program steps the model (TENSORS_END) */
};

struct coordinator {
	struct kn__node node;
	const struct kn__config *cfg;
	struct crd_server *servers;
	struct crd_worker *workers;
	struct kn__tensor_desc *table; /* the job's, once known */
	uint32_t ntable;
	uint32_t hellos, layouts, ready;
	bool table_sent, started, done;
	/* the job's optimizer: --optimizer, or what AUTO became at worker
	 * 0's table (until then AUTO) */
	enum kn__config_optimizer optimizer;
	/*
	 * Checkpoints: @restore, the servers start from theirs (--restore,
	 * or a recovery), @restoring until the version is chosen.  A server
	 * lost after the start with --checkpoint-dir given is waited for
	 * (@recovering since @recover_t0); once it is back every server goes
	 * back to the chosen version and the workers that come back start
	 * together again (@holding: their READY START held until @expected
	 * have sent one).
	 */
	bool restore, restoring, recovering, holding;
	double recover_t0, hold_t0;
	uint32_t expected, held;
	uint32_t let_go; /* workers let go at the loss: expected back */
	double t0;
	/* the loop's last look at the clock: a longer gap than PAUSE_MIN_S
	 * is a pause of our own (SIGSTOP, a VM stopped), not the peers' */
	double last_tick;
	int status;
	/* the planner of the job's protocol (PSP's, CGP's plans; none for
	 * most) */
	struct kn__sync_planner *planner;
	struct kn__sync_action *actions;
	uint64_t plans; /* plans sent */
	/* CGP: the last plan sent, [workers], for the regroup line */
	uint32_t *last_plan;
};

/* ---- coordinator_send.c ---- */

/* The JOB message to @ch, for the process of rank @rank of its role. */
void kn__crd_send_job(struct coordinator *c, struct kn__chan *ch,
		      uint32_t rank);
/* Worker @w learns the job and where the servers are. */
void kn__crd_welcome_worker(struct coordinator *c, uint32_t w);
/* The job's tensor table to server @ch. */
void kn__crd_send_table(struct coordinator *c, struct kn__chan *ch);
void kn__crd_send_ready(struct kn__chan *ch, uint32_t what);
/* Send every worker whose table is checked to the servers. */
void kn__crd_workers_to_servers(struct coordinator *c);
void kn__crd_broadcast(struct coordinator *c, const struct kn__msg *m);
/* Everyone is told the job ends; @status, the first reason, stays. */
void kn__crd_shutdown(struct coordinator *c, int status);

/* ---- coordinator_plan.c ---- */

/* A worker's event for the planner: JOIN, LEAVE or TIMING. */
void kn__crd_plan_event(struct coordinator *c, uint32_t type, uint32_t w,
			double value);
/* CGP: server @s's chunk rules wait at the end of @epoch. */
void kn__crd_plan_barrier(struct coordinator *c, uint32_t s, uint64_t epoch);
/* The parameters of the job's planner (the model's bytes come later). */
void kn__crd_planner_params(struct coordinator *c, struct kn__sync_params *sp);
/* The job's table is known: the planner learns the model's bytes. */
void kn__crd_plan_with_table(struct coordinator *c);
/* A new planner for a protocol started again (a recovery). */
void kn__crd_reset_planner(struct coordinator *c);

/* ---- coordinator_recover.c ---- */

/* After a recovery: the workers back start together. */
void kn__crd_release_held(struct coordinator *c);
/* Every server has its layout and its list: restore, then go on. */
void kn__crd_maybe_restore(struct coordinator *c);
/* Server @r is gone: the job ends, or waits for it (--checkpoint-dir). */
void kn__crd_lose_server(struct coordinator *c, uint32_t r);

/* ---- coordinator_members.c ---- */

/* The job ends once every worker has finished or been removed. */
void kn__crd_check_end(struct coordinator *c);
void kn__crd_remove_worker(struct coordinator *c, uint32_t w, const char *why);
/* The loop's deadlines and liveness checks, about every 100 ms. */
void kn__crd_tick(struct coordinator *c);

#endif /* KN_ENGINE_COORDINATOR_PRIV_H */
