/* SPDX-License-Identifier: Apache-2.0 */
#include "check.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <linux/filter.h>
#include <linux/openat2.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/pidfd.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "cgroup.h"
#include "subids.h"
#include "userns_diag.h"
#include "util.h"

struct item {
	const char *name;
	bool required;
	bool ok;
	char detail[5120];
	const char *fix;
	const char *reason; /* userns only: sbx_userns_diagnose's reason */
};

static void read_sysctl(const char *path, char *out, size_t size)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, out, size - 1) : -1;
	out[n > 0 ? n : 0] = '\0';
	out[strcspn(out, "\n")] = '\0';
}

/* The real test: can this user make the namespaces a sandbox needs, and
 * mount in them? The mount matters: under Ubuntu's AppArmor restriction
 * the clone may succeed into the unprivileged_userns profile, which denies
 * every capability, so the sandbox fails at its first mount instead. */
static void check_userns(struct item *it)
{
	pid_t pid = (pid_t)syscall(SYS_clone,
				   CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET |
				       CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP | SIGCHLD,
				   NULL, NULL, NULL, NULL);
	if (pid == 0)
		_exit(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ? errno & 0xff : 0);
	int e = errno, status = 0;
	if (pid > 0)
		waitpid(pid, &status, 0);
	bool made = pid > 0 && WIFEXITED(status);
	int mount_errno = made ? WEXITSTATUS(status) : 0;
	char max[32], clone_ok[32], apparmor[32], label[256];
	read_sysctl("/proc/sys/user/max_user_namespaces", max, sizeof(max));
	read_sysctl("/proc/sys/kernel/unprivileged_userns_clone", clone_ok, sizeof(clone_ok));
	read_sysctl("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", apparmor,
		    sizeof(apparmor));
	/* AppArmor's own file (Linux 5.8+, as every kernel with the
	 * restriction): attr/current would be SELinux's context elsewhere. */
	read_sysctl("/proc/self/attr/apparmor/current", label, sizeof(label));
	struct sbx_userns_host host = {
	    .works = made && mount_errno == 0,
	    .max_user_namespaces = max,
	    .unprivileged_clone = clone_ok,
	    .apparmor_restrict = apparmor,
	    .apparmor_label = label,
	};
	struct sbx_userns_verdict v = sbx_userns_diagnose(&host);
	char what[160];
	if (host.works)
		snprintf(what, sizeof(what), "%s",
			 "user, mount, pid, net, ipc, uts and cgroup namespaces can be created");
	else if (made)
		snprintf(what, sizeof(what),
			 "the namespaces were made but a mount in them failed: %s",
			 strerror(mount_errno));
	else
		snprintf(what, sizeof(what), "the namespaces cannot be created: %s", strerror(e));
	it->ok = host.works;
	snprintf(it->detail, sizeof(it->detail),
		 "%s; user.max_user_namespaces=%s kernel.unprivileged_userns_clone=%s "
		 "kernel.apparmor_restrict_unprivileged_userns=%s apparmor_label=%s",
		 what, max[0] ? max : "absent", clone_ok[0] ? clone_ok : "absent",
		 apparmor[0] ? apparmor : "absent", label[0] ? label : "none");
	it->reason = v.reason;
	it->fix = v.fix;
}

static void check_seccomp(struct item *it)
{
	/* A filter is the only proof; load one in a throwaway child. */
	pid_t pid = fork();
	if (pid == 0) {
		struct sock_filter allow = {0x06, 0, 0, SECCOMP_RET_ALLOW};
		struct sock_fprog prog = {.len = 1, .filter = &allow};
		/* Unchecked: without no_new_privs the load below fails, and
		 * that is what this check reports. */
		prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
		_exit(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0 ? 0 : 1);
	}
	int status = 0;
	if (pid > 0)
		waitpid(pid, &status, 0);
	it->ok = pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
	snprintf(it->detail, sizeof(it->detail), "%s",
		 it->ok ? "filters can be loaded" : "seccomp filters cannot be loaded");
	it->fix = it->ok ? NULL : "a kernel with CONFIG_SECCOMP_FILTER";
}

/* What bounds TCP and UDP buffers (socket_memory): an exec's memory and
 * sockets together, and a run's (all its execs, and their files). */
struct sock_bounds {
	const char *exec;
	const char *run;
};

