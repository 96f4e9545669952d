/* SPDX-License-Identifier: Apache-2.0 */
/* The run manager's start-up: its settings from sbxd's config, finding
 * sbx-helper, one sbxd per state directory, removing what a crashed
 * predecessor left (run directories, and run cgroups through `sbx-helper
 * cleanup`), and asking the host once what it can enforce. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "audit.h"
#include "host_id_dir.h"
#include "images.h"
#include "runs_capacity.h"
#include "runs_manager.h"
#include "runs_proc.h"
#include "runs_slots.h"
#include "subids.h"
#include "tree.h"
#include "util.h"

#define HELPER_CMD_TIMEOUT_MS 10000

static int mkdir_p(const char *path, mode_t mode, struct sbx_err *err)
{
	char buf[PATH_MAX];

	if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf))
		return sbx_fail(err, "%s: path too long", path);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0755) < 0 && errno != EEXIST)
			return sbx_fail_errno(err, "mkdir %s", buf);
		*p = '/';
	}
	if (mkdir(buf, mode) < 0 && errno != EEXIST)
		return sbx_fail_errno(err, "mkdir %s", buf);
	return 0;
}

static char *path_join(const char *a, const char *b)
{
	char *s = NULL;

	if (asprintf(&s, "%s/%s", a, b) < 0)
		return NULL;
	return s;
}

static bool executable(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

/* Config, else next to sbxd, else the build tree's ../helper, else the
 * installed tree's (SBX_HELPER_FROM_SBXD: the libexec directory relative to
 * the sbin one, as `cmake --install` and the Debian package lay them out),
 * else PATH. */
static char *find_helper(const char *configured)
{
	char self[PATH_MAX], *slash, *p;
	ssize_t n;
	const char *path = getenv("PATH");

	if (configured)
		return strdup(configured);
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		self[n] = '\0';
		slash = strrchr(self, '/');
		if (slash) {
			*slash = '\0';
			const char *tries[] = {"sbx-helper", "../helper/sbx-helper",
					       SBX_HELPER_FROM_SBXD};

			for (size_t i = 0; i < SBX_ARRAY_SIZE(tries); i++) {
				p = path_join(self, tries[i]);
				if (p && executable(p))
					return p;
				free(p);
			}
		}
	}
	for (const char *d = path ? path : ""; *d;) {
		size_t len = strcspn(d, ":");
		char dir[PATH_MAX];

		snprintf(dir, sizeof(dir), "%.*s", (int)len, d);
		p = path_join(dir[0] ? dir : ".", "sbx-helper");
		if (p && executable(p))
			return p;
		free(p);
		d += len + (d[len] == ':');
	}
	return NULL;
}

/* The helper needs none of sbxd's environment, and whatever credential is
 * in it must not travel: only PATH and the sanitizers' settings go. */
