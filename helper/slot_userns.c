/* SPDX-License-Identifier: Apache-2.0 */
/* Made here and not in sbxd: a process in the new namespace is needed for
 * the tools to map, which in sbxd (many threads) would be a raw clone whose
 * child may touch no lock of the C library; the tools' exits are reaped by
 * whoever started them, which sbxd cannot be if it was started with SIGCHLD
 * ignored; a helper is what AppArmor's profile lets make user namespaces
 * (packaging/apparmor/sbx-helper); and sbxd bounds the helper's time and
 * kills its process group, tools included, when they hang. */
#include "slot_userns.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ctlmsg.h"
#include "host_ids.h"
#include "util.h"

/* A child born in a new user namespace (it holds it while the tools map
 * it and we open it), which ends when `hold` reaches its end: when we close
 * our end, or die. */
static pid_t holder_start(int hold[2])
{
	pid_t pid = (pid_t)syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, NULL, NULL, NULL, NULL);
	if (pid == 0) {
		char byte;
		close(hold[1]);
		while (read(hold[0], &byte, 1) < 0 && errno == EINTR)
			;
		_exit(0);
	}
	return pid;
}

static int make(const struct sbx_host_ids *ids, struct sbx_err *err)
{
	_cleanup_close_pair_ int hold[2] = SBX_PAIR_INIT;
	if (pipe2(hold, O_CLOEXEC) < 0)
		return sbx_fail_errno(err, "pipe");
	pid_t pid = holder_start(hold);
	if (pid < 0)
		return sbx_fail_errno(err, "a new user namespace for host uid %u",
				      (unsigned)ids->uid);
	close(sbx_steal_fd(hold[0]));
	int fd = -1;
	if (sbx_host_ids_map(pid, ids, SBX_SANDBOX_UID, err) == 0) {
		char path[64];
		snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			sbx_fail_errno(err, "open %s", path);
	}
	close(sbx_steal_fd(hold[1]));
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
	return fd;
}

int sbx_slot_userns_main(const char *spec, int sock)
{
	struct sbx_host_ids ids;
	struct sbx_err err;
	int rc = 1;
	_cleanup_close_ int fd = -1;
	if (sbx_host_ids_pair_parse(spec, &ids) < 0) {
		sbx_fail(&err, "slot-userns %s: must be UID,GID (two ids above 0)", spec);
		rc = 2;
	} else {
		fd = make(&ids, &err);
	}
	if (fd >= 0 && sbx_fd_sendmsg(sock, "Y", 1, &fd, 1) == 1)
		return 0;
	if (fd >= 0)
		sbx_fail_errno(&err, "slot-userns: sending the namespace");
	fprintf(stderr, "sbx-helper: %s\n", err.msg);
	if (sbx_fd_sendmsg(sock, err.msg, strlen(err.msg), NULL, 0) < 0) {
		/* sbxd is gone or closed: stderr said it. */
	}
	return rc;
}
