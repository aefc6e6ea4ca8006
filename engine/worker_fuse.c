/* SPDX-License-Identifier: Apache-2.0 */
/*
 * worker_fuse.c - fused groups: at the start the tensors below
 * --fuse-bytes are grouped into wire tensors of one chunk each (fuse),
 * and in the thread a member's push is copied into its group's buffer,
 * the group pushed once every member's is in, and its answer unpacked
 * into the members' own buffers.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "roles.h"
#include "worker_priv.h"

/*
 * Fused groups.  A member's push copies its gradient into its group's
 * push buffer; once every member's is in, the group is one push of one
 * chunk, written when that chunk has a free slot.  A member's n-th push
 * goes into the group's n-th: a member pushed again before the rest of
 * its group waits (as its operation, and those after it, do).  The data
 * path (worker_push.c) takes a group's push once all are in.
 */

/* Member @mi's gradient into its group, if the group takes it now. */
static bool contribute(struct kn_worker *w, uint32_t mi)
{
	struct wk_member *m = &w->members[mi];
	struct wk_tensor *t = &w->tensors[m->wire];
	size_t es = kn_dtype_size(m->d.dtype);

	if (t->sending || t->contributed == t->nmembers || m->pushes != t->gen)
		return false;
	memcpy((char *)t->grads + m->offset * es, m->grads, m->d.len * es);
	m->pushes++;
	t->contributed++;
	return true;
}

/* @op's push into group @i: true once all of its part is in. */
bool kn__wk_push_fused(struct kn_worker *w, struct wk_op *op, uint32_t i)
{
	const struct wk_tensor *t = &w->tensors[i];
	uint64_t all = t->nmembers == 64 ? UINT64_MAX
					 : ((uint64_t)1 << t->nmembers) - 1;

	if (op->tensor != UINT32_MAX)
		return contribute(w, op->tensor & ~MEMBER_BIT);
	for (uint32_t j = 0; j < t->nmembers; j++)
		if (!(op->mask >> j & 1) && contribute(w, t->first_member + j))
			op->mask |= (uint64_t)1 << j;
	if (op->mask != all)
		return false;
	op->mask = 0;
	return true;
}

/* The group's answer is in its inbox: every member's part to its own. */
void kn__wk_unpack(struct kn_worker *w, const struct wk_tensor *t)
{
	bool sum = kn__job_sums(w->job.u.job.protocol, w->job.u.job.optimizer);
	size_t es = kn_dtype_size(t->d.dtype);

	for (uint32_t j = 0; j < t->nmembers; j++) {
		const struct wk_member *m = &w->members[t->first_member + j];
		void *to = m->inbox ? m->inbox : sum ? m->grads : m->params;

		memcpy(to, (const char *)t->inbox + m->offset * es,
		       m->d.len * es);
	}
}

void kn__wk_fused_free(struct wk_tensor *t)
{
	if (!t->nmembers)
		return;
	free(t->params);
	free(t->grads);
	free(t->inbox);
}

/*
 * A fused group of the members @mem[0 .. @n): one wire tensor, the
 * members' initial values in its parameters (what worker 0 sends).
 */
static int fused_group(uint32_t g, struct wk_member *mem, uint32_t n,
		       uint32_t first, struct wk_tensor *t)
{
	size_t es = kn_dtype_size(mem[0].d.dtype);
	uint64_t len = 0;

	memset(t, 0, sizeof(*t));
	for (uint32_t j = 0; j < n; j++) {
		mem[j].offset = len;
		len += mem[j].d.len;
	}
	snprintf(t->d.key, sizeof(t->d.key), FUSED_PREFIX "%04u", g);
	t->d.dtype = mem[0].d.dtype;
	t->d.len = len;
	t->first_member = first;
	t->nmembers = n;
	t->priority = mem[0].priority;
	for (uint32_t j = 1; j < n; j++)
		if (mem[j].priority < t->priority)
			t->priority = mem[j].priority;
	t->params = kn__wk_zalloc64(len * es);
	t->grads = kn__wk_zalloc64(len * es);
	t->inbox = kn__wk_zalloc64(len * es);
	if (!t->params || !t->grads || !t->inbox) {
		kn__wk_fused_free(t);
		return -ENOMEM;
	}
	for (uint32_t j = 0; j < n; j++)
		memcpy((char *)t->params + mem[j].offset * es, mem[j].params,
		       mem[j].d.len * es);
	return 0;
}

