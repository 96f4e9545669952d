/* SPDX-License-Identifier: Apache-2.0 */
/* The idle table (rpc_pipes.h): a chained hash of pipe id -> last active.
 * Pipes are bounded by the connection caps, so it stays small. */
#include "rpc_pipes.h"

#include <stdlib.h>

#define BUCKETS 4096

struct entry {
	struct entry *next;
	uint32_t id;
	int64_t last_ms;
};

struct rpc_pipes {
	struct entry *buckets[BUCKETS];
};

struct rpc_pipes *rpc_pipes_new(void)
{
	return calloc(1, sizeof(struct rpc_pipes));
}

void rpc_pipes_free(struct rpc_pipes *t)
{
	if (!t)
		return;
	for (size_t b = 0; b < BUCKETS; b++)
		while (t->buckets[b]) {
			struct entry *e = t->buckets[b];

			t->buckets[b] = e->next;
			free(e);
		}
	free(t);
}

bool rpc_pipes_touch(struct rpc_pipes *t, uint32_t id, int64_t now_ms)
{
	struct entry **head = &t->buckets[id % BUCKETS], *e;

	for (e = *head; e; e = e->next)
		if (e->id == id) {
			e->last_ms = now_ms;
			return true;
		}
	if (!(e = malloc(sizeof(*e))))
		return false;
	*e = (struct entry){.next = *head, .id = id, .last_ms = now_ms};
	*head = e;
	return true;
}

void rpc_pipes_forget(struct rpc_pipes *t, uint32_t id)
{
	for (struct entry **p = &t->buckets[id % BUCKETS]; *p; p = &(*p)->next)
		if ((*p)->id == id) {
			struct entry *e = *p;

			*p = e->next;
			free(e);
			return;
		}
}

size_t rpc_pipes_take_idle(struct rpc_pipes *t, int64_t before_ms, bool (*busy)(void *, uint32_t),
			   void *arg, uint32_t *out, size_t max)
{
	size_t n = 0;

	for (size_t b = 0; b < BUCKETS && n < max; b++)
		for (struct entry **p = &t->buckets[b]; *p && n < max;) {
			struct entry *e = *p;

			if (e->last_ms >= before_ms || busy(arg, e->id)) {
				p = &e->next;
				continue;
			}
			out[n++] = e->id;
			*p = e->next;
			free(e);
		}
	return n;
}
