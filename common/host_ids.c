/* SPDX-License-Identifier: Apache-2.0 */
#include "host_ids.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pwd.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <linux/nsfs.h>

#include "host_id_dir.h"
#include "spawn_prog.h"
#include "util.h"
#include "write_file.h"

/* The fix an error names: what useradd does for a new login user. */
#define SUBIDS_FIX                                                                                 \
	"give it a range (`sudo usermod --add-subuids 100000-165535 --add-subgids "                \
	"100000-165535 %s`, any range no other user has), or run every sandbox as this uid "       \
	"(--host-uids shared; sbxd: \"host_uids\": \"shared\"), which shares the per-uid kernel "  \
	"counters with it"

int sbx_host_ids_mode_parse(const char *s)
{
	if (!strcmp(s, "subordinate"))
		return SBX_HOST_IDS_SUBORDINATE;
	if (!strcmp(s, "shared"))
		return SBX_HOST_IDS_SHARED;
	return -1;
}

const char *sbx_host_ids_mode_name(enum sbx_host_ids_mode m)
{
	return m == SBX_HOST_IDS_SHARED ? "shared" : "subordinate";
}

/* newuidmap maps from the helper's own user namespace: the subordinate ids
 * are host ids only in the initial one. Inside another (a container,
 * `unshare -U`) they are usually not mapped at all, and newuidmap would
 * fail with a bare EPERM. */
static bool in_initial_userns(void)
{
	_cleanup_fclose_ FILE *f = fopen("/proc/self/uid_map", "re");
	unsigned long long inside, outside, count;
	if (!f || fscanf(f, "%llu %llu %llu", &inside, &outside, &count) != 3)
		return false;
	return inside == 0 && outside == 0 && count == 4294967295ULL;
}

int sbx_host_ids_take(enum sbx_host_ids_mode mode, const char *lock_dir, struct sbx_host_ids *ids,
		      struct sbx_err *err)
{
	memset(ids, 0, sizeof(*ids));
	ids->mode = mode;
	ids->lock_fd = -1;
	ids->userns_fd = -1;
	if (mode == SBX_HOST_IDS_SHARED) {
		ids->uid = geteuid();
		ids->gid = getegid();
		return 0;
	}
	struct sbx_subids uids, gids;
	char user[256];
	if (!in_initial_userns())
		return sbx_fail(err,
				"a host uid of the run's own needs the initial user namespace, "
				"and this helper runs in another one (a container, `unshare "
				"-U`), where /etc/subuid's ids mean nothing: run it on the host, "
				"or run every sandbox as this uid (--host-uids shared; sbxd: "
				"\"host_uids\": \"shared\"; weaker)");
	if (sbx_subids_own(&uids, &gids, user, sizeof(user), err) < 0)
		return -1;
	if (!uids.total || !gids.total)
		return sbx_fail(err,
				"user %s has no subordinate %s in %s, and each sandbox runs as a "
				"host uid of its own: " SUBIDS_FIX,
				user, uids.total ? "gids" : "uids",
				uids.total ? SBX_SUBGID_FILE : SBX_SUBUID_FILE, user);
	char path[4096];
	if (sbx_host_id_dir_path(lock_dir, path, sizeof(path), err) < 0)
		return -1;
	_cleanup_close_ int dir = sbx_host_id_dir_open(path, err);
	if (dir < 0)
		return -1;
	uint64_t slots = uids.total < gids.total ? uids.total : gids.total;
	/* Lowest free slot first: the lock files stay as many as the most
	 * runs that were ever alive at once. They are never removed, since
	 * a file unlinked while another helper waits to lock it would let two
	 * helpers hold "the same" slot. */
	for (uint64_t i = 0; i < slots; i++) {
		uint64_t uid = sbx_subids_nth(&uids, i), gid = sbx_subids_nth(&gids, i);
		/* A range written over root's or our own ids would run the
		 * sandbox as host root's kuid or as its caller: never a slot. */
		if (uid == 0 || gid == 0 || uid == geteuid() || gid == getegid())
			continue;
		char name[24];
		snprintf(name, sizeof(name), "%" PRIu64, uid);
		_cleanup_close_ int fd =
		    openat(dir, name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0)
			return sbx_fail_errno(err, "host-id lock %s/%s", path, name);
		if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
			if (errno == EWOULDBLOCK)
				continue;
			return sbx_fail_errno(err, "host-id lock %s/%s", path, name);
		}
		ids->uid = (uid_t)uid;
		ids->gid = (gid_t)gid;
		ids->lock_fd = sbx_steal_fd(fd);
		return 0;
	}
	errno = EAGAIN;
	return sbx_fail_errno(err,
			      "all %" PRIu64 " subordinate ids of user %s are held by live runs "
			      "(locks in %s); give it a larger range or run fewer at once",
			      slots, user, path);
}

