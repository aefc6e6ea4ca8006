/* SPDX-License-Identifier: Apache-2.0 */
/*
 * worker_keys.c - the program's tensor keys to the tensors the engine
 * moves (a wire tensor, or a member of a fused group).  Before the start
 * a key is searched for in the table; once kn_worker_start has made the
 * table final it builds the key table, an open-addressed hash of the
 * keys, and publishes it, and from then on the program's calls find a
 * key there without the lock (worker_priv.h, Threading).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "worker_priv.h"

/* qsort's order of struct wk_tensor: by key. */
int kn__wk_by_key(const void *a, const void *b)
{
	const struct wk_tensor *x = a, *y = b;

	return strcmp(x->d.key, y->d.key);
}

/* FNV-1a: the key table's hash. */
static uint32_t key_hash(const char *key)
{
	uint32_t h = 2166136261u;

	for (; *key; key++)
		h = (h ^ (uint8_t)*key) * 16777619u;
	return h;
}

/* The program's key of kn__wk_tensor_index()'s answer @idx. */
static const char *index_key(const struct kn_worker *w, uint32_t idx)
{
	return idx & MEMBER_BIT ? w->members[idx & ~MEMBER_BIT].d.key
				: w->tensors[idx].d.key;
}

/*
 * kn_worker_start, under the lock, once the table is final (sorted,
 * fused): the key table, published for the look-ups without the lock.
 */
int kn__wk_keys_build(struct kn_worker *w)
{
	uint32_t size = 16;
	struct wk_keys *k;

	while (size < 2 * (w->ntensors + w->nmembers))
		size *= 2;
	k = malloc(sizeof(*k) + size * sizeof(k->slot[0]));
	if (!k)
		return -ENOMEM;
	k->mask = size - 1;
	memset(k->slot, 0xff, size * sizeof(k->slot[0]));
	for (uint32_t i = 0; i < w->ntensors + w->nmembers; i++) {
		uint32_t idx =
			i < w->ntensors ? i : MEMBER_BIT | (i - w->ntensors);
		uint32_t s;

		if (i < w->ntensors && w->tensors[i].nmembers)
			continue; /* a group: the program names its members */
		for (s = key_hash(index_key(w, idx)) & k->mask;
		     k->slot[s] != UINT32_MAX; s = (s + 1) & k->mask)
			;
		k->slot[s] = idx;
	}
	/* pairs with the acquire loads of kn__wk_keys_find's callers */
	atomic_store_explicit(&w->keys, k, memory_order_release);
	return 0;
}

/* @key's kn__wk_tensor_index() answer from the key table @k: no lock. */
int kn__wk_keys_find(const struct kn_worker *w, const struct wk_keys *k,
		     const char *key, uint32_t *idx)
{
	if (!key) {
		*idx = UINT32_MAX;
		return 0;
	}
	for (uint32_t s = key_hash(key) & k->mask; k->slot[s] != UINT32_MAX;
	     s = (s + 1) & k->mask)
		if (strcmp(index_key(w, k->slot[s]), key) == 0) {
			*idx = k->slot[s];
			return 0;
		}
	return -ENOENT;
}

int kn__wk_tensor_index(struct kn_worker *w, const char *key, uint32_t *idx)
{
	const struct wk_keys *k =
		atomic_load_explicit(&w->keys, memory_order_acquire);

	if (k)
		return kn__wk_keys_find(w, k, key, idx);
	if (!key) {
		*idx = UINT32_MAX;
		return 0;
	}
	for (uint32_t i = 0; i < w->ntensors; i++)
		if (!w->tensors[i].nmembers &&
		    strcmp(w->tensors[i].d.key, key) == 0) {
			*idx = i;
			return 0;
		}
	for (uint32_t i = 0; i < w->nmembers; i++)
		if (strcmp(w->members[i].d.key, key) == 0) {
			*idx = MEMBER_BIT | i;
			return 0;
		}
	return -ENOENT;
}
