#include "fds.h"

#include <stdlib.h>
#include <unistd.h>

static int cmp_int(const void *a, const void *b)
{
	return *(const int *)a - *(const int *)b;
}

void sbx_close_fds_except(int *keep, size_t n)
{
	qsort(keep, n, sizeof(int), cmp_int);
	unsigned lo = 3;
	for (size_t i = 0; i < n; i++) {
		if (keep[i] < (int)lo)
			continue;
		if ((unsigned)keep[i] > lo)
			close_range(lo, (unsigned)keep[i] - 1, 0);
		lo = (unsigned)keep[i] + 1;
	}
	close_range(lo, ~0U, 0);
}
