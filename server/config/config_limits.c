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
#include "config_keys.h"
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

/* The host's pid_max bounds the default: a ceiling above it is none. */
static long long default_pids(long long def)
{
	json_int_t pid_max = host_pid_max();

	return pid_max < def ? pid_max : def;
}

/* Cores, as a policy writes them, kept as millis. */
static int parse_cpu(struct sbx_config *cfg, void *field, json_t *v, const char *where,
		     struct sbx_err *err)
{
	double m = json_is_number(v) ? json_number_value(v) * 1000.0 : -1;

	(void)cfg, (void)where;
	if (!(m >= SBX_CPU_MILLIS_MIN - 0.5 && m < SBX_CPU_MILLIS_MAX + 0.5))
		return sbx_fail(err, "limits_max.cpu: must be a number %g..%g",
				SBX_CPU_MILLIS_MIN / 1000.0, SBX_CPU_MILLIS_MAX / 1000.0);
	*(uint32_t *)field = (uint32_t)(m + 0.5);
	return 0;
}
/* The cpu row's words say the policy's numbers in cores. */
_Static_assert(SBX_CPU_MILLIS_MIN == 10 && SBX_CPU_MILLIS_MAX == 1024000,
	       "limits_max.cpu's range_doc and def_doc say 0.01..1024");

/* More pids than the host has is no ceiling at all. */
static int check_pids(struct sbx_config *cfg, void *base, json_t *obj, struct sbx_err *err)
{
	const struct sbx_limits_max *l = base;
	json_int_t pid_max = host_pid_max();

	(void)cfg, (void)obj;
	if ((json_int_t)l->pids > pid_max)
		return sbx_fail(err, "limits_max.pids: %u is above this host's pid_max %lld",
				l->pids, (long long)pid_max);
	return 0;
}

#define LIM(field) .offset = offsetof(struct sbx_limits_max, field)
/* The policy's own maxima are the defaults: a host that says nothing
 * allows what the format allows, but pids, files and uploads. */
static const struct sbx_config_key limits_keys[] = {
    {"cpu", SBX_CONFIG_U32, SBX_CPU_MILLIS_MIN, SBX_CPU_MILLIS_MAX, SBX_CPU_MILLIS_MAX,
     LIM(cpu_millis), .parse = parse_cpu, .type_doc = "number", .range_doc = "0.01..1024",
     .def_doc = "1024", .doc = "cores a policy's `limits.cpu` may ask"},
    {"memory_mb", SBX_CONFIG_U64, SBX_MEMORY_MB_MIN, SBX_MEMORY_MB_MAX, SBX_MEMORY_MB_MAX,
     LIM(memory_mb), .doc = "`limits.memory_mb`"},
    {"script_seconds", SBX_CONFIG_U32, 1, SBX_SCRIPT_SECONDS_MAX, SBX_SCRIPT_SECONDS_MAX,
     LIM(script_seconds), .doc = "`limits.script_seconds`"},
    {"run_seconds", SBX_CONFIG_U32, 1, SBX_RUN_SECONDS_MAX, SBX_RUN_SECONDS_MAX, LIM(run_seconds),
     .doc = "`limits.run_seconds`"},
    {"idle_seconds", SBX_CONFIG_U32, 1, SBX_RUN_SECONDS_MAX, SBX_RUN_SECONDS_MAX, LIM(idle_seconds),
     .doc = "`limits.idle_seconds`, a run's lease"},
    {"out_mb", SBX_CONFIG_U64, 1, SBX_OUT_MB_MAX, SBX_OUT_MB_MAX, LIM(out_mb),
     .doc = "`limits.out_mb`"},
    {"tmp_mb", SBX_CONFIG_U64, 1, SBX_TMP_MB_MAX, SBX_TMP_MB_MAX, LIM(tmp_mb),
     .doc = "`limits.tmp_mb`"},
    {"output_kb", SBX_CONFIG_U64, 1, SBX_OUTPUT_KB_MAX, SBX_OUTPUT_KB_MAX, LIM(output_kb),
     .doc = "`limits.output_kb`"},
    {"input_bytes", SBX_CONFIG_U64, 0, BYTES_MAX, DEFAULT_INPUT_BYTES, LIM(input_bytes),
     .doc = "the sum of a CreateRun's `inputs[].size`"},
    {"inputs", SBX_CONFIG_U32, 0, INPUTS_MAX, INPUTS_MAX, LIM(inputs),
     .doc = "entries in a CreateRun's `inputs`"},
    {"files", SBX_CONFIG_U64, (long long)SBX_PIDS_MIN *SBX_NOFILE_MIN, MB_MAX,
     SBX_RUN_FILES_DEFAULT, LIM(files),
     .def_note = "less when unwritten and half of fs.file-max is short",
     .doc = "open files a run may hold, divided among its processes; `runs_max` runs of "
	    "it must fit in half of fs.file-max"},
    {"pids", SBX_CONFIG_U32, SBX_PIDS_MIN, SBX_PIDS_MAX, DEFAULT_PIDS_MAX, LIM(pids),
     .host_def = default_pids, .check = check_pids, .range_note = "at most kernel.pid_max",
     .def_note = "or kernel.pid_max if lower; less when unwritten and `files` is short",
     .doc = "`limits.pids`; each process gets at least 16 of `files`"},
};
#undef LIM
_Static_assert(SBX_NOFILE_MIN == 16, "limits_max.pids's doc says 16 files per process");

