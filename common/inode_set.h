/* SPDX-License-Identifier: Apache-2.0 */
/* A set of (device, inode) pairs, each with a value: how a walk of a tree
 * someone else controls meets a file with many names (hard links) once.
 * Open addressing, so a lookup costs the same with 65,000 links as with 2. */
#ifndef SBX_INODE_SET_H
#define SBX_INODE_SET_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct sbx_inode_slot;
struct sbx_inode_set {
	struct sbx_inode_slot *slots;
	size_t cap; /* a power of two, or 0 */
	size_t n;
};

/* The value stored for (dev, ino), or -1 when the pair is not in the set. */
long sbx_inode_get(const struct sbx_inode_set *s, dev_t dev, ino_t ino);
/* Adds (dev, ino) with value; false when out of memory. */
bool sbx_inode_put(struct sbx_inode_set *s, dev_t dev, ino_t ino, long value);
void sbx_inode_set_free(struct sbx_inode_set *s);

#endif
