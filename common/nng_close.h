/* SPDX-License-Identifier: Apache-2.0 */
/* nng 1.5.2 can hang in nng_close (nanomsg/nng#1543, #1813), on the
 * server and on the client side alike. sbxd and libsbxclient close their
 * sockets through this, bounded. Compiled into each of them (sbx-helper,
 * which has no nng, does not get it). */
#ifndef SBX_NNG_CLOSE_H
#define SBX_NNG_CLOSE_H

#include <stdbool.h>

#include <nng/nng.h>

/* Closes sock on a thread and waits at most timeout_ms. false: it is still
 * closing; the thread is detached and the socket's resources are left to
 * it (whatever the socket uses must then not be freed). */
bool sbx_nng_close_bounded(nng_socket sock, int timeout_ms);

#endif
