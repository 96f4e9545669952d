/* SPDX-License-Identifier: Apache-2.0 */
/* PutInput and FetchArtifact move files in 1 MiB chunks, and each chunk
 * passes through a few 1 MiB buffers. glibc serves blocks that size with a
 * fresh mmap and unmaps them on free, so every chunk costs page faults and
 * TLB shootdowns, which are expensive on virtual machines (docs/dev/
 * benchmarks.md: FetchArtifact over ipc went from ~70 to ~300 MiB/s). Raising
 * the thresholds keeps such buffers in the heap, to be reused; the price is
 * a few MiB that stay resident. For programs (sbxd, sbx, benchmarks), never
 * for the library. */
#ifndef SBX_CHUNK_MALLOC_H
#define SBX_CHUNK_MALLOC_H

#include <malloc.h>

static inline void sbx_malloc_reuse_chunks(void)
{
	mallopt(M_MMAP_THRESHOLD, 8 << 20);
	mallopt(M_TRIM_THRESHOLD, 64 << 20);
}

#endif
