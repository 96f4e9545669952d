/* What every handler shares with the RPC layer: setting the call's status. */
#include <stdarg.h>
#include <stdio.h>

#include "service.h"

int sbx_status_set(struct sbx_status *st, Sbx__V1__Code code, const char *fmt, ...)
{
	va_list ap;

	st->code = code;
	va_start(ap, fmt);
	vsnprintf(st->message, sizeof(st->message), fmt, ap);
	va_end(ap);
	return -1;
}