/* newuidmap/newgidmap PID INSIDE OUTSIDE COUNT ..., started: the two run
 * at once (each a setuid program's exec, the larger part of a one-shot's
 * setup on a slow host), and idmap_collect waits for each. */
static int idmap_spawn(struct sbx_idmap_tool *t, const char *tool, pid_t pid, struct sbx_err *err)
{
	static const char *const dirs[] = {"/usr/bin", "/bin", "/usr/sbin", "/sbin"};
	char pidtext[16];
	t->prog[0] = '\0';
	for (size_t i = 0; i < SBX_ARRAY_SIZE(dirs) && !t->prog[0]; i++) {
		snprintf(t->prog, sizeof(t->prog), "%s/%s", dirs[i], tool);
		if (access(t->prog, X_OK) < 0)
			t->prog[0] = '\0';
	}
	if (!t->prog[0])
		return sbx_fail(err,
				"%s is not installed (Debian and Ubuntu: `sudo apt install "
				"uidmap`; Fedora: shadow-utils)",
				tool);
	snprintf(pidtext, sizeof(pidtext), "%d", (int)pid);
	const char *argv[] = {t->prog,	 pidtext,   t->map[0], t->map[1], t->map[2],
			      t->map[3], t->map[4], t->map[5], NULL};
	int pipefd[2];
	if (pipe2(pipefd, O_CLOEXEC) < 0)
		return sbx_fail_errno(err, "pipe");
	/* A setuid program gets nothing of ours but its stdio: not the
	 * control or reader socket serve was handed (fds 3 and 4). */
	char *const no_env[] = {NULL};
	struct sbx_spawn_prog sp = {
	    .argv = argv, .env = no_env, .out_fd = pipefd[1], .err_fd = pipefd[1]};
	if (sbx_spawn_prog(&sp, &t->child, err) < 0) {
		t->child = 0;
		close(pipefd[0]);
		close(pipefd[1]);
		return -1;
	}
	close(pipefd[1]);
	t->said_fd = pipefd[0];
	return 0;
}

/* Waits for a tool idmap_spawn started, with its complaint in the error
 * when it refused. */
static int idmap_collect(struct sbx_idmap_tool *t, struct sbx_err *err)
{
	char said[256] = "";
	size_t len = 0;
	ssize_t n;
	if (t->child <= 0)
		return 0;
	while ((n = read(t->said_fd, said + len, sizeof(said) - 1 - len)) > 0 ||
	       (n < 0 && errno == EINTR))
		if (n > 0 && (len += (size_t)n) == sizeof(said) - 1)
			break;
	said[len] = '\0';
	close(t->said_fd);
	t->said_fd = -1;
	int status;
	pid_t child = t->child;
	t->child = 0;
	while (waitpid(child, &status, 0) < 0)
		if (errno != EINTR)
			return sbx_fail_errno(err, "wait for %s", t->prog);
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	said[strcspn(said, "\n")] = '\0';
	return sbx_fail(err, "%s %s %s %s %s %s %s refused%s%s", t->prog, t->map[0], t->map[1],
			t->map[2], t->map[3], t->map[4], t->map[5], said[0] ? ": " : "", said);
}

/* "0 SELF 1 INSIDE SLOT 1": the run's uid 0 is the caller, the sandbox
 * user the slot's id. */
static void idmap_args(struct sbx_idmap_tool *t, unsigned self, unsigned inside, unsigned slot)
{
	snprintf(t->map[0], sizeof(t->map[0]), "0");
	snprintf(t->map[1], sizeof(t->map[1]), "%u", self);
	snprintf(t->map[2], sizeof(t->map[2]), "1");
	snprintf(t->map[3], sizeof(t->map[3]), "%u", inside);
	snprintf(t->map[4], sizeof(t->map[4]), "%u", slot);
	snprintf(t->map[5], sizeof(t->map[5]), "1");
}