static void check_sockets(struct item *it, const struct sbx_cgroup *root, struct sock_bounds *b)
{
	if (root->mode == SBX_CG_V2) {
		*b = (struct sock_bounds){"memory_mb", "memory_mb + out_mb + 2 x tmp_mb"};
		it->ok = true;
		snprintf(it->detail, sizeof(it->detail),
			 "cgroup v2 charges socket buffers to the exec's memory.max: an exec "
			 "holds at most memory_mb in all, a run memory_mb + out_mb + 2 x tmp_mb");
	} else if (root->mode == SBX_CG_V1 &&
		   sbx_cgroup_has_file(root, SBX_CG_MEMORY, SBX_CG_V1_TCP_LIMIT)) {
		*b = (struct sock_bounds){"2 x memory_mb", "2 x memory_mb + out_mb + 2 x tmp_mb"};
		it->ok = true;
		snprintf(
		    it->detail, sizeof(it->detail),
		    "cgroup v1: TCP and UDP buffers are charged to " SBX_CG_V1_TCP_LIMIT
		    ", a counter apart from memory.limit_in_bytes, set to memory_mb for each "
		    "exec and for the run: an exec holds at most memory_mb of socket buffers on "
		    "top of memory_mb, all of a run's execs together memory_mb on top of the "
		    "run's memory_mb + out_mb + 2 x tmp_mb");
	} else {
		*b = (struct sock_bounds){"none", "none"};
		it->ok = false;
		snprintf(it->detail, sizeof(it->detail),
			 "no cgroup charges socket buffers here: execs would be refused (cgroup "
			 "v1 without " SBX_CG_V1_TCP_LIMIT ") or bounded only per socket and "
			 "host-wide by net.ipv4.tcp_mem/udp_mem (rlimit fallback)");
		it->fix = "cgroup v2, or a v1 memory controller with " SBX_CG_V1_TCP_LIMIT;
	}
}

static void check_cgroup(struct item *it, struct item *sockets, struct sock_bounds *sock_bound,
			 const char *rel, char *mode, size_t mode_size, bool *has_kill)
{
	struct sbx_cgroup root;
	struct sbx_err err;
	snprintf(mode, mode_size, "%s", sbx_cg_mode_name(sbx_cgroup_detect()));
	*has_kill = false;
	sbx_cgroup_init(&root);
	if (sbx_cgroup_open_root(rel, SBX_CG_ROOT_MAY_START_SCOPE | SBX_CG_ROOT_FOR_SANDBOX, &root,
				 &err) < 0) {
		check_sockets(sockets, &root, sock_bound);
		it->ok = false;
		snprintf(it->detail, sizeof(it->detail), "%s", err.msg);
		/* On v2 the message names the fix it found (a user manager to
		 * ask for a scope, or the command that starts one). */
		it->fix = root.mode == SBX_CG_V2 || sbx_cgroup_detect() == SBX_CG_V2
			      ? "run it in a delegated cgroup: under a systemd unit with "
				"Delegate=yes, in a session whose systemd user manager gives "
				"sbx-helper a scope, or with --cgroup-root PATH naming a subtree "
				"this user owns"
			      : "run packaging/setup.sh as root (delegates a subtree to the test "
				"user), or pass --cgroup-root PATH naming a subtree this user owns";
		return;
	}
	bool mem = sbx_cgroup_has_file(
	    &root, SBX_CG_MEMORY, root.mode == SBX_CG_V2 ? "memory.max" : "memory.limit_in_bytes");
	bool pids = sbx_cgroup_has_file(&root, SBX_CG_PIDS, "pids.max");
	bool cpu = sbx_cgroup_has_file(&root, SBX_CG_CPU,
				       root.mode == SBX_CG_V2 ? "cpu.max" : "cpu.cfs_quota_us");
	/* The root itself may lack the files (a v2 root cgroup); its
	 * subtree_control is what its children get. */
	if (root.mode == SBX_CG_V2) {
		char buf[256] = "";
		int fd = openat(root.fd[0], "cgroup.subtree_control", O_RDONLY | O_CLOEXEC);
		if (fd >= 0) {
			ssize_t n = read(fd, buf, sizeof(buf) - 1);
			buf[n > 0 ? n : 0] = '\0';
			close(fd);
		}
		mem |= strstr(buf, "memory") != NULL;
		pids |= strstr(buf, "pids") != NULL;
		cpu |= strstr(buf, "cpu") != NULL;
		*has_kill = sbx_cgroup_has_file(&root, 0, "cgroup.kill");
	} else {
		/* A v1 root's own limit files are there when writable children can be. */
		mem = pids = cpu = true;
	}
	it->ok = mem && pids && cpu;
	snprintf(it->detail, sizeof(it->detail), "%s delegated at %s (memory %s, pids %s, cpu %s)",
		 sbx_cg_mode_name(root.mode), root.path, mem ? "yes" : "no", pids ? "yes" : "no",
		 cpu ? "yes" : "no");
	if (!it->ok)
		it->fix = "enable memory, pids and cpu in the delegated cgroup's parent "
			  "(cgroup.subtree_control)";
	check_sockets(sockets, &root, sock_bound);
	sbx_cgroup_close(&root);
}

