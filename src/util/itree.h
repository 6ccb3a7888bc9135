/* SPDX-License-Identifier: MIT */
/*
 * itree.h - an interval treap (util/itree.c), used by the registration
 * cache and the memory monitor.
 */
#ifndef TOLLFREE_ITREE_H
#define TOLLFREE_ITREE_H

#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------ itree
 * An interval treap keyed by (start, node address), augmented with the
 * largest end in each subtree so that overlap and containment queries
 * prune whole subtrees.  Not synchronized: callers hold their own lock. */

struct tf__itree_node {
	uint64_t start, end; /* [start, end) */
	uint64_t max_end;    /* largest end in this subtree */
	uint32_t prio;
	struct tf__itree_node *left, *right;
};

struct tf__itree {
	struct tf__itree_node *root;
	uint32_t seed;
	size_t count;
};

void tf__itree_insert(struct tf__itree *t, struct tf__itree_node *n);
void tf__itree_remove(struct tf__itree *t, struct tf__itree_node *n);
/* Call @fn for every node overlapping [start, end), in start order, until
 * it returns nonzero (which is returned).  @fn must not modify the tree. */
int tf__itree_foreach(struct tf__itree *t, uint64_t start, uint64_t end,
		      int (*fn)(struct tf__itree_node *n, void *arg),
		      void *arg);

#endif /* TOLLFREE_ITREE_H */
