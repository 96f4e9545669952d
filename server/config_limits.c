/* SPDX-License-Identifier: Apache-2.0 */
/* sbxd's config: the administrator's ceilings on what a policy may ask
 * ("limits_max") and the disk quotas of state_dir and the audit log
 * ("quotas").
 *
 * The policy parser's own ranges are what the format allows anywhere; a
 * host needs less: a pids limit above pid_max lets one exec take every pid
 * of the host, and an unbounded upload fills state_dir for everyone. The
 * ceilings are checked at CreateRun (runs_create.c), the quotas where the
 * bytes are written (runs_quota.c). */
#include <stdio.h>
#include <stdlib.h>

#include <jansson.h>

#include "config.h"
#include "config_rules.h"
#include "host_files.h"
#include "policy.h"
#include "run_files.h"
#include "strict_json.h"

#define PID_MAX_PATH	    "/proc/sys/kernel/pid_max"
#define DEFAULT_PIDS_MAX    4096
#define DEFAULT_INPUT_BYTES (64ull << 30) /* 64 GiB per run */
#define INPUTS_MAX	    10000	  /* the most a CreateRun may list at all */
#define DEFAULT_IDENTITY_MB 8192
#define DEFAULT_RESERVE_MB  256
/* The inodes of the default reserve at ext4's ratio of one per 16 KiB. */
#define DEFAULT_RESERVE_INODES 16384
/* ~50 lines a second, 1 MiB at once: 1.3 GiB a day at most per identity. */
#define DEFAULT_AUDIT_KB_PER_S 16
#define MB_MAX		       (1ll << 40)
#define BYTES_MAX	       (1ll << 53) /* what a JSON number holds exactly */

/* The host's pid_max, or the format's maximum when it cannot be read. */
static json_int_t host_pid_max(void)
{
	FILE *f = fopen(PID_MAX_PATH, "re");
	long long n = 0;

	if (f) {
		if (fscanf(f, "%lld", &n) != 1)
			n = 0;
		fclose(f);
	}
	return n > 0 ? (json_int_t)n : SBX_PIDS_MAX;
}

/* A run's files are divided among its pids (run_files.h): the pids ceiling
 * must leave each at least SBX_NOFILE_MIN. An unwritten ceiling follows the
 * budget down, as an unwritten default follows a lower ceiling elsewhere. */
static int fit_pids(struct sbx_limits_max *l, bool written, struct sbx_err *err)
{
	uint64_t most = l->files / SBX_NOFILE_MIN;

	if (l->pids <= most)
		return 0;
	if (written)
		return sbx_fail(err,
				"limits_max.pids: %u processes at %d open files each need %llu, "
				"more than limits_max.files %llu; lower pids or raise files",
				l->pids, SBX_NOFILE_MIN,
				(unsigned long long)l->pids * SBX_NOFILE_MIN,
				(unsigned long long)l->files);
	l->pids = (uint32_t)most;
	return 0;
}

/* A run's memory cgroup at the ceilings (run_files.h). */
static uint64_t run_mb(const struct sbx_limits_max *l)
{
	return sbx_run_memory_mb(l->memory_mb, l->out_mb, l->tmp_mb);
}

/* What a run at its ceilings may pin through mappings (run_files.h): the
 * memory cgroup bounds it unless the runs may fall back to rlimits. */
static uint64_t pinned_files(const struct sbx_config *cfg, uint64_t max_map_count)
{
	return sbx_run_pinned_files(run_mb(&cfg->limits_max), cfg->limits_max.pids, max_map_count,
				    !cfg->rlimit_fallback);
}

/* The fix for a file table too small, the same in every refusal: the value
 * runs_max runs of `each` need, and the drop-in that keeps it. */
#define FILE_MAX_FIX                                                                               \
	"raise fs.file-max (sysctl -w fs.file-max=%llu, kept across boots by "                     \
	"packaging/sysctl.d/50-sbx.conf in /etc/sysctl.d/, as systemd does)"

static unsigned long long file_max_needed(const struct sbx_config *cfg, uint64_t each)
{
	return 2ull * cfg->runs_max * each;
}

/* Runs at their ceilings, all of them at once (runs_max), may take at most
 * half of fs.file-max: the rest is the host's (sbxd itself, logins,
 * services), which otherwise get ENFILE. A run takes its descriptors
 * (limits_max.files) and the files its memory may pin through mappings.
 * The memory path is refused when it does not fit; an unwritten descriptor
 * budget then shrinks to what is left, a written one that does not fit is
 * refused. */
