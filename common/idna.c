/* SPDX-License-Identifier: Apache-2.0 */
/* sbx_idna_to_ascii (idna.h) with libidn2 linked. Alone in its file: the
 * helper defines the function itself (helper/idna_dl.c), so this object is
 * never pulled from libsbx_common.a into it, and nothing there references
 * libidn2. */
#include "idna.h"

#include <idn2.h>

int sbx_idna_to_ascii(const char *utf8, char **alabels, struct sbx_err *err)
{
	int rc = idn2_to_ascii_8z(utf8, alabels, IDN2_NFC_INPUT | IDN2_NONTRANSITIONAL);

	if (rc != IDN2_OK)
		return sbx_fail(err, "invalid IDNA name: %s", idn2_strerror(rc));
	return 0;
}
