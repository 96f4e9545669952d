/* SPDX-License-Identifier: Apache-2.0 */
/* The stacks the helper maps for children that share its memory
 * (helper/stack.c): a guard without access below each, at an address of
 * its own; and, compiled as the helper's code is (its probe interval),
 * a frame larger than the stack and its guard together dies on the guard
 * instead of writing into the mapping below it. */
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "sanitized.h"
#include "stack.h"

/* The permissions /proc/self/maps gives the mapping holding addr. */
static int perms_at(const void *addr, char perms[5])
{
	FILE *f = fopen("/proc/self/maps", "re");
	if (!f)
		return -1;
	char line[512];
	int rc = -1;
	while (rc < 0 && fgets(line, sizeof(line), f)) {
		uintptr_t lo, hi;
		if (sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) == 3 && (uintptr_t)addr >= lo &&
		    (uintptr_t)addr < hi)
			rc = 0;
	}
	fclose(f);
	return rc;
}

enum { STACK = 128 << 10, FRAME = 512 << 10 };

/* The probe interval this file was compiled with (GCC, through
 * sbx_helper_stack_probes); clang has no such setting and probes every
 * page, so there the frames below stop at the guard too. */
#ifndef SBX_STACK_PROBE_GUARD
#define SBX_STACK_PROBE_GUARD 65536
#endif
/* Just under it: GCC leaves such a frame unprobed. */
#define SMALL_FRAME (SBX_STACK_PROBE_GUARD - 4096)

/* A frame whose first write is at its lowest address. Its address is
 * handed to nothing the compiler can see through, so that the whole frame
 * is allocated as the code says. */
#define FRAME_BODY(n)                                                                              \
	char frame[n];                                                                             \
	__asm__ volatile("" : : "r"(frame) : "memory");                                            \
	((volatile char *)frame)[0] = 1;                                                           \
	*out = ((volatile char *)frame)[(n)-1]

/* Larger than STACK + SBX_STACK_GUARD: its first write lies below the
 * guard, and only the probes can stop it there. */
__attribute__((noinline)) static void big_frame(volatile char *out)
{
	FRAME_BODY(FRAME);
}

/* Unprobed: on a stack of one page, only a guard at least as large as the
 * probe interval stops its first write (review 41: the big frame alone
 * passed with a guard of 4 KiB). */
__attribute__((noinline)) static void small_frame(volatile char *out)
{
	FRAME_BODY(SMALL_FRAME);
}

static int on_stack(void *arg)
{
	big_frame(arg);
	return 0;
}

static int on_small_stack(void *arg)
{
	small_frame(arg);
	return 0;
}

/* Runs fn on a stack of `size` bytes with a writable mapping of 1 MiB
 * right below its guard; whether the child died of SIGSEGV, and how many
 * bytes of that mapping it wrote. */
static int run_below_guard(size_t size, int (*fn)(void *), size_t *written)
{
	const size_t below = 1 << 20;
	struct sbx_stack st;
	char *victim = MAP_FAILED;
	for (int i = 0; i < 16 && victim == MAP_FAILED; i++) {
		if (sbx_stack_map(size, &st) < 0)
			return -1;
		victim = mmap(st.map - below, below, PROT_READ | PROT_WRITE,
			      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
		if (victim != MAP_FAILED && victim != st.map - below) {
			munmap(victim, below);
			victim = MAP_FAILED;
		}
		if (victim == MAP_FAILED)
			sbx_stack_unmap(&st);
	}
	if (victim == MAP_FAILED)
		return -1;
	volatile char sink = 0;
	pid_t pid = clone(fn, st.top, CLONE_VM | CLONE_VFORK | SIGCHLD, (void *)&sink);
	int status = 0;
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		status = -1;
	*written = 0;
	for (size_t i = 0; i < below; i++)
		*written += victim[i] != 0;
	munmap(victim, below);
	sbx_stack_unmap(&st);
	return status >= 0 && WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV;
}

int main(void)
{
	struct sbx_stack st;
	char perms[5];
	check(sbx_stack_map(STACK, &st) == 0, "a stack of 128 KiB is mapped");
	check(st.len == SBX_STACK_GUARD + STACK && st.top == st.map + st.len,
	      "its top is the mapping's end, the guard below the stack");
	check(perms_at(st.map, perms) == 0 && strcmp(perms, "---p") == 0 &&
		  perms_at(st.map + SBX_STACK_GUARD - 1, perms) == 0 && strcmp(perms, "---p") == 0,
	      "the guard's first and last byte have no access (%s)", perms);
	check(perms_at(st.map + SBX_STACK_GUARD, perms) == 0 && strcmp(perms, "rw-p") == 0 &&
		  perms_at(st.top - 1, perms) == 0 && strcmp(perms, "rw-p") == 0,
	      "the stack is readable and writable from the guard to its top (%s)", perms);

	/* Placed apart from the libraries and from one another. */
	uintptr_t here = (uintptr_t)__builtin_frame_address(0);
	struct sbx_stack other;
	int in_range = 0, apart = 0;
	for (int i = 0; i < 8; i++) {
		if (sbx_stack_map(STACK, &other) < 0)
			break;
		in_range += (uintptr_t)other.map >= here / 128 && (uintptr_t)other.top <= here / 2;
		apart += other.map != st.map;
		sbx_stack_unmap(&other);
	}
	check(in_range == 8 && apart == 8,
	      "eight more stacks lie between 1/128 and 1/2 of our own stack's address, each "
	      "elsewhere (%d, %d)",
	      in_range, apart);

	/* A sanitizer's handler reports a SEGV and exits, and its frames are
	 * its own: the rest is for the build the helper ships. */
	if (SBX_SANITIZED) {
		printf("# sanitized build: the frame against the guard is not tried\n");
		sbx_stack_unmap(&st);
		return check_done();
	}
	sbx_stack_unmap(&st);
	size_t written;
	int died = run_below_guard(STACK, on_stack, &written);
	check(died == 1 && written == 0,
	      "a %d KiB frame on a %d KiB stack, a mapping right below its guard: the child dies "
	      "of SIGSEGV (%d) and writes nothing there (%zu bytes)",
	      FRAME >> 10, STACK >> 10, died, written);
	died = run_below_guard(4096, on_small_stack, &written);
	check(died == 1 && written == 0,
	      "a %d KiB frame, just under the probe interval, on a one-page stack: SIGSEGV (%d), "
	      "nothing written below the guard (%zu bytes)",
	      SMALL_FRAME >> 10, died, written);
	check(st.map == NULL, "an unmapped stack is forgotten");
	return check_done();
}
