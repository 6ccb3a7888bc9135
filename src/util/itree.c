/* SPDX-License-Identifier: MIT */
/*
 * itree.c - an interval treap keyed by (start, node address), augmented
 * with the largest end in each subtree.
 */
#include <stdbool.h>

#include "itree.h"

/* ------------------------------------------------------------ itree */

static inline uint64_t node_max(const struct tf__itree_node *n)
{
	return n ? n->max_end : 0;
}

static inline void node_update(struct tf__itree_node *n)
{
	uint64_t m = n->end, l = node_max(n->left), r = node_max(n->right);

	if (l > m)
		m = l;
	if (r > m)
		m = r;
	n->max_end = m;
}

/* Total order on nodes: start, then address (starts may repeat). */
static inline bool node_less(const struct tf__itree_node *a,
			     const struct tf__itree_node *b)
{
	return a->start < b->start ||
	       (a->start == b->start && (uintptr_t)a < (uintptr_t)b);
}

static void itree_split(struct tf__itree_node *t,
			const struct tf__itree_node *key,
			struct tf__itree_node **l, struct tf__itree_node **r)
{
	if (!t) {
		*l = *r = NULL;
		return;
	}
	if (node_less(t, key)) {
		itree_split(t->right, key, &t->right, r);
		*l = t;
	} else {
		itree_split(t->left, key, l, &t->left);
		*r = t;
	}
	node_update(t);
}

static struct tf__itree_node *itree_merge(struct tf__itree_node *a,
					  struct tf__itree_node *b)
{
	if (!a)
		return b;
	if (!b)
		return a;
	if (a->prio > b->prio) {
		a->right = itree_merge(a->right, b);
		node_update(a);
		return a;
	}
	b->left = itree_merge(a, b->left);
	node_update(b);
	return b;
}

static struct tf__itree_node *itree_ins(struct tf__itree_node *t,
					struct tf__itree_node *n)
{
	if (!t)
		return n;
	if (n->prio > t->prio) {
		itree_split(t, n, &n->left, &n->right);
		node_update(n);
		return n;
	}
	if (node_less(n, t))
		t->left = itree_ins(t->left, n);
	else
		t->right = itree_ins(t->right, n);
	node_update(t);
	return t;
}

static struct tf__itree_node *itree_rm(struct tf__itree_node *t,
				       struct tf__itree_node *n)
{
	if (!t)
		return NULL;
	if (t == n)
		return itree_merge(t->left, t->right);
	if (node_less(n, t))
		t->left = itree_rm(t->left, n);
	else
		t->right = itree_rm(t->right, n);
	node_update(t);
	return t;
}

void tf__itree_insert(struct tf__itree *t, struct tf__itree_node *n)
{
	/* xorshift32: priorities only need to look random for balance. */
	uint32_t x = t->seed ? t->seed : 0x9e3779b9u;

	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	t->seed = x;
	n->prio = x;
	n->left = n->right = NULL;
	n->max_end = n->end;
	t->root = itree_ins(t->root, n);
	t->count++;
}

void tf__itree_remove(struct tf__itree *t, struct tf__itree_node *n)
{
	t->root = itree_rm(t->root, n);
	n->left = n->right = NULL;
	t->count--;
}

static int itree_visit(struct tf__itree_node *n, uint64_t start, uint64_t end,
		       int (*fn)(struct tf__itree_node *, void *), void *arg)
{
	int ret;

	while (n && n->max_end > start) {
		ret = itree_visit(n->left, start, end, fn, arg);
		if (ret)
			return ret;
		if (n->start >= end)
			return 0;
		if (n->end > start) {
			ret = fn(n, arg);
			if (ret)
				return ret;
		}
		n = n->right;
	}
	return 0;
}

int tf__itree_foreach(struct tf__itree *t, uint64_t start, uint64_t end,
		      int (*fn)(struct tf__itree_node *n, void *arg), void *arg)
{
	return itree_visit(t->root, start, end, fn, arg);
}