int sbx_config_fit_files(struct sbx_config *cfg, uint64_t file_max, uint64_t max_map_count,
			 bool written, bool pids_written, struct sbx_err *err)
{
	uint64_t share = file_max / 2, pinned = pinned_files(cfg, max_map_count), room;
	uint64_t *files = &cfg->limits_max.files;

	cfg->limits_max.pinned_files = pinned;
	if (share == 0)
		goto fit;
	if (pinned > share / cfg->runs_max)
		return sbx_fail(err,
				"limits_max.memory_mb: runs_max %u runs of %llu MiB (memory_mb + "
				"out_mb + 2 x tmp_mb) may each pin %llu files through mappings "
				"(one per %d bytes of kernel memory, at most vm.max_map_count %llu "
				"per process), more than half of this host's fs.file-max %llu "
				"holds; " FILE_MAX_FIX
				", or lower limits_max.memory_mb, out_mb, tmp_mb or runs_max",
				cfg->runs_max, (unsigned long long)run_mb(&cfg->limits_max),
				(unsigned long long)pinned, SBX_PINNED_FILE_BYTES,
				(unsigned long long)max_map_count, (unsigned long long)file_max,
				file_max_needed(cfg, pinned + *files));
	room = share / cfg->runs_max - pinned;
	if (!written && *files > room) {
		uint64_t asked = *files;

		*files = room;
		fprintf(stderr,
			"sbxd: limits_max.files is %llu open files per run (and an unwritten "
			"limits_max.pids at most %llu): runs_max %u runs of %llu and of the %llu "
			"files each may pin through mappings would pass half of this host's "
			"fs.file-max %llu\n",
			(unsigned long long)*files, (unsigned long long)(*files / SBX_NOFILE_MIN),
			cfg->runs_max, (unsigned long long)asked, (unsigned long long)pinned,
			(unsigned long long)file_max);
		if (*files < (uint64_t)SBX_PIDS_MIN * SBX_NOFILE_MIN)
			return sbx_fail(err,
					"limits_max.files: half of this host's fs.file-max %llu "
					"over runs_max %u, less the %llu files each run may pin "
					"through mappings, leaves %llu open files per run, too few "
					"for any run; " FILE_MAX_FIX ", or lower runs_max",
					(unsigned long long)file_max, cfg->runs_max,
					(unsigned long long)pinned, (unsigned long long)*files,
					file_max_needed(cfg, pinned + asked));
	}
	if (*files > room)
		return sbx_fail(
		    err,
		    "limits_max.files: runs_max %u runs of %llu open files and of the "
		    "%llu files each may pin through mappings would take %llu, more "
		    "than half of this host's fs.file-max %llu; " FILE_MAX_FIX
		    ", or lower limits_max.files or runs_max",
		    cfg->runs_max, (unsigned long long)*files, (unsigned long long)pinned,
		    (unsigned long long)(*files + pinned) * cfg->runs_max,
		    (unsigned long long)file_max, file_max_needed(cfg, pinned + *files));
fit:
	if (fit_pids(&cfg->limits_max, pids_written, err) < 0)
		return -1;
	/* Fewer pids pin fewer files: what Health reports is the final figure. */
	cfg->limits_max.pinned_files = pinned_files(cfg, max_map_count);
	return 0;
}

int sbx_config_check_files(struct sbx_config *cfg, bool written, bool pids_written,
			   struct sbx_err *err)
{
	return sbx_config_fit_files(cfg, sbx_host_file_max(), sbx_host_max_map_count(), written,
				    pids_written, err);
}

void sbx_config_limits_defaults(struct sbx_config *cfg)
{
	json_int_t pid_max = host_pid_max();

	cfg->limits_max = (struct sbx_limits_max){
	    .cpu_millis = SBX_CPU_MILLIS_MAX,
	    .memory_mb = SBX_MEMORY_MB_MAX,
	    .script_seconds = SBX_SCRIPT_SECONDS_MAX,
	    .run_seconds = SBX_RUN_SECONDS_MAX,
	    .idle_seconds = SBX_RUN_SECONDS_MAX,
	    .pids = (uint32_t)(pid_max < DEFAULT_PIDS_MAX ? pid_max : DEFAULT_PIDS_MAX),
	    .out_mb = SBX_OUT_MB_MAX,
	    .tmp_mb = SBX_TMP_MB_MAX,
	    .output_kb = SBX_OUTPUT_KB_MAX,
	    .input_bytes = DEFAULT_INPUT_BYTES,
	    .inputs = INPUTS_MAX,
	    .files = SBX_RUN_FILES_DEFAULT,
	};
	cfg->quotas = (struct sbx_quotas){
	    .identity_mb = DEFAULT_IDENTITY_MB,
	    .host_mb = 0,
	    .reserve_mb = DEFAULT_RESERVE_MB,
	    .reserve_inodes = DEFAULT_RESERVE_INODES,
	    .audit_identity_kb_per_s = DEFAULT_AUDIT_KB_PER_S,
	};
}

#define GET(obj, where, key, min, max, field) CONFIG_GET(obj, where, key, min, max, field, err)

static const char *const limits_keys[] = {
    "cpu",	 "memory_mb",	"script_seconds", "run_seconds",  "pids",  "out_mb", "tmp_mb",
    "output_kb", "input_bytes", "inputs",	  "idle_seconds", "files", NULL};

