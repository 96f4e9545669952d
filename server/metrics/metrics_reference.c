/* SPDX-License-Identifier: Apache-2.0 */
/* sbxd-metrics-reference: prints the table of docs/operator/metrics.md
 * from the metrics table (metrics.c), the same rows sbxd serves. Built, not
 * installed; tests/docs/generated.py compares its output with the part of
 * the committed page between its markers (docs.metrics_reference). */
#include <stdio.h>

#include "metrics.h"

int main(int argc, char **argv)
{
	(void)argv;
	if (argc != 1) {
		fputs("usage: sbxd-metrics-reference > (the table of docs/operator/metrics.md)\n",
		      stderr);
		return 2;
	}
	sbx_metrics_print_reference(stdout);
	return fflush(stdout) == 0 ? 0 : 1;
}
