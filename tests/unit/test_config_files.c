/* SPDX-License-Identifier: Apache-2.0 */
/* Unit test of sbxd's file-table check (server/config/config_limits.c,
 * common/run_files.c): runs_max runs at their ceilings, descriptors and the
 * files their memory may pin through mappings, within half of fs.file-max,
 * checked against the values of hosts other than this one. */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "config.h"
#include "run_files.h"

/* This machine's kernel default (RAM / 10 KiB of 24 GiB) and Linux's
 * default vm.max_map_count; systemd's fs.file-max. */
#define FILE_MAX_KERNEL	 2466112ull
#define MAP_COUNT	 65530ull
#define FILE_MAX_SYSTEMD 9223372036854775807ull

static struct sbx_config config(uint32_t runs_max, uint64_t memory_mb, uint32_t pids)
{
	return (struct sbx_config){
	    .runs_max = runs_max,
	    .limits_max = {.memory_mb = memory_mb, .pids = pids, .files = SBX_RUN_FILES_DEFAULT},
	};
}

static void test_pinned(void)
{
	check(sbx_run_memory_mb(1024, 1024, 256) == 2560,
	      "a run's memory cgroup holds an exec's memory, a full /out and two tmpfs");
	check(sbx_run_pinned_files(1024, 256, MAP_COUNT, true) == (1ull << 30) / 384,
	      "1 GiB pins 2796202 files: one per 384 bytes");
	check(sbx_run_pinned_files(1048576, 4096, MAP_COUNT, true) == 4096 * MAP_COUNT,
	      "1 TiB of 4096 processes: vm.max_map_count each is the lower bound");
	check(sbx_run_pinned_files(16, 64, MAP_COUNT, false) == 64 * MAP_COUNT,
	      "rlimit fallback: the memory limit counts no kernel memory");
	check(sbx_run_pinned_files(1048576, 8, 0, false) == 8ull * INT32_MAX,
	      "vm.max_map_count unknown: INT_MAX each, the sysctl's own ceiling");
	check(sbx_runs_fit(FILE_MAX_KERNEL, SBX_RUN_FILES_DEFAULT, 0) == 4 &&
		  sbx_runs_fit(FILE_MAX_KERNEL, SBX_RUN_FILES_DEFAULT, (1ull << 30) / 384) == 0 &&
		  sbx_runs_fit(100, 0, 0) == UINT64_MAX &&
		  sbx_runs_fit(FILE_MAX_SYSTEMD, UINT64_MAX, 1) == 0,
	      "runs_fit: half of file-max over a run's files; none when a run's files wrap");
}

static void test_fit(void)
{
	struct sbx_err err = {0};
	struct sbx_config cfg = config(64, 1048576, 4096);
	int rc;

	/* The defaults: what one exec pinned (~300k) is nothing next to this. */
	rc = sbx_config_fit_files(&cfg, FILE_MAX_SYSTEMD, MAP_COUNT, false, false, &err);
	check(rc == 0 && cfg.limits_max.files == SBX_RUN_FILES_DEFAULT &&
		  cfg.limits_max.pinned_files == 4096 * MAP_COUNT,
	      "systemd's fs.file-max holds the defaults as they are");

	cfg = config(64, 1048576, 4096);
	rc = sbx_config_fit_files(&cfg, FILE_MAX_KERNEL, MAP_COUNT, false, false, &err);
	check(rc < 0 && strncmp(err.msg, "limits_max.memory_mb: ", 22) == 0 &&
		  strstr(err.msg, "sysctl -w fs.file-max=") &&
		  strstr(err.msg, "packaging/sysctl.d/50-sbx.conf"),
	      "the kernel's fs.file-max: refused, naming the sysctl and the drop-in (%s)", err.msg);

	/* 2 runs of 160 MiB (no /out, no tmpfs) pin 436906 each; 616528 is each one's half share:
	 * 179622 descriptors are left. */
	cfg = config(2, 160, 256);
	rc = sbx_config_fit_files(&cfg, FILE_MAX_KERNEL, MAP_COUNT, false, false, &err);
	check(rc == 0 && cfg.limits_max.pinned_files == 436906 &&
		  cfg.limits_max.files == FILE_MAX_KERNEL / 2 / 2 - 436906,
	      "an unwritten descriptor budget shrinks to what the pinned files leave (%llu)",
	      (unsigned long long)cfg.limits_max.files);

	cfg = config(2, 160, 256);
	rc = sbx_config_fit_files(&cfg, FILE_MAX_KERNEL, MAP_COUNT, true, false, &err);
	check(rc < 0 && strncmp(err.msg, "limits_max.files: ", 18) == 0 &&
		  strstr(err.msg, "fs.file-max 2466112") && strstr(err.msg, "sysctl -w"),
	      "a written one that does not fit is refused (%s)", err.msg);

	/* Descriptors alone fit (2 x 262144 < 1233056); the memory path does not. */
	cfg = config(2, 1024, 256);
	rc = sbx_config_fit_files(&cfg, FILE_MAX_KERNEL, MAP_COUNT, true, false, &err);
	check(rc < 0 && strstr(err.msg, "2796202 files through mappings"),
	      "the memory path is counted: 1 GiB runs are refused where descriptors fit (%s)",
	      err.msg);

	/* /out and the tmpfs mounts are the run's memory too: 96 + 32 + 2 x 16
	 * is the 160 MiB above. */
	cfg = config(2, 96, 256);
	cfg.limits_max.out_mb = 32;
	cfg.limits_max.tmp_mb = 16;
	rc = sbx_config_fit_files(&cfg, FILE_MAX_KERNEL, MAP_COUNT, false, false, &err);
	check(rc == 0 && cfg.limits_max.pinned_files == 436906,
	      "out_mb and tmp_mb count in what a run may pin");

	cfg = config(2, 1024, 256);
	cfg.rlimit_fallback = true;
	rc = sbx_config_fit_files(&cfg, FILE_MAX_SYSTEMD, MAP_COUNT, false, false, &err);
	check(rc == 0 && cfg.limits_max.pinned_files == 256 * MAP_COUNT,
	      "rlimit fallback: the maps of every process are the bound");
}

int main(void)
{
	test_pinned();
	test_fit();
	return check_done();
}