static int parse_limits_max(struct sbx_limits_max *l, json_t *v, struct sbx_err *err)
{
	const char *w = "limits_max";
	json_int_t pid_max = host_pid_max();
	json_t *cpu;

	if (!json_is_object(v))
		return sbx_fail(err, "limits_max: must be an object");
	if (sbx_json_check_keys(v, w, limits_keys, err) < 0)
		return -1;
	if ((cpu = json_object_get(v, "cpu"))) {
		double m = json_is_number(cpu) ? json_number_value(cpu) * 1000.0 : -1;

		if (!(m >= SBX_CPU_MILLIS_MIN - 0.5 && m < SBX_CPU_MILLIS_MAX + 0.5))
			return sbx_fail(err, "limits_max.cpu: must be a number %g..%g",
					SBX_CPU_MILLIS_MIN / 1000.0, SBX_CPU_MILLIS_MAX / 1000.0);
		l->cpu_millis = (uint32_t)(m + 0.5);
	}
	if (GET(v, w, "memory_mb", SBX_MEMORY_MB_MIN, SBX_MEMORY_MB_MAX, l->memory_mb) < 0 ||
	    GET(v, w, "script_seconds", 1, SBX_SCRIPT_SECONDS_MAX, l->script_seconds) < 0 ||
	    GET(v, w, "run_seconds", 1, SBX_RUN_SECONDS_MAX, l->run_seconds) < 0 ||
	    GET(v, w, "idle_seconds", 1, SBX_RUN_SECONDS_MAX, l->idle_seconds) < 0 ||
	    GET(v, w, "out_mb", 1, SBX_OUT_MB_MAX, l->out_mb) < 0 ||
	    GET(v, w, "tmp_mb", 1, SBX_TMP_MB_MAX, l->tmp_mb) < 0 ||
	    GET(v, w, "output_kb", 1, SBX_OUTPUT_KB_MAX, l->output_kb) < 0 ||
	    GET(v, w, "input_bytes", 0, BYTES_MAX, l->input_bytes) < 0 ||
	    GET(v, w, "inputs", 0, INPUTS_MAX, l->inputs) < 0 ||
	    GET(v, w, "files", (json_int_t)SBX_PIDS_MIN * SBX_NOFILE_MIN, MB_MAX, l->files) < 0)
		return -1;
	if (GET(v, w, "pids", SBX_PIDS_MIN, SBX_PIDS_MAX, l->pids) < 0)
		return -1;
	/* More pids than the host has is no ceiling at all. */
	if ((json_int_t)l->pids > pid_max)
		return sbx_fail(err, "limits_max.pids: %u is above this host's pid_max %lld",
				l->pids, (long long)pid_max);
	return 0;
}

static const char *const quota_keys[] = {
    "identity_mb", "host_mb", "reserve_mb", "reserve_inodes", "audit_identity_kb_per_s", NULL};

static int parse_quotas(struct sbx_quotas *q, json_t *v, struct sbx_err *err)
{
	const char *w = "quotas";

	if (!json_is_object(v))
		return sbx_fail(err, "quotas: must be an object");
	if (sbx_json_check_keys(v, w, quota_keys, err) < 0)
		return -1;
	return GET(v, w, "identity_mb", 0, MB_MAX, q->identity_mb) < 0 ||
		       GET(v, w, "host_mb", 0, MB_MAX, q->host_mb) < 0 ||
		       GET(v, w, "reserve_mb", 0, MB_MAX, q->reserve_mb) < 0 ||
		       GET(v, w, "reserve_inodes", 0, BYTES_MAX, q->reserve_inodes) < 0 ||
		       GET(v, w, "audit_identity_kb_per_s", 0, MB_MAX, q->audit_identity_kb_per_s) <
			   0
		   ? -1
		   : 0;
}

int sbx_config_parse_limits(struct sbx_config *cfg, void *root, struct sbx_err *err)
{
	json_t *v;

	if ((v = json_object_get(root, "limits_max")) &&
	    parse_limits_max(&cfg->limits_max, v, err) < 0)
		return -1;
	if ((v = json_object_get(root, "quotas")) && parse_quotas(&cfg->quotas, v, err) < 0)
		return -1;
	v = json_object_get(root, "limits_max");
	if (sbx_config_check_files(cfg, v && json_object_get(v, "files"),
				   v && json_object_get(v, "pids"), err) < 0)
		return -1;
	/* limits.pids bounds a run (its execs share it), so runs_max full runs
	 * may take runs_max times the ceiling. A warning, not a refusal: the
	 * defaults (64 runs of up to 4096) exceed a common pid_max of 32768,
	 * and each run stays within its own bound either way. */
	if ((uint64_t)cfg->runs_max * cfg->limits_max.pids > (uint64_t)host_pid_max())
		fprintf(stderr,
			"sbxd: warning: runs_max %u times limits_max.pids %u is %llu, above this "
			"host's pid_max %lld: full runs together can take every pid of the "
			"host; lower either\n",
			cfg->runs_max, cfg->limits_max.pids,
			(unsigned long long)cfg->runs_max * cfg->limits_max.pids,
			(long long)host_pid_max());
	return 0;
}
