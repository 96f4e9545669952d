/* SPDX-License-Identifier: Apache-2.0 */
/* CreateRun: from a policy to a sandbox that is ready for inputs and execs.
 *
 * Order matters for the answers a caller gets: a malformed request is
 * INVALID_ARGUMENT (or PERMISSION_DENIED for an input_dir outside what the
 * config allows), a policy this host cannot enforce FAILED_PRECONDITION
 * naming what is missing, a full host RESOURCE_EXHAUSTED, and nothing is
 * left behind by any failure. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "clock.h"
#include "egress.h"
#include "helper_client.h"
#include "metrics.h"
#include "runs_artifacts.h"
#include "runs_ceilings.h"
#include "runs_create.h"
#include "runs_idem.h"
#include "runs_inputs.h"
#include "runs_last_words.h"
#include "runs_lease.h"
#include "runs_manager.h"
#include "runs_monitor.h"
#include "runs_pool.h"
#include "runs_proc.h"
#include "runs_quota.h"
#include "runs_registry.h"
#include "runs_slots.h"
#include "runs_status.h"
#include "runs_teardown.h"
#include "text.h"
#include "tree.h"
#include "util.h"

#define LABELS_MAX	64
#define LABEL_BYTES_MAX 256
#define RUN_DIR_INODES	5 /* <id>/, policy.json, output/, data/, staging/ */

/* Keys of an allowlist entry whose 0 the parser refuses: left out they
 * get its default (bytes_per_second 0 means "no limit of its own", and
 * egress.alert_bytes and max_bytes 0 "none": those stay). */
static const char *const rule_defaulted[] = {"connections_per_minute", "max_concurrent"};

static void drop_zero(json_t *obj, const char *key)
{
	json_t *v = json_object_get(obj, key);

	if (json_is_number(v) && json_number_value(v) == 0)
		json_object_del(obj, key);
}

/* proto3 cannot tell an unset field from 0, and no limit accepts 0: a zero
 * limit in the message means "the default", like a key left out of the
 * JSON document. The same goes for the unspecified enum values. */
static void drop_unset(json_t *doc)
{
	json_t *limits = json_object_get(doc, "limits"), *egress = json_object_get(doc, "egress");
	const char *key;
	json_t *v;
	void *tmp;
	size_t i;

	json_object_foreach_safe(limits, tmp, key, v)
	{
		if (json_is_number(v) && json_number_value(v) == 0)
			json_object_del(limits, key);
	}
	json_array_foreach(json_object_get(egress, "allow"), i, v)
	{
		for (size_t k = 0; k < SBX_ARRAY_SIZE(rule_defaulted); k++)
			drop_zero(v, rule_defaulted[k]);
	}
	if (json_is_string(json_object_get(doc, "lifetime")) &&
	    !strcmp(json_string_value(json_object_get(doc, "lifetime")), "unspecified"))
		json_object_del(doc, "lifetime");
	/* A message that set nothing of egress: the document's default (deny).
	 * One that set a byte budget or entries but no policy is refused by
	 * the parser, naming egress.policy. */
	if (json_is_string(json_object_get(egress, "policy")) &&
	    !strcmp(json_string_value(json_object_get(egress, "policy")), "unspecified") &&
	    json_array_size(json_object_get(egress, "allow")) == 0 &&
	    json_integer_value(json_object_get(egress, "alert_bytes")) == 0 &&
	    json_integer_value(json_object_get(egress, "max_bytes")) == 0)
		json_object_del(doc, "egress");
}

/* One validator for both forms: the message goes through the document's
 * parser, so every rule and error message is the JSON one. */
static SbxPolicy *request_policy(const Sbx__V1__CreateRunRequest *req, struct sbx_rpc_status *st)
{
	bool has_json = req->policy_json && req->policy_json[0];
	SbxPolicy *p;

	if (has_json == (req->policy != NULL)) {
		sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
			     "give exactly one of policy_json and policy");
		return NULL;
	}
	if (has_json) {
		p = sbx_policy_parse(req->policy_json, strlen(req->policy_json), &st->err);
	} else {
		_cleanup_free_ char *raw = sbx_policy_to_json(req->policy);
		_cleanup_free_ char *json = NULL;
		json_t *doc = raw ? json_loads(raw, 0, NULL) : NULL;

		if (doc) {
			drop_unset(doc);
			json = json_dumps(doc, JSON_COMPACT | JSON_REAL_PRECISION(10));
			json_decref(doc);
		}
		if (!json) {
			sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "policy: out of memory");
			return NULL;
		}
		p = sbx_policy_parse(json, strlen(json), &st->err);
	}
	if (!p) {
		/* Every problem, on the one line a status message has. */
		sbx_policy_problems_one_line(&st->err);
		sbx_rpc_code(st, SBX__V1__CODE__INVALID_ARGUMENT);
	}
	return p;
}

