/* SPDX-License-Identifier: Apache-2.0 */
/* IDNA for host names (hostname.c): libidn2's UTS #46 non-transitional
 * mapping of a name with a byte outside ASCII to its A-labels. idna.c links
 * libidn2 (sbxd, the clients, the tests); sbx-helper has its own definition
 * that loads it on the first such name (helper/idna_dl.c): mapping libidn2
 * and the libunistring it needs costs every helper exec about 0.3 ms, and
 * the policies a helper reads almost never hold such a name (sbxd hands it
 * its policy with every host in A-labels already). */
#ifndef SBX_IDNA_H
#define SBX_IDNA_H

#include "err.h"

/* The A-label form of the NUL-terminated UTF-8 name utf8 (NFC input,
 * non-transitional), malloc()ed into *alabels. -1 with err "invalid IDNA
 * name: <libidn2's reason>", or why libidn2 could not be loaded. */
int sbx_idna_to_ascii(const char *utf8, char **alabels, struct sbx_err *err);

#endif
