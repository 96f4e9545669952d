/* SPDX-License-Identifier: Apache-2.0 */
/* One HelperMessage per SOCK_SEQPACKET packet, fds alongside by SCM_RIGHTS.
 * Shared by sbx-helper and sbxd, the two ends of the helper protocol; the
 * framing half of its module (helper_client.h is the client half; both
 * name everything sbx_ctl_ / SBX_CTL_). */
#ifndef SBX_CTLMSG_H
#define SBX_CTLMSG_H

#include <stddef.h>
#include <sys/types.h>

#include "err.h"
#include "sbx/v1/helper.pb-c.h"

#define SBX_CTL_MAX_BYTES (320 * 1024) /* the API allows 256 KiB of argv, plus framing */
#define SBX_CTL_MAX_FDS	  4

/* Carried in Ready. Both ends ship together, and the receiver (sbxd, or
 * sbx-helper's one-shot driver) refuses a pid 1 of another version rather
 * than misreading it: bump it with any change to what a message means or
 * to how many fds it carries. */
#define SBX_CTL_PROTOCOL_VERSION 2

/* How many fds msg carries alongside (SCM_RIGHTS), from the one table
 * (ctlmsg.c) that sbx_ctl_send and sbx_ctl_recv both hold packets to. */
void sbx_ctl_fds_expected(const Sbx__V1__HelperMessage *msg, size_t *min, size_t *max);

int sbx_ctl_send(int sock, const Sbx__V1__HelperMessage *msg, const int *fds, size_t nfds,
		 struct sbx_err *err);

/* Returns 1 with *msg set (free with sbx__v1__helper_message__free_unpacked),
 * 0 at end of stream, -1 on error. Received fds are close-on-exec; a packet
 * with more than `maxfds` fds, or another count than its message carries
 * (sbx_ctl_fds_expected), or a truncated one, is an error and its fds are
 * closed. */
int sbx_ctl_recv(int sock, Sbx__V1__HelperMessage **msg, int *fds, size_t *nfds, size_t maxfds,
		 struct sbx_err *err);

void sbx_close_fds(int *fds, size_t n);

/* One packet with at most SBX_CTL_MAX_FDS fds alongside (SCM_RIGHTS), for
 * the helper protocol and exec init's report socket (helper/exec.c).
 * sendmsg's result (MSG_NOSIGNAL; EINTR retried). */
ssize_t sbx_fd_sendmsg(int sock, const void *buf, size_t len, const int *fds, size_t nfds);
/* recvmsg's result, the fds that came (close-on-exec) in fds[0..*nfds)
 * and msg_flags in *flags (MSG_CTRUNC: more fds came than fit, and those
 * the kernel closed). EINTR retried. */
ssize_t sbx_fd_recvmsg(int sock, void *buf, size_t len, int fds[SBX_CTL_MAX_FDS], size_t *nfds,
		       int *flags);

#endif
