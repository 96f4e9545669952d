/* SPDX-License-Identifier: Apache-2.0 */
/* sbx-helper's reading of a library's dynamic section
 * (helper/elf_needed.h), which decides what it loads before libidn2: the
 * input is the whole file, in a memfd. Properties: a parse that succeeds
 * gives at most SBX_ELF_NEEDED_MAX names and a soname, each NUL-ended
 * within its buffer, plain (no '/', not "." or "..") and not empty but for
 * a missing soname; one that fails gives none and says which file. */
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "elf_needed.h"
#include "fuzz.h"

static bool plain(const char *name, bool may_be_empty)
{
	if (!memchr(name, '\0', SBX_ELF_NEEDED_NAME_MAX))
		return false;
	if (!name[0])
		return may_be_empty;
	return !strchr(name, '/') && strcmp(name, ".") && strcmp(name, "..");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int fd = -1;
	static struct sbx_elf_deps d;
	struct sbx_err err;

	if (fd < 0)
		fd = memfd_create("elf", MFD_CLOEXEC);
	FUZZ_ASSERT(fd >= 0, "memfd_create");
	FUZZ_ASSERT(ftruncate(fd, 0) == 0 && pwrite(fd, data, size, 0) == (ssize_t)size,
		    "the input into the memfd");
	if (sbx_elf_deps_fd(fd, "input", &d, &err) < 0) {
		FUZZ_ASSERT(d.n_needed == 0, "a refused file gave %zu names", d.n_needed);
		FUZZ_ASSERT(strstr(err.msg, "input"), "the error names the file: %s", err.msg);
		return 0;
	}
	FUZZ_ASSERT(d.n_needed <= SBX_ELF_NEEDED_MAX, "%zu names", d.n_needed);
	FUZZ_ASSERT(plain(d.soname, true), "a soname not plain");
	for (size_t i = 0; i < d.n_needed; i++)
		FUZZ_ASSERT(plain(d.needed[i], false), "name %zu not plain", i);
	return 0;
}
