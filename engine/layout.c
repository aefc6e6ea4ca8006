/* SPDX-License-Identifier: Apache-2.0 */
/*
 * layout.c - where every chunk of every tensor lives.  Every process
 * computes the same map from the same tensor table: tensors in key order,
 * each cut into chunks of chunk_bytes (the last one shorter), each chunk
 * placed on the server that holds the fewest bytes so far (the lowest
 * index on a tie).  On its server a chunk has 2 slots per worker (by
 * clock parity) in one slot area, cut into one slice per worker: worker
 * w's slot p of chunk c starts at w * worker_slot_bytes + slot_off +
 * p * bytes.  A worker's slots are one contiguous range, so that the
 * server can grant each worker its own slice and nothing else.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"

#define SLOT_ALIGN 64

static int by_key(const void *a, const void *b)
{
	const struct kn__tensor_desc *x = a, *y = b;

	return strcmp(x->key, y->key);
}

void kn__layout_sort(struct kn__tensor_desc *t, uint32_t n)
{
	qsort(t, n, sizeof(*t), by_key);
}

int kn__layout_table_append(struct kn__tensor_desc **table, uint32_t *n,
			    const struct kn__msg *m)
{
	struct kn__tensor_desc *t;

	if (m->u.tensor.index != *n || *n >= KN__CHUNK_MAX)
		return -EPROTO;
	t = realloc(*table, (*n + 1) * sizeof(*t));
	if (!t)
		return -ENOMEM;
	*table = t;
	memcpy(t[*n].key, m->u.tensor.key, KN__KEY_MAX);
	t[*n].dtype = m->u.tensor.dtype;
	t[*n].len = m->u.tensor.len;
	(*n)++;
	return 0;
}

int kn__layout_build(const struct kn__tensor_desc *tensors, uint32_t ntensors,
		     uint32_t nservers, uint32_t nworkers, uint64_t chunk_bytes,
		     struct kn__layout **out)
{
	struct kn__layout *l;
	uint64_t nchunks = 0;
	uint32_t k = 0;

	if (!nservers || !nworkers || chunk_bytes < 4)
		return -EINVAL;
	for (uint32_t i = 0; i < ntensors; i++) {
		size_t es = kn_dtype_size(tensors[i].dtype);
		uint64_t per = chunk_bytes / (es ? es : 1);

		if (!es || !tensors[i].len || !per)
			return -EINVAL;
		if (i && strcmp(tensors[i - 1].key, tensors[i].key) >= 0)
			return -EINVAL; /* sorted, keys unique */
		nchunks += (tensors[i].len + per - 1) / per;
	}
	if (nchunks > KN__CHUNK_MAX)
		return -E2BIG;
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->tensors = malloc(ntensors * sizeof(*l->tensors) + 1);
	l->chunks = calloc(nchunks + 1, sizeof(*l->chunks));
	l->server_bytes = calloc(nservers, sizeof(*l->server_bytes));
	l->slot_bytes = calloc(nservers, sizeof(*l->slot_bytes));
	l->worker_slot_bytes = calloc(nservers, sizeof(*l->worker_slot_bytes));
	l->first_chunk = calloc(ntensors + 1, sizeof(*l->first_chunk));
	if (!l->tensors || !l->chunks || !l->server_bytes || !l->slot_bytes ||
	    !l->worker_slot_bytes || !l->first_chunk) {
		kn__layout_free(l);
		return -ENOMEM;
	}
	memcpy(l->tensors, tensors, ntensors * sizeof(*tensors));
	l->ntensors = ntensors;
	l->nchunks = (uint32_t)nchunks;
	l->nservers = nservers;
	l->nworkers = nworkers;
	for (uint32_t i = 0; i < ntensors; i++) {
		size_t es = kn_dtype_size(tensors[i].dtype);
		uint64_t per = chunk_bytes / es;

		l->first_chunk[i] = k;
		for (uint64_t first = 0; first < tensors[i].len; first += per) {
			struct kn__chunk *c = &l->chunks[k++];
			uint32_t s = 0;

			for (uint32_t j = 1; j < nservers; j++)
				if (l->server_bytes[j] < l->server_bytes[s])
					s = j;
			c->tensor = i;
			c->first = first;
			c->count = tensors[i].len - first < per
					   ? tensors[i].len - first
					   : per;
			c->bytes = c->count * es;
			c->server = s;
			c->slot_off = l->worker_slot_bytes[s];
			l->server_bytes[s] += c->bytes;
			l->worker_slot_bytes[s] +=
				(2 * c->bytes + SLOT_ALIGN - 1) / SLOT_ALIGN *
				SLOT_ALIGN;
		}
	}
	for (uint32_t s = 0; s < nservers; s++)
		l->slot_bytes[s] = nworkers * l->worker_slot_bytes[s];
	l->first_chunk[ntensors] = k;
	*out = l;
	return 0;
}

void kn__layout_free(struct kn__layout *l)
{
	if (!l)
		return;
	free(l->tensors);
	free(l->chunks);
	free(l->server_bytes);
	free(l->slot_bytes);
	free(l->worker_slot_bytes);
	free(l->first_chunk);
	free(l);
}

uint64_t kn__layout_slot(const struct kn__layout *l, uint32_t chunk,
			 uint32_t worker, uint32_t parity)
{
	const struct kn__chunk *c = &l->chunks[chunk];

	return worker * l->worker_slot_bytes[c->server] +
	       kn__layout_own_slot(l, chunk, parity);
}

uint64_t kn__layout_own_slot(const struct kn__layout *l, uint32_t chunk,
			     uint32_t parity)
{
	const struct kn__chunk *c = &l->chunks[chunk];

	return c->slot_off + parity * c->bytes;
}
