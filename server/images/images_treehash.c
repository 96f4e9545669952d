/* SPDX-License-Identifier: Apache-2.0 */
/* (being written: see images_internal.h) */
#include "images_internal.h"
