/* SPDX-License-Identifier: Apache-2.0 */
/* The helper's libraries loaded on first use rather than linked
 * (sha256_dl.c: libcrypto; idna_dl.c: libidn2): each by the absolute path
 * the build found, never by a search, and only when only root can change
 * it. */
#ifndef SBX_HELPER_DL_ROOT_H
#define SBX_HELPER_DL_ROOT_H

#include <stddef.h>

#include <limits.h>
#include <stdbool.h>

/* Whether path, links resolved into real, and every directory above it are
 * root's and writable by no one else; else false with why[0..size) saying
 * what is not. Then nobody but root can change what real names. */
bool sbx_dl_root_only(const char *path, char real[PATH_MAX], char *why, size_t size);

/* dlopen(real, RTLD_NOW | RTLD_LOCAL) of a path sbx_dl_root_only passed;
 * NULL with why[0..size) saying why not. */
void *sbx_dl_open_checked(const char *real, char *why, size_t size);

/* The two: dlopen of the resolved path if sbx_dl_root_only passes it. */
void *sbx_dl_open_root_only(const char *path, char *why, size_t size);

#endif
