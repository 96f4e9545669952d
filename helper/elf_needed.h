/* SPDX-License-Identifier: Apache-2.0 */
/* The DT_NEEDED names of a shared object, read from its file: nothing of
 * it is mapped or run. For idna_dl.c, which loads each library libidn2
 * needs by its path instead of letting the dynamic linker search. */
#ifndef SBX_HELPER_ELF_NEEDED_H
#define SBX_HELPER_ELF_NEEDED_H

#include <stddef.h>

#include "err.h"

#define SBX_ELF_NEEDED_MAX	16  /* names a library may need here */
#define SBX_ELF_NEEDED_NAME_MAX 128 /* bytes of one, its NUL included */

/* The DT_NEEDED entries of the ELF file at path (of this machine's class
 * and byte order) into names[0..*n): each a plain file name (no '/', not
 * "." or ".."). -1 with err naming the file and what is wrong with it:
 * not such an ELF file, no dynamic section, more than SBX_ELF_NEEDED_MAX
 * names, a name too long or not a plain name. */
int sbx_elf_needed(const char *path, char names[][SBX_ELF_NEEDED_NAME_MAX], size_t *n,
		   struct sbx_err *err);

#endif
