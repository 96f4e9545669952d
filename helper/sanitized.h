/* SPDX-License-Identifier: Apache-2.0 */
/* Whether this build runs under AddressSanitizer or ThreadSanitizer.
 *
 * A sanitizer's runtime keeps its bookkeeping in the process's memory and
 * knows of fork, not of a child sharing that memory: in a CLONE_VM child
 * ThreadSanitizer's clone() did its fork bookkeeping as the parent's (race
 * detection then stayed off in the parent for good, and a deferred signal
 * handler never ran again), and AddressSanitizer took the child's own stack
 * for a switch it cannot follow (a warning on stderr, which sbxd shows as
 * the run's alerts, then false reports). And LeakSanitizer checks at exit(),
 * never at _exit(). So where the helper shares its memory with a child or
 * ends by _exit for speed, a sanitized build forks, or frees and returns,
 * instead: slower, the same results. */
#ifndef SBX_SANITIZED_H
#define SBX_SANITIZED_H

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define SBX_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define SBX_SANITIZED 1
#endif
#endif
#ifndef SBX_SANITIZED
#define SBX_SANITIZED 0
#endif

#endif
