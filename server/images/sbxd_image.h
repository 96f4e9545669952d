/* SPDX-License-Identifier: Apache-2.0 */
/* `sbxd image ...`: the image store's command line (import, list, inspect,
 * rm), run by sbxd's user on the host. There is no RPC for it: import needs
 * the files on this host anyway, and the RPC has no administrator identity
 * to allow it to (Health lists the store's pins). */
#ifndef SBX_SBXD_IMAGE_H
#define SBX_SBXD_IMAGE_H

/* argv[0] is "image"; returns the exit status: 0, 1 (an error), 2 (usage). */
int sbxd_image_main(int argc, char **argv);

#endif
