/* SPDX-License-Identifier: Apache-2.0 */
/* The run's /out reader: opens beneath /out for a process that has no
 * rights over the sandbox's files.
 *
 * A sandbox's files belong to the run's own host uid (common/host_ids.h),
 * with whatever modes the sandbox gave them: sbxd, which lists, hashes and
 * serves them, is another uid to them. Only a process in the run's user
 * namespace holding CAP_DAC_READ_SEARCH there can open them all, and a
 * process joins a user namespace only while single-threaded, which sbxd is
 * not. So `sbx-helper serve` forks a reader that joins the namespace and
 * answers opens over a SOCK_SEQPACKET socket: sbxd sends /out's fd once,
 * then a path and flags per open, and gets back an errno and, on success,
 * the opened file alongside (SCM_RIGHTS). Reading through an fd checks no
 * permission again, so sbxd reads, hashes and lists with its own code. The
 * reader outlives the sandbox (artifacts stay fetchable until Teardown)
 * and ends when sbxd closes its end.
 *
 * Every open is sbx_open_beneath (no link, never leaving /out), read-only
 * and non-blocking, whatever sbxd asks. */
#ifndef SBX_OUT_READER_H
#define SBX_OUT_READER_H

#include <pthread.h>

#include "err.h"

/* The open flags a request may carry; the reader adds O_RDONLY,
 * O_NONBLOCK, O_NOCTTY and O_CLOEXEC to each. */
#define SBX_OUT_READER_FLAGS O_DIRECTORY
/* How long sbxd waits for one answer: the reader opens on a tmpfs. */
#define SBX_OUT_READER_TIMEOUT_MS 10000

struct sbx_out_reader {
	int sock;
	pthread_mutex_t lock; /* one request in flight: answers carry no id */
};

/* Takes `sock` (sbxd's end) and hands the reader /out's fd (not taken). */
int sbx_out_reader_init(struct sbx_out_reader *r, int sock, int out_fd, struct sbx_err *err);
/* `rel` beneath /out ("" or "." is /out itself): an fd, or -1 with err
 * (err->errnum is the reader's errno for the open itself). */
int sbx_out_reader_open(struct sbx_out_reader *r, const char *rel, int flags, struct sbx_err *err);
/* Closes our end: the reader ends. */
void sbx_out_reader_close(struct sbx_out_reader *r);

/* The reader's side: joins userns_fd's namespace, takes /out's fd from the
 * first packet and answers until the other end closes. Returns only on
 * error (err says why) or end of stream (0). */
int sbx_out_reader_serve(int sock, int userns_fd, struct sbx_err *err);

#endif
