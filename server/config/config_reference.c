/* SPDX-License-Identifier: Apache-2.0 */
/* sbxd-config-reference: prints docs/reference/config.md from the config
 * key tables (config_keys.h), the same rows sbxd parses and defaults
 * with. Built, not installed; tests/docs/generated.py compares its output
 * with the committed page (docs.config_reference). */
#include <stdio.h>

#include "config_keys.h"

int main(int argc, char **argv)
{
	(void)argv;
	if (argc != 1) {
		fputs("usage: sbxd-config-reference > docs/reference/config.md\n", stderr);
		return 2;
	}
	sbx_config_print_reference(stdout);
	return fflush(stdout) == 0 ? 0 : 1;
}
