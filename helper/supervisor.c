/* SPDX-License-Identifier: Apache-2.0 */
#include "supervisor.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fds.h"
#include "init.h"
#include "phases.h"
#include "rootfs.h"
#include "run_files.h"
#include "sanitized.h"
#include "stack.h"
#include "syscall_filter.h"
#include "util.h"

/* No cgroup namespace for pid 1: each exec makes its own once it is in its
 * leaf (exec.c). On cgroup v2 mounted with nsdelegate (as systemd mounts
 * it) the kernel refuses to move a process across a cgroup namespace's
 * boundary, and the exec leaves lie outside any namespace rooted at pid 1's
 * cgroup; pid 1 itself runs only sbx's own code and never sees a cgroupfs. */
#define NS_FLAGS                                                                                   \
	(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS)

extern char **environ;

/* Counters the kernel keeps per (user namespace, uid) and charges up the
 * chain of namespaces to the initial one, where they belong to the uid that
 * made the sandbox's user namespace: sbxd's, whatever uid the sandbox runs
 * as (the host uid of the run's own only moves what is kept per host uid).
 * Without a bound of the run's own, one run could take all of sbxd's uid's
 * inotify instances (fs.inotify.max_user_instances, 128 by default), and
 * every other run's and sbxd's user's inotify_init would fail. The run's
 * namespace is ours to limit: each of its limits bounds the run as a whole,
 * since every exec's namespace is a child of it. The numbers are in
 * SBX_RUN_UCOUNTS (rootfs.h) and docs/operator/host-pools.md. */
static int bound_run_ucounts(struct sbx_err *err)
{
	static const struct {
		const char *name;
		const char *value;
	} limits[] = {SBX_RUN_UCOUNTS};
	for (size_t i = 0; i < SBX_ARRAY_SIZE(limits); i++) {
		char path[64];
		snprintf(path, sizeof(path), "/proc/sys/user/%s", limits[i].name);
		if (sbx_write_at(AT_FDCWD, path, limits[i].value, err) < 0 && err->errnum != ENOENT)
			return -1;
	}
	return 0;
}

/* The helper's own environment is copied into pid 1's memory by fork and
 * would stay readable there; zero it so no credential can be found. */
static void scrub_environment(void)
{
	for (char **e = environ; e && *e; e++)
		explicit_bzero(*e, strlen(*e));
	clearenv();
}

