/*
 * keyidx.h — an index of objects by a string key: a chained hash table
 * (FNV-1a) of nodes embedded in the objects, doubled past one node a
 * bucket. The agent's sandbox table and the runtime's container list use
 * it, so that finding one by key costs the same with 5000 as with 5.
 *
 * A node points at its owner's key, which must not change while the node
 * is in the index (remove, change, add again). Not thread-safe: the
 * caller's lock covers it.
 */
#ifndef SBX_KEYIDX_H
#define SBX_KEYIDX_H

#include <stddef.h>

struct keyidx_node {
	struct keyidx_node *next;      /* the next of its bucket */
	const char *key;
};

struct keyidx {
	struct keyidx_node **b;        /* NULL until the first add */
	size_t size, n;
};

/* Make the first table: 0, or -1 (ENOMEM). */
int keyidx_init(struct keyidx *ix);

/* Add node under key (the owner's, borrowed). -1 (ENOMEM) only when there
 * is no table yet and none can be made, with nothing changed: once the
 * index has one, an add always succeeds (a table that cannot double keeps
 * longer chains). A node already in the index must not be added again. */
int keyidx_add(struct keyidx *ix, struct keyidx_node *node, const char *key);

/* Remove node; nothing when it is not in the index. */
void keyidx_remove(struct keyidx *ix, struct keyidx_node *node);

/* The node of key, or NULL. */
struct keyidx_node *keyidx_find(const struct keyidx *ix, const char *key);

/* The object of type holding node x as its member (NULL for NULL). */
#define KEYIDX_OWNER(x, type, member) \
	((x) ? (type *)(void *)((char *)(x) - offsetof(type, member)) : (type *)NULL)

/* Free the table (the nodes are their owners'). */
void keyidx_free(struct keyidx *ix);

#endif
