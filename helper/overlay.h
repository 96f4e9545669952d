/* SPDX-License-Identifier: Apache-2.0 */
/* A run's own read-only view of a store image: an overlayfs instance whose
 * lower layer is the very tree sbxd verified and holds. */
#ifndef SBX_HELPER_OVERLAY_H
#define SBX_HELPER_OVERLAY_H

#include "err.h"

/* Returns the fd of a new, detached, read-only overlay mount over the
 * directory `img` (an fd, never a path resolved again). `scratch` is a
 * writable directory of a mount attached in this mount namespace, where an
 * empty layer is attached while the overlay is made and removed before
 * this returns (nothing is left in it). Needs /proc to be a procfs that
 * sees this thread (the helper's pid 1 has the host's). */
int sbx_image_overlay(int img, int scratch, struct sbx_err *err);

#endif
