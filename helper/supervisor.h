/* SPDX-License-Identifier: Apache-2.0 */
/* Creating a sandbox and cleaning up after it, from outside. */
#ifndef SBX_SUPERVISOR_H
#define SBX_SUPERVISOR_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "cgroup.h"
#include "err.h"
#include "host_ids.h"
#include "policy.h"
#include "rootfs.h"

struct sbx_sandbox_opts {
	const SbxPolicy *policy;
	const char *data_dir;	 /* NULL: empty /data */
	bool data_no_symlinks;	 /* resolve data_dir without following links */
	const char *cgroup_root; /* NULL: the default delegated root */
	bool rlimit_fallback;	 /* no cgroup: rlimits instead of failing */
	uint64_t nofile;	 /* each command process's RLIMIT_NOFILE */
	int ctl;		 /* the sandbox's end of the control socket */
	/* A store image's tree and its identity (the policy names its pin);
	 * path NULL: none. */
	struct sbx_image_root image_root;
	enum sbx_host_ids_mode host_ids; /* the sandbox user's host uid (host_ids.h) */
	const char *host_id_dir;	 /* NULL: the default lock directory */
	/* The slot sbxd took (serve --host-slot), whose lock and user
	 * namespace the sandbox takes over; NULL: take one here. */
	const struct sbx_host_ids *slot;
	bool prepare_execs; /* serve: pid 1 makes the next exec init ahead */
	bool prepare_first; /* ... and the first one before it sends Ready */
	bool served;	    /* serve: sbxd reads the execs' deny resolvers */
};

struct sbx_sandbox {
	pid_t pid; /* the sandbox's pid 1 */
	struct sbx_cgroup root;
	struct sbx_cgroup run;
	char run_name[64];
	struct sbx_host_ids ids; /* held until pid 1 is gone */
	/* pid 1's user namespace: whoever reads /out from outside joins it
	 * (a process of its own), since the sandbox's files belong to a uid
	 * the caller has no rights over elsewhere. -1: none. */
	int userns_fd;
};

/* Builds the namespaces, maps the sandbox user, places pid 1 in the run's
 * cgroup and lets it build the file system. Errors before pid 1 exists are
 * returned here; later ones arrive as a Failure on the control socket. */
int sbx_sandbox_start(const struct sbx_sandbox_opts *opts, struct sbx_sandbox *sb,
		      struct sbx_err *err);

/* Waits for pid 1 to end (kill first if `kill_first`) and removes the run's
 * cgroups. Returns pid 1's wait status. */
int sbx_sandbox_finish(struct sbx_sandbox *sb, bool kill_first);

/* Removes a run cgroup tree, children first. */
int sbx_sandbox_remove_cgroup(const struct sbx_cgroup *root, const char *name, struct sbx_err *err);

#endif
