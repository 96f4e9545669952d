/* SPDX-License-Identifier: Apache-2.0 */
/* What a shared object needs and what it calls itself, read from its file:
 * nothing of it is mapped or run. For idna_dl.c, which loads each library
 * libidn2 needs by its path instead of letting the dynamic linker search. */
#ifndef SBX_HELPER_ELF_NEEDED_H
#define SBX_HELPER_ELF_NEEDED_H

#include <stddef.h>

#include "err.h"

#define SBX_ELF_NEEDED_MAX	16  /* names a library may need here */
#define SBX_ELF_NEEDED_NAME_MAX 128 /* bytes of one, its NUL included */

struct sbx_elf_deps {
	char soname[SBX_ELF_NEEDED_NAME_MAX];			  /* DT_SONAME, "" without one */
	char needed[SBX_ELF_NEEDED_MAX][SBX_ELF_NEEDED_NAME_MAX]; /* DT_NEEDED */
	size_t n_needed;
};

/* The dynamic section of the ELF file open at fd (what names it in errors),
 * found as the dynamic linker finds it (PT_DYNAMIC's address, through the
 * PT_LOAD segment that holds it), of this machine's class, byte order and
 * architecture: DT_SONAME and the DT_NEEDED names, each a plain file name
 * (no '/', not "." or ".."). -1 with err naming the file and what is wrong:
 * not such a file, no dynamic section in it, a DT_FILTER or DT_AUXILIARY
 * (libraries the dynamic linker would search for), more than
 * SBX_ELF_NEEDED_MAX names, a name too long, not within the string table
 * or not a plain name. */
int sbx_elf_deps_fd(int fd, const char *what, struct sbx_elf_deps *d, struct sbx_err *err);
/* The same, of the file at path. */
int sbx_elf_deps(const char *path, struct sbx_elf_deps *d, struct sbx_err *err);

#endif
