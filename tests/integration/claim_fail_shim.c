// SPDX-License-Identifier: Apache-2.0
/* Preloaded into `sbx-helper serve` by helper.serve's dropped-claim check:
 * the first memfd a process makes for a claim ("sbx-claim", helper/exec.c
 * sbx_exec_claim) fails EMFILE, as it would with pid 1 at its descriptor
 * limit, so that pid 1's claim of the init it made ahead fails and that
 * init is dropped. Every other memfd, and every later claim, is made. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <string.h>
#include <sys/mman.h>

int memfd_create(const char *name, unsigned int flags)
{
	static int failed;
	static int (*real)(const char *, unsigned int);
	if (!failed && name && !strcmp(name, "sbx-claim")) {
		failed = 1;
		errno = EMFILE;
		return -1;
	}
	if (!real)
		real = (int (*)(const char *, unsigned int))dlsym(RTLD_NEXT, "memfd_create");
	return real ? real(name, flags) : -1;
}
