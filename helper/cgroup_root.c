/* SPDX-License-Identifier: Apache-2.0 */
/* Finding the cgroup subtree delegated to this user, and on cgroup v2
 * making it ready to hold run cgroups. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "cgroup.h"
#include "fds.h"
#include "path.h"
#include "proc_cgroup.h"
#include "systemd_scope.h"
#include "util.h"

#define CG_ROOT_CONFIG "/etc/sbx/cgroup-root"
#define V2_CONTROLLERS "+memory +pids +cpu"

/* The caller's own cgroup for one hierarchy: v2 (ctrl NULL) or v1's
 * hierarchy with controller ctrl. */
static int own_cgroup(const char *ctrl, char *out, size_t size)
{
	char text[16384];
	if (sbx_read_at(AT_FDCWD, "/proc/self/cgroup", text, sizeof(text)) < 0)
		return -1;
	return sbx_proc_cgroup_find(text, ctrl, out, size);
}

int sbx_cgroup_own_v2(char *out, size_t size)
{
	return own_cgroup(NULL, out, size);
}

static int configured_root(char *out, size_t size)
{
	_cleanup_fclose_ FILE *f = fopen(CG_ROOT_CONFIG, "re");
	if (!f || !fgets(out, (int)size, f))
		return -1;
	out[strcspn(out, "\n")] = '\0';
	return out[0] ? 0 : -1;
}

static bool rel_is_safe(const char *rel)
{
	/* The path is joined under /sys/fs/cgroup: no ".." component, no way
	 * out of it (the tree's one path rule, common/path.h). */
	return !sbx_path_has_dotdot(rel) && strlen(rel) < 2048;
}

static bool writable(int fd)
{
	/* Writability of the directory and of cgroup.procs is what delegation
	 * means to the kernel. */
	return faccessat(fd, ".", W_OK, AT_EACCESS) == 0 &&
	       faccessat(fd, "cgroup.procs", W_OK, AT_EACCESS) == 0;
}

static int open_dir(const char *path, int *fd, struct sbx_err *err)
{
	*fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (*fd < 0)
		return sbx_fail_errno(err, "cgroup %s", path);
	/* Checked here, so the message gives the fix rather than a late EACCES. */
	if (!writable(*fd))
		return sbx_fail(err,
				"cgroup %s is not delegated to uid %u (not writable); run "
				"packaging/setup.sh as root, pass --cgroup-root, or accept rlimits "
				"with --allow-rlimit-fallback",
				path, (unsigned)geteuid());
	return 0;
}

static void v2_path(const char *rel, char *path, size_t size)
{
	snprintf(path, size, SBX_CG_MOUNT "/%s", rel[0] == '/' ? rel + 1 : rel);
}

static int open_root_at(enum sbx_cg_mode mode, const char *rel, bool per_ctrl_own,
			struct sbx_cgroup *root, struct sbx_err *err)
{
	root->mode = mode;
	for (int i = 0; i < (mode == SBX_CG_V1 ? SBX_CG_NCTRL : 1); i++) {
		char own[2048];
		const char *r = rel;
		if (per_ctrl_own) {
			if (own_cgroup(mode == SBX_CG_V2 ? NULL : sbx_cg_v1_name(i), own,
				       sizeof(own)) < 0)
				return sbx_fail(err, "cannot find own cgroup in /proc/self/cgroup");
			r = own;
		}
		char path[4096];
		if (mode == SBX_CG_V2)
			v2_path(r, path, sizeof(path));
		else
			snprintf(path, sizeof(path), SBX_CG_MOUNT "/%s/%s", sbx_cg_v1_name(i), r);
		if (i == 0)
			snprintf(root->path, sizeof(root->path), "%s", path);
		if (open_dir(path, &root->fd[i], err) < 0) {
			sbx_cgroup_close(root);
			return -1;
		}
	}
	return 0;
}

/* Whether each of memory, pids and cpu is in a controller list. */
static bool has_all_controllers(const char *list)
{
	static const char *const want[] = {"memory", "pids", "cpu"};
	for (size_t i = 0; i < SBX_ARRAY_SIZE(want); i++) {
		bool found = false;
		char copy[512];
		snprintf(copy, sizeof(copy), "%s", list);
		for (char *save, *t = strtok_r(copy, " \n", &save); t && !found;
		     t = strtok_r(NULL, " \n", &save))
			found = strcmp(t, want[i]) == 0;
		if (!found)
			return false;
	}
	return true;
}

/* Whether a cgroup.procs listing names a process of another pid namespace:
 * it reads as 0, and writing 0 would move the writer. */