/* A store image: resolved, verified and held (images.h) for the run's
 * life. The effective policy names what runs: an unpinned name:tag (if the
 * config allows it) becomes the pinned form it resolved to, so the
 * policy's digest, the manifest and the helper all say one image. */
static int resolve_image(struct sbx_run *r, struct sbx_rpc_status *st)
{
	struct sbx_runs *runs = r->runs;
	char *pinned;
	int rc;

	if (!runs->images)
		return sbx_rpc_fail(st, SBX__V1__CODE__FAILED_PRECONDITION,
				    "image: %.200s: this sbxd has no image store%s%.600s; only "
				    "\"host\" can be used",
				    r->policy->image, runs->images_down[0] ? ": " : "",
				    runs->images_down);
	rc = img_store_resolve(runs->images, r->policy->image, runs->cfg.allow_unpinned, &r->image,
			       &st->err);
	if (rc == IMG_REFUSED)
		return sbx_rpc_code(st, SBX__V1__CODE__FAILED_PRECONDITION);
	if (rc == IMG_BUSY)
		return sbx_rpc_code(st, SBX__V1__CODE__UNAVAILABLE);
	if (rc < 0)
		return sbx_rpc_code(st, SBX__V1__CODE__INTERNAL);
	snprintf(r->image_digest, sizeof(r->image_digest), "%s", r->image.digest);
	if (strcmp(r->policy->image, r->image.pinned) == 0)
		return 0;
	if (!(pinned = strdup(r->image.pinned)))
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
	free(r->policy->image);
	r->policy->image = pinned;
	return 0;
}

/* Invariant 9: never a weaker sandbox than the policy says. */
static int check_enforceable(struct sbx_run *r, struct sbx_rpc_status *st)
{
	const struct sbx_runs *runs = r->runs;
	const SbxPolicy *p = r->policy;

	/* Without the proxy an exec's listener would have nobody accepting on
	 * it: nothing would leak, but the policy's allowlist would be a lie. */
	if (p->egress->policy == SBX__V1__EGRESS__POLICY__ALLOWLIST && !runs->egress)
		return sbx_rpc_fail(st, SBX__V1__CODE__FAILED_PRECONDITION,
				    "egress: this sbxd's egress proxy did not start%s%.400s; only "
				    "deny can be enforced",
				    runs->egress_down[0] ? ": " : "", runs->egress_down);
	if (strcmp(p->image, "host") == 0) {
		snprintf(r->image_digest, sizeof(r->image_digest), "unpinned");
		return 0;
	}
	/* A rootfs directory named by a caller would bring whatever host
	 * directory it names (and sbxd can read) into the sandbox: sbxd takes
	 * only the host image and the pinned trees of its own store. */
	if (p->image[0] == '/')
		return sbx_rpc_fail(
		    st, SBX__V1__CODE__FAILED_PRECONDITION,
		    "image: %.200s: sbxd takes \"host\" or an image of its store "
		    "(name:tag@sha256:...); rootfs directories are for sbx-helper run",
		    p->image);
	return resolve_image(r, st);
}

static int copy_labels(struct sbx_run *r, const Sbx__V1__CreateRunRequest *req,
		       struct sbx_rpc_status *st)
{
	size_t n = req->n_labels;

	if (n > LABELS_MAX)
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				    "labels: %zu entries, at most %d", n, LABELS_MAX);
	for (size_t i = 0; i < n; i++) {
		const char *k = req->labels[i]->key, *v = req->labels[i]->value;

		if (!k[0] || strlen(k) > LABEL_BYTES_MAX || strlen(v) > LABEL_BYTES_MAX)
			return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
					    "labels[%.64s]: keys must be 1..%d bytes and values "
					    "at most %d",
					    k, LABEL_BYTES_MAX, LABEL_BYTES_MAX);
		for (size_t j = 0; j < i; j++)
			if (!strcmp(req->labels[j]->key, k))
				return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
						    "labels: duplicate key %.64s", k);
	}
	if (n == 0)
		return 0;
	r->label_keys = calloc(n, sizeof(char *));
	r->label_values = calloc(n, sizeof(char *));
	if (!r->label_keys || !r->label_values)
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
	for (size_t i = 0; i < n; i++) {
		r->label_keys[i] = strdup(req->labels[i]->key);
		r->label_values[i] = strdup(req->labels[i]->value);
		r->n_labels = i + 1;
		if (!r->label_keys[i] || !r->label_values[i])
			return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
	}
	return 0;
}