/*
 * The job's tensors below --fuse-bytes travel in groups: per dtype, in
 * key order, as many as fit one chunk (and MAX_MEMBERS); a group of one
 * stays itself.  Every worker computes the same groups from the same
 * table, so the servers see one table of wire tensors.  The tensors are
 * in key order; they stay so.
 */
int kn__wk_fuse(struct kn_worker *w)
{
	uint64_t limit = w->job.u.job.fuse_bytes;
	uint64_t chunk = w->job.u.job.chunk_bytes;
	uint32_t n = w->ntensors, ngroups = 0, nmem = 0, nwire, k = 0;
	uint32_t *group = calloc(n + 1, sizeof(*group)); /* 0: none */
	uint32_t *size = calloc(n + 1, sizeof(*size));
	struct wk_tensor *out = NULL;
	struct wk_member *mem = NULL;
	int ret = group && size ? 0 : -ENOMEM;

	for (uint32_t dt = 0; !ret && dt <= KN_DTYPE_BF16; dt++) {
		uint64_t bytes = 0;
		uint32_t count = 0;

		for (uint32_t i = 0; i < n; i++) {
			const struct wk_tensor *t = &w->tensors[i];
			uint64_t b = t->d.len * kn_dtype_size(t->d.dtype);

			if (t->d.dtype != dt || b >= limit)
				continue;
			if (!count || bytes + b > chunk ||
			    count == MAX_MEMBERS) {
				ngroups++;
				bytes = 0;
				count = 0;
			}
			group[i] = ngroups;
			size[ngroups]++;
			bytes += b;
			count++;
		}
	}
	for (uint32_t i = 0; !ret && i < n; i++) {
		if (group[i] && size[group[i]] < 2)
			group[i] = 0; /* alone: no group */
		nmem += group[i] != 0;
	}
	if (ret || !nmem) {
		free(group);
		free(size);
		return ret;
	}
	/* the groups left, numbered from 0 in order */
	for (uint32_t g = 1, next = 0; g <= ngroups; g++)
		size[g] = size[g] >= 2 ? next++ : UINT32_MAX;
	nwire = n - nmem;
	for (uint32_t g = 1; g <= ngroups; g++)
		nwire += size[g] != UINT32_MAX;
	out = calloc(nwire, sizeof(*out));
	mem = calloc(nmem, sizeof(*mem));
	ret = out && mem ? 0 : -ENOMEM;
	for (uint32_t i = 0; !ret && i < n; i++)
		if (!group[i])
			out[k++] = w->tensors[i];
	for (uint32_t g = 1, m = 0; !ret && g <= ngroups; g++) {
		uint32_t first = m;

		if (size[g] == UINT32_MAX)
			continue;
		for (uint32_t i = 0; i < n; i++)
			if (group[i] == g) {
				const struct wk_tensor *t = &w->tensors[i];

				mem[m++] = (struct wk_member){
					.d = t->d,
					.params = t->params,
					.grads = t->grads,
					.inbox = t->inbox,
					.priority = t->priority,
				};
			}
		ret = fused_group(size[g], mem + first, m - first, first,
				  &out[k]);
		if (!ret)
			k++;
	}
	if (!ret) {
		qsort(out, nwire, sizeof(*out), kn__wk_by_key);
		for (uint32_t i = 0; i < nwire; i++)
			for (uint32_t j = 0; j < out[i].nmembers; j++)
				mem[out[i].first_member + j].wire = i;
		free(w->tensors);
		w->tensors = out;
		w->ntensors = nwire;
		w->members = mem;
		w->nmembers = nmem;
		if (w->node.verbose)
			kn__log(&w->node,
				"%u tensors below %llu bytes travel in %u "
				"groups",
				nmem, (unsigned long long)limit,
				nwire - (n - nmem));
	} else {
		for (uint32_t i = 0; out && i < k; i++)
			kn__wk_fused_free(&out[i]);
		free(out);
		free(mem);
	}
	free(group);
	free(size);
	return ret;
}