static bool lists_foreign(const char *procs)
{
	return strncmp(procs, "0\n", 2) == 0 || strstr(procs, "\n0\n") != NULL;
}

/* Moves every process listed in the root's cgroup.procs into its leaf.
 * Returns how many it moved, -1 on a failure other than a process that
 * exited meanwhile. */
static int move_members(int root, int leaf, const char *path, struct sbx_err *err)
{
	char buf[65536];
	int moved = 0;
	if (sbx_read_at(root, "cgroup.procs", buf, sizeof(buf)) < 0)
		return sbx_fail_errno(err, "cgroup %s: reading cgroup.procs", path);
	/* One this helper cannot see, it cannot move, and the root cannot be
	 * prepared: said before any is moved, so that the root is not left
	 * half in its leaf (review 28). */
	if (lists_foreign(buf))
		return sbx_fail(err,
				"cgroup %s holds a process outside this helper's pid "
				"namespace, which it cannot move to " SBX_CG_SELF_LEAF
				": give the helper a root of its own (--cgroup-root)",
				path);
	for (char *save, *t = strtok_r(buf, "\n", &save); t; t = strtok_r(NULL, "\n", &save)) {
		if (sbx_write_at(leaf, "cgroup.procs", t, err) < 0) {
			if (err->errnum == ESRCH)
				continue;
			return sbx_err_prefix(
			    err, "cgroup %s: moving pid %s into " SBX_CG_SELF_LEAF, path, t);
		}
		moved++;
	}
	return moved;
}

/* v2's no-internal-processes rule: a cgroup that hands controllers to its
 * children holds no process itself. A root systemd delegated (a unit's or a
 * scope's cgroup) holds the processes it was made for, sbxd or this helper:
 * they move to a leaf of their own first, as crun and podman do. A process
 * forked meanwhile lands in the root again, so the enabling is retried. */
