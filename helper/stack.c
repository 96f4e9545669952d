/* SPDX-License-Identifier: Apache-2.0 */
#include "stack.h"

#include <stdint.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#ifdef SBX_STACK_PROBE_GUARD
_Static_assert(SBX_STACK_GUARD >= SBX_STACK_PROBE_GUARD,
	       "a stack's guard must be at least the compiler's probe interval");
#endif

/* Room for a stack, without access yet, at a random place of its own:
 * where the kernel would put it, next below the libraries, one address
 * known would tell the other (a main stack is placed apart from them;
 * review 39). An address between 1/128 and 1/2 of where the caller's stack
 * lies: from the main stack, on x86-64 with 47-bit addresses, ~1 to ~64
 * TiB, below a PIE and its heap near 85 TiB and the libraries near 127
 * TiB (on a smaller address space, as arm64's 39 bits, the range shrinks
 * with it); from a stack of these (exec init spawning a command runs on
 * its copy of the joiner's), lower again, as low as some GiB (review 41).
 * Never over a mapping (MAP_FIXED_NOREPLACE: a kernel older than 4.17
 * takes the address as a hint), a few tries, then the kernel's own
 * choice. */
static void *room(size_t len)
{
	const uint64_t hi = (uint64_t)(uintptr_t)__builtin_frame_address(0) / 2, lo = hi / 64,
		       page = (uint64_t)getpagesize();
	for (int i = 0; hi - lo > len && i < 4; i++) {
		uint64_t r;
		if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r))
			break;
		void *want = (void *)(uintptr_t)((lo + r % (hi - lo - len)) & ~(page - 1));
		void *p = mmap(want, len, PROT_NONE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK |
				   MAP_FIXED_NOREPLACE,
			       -1, 0);
		if (p != MAP_FAILED)
			return p;
	}
	return mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK,
		    -1, 0);
}

int sbx_stack_map(size_t size, struct sbx_stack *st)
{
	*st = (struct sbx_stack){0};
	/* Mapped without access, then the stack made writable, so that only
	 * the stack is committed (the guard stays out of a strict
	 * overcommit's count). */
	char *map = room(SBX_STACK_GUARD + size);
	if (map == MAP_FAILED)
		return -1;
	if (mprotect(map + SBX_STACK_GUARD, size, PROT_READ | PROT_WRITE) < 0) {
		munmap(map, SBX_STACK_GUARD + size);
		return -1;
	}
	*st = (struct sbx_stack){
	    .map = map, .len = SBX_STACK_GUARD + size, .top = map + SBX_STACK_GUARD + size};
	return 0;
}

void sbx_stack_unmap(struct sbx_stack *st)
{
	if (st->map)
		munmap(st->map, st->len);
	*st = (struct sbx_stack){0};
}
