/* SPDX-License-Identifier: Apache-2.0 */
/*
 * msg.h - the engine's control messages: what the coordinator, servers
 * and workers say to each other in transport send/recv messages (at most
 * KN__MSG_MAX bytes).  Data never travels here: pushes and pulls are
 * write_imm into registered memory.
 *
 * A message is an 8-byte header (type u16, version u16, payload length
 * u32) and a payload of little-endian fields.  Decoding checks every
 * length and value before use and returns -EPROTO for anything
 * malformed; the caller then closes that connection.  docs/engine.md
 * lists the messages field by field.
 */
#ifndef KN_ENGINE_MSG_H
#define KN_ENGINE_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "config.h"
#include "transport.h"

#define KN__MSG_MAX	4096
#define KN__MSG_HDR	8
#define KN__MSG_VERSION 1
#define KN__KEY_MAX	128 /* bytes of a tensor key, with its NUL */
#define KN__TEXT_MAX	512 /* bytes of an error text, with its NUL */
#define KN__AUTH_MAX	256 /* bytes of an auth message */

enum kn__msg_type {
	KN__MSG_AUTH = 1,    /* an auth step (engine/auth.h), opaque */
	KN__MSG_HELLO,	     /* who I am: role, rank, and a server's address */
	KN__MSG_JOB,	     /* coordinator -> all: counts, protocol, servers */
	KN__MSG_TENSOR,	     /* a tensor: worker -> coordinator -> servers */
	KN__MSG_TENSORS_END, /* the table is complete (its count) */
	KN__MSG_BUFFERS,     /* worker -> server: its buffers for a tensor */
	KN__MSG_SLOTS,	     /* server -> worker: its slot area */
	KN__MSG_READY,	     /* a step of start-up is done (enum kn__ready) */
	KN__MSG_HEARTBEAT,   /* worker, server -> coordinator */
	KN__MSG_MEMBER,	     /* coordinator -> servers: a worker left/joined */
	KN__MSG_DONE,	     /* worker -> coordinator: it has finished */
	KN__MSG_SHUTDOWN,    /* coordinator -> all: the job ends */
	KN__MSG_ERROR,	     /* a fatal error, with a text */
	KN__MSG_RELEASE,     /* server -> worker: a release's plan and hint */
	KN__MSG_TIMING,	     /* worker -> coordinator: its seconds per step */
	KN__MSG_PLAN,	     /* coordinator -> servers: a plan, in parts */
	KN__MSG_BARRIER,     /* server -> coordinator: CGP epoch end */
	KN__MSG_CHECKPOINTS, /* server -> coordinator: versions it can load */
	KN__MSG_RESTORE,     /* coordinator -> servers: load this version */
	KN__MSG_RECOVER,     /* coordinator -> servers: a server was lost */
};

/* Versions a CHECKPOINTS message offers, newest first. */
#define KN__MSG_CKPT_MAX 8

/* Steps of a plan one PLAN message carries (a plan of more workers
 * travels in several, each naming its first worker). */
#define KN__PLAN_PART 1000

enum kn__ready {
	KN__READY_LAYOUT = 1, /* server -> coordinator: slots allocated */
	KN__READY_TABLE,      /* coordinator -> worker: go to the servers */
	KN__READY_BUFFERS,    /* worker -> server: all its buffers sent */
	KN__READY_START,      /* worker -> coordinator: I hold the model;
				 coordinator -> workers: everyone does */
};

/* The worker's program steps the model itself (--optimizer auto). */
#define KN__TABLE_OWN_OPTIMIZER 1u

struct kn__msg {
	uint16_t type;
	union {
		struct {
			uint32_t len;
			uint8_t data[KN__AUTH_MAX];
		} auth;
		struct {
			uint32_t role, rank;
			struct sockaddr_storage
				addr; /* server: where it listens */
		} hello;
		struct {
			uint32_t workers, servers, protocol, optimizer;
			uint64_t chunk_bytes;
			uint32_t fuse_bytes;  /* --fuse-bytes */
			uint32_t push_window; /* --push-window */
			float lr, momentum;
			/* the protocols' parameters: sync/'s block (the
			 * protocol and worker count are the fields above;
			 * the model's bytes are the coordinator's alone) */
			struct kn__sync_params proto;
			uint32_t
				rank; /* the receiver's (a rejoin gets its own) */
			/* 1: the servers start from their checkpoints */
			uint32_t restore;
		} job;
		struct {
			uint32_t index; /* in key order */
			uint32_t dtype;
			uint64_t len; /* elements */
			char key[KN__KEY_MAX];
		} tensor;
		struct {
			uint32_t count;
			/* worker -> coordinator: KN__TABLE_OWN_OPTIMIZER */
			uint32_t flags;
		} tensors_end;
		struct {
			uint32_t index;
			struct kn__tp_rdesc params, grads;
		} buffers;
		struct {
			struct kn__tp_rdesc slots;
		} slots;
		struct {
			uint32_t what; /* enum kn__ready */
		} ready;
		struct {
			uint32_t rank;
			uint32_t joined; /* 0: left, 1: joined */
		} member;
		struct {
			int32_t code; /* a negative errno */
			char text[KN__TEXT_MAX];
		} error;
		struct {
			uint32_t chunk;
			uint32_t steps;	  /* local steps before the next push */
			uint64_t epoch;	  /* the plan in force */
			float hint;	  /* ESP: predicted wait, seconds */
			uint64_t version; /* the chunk's version released */
		} release;
		struct {
			float seconds; /* mean seconds per local step */
		} timing;
		struct {
			uint64_t epoch;
			uint32_t workers;      /* the plan's size */
			uint32_t first, count; /* this part: steps[first..] */
			uint32_t steps[KN__PLAN_PART];
		} plan;
		struct {
			uint64_t epoch; /* the epoch whose end was reached */
		} barrier;
		struct {
			/* 1: the server owns no chunk, any version will do */
			uint32_t any;
			uint32_t count; /* at most KN__MSG_CKPT_MAX */
			uint64_t versions[KN__MSG_CKPT_MAX]; /* newest first */
		} checkpoints;
		struct {
			uint64_t version; /* one every server offered */
		} restore;
	} u;
};

/* Encode @m into @buf (KN__MSG_MAX bytes); the length, or -EINVAL. */
int kn__msg_encode(const struct kn__msg *m, uint8_t *buf, size_t cap);

/* Decode @len bytes at @buf; 0 and @m, or -EPROTO. */
int kn__msg_decode(const uint8_t *buf, size_t len, struct kn__msg *m);

const char *kn__msg_name(uint16_t type);

/*
 * The JOB message of the job @cfg describes, in @out: what every process
 * of the job is told at its start.  @optimizer is the job's (--optimizer,
 * or what AUTO became; enum kn__config_optimizer), @rank the receiver's
 * own, @restore whether the servers start from their checkpoints.
 */
void kn__msg_job_init(const struct kn__config *cfg, uint32_t optimizer,
		      uint32_t rank, bool restore, struct kn__msg *out);

/*
 * The inverse, for a process told its job: the fields of @cfg that a JOB
 * message carries (counts, protocol, optimizer, sizes, rates and the
 * protocols' parameters) from @job; the others are left as they are.
 * 0, or -EINVAL when @job is not a JOB message (@cfg untouched).
 */
int kn__msg_job_config(const struct kn__msg *job, struct kn__config *cfg);

#endif /* KN_ENGINE_MSG_H */