static bool under(const char *path, const char *dir)
{
	size_t n = strlen(dir);

	if (n == 1 && dir[0] == '/')
		return path[0] == '/';
	return strncmp(path, dir, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

/* A caller on this host may name a directory as /data, if the config
 * allows one above it. Checked on the resolved path, on a path boundary
 * (so /srv/in does not allow /srv/inputs-of-someone-else).
 *
 * sbxd can see more than its callers, so every way a path can fail (it
 * does not resolve, resolves outside input_dirs, is not a directory, is
 * not the caller's) gets one answer, byte for byte (it does not even echo
 * the path): otherwise the answers would tell a caller what exists in a
 * directory it cannot list. The path must be canonical: a link or a ".."
 * anywhere in it is refused the same way. */
static int check_input_dir(struct sbx_run *r, const char *dir, struct sbx_rpc_status *st)
{
	const struct runs_settings *set = &r->runs->cfg;
	_cleanup_free_ char *real = NULL;
	struct stat sb;
	bool allowed = false;

	if (strncmp(r->identity, "uid:", 4) != 0)
		return sbx_rpc_fail(st, SBX__V1__CODE__PERMISSION_DENIED,
				    "input_dir is for callers on this host (ipc); upload "
				    "inputs with PutInput instead");
	if (strlen(dir) >= PATH_MAX)
		return sbx_rpc_fail_errnum(st, SBX__V1__CODE__INVALID_ARGUMENT, ENAMETOOLONG,
					   "input_dir %.200s", dir);
	/* Only a canonical path (absolute, no "..", ".", "//" or link): realpath
	 * stops at the first missing component before it looks at a later
	 * "..", so "<private>/<guess>/../../mine" would resolve iff <guess>
	 * exists. */
	if ((real = realpath(dir, NULL)) && strcmp(real, dir) == 0)
		for (size_t i = 0; i < set->n_input_dirs; i++)
			allowed |= under(real, set->input_dirs[i]);
	if (!allowed || stat(real, &sb) < 0 || !S_ISDIR(sb.st_mode) ||
	    (unsigned long)sb.st_uid != strtoul(r->identity + 4, NULL, 10))
		return sbx_rpc_fail(st, SBX__V1__CODE__PERMISSION_DENIED,
				    "input_dir: not a directory of the caller's (%s) under a "
				    "directory this sbxd allows (input_dirs in its config)",
				    r->identity);
	r->data_path = sbx_steal_ptr(real);
	r->caller_data = true;
	return 0;
}

static int validate(struct sbx_run *r, const Sbx__V1__CreateRunRequest *req,
		    const struct sbx_limits_max *max, struct sbx_rpc_status *st)
{
	bool has_data = sbx_policy_mount(r->policy, "/data") != NULL;
	bool has_dir = req->input_dir && req->input_dir[0];

	if (copy_labels(r, req, st) < 0)
		return -1;
	if ((has_dir || req->n_inputs) && !has_data)
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				    "%s: the policy mounts no /data",
				    has_dir ? "input_dir" : "inputs");
	if (has_dir && req->n_inputs)
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				    "inputs: a run with input_dir takes no uploads; give one or "
				    "the other");
	if (ceilings_check(max, r->policy, req, st) < 0 || inputs_from_request(r, req, st) < 0)
		return -1;
	if (has_dir && check_input_dir(r, req->input_dir, st) < 0)
		return -1;
	return check_enforceable(r, st);
}

/* 128 random bits: unique across hosts as well as on this one (where the
 * mkdir below also refuses a repeat), with no coordination between hosts:
 * among a billion runs of a fleet, a collision is about 1 in 10^20
 * (docs/reference/calls.md, Run ids). */
static void new_run_id(char id[RUN_ID_BUF])
{
	uint8_t b[16] = {0};
	size_t got = 0;

	while (got < sizeof(b)) {
		ssize_t n = getrandom(b + got, sizeof(b) - got, 0);

		if (n > 0)
			got += (size_t)n;
		else if (errno != EINTR)
			abort(); /* no entropy source at all: nothing sane to do */
	}
	memcpy(id, "run-", 4);
	for (size_t i = 0; i < sizeof(b); i++)
		snprintf(id + 4 + 2 * i, RUN_ID_BUF - 4 - 2 * i, "%02x", b[i]);
}

