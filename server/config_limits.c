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
#include "policy.h"
#include "run_files.h"
#include "strict_json.h"

#define PID_MAX_PATH	    "/proc/sys/kernel/pid_max"
#define FILE_MAX_PATH	    "/proc/sys/fs/file-max"
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

/* The host's fs.file-max (one file table for the whole host), or 0 when it
 * cannot be read. */
static uint64_t host_file_max(void)
{
	FILE *f = fopen(FILE_MAX_PATH, "re");
	unsigned long long n = 0;

	if (f) {
		if (fscanf(f, "%llu", &n) != 1)
			n = 0;
		fclose(f);
	}
	return n;
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

/* Runs at their budget, all of them at once (runs_max), may take at most
 * half of fs.file-max: the rest is the host's (sbxd itself, logins,
 * services), which otherwise get ENFILE. An unwritten budget shrinks to fit;
 * a written one that does not fit is refused. */
static int check_files(struct sbx_config *cfg, bool written, bool pids_written, struct sbx_err *err)
{
	uint64_t share = host_file_max() / 2;
	uint64_t *files = &cfg->limits_max.files;

	if (share == 0)
		return fit_pids(&cfg->limits_max, pids_written, err);
	if (!written) {
		if (*files * cfg->runs_max <= share)
			return fit_pids(&cfg->limits_max, pids_written, err);
		*files = share / cfg->runs_max;
		fprintf(stderr,
			"sbxd: limits_max.files is %llu open files per run (and an unwritten "
			"limits_max.pids at most %llu): runs_max %u runs of %llu would pass "
			"half of this host's fs.file-max %llu\n",
			(unsigned long long)*files, (unsigned long long)(*files / SBX_NOFILE_MIN),
			cfg->runs_max, (unsigned long long)SBX_RUN_FILES_DEFAULT,
			(unsigned long long)share * 2);
		if (*files < (uint64_t)SBX_PIDS_MIN * SBX_NOFILE_MIN)
			return sbx_fail(
			    err,
			    "limits_max.files: half of this host's fs.file-max %llu over "
			    "runs_max %u leaves %llu open files per run, too few for any "
			    "run; lower runs_max or raise fs.file-max",
			    (unsigned long long)share * 2, cfg->runs_max,
			    (unsigned long long)*files);
		return fit_pids(&cfg->limits_max, pids_written, err);
	}
	if (*files > share / cfg->runs_max)
		return sbx_fail(err,
				"limits_max.files: runs_max %u runs of %llu open files would take "
				"%llu, more than half of this host's fs.file-max %llu; lower "
				"limits_max.files or runs_max",
				cfg->runs_max, (unsigned long long)*files,
				(unsigned long long)*files * cfg->runs_max,
				(unsigned long long)share * 2);
	return fit_pids(&cfg->limits_max, pids_written, err);
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
	if (check_files(cfg, v && json_object_get(v, "files"), v && json_object_get(v, "pids"),
			err) < 0)
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
