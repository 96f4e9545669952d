/* Closing every inherited fd but a few, so nothing the helper held reaches
 * pid 1 or a command. */
#ifndef SBX_FDS_H
#define SBX_FDS_H

#include <stddef.h>

/* Closes every fd from 3 up except those in keep (which is sorted). */
void sbx_close_fds_except(int *keep, size_t n);

#endif