static void check_openat2(struct item *it)
{
	struct open_how how = {.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC,
			       .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS};
	int fd = (int)syscall(SYS_openat2, AT_FDCWD, ".", &how, sizeof(how));
	it->ok = fd >= 0;
	if (fd >= 0)
		close(fd);
	snprintf(it->detail, sizeof(it->detail), "%s",
		 it->ok ? "RESOLVE_BENEATH available" : strerror(errno));
	it->fix = it->ok ? NULL : "Linux 5.6 or newer";
}

/* Whether /proc (the last mount there wins) hides other users'
 * processes: the super block options of its mountinfo line. */
static bool proc_hides_processes(char *opts, size_t size)
{
	_cleanup_fclose_ FILE *f = fopen("/proc/self/mountinfo", "re");
	char line[4096];
	bool hidden = false;

	snprintf(opts, size, "%s", "/proc not found in mountinfo");
	while (f && fgets(line, sizeof(line), f)) {
		/* ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - TYPE SOURCE SUPEROPTS */
		char *sep = strstr(line, " - "), *save, *mnt;
		if (!sep)
			continue;
		*sep = '\0';
		strtok_r(line, " ", &save);
		for (int i = 0; i < 3; i++)
			strtok_r(NULL, " ", &save);
		mnt = strtok_r(NULL, " ", &save);
		char *type = strtok_r(sep + 3, " ", &save);
		strtok_r(NULL, " ", &save);
		char *super = strtok_r(NULL, " \n", &save);
		if (!mnt || strcmp(mnt, "/proc") || !type || strcmp(type, "proc") || !super)
			continue;
		snprintf(opts, size, "%s", super);
		/* Older kernels print the number: 2 is invisible, 4 ptraceable. */
		hidden = false;
		for (char *o = strtok_r(super, ",", &save); o; o = strtok_r(NULL, ",", &save))
			hidden |= !strcmp(o, "hidepid=invisible") || !strcmp(o, "hidepid=2") ||
				  !strcmp(o, "hidepid=ptraceable") || !strcmp(o, "hidepid=4");
	}
	return hidden;
}

/* Optional: sbx's sandboxes run as the caller's (or sbxd's) uid, and a
 * host /proc without hidepid shows every local user their processes'
 * argv (a script's data, a token on a command line), status and limits. */
static void check_proc_hidepid(struct item *it)
{
	char opts[1024];

	it->ok = proc_hides_processes(opts, sizeof(opts));
	snprintf(it->detail, sizeof(it->detail), "%s (/proc: %.900s)",
		 it->ok ? "other users cannot see sandboxes' processes"
			: "every local user sees sandboxes' processes, their argv included",
		 opts);
	it->fix = it->ok ? NULL
			 : "mount -o remount,hidepid=invisible,gid=GROUP /proc (GROUP: who may "
			   "still see all, e.g. a monitoring group); to keep it, /etc/fstab: "
			   "\"proc /proc proc defaults,hidepid=invisible,gid=GROUP 0 0\" "
			   "(systemd-remount-fs applies it at boot); docs/operator/known-limits.md";
}

/* What --host-uids subordinate (the default) needs: a range in both files,
 * the newuidmap/newgidmap that may write it (setuid root, or file
 * capabilities), and the initial user namespace. */
static void check_host_uids(struct item *it)
{
	it->fix = "sudo apt install uidmap; sudo usermod --add-subuids 100000-165535 "
		  "--add-subgids 100000-165535 USER (a range no other user has), or "
		  "--host-uids shared (sbxd: \"host_uids\": \"shared\"; weaker: every run "
		  "shares the caller's per-uid kernel counters)";
	struct sbx_subids uids, gids;
	char user[256] = "?";
	struct sbx_err err;
	if (sbx_subids_own(&uids, &gids, user, sizeof(user), &err) < 0) {
		snprintf(it->detail, sizeof(it->detail), "%s", err.msg);
		return;
	}
	static const char *const tools[] = {"/usr/bin/newuidmap", "/usr/bin/newgidmap"};
	for (size_t i = 0; i < SBX_ARRAY_SIZE(tools); i++) {
		struct stat st;
		if (stat(tools[i], &st) < 0) {
			snprintf(it->detail, sizeof(it->detail), "%s: %s", tools[i],
				 strerror(errno));
			return;
		}
		bool setuid_root = st.st_uid == 0 && (st.st_mode & S_ISUID);
		if (!setuid_root && getxattr(tools[i], "security.capability", NULL, 0) < 0) {
			snprintf(it->detail, sizeof(it->detail),
				 "%s is neither setuid root nor has file capabilities", tools[i]);
			return;
		}
	}
	uint64_t slots = uids.total < gids.total ? uids.total : gids.total;
	int n = snprintf(it->detail, sizeof(it->detail),
			 "user %s: %llu subordinate uids, %llu gids: %llu runs at once can each "
			 "have a host uid of their own",
			 user, (unsigned long long)uids.total, (unsigned long long)gids.total,
			 (unsigned long long)slots);
	(void)n;
	it->ok = slots > 0;
	if (!it->ok)
		snprintf(it->detail, sizeof(it->detail),
			 "user %s has no subordinate %s: sandboxes cannot have host uids of "
			 "their own",
			 user, uids.total ? "gids (/etc/subgid)" : "uids (/etc/subuid)");
}

