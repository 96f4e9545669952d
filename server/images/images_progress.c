/* SPDX-License-Identifier: Apache-2.0 */
/* Progress lines for the operator: formatted once here, so a sink (the
 * CLI's stderr, a test's buffer) only ever gets a finished line. */
#include <stdarg.h>
#include <stdio.h>

#include "images_internal.h"

void img_say(const struct img_progress *p, const char *fmt, ...)
{
	char line[1024];
	va_list ap;

	if (!p || !p->line)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	p->line(p->arg, "%s", line);
}
