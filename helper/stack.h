/* SPDX-License-Identifier: Apache-2.0 */
/* Stacks the helper maps for children that share its memory until they
 * exec or exit (the slot's joiner, a command's spawn), each over a guard.
 *
 * The helper's own code is compiled to probe its stack only every
 * SBX_STACK_PROBE_GUARD bytes (GCC's stack-clash-protection-guard-size,
 * helper/CMakeLists.txt): a frame smaller than that cannot jump a guard at
 * least as large, and every stack the helper's code runs on has one: the
 * main thread's (the kernel keeps stack_guard_gap free below it: 1 MiB
 * unless the kernel was booted with a smaller `stack_guard_gap=`, which
 * docs/operator/known-limits.md asks not to set below 16 pages), and
 * these (SBX_STACK_GUARD, checked against the probe interval at compile
 * time in stack.c). Never a thread's: glibc gives one a guard of a page,
 * so the helper has none (layout.helper_single_threaded), and the library
 * this is part of (sbx_helper_parts) is for single-threaded programs. */
#ifndef SBX_STACK_H
#define SBX_STACK_H

#include <stddef.h>

#define SBX_STACK_GUARD (256 << 10)

struct sbx_stack {
	char *map;  /* the guard, then the stack; NULL when none */
	size_t len; /* of the whole mapping */
	char *top;  /* where the stack starts (it grows down) */
};

/* Maps `size` bytes of stack (a multiple of the page size) over a guard
 * of SBX_STACK_GUARD bytes, at a random address of its own. Returns 0, or
 * -1 with errno set. */
int sbx_stack_map(size_t size, struct sbx_stack *st);
void sbx_stack_unmap(struct sbx_stack *st);

#endif
