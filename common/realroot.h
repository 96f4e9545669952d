/* SPDX-License-Identifier: Apache-2.0 */
/* Real root: uid 0 in the initial user namespace, where the identity map
 * covers every uid. Root inside some other user namespace is just a user.
 * sbx-helper and sbxd refuse real root unless told: it weakens every
 * guarantee of the sandbox. */
#ifndef SBX_REALROOT_H
#define SBX_REALROOT_H

#include <stdbool.h>

bool sbx_is_real_root(void);

#endif
