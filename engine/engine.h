/* SPDX-License-Identifier: Apache-2.0 */
/*
 * engine.h - the runtime's internals: the chunk layout every process
 * computes alike, nodes (a transport context with its control channels)
 * and the three roles built on them.
 */
#ifndef KN_ENGINE_H
#define KN_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "kanel.h"
#include "msg.h"
#include "transport.h"

/* ---- layout (layout.c) ---- */

#define KN__CHUNK_MAX (1u << 28)

struct kn__tensor_desc {
	char key[KN__KEY_MAX];
	uint32_t dtype; /* enum kn_dtype */
	uint64_t len;	/* elements */
};

struct kn__chunk {
	uint32_t tensor; /* index in key order */
	uint32_t server;
	uint64_t first;	   /* first element */
	uint64_t count;	   /* elements */
	uint64_t bytes;	   /* count * element size */
	uint64_t slot_off; /* in each worker's slice of its server's slots */
};

struct kn__layout {
	uint32_t ntensors, nchunks, nservers, nworkers;
	struct kn__tensor_desc *tensors; /* in key order */
	struct kn__chunk *chunks;
	uint32_t *first_chunk;	     /* per tensor, and ntensors: nchunks */
	uint64_t *server_bytes;	     /* parameter bytes per server */
	uint64_t *slot_bytes;	     /* slot area bytes per server */
	uint64_t *worker_slot_bytes; /* per server: one worker's slice */
};

void kn__layout_sort(struct kn__tensor_desc *t, uint32_t n);
/*
 * Append a TENSOR message's tensor to the table (*@table, *@n entries)
 * being collected: 0, -EPROTO when it is not the next one or the table
 * is full, or -ENOMEM (the table is then as it was).
 */
int kn__layout_table_append(struct kn__tensor_desc **table, uint32_t *n,
			    const struct kn__msg *m);
int kn__layout_build(const struct kn__tensor_desc *tensors, uint32_t ntensors,
		     uint32_t nservers, uint32_t nworkers, uint64_t chunk_bytes,
		     struct kn__layout **out);
void kn__layout_free(struct kn__layout *l);
/* Where worker @worker's slot @parity of @chunk is in the slot area. */
uint64_t kn__layout_slot(const struct kn__layout *l, uint32_t chunk,
			 uint32_t worker, uint32_t parity);
/* The same slot's offset in its worker's own slice (what it names). */
uint64_t kn__layout_own_slot(const struct kn__layout *l, uint32_t chunk,
			     uint32_t parity);

/*
 * The immediate of a data write: op (3 bits), clock parity (1 bit),
 * chunk (28 bits).  PUSH: a worker's contribution is in its slot; INIT:
 * worker 0's initial values are in its parity-0 slot; PULL: the server
 * wrote the chunk's new values into the worker's buffer; SKIP: a push
 * whose slot holds nothing to apply (the worker sits the round out).
 */
enum kn__imm_op {
	KN__IMM_PUSH = 1,
	KN__IMM_INIT = 2,
	KN__IMM_PULL = 3,
	KN__IMM_SKIP = 4,
};

static inline uint32_t kn__imm(uint32_t op, uint32_t parity, uint32_t chunk)
{
	return op << 29 | (parity & 1) << 28 | (chunk & (KN__CHUNK_MAX - 1));
}

static inline uint32_t kn__imm_op(uint32_t imm)
{
	return imm >> 29;
}

static inline uint32_t kn__imm_parity(uint32_t imm)
{
	return imm >> 28 & 1;
}

static inline uint32_t kn__imm_chunk(uint32_t imm)
{
	return imm & (KN__CHUNK_MAX - 1);
}

#endif /* KN_ENGINE_H */