int sbx_host_ids_map_start(pid_t pid, const struct sbx_host_ids *ids, unsigned sandbox_id,
			   struct sbx_idmap_job *job, struct sbx_err *err)
{
	char map[64];
	memset(job, 0, sizeof(*job));
	job->tool[0].said_fd = job->tool[1].said_fd = -1;
	if (ids->mode == SBX_HOST_IDS_SHARED) {
		/* One uid and one gid: the sandbox user is us. setgroups is
		 * denied so the sandbox cannot drop supplementary groups that
		 * a host ACL might deny on. */
		snprintf(map, sizeof(map), "%u %u 1\n", sandbox_id, (unsigned)geteuid());
		if (sbx_write_proc(pid, "uid_map", map, err) < 0 ||
		    sbx_write_proc(pid, "setgroups", "deny", err) < 0)
			return -1;
		snprintf(map, sizeof(map), "%u %u 1\n", sandbox_id, (unsigned)getegid());
		return sbx_write_proc(pid, "gid_map", map, err);
	}
	idmap_args(&job->tool[0], (unsigned)geteuid(), sandbox_id, (unsigned)ids->uid);
	idmap_args(&job->tool[1], (unsigned)getegid(), sandbox_id, (unsigned)ids->gid);
	if (idmap_spawn(&job->tool[0], "newuidmap", pid, err) < 0)
		return -1;
	if (idmap_spawn(&job->tool[1], "newgidmap", pid, err) < 0) {
		sbx_host_ids_map_finish(job, &(struct sbx_err){0});
		return -1;
	}
	return 0;
}

int sbx_host_ids_map_finish(struct sbx_idmap_job *job, struct sbx_err *err)
{
	/* Both are waited for, whatever the first said: no child is left. */
	int rc = idmap_collect(&job->tool[0], err);
	struct sbx_err gerr;
	if (idmap_collect(&job->tool[1], &gerr) < 0 && rc == 0) {
		*err = gerr;
		rc = -1;
	}
	return rc;
}

int sbx_host_ids_map(pid_t pid, const struct sbx_host_ids *ids, unsigned sandbox_id,
		     struct sbx_err *err)
{
	struct sbx_idmap_job job;
	if (sbx_host_ids_map_start(pid, ids, sandbox_id, &job, err) < 0)
		return -1;
	return sbx_host_ids_map_finish(&job, err);
}

/* A decimal number up to max, all of the text up to `end` (',' or NUL). */
static bool given_number(const char **p, char end, unsigned long long max, unsigned long long *out)
{
	char *stop;
	if (**p < '0' || **p > '9')
		return false;
	errno = 0;
	*out = strtoull(*p, &stop, 10);
	if (errno || *out > max || *stop != end)
		return false;
	*p = *stop ? stop + 1 : stop;
	return true;
}

int sbx_host_ids_given_parse(const char *text, struct sbx_host_ids *ids)
{
	unsigned long long uid, gid, lock, userns;
	const char *p = text;
	if (!given_number(&p, ',', UINT32_MAX - 1, &uid) ||
	    !given_number(&p, ',', UINT32_MAX - 1, &gid) ||
	    !given_number(&p, ',', INT32_MAX, &lock) ||
	    !given_number(&p, '\0', INT32_MAX, &userns) || !uid || !gid || lock < 3 || userns < 3 ||
	    lock == userns)
		return -1;
	*ids = (struct sbx_host_ids){.mode = SBX_HOST_IDS_SUBORDINATE,
				     .uid = (uid_t)uid,
				     .gid = (gid_t)gid,
				     .lock_fd = (int)lock,
				     .userns_fd = (int)userns};
	return 0;
}

int sbx_host_ids_pair_parse(const char *text, struct sbx_host_ids *ids)
{
	unsigned long long uid, gid;
	const char *p = text;
	if (!given_number(&p, ',', UINT32_MAX - 1, &uid) ||
	    !given_number(&p, '\0', UINT32_MAX - 1, &gid) || !uid || !gid)
		return -1;
	*ids = (struct sbx_host_ids){.mode = SBX_HOST_IDS_SUBORDINATE,
				     .uid = (uid_t)uid,
				     .gid = (gid_t)gid,
				     .lock_fd = -1,
				     .userns_fd = -1};
	return 0;
}

int sbx_userns_made_here(int fd, const char *who, struct sbx_err *err)
{
	uid_t owner = (uid_t)-1; /* set by the ioctl (valgrind does not know it writes) */
	if (ioctl(fd, NS_GET_OWNER_UID, &owner) < 0 || owner != geteuid())
		return sbx_fail(err, "a user namespace that is not %s uid's", who);
	struct stat parent_st, ours_st;
	_cleanup_close_ int parent = ioctl(fd, NS_GET_PARENT);
	if (parent < 0 || fstat(parent, &parent_st) < 0 ||
	    stat("/proc/self/ns/user", &ours_st) < 0 || parent_st.st_dev != ours_st.st_dev ||
	    parent_st.st_ino != ours_st.st_ino)
		return sbx_fail(err, "a user namespace that is not a child of %s", who);
	return 0;
}

