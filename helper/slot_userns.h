/* SPDX-License-Identifier: Apache-2.0 */
/* `sbx-helper slot-userns UID,GID`: a user namespace for one host uid slot,
 * mapped by newuidmap and newgidmap (0 to this uid, the sandbox user to
 * UID and GID) and handed to sbxd on fd 3, which keeps it for the slot's
 * runs (server/runs/runs_slots.h). sbxd holds the slot's lock meanwhile. */
#ifndef SBX_SLOT_USERNS_H
#define SBX_SLOT_USERNS_H

/* fd 3 is a unix socket: one packet goes back, "Y" with the namespace's fd
 * (SCM_RIGHTS), or why not (no fd). Exit status 0, 1 when it could not
 * make one, 2 on a malformed spec. */
int sbx_slot_userns_main(const char *spec, int sock);

#endif
