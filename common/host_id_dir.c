/* SPDX-License-Identifier: Apache-2.0 */
#include "host_id_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

#define LOCK_SUBDIR ".local/state/sbx/host-ids"

int sbx_host_id_dir_path(const char *dir, char *out, size_t size, struct sbx_err *err)
{
	if (dir) {
		if (snprintf(out, size, "%s", dir) >= (int)size)
			return sbx_fail(err, "--host-id-dir: too long");
		return 0;
	}
	/* getpwuid_r: sbxd's workers take slots at once (getpwuid's one
	 * static entry could be another thread's). */
	struct passwd pwbuf, *pw = NULL;
	char buf[4096];
	if (getpwuid_r(geteuid(), &pwbuf, buf, sizeof(buf), &pw) != 0)
		pw = NULL;
	if (!pw || pw->pw_dir[0] != '/')
		return sbx_fail(err,
				"uid %u has no home directory for its host-id locks; name "
				"one with --host-id-dir",
				(unsigned)geteuid());
	if (snprintf(out, size, "%s/%s", strcmp(pw->pw_dir, "/") ? pw->pw_dir : "", LOCK_SUBDIR) >=
	    (int)size)
		return sbx_fail(err, "home directory %s: too long", pw->pw_dir);
	return 0;
}

/* A directory on the way to the locks: root's or ours, and writable by no
 * one else unless sticky (where the next component, checked the same way,
 * is root's or ours and so cannot be renamed by another user). Another user
 * who could rename a component could hand the next helper a fresh, empty
 * lock directory (made by that helper itself, so ours), and two live runs
 * would take the same slot. */
static int check_lock_ancestor(int fd, const char *path, struct sbx_err *err)
{
	struct stat st;
	if (fstat(fd, &st) < 0)
		return sbx_fail_errno(err, "host-id locks: %s", path);
	if (st.st_uid != 0 && st.st_uid != geteuid())
		return sbx_fail(err,
				"host-id locks: %s is another user's (uid %u), who could swap "
				"the lock directory; name one whose every ancestor is root's or "
				"this user's (--host-id-dir)",
				path[0] ? path : "/", (unsigned)st.st_uid);
	if ((st.st_mode & 022) && !(st.st_mode & S_ISVTX))
		return sbx_fail(err,
				"host-id locks: %s is writable by others and not sticky, so they "
				"could swap the lock directory; name another (--host-id-dir)",
				path[0] ? path : "/");
	return 0;
}

/* Each component made if missing and opened without following a link; the
 * last must be ours and writable by nobody else: another user who could
 * add or swap a lock file could make two runs share a uid. */
int sbx_host_id_dir_open(const char *path, struct sbx_err *err)
{
	char buf[4096];
	if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf))
		return sbx_fail(err, "%s: too long", path);
	if (buf[0] != '/')
		return sbx_fail(err, "host-id locks: %s is not an absolute path", path);
	_cleanup_close_ int cur = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (cur < 0)
		return sbx_fail_errno(err, "open /");
	for (char *comp = buf + 1; *comp;) {
		char *slash = strchr(comp, '/');
		if (slash)
			*slash = '\0';
		if (*comp) {
			/* `cur` is the parent of comp: buf up to comp's slash. */
			comp[-1] = '\0';
			int bad = check_lock_ancestor(cur, buf, err);
			comp[-1] = '/';
			if (bad < 0)
				return -1;
			if (mkdirat(cur, comp, 0700) < 0 && errno != EEXIST && errno != EACCES)
				return sbx_fail_errno(err, "host-id locks: mkdir %s", buf);
			int next =
			    openat(cur, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (next < 0)
				return sbx_fail_errno(err, "host-id locks: %s", buf);
			close(cur);
			cur = next;
		}
		if (!slash)
			break;
		*slash = '/';
		comp = slash + 1;
	}
	struct stat st;
	if (fstat(cur, &st) < 0)
		return sbx_fail_errno(err, "host-id locks: %s", path);
	if (st.st_uid != geteuid() || (st.st_mode & 022))
		return sbx_fail(err,
				"host-id locks: %s is %s; it must be this user's and writable "
				"by no one else",
				path,
				st.st_uid != geteuid() ? "another user's" : "writable by others");
	return sbx_steal_fd(cur);
}