static int prepare_v2_root(const struct sbx_cgroup *root, struct sbx_err *err)
{
	char buf[512];
	int fd = root->fd[0];
	if (sbx_read_at(fd, "cgroup.subtree_control", buf, sizeof(buf)) < 0)
		return sbx_fail_errno(err, "cgroup %s: reading cgroup.subtree_control", root->path);
	if (has_all_controllers(buf))
		return 0;
	if (sbx_read_at(fd, "cgroup.controllers", buf, sizeof(buf)) < 0)
		return sbx_fail_errno(err, "cgroup %s: reading cgroup.controllers", root->path);
	buf[strcspn(buf, "\n")] = '\0';
	if (!has_all_controllers(buf))
		return sbx_fail(err,
				"cgroup %s has controllers \"%s\", not memory, pids and cpu: its "
				"parent does not delegate them (a systemd unit: Delegate=yes; a "
				"user's manager: Delegate=memory pids cpu in a drop-in for "
				"user@.service, docs/operator/hosts.md)",
				root->path, buf);
	if (mkdirat(fd, SBX_CG_SELF_LEAF, 0755) < 0 && errno != EEXIST)
		return sbx_fail_errno(err, "cgroup mkdir %s/" SBX_CG_SELF_LEAF, root->path);
	_cleanup_close_ int leaf =
	    openat(fd, SBX_CG_SELF_LEAF, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (leaf < 0)
		return sbx_fail_errno(err, "cgroup open %s/" SBX_CG_SELF_LEAF, root->path);
	for (int round = 0; round < 100; round++) {
		if (move_members(fd, leaf, root->path, err) < 0)
			return -1;
		if (sbx_write_at(fd, "cgroup.subtree_control", V2_CONTROLLERS, err) == 0)
			return 0;
		if (err->errnum != EBUSY)
			return sbx_err_prefix(err, "cgroup %s: enabling memory, pids and cpu",
					      root->path);
		nanosleep(&(struct timespec){0, 1000000}, NULL);
	}
	return sbx_fail(
	    err,
	    "cgroup %s: new processes kept arriving while they were moved to " SBX_CG_SELF_LEAF,
	    root->path);
}

/* The mark a helper leaves on a user manager's cgroup once the manager said
 * it delegates: set by this process's uid, only after that answer (never by
 * a prepare through --cgroup-root or the configured root, which take a
 * cgroup as named, delegated or not). */
#define SBX_CG_DELEGATED_XATTR "user.sbx.delegated"

static bool xattr_is_one(int fd, const char *name)
{
	char val[8] = "";
	return fgetxattr(fd, name, val, sizeof(val) - 1) == 1 && val[0] == '1';
}

/* A writable cgroup is a delegated one, except under a systemd user
 * manager: there every cgroup is the user's own, and the manager keeps the
 * ones it did not delegate for itself (moving a terminal's processes into a
 * leaf of its cgroup would upset the manager and the terminal). Newer
 * systemd marks the ones it delegated with user.delegate=1; 252 does not,
 * and then the manager is asked, once a cgroup: asking every run cost
 * libsystemd's loading and a connection and two calls to the manager, so
 * its yes is remembered in SBX_CG_DELEGATED_XATTR. The mark goes with the
 * cgroup, and the cgroup with its unit; a Delegate= that a reload changes
 * under a running unit is not seen, nor (252 puts no invocation id on a
 * user unit's cgroup) a restart that left the cgroup (known-limits.md). A
 * mark counts only on a cgroup this uid owns: one that root runs in was
 * made for someone else (review 27). */
static bool v2_own_is_delegated(int fd, const char *own, unsigned flags)
{
	if (!writable(fd))
		return false;
	if (!strstr(own, "/user@") || !strstr(own, ".service"))
		return true;
	if (xattr_is_one(fd, "user.delegate"))
		return true;
	struct stat st;
	if (xattr_is_one(fd, SBX_CG_DELEGATED_XATTR) && fstat(fd, &st) == 0 &&
	    st.st_uid == geteuid())
		return true;
	/* systemd 252 (Debian 12) sets no user.delegate: ask the manager,
	 * where the caller lets this process talk to it. Without that the
	 * helper left a delegated scope for one of its own, and the limits
	 * the user put on that scope with it. */
	if (!(flags & SBX_CG_ROOT_MAY_START_SCOPE) || !sbx_systemd_unit_delegates())
		return false;
	/* Not remembered (a kernel before 5.7 has no user xattrs on cgroups):
	 * the next run asks again. */
	(void)fsetxattr(fd, SBX_CG_DELEGATED_XATTR, "1", 1, 0);
	return true;
}

/* The v2 root when none is named: this process's own cgroup when it is
 * delegated (its parent when this process sits in the leaf a run before it
 * made), else a new systemd scope. */
static int open_v2_own(unsigned flags, struct sbx_cgroup *root, struct sbx_err *err)
{
	char own[2048], path[4096];
	if (sbx_cgroup_own_v2(own, sizeof(own)) < 0)
		return sbx_fail(err,
				"cannot find own cgroup (no \"0::\" line in /proc/self/cgroup)");
	size_t n = strlen(own), leaf = strlen("/" SBX_CG_SELF_LEAF);
	if (n > leaf && strcmp(own + n - leaf, "/" SBX_CG_SELF_LEAF) == 0)
		own[n - leaf] = '\0';
	v2_path(own, path, sizeof(path));
	root->mode = SBX_CG_V2;
	snprintf(root->path, sizeof(root->path), "%s", path);
	root->fd[0] = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (root->fd[0] >= 0 && v2_own_is_delegated(root->fd[0], own, flags))
		return 0;
	sbx_cgroup_close(root);
	if (!(flags & SBX_CG_ROOT_MAY_START_SCOPE))
		return sbx_fail_errnum(err, EPERM, "cgroup %s is not delegated to uid %u", path,
				       (unsigned)geteuid());
	/* Only from the user's own tree (a login session, the user manager):
	 * a process a system unit started is that unit's, bound by its limits
	 * and ended by its stop, and a scope of the user's would take the run
	 * out of both. */
	char user_slice[64];
	snprintf(user_slice, sizeof(user_slice), "/user.slice/user-%u.slice", (unsigned)geteuid());
	if (!sbx_proc_cgroup_within(own, user_slice))
		return sbx_fail(
		    err,
		    "no delegated cgroup: this process is in %s, which is not delegated "
		    "to uid %u and not in this user's sessions (%s), so it must not "
		    "leave it for a scope of its own: give the unit that started it "
		    "Delegate=yes (with User=), pass --cgroup-root, or accept rlimits "
		    "with --allow-rlimit-fallback",
		    path, (unsigned)geteuid(), user_slice);
	char unit[128];
	struct sbx_err why;
	if (sbx_systemd_scope_start(unit, sizeof(unit), &why) < 0)
		return sbx_fail(
		    err,
		    "no delegated cgroup: this process is in %s, which is not delegated "
		    "to uid %u, and %s. Or: run it under `systemd-run --user --scope -p "
		    "Delegate=yes`, pass --cgroup-root, run packaging/setup.sh as root, or "
		    "accept rlimits with --allow-rlimit-fallback",
		    path, (unsigned)geteuid(), why.msg);
	if (sbx_cgroup_own_v2(own, sizeof(own)) < 0)
		return sbx_fail(err, "scope %s: cannot find own cgroup", unit);
	return open_root_at(SBX_CG_V2, own, false, root, err);
}

/* Whether the v2 cgroup rel (relative to the mount) is this process's own
 * or an ancestor of it. */
static bool holds_self(const char *rel)
{
	char own[2048];
	return sbx_cgroup_own_v2(own, sizeof(own)) == 0 && sbx_proc_cgroup_within(own, rel);
}

/* v2 moves a process only when whoever moves it can write cgroup.procs of
 * the common ancestor of its old and new cgroups. The sandbox's pid 1
 * stays in this process's cgroup and each exec moves from there into its
 * leaf under the root: a root that does not hold this process would make
 * that common ancestor something above both, usually the hierarchy's root,
 * and every exec would fail with EACCES after the sandbox was built. So a
 * root named with --cgroup-root that does not hold this process is joined
 * (this process moves to its SBX_CG_SELF_LEAF) or refused now, when this
 * process will start sandboxes (cleanup only removes cgroups). */
static int join_v2_root(const struct sbx_cgroup *root, const char *rel, struct sbx_err *err)
{
	char own[2048];
	if (sbx_cgroup_own_v2(own, sizeof(own)) < 0)
		return sbx_fail(err,
				"cannot find own cgroup (no \"0::\" line in /proc/self/cgroup)");
	if (sbx_proc_cgroup_within(own, rel))
		return 0;
	if (mkdirat(root->fd[0], SBX_CG_SELF_LEAF, 0755) < 0 && errno != EEXIST)
		return sbx_fail_errno(err, "cgroup mkdir %s/" SBX_CG_SELF_LEAF, root->path);
	_cleanup_close_ int leaf =
	    openat(root->fd[0], SBX_CG_SELF_LEAF, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (leaf < 0)
		return sbx_fail_errno(err, "cgroup open %s/" SBX_CG_SELF_LEAF, root->path);
	if (sbx_write_at(leaf, "cgroup.procs", "0", err) == 0)
		return 0;
	int why = err->errnum;
	return sbx_fail(err,
			"cgroup %s does not hold this process (it is in %s), and it cannot move "
			"there (%s): on cgroup v2 a process moves only below a cgroup this user "
			"can write, so the sandbox's processes could not enter it either. Run "
			"sbx-helper inside it (a unit with Delegate=yes whose cgroup it is), or "
			"omit --cgroup-root",
			root->path, own, strerror(why));
}

static int open_root(enum sbx_cg_mode mode, const char *rel, unsigned flags,
		     struct sbx_cgroup *root, struct sbx_err *err)
{
	if (rel) {
		if (!rel_is_safe(rel))
			return sbx_fail(err, "--cgroup-root %s: must not contain '..'", rel);
		return open_root_at(mode, rel, false, root, err);
	}
	char conf[2048];
	/* On v2 a configured root that does not hold this process is of no
	 * use from here (join_v2_root says why): the own cgroup, or a scope,
	 * is. packaging/setup.sh records one whatever the host. */
	if (configured_root(conf, sizeof(conf)) == 0 && rel_is_safe(conf) &&
	    (mode != SBX_CG_V2 || holds_self(conf))) {
		struct sbx_err ignored;
		if (open_root_at(mode, conf, false, root, &ignored) == 0)
			return 0;
	}
	if (mode == SBX_CG_V2)
		return open_v2_own(flags, root, err);
	return open_root_at(mode, NULL, true, root, err);
}

int sbx_cgroup_open_root(const char *rel, unsigned flags, struct sbx_cgroup *root,
			 struct sbx_err *err)
{
	sbx_cgroup_init(root);
	enum sbx_cg_mode mode = sbx_cgroup_detect();
	if (mode == SBX_CG_NONE)
		return sbx_fail(err, "no cgroup v2 and no cgroup v1 memory+pids+cpu hierarchies "
				     "are mounted under " SBX_CG_MOUNT);
	if (open_root(mode, rel, flags, root, err) < 0)
		return -1;
	if (mode == SBX_CG_V2 &&
	    (prepare_v2_root(root, err) < 0 ||
	     (rel && (flags & SBX_CG_ROOT_FOR_SANDBOX) && join_v2_root(root, rel, err) < 0))) {
		sbx_cgroup_close(root);
		return -1;
	}
	return 0;
}
