/* SPDX-License-Identifier: Apache-2.0 */
#include "inode_set.h"

#include <stdint.h>
#include <stdlib.h>

struct sbx_inode_slot {
	dev_t dev;
	ino_t ino;
	long value; /* -1: empty */
};

static size_t slot_of(size_t cap, dev_t dev, ino_t ino)
{
	uint64_t h =
	    ((uint64_t)ino * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)dev * 0xff51afd7ed558ccdull);

	return (size_t)(h ^ (h >> 29)) & (cap - 1);
}

long sbx_inode_get(const struct sbx_inode_set *s, dev_t dev, ino_t ino)
{
	if (!s->cap)
		return -1;
	for (size_t i = slot_of(s->cap, dev, ino);; i = (i + 1) & (s->cap - 1)) {
		const struct sbx_inode_slot *p = &s->slots[i];

		if (p->value < 0)
			return -1;
		if (p->dev == dev && p->ino == ino)
			return p->value;
	}
}

static void insert(struct sbx_inode_slot *slots, size_t cap, dev_t dev, ino_t ino, long value)
{
	size_t i = slot_of(cap, dev, ino);

	while (slots[i].value >= 0 && !(slots[i].dev == dev && slots[i].ino == ino))
		i = (i + 1) & (cap - 1);
	slots[i] = (struct sbx_inode_slot){dev, ino, value};
}

bool sbx_inode_put(struct sbx_inode_set *s, dev_t dev, ino_t ino, long value)
{
	if (value < 0)
		return false;
	/* At most half full, so a probe ends soon. */
	if (2 * (s->n + 1) > s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 64;
		struct sbx_inode_slot *n = malloc(cap * sizeof(*n));

		if (!n)
			return false;
		for (size_t i = 0; i < cap; i++)
			n[i].value = -1;
		for (size_t i = 0; i < s->cap; i++)
			if (s->slots[i].value >= 0)
				insert(n, cap, s->slots[i].dev, s->slots[i].ino, s->slots[i].value);
		free(s->slots);
		s->slots = n;
		s->cap = cap;
	}
	if (sbx_inode_get(s, dev, ino) < 0)
		s->n++;
	insert(s->slots, s->cap, dev, ino, value);
	return true;
}

void sbx_inode_set_free(struct sbx_inode_set *s)
{
	free(s->slots);
	*s = (struct sbx_inode_set){0};
}
