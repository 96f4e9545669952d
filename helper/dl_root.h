/* SPDX-License-Identifier: Apache-2.0 */
/* The helper's libraries loaded on first use rather than linked
 * (sha256_dl.c: libcrypto; idna_dl.c: libidn2): each by the absolute path
 * the build found, never by a search, and only when only root can change
 * it. */
#ifndef SBX_HELPER_DL_ROOT_H
#define SBX_HELPER_DL_ROOT_H

#include <stddef.h>

/* dlopen(path, RTLD_NOW | RTLD_LOCAL) if path and every directory above it
 * are root's and writable by no one else; else NULL with why[0..size)
 * saying what stopped it (as it does when dlopen fails). */
void *sbx_dl_open_root_only(const char *path, char *why, size_t size);

#endif
