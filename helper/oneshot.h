/* SPDX-License-Identifier: Apache-2.0 */
/* The helper's two ways of being driven: `run` (one command, then gone)
 * and `serve` (a long-lived sandbox driven over a control socket). */
#ifndef SBX_ONESHOT_H
#define SBX_ONESHOT_H

#include <stdbool.h>
#include <stdint.h>

#include "host_ids.h"
#include "policy.h"
#include "rootfs.h"

struct sbx_helper_opts {
	const char *policy_path;
	const char *data_dir;
	bool data_no_symlinks;
	/* serve: a store image's tree and its identity (the policy names its pin) */
	struct sbx_image_root image_root;
	const char *out_dir;
	const char *result_path;
	const char *timings_path; /* run: phases.h */
	const char *cgroup_root;
	bool rlimit_fallback;
	uint64_t nofile; /* each command process's RLIMIT_NOFILE (run_files.h) */
	int control_fd;
	/* serve: sbxd's end of the /out reader's socket (sbx_out_reader), or -1 */
	int reader_fd;
	enum sbx_host_ids_mode host_ids;
	const char *host_id_dir;
	/* serve --host-slot: the slot sbxd took, with its lock and user
	 * namespace (host_ids.h); slot_given false: the helper takes one */
	struct sbx_host_ids slot;
	bool slot_given;
	bool no_prepare;    /* serve: every exec's init made at its request */
	bool prepare_first; /* serve: the first exec's init made before Ready */
	char **argv;
};

/* Exit status: the command's own; 128+N for signal N; 124 timeout; 125
 * the sandbox could not be set up; 126 not executable; 127 not found. */
int sbx_oneshot_run(const struct sbx_helper_opts *opts, SbxPolicy *policy);

/* pid 1 talks to whoever holds the other end of control_fd; returns when
 * the sandbox is gone and cleaned up. */
int sbx_serve(const struct sbx_helper_opts *opts, SbxPolicy *policy);

/* What `run` (oneshot) or `serve` can enforce of a policy here; else an
 * error. image_root: serve was given --image-root (the tree of the
 * policy's pinned image). */
int sbx_policy_supported(const SbxPolicy *p, bool oneshot, const char *image_root,
			 struct sbx_err *err);

#endif
