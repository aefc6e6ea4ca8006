/* SPDX-License-Identifier: Apache-2.0 */
/*
 * coordinator_send.c - what the coordinator says to many processes: the
 * JOB message and the servers' addresses (a worker's welcome), the job's
 * tensor table to the servers, READY, and SHUTDOWN at the job's end.
 * The bottom of the coordinator's files: it calls none of the others.
 */
#include <string.h>

#include "coordinator_priv.h"

void kn__crd_send_job(struct coordinator *c, struct kn__chan *ch, uint32_t rank)
{
	struct kn__msg m;

	kn__msg_job_init(c->cfg, c->optimizer, rank, c->restore, &m);
	/* a worker settles --optimizer auto from its own program, even
	 * after worker 0's table settled the job's: a different answer is
	 * refused at its table, with the reason */
	if (ch->peer_role == KN__ROLE_WORKER)
		m.u.job.optimizer = c->cfg->optimizer;
	kn__chan_send(ch, &m);
}

/* A worker learns the job and where the servers are. */
void kn__crd_welcome_worker(struct coordinator *c, uint32_t w)
{
	struct kn__chan *ch = c->workers[w].ch;
	struct kn__msg m = { .type = KN__MSG_HELLO };

	kn__crd_send_job(c, ch, w);
	for (uint32_t s = 0; s < c->cfg->servers; s++) {
		m.u.hello.role = KN__ROLE_SERVER;
		m.u.hello.rank = s;
		m.u.hello.addr = c->servers[s].addr;
		kn__chan_send(ch, &m);
	}
}

void kn__crd_send_ready(struct kn__chan *ch, uint32_t what)
{
	struct kn__msg m = { .type = KN__MSG_READY };

	m.u.ready.what = what;
	kn__chan_send(ch, &m);
}

/* Send every worker whose table is checked to the servers. */
void kn__crd_workers_to_servers(struct coordinator *c)
{
	for (uint32_t w = 0; w < c->cfg->workers; w++)
		if (c->workers[w].ch && c->workers[w].table_ok)
			kn__crd_send_ready(c->workers[w].ch, KN__READY_TABLE);
}

void kn__crd_send_table(struct coordinator *c, struct kn__chan *ch)
{
	struct kn__msg m = { .type = KN__MSG_TENSOR };

	/* a server learns what --optimizer auto became before the table
	 * it builds its chunks from */
	if (c->cfg->optimizer == KN__CONFIG_AUTO)
		kn__crd_send_job(c, ch, ch->peer_rank);

	for (uint32_t i = 0; i < c->ntable; i++) {
		m.u.tensor.index = i;
		m.u.tensor.dtype = c->table[i].dtype;
		m.u.tensor.len = c->table[i].len;
		memcpy(m.u.tensor.key, c->table[i].key, KN__KEY_MAX);
		kn__chan_send(ch, &m);
	}
	m = (struct kn__msg){ .type = KN__MSG_TENSORS_END };
	m.u.tensors_end.count = c->ntable;
	kn__chan_send(ch, &m);
}

void kn__crd_broadcast(struct coordinator *c, const struct kn__msg *m)
{
	for (uint32_t s = 0; s < c->cfg->servers; s++)
		if (c->servers[s].ch)
			kn__chan_send(c->servers[s].ch, m);
}

void kn__crd_shutdown(struct coordinator *c, int status)
{
	struct kn__msg m = { .type = KN__MSG_SHUTDOWN };

	c->recovering = false;
	kn__crd_broadcast(c, &m);
	for (uint32_t w = 0; w < c->cfg->workers; w++)
		if (c->workers[w].ch)
			kn__chan_send(c->workers[w].ch, &m);
	/* the first reason stays: the workers that leave after a lost
	 * server end the job again, with 0 */
	if (!c->status)
		c->status = status;
	c->done = true;
}