static int write_file_at(int dirfd, const char *name, const char *text, struct sbx_err *err)
{
	_cleanup_close_ int fd =
	    openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	size_t len = strlen(text), off = 0;

	if (fd < 0)
		return sbx_fail_errno(err, "create %s", name);
	while (off < len) {
		ssize_t n = write(fd, text + off, len - off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return sbx_fail_errno(err, "write %s", name);
		off += (size_t)n;
	}
	return 0;
}

/* state_dir/runs/<id>/{policy.json, data/, output/} */
static int make_run_dir(struct sbx_run *r, struct sbx_err *err)
{
	const char *runs_dir = r->runs->cfg.runs_dir;
	_cleanup_close_ int runs = open(runs_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	_cleanup_free_ char *json = sbx_policy_to_json(r->policy);
	int tries = 0, made;

	if (runs < 0)
		return sbx_fail_errno(err, "%s", runs_dir);
	if (!json)
		return sbx_fail_errnum(err, ENOMEM, "policy");
	do {
		new_run_id(r->id);
		made = mkdirat(runs, r->id, 0700);
	} while (made < 0 && errno == EEXIST && ++tries < 4);
	/* The mkdir's own errno (ENOSPC on a full disk) is the answer, not
	 * the ENOENT of an open after it. */
	if (made < 0)
		return sbx_fail_errno(err, "mkdir %s/%s", runs_dir, r->id);
	if ((r->dir_fd = openat(runs, r->id, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW)) < 0)
		return sbx_fail_errno(err, "open %s/%s", runs_dir, r->id);
	if (asprintf(&r->dir, "%s/%s", runs_dir, r->id) < 0) {
		r->dir = NULL;
		return sbx_fail_errnum(err, ENOMEM, "run dir");
	}
	if (write_file_at(r->dir_fd, "policy.json", json, err) < 0)
		return -1;
	if (mkdirat(r->dir_fd, "output", 0700) < 0 ||
	    (r->spill_fd = openat(r->dir_fd, "output", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		return sbx_fail_errno(err, "mkdir %s/output", r->dir);
	if (r->caller_data || !sbx_policy_mount(r->policy, "/data"))
		return 0;
	/* 0755: the sandbox user is another uid (common/host_ids.h), or ours
	 * ("shared"); /data is read-only to it either way. */
	if (mkdirat(r->dir_fd, "data", 0755) < 0 ||
	    (r->data_fd = openat(r->dir_fd, "data", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		return sbx_fail_errno(err, "mkdir %s/data", r->dir);
	/* Uploads are written here, beside /data's tree and on its file
	 * system, and renamed into it complete: no exec sees a partial file. */
	if (mkdirat(r->dir_fd, "staging", 0700) < 0 ||
	    (r->staging_fd = openat(r->dir_fd, "staging", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		return sbx_fail_errno(err, "mkdir %s/staging", r->dir);
	if (asprintf(&r->data_path, "%s/data", r->dir) < 0) {
		r->data_path = NULL;
		return sbx_fail_errnum(err, ENOMEM, "run dir");
	}
	return 0;
}

static void remove_run_dir(struct sbx_run *r)
{
	_cleanup_close_ int runs = open(r->runs->cfg.runs_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct sbx_err err;

	if (runs >= 0 && r->id[0] && sbx_remove_tree_at(runs, r->id, &err) < 0) {
		run_lock(r);
		run_alert(r, "sbxd: could not remove the run directory: %s", err.msg);
		run_unlock(r);
	}
}

/* With an allowlist: the run's place in the egress proxy, before the
 * sandbox can hand it a listener. */
static int open_egress(struct sbx_run *r, struct sbx_rpc_status *st)
{
	struct sbx_egress_run_info info = {
	    .run_id = r->id,
	    .identity = r->identity,
	    .policy_digest = r->policy_digest,
	    .policy = r->policy->egress,
	};

	if (r->policy->egress->policy != SBX__V1__EGRESS__POLICY__ALLOWLIST)
		return 0;
	r->egress = sbx_egress_run_open(r->runs->egress, &info, &st->err);
	if (!r->egress) {
		sbx_rpc_code(st, SBX__V1__CODE__INTERNAL);
		return sbx_rpc_prefix(st, "egress");
	}
	return 0;
}

/* Starts `sbx-helper serve` and waits for its Ready; run_files is the
 * run's share of the host's file table (config limits_max.files). */
static int start_helper(struct sbx_run *r, uint64_t run_files, bool pooled, int64_t *spawned,
			struct sbx_rpc_status *st)
{
	const struct runs_settings *set = &r->runs->cfg;
	_cleanup_free_ char *policy = NULL;
	const char *argv[31]; /* 29 at most, and the NULL */
	size_t n = 0;
	_cleanup_close_pair_ int sv[2] = SBX_PAIR_INIT;
	_cleanup_close_pair_ int ep[2] = SBX_PAIR_INIT;
	_cleanup_close_pair_ int rv[2] = SBX_PAIR_INIT;
	struct sbx_ctl_event ready;
	char errtext[4096], image_id[48], files[24], slot[80];
	/* The slot's lock and namespace, handed to the helper (fds 5 and 6)
	 * and closed here once it has them. */
	_cleanup_(sbx_host_ids_release) struct sbx_host_ids ids = {.lock_fd = -1, .userns_fd = -1};
	int rc;

	if (asprintf(&policy, "%s/policy.json", r->dir) < 0) {
		policy = NULL;
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
	}
	argv[n++] = set->helper;
	argv[n++] = "serve";
	argv[n++] = "--policy";
	argv[n++] = policy;
	argv[n++] = "--control-fd";
	argv[n++] = "3";
	argv[n++] = "--reader-fd";
	argv[n++] = "4";
	argv[n++] = "--host-uids";
	argv[n++] = set->host_uids_shared ? "shared" : "subordinate";
	if (set->host_id_dir) {
		argv[n++] = "--host-id-dir";
		argv[n++] = set->host_id_dir;
	}
	if (r->runs->slots) {
		/* EAGAIN: every slot is held by a live run. */
		if (runs_slots_take(r->runs->slots, set->helper, set->helper_env, set->host_id_dir,
				    &ids, &st->err) < 0) {
			int e = st->err.errnum;
			sbx_rpc_code(st, e == EAGAIN || e == EMFILE || e == ENFILE || e == ENOMEM
					     ? SBX__V1__CODE__RESOURCE_EXHAUSTED
					     : SBX__V1__CODE__FAILED_PRECONDITION);
			return sbx_rpc_prefix(st, "the run's host uid");
		}
		snprintf(slot, sizeof(slot), "%u,%u,5,6", (unsigned)ids.uid, (unsigned)ids.gid);
		argv[n++] = "--host-slot";
		argv[n++] = slot;
	}
	if (r->data_path) {
		argv[n++] = "--data";
		argv[n++] = r->data_path;
		/* The path was resolved and checked here; a link swapped into it
		 * since must make the helper fail, not follow it. */
		argv[n++] = "--data-no-symlinks";
	}
	if (r->image.rootfs) {
		/* The store's tree, held for the run: the helper opens it
		 * without following links, as it opens --data, and refuses it
		 * unless it is the very directory the hold found (a rename
		 * above the store could have put another at the path). */
		snprintf(image_id, sizeof(image_id), "%ju:%ju", (uintmax_t)r->image.rootfs_dev,
			 (uintmax_t)r->image.rootfs_ino);
		argv[n++] = "--image-root";
		argv[n++] = r->image.rootfs;
		argv[n++] = "--image-root-id";
		argv[n++] = image_id;
	}
	if (set->cgroup_root) {
		argv[n++] = "--cgroup-root";
		argv[n++] = set->cgroup_root;
	}
	if (set->rlimit_fallback)
		argv[n++] = "--allow-rlimit-fallback";
	if (!set->exec_prepare)
		argv[n++] = "--no-prepare";
	else if (pooled)
		/* A member counted ready starts its first exec at once: a
		 * claim right after its Ready found no init made yet. */
		argv[n++] = "--prepare-first";
	snprintf(files, sizeof(files), "%llu", (unsigned long long)run_files);
	argv[n++] = "--run-files";
	argv[n++] = files;
	argv[n] = NULL;

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0 ||
	    socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, rv) < 0 ||
	    pipe2(ep, O_CLOEXEC) < 0) {
		sbx_fail_errno(&st->err, "the helper's control and /out reader sockets and "
					 "stderr pipe");
		return sbx_rpc_code_unless_short(st, SBX__V1__CODE__INTERNAL);
	}
	r->ctl = sbx_steal_fd(sv[0]);
	r->err_pipe = sbx_steal_fd(ep[0]);
	*spawned = sbx_mono_ms();
	int fds[4] = {sv[1], rv[1], ids.lock_fd, ids.userns_fd};
	rc = proc_spawn(argv, set->helper_env, fds, r->runs->slots ? 4 : 2, ep[1], ep[1], &r->pid,
			&st->err);
	/* Our copies of the helper's ends go now: its exit must show as EOF. */
	close(sbx_steal_fd(sv[1]));
	close(sbx_steal_fd(rv[1]));
	close(sbx_steal_fd(ep[1]));
	if (rc < 0) {
		r->pid = -1;
		return sbx_rpc_code_unless_short(st, SBX__V1__CODE__INTERNAL);
	}
	/* Without a pidfd (-1) the monitor and proc_reap poll for the exit. */
	r->pidfd = pidfd_open(r->pid, 0);
	if (sbx_ctl_prepare(r->ctl, &st->err) < 0)
		return sbx_rpc_code(st, SBX__V1__CODE__INTERNAL);
	if (fcntl(r->err_pipe, F_SETFL, O_NONBLOCK) < 0)
		return sbx_rpc_fail_errno(st, SBX__V1__CODE__INTERNAL, "helper stderr");
	if (sbx_ctl_wait_ready(r->ctl, r->err_pipe, RUN_READY_TIMEOUT_MS, &ready, errtext,
			       sizeof(errtext), &st->err) < 0) {
		/* Whatever the reason, the slot's namespace is made afresh for
		 * its next run: one the helper refused is never handed out
		 * again (review 36: the lowest slot, refused on every run). */
		if (r->runs->slots && ids.userns_fd >= 0)
			runs_slots_forget(r->runs->slots, ids.uid, ids.gid);
		sbx_rpc_code(st, SBX__V1__CODE__FAILED_PRECONDITION);
		return sbx_rpc_prefix(st, "the sandbox could not be built");
	}
	r->out_fd = ready.out_fd;
	/* The reader takes /out from us now: every open beneath it goes
	 * through the reader (out_reader.h). */
	if (r->out_fd >= 0 &&
	    sbx_out_reader_init(&r->reader, sbx_steal_fd(rv[0]), r->out_fd, &st->err) < 0)
		return sbx_rpc_code_unless_short(st, SBX__V1__CODE__INTERNAL);
	r->cgroups = strcmp(ready.cgroup, "none") != 0;
	/* The lock no other thread contends for yet (the run is STARTING,
	 * its monitor not started): alerts are [mu]. */
	run_lock(r);
	/* Every stderr line the helper wrote before Ready. */
	run_alerts_from_bytes(r, errtext, strlen(errtext));
	if (!strcmp(ready.cgroup, "none"))
		run_alert(r, "sbxd: no delegated cgroup: limits are enforced by rlimits "
			     "(allowed by rlimit_fallback in sbxd's config)");
	run_unlock(r);
	return 0;
}

/* The lines of a helper's last words sbxd logs, at most LOGGED_WORDS (as
 * many as a teardown's audit line carries), then how many more: the log's
 * cost of a destroyed sandbox stays a few KiB. */
#define LOGGED_WORDS RUN_TEARDOWN_ALERTS
struct words_log {
	const struct sbx_run *r;
	size_t lines;
};

/* A line of a helper's last words, into sbxd's log: no caller has the
 * sandbox (a pool member never claimed, a create that failed). */
static void log_last_word(const char *line, size_t len, void *arg)
{
	struct words_log *wl = arg;
	char esc[SBX_ESCAPE_SIZE(RUN_ALERT_BYTES)], raw[RUN_ALERT_BYTES];

	if (wl->lines++ >= LOGGED_WORDS)
		return;
	snprintf(raw, sizeof(raw), "%.*s", (int)len, line);
	sbx_escape(esc, sizeof(esc), raw);
	fprintf(stderr, "sbxd: sandbox %s: sbx-helper said: %s\n", wl->r->id, esc);
}

void create_destroy_sandbox(struct sbx_run *r)
{
	/* Its listeners (if the sandbox got as far as an exec: never, before
	 * Ready) close with it; the run's place goes with the run. */
	if (r->egress)
		sbx_egress_run_close(r->egress);
	if (r->pid > 0) {
		struct last_words lw;

		/* A helper that reported a failure exits by itself and removes
		 * its cgroups; one that hangs is killed. What it says as it
		 * goes is read meanwhile, and logged. */
		last_words_init(&lw, r->err_pipe);
		if (r->ctl >= 0)
			close(r->ctl);
		r->ctl = -1;
		if (!last_words_reap(&lw, r->pid, r->pidfd, 1000, NULL)) {
			proc_kill_group(r->pid);
			last_words_reap(&lw, r->pid, r->pidfd, RUN_HELPER_EXIT_MS, NULL);
			runs_cleanup_cgroups(r->runs);
		}
		r->pid = -1;
		last_words_read(&lw);
		if (lw.lost)
			fprintf(
			    stderr,
			    "sbxd: sandbox %s: sbx-helper said %llu bytes more on stderr at its "
			    "end than are kept\n",
			    r->id, (unsigned long long)lw.lost);
		struct words_log wl = {.r = r};
		if (lw.kept)
			sbx_text_lines(lw.kept, lw.len, RUN_ALERT_BYTES - 1, log_last_word, &wl);
		if (wl.lines > LOGGED_WORDS)
			fprintf(stderr,
				"sbxd: sandbox %s: sbx-helper said %zu lines more, not logged\n",
				r->id, wl.lines - LOGGED_WORDS);
		last_words_free(&lw);
	}
	remove_run_dir(r);
	/* The sandbox (the only user of the tree) is gone. */
	run_release_image(r);
}

/* Undoes a CreateRun that failed after the run was registered. */
static void abandon(struct sbx_run *r)
{
	create_destroy_sandbox(r);
	quota_release_run(r);
	run_unregister(r);
}

/* The inputs are declared in full: the quota is taken (or refused) before
 * any byte is written, so an upload never fails halfway on a quota. Their
 * directories and empty files count too (inputs_disk_bytes), and the
 * inodes of all of them, with the run directory's few, must leave the
 * inode reserve. */
static int charge_inputs(struct sbx_run *r, struct sbx_rpc_status *st)
{
	return quota_charge(r, inputs_disk_bytes(r), inputs_inodes(r) + RUN_DIR_INODES, "inputs",
			    st);
}

/* A Teardown's manifest holds the effective policy and the inputs whole
 * (Status the policy and the labels): together they may take half of what
 * an answer holds, so the first and last exec records and a listing always
 * fit beside them, and no run is created whose manifest could not be sent. */
static int check_record_size(struct sbx_run *r, const Sbx__V1__CreateRunRequest *req,
			     struct sbx_rpc_status *st)
{
	size_t bound = artifacts_reply_bytes(r->runs) / 2;
	size_t policy = protobuf_c_message_get_packed_size(&r->policy->base), rest = 0;

	/* Each element: its tag and length (at most 3 bytes here) and body;
	 * an input's in the manifest also its mode and arrival time. */
	for (size_t i = 0; i < req->n_inputs; i++)
		rest += 3 + INPUT_RECORD_EXTRA +
			protobuf_c_message_get_packed_size(&req->inputs[i]->base);
	for (size_t i = 0; i < req->n_labels; i++)
		rest += 3 + protobuf_c_message_get_packed_size(&req->labels[i]->base);
	r->record_bytes = policy + rest; /* inputs added later grow it */
	if (policy + rest <= bound)
		return 0;
	return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
			    "policy, inputs and labels: %zu bytes packed (the effective policy "
			    "%zu), at most %zu: half of an answer within max_message_bytes (%llu), "
			    "as a Teardown's manifest holds them whole",
			    policy + rest, policy, bound,
			    (unsigned long long)r->runs->cfg.max_message_bytes);
}

int create_prepare(struct sbx_run *r, const char *json, const struct runs_live *live,
		   struct sbx_rpc_status *st)
{
	const Sbx__V1__CreateRunRequest none = SBX__V1__CREATE_RUN_REQUEST__INIT;
	char hex[65];

	if (!(r->policy = sbx_policy_parse(json, strlen(json), &st->err))) {
		sbx_policy_problems_one_line(&st->err);
		return sbx_rpc_code(st, SBX__V1__CODE__INVALID_ARGUMENT);
	}
	lease_fill_default(r->policy, live->idle_seconds_default);
	if (ceilings_check(&live->limits_max, r->policy, &none, st) < 0 ||
	    check_enforceable(r, st) < 0)
		return -1;
	if (sbx_policy_digest(r->policy, hex, &st->err) < 0)
		return sbx_rpc_code(st, SBX__V1__CODE__INTERNAL);
	snprintf(r->policy_digest, sizeof(r->policy_digest), "sha256:%s", hex);
	r->output_cap = r->policy->limits->output_kb * 1024;
	return 0;
}

int create_build(struct sbx_run *r, uint64_t run_files, struct sbx_rpc_status *st)
{
	int64_t spawned;

	if (make_run_dir(r, &st->err) < 0)
		return sbx_rpc_code_unless_short(st, quota_disk_full(st->err.errnum)
							 ? SBX__V1__CODE__RESOURCE_EXHAUSTED
							 : SBX__V1__CODE__INTERNAL);
	return start_helper(r, run_files, true, &spawned, st);
}

static int respond(struct sbx_run *r, Sbx__V1__CreateRunResponse **resp, struct sbx_rpc_status *st)
{
	Sbx__V1__CreateRunResponse *c = malloc(sizeof(*c));

	if (!c)
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
	sbx__v1__create_run_response__init(c);
	c->run_id = xstrdup(r->id);
	c->policy_digest = xstrdup(r->policy_digest);
	c->image_digest = xstrdup(r->image_digest);
	c->effective_policy = policy_copy(r->policy);
	c->deadline_unix_ms = r->deadline_ms;
	c->launch = r->launch;
	if (!c->run_id || !c->policy_digest || !c->image_digest || !c->effective_policy) {
		sbx__v1__create_run_response__free_unpacked(c, NULL);
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
	}
	*resp = c;
	return 0;
}

/* A new run; RUN_REGISTER_REPEAT when its idempotency key (digest with
 * it, NULL without one) was taken meanwhile. */
static int create(struct sbx_runs *runs, const struct sbx_identity *who,
		  const Sbx__V1__CreateRunRequest *req, const uint8_t *digest,
		  Sbx__V1__CreateRunResponse **resp, struct sbx_rpc_status *st)
{
	struct sbx_run *r = run_alloc(runs);
	/* One set of settings for the whole decision, whatever a reload does
	 * meanwhile (runs_reload.c). */
	const struct runs_live live = runs_live(runs);
	char hex[65];
	int64_t spawned = 0;
	uint64_t run_ms;
	int rc;

	if (!r)
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
	snprintf(r->identity, sizeof(r->identity), "%s", who->name);
	if (digest) {
		snprintf(r->idem_key, sizeof(r->idem_key), "%s", req->idempotency_key);
		memcpy(r->idem_digest, digest, sizeof(r->idem_digest));
	}
	r->policy = request_policy(req, st);
	lease_fill_default(r->policy, live.idle_seconds_default);
	if (!r->policy || validate(r, req, &live.limits_max, st) < 0) {
		run_unref(r);
		return -1;
	}
	if (check_record_size(r, req, st) < 0) {
		run_unref(r);
		return -1;
	}
	if (sbx_policy_digest(r->policy, hex, &st->err) < 0) {
		run_unref(r);
		return sbx_rpc_code(st, SBX__V1__CODE__INTERNAL);
	}
	snprintf(r->policy_digest, sizeof(r->policy_digest), "sha256:%s", hex);
	r->output_cap = r->policy->limits->output_kb * 1024;
	r->created_ms = sbx_unix_ms();
	r->launch = SBX__V1__LAUNCH__LAUNCH_COLD;
	/* A sandbox of the warm pool built from this very policy (the same
	 * digest: the same image, limits, mounts, network and allowlist),
	 * unless /data is the caller's own directory (runs_pool.h). From here
	 * r is the member, with the request's per-run parts. */
	if (!r->caller_data && run_register_likely(r, &live, inputs_disk_bytes(r)))
		r = pool_claim(runs, r);
	if ((rc = run_register(r, &live, st)) != 0) {
		if (r->launch == SBX__V1__LAUNCH__LAUNCH_WARM)
			pool_discard(r);
		else
			run_unref(r);
		return rc;
	}
	if (charge_inputs(r, st) < 0) {
		abandon(r);
		return -1;
	}
	if (r->launch == SBX__V1__LAUNCH__LAUNCH_WARM) {
		/* The helper's clock restarts at the claim, after `spawned`. */
		spawned = sbx_mono_ms();
		if (open_egress(r, st) < 0 || pool_start_run(r, st) < 0) {
			abandon(r);
			return -1;
		}
	} else if (make_run_dir(r, &st->err) < 0) {
		sbx_rpc_code_unless_short(st, quota_disk_full(st->err.errnum)
						  ? SBX__V1__CODE__RESOURCE_EXHAUSTED
						  : SBX__V1__CODE__INTERNAL);
		abandon(r);
		return -1;
	} else if (open_egress(r, st) < 0 ||
		   start_helper(r, live.limits_max.files, false, &spawned, st) < 0) {
		abandon(r);
		return -1;
	}
	/* run_seconds counts from Ready here (from the claim for a warm run);
	 * the helper's own clock started a little earlier, somewhere after
	 * `spawned`. */
	run_ms = (uint64_t)r->policy->limits->run_seconds * 1000;
	r->deadline = sbx_mono_ms() + (int64_t)run_ms;
	r->deadline_ms = sbx_unix_ms() + (int64_t)run_ms;
	r->earliest_expiry = spawned + (int64_t)run_ms;
	if (monitor_start(r, &st->err) < 0) {
		sbx_rpc_code(st, SBX__V1__CODE__INTERNAL);
		abandon(r);
		return -1;
	}
	if (respond(r, resp, st) < 0) {
		struct sbx_rpc_status ignored;

		/* Held: once published, the drain may take and free it first. */
		run_ref(r);
		run_publish(r);
		if (run_claim(r, &ignored) == 0)
			run_teardown(r, NULL, &ignored);
		run_unref(r);
		return -1;
	}
	/* Written before the run is published: from then on a teardown or the
	 * drain on another thread may free it. */
	run_audit(r, "run_created",
		  json_pack("{s:s, s:s, s:I, s:s?, s:i, s:i, s:s?, s:s}", "image", r->policy->image,
			    "image_digest", r->image_digest, "deadline_unix_ms",
			    (json_int_t)r->deadline_ms, "input_dir",
			    r->caller_data ? r->data_path : NULL, "inputs", (int)r->n_inputs,
			    "labels", (int)r->n_labels, "idempotency_key",
			    r->idem_key[0] ? r->idem_key : NULL, "launch",
			    r->launch == SBX__V1__LAUNCH__LAUNCH_WARM ? "warm" : "cold"));
	sbx_metrics_add(SBX_M_CREATES, (size_t)r->launch, 1);
	run_publish(r);
	return 0;
}

/* With an idempotency_key: the key's run if there is one (the answer its
 * CreateRun had), else a new run; a repeat that registered first while
 * this one was being validated is found the next time round. */
SBX_HANDLER(create_run, Sbx__V1__CreateRunRequest, Sbx__V1__CreateRunResponse)
{
	const char *key = req->idempotency_key ? req->idempotency_key : "";
	uint8_t digest[32];

	if (!key[0])
		return create(runs, who, req, NULL, resp, st);
	if (idem_key_check(key, st) < 0 || idem_request_digest(req, digest, st) < 0)
		return -1;
	for (int round = 0; round < 3; round++) {
		struct sbx_run *first;
		int rc = idem_repeat(runs, who->name, key, digest, &first, st);

		if (rc == 1) {
			rc = respond(first, resp, st);
			if (rc == 0)
				run_audit(first, "run_create_repeated",
					  json_pack("{s:s}", "idempotency_key", key));
			run_unref(first);
			return rc;
		}
		if (rc < 0 ||
		    (rc = create(runs, who, req, digest, resp, st)) != RUN_REGISTER_REPEAT)
			return rc;
	}
	/* Another attempt with the key kept registering first: it is the one
	 * creating, here. */
	return sbx_rpc_in_progress(
	    st, "idempotency_key %s: its run is still changing; retry with the same key", key);
}