const struct sbx_config_section sbx_config_limits_section = {
    "limits_max",
    "The administrator's ceilings on what a CreateRun's policy may ask "
    "([the policy](policy.md)), checked at CreateRun.",
    limits_keys,
    SBX_CONFIG_N(limits_keys),
};

#define QUOTA(field) .offset = offsetof(struct sbx_quotas, field)
static const struct sbx_config_key quota_keys[] = {
    {"identity_mb", SBX_CONFIG_U64, 0, MB_MAX, DEFAULT_IDENTITY_MB, QUOTA(identity_mb),
     .doc = "one identity's inputs and output spill together"},
    {"host_mb", SBX_CONFIG_U64, 0, MB_MAX, 0, QUOTA(host_mb), .doc = "every identity's together"},
    {"reserve_mb", SBX_CONFIG_U64, 0, MB_MAX, DEFAULT_RESERVE_MB, QUOTA(reserve_mb),
     .doc = "free space on state_dir that no write may take"},
    {"reserve_inodes", SBX_CONFIG_U64, 0, BYTES_MAX, DEFAULT_RESERVE_INODES, QUOTA(reserve_inodes),
     .doc = "free inodes on state_dir that no CreateRun may take"},
    {"audit_identity_kb_per_s", SBX_CONFIG_U64, 0, MB_MAX, DEFAULT_AUDIT_KB_PER_S,
     QUOTA(audit_identity_kb_per_s), .doc = "an identity's audit log lines"},
};
#undef QUOTA

const struct sbx_config_section sbx_config_quotas_section = {
    "quotas",
    "What callers' uploads and kept output may take of state_dir, and of the "
    "audit log; 0 turns a quota off.",
    quota_keys,
    SBX_CONFIG_N(quota_keys),
};

#define CAP(field) .offset = offsetof(struct sbx_config_capacity, field)
static const struct sbx_config_key capacity_keys[] = {
    {"cpu_millis", SBX_CONFIG_U64, 0, 1ll << 30, 0, CAP(cpu_millis),
     .def_doc = "0: measured, the CPUs sbxd may use (its affinity, its cgroup's cpu.max)",
     .doc = "the CPUs runs share, x 1000 (policies' `limits.cpu_millis`)"},
    {"memory_mb", SBX_CONFIG_U64, 0, MB_MAX, 0, CAP(memory_mb),
     .def_doc = "0: measured, MemTotal or sbxd's cgroup's memory.max if lower",
     .doc = "the memory runs share"},
    {"cpu_overcommit_percent", SBX_CONFIG_U32, 10, 10000, 400, CAP(cpu_overcommit_percent),
     .doc = "CPU runs may commit, in percent of `cpu_millis`: CPU is throttled, never "
	    "exhausted, so more than 100 only slows runs down"},
    {"memory_overcommit_percent", SBX_CONFIG_U32, 10, 1000, 100, CAP(memory_overcommit_percent),
     .doc = "memory runs may commit, in percent of `memory_mb`: past 100 the host's OOM "
	    "killer may end any process, sbxd's too"},
    {"memory_reserve_mb", SBX_CONFIG_U64, 0, MB_MAX, SBX_MEMORY_RESERVE_AUTO,
     CAP(memory_reserve_mb),
     .def_doc = "1024, or an eighth of the memory if that is less (a small host still runs a "
		"default policy)",
     .doc = "memory no run may commit: the host's and sbxd's own"},
};
#undef CAP

const struct sbx_config_section sbx_config_capacity_section = {
    "capacity",
    "What runs may commit of this host (server/runs/runs_capacity.c): a run commits its "
    "policy's `limits.cpu_millis` while its sandbox lives, and its memory bound "
    "(`memory_mb + out_mb + 2 x tmp_mb`) until it is torn down. A policy that can never "
    "fit is refused with INVALID_ARGUMENT, one that does not fit beside the runs "
    "committed now with RESOURCE_EXHAUSTED ([sbxd](../operator/sbxd.md#capacity)).",
    capacity_keys,
    SBX_CONFIG_N(capacity_keys),
};

void sbx_config_limits_defaults(struct sbx_config *cfg)
{
	struct sbx_err err;

	/* Numbers alone: nothing to allocate, nothing to fail. */
	sbx_config_section_defaults(&sbx_config_limits_section, &cfg->limits_max, &err);
	sbx_config_section_defaults(&sbx_config_quotas_section, &cfg->quotas, &err);
	sbx_config_section_defaults(&sbx_config_capacity_section, &cfg->capacity, &err);
}

int sbx_config_limits_check(struct sbx_config *cfg, void *base, json_t *root, struct sbx_err *err)
{
	json_t *v = json_object_get(root, "limits_max");

	(void)base;
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