__attribute__((noreturn)) static void sandbox_child(const struct sbx_sandbox_opts *o,
						    struct sbx_sandbox *sb, int sync_fd, int bpf_fd)
{
	struct sbx_err err;
	char byte;
	/* If the helper dies, so does the sandbox; the read below catches a
	 * helper that died before the prctl. Without it the sandbox could
	 * outlive its helper: fail closed. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
		_exit(1);
	if (read(sync_fd, &byte, 1) != 1)
		_exit(1);
	close(sync_fd);
	/* With a host uid of the run's own, newgidmap allowed setgroups: the
	 * caller's supplementary groups would otherwise follow the sandbox
	 * user to the host (a group the caller is in is no business of a
	 * uid that is not the caller). */
	if (o->host_ids == SBX_HOST_IDS_SUBORDINATE && setgroups(0, NULL) < 0) {
		sbx_fail_errno(&err, "dropping supplementary groups");
		goto fail;
	}
	/* Before anything of the sandbox runs, through the host's /proc
	 * (user sysctls are the writer's user namespace's). */
	if (bound_run_ucounts(&err) < 0)
		goto fail;
	scrub_environment();
	/* pid 1 keeps only its control socket and the run's cgroup: whatever
	 * else the helper held (the other end of the socket in `run`, fds
	 * leaked to us by whoever started us) must not keep anything alive. */
	int keep[2 + SBX_CG_NCTRL];
	size_t nkeep = 0;
	keep[nkeep++] = o->ctl;
	keep[nkeep++] = bpf_fd;
	for (int i = 0; i < SBX_CG_NCTRL; i++)
		if (sb->run.fd[i] >= 0)
			keep[nkeep++] = sb->run.fd[i];
	if (sbx_close_fds_except(keep, nkeep, &err) < 0)
		goto fail;
	/* A server that stops reading must not freeze pid 1 (and with it every
	 * deadline): a send that cannot complete in 10 s ends the sandbox.
	 * Without the timeout that promise is gone: fail closed. */
	struct timeval tv = {.tv_sec = 10};
	if (setsockopt(o->ctl, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0) {
		sbx_fail_errno(&err, "control socket send timeout");
		goto fail;
	}

	int out_fd = -1, sysctl_dir = -1;
	if (sethostname("sbx", 3) < 0 || setdomainname("sbx", 3) < 0) {
		/* The first act that needs a capability in the new namespaces:
		 * where Ubuntu's AppArmor restriction let the clone through into
		 * its unprivileged_userns profile, which denies them all, this is
		 * where a sandbox fails. */
		if (errno == EPERM)
			sbx_fail_errno(&err, "hostname: no capabilities in the sandbox's new user "
					     "namespace; `sbx-helper check` names the fix");
		else
			sbx_fail_errno(&err, "hostname");
		goto fail;
	}
	/* pid 1's own network namespace holds nothing: each exec gets a
	 * fresh one with its loopback (netns.h). */
	if (sbx_rootfs_build(o->policy, o->data_dir, o->data_no_symlinks, &o->image_root,
			     &sysctl_dir, &err) < 0)
		goto fail;
	sbx_phase_mark(SBX_PHASE_MOUNTS);
	if (sbx_policy_mount(o->policy, "/out")) {
		out_fd = open("/out", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (out_fd < 0) {
			sbx_fail_errno(&err, "open /out");
			goto fail;
		}
	}
	/* The supervisor compiled the filter meanwhile; no filter, no sandbox. */
	struct sock_fprog filter;
	if (sbx_seccomp_read_bpf(bpf_fd, &filter, &err) < 0)
		goto fail;
	close(bpf_fd);
	struct sbx_init_ctx ctx = {
	    .policy = o->policy,
	    .nofile = o->nofile,
	    .ctl = o->ctl,
	    .run = &sb->run,
	    .out_fd = out_fd,
	    .sysctl_dir = sysctl_dir,
	    .seccomp = true,
	    .filter = &filter,
	    .prepare_execs = o->prepare_execs,
	    .prepare_first = o->prepare_first,
	    .served = o->served,
	};
	sbx_init_main(&ctx);
fail:
	sbx_init_send_failure(o->ctl, err.msg);
	_exit(1);
}

static int make_run_cgroup(const struct sbx_sandbox_opts *o, struct sbx_sandbox *sb,
			   struct sbx_err *err)
{
	sbx_cgroup_init(&sb->root);
	sbx_cgroup_init(&sb->run);
	if (sbx_cgroup_open_root(o->cgroup_root,
				 SBX_CG_ROOT_MAY_START_SCOPE | SBX_CG_ROOT_FOR_SANDBOX, &sb->root,
				 err) < 0) {
		if (!o->rlimit_fallback)
			return -1;
		return 0; /* mode NONE everywhere: rlimits, and the result says so */
	}
	uint32_t rnd = 0;
	if (getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd))
		return sbx_fail_errno(err, "getrandom");
	snprintf(sb->run_name, sizeof(sb->run_name), "sbx-%d-%08x", (int)getpid(), rnd);
	/* pid 1 itself stays where the caller is: it is not what the limits are
	 * for, and every v1 migration costs an RCU grace period. Only execs
	 * move, into leaves under this one. */
	if (sbx_cgroup_create(&sb->root, sb->run_name, true, &sb->run, err) < 0)
		return -1;
	/* Each exec is limited in its own leaf, but the files execs leave in
	 * /tmp, /dev/shm and /out stay charged to the run after their leaves
	 * are gone: the run as a whole gets a bound that fits one exec plus
	 * full tmpfs mounts, shared by execs that run at once (an OOM that
	 * this bound causes is reported as such, init.c). Socket buffers of
	 * all execs together (v1's separate counter): one exec's worth. */
	const Sbx__V1__Limits *l = o->policy->limits;
	uint64_t run_mb = sbx_run_memory_mb(l->memory_mb, l->out_mb, l->tmp_mb);
	if (sbx_cgroup_set_run_limits(&sb->run, run_mb << 20, l->memory_mb << 20, err) < 0)
		return sbx_err_prefix(err, "cgroup %s", sb->run.path);
	/* limits.pids and limits.cpu bound the run, not each of its execs. */
	if (sbx_cgroup_set_run_share(&sb->run, l, err) < 0)
		return -1;
	return 0;
}

/* What the child that joined the slot's user namespace reports. */
struct slot_clone_report {
	pid_t pid; /* pid 1, our child (CLONE_PARENT); -1: none was made */
	int rc;	   /* -1: failed, err says why (and pid 1, if made, must die) */
	struct sbx_err err;
};

/* pid 1's maps in the slot's namespace: its 0 and the sandbox id, which
 * that namespace maps to the caller and to the slot already. */
static int slot_write_maps(pid_t pid, struct sbx_err *err)
{
	char map[64];
	snprintf(map, sizeof(map), "0 0 1\n%u %u 1\n", SBX_SANDBOX_UID, SBX_SANDBOX_UID);
	if (sbx_write_proc(pid, "uid_map", map, err) < 0)
		return -1;
	return sbx_write_proc(pid, "gid_map", map, err);
}

/* What the joiner needs: it runs in our memory (joiner_main). */
struct joiner_args {
	const struct sbx_sandbox_opts *o;
	struct sbx_sandbox *sb;
	int sync_r, sync_w, bpf_r, bpf_w, rep_r, rep_w;
	uid_t self_uid;
	gid_t self_gid;
};

/* The joiner: joins the slot's namespace, checks its maps, clones pid 1
 * and maps it, reports, exits. It shares our memory but for a sanitized
 * build (clone_in_slot), so it writes only its own stack and the fds it
 * closes are its copies. */
static int joiner_main(void *arg)
{
	const struct joiner_args *a = arg;
	struct slot_clone_report r = {.pid = -1, .rc = -1};
	close(a->rep_r);
	/* pid 1 must see our end of these close when the helper dies. */
	close(a->sync_w);
	close(a->bpf_w);
	if (setns(a->sb->ids.userns_fd, CLONE_NEWUSER) < 0)
		sbx_fail_errno(&r.err, "joining the slot's user namespace");
	else if (sbx_host_ids_maps_check(&a->sb->ids, a->self_uid, a->self_gid, SBX_SANDBOX_UID,
					 &r.err) == 0) {
		close(a->sb->ids.userns_fd);
		/* A copy of our memory, not a share: pid 1 goes on in it,
		 * on this stack, and never returns from sandbox_child. */
		r.pid = (pid_t)syscall(SYS_clone, NS_FLAGS | CLONE_PARENT, NULL, NULL, NULL, NULL);
		if (r.pid == 0) {
			/* Only the joiner writes the report: if it dies,
			 * our read ends at once. */
			close(a->rep_w);
			sandbox_child(a->o, a->sb, a->sync_r, a->bpf_r);
		}
		if (r.pid < 0)
			sbx_fail_errno(&r.err, "cannot create the sandbox's namespaces "
					       "(user, mount, pid, net, ipc, uts) in the "
					       "slot's; `sbx-helper check` names the fix");
		else if (slot_write_maps(r.pid, &r.err) == 0)
			r.rc = 0;
	}
	sbx_report_exit(a->rep_w, &r, sizeof(r));
}

/* pid 1 in a user namespace made inside the slot's, which sbxd made and
 * mapped once (host_ids.h), so no setuid tool runs for this run. setns
 * into a user namespace is for a process of one thread, and it would put
 * every later act of the helper (cgroups, the run's files, the /out
 * reader's joins) under that namespace's capabilities; so a child of
 * ours joins it, checks its maps (a namespace of another slot or none
 * would run two runs as one uid), clones pid 1 as our child
 * (CLONE_PARENT: we reap it and it dies with us) and writes its maps,
 * which it may, holding every capability in the parent namespace where
 * both ids are mapped. It keeps nothing and exits.
 *
 * The joiner shares our memory while we wait for it (CLONE_VM |
 * CLONE_VFORK, as posix_spawn starts a child), on a stack of its own (stack.h):
 * a fork's copy of our page tables, its copy-on-write faults and its
 * exit's teardown of them were ~1 ms of every cold CreateRun here, and
 * we only wait meanwhile (under a sanitizer it is forked: sanitized.h).
 * The kernel registers no rseq area for a CLONE_VM child, so pid 1,
 * cloned from it, has none either: glibc then reads a stale cpu from it
 * (sched_getcpu), which nothing here asks. pid 1 and its exec inits live
 * on that stack in their copies: JOINER_STACK is ~6x the deepest path
 * from joiner_main (~77 KB, -fcallgraph-info, review 39), its pages are
 * memory only once touched (though a host of strict overcommit charges
 * all 512 KiB to each of those processes: review 40), and it is unmapped
 * here once the joiner is reaped (pid 1's copy is its own).
 * Returns pid 1 or -1; on -1 with *pid1 > 0 pid 1 was made and is ours
 * to kill and reap. */
static pid_t clone_in_slot(const struct sbx_sandbox_opts *o, struct sbx_sandbox *sb, int sync[2],
			   int bpf[2], pid_t *pid1, struct sbx_err *err)
{
	/* Over a guard of SBX_STACK_GUARD (stack.h): glibc's frames, not
	 * built with stack-clash probes, take at most 64 KiB at once. */
	enum { JOINER_STACK = 512 << 10 };
	_cleanup_close_pair_ int rep[2] = SBX_PAIR_INIT;
	*pid1 = -1;
	if (pipe2(rep, O_CLOEXEC) < 0)
		return sbx_fail_errno(err, "pipe");
	struct joiner_args a = {.o = o,
				.sb = sb,
				.sync_r = sync[0],
				.sync_w = sync[1],
				.bpf_r = bpf[0],
				.bpf_w = bpf[1],
				.rep_r = rep[0],
				.rep_w = rep[1],
				.self_uid = geteuid(),
				.self_gid = getegid()};
	pid_t joiner;
	struct sbx_stack stack = {0};
	if (SBX_SANITIZED) {
		joiner = sbx_fork_single();
		if (joiner == 0)
			joiner_main(&a); /* does not return */
		if (joiner < 0)
			return sbx_fail_errno(err, "fork the slot's joiner");
	} else {
		if (sbx_stack_map(JOINER_STACK, &stack) < 0)
			return sbx_fail_errno(err, "a stack for the slot's joiner");
		joiner = clone(joiner_main, stack.top, CLONE_VM | CLONE_VFORK | SIGCHLD, &a);
		if (joiner < 0) {
			sbx_fail_errno(err, "clone the slot's joiner");
			sbx_stack_unmap(&stack);
			return -1;
		}
	}
	close(sbx_steal_fd(rep[1]));
	struct slot_clone_report r;
	bool reported = sbx_report_collect(rep[0], joiner, &r, sizeof(r), NULL);
	/* Reaped: nothing runs on it here any more. */
	sbx_stack_unmap(&stack);
	if (!reported)
		return sbx_fail(err, "the process joining the slot's user namespace died");
	*pid1 = r.pid;
	if (r.rc < 0) {
		*err = r.err;
		return -1;
	}
	return r.pid;
}

int sbx_sandbox_start(const struct sbx_sandbox_opts *o, struct sbx_sandbox *sb, struct sbx_err *err)
{
	_cleanup_close_pair_ int sync[2] = SBX_PAIR_INIT;
	_cleanup_close_pair_ int bpf[2] = SBX_PAIR_INIT;

	memset(sb, 0, sizeof(*sb));
	sb->pid = -1;
	sb->userns_fd = -1;
	sb->ids.lock_fd = -1;
	sb->ids.userns_fd = -1;
	if (o->slot) {
		/* Ours from here: finish closes them whatever happens. */
		sb->ids = *o->slot;
		if (sbx_host_ids_given_check(o->host_id_dir, &sb->ids, err) < 0)
			goto fail;
	} else if (sbx_host_ids_take(o->host_ids, o->host_id_dir, &sb->ids, err) < 0) {
		goto fail;
	}
	sbx_phase_mark(SBX_PHASE_PREPARED);
	if (make_run_cgroup(o, sb, err) < 0)
		goto fail;
	sbx_phase_mark(SBX_PHASE_CGROUP);
	if (pipe2(sync, O_CLOEXEC) < 0 || pipe2(bpf, O_CLOEXEC) < 0) {
		sbx_fail_errno(err, "pipe");
		goto fail;
	}
	pid_t pid;
	bool in_slot = sb->ids.userns_fd >= 0;
	if (in_slot) {
		pid = clone_in_slot(o, sb, sync, bpf, &sb->pid, err);
		close(sbx_steal_fd(sb->ids.userns_fd));
		if (pid < 0) {
			if (sb->pid > 0)
				kill(sb->pid, SIGKILL);
			goto fail;
		}
	} else {
		pid = (pid_t)syscall(SYS_clone, NS_FLAGS | SIGCHLD, NULL, NULL, NULL, NULL);
		if (pid < 0) {
			sbx_fail_errno(err,
				       "cannot create the sandbox's namespaces (user, mount, "
				       "pid, net, ipc, uts); `sbx-helper check` names the fix");
			goto fail;
		}
		if (pid == 0) {
			close(sync[1]);
			close(bpf[1]);
			sandbox_child(o, sb, sync[0], bpf[0]);
		}
	}
	sb->pid = pid;
	sbx_phase_mark(SBX_PHASE_CLONED);
	close(sbx_steal_fd(sync[0]));
	close(sbx_steal_fd(bpf[0]));
	/* Opened while pid 1 is still a plain copy of us (dumpable, our
	 * credentials): later it may not be. */
	char ns[64];
	snprintf(ns, sizeof(ns), "/proc/%d/ns/user", (int)pid);
	sb->userns_fd = open(ns, O_RDONLY | O_CLOEXEC);
	if (sb->userns_fd < 0) {
		sbx_fail_errno(err, "open %s", ns);
		goto fail;
	}
	_Static_assert(SBX_SANDBOX_UID == SBX_SANDBOX_GID, "one id maps both");
	/* In the slot's namespace pid 1 is mapped already (clone_in_slot). */
	struct sbx_idmap_job job = {.tool = {{.said_fd = -1}, {.said_fd = -1}}};
	if (!in_slot && sbx_host_ids_map_start(pid, &sb->ids, SBX_SANDBOX_UID, &job, err) < 0)
		goto fail;
	/* The filter is compiled while something else runs: newuidmap and
	 * newgidmap when they do (pid 1 waits for them), else pid 1 building
	 * the root file system. A few KiB, so the pipe takes it without pid 1
	 * reading yet. On failure pid 1 reads a short program and fails
	 * closed. */
	bool tools_run = job.tool[0].child > 0;
	int rc = tools_run ? sbx_seccomp_export_bpf(bpf[1], err) : 0;
	struct sbx_err map_err;
	if (sbx_host_ids_map_finish(&job, &map_err) < 0) {
		*err = map_err;
		goto fail;
	}
	sbx_phase_mark(SBX_PHASE_MAPPED);
	if (write(sync[1], "g", 1) != 1) {
		sbx_fail_errno(err, "start sandbox");
		goto fail;
	}
	close(sbx_steal_fd(sync[1]));
	if (!tools_run)
		rc = sbx_seccomp_export_bpf(bpf[1], err);
	close(sbx_steal_fd(bpf[1]));
	/* EPIPE: pid 1 already failed and said why on the control socket. */
	if (rc < 0 && err->errnum != EPIPE)
		goto fail;
	return 0;
fail:
	/* A half-made run cgroup goes too: finish removes what was created. */
	sbx_sandbox_finish(sb, true);
	return -1;
}

/* The exec leaves under one hierarchy's run cgroup `run` (an fd of its
 * own: its offset moves). Listed with getdents64 into a buffer on the
 * stack, not readdir: a DIR is a 32 KiB malloc, and at the teardown that
 * request consolidated the helper's heap, writing pages it still shares
 * copy-on-write since its forks (~30 page faults on the teardown's path,
 * ~13 us each on a host that hands freed memory back). */
static int remove_leaves(int run, const char *where, const char *name, struct sbx_err *err)
{
	_Alignas(struct dirent64) char buf[2048];
	int rc = 0;

	for (;;) {
		ssize_t n = getdents64(run, buf, sizeof(buf));
		if (n < 0)
			return sbx_fail_errno(err, "cgroup %s/%s", where, name);
		if (n == 0)
			return rc;
		for (ssize_t off = 0; off < n;) {
			const struct dirent64 *de = (const struct dirent64 *)(buf + off);
			off += de->d_reclen;
			if (de->d_type == DT_DIR && de->d_name[0] != '.' &&
			    sbx_cgroup_rmdir(run, de->d_name, where, err) < 0)
				rc = -1;
		}
	}
}

int sbx_sandbox_remove_cgroup(const struct sbx_cgroup *root, const char *name, struct sbx_err *err)
{
	int rc = 0;
	int nctrl = root->mode == SBX_CG_V1 ? SBX_CG_NCTRL : 1;
	for (int i = 0; i < nctrl; i++) {
		if (root->fd[i] < 0)
			continue;
		_cleanup_close_ int run =
		    openat(root->fd[i], name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (run < 0)
			continue;
		if (remove_leaves(run, root->path, name, err) < 0)
			rc = -1;
		if (sbx_cgroup_rmdir(root->fd[i], name, root->path, err) < 0)
			rc = -1;
	}
	return rc;
}

int sbx_sandbox_finish(struct sbx_sandbox *sb, bool kill_first)
{
	int status = 0;
	if (sb->pid > 0) {
		if (kill_first)
			kill(sb->pid, SIGKILL);
		while (waitpid(sb->pid, &status, __WALL) < 0 && errno == EINTR)
			;
		sb->pid = -1;
	}
	if (sb->run.mode != SBX_CG_NONE) {
		struct sbx_err err;
		sbx_cgroup_close(&sb->run);
		if (sbx_sandbox_remove_cgroup(&sb->root, sb->run_name, &err) < 0)
			fprintf(stderr, "sbx-helper: warning: %s\n", err.msg);
		sb->run.mode = SBX_CG_NONE;
	}
	sbx_cgroup_close(&sb->root);
	/* pid 1 is reaped, and the kernel ended every process of its pid
	 * namespace before that: nothing runs as the slot's uid any more. */
	sbx_host_ids_release(&sb->ids);
	if (sb->userns_fd >= 0)
		close(sb->userns_fd);
	sb->userns_fd = -1;
	return status;
}