int sbx_check_main(const char *cgroup_root, bool json)
{
	struct item items[9] = {
	    {.name = "userns", .required = true},
	    {.name = "seccomp", .required = true},
	    {.name = "cgroup", .required = true},
	    {.name = "openat2", .required = true},
	    {.name = "pidfd", .required = false},
	    {.name = "cgroup.kill", .required = false},
	    {.name = "socket_memory", .required = true},
	    {.name = "proc_hidepid", .required = false},
	    {.name = "host_uids", .required = true},
	};
	struct sock_bounds sock_bound = {"none", "none"};
	char mode[8];
	bool has_kill;
	check_userns(&items[0]);
	check_seccomp(&items[1]);
	check_cgroup(&items[2], &items[6], &sock_bound, cgroup_root, mode, sizeof(mode), &has_kill);
	check_openat2(&items[3]);
	check_proc_hidepid(&items[7]);
	check_host_uids(&items[8]);
	int pfd = pidfd_open(getpid(), 0);
	items[4].ok = pfd >= 0;
	snprintf(items[4].detail, sizeof(items[4].detail), "%s",
		 pfd >= 0 ? "pidfd_open available" : strerror(errno));
	if (pfd >= 0)
		close(pfd);
	items[5].ok = has_kill;
	snprintf(items[5].detail, sizeof(items[5].detail), "%s",
		 has_kill ? "atomic kill of a cgroup"
			  : "not available (cgroup v1 or old kernel): execs are killed through "
			    "their pid namespace instead");
	char tiocsti[16];
	read_sysctl("/proc/sys/dev/tty/legacy_tiocsti", tiocsti, sizeof(tiocsti));

	bool all = true;
	for (size_t i = 0; i < SBX_ARRAY_SIZE(items); i++)
		all &= !items[i].required || items[i].ok;
	if (json) {
		json_t *doc = json_object();
		json_object_set_new(doc, "ok", json_boolean(all));
		json_object_set_new(doc, "cgroup_mode", json_string(mode));
		json_object_set_new(doc, "socket_memory_bound", json_string(sock_bound.exec));
		json_object_set_new(doc, "socket_memory_run_bound", json_string(sock_bound.run));
		json_object_set_new(doc, "legacy_tiocsti",
				    json_string(tiocsti[0] ? tiocsti : "absent"));
		for (size_t i = 0; i < SBX_ARRAY_SIZE(items); i++) {
			json_t *item = json_pack("{s:b, s:b, s:s, s:s?}", "ok", items[i].ok,
						 "required", items[i].required, "detail",
						 items[i].detail, "fix", items[i].fix);
			if (item && items[i].reason)
				json_object_set_new(item, "reason", json_string(items[i].reason));
			json_object_set_new(doc, items[i].name, item);
		}
		char *s = json_dumps(doc, JSON_INDENT(2) | JSON_SORT_KEYS);
		if (s)
			puts(s);
		free(s);
		json_decref(doc);
	} else {
		for (size_t i = 0; i < SBX_ARRAY_SIZE(items); i++) {
			printf("%-12s %-4s %s%s\n", items[i].name,
			       items[i].ok	   ? "ok"
			       : items[i].required ? "MISSING"
						   : "no",
			       items[i].detail, items[i].required ? "" : " (optional)");
			if (!items[i].ok && items[i].fix)
				printf("%-12s      fix: %s\n", "", items[i].fix);
		}
		printf("%-12s      dev.tty.legacy_tiocsti=%s (TIOCSTI is blocked by the seccomp "
		       "filter either way)\n",
		       "tiocsti", tiocsti[0] ? tiocsti : "absent");
		printf("%s\n", all ? "this host can enforce sbx's sandbox"
				   : "this host cannot enforce sbx's sandbox: see MISSING above");
	}
	return all ? 0 : 1;
}
