/* SPDX-License-Identifier: Apache-2.0 */
/* Clang's thread-safety analysis (-Wthread-safety): which lock guards
 * which field, which functions take, release or need it. The clang build
 * checks them at compile time; with any other compiler they expand to
 * nothing. See clang's ThreadSafetyAnalysis documentation.
 *
 *   CAPABILITY(name)      a type that is a lock (a typedef or struct)
 *   GUARDED_BY(l)         a field read or written only with l held
 *   PT_GUARDED_BY(l)      what a pointer field points to, likewise
 *   ACQUIRE(l)/RELEASE(l) a function that takes/releases l
 *   REQUIRES(l)           a function called with l held
 *   EXCLUDES(l)           a function called without l held
 *   NO_THREAD_SAFETY_ANALYSIS  a function the analysis skips: each use
 *                         says why the access is safe without the lock.
 *
 * In C, GUARDED_BY and PT_GUARDED_BY cannot name a sibling struct member
 * before clang 19 (llvm-project#95455), and later clangs still warn on
 * such a member reached through a pointer (llvm-project#161854): sbx
 * guards struct fields with REQUIRES on the functions that touch them. */
#ifndef SBX_THREAD_SAFETY_H
#define SBX_THREAD_SAFETY_H

#if defined(__clang__)
#define SBX_TSA_(x) __attribute__((x))
#else
#define SBX_TSA_(x)
#endif

#define CAPABILITY(x)		  SBX_TSA_(capability(x))
#define GUARDED_BY(x)		  SBX_TSA_(guarded_by(x))
#define PT_GUARDED_BY(x)	  SBX_TSA_(pt_guarded_by(x))
#define ACQUIRE(...)		  SBX_TSA_(acquire_capability(__VA_ARGS__))
#define RELEASE(...)		  SBX_TSA_(release_capability(__VA_ARGS__))
#define REQUIRES(...)		  SBX_TSA_(requires_capability(__VA_ARGS__))
#define EXCLUDES(...)		  SBX_TSA_(locks_excluded(__VA_ARGS__))
#define NO_THREAD_SAFETY_ANALYSIS SBX_TSA_(no_thread_safety_analysis)

#endif
