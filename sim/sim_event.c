/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sim_event.c - the simulator's event heap (sim_state.h): a binary heap
 * of (time, sequence number) entries over a pool of events that grows
 * by doubling if the first guess was short, and the one error message
 * a failed run keeps.  It calls nothing else of the simulator.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_state.h"

/* --- errors ----------------------------------------------------------- */

/* Say once why the run stops; the first reason is the one kept. */
int kn__sim_fail(struct kn__sim *s, int err, const char *fmt, ...)
{
	va_list ap;

	if (!s->err[0]) {
		va_start(ap, fmt);
		vsnprintf(s->err, sizeof(s->err), fmt, ap);
		va_end(ap);
	}
	return err;
}

const char *kn__sim_strerror(const struct kn__sim *sim)
{
	return sim ? sim->err : "";
}

/* --- the event heap and pool ------------------------------------------ */

static bool before(const struct hent *a, const struct hent *b)
{
	return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

static int grow(void **p, uint32_t *cap, size_t size)
{
	uint32_t ncap = *cap ? 2 * *cap : 64;
	void *np;

	if (*cap > UINT32_MAX / 2)
		return -ENOMEM;
	np = realloc(*p, (size_t)ncap * size);
	if (!np)
		return -ENOMEM;
	*p = np;
	*cap = ncap;
	return 0;
}

/* Schedule a copy of @ev at @t: 0, or -ENOMEM. */
int kn__sim_schedule(struct kn__sim *s, double t, const struct event *ev)
{
	struct hent e = { .t = t, .seq = s->seq++ };
	uint32_t i, parent;

	if (!s->nfree) {
		uint32_t old = s->pool_cap, cap = old;

		/* the free stack has room for the whole pool */
		if (grow((void **)&s->pool, &cap, sizeof(*s->pool)) ||
		    grow((void **)&s->free, &old, sizeof(*s->free)))
			return kn__sim_fail(s, -ENOMEM,
					    "out of memory for events");
		for (i = cap; i > s->pool_cap; i--)
			s->free[s->nfree++] = i - 1;
		s->pool_cap = cap;
	}
	if (s->nheap == s->heap_cap &&
	    grow((void **)&s->heap, &s->heap_cap, sizeof(*s->heap)))
		return kn__sim_fail(s, -ENOMEM, "out of memory for events");
	e.ev = s->free[--s->nfree];
	s->pool[e.ev] = *ev;

	/* sift up, moving parents into the hole */
	for (i = s->nheap++; i > 0; i = parent) {
		parent = (i - 1) / 2;
		if (!before(&e, &s->heap[parent]))
			break;
		s->heap[i] = s->heap[parent];
	}
	s->heap[i] = e;
	return 0;
}

/* Take the earliest event off the heap; the caller frees its entry. */
struct hent kn__sim_heap_pop(struct kn__sim *s)
{
	struct hent top = s->heap[0], last = s->heap[--s->nheap];
	uint32_t i = 0, c;

	while ((c = 2 * i + 1) < s->nheap) {
		if (c + 1 < s->nheap && before(&s->heap[c + 1], &s->heap[c]))
			c++;
		if (!before(&s->heap[c], &last))
			break;
		s->heap[i] = s->heap[c];
		i = c;
	}
	if (s->nheap)
		s->heap[i] = last;
	return top;
}

void kn__sim_events_fini(struct kn__sim *s)
{
	free(s->free);
	free(s->pool);
	free(s->heap);
}
