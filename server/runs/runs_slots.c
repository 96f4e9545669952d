/* SPDX-License-Identifier: Apache-2.0 */
#include "runs_slots.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util.h"

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

/* A user namespace for the slot, mapped by newuidmap and newgidmap: a
 * child born in it (clone with CLONE_NEWUSER) holds it while the tools
 * map it and we open it, then is killed. sbxd has many threads, so the
 * child makes raw system calls only (no lock of the C library), closes
 * every descriptor it got from sbxd at once (a socket or pipe end held in
 * it would delay another thread's end-of-file), and dies with the thread
 * that made it, which waits here until it is reaped. */
static int slot_userns_make(const struct sbx_host_ids *ids, struct sbx_err *err)
{
	pid_t parent = getpid();
	pid_t pid = (pid_t)syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, NULL, NULL, NULL, NULL);
	if (pid < 0)
		return sbx_fail_errno(err, "a user namespace for host uid slot %u",
				      (unsigned)ids->uid);
	if (pid == 0) {
		syscall(SYS_close_range, 0U, ~0U, 0U);
		syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
		if (syscall(SYS_getppid) != parent)
			syscall(SYS_exit_group, 1);
		for (;;)
			syscall(SYS_ppoll, NULL, 0, NULL, NULL, 0);
	}
	int fd = -1;
	if (sbx_host_ids_map(pid, ids, SBX_SANDBOX_UID, err) == 0) {
		char path[64];
		snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			sbx_fail_errno(err, "open %s", path);
	} else {
		sbx_err_prefix(err, "host uid slot %u's user namespace", (unsigned)ids->uid);
	}
	/* Ours and not reaped yet: the pid cannot name another process. */
	kill(pid, SIGKILL);
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
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

int runs_slots_take(struct runs_slots *slots, const char *lock_dir, struct sbx_host_ids *ids,
		    struct sbx_err *err)
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
	int fd = slot_userns_make(ids, err);
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
