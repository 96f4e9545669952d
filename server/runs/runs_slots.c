/* SPDX-License-Identifier: Apache-2.0 */
#include "runs_slots.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/pidfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <linux/nsfs.h>

#include "clock.h"
#include "ctlmsg.h"
#include "runs_proc.h"
#include "util.h"

/* newuidmap and newgidmap take milliseconds; within Ready's 15 s and the
 * drain's 5 s beyond it (runs.c DRAIN_WAIT_MS) whatever they wait for. */
#define SLOT_USERNS_TIMEOUT_MS 4000
#define SLOT_USERNS_EXIT_MS    500

struct slot_userns {
	uid_t uid; /* the slot's host uid and gid, as the tools mapped them */
	gid_t gid;
	int fd;	       /* the namespace (/proc/PID/ns/user of its maker) */
	uint64_t used; /* when it was last taken, in takes */
};

struct runs_slots {
	pthread_mutex_t mu; /* leaf: the rest */
	size_t keep, n;
	uint64_t takes;
	struct slot_userns *kept;
};

struct runs_slots *runs_slots_new(size_t keep)
{
	struct runs_slots *slots = calloc(1, sizeof(*slots));
	if (!slots)
		return NULL;
	slots->keep = keep ? keep : 1;
	slots->kept = calloc(slots->keep, sizeof(*slots->kept));
	if (!slots->kept) {
		free(slots);
		return NULL;
	}
	pthread_mutex_init(&slots->mu, NULL);
	return slots;
}

void runs_slots_free(struct runs_slots *slots)
{
	if (!slots)
		return;
	for (size_t i = 0; i < slots->n; i++)
		close(slots->kept[i].fd);
	pthread_mutex_destroy(&slots->mu);
	free(slots->kept);
	free(slots);
}

/* What the answer was, in words, when it was not one user namespace. */
static void answer_error(const struct sbx_host_ids *ids, const char *spec, ssize_t n,
			 const char *said, size_t nfds, int flags, bool timed_out, int status,
			 bool reaped, struct sbx_err *err)
{
	char how[96] = "";
	bool yes = n == 1 && said[0] == 'Y';
	if (reaped && WIFEXITED(status))
		snprintf(how, sizeof(how), " (it exited %d)", WEXITSTATUS(status));
	else if (reaped && WIFSIGNALED(status))
		snprintf(how, sizeof(how), " (killed by signal %d)", WTERMSIG(status));
	if (n > 0 && nfds == 0 && !yes) {
		/* Its reason, up to the first byte that is not printable text. */
		size_t len = 0;
		while (len < (size_t)n && said[len] >= ' ' && said[len] <= '~')
			len++;
		if (len) {
			sbx_fail(err, "host uid slot %u's user namespace: %.*s%s",
				 (unsigned)ids->uid, (int)len, said, how);
			return;
		}
	}
	const char *what = timed_out ? "did not answer within its time"
			   : n <= 0  ? "ended without an answer"
			   : (flags & (MSG_CTRUNC | MSG_TRUNC))
			       ? "answered with more than one packet holds"
			   : nfds == 0 && !yes ? "answered with bytes that are not text"
			   : nfds != 1	       ? "answered without exactly one descriptor"
			   : !yes ? "answered something other than Y with its descriptor"
				  : "answered with a descriptor that is not a user namespace";
	sbx_fail(err, "host uid slot %u's user namespace: sbx-helper slot-userns %s %s%s",
		 (unsigned)ids->uid, spec, what, how);
}

/* A user namespace for the slot, made by `sbx-helper slot-userns UID,GID`
 * (helper/slot_userns.h says why there) and sent back on a socket at its
 * fd 3. It has SLOT_USERNS_TIMEOUT_MS to answer and a moment more to
 * exit; else its process group (the id tools with it) is killed. The fd,
 * or -1 with err saying why not. */
