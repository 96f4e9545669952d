/* SPDX-License-Identifier: Apache-2.0 */
/* sbx-policy-reference: prints docs/reference/policy-ranges.md from the
 * policy's range table (policy_ranges.h), the rows policy.c validates
 * with. Built, not installed; docs.policy_reference compares. */
#include <stdio.h>

#include "policy_ranges.h"

int main(int argc, char **argv)
{
	(void)argv;
	if (argc != 1) {
		fputs("usage: sbx-policy-reference > docs/reference/policy-ranges.md\n", stderr);
		return 2;
	}
	sbx_policy_print_ranges(stdout);
	return fflush(stdout) == 0 ? 0 : 1;
}
