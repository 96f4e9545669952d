/* SPDX-License-Identifier: Apache-2.0 */
/* A run's own read-only view of a store image: an overlayfs instance whose
 * lower layer is the very tree sbxd verified and holds. */
#ifndef SBX_HELPER_OVERLAY_H
#define SBX_HELPER_OVERLAY_H

#include "err.h"
#include "mount.h"

/* Where the overlay is attached in `scratch` while the sandbox's root is
 * made from it: a name the root's own entries must skip. */
#define SBX_IMAGE_OVERLAY_DIR ".sbx-image-overlay"

/* Makes a new read-only overlay over the directory `img` (an fd, never a
 * path resolved again) and attaches it at scratch/SBX_IMAGE_OVERLAY_DIR;
 * view->mnt is its root. Binds of its entries may be made (open_tree
 * OPEN_TREE_CLONE), then sbx_attach_end(view) takes it out again and
 * leaves nothing in `scratch` (a writable directory of a mount of this
 * mount namespace). Needs /proc to be a procfs that sees this thread (the
 * helper's pid 1 has the host's). */
int sbx_image_overlay(int img, int scratch, struct sbx_attached *view, struct sbx_err *err);

#endif
