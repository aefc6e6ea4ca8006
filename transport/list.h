/* SPDX-License-Identifier: Apache-2.0 */
/*
 * list.h - the intrusive doubly-linked list the transport's providers
 * keep their objects on (endpoints, regions, listeners, ready lists).
 *
 * A list is a head whose links point at itself when empty; a member
 * embeds a struct kn__list and is reached with container_of.  Adding and
 * removing are O(1) and allocate nothing, so the hot paths may use them
 * (a ready list per poll).  A member's links are NULL while it is on no
 * list (zeroed memory is off every list), so removing twice is harmless
 * and kn__list_on() says whether it is on one.
 */
#ifndef KN_TRANSPORT_LIST_H
#define KN_TRANSPORT_LIST_H

#include <stdbool.h>
#include <stddef.h>

struct kn__list {
	struct kn__list *prev, *next;
};

/* An empty list at @h. */
static inline void kn__list_init(struct kn__list *h)
{
	h->prev = h->next = h;
}

static inline bool kn__list_empty(const struct kn__list *h)
{
	return h->next == h;
}

/* Whether member @n is on a list. */
static inline bool kn__list_on(const struct kn__list *n)
{
	return n->next != NULL;
}

/* Put @n first on @h. */
static inline void kn__list_push(struct kn__list *h, struct kn__list *n)
{
	n->prev = h;
	n->next = h->next;
	h->next->prev = n;
	h->next = n;
}

/* Put @n last on @h. */
static inline void kn__list_append(struct kn__list *h, struct kn__list *n)
{
	n->next = h;
	n->prev = h->prev;
	h->prev->next = n;
	h->prev = n;
}

/* Take @n off its list, if it is on one. */
static inline void kn__list_del(struct kn__list *n)
{
	if (!n->next)
		return;
	n->prev->next = n->next;
	n->next->prev = n->prev;
	n->prev = n->next = NULL;
}

/* The first member of @h, or NULL. */
static inline struct kn__list *kn__list_first(const struct kn__list *h)
{
	return h->next == h ? NULL : h->next;
}

/* @pos over the members of @h, first to last; @pos may not be removed. */
#define kn__list_each(pos, h) \
	for ((pos) = (h)->next; (pos) != (h); (pos) = (pos)->next)

/* The same, where the body may remove @pos (@tmp holds the next). */
#define kn__list_each_safe(pos, tmp, h)                            \
	for ((pos) = (h)->next, (tmp) = (pos)->next; (pos) != (h); \
	     (pos) = (tmp), (tmp) = (pos)->next)

#endif /* KN_TRANSPORT_LIST_H */
