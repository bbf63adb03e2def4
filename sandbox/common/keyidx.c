/*
 * keyidx.c — see keyidx.h.
 */
#include "keyidx.h"

#include <stdlib.h>
#include <string.h>

static size_t key_hash(const char *key)
{
	size_t h = 2166136261u;   /* FNV-1a */

	for (; *key; key++)
		h = (h ^ (unsigned char)*key) * 16777619u;
	return h;
}

/* Rehash into a table of n buckets: 0, or -1 (ENOMEM) with nothing changed. */
static int resize(struct keyidx *ix, size_t n)
{
	struct keyidx_node **t = calloc(n, sizeof(*t));

	if (!t)
		return -1;
	for (size_t i = 0; i < ix->size; i++) {
		for (struct keyidx_node *x = ix->b[i], *next; x; x = next) {
			next = x->next;
			x->next = t[key_hash(x->key) % n];
			t[key_hash(x->key) % n] = x;
		}
	}
	free(ix->b);
	ix->b = t;
	ix->size = n;
	return 0;
}

int keyidx_init(struct keyidx *ix)
{
	return ix->b ? 0 : resize(ix, 256);
}

int keyidx_add(struct keyidx *ix, struct keyidx_node *node, const char *key)
{
	size_t h;

	if (keyidx_init(ix) < 0)
		return -1;
	if (ix->n + 1 > ix->size)
		(void)resize(ix, ix->size * 2);
	node->key = key;
	h = key_hash(key) % ix->size;
	node->next = ix->b[h];
	ix->b[h] = node;
	ix->n++;
	return 0;
}

void keyidx_remove(struct keyidx *ix, struct keyidx_node *node)
{
	if (!ix->b || !node->key)
		return;
	for (struct keyidx_node **pp = &ix->b[key_hash(node->key) % ix->size]; *pp;
	     pp = &(*pp)->next) {
		if (*pp == node) {
			*pp = node->next;
			node->next = NULL;
			ix->n--;
			return;
		}
	}
}

struct keyidx_node *keyidx_find(const struct keyidx *ix, const char *key)
{
	if (!ix->b)
		return NULL;
	for (struct keyidx_node *x = ix->b[key_hash(key) % ix->size]; x; x = x->next)
		if (strcmp(x->key, key) == 0)
			return x;
	return NULL;
}

void keyidx_free(struct keyidx *ix)
{
	free(ix->b);
	ix->b = NULL;
	ix->size = ix->n = 0;
}