int sbx_host_ids_given_check(const char *lock_dir, const struct sbx_host_ids *ids,
			     struct sbx_err *err)
{
	char path[4096], name[24];
	struct stat held, slot;
	if (sbx_host_id_dir_path(lock_dir, path, sizeof(path), err) < 0)
		return -1;
	_cleanup_close_ int dir = sbx_host_id_dir_open(path, err);
	if (dir < 0)
		return -1;
	snprintf(name, sizeof(name), "%u", (unsigned)ids->uid);
	if (fstat(ids->lock_fd, &held) < 0)
		return sbx_fail_errno(err, "--host-slot: lock fd %d", ids->lock_fd);
	if (fstatat(dir, name, &slot, AT_SYMLINK_NOFOLLOW) < 0)
		return sbx_fail_errno(err, "--host-slot: %s/%s", path, name);
	if (!S_ISREG(held.st_mode) || held.st_dev != slot.st_dev || held.st_ino != slot.st_ino)
		return sbx_fail(err, "--host-slot: fd %d is not the lock file %s/%s", ids->lock_fd,
				path, name);
	/* Through the fd that holds it, taking it again succeeds; if another
	 * open of the file holds it, this one does not. */
	if (flock(ids->lock_fd, LOCK_EX | LOCK_NB) < 0)
		return sbx_fail_errno(err, "--host-slot: slot %u is not locked through fd %d",
				      (unsigned)ids->uid, ids->lock_fd);
	int type = ioctl(ids->userns_fd, NS_GET_NSTYPE);
	if (type != CLONE_NEWUSER)
		return sbx_fail(err, "--host-slot: fd %d is not a user namespace", ids->userns_fd);
	/* Made by this uid, directly in our namespace (its maps, checked
	 * from inside it, are then onto the host's ids). */
	if (sbx_userns_made_here(ids->userns_fd, "this helper's", err) < 0)
		return sbx_err_prefix(err, "--host-slot: fd %d", ids->userns_fd);
	/* The slot's gid is the one at the uid's place in the ranges: another
	 * would be some other slot's. */
	struct sbx_subids uids, gids;
	char user[256];
	if (sbx_subids_own(&uids, &gids, user, sizeof(user), err) < 0)
		return -1;
	uint64_t idx = sbx_subids_index(&uids, ids->uid);
	if (idx == UINT64_MAX || sbx_subids_nth(&gids, idx) != ids->gid)
		return sbx_fail(err,
				"--host-slot: uid %u and gid %u are not one slot of user %s's "
				"subordinate ranges",
				(unsigned)ids->uid, (unsigned)ids->gid, user);
	return 0;
}

/* Whether FILE lists exactly the two one-id extents, in either order. */
static int maps_check_file(const char *file, unsigned self, unsigned sandbox_id, unsigned slot,
			   struct sbx_err *err)
{
	char text[256];
	_cleanup_close_ int fd = open(file, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : read(fd, text, sizeof(text) - 1);
	if (n < 0)
		return sbx_fail_errno(err, "the slot's user namespace: %s", file);
	text[n] = '\0';
	unsigned long long in[3], out[3], count[3];
	int lines = 0, used;
	const char *p = text;
	while (lines < 3 &&
	       sscanf(p, "%llu %llu %llu%n", &in[lines], &out[lines], &count[lines], &used) == 3) {
		p += used;
		p += strspn(p, " \n");
		lines++;
	}
	bool ok = false;
	for (int i = 0; lines == 2 && !*p && count[0] == 1 && count[1] == 1 && i < 2; i++)
		ok = ok || (in[i] == 0 && out[i] == self && in[1 - i] == sandbox_id &&
			    out[1 - i] == slot);
	if (!ok) {
		for (char *c = text; *c; c++)
			if (*c == '\n')
				*c = *(c + 1) ? ',' : '\0';
		return sbx_fail(err,
				"the slot's user namespace maps %s as \"%s\", not 0 to %u and "
				"%u to %u alone",
				file, text, self, sandbox_id, slot);
	}
	return 0;
}

int sbx_host_ids_maps_check(const struct sbx_host_ids *ids, uid_t self_uid, gid_t self_gid,
			    unsigned sandbox_id, struct sbx_err *err)
{
	if (maps_check_file("/proc/self/uid_map", (unsigned)self_uid, sandbox_id,
			    (unsigned)ids->uid, err) < 0)
		return -1;
	return maps_check_file("/proc/self/gid_map", (unsigned)self_gid, sandbox_id,
			       (unsigned)ids->gid, err);
}

void sbx_host_ids_release(struct sbx_host_ids *ids)
{
	if (ids->lock_fd >= 0)
		close(ids->lock_fd);
	ids->lock_fd = -1;
	if (ids->userns_fd >= 0)
		close(ids->userns_fd);
	ids->userns_fd = -1;
}