static int slot_userns_make(const char *helper, char *const *env, const struct sbx_host_ids *ids,
			    struct sbx_err *err)
{
	_cleanup_close_pair_ int sv[2] = SBX_PAIR_INIT;
	char spec[48];
	const char *argv[] = {helper, "slot-userns", spec, NULL};
	pid_t pid;
	snprintf(spec, sizeof(spec), "%u,%u", (unsigned)ids->uid, (unsigned)ids->gid);
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		return sbx_fail_errno(err, "host uid slot %u: socketpair", (unsigned)ids->uid);
	if (proc_spawn(argv, env, &sv[1], 1, -1, -1, &pid, err) < 0)
		return sbx_err_prefix(err, "host uid slot %u's user namespace", (unsigned)ids->uid);
	close(sbx_steal_fd(sv[1]));
	_cleanup_close_ int pidfd = pidfd_open(pid, 0);
	char said[SBX_ERR_MAX];
	int fds[SBX_CTL_MAX_FDS], flags = 0, fd = -1, status = 0;
	size_t nfds = 0;
	ssize_t n = -1;
	bool timed_out = true;
	struct pollfd pfd = {.fd = sv[0], .events = POLLIN};
	int64_t deadline = sbx_mono_ms() + SLOT_USERNS_TIMEOUT_MS, left;
	while ((left = deadline - sbx_mono_ms()) > 0) {
		int ready = poll(&pfd, 1, (int)left);
		if (ready > 0) {
			n = sbx_fd_recvmsg(sv[0], said, sizeof(said) - 1, fds, &nfds, &flags);
			timed_out = false;
			break;
		}
		if (ready < 0 && errno != EINTR) {
			timed_out = false;
			break;
		}
	}
	/* It exits right after its answer: a moment, then it is killed. The
	 * pidfd says whether the pid is still its own (with SIGCHLD ignored
	 * the kernel reaps it, and the pid could name another process). */
	bool reaped = proc_reap(pid, pidfd, timed_out ? 0 : SLOT_USERNS_EXIT_MS, &status);
	if (!reaped) {
		/* Only ESRCH says it is gone (a zombie still answers 0). */
		if (pidfd < 0 || syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0) == 0 ||
		    errno != ESRCH)
			proc_kill_group(pid);
		proc_reap(pid, pidfd, SLOT_USERNS_EXIT_MS, NULL);
	}
	if (n == 1 && said[0] == 'Y' && nfds == 1 && !(flags & (MSG_CTRUNC | MSG_TRUNC)) &&
	    ioctl(fds[0], NS_GET_NSTYPE) == CLONE_NEWUSER) {
		struct sbx_err why;
		/* What sbxd can check of it before keeping it: the helper checks
		 * its maps, from inside, before each run. */
		if (sbx_userns_made_here(fds[0], "sbxd's", &why) == 0)
			return sbx_steal_fd(fds[0]);
		sbx_close_fds(fds, nfds);
		return sbx_fail(err,
				"host uid slot %u's user namespace: sbx-helper slot-userns %s "
				"sent %s",
				(unsigned)ids->uid, spec, why.msg);
	}
	sbx_close_fds(fds, nfds);
	answer_error(ids, spec, n, said, nfds, flags, timed_out, status, reaped, err);
	return fd;
}

/* mu held: the kept namespace of uid and gid, or NULL. */
static struct slot_userns *find(struct runs_slots *slots, uid_t uid, gid_t gid)
{
	for (size_t i = 0; i < slots->n; i++)
		if (slots->kept[i].uid == uid && slots->kept[i].gid == gid)
			return &slots->kept[i];
	return NULL;
}

/* mu held: keeps fd as the slot's namespace, in place of the least
 * recently taken one when `keep` are kept already. */
static void keep_userns(struct runs_slots *slots, uid_t uid, gid_t gid, int fd)
{
	struct slot_userns *e = &slots->kept[slots->n];
	if (slots->n == slots->keep) {
		e = &slots->kept[0];
		for (size_t i = 1; i < slots->n; i++)
			if (slots->kept[i].used < e->used)
				e = &slots->kept[i];
		close(e->fd);
	} else {
		slots->n++;
	}
	*e = (struct slot_userns){.uid = uid, .gid = gid, .fd = fd, .used = ++slots->takes};
}

void runs_slots_forget(struct runs_slots *slots, uid_t uid, gid_t gid)
{
	pthread_mutex_lock(&slots->mu);
	struct slot_userns *e = find(slots, uid, gid);
	if (e) {
		close(e->fd);
		*e = slots->kept[--slots->n];
	}
	pthread_mutex_unlock(&slots->mu);
}

int runs_slots_take(struct runs_slots *slots, const char *helper, char *const *env,
		    const char *lock_dir, struct sbx_host_ids *ids, struct sbx_err *err)
{
	if (sbx_host_ids_take(SBX_HOST_IDS_SUBORDINATE, lock_dir, ids, err) < 0)
		return -1;
	pthread_mutex_lock(&slots->mu);
	struct slot_userns *e = find(slots, ids->uid, ids->gid);
	if (e) {
		e->used = ++slots->takes;
		ids->userns_fd = fcntl(e->fd, F_DUPFD_CLOEXEC, 3);
	}
	pthread_mutex_unlock(&slots->mu);
	if (e) {
		if (ids->userns_fd < 0) {
			sbx_fail_errno(err, "host uid slot %u's user namespace",
				       (unsigned)ids->uid);
			sbx_host_ids_release(ids);
			return -1;
		}
		return 0;
	}
	/* Made outside the lock (two program starts): no other thread makes
	 * this slot's, since we hold the slot. */
	int fd = slot_userns_make(helper, env, ids, err);
	if (fd < 0) {
		sbx_host_ids_release(ids);
		return -1;
	}
	ids->userns_fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (ids->userns_fd < 0) {
		sbx_fail_errno(err, "host uid slot %u's user namespace", (unsigned)ids->uid);
		close(fd);
		sbx_host_ids_release(ids);
		return -1;
	}
	pthread_mutex_lock(&slots->mu);
	keep_userns(slots, ids->uid, ids->gid, fd);
	pthread_mutex_unlock(&slots->mu);
	return 0;
}