static int build_helper_env(struct runs_settings *cfg, struct sbx_err *err)
{
	static const char *const keep[] = {"ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS"};
	char **env_store = cfg->helper_env;
	size_t n = 0;

	env_store[n] = strdup("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
	if (!env_store[n++])
		return sbx_fail_errno(err, "environment");
	for (size_t i = 0; i < SBX_ARRAY_SIZE(keep); i++) {
		const char *v = getenv(keep[i]);

		if (v && asprintf(&env_store[n], "%s=%s", keep[i], v) >= 0)
			n++;
	}
	env_store[n] = NULL;
	return 0;
}

/* Each live run takes a host uid of its own (common/host_ids.h): runs_max
 * of them must fit in sbxd's subordinate range, or runs would be refused
 * one by one at CreateRun for a reason that was known at start. */
static int check_host_ids(const struct sbx_config *cfg, uint64_t *slots_out, struct sbx_err *err)
{
	uint64_t slots;
	uint32_t runs_max = cfg->runs_max ? cfg->runs_max : 64;
	if (cfg->host_uids_shared)
		return 0;
	if (sbx_subids_slots(&slots, err) < 0)
		return -1;
	*slots_out = slots;
	/* The locks' directory, made and checked now: a service user with no
	 * usable home would otherwise fail every CreateRun. */
	char dir[4096];
	int fd = sbx_host_id_dir_path(cfg->host_id_dir, dir, sizeof(dir), err) < 0
		     ? -1
		     : sbx_host_id_dir_open(dir, err);
	if (fd < 0)
		return sbx_err_prefix(err, "the run host uids' locks (config host_id_dir)");
	close(fd);
	if (slots >= runs_max)
		return 0;
	struct passwd *pw = getpwuid(geteuid());
	const char *user = pw ? pw->pw_name : "?";
	if (slots == 0)
		return sbx_fail(
		    err,
		    "user %s has no subordinate uids and gids (%s, %s), and each run "
		    "takes a host uid of its own: give it a range (`sudo usermod "
		    "--add-subuids 100000-165535 --add-subgids 100000-165535 %s`, any "
		    "range no other user has), or set \"host_uids\": \"shared\" in "
		    "the config (weaker: every run shares sbxd's per-uid kernel counters)",
		    user, SBX_SUBUID_FILE, SBX_SUBGID_FILE, user);
	return sbx_fail(err,
			"runs_max %u: user %s has only %llu subordinate uids and gids for the "
			"%u runs' host uids; lower runs_max or give it a larger range",
			runs_max, user, (unsigned long long)slots, runs_max);
}

static int copy_settings(struct runs_settings *set, const struct sbx_config *cfg,
			 struct sbx_err *err)
{
	if (check_host_ids(cfg, &set->host_uid_slots, err) < 0)
		return -1;
	set->state_dir = strdup(cfg->state_dir ? cfg->state_dir : "/var/lib/sbx");
	set->runs_dir = set->state_dir ? path_join(set->state_dir, "runs") : NULL;
	if (!set->runs_dir)
		return sbx_fail_errno(err, "settings");
	set->helper = find_helper(cfg->helper);
	if (!set->helper || !executable(set->helper))
		return sbx_fail(err,
				"sbx-helper not found%s%s (set \"helper\" in the config, or "
				"install it next to sbxd or at <sbxd's directory>/%s)",
				set->helper ? " or not executable at " : "",
				set->helper ? set->helper : "", SBX_HELPER_FROM_SBXD);
	if (cfg->cgroup_root && !(set->cgroup_root = strdup(cfg->cgroup_root)))
		return sbx_fail_errno(err, "settings");
	set->rlimit_fallback = cfg->rlimit_fallback;
	set->host_uids_shared = cfg->host_uids_shared;
	set->exec_prepare = cfg->exec_prepare;
	if (cfg->host_id_dir && !(set->host_id_dir = strdup(cfg->host_id_dir)))
		return sbx_fail_errno(err, "settings");
	set->runs_max = cfg->runs_max ? cfg->runs_max : 64;
	/* Set by sbx_rpc_fit_exec_fds, which FD_RESERVE counts (rpc.h). */
	set->exec_fds_share = cfg->exec_fds_share ? cfg->exec_fds_share : SBX_EXEC_FDS_PER_RUN_MAX;
	set->max_message_bytes = cfg->max_message_bytes ? cfg->max_message_bytes : (4u << 20);
	set->allow_unpinned = cfg->images.allow_unpinned;
	set->same_host_import = cfg->same_host_import; /* runs_import.c */
	set->same_host_export = cfg->same_host_export;
	set->same_host_record_ms = cfg->same_host_record_ms;
	set->same_host_call_ms = cfg->same_host_call_ms;
	for (size_t i = 0; i < cfg->n_input_dirs && i < SBX_CONFIG_MAX_INPUT_DIRS; i++) {
		/* Resolved once, so a later check compares canonical paths. */
		char *real = realpath(cfg->input_dirs[i], NULL);

		if (!real)
			return sbx_fail_errno(err, "input_dirs: %s", cfg->input_dirs[i]);
		set->input_dirs[set->n_input_dirs++] = real;
	}
	return build_helper_env(set, err);
}

/* One sbxd per state directory: a second one would wipe the first's runs. */
static int lock_state_dir(struct sbx_runs *runs, struct sbx_err *err)
{
	_cleanup_free_ char *path = path_join(runs->cfg.state_dir, "sbxd.lock");

	if (!path)
		return sbx_fail_errno(err, "lock");
	runs->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (runs->lock_fd < 0)
		return sbx_fail_errno(err, "%s", path);
	if (flock(runs->lock_fd, LOCK_EX | LOCK_NB) < 0)
		return sbx_fail_errno(err, "%s: another sbxd uses this state directory", path);
	return 0;
}

/* images.dir, else <state_dir>/images: made when missing, refused when
 * anybody but sbxd's user could change what the runs will mount. */
static int open_images(struct sbx_runs *runs, const struct sbx_config *cfg, struct sbx_err *err)
{
	_cleanup_free_ char *dir = sbx_config_images_dir(cfg);
	_cleanup_free_ char *real = NULL, *runs_real = NULL;
	_cleanup_img_store_ struct img_store *made = NULL;
	size_t n;

	if (!dir)
		return sbx_fail_errnum(err, ENOMEM, "store directory");
	if (img_store_open(dir, true, &made, err) < 0) {
		/* A store others could change is refused, but it is no reason
		 * to refuse the host image too: sbxd starts, says why, and
		 * refuses store images (fail closed for them alone). */
		snprintf(runs->images_down, sizeof(runs->images_down), "%s", err->msg);
		fprintf(stderr,
			"sbxd: images: %s: runs of store images are refused until it is "
			"fixed; \"host\" runs\n",
			runs->images_down);
		sbx_err_clear(err);
		return 0;
	}
	/* The helper opens a run's tree without following any link: the
	 * store is named by the path a link in images.dir leads to. */
	if (!(real = realpath(dir, NULL)) || !(runs_real = realpath(runs->cfg.runs_dir, NULL)))
		return sbx_fail_errno(err, "%s", real ? runs->cfg.runs_dir : dir);
	/* Every start empties runs/: a store in there would go with it. */
	n = strlen(runs_real);
	if (!strncmp(real, runs_real, n) && (real[n] == '/' || !real[n]))
		return sbx_fail(err, "%s: inside %s, which every start of sbxd empties", dir,
				runs->cfg.runs_dir);
	if (!strcmp(real, dir)) {
		runs->images = sbx_steal_ptr(made);
		return 0;
	}
	return img_store_open(real, false, &runs->images, err);
}

/* A crashed predecessor's run directories: nothing in them is worth keeping
 * (the sandboxes died with its control sockets). */
static json_t *remove_stale_runs(struct sbx_runs *runs, struct sbx_err *err)
{
	_cleanup_close_ int fd = open(runs->cfg.runs_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	_cleanup_close_ int list_fd = fd < 0 ? -1 : fcntl(fd, F_DUPFD_CLOEXEC, 3);
	_cleanup_closedir_ DIR *d = list_fd < 0 ? NULL : fdopendir(list_fd);
	json_t *removed;
	struct dirent *de;

	if (!d) {
		sbx_fail_errno(err, "%s", runs->cfg.runs_dir);
		return NULL;
	}
	list_fd = -1; /* the DIR's now */
	if (!(removed = json_array())) {
		sbx_fail_errnum(err, ENOMEM, "%s", runs->cfg.runs_dir);
		return NULL;
	}
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (sbx_remove_tree_at(fd, de->d_name, err) < 0) {
			json_decref(removed);
			sbx_err_prefix(err, "%s", runs->cfg.runs_dir);
			return NULL;
		}
		json_array_append_new(removed, json_string(de->d_name));
	}
	return removed;
}

/* `sbx-helper cleanup` removes the run cgroups of helpers that are gone. */
static json_t *cleanup_cgroups(struct sbx_runs *runs)
{
	const char *args[4] = {"cleanup", NULL, NULL, NULL};
	_cleanup_free_ char *out = NULL;
	struct sbx_err err;
	int status = 0;
	json_t *o = json_object();

	if (runs->cfg.cgroup_root) {
		args[1] = "--cgroup-root";
		args[2] = runs->cfg.cgroup_root;
	}
	if (proc_run_helper(runs->cfg.helper, runs->cfg.helper_env, args, HELPER_CMD_TIMEOUT_MS,
			    &out, &status, &err) < 0) {
		json_object_set_new(o, "error", json_string(err.msg));
		return o;
	}
	json_object_set_new(o, "exit_status",
			    json_integer(WIFEXITED(status) ? WEXITSTATUS(status) : -1));
	json_object_set_new(o, "output", json_string(out));
	return o;
}

bool runs_cleanup_cgroups(struct sbx_runs *runs)
{
	json_t *o = cleanup_cgroups(runs);
	json_t *status = json_object_get(o, "exit_status");
	bool ok = json_is_integer(status) && json_integer_value(status) == 0;

	sbx_audit("cgroup_cleanup", NULL, NULL, NULL, o);
	return ok;
}

/* What the host can enforce, asked once: `sbx-helper check --json`. */
static void check_host(struct sbx_runs *runs)
{
	const char *args[5] = {"check", "--json", NULL, NULL, NULL};
	_cleanup_free_ char *out = NULL;
	struct sbx_err err;
	int status = 0;
	json_t *doc, *cg;

	if (runs->cfg.cgroup_root) {
		args[2] = "--cgroup-root";
		args[3] = runs->cfg.cgroup_root;
	}
	if (proc_run_helper(runs->cfg.helper, runs->cfg.helper_env, args, HELPER_CMD_TIMEOUT_MS,
			    &out, &status, &err) < 0) {
		sbx_audit("host_check_failed", NULL, NULL, NULL,
			  json_pack("{s:s}", "error", err.msg));
		return;
	}
	/* Stdout and stderr share the capture; the JSON document starts at
	 * the first '{'. */
	doc = json_loads(strchr(out, '{') ? strchr(out, '{') : out, JSON_DISABLE_EOF_CHECK, NULL);
	if (!doc) {
		sbx_audit("host_check_failed", NULL, NULL, NULL, json_pack("{s:s}", "output", out));
		return;
	}
	runs->host.userns = json_is_true(json_object_get(json_object_get(doc, "userns"), "ok"));
	runs->host.seccomp = json_is_true(json_object_get(json_object_get(doc, "seccomp"), "ok"));
	cg = json_object_get(doc, "cgroup");
	if (json_is_true(json_object_get(cg, "ok")) &&
	    json_is_string(json_object_get(doc, "cgroup_mode")))
		snprintf(runs->host.cgroup, sizeof(runs->host.cgroup), "%s",
			 json_string_value(json_object_get(doc, "cgroup_mode")));
	json_decref(doc);
}

int runs_startup(struct sbx_runs *runs, const struct sbx_config *cfg, struct sbx_err *err)
{
	struct rlimit rl;
	json_t *dirs, *cgroups;

	runs_live_from(&runs->live, cfg);
	if (copy_settings(&runs->cfg, cfg, err) < 0)
		return sbx_err_prefix(err, "runs");
	/* Twice runs_max: the slots sbxd's runs take are the lowest free ones,
	 * which one-shot runs of the same user may shift. */
	if (!runs->cfg.host_uids_shared &&
	    !(runs->slots = runs_slots_new(2 * (size_t)runs->cfg.runs_max)))
		return sbx_fail_errno(err, "runs: host uid slots");
	/* Each run holds a handful of fds and each running exec four: the
	 * default soft limit of 1024 would be reached long before runs_max. */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
			/* Raising a soft limit to the hard one cannot fail; if it
			 * did, runs beyond the limit fail with EMFILE, each saying so. */
		}
	}
	if (mkdir_p(runs->cfg.state_dir, 0700, err) < 0 || lock_state_dir(runs, err) < 0 ||
	    mkdir_p(runs->cfg.runs_dir, 0700, err) < 0)
		return sbx_err_prefix(err, "state_dir");
	/* A directory left by an earlier sbxd may be more open than mkdir_p
	 * makes one: the runs' policies and uploads are for sbxd alone. */
	if (chmod(runs->cfg.runs_dir, 0700) < 0)
		return sbx_fail_errno(err, "state_dir: chmod %s", runs->cfg.runs_dir);
	/* The store is not the runs' to clean: its trees outlive every sbxd
	 * (only runs/ is a predecessor's leftovers). A half-made import is
	 * the store's own business (the next import removes it). */
	if (open_images(runs, cfg, err) < 0)
		return sbx_err_prefix(err, "images");
	dirs = remove_stale_runs(runs, err);
	if (!dirs)
		return sbx_err_prefix(err, "start-up clean-up");
	cgroups = cleanup_cgroups(runs);
	check_host(runs);
	capacity_measure(&runs->host);
	sbx_audit("startup_cleanup", NULL, NULL, NULL,
		  json_pack("{s:o, s:o, s:s, s:s, s:b, s:b}", "run_dirs_removed", dirs, "cgroups",
			    cgroups, "helper", runs->cfg.helper, "cgroup", runs->host.cgroup,
			    "userns", runs->host.userns, "seccomp", runs->host.seccomp));
	return 0;
}

void runs_settings_free(struct sbx_runs *runs)
{
	free(runs->cfg.state_dir);
	free(runs->cfg.runs_dir);
	free(runs->cfg.helper);
	free(runs->cfg.cgroup_root);
	free(runs->cfg.host_id_dir);
	for (size_t i = 0; i < runs->cfg.n_input_dirs; i++)
		free(runs->cfg.input_dirs[i]);
	for (size_t i = 0; i < SBX_ARRAY_SIZE(runs->cfg.helper_env); i++)
		free(runs->cfg.helper_env[i]);
	memset(&runs->cfg, 0, sizeof(runs->cfg));
	if (runs->images)
		img_store_close(runs->images);
	runs->images = NULL;
	if (runs->lock_fd >= 0)
		close(runs->lock_fd);
	runs->lock_fd = -1;
}
